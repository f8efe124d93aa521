//! The agent: wires the subsystems together, restores state, serves the API, handles signals.
//!
//! Threads and how they stop:
//! - the main thread runs [`run`]: it starts everything, then waits on the signal channel;
//! - one signal thread (signal-hook) forwards SIGINT/SIGTERM/SIGHUP to the main thread; a second
//!   SIGINT/SIGTERM during shutdown exits the process at once. A first SIGINT/SIGTERM that arrives
//!   while the agent is still starting (stopping leftovers, restoring volumes through slow
//!   plugins) trips the [`StopSwitch`] itself, so the start-up is cancelled at once: restores in
//!   flight end, restored allocations are not started, the API never opens;
//! - the state flusher, the API workers, the task runners (and their waiters and hooks' threads)
//!   all watch the shutdown channel, a `Receiver<Never>` that disconnects when the agent drops its
//!   sender.
//!
//! Shutdown order: stop taking API writes, tell systemd `STOPPING=1`, disconnect the shutdown
//! channel (runners stop their tasks with kill signal and timeout, plugin calls and probes are
//! cancelled), wait for the runners, write the state, stop the API, exit 0.

use crossbeam_channel::{bounded, Receiver};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::alloc::{AllocManager, Engine};
use crate::config::AgentConfig;
use crate::csi::registry::PluginRegistry;
use crate::csi::supervisor::{CsiPluginHook, CsiSettings};
use crate::driver::RawExec;
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
    pub csi_settings: CsiSettings,
}

impl HookFactory for AgentHooks {
    fn hooks_for(&self, task: &TaskContext) -> Vec<Arc<dyn TaskHook>> {
        let mut hooks: Vec<Arc<dyn TaskHook>> = vec![
            Arc::new(TaskDirHook),
            Arc::new(VolumeMountHook {
                volumes: self.volumes.clone(),
            }),
        ];
        if let Some(csi) = CsiPluginHook::new(task, self.csi.clone(), self.csi_settings) {
            hooks.push(Arc::new(csi));
        }
        hooks
    }
}

/// A running agent's parts, shared with the API.
pub struct Agent {
    pub config: AgentConfig,
    pub node_id: String,
    pub store: Arc<StateStore>,
    pub allocs: Arc<AllocManager>,
    pub volumes: Arc<dyn VolumeLookup>,
    /// The same manager, for the volume API.
    pub host_volumes: Arc<VolumeManager>,
    pub csi: Arc<PluginRegistry>,
    pub started: std::time::Instant,
    /// Tripped to shut everything down.
    stop: StopSwitch,
    /// Set by the first [`Agent::shutdown`].
    shutting_down: std::sync::atomic::AtomicBool,
    pub shutdown: Receiver<Never>,
    /// Guards: the agent's own background workers (state flusher, SIGHUP reloads), joined at
    /// shutdown. Finished reload workers are joined as new ones start.
    workers: Mutex<Vec<Worker<()>>>,
    /// The exclusive lock on the data directory, held for the agent's life.
    _lock: DataDirLock,
}

impl Agent {
    /// Opens the state, restores allocations and returns the agent, ready to serve. When `stop`
    /// trips meanwhile, restores in flight are cancelled and nothing is started; everything the
    /// state file held is still recorded.
    pub fn start(
        config: AgentConfig,
        fresh_state: bool,
        stop: StopSwitch,
    ) -> Result<Arc<Agent>, AgentError> {
        // First of all: a second agent on this data directory must touch nothing.
        let lock = DataDirLock::acquire(&config.data_dir)?;
        let (store, state) = StateStore::open(&config.data_dir, fresh_state)?;
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
        let engine = Engine {
            data_dir: config.data_dir.clone(),
            node_id: store.node_id().to_string(),
            node_name: config.name.clone(),
            deps: RunnerDeps {
                driver: Arc::new(RawExec),
                store: store.clone(),
                shutdown: shutdown.clone(),
            },
            hooks: Arc::new(AgentHooks {
                volumes: volumes.clone(),
                csi: csi.clone(),
                csi_settings: CsiSettings {
                    probe_interval: config.csi_probe_interval,
                },
            }),
            volumes: volumes.clone(),
        };
        let allocs = AllocManager::new(engine, store.clone());
        store.register(allocs.clone());
        allocs.restore(&state);
        // A plugin registration whose allocation is gone has nobody to confirm it.
        let known: std::collections::HashSet<String> = allocs.alloc_ids().into_iter().collect();
        csi.retain_allocs(&|id| known.contains(id));
        store.save()?;
        let flusher_store = store.clone();
        let flusher_stop = shutdown.clone();
        let flusher = crate::thread::spawn("state-flusher", move || {
            flusher_store.run_flusher(flusher_stop)
        })
        .map_err(|e| AgentError::Start(format!("cannot start the state flusher: {e}")))?;
        Ok(Arc::new(Agent {
            node_id: store.node_id().to_string(),
            config,
            store,
            allocs,
            volumes,
            host_volumes,
            csi,
            started: std::time::Instant::now(),
            stop,
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            shutdown,
            workers: Mutex::new(vec![flusher]),
            _lock: lock,
        }))
    }

    /// The node's attributes (`GET /v1/node/:id`).
    pub fn node_attributes(&self) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        a.insert("kernel.name".to_string(), "linux".to_string());
        if let Ok(r) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
            a.insert("kernel.version".to_string(), r.trim().to_string());
        }
        a.insert("cpu.arch".to_string(), std::env::consts::ARCH.to_string());
        if let Ok(n) = std::thread::available_parallelism() {
            a.insert("cpu.numcores".to_string(), n.to_string());
        }
        a.insert("unique.hostname".to_string(), self.config.name.clone());
        a.insert(
            "nodeward.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        );
        a.insert("driver.raw_exec".to_string(), "1".to_string());
        a.extend(self.host_volumes.attributes());
        a
    }

    /// Reloads what can be reloaded (SIGHUP): the log level from the configuration files (unless
    /// `RUST_LOG` rules), plugin fingerprints and unavailable volumes.
    pub fn reload(&self) {
        log::info!("reloading (SIGHUP)");
        // Plugin runs may take a while; the signal loop must stay free for SIGTERM.
        let volumes = self.host_volumes.clone();
        let spawned = crate::thread::spawn("volume-reload", move || {
            volumes.fingerprint();
            let report = volumes.retry_unavailable();
            log::info!(
                "reload: {} volumes ready, {} unavailable",
                report.ready.len(),
                report.unavailable.len()
            );
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
                Ok(fresh) => set_log_level(&fresh.log_level),
                Err(e) => log::error!("reload: {e}; keeping the running configuration"),
            }
        }
    }

    /// Stops every task and writes the state. Idempotent.
    pub fn shutdown(&self) {
        if self
            .shutting_down
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        systemd::notify("STOPPING=1");
        log::info!("shutting down: stopping tasks");
        self.stop.trip();
        // Runners stop their tasks in parallel; each takes at most its kill_timeout and the reap.
        self.allocs
            .join_all(self.allocs.max_kill_timeout() + Duration::from_secs(35));
        // The flusher and reloads watch the shutdown channel; a reload in a plugin run ends with
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
        if let Err(e) = self.store.save() {
            log::error!("{e}");
        }
        log::info!("shutdown complete");
    }
}

/// Marks the agent process started again by [`tune_allocator`]; holds the caller's own
/// `GLIBC_TUNABLES` (empty when it had none), restored before any task inherits the environment.
const REEXEC_MARK: &str = "NODEWARD_ORIGINAL_GLIBC_TUNABLES";

/// glibc's malloc suits a few busy threads; the agent runs two mostly idle threads per task. Each
/// thread's cache of freed blocks (tcache) and a spread over up to eight arenas per core kept
/// about 14 KB per task of freed memory out of reach (measured: 1000 tasks, heap 34 MB -> 19 MB).
/// glibc reads these tunables only when a process starts, so the agent starts itself once more
/// with them set (same PID, arguments and environment), then puts the environment back as it
/// was, so tasks never see the tunables.
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    {
        use std::os::unix::process::CommandExt;
        const TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2";
        if let Some(original) = std::env::var_os(REEXEC_MARK) {
            // Second start: the tunables are in force; restore what the caller had.
            std::env::remove_var(REEXEC_MARK);
            if original.is_empty() {
                std::env::remove_var("GLIBC_TUNABLES");
            } else {
                std::env::set_var("GLIBC_TUNABLES", original);
            }
            return;
        }
        let original = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
        let mut tunables = original.clone();
        if !tunables.is_empty() {
            tunables.push(":");
        }
        tunables.push(TUNABLES);
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_default();
        // exec only returns on failure; the agent then runs with glibc's defaults.
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .env(REEXEC_MARK, original)
            .exec();
        eprintln!("note: running with default malloc settings ({err})");
    }
}

/// Sets up logging: the configured level, unless `RUST_LOG` says otherwise. Logs go to stderr
/// (the journal, under systemd).
pub fn init_logging(level: &str) {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = env_logger::Builder::from_default_env()
            .format_timestamp_millis()
            .try_init();
        return;
    }
    // nodeward's own records pass the filter at every level; the level in force is the global
    // maximum, which SIGHUP can change.
    let _ = env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("nodeward", log::LevelFilter::Trace)
        .format_timestamp_millis()
        .try_init();
    set_log_level(level);
}

fn set_log_level(level: &str) {
    if std::env::var_os("RUST_LOG").is_some() {
        return;
    }
    let filter = level.parse().unwrap_or(log::LevelFilter::Info);
    log::set_max_level(filter);
}

/// Runs the agent until SIGINT or SIGTERM. Returns once the shutdown is complete.
pub fn run(config: AgentConfig, fresh_state: bool) -> Result<(), AgentError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    init_logging(&config.log_level);
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| AgentError::Start(format!("cannot install signal handlers: {e}")))?;
    let (sig_tx, sig_rx) = bounded::<i32>(16);
    let signal_handle = signals.handle();
    let stop = StopSwitch::default();
    let signal_stop = stop.clone();
    let signal_thread = crate::thread::spawn("signals", move || {
        let mut stopping = false;
        for sig in signals.forever() {
            if sig != SIGHUP {
                if stopping {
                    eprintln!("second signal received: exiting at once");
                    std::process::exit(1);
                }
                stopping = true;
                if signal_stop.trip_if_starting() {
                    log::warn!("signal {sig} received while starting: cancelling the start-up");
                }
            }
            let _ = sig_tx.send(sig);
        }
    })
    .map_err(|e| AgentError::Start(format!("cannot start the signal thread: {e}")))?;

    if config.dev {
        log::info!("dev mode: data in {}", config.data_dir.display());
    }
    let agent = Agent::start(config, fresh_state, stop.clone())?;
    if !stop.mark_started() {
        log::info!("start-up cancelled by a stop signal");
        agent.shutdown();
        signal_handle.close();
        signal_thread.join();
        return Ok(());
    }
    let api = crate::api::serve(agent.clone()).map_err(|e| AgentError::Start(e.to_string()))?;
    log::info!(
        "nodeward agent started: node {} ({}), API on http://{}",
        agent.node_id,
        agent.config.name,
        api.local_addr()
    );
    systemd::notify("READY=1");
    for sig in sig_rx.iter() {
        if sig == SIGHUP {
            agent.reload();
            continue;
        }
        log::info!("received signal {sig}");
        break;
    }
    api.stop_writes();
    agent.shutdown();
    api.stop();
    signal_handle.close();
    signal_thread.join();
    Ok(())
}
