//! Routes that make child jobs of templates (agent.md "HTTP API"; Nomad's `api/jobs.go`):
//! `POST /v1/job/:id/periodic/force` (launch a periodic job's child now) and
//! `POST /v1/job/:id/dispatch` (dispatch a parameterized job: `{"Payload": base64, "Meta": {}}`).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
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
        Response::json(Forced {
            eval_create_index: 0,
            eval_id: launched.as_ref().map_or("", |l| l.eval_id.as_str()),
            index: 0,
        })
    });
    let a = agent.clone();
    r.post("/v1/job/:id/dispatch", move |req: &Request| {
        let id = ids::resolve(req.param("id"), a.allocs.job_ids(), &ID)?;
        let request = DispatchBody::parse(req.body())?;
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let launched = a.allocs.dispatch(&id, request, now_secs(), suffix)?;
        Response::json(Dispatched {
            dispatched_job_id: &launched.job_id,
            eval_create_index: 0,
            eval_id: &launched.eval_id,
            index: 0,
            job_create_index: 0,
        })
    });
}

// Each answer's fields in name order, as they have always been sent. nodeward keeps no Raft
// indexes: they are 0.

/// `POST /v1/job/:id/periodic/force`: the launched child's evaluation, `""` when a child of this
/// second exists already.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Forced<'a> {
    eval_create_index: u64,
    #[serde(rename = "EvalID")]
    eval_id: &'a str,
    index: u64,
}

/// `POST /v1/job/:id/dispatch`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Dispatched<'a> {
    #[serde(rename = "DispatchedJobID")]
    dispatched_job_id: &'a str,
    eval_create_index: u64,
    #[serde(rename = "EvalID")]
    eval_id: &'a str,
    index: u64,
    job_create_index: u64,
}
