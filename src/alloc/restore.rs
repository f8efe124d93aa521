//! Restoring from the state file at start: processes a crashed agent left behind are stopped,
//! then jobs and allocations are put back in the registry and those that should run are started
//! again (live-restore.md: their runners re-attach to tasks that still run).
//!
//! Runs on the agent's main thread during start-up, before the API serves. A stop signal during
//! the start-up disconnects the shutdown channel: restored allocations are then recorded but not
//! started.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::manager::AllocManager;
use super::model::Allocation;
use crate::driver;
use crate::jobspec::Job;
use crate::records::{AllocRecord, DesiredStatus, JobRecord};
use crate::state::StateFile;
use crate::util::allocdir;

impl AllocManager {
    /// Picks up the jobs and allocations of the state file: processes left by an agent that crashed
    /// are stopped first (those of allocations the file no longer holds too: a purge forgets an
    /// allocation while its task may still be stopping), then allocations that should run are
    /// started again.
    pub fn restore(self: &Arc<Self>, state: &StateFile) {
        let ids: HashSet<String> = state.allocations.iter().map(|a| a.id.clone()).collect();
        stop_leftovers(
            &driver::find_task_processes(&ids, &allocdir::alloc_root(&self.engine.data_dir)),
            &state.allocations,
            &state.jobs,
        );
        let mut to_start = Vec::new();
        {
            let mut reg = self.registry.lock();
            let mut shared = BTreeMap::new();
            for j in &state.jobs {
                reg.jobs.insert(j.job.id.clone(), j.clone());
                shared.insert(j.job.id.as_str(), Arc::new(j.job.clone()));
            }
            for rec in &state.allocations {
                let Some(alloc) = restored_alloc(rec, shared.get(rec.job_id.as_str())) else {
                    log::error!("allocation {} names a group its job lacks; skipped", rec.id);
                    continue;
                };
                let alloc = Arc::new(alloc);
                reg.allocs.insert(alloc.id.clone(), alloc.clone());
                if rec.desired_status == DesiredStatus::Run {
                    to_start.push(alloc);
                }
            }
        }
        if matches!(
            self.engine.deps.shutdown.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ) {
            log::info!("the agent is stopping: restored allocations are not started");
            return;
        }
        for alloc in to_start {
            self.start_alloc(&alloc, true);
        }
    }
}

/// `current` is the registered version of the allocation's job, shared by the allocations that
/// run it; an allocation of an older version gets its own copy.
fn restored_alloc(rec: &AllocRecord, current: Option<&Arc<Job>>) -> Option<Allocation> {
    let job = match (&rec.job, current) {
        (Some(old), _) => Arc::new(old.clone()),
        (None, Some(job)) => job.clone(),
        (None, None) => return None,
    };
    Allocation::from_record(rec, job)
}

/// Stops task processes that an agent which crashed left running: every group gets its task's
/// kill signal at once, then SIGKILL after the longest kill timeout.
fn stop_leftovers(found: &[driver::Leftover], allocs: &[AllocRecord], jobs: &[JobRecord]) {
    if found.is_empty() {
        return;
    }
    let mut groups = BTreeMap::new();
    let mut wait = Duration::ZERO;
    for l in found {
        let task = allocs
            .iter()
            .find(|a| a.id == l.alloc_id)
            .and_then(|a| {
                let job = a
                    .job
                    .as_ref()
                    .or_else(|| jobs.iter().find(|j| j.job.id == a.job_id).map(|j| &j.job))?;
                job.task_groups.iter().find(|g| g.name == a.task_group)
            })
            .and_then(|g| g.tasks.iter().find(|t| t.name == l.task));
        let (signal, timeout) = task
            .map(|t| (t.kill_signal.number(), t.kill_timeout))
            .unwrap_or((libc::SIGINT, Duration::from_secs(5)));
        wait = wait.max(timeout);
        groups.insert(l.pgid, signal);
        log::info!(
            "stopping process {} (group {}) of task {} in alloc {}, left by a previous agent",
            l.pid,
            l.pgid,
            l.task,
            l.alloc_id
        );
    }
    // Returns once they are gone: only then may the tasks start again (never two runs of a task).
    driver::stop_groups(&groups, wait);
}
