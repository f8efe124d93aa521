//! The one way nodeward runs a child process: task drivers and host volume plugins both start,
//! watch, signal and kill their children here, and nothing else in the agent calls `kill`,
//! `waitpid` or `pidfd_open`.
//!
//! - [`spawn`] starts a program with exactly the environment it is given, in a process group of
//!   its own (so the whole tree it starts can be signalled at once), optionally as another user,
//!   with optional resource [`Limit`]s and stdin from memory, no descriptor of the agent's but
//!   stdin, stdout and stderr, and starts one waiter thread for it.
//! - [`Child`] is the owner's side: the exit channel, signals to the group, a stop with a timeout
//!   ([`Child::stop`]), a hard kill ([`Child::kill`]) and the end of supervision ([`Child::release`]).
//! - [`ProcessId`] is a PID together with its start time, the only way a PID is trusted once the
//!   agent no longer holds the process as its child.
//! - [`orphan`]: processes this agent did not start, left by an agent that crashed: finding them
//!   and stopping them by polling `/proc`.
//!
//! Protocol between the owner and the waiter thread of a child:
//! - The waiter owns the child, its pidfd and the read ends of its stdout and stderr. It copies
//!   output into the owner's [`Sink`]s as it arrives (a child that writes a lot never blocks on a
//!   full pipe), and calls [`Sink::eof`] when a pipe reaches end of file.
//! - When the pidfd says the child exited, the waiter reaps it, marks it reaped, kills what is left
//!   of its group when [`AfterExit`] says so, sends one [`ExitStatus`] and drops the sender: after
//!   the status has been received, the exit channel is disconnected.
//! - It then drains the pipes for as long as [`Drain`] allows. Pipes still open then are held by a
//!   process that left the group (`setsid`): the waiter kills the holders, drains for
//!   [`DRAIN_AFTER_EXIT`] more at most, and ends.
//! - The owner signals the group through [`Child`] (never the waiter), and ends the supervision
//!   with [`Child::release`], which kills whatever still holds the pipes and joins the waiter
//!   with a bound. No wait in this module is unbounded except the owner's own `select!` on the
//!   exit channel, which the owner pairs with its deadline, commands or shutdown.

pub mod keeper;
pub mod orphan;
use nodeward_keeper::procfs;
mod user;
mod waiter;

use crossbeam_channel::{after, bounded, select, Receiver};
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::thread::Worker;
pub use orphan::{find_task_processes, stop_foreign_group, stop_groups, Leftover, SIGKILL_WAIT};
pub use procfs::{live_groups, process_start_ticks, same_process_alive, start_time_nanos};
pub use user::{lookup_user, RunAs};
pub use waiter::{AfterExit, Capped, Drain, Sink, Supervision, DRAIN_AFTER_EXIT};

/// Why a child could not be started or watched.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `fork`/`exec` failed (or a setting could not be handed to the child).
    #[error("{0}")]
    Spawn(io::Error),
    #[error("cannot watch process {pid}: {source}")]
    Watch { pid: i32, source: io::Error },
    #[error("user {user:?} not found")]
    UnknownUser { user: String },
    #[error("cannot run as user {user:?}: the agent is not running as root")]
    NotRoot { user: String },
}

/// How a process ended: a signal `S` reads as exit code `128 + S`, the way shells and Nomad say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub exit_code: i32,
    pub signal: i32,
}

impl ExitStatus {
    /// The status of a process whose end could not be observed.
    pub const fn lost() -> ExitStatus {
        ExitStatus {
            exit_code: -1,
            signal: 0,
        }
    }

    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.signal == 0
    }
}

/// A PID and the time its process started, in clock ticks since boot (`/proc/<pid>/stat` field
/// 22): together they name one process, where a PID alone may have been reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: i32,
    pub start_ticks: u64,
}

impl ProcessId {
    /// Whether this very process still runs (a zombie does not).
    pub fn is_alive(&self) -> bool {
        same_process_alive(self.pid, self.start_ticks)
    }
}

/// What to run. The environment is exactly `env`: nothing of the agent's is inherited.
#[derive(Debug, Clone, Copy)]
pub struct ProcessSpec<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a std::collections::BTreeMap<String, String>,
    pub cwd: &'a Path,
    pub run_as: Option<&'a RunAs>,
    /// What the child reads on stdin; `None` is `/dev/null`.
    pub stdin: Option<&'a [u8]>,
    /// Resource limits the child starts with, on top of the open-files limit every child gets.
    pub limits: &'a [Limit],
}

/// A resource limit a child starts with (`setrlimit(2)`, set between fork and exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub resource: Resource,
    pub soft: u64,
    pub hard: u64,
}

/// The resources a [`Limit`] can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// Bytes of virtual memory (`RLIMIT_AS`): past it, allocations fail.
    AddressSpace,
    /// Seconds of CPU time (`RLIMIT_CPU`): SIGXCPU at the soft limit, SIGKILL at the hard one.
    CpuSeconds,
    /// Bytes of a core dump (`RLIMIT_CORE`).
    CoreSize,
    /// Bytes of a file the child writes (`RLIMIT_FSIZE`).
    FileSize,
}

impl Resource {
    fn raw(self) -> libc::__rlimit_resource_t {
        match self {
            Resource::AddressSpace => libc::RLIMIT_AS,
            Resource::CpuSeconds => libc::RLIMIT_CPU,
            Resource::CoreSize => libc::RLIMIT_CORE,
            Resource::FileSize => libc::RLIMIT_FSIZE,
        }
    }
}

/// A sealed-in-memory copy of `bytes` to be a child's stdin: the child reads it at its own pace
/// and the agent needs no writer thread (a pipe would hold 64 KiB and block the rest).
fn stdin_file(bytes: &[u8]) -> io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"nodeward-stdin".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned to us and is owned by nothing else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(file)
}

use nodeward_keeper::sys::kill_process;
pub use nodeward_keeper::sys::signal_group;

/// How long [`Child::stop`] waits for the reap after SIGKILL before it gives up on the process (one
/// stuck in the kernel cannot wedge its owner).
pub const REAP_AFTER_SIGKILL: Duration = Duration::from_secs(30);

/// How long [`Child::release`] lets the waiter finish on its own before it kills the holders of
/// the pipes, and then how long it waits for the waiter to end.
const RELEASE_GRACE: Duration = Duration::from_millis(100);
const RELEASE_JOIN: Duration = Duration::from_secs(5);

/// A child started by [`spawn`], leading a process group of its own, and its waiter thread.
pub struct Child {
    id: ProcessId,
    exited: Receiver<ExitStatus>,
    /// Set by the waiter once the child is reaped: from then on its PID may belong to another
    /// process, and only a group that still has members keeps the number reserved.
    reaped: Arc<AtomicBool>,
    /// Inodes of the stdout and stderr pipes, to find processes that still hold them.
    pipes: Vec<u64>,
    waiter: Worker<()>,
}

impl Child {
    pub fn id(&self) -> ProcessId {
        self.id
    }

    /// Receives the exit status once, then disconnects; select on it.
    pub fn exited(&self) -> &Receiver<ExitStatus> {
        &self.exited
    }

    /// Sends `signal` to the child's whole process group.
    pub fn signal_group(&self, signal: i32) -> io::Result<()> {
        signal_group(self.id.pid, signal)
    }

    /// SIGKILLs the group and waits up to `reap_within` for the reap. Answers the status when it
    /// was still to be received; `None` when it was received before or never came.
    pub fn kill(&self, reap_within: Duration) -> Option<ExitStatus> {
        let _ = self.signal_group(libc::SIGKILL);
        self.exited.recv_timeout(reap_within).ok()
    }

    /// Sends `signal` to the group, waits up to `timeout` for the exit, then SIGKILLs the group and
    /// waits [`REAP_AFTER_SIGKILL`] more. `None` when the process did not die even then.
    pub fn stop(&self, signal: i32, timeout: Duration) -> Option<ExitStatus> {
        if let Err(e) = self.signal_group(signal) {
            log::warn!("cannot signal process group {}: {e}", self.id.pid);
        }
        select! {
            recv(self.exited) -> st => return Some(st.unwrap_or(ExitStatus::lost())),
            recv(after(timeout)) -> _ => {}
        }
        let _ = self.signal_group(libc::SIGKILL);
        select! {
            recv(self.exited) -> st => Some(st.unwrap_or(ExitStatus::lost())),
            recv(after(REAP_AFTER_SIGKILL)) -> _ => None,
        }
    }

    /// Kills the group unless the child was reaped already (once its group is empty, the PID may
    /// name another process's group), and gives it [`SIGKILL_WAIT`] to go.
    pub fn kill_unless_reaped(&self) {
        if !self.reaped.load(Ordering::Acquire) {
            let _ = self.kill(SIGKILL_WAIT);
        }
    }

    /// Ends the supervision: the owner wants nothing more from this child. Whatever still holds
    /// its output pipes a moment later (a process that escaped the group) is killed, and the
    /// waiter is joined. A waiter that does not end even then (a process stuck in the kernel) is
    /// left to finish alone, with an error in the log.
    pub fn release(self) {
        let Err(waiter) = self.waiter.join_until(Instant::now() + RELEASE_GRACE) else {
            return;
        };
        for pid in procfs::pipe_holders(&self.pipes) {
            log::warn!(
                "process {pid} still holds the output of process group {}: killing it",
                self.id.pid
            );
            kill_process(pid);
        }
        if waiter.join_until(Instant::now() + RELEASE_JOIN).is_err() {
            log::error!(
                "the waiter of process {} did not end; leaving it to finish alone",
                self.id.pid
            );
        }
    }
}

/// The open-file limit the agent started with, before it raised its own (`daemon`): every process
/// the agent starts gets it back, as Go's runtime (and so Nomad) does for its children, since
/// programs that still use `select(2)` fail past 1,024 descriptors. Unset: children inherit the
/// agent's limit.
static CHILD_NOFILE: OnceLock<libc::rlimit> = OnceLock::new();

/// Records the open-file limit the agent's children get (once, at start).
pub fn set_child_nofile(limit: libc::rlimit) {
    let _ = CHILD_NOFILE.set(limit);
}

/// Starts `spec` in a process group of its own, with stdin on `/dev/null` (or `spec.stdin`) and
/// stdout and stderr copied into `stdout` and `stderr` by a waiter thread named `thread_name`.
/// The child inherits no descriptor but these three.
pub fn spawn(
    spec: &ProcessSpec<'_>,
    stdout: Box<dyn Sink>,
    stderr: Box<dyn Sink>,
    supervision: Supervision,
    thread_name: String,
) -> Result<Child, ProcessError> {
    let stdin = match spec.stdin {
        None => Stdio::null(),
        Some(bytes) => Stdio::from(stdin_file(bytes).map_err(ProcessError::Spawn)?),
    };
    let mut cmd = Command::new(spec.program);
    cmd.args(spec.args)
        .env_clear()
        .envs(spec.env)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    match spec.run_as {
        None => {
            cmd.current_dir(spec.cwd);
        }
        Some(run_as) => {
            // The data directory is 0700, so a task of another user could not enter its
            // directory once it is that user. Enter it first, then drop privileges: the task
            // works from its directory (`local/`, `secrets/`, `../alloc/`).
            let cwd = CString::new(spec.cwd.as_os_str().as_encoded_bytes()).map_err(|_| {
                ProcessError::Spawn(io::Error::other("task directory path has a NUL byte"))
            })?;
            let (uid, gid, groups) = (run_as.uid, run_as.gid, run_as.groups.clone());
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
    }
    if let Some(limit) = CHILD_NOFILE.get().copied() {
        // SAFETY: setrlimit(2) is async-signal-safe and changes the child's own limit only.
        unsafe {
            cmd.pre_exec(move || {
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                Ok(())
            });
        }
    }
    let limits: Vec<(libc::__rlimit_resource_t, libc::rlimit)> = spec
        .limits
        .iter()
        .map(|l| {
            let limit = libc::rlimit {
                rlim_cur: l.soft,
                rlim_max: l.hard,
            };
            (l.resource.raw(), limit)
        })
        .collect();
    // SAFETY: setrlimit(2) and close_range(2) are async-signal-safe, change the child only, and
    // read memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for (resource, limit) in &limits {
                if libc::setrlimit(*resource, limit) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Descriptors a library opened without O_CLOEXEC would otherwise reach the child
            // (the standard library sets it on its own). Marked, not closed: the exec-error pipe
            // of `Command` must stay open until the exec. Kernels before 5.11 refuse the flag;
            // the standard library's descriptors are closed at exec there all the same.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(ProcessError::Spawn)?;
    let pid = child.id() as i32;
    let pidfd = match nodeward_keeper::sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(source) => {
            let _ = signal_group(pid, libc::SIGKILL);
            let _ = child.wait();
            return Err(ProcessError::Watch { pid, source });
        }
    };
    let start_ticks = process_start_ticks(pid).unwrap_or(0);
    let out = child
        .stdout
        .take()
        .map(|s| std::fs::File::from(OwnedFd::from(s)));
    let err = child
        .stderr
        .take()
        .map(|s| std::fs::File::from(OwnedFd::from(s)));
    let pipes = [&out, &err]
        .into_iter()
        .flatten()
        .filter_map(|f| f.metadata().ok().map(|m| m.ino()))
        .collect();
    let reaped = Arc::new(AtomicBool::new(false));
    let (tx, exited) = bounded(1);
    let w = waiter::Waiter {
        pid,
        pidfd,
        stdout: out.map(|f| (f, stdout)),
        stderr: err.map(|f| (f, stderr)),
        supervision,
        reaped: reaped.clone(),
    };
    let waiter = crate::thread::spawn(thread_name, move || w.run(child, tx)).map_err(|source| {
        let _ = signal_group(pid, libc::SIGKILL);
        ProcessError::Watch { pid, source }
    })?;
    Ok(Child {
        id: ProcessId { pid, start_ticks },
        exited,
        reaped,
        pipes,
        waiter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::Sender;
    use std::collections::BTreeMap;

    /// Collects what a child wrote and hands it over at end of file.
    struct Collect(Vec<u8>, Option<Sender<Vec<u8>>>);

    impl Sink for Collect {
        fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(bytes);
            Ok(())
        }
        fn eof(&mut self) {
            if let Some(tx) = self.1.take() {
                let _ = tx.send(std::mem::take(&mut self.0));
            }
        }
    }

    fn sh(script: &str, supervision: Supervision) -> (Child, Receiver<Vec<u8>>) {
        let (tx, rx) = bounded(1);
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let args = ["-c".to_string(), script.to_string()];
        let spec = ProcessSpec {
            program: Path::new("/bin/sh"),
            args: &args,
            env: &env,
            cwd: Path::new("/"),
            run_as: None,
            stdin: None,
            limits: &[],
        };
        let child = spawn(
            &spec,
            Box::new(Collect(Vec::new(), Some(tx))),
            Box::new(Collect(Vec::new(), None)),
            supervision,
            "t-process".to_string(),
        )
        .unwrap();
        (child, rx)
    }

    /// stdin larger than a pipe holds arrives whole, the limits are in force, and a descriptor
    /// the agent opened without O_CLOEXEC does not reach the child.
    #[test]
    fn stdin_limits_and_descriptors_of_a_child() {
        // SAFETY: dup returns a new descriptor (without O_CLOEXEC) or -1.
        let leaked = unsafe { libc::dup(2) };
        assert!(leaked > 2);
        let (tx, rx) = bounded(1);
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let args = [
            "-c".to_string(),
            "wc -c; ulimit -t; ulimit -v; ls /proc/self/fd | tr '\\n' ' '".to_string(),
        ];
        let input = vec![b'x'; 300 << 10];
        let limits = [
            Limit {
                resource: Resource::CpuSeconds,
                soft: 7,
                hard: 8,
            },
            Limit {
                resource: Resource::AddressSpace,
                soft: 256 << 20,
                hard: 256 << 20,
            },
        ];
        let spec = ProcessSpec {
            program: Path::new("/bin/sh"),
            args: &args,
            env: &env,
            cwd: Path::new("/"),
            run_as: None,
            stdin: Some(&input),
            limits: &limits,
        };
        let child = spawn(
            &spec,
            Box::new(Collect(Vec::new(), Some(tx))),
            Box::new(Collect(Vec::new(), None)),
            Supervision {
                after_exit: AfterExit::KillGroup,
                drain: Drain::For(DRAIN_AFTER_EXIT),
            },
            "t-process".to_string(),
        )
        .unwrap();
        assert!(child.exited().recv().unwrap().success());
        let out = String::from_utf8(rx.recv().unwrap()).unwrap();
        child.release();
        // SAFETY: closes the descriptor dup returned above.
        unsafe { libc::close(leaked) };
        assert_eq!(out, format!("{}\n7\n{}\n0 1 2 3 ", 300 << 10, 256 << 10));
    }

    #[test]
    fn output_and_status_arrive_and_the_channel_then_disconnects() {
        let (child, out) = sh(
            "echo hello; echo $PATH; exit 3",
            Supervision {
                after_exit: AfterExit::KillGroup,
                drain: Drain::For(DRAIN_AFTER_EXIT),
            },
        );
        let st = child.exited().recv().unwrap();
        assert_eq!(
            st,
            ExitStatus {
                exit_code: 3,
                signal: 0
            }
        );
        assert_eq!(out.recv().unwrap(), b"hello\n/usr/bin:/bin\n");
        assert!(child.exited().recv().is_err(), "one status, then closed");
        assert_eq!(child.kill(Duration::from_secs(1)), None);
        child.release();
    }

    #[test]
    fn stop_signals_the_group_then_kills_it() {
        let ready = std::env::temp_dir().join(format!("nw-stop-{}", uuid::Uuid::new_v4()));
        let (child, _out) = sh(
            &format!("trap '' INT; : > {}; sleep 30 & wait", ready.display()),
            Supervision {
                after_exit: AfterExit::KillGroup,
                drain: Drain::For(DRAIN_AFTER_EXIT),
            },
        );
        // Signalled before its trap is set, the shell would die of SIGINT.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        let st = child
            .stop(libc::SIGINT, Duration::from_millis(200))
            .unwrap();
        assert_eq!((st.exit_code, st.signal), (137, libc::SIGKILL));
        child.release();
    }

    #[test]
    fn release_kills_a_process_that_left_the_group_holding_the_output() {
        let (child, out) = sh(
            "/usr/bin/setsid sleep 30 & echo $!; exit 0",
            Supervision {
                after_exit: AfterExit::KillGroupIfFailed,
                drain: Drain::For(Duration::from_secs(600)),
            },
        );
        assert!(child.exited().recv().unwrap().success());
        // The escaped sleeper keeps stdout open: no end of file until it dies.
        assert!(out.recv_timeout(Duration::from_millis(200)).is_err());
        let started = Instant::now();
        child.release();
        assert!(started.elapsed() < Duration::from_secs(30));
        let pid: i32 = String::from_utf8(out.recv().unwrap())
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed, it may linger as a zombie until its new parent reaps it.
        assert!(
            procfs::proc_stat(pid).is_none_or(|s| s.gone),
            "{pid} survived"
        );
    }
}
