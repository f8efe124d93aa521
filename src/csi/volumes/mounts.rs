//! The pure core of using a CSI volume in an allocation (csi-volumes.md "Claims and mounts"): why
//! an allocation must wait for it, the claim its request makes, where the volume is staged and
//! published on this node, and which plugin calls are still due to mount it or to take it down
//! again, given what the plugins can do and what has been done already.
//!
//! No I/O, no locks, no threads: the allocation start and stop paths make the calls this plans
//! and record each one's success in a [`MountProgress`], so that an agent restarted between two
//! calls resumes with the next one and never repeats one that succeeded.

use std::path::{Path, PathBuf};

use super::registry::CsiVolumeView;
use crate::jobspec::VolumeRequest;
use crate::records::{AttachmentMode, ClaimMode, CsiAccessMode, CsiClaimRecord};

/// One plugin call of the mount sequence or of its reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    ControllerPublish,
    NodeStage,
    NodePublish,
    NodeUnpublish,
    NodeUnstage,
    ControllerUnpublish,
}

/// What the plugins of a volume can do that changes the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PluginSteps {
    /// The controller has `PUBLISH_UNPUBLISH_VOLUME` (Nomad's `SupportsAttachDetach`).
    pub controller_publish: bool,
    /// The node plugin has `STAGE_UNSTAGE_VOLUME` (`RequiresNodeStageVolume`).
    pub node_stage: bool,
}

/// The calls of one claim that have succeeded and not been undone, as its record keeps them.
pub use crate::records::CsiMountProgress as MountProgress;

/// Records that `step` succeeded.
pub fn apply(done: &mut MountProgress, step: Step) {
    match step {
        Step::ControllerPublish => done.controller_published = true,
        Step::NodeStage => done.staged = true,
        Step::NodePublish => done.published = true,
        Step::NodeUnpublish => done.published = false,
        Step::NodeUnstage => done.staged = false,
        Step::ControllerUnpublish => done.controller_published = false,
    }
}

/// The calls still due to mount the volume, in order: `ControllerPublish` (when the controller
/// has it), `NodeStage` (when the node plugin has it), `NodePublish`. `staged_on_node`: another
/// claim on this node has staged the volume already, so it is not staged twice.
pub fn mount_steps(plugin: PluginSteps, done: MountProgress, staged_on_node: bool) -> Vec<Step> {
    let mut steps = Vec::new();
    if plugin.controller_publish && !done.controller_published {
        steps.push(Step::ControllerPublish);
    }
    if plugin.node_stage && !done.staged && !staged_on_node {
        steps.push(Step::NodeStage);
    }
    if !done.published {
        steps.push(Step::NodePublish);
    }
    steps
}

/// The calls still due to take the volume down, in order: `NodeUnpublish`, `NodeUnstage` when no
/// other claim on this node still uses the volume (`others_on_node`), and `ControllerUnpublish`
/// likewise. Only what was done is undone. Staging is the node's, not the claim's: the last claim
/// to go unstages it (`node_staged`), whichever claim staged it.
pub fn unmount_steps(done: MountProgress, node_staged: bool, others_on_node: bool) -> Vec<Step> {
    let mut steps = Vec::new();
    if done.published {
        steps.push(Step::NodeUnpublish);
    }
    if (done.staged || node_staged) && !others_on_node {
        steps.push(Step::NodeUnstage);
    }
    if done.controller_published && !others_on_node {
        steps.push(Step::ControllerUnpublish);
    }
    steps
}

/// The claim an allocation's request makes: it writes unless the request is read-only. `None`
/// for a request that is not a CSI one, or has no modes (which validation refuses).
pub fn claim_for(
    request: &VolumeRequest,
    alloc_id: &str,
    job_id: &str,
    group: &str,
) -> Option<CsiClaimRecord> {
    if !request.is_csi() {
        return None;
    }
    Some(CsiClaimRecord {
        alloc_id: alloc_id.to_string(),
        job_id: job_id.to_string(),
        task_group: group.to_string(),
        mode: if request.read_only {
            ClaimMode::Read
        } else {
            ClaimMode::Write
        },
        access_mode: request.access_mode?,
        attachment_mode: request.attachment_mode?,
        progress: MountProgress::default(),
        publish_context: Default::default(),
    })
}

/// Why an allocation that needs the volume `id` must wait before it can claim it, in Nomad's
/// words (its scheduler's CSI filter reasons), or `None` when the volume exists and its plugin is
/// ready on this node: a healthy node plugin, and a healthy controller when the plugin requires
/// one. `node` names this node in the reasons. Whether the claim itself can be had is the
/// registry's answer ([`super::registry::Registry::claim`]).
pub fn wait_reason(id: &str, view: Option<&CsiVolumeView>, node: &str) -> Option<String> {
    let Some(view) = view else {
        return Some(format!("missing CSI Volume {id}"));
    };
    let plugin_id = &view.record.plugin_id;
    let Some(plugin) = &view.plugin else {
        return Some(format!(
            "CSI plugin {plugin_id} is missing from client {node}"
        ));
    };
    if plugin.nodes_healthy == 0 || (plugin.controller_required && plugin.controllers_healthy == 0)
    {
        return Some(format!(
            "CSI plugin {plugin_id} is unhealthy on client {node}"
        ));
    }
    None
}

/// The name of one way of using a volume, a directory name (Nomad's `UsageOptions.ToFS`):
/// `rw-file-system-single-node-writer`. Two claims that use a volume alike share its staging.
pub fn usage(read_only: bool, attachment: AttachmentMode, access: CsiAccessMode) -> String {
    let rw = if read_only { "ro" } else { "rw" };
    let attachment = match attachment {
        AttachmentMode::FileSystem => "file-system",
        AttachmentMode::BlockDevice => "block",
    };
    format!("{rw}-{attachment}-{}", access.as_str())
}

/// Where a volume is staged on this node: `<data_dir>/client/csi/staging/<plugin>/<volume>/<usage>`.
pub fn staging_dir(data_dir: &Path, plugin: &str, volume: &str, usage: &str) -> PathBuf {
    data_dir
        .join("client/csi/staging")
        .join(plugin)
        .join(volume)
        .join(usage)
}

/// Where a volume is published for one allocation:
/// `<data_dir>/client/csi/per-alloc/<alloc_id>/<volume>/<usage>`.
pub fn publish_dir(data_dir: &Path, alloc_id: &str, volume: &str, usage: &str) -> PathBuf {
    data_dir
        .join("client/csi/per-alloc")
        .join(alloc_id)
        .join(volume)
        .join(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    const ALL: PluginSteps = PluginSteps {
        controller_publish: true,
        node_stage: true,
    };

    #[test]
    fn the_mount_sequence_follows_the_capabilities_and_resumes_after_what_succeeded() {
        assert_eq!(
            mount_steps(ALL, MountProgress::default(), false),
            [ControllerPublish, NodeStage, NodePublish]
        );
        assert_eq!(
            mount_steps(PluginSteps::default(), MountProgress::default(), false),
            [NodePublish]
        );
        // Staged by another claim of this node: not staged again.
        assert_eq!(
            mount_steps(ALL, MountProgress::default(), true),
            [ControllerPublish, NodePublish]
        );
        // A restart after the stage: only the publish is left; after the publish nothing.
        let mut done = MountProgress::default();
        apply(&mut done, ControllerPublish);
        apply(&mut done, NodeStage);
        assert_eq!(mount_steps(ALL, done, false), [NodePublish]);
        apply(&mut done, NodePublish);
        assert!(mount_steps(ALL, done, false).is_empty());
    }

    #[test]
    fn the_reverse_undoes_only_what_was_done_and_keeps_what_others_use() {
        let all_done = MountProgress {
            controller_published: true,
            staged: true,
            published: true,
        };
        assert_eq!(
            unmount_steps(all_done, true, false),
            [NodeUnpublish, NodeUnstage, ControllerUnpublish]
        );
        assert_eq!(unmount_steps(all_done, true, true), [NodeUnpublish]);
        // The last claim to go unstages what an earlier claim staged.
        let shared = MountProgress {
            controller_published: true,
            staged: false,
            published: true,
        };
        assert_eq!(
            unmount_steps(shared, true, false),
            [NodeUnpublish, NodeUnstage, ControllerUnpublish]
        );
        // A publish that never succeeded is not undone; a failed unstage is retried alone.
        let mut done = MountProgress {
            controller_published: false,
            staged: true,
            published: false,
        };
        assert_eq!(unmount_steps(done, true, false), [NodeUnstage]);
        apply(&mut done, NodeUnstage);
        assert!(done.is_clear());
        assert!(unmount_steps(done, false, false).is_empty());
    }

    #[test]
    fn an_allocation_waits_for_the_volume_and_its_healthy_plugin() {
        use crate::csi::registry::PluginSummary;
        assert_eq!(
            wait_reason("vol", None, "n1").as_deref(),
            Some("missing CSI Volume vol")
        );
        let mut view: CsiVolumeView =
            serde_json::from_value::<crate::records::CsiVolumeRecord>(serde_json::json!({
                "ID": "vol", "Name": "vol", "ExternalID": "x", "Namespace": "default",
                "PluginID": "hostpath", "RequestedCapabilities": []
            }))
            .map(|record| CsiVolumeView {
                record,
                plugin: None,
            })
            .unwrap();
        assert_eq!(
            wait_reason("vol", Some(&view), "n1").as_deref(),
            Some("CSI plugin hostpath is missing from client n1")
        );
        let mut plugin = PluginSummary {
            id: "hostpath".to_string(),
            controller_required: true,
            controllers_healthy: 0,
            nodes_healthy: 1,
            ..PluginSummary::default()
        };
        view.plugin = Some(plugin.clone());
        assert_eq!(
            wait_reason("vol", Some(&view), "n1").as_deref(),
            Some("CSI plugin hostpath is unhealthy on client n1")
        );
        plugin.controllers_healthy = 1;
        view.plugin = Some(plugin);
        assert_eq!(wait_reason("vol", Some(&view), "n1"), None);
    }

    #[test]
    fn claims_usages_and_paths() {
        let mut request = VolumeRequest {
            name: "data".to_string(),
            volume_type: "csi".to_string(),
            source: "vol".to_string(),
            read_only: false,
            access_mode: Some(CsiAccessMode::SingleNodeWriter),
            attachment_mode: Some(AttachmentMode::FileSystem),
            per_alloc: false,
            mount_options: None,
            sticky: false,
        };
        let claim = claim_for(&request, "a1", "j", "g").unwrap();
        assert_eq!(claim.mode, ClaimMode::Write);
        assert_eq!(claim.access_mode, CsiAccessMode::SingleNodeWriter);
        request.read_only = true;
        assert_eq!(
            claim_for(&request, "a1", "j", "g").unwrap().mode,
            ClaimMode::Read
        );
        request.volume_type = "host".to_string();
        assert_eq!(claim_for(&request, "a1", "j", "g"), None);

        let u = usage(
            false,
            AttachmentMode::FileSystem,
            CsiAccessMode::SingleNodeWriter,
        );
        assert_eq!(u, "rw-file-system-single-node-writer");
        assert_eq!(
            usage(
                true,
                AttachmentMode::BlockDevice,
                CsiAccessMode::MultiNodeReaderOnly
            ),
            "ro-block-multi-node-reader-only"
        );
        let data = Path::new("/var/lib/nodeward");
        assert_eq!(
            staging_dir(data, "hostpath", "vol", &u),
            Path::new("/var/lib/nodeward/client/csi/staging/hostpath/vol/rw-file-system-single-node-writer")
        );
        assert_eq!(
            publish_dir(data, "a1", "vol", &u),
            Path::new(
                "/var/lib/nodeward/client/csi/per-alloc/a1/vol/rw-file-system-single-node-writer"
            )
        );
    }
}
