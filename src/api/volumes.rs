//! Host volume routes (host-volumes.md "API and CLI"): each parses its request, resolves an ID
//! prefix, calls the volume manager with full IDs and a parsed spec, and encodes what it answers
//! (records, views, typed errors) as Nomad's JSON and an HTTP status. Also the node's
//! `HostVolumes` for `GET /v1/node/:id`.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::ids;
use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::records::{Capability, VolumeRecord, VolumeState};
use crate::volume::spec::{self, ParsedVolume};
use crate::volume::{VolumeError, VolumeManager, VolumeView};

/// The caller's mistakes (bad spec, unknown plugin, name taken, busy volume) are 400, unknown IDs
/// 404, failures of plugins, the node or the state file 500.
impl From<VolumeError> for ApiError {
    fn from(e: VolumeError) -> ApiError {
        let message = e.to_string();
        match e {
            VolumeError::Invalid(_)
            | VolumeError::NameExists
            | VolumeError::Busy(_)
            | VolumeError::HostPath { .. } => ApiError::BadRequest(message),
            VolumeError::Plugin(e) if e.is_user_error() => ApiError::BadRequest(message),
            VolumeError::NotFound(_) => ApiError::NotFound(message),
            VolumeError::Plugin(_) | VolumeError::State { .. } | VolumeError::Setup { .. } => {
                ApiError::Internal(message)
            }
        }
    }
}

pub fn routes(r: &mut Router, agent: Arc<Agent>) {
    let a = agent.clone();
    r.put("/v1/volume/host/create", move |req| {
        Response::json(create(&a.host_volumes, req.body())?)
    });
    let a = agent.clone();
    r.put("/v1/volume/host/register", move |req| {
        Response::json(register(&a.host_volumes, req.body())?)
    });
    let a = agent.clone();
    r.get("/v1/volumes", move |req| match req.query("type") {
        None | Some("") | Some("host") => Response::json(list(&a.host_volumes)),
        Some("csi") => Response::json(super::csi_volumes::list(&a.csi_volumes)),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unsupported volume type {other:?}: want host or csi"
        ))),
    });
    let a = agent.clone();
    r.get("/v1/volume/host/:id", move |req| {
        Response::json(get(&a.host_volumes, req.param("id"))?)
    });
    r.delete("/v1/volume/host/:id", move |req| {
        let force = req.query_bool("force")?;
        Response::json(delete(&agent.host_volumes, req.param("id"), force)?)
    });
}

/// A request body `{"Volume": {...}}` as a validated spec (and the warnings to answer with).
fn parse(body: &[u8]) -> Result<ParsedVolume, ApiError> {
    spec::parse_json(body).map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// `PUT /v1/volume/host/create`: body `{"Volume": {...}}`.
pub fn create(volumes: &VolumeManager, body: &[u8]) -> Result<Value, ApiError> {
    let parsed = parse(body)?;
    let record = volumes.create(&parsed.spec)?;
    Ok(answer(volumes, &record.id, &parsed.warnings))
}

/// `PUT /v1/volume/host/register`: body `{"Volume": {...}}`.
pub fn register(volumes: &VolumeManager, body: &[u8]) -> Result<Value, ApiError> {
    let parsed = parse(body)?;
    let record = volumes.register(&parsed.spec)?;
    Ok(answer(volumes, &record.id, &parsed.warnings))
}

/// `{"Volume": <the volume as it is now>, "Warnings": "<lines>"}`.
fn answer(volumes: &VolumeManager, id: &str, warnings: &[String]) -> Value {
    let volume = volumes
        .view(id)
        .map(|v| volume_json(&v))
        .unwrap_or(Value::Null);
    serde_json::to_value(Written {
        volume,
        warnings: warnings.join("\n"),
    })
    .unwrap_or_default()
}

/// The answer of a create or a register.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Written {
    volume: Value,
    warnings: String,
}

/// `GET /v1/volumes?type=host`: the stubs, sorted by name.
pub fn list(volumes: &VolumeManager) -> Value {
    Value::Array(
        volumes
            .volumes()
            .iter()
            .map(|(record, state, _)| stub_json(record, *state))
            .collect(),
    )
}

/// `GET /v1/volume/host/:id` (a unique prefix works).
pub fn get(volumes: &VolumeManager, id: &str) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let view = volumes.view(&id).ok_or(VolumeError::NotFound(id))?;
    Ok(volume_json(&view))
}

/// `DELETE /v1/volume/host/:id[?force=true]` (a unique prefix works): answers
/// `{"VolumeID": "<full id>"}`.
pub fn delete(volumes: &VolumeManager, id: &str, force: bool) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let id = volumes.delete(&id, force)?;
    serde_json::to_value(super::answers::VolumeId { volume_id: id })
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// `HostVolumes` of `GET /v1/node/:id`: Nomad's `ClientHostVolumeConfig` by volume name.
pub fn host_volumes_json(volumes: &VolumeManager) -> Value {
    serde_json::to_value(volumes.host_volumes()).unwrap_or_default()
}

/// Resolves a volume ID or a unique prefix of one against `ids`, in the volume API's words
/// ([`ids::HOST_VOLUME`]).
pub fn volume_id(prefix: &str, ids: &[String]) -> Result<String, ApiError> {
    ids::resolve(prefix, ids, &ids::HOST_VOLUME)
}

/// A volume of `GET /v1/volumes`: Nomad's `HostVolumeStub`.
fn stub_json(r: &VolumeRecord, state: VolumeState) -> Value {
    serde_json::to_value(Stub {
        identity: Identity::of(r),
        capacity_bytes: r.capacity_bytes,
        state: state.as_str(),
    })
    .unwrap_or_default()
}

/// What both shapes of a volume begin with: who it is and where.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Identity<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    name: &'a str,
    namespace: &'a str,
    #[serde(rename = "PluginID")]
    plugin_id: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'a str,
    node_pool: &'a str,
}

impl<'a> Identity<'a> {
    fn of(r: &'a VolumeRecord) -> Identity<'a> {
        Identity {
            id: &r.id,
            name: &r.name,
            namespace: &r.namespace,
            plugin_id: &r.plugin_id,
            node_id: &r.node_id,
            node_pool: &r.node_pool,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Stub<'a> {
    #[serde(flatten)]
    identity: Identity<'a>,
    capacity_bytes: u64,
    state: &'static str,
}

/// One volume: Nomad's `HostVolume`, with the allocations that use it.
fn volume_json(v: &VolumeView) -> Value {
    let r = &v.record;
    serde_json::to_value(Volume {
        identity: Identity::of(r),
        requested_capacity_min_bytes: r.requested_capacity_min_bytes,
        requested_capacity_max_bytes: r.requested_capacity_max_bytes,
        requested_capabilities: &r.requested_capabilities,
        parameters: &r.parameters,
        host_path: &r.host_path,
        capacity_bytes: r.capacity_bytes,
        state: v.state.as_str(),
        status_description: &v.status,
        create_time: r.create_time,
        modify_time: r.modify_time,
        allocations: v.allocations.iter().map(|id| VolumeAlloc { id }).collect(),
    })
    .unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Volume<'a> {
    #[serde(flatten)]
    identity: Identity<'a>,
    requested_capacity_min_bytes: u64,
    requested_capacity_max_bytes: u64,
    requested_capabilities: &'a [Capability],
    parameters: &'a BTreeMap<String, String>,
    host_path: &'a str,
    capacity_bytes: u64,
    state: &'static str,
    status_description: &'a str,
    create_time: i64,
    modify_time: i64,
    allocations: Vec<VolumeAlloc<'a>>,
}

/// An allocation that uses a volume.
#[derive(Serialize)]
struct VolumeAlloc<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_resolve_by_unique_prefix() {
        let ids: Vec<String> = ["abc1", "abc2", "abd"].map(String::from).to_vec();
        assert_eq!(volume_id("abc1", &ids).unwrap(), "abc1");
        assert_eq!(volume_id("abd", &ids).unwrap(), "abd");
        assert_eq!(volume_id("abc2", &ids).unwrap(), "abc2");
        let err = volume_id("abc", &ids).unwrap_err();
        assert_eq!(
            err.to_string(),
            "prefix \"abc\" matches several volumes: abc1, abc2"
        );
        assert_eq!(err.status(), 400);
        assert_eq!(volume_id("x", &ids).unwrap_err().status(), 404);
        assert_eq!(volume_id("", &ids).unwrap_err().status(), 404);
        assert_eq!(
            volume_id("x", &ids).unwrap_err().to_string(),
            "host volume \"x\" not found"
        );
    }
}
