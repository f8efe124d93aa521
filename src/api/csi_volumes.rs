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

use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::ids;
use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::csi::volumes::spec::{self, ParsedCsiVolume};
use crate::csi::volumes::{ClaimMode, CsiVolumeError, CsiVolumeManager, CsiVolumeView};

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
    json!({ "Volumes": [volume_json(view)], "Warnings": warnings.join("\n") })
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

/// `DELETE /v1/volume/csi/:id[?force=true]`: forgets the volume, without its plugin.
pub fn deregister(volumes: &CsiVolumeManager, id: &str, force: bool) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let id = volumes.deregister(&id, force)?;
    Ok(json!({ "VolumeID": id }))
}

/// `DELETE /v1/volume/csi/:id/delete`: the plugin's `DeleteVolume`, then forgets the volume.
pub fn delete(volumes: &CsiVolumeManager, id: &str) -> Result<Value, ApiError> {
    let id = volume_id(id, &volumes.ids())?;
    let id = volumes.delete(&id)?;
    Ok(json!({ "VolumeID": id }))
}

/// Resolves a volume ID or a unique prefix of one ([`ids::CSI_VOLUME`]).
pub fn volume_id(prefix: &str, ids: &[String]) -> Result<String, ApiError> {
    ids::resolve(prefix, ids, &ids::CSI_VOLUME)
}

/// The plugin health fields both shapes share.
fn plugin_fields(v: &CsiVolumeView, out: &mut Map<String, Value>) {
    let p = v.plugin.clone().unwrap_or_default();
    let provider = if p.provider.is_empty() {
        &v.record.provider
    } else {
        &p.provider
    };
    out.insert("Schedulable".into(), v.schedulable().into());
    out.insert("PluginID".into(), v.record.plugin_id.clone().into());
    out.insert("Provider".into(), provider.clone().into());
    out.insert("ControllerRequired".into(), p.controller_required.into());
    out.insert("ControllersHealthy".into(), p.controllers_healthy.into());
    out.insert("ControllersExpected".into(), p.controllers_expected.into());
    out.insert("NodesHealthy".into(), p.nodes_healthy.into());
    out.insert("NodesExpected".into(), p.nodes_expected.into());
}

fn modes(v: &CsiVolumeView) -> (&'static str, &'static str) {
    v.modes().map_or(("", ""), |(access, attach)| {
        (access.as_str(), attach.as_str())
    })
}

/// A volume of `GET /v1/volumes?type=csi`: Nomad's `CSIVolListStub`.
fn stub_json(v: &CsiVolumeView) -> Value {
    let r = &v.record;
    let (access, attach) = modes(v);
    let readers = r
        .claims
        .iter()
        .filter(|c| c.mode == ClaimMode::Read)
        .count();
    let mut out = Map::new();
    out.insert("ID".into(), r.id.clone().into());
    out.insert("Namespace".into(), r.namespace.clone().into());
    out.insert("Name".into(), r.name.clone().into());
    out.insert("ExternalID".into(), r.external_id.clone().into());
    out.insert("Topologies".into(), json!(r.topologies));
    out.insert("AccessMode".into(), access.into());
    out.insert("AttachmentMode".into(), attach.into());
    out.insert("CurrentReaders".into(), readers.into());
    out.insert("CurrentWriters".into(), (r.claims.len() - readers).into());
    plugin_fields(v, &mut out);
    out.insert("CreateIndex".into(), 0.into());
    out.insert("ModifyIndex".into(), 0.into());
    Value::Object(out)
}

/// One volume: Nomad's `CSIVolume`, with its claims as `ReadAllocs`, `WriteAllocs` and
/// `Allocations`. Secrets are never shown: each value reads `[REDACTED]`.
pub fn volume_json(v: &CsiVolumeView) -> Value {
    let r = &v.record;
    let (access, attach) = modes(v);
    let alloc = |c: &crate::csi::volumes::CsiClaimRecord| json!({ "ID": c.alloc_id, "JobID": c.job_id, "TaskGroup": c.task_group });
    let claims_of = |mode: ClaimMode| {
        Value::Object(
            r.claims
                .iter()
                .filter(|c| c.mode == mode)
                .map(|c| (c.alloc_id.clone(), alloc(c)))
                .collect(),
        )
    };
    let secrets: Map<String, Value> = r
        .secrets
        .keys()
        .map(|k| (k.clone(), Value::String("[REDACTED]".into())))
        .collect();
    let mut out = Map::new();
    out.insert("ID".into(), r.id.clone().into());
    out.insert("Name".into(), r.name.clone().into());
    out.insert("ExternalID".into(), r.external_id.clone().into());
    out.insert("Namespace".into(), r.namespace.clone().into());
    out.insert("Topologies".into(), json!(r.topologies));
    out.insert("AccessMode".into(), access.into());
    out.insert("AttachmentMode".into(), attach.into());
    out.insert("MountOptions".into(), json!(r.mount_options));
    out.insert("Secrets".into(), Value::Object(secrets));
    out.insert("Parameters".into(), json!(r.parameters));
    out.insert("Context".into(), json!(r.context));
    out.insert("Capacity".into(), r.capacity.into());
    out.insert(
        "RequestedCapacityMin".into(),
        r.requested_capacity_min.into(),
    );
    out.insert(
        "RequestedCapacityMax".into(),
        r.requested_capacity_max.into(),
    );
    out.insert(
        "RequestedCapabilities".into(),
        json!(r.requested_capabilities),
    );
    out.insert("RequestedTopologies".into(), json!(r.requested_topologies));
    out.insert("CloneID".into(), "".into());
    out.insert("SnapshotID".into(), "".into());
    out.insert("ReadAllocs".into(), claims_of(ClaimMode::Read));
    out.insert("WriteAllocs".into(), claims_of(ClaimMode::Write));
    out.insert(
        "Allocations".into(),
        Value::Array(r.claims.iter().map(alloc).collect()),
    );
    plugin_fields(v, &mut out);
    let version = v
        .plugin
        .as_ref()
        .map(|p| p.version.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| r.provider_version.clone());
    out.insert("ProviderVersion".into(), version.into());
    out.insert("ResourceExhausted".into(), Value::Null);
    out.insert("CreateIndex".into(), 0.into());
    out.insert("ModifyIndex".into(), 0.into());
    out.insert("CreateTime".into(), r.create_time.into());
    out.insert("ModifyTime".into(), r.modify_time.into());
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::registry::PluginSummary;
    use crate::csi::volumes::registry::tests::record;
    use crate::csi::volumes::{CsiAccessMode, CsiClaimRecord};
    use crate::records::AttachmentMode;

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
