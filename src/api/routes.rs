//! The agent's routes: one handler per endpoint of agent.md, each a thin call into the engine.
//! Volume and CSI plugin routes sit beside their subsystems' JSON helpers.

use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::ids::{self, ID};
use super::logs::{Follow, LogReader};
use super::router::{json_body, ApiError, Request, Response, Router};
use super::server::{ApiServer, ServerConfig, ServerError};
use crate::agent::Agent;
use crate::alloc::AllocError;
use crate::driver::logs::Stream;
use crate::jobspec::{self, Job};
use crate::task::events::TaskStatus;
use crate::util::allocdir;

impl From<AllocError> for ApiError {
    fn from(e: AllocError) -> ApiError {
        match e {
            AllocError::JobNotFound | AllocError::AllocNotFound => {
                ApiError::NotFound(e.to_string())
            }
            AllocError::BadRequest(m) => ApiError::BadRequest(m),
            AllocError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl From<jobspec::JobspecError> for ApiError {
    fn from(e: jobspec::JobspecError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// Starts the API server of `agent` on its configured address.
pub fn serve(agent: Arc<Agent>) -> Result<ApiServer, ServerError> {
    let config = ServerConfig {
        addr: std::net::SocketAddr::new(agent.config.bind_addr, agent.config.http_port),
        token: agent.config.token.clone(),
        acl_reads: agent.config.acl_reads,
        ..ServerConfig::default()
    };
    ApiServer::start(config, router(agent))
}

fn alloc_id(agent: &Agent, req: &Request, name: &str) -> Result<String, ApiError> {
    ids::resolve(req.param(name), agent.allocs.alloc_ids(), &ID)
}

fn job_id(agent: &Agent, req: &Request) -> Result<String, ApiError> {
    ids::resolve(req.param("id"), agent.allocs.job_ids(), &ID)
}

/// The body of `POST /v1/jobs/parse`.
#[derive(Debug, Deserialize)]
pub struct ParseRequest {
    #[serde(rename = "JobHCL")]
    job_hcl: String,
}

impl ParseRequest {
    /// Parses the request body and the jobspec in it: the endpoint's parsing entry point.
    pub fn parse_job(body: &[u8]) -> Result<Job, ApiError> {
        let body: ParseRequest = json_body(body)?;
        Ok(jobspec::hcl::parse_job(&body.job_hcl)?.job)
    }
}

/// The body of `POST /v1/client/allocation/:id/restart`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct RestartRequest {
    #[serde(rename = "TaskName")]
    task_name: String,
    #[serde(rename = "AllTasks")]
    all_tasks: bool,
}

impl RestartRequest {
    /// Parses the request body (none restarts every task): the endpoint's parsing entry point.
    pub fn from_body(body: &[u8]) -> Result<RestartRequest, ApiError> {
        if body.is_empty() {
            return Ok(RestartRequest::default());
        }
        json_body(body)
    }
}

/// The body of `POST /v1/client/allocation/:id/signal`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct SignalRequest {
    #[serde(rename = "Signal")]
    signal: String,
    #[serde(rename = "Task")]
    task: String,
}

impl SignalRequest {
    /// Parses the request body (none sends SIGKILL to every task): the endpoint's parsing entry
    /// point.
    pub fn from_body(body: &[u8]) -> Result<SignalRequest, ApiError> {
        if body.is_empty() {
            return Ok(SignalRequest::default());
        }
        json_body(body)
    }
}

/// Refuses a job that the node cannot run as written: a read-write mount of a read-only static
/// volume (dynamic volumes are read-write; missing ones are waited for).
fn check_volumes(agent: &Agent, job: &Job) -> Result<(), ApiError> {
    for group in &job.task_groups {
        for task in &group.tasks {
            for mount in &task.volume_mounts {
                let Some(request) = group.volumes.get(&mount.volume) else {
                    continue;
                };
                let wants_write = !mount.read_only && !request.read_only;
                if let Some(v) = agent.volumes.lookup(&request.source) {
                    if v.read_only && wants_write {
                        return Err(ApiError::BadRequest(format!(
                            "task {:?} mounts volume {:?} read-write, but host volume {:?} is read-only",
                            task.name, mount.volume, request.source
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

fn node_json(agent: &Agent) -> Value {
    let csi = agent.csi_json();
    json!({
        "ID": agent.node_id,
        "Name": agent.config.name,
        "NodePool": agent.config.node_pool,
        "Datacenter": "dc1",
        "Status": "ready",
        "SchedulingEligibility": "eligible",
        "Attributes": agent.node_attributes(),
        "HostVolumes": agent.host_volumes_json(),
        "CSINodePlugins": csi["CSINodePlugins"],
        "CSIControllerPlugins": csi["CSIControllerPlugins"],
    })
}

pub fn router(agent: Arc<Agent>) -> Router {
    let mut r = Router::new();
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
    r.get("/v1/agent/health", |_| {
        Response::json(json!({"client": {"ok": true, "message": "ok"}}))
    });
    let a = agent.clone();
    r.get("/v1/nodes", move |_| {
        Response::json(json!([{
            "ID": a.node_id,
            "Name": a.config.name,
            "NodePool": a.config.node_pool,
            "Datacenter": "dc1",
            "Status": "ready",
            "SchedulingEligibility": "eligible",
        }]))
    });
    let a = agent.clone();
    r.get("/v1/node/:id", move |req| {
        ids::resolve(req.param("id"), [a.node_id.as_str()], &ID)?;
        Response::json(node_json(&a))
    });

    let a = agent.clone();
    let register = move |req: &Request| {
        let parsed = jobspec::json::parse_job(req.body())?;
        check_volumes(&a, &parsed.job)?;
        let registered = a.allocs.register_job(parsed.job)?;
        Response::json(json!({
            "EvalID": registered.eval_id,
            "Warnings": parsed.warnings.join("\n"),
            "Changed": registered.changed,
        }))
    };
    let register = Arc::new(register);
    let reg2 = register.clone();
    r.put("/v1/jobs", move |req| register(req));
    r.post("/v1/jobs", move |req| reg2(req));
    r.post("/v1/jobs/parse", |req| {
        Response::json(ParseRequest::parse_job(req.body())?)
    });
    let a = agent.clone();
    r.get("/v1/jobs", move |_| Response::json(a.allocs.jobs()));
    let a = agent.clone();
    r.get("/v1/job/:id", move |req| {
        Response::json(a.allocs.job(&job_id(&a, req)?)?)
    });
    let a = agent.clone();
    r.get("/v1/job/:id/allocations", move |req| {
        Ok(Response::Json(
            a.allocs.job_allocations_json(&job_id(&a, req)?)?,
        ))
    });
    let a = agent.clone();
    r.delete("/v1/job/:id", move |req| {
        let purge = req.query_bool("purge")?;
        let eval = a.allocs.stop_job(&job_id(&a, req)?, purge)?;
        Response::json(json!({"EvalID": eval}))
    });

    let a = agent.clone();
    r.get("/v1/allocations", move |_| {
        Ok(Response::Json(a.allocs.allocations_json()?))
    });
    let a = agent.clone();
    r.get("/v1/allocation/:id", move |req| {
        Ok(Response::Json(
            a.allocs.allocation_json(&alloc_id(&a, req, "id")?)?,
        ))
    });
    let a = agent.clone();
    r.post("/v1/client/allocation/:id/restart", move |req| {
        let body = RestartRequest::from_body(req.body())?;
        let task =
            (!body.all_tasks && !body.task_name.is_empty()).then_some(body.task_name.as_str());
        a.allocs.restart(&alloc_id(&a, req, "id")?, task)?;
        Response::json(json!({}))
    });
    let a = agent.clone();
    r.post("/v1/client/allocation/:id/signal", move |req| {
        let body = SignalRequest::from_body(req.body())?;
        let task = (!body.task.is_empty()).then_some(body.task.as_str());
        a.allocs
            .signal(&alloc_id(&a, req, "id")?, &body.signal, task)?;
        Response::json(json!({}))
    });
    for method in ["post", "put"] {
        let a = agent.clone();
        let stop = move |req: &Request| {
            let eval = a.allocs.stop(&alloc_id(&a, req, "id")?)?;
            Response::json(json!({"EvalID": eval}))
        };
        if method == "post" {
            r.post("/v1/allocation/:id/stop", stop);
        } else {
            r.put("/v1/allocation/:id/stop", stop);
        }
    }
    let a = agent.clone();
    r.get("/v1/client/fs/logs/:id", move |req| logs(&a, req));

    crate::api::volumes::routes(&mut r, agent.clone());
    crate::api::plugins::routes(&mut r, agent);
    r
}

/// `GET /v1/client/fs/logs/:alloc_id?task=T&type=stdout|stderr&origin=start|end&offset=N&follow=bool`:
/// the task's log as plain text; with `follow`, a stream that ends when the task is dead.
fn logs(agent: &Arc<Agent>, req: &Request) -> Result<Response, ApiError> {
    let id = alloc_id(agent, req, "id")?;
    let alloc = agent.allocs.get(&id)?;
    let task = match req.query("task") {
        Some(t) if !t.is_empty() => t.to_string(),
        _ if alloc.tasks.len() == 1 => alloc.tasks.keys().next().cloned().unwrap_or_default(),
        _ => return Err(ApiError::BadRequest("missing task name".to_string())),
    };
    let state =
        alloc.tasks.get(&task).cloned().ok_or_else(|| {
            ApiError::BadRequest(format!("task {task:?} not found in allocation"))
        })?;
    let stream = match req.query("type").unwrap_or("stdout") {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        other => {
            return Err(ApiError::BadRequest(format!(
                "type must be stdout or stderr, got {other:?}"
            )))
        }
    };
    let origin_end = match req.query("origin").unwrap_or("start") {
        "start" => false,
        "end" => true,
        other => {
            return Err(ApiError::BadRequest(format!(
                "origin must be start or end, got {other:?}"
            )))
        }
    };
    let offset = match req.query("offset") {
        None | Some("") => 0,
        Some(o) => o
            .parse::<u64>()
            .map_err(|_| ApiError::BadRequest(format!("offset must be a number, got {o:?}")))?,
    };
    let follow = req.query_bool("follow")?.then(|| Follow {
        alive: Arc::new(move || state.lock().state != TaskStatus::Dead),
        shutdown: req.shutdown(),
    });
    let dir = allocdir::log_dir(&allocdir::alloc_dir(&agent.config.data_dir, &id));
    let reader = LogReader::open(dir, &task, stream, origin_end, offset, follow)
        .map_err(|e| ApiError::Internal(format!("cannot read logs: {e}")))?;
    Ok(Response::Stream(Box::new(reader)))
}
