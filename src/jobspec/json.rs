//! Jobspecs in Nomad's API JSON shape: `{"Job": {...}}` or the bare job object, PascalCase field
//! names, durations in integer nanoseconds.
//!
//! The input is read into raw types that mirror the JSON (every field optional, `null` the same as
//! absent, unknown fields collected), then turned into the domain types with defaults applied.
//! JSON written by Nomad carries many fields nodeward does not implement (`Datacenters`,
//! `Networks`, `Services`...): they are ignored and named in [`Parsed::warnings`], except when
//! their value is empty (`null`, `""`, `0`, `false`, `[]`, `{}`), which is how Go writes "not
//! set". What the domain types serialize to is accepted back unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::validate::{csi_plugin_type, kill_signal, restart_mode, validate_job};
use super::{
    CsiPluginConfig, DriverConfig, Job, JobType, JobspecError, LogConfig, Parsed, Resources,
    RestartOverride, RestartPolicy, Task, TaskGroup, VolumeMount, VolumeRequest,
    DEFAULT_CSI_HEALTH_TIMEOUT, DEFAULT_CSI_MOUNT_DIR, DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR,
    DEFAULT_KILL_SIGNAL, DEFAULT_KILL_TIMEOUT,
};

/// Parses a job in Nomad's API JSON shape, applies defaults and validates it.
pub fn parse_job(bytes: &[u8]) -> Result<Parsed, JobspecError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| JobspecError::Syntax(format!("invalid JSON: {e}")))?;
    let mut warnings = Vec::new();
    let job = match value {
        Value::Object(mut outer) if outer.contains_key("Job") => {
            let job = outer.remove("Job").unwrap_or(Value::Null);
            // A registration request carries `EnforceIndex`, `PolicyOverride`... next to the job.
            warn_extra(&mut warnings, "", outer.into_iter().collect());
            job
        }
        bare => bare,
    };
    if !job.is_object() {
        return Err(invalid("the job must be a JSON object"));
    }
    let raw: RawJob = serde_path_to_error::deserialize(job)
        .map_err(|e| invalid(format!("invalid field \"{}\": {}", e.path(), e.inner())))?;
    let mut parsed = Parsed::try_from(raw)?;
    warnings.append(&mut parsed.warnings);
    parsed.warnings = warnings;
    validate_job(&parsed.job)?;
    Ok(parsed)
}

fn invalid(msg: impl Into<String>) -> JobspecError {
    JobspecError::Invalid(msg.into())
}

/// Fields nodeward does not know, by name, to be reported as warnings.
type Extra = BTreeMap<String, Value>;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Job object")]
struct RawJob {
    #[serde(rename = "ID")]
    id: Option<String>,
    name: Option<String>,
    #[serde(rename = "Type")]
    job_type: Option<String>,
    task_groups: Option<Vec<RawGroup>>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a TaskGroup object")]
struct RawGroup {
    name: Option<String>,
    count: Option<i64>,
    restart_policy: Option<RawRestart>,
    volumes: Option<BTreeMap<String, RawVolume>>,
    tasks: Option<Vec<RawTask>>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a RestartPolicy object")]
struct RawRestart {
    attempts: Option<i64>,
    interval: Option<i64>,
    delay: Option<i64>,
    mode: Option<String>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a VolumeRequest object")]
struct RawVolume {
    name: Option<String>,
    #[serde(rename = "Type")]
    volume_type: Option<String>,
    source: Option<String>,
    read_only: Option<bool>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Task object")]
struct RawTask {
    name: Option<String>,
    driver: Option<String>,
    config: Option<RawConfig>,
    env: Option<BTreeMap<String, String>>,
    user: Option<String>,
    kill_signal: Option<String>,
    kill_timeout: Option<i64>,
    restart_policy: Option<RawRestart>,
    log_config: Option<RawLogConfig>,
    volume_mounts: Option<Vec<RawVolumeMount>>,
    #[serde(rename = "CSIPluginConfig")]
    csi_plugin: Option<RawCsiPlugin>,
    resources: Option<RawResources>,
    #[serde(flatten)]
    extra: Extra,
}

/// The driver's `config`: its keys are the driver's own, in lower case.
#[derive(Deserialize)]
#[serde(expecting = "a Config object")]
struct RawConfig {
    command: Option<String>,
    args: Option<Vec<String>>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a LogConfig object")]
struct RawLogConfig {
    max_files: Option<u32>,
    #[serde(rename = "MaxFileSizeMB")]
    max_file_size_mb: Option<u32>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a VolumeMount object")]
struct RawVolumeMount {
    volume: Option<String>,
    destination: Option<String>,
    read_only: Option<bool>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a CSIPluginConfig object")]
struct RawCsiPlugin {
    #[serde(rename = "ID")]
    id: Option<String>,
    #[serde(rename = "Type")]
    plugin_type: Option<String>,
    mount_dir: Option<String>,
    stage_publish_base_dir: Option<String>,
    health_timeout: Option<i64>,
    #[serde(flatten)]
    extra: Extra,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Resources object")]
struct RawResources {
    #[serde(rename = "CPU")]
    cpu: Option<u32>,
    #[serde(rename = "MemoryMB")]
    memory_mb: Option<u32>,
    #[serde(flatten)]
    extra: Extra,
}

/// Whether a value is Go's "not set": such a field is ignored without a warning.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn warn_extra(warnings: &mut Vec<String>, prefix: &str, extra: Extra) {
    for (key, value) in extra {
        if !is_empty(&value) {
            warnings.push(format!(
                "field \"{prefix}{key}\" is not supported by nodeward and was ignored"
            ));
        }
    }
}

/// A string Go leaves empty when not set.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

fn nanos(path: &str, value: Option<i64>) -> Result<Option<Duration>, JobspecError> {
    match value {
        None => Ok(None),
        Some(n) => u64::try_from(n)
            .map(|n| Some(Duration::from_nanos(n)))
            .map_err(|_| {
                invalid(format!(
                    "invalid duration for \"{path}\": negative duration {n} is not allowed"
                ))
            }),
    }
}

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

impl TryFrom<RawJob> for Parsed {
    type Error = JobspecError;

    fn try_from(raw: RawJob) -> Result<Parsed, JobspecError> {
        let mut warnings = Vec::new();
        let job_type = match raw.job_type.as_deref() {
            None => JobType::default(),
            Some("service") => JobType::Service,
            Some("batch") => JobType::Batch,
            Some("system") => JobType::System,
            Some(other) => {
                return Err(invalid(format!(
                    "job type must be \"service\", \"batch\" or \"system\", got: {other:?}"
                )))
            }
        };
        let (id, name) = match (raw.id, raw.name) {
            (Some(id), Some(name)) => (id, name),
            (Some(id), None) => (id.clone(), id),
            (None, Some(name)) => (name.clone(), name),
            (None, None) => return Err(invalid("the job has no ID")),
        };
        warn_extra(&mut warnings, "", raw.extra);
        let task_groups = raw
            .task_groups
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, g)| group(&mut warnings, &format!("TaskGroups[{i}]"), job_type, g))
            .collect::<Result<_, _>>()?;
        Ok(Parsed {
            job: Job {
                id,
                name,
                job_type,
                task_groups,
            },
            warnings,
        })
    }
}

fn group(
    warnings: &mut Vec<String>,
    path: &str,
    job_type: JobType,
    raw: RawGroup,
) -> Result<TaskGroup, JobspecError> {
    warn_extra(warnings, &format!("{path}."), raw.extra);
    let restart_policy = match raw.restart_policy {
        Some(r) => restart(warnings, &format!("{path}.RestartPolicy"), r)?
            .apply(job_type.default_restart_policy()),
        None => job_type.default_restart_policy(),
    };
    let mut volumes = BTreeMap::new();
    for (label, v) in raw.volumes.unwrap_or_default() {
        warn_extra(warnings, &format!("{path}.Volumes.{label}."), v.extra);
        let volume = VolumeRequest {
            name: v.name.unwrap_or_else(|| label.clone()),
            volume_type: v.volume_type.unwrap_or_default(),
            source: v.source.unwrap_or_default(),
            read_only: v.read_only.unwrap_or(false),
        };
        volumes.insert(label, volume);
    }
    let tasks = raw
        .tasks
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| task(warnings, &format!("{path}.Tasks[{i}]"), restart_policy, t))
        .collect::<Result<_, _>>()?;
    Ok(TaskGroup {
        name: raw.name.unwrap_or_default(),
        count: whole(&format!("{path}.Count"), raw.count)?.unwrap_or(1),
        restart_policy,
        volumes,
        tasks,
    })
}

fn restart(
    warnings: &mut Vec<String>,
    path: &str,
    raw: RawRestart,
) -> Result<RestartOverride, JobspecError> {
    warn_extra(warnings, &format!("{path}."), raw.extra);
    Ok(RestartOverride {
        attempts: whole(&format!("{path}.Attempts"), raw.attempts)?,
        interval: nanos(&format!("{path}.Interval"), raw.interval)?,
        delay: nanos(&format!("{path}.Delay"), raw.delay)?,
        mode: raw.mode.as_deref().map(restart_mode).transpose()?,
    })
}

fn task(
    warnings: &mut Vec<String>,
    path: &str,
    group_policy: RestartPolicy,
    raw: RawTask,
) -> Result<Task, JobspecError> {
    warn_extra(warnings, &format!("{path}."), raw.extra);
    let name = raw.name.unwrap_or_default();
    let kill_signal = match non_empty(raw.kill_signal) {
        Some(signal) => kill_signal(&name, &signal)?,
        None => DEFAULT_KILL_SIGNAL.to_string(),
    };
    let restart_policy = match raw.restart_policy {
        Some(r) => restart(warnings, &format!("{path}.RestartPolicy"), r)?.apply(group_policy),
        None => group_policy,
    };
    let config = match raw.config {
        Some(c) => {
            warn_extra(warnings, &format!("{path}.Config."), c.extra);
            DriverConfig {
                command: c.command.unwrap_or_default(),
                args: c.args.unwrap_or_default(),
            }
        }
        None => DriverConfig {
            command: String::new(),
            args: Vec::new(),
        },
    };
    let log_config = match raw.log_config {
        Some(l) => {
            warn_extra(warnings, &format!("{path}.LogConfig."), l.extra);
            let defaults = LogConfig::default();
            LogConfig {
                max_files: l.max_files.unwrap_or(defaults.max_files),
                max_file_size_mb: l.max_file_size_mb.unwrap_or(defaults.max_file_size_mb),
            }
        }
        None => LogConfig::default(),
    };
    let volume_mounts = raw
        .volume_mounts
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            warn_extra(warnings, &format!("{path}.VolumeMounts[{i}]."), m.extra);
            VolumeMount {
                volume: m.volume.unwrap_or_default(),
                destination: m.destination.unwrap_or_default(),
                read_only: m.read_only.unwrap_or(false),
            }
        })
        .collect();
    let csi_plugin = raw
        .csi_plugin
        .map(|c| csi_plugin(warnings, &format!("{path}.CSIPluginConfig"), c))
        .transpose()?;
    let resources = match raw.resources {
        Some(r) => {
            warn_extra(warnings, &format!("{path}.Resources."), r.extra);
            let defaults = Resources::default();
            Resources {
                cpu: r.cpu.unwrap_or(defaults.cpu),
                memory_mb: r.memory_mb.unwrap_or(defaults.memory_mb),
            }
        }
        None => Resources::default(),
    };
    Ok(Task {
        driver: raw.driver.unwrap_or_default(),
        config,
        env: raw.env.unwrap_or_default(),
        user: non_empty(raw.user),
        kill_signal,
        kill_timeout: nanos(&format!("{path}.KillTimeout"), raw.kill_timeout)?
            .unwrap_or(DEFAULT_KILL_TIMEOUT),
        restart_policy,
        log_config,
        volume_mounts,
        csi_plugin,
        resources,
        name,
    })
}

fn csi_plugin(
    warnings: &mut Vec<String>,
    path: &str,
    raw: RawCsiPlugin,
) -> Result<CsiPluginConfig, JobspecError> {
    warn_extra(warnings, &format!("{path}."), raw.extra);
    // Checked in csi.md's order: the id first, then the type.
    let id = raw.id.unwrap_or_default();
    if id.is_empty() {
        return Err(invalid("csi_plugin must have a non-empty id"));
    }
    let plugin_type = csi_plugin_type(raw.plugin_type.as_deref().unwrap_or_default())?;
    // Go's zero duration means "not set" in Nomad's API.
    let health_timeout = nanos(&format!("{path}.HealthTimeout"), raw.health_timeout)?
        .filter(|d| !d.is_zero())
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
