//! Garbage collection routes: `PUT|POST /v1/client/gc` (every terminal allocation; also
//! `/v1/system/gc`, where `nomad system gc` sends it, which then forgets every finished child
//! job of a periodic or parameterized job) and `PUT|POST
//! /v1/client/allocation/:id/gc` (one). Nomad also answers these on `GET`; nodeward does not:
//! a write by `GET` is one any web page can make (an `<img>` needs no permission), past the
//! checks of `api::admission`.
//!
//! Answers: `{"Collected": [IDs, oldest first]}` for the node, `{}` for one allocation; a
//! non-terminal allocation is a 400 whose reason starts with Nomad's words.

use serde::Serialize;
use std::sync::Arc;

use super::allocations::alloc_id;
use super::router::{Request, Response, Router};
use crate::agent::Agent;

/// The answer of a node-wide collection.
#[derive(Serialize)]
struct Collected {
    #[serde(rename = "Collected")]
    collected: Vec<String>,
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    let all = Arc::new(move |_: &Request| {
        let collected = a.gc.collect_all()?;
        Response::json(Collected { collected })
    });
    let (put, post) = (all.clone(), all.clone());
    r.put("/v1/client/gc", move |req| put(req));
    r.post("/v1/client/gc", move |req| post(req));
    // The system's collection also forgets finished child jobs, as Nomad's collects jobs.
    let a = agent.clone();
    let system = Arc::new(move |req: &Request| {
        let answer = all(req)?;
        let jobs = a.allocs.collect_children()?;
        if !jobs.is_empty() {
            log::info!("system gc: forgot {} finished child jobs", jobs.len());
        }
        Ok(answer)
    });
    let (put, post) = (system.clone(), system);
    r.put("/v1/system/gc", move |req| put(req));
    r.post("/v1/system/gc", move |req| post(req));
    let a = agent.clone();
    let one = Arc::new(move |req: &Request| {
        a.gc.collect(&alloc_id(&a, req)?)?;
        Response::json(super::answers::Empty {})
    });
    let post = one.clone();
    r.put("/v1/client/allocation/:id/gc", move |req| one(req));
    r.post("/v1/client/allocation/:id/gc", move |req| post(req));
}
