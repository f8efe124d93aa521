//! The CSI plugins registered on this node: what `GET /v1/node/:id` (`CSINodePlugins`,
//! `CSIControllerPlugins`), `GET /v1/plugins?type=csi` and `GET /v1/plugin/csi/:id` show, and what
//! the state file keeps under `CSIPlugins`.
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
use serde_json::{json, Map, Value};
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

    pub fn plugin_ids(&self) -> Vec<String> {
        self.plugins.lock().keys().cloned().collect()
    }

    fn snapshot(&self) -> Plugins {
        self.plugins.lock().clone()
    }

    /// `{"CSINodePlugins": {...}, "CSIControllerPlugins": {...}}` for the node view: plugin id →
    /// `CSIInfo`. When several allocations serve one plugin, the healthy one updated last shows.
    pub fn node_json(&self) -> Value {
        let plugins = self.snapshot();
        let mut nodes = Map::new();
        let mut controllers = Map::new();
        for (id, allocs) in &plugins {
            if let Some(info) = best(allocs, PluginKind::Node) {
                nodes.insert(id.clone(), info);
            }
            if let Some(info) = best(allocs, PluginKind::Controller) {
                controllers.insert(id.clone(), info);
            }
        }
        json!({
            "CSINodePlugins": nodes,
            "CSIControllerPlugins": controllers,
        })
    }

    /// `GET /v1/plugins?type=csi`: Nomad's `CSIPluginListStub`s, ordered by ID.
    pub fn plugins_json(&self) -> Value {
        let plugins = self.snapshot();
        let stubs: Vec<Value> = plugins
            .iter()
            .map(|(id, allocs)| Value::Object(Summary::of(allocs).stub(id)))
            .collect();
        Value::Array(stubs)
    }

    /// `GET /v1/plugin/csi/:id`: Nomad's `CSIPlugin`, with `Nodes` and `Controllers` keyed by this
    /// node's ID and every allocation serving the plugin. `None` when the plugin is unknown.
    pub fn plugin_json(&self, plugin_id: &str) -> Option<Value> {
        let allocs = self.plugins.lock().get(plugin_id)?.clone();
        let s = Summary::of(&allocs);
        let on_this_node = |kind| {
            let info = best(&allocs, kind);
            Map::from_iter(info.map(|info| (self.node_id.clone(), info)))
        };
        let (nodes, controllers) = (
            on_this_node(PluginKind::Node),
            on_this_node(PluginKind::Controller),
        );
        // One stub per allocation, even when it registers both sides.
        let mut allocations: BTreeMap<&str, Value> = BTreeMap::new();
        for ((alloc, _), e) in &allocs {
            let r = &e.record;
            let healthy = allocs
                .iter()
                .filter(|((a, _), _)| a == alloc)
                .all(|(_, e)| e.record.info.healthy);
            allocations.entry(alloc.as_str()).or_insert_with(|| {
                json!({
                    "ID": r.alloc_id,
                    "JobID": r.job_id,
                    "TaskGroup": r.task_group,
                    "TaskName": r.task_name,
                    "NodeID": self.node_id,
                    "Healthy": healthy,
                })
            });
        }
        // Nomad's CSIPlugin is the list stub with these fields added.
        let mut plugin = s.stub(plugin_id);
        plugin.insert("Version".into(), json!(s.version));
        plugin.insert("Controllers".into(), Value::Object(controllers));
        plugin.insert("Nodes".into(), Value::Object(nodes));
        plugin.insert(
            "Allocations".into(),
            Value::Array(allocations.into_values().collect()),
        );
        Some(Value::Object(plugin))
    }
}

impl Snapshot for PluginRegistry {
    fn fill(&self, out: &mut StateFile) {
        out.csi_plugins = self.records();
    }
}

/// The `CSIInfo` of the registration of one side that represents the plugin: healthy first, then
/// the newest.
fn best(allocs: &BTreeMap<(String, PluginKind), Entry>, kind: PluginKind) -> Option<Value> {
    allocs
        .iter()
        .filter(|((_, k), _)| *k == kind)
        .map(|(_, e)| &e.record.info)
        .max_by(|a, b| (a.healthy, &a.update_time).cmp(&(b.healthy, &b.update_time)))
        .map(|info: &CsiInfo| serde_json::to_value(info).unwrap_or(Value::Null))
}

#[derive(Default)]
struct Summary {
    provider: String,
    version: String,
    controller_required: bool,
    controllers_healthy: usize,
    controllers_expected: usize,
    nodes_healthy: usize,
    nodes_expected: usize,
}

impl Summary {
    fn of(allocs: &BTreeMap<(String, PluginKind), Entry>) -> Summary {
        let mut s = Summary::default();
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

    /// Nomad's `CSIPluginListStub` of the plugin `id`.
    fn stub(&self, id: &str) -> Map<String, Value> {
        [
            ("ID", json!(id)),
            ("Provider", json!(self.provider)),
            ("ControllerRequired", json!(self.controller_required)),
            ("ControllersHealthy", json!(self.controllers_healthy)),
            ("ControllersExpected", json!(self.controllers_expected)),
            ("NodesHealthy", json!(self.nodes_healthy)),
            ("NodesExpected", json!(self.nodes_expected)),
            ("CreateIndex", json!(0)),
            ("ModifyIndex", json!(0)),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{ControllerInfo, NodeInfo, Topology};

    fn record(
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

    fn monolith(plugin: &str, alloc: &str, healthy: bool, time: &str) -> Vec<PluginRecord> {
        vec![
            record(plugin, alloc, PluginKind::Node, healthy, time),
            record(plugin, alloc, PluginKind::Controller, healthy, time),
        ]
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
    fn node_view_prefers_the_healthy_newest_allocation() {
        let reg = PluginRegistry::new("node-1");
        reg.register(
            "hp",
            "a1",
            monolith("hp", "a1", false, "2026-01-01T00:00:09Z"),
        );
        reg.register(
            "hp",
            "a2",
            monolith("hp", "a2", true, "2026-01-01T00:00:01Z"),
        );
        let v = reg.node_json();
        assert_eq!(v["CSINodePlugins"]["hp"]["AllocID"], "a2");
        assert_eq!(v["CSIControllerPlugins"]["hp"]["AllocID"], "a2");
        assert_eq!(v["CSINodePlugins"]["hp"]["NodeInfo"]["MaxVolumes"], 3);
        assert!(v["CSINodePlugins"]["hp"]["ControllerInfo"].is_null());
        assert!(
            v["CSINodePlugins"]["hp"]["NodeInfo"]["AccessibleTopology"]["Segments"].is_object()
        );
    }

    #[test]
    fn plugin_list_and_detail() {
        let reg = PluginRegistry::new("node-1");
        reg.register("hp", "a1", monolith("hp", "a1", true, "t1"));
        reg.register(
            "hp",
            "a2",
            vec![record("hp", "a2", PluginKind::Node, false, "t2")],
        );
        reg.register(
            "zz",
            "a3",
            vec![record("zz", "a3", PluginKind::Node, true, "t1")],
        );
        let list = reg.plugins_json();
        assert_eq!(list.as_array().unwrap().len(), 2);
        assert_eq!(list[0]["ID"], "hp");
        assert_eq!(list[0]["Provider"], "example.csi");
        assert_eq!(list[0]["ControllerRequired"], true);
        assert_eq!(list[0]["NodesExpected"], 2);
        assert_eq!(list[0]["NodesHealthy"], 1);
        assert_eq!(list[0]["ControllersExpected"], 1);
        assert_eq!(list[0]["ControllersHealthy"], 1);

        let one = reg.plugin_json("hp").unwrap();
        assert_eq!(one["Nodes"]["node-1"]["AllocID"], "a1");
        assert_eq!(one["Controllers"]["node-1"]["AllocID"], "a1");
        let allocs = one["Allocations"].as_array().unwrap();
        assert_eq!(allocs.len(), 2);
        assert_eq!(allocs[0]["ID"], "a1");
        assert_eq!(allocs[1]["Healthy"], false);
        assert!(reg.plugin_json("nope").is_none());
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
