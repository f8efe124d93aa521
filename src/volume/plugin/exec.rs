//! One run of an external plugin: `<dir>/<id> <operation>` with exactly the `DHV_*` environment.
//!
//! Protocol of one run ([`run`]): the plugin is spawned in a process group of its own. Three
//! helper threads serve it: a waiter (`wait()` → its exit status on a channel), a stdout reader
//! (keeps the first [`OUTPUT_LIMIT`] bytes, reads and discards the rest, sends the bytes at EOF) and
//! a stderr reader (logs lines, capped). The caller selects over the waiter, the shutdown channel and
//! the deadline; on shutdown or deadline it SIGKILLs the whole group and reaps the plugin. After a
//! exit 0 it waits for stdout's EOF under the same deadline (a background child still holding the
//! pipe is killed with the group at the deadline); after any other exit it kills the rest of the
//! group first, so what the plugin printed is read at once. The reader threads end by themselves when the
//! last holder of the pipe dies.

use crossbeam_channel::{after, bounded, select, Receiver};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::answer::plugin_error;
use super::{Failure, OUTPUT_LIMIT};
use crate::thread::Never;

/// stderr logged per run at most.
const STDERR_LIMIT: usize = 64 << 10;

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
    env: &[(String, String)],
    timeout: Duration,
    shutdown: &Receiver<Never>,
) -> Result<Output, Failure> {
    if matches!(
        shutdown.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    ) {
        return Err(Failure::Cancelled);
    }
    let deadline = after(timeout);
    let started = Instant::now();
    let mut command = Command::new(path);
    command
        .arg(operation)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(path.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut attempts = 0;
    let mut child = loop {
        match command.spawn() {
            Ok(child) => break child,
            // ETXTBSY: the file is still open for writing somewhere (a plugin being copied in, or
            // a descriptor briefly inherited by another fork); it clears within moments.
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 5 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Failure::Spawn(e)),
        }
    };
    let pgid = child.id() as libc::pid_t;
    let kill_group = || {
        // SAFETY: kill(2) with a negative pid signals the plugin's own process group, which we
        // created with process_group(0); no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    };
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");

    let (out_tx, out_rx) = bounded(1);
    let (exit_tx, exit_rx) = bounded(1);
    let spawned = (|| -> io::Result<()> {
        crate::thread::spawn(format!("dhv-{id}-out"), move || {
            let _ = out_tx.send(read_capped(stdout, OUTPUT_LIMIT));
        })?;
        let log_name = format!("host volume plugin {id:?} {operation}");
        crate::thread::spawn(format!("dhv-{id}-err"), move || {
            log_stderr(stderr, &log_name)
        })?;
        crate::thread::spawn(format!("dhv-{id}-wait"), move || {
            let _ = exit_tx.send(child.wait());
        })?;
        Ok(())
    })();
    if let Err(e) = spawned {
        kill_group();
        return Err(Failure::Spawn(e));
    }
    // Kill, then reap: the waiter ends once the plugin is dead. Bounded so a process stuck in the
    // kernel cannot wedge the caller.
    let kill_and_reap = |failure: Failure| {
        kill_group();
        let _ = exit_rx.recv_timeout(Duration::from_secs(10));
        Err(failure)
    };
    let status = select! {
        recv(exit_rx) -> r => match r {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => return kill_and_reap(Failure::Spawn(e)),
            Err(_) => return kill_and_reap(Failure::Spawn(io::Error::other("waiter thread died"))),
        },
        recv(shutdown) -> _ => return kill_and_reap(Failure::Cancelled),
        recv(deadline) -> _ => return kill_and_reap(Failure::TimedOut(timeout)),
    };
    if !status.success() {
        // The run failed: nothing it started is wanted, and a child holding stdout must not keep
        // the caller waiting until the deadline for an answer that is already decided.
        kill_group();
    }
    let (stdout, truncated) = select! {
        recv(out_rx) -> r => r.unwrap_or_default(),
        recv(shutdown) -> _ => {
            kill_group();
            return Err(Failure::Cancelled);
        }
        recv(deadline) -> _ => {
            // The plugin exited but something it started still holds stdout.
            kill_group();
            return Err(Failure::TimedOut(timeout));
        }
    };
    log::debug!(
        "host volume plugin {id:?} {operation} ended with {status} after {:?}",
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

/// Reads everything, keeping the first `cap` bytes: a plugin that prints without end cannot make
/// the agent buffer without end.
fn read_capped(mut r: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap - kept.len();
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    (kept, truncated)
}

fn log_stderr(stderr: impl Read, name: &str) {
    let mut reader = BufReader::new(stderr);
    let mut logged = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        // Lines are bounded by what is left of the budget; the rest is discarded below.
        let budget = (STDERR_LIMIT - logged) as u64;
        match (&mut reader).take(budget).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                logged += n;
                let text = String::from_utf8_lossy(&line);
                log::info!("{name}: {}", text.trim_end());
                if logged >= STDERR_LIMIT {
                    log::info!("{name}: further stderr is discarded");
                    let _ = io::copy(&mut reader, &mut io::sink());
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_capped_keeps_the_head() {
        let data = vec![b'y'; OUTPUT_LIMIT * 3 + 17];
        let (kept, truncated) = read_capped(&data[..], OUTPUT_LIMIT);
        assert_eq!(kept.len(), OUTPUT_LIMIT);
        assert!(truncated);
        let (kept, truncated) = read_capped(&b"abc"[..], OUTPUT_LIMIT);
        assert_eq!((kept.as_slice(), truncated), (&b"abc"[..], false));
    }
}
