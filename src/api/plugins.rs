//! CSI plugin routes (csi.md "The plugin registry and the node"): `GET /v1/plugins?type=csi` and
//! `GET /v1/plugin/csi/:id`, and the node's `CSINodePlugins` / `CSIControllerPlugins` for
//! `GET /v1/node/:id`, encoded as Nomad's JSON from the plugin registry's views.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::csi::registry::{PluginRegistry, PluginSummary};
use crate::csi::CsiInfo;

pub fn routes(r: &mut Router, agent: Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/plugins", move |req| match req.query("type") {
        None | Some("") | Some("csi") => Response::json(plugins_json(&a.csi)),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unsupported plugin type {other:?}: nodeward lists csi plugins"
        ))),
    });
    r.get("/v1/plugin/csi/:id", move |req| {
        let id = req.param("id");
        let plugin = plugin_json(&agent.csi, id)
            .ok_or_else(|| ApiError::NotFound(format!("plugin {id:?} not found")))?;
        Response::json(plugin)
    });
}

/// `{"CSINodePlugins": {...}, "CSIControllerPlugins": {...}}` for the node view: plugin id →
/// Nomad's `CSIInfo`.
pub fn node_plugins_json(plugins: &PluginRegistry) -> Value {
    let view = plugins.node_plugins();
    to_value(NodePlugins {
        csi_node_plugins: view.nodes,
        csi_controller_plugins: view.controllers,
    })
}

/// `GET /v1/plugins?type=csi`: Nomad's `CSIPluginListStub`s, ordered by ID.
pub fn plugins_json(plugins: &PluginRegistry) -> Value {
    let summaries = plugins.summaries();
    to_value(summaries.iter().map(Stub::of).collect::<Vec<_>>())
}

/// `GET /v1/plugin/csi/:id`: Nomad's `CSIPlugin`, with `Nodes` and `Controllers` keyed by this
/// node's ID and every allocation serving the plugin. `None` when the plugin is unknown.
pub fn plugin_json(plugins: &PluginRegistry, plugin_id: &str) -> Option<Value> {
    let detail = plugins.plugin(plugin_id)?;
    let node_id = plugins.node_id();
    let on_this_node = |info: Option<CsiInfo>| -> BTreeMap<&str, CsiInfo> {
        info.map(|i| (node_id, i)).into_iter().collect()
    };
    let allocations = detail
        .allocations
        .iter()
        .map(|a| PluginAlloc {
            id: &a.alloc_id,
            job_id: &a.job_id,
            task_group: &a.task_group,
            task_name: &a.task_name,
            node_id,
            healthy: a.healthy,
        })
        .collect();
    Some(to_value(Plugin {
        stub: Stub::of(&detail.summary),
        version: &detail.summary.version,
        controllers: on_this_node(detail.controller),
        nodes: on_this_node(detail.node),
        allocations,
    }))
}

/// A typed answer as the JSON value the callers compose (every object's keys in name order).
fn to_value(answer: impl Serialize) -> Value {
    serde_json::to_value(answer).unwrap_or(Value::Null)
}

#[derive(Serialize)]
struct NodePlugins {
    #[serde(rename = "CSINodePlugins")]
    csi_node_plugins: BTreeMap<String, CsiInfo>,
    #[serde(rename = "CSIControllerPlugins")]
    csi_controller_plugins: BTreeMap<String, CsiInfo>,
}

/// Nomad's `CSIPluginListStub` of one plugin.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Stub<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    provider: &'a str,
    controller_required: bool,
    controllers_healthy: usize,
    controllers_expected: usize,
    nodes_healthy: usize,
    nodes_expected: usize,
    /// nodeward keeps no Raft indexes: always 0, as the list has always shown.
    create_index: u64,
    modify_index: u64,
}

impl<'a> Stub<'a> {
    fn of(s: &'a PluginSummary) -> Stub<'a> {
        Stub {
            id: &s.id,
            provider: &s.provider,
            controller_required: s.controller_required,
            controllers_healthy: s.controllers_healthy,
            controllers_expected: s.controllers_expected,
            nodes_healthy: s.nodes_healthy,
            nodes_expected: s.nodes_expected,
            create_index: 0,
            modify_index: 0,
        }
    }
}

/// Nomad's `CSIPlugin`: the list stub with these fields added.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Plugin<'a> {
    #[serde(flatten)]
    stub: Stub<'a>,
    version: &'a str,
    controllers: BTreeMap<&'a str, CsiInfo>,
    nodes: BTreeMap<&'a str, CsiInfo>,
    allocations: Vec<PluginAlloc<'a>>,
}

/// An allocation serving a plugin, in `GET /v1/plugin/csi/:id`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PluginAlloc<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    task_group: &'a str,
    task_name: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'a str,
    healthy: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::registry::tests::{monolith, record};
    use crate::csi::PluginKind;

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
        let v = node_plugins_json(&reg);
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
        let list = plugins_json(&reg);
        assert_eq!(list.as_array().unwrap().len(), 2);
        assert_eq!(list[0]["ID"], "hp");
        assert_eq!(list[0]["Provider"], "example.csi");
        assert_eq!(list[0]["ControllerRequired"], true);
        assert_eq!(list[0]["NodesExpected"], 2);
        assert_eq!(list[0]["NodesHealthy"], 1);
        assert_eq!(list[0]["ControllersExpected"], 1);
        assert_eq!(list[0]["ControllersHealthy"], 1);

        let one = plugin_json(&reg, "hp").unwrap();
        assert_eq!(one["Nodes"]["node-1"]["AllocID"], "a1");
        assert_eq!(one["Controllers"]["node-1"]["AllocID"], "a1");
        let allocs = one["Allocations"].as_array().unwrap();
        assert_eq!(allocs.len(), 2);
        assert_eq!(allocs[0]["ID"], "a1");
        assert_eq!(allocs[1]["Healthy"], false);
        assert!(plugin_json(&reg, "nope").is_none());
    }
}
