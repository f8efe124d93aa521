//! Agent configuration (agent.md): HCL or JSON files, merged in order, then validated once into
//! [`AgentConfig`]. `-dev` gives a throw-away configuration with data in a fresh temporary directory.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::duration;

pub mod exec;
mod plugins;
mod reserved;
pub use plugins::{DockerSettings, DEFAULT_ALLOW_CAPS, DEFAULT_DOCKER_ENDPOINT};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("config: {0}")]
    Invalid(String),
}

/// `client { max_kill_timeout }` when not set: Nomad's default.
pub const DEFAULT_MAX_KILL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticVolume {
    pub path: PathBuf,
    pub read_only: bool,
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub data_dir: PathBuf,
    pub name: String,
    pub node_pool: String,
    /// The node's datacenter (`datacenter`, default `dc1`), matched against jobs' `datacenters`.
    pub datacenter: String,
    /// `client { node_class }`: `${node.class}` in constraints; empty when not set.
    pub node_class: String,
    /// `client { meta { } }`: `${meta.<key>}` in constraints, and the node's `Meta`.
    pub meta: BTreeMap<String, String>,
    pub bind_addr: IpAddr,
    pub http_port: u16,
    pub log_level: String,
    /// The ACL token, read from `acl.token_file`. Never logged.
    pub token: Option<String>,
    /// With a token: reads need it too.
    pub acl_reads: bool,
    /// Names the API answers to in `Host` besides IP addresses, `localhost`, the node's name and
    /// the host name (DNS rebinding: a page's own name pointed at this host is refused).
    pub http_allowed_hosts: Vec<String>,
    pub host_volume_plugin_dir: PathBuf,
    pub host_volumes_dir: PathBuf,
    pub csi_probe_interval: Duration,
    pub host_volumes: BTreeMap<String, StaticVolume>,
    pub dev: bool,
    /// `-dev` chose the data directory (a fresh temporary one): it is removed at shutdown. A
    /// `data_dir` the configuration names is never removed, `-dev` or not.
    pub throwaway_data_dir: bool,
    /// Stop every task when the agent shuts down (`client { stop_tasks_on_shutdown = true }`;
    /// always with `-dev`). Off by default: tasks outlive the agent (live-restore.md).
    pub stop_tasks_on_shutdown: bool,
    /// What tasks get of the agent's environment (`client { task_env_passthrough }`): variable
    /// names and `PREFIX*` patterns, each checked by [`crate::task::env::check_passthrough`].
    pub task_env_passthrough: Vec<String>,
    /// The longest a task's `kill_timeout` may be (`client { max_kill_timeout }`, Nomad's key,
    /// default 30s): a longer one is cut to it wherever the agent waits for a task to stop.
    pub max_kill_timeout: Duration,
    /// The allocation garbage collector (`client { gc_* }`, Nomad's keys and defaults).
    pub gc: GcConfig,
    /// The most allocations that may be live (not terminal) on this node at once
    /// (`client { max_allocs }`): a registration that would go over it is refused.
    pub max_allocs: usize,
    /// The range dynamic ports are picked from (`client { min_dynamic_port max_dynamic_port }`,
    /// Nomad's names and defaults), both ends included.
    pub min_dynamic_port: u16,
    pub max_dynamic_port: u16,
    /// `client { cgroups = false }` runs tasks unconfined; `cgroup_parent` (default `nodeward`)
    /// is the cgroup the task cgroups are made under (docs/resources.md).
    pub cgroups: bool,
    pub cgroup_parent: String,
    /// The docker driver's settings (`plugin "docker" { config { ... } }`).
    pub docker: DockerSettings,
    /// `client { reserved { } }`: what placement leaves to the host (resources.md).
    pub reserved: crate::resources::ReservedResources,
    /// `client { cpu_total_compute memory_total_mb disk_free_mb }` (Nomad's): the node's CPU
    /// (MHz), memory and free disk (MB) as the operator states them, instead of the
    /// fingerprint's.
    pub totals: crate::resources::Totals,
    /// The drivers' settings (`client { chroot_env options }`): exec's, and the denylist.
    pub drivers: exec::DriverSettings,
    /// What the configuration holds that has no effect (logged when the agent starts).
    pub warnings: Vec<String>,
    /// The `-config` arguments, re-read on SIGHUP.
    pub sources: Vec<PathBuf>,
}

/// The allocation garbage collector's settings (docs/configuration.md "Allocation garbage
/// collection"): Nomad's client keys, with Nomad's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcConfig {
    /// How often the collector checks the limits below (`gc_interval`, default 1m).
    pub interval: Duration,
    /// More allocations than this (terminal or not) and the oldest terminal ones are collected
    /// (`gc_max_allocs`, default 50).
    pub max_allocs: usize,
    /// Disk usage of the data directory's file system, in percent, over which terminal
    /// allocations are collected (`gc_disk_usage_threshold`, default 80).
    pub disk_usage_threshold: f64,
    /// The same for inodes (`gc_inode_usage_threshold`, default 70).
    pub inode_usage_threshold: f64,
    /// How many allocation directories are removed at once (`gc_parallel_destroys`, default 2).
    pub parallel_destroys: usize,
    /// How many finished children (every allocation terminal) a periodic or parameterized job
    /// keeps; older ones are forgotten when a new one is made, and all of them by
    /// `PUT /v1/system/gc` (`job_gc_children`, default [`DEFAULT_JOB_GC_CHILDREN`]).
    pub job_children: usize,
}

/// The default of `client { job_gc_children }`. Nomad forgets finished children after
/// `job_gc_threshold` (4h); a bound by count keeps the registry and the state file bounded
/// whatever the schedule (a per-second job makes 14,400 children in 4h). Ten is the last ten
/// runs for `job status` and their logs, and the allocations of ten one-group children stay
/// under `gc_max_allocs`'s default of 50.
pub const DEFAULT_JOB_GC_CHILDREN: usize = 10;

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            interval: Duration::from_secs(60),
            max_allocs: 50,
            disk_usage_threshold: 80.0,
            inode_usage_threshold: 70.0,
            parallel_destroys: 2,
            job_children: DEFAULT_JOB_GC_CHILDREN,
        }
    }
}

/// The default of `client { max_allocs }`: one group at its largest `count`
/// ([`crate::jobspec::MAX_GROUP_COUNT`]) fits, and even with a task each (a runner thread in the
/// agent and a process) the node stays well under the kernel's default `pid_max` (32768).
pub const DEFAULT_MAX_ALLOCS: usize = 10_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_dir: Option<String>,
    name: Option<String>,
    node_pool: Option<String>,
    datacenter: Option<String>,
    bind_addr: Option<String>,
    ports: Option<RawPorts>,
    log_level: Option<String>,
    http_allowed_hosts: Option<Vec<String>>,
    acl: Option<RawAcl>,
    client: Option<RawClient>,
    plugin: Option<BTreeMap<String, plugins::RawPlugin>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPorts {
    http: Option<u16>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAcl {
    token_file: Option<String>,
    /// Also require the token for reads.
    enforce_reads: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    host_volume_plugin_dir: Option<String>,
    host_volumes_dir: Option<String>,
    csi_probe_interval: Option<String>,
    stop_tasks_on_shutdown: Option<bool>,
    task_env_passthrough: Option<Vec<String>>,
    max_kill_timeout: Option<String>,
    host_volume: Option<BTreeMap<String, RawHostVolume>>,
    gc_interval: Option<String>,
    gc_max_allocs: Option<u64>,
    gc_disk_usage_threshold: Option<f64>,
    gc_inode_usage_threshold: Option<f64>,
    gc_parallel_destroys: Option<u64>,
    job_gc_children: Option<u64>,
    max_allocs: Option<u64>,
    min_dynamic_port: Option<u64>,
    max_dynamic_port: Option<u64>,
    node_class: Option<String>,
    reserved: Option<reserved::RawReserved>,
    cpu_total_compute: Option<u64>,
    memory_total_mb: Option<u64>,
    disk_free_mb: Option<u64>,
    cgroups: Option<bool>,
    cgroup_parent: Option<String>,
    /// Values may be written as numbers or booleans too; each is kept as its text.
    meta: Option<BTreeMap<String, serde_json::Value>>,
    chroot_env: Option<BTreeMap<String, String>>,
    options: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHostVolume {
    path: String,
    #[serde(default)]
    read_only: bool,
}

impl RawConfig {
    /// Later files win field by field; host volumes merge by name.
    fn merge(&mut self, other: RawConfig) {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            data_dir,
            name,
            node_pool,
            datacenter,
            bind_addr,
            log_level,
            http_allowed_hosts
        );
        if let Some(p) = other.ports {
            self.ports.get_or_insert_with(Default::default).http =
                p.http.or(self.ports.as_ref().and_then(|x| x.http));
        }
        if let Some(a) = other.acl {
            let mine = self.acl.get_or_insert_with(Default::default);
            if a.token_file.is_some() {
                mine.token_file = a.token_file;
            }
            if a.enforce_reads.is_some() {
                mine.enforce_reads = a.enforce_reads;
            }
        }
        if let Some(p) = other.plugin {
            self.plugin.get_or_insert_with(Default::default).extend(p);
        }
        if let Some(c) = other.client {
            let mine = self.client.get_or_insert_with(Default::default);
            if c.host_volume_plugin_dir.is_some() {
                mine.host_volume_plugin_dir = c.host_volume_plugin_dir;
            }
            if c.host_volumes_dir.is_some() {
                mine.host_volumes_dir = c.host_volumes_dir;
            }
            if c.csi_probe_interval.is_some() {
                mine.csi_probe_interval = c.csi_probe_interval;
            }
            if c.stop_tasks_on_shutdown.is_some() {
                mine.stop_tasks_on_shutdown = c.stop_tasks_on_shutdown;
            }
            if c.task_env_passthrough.is_some() {
                mine.task_env_passthrough = c.task_env_passthrough;
            }
            if c.max_kill_timeout.is_some() {
                mine.max_kill_timeout = c.max_kill_timeout;
            }
            macro_rules! take_client {
                ($($f:ident),*) => { $( if c.$f.is_some() { mine.$f = c.$f; } )* };
            }
            take_client!(
                gc_interval,
                gc_max_allocs,
                gc_disk_usage_threshold,
                gc_inode_usage_threshold,
                gc_parallel_destroys,
                job_gc_children,
                max_allocs,
                min_dynamic_port,
                max_dynamic_port,
                node_class,
                reserved,
                cpu_total_compute,
                memory_total_mb,
                disk_free_mb,
                chroot_env,
                cgroups,
                cgroup_parent
            );
            if let Some(o) = c.options {
                mine.options.get_or_insert_with(Default::default).extend(o);
            }
            if let Some(m) = c.meta {
                mine.meta.get_or_insert_with(Default::default).extend(m);
            }
            if let Some(v) = c.host_volume {
                mine.host_volume
                    .get_or_insert_with(Default::default)
                    .extend(v);
            }
        }
    }
}

fn parse_file(path: &Path) -> Result<RawConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parsed = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str::<RawConfig>(&text).map_err(|e| e.to_string())
    } else {
        // hcl-rs's serde deserializer, on the tree the shared front-end parsed (one-line blocks
        // with several attributes accepted, as the documentation writes them).
        crate::hcl::read(&text, |doc| {
            hcl::from_body::<RawConfig>(doc.body.into())
                .map_err(|e| crate::hcl::Error::Invalid(e.to_string()))
        })
        .map_err(|e| e.to_string())
    };
    parsed.map_err(|reason| ConfigError::Parse {
        path: path.to_path_buf(),
        reason,
    })
}

/// The files named by `-config` arguments: a directory contributes its `*.hcl` and `*.json`
/// files in name order.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|source| ConfigError::Read {
                    path: p.clone(),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|e| e == "hcl" || e == "json"))
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Loads and validates the configuration. `dev` starts from the `-dev` defaults.
pub fn load(paths: &[PathBuf], dev: bool) -> Result<AgentConfig, ConfigError> {
    let mut raw = RawConfig::default();
    for f in expand(paths)? {
        raw.merge(parse_file(&f)?);
    }
    let mut config = validate(raw, dev)?;
    config.sources = paths.to_vec();
    Ok(config)
}

/// The machine's host name (`localhost` when it has none).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn validate(raw: RawConfig, dev: bool) -> Result<AgentConfig, ConfigError> {
    let data_dir = match (&raw.data_dir, dev) {
        (Some(d), _) => PathBuf::from(d),
        (None, true) => std::env::temp_dir().join(format!("nodeward-dev-{}", uuid::Uuid::new_v4())),
        (None, false) => PathBuf::from("/var/lib/nodeward"),
    };
    if !data_dir.is_absolute() {
        return Err(ConfigError::Invalid(format!(
            "data_dir must be an absolute path, got {:?}",
            data_dir.display().to_string()
        )));
    }
    let bind_addr: IpAddr = raw
        .bind_addr
        .as_deref()
        .unwrap_or("127.0.0.1")
        .parse()
        .map_err(|_| {
            ConfigError::Invalid(format!(
                "bind_addr {:?} is not an IP address",
                raw.bind_addr.clone().unwrap_or_default()
            ))
        })?;
    let log_level = raw
        .log_level
        .clone()
        .unwrap_or_else(|| if dev { "debug" } else { "info" }.to_string())
        .to_lowercase();
    if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
        return Err(ConfigError::Invalid(format!(
            "log_level must be one of error, warn, info, debug, trace; got {log_level:?}"
        )));
    }
    let (token, acl_reads) = match raw.acl {
        Some(RawAcl {
            token_file: Some(f),
            enforce_reads,
        }) => {
            let t = std::fs::read_to_string(&f).map_err(|source| ConfigError::Read {
                path: PathBuf::from(&f),
                source,
            })?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "acl token_file {f:?} is empty"
                )));
            }
            (Some(t), enforce_reads.unwrap_or(false))
        }
        _ => (None, false),
    };
    let http_allowed_hosts = raw.http_allowed_hosts.unwrap_or_default();
    for h in &http_allowed_hosts {
        if !is_host_name(h) {
            return Err(ConfigError::Invalid(format!(
                "http_allowed_hosts: {h:?} is not a host name (write the name alone, without a scheme or a port)"
            )));
        }
    }
    let client = raw.client.unwrap_or_default();
    let csi_probe_interval = match &client.csi_probe_interval {
        Some(s) => duration::parse(s)
            .map_err(|e| ConfigError::Invalid(format!("client.csi_probe_interval: {e}")))?,
        None => Duration::from_secs(30),
    };
    if csi_probe_interval < Duration::from_millis(100) {
        return Err(ConfigError::Invalid(
            "client.csi_probe_interval must be at least 100ms".to_string(),
        ));
    }
    let max_kill_timeout = match &client.max_kill_timeout {
        Some(s) => duration::parse(s)
            .map_err(|e| ConfigError::Invalid(format!("client.max_kill_timeout: {e}")))?,
        None => DEFAULT_MAX_KILL_TIMEOUT,
    };
    let (gc, max_allocs) = validate_gc(&client)?;
    let (min_dynamic_port, max_dynamic_port) = dynamic_ports(&client)?;
    let (datacenter, node_class, meta) = validate_node(&raw.datacenter, &client)?;
    let cgroup_parent = client
        .cgroup_parent
        .clone()
        .unwrap_or_else(|| crate::cgroup::DEFAULT_PARENT.to_string());
    crate::cgroup::check_parent(&cgroup_parent)
        .map_err(|e| ConfigError::Invalid(format!("client.cgroup_parent: {e}")))?;
    let task_env_passthrough = match client.task_env_passthrough {
        Some(list) => list,
        None => crate::task::env::DEFAULT_PASSTHROUGH
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    for entry in &task_env_passthrough {
        crate::task::env::check_passthrough(entry)
            .map_err(|e| ConfigError::Invalid(format!("client.task_env_passthrough: {e}")))?;
    }
    let reserved = reserved::validate(client.reserved.as_ref())?;
    let totals = reserved::totals([
        ("cpu_total_compute", client.cpu_total_compute),
        ("memory_total_mb", client.memory_total_mb),
        ("disk_free_mb", client.disk_free_mb),
    ])?;
    let (docker, mut warnings) = plugins::validate(raw.plugin.unwrap_or_default())?;
    let drivers = exec::settings(client.chroot_env, client.options, &mut warnings)?;
    let mut host_volumes = BTreeMap::new();
    for (name, v) in client.host_volume.unwrap_or_default() {
        let path = PathBuf::from(&v.path);
        if !path.is_absolute() {
            return Err(ConfigError::Invalid(format!(
                "client.host_volume {name:?}: path must be absolute, got {:?}",
                v.path
            )));
        }
        host_volumes.insert(
            name,
            StaticVolume {
                path,
                read_only: v.read_only,
            },
        );
    }
    Ok(AgentConfig {
        cgroups: client.cgroups.unwrap_or(true),
        cgroup_parent,
        host_volume_plugin_dir: client
            .host_volume_plugin_dir
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir.join("host_volume_plugins")),
        host_volumes_dir: client
            .host_volumes_dir
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir.join("host_volumes")),
        data_dir,
        name: raw.name.unwrap_or_else(host_name),
        node_pool: raw.node_pool.unwrap_or_else(|| "default".to_string()),
        datacenter,
        node_class,
        meta,
        bind_addr,
        http_port: raw.ports.and_then(|p| p.http).unwrap_or(4656),
        log_level,
        token,
        acl_reads,
        http_allowed_hosts,
        csi_probe_interval,
        host_volumes,
        dev,
        throwaway_data_dir: dev && raw.data_dir.is_none(),
        stop_tasks_on_shutdown: dev || client.stop_tasks_on_shutdown.unwrap_or(false),
        task_env_passthrough,
        max_kill_timeout,
        gc,
        max_allocs,
        min_dynamic_port,
        max_dynamic_port,
        docker,
        reserved,
        totals,
        drivers,
        warnings,
        sources: Vec::new(),
    })
}

/// `datacenter` when the configuration names none, as in Nomad.
pub const DEFAULT_DATACENTER: &str = "dc1";

/// The node's placement facts: its datacenter, `client { node_class }` and `client { meta }`.
fn validate_node(
    datacenter: &Option<String>,
    client: &RawClient,
) -> Result<(String, String, BTreeMap<String, String>), ConfigError> {
    let datacenter = datacenter
        .clone()
        .unwrap_or_else(|| DEFAULT_DATACENTER.to_string());
    // A job's `datacenters` are globs: a `*` in the node's own name would match what it should not.
    if datacenter.is_empty() || datacenter.contains('*') {
        return Err(ConfigError::Invalid(format!(
            "datacenter must be a non-empty name without \"*\", got {datacenter:?}"
        )));
    }
    let mut meta = BTreeMap::new();
    for (key, value) in client.meta.clone().unwrap_or_default() {
        let text = match value {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            other => {
                return Err(ConfigError::Invalid(format!(
                    "client.meta {key:?} must be a string, number or bool, got {other}"
                )))
            }
        };
        if key.is_empty() {
            return Err(ConfigError::Invalid(
                "client.meta has an empty key".to_string(),
            ));
        }
        meta.insert(key, text);
    }
    Ok((
        datacenter,
        client.node_class.clone().unwrap_or_default(),
        meta,
    ))
}

/// The `client` block's garbage collector settings and allocation limit, defaults applied.
fn validate_gc(client: &RawClient) -> Result<(GcConfig, usize), ConfigError> {
    let mut gc = GcConfig::default();
    if let Some(s) = &client.gc_interval {
        gc.interval = duration::parse(s)
            .map_err(|e| ConfigError::Invalid(format!("client.gc_interval: {e}")))?;
    }
    if gc.interval < Duration::from_millis(100) {
        return Err(ConfigError::Invalid(format!(
            "client.gc_interval must be at least 100ms, got {:?}",
            client.gc_interval.clone().unwrap_or_default()
        )));
    }
    let percent = |name: &str, value: Option<f64>, default: f64| {
        match value {
        None => Ok(default),
        Some(v) if (0.0..=100.0).contains(&v) => Ok(v),
        Some(v) => Err(ConfigError::Invalid(format!(
            "client.{name} is a percentage of the data directory's file system, from 0 to 100; got {v}"
        ))),
    }
    };
    gc.disk_usage_threshold = percent(
        "gc_disk_usage_threshold",
        client.gc_disk_usage_threshold,
        gc.disk_usage_threshold,
    )?;
    gc.inode_usage_threshold = percent(
        "gc_inode_usage_threshold",
        client.gc_inode_usage_threshold,
        gc.inode_usage_threshold,
    )?;
    let count = |name: &str, value: Option<u64>, default: usize, least: u64| match value {
        None => Ok(default),
        Some(v) if v >= least => usize::try_from(v)
            .map_err(|_| ConfigError::Invalid(format!("client.{name} is too large: {v}"))),
        Some(v) => Err(ConfigError::Invalid(format!(
            "client.{name} must be at least {least}, got {v}"
        ))),
    };
    gc.max_allocs = count("gc_max_allocs", client.gc_max_allocs, gc.max_allocs, 0)?;
    gc.parallel_destroys = count(
        "gc_parallel_destroys",
        client.gc_parallel_destroys,
        gc.parallel_destroys,
        1,
    )?;
    gc.job_children = count(
        "job_gc_children",
        client.job_gc_children,
        gc.job_children,
        0,
    )?;
    let max_allocs = count("max_allocs", client.max_allocs, DEFAULT_MAX_ALLOCS, 1)?;
    Ok((gc, max_allocs))
}

/// A total the operator states: a number above zero when given.
/// `client { min_dynamic_port max_dynamic_port }`: ports, the first not above the second.
fn dynamic_ports(client: &RawClient) -> Result<(u16, u16), ConfigError> {
    use crate::jobspec::network::{DEFAULT_MAX_DYNAMIC_PORT, DEFAULT_MIN_DYNAMIC_PORT};
    let port = |name: &str, value: Option<u64>, default: u16| match value {
        None => Ok(default),
        Some(v @ 1..=65535) => Ok(v as u16),
        Some(v) => Err(ConfigError::Invalid(format!(
            "client.{name} must be a port from 1 to 65535, got {v}"
        ))),
    };
    let min = port(
        "min_dynamic_port",
        client.min_dynamic_port,
        DEFAULT_MIN_DYNAMIC_PORT,
    )?;
    let max = port(
        "max_dynamic_port",
        client.max_dynamic_port,
        DEFAULT_MAX_DYNAMIC_PORT,
    )?;
    if min > max {
        return Err(ConfigError::Invalid(format!(
            "client.min_dynamic_port ({min}) must not be more than client.max_dynamic_port ({max})"
        )));
    }
    Ok((min, max))
}

impl AgentConfig {
    /// The address of the host network, the `HostIP` of allocations' ports and the address
    /// of their `NOMAD_IP_<label>`: `bind_addr` when it names one address; when it is
    /// `0.0.0.0` or `::` (every address), the IPv4 address of the interface of the default
    /// route, as Nomad fingerprints a node's network, else the loopback address.
    pub fn host_network_ip(&self) -> IpAddr {
        if !self.bind_addr.is_unspecified() {
            return self.bind_addr;
        }
        crate::util::netif::default_route_ipv4()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
    }
}

/// A DNS name: dot-separated labels of letters, digits and dashes (a trailing dot allowed).
fn is_host_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, body: &str) -> PathBuf {
        let p = crate::util::scratch::dir("nodeward-cfg").join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn parses_the_documented_example() {
        let p = write(
            "agent.hcl",
            r#"
data_dir  = "/var/lib/nodeward"
name      = "node-1"
node_pool = "default"
bind_addr = "127.0.0.1"
ports { http = 4656 }
log_level = "info"
client {
  host_volume_plugin_dir = "/var/lib/nodeward/host_volume_plugins"
  host_volumes_dir       = "/var/lib/nodeward/host_volumes"
  csi_probe_interval     = "30s"
  host_volume "shared" { path = "/srv/shared"  read_only = true }
  host_volume "scratch" { path = "/srv/scratch" }
}
"#,
        );
        let c = load(&[p], false).unwrap();
        assert_eq!(c.name, "node-1");
        assert_eq!(c.http_port, 4656);
        assert_eq!(c.csi_probe_interval, Duration::from_secs(30));
        assert_eq!(
            c.host_volumes["shared"],
            StaticVolume {
                path: "/srv/shared".into(),
                read_only: true
            }
        );
        assert!(!c.host_volumes["scratch"].read_only);
    }

    #[test]
    fn later_files_win_and_unknown_fields_are_errors() {
        let a = write("a.hcl", "name = \"a\"\nports { http = 1 }\n");
        let b = write("b.json", "{\"name\": \"b\"}");
        let c = load(&[a, b], true).unwrap();
        assert_eq!(c.name, "b");
        assert_eq!(c.http_port, 1);
        let bad = write("bad.hcl", "nmae = \"x\"\n");
        let err = load(std::slice::from_ref(&bad), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nmae") && err.contains(&bad.display().to_string()),
            "{err}"
        );
        let bad = write("bad2.hcl", "log_level = \"loud\"\n");
        assert!(load(&[bad], false).is_err());
    }

    /// The node's placement facts, as a Nomad client configuration writes them; later files add
    /// to `meta` key by key.
    #[test]
    fn datacenter_node_class_and_meta() {
        let a = write(
            "a.hcl",
            "datacenter = \"eu-west-1\"\nclient {\n  node_class = \"web\"\n  meta {\n    rack = \"r1\"\n    cores = 8\n    ssd = true\n  }\n}\n",
        );
        let b = write(
            "b.json",
            r#"{"client": {"meta": {"rack": "r2", "zone": "a"}}}"#,
        );
        let c = load(&[a, b], false).unwrap();
        assert_eq!(
            (c.datacenter.as_str(), c.node_class.as_str()),
            ("eu-west-1", "web")
        );
        let meta: Vec<(&str, &str)> = c
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            meta,
            [
                ("cores", "8"),
                ("rack", "r2"),
                ("ssd", "true"),
                ("zone", "a")
            ]
        );
        let plain = load(&[write("c.hcl", "name = \"n\"\n")], false).unwrap();
        assert_eq!(
            (plain.datacenter.as_str(), plain.node_class.as_str()),
            ("dc1", "")
        );
        assert!(plain.meta.is_empty());
        for bad in [
            "datacenter = \"dc-*\"\n",
            "datacenter = \"\"\n",
            "client {\n  meta {\n    a = [1]\n  }\n}\n",
        ] {
            let err = load(&[write("bad.hcl", bad)], false)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("datacenter") || err.contains("client.meta"),
                "{bad}: {err}"
            );
        }
    }

    /// A Nomad client configuration's plugin blocks work unchanged.
    #[test]
    fn plugin_blocks_configure_the_docker_driver() {
        let p = write(
            "plugins.hcl",
            r#"
plugin "raw_exec" {
  config { enabled = true }
}
plugin "docker" {
  config {
    endpoint = "unix:///run/d.sock"
    allow_privileged = true
    allow_caps = ["CHOWN", "net_admin"]
    volumes { enabled = true }
    gc { image = false }
  }
}
"#,
        );
        let c = load(&[p], false).unwrap();
        assert_eq!(c.docker.endpoint, "unix:///run/d.sock");
        assert!(c.docker.allow_privileged && c.docker.volumes_enabled);
        assert!(c.docker.cap_allowed("CAP_NET_ADMIN") && !c.docker.cap_allowed("sys_admin"));
        assert_eq!(
            c.warnings,
            ["plugin \"docker\" config: gc has no effect on nodeward and was ignored"]
        );
        let none = load(&[write("none.hcl", "")], false).unwrap();
        assert!(!none.docker.allow_privileged && none.docker.cap_allowed("kill"));
        for (bad, says) in [
            (
                "plugin \"docker\" {\n config { endpoint = \"tcp://h:2375\" }\n}\n",
                "endpoint must be unix:///",
            ),
            (
                "plugin \"docker\" {\n config { bogus = 1 }\n}\n",
                "unknown field `bogus`",
            ),
            (
                "plugin \"exec2\" {\n config {}\n}\n",
                "nodeward has no such driver",
            ),
        ] {
            let err = load(&[write("bad.hcl", bad)], false)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn allowed_hosts_are_host_names() {
        let p = write(
            "hosts.hcl",
            "http_allowed_hosts = [\"node-1.example.com\", \"nodeward.\"]\n",
        );
        let c = load(&[p], false).unwrap();
        assert_eq!(c.http_allowed_hosts, ["node-1.example.com", "nodeward."]);
        for bad in ["http://node-1", "node-1:4656", "", "a b", "a..b"] {
            let p = write("bad.hcl", &format!("http_allowed_hosts = [{bad:?}]\n"));
            let err = load(&[p], false).unwrap_err().to_string();
            assert!(
                err.contains("http_allowed_hosts") && err.contains("is not a host name"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn task_env_passthrough_has_a_default_and_refuses_the_agents_own_variables() {
        let none = write("none.hcl", "");
        assert_eq!(
            load(&[none], false).unwrap().task_env_passthrough,
            ["PATH", "LANG", "LC_*", "TZ"]
        );
        let some = write(
            "some.hcl",
            "client { task_env_passthrough = [\"PATH\", \"APP_*\"] }\n",
        );
        assert_eq!(
            load(&[some], false).unwrap().task_env_passthrough,
            ["PATH", "APP_*"]
        );
        let token = write(
            "token.hcl",
            "client { task_env_passthrough = [\"NODEWARD_TOKEN\"] }\n",
        );
        assert_eq!(
            load(&[token], false).unwrap_err().to_string(),
            "config: client.task_env_passthrough: NODEWARD_TOKEN is never passed to tasks: it is the agent's API token"
        );
        let bad = write("bad.hcl", "client { task_env_passthrough = [\"A-B\"] }\n");
        assert!(load(&[bad], false).is_err());
    }

    #[test]
    fn max_kill_timeout_defaults_to_nomads() {
        let none = write("none.hcl", "");
        assert_eq!(
            load(&[none], false).unwrap().max_kill_timeout,
            Duration::from_secs(30)
        );
        let set = write("set.hcl", "client { max_kill_timeout = \"2m\" }\n");
        assert_eq!(
            load(&[set], false).unwrap().max_kill_timeout,
            Duration::from_secs(120)
        );
        let bad = write("bad.hcl", "client { max_kill_timeout = \"soon\" }\n");
        let err = load(&[bad], false).unwrap_err().to_string();
        assert!(
            err.starts_with("config: client.max_kill_timeout: "),
            "{err}"
        );
    }

    #[test]
    fn dynamic_ports_have_nomads_defaults_and_are_checked() {
        let c = load(&[write("none.hcl", "")], false).unwrap();
        assert_eq!((c.min_dynamic_port, c.max_dynamic_port), (20000, 32000));
        assert_eq!(c.host_network_ip().to_string(), "127.0.0.1");
        let p = write(
            "ports.hcl",
            "bind_addr = \"127.0.0.2\"\nclient {\n  min_dynamic_port = 30000\n  max_dynamic_port = 30000\n}\n",
        );
        let c = load(&[p], false).unwrap();
        assert_eq!((c.min_dynamic_port, c.max_dynamic_port), (30000, 30000));
        assert_eq!(c.host_network_ip().to_string(), "127.0.0.2");
        for (body, want) in [
            (
                "min_dynamic_port = 0",
                "client.min_dynamic_port must be a port from 1 to 65535, got 0",
            ),
            (
                "max_dynamic_port = 65536",
                "client.max_dynamic_port must be a port from 1 to 65535, got 65536",
            ),
            (
                "min_dynamic_port = 30001\n max_dynamic_port = 30000",
                "client.min_dynamic_port (30001) must not be more than client.max_dynamic_port (30000)",
            ),
        ] {
            let p = write("bad.hcl", &format!("client {{\n {body}\n}}\n"));
            let err = load(&[p], false).unwrap_err().to_string();
            assert!(err.ends_with(want), "{body}: {err}");
        }
    }

    #[test]
    fn gc_settings_have_nomads_defaults_and_are_checked() {
        let p = write("none.hcl", "");
        let c = load(&[p], false).unwrap();
        assert_eq!(c.gc, GcConfig::default());
        assert_eq!(c.gc.interval, Duration::from_secs(60));
        assert_eq!(
            (c.gc.max_allocs, c.gc.parallel_destroys, c.max_allocs),
            (50, 2, DEFAULT_MAX_ALLOCS)
        );
        assert_eq!(
            (c.gc.disk_usage_threshold, c.gc.inode_usage_threshold),
            (80.0, 70.0)
        );
        let p = write(
            "gc.hcl",
            "client {\n  gc_interval = \"5m\"\n  gc_max_allocs = 10\n  \
             gc_disk_usage_threshold = 90\n  gc_inode_usage_threshold = 85.5\n  \
             gc_parallel_destroys = 4\n  job_gc_children = 3\n  max_allocs = 500\n}\n",
        );
        let c = load(&[p], false).unwrap();
        assert_eq!(
            c.gc,
            GcConfig {
                interval: Duration::from_secs(300),
                max_allocs: 10,
                disk_usage_threshold: 90.0,
                inode_usage_threshold: 85.5,
                parallel_destroys: 4,
                job_children: 3,
            }
        );
        assert_eq!(c.max_allocs, 500);
        for (body, want) in [
            (
                "gc_interval = \"10ms\"",
                "client.gc_interval must be at least 100ms",
            ),
            ("gc_interval = \"soon\"", "client.gc_interval"),
            (
                "gc_disk_usage_threshold = 101",
                "client.gc_disk_usage_threshold is a percentage",
            ),
            (
                "gc_inode_usage_threshold = -1",
                "client.gc_inode_usage_threshold is a percentage",
            ),
            (
                "gc_parallel_destroys = 0",
                "client.gc_parallel_destroys must be at least 1, got 0",
            ),
            (
                "max_allocs = 0",
                "client.max_allocs must be at least 1, got 0",
            ),
        ] {
            let p = write("bad.hcl", &format!("client {{\n  {body}\n}}\n"));
            let err = load(&[p], false).unwrap_err().to_string();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    /// Nomad's forms of `chroot_env` and `options` configure the exec driver.
    #[test]
    fn chroot_env_and_the_denylist_configure_the_exec_driver() {
        let p = write(
            "exec.hcl",
            r#"
client {
  chroot_env = { "/usr" = "/usr", "/opt/tools" = "/tools" }
  options = { "driver.denylist" = "exec" }
}
plugin "exec" {
  config { allow_caps = ["kill"] }
}
"#,
        );
        let c = load(&[p], false).unwrap();
        assert!(!c.drivers.exec.enabled);
        assert_eq!(
            c.drivers.exec.chroot_env,
            [
                ("/opt/tools".into(), "/tools".into()),
                ("/usr".into(), "/usr".into())
            ]
        );
        assert_eq!(
            c.warnings,
            ["plugin \"exec\" config: allow_caps has no effect"]
        );
        let p = write("none.hcl", "client {}\n");
        let c = load(&[p], false).unwrap();
        assert_eq!(c.drivers, exec::DriverSettings::default());
    }
}
