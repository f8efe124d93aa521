//! The pure core of the volume manager: the node's map of dynamic host volumes and every change to
//! it, as plain types and functions. No locks, threads, plugin runs or disk writes here; time and
//! new IDs are passed in. [`super::manager`] keeps one [`Registry`] behind its one mutex and calls
//! each method below as one check-and-change under one guard.
//!
//! An entry is *busy* while a create, register, delete or restore works on it outside the lock:
//! no other request may change it meanwhile, and its name stays taken. An entry is *persisted*
//! when its record belongs in the state file ([`Registry::persisted`] is what a state write
//! saves); a first create is not persisted until its plugin has answered.
//!
//! The steps, each one method (the manager does the work between them without the lock):
//!
//! - create / register: [`Registry::reserve`] (a new volume gets a `pending`, busy entry that
//!   holds its name) → plugin run → [`Registry::persist`] → state write → [`Registry::commit`]
//!   (`ready`). On failure: [`Registry::unreserve`] before anything was recorded; after a failed
//!   write, [`Registry::unpersist`] then [`Registry::remove`] (first create; the plugin's `delete`
//!   runs between them) or [`Registry::revert`] (an update).
//! - delete: [`Registry::begin_delete`] → plugin's `delete` → [`Registry::withdraw`] (out of
//!   `HostVolumes` and of the next write) → state write → [`Registry::remove`]. A refusing plugin:
//!   [`Registry::unreserve`]; a failed write: [`Registry::withdraw_failed`].
//! - restore and retry: [`Registry::insert_restored`] or [`Registry::take_unavailable`] → plugin
//!   runs → [`Registry::apply_restores`].

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::error::VolumeError;
use super::spec::VolumeSpec;
use crate::records::{VolumeRecord, VolumeState};
use crate::task::mounts::HostVolume;

/// One entry of the node's `HostVolumes` (Nomad's `ClientHostVolumeConfig`).
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

/// What a restore or a retry achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub ready: Vec<String>,
    /// (volume ID, reason)
    pub unavailable: Vec<(String, String)>,
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

/// What a create or register works on after [`Registry::reserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The record to complete (plugin answer or registered path) and commit.
    pub record: VolumeRecord,
    /// The volume's record before this change; `None` for a new volume.
    pub old: Option<VolumeRecord>,
}

/// Two volumes of the state file with one name: both are kept, the operator is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateName {
    pub name: String,
    pub first: String,
    pub second: String,
}

/// A spec's `node_id` and `node_pool`, when set, must name this node.
pub fn check_placement(
    spec: &VolumeSpec,
    node_id: &str,
    node_pool: &str,
) -> Result<(), VolumeError> {
    if let Some(node) = &spec.node_id {
        if node != node_id {
            return Err(VolumeError::Invalid(format!(
                "node_id {node:?} is not this node ({node_id})"
            )));
        }
    }
    if let Some(pool) = &spec.node_pool {
        if pool != node_pool {
            return Err(VolumeError::Invalid(format!(
                "node_pool {pool:?} is not this node's pool ({node_pool:?})"
            )));
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
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

/// The dynamic volumes of one node and which allocations use which volume name.
#[derive(Debug, Clone)]
pub struct Registry {
    node_id: String,
    node_pool: String,
    /// Dynamic volumes by ID.
    volumes: BTreeMap<String, Entry>,
    /// Allocations using each volume name.
    users: BTreeMap<String, BTreeSet<String>>,
}

impl Registry {
    /// An empty registry of the node `node_id` in `node_pool` (stamped on new volumes, checked
    /// against a spec's placement).
    pub fn new(node_id: impl Into<String>, node_pool: impl Into<String>) -> Registry {
        Registry {
            node_id: node_id.into(),
            node_pool: node_pool.into(),
            volumes: BTreeMap::new(),
            users: BTreeMap::new(),
        }
    }

    /// The ID of the volume named `name`, busy or not.
    pub fn name_taken_by(&self, name: &str) -> Option<&str> {
        self.volumes
            .iter()
            .find(|(_, e)| e.record.name == name)
            .map(|(id, _)| id.as_str())
    }

    /// Every volume's ID, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.volumes.keys().cloned().collect()
    }

    // ---- create and register --------------------------------------------------------------

    /// Takes the name for a new volume (a pending, busy entry with the ID `new_id`) or, when the
    /// spec carries an ID, marks that volume busy after checking the change is allowed. `now`
    /// (Unix nanoseconds) becomes the modify time, and the create time of a new volume.
    pub fn reserve(
        &mut self,
        spec: &VolumeSpec,
        registered: bool,
        new_id: String,
        now: i64,
    ) -> Result<Reservation, VolumeError> {
        if let Some(id) = &spec.id {
            let entry = self
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
            return Ok(Reservation {
                record,
                old: Some(old),
            });
        }
        if self.name_taken_by(&spec.name).is_some() {
            return Err(VolumeError::NameExists);
        }
        let record = VolumeRecord {
            id: new_id,
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            plugin_id: spec.plugin_id.clone().unwrap_or_default(),
            node_id: self.node_id.clone(),
            node_pool: self.node_pool.clone(),
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
        self.volumes.insert(
            record.id.clone(),
            Entry {
                record: record.clone(),
                state: VolumeState::Pending,
                status: String::new(),
                busy: true,
                persisted: false,
            },
        );
        Ok(Reservation { record, old: None })
    }

    /// Gives back a reservation before anything was recorded: a new volume's entry goes (and its
    /// name is free again), an existing one is no longer busy.
    pub fn unreserve(&mut self, id: &str, new: bool) {
        if new {
            self.volumes.remove(id);
        } else if let Some(e) = self.volumes.get_mut(id) {
            e.busy = false;
        }
    }

    /// The completed record replaces the reserved one and belongs in the state file from now on.
    /// The entry stays busy (and pending, for a new volume) until [`Registry::commit`].
    pub fn persist(&mut self, record: VolumeRecord) {
        if let Some(entry) = self.volumes.get_mut(&record.id) {
            entry.record = record;
            entry.persisted = true;
        }
    }

    /// The state file holds the record: the volume is ready and no longer busy.
    pub fn commit(&mut self, id: &str) {
        if let Some(entry) = self.volumes.get_mut(id) {
            entry.state = VolumeState::Ready;
            entry.status.clear();
            entry.busy = false;
        }
    }

    /// A first create whose state write failed: the record is no longer for the state file; the
    /// entry stays busy, holding the name, while the plugin cleans up. Then [`Registry::remove`].
    pub fn unpersist(&mut self, id: &str) {
        if let Some(entry) = self.volumes.get_mut(id) {
            entry.persisted = false;
        }
    }

    /// An update whose state write failed: the volume is as it was before, and idle.
    pub fn revert(&mut self, old: VolumeRecord) {
        if let Some(entry) = self.volumes.get_mut(&old.id) {
            entry.record = old;
            entry.busy = false;
        }
    }

    // ---- delete ---------------------------------------------------------------------------

    /// Takes the volume `id` (a full ID) for a delete: busy, so nothing else changes it meanwhile.
    pub fn begin_delete(&mut self, id: &str) -> Result<VolumeRecord, VolumeError> {
        let entry = self
            .volumes
            .get_mut(id)
            .ok_or_else(|| VolumeError::NotFound(id.to_string()))?;
        if entry.busy {
            return Err(VolumeError::Busy(id.to_string()));
        }
        entry.busy = true;
        Ok(entry.record.clone())
    }

    /// The plugin's `delete` is done (or forced past): the volume leaves `HostVolumes` and the next
    /// state write. It stays busy, and its name taken, until [`Registry::remove`].
    pub fn withdraw(&mut self, id: &str) {
        if let Some(entry) = self.volumes.get_mut(id) {
            entry.persisted = false;
            entry.state = VolumeState::Pending;
        }
    }

    /// The state write after [`Registry::withdraw`] failed, so the file still holds the volume:
    /// it is kept, persisted and idle, `unavailable` for `status`, so memory and file agree.
    pub fn withdraw_failed(&mut self, id: &str, status: String) {
        if let Some(entry) = self.volumes.get_mut(id) {
            entry.persisted = true;
            entry.busy = false;
            entry.state = VolumeState::Unavailable;
            entry.status = status;
        }
    }

    /// Forgets the volume `id`; its name is free again.
    pub fn remove(&mut self, id: &str) -> Option<VolumeRecord> {
        self.volumes.remove(id).map(|e| e.record)
    }

    // ---- restore and retry ----------------------------------------------------------------

    /// Adds the state file's records as pending, busy, persisted entries (skipping IDs already
    /// known). Returns the IDs to restore and the names that two records share.
    pub fn insert_restored(
        &mut self,
        records: Vec<VolumeRecord>,
    ) -> (Vec<String>, Vec<DuplicateName>) {
        let mut ids = Vec::new();
        let mut duplicates = Vec::new();
        for record in records {
            if self.volumes.contains_key(&record.id) {
                continue;
            }
            if let Some(other) = self.name_taken_by(&record.name) {
                duplicates.push(DuplicateName {
                    name: record.name.clone(),
                    first: other.to_string(),
                    second: record.id.clone(),
                });
            }
            ids.push(record.id.clone());
            self.volumes.insert(
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
        (ids, duplicates)
    }

    /// Takes every unavailable volume that nothing works on (busy) and returns their IDs.
    pub fn take_unavailable(&mut self) -> Vec<String> {
        self.volumes
            .iter_mut()
            .filter(|(_, e)| e.state == VolumeState::Unavailable && !e.busy)
            .map(|(id, e)| {
                e.busy = true;
                id.clone()
            })
            .collect()
    }

    /// The records of the volumes `ids` that exist.
    pub fn records_of(&self, ids: &[String]) -> Vec<VolumeRecord> {
        ids.iter()
            .filter_map(|id| self.volumes.get(id).map(|e| e.record.clone()))
            .collect()
    }

    /// Applies restore outcomes, each (the record restored, the new record or why it failed):
    /// ready with the new record, or unavailable with the reason; no longer busy. Returns the
    /// report (sorted) and whether a record changed (so the state file needs a write).
    pub fn apply_restores(
        &mut self,
        outcomes: Vec<(VolumeRecord, Result<VolumeRecord, String>)>,
    ) -> (RestoreReport, bool) {
        let mut report = RestoreReport::default();
        let mut changed = false;
        for (old, result) in outcomes {
            let Some(entry) = self.volumes.get_mut(&old.id) else {
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
                    entry.state = VolumeState::Unavailable;
                    entry.status = reason.clone();
                    report.unavailable.push((old.id.clone(), reason));
                }
            }
        }
        report.ready.sort();
        report.unavailable.sort();
        (report, changed)
    }

    // ---- reads ----------------------------------------------------------------------------

    /// The node's `HostVolumes`: `statics`, overridden by ready dynamic volumes, keyed by name.
    pub fn host_volumes(
        &self,
        statics: &BTreeMap<String, HostVolume>,
    ) -> BTreeMap<String, HostVolumeConfig> {
        let mut out: BTreeMap<String, HostVolumeConfig> = statics
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
        for e in self.volumes.values() {
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

    /// The ready dynamic volume named `name`, as an allocation mounts it.
    pub fn ready(&self, name: &str) -> Option<HostVolume> {
        self.volumes
            .values()
            .find(|e| e.record.name == name && e.state == VolumeState::Ready)
            .map(|e| HostVolume {
                name: name.to_string(),
                path: PathBuf::from(&e.record.host_path),
                read_only: false,
                id: Some(e.record.id.clone()),
            })
    }

    pub fn record(&self, id: &str) -> Option<VolumeRecord> {
        self.volumes.get(id).map(|e| e.record.clone())
    }

    /// Every dynamic volume: (record, state, reason), sorted by name.
    pub fn volumes(&self) -> Vec<(VolumeRecord, VolumeState, String)> {
        let mut out: Vec<_> = self
            .volumes
            .values()
            .map(|e| (e.record.clone(), e.state, e.status.clone()))
            .collect();
        out.sort_by(|a, b| (&a.0.name, &a.0.id).cmp(&(&b.0.name, &b.0.id)));
        out
    }

    /// One volume with the allocations that use it.
    pub fn view(&self, id: &str) -> Option<VolumeView> {
        let e = self.volumes.get(id)?;
        Some(VolumeView {
            record: e.record.clone(),
            state: e.state,
            status: e.status.clone(),
            allocations: self
                .users
                .get(&e.record.name)
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
        })
    }

    /// The records that belong in the state file.
    pub fn persisted(&self) -> Vec<VolumeRecord> {
        self.volumes
            .values()
            .filter(|e| e.persisted)
            .map(|e| e.record.clone())
            .collect()
    }

    /// The records among `ids` that belong in the state file.
    pub fn persisted_among(&self, ids: &[&str]) -> Vec<VolumeRecord> {
        ids.iter()
            .filter_map(|id| self.volumes.get(*id))
            .filter(|e| e.persisted)
            .map(|e| e.record.clone())
            .collect()
    }

    // ---- claims ---------------------------------------------------------------------------

    /// Allocation `alloc_id` uses the volume named `name`.
    pub fn claim(&mut self, name: &str, alloc_id: &str) {
        self.users
            .entry(name.to_string())
            .or_default()
            .insert(alloc_id.to_string());
    }

    /// Allocation `alloc_id` uses no volume any more.
    pub fn release(&mut self, alloc_id: &str) {
        self.users.retain(|_, allocs| {
            allocs.remove(alloc_id);
            !allocs.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::spec::Capability;

    fn record(id: &str, name: &str) -> VolumeRecord {
        VolumeRecord {
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
        }
    }

    fn spec(name: &str, plugin: Option<&str>) -> VolumeSpec {
        VolumeSpec {
            id: None,
            name: name.to_string(),
            namespace: "default".to_string(),
            plugin_id: plugin.map(String::from),
            node_id: None,
            node_pool: None,
            capacity_min: 10,
            capacity_max: 20,
            capabilities: Vec::<Capability>::new(),
            parameters: BTreeMap::from([("mode".to_string(), "0755".to_string())]),
            host_path: None,
        }
    }

    /// A registry holding ready, persisted volumes (ID, name).
    fn ready(volumes: &[(&str, &str)]) -> Registry {
        let mut reg = Registry::new("node-1", "default");
        let (ids, _) = reg.insert_restored(volumes.iter().map(|(i, n)| record(i, n)).collect());
        let outcomes = reg
            .records_of(&ids)
            .into_iter()
            .map(|r| (r.clone(), Ok(r)))
            .collect();
        reg.apply_restores(outcomes);
        reg
    }

    fn state(reg: &Registry, id: &str) -> Option<VolumeState> {
        reg.view(id).map(|v| v.state)
    }

    #[test]
    fn names_and_ids() {
        let reg = ready(&[("abc1", "a"), ("abc2", "b"), ("abd", "c")]);
        assert_eq!(reg.ids(), vec!["abc1", "abc2", "abd"]);
        assert_eq!(reg.name_taken_by("b"), Some("abc2"));
        assert_eq!(reg.name_taken_by("z"), None);
    }

    #[test]
    fn placement_must_name_this_node() {
        let mut s = spec("v", Some("mkdir"));
        assert!(check_placement(&s, "n1", "default").is_ok());
        s.node_id = Some("n2".into());
        assert_eq!(
            check_placement(&s, "n1", "default")
                .unwrap_err()
                .to_string(),
            "node_id \"n2\" is not this node (n1)"
        );
        s.node_id = Some("n1".into());
        s.node_pool = Some("gpu".into());
        assert_eq!(
            check_placement(&s, "n1", "default")
                .unwrap_err()
                .to_string(),
            "node_pool \"gpu\" is not this node's pool (\"default\")"
        );
    }

    #[test]
    fn a_first_create_holds_its_name_until_committed() {
        let mut reg = Registry::new("node-1", "default");
        let r = reg
            .reserve(&spec("v", Some("mkdir")), false, "id-1".into(), 7)
            .unwrap();
        assert_eq!(r.old, None);
        assert_eq!(
            (r.record.id.as_str(), r.record.node_id.as_str()),
            ("id-1", "node-1")
        );
        assert_eq!((r.record.create_time, r.record.modify_time), (7, 7));
        assert_eq!(r.record.requested_capacity_min_bytes, 10);
        assert_eq!(state(&reg, "id-1"), Some(VolumeState::Pending));
        // The name is taken while the plugin runs; nothing is for the state file yet.
        assert!(matches!(
            reg.reserve(&spec("v", Some("mkdir")), false, "id-2".into(), 8),
            Err(VolumeError::NameExists)
        ));
        assert!(reg.persisted().is_empty());
        assert!(reg.host_volumes(&BTreeMap::new()).is_empty());
        assert!(reg.ready("v").is_none());

        let done = VolumeRecord {
            host_path: "/vols/id-1".into(),
            capacity_bytes: 5,
            ..r.record
        };
        reg.persist(done.clone());
        assert_eq!(reg.persisted(), vec![done.clone()]);
        assert_eq!(state(&reg, "id-1"), Some(VolumeState::Pending));
        reg.commit("id-1");
        assert_eq!(state(&reg, "id-1"), Some(VolumeState::Ready));
        assert_eq!(reg.record("id-1"), Some(done));
        assert_eq!(reg.ready("v").unwrap().path, PathBuf::from("/vols/id-1"));
        assert_eq!(
            reg.host_volumes(&BTreeMap::new())["v"],
            HostVolumeConfig {
                name: "v".into(),
                path: "/vols/id-1".into(),
                read_only: false,
                id: "id-1".into(),
            }
        );
    }

    #[test]
    fn failures_give_the_reservation_back() {
        let mut reg = Registry::new("node-1", "default");
        // The plugin failed: the name is free again.
        let r = reg
            .reserve(&spec("v", Some("mkdir")), false, "id-1".into(), 1)
            .unwrap();
        reg.unreserve(&r.record.id, true);
        assert!(reg.ids().is_empty());
        // The state write failed on a first create: out of the file, then gone.
        let r = reg
            .reserve(&spec("v", Some("mkdir")), false, "id-2".into(), 1)
            .unwrap();
        reg.persist(r.record.clone());
        reg.unpersist("id-2");
        assert!(reg.persisted().is_empty());
        assert_eq!(reg.name_taken_by("v"), Some("id-2"));
        assert_eq!(reg.remove("id-2").map(|r| r.id), Some("id-2".into()));
        assert_eq!(reg.name_taken_by("v"), None);
    }

    #[test]
    fn an_update_checks_what_cannot_change_and_reverts_on_failure() {
        let mut reg = ready(&[("id-1", "v")]);
        let mut s = spec("v", Some("mkdir"));
        s.id = Some("nope".into());
        assert!(matches!(
            reg.reserve(&s, false, "x".into(), 2),
            Err(VolumeError::NotFound(id)) if id == "nope"
        ));
        s.id = Some("id-1".into());
        s.name = "w".into();
        assert_eq!(
            reg.reserve(&s, false, "x".into(), 2)
                .unwrap_err()
                .to_string(),
            "volume \"id-1\" is named \"v\": a volume's name cannot be changed"
        );
        s.name = "v".into();
        assert_eq!(
            reg.reserve(&s, true, "x".into(), 2)
                .unwrap_err()
                .to_string(),
            "volume \"id-1\" was created; use volume create"
        );
        s.plugin_id = Some("other".into());
        assert_eq!(
            reg.reserve(&s, false, "x".into(), 2)
                .unwrap_err()
                .to_string(),
            "volume \"id-1\" was created by plugin \"mkdir\": its plugin cannot be changed"
        );
        s.plugin_id = Some("mkdir".into());
        let r = reg.reserve(&s, false, "x".into(), 2).unwrap();
        let old = r.old.clone().unwrap();
        assert_eq!(r.record.id, "id-1");
        assert_eq!((r.record.create_time, r.record.modify_time), (0, 2));
        assert_eq!(r.record.parameters, s.parameters);
        // Busy: a second change or a delete waits its turn.
        assert!(matches!(
            reg.reserve(&s, false, "x".into(), 3),
            Err(VolumeError::Busy(_))
        ));
        assert!(matches!(
            reg.begin_delete("id-1"),
            Err(VolumeError::Busy(_))
        ));
        reg.persist(r.record);
        reg.revert(old.clone());
        assert_eq!(reg.record("id-1"), Some(old));
        assert!(reg.begin_delete("id-1").is_ok());
    }

    #[test]
    fn delete_withdraws_then_removes_or_keeps_the_volume() {
        let mut reg = ready(&[("id-1", "v")]);
        assert!(matches!(
            reg.begin_delete("zzz"),
            Err(VolumeError::NotFound(_))
        ));
        reg.begin_delete("id-1").unwrap();
        // A refusing plugin: the volume stays as it was.
        reg.unreserve("id-1", false);
        assert_eq!(state(&reg, "id-1"), Some(VolumeState::Ready));
        reg.begin_delete("id-1").unwrap();
        reg.withdraw("id-1");
        assert!(reg.host_volumes(&BTreeMap::new()).is_empty());
        assert!(reg.persisted().is_empty());
        assert_eq!(reg.name_taken_by("v"), Some("id-1"));
        // The write failed: back in the file, unavailable with the reason.
        reg.withdraw_failed("id-1", "disk full".into());
        let v = reg.view("id-1").unwrap();
        assert_eq!(
            (v.state, v.status.as_str()),
            (VolumeState::Unavailable, "disk full")
        );
        assert_eq!(reg.persisted().len(), 1);
        reg.begin_delete("id-1").unwrap();
        reg.withdraw("id-1");
        reg.remove("id-1");
        assert!(reg.ids().is_empty());
    }

    #[test]
    fn restore_is_partial_and_retries_take_only_idle_unavailable_volumes() {
        let mut reg = Registry::new("node-1", "default");
        let (ids, duplicates) = reg.insert_restored(vec![
            record("b", "one"),
            record("a", "two"),
            record("c", "one"),
        ]);
        assert_eq!(ids, vec!["b", "a", "c"]);
        assert_eq!(
            duplicates,
            vec![DuplicateName {
                name: "one".into(),
                first: "b".into(),
                second: "c".into(),
            }]
        );
        // Restored records are for the state file from the start: nothing is dropped.
        assert_eq!(reg.persisted().len(), 3);
        let (again, _) = reg.insert_restored(vec![record("a", "two")]);
        assert!(again.is_empty());
        assert!(reg.take_unavailable().is_empty(), "all are busy");

        let records = reg.records_of(&ids);
        let moved = VolumeRecord {
            host_path: "/new".into(),
            ..records[1].clone()
        };
        let (report, changed) = reg.apply_restores(vec![
            (records[0].clone(), Ok(records[0].clone())),
            (records[1].clone(), Ok(moved)),
            (records[2].clone(), Err("no such plugin".into())),
        ]);
        assert!(changed);
        assert_eq!(report.ready, vec!["a", "b"]);
        assert_eq!(
            report.unavailable,
            vec![("c".to_string(), "no such plugin".to_string())]
        );
        assert_eq!(reg.record("a").unwrap().host_path, "/new");
        assert_eq!(reg.view("c").unwrap().status, "no such plugin");
        assert_eq!(reg.persisted().len(), 3);

        assert_eq!(reg.take_unavailable(), vec!["c"]);
        assert!(reg.take_unavailable().is_empty(), "c is busy now");
        let c = reg.records_of(&["c".to_string()]);
        let (report, changed) = reg.apply_restores(vec![(c[0].clone(), Ok(c[0].clone()))]);
        assert!(!changed, "the record is unchanged");
        assert_eq!(report.ready, vec!["c"]);
        assert_eq!(state(&reg, "c"), Some(VolumeState::Ready));
    }

    #[test]
    fn dynamic_volumes_override_static_ones_and_list_their_users() {
        let mut reg = ready(&[("id-1", "shared"), ("id-2", "other")]);
        let statics = BTreeMap::from([
            (
                "shared".to_string(),
                HostVolume {
                    name: "shared".into(),
                    path: "/srv/shared".into(),
                    read_only: true,
                    id: None,
                },
            ),
            (
                "ro".to_string(),
                HostVolume {
                    name: "ro".into(),
                    path: "/srv/ro".into(),
                    read_only: true,
                    id: None,
                },
            ),
        ]);
        let hv = reg.host_volumes(&statics);
        assert_eq!(hv.len(), 3);
        assert_eq!(
            (hv["shared"].id.as_str(), hv["shared"].read_only),
            ("id-1", false)
        );
        assert_eq!(
            (hv["ro"].id.as_str(), hv["ro"].path.as_str()),
            ("", "/srv/ro")
        );

        reg.claim("shared", "alloc-2");
        reg.claim("shared", "alloc-1");
        reg.claim("other", "alloc-1");
        assert_eq!(
            reg.view("id-1").unwrap().allocations,
            vec!["alloc-1", "alloc-2"]
        );
        reg.release("alloc-1");
        assert_eq!(reg.view("id-1").unwrap().allocations, vec!["alloc-2"]);
        assert!(reg.view("id-2").unwrap().allocations.is_empty());
    }

    #[test]
    fn volumes_list_sorted_by_name() {
        let reg = ready(&[("1", "b"), ("2", "a"), ("3", "c")]);
        let names: Vec<String> = reg.volumes().into_iter().map(|(r, _, _)| r.name).collect();
        assert_eq!(names, vec!["a", "b", "c"]);
    }

    #[test]
    fn records_round_trip_through_the_state_file_shape() {
        let record = record("abc1", "a");
        let v = serde_json::to_value(&record).unwrap();
        assert_eq!(v["ID"], "abc1");
        assert_eq!(v["PluginID"], "mkdir");
        assert_eq!(v["HostPath"], "/x");
        let back: VolumeRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, record);
    }
}
