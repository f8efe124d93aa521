//! Child jobs of templates: a periodic job's launches and a parameterized job's dispatches
//! (Nomad's `nomad/periodic.go` and `Job.Dispatch`). A child is a normal job with `ParentID`,
//! registered through the same all-or-nothing write as any job; the checks that decide whether
//! it may be made (the parent is still there and not stopped, no child running under
//! `prohibit_overlap`, the dispatch's payload and meta) are made in the registration's plan,
//! under the registry lock, so a stop or purge of the parent cannot slip in between.

use base64::Engine as _;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::manager::Registry;
use super::{AllocError, AllocManager};
use crate::jobspec::periodic::{check_dispatch, ParameterizedConfig};
use crate::jobspec::Job;
use crate::records::{DesiredStatus, JobRecord};

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

/// Whether a child of `parent` still runs: an allocation that should run and is not terminal.
fn child_running(reg: &Registry, parent: &str) -> bool {
    reg.allocs.values().any(|a| {
        a.job.parent_id == parent
            && a.desired() == DesiredStatus::Run
            && matches!(a.client_status(), "pending" | "running")
    })
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
    /// `job periodic force`, which launches now whatever the schedule says, a running child or
    /// a disabled schedule, as Nomad's `ForceLaunch`.
    pub fn launch_periodic(
        self: &Arc<Self>,
        parent: &str,
        at: i64,
        force: bool,
    ) -> Result<Option<Launched>, AllocError> {
        let child_id = format!("{parent}/periodic-{at}");
        let registered = self.register_planned(
            || format!("launching {child_id:?}"),
            |reg| {
                let record = live_parent(reg, parent)?;
                let Some(periodic) = &record.job.periodic else {
                    return Err(AllocError::ChildRefused(
                        "can't force launch non-periodic job".to_string(),
                    ));
                };
                if (!force && !periodic.enabled)
                    || reg.jobs.contains_key(&child_id)
                    || (periodic.prohibit_overlap && !force && child_running(reg, parent))
                {
                    return Ok(None);
                }
                self.plan_register(reg, derive(&record.job, child_id.clone()))
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
            || format!("dispatching {child_id:?}"),
            |reg| {
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
                for task in child
                    .task_groups
                    .iter_mut()
                    .flat_map(|g| g.tasks.iter_mut())
                {
                    for (k, v) in &request.meta {
                        task.env.insert(format!("NOMAD_META_{k}"), v.clone());
                    }
                }
                self.plan_register(reg, child)
            },
        )?;
        Ok(Launched {
            job_id: child_id,
            eval_id: registered.eval_id,
        })
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
