//! Host ports for allocations (jobspec.md, "`network` blocks"): which ports of this node are
//! taken, and the ports a new allocation of a group gets — its static ports as asked, its dynamic
//! ones picked from `client { min_dynamic_port max_dynamic_port }` — as Nomad's `NetworkIndex`
//! does on a server.
//!
//! A port is taken while an allocation that holds it is live: its desired status is `run` and
//! not all of its tasks are dead (Nomad frees a terminal allocation's ports the same way; the
//! allocation manager builds the node view's held ports so). The agent's own HTTP port is always
//! taken. The ports are assigned in the plan of the registration that places the allocations
//! (`super::schedule`), which the allocation manager computes under its registry lock, so two
//! registrations cannot be given the same port and a registration that cannot get its ports
//! changes nothing. The ports are then kept with the allocation (in the state file too) and
//! never picked again while it lives; an agent restart does not change them.
//!
//! A group that cannot get its ports fails with Nomad's placement text ([`PortsUnavailable`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::feasible::{Placement, Reason};
use crate::jobspec::network::{
    AllocatedPort, NetworkResource, DEFAULT_HOST_NETWORK, DEFAULT_MAX_DYNAMIC_PORT,
    DEFAULT_MIN_DYNAMIC_PORT,
};

/// Random picks tried before a dynamic port is looked for among every free one (Nomad's
/// `maxRandPortAttempts`): a pick is cheap while the range is mostly free.
const RANDOM_TRIES: usize = 20;

/// What the node offers allocations' networks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSettings {
    /// The address of the host network, `HostIP` of every port (docs/jobspec.md says how the
    /// agent chooses it).
    pub host_ip: String,
    pub min_dynamic_port: u16,
    pub max_dynamic_port: u16,
    /// Ports no allocation gets: the agent's own HTTP port.
    pub reserved: Vec<u16>,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            host_ip: "127.0.0.1".to_string(),
            min_dynamic_port: DEFAULT_MIN_DYNAMIC_PORT,
            max_dynamic_port: DEFAULT_MAX_DYNAMIC_PORT,
            reserved: Vec::new(),
        }
    }
}

/// Why a group cannot get its ports on this node. `dimension` is Nomad's exhausted dimension
/// (`network: reserved port collision http=8080`, `network: dynamic port selection failed`); the
/// message is Nomad's placement-failure line for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Dimension {dimension:?} exhausted on 1 nodes")]
pub struct PortsUnavailable {
    pub dimension: String,
}

impl PortsUnavailable {
    fn new(reason: String) -> PortsUnavailable {
        PortsUnavailable {
            dimension: format!("network: {reason}"),
        }
    }
}

/// The ports of this node that are taken, and the picking of new ones.
#[derive(Debug, Clone)]
pub struct PortIndex {
    used: HashSet<u16>,
    min: u16,
    max: u16,
    host_ip: String,
}

impl PortIndex {
    /// An index with only the node's reserved ports taken.
    pub fn new(settings: &NetworkSettings) -> PortIndex {
        PortIndex {
            used: settings.reserved.iter().copied().collect(),
            min: settings.min_dynamic_port,
            max: settings.max_dynamic_port,
            host_ip: settings.host_ip.clone(),
        }
    }

    /// Marks an allocation's ports taken.
    pub fn add(&mut self, ports: &[AllocatedPort]) {
        self.used.extend(ports.iter().map(|p| p.value));
    }

    /// The ports one allocation of a group with `networks` gets, marked taken; `pick(n)` is a
    /// random number below `n` (`fastrand` in the agent, a fixed sequence in tests). Nothing is
    /// marked when the group cannot get them all.
    pub fn assign(
        &mut self,
        networks: &[NetworkResource],
        pick: &mut dyn FnMut(usize) -> usize,
    ) -> Result<Vec<AllocatedPort>, PortsUnavailable> {
        let mut offer: Vec<AllocatedPort> = Vec::new();
        for n in networks {
            for p in &n.reserved_ports {
                self.host_network(&p.host_network)?;
                if !p.ignore_collision && self.used.contains(&p.value) {
                    return Err(PortsUnavailable::new(format!(
                        "reserved port collision {}={}",
                        p.label, p.value
                    )));
                }
                offer.push(AllocatedPort {
                    label: p.label.clone(),
                    value: p.value,
                    to: if p.to == -1 {
                        p.value
                    } else {
                        p.to.max(0) as u16
                    },
                    host_ip: self.host_ip.clone(),
                });
            }
        }
        // A dynamic port avoids the group's own static ports and the ports picked before it.
        let mut taken: BTreeSet<u16> = offer.iter().map(|p| p.value).collect();
        for n in networks {
            for p in &n.dynamic_ports {
                self.host_network(&p.host_network)?;
                let value = self.pick_dynamic(&taken, pick).ok_or_else(|| {
                    PortsUnavailable::new("dynamic port selection failed".to_string())
                })?;
                taken.insert(value);
                offer.push(AllocatedPort {
                    label: p.label.clone(),
                    value,
                    to: if p.to == -1 {
                        value
                    } else {
                        p.to.max(0) as u16
                    },
                    host_ip: self.host_ip.clone(),
                });
            }
        }
        for (p, asked) in offer
            .iter()
            .zip(networks.iter().flat_map(|n| &n.reserved_ports))
        {
            // A port that may collide is not taken from the others either.
            if !asked.ignore_collision {
                self.used.insert(p.value);
            }
        }
        let statics = networks.iter().map(|n| n.reserved_ports.len()).sum();
        self.used.extend(offer[statics..].iter().map(|p| p.value));
        Ok(offer)
    }

    /// This node has one host network, [`DEFAULT_HOST_NETWORK`] (Nomad's words when a node has
    /// no address on the one asked).
    fn host_network(&self, name: &str) -> Result<(), PortsUnavailable> {
        if name == DEFAULT_HOST_NETWORK {
            return Ok(());
        }
        Err(PortsUnavailable::new(format!(
            "no addresses available for {name} network"
        )))
    }

    fn free(&self, port: u16, taken: &BTreeSet<u16>) -> bool {
        !self.used.contains(&port) && !taken.contains(&port)
    }

    /// A free port of the dynamic range: random picks first, then a random one of all free ports.
    fn pick_dynamic(
        &self,
        taken: &BTreeSet<u16>,
        pick: &mut dyn FnMut(usize) -> usize,
    ) -> Option<u16> {
        let span = usize::from(self.max - self.min) + 1;
        for _ in 0..RANDOM_TRIES {
            let port = self.min + pick(span) as u16;
            if self.free(port, taken) {
                return Some(port);
            }
        }
        let free: Vec<u16> = (self.min..=self.max)
            .filter(|p| self.free(*p, taken))
            .collect();
        (!free.is_empty()).then(|| free[pick(free.len())])
    }
}

/// The host ports of each allocation `placement` adds, group by group, in the job's group
/// order: an allocation that cannot get its ports (a static port another allocation holds, the
/// dynamic range used up) is refused with Nomad's dimension, and so is the rest of its group,
/// while those before it keep theirs. Ports are marked taken in `index` as they are given;
/// `pick` as [`PortIndex::assign`] takes it.
pub fn assign_ports(
    index: &mut PortIndex,
    job: &crate::jobspec::Job,
    placement: &mut Placement,
    pick: &mut dyn FnMut(usize) -> usize,
) -> BTreeMap<String, Vec<Vec<AllocatedPort>>> {
    let mut given = BTreeMap::new();
    for group in &job.task_groups {
        let wanted = placement.place.get(&group.name).copied().unwrap_or(0);
        let mut ports = Vec::new();
        for _ in 0..wanted {
            match index.assign(&group.networks, pick) {
                Ok(p) => ports.push(p),
                Err(e) => {
                    let refused = wanted - ports.len() as u32;
                    placement.refuse_some(&group.name, refused, Reason::Dimension(e.dimension));
                    break;
                }
            }
        }
        given.insert(group.name.clone(), ports);
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::network::Port;

    fn port(label: &str, value: u16, to: i32) -> Port {
        Port {
            label: label.to_string(),
            value,
            to,
            host_network: DEFAULT_HOST_NETWORK.to_string(),
            ignore_collision: false,
        }
    }

    fn net(reserved: Vec<Port>, dynamic: Vec<Port>) -> Vec<NetworkResource> {
        vec![NetworkResource {
            mbits: 0,
            cni: None,
            mode: "host".to_string(),
            ip: String::new(),
            reserved_ports: reserved,
            dynamic_ports: dynamic,
        }]
    }

    fn settings(min: u16, max: u16, reserved: Vec<u16>) -> NetworkSettings {
        NetworkSettings {
            host_ip: "127.0.0.1".to_string(),
            min_dynamic_port: min,
            max_dynamic_port: max,
            reserved,
        }
    }

    /// Picks the first candidate every time: the lowest port, then the first free one.
    fn first(_: usize) -> usize {
        0
    }

    #[test]
    fn static_ports_as_asked_and_dynamic_ones_from_the_range() {
        let mut index = PortIndex::new(&settings(20000, 20002, vec![]));
        let asked = net(
            vec![port("http", 8080, 0)],
            vec![port("a", 0, 0), port("b", 0, -1), port("c", 0, 9000)],
        );
        let got = index.assign(&asked, &mut first).unwrap();
        let values: Vec<(u16, u16)> = got.iter().map(|p| (p.value, p.to)).collect();
        assert_eq!(
            values,
            [(8080, 0), (20000, 0), (20001, 20001), (20002, 9000)]
        );
        assert!(got.iter().all(|p| p.host_ip == "127.0.0.1"));
        // The range is used up: Nomad's words, and nothing more is taken.
        let err = index.assign(&net(vec![], vec![port("d", 0, 0)]), &mut first);
        assert_eq!(
            err.unwrap_err().to_string(),
            "Dimension \"network: dynamic port selection failed\" exhausted on 1 nodes"
        );
        // The static port is held by the first allocation.
        let err = index
            .assign(&net(vec![port("web", 8080, 0)], vec![]), &mut first)
            .unwrap_err();
        assert_eq!(err.dimension, "network: reserved port collision web=8080");
        assert_eq!(
            err.to_string(),
            "Dimension \"network: reserved port collision web=8080\" exhausted on 1 nodes"
        );
    }

    #[test]
    fn a_failed_assignment_takes_nothing() {
        let mut index = PortIndex::new(&settings(20000, 20000, vec![]));
        let asked = net(
            vec![port("http", 8080, 0)],
            vec![port("a", 0, 0), port("b", 0, 0)],
        );
        assert!(index.assign(&asked, &mut first).is_err());
        let again = net(vec![port("http", 8080, 0)], vec![port("a", 0, 0)]);
        assert_eq!(index.assign(&again, &mut first).unwrap().len(), 2);
    }

    #[test]
    fn reserved_ports_and_other_host_networks_are_refused() {
        let mut index = PortIndex::new(&settings(4646, 4647, vec![4646]));
        let err = index
            .assign(&net(vec![port("api", 4646, 0)], vec![]), &mut first)
            .unwrap_err();
        assert_eq!(err.dimension, "network: reserved port collision api=4646");
        // The agent's port is skipped by dynamic picks too.
        let got = index
            .assign(&net(vec![], vec![port("x", 0, 0)]), &mut first)
            .unwrap();
        assert_eq!(got[0].value, 4647);
        let mut public = port("p", 0, 0);
        public.host_network = "public".to_string();
        let err = index
            .assign(&net(vec![], vec![public]), &mut first)
            .unwrap_err();
        assert_eq!(
            err.dimension,
            "network: no addresses available for public network"
        );
    }

    #[test]
    fn ignore_collision_shares_a_static_port() {
        let mut index = PortIndex::new(&settings(20000, 20010, vec![]));
        let mut shared = port("dns", 53, 0);
        shared.ignore_collision = true;
        for _ in 0..2 {
            index
                .assign(&net(vec![shared.clone()], vec![]), &mut first)
                .unwrap();
        }
        index
            .assign(&net(vec![port("dns", 53, 0)], vec![]), &mut first)
            .unwrap();
    }

    /// A state file written before ports existed: its allocations load with none, and one
    /// without ports is written as before.
    #[test]
    fn a_record_from_before_ports_has_none() {
        let old = serde_json::json!({
            "ID": "a", "JobID": "j", "TaskGroup": "g", "Name": "j.g[0]", "Index": 0,
            "DesiredStatus": "run", "CreateTime": 1, "ModifyTime": 2, "TaskStates": {}
        });
        let rec: crate::records::AllocRecord = serde_json::from_value(old.clone()).unwrap();
        assert!(rec.ports.is_empty());
        assert_eq!(serde_json::to_value(&rec).unwrap(), old);
    }

    /// Random picks that keep hitting taken ports fall back to the free ones.
    #[test]
    fn a_crowded_range_still_finds_the_free_port() {
        let mut index = PortIndex::new(&settings(30000, 30099, vec![]));
        index.add(
            &(30000..30100)
                .filter(|p| *p != 30077)
                .map(|p| AllocatedPort {
                    label: "x".into(),
                    value: p,
                    to: 0,
                    host_ip: "127.0.0.1".into(),
                })
                .collect::<Vec<_>>(),
        );
        let got = index
            .assign(&net(vec![], vec![port("a", 0, 0)]), &mut first)
            .unwrap();
        assert_eq!(got[0].value, 30077);
    }
}
