//! Jobs and allocations: registering a job creates `count` allocations per group on this node;
//! each allocation runs its tasks, one [`runner`](crate::task::runner) thread per task.
//!
//! The module returns domain values ([`Arc<Allocation>`], [`JobSummary`], [`AllocError`]); the
//! API (`api::jobs`, `api::allocations`) encodes them as Nomad's JSON and picks the status codes.
//!
//! Protocol: the API calls [`AllocManager`]; it changes the registry under its one lock, records
//! the change in the state file (outside the lock), then starts or signals task runners. An
//! allocation whose host volumes are missing stays `pending` with a reason and gets one gate
//! thread that waits (select over volume changes, its stop channel, and agent shutdown) and starts
//! the tasks once every volume is ready. On agent shutdown every runner stops its task; the agent
//! then calls [`AllocManager::join_all`].
//!
//! Lock order: the registry → an allocation's inner state → its task states, in task name order.
//! The volume manager's lock may be taken under any of them (lookups, releases); nothing here is
//! locked while the state file is written, because writing it takes the registry lock
//! ([`AllocManager`] is a [`Snapshot`](crate::state::Snapshot)).

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver;
use crate::jobspec::{validate::signal_number, Job, TaskGroup};
use crate::records::{AllocRecord, DesiredStatus, JobRecord};
use crate::state::{Snapshot, StateError, StateFile, StateStore};
use crate::task::events::{now_nanos, TaskState, TaskStatus};
use crate::task::hooks::{HookFactory, TaskContext};
use crate::task::mounts::VolumeLookup;
use crate::task::runner::{self, RunnerDeps, TaskCommand, TaskRunnerHandle};
use crate::thread::Never;
use crate::util::{allocdir, short_id};

#[cfg(test)]
pub(crate) mod testing;

/// Why an allocation manager request failed. The API maps each to an HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("job not found")]
    JobNotFound,
    #[error("alloc not found")]
    AllocNotFound,
    /// A restart or signal named a task the allocation does not have.
    #[error("task {0:?} not found in allocation")]
    UnknownTask(String),
    #[error("unknown signal {0:?}")]
    UnknownSignal(String),
    /// The state file could not be written.
    #[error(transparent)]
    State(#[from] StateError),
}

/// Mutable parts of an allocation.
struct AllocInner {
    desired: DesiredStatus,
    modify_time: i64,
    /// Why the allocation has not started (a missing host volume).
    pending_reason: Option<String>,
    runners: BTreeMap<String, TaskRunnerHandle>,
    /// Dropping this stops the volume gate thread.
    gate_stop: Option<Sender<Never>>,
}

pub struct Allocation {
    pub id: String,
    /// One `Arc` for the allocations of one registration, and for restored allocations of the
    /// job's registered version: whatever is derived from a job (its encoding, in the API) can be
    /// kept once per `Arc`. An allocation of an older version has a copy of its own.
    pub job: Arc<Job>,
    pub group: String,
    pub index: u32,
    pub name: String,
    pub create_time: i64,
    /// Task name → state; each state is written by its runner and read by the API. Locked after
    /// `inner`, in name order.
    pub tasks: BTreeMap<String, Arc<Mutex<TaskState>>>,
    /// Guards: desired status, modify time, pending reason, runner handles, the gate. Locked
    /// after the registry, before any task state.
    inner: Mutex<AllocInner>,
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
pub struct LockedTasks<'a>(Vec<(&'a str, MutexGuard<'a, TaskState>)>);

impl LockedTasks<'_> {
    /// Nomad's allocation status from these states.
    pub fn client_status(&self) -> &'static str {
        client_status(self.0.iter().map(|(_, t)| (t.state, t.failed)))
    }

    /// Task name and state, in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &TaskState)> {
        self.0.iter().map(|(name, state)| (*name, &**state))
    }
}

impl Allocation {
    /// A new allocation of `job` (shared by the allocations of one registration), to run.
    fn new(job: &Arc<Job>, group: &TaskGroup, index: u32, now: i64) -> Allocation {
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
            inner: Mutex::new(AllocInner {
                desired: DesiredStatus::Run,
                modify_time: now,
                pending_reason: None,
                runners: BTreeMap::new(),
                gate_stop: None,
            }),
        }
    }

    /// The allocation a state file record describes, running `job`; `None` when the job has no
    /// group of the record's name. The inverse of [`Allocation::record`].
    fn from_record(rec: &AllocRecord, job: Arc<Job>) -> Option<Allocation> {
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
            job,
            group: rec.task_group.clone(),
            index: rec.index,
            name: rec.name.clone(),
            create_time: rec.create_time,
            tasks,
            inner: Mutex::new(AllocInner {
                desired: rec.desired_status,
                modify_time: rec.modify_time,
                pending_reason: None,
                runners: BTreeMap::new(),
                gate_stop: None,
            }),
        })
    }

    fn group_spec(&self) -> &TaskGroup {
        self.job
            .task_groups
            .iter()
            .find(|g| g.name == self.group)
            .expect("allocation's group exists in its job")
    }

    pub fn desired(&self) -> DesiredStatus {
        self.inner.lock().desired
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
        LockedTasks(
            self.tasks
                .iter()
                .map(|(k, v)| (k.as_str(), v.lock()))
                .collect(),
        )
    }

    fn task_states(&self) -> BTreeMap<String, TaskState> {
        self.tasks
            .iter()
            .map(|(k, v)| (k.clone(), v.lock().clone()))
            .collect()
    }

    /// Nomad's rule: failed, else pending, else running, else complete.
    pub fn client_status(&self) -> &'static str {
        client_status(self.tasks.values().map(|s| {
            let s = s.lock();
            (s.state, s.failed)
        }))
    }

    /// The allocation as the state file keeps it; `current` is the registered version of its job.
    pub fn record(&self, current: Option<&Job>) -> AllocRecord {
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
            job: (current != Some(&*self.job)).then(|| (*self.job).clone()),
            task_states: self.task_states(),
        }
    }
}

/// Nomad's allocation status from its tasks' `(State, Failed)`.
pub fn client_status(tasks: impl Iterator<Item = (TaskStatus, bool)>) -> &'static str {
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
        "failed"
    } else if pending {
        "pending"
    } else if running {
        "running"
    } else if dead {
        "complete"
    } else {
        "pending"
    }
}

/// What starting a task needs besides the allocation.
pub struct Engine {
    pub data_dir: PathBuf,
    pub node_id: String,
    pub node_name: String,
    pub deps: RunnerDeps,
    pub hooks: Arc<dyn HookFactory>,
    pub volumes: Arc<dyn VolumeLookup>,
}

#[derive(Default)]
struct Registry {
    jobs: BTreeMap<String, JobRecord>,
    allocs: BTreeMap<String, Arc<Allocation>>,
}

/// The outcome of a job registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub eval_id: String,
    /// False when the same spec was already running: nothing changed.
    pub changed: bool,
}

/// A job as the API shows it: its record, its status by Nomad's rule, and how many of its
/// allocations are in each client status, per group.
#[derive(Debug, Clone)]
pub struct JobSummary {
    pub record: JobRecord,
    /// `pending`, `running` or `dead`.
    pub status: &'static str,
    /// Group → client status (`pending`, `running`, `failed`, `complete`) → allocations.
    pub groups: BTreeMap<String, BTreeMap<&'static str, u32>>,
}

pub struct AllocManager {
    engine: Engine,
    store: Arc<StateStore>,
    /// Guards: jobs and allocations together, so a job and its allocations change as one. The
    /// first lock of the order (registry → allocation → task states); never held while the state
    /// file is written.
    registry: Mutex<Registry>,
}

impl Snapshot for AllocManager {
    /// Copies jobs and allocations under the one registry lock: a job and its allocations change
    /// together under it (a stop marks both), so a copy of the jobs taken before a stop and of the
    /// allocations after it would record a state that never was.
    fn fill(&self, out: &mut StateFile) {
        let r = self.registry.lock();
        out.allocations = r
            .allocs
            .values()
            .map(|a| a.record(r.jobs.get(&a.job.id).map(|j| &j.job)))
            .collect();
        out.jobs = r.jobs.values().cloned().collect();
    }
}

impl AllocManager {
    pub fn new(engine: Engine, store: Arc<StateStore>) -> Arc<AllocManager> {
        Arc::new(AllocManager {
            engine,
            store,
            registry: Mutex::new(Registry::default()),
        })
    }

    fn save(&self) -> Result<(), AllocError> {
        Ok(self.store.save()?)
    }

    /// Registers or updates a job. An unchanged spec is a no-op; a changed one stops the old
    /// allocations and starts new ones.
    pub fn register_job(self: &Arc<Self>, job: Job) -> Result<Registered, AllocError> {
        let eval_id = uuid::Uuid::new_v4().to_string();
        let new_allocs = {
            let mut reg = self.registry.lock();
            if let Some(existing) = reg.jobs.get(&job.id) {
                if existing.job == job && !existing.stop {
                    return Ok(Registered {
                        eval_id,
                        changed: false,
                    });
                }
            }
            let version = reg.jobs.get(&job.id).map(|j| j.version + 1).unwrap_or(0);
            for alloc in reg.allocs.values().filter(|a| a.job.id == job.id) {
                stop_alloc(alloc);
                self.engine.volumes.release(&alloc.id);
            }
            let job_arc = Arc::new(job.clone());
            let now = now_nanos();
            let mut created = Vec::new();
            for group in &job.task_groups {
                for index in 0..group.count {
                    let alloc = Arc::new(Allocation::new(&job_arc, group, index, now));
                    reg.allocs.insert(alloc.id.clone(), alloc.clone());
                    created.push(alloc);
                }
            }
            reg.jobs.insert(
                job.id.clone(),
                JobRecord {
                    job,
                    stop: false,
                    version,
                    submit_time: now,
                },
            );
            created
        };
        self.save()?;
        for alloc in new_allocs {
            self.start_alloc(&alloc, false);
        }
        Ok(Registered {
            eval_id,
            changed: true,
        })
    }

    /// Stops a job's allocations; `purge` also forgets the job and them. Returns the eval ID.
    pub fn stop_job(&self, id: &str, purge: bool) -> Result<String, AllocError> {
        {
            let mut reg = self.registry.lock();
            let record = reg.jobs.get_mut(id).ok_or(AllocError::JobNotFound)?;
            record.stop = true;
            for alloc in reg.allocs.values().filter(|a| a.job.id == id) {
                stop_alloc(alloc);
                self.engine.volumes.release(&alloc.id);
            }
            if purge {
                reg.jobs.remove(id);
                reg.allocs.retain(|_, a| a.job.id != id);
            }
        }
        self.save()?;
        Ok(uuid::Uuid::new_v4().to_string())
    }

    pub fn job_ids(&self) -> Vec<String> {
        self.registry.lock().jobs.keys().cloned().collect()
    }

    pub fn alloc_ids(&self) -> Vec<String> {
        self.registry.lock().allocs.keys().cloned().collect()
    }

    fn allocs_of(&self, job_id: &str) -> Vec<Arc<Allocation>> {
        let reg = self.registry.lock();
        reg.allocs
            .values()
            .filter(|a| a.job.id == job_id)
            .cloned()
            .collect()
    }

    fn summary(&self, record: JobRecord) -> JobSummary {
        let allocs = self.allocs_of(&record.job.id);
        let mut groups = BTreeMap::<String, BTreeMap<&'static str, u32>>::new();
        for a in &allocs {
            let e = groups.entry(a.group.clone()).or_default();
            *e.entry(a.client_status()).or_default() += 1;
        }
        JobSummary {
            status: job_status(&record, &allocs),
            record,
            groups,
        }
    }

    /// Every registered job (`GET /v1/jobs`), in ID order.
    pub fn jobs(&self) -> Vec<JobSummary> {
        let records: Vec<JobRecord> = self.registry.lock().jobs.values().cloned().collect();
        records.into_iter().map(|r| self.summary(r)).collect()
    }

    /// One job by full ID (`GET /v1/job/:id`).
    pub fn job(&self, id: &str) -> Result<JobSummary, AllocError> {
        let record = self
            .registry
            .lock()
            .jobs
            .get(id)
            .cloned()
            .ok_or(AllocError::JobNotFound)?;
        Ok(self.summary(record))
    }

    /// A job's allocations, in ID order (`GET /v1/job/:id/allocations`).
    pub fn job_allocations(&self, id: &str) -> Result<Vec<Arc<Allocation>>, AllocError> {
        if !self.registry.lock().jobs.contains_key(id) {
            return Err(AllocError::JobNotFound);
        }
        Ok(self.allocs_of(id))
    }

    /// Every allocation, in ID order (`GET /v1/allocations`).
    pub fn allocations(&self) -> Vec<Arc<Allocation>> {
        self.registry.lock().allocs.values().cloned().collect()
    }

    /// One allocation by full ID.
    pub fn get(&self, id: &str) -> Result<Arc<Allocation>, AllocError> {
        self.registry
            .lock()
            .allocs
            .get(id)
            .cloned()
            .ok_or(AllocError::AllocNotFound)
    }

    fn check_task(alloc: &Allocation, task: Option<&str>) -> Result<(), AllocError> {
        match task {
            Some(t) if !t.is_empty() && !alloc.tasks.contains_key(t) => {
                Err(AllocError::UnknownTask(t.to_string()))
            }
            _ => Ok(()),
        }
    }

    fn send(alloc: &Allocation, task: Option<&str>, cmd: TaskCommand) {
        let inner = alloc.inner.lock();
        for (name, r) in &inner.runners {
            if task.is_none_or(|t| t.is_empty() || t == name) {
                r.send(cmd.clone());
            }
        }
    }

    /// A user's restart: immediate, not counted by the restart policy.
    pub fn restart(&self, id: &str, task: Option<&str>) -> Result<(), AllocError> {
        let alloc = self.get(id)?;
        Self::check_task(&alloc, task)?;
        Self::send(&alloc, task, TaskCommand::Restart);
        Ok(())
    }

    /// Sends `signal` (a name, with or without `SIG`; SIGKILL when empty) to one task or all.
    pub fn signal(&self, id: &str, signal: &str, task: Option<&str>) -> Result<(), AllocError> {
        let alloc = self.get(id)?;
        Self::check_task(&alloc, task)?;
        let name = if signal.is_empty() { "SIGKILL" } else { signal };
        let number =
            signal_number(name).ok_or_else(|| AllocError::UnknownSignal(name.to_string()))?;
        let name = if name.starts_with("SIG") {
            name.to_string()
        } else {
            format!("SIG{name}")
        };
        Self::send(
            &alloc,
            task,
            TaskCommand::Signal {
                signal: number,
                name,
            },
        );
        Ok(())
    }

    /// Stops one allocation for good. Returns the eval ID.
    pub fn stop(&self, id: &str) -> Result<String, AllocError> {
        let alloc = self.get(id)?;
        stop_alloc(&alloc);
        self.engine.volumes.release(&alloc.id);
        self.save()?;
        Ok(uuid::Uuid::new_v4().to_string())
    }

    /// The longest `kill_timeout` of the tasks of allocations that should run.
    pub fn max_kill_timeout(&self) -> Duration {
        let reg = self.registry.lock();
        reg.allocs
            .values()
            .flat_map(|a| a.group_spec().tasks.iter().map(|t| t.kill_timeout))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// Waits for every task runner to end (after a shutdown), at most `timeout`.
    pub fn join_all(&self, timeout: Duration) {
        let allocs = self.allocations();
        let deadline = Instant::now() + timeout;
        for alloc in allocs {
            let mut runners: Vec<TaskRunnerHandle> =
                std::mem::take(&mut alloc.inner.lock().runners)
                    .into_values()
                    .collect();
            for r in &mut runners {
                while !r.is_finished() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if r.is_finished() {
                    r.join();
                }
            }
        }
    }
}

/// Nomad's job status: `dead` when stopped or nothing of it should still run, else `running`
/// when an allocation runs, else `pending`.
fn job_status(record: &JobRecord, allocs: &[Arc<Allocation>]) -> &'static str {
    let live = allocs.iter().any(|a| {
        matches!(a.client_status(), "pending" | "running") && a.desired() == DesiredStatus::Run
    });
    if record.stop || !live {
        "dead"
    } else if allocs.iter().any(|a| a.client_status() == "running") {
        "running"
    } else {
        "pending"
    }
}

/// Marks an allocation stopped and kills its tasks (or its volume wait).
fn stop_alloc(alloc: &Allocation) {
    let mut inner = alloc.inner.lock();
    if inner.desired == DesiredStatus::Stop {
        return;
    }
    inner.desired = DesiredStatus::Stop;
    inner.modify_time = now_nanos();
    inner.gate_stop = None;
    inner.pending_reason = None;
    for r in inner.runners.values() {
        r.send(TaskCommand::Kill);
    }
    drop(inner);
    // Tasks that never got a runner (waiting for a volume) are dead without having run.
    for state in alloc.tasks.values() {
        let mut s = state.lock();
        if s.state == TaskStatus::Pending && s.started_at.is_none() && s.events.is_empty() {
            s.state = TaskStatus::Dead;
        }
    }
}

fn missing_reason(source: &str) -> String {
    format!("missing host volume {source:?}")
}

impl AllocManager {
    /// Starts the tasks of `alloc` now, or once its host volumes are ready.
    fn start_alloc(self: &Arc<Self>, alloc: &Arc<Allocation>, restored: bool) {
        let Some(missing) = self.missing_volume(alloc) else {
            return self.start_runners(alloc, restored);
        };
        let (gate_stop, gate_rx) = crossbeam_channel::bounded::<Never>(0);
        {
            let mut inner = alloc.inner.lock();
            if inner.desired == DesiredStatus::Stop {
                return;
            }
            inner.pending_reason = Some(missing_reason(&missing));
            inner.gate_stop = Some(gate_stop);
        }
        let me = self.clone();
        let a = alloc.clone();
        let name = format!("gate-{}", short_id(&alloc.id));
        if let Err(e) = crate::thread::spawn(name, move || me.gate(a, gate_rx, restored)) {
            log::error!("cannot start volume wait of alloc {}: {e}", alloc.id);
        }
    }

    fn missing_volume(&self, alloc: &Allocation) -> Option<String> {
        alloc
            .group_spec()
            .volumes
            .values()
            .find(|v| self.engine.volumes.lookup(&v.source).is_none())
            .map(|v| v.source.clone())
    }

    /// Waits until the allocation's volumes are ready, it is stopped, or the agent shuts down.
    fn gate(self: Arc<Self>, alloc: Arc<Allocation>, stop: Receiver<Never>, restored: bool) {
        let changes = self.engine.volumes.changes();
        loop {
            match self.missing_volume(&alloc) {
                None => {
                    alloc.inner.lock().pending_reason = None;
                    return self.start_runners(&alloc, restored);
                }
                Some(missing) => {
                    alloc.inner.lock().pending_reason = Some(missing_reason(&missing));
                }
            }
            select! {
                recv(changes) -> msg => if msg.is_err() { return },
                recv(stop) -> _ => return,
                recv(self.engine.deps.shutdown) -> _ => return,
            }
        }
    }

    /// Starts one runner per task that is not dead, unless the allocation was stopped.
    fn start_runners(&self, alloc: &Arc<Allocation>, restored: bool) {
        let alloc_dir = allocdir::alloc_dir(&self.engine.data_dir, &alloc.id);
        let mut inner = alloc.inner.lock();
        if inner.desired == DesiredStatus::Stop {
            return;
        }
        inner.gate_stop = None;
        for task in &alloc.group_spec().tasks {
            let state = alloc.tasks[&task.name].clone();
            if state.lock().state == TaskStatus::Dead {
                continue;
            }
            let ctx = TaskContext {
                alloc_id: alloc.id.clone(),
                job: alloc.job.clone(),
                group: alloc.group.clone(),
                task: task.clone(),
                alloc_dir: alloc_dir.clone(),
                task_dir: allocdir::task_dir(&alloc_dir, &task.name),
                data_dir: self.engine.data_dir.clone(),
                node_id: self.engine.node_id.clone(),
                node_name: self.engine.node_name.clone(),
            };
            let hooks = self.engine.hooks.hooks_for(&ctx);
            match runner::spawn(ctx, hooks, state, self.engine.deps.clone(), restored) {
                Ok(handle) => {
                    inner.runners.insert(task.name.clone(), handle);
                }
                Err(e) => log::error!("cannot start runner of task {}: {e}", task.name),
            }
        }
    }
}

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
            .map(|t| {
                (
                    signal_number(&t.kill_signal).unwrap_or(libc::SIGINT),
                    t.kill_timeout,
                )
            })
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
    for (&pgid, &signal) in &groups {
        let _ = driver::signal_group(pgid, signal);
    }
    let pgids: std::collections::BTreeSet<i32> = groups.keys().copied().collect();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && !driver::live_groups(&pgids).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pgid in groups.keys() {
        let _ = driver::signal_group(pgid, libc::SIGKILL);
    }
    // Only once they are gone may the tasks start again: never two processes of one task.
    let deadline = Instant::now() + driver::SIGKILL_WAIT;
    while Instant::now() < deadline && !driver::live_groups(&pgids).is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::testing::manager;
    use super::*;

    /// A state write is a snapshot of one instant: a job and its allocations change as one, so a
    /// save that runs while a job is stopped must not record the allocations stopped and the job
    /// still running. After a crash such a file would restore a job that says it runs and runs
    /// nothing (found by the crash storm).
    #[test]
    fn snapshots_never_tear_a_job_from_its_allocations() {
        let (allocs, dir, _shutdown) = manager("tear");
        let jobs: Vec<String> = (0..300).map(|i| format!("j{i}")).collect();
        for id in &jobs {
            let hcl = format!(
                "job \"{id}\" {{\n group \"g\" {{\n  volume \"v\" {{\n   type = \"host\"\n   \
                 source = \"missing\"\n  }}\n  task \"t\" {{\n   driver = \"raw_exec\"\n   \
                 config {{\n    command = \"true\"\n   }}\n  }}\n }}\n}}\n"
            );
            let job = crate::jobspec::hcl::parse_job(&hcl).unwrap().job;
            allocs.register_job(job).unwrap();
        }
        let stopper = {
            let allocs = allocs.clone();
            let jobs = jobs.clone();
            std::thread::spawn(move || {
                for id in jobs.iter().rev() {
                    allocs.stop_job(id, false).unwrap();
                }
            })
        };
        let mut torn = Vec::new();
        while !stopper.is_finished() && torn.is_empty() {
            let mut state = StateFile::default();
            allocs.fill(&mut state);
            for a in &state.allocations {
                let job = state.jobs.iter().find(|j| j.job.id == a.job_id).unwrap();
                if a.desired_status == DesiredStatus::Stop && !job.stop {
                    torn.push(a.job_id.clone());
                }
            }
        }
        stopper.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            torn.is_empty(),
            "allocations stopped, their jobs not: {torn:?}"
        );
    }

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
}
