//! The keeper process (`nodeward-keeper <data_dir>`) once it runs: the parent of every task of one
//! data directory. The protocol is in [`super`]; how the process starts is in [`crate::daemon`].
//!
//! Start-up of the served process: it leaves the agent's session (`setsid`), sends its stderr to
//! `<data_dir>/keeper.log`, writes `keeper.pid`, raises its own open-file limit (five descriptors
//! per task) and serves.
//!
//! The loop: one `epoll(7)` set ([`crate::poller`]) over the listening socket, the agent's
//! connection, a signal pipe, and each task's pidfd and output pipes, each registered once and
//! removed before it is closed; the wait times out at the next drain deadline. Every descriptor
//! but the listener is non-blocking; output to the agent is queued, so a slow agent never stops
//! the keeper from draining tasks' output into their log files. One read buffer serves all tasks.
//!
//! A task's end is handled the way the agent's own waiter did before the keeper: reap, SIGKILL the
//! rest of its process group, report, then drain its pipes for [`DRAIN_AFTER_EXIT`]; pipes still
//! open then are held by a process that left the group, which is killed, and drained
//! [`DRAIN_AFTER_EXIT`] more at most.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::daemon::{protect_from_oom, raise_nofile};
use crate::logs::Stream;
use crate::poller::{Poller, READ, WRITE};
use crate::spawn::{Inherit, Spawner};
use crate::sys::{signal_group, DRAIN_AFTER_EXIT};
use crate::task::{drain_timeout, Task};
use crate::{Event, Exit, Request, PID_FILE, PROTOCOL_VERSION, SOCKET_FILE};

/// The longest message the keeper takes from the agent (a task's environment and arguments).
const MAX_LINE: usize = 8 << 20;
/// Output queued for an agent that does not read it; past this the connection is dropped.
const MAX_QUEUED: usize = 16 << 20;
/// How long a new keeper waits for its first agent before it ends (when it holds no task).
const FIRST_CONNECT: Duration = Duration::from_secs(30);
/// The keeper's log is started afresh at start-up once it has grown past this.
const MAX_LOG: u64 = 1 << 20;
/// How long a keeper stopped by SIGTERM waits for its killed tasks to be reaped.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// While no agent is connected, how often the keeper checks that its socket is still there.
const SOCKET_CHECK: Duration = Duration::from_secs(10);
/// Bytes read from a pipe or the agent at a time (one buffer for the whole keeper).
const CHUNK: usize = 64 * 1024;

/// The tokens of the keeper's own descriptors in its epoll set; a task's are
/// `id * TASK_TOKENS + EXIT | OUT | ERR`, ids counting from 1.
const LISTENER: u64 = 0;
const SIGNALS: u64 = 1;
const CONN: u64 = 2;
const TASK_TOKENS: u64 = 4;
const EXIT: u64 = 1;
const OUT: u64 = 2;
const ERR: u64 = 3;

pub(crate) struct Keeper {
    listener: UnixListener,
    conn: Option<UnixStream>,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// Whether the connection is watched for writing (while output to it is queued).
    conn_writing: bool,
    /// The reading end of the signal pipe, watched by the poller (a signal arrived: stop).
    _signals: UnixStream,
    /// By id (the token base of the task's descriptors).
    tasks: BTreeMap<u64, Task>,
    /// The ids of the tasks not forgotten yet, by PID, oldest first: what the agent's requests
    /// name. More than one only when a task's PID was given to a new task after the first had
    /// exited and before the agent forgot it (see `named`).
    by_pid: HashMap<i32, Vec<u64>>,
    next_id: u64,
    /// The tasks whose pipes are being drained after their exit (a drain deadline is set).
    draining: BTreeSet<u64>,
    /// The tasks something happened to that can have made them done (see `Task::done`): only
    /// those are looked at, not every task at every wake-up.
    maybe_done: Vec<u64>,
    /// When the keeper next checks, while no agent is connected, that its socket is there.
    next_socket_check: Instant,
    poller: Poller,
    buf: Vec<u8>,
    started: Instant,
    ever_connected: bool,
    /// What tasks get back of the keeper's own settings.
    inherit: Inherit,
    /// Makes tasks' processes (its stack, used by one start at a time).
    spawner: Spawner,
    uid: u32,
    pid: i32,
    /// The socket's path and inode: a keeper whose socket is gone (its data directory removed, or
    /// another keeper bound in its place) can never be reached by an agent again.
    socket: (PathBuf, u64),
    /// `<data_dir>/alloc`: task log directories must be beneath it.
    alloc_root: PathBuf,
}

impl Keeper {
    pub(crate) fn start(dir: &Path, listener: UnixListener, ready: OwnedFd) -> io::Result<Keeper> {
        // SAFETY: setsid has no preconditions; the forked child is not a group leader.
        if unsafe { libc::setsid() } < 0 {
            return Err(io::Error::last_os_error());
        }
        let log = dir.join(crate::LOG_FILE);
        if std::fs::metadata(&log).is_ok_and(|m| m.len() > MAX_LOG) {
            let _ = std::fs::remove_file(&log);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&log)?;
        let null = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        // SAFETY: dup2 onto the standard descriptors; the sources stay valid during the calls.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(log.as_raw_fd(), 2);
        }
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        crate::sys::write_atomic(&dir.join(PID_FILE), format!("{pid}\n").as_bytes())?;
        let (signals, wake) = UnixStream::pair()?;
        signals.set_nonblocking(true)?;
        for sig in [libc::SIGTERM, libc::SIGINT] {
            signal_hook::low_level::pipe::register(sig, wake.try_clone()?)?;
        }
        // SIGHUP is caught and ignored: the keeper has no terminal. Not SIG_IGN, which tasks would
        // inherit across exec; a caught signal is reset to its default there.
        signal_hook::flag::register(libc::SIGHUP, Arc::new(AtomicBool::new(false)))?;
        let sock = dir.join(SOCKET_FILE);
        let socket_ino = std::fs::symlink_metadata(&sock)?.ino();
        let inherit = Inherit {
            keeper: pid,
            nofile: raise_nofile(),
            oom_score_adj: protect_from_oom(),
        };
        let poller = Poller::new()?;
        let spawner = Spawner::new()?;
        poller.add(listener.as_raw_fd(), READ, LISTENER)?;
        poller.add(signals.as_raw_fd(), READ, SIGNALS)?;
        let mut ready = File::from(ready);
        ready.write_all(b"1")?;
        drop(ready);
        eprintln!("nodeward-keeper {pid}: serving {}", dir.display());
        Ok(Keeper {
            listener,
            conn: None,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            conn_writing: false,
            _signals: signals,
            tasks: BTreeMap::new(),
            by_pid: HashMap::new(),
            next_id: 1,
            draining: BTreeSet::new(),
            maybe_done: Vec::new(),
            next_socket_check: Instant::now(),
            poller,
            buf: vec![0; CHUNK],
            started: Instant::now(),
            ever_connected: false,
            inherit,
            spawner,
            // SAFETY: geteuid has no preconditions.
            uid: unsafe { libc::geteuid() },
            pid,
            socket: (sock, socket_ino),
            alloc_root: dir.join(crate::ALLOC_ROOT),
        })
    }

    pub(crate) fn run(&mut self) {
        let mut ready: Vec<(u64, u32)> = Vec::new();
        loop {
            for id in self.maybe_done.drain(..) {
                if self.tasks.get(&id).is_some_and(Task::done) {
                    self.tasks.remove(&id);
                    self.draining.remove(&id);
                }
            }
            if self.tasks.is_empty()
                && self.conn.is_none()
                && (self.ever_connected || self.started.elapsed() > FIRST_CONNECT)
            {
                eprintln!(
                    "nodeward-keeper {}: no task and no agent: exiting",
                    self.pid
                );
                return;
            }
            self.watch_conn_writes();
            let now = Instant::now();
            let mut deadline: Option<Instant> = None;
            // Only the tasks that are draining, not every task on every wake-up.
            let mut drained = Vec::new();
            for id in &self.draining {
                let Some(t) = self.tasks.get_mut(id) else {
                    continue;
                };
                if t.drain_until.is_some_and(|until| until <= now) {
                    drain_timeout(t, &self.poller);
                    self.maybe_done.push(*id);
                }
                match t.drain_until {
                    Some(until) => deadline = Some(deadline.map_or(until, |d| d.min(until))),
                    None => drained.push(*id),
                }
            }
            for id in drained {
                self.draining.remove(&id);
            }
            if !self.ever_connected && self.conn.is_none() {
                let first = self.started + FIRST_CONNECT;
                deadline = Some(deadline.map_or(first, |d| d.min(first)));
            }
            if self.conn.is_none() {
                // Checked every SOCKET_CHECK, not at every wake-up a task's output causes.
                if now >= self.next_socket_check && self.unreachable() {
                    eprintln!(
                        "nodeward-keeper {}: {} is gone: no agent can reach this keeper; stopping its tasks",
                        self.pid,
                        self.socket.0.display()
                    );
                    self.stop_all();
                    return;
                }
                if now >= self.next_socket_check {
                    self.next_socket_check = now + SOCKET_CHECK;
                }
                let look = self.next_socket_check;
                deadline = Some(deadline.map_or(look, |d| d.min(look)));
            }
            let timeout = deadline.map_or(-1, |d| {
                let ms = d.saturating_duration_since(now).as_millis() + 1;
                ms.min(i32::MAX as u128) as i32
            });
            ready.clear();
            match self.poller.wait(timeout) {
                Ok(events) => ready.extend(events),
                Err(e) => {
                    eprintln!("nodeward-keeper: epoll_wait: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            for &(token, events) in &ready {
                match token {
                    LISTENER => self.accept(),
                    SIGNALS => {
                        self.stop_all();
                        return;
                    }
                    CONN => self.serve_conn(events),
                    _ => {
                        let id = token / TASK_TOKENS;
                        match token % TASK_TOKENS {
                            EXIT => self.reaped(id),
                            OUT => {
                                self.pump(id, Stream::Stdout);
                            }
                            ERR => {
                                self.pump(id, Stream::Stderr);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    /// Watches the agent's connection for writing while output to it is queued, and only then (a
    /// writable socket would wake every wait).
    fn watch_conn_writes(&mut self) {
        let Some(conn) = &self.conn else {
            return;
        };
        let want = !self.outbuf.is_empty();
        if want != self.conn_writing {
            let events = if want { READ | WRITE } else { READ };
            if self.poller.modify(conn.as_raw_fd(), events, CONN).is_ok() {
                self.conn_writing = want;
            }
        }
    }

    /// Whether the socket this keeper listens on is no longer the file at its path.
    fn unreachable(&self) -> bool {
        std::fs::symlink_metadata(&self.socket.0).map_or(true, |m| m.ino() != self.socket.1)
    }

    fn accept(&mut self) {
        let Ok((conn, _)) = self.listener.accept() else {
            return;
        };
        if peer_uid(&conn) != Some(self.uid) {
            eprintln!("nodeward-keeper: refused a connection from another user");
            return;
        }
        if conn.set_nonblocking(true).is_err() {
            return;
        }
        // One agent at a time (the data directory's lock makes sure there is one): the newest.
        self.drop_conn();
        if let Err(e) = self.poller.add(conn.as_raw_fd(), READ, CONN) {
            eprintln!("nodeward-keeper: cannot watch the agent's connection: {e}");
            return;
        }
        self.conn = Some(conn);
        self.conn_writing = false;
        self.ever_connected = true;
        self.inbuf.clear();
        self.outbuf.clear();
    }

    fn drop_conn(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.poller.remove(&conn);
        }
        self.inbuf = Vec::new();
        self.outbuf = Vec::new();
    }

    fn serve_conn(&mut self, events: u32) {
        if events & WRITE != 0 {
            self.flush();
        }
        if events & !WRITE == 0 {
            return;
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        match conn.read(&mut self.buf) {
            Ok(0) => return self.drop_conn(),
            Ok(n) => self.inbuf.extend_from_slice(&self.buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => return self.drop_conn(),
        }
        while let Some(end) = self.inbuf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.inbuf.drain(..=end).collect();
            match serde_json::from_slice::<Request>(&line) {
                Ok(req) => self.handle(req),
                Err(e) => {
                    eprintln!("nodeward-keeper: a bad message from the agent ({e}): dropping it");
                    return self.drop_conn();
                }
            }
        }
        if self.inbuf.len() > MAX_LINE {
            eprintln!("nodeward-keeper: a message from the agent is too long: dropping it");
            self.drop_conn();
        } else if self.inbuf.is_empty() && self.inbuf.capacity() > CHUNK {
            self.inbuf = Vec::new();
        }
    }

    fn send(&mut self, ev: &Event) {
        if self.conn.is_none() {
            return;
        }
        if serde_json::to_writer(&mut self.outbuf, ev).is_err() {
            return;
        }
        self.outbuf.push(b'\n');
        self.flush();
        if self.outbuf.len() > MAX_QUEUED {
            eprintln!("nodeward-keeper: the agent reads nothing: dropping it");
            self.drop_conn();
        }
    }

    fn flush(&mut self) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        while !self.outbuf.is_empty() {
            match conn.write(&self.outbuf) {
                Ok(0) => return self.drop_conn(),
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.drop_conn(),
            }
        }
        if self.outbuf.capacity() > CHUNK {
            self.outbuf = Vec::new();
        }
    }

    fn handle(&mut self, req: Request) {
        match req {
            Request::Hello { version } => {
                if version != PROTOCOL_VERSION {
                    eprintln!("nodeward-keeper: the agent speaks version {version}, serving version {PROTOCOL_VERSION}");
                }
                let tasks = self
                    .tasks
                    .values()
                    .filter(|t| !t.forgotten)
                    .map(|t| t.held.clone())
                    .collect();
                self.send(&Event::Welcome {
                    version: PROTOCOL_VERSION,
                    pid: self.pid,
                    tasks,
                });
            }
            Request::Start { seq, spec } => {
                let spawned = Task::spawn(&spec, self.inherit, &self.alloc_root, &mut self.spawner);
                let ev = match spawned.and_then(|task| self.hold(task)) {
                    Ok((pid, start_ticks)) => Event::Started {
                        seq,
                        pid,
                        start_ticks,
                    },
                    Err(e) => Event::Failed {
                        seq,
                        errno: e.raw_os_error(),
                        message: e.to_string(),
                    },
                };
                self.send(&ev);
            }
            Request::Signal { seq, pid, signal } => {
                // One still running: an exited one's group was killed and its PID may be reused.
                let named = self.named(pid, |t| t.child.is_some());
                let ev = match named.and_then(|id| self.tasks.get(&id)) {
                    None => Event::Failed {
                        seq,
                        errno: Some(libc::ESRCH),
                        message: format!("the keeper holds no task {pid}"),
                    },
                    // Once reaped, its group was killed and the number may be another's.
                    Some(t) if t.child.is_none() => Event::Done {
                        seq,
                        running: false,
                    },
                    Some(_) => match signal_group(pid, signal) {
                        Ok(()) => Event::Done { seq, running: true },
                        Err(e) => Event::Failed {
                            seq,
                            errno: e.raw_os_error(),
                            message: e.to_string(),
                        },
                    },
                };
                self.send(&ev);
            }
            Request::Forget { pid } => {
                // One that exited: the agent forgets a task once it has taken its exit.
                if let Some(id) = self.named(pid, |t| t.child.is_none()) {
                    if let Some(ids) = self.by_pid.get_mut(&pid) {
                        ids.retain(|i| *i != id);
                        if ids.is_empty() {
                            self.by_pid.remove(&pid);
                        }
                    }
                    if let Some(t) = self.tasks.get_mut(&id) {
                        t.forgotten = true;
                        self.maybe_done.push(id);
                    }
                }
            }
        }
    }

    /// The task not forgotten yet that a request names by `pid`: the oldest one that `prefer`
    /// picks, else the oldest. Two tasks have the same PID only when the first exited and the
    /// kernel gave its PID to a new task before the agent forgot it.
    fn named(&self, pid: i32, prefer: impl Fn(&Task) -> bool) -> Option<u64> {
        pick(self.by_pid.get(&pid)?, |id| {
            self.tasks.get(&id).is_some_and(&prefer)
        })
    }

    /// Takes a task started for the agent and watches its exit and its pipes; answers its PID
    /// and start time. A task that cannot be watched (the keeper's limit on descriptors, or
    /// memory) would never be seen to end: it is killed and reaped, and its start fails.
    fn hold(&mut self, mut task: Task) -> io::Result<(i32, u64)> {
        let id = self.next_id;
        self.next_id += 1;
        let base = id * TASK_TOKENS;
        let fds: Vec<(RawFd, u64)> = [
            (task.pidfd.as_ref().map(|f| f.as_raw_fd()), EXIT),
            (task.out.as_ref().map(|(p, _)| p.as_raw_fd()), OUT),
            (task.err.as_ref().map(|(p, _)| p.as_raw_fd()), ERR),
        ]
        .into_iter()
        .filter_map(|(fd, kind)| Some((fd?, kind)))
        .collect();
        for &(fd, kind) in &fds {
            if let Err(e) = self.poller.add(fd, READ, base + kind) {
                for (fd, _) in &fds {
                    self.poller.remove(fd);
                }
                let _ = signal_group(task.held.pid, libc::SIGKILL);
                if let Some(child) = task.child.as_mut() {
                    let _ = child.wait();
                }
                return Err(io::Error::new(
                    e.kind(),
                    format!("the keeper cannot watch the task: {e}"),
                ));
            }
        }
        let started = (task.held.pid, task.held.start_ticks);
        self.by_pid.entry(task.held.pid).or_default().push(id);
        self.tasks.insert(id, task);
        Ok(started)
    }

    fn reaped(&mut self, id: u64) {
        let Some(t) = self.tasks.get_mut(&id) else {
            return;
        };
        let Some(child) = t.child.as_mut() else {
            return;
        };
        let status = match child.try_wait() {
            Ok(Some(st)) => st,
            Ok(None) => return,
            Err(e) => {
                eprintln!("nodeward-keeper: cannot reap {}: {e}", t.held.pid);
                return;
            }
        };
        t.child = None;
        if let Some(fd) = t.pidfd.take() {
            self.poller.remove(&fd);
        }
        // Nothing a task started outlives it: neither its group nor, where it has one, anything in
        // its cgroup (a child that called setsid and left the group).
        let _ = signal_group(t.held.pid, libc::SIGKILL);
        let (exit_code, signal) = match (status.code(), status.signal()) {
            (_, Some(sig)) => (128 + sig, sig),
            (Some(code), None) => (code, 0),
            (None, None) => (-1, 0),
        };
        let mut oom_killed = false;
        if let Some((cg, base)) = &t.cgroup {
            if let Err(e) = crate::cgroup::kill_all(cg) {
                eprintln!(
                    "nodeward-keeper: cannot kill what is left in {}: {e}",
                    cg.kill.display()
                );
            }
            // A SIGKILL (or a shell reporting its child's, 137) while the cgroup counted a new
            // OOM kill: the kernel killed it for its memory limit.
            oom_killed = (signal == libc::SIGKILL || exit_code == 128 + libc::SIGKILL)
                && crate::cgroup::oom_kills(cg).is_some_and(|n| n > *base);
        }
        let exit = Exit {
            exit_code,
            signal,
            at_nanos: now_nanos(),
            oom_killed,
        };
        t.held.exit = Some(exit);
        // A task without pipes (its logs disabled) has nothing to drain.
        if t.out.is_some() || t.err.is_some() {
            t.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            self.draining.insert(id);
        }
        self.maybe_done.push(id);
        let (pid, forgotten) = (t.held.pid, t.forgotten);
        if !forgotten {
            self.send(&Event::Exited { pid, exit });
        }
    }

    /// Copies what one pipe holds (up to one buffer) into its log; answers whether it read any.
    fn pump(&mut self, id: u64, stream: Stream) -> bool {
        let Some(t) = self.tasks.get_mut(&id) else {
            return false;
        };
        let slot = match stream {
            Stream::Stdout => &mut t.out,
            Stream::Stderr => &mut t.err,
        };
        let Some((pipe, log)) = slot else {
            return false;
        };
        match pipe.read(&mut self.buf) {
            Ok(0) => {
                self.poller.remove(pipe);
                *slot = None;
                self.maybe_done.push(id);
                false
            }
            Ok(n) => {
                if let Err(e) = log.write(&self.buf[..n]) {
                    eprintln!(
                        "nodeward-keeper: cannot keep the output of {}: {e}",
                        t.held.pid
                    );
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(_) => {
                self.poller.remove(pipe);
                *slot = None;
                self.maybe_done.push(id);
                false
            }
        }
    }

    /// SIGTERM or SIGINT: every task's group is killed, reaped (a bounded wait), and the keeper
    /// ends. Their output still in the pipes is kept.
    fn stop_all(&mut self) {
        eprintln!(
            "nodeward-keeper {}: stopped by a signal: killing {} tasks",
            self.pid,
            self.tasks.len()
        );
        for t in self.tasks.values() {
            if t.child.is_some() {
                let _ = signal_group(t.held.pid, libc::SIGKILL);
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        let ids: Vec<u64> = self.tasks.keys().copied().collect();
        for i in ids {
            while self.tasks[&i].child.is_some() && Instant::now() < deadline {
                self.reaped(i);
                if self.tasks[&i].child.is_some() {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            // What the pipes hold now; a writer that escaped the group is not waited for.
            while Instant::now() < deadline && self.pump(i, Stream::Stdout) {}
            while Instant::now() < deadline && self.pump(i, Stream::Stderr) {}
        }
        self.flush();
    }
}

fn peer_uid(conn: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the given length.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The first of `ids` that `prefer` picks, else the first.
fn pick(ids: &[u64], prefer: impl Fn(u64) -> bool) -> Option<u64> {
    ids.iter()
        .copied()
        .find(|id| prefer(*id))
        .or_else(|| ids.first().copied())
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn a_reused_pid_names_the_task_the_request_is_for() {
        // Task 1 exited and its PID went to task 2 before the agent forgot task 1.
        let running = |id| id == 2;
        assert_eq!(pick(&[1, 2], running), Some(2), "a signal: the one running");
        assert_eq!(
            pick(&[1, 2], |id| !running(id)),
            Some(1),
            "a forget: the one that exited"
        );
        assert_eq!(
            pick(&[3], |_| false),
            Some(3),
            "one task: that one, whatever it is"
        );
        assert_eq!(pick(&[], |_| true), None);
    }
}
