//! The volume manager: the node's registry of host volumes and every change to it.
//!
//! The registry (dynamic volumes by ID, and which allocations use which volume name) is guarded by
//! one mutex, held only to read or change the map: never across a plugin run, a state write or a
//! reply. A change that needs work outside the lock is made safe by a reservation: the entry is
//! marked `busy` under the lock, the work runs without it, and the outcome is applied under the lock
//! again. While an entry is busy no other request may change it, and its name stays taken, so the
//! name cannot be given away between the plugin run, the state write and the answer.
//!
//! Create: look up the plugin → lock: reserve the name with a `pending`, busy entry → unlock → run
//! the plugin → lock: record the outcome, mark it persistent → unlock → write the state file →
//! lock: `ready`, not busy → unlock → notify subscribers. If the write fails on a first create the
//! entry stops being persistent, the plugin's `delete` cleans up and the name is released.
//!
//! Restore (agent start) and [`VolumeManager::retry_unavailable`] (SIGHUP, every minute) re-run
//! `create` (or check `host_path`) for each volume on at most [`RESTORE_PARALLELISM`] threads
//! under an overall deadline; a disconnect of the shutdown channel kills plugins in flight. A
//! volume that fails becomes `unavailable` with the reason; it stays in the state file.
//!
//! Subscribers ([`VolumeLookup::changes`]) get a coalesced `()` after every change to the set of
//! ready volumes; an allocation waiting for a volume selects over that, its kill and shutdown.

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::plugin::{self, Plugin, PluginError, Plugins, Timeouts, VolumeRequest};
use super::spec::VolumeSpec;
use crate::config::{AgentConfig, StaticVolume};
use crate::records::{VolumeRecord, VolumeState};
use crate::state::{Snapshot, StateError, StateFile, StateStore};
use crate::task::events::now_nanos;
use crate::task::mounts::{HostVolume, VolumeLookup};
use crate::thread::Never;

/// Restores and retries run at most this many plugins at once.
pub const RESTORE_PARALLELISM: usize = 8;
/// How long a whole restore may take before the rest become `unavailable`.
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(120);
/// How often the agent retries unavailable volumes.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(60);

/// Why a volume request failed. The API decides what each means for an HTTP client
/// (`api::volumes`); the domain only reports it.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The request cannot be carried out as written (placement, a field for the other operation,
    /// a change to what a volume cannot change).
    #[error("{0}")]
    Invalid(String),
    #[error("volume name already exists on this node")]
    NameExists,
    /// No dynamic volume has this (full) ID.
    #[error("host volume {0:?} not found")]
    NotFound(String),
    #[error("volume {0:?} is busy: another operation on it is in progress; try again")]
    Busy(String),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("could not verify host path for {name:?}: {source}")]
    HostPath {
        name: String,
        source: std::io::Error,
    },
    #[error("{what}, but the state file could not be written: {source}")]
    State { what: String, source: StateError },
    #[error("cannot prepare {path}: {source}")]
    Setup {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl VolumeRecord {
    fn request(&self) -> VolumeRequest {
        VolumeRequest {
            volume_id: self.id.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            capacity_min: self.requested_capacity_min_bytes,
            capacity_max: self.requested_capacity_max_bytes,
            parameters: self.parameters.clone(),
        }
    }
}

/// One entry of the node's `HostVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostVolumeConfig {
    pub name: String,
    pub path: String,
    pub read_only: bool,
    /// Empty for a static volume.
    #[serde(rename = "ID")]
    pub id: String,
}

/// One dynamic volume as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeView {
    pub record: VolumeRecord,
    pub state: VolumeState,
    /// Why the volume is unavailable; empty otherwise.
    pub status: String,
    /// The allocations that use the volume's name, sorted.
    pub allocations: Vec<String>,
}

/// Where things are and how long plugins may take.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub plugin_dir: PathBuf,
    pub volumes_dir: PathBuf,
    pub node_id: String,
    pub node_pool: String,
    pub timeouts: Timeouts,
    pub restore_parallelism: usize,
    pub restore_deadline: Duration,
}

impl ManagerConfig {
    /// The defaults: `<data_dir>/host_volume_plugins`, `<data_dir>/host_volumes`, spec timeouts.
    pub fn new(data_dir: &std::path::Path, node_id: &str, node_pool: &str) -> ManagerConfig {
        ManagerConfig {
            plugin_dir: data_dir.join("host_volume_plugins"),
            volumes_dir: data_dir.join("host_volumes"),
            node_id: node_id.to_string(),
            node_pool: node_pool.to_string(),
            timeouts: Timeouts::default(),
            restore_parallelism: RESTORE_PARALLELISM,
            restore_deadline: RESTORE_DEADLINE,
        }
    }

    /// From the agent's configuration: its plugin and volumes directories and node pool.
    pub fn from_agent(config: &AgentConfig, node_id: &str) -> ManagerConfig {
        ManagerConfig {
            plugin_dir: config.host_volume_plugin_dir.clone(),
            volumes_dir: config.host_volumes_dir.clone(),
            ..ManagerConfig::new(&config.data_dir, node_id, &config.node_pool)
        }
    }
}

/// What [`VolumeManager::restore`] and [`VolumeManager::retry_unavailable`] achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub ready: Vec<String>,
    /// (volume ID, reason)
    pub unavailable: Vec<(String, String)>,
}

struct Entry {
    record: VolumeRecord,
    state: VolumeState,
    /// Why the volume is unavailable.
    status: String,
    /// A create, delete or restore is working on this entry outside the lock.
    busy: bool,
    /// The record belongs in the state file. False while a first create runs.
    persisted: bool,
}

#[derive(Default)]
struct Registry {
    /// Dynamic volumes by ID.
    volumes: BTreeMap<String, Entry>,
    /// Allocations using each volume name.
    users: BTreeMap<String, BTreeSet<String>>,
}

impl Registry {
    fn name_taken_by(&self, name: &str) -> Option<&str> {
        self.volumes
            .iter()
            .find(|(_, e)| e.record.name == name)
            .map(|(id, _)| id.as_str())
    }
}

/// The node's host volumes. Create it with [`VolumeManager::new`]; it registers itself with the
/// state store so every save includes the volumes.
pub struct VolumeManager {
    plugins: Plugins,
    store: Arc<StateStore>,
    /// Static volumes from the agent configuration, by name. Never change.
    statics: BTreeMap<String, HostVolume>,
    shutdown: Receiver<Never>,
    restore_parallelism: usize,
    restore_deadline: Duration,
    /// Guards: the dynamic volumes and their users (see the module docs).
    registry: Mutex<Registry>,
    /// Guards: the node attributes of the last fingerprint.
    attributes: Mutex<BTreeMap<String, String>>,
    /// Guards: the subscribers' senders; each send is a non-blocking `try_send`.
    subscribers: Mutex<Vec<Sender<()>>>,
}

impl VolumeManager {
    /// Creates the plugin and volumes directories if missing and registers with `store`.
    /// `shutdown` disconnects when the agent shuts down: plugin runs in flight are killed.
    pub fn new(
        config: ManagerConfig,
        store: Arc<StateStore>,
        statics: &BTreeMap<String, StaticVolume>,
        shutdown: Receiver<Never>,
    ) -> Result<Arc<VolumeManager>, VolumeError> {
        use std::os::unix::fs::DirBuilderExt;
        // Volumes must be reachable by tasks running as other users, so that directory is 0711;
        // plugins are the agent's business only.
        for (dir, mode) in [(&config.plugin_dir, 0o700), (&config.volumes_dir, 0o711)] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)
                .map_err(|source| VolumeError::Setup {
                    path: dir.clone(),
                    source,
                })?;
        }
        let manager = Arc::new(VolumeManager {
            plugins: Plugins {
                plugin_dir: config.plugin_dir,
                volumes_dir: config.volumes_dir,
                node_id: config.node_id,
                node_pool: config.node_pool,
                timeouts: config.timeouts,
            },
            store: store.clone(),
            statics: statics
                .iter()
                .map(|(name, s)| {
                    let volume = HostVolume {
                        name: name.clone(),
                        path: s.path.clone(),
                        read_only: s.read_only,
                        id: None,
                    };
                    (name.clone(), volume)
                })
                .collect(),
            shutdown,
            restore_parallelism: config.restore_parallelism.max(1),
            restore_deadline: config.restore_deadline,
            registry: Mutex::new(Registry::default()),
            attributes: Mutex::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
        });
        store.register(manager.clone());
        Ok(manager)
    }

    /// Everything the agent does at start, in order: [`VolumeManager::new`], fingerprint the
    /// plugins, restore `records` (the state file's volumes; blocks until done or the restore
    /// deadline), and a thread that retries unavailable volumes every [`RETRY_INTERVAL`] until
    /// `shutdown` disconnects. Call it before the API serves volume requests.
    pub fn start(
        config: ManagerConfig,
        store: Arc<StateStore>,
        statics: &BTreeMap<String, StaticVolume>,
        records: Vec<VolumeRecord>,
        shutdown: Receiver<Never>,
    ) -> Result<Arc<VolumeManager>, VolumeError> {
        let manager = VolumeManager::new(config, store, statics, shutdown)?;
        manager.fingerprint();
        let report = manager.restore(records);
        if !report.ready.is_empty() || !report.unavailable.is_empty() {
            log::info!(
                "host volumes restored: {} ready, {} unavailable",
                report.ready.len(),
                report.unavailable.len()
            );
        }
        let retry = manager.clone();
        crate::thread::spawn("volume-retry", move || retry.run_retry_loop(RETRY_INTERVAL))
            .map_err(|source| VolumeError::Setup {
                path: PathBuf::from("volume-retry thread"),
                source,
            })?;
        Ok(manager)
    }

    /// The plugin runner (directories, node identity, timeouts).
    pub fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    // ---- create, register, delete --------------------------------------------------------

    /// Creates a volume with its plugin, or re-runs the plugin for an existing one when the spec
    /// carries its ID. Returns the record once it is in the state file and ready.
    pub fn create(&self, spec: &VolumeSpec) -> Result<VolumeRecord, VolumeError> {
        self.check_placement(spec)?;
        if spec.host_path.is_some() {
            return Err(VolumeError::Invalid(
                "host_path is only for volume register; a created volume's path comes from its plugin"
                    .to_string(),
            ));
        }
        let plugin_id = spec.plugin_id.as_deref().ok_or_else(|| {
            VolumeError::Invalid("plugin_id is required to create a volume".to_string())
        })?;
        let plugin = self.plugins.lookup(plugin_id)?;
        self.plugins.precheck(&plugin, &spec.parameters)?;
        let (record, old) = self.reserve(spec, false)?;
        let created = match self
            .plugins
            .create(&plugin, &record.request(), &self.shutdown)
        {
            Ok(c) => c,
            Err(e) => {
                self.unreserve(&record.id, old.is_none());
                return Err(e.into());
            }
        };
        let record = VolumeRecord {
            host_path: created.path,
            capacity_bytes: created.bytes,
            ..record
        };
        self.commit(record, old, Some(&plugin))
    }

    /// Registers an existing directory as a volume (no plugin runs).
    pub fn register(&self, spec: &VolumeSpec) -> Result<VolumeRecord, VolumeError> {
        self.check_placement(spec)?;
        let host_path = spec.host_path.clone().ok_or_else(|| {
            VolumeError::Invalid("host_path is required to register a volume".to_string())
        })?;
        fs::metadata(&host_path).map_err(|source| VolumeError::HostPath {
            name: spec.name.clone(),
            source,
        })?;
        let (record, old) = self.reserve(spec, true)?;
        let record = VolumeRecord {
            host_path,
            ..record
        };
        self.commit(record, old, None)
    }

    /// Deletes a volume: its plugin's `delete`, then out of the state file and `HostVolumes`.
    /// A failing plugin keeps the volume unless `force`. `id` is a full ID (the API resolves
    /// prefixes).
    pub fn delete(&self, id: &str, force: bool) -> Result<String, VolumeError> {
        let record = {
            let mut reg = self.registry.lock();
            let entry = reg
                .volumes
                .get_mut(id)
                .ok_or_else(|| VolumeError::NotFound(id.to_string()))?;
            if entry.busy {
                return Err(VolumeError::Busy(id.to_string()));
            }
            entry.busy = true;
            entry.record.clone()
        };
        let id = record.id.clone();
        if !record.registered && !record.plugin_id.is_empty() {
            let result = self.plugins.lookup(&record.plugin_id).and_then(|plugin| {
                self.plugins.delete(
                    &plugin,
                    &record.request(),
                    &record.host_path,
                    &self.shutdown,
                )
            });
            if let Err(e) = result {
                if !force {
                    self.registry
                        .lock()
                        .volumes
                        .get_mut(&id)
                        .expect("busy")
                        .busy = false;
                    return Err(e.into());
                }
                log::warn!("forced delete of host volume {id}: {e}");
            }
        }
        {
            let mut reg = self.registry.lock();
            let entry = reg.volumes.get_mut(&id).expect("busy");
            entry.persisted = false;
            entry.state = VolumeState::Pending;
        }
        self.notify();
        if let Err(source) = self.store.save() {
            // The file still holds the volume: keep it, so memory and file agree; a retry of the
            // delete is safe because plugins' deletes are idempotent.
            let mut reg = self.registry.lock();
            let entry = reg.volumes.get_mut(&id).expect("busy");
            entry.persisted = true;
            entry.busy = false;
            entry.state = VolumeState::Unavailable;
            entry.status = format!("deleted, but the state file could not be written: {source}");
            return Err(VolumeError::State {
                what: format!("volume {id:?} was deleted"),
                source,
            });
        }
        self.registry.lock().volumes.remove(&id);
        log::info!("deleted host volume {:?} ({id})", record.name);
        Ok(id)
    }

    fn check_placement(&self, spec: &VolumeSpec) -> Result<(), VolumeError> {
        if let Some(node) = &spec.node_id {
            if node != &self.plugins.node_id {
                return Err(VolumeError::Invalid(format!(
                    "node_id {node:?} is not this node ({})",
                    self.plugins.node_id
                )));
            }
        }
        if let Some(pool) = &spec.node_pool {
            if pool != &self.plugins.node_pool {
                return Err(VolumeError::Invalid(format!(
                    "node_pool {pool:?} is not this node's pool ({:?})",
                    self.plugins.node_pool
                )));
            }
        }
        Ok(())
    }

    /// Under the lock: takes the name for a new volume (a pending, busy entry) or marks an existing
    /// one busy. Returns the record to work on and, for an existing volume, its current record.
    fn reserve(
        &self,
        spec: &VolumeSpec,
        registered: bool,
    ) -> Result<(VolumeRecord, Option<VolumeRecord>), VolumeError> {
        let now = now_nanos();
        let mut reg = self.registry.lock();
        if let Some(id) = &spec.id {
            let entry = reg
                .volumes
                .get_mut(id)
                .ok_or_else(|| VolumeError::NotFound(id.clone()))?;
            if entry.busy {
                return Err(VolumeError::Busy(id.clone()));
            }
            let old = entry.record.clone();
            if old.name != spec.name {
                return Err(VolumeError::Invalid(format!(
                    "volume {id:?} is named {:?}: a volume's name cannot be changed",
                    old.name
                )));
            }
            if old.registered != registered {
                return Err(VolumeError::Invalid(format!(
                    "volume {id:?} was {}; use volume {}",
                    if old.registered {
                        "registered"
                    } else {
                        "created"
                    },
                    if old.registered { "register" } else { "create" }
                )));
            }
            if !registered && spec.plugin_id.as_deref() != Some(old.plugin_id.as_str()) {
                return Err(VolumeError::Invalid(format!(
                    "volume {id:?} was created by plugin {:?}: its plugin cannot be changed",
                    old.plugin_id
                )));
            }
            entry.busy = true;
            let record = VolumeRecord {
                requested_capacity_min_bytes: spec.capacity_min,
                requested_capacity_max_bytes: spec.capacity_max,
                requested_capabilities: spec.capabilities.clone(),
                parameters: spec.parameters.clone(),
                plugin_id: spec.plugin_id.clone().unwrap_or_default(),
                modify_time: now,
                ..old.clone()
            };
            return Ok((record, Some(old)));
        }
        if reg.name_taken_by(&spec.name).is_some() {
            return Err(VolumeError::NameExists);
        }
        let record = VolumeRecord {
            id: uuid::Uuid::new_v4().to_string(),
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            plugin_id: spec.plugin_id.clone().unwrap_or_default(),
            node_id: self.plugins.node_id.clone(),
            node_pool: self.plugins.node_pool.clone(),
            requested_capacity_min_bytes: spec.capacity_min,
            requested_capacity_max_bytes: spec.capacity_max,
            requested_capabilities: spec.capabilities.clone(),
            parameters: spec.parameters.clone(),
            host_path: String::new(),
            capacity_bytes: 0,
            registered,
            create_time: now,
            modify_time: now,
        };
        reg.volumes.insert(
            record.id.clone(),
            Entry {
                record: record.clone(),
                state: VolumeState::Pending,
                status: String::new(),
                busy: true,
                persisted: false,
            },
        );
        Ok((record, None))
    }

    /// Gives back a reservation after a failure before anything was recorded.
    fn unreserve(&self, id: &str, new: bool) {
        let mut reg = self.registry.lock();
        if new {
            reg.volumes.remove(id);
        } else if let Some(e) = reg.volumes.get_mut(id) {
            e.busy = false;
        }
    }

    /// Records a created or registered volume: persistent under the lock, then the state write,
    /// then ready. Undoes a first create if the write fails (`plugin` cleans up after itself).
    fn commit(
        &self,
        record: VolumeRecord,
        old: Option<VolumeRecord>,
        plugin: Option<&Plugin>,
    ) -> Result<VolumeRecord, VolumeError> {
        let id = record.id.clone();
        {
            let mut reg = self.registry.lock();
            let entry = reg.volumes.get_mut(&id).expect("reserved");
            entry.record = record.clone();
            entry.persisted = true;
        }
        if let Err(source) = self.store.save() {
            match old {
                None => {
                    self.registry
                        .lock()
                        .volumes
                        .get_mut(&id)
                        .expect("reserved")
                        .persisted = false;
                    if let Some(plugin) = plugin {
                        let cleanup = self.plugins.delete(
                            plugin,
                            &record.request(),
                            &record.host_path,
                            &self.shutdown,
                        );
                        if let Err(e) = cleanup {
                            log::error!(
                                "cleaning up host volume {id} after a failed state write: {e}"
                            );
                        }
                    }
                    self.registry.lock().volumes.remove(&id);
                }
                Some(old) => {
                    let mut reg = self.registry.lock();
                    let entry = reg.volumes.get_mut(&id).expect("reserved");
                    entry.record = old;
                    entry.busy = false;
                }
            }
            return Err(VolumeError::State {
                what: format!("volume {:?} was created by its plugin", record.name),
                source,
            });
        }
        {
            let mut reg = self.registry.lock();
            let entry = reg.volumes.get_mut(&id).expect("reserved");
            entry.state = VolumeState::Ready;
            entry.status.clear();
            entry.busy = false;
        }
        self.warn_if_overriding(&record);
        log::info!(
            "host volume {:?} ({id}) ready at {}",
            record.name,
            record.host_path
        );
        self.notify();
        Ok(record)
    }

    fn warn_if_overriding(&self, record: &VolumeRecord) {
        if self.statics.contains_key(&record.name) {
            log::warn!(
                "dynamic host volume {:?} ({}) overrides the static host volume of the same name",
                record.name,
                record.id
            );
        }
    }

    // ---- restore and retry --------------------------------------------------------------

    /// Restores the volumes of the state file: each re-created (or its path checked) in parallel
    /// under the overall deadline. Call once at start, before the API answers for volumes.
    pub fn restore(&self, records: Vec<VolumeRecord>) -> RestoreReport {
        let mut ids = Vec::new();
        {
            let mut reg = self.registry.lock();
            for record in records {
                if reg.volumes.contains_key(&record.id) {
                    continue;
                }
                if let Some(other) = reg.name_taken_by(&record.name) {
                    log::error!(
                        "state file has two host volumes named {:?}: {other} and {}",
                        record.name,
                        record.id
                    );
                }
                ids.push(record.id.clone());
                reg.volumes.insert(
                    record.id.clone(),
                    Entry {
                        record,
                        state: VolumeState::Pending,
                        status: String::new(),
                        busy: true,
                        persisted: true,
                    },
                );
            }
        }
        self.restore_entries(ids)
    }

    /// Retries every unavailable volume (SIGHUP and every [`RETRY_INTERVAL`]).
    pub fn retry_unavailable(&self) -> RestoreReport {
        let ids: Vec<String> = {
            let mut reg = self.registry.lock();
            reg.volumes
                .iter_mut()
                .filter(|(_, e)| e.state == VolumeState::Unavailable && !e.busy)
                .map(|(id, e)| {
                    e.busy = true;
                    id.clone()
                })
                .collect()
        };
        self.restore_entries(ids)
    }

    /// Calls [`VolumeManager::retry_unavailable`] every `interval` until shutdown. Run it on a
    /// thread of its own (`crate::thread::spawn`).
    pub fn run_retry_loop(&self, interval: Duration) {
        let tick = crossbeam_channel::tick(interval);
        loop {
            crossbeam_channel::select! {
                recv(self.shutdown) -> _ => return,
                recv(tick) -> _ => {
                    let report = self.retry_unavailable();
                    if !report.ready.is_empty() {
                        log::info!("host volumes ready again: {}", report.ready.join(", "));
                    }
                }
            }
        }
    }

    /// Re-creates the busy entries `ids` outside the lock and applies the outcomes.
    fn restore_entries(&self, ids: Vec<String>) -> RestoreReport {
        if ids.is_empty() {
            return RestoreReport::default();
        }
        let records: Vec<VolumeRecord> = {
            let reg = self.registry.lock();
            ids.iter()
                .filter_map(|id| reg.volumes.get(id).map(|e| e.record.clone()))
                .collect()
        };
        let deadline = Instant::now() + self.restore_deadline;
        let outcomes = plugin::parallel_map(records, self.restore_parallelism, |record| {
            let result = self.restore_one(&record, deadline);
            (record, result)
        });
        let mut report = RestoreReport::default();
        let mut changed = false;
        {
            let mut reg = self.registry.lock();
            for (old, result) in outcomes {
                let Some(entry) = reg.volumes.get_mut(&old.id) else {
                    continue;
                };
                entry.busy = false;
                match result {
                    Ok(record) => {
                        changed |= record != old;
                        entry.record = record;
                        entry.state = VolumeState::Ready;
                        entry.status.clear();
                        report.ready.push(old.id.clone());
                    }
                    Err(reason) => {
                        log::warn!(
                            "host volume {:?} ({}) is unavailable: {reason}",
                            old.name,
                            old.id
                        );
                        entry.state = VolumeState::Unavailable;
                        entry.status = reason.clone();
                        report.unavailable.push((old.id.clone(), reason));
                    }
                }
            }
        }
        for id in &report.ready {
            if let Some(record) = self.record(id) {
                self.warn_if_overriding(&record);
            }
        }
        if changed {
            if let Err(e) = self.store.save() {
                log::error!("recording restored host volumes: {e}");
            }
        }
        self.notify();
        report.ready.sort();
        report.unavailable.sort();
        report
    }

    fn restore_one(
        &self,
        record: &VolumeRecord,
        deadline: Instant,
    ) -> Result<VolumeRecord, String> {
        if matches!(
            self.shutdown.try_recv(),
            Err(crossbeam_channel::TryRecvError::Disconnected)
        ) {
            return Err("restore cancelled: the agent is shutting down".to_string());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "restore did not finish within {}",
                crate::util::duration::format(self.restore_deadline)
            ));
        }
        if record.registered || record.plugin_id.is_empty() {
            return match fs::metadata(&record.host_path) {
                Ok(_) => Ok(record.clone()),
                Err(e) => Err(format!(
                    "could not verify host path for {:?}: {e}",
                    record.name
                )),
            };
        }
        let plugin = self
            .plugins
            .lookup(&record.plugin_id)
            .map_err(|e| e.to_string())?;
        let clamped = left < self.plugins.timeouts.create;
        let timeout = left.min(self.plugins.timeouts.create);
        let created = self
            .plugins
            .create_with_timeout(&plugin, &record.request(), timeout, &self.shutdown)
            .map_err(|e| match e {
                PluginError::Create {
                    volume_id,
                    plugin,
                    failure: plugin::Failure::TimedOut(_),
                } if clamped => format!(
                    "error creating volume {volume_id:?} with plugin {plugin:?}: restore did not \
                     finish within {}; the plugin was killed",
                    crate::util::duration::format(self.restore_deadline)
                ),
                e => e.to_string(),
            })?;
        Ok(VolumeRecord {
            host_path: created.path,
            capacity_bytes: created.bytes,
            ..record.clone()
        })
    }

    // ---- what the node, the allocations and the API read --------------------------------

    /// Runs every plugin's `fingerprint` (start and SIGHUP) and keeps the node attributes.
    pub fn fingerprint(&self) -> BTreeMap<String, String> {
        let attrs = self.plugins.fingerprint_all(&self.shutdown);
        *self.attributes.lock() = attrs.clone();
        attrs
    }

    /// The node attributes of the last [`VolumeManager::fingerprint`]
    /// (`plugins.host_volume.<id>.version`).
    pub fn attributes(&self) -> BTreeMap<String, String> {
        self.attributes.lock().clone()
    }

    /// The node's `HostVolumes`: static volumes, overridden by ready dynamic ones, keyed by name.
    pub fn host_volumes(&self) -> BTreeMap<String, HostVolumeConfig> {
        let mut out: BTreeMap<String, HostVolumeConfig> = self
            .statics
            .values()
            .map(|s| {
                (
                    s.name.clone(),
                    HostVolumeConfig {
                        name: s.name.clone(),
                        path: s.path.display().to_string(),
                        read_only: s.read_only,
                        id: String::new(),
                    },
                )
            })
            .collect();
        let reg = self.registry.lock();
        for e in reg.volumes.values() {
            if e.state == VolumeState::Ready {
                out.insert(
                    e.record.name.clone(),
                    HostVolumeConfig {
                        name: e.record.name.clone(),
                        path: e.record.host_path.clone(),
                        read_only: false,
                        id: e.record.id.clone(),
                    },
                );
            }
        }
        out
    }

    fn notify(&self) {
        self.subscribers
            .lock()
            .retain(|tx| !matches!(tx.try_send(()), Err(TrySendError::Disconnected(_))));
    }

    /// A copy of one volume's record (full ID).
    pub fn record(&self, id: &str) -> Option<VolumeRecord> {
        self.registry
            .lock()
            .volumes
            .get(id)
            .map(|e| e.record.clone())
    }

    /// Every dynamic volume: (record, state, reason), sorted by name.
    pub fn volumes(&self) -> Vec<(VolumeRecord, VolumeState, String)> {
        let reg = self.registry.lock();
        let mut out: Vec<_> = reg
            .volumes
            .values()
            .map(|e| (e.record.clone(), e.state, e.status.clone()))
            .collect();
        out.sort_by(|a, b| (&a.0.name, &a.0.id).cmp(&(&b.0.name, &b.0.id)));
        out
    }

    /// One volume (full ID) with its state and the allocations that use it.
    pub fn view(&self, id: &str) -> Option<VolumeView> {
        let reg = self.registry.lock();
        let e = reg.volumes.get(id)?;
        Some(VolumeView {
            record: e.record.clone(),
            state: e.state,
            status: e.status.clone(),
            allocations: reg
                .users
                .get(&e.record.name)
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
        })
    }

    /// Every dynamic volume's ID, sorted: what an ID prefix is resolved against.
    pub fn ids(&self) -> Vec<String> {
        self.registry.lock().volumes.keys().cloned().collect()
    }
}

impl Snapshot for VolumeManager {
    fn fill(&self, out: &mut StateFile) {
        let reg = self.registry.lock();
        out.host_volumes = reg
            .volumes
            .values()
            .filter(|e| e.persisted)
            .map(|e| e.record.clone())
            .collect();
    }
}

/// What allocations see: ready dynamic volumes first (they override static ones of the same name),
/// then static ones; a signal after every change; which allocations use which volume.
impl VolumeLookup for VolumeManager {
    fn lookup(&self, name: &str) -> Option<HostVolume> {
        {
            let reg = self.registry.lock();
            let ready = reg
                .volumes
                .values()
                .find(|e| e.record.name == name && e.state == VolumeState::Ready);
            if let Some(e) = ready {
                return Some(HostVolume {
                    name: name.to_string(),
                    path: PathBuf::from(&e.record.host_path),
                    read_only: false,
                    id: Some(e.record.id.clone()),
                });
            }
        }
        self.statics.get(name).cloned()
    }

    /// Receives `()` after every change to the ready volumes (coalesced: at most one is queued).
    /// Dropping the receiver unsubscribes.
    fn changes(&self) -> Receiver<()> {
        let (tx, rx) = bounded(1);
        self.subscribers.lock().push(tx);
        rx
    }

    fn claim(&self, name: &str, alloc_id: &str) {
        self.registry
            .lock()
            .users
            .entry(name.to_string())
            .or_default()
            .insert(alloc_id.to_string());
    }

    fn release(&self, alloc_id: &str) {
        let mut reg = self.registry.lock();
        reg.users.retain(|_, allocs| {
            allocs.remove(alloc_id);
            !allocs.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, name: &str) -> (String, Entry) {
        let record = VolumeRecord {
            id: id.to_string(),
            name: name.to_string(),
            namespace: "default".to_string(),
            plugin_id: "mkdir".to_string(),
            node_id: String::new(),
            node_pool: String::new(),
            requested_capacity_min_bytes: 0,
            requested_capacity_max_bytes: 0,
            requested_capabilities: Vec::new(),
            parameters: BTreeMap::new(),
            host_path: "/x".to_string(),
            capacity_bytes: 0,
            registered: false,
            create_time: 0,
            modify_time: 0,
        };
        let e = Entry {
            record,
            state: VolumeState::Ready,
            status: String::new(),
            busy: false,
            persisted: true,
        };
        (id.to_string(), e)
    }

    #[test]
    fn names_are_taken_by_ids() {
        let reg = Registry {
            volumes: [entry("abc1", "a"), entry("abc2", "b"), entry("abd", "c")]
                .into_iter()
                .collect(),
            users: BTreeMap::new(),
        };
        assert_eq!(reg.name_taken_by("b"), Some("abc2"));
        assert_eq!(reg.name_taken_by("z"), None);
    }

    #[test]
    fn records_round_trip_through_the_state_file_shape() {
        let (_, e) = entry("abc1", "a");
        let v = serde_json::to_value(&e.record).unwrap();
        assert_eq!(v["ID"], "abc1");
        assert_eq!(v["PluginID"], "mkdir");
        assert_eq!(v["HostPath"], "/x");
        let back: VolumeRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, e.record);
    }
}
