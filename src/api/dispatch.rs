//! Routes that make child jobs of templates (agent.md "HTTP API"; Nomad's `api/jobs.go`):
//! `POST /v1/job/:id/periodic/force` (launch a periodic job's child now) and
//! `POST /v1/job/:id/dispatch` (dispatch a parameterized job: `{"Payload": base64, "Meta": {}}`).

use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::ids::{self, ID};
use super::router::{optional_json_body, ApiError, Request, Response, Router};
use crate::agent::Agent;
use crate::alloc::DispatchRequest;

/// The body of `POST /v1/job/:id/dispatch`, as Nomad's `JobDispatchRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DispatchBody {
    #[serde(rename = "JobID", default)]
    _job_id: Option<String>,
    /// Base64, as Go encodes a `[]byte`.
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    meta: Option<BTreeMap<String, String>>,
}

impl DispatchBody {
    /// The request body as the domain's request: the payload decoded.
    pub fn parse(body: &[u8]) -> Result<DispatchRequest, ApiError> {
        let body: DispatchBody = optional_json_body(body)?;
        let payload = match body.payload.as_deref().unwrap_or("") {
            "" => Vec::new(),
            text => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| ApiError::BadRequest(format!("Payload is not valid base64: {e}")))?,
        };
        Ok(DispatchRequest {
            payload,
            meta: body.meta.unwrap_or_default(),
        })
    }
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.post("/v1/job/:id/periodic/force", move |req: &Request| {
        let id = ids::resolve(req.param("id"), a.allocs.job_ids(), &ID)?;
        let launched = a.allocs.launch_periodic(&id, now_secs(), true)?;
        // A child of this second exists already (a second force within it): no evaluation.
        Response::json(json!({
            "EvalID": launched.as_ref().map(|l| l.eval_id.as_str()).unwrap_or(""),
            "EvalCreateIndex": 0,
            "Index": 0,
        }))
    });
    let a = agent.clone();
    r.post("/v1/job/:id/dispatch", move |req: &Request| {
        let id = ids::resolve(req.param("id"), a.allocs.job_ids(), &ID)?;
        let request = DispatchBody::parse(req.body())?;
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let launched = a.allocs.dispatch(&id, request, now_secs(), suffix)?;
        Response::json(json!({
            "DispatchedJobID": launched.job_id,
            "EvalID": launched.eval_id,
            "EvalCreateIndex": 0,
            "JobCreateIndex": 0,
            "Index": 0,
        }))
    });
}
