//! CSI plugin routes: `GET /v1/plugins?type=csi` and `GET /v1/plugin/csi/:id`.

use std::sync::Arc;

use super::router::{ApiError, Response, Router};
use crate::agent::Agent;

pub fn routes(r: &mut Router, agent: Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/plugins", move |req| match req.query("type") {
        None | Some("") | Some("csi") => Response::json(a.csi.plugins_json()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unsupported plugin type {other:?}: nodeward lists csi plugins"
        ))),
    });
    r.get("/v1/plugin/csi/:id", move |req| {
        let id = req.param("id");
        let plugin = agent
            .csi
            .plugin_json(id)
            .ok_or_else(|| ApiError::NotFound(format!("plugin {id:?} not found")))?;
        Response::json(plugin)
    });
}
