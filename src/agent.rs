//! The agent: wires the subsystems together (state, host volumes, CSI registry, allocations and
//! their task hooks), restores what the state file holds, reloads on SIGHUP and shuts down in
//! order. The process around it (signals, logging, the API server) is [`crate::daemon`].
//!
//! Threads it owns: the state flusher, the allocation garbage collector (`alloc-gc`), the
//! periodic launcher (`periodic`) and the
//! SIGHUP reload workers (joined at shutdown); the task
//! runners (and their waiters and hooks' threads), the API workers, the volume retry thread all
//! watch the shutdown channel, a `Receiver<Never>` that disconnects when the [`StopSwitch`] trips.
//!
//! Shutdown order ([`Agent::shutdown`]): tell systemd `STOPPING=1`, trip the switch (runners leave
//! their tasks running, or stop them with kill signal and timeout when `stop_tasks_on_shutdown`;
//! plugin calls and probes are cancelled), wait for the runners, join the agent's workers and the
//! volume retry thread, close the connection to the keeper, write the state.

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::alloc::placement::{Node, NodeSource};
use crate::alloc::{AllocManager, Collector, Engine, NetworkSettings};
use crate::config::AgentConfig;
use crate::csi::registry::PluginRegistry;
use crate::csi::supervisor::{CsiPluginHook, CsiSettings};
use crate::csi::volumes::CsiVolumeManager;
use crate::driver::docker::Docker;
use crate::driver::{Drivers, KeeperClient, RawExec};
use crate::state::{DataDirLock, StateError, StateStore};
use crate::task::hooks::{HookFactory, TaskContext, TaskHook};
use crate::task::mounts::{VolumeLookup, VolumeMountHook};
use crate::task::runner::RunnerDeps;
use crate::task::taskdir::TaskDirHook;
use crate::thread::{Never, StopSwitch, Worker};
use crate::util::systemd;
use crate::volume::manager::{ManagerConfig, VolumeManager};

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot start: {0}")]
    Start(String),
}

/// Builds every task's hooks: task directory, volume mounts, and the CSI plugin supervisor for a
/// task with a `csi_plugin` block.
pub struct AgentHooks {
    pub volumes: Arc<dyn VolumeLookup>,
    pub csi: Arc<PluginRegistry>,
    pub csi_volumes: Arc<CsiVolumeManager>,
    pub csi_settings: CsiSettings,
    /// The agent's variables tasks get, as the runners have them ([`RunnerDeps::task_env`]).
    pub task_env: Arc<BTreeMap<String, String>>,
}

impl HookFactory for AgentHooks {
    fn hooks_for(&self, task: &TaskContext) -> Vec<Arc<dyn TaskHook>> {
        let mut hooks: Vec<Arc<dyn TaskHook>> = vec![
            Arc::new(TaskDirHook),
            Arc::new(VolumeMountHook {
                volumes: self.volumes.clone(),
                csi: Some(self.csi_volumes.clone()),
                task_env: self.task_env.clone(),
            }),
        ];
        if let Some(csi) = CsiPluginHook::new(task, self.csi.clone(), self.csi_settings) {
            hooks.push(Arc::new(csi));
        }
        hooks
    }
}

/// The node as placement reads it: the configuration's facts, the host's fingerprint (read once:
/// it does not change while the agent runs), and the drivers' and volumes' attributes as they
/// are now (`driver.docker` goes while the engine cannot be reached).
pub struct AgentNode {
    /// Everything but the drivers' and volumes' attributes.
    base: Node,
    drivers: Drivers,
    volumes: Arc<VolumeManager>,
    /// The host's fingerprinted resources (the capacity placement checks is in `base`).
    pub resources: crate::resources::NodeResources,
}

impl AgentNode {
    fn new(
        config: &AgentConfig,
        id: &str,
        drivers: Drivers,
        volumes: Arc<VolumeManager>,
        cgroups_version: Option<&str>,
    ) -> Self {
        let mut attributes = host_attributes(&config.name);
        if let Some(v) = cgroups_version {
            attributes.insert("os.cgroups.version".to_string(), v.to_string());
        }
        AgentNode {
            base: Node {
                id: id.to_string(),
                name: config.name.clone(),
                datacenter: config.datacenter.clone(),
                node_class: config.node_class.clone(),
                node_pool: config.node_pool.clone(),
                attributes,
                meta: config.meta.clone(),
                capacity: None,
            },
            drivers,
            volumes,
            resources: Default::default(),
        }
    }
}

impl NodeSource for AgentNode {
    fn node(&self) -> Node {
        let mut node = self.base.clone();
        node.attributes.extend(self.drivers.attributes());
        node.attributes.extend(self.volumes.attributes());
        node
    }
}

/// The attributes of the node's fingerprinted resources and address, with Nomad's names and
/// units: `cpu.totalcompute` and `cpu.frequency` in MHz, `memory.totalbytes` in bytes (after
/// `client { cpu_total_compute, memory_total_mb }` overrides, as Nomad's), and
/// `unique.network.ip-address`, the address tasks' ports are on (`NOMAD_IP_*`).
fn resource_attributes(
    r: &crate::resources::NodeResources,
    config: &AgentConfig,
) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert("cpu.totalcompute".to_string(), r.cpu_mhz.to_string());
    if r.total_cores > 0 {
        let per_core = r.cpu_mhz / u64::from(r.total_cores);
        a.insert("cpu.frequency".to_string(), per_core.to_string());
    }
    let bytes = r.memory_mb.saturating_mul(1024 * 1024);
    a.insert("memory.totalbytes".to_string(), bytes.to_string());
    a.insert(
        "unique.network.ip-address".to_string(),
        config.host_network_ip().to_string(),
    );
    a
}

/// The host's attributes, with Nomad's names and values (`cpu.arch` is Go's name of the
/// architecture, `amd64`, as jobspecs written for Nomad compare it).
fn host_attributes(name: &str) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert("kernel.name".to_string(), "linux".to_string());
    if let Ok(r) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        a.insert("kernel.version".to_string(), r.trim().to_string());
    }
    let machine = std::env::consts::ARCH;
    a.insert("kernel.arch".to_string(), machine.to_string());
    let go_arch = match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    a.insert("cpu.arch".to_string(), go_arch.to_string());
    if let Ok(n) = std::thread::available_parallelism() {
        a.insert("cpu.numcores".to_string(), n.to_string());
    }
    // `os.name` and `os.version` as Nomad reads them: the distribution's ID and version.
    if let Ok(release) = std::fs::read_to_string("/etc/os-release") {
        for (key, attr) in [("ID", "os.name"), ("VERSION_ID", "os.version")] {
            let value = release
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim().trim_matches('"'));
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                a.insert(attr.to_string(), v.to_string());
            }
        }
    }
    if let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") {
        let model = cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        });
        if let Some(model) = model.filter(|m| !m.is_empty()) {
            a.insert("cpu.modelname".to_string(), model);
        }
    }
    a.insert("unique.hostname".to_string(), name.to_string());
    a.insert(
        "nodeward.version".to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    a
}

/// How often the docker driver checks its engine (Nomad's fingerprint period).
const DOCKER_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// A running agent's parts, shared with the API.
pub struct Agent {
    pub config: AgentConfig,
    pub node_id: String,
    pub store: Arc<StateStore>,
    pub allocs: Arc<AllocManager>,
    /// The allocation garbage collector, for the API (its thread runs it every `gc_interval`).
    pub gc: Arc<Collector>,
    pub volumes: Arc<dyn VolumeLookup>,
    /// The same manager, for the volume API.
    pub host_volumes: Arc<VolumeManager>,
    pub csi: Arc<PluginRegistry>,
    /// The node's CSI volumes, for the volume API.
    pub csi_volumes: Arc<CsiVolumeManager>,
    /// The node's task drivers (fingerprinted into the node's attributes).
    pub drivers: Drivers,
    /// The docker driver, for its health checks.
    pub docker: Arc<Docker>,
    /// The node as placement sees it (`GET /v1/node/:id` shows the same).
    pub node: Arc<AgentNode>,
    /// The stats' previous readings (`GET /v1/client/allocation/:id/stats`, `/v1/client/stats`).
    pub stats: crate::resources::Samplers,
    /// The tasks' cgroups, when the agent confines them (stats are read from them).
    pub cgroups: Option<crate::cgroup::Cgroups>,
    pub started: std::time::Instant,
    /// Tripped to shut everything down.
    stop: StopSwitch,
    /// Set by the first [`Agent::shutdown`].
    shutting_down: std::sync::atomic::AtomicBool,
    pub shutdown: Receiver<Never>,
    /// Guards: the agent's own background workers (state flusher, garbage collector, SIGHUP
    /// reloads), joined at shutdown. Finished reload workers are joined as new ones start.
    workers: Mutex<Vec<Worker<()>>>,
    /// The data directory's task keeper (the parent of every task).
    pub keeper: Arc<KeeperClient>,
    /// The exclusive lock on the data directory, held for the agent's life.
    _lock: DataDirLock,
}

impl Agent {
    /// Opens the state, restores allocations and returns the agent, ready to serve. When `stop`
    /// trips meanwhile, restores in flight are cancelled and nothing is started; everything the
    /// state file held is still recorded.
    ///
    /// `lock` is the data directory's, taken first of all (a second agent on this data directory
    /// must touch nothing); the caller also binds the API's port before, so that nothing that
    /// can fail is left for after tasks are adopted or started.
    pub fn start(
        config: AgentConfig,
        fresh_state: bool,
        stop: StopSwitch,
        lock: DataDirLock,
    ) -> Result<Arc<Agent>, AgentError> {
        for warning in &config.warnings {
            log::warn!("{warning}");
        }
        // Before anything is opened: a reservation larger than the node is a config error.
        let resources = crate::resources::fingerprint(&config.data_dir, config.totals)
            .map_err(|e| AgentError::Start(e.to_string()))?;
        let capacity = crate::resources::Capacity::new(&resources, &config.reserved)
            .map_err(|e| AgentError::Start(format!("config: {e}")))?;
        let (store, state) = StateStore::open(&config.data_dir, fresh_state)?;
        // The last checks that can fail before a task is adopted or started: the disk takes a
        // state write, the keeper is installed.
        store.check_writable()?;
        let program = KeeperClient::locate();
        if !program.is_file() {
            return Err(AgentError::Start(format!(
                "the task keeper {} is missing: install {} next to nodeward",
                program.display(),
                crate::driver::process::keeper::PROGRAM
            )));
        }
        // The tasks an earlier agent left with the keeper are taken over below; connecting
        // changes nothing, and a keeper is only started with the first task.
        let keeper = KeeperClient::open(&config.data_dir, program)
            .map_err(|e| AgentError::Start(e.to_string()))?;
        let shutdown = stop.receiver();
        // Volumes are restored before allocations, which wait for the ones they mount.
        let host_volumes = VolumeManager::start(
            ManagerConfig::from_agent(&config, store.node_id()),
            store.clone(),
            &config.host_volumes,
            state.host_volumes.clone(),
            shutdown.clone(),
        )
        .map_err(|e| AgentError::Start(e.to_string()))?;
        let volumes: Arc<dyn VolumeLookup> = host_volumes.clone();
        let csi = Arc::new(PluginRegistry::new(store.node_id()));
        csi.restore(state.csi_plugins.clone());
        csi.attach_state(&store);
        // Records only: nothing is called at start. A volume's plugin is looked up when the
        // volume is used, so a plugin that comes back after the agent is found then.
        let csi_volumes = CsiVolumeManager::new(
            csi.clone(),
            store.clone(),
            state.csi_volumes.clone(),
            shutdown.clone(),
        );
        let docker = Arc::new(Docker::new(
            config.docker.clone(),
            &config.data_dir,
            store.node_id(),
        ));
        let cgroups = crate::cgroup::Cgroups::for_agent(config.cgroups, &config.cgroup_parent)
            .map(|c| c.with_reserved_cores(&config.reserved.cores));
        let cgroups_version = cgroups.as_ref().map(|c| c.version().attribute());
        let exec = crate::driver::exec::driver(keeper.clone(), config.drivers.exec.clone())
            .with_cgroups(cgroups.clone());
        let raw_exec = RawExec::new(keeper.clone()).with_cgroups(cgroups.clone());
        let drivers = Drivers::new(vec![Arc::new(raw_exec), Arc::new(exec), docker.clone()])
            .with_denied(config.drivers.denied.clone());
        // The engine is checked before anything is placed: a docker job registered right after
        // the start must not fail to place for want of a first check (it is bounded by the
        // engine call's timeout; an engine that is not there fails at once).
        let docker_healthy = docker.refresh();
        let node = Arc::new(AgentNode::new(
            &config,
            store.node_id(),
            drivers.clone(),
            host_volumes.clone(),
            cgroups_version,
        ));
        let node = {
            let mut n = Arc::into_inner(node).expect("the node was just made");
            n.base
                .attributes
                .extend(resource_attributes(&resources, &config));
            n.resources = resources;
            n.base.capacity = Some(capacity);
            Arc::new(n)
        };
        // Read once: the agent's environment does not change while it runs.
        let task_env = Arc::new(crate::task::env::passthrough(
            std::env::vars_os(),
            &config.task_env_passthrough,
        ));
        let engine = Engine {
            data_dir: config.data_dir.clone(),
            node_id: store.node_id().to_string(),
            node_name: config.name.clone(),
            deps: RunnerDeps {
                drivers: drivers.clone(),
                store: store.clone(),
                shutdown: shutdown.clone(),
                stop_tasks_on_shutdown: config.stop_tasks_on_shutdown,
                task_env: task_env.clone(),
                changed: None,
            },
            hooks: Arc::new(AgentHooks {
                volumes: volumes.clone(),
                csi: csi.clone(),
                csi_volumes: csi_volumes.clone(),
                csi_settings: CsiSettings {
                    probe_interval: config.csi_probe_interval,
                },
                task_env,
            }),
            volumes: volumes.clone(),
            csi_volumes: Some(csi_volumes.clone()),
            keeper: keeper.clone(),
            max_kill_timeout: config.max_kill_timeout,
            max_allocs: config.max_allocs,
            job_gc_children: config.gc.job_children,
            network: NetworkSettings {
                host_ip: config.host_network_ip().to_string(),
                min_dynamic_port: config.min_dynamic_port,
                max_dynamic_port: config.max_dynamic_port,
                reserved: vec![config.http_port],
            },
            node: node.clone(),
        };
        let allocs = AllocManager::new(engine, store.clone());
        store.register(allocs.clone());
        allocs.restore(&state);
        // A plugin registration whose allocation is gone has nobody to confirm it.
        let known: std::collections::HashSet<String> = allocs.alloc_ids().into_iter().collect();
        csi.retain_allocs(&|id| known.contains(id));
        // Claims of allocations that are gone or were stopped (no gate of theirs runs again):
        // what they left mounted is taken down; a live one's gate picks up its own claims.
        let live: std::collections::HashSet<String> = allocs
            .allocations()
            .into_iter()
            .filter(|a| a.desired() == crate::records::DesiredStatus::Run)
            .map(|a| a.id.clone())
            .collect();
        for id in csi_volumes.claiming_allocs() {
            if !live.contains(&id) {
                csi_volumes.unmount_alloc(&id, Box::new(|| true));
            }
        }
        let unmounter = csi_volumes
            .start_unmounter(config.data_dir.clone())
            .map_err(|e| AgentError::Start(format!("cannot start the CSI unmount thread: {e}")))?;
        store.save()?;
        let flusher_store = store.clone();
        let flusher_stop = shutdown.clone();
        let flusher = crate::thread::spawn("state-flusher", move || {
            flusher_store.run_flusher(flusher_stop)
        })
        .map_err(|e| AgentError::Start(format!("cannot start the state flusher: {e}")))?;
        // The docker engine's health, every 30 s (docker.md); at its first success, the
        // containers of allocations this node no longer has are removed. After each check the
        // allocations that wait for the node to fit them are placed if it now does (a docker
        // job queued while the engine was away starts once it is back).
        let fingerprint = {
            let (docker, allocs, stop) = (docker.clone(), allocs.clone(), shutdown.clone());
            crate::thread::spawn("docker-fingerprint", move || {
                let mut swept = false;
                let mut healthy = docker_healthy;
                loop {
                    if healthy && !swept {
                        let known: std::collections::HashSet<String> =
                            allocs.alloc_ids().into_iter().collect();
                        docker.remove_unknown(&|id| known.contains(id));
                        swept = true;
                    }
                    allocs.reevaluate();
                    crossbeam_channel::select! {
                        recv(stop) -> _ => return,
                        recv(crossbeam_channel::after(DOCKER_CHECK_INTERVAL)) -> _ => {}
                    }
                    healthy = docker.refresh();
                }
            })
            .map_err(|e| AgentError::Start(format!("cannot start the docker health check: {e}")))?
        };
        let gc = Arc::new(Collector::new(allocs.clone(), config.gc, shutdown.clone()));
        let gc_thread = gc.clone();
        let collector = crate::thread::spawn("alloc-gc", move || gc_thread.run())
            .map_err(|e| AgentError::Start(format!("cannot start the garbage collector: {e}")))?;
        // Periodic jobs' launches (alloc::periodic); schedules start from now, missed ones are
        // not replayed.
        let periodic = {
            let (allocs, stop) = (allocs.clone(), shutdown.clone());
            let clock = Arc::new(crate::alloc::periodic::SystemClock);
            crate::thread::spawn("periodic", move || {
                crate::alloc::periodic::run(allocs, clock, stop)
            })
            .map_err(|e| AgentError::Start(format!("cannot start the periodic launcher: {e}")))?
        };
        Ok(Arc::new(Agent {
            node_id: store.node_id().to_string(),
            config,
            store,
            allocs,
            gc,
            volumes,
            host_volumes,
            csi,
            csi_volumes,
            drivers,
            docker,
            node,
            stats: Default::default(),
            cgroups,
            started: std::time::Instant::now(),
            stop,
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            shutdown,
            workers: Mutex::new(vec![flusher, collector, fingerprint, periodic, unmounter]),
            keeper,
            _lock: lock,
        }))
    }

    /// The node's attributes (`GET /v1/node/:id`).
    pub fn node_attributes(&self) -> BTreeMap<String, String> {
        self.node.node().attributes
    }

    /// Reloads what can be reloaded (SIGHUP): the log level from the configuration files (unless
    /// `RUST_LOG` rules), plugin fingerprints and unavailable volumes.
    pub fn reload(&self) {
        log::info!("reloading (SIGHUP)");
        // Plugin runs may take a while; the signal loop must stay free for SIGTERM.
        let volumes = self.host_volumes.clone();
        let docker = self.docker.clone();
        let allocs = self.allocs.clone();
        let spawned = crate::thread::spawn("volume-reload", move || {
            docker.refresh();
            volumes.fingerprint();
            let report = volumes.retry_unavailable();
            log::info!(
                "reload: {} volumes ready, {} unavailable",
                report.ready.len(),
                report.unavailable.len()
            );
            // The fingerprints may have changed: place what waits for them.
            allocs.reevaluate();
        });
        match spawned {
            Ok(worker) => {
                let mut workers = self.workers.lock();
                let (done, running): (Vec<_>, Vec<_>) =
                    workers.drain(..).partition(|w| w.is_finished());
                *workers = running;
                workers.push(worker);
                drop(workers);
                done.into_iter().for_each(|w| {
                    w.join();
                });
            }
            Err(e) => log::error!("reload: cannot start the volume reload: {e}"),
        }
        if !self.config.sources.is_empty() {
            match crate::config::load(&self.config.sources, self.config.dev) {
                Ok(fresh) => crate::util::logging::set_log_level(&fresh.log_level),
                Err(e) => log::error!("reload: {e}; keeping the running configuration"),
            }
        }
    }

    /// Ends the agent's work and writes the state; tasks run on unless `stop_tasks_on_shutdown`
    /// (always with `-dev`), when they are stopped first. Idempotent.
    pub fn shutdown(&self) {
        if self
            .shutting_down
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        systemd::notify("STOPPING=1");
        if self.config.stop_tasks_on_shutdown {
            log::info!("shutting down: stopping tasks");
        } else {
            log::info!("shutting down: tasks keep running");
        }
        self.stop.trip();
        // Runners stop their tasks in parallel; each takes at most its kill_timeout and the reap.
        self.allocs
            .join_all(self.allocs.max_kill_timeout() + Duration::from_secs(35));
        // The flusher, the collector and reloads watch the shutdown channel; a reload in a plugin run ends with
        // the run, which the shutdown kills.
        let deadline = std::time::Instant::now() + Duration::from_secs(35);
        for worker in std::mem::take(&mut *self.workers.lock()) {
            if worker.join_until(deadline).is_err() {
                log::warn!("shutdown: a background worker did not end in time");
            }
        }
        if !self.host_volumes.stop(deadline) {
            log::warn!("shutdown: the volume retry thread did not end in time");
        }
        self.keeper.close();
        // The last write folds the journal into the snapshot: after a clean stop, state.json
        // alone holds the state.
        if let Err(e) = self.store.save_compacted() {
            log::error!("{e}");
        }
        log::info!("shutdown complete");
    }
}
