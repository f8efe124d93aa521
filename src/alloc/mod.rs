//! Jobs and allocations: registering a job creates `count` allocations per group on this node;
//! each allocation runs its tasks, one [`runner`](crate::task::runner) thread per task.
//!
//! - `model`: an [`Allocation`] and its live state (desired status, task states, runners);
//! - `manager`: the registry of jobs and allocations, and what the API asks of it (register and
//!   stop jobs; stop, restart and signal allocations; read jobs and allocations);
//! - `gate`: starting an allocation's tasks, at once or from its volume gate thread;
//! - `restore`: picking up the state file at start, after stopping processes a crashed agent
//!   left behind;
//! - `gc`: the garbage collector, which destroys terminal allocations (their registry entry,
//!   state record and directory) when the node holds too many or its disk fills up;
//! - `lifecycle`: the order of an allocation's tasks (prestart, main, poststart, poststop,
//!   sidecars, the leader), planned from their states and carried out by its gate thread;
//! - `stop`: stopping an allocation: its tasks killed, then its poststop tasks run;
//! - `limit`: the per-node allocation limit a registration is checked against;
//! - `placement`: where the manager reads its node ([`placement::NodeSource`]), and the
//!   planner's placement types under their old names;
//! - `apply`: the planner (`crate::plan`) asked for a registration's or a re-evaluation's plan
//!   over this node, the registry as its node view (what live allocations hold: capacity,
//!   ports, cores), and the allocations the plan puts here made;
//! - `evals`: placing what a blocked evaluation holds once the node fits it
//!   ([`AllocManager::reevaluate`]), and Nomad's in-place update;
//! - `plan`: a registration's plan, computed and not committed (`job plan`), and the job modify
//!   index `job run -check-index` checks;
//! - `children`: child jobs of periodic and parameterized jobs (launches, dispatches);
//! - `periodic`: the `periodic` thread, which launches periodic jobs' children on schedule.
//!
//! The module returns domain values (shared [`Allocation`]s, [`JobSummary`], [`AllocError`]);
//! the API (`api::jobs`, `api::allocations`) encodes them as Nomad's JSON and picks the status
//! codes.
//!
//! Protocol: the API calls [`AllocManager`]; a write is planned, recorded in the state file, and
//! only then made in the registry (under its one lock), whole or not at all; then task runners
//! are started or signalled. An
//! allocation whose host volumes are missing stays `pending` with a reason and gets one gate
//! thread that waits (select over volume changes, its stop channel, and agent shutdown) and starts
//! the tasks once every volume is ready. The allocation owns the gate's [`Worker`]: stopping the
//! allocation stops and joins it. On agent shutdown every runner stops its task and every gate
//! returns; the agent then calls [`AllocManager::join_all`], which joins them all.
//!
//! Lock order: the registry (`manager`) → an allocation's inner state → its task states, in task
//! name order (`model`). The volume manager's lock may be taken under any of them (lookups,
//! releases); nothing here is locked while the state file is written, because writing it takes
//! the registry lock ([`AllocManager`] is a [`Snapshot`](crate::state::Snapshot)).
//!
//! [`Worker`]: crate::thread::Worker

mod apply;
mod children;
mod evals;
mod gc;
mod lifecycle;
mod limit;
mod manager;
mod model;
pub mod periodic;
pub mod placement;
mod plan;
mod restore;
mod runner;
#[cfg(test)]
pub(crate) mod testing;

pub use crate::plan::evals::{MAX_EVALS, TRIGGER_QUEUED, TRIGGER_REGISTER};
pub use crate::plan::ports::{NetworkSettings, PortIndex, PortsUnavailable};
pub use crate::plan::task_cpu_mhz;
pub use children::{DispatchRequest, Launched};
pub use gc::{gc_reason, Collector, DiskUsage, Over, Reason};
pub use manager::{AllocManager, Engine, JobSummary, Registered};
pub use model::{client_status, AllocStatus, Allocation, LockedTasks};
pub use plan::{modify_index, GroupUpdates, Plan};

// `super::capacity::task_cpu_mhz` in `gate`: the capacity rules live in the planner now.
use crate::plan::capacity;
use crate::state::StateError;

/// Why an allocation manager request failed. The API maps each to an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("job not found")]
    JobNotFound,
    #[error("alloc not found")]
    AllocNotFound,
    #[error("eval not found")]
    EvalNotFound,
    /// A restart or signal named a task the allocation does not have.
    #[error("task {0:?} not found in allocation")]
    UnknownTask(String),
    #[error("unknown signal {0:?}")]
    UnknownSignal(String),
    /// An API write could not be recorded in the state file, so none of it was made: no task
    /// was stopped or started, and the same request can be sent again.
    #[error("{action}: {source}; nothing was changed")]
    NotSaved { action: String, source: StateError },
    /// A garbage collection named an allocation that is not terminal; the reason says what
    /// still runs. The first words are Nomad's.
    #[error("No such allocation on client, or allocation not eligible for GC: alloc {id} is not terminal: {reason}")]
    NotCollectable { id: String, reason: String },
    /// A registration would put more allocations on this node than `client { max_allocs }`.
    #[error("{0}")]
    TooManyAllocs(String),
    /// A child job could not be made of its parent (a launch or dispatch refused): Nomad's
    /// message.
    #[error("{0}")]
    ChildRefused(String),
    /// A registration sent with `EnforceIndex` found another job modify index (`plan`): Nomad's
    /// message.
    #[error("{0}")]
    IndexConflict(String),
    /// The state file could not be written.
    #[error(transparent)]
    State(#[from] StateError),
}
