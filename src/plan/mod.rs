//! The scheduler's plan: where a job's allocations go, computed from values and nothing else.
//! It places; it runs nothing (`scripts/check-layout.py` keeps it from importing `alloc`,
//! `task`, `driver`, `api`, `agent` or `daemon`). The allocation manager (`alloc`) asks it for
//! the plan of a registration or a re-evaluation over the one node it runs on, and applies what
//! the plan puts there; a fleet's scheduler will ask it over many nodes.
//!
//! - `schedule`: the entry point, [`plan`] over [`NodeView`]s, and its answer, a [`Plan`];
//! - `feasible`: which of a job's allocations one node can take (node pool, datacenters,
//!   constraints, drivers, `distinct_*`) and Nomad's words for the rest ([`PlacementFailure`]);
//! - `volumes`: host volumes as a feasibility rule (and the API's refusal of a read-write mount
//!   of a read-only volume);
//! - `capacity`: what allocations ask against a node's unreserved capacity (`Dimension ...
//!   exhausted`);
//! - `ports`: a node's host ports, taken and given ([`PortIndex`]);
//! - `cores`: a node's CPU cores for `resources { cores }`, held and given ([`CoreIndex`]);
//! - `evals`: the evaluations kept with a job's record (registered, blocked, re-evaluated);
//! - `regexps`: the compiled patterns of `regexp` constraints.
//!
//! No thread of its own; one leaf lock (`regexps`' cache). Time and randomness are passed in,
//! but for a blocked evaluation's ID.

pub mod capacity;
pub mod cores;
pub mod evals;
pub mod feasible;
pub mod ports;
mod regexps;
pub mod schedule;
pub mod volumes;

pub use capacity::{task_cpu_mhz, Asks};
pub use cores::{CoreIndex, TaskCores};
pub use feasible::{Node, Placement, PlacementFailure, Reason};
pub use ports::{NetworkSettings, PortIndex, PortsUnavailable};
pub use schedule::{plan, AllocView, Held, NodeView, Placed, Plan};
pub use volumes::HostVolumeView;

/// Why the plan refuses a job before placing anything. The API answers it as a bad request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A task mounts a read-only host volume read-write (`volumes::check_writable`).
    #[error("task {task:?} mounts volume {volume:?} read-write, but host volume {host_volume:?} is read-only")]
    ReadOnlyVolume {
        task: String,
        volume: String,
        host_volume: String,
    },
}
