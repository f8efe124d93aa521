//! A group's `network` block (jobspec.md, "`network` blocks") and the ports a node gives it.
//!
//! ```text
//! network { mode = "host"  port "<label>" { static = N  to = M  host_network = "default" } }
//! ```
//!
//! Only `mode = "host"` runs here: the group's tasks share the host's network namespace and its
//! ports. `bridge`, `none` and `cni/*` would give the tasks a namespace of their own, which this
//! node does not make yet, so they are refused (with `dns` and `hostname`, which only mean
//! something there) rather than run in the host's namespace unannounced. A port with `static` is
//! one of Nomad's `ReservedPorts`, one without is a `DynamicPorts` entry whose value the node
//! picks when it places the allocation (`alloc::ports`).
//!
//! HCL is read here ([`read_hcl`]) into the raw form both front-ends share ([`RawNetwork`]);
//! JSON deserializes into it directly (`TaskGroups[].Networks`); [`networks`] validates both
//! into [`NetworkResource`]s, which serialize to Nomad's API shape. [`AllocatedPort`] is Nomad's
//! `AllocatedPortMapping`, what a placed allocation got; [`port_env`] is the `NOMAD_*_<label>`
//! variables its tasks see.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hcl::edit::expr::{Expression, UnaryOperator};
use hcl::edit::structure::{Attribute, Block};
use hcl::edit::Span;
use serde::{Deserialize, Deserializer, Serialize};

use super::invalid;
use super::shared::{warn_extra, Extra};
use super::{JobspecError, TaskGroup};
use crate::hcl::{Items, Source};

/// The one host network of this node; a port's `host_network` when it names none.
pub const DEFAULT_HOST_NETWORK: &str = "default";

/// Nomad's defaults for the agent's `client { min_dynamic_port max_dynamic_port }`.
pub const DEFAULT_MIN_DYNAMIC_PORT: u16 = 20_000;
pub const DEFAULT_MAX_DYNAMIC_PORT: u16 = 32_000;

/// The one mode this node runs.
pub const HOST_MODE: &str = "host";

/// A group's network, in Nomad's API shape (`NetworkResource`). In a job it is what was asked
/// (dynamic ports have no value yet); in an allocation's `AllocatedResources` it carries the
/// host IP and the values given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkResource {
    pub mode: String,
    /// The host address, in an allocation's view only.
    #[serde(rename = "IP", default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    #[serde(default)]
    pub reserved_ports: Vec<Port>,
    #[serde(default)]
    pub dynamic_ports: Vec<Port>,
    /// `mbits` (deprecated in Nomad) and `cni { args }`: no effect on this node
    /// ([`super::settings`]), kept as written; not written when unset.
    #[serde(rename = "MBits", default, skip_serializing_if = "is_zero")]
    pub mbits: u32,
    #[serde(rename = "CNI", default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<serde_json::Value>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One `port "<label>"` (Nomad's `Port`). `value` is the static port, or 0 for a dynamic one
/// until a node gives it one; `to` is the port inside the task (0: the same, -1 for a dynamic
/// port: the value given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Port {
    pub label: String,
    pub value: u16,
    pub to: i32,
    pub host_network: String,
    /// A static port that other allocations may hold too (Nomad 1.9's `ignore_collision`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_collision: bool,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// A port as an allocation got it (Nomad's `AllocatedPortMapping`): the host port `value` on
/// `host_ip`, mapped to `to` inside the task (0: not mapped, the same port).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocatedPort {
    pub label: String,
    pub value: u16,
    pub to: u16,
    #[serde(rename = "HostIP")]
    pub host_ip: String,
}

impl AllocatedPort {
    /// The port the task listens on: `to` when the port is mapped, else the host port. This is
    /// `NOMAD_PORT_<label>`, and a docker task's container port.
    pub fn task_port(&self) -> u16 {
        if self.to > 0 {
            self.to
        } else {
            self.value
        }
    }
}

/// The variables a task of an allocation with `ports` gets, as Nomad's `taskenv` builds them:
/// `NOMAD_PORT_` and `NOMAD_ALLOC_PORT_` are the task's side of the port, `NOMAD_HOST_PORT_` the
/// host's, `NOMAD_IP_`/`NOMAD_HOST_IP_` the host address and `NOMAD_ADDR_`/`NOMAD_HOST_ADDR_` both
/// together. A label is cleaned in the names as Nomad cleans it ([`crate::util::env_var_suffix`]).
pub fn port_env(ports: &[AllocatedPort]) -> Vec<(String, String)> {
    let mut env = Vec::with_capacity(ports.len() * 7);
    for p in ports {
        let label = crate::util::env_var_suffix(&p.label);
        let addr = match p.host_ip.parse::<IpAddr>() {
            Ok(IpAddr::V6(ip)) => format!("[{ip}]:{}", p.value),
            _ => format!("{}:{}", p.host_ip, p.value),
        };
        let task_port = p.task_port().to_string();
        env.extend([
            (format!("NOMAD_IP_{label}"), p.host_ip.clone()),
            (format!("NOMAD_HOST_IP_{label}"), p.host_ip.clone()),
            (format!("NOMAD_PORT_{label}"), task_port.clone()),
            (format!("NOMAD_ALLOC_PORT_{label}"), task_port),
            (format!("NOMAD_HOST_PORT_{label}"), p.value.to_string()),
            (format!("NOMAD_ADDR_{label}"), addr.clone()),
            (format!("NOMAD_HOST_ADDR_{label}"), addr),
        ]);
    }
    env
}

/// The group's networks as an allocation shows them (`AllocatedResources.Shared.Networks`):
/// the asked ones with the host IP and the values `ports` gave.
pub fn allocated_networks(
    asked: &[NetworkResource],
    ports: &[AllocatedPort],
) -> Vec<NetworkResource> {
    asked
        .iter()
        .map(|n| {
            let mut n = n.clone();
            let given = |p: &mut Port| {
                if let Some(a) = ports.iter().find(|a| a.label == p.label) {
                    p.value = a.value;
                    p.to = i32::from(a.to);
                }
            };
            n.reserved_ports.iter_mut().for_each(given);
            n.dynamic_ports.iter_mut().for_each(given);
            n.ip = ports.first().map(|p| p.host_ip.clone()).unwrap_or_default();
            n
        })
        .collect()
}

// ---- the raw form, shared by HCL and JSON ----

/// A `network` block or a `Networks[]` object as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a NetworkResource object")]
pub(crate) struct RawNetwork {
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub mode: Option<String>,
    pub reserved_ports: Option<Vec<RawPort>>,
    pub dynamic_ports: Option<Vec<RawPort>>,
    #[serde(rename = "MBits")]
    pub mbits: Option<u32>,
    /// `{"Args": null}` is Go's "no CNI arguments", read as unset ([`super::settings`]).
    #[serde(rename = "CNI")]
    pub cni: Option<serde_json::Value>,
    /// `hostname`, `dns`: set only where they are refused (HCL).
    #[serde(skip)]
    pub refused: Option<String>,
    /// Where the block is, for messages: HCL's block and line; JSON's path is given to
    /// [`networks`] instead.
    #[serde(skip)]
    pub at: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One port as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Port object")]
pub(crate) struct RawPort {
    pub label: Option<String>,
    pub value: Option<i64>,
    pub to: Option<i64>,
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub host_network: Option<String>,
    pub ignore_collision: Option<bool>,
    /// HCL: `port "http" of group "g" at line 7`.
    #[serde(skip)]
    pub at: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn empty_is_unset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// The warnings for fields of a group's `Networks` that nodeward ignores (JSON only).
pub(crate) fn ignored_fields(out: &mut Vec<String>, path: &str, raw: &Option<Vec<RawNetwork>>) {
    for (i, n) in raw.iter().flatten().enumerate() {
        let path = format!("{path}.Networks[{i}]");
        warn_extra(out, &format!("{path}."), &n.extra);
        let ports = [
            ("ReservedPorts", &n.reserved_ports),
            ("DynamicPorts", &n.dynamic_ports),
        ];
        for (kind, list) in ports {
            for (j, p) in list.iter().flatten().enumerate() {
                warn_extra(out, &format!("{path}.{kind}[{j}]."), &p.extra);
            }
        }
    }
}

/// Validates a group's raw networks; `path` is the group's JSON path, `group` its name.
pub(crate) fn networks(
    path: &str,
    group: &str,
    raw: Option<Vec<RawNetwork>>,
) -> Result<Vec<NetworkResource>, JobspecError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > 1 {
        return Err(invalid(format!(
            "group {group:?}: only one network block is allowed, got {}",
            raw.len()
        )));
    }
    let mut out = Vec::new();
    for (i, n) in raw.into_iter().enumerate() {
        let at =
            n.at.clone()
                .unwrap_or_else(|| format!("group {group:?}: {path}.Networks[{i}]"));
        let mode = n.mode.as_deref().unwrap_or(HOST_MODE);
        check_mode(&at, mode)?;
        if let Some(what) = &n.refused {
            return Err(not_supported(&at, what));
        }
        // JSON's spelling of HCL's `dns` block and `hostname`: refused alike once set.
        for key in ["DNS", "Hostname"] {
            let set = match n.extra.get(key) {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::String(s)) => !s.is_empty(),
                Some(serde_json::Value::Object(o)) => !o.is_empty(),
                Some(_) => true,
            };
            if set {
                return Err(not_supported(&at, &format!("{key:?}")));
            }
        }
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut statics: BTreeMap<u16, String> = BTreeMap::new();
        let mut reserved = Vec::new();
        let mut dynamic = Vec::new();
        let lists = [
            ("ReservedPorts", true, n.reserved_ports.unwrap_or_default()),
            ("DynamicPorts", false, n.dynamic_ports.unwrap_or_default()),
        ];
        for (kind, is_static, list) in lists {
            for (j, p) in list.into_iter().enumerate() {
                let at = p.at.clone().unwrap_or_else(|| {
                    format!("group {group:?}: {path}.Networks[{i}].{kind}[{j}]")
                });
                let port = port(&at, is_static, p)?;
                if let Some(first) = seen.insert(port.label.clone(), at.clone()) {
                    return Err(invalid(format!(
                        "{at}: port label {:?} is already used by {first}",
                        port.label
                    )));
                }
                if is_static {
                    if let Some(other) = statics.insert(port.value, port.label.clone()) {
                        return Err(invalid(format!(
                            "{at}: static port {} is already reserved by port {other:?}",
                            port.value
                        )));
                    }
                    reserved.push(port);
                } else {
                    dynamic.push(port);
                }
            }
        }
        out.push(NetworkResource {
            mode: mode.to_string(),
            ip: String::new(),
            reserved_ports: reserved,
            dynamic_ports: dynamic,
            mbits: n.mbits.unwrap_or(0),
            cni: n.cni.filter(|c| !super::settings::cni_unset(c)),
        });
    }
    Ok(out)
}

fn not_supported(at: &str, what: &str) -> JobspecError {
    invalid(format!(
        "{at}: {what} is not supported on this node yet: only mode \"host\" networks run here, \
         where a group's tasks share the host's network and its ports"
    ))
}

/// `host` runs; Nomad's other modes are refused as not supported yet; anything else is invalid.
fn check_mode(at: &str, mode: &str) -> Result<(), JobspecError> {
    match mode {
        HOST_MODE => Ok(()),
        "bridge" | "none" => Err(not_supported(at, &format!("network mode {mode:?}"))),
        m if m.starts_with("cni/") && m.len() > "cni/".len() => {
            Err(not_supported(at, &format!("network mode {mode:?}")))
        }
        m => Err(invalid(format!(
            "{at}: invalid network mode {m:?}: Nomad's modes are \"host\", \"bridge\", \"none\" \
             and \"cni/<network>\""
        ))),
    }
}

/// One port: a label of `[A-Za-z0-9_.-]`, a static value from 1 to 65535, `to` from -1 to 65535.
fn port(at: &str, is_static: bool, raw: RawPort) -> Result<Port, JobspecError> {
    let label = raw.label.unwrap_or_default();
    let label_ok = !label.is_empty()
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !label_ok {
        return Err(invalid(format!(
            "{at}: port label {label:?} must be 1 or more letters, digits, '_', '-' or '.'"
        )));
    }
    let value = if is_static {
        match raw.value {
            Some(v @ 1..=65535) => v as u16,
            other => {
                return Err(invalid(format!(
                    "{at}: static port must be from 1 to 65535, got {}",
                    other.unwrap_or(0)
                )))
            }
        }
    } else {
        // A jobspec's dynamic port has no value: the node picks it.
        0
    };
    let to = match raw.to.unwrap_or(0) {
        t @ -1..=65535 => t as i32,
        t => {
            return Err(invalid(format!(
                "{at}: port {label:?} cannot be mapped to {t}: \"to\" must be from -1 to 65535"
            )))
        }
    };
    let ignore_collision = raw.ignore_collision.unwrap_or(false);
    if ignore_collision && !is_static {
        return Err(invalid(format!(
            "{at}: ignore_collision is only for static ports"
        )));
    }
    Ok(Port {
        label,
        value,
        to,
        host_network: raw
            .host_network
            .unwrap_or_else(|| DEFAULT_HOST_NETWORK.to_string()),
        ignore_collision,
    })
}

/// Each docker task's `ports` must name ports of its group's network, as Nomad's docker driver
/// requires (`Port "<label>" not found, check network block`).
pub(crate) fn check_docker_ports(group: &TaskGroup) -> Result<(), JobspecError> {
    let labels: Vec<&str> = group
        .networks
        .iter()
        .flat_map(|n| n.reserved_ports.iter().chain(&n.dynamic_ports))
        .map(|p| p.label.as_str())
        .collect();
    for task in &group.tasks {
        if let Some(missing) = task
            .config
            .docker
            .ports
            .iter()
            .find(|l| !labels.contains(&l.as_str()))
        {
            return Err(invalid(format!(
                "task {:?}: docker config ports: Port {missing:?} not found, check network block \
                 of group {:?}",
                task.name, group.name
            )));
        }
    }
    Ok(())
}

// ---- HCL ----

/// A group's `network` blocks, read from HCL; `group` names the group in messages.
pub(crate) fn read_hcl(
    src: &Source,
    group: &str,
    blocks: Vec<&Block>,
) -> Result<Option<Vec<RawNetwork>>, JobspecError> {
    if blocks.is_empty() {
        return Ok(None);
    }
    blocks
        .into_iter()
        .map(|b| network_block(src, group, b))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn network_block(src: &Source, group: &str, block: &Block) -> Result<RawNetwork, JobspecError> {
    src.no_labels(group, block)?;
    let at = format!(
        "network block of {group} at line {}",
        src.line(block.span())
    );
    let what = format!("network block of {group}");
    let items = src.items(
        &what,
        &block.body,
        &["mode", "hostname", "mbits"],
        &["port", "dns", "cni"],
    )?;
    let mode = src.opt_string(&items, "mode")?;
    if let (Some(m), Some(attr)) = (&mode, items.attr("mode")) {
        // Checked here, where the line of `mode` is known.
        let at = format!("network block of {group} at line {}", src.line(attr.span()));
        check_mode(&at, m)?;
    }
    // `mbits` (deprecated in Nomad, no effect since 1.0) and `cni { args }`: warned as JSON's.
    let (mbits, cni) = super::settings::read_network_hcl(src, &what, &items)?;
    let refused = if let Some(attr) = items.attr("hostname") {
        Some(format!("\"hostname\" (line {})", src.line(attr.span())))
    } else {
        items
            .blocks("dns")
            .first()
            .map(|b| format!("the \"dns\" block (line {})", src.line(b.span())))
    };
    let mut reserved = Vec::new();
    let mut dynamic = Vec::new();
    for pb in items.blocks("port") {
        let (is_static, port) = port_block(src, group, pb)?;
        if is_static {
            reserved.push(port);
        } else {
            dynamic.push(port);
        }
    }
    Ok(RawNetwork {
        mode,
        reserved_ports: Some(reserved),
        dynamic_ports: Some(dynamic),
        mbits,
        cni,
        refused,
        at: Some(at),
        extra: Default::default(),
    })
}

/// A `port "<label>" { static to host_network ignore_collision }` block; true when static.
fn port_block(src: &Source, group: &str, block: &Block) -> Result<(bool, RawPort), JobspecError> {
    let label = src.label(&format!("network block of {group}"), block)?;
    let at = format!(
        "port {label:?} of {group} at line {}",
        src.line(block.span())
    );
    let what = format!("port {label:?} of {group}");
    let items = src.items(
        &what,
        &block.body,
        &["static", "to", "host_network", "ignore_collision"],
        &[],
    )?;
    let value = number(src, &items, "static")?;
    // `static = 0` is how HCL1 jobspecs often wrote a dynamic port.
    let is_static = value.is_some_and(|v| v != 0);
    Ok((
        is_static,
        RawPort {
            label: Some(label),
            value: value.filter(|_| is_static),
            to: number(src, &items, "to")?,
            host_network: src.opt_string(&items, "host_network")?,
            ignore_collision: src.opt_bool(&items, "ignore_collision")?,
            at: Some(at),
            extra: Extra::new(),
        },
    ))
}

/// A whole number, negative or not; a string of digits too (`to = "8080"`), which HCL2 turns
/// into a number where one is expected, as Nomad reads it.
fn number(src: &Source, items: &Items, key: &str) -> Result<Option<i64>, JobspecError> {
    let Some(attr) = items.attr(key) else {
        return Ok(None);
    };
    whole(&attr.value)
        .map(Some)
        .ok_or_else(|| wrong(src, items, attr))
}

fn whole(expr: &Expression) -> Option<i64> {
    match expr {
        Expression::Number(n) => n.value().as_i64(),
        Expression::String(s) => s.value().trim().parse().ok(),
        Expression::UnaryOp(op) if *op.operator.value() == UnaryOperator::Neg => {
            whole(&op.expr).map(|v| -v)
        }
        Expression::Parenthesis(p) => whole(p.inner()),
        _ => None,
    }
}

fn wrong(src: &Source, items: &Items, attr: &Attribute) -> JobspecError {
    src.wrong_type(&items.what, attr, "a whole number").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(label: &str, value: u16, to: u16, ip: &str) -> AllocatedPort {
        AllocatedPort {
            label: label.to_string(),
            value,
            to,
            host_ip: ip.to_string(),
        }
    }

    /// Nomad's `addPorts`: the task side in `NOMAD_PORT_`, the host side in the rest.
    #[test]
    fn port_env_follows_nomad() {
        let env: BTreeMap<String, String> = port_env(&[
            mapped("http", 8080, 0, "127.0.0.1"),
            mapped("db-main", 23456, 5432, "::1"),
        ])
        .into_iter()
        .collect();
        let want = [
            ("NOMAD_PORT_http", "8080"),
            ("NOMAD_ALLOC_PORT_http", "8080"),
            ("NOMAD_HOST_PORT_http", "8080"),
            ("NOMAD_IP_http", "127.0.0.1"),
            ("NOMAD_HOST_IP_http", "127.0.0.1"),
            ("NOMAD_ADDR_http", "127.0.0.1:8080"),
            ("NOMAD_HOST_ADDR_http", "127.0.0.1:8080"),
            ("NOMAD_PORT_db_main", "5432"),
            ("NOMAD_ALLOC_PORT_db_main", "5432"),
            ("NOMAD_HOST_PORT_db_main", "23456"),
            ("NOMAD_IP_db_main", "::1"),
            ("NOMAD_ADDR_db_main", "[::1]:23456"),
            ("NOMAD_HOST_ADDR_db_main", "[::1]:23456"),
        ];
        for (k, v) in want {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(env.len(), 14);
    }

    /// A job with one raw_exec task and `network` spliced into its group.
    fn hcl_job(network: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n{network}\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n    }}\n  }}\n}}\n"
        )
    }

    fn parse_hcl(network: &str) -> Result<Vec<NetworkResource>, JobspecError> {
        super::super::hcl::parse_job(&hcl_job(network))
            .map(|p| p.job.task_groups[0].networks.clone())
    }

    fn err(network: &str) -> String {
        parse_hcl(network).expect_err("refused").to_string()
    }

    #[test]
    fn hcl_and_json_give_the_same_network() {
        let hcl = r#"    network {
      mode = "host"
      port "http" {
        static = 8080
        to     = 80
      }
      port "admin" {}
      port "grpc" {
        to = -1
        host_network = "default"
      }
      port "legacy" { static = 0 }
    }"#;
        let nets = parse_hcl(hcl).unwrap();
        assert_eq!(nets.len(), 1);
        let n = &nets[0];
        assert_eq!(n.mode, "host");
        assert_eq!(
            n.reserved_ports
                .iter()
                .map(|p| (p.label.as_str(), p.value, p.to))
                .collect::<Vec<_>>(),
            [("http", 8080, 80)]
        );
        assert_eq!(
            n.dynamic_ports
                .iter()
                .map(|p| (p.label.as_str(), p.value, p.to, p.host_network.as_str()))
                .collect::<Vec<_>>(),
            [
                ("admin", 0, 0, "default"),
                ("grpc", 0, -1, "default"),
                ("legacy", 0, 0, "default")
            ]
        );
        // Nomad's API shape, as `nomad job inspect` writes it, reads the same.
        let json = serde_json::json!({"Job": {"ID": "j", "TaskGroups": [{
            "Name": "g",
            "Networks": [{
                "Mode": "host", "Device": "", "CIDR": "", "IP": "", "MBits": 0, "DNS": null,
                "ReservedPorts": [{"Label": "http", "Value": 8080, "To": 80, "HostNetwork": "default"}],
                "DynamicPorts": [
                    {"Label": "admin", "Value": 0, "To": 0, "HostNetwork": "default"},
                    {"Label": "grpc", "Value": 0, "To": -1, "HostNetwork": ""},
                    {"Label": "legacy", "Value": 0, "To": 0}
                ]
            }],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]
        }]}});
        let parsed = super::super::json::parse_job(json.to_string().as_bytes()).unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        assert_eq!(parsed.job.task_groups[0].networks, nets);
        // And the job as stored and shown reads back unchanged.
        let job = super::super::hcl::parse_job(&hcl_job(hcl)).unwrap().job;
        let text = serde_json::to_string(&job).unwrap();
        assert!(
            text.contains(r#""Networks":[{"Mode":"host","ReservedPorts":[{"Label":"http","Value":8080,"To":80,"HostNetwork":"default"}],"#),
            "{text}"
        );
        assert_eq!(
            super::super::json::parse_job(text.as_bytes()).unwrap().job,
            job
        );
        // No network: no field, as before networks existed.
        let plain = super::super::hcl::parse_job(&hcl_job("")).unwrap().job;
        assert!(!serde_json::to_string(&plain).unwrap().contains("Networks"));
    }

    #[test]
    fn other_modes_are_refused_with_the_block_and_line() {
        assert_eq!(
            err("    network {\n      mode = \"bridge\"\n    }"),
            "network block of group \"g\" at line 4: network mode \"bridge\" is not supported \
             on this node yet: only mode \"host\" networks run here, where a group's tasks share \
             the host's network and its ports"
        );
        assert!(err("    network { mode = \"cni/mynet\" }")
            .contains("network mode \"cni/mynet\" is not supported on this node yet"));
        assert!(err("    network { mode = \"none\" }")
            .contains("at line 3: network mode \"none\" is not supported"));
        assert!(err("    network { mode = \"weird\" }").contains("invalid network mode \"weird\""));
        assert!(err("    network {\n dns { servers = [\"1.1.1.1\"] }\n }")
            .contains("the \"dns\" block (line 4) is not supported on this node yet"));
        let json = serde_json::json!({"ID": "j", "TaskGroups": [{
            "Name": "g", "Networks": [{"Mode": "bridge"}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]
        }]});
        let e = super::super::json::parse_job(json.to_string().as_bytes()).unwrap_err();
        assert!(
            e.to_string().starts_with("group \"g\": TaskGroups[0].Networks[0]: network mode \"bridge\" is not supported on this node yet"),
            "{e}"
        );
        let json = serde_json::json!({"ID": "j", "TaskGroups": [{
            "Name": "g", "Networks": [{"Mode": "host", "DNS": {"Servers": ["1.1.1.1"]}}],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]
        }]});
        let e = super::super::json::parse_job(json.to_string().as_bytes()).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "group \"g\": TaskGroups[0].Networks[0]: \"DNS\" is not supported on this node yet"
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_ports_are_named() {
        let cases = [
            ("port \"a\" { static = 70000 }", "port \"a\" of group \"g\" at line 4: static port must be from 1 to 65535, got 70000"),
            ("port \"a\" { to = -2 }", "port \"a\" of group \"g\" at line 4: port \"a\" cannot be mapped to -2: \"to\" must be from -1 to 65535"),
            ("port \"a b\" {}", "port \"a b\" of group \"g\" at line 4: port label \"a b\" must be 1 or more letters, digits, '_', '-' or '.'"),
            ("port \"a\" {}\n port \"a\" { static = 1 }", "port \"a\" of group \"g\" at line 4: port label \"a\" is already used by port \"a\" of group \"g\" at line 5"),
            ("port \"a\" { static = 80 }\n port \"b\" { static = 80 }", "port \"b\" of group \"g\" at line 5: static port 80 is already reserved by port \"a\""),
            ("port \"a\" { static = true }", "attribute \"static\" in port \"a\" of group \"g\" at line 4 must be a whole number"),
        ];
        for (ports, want) in cases {
            assert_eq!(
                err(&format!("    network {{\n {ports}\n }}")),
                want,
                "{ports}"
            );
        }
        assert!(err("    network {}\n    network {}").contains("only one network block is allowed"));
        assert!(err("    network { foo = 1 }")
            .contains("unknown attribute \"foo\" in network block of group \"g\" at line 3"));
    }

    #[test]
    fn docker_ports_must_name_the_groups_ports() {
        let src = |ports: &str| {
            format!(
                "job \"j\" {{\n  group \"g\" {{\n    network {{\n      port \"http\" {{ to = 80 }}\n    }}\n    \
                 task \"web\" {{\n      driver = \"docker\"\n      config {{\n        image = \"busybox:1\"\n        \
                 ports = [{ports}]\n      }}\n    }}\n  }}\n}}\n"
            )
        };
        let job = super::super::hcl::parse_job(&src("\"http\"")).unwrap().job;
        assert_eq!(job.task_groups[0].tasks[0].config.docker.ports, ["http"]);
        let e = super::super::hcl::parse_job(&src("\"http\", \"grpc\"")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "task \"web\": docker config ports: Port \"grpc\" not found, check network block of group \"g\""
        );
    }

    #[test]
    fn allocated_networks_carry_the_values_given() {
        let asked = NetworkResource {
            mbits: 0,
            cni: None,
            mode: "host".into(),
            ip: String::new(),
            reserved_ports: vec![Port {
                label: "http".into(),
                value: 8080,
                to: 0,
                host_network: "default".into(),
                ignore_collision: false,
            }],
            dynamic_ports: vec![Port {
                label: "admin".into(),
                value: 0,
                to: -1,
                host_network: "default".into(),
                ignore_collision: false,
            }],
        };
        let got = allocated_networks(
            &[asked],
            &[
                mapped("http", 8080, 0, "10.0.0.1"),
                mapped("admin", 20001, 20001, "10.0.0.1"),
            ],
        );
        assert_eq!(got[0].ip, "10.0.0.1");
        assert_eq!(got[0].dynamic_ports[0].value, 20001);
        assert_eq!(got[0].dynamic_ports[0].to, 20001);
        assert_eq!(got[0].reserved_ports[0].value, 8080);
    }
}
