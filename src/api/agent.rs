//! Agent routes (agent.md "HTTP API"): `GET /v1/agent/self` (configuration and stats) and
//! `GET /v1/agent/health`.
//!
//! Health is Nomad's shape, one object per check with `ok` and `message`: `client` (the agent
//! runs and serves) and `state` (the state file holds the agent's state: false while writes to
//! it fail). Any check not ok makes the answer a 500 with the same body, as Nomad answers.

use serde::Serialize;
use std::sync::Arc;

use super::router::{Response, Router};
use crate::agent::Agent;

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/agent/self", move |_| {
        let c = &a.config;
        Response::json(AgentSelf {
            config: Config {
                acl_enabled: c.token.is_some(),
                bind_addr: c.bind_addr.to_string(),
                data_dir: &c.data_dir,
                dev_mode: c.dev,
                log_level: &c.log_level,
                name: &c.name,
                node_pool: &c.node_pool,
                ports: Ports { http: c.http_port },
                version: env!("CARGO_PKG_VERSION"),
            },
            member: Member { name: &c.name },
            stats: Stats {
                allocations: a.allocs.alloc_ids().len(),
                node_id: &a.node_id,
                state_writes: a.store.writes(),
                thread_panics: crate::thread::panics(),
                threads: crate::thread::live(),
                uptime_seconds: a.started.elapsed().as_secs(),
            },
        })
    });
    let a = agent.clone();
    r.get("/v1/agent/health", move |_| {
        let failing = a.store.failing();
        let status = if failing.is_some() { 500 } else { 200 };
        let state = match failing {
            None => Check::OK,
            Some(f) => Check {
                message: format!(
                    "state not durable: {} since {} ({} failed attempts); retrying",
                    f.error, f.since, f.attempts
                )
                .into(),
                ok: false,
            },
        };
        let body = Health {
            client: Check::OK,
            state,
        };
        Response::json_status(status, body)
    });
}

// The answers below are written as they are sent: every struct's fields in name order, as these
// answers have always had them.

/// `GET /v1/agent/self`.
#[derive(Serialize)]
struct AgentSelf<'a> {
    config: Config<'a>,
    member: Member<'a>,
    stats: Stats<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Config<'a> {
    #[serde(rename = "ACLEnabled")]
    acl_enabled: bool,
    bind_addr: String,
    data_dir: &'a std::path::Path,
    dev_mode: bool,
    log_level: &'a str,
    name: &'a str,
    node_pool: &'a str,
    ports: Ports,
    version: &'static str,
}

#[derive(Serialize)]
struct Ports {
    #[serde(rename = "HTTP")]
    http: u16,
}

#[derive(Serialize)]
struct Member<'a> {
    #[serde(rename = "Name")]
    name: &'a str,
}

#[derive(Serialize)]
struct Stats<'a> {
    allocations: usize,
    node_id: &'a str,
    state_writes: u64,
    thread_panics: u64,
    threads: u64,
    uptime_seconds: u64,
}

/// `GET /v1/agent/health`: one check per part, Nomad's shape.
#[derive(Serialize)]
struct Health {
    client: Check,
    state: Check,
}

#[derive(Serialize)]
struct Check {
    message: std::borrow::Cow<'static, str>,
    ok: bool,
}

impl Check {
    const OK: Check = Check {
        message: std::borrow::Cow::Borrowed("ok"),
        ok: true,
    };
}
