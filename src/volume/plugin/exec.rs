//! One run of an external plugin: `<dir>/<id> <operation>` with exactly the `DHV_*` environment,
//! through [`crate::driver::process`] like every child of the agent.
//!
//! Protocol of one run ([`run`]): the plugin is spawned in a process group of its own with one
//! waiter thread, which keeps the first [`OUTPUT_LIMIT`] bytes of stdout (the rest is read and
//! discarded) and hands them over at stdout's end of file, and logs stderr by lines, capped at
//! [`STDERR_LIMIT`]. The caller selects over the exit, the shutdown channel and the deadline; on
//! shutdown or deadline it SIGKILLs the whole group and reaps the plugin. After an exit 0 it waits
//! for stdout's end of file under the same deadline (a background child still holding the pipe is
//! killed with the group at the deadline); after any other exit the waiter kills the rest of the
//! group at once, so what the plugin printed is read at once. Either way the run ends with
//! [`crate::driver::process::Child::release`]: whatever still holds the plugin's pipes then is
//! killed, and the waiter is joined.

use crossbeam_channel::{at, bounded, select, Receiver};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use super::answer::plugin_error;
use super::{Failure, OUTPUT_LIMIT};
use crate::driver::process::{
    self, AfterExit, Capped, Drain, ProcessError, ProcessSpec, Sink, Supervision,
};
use crate::thread::Never;

/// stderr logged per run at most.
pub const STDERR_LIMIT: usize = 64 << 10;

/// How long a killed plugin may take to be reaped before the caller goes on without it (a process
/// stuck in the kernel cannot wedge the caller).
const REAP_AFTER_KILL: Duration = Duration::from_secs(10);

/// What a plugin printed, and how it ended (exit 0 only; other endings are a [`Failure`]).
#[derive(Debug)]
pub struct Output {
    pub stdout: Vec<u8>,
    /// stdout was longer than [`OUTPUT_LIMIT`]; `stdout` holds the first part.
    pub truncated: bool,
}

/// Runs `<path> <operation>` with exactly `env`, in its own process group, for at most `timeout`;
/// a disconnect of `shutdown` kills it at once. See the module docs for the protocol.
pub fn run(
    path: &Path,
    id: &str,
    operation: &str,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    shutdown: &Receiver<Never>,
) -> Result<Output, Failure> {
    if matches!(
        shutdown.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    ) {
        return Err(Failure::Cancelled);
    }
    let started = Instant::now();
    let deadline_at = started + timeout;
    let deadline = at(deadline_at);
    let args = [operation.to_string()];
    let spec = ProcessSpec {
        program: path,
        args: &args,
        env,
        cwd: path.parent().unwrap_or(Path::new("/")),
        run_as: None,
        stdin: None,
        limits: &[],
    };
    let (out_tx, out_rx) = bounded(1);
    let log_name = format!("host volume plugin {id:?} {operation}");
    let supervision = Supervision {
        after_exit: AfterExit::KillGroupIfFailed,
        // The caller kills the group at the deadline and releases the run; the waiter's own
        // limit only backs that up.
        drain: Drain::Until(deadline_at + process::DRAIN_AFTER_EXIT),
    };
    let mut attempts = 0;
    let child = loop {
        let stdout = Box::new(Capped::new(OUTPUT_LIMIT, out_tx.clone()));
        let stderr = Box::new(StderrLog::new(log_name.clone()));
        match process::spawn(&spec, stdout, stderr, supervision, format!("dhv-{id}")) {
            Ok(child) => break child,
            // ETXTBSY: the file is still open for writing somewhere (a plugin being copied in, or
            // a descriptor briefly inherited by another fork); it clears within moments.
            Err(ProcessError::Spawn(e))
                if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 5 =>
            {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(ProcessError::Spawn(e) | ProcessError::Watch { source: e, .. }) => {
                return Err(Failure::Spawn(e))
            }
            Err(e) => return Err(Failure::Spawn(io::Error::other(e.to_string()))),
        }
    };
    drop(out_tx);
    let exited = child.exited().clone();
    // Kill, then reap: the waiter reports the exit once the plugin is dead.
    let abandon = |child: process::Child, failure: Failure| {
        child.kill(REAP_AFTER_KILL);
        child.release();
        Err(failure)
    };
    let status = select! {
        recv(exited) -> r => match r {
            Ok(status) => status,
            Err(_) => return abandon(child, Failure::Spawn(io::Error::other("waiter thread died"))),
        },
        recv(shutdown) -> _ => return abandon(child, Failure::Cancelled),
        recv(deadline) -> _ => return abandon(child, Failure::TimedOut(timeout)),
    };
    // After a failure the waiter killed the rest of the group: nothing it started is wanted, and a
    // child holding stdout must not keep the caller waiting until the deadline for an answer
    // that is already decided.
    let (stdout, truncated) = select! {
        recv(out_rx) -> r => r.unwrap_or_default(),
        recv(shutdown) -> _ => return abandon(child, Failure::Cancelled),
        // The plugin exited but something it started still holds stdout.
        recv(deadline) -> _ => return abandon(child, Failure::TimedOut(timeout)),
    };
    child.release();
    log::debug!(
        "host volume plugin {id:?} {operation} ended with {status:?} after {:?}",
        started.elapsed()
    );
    if !status.success() {
        return Err(Failure::Exit {
            status,
            error: plugin_error(&stdout),
        });
    }
    Ok(Output { stdout, truncated })
}

/// Logs stderr line by line under `name`, [`STDERR_LIMIT`] bytes per run at most; the rest is
/// discarded.
struct StderrLog {
    name: String,
    logged: usize,
    line: Vec<u8>,
    discarding: bool,
}

impl StderrLog {
    fn new(name: String) -> StderrLog {
        StderrLog {
            name,
            logged: 0,
            line: Vec::new(),
            discarding: false,
        }
    }

    fn flush_line(&mut self) {
        self.logged += self.line.len();
        let text = String::from_utf8_lossy(&self.line);
        log::info!("{}: {}", self.name, text.trim_end());
        self.line.clear();
        if self.logged >= STDERR_LIMIT {
            log::info!("{}: further stderr is discarded", self.name);
            self.discarding = true;
        }
    }
}

impl Sink for StderrLog {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() && !self.discarding {
            // A line is bounded by what is left of the budget.
            let budget = STDERR_LIMIT - self.logged - self.line.len();
            let take = &bytes[..bytes.len().min(budget)];
            match take.iter().position(|b| *b == b'\n') {
                Some(nl) => {
                    self.line.extend_from_slice(&take[..=nl]);
                    bytes = &bytes[nl + 1..];
                    self.flush_line();
                }
                None => {
                    self.line.extend_from_slice(take);
                    bytes = &bytes[take.len()..];
                    if self.logged + self.line.len() >= STDERR_LIMIT {
                        self.flush_line();
                    }
                }
            }
        }
        Ok(())
    }

    fn eof(&mut self) {
        if !self.line.is_empty() && !self.discarding {
            self.flush_line();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_logged_by_lines_within_its_budget() {
        let mut log = StderrLog::new("p".to_string());
        log.write(b"one\ntw").unwrap();
        log.write(b"o\nthree").unwrap();
        assert_eq!(log.logged, 8);
        assert_eq!(log.line, b"three");
        log.eof();
        assert_eq!(log.logged, 13);
        log.write(&vec![b'x'; STDERR_LIMIT]).unwrap();
        assert!(log.discarding);
        assert_eq!(log.logged, STDERR_LIMIT);
        log.write(b"more\n").unwrap();
        assert_eq!(log.logged, STDERR_LIMIT);
    }
}
