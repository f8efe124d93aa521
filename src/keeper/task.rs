//! One task in the keeper: what it is started with (its log directory and files, its output
//! pipes; the process itself is made by [`crate::spawn`]) and what the keeper keeps of it until
//! the agent has taken its end.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use crate::logs::{open_log_dir, RotatingFile, Stream};
use crate::poller::Poller;
use crate::procfs;
use crate::spawn::{Inherit, Plan, Proc, Spawner};
use crate::sys::{pidfd_open, signal_group, DRAIN_AFTER_EXIT};
use crate::{Held, StartTask};

/// One task the keeper holds.
pub(crate) struct Task {
    pub held: Held,
    /// Until reaped.
    pub child: Option<Proc>,
    pub pidfd: Option<OwnedFd>,
    pub out: Option<(File, RotatingFile)>,
    pub err: Option<(File, RotatingFile)>,
    pub inodes: Vec<u64>,
    pub drain_until: Option<Instant>,
    pub hunted: bool,
    /// Its cgroup, and the OOM kills counted there before it started (the cgroup is kept across
    /// restarts, so only a kill after this start is this run's).
    pub cgroup: Option<(crate::cgroup::CgroupPaths, u64)>,
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
    pub(crate) fn spawn(
        spec: &StartTask,
        inherit: Inherit,
        alloc_root: &Path,
        spawner: &mut Spawner,
    ) -> io::Result<Task> {
        // Opened before the task runs, so a log directory that cannot be used (a link a task put
        // in its place) is a failed start that says why, not output silently lost. No errno: the
        // agent would print it as the command's own error. A task whose logs are disabled has
        // none: its output goes to /dev/null.
        let logs = (!spec.logs_disabled)
            .then(|| {
                let logs = open_log_dir(alloc_root, &spec.log_dir).map_err(|e| {
                    io::Error::other(format!("cannot open the task's log directory: {e}"))
                })?;
                let out_dir = logs.try_clone()?;
                Ok::<_, io::Error>((out_dir, logs))
            })
            .transpose()?;
        let plan = Plan::new(spec, inherit)?;
        let oom_base = spec
            .cgroup
            .as_ref()
            .and_then(crate::cgroup::oom_kills)
            .unwrap_or(0);
        if let Some(cg) = &spec.cgroup {
            // A frozen cgroup would hold the child, and so the keeper, before the `execve`.
            crate::cgroup::thaw(cg)
                .map_err(|e| io::Error::other(format!("cannot thaw the task's cgroup: {e}")))?;
        }
        let (pipes, pid) = if logs.is_some() {
            let (out, out_w) = pipe()?;
            let (err, err_w) = pipe()?;
            (Some((out, err)), spawner.spawn(&plan, out_w, err_w)?)
        } else {
            // std opens with O_CLOEXEC: only the task's stdout and stderr are this file.
            let null = OpenOptions::new().write(true).open("/dev/null")?;
            (
                None,
                spawner.spawn(&plan, null.try_clone()?.into(), null.into())?,
            )
        };
        let child = Proc { pid };
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
        let (out, err) = match (pipes, logs) {
            (Some((out, err)), Some((out_dir, logs))) => (
                Some((out, log(out_dir, Stream::Stdout))),
                Some((err, log(logs, Stream::Stderr))),
            ),
            _ => (None, None),
        };
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
            cgroup: spec.cgroup.clone().map(|c| (c, oom_base)),
            forgotten: false,
        })
    }
}

/// A task's output pipe: the keeper's reading end (non-blocking) and the task's writing end.
fn pipe() -> io::Result<(File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors that only these two owners hold.
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor `r` owns.
    unsafe {
        let flags = libc::fcntl(r.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(r.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((r, w))
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
