//! The planner's entry point, [`plan`]: where a job's allocations go over many nodes, and which
//! groups could not be placed and why. Pure: the nodes are views ([`NodeView`]: the node, its
//! host volumes, its network and what its live allocations hold), the job's allocations that
//! stay are [`AllocView`]s, the random pick of dynamic ports is passed in.
//!
//! How it places, in rounds:
//!
//! 1. per group, the nodes that may take it at all: [`node_filter`] passes, and the node has the
//!    group's host volumes (`super::volumes::fits`) when any of those nodes does;
//! 2. each allocation still wanted goes to the best-ranked of them: the fewest allocations of
//!    the job (spread), then the most free memory and CPU, then the lowest node ID; the ranks
//!    count what this round already gave each node;
//! 3. each node given something runs the one-node pipeline on its share, in Nomad's order:
//!    [`place_asked`] (constraints, `distinct_*`), capacity ([`fit`]), ports
//!    ([`assign_ports`]), cores ([`assign_cores`]). What it refuses of a group, it is not asked
//!    for again; the next round offers it to the other nodes.
//!
//! With one node this is the one-node pipeline run once on what the job still needs, so a node
//! of its own gets the answers it always got: the same allocations, ports and cores, the same
//! failures in the same order (first those of the feasibility checks, then of capacity, of
//! ports and of cores, each in the job's group order, as the pipeline records them). A group
//! refused everywhere is named with the first reason a node gave (the best-ranked node's; the
//! lowest node ID's when no node may take it), and counts what is still unplaced.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashSet};

use super::capacity::{fit, Asks};
use super::cores::{assign_cores, CoreIndex, TaskCores};
use super::feasible::{node_filter, place_asked, Node, PlacementFailure, Reason};
use super::ports::{assign_ports, NetworkSettings, PortIndex};
use super::volumes::{self, HostVolumeView};
use crate::jobspec::network::AllocatedPort;
use crate::jobspec::Job;

/// A node as the planner sees it, at one instant.
#[derive(Debug, Clone, Default)]
pub struct NodeView {
    /// Its ID, name, attributes, capacity (what `NodeSource::node()` reads).
    pub node: Node,
    /// Its host volumes by name (at least those the job mounts).
    pub volumes: BTreeMap<String, HostVolumeView>,
    /// The ports its allocations may get.
    pub network: NetworkSettings,
    /// What its live allocations hold, but for those the plan replaces.
    pub held: Held,
}

/// What a node's live allocations hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// What they ask of the node's capacity.
    pub asks: Asks,
    /// Their host ports.
    pub ports: Vec<AllocatedPort>,
    /// Their cores.
    pub cores: Vec<u32>,
}

/// An allocation of the job being planned that stays: it counts against its group's `count`,
/// for the `distinct_*` limits of its node, and keeps its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocView {
    pub node_id: String,
    pub group: String,
    pub index: u32,
}

/// One new allocation of a plan: its group, its index in the group, and what it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    pub group: String,
    pub index: u32,
    pub ports: Vec<AllocatedPort>,
    pub cores: TaskCores,
}

/// Where a job's new allocations go, and what could not be placed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Node ID → its new allocations, in the job's group order and index order; only nodes
    /// that get some.
    pub nodes: BTreeMap<String, Vec<Placed>>,
    /// The groups not wholly placed, with Nomad's reason (see the module doc for the order).
    pub failures: Vec<PlacementFailure>,
}

impl Plan {
    /// How many new allocations the plan places, on every node.
    pub fn placed(&self) -> usize {
        self.nodes.values().map(Vec::len).sum()
    }

    /// The new allocations of node `id`, taken out of the plan.
    pub fn take(&mut self, id: &str) -> Vec<Placed> {
        self.nodes.remove(id).unwrap_or_default()
    }
}

/// The phases of the one-node pipeline, in the order a node's failures are recorded.
const FEASIBILITY: u8 = 0;
const CAPACITY: u8 = 1;
const PORTS: u8 = 2;
const CORES: u8 = 3;

/// What the plan has made of one node so far.
struct NodeState<'a> {
    view: &'a NodeView,
    /// Group → the job's allocations on the node (staying, or placed by this plan).
    have: BTreeMap<String, u32>,
    used: Asks,
    ports: PortIndex,
    cores: CoreIndex,
    /// Groups (by index) the node refused some of: not asked again.
    refused: HashSet<usize>,
    /// What this plan placed here, in the order placed: (group index, ports, cores).
    placed: Vec<(usize, Vec<AllocatedPort>, TaskCores)>,
}

/// What one run of the pipeline on a node answered.
struct Run {
    /// Group index → placed.
    placed: BTreeMap<usize, u32>,
    /// (group index, phase, reason) of each group refused, in the order recorded.
    refused: Vec<(usize, u8, Reason)>,
}

impl<'a> NodeState<'a> {
    fn new(view: &'a NodeView, existing: &[AllocView]) -> NodeState<'a> {
        let mut have = BTreeMap::new();
        for a in existing.iter().filter(|a| a.node_id == view.node.id) {
            *have.entry(a.group.clone()).or_default() += 1;
        }
        let mut ports = PortIndex::new(&view.network);
        ports.add(&view.held.ports);
        let unreserved = view
            .node
            .capacity
            .as_ref()
            .map_or(&[][..], |c| &c.cores[..]);
        let mut cores = CoreIndex::new(unreserved);
        cores.hold_cores(view.held.cores.iter().copied());
        NodeState {
            view,
            have,
            used: view.held.asks,
            ports,
            cores,
            refused: HashSet::new(),
            placed: Vec::new(),
        }
    }

    fn job_allocs(&self) -> u32 {
        self.have.values().sum()
    }

    /// The node's free memory and CPU (all of it when it has no capacity to check).
    fn free(&self) -> (u64, u64) {
        match &self.view.node.capacity {
            Some(c) => (
                c.memory_mb.saturating_sub(self.used.memory_mb),
                c.cpu_mhz.saturating_sub(self.used.cpu_mhz),
            ),
            None => (u64::MAX, u64::MAX),
        }
    }

    /// The one-node pipeline on `asked` (group name → allocations), on top of what the node
    /// holds and what the plan gave it before; what it places is kept.
    fn run(
        &mut self,
        job: &Job,
        asked: &BTreeMap<String, u32>,
        pick: &mut dyn FnMut(usize) -> usize,
    ) -> Run {
        let node = &self.view.node;
        let mut placement = place_asked(job, node, &self.have, asked);
        let after_feasibility = placement.failures.len();
        if let Some(cap) = &node.capacity {
            fit(job, cap, self.used, &mut placement);
        }
        let after_capacity = placement.failures.len();
        let mut ports = self.ports.clone();
        let mut given_ports = assign_ports(&mut ports, job, &mut placement, pick);
        let after_ports = placement.failures.len();
        let mut cores = self.cores.clone();
        let mut given_cores = assign_cores(&mut cores, job, &mut placement);
        let group_index = |name: &str| job.task_groups.iter().position(|g| g.name == name);
        let refused = placement
            .failures
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let phase = if i < after_feasibility {
                    FEASIBILITY
                } else if i < after_capacity {
                    CAPACITY
                } else if i < after_ports {
                    PORTS
                } else {
                    CORES
                };
                Some((group_index(&f.group)?, phase, f.reason.clone()))
            })
            .collect();
        let mhz_per_core = node.capacity.as_ref().map_or(0, |c| c.mhz_per_core);
        let mut placed = BTreeMap::new();
        for (gi, group) in job.task_groups.iter().enumerate() {
            let n = placement.place.get(&group.name).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            placed.insert(gi, n);
            let mut ports = given_ports
                .remove(&group.name)
                .unwrap_or_default()
                .into_iter();
            let mut cores = given_cores
                .remove(&group.name)
                .unwrap_or_default()
                .into_iter();
            let ask = Asks::of_group(group, mhz_per_core);
            for _ in 0..n {
                let (p, c) = (
                    ports.next().unwrap_or_default(),
                    cores.next().unwrap_or_default(),
                );
                self.ports.add(&p);
                self.cores.hold(&c);
                self.used = self.used.plus(ask);
                self.placed.push((gi, p, c));
            }
            *self.have.entry(group.name.clone()).or_default() += n;
        }
        Run { placed, refused }
    }
}

/// Where `job`'s allocations go over `nodes` (see the module doc): what the job still needs
/// beyond `existing`, placed. `pick(n)` is a random number below `n`, for dynamic ports.
pub fn plan(
    job: &Job,
    existing: &[AllocView],
    nodes: &[NodeView],
    pick: &mut dyn FnMut(usize) -> usize,
) -> Plan {
    let mut sorted: Vec<&NodeView> = nodes.iter().collect();
    sorted.sort_by(|a, b| a.node.id.cmp(&b.node.id));
    let mut states: Vec<NodeState> = sorted.iter().map(|v| NodeState::new(v, existing)).collect();
    let groups = &job.task_groups;
    let mut remaining: Vec<u32> = groups
        .iter()
        .map(|g| {
            let have = existing.iter().filter(|a| a.group == g.name).count();
            g.count
                .saturating_sub(u32::try_from(have).unwrap_or(u32::MAX))
        })
        .collect();
    // Group index → (phase, reason) of the first refusal by a node that was asked; and the
    // first node filter's reason, for a group no node may take.
    let mut reasons: BTreeMap<usize, (u8, Reason)> = BTreeMap::new();
    let mut filtered: BTreeMap<usize, Reason> = BTreeMap::new();
    let eligible: Vec<Vec<usize>> = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let mut pass = Vec::new();
            for (s, state) in states.iter().enumerate() {
                match node_filter(job, g, &state.view.node) {
                    None => pass.push(s),
                    Some(why) => {
                        filtered.entry(gi).or_insert(why);
                    }
                }
            }
            let with: Vec<usize> = pass
                .iter()
                .copied()
                .filter(|s| volumes::fits(g, &states[*s].view.volumes))
                .collect();
            if with.is_empty() {
                pass
            } else {
                with
            }
        })
        .collect();
    loop {
        let asked = spread(job, &states, &eligible, &remaining);
        if asked.is_empty() {
            break;
        }
        for (s, asked) in asked {
            let run = states[s].run(job, &asked, pick);
            for (gi, n) in run.placed {
                remaining[gi] -= n;
            }
            for (gi, phase, why) in run.refused {
                states[s].refused.insert(gi);
                reasons.entry(gi).or_insert((phase, why));
            }
        }
    }
    let mut failures: Vec<(u8, usize, PlacementFailure)> = remaining
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(gi, n)| {
            let (phase, reason) = match (reasons.get(&gi), filtered.get(&gi)) {
                (Some(r), _) => r.clone(),
                (None, Some(why)) => (FEASIBILITY, why.clone()),
                // No node at all: none was eligible for evaluation.
                (None, None) => (FEASIBILITY, Reason::NodePool),
            };
            let failure = PlacementFailure {
                group: groups[gi].name.clone(),
                failed: *n,
                reason,
            };
            (phase, gi, failure)
        })
        .collect();
    failures.sort_by_key(|(phase, gi, _)| (*phase, *gi));
    Plan {
        nodes: number(job, existing, &states),
        failures: failures.into_iter().map(|(_, _, f)| f).collect(),
    }
}

/// This round's shares: node (by position) → group name → allocations, each allocation still
/// wanted given to the best-ranked node that may take its group and has not refused it.
fn spread(
    job: &Job,
    states: &[NodeState],
    eligible: &[Vec<usize>],
    remaining: &[u32],
) -> BTreeMap<usize, BTreeMap<String, u32>> {
    let mut count: Vec<u32> = states.iter().map(NodeState::job_allocs).collect();
    let mut free: Vec<(u64, u64)> = states.iter().map(NodeState::free).collect();
    let mut asked: BTreeMap<usize, BTreeMap<String, u32>> = BTreeMap::new();
    for (gi, group) in job.task_groups.iter().enumerate() {
        if remaining[gi] == 0 {
            continue;
        }
        let rank = |s: usize, count: &[u32], free: &[(u64, u64)]| {
            Reverse((count[s], Reverse(free[s].0), Reverse(free[s].1), s))
        };
        let mut heap: BinaryHeap<_> = eligible[gi]
            .iter()
            .copied()
            .filter(|s| !states[*s].refused.contains(&gi))
            .map(|s| rank(s, &count, &free))
            .collect();
        for _ in 0..remaining[gi] {
            let Some(Reverse((_, _, _, s))) = heap.pop() else {
                break;
            };
            *asked
                .entry(s)
                .or_default()
                .entry(group.name.clone())
                .or_default() += 1;
            let mhz = states[s]
                .view
                .node
                .capacity
                .as_ref()
                .map_or(0, |c| c.mhz_per_core);
            let ask = Asks::of_group(group, mhz);
            count[s] += 1;
            free[s] = (
                free[s].0.saturating_sub(ask.memory_mb),
                free[s].1.saturating_sub(ask.cpu_mhz),
            );
            heap.push(rank(s, &count, &free));
        }
    }
    asked
}

/// The plan's allocations per node, each given the lowest index of its group that no staying
/// allocation and no earlier one of the plan holds (as Nomad names them), group by group in the
/// job's order, then node by node in ID order.
fn number(
    job: &Job,
    existing: &[AllocView],
    states: &[NodeState],
) -> BTreeMap<String, Vec<Placed>> {
    let mut taken: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for a in existing {
        taken.entry(a.group.as_str()).or_default().insert(a.index);
    }
    let mut out: BTreeMap<String, Vec<Placed>> = BTreeMap::new();
    for (gi, group) in job.task_groups.iter().enumerate() {
        let used = taken.entry(group.name.as_str()).or_default();
        for state in states {
            for (_, ports, cores) in state.placed.iter().filter(|a| a.0 == gi) {
                let index = (0..)
                    .find(|i| !used.contains(i))
                    .expect("u32 indexes are not all taken");
                used.insert(index);
                out.entry(state.view.node.id.clone())
                    .or_default()
                    .push(Placed {
                        group: group.name.clone(),
                        index,
                        ports: ports.clone(),
                        cores: cores.clone(),
                    });
            }
        }
    }
    out
}
