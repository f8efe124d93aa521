//! The waiter thread of one child: copies its output, reaps it, reports its exit, drains.
//!
//! One `poll(2)` over the child's pidfd and its two output pipes, so one thread serves a child
//! however much it writes. The protocol with the owner is in the module docs of
//! [`super`]; this file is the loop.

use crossbeam_channel::Sender;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{kill_process, procfs, signal_group, ExitStatus};

/// Where a child's output goes. Called on the waiter thread only.
pub trait Sink: Send {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// The pipe reached end of file: every process that could write to it has closed it. Not
    /// called when the waiter gives up on a pipe that stays open.
    fn eof(&mut self) {}
}

/// What the waiter does to the rest of the group when the child it watches exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExit {
    /// SIGKILL the group at once: nothing a task started outlives it.
    KillGroup,
    /// SIGKILL the group when the child failed; after a success its helpers may finish (a
    /// plugin's background child still writing its answer).
    KillGroupIfFailed,
}

/// Keeps the first `cap` bytes of a child's output: a child that prints without end cannot make
/// the agent buffer without end (the rest is read and discarded). Hands them over, with whether anything was cut, at end of file.
pub struct Capped {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    done: Option<Sender<(Vec<u8>, bool)>>,
}

impl Capped {
    pub fn new(cap: usize, done: Sender<(Vec<u8>, bool)>) -> Capped {
        Capped {
            kept: Vec::new(),
            cap,
            truncated: false,
            done: Some(done),
        }
    }
}

impl Sink for Capped {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let room = self.cap - self.kept.len();
        if bytes.len() > room {
            self.truncated = true;
        }
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        Ok(())
    }

    fn eof(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send((std::mem::take(&mut self.kept), self.truncated));
        }
    }
}

/// How long the output pipes may stay open after the child exited before the waiter kills the
/// processes that hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    For(Duration),
    Until(Instant),
}

/// How the waiter treats a child's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    pub after_exit: AfterExit,
    pub drain: Drain,
}

pub use nodeward_keeper::sys::DRAIN_AFTER_EXIT;

/// Bytes read from a pipe at a time; allocated when the child first writes.
const PIPE_CHUNK: usize = 16 * 1024;

pub(super) struct Waiter {
    pub pid: i32,
    pub pidfd: OwnedFd,
    pub stdout: Option<(std::fs::File, Box<dyn Sink>)>,
    pub stderr: Option<(std::fs::File, Box<dyn Sink>)>,
    pub supervision: Supervision,
    /// Set as soon as the child is reaped (shared with the owner's [`super::Child`]).
    pub reaped: Arc<AtomicBool>,
}

impl Waiter {
    /// Pumps output and watches the process; sends its status as soon as it is reaped (output
    /// still in flight is drained afterwards).
    pub fn run(mut self, mut child: Child, exited: Sender<ExitStatus>) {
        let mut exited = Some(exited);
        let mut status: Option<ExitStatus> = None;
        let mut buf: Vec<u8> = Vec::new();
        let mut drain_deadline: Option<Instant> = None;
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
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        if hunted {
                            break;
                        }
                        // Still open after the exit: a process that left the group (setsid,
                        // setpgid) holds the pipes and would outlive the child.
                        hunted = true;
                        self.kill_pipe_holders();
                        drain_deadline = Some(Instant::now() + DRAIN_AFTER_EXIT);
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
                log::error!("poll on process {} failed: {err}", self.pid);
                break;
            }
            for (pfd, &w) in fds.iter().zip(&which) {
                if pfd.revents == 0 {
                    continue;
                }
                if w == 2 {
                    let st = reap(&mut child);
                    self.reaped.store(true, Ordering::Release);
                    status = Some(st);
                    let kill = match self.supervision.after_exit {
                        AfterExit::KillGroup => true,
                        AfterExit::KillGroupIfFailed => !st.success(),
                    };
                    if kill {
                        let _ = signal_group(self.pid, libc::SIGKILL);
                    }
                    if let Some(tx) = exited.take() {
                        let _ = tx.send(st);
                    }
                    drain_deadline = Some(match self.supervision.drain {
                        Drain::For(d) => Instant::now() + d,
                        Drain::Until(t) => t,
                    });
                    continue;
                }
                let slot = if w == 0 {
                    &mut self.stdout
                } else {
                    &mut self.stderr
                };
                if let Some((pipe, sink)) = slot {
                    if buf.is_empty() {
                        buf.resize(PIPE_CHUNK, 0);
                    }
                    // poll said readable: this read returns at once.
                    match pipe.read(&mut buf) {
                        Ok(0) => {
                            sink.eof();
                            *slot = None;
                        }
                        Ok(n) => {
                            if let Err(e) = sink.write(&buf[..n]) {
                                log::warn!("cannot keep the output of process {}: {e}", self.pid);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => *slot = None,
                    }
                }
            }
        }
        if status.is_none() {
            let st = reap(&mut child);
            self.reaped.store(true, Ordering::Release);
            if let Some(tx) = exited.take() {
                let _ = tx.send(st);
            }
        }
    }

    /// SIGKILLs every process that holds one of the child's output pipes: after the child's group
    /// is gone, only a process that escaped the group can (a pipe is found by its inode, so a new
    /// run of the same task, which has pipes of its own, is never touched).
    fn kill_pipe_holders(&self) {
        use std::os::unix::fs::MetadataExt;
        let inodes: Vec<u64> = [&self.stdout, &self.stderr]
            .into_iter()
            .flatten()
            .filter_map(|(pipe, _)| pipe.metadata().ok().map(|m| m.ino()))
            .collect();
        for pid in procfs::pipe_holders(&inodes) {
            log::warn!(
                "process {pid} left the process group of {} and outlived it: killing it",
                self.pid
            );
            kill_process(pid);
        }
    }
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
            (None, None) => ExitStatus::lost(),
        },
        Err(e) => {
            log::error!("cannot reap process {}: {e}", child.id());
            ExitStatus::lost()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    const CAP: usize = 1 << 20;

    #[test]
    fn capped_output_keeps_the_head() {
        let feed = |data: &[u8]| {
            let (tx, rx) = bounded(1);
            let mut sink = Capped::new(CAP, tx);
            for chunk in data.chunks(8192) {
                sink.write(chunk).unwrap();
            }
            sink.eof();
            rx.recv().unwrap()
        };
        let data = vec![b'y'; CAP * 3 + 17];
        let (kept, truncated) = feed(&data);
        assert_eq!(kept.len(), CAP);
        assert!(truncated);
        let (kept, truncated) = feed(b"abc");
        assert_eq!((kept.as_slice(), truncated), (&b"abc"[..], false));
    }
}
