//! The docker driver's `config` block (docker.md): the keys it accepts, the typed
//! [`DockerConfig`] the driver reads, and the checks that need nothing but the jobspec.
//!
//! HCL and JSON jobspecs give the block as plain data (HCL through [`crate::hcl::Source::body_value`],
//! JSON as the `Config` object), read here by one serde reader: a key that is not in [`KEYS`] is
//! an error naming it. A map such as `labels` may be written as a block (`labels { a = "b" }`,
//! which HCL 1 and Nomad's JSON give as a list of one object) or as an object; numbers and bools
//! in it are taken as their text. `command` and `args` are the task config's own fields, shared
//! with `raw_exec`. The config's `env` is merged into the task's environment (the task's `env`
//! block wins). What depends on the agent (privileged mode, capabilities, host paths outside the
//! task directory) is checked by the driver when the task starts.

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

use super::invalid;
use super::JobspecError;
use crate::util::duration;

/// The driver's name in jobspecs.
pub const NAME: &str = "docker";

/// The keys of a docker task's `config`, in docker.md's order.
pub const KEYS: &[&str] = &[
    "image",
    "command",
    "args",
    "entrypoint",
    "work_dir",
    "env",
    "labels",
    "hostname",
    "ports",
    "network_mode",
    "volumes",
    "mount",
    "privileged",
    "cap_add",
    "cap_drop",
    "force_pull",
    "auth_soft_fail",
    "image_pull_timeout",
    "init",
    "readonly_rootfs",
    "shm_size",
    "ulimit",
    "sysctl",
    "devices",
    "logging",
];

/// How long a pull may take when the config does not say (Nomad's `image_pull_timeout`).
pub const DEFAULT_IMAGE_PULL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A docker task's config, beside `command` and `args`. Serialized flat into the task's
/// `Config`, under the keys a jobspec writes, leaving out what is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_dir: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network_mode: String,
    /// `"host:container[:ro]"`, host paths relative to the task directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount: Vec<DockerMount>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub privileged: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_pull: bool,
    /// Nomad's "go on without credentials when authenticating fails": kept, with no effect, since
    /// nodeward pulls without credentials (no `auth` block, no `auth.helper`) and so never fails
    /// to authenticate.
    #[serde(default, skip_serializing_if = "is_false")]
    pub auth_soft_fail: bool,
    /// Written as Go writes a duration (`"5m0s"`), read as that or as nanoseconds.
    #[serde(
        default,
        serialize_with = "go_duration",
        deserialize_with = "any_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_pull_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub init: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub readonly_rootfs: bool,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<u64>,
    /// `nofile = "1024:2048"`: soft and optional hard limit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ulimit: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctl: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DockerDevice>,
}

fn is_false(b: &bool) -> bool {
    !b
}

fn go_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&duration::format(*d)),
        None => s.serialize_none(),
    }
}

/// A duration as a Go duration string (`"5m"`) or whole nanoseconds (Nomad's JSON).
fn any_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => duration::parse(&s)
            .map(Some)
            .map_err(|e| de::Error::custom(format!("invalid duration {s:?}: {e}"))),
        Value::Number(n) => n
            .as_u64()
            .map(|n| Some(Duration::from_nanos(n)))
            .ok_or_else(|| {
                de::Error::custom(format!("invalid duration {n}: not whole nanoseconds"))
            }),
        other => Err(de::Error::custom(format!(
            "expected a duration such as \"5m\", got {other}"
        ))),
    }
}

impl DockerConfig {
    /// The config with `f` (the task's `${...}` interpolation) applied to every text the task
    /// starts with, as Nomad interpolates a driver's whole config: the image, entrypoint, working
    /// directory, label values, hostname, network mode, volumes, mounts' sources and targets,
    /// devices' paths, ulimit and sysctl values. Not `ports` (labels of the group's ports, checked
    /// against the group when the jobspec was read), nor the names of labels, ulimits and sysctls.
    pub fn interpolated(&self, f: &dyn Fn(&str) -> String) -> DockerConfig {
        let list = |v: &[String]| v.iter().map(|s| f(s)).collect();
        let values =
            |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), f(v))).collect();
        DockerConfig {
            image: f(&self.image),
            entrypoint: list(&self.entrypoint),
            work_dir: f(&self.work_dir),
            labels: values(&self.labels),
            hostname: f(&self.hostname),
            network_mode: f(&self.network_mode),
            volumes: list(&self.volumes),
            mount: self
                .mount
                .iter()
                .map(|m| DockerMount {
                    source: f(&m.source),
                    target: f(&m.target),
                    ..m.clone()
                })
                .collect(),
            ulimit: values(&self.ulimit),
            sysctl: values(&self.sysctl),
            devices: self
                .devices
                .iter()
                .map(|d| DockerDevice {
                    host_path: f(&d.host_path),
                    container_path: f(&d.container_path),
                    cgroup_permissions: f(&d.cgroup_permissions),
                })
                .collect(),
            ..self.clone()
        }
    }

    /// The image pull deadline: the config's, else [`DEFAULT_IMAGE_PULL_TIMEOUT`].
    pub fn pull_timeout(&self) -> Duration {
        self.image_pull_timeout
            .unwrap_or(DEFAULT_IMAGE_PULL_TIMEOUT)
    }
}

/// A `mount { type source target readonly tmpfs_options { size mode } }` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerMount {
    #[serde(rename = "type", default = "bind")]
    pub mount_type: MountType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(default)]
    pub target: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub readonly: bool,
    /// tmpfs only: its size in bytes and its mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmpfs_mode: Option<u32>,
}

fn bind() -> MountType {
    MountType::Bind
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountType {
    Bind,
    Volume,
    Tmpfs,
}

impl MountType {
    pub fn as_str(self) -> &'static str {
        match self {
            MountType::Bind => "bind",
            MountType::Volume => "volume",
            MountType::Tmpfs => "tmpfs",
        }
    }
}

/// A `devices = [{ host_path container_path cgroup_permissions }]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerDevice {
    pub host_path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_path: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup_permissions: String,
}

/// The config as written: what serde reads from the JSON (or HCL turned into JSON) object.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocker {
    image: Option<String>,
    entrypoint: Option<Vec<String>>,
    work_dir: Option<String>,
    #[serde(default, deserialize_with = "text_map")]
    env: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "text_map")]
    labels: BTreeMap<String, String>,
    hostname: Option<String>,
    ports: Option<Vec<String>>,
    network_mode: Option<String>,
    volumes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "mounts")]
    mount: Vec<DockerMount>,
    privileged: Option<bool>,
    cap_add: Option<Vec<String>>,
    cap_drop: Option<Vec<String>>,
    force_pull: Option<bool>,
    auth_soft_fail: Option<bool>,
    #[serde(default, deserialize_with = "any_duration")]
    image_pull_timeout: Option<Duration>,
    init: Option<bool>,
    readonly_rootfs: Option<bool>,
    shm_size: Option<u64>,
    #[serde(default, deserialize_with = "text_map")]
    ulimit: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "text_map")]
    sysctl: BTreeMap<String, String>,
    devices: Option<Vec<DockerDevice>>,
    /// nodeward collects the logs itself (docker.md): accepted and ignored.
    #[allow(dead_code)]
    logging: Option<Value>,
}

/// A map written as an object or as a list of objects (a block); values as their text.
fn text_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let value = Value::deserialize(d)?;
    let objects = match value {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(o) => vec![o],
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(o) => Ok(o),
                other => Err(de::Error::custom(format!(
                    "expected a map or a block, got {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(de::Error::custom(format!(
                "expected a map or a block, got {other}"
            )))
        }
    };
    let mut out = BTreeMap::new();
    for (key, value) in objects.into_iter().flat_map(Map::into_iter) {
        let text = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                return Err(de::Error::custom(format!(
                    "the value of {key:?} must be a string, number or bool, got {other}"
                )))
            }
        };
        out.insert(key, text);
    }
    Ok(out)
}

/// `mount` blocks: one object or a list; `tmpfs_options { size mode }` flattened into the mount.
fn mounts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<DockerMount>, D::Error> {
    let items = match Value::deserialize(d)? {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        one => vec![one],
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Object(mut m) = item else {
                return Err(de::Error::custom("a mount must be a block or an object"));
            };
            if let Some(options) = m.remove("tmpfs_options") {
                let options = match options {
                    Value::Array(mut a) if a.len() == 1 => a.remove(0),
                    other => other,
                };
                let Value::Object(options) = options else {
                    return Err(de::Error::custom("tmpfs_options must be a block"));
                };
                for (k, v) in options {
                    match k.as_str() {
                        "size" => m.insert("tmpfs_size".into(), v),
                        "mode" => m.insert("tmpfs_mode".into(), v),
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown field `{other}` in tmpfs_options"
                            )))
                        }
                    };
                }
            }
            serde_json::from_value(Value::Object(m)).map_err(de::Error::custom)
        })
        .collect()
}

/// Reads a docker task's config (`fields`: every key but `command` and `args`) into its typed
/// form and the variables its `env` adds; `ctx` names the task in messages.
pub(crate) fn parse(
    ctx: &str,
    fields: Map<String, Value>,
) -> Result<(DockerConfig, BTreeMap<String, String>), JobspecError> {
    if let Some(key) = fields.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(invalid(format!("{ctx}: unknown docker config key {key:?}")));
    }
    let raw: RawDocker = serde_path_to_error::deserialize(Value::Object(fields))
        .map_err(|e| invalid(format!("{ctx}: docker config {}: {}", e.path(), e.inner())))?;
    let image_pull_timeout = raw.image_pull_timeout;
    let config = DockerConfig {
        image: raw.image.unwrap_or_default(),
        entrypoint: raw.entrypoint.unwrap_or_default(),
        work_dir: raw.work_dir.unwrap_or_default(),
        labels: raw.labels,
        hostname: raw.hostname.unwrap_or_default(),
        ports: raw.ports.unwrap_or_default(),
        network_mode: raw.network_mode.unwrap_or_default(),
        volumes: raw.volumes.unwrap_or_default(),
        mount: raw.mount,
        privileged: raw.privileged.unwrap_or(false),
        cap_add: raw.cap_add.unwrap_or_default(),
        cap_drop: raw.cap_drop.unwrap_or_default(),
        force_pull: raw.force_pull.unwrap_or(false),
        auth_soft_fail: raw.auth_soft_fail.unwrap_or(false),
        image_pull_timeout,
        init: raw.init.unwrap_or(false),
        readonly_rootfs: raw.readonly_rootfs.unwrap_or(false),
        shm_size: raw.shm_size,
        ulimit: raw.ulimit,
        sysctl: raw.sysctl,
        devices: raw.devices.unwrap_or_default(),
    };
    Ok((config, raw.env))
}

/// The checks a docker config must pass whatever the agent allows.
pub(crate) fn validate(ctx: &str, c: &DockerConfig) -> Result<(), JobspecError> {
    let invalid = |m: String| Err(invalid(format!("{ctx}: {m}")));
    if c.image.trim().is_empty() {
        return invalid("docker config must set a non-empty image".into());
    }
    match c.network_mode.as_str() {
        "" | "bridge" | "host" | "none" => {}
        m if m.starts_with("container:") && m.len() > "container:".len() => {}
        m => {
            return invalid(format!(
                "docker config network_mode {m:?} is not one of \"bridge\", \"host\", \"none\", \"container:<name>\""
            ))
        }
    }
    for v in &c.volumes {
        let parts: Vec<&str> = v.split(':').collect();
        let ok = match parts.as_slice() {
            [host, container] => !host.is_empty() && container.starts_with('/'),
            [host, container, mode] => {
                !host.is_empty() && container.starts_with('/') && matches!(*mode, "ro" | "rw")
            }
            _ => false,
        };
        if !ok {
            return invalid(format!(
                "docker config volume {v:?} must be \"<host path>:<absolute container path>[:ro|rw]\""
            ));
        }
    }
    for m in &c.mount {
        if !m.target.starts_with('/') {
            return invalid(format!(
                "docker config mount of type {:?} must set an absolute target, got {:?}",
                m.mount_type.as_str(),
                m.target
            ));
        }
        let needs_source = m.mount_type != MountType::Tmpfs;
        if needs_source == m.source.is_empty() {
            return invalid(format!(
                "docker config mount at {:?}: a {} mount {} a source",
                m.target,
                m.mount_type.as_str(),
                if needs_source { "needs" } else { "takes no" }
            ));
        }
        if m.mount_type != MountType::Tmpfs && (m.tmpfs_size.is_some() || m.tmpfs_mode.is_some()) {
            return invalid(format!(
                "docker config mount at {:?}: tmpfs_options are for tmpfs mounts only",
                m.target
            ));
        }
    }
    for (name, value) in &c.ulimit {
        let numbers: Vec<&str> = value.split(':').collect();
        if numbers.len() > 2 || numbers.iter().any(|n| n.parse::<i64>().is_err()) {
            return invalid(format!(
                "docker config ulimit {name:?} must be \"<soft>\" or \"<soft>:<hard>\", got {value:?}"
            ));
        }
    }
    for d in &c.devices {
        if !d.host_path.starts_with('/') {
            return invalid(format!(
                "docker config device host_path must be absolute, got {:?}",
                d.host_path
            ));
        }
    }
    if c.image_pull_timeout == Some(Duration::ZERO) {
        return invalid("docker config image_pull_timeout must be more than 0".into());
    }
    Ok(())
}

/// Go's form of a duration in a message.
pub fn pull_timeout_text(c: &DockerConfig) -> String {
    duration::format(c.pull_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<(DockerConfig, BTreeMap<String, String>), JobspecError> {
        let Value::Object(m) = v else { panic!() };
        parse("task \"t\"", m)
    }

    #[test]
    fn blocks_and_objects_read_the_same() {
        let (a, env) = read(json!({
            "image": "busybox:1",
            "labels": [{"team": "storage", "n": 3}],
            "ulimit": {"nofile": "1024:2048"},
            "mount": [{"type": "tmpfs", "target": "/t", "tmpfs_options": [{"size": 1000}]}],
            "env": {"A": "1"},
            "image_pull_timeout": "1m30s",
            "auth_soft_fail": true,
            "logging": {"type": "json-file"}
        }))
        .unwrap();
        assert!(a.auth_soft_fail);
        assert_eq!(a.labels["team"], "storage");
        assert_eq!(a.labels["n"], "3");
        assert_eq!(a.ulimit["nofile"], "1024:2048");
        assert_eq!(a.mount[0].mount_type, MountType::Tmpfs);
        assert_eq!(a.mount[0].tmpfs_size, Some(1000));
        assert_eq!(env["A"], "1");
        assert_eq!(a.pull_timeout(), Duration::from_secs(90));
        validate("t", &a).unwrap();
        // What the state file and `jobs parse` keep reads back the same.
        let text = serde_json::to_value(&a).unwrap();
        let Value::Object(m) = text else { panic!() };
        let (b, _) = parse("t", m).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = read(json!({"image": "x", "imagee": "y"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "task \"t\": unknown docker config key \"imagee\""
        );
        let e = read(json!({"image": "x", "privileged": "yes"})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("task \"t\": docker config privileged: invalid type"),
            "{e}"
        );
        let e =
            read(json!({"image": "x", "mount": [{"type": "nfs", "target": "/x"}]})).unwrap_err();
        assert!(e.to_string().contains("unknown variant `nfs`"), "{e}");
        let (c, _) = read(json!({"image": " "})).unwrap();
        assert_eq!(
            validate("task \"t\"", &c).unwrap_err().to_string(),
            "task \"t\": docker config must set a non-empty image"
        );
        let (c, _) = read(json!({"image": "x", "volumes": ["relative"]})).unwrap();
        assert!(validate("t", &c).is_err());
        let (c, _) =
            read(json!({"image": "x", "mount": {"type": "bind", "target": "/x"}})).unwrap();
        assert_eq!(
            validate("t", &c).unwrap_err().to_string(),
            "t: docker config mount at \"/x\": a bind mount needs a source"
        );
        let (c, _) = read(json!({"image": "x", "ulimit": {"nofile": "a:b"}})).unwrap();
        assert!(validate("t", &c).is_err());
    }
}
