//! Evaluation routes: `GET /v1/evaluations`, `GET /v1/evaluation/:id`,
//! `GET /v1/job/:id/evaluations`, and Nomad's `AllocMetric` shape of a placement failure
//! (`FailedTGAllocs`), which the job registration's answer carries too.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::ids::{self, ID};
use super::router::{Response, Router};
use crate::agent::Agent;
use crate::alloc::placement::{PlacementFailure, Reason};
use crate::records::{EvalRecord, EvalStatus, JobRecord};

/// Nomad's `FailedTGAllocs`: group → `AllocMetric` for the one node this agent is. `datacenter`
/// is the node's, counted in `NodesAvailable` when the job may run there.
pub fn failed_tg_allocs(failures: &[PlacementFailure], datacenter: &str) -> Value {
    if failures.is_empty() {
        return Value::Null;
    }
    let groups: BTreeMap<&str, AllocMetric> = failures
        .iter()
        .map(|f| (f.group.as_str(), AllocMetric::of(f, datacenter)))
        .collect();
    serde_json::to_value(groups).unwrap_or_default()
}

/// Nomad's `AllocMetric` of one group's placement failure on this node. The fields nodeward
/// has nothing for are `null` (or 0), as they have always been.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AllocMetric<'a> {
    nodes_evaluated: u32,
    nodes_filtered: u32,
    nodes_in_pool: u32,
    nodes_available: BTreeMap<&'a str, u32>,
    class_filtered: Option<()>,
    constraint_filtered: Option<BTreeMap<&'a str, u32>>,
    nodes_exhausted: u32,
    class_exhausted: Option<()>,
    dimension_exhausted: Option<BTreeMap<&'a str, u32>>,
    quota_exhausted: Option<()>,
    resources_exhausted: Option<()>,
    scores: Option<()>,
    score_meta_data: Option<()>,
    allocation_time: u64,
    coalesced_failures: u32,
}

impl<'a> AllocMetric<'a> {
    fn of(f: &'a PlacementFailure, datacenter: &'a str) -> AllocMetric<'a> {
        let one = |key: &'a str| Some(BTreeMap::from([(key, 1)]));
        let evaluated = !matches!(f.reason, Reason::NodePool | Reason::Datacenter);
        let (constraint, dimension) = match &f.reason {
            Reason::Constraint(c) => (one(c), None),
            Reason::Dimension(d) => (None, one(d)),
            _ => (None, None),
        };
        AllocMetric {
            nodes_evaluated: u32::from(evaluated),
            nodes_filtered: u32::from(constraint.is_some()),
            nodes_in_pool: u32::from(f.reason != Reason::NodePool),
            nodes_available: if evaluated {
                BTreeMap::from([(datacenter, 1)])
            } else {
                BTreeMap::new()
            },
            class_filtered: None,
            constraint_filtered: constraint,
            nodes_exhausted: u32::from(dimension.is_some()),
            class_exhausted: None,
            dimension_exhausted: dimension,
            quota_exhausted: None,
            resources_exhausted: None,
            scores: None,
            score_meta_data: None,
            allocation_time: 0,
            coalesced_failures: f.failed.saturating_sub(1),
        }
    }
}

/// An evaluation in Nomad's shape.
fn evaluation(job: &JobRecord, e: &EvalRecord, datacenter: &str) -> Value {
    let failures: Vec<PlacementFailure> = e.failed.iter().map(PlacementFailure::from).collect();
    let description = match e.status {
        EvalStatus::Blocked => "created to place remaining allocations",
        EvalStatus::Canceled => "canceled: the job was registered again or stopped",
        EvalStatus::Complete => "",
    };
    serde_json::to_value(Evaluation {
        id: &e.id,
        namespace: "default",
        priority: 50,
        eval_type: job.job.job_type.as_str(),
        triggered_by: &e.triggered_by,
        job_id: &job.job.id,
        node_id: "",
        status: e.status.as_str(),
        status_description: description,
        wait: 0,
        next_eval: "",
        previous_eval: &e.previous_eval,
        blocked_eval: &e.blocked_eval,
        failed_tg_allocs: failed_tg_allocs(&failures, datacenter),
        queued_allocations: &e.queued,
        create_time: e.create_time,
        modify_time: e.modify_time,
    })
    .unwrap_or_default()
}

/// Nomad's `Evaluation`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Evaluation<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    namespace: &'static str,
    priority: u32,
    #[serde(rename = "Type")]
    eval_type: &'a str,
    triggered_by: &'a str,
    #[serde(rename = "JobID")]
    job_id: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'static str,
    status: &'static str,
    status_description: &'static str,
    wait: u64,
    next_eval: &'static str,
    previous_eval: &'a str,
    blocked_eval: &'a str,
    #[serde(rename = "FailedTGAllocs")]
    failed_tg_allocs: Value,
    queued_allocations: &'a BTreeMap<String, u32>,
    create_time: i64,
    modify_time: i64,
}

/// A job's evaluations, newest first.
fn of_job(job: &JobRecord, datacenter: &str) -> Vec<Value> {
    job.evaluations
        .iter()
        .rev()
        .map(|e| evaluation(job, e, datacenter))
        .collect()
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/evaluations", move |_| {
        let dc = &a.config.datacenter;
        let all: Vec<Value> = a
            .allocs
            .jobs()
            .iter()
            .flat_map(|j| of_job(&j.record, dc))
            .collect();
        Response::json(all)
    });
    let a = agent.clone();
    r.get("/v1/evaluation/:id", move |req| {
        let id = ids::resolve(req.param("id"), a.allocs.eval_ids(), &ID)?;
        let (job, eval) = a.allocs.evaluation(&id)?;
        Response::json(evaluation(&job, &eval, &a.config.datacenter))
    });
    let a = agent.clone();
    r.get("/v1/job/:id/evaluations", move |req| {
        let id = ids::resolve(req.param("id"), a.allocs.job_ids(), &ID)?;
        let job = a.allocs.job(&id)?;
        Response::json(of_job(&job.record, &a.config.datacenter))
    });
}
