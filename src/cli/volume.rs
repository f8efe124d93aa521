//! `volume create`, `volume register`, `volume status`, `volume delete` (host volumes).

use std::path::Path;

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{s, short_id, table};
use super::volume_format as volume_text;
use super::{failed, CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&CREATE, &REGISTER, &STATUS, &DELETE];

const CREATE: Spec = Spec {
    words: &["volume", "create"],
    flags: &[],
    args: (1, 1),
    usage: "Usage: nodeward volume create <volume spec file>

  Creates a dynamic host volume through its plugin. The file is HCL (type, name, plugin_id,
  capacity_min, capacity_max, capability, parameters) or, for a .json file, the API's
  {\"Volume\": {...}}.",
    run: create,
};

const REGISTER: Spec = Spec {
    words: &["volume", "register"],
    flags: &[],
    args: (1, 1),
    usage: "Usage: nodeward volume register <volume spec file>

  Registers an existing directory (host_path) as a host volume, without a plugin.",
    run: register,
};

const STATUS: Spec = Spec {
    words: &["volume", "status"],
    flags: &[bool_flag("json"), value_flag("type")],
    args: (0, 1),
    usage: "Usage: nodeward volume status [-json] [-type host] [<volume id>]

  Lists the host volumes, or shows one (a unique ID prefix is enough).

  -type     The volume type; only host.
  -json     Print the API's JSON.",
    run: status,
};

const DELETE: Spec = Spec {
    words: &["volume", "delete"],
    flags: &[bool_flag("force"), value_flag("type")],
    args: (1, 1),
    usage: "Usage: nodeward volume delete [-force] <volume id>

  Deletes a host volume through its plugin. When the plugin fails the volume is kept, so the
  delete can be retried.

  -force    Drop the volume from the node even when its plugin fails.",
    run: delete,
};

type Output = fn(&serde_json::Value, &chrono::DateTime<chrono::FixedOffset>) -> String;

fn create(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    submit(
        ctx,
        p,
        "create",
        "creating volume",
        volume_text::create_output,
    )
}

fn register(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    submit(
        ctx,
        p,
        "register",
        "registering volume",
        volume_text::register_output,
    )
}

fn submit(ctx: &mut Ctx, p: &Parsed, endpoint: &str, doing: &str, output: Output) -> CmdResult {
    let file = Path::new(&p.args[0]);
    let text = std::fs::read_to_string(file)
        .map_err(|e| failed("reading volume file", format!("{}: {e}", file.display())))?;
    let request = super::volume_request::api_request(file, &text)
        .map_err(|e| failed("parsing volume file", e))?;
    let answer = ctx
        .client
        .put(&format!("/v1/volume/host/{endpoint}"), &request)
        .map_err(|e| failed(doing, e))?;
    ctx.print(&output(&answer, &chrono::Local::now().fixed_offset()));
    Ok(())
}

fn check_type(p: &Parsed) -> CmdResult {
    match p.value("type").unwrap_or("host") {
        "host" => Ok(()),
        other => Err(CmdError::Usage(format!(
            "unsupported volume type {other:?}: only \"host\""
        ))),
    }
}

fn status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    check_type(p)?;
    let Some(id) = p.args.first() else {
        let volumes = ctx
            .client
            .get("/v1/volumes?type=host")
            .map_err(|e| failed("querying volumes", e))?;
        if p.flag("json") {
            ctx.print_json(&volumes);
            return Ok(());
        }
        let volumes = volumes.as_array().cloned().unwrap_or_default();
        if volumes.is_empty() {
            ctx.println("No host volumes");
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".to_string(),
            "Name".into(),
            "Namespace".into(),
            "Plugin ID".into(),
            "Node ID".into(),
            "Node Pool".into(),
            "State".into(),
        ]];
        for v in &volumes {
            rows.push(vec![
                short_id(s(v, "ID")).into(),
                s(v, "Name").into(),
                s(v, "Namespace").into(),
                s(v, "PluginID").into(),
                short_id(s(v, "NodeID")).into(),
                s(v, "NodePool").into(),
                s(v, "State").into(),
            ]);
        }
        ctx.println(&table(&rows));
        return Ok(());
    };
    let answer = ctx
        .client
        .get(&format!("/v1/volume/host/{}", enc(id)))
        .map_err(|e| failed("querying volume", e))?;
    if p.flag("json") {
        ctx.print_json(&answer);
        return Ok(());
    }
    let volume = answer.get("Volume").unwrap_or(&answer);
    let mut out = volume_text::volume_block(volume);
    out.push('\n');
    let error = s(volume, "Error");
    if !error.is_empty() {
        out.push_str(&format!("\nError: {error}\n"));
    }
    let allocs = volume
        .get("Allocations")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !allocs.is_empty() {
        out.push_str("\nAllocations\n");
        out.push_str(&super::job::alloc_table(&allocs));
        out.push('\n');
    }
    ctx.print(&out);
    Ok(())
}

fn delete(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    check_type(p)?;
    let id = &p.args[0];
    let path = if p.flag("force") {
        format!("/v1/volume/host/{}?force=true", enc(id))
    } else {
        format!("/v1/volume/host/{}", enc(id))
    };
    let answer = ctx
        .client
        .delete(&path)
        .map_err(|e| failed("deleting volume", e))?;
    // The agent resolves a prefix; say which volume went.
    let deleted = answer["VolumeID"].as_str().unwrap_or(id);
    ctx.println(&format!("Successfully deleted volume {deleted:?}!"));
    Ok(())
}
