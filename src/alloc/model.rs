//! The live model of an allocation: what it runs (its job, group and tasks), what it should do
//! (its desired status) and what its tasks do (the task states their runners write).
//!
//! Threads: an [`Allocation`] is shared (`Arc`) by the registry, the API workers that answer for
//! it, its gate thread and its task runners. Each runner writes its own task's state; the manager
//! and the gate write the inner state; readers take short locks and copy, or encode into memory
//! ([`Allocation::lock_tasks`]).
//!
//! Lock order: an allocation's inner state before its task states, task states in task-name order
//! (both come after the registry lock, see [`super::manager`]). A runner holding its task state
//! takes no other lock of the allocation.

use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::jobspec::network::AllocatedPort;
use crate::jobspec::{Job, TaskGroup};
use crate::records::{AllocRecord, ClientStatus, DesiredStatus, JobRecord, JobStatus};
use crate::task::events::{TaskState, TaskStatus};
use crate::task::runner::TaskRunnerHandle;
use crate::thread::Worker;

/// Mutable parts of an allocation.
pub(super) struct AllocInner {
    pub(super) desired: DesiredStatus,
    pub(super) modify_time: i64,
    /// Why the allocation has not started (a missing host volume).
    pub(super) pending_reason: Option<String>,
    pub(super) runners: BTreeMap<String, TaskRunnerHandle>,
    /// The volume gate thread, while the allocation waits for its volumes (and after it started
    /// them, until joined). Stopping the allocation takes it out and joins it.
    pub(super) gate: Option<Worker<()>>,
    /// Stopped, and its poststop tasks are to run: its gate runs on to start them, the only tasks
    /// a stopped allocation starts (`super::runner::stop`).
    pub(super) run_poststop: bool,
    /// Stopped once its tasks began, in an ordered group: its gate carries out the stop, killing
    /// the tasks in their order (`super::lifecycle::plan_stop`); the stop itself killed nothing.
    pub(super) ordered_stop: bool,
    /// Wakes the gate of an ordered allocation (its runners' `changed` channel: bounded,
    /// `try_send`), so that it plans again at once; set once the gate orders the tasks.
    pub(super) wake: Option<crossbeam_channel::Sender<()>>,
    /// Stopped again while its poststop tasks were to run: they are killed and never start
    /// (`super::runner::stop::cut_poststop`); recorded, so that a restart does not run them either.
    pub(super) poststop_cut: bool,
    /// Its job was purged while its gate carried out its stop: it runs on until its tasks are
    /// all dead, then the collector forgets it (`super::runner::stop`); recorded.
    pub(super) purged: bool,
    /// The job the allocation belongs to now and its version (Nomad's `Job` and `JobVersion`):
    /// [`Allocation::job`] until an in-place update ([`Allocation::update_in_place`]) gives it
    /// the job's new version, which differs from it only in no-effect settings.
    pub(super) job: Arc<Job>,
    pub(super) job_version: u64,
}

pub struct Allocation {
    pub id: String,
    /// The job its tasks are defined by, fixed for the allocation's life: what it was placed
    /// with, or restored with. An in-place update changes the job the allocation belongs to
    /// ([`Allocation::job_now`]) only in no-effect settings, which no task reads, so its tasks run
    /// on as defined here. One `Arc` for the allocations of one registration, and for restored
    /// allocations of the job's registered version: whatever is derived from a job (its encoding,
    /// in the API) can be kept once per `Arc`. An allocation of an older version has a copy of its
    /// own.
    pub job: Arc<Job>,
    pub group: String,
    pub index: u32,
    pub name: String,
    pub create_time: i64,
    /// Task name → state; each state is written by its runner and read by the API. Locked after
    /// `inner`, in name order.
    pub tasks: BTreeMap<String, Arc<Mutex<TaskState>>>,
    /// The host ports given at placement (`super::ports`); fixed for the allocation's life.
    pub ports: Vec<AllocatedPort>,
    /// The cores given at placement to its tasks that ask for `cores` (`super::cores`), task
    /// name → CPU IDs; fixed for the allocation's life.
    pub cores: BTreeMap<String, Vec<u32>>,
    /// Guards: desired status, modify time, pending reason, runner handles, the gate, the job it
    /// belongs to now. Locked after the registry, before any task state.
    pub(super) inner: Mutex<AllocInner>,
}

/// An allocation's own status at one instant, apart from its tasks'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocStatus {
    pub desired: DesiredStatus,
    pub modify_time: i64,
    /// Why it has not started (`missing host volume "<source>"`).
    pub pending_reason: Option<String>,
}

/// Every task state of one allocation, locked in task-name order, so that the states and the
/// client status computed from them agree. Runners wait while it is held: copy or encode into
/// memory, never into a socket.
pub struct LockedTasks<'a> {
    tasks: Vec<(&'a str, MutexGuard<'a, TaskState>)>,
    /// The group orders its tasks (`super::lifecycle`).
    ordered: bool,
}

impl LockedTasks<'_> {
    /// Nomad's allocation status from these states.
    pub fn client_status(&self) -> ClientStatus {
        let tasks = self.tasks.iter().map(|(_, t)| &**t);
        ordered_status(self.ordered, tasks)
    }

    /// Task name and state, in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &TaskState)> {
        self.tasks.iter().map(|(name, state)| (*name, &**state))
    }
}

impl Allocation {
    /// A new allocation of `job` at `version` (shared by the allocations of one registration),
    /// to run.
    pub(super) fn new(
        job: &Arc<Job>,
        version: u64,
        group: &TaskGroup,
        index: u32,
        ports: Vec<AllocatedPort>,
        cores: BTreeMap<String, Vec<u32>>,
        now: i64,
    ) -> Allocation {
        let tasks = group
            .tasks
            .iter()
            .map(|t| (t.name.clone(), Arc::new(Mutex::new(TaskState::default()))))
            .collect();
        Allocation {
            id: uuid::Uuid::new_v4().to_string(),
            job: job.clone(),
            group: group.name.clone(),
            index,
            name: format!("{}.{}[{index}]", job.id, group.name),
            create_time: now,
            tasks,
            ports,
            cores,
            inner: Mutex::new(AllocInner {
                desired: DesiredStatus::Run,
                modify_time: now,
                pending_reason: None,
                runners: BTreeMap::new(),
                gate: None,
                run_poststop: false,
                ordered_stop: false,
                wake: None,
                poststop_cut: false,
                purged: false,
                job: job.clone(),
                job_version: version,
            }),
        }
    }

    /// The allocation a state file record describes, running `job` at `version`; `None` when the
    /// job has no group of the record's name. The inverse of [`Allocation::record`].
    pub(super) fn from_record(
        rec: &AllocRecord,
        job: Arc<Job>,
        version: u64,
    ) -> Option<Allocation> {
        let group = job.task_groups.iter().find(|g| g.name == rec.task_group)?;
        let tasks = group
            .tasks
            .iter()
            .map(|t| {
                let state = rec.task_states.get(&t.name).cloned().unwrap_or_default();
                (t.name.clone(), Arc::new(Mutex::new(state)))
            })
            .collect();
        Some(Allocation {
            id: rec.id.clone(),
            job: job.clone(),
            group: rec.task_group.clone(),
            index: rec.index,
            name: rec.name.clone(),
            create_time: rec.create_time,
            tasks,
            ports: rec.ports.clone(),
            cores: rec.cores.clone(),
            inner: Mutex::new(AllocInner {
                desired: rec.desired_status,
                modify_time: rec.modify_time,
                pending_reason: None,
                runners: BTreeMap::new(),
                gate: None,
                run_poststop: false,
                ordered_stop: false,
                wake: None,
                poststop_cut: rec.poststop_cut,
                purged: rec.purged,
                job,
                job_version: version,
            }),
        })
    }

    /// The group of its job that this allocation runs.
    pub fn group_spec(&self) -> &TaskGroup {
        self.job
            .task_groups
            .iter()
            .find(|g| g.name == self.group)
            .expect("allocation's group exists in its job")
    }

    /// The job the allocation belongs to now and its version (see [`AllocInner::job`]).
    pub fn job_now(&self) -> (Arc<Job>, u64) {
        let i = self.inner.lock();
        (i.job.clone(), i.job_version)
    }

    /// Nomad's in-place update: the allocation belongs to `job` at `version` from now on, a job
    /// that differs from its own only in no-effect settings (`Job::eq_but_kept`). Its tasks and
    /// their runners are left as they are: their definitions are the same. (Not checked here:
    /// the comparison copies the job, once per allocation; `evals::in_place` decides it once.)
    pub(super) fn update_in_place(&self, job: Arc<Job>, version: u64) {
        let mut i = self.inner.lock();
        i.job = job;
        i.job_version = version;
    }

    pub fn desired(&self) -> DesiredStatus {
        self.inner.lock().desired
    }

    /// Whether what the allocation was given (ports, cores) is still held: it is to run and a
    /// task of it is not dead.
    pub fn holds_its_resources(&self) -> bool {
        self.desired() == DesiredStatus::Run
            && self
                .tasks
                .values()
                .any(|t| t.lock().state != TaskStatus::Dead)
    }

    /// The allocation's own status now (one short lock).
    pub fn status(&self) -> AllocStatus {
        let i = self.inner.lock();
        AllocStatus {
            desired: i.desired,
            modify_time: i.modify_time,
            pending_reason: i.pending_reason.clone(),
        }
    }

    /// Locks every task state, in name order; see [`LockedTasks`].
    pub fn lock_tasks(&self) -> LockedTasks<'_> {
        LockedTasks {
            tasks: self
                .tasks
                .iter()
                .map(|(k, v)| (k.as_str(), v.lock()))
                .collect(),
            ordered: super::lifecycle::is_ordered(self.group_spec()),
        }
    }

    fn task_states(&self) -> BTreeMap<String, TaskState> {
        self.tasks
            .iter()
            .map(|(k, v)| (k.clone(), v.lock().clone()))
            .collect()
    }

    /// Nomad's rule: failed, else pending, else running, else complete.
    pub fn client_status(&self) -> ClientStatus {
        self.lock_tasks().client_status()
    }

    /// Whether it is to run and has not ended (pending or running): what an in-place update
    /// moves, what keeps its job alive.
    pub fn is_running_or_pending(&self) -> bool {
        self.desired() == DesiredStatus::Run && self.client_status().is_live()
    }

    /// The allocation as the state file keeps it; `is_current`: the job it belongs to now
    /// ([`Allocation::job_now`]) is the registered version (the record then names it instead of
    /// holding a copy).
    pub fn record(&self, is_current: bool) -> AllocRecord {
        let inner = self.inner.lock();
        AllocRecord {
            id: self.id.clone(),
            job_id: self.job.id.clone(),
            task_group: self.group.clone(),
            name: self.name.clone(),
            index: self.index,
            desired_status: inner.desired,
            create_time: self.create_time,
            modify_time: inner.modify_time,
            job: (!is_current).then(|| (*inner.job).clone()),
            job_version: Some(inner.job_version),
            task_states: self.task_states(),
            ports: self.ports.clone(),
            cores: self.cores.clone(),
            poststop_cut: inner.poststop_cut,
            purged: inner.purged,
        }
    }
}

/// Nomad's allocation status from its tasks' `(State, Failed)`.
/// [`client_status`] of an allocation; when its tasks are `ordered`, a task that waits for its
/// turn (it never ran) does not hold a running allocation at `pending`, as in Nomad, where the
/// tasks of an allocation that runs something show it `running`.
/// Nomad's job status: `dead` when stopped or nothing of it should still run or wait to be
/// placed (`queued`), else `running` when an allocation runs, else `pending`; a periodic or
/// parameterized job (a template) is `running` until stopped, whatever its children do.
pub(super) fn job_status(
    record: &JobRecord,
    allocs: &[Arc<Allocation>],
    queued: bool,
) -> JobStatus {
    if record.job.periodic.is_some() || record.job.parameterized_job.is_some() {
        return if record.stop {
            JobStatus::Dead
        } else {
            JobStatus::Running
        };
    }
    let live = queued || allocs.iter().any(|a| a.is_running_or_pending());
    if record.stop || !live {
        JobStatus::Dead
    } else if allocs
        .iter()
        .any(|a| a.client_status() == ClientStatus::Running)
    {
        JobStatus::Running
    } else {
        JobStatus::Pending
    }
}

fn ordered_status<'a>(ordered: bool, tasks: impl Iterator<Item = &'a TaskState>) -> ClientStatus {
    let tasks: Vec<&TaskState> = tasks.collect();
    let waits = |t: &TaskState| {
        ordered && t.state == TaskStatus::Pending && t.started_at.is_none() && t.events.is_empty()
    };
    let runs = tasks.iter().any(|t| t.state == TaskStatus::Running);
    client_status(
        tasks
            .iter()
            .filter(|t| !(runs && waits(t)))
            .map(|t| (t.state, t.failed)),
    )
}

pub fn client_status(tasks: impl Iterator<Item = (TaskStatus, bool)>) -> ClientStatus {
    let (mut failed, mut pending, mut running, mut dead) = (false, false, false, false);
    for (state, f) in tasks {
        match state {
            TaskStatus::Running => running = true,
            TaskStatus::Pending => pending = true,
            TaskStatus::Dead if f => failed = true,
            TaskStatus::Dead => dead = true,
        }
    }
    if failed {
        ClientStatus::Failed
    } else if pending {
        ClientStatus::Pending
    } else if running {
        ClientStatus::Running
    } else if dead {
        ClientStatus::Complete
    } else {
        ClientStatus::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_status_follows_nomad() {
        use TaskStatus::*;
        assert_eq!(client_status([(Pending, false)].into_iter()), "pending");
        assert_eq!(
            client_status([(Running, false), (Pending, false)].into_iter()),
            "pending"
        );
        assert_eq!(
            client_status([(Running, false), (Dead, false)].into_iter()),
            "running"
        );
        assert_eq!(
            client_status([(Dead, false), (Dead, false)].into_iter()),
            "complete"
        );
        assert_eq!(
            client_status([(Running, false), (Dead, true)].into_iter()),
            "failed"
        );
    }

    #[test]
    fn a_task_waiting_for_its_turn_does_not_hold_a_running_allocation_pending() {
        let running = TaskState {
            state: TaskStatus::Running,
            ..TaskState::default()
        };
        let waiting = TaskState::default();
        let mut restarting = TaskState::default();
        restarting.push(crate::task::events::TaskEvent::received(1));
        let status = |ordered, tasks: &[&TaskState]| ordered_status(ordered, tasks.iter().copied());
        assert_eq!(status(true, &[&running, &waiting]), "running");
        assert_eq!(status(true, &[&waiting]), "pending");
        // A task that ran and waits again (a restart delay) is pending, as before.
        assert_eq!(status(true, &[&running, &restarting]), "pending");
        // Without an order, every task starts at once: one not started yet is pending.
        assert_eq!(status(false, &[&running, &waiting]), "pending");
    }
}
