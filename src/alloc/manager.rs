//! The allocation registry: the jobs registered on this node and their allocations, and what the
//! API asks of them — register and stop jobs; stop, restart and signal allocations; read both.
//!
//! Protocol: an API write (register a job, stop a job, stop an allocation) happens entirely or not
//! at all ([`AllocManager::commit`]). Under the state file's write lock
//! ([`StateStore::transaction`]) the write is planned from the registry as a [`Change`], nothing
//! changed yet; the change is staged in the registry, where [`Snapshot::fill`] writes the state as
//! it will be, and the file is written with the registry lock released (the write takes it again
//! through `fill`). Only once that write succeeded is the change made, under the registry lock, so
//! a job and its allocations change as one: allocations stopped (their runners told to kill),
//! added, the job recorded. A write that fails leaves the registry and every task as they were, and
//! the same request can simply be sent again. New task runners are started ([`super::gate`]) and
//! stopped gate threads joined afterwards, with no lock held. Reads copy what they need under short
//! locks and return domain values; the API encodes them.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::evals;
use super::model::{job_status, Allocation};
use super::placement::{NodeSource, PlacementFailure};
use super::runner::stop::{self, join_gates, stop_alloc, stopped_record};
use super::AllocError;
use crate::jobspec::{validate::signal_number, Job};
use crate::plan::evals as eval_records;
use crate::plan::NetworkSettings;
use crate::records::{ClientStatus, DesiredStatus, JobRecord, JobStatus};
use crate::state::{Snapshot, StateFile, StateStore};
use crate::task::events::now_nanos;
use crate::task::hooks::HookFactory;
use crate::task::mounts::VolumeLookup;
use crate::task::runner::{RunnerDeps, TaskCommand, TaskRunnerHandle};

/// What starting a task needs besides the allocation.
pub struct Engine {
    pub data_dir: PathBuf,
    pub node_id: String,
    pub node_name: String,
    pub deps: RunnerDeps,
    pub hooks: Arc<dyn HookFactory>,
    pub volumes: Arc<dyn VolumeLookup>,
    /// The node's CSI volumes, claimed and mounted by the gate (`super::csi`).
    pub csi_volumes: Option<Arc<crate::csi::volumes::CsiVolumeManager>>,
    /// The data directory's task keeper, whose tasks a restore takes over.
    pub keeper: Arc<crate::driver::KeeperClient>,
    /// The longest any task's `kill_timeout` may be (`client { max_kill_timeout }`).
    pub max_kill_timeout: Duration,
    /// The most live allocations this node takes (`client { max_allocs }`, see `limit`).
    pub max_allocs: usize,
    /// Finished children a periodic or parameterized job keeps (`client { job_gc_children }`).
    pub job_gc_children: usize,
    /// The host network's address and the ports allocations may get (`crate::plan::ports`).
    pub network: NetworkSettings,
    /// The node as placement sees it now (`placement`).
    pub node: Arc<dyn NodeSource>,
}

impl Engine {
    /// A task's `kill_timeout` as the agent applies it: cut to `max_kill_timeout`.
    pub(super) fn kill_timeout(&self, asked: Duration) -> Duration {
        asked.min(self.max_kill_timeout)
    }
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) jobs: BTreeMap<String, JobRecord>,
    pub(super) allocs: BTreeMap<String, Arc<Allocation>>,
    /// An API write being written to the state file: [`Snapshot::fill`] records the registry as
    /// it will be once the change is made. Set and taken back under the state file's write lock.
    staged: Option<Change>,
}

/// What an API write changes in the registry, planned before anything is changed.
#[derive(Default)]
pub(super) struct Change {
    /// A job record to insert or replace.
    pub(super) put_job: Option<JobRecord>,
    /// Jobs to forget with their allocations (a purge; children past `job_gc_children`).
    pub(super) forget_jobs: Vec<String>,
    /// Allocations to stop: each should run when the change is planned.
    pub(super) stop: Vec<Arc<Allocation>>,
    /// New allocations, to be started once the change is made.
    pub(super) add: Vec<Arc<Allocation>>,
    /// Stopped allocations whose poststop tasks a second stop kills ([`stop::cut_poststop`]).
    pub(super) cut: Vec<Arc<Allocation>>,
    /// When the change was asked for: the stopped allocations' modify time.
    pub(super) at: i64,
    /// How each of `stop` is stopped, decided once when the change is staged (`stop::plan_of`).
    pub(super) plans: BTreeMap<String, stop::StopPlan>,
    /// Allocations the change moves to the job's new version ([`evals::in_place`]).
    pub(super) in_place: Option<evals::InPlace>,
}

impl Change {
    fn job<'a>(&'a self, reg: &'a Registry, id: &str) -> Option<&'a JobRecord> {
        if self.forget_jobs.iter().any(|f| f == id) {
            return None;
        }
        match &self.put_job {
            Some(j) if j.job.id == id => Some(j),
            _ => reg.jobs.get(id),
        }
    }
}

/// The outcome of a job registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub eval_id: String,
    /// False when the same spec was already running: nothing changed.
    pub changed: bool,
    /// The groups this node could not place (an unchanged job: those still waiting).
    pub failures: Vec<PlacementFailure>,
    /// The evaluation that waits for the node to fit what failed.
    pub blocked_eval: Option<String>,
}

/// A job as the API shows it: its record, its status by Nomad's rule, and how many of its
/// allocations are in each client status, per group.
#[derive(Debug, Clone)]
pub struct JobSummary {
    pub record: JobRecord,
    pub status: JobStatus,
    /// Group → client status → allocations.
    pub groups: BTreeMap<String, BTreeMap<ClientStatus, u32>>,
    /// Group → allocations not placed yet, waiting for the node to fit them.
    pub queued: BTreeMap<String, u32>,
}

pub struct AllocManager {
    pub(super) engine: Engine,
    pub(super) store: Arc<StateStore>,
    /// Guards: jobs and allocations together, so a job and its allocations change as one. The
    /// first lock of the order (registry → allocation → task states); never held while the state
    /// file is written or a gate is joined.
    pub(super) registry: Mutex<Registry>,
    /// Guards: the senders of [`AllocManager::watch_jobs`] (a leaf: only `try_send` under it).
    job_watchers: Mutex<Vec<crossbeam_channel::Sender<()>>>,
}

impl Snapshot for AllocManager {
    /// Copies jobs and allocations under the one registry lock: a job and its allocations change
    /// together under it (a stop marks both), so a copy of the jobs taken before a stop and of the
    /// allocations after it would record a state that never was. A staged API write is recorded
    /// as made: the write is on disk before anything of it happens.
    fn fill(&self, out: &mut StateFile) {
        let r = self.registry.lock();
        // Nothing staged is an empty change: the registry as it is.
        let unchanged = Change::default();
        let change = r.staged.as_ref().unwrap_or(&unchanged);
        // Allocations of one registration share one `Arc<Job>`: compare each shared job with
        // the registered one once, not once per allocation (1,000 allocations of one 1,000-group
        // job made every write compare a million groups).
        let mut current: HashMap<*const Job, bool> = HashMap::new();
        let (stopped, cut) = (ids(&change.stop), ids(&change.cut));
        let forgotten = |a: &Allocation| change.forget_jobs.contains(&a.job.id);
        let kept = r
            .allocs
            .values()
            .filter(|a| !forgotten(a) || stop::purge_keeps(a, change.plans.get(&a.id).copied()));
        out.allocations = kept
            .chain(change.add.iter())
            .map(|a| {
                if let Some(record) = change.in_place.as_ref().and_then(|p| p.record(a)) {
                    return record;
                }
                let (job, _) = a.job_now();
                let is_current = *current
                    .entry(Arc::as_ptr(&job))
                    .or_insert_with(|| change.job(&r, &job.id).is_some_and(|j| j.job == *job));
                let mut record = a.record(is_current);
                if stopped.contains(a.id.as_str()) {
                    let plan = change.plans.get(&a.id).copied().unwrap_or_default();
                    stopped_record(&mut record, change.at, &stop::poststop_to_run(a, plan));
                }
                if cut.contains(a.id.as_str()) {
                    stop::cut_record(&mut record, &stop::poststop_names(a));
                }
                record.purged |= forgotten(a);
                record
            })
            .collect();
        let mut jobs: BTreeMap<&str, &JobRecord> =
            r.jobs.iter().map(|(id, j)| (id.as_str(), j)).collect();
        for id in &change.forget_jobs {
            jobs.remove(id.as_str());
        }
        if let Some(j) = &change.put_job {
            jobs.insert(j.job.id.as_str(), j);
        }
        out.jobs = jobs.into_values().cloned().collect();
    }
}

impl AllocManager {
    pub fn new(engine: Engine, store: Arc<StateStore>) -> Arc<AllocManager> {
        Arc::new(AllocManager {
            engine,
            store,
            registry: Mutex::new(Registry::default()),
            job_watchers: Mutex::new(Vec::new()),
        })
    }

    /// Makes an API write whole or not at all (see the module doc). `plan` computes the change
    /// from the registry as it is (`None`: nothing to do); the change is made only once the
    /// state file records it. `action` names the write in the error. Returns the allocations the
    /// change added, for the caller to start, or `None` when nothing changed.
    pub(super) fn commit(
        &self,
        action: impl FnOnce() -> String,
        plan: impl FnOnce(&Registry) -> Result<Option<Change>, AllocError>,
    ) -> Result<Option<Vec<Arc<Allocation>>>, AllocError> {
        let mut txn = self.store.transaction();
        let Some(mut change) = plan(&self.registry.lock())? else {
            return Ok(None);
        };
        let mut reg = self.registry.lock();
        change.plans = change
            .stop
            .iter()
            .map(|a| (a.id.clone(), stop::plan_of(a)))
            .collect();
        reg.staged = Some(change);
        drop(reg);
        let saved = txn.save();
        let mut reg = self.registry.lock();
        let change = reg.staged.take().expect("the change staged above");
        if let Err(source) = saved {
            return Err(AllocError::NotSaved {
                action: action(),
                source,
            });
        }
        let mut gates = Vec::new();
        for alloc in &change.stop {
            let purge = change.forget_jobs.contains(&alloc.job.id);
            let plan = change.plans.get(&alloc.id).copied().unwrap_or_default();
            gates.extend(stop_alloc(alloc, change.at, purge, plan));
            self.engine.volumes.release(&alloc.id);
        }
        for alloc in &change.cut {
            stop::cut_poststop(alloc);
        }
        change.in_place.iter().for_each(evals::InPlace::make);
        for id in &change.forget_jobs {
            reg.jobs.remove(id);
        }
        if !change.forget_jobs.is_empty() {
            // Ended allocations give back their volume claims, as the collector's destroy does.
            reg.allocs.retain(|_, a| {
                // One whose gate carries out the stop runs on, purged (`super::stop`).
                let keep = !change.forget_jobs.contains(&a.job.id) || stop::is_purged(a);
                if !keep {
                    // A stopped allocation may still run its poststop tasks: not once forgotten.
                    gates.extend(stop::end_all(a));
                    self.engine.volumes.release(&a.id);
                }
                keep
            });
        }
        if let Some(record) = change.put_job {
            reg.jobs.insert(record.job.id.clone(), record);
        }
        for alloc in &change.add {
            reg.allocs.insert(alloc.id.clone(), alloc.clone());
        }
        drop(reg);
        drop(txn);
        join_gates(gates);
        Ok(Some(change.add))
    }

    /// Registers or updates a job. An unchanged spec is a no-op; a changed one stops the old
    /// allocations and starts new ones, once the state file records it. A periodic or
    /// parameterized job is a template: it is recorded without allocations (`super::children`).
    ///
    /// Only what this node can run is placed (`placement`): the groups it cannot run, wholly or
    /// in part, get no allocation for what does not fit, and the answer names them in Nomad's
    /// words; a blocked evaluation waits for the node to fit them ([`AllocManager::reevaluate`]).
    pub fn register_job(self: &Arc<Self>, job: Job) -> Result<Registered, AllocError> {
        self.register_job_at(job, None)
    }

    /// Commits a registration planned by `plan` (given the evaluation's ID and where to put the
    /// placement failures), starts what it added and wakes the job watchers
    /// ([`AllocManager::watch_jobs`]). A job sent again unchanged is a new evaluation, as in
    /// Nomad: what waits is placed if the node now fits it (the ports another job held, say)
    /// without waiting for the next re-evaluation.
    pub(super) fn register_planned(
        self: &Arc<Self>,
        id: &str,
        action: impl FnOnce() -> String,
        plan: impl FnOnce(
            &Registry,
            &str,
            &mut Vec<PlacementFailure>,
        ) -> Result<Option<Change>, AllocError>,
    ) -> Result<Registered, AllocError> {
        let eval_id = uuid::Uuid::new_v4().to_string();
        let mut failures = Vec::new();
        let added = self.commit(action, |reg| plan(reg, &eval_id, &mut failures))?;
        let changed = added.is_some();
        for alloc in added.unwrap_or_default() {
            self.start_alloc(&alloc, false);
        }
        if changed {
            self.jobs_changed();
        } else {
            // The registration itself changed nothing: a failure to place what waits leaves it
            // waiting for the next re-evaluation, and the answer says what still waits.
            match self.place_queued(id) {
                Ok(added) => added.iter().for_each(|a| self.start_alloc(a, false)),
                Err(e) => log::warn!("placing the queued allocations of job {id:?}: {e}"),
            }
        }
        let reg = self.registry.lock();
        let record = reg.jobs.get(id);
        let blocked_eval = record.and_then(eval_records::blocked).map(|e| e.id.clone());
        if changed {
            return Ok(Registered {
                eval_id,
                changed,
                failures,
                blocked_eval,
            });
        }
        // The same job again: what still waits, under the evaluation that said so.
        Ok(Registered {
            eval_id: record
                .and_then(eval_records::latest)
                .map_or(eval_id, |e| e.id.clone()),
            changed,
            failures: record
                .map(eval_records::current_failures)
                .unwrap_or_default(),
            blocked_eval,
        })
    }

    /// The change that registers `job` under the evaluation `eval_id` (see
    /// [`AllocManager::register_job`]); what this node cannot place goes to `failures`.
    pub(super) fn plan_register(
        &self,
        reg: &Registry,
        job: Job,
        eval_id: &str,
        failures: &mut Vec<PlacementFailure>,
    ) -> Result<Option<Change>, AllocError> {
        let id = job.id.clone();
        let existing = reg.jobs.get(&job.id);
        if existing.is_some_and(|e| e.job == job && !e.stop) {
            return Ok(None);
        }
        let stop = running_allocs_of(reg, &id);
        // Only no-effect settings changed: Nomad's in-place update ([`evals::in_place`]).
        if let Some(e) = existing.filter(|e| !e.stop && e.job.eq_but_kept(&job)) {
            return Ok(Some(evals::in_place(e, job, stop, eval_id, failures)));
        }
        let template = job.periodic.is_some() || job.parameterized_job.is_some();
        if !template {
            reg.check_alloc_limit(&job, self.engine.max_allocs)?;
        }
        let now = now_nanos();
        // The plan gives ports and cores under the registry lock, with the allocations being
        // replaced already free; a group that cannot get them is a placement failure.
        let mut here = if template {
            Default::default()
        } else {
            self.plan_here(reg, &job, &[], &stop)
        };
        let version = existing.map_or(0, |j| j.version + 1);
        let add = here.allocations(&Arc::new(job.clone()), version, now);
        let previous = existing.map_or(&[][..], |j| j.evaluations.as_slice());
        *failures = std::mem::take(&mut here.plan.failures);
        let evaluations = eval_records::after_register(previous, eval_id, failures, now);
        Ok(Some(Change {
            put_job: Some(JobRecord {
                version,
                job,
                stop: false,
                submit_time: now,
                evaluations,
            }),
            stop,
            add,
            at: now,
            ..Change::default()
        }))
    }

    /// A channel that gets a message (at most one waiting) whenever a job is registered,
    /// stopped or purged: the periodic launcher's wake-up.
    pub fn watch_jobs(&self) -> crossbeam_channel::Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.job_watchers.lock().push(tx);
        rx
    }

    fn jobs_changed(&self) {
        // A full channel already holds a wake-up; a closed one is a watcher gone.
        self.job_watchers.lock().retain(|w| {
            !matches!(
                w.try_send(()),
                Err(crossbeam_channel::TrySendError::Disconnected(_))
            )
        });
    }

    /// Stops a job's allocations; `purge` also forgets the job and them. Returns the eval ID. A
    /// stop of a job already stopped kills the poststop tasks its allocations run
    /// ([`stop::cut_poststop`]), once the state file records it.
    pub fn stop_job(&self, id: &str, purge: bool) -> Result<String, AllocError> {
        self.commit(
            || format!("stopping job {id:?}"),
            |reg| {
                let record = reg.jobs.get(id).ok_or(AllocError::JobNotFound)?;
                let stop = running_allocs_of(reg, id);
                if record.stop && stop.is_empty() && !purge {
                    let cut = stop::to_cut(reg.allocs.values(), id);
                    return Ok((!cut.is_empty()).then(|| Change {
                        cut,
                        ..Change::default()
                    }));
                }
                let now = now_nanos();
                Ok(Some(Change {
                    put_job: (!purge).then(|| JobRecord {
                        stop: true,
                        evaluations: eval_records::after_stop(&record.evaluations, now),
                        ..record.clone()
                    }),
                    forget_jobs: purge.then(|| id.to_string()).into_iter().collect(),
                    stop,
                    at: now,
                    ..Change::default()
                }))
            },
        )?;
        self.jobs_changed();
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
        // A purged job's allocation that runs its stop on belongs to no job of that ID now.
        reg.allocs
            .values()
            .filter(|a| a.job.id == job_id && !stop::is_purged(a))
            .cloned()
            .collect()
    }

    fn summary(&self, record: JobRecord) -> JobSummary {
        let allocs = self.allocs_of(&record.job.id);
        let mut groups = BTreeMap::<String, BTreeMap<ClientStatus, u32>>::new();
        for a in &allocs {
            let e = groups.entry(a.group.clone()).or_default();
            *e.entry(a.client_status()).or_default() += 1;
        }
        let queued = if record.stop {
            BTreeMap::new()
        } else {
            eval_records::queued(&record)
        };
        JobSummary {
            status: job_status(&record, &allocs, !queued.is_empty()),
            record,
            groups,
            queued,
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

    /// An evaluation by full ID, with the job it belongs to (`GET /v1/evaluation/:id`).
    pub fn evaluation(
        &self,
        id: &str,
    ) -> Result<(JobRecord, crate::records::EvalRecord), AllocError> {
        let reg = self.registry.lock();
        reg.jobs
            .values()
            .find_map(|j| {
                let e = j.evaluations.iter().find(|e| e.id == id)?;
                Some((j.clone(), e.clone()))
            })
            .ok_or(AllocError::EvalNotFound)
    }

    /// Every evaluation's ID (what an ID prefix is resolved against).
    pub fn eval_ids(&self) -> Vec<String> {
        let reg = self.registry.lock();
        reg.jobs
            .values()
            .flat_map(|j| j.evaluations.iter().map(|e| e.id.clone()))
            .collect()
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

    /// Stops one allocation for good, once the state file records it. Returns the eval ID. A
    /// stop of an allocation already stopped kills the poststop tasks it runs
    /// ([`stop::cut_poststop`]), once the state file records that too.
    pub fn stop(&self, id: &str) -> Result<String, AllocError> {
        self.commit(
            || format!("stopping allocation {id}"),
            |reg| {
                let alloc = reg.allocs.get(id).ok_or(AllocError::AllocNotFound)?;
                let change = if alloc.desired() != DesiredStatus::Stop {
                    Change {
                        stop: vec![alloc.clone()],
                        at: now_nanos(),
                        ..Change::default()
                    }
                } else if stop::runs_poststop(alloc) {
                    Change {
                        cut: vec![alloc.clone()],
                        ..Change::default()
                    }
                } else {
                    return Ok(None);
                };
                Ok(Some(change))
            },
        )?;
        Ok(uuid::Uuid::new_v4().to_string())
    }

    /// The longest `kill_timeout` (as applied: at most `max_kill_timeout`) of the tasks of
    /// allocations that should run.
    pub fn max_kill_timeout(&self) -> Duration {
        let reg = self.registry.lock();
        reg.allocs
            .values()
            .flat_map(|a| a.group_spec().tasks.iter().map(|t| t.kill_timeout))
            .max()
            .map_or(Duration::ZERO, |t| self.engine.kill_timeout(t))
    }

    /// Waits for every task runner and gate thread to end (after a shutdown), at most `timeout`.
    pub fn join_all(&self, timeout: Duration) {
        let allocs = self.allocations();
        let deadline = Instant::now() + timeout;
        for alloc in allocs {
            let (runners, gate) = {
                let mut inner = alloc.inner.lock();
                (std::mem::take(&mut inner.runners), inner.gate.take())
            };
            if let Some(gate) = gate {
                if gate.join_until(deadline).is_err() {
                    log::warn!("the volume wait of alloc {} did not end in time", alloc.id);
                }
            }
            let mut runners: Vec<TaskRunnerHandle> = runners.into_values().collect();
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

/// The IDs of `allocs`, for a staged change's look-ups in [`Snapshot::fill`].
fn ids(allocs: &[Arc<Allocation>]) -> std::collections::HashSet<&str> {
    allocs.iter().map(|a| a.id.as_str()).collect()
}

/// The allocations of a job that should run: those a registration or a stop of the job stops.
fn running_allocs_of(reg: &Registry, job_id: &str) -> Vec<Arc<Allocation>> {
    reg.allocs
        .values()
        .filter(|a| a.job.id == job_id && a.desired() == DesiredStatus::Run)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{desired, gated_job, manager};
    use super::*;
    use crate::util::short_id;

    /// Whether a thread of this process has that name now. A thread names itself once it runs,
    /// and its entry goes a moment after it ends: poll with [`eventually`].
    fn thread_alive(name: &str) -> bool {
        std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
            std::fs::read_to_string(t.unwrap().path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
    }

    fn eventually(check: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// A gate thread belongs to its allocation: a stop joins it before it returns, and
    /// `join_all` joins those that saw the agent shut down.
    #[test]
    fn gates_are_joined_by_a_stop_and_at_shutdown() {
        let (allocs, dir, shutdown) = manager("gates");
        allocs.register_job(gated_job("stopped", 1)).unwrap();
        allocs.register_job(gated_job("waiting", 1)).unwrap();
        let [stopped, waiting] = ["stopped", "waiting"].map(|job| {
            let alloc = allocs.job_allocations(job).unwrap().remove(0);
            let gate = format!("gate-{}", short_id(&alloc.id));
            assert!(alloc.inner.lock().gate.is_some() && eventually(|| thread_alive(&gate)));
            (alloc, gate)
        });
        allocs.stop_job("stopped", false).unwrap();
        assert!(stopped.0.inner.lock().gate.is_none() && eventually(|| !thread_alive(&stopped.1)));
        assert!(thread_alive(&waiting.1), "the other allocation still waits");
        drop(shutdown);
        allocs.join_all(Duration::from_secs(10));
        assert!(waiting.0.inner.lock().gate.is_none() && eventually(|| !thread_alive(&waiting.1)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Allocation ID → desired status, and each job's ID, stop flag and version.
    type Recorded = (BTreeMap<String, DesiredStatus>, Vec<(String, bool, u64)>);

    /// What the state file records of the allocations and jobs.
    fn on_disk(dir: &std::path::Path) -> Recorded {
        let state = crate::state::read(dir).unwrap();
        let allocs = state
            .allocations
            .iter()
            .map(|a| (a.id.clone(), a.desired_status))
            .collect();
        let jobs = state
            .jobs
            .iter()
            .map(|j| (j.job.id.clone(), j.stop, j.version))
            .collect();
        (allocs, jobs)
    }

    /// An API write whose state write fails changes nothing, in memory or on disk, and the same
    /// request then succeeds; once it does, the file records exactly what the registry holds.
    /// ([`crate::state::testing::Blocker`] makes every write fail, even as root.)
    #[test]
    fn a_write_that_cannot_be_saved_changes_nothing() {
        let (allocs, dir, _shutdown) = manager("unsaved");
        allocs.store.register(allocs.clone());
        allocs.register_job(gated_job("web", 2)).unwrap();
        let before = (desired(&allocs), on_disk(&dir));
        assert_eq!(before.0.len(), 2);
        assert_eq!(before.0, before.1 .0);
        let blocker = crate::state::testing::Blocker::new(&dir);

        let changed = gated_job("web", 3);
        let err = allocs.register_job(changed.clone()).unwrap_err();
        assert!(matches!(err, AllocError::NotSaved { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with("registering job \"web\": cannot write state file ")
                && text.ends_with("; nothing was changed"),
            "{text}"
        );
        let id = before.0.keys().next().unwrap().clone();
        assert!(allocs.stop_job("web", false).is_err());
        assert!(allocs.stop_job("web", true).is_err());
        assert!(allocs.stop(&id).is_err());
        assert_eq!((desired(&allocs), on_disk(&dir)), before);
        assert_eq!(allocs.job("web").unwrap().record.version, 0);
        assert!(
            allocs.store.failing().is_some(),
            "the failed write is reported"
        );

        blocker.remove();
        let again = allocs.register_job(changed).unwrap();
        assert!(again.changed, "the same request, sent again, is a change");
        assert!(allocs.store.failing().is_none());
        let now = desired(&allocs);
        assert_eq!(now.len(), 5);
        assert!(before.0.keys().all(|id| now[id] == DesiredStatus::Stop));
        assert_eq!(on_disk(&dir).0, now);
        assert_eq!(on_disk(&dir).1, vec![("web".to_string(), false, 1)]);
        allocs.stop(&id).unwrap();
        allocs.stop_job("web", true).unwrap();
        assert!(desired(&allocs).is_empty());
        assert_eq!(on_disk(&dir), (BTreeMap::new(), Vec::new()));
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
}
