//! Agent routes (agent.md "HTTP API"): `GET /v1/agent/self` (configuration and stats) and
//! `GET /v1/agent/health`.
//!
//! Health is Nomad's shape, one object per check with `ok` and `message`: `client` (the agent
//! runs and serves) and `state` (the state file holds the agent's state: false while writes to
//! it fail). Any check not ok makes the answer a 500 with the same body, as Nomad answers.

use serde_json::json;
use std::sync::Arc;

use super::router::{Response, Router};
use crate::agent::Agent;

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/agent/self", move |_| {
        Response::json(json!({
            "config": {
                "Name": a.config.name,
                "NodePool": a.config.node_pool,
                "DataDir": a.config.data_dir,
                "BindAddr": a.config.bind_addr.to_string(),
                "Ports": {"HTTP": a.config.http_port},
                "LogLevel": a.config.log_level,
                "ACLEnabled": a.config.token.is_some(),
                "DevMode": a.config.dev,
                "Version": env!("CARGO_PKG_VERSION"),
            },
            "member": {"Name": a.config.name},
            "stats": {
                "node_id": a.node_id,
                "uptime_seconds": a.started.elapsed().as_secs(),
                "threads": crate::thread::live(),
                "thread_panics": crate::thread::panics(),
                "state_writes": a.store.writes(),
                "allocations": a.allocs.alloc_ids().len(),
            },
        }))
    });
    let a = agent.clone();
    r.get("/v1/agent/health", move |_| {
        let failing = a.store.failing();
        let status = if failing.is_some() { 500 } else { 200 };
        let state = match failing {
            None => json!({"ok": true, "message": "ok"}),
            Some(f) => json!({
                "ok": false,
                "message": format!(
                    "state not durable: {} since {} ({} failed attempts); retrying",
                    f.error, f.since, f.attempts
                ),
            }),
        };
        let body = json!({"client": {"ok": true, "message": "ok"}, "state": state});
        Response::json_status(status, body)
    });
}
