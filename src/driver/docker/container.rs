//! What the engine is asked to create for a task (docker.md "Running a task"): a pure function of
//! the start spec and the agent's docker settings, so every mapping is tested without an engine.
//!
//! - Nomad's container name `<task>-<alloc_id>` and labels, `/alloc`, `/local`, `/secrets` (and a
//!   CSI plugin's socket directory) bound from the allocation directory;
//! - the config's `volumes` and bind `mount`s: host paths relative to the task directory, and
//!   confined to it unless the agent enables `volumes`;
//! - `privileged` and `cap_add` only where the agent allows them;
//! - `resources`: `memory` → memory limit (with `memory_max`: `memory_max` → limit, `memory` →
//!   reservation), `cpu` → CPU shares, the CPUs of `cores` → `CpusetCpus`;
//! - `ports`: each named port of the group's network published on its host IP and host port,
//!   from the container port (`to`, else the host port), for TCP and UDP, as Nomad's driver does.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::engine::{
    CreateContainer, DeviceMapping, Empty, HostConfig, Mount, MountKind, PortBinding, TmpfsOptions,
    Ulimit,
};
use super::settings::DockerSettings;
use crate::driver::{ContainerSpec, StartSpec};
use crate::jobspec::docker::MountType;
use crate::jobspec::LogConfig;

/// Nomad's labels on every container it runs.
pub const LABEL_ALLOC_ID: &str = "com.hashicorp.nomad.alloc_id";
pub const LABEL_JOB_NAME: &str = "com.hashicorp.nomad.job_name";
pub const LABEL_TASK_NAME: &str = "com.hashicorp.nomad.task_name";
/// nodeward's own: the node whose agent made the container (the only agent that removes it).
pub const LABEL_NODE_ID: &str = "io.nodeward.node_id";
/// nodeward's own: the task's `logs { max_files max_file_size disabled }`, `<files>:<MiB>`, and
/// `<files>:<MiB>:disabled` when its logs are not collected, for an agent that re-attaches to the
/// container (it has no jobspec at hand). An agent from before `disabled` reads the longer form
/// as no label (the defaults) and copies the container's logs.
pub const LABEL_LOGS: &str = "io.nodeward.logs";
const LOGS_DISABLED: &str = "disabled";

/// The [`LABEL_LOGS`] value of a task's `logs`.
pub fn log_label(logs: &LogConfig) -> String {
    let mut label = format!("{}:{}", logs.max_files, logs.max_file_size_mb);
    if logs.disabled {
        label.push(':');
        label.push_str(LOGS_DISABLED);
    }
    label
}

/// The log rotation recorded on a container ([`LABEL_LOGS`]); the defaults without one.
pub fn log_config(labels: &BTreeMap<String, String>) -> LogConfig {
    let parsed = labels.get(LABEL_LOGS).and_then(|v| {
        let mut parts = v.split(':');
        let config = LogConfig {
            max_files: parts.next()?.parse().ok()?,
            max_file_size_mb: parts.next()?.parse().ok()?,
            disabled: match parts.next() {
                None => false,
                Some(LOGS_DISABLED) => true,
                Some(_) => return None,
            },
        };
        parts.next().is_none().then_some(config)
    });
    parsed.unwrap_or_default()
}

/// The smallest memory limit the engine accepts (6 MiB in Docker 20.10).
const MIN_MEMORY_BYTES: i64 = 6 * 1024 * 1024;

/// The container name of a task: Nomad's `<task>-<alloc_id>`.
pub fn name(task: &str, alloc_id: &str) -> String {
    format!("{task}-{alloc_id}")
}

/// Why a container cannot be made for a task: the task's config asks for what this agent does
/// not allow, or names a path it may not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("Docker privileged mode is disabled on this node (plugin \"docker\" config allow_privileged)")]
    Privileged,
    #[error("capability {0:?} is not allowed on this node (plugin \"docker\" config allow_caps)")]
    Capability(String),
    #[error("volumes are not enabled on this node; cannot mount host path {0:?} from outside the task directory (plugin \"docker\" config volumes.enabled)")]
    HostPath(String),
}

/// The create request for `spec`'s container.
pub fn create(
    spec: &StartSpec,
    c: &ContainerSpec,
    settings: &DockerSettings,
) -> Result<CreateContainer, Refused> {
    let d = &c.config;
    if d.privileged && !settings.allow_privileged {
        return Err(Refused::Privileged);
    }
    if let Some(cap) = d.cap_add.iter().find(|cap| !settings.cap_allowed(cap)) {
        return Err(Refused::Capability(cap.clone()));
    }
    let mut mounts: Vec<Mount> = c
        .binds
        .iter()
        .map(|b| bind(b.host.display().to_string(), &b.container, b.read_only))
        .collect();
    for v in &d.volumes {
        let mut parts = v.splitn(3, ':');
        let (host, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let read_only = parts.next() == Some("ro");
        let host = host_path(&c.task_dir, host, settings)?;
        mounts.push(bind(host, target, read_only));
    }
    for m in &d.mount {
        mounts.push(match m.mount_type {
            MountType::Bind => bind(
                host_path(&c.task_dir, &m.source, settings)?,
                &m.target,
                m.readonly,
            ),
            MountType::Volume => Mount {
                kind: MountKind::Volume,
                source: m.source.clone(),
                target: m.target.clone(),
                read_only: m.readonly,
                bind_options: None,
                volume_options: None,
                tmpfs_options: None,
            },
            MountType::Tmpfs => Mount {
                kind: MountKind::Tmpfs,
                source: String::new(),
                target: m.target.clone(),
                read_only: m.readonly,
                bind_options: None,
                volume_options: None,
                tmpfs_options: Some(TmpfsOptions {
                    size_bytes: m.tmpfs_size.map(|s| s as i64),
                    mode: m.tmpfs_mode,
                }),
            },
        });
    }
    let mut labels: BTreeMap<String, String> = d.labels.clone();
    labels.insert(LABEL_ALLOC_ID.into(), spec.alloc_id.clone());
    labels.insert(LABEL_JOB_NAME.into(), c.job_name.clone());
    labels.insert(LABEL_TASK_NAME.into(), spec.task_name.clone());
    let ulimits = d
        .ulimit
        .iter()
        .map(|(name, value)| {
            let mut numbers = value.split(':').map(|n| n.parse::<i64>().unwrap_or(0));
            let soft = numbers.next().unwrap_or(0);
            Ulimit {
                name: name.clone(),
                soft,
                hard: numbers.next().unwrap_or(soft),
            }
        })
        .collect();
    let (exposed_ports, port_bindings) = published_ports(&c.ports);
    // As Nomad's docker driver: with `memory_max`, it is the limit and `memory` the reservation.
    let bytes = |mb: u32| (mb > 0).then(|| (i64::from(mb) << 20).max(MIN_MEMORY_BYTES));
    let (memory, memory_reservation) = if c.memory_max_mb > 0 {
        (bytes(c.memory_max_mb), bytes(c.memory_mb))
    } else {
        (bytes(c.memory_mb), None)
    };
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    // `command` replaces the image's CMD, with `args` after it (Nomad's docker driver); `args`
    // alone are the CMD, after the image's ENTRYPOINT.
    let cmd = match (spec.command.is_empty(), spec.args.is_empty()) {
        (true, true) => None,
        (true, false) => Some(spec.args.clone()),
        (false, _) => Some(
            std::iter::once(spec.command.clone())
                .chain(spec.args.iter().cloned())
                .collect(),
        ),
    };
    Ok(CreateContainer {
        image: d.image.clone(),
        cmd,
        entrypoint: (!d.entrypoint.is_empty()).then(|| d.entrypoint.clone()),
        env: spec.env.clone(),
        working_dir: non_empty(&d.work_dir),
        labels,
        hostname: non_empty(&d.hostname),
        user: spec.user.clone(),
        exposed_ports,
        tty: false,
        attach_stdout: true,
        attach_stderr: true,
        host_config: HostConfig {
            mounts,
            port_bindings,
            network_mode: Some(non_empty(&d.network_mode).unwrap_or_else(|| "bridge".into())),
            memory,
            memory_reservation,
            // No swap beyond the limit: a task that outgrows its memory is OOM-killed.
            memory_swap: memory,
            cpu_shares: (c.cpu > 0).then(|| i64::from(c.cpu).max(2)),
            // A task's `cores`: the CPUs it holds, as Nomad's docker driver sets them.
            cpuset_cpus: (!c.cores.is_empty()).then(|| crate::resources::format_cpuset(&c.cores)),
            privileged: d.privileged,
            cap_add: d.cap_add.clone(),
            cap_drop: d.cap_drop.clone(),
            init: d.init.then_some(true),
            readonly_rootfs: d.readonly_rootfs,
            shm_size: d.shm_size.map(|s| s as i64),
            ulimits,
            sysctls: d.sysctl.clone(),
            devices: d
                .devices
                .iter()
                .map(|dev| DeviceMapping {
                    path_on_host: dev.host_path.clone(),
                    path_in_container: if dev.container_path.is_empty() {
                        dev.host_path.clone()
                    } else {
                        dev.container_path.clone()
                    },
                    cgroup_permissions: if dev.cgroup_permissions.is_empty() {
                        "rwm".into()
                    } else {
                        dev.cgroup_permissions.clone()
                    },
                })
                .collect(),
            ..HostConfig::default()
        },
    })
}

/// `ExposedPorts` and `HostConfig.PortBindings` for the published ports.
type Published = (BTreeMap<String, Empty>, BTreeMap<String, Vec<PortBinding>>);

fn published_ports(ports: &[crate::jobspec::network::AllocatedPort]) -> Published {
    let (mut exposed, mut bindings) = (BTreeMap::new(), BTreeMap::<_, Vec<_>>::new());
    for p in ports {
        for proto in ["tcp", "udp"] {
            let key = format!("{}/{proto}", p.task_port());
            exposed.insert(key.clone(), Empty {});
            bindings.entry(key).or_default().push(PortBinding {
                host_ip: p.host_ip.clone(),
                host_port: p.value.to_string(),
            });
        }
    }
    (exposed, bindings)
}

fn bind(source: String, target: &str, read_only: bool) -> Mount {
    Mount {
        kind: MountKind::Bind,
        source,
        target: target.to_string(),
        read_only,
        bind_options: None,
        volume_options: None,
        tmpfs_options: None,
    }
}

/// A host path of a task's `volumes` or bind mount: relative ones are in the task directory and
/// may not climb out of it; absolute ones (or a climb) only where the agent enables volumes.
fn host_path(task_dir: &Path, path: &str, settings: &DockerSettings) -> Result<String, Refused> {
    let p = Path::new(path);
    let inside = !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        return Ok(task_dir.join(p).display().to_string());
    }
    if !settings.volumes_enabled {
        return Err(Refused::HostPath(path.to_string()));
    }
    Ok(if p.is_absolute() {
        PathBuf::from(p)
    } else {
        task_dir.join(p)
    }
    .display()
    .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Bind;
    use crate::jobspec::docker::DockerConfig;

    fn spec(config: DockerConfig) -> (StartSpec, ContainerSpec) {
        let c = ContainerSpec {
            config,
            job_name: "plugin".into(),
            task_dir: PathBuf::from("/d/alloc/a1/web"),
            binds: vec![Bind {
                host: PathBuf::from("/d/alloc/a1/alloc"),
                container: "/alloc".into(),
                read_only: false,
            }],
            memory_mb: 64,
            memory_max_mb: 0,
            cpu: 100,
            ports: Vec::new(),
            cores: Vec::new(),
        };
        let s = StartSpec {
            binds: Vec::new(),
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            command: "httpd".into(),
            args: vec!["-f".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            cwd: PathBuf::from("/d/alloc/a1/web"),
            user: None,
            alloc_id: "a1".into(),
            log_dir: PathBuf::from("/d/alloc/a1/alloc/logs"),
            task_name: "web".into(),
            logs: LogConfig::default(),
            oom_score_adj: None,
            resources: Default::default(),
            cores: Vec::new(),
            container: Some(c.clone()),
            progress: None,
            cancel: None,
        };
        (s, c)
    }

    #[test]
    fn a_task_becomes_nomads_container() {
        let (s, c) = spec(DockerConfig {
            image: "busybox:1".into(),
            volumes: vec!["data:/data:ro".into()],
            ..Default::default()
        });
        let req = create(&s, &c, &DockerSettings::default()).unwrap();
        assert_eq!(req.image, "busybox:1");
        assert_eq!(req.cmd, Some(vec!["httpd".to_string(), "-f".to_string()]));
        assert_eq!(req.labels[LABEL_ALLOC_ID], "a1");
        assert_eq!(req.labels[LABEL_TASK_NAME], "web");
        assert_eq!(req.labels[LABEL_JOB_NAME], "plugin");
        assert_eq!(req.env["A"], "1");
        let m = &req.host_config.mounts;
        assert_eq!(
            (m[0].source.as_str(), m[0].target.as_str()),
            ("/d/alloc/a1/alloc", "/alloc")
        );
        assert_eq!(
            (m[1].source.as_str(), m[1].target.as_str(), m[1].read_only),
            ("/d/alloc/a1/web/data", "/data", true)
        );
        assert_eq!(req.host_config.memory, Some(64 << 20));
        assert_eq!(req.host_config.memory_reservation, None);
        assert_eq!(req.host_config.cpu_shares, Some(100));
        assert_eq!(req.host_config.cpuset_cpus, None, "no cores asked");
        let (s, mut c) = spec(DockerConfig {
            image: "busybox:1".into(),
            ..Default::default()
        });
        c.memory_max_mb = 128;
        c.cores = vec![0, 2, 3];
        let req = create(&s, &c, &DockerSettings::default()).unwrap();
        let h = &req.host_config;
        assert_eq!(h.cpuset_cpus.as_deref(), Some("0,2-3"));
        assert_eq!(
            (h.memory, h.memory_reservation),
            (Some(128 << 20), Some(64 << 20))
        );
        assert_eq!(h.memory_swap, Some(128 << 20));
        assert_eq!(req.host_config.network_mode.as_deref(), Some("bridge"));
        assert_eq!(name("web", "a1"), "web-a1");
        let labels = BTreeMap::from([(LABEL_LOGS.to_string(), "3:1".to_string())]);
        assert_eq!(
            log_config(&labels),
            LogConfig {
                max_files: 3,
                max_file_size_mb: 1,
                disabled: false,
            }
        );
        assert_eq!(log_config(&BTreeMap::new()), LogConfig::default());
    }

    /// An agent that re-attaches to a container reads its `logs` from its label: a task whose
    /// logs are not collected stays so across an agent restart.
    #[test]
    fn the_log_label_keeps_disabled_logs() {
        let read = |v: &str| log_config(&BTreeMap::from([(LABEL_LOGS.to_string(), v.into())]));
        let off = LogConfig {
            max_files: 3,
            max_file_size_mb: 1,
            disabled: true,
        };
        assert_eq!(log_label(&off), "3:1:disabled");
        assert_eq!(read(&log_label(&off)), off);
        let on = LogConfig::default();
        assert_eq!(
            log_label(&on),
            "10:10",
            "the label of an agent before `disabled`"
        );
        assert_eq!(read(&log_label(&on)), on);
        for bad in ["3:1:maybe", "3:1:disabled:x", "3", "x:1"] {
            assert_eq!(read(bad), LogConfig::default(), "{bad}");
        }
    }

    #[test]
    fn what_the_agent_does_not_allow_is_refused() {
        let settings = DockerSettings::default();
        let (s, c) = spec(DockerConfig {
            image: "x".into(),
            privileged: true,
            ..Default::default()
        });
        assert_eq!(create(&s, &c, &settings), Err(Refused::Privileged));
        let (s, c) = spec(DockerConfig {
            image: "x".into(),
            cap_add: vec!["SYS_ADMIN".into()],
            ..Default::default()
        });
        assert_eq!(
            create(&s, &c, &settings),
            Err(Refused::Capability("SYS_ADMIN".into()))
        );
        for path in ["/etc:/etc", "../../x:/x"] {
            let (s, c) = spec(DockerConfig {
                image: "x".into(),
                volumes: vec![path.into()],
                ..Default::default()
            });
            assert!(
                matches!(create(&s, &c, &settings), Err(Refused::HostPath(_))),
                "{path}"
            );
            let enabled = DockerSettings {
                volumes_enabled: true,
                ..DockerSettings::default()
            };
            assert!(create(&s, &c, &enabled).is_ok(), "{path}");
        }
    }
}
