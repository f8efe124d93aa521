//! Node routes (agent.md "HTTP API"): `GET /v1/nodes` (the one node, as a list stub) and
//! `GET /v1/node/:id` (with its attributes, meta, resources, host volumes and CSI plugins). `Datacenter`,
//! `NodeClass`, `NodePool`, `Attributes` and `Meta` are what constraints are checked against.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::ids::{self, ID};
use super::router::{Response, Router};
use crate::agent::Agent;
use crate::resources::{NodeResources, ReservedResources};

/// The node in Nomad's shape, written once for both routes: the list stub leaves out the
/// details. Fields in name order, as the answer has always had them.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Node<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    attributes: Option<BTreeMap<String, String>>,
    #[serde(
        rename = "CSIControllerPlugins",
        skip_serializing_if = "Option::is_none"
    )]
    csi_controller_plugins: Option<&'a Value>,
    #[serde(rename = "CSINodePlugins", skip_serializing_if = "Option::is_none")]
    csi_node_plugins: Option<&'a Value>,
    datacenter: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_volumes: Option<Value>,
    #[serde(rename = "ID")]
    id: &'a str,
    /// The agent's `client { meta }` (the node's only).
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<&'a BTreeMap<String, String>>,
    name: &'a str,
    node_class: &'a str,
    node_pool: &'a str,
    /// The fingerprinted resources, and `client { reserved }`, in Nomad's shapes.
    #[serde(skip_serializing_if = "Option::is_none")]
    node_resources: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reserved_resources: Option<Value>,
    scheduling_eligibility: &'static str,
    status: &'static str,
}

impl<'a> Node<'a> {
    fn stub(agent: &'a Agent) -> Node<'a> {
        Node {
            attributes: None,
            csi_controller_plugins: None,
            csi_node_plugins: None,
            datacenter: &agent.config.datacenter,
            host_volumes: None,
            id: &agent.node_id,
            meta: None,
            name: &agent.config.name,
            node_class: &agent.config.node_class,
            node_pool: &agent.config.node_pool,
            node_resources: None,
            reserved_resources: None,
            scheduling_eligibility: "eligible",
            status: "ready",
        }
    }
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/nodes", move |_| Response::json([Node::stub(&a)]));
    let a = agent.clone();
    r.get("/v1/node/:id", move |req| {
        ids::resolve(req.param("id"), [a.node_id.as_str()], &ID)?;
        // `{"CSINodePlugins": ..., "CSIControllerPlugins": ...}`
        let csi = super::plugins::node_plugins_json(&a.csi);
        Response::json(Node {
            attributes: Some(a.node_attributes()),
            csi_controller_plugins: Some(&csi["CSIControllerPlugins"]),
            csi_node_plugins: Some(&csi["CSINodePlugins"]),
            host_volumes: Some(super::volumes::host_volumes_json(&a.host_volumes)),
            meta: Some(&a.config.meta),
            node_resources: Some(node_resources_json(&a.node.resources, &a.config)),
            reserved_resources: Some(reserved_resources_json(&a.config.reserved)),
            ..Node::stub(&a)
        })
    });
}

/// Nomad's `NodeResources` (structs.NodeResources): CPU shares are the total MHz.
fn node_resources_json(r: &NodeResources, config: &crate::config::AgentConfig) -> Value {
    serde_json::to_value(NodeResourcesAnswer {
        cpu: NodeCpu {
            cpu_shares: r.cpu_mhz,
            total_cpu_cores: r.total_cores,
            reservable_cpu_cores: &r.cores,
        },
        memory: MemoryMb {
            memory_mb: r.memory_mb,
        },
        disk: DiskMb { disk_mb: r.disk_mb },
        networks: [],
        min_dynamic_port: config.min_dynamic_port,
        max_dynamic_port: config.max_dynamic_port,
    })
    .unwrap_or_default()
}

/// Nomad's `ReservedResources` (structs.NodeReservedResources).
fn reserved_resources_json(r: &ReservedResources) -> Value {
    serde_json::to_value(ReservedAnswer {
        cpu: ReservedCpu {
            cpu_shares: r.cpu_mhz,
            reserved_cpu_cores: &r.cores,
        },
        memory: MemoryMb {
            memory_mb: r.memory_mb,
        },
        disk: DiskMb { disk_mb: r.disk_mb },
        networks: ReservedNetworks {
            reserved_host_ports: "",
        },
    })
    .unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NodeResourcesAnswer<'a> {
    cpu: NodeCpu<'a>,
    memory: MemoryMb,
    disk: DiskMb,
    networks: [(); 0],
    min_dynamic_port: u16,
    max_dynamic_port: u16,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NodeCpu<'a> {
    cpu_shares: u64,
    total_cpu_cores: u32,
    reservable_cpu_cores: &'a [u32],
}

#[derive(Serialize)]
struct MemoryMb {
    #[serde(rename = "MemoryMB")]
    memory_mb: u64,
}

#[derive(Serialize)]
struct DiskMb {
    #[serde(rename = "DiskMB")]
    disk_mb: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ReservedAnswer<'a> {
    cpu: ReservedCpu<'a>,
    memory: MemoryMb,
    disk: DiskMb,
    networks: ReservedNetworks,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ReservedCpu<'a> {
    cpu_shares: u64,
    reserved_cpu_cores: &'a [u32],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ReservedNetworks {
    reserved_host_ports: &'static str,
}
