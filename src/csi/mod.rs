//! CSI plugin supervision (csi.md).
//!
//! - [`proto`]: the CSI messages and gRPC stubs generated from `proto/csi.proto`.
//! - [`client`]: a client for one plugin socket; every call has a timeout and can be cancelled.
//! - [`registry`]: the plugins registered on this node, what the API shows and the state file keeps.
//! - [`supervisor`]: the task hook that waits for a plugin task to become healthy, registers it and
//!   watches it.
//! - [`volumes`]: CSI volumes: created or registered through the plugins, claimed by allocations.
//!
//! This file holds the pure conversions from the plugin's gRPC answers into the registration of
//! one plugin allocation ([`PluginRecord`], kept in [`crate::records`]).

pub mod client;
pub mod proto;
pub mod registry;
pub mod supervisor;
pub mod volumes;

pub use crate::records::{ControllerInfo, CsiInfo, NodeInfo, PluginKind, PluginRecord, Topology};
pub use client::{CsiClient, CsiError};
pub use registry::PluginRegistry;
pub use supervisor::{CsiPluginHook, CsiSettings};

/// What `GetPluginCapabilities` says, as the registry needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginCapabilities {
    pub requires_controller_plugin: bool,
    pub requires_topologies: bool,
}

impl PluginCapabilities {
    pub fn from_proto(reply: &proto::GetPluginCapabilitiesResponse) -> PluginCapabilities {
        use proto::plugin_capability::{service, Type};
        let mut caps = PluginCapabilities::default();
        for cap in &reply.capabilities {
            if let Some(Type::Service(s)) = &cap.r#type {
                match service::Type::from_i32(s.r#type) {
                    Some(service::Type::ControllerService) => {
                        caps.requires_controller_plugin = true
                    }
                    Some(service::Type::VolumeAccessibilityConstraints) => {
                        caps.requires_topologies = true
                    }
                    _ => {}
                }
            }
        }
        caps
    }
}

impl NodeInfo {
    pub fn from_proto(
        info: &proto::NodeGetInfoResponse,
        caps: &proto::NodeGetCapabilitiesResponse,
    ) -> NodeInfo {
        use proto::node_service_capability::{rpc::Type as Rpc, Type};
        let mut node = NodeInfo {
            id: info.node_id.clone(),
            max_volumes: info.max_volumes_per_node,
            accessible_topology: info.accessible_topology.as_ref().map(|t| Topology {
                segments: t.segments.clone(),
            }),
            ..NodeInfo::default()
        };
        for cap in &caps.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            match Rpc::from_i32(rpc.r#type) {
                Some(Rpc::StageUnstageVolume) => node.requires_node_stage_volume = true,
                Some(Rpc::GetVolumeStats) => node.supports_stats = true,
                Some(Rpc::ExpandVolume) => node.supports_expand = true,
                Some(Rpc::VolumeCondition) => node.supports_condition = true,
                _ => {}
            }
        }
        node
    }
}

impl ControllerInfo {
    pub fn from_proto(caps: &proto::ControllerGetCapabilitiesResponse) -> ControllerInfo {
        use proto::controller_service_capability::{rpc::Type as Rpc, Type};
        let mut c = ControllerInfo::default();
        for cap in &caps.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            match Rpc::from_i32(rpc.r#type) {
                Some(Rpc::CreateDeleteVolume) => c.supports_create_delete = true,
                Some(Rpc::PublishUnpublishVolume) => c.supports_attach_detach = true,
                Some(Rpc::ListVolumes) => c.supports_list_volumes = true,
                Some(Rpc::GetCapacity) => c.supports_get_capacity = true,
                Some(Rpc::CreateDeleteSnapshot) => c.supports_create_delete_snapshot = true,
                Some(Rpc::ListSnapshots) => c.supports_list_snapshots = true,
                Some(Rpc::CloneVolume) => c.supports_clone = true,
                Some(Rpc::PublishReadonly) => c.supports_read_only_attach = true,
                Some(Rpc::ExpandVolume) => c.supports_expand = true,
                Some(Rpc::ListVolumesPublishedNodes) => {
                    c.supports_list_volumes_attached_nodes = true
                }
                Some(Rpc::VolumeCondition) => c.supports_condition = true,
                Some(Rpc::GetVolume) => c.supports_get = true,
                Some(Rpc::ModifyVolume) => c.supports_modify = true,
                _ => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_map_to_nomads_flags() {
        use proto::controller_service_capability as csc;
        use proto::node_service_capability as nsc;
        use proto::plugin_capability as pc;
        let plugin = proto::GetPluginCapabilitiesResponse {
            capabilities: vec![proto::PluginCapability {
                r#type: Some(pc::Type::Service(pc::Service {
                    r#type: pc::service::Type::VolumeAccessibilityConstraints as i32,
                })),
            }],
        };
        assert_eq!(
            PluginCapabilities::from_proto(&plugin),
            PluginCapabilities {
                requires_controller_plugin: false,
                requires_topologies: true
            }
        );

        let node_caps = proto::NodeGetCapabilitiesResponse {
            capabilities: vec![
                proto::NodeServiceCapability {
                    r#type: Some(nsc::Type::Rpc(nsc::Rpc {
                        r#type: nsc::rpc::Type::GetVolumeStats as i32,
                    })),
                },
                // An enum value from a newer spec is ignored, not an error.
                proto::NodeServiceCapability {
                    r#type: Some(nsc::Type::Rpc(nsc::Rpc { r#type: 99 })),
                },
            ],
        };
        let info = proto::NodeGetInfoResponse {
            node_id: "n1".into(),
            max_volumes_per_node: 7,
            accessible_topology: None,
        };
        let node = NodeInfo::from_proto(&info, &node_caps);
        assert_eq!(node.id, "n1");
        assert_eq!(node.max_volumes, 7);
        assert!(node.supports_stats && !node.requires_node_stage_volume);

        let ctrl = ControllerInfo::from_proto(&proto::ControllerGetCapabilitiesResponse {
            capabilities: vec![proto::ControllerServiceCapability {
                r#type: Some(csc::Type::Rpc(csc::Rpc {
                    r#type: csc::rpc::Type::PublishUnpublishVolume as i32,
                })),
            }],
        });
        assert!(ctrl.supports_attach_detach && !ctrl.supports_create_delete);
    }

    #[test]
    fn info_serializes_in_nomads_shape() {
        let info = CsiInfo {
            plugin_id: "hp".into(),
            node_info: Some(NodeInfo {
                id: "n1".into(),
                accessible_topology: Some(Topology::default()),
                ..NodeInfo::default()
            }),
            ..CsiInfo::default()
        };
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["PluginID"], "hp");
        assert_eq!(v["NodeInfo"]["ID"], "n1");
        assert!(v["NodeInfo"]["AccessibleTopology"]["Segments"].is_object());
        assert!(v["ControllerInfo"].is_null());
        assert!(v.get("HealthDescription").is_some() && v.get("RequiresTopologies").is_some());
    }
}
