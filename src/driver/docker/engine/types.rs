//! The engine's request and answer bodies as typed structs, in the Engine API's own field names,
//! and the domain values the client hands out ([`ContainerInfo`], [`ContainerStats`], ...).
//!
//! Request types leave out every empty or unset field (`skip_serializing_if`), so that the
//! engine's defaults apply to what the task did not ask for. Answer types read only the fields
//! nodeward uses and accept the rest.

use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;

use super::logs::parse_time;

/// `POST /containers/create`: the Engine's `ContainerConfig` with its `HostConfig`, the fields the
/// docker driver sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CreateContainer {
    pub image: String,
    /// `None`: the image's `CMD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// `None`: the image's `ENTRYPOINT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Sent as the Engine's `["KEY=value", ...]`.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        serialize_with = "env_list"
    )]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Keys like `8001/tcp`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub exposed_ports: BTreeMap<String, Empty>,
    /// Always false: the log stream is then multiplexed, stdout and stderr apart.
    pub tty: bool,
    pub attach_stdout: bool,
    pub attach_stderr: bool,
    pub host_config: HostConfig,
}

/// The `{}` of a set in the Engine API (`ExposedPorts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

fn env_list<S: Serializer>(env: &BTreeMap<String, String>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().map(|(k, v)| format!("{k}={v}")))
}

/// The Engine's `HostConfig`, the fields docker.md needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostConfig {
    /// `host:container[:ro]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Keys like `8001/tcp`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub port_bindings: BTreeMap<String, Vec<PortBinding>>,
    /// `bridge`, `host`, `none`, `container:<id>`, or a network's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<String>,
    /// Bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_reservation: Option<i64>,
    /// Memory plus swap, bytes; equal to `memory` for no swap (as Nomad sets it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_swap: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<i64>,
    /// `0-3`, `0,2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub privileged: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Runs the engine's init (tini) as PID 1, which forwards signals and reaps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<bool>,
    #[serde(skip_serializing_if = "is_false")]
    pub readonly_rootfs: bool,
    /// Bytes of `/dev/shm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ulimits: Vec<Ulimit>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceMapping>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One of `HostConfig.Mounts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Mount {
    #[serde(rename = "Type")]
    pub kind: MountKind,
    /// A host path (bind), a volume's name (volume), nothing (tmpfs).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
    pub target: String,
    #[serde(skip_serializing_if = "is_false")]
    pub read_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_options: Option<BindOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_options: Option<VolumeOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tmpfs_options: Option<TmpfsOptions>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    Bind,
    Volume,
    Tmpfs,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct BindOptions {
    /// `rprivate`, `rshared`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeOptions {
    #[serde(skip_serializing_if = "is_false")]
    pub no_copy: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_config: Option<VolumeDriver>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeDriver {
    pub name: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TmpfsOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// The permission bits of the tmpfs root, as a number (`0o1777`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PortBinding {
    /// Empty: every address of the host.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
    pub host_port: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Ulimit {
    pub name: String,
    pub soft: i64,
    pub hard: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeviceMapping {
    pub path_on_host: String,
    pub path_in_container: String,
    /// `rwm` and its subsets.
    pub cgroup_permissions: String,
}

// ---- answers ----

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct RawVersion {
    pub version: String,
    pub api_version: String,
    #[serde(rename = "MinAPIVersion", default)]
    pub min_api_version: Option<String>,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub arch: String,
    #[serde(default)]
    pub kernel_version: String,
}

/// `GET /version`: what the node fingerprints as `driver.docker.version` and
/// `driver.docker.os_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineVersion {
    /// The engine's release, `20.10.24+dfsg1`.
    pub version: String,
    /// The newest API version the engine speaks.
    pub api_version: String,
    /// The oldest API version the engine accepts (absent from very old engines).
    pub min_api_version: Option<String>,
    /// `linux` (or `windows`).
    pub os_type: String,
    pub arch: String,
    pub kernel_version: String,
}

impl From<RawVersion> for EngineVersion {
    fn from(raw: RawVersion) -> EngineVersion {
        EngineVersion {
            version: raw.version,
            api_version: raw.api_version,
            min_api_version: raw.min_api_version.filter(|v| !v.is_empty()),
            os_type: raw.os,
            arch: raw.arch,
            kernel_version: raw.kernel_version,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Created {
    pub id: String,
}

/// The body of an error answer.
#[derive(Debug, Deserialize)]
pub(super) struct ErrorBody {
    pub message: String,
}

/// One line of an image pull's progress stream.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Progress {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(rename = "errorDetail", default)]
    pub error_detail: Option<ProgressError>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ProgressError {
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct WaitAnswer {
    pub status_code: i64,
    #[serde(default)]
    pub error: Option<WaitError>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct WaitError {
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct RawInspect {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub config: RawInspectConfig,
    pub state: RawState,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct RawInspectConfig {
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub image: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct RawState {
    pub status: String,
    #[serde(default)]
    pub running: bool,
    #[serde(default)]
    pub pid: i64,
    #[serde(default)]
    pub exit_code: i64,
    #[serde(rename = "OOMKilled", default)]
    pub oom_killed: bool,
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub finished_at: String,
}

/// `GET /containers/{id}/json`, the fields the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub id: String,
    /// Without the engine's leading `/`.
    pub name: String,
    /// The image ID (`sha256:...`).
    pub image_id: String,
    /// The image as the container was created from it (`busybox:1`).
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub state: ContainerState,
}

/// A container's `State`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    /// `created`, `running`, `paused`, `restarting`, `removing`, `exited`, `dead`.
    pub status: String,
    pub running: bool,
    /// 0 when not running.
    pub pid: i64,
    pub exit_code: i64,
    pub oom_killed: bool,
    /// Why the engine could not run it, when it could not.
    pub error: String,
    /// Nanoseconds since the Unix epoch; `None` before the first start.
    pub started_at: Option<i64>,
    /// Nanoseconds since the Unix epoch; `None` while it has not exited.
    pub finished_at: Option<i64>,
}

impl RawInspect {
    pub fn into_info(self) -> Result<ContainerInfo, String> {
        let s = self.state;
        Ok(ContainerInfo {
            name: self.name.trim_start_matches('/').to_string(),
            id: self.id,
            image_id: self.image,
            image: self.config.image,
            labels: self.config.labels.unwrap_or_default(),
            state: ContainerState {
                status: s.status,
                running: s.running,
                pid: s.pid,
                exit_code: s.exit_code,
                oom_killed: s.oom_killed,
                error: s.error,
                started_at: parse_time(&s.started_at)?,
                finished_at: parse_time(&s.finished_at)?,
            },
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct RawSummary {
    pub id: String,
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub state: String,
}

/// One container of `GET /containers/json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSummary {
    pub id: String,
    /// Its name, without the engine's leading `/`.
    pub name: String,
    pub image: String,
    pub labels: BTreeMap<String, String>,
    /// `created`, `running`, `exited`, ...
    pub state: String,
}

impl From<RawSummary> for ContainerSummary {
    fn from(raw: RawSummary) -> ContainerSummary {
        ContainerSummary {
            name: raw
                .names
                .first()
                .map(|n| n.trim_start_matches('/').to_string())
                .unwrap_or_default(),
            id: raw.id,
            image: raw.image,
            labels: raw.labels.unwrap_or_default(),
            state: raw.state,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawStats {
    #[serde(default)]
    pub read: String,
    #[serde(default)]
    pub memory_stats: RawMemory,
    #[serde(default)]
    pub cpu_stats: RawCpu,
    #[serde(default)]
    pub precpu_stats: RawCpu,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawMemory {
    #[serde(default)]
    pub usage: u64,
    #[serde(default)]
    pub max_usage: u64,
    #[serde(default)]
    pub limit: u64,
    #[serde(default)]
    pub stats: BTreeMap<String, u64>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawCpu {
    #[serde(default)]
    pub cpu_usage: RawCpuUsage,
    #[serde(default)]
    pub system_cpu_usage: u64,
    #[serde(default)]
    pub online_cpus: u32,
    #[serde(default)]
    pub throttling_data: RawThrottling,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawCpuUsage {
    #[serde(default)]
    pub total_usage: u64,
    #[serde(default)]
    pub usage_in_kernelmode: u64,
    #[serde(default)]
    pub usage_in_usermode: u64,
    #[serde(default)]
    pub percpu_usage: Option<Vec<u64>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RawThrottling {
    #[serde(default)]
    pub throttled_periods: u64,
    #[serde(default)]
    pub throttled_time: u64,
}

/// `GET /containers/{id}/stats?stream=false`: one sample, with the engine's previous one (taken
/// about a second earlier) for CPU rates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ContainerStats {
    /// When the engine read the sample, nanoseconds since the Unix epoch.
    pub read_at: Option<i64>,
    pub memory: MemoryStats,
    pub cpu: CpuSample,
    pub precpu: CpuSample,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes charged to the container's memory cgroup (page cache included).
    pub usage: u64,
    /// The highest `usage` seen (cgroup v1; 0 on cgroup v2).
    pub max_usage: u64,
    /// The memory limit (the host's memory when unlimited).
    pub limit: u64,
    /// Anonymous memory: `rss` on cgroup v1, `anon` on v2.
    pub rss: u64,
    /// Page cache: `cache` on cgroup v1, `file` on v2.
    pub cache: u64,
    pub swap: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// CPU time of the container, nanoseconds.
    pub total_usage: u64,
    pub kernel_usage: u64,
    pub user_usage: u64,
    /// CPU time of the whole host, nanoseconds (all CPUs).
    pub system_usage: u64,
    pub online_cpus: u32,
    pub throttled_periods: u64,
    /// Nanoseconds.
    pub throttled_time: u64,
}

impl ContainerStats {
    /// CPU use between the two samples in percent of one CPU, as `docker stats` computes it
    /// (200 for two busy CPUs); 0 when the samples do not allow it.
    pub fn cpu_percent(&self) -> f64 {
        let cpu = self.cpu.total_usage.saturating_sub(self.precpu.total_usage) as f64;
        let system = self
            .cpu
            .system_usage
            .saturating_sub(self.precpu.system_usage) as f64;
        if cpu <= 0.0 || system <= 0.0 {
            return 0.0;
        }
        cpu / system * f64::from(self.cpu.online_cpus.max(1)) * 100.0
    }
}

impl RawCpu {
    fn sample(&self) -> CpuSample {
        let online = match self.online_cpus {
            0 => self
                .cpu_usage
                .percpu_usage
                .as_ref()
                .map_or(0, |v| v.len() as u32),
            n => n,
        };
        CpuSample {
            total_usage: self.cpu_usage.total_usage,
            kernel_usage: self.cpu_usage.usage_in_kernelmode,
            user_usage: self.cpu_usage.usage_in_usermode,
            system_usage: self.system_cpu_usage,
            online_cpus: online,
            throttled_periods: self.throttling_data.throttled_periods,
            throttled_time: self.throttling_data.throttled_time,
        }
    }
}

impl RawStats {
    pub fn into_stats(self) -> ContainerStats {
        let stat = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| self.memory_stats.stats.get(*n).copied())
                .unwrap_or(0)
        };
        ContainerStats {
            // A sample of a container that is not running has the zero time.
            read_at: parse_time(&self.read).ok().flatten(),
            memory: MemoryStats {
                usage: self.memory_stats.usage,
                max_usage: self.memory_stats.max_usage,
                limit: self.memory_stats.limit,
                rss: stat(&["rss", "anon"]),
                cache: stat(&["cache", "file"]),
                swap: stat(&["swap"]),
            },
            cpu: self.cpu_stats.sample(),
            precpu: self.precpu_stats.sample(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_body_leaves_out_what_is_not_set() {
        let body = CreateContainer {
            image: "busybox:1".into(),
            cmd: Some(vec!["sh".into(), "-c".into(), "exit 3".into()]),
            env: [("A".to_string(), "1".to_string())].into(),
            attach_stdout: true,
            attach_stderr: true,
            host_config: HostConfig {
                memory: Some(64 << 20),
                mounts: vec![Mount {
                    kind: MountKind::Tmpfs,
                    source: String::new(),
                    target: "/scratch".into(),
                    read_only: false,
                    bind_options: None,
                    volume_options: None,
                    tmpfs_options: Some(TmpfsOptions {
                        size_bytes: Some(1 << 20),
                        mode: None,
                    }),
                }],
                ..HostConfig::default()
            },
            ..CreateContainer::default()
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"Image":"busybox:1","Cmd":["sh","-c","exit 3"],"Env":["A=1"],"Tty":false,"AttachStdout":true,"AttachStderr":true,"HostConfig":{"Mounts":[{"Type":"tmpfs","Target":"/scratch","TmpfsOptions":{"SizeBytes":1048576}}],"Memory":67108864}}"#
        );
    }

    #[test]
    fn an_inspect_reads_times_to_nanoseconds_and_the_zero_time_as_none() {
        let raw: RawInspect = serde_json::from_str(
            r#"{"Id":"abc","Name":"/web","Image":"sha256:1","Config":{"Image":"busybox:1","Labels":{"k":"v"}},
                "State":{"Status":"created","Running":false,"Pid":0,"ExitCode":0,"OOMKilled":true,
                "StartedAt":"2026-12-01T16:01:07.797504229Z","FinishedAt":"0001-01-01T00:00:00Z"}}"#,
        )
        .unwrap();
        let info = raw.into_info().unwrap();
        assert_eq!(info.name, "web");
        assert_eq!(info.labels["k"], "v");
        assert!(info.state.oom_killed);
        assert_eq!(info.state.started_at, Some(1_796_140_867_797_504_229));
        assert_eq!(info.state.finished_at, None);
    }

    #[test]
    fn stats_read_cgroup_v1_and_v2_names() {
        let v1: RawStats = serde_json::from_str(
            r#"{"read":"2026-12-01T16:02:11.748074065Z","memory_stats":{"usage":10,"max_usage":20,"limit":30,"stats":{"rss":4,"cache":5}},
                "cpu_stats":{"cpu_usage":{"total_usage":300},"system_cpu_usage":2000,"online_cpus":2},
                "precpu_stats":{"cpu_usage":{"total_usage":100},"system_cpu_usage":1000,"online_cpus":2}}"#,
        )
        .unwrap();
        let s = v1.into_stats();
        assert_eq!(
            (s.memory.rss, s.memory.cache, s.memory.max_usage),
            (4, 5, 20)
        );
        assert_eq!(s.cpu_percent(), 40.0);
        let v2: RawStats =
            serde_json::from_str(r#"{"memory_stats":{"usage":10,"stats":{"anon":6,"file":7}}}"#)
                .unwrap();
        let s = v2.into_stats();
        assert_eq!((s.memory.rss, s.memory.cache, s.read_at), (6, 7, None));
        assert_eq!(s.cpu_percent(), 0.0);
    }
}
