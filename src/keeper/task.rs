//! One task in the keeper: how it is started (fork, credentials, parent-death signal, `execve`)
//! and what the keeper keeps of it until the agent has taken its end.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::logs::{open_log_dir, RotatingFile, Stream};
use crate::poller::Poller;
use crate::procfs;
use crate::sys::{pidfd_open, signal_group, DRAIN_AFTER_EXIT};
use crate::{Held, StartTask};

/// One task the keeper holds.
pub(crate) struct Task {
    pub held: Held,
    /// Until reaped.
    pub child: Option<Child>,
    pub pidfd: Option<OwnedFd>,
    pub out: Option<(File, RotatingFile)>,
    pub err: Option<(File, RotatingFile)>,
    pub inodes: Vec<u64>,
    pub drain_until: Option<Instant>,
    pub hunted: bool,
    /// The agent has taken its status: dropped once its pipes are drained.
    pub forgotten: bool,
}

impl Task {
    pub fn done(&self) -> bool {
        self.forgotten && self.child.is_none() && self.out.is_none() && self.err.is_none()
    }
}

impl Task {
    /// Starts a task: its own process group, its credentials, the parent-death signal, its pipes.
    /// `alloc_root` is `<data_dir>/alloc`: the log directory must be beneath it.
    pub(crate) fn spawn(spec: &StartTask, inherit: Inherit, alloc_root: &Path) -> io::Result<Task> {
        let Inherit {
            keeper,
            nofile,
            oom_score_adj,
        } = inherit;
        // Opened before the task runs, so a log directory that cannot be used (a link a task put
        // in its place) is a failed start that says why, not output silently lost. No errno: the
        // agent would print it as the command's own error.
        let logs = open_log_dir(alloc_root, &spec.log_dir)
            .map_err(|e| io::Error::other(format!("cannot open the task's log directory: {e}")))?;
        let out_dir = logs.try_clone()?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env_clear()
            .envs(&spec.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let cwd = CString::new(spec.cwd.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::other("task directory path has a NUL byte"))?;
        let run_as = spec.run_as.clone();
        let exec = Exec::new(spec)?;
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                // The data directory is 0700, so a task of another user could not enter its
                // directory once it is that user: enter it first, then drop privileges.
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some((uid, gid, groups)) = &run_as {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(*gid) != 0
                        || libc::setuid(*uid) != 0
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                // After the credentials change, which clears it: a keeper that dies takes the
                // task with it. A keeper already gone before this line is caught by getppid.
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                    || libc::getppid() != keeper
                {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                libc::setrlimit(libc::RLIMIT_NOFILE, &nofile);
                if let Some((value, len)) = &oom_score_adj {
                    // Raising it back needs no privilege.
                    let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
                    if fd >= 0 {
                        libc::write(fd, value.as_ptr().cast(), *len);
                        libc::close(fd);
                    }
                }
                // execve itself, not the execvp that would follow: execvp runs a file the kernel
                // refuses to execute (ENOEXEC) with /bin/sh, where the task must fail to start.
                Err(exec.exec())
            });
        }
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        let pidfd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = signal_group(pid, libc::SIGKILL);
                let _ = child.wait();
                return Err(e);
            }
        };
        let start_ticks = procfs::process_start_ticks(pid).unwrap_or(0);
        let log = |dir, stream| {
            RotatingFile::open(
                dir,
                &spec.log_name,
                stream,
                spec.max_files,
                spec.max_file_size_mb,
            )
        };
        let out = child.stdout.take().map(|s| {
            let f = File::from(OwnedFd::from(s));
            set_nonblocking(&f);
            (f, log(out_dir, Stream::Stdout))
        });
        let err = child.stderr.take().map(|s| {
            let f = File::from(OwnedFd::from(s));
            set_nonblocking(&f);
            (f, log(logs, Stream::Stderr))
        });
        let inodes = [&out, &err]
            .into_iter()
            .flatten()
            .filter_map(|(f, _)| f.metadata().ok().map(|m| m.ino()))
            .collect();
        Ok(Task {
            held: Held {
                pid,
                start_ticks,
                alloc_id: spec.alloc_id.clone(),
                task: spec.task.clone(),
                exit: None,
            },
            child: Some(child),
            pidfd: Some(pidfd),
            out,
            err,
            inodes,
            drain_until: None,
            hunted: false,
            forgotten: false,
        })
    }
}

/// What a task gets back of what the keeper changed for itself: its PID (for the parent-death
/// check), the open-file limit the keeper had before it raised its own, and the OOM score
/// adjustment it had before it lowered its own (as the bytes written to `/proc`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inherit {
    pub keeper: i32,
    pub nofile: libc::rlimit,
    pub oom_score_adj: Option<([u8; 16], usize)>,
}

/// An `execve` prepared before the fork: the child only calls it.
struct Exec {
    program: CString,
    _args: Vec<CString>,
    _env: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the CStrings this value owns, which never move or change.
unsafe impl Send for Exec {}
// SAFETY: as above; nothing writes through the pointers.
unsafe impl Sync for Exec {}

impl Exec {
    fn new(spec: &StartTask) -> io::Result<Exec> {
        let nul =
            |_| io::Error::other("a NUL byte in the task's command, arguments or environment");
        let program = CString::new(spec.program.as_os_str().as_encoded_bytes()).map_err(nul)?;
        let mut args = vec![program.clone()];
        for a in &spec.args {
            args.push(CString::new(a.as_bytes()).map_err(nul)?);
        }
        let env = spec
            .env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(nul))
            .collect::<io::Result<Vec<_>>>()?;
        let argv = args
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let envp = env
            .iter()
            .map(|e| e.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        Ok(Exec {
            program,
            _args: args,
            _env: env,
            argv,
            envp,
        })
    }

    /// Runs the program in place of this process; answers only when that failed.
    fn exec(&self) -> io::Error {
        // SAFETY: NUL-terminated strings and NULL-terminated arrays owned by self.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            )
        };
        io::Error::last_os_error()
    }
}

/// A task's drain deadline passed: kill the holders of its pipes once, then give up on them.
pub(crate) fn drain_timeout(t: &mut Task, poller: &Poller) {
    if t.out.is_none() && t.err.is_none() {
        t.drain_until = None;
        return;
    }
    if t.hunted {
        for (pipe, _) in [t.out.take(), t.err.take()].into_iter().flatten() {
            poller.remove(&pipe);
        }
        t.drain_until = None;
        return;
    }
    t.hunted = true;
    for pid in procfs::pipe_holders(&t.inodes) {
        eprintln!(
            "nodeward-keeper: process {pid} left the process group of {} and outlived it: killing it",
            t.held.pid
        );
        // SAFETY: kill(2) takes a pid and a signal; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    t.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
}

fn set_nonblocking(f: &File) {
    // SAFETY: fcntl on a descriptor `f` owns.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}
