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
}
