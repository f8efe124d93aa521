//! A job as the input gave it, before defaults and validation: what both front-ends produce.
//!
//! The raw types mirror Nomad's API shape (PascalCase names, every field optional, `null` the same
//! as absent, unknown fields collected in `extra`). The JSON front-end ([`super::json`])
//! deserializes them directly; the HCL front-end ([`super::hcl`]) fills them from blocks, having
//! already refused unknown names, wrong types and unparsable durations with their lines. The one
//! conversion, `TryFrom<RawJob> for Job`, then applies the defaults, reads the names spelled as
//! strings (job type, restart mode, CSI plugin type, kill signal) and validates
//! ([`super::validate`]), for both the same way.
//!
//! What is particular to JSON stays in the serde attributes: Go writes an unset field as its zero
//! value (`"User": ""`, `"HealthTimeout": 0`), so those read as absent, and durations are integer
//! nanoseconds ([`RawDuration`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::constraint::{self, Level, RawConstraint};
use super::invalid;
use super::shared::{is_empty, warn_extra, Extra};
use super::validate::{
    csi_plugin_id, csi_plugin_type, job_type, kill_signal, restart_mode, validate_job,
};
use super::{
    CsiPluginConfig, DriverConfig, Job, JobType, JobspecError, Resources, RestartMode,
    RestartPolicy, Task, TaskGroup, VolumeMount, VolumeRequest, DEFAULT_CSI_HEALTH_TIMEOUT,
    DEFAULT_CSI_MOUNT_DIR, DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR, DEFAULT_KILL_SIGNAL,
    DEFAULT_KILL_TIMEOUT,
};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Job object")]
pub(crate) struct RawJob {
    #[serde(rename = "ID")]
    pub id: Option<String>,
    pub name: Option<String>,
    #[serde(rename = "Type")]
    pub job_type: Option<String>,
    pub datacenters: Option<Vec<String>>,
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub node_pool: Option<String>,
    pub constraints: Option<Vec<RawConstraint>>,
    pub task_groups: Option<Vec<RawGroup>>,
    pub meta: Option<BTreeMap<String, String>>,
    #[serde(flatten)]
    pub fields: super::fields::RawJobFields,
    pub periodic: Option<super::periodic::RawPeriodic>,
    #[serde(rename = "ParameterizedJob")]
    pub parameterized_job: Option<super::periodic::RawParameterized>,
    /// The no-effect settings, in Nomad's API shape ([`super::kept`]): set by the HCL walk,
    /// or taken out of `extra` by `json::keep_json`.
    #[serde(skip)]
    pub kept: super::kept::Kept,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a TaskGroup object")]
pub(crate) struct RawGroup {
    pub name: Option<String>,
    pub count: Option<i64>,
    pub restart_policy: Option<RawRestart>,
    /// Keyed by the label of the group's `volume` block.
    pub volumes: Option<BTreeMap<String, RawVolume>>,
    pub networks: Option<Vec<super::network::RawNetwork>>,
    pub constraints: Option<Vec<RawConstraint>>,
    pub tasks: Option<Vec<RawTask>>,
    pub meta: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "zero_is_unset")]
    pub shutdown_delay: Option<RawDuration>,
    pub ephemeral_disk: Option<super::ephemeral_disk::RawEphemeralDisk>,
    /// The no-effect settings, in Nomad's API shape ([`super::kept`]): set by the HCL walk,
    /// or taken out of `extra` by `json::keep_json`.
    #[serde(skip)]
    pub kept: super::kept::Kept,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The fields a `restart` block (HCL) or `RestartPolicy` object (JSON) sets; the rest are
/// inherited: a group's from the job type's defaults, a task's from its group.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a RestartPolicy object")]
pub(crate) struct RawRestart {
    pub attempts: Option<i64>,
    pub interval: Option<RawDuration>,
    pub delay: Option<RawDuration>,
    pub mode: Option<String>,
    /// No effect, kept ([`super::settings`]).
    pub render_templates: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a VolumeRequest object")]
pub(crate) struct RawVolume {
    /// The block's label when not given.
    pub name: Option<String>,
    #[serde(rename = "Type")]
    pub volume_type: Option<String>,
    pub source: Option<String>,
    pub read_only: Option<bool>,
    // Nomad's API writes `""` for a host volume's modes.
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub access_mode: Option<String>,
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub attachment_mode: Option<String>,
    pub per_alloc: Option<bool>,
    pub mount_options: Option<super::volume::CsiMountOptions>,
    pub sticky: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Task object")]
pub(crate) struct RawTask {
    pub name: Option<String>,
    pub driver: Option<String>,
    pub config: Option<RawConfig>,
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub user: Option<String>,
    /// As written: `"SIGTERM"`, `"TERM"`, `"term"`.
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub kill_signal: Option<String>,
    pub kill_timeout: Option<RawDuration>,
    pub restart_policy: Option<RawRestart>,
    pub log_config: Option<super::logs::RawLogConfig>,
    pub volume_mounts: Option<Vec<RawVolumeMount>>,
    #[serde(rename = "CSIPluginConfig")]
    pub csi_plugin: Option<RawCsiPlugin>,
    pub resources: Option<RawResources>,
    pub lifecycle: Option<super::lifecycle::RawLifecycle>,
    pub leader: Option<bool>,
    pub constraints: Option<Vec<RawConstraint>>,
    pub meta: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "zero_is_unset")]
    pub shutdown_delay: Option<RawDuration>,
    pub dispatch_payload: Option<super::periodic::RawDispatchPayload>,
    /// The no-effect settings, in Nomad's API shape ([`super::kept`]): set by the HCL walk,
    /// or taken out of `extra` by `json::keep_json`.
    #[serde(skip)]
    pub kept: super::kept::Kept,
    #[serde(flatten)]
    pub extra: Extra,
}

impl RawTask {
    pub(crate) fn is_docker(&self) -> bool {
        self.driver.as_deref() == Some(super::docker::NAME)
    }
}

/// The driver's `config`: its keys are the driver's own, in lower case. `extra` holds the keys
/// beside `command` and `args`: for a docker task, the docker driver's ([`super::docker`]).
#[derive(Debug, Default, Deserialize)]
#[serde(expecting = "a Config object")]
pub(crate) struct RawConfig {
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a VolumeMount object")]
pub(crate) struct RawVolumeMount {
    pub volume: Option<String>,
    pub destination: Option<String>,
    pub read_only: Option<bool>,
    /// Both checked on the converted job ([`super::settings::check`]).
    pub propagation_mode: Option<String>,
    #[serde(rename = "SELinuxLabel")]
    pub selinux_label: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a CSIPluginConfig object")]
pub(crate) struct RawCsiPlugin {
    #[serde(rename = "ID")]
    pub id: Option<String>,
    #[serde(rename = "Type")]
    pub plugin_type: Option<String>,
    /// Empty is the default, from HCL as from JSON.
    pub mount_dir: Option<String>,
    /// Empty is the default, from HCL as from JSON.
    pub stage_publish_base_dir: Option<String>,
    /// In JSON, Go's zero duration means "not set"; in HCL, `"0s"` is refused by validation.
    #[serde(default, deserialize_with = "zero_is_unset")]
    pub health_timeout: Option<RawDuration>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Resources object")]
pub(crate) struct RawResources {
    #[serde(rename = "CPU")]
    pub cpu: Option<u32>,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: Option<u32>,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: Option<u32>,
    pub cores: Option<u32>,
    pub devices: Option<Vec<Value>>,
    #[serde(rename = "NUMA")]
    pub numa: Option<Value>,
    #[serde(rename = "SecretsMB")]
    pub secrets_mb: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A duration as the input gave it. HCL's duration strings are parsed where they are read, so
/// that their errors name the line; JSON's integer nanoseconds are checked in the conversion,
/// where the field's path is known (`TaskGroups[0].Tasks[0].KillTimeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(from = "i64")]
pub(crate) enum RawDuration {
    Parsed(Duration),
    Nanos(i64),
}

impl From<i64> for RawDuration {
    fn from(n: i64) -> RawDuration {
        RawDuration::Nanos(n)
    }
}

fn empty_is_unset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

fn zero_is_unset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawDuration>, D::Error> {
    Ok(Option::<RawDuration>::deserialize(d)?.filter(|d| *d != RawDuration::Nanos(0)))
}

impl RawJob {
    /// One warning per field nodeward does not know and ignores, by its path, in the order of
    /// the job. A field whose value is empty (`null`, `""`, `0`, `false`, `[]`, `{}`) is how Go
    /// writes "not set" and is ignored without a warning.
    pub fn ignored_fields(&self) -> Vec<String> {
        let mut out = Vec::new();
        warn_extra(&mut out, "", &self.extra);
        constraint::warn_unknown(&mut out, "", &self.constraints);
        if let Some(p) = &self.periodic {
            warn_extra(&mut out, "Periodic.", &p.extra);
        }
        if let Some(p) = &self.parameterized_job {
            warn_extra(&mut out, "ParameterizedJob.", &p.extra);
        }
        for (i, g) in self.task_groups.iter().flatten().enumerate() {
            let path = format!("TaskGroups[{i}]");
            warn_extra(&mut out, &format!("{path}."), &g.extra);
            constraint::warn_unknown(&mut out, &format!("{path}."), &g.constraints);
            if let Some(r) = &g.restart_policy {
                warn_extra(&mut out, &format!("{path}.RestartPolicy."), &r.extra);
            }
            for (label, v) in g.volumes.iter().flatten() {
                warn_extra(&mut out, &format!("{path}.Volumes.{label}."), &v.extra);
            }
            if let Some(d) = &g.ephemeral_disk {
                warn_extra(&mut out, &format!("{path}.EphemeralDisk."), &d.extra);
            }
            super::network::ignored_fields(&mut out, &path, &g.networks);
            for (j, t) in g.tasks.iter().flatten().enumerate() {
                let path = format!("{path}.Tasks[{j}]");
                warn_extra(&mut out, &format!("{path}."), &t.extra);
                constraint::warn_unknown(&mut out, &format!("{path}."), &t.constraints);
                if let Some(r) = &t.restart_policy {
                    warn_extra(&mut out, &format!("{path}.RestartPolicy."), &r.extra);
                }
                // A docker task's config keys are the docker driver's (an unknown one is refused);
                // a driver nodeward does not have keeps its config as given.
                let known = t.driver.as_deref().is_none_or(super::is_known_driver);
                if let Some(c) = t.config.as_ref().filter(|_| !t.is_docker() && known) {
                    let mut extra = c.extra.clone();
                    if t.driver.as_deref() == Some("exec") {
                        for key in ["cap_add", "cap_drop"].into_iter().chain(super::exec::KEYS) {
                            extra.remove(key);
                        }
                    } else {
                        for key in super::raw_exec::KEYS {
                            extra.remove(key);
                        }
                    }
                    warn_extra(&mut out, &format!("{path}.Config."), &extra);
                }
                if let Some(l) = &t.log_config {
                    warn_extra(&mut out, &format!("{path}.LogConfig."), &l.extra);
                }
                for (k, m) in t.volume_mounts.iter().flatten().enumerate() {
                    warn_extra(&mut out, &format!("{path}.VolumeMounts[{k}]."), &m.extra);
                }
                if let Some(c) = &t.csi_plugin {
                    warn_extra(&mut out, &format!("{path}.CSIPluginConfig."), &c.extra);
                }
                if let Some(r) = &t.resources {
                    warn_extra(&mut out, &format!("{path}.Resources."), &r.extra);
                }
                if let Some(l) = &t.lifecycle {
                    warn_extra(&mut out, &format!("{path}.Lifecycle."), &l.extra);
                }
                if let Some(d) = &t.dispatch_payload {
                    warn_extra(&mut out, &format!("{path}.DispatchPayload."), &d.extra);
                }
            }
        }
        out
    }
}

/// A string where empty means "use the default".
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

/// `path` names the field in messages: only JSON gives nanoseconds, and JSON's fields have paths.
fn duration(path: &str, value: Option<RawDuration>) -> Result<Option<Duration>, JobspecError> {
    match value {
        None => Ok(None),
        Some(RawDuration::Parsed(d)) => Ok(Some(d)),
        Some(RawDuration::Nanos(n)) => u64::try_from(n)
            .map(|n| Some(Duration::from_nanos(n)))
            .map_err(|_| {
                invalid(format!(
                    "invalid duration for \"{path}\": negative duration {n} is not allowed"
                ))
            }),
    }
}

/// A count or a number of attempts: HCL's was checked where it was read (the message names the
/// line); JSON's may be any integer.
fn whole(path: &str, value: Option<i64>) -> Result<Option<u32>, JobspecError> {
    value
        .map(|n| {
            u32::try_from(n).map_err(|_| {
                invalid(format!(
                    "\"{path}\" must be a whole number from 0 to 4294967295, got: {n}"
                ))
            })
        })
        .transpose()
}

/// Applies the defaults, reads the names spelled as strings and validates. Each field is checked
/// before the rules that span fields ([`validate_job`]), in the order the JSON parser always
/// checked them, so that an input with several problems still reports the same one.
impl TryFrom<RawJob> for Job {
    type Error = JobspecError;

    fn try_from(raw: RawJob) -> Result<Job, JobspecError> {
        let job_type = match raw.job_type.as_deref() {
            None => JobType::default(),
            Some(spelled) => job_type(spelled)?,
        };
        let (id, name) = match (raw.id, raw.name) {
            (Some(id), Some(name)) => (id, name),
            (Some(id), None) => (id.clone(), id),
            (None, Some(name)) => (name.clone(), name),
            (None, None) => return Err(invalid("the job has no ID")),
        };
        let task_groups = raw
            .task_groups
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, g)| group(&format!("TaskGroups[{i}]"), job_type, g))
            .collect::<Result<_, _>>()?;
        let periodic = raw
            .periodic
            .map(|p| super::periodic::periodic(&id, p))
            .transpose()?;
        let parameterized_job = raw
            .parameterized_job
            .map(|p| super::periodic::parameterized(&id, p))
            .transpose()?;
        let job = Job {
            datacenters: constraint::datacenters(&format!("job {id:?}"), raw.datacenters)?,
            node_pool: constraint::node_pool(raw.node_pool),
            constraints: constraint::convert(&format!("job {id:?}"), Level::Job, raw.constraints)?,
            id,
            name,
            job_type,
            meta: raw.meta.unwrap_or_default(),
            fields: super::fields::convert(raw.fields)?,
            task_groups,
            periodic,
            parameterized_job,
            parent_id: String::new(),
            payload: String::new(),
            kept: raw.kept,
        };
        validate_job(&job)?;
        Ok(job)
    }
}

fn group(path: &str, job_type: JobType, raw: RawGroup) -> Result<TaskGroup, JobspecError> {
    let restart_policy = match raw.restart_policy {
        Some(r) => restart(
            &format!("{path}.RestartPolicy"),
            r,
            job_type.default_restart_policy(),
        )?,
        None => job_type.default_restart_policy(),
    };
    let volumes = raw
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|(label, v)| {
            let ctx = format!("{path}.Volumes.{label}");
            let volume = VolumeRequest {
                name: v.name.unwrap_or_else(|| label.clone()),
                volume_type: v.volume_type.unwrap_or_default(),
                source: v.source.unwrap_or_default(),
                read_only: v.read_only.unwrap_or(false),
                access_mode: v
                    .access_mode
                    .map(|m| m.parse().map_err(|e| invalid(format!("{ctx}: {e}"))))
                    .transpose()?,
                attachment_mode: v
                    .attachment_mode
                    .map(|m| m.parse().map_err(|e| invalid(format!("{ctx}: {e}"))))
                    .transpose()?,
                per_alloc: v.per_alloc.unwrap_or(false),
                mount_options: v.mount_options,
                sticky: v.sticky.unwrap_or(false),
            };
            Ok((label, volume))
        })
        .collect::<Result<_, JobspecError>>()?;
    let name = raw.name.unwrap_or_default();
    let networks = super::network::networks(path, &name, raw.networks)?;
    let tasks = raw
        .tasks
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| task(&format!("{path}.Tasks[{i}]"), restart_policy, t))
        .collect::<Result<_, _>>()?;
    let ephemeral_disk =
        super::ephemeral_disk::convert(&format!("group {name:?}"), raw.ephemeral_disk.as_ref())?;
    let group = TaskGroup {
        constraints: constraint::convert(
            &format!("group {name:?}"),
            Level::Group,
            raw.constraints,
        )?,
        name,
        count: whole(&format!("{path}.Count"), raw.count)?.unwrap_or(1),
        restart_policy,
        volumes,
        networks,
        shutdown_delay: duration(&format!("{path}.ShutdownDelay"), raw.shutdown_delay)?
            .unwrap_or_default(),
        meta: raw.meta.unwrap_or_default(),
        ephemeral_disk,
        tasks,
        kept: raw.kept,
    };
    super::network::check_docker_ports(&group)?;
    Ok(group)
}

/// `base` with what `raw` sets.
fn restart(
    path: &str,
    raw: RawRestart,
    base: RestartPolicy,
) -> Result<RestartPolicy, JobspecError> {
    let attempts = whole(&format!("{path}.Attempts"), raw.attempts)?;
    let interval = duration(&format!("{path}.Interval"), raw.interval)?;
    let delay = duration(&format!("{path}.Delay"), raw.delay)?;
    let mode: Option<RestartMode> = raw.mode.as_deref().map(restart_mode).transpose()?;
    Ok(RestartPolicy {
        attempts: attempts.unwrap_or(base.attempts),
        interval: interval.unwrap_or(base.interval),
        delay: delay.unwrap_or(base.delay),
        mode: mode.unwrap_or(base.mode),
        render_templates: raw.render_templates.unwrap_or(base.render_templates),
    })
}

/// An exec task's `cap_add` and `cap_drop` (Nomad's exec config keys), kept where a docker
/// task's are; each a capability name or `all`.
fn exec_caps(task: &str, extra: &Extra) -> Result<super::docker::DockerConfig, JobspecError> {
    let list = |key: &str| -> Result<Vec<String>, JobspecError> {
        let Some(v) = extra.get(key) else {
            return Ok(Vec::new());
        };
        let items: Vec<String> = serde_json::from_value(v.clone()).map_err(|_| {
            invalid(format!(
                "task {task:?}: exec config {key} must be a list of strings"
            ))
        })?;
        for c in &items {
            if !c.eq_ignore_ascii_case("all") && crate::util::caps::cap_number(c).is_none() {
                return Err(invalid(format!(
                    "task {task:?}: exec config {key}: unknown capability {c:?}"
                )));
            }
        }
        Ok(items)
    };
    Ok(super::docker::DockerConfig {
        cap_add: list("cap_add")?,
        cap_drop: list("cap_drop")?,
        ..Default::default()
    })
}

fn task(path: &str, group_policy: RestartPolicy, raw: RawTask) -> Result<Task, JobspecError> {
    let is_docker = raw.is_docker();
    let name = raw.name.unwrap_or_default();
    let kill_signal = match raw.kill_signal {
        Some(signal) => kill_signal(&name, &signal)?,
        None => DEFAULT_KILL_SIGNAL,
    };
    let restart_policy = match raw.restart_policy {
        Some(r) => restart(&format!("{path}.RestartPolicy"), r, group_policy)?,
        None => group_policy,
    };
    let mut config = raw.config.unwrap_or_default();
    let mut env = raw.env.unwrap_or_default();
    let known = super::is_known_driver(raw.driver.as_deref().unwrap_or_default());
    let opaque = if known || raw.driver.as_deref().is_none_or(str::is_empty) {
        BTreeMap::new()
    } else {
        std::mem::take(&mut config.extra).into_iter().collect()
    };
    // `raw_exec`'s own keys (a task without a driver is refused by validation).
    let oom_score_adj = if raw.driver.as_deref() == Some(super::raw_exec::NAME) {
        super::raw_exec::convert(path, &config.extra)?
    } else {
        None
    };
    let (pid_mode, ipc_mode) = if raw.driver.as_deref() == Some(super::exec::NAME) {
        super::exec::convert(path, &config.extra)?
    } else {
        (None, None)
    };
    let docker = if is_docker {
        let fields = config.extra.into_iter().collect();
        let (docker, docker_env) = super::docker::parse(&format!("task {name:?}"), fields)?;
        for (k, v) in docker_env {
            env.entry(k).or_insert(v);
        }
        docker
    } else if raw.driver.as_deref() == Some("exec") {
        exec_caps(&name, &config.extra)?
    } else {
        super::docker::DockerConfig::default()
    };
    let volume_mounts = raw
        .volume_mounts
        .unwrap_or_default()
        .into_iter()
        .map(|m| VolumeMount {
            volume: m.volume.unwrap_or_default(),
            destination: m.destination.unwrap_or_default(),
            read_only: m.read_only.unwrap_or(false),
            propagation_mode: m.propagation_mode.unwrap_or_default(),
            selinux_label: m.selinux_label.unwrap_or_default(),
        })
        .collect();
    let csi_plugin = raw
        .csi_plugin
        .map(|c| csi_plugin(&format!("{path}.CSIPluginConfig"), c))
        .transpose()?;
    let resource_defaults = Resources::default();
    let resources = raw.resources.unwrap_or_default();
    let memory_mb = resources.memory_mb.unwrap_or(resource_defaults.memory_mb);
    let memory_max_mb = resources.memory_max_mb.unwrap_or(0);
    // Nomad's check (structs.Resources.Validate): a hard limit below the soft one means nothing.
    if memory_max_mb != 0 && memory_max_mb < memory_mb {
        return Err(invalid(format!(
            "task {name:?}: memory_max ({memory_max_mb}) should be larger than memory ({memory_mb})"
        )));
    }
    let cores = resources.cores.unwrap_or(0);
    let numa = resources.numa.filter(|n| !is_empty(n));
    super::devices::check_numa(&name, numa.as_ref())?;
    // Nomad's api.Resources.Canonicalize: a task that asks for cores gets no default `cpu`;
    // then its structs.Resources.Validate refuses both at once.
    let cpu = match resources.cpu {
        Some(cpu) if cpu > 0 && cores > 0 => {
            return Err(invalid(format!(
                "task {name:?}: Task can only ask for 'cpu' or 'cores' resource, not both."
            )))
        }
        Some(cpu) => cpu,
        None if cores > 0 => 0,
        None => resource_defaults.cpu,
    };
    let lifecycle = raw
        .lifecycle
        .map(|l| super::lifecycle::lifecycle(&name, l))
        .transpose()?;
    let dispatch_payload = raw
        .dispatch_payload
        .map(|d| super::periodic::dispatch_payload(&name, d))
        .transpose()?;
    Ok(Task {
        lifecycle,
        dispatch_payload,
        kept: raw.kept,
        leader: raw.leader.unwrap_or(false),
        shutdown_delay: duration(&format!("{path}.ShutdownDelay"), raw.shutdown_delay)?
            .unwrap_or_default(),
        meta: raw.meta.unwrap_or_default(),
        driver: raw.driver.unwrap_or_default(),
        config: DriverConfig {
            command: config.command.unwrap_or_default(),
            args: config.args.unwrap_or_default(),
            oom_score_adj,
            pid_mode,
            ipc_mode,
            docker,
            opaque,
        },
        env,
        user: raw.user,
        kill_signal,
        kill_timeout: duration(&format!("{path}.KillTimeout"), raw.kill_timeout)?
            .unwrap_or(DEFAULT_KILL_TIMEOUT),
        restart_policy,
        log_config: super::logs::convert(raw.log_config),
        volume_mounts,
        csi_plugin,
        resources: Resources {
            cpu,
            memory_mb,
            memory_max_mb,
            cores,
            devices: resources.devices.unwrap_or_default(),
            numa,
            secrets_mb: resources.secrets_mb.unwrap_or(0),
        },
        constraints: constraint::convert(&format!("task {name:?}"), Level::Task, raw.constraints)?,
        name,
    })
}

fn csi_plugin(path: &str, raw: RawCsiPlugin) -> Result<CsiPluginConfig, JobspecError> {
    // Checked in csi.md's order: the id first, then the type.
    let id = raw.id.unwrap_or_default();
    csi_plugin_id(&id)?;
    let plugin_type = csi_plugin_type(raw.plugin_type.as_deref().unwrap_or_default())?;
    let health_timeout = duration(&format!("{path}.HealthTimeout"), raw.health_timeout)?
        .unwrap_or(DEFAULT_CSI_HEALTH_TIMEOUT);
    Ok(CsiPluginConfig {
        id,
        plugin_type,
        mount_dir: non_empty(raw.mount_dir).unwrap_or_else(|| DEFAULT_CSI_MOUNT_DIR.to_string()),
        stage_publish_base_dir: non_empty(raw.stage_publish_base_dir)
            .unwrap_or_else(|| DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR.to_string()),
        health_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::LogConfig;

    /// The smallest raw job that converts: one group with one task.
    fn minimal() -> RawJob {
        RawJob {
            id: Some("j".to_string()),
            task_groups: Some(vec![RawGroup {
                name: Some("g".to_string()),
                tasks: Some(vec![RawTask {
                    name: Some("t".to_string()),
                    driver: Some("raw_exec".to_string()),
                    config: Some(RawConfig {
                        command: Some("true".to_string()),
                        ..RawConfig::default()
                    }),
                    ..RawTask::default()
                }]),
                ..RawGroup::default()
            }]),
            ..RawJob::default()
        }
    }

    fn task(job: &mut RawJob) -> &mut RawTask {
        &mut job.task_groups.as_mut().unwrap()[0].tasks.as_mut().unwrap()[0]
    }

    fn csi(health_timeout: Option<RawDuration>) -> Option<RawCsiPlugin> {
        Some(RawCsiPlugin {
            id: Some("p".to_string()),
            plugin_type: Some("node".to_string()),
            health_timeout,
            ..RawCsiPlugin::default()
        })
    }

    #[test]
    fn the_conversion_applies_defaults_and_validates() {
        let job = Job::try_from(minimal()).unwrap();
        assert_eq!(job.name, "j");
        let group = &job.task_groups[0];
        assert_eq!(group.count, 1);
        assert_eq!(
            group.restart_policy,
            JobType::Service.default_restart_policy()
        );
        assert_eq!(group.tasks[0].kill_timeout, DEFAULT_KILL_TIMEOUT);
        assert_eq!(group.tasks[0].log_config, LogConfig::default());

        assert_eq!(
            Job::try_from(RawJob::default()).unwrap_err(),
            invalid("the job has no ID")
        );
        let mut empty = minimal();
        empty.task_groups = None;
        assert_eq!(
            Job::try_from(empty).unwrap_err(),
            invalid("job \"j\" must have at least one group")
        );
    }

    /// JSON's zero values are "not set" where Go means that; the same values from HCL are what
    /// the user wrote, and validation judges them.
    #[test]
    fn zero_values_from_json_are_unset() {
        let from_json: RawTask = serde_json::from_value(serde_json::json!({
            "User": "",
            "KillSignal": "",
            "CSIPluginConfig": {"ID": "p", "Type": "node", "HealthTimeout": 0},
        }))
        .unwrap();
        assert_eq!(from_json.user, None);
        assert_eq!(from_json.kill_signal, None);
        assert_eq!(from_json.csi_plugin.unwrap().health_timeout, None);

        let mut job = minimal();
        task(&mut job).csi_plugin = csi(None);
        let plugin = Job::try_from(job).unwrap().task_groups[0].tasks[0]
            .csi_plugin
            .clone()
            .unwrap();
        assert_eq!(plugin.health_timeout, DEFAULT_CSI_HEALTH_TIMEOUT);

        let mut job = minimal();
        task(&mut job).csi_plugin = csi(Some(RawDuration::Parsed(Duration::ZERO)));
        assert_eq!(
            Job::try_from(job).unwrap_err(),
            invalid("task \"t\": csi_plugin health_timeout must be greater than 0")
        );
        let mut job = minimal();
        task(&mut job).user = Some(String::new());
        assert_eq!(
            Job::try_from(job).unwrap_err(),
            invalid("task \"t\": user must not be empty")
        );
    }

    /// Moved from validate.rs, where a domain task can no longer hold an unknown signal.
    #[test]
    fn an_unknown_kill_signal_is_refused_by_name() {
        let mut job = minimal();
        task(&mut job).kill_signal = Some("SIGNOPE".to_string());
        assert_eq!(
            Job::try_from(job).unwrap_err(),
            invalid("task \"t\": unknown kill_signal \"SIGNOPE\"")
        );
        let mut job = minimal();
        task(&mut job).kill_signal = Some("term".to_string());
        let signal = Job::try_from(job).unwrap().task_groups[0].tasks[0].kill_signal;
        assert_eq!((signal.name(), signal.number()), ("SIGTERM", libc::SIGTERM));
    }

    #[test]
    fn json_durations_are_checked_with_their_path() {
        let mut job = minimal();
        task(&mut job).kill_timeout = Some(RawDuration::Nanos(-1));
        assert_eq!(
            Job::try_from(job).unwrap_err(),
            invalid("invalid duration for \"TaskGroups[0].Tasks[0].KillTimeout\": negative duration -1 is not allowed")
        );
        let mut job = minimal();
        task(&mut job).kill_timeout = Some(RawDuration::Nanos(7));
        assert_eq!(
            Job::try_from(job).unwrap().task_groups[0].tasks[0].kill_timeout,
            Duration::from_nanos(7)
        );
    }
}
