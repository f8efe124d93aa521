//! `volume create`, `volume register`, `volume status`, `volume delete` (host and CSI volumes) and
//! `volume deregister` (CSI volumes).
//!
//! A specification file's `type` picks the API (`cli::volume_request`). A command given an ID
//! without `-type` looks for a host volume first and, when the agent has none of that ID, for a
//! CSI volume: host volume IDs are UUIDs and CSI volume IDs are the user's, so one ID names at
//! most one of them in practice.

use std::path::Path;

use super::client::{enc, ClientError};
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{s, short_id, table};
use super::volume_format as volume_text;
use super::volume_request::VolumeRequest;
use super::{failed, CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&CREATE, &REGISTER, &STATUS, &DELETE, &DEREGISTER];

const CREATE: Spec = Spec {
    words: &["volume", "create"],
    flags: &[],
    args: (1, 1),
    usage: "Usage: nodeward volume create <volume spec file>

  Creates a volume through its plugin. The file is HCL or, for a .json file, the API's shape.
  With type = \"host\" (the default): a dynamic host volume (name, plugin_id, capacity_min,
  capacity_max, capability, parameters). With type = \"csi\": a CSI volume through the
  controller of a CSI plugin running on this node (id, name, plugin_id, capacity_min,
  capacity_max, capability, mount_options, secrets, parameters, topology_request).",
    run: create,
};

const REGISTER: Spec = Spec {
    words: &["volume", "register"],
    flags: &[],
    args: (1, 1),
    usage: "Usage: nodeward volume register <volume spec file>

  Registers a volume that exists already, without creating it: an existing directory
  (host_path) as a host volume, or, with type = \"csi\", the storage a CSI plugin knows as
  external_id.",
    run: register,
};

const STATUS: Spec = Spec {
    words: &["volume", "status"],
    flags: &[bool_flag("json"), value_flag("type")],
    args: (0, 1),
    usage: "Usage: nodeward volume status [-json] [-type host|csi] [<volume id>]

  Lists the volumes, or shows one (a unique ID prefix is enough).

  -type     host or csi; without it, both.
  -json     Print the API's JSON.",
    run: status,
};

const DELETE: Spec = Spec {
    words: &["volume", "delete"],
    flags: &[bool_flag("force"), value_flag("type")],
    args: (1, 1),
    usage: "Usage: nodeward volume delete [-force] [-type host|csi] <volume id>

  Deletes a volume through its plugin, then forgets it. When the plugin fails the volume is
  kept, so the delete can be retried. A CSI volume claimed by an allocation is not deleted.

  -type     host or csi; without it, a host volume of that ID, else a CSI volume.
  -force    Host volumes: drop the volume from the node even when its plugin fails.",
    run: delete,
};

const DEREGISTER: Spec = Spec {
    words: &["volume", "deregister"],
    flags: &[bool_flag("force")],
    args: (1, 1),
    usage: "Usage: nodeward volume deregister [-force] <volume id>

  Forgets a CSI volume without its plugin: the storage stays where it is.

  -force    Forget the volume even while allocations claim it.",
    run: deregister,
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
    match request {
        VolumeRequest::Host(body) => {
            let answer = ctx
                .client
                .put(&format!("/v1/volume/host/{endpoint}"), &body)
                .map_err(|e| failed(doing, e))?;
            ctx.print(&output(&answer, &chrono::Local::now().fixed_offset()));
        }
        VolumeRequest::Csi { id, body } => {
            let path = match endpoint {
                "create" => format!("/v1/volume/csi/{}/create", enc(&id)),
                _ => format!("/v1/volume/csi/{}", enc(&id)),
            };
            let answer = ctx.client.put(&path, &body).map_err(|e| failed(doing, e))?;
            if endpoint == "create" {
                ctx.print(&volume_text::csi_create_output(&answer));
            } else {
                ctx.println("Volume registration successful");
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Host,
    Csi,
    /// No `-type`: both.
    Any,
}

fn kind(p: &Parsed) -> Result<Kind, CmdError> {
    match p.value("type") {
        None | Some("") => Ok(Kind::Any),
        Some("host") => Ok(Kind::Host),
        Some("csi") => Ok(Kind::Csi),
        Some(other) => Err(CmdError::Usage(format!(
            "unsupported volume type {other:?}: want \"host\" or \"csi\""
        ))),
    }
}

/// Whether the agent answered that it has no such volume.
fn not_found(e: &ClientError) -> bool {
    e.status() == Some(404)
}

fn status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let kind = kind(p)?;
    let Some(id) = p.args.first() else {
        return list(ctx, p, kind);
    };
    let csi_path = format!("/v1/volume/csi/{}", enc(id));
    let answer = match kind {
        Kind::Csi => ctx
            .client
            .get(&csi_path)
            .map_err(|e| failed("querying volume", e))?,
        _ => match ctx.client.get(&format!("/v1/volume/host/{}", enc(id))) {
            Ok(answer) => return host_status(ctx, p, &answer),
            Err(e) if kind == Kind::Any && not_found(&e) => match ctx.client.get(&csi_path) {
                Ok(answer) => answer,
                // Neither: the host volume API's answer says so.
                Err(csi) if not_found(&csi) => return Err(failed("querying volume", e)),
                Err(csi) => return Err(failed("querying volume", csi)),
            },
            Err(e) => return Err(failed("querying volume", e)),
        },
    };
    if p.flag("json") {
        ctx.print_json(&answer);
    } else {
        ctx.print(&volume_text::csi_volume_text(&answer));
    }
    Ok(())
}

fn list(ctx: &mut Ctx, p: &Parsed, kind: Kind) -> CmdResult {
    let query = |ctx: &mut Ctx, t: &str| {
        ctx.client
            .get(&format!("/v1/volumes?type={t}"))
            .map_err(|e| failed("querying volumes", e))
    };
    let host = match kind {
        Kind::Csi => None,
        _ => Some(query(ctx, "host")?),
    };
    let csi = match kind {
        Kind::Host => None,
        _ => Some(query(ctx, "csi")?),
    };
    if p.flag("json") {
        let json = match (host, csi) {
            (Some(h), None) => h,
            (None, Some(c)) => c,
            (h, c) => serde_json::json!({ "Host": h, "CSI": c }),
        };
        ctx.print_json(&json);
        return Ok(());
    }
    if let Some(host) = host {
        ctx.println(&host_table(&host));
    }
    if let Some(csi) = csi {
        let stubs = csi.as_array().cloned().unwrap_or_default();
        if kind == Kind::Any {
            ctx.println(&format!("\n{}", volume_text::CSI_BANNER));
        }
        if stubs.is_empty() {
            ctx.println("No CSI volumes");
        } else {
            ctx.println(&volume_text::csi_table(&stubs));
        }
    }
    Ok(())
}

fn host_table(volumes: &serde_json::Value) -> String {
    let volumes = volumes.as_array().cloned().unwrap_or_default();
    if volumes.is_empty() {
        return "No host volumes".to_string();
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
    table(&rows)
}

fn host_status(ctx: &mut Ctx, p: &Parsed, answer: &serde_json::Value) -> CmdResult {
    if p.flag("json") {
        ctx.print_json(answer);
        return Ok(());
    }
    let volume = answer.get("Volume").unwrap_or(answer);
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
    let kind = kind(p)?;
    let id = &p.args[0];
    if kind == Kind::Csi && p.flag("force") {
        return Err(CmdError::Usage(
            "-force is for host volumes; a CSI volume is forgotten without its plugin by volume deregister -force".into(),
        ));
    }
    let answer = if kind == Kind::Csi {
        csi_delete(ctx, id)?
    } else {
        let path = if p.flag("force") {
            format!("/v1/volume/host/{}?force=true", enc(id))
        } else {
            format!("/v1/volume/host/{}", enc(id))
        };
        match ctx.client.delete(&path) {
            Ok(answer) => answer,
            // Not a host volume: a CSI one, unless -force (for host volumes only) was given.
            Err(e) if kind == Kind::Any && not_found(&e) && !p.flag("force") => {
                match ctx.client.delete(&csi_delete_path(id)) {
                    Ok(answer) => answer,
                    // Neither: the host volume API's answer says so.
                    Err(csi) if not_found(&csi) => return Err(failed("deleting volume", e)),
                    Err(csi) => return Err(failed("deleting volume", csi)),
                }
            }
            Err(e) => return Err(failed("deleting volume", e)),
        }
    };
    // The agent resolves a prefix; say which volume went.
    let deleted = answer["VolumeID"].as_str().unwrap_or(id);
    ctx.println(&format!("Successfully deleted volume {deleted:?}!"));
    Ok(())
}

fn csi_delete_path(id: &str) -> String {
    format!("/v1/volume/csi/{}/delete", enc(id))
}

fn csi_delete(ctx: &mut Ctx, id: &str) -> Result<serde_json::Value, CmdError> {
    ctx.client
        .delete(&csi_delete_path(id))
        .map_err(|e| failed("deleting volume", e))
}

fn deregister(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = &p.args[0];
    let path = if p.flag("force") {
        format!("/v1/volume/csi/{}?force=true", enc(id))
    } else {
        format!("/v1/volume/csi/{}", enc(id))
    };
    let answer = ctx
        .client
        .delete(&path)
        .map_err(|e| failed("deregistering volume", e))?;
    let gone = answer["VolumeID"].as_str().unwrap_or(id);
    ctx.println(&format!("Successfully deregistered volume {gone:?}!"));
    Ok(())
}
