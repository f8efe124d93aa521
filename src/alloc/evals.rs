//! Evaluations: what each placement of a job on this node decided, kept with the job's record
//! (`JobRecord::evaluations`) so that `job status` and the API still show a placement failure
//! after an agent restart, and the blocked evaluation that holds what could not be placed.
//!
//! As in Nomad: a registration is a `job-register` evaluation, `complete`, naming the groups it
//! could not place (`FailedTGAllocs`); when there are some, a second evaluation, `blocked`
//! (`queued-allocs`), holds the allocations still to place. [`AllocManager::reevaluate`] runs
//! when the node's fingerprints may have changed (every docker health check, and SIGHUP): for
//! each job with a blocked evaluation it places what now fits, as one all-or-nothing write of the
//! registry (`manager`'s commit), marks the blocked evaluation `complete` and, when something
//! still does not fit, blocks a new one. A new registration of the job, or its stop, cancels its
//! blocked evaluation (`canceled`).
//!
//! Threads: `reevaluate` runs on the caller's thread (the agent's `docker-fingerprint` thread or a
//! reload worker); it takes the state file's write lock and the registry lock as an API write does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::capacity;
use super::cores::TaskCores;
use super::manager::{AllocManager, Change};
use super::model::Allocation;
use super::placement::{Placement, PlacementFailure, Reason};
use super::ports::PortIndex;
use super::AllocError;
use crate::jobspec::network::AllocatedPort;
use crate::records::{AllocRecord, DesiredStatus, EvalRecord, EvalStatus, JobRecord};
use crate::task::events::now_nanos;

/// How many evaluations a job keeps: enough for `job status` and a look back, bounded so that a
/// node whose docker engine flaps does not grow the state file without end.
pub const MAX_EVALS: usize = 8;

/// `TriggeredBy` of a registration's evaluation.
pub const TRIGGER_REGISTER: &str = "job-register";
/// `TriggeredBy` of a blocked evaluation (Nomad's).
pub const TRIGGER_QUEUED: &str = "queued-allocs";

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
pub(super) fn after_register(
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
fn after_reevaluation(
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
pub(super) fn after_stop(previous: &[EvalRecord], now: i64) -> Vec<EvalRecord> {
    let mut evals = previous.to_vec();
    cancel_blocked(&mut evals, now);
    evals
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

    /// The ports ([`assign_ports`]) and then the cores ([`super::cores::assign_cores`]) of
    /// each allocation `placement` adds, under the registry lock, from what live allocations
    /// but `stopping`'s do not hold; what cannot get them is refused. No cores to give when
    /// the node has no capacity to check.
    pub(super) fn grant(
        &self,
        reg: &super::manager::Registry,
        node: &super::placement::Node,
        job: &crate::jobspec::Job,
        placement: &mut Placement,
        stopping: &[Arc<Allocation>],
    ) -> Grants {
        let mut index = reg.port_index(&self.engine.network, stopping);
        let ports = assign_ports(&mut index, job, placement);
        let cores = node.capacity.as_ref().map_or(&[][..], |c| &c.cores[..]);
        let mut index = reg.core_index(cores, stopping);
        let cores = super::cores::assign_cores(&mut index, job, placement);
        Grants { ports, cores }
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
                let mut existing = BTreeMap::<String, u32>::new();
                let mut taken = BTreeMap::<String, BTreeSet<u32>>::new();
                for a in &mine {
                    *existing.entry(a.group.clone()).or_default() += 1;
                    taken.entry(a.group.clone()).or_default().insert(a.index);
                }
                let node = self.engine.node.node();
                let mut placement = capacity::place(reg, &record.job, &node, &existing, &[]);
                let grants = self.grant(reg, &node, &record.job, &mut placement, &[]);
                if placement.place.is_empty() {
                    return Ok(None);
                }
                let adding: u64 = placement.place.values().map(|n| u64::from(*n)).sum();
                reg.check_room(id, adding, self.engine.max_allocs)?;
                // The allocations of one version share their job (see `Allocation::job`).
                let job = mine
                    .iter()
                    .map(|a| a.job_now().0)
                    .find(|job| **job == record.job)
                    .unwrap_or_else(|| Arc::new(record.job.clone()));
                let now = now_nanos();
                let version = record.version;
                let add = new_allocations(&job, version, &placement.place, &taken, grants, now);
                Ok(Some(Change {
                    put_job: Some(JobRecord {
                        evaluations: after_reevaluation(
                            &record.evaluations,
                            &placement.failures,
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

/// The host ports of each allocation `placement` adds, group by group, in the job's group
/// order: an allocation that cannot get its ports (a static port another allocation holds, the
/// dynamic range used up) is refused with Nomad's dimension, and so is the rest of its group,
/// while those before it keep theirs. Ports are marked taken in `index` as they are given.
pub(super) fn assign_ports(
    index: &mut PortIndex,
    job: &crate::jobspec::Job,
    placement: &mut Placement,
) -> BTreeMap<String, Vec<Vec<AllocatedPort>>> {
    let mut given = BTreeMap::new();
    for group in &job.task_groups {
        let wanted = placement.place.get(&group.name).copied().unwrap_or(0);
        let mut ports = Vec::new();
        for _ in 0..wanted {
            match index.assign(&group.networks, &mut |n| fastrand::usize(..n)) {
                Ok(p) => ports.push(p),
                Err(e) => {
                    let refused = wanted - ports.len() as u32;
                    placement.refuse_some(&group.name, refused, Reason::Dimension(e.dimension));
                    break;
                }
            }
        }
        given.insert(group.name.clone(), ports);
    }
    given
}

/// What the allocations a placement adds are given, group by group: host ports and cores.
#[derive(Debug, Default)]
pub(super) struct Grants {
    pub ports: BTreeMap<String, Vec<Vec<AllocatedPort>>>,
    pub cores: BTreeMap<String, Vec<TaskCores>>,
}

/// The allocations a placement adds, in the job's group order, with what
/// [`AllocManager::grant`] gave them. Each new allocation gets the lowest index of its group that no
/// live allocation in `taken` holds, as Nomad names them: counting the live ones instead gave
/// `[1]` twice once `[1]` of three had ended and was placed again beside `[2]`.
pub(super) fn new_allocations(
    job: &Arc<crate::jobspec::Job>,
    version: u64,
    place: &BTreeMap<String, u32>,
    taken: &BTreeMap<String, BTreeSet<u32>>,
    mut grants: Grants,
    now: i64,
) -> Vec<Arc<Allocation>> {
    let mut out = Vec::new();
    for group in &job.task_groups {
        let mut used = taken.get(&group.name).cloned().unwrap_or_default();
        let n = place.get(&group.name).copied().unwrap_or(0);
        let mut ports = grants
            .ports
            .remove(&group.name)
            .unwrap_or_default()
            .into_iter();
        let mut cores = grants
            .cores
            .remove(&group.name)
            .unwrap_or_default()
            .into_iter();
        for _ in 0..n {
            let i = (0..)
                .find(|i| !used.contains(i))
                .expect("u32 indexes are not all taken");
            used.insert(i);
            let p = ports.next().unwrap_or_default();
            let c = cores.next().unwrap_or_default();
            out.push(Arc::new(Allocation::new(job, version, group, i, p, c, now)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New allocations fill the lowest free indexes of their group, around the live ones.
    #[test]
    fn new_allocations_take_the_lowest_free_indexes() {
        let job = Arc::new(crate::alloc::testing::gated_job("j", 3));
        let group = job.task_groups[0].name.clone();
        let taken = BTreeMap::from([(group.clone(), BTreeSet::from([0, 2]))]);
        let place = BTreeMap::from([(group, 2)]);
        let add = new_allocations(&job, 0, &place, &taken, Grants::default(), 0);
        let indexes: Vec<u32> = add.iter().map(|a| a.index).collect();
        assert_eq!(indexes, [1, 3]);
    }

    fn failure(group: &str, failed: u32) -> PlacementFailure {
        PlacementFailure {
            group: group.into(),
            failed,
            reason: Reason::Constraint("missing drivers".into()),
        }
    }

    fn record(evaluations: Vec<EvalRecord>) -> JobRecord {
        JobRecord {
            job: crate::alloc::testing::gated_job("j", 1),
            stop: false,
            version: 0,
            submit_time: 0,
            evaluations,
        }
    }

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
