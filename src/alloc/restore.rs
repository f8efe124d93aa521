//! Restoring from the state file at start: jobs and allocations are put back in the registry and
//! those that should run get their runners again, which re-attach to their tasks through the
//! keeper (live-restore.md). Before that, what no runner will take over is stopped: tasks the
//! keeper holds for allocations the state file no longer runs, and task processes outside the
//! keeper (left by an agent before the keeper, or that left their task's process group).
//!
//! Runs on the agent's main thread during start-up, before the API serves. A stop signal during
//! the start-up disconnects the shutdown channel: restored allocations are then recorded but not
//! started.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::manager::AllocManager;
use super::model::Allocation;
use crate::driver::process::keeper::{client::Kept, Held};
use crate::driver::{self, KeeperClient};
use crate::jobspec::{Job, TaskGroup};
use crate::records::{AllocRecord, DesiredStatus, JobRecord, TaskStatus};
use crate::state::StateFile;
use crate::util::allocdir;

impl AllocManager {
    /// Picks up the jobs and allocations of the state file: processes left by an agent that crashed
    /// are stopped first (those of allocations the file no longer holds too: a purge forgets an
    /// allocation while its task may still be stopping), then allocations that should run are
    /// started again.
    pub fn restore(self: &Arc<Self>, state: &StateFile) {
        let ids: HashSet<String> = state.allocations.iter().map(|a| a.id.clone()).collect();
        let resumed = resumed_tasks(&state.allocations, &state.jobs);
        let keeper = &self.engine.keeper;
        stop_unwanted(
            keeper.unwanted(|h| resumed.contains(&(h.alloc_id.clone(), h.task.clone()))),
            keeper,
            &state.allocations,
            &state.jobs,
        );
        // The keeper's own tasks (and what they started) are their runners' to take over.
        let held = keeper.running();
        let outside: Vec<driver::Leftover> =
            driver::find_task_processes(&ids, &allocdir::alloc_root(&self.engine.data_dir))
                .into_iter()
                .filter(|l| !held.contains(&(l.alloc_id.clone(), l.task.clone())))
                .collect();
        stop_leftovers(&outside, &state.allocations, &state.jobs);
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

/// The task group a recorded allocation runs: from its own copy of an older job version, or from
/// the registered job.
fn group_of<'a>(a: &'a AllocRecord, jobs: &'a [JobRecord]) -> Option<&'a TaskGroup> {
    a.job
        .as_ref()
        .or_else(|| jobs.iter().find(|j| j.job.id == a.job_id).map(|j| &j.job))
        .and_then(|job| job.task_groups.iter().find(|g| g.name == a.task_group))
}

/// The allocations and tasks whose runners start again: their allocation should run and the task
/// is not dead.
fn resumed_tasks(allocs: &[AllocRecord], jobs: &[JobRecord]) -> HashSet<(String, String)> {
    allocs
        .iter()
        .filter(|a| a.desired_status == DesiredStatus::Run)
        .flat_map(|a| {
            group_of(a, jobs)
                .into_iter()
                .flat_map(|g| g.tasks.iter())
                .filter(|t| {
                    a.task_states
                        .get(&t.name)
                        .is_none_or(|s| s.state != TaskStatus::Dead)
                })
                .map(|t| (a.id.clone(), t.name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The kill signal and timeout of a recorded task; SIGINT and 5 s for one the state file lacks.
fn kill_settings(
    alloc_id: &str,
    task: &str,
    allocs: &[AllocRecord],
    jobs: &[JobRecord],
) -> (i32, Duration) {
    allocs
        .iter()
        .find(|a| a.id == alloc_id)
        .and_then(|a| group_of(a, jobs))
        .and_then(|g| g.tasks.iter().find(|t| t.name == task))
        .map(|t| (t.kill_signal.number(), t.kill_timeout))
        .unwrap_or((libc::SIGINT, Duration::from_secs(5)))
}

/// Stops tasks the keeper holds that no runner takes over, all at once: each its kill signal,
/// then SIGKILL after its kill timeout; returns once they are reaped (or the waits ran out).
fn stop_unwanted(
    tasks: Vec<(Held, Kept)>,
    keeper: &KeeperClient,
    allocs: &[AllocRecord],
    jobs: &[JobRecord],
) {
    let started = Instant::now();
    let mut waiting = Vec::new();
    for (held, kept) in tasks {
        if held.exit.is_some() {
            keeper.forget(held.pid);
            continue;
        }
        let (signal, timeout) = kill_settings(&held.alloc_id, &held.task, allocs, jobs);
        log::info!(
            "stopping process {} of task {} in alloc {}: the allocation no longer runs here",
            held.pid,
            held.task,
            held.alloc_id
        );
        if let Err(e) = keeper.signal(held.pid, signal) {
            log::warn!("cannot signal process {}: {e}", held.pid);
        }
        waiting.push((kept, started + timeout));
    }
    for (kept, deadline) in waiting {
        let left = deadline.saturating_duration_since(Instant::now());
        if kept.exited.recv_timeout(left).is_err() {
            let _ = keeper.signal(kept.pid, libc::SIGKILL);
            let _ = kept.exited.recv_timeout(driver::SIGKILL_WAIT);
        }
        keeper.forget(kept.pid);
    }
}

/// Stops task processes outside the keeper: every group gets its task's kill signal at once,
/// then SIGKILL after the longest kill timeout.
fn stop_leftovers(found: &[driver::Leftover], allocs: &[AllocRecord], jobs: &[JobRecord]) {
    if found.is_empty() {
        return;
    }
    let mut groups = BTreeMap::new();
    let mut wait = Duration::ZERO;
    for l in found {
        let (signal, timeout) = kill_settings(&l.alloc_id, &l.task, allocs, jobs);
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
