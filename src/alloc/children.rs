//! Child jobs of templates: a periodic job's launches and a parameterized job's dispatches
//! (Nomad's `nomad/periodic.go` and `Job.Dispatch`). A child is a normal job with `ParentID`,
//! registered through the same all-or-nothing write as any job; the checks that decide whether
//! it may be made (the parent is still there and not stopped, no child running under
//! `prohibit_overlap`, the dispatch's payload and meta) are made in the registration's plan,
//! under the registry lock, so a stop or purge of the parent cannot slip in between.
//!
//! Children do not pile up: a child is finished when every allocation it has is terminal (every
//! task `dead`; one whose allocations were collected has none). Each launch or dispatch forgets
//! the parent's oldest finished children past `client { job_gc_children }` in the same write
//! that registers the new child, and `PUT /v1/system/gc` forgets every finished child
//! ([`AllocManager::collect_children`]). A child that runs is never forgotten. Forgotten
//! children's allocation directories are swept by the allocation collector (`super::gc`).

use base64::Engine as _;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::manager::{Change, Registry};
use super::{AllocError, AllocManager};
use crate::jobspec::periodic::{check_dispatch, ParameterizedConfig};
use crate::jobspec::Job;
use crate::records::{DesiredStatus, JobRecord};
use crate::task::events::TaskStatus;

/// A child made: its job ID and the evaluation ID of its registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launched {
    pub job_id: String,
    pub eval_id: String,
}

/// What a dispatch carries (`POST /v1/job/:id/dispatch`).
#[derive(Debug, Clone, Default)]
pub struct DispatchRequest {
    pub payload: Vec<u8>,
    pub meta: BTreeMap<String, String>,
}

/// The parent's record, if it may have children now.
fn live_parent<'r>(reg: &'r Registry, id: &str) -> Result<&'r JobRecord, AllocError> {
    let record = reg.jobs.get(id).ok_or(AllocError::JobNotFound)?;
    if record.stop {
        return Err(AllocError::ChildRefused(format!(
            "Specified job {id:?} is stopped"
        )));
    }
    Ok(record)
}

/// Whether the job record waits for allocations the node could not place yet (a blocked
/// evaluation): work that has not run, so neither finished nor free to be forgotten.
fn queued(record: &JobRecord) -> bool {
    !record.stop && crate::plan::evals::blocked(record).is_some()
}

/// Whether a child of `parent` still runs: an allocation that should run and is not terminal,
/// or a child still waiting to be placed (as Nomad counts a child with a pending evaluation).
fn child_running(reg: &Registry, parent: &str) -> bool {
    reg.allocs.values().any(|a| {
        a.job.parent_id == parent
            && a.desired() == DesiredStatus::Run
            && a.client_status().is_live()
    }) || reg
        .jobs
        .values()
        .any(|r| r.job.parent_id == parent && queued(r))
}

/// Whether the job `id` is finished: nothing of it waits to be placed and every task of every
/// allocation it has is `dead`.
fn finished(reg: &Registry, id: &str) -> bool {
    if reg.jobs.get(id).is_some_and(queued) {
        return false;
    }
    reg.allocs.values().filter(|a| a.job.id == id).all(|a| {
        a.lock_tasks()
            .iter()
            .all(|(_, t)| t.state == TaskStatus::Dead)
    })
}

/// The finished children to forget: of `parent` (every parent when `None`), all but the
/// `keep` newest, oldest first.
fn finished_children(reg: &Registry, parent: Option<&str>, keep: usize) -> Vec<String> {
    let mut by_parent: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for r in reg.jobs.values() {
        let p = r.job.parent_id.as_str();
        if p.is_empty() || parent.is_some_and(|want| want != p) || !finished(reg, &r.job.id) {
            continue;
        }
        by_parent
            .entry(p)
            .or_default()
            .push((r.submit_time, r.job.id.as_str()));
    }
    let mut out = Vec::new();
    for mut children in by_parent.into_values() {
        children.sort();
        let excess = children.len().saturating_sub(keep);
        out.extend(children[..excess].iter().map(|(_, id)| id.to_string()));
    }
    out
}

/// Adds to a child's registration the forgetting of its parent's finished children past
/// `keep`: one write, whole or not at all.
fn with_trim(
    planned: Result<Option<Change>, AllocError>,
    reg: &Registry,
    parent: &str,
    keep: usize,
) -> Result<Option<Change>, AllocError> {
    let mut change = planned?;
    if let Some(c) = change.as_mut() {
        // The new child is not in the registry yet: `keep` finished ones besides it.
        c.forget_jobs = finished_children(reg, Some(parent), keep);
    }
    Ok(change)
}

/// The child of `parent` named `id`: the parent's groups, without its template block.
fn derive(parent: &Job, id: String) -> Job {
    Job {
        name: id.clone(),
        id,
        periodic: None,
        parameterized_job: None,
        parent_id: parent.id.clone(),
        ..parent.clone()
    }
}

impl AllocManager {
    /// Launches the periodic job `parent`'s child for the instant `at` (unix seconds):
    /// `<parent>/periodic-<at>`. `Ok(None)` when nothing was launched: `prohibit_overlap` and a
    /// child still runs, or the child of that instant exists already. `force` is
    /// `job periodic force`, which launches now whatever the schedule says or a running child,
    /// as Nomad's `ForceLaunch`; a disabled schedule (`enabled = false`) is refused, as there.
    pub fn launch_periodic(
        self: &Arc<Self>,
        parent: &str,
        at: i64,
        force: bool,
    ) -> Result<Option<Launched>, AllocError> {
        let child_id = format!("{parent}/periodic-{at}");
        let registered = self.register_planned(
            &child_id,
            || format!("launching {child_id:?}"),
            |reg, eval, failures| {
                let record = live_parent(reg, parent)?;
                let Some(periodic) = &record.job.periodic else {
                    return Err(AllocError::ChildRefused(
                        "can't force launch non-periodic job".to_string(),
                    ));
                };
                if force && !periodic.enabled {
                    // Nomad's dispatcher tracks only enabled schedules, and forces only those.
                    return Err(AllocError::ChildRefused(format!(
                        "force launch for job {parent:?} failed: can't force run non-tracked \
                         job {parent:?} ({})",
                        record.job.fields.namespace
                    )));
                }
                if !periodic.enabled
                    || reg.jobs.contains_key(&child_id)
                    || (periodic.prohibit_overlap && !force && child_running(reg, parent))
                {
                    return Ok(None);
                }
                let planned =
                    self.plan_register(reg, derive(&record.job, child_id.clone()), eval, failures);
                with_trim(planned, reg, parent, self.engine.job_gc_children)
            },
        )?;
        Ok(registered.changed.then_some(Launched {
            job_id: child_id,
            eval_id: registered.eval_id,
        }))
    }

    /// Dispatches the parameterized job `parent`: checks the request against its
    /// `parameterized` block with Nomad's messages, then registers
    /// `<parent>/dispatch-<now>-<8 hex>` with the payload and the meta (as `NOMAD_META_<key>`
    /// in each task's environment). `now` is unix seconds; `suffix` the 8 hex digits.
    pub fn dispatch(
        self: &Arc<Self>,
        parent: &str,
        request: DispatchRequest,
        now: i64,
        suffix: &str,
    ) -> Result<Launched, AllocError> {
        let child_id = format!("{parent}/dispatch-{now}-{suffix}");
        let registered = self.register_planned(
            &child_id,
            || format!("dispatching {child_id:?}"),
            |reg, eval, failures| {
                let record = live_parent(reg, parent)?;
                let config: &ParameterizedConfig =
                    record.job.parameterized_job.as_ref().ok_or_else(|| {
                        AllocError::ChildRefused(format!(
                            "Specified job {parent:?} is not a parameterized job"
                        ))
                    })?;
                check_dispatch(config, &request.payload, &request.meta)
                    .map_err(AllocError::ChildRefused)?;
                let mut child = derive(&record.job, child_id.clone());
                child.payload = base64::engine::general_purpose::STANDARD.encode(&request.payload);
                // As in Nomad, the dispatched meta is the child job's own: its tasks see it as
                // `NOMAD_META_<key>` and `${meta.<key>}` (group and task meta still win).
                child
                    .meta
                    .extend(request.meta.iter().map(|(k, v)| (k.clone(), v.clone())));
                let planned = self.plan_register(reg, child, eval, failures);
                with_trim(planned, reg, parent, self.engine.job_gc_children)
            },
        )?;
        Ok(Launched {
            job_id: child_id,
            eval_id: registered.eval_id,
        })
    }

    /// Forgets every finished child job, of any parent (`PUT /v1/system/gc`), in one write.
    /// Returns their IDs, oldest first per parent.
    pub fn collect_children(&self) -> Result<Vec<String>, AllocError> {
        let mut forgotten = Vec::new();
        self.commit(
            || "collecting finished child jobs".to_string(),
            |reg| {
                forgotten = finished_children(reg, None, 0);
                Ok((!forgotten.is_empty()).then(|| Change {
                    forget_jobs: forgotten.clone(),
                    ..Change::default()
                }))
            },
        )?;
        Ok(forgotten)
    }

    /// The periodic jobs to schedule: ID and config of each registered, not stopped, enabled one.
    pub fn periodic_jobs(&self) -> Vec<(String, crate::jobspec::periodic::PeriodicConfig)> {
        self.registry
            .lock()
            .jobs
            .values()
            .filter(|r| !r.stop)
            .filter_map(|r| {
                let p = r.job.periodic.as_ref().filter(|p| p.enabled)?;
                Some((r.job.id.clone(), p.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{gated_job, manager};
    use super::*;
    use crate::config::DEFAULT_JOB_GC_CHILDREN as KEEP;
    use crate::jobspec::periodic::PeriodicConfig;

    fn periodic(mut job: Job) -> Job {
        job.periodic = Some(PeriodicConfig {
            enabled: true,
            spec: "* * * * *".into(),
            specs: Vec::new(),
            spec_type: "cron".into(),
            prohibit_overlap: false,
            time_zone: "UTC".into(),
        });
        job
    }

    fn children_on_disk(dir: &std::path::Path, parent: &str) -> Vec<String> {
        crate::state::read(dir)
            .unwrap()
            .jobs
            .into_iter()
            .filter(|j| j.job.parent_id == parent)
            .map(|j| j.job.id)
            .collect()
    }

    /// Finished children (here of a group of count 0: no allocation, so finished at once) past
    /// `job_gc_children` are forgotten oldest first by the next launch, in memory and in the
    /// state file; children whose allocations still wait (for a missing volume) never are, by a
    /// launch or by `collect_children`, which forgets every finished one.
    #[test]
    fn launches_forget_the_oldest_finished_children_and_keep_running_ones() {
        let (allocs, dir, _shutdown) = manager("children");
        allocs.store.register(allocs.clone());
        let mut done = gated_job("done", 1);
        done.task_groups[0].count = 0;
        allocs.register_job(periodic(done)).unwrap();
        allocs
            .register_job(periodic(gated_job("waits", 1)))
            .unwrap();
        let n = KEEP as i64 + 5;
        for at in 1..=n {
            allocs.launch_periodic("done", at, false).unwrap().unwrap();
            allocs.launch_periodic("waits", at, false).unwrap().unwrap();
        }
        let ids = |parent: &str| -> Vec<String> {
            let reg = allocs.registry.lock();
            let mut v: Vec<(i64, String)> = reg
                .jobs
                .values()
                .filter(|r| r.job.parent_id == parent)
                .map(|r| (r.submit_time, r.job.id.clone()))
                .collect();
            v.sort();
            v.into_iter().map(|(_, id)| id).collect()
        };
        let want: Vec<String> = (n - KEEP as i64..=n)
            .map(|at| format!("done/periodic-{at}"))
            .collect();
        assert_eq!(ids("done"), want, "the newest kept and the new one");
        let mut on_disk = children_on_disk(&dir, "done");
        on_disk.sort_by_key(|id| id.rsplit('-').next().unwrap().parse::<i64>().unwrap());
        assert_eq!(on_disk, want);
        assert_eq!(ids("waits").len(), n as usize, "running children stay");

        let forgotten = allocs.collect_children().unwrap();
        assert_eq!(forgotten, want);
        assert!(ids("done").is_empty());
        assert!(children_on_disk(&dir, "done").is_empty());
        assert_eq!(ids("waits").len(), n as usize);
        assert!(allocs.collect_children().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A child the node cannot place yet (a constraint it fails: a blocked evaluation, no
    /// allocation) has not run: it is never forgotten, by a launch past `job_gc_children` or by
    /// `collect_children`, and it counts as running for `prohibit_overlap`.
    #[test]
    fn a_child_waiting_to_be_placed_is_neither_finished_nor_forgotten() {
        use crate::jobspec::constraint::{Constraint, Operator};
        let (allocs, dir, _shutdown) = manager("queued-children");
        allocs.store.register(allocs.clone());
        let mut job = periodic(gated_job("queued", 1));
        job.constraints.push(Constraint {
            l_target: "${attr.kernel.name}".into(),
            r_target: "windows".into(),
            operand: Operator::Eq,
        });
        allocs.register_job(job.clone()).unwrap();
        let n = KEEP as i64 + 3;
        for at in 1..=n {
            allocs
                .launch_periodic("queued", at, false)
                .unwrap()
                .unwrap();
        }
        let children = || {
            let reg = allocs.registry.lock();
            reg.jobs
                .values()
                .filter(|r| r.job.parent_id == "queued")
                .count()
        };
        assert_eq!(
            children(),
            n as usize,
            "no queued child is forgotten by a launch"
        );
        assert!(allocs.collect_children().unwrap().is_empty());
        assert_eq!(children(), n as usize);

        job.id = "overlap".into();
        job.name = "overlap".into();
        job.periodic.as_mut().unwrap().prohibit_overlap = true;
        allocs.register_job(job).unwrap();
        assert!(allocs
            .launch_periodic("overlap", 1, false)
            .unwrap()
            .is_some());
        assert!(
            allocs
                .launch_periodic("overlap", 2, false)
                .unwrap()
                .is_none(),
            "a queued child blocks the next launch under prohibit_overlap"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
