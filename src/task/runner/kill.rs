//! A kill's `shutdown_delay` (jobspec.md "shutdown_delay"): between the decision to kill a task
//! and its kill signal, the task keeps running. An allocation's stop waits its group's delay once
//! (from the stop's time, which the state file keeps, so an agent restart waits only what is
//! left), then each task its own as its kill comes; a kill that is not a stop (a leader's or the
//! main tasks' end) waits the task's own only, as in Nomad.

use crossbeam_channel::{after, select};
use std::time::Duration;

use super::{TaskCommand, TaskRunner};
use crate::driver::{RunningTask, TaskExit};
use crate::task::events::{now_nanos, TaskEvent};

impl TaskRunner {
    /// A kill's `shutdown_delay` before the kill signal: what is left of its allocation's group
    /// delay (an allocation stop waits it once, until `group_delay_ends`, as Nomad waits it
    /// before it kills any task), then the task's own. The task keeps running meanwhile and
    /// takes signals; an agent shutdown cuts the wait short (the agent is going; the task is
    /// stopped at once). `Some` when the task exited by itself during the wait.
    pub(super) fn shutdown_delay(
        &self,
        process: &RunningTask,
        group_delay_ends: Option<i64>,
    ) -> Option<TaskExit> {
        let (wait, shown) = delay_to_wait(
            group_delay_ends,
            now_nanos(),
            self.group_shutdown_delay(),
            self.ctx.task.shutdown_delay,
        );
        if wait.is_zero() {
            return None;
        }
        self.emit(TaskEvent::waiting_shutdown_delay(now_nanos(), shown));
        let deadline = after(wait);
        loop {
            select! {
                recv(process.exited()) -> exit => return Some(exit.unwrap_or(TaskExit::Unknown)),
                recv(self.deps.shutdown) -> _ => return None,
                recv(deadline) -> _ => return None,
                recv(self.commands) -> cmd => match cmd {
                    Ok(TaskCommand::Signal { signal, name }) => {
                        self.emit(TaskEvent::signaling(now_nanos(), &name, ""));
                        if let Err(e) = self.driver.signal(process, signal) {
                            log::warn!("cannot signal task {}: {e}", self.ctx.task.name);
                        }
                    }
                    // Killing already; a restart of a task being killed has nothing to restart.
                    Ok(TaskCommand::Kill { .. } | TaskCommand::Restart) => {}
                    Err(_) => return None,
                },
            }
        }
    }

    fn group_shutdown_delay(&self) -> Duration {
        self.ctx
            .job
            .task_groups
            .iter()
            .find(|g| g.name == self.ctx.group)
            .map_or(Duration::ZERO, |g| g.shutdown_delay)
    }
}

/// How long a kill at `now` waits before its signal, and the delay its event names: what is left
/// of the group's delay until `group_delay_ends` (none when `None` or past), then the task's own.
/// The event names the delays as written (the group's and the task's, or the task's alone once
/// the group's is over), not a remainder to the nanosecond.
fn delay_to_wait(
    group_delay_ends: Option<i64>,
    now: i64,
    group: Duration,
    task: Duration,
) -> (Duration, Duration) {
    let left = group_delay_ends
        .and_then(|ends| u64::try_from(ends.saturating_sub(now)).ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
        .min(group);
    let shown = if left.is_zero() { task } else { group + task };
    (left + task, shown)
}

#[cfg(test)]
mod tests {
    use super::delay_to_wait;
    use std::time::Duration;

    const S: i64 = 1_000_000_000;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_stop_waits_the_group_delay_once_then_each_task_its_own() {
        // The first stage's kill comes at the stop: the whole group delay, then the task's.
        assert_eq!(
            delay_to_wait(Some(102 * S), 100 * S, secs(2), secs(3)),
            (secs(5), secs(5))
        );
        // A later stage's kill comes after the group delay: the task's own only.
        assert_eq!(
            delay_to_wait(Some(102 * S), 110 * S, secs(2), secs(3)),
            (secs(3), secs(3))
        );
        // An agent restart in the middle of the group delay waits what is left of it.
        let (wait, shown) = delay_to_wait(Some(102 * S), 101 * S, secs(2), secs(3));
        assert_eq!((wait, shown), (secs(4), secs(5)));
    }

    #[test]
    fn a_kill_that_is_not_a_stop_waits_the_task_delay_only() {
        assert_eq!(
            delay_to_wait(None, 100 * S, secs(2), secs(3)),
            (secs(3), secs(3))
        );
        assert_eq!(
            delay_to_wait(None, 100 * S, secs(2), secs(0)),
            (secs(0), secs(0))
        );
    }

    #[test]
    fn a_wall_clock_set_back_waits_no_more_than_the_group_delay() {
        assert_eq!(
            delay_to_wait(Some(1_000 * S), 0, secs(2), secs(0)),
            (secs(2), secs(2))
        );
    }
}
