//! Job routes (agent.md "HTTP API"): `PUT|POST /v1/jobs` (register), `POST /v1/jobs/parse`,
//! `GET /v1/jobs`, `GET /v1/job/:id`, `GET /v1/job/:id/summary`, `GET /v1/job/:id/allocations`,
//! `DELETE /v1/job/:id` (`PUT|POST /v1/job/:id/plan` is `job_plan`'s); and
//! jobs in Nomad's JSON shape, from the allocation manager's [`JobSummary`].

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::allocations;
use super::ids::{self, ID};
use super::router::{json_body, ApiError, Request, Response, Router};
use crate::agent::Agent;
use crate::alloc::JobSummary;
use crate::hcl::eval::VarFile;
use crate::jobspec::{self, Job, JobType};
use crate::records::ClientStatus;
use crate::sandbox::{Evaluation, Sandbox, SandboxError};

impl From<jobspec::JobspecError> for ApiError {
    fn from(e: jobspec::JobspecError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

fn job_id(agent: &Agent, req: &Request) -> Result<String, ApiError> {
    ids::resolve(req.param("id"), agent.allocs.job_ids(), &ID)
}

/// The body of `POST /v1/jobs/parse`, as Nomad's API has it.
#[derive(Debug, Deserialize)]
pub struct ParseRequest {
    #[serde(rename = "JobHCL")]
    job_hcl: String,
    /// Values of the jobspec's variables: HCL `name = value` lines, as in a -var-file.
    #[serde(rename = "Variables", default)]
    variables: String,
}

/// Why `file()` fails here. Nomad's agent refuses it too: the agent runs as root, and a jobspec
/// from the API could otherwise read any file of the node into a job.
const NO_FILES: &str = "filesystem functions are disabled when the agent parses a jobspec \
                        (POST /v1/jobs/parse); `nodeward job run` reads files beside the jobspec";

impl ParseRequest {
    /// Parses the request body into what the jobspec's evaluation is given.
    pub fn evaluation(body: &[u8]) -> Result<Evaluation, ApiError> {
        let body: ParseRequest = json_body(body)?;
        let mut var_files = Vec::new();
        if !body.variables.trim().is_empty() {
            var_files.push(VarFile {
                name: "Variables".to_string(),
                text: body.variables,
            });
        }
        Ok(Evaluation::new(body.job_hcl, var_files, NO_FILES))
    }

    /// Parses the request body and evaluates the jobspec in it in this process, without limits:
    /// the fuzz target's entry point. The endpoint evaluates in a [`Sandbox`].
    pub fn parse_job(body: &[u8]) -> Result<Job, ApiError> {
        Ok(Self::evaluation(body)?.run()?)
    }
}

impl From<SandboxError> for ApiError {
    fn from(e: SandboxError) -> ApiError {
        match e {
            SandboxError::Busy { .. } => ApiError::Unavailable(e.to_string()),
            e if e.is_jobspec() => ApiError::BadRequest(e.to_string()),
            e => ApiError::Internal(e.to_string()),
        }
    }
}

/// Refuses a job that the node cannot run as written: a read-write mount of a read-only static
/// volume (dynamic volumes are read-write; missing ones are waited for), by the planner's host
/// volume rule (`plan::volumes`). CSI volumes are waited for and claimed when the allocation
/// starts (`alloc::runner::hooks`).
pub(super) fn check_volumes(agent: &Agent, job: &Job) -> Result<(), ApiError> {
    let read_only = |source: &str| agent.volumes.lookup(source).map(|v| v.read_only);
    crate::plan::volumes::check_writable(job, read_only)
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// A registration request's Nomad `EnforceIndex` and `JobModifyIndex`: the job modify index the
/// job must have for the registration to be made (`job run -check-index`), when enforced.
#[derive(Deserialize)]
struct Enforce {
    #[serde(rename = "EnforceIndex", default)]
    enforce: bool,
    #[serde(rename = "JobModifyIndex", default)]
    index: u64,
}

fn enforced_index(body: &[u8]) -> Result<Option<u64>, ApiError> {
    // A bare job has neither: it is not an object of these two.
    let Ok(e) = serde_json::from_slice::<Enforce>(body) else {
        return Ok(None);
    };
    Ok(e.enforce.then_some(e.index))
}

/// Nomad's name for the allocations of a client status in a job summary.
fn summary_key(client_status: ClientStatus) -> &'static str {
    match client_status {
        ClientStatus::Pending => "Starting",
        ClientStatus::Running => "Running",
        ClientStatus::Failed => "Failed",
        ClientStatus::Complete => "Complete",
    }
}

/// A job in `GET /v1/jobs`. Fields in name order, as the answer has always had them.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobStub<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    job_summary: Summary<'a>,
    name: &'a str,
    namespace: &'static str,
    #[serde(rename = "ParameterizedJob")]
    parameterized: bool,
    #[serde(rename = "ParentID")]
    parent_id: &'a str,
    periodic: bool,
    status: &'static str,
    stop: bool,
    submit_time: i64,
    #[serde(rename = "Type")]
    job_type: &'a JobType,
    version: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Summary<'a> {
    #[serde(rename = "JobID")]
    job_id: &'a str,
    /// Group → summary key → allocations.
    summary: BTreeMap<&'a str, BTreeMap<&'static str, u32>>,
}

/// Group → summary key → allocations: the allocations by client status, and `Queued`, those not
/// placed yet.
fn summary_counts(s: &JobSummary) -> BTreeMap<&str, BTreeMap<&'static str, u32>> {
    let mut summary: BTreeMap<&str, BTreeMap<&'static str, u32>> = s
        .groups
        .iter()
        .map(|(group, counts)| {
            let mut keyed = BTreeMap::<&'static str, u32>::new();
            for (status, n) in counts {
                *keyed.entry(summary_key(*status)).or_default() += n;
            }
            (group.as_str(), keyed)
        })
        .collect();
    for (group, n) in &s.queued {
        summary
            .entry(group.as_str())
            .or_default()
            .insert("Queued", *n);
    }
    summary
}

impl<'a> JobStub<'a> {
    fn new(s: &'a JobSummary) -> JobStub<'a> {
        let job = &s.record.job;
        let summary = summary_counts(s);
        JobStub {
            id: &job.id,
            job_summary: Summary {
                job_id: &job.id,
                summary,
            },
            name: &job.name,
            namespace: "default",
            parameterized: job.parameterized_job.is_some(),
            parent_id: &job.parent_id,
            periodic: job.periodic.is_some(),
            status: s.status.as_str(),
            stop: s.record.stop,
            submit_time: s.record.submit_time,
            job_type: &job.job_type,
            version: s.record.version,
        }
    }
}

/// `GET /v1/job/:id`: the job as submitted with its status, every object's keys in name order.
fn job_detail(s: &JobSummary) -> Result<Response, ApiError> {
    let internal = |e: serde_json::Error| ApiError::Internal(e.to_string());
    let mut v = serde_json::to_value(&s.record.job).map_err(internal)?;
    let job = &s.record.job;
    let status = serde_json::to_value(JobStatusFields {
        namespace: "default",
        datacenters: &job.datacenters,
        node_pool: &job.node_pool,
        status: s.status.as_str(),
        stop: s.record.stop,
        version: s.record.version,
        submit_time: s.record.submit_time,
        job_modify_index: crate::alloc::modify_index(&s.record),
    })
    .map_err(internal)?;
    if let (Some(v), Value::Object(status)) = (v.as_object_mut(), status) {
        v.extend(status);
    }
    Response::json(v)
}

/// What `GET /v1/job/:id` adds to the job's own JSON, or sets there.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobStatusFields<'a> {
    namespace: &'static str,
    /// Left out of the job's own JSON at their defaults; the API shows them as Nomad does.
    datacenters: &'a [String],
    node_pool: &'a str,
    status: &'static str,
    stop: bool,
    version: u64,
    submit_time: i64,
    /// What `job run -check-index` checks (`alloc::plan`).
    job_modify_index: u64,
}

/// The answer of a registration: Nomad's, with what `job run` prints of the evaluation.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Registered {
    blocked_eval: String,
    changed: bool,
    #[serde(rename = "EvalID")]
    eval_id: String,
    #[serde(rename = "FailedTGAllocs")]
    failed_tg_allocs: Value,
    warnings: String,
}

/// Nomad's `JobValidateResponse`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Validated {
    driver_config_validated: bool,
    error: String,
    validation_errors: Vec<String>,
    warnings: String,
}

/// `GET /v1/job/:id/summary`: Nomad's `JobSummary`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SummaryAnswer<'a> {
    children: Children,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    namespace: &'static str,
    summary: BTreeMap<&'a str, BTreeMap<&'static str, u32>>,
}

/// A job's children by status; nodeward counts none here, as it always answered.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Children {
    dead: u32,
    pending: u32,
    running: u32,
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    let register = Arc::new(move |req: &Request| {
        let parsed = jobspec::json::parse_job(req.body())?;
        check_volumes(&a, &parsed.job)?;
        let index = enforced_index(req.body())?;
        let registered = a.allocs.register_job_at(parsed.job, index)?;
        // Nomad's answer, with what `job run` prints of the evaluation: the groups this node
        // could not place (in Nomad's `Evaluation.FailedTGAllocs` shape) and the blocked
        // evaluation that waits for them.
        Response::json(Registered {
            blocked_eval: registered.blocked_eval.unwrap_or_default(),
            changed: registered.changed,
            eval_id: registered.eval_id,
            failed_tg_allocs: super::evaluations::failed_tg_allocs(
                &registered.failures,
                &a.config.datacenter,
            ),
            warnings: parsed.warnings.join("\n"),
        })
    });
    let post = register.clone();
    // Nomad's `PUT /v1/validate/job`: the job's rules, without registering it. Malformed JSON is a
    // 400; a job that breaks a rule is an answer whose `Error` says which, in Nomad's shape.
    let validate = Arc::new(|req: &Request| {
        let answer = match jobspec::json::parse_job(req.body()) {
            Ok(parsed) => Validated {
                driver_config_validated: true,
                error: String::new(),
                validation_errors: Vec::new(),
                warnings: parsed.warnings.join("\n"),
            },
            Err(e @ jobspec::JobspecError::Syntax(_)) => return Err(e.into()),
            Err(e) => Validated {
                driver_config_validated: true,
                error: format!("1 error occurred:\n\t* {e}\n\n"),
                validation_errors: vec![e.to_string()],
                warnings: String::new(),
            },
        };
        Response::json(answer)
    });
    let validate_post = validate.clone();
    r.put("/v1/validate/job", move |req| validate(req));
    r.post("/v1/validate/job", move |req| validate_post(req));
    r.put("/v1/jobs", move |req| register(req));
    r.post("/v1/jobs", move |req| post(req));
    // A caller's HCL is evaluated in a child with limits: no jobspec can exhaust the agent.
    let sandbox = Sandbox::for_agent();
    r.post("/v1/jobs/parse", move |req| {
        let evaluation = ParseRequest::evaluation(req.body())?;
        Response::json(sandbox.parse_job(&evaluation)?)
    });
    let a = agent.clone();
    r.get("/v1/jobs", move |_| {
        let jobs = a.allocs.jobs();
        Response::json(jobs.iter().map(JobStub::new).collect::<Vec<_>>())
    });
    let a = agent.clone();
    r.get("/v1/job/:id", move |req| {
        job_detail(&a.allocs.job(&job_id(&a, req)?)?)
    });
    let a = agent.clone();
    r.get("/v1/job/:id/summary", move |req| {
        let s = a.allocs.job(&job_id(&a, req)?)?;
        let groups = s.record.job.task_groups.iter().map(|g| g.name.as_str());
        let mut full: BTreeMap<&str, BTreeMap<&'static str, u32>> = groups
            .map(|g| {
                let zero = [
                    "Queued", "Starting", "Running", "Failed", "Complete", "Lost", "Unknown",
                ];
                (g, zero.into_iter().map(|k| (k, 0)).collect())
            })
            .collect();
        for (group, counts) in summary_counts(&s) {
            full.entry(group).or_default().extend(counts);
        }
        Response::json(SummaryAnswer {
            children: Children {
                dead: 0,
                pending: 0,
                running: 0,
            },
            job_id: &s.record.job.id,
            namespace: "default",
            summary: full,
        })
    });
    let a = agent.clone();
    r.get("/v1/job/:id/allocations", move |req| {
        let allocs = a.allocs.job_allocations(&job_id(&a, req)?)?;
        allocations::list(&allocs, allocations::Here::of(&a))
    });
    let a = agent.clone();
    r.delete("/v1/job/:id", move |req| {
        let purge = req.query_bool("purge")?;
        let eval = a.allocs.stop_job(&job_id(&a, req)?, purge)?;
        // The stopped allocations' resources are free (a stopped allocation asks for none, as
        // in Nomad's scheduler): what waits for room is placed now, not at the next check.
        a.allocs.reevaluate();
        Response::json(super::answers::EvalId { eval_id: eval })
    });
}
