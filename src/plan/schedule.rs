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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Capacity;

    /// Node `i` of a fleet: `node-0007`, in `dc1`, with `raw_exec`, 1000 MHz, 200 MB, two
    /// cores, and `meta.rack` `even` or `odd`.
    fn node(i: usize) -> NodeView {
        let rack = if i % 2 == 0 { "even" } else { "odd" };
        NodeView {
            node: Node {
                id: format!("node-{i:04}"),
                name: format!("n{i}"),
                datacenter: "dc1".into(),
                node_pool: "default".into(),
                attributes: [("driver.raw_exec".to_string(), "1".to_string())].into(),
                meta: [("rack".to_string(), rack.to_string())].into(),
                capacity: Some(Capacity {
                    cpu_mhz: 1000,
                    memory_mb: 200,
                    disk_mb: 10_000,
                    cores: vec![0, 1],
                    mhz_per_core: 500,
                }),
                ..Node::default()
            },
            network: NetworkSettings {
                min_dynamic_port: 20000,
                max_dynamic_port: 20009,
                ..NetworkSettings::default()
            },
            ..NodeView::default()
        }
    }

    fn fleet(n: usize) -> Vec<NodeView> {
        (0..n).map(node).collect()
    }

    /// A job of one group `g` of `count`, each allocation asking `memory` MB; `extra` goes in
    /// the group, `task` in its task.
    fn job(count: u32, memory: u32, extra: &str, task: &str) -> Job {
        let hcl = format!(
            "job \"j\" {{\n group \"g\" {{\n  count = {count}\n{extra}\n  task \"t\" {{\n   \
             driver = \"raw_exec\"\n   config {{ command = \"true\" }}\n   resources {{\n    \
             cpu = 10\n    memory = {memory}\n   }}\n{task}\n  }}\n }}\n}}\n"
        );
        let mut job = crate::jobspec::hcl::parse_job(&hcl).unwrap().job;
        job.task_groups[0].ephemeral_disk.size_mb = 10;
        job
    }

    fn first(_: usize) -> usize {
        0
    }

    /// Node ID → how many allocations the plan gives it.
    fn per_node(plan: &Plan) -> BTreeMap<String, usize> {
        plan.nodes
            .iter()
            .map(|(id, a)| (id.clone(), a.len()))
            .collect()
    }

    fn indexes(plan: &Plan) -> BTreeSet<u32> {
        plan.nodes.values().flatten().map(|p| p.index).collect()
    }

    /// New allocations fill the lowest free indexes of their group, around the live ones.
    #[test]
    fn new_allocations_take_the_lowest_free_indexes() {
        let job = job(4, 10, "", "");
        let on = |index| AllocView {
            node_id: "node-0000".into(),
            group: "g".into(),
            index,
        };
        let plan = plan(&job, &[on(0), on(2)], &fleet(1), &mut first);
        let indexes: Vec<u32> = plan.nodes["node-0000"].iter().map(|a| a.index).collect();
        assert_eq!(indexes, [1, 3]);
    }

    /// 300 allocations over 100 nodes: three on each, every index once.
    #[test]
    fn allocations_spread_over_the_nodes() {
        let plan = plan(&job(300, 10, "", ""), &[], &fleet(100), &mut first);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        assert_eq!(per_node(&plan).len(), 100);
        assert!(per_node(&plan).values().all(|n| *n == 3));
        assert_eq!(indexes(&plan), (0..300).collect());
        // The same question, the same answer.
        assert_eq!(
            plan,
            super::plan(&job(300, 10, "", ""), &[], &fleet(100), &mut first)
        );
    }

    /// Where the job already runs counts first, then free memory: the emptier nodes are filled
    /// first, and ties go to the lowest ID.
    #[test]
    fn the_ranking_prefers_fewer_allocations_then_free_capacity_then_the_id() {
        let mut nodes = fleet(3);
        nodes[0].held.asks.memory_mb = 100;
        let staying = AllocView {
            node_id: "node-0001".into(),
            group: "g".into(),
            index: 0,
        };
        let plan = plan(&job(3, 10, "", ""), &[staying], &nodes, &mut first);
        // node-0001 already has one: node-0002 first (none, all its memory free), then
        // node-0000 (none, half its memory held).
        assert_eq!(
            per_node(&plan),
            BTreeMap::from([("node-0000".into(), 1), ("node-0002".into(), 1)])
        );
        let one = super::plan(&job(1, 10, "", ""), &[], &nodes, &mut first);
        assert_eq!(per_node(&one), BTreeMap::from([("node-0001".into(), 1)]));
    }

    /// 50 nodes of 200 MB fit two allocations of 80 MB each: of 120, 20 fail on memory.
    #[test]
    fn capacity_runs_out_across_the_fleet() {
        let plan = plan(&job(120, 80, "", ""), &[], &fleet(50), &mut first);
        assert_eq!(plan.placed(), 100);
        assert!(per_node(&plan).values().all(|n| *n == 2));
        assert_eq!(
            plan.failures,
            [PlacementFailure {
                group: "g".into(),
                failed: 20,
                reason: Reason::Dimension("memory".into()),
            }]
        );
    }

    /// A constraint only the even racks meet: 1000 nodes, 500 take the job, two each.
    #[test]
    fn constraints_exclude_nodes() {
        let only_even = "  constraint {\n   attribute = \"${meta.rack}\"\n   value = \"even\"\n  }";
        let plan = plan(&job(1000, 10, only_even, ""), &[], &fleet(1000), &mut first);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        assert_eq!(per_node(&plan).len(), 500);
        assert!(plan.nodes.keys().all(|id| {
            let i: usize = id["node-".len()..].parse().unwrap();
            i % 2 == 0
        }));
        let nowhere = "  constraint {\n   attribute = \"${meta.rack}\"\n   value = \"none\"\n  }";
        let plan = super::plan(&job(3, 10, nowhere, ""), &[], &fleet(1000), &mut first);
        assert_eq!(plan.placed(), 0);
        assert_eq!(
            plan.failures,
            [PlacementFailure {
                group: "g".into(),
                failed: 3,
                reason: Reason::Constraint("${meta.rack} = none".into()),
            }]
        );
    }

    /// A static port is held per node: the nodes that hold it take none, the others one each.
    #[test]
    fn static_ports_are_held_per_node() {
        let mut nodes = fleet(200);
        let held = AllocatedPort {
            label: "http".into(),
            value: 8080,
            to: 8080,
            host_ip: "127.0.0.1".into(),
        };
        for n in nodes.iter_mut().take(50) {
            n.held.ports.push(held.clone());
        }
        let port = "  network {\n   port \"http\" {\n    static = 8080\n   }\n  }";
        let plan = plan(&job(160, 10, port, ""), &[], &nodes, &mut first);
        assert_eq!(plan.placed(), 150);
        assert!(plan.nodes.keys().all(|id| id.as_str() >= "node-0050"));
        assert!(plan
            .nodes
            .values()
            .flatten()
            .all(|p| p.ports[0].value == 8080));
        assert_eq!(
            plan.failures,
            [PlacementFailure {
                group: "g".into(),
                failed: 10,
                reason: Reason::Dimension("network: reserved port collision http=8080".into()),
            }]
        );
    }

    /// Cores are given per node: two nodes of two cores take two allocations of a core each.
    #[test]
    fn cores_are_given_per_node() {
        let mut j = job(5, 10, "", "");
        j.task_groups[0].tasks[0].resources.cores = 1;
        let plan = plan(&j, &[], &fleet(2), &mut first);
        assert_eq!(plan.placed(), 4);
        for allocs in plan.nodes.values() {
            let given: BTreeSet<u32> = allocs.iter().map(|p| p.cores["t"][0]).collect();
            assert_eq!(given, BTreeSet::from([0, 1]));
        }
        assert_eq!(plan.failures[0].reason, Reason::Dimension("cores".into()));
        assert_eq!(plan.failures[0].failed, 1);
    }

    /// `distinct_hosts`: one allocation per node, whatever the count.
    #[test]
    fn distinct_hosts_places_one_per_node() {
        let hosts = "  constraint {\n   distinct_hosts = true\n  }";
        let plan = plan(&job(15, 10, hosts, ""), &[], &fleet(10), &mut first);
        assert_eq!(per_node(&plan).len(), 10);
        assert!(per_node(&plan).values().all(|n| *n == 1));
        assert_eq!(
            plan.failures,
            [PlacementFailure {
                group: "g".into(),
                failed: 5,
                reason: Reason::Constraint("distinct_hosts".into()),
            }]
        );
    }

    /// A host volume present on some nodes: the group goes only there; present nowhere, it
    /// goes anywhere and waits for it (as on one node).
    #[test]
    fn a_volume_present_on_some_nodes_draws_the_group_there() {
        let volume = "  volume \"data\" {\n   type = \"host\"\n   source = \"shared\"\n  }";
        let mount = "   volume_mount {\n    volume = \"data\"\n    destination = \"data\"\n   }";
        let j = job(20, 10, volume, mount);
        let mut nodes = fleet(100);
        for n in nodes.iter_mut().skip(90) {
            n.volumes
                .insert("shared".into(), HostVolumeView { read_only: false });
        }
        // A read-only copy does not do for a read-write mount.
        nodes[0]
            .volumes
            .insert("shared".into(), HostVolumeView { read_only: true });
        let plan = plan(&j, &[], &nodes, &mut first);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        assert_eq!(per_node(&plan).len(), 10);
        assert!(plan.nodes.keys().all(|id| id.as_str() >= "node-0090"));
        let anywhere = super::plan(&j, &[], &fleet(100), &mut first);
        assert_eq!(per_node(&anywhere).len(), 20);
    }

    /// 5000 nodes, 5000 allocations: one each, in one round.
    #[test]
    fn five_thousand_nodes() {
        let plan = plan(&job(5000, 10, "", ""), &[], &fleet(5000), &mut first);
        assert_eq!(per_node(&plan).len(), 5000);
        assert_eq!(indexes(&plan).len(), 5000);
        assert!(plan.failures.is_empty());
    }

    /// A node refuses what it cannot take and the next round gives it to another: the first
    /// nodes' ports run out (ten dynamic ports each), the rest take the remainder.
    #[test]
    fn what_one_node_refuses_goes_to_another() {
        let mut nodes = fleet(3);
        for n in nodes.iter_mut().take(2) {
            n.network.max_dynamic_port = n.network.min_dynamic_port + 1;
        }
        let dynamic = "  network {\n   port \"http\" {}\n  }";
        let plan = plan(&job(9, 10, dynamic, ""), &[], &nodes, &mut first);
        assert!(plan.failures.is_empty(), "{:?}", plan.failures);
        assert_eq!(
            per_node(&plan),
            BTreeMap::from([
                ("node-0000".into(), 2),
                ("node-0001".into(), 2),
                ("node-0002".into(), 5)
            ])
        );
        assert!(
            super::plan(&job(1, 10, "", ""), &[], &[], &mut first).failures[0].reason
                == Reason::NodePool
        );
    }
}
