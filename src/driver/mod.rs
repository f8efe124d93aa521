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
//! - [`raw_exec`]: the `raw_exec` driver; [`exec`]: the `exec` driver, `raw_exec` isolated;
//!   [`logs`]: task log files.
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

pub mod docker;
pub mod exec;
pub mod handle;
pub mod process;
pub use nodeward_keeper::logs;
pub mod raw_exec;

use crossbeam_channel::Receiver;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
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
    #[error("driver {driver:?} is not available on this node")]
    Unavailable { driver: String },
    /// The task's cgroup could not be made or its limits written.
    #[error("task cgroup: {0}")]
    Cgroup(crate::cgroup::CgroupError),
    /// The docker driver: the engine's error, or what the node does not allow.
    #[error("{0}")]
    Docker(String),
    /// The exec driver: a `cap_add` beyond what the driver allows.
    #[error("driver does not allow the following capabilities: {0}")]
    CapsNotAllowed(String),
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
    /// Its rotation, or `disabled`: the task's output goes nowhere and no log file is written.
    pub logs: LogConfig,
    /// `raw_exec`'s `oom_score_adj`; `None` gives the task 0 (docs/resources.md).
    pub oom_score_adj: Option<u32>,
    /// The task's `resources`: its cgroup's limits (`cpu` is its cores' MHz for a task with
    /// `cores`).
    pub resources: crate::jobspec::Resources,
    /// The CPUs the task holds for its `cores` (its cgroup's `cpuset.cpus`); empty for none.
    pub cores: Vec<u32>,
    /// What a container driver needs besides (docker); `None` for `raw_exec`.
    pub container: Option<ContainerSpec>,
    /// Host paths an `exec` task sees in its root (its `volume_mount`s); empty for the others.
    pub binds: Vec<Bind>,
    /// The task's `cap_add` and `cap_drop`: the exec driver applies them (docker reads its own
    /// config).
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    /// Where the driver reports progress the task's events show (`Downloading image`).
    pub progress: Option<Progress>,
    /// Either disconnects to cancel a start in progress (an image pull): the task's kill and the
    /// agent's shutdown.
    pub cancel: Option<[Receiver<Never>; 2]>,
}

/// Where a driver's progress messages go: the task's `Driver` events.
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(&str) + Send + Sync>);

impl Progress {
    pub fn report(&self, message: &str) {
        (self.0)(message)
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

/// A container task's settings beyond the process fields of [`StartSpec`] (docker.md).
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub config: crate::jobspec::docker::DockerConfig,
    /// The allocation's ports that the config's `ports` publishes: the host port on the host
    /// IP, to the container port ([`AllocatedPort::task_port`]).
    ///
    /// [`AllocatedPort::task_port`]: crate::jobspec::network::AllocatedPort::task_port
    pub ports: Vec<crate::jobspec::network::AllocatedPort>,
    pub job_name: String,
    /// `<alloc_dir>/<task>` on the host: `volumes` and bind mounts are relative to it.
    pub task_dir: PathBuf,
    /// Host directories bound into the container, as Nomad binds them: the shared `alloc`
    /// directory at `/alloc`, the task's `local` and `secrets` at `/local` and `/secrets`, a CSI
    /// plugin's socket directory at its `mount_dir`.
    pub binds: Vec<Bind>,
    /// `resources { memory }` in MiB and `cpu` in MHz (CPU shares); `memory_max` in MiB, 0 when
    /// not set.
    pub memory_mb: u32,
    pub memory_max_mb: u32,
    pub cpu: u32,
    /// The CPUs the task holds for its `cores` (`CpusetCpus`); empty for none.
    pub cores: Vec<u32>,
}

/// A host path bound into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
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
    /// When the task really started, in nanoseconds since the Unix epoch, where the driver
    /// knows it (a container's `StartedAt`); a process's comes from its start time in ticks.
    started_nanos: Option<i64>,
}

/// What a driver keeps to watch one task; each driver uses its own variant.
enum Attached {
    /// A task the keeper holds, leading its own process group (`raw_exec`).
    Kept(process::keeper::client::Kept),
    /// A container of the docker engine.
    Container(Box<docker::Watched>),
}

impl RunningTask {
    pub fn handle(&self) -> &TaskHandle {
        &self.handle
    }

    /// When the task started, where the driver knows it better than the runner's clock.
    pub fn started_nanos(&self) -> Option<i64> {
        self.started_nanos.or_else(|| {
            self.handle
                .pid()
                .and_then(|(_, ticks)| start_time_nanos(ticks))
        })
    }

    /// Receives how the task ended, once (Nomad's `WaitTask`): select on it.
    pub fn exited(&self) -> &Receiver<TaskExit> {
        match &self.attached {
            Attached::Kept(kept) => &kept.exited,
            Attached::Container(c) => &c.exited,
        }
    }
}

impl TaskExit {
    /// The exit code and signal; a task lost with its keeper has code -1.
    pub fn status(&self) -> ExitStatus {
        match self {
            TaskExit::Exited(e) | TaskExit::Container { exit: e, .. } => ExitStatus {
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
            TaskExit::Exited(e) | TaskExit::Container { exit: e, .. } => Some(e.at_nanos),
            TaskExit::KeeperDied | TaskExit::Unknown | TaskExit::LostWhileAway => None,
        }
    }

    /// The `Terminated` event's message: empty for a task whose end was seen; for a container,
    /// the docker driver's (docker.md).
    pub fn message(&self) -> std::borrow::Cow<'static, str> {
        match self {
            TaskExit::Exited(e) if e.oom_killed => "OOM Killed".into(),
            TaskExit::Exited(_) | TaskExit::Unknown => "".into(),
            TaskExit::KeeperDied => KEEPER_DIED.into(),
            TaskExit::LostWhileAway => LOST_WHILE_AWAY.into(),
            TaskExit::Container {
                oom_killed: true, ..
            } => "OOM Killed".into(),
            TaskExit::Container { exit, .. } if exit.exit_code != 0 => format!(
                "Docker container exited with non-zero exit code: {}",
                exit.exit_code
            )
            .into(),
            TaskExit::Container { .. } => "".into(),
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

    /// The node attributes the driver gives while it is healthy: `driver.<name> = "1"` and its
    /// own (`driver.docker.version`); none while it is not (its engine is unreachable).
    fn fingerprint(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(format!("driver.{}", self.name()), "1".to_string())])
    }

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

    /// A run re-attached by [`Driver::recover`] or [`Driver::adopt`], holding `cores` (given at
    /// placement; none for most tasks): the driver takes the task's cgroup back as its own and
    /// keeps the other tasks off those cores again, as the agent that started it did. Nothing by
    /// default.
    fn reattached(&self, _alloc_id: &str, _task: &str, _cores: &[u32]) {}

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

/// The node's drivers, by the name jobs give. Cheap to clone: every runner holds one.
#[derive(Clone)]
pub struct Drivers {
    list: Arc<Vec<Arc<dyn Driver>>>,
    /// Names `client { options { "driver.denylist" } }` gives: not fingerprinted, so nothing new
    /// is placed on them, while tasks of theirs that run are still driven (re-attached).
    denied: Arc<BTreeSet<String>>,
}

impl Drivers {
    pub fn new(list: Vec<Arc<dyn Driver>>) -> Drivers {
        Drivers {
            list: Arc::new(list),
            denied: Arc::default(),
        }
    }

    pub fn with_denied(self, denied: BTreeSet<String>) -> Drivers {
        Drivers {
            denied: Arc::new(denied),
            ..self
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Driver>> {
        self.list.iter().find(|d| d.name() == name)
    }

    /// The driver a task names; one that refuses every start when the node has none of that name
    /// (a state file written by a newer nodeward), so the task fails with the reason in its events.
    pub fn for_task(&self, name: &str) -> Arc<dyn Driver> {
        match self.get(name) {
            Some(d) => d.clone(),
            None => Arc::new(Unavailable {
                name: name.to_string(),
            }),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Driver>> {
        self.list.iter()
    }

    /// The node attributes of every healthy driver (`driver.<name>` and the driver's own).
    pub fn attributes(&self) -> BTreeMap<String, String> {
        self.list
            .iter()
            .filter(|d| !self.denied.contains(d.name()))
            .flat_map(|d| d.fingerprint())
            .collect()
    }
}

/// A driver this node does not have: nothing starts, nothing can be re-attached.
struct Unavailable {
    name: String,
}

impl Unavailable {
    fn refused(&self) -> DriverError {
        DriverError::Unavailable {
            driver: self.name.clone(),
        }
    }
}

impl Driver for Unavailable {
    fn name(&self) -> &'static str {
        "unavailable"
    }
    fn fingerprint(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn start(&self, _: &StartSpec) -> Result<RunningTask, DriverError> {
        Err(self.refused())
    }
    fn recover(&self, _: &TaskHandle) -> Result<Option<RunningTask>, DriverError> {
        Err(self.refused())
    }
    fn stop(&self, _: &RunningTask, _: i32, _: Duration) -> Result<TaskExit, DriverError> {
        Err(self.refused())
    }
    fn stop_orphan(
        &self,
        _: &TaskHandle,
        _: i32,
        _: Duration,
        _: &Receiver<Never>,
    ) -> Result<bool, DriverError> {
        Err(self.refused())
    }
    fn destroy(&self, _: RunningTask) {}
    fn inspect(&self, _: &TaskHandle) -> TaskRunState {
        TaskRunState::Unknown
    }
    fn signal(&self, _: &RunningTask, _: i32) -> Result<(), DriverError> {
        Err(self.refused())
    }
    fn stats(&self, _: &RunningTask) -> Result<TaskStats, DriverError> {
        Err(self.refused())
    }
}
