//! A restored runner's first step (live-restore.md): where the task an earlier agent left picks
//! up. Re-attached to its run (running, or exited while no agent watched), lost (its process is
//! gone: the machine rebooted), in the middle of a restart delay, or to be started; or, for a
//! task of a stopped allocation, never started again ([`Pickup::RestoredStopping`]).

use std::time::Duration;

use super::{Attach, TaskRunner};
use crate::driver::{self, RunningTask, TaskExit, TaskHandle, TaskRunState};
use crate::task::events::{nanos_rfc3339, now_nanos, TaskEvent, TaskStatus};
use crate::task::restart::RunEnd;

/// How a runner takes up its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pickup {
    /// A task to start.
    New,
    /// The agent picks the task up again from its state file (live-restore.md): re-attached to
    /// its run, its end recorded, its restart delay waited out, or started.
    Restored,
    /// As `Restored`, for a task (not a poststop task) of a stopped allocation whose gate carries
    /// on the stop (`alloc::runner::stop`): a run that still runs is re-attached and watched until the
    /// stop kills it in its turn, one that ended is recorded, and the task never starts a run
    /// again. Where it would start, restart or wait out a restart delay, it ends killed: the stop
    /// kills only what runs, and what does not run stays dead.
    RestoredStopping,
}

/// Where a restored task picks up (see [`TaskRunner::reattach`]).
pub(super) enum Resume {
    /// Re-attached to a running run: watch it.
    Running(RunningTask, Attach),
    /// The recorded run ended while no agent watched (or is lost): record it, then decide.
    Ended(RunEnd, TaskExit),
    /// A restart delay was in progress: wait out what is left of it, then start.
    Delay(Duration),
    /// Start the task.
    Start,
    /// The agent stopped while the runner was picking the task up: nothing more to do.
    Shutdown,
}

impl TaskRunner {
    /// Picks the task up where an earlier agent left it (live-restore.md): re-attached to its run
    /// (running, or exited while no agent watched), lost (its process is gone: the machine
    /// rebooted), in the middle of a restart delay, or to be started.
    pub(super) fn reattach(&mut self) -> Resume {
        let (recorded, was_running, restart_at) = {
            let s = self.state.lock();
            let recorded = s.handle.clone().or_else(|| {
                s.pid
                    .zip(s.pid_start_ticks)
                    .map(|(pid, ticks)| TaskHandle::process(self.driver.name(), pid, ticks))
            });
            (recorded, s.state == TaskStatus::Running, s.restart_at)
        };
        let driver = self.driver.clone();
        let (name, alloc) = (&self.ctx.task.name, &self.ctx.alloc_id);
        let mut recovered = None;
        let mut foreign = None;
        if let Some(handle) = &recorded {
            match driver.recover(handle) {
                Ok(Some(task)) => recovered = Some(task),
                Ok(None) => foreign = Some(handle.clone()),
                Err(e) => {
                    log::error!("task {name} of alloc {alloc}: cannot re-attach: {e}");
                    foreign = Some(handle.clone());
                }
            }
        }
        // A run the agent that crashed started but did not get to record.
        // A container's name is its task's: the one recovered by its ID is the only run.
        let container = recovered.as_ref().and_then(|r| r.handle().container_id());
        let adopted = container
            .is_none()
            .then(|| driver.adopt(alloc, name))
            .flatten();
        let ticks = |t: &RunningTask| t.handle().pid().map_or(0, |(_, ticks)| ticks);
        let current = match (recovered, adopted) {
            (Some(r), Some(a)) => {
                // Never two runs: the newer one is the task's, the other is released (killed if
                // it still runs).
                let (newer, older) = if ticks(&a) > ticks(&r) {
                    ((a, Attach::Adopted), r)
                } else {
                    ((r, Attach::Recorded), a)
                };
                log::warn!("task {name} of alloc {alloc}: releasing an older run the keeper held");
                driver.destroy(older);
                Some(newer)
            }
            (Some(r), None) => Some((r, Attach::Recorded)),
            (None, Some(a)) => Some((a, Attach::Adopted)),
            (None, None) => None,
        };
        if let Some(handle) = foreign.filter(|_| current.is_none()) {
            if driver.inspect(&handle) == TaskRunState::Running {
                // A process of an agent before the keeper (a version-1 state file): nobody can
                // reap it or read its output now. It is stopped, then started again.
                log::info!(
                    "task {name} of alloc {alloc}: stopping process {:?}, left by an agent that could not keep it",
                    handle.pid()
                );
                let signal = self.ctx.task.kill_signal.number();
                let timeout = self.ctx.task.kill_timeout;
                match driver.stop_orphan(&handle, signal, timeout, &self.deps.shutdown) {
                    // The agent is stopping: the process stays recorded, for the next agent.
                    Ok(false) => return Resume::Shutdown,
                    Ok(true) => {}
                    Err(e) => log::error!("task {name} of alloc {alloc}: cannot stop it: {e}"),
                }
                self.forget_run();
                return Resume::Start;
            }
        }
        // The recorded handle stays until the watch records the run again (an agent killed in
        // between must find it), or until it is known to be gone.
        if let Some((task, how)) = current {
            driver.reattached(alloc, name, &self.ctx.cores);
            log::info!(
                "task {name} of alloc {alloc}: re-attached to process {:?}{}",
                task.handle().pid(),
                if how == Attach::Adopted {
                    " (its start was not recorded)"
                } else {
                    ""
                }
            );
            if let Ok(exit) = task.exited().try_recv() {
                // It ended while no agent watched: its real status and time, then the policy. A
                // run whose start was never recorded gets its Started first.
                if how == Attach::Adopted {
                    let at = task.started_nanos().unwrap_or_else(now_nanos);
                    self.update(|s| s.started_at = Some(nanos_rfc3339(at)));
                    self.emit(TaskEvent::started(at));
                }
                driver.destroy(task);
                self.forget_run();
                return Resume::Ended(
                    RunEnd::Exited {
                        success: exit.success(),
                    },
                    exit,
                );
            }
            return Resume::Running(task, how);
        }
        self.forget_run();
        // Only a keeper's task can be lost; a process of an agent before the keeper was stopped
        // by the restore (it had nobody to read its output) and simply starts again.
        let kept = matches!(
            recorded.as_ref().map(|h| &h.state),
            Some(driver::HandleState::Kept { .. })
        );
        if was_running && kept {
            log::warn!("task {name} of alloc {alloc}: its process was lost while the agent was not running");
            return Resume::Ended(RunEnd::Exited { success: false }, TaskExit::LostWhileAway);
        }
        match restart_at {
            Some(at) => {
                let left = Duration::from_nanos(at.saturating_sub(now_nanos()).max(0) as u64);
                Resume::Delay(left)
            }
            None => Resume::Start,
        }
    }

    /// The recorded run is over: its PID and handle name nothing any more.
    pub(super) fn forget_run(&self) {
        self.update(|s| {
            s.pid = None;
            s.pid_start_ticks = None;
            s.handle = None;
        });
    }
}
