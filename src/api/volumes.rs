//! Host volume routes (host-volumes.md "API and CLI"): thin calls into the volume manager, which
//! produces Nomad-shaped JSON.

use std::sync::Arc;

use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::volume::manager::VolumeError;

impl From<VolumeError> for ApiError {
    fn from(e: VolumeError) -> ApiError {
        let message = e.to_string();
        match e.status() {
            400 => ApiError::BadRequest(message),
            404 => ApiError::NotFound(message),
            _ => ApiError::Internal(message),
        }
    }
}

pub fn routes(r: &mut Router, agent: Arc<Agent>) {
    let a = agent.clone();
    r.put("/v1/volume/host/create", move |req| {
        Response::json(a.host_volumes.create_json(req.body())?)
    });
    let a = agent.clone();
    r.put("/v1/volume/host/register", move |req| {
        Response::json(a.host_volumes.register_json(req.body())?)
    });
    let a = agent.clone();
    r.get("/v1/volumes", move |req| match req.query("type") {
        None | Some("") | Some("host") => Response::json(a.host_volumes.list_json()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unsupported volume type {other:?}: nodeward manages host volumes"
        ))),
    });
    let a = agent.clone();
    r.get("/v1/volume/host/:id", move |req| {
        Response::json(a.host_volumes.get_json(req.param("id"))?)
    });
    r.delete("/v1/volume/host/:id", move |req| {
        let force = req.query_bool("force")?;
        Response::json(agent.host_volumes.delete_json(req.param("id"), force)?)
    });
}
