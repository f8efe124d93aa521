//! A registration's plan without the registration (`job plan`): what registering a job would
//! do to this node's allocations, computed as a registration computes it
//! ([`AllocManager::plan_register`]) and never committed; and the job modify index a
//! registration may be made to depend on (`job run -check-index`).
//!
//! The job modify index is the job record's `submit_time` (nanoseconds since the epoch): it is
//! set anew exactly when a registration changes the job (a new spec, an in-place update) and
//! kept by everything else, and a job registered again after a purge gets a later one, so one
//! job ID never sees an index again. 0 is "no such job", as in Nomad.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::manager::{Change, Registered, Registry};
use super::placement::PlacementFailure;
use super::{AllocError, AllocManager, Allocation};
use crate::jobspec::Job;
use crate::records::{DesiredStatus, JobRecord};

/// What a registration would do to one group's allocations, in Nomad's
/// `DesiredTGUpdates` terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUpdates {
    pub place: u32,
    pub stop: u32,
    pub in_place: u32,
    pub destructive: u32,
    pub ignore: u32,
}

/// A registration's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The job registered now, if any: what the plan's diff compares against.
    pub existing: Option<JobRecord>,
    /// Group → updates, for the groups of the job planned and those it would drop.
    pub groups: BTreeMap<String, GroupUpdates>,
    /// What this node could not place.
    pub failures: Vec<PlacementFailure>,
    /// The job modify index now (0: no such job), for `job run -check-index`.
    pub modify_index: u64,
}

/// A job record's modify index (see the module doc).
pub fn modify_index(record: &JobRecord) -> u64 {
    u64::try_from(record.submit_time).unwrap_or(0)
}

/// The job modify index of `id` in `reg`: 0 when no job has that ID.
pub(super) fn index_of(reg: &Registry, id: &str) -> u64 {
    reg.jobs.get(id).map_or(0, modify_index)
}

/// Refuses a registration sent with Nomad's `EnforceIndex` when the job's modify index is not
/// `expected` (0: the job must not exist), in Nomad's words. Called under the registry lock the
/// registration is planned under, so no other registration comes in between.
pub(super) fn check_index(reg: &Registry, id: &str, expected: u64) -> Result<(), AllocError> {
    let prefix = format!("Enforcing job modify index {expected}");
    let refused = |why: String| Err(AllocError::IndexConflict(format!("{prefix}: {why}")));
    match (index_of(reg, id), expected) {
        (0, 0) => Ok(()),
        (_, 0) => refused("job already exists".to_string()),
        (0, _) => refused("job does not exist".to_string()),
        (now, expected) if now != expected => refused(format!(
            "job exists with conflicting job modify index: {now}"
        )),
        _ => Ok(()),
    }
}

impl AllocManager {
    /// [`AllocManager::register_job`], refused unless the job's modify index is `index` when
    /// given (Nomad's `EnforceIndex`; see `super::plan`), checked under the registry lock the
    /// registration is planned under.
    pub fn register_job_at(
        self: &Arc<Self>,
        job: Job,
        index: Option<u64>,
    ) -> Result<Registered, AllocError> {
        let id = job.id.clone();
        self.register_planned(
            &id,
            || format!("registering job {id:?}"),
            |reg, eval, failures| {
                if let Some(index) = index {
                    check_index(reg, &id, index)?;
                }
                self.plan_register(reg, job, eval, failures)
            },
        )
    }

    /// What registering `job` would do (`PUT /v1/job/:id/plan`): computed from the registry as
    /// [`AllocManager::register_job`] computes it, under the registry lock only for that, and
    /// nothing of it recorded or made.
    pub fn plan_job(&self, job: Job) -> Result<Plan, AllocError> {
        let reg = self.registry.lock();
        let mut failures = Vec::new();
        let existing = reg.jobs.get(&job.id).cloned();
        let groups: Vec<String> = job.task_groups.iter().map(|g| g.name.clone()).collect();
        let id = job.id.clone();
        // Only no-effect settings changed: the allocations run on (`evals::in_place`).
        let in_place = existing
            .as_ref()
            .is_some_and(|e| !e.stop && e.job != job && e.job.eq_but_kept(&job));
        let change = self.plan_register(&reg, job, "plan", &mut failures)?;
        let running = running_by_group(&reg, &id, |_| true);
        // An in-place update leaves an allocation that has ended on its version.
        let live = running_by_group(&reg, &id, Allocation::is_running_or_pending);
        if change.is_none() {
            if let Some(e) = &existing {
                failures = crate::plan::evals::current_failures(e);
            }
        }
        let modify_index = index_of(&reg, &id);
        drop(reg);
        let mut out: BTreeMap<String, GroupUpdates> = groups
            .into_iter()
            .map(|g| (g, GroupUpdates::default()))
            .collect();
        match &change {
            None => {
                for (group, n) in &running {
                    out.entry(group.clone()).or_default().ignore = *n;
                }
            }
            Some(_) if in_place => {
                for (group, n) in &running {
                    let live = live.get(group).copied().unwrap_or(0);
                    let g = out.entry(group.clone()).or_default();
                    g.in_place = live;
                    g.ignore = n - live;
                }
            }
            Some(c) => updates(c, &failures, &mut out),
        }
        Ok(Plan {
            existing,
            groups: out,
            failures,
            modify_index,
        })
    }
}

/// A group's allocations that are to run and `keep` holds for, counted.
fn running_by_group(
    reg: &Registry,
    id: &str,
    keep: impl Fn(&Allocation) -> bool,
) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for a in reg.allocs.values() {
        if a.job.id == id && a.desired() == DesiredStatus::Run && keep(a) {
            *out.entry(a.group.clone()).or_default() += 1;
        }
    }
    out
}

/// The updates of a registration's `change`: an allocation stopped where one of its group is
/// added is replaced (a destructive update); what fails to place is still a placement asked
/// for.
fn updates(
    change: &Change,
    failures: &[PlacementFailure],
    out: &mut BTreeMap<String, GroupUpdates>,
) {
    let count = |allocs: &[Arc<super::Allocation>]| {
        let mut n = BTreeMap::<String, u32>::new();
        for a in allocs {
            *n.entry(a.group.clone()).or_default() += 1;
        }
        n
    };
    let (stopped, added) = (count(&change.stop), count(&change.add));
    for (group, n) in &stopped {
        out.entry(group.clone()).or_default().stop = *n;
    }
    for (group, n) in &added {
        out.entry(group.clone()).or_default().place = *n;
    }
    for f in failures {
        out.entry(f.group.clone()).or_default().place += f.failed;
    }
    for u in out.values_mut() {
        let replaced = u.stop.min(u.place);
        u.destructive = replaced;
        u.stop -= replaced;
        u.place -= replaced;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{desired, gated_job, manager};
    use super::*;

    /// A plan counts what the registration would do and does none of it: the registry, its
    /// allocations and the state file stay as they were.
    #[test]
    fn a_plan_counts_the_registration_and_changes_nothing() {
        let (allocs, dir, _shutdown) = manager("plan");
        allocs.store.register(allocs.clone());
        let new = allocs.plan_job(gated_job("web", 2)).unwrap();
        assert_eq!(new.modify_index, 0);
        assert!(new.existing.is_none());
        let place = GroupUpdates {
            place: 2,
            ..GroupUpdates::default()
        };
        assert_eq!(new.groups["g"], place);
        assert!(allocs.job_ids().is_empty() && allocs.allocations().is_empty());
        assert!(crate::state::read(&dir).map_or(true, |s| s.jobs.is_empty()));

        allocs.register_job(gated_job("web", 2)).unwrap();
        let before = (desired(&allocs), allocs.job("web").unwrap().record);
        let same = allocs.plan_job(gated_job("web", 2)).unwrap();
        let ignore = GroupUpdates {
            ignore: 2,
            ..GroupUpdates::default()
        };
        assert_eq!(same.groups["g"], ignore);
        assert_eq!(same.modify_index, modify_index(&before.1));
        let bigger = allocs.plan_job(gated_job("web", 3)).unwrap();
        let replace = GroupUpdates {
            destructive: 2,
            place: 1,
            ..GroupUpdates::default()
        };
        assert_eq!(bigger.groups["g"], replace);
        let after = (desired(&allocs), allocs.job("web").unwrap().record);
        assert_eq!(after.0, before.0);
        assert_eq!(after.1.version, before.1.version);
        assert_eq!(after.1.submit_time, before.1.submit_time);
        let on_disk = crate::state::read(&dir).unwrap();
        assert_eq!(on_disk.jobs[0].version, 0);
        assert_eq!(on_disk.allocations.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A registration with an index is made only at that index, in Nomad's words otherwise.
    #[test]
    fn an_enforced_index_refuses_any_other() {
        let (allocs, dir, _shutdown) = manager("check-index");
        let refused = |r: Result<Registered, AllocError>| match r {
            Err(AllocError::IndexConflict(m)) => m,
            other => panic!("not refused: {other:?}"),
        };
        let m = refused(allocs.register_job_at(gated_job("web", 1), Some(7)));
        assert_eq!(m, "Enforcing job modify index 7: job does not exist");
        assert!(allocs.job_ids().is_empty());
        allocs
            .register_job_at(gated_job("web", 1), Some(0))
            .unwrap();
        let index = modify_index(&allocs.job("web").unwrap().record);
        let m = refused(allocs.register_job_at(gated_job("web", 2), Some(0)));
        assert_eq!(m, "Enforcing job modify index 0: job already exists");
        let m = refused(allocs.register_job_at(gated_job("web", 2), Some(index - 1)));
        assert_eq!(
            m,
            format!(
                "Enforcing job modify index {}: job exists with conflicting job modify index: \
                 {index}",
                index - 1
            )
        );
        assert_eq!(allocs.allocations().len(), 1);
        let changed = allocs
            .register_job_at(gated_job("web", 2), Some(index))
            .unwrap();
        assert!(changed.changed);
        assert!(modify_index(&allocs.job("web").unwrap().record) > index);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
