//! Task drivers. nodeward has one, [`RawExec`]: a local process with no isolation.
//!
//! - [`process`]: the one way to run a child process (process groups, kill with timeout, bounded
//!   waits, the pidfd waiter, PID identity, leftovers), which drivers and volume plugins share.
//! - [`raw_exec`]: the `raw_exec` driver; [`logs`]: task log files.
//!
//! Protocol: [`Driver::start`] spawns the task's process in a process group of its own with one
//! waiter thread (see [`process`]), which pumps its output into rotated log files and sends one
//! [`ExitStatus`] on [`TaskProcess::exited`] when it has exited. The task runner owns the
//! [`TaskProcess`] and signals the group through it.

pub mod logs;
pub mod process;
pub mod raw_exec;

use crossbeam_channel::Receiver;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use crate::jobspec::LogConfig;
pub use process::{
    find_task_processes, live_groups, lookup_user, process_start_ticks, same_process_alive,
    signal_group, stop_foreign_group, stop_groups, ExitStatus, Leftover, ProcessError, ProcessId,
    SIGKILL_WAIT,
};
pub use raw_exec::{resolve_command, RawExec};

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("exec: {command:?}: executable file not found in $PATH")]
    NotFound { command: String },
    #[error("failed to start {command:?}: {source}")]
    Spawn { command: String, source: io::Error },
    /// The user to run as, or the watch on a started process (the messages of [`ProcessError`]).
    #[error(transparent)]
    Process(ProcessError),
}

/// What to start.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub command: String,
    pub args: Vec<String>,
    /// The complete environment of the process.
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub user: Option<String>,
    /// `alloc/logs`.
    pub log_dir: PathBuf,
    pub task_name: String,
    pub logs: LogConfig,
    /// Names the waiter thread.
    pub thread_name: String,
}

/// A running task process.
pub struct TaskProcess {
    pub pid: i32,
    /// Start time in clock ticks since boot, to tell a reused PID apart.
    pub start_ticks: u64,
    /// Receives one status when the process has exited and been reaped.
    pub exited: Receiver<ExitStatus>,
    /// The process and its waiter.
    pub child: process::Child,
}

impl TaskProcess {
    /// Sends `signal` to the task's whole process group.
    pub fn signal_group(&self, signal: i32) -> io::Result<()> {
        self.child.signal_group(signal)
    }
}

pub trait Driver: Send + Sync {
    fn start(&self, spec: &StartSpec) -> Result<TaskProcess, DriverError>;
}
