//! CSI volume routes (csi-volumes.md "Volumes"), in Nomad's shapes: each parses its request,
//! resolves an ID prefix, calls the CSI volume manager with full IDs and a parsed spec, and
//! encodes what it answers (views, typed errors) as Nomad's JSON (`CSIVolume`,
//! `CSIVolListStub`) and an HTTP status. `GET /v1/volumes?type=csi` is served by
//! `api::volumes`, which lists through [`list`].
//!
//! - `PUT /v1/volume/csi/:id/create` and `PUT /v1/volume/csi/:id` (register), body
//!   `{"Volumes": [{...}]}` → `{"Volumes": [<volume>], "Warnings": ""}`;
//! - `GET /v1/volume/csi/:id` → the volume;
//! - `DELETE /v1/volume/csi/:id[?force=true]` (deregister) and `DELETE /v1/volume/csi/:id/delete`
//!   (the plugin's `DeleteVolume`) → `{"VolumeID": "<id>"}`.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::answers::VolumeId;
use super::ids;
use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::csi::volumes::spec::{self, ParsedCsiVolume};
use crate::csi::volumes::{
    ClaimMode, CsiClaimRecord, CsiVolumeError, CsiVolumeManager, CsiVolumeView,
};
use crate::records::{CsiCapability, CsiMountOptions, CsiTopologyRequest, Topology};

/// The caller's mistakes (a bad spec, an unknown or unhealthy plugin, an ID taken, a volume in
/// use) are 400, unknown IDs 404, a call cancelled by the shutdown 503, failures of plugins or of
/// the state file 500.
impl From<CsiVolumeError> for ApiError {
    fn from(e: CsiVolumeError) -> ApiError {
        let message = e.to_string();
        match e {
            CsiVolumeError::NotFound(_) => ApiError::NotFound(message),
            CsiVolumeError::Plugin { ref source, .. } if source.is_cancelled() => {
                ApiError::Unavailable(message)
            }
            e if e.is_user_error() => ApiError::BadRequest(message),
            _ => ApiError::Internal(message),
        }
    }
}

pub fn routes(r: &mut Router, agent: Arc<Agent>) {
    let a = agent.clone();
    r.put("/v1/volume/csi/:id/create", move |req| {
        Response::json(create(&a.csi_volumes, req.param("id"), req.body())?)
    });
    let a = agent.clone();
    r.put("/v1/volume/csi/:id", move |req| {
        Response::json(register(&a.csi_volumes, req.param("id"), req.body())?)
    });
    let a = agent.clone();
    r.get("/v1/volume/csi/:id", move |req| {
        Response::json(get(&a.csi_volumes, req.param("id"))?)
    });
    let a = agent.clone();
    r.delete("/v1/volume/csi/:id", move |req| {
        let force = req.query_bool("force")?;
        Response::json(deregister(&a.csi_volumes, req.param("id"), force)?)
    });
    r.delete("/v1/volume/csi/:id/delete", move |req| {
        Response::json(delete(&agent.csi_volumes, req.param("id"))?)
    });
}

/// The body's one volume, with the path's ID when the body names none; a body that names
/// another volume than the path is refused.
fn parse(path_id: &str, body: &[u8]) -> Result<ParsedCsiVolume, ApiError> {
    let bad = |e: &dyn std::fmt::Display| ApiError::BadRequest(e.to_string());
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON in request body: {e}")))?;
    let volume = match value.get_mut("Volumes") {
        Some(Value::Array(volumes)) if volumes.len() == 1 => volumes.get_mut(0),
        Some(_) => None,
        None => Some(&mut value),
    };
    if let Some(Value::Object(v)) = volume {
        match v.get("ID").and_then(Value::as_str) {
            None | Some("") => {
                v.insert("ID".into(), Value::String(path_id.to_string()));
            }
            Some(id) if id != path_id => {
                return Err(ApiError::BadRequest(format!(
                    "volume ID {id:?} in the body does not match {path_id:?} in the path"
                )))
            }
            Some(_) => {}
        }
    }
    let body = serde_json::to_vec(&value).map_err(|e| bad(&e))?;
    spec::parse_json(&body).map_err(|e| bad(&e))
}

/// `PUT /v1/volume/csi/:id/create`.
pub fn create(volumes: &CsiVolumeManager, id: &str, body: &[u8]) -> Result<Value, ApiError> {
    let parsed = parse(id, body)?;
    let view = volumes.create(&parsed.spec)?;
    Ok(answer(&view, &parsed.warnings))
}

/// `PUT /v1/volume/csi/:id`: registers a volume that exists.
pub fn register(volumes: &CsiVolumeManager, id: &str, body: &[u8]) -> Result<Value, ApiError> {
    let parsed = parse(id, body)?;
    let view = volumes.register(&parsed.spec)?;
    Ok(answer(&view, &parsed.warnings))
}

fn answer(view: &CsiVolumeView, warnings: &[String]) -> Value {
    to_value(Written {
        volumes: [Volume::of(view)],
        warnings: warnings.join("\n"),
    })
}

/// `GET /v1/volumes?type=csi`: Nomad's `CSIVolListStub`s, ordered by ID.
pub fn list(volumes: &CsiVolumeManager) -> Value {
    Value::Array(volumes.views().iter().map(stub_json).collect())
}

/// `GET /v1/volume/csi/:id` (a unique prefix works).
pub fn get(volumes: &CsiVolumeManager, id: &str) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let view = volumes.view(&id).ok_or(CsiVolumeError::NotFound(id))?;
    Ok(volume_json(&view))
}

/// `DELETE /v1/volume/csi/:id[?force=true]`: forgets a volume no allocation claims.
pub fn deregister(volumes: &CsiVolumeManager, id: &str, force: bool) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let id = volumes.deregister(&id, force)?;
    Ok(to_value(VolumeId { volume_id: id }))
}

/// `DELETE /v1/volume/csi/:id/delete`: the plugin's `DeleteVolume`, then forgets the volume.
pub fn delete(volumes: &CsiVolumeManager, id: &str) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let id = volumes.delete(&id)?;
    Ok(to_value(VolumeId { volume_id: id }))
}

/// Resolves a volume ID or a unique prefix of one ([`ids::CSI_VOLUME`]).
pub fn volume_id(prefix: &str, ids: &[String]) -> Result<String, ApiError> {
    ids::resolve(prefix, ids, &ids::CSI_VOLUME)
}

/// A typed answer as a JSON value (every object's keys in name order, as these answers have
/// always had them).
fn to_value(answer: impl Serialize) -> Value {
    serde_json::to_value(answer).unwrap_or(Value::Null)
}

/// The answer of a create or a register.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Written<'a> {
    volumes: [Volume<'a>; 1],
    warnings: String,
}

/// The plugin health fields both shapes share.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PluginFields<'a> {
    schedulable: bool,
    #[serde(rename = "PluginID")]
    plugin_id: &'a str,
    provider: String,
    controller_required: bool,
    controllers_healthy: usize,
    controllers_expected: usize,
    nodes_healthy: usize,
    nodes_expected: usize,
}

impl<'a> PluginFields<'a> {
    fn of(v: &'a CsiVolumeView) -> PluginFields<'a> {
        let p = v.plugin.clone().unwrap_or_default();
        let provider = if p.provider.is_empty() {
            v.record.provider.clone()
        } else {
            p.provider
        };
        PluginFields {
            schedulable: v.schedulable(),
            plugin_id: &v.record.plugin_id,
            provider,
            controller_required: p.controller_required,
            controllers_healthy: p.controllers_healthy,
            controllers_expected: p.controllers_expected,
            nodes_healthy: p.nodes_healthy,
            nodes_expected: p.nodes_expected,
        }
    }
}

fn modes(v: &CsiVolumeView) -> (&'static str, &'static str) {
    v.modes().map_or(("", ""), |(access, attach)| {
        (access.as_str(), attach.as_str())
    })
}

/// A volume of `GET /v1/volumes?type=csi`: Nomad's `CSIVolListStub`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Stub<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    namespace: &'a str,
    name: &'a str,
    #[serde(rename = "ExternalID")]
    external_id: &'a str,
    topologies: &'a [Topology],
    access_mode: &'static str,
    attachment_mode: &'static str,
    current_readers: usize,
    current_writers: usize,
    #[serde(flatten)]
    plugin: PluginFields<'a>,
    /// nodeward keeps no Raft indexes: always 0.
    create_index: u64,
    modify_index: u64,
}

impl<'a> Stub<'a> {
    fn of(v: &'a CsiVolumeView) -> Stub<'a> {
        let r = &v.record;
        let (access_mode, attachment_mode) = modes(v);
        let readers = r
            .claims
            .iter()
            .filter(|c| c.mode == ClaimMode::Read)
            .count();
        Stub {
            id: &r.id,
            namespace: &r.namespace,
            name: &r.name,
            external_id: &r.external_id,
            topologies: &r.topologies,
            access_mode,
            attachment_mode,
            current_readers: readers,
            current_writers: r.claims.len() - readers,
            plugin: PluginFields::of(v),
            create_index: 0,
            modify_index: 0,
        }
    }
}

/// A claim as a volume shows it, in `ReadAllocs`, `WriteAllocs` and `Allocations`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ClaimAlloc<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    task_group: &'a str,
}

impl<'a> ClaimAlloc<'a> {
    fn of(c: &'a CsiClaimRecord) -> ClaimAlloc<'a> {
        ClaimAlloc {
            id: &c.alloc_id,
            job_id: &c.job_id,
            task_group: &c.task_group,
        }
    }
}

/// One volume: Nomad's `CSIVolume`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Volume<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    name: &'a str,
    #[serde(rename = "ExternalID")]
    external_id: &'a str,
    namespace: &'a str,
    topologies: &'a [Topology],
    access_mode: &'static str,
    attachment_mode: &'static str,
    mount_options: &'a Option<CsiMountOptions>,
    /// Each value reads `[REDACTED]`.
    secrets: BTreeMap<&'a str, &'static str>,
    parameters: &'a BTreeMap<String, String>,
    context: &'a BTreeMap<String, String>,
    capacity: u64,
    requested_capacity_min: u64,
    requested_capacity_max: u64,
    requested_capabilities: &'a [CsiCapability],
    requested_topologies: &'a Option<CsiTopologyRequest>,
    #[serde(rename = "CloneID")]
    clone_id: &'static str,
    #[serde(rename = "SnapshotID")]
    snapshot_id: &'static str,
    read_allocs: BTreeMap<&'a str, ClaimAlloc<'a>>,
    write_allocs: BTreeMap<&'a str, ClaimAlloc<'a>>,
    allocations: Vec<ClaimAlloc<'a>>,
    #[serde(flatten)]
    plugin: PluginFields<'a>,
    provider_version: String,
    /// Nomad's field; nodeward never sets it.
    resource_exhausted: Option<()>,
    create_index: u64,
    modify_index: u64,
    create_time: i64,
    modify_time: i64,
}

impl<'a> Volume<'a> {
    fn of(v: &'a CsiVolumeView) -> Volume<'a> {
        let r = &v.record;
        let (access_mode, attachment_mode) = modes(v);
        let claims_of = |mode: ClaimMode| {
            r.claims
                .iter()
                .filter(|c| c.mode == mode)
                .map(|c| (c.alloc_id.as_str(), ClaimAlloc::of(c)))
                .collect()
        };
        let provider_version = v
            .plugin
            .as_ref()
            .map(|p| p.version.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| r.provider_version.clone());
        Volume {
            id: &r.id,
            name: &r.name,
            external_id: &r.external_id,
            namespace: &r.namespace,
            topologies: &r.topologies,
            access_mode,
            attachment_mode,
            mount_options: &r.mount_options,
            secrets: r
                .secrets
                .keys()
                .map(|k| (k.as_str(), "[REDACTED]"))
                .collect(),
            parameters: &r.parameters,
            context: &r.context,
            capacity: r.capacity,
            requested_capacity_min: r.requested_capacity_min,
            requested_capacity_max: r.requested_capacity_max,
            requested_capabilities: &r.requested_capabilities,
            requested_topologies: &r.requested_topologies,
            clone_id: "",
            snapshot_id: "",
            read_allocs: claims_of(ClaimMode::Read),
            write_allocs: claims_of(ClaimMode::Write),
            allocations: r.claims.iter().map(ClaimAlloc::of).collect(),
            plugin: PluginFields::of(v),
            provider_version,
            resource_exhausted: None,
            create_index: 0,
            modify_index: 0,
            create_time: r.create_time,
            modify_time: r.modify_time,
        }
    }
}

/// One volume: Nomad's `CSIVolume`, with its claims as `ReadAllocs`, `WriteAllocs` and
/// `Allocations`. Secrets are never shown: each value reads `[REDACTED]`.
pub fn volume_json(v: &CsiVolumeView) -> Value {
    to_value(Volume::of(v))
}

/// A volume of `GET /v1/volumes?type=csi`: Nomad's `CSIVolListStub`.
fn stub_json(v: &CsiVolumeView) -> Value {
    to_value(Stub::of(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::registry::PluginSummary;
    use crate::csi::volumes::registry::tests::record;
    use crate::csi::volumes::{CsiAccessMode, CsiClaimRecord};
    use crate::records::AttachmentMode;
    use serde_json::json;

    #[test]
    fn a_volume_in_nomads_shape_without_its_secrets() {
        let mut r = record("data", &[CsiAccessMode::SingleNodeWriter]);
        r.secrets.insert("token".into(), "s3cret".into());
        r.capacity = 1 << 20;
        r.claims.push(CsiClaimRecord {
            alloc_id: "a1".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            mode: ClaimMode::Write,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: AttachmentMode::FileSystem,
            progress: Default::default(),
            publish_context: Default::default(),
        });
        let view = CsiVolumeView {
            record: r,
            plugin: Some(PluginSummary {
                id: "hostpath".into(),
                provider: "nodeward.test.csi".into(),
                version: "1.2.3".into(),
                controller_required: true,
                controllers_healthy: 1,
                controllers_expected: 1,
                nodes_healthy: 1,
                nodes_expected: 1,
            }),
        };
        let v = volume_json(&view);
        assert_eq!(v["ID"], "data");
        assert_eq!(v["ExternalID"], "hp-data");
        assert_eq!(v["Secrets"]["token"], "[REDACTED]");
        assert!(!v.to_string().contains("s3cret"));
        assert_eq!(v["Schedulable"], true);
        assert_eq!(v["Provider"], "nodeward.test.csi");
        assert_eq!(v["ProviderVersion"], "1.2.3");
        assert_eq!(v["AccessMode"], "single-node-writer");
        assert_eq!(v["AttachmentMode"], "file-system");
        assert_eq!(v["WriteAllocs"]["a1"]["JobID"], "web");
        assert!(v["ReadAllocs"].as_object().unwrap().is_empty());
        assert_eq!(v["Capacity"], 1 << 20);
        assert_eq!(
            v["RequestedCapabilities"][0],
            json!({"AccessMode": "single-node-writer", "AttachmentMode": "file-system"})
        );
        let stub = stub_json(&view);
        assert_eq!(
            (
                stub["CurrentWriters"].clone(),
                stub["CurrentReaders"].clone()
            ),
            (json!(1), json!(0))
        );
        assert_eq!(stub["ControllersHealthy"], 1);

        // A plugin that is gone: nothing is schedulable, the recorded provider stays.
        let gone = CsiVolumeView {
            plugin: None,
            ..view
        };
        let v = volume_json(&gone);
        assert_eq!(v["Schedulable"], false);
        assert_eq!(v["NodesHealthy"], 0);
    }

    #[test]
    fn the_path_gives_the_id_and_must_match_the_body() {
        let vol = |id: &str| {
            json!({"Volumes": [{"ID": id, "PluginID": "p",
                "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]}]})
            .to_string()
        };
        assert_eq!(parse("data", vol("").as_bytes()).unwrap().spec.id, "data");
        assert_eq!(
            parse("data", vol("data").as_bytes()).unwrap().spec.id,
            "data"
        );
        let err = parse("data", vol("other").as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume ID \"other\" in the body does not match \"data\" in the path"
        );
        assert_eq!(err.status(), 400);
        assert_eq!(parse("data", b"{").unwrap_err().status(), 400);
        assert_eq!(
            volume_id("x", &["data".to_string()])
                .unwrap_err()
                .to_string(),
            "volume not found: x"
        );
    }
}
