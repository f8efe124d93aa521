//! Jobs as nodeward understands them, after parsing and validation.
//!
//! Jobspecs arrive as HCL (Nomad's syntax, [`hcl`]) or as JSON in Nomad's API shape ([`json`]).
//! Both parsers produce the same raw job (`raw`: the input's values, nothing defaulted), and its
//! one conversion into these domain types applies the defaults and validates ([`validate`]);
//! nothing past the parsers sees raw input. The domain types serialize to Nomad's API shape
//! (PascalCase names, durations in nanoseconds): that is what `POST /v1/jobs/parse` answers, what
//! the state file stores, and what [`json::parse_job`] accepts back unchanged. `${...}` in
//! `command`, `args` and `env` stays as written and is replaced when the task starts
//! ([`interpolate`]).

pub mod constraint;
pub mod cron;
pub mod devices;
pub mod docker;
pub mod ephemeral_disk;
pub mod exec;
pub mod fields;
pub mod hcl;
pub mod interpolate;
pub mod json;
pub mod kept;
pub mod lifecycle;
pub mod logs;
pub mod meta;
pub mod network;
pub mod periodic;
mod raw;
pub mod raw_exec;
pub mod schema;
pub mod settings;
mod shared;
pub mod signal;
pub mod table;
pub mod validate;
#[cfg(test)]
mod vars_tests;
pub mod volume;
pub mod zone;

pub use constraint::{Constraint, Operator};
pub use signal::Signal;
pub use volume::{parse_mode, BadMode};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::util::duration::nanos;

/// The signal a task is stopped with when its jobspec names none.
pub const DEFAULT_KILL_SIGNAL: Signal = Signal::INT;
/// How long a task gets between its kill signal and SIGKILL when its jobspec says nothing.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// `csi_plugin.mount_dir` when not set (csi.md).
pub const DEFAULT_CSI_MOUNT_DIR: &str = "/csi";
/// `csi_plugin.stage_publish_base_dir` when not set (csi.md).
pub const DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR: &str = "/local/csi";
/// `csi_plugin.health_timeout` when not set (csi.md).
pub const DEFAULT_CSI_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest group `count` accepted: every allocation is a set of processes and directories on
/// this one node, so a typo like `count = 100000` is refused instead of forking the node to death.
pub const MAX_GROUP_COUNT: u32 = 10_000;

/// Why a jobspec was refused. Every message names what was wrong and where: the HCL line for
/// syntax, unknown and wrongly typed fields, the JSON path for JSON fields, the job, group or task
/// name for validation rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobspecError {
    /// The input is not well-formed HCL or JSON.
    #[error("{0}")]
    Syntax(String),
    /// A block or attribute nodeward does not know (HCL only).
    #[error("{0}")]
    Unknown(String),
    /// A field has a value of the wrong type or an unusable value.
    #[error("{0}")]
    Invalid(String),
}

/// The one constructor of a refused value, for every file of the jobspec: `msg` says what is
/// wrong, on what (the HCL line, the JSON path, or the job, group or task) and why.
pub(crate) fn invalid(msg: impl Into<String>) -> JobspecError {
    JobspecError::Invalid(msg.into())
}

/// A refused value of job `job`, worded as Nomad's validation words it: `job "x": why`.
pub(crate) fn of_job(job: &str, why: impl std::fmt::Display) -> JobspecError {
    invalid(format!("job {job:?}: {why}"))
}

impl JobspecError {
    /// The same error with its message passed through `f` (the HCL front-end redacts secrets).
    pub(crate) fn map_message(self, f: impl FnOnce(String) -> String) -> JobspecError {
        match self {
            JobspecError::Syntax(m) => JobspecError::Syntax(f(m)),
            JobspecError::Unknown(m) => JobspecError::Unknown(f(m)),
            JobspecError::Invalid(m) => JobspecError::Invalid(f(m)),
        }
    }
}

impl From<crate::hcl::Error> for JobspecError {
    fn from(e: crate::hcl::Error) -> JobspecError {
        use crate::hcl::Error;
        match e {
            Error::Syntax(e) => JobspecError::Syntax(format!(
                "HCL syntax error at line {}, column {}: {}",
                e.line(),
                e.column(),
                e.message()
            )),
            Error::Thread(_) => JobspecError::Syntax(e.to_string()),
            Error::Unknown(m) => JobspecError::Unknown(m),
            Error::Invalid(m) => JobspecError::Invalid(m),
            Error::Eval(e) => JobspecError::Invalid(e.to_string()),
        }
    }
}

/// `type = "service" | "batch" | "system" | "sysbatch"`. On one node a system job is a service
/// job whose groups run once each (Nomad runs one allocation per node), and a sysbatch job the
/// same for a batch job: a `count` above 1 is refused, as Nomad refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    #[default]
    Service,
    Batch,
    System,
    #[serde(rename = "sysbatch")]
    SysBatch,
}

impl JobType {
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Service => "service",
            JobType::Batch => "batch",
            JobType::System => "system",
            JobType::SysBatch => "sysbatch",
        }
    }

    /// Whether a task that exits 0 is done (batch and sysbatch) rather than restarted.
    pub fn runs_to_completion(self) -> bool {
        matches!(self, JobType::Batch | JobType::SysBatch)
    }

    /// The restart policy a group gets when it sets none (tasks.md).
    pub fn default_restart_policy(self) -> RestartPolicy {
        match self {
            JobType::Service | JobType::System => RestartPolicy {
                render_templates: false,
                attempts: 2,
                interval: Duration::from_secs(30 * 60),
                delay: Duration::from_secs(15),
                mode: RestartMode::Fail,
            },
            JobType::Batch | JobType::SysBatch => RestartPolicy {
                render_templates: false,
                attempts: 3,
                interval: Duration::from_secs(24 * 3600),
                delay: Duration::from_secs(15),
                mode: RestartMode::Fail,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Job {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: JobType,
    /// Globs of the datacenters the job may run in; Nomad's default, `["*"]`, is left out of the
    /// JSON (so is every placement field at its default: job JSON written before them is unchanged).
    #[serde(
        default = "constraint::any_datacenter",
        skip_serializing_if = "constraint::is_any_datacenter"
    )]
    pub datacenters: Vec<String>,
    /// The node pool the job runs in (`default`; `all` is any pool).
    #[serde(
        default = "constraint::default_node_pool",
        skip_serializing_if = "constraint::is_default_pool"
    )]
    pub node_pool: String,
    /// Job-level `constraint` blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constraint>,
    /// `region`, `namespace`, `priority` and `all_at_once`: kept as written with Nomad's defaults
    /// and read back in Nomad's shape; nothing on one node depends on them ([`JobFields`]).
    #[serde(flatten)]
    pub fields: JobFields,
    /// `meta { }` ([`meta`]); not written when empty, so a job without one keeps its JSON.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: meta::Meta,
    pub task_groups: Vec<TaskGroup>,
    /// `periodic`: the job is a template its children are launched from on a schedule
    /// ([`periodic`]); it runs no allocation of its own. Not written when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic: Option<periodic::PeriodicConfig>,
    /// `parameterized`: the job is a template dispatched with a payload and meta; it runs no
    /// allocation of its own. Not written when absent.
    #[serde(
        rename = "ParameterizedJob",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub parameterized_job: Option<periodic::ParameterizedConfig>,
    /// The periodic or parameterized job this one was launched from; empty for others.
    #[serde(rename = "ParentID", default, skip_serializing_if = "String::is_empty")]
    pub parent_id: String,
    /// A dispatched child's payload, base64 as in Nomad's JSON; empty for others.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    /// The no-effect settings written at this level (`Update`, `Affinities`, `Services`...),
    /// kept as registered in Nomad's API shape ([`kept`]); nothing on one node reads them.
    #[serde(flatten, deserialize_with = "kept::job_level")]
    pub kept: kept::Kept,
}

/// The job fields that only a cluster acts on. Defaults are Nomad's; a field at its default is not
/// written, so that a job that sets none keeps its JSON (the state file's and the API's) byte for
/// byte, and a job stored before these fields existed reads with the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct JobFields {
    #[serde(
        default = "JobFields::default_region",
        skip_serializing_if = "JobFields::is_default_region"
    )]
    pub region: String,
    #[serde(
        default = "JobFields::default_namespace",
        skip_serializing_if = "JobFields::is_default_namespace"
    )]
    pub namespace: String,
    /// 1..=100 ([`fields::PRIORITY_RANGE`]).
    #[serde(
        default = "JobFields::default_priority",
        skip_serializing_if = "JobFields::is_default_priority"
    )]
    pub priority: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_at_once: bool,
}

impl JobFields {
    fn default_region() -> String {
        "global".to_string()
    }
    fn default_namespace() -> String {
        "default".to_string()
    }
    fn default_priority() -> u32 {
        50
    }
    fn is_default_region(r: &str) -> bool {
        r == "global"
    }
    fn is_default_namespace(n: &str) -> bool {
        n == "default"
    }
    fn is_default_priority(p: &u32) -> bool {
        *p == 50
    }
}

impl Default for JobFields {
    fn default() -> Self {
        JobFields {
            region: JobFields::default_region(),
            namespace: JobFields::default_namespace(),
            priority: JobFields::default_priority(),
            all_at_once: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskGroup {
    pub name: String,
    pub count: u32,
    /// The group's policy with the job type's defaults filled in.
    pub restart_policy: RestartPolicy,
    /// `volume "<name>" { ... }` blocks, keyed by the block label.
    pub volumes: BTreeMap<String, VolumeRequest>,
    /// The group's `network` block (at most one, mode `host`; [`network`]). Not written when
    /// there is none, so a job without one keeps its JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<network::NetworkResource>,
    /// Group-level `constraint` blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constraint>,
    /// `shutdown_delay`: how long a kill waits before the kill signal is sent ([`Task`]'s
    /// doc). Not written when zero, so a job without one keeps its JSON.
    #[serde(default, with = "nanos", skip_serializing_if = "Duration::is_zero")]
    pub shutdown_delay: Duration,
    /// `meta { }` ([`meta`]); not written when empty, so a job without one keeps its JSON.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: meta::Meta,
    /// `ephemeral_disk` ([`ephemeral_disk`]): what each allocation asks of the node's disk. Not
    /// written when it is Nomad's default, so a job without one keeps its JSON.
    #[serde(
        default,
        skip_serializing_if = "ephemeral_disk::EphemeralDisk::is_default"
    )]
    pub ephemeral_disk: ephemeral_disk::EphemeralDisk,
    pub tasks: Vec<Task>,
    /// The no-effect settings written at this level (`Update`, `Affinities`, `Services`...),
    /// kept as registered in Nomad's API shape ([`kept`]); nothing on one node reads them.
    #[serde(flatten, deserialize_with = "kept::group_level")]
    pub kept: kept::Kept,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    Fail,
    Delay,
}

impl RestartMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RestartMode::Fail => "fail",
            RestartMode::Delay => "delay",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RestartPolicy {
    pub attempts: u32,
    #[serde(with = "nanos")]
    pub interval: Duration,
    #[serde(with = "nanos")]
    pub delay: Duration,
    pub mode: RestartMode,
    /// `render_templates`: no effect on this node (templates are refused), kept as written and
    /// not written when false, so a policy without it keeps its JSON.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub render_templates: bool,
}

/// A group's `volume "<name>" { type = "host" source = "..." read_only = ... }`, or a CSI volume
/// claim: `type = "csi"` with `access_mode`, `attachment_mode`, `per_alloc`, `mount_options`
/// (Nomad's `VolumeRequest`; the CSI fields are unset for host volumes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeRequest {
    pub name: String,
    #[serde(rename = "Type")]
    pub volume_type: String,
    pub source: String,
    pub read_only: bool,
    // Defaults: state files written before CSI volume requests existed have none of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<volume::CsiAccessMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment_mode: Option<volume::AttachmentMode>,
    /// The volume claimed is `<source>[<alloc index>]`, one per allocation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_alloc: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_options: Option<volume::CsiMountOptions>,
    /// `sticky`: no effect on one node ([`settings`]); kept, not written when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sticky: bool,
}

/// `type = "host"`.
pub const VOLUME_TYPE_HOST: &str = "host";
/// `type = "csi"`.
pub const VOLUME_TYPE_CSI: &str = "csi";

impl VolumeRequest {
    pub fn is_csi(&self) -> bool {
        self.volume_type == VOLUME_TYPE_CSI
    }

    /// The ID of the volume an allocation with index `alloc_index` claims: Nomad's
    /// `source[index]` for `per_alloc`, the source otherwise.
    pub fn source_for(&self, alloc_index: u32) -> String {
        if self.per_alloc {
            format!("{}[{alloc_index}]", self.source)
        } else {
            self.source.clone()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Task {
    pub name: String,
    pub driver: String,
    pub config: DriverConfig,
    pub env: BTreeMap<String, String>,
    /// Run as this user (the agent must be root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Sent to stop the task, [`DEFAULT_KILL_SIGNAL`] unless the jobspec names one; its JSON is
    /// the canonical name (`"SIGTERM"`).
    pub kill_signal: Signal,
    #[serde(with = "nanos")]
    pub kill_timeout: Duration,
    /// The task's restart policy: the task's own override, else the group's.
    pub restart_policy: RestartPolicy,
    pub log_config: LogConfig,
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(
        rename = "CSIPluginConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub csi_plugin: Option<CsiPluginConfig>,
    pub resources: Resources,
    /// When in the allocation's life the task runs ([`lifecycle`]); `None`: a main task. Not
    /// written when absent, so a job without one keeps its JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<lifecycle::TaskLifecycle>,
    /// `leader = true`: when this task ends, the other tasks of its allocation are killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub leader: bool,
    /// Task-level `constraint` blocks (placed with the group's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<Constraint>,
    /// `shutdown_delay`: when the task is killed (never its own exit), the kill signal waits
    /// this, after what is left of its group's delay in a stop (waited once per stop,
    /// `task::runner`'s kill). An agent shutdown cuts the wait short.
    #[serde(default, with = "nanos", skip_serializing_if = "Duration::is_zero")]
    pub shutdown_delay: Duration,
    /// `meta { }` ([`meta`]); not written when empty, so a job without one keeps its JSON.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: meta::Meta,
    /// `dispatch_payload { file }`: a dispatched payload is written to `local/<file>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_payload: Option<periodic::DispatchPayload>,
    /// The no-effect settings written at this level (`Update`, `Affinities`, `Services`...),
    /// kept as registered in Nomad's API shape ([`kept`]); nothing on one node reads them.
    #[serde(flatten, deserialize_with = "kept::task_level")]
    pub kept: kept::Kept,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverConfig {
    /// Required by `raw_exec`; for `docker` it replaces the image's command and may be empty.
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// `raw_exec`'s `oom_score_adj` (0 to 1000): written to the task's
    /// `/proc/<pid>/oom_score_adj` before it execs. Unset, the task gets 0, as in Nomad. Not
    /// written when unset, so a job without it keeps its JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<u32>,
    /// `exec`'s `pid_mode` and `ipc_mode` ([`exec`]): `"private"` when written (the only value
    /// accepted); not written when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc_mode: Option<String>,
    /// The docker driver's keys ([`docker`]); empty, and not written, for other drivers.
    #[serde(flatten)]
    pub docker: docker::DockerConfig,
    /// The `config` of a driver nodeward does not have (`java`, `qemu`, `podman`, ...), kept as
    /// given: such a task is never placed here (`missing drivers`), so nothing reads it. Empty,
    /// and not written, for the drivers it has ([`is_known_driver`]).
    #[serde(flatten)]
    pub opaque: BTreeMap<String, serde_json::Value>,
}

/// The drivers nodeward has: their `config` is read and checked; any other driver's is kept
/// opaque and its tasks get Nomad's `missing drivers` placement failure.
pub const KNOWN_DRIVERS: [&str; 3] = ["raw_exec", "exec", docker::NAME];

pub fn is_known_driver(name: &str) -> bool {
    KNOWN_DRIVERS.contains(&name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LogConfig {
    pub max_files: u32,
    #[serde(rename = "MaxFileSizeMB")]
    pub max_file_size_mb: u32,
    /// `logs { disabled = true }` (or the deprecated `enabled = false`): no log collection, the
    /// task's stdout and stderr are `/dev/null` and no log file is written for it. Not written
    /// when false, so a job without it keeps its JSON.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_files: 10,
            max_file_size_mb: 10,
            disabled: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeMount {
    /// The label of a group `volume` block.
    pub volume: String,
    /// Path inside the task directory.
    pub destination: String,
    pub read_only: bool,
    /// `propagation_mode`: empty or `private`, what this node does ([`settings`]); kept as
    /// written, not written when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub propagation_mode: String,
    /// `selinux_label` (`z`, `Z`): no effect on this node ([`settings`]); kept, not written
    /// when empty.
    #[serde(
        rename = "SELinuxLabel",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub selinux_label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CsiPluginType {
    Node,
    Controller,
    Monolith,
}

impl CsiPluginType {
    pub fn as_str(self) -> &'static str {
        match self {
            CsiPluginType::Node => "node",
            CsiPluginType::Controller => "controller",
            CsiPluginType::Monolith => "monolith",
        }
    }
    pub fn has_node(self) -> bool {
        matches!(self, CsiPluginType::Node | CsiPluginType::Monolith)
    }
    pub fn has_controller(self) -> bool {
        matches!(self, CsiPluginType::Controller | CsiPluginType::Monolith)
    }
}

/// The `csi_plugin` block (csi.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CsiPluginConfig {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Type")]
    pub plugin_type: CsiPluginType,
    pub mount_dir: String,
    pub stage_publish_base_dir: String,
    #[serde(with = "nanos")]
    pub health_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Resources {
    #[serde(rename = "CPU")]
    pub cpu: u32,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: u32,
    /// `memory_max`: the hard limit when set (then `memory` is the soft one); 0 when not set, as
    /// Nomad encodes it.
    #[serde(rename = "MemoryMaxMB", default, skip_serializing_if = "is_zero")]
    pub memory_max_mb: u32,
    /// `cores`: CPUs the task gets for itself (docs/resources.md); 0 when not set. A task that
    /// asks for cores asks for no `cpu` (0): its weight is the cores' MHz, given at placement.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cores: u32,
    /// `device "<name>" { count ... }` blocks (Nomad's `Devices`), kept as Nomad's API writes
    /// them: this node fingerprints no devices, so a task that asks for one is Nomad's
    /// `missing devices` placement failure (`alloc::placement`). Not written when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<serde_json::Value>,
    /// `numa { affinity }` (Nomad's `NUMA`), kept as written: `none` and `prefer` have no effect
    /// (cores are not placed by NUMA node here); `require` is refused. Not written when absent.
    #[serde(rename = "NUMA", default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<serde_json::Value>,
    /// `secrets` (Nomad's `SecretsMB`, the size of a tmpfs secrets directory): no effect, the
    /// secrets directory is a directory of the task's; kept, not written when 0.
    #[serde(rename = "SecretsMB", default, skip_serializing_if = "is_zero")]
    pub secrets_mb: u32,
}

/// An unset `memory_max` is left out of the job's JSON, which stays as it was before it existed.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: 100,
            memory_mb: 300,
            memory_max_mb: 0,
            cores: 0,
            devices: Vec::new(),
            numa: None,
            secrets_mb: 0,
        }
    }
}

/// A parsed jobspec together with what the parser wants the user to know (ignored JSON fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub job: Job,
    pub warnings: Vec<String>,
}
