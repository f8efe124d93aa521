//! Task drivers. nodeward has one, `raw_exec`: a local process with no isolation.
//!
//! Protocol: [`Driver::start`] spawns the task's process in a process group of its own and one
//! waiter thread for it. The waiter pumps the process's stdout and stderr into rotated log files
//! (so a chatty task never blocks on a full pipe) and watches a pidfd; when the process exits it
//! reaps it, SIGKILLs whatever is left of its process group (no process of a task outlives it),
//! and sends one [`ExitStatus`] on [`TaskProcess::exited`]. If the output pipes are still open
//! [`DRAIN_AFTER_EXIT`] later, a process that left the group (`setsid`) holds them: the waiter finds
//! the holders through `/proc` and SIGKILLs them too, then drains for as long again at most. The task runner owns the
//! [`TaskProcess`] and signals the group through it.

pub mod logs;

use crossbeam_channel::{bounded, Receiver};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::jobspec::LogConfig;
use logs::{RotatingFile, Stream};

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("exec: {command:?}: executable file not found in $PATH")]
    NotFound { command: String },
    #[error("failed to start {command:?}: {source}")]
    Spawn { command: String, source: io::Error },
    #[error("user {user:?} not found")]
    UnknownUser { user: String },
    #[error("cannot run as user {user:?}: the agent is not running as root")]
    NotRoot { user: String },
    #[error("cannot watch process {pid}: {source}")]
    Watch { pid: i32, source: io::Error },
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub command: String,
    pub args: Vec<String>,
    /// The complete environment of the process.
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub user: Option<String>,
    /// `alloc/logs`.
    pub log_dir: PathBuf,
    pub task_name: String,
    pub logs: LogConfig,
    /// Names the waiter thread.
    pub thread_name: String,
}

/// How a process ended: a signal `S` reads as exit code `128 + S`, the way shells and Nomad say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub exit_code: i32,
    pub signal: i32,
}

impl ExitStatus {
    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.signal == 0
    }
}

/// A running task process.
pub struct TaskProcess {
    pub pid: i32,
    /// Start time in clock ticks since boot, to tell a reused PID apart.
    pub start_ticks: u64,
    /// Receives one status when the process has exited and been reaped.
    pub exited: Receiver<ExitStatus>,
}

impl TaskProcess {
    /// Sends `signal` to the task's whole process group.
    pub fn signal_group(&self, signal: i32) -> io::Result<()> {
        signal_group(self.pid, signal)
    }
}

/// Sends `signal` to process group `pgid`. A group that is already gone is not an error.
pub fn signal_group(pgid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(err)
}

pub trait Driver: Send + Sync {
    fn start(&self, spec: &StartSpec) -> Result<TaskProcess, DriverError>;
}

/// The `raw_exec` driver.
#[derive(Debug, Default)]
pub struct RawExec;

impl Driver for RawExec {
    fn start(&self, spec: &StartSpec) -> Result<TaskProcess, DriverError> {
        let program = resolve_command(&spec.command, spec.env.get("PATH").map(String::as_str))
            .ok_or_else(|| DriverError::NotFound {
                command: spec.command.clone(),
            })?;
        let mut cmd = Command::new(&program);
        cmd.args(&spec.args)
            .env_clear()
            .envs(&spec.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if spec.user.is_none() {
            cmd.current_dir(&spec.cwd);
        }
        if let Some(user) = &spec.user {
            let (uid, gid) = lookup_user(user)?;
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err(DriverError::NotRoot { user: user.clone() });
            }
            // The data directory is 0700, so a task of another user could not enter its
            // directory once it is that user. Enter it first, then drop privileges: the task
            // works from its directory (`local/`, `secrets/`, `../alloc/`).
            let cwd = CString::new(spec.cwd.as_os_str().as_encoded_bytes()).map_err(|_| {
                DriverError::Spawn {
                    command: spec.command.clone(),
                    source: io::Error::other("task directory path has a NUL byte"),
                }
            })?;
            let groups = supplementary_groups(user, gid);
            // SAFETY: the closure runs in the child between fork and exec and only makes
            // async-signal-safe system calls on memory prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::chdir(cwd.as_ptr()) != 0
                        || libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|source| DriverError::Spawn {
            command: spec.command.clone(),
            source,
        })?;
        let pid = child.id() as i32;
        let pidfd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(source) => {
                let _ = signal_group(pid, libc::SIGKILL);
                let _ = child.wait();
                return Err(DriverError::Watch { pid, source });
            }
        };
        let start_ticks = process_start_ticks(pid).unwrap_or(0);
        let (tx, exited) = bounded(1);
        let stdout = RotatingFile::open(
            &spec.log_dir,
            &spec.task_name,
            Stream::Stdout,
            spec.logs.max_files,
            spec.logs.max_file_size_mb,
        );
        let stderr = RotatingFile::open(
            &spec.log_dir,
            &spec.task_name,
            Stream::Stderr,
            spec.logs.max_files,
            spec.logs.max_file_size_mb,
        );
        let waiter = Waiter {
            pid,
            pidfd,
            stdout: child
                .stdout
                .take()
                .map(|s| (std::fs::File::from(OwnedFd::from(s)), stdout)),
            stderr: child
                .stderr
                .take()
                .map(|s| (std::fs::File::from(OwnedFd::from(s)), stderr)),
        };
        let spawned = crate::thread::spawn(spec.thread_name.clone(), move || waiter.run(child, tx));
        if let Err(e) = spawned {
            let _ = signal_group(pid, libc::SIGKILL);
            return Err(DriverError::Watch { pid, source: e });
        }
        Ok(TaskProcess {
            pid,
            start_ticks,
            exited,
        })
    }
}

/// Resolves `command` through `path` (the task's PATH, else the agent's), like `exec.LookPath`.
pub fn resolve_command(command: &str, path: Option<&str>) -> Option<PathBuf> {
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_executable(&p).then_some(p);
    }
    let agent_path = std::env::var("PATH").ok();
    let path = path
        .map(str::to_string)
        .or(agent_path)
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_string());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The uid and gid of `user`.
pub fn lookup_user(user: &str) -> Result<(u32, u32), DriverError> {
    let unknown = || DriverError::UnknownUser {
        user: user.to_string(),
    };
    let name = CString::new(user).map_err(|_| unknown())?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the duration of the call; buf outlives the use of pwd's
    // string fields, and only the numeric ids are read.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return Err(unknown());
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// The groups `user` belongs to, looked up before forking (the lookup reads files and allocates,
/// which a forked child of a threaded process must not do).
fn supplementary_groups(user: &str, gid: u32) -> Vec<libc::gid_t> {
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: groups has room for `count` entries; getgrouplist writes at most that many and
        // sets count to the number it needs.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        if count <= n || n > 65_536 {
            return vec![gid];
        }
        n = count;
    }
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
pub fn process_start_ticks(pid: i32) -> Option<u64> {
    proc_stat(pid).map(|s| s.start_ticks)
}

/// What the agent reads from `/proc/<pid>/stat`.
struct ProcStat {
    /// A zombie (`Z`) or dead (`X`) process runs nothing; only its parent's wait removes it.
    gone: bool,
    pgid: i32,
    start_ticks: u64,
}

fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it follow the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    Some(ProcStat {
        gone: matches!(*fields.first()?, "Z" | "X"),
        pgid: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is alive and is the same process that started at `start_ticks`. A zombie is not
/// alive: a leftover of a crashed agent is nobody's child here, and its zombie lasts until the
/// process it was handed to reaps it (some container inits never do).
pub fn same_process_alive(pid: i32, start_ticks: u64) -> bool {
    pid > 0 && proc_stat(pid).is_some_and(|s| !s.gone && s.start_ticks == start_ticks)
}

/// The groups among `pgids` that still have a member that is not a zombie.
pub fn live_groups(pgids: &std::collections::BTreeSet<i32>) -> std::collections::BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return std::collections::BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(|s| !s.gone && pgids.contains(&s.pgid))
        .map(|s| s.pgid)
        .collect()
}

/// How long a process may take to die once SIGKILLed (it dies when it next runs) before the agent
/// goes on anyway: a leftover must be gone before the task's new process starts.
pub const SIGKILL_WAIT: Duration = Duration::from_secs(2);

struct Waiter {
    pid: i32,
    pidfd: OwnedFd,
    stdout: Option<(std::fs::File, RotatingFile)>,
    stderr: Option<(std::fs::File, RotatingFile)>,
}

/// After the process exits, how long the waiter keeps copying output from pipes that stay open
/// (held by a child that escaped the process group) before it kills their holders, and again after
/// that before it gives up on them.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Bytes read from a task's pipe at a time; allocated when the task first writes.
const PIPE_CHUNK: usize = 16 * 1024;

impl Waiter {
    /// Pumps output and watches the process; sends its status as soon as it is reaped (output
    /// still in flight is drained afterwards).
    fn run(mut self, mut child: Child, exited: crossbeam_channel::Sender<ExitStatus>) {
        let mut status: Option<ExitStatus> = None;
        let mut buf: Vec<u8> = Vec::new();
        let mut drain_deadline: Option<std::time::Instant> = None;
        let mut hunted = false;
        loop {
            let mut fds = Vec::with_capacity(3);
            let mut which = Vec::with_capacity(3);
            for (i, s) in [&self.stdout, &self.stderr].into_iter().enumerate() {
                if let Some((fd, _)) = s {
                    fds.push(libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    which.push(i);
                }
            }
            if status.is_none() {
                fds.push(libc::pollfd {
                    fd: self.pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                which.push(2);
            }
            if fds.is_empty() {
                break;
            }
            let timeout_ms = match drain_deadline {
                None => -1,
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        if hunted {
                            break;
                        }
                        // Still open after the group was killed: a process that left the group
                        // (setsid, setpgid) holds the pipes and would outlive the task.
                        hunted = true;
                        self.kill_pipe_holders();
                        drain_deadline = Some(std::time::Instant::now() + DRAIN_AFTER_EXIT);
                        continue;
                    }
                    left.as_millis().min(i32::MAX as u128) as i32
                }
            };
            // SAFETY: fds is a valid array of pollfd for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                log::error!("poll on task {} failed: {err}", self.pid);
                break;
            }
            for (pfd, &w) in fds.iter().zip(&which) {
                if pfd.revents == 0 {
                    continue;
                }
                match w {
                    2 => {
                        let st = reap(&mut child);
                        status = Some(st);
                        // Whatever the task started and left behind dies with it.
                        let _ = signal_group(self.pid, libc::SIGKILL);
                        let _ = exited.send(st);
                        drain_deadline = Some(std::time::Instant::now() + DRAIN_AFTER_EXIT);
                    }
                    i => {
                        let slot = if i == 0 {
                            &mut self.stdout
                        } else {
                            &mut self.stderr
                        };
                        if let Some((pipe, file)) = slot {
                            if buf.is_empty() {
                                buf.resize(PIPE_CHUNK, 0);
                            }
                            // poll said readable: this read returns at once.
                            match pipe.read(&mut buf) {
                                Ok(0) => *slot = None,
                                Ok(n) => {
                                    if let Err(e) = file.write(&buf[..n]) {
                                        log::warn!("cannot write log of task {}: {e}", self.pid);
                                    }
                                }
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                Err(_) => *slot = None,
                            }
                        }
                    }
                }
            }
        }
        if status.is_none() {
            let _ = exited.send(reap(&mut child));
        }
    }
}

impl Waiter {
    /// SIGKILLs every process that holds one of the task's output pipes: after the task's group is
    /// gone, only a process that escaped the group can (a pipe is found by its inode, so a new run
    /// of the same task, which has pipes of its own, is never touched).
    fn kill_pipe_holders(&self) {
        use std::os::unix::fs::MetadataExt;
        let inodes: Vec<u64> = [&self.stdout, &self.stderr]
            .into_iter()
            .flatten()
            .filter_map(|(pipe, _)| pipe.metadata().ok().map(|m| m.ino()))
            .collect();
        for pid in pipe_holders(&inodes) {
            log::warn!(
                "process {pid} left the process group of task {} and outlived it: killing it",
                self.pid
            );
            // SAFETY: kill(2) takes a pid and a signal; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Processes other than the agent with a descriptor on one of the pipes `inodes`.
fn pipe_holders(inodes: &[u64]) -> Vec<i32> {
    let mut found = Vec::new();
    if inodes.is_empty() {
        return found;
    }
    for pid in other_processes() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).ok().is_some_and(|target| {
                target
                    .to_str()
                    .and_then(|t| t.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok())
                    .is_some_and(|ino: u64| inodes.contains(&ino))
            })
        });
        if holds {
            found.push(pid);
        }
    }
    found
}

fn reap(child: &mut Child) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match child.wait() {
        Ok(st) => match (st.code(), st.signal()) {
            (_, Some(sig)) => ExitStatus {
                exit_code: 128 + sig,
                signal: sig,
            },
            (Some(code), None) => ExitStatus {
                exit_code: code,
                signal: 0,
            },
            (None, None) => ExitStatus {
                exit_code: -1,
                signal: 0,
            },
        },
        Err(e) => {
            log::error!("cannot reap task process {}: {e}", child.id());
            ExitStatus {
                exit_code: -1,
                signal: 0,
            }
        }
    }
}

/// Stops the process group led by `pid`, which is not a child of this agent (an agent that crashed
/// started it): the kill signal, up to `timeout` for it to go, then SIGKILL for the whole group.
/// This runs once per task at agent start, so a short poll of `/proc` is the simple way to wait.
pub fn stop_foreign_group(pid: i32, start_ticks: u64, signal: i32, timeout: Duration) {
    let _ = signal_group(pid, signal);
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline && same_process_alive(pid, start_ticks) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = signal_group(pid, libc::SIGKILL);
    let deadline = std::time::Instant::now() + SIGKILL_WAIT;
    while std::time::Instant::now() < deadline && same_process_alive(pid, start_ticks) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The PIDs in `/proc`, except this agent's own.
fn other_processes() -> impl Iterator<Item = i32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(move |pid| *pid != me)
}

/// A process of a task, found through `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pid: i32,
    pub pgid: i32,
    pub alloc_id: String,
    pub task: String,
}

/// Finds processes whose environment marks them as a task (`NOMAD_ALLOC_ID` and
/// `NOMAD_TASK_NAME`) of one of `alloc_ids`, or of any allocation whose directory
/// (`NOMAD_ALLOC_DIR`) lies under `alloc_root`, this agent's `<data_dir>/alloc`. After an agent
/// crash the first finds a task process even when the crash came before its PID reached the state
/// file; the second finds the task of an allocation the state file no longer holds: a job purged
/// while its task was still stopping (waiting out its `kill_timeout`) when the agent died.
pub fn find_task_processes(
    alloc_ids: &std::collections::HashSet<String>,
    alloc_root: &Path,
) -> Vec<Leftover> {
    let mut found = Vec::new();
    // A relative root would match relative paths a task set for itself.
    let alloc_root = alloc_root.is_absolute().then_some(alloc_root);
    for pid in other_processes() {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut alloc = None;
        let mut task = None;
        let mut alloc_dir = None;
        for var in environ.split(|b| *b == 0) {
            if let Some(v) = var.strip_prefix(b"NOMAD_ALLOC_ID=") {
                alloc = Some(String::from_utf8_lossy(v).into_owned());
            } else if let Some(v) = var.strip_prefix(b"NOMAD_TASK_NAME=") {
                task = Some(String::from_utf8_lossy(v).into_owned());
            } else if let Some(v) = var.strip_prefix(b"NOMAD_ALLOC_DIR=") {
                alloc_dir = Some(PathBuf::from(std::ffi::OsStr::from_bytes(v)));
            }
        }
        let (Some(alloc_id), Some(task)) = (alloc, task) else {
            continue;
        };
        let ours = |dir: &Path| alloc_root.is_some_and(|root| dir.starts_with(root));
        if !alloc_ids.contains(&alloc_id) && !alloc_dir.as_deref().is_some_and(ours) {
            continue;
        }
        // SAFETY: getpgid takes a pid and returns its group or -1.
        let pgid = unsafe { libc::getpgid(pid) };
        if pgid > 0 {
            found.push(Leftover {
                pid,
                pgid,
                alloc_id,
                task,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn leftovers_are_found_by_allocation_id_or_by_a_directory_under_this_agent() {
        let root = PathBuf::from(format!("/nw-data-{}/alloc", uuid::Uuid::new_v4()));
        let id = || uuid::Uuid::new_v4().to_string();
        let (known, purged, foreign) = (id(), id(), id());
        let spawn = |alloc: &str, dir: PathBuf| {
            Command::new("sleep")
                .arg("30")
                .env("NOMAD_ALLOC_ID", alloc)
                .env("NOMAD_TASK_NAME", "t")
                .env("NOMAD_ALLOC_DIR", dir)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let mut children = [
            spawn(&known, PathBuf::from("/elsewhere/alloc").join(&known)),
            spawn(&purged, root.join(&purged).join("alloc")),
            spawn(&foreign, PathBuf::from("/other/alloc").join(&foreign)),
        ];
        // The environment is in /proc once the child has exec'd.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while children.iter().any(|c| {
            std::fs::read(format!("/proc/{}/environ", c.id()))
                .map(|e| !e.windows(14).any(|w| w == b"NOMAD_ALLOC_ID"))
                .unwrap_or(true)
        }) && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let found = find_task_processes(&HashSet::from([known.clone()]), &root);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let mut allocs: Vec<&str> = found.iter().map(|l| l.alloc_id.as_str()).collect();
        allocs.sort();
        let mut want = vec![known.as_str(), purged.as_str()];
        want.sort();
        assert_eq!(allocs, want, "{found:?}");
        assert!(found.iter().all(|l| l.task == "t" && l.pgid == l.pid));
    }

    #[test]
    fn a_zombie_is_not_alive_and_keeps_no_group_alive() {
        use std::collections::BTreeSet;
        let mut zombie = Command::new("true").process_group(0).spawn().unwrap();
        let pid = zombie.id() as i32;
        let ticks = process_start_ticks(pid).unwrap();
        // Not waited for, it stays a zombie until reaped.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while proc_stat(pid).is_some_and(|s| !s.gone) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(proc_stat(pid).is_some(), "the zombie is still there");
        assert!(!same_process_alive(pid, ticks));
        assert!(live_groups(&BTreeSet::from([pid])).is_empty());
        zombie.wait().unwrap();

        let mut live = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = live.id() as i32;
        let ticks = process_start_ticks(pid).unwrap();
        assert!(same_process_alive(pid, ticks));
        assert!(!same_process_alive(pid, ticks + 1));
        assert_eq!(live_groups(&BTreeSet::from([pid])), BTreeSet::from([pid]));
        live.kill().unwrap();
        live.wait().unwrap();
    }
}
