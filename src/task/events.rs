//! Task events and task state, in Nomad's API shape.
//!
//! Every event is built by one constructor here, so the exact `Type` and `DisplayMessage` strings of
//! tasks.md live in one place. Constructors take the time as an argument (Unix nanoseconds): they
//! are pure, and tests compare whole events.

use std::time::Duration;

pub use crate::records::{TaskEvent, TaskState, TaskStatus, MAX_EVENTS};
use crate::util::duration;

pub const RECEIVED: &str = "Received";
pub const TASK_SETUP: &str = "Task Setup";
pub const STARTED: &str = "Started";
pub const TERMINATED: &str = "Terminated";
pub const RESTARTING: &str = "Restarting";
pub const NOT_RESTARTING: &str = "Not Restarting";
pub const KILLING: &str = "Killing";
pub const KILLED: &str = "Killed";
pub const WAITING_SHUTDOWN_DELAY: &str = "Waiting for shutdown delay";
pub const RESTART_SIGNALED: &str = "Restart Signaled";
pub const SIGNALING: &str = "Signaling";
pub const DRIVER_FAILURE: &str = "Driver Failure";
/// A driver's progress (`Downloading image`), as Nomad's `TaskDriverMessage` events.
pub const DRIVER: &str = "Driver";
pub const SETUP_FAILURE: &str = "Setup Failure";
/// Nomad's `TaskHookFailed`.
pub const HOOK_FAILED: &str = "Task hook failed";
/// nodeward's own: the thread supervising the task failed (a bug); the task was stopped.
pub const RUNNER_FAILURE: &str = "Runner Failure";
pub const PLUGIN_HEALTHY: &str = "Plugin became healthy";
pub const PLUGIN_UNHEALTHY: &str = "Plugin became unhealthy";
/// The allocation's main tasks are dead: its sidecars are killed (Nomad's `TaskMainDead`).
pub const MAIN_DEAD: &str = "Main Tasks Dead";
/// The group's leader task ended: the other tasks are killed (Nomad's `TaskLeaderDead`).
pub const LEADER_DEAD: &str = "Leader Task Dead";
/// A task of a lifecycle allocation failed: the others are killed (Nomad's `TaskSiblingFailed`).
pub const SIBLING_FAILED: &str = "Sibling Task Failed";

/// The reason the restart tracker gives for an ordinary restart; its `Restarting` event shows no
/// reason prefix.
pub const REASON_WITHIN_POLICY: &str = "Restart within policy";

impl TaskEvent {
    fn new(event_type: &str, time: i64, display: String) -> TaskEvent {
        TaskEvent {
            event_type: event_type.to_string(),
            time,
            display_message: display,
            ..TaskEvent::default()
        }
    }

    fn detail(mut self, key: &str, value: impl ToString) -> TaskEvent {
        self.details.insert(key.to_string(), value.to_string());
        self
    }

    fn failing(mut self) -> TaskEvent {
        self.fails_task = true;
        self.details.insert("fails_task".into(), "true".into());
        self
    }

    pub fn received(time: i64) -> TaskEvent {
        TaskEvent::new(RECEIVED, time, "Task received by client".into())
    }

    pub fn task_setup(time: i64) -> TaskEvent {
        TaskEvent::task_setup_note(time, "Building Task Directory")
    }

    /// A `Task Setup` event for what a prestart hook had to repair (`note` says what).
    pub fn task_setup_note(time: i64, note: &str) -> TaskEvent {
        let mut e = TaskEvent::new(TASK_SETUP, time, note.to_string());
        e.message = note.to_string();
        e.detail("message", note)
    }

    pub fn started(time: i64) -> TaskEvent {
        TaskEvent::new(STARTED, time, "Task started by client".into())
    }

    /// `Exit Code: <n>`, `, Signal: <s>` when non-zero, `, Exit Message: "<m>"` when there is one.
    pub fn terminated(time: i64, exit_code: i32, signal: i32, message: &str) -> TaskEvent {
        let mut display = format!("Exit Code: {exit_code}");
        if signal != 0 {
            display.push_str(&format!(", Signal: {signal}"));
        }
        if !message.is_empty() {
            display.push_str(&format!(", Exit Message: {message:?}"));
        }
        let mut e = TaskEvent::new(TERMINATED, time, display)
            .detail("exit_code", exit_code)
            .detail("signal", signal);
        e.exit_code = exit_code;
        e.signal = signal;
        if !message.is_empty() {
            e.message = message.to_string();
            e = e.detail("exit_message", message);
        }
        e
    }

    /// The `Terminated` event of a run's end, at the time the task really ended (`now` when
    /// that is not known); answers that time too.
    pub fn terminated_by(exit: &crate::driver::TaskExit, now: i64) -> (i64, TaskEvent) {
        let status = exit.status();
        let at = exit.at_nanos().unwrap_or(now);
        let event = TaskEvent::terminated(at, status.exit_code, status.signal, &exit.message());
        (at, event)
    }

    /// A restart decided by the restart policy.
    pub fn restarting(time: i64, delay: Duration, reason: &str) -> TaskEvent {
        let mut display = format!("Task restarting in {}", duration::format(delay));
        if !reason.is_empty() && reason != REASON_WITHIN_POLICY {
            display = format!("{reason} - {display}");
        }
        let mut e = TaskEvent::new(RESTARTING, time, display)
            .detail("start_delay", delay.as_nanos())
            .detail("restart_reason", reason);
        e.start_delay = delay.as_nanos() as i64;
        e.restart_reason = reason.to_string();
        e
    }

    /// A restart asked for by a hook (the CSI supervisor): the hook sets the message.
    pub fn restarting_by_hook(time: i64, message: &str, failure: bool) -> TaskEvent {
        let mut e =
            TaskEvent::new(RESTARTING, time, message.to_string()).detail("restart_reason", message);
        e.restart_reason = message.to_string();
        if failure {
            e = e.detail("failure", "true");
        }
        e
    }

    pub fn not_restarting(time: i64, reason: &str) -> TaskEvent {
        let mut e = TaskEvent::new(NOT_RESTARTING, time, reason.to_string())
            .detail("restart_reason", reason)
            .failing();
        e.restart_reason = reason.to_string();
        e
    }

    pub fn killing(time: i64, kill_timeout: Duration) -> TaskEvent {
        let display = format!(
            "Sent interrupt. Waiting {} before force killing",
            duration::format(kill_timeout)
        );
        let mut e =
            TaskEvent::new(KILLING, time, display).detail("kill_timeout", kill_timeout.as_nanos());
        e.kill_timeout = kill_timeout.as_nanos() as i64;
        e
    }

    /// To a sidecar, as its allocation's main tasks are all dead.
    pub fn main_dead(time: i64) -> TaskEvent {
        TaskEvent::new(
            MAIN_DEAD,
            time,
            "Main tasks dead, destroying all sidecar tasks".into(),
        )
    }

    /// To every other task, as the group's leader ended.
    pub fn leader_dead(time: i64) -> TaskEvent {
        TaskEvent::new(LEADER_DEAD, time, "Leader Task in Group dead".into())
    }

    /// To every other task, as `sibling` failed.
    pub fn sibling_failed(time: i64, sibling: &str) -> TaskEvent {
        TaskEvent::new(
            SIBLING_FAILED,
            time,
            format!("Task's sibling {sibling:?} failed"),
        )
        .detail("failed_sibling", sibling)
    }

    /// Between the kill decision and the kill signal (`shutdown_delay`), Nomad's text.
    pub fn waiting_shutdown_delay(time: i64, delay: Duration) -> TaskEvent {
        let display = format!(
            "Waiting for shutdown_delay of {} before killing the task.",
            duration::format(delay)
        );
        TaskEvent::new(WAITING_SHUTDOWN_DELAY, time, display)
    }

    pub fn killed(time: i64) -> TaskEvent {
        TaskEvent::new(KILLED, time, "Task successfully killed".into())
    }

    /// `reason` empty means a user's `alloc restart`.
    pub fn restart_signaled(time: i64, reason: &str) -> TaskEvent {
        let display = if reason.is_empty() {
            "Task signaled to restart".to_string()
        } else {
            reason.to_string()
        };
        let mut e = TaskEvent::new(RESTART_SIGNALED, time, display.clone())
            .detail("restart_reason", &display);
        e.restart_reason = display;
        e
    }

    pub fn signaling(time: i64, signal: &str, reason: &str) -> TaskEvent {
        let mut e = TaskEvent::new(SIGNALING, time, "Task being sent a signal".into())
            .detail("signal", signal);
        e.task_signal = signal.to_string();
        if !reason.is_empty() {
            e.task_signal_reason = reason.to_string();
            e = e.detail("reason", reason);
        }
        e
    }

    /// A driver's progress message (docker: `Downloading image`, `Downloaded image`).
    pub fn driver(time: i64, message: &str) -> TaskEvent {
        let mut e =
            TaskEvent::new(DRIVER, time, message.to_string()).detail("driver_message", message);
        e.driver_message = message.to_string();
        e
    }

    pub fn driver_failure(time: i64, error: &str) -> TaskEvent {
        let mut e = TaskEvent::new(
            DRIVER_FAILURE,
            time,
            format!("Failed to start task: {error}"),
        )
        .detail("driver_error", error);
        e.driver_error = error.to_string();
        e
    }

    /// The task's runner thread panicked (a bug in nodeward): the task was stopped and fails.
    pub fn runner_failure(time: i64, panic: &str) -> TaskEvent {
        TaskEvent::new(
            RUNNER_FAILURE,
            time,
            format!("nodeward's task runner failed ({panic}); the task was stopped"),
        )
        .detail("runner_error", panic)
        .failing()
    }

    /// The hook `hook` failed with `error` (Nomad's `emitHookError`: message and display
    /// message `<hook>: <error>`). It does not fail the task itself: the `Setup Failure` after it
    /// does.
    pub fn hook_failed(time: i64, hook: &str, error: &str) -> TaskEvent {
        let msg = format!("{hook}: {error}");
        let mut e = TaskEvent::new(HOOK_FAILED, time, msg.clone()).detail("message", &msg);
        e.message = msg;
        e
    }

    /// A prestart hook failed (a missing or invalid host volume, a task directory that cannot be
    /// built). `fails` marks the task failed.
    pub fn setup_failure(time: i64, error: &str, fails: bool) -> TaskEvent {
        let mut e =
            TaskEvent::new(SETUP_FAILURE, time, error.to_string()).detail("setup_error", error);
        e.setup_error = error.to_string();
        if fails {
            e = e.failing();
        }
        e
    }

    pub fn plugin_healthy(time: i64, plugin_id: &str) -> TaskEvent {
        let msg = format!("plugin: {plugin_id}");
        let mut e = TaskEvent::new(PLUGIN_HEALTHY, time, msg.clone()).detail("message", &msg);
        e.message = msg;
        e
    }

    /// `message` is the whole display text, e.g. `Error: CSI plugin failed probe: ...`.
    pub fn plugin_unhealthy(time: i64, message: &str) -> TaskEvent {
        let mut e =
            TaskEvent::new(PLUGIN_UNHEALTHY, time, message.to_string()).detail("message", message);
        e.message = message.to_string();
        e
    }
}

/// Unix nanoseconds of the wall clock.
pub fn now_nanos() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

/// RFC 3339 of a time in nanoseconds since the Unix epoch.
pub fn nanos_rfc3339(nanos: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(nanos)
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// RFC 3339 of the wall clock, for `StartedAt` and friends.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminated_display_follows_nomad() {
        assert_eq!(
            TaskEvent::terminated(1, 0, 0, "").display_message,
            "Exit Code: 0"
        );
        assert_eq!(
            TaskEvent::terminated(1, 137, 9, "").display_message,
            "Exit Code: 137, Signal: 9"
        );
        assert_eq!(
            TaskEvent::terminated(1, 1, 0, "oom").display_message,
            "Exit Code: 1, Exit Message: \"oom\""
        );
    }

    #[test]
    fn restarting_display_hides_the_ordinary_reason() {
        let d = Duration::from_nanos(16_104_906_834);
        assert_eq!(
            TaskEvent::restarting(1, d, REASON_WITHIN_POLICY).display_message,
            "Task restarting in 16.104906834s"
        );
        assert_eq!(
            TaskEvent::restarting(
                1,
                Duration::from_secs(90),
                "Exceeded allowed attempts, applying a delay"
            )
            .display_message,
            "Exceeded allowed attempts, applying a delay - Task restarting in 1m30s"
        );
        assert_eq!(
            TaskEvent::restarting(1, Duration::ZERO, "").display_message,
            "Task restarting in 0s"
        );
    }

    #[test]
    fn fixed_messages() {
        assert_eq!(
            TaskEvent::killing(1, Duration::from_secs(5)).display_message,
            "Sent interrupt. Waiting 5s before force killing"
        );
        assert_eq!(
            TaskEvent::killed(1).display_message,
            "Task successfully killed"
        );
        assert_eq!(
            TaskEvent::restart_signaled(1, "").display_message,
            "Task signaled to restart"
        );
        assert_eq!(
            TaskEvent::driver_failure(1, "no such file").display_message,
            "Failed to start task: no such file"
        );
        assert_eq!(
            TaskEvent::plugin_healthy(1, "hp").display_message,
            "plugin: hp"
        );
    }

    #[test]
    fn keeps_the_last_ten_and_marks_failure() {
        let mut s = TaskState::default();
        for i in 0..15 {
            s.push(TaskEvent::started(i));
        }
        assert_eq!(s.events.len(), MAX_EVENTS);
        assert_eq!(s.events.front().unwrap().time, 5);
        assert_eq!(s.events.back().unwrap().time, 14);
        assert!(!s.failed);
        s.push(TaskEvent::not_restarting(20, "x"));
        assert!(s.failed);
    }
}
