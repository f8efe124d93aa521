//! Restoring from the state file at start: jobs and allocations are put back in the registry and
//! those that should run get their runners again, which re-attach to their tasks through the
//! keeper (live-restore.md). Before that, what no runner will take over is stopped: tasks the
//! keeper holds for allocations the state file no longer runs, and task processes outside the
//! keeper (left by an agent before the keeper, or that left their task's process group).
//!
//! Runs on the agent's main thread during start-up, before the API serves. A stop signal during
//! the start-up disconnects the shutdown channel: the waits for stopped processes end at once
//! (what is still stopping is left for the next agent, which stops it again), and restored
//! allocations are recorded but not started. Each wait is a task's `kill_timeout`, cut to
//! `client { max_kill_timeout }`.

use crossbeam_channel::{after, at, select, Receiver};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::lifecycle::Role;
use super::manager::AllocManager;
use super::model::Allocation;
use crate::driver::process::keeper::{client::Kept, Held};
use crate::driver::{self, KeeperClient, TaskExit};
use crate::jobspec::{Job, TaskGroup};
use crate::records::{AllocRecord, DesiredStatus, JobRecord, TaskStatus};
use crate::state::StateFile;
use crate::task::events::{nanos_rfc3339, now_nanos, TaskEvent, TaskState};
use crate::thread::Never;
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
        let sweep = Sweep {
            allocs: &state.allocations,
            jobs: &state.jobs,
            max_kill_timeout: self.engine.max_kill_timeout,
            cancel: &self.engine.deps.shutdown,
        };
        let ended = stop_unwanted(
            keeper.unwanted(|h| resumed.contains(&(h.alloc_id.clone(), h.task.clone()))),
            keeper,
            &sweep,
        );
        // The keeper's own tasks (and what they started) are their runners' to take over.
        let held = keeper.running();
        let outside: Vec<driver::Leftover> =
            driver::find_task_processes(&ids, &allocdir::alloc_root(&self.engine.data_dir))
                .into_iter()
                .filter(|l| !held.contains(&(l.alloc_id.clone(), l.task.clone())))
                .collect();
        stop_leftovers(&outside, &sweep);
        let mut to_start = Vec::new();
        {
            let mut reg = self.registry.lock();
            let mut shared = BTreeMap::new();
            for j in &state.jobs {
                reg.jobs.insert(j.job.id.clone(), j.clone());
                shared.insert(j.job.id.as_str(), (Arc::new(j.job.clone()), j.version));
            }
            for rec in &state.allocations {
                let Some(alloc) = restored_alloc(rec, shared.get(rec.job_id.as_str())) else {
                    log::error!("allocation {} names a group its job lacks; skipped", rec.id);
                    continue;
                };
                let alloc = Arc::new(alloc);
                for (alloc_id, task, exit) in &ended {
                    if *alloc_id == alloc.id {
                        if let Some(state) = alloc.tasks.get(task) {
                            record_swept(&mut state.lock(), exit);
                        }
                    }
                }
                reg.allocs.insert(alloc.id.clone(), alloc.clone());
                if rec.desired_status == DesiredStatus::Run {
                    to_start.push(alloc);
                } else if orders_stop(rec, alloc.group_spec()) {
                    // Stopped while its gate carried out the stop's order: the live tasks are
                    // taken over, the gate kills them on in their order, and the poststop tasks
                    // still to run or end run (or are taken over) now, once.
                    let post_left = alloc.tasks.iter().any(|(name, s)| {
                        poststop(alloc.group_spec(), name) && s.lock().state != TaskStatus::Dead
                    });
                    let mut inner = alloc.inner.lock();
                    inner.ordered_stop = true;
                    inner.run_poststop = post_left;
                    drop(inner);
                    to_start.push(alloc);
                } else if rec.poststop_cut {
                    // Stopped again (`super::stop::cut_poststop`): nothing of it runs on. What
                    // the sweep above did not record ended as its runner was killing it.
                    for state in alloc.tasks.values() {
                        record_swept(&mut state.lock(), &TaskExit::Unknown);
                    }
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

/// `current` is the registered version of the allocation's job and its number, shared by the
/// allocations that run it; an allocation of an older version gets its own copy (version 0 when
/// the record, written before versions were kept, does not say).
fn restored_alloc(rec: &AllocRecord, current: Option<&(Arc<Job>, u64)>) -> Option<Allocation> {
    let (job, version) = match (&rec.job, current) {
        (Some(old), _) => (Arc::new(old.clone()), 0),
        (None, Some((job, version))) => (job.clone(), *version),
        (None, None) => return None,
    };
    Allocation::from_record(rec, job, rec.job_version.unwrap_or(version))
}

/// The task group a recorded allocation runs: from its own copy of an older job version, or from
/// the registered job.
fn group_of<'a>(a: &'a AllocRecord, jobs: &'a [JobRecord]) -> Option<&'a TaskGroup> {
    a.job
        .as_ref()
        .or_else(|| jobs.iter().find(|j| j.job.id == a.job_id).map(|j| &j.job))
        .and_then(|job| job.task_groups.iter().find(|g| g.name == a.task_group))
}

/// Whether a task of `group` is a poststop task.
fn poststop(group: &TaskGroup, task: &str) -> bool {
    group
        .tasks
        .iter()
        .any(|t| t.name == task && Role::of(t) == Role::Poststop)
}

/// Whether a stopped allocation's gate still carries out its stop (`super::stop`): its group
/// orders its tasks, a task is not dead (a task being killed in its turn, or a poststop task still
/// to run or end), the allocation's other tasks began (the stop of one that never began killed it
/// at once and marked its tasks dead), and no second stop cut it (its kill may not have been
/// recorded before the agent went away: everything of it is stopped).
fn orders_stop(a: &AllocRecord, group: &TaskGroup) -> bool {
    let state = |name: &str| a.task_states.get(name);
    let others = group.tasks.iter().filter(|t| Role::of(t) != Role::Poststop);
    a.desired_status == DesiredStatus::Stop
        && !a.poststop_cut
        && super::lifecycle::is_ordered(group)
        && group
            .tasks
            .iter()
            .any(|t| state(&t.name).is_none_or(|s| s.state != TaskStatus::Dead))
        && others
            .into_iter()
            .any(|t| state(&t.name).is_some_and(|s| !s.events.is_empty()))
}

/// The allocations and tasks whose runners start again: the task is not dead, and its allocation
/// should run, or is stopped and its gate still carries out the stop ([`orders_stop`]).
fn resumed_tasks(allocs: &[AllocRecord], jobs: &[JobRecord]) -> HashSet<(String, String)> {
    allocs
        .iter()
        .flat_map(|a| {
            let group = group_of(a, jobs);
            let stopping = group.is_some_and(|g| orders_stop(a, g));
            group
                .into_iter()
                .flat_map(|g| g.tasks.iter())
                .filter(|_| a.desired_status == DesiredStatus::Run || stopping)
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

/// What the start-up's stops need: the recorded allocations and jobs (for each task's kill
/// signal and timeout), the cap on kill timeouts, and the shutdown channel that cancels them.
struct Sweep<'a> {
    allocs: &'a [AllocRecord],
    jobs: &'a [JobRecord],
    max_kill_timeout: Duration,
    cancel: &'a Receiver<Never>,
}

impl Sweep<'_> {
    /// The kill signal and timeout (at most `max_kill_timeout`) of a recorded task; SIGINT and
    /// 5 s for one the state file lacks.
    fn kill_settings(&self, alloc_id: &str, task: &str) -> (i32, Duration) {
        let (signal, timeout) = self
            .allocs
            .iter()
            .find(|a| a.id == alloc_id)
            .and_then(|a| group_of(a, self.jobs))
            .and_then(|g| g.tasks.iter().find(|t| t.name == task))
            .map(|t| (t.kill_signal.number(), t.kill_timeout))
            .unwrap_or((libc::SIGINT, Duration::from_secs(5)));
        (signal, timeout.min(self.max_kill_timeout))
    }

    fn cancelled(&self) {
        log::info!(
            "start-up cancelled by a stop signal while stopping leftover tasks; the next agent stops what is left"
        );
    }
}

/// A task the sweep found ended or stopped, with how it ended.
type Ended = (String, String, TaskExit);

/// Stops tasks the keeper holds that no runner takes over, all at once: each its kill signal,
/// then SIGKILL after its kill timeout; returns once they are reaped (or the waits ran out), or
/// at once when the agent is told to stop (those still running stay with the keeper, which the
/// next agent finds them with). Returns the tasks that ended, to be recorded.
fn stop_unwanted(tasks: Vec<(Held, Kept)>, keeper: &KeeperClient, sweep: &Sweep) -> Vec<Ended> {
    let started = Instant::now();
    let mut waiting = Vec::new();
    let mut ended = Vec::new();
    for (held, kept) in tasks {
        if held.exit.is_some() {
            let exit = kept.exited.try_recv().unwrap_or(TaskExit::Unknown);
            ended.push((held.alloc_id, held.task, exit));
            keeper.forget(held.pid);
            continue;
        }
        let (signal, timeout) = sweep.kill_settings(&held.alloc_id, &held.task);
        log::info!(
            "stopping process {} of task {} in alloc {}: the allocation no longer runs here",
            held.pid,
            held.task,
            held.alloc_id
        );
        if let Err(e) = keeper.signal(held.pid, signal) {
            log::warn!("cannot signal process {}: {e}", held.pid);
        }
        waiting.push((held, kept, started + timeout));
    }
    for (held, kept, deadline) in waiting {
        let exit = select! {
            recv(kept.exited) -> exit => exit.ok(),
            recv(at(deadline)) -> _ => None,
            recv(sweep.cancel) -> _ => {
                sweep.cancelled();
                return ended;
            }
        };
        let exit = match exit {
            Some(exit) => exit,
            None => {
                let _ = keeper.signal(kept.pid, libc::SIGKILL);
                select! {
                    recv(kept.exited) -> exit => exit.unwrap_or(TaskExit::Unknown),
                    recv(after(driver::SIGKILL_WAIT)) -> _ => TaskExit::Unknown,
                    recv(sweep.cancel) -> _ => {
                        sweep.cancelled();
                        return ended;
                    }
                }
            }
        };
        ended.push((held.alloc_id, held.task, exit));
        keeper.forget(kept.pid);
    }
    ended
}

/// Records the end of a task of a stopped allocation that the sweep stopped (or found exited),
/// as its runner would have: `Terminated` with how it ended, `Killed`, dead. Its runner was
/// stopping it when the previous agent went away; no runner will take it over now.
fn record_swept(state: &mut TaskState, exit: &TaskExit) {
    if state.state == TaskStatus::Dead {
        return;
    }
    let (at, terminated) = TaskEvent::terminated_by(exit, now_nanos());
    state.push(terminated);
    state.push(TaskEvent::killed(now_nanos()));
    state.state = TaskStatus::Dead;
    state.finished_at = Some(nanos_rfc3339(at));
    state.pid = None;
    state.pid_start_ticks = None;
    state.handle = None;
    state.restart_at = None;
}

/// Stops task processes outside the keeper: every group gets its task's kill signal at once,
/// then SIGKILL after the longest kill timeout, unless the agent is told to stop meanwhile.
fn stop_leftovers(found: &[driver::Leftover], sweep: &Sweep) {
    let stopping = matches!(
        sweep.cancel.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    );
    if found.is_empty() || stopping {
        return;
    }
    let mut groups = BTreeMap::new();
    let mut wait = Duration::ZERO;
    for l in found {
        let (signal, timeout) = sweep.kill_settings(&l.alloc_id, &l.task);
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
    if !driver::stop_groups(&groups, wait, sweep.cancel) {
        sweep.cancelled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stopped allocation whose main task is dead and whose poststop task runs; `cut`: it was
    /// stopped again.
    fn stopped_record(cut: bool) -> (AllocRecord, Job) {
        let hcl = r#"job "j" {
  group "g" {
    task "main" {
      driver = "raw_exec"
      config { command = "true" }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle { hook = "poststop" }
      config { command = "true" }
    }
  }
}"#;
        let job = crate::jobspec::hcl::parse_job(hcl).unwrap().job;
        let ran = |status| {
            let mut s = TaskState::default();
            s.push(TaskEvent::received(1));
            s.state = status;
            s
        };
        let rec = AllocRecord {
            id: "a".into(),
            job_id: "j".into(),
            task_group: "g".into(),
            name: "j.g[0]".into(),
            index: 0,
            desired_status: DesiredStatus::Stop,
            create_time: 1,
            modify_time: 2,
            job: None,
            job_version: None,
            task_states: [
                ("main".to_string(), ran(TaskStatus::Dead)),
                ("cleanup".to_string(), ran(TaskStatus::Running)),
            ]
            .into(),
            ports: Vec::new(),
            cores: BTreeMap::new(),
            poststop_cut: cut,
            purged: false,
        };
        (rec, job)
    }

    #[test]
    fn a_cut_poststop_task_is_not_run_again_after_a_restart() {
        let (rec, job) = stopped_record(false);
        assert!(orders_stop(&rec, &job.task_groups[0]));
        let (rec, job) = stopped_record(true);
        assert!(!orders_stop(&rec, &job.task_groups[0]));
        let jobs = [JobRecord {
            job,
            stop: true,
            version: 0,
            submit_time: 1,
            evaluations: Vec::new(),
        }];
        // Its poststop task's process is not taken over: the sweep stops it.
        assert!(resumed_tasks(&[rec], &jobs).is_empty());
    }

    #[test]
    fn a_stop_in_its_order_is_taken_over_whole_after_a_restart() {
        // Stopped while main was still being killed: main and the poststop task are both taken
        // over (the gate kills main on, then runs the poststop task), not swept.
        let (mut rec, job) = stopped_record(false);
        rec.task_states.get_mut("main").unwrap().state = TaskStatus::Running;
        rec.task_states.get_mut("cleanup").unwrap().state = TaskStatus::Pending;
        assert!(orders_stop(&rec, &job.task_groups[0]));
        let jobs = [JobRecord {
            job,
            stop: true,
            version: 0,
            submit_time: 1,
            evaluations: Vec::new(),
        }];
        let resumed = resumed_tasks(&[rec.clone()], &jobs);
        let want = [("a", "cleanup"), ("a", "main")].map(|(a, t)| (a.to_string(), t.to_string()));
        assert_eq!(resumed, want.into_iter().collect());
        // Every task dead: nothing of it runs on.
        for s in rec.task_states.values_mut() {
            s.state = TaskStatus::Dead;
        }
        assert!(!orders_stop(&rec, &jobs[0].job.task_groups[0]));
    }

    #[test]
    fn the_cut_is_written_only_when_set_and_an_older_record_loads_without_it() {
        let (rec, _) = stopped_record(false);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(!text.contains("PoststopCut"), "{text}");
        let old: AllocRecord = serde_json::from_str(&text).unwrap();
        assert!(!old.poststop_cut);
        let (rec, _) = stopped_record(true);
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains("\"PoststopCut\":true"), "{text}");
        assert!(
            serde_json::from_str::<AllocRecord>(&text)
                .unwrap()
                .poststop_cut
        );
    }
}
