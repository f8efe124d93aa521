//! The two threads of a watched container (see the thread protocol in [`super`]): the wait for
//! its end, and the copy of its logs into the task's files.

use crossbeam_channel::{after, select, Receiver, Sender};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::engine::{self, Closer, Engine, EngineError};
use super::logs;
use crate::driver::TaskExit;
use crate::thread::Never;
use nodeward_keeper::Exit;

/// How often the wait and log threads try again while the engine cannot be reached.
const RETRY: Duration = Duration::from_secs(2);
/// The log cursor is written after this many frames, or when a frame comes this long after the
/// last write.
const COMMIT_EVERY: u32 = 256;
const COMMIT_AFTER: Duration = Duration::from_millis(200);

/// Where one task's container logs go.
pub(super) struct LogTarget {
    pub(super) alloc_root: PathBuf,
    pub(super) log_dir: PathBuf,
    pub(super) task: String,
    pub(super) logs: crate::jobspec::LogConfig,
    pub(super) cursor: PathBuf,
}

/// Waits out `RETRY`; true when the watch is over (its `stop` disconnected).
fn retry_or_stop(stop: &Receiver<Never>) -> bool {
    select! {
        recv(stop) -> _ => true,
        recv(after(RETRY)) -> _ => false,
    }
}

/// The `docker-wait` thread: sends how container `id` ended, once.
pub(super) fn wait_for_exit(
    engine: &Engine,
    id: &str,
    closer: &Closer,
    stop: &Receiver<Never>,
    exit_tx: Sender<TaskExit>,
) {
    loop {
        let code = match engine.wait(id, closer) {
            Ok(code) => code,
            Err(EngineError::Cancelled { .. }) => return,
            Err(EngineError::NotFound { .. }) => {
                // Removed behind the agent's back: it ended, how is not known.
                let _ = exit_tx.send(TaskExit::LostWhileAway);
                return;
            }
            Err(e) => {
                log::debug!("container {id}: {e}; trying again");
                if retry_or_stop(stop) {
                    return;
                }
                continue;
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let (exit_code, oom_killed, at_nanos) = match engine.inspect(id) {
            Ok(Some(info)) if info.state.running => continue,
            Ok(Some(info)) => (
                info.state.exit_code,
                info.state.oom_killed,
                info.state.finished_at.unwrap_or(now),
            ),
            _ => (code, false, now),
        };
        let exit = Exit {
            exit_code: i32::try_from(exit_code).unwrap_or(-1),
            signal: 0,
            at_nanos,
            oom_killed,
        };
        let _ = exit_tx.send(TaskExit::Container { exit, oom_killed });
        return;
    }
}

/// The `docker-logs` thread: copies the container's output into the task's log files until the
/// container ends. A followed stream may end before the end of the log when the container exits
/// (dockerd 20.10 does, about half the time): once the container has exited, the log is read
/// once more without following, from where the copier is (`logs::LogCopier::resume`).
pub(super) fn copy_logs(
    engine: &Engine,
    id: &str,
    target: &LogTarget,
    closer: &Closer,
    stop: &Receiver<Never>,
) {
    let open = || {
        logs::LogCopier::open(
            &target.alloc_root,
            &target.log_dir,
            &target.task,
            &target.logs,
            target.cursor.clone(),
            id,
        )
        .map_err(|e| {
            log::error!(
                "container {id}: cannot open the logs of task {}: {e}",
                target.task
            )
        })
        .ok()
    };
    let Some(mut copier) = open() else { return };
    let (mut pending, mut last_commit) = (0u32, Instant::now());
    let mut follow = true;
    loop {
        let since = copier.resume().map(|s| s.as_nanos() as i64);
        match engine.logs(id, since, follow, closer) {
            Ok(mut stream) => loop {
                // The cursor is written every COMMIT_EVERY frames or COMMIT_AFTER: what was copied
                // after it is truncated and copied again by the next agent (`logs`).
                if pending >= COMMIT_EVERY || last_commit.elapsed() >= COMMIT_AFTER {
                    let _ = copier.commit();
                    (pending, last_commit) = (0, Instant::now());
                }
                match stream.next_frame() {
                    Ok(Some(frame)) => {
                        let stream = match frame.stream {
                            engine::Stream::Stdout => nodeward_keeper::logs::Stream::Stdout,
                            engine::Stream::Stderr => nodeward_keeper::logs::Stream::Stderr,
                        };
                        match copier.frame(stream, &frame.data) {
                            Ok(()) => pending += 1,
                            Err(e @ logs::LogsError::Frame { .. }) => log::warn!("{e}"),
                            Err(e) => {
                                // The files may hold what the cursor does not: opened again,
                                // the copier puts them back to its last commit.
                                log::error!(
                                    "container {id}: {e}; copying again from the last commit"
                                );
                                let Some(again) = open() else { return };
                                copier = again;
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(EngineError::Cancelled { .. }) => {
                        let _ = copier.commit();
                        return;
                    }
                    Err(e) => {
                        log::debug!("container {id}: log stream: {e}");
                        break;
                    }
                }
            },
            Err(EngineError::Cancelled { .. }) | Err(EngineError::NotFound { .. }) => {
                let _ = copier.commit();
                return;
            }
            Err(e) => log::debug!("container {id}: logs: {e}"),
        }
        if let Err(e) = copier.commit() {
            log::error!("container {id}: cannot record how far its logs were copied: {e}");
        }
        if !follow {
            return;
        }
        match engine.inspect(id) {
            Ok(Some(info)) if !info.state.running => follow = false,
            Ok(None) => return,
            _ => {
                if retry_or_stop(stop) {
                    return;
                }
            }
        }
    }
}
