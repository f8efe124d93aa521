//! The pure core of the node's CSI volumes: the map of volumes and every change to it, without
//! locks, I/O or plugin calls (the manager, [`super::manager`], holds it behind one mutex and does
//! those around it).
//!
//! An entry is *persisted* when the state file holds it (or is about to: the manager writes the
//! file right after), and *busy* while a create, delete or deregister works on it outside the
//! lock. Only persisted entries are seen (views, IDs, the state file); a busy one refuses other
//! changes, so a volume's ID cannot be taken or dropped between the plugin call, the state write
//! and the answer.
//!
//! Claims follow Nomad's rules on this node's allocations ([`Registry::claim`]): a claim's modes
//! must be among the volume's capabilities; the first claim fixes the volume's access and
//! attachment modes until the last one goes; `single-node-writer` and `multi-node-single-writer`
//! take one writer, `multi-node-multi-writer` any number; `single-node-reader-only` takes one
//! reader, and `single-node-writer` takes a reader only while it has no claim at all.

use std::collections::BTreeMap;

use super::error::CsiVolumeError;
use crate::csi::registry::PluginSummary;
use crate::records::{AttachmentMode, ClaimMode, CsiAccessMode, CsiClaimRecord, CsiVolumeRecord};

/// One volume as the API shows it: its record and its plugin's health on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiVolumeView {
    pub record: CsiVolumeRecord,
    /// `None` when the plugin is not registered on this node (any more).
    pub plugin: Option<PluginSummary>,
}

impl CsiVolumeView {
    /// Nomad's `Schedulable`: the plugin has a healthy node side, and a healthy controller when
    /// it requires one.
    pub fn schedulable(&self) -> bool {
        self.plugin.as_ref().is_some_and(|p| {
            p.nodes_healthy > 0 && (!p.controller_required || p.controllers_healthy > 0)
        })
    }

    /// The access and attachment modes of its claims, `None` while unclaimed.
    pub fn modes(&self) -> Option<(CsiAccessMode, AttachmentMode)> {
        current_modes(&self.record)
    }
}

#[derive(Debug, Clone)]
struct Entry {
    record: CsiVolumeRecord,
    persisted: bool,
    busy: bool,
}

/// The node's CSI volumes by ID.
#[derive(Debug, Default)]
pub struct Registry {
    volumes: BTreeMap<String, Entry>,
}

/// What a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// The claim is new (or changed): the state file must record it.
    New,
    /// The allocation held this claim already.
    Held,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Loads the volumes the state file kept.
    pub fn restore(&mut self, records: Vec<CsiVolumeRecord>) {
        for record in records {
            self.volumes.insert(
                record.id.clone(),
                Entry {
                    record,
                    persisted: true,
                    busy: false,
                },
            );
        }
    }

    /// Holds the ID of a volume being created or registered: a busy entry no one else sees.
    pub fn reserve(&mut self, record: CsiVolumeRecord) -> Result<(), CsiVolumeError> {
        match self.volumes.get(&record.id) {
            Some(e) if e.busy => Err(CsiVolumeError::Busy(record.id)),
            Some(_) => Err(CsiVolumeError::Exists(record.id)),
            None => {
                self.volumes.insert(
                    record.id.clone(),
                    Entry {
                        record,
                        persisted: false,
                        busy: true,
                    },
                );
                Ok(())
            }
        }
    }

    /// Gives back a reservation that was never persisted (the plugin call failed).
    pub fn unreserve(&mut self, id: &str) {
        if self.volumes.get(id).is_some_and(|e| !e.persisted) {
            self.volumes.remove(id);
        }
    }

    /// The volume as the plugin made it, to be written to the state file; still busy.
    pub fn persist(&mut self, record: CsiVolumeRecord) {
        if let Some(e) = self.volumes.get_mut(&record.id) {
            e.record = record;
            e.persisted = true;
        }
    }

    /// The state file was written: the volume is there for everyone.
    pub fn commit(&mut self, id: &str) {
        if let Some(e) = self.volumes.get_mut(id) {
            e.busy = false;
        }
    }

    /// Marks a volume busy for a delete or deregister and returns it. Refused while claimed,
    /// unless `force` (a deregister that drops the claims with it).
    pub fn begin_removal(
        &mut self,
        id: &str,
        force: bool,
    ) -> Result<CsiVolumeRecord, CsiVolumeError> {
        let entry = match self.volumes.get_mut(id) {
            Some(e) if e.persisted => e,
            _ => return Err(CsiVolumeError::NotFound(id.to_string())),
        };
        if entry.busy {
            return Err(CsiVolumeError::Busy(id.to_string()));
        }
        if !entry.record.claims.is_empty() && !force {
            return Err(CsiVolumeError::InUse(id.to_string()));
        }
        entry.busy = true;
        Ok(entry.record.clone())
    }

    /// Ends a removal that did not happen (the plugin refused): the volume stays as it was.
    pub fn cancel_removal(&mut self, id: &str) {
        self.commit(id);
    }

    /// Takes the volume out of what the state file is given, for the write that removes it.
    pub fn withdraw(&mut self, id: &str) {
        if let Some(e) = self.volumes.get_mut(id) {
            e.persisted = false;
        }
    }

    /// The write that was to remove the volume failed: the file still holds it, so it stays.
    pub fn withdraw_failed(&mut self, id: &str) {
        if let Some(e) = self.volumes.get_mut(id) {
            e.persisted = true;
            e.busy = false;
        }
    }

    pub fn remove(&mut self, id: &str) {
        self.volumes.remove(id);
    }

    // ---- claims ---------------------------------------------------------------------------

    /// Claims the volume `id` for an allocation, in Nomad's rules (see the module docs). The
    /// caller writes the state file after a [`Claimed::New`] and [`Registry::unclaim`]s if that
    /// fails.
    pub fn claim(&mut self, id: &str, claim: CsiClaimRecord) -> Result<Claimed, CsiVolumeError> {
        let entry = match self.volumes.get_mut(id) {
            Some(e) if e.persisted => e,
            _ => return Err(CsiVolumeError::NotFound(id.to_string())),
        };
        if entry.busy {
            return Err(CsiVolumeError::Busy(id.to_string()));
        }
        let v = &mut entry.record;
        // What the claim has done of its mount sequence is the holder's to undo: claiming again
        // neither forgets nor repeats it.
        let mut claim = claim;
        if let Some(held) = v.claims.iter().find(|c| c.alloc_id == claim.alloc_id) {
            if held.same_claim(&claim) {
                return Ok(Claimed::Held);
            }
            claim.progress = held.progress;
            claim.publish_context = held.publish_context.clone();
        }
        // What the allocation held before is not in its own way.
        let others: Vec<&CsiClaimRecord> = v
            .claims
            .iter()
            .filter(|c| c.alloc_id != claim.alloc_id)
            .collect();
        let has_capability = v.requested_capabilities.iter().any(|c| {
            c.access_mode == claim.access_mode && c.attachment_mode == claim.attachment_mode
        });
        if !has_capability {
            return Err(CsiVolumeError::NoCapability {
                id: id.to_string(),
                access: claim.access_mode,
                attachment: claim.attachment_mode,
            });
        }
        if let Some(first) = others.first() {
            if first.attachment_mode != claim.attachment_mode {
                return Err(CsiVolumeError::ModeChange("attachment"));
            }
            if first.access_mode != claim.access_mode {
                return Err(CsiVolumeError::ModeChange("access"));
            }
        }
        let readers = others.iter().filter(|c| c.mode == ClaimMode::Read).count();
        let writers = others.len() - readers;
        let mode = claim.access_mode;
        match claim.mode {
            ClaimMode::Write if !mode.can_write() => {
                return Err(CsiVolumeError::ReadOnly {
                    id: id.to_string(),
                    mode,
                })
            }
            ClaimMode::Write => {
                let one_writer = matches!(
                    mode,
                    CsiAccessMode::SingleNodeWriter | CsiAccessMode::MultiNodeSingleWriter
                );
                if one_writer && writers > 0 {
                    return Err(CsiVolumeError::NoFreeWriter(id.to_string()));
                }
            }
            ClaimMode::Read => {
                let free = match mode {
                    CsiAccessMode::SingleNodeReaderOnly => readers == 0,
                    CsiAccessMode::SingleNodeWriter => others.is_empty(),
                    _ => true,
                };
                if !free {
                    return Err(CsiVolumeError::NoFreeReader(id.to_string()));
                }
            }
        }
        v.claims.retain(|c| c.alloc_id != claim.alloc_id);
        v.claims.push(claim);
        v.claims.sort_by(|a, b| a.alloc_id.cmp(&b.alloc_id));
        Ok(Claimed::New)
    }

    /// Releases an allocation's claim on the volume `id`. Returns whether it held one.
    pub fn unclaim(&mut self, id: &str, alloc_id: &str) -> bool {
        let Some(entry) = self.volumes.get_mut(id) else {
            return false;
        };
        let before = entry.record.claims.len();
        entry.record.claims.retain(|c| c.alloc_id != alloc_id);
        before != entry.record.claims.len()
    }

    /// Records that `step` of the mount sequence succeeded for `alloc_id`'s claim on `id`, with
    /// the publish context `ControllerPublishVolume` answered. Returns whether it held a claim.
    pub fn record_step(
        &mut self,
        id: &str,
        alloc_id: &str,
        step: super::mounts::Step,
        publish_context: Option<BTreeMap<String, String>>,
    ) -> bool {
        let Some(claim) = self
            .volumes
            .get_mut(id)
            .and_then(|e| e.record.claims.iter_mut().find(|c| c.alloc_id == alloc_id))
        else {
            return false;
        };
        super::mounts::apply(&mut claim.progress, step);
        if let Some(context) = publish_context {
            claim.publish_context = context;
        }
        true
    }

    /// Puts back the claims a volume had (a claim whose state write failed).
    pub fn set_claims(&mut self, id: &str, claims: Vec<CsiClaimRecord>) {
        if let Some(e) = self.volumes.get_mut(id) {
            e.record.claims = claims;
        }
    }

    // ---- reads ----------------------------------------------------------------------------

    /// A persisted volume.
    pub fn get(&self, id: &str) -> Option<CsiVolumeRecord> {
        self.volumes
            .get(id)
            .filter(|e| e.persisted)
            .map(|e| e.record.clone())
    }

    /// Every persisted volume, ordered by ID.
    pub fn records(&self) -> Vec<CsiVolumeRecord> {
        self.volumes
            .values()
            .filter(|e| e.persisted)
            .map(|e| e.record.clone())
            .collect()
    }

    /// The IDs of the persisted volumes, sorted: what an ID prefix is resolved against.
    pub fn ids(&self) -> Vec<String> {
        self.volumes
            .iter()
            .filter(|(_, e)| e.persisted)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Those of `ids` that the state file is to hold.
    pub fn persisted_among(&self, ids: &[&str]) -> Vec<CsiVolumeRecord> {
        ids.iter().filter_map(|id| self.get(id)).collect()
    }
}

/// The access and attachment modes a volume is in: its first claim's, or none while unclaimed
/// (Nomad's `CSIVolume.AccessMode` and `AttachmentMode`).
pub fn current_modes(record: &CsiVolumeRecord) -> Option<(CsiAccessMode, AttachmentMode)> {
    record
        .claims
        .first()
        .map(|c| (c.access_mode, c.attachment_mode))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::records::CsiCapability;

    pub(crate) fn record(id: &str, caps: &[CsiAccessMode]) -> CsiVolumeRecord {
        CsiVolumeRecord {
            id: id.into(),
            name: id.into(),
            external_id: format!("hp-{id}"),
            namespace: "default".into(),
            plugin_id: "hostpath".into(),
            provider: String::new(),
            provider_version: String::new(),
            requested_capacity_min: 0,
            requested_capacity_max: 0,
            capacity: 0,
            requested_capabilities: caps
                .iter()
                .map(|&access_mode| CsiCapability {
                    access_mode,
                    attachment_mode: AttachmentMode::FileSystem,
                })
                .collect(),
            mount_options: None,
            secrets: BTreeMap::new(),
            parameters: BTreeMap::new(),
            context: BTreeMap::new(),
            topologies: Vec::new(),
            requested_topologies: None,
            registered: false,
            claims: Vec::new(),
            create_time: 1,
            modify_time: 1,
        }
    }

    fn claim(alloc: &str, mode: ClaimMode, access: CsiAccessMode) -> CsiClaimRecord {
        CsiClaimRecord {
            alloc_id: alloc.into(),
            job_id: "job".into(),
            task_group: "g".into(),
            mode,
            access_mode: access,
            attachment_mode: AttachmentMode::FileSystem,
            progress: Default::default(),
            publish_context: Default::default(),
        }
    }

    fn registry(caps: &[CsiAccessMode]) -> Registry {
        let mut r = Registry::new();
        r.restore(vec![record("v", caps)]);
        r
    }

    use ClaimMode::{Read, Write};
    use CsiAccessMode::*;

    #[test]
    fn a_reservation_is_unseen_until_persisted_and_holds_its_id() {
        let mut r = Registry::new();
        r.reserve(record("v", &[SingleNodeWriter])).unwrap();
        assert!(r.get("v").is_none() && r.ids().is_empty());
        assert!(matches!(
            r.reserve(record("v", &[])),
            Err(CsiVolumeError::Busy(_))
        ));
        assert!(matches!(
            r.begin_removal("v", false),
            Err(CsiVolumeError::NotFound(_))
        ));
        r.unreserve("v");
        r.reserve(record("v", &[SingleNodeWriter])).unwrap();
        let mut made = record("v", &[SingleNodeWriter]);
        made.capacity = 7;
        r.persist(made);
        assert_eq!(r.get("v").unwrap().capacity, 7);
        // Persisted but still busy: nobody else may change it yet.
        assert!(matches!(
            r.begin_removal("v", false),
            Err(CsiVolumeError::Busy(_))
        ));
        r.commit("v");
        assert!(matches!(
            r.reserve(record("v", &[])),
            Err(CsiVolumeError::Exists(_))
        ));
        // unreserve never drops a persisted volume.
        r.unreserve("v");
        assert_eq!(r.ids(), vec!["v".to_string()]);
    }

    #[test]
    fn removal_is_refused_while_claimed_and_a_failed_write_keeps_the_volume() {
        let mut r = registry(&[SingleNodeWriter]);
        r.claim("v", claim("a1", Write, SingleNodeWriter)).unwrap();
        let err = r.begin_removal("v", false).unwrap_err();
        assert_eq!(err.to_string(), "volume in use: v");
        // Forced (deregister -force): allowed.
        r.begin_removal("v", true).unwrap();
        r.withdraw("v");
        assert!(r.records().is_empty(), "the write does not see it");
        r.withdraw_failed("v");
        assert_eq!(r.records().len(), 1);
        assert!(r.unclaim("v", "a1"));
        assert!(!r.unclaim("v", "a1"));
        r.begin_removal("v", false).unwrap();
        r.withdraw("v");
        r.remove("v");
        assert!(r.get("v").is_none());
        assert!(matches!(
            r.begin_removal("nope", false),
            Err(CsiVolumeError::NotFound(_))
        ));
    }

    #[test]
    fn one_writer_on_single_writer_modes_and_nomads_reason() {
        for mode in [SingleNodeWriter, MultiNodeSingleWriter] {
            let mut r = registry(&[mode]);
            assert_eq!(
                r.claim("v", claim("a1", Write, mode)).unwrap(),
                Claimed::New
            );
            assert_eq!(
                r.claim("v", claim("a1", Write, mode)).unwrap(),
                Claimed::Held
            );
            let err = r.claim("v", claim("a2", Write, mode)).unwrap_err();
            assert_eq!(
                err.to_string(),
                "volume \"v\" has exhausted its available writer claims"
            );
            // The claim frees: the next writer gets it.
            r.unclaim("v", "a1");
            r.claim("v", claim("a2", Write, mode)).unwrap();
        }
        let mut r = registry(&[MultiNodeMultiWriter]);
        for a in ["a1", "a2", "a3"] {
            r.claim("v", claim(a, Write, MultiNodeMultiWriter)).unwrap();
        }
        assert_eq!(r.get("v").unwrap().claims.len(), 3);
    }

    #[test]
    fn readers_follow_the_access_mode() {
        let mut r = registry(&[SingleNodeReaderOnly]);
        r.claim("v", claim("a1", Read, SingleNodeReaderOnly))
            .unwrap();
        let err = r
            .claim("v", claim("a2", Read, SingleNodeReaderOnly))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"v\" has exhausted its available reader claims"
        );
        let err = r
            .claim("v", claim("a3", Write, SingleNodeReaderOnly))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"v\" is read-only: access mode single-node-reader-only allows no writer"
        );

        let mut r = registry(&[MultiNodeReaderOnly]);
        for a in ["a1", "a2"] {
            r.claim("v", claim(a, Read, MultiNodeReaderOnly)).unwrap();
        }

        // single-node-writer: a reader only while nothing else holds it.
        let mut r = registry(&[SingleNodeWriter]);
        r.claim("v", claim("a1", Read, SingleNodeWriter)).unwrap();
        assert!(matches!(
            r.claim("v", claim("a2", Read, SingleNodeWriter)),
            Err(CsiVolumeError::NoFreeReader(_))
        ));
        // A writer may join a reader: Nomad counts writers only.
        r.claim("v", claim("a2", Write, SingleNodeWriter)).unwrap();
    }

    /// A claim changed by the same allocation (a reader becoming a writer) keeps what its mount
    /// sequence did, so that it is still undone.
    #[test]
    fn a_changed_claim_keeps_its_mount_progress() {
        use super::super::mounts::Step;
        let mut r = registry(&[SingleNodeWriter]);
        r.claim("v", claim("a1", Read, SingleNodeWriter)).unwrap();
        assert!(r.record_step("v", "a1", Step::NodePublish, None));
        assert!(!r.record_step("v", "a2", Step::NodePublish, None));
        assert_eq!(
            r.claim("v", claim("a1", Write, SingleNodeWriter)).unwrap(),
            Claimed::New
        );
        let held = &r.get("v").unwrap().claims[0];
        assert_eq!(held.mode, Write);
        assert!(held.progress.published);
    }

    #[test]
    fn modes_must_be_capabilities_and_the_first_claim_fixes_them() {
        let mut r = registry(&[SingleNodeWriter, MultiNodeMultiWriter]);
        let err = r
            .claim("v", claim("a1", Write, MultiNodeSingleWriter))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"v\" does not have the capability multi-node-single-writer on file-system"
        );
        r.claim("v", claim("a1", Write, MultiNodeMultiWriter))
            .unwrap();
        assert_eq!(
            current_modes(&r.get("v").unwrap()),
            Some((MultiNodeMultiWriter, AttachmentMode::FileSystem))
        );
        let err = r
            .claim("v", claim("a2", Write, SingleNodeWriter))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot change access mode of claimed volume"
        );
        let mut block = claim("a2", Write, MultiNodeMultiWriter);
        block.attachment_mode = AttachmentMode::BlockDevice;
        let mut with_block = record("w", &[MultiNodeMultiWriter]);
        with_block.requested_capabilities.push(CsiCapability {
            access_mode: MultiNodeMultiWriter,
            attachment_mode: AttachmentMode::BlockDevice,
        });
        r.restore(vec![with_block]);
        r.claim("w", claim("a1", Write, MultiNodeMultiWriter))
            .unwrap();
        assert_eq!(
            r.claim("w", block).unwrap_err().to_string(),
            "cannot change attachment mode of claimed volume"
        );
        // The last claim gone, the volume takes any of its modes again.
        r.unclaim("v", "a1");
        assert_eq!(current_modes(&r.get("v").unwrap()), None);
        r.claim("v", claim("a2", Write, SingleNodeWriter)).unwrap();
        // An allocation that changes its own claim is not in its own way.
        r.claim("v", claim("a2", Read, SingleNodeWriter)).unwrap();
        assert_eq!(r.get("v").unwrap().claims[0].mode, Read);
        assert!(matches!(
            r.claim("nope", claim("a1", Read, SingleNodeWriter)),
            Err(CsiVolumeError::NotFound(_))
        ));
    }
}
