//! The CSI plugins registered on this node, and what the state file keeps under `CSIPlugins`.
//! Reads answer domain views ([`NodePlugins`], [`PluginSummary`], [`PluginDetail`]) that
//! `api::plugins` encodes as Nomad's JSON for `GET /v1/node/:id` (`CSINodePlugins`,
//! `CSIControllerPlugins`), `GET /v1/plugins?type=csi` and `GET /v1/plugin/csi/:id`.
//!
//! Each plugin task's supervisor registers its allocation once the plugin is healthy (one entry per
//! side: node, controller, or both for a monolith), updates its health while it watches, and
//! deregisters when the task stops for good. Entries restored from the state file after an agent
//! restart are marked *restored* and stay, as they were, until their task's supervisor registers
//! again (confirms) or the task stops; [`PluginRegistry::retain_allocs`] drops those of allocations
//! the agent no longer has.
//!
//! Every change asks the attached [`StateStore`] to save soon (never while the lock is held).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};

use super::{CsiInfo, PluginKind, PluginRecord};
use crate::state::{Snapshot, StateFile, StateStore};

#[derive(Debug, Clone)]
struct Entry {
    record: PluginRecord,
    /// Loaded from the state file and not yet confirmed by a supervisor of this agent.
    restored: bool,
}

/// plugin id → (alloc id, side) → entry.
type Plugins = BTreeMap<String, BTreeMap<(String, PluginKind), Entry>>;

pub struct PluginRegistry {
    node_id: String,
    /// Guards every registration. Each method takes it once, copies or changes what it needs and
    /// releases it before telling the state store (changes go through `update`).
    plugins: Mutex<Plugins>,
    /// Told after every change; set once by [`PluginRegistry::attach_state`]. Weak because the
    /// store holds the registry as a snapshot source.
    state: OnceLock<Weak<StateStore>>,
}

impl PluginRegistry {
    /// An empty registry for the node `node_id` (the key of the plugin view's `Nodes` and
    /// `Controllers` maps).
    pub fn new(node_id: impl Into<String>) -> PluginRegistry {
        PluginRegistry {
            node_id: node_id.into(),
            plugins: Mutex::new(BTreeMap::new()),
            state: OnceLock::new(),
        }
    }

    /// Makes the registry a part of the state file and saves after every change.
    pub fn attach_state(self: &Arc<Self>, store: &Arc<StateStore>) {
        let _ = self.state.set(Arc::downgrade(store));
        store.register(self.clone() as Arc<dyn Snapshot>);
    }

    /// Runs `f` on the registrations under the lock; when it reports a change, asks the state
    /// store to save, after the lock is released. Returns what `f` returned.
    fn update(&self, f: impl FnOnce(&mut Plugins) -> bool) -> bool {
        let changed = {
            let mut plugins = self.plugins.lock();
            f(&mut plugins)
        };
        if changed {
            if let Some(store) = self.state.get().and_then(Weak::upgrade) {
                store.save_soon();
            }
        }
        changed
    }

    /// Loads the registrations the state file kept, marked restored.
    pub fn restore(&self, records: Vec<PluginRecord>) {
        self.update(|plugins| {
            for record in records {
                plugins.entry(record.plugin_id.clone()).or_default().insert(
                    (record.alloc_id.clone(), record.kind),
                    Entry {
                        record,
                        restored: true,
                    },
                );
            }
            true
        });
    }

    /// Registers one plugin allocation: `records` (one per side) replace whatever that allocation
    /// had registered for the plugin, restored or not.
    pub fn register(&self, plugin_id: &str, alloc_id: &str, records: Vec<PluginRecord>) {
        self.update(|plugins| {
            let allocs = plugins.entry(plugin_id.to_string()).or_default();
            allocs.retain(|(alloc, _), _| alloc != alloc_id);
            for record in records {
                debug_assert!(record.plugin_id == plugin_id && record.alloc_id == alloc_id);
                allocs.insert(
                    (record.alloc_id.clone(), record.kind),
                    Entry {
                        record,
                        restored: false,
                    },
                );
            }
            if allocs.is_empty() {
                plugins.remove(plugin_id);
            }
            true
        });
    }

    /// Whether the allocation has a registration of the plugin that is healthy (restored from the
    /// state file or confirmed).
    pub fn is_healthy(&self, plugin_id: &str, alloc_id: &str) -> bool {
        self.plugins.lock().get(plugin_id).is_some_and(|allocs| {
            allocs
                .iter()
                .any(|((alloc, _), e)| alloc == alloc_id && e.record.info.healthy)
        })
    }

    /// Sets the health of every side an allocation registered. Returns false when it has no
    /// registration (nothing changes then).
    pub fn set_health(
        &self,
        plugin_id: &str,
        alloc_id: &str,
        healthy: bool,
        description: &str,
        update_time: &str,
    ) -> bool {
        self.update(|plugins| {
            let mut found = false;
            if let Some(allocs) = plugins.get_mut(plugin_id) {
                for ((alloc, _), entry) in allocs.iter_mut() {
                    if alloc == alloc_id {
                        entry.record.info.healthy = healthy;
                        entry.record.info.health_description = description.to_string();
                        entry.record.info.update_time = update_time.to_string();
                        found = true;
                    }
                }
            }
            found
        })
    }

    /// Removes an allocation's registrations of a plugin. Returns whether it had any.
    pub fn deregister(&self, plugin_id: &str, alloc_id: &str) -> bool {
        self.update(|plugins| {
            let mut removed = false;
            if let Some(allocs) = plugins.get_mut(plugin_id) {
                let before = allocs.len();
                allocs.retain(|(alloc, _), _| alloc != alloc_id);
                removed = allocs.len() != before;
                if allocs.is_empty() {
                    plugins.remove(plugin_id);
                }
            }
            removed
        })
    }

    /// Keeps only the registrations of allocations for which `keep(alloc_id)` is true; for the
    /// agent after a restore, to drop plugins of allocations it no longer runs.
    pub fn retain_allocs(&self, keep: &dyn Fn(&str) -> bool) {
        self.update(|plugins| {
            let before: usize = plugins.values().map(BTreeMap::len).sum();
            for allocs in plugins.values_mut() {
                allocs.retain(|(alloc, _), _| keep(alloc));
            }
            plugins.retain(|_, allocs| !allocs.is_empty());
            before != plugins.values().map(BTreeMap::len).sum::<usize>()
        });
    }

    /// Every registration, ordered by plugin, allocation and side.
    pub fn records(&self) -> Vec<PluginRecord> {
        let plugins = self.plugins.lock();
        plugins
            .values()
            .flat_map(|allocs| allocs.values().map(|e| e.record.clone()))
            .collect()
    }

    pub fn get(&self, plugin_id: &str, alloc_id: &str, kind: PluginKind) -> Option<PluginRecord> {
        let plugins = self.plugins.lock();
        plugins
            .get(plugin_id)?
            .get(&(alloc_id.to_string(), kind))
            .map(|e| e.record.clone())
    }

    /// True when the allocation's registration of the plugin came from the state file and no
    /// supervisor has confirmed it yet.
    pub fn is_restored(&self, plugin_id: &str, alloc_id: &str) -> bool {
        let plugins = self.plugins.lock();
        plugins.get(plugin_id).is_some_and(|allocs| {
            allocs
                .iter()
                .any(|((alloc, _), e)| alloc == alloc_id && e.restored)
        })
    }

    /// The controller registrations of a plugin on this node, healthy ones first, then the
    /// newest: where a volume call for the plugin goes.
    pub fn controllers(&self, plugin_id: &str) -> Vec<PluginRecord> {
        let plugins = self.plugins.lock();
        let mut out: Vec<PluginRecord> = plugins
            .get(plugin_id)
            .into_iter()
            .flat_map(|allocs| allocs.iter())
            .filter(|((_, kind), _)| *kind == PluginKind::Controller)
            .map(|(_, e)| e.record.clone())
            .collect();
        drop(plugins);
        out.sort_by(|a, b| {
            (b.info.healthy, &b.info.update_time).cmp(&(a.info.healthy, &a.info.update_time))
        });
        out
    }

    /// One plugin's summary (what a CSI volume shows of its plugin), `None` when unknown.
    pub fn summary(&self, plugin_id: &str) -> Option<PluginSummary> {
        let plugins = self.plugins.lock();
        plugins
            .get(plugin_id)
            .map(|allocs| PluginSummary::of(plugin_id, allocs))
    }

    pub fn plugin_ids(&self) -> Vec<String> {
        self.plugins.lock().keys().cloned().collect()
    }

    fn snapshot(&self) -> Plugins {
        self.plugins.lock().clone()
    }

    /// The node's own ID: the key of a plugin's `Nodes` and `Controllers` on this node.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// What the node shows (`CSINodePlugins`, `CSIControllerPlugins`): for each plugin and side,
    /// the registration that represents it. When several allocations serve one plugin, the
    /// healthy one updated last.
    pub fn node_plugins(&self) -> NodePlugins {
        let plugins = self.snapshot();
        let mut view = NodePlugins::default();
        for (id, allocs) in &plugins {
            if let Some(info) = best(allocs, PluginKind::Node) {
                view.nodes.insert(id.clone(), info.clone());
            }
            if let Some(info) = best(allocs, PluginKind::Controller) {
                view.controllers.insert(id.clone(), info.clone());
            }
        }
        view
    }

    /// Every plugin's summary, ordered by ID.
    pub fn summaries(&self) -> Vec<PluginSummary> {
        let plugins = self.snapshot();
        plugins
            .iter()
            .map(|(id, allocs)| PluginSummary::of(id, allocs))
            .collect()
    }

    /// One plugin with the registrations that represent it on this node and every allocation
    /// serving it. `None` when the plugin is unknown.
    pub fn plugin(&self, plugin_id: &str) -> Option<PluginDetail> {
        let allocs = self.plugins.lock().get(plugin_id)?.clone();
        // One per allocation, even when it registers both sides.
        let mut allocations: BTreeMap<&str, PluginAlloc> = BTreeMap::new();
        for ((alloc, _), e) in &allocs {
            let r = &e.record;
            let healthy = allocs
                .iter()
                .filter(|((a, _), _)| a == alloc)
                .all(|(_, e)| e.record.info.healthy);
            allocations
                .entry(alloc.as_str())
                .or_insert_with(|| PluginAlloc {
                    alloc_id: r.alloc_id.clone(),
                    job_id: r.job_id.clone(),
                    task_group: r.task_group.clone(),
                    task_name: r.task_name.clone(),
                    healthy,
                });
        }
        Some(PluginDetail {
            summary: PluginSummary::of(plugin_id, &allocs),
            node: best(&allocs, PluginKind::Node).cloned(),
            controller: best(&allocs, PluginKind::Controller).cloned(),
            allocations: allocations.into_values().collect(),
        })
    }
}

impl Snapshot for PluginRegistry {
    fn fill(&self, out: &mut StateFile) {
        out.csi_plugins = self.records();
    }
}

/// The `CSIInfo` of the registration of one side that represents the plugin: healthy first, then
/// the newest.
fn best(allocs: &BTreeMap<(String, PluginKind), Entry>, kind: PluginKind) -> Option<&CsiInfo> {
    allocs
        .iter()
        .filter(|((_, k), _)| *k == kind)
        .map(|(_, e)| &e.record.info)
        .max_by(|a, b| (a.healthy, &a.update_time).cmp(&(b.healthy, &b.update_time)))
}

/// The node view of the registry: plugin id → the `CSIInfo` representing each side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePlugins {
    pub nodes: BTreeMap<String, CsiInfo>,
    pub controllers: BTreeMap<String, CsiInfo>,
}

/// One plugin counted over the allocations that serve it (what Nomad's `CSIPluginListStub`
/// shows). Provider and version come from the registration updated last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSummary {
    pub id: String,
    pub provider: String,
    pub version: String,
    pub controller_required: bool,
    pub controllers_healthy: usize,
    pub controllers_expected: usize,
    pub nodes_healthy: usize,
    pub nodes_expected: usize,
}

impl PluginSummary {
    fn of(id: &str, allocs: &BTreeMap<(String, PluginKind), Entry>) -> PluginSummary {
        let mut s = PluginSummary {
            id: id.to_string(),
            ..PluginSummary::default()
        };
        let mut newest = "";
        for ((_, kind), e) in allocs {
            let info = &e.record.info;
            if info.update_time.as_str() >= newest {
                newest = &info.update_time;
                s.provider = info.provider.clone();
                s.version = info.provider_version.clone();
            }
            s.controller_required |= info.requires_controller_plugin;
            match kind {
                PluginKind::Node => {
                    s.nodes_expected += 1;
                    s.nodes_healthy += usize::from(info.healthy);
                }
                PluginKind::Controller => {
                    s.controllers_expected += 1;
                    s.controllers_healthy += usize::from(info.healthy);
                }
            }
        }
        s
    }
}

/// One allocation serving a plugin; healthy when every side it registered is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginAlloc {
    pub alloc_id: String,
    pub job_id: String,
    pub task_group: String,
    pub task_name: String,
    pub healthy: bool,
}

/// One plugin in full: its summary, the registration representing each side on this node, and
/// its allocations ordered by ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginDetail {
    pub summary: PluginSummary,
    pub node: Option<CsiInfo>,
    pub controller: Option<CsiInfo>,
    pub allocations: Vec<PluginAlloc>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::csi::{ControllerInfo, NodeInfo, Topology};

    pub(crate) fn record(
        plugin: &str,
        alloc: &str,
        kind: PluginKind,
        healthy: bool,
        time: &str,
    ) -> PluginRecord {
        PluginRecord {
            plugin_id: plugin.into(),
            alloc_id: alloc.into(),
            kind,
            job_id: "job".into(),
            task_group: "group".into(),
            task_name: "plugin".into(),
            socket_path: format!("/data/client/csi/plugins/{alloc}/csi.sock").into(),
            info: CsiInfo {
                plugin_id: plugin.into(),
                alloc_id: alloc.into(),
                healthy,
                health_description: if healthy { "healthy" } else { "Unknown Reason" }.into(),
                update_time: time.into(),
                provider: "example.csi".into(),
                provider_version: "1.0".into(),
                requires_controller_plugin: true,
                requires_topologies: false,
                node_info: (kind == PluginKind::Node).then(|| NodeInfo {
                    id: "n1".into(),
                    max_volumes: 3,
                    accessible_topology: Some(Topology::default()),
                    ..NodeInfo::default()
                }),
                controller_info: (kind == PluginKind::Controller).then(ControllerInfo::default),
            },
        }
    }

    pub(crate) fn monolith(
        plugin: &str,
        alloc: &str,
        healthy: bool,
        time: &str,
    ) -> Vec<PluginRecord> {
        vec![
            record(plugin, alloc, PluginKind::Node, healthy, time),
            record(plugin, alloc, PluginKind::Controller, healthy, time),
        ]
    }

    #[test]
    fn controllers_are_listed_healthy_first_and_summaries_by_plugin() {
        let reg = PluginRegistry::new("node-1");
        reg.register("hp", "a1", monolith("hp", "a1", false, "t9"));
        reg.register("hp", "a2", monolith("hp", "a2", true, "t1"));
        reg.register(
            "node-only",
            "a3",
            vec![record("node-only", "a3", PluginKind::Node, true, "t1")],
        );
        let allocs: Vec<String> = reg
            .controllers("hp")
            .into_iter()
            .map(|r| r.alloc_id)
            .collect();
        assert_eq!(allocs, vec!["a2".to_string(), "a1".to_string()]);
        assert!(reg.controllers("node-only").is_empty());
        assert!(reg.controllers("nope").is_empty());
        let s = reg.summary("hp").unwrap();
        assert_eq!((s.controllers_healthy, s.controllers_expected), (1, 2));
        assert!(reg.summary("nope").is_none());
    }

    #[test]
    fn register_health_and_deregister() {
        let reg = PluginRegistry::new("node-1");
        reg.register(
            "hp",
            "a1",
            monolith("hp", "a1", true, "2026-01-01T00:00:00Z"),
        );
        assert_eq!(reg.records().len(), 2);
        assert!(reg.set_health("hp", "a1", false, "Error: x", "2026-01-01T00:00:01Z"));
        let node = reg.get("hp", "a1", PluginKind::Node).unwrap();
        assert!(!node.info.healthy);
        assert_eq!(node.info.health_description, "Error: x");
        assert!(!reg.set_health("hp", "other", true, "", ""));
        assert!(reg.deregister("hp", "a1"));
        assert!(!reg.deregister("hp", "a1"));
        assert!(reg.records().is_empty());
        assert!(reg.plugin_ids().is_empty());
    }

    #[test]
    fn restored_entries_stay_until_confirmed_or_removed() {
        let reg = PluginRegistry::new("node-1");
        let mut records = monolith("hp", "a1", true, "t1");
        records.push(record("other", "a2", PluginKind::Node, true, "t1"));
        reg.restore(records);
        assert!(reg.is_restored("hp", "a1"));
        // The supervisor confirms, as a node plugin now: the restored controller side goes.
        reg.register(
            "hp",
            "a1",
            vec![record("hp", "a1", PluginKind::Node, true, "t2")],
        );
        assert!(!reg.is_restored("hp", "a1"));
        assert!(reg.get("hp", "a1", PluginKind::Controller).is_none());
        // The agent no longer runs a2.
        reg.retain_allocs(&|alloc| alloc == "a1");
        assert_eq!(reg.plugin_ids(), vec!["hp".to_string()]);
    }

    #[test]
    fn views_pick_the_healthy_newest_side_and_count_allocations() {
        let reg = PluginRegistry::new("node-1");
        reg.register("hp", "a1", monolith("hp", "a1", false, "t9"));
        reg.register("hp", "a2", monolith("hp", "a2", true, "t1"));
        reg.register(
            "zz",
            "a3",
            vec![record("zz", "a3", PluginKind::Node, true, "t1")],
        );
        let view = reg.node_plugins();
        assert_eq!(view.nodes["hp"].alloc_id, "a2");
        assert_eq!(view.controllers["hp"].alloc_id, "a2");
        assert_eq!(view.nodes["zz"].alloc_id, "a3");
        assert!(!view.controllers.contains_key("zz"));

        let summaries = reg.summaries();
        assert_eq!(summaries.len(), 2);
        let hp = &summaries[0];
        assert_eq!(
            (hp.id.as_str(), hp.provider.as_str()),
            ("hp", "example.csi")
        );
        assert_eq!((hp.nodes_healthy, hp.nodes_expected), (1, 2));
        assert_eq!((hp.controllers_healthy, hp.controllers_expected), (1, 2));
        assert!(hp.controller_required);

        let detail = reg.plugin("hp").unwrap();
        assert_eq!(&detail.summary, hp);
        assert_eq!(detail.node.unwrap().alloc_id, "a2");
        let allocs: Vec<(&str, bool)> = detail
            .allocations
            .iter()
            .map(|a| (a.alloc_id.as_str(), a.healthy))
            .collect();
        assert_eq!(allocs, vec![("a1", false), ("a2", true)]);
        assert_eq!(detail.allocations[0].job_id, "job");
        assert!(reg.plugin("nope").is_none());
        assert_eq!(reg.node_id(), "node-1");
    }

    /// Through the real state store: what a supervisor registered comes back, marked restored,
    /// in the next agent.
    #[test]
    fn registrations_survive_an_agent_restart() {
        let dir = std::env::temp_dir().join(format!("nodeward-csi-reg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (store, _) = StateStore::open(&dir, false).unwrap();
        let reg = Arc::new(PluginRegistry::new("node-1"));
        reg.attach_state(&store);
        reg.register("hp", "a1", monolith("hp", "a1", true, "t1"));
        store.save().unwrap();
        drop((reg, store));

        let (store, state) = StateStore::open(&dir, false).unwrap();
        let reg = Arc::new(PluginRegistry::new("node-1"));
        reg.restore(state.csi_plugins);
        reg.attach_state(&store);
        assert_eq!(reg.records(), monolith("hp", "a1", true, "t1"));
        assert!(reg.is_restored("hp", "a1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_round_trip_through_the_state_file() {
        let reg = PluginRegistry::new("node-1");
        reg.register("hp", "a1", monolith("hp", "a1", true, "t1"));
        let mut file = StateFile::default();
        reg.fill(&mut file);
        let text = serde_json::to_string(&file).unwrap();
        let back: StateFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back.csi_plugins, reg.records());
        let restored = PluginRegistry::new("node-1");
        restored.restore(back.csi_plugins);
        assert_eq!(restored.records(), reg.records());
    }
}
