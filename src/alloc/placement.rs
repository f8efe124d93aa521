//! Where the allocation manager reads its node, for the planner (`crate::plan`), and the
//! planner's placement types under the names the rest of the agent has used for them
//! (`alloc::placement::{Node, PlacementFailure, Reason}`).

pub use crate::plan::feasible::{glob, meets, place, resolve, Node, Placement, PlacementFailure};
pub use crate::plan::Reason;

/// Where the allocation manager reads the node: the agent's configuration and its drivers' and
/// volumes' fingerprints, now. Called with the registry locked: it may take only leaf locks.
pub trait NodeSource: Send + Sync {
    fn node(&self) -> Node;
}
