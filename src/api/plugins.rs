//! CSI plugin routes (csi.md "The plugin registry and the node"): `GET /v1/plugins?type=csi` and
//! `GET /v1/plugin/csi/:id`, and the node's `CSINodePlugins` / `CSIControllerPlugins` for
//! `GET /v1/node/:id`, encoded as Nomad's JSON from the plugin registry's views.

use serde_json::{json, Map, Value};
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
    json!({
        "CSINodePlugins": infos_json(view.nodes),
        "CSIControllerPlugins": infos_json(view.controllers),
    })
}

/// `GET /v1/plugins?type=csi`: Nomad's `CSIPluginListStub`s, ordered by ID.
pub fn plugins_json(plugins: &PluginRegistry) -> Value {
    Value::Array(
        plugins
            .summaries()
            .iter()
            .map(|s| Value::Object(stub(s)))
            .collect(),
    )
}

/// `GET /v1/plugin/csi/:id`: Nomad's `CSIPlugin`, with `Nodes` and `Controllers` keyed by this
/// node's ID and every allocation serving the plugin. `None` when the plugin is unknown.
pub fn plugin_json(plugins: &PluginRegistry, plugin_id: &str) -> Option<Value> {
    let detail = plugins.plugin(plugin_id)?;
    let node_id = plugins.node_id();
    let on_this_node =
        |info: Option<CsiInfo>| Map::from_iter(info.map(|i| (node_id.to_string(), info_json(&i))));
    let allocations: Vec<Value> = detail
        .allocations
        .iter()
        .map(|a| {
            json!({
                "ID": a.alloc_id,
                "JobID": a.job_id,
                "TaskGroup": a.task_group,
                "TaskName": a.task_name,
                "NodeID": node_id,
                "Healthy": a.healthy,
            })
        })
        .collect();
    // Nomad's CSIPlugin is the list stub with these fields added.
    let mut plugin = stub(&detail.summary);
    plugin.insert("Version".into(), json!(detail.summary.version));
    plugin.insert(
        "Controllers".into(),
        Value::Object(on_this_node(detail.controller)),
    );
    plugin.insert("Nodes".into(), Value::Object(on_this_node(detail.node)));
    plugin.insert("Allocations".into(), Value::Array(allocations));
    Some(Value::Object(plugin))
}

fn info_json(info: &CsiInfo) -> Value {
    serde_json::to_value(info).unwrap_or(Value::Null)
}

fn infos_json(infos: BTreeMap<String, CsiInfo>) -> Map<String, Value> {
    infos
        .into_iter()
        .map(|(id, info)| (id, info_json(&info)))
        .collect()
}

/// Nomad's `CSIPluginListStub` of one plugin.
fn stub(s: &PluginSummary) -> Map<String, Value> {
    [
        ("ID", json!(s.id)),
        ("Provider", json!(s.provider)),
        ("ControllerRequired", json!(s.controller_required)),
        ("ControllersHealthy", json!(s.controllers_healthy)),
        ("ControllersExpected", json!(s.controllers_expected)),
        ("NodesHealthy", json!(s.nodes_healthy)),
        ("NodesExpected", json!(s.nodes_expected)),
        ("CreateIndex", json!(0)),
        ("ModifyIndex", json!(0)),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
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
