//! Evaluations: what each placement of a job decided, kept with the job's record
//! (`JobRecord::evaluations`) so that `job status` and the API still show a placement failure
//! after an agent restart, and the blocked evaluation that holds what could not be placed.
//!
//! As in Nomad: a registration is a `job-register` evaluation, `complete`, naming the groups it
//! could not place (`FailedTGAllocs`); when there are some, a second evaluation, `blocked`
//! (`queued-allocs`), holds the allocations still to place. A re-evaluation that places
//! something marks the blocked evaluation `complete` and, when something still does not fit,
//! blocks a new one ([`after_reevaluation`]). A new registration of the job, or its stop,
//! cancels its blocked evaluation (`canceled`).
//!
//! Pure bookkeeping over records: the time is passed in; only a blocked evaluation's ID is
//! drawn here (a random UUID, as Nomad's). The allocation manager writes the records it returns.

use std::collections::BTreeMap;

use super::feasible::PlacementFailure;
use crate::records::{EvalRecord, EvalStatus, JobRecord};

/// How many evaluations a job keeps: enough for `job status` and a look back, bounded so that a
/// node whose docker engine flaps does not grow the state file without end.
pub const MAX_EVALS: usize = 8;

/// `TriggeredBy` of a registration's evaluation.
pub const TRIGGER_REGISTER: &str = "job-register";
/// `TriggeredBy` of a blocked evaluation (Nomad's).
pub const TRIGGER_QUEUED: &str = "queued-allocs";

/// The job's blocked evaluation, when allocations wait to be placed.
pub fn blocked(record: &JobRecord) -> Option<&EvalRecord> {
    record
        .evaluations
        .iter()
        .rev()
        .find(|e| e.status == EvalStatus::Blocked)
}

/// Group → allocations waiting to be placed (the job summary's `Queued`).
pub fn queued(record: &JobRecord) -> BTreeMap<String, u32> {
    blocked(record)
        .map(|e| e.queued.clone())
        .unwrap_or_default()
}

/// The failures `job status` shows: the latest evaluation that failed to place something, while
/// a blocked evaluation waits (as Nomad's `job status` picks them).
pub fn current_failures(record: &JobRecord) -> Vec<PlacementFailure> {
    if blocked(record).is_none() {
        return Vec::new();
    }
    record
        .evaluations
        .iter()
        .rev()
        .find(|e| !e.failed.is_empty())
        .map(|e| e.failed.iter().map(PlacementFailure::from).collect())
        .unwrap_or_default()
}

/// The evaluation an allocation manager answered last for the job.
pub fn latest(record: &JobRecord) -> Option<&EvalRecord> {
    record
        .evaluations
        .iter()
        .rev()
        .find(|e| e.status != EvalStatus::Blocked)
}

fn cancel_blocked(evals: &mut [EvalRecord], now: i64) {
    for e in evals.iter_mut().filter(|e| e.status == EvalStatus::Blocked) {
        e.status = EvalStatus::Canceled;
        e.modify_time = now;
    }
}

fn trim(mut evals: Vec<EvalRecord>) -> Vec<EvalRecord> {
    let extra = evals.len().saturating_sub(MAX_EVALS);
    evals.drain(..extra);
    evals
}

/// A blocked evaluation after `previous` for what `failures` left.
fn blocked_after(previous: &str, failures: &[PlacementFailure], now: i64) -> EvalRecord {
    EvalRecord {
        id: uuid::Uuid::new_v4().to_string(),
        triggered_by: TRIGGER_QUEUED.to_string(),
        status: EvalStatus::Blocked,
        failed: Vec::new(),
        blocked_eval: String::new(),
        previous_eval: previous.to_string(),
        queued: failures
            .iter()
            .map(|f| (f.group.clone(), f.failed))
            .collect(),
        create_time: now,
        modify_time: now,
    }
}

/// The evaluations of a job just registered: its earlier ones, a blocked one canceled; the
/// registration's; and a blocked one for what it could not place.
pub fn after_register(
    previous: &[EvalRecord],
    eval_id: &str,
    failures: &[PlacementFailure],
    now: i64,
) -> Vec<EvalRecord> {
    let mut evals = previous.to_vec();
    cancel_blocked(&mut evals, now);
    let blocked = (!failures.is_empty()).then(|| blocked_after(eval_id, failures, now));
    evals.push(EvalRecord {
        id: eval_id.to_string(),
        triggered_by: TRIGGER_REGISTER.to_string(),
        status: EvalStatus::Complete,
        failed: failures.iter().map(Into::into).collect(),
        blocked_eval: blocked.as_ref().map(|b| b.id.clone()).unwrap_or_default(),
        previous_eval: String::new(),
        queued: BTreeMap::new(),
        create_time: now,
        modify_time: now,
    });
    evals.extend(blocked);
    trim(evals)
}

/// The evaluations after the blocked one ran again and placed something: it is complete with
/// what still failed, and a new one blocks for that.
pub fn after_reevaluation(
    previous: &[EvalRecord],
    failures: &[PlacementFailure],
    now: i64,
) -> Vec<EvalRecord> {
    let mut evals = previous.to_vec();
    let mut next = None;
    if let Some(e) = evals
        .iter_mut()
        .rev()
        .find(|e| e.status == EvalStatus::Blocked)
    {
        e.status = EvalStatus::Complete;
        e.modify_time = now;
        e.failed = failures.iter().map(Into::into).collect();
        if !failures.is_empty() {
            let b = blocked_after(&e.id, failures, now);
            e.blocked_eval = b.id.clone();
            next = Some(b);
        }
    }
    evals.extend(next);
    trim(evals)
}

/// The evaluations of a job that stops: nothing waits to be placed any more.
pub fn after_stop(previous: &[EvalRecord], now: i64) -> Vec<EvalRecord> {
    let mut evals = previous.to_vec();
    cancel_blocked(&mut evals, now);
    evals
}

#[cfg(test)]
mod tests {
    use super::super::feasible::Reason;
    use super::*;

    fn failure(group: &str, failed: u32) -> PlacementFailure {
        PlacementFailure {
            group: group.into(),
            failed,
            reason: Reason::Constraint("missing drivers".into()),
        }
    }

    fn record(evaluations: Vec<EvalRecord>) -> JobRecord {
        JobRecord {
            job: crate::jobspec::hcl::parse_job(
                "job \"j\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   config { command = \"true\" }\n  }\n }\n}\n",
            )
            .unwrap()
            .job,
            stop: false,
            version: 0,
            submit_time: 0,
            evaluations,
        }
    }

    #[test]
    fn a_failed_registration_blocks_and_a_later_one_cancels() {
        let first = after_register(&[], "e1", &[failure("g", 2)], 1);
        assert_eq!(first.len(), 2);
        let b = &first[1];
        assert_eq!(
            (b.status, b.previous_eval.as_str()),
            (EvalStatus::Blocked, "e1")
        );
        assert_eq!(first[0].blocked_eval, b.id);
        assert_eq!(b.queued, BTreeMap::from([("g".to_string(), 2)]));
        let r = record(first.clone());
        assert_eq!(queued(&r)["g"], 2);
        assert_eq!(current_failures(&r), [failure("g", 2)]);
        assert_eq!(latest(&r).unwrap().id, "e1");

        let second = after_register(&first, "e2", &[], 2);
        assert_eq!(second[1].status, EvalStatus::Canceled);
        let r = record(second);
        assert!(blocked(&r).is_none() && current_failures(&r).is_empty());
        assert_eq!(latest(&r).unwrap().id, "e2");

        let stopped = after_stop(&first, 3);
        assert_eq!(stopped[1].status, EvalStatus::Canceled);
    }

    #[test]
    fn a_reevaluation_completes_the_blocked_one_and_blocks_what_is_left() {
        let first = after_register(&[], "e1", &[failure("g", 2)], 1);
        let partly = after_reevaluation(&first, &[failure("g", 1)], 2);
        assert_eq!(partly.len(), 3);
        assert_eq!(partly[1].status, EvalStatus::Complete);
        assert_eq!(partly[1].blocked_eval, partly[2].id);
        assert_eq!(partly[2].queued["g"], 1);
        let r = record(partly.clone());
        assert_eq!(current_failures(&r), [failure("g", 1)]);
        let done = after_reevaluation(&partly, &[], 3);
        let r = record(done);
        assert!(blocked(&r).is_none());
        assert!(queued(&r).is_empty());

        let mut many = Vec::new();
        for i in 0..20 {
            many = after_register(&many, &format!("e{i}"), &[failure("g", 1)], i);
        }
        assert_eq!(many.len(), MAX_EVALS);
        assert_eq!(many.last().unwrap().status, EvalStatus::Blocked);
    }
}
