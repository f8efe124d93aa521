//! Evaluations run on this node: placing what a job's blocked evaluation holds, and Nomad's
//! in-place update. The records (a registration's `job-register` evaluation, the `blocked` one
//! that holds what could not be placed, their `complete` and `canceled`) are kept by the
//! planner's pure bookkeeping, `crate::plan::evals`; this module writes them with the registry.
//!
//! [`AllocManager::reevaluate`] runs
//! when the node's fingerprints may have changed (every docker health check, and SIGHUP): for
//! each job with a blocked evaluation it places what now fits, as one all-or-nothing write of the
//! registry (`manager`'s commit), marks the blocked evaluation `complete` and, when something
//! still does not fit, blocks a new one. A new registration of the job, or its stop, cancels its
//! blocked evaluation (`canceled`).
//!
//! Threads: `reevaluate` runs on the caller's thread (the agent's `docker-fingerprint` thread or a
//! reload worker); it takes the state file's write lock and the registry lock as an API write does.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::manager::{AllocManager, Change};
use super::model::Allocation;
use super::AllocError;
use crate::plan::evals::{after_reevaluation, after_register, blocked, current_failures};
use crate::plan::PlacementFailure;
use crate::records::{AllocRecord, DesiredStatus, JobRecord};
use crate::task::events::now_nanos;

/// The change that registers `job`, which differs from the registered `e` only in its no-effect
/// settings (`Job::eq_but_kept`): Nomad's in-place update. A new version of the job, evaluated;
/// its running allocations (`running`) run on, their tasks untouched, and belong to the new
/// version from the moment the change is made (their job and `JobVersion`, in memory and in the
/// state file written with the job: `manager`'s `fill` and commit); what waited to be placed
/// still waits, named again in `failures`.
pub(super) fn in_place(
    e: &JobRecord,
    job: crate::jobspec::Job,
    running: Vec<Arc<Allocation>>,
    eval_id: &str,
    failures: &mut Vec<PlacementFailure>,
) -> Change {
    let now = now_nanos();
    *failures = current_failures(e);
    let evaluations = after_register(&e.evaluations, eval_id, failures, now);
    let version = e.version + 1;
    Change {
        in_place: Some(InPlace {
            job: Arc::new(job.clone()),
            version,
            // One that has ended stays on its version, as Nomad's `genericAllocUpdateFn` leaves it.
            allocs: running
                .into_iter()
                .filter(|a| a.is_running_or_pending())
                .map(|a| (a.id.clone(), a))
                .collect(),
        }),
        put_job: Some(JobRecord {
            version,
            job,
            stop: false,
            submit_time: now,
            evaluations,
        }),
        at: now,
        ..Change::default()
    }
}

/// Running allocations an in-place update moves to the job's new version: `job` (the job the
/// update records, in one `Arc` for them all) at `version`.
pub(super) struct InPlace {
    job: Arc<crate::jobspec::Job>,
    version: u64,
    /// ID → allocation.
    allocs: BTreeMap<String, Arc<Allocation>>,
}

impl InPlace {
    /// The record of `alloc` once the update is made, when the update moves it: its job is the
    /// registered version (`manager`'s `fill` writes it before the update is made).
    pub(super) fn record(&self, alloc: &Allocation) -> Option<AllocRecord> {
        self.allocs.contains_key(&alloc.id).then(|| {
            let mut record = alloc.record(true);
            record.job_version = Some(self.version);
            record
        })
    }

    /// Makes the update, once the state file records it (`manager`'s commit): each allocation
    /// belongs to the new version from now on; its tasks run on untouched.
    pub(super) fn make(&self) {
        for alloc in self.allocs.values() {
            alloc.update_in_place(self.job.clone(), self.version);
        }
    }
}

impl AllocManager {
    /// Places what the jobs' blocked evaluations hold, where the node now fits them (see the
    /// module doc). Answers how many allocations it started. A job whose write fails is left
    /// blocked, and tried again at the next call.
    pub fn reevaluate(self: &Arc<Self>) -> usize {
        let waiting: Vec<String> = {
            let reg = self.registry.lock();
            reg.jobs
                .values()
                .filter(|j| !j.stop && blocked(j).is_some())
                .map(|j| j.job.id.clone())
                .collect()
        };
        let mut started = 0;
        for id in waiting {
            // Nothing new starts once the agent shuts down: its runners would not be joined.
            if matches!(
                self.engine.deps.shutdown.try_recv(),
                Err(crossbeam_channel::TryRecvError::Disconnected)
            ) {
                break;
            }
            match self.place_queued(&id) {
                Ok(added) => {
                    for alloc in &added {
                        self.start_alloc(alloc, false);
                    }
                    if !added.is_empty() {
                        log::info!(
                            "placed {} queued allocations of job {id:?}: the node changed",
                            added.len()
                        );
                    }
                    started += added.len();
                }
                Err(e) => log::warn!("placing the queued allocations of job {id:?}: {e}"),
            }
        }
        started
    }

    /// One job's blocked evaluation, run again: the allocations it added (none when nothing new
    /// fits, and then nothing is written).
    pub(super) fn place_queued(&self, id: &str) -> Result<Vec<Arc<Allocation>>, AllocError> {
        let added = self.commit(
            || format!("placing the queued allocations of job {id:?}"),
            |reg| {
                let Some(record) = reg.jobs.get(id).filter(|j| !j.stop) else {
                    return Ok(None);
                };
                if blocked(record).is_none() {
                    return Ok(None);
                }
                let mine: Vec<&Arc<Allocation>> = reg
                    .allocs
                    .values()
                    .filter(|a| a.job.id == id && a.desired() == DesiredStatus::Run)
                    .collect();
                let mut here = self.plan_here(reg, &record.job, &mine, &[]);
                if here.placed() == 0 {
                    return Ok(None);
                }
                let adding = here.placed() as u64;
                reg.check_room(id, adding, self.engine.max_allocs)?;
                // The allocations of one version share their job (see `Allocation::job`).
                let job = mine
                    .iter()
                    .map(|a| a.job_now().0)
                    .find(|job| **job == record.job)
                    .unwrap_or_else(|| Arc::new(record.job.clone()));
                let now = now_nanos();
                let version = record.version;
                let add = here.allocations(&job, version, now);
                Ok(Some(Change {
                    put_job: Some(JobRecord {
                        evaluations: after_reevaluation(
                            &record.evaluations,
                            &here.plan.failures,
                            now,
                        ),
                        ..record.clone()
                    }),
                    add,
                    at: now,
                    ..Change::default()
                }))
            },
        )?;
        Ok(added.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Reason;
    use crate::records::EvalStatus;

    /// A job whose constraint the node does not meet is registered without allocations; once
    /// the node meets it, a re-evaluation places it, as one write; a write that fails changes
    /// nothing and the next re-evaluation places it.
    #[test]
    fn a_blocked_job_is_placed_when_the_node_fits_it_all_or_nothing() {
        use crate::alloc::testing::{manager_on, ChangingNode, TestNode};
        let node = Arc::new(ChangingNode(parking_lot::Mutex::new(TestNode::node())));
        let (allocs, dir, _shutdown) = manager_on("reeval", node.clone());
        allocs.store.register(allocs.clone());
        let mut job = crate::alloc::testing::gated_job("j", 2);
        job.task_groups[0].constraints = vec![crate::jobspec::Constraint {
            l_target: "${meta.ready}".into(),
            r_target: "yes".into(),
            operand: crate::jobspec::Operator::Eq,
        }];
        let registered = allocs.register_job(job).unwrap();
        assert_eq!(
            registered.failures,
            [PlacementFailure {
                group: "g".into(),
                failed: 2,
                reason: Reason::Constraint("${meta.ready} = yes".into()),
            }]
        );
        assert!(registered.blocked_eval.is_some());
        assert!(allocs.allocations().is_empty());
        assert_eq!(allocs.reevaluate(), 0, "nothing changed on the node");
        let on_disk = || {
            crate::state::read(&dir).unwrap().jobs[0]
                .evaluations
                .clone()
        };
        assert_eq!(on_disk().len(), 2);
        assert_eq!(allocs.job("j").unwrap().queued["g"], 2);
        assert_eq!(allocs.job("j").unwrap().status, "pending");

        node.0.lock().meta.insert("ready".into(), "yes".into());
        let blocker = crate::state::testing::Blocker::new(&dir);
        assert_eq!(allocs.reevaluate(), 0);
        assert!(
            allocs.allocations().is_empty(),
            "an unsaved placement made nothing"
        );
        assert!(blocked(&allocs.job("j").unwrap().record).is_some());
        blocker.remove();
        assert_eq!(allocs.reevaluate(), 2);
        assert_eq!(allocs.allocations().len(), 2);
        let evals = on_disk();
        assert!(
            evals.iter().all(|e| e.status == EvalStatus::Complete),
            "{evals:?}"
        );
        assert_eq!(crate::state::read(&dir).unwrap().allocations.len(), 2);
        assert!(allocs.job("j").unwrap().queued.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An in-place update moves the running allocations to the job's new version as it is made:
    /// their job and version in memory and in what the state file records (no copy of the old
    /// job), the same allocations, and a restore picks the new version up.
    #[test]
    fn an_in_place_update_moves_the_allocations_to_the_new_version() {
        use crate::state::{Snapshot, StateFile};
        let (allocs, dir, _shutdown) = crate::alloc::testing::manager("in-place");
        let job = crate::alloc::testing::gated_job("web", 2);
        allocs.register_job(job.clone()).unwrap();
        let ids = |allocs: &AllocManager| -> Vec<String> {
            allocs.allocations().iter().map(|a| a.id.clone()).collect()
        };
        let before = ids(&allocs);
        let mut next = job.clone();
        next.kept
            .insert("Update".into(), serde_json::json!({"MaxParallel": 2}));
        assert!(allocs.register_job(next.clone()).unwrap().changed);
        assert_eq!(ids(&allocs), before, "the allocations were replaced");
        let on = |allocs: &AllocManager| -> Vec<(crate::jobspec::Job, u64)> {
            let all = allocs.allocations();
            all.iter()
                .map(|a| a.job_now())
                .map(|(j, v)| ((*j).clone(), v))
                .collect()
        };
        assert_eq!(on(&allocs), [(next.clone(), 1), (next.clone(), 1)]);
        assert_eq!(allocs.job("web").unwrap().record.version, 1);
        let mut state = StateFile::default();
        allocs.fill(&mut state);
        for rec in &state.allocations {
            assert_eq!((rec.job_version, rec.job.is_none()), (Some(1), true));
        }
        let (restored, dir2, _shutdown2) = crate::alloc::testing::manager("in-place-restored");
        restored.restore(&state);
        assert_eq!(ids(&restored), before);
        assert_eq!(on(&restored), [(next.clone(), 1), (next, 1)]);
        let _ = std::fs::remove_dir_all(&dir2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An allocation that has ended stays on the version it ran, as Nomad's in-place update
    /// leaves a terminal allocation; the live one moves.
    #[test]
    fn an_in_place_update_leaves_an_ended_allocation_on_its_version() {
        use crate::records::TaskStatus;
        let (allocs, dir, _shutdown) = crate::alloc::testing::manager("in-place-ended");
        let job = crate::alloc::testing::gated_job("web", 2);
        allocs.register_job(job.clone()).unwrap();
        let all = allocs.allocations();
        let ended = all[0].id.clone();
        for t in all[0].tasks.values() {
            t.lock().state = TaskStatus::Dead;
        }
        assert_eq!(all[0].client_status(), "complete");
        let mut next = job.clone();
        next.kept
            .insert("Update".into(), serde_json::json!({"MaxParallel": 2}));
        assert!(allocs.register_job(next.clone()).unwrap().changed);
        let versions: BTreeMap<String, u64> = allocs
            .allocations()
            .iter()
            .map(|a| (a.id.clone(), a.job_now().1))
            .collect();
        assert_eq!(versions[&ended], 0, "{versions:?}");
        assert_eq!(versions[&all[1].id], 1, "{versions:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
