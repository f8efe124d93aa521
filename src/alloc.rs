//! Jobs and allocations: registering a job creates `count` allocations per group on this node;
//! each allocation runs its tasks, one [`runner`](crate::task::runner) thread per task.
//!
//! Protocol: the API calls [`AllocManager`]; it changes the registry under its one lock, records the
//! change in the state file (outside the lock), then starts or signals task runners. An allocation
//! whose host volumes are missing stays `pending` with a reason and gets one short-lived gate thread
//! that waits (select over volume changes, the allocation's stop, and agent shutdown) and starts the
//! tasks once every volume is ready. On agent shutdown every runner stops its task; the agent then
//! calls [`AllocManager::join_all`].

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::driver;
use crate::jobspec::{validate::signal_number, Job, TaskGroup};
use crate::records::{AllocRecord, DesiredStatus, JobRecord};
use crate::state::{Snapshot, StateFile, StateStore};
use crate::task::events::{now_nanos, TaskState, TaskStatus};
use crate::task::hooks::{HookFactory, TaskContext};
use crate::task::mounts::VolumeLookup;
use crate::task::runner::{self, RunnerDeps, TaskCommand, TaskRunnerHandle};
use crate::thread::Never;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("job not found")]
    JobNotFound,
    #[error("alloc not found")]
    AllocNotFound,
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Internal(String),
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

/// A job's API JSON, encoded on first request and shared by the allocations of one registration.
type JobJson = Arc<OnceLock<Box<RawValue>>>;

pub struct Allocation {
    pub id: String,
    pub job: Arc<Job>,
    job_json: JobJson,
    pub group: String,
    pub index: u32,
    pub name: String,
    pub create_time: i64,
    /// Task name → state; each state is written by its runner and read by the API.
    pub tasks: BTreeMap<String, Arc<Mutex<TaskState>>>,
    /// Guards: desired status, modify time, pending reason, runner handles, the gate.
    inner: Mutex<AllocInner>,
}

impl Allocation {
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

    /// The allocation in Nomad's API shape, encoded straight from the live state. `with_job` adds
    /// the job, as `GET /v1/allocation/:id` does; the job's JSON is encoded once and shared by the
    /// allocations of one registration.
    pub fn api_view<'a>(
        &'a self,
        node_id: &'a str,
        node_name: &'a str,
        with_job: bool,
    ) -> AllocView<'a> {
        AllocView {
            alloc: self,
            node_id,
            node_name,
            with_job,
        }
    }

    fn job_json(&self) -> &RawValue {
        self.job_json.get_or_init(|| {
            serde_json::value::to_raw_value(&*self.job).unwrap_or_else(|e| {
                log::error!("cannot encode job {} as JSON: {e}", self.job.id);
                RawValue::from_string("null".into()).expect("null is JSON")
            })
        })
    }
}

/// [`Allocation::api_view`]: serialises without building a `serde_json::Value` first, which
/// made `GET /v1/allocation/:id` cost most of its time in the allocator. While it serialises it
/// holds the allocation's task-state locks (every one, in name order, so the states and the
/// client status agree); encode it into memory, never straight into a socket.
pub struct AllocView<'a> {
    alloc: &'a Allocation,
    node_id: &'a str,
    node_name: &'a str,
    with_job: bool,
}

impl Serialize for AllocView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeStruct};
        let a = self.alloc;
        let (desired, modify, reason) = {
            let i = a.inner.lock();
            (i.desired, i.modify_time, i.pending_reason.clone())
        };
        let states: Vec<(&String, MutexGuard<'_, TaskState>)> =
            a.tasks.iter().map(|(k, v)| (k, v.lock())).collect();
        let status = client_status(states.iter().map(|(_, t)| (t.state, t.failed)));
        struct States<'s, 'g>(&'s [(&'g String, MutexGuard<'g, TaskState>)]);
        impl Serialize for States<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for (name, state) in self.0 {
                    m.serialize_entry(name, &**state)?;
                }
                m.end()
            }
        }
        let mut m = s.serialize_struct("Allocation", 14)?;
        m.serialize_field("ClientDescription", reason.as_deref().unwrap_or(""))?;
        m.serialize_field("ClientStatus", status)?;
        m.serialize_field("CreateTime", &a.create_time)?;
        m.serialize_field("DesiredStatus", &desired)?;
        m.serialize_field("ID", &a.id)?;
        if self.with_job {
            m.serialize_field("Job", a.job_json())?;
        }
        m.serialize_field("JobID", &a.job.id)?;
        m.serialize_field("ModifyTime", &modify)?;
        m.serialize_field("Name", &a.name)?;
        m.serialize_field("Namespace", "default")?;
        m.serialize_field("NodeID", self.node_id)?;
        m.serialize_field("NodeName", self.node_name)?;
        m.serialize_field("TaskGroup", &a.group)?;
        m.serialize_field("TaskStates", &States(&states))?;
        m.end()
    }
}

fn encode(value: &impl Serialize) -> Result<String, AllocError> {
    serde_json::to_string(value)
        .map_err(|e| AllocError::Internal(format!("cannot encode the answer as JSON: {e}")))
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

pub struct AllocManager {
    engine: Engine,
    store: Arc<StateStore>,
    /// Guards: jobs and allocations together, so a job and its allocations change as one.
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
        self.store
            .save()
            .map_err(|e| AllocError::Internal(e.to_string()))
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
            let job_json = JobJson::default();
            let now = now_nanos();
            let mut created = Vec::new();
            for group in &job.task_groups {
                for index in 0..group.count {
                    let alloc = Arc::new(new_alloc(&job_arc, &job_json, group, index, now));
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

    /// Stops a job's allocations; `purge` also forgets the job and them.
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

    /// `GET /v1/jobs`: job stubs.
    pub fn jobs(&self) -> Vec<Value> {
        let records: Vec<JobRecord> = self.registry.lock().jobs.values().cloned().collect();
        records
            .iter()
            .map(|r| {
                let allocs = self.allocs_of(&r.job.id);
                let mut summary = BTreeMap::<String, BTreeMap<&str, u32>>::new();
                for a in &allocs {
                    let e = summary.entry(a.group.clone()).or_default();
                    *e.entry(status_key(a.client_status())).or_default() += 1;
                }
                json!({
                    "ID": r.job.id,
                    "Name": r.job.name,
                    "Namespace": "default",
                    "Type": r.job.job_type,
                    "Status": Self::job_status(r, &allocs),
                    "Stop": r.stop,
                    "Version": r.version,
                    "SubmitTime": r.submit_time,
                    "JobSummary": {"JobID": r.job.id, "Summary": summary},
                })
            })
            .collect()
    }

    /// `GET /v1/job/:id`: the job in Nomad's shape with its status.
    pub fn job(&self, id: &str) -> Result<Value, AllocError> {
        let record = self
            .registry
            .lock()
            .jobs
            .get(id)
            .cloned()
            .ok_or(AllocError::JobNotFound)?;
        let allocs = self.allocs_of(id);
        let mut v =
            serde_json::to_value(&record.job).map_err(|e| AllocError::Internal(e.to_string()))?;
        v["Namespace"] = json!("default");
        v["Status"] = json!(Self::job_status(&record, &allocs));
        v["Stop"] = json!(record.stop);
        v["Version"] = json!(record.version);
        v["SubmitTime"] = json!(record.submit_time);
        Ok(v)
    }

    /// `GET /v1/job/:id/allocations`, encoded.
    pub fn job_allocations_json(&self, id: &str) -> Result<String, AllocError> {
        if !self.registry.lock().jobs.contains_key(id) {
            return Err(AllocError::JobNotFound);
        }
        self.encode_list(&self.allocs_of(id))
    }

    /// `GET /v1/allocations`, encoded.
    pub fn allocations_json(&self) -> Result<String, AllocError> {
        let allocs: Vec<Arc<Allocation>> = self.registry.lock().allocs.values().cloned().collect();
        self.encode_list(&allocs)
    }

    fn encode_list(&self, allocs: &[Arc<Allocation>]) -> Result<String, AllocError> {
        let (node_id, node_name) = (&self.engine.node_id, &self.engine.node_name);
        let views: Vec<AllocView<'_>> = allocs
            .iter()
            .map(|a| a.api_view(node_id, node_name, false))
            .collect();
        encode(&views)
    }

    pub fn get(&self, id: &str) -> Result<Arc<Allocation>, AllocError> {
        self.registry
            .lock()
            .allocs
            .get(id)
            .cloned()
            .ok_or(AllocError::AllocNotFound)
    }

    /// `GET /v1/allocation/:id`, encoded.
    pub fn allocation_json(&self, id: &str) -> Result<String, AllocError> {
        let alloc = self.get(id)?;
        encode(&alloc.api_view(&self.engine.node_id, &self.engine.node_name, true))
    }

    fn check_task(alloc: &Allocation, task: Option<&str>) -> Result<(), AllocError> {
        match task {
            Some(t) if !t.is_empty() && !alloc.tasks.contains_key(t) => Err(
                AllocError::BadRequest(format!("task {t:?} not found in allocation")),
            ),
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

    pub fn signal(&self, id: &str, signal: &str, task: Option<&str>) -> Result<(), AllocError> {
        let alloc = self.get(id)?;
        Self::check_task(&alloc, task)?;
        let name = if signal.is_empty() { "SIGKILL" } else { signal };
        let number = signal_number(name)
            .ok_or_else(|| AllocError::BadRequest(format!("unknown signal {name:?}")))?;
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

    /// Stops one allocation for good.
    pub fn stop(&self, id: &str) -> Result<String, AllocError> {
        let alloc = self.get(id)?;
        stop_alloc(&alloc);
        self.engine.volumes.release(&alloc.id);
        self.save()?;
        Ok(uuid::Uuid::new_v4().to_string())
    }

    /// Picks up the jobs and allocations of the state file: processes left by an agent that crashed
    /// are stopped first (those of allocations the file no longer holds too: a purge forgets an
    /// allocation while its task may still be stopping), then allocations that should run are
    /// started again.
    pub fn restore(self: &Arc<Self>, state: &StateFile) {
        let ids: HashSet<String> = state.allocations.iter().map(|a| a.id.clone()).collect();
        stop_leftovers(
            &driver::find_task_processes(&ids, &self.engine.data_dir.join("alloc")),
            &state.allocations,
            &state.jobs,
        );
        let mut to_start = Vec::new();
        {
            let mut reg = self.registry.lock();
            let mut shared = BTreeMap::new();
            for j in &state.jobs {
                reg.jobs.insert(j.job.id.clone(), j.clone());
                shared.insert(
                    j.job.id.as_str(),
                    (Arc::new(j.job.clone()), JobJson::default()),
                );
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

    /// Starts the tasks of `alloc` now, or once its host volumes are ready.
    fn start_alloc(self: &Arc<Self>, alloc: &Arc<Allocation>, restored: bool) {
        if let Some(missing) = self.missing_volume(alloc) {
            let (gate_stop, gate_rx) = crossbeam_channel::bounded::<Never>(0);
            {
                let mut inner = alloc.inner.lock();
                if inner.desired == DesiredStatus::Stop {
                    return;
                }
                inner.pending_reason = Some(format!("missing host volume {missing:?}"));
                inner.gate_stop = Some(gate_stop);
            }
            let me = self.clone();
            let a = alloc.clone();
            let name = format!("gate-{}", &alloc.id[..8]);
            if let Err(e) = crate::thread::spawn(name, move || me.gate(a, gate_rx, restored)) {
                log::error!("cannot start volume wait of alloc {}: {e}", alloc.id);
            }
            return;
        }
        self.start_runners(alloc, restored);
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
                    alloc.inner.lock().pending_reason =
                        Some(format!("missing host volume {missing:?}"));
                }
            }
            select! {
                recv(changes) -> msg => if msg.is_err() { return },
                recv(stop) -> _ => return,
                recv(self.engine.deps.shutdown) -> _ => return,
            }
        }
    }

    fn start_runners(&self, alloc: &Arc<Allocation>, restored: bool) {
        let alloc_dir = self.engine.data_dir.join("alloc").join(&alloc.id);
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
                task_dir: alloc_dir.join(&task.name),
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
        let allocs: Vec<Arc<Allocation>> = self.registry.lock().allocs.values().cloned().collect();
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

fn status_key(s: &str) -> &'static str {
    match s {
        "pending" => "Starting",
        "running" => "Running",
        "failed" => "Failed",
        "complete" => "Complete",
        _ => "Lost",
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

fn new_alloc(
    job: &Arc<Job>,
    job_json: &JobJson,
    group: &TaskGroup,
    index: u32,
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
        job_json: job_json.clone(),
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

/// `current` is the registered version of the allocation's job, shared by the allocations that
/// run it; an allocation of an older version gets its own copy.
fn restored_alloc(rec: &AllocRecord, current: Option<&(Arc<Job>, JobJson)>) -> Option<Allocation> {
    let (job, job_json) = match (&rec.job, current) {
        (Some(old), _) => (Arc::new(old.clone()), JobJson::default()),
        (None, Some((job, json))) => (job.clone(), json.clone()),
        (None, None) => return None,
    };
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
        job_json,
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
    // Returns once they are gone: only then may the tasks start again (never two runs of a task).
    driver::stop_groups(&groups, wait);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::events::TaskEvent;
    use crate::task::hooks::TaskHook;
    use crate::task::mounts::HostVolume;

    /// No host volume is ever ready: allocations wait at their gate and start no process.
    struct NoVolumes;

    impl VolumeLookup for NoVolumes {
        fn lookup(&self, _name: &str) -> Option<HostVolume> {
            None
        }
        fn changes(&self) -> Receiver<()> {
            crossbeam_channel::never()
        }
    }

    struct NoHooks;

    impl HookFactory for NoHooks {
        fn hooks_for(&self, _task: &TaskContext) -> Vec<Arc<dyn TaskHook>> {
            Vec::new()
        }
    }

    /// A state write is a snapshot of one instant: a job and its allocations change as one, so a
    /// save that runs while a job is stopped must not record the allocations stopped and the job
    /// still running. After a crash such a file would restore a job that says it runs and runs
    /// nothing (found by the crash storm).
    /// A manager on a fresh data dir whose allocations never find their host volumes.
    fn manager(tag: &str) -> (Arc<AllocManager>, PathBuf, Sender<Never>) {
        let dir = std::env::temp_dir().join(format!("nw-alloc-{tag}-{}", uuid::Uuid::new_v4()));
        let (store, _) = StateStore::open(&dir, false).unwrap();
        let (shutdown_tx, shutdown) = crossbeam_channel::bounded::<Never>(0);
        let engine = Engine {
            data_dir: dir.clone(),
            node_id: "node".to_string(),
            node_name: "node".to_string(),
            deps: RunnerDeps {
                driver: Arc::new(driver::RawExec),
                store: store.clone(),
                shutdown,
            },
            hooks: Arc::new(NoHooks),
            volumes: Arc::new(NoVolumes),
        };
        (AllocManager::new(engine, store), dir, shutdown_tx)
    }

    fn gated_job(id: &str, count: u32) -> Job {
        let hcl = format!(
            "job \"{id}\" {{\n group \"g\" {{\n  count = {count}\n  volume \"v\" {{\n   \
             type = \"host\"\n   source = \"missing\"\n  }}\n  task \"a\" {{\n   \
             driver = \"raw_exec\"\n   config {{\n    command = \"true\"\n   }}\n  }}\n  \
             task \"b\" {{\n   driver = \"raw_exec\"\n   config {{\n    command = \"true\"\n   \
             }}\n  }}\n }}\n}}\n"
        );
        crate::jobspec::hcl::parse_job(&hcl).unwrap().job
    }

    /// The allocation answer is encoded straight from the live state: every field Nomad's shape
    /// has, the job as the job itself encodes, and the task states as they are now.
    #[test]
    fn allocation_answer_carries_the_live_state_and_the_job() {
        let (allocs, dir, _shutdown) = manager("view");
        let job = gated_job("view", 2);
        allocs.register_job(job.clone()).unwrap();
        let list: Vec<Value> = serde_json::from_str(&allocs.allocations_json().unwrap()).unwrap();
        assert_eq!(list.len(), 2);
        assert!(
            list.iter().all(|a| a.get("Job").is_none()),
            "lists carry no job"
        );
        let id = list[0]["ID"].as_str().unwrap().to_string();
        let alloc = allocs.get(&id).unwrap();
        {
            let mut a = alloc.tasks["a"].lock();
            a.state = TaskStatus::Dead;
            a.push(TaskEvent::not_restarting(
                now_nanos(),
                "Exceeded allowed attempts 2 in interval 30m0s",
            ));
        }
        let got: Value = serde_json::from_str(&allocs.allocation_json(&id).unwrap()).unwrap();
        let want = json!({
            "ID": id,
            "Name": alloc.name,
            "Namespace": "default",
            "NodeID": "node",
            "NodeName": "node",
            "JobID": "view",
            "TaskGroup": "g",
            "DesiredStatus": "run",
            "ClientStatus": "failed",
            "ClientDescription": "missing host volume \"missing\"",
            "CreateTime": alloc.create_time,
            "ModifyTime": got["ModifyTime"],
            "TaskStates": {
                "a": serde_json::to_value(&*alloc.tasks["a"].lock()).unwrap(),
                "b": serde_json::to_value(&*alloc.tasks["b"].lock()).unwrap(),
            },
            "Job": serde_json::to_value(&job).unwrap(),
        });
        assert_eq!(got, want);
        assert_eq!(
            got["TaskStates"]["a"]["Events"][0]["Type"],
            "Not Restarting"
        );
        let other = allocs.get(list[1]["ID"].as_str().unwrap()).unwrap();
        assert!(
            Arc::ptr_eq(&alloc.job_json, &other.job_json),
            "the allocations of one registration share the job's encoding"
        );
        let mut state = StateFile::default();
        allocs.fill(&mut state);
        let (restored, dir2, _shutdown2) = manager("view-restored");
        restored.restore(&state);
        let (a, b) = (
            restored.get(&alloc.id).unwrap(),
            restored.get(&other.id).unwrap(),
        );
        assert!(
            Arc::ptr_eq(&a.job, &b.job) && Arc::ptr_eq(&a.job_json, &b.job_json),
            "restored allocations of one job version share it"
        );
        let _ = std::fs::remove_dir_all(&dir2);
        let _ = std::fs::remove_dir_all(&dir);
    }

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
