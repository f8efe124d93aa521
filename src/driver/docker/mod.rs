//! The `docker` driver (docker.md): a task is a container of the node's Docker engine.
//!
//! - [`engine`]: the Engine API client (synchronous HTTP over the engine's unix socket, a timeout
//!   on every call, long calls closable from another thread).
//! - [`container`]: the create request for a task (pure).
//! - [`logs`]: the container's output copied into the task's rotated log files, exactly once
//!   across agent restarts.
//!
//! Thread protocol. [`Docker::start`] pulls the image when absent (the runner's `Driver` events
//! `Downloading image` / `Downloaded image`), creates and starts the container, and starts two
//! threads for it, owned by the task's [`RunningTask`]:
//! - `docker-wait-<id>` blocks in the engine's wait, then reads the container's end (exit code,
//!   OOM, finish time) and sends it, once, on the task's exit channel. An engine that cannot be
//!   reached is not an exit: the thread retries every [`RETRY`] until it can read the container
//!   again, so a running task is never marked dead because dockerd restarted.
//! - `docker-logs-<id>` follows the container's log stream into the log files until the
//!   container ends, resuming from its cursor after an engine restart.
//!
//! Both end when the container ends, or when the task's [`Watched`] is dropped: its `stop`
//! sender disconnects (their retry waits) and its [`Closer`] shuts their sockets (their blocking
//! calls). Dropping is what an agent shutdown does, and the container runs on for the next agent
//! ([`Docker::recover`] re-attaches by the container ID in the handle). [`Docker::destroy`] kills
//! what still runs, lets the log thread read to the end, and removes the container: a container
//! of a task that ended is never left behind.
//!
//! Health: [`Docker::refresh`] (once as the agent starts, then every 30 s on the agent's
//! `docker-fingerprint` thread, and on SIGHUP) connects to the engine; while it cannot, the node
//! has no `driver.docker` attribute, so a new docker job is a placement failure
//! (`alloc::placement`), and running containers are left alone.

pub mod container;
pub mod engine;
pub mod logs;
pub mod settings;
mod watch;

use crossbeam_channel::{after, bounded, select, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::engine::{Closer, Endpoint, Engine, EngineError, Killed};
use super::{
    Attached, Driver, DriverError, HandleState, RunningTask, StartSpec, TaskExit, TaskHandle,
    TaskRunState, TaskStats,
};
use crate::thread::{Never, Worker};
use crate::util::{allocdir, short_id};
use settings::DockerSettings;

/// The driver's name in jobspecs and node attributes.
pub const NAME: &str = crate::jobspec::docker::NAME;

/// How long an engine call may take by default, and the connect at a health check.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a container may take to go after SIGKILL before a stop gives up on it.
const REAP_AFTER_SIGKILL: Duration = Duration::from_secs(20);
/// How long [`Docker::destroy`] lets the log thread read what an ended container wrote.
const LOG_DRAIN: Duration = Duration::from_secs(5);

/// The `docker` driver.
pub struct Docker {
    settings: DockerSettings,
    endpoint: Result<Endpoint, String>,
    /// The log cursors are in `<data_dir>/client/docker/<alloc_id>` (`allocdir::docker_dir`),
    /// outside the allocation directories, which tasks can write.
    data_dir: PathBuf,
    /// This node's ID, a label on its containers: an engine may serve several agents (or other
    /// clients), and an agent only ever removes containers of its own node.
    node_id: String,
    /// The engine as the last health check or call connected to it; `None` while it cannot be
    /// reached. Guards only the value: it is cloned out, never held across a call.
    engine: Mutex<Option<Engine>>,
}

/// What the driver keeps of one container it watches.
pub struct Watched {
    id: String,
    pub(crate) exited: Receiver<TaskExit>,
    /// Shuts the sockets of the threads' blocking calls.
    closer: Closer,
    /// Dropped to end the threads' retry waits.
    stop: Option<Sender<Never>>,
    wait: Option<Worker<()>>,
    logs: Option<Worker<()>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop.take();
        self.closer.close();
        for worker in [self.wait.take(), self.logs.take()].into_iter().flatten() {
            worker.join();
        }
    }
}

impl Docker {
    pub fn new(settings: DockerSettings, data_dir: &Path, node_id: &str) -> Docker {
        let endpoint = Endpoint::parse(&settings.endpoint).map_err(|e| e.to_string());
        Docker {
            settings,
            endpoint,
            data_dir: data_dir.to_path_buf(),
            node_id: node_id.to_string(),
            engine: Mutex::new(None),
        }
    }

    /// Connects to the engine again (the health check): answers whether it is reachable. The
    /// node's `driver.docker` attributes follow.
    pub fn refresh(&self) -> bool {
        let connected = self.connect();
        let ok = connected.is_ok();
        if let Err(e) = &connected {
            if self.engine.lock().is_some() {
                log::warn!("docker driver unhealthy: {e}");
            }
        } else if self.engine.lock().is_none() {
            log::info!(
                "docker driver healthy: engine at {}",
                self.settings.endpoint
            );
        }
        *self.engine.lock() = connected.ok();
        ok
    }

    fn connect(&self) -> Result<Engine, DriverError> {
        let endpoint = self.endpoint.clone().map_err(DriverError::Docker)?;
        Engine::connect(endpoint, CALL_TIMEOUT).map_err(|e| DriverError::Docker(e.to_string()))
    }

    /// The engine to call: the one connected, else a new connection.
    fn engine(&self) -> Result<Engine, DriverError> {
        if let Some(e) = self.engine.lock().clone() {
            return Ok(e);
        }
        let engine = self.connect()?;
        *self.engine.lock() = Some(engine.clone());
        Ok(engine)
    }

    /// An engine call failed: when it could not reach the engine, the driver is unhealthy until
    /// the next successful connect.
    fn failed(&self, e: EngineError) -> DriverError {
        if e.is_unavailable() {
            *self.engine.lock() = None;
        }
        DriverError::Docker(e.to_string())
    }

    fn watched(task: &RunningTask) -> Option<&Watched> {
        match &task.attached {
            Attached::Container(w) => Some(w),
            _ => None,
        }
    }

    /// A container's usage from the engine, by its handle: the docker source of
    /// `resources::usage` (the stats API holds handles, not running tasks).
    pub fn usage(
        &self,
        handle: &TaskHandle,
    ) -> Result<crate::resources::usage::Reading, DriverError> {
        let (id, _) = Self::check(handle)?;
        let s = self.engine()?.stats(id).map_err(|e| self.failed(e))?;
        Ok(crate::resources::usage::Reading {
            rss: s.memory.rss,
            cache: s.memory.cache,
            swap: s.memory.swap,
            usage: s.memory.usage,
            max_usage: s.memory.max_usage,
            user_seconds: s.cpu.user_usage as f64 / 1e9,
            system_seconds: s.cpu.kernel_usage as f64 / 1e9,
            throttled_periods: 0,
            throttled_time: 0,
            memory_measured: crate::resources::usage::DOCKER_MEMORY_MEASURED,
            cpu_measured: crate::resources::usage::CPU_MEASURED,
        })
    }

    fn check(handle: &TaskHandle) -> Result<(&str, &str), DriverError> {
        match &handle.state {
            HandleState::Container { id, name } if handle.driver == NAME => Ok((id, name)),
            _ => Err(DriverError::ForeignHandle {
                driver: NAME,
                handle_driver: handle.driver.clone(),
                version: handle.version,
            }),
        }
    }

    fn cursor(&self, alloc_id: &str, task: &str) -> PathBuf {
        allocdir::docker_dir(&self.data_dir, alloc_id).join(format!("{task}.logs"))
    }

    /// Starts watching container `id` of task `task` of `alloc_id`: its exit and its logs.
    fn watch(
        &self,
        engine: &Engine,
        id: &str,
        name: &str,
        alloc_id: &str,
        task: &str,
        logs: crate::jobspec::LogConfig,
    ) -> Result<RunningTask, DriverError> {
        let (exit_tx, exited) = bounded(1);
        let (stop, stop_rx) = bounded::<Never>(0);
        let closer = Closer::new();
        let spawn_err =
            |e: std::io::Error| DriverError::Docker(format!("cannot watch container {id}: {e}"));
        let wait = {
            let (engine, id, closer, stop_rx) = (
                engine.clone(),
                id.to_string(),
                closer.clone(),
                stop_rx.clone(),
            );
            crate::thread::spawn(format!("docker-wait-{}", short_id(&id)), move || {
                watch::wait_for_exit(&engine, &id, &closer, &stop_rx, exit_tx)
            })
            .map_err(spawn_err)?
        };
        let copy = watch::LogTarget {
            alloc_root: allocdir::alloc_root(&self.data_dir),
            log_dir: allocdir::log_dir(&allocdir::alloc_dir(&self.data_dir, alloc_id)),
            task: task.to_string(),
            logs,
            cursor: self.cursor(alloc_id, task),
        };
        // `logs { disabled = true }`: nothing is copied and no log file is written; the
        // container keeps the engine's own log driver.
        let logs = if copy.logs.disabled {
            None
        } else {
            let (engine, id, closer) = (engine.clone(), id.to_string(), closer.clone());
            Some(
                crate::thread::spawn(format!("docker-logs-{}", short_id(&id)), move || {
                    watch::copy_logs(&engine, &id, &copy, &closer, &stop_rx)
                })
                .map_err(spawn_err)?,
            )
        };
        let started_nanos = engine
            .inspect(id)
            .ok()
            .flatten()
            .and_then(|info| info.state.started_at);
        Ok(RunningTask {
            started_nanos,
            handle: TaskHandle::container(NAME, id, name),
            attached: Attached::Container(Box::new(Watched {
                id: id.to_string(),
                exited,
                closer,
                stop: Some(stop),
                wait: Some(wait),
                logs,
            })),
        })
    }

    /// The image, pulled when absent (or always with `force_pull`).
    fn ensure_image(
        &self,
        engine: &Engine,
        spec: &StartSpec,
        c: &crate::driver::ContainerSpec,
    ) -> Result<(), DriverError> {
        let image = &c.config.image;
        if !c.config.force_pull && engine.image_exists(image).map_err(|e| self.failed(e))? {
            return Ok(());
        }
        let report = |m: &str| {
            if let Some(p) = &spec.progress {
                p.report(m)
            }
        };
        report("Downloading image");
        // A pull may take minutes: the task's kill or the agent's shutdown closes it.
        let closer = Closer::new();
        let (done, pulled) = bounded::<Never>(0);
        let watcher = match spec.cancel.clone() {
            Some([killed, shutdown]) => {
                let closer = closer.clone();
                let watch = move || {
                    select! {
                        recv(killed) -> _ => closer.close(),
                        recv(shutdown) -> _ => closer.close(),
                        recv(pulled) -> _ => {}
                    }
                };
                crate::thread::spawn("docker-pull", watch).ok()
            }
            None => None,
        };
        let result = engine.pull(image, c.config.pull_timeout(), &closer);
        drop(done);
        if let Some(w) = watcher {
            w.join();
        }
        result.map_err(|e| self.failed(e))?;
        report("Downloaded image");
        Ok(())
    }

    /// Kills what runs of container `id` and removes it.
    fn remove(&self, engine: &Engine, id: &str) {
        if let Err(e) = engine.remove(id, true) {
            log::warn!("cannot remove container {id}: {e}");
        }
    }

    /// Stops container `id` the way [`Driver::stop`] does, waiting on `exited`.
    fn stop_container(
        &self,
        id: &str,
        exited: &Receiver<TaskExit>,
        signal: i32,
        timeout: Duration,
        cancel: &Receiver<Never>,
    ) -> Result<Option<TaskExit>, DriverError> {
        let engine = self.engine()?;
        if let Ok(Killed::NotRunning) = engine.kill(id, signal).map_err(|e| self.failed(e)) {
            // Ended already: its exit is on the channel, or about to be.
        }
        select! {
            recv(exited) -> exit => return Ok(exit.ok()),
            recv(after(timeout)) -> _ => {},
            recv(cancel) -> _ => return Ok(None),
        }
        let _ = engine.kill(id, libc::SIGKILL);
        select! {
            recv(exited) -> exit => Ok(exit.ok()),
            recv(after(REAP_AFTER_SIGKILL)) -> _ => Err(DriverError::Docker(format!(
                "container {id} did not stop after SIGKILL"
            ))),
        }
    }

    /// Removes every container of this node (its node ID label) whose allocation `known` does not
    /// hold: left by an agent whose state no longer has its task.
    pub fn remove_unknown(&self, known: &dyn Fn(&str) -> bool) {
        let Ok(engine) = self.engine() else { return };
        let mine = format!("{}={}", container::LABEL_NODE_ID, self.node_id);
        let list = match engine.list(&mine) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("cannot list containers: {e}");
                return;
            }
        };
        for c in list {
            let alloc = c
                .labels
                .get(container::LABEL_ALLOC_ID)
                .cloned()
                .unwrap_or_default();
            if !known(&alloc) {
                log::info!(
                    "removing container {} ({}): its allocation {alloc} is not on this node",
                    c.name,
                    short_id(&c.id)
                );
                self.remove(&engine, &c.id);
            }
        }
    }
}

impl Driver for Docker {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fingerprint(&self) -> BTreeMap<String, String> {
        let Some(engine) = self.engine.lock().clone() else {
            return BTreeMap::new();
        };
        let v = engine.engine_version();
        BTreeMap::from([
            ("driver.docker".to_string(), "1".to_string()),
            ("driver.docker.version".to_string(), v.version.clone()),
            ("driver.docker.os_type".to_string(), v.os_type.clone()),
        ])
    }

    fn start(&self, spec: &StartSpec) -> Result<RunningTask, DriverError> {
        let c = spec
            .container
            .as_ref()
            .ok_or_else(|| DriverError::Docker("the task has no docker config".to_string()))?;
        let mut request = container::create(spec, c, &self.settings)
            .map_err(|e| DriverError::Docker(e.to_string()))?;
        request
            .labels
            .insert(container::LABEL_NODE_ID.into(), self.node_id.clone());
        // The log rotation a re-attaching agent applies (recover has no jobspec at hand).
        request.labels.insert(
            container::LABEL_LOGS.into(),
            container::log_label(&spec.logs),
        );
        let engine = self.engine()?;
        self.ensure_image(&engine, spec, c)?;
        let name = container::name(&spec.task_name, &spec.alloc_id);
        let id = match engine.create_container(&name, &request) {
            Ok(id) => id,
            Err(EngineError::NameInUse { .. }) => {
                // Left by a run whose end this agent never saw through (it crashed first).
                self.remove(&engine, &name);
                engine
                    .create_container(&name, &request)
                    .map_err(|e| self.failed(e))?
            }
            Err(e) => return Err(self.failed(e)),
        };
        if let Err(e) = engine.start(&id) {
            self.remove(&engine, &id);
            return Err(self.failed(e));
        }
        match self.watch(
            &engine,
            &id,
            &name,
            &spec.alloc_id,
            &spec.task_name,
            spec.logs,
        ) {
            Ok(task) => Ok(task),
            Err(e) => {
                self.remove(&engine, &id);
                Err(e)
            }
        }
    }

    fn recover(&self, handle: &TaskHandle) -> Result<Option<RunningTask>, DriverError> {
        let (id, name) = Self::check(handle)?;
        let engine = self.engine()?;
        let Some(info) = engine.inspect(id).map_err(|e| self.failed(e))? else {
            return Ok(None);
        };
        let alloc = info
            .labels
            .get(container::LABEL_ALLOC_ID)
            .cloned()
            .unwrap_or_default();
        let task = info
            .labels
            .get(container::LABEL_TASK_NAME)
            .cloned()
            .unwrap_or_default();
        let logs = container::log_config(&info.labels);
        self.watch(&engine, id, name, &alloc, &task, logs).map(Some)
    }

    fn adopt(&self, alloc_id: &str, task: &str) -> Option<RunningTask> {
        let engine = self.engine().ok()?;
        let name = container::name(task, alloc_id);
        let info = engine.inspect(&name).ok()??;
        if info
            .labels
            .get(container::LABEL_ALLOC_ID)
            .map(String::as_str)
            != Some(alloc_id)
        {
            return None;
        }
        let logs = container::log_config(&info.labels);
        self.watch(&engine, &info.id, &name, alloc_id, task, logs)
            .ok()
    }

    fn stop(
        &self,
        task: &RunningTask,
        signal: i32,
        timeout: Duration,
    ) -> Result<TaskExit, DriverError> {
        let w = Self::watched(task).ok_or_else(|| DriverError::Docker("not a container".into()))?;
        let never = crossbeam_channel::never();
        Ok(self
            .stop_container(&w.id, &w.exited, signal, timeout, &never)?
            .unwrap_or(TaskExit::Unknown))
    }

    fn stop_orphan(
        &self,
        handle: &TaskHandle,
        signal: i32,
        timeout: Duration,
        cancel: &Receiver<Never>,
    ) -> Result<bool, DriverError> {
        let Some(task) = self.recover(handle)? else {
            return Ok(true);
        };
        let w = Self::watched(&task).expect("recover gives a container");
        let exit = self.stop_container(&w.id, &w.exited, signal, timeout, cancel)?;
        let cancelled = matches!(
            cancel.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        );
        if exit.is_none() && cancelled {
            // Not destroyed: the container stays for the next agent, which stops it again.
            return Ok(false);
        }
        self.destroy(task);
        Ok(true)
    }

    fn destroy(&self, mut task: RunningTask) {
        let Attached::Container(w) = &mut task.attached else {
            return;
        };
        let engine = match self.engine() {
            Ok(e) => e,
            Err(e) => {
                log::warn!("container {}: cannot remove it: {e}", w.id);
                return;
            }
        };
        if let Ok(Some(info)) = engine.inspect(&w.id) {
            if info.state.running {
                let _ = engine.kill(&w.id, libc::SIGKILL);
                let _ = w.exited.recv_timeout(REAP_AFTER_SIGKILL);
            }
        }
        // The log stream ends by itself once the container has: read it to its end first.
        if let Some(logs) = w.logs.take() {
            if let Err(worker) = logs.join_until(std::time::Instant::now() + LOG_DRAIN) {
                w.closer.close();
                worker.join();
            }
        }
        self.remove(&engine, &w.id);
    }

    fn inspect(&self, handle: &TaskHandle) -> TaskRunState {
        let Ok((id, _)) = Self::check(handle) else {
            return TaskRunState::Unknown;
        };
        match self.engine().map(|e| e.inspect(id)) {
            Ok(Ok(Some(info))) if info.state.running => TaskRunState::Running,
            Ok(Ok(_)) => TaskRunState::Exited,
            _ => TaskRunState::Unknown,
        }
    }

    fn signal(&self, task: &RunningTask, signal: i32) -> Result<(), DriverError> {
        let w = Self::watched(task).ok_or_else(|| DriverError::Docker("not a container".into()))?;
        self.engine()?
            .kill(&w.id, signal)
            .map(|_| ())
            .map_err(|e| self.failed(e))
    }

    fn stats(&self, task: &RunningTask) -> Result<TaskStats, DriverError> {
        let w = Self::watched(task).ok_or_else(|| DriverError::Docker("not a container".into()))?;
        let s = self.engine()?.stats(&w.id).map_err(|e| self.failed(e))?;
        let cpu_delta = s.cpu.total_usage.saturating_sub(s.precpu.total_usage) as f64;
        let system_delta = s.cpu.system_usage.saturating_sub(s.precpu.system_usage) as f64;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        Ok(TaskStats {
            memory_rss_bytes: s.memory.rss,
            memory_cache_bytes: s.memory.cache,
            memory_swap_bytes: s.memory.swap,
            memory_usage_bytes: s.memory.usage,
            memory_max_usage_bytes: s.memory.max_usage,
            cpu_percent: if system_delta > 0.0 {
                cpu_delta / system_delta * cpus * 100.0
            } else {
                0.0
            },
            cpu_total_ticks: s.cpu.total_usage as f64 / 1e6,
            cpu_throttled_time: 0,
        })
    }
}
