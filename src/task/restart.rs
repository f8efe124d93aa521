//! The restart tracker: a small state machine that decides, after a task run ends, whether and when
//! the task runs again (tasks.md, "Restart policy").
//!
//! It is pure: the caller passes the monotonic time and a jitter fraction in `[0, 1)`, so tests walk
//! every branch exactly. The task runner owns one tracker per task.

use std::time::Duration;

use crate::jobspec::{RestartMode, RestartPolicy};
use crate::task::events::REASON_WITHIN_POLICY;
use crate::util::duration;

pub const REASON_NO_RESTARTS_ALLOWED: &str = "Policy allows no restarts";
pub const REASON_UNNECESSARY: &str = "Restart unnecessary as task terminated successfully";
pub const REASON_DELAY: &str = "Exceeded allowed attempts, applying a delay";

/// Why a run of the task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The task was killed (alloc stop, job stop, agent shutdown).
    Killed,
    /// A user's `alloc restart`: restart at once, not counted.
    UserRestart,
    /// A hook asked for a failure restart (a CSI plugin that did not become healthy).
    FailureRestart,
    /// The driver could not start the process.
    StartFailed,
    /// The process exited by itself.
    Exited { success: bool },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Do not run again; the task is dead and not failed. `reason` is for the log.
    Killed,
    /// Run again after `delay`; `reason` goes into the `Restarting` event.
    Restart { delay: Duration, reason: String },
    /// Do not run again: `Not Restarting` with `reason`; the task is dead and failed.
    NotRestarting { reason: String },
    /// The task finished its work: dead, not failed, no event.
    Complete { reason: String },
}

#[derive(Debug, Clone)]
pub struct RestartTracker {
    policy: RestartPolicy,
    /// Batch tasks that exit 0 are done rather than restarted.
    batch: bool,
    /// Start of the current interval window, as monotonic time since an arbitrary origin.
    window_start: Option<Duration>,
    count: u32,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy, batch: bool) -> RestartTracker {
        RestartTracker {
            policy,
            batch,
            window_start: None,
            count: 0,
        }
    }

    /// Restarts counted in the current window.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The interval window: its start (in the caller's time base) and the failures counted in it.
    /// The runner keeps it in the state file, in time since the Unix epoch.
    pub fn window(&self) -> (Option<Duration>, u32) {
        (self.window_start, self.count)
    }

    /// Continues a window an earlier agent recorded.
    pub fn restore(&mut self, window_start: Option<Duration>, count: u32) {
        self.window_start = window_start;
        self.count = count;
    }

    /// Decides what follows `end`. `now` is monotonic; `jitter` is uniform in `[0, 1)`.
    pub fn decide(&mut self, end: RunEnd, now: Duration, jitter: f64) -> Decision {
        match end {
            RunEnd::Killed => return Decision::Killed,
            RunEnd::UserRestart => {
                return Decision::Restart {
                    delay: Duration::ZERO,
                    reason: String::new(),
                }
            }
            _ => {}
        }
        let success = matches!(end, RunEnd::Exited { success: true });
        if self.policy.attempts == 0 {
            if self.batch && success {
                return Decision::Complete {
                    reason: REASON_NO_RESTARTS_ALLOWED.to_string(),
                };
            }
            return Decision::NotRestarting {
                reason: REASON_NO_RESTARTS_ALLOWED.to_string(),
            };
        }
        let window_start = *self.window_start.get_or_insert(now);
        if now > window_start + self.policy.interval {
            self.window_start = Some(now);
            self.count = 0;
        }
        self.count += 1;
        if self.batch && success {
            return Decision::Complete {
                reason: REASON_UNNECESSARY.to_string(),
            };
        }
        if self.count > self.policy.attempts {
            return match self.policy.mode {
                RestartMode::Fail => Decision::NotRestarting {
                    reason: format!(
                        "Exceeded allowed attempts {} in interval {} and mode is \"fail\"",
                        self.policy.attempts,
                        duration::format(self.policy.interval)
                    ),
                },
                RestartMode::Delay => {
                    let start = self.window_start.unwrap_or(now);
                    let end = start + self.policy.interval;
                    Decision::Restart {
                        delay: end.saturating_sub(now),
                        reason: REASON_DELAY.to_string(),
                    }
                }
            };
        }
        Decision::Restart {
            delay: jittered(self.policy.delay, jitter),
            reason: REASON_WITHIN_POLICY.to_string(),
        }
    }
}

/// `delay + jitter * delay / 4`: uniformly in `[delay, 1.25 * delay)` for jitter in `[0, 1)`.
fn jittered(delay: Duration, jitter: f64) -> Duration {
    let j = jitter.clamp(0.0, 1.0 - f64::EPSILON);
    let extra = (delay.as_nanos() as f64 * 0.25 * j) as u64;
    delay + Duration::from_nanos(extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u32, interval: u64, delay: u64, mode: RestartMode) -> RestartPolicy {
        RestartPolicy {
            render_templates: false,
            attempts,
            interval: Duration::from_secs(interval),
            delay: Duration::from_secs(delay),
            mode,
        }
    }

    const FAIL: RunEnd = RunEnd::Exited { success: false };
    const OK: RunEnd = RunEnd::Exited { success: true };

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn killed_never_restarts() {
        let mut t = RestartTracker::new(policy(2, 1800, 15, RestartMode::Fail), false);
        assert_eq!(t.decide(RunEnd::Killed, secs(0), 0.0), Decision::Killed);
        assert_eq!(t.count(), 0);
    }

    #[test]
    fn user_restart_is_immediate_and_not_counted() {
        let mut t = RestartTracker::new(policy(1, 1800, 15, RestartMode::Fail), false);
        for _ in 0..5 {
            assert_eq!(
                t.decide(RunEnd::UserRestart, secs(1), 0.5),
                Decision::Restart {
                    delay: Duration::ZERO,
                    reason: String::new()
                }
            );
        }
        assert_eq!(t.count(), 0);
    }

    #[test]
    fn zero_attempts() {
        let mut t = RestartTracker::new(policy(0, 1800, 15, RestartMode::Fail), false);
        assert_eq!(
            t.decide(FAIL, secs(0), 0.0),
            Decision::NotRestarting {
                reason: REASON_NO_RESTARTS_ALLOWED.into()
            }
        );
        // A service task that exits 0 is not restarted either, and that fails it.
        assert_eq!(
            t.decide(OK, secs(0), 0.0),
            Decision::NotRestarting {
                reason: REASON_NO_RESTARTS_ALLOWED.into()
            }
        );
        let mut b = RestartTracker::new(policy(0, 1800, 15, RestartMode::Fail), true);
        assert_eq!(
            b.decide(OK, secs(0), 0.0),
            Decision::Complete {
                reason: REASON_NO_RESTARTS_ALLOWED.into()
            }
        );
    }

    #[test]
    fn batch_success_completes() {
        let mut t = RestartTracker::new(policy(3, 86400, 15, RestartMode::Fail), true);
        assert_eq!(
            t.decide(OK, secs(0), 0.0),
            Decision::Complete {
                reason: REASON_UNNECESSARY.into()
            }
        );
        // A service task that exits 0 is restarted like any other exit.
        let mut s = RestartTracker::new(policy(3, 86400, 15, RestartMode::Fail), false);
        assert!(matches!(
            s.decide(OK, secs(0), 0.0),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn within_policy_with_jitter_bounds() {
        let mut t = RestartTracker::new(policy(10, 1800, 16, RestartMode::Fail), false);
        assert_eq!(
            t.decide(FAIL, secs(0), 0.0),
            Decision::Restart {
                delay: secs(16),
                reason: REASON_WITHIN_POLICY.into()
            }
        );
        assert_eq!(
            t.decide(FAIL, secs(1), 0.5),
            Decision::Restart {
                delay: secs(18),
                reason: REASON_WITHIN_POLICY.into()
            }
        );
        match t.decide(FAIL, secs(2), 0.999_999_999) {
            Decision::Restart { delay, .. } => {
                assert!(
                    delay < secs(20) && delay > Duration::from_millis(19_990),
                    "{delay:?}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fail_mode_exhausts_attempts() {
        let mut t = RestartTracker::new(policy(2, 1800, 15, RestartMode::Fail), false);
        assert!(matches!(
            t.decide(FAIL, secs(0), 0.0),
            Decision::Restart { .. }
        ));
        assert!(matches!(
            t.decide(RunEnd::StartFailed, secs(20), 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(
            t.decide(RunEnd::FailureRestart, secs(40), 0.0),
            Decision::NotRestarting {
                reason: "Exceeded allowed attempts 2 in interval 30m0s and mode is \"fail\"".into()
            }
        );
    }

    #[test]
    fn delay_mode_waits_for_the_rest_of_the_window() {
        let mut t = RestartTracker::new(policy(1, 60, 5, RestartMode::Delay), false);
        assert!(matches!(
            t.decide(FAIL, secs(100), 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(
            t.decide(FAIL, secs(110), 0.0),
            Decision::Restart {
                delay: secs(50),
                reason: REASON_DELAY.into()
            }
        );
    }

    #[test]
    fn a_new_window_resets_the_count() {
        let mut t = RestartTracker::new(policy(1, 60, 5, RestartMode::Fail), false);
        assert!(matches!(
            t.decide(FAIL, secs(0), 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(t.count(), 1);
        // Exactly at the window's end is still inside it.
        assert!(matches!(
            t.decide(FAIL, secs(60), 0.0),
            Decision::NotRestarting { .. }
        ));
        let mut t = RestartTracker::new(policy(1, 60, 5, RestartMode::Fail), false);
        assert!(matches!(
            t.decide(FAIL, secs(0), 0.0),
            Decision::Restart { .. }
        ));
        assert!(matches!(
            t.decide(FAIL, secs(61), 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(t.count(), 1);
    }
}
