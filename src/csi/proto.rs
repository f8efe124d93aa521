//! The CSI messages and gRPC stubs generated from `proto/csi.proto` by `build.rs`.
//!
//! `ProbeResponse::ready` is `Option<bool>` (a `google.protobuf.BoolValue`): `None` means the
//! plugin does not report readiness, which counts as ready.

#![allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]

include!(concat!(env!("OUT_DIR"), "/csi.v1.rs"));

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The wire forms a plugin may send for `ready`, written out by hand so a change to the
    /// generated types that breaks the spec's encoding fails here.
    #[test]
    fn ready_decodes_absent_false_and_true() {
        assert_eq!(ProbeResponse::decode(&[][..]).unwrap().ready, None);
        assert_eq!(
            ProbeResponse::decode(&[0x0a, 0x00][..]).unwrap().ready,
            Some(false)
        );
        assert_eq!(
            ProbeResponse::decode(&[0x0a, 0x02, 0x08, 0x01][..])
                .unwrap()
                .ready,
            Some(true)
        );
        assert!(ProbeResponse { ready: None }.encode_to_vec().is_empty());
    }

    #[test]
    fn field_numbers_follow_the_spec() {
        let info = GetPluginInfoResponse {
            name: "a".into(),
            vendor_version: "b".into(),
            manifest: Default::default(),
        };
        assert_eq!(info.encode_to_vec(), vec![0x0a, 1, b'a', 0x12, 1, b'b']);
        let node = NodeGetInfoResponse {
            node_id: "n".into(),
            max_volumes_per_node: 3,
            accessible_topology: Some(Topology {
                segments: [("k".to_string(), "v".to_string())].into_iter().collect(),
            }),
        };
        // node_id=1, max_volumes_per_node=2 (varint), accessible_topology=3 { segments=1 {1:k 2:v} }
        assert_eq!(
            node.encode_to_vec(),
            vec![0x0a, 1, b'n', 0x10, 3, 0x1a, 8, 0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v']
        );
    }

    /// The volume calls' numbers (spec v1.x): a request a plugin cannot read would fail only
    /// against a real plugin of another stack.
    #[test]
    fn volume_field_numbers_follow_the_spec() {
        use volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
        let capability = VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: "x".into(),
                ..Default::default()
            })),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        };
        // mount=2 { fs_type=1 }, access_mode=3 { mode=1 }
        let cap_bytes = vec![0x12, 3, 0x0a, 1, b'x', 0x1a, 2, 0x08, 1];
        assert_eq!(capability.encode_to_vec(), cap_bytes);
        let publish = NodePublishVolumeRequest {
            volume_id: "v".into(),
            target_path: "/t".into(),
            volume_capability: Some(capability.clone()),
            readonly: true,
            ..Default::default()
        };
        // volume_id=1, target_path=4, volume_capability=5, readonly=6
        let mut want = vec![0x0a, 1, b'v', 0x22, 2, b'/', b't', 0x2a, 9];
        want.extend(&cap_bytes);
        want.extend([0x30, 1]);
        assert_eq!(publish.encode_to_vec(), want);
        let attach = ControllerPublishVolumeRequest {
            volume_id: "v".into(),
            node_id: "n".into(),
            readonly: true,
            ..Default::default()
        };
        // volume_id=1, node_id=2, readonly=4
        assert_eq!(
            attach.encode_to_vec(),
            vec![0x0a, 1, b'v', 0x12, 1, b'n', 0x20, 1]
        );
        let range = CapacityRange {
            required_bytes: 5,
            limit_bytes: 7,
        };
        assert_eq!(range.encode_to_vec(), vec![0x08, 5, 0x10, 7]);
        let stage = NodeStageVolumeRequest {
            volume_id: "v".into(),
            staging_target_path: "/s".into(),
            ..Default::default()
        };
        // volume_id=1, staging_target_path=3
        assert_eq!(
            stage.encode_to_vec(),
            vec![0x0a, 1, b'v', 0x1a, 2, b'/', b's']
        );
        // capacity_bytes=1, volume_id=2, accessible_topology=5 as the plugin sends them.
        let volume = Volume::decode(&[0x08, 9, 0x12, 1, b'i', 0x2a, 0][..]).unwrap();
        assert_eq!(volume.capacity_bytes, 9);
        assert_eq!(volume.volume_id, "i");
        assert_eq!(volume.accessible_topology.len(), 1);
    }
}
