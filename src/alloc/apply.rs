//! The allocation manager as the planner's client: the registry seen as this node's view
//! ([`Registry::node_view`]: what its live allocations hold), the one plan a registration and a
//! re-evaluation both ask for ([`AllocManager::plan_here`]), and the allocations the plan puts
//! on this node made ([`Here::allocations`]).
//!
//! All of it runs under the registry lock, in the plan of the write it belongs to (`manager`'s
//! commit), so two registrations cannot both be given the last room, port or core.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::manager::{AllocManager, Registry};
use super::model::Allocation;
use crate::jobspec::Job;
use crate::plan::{self, AllocView, Asks, Held, HostVolumeView, Node, NodeView, Plan};

impl Registry {
    /// This node as the planner sees it: `node`, the host volumes `job` mounts as the volume
    /// manager has them (`volume`: name → read-only, `None` when not ready), the network, and
    /// what the live allocations hold but for those in `stopping` (the plan stops them).
    pub(super) fn node_view(
        &self,
        node: Node,
        job: &Job,
        volume: impl Fn(&str) -> Option<bool>,
        network: &plan::NetworkSettings,
        stopping: &[Arc<Allocation>],
    ) -> NodeView {
        let stopping: HashSet<&str> = stopping.iter().map(|a| a.id.as_str()).collect();
        let mhz_per_core = node.capacity.as_ref().map_or(0, |c| c.mhz_per_core);
        let mut held = Held::default();
        for alloc in self.allocs.values() {
            // Live: to run and a task not dead (`Allocation::holds_its_resources`).
            if stopping.contains(alloc.id.as_str()) || !alloc.holds_its_resources() {
                continue;
            }
            if let Some(g) = alloc.job.task_groups.iter().find(|g| g.name == alloc.group) {
                held.asks = held.asks.plus(Asks::of_group(g, mhz_per_core));
            }
            held.ports.extend(alloc.ports.iter().cloned());
            held.cores.extend(alloc.cores.values().flatten().copied());
        }
        let volumes = job
            .task_groups
            .iter()
            .flat_map(|g| g.volumes.values())
            .filter(|r| !r.is_csi())
            .filter_map(|r| {
                let read_only = volume(&r.source)?;
                Some((r.source.clone(), HostVolumeView { read_only }))
            })
            .collect();
        NodeView {
            node,
            volumes,
            network: network.clone(),
            held,
        }
    }
}

/// A plan over this node: the planner's answer and this node's ID in it (nothing placed, for a
/// template job).
#[derive(Default)]
pub(super) struct Here {
    pub(super) plan: Plan,
    pub(super) node_id: String,
}

impl Here {
    /// How many new allocations the plan puts here.
    pub(super) fn placed(&self) -> usize {
        self.plan.nodes.get(&self.node_id).map_or(0, Vec::len)
    }
}

impl AllocManager {
    /// The plan of `job` over this node, from the registry as it is: `existing` are the job's
    /// allocations that stay (none for a registration, which replaces them all), `stopping`
    /// those the write stops, whose room is free.
    pub(super) fn plan_here(
        &self,
        reg: &Registry,
        job: &Job,
        existing: &[&Arc<Allocation>],
        stopping: &[Arc<Allocation>],
    ) -> Here {
        let node = self.engine.node.node();
        let node_id = node.id.clone();
        let volumes = self.engine.volumes.as_ref();
        let volume = |name: &str| volumes.lookup(name).map(|v| v.read_only);
        let view = reg.node_view(node, job, volume, &self.engine.network, stopping);
        let existing: Vec<AllocView> = existing
            .iter()
            .map(|a| AllocView {
                node_id: node_id.clone(),
                group: a.group.clone(),
                index: a.index,
            })
            .collect();
        let plan = plan::plan(job, &existing, &[view], &mut |n| fastrand::usize(..n));
        Here { plan, node_id }
    }
}

impl Here {
    /// The allocations the plan puts on this node, of `job` at `version`, created at `now`, in
    /// the job's group order (place → grant → allocations, once for a registration and a
    /// re-evaluation alike).
    pub(super) fn allocations(
        &mut self,
        job: &Arc<Job>,
        version: u64,
        now: i64,
    ) -> Vec<Arc<Allocation>> {
        let groups: BTreeMap<&str, &crate::jobspec::TaskGroup> = job
            .task_groups
            .iter()
            .map(|g| (g.name.as_str(), g))
            .collect();
        self.plan
            .take(&self.node_id)
            .into_iter()
            .filter_map(|p| {
                let group = groups.get(p.group.as_str())?;
                let alloc = Allocation::new(job, version, group, p.index, p.ports, p.cores, now);
                Some(Arc::new(alloc))
            })
            .collect()
    }
}
