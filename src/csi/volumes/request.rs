//! The CSI requests made from the node's volume records: pure conversions, so what a plugin is
//! sent is tested without one.

use crate::csi::proto::{self, volume_capability};
use crate::records::{
    AttachmentMode, CsiAccessMode, CsiCapability, CsiMountOptions, CsiTopologyRequest,
    CsiVolumeRecord,
};

use super::spec::CsiVolumeSpec;

/// CSI's enum value of an access mode.
pub fn access_mode(mode: CsiAccessMode) -> i32 {
    use volume_capability::access_mode::Mode;
    (match mode {
        CsiAccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        CsiAccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        CsiAccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        CsiAccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        CsiAccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
    }) as i32
}

/// A capability as CSI spells it: a mount (with the mount options) for `file-system`, a block
/// device for `block-device`.
pub fn capability(
    cap: &CsiCapability,
    options: Option<&CsiMountOptions>,
) -> proto::VolumeCapability {
    use volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    let access_type = match cap.attachment_mode {
        AttachmentMode::FileSystem => AccessType::Mount(MountVolume {
            fs_type: options.map(|o| o.fs_type.clone()).unwrap_or_default(),
            mount_flags: options.map(|o| o.mount_flags.clone()).unwrap_or_default(),
            volume_mount_group: String::new(),
        }),
        AttachmentMode::BlockDevice => AccessType::Block(BlockVolume {}),
    };
    proto::VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: access_mode(cap.access_mode),
        }),
    }
}

fn topologies(t: &[crate::records::Topology]) -> Vec<proto::Topology> {
    t.iter()
        .map(|t| proto::Topology {
            segments: t.segments.clone(),
        })
        .collect()
}

fn requirement(t: &CsiTopologyRequest) -> proto::TopologyRequirement {
    proto::TopologyRequirement {
        requisite: topologies(&t.required),
        preferred: topologies(&t.preferred),
    }
}

/// `CreateVolume` for a spec: its name, capacity range (absent when neither end is asked for),
/// every capability, parameters, secrets and topology requirement.
pub fn create(spec: &CsiVolumeSpec) -> proto::CreateVolumeRequest {
    // The spec's validation keeps both ends within i64.
    let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    proto::CreateVolumeRequest {
        name: spec.name.clone(),
        capacity_range: (spec.capacity_min > 0 || spec.capacity_max > 0).then(|| {
            proto::CapacityRange {
                required_bytes: bytes(spec.capacity_min),
                limit_bytes: bytes(spec.capacity_max),
            }
        }),
        volume_capabilities: spec
            .capabilities
            .iter()
            .map(|c| capability(c, spec.mount_options.as_ref()))
            .collect(),
        parameters: spec.parameters.clone(),
        secrets: spec.secrets.clone(),
        accessibility_requirements: spec.topology_request.as_ref().map(requirement),
    }
}

/// `DeleteVolume` of a volume, by the plugin's ID for it.
pub fn delete(record: &CsiVolumeRecord) -> proto::DeleteVolumeRequest {
    proto::DeleteVolumeRequest {
        volume_id: record.external_id.clone(),
        secrets: record.secrets.clone(),
    }
}

/// `ValidateVolumeCapabilities` of every capability a registered volume asks for.
pub fn validate(record: &CsiVolumeRecord) -> proto::ValidateVolumeCapabilitiesRequest {
    proto::ValidateVolumeCapabilitiesRequest {
        volume_id: record.external_id.clone(),
        volume_context: record.context.clone(),
        volume_capabilities: record
            .requested_capabilities
            .iter()
            .map(|c| capability(c, record.mount_options.as_ref()))
            .collect(),
        parameters: record.parameters.clone(),
        secrets: record.secrets.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::volumes::spec::{read_hcl, tests::EXAMPLE};

    #[test]
    fn create_carries_the_whole_spec() {
        let spec = read_hcl(EXAMPLE).unwrap().validate().unwrap();
        let req = create(&spec);
        assert_eq!(req.name, "data-volume");
        let range = req.capacity_range.unwrap();
        assert_eq!(
            (range.required_bytes, range.limit_bytes),
            (1 << 20, 4 << 20)
        );
        assert_eq!(req.volume_capabilities.len(), 2);
        use volume_capability::{access_mode::Mode, AccessType};
        let first = &req.volume_capabilities[0];
        assert_eq!(
            first.access_mode.as_ref().unwrap().mode,
            Mode::SingleNodeWriter as i32
        );
        let Some(AccessType::Mount(m)) = &first.access_type else {
            panic!("{first:?}")
        };
        assert_eq!((m.fs_type.as_str(), m.mount_flags.len()), ("ext4", 1));
        assert_eq!(
            req.volume_capabilities[1]
                .access_mode
                .as_ref()
                .unwrap()
                .mode,
            Mode::MultiNodeReaderOnly as i32
        );
        assert_eq!(req.secrets["token"], "s3cret");
        assert_eq!(req.parameters["kind"], "fast");
        let topo = req.accessibility_requirements.unwrap();
        assert_eq!(topo.requisite[0].segments["rack"], "R1");
        assert_eq!(topo.preferred[0].segments["rack"], "R2");

        let mut plain = spec.clone();
        plain.capacity_min = 0;
        plain.capacity_max = 0;
        plain.topology_request = None;
        let req = create(&plain);
        assert!(req.capacity_range.is_none() && req.accessibility_requirements.is_none());
    }

    #[test]
    fn block_devices_are_block_access() {
        let cap = CsiCapability {
            access_mode: CsiAccessMode::MultiNodeMultiWriter,
            attachment_mode: AttachmentMode::BlockDevice,
        };
        let c = capability(&cap, None);
        assert!(matches!(
            c.access_type,
            Some(volume_capability::AccessType::Block(_))
        ));
        assert_eq!(c.access_mode.unwrap().mode, 5);
    }
}
