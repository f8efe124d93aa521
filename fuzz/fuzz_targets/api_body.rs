//! The API's request parsing on arbitrary input. The first byte selects what the rest is (the seed
//! corpus uses the digits):
//!
//! - `0`: the body of `POST /v1/jobs/parse` (`{"JobHCL": "..."}`, and the HCL in it)
//! - `1`: the body of `POST /v1/client/allocation/:id/restart`
//! - `2`: the body of `POST /v1/client/allocation/:id/signal`
//! - `3`: the body of `PUT /v1/volume/host/create` and `.../register`
//! - `4`: the body of `PUT /v1/jobs`
//! - `5`: a request line `METHOD /path?query`, routed through a table with the API's patterns
//!   (path parameters and query strings are percent-decoded)
//! - `6`: the body of `PUT /v1/volume/csi/:id/create` and `PUT /v1/volume/csi/:id`
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::api::routes::{ParseRequest, RestartRequest, SignalRequest};
use nodeward::api::{Method, Request, Response, Router};
use std::sync::OnceLock;

fn router() -> &'static Router {
    static ROUTER: OnceLock<Router> = OnceLock::new();
    ROUTER.get_or_init(|| {
        let mut r = Router::new();
        let echo = |req: &Request| {
            req.query_bool("purge")?;
            Response::json(serde_json::json!({
                "id": req.param("id"),
                "task": req.query("task"),
            }))
        };
        for pattern in [
            "/v1/jobs",
            "/v1/jobs/parse",
            "/v1/job/:id",
            "/v1/job/:id/allocations",
            "/v1/allocation/:id",
            "/v1/allocation/:id/stop",
            "/v1/client/allocation/:id/restart",
            "/v1/client/fs/logs/:id",
            "/v1/volume/host/create",
            "/v1/volume/host/:id",
        ] {
            r.get(pattern, echo).put(pattern, echo).post(pattern, echo);
        }
        r.delete("/v1/job/:id", echo);
        r
    })
}

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        let Some((&which, body)) = data.split_first() else {
            return;
        };
        match which % 7 {
            0 => {
                let _ = ParseRequest::parse_job(body);
            }
            1 => {
                let _ = RestartRequest::from_body(body);
            }
            2 => {
                let _ = SignalRequest::from_body(body);
            }
            3 => {
                let _ = nodeward::volume::spec::parse_json(body);
            }
            4 => {
                let _ = nodeward::jobspec::json::parse_job(body);
            }
            6 => {
                let _ = nodeward::csi::volumes::spec::parse_json(body);
            }
            _ => {
                let Ok(line) = std::str::from_utf8(body) else {
                    return;
                };
                let (method, url) = line.split_once(' ').unwrap_or(("GET", line));
                let mut req = Request::new(Method::parse(method), url, Vec::new(), None);
                let _ = router().check(req.method(), req.path());
                if let Err(e) = router().dispatch(&mut req) {
                    assert!(!e.body().contains(['\r', '\n']), "a reason is one line");
                }
            }
        }
    });
});
