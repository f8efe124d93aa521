//! The volume manager: the I/O and the threads around the node's registry of host volumes
//! ([`super::registry`], the pure map update): plugin runs, state writes, restores and the retry
//! loop.
//!
//! The registry is guarded by one mutex, held only for one call into the registry: never across
//! a plugin run, a state write, a channel send or a reply. A change that needs work outside the
//! lock is made safe by a reservation: the entry is marked busy under the lock (check and change
//! under one guard), the work runs without it, and the outcome is applied under the lock again.
//! While an entry is busy no other request may change it, and its name stays taken, so the name
//! cannot be given away between the plugin run, the state write and the answer.
//!
//! Create: look up the plugin → lock: reserve the name with a `pending`, busy entry → unlock → run
//! the plugin → lock: record the outcome, mark it persisted → unlock → write the state file →
//! lock: `ready`, not busy → unlock → notify subscribers. If the write fails on a first create the
//! entry stops being persisted, the plugin's `delete` cleans up and the name is released.
//!
//! Threads (who calls what, and how it stops):
//!
//! - Callers' threads (API workers, the agent's start-up and reload workers) run create, register,
//!   delete, restore and retry; each plugin run happens on the caller's thread, a restore fans out
//!   to at most [`RESTORE_PARALLELISM`] scoped threads under an overall deadline. The shutdown
//!   channel given to [`VolumeManager::new`] disconnects when the agent shuts down: plugin runs in
//!   flight are killed and the rest of a restore ends at once.
//! - One `volume-retry` thread, started by [`VolumeManager::start`], runs
//!   [`VolumeManager::retry_unavailable`] every [`RETRY_INTERVAL`] (SIGHUP runs it too). It ends
//!   when the shutdown channel disconnects or [`VolumeManager::stop`] drops its stop sender;
//!   `stop` joins it. A volume that fails a restore or retry becomes `unavailable` with the
//!   reason; it stays in the state file.
//! - Subscribers ([`VolumeLookup::changes`]) get a coalesced `()` (a `try_send`, never blocking)
//!   after every change to the set of ready volumes; an allocation waiting for a volume selects
//!   over that, its kill and shutdown.

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::VolumeError;
use super::plugin::{self, Plugin, PluginError, Plugins, Timeouts, VolumeRequest};
use super::registry::{self, HostVolumeConfig, Registry, RestoreReport, VolumeView};
use super::spec::VolumeSpec;
use crate::config::{AgentConfig, StaticVolume};
use crate::records::{VolumeRecord, VolumeState};
use crate::state::{Key, KeyedSnapshot, Section, Snapshot, StateFile, StateStore};
use crate::task::events::now_nanos;
use crate::task::mounts::{HostVolume, VolumeLookup};
use crate::thread::{Never, Worker};

/// Restores and retries run at most this many plugins at once.
pub const RESTORE_PARALLELISM: usize = 8;
/// How long a whole restore may take before the rest become `unavailable`.
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(120);
/// How often the agent retries unavailable volumes.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(60);

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

/// The node's host volumes. Create it with [`VolumeManager::new`]; it registers itself with the
/// state store so every save includes the volumes.
///
/// Lock order: the manager's locks below are never held together, nor while the state store
/// saves (a save takes `registry` through [`Snapshot::fill`]); each is taken alone, for one read
/// or change, and released before any plugin run, disk write, channel send or join.
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
    /// Guards: the `volume-retry` thread's worker, from [`VolumeManager::start`] until
    /// [`VolumeManager::stop`] takes it (and joins it with the lock released).
    retry: Mutex<Option<Worker<()>>>,
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
        let registry = Registry::new(&config.node_id, &config.node_pool);
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
            registry: Mutex::new(registry),
            attributes: Mutex::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
            retry: Mutex::new(None),
        });
        store.register_keyed(manager.clone());
        Ok(manager)
    }

    /// Everything the agent does at start, in order: [`VolumeManager::new`], fingerprint the
    /// plugins, restore `records` (the state file's volumes; blocks until done or the restore
    /// deadline), and the `volume-retry` thread that retries unavailable volumes every
    /// [`RETRY_INTERVAL`] until `shutdown` disconnects or [`VolumeManager::stop`]. Call it before
    /// the API serves volume requests.
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
        let worker = crate::thread::spawn_stoppable(
            "volume-retry",
            move |stop| retry.run_retry_loop(RETRY_INTERVAL, &stop),
            // The panic is already logged and counted; volumes stay as they were.
            |_| {},
        )
        .map_err(|source| VolumeError::Setup {
            path: PathBuf::from("volume-retry thread"),
            source,
        })?;
        *manager.retry.lock() = Some(worker);
        Ok(manager)
    }

    /// Stops the `volume-retry` thread and joins it, waiting until `deadline` at most. True when
    /// it has ended (or never ran); false gives it back for a later call. For the agent's
    /// shutdown, after the shutdown channel disconnected: a retry in the middle of a plugin run
    /// ends when the run is killed by that.
    pub fn stop(&self, deadline: Instant) -> bool {
        let Some(worker) = self.retry.lock().take() else {
            return true;
        };
        match worker.join_until(deadline) {
            Ok(_) => true,
            Err(worker) => {
                *self.retry.lock() = Some(worker);
                false
            }
        }
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
        let new_id = uuid::Uuid::new_v4().to_string();
        let reserved = self
            .registry
            .lock()
            .reserve(spec, false, new_id, now_nanos())?;
        let (record, old) = (reserved.record, reserved.old);
        let created = match self
            .plugins
            .create(&plugin, &record.request(), &self.shutdown)
        {
            Ok(c) => c,
            Err(e) => {
                self.registry.lock().unreserve(&record.id, old.is_none());
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
        let new_id = uuid::Uuid::new_v4().to_string();
        let reserved = self
            .registry
            .lock()
            .reserve(spec, true, new_id, now_nanos())?;
        let record = VolumeRecord {
            host_path,
            ..reserved.record
        };
        self.commit(record, reserved.old, None)
    }

    /// Deletes the volume `id` (a full ID: the API resolves prefixes): its plugin's `delete`, then
    /// out of the state file and `HostVolumes`. A failing plugin keeps the volume unless `force`.
    /// Returns the ID.
    pub fn delete(&self, id: &str, force: bool) -> Result<String, VolumeError> {
        let record = self.registry.lock().begin_delete(id)?;
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
                    self.registry.lock().unreserve(&id, false);
                    return Err(e.into());
                }
                log::warn!("forced delete of host volume {id}: {e}");
            }
        }
        self.registry.lock().withdraw(&id);
        self.notify();
        if let Err(source) = self.store.save_entries([Key::HostVolume(id.clone())]) {
            // The file still holds the volume: keep it, so memory and file agree; a retry of the
            // delete is safe because plugins' deletes are idempotent.
            let status = format!("deleted, but the state file could not be written: {source}");
            self.registry.lock().withdraw_failed(&id, status);
            self.store.changed(Key::HostVolume(id.clone()));
            return Err(VolumeError::State {
                what: format!("volume {id:?} was deleted"),
                source,
            });
        }
        self.registry.lock().remove(&id);
        log::info!("deleted host volume {:?} ({id})", record.name);
        Ok(id)
    }

    fn check_placement(&self, spec: &VolumeSpec) -> Result<(), VolumeError> {
        registry::check_placement(spec, &self.plugins.node_id, &self.plugins.node_pool)
    }

    /// Records a created or registered volume: persisted under the lock, then the state write,
    /// then ready. Undoes a first create if the write fails (`plugin` cleans up after itself).
    fn commit(
        &self,
        record: VolumeRecord,
        old: Option<VolumeRecord>,
        plugin: Option<&Plugin>,
    ) -> Result<VolumeRecord, VolumeError> {
        let id = record.id.clone();
        self.registry.lock().persist(record.clone());
        if let Err(source) = self.store.save_entries([Key::HostVolume(id.clone())]) {
            match old {
                None => {
                    self.registry.lock().unpersist(&id);
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
                    self.registry.lock().remove(&id);
                }
                Some(old) => self.registry.lock().revert(old),
            }
            // Another write may have recorded the volume meanwhile: the next one records it as
            // it is now.
            self.store.changed(Key::HostVolume(id.clone()));
            return Err(VolumeError::State {
                what: format!("volume {:?} was created by its plugin", record.name),
                source,
            });
        }
        self.registry.lock().commit(&id);
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
        let (ids, duplicates) = self.registry.lock().insert_restored(records);
        for d in duplicates {
            log::error!(
                "state file has two host volumes named {:?}: {} and {}",
                d.name,
                d.first,
                d.second
            );
        }
        self.restore_entries(ids)
    }

    /// Retries every unavailable volume (SIGHUP and every [`RETRY_INTERVAL`]).
    pub fn retry_unavailable(&self) -> RestoreReport {
        let ids = self.registry.lock().take_unavailable();
        self.restore_entries(ids)
    }

    /// Calls [`VolumeManager::retry_unavailable`] every `interval` until shutdown or `stop`
    /// disconnects: the body of the `volume-retry` thread.
    fn run_retry_loop(&self, interval: Duration, stop: &Receiver<Never>) {
        let tick = crossbeam_channel::tick(interval);
        loop {
            crossbeam_channel::select! {
                recv(self.shutdown) -> _ => return,
                recv(stop) -> _ => return,
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
        let records = self.registry.lock().records_of(&ids);
        let deadline = Instant::now() + self.restore_deadline;
        let outcomes = crate::thread::parallel_map(records, self.restore_parallelism, |record| {
            let result = self.restore_one(&record, deadline);
            (record, result)
        });
        for (old, result) in &outcomes {
            if let Err(reason) = result {
                log::warn!(
                    "host volume {:?} ({}) is unavailable: {reason}",
                    old.name,
                    old.id
                );
            }
        }
        let (report, changed) = self.registry.lock().apply_restores(outcomes);
        for id in &report.ready {
            if let Some(record) = self.record(id) {
                self.warn_if_overriding(&record);
            }
        }
        if changed {
            let keys = ids.iter().map(|id| Key::HostVolume(id.clone()));
            if let Err(e) = self.store.save_entries(keys) {
                log::error!("recording restored host volumes: {e}");
            }
        }
        self.notify();
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
        self.registry.lock().host_volumes(&self.statics)
    }

    fn notify(&self) {
        self.subscribers
            .lock()
            .retain(|tx| !matches!(tx.try_send(()), Err(TrySendError::Disconnected(_))));
    }

    /// A copy of one volume's record (full ID).
    pub fn record(&self, id: &str) -> Option<VolumeRecord> {
        self.registry.lock().record(id)
    }

    /// One volume (full ID) with its state and the allocations that use it.
    pub fn view(&self, id: &str) -> Option<VolumeView> {
        self.registry.lock().view(id)
    }

    /// Every dynamic volume's ID, sorted: what an ID prefix is resolved against.
    pub fn ids(&self) -> Vec<String> {
        self.registry.lock().ids()
    }

    /// Every dynamic volume: (record, state, reason), sorted by name.
    pub fn volumes(&self) -> Vec<(VolumeRecord, VolumeState, String)> {
        self.registry.lock().volumes()
    }
}

impl Snapshot for VolumeManager {
    fn fill(&self, out: &mut StateFile) {
        out.host_volumes = self.registry.lock().persisted();
    }
}

/// Every change to what the state file holds of a volume names the volume
/// ([`StateStore::save_entries`], [`StateStore::changed`]), so a write costs one volume, however
/// many the node has.
impl KeyedSnapshot for VolumeManager {
    fn section(&self) -> Section {
        Section::HostVolumes
    }

    fn fill_keys(&self, keys: &[Key], out: &mut StateFile) {
        let ids: Vec<&str> = keys
            .iter()
            .filter_map(|k| match k {
                Key::HostVolume(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        out.host_volumes = self.registry.lock().persisted_among(&ids);
    }
}

/// What allocations see: ready dynamic volumes first (they override static ones of the same name),
/// then static ones; a signal after every change; which allocations use which volume.
impl VolumeLookup for VolumeManager {
    fn lookup(&self, name: &str) -> Option<HostVolume> {
        let ready = self.registry.lock().ready(name);
        ready.or_else(|| self.statics.get(name).cloned())
    }

    /// Receives `()` after every change to the ready volumes (coalesced: at most one is queued).
    /// Dropping the receiver unsubscribes.
    fn changes(&self) -> Receiver<()> {
        let (tx, rx) = bounded(1);
        self.subscribers.lock().push(tx);
        rx
    }

    fn claim(&self, name: &str, alloc_id: &str) {
        self.registry.lock().claim(name, alloc_id);
    }

    fn release(&self, alloc_id: &str) {
        self.registry.lock().release(alloc_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retry thread is owned: `stop` ends and joins it while the agent's shutdown channel is
    /// still open, and a second `stop` has nothing left to do.
    #[test]
    fn stop_joins_the_retry_thread() {
        let data = std::env::temp_dir().join(format!("nodeward-vm-stop-{}", uuid::Uuid::new_v4()));
        let (store, _) = StateStore::open(&data, false).unwrap();
        let (_shutdown_tx, shutdown) = bounded::<Never>(0);
        let config = ManagerConfig::new(&data, store.node_id(), "default");
        let manager =
            VolumeManager::start(config, store, &BTreeMap::new(), Vec::new(), shutdown).unwrap();
        assert!(manager.retry.lock().is_some());
        assert!(manager.stop(Instant::now() + Duration::from_secs(60)));
        assert!(manager.retry.lock().is_none());
        assert!(manager.stop(Instant::now()));
        let _ = fs::remove_dir_all(&data);
    }
}
