//! [`TaskHandle`]: what a driver needs to find a task it started again, after the agent that
//! started it is gone (Nomad's `drivers.TaskHandle`).
//!
//! A driver returns one from [`super::Driver::start`] (inside the [`super::RunningTask`]) and takes
//! one in [`super::Driver::recover`]. It is plain serialisable data that depends on no subsystem,
//! so the state file can keep it as it is. Today the state file keeps a task's PID and its start
//! time instead (`records::TaskState`), and the task runner rebuilds the handle from them; storing
//! the handle itself comes with re-attaching (live-restore.md), under a serde default so version-1
//! state files still load.

use serde::{Deserialize, Serialize};

/// The format of [`TaskHandle::state`]; a driver refuses a handle of a version it does not know.
pub const HANDLE_VERSION: u32 = 1;

/// Where a task runs, in its driver's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskHandle {
    pub version: u32,
    /// The driver that started the task (`raw_exec`).
    pub driver: String,
    pub state: HandleState,
}

/// The driver-specific part of a handle. A new driver adds its variant (a container ID for
/// `docker`; a supervisor's socket next to the PID for a `raw_exec` that outlives the agent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Kind", rename_all_fields = "PascalCase")]
pub enum HandleState {
    /// A process on this node that leads the task's process group, told apart from a later
    /// process with the same PID by its start time in clock ticks since boot.
    Process { pid: i32, start_ticks: u64 },
}

impl TaskHandle {
    /// The handle of a task that is the process group led by `pid`.
    pub fn process(driver: &str, pid: i32, start_ticks: u64) -> TaskHandle {
        TaskHandle {
            version: HANDLE_VERSION,
            driver: driver.to_string(),
            state: HandleState::Process { pid, start_ticks },
        }
    }

    /// The process leading the task, for drivers whose task is one.
    pub fn pid(&self) -> Option<(i32, u64)> {
        match self.state {
            HandleState::Process { pid, start_ticks } => Some((pid, start_ticks)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_survives_the_state_file() {
        let h = TaskHandle::process("raw_exec", 4242, 987_654);
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(
            text,
            r#"{"Version":1,"Driver":"raw_exec","State":{"Kind":"Process","Pid":4242,"StartTicks":987654}}"#
        );
        assert_eq!(serde_json::from_str::<TaskHandle>(&text).unwrap(), h);
        assert_eq!(h.pid(), Some((4242, 987_654)));
    }
}
