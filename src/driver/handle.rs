//! [`TaskHandle`]: what a driver needs to find a task it started again, after the agent that
//! started it is gone (Nomad's `drivers.TaskHandle`).
//!
//! A driver returns one from [`super::Driver::start`] (inside the [`super::RunningTask`]) and takes
//! one in [`super::Driver::recover`]. It is plain serialisable data that depends on no subsystem:
//! the state file keeps it as it is (`records::TaskState::handle`, from state version 2). A
//! version-1 state file has only a PID and its start time, which the runner turns into a
//! [`HandleState::Process`] handle.

pub use crate::records::{HandleState, TaskHandle, HANDLE_VERSION};

impl TaskHandle {
    /// The handle of a task that is the process group led by `pid`.
    pub fn process(driver: &str, pid: i32, start_ticks: u64) -> TaskHandle {
        TaskHandle {
            version: HANDLE_VERSION,
            driver: driver.to_string(),
            state: HandleState::Process { pid, start_ticks },
        }
    }

    /// The handle of a task the keeper holds as `pid`.
    pub fn kept(driver: &str, pid: i32, start_ticks: u64) -> TaskHandle {
        TaskHandle {
            version: HANDLE_VERSION,
            driver: driver.to_string(),
            state: HandleState::Kept { pid, start_ticks },
        }
    }

    /// The handle of a container of the docker engine.
    pub fn container(driver: &str, id: &str, name: &str) -> TaskHandle {
        TaskHandle {
            version: HANDLE_VERSION,
            driver: driver.to_string(),
            state: HandleState::Container {
                id: id.to_string(),
                name: name.to_string(),
            },
        }
    }

    /// The container a handle names, for the docker driver.
    pub fn container_id(&self) -> Option<&str> {
        match &self.state {
            HandleState::Container { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The process leading the task, for drivers whose task is one.
    pub fn pid(&self) -> Option<(i32, u64)> {
        match self.state {
            HandleState::Process { pid, start_ticks } | HandleState::Kept { pid, start_ticks } => {
                Some((pid, start_ticks))
            }
            HandleState::Container { .. } => None,
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
        let k = TaskHandle::kept("raw_exec", 7, 9);
        let text = serde_json::to_string(&k).unwrap();
        assert_eq!(
            text,
            r#"{"Version":1,"Driver":"raw_exec","State":{"Kind":"Kept","Pid":7,"StartTicks":9}}"#
        );
        assert_eq!(serde_json::from_str::<TaskHandle>(&text).unwrap(), k);
    }
}
