//! Task drivers: the interface every driver implements, in the shape of Nomad's driver plugins
//! (`plugins/drivers/driver.go`), and the drivers. nodeward has one today, [`RawExec`]: a local
//! process with no isolation, started and held by the data directory's task keeper.
//!
//! - [`Driver`]: start, wait (the exit channel of [`RunningTask`]), stop, destroy, recover,
//!   inspect, signal, stats.
//! - [`RunningTask`]: the agent's side of a task a driver started or re-attached to: its
//!   [`TaskHandle`] and whatever the driver keeps to watch it.
//! - [`handle`]: [`TaskHandle`], the serialisable value that finds a task again.
//! - [`process`]: the one way to run a child process (process groups, kill with timeout, bounded
//!   waits, the pidfd waiter, PID identity, leftovers), which drivers and volume plugins share.
//! - [`raw_exec`]: the `raw_exec` driver; [`logs`]: task log files.
//!
//! Protocol: the task runner owns the [`RunningTask`]. It selects on
//! [`RunningTask::exited`] (one [`ExitStatus`] per run, then the channel disconnects) together
//! with its commands and the agent's shutdown, and calls back into the driver to signal or stop
//! the task. Once a run is over the runner hands the task back to [`Driver::destroy`] (when its
//! next run ends, or when the runner does), which kills what is left of it and joins the driver's
//! threads for it: a driver thread is never left serving a task nobody owns. (A runner that
//! panics drops its task instead; its panic handler kills the task's group, and the waiter ends
//! by itself.) A driver keeps no table of tasks: everything it needs is in the [`RunningTask`] or
//! the [`TaskHandle`] it is given, so every call is safe from any thread.
//!
//! Tasks outlive the agent (live-restore.md): `raw_exec` starts them through the data directory's
//! keeper ([`process::keeper`]), their parent. After an agent restart the runner offers the
//! recorded handle to [`Driver::recover`], which re-attaches to the task (running, or exited with
//! its status kept); `None` means the task is gone (the machine rebooted) or was never this
//! driver's to re-attach to (a version-1 handle: the runner stops it with
//! [`Driver::stop_orphan`] before it starts the task again).

pub mod handle;
pub mod process;
pub use nodeward_keeper::logs;
pub mod raw_exec;

use crossbeam_channel::Receiver;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::jobspec::LogConfig;
use crate::thread::Never;
pub use handle::{HandleState, TaskHandle};
pub use process::keeper::client::{KeeperClient, KeeperError, TaskExit};
pub use process::{
    find_task_processes, live_groups, lookup_user, process_start_ticks, same_process_alive,
    signal_group, start_time_nanos, stop_foreign_group, stop_groups, ExitStatus, Leftover,
    ProcessError, ProcessId, SIGKILL_WAIT,
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
    #[error("the {driver} driver does not support {operation}")]
    NotSupported {
        driver: &'static str,
        operation: &'static str,
    },
    #[error(
        "the {driver} driver cannot use a handle of the {handle_driver} driver (version {version})"
    )]
    ForeignHandle {
        driver: &'static str,
        handle_driver: String,
        version: u32,
    },
    #[error("{0}")]
    Signal(io::Error),
    #[error("process {pid} did not die after SIGKILL")]
    Unkillable { pid: i32 },
    #[error(transparent)]
    Keeper(KeeperError),
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
    /// The allocation the task belongs to (the keeper names its tasks by it).
    pub alloc_id: String,
    /// `alloc/logs`.
    pub log_dir: PathBuf,
    pub task_name: String,
    pub logs: LogConfig,
}

/// Whether a task runs, as [`Driver::inspect`] sees it (Nomad's `drivers.TaskState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskRunState {
    Running,
    Exited,
    /// The driver cannot tell (its engine is unreachable, say).
    Unknown,
}

/// Resource usage of a task (Nomad's `TaskResourceUsage`); what `/v1/client/allocation/:id/stats`
/// will show (resources.md).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TaskStats {
    pub memory_rss_bytes: u64,
    pub memory_cache_bytes: u64,
    pub memory_swap_bytes: u64,
    pub memory_usage_bytes: u64,
    pub memory_max_usage_bytes: u64,
    pub cpu_percent: f64,
    pub cpu_total_ticks: f64,
    pub cpu_throttled_time: u64,
}

/// A task a driver started or re-attached to. The task runner owns it; the driver reads it.
pub struct RunningTask {
    handle: TaskHandle,
    attached: Attached,
}

/// What a driver keeps to watch one task; each driver uses its own variant.
enum Attached {
    /// A task the keeper holds, leading its own process group (`raw_exec`).
    Kept(process::keeper::client::Kept),
}

impl RunningTask {
    pub fn handle(&self) -> &TaskHandle {
        &self.handle
    }

    /// Receives how the task ended, once (Nomad's `WaitTask`): select on it.
    pub fn exited(&self) -> &Receiver<TaskExit> {
        match &self.attached {
            Attached::Kept(kept) => &kept.exited,
        }
    }
}

impl TaskExit {
    /// The exit code and signal; a task lost with its keeper has code -1.
    pub fn status(&self) -> ExitStatus {
        match self {
            TaskExit::Exited(e) => ExitStatus {
                exit_code: e.exit_code,
                signal: e.signal,
            },
            TaskExit::KeeperDied | TaskExit::Unknown | TaskExit::LostWhileAway => {
                ExitStatus::lost()
            }
        }
    }

    /// When the task ended, in nanoseconds since the Unix epoch, when that is known.
    pub fn at_nanos(&self) -> Option<i64> {
        match self {
            TaskExit::Exited(e) => Some(e.at_nanos),
            TaskExit::KeeperDied | TaskExit::Unknown | TaskExit::LostWhileAway => None,
        }
    }

    /// The `Terminated` event's message: empty for a task whose end was seen.
    pub fn message(&self) -> &'static str {
        match self {
            TaskExit::Exited(_) | TaskExit::Unknown => "",
            TaskExit::KeeperDied => KEEPER_DIED,
            TaskExit::LostWhileAway => LOST_WHILE_AWAY,
        }
    }
}

/// The `Terminated` message of a task whose keeper died.
pub const KEEPER_DIED: &str = "the task's keeper process died";
/// The `Terminated` message of a task that was gone when the agent came back (live-restore.md).
pub const LOST_WHILE_AWAY: &str = "task process was lost while the agent was not running";

impl TaskExit {
    /// Whether the task ended by itself with success.
    pub fn success(&self) -> bool {
        self.status().success()
    }
}

/// A task driver. Every call that waits is bounded: by the timeout it is given, or by the driver's
/// own limit on how long a killed task may take to go.
pub trait Driver: Send + Sync {
    /// The name jobs give in `driver = "..."`; fingerprinted as the node attribute `driver.<name>`.
    fn name(&self) -> &'static str;

    /// Starts the task. When this returns it runs, and its exit will arrive on
    /// [`RunningTask::exited`].
    fn start(&self, spec: &StartSpec) -> Result<RunningTask, DriverError>;

    /// Starts the task again after `previous`, a run of it that is over, and releases that run as
    /// [`Driver::destroy`] does, whether the start succeeds or not. A driver may do both in one
    /// step: `raw_exec` tells the keeper it is done with the old run in the same message that
    /// starts the new one, one exchange less between a crash and the restarted process.
    fn restart(&self, previous: RunningTask, spec: &StartSpec) -> Result<RunningTask, DriverError> {
        self.destroy(previous);
        self.start(spec)
    }

    /// Re-attaches to a task that an earlier agent started, from its handle: one that still runs,
    /// or that exited while no agent watched (its exit is then waiting on
    /// [`RunningTask::exited`]). `Ok(None)`: the task is gone, or the handle is not one this
    /// driver can re-attach to; the caller stops what is left with [`Driver::stop_orphan`].
    fn recover(&self, handle: &TaskHandle) -> Result<Option<RunningTask>, DriverError>;

    /// Re-attaches to a run of the task that an agent started but did not get to record (it
    /// crashed first), by allocation and task name. `None` when there is none.
    fn adopt(&self, _alloc_id: &str, _task: &str) -> Option<RunningTask> {
        None
    }

    /// Sends `signal`, waits up to `timeout` for the task to exit, then kills it for good and waits
    /// a bounded time more. Answers how it ended.
    fn stop(
        &self,
        task: &RunningTask,
        signal: i32,
        timeout: Duration,
    ) -> Result<TaskExit, DriverError>;

    /// Stops, the way [`Driver::stop`] does, a task that no [`RunningTask`] of this agent is
    /// attached to: one that [`Driver::recover`] could not re-attach. A task that is gone already
    /// is no error; nothing that merely reuses its identity is ever touched. `Ok(false)`: `cancel`
    /// disconnected (the agent is stopping) before the task was gone; it is left as it is, for
    /// the next agent.
    fn stop_orphan(
        &self,
        handle: &TaskHandle,
        signal: i32,
        timeout: Duration,
        cancel: &Receiver<Never>,
    ) -> Result<bool, DriverError>;

    /// Releases what the driver holds for a task whose run is over (its threads; a container
    /// would be removed). A task that still runs is killed first.
    fn destroy(&self, task: RunningTask);

    /// Whether the task a handle names still runs. Works for a handle that nothing is attached to.
    fn inspect(&self, handle: &TaskHandle) -> TaskRunState;

    /// Sends `signal` to the task (for `raw_exec`, its whole process group).
    fn signal(&self, task: &RunningTask, signal: i32) -> Result<(), DriverError>;

    /// The task's resource usage now.
    fn stats(&self, task: &RunningTask) -> Result<TaskStats, DriverError>;
}
