//! `node status` and `plugin status`.

use serde_json::Value;

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{key_values, s, short_id, table, text};
use super::resources_format::{allocated_resources, host_utilization};
use super::{failed, CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&NODE_STATUS, &PLUGIN_STATUS];

const NODE_STATUS: Spec = Spec {
    words: &["node", "status"],
    flags: &[bool_flag("json"), bool_flag("self"), bool_flag("stats")],
    args: (0, 1),
    usage: "Usage: nodeward node status [-json] [-stats] [-self | <node id>]

  Lists the node, or shows it with its host volumes, CSI plugins and allocated resources.

  -self     Show this agent's node.
  -stats    Also show the host's resource utilization.
  -json     Print the API's JSON.",
    run: node_status,
};

const PLUGIN_STATUS: Spec = Spec {
    words: &["plugin", "status"],
    flags: &[bool_flag("json"), value_flag("type")],
    args: (0, 1),
    usage: "Usage: nodeward plugin status [-json] [-type csi] [<plugin id>]

  Lists the CSI plugins, or shows one with its allocations.

  -type     The plugin type; only csi.
  -json     Print the API's JSON.",
    run: plugin_status,
};

fn node_status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = match (p.args.first(), p.flag("self")) {
        (Some(_), true) => {
            return Err(CmdError::Usage(
                "-self and a node ID cannot be used together".into(),
            ))
        }
        (Some(id), false) => Some(id.clone()),
        (None, true) => {
            let nodes = ctx
                .client
                .get("/v1/nodes")
                .map_err(|e| failed("querying node", e))?;
            let first = nodes.as_array().and_then(|n| n.first()).cloned();
            Some(first.map(|n| s(&n, "ID").to_string()).unwrap_or_default())
        }
        (None, false) => None,
    };
    let Some(id) = id else {
        let nodes = ctx
            .client
            .get("/v1/nodes")
            .map_err(|e| failed("querying nodes", e))?;
        if p.flag("json") {
            ctx.print_json(&nodes);
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".to_string(),
            "Node Pool".into(),
            "Name".into(),
            "Status".into(),
        ]];
        for n in nodes.as_array().into_iter().flatten() {
            rows.push(vec![
                short_id(s(n, "ID")).into(),
                s(n, "NodePool").into(),
                s(n, "Name").into(),
                s(n, "Status").into(),
            ]);
        }
        ctx.println(&table(&rows));
        return Ok(());
    };
    let node = ctx
        .client
        .get(&format!("/v1/node/{}", enc(&id)))
        .map_err(|e| failed("querying node", e))?;
    if p.flag("json") {
        ctx.print_json(&node);
        return Ok(());
    }
    ctx.print(&node_text(&node));
    let allocs = live_allocs(ctx)?;
    ctx.print(&format!("\n{}", allocated_resources(&node, &allocs)));
    if p.flag("stats") {
        let host = ctx.client.get("/v1/client/stats");
        let host = host.map_err(|e| failed("querying host stats", e))?;
        ctx.print(&format!("\n{}", host_utilization(&node, &host)));
    }
    Ok(())
}

/// The live allocations (wanted running, not terminal), each with its job.
fn live_allocs(ctx: &mut Ctx) -> Result<Vec<Value>, CmdError> {
    let stubs = ctx
        .client
        .get("/v1/allocations")
        .map_err(|e| failed("listing allocations", e))?;
    let mut out = Vec::new();
    for a in stubs.as_array().into_iter().flatten() {
        let terminal = matches!(s(a, "ClientStatus"), "complete" | "failed" | "lost");
        if s(a, "DesiredStatus") != "run" || terminal {
            continue;
        }
        let path = format!("/v1/allocation/{}", enc(s(a, "ID")));
        out.push(
            ctx.client
                .get(&path)
                .map_err(|e| failed("querying allocation", e))?,
        );
    }
    Ok(out)
}

/// `node status <id>`: the node, its host volumes and its CSI plugins.
pub(super) fn node_text(node: &Value) -> String {
    let mut out = key_values(&[
        ("ID", s(node, "ID").into()),
        ("Name", s(node, "Name").into()),
        ("Node Pool", s(node, "NodePool").into()),
        ("Status", s(node, "Status").into()),
    ]);
    out.push_str("\n\nHost Volumes\n");
    let volumes = node.get("HostVolumes").and_then(Value::as_object);
    match volumes.filter(|v| !v.is_empty()) {
        None => out.push_str("No host volumes\n"),
        Some(volumes) => {
            let mut rows = vec![vec![
                "Name".to_string(),
                "ReadOnly".into(),
                "Source".into(),
                "ID".into(),
            ]];
            for (name, v) in volumes {
                rows.push(vec![
                    name.clone(),
                    text(v, "ReadOnly"),
                    s(v, "Path").into(),
                    short_id(s(v, "ID")).into(),
                ]);
            }
            out.push_str(&table(&rows));
            out.push('\n');
        }
    }
    out.push_str("\nCSI Plugins\n");
    let mut rows = vec![vec![
        "ID".to_string(),
        "Type".into(),
        "Provider".into(),
        "Healthy".into(),
        "Description".into(),
    ]];
    for (field, kind) in [
        ("CSINodePlugins", "node"),
        ("CSIControllerPlugins", "controller"),
    ] {
        for (id, plugin) in node
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            rows.push(vec![
                id.clone(),
                kind.into(),
                s(plugin, "Provider").into(),
                text(plugin, "Healthy"),
                s(plugin, "HealthDescription").into(),
            ]);
        }
    }
    if rows.len() == 1 {
        out.push_str("No CSI plugins\n");
    } else {
        out.push_str(&table(&rows));
        out.push('\n');
    }
    out
}

fn plugin_status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let kind = p.value("type").unwrap_or("csi");
    if kind != "csi" {
        return Err(CmdError::Usage(format!(
            "unsupported plugin type {kind:?}: only \"csi\""
        )));
    }
    let Some(id) = p.args.first() else {
        let plugins = ctx
            .client
            .get("/v1/plugins?type=csi")
            .map_err(|e| failed("querying CSI plugins", e))?;
        if p.flag("json") {
            ctx.print_json(&plugins);
            return Ok(());
        }
        let plugins = plugins.as_array().cloned().unwrap_or_default();
        if plugins.is_empty() {
            ctx.println("No CSI plugins");
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".to_string(),
            "Provider".into(),
            "Controllers Healthy/Expected".into(),
            "Nodes Healthy/Expected".into(),
        ]];
        for pl in &plugins {
            rows.push(vec![
                s(pl, "ID").into(),
                s(pl, "Provider").into(),
                format!(
                    "{}/{}",
                    count(pl, "ControllersHealthy"),
                    count(pl, "ControllersExpected")
                ),
                format!(
                    "{}/{}",
                    count(pl, "NodesHealthy"),
                    count(pl, "NodesExpected")
                ),
            ]);
        }
        ctx.println(&table(&rows));
        return Ok(());
    };
    let plugin = ctx
        .client
        .get(&format!("/v1/plugin/csi/{}", enc(id)))
        .map_err(|e| failed("querying CSI plugin", e))?;
    if p.flag("json") {
        ctx.print_json(&plugin);
        return Ok(());
    }
    let mut out = key_values(&[
        ("ID", s(&plugin, "ID").into()),
        ("Provider", s(&plugin, "Provider").into()),
        ("Version", s(&plugin, "Version").into()),
        ("Controllers Healthy", count(&plugin, "ControllersHealthy")),
        (
            "Controllers Expected",
            count(&plugin, "ControllersExpected"),
        ),
        ("Nodes Healthy", count(&plugin, "NodesHealthy")),
        ("Nodes Expected", count(&plugin, "NodesExpected")),
    ]);
    out.push_str("\n\nAllocations\n");
    let allocs = plugin
        .get("Allocations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if allocs.is_empty() {
        out.push_str("No allocations placed\n");
    } else {
        out.push_str(&super::job::alloc_table(&allocs));
        out.push('\n');
    }
    ctx.print(&out);
    Ok(())
}

fn count(v: &Value, key: &str) -> String {
    match text(v, key) {
        t if t.is_empty() => "0".into(),
        t => t,
    }
}
