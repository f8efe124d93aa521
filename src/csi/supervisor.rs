//! The CSI plugin supervisor: a task hook for tasks with a `csi_plugin` block (csi.md).
//!
//! Protocol, per task:
//!
//! - `prestart` (runner thread): creates the socket directory
//!   `<data_dir>/client/csi/plugins/<alloc_id>/` and the staging directory
//!   `<data_dir>/client/csi/<type>/<plugin_id>/` (both 0700), removes a socket file a previous run
//!   left behind, and sets `CSI_ENDPOINT` unless the task's `env` sets it.
//! - `poststart` (runner thread): makes sure the previous run's supervisor thread has ended (it
//!   closes that thread's `retire` channel and joins it), then starts one supervisor thread for
//!   this run. So exactly one supervisor exists per task at any moment, also across crash
//!   restarts. [`CsiPluginHook::live_supervisors`] counts them.
//! - The supervisor thread runs three phases (csi.md): wait until the plugin is healthy
//!   (probe at once, then after a backoff of 100 ms doubling to 5 s until `health_timeout` from
//!   poststart; while the socket file is missing it is looked for every [`SOCKET_POLL`], 10 ms,
//!   and probed as soon as it is seen), register it in the [`PluginRegistry`], then probe every
//!   `csi_probe_interval`.
//!   It talks to the runner only through its [`RunHandle`]: `emit` for `Plugin became healthy` /
//!   `Plugin became unhealthy`, `restart` (a failure restart) when the plugin does not become
//!   healthy in time or fails to register. Every wait, including a gRPC call in flight, is a select
//!   over the run's `done`, the agent's `shutdown` and the thread's own `retire` channel: when any
//!   of them disconnects the supervisor cancels what it is doing and ends at once, without events
//!   and without asking for a restart.
//! - `exited` (runner thread, after `done` disconnected): joins the supervisor and marks the
//!   registration unhealthy, since a plugin whose task is not running serves nothing.
//! - `stop` (once): ends the supervisor; unless the agent is shutting down, deregisters the plugin
//!   and removes the socket directory. On shutdown the registration stays in the state file so a
//!   restarted agent shows the plugin until its supervisor confirms it again.
//!
//! The runner calls a task's hooks from its one thread, so `poststart`, `exited` and `stop` never
//! overlap; the `current` lock only hands the supervisor's handle over safely.

use crossbeam_channel::{after, bounded, never, select, tick, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{call_timeout, CsiClient, CsiError, MAX_CALL_TIMEOUT};
use super::registry::PluginRegistry;
use super::{ControllerInfo, CsiInfo, NodeInfo, PluginCapabilities, PluginKind, PluginRecord};
use crate::jobspec::CsiPluginConfig;
use crate::task::events::{now_nanos, now_rfc3339, TaskEvent};
use crate::task::hooks::{HookError, Interrupt, RunHandle, TaskContext, TaskHook};
use crate::thread::{Never, Worker};
use crate::util::duration;

/// The socket file a plugin creates in its socket directory.
pub const SOCKET_NAME: &str = "csi.sock";
/// The environment variable that tells a plugin where to listen.
pub const ENDPOINT_ENV: &str = "CSI_ENDPOINT";
/// The first wait between probes while waiting for a plugin; it doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_START: Duration = Duration::from_millis(100);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// While a plugin's socket file does not exist yet, how often the supervisor looks for it.
pub const SOCKET_POLL: Duration = Duration::from_millis(10);
/// The timeout of each registration call.
pub const REGISTER_TIMEOUT: Duration = MAX_CALL_TIMEOUT;
/// `HealthDescription` of a healthy plugin.
pub const HEALTHY: &str = "healthy";
/// Phase 3's description of a plugin that answered `ready = false` (Nomad's wording).
pub const UNKNOWN_REASON: &str = "Unknown Reason";

/// Agent settings for CSI supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsiSettings {
    /// How often a registered plugin is probed (`client.csi_probe_interval`).
    pub probe_interval: Duration,
}

impl Default for CsiSettings {
    fn default() -> Self {
        CsiSettings {
            probe_interval: Duration::from_secs(30),
        }
    }
}

/// `<data_dir>/client/csi/<type>/<plugin_id>`: the plugin's staging directory.
pub fn staging_dir(data_dir: &Path, config: &CsiPluginConfig) -> PathBuf {
    data_dir
        .join("client/csi")
        .join(config.plugin_type.as_str())
        .join(&config.id)
}

/// The socket path in a `CSI_ENDPOINT` value (`unix:///p`, `unix:/p` or a bare path).
pub fn endpoint_socket(endpoint: &str) -> PathBuf {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    PathBuf::from(path)
}

/// The hook of one task with a `csi_plugin` block.
pub struct CsiPluginHook {
    config: CsiPluginConfig,
    alloc_id: String,
    job_id: String,
    group: String,
    task_name: String,
    /// The task's own `CSI_ENDPOINT`, when its `env` sets one.
    task_endpoint: Option<String>,
    socket_dir: PathBuf,
    staging_dir: PathBuf,
    /// `mount_dir`, where a task in a container (docker) sees its socket directory.
    container_dir: Option<PathBuf>,
    registry: Arc<PluginRegistry>,
    settings: CsiSettings,
    /// Guards the current run's supervisor and what the last prestart/poststart chose.
    current: Mutex<Current>,
    live: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Current {
    /// The socket the next supervisor probes, chosen by prestart.
    socket: Option<PathBuf>,
    supervisor: Option<Supervisor>,
    /// The agent's shutdown channel, from the last run.
    shutdown: Option<Receiver<Never>>,
}

struct Supervisor {
    /// Dropping it tells the thread to end.
    retire: Sender<Never>,
    thread: Worker<()>,
}

impl Supervisor {
    fn end(self) {
        drop(self.retire);
        // A panic was logged and counted by the thread helper.
        self.thread.join();
    }
}

impl CsiPluginHook {
    /// The hook for `task`, or `None` when the task has no `csi_plugin` block.
    pub fn new(
        task: &TaskContext,
        registry: Arc<PluginRegistry>,
        settings: CsiSettings,
    ) -> Option<CsiPluginHook> {
        let config = task.task.csi_plugin.clone()?;
        // raw_exec tasks see host paths, so CSI_ENDPOINT must be absolute whatever data_dir is.
        let data_dir =
            std::path::absolute(&task.data_dir).unwrap_or_else(|_| task.data_dir.clone());
        Some(CsiPluginHook {
            socket_dir: crate::util::allocdir::csi_socket_dir(&data_dir, &task.alloc_id),
            staging_dir: staging_dir(&data_dir, &config),
            alloc_id: task.alloc_id.clone(),
            job_id: task.job.id.clone(),
            group: task.group.clone(),
            task_name: task.task.name.clone(),
            task_endpoint: task.task.env.get(ENDPOINT_ENV).cloned(),
            container_dir: (task.task.driver == crate::jobspec::docker::NAME)
                .then(|| PathBuf::from(&config.mount_dir)),
            config,
            registry,
            settings,
            current: Mutex::new(Current::default()),
            live: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn staging_dir(&self) -> &Path {
        &self.staging_dir
    }

    /// Supervisor threads of this task alive now: 0 or 1.
    pub fn live_supervisors(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    fn end_supervisor(&self) {
        let previous = self.current.lock().supervisor.take();
        if let Some(s) = previous {
            s.end();
        }
    }

    fn start_supervisor(&self, run: RunHandle) -> io::Result<()> {
        let socket = {
            let mut current = self.current.lock();
            current.shutdown = Some(run.shutdown().clone());
            // A re-attached run had no prestart in this agent: the socket is found the same way.
            current
                .socket
                .clone()
                .unwrap_or_else(|| match &self.task_endpoint {
                    Some(endpoint) => endpoint_socket(endpoint),
                    None => self.socket_dir.join(SOCKET_NAME),
                })
        };
        let (retire_tx, retire_rx) = bounded::<Never>(0);
        let supervision = Supervision {
            config: self.config.clone(),
            alloc_id: self.alloc_id.clone(),
            job_id: self.job_id.clone(),
            group: self.group.clone(),
            task_name: self.task_name.clone(),
            socket,
            registry: self.registry.clone(),
            probe_interval: self.settings.probe_interval,
            started: Instant::now(),
            run,
            retire: retire_rx,
        };
        let live = self.live.clone();
        live.fetch_add(1, Ordering::SeqCst);
        let name = format!("csi-{}", crate::util::short_id(&self.alloc_id));
        let spawned = crate::thread::spawn(name, move || {
            let _alive = LiveGuard(live);
            supervision.run();
        });
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                self.live.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        self.current.lock().supervisor = Some(Supervisor {
            retire: retire_tx,
            thread,
        });
        Ok(())
    }

    fn shutting_down(&self) -> bool {
        use crossbeam_channel::TryRecvError::Disconnected;
        let current = self.current.lock();
        current
            .shutdown
            .as_ref()
            .is_some_and(|s| matches!(s.try_recv(), Err(Disconnected)))
    }
}

/// Counts a supervisor as alive until its thread ends, also by a panic.
struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    // An existing directory keeps its mode through create; the plugin's socket must not be
    // reachable by other users.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The longest path a unix socket can have (`sun_path` holds 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A plugin cannot listen on a longer path: say so at setup, naming the fix, instead of letting
/// the plugin fail in its own words.
fn check_socket_path(socket: &Path) -> Result<(), HookError> {
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(HookError::new(format!(
            "CSI plugin socket path {} is {len} bytes, longer than the {MAX_SOCKET_PATH} bytes a unix socket path may have; use a shorter data_dir",
            socket.display()
        )));
    }
    Ok(())
}

impl TaskHook for CsiPluginHook {
    fn name(&self) -> &'static str {
        "csi_plugin_supervisor"
    }

    fn prestart(
        &self,
        _task: &TaskContext,
        env: &mut BTreeMap<String, String>,
        _stop: &Interrupt,
    ) -> Result<Vec<String>, HookError> {
        // Registration refuses such an id; this holds for a job recorded by an older agent too:
        // the id is joined into the staging path, which is created and chmod'ed.
        crate::jobspec::validate::csi_plugin_id(&self.config.id)
            .map_err(|e| HookError::new(e.to_string()))?;
        for dir in [&self.socket_dir, &self.staging_dir] {
            create_private_dir(dir).map_err(|e| {
                HookError::new(format!(
                    "failed to create CSI plugin directory {}: {e}",
                    dir.display()
                ))
            })?;
        }
        let own_socket = self.socket_dir.join(SOCKET_NAME);
        // Only the task's own `env` block counts: a CSI_ENDPOINT the agent itself inherited must
        // not redirect every plugin task.
        let socket = match &self.task_endpoint {
            Some(endpoint) => endpoint_socket(endpoint),
            None => {
                check_socket_path(&own_socket)?;
                // A socket file left by a run that crashed would only answer "connection
                // refused" until the new plugin replaces it; without it the first probes say
                // plainly that the socket is not there yet.
                match std::fs::remove_file(&own_socket) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => log::warn!(
                        "cannot remove stale CSI socket {}: {e}",
                        own_socket.display()
                    ),
                }
                // A containerised plugin sees the socket directory at its mount_dir (docker.md).
                let dir = self.container_dir.as_ref().unwrap_or(&self.socket_dir);
                let endpoint = format!("unix://{}", dir.join(SOCKET_NAME).display());
                env.insert(ENDPOINT_ENV.into(), endpoint);
                own_socket
            }
        };
        self.current.lock().socket = Some(socket);
        Ok(Vec::new())
    }

    fn poststart(&self, _task: &TaskContext, run: RunHandle) {
        // The previous run's supervisor ends by itself when its run ends; retiring it too makes
        // sure, whatever the runner did, that two supervisors never probe one task.
        self.end_supervisor();
        if let Err(e) = self.start_supervisor(run.clone()) {
            log::error!(
                "cannot start the CSI supervisor of plugin {} (alloc {}): {e}",
                self.config.id,
                self.alloc_id
            );
            let message =
                format!("CSI plugin failed to register: cannot start its supervisor: {e}");
            run.restart(
                vec![TaskEvent::restarting_by_hook(now_nanos(), &message, true)],
                true,
            );
        }
    }

    fn exited(&self, _task: &TaskContext) {
        self.end_supervisor();
        self.registry.set_health(
            &self.config.id,
            &self.alloc_id,
            false,
            "plugin task is not running",
            &now_rfc3339(),
        );
    }

    fn stop(&self, _task: &TaskContext) {
        self.end_supervisor();
        if self.shutting_down() {
            return;
        }
        self.registry.deregister(&self.config.id, &self.alloc_id);
        match std::fs::remove_dir_all(&self.socket_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!(
                "cannot remove CSI socket directory {}: {e}",
                self.socket_dir.display()
            ),
        }
    }
}

/// One supervisor thread's state: one run of one plugin task.
struct Supervision {
    config: CsiPluginConfig,
    alloc_id: String,
    job_id: String,
    group: String,
    task_name: String,
    socket: PathBuf,
    registry: Arc<PluginRegistry>,
    probe_interval: Duration,
    /// Poststart: the health deadline counts from here.
    started: Instant,
    run: RunHandle,
    retire: Receiver<Never>,
}

/// How a phase ended when it did not lead to the next one.
enum Ended {
    /// The run ended, the agent shuts down, or the hook retired this supervisor.
    Stopped,
    /// A restart was requested.
    Restarting,
}

impl Supervision {
    fn run(self) {
        let client = CsiClient::new(&self.socket);
        if self.run.is_reattached() {
            return self.resume(&client);
        }
        if self.wait_healthy(&client).is_err() {
            return;
        }
        if self.register(&client).is_err() {
            return;
        }
        self.watch(&client, true);
    }

    /// A run an earlier agent started and this one re-attached to (live-restore.md): probe at
    /// once, register a healthy plugin again, and never restart it for want of health (the
    /// health deadline is a start's). Events only where its health changed from what the state
    /// file recorded.
    fn resume(&self, client: &CsiClient) {
        let was_healthy = self.registry.is_healthy(&self.config.id, &self.alloc_id);
        let Some((healthy, description)) = self.probe_health(client) else {
            return;
        };
        log::info!(
            "CSI plugin {} (alloc {}) re-attached: {}",
            self.config.id,
            self.alloc_id,
            if healthy { "healthy" } else { &description }
        );
        if healthy {
            if !was_healthy {
                self.run
                    .emit(TaskEvent::plugin_healthy(now_nanos(), &self.config.id));
            }
            if self.register(client).is_err() {
                return;
            }
        } else {
            if was_healthy {
                self.run
                    .emit(TaskEvent::plugin_unhealthy(now_nanos(), &description));
            }
            self.registry.set_health(
                &self.config.id,
                &self.alloc_id,
                false,
                &description,
                &now_rfc3339(),
            );
        }
        self.watch(client, healthy);
    }

    fn stops(&self) -> [&Receiver<Never>; 3] {
        [self.run.done(), self.run.shutdown(), &self.retire]
    }

    /// Phase 1: probe until healthy or the health deadline.
    fn wait_healthy(&self, client: &CsiClient) -> Result<(), Ended> {
        let timeout = self.config.health_timeout;
        let deadline_at = self.started + timeout;
        let deadline = after(deadline_at.saturating_duration_since(Instant::now()));
        let mut backoff = BACKOFF_START;
        let mut last_error: Option<CsiError> = None;
        'probe: loop {
            let left = deadline_at.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                match client.probe(call_timeout(left), &self.stops()) {
                    Ok(()) => {
                        log::info!(
                            "CSI plugin {} (alloc {}) is healthy",
                            self.config.id,
                            self.alloc_id
                        );
                        self.run
                            .emit(TaskEvent::plugin_healthy(now_nanos(), &self.config.id));
                        return Ok(());
                    }
                    Err(e) if e.is_cancelled() => return Err(Ended::Stopped),
                    Err(e) => last_error = Some(e),
                }
            }
            // Wait for the backoff; while the socket file is missing, also look for it every
            // SOCKET_POLL (a stat, not a probe) and probe once it is there, so a plugin that
            // creates its socket between two probes is seen within SOCKET_POLL, not a backoff
            // later.
            let retry = after(backoff);
            'wait: loop {
                let look = if client.socket().exists() {
                    never()
                } else {
                    after(SOCKET_POLL)
                };
                select! {
                    recv(self.run.done()) -> _ => return Err(Ended::Stopped),
                    recv(self.run.shutdown()) -> _ => return Err(Ended::Stopped),
                    recv(self.retire) -> _ => return Err(Ended::Stopped),
                    recv(deadline) -> _ => break 'probe,
                    recv(retry) -> _ => break 'wait,
                    recv(look) -> _ => if client.socket().exists() { break 'wait },
                }
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
        let error = match &last_error {
            Some(e) => e.to_string(),
            None => "no probe completed before the deadline".to_string(),
        };
        let unhealthy = format!("Error: CSI plugin failed probe: {error}");
        let restarting = format!(
            "CSI plugin did not become healthy before configured {} health timeout",
            duration::format(timeout)
        );
        self.request_restart(vec![
            TaskEvent::plugin_unhealthy(now_nanos(), &unhealthy),
            TaskEvent::restarting_by_hook(now_nanos(), &restarting, true),
        ])
    }

    /// Asks for a failure restart unless the run is already over (a kill never races into a
    /// restart; the runner checks again on its side).
    fn request_restart(&self, events: Vec<TaskEvent>) -> Result<(), Ended> {
        if self.run.is_over() || self.retired() {
            return Err(Ended::Stopped);
        }
        log::warn!(
            "CSI plugin {} (alloc {}): {}",
            self.config.id,
            self.alloc_id,
            events
                .last()
                .map(|e| e.display_message.as_str())
                .unwrap_or_default()
        );
        self.run.restart(events, true);
        Err(Ended::Restarting)
    }

    fn retired(&self) -> bool {
        matches!(
            self.retire.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        )
    }

    /// Phase 2: ask the plugin what it is and register it.
    fn register(&self, client: &CsiClient) -> Result<(), Ended> {
        match self.fetch_records(client) {
            Ok(records) => {
                self.registry
                    .register(&self.config.id, &self.alloc_id, records);
                Ok(())
            }
            Err(e) if e.is_cancelled() => Err(Ended::Stopped),
            Err(e) => {
                let message = format!("CSI plugin failed to register: {}", register_error(&e));
                self.request_restart(vec![TaskEvent::restarting_by_hook(
                    now_nanos(),
                    &message,
                    true,
                )])
            }
        }
    }

    fn fetch_records(&self, client: &CsiClient) -> Result<Vec<PluginRecord>, CsiError> {
        let stops = self.stops();
        let info = client.get_plugin_info(REGISTER_TIMEOUT, &stops)?;
        let caps = PluginCapabilities::from_proto(
            &client.get_plugin_capabilities(REGISTER_TIMEOUT, &stops)?,
        );
        let kind = self.config.plugin_type;
        let node_info = if kind.has_node() {
            let node = client.node_get_info(REGISTER_TIMEOUT, &stops)?;
            let node_caps = client.node_get_capabilities(REGISTER_TIMEOUT, &stops)?;
            Some(NodeInfo::from_proto(&node, &node_caps))
        } else {
            None
        };
        let controller_info = if kind.has_controller() {
            let caps = client.controller_get_capabilities(REGISTER_TIMEOUT, &stops)?;
            Some(ControllerInfo::from_proto(&caps))
        } else {
            None
        };
        let now = now_rfc3339();
        let base = CsiInfo {
            plugin_id: self.config.id.clone(),
            alloc_id: self.alloc_id.clone(),
            healthy: true,
            health_description: HEALTHY.to_string(),
            update_time: now,
            provider: info.name,
            provider_version: info.vendor_version,
            requires_controller_plugin: caps.requires_controller_plugin,
            requires_topologies: caps.requires_topologies,
            controller_info: None,
            node_info: None,
        };
        let record = |kind: PluginKind, info: CsiInfo| PluginRecord {
            plugin_id: self.config.id.clone(),
            alloc_id: self.alloc_id.clone(),
            kind,
            job_id: self.job_id.clone(),
            task_group: self.group.clone(),
            task_name: self.task_name.clone(),
            socket_path: self.socket.clone(),
            info,
        };
        let mut records = Vec::new();
        if let Some(node_info) = node_info {
            let info = CsiInfo {
                node_info: Some(node_info),
                ..base.clone()
            };
            records.push(record(PluginKind::Node, info));
        }
        if let Some(controller_info) = controller_info {
            let info = CsiInfo {
                controller_info: Some(controller_info),
                ..base
            };
            records.push(record(PluginKind::Controller, info));
        }
        Ok(records)
    }

    /// One probe of a running plugin: its health and the description the registry shows.
    /// `None` when the probe was cancelled (the run ended, the agent stops).
    fn probe_health(&self, client: &CsiClient) -> Option<(bool, String)> {
        match client.probe(call_timeout(self.probe_interval), &self.stops()) {
            Ok(()) => Some((true, HEALTHY.to_string())),
            Err(e) if e.is_cancelled() => None,
            Err(CsiError::NotReady) => Some((false, UNKNOWN_REASON.to_string())),
            Err(e) => Some((false, format!("Error: {e}"))),
        }
    }

    /// Phase 3: probe every interval; report changes of health, never restart.
    fn watch(&self, client: &CsiClient, mut healthy: bool) {
        let ticks = tick(self.probe_interval);
        let mut description = if healthy {
            HEALTHY.to_string()
        } else {
            String::new()
        };
        loop {
            select! {
                recv(self.run.done()) -> _ => return,
                recv(self.run.shutdown()) -> _ => return,
                recv(self.retire) -> _ => return,
                recv(ticks) -> _ => {}
            }
            let Some((now_healthy, now_description)) = self.probe_health(client) else {
                return;
            };
            if now_healthy != healthy {
                let event = if now_healthy {
                    TaskEvent::plugin_healthy(now_nanos(), &self.config.id)
                } else {
                    TaskEvent::plugin_unhealthy(now_nanos(), &now_description)
                };
                log::info!(
                    "CSI plugin {} (alloc {}): {}",
                    self.config.id,
                    self.alloc_id,
                    event.display_message
                );
                self.run.emit(event);
            }
            if now_healthy != healthy || now_description != description {
                self.registry.set_health(
                    &self.config.id,
                    &self.alloc_id,
                    now_healthy,
                    &now_description,
                    &now_rfc3339(),
                );
            }
            healthy = now_healthy;
            description = now_description;
        }
    }
}

/// A registration error as the `Restarting` message shows it: the failed call, then gRPC's status;
/// the plugin's own contract violations speak for themselves.
fn register_error(e: &CsiError) -> String {
    match e {
        CsiError::Rpc { method, .. } => format!("{method}: {e}"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_paths() {
        assert_eq!(
            endpoint_socket("unix:///a/b.sock"),
            PathBuf::from("/a/b.sock")
        );
        assert_eq!(
            endpoint_socket("unix:/a/b.sock"),
            PathBuf::from("/a/b.sock")
        );
        assert_eq!(endpoint_socket("/a/b.sock"), PathBuf::from("/a/b.sock"));
        assert_eq!(
            crate::util::allocdir::csi_socket_dir(Path::new("/d"), "a1"),
            PathBuf::from("/d/client/csi/plugins/a1")
        );
    }

    #[test]
    fn overlong_socket_paths_are_refused_at_setup() {
        let ok = PathBuf::from(format!("/{}", "a".repeat(MAX_SOCKET_PATH - 1)));
        assert!(check_socket_path(&ok).is_ok());
        let long = PathBuf::from(format!("/{}", "a".repeat(MAX_SOCKET_PATH)));
        let err = check_socket_path(&long).unwrap_err();
        assert!(err.message.contains("use a shorter data_dir"), "{err}");
    }

    #[test]
    fn registration_errors_name_the_call() {
        let e = CsiError::Rpc {
            method: "GetPluginInfo",
            code: super::super::client::StatusCode::INTERNAL,
            message: "boom".into(),
        };
        assert_eq!(
            register_error(&e),
            "GetPluginInfo: rpc error: code = Internal desc = boom"
        );
        assert_eq!(
            register_error(&CsiError::EmptyName),
            "plugin returned empty name field"
        );
    }
}
