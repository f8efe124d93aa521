//! Evaluation routes: `GET /v1/evaluations`, `GET /v1/evaluation/:id`,
//! `GET /v1/job/:id/evaluations`, and Nomad's `AllocMetric` shape of a placement failure
//! (`FailedTGAllocs`), which the job registration's answer carries too.

use serde_json::{json, Map, Value};
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
    let groups: Map<String, Value> = failures
        .iter()
        .map(|f| (f.group.clone(), alloc_metric(f, datacenter)))
        .collect();
    Value::Object(groups)
}

fn alloc_metric(f: &PlacementFailure, datacenter: &str) -> Value {
    let one = |key: &str| json!({ key: 1 });
    let evaluated = !matches!(f.reason, Reason::NodePool | Reason::Datacenter);
    let (constraint, dimension) = match &f.reason {
        Reason::Constraint(c) => (one(c), Value::Null),
        Reason::Dimension(d) => (Value::Null, one(d)),
        _ => (Value::Null, Value::Null),
    };
    json!({
        "NodesEvaluated": u32::from(evaluated),
        "NodesFiltered": u32::from(!constraint.is_null()),
        "NodesInPool": u32::from(f.reason != Reason::NodePool),
        "NodesAvailable": if evaluated { one(datacenter) } else { json!({}) },
        "ClassFiltered": null,
        "ConstraintFiltered": constraint,
        "NodesExhausted": u32::from(!dimension.is_null()),
        "ClassExhausted": null,
        "DimensionExhausted": dimension,
        "QuotaExhausted": null,
        "ResourcesExhausted": null,
        "Scores": null,
        "ScoreMetaData": null,
        "AllocationTime": 0,
        "CoalescedFailures": f.failed.saturating_sub(1),
    })
}

/// An evaluation in Nomad's shape.
fn evaluation(job: &JobRecord, e: &EvalRecord, datacenter: &str) -> Value {
    let failures: Vec<PlacementFailure> = e.failed.iter().map(PlacementFailure::from).collect();
    let description = match e.status {
        EvalStatus::Blocked => "created to place remaining allocations",
        EvalStatus::Canceled => "canceled: the job was registered again or stopped",
        EvalStatus::Complete => "",
    };
    json!({
        "ID": e.id,
        "Namespace": "default",
        "Priority": 50,
        "Type": job.job.job_type.as_str(),
        "TriggeredBy": e.triggered_by,
        "JobID": job.job.id,
        "NodeID": "",
        "Status": e.status.as_str(),
        "StatusDescription": description,
        "Wait": 0,
        "NextEval": "",
        "PreviousEval": e.previous_eval,
        "BlockedEval": e.blocked_eval,
        "FailedTGAllocs": failed_tg_allocs(&failures, datacenter),
        "QueuedAllocations": e.queued,
        "CreateTime": e.create_time,
        "ModifyTime": e.modify_time,
    })
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
