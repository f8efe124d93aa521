//! The CSI volume manager: the plugin calls and state writes around the node's registry of CSI
//! volumes ([`super::registry`], the pure map update).
//!
//! The registry is guarded by one mutex, held only for one call into the registry: never across
//! a plugin call, a state write or a reply. A change that needs work outside the lock is made safe
//! by a reservation, as for host volumes: the entry is marked busy under the lock (check and
//! change under one guard), the work runs without it, and the outcome is applied under the lock
//! again. While an entry is busy no other request may change it, so its ID cannot be taken or
//! dropped between the plugin call, the state write and the answer.
//!
//! - Create: plugin lookup (a healthy controller with `CREATE_DELETE_VOLUME`) → lock: reserve the
//!   ID → unlock → `CreateVolume` → lock: persist → unlock → state write → lock: commit. If the
//!   write fails, the plugin's `DeleteVolume` undoes the create and the ID is released.
//! - Register: the plugin must be registered on this node; when it has a controller,
//!   `ValidateVolumeCapabilities` must confirm the capabilities. Then as create, without
//!   `CreateVolume`.
//! - Delete: lock: mark busy (refused while claimed: `volume in use: <id>`) → `DeleteVolume` → the
//!   write that removes it → removed. A failing plugin keeps the volume, so the delete can be
//!   retried; a failing write keeps it too (the file still holds it).
//! - Deregister: as delete, without the plugin; `force` drops a claimed volume too.
//! - Claims: [`CsiVolumeManager::claim`] and [`CsiVolumeManager::release`] for the allocation
//!   start and stop paths; a claim is on disk before it is answered.
//!
//! Threads: none of its own. Callers' threads (API workers) make the plugin calls, each with
//! [`VOLUME_CALL_TIMEOUT`] and cancelled when the agent's shutdown channel disconnects.

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use super::error::CsiVolumeError;
use super::registry::{Claimed, CsiVolumeView, Registry};
use super::request;
use super::spec::CsiVolumeSpec;
use crate::csi::client::{CsiClient, VOLUME_CALL_TIMEOUT};
use crate::csi::registry::PluginRegistry;
use crate::records::{CsiClaimRecord, CsiVolumeRecord, PluginRecord, Topology};
use crate::state::{Key, KeyedSnapshot, Section, Snapshot, StateFile, StateStore};
use crate::task::events::now_nanos;
use crate::thread::Never;

/// The node's CSI volumes. Create it with [`CsiVolumeManager::new`]; it registers itself with the
/// state store so that every save includes the volumes.
pub struct CsiVolumeManager {
    pub(super) plugins: Arc<PluginRegistry>,
    store: Arc<StateStore>,
    pub(super) shutdown: Receiver<Never>,
    pub(super) call_timeout: Duration,
    /// Guards: the node's CSI volumes and their claims (see the module docs). Taken alone, for
    /// one read or change, and released before any plugin call, state write or reply; a save takes
    /// it through [`Snapshot::fill`].
    pub(super) registry: Mutex<Registry>,
    /// Guards: the allocations whose volumes the `csi-unmount` thread takes down ([`super::attach`]).
    pub(super) unmounts: Mutex<super::attach::UnmountQueue>,
    pub(super) unmount_wake: (Sender<()>, Receiver<()>),
}

impl CsiVolumeManager {
    /// The manager of the volumes `records` (the state file's), whose plugins are found in
    /// `plugins`. `shutdown` disconnects when the agent shuts down: a plugin call in flight is
    /// cancelled.
    pub fn new(
        plugins: Arc<PluginRegistry>,
        store: Arc<StateStore>,
        records: Vec<CsiVolumeRecord>,
        shutdown: Receiver<Never>,
    ) -> Arc<CsiVolumeManager> {
        let mut registry = Registry::new();
        registry.restore(records);
        let manager = Arc::new(CsiVolumeManager {
            plugins,
            store: store.clone(),
            shutdown,
            call_timeout: VOLUME_CALL_TIMEOUT,
            registry: Mutex::new(registry),
            unmounts: Mutex::new(Default::default()),
            unmount_wake: crossbeam_channel::bounded(1),
        });
        store.register_keyed(manager.clone());
        manager
    }

    // ---- create, register, delete, deregister -------------------------------------------

    /// Creates a volume with its plugin's `CreateVolume` and records it. Returns it once it is
    /// in the state file.
    pub fn create(&self, spec: &CsiVolumeSpec) -> Result<CsiVolumeView, CsiVolumeError> {
        if spec.external_id.is_some() {
            return Err(CsiVolumeError::Invalid(
                "external_id is only for volume register: a created volume's ID comes from its plugin"
                    .into(),
            ));
        }
        if !spec.context.is_empty() {
            return Err(CsiVolumeError::Invalid(
                "context is only for volume register: a created volume's context comes from its plugin"
                    .into(),
            ));
        }
        let controller = self.controller(&spec.plugin_id, "creating volumes")?;
        let record = new_record(spec, Some(&controller), false);
        self.registry.lock().reserve(record.clone())?;
        let client = CsiClient::new(&controller.socket_path);
        let created = client
            .create_volume(&request::create(spec), self.call_timeout, &[&self.shutdown])
            .map_err(|source| CsiVolumeError::Plugin {
                doing: "creating",
                id: spec.id.clone(),
                plugin: spec.plugin_id.clone(),
                source,
            });
        let created = match created {
            Ok(c) => c.volume.unwrap_or_default(),
            Err(e) => {
                self.registry.lock().unreserve(&spec.id);
                return Err(e);
            }
        };
        let record = CsiVolumeRecord {
            external_id: created.volume_id,
            capacity: u64::try_from(created.capacity_bytes).unwrap_or(0),
            context: created.volume_context,
            topologies: created
                .accessible_topology
                .into_iter()
                .map(|t| Topology {
                    segments: t.segments,
                })
                .collect(),
            ..record
        };
        self.commit(record, Some(&client))
    }

    /// Records a volume that exists already (`external_id`), after its plugin's controller, if it
    /// has one, confirmed the capabilities.
    pub fn register(&self, spec: &CsiVolumeSpec) -> Result<CsiVolumeView, CsiVolumeError> {
        if spec.external_id.is_none() {
            return Err(CsiVolumeError::Invalid(
                "external_id is required to register a volume: the plugin's ID of the existing storage"
                    .into(),
            ));
        }
        let controller = if self.plugins.controllers(&spec.plugin_id).is_empty() {
            // A plugin without a controller (a node plugin) has nothing to validate with.
            if !self.plugins.plugin_ids().contains(&spec.plugin_id) {
                return Err(CsiVolumeError::NoPlugin(spec.plugin_id.clone()));
            }
            None
        } else {
            Some(self.controller(&spec.plugin_id, "")?)
        };
        let mut record = new_record(spec, controller.as_ref(), true);
        if controller.is_none() {
            if let Some(summary) = self.plugins.summary(&spec.plugin_id) {
                record.provider = summary.provider;
                record.provider_version = summary.version;
            }
        }
        self.registry.lock().reserve(record.clone())?;
        if let Some(controller) = &controller {
            if let Err(e) = self.validate(&record, controller) {
                self.registry.lock().unreserve(&record.id);
                return Err(e);
            }
        }
        self.commit(record, None)
    }

    fn validate(
        &self,
        record: &CsiVolumeRecord,
        controller: &PluginRecord,
    ) -> Result<(), CsiVolumeError> {
        let answer = CsiClient::new(&controller.socket_path)
            .validate_volume_capabilities(
                &request::validate(record),
                self.call_timeout,
                &[&self.shutdown],
            )
            .map_err(|source| CsiVolumeError::Plugin {
                doing: "validating",
                id: record.id.clone(),
                plugin: record.plugin_id.clone(),
                source,
            })?;
        if answer.confirmed.is_none() {
            return Err(CsiVolumeError::NotConfirmed {
                id: record.id.clone(),
                plugin: record.plugin_id.clone(),
                message: if answer.message.is_empty() {
                    "the plugin gave no reason".into()
                } else {
                    answer.message
                },
            });
        }
        Ok(())
    }

    /// Deletes the volume `id` (a full ID) with its plugin's `DeleteVolume`, then forgets it.
    /// Refused while an allocation claims it. Returns the ID.
    pub fn delete(&self, id: &str) -> Result<String, CsiVolumeError> {
        let record = self.registry.lock().begin_removal(id, false)?;
        let deleted = self
            .controller(&record.plugin_id, "deleting volumes")
            .and_then(|controller| {
                CsiClient::new(&controller.socket_path)
                    .delete_volume(
                        &request::delete(&record),
                        self.call_timeout,
                        &[&self.shutdown],
                    )
                    .map_err(|source| CsiVolumeError::Plugin {
                        doing: "deleting",
                        id: record.id.clone(),
                        plugin: record.plugin_id.clone(),
                        source,
                    })
            });
        if let Err(e) = deleted {
            self.registry.lock().cancel_removal(id);
            return Err(e);
        }
        self.finish_removal(&record, "deleted by its plugin")?;
        log::info!(
            "deleted CSI volume {id} ({} of plugin {})",
            record.external_id,
            record.plugin_id
        );
        Ok(record.id)
    }

    /// Forgets the volume `id` without calling its plugin: the storage stays. Refused while an
    /// allocation claims it, unless `force`. Returns the ID.
    pub fn deregister(&self, id: &str, force: bool) -> Result<String, CsiVolumeError> {
        let record = self.registry.lock().begin_removal(id, force)?;
        if !record.claims.is_empty() {
            let allocs: Vec<&str> = record.claims.iter().map(|c| c.alloc_id.as_str()).collect();
            log::warn!(
                "forced deregister of CSI volume {id}, still claimed by {}",
                allocs.join(", ")
            );
        }
        self.finish_removal(&record, "deregistered")?;
        log::info!("deregistered CSI volume {id}");
        Ok(record.id)
    }

    /// The write that removes a volume marked for removal; if it fails the file still holds the
    /// volume, and so does the registry.
    fn finish_removal(&self, record: &CsiVolumeRecord, done: &str) -> Result<(), CsiVolumeError> {
        let id = &record.id;
        self.registry.lock().withdraw(id);
        if let Err(source) = self.store.save_entries([Key::CsiVolume(id.clone())]) {
            self.registry.lock().withdraw_failed(id);
            self.store.changed(Key::CsiVolume(id.clone()));
            return Err(CsiVolumeError::State {
                what: format!("volume {id:?} was {done}"),
                source,
            });
        }
        self.registry.lock().remove(id);
        Ok(())
    }

    /// Records a created or registered volume: persisted under the lock, then the state write,
    /// then visible. If the write fails, a created volume is deleted again with `client`.
    fn commit(
        &self,
        record: CsiVolumeRecord,
        client: Option<&CsiClient>,
    ) -> Result<CsiVolumeView, CsiVolumeError> {
        let id = record.id.clone();
        self.registry.lock().persist(record.clone());
        if let Err(source) = self.store.save_entries([Key::CsiVolume(id.clone())]) {
            self.registry.lock().withdraw(&id);
            if let Some(client) = client {
                let undo = client.delete_volume(
                    &request::delete(&record),
                    self.call_timeout,
                    &[&self.shutdown],
                );
                if let Err(e) = undo {
                    log::error!(
                        "deleting CSI volume {id} ({}) again after a failed state write: {e}",
                        record.external_id
                    );
                }
            }
            self.registry.lock().remove(&id);
            // Another write may have recorded the volume meanwhile: the next one drops it.
            self.store.changed(Key::CsiVolume(id.clone()));
            return Err(CsiVolumeError::State {
                what: format!(
                    "volume {id:?} was {}",
                    if client.is_some() {
                        "created by its plugin"
                    } else {
                        "registered"
                    }
                ),
                source,
            });
        }
        self.registry.lock().commit(&id);
        log::info!(
            "CSI volume {id} ({} of plugin {}) {}",
            record.external_id,
            record.plugin_id,
            if record.registered {
                "registered"
            } else {
                "created"
            }
        );
        Ok(self.view_of(record))
    }

    /// The healthy controller registration of `plugin_id` that can do `what` (`""`: anything).
    fn controller(
        &self,
        plugin_id: &str,
        what: &'static str,
    ) -> Result<PluginRecord, CsiVolumeError> {
        let controllers = self.plugins.controllers(plugin_id);
        let Some(best) = controllers.into_iter().next() else {
            if self.plugins.plugin_ids().iter().any(|p| p == plugin_id) {
                return Err(CsiVolumeError::NoController {
                    plugin: plugin_id.to_string(),
                    reason: "it runs as a node plugin only".into(),
                });
            }
            return Err(CsiVolumeError::NoPlugin(plugin_id.to_string()));
        };
        if !best.info.healthy {
            let reason = match best.info.health_description.as_str() {
                "" => "not healthy".to_string(),
                d => d.to_string(),
            };
            return Err(CsiVolumeError::NoController {
                plugin: plugin_id.to_string(),
                reason,
            });
        }
        let can = best
            .info
            .controller_info
            .as_ref()
            .is_some_and(|c| c.supports_create_delete);
        if !what.is_empty() && !can {
            return Err(CsiVolumeError::Unsupported {
                plugin: plugin_id.to_string(),
                what,
            });
        }
        Ok(best)
    }

    // ---- claims -----------------------------------------------------------------------------

    /// Claims the volume `id` for an allocation (Nomad's rules: [`Registry::claim`]); the claim
    /// is in the state file before this returns. An error says why the allocation must wait.
    pub fn claim(&self, id: &str, claim: CsiClaimRecord) -> Result<(), CsiVolumeError> {
        let (before, claimed) = {
            let mut registry = self.registry.lock();
            let before = registry.get(id).map(|r| r.claims);
            (before, registry.claim(id, claim)?)
        };
        if claimed == Claimed::Held {
            return Ok(());
        }
        if let Err(source) = self.store.save_entries([Key::CsiVolume(id.to_string())]) {
            if let Some(claims) = before {
                self.registry.lock().set_claims(id, claims);
            }
            self.store.changed(Key::CsiVolume(id.to_string()));
            return Err(CsiVolumeError::State {
                what: format!("volume {id:?} could be claimed"),
                source,
            });
        }
        Ok(())
    }

    /// Records in `alloc_id`'s claim on `id` that `step` of its mount sequence succeeded (with
    /// `ControllerPublishVolume`'s publish context), on disk before this returns: an agent
    /// restarted after it neither repeats the step nor forgets to undo it. An error when the
    /// allocation holds no claim on the volume, or the write failed (the step is then recorded in
    /// memory only, and the flusher retries the write).
    pub fn record_step(
        &self,
        id: &str,
        alloc_id: &str,
        step: super::mounts::Step,
        publish_context: Option<std::collections::BTreeMap<String, String>>,
    ) -> Result<(), CsiVolumeError> {
        if !self
            .registry
            .lock()
            .record_step(id, alloc_id, step, publish_context)
        {
            return Err(CsiVolumeError::NotFound(id.to_string()));
        }
        self.store
            .save_entries([Key::CsiVolume(id.to_string())])
            .map_err(|source| {
                self.store.changed(Key::CsiVolume(id.to_string()));
                CsiVolumeError::State {
                    what: format!("{step:?} of volume {id:?} for allocation {alloc_id} succeeded"),
                    source,
                }
            })
    }

    /// Releases an allocation's claim on the volume `id`. A failed write is left to the flusher:
    /// the claim is gone in memory and the next write records that.
    pub fn release(&self, id: &str, alloc_id: &str) {
        if !self.registry.lock().unclaim(id, alloc_id) {
            return;
        }
        if let Err(e) = self.store.save_entries([Key::CsiVolume(id.to_string())]) {
            log::warn!("releasing the claim of {alloc_id} on CSI volume {id}: {e}");
        }
    }

    // ---- reads ------------------------------------------------------------------------------

    fn view_of(&self, record: CsiVolumeRecord) -> CsiVolumeView {
        let plugin = self.plugins.summary(&record.plugin_id);
        CsiVolumeView { record, plugin }
    }

    /// One volume (a full ID).
    pub fn view(&self, id: &str) -> Option<CsiVolumeView> {
        let record = self.registry.lock().get(id)?;
        Some(self.view_of(record))
    }

    /// Every volume, ordered by ID.
    pub fn views(&self) -> Vec<CsiVolumeView> {
        let records = self.registry.lock().records();
        records.into_iter().map(|r| self.view_of(r)).collect()
    }

    /// Every volume's ID, sorted: what an ID prefix is resolved against.
    pub fn ids(&self) -> Vec<String> {
        self.registry.lock().ids()
    }
}

/// A new volume's record from its spec; `controller` gives the provider.
fn new_record(
    spec: &CsiVolumeSpec,
    controller: Option<&PluginRecord>,
    registered: bool,
) -> CsiVolumeRecord {
    let now = now_nanos();
    CsiVolumeRecord {
        id: spec.id.clone(),
        name: spec.name.clone(),
        external_id: spec.external_id.clone().unwrap_or_default(),
        namespace: spec.namespace.clone(),
        plugin_id: spec.plugin_id.clone(),
        provider: controller
            .map(|c| c.info.provider.clone())
            .unwrap_or_default(),
        provider_version: controller
            .map(|c| c.info.provider_version.clone())
            .unwrap_or_default(),
        requested_capacity_min: spec.capacity_min,
        requested_capacity_max: spec.capacity_max,
        capacity: 0,
        requested_capabilities: spec.capabilities.clone(),
        mount_options: spec.mount_options.clone(),
        secrets: spec.secrets.clone(),
        parameters: spec.parameters.clone(),
        context: spec.context.clone(),
        topologies: Vec::new(),
        requested_topologies: spec.topology_request.clone(),
        registered,
        claims: Vec::new(),
        create_time: now,
        modify_time: now,
    }
}

impl Snapshot for CsiVolumeManager {
    fn fill(&self, out: &mut StateFile) {
        out.csi_volumes = self.registry.lock().records();
    }
}

/// Every change names its volume ([`StateStore::save_entries`]), so a write costs one volume.
impl KeyedSnapshot for CsiVolumeManager {
    fn section(&self) -> Section {
        Section::CsiVolumes
    }

    fn fill_keys(&self, keys: &[Key], out: &mut StateFile) {
        let ids: Vec<&str> = keys
            .iter()
            .filter_map(|k| match k {
                Key::CsiVolume(id) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        out.csi_volumes = self.registry.lock().persisted_among(&ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::registry::tests::record as plugin_record;
    use crate::csi::volumes::spec::{RawCapability, RawCsiVolume};
    use crate::csi::volumes::{ClaimMode, CsiAccessMode};
    use crate::records::{AttachmentMode, PluginKind};

    fn spec(id: &str, plugin: &str, external: &str) -> CsiVolumeSpec {
        RawCsiVolume {
            id: id.into(),
            plugin_id: plugin.into(),
            external_id: external.into(),
            requested_capabilities: vec![RawCapability {
                access_mode: "single-node-writer".into(),
                attachment_mode: "file-system".into(),
            }],
            ..RawCsiVolume::default()
        }
        .validate()
        .unwrap()
    }

    fn claim(alloc: &str) -> CsiClaimRecord {
        CsiClaimRecord {
            alloc_id: alloc.into(),
            job_id: "job".into(),
            task_group: "g".into(),
            mode: ClaimMode::Write,
            access_mode: CsiAccessMode::SingleNodeWriter,
            attachment_mode: AttachmentMode::FileSystem,
            progress: Default::default(),
            publish_context: Default::default(),
        }
    }

    /// A node-only plugin: registering needs no controller call, so no plugin process.
    fn open(dir: &std::path::Path) -> (Arc<CsiVolumeManager>, Arc<StateStore>) {
        let (store, state) = StateStore::open(dir, false).unwrap();
        let plugins = Arc::new(PluginRegistry::new("node-1"));
        let mut node = plugin_record("nodeonly", "a0", PluginKind::Node, true, "t1");
        node.info.requires_controller_plugin = false;
        plugins.register("nodeonly", "a0", vec![node]);
        let (_tx, shutdown) = crossbeam_channel::bounded::<Never>(0);
        let manager = CsiVolumeManager::new(plugins, store.clone(), state.csi_volumes, shutdown);
        (manager, store)
    }

    #[test]
    fn create_and_register_refuse_what_cannot_be_done() {
        let dir = std::env::temp_dir().join(format!("nodeward-csivm-{}", uuid::Uuid::new_v4()));
        let (m, _store) = open(&dir);
        let err = m.create(&spec("v", "nodeonly", "ext")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("external_id is only for volume register"),
            "{err}"
        );
        let err = m.create(&spec("v", "elsewhere", "")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no CSI plugin named: elsewhere could be found"
        );
        let err = m.create(&spec("v", "nodeonly", "")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CSI plugin \"nodeonly\" has no healthy controller on this node: it runs as a node plugin only"
        );
        let err = m.register(&spec("v", "nodeonly", "")).unwrap_err();
        assert!(
            err.to_string().starts_with("external_id is required"),
            "{err}"
        );
        let err = m.register(&spec("v", "elsewhere", "ext")).unwrap_err();
        assert!(matches!(err, CsiVolumeError::NoPlugin(_)), "{err}");
        assert!(m.views().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each step of the mount sequence is in the state file when recorded: the next agent knows
    /// what to undo, and claiming again (an allocation restored) keeps it.
    #[test]
    fn mount_steps_are_durable_and_survive_a_repeated_claim() {
        use super::super::mounts::{self, PluginSteps, Step};
        let dir = std::env::temp_dir().join(format!("nodeward-csivm-{}", uuid::Uuid::new_v4()));
        let (m, store) = open(&dir);
        m.register(&spec("v", "nodeonly", "ext-1")).unwrap();
        assert_eq!(
            m.record_step("v", "a1", Step::NodeStage, None)
                .unwrap_err()
                .to_string(),
            CsiVolumeError::NotFound("v".to_string()).to_string(),
            "no claim, nothing recorded"
        );
        m.claim("v", claim("a1")).unwrap();
        let context = std::collections::BTreeMap::from([("k".to_string(), "v".to_string())]);
        m.record_step("v", "a1", Step::ControllerPublish, Some(context.clone()))
            .unwrap();
        m.record_step("v", "a1", Step::NodeStage, None).unwrap();
        drop((m, store));

        let (m, store) = open(&dir);
        m.claim("v", claim("a1")).unwrap();
        let held = m.view("v").unwrap().record.claims.remove(0);
        assert_eq!(held.publish_context, context);
        let all = PluginSteps {
            controller_publish: true,
            node_stage: true,
        };
        assert_eq!(
            mounts::mount_steps(all, held.progress, false),
            [Step::NodePublish],
            "a restarted agent only publishes"
        );
        m.record_step("v", "a1", Step::NodePublish, None).unwrap();
        for step in
            mounts::unmount_steps(m.view("v").unwrap().record.claims[0].progress, true, false)
        {
            m.record_step("v", "a1", step, None).unwrap();
        }
        assert!(m.view("v").unwrap().record.claims[0].progress.is_clear());
        m.release("v", "a1");
        drop((m, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A claim is in the state file when it is answered; the next agent has the volume with its
    /// claims, refuses to delete it while claimed, and frees it with the release.
    #[test]
    fn claims_are_durable_and_hold_the_volume() {
        let dir = std::env::temp_dir().join(format!("nodeward-csivm-{}", uuid::Uuid::new_v4()));
        let (m, store) = open(&dir);
        let view = m.register(&spec("v", "nodeonly", "ext-1")).unwrap();
        assert_eq!(view.record.external_id, "ext-1");
        assert!(
            view.schedulable(),
            "a healthy node plugin needs no controller"
        );
        assert!(matches!(
            m.register(&spec("v", "nodeonly", "ext-1")),
            Err(CsiVolumeError::Exists(_))
        ));
        m.claim("v", claim("a1")).unwrap();
        let err = m.claim("v", claim("a2")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"v\" has exhausted its available writer claims"
        );
        drop((m, store));

        let (m, _store) = open(&dir);
        let v = m.view("v").unwrap();
        assert_eq!(v.record.claims, vec![claim("a1")]);
        assert_eq!(
            v.modes(),
            Some((CsiAccessMode::SingleNodeWriter, AttachmentMode::FileSystem))
        );
        assert_eq!(
            m.deregister("v", false).unwrap_err().to_string(),
            "volume in use: v"
        );
        assert_eq!(m.delete("v").unwrap_err().to_string(), "volume in use: v");
        m.release("v", "a1");
        m.claim("v", claim("a2")).unwrap();
        m.release("v", "a2");
        assert_eq!(m.deregister("v", false).unwrap(), "v");
        assert!(m.view("v").is_none());
        drop(m);
        let (m, _store) = open(&dir);
        assert!(m.views().is_empty(), "the deregister is on disk");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
