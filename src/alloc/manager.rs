//! The allocation registry: the jobs registered on this node and their allocations, and what the
//! API asks of them — register and stop jobs; stop, restart and signal allocations; read both.
//!
//! Protocol: every change is made under the one registry lock, so a job and its allocations
//! change as one; the state file is written after the lock is released (a write takes it again
//! through [`Snapshot::fill`]); task runners are started ([`super::gate`]) or sent commands
//! afterwards. A stopped allocation's gate thread is joined once the registry lock is released.
//! Reads copy what they need under short locks and return domain values; the API encodes them.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::model::Allocation;
use super::AllocError;
use crate::jobspec::{validate::signal_number, Job};
use crate::records::{DesiredStatus, JobRecord};
use crate::state::{Snapshot, StateFile, StateStore};
use crate::task::events::{now_nanos, TaskStatus};
use crate::task::hooks::HookFactory;
use crate::task::mounts::VolumeLookup;
use crate::task::runner::{RunnerDeps, TaskCommand, TaskRunnerHandle};
use crate::thread::Worker;

/// What starting a task needs besides the allocation.
pub struct Engine {
    pub data_dir: PathBuf,
    pub node_id: String,
    pub node_name: String,
    pub deps: RunnerDeps,
    pub hooks: Arc<dyn HookFactory>,
    pub volumes: Arc<dyn VolumeLookup>,
    /// The data directory's task keeper, whose tasks a restore takes over.
    pub keeper: Arc<crate::driver::KeeperClient>,
    /// The most live allocations this node takes (`client { max_allocs }`, see `limit`).
    pub max_allocs: usize,
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) jobs: BTreeMap<String, JobRecord>,
    pub(super) allocs: BTreeMap<String, Arc<Allocation>>,
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
    pub(super) engine: Engine,
    pub(super) store: Arc<StateStore>,
    /// Guards: jobs and allocations together, so a job and its allocations change as one. The
    /// first lock of the order (registry → allocation → task states); never held while the state
    /// file is written or a gate is joined.
    pub(super) registry: Mutex<Registry>,
}

impl Snapshot for AllocManager {
    /// Copies jobs and allocations under the one registry lock: a job and its allocations change
    /// together under it (a stop marks both), so a copy of the jobs taken before a stop and of the
    /// allocations after it would record a state that never was.
    fn fill(&self, out: &mut StateFile) {
        let r = self.registry.lock();
        // Allocations of one registration share one `Arc<Job>`: compare each shared job with the
        // registered one once, not once per allocation (1,000 allocations of one 1,000-group job
        // made every write compare a million groups).
        let mut current: HashMap<*const Job, bool> = HashMap::new();
        out.allocations = r
            .allocs
            .values()
            .map(|a| {
                let is_current = *current
                    .entry(Arc::as_ptr(&a.job))
                    .or_insert_with(|| r.jobs.get(&a.job.id).is_some_and(|j| j.job == *a.job));
                a.record(is_current)
            })
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
        let mut gates = Vec::new();
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
            reg.check_alloc_limit(&job, self.engine.max_allocs)?;
            let version = reg.jobs.get(&job.id).map(|j| j.version + 1).unwrap_or(0);
            for alloc in reg.allocs.values().filter(|a| a.job.id == job.id) {
                gates.extend(stop_alloc(alloc));
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
        join_gates(gates);
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
        let mut gates = Vec::new();
        {
            let mut reg = self.registry.lock();
            let record = reg.jobs.get_mut(id).ok_or(AllocError::JobNotFound)?;
            record.stop = true;
            for alloc in reg.allocs.values().filter(|a| a.job.id == id) {
                gates.extend(stop_alloc(alloc));
                self.engine.volumes.release(&alloc.id);
            }
            if purge {
                reg.jobs.remove(id);
                reg.allocs.retain(|_, a| a.job.id != id);
            }
        }
        join_gates(gates);
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
        join_gates(stop_alloc(&alloc));
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

/// Marks an allocation stopped and kills its tasks. Returns its volume gate, stopped, for the
/// caller to join once it holds no lock (the gate may be taking the allocation's).
#[must_use = "the gate thread must be joined"]
fn stop_alloc(alloc: &Allocation) -> Option<Worker<()>> {
    let mut inner = alloc.inner.lock();
    if inner.desired == DesiredStatus::Stop {
        return None;
    }
    inner.desired = DesiredStatus::Stop;
    inner.modify_time = now_nanos();
    let mut gate = inner.gate.take();
    if let Some(g) = &mut gate {
        g.stop();
    }
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
    gate
}

/// Joins stopped gate threads: each returns as soon as it sees its stop channel disconnect.
fn join_gates(gates: impl IntoIterator<Item = Worker<()>>) {
    for gate in gates {
        gate.join();
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{gated_job, manager};
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
