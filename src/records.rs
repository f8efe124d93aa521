//! The state file's record types: what `state.json` holds, section by section.
//!
//! They depend on nothing but the jobspec's domain types (a job record keeps the job as it was
//! submitted), so `state` imports no subsystem and no import cycle can form around it: each
//! subsystem converts between its live model and these records. Changing a field here changes
//! the state file format: keep old files loading (serde defaults) or bump
//! [`crate::state::STATE_VERSION`] with an upgrade.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use crate::jobspec::network::AllocatedPort;
use crate::jobspec::Job;
// Defined beside the jobspec's volume requests, which name them too; kept here by their old path.
pub use crate::jobspec::volume::{AttachmentMode, CsiAccessMode, CsiMountOptions};

/// How many events a task keeps; the oldest is dropped first.
pub const MAX_EVENTS: usize = 10;

// ---- jobs and allocations ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DesiredStatus {
    #[default]
    Run,
    Stop,
}

/// A registered job as the state file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct JobRecord {
    pub job: Job,
    pub stop: bool,
    pub version: u64,
    pub submit_time: i64,
    /// The job's latest evaluations, oldest first (at most a few: see `alloc::evals`), so that
    /// its placement failures are still shown after an agent restart. Absent in files written
    /// before placement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evaluations: Vec<EvalRecord>,
}

// ---- evaluations ----

/// An evaluation's status, as Nomad spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalStatus {
    /// Done: everything it could place is placed (its failures say what it could not).
    Complete,
    /// Waiting for the node to change: it holds the allocations still to place.
    Blocked,
    /// Superseded (the job was registered again) or its job stopped.
    Canceled,
}

impl EvalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EvalStatus::Complete => "complete",
            EvalStatus::Blocked => "blocked",
            EvalStatus::Canceled => "canceled",
        }
    }
}

/// One placement of a job on this node (Nomad's `Evaluation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EvalRecord {
    #[serde(rename = "ID")]
    pub id: String,
    /// `job-register`, or `queued-allocs` for a blocked evaluation and its re-evaluation.
    pub triggered_by: String,
    pub status: EvalStatus,
    /// The groups it could not place (wholly or in part), in the job's group order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedPlacement>,
    /// The blocked evaluation that holds what this one could not place.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub blocked_eval: String,
    /// The evaluation that created this blocked one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_eval: String,
    /// Group → allocations still to place.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queued: BTreeMap<String, u32>,
    pub create_time: i64,
    pub modify_time: i64,
}

/// What a group could not place and why (`alloc::placement::PlacementFailure`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FailedPlacement {
    pub task_group: String,
    /// Allocations not placed.
    pub failed: u32,
    pub reason: PlacementReason,
}

/// Why this node took no more allocations of a group: one entry of Nomad's `AllocMetric`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Kind", content = "Detail")]
pub enum PlacementReason {
    /// The node's pool is not the job's: no node was evaluated.
    NodePool,
    /// The node's datacenter is not one of the job's: no node was evaluated.
    Datacenter,
    /// A filter excluded the node: a constraint (`${attr.kernel.name} = linux`), `missing
    /// drivers`, `distinct_hosts`, `distinct_property: ...`.
    Constraint(String),
    /// The node has too little of a resource (`memory`, `network: reserved port collision ...`).
    Dimension(String),
}

/// An allocation as the state file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocRecord {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub task_group: String,
    pub name: String,
    pub index: u32,
    pub desired_status: DesiredStatus,
    pub create_time: i64,
    pub modify_time: i64,
    /// The job this allocation runs, kept only when it is not the job's current version (the
    /// state file then holds each job once, not once per allocation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    /// The version of the job it runs (Nomad's `JobVersion`): the version it was placed with, or
    /// the one an in-place update gave it. Absent in files written before it existed: then the
    /// registered version for an allocation without its own job, 0 for one with its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_version: Option<u64>,
    pub task_states: BTreeMap<String, TaskState>,
    /// The host ports the allocation got when it was placed (Nomad's
    /// `AllocatedResources.Shared.Ports`). Absent in files written before ports existed, and
    /// not written when the group asks for none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<AllocatedPort>,
    /// The cores its tasks got when it was placed, task name → CPU IDs (Nomad's
    /// `AllocatedResources.Tasks.<task>.Cpu.ReservedCores`). Absent in files written before
    /// cores existed, and not written when no task asks for them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cores: BTreeMap<String, Vec<u32>>,
    /// Stopped again while its poststop tasks were to run or ran: they were killed, and a restart
    /// must not take them over or start them (docs/jobspec.md "Stopping"). Absent in files written
    /// before it existed, and not written when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub poststop_cut: bool,
    /// Its job was purged while the allocation's stop had its order to carry out: it runs on
    /// (its poststop tasks too) with its own copy of the job, and the collector forgets it once
    /// its tasks are all dead (docs/jobspec.md "Stopping"). Absent in files written before it
    /// existed, and not written when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub purged: bool,
}

// ---- task states ----

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskEvent {
    #[serde(rename = "Type")]
    pub event_type: String,
    /// Unix nanoseconds.
    pub time: i64,
    pub message: String,
    pub display_message: String,
    pub details: BTreeMap<String, String>,
    pub fails_task: bool,
    pub restart_reason: String,
    pub setup_error: String,
    pub driver_error: String,
    /// A `Driver` event's message (Nomad's `DriverMessage`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub driver_message: String,
    pub exit_code: i32,
    pub signal: i32,
    pub kill_reason: String,
    /// Nanoseconds.
    pub kill_timeout: i64,
    /// Nanoseconds.
    pub start_delay: i64,
    pub task_signal: String,
    pub task_signal_reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    #[default]
    Pending,
    Running,
    Dead,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Dead => "dead",
        }
    }
}

/// An allocation's client status, Nomad's rule over its tasks' states
/// ([`crate::alloc::client_status`]); spelled as Nomad spells it only at the API edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientStatus {
    Pending,
    Running,
    Complete,
    Failed,
}

impl ClientStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientStatus::Pending => "pending",
            ClientStatus::Running => "running",
            ClientStatus::Complete => "complete",
            ClientStatus::Failed => "failed",
        }
    }

    /// Pending or running: not ended.
    pub fn is_live(self) -> bool {
        matches!(self, ClientStatus::Pending | ClientStatus::Running)
    }
}

/// Compared with Nomad's spelling, as the API shows it.
impl PartialEq<&str> for ClientStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A job's status (Nomad's `pending`, `running`, `dead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Pending,
    Running,
    Dead,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Dead => "dead",
        }
    }
}

/// Compared with Nomad's spelling, as the API shows it.
impl PartialEq<&str> for JobStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One task's state as the API shows it and the state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskState {
    pub state: TaskStatus,
    pub failed: bool,
    /// Restarts actually performed.
    pub restarts: u64,
    /// RFC 3339, or absent when the task never restarted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_restart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub events: VecDeque<TaskEvent>,
    /// The running process, so that an agent that crashed can find and stop it (not Nomad's).
    #[serde(rename = "PID", skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), which tells
    /// a reused PID apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    /// What the driver needs to re-attach to the running task (state version 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handle: Option<TaskHandle>,
    /// When a restart delay in progress ends, in nanoseconds since the Unix epoch: the next agent
    /// waits until then, not a whole delay more (live-restore.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<i64>,
    /// The restart tracker's interval window (its start, in nanoseconds since the Unix epoch, and
    /// the failures counted in it), so an agent restart gives a crash loop no fresh attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_window_start: Option<i64>,
    #[serde(skip_serializing_if = "is_zero")]
    pub restart_window_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The format of [`TaskHandle::state`]; a driver refuses a handle of a version it does not know.
pub const HANDLE_VERSION: u32 = 1;

/// What a driver needs to find a task it started again, after the agent that started it is gone
/// (Nomad's `drivers.TaskHandle`). Plain data: `driver::handle` builds and reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskHandle {
    pub version: u32,
    /// The driver that started the task (`raw_exec`).
    pub driver: String,
    pub state: HandleState,
}

/// The driver-specific part of a handle. A new driver adds its variant (a container ID for
/// `docker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "Kind", rename_all_fields = "PascalCase")]
pub enum HandleState {
    /// A process on this node that leads the task's process group, told apart from a later
    /// process with the same PID by its start time in clock ticks since boot. What agents before
    /// the keeper recorded (state version 1): a child of the agent itself, which nothing can
    /// re-attach to once that agent is gone.
    Process { pid: i32, start_ticks: u64 },
    /// A task the data directory's keeper holds (`driver::process::keeper`): the keeper is its
    /// parent, so the PID is its own until the keeper is told to forget it.
    Kept { pid: i32, start_ticks: u64 },
    /// A container of the docker engine, by its ID (and name, `<task>-<alloc_id>`).
    Container { id: String, name: String },
}

impl TaskState {
    /// Appends an event, keeping the last [`MAX_EVENTS`]; an event that fails the task sets `Failed`.
    pub fn push(&mut self, event: TaskEvent) {
        if event.fails_task {
            self.failed = true;
        }
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }
}

// ---- CSI plugins ----

/// Which side of a plugin a registration is for. A `monolith` plugin registers both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PluginKind {
    #[serde(rename = "csi-node")]
    Node,
    #[serde(rename = "csi-controller")]
    Controller,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Node => "csi-node",
            PluginKind::Controller => "csi-controller",
        }
    }
}

/// One plugin allocation's registration as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PluginRecord {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    pub kind: PluginKind,
    #[serde(rename = "JobID", default)]
    pub job_id: String,
    #[serde(default)]
    pub task_group: String,
    #[serde(default)]
    pub task_name: String,
    /// The socket the supervisor probes, so a plugin still running after an agent restart is
    /// found again.
    pub socket_path: PathBuf,
    pub info: CsiInfo,
}

/// What the node shows for one plugin (`CSINodePlugins` / `CSIControllerPlugins` values), in
/// Nomad's `CSIInfo` shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CsiInfo {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    pub healthy: bool,
    pub health_description: String,
    /// RFC 3339 with nanoseconds, UTC.
    pub update_time: String,
    pub provider: String,
    pub provider_version: String,
    pub requires_controller_plugin: bool,
    pub requires_topologies: bool,
    pub controller_info: Option<ControllerInfo>,
    pub node_info: Option<NodeInfo>,
}

/// Nomad's `CSINodeInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeInfo {
    #[serde(rename = "ID")]
    pub id: String,
    pub max_volumes: i64,
    pub accessible_topology: Option<Topology>,
    pub requires_node_stage_volume: bool,
    pub supports_stats: bool,
    pub supports_expand: bool,
    pub supports_condition: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Topology {
    pub segments: BTreeMap<String, String>,
}

/// Nomad's `CSIControllerInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ControllerInfo {
    pub supports_read_only_attach: bool,
    pub supports_attach_detach: bool,
    pub supports_list_volumes: bool,
    pub supports_list_volumes_attached_nodes: bool,
    pub supports_create_delete: bool,
    pub supports_expand: bool,
    pub supports_create_delete_snapshot: bool,
    pub supports_list_snapshots: bool,
    pub supports_clone: bool,
    pub supports_get: bool,
    pub supports_get_capacity: bool,
    pub supports_condition: bool,
    pub supports_modify: bool,
}

// ---- host volumes ----

/// `pending` (a create or restore in progress), `ready`, `unavailable` (see the status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VolumeState {
    Pending,
    Ready,
    Unavailable,
}

impl VolumeState {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Pending => "pending",
            VolumeState::Ready => "ready",
            VolumeState::Unavailable => "unavailable",
        }
    }
}

/// A dynamic host volume as the state file keeps it: the original request (to re-run `create`
/// on restart) and what the plugin answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeRecord {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    pub namespace: String,
    /// Empty for a registered volume without a plugin.
    #[serde(rename = "PluginID", default)]
    pub plugin_id: String,
    #[serde(rename = "NodeID", default)]
    pub node_id: String,
    #[serde(default)]
    pub node_pool: String,
    #[serde(default)]
    pub requested_capacity_min_bytes: u64,
    #[serde(default)]
    pub requested_capacity_max_bytes: u64,
    #[serde(default)]
    pub requested_capabilities: Vec<Capability>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// Where the volume is: the plugin's answer, or the registered path.
    pub host_path: String,
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Registered (`volume register`): no plugin runs for it, only `host_path` is checked.
    #[serde(default)]
    pub registered: bool,
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
}

/// How a volume may be accessed (CSI access modes, as Nomad spells them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    SingleNodeReaderOnly,
    SingleNodeWriter,
    SingleNodeSingleWriter,
    SingleNodeMultiWriter,
}

impl AccessMode {
    pub const ALL: [AccessMode; 4] = [
        AccessMode::SingleNodeReaderOnly,
        AccessMode::SingleNodeWriter,
        AccessMode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::SingleNodeReaderOnly => "single-node-reader-only",
            AccessMode::SingleNodeWriter => "single-node-writer",
            AccessMode::SingleNodeSingleWriter => "single-node-single-writer",
            AccessMode::SingleNodeMultiWriter => "single-node-multi-writer",
        }
    }
}

impl std::str::FromStr for AccessMode {
    type Err = crate::jobspec::BadMode;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        crate::jobspec::parse_mode("access_mode", &Self::ALL, Self::as_str, raw)
    }
}

/// One `capability` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Capability {
    pub access_mode: AccessMode,
    pub attachment_mode: AttachmentMode,
}

// ---- CSI volumes ----

/// One `capability` block of a CSI volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CsiCapability {
    pub access_mode: CsiAccessMode,
    pub attachment_mode: AttachmentMode,
}

/// `topology_request { required {...} preferred {...} }` (Nomad's `CSITopologyRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CsiTopologyRequest {
    pub required: Vec<Topology>,
    pub preferred: Vec<Topology>,
}

/// Whether a claim reads or writes (Nomad's `CSIVolumeClaimMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimMode {
    Read,
    Write,
}

/// One allocation's claim on a CSI volume on this node (Nomad's `CSIVolumeClaim`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CsiClaimRecord {
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub task_group: String,
    pub mode: ClaimMode,
    pub access_mode: CsiAccessMode,
    pub attachment_mode: AttachmentMode,
    /// The plugin calls of the mount sequence that succeeded for this claim (absent in files
    /// written before they were recorded: nothing done).
    #[serde(default, skip_serializing_if = "CsiMountProgress::is_clear")]
    pub progress: CsiMountProgress,
    /// What `ControllerPublishVolume` answered, handed to the node's stage and publish calls.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub publish_context: BTreeMap<String, String>,
}

impl CsiClaimRecord {
    /// Whether `other` is the same claim (allocation, mode, access and attachment), whatever
    /// either has done of its mount sequence.
    pub fn same_claim(&self, other: &CsiClaimRecord) -> bool {
        self.alloc_id == other.alloc_id
            && self.job_id == other.job_id
            && self.task_group == other.task_group
            && self.mode == other.mode
            && self.access_mode == other.access_mode
            && self.attachment_mode == other.attachment_mode
    }
}

/// The calls of one claim's mount sequence that have succeeded and not been undone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CsiMountProgress {
    pub controller_published: bool,
    pub staged: bool,
    pub published: bool,
}

impl CsiMountProgress {
    /// Whether nothing is left to undo: the claim may be released.
    pub fn is_clear(&self) -> bool {
        *self == CsiMountProgress::default()
    }
}

/// A CSI volume as the state file keeps it (Nomad's `CSIVolume`, without what is derived from the
/// plugin's health): what was asked for, and what the plugin answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CsiVolumeRecord {
    /// The user's ID for the volume (not the plugin's): one path segment.
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    /// The plugin's ID for the volume: what `CreateVolume` answered, or what `volume register`
    /// gave. Every later call names the volume by it.
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    pub namespace: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub provider_version: String,
    /// Bytes; 0 when not asked for.
    #[serde(default)]
    pub requested_capacity_min: u64,
    #[serde(default)]
    pub requested_capacity_max: u64,
    /// Bytes, as the plugin answered; 0 when unknown.
    #[serde(default)]
    pub capacity: u64,
    pub requested_capabilities: Vec<CsiCapability>,
    #[serde(default)]
    pub mount_options: Option<CsiMountOptions>,
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// The plugin's `volume_context`, handed back to it on every publish.
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    /// Where the plugin says the volume is accessible from.
    #[serde(default)]
    pub topologies: Vec<Topology>,
    #[serde(default)]
    pub requested_topologies: Option<CsiTopologyRequest>,
    /// Recorded by `volume register` (the storage existed before), not made by `volume create`.
    #[serde(default)]
    pub registered: bool,
    /// The claims of this node's allocations, ordered by allocation ID.
    #[serde(default)]
    pub claims: Vec<CsiClaimRecord>,
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
}
