//! The agent's side of the keeper: [`KeeperClient`] starts a keeper when none serves the data
//! directory, speaks the protocol of [`super`], and turns its messages into one exit channel per
//! task, which the task runner selects on as it did on its own child's.
//!
//! Threads: one reader per connection (`keeper-reader`), owned by the client and joined by
//! [`KeeperClient::close`]. Callers (task runners) write requests under the connection's writer
//! lock and wait for the answer on a channel of their own, with a bound.
//!
//! When the connection ends, the reader checks whether the keeper still runs: if it does (it
//! dropped the connection), the reader connects again and goes on; if it died, every task it
//! held died with it (their parent-death signal). The reader then stops what is left of their
//! process groups (found through `/proc` by their allocation and task), and reports each task as
//! lost on its exit channel, so its runner records the failure and applies the restart policy.
//! The next start runs a new keeper.

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Event, Exit, Held, Request, StartTask, PROGRAM, PROTOCOL_VERSION, SOCKET_FILE};
use crate::driver::process::{self, procfs, AfterExit, Drain, Sink, Supervision};
use crate::thread::Worker;

/// How long a request to the keeper may take (a fork and exec, a signal).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a new keeper may take to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the keeper could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    #[error("cannot start the task keeper {}: {reason}", program.display())]
    Start { program: PathBuf, reason: String },
    #[error("the task keeper did not answer: {0}")]
    Gone(String),
    /// The keeper's own answer; `errno` when it is an OS error (a failed exec).
    #[error("{message}")]
    Refused { errno: Option<i32>, message: String },
}

/// How a task held by the keeper ended, as its runner receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskExit {
    Exited(Exit),
    /// The keeper died: the task died with it, its status unknown.
    KeeperDied,
    /// The end could not be observed (a stop that got no answer).
    Unknown,
    /// The keeper did not hold the task when the agent came back: the machine rebooted, or the
    /// keeper died while no agent watched.
    LostWhileAway,
    /// A container ended (the docker driver): its exit code, and whether the kernel OOM-killed it.
    Container {
        exit: Exit,
        oom_killed: bool,
    },
}

/// A task the keeper holds, as the agent tracks it.
pub(super) struct Watch {
    pub(super) tx: Sender<TaskExit>,
    pub(super) alloc_id: String,
    pub(super) task: String,
    /// The keeper reported its exit (it is reaped; its group was killed).
    pub(super) exited: bool,
}

/// A process named by PID and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcId {
    pub(super) pid: i32,
    pub(super) start_ticks: u64,
}

/// One connection to the keeper.
pub(super) struct Conn {
    /// Guards: the write half; one request is written at a time.
    pub(super) writer: Mutex<UnixStream>,
    pub(super) keeper: ProcId,
    /// Set when the connection ended and the keeper is gone: the next start runs a new one.
    pub(super) dead: AtomicBool,
}

/// A caller waiting for an answer: a start also gets the exit channel the reader made for it.
pub(super) type Answer = (Event, Option<Receiver<TaskExit>>);
/// A waiting caller's channel, and the allocation and task a start is for.
pub(super) type Waiting = (Sender<Answer>, Option<(String, String)>);

/// What the reader shares with callers.
pub(super) struct Shared {
    pub(super) dir: PathBuf,
    /// Set by [`KeeperClient::close`]: an ended connection is not repaired.
    pub(super) closing: AtomicBool,
    /// Guards: callers waiting for an answer, by `seq`, with the task a start is for.
    pub(super) pending: Mutex<HashMap<u64, Waiting>>,
    /// Guards: the exit channels of the tasks the keeper holds, by PID.
    pub(super) watches: Mutex<HashMap<i32, Watch>>,
    /// Guards: the tasks the keeper held when this agent first connected, until claimed.
    pub(super) recovered: Mutex<HashMap<i32, (Held, Receiver<TaskExit>)>>,
}

pub struct KeeperClient {
    program: PathBuf,
    seq: AtomicU64,
    pub(super) shared: Arc<Shared>,
    /// Guards: the live connection.
    conn: Mutex<Option<Arc<Conn>>>,
    /// Guards: the readers of every connection this client made, joined by `close`.
    readers: Mutex<Vec<Worker<()>>>,
    /// Guards: nothing; held while a keeper is started so that two runners start one keeper.
    starting: Mutex<()>,
}

/// A task the keeper started or still held: its PID, its start time and its exit channel.
pub struct Kept {
    pub pid: i32,
    pub start_ticks: u64,
    pub exited: Receiver<TaskExit>,
    /// The allocation and the task it is a run of (its cgroup is named by them).
    pub alloc_id: String,
    pub task: String,
}

impl KeeperClient {
    /// A client for the keeper of `data_dir`; `program` is the keeper's executable. Connects to a
    /// keeper that already serves the directory (left by an earlier agent) and takes over the
    /// tasks it holds; starts none.
    pub fn open(data_dir: &Path, program: PathBuf) -> Result<Arc<KeeperClient>, KeeperError> {
        let sock = data_dir.join(SOCKET_FILE);
        if sock.as_os_str().len() >= 108 {
            return Err(KeeperError::Start {
                program,
                reason: format!(
                    "the socket path {} is longer than a unix socket allows (107 bytes): choose a shorter data_dir",
                    sock.display()
                ),
            });
        }
        let client = Arc::new(KeeperClient {
            program,
            seq: AtomicU64::new(1),
            shared: Arc::new(Shared {
                dir: data_dir.to_path_buf(),
                closing: AtomicBool::new(false),
                pending: Mutex::new(HashMap::new()),
                watches: Mutex::new(HashMap::new()),
                recovered: Mutex::new(HashMap::new()),
            }),
            conn: Mutex::new(None),
            readers: Mutex::new(Vec::new()),
            starting: Mutex::new(()),
        });
        if let Ok(stream) = UnixStream::connect(&sock) {
            client.attach(stream, true)?;
        }
        Ok(client)
    }

    /// The keeper next to the running executable (`nodeward-keeper` beside `nodeward`), or one
    /// directory up (test binaries run from `target/<profile>/deps`).
    pub fn locate() -> PathBuf {
        let exe = std::env::current_exe().unwrap_or_default();
        let beside = exe.with_file_name(PROGRAM);
        if beside.exists() {
            return beside;
        }
        exe.parent()
            .and_then(Path::parent)
            .map(|d| d.join(PROGRAM))
            .filter(|p| p.exists())
            .unwrap_or(beside)
    }

    /// The keeper's PID, when one is connected.
    pub fn keeper_pid(&self) -> Option<i32> {
        self.conn
            .lock()
            .as_ref()
            .filter(|c| !c.dead.load(Ordering::Acquire))
            .map(|c| c.keeper.pid)
    }

    /// Takes the task with this PID and start time, when the keeper held it at connection time.
    pub fn claim(&self, pid: i32, start_ticks: u64) -> Option<Kept> {
        let mut recovered = self.shared.recovered.lock();
        if recovered
            .get(&pid)
            .is_none_or(|(h, _)| h.start_ticks != start_ticks)
        {
            return None;
        }
        let (held, exited) = recovered.remove(&pid)?;
        // Watched before the guard goes: an exit the reader reads now finds the task in one.
        Some(self.watch(held, exited))
    }

    /// Takes the task the keeper runs for this allocation and task that no recorded handle named
    /// (one whose start an agent that crashed did not get to record). Runs of it that had exited
    /// already are forgotten: their end was either recorded with the run or belongs to a run the
    /// state file never knew.
    pub fn claim_by_name(&self, alloc_id: &str, task: &str) -> Option<Kept> {
        let (mut running, exited): (Vec<Kept>, Vec<(Held, Receiver<TaskExit>)>) = {
            let mut recovered = self.shared.recovered.lock();
            let pids: Vec<i32> = recovered
                .values()
                .filter(|(h, _)| h.alloc_id == alloc_id && h.task == task)
                .map(|(h, _)| h.pid)
                .collect();
            let (running, exited): (Vec<_>, Vec<_>) = pids
                .iter()
                .filter_map(|p| recovered.remove(p))
                .partition(|(h, _)| h.exit.is_none());
            // Watched under the guard, as in `claim`.
            let running = running
                .into_iter()
                .map(|(held, exited)| self.watch(held, exited))
                .collect();
            (running, exited)
        };
        for (held, _) in exited {
            self.forget(held.pid);
        }
        running.sort_by_key(|k| k.start_ticks);
        let newest = running.pop();
        for kept in running {
            // Never two runs of a task: an older one still running is stopped.
            log::warn!(
                "task {task} of alloc {alloc_id}: the keeper runs more than one process of it; killing {}",
                kept.pid
            );
            let _ = self.signal(kept.pid, libc::SIGKILL);
            let _ = kept.exited.recv_timeout(super::super::SIGKILL_WAIT);
            self.forget(kept.pid);
        }
        newest
    }

    /// A claimed task joins the watched ones (a keeper that dies reports it lost). Called with
    /// the `recovered` guard held (the lock order is `recovered`, then `watches`), so that an
    /// exit the reader reads at the same time finds the task in one of the two.
    fn watch(&self, held: Held, exited: Receiver<TaskExit>) -> Kept {
        // The recovered channel's sender lives in the watch from now on.
        let (tx, rx) = bounded(1);
        if let Ok(exit) = exited.try_recv() {
            let _ = tx.send(exit);
        }
        self.shared.watches.lock().insert(
            held.pid,
            Watch {
                tx,
                exited: held.exit.is_some(),
                alloc_id: held.alloc_id.clone(),
                task: held.task.clone(),
            },
        );
        Kept {
            pid: held.pid,
            start_ticks: held.start_ticks,
            exited: rx,
            alloc_id: held.alloc_id,
            task: held.task,
        }
    }

    /// The tasks the keeper held at connection time that `wanted` does not want: what a crashed
    /// agent left of allocations it no longer has. Taken out and watched: the caller stops them.
    pub fn unwanted(&self, wanted: impl Fn(&Held) -> bool) -> Vec<(Held, Kept)> {
        let mut recovered = self.shared.recovered.lock();
        let pids: Vec<i32> = recovered
            .values()
            .filter(|(h, _)| !wanted(h))
            .map(|(h, _)| h.pid)
            .collect();
        // Watched under the guard, as in `claim`.
        pids.iter()
            .filter_map(|p| recovered.remove(p))
            .map(|(held, exited)| (held.clone(), self.watch(held, exited)))
            .collect()
    }

    /// The allocations and tasks whose process the keeper holds and has not seen exit.
    pub fn running(&self) -> HashSet<(String, String)> {
        let mut out: HashSet<(String, String)> = self
            .shared
            .recovered
            .lock()
            .values()
            .filter(|(h, _)| h.exit.is_none())
            .map(|(h, _)| (h.alloc_id.clone(), h.task.clone()))
            .collect();
        out.extend(
            self.shared
                .watches
                .lock()
                .values()
                .map(|w| (w.alloc_id.clone(), w.task.clone())),
        );
        out
    }

    /// Starts a task; the keeper is started first when none runs. `forget`: a task the agent is
    /// done with (see [`KeeperClient::forget`]), told to the keeper in the same write, before
    /// the start; it is forgotten whether the start succeeds or not.
    pub fn start(&self, spec: StartTask, forget: Option<i32>) -> Result<Kept, KeeperError> {
        let name = (spec.alloc_id.clone(), spec.task.clone());
        let (alloc_id, task) = name.clone();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let req = Request::Start {
            seq,
            spec: Box::new(spec),
        };
        let before = forget.map(|pid| {
            self.shared.watches.lock().remove(&pid);
            Request::Forget { pid }
        });
        match self.request(seq, before.as_ref(), &req, Some(name))? {
            (
                Event::Started {
                    pid, start_ticks, ..
                },
                Some(exited),
            ) => Ok(Kept {
                pid,
                start_ticks,
                exited,
                alloc_id,
                task,
            }),
            (Event::Failed { errno, message, .. }, _) => {
                Err(KeeperError::Refused { errno, message })
            }
            (other, _) => Err(KeeperError::Gone(format!("unexpected answer {other:?}"))),
        }
    }

    /// Sends `signal` to the process group of the task `pid`; answers whether it still ran.
    pub fn signal(&self, pid: i32, signal: i32) -> Result<bool, KeeperError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        match self.request(seq, None, &Request::Signal { seq, pid, signal }, None)? {
            (Event::Done { running, .. }, _) => Ok(running),
            (Event::Failed { errno, message, .. }, _) => {
                Err(KeeperError::Refused { errno, message })
            }
            (other, _) => Err(KeeperError::Gone(format!("unexpected answer {other:?}"))),
        }
    }

    /// Whether the keeper reported the task's exit (it is reaped: nothing is left to kill).
    pub fn has_exited(&self, pid: i32) -> bool {
        self.shared
            .watches
            .lock()
            .get(&pid)
            .is_some_and(|w| w.exited)
    }

    /// The agent is done with the task `pid` (its exit was received, or it is killed and left).
    pub fn forget(&self, pid: i32) {
        self.shared.watches.lock().remove(&pid);
        let conn = self.conn.lock().clone();
        if let Some(conn) = conn.filter(|c| !c.dead.load(Ordering::Acquire)) {
            let _ = write_request(&conn, &Request::Forget { pid });
        }
    }

    /// Ends the connection and joins its readers (agent shutdown). The keeper and its tasks go on.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::Release);
        if let Some(conn) = self.conn.lock().take() {
            let _ = conn.writer.lock().shutdown(std::net::Shutdown::Both);
        }
        for reader in std::mem::take(&mut *self.readers.lock()) {
            reader.join();
        }
    }

    /// Writes `req` (after `before`, in the same write) and waits for its answer. `start`: the
    /// allocation and task of a start, which may run a keeper first.
    fn request(
        &self,
        seq: u64,
        before: Option<&Request>,
        req: &Request,
        start: Option<(String, String)>,
    ) -> Result<Answer, KeeperError> {
        let conn = self.connection(start.is_some())?;
        let (tx, rx) = bounded(1);
        self.shared.pending.lock().insert(seq, (tx, start));
        if let Err(e) = write_requests(&conn, before.into_iter().chain([req])) {
            self.shared.pending.lock().remove(&seq);
            return Err(KeeperError::Gone(e.to_string()));
        }
        let answer = rx.recv_timeout(REQUEST_TIMEOUT);
        self.shared.pending.lock().remove(&seq);
        answer.map_err(|_| KeeperError::Gone("the keeper did not answer in time".to_string()))
    }

    /// The live connection; starts a keeper when there is none (or it died) and `start_keeper`
    /// is set.
    fn connection(&self, start_keeper: bool) -> Result<Arc<Conn>, KeeperError> {
        let live = |c: &Option<Arc<Conn>>| c.clone().filter(|c| !c.dead.load(Ordering::Acquire));
        if let Some(conn) = live(&self.conn.lock()) {
            return Ok(conn);
        }
        if !start_keeper {
            return Err(KeeperError::Gone("no task keeper runs".to_string()));
        }
        let _one = self.starting.lock();
        if let Some(conn) = live(&self.conn.lock()) {
            return Ok(conn);
        }
        let sock = self.shared.dir.join(SOCKET_FILE);
        let stream = match UnixStream::connect(&sock) {
            Ok(s) => s,
            Err(_) => {
                self.spawn_keeper()?;
                UnixStream::connect(&sock).map_err(|e| KeeperError::Start {
                    program: self.program.clone(),
                    reason: format!("cannot connect to {}: {e}", sock.display()),
                })?
            }
        };
        self.attach(stream, false)?;
        live(&self.conn.lock()).ok_or_else(|| KeeperError::Gone("the keeper went away".to_string()))
    }

    fn spawn_keeper(&self) -> Result<(), KeeperError> {
        let fail = |reason: String| KeeperError::Start {
            program: self.program.clone(),
            reason,
        };
        if !self.program.exists() {
            return Err(fail(format!(
                "it is not there: install {PROGRAM} next to nodeward"
            )));
        }
        let (tx, rx) = bounded(2);
        let env = BTreeMap::new();
        let args = [self.shared.dir.display().to_string()];
        let child = process::spawn(
            &process::ProcessSpec {
                program: &self.program,
                args: &args,
                env: &env,
                cwd: Path::new("/"),
                run_as: None,
                stdin: None,
                limits: &[],
            },
            Box::new(Collect(Vec::new(), tx.clone())),
            Box::new(Collect(Vec::new(), tx)),
            Supervision {
                after_exit: AfterExit::KillGroupIfFailed,
                drain: Drain::For(Duration::from_secs(1)),
            },
            "keeper-start".to_string(),
        )
        .map_err(|e| fail(e.to_string()))?;
        let status = child.exited().recv_timeout(START_TIMEOUT).ok();
        child.kill_unless_reaped();
        child.release();
        let output: Vec<u8> = rx.try_iter().flatten().collect();
        let text = String::from_utf8_lossy(&output).trim().to_string();
        match status {
            Some(st) if st.success() => {
                log::info!("started the task keeper (pid {text})");
                Ok(())
            }
            Some(_) => Err(fail(text)),
            None => Err(fail(format!("not ready within {START_TIMEOUT:?}"))),
        }
    }

    /// Says hello on a new connection and starts its reader. `first`: this agent's first
    /// connection, whose tasks are offered to the runners to claim.
    fn attach(&self, stream: UnixStream, first: bool) -> Result<(), KeeperError> {
        let (lines, keeper, tasks) = hello(&stream)?;
        self.shared.take_over(tasks, first);
        let conn = Arc::new(Conn {
            writer: Mutex::new(stream),
            keeper,
            dead: AtomicBool::new(false),
        });
        let reader = super::reader::Reader {
            shared: self.shared.clone(),
            lines,
            conn: conn.clone(),
        };
        let worker = crate::thread::spawn("keeper-reader", move || reader.run())
            .map_err(|e| KeeperError::Gone(format!("cannot start the keeper reader: {e}")))?;
        *self.conn.lock() = Some(conn);
        let mut readers = self.readers.lock();
        let (done, running): (Vec<_>, Vec<_>) = readers.drain(..).partition(|w| w.is_finished());
        *readers = running;
        readers.push(worker);
        drop(readers);
        done.into_iter().for_each(|w| {
            w.join();
        });
        log::debug!("connected to the task keeper (pid {})", keeper.pid);
        Ok(())
    }
}

/// The first exchange on a connection: the keeper's PID and the tasks it holds.
pub(super) fn hello(
    stream: &UnixStream,
) -> Result<(BufReader<UnixStream>, ProcId, Vec<Held>), KeeperError> {
    let gone = |e: io::Error| KeeperError::Gone(e.to_string());
    // A keeper that stops reading must not wedge the runners writing to it.
    stream
        .set_write_timeout(Some(REQUEST_TIMEOUT))
        .map_err(gone)?;
    let read = stream.try_clone().map_err(gone)?;
    read.set_read_timeout(Some(REQUEST_TIMEOUT)).map_err(gone)?;
    let mut lines = BufReader::new(read);
    let mut line = serde_json::to_vec(&Request::Hello {
        version: PROTOCOL_VERSION,
    })
    .map_err(|e| KeeperError::Gone(e.to_string()))?;
    line.push(b'\n');
    let mut w = stream;
    w.write_all(&line).map_err(gone)?;
    let mut text = String::new();
    lines.read_line(&mut text).map_err(gone)?;
    let Ok(Event::Welcome {
        version,
        pid,
        tasks,
    }) = serde_json::from_str::<Event>(&text)
    else {
        return Err(KeeperError::Gone(format!(
            "the keeper answered {:?} to hello",
            text.trim()
        )));
    };
    if version != PROTOCOL_VERSION {
        log::warn!(
            "the task keeper (pid {pid}) speaks protocol version {version}, this agent {PROTOCOL_VERSION}"
        );
    }
    lines.get_ref().set_read_timeout(None).map_err(gone)?;
    let keeper = ProcId {
        pid,
        start_ticks: procfs::process_start_ticks(pid).unwrap_or(0),
    };
    Ok((lines, keeper, tasks))
}

impl Shared {
    /// The keeper's list of tasks at hello: on the first connection they wait for their runners
    /// to claim them; on a reconnection, exits the agent missed reach their watches.
    pub(super) fn take_over(&self, tasks: Vec<Held>, first: bool) {
        if first {
            let mut recovered = self.recovered.lock();
            for held in tasks {
                let exited = match held.exit {
                    Some(exit) => ready(TaskExit::Exited(exit)),
                    None => bounded(1).1,
                };
                recovered.insert(held.pid, (held, exited));
            }
            return;
        }
        for held in tasks {
            if let Some(exit) = held.exit {
                self.exited(held.pid, exit);
            }
        }
    }

    /// The keeper reports that task `pid` exited: to its watch, or, when its runner has not
    /// claimed it yet (the exit came between the keeper's hello and the claim), to the claim.
    /// Never lost: a claim moves a task from `recovered` to `watches` under the `recovered`
    /// guard, which this takes first.
    pub(super) fn exited(&self, pid: i32, exit: Exit) {
        let mut recovered = self.recovered.lock();
        if let Some((held, exited)) = recovered.get_mut(&pid) {
            if held.exit.is_none() {
                held.exit = Some(exit);
                *exited = ready(TaskExit::Exited(exit));
            }
            return;
        }
        if let Some(w) = self.watches.lock().get_mut(&pid) {
            w.exited = true;
            let _ = w.tx.try_send(TaskExit::Exited(exit));
        }
    }
}

/// A channel that holds `exit` and has no sender left.
pub(super) fn ready(exit: TaskExit) -> Receiver<TaskExit> {
    let (tx, rx) = bounded(1);
    let _ = tx.send(exit);
    rx
}

pub(super) fn write_request(conn: &Conn, req: &Request) -> io::Result<()> {
    write_requests(conn, [req])
}

/// Writes requests as one write: the keeper reads them in one wake-up.
pub(super) fn write_requests<'a>(
    conn: &Conn,
    reqs: impl IntoIterator<Item = &'a Request>,
) -> io::Result<()> {
    // One allocation for a start's line (about 1.4 KB with a task's usual environment), not a
    // doubling from 8 bytes up.
    let mut lines = Vec::with_capacity(4096);
    for req in reqs {
        serde_json::to_writer(&mut lines, req).map_err(io::Error::other)?;
        lines.push(b'\n');
    }
    conn.writer.lock().write_all(&lines)
}

/// Collects a child's output for [`KeeperClient::spawn_keeper`].
struct Collect(Vec<u8>, Sender<Vec<u8>>);

impl Sink for Collect {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
    fn eof(&mut self) {
        let _ = self.1.try_send(std::mem::take(&mut self.0));
    }
}
