//! Jobspecs in Nomad's HCL syntax: the jobspec's schema on the shared HCL front-end
//! ([`crate::hcl`]), which parses, names lines in errors and reads values literally.
//!
//! The tree is walked block by block into the raw job (`raw`): each block accepts a fixed
//! set of attributes and nested blocks, and anything else, a value of the wrong type or a duration
//! that does not parse is an error naming the block, the attribute and the line. A
//! `"${NOMAD_TASK_DIR}"` comes through as that text and is interpolated when the task starts
//! ([`super::interpolate`]). Defaults and validation are the raw job's conversion, the same as
//! for JSON.
//!
//! The names each block accepts are the implemented rows of the schema table
//! ([`super::table`]); the blocks read by a module of their own say so where they are read.

use std::collections::BTreeMap;

use hcl::edit::structure::Block;
use hcl::edit::Span;

use super::constraint::{Level, RawConstraint};
use super::invalid;
use super::lifecycle::RawLifecycle;
use super::logs::RawLogConfig;
use super::raw::{
    RawConfig, RawCsiPlugin, RawDuration, RawGroup, RawJob, RawResources, RawRestart, RawTask,
    RawVolume, RawVolumeMount,
};
use super::table::{self, At};
use super::validate::{self, csi_plugin_id, csi_plugin_type, job_type, restart_mode};
use super::volume::CsiMountOptions;
use super::{Job, JobspecError, Parsed};
use crate::hcl::eval::Inputs;
use crate::hcl::{Document, Items, Source};

/// Parses a jobspec written in HCL, applies defaults and validates it. Its variables get their
/// defaults only, and `file()` reads nothing: [`parse_job_with`] gives it more.
pub fn parse_job(src: &str) -> Result<Parsed, JobspecError> {
    parse_job_with(src, &Inputs::default())
}

/// [`parse_job`] with the values of its variables, the directory `file()` reads from and the
/// clock of `timestamp()`. HCL2's language is evaluated first ([`crate::hcl::eval`]): its
/// `variable` and `locals` blocks leave the body, and every expression becomes the literal
/// this walker reads.
pub fn parse_job_with(src: &str, inputs: &Inputs) -> Result<Parsed, JobspecError> {
    // On the parser's thread, where `rsadecrypt` keeps what it decrypted: every message of the
    // parse, the schema's after the evaluation too, is redacted there.
    crate::hcl::read(src, |doc| {
        use crate::hcl::funcs::rsa::{keep_secrets, redact};
        keep_secrets(|| match walk_job(doc, inputs) {
            Ok(mut parsed) => {
                parsed.warnings = parsed.warnings.into_iter().map(redact).collect();
                Ok(parsed)
            }
            Err(e) => Err(e.map_message(redact)),
        })
    })
}

/// [`parse_job_with`] on the parsed document.
fn walk_job(
    Document { mut body, source }: Document,
    inputs: &Inputs,
) -> Result<Parsed, JobspecError> {
    let raw = {
        crate::hcl::eval::evaluate(&mut body, &source, inputs)?;
        let (warnings, kept) = super::schema::prepare_hcl(&mut body, &source)?;
        let top = source.items("the jobspec", &body, &[], &["job"])?;
        let jobs = top.blocks("job");
        match jobs.as_slice() {
            [one] => {
                let mut job = Walk { src: &source }.job(one)?;
                kept.attach(&mut job);
                Ok((job, warnings))
            }
            [] => Err(invalid("the jobspec has no job block")),
            [_, second, ..] => Err(invalid(format!(
                "the jobspec has more than one job block (second at line {})",
                source.line(second.span())
            ))),
        }
    }?;
    let (raw, mut warnings) = raw;
    let job = Job::try_from(raw)?;
    super::devices::warn(&job, &mut warnings);
    super::settings::warn(&job, &mut warnings);
    Ok(Parsed { job, warnings })
}

/// How a task's `config` block is read: by its driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfigKind {
    RawExec,
    Exec,
    Docker,
    /// A driver nodeward does not have: anything, kept as given.
    Opaque,
}

/// A list item of `args` as its text (`8001` is `"8001"`, as for `raw_exec`).
fn scalar_text(v: serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The jobspec's schema, one method per block.
///
/// The names a jobspec spells as strings (job type, restart mode, kill signal, CSI plugin id and
/// type) are read by the conversion; they are also checked here, where they are read, so that of
/// several problems in a file the first one written is reported, and the job type's message
/// names its line.
struct Walk<'s> {
    src: &'s Source,
}

impl Walk<'_> {
    fn job(&self, block: &Block) -> Result<RawJob, JobspecError> {
        let label = self.src.label("the jobspec", block)?;
        let what = format!("job {label:?}");
        let items = self.items(&what, block, At::Job)?;
        let spelled_type = self.src.opt_string(&items, "type")?;
        if let (Some(spelled), Some(attr)) = (&spelled_type, items.attr("type")) {
            job_type(spelled)
                .map_err(|e| invalid(format!("{e} (line {})", self.src.line(attr.span()))))?;
        }
        let task_groups = items
            .blocks("group")
            .into_iter()
            .map(|g| self.group(&what, g))
            .collect::<Result<_, _>>()?;
        let periodic = self
            .src
            .single(&items, "periodic")?
            .map(|b| super::periodic::read_periodic(self.src, &what, b))
            .transpose()?;
        let parameterized_job = self
            .src
            .single(&items, "parameterized")?
            .map(|b| super::periodic::read_parameterized(self.src, &what, b))
            .transpose()?;
        Ok(RawJob {
            periodic,
            parameterized_job,
            // As Nomad's jobspec: `id` and `name` each default to the label.
            id: Some(
                self.src
                    .opt_string(&items, "id")?
                    .unwrap_or_else(|| label.clone()),
            ),
            name: Some(self.src.opt_string(&items, "name")?.unwrap_or(label)),
            job_type: spelled_type,
            datacenters: items
                .attr("datacenters")
                .map(|a| self.src.strings(&what, a))
                .transpose()?,
            node_pool: self.src.opt_string(&items, "node_pool")?,
            constraints: Some(self.constraints(&what, Level::Job, &items)?),
            meta: super::meta::read_hcl(self.src, &items)?,
            fields: super::fields::read_hcl(self.src, &items)?,
            task_groups: Some(task_groups),
            ..RawJob::default()
        })
    }

    fn group(&self, job: &str, block: &Block) -> Result<RawGroup, JobspecError> {
        let name = self.src.label(job, block)?;
        let what = format!("group {name:?}");
        let items = self.items(&what, block, At::Group)?;
        let count = self.src.opt_u32(&items, "count")?;
        let restart_policy = self
            .src
            .single(&items, "restart")?
            .map(|b| self.restart(&what, b))
            .transpose()?;
        let mut volumes = BTreeMap::new();
        for vb in items.blocks("volume") {
            let label = self.src.label(&what, vb)?;
            let volume = self.volume(&what, &label, vb)?;
            if volumes.insert(label.clone(), volume).is_some() {
                return Err(invalid(format!(
                    "volume {label:?} is defined more than once in {what} (again at line {})",
                    self.src.line(vb.span())
                )));
            }
        }
        let networks = super::network::read_hcl(self.src, &what, items.blocks("network"))?;
        let tasks = items
            .blocks("task")
            .into_iter()
            .map(|t| self.task(&what, t))
            .collect::<Result<_, _>>()?;
        Ok(RawGroup {
            name: Some(name),
            count: count.map(i64::from),
            restart_policy,
            volumes: Some(volumes),
            networks,
            constraints: Some(self.constraints(&what, Level::Group, &items)?),
            meta: super::meta::read_hcl(self.src, &items)?,
            shutdown_delay: self.duration(&items, "shutdown_delay")?,
            ephemeral_disk: super::ephemeral_disk::read_hcl(self.src, &items)?,
            tasks: Some(tasks),
            ..RawGroup::default()
        })
    }

    fn restart(&self, parent: &str, block: &Block) -> Result<RawRestart, JobspecError> {
        let what = format!("restart block of {parent}");
        let items = self.items(&what, block, At::Restart)?;
        let mode = self.src.opt_string(&items, "mode")?;
        if let Some(mode) = &mode {
            restart_mode(mode)?;
        }
        Ok(RawRestart {
            mode,
            attempts: self.src.opt_u32(&items, "attempts")?.map(i64::from),
            interval: self.duration(&items, "interval")?,
            delay: self.duration(&items, "delay")?,
            render_templates: self.src.opt_bool(&items, "render_templates")?,
            ..RawRestart::default()
        })
    }

    fn volume(&self, group: &str, label: &str, block: &Block) -> Result<RawVolume, JobspecError> {
        let what = format!("volume {label:?} of {group}");
        let items = self.items(&what, block, At::Volume)?;
        let mount_options = self
            .src
            .single(&items, "mount_options")?
            .map(|b| self.mount_options(&what, b))
            .transpose()?;
        Ok(RawVolume {
            name: Some(label.to_string()),
            volume_type: self.src.opt_string(&items, "type")?,
            source: self.src.opt_string(&items, "source")?,
            read_only: self.src.opt_bool(&items, "read_only")?,
            access_mode: self.src.opt_string(&items, "access_mode")?,
            attachment_mode: self.src.opt_string(&items, "attachment_mode")?,
            per_alloc: self.src.opt_bool(&items, "per_alloc")?,
            sticky: self.src.opt_bool(&items, "sticky")?,
            mount_options,
            ..RawVolume::default()
        })
    }

    /// A CSI volume request's `mount_options { fs_type  mount_flags }`.
    fn mount_options(&self, volume: &str, block: &Block) -> Result<CsiMountOptions, JobspecError> {
        self.src.no_labels(volume, block)?;
        let what = format!("mount_options block of {volume}");
        let items = self.items(&what, block, At::MountOptions)?;
        Ok(CsiMountOptions {
            fs_type: self.src.opt_string(&items, "fs_type")?.unwrap_or_default(),
            mount_flags: items
                .attr("mount_flags")
                .map(|a| self.src.strings(&what, a))
                .transpose()?
                .unwrap_or_default(),
        })
    }

    fn task(&self, group: &str, block: &Block) -> Result<RawTask, JobspecError> {
        let name = self.src.label(group, block)?;
        let what = format!("task {name:?}");
        let items = self.items(&what, block, At::Task)?;
        let kill_signal = self.src.opt_string(&items, "kill_signal")?;
        if let Some(signal) = &kill_signal {
            validate::kill_signal(&name, signal)?;
        }
        let kill_timeout = self.duration(&items, "kill_timeout")?;
        let restart_policy = self
            .src
            .single(&items, "restart")?
            .map(|b| self.restart(&what, b))
            .transpose()?;
        let driver = self.src.opt_string(&items, "driver")?;
        let kind = match driver.as_deref() {
            Some(super::docker::NAME) => ConfigKind::Docker,
            Some("exec") => ConfigKind::Exec,
            Some(d) if !d.is_empty() && !super::is_known_driver(d) => ConfigKind::Opaque,
            _ => ConfigKind::RawExec,
        };
        let config = self
            .src
            .single(&items, "config")?
            .map(|b| self.config(&what, b, kind))
            .transpose()?;
        let env = self.src.scalar_block_or_map(&items, "env")?;
        let log_config = self
            .src
            .single(&items, "logs")?
            .map(|b| self.logs(&what, b))
            .transpose()?;
        let volume_mounts = items
            .blocks("volume_mount")
            .into_iter()
            .map(|b| self.volume_mount(&what, b))
            .collect::<Result<_, _>>()?;
        let csi_plugin = self
            .src
            .single(&items, "csi_plugin")?
            .map(|b| self.csi_plugin(&what, b))
            .transpose()?;
        let resources = self
            .src
            .single(&items, "resources")?
            .map(|b| self.resources(&what, b))
            .transpose()?;
        let lifecycle = self
            .src
            .single(&items, "lifecycle")?
            .map(|b| self.lifecycle(&what, b))
            .transpose()?;
        let dispatch_payload = self
            .src
            .single(&items, "dispatch_payload")?
            .map(|b| super::periodic::read_dispatch_payload(self.src, &what, b))
            .transpose()?;
        Ok(RawTask {
            lifecycle,
            dispatch_payload,
            leader: self.src.opt_bool(&items, "leader")?,
            shutdown_delay: self.duration(&items, "shutdown_delay")?,
            meta: super::meta::read_hcl(self.src, &items)?,
            driver,
            user: self.src.opt_string(&items, "user")?,
            name: Some(name),
            config,
            env,
            kill_signal,
            kill_timeout,
            restart_policy,
            log_config,
            volume_mounts: Some(volume_mounts),
            csi_plugin,
            resources,
            constraints: Some(self.constraints(&what, Level::Task, &items)?),
            ..RawTask::default()
        })
    }

    /// A task's `config`: `command` and `args` for `raw_exec`; for `docker`, every key of the
    /// docker driver ([`super::docker::KEYS`]), read as plain data; for a driver nodeward does
    /// not have, whatever it holds, read as plain data and kept.
    fn config(
        &self,
        task: &str,
        block: &Block,
        kind: ConfigKind,
    ) -> Result<RawConfig, JobspecError> {
        let what = format!("config block of {task}");
        if matches!(kind, ConfigKind::Docker | ConfigKind::Opaque) {
            let keys: &[&str] = match kind {
                ConfigKind::Docker => super::docker::KEYS,
                _ => &[],
            };
            let mut fields = self.src.body_value(&what, &block.body, keys)?;
            let command = match fields.remove("command") {
                None => None,
                Some(serde_json::Value::String(s)) => Some(s),
                Some(_) => {
                    return Err(invalid(format!(
                        "attribute \"command\" in {what} must be a string"
                    )))
                }
            };
            let args = match fields.remove("args") {
                None => None,
                Some(v) => Some(
                    serde_json::from_value::<Vec<serde_json::Value>>(v)
                        .ok()
                        .and_then(|items| items.into_iter().map(scalar_text).collect())
                        .ok_or_else(|| {
                            invalid(format!(
                                "attribute \"args\" in {what} must be a list of strings"
                            ))
                        })?,
                ),
            };
            return Ok(RawConfig {
                command,
                args,
                extra: fields.into_iter().collect(),
            });
        }
        let keys: &[&str] = if kind == ConfigKind::Exec {
            &[
                "command", "args", "cap_add", "cap_drop", "pid_mode", "ipc_mode",
            ]
        } else {
            &[
                "command",
                "args",
                "oom_score_adj",
                super::raw_exec::CGROUP_V1_OVERRIDE,
                super::raw_exec::CGROUP_V2_OVERRIDE,
            ]
        };
        let items = self.src.items(&what, &block.body, keys, &[])?;
        let mut extra = super::shared::Extra::new();
        for key in ["cap_add", "cap_drop"] {
            if let Some(attr) = items.attr(key) {
                extra.insert(key.to_string(), self.src.strings(&what, attr)?.into());
            }
        }
        for key in super::raw_exec::REFUSED {
            if let Some(attr) = items.attr(key) {
                let at = format!("{what} at line {}", self.src.line(attr.span()));
                return Err(super::raw_exec::refused_override(&format!(
                    "attribute {key:?} in {at}"
                )));
            }
        }
        for key in super::exec::KEYS {
            if let (Some(attr), Some(mode)) = (items.attr(key), self.src.opt_string(&items, key)?) {
                let at = format!(
                    "attribute {key:?} in {what} at line {}",
                    self.src.line(attr.span())
                );
                super::exec::namespace_mode(&at, key, &mode)?;
                extra.insert(key.to_string(), mode.into());
            }
        }
        if let Some(attr) = items.attr("oom_score_adj") {
            let n = self.whole_number(&what, attr)?;
            let at = format!("{what} at line {}", self.src.line(attr.span()));
            super::raw_exec::oom_score_adj(&at, n)?;
            extra.insert("oom_score_adj".to_string(), n.into());
        }
        Ok(RawConfig {
            command: self.src.opt_string(&items, "command")?,
            args: items
                .attr("args")
                .map(|attr| self.src.strings(&what, attr))
                .transpose()?,
            extra,
        })
    }

    /// A signed whole number (HCL2 converts a string to the number an attribute wants).
    fn whole_number(
        &self,
        what: &str,
        attr: &hcl::edit::structure::Attribute,
    ) -> Result<i64, JobspecError> {
        let n = match &attr.value {
            hcl::edit::expr::Expression::Number(n) => n.value().as_i64(),
            hcl::edit::expr::Expression::String(s) => s.value().parse::<i64>().ok(),
            _ => None,
        };
        Ok(n.ok_or_else(|| self.src.wrong_type(what, attr, "a whole number"))?)
    }

    fn logs(&self, task: &str, block: &Block) -> Result<RawLogConfig, JobspecError> {
        let what = format!("logs block of {task}");
        let items = self.items(&what, block, At::Logs)?;
        Ok(RawLogConfig {
            max_files: self.src.opt_u32(&items, "max_files")?,
            max_file_size_mb: self.src.opt_u32(&items, "max_file_size")?,
            disabled: self.src.opt_bool(&items, "disabled")?,
            enabled: self.src.opt_bool(&items, "enabled")?,
            ..RawLogConfig::default()
        })
    }

    fn volume_mount(&self, task: &str, block: &Block) -> Result<RawVolumeMount, JobspecError> {
        self.src.no_labels(task, block)?;
        let what = format!("volume_mount block of {task}");
        let items = self.items(&what, block, At::VolumeMount)?;
        let (propagation_mode, selinux_label) =
            super::settings::read_mount_hcl(self.src, &what, &items)?;
        Ok(RawVolumeMount {
            propagation_mode,
            selinux_label,
            volume: self.src.opt_string(&items, "volume")?,
            destination: self.src.opt_string(&items, "destination")?,
            read_only: self.src.opt_bool(&items, "read_only")?,
            ..RawVolumeMount::default()
        })
    }

    fn csi_plugin(&self, task: &str, block: &Block) -> Result<RawCsiPlugin, JobspecError> {
        let what = format!("csi_plugin block of {task}");
        let items = self.items(&what, block, At::CsiPlugin)?;
        let id = self.src.opt_string(&items, "id")?;
        csi_plugin_id(id.as_deref().unwrap_or_default())?;
        let plugin_type = self.src.opt_string(&items, "type")?;
        csi_plugin_type(plugin_type.as_deref().unwrap_or_default())?;
        Ok(RawCsiPlugin {
            id,
            plugin_type,
            mount_dir: self.src.opt_string(&items, "mount_dir")?,
            stage_publish_base_dir: self.src.opt_string(&items, "stage_publish_base_dir")?,
            health_timeout: self.duration(&items, "health_timeout")?,
            ..RawCsiPlugin::default()
        })
    }

    fn lifecycle(&self, task: &str, block: &Block) -> Result<RawLifecycle, JobspecError> {
        self.src.no_labels(task, block)?;
        let what = format!("lifecycle block of {task}");
        let items = self.items(&what, block, At::Lifecycle)?;
        Ok(RawLifecycle {
            hook: self.src.opt_string(&items, "hook")?,
            sidecar: self.src.opt_bool(&items, "sidecar")?,
            ..RawLifecycle::default()
        })
    }

    fn resources(&self, task: &str, block: &Block) -> Result<RawResources, JobspecError> {
        let what = format!("resources block of {task}");
        let items = self.items(&what, block, At::Resources)?;
        let (devices, numa) = super::devices::read_hcl(self.src, &what, &items)?;
        Ok(RawResources {
            cpu: self.src.opt_u32(&items, "cpu")?,
            memory_mb: self.src.opt_u32(&items, "memory")?,
            memory_max_mb: self.src.opt_u32(&items, "memory_max")?,
            cores: self.src.opt_u32(&items, "cores")?,
            secrets_mb: self.src.opt_u32(&items, "secrets")?,
            devices,
            numa,
            ..RawResources::default()
        })
    }

    /// The `constraint` blocks of a job, group or task ([`super::constraint`]).
    fn constraints(
        &self,
        what: &str,
        level: Level,
        items: &Items,
    ) -> Result<Vec<RawConstraint>, JobspecError> {
        super::constraint::from_hcl(self.src, what, level, items.blocks("constraint"))
    }

    /// The body of `block`, refusing a name the schema table does not read at `at`.
    fn items<'b>(&self, what: &str, block: &'b Block, at: At) -> Result<Items<'b>, JobspecError> {
        Ok(table::items(self.src, what, block, at)?)
    }

    fn duration(&self, items: &Items, key: &str) -> Result<Option<RawDuration>, JobspecError> {
        Ok(self.src.opt_duration(items, key)?.map(RawDuration::Parsed))
    }
}

impl super::kept::KeptHcl {
    /// Puts each level's kept settings on the raw job the walker made.
    fn attach(mut self, job: &mut RawJob) {
        job.kept = std::mem::take(&mut self.job);
        for group in job.task_groups.iter_mut().flatten() {
            let name = group.name.clone().unwrap_or_default();
            group.kept = self.groups.remove(&name).unwrap_or_default();
            for task in group.tasks.iter_mut().flatten() {
                let key = (name.clone(), task.name.clone().unwrap_or_default());
                task.kept = self.tasks.remove(&key).unwrap_or_default();
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::jobspec::{
        CsiPluginConfig, CsiPluginType, DriverConfig, JobType, LogConfig, Resources, RestartMode,
        RestartPolicy, Task, TaskGroup, VolumeMount, VolumeRequest,
    };
    use std::time::Duration;

    /// The jobspec of tasks.md, as written there.
    pub(crate) const EXAMPLE: &str = r#"
job "example" {
  type = "service"                 # service (default) | batch | system
  group "group" {
    count = 1
    restart { attempts = 2  interval = "30m"  delay = "15s"  mode = "fail" }   # group level, task may override
    volume "data" { type = "host"  source = "test"  read_only = false }
    task "task" {
      driver = "raw_exec"
      config { command = "busybox"  args = ["httpd", "-f", "-p", "8001", "-h", "${NOMAD_TASK_DIR}"] }
      env { GREETING = "hello" }
      kill_signal  = "SIGINT"      # default SIGINT
      kill_timeout = "5s"          # default 5s
      logs { max_files = 10  max_file_size = 10 }     # MiB
      volume_mount { volume = "data"  destination = "data"  read_only = false }
      csi_plugin { id = "whatever"  type = "monolith"  health_timeout = "5s" }   # see csi.md
      resources { cpu = 100  memory = 100 }           # accepted and recorded
    }
  }
}
"#;

    pub(crate) fn example_job() -> Job {
        let policy = RestartPolicy {
            render_templates: false,
            attempts: 2,
            interval: Duration::from_secs(1800),
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
        };
        Job {
            fields: Default::default(),
            meta: Default::default(),
            id: "example".to_string(),
            name: "example".to_string(),
            job_type: JobType::Service,
            datacenters: vec!["*".to_string()],
            node_pool: "default".to_string(),
            constraints: Vec::new(),
            periodic: None,
            parameterized_job: None,
            parent_id: String::new(),
            payload: String::new(),
            kept: Default::default(),
            task_groups: vec![TaskGroup {
                shutdown_delay: Duration::ZERO,
                meta: Default::default(),
                ephemeral_disk: Default::default(),
                kept: Default::default(),
                name: "group".to_string(),
                count: 1,
                restart_policy: policy,
                volumes: BTreeMap::from([(
                    "data".to_string(),
                    VolumeRequest {
                        name: "data".to_string(),
                        volume_type: "host".to_string(),
                        source: "test".to_string(),
                        read_only: false,
                        access_mode: None,
                        attachment_mode: None,
                        per_alloc: false,
                        mount_options: None,
                        sticky: false,
                    },
                )]),
                networks: Vec::new(),
                constraints: Vec::new(),
                tasks: vec![Task {
                    shutdown_delay: Duration::ZERO,
                    meta: Default::default(),
                    name: "task".to_string(),
                    driver: "raw_exec".to_string(),
                    config: DriverConfig {
                        command: "busybox".to_string(),
                        args: ["httpd", "-f", "-p", "8001", "-h", "${NOMAD_TASK_DIR}"]
                            .map(String::from)
                            .to_vec(),
                        oom_score_adj: None,
                        pid_mode: None,
                        ipc_mode: None,
                        docker: Default::default(),
                        opaque: Default::default(),
                    },
                    env: BTreeMap::from([("GREETING".to_string(), "hello".to_string())]),
                    user: None,
                    kill_signal: "SIGINT".parse().unwrap(),
                    kill_timeout: Duration::from_secs(5),
                    restart_policy: policy,
                    log_config: LogConfig {
                        max_files: 10,
                        max_file_size_mb: 10,
                        disabled: false,
                    },
                    volume_mounts: vec![VolumeMount {
                        volume: "data".to_string(),
                        destination: "data".to_string(),
                        read_only: false,
                        propagation_mode: String::new(),
                        selinux_label: String::new(),
                    }],
                    csi_plugin: Some(CsiPluginConfig {
                        id: "whatever".to_string(),
                        plugin_type: CsiPluginType::Monolith,
                        mount_dir: "/csi".to_string(),
                        stage_publish_base_dir: "/local/csi".to_string(),
                        health_timeout: Duration::from_secs(5),
                    }),
                    resources: Resources {
                        cpu: 100,
                        memory_mb: 100,
                        memory_max_mb: 0,
                        cores: 0,
                        ..Resources::default()
                    },
                    lifecycle: None,
                    leader: false,
                    constraints: Vec::new(),
                    dispatch_payload: None,
                    kept: Default::default(),
                }],
            }],
        }
    }

    fn parse(src: &str) -> Result<Job, JobspecError> {
        parse_job(src).map(|p| {
            assert!(p.warnings.is_empty());
            p.job
        })
    }

    /// A job with one task; `group` and `task` are spliced into the group and task bodies.
    fn job_with(group: &str, task: &str) -> String {
        let config = if task.contains("config") {
            ""
        } else {
            "command = \"true\""
        };
        format!(
            "job \"j\" {{\n  group \"g\" {{\n{group}\n    task \"web\" {{\n      driver = \"raw_exec\"\n      {}\n{task}\n    }}\n  }}\n}}\n",
            if config.is_empty() { String::new() } else { format!("config {{ {config} }}") }
        )
    }

    fn err(src: &str) -> JobspecError {
        parse(src).expect_err("the jobspec should be refused")
    }

    #[test]
    fn parses_the_example_of_tasks_md() {
        assert_eq!(parse(EXAMPLE).unwrap(), example_job());
    }

    #[test]
    fn applies_defaults() {
        let job = parse(&job_with("", "")).unwrap();
        assert_eq!(job.id, "j");
        assert_eq!(job.job_type, JobType::Service);
        let group = &job.task_groups[0];
        assert_eq!(group.count, 1);
        assert_eq!(
            group.restart_policy,
            JobType::Service.default_restart_policy()
        );
        assert!(group.volumes.is_empty());
        let task = &group.tasks[0];
        assert_eq!(task.config.args, Vec::<String>::new());
        assert_eq!(task.kill_signal, "SIGINT");
        assert_eq!(task.kill_timeout, Duration::from_secs(5));
        assert_eq!(task.restart_policy, group.restart_policy);
        assert_eq!(task.log_config, LogConfig::default());
        assert_eq!(task.resources, Resources::default());
        assert_eq!(task.user, None);
        assert_eq!(task.csi_plugin, None);

        let job = parse(&job_with(
            "",
            "csi_plugin {\n id = \"p\"\n type = \"node\"\n }",
        ))
        .unwrap();
        let csi = job.task_groups[0].tasks[0].csi_plugin.clone().unwrap();
        assert_eq!(csi.mount_dir, "/csi");
        assert_eq!(csi.stage_publish_base_dir, "/local/csi");
        assert_eq!(csi.health_timeout, Duration::from_secs(30));
        assert_eq!(csi.plugin_type, CsiPluginType::Node);
    }

    #[test]
    fn restart_blocks_override_only_what_they_set() {
        let src = r#"
job "b" {
  type = "batch"
  group "g" {
    restart { attempts = 5 }
    task "inherits" {
      driver = "raw_exec"
      config { command = "true" }
    }
    task "overrides" {
      driver = "raw_exec"
      config { command = "true" }
      restart {
        delay = "1s"
        mode = "delay"
      }
    }
  }
}
"#;
        let job = parse(src).unwrap();
        let group = &job.task_groups[0];
        let group_policy = RestartPolicy {
            render_templates: false,
            attempts: 5,
            interval: Duration::from_secs(24 * 3600),
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
        };
        assert_eq!(group.restart_policy, group_policy);
        assert_eq!(group.tasks[0].restart_policy, group_policy);
        assert_eq!(
            group.tasks[1].restart_policy,
            RestartPolicy {
                delay: Duration::from_secs(1),
                mode: RestartMode::Delay,
                ..group_policy
            }
        );
    }

    #[test]
    fn keeps_templates_as_written() {
        let job = parse(&job_with(
            "",
            r#"
      env {
        DIR = "${NOMAD_TASK_DIR}/x"
        NODE = "${ node.unique.id }"
        ESCAPED = "$${HOME}"
        QUOTED = "say \"hi\"\t${env.USER}"
        PORT = 8080
        ON = true
        HEREDOC = <<EOT
line ${NOMAD_ALLOC_DIR}
EOT
      }
"#,
        ))
        .unwrap();
        let env = &job.task_groups[0].tasks[0].env;
        assert_eq!(env["DIR"], "${NOMAD_TASK_DIR}/x");
        assert_eq!(env["NODE"], "${ node.unique.id }");
        assert_eq!(env["ESCAPED"], "${HOME}");
        assert_eq!(env["QUOTED"], "say \"hi\"\t${env.USER}");
        assert_eq!(env["PORT"], "8080");
        assert_eq!(env["ON"], "true");
        assert_eq!(env["HEREDOC"], "line ${NOMAD_ALLOC_DIR}\n");
    }

    #[test]
    fn unknown_blocks_and_attributes_name_the_line() {
        let cases = [
            (
                job_with("", "      foo = 1"),
                "unknown attribute \"foo\" in task \"web\" at line 7",
            ),
            (
                job_with("", "\n      metadata { a = \"b\" }"),
                "unknown block \"metadata\" in task \"web\" at line 8",
            ),
            (
                job_with("", "      config {\n command = \"x\"\n image = \"x\"\n }"),
                "unknown attribute \"image\" in config block of task \"web\" at line 9",
            ),
            (
                "job \"j\" {\n  datacentres = [\"dc1\"]\n}".to_string(),
                "unknown attribute \"datacentres\" in job \"j\" at line 2",
            ),
            (
                "jobs \"x\" {}\n".to_string(),
                "unknown block \"jobs\" in the jobspec at line 1",
            ),
            (
                job_with("", "      env {\n        inner { }\n      }"),
                "unknown block \"inner\" in env block of task \"web\" at line 8",
            ),
            (
                job_with("", "      resources {\n        memroy = 5\n      }"),
                "unknown attribute \"memroy\" in resources block of task \"web\" at line 8",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(err(&src), JobspecError::Unknown(want.to_string()), "{src}");
        }
    }

    #[test]
    fn syntax_errors_give_the_position() {
        let e = err("job \"j\" {\n  group \"g\" {\n    count = \n}\n");
        let JobspecError::Syntax(msg) = e else {
            panic!("expected a syntax error, got {e:?}")
        };
        assert!(msg.starts_with("HCL syntax error at line "), "{msg}");
        assert!(msg.contains(", column "), "{msg}");
        let JobspecError::Syntax(msg) = err("job \"j\" {") else {
            panic!("expected a syntax error")
        };
        assert!(
            msg.starts_with("HCL syntax error at line 1, column "),
            "{msg}"
        );
    }

    #[test]
    fn bad_durations_name_the_field() {
        assert_eq!(
            err(&job_with("", "      kill_timeout = \"-5s\"")),
            JobspecError::Invalid(
                "invalid duration for \"kill_timeout\" in task \"web\" at line 7: negative duration \"-5s\" is not allowed"
                    .to_string()
            )
        );
        assert_eq!(
            err(&job_with("    restart {\n      interval = \"soon\"\n    }", "")),
            JobspecError::Invalid(
                "invalid duration for \"interval\" in restart block of group \"g\" at line 4: invalid duration \"soon\""
                    .to_string()
            )
        );
        assert_eq!(
            err(&job_with("", "      csi_plugin {\n id = \"p\"\n type = \"node\"\n health_timeout = \"5\"\n }")),
            JobspecError::Invalid(
                "invalid duration for \"health_timeout\" in csi_plugin block of task \"web\" at line 10: missing unit in duration \"5\""
                    .to_string()
            )
        );
        assert_eq!(
            err(&job_with("", "      kill_timeout = 5")),
            JobspecError::Invalid(
                "attribute \"kill_timeout\" in task \"web\" at line 7 must be a duration string such as \"15s\""
                    .to_string()
            )
        );
    }

    #[test]
    fn wrong_types_and_shapes() {
        let invalid = |s: &str| JobspecError::Invalid(s.to_string());
        assert_eq!(
            err(&job_with("    count = \"two\"", "")),
            invalid("attribute \"count\" in group \"g\" at line 3 must be a whole number from 0 to 4294967295")
        );
        assert_eq!(
            err(&job_with("    count = -1", "")),
            invalid("attribute \"count\" in group \"g\" at line 3 must be a whole number from 0 to 4294967295")
        );
        assert_eq!(
            err(&job_with("    count = 1.5", "")),
            invalid("attribute \"count\" in group \"g\" at line 3 must be a whole number from 0 to 4294967295")
        );
        assert_eq!(
            err(&job_with("", "      user = root")),
            invalid("attribute \"user\" in task \"web\" at line 7 must be a string")
        );
        assert_eq!(
            err(&job_with("", "      config { args = \"-x\" }")),
            invalid("attribute \"args\" in config block of task \"web\" at line 7 must be a list of strings")
        );
        assert_eq!(
            err(&job_with("    volume \"v\" { read_only = \"yes\" }", "")),
            invalid("attribute \"read_only\" in volume \"v\" of group \"g\" at line 3 must be true or false")
        );
        assert_eq!(
            err(&job_with("    count = 1\n    count = 2", "")),
            JobspecError::Syntax("HCL syntax error at line 4, column 5: invalid attribute; expected unique attribute key; found redefined attribute".to_string())
        );
        assert_eq!(
            err(&job_with("", "      logs {}\n      logs {}")),
            invalid("block \"logs\" is given more than once in task \"web\" (again at line 8)")
        );
        assert_eq!(
            err(&job_with("    task {\n    }", "")),
            invalid(
                "block \"task\" in group \"g\" at line 3 must have exactly one label (its name)"
            )
        );
        assert_eq!(
            err(&job_with("", "      config \"x\" { command = \"true\" }")),
            invalid("block \"config\" in task \"web\" at line 7 must not have labels")
        );
        assert_eq!(
            err(&job_with(
                "    volume \"v\" {\n type = \"host\"\n source = \"s\"\n }\n    volume \"v\" {\n }",
                ""
            )),
            invalid("volume \"v\" is defined more than once in group \"g\" (again at line 7)")
        );
        assert_eq!(err(""), invalid("the jobspec has no job block"));
        assert_eq!(
            err("job \"a\" {}\njob \"b\" {}\n"),
            invalid("the jobspec has more than one job block (second at line 2)")
        );
        assert_eq!(
            err("job \"a\" {\n  type = \"cron\"\n}"),
            invalid(
                "job type must be \"service\", \"batch\", \"system\" or \"sysbatch\", got: \"cron\" (line 2)"
            )
        );
    }

    #[test]
    fn checks_raw_strings_where_it_sees_them() {
        let invalid = |s: &str| JobspecError::Invalid(s.to_string());
        assert_eq!(
            err(&job_with("    restart { mode = \"sometimes\" }", "")),
            invalid("Unsupported restart mode: \"sometimes\"")
        );
        assert_eq!(
            err(&job_with("", "      restart { mode = \"never\" }")),
            invalid("Unsupported restart mode: \"never\"")
        );
        assert_eq!(
            err(&job_with("", "      csi_plugin { type = \"node\" }")),
            invalid("csi_plugin must have a non-empty id")
        );
        assert_eq!(
            err(&job_with("", "      csi_plugin { id = \"p\" }")),
            invalid(
                "csi_plugin type must be one of 'node', 'controller', or 'monolith', got: \"\""
            )
        );
        assert_eq!(
            err(&job_with("", "      csi_plugin {\n id = \"p\"\n type = \"storage\"\n }")),
            invalid("csi_plugin type must be one of 'node', 'controller', or 'monolith', got: \"storage\"")
        );
        assert_eq!(
            err(&job_with("", "      csi_plugin {\n id = \"p\"\n type = \"node\"\n stage_publish_base_dir = \"/csi/x\"\n }")),
            invalid("csi_plugin stage_publish_base_dir must not be a subdirectory of mount_dir, got: stage_publish_base_dir=\"/csi/x\" mount_dir=\"/csi\"")
        );
        assert_eq!(
            err(&job_with("", "      kill_signal = \"SIGNOPE\"")),
            invalid("task \"web\": unknown kill_signal \"SIGNOPE\"")
        );
        let job = parse(&job_with("", "      kill_signal = \"TERM\"")).unwrap();
        assert_eq!(job.task_groups[0].tasks[0].kill_signal, "SIGTERM");
    }

    #[test]
    fn validates_the_result() {
        let invalid = |s: &str| JobspecError::Invalid(s.to_string());
        assert_eq!(
            err("job \"../x\" {\n}"),
            invalid("invalid job name \"../x\": may only contain the characters A-Z a-z 0-9 _ . -")
        );
        assert_eq!(
            err("job \"ok\" {\n  group \".\" {\n  }\n}"),
            invalid("invalid group name \".\": must not be \".\" or \"..\"")
        );
        assert_eq!(
            err("job \"ok\" {\n  group \"g\" {\n    task \"\" {\n    }\n  }\n}"),
            invalid("invalid task name \"\": must not be empty")
        );
        assert_eq!(
            err(&job_with("    restart { interval = \"1s\" }", "")),
            invalid("group \"g\" restart policy: interval can not be less than 5s (got 1s)")
        );
        assert_eq!(
            err(&job_with("", "      volume_mount {\n volume = \"nope\"\n destination = \"x\"\n }")),
            invalid("task \"web\": volume_mount names volume \"nope\", which group \"g\" does not define")
        );
        assert_eq!(
            err(&job_with("", "      config { command = \"\" }")),
            invalid("task \"web\": config must set a non-empty command")
        );
    }

    #[test]
    fn one_line_blocks_keep_their_line_numbers() {
        let src = "job \"j\" {\n  group \"g\" {\n    restart { attempts = 1  mode = \"fail\" }\n    task \"web\" {\n      driver = \"raw_exec\"\n      config { command = \"true\"  args = [\"${NOMAD_TASK_DIR}\"] }\n      logs { max_files = 1  bogus = 2 }\n    }\n  }\n}\n";
        assert_eq!(
            err(src),
            JobspecError::Unknown(
                "unknown attribute \"bogus\" in logs block of task \"web\" at line 7".to_string()
            )
        );
        let fixed = src.replace("  bogus = 2", "");
        let job = parse(&fixed).unwrap();
        assert_eq!(job.task_groups[0].restart_policy.attempts, 1);
        assert_eq!(
            job.task_groups[0].tasks[0].config.args,
            ["${NOMAD_TASK_DIR}"]
        );
    }

    #[test]
    fn parses_a_typical_nomad_jobspec() {
        let src = r#"
# A batch job, in the layout Nomad's documentation uses.
job "docs" {
  type = "batch"

  group "example" {
    count = 3

    restart {
      attempts = 3
      delay    = "30s"
      interval = "5m"
      mode     = "fail"
    }

    volume "certs" {
      type      = "host"
      source    = "ca-certificates"
      read_only = true
    }

    task "server" {
      driver = "raw_exec"
      user   = "nobody"

      config {
        command = "/bin/http-echo"
        args = [
          "-listen", ":5678",
          "-text", "hello world", // trailing comment
        ]
      }

      /* block comment */
      env {
        NODE = "${node.unique.name}"
      }

      volume_mount {
        volume      = "certs"
        destination = "local/certs"
        read_only   = true
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
"#;
        let job = parse(src).unwrap();
        assert_eq!(job.job_type, JobType::Batch);
        let group = &job.task_groups[0];
        assert_eq!(group.count, 3);
        assert_eq!(group.restart_policy.interval, Duration::from_secs(300));
        assert!(group.volumes["certs"].read_only);
        let task = &group.tasks[0];
        assert_eq!(task.user.as_deref(), Some("nobody"));
        assert_eq!(
            task.config.args,
            ["-listen", ":5678", "-text", "hello world"]
        );
        assert_eq!(task.env["NODE"], "${node.unique.name}");
        assert_eq!(task.kill_signal, "SIGTERM");
        assert_eq!(task.kill_timeout, Duration::from_secs(20));
        assert_eq!(task.resources.memory_mb, 256);
    }

    #[test]
    fn memory_max_is_a_hard_limit_above_memory() {
        let res = |body: &str| {
            parse(&job_with(
                "",
                &format!("      resources {{\n        {body}\n      }}"),
            ))
            .map(|j| j.task_groups[0].tasks[0].resources.clone())
        };
        let r = res("memory = 32\n        memory_max = 64").unwrap();
        assert_eq!((r.memory_mb, r.memory_max_mb), (32, 64));
        assert_eq!(res("memory = 32").unwrap().memory_max_mb, 0, "not set");
        assert_eq!(
            res("memory = 64\n        memory_max = 32").unwrap_err(),
            JobspecError::Invalid(
                "task \"web\": memory_max (32) should be larger than memory (64)".into()
            )
        );
    }

    #[test]
    fn cores_ask_for_no_cpu_and_not_both() {
        let res = |body: &str| {
            parse(&job_with(
                "",
                &format!("      resources {{\n        {body}\n      }}"),
            ))
            .map(|j| j.task_groups[0].tasks[0].resources.clone())
        };
        let r = res("cores = 2\n        memory = 64").unwrap();
        assert_eq!((r.cores, r.cpu, r.memory_mb), (2, 0, 64));
        let r = res("memory = 64").unwrap();
        assert_eq!(
            (r.cores, r.cpu),
            (0, 100),
            "Nomad's default cpu without cores"
        );
        assert_eq!(res("cores = 1\n        cpu = 0").unwrap().cpu, 0);
        assert_eq!(
            res("cores = 1\n        cpu = 500").unwrap_err(),
            JobspecError::Invalid(
                "task \"web\": Task can only ask for 'cpu' or 'cores' resource, not both.".into()
            )
        );
    }

    #[test]
    fn nested_one_line_blocks_parse() {
        let src = "job \"x\" { group \"g\" { task \"t\" { driver = \"raw_exec\"\n config { command = \"true\" } } } }";
        let job = parse(src).unwrap();
        assert_eq!(job.task_groups[0].tasks[0].config.command, "true");
        assert_eq!(
            err(&src.replace("job \"x\"", "job \"../x\"")),
            JobspecError::Invalid(
                "invalid job name \"../x\": may only contain the characters A-Z a-z 0-9 _ . -"
                    .to_string()
            )
        );
        assert_eq!(
            err(&src.replace("\n config", "\n kill_timeout = \"-5s\"\n config")),
            JobspecError::Invalid(
                "invalid duration for \"kill_timeout\" in task \"t\" at line 2: negative duration \"-5s\" is not allowed"
                    .to_string()
            )
        );
    }

    /// HCL values nested `n` levels deep, one of each kind of nesting the parser recurses on.
    pub(crate) fn nested_values(n: usize) -> Vec<(&'static str, String)> {
        let wrap = |open: &str, inner: &str, close: &str| {
            format!("{}{inner}{}", open.repeat(n), close.repeat(n))
        };
        vec![
            ("array", wrap("[", "", "]")),
            ("object", wrap("{ a = ", "1", " }")),
            ("parentheses", wrap("(", "1", ")")),
            ("call", wrap("f(", "", ")")),
            ("template", wrap("\"${", "1", "}\"")),
            ("unary", wrap("!", "true", "")),
            ("conditional", wrap("true ? ", "1", " : 2")),
            ("binary", wrap("", "1", " + 1")),
            ("for", wrap("[for x in ", "[]", " : x]")),
        ]
    }

    /// Runs `f` on a thread with the stack of nodeward's threads, as the API's workers have.
    pub(crate) fn on_agent_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(crate::thread::STACK_SIZE)
                .spawn_scoped(s, f)
                .unwrap()
                .join()
                .unwrap()
        })
    }

    /// Found while writing the fuzz targets (fuzz/): `POST /v1/jobs/parse` with 30 nested `[`
    /// overflowed the stack of an API worker and aborted the agent. Deep input is refused with an
    /// error, on any thread.
    #[test]
    fn deeply_nested_input_is_refused_not_a_stack_overflow() {
        on_agent_stack(|| {
            for n in [30, 63, 64, 200, 5000] {
                for (kind, value) in nested_values(n) {
                    let src = format!(
                        "job \"a\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"x\" }}\n      env {{ A = {value} }}\n    }}\n  }}\n}}\n"
                    );
                    let parsed = parse_job(&src);
                    assert!(n < 5000 || parsed.is_err(), "{kind} nested {n} levels");
                }
                let blocks = format!("job \"a\" {{\n{}{}}}\n", "b {\n".repeat(n), "}\n".repeat(n));
                assert!(parse_job(&blocks).is_err(), "blocks nested {n} levels");
            }
        });
    }

    /// The input with which `cargo fuzz run jobspec_hcl` found the stack overflow above (mutated
    /// from the seed corpus): an attribute value with 29 nested `(`.
    #[test]
    fn fuzz_crash_nested_parentheses() {
        let src = concat!(
            "job \"plugin\" {\n  type = \"    args    = [\"--en (defa((((((((((((((((((((((",
            "((((((volume \"data\" { type = \"host\"  sou/*e = \"test\"  read_only = false ",
            "}\n    task \"task\" {\n      driver = \"raw_exec\"\n      config { command = ",
            "\"busybox\"  args = [\"httpd\", \"-f\", \"-p\", \"8001\",  volume_mouatch | sy",
            "stem\n'  group \"group\" {\n    coundpoint=${CSI_ENDPO!INT}\",\0\0\0\0\0\0\0` ",
            "\"--nodt = 1\n    restarsystem\"\n  gjob \"proup \"",
        );
        assert!(on_agent_stack(|| parse_job(src)).is_err());
    }

    /// Seed 1's plugin job as docker.md gives it: a docker task's config is the docker driver's.
    #[test]
    fn numbers_and_bools_written_as_strings_are_converted_as_hcl2_does() {
        let job = parse(&job_with(
            "",
            "      resources {\n        cpu = \"500\"\n        memory = 64\n      }\n      leader = \"true\"",
        ))
        .unwrap();
        let task = &job.task_groups[0].tasks[0];
        assert_eq!((task.resources.cpu, task.leader), (500, true));
        assert_eq!(
            err(&job_with("", "      resources {\n        cpu = \"lots\"\n      }")),
            invalid("attribute \"cpu\" in resources block of task \"web\" at line 8 must be a whole number from 0 to 4294967295")
        );
    }

    #[test]
    fn resources_memory_max_is_read_and_disk_has_no_effect_and_is_warned() {
        let src = job_with(
            "",
            "      resources {\n        cpu = 100\n        memory = 64\n        memory_max = 512\n        disk = 300\n      }",
        );
        let parsed = parse_job(&src).unwrap();
        let r = &parsed.job.task_groups[0].tasks[0].resources;
        assert_eq!((r.cpu, r.memory_mb, r.memory_max_mb), (100, 64, 512));
        assert_eq!(
            parsed.warnings,
            vec![super::super::schema::warning(
                "disk",
                super::super::schema::RESOURCES_NO_EFFECT[0].1
            )]
        );
    }

    /// A driver nodeward does not have keeps its `config` as written, whatever it holds, and HCL
    /// and JSON give the same job; validation leaves the task to placement (`missing drivers`).
    #[test]
    fn a_driver_nodeward_lacks_keeps_its_config() {
        let hcl = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"podman\"\n      config {\n        image = \"docker.io/library/redis:7\"\n        args = [\"--port\", 6380]\n        logging {\n          driver = \"journald\"\n        }\n      }\n    }\n  }\n}\n";
        let from_hcl = parse(hcl).unwrap();
        let task = &from_hcl.task_groups[0].tasks[0];
        assert_eq!(task.driver, "podman");
        assert_eq!(task.config.args, ["--port", "6380"]);
        assert_eq!(
            serde_json::Value::Object(task.config.opaque.clone().into_iter().collect()),
            serde_json::json!({
                "image": "docker.io/library/redis:7",
                "logging": [{"driver": "journald"}],
            })
        );
        let json = serde_json::json!({"Job": serde_json::to_value(&from_hcl).unwrap()});
        let from_json = super::super::json::parse_job(json.to_string().as_bytes()).unwrap();
        assert!(from_json.warnings.is_empty(), "{:?}", from_json.warnings);
        assert_eq!(from_json.job, from_hcl);
    }

    #[test]
    fn a_docker_task_reads_the_docker_config() {
        let src = r#"
job "plugin" {
  group "csi" {
    task "plugin" {
      driver = "docker"
      config {
        image   = "busybox:1"
        command = "httpd"
        args    = ["-vv", "-f", "-p", "8001", "-h", "/local"]
        labels { team = "storage" }
        mount {
          type   = "tmpfs"
          target = "/scratch"
          tmpfs_options { size = 1048576 }
        }
      }
      csi_plugin { id = "whatever"  type = "monolith"  health_timeout = "5s" }
      resources { cpu = 100  memory = 64 }
    }
  }
}"#;
        let job = parse_job(src).unwrap().job;
        let task = &job.task_groups[0].tasks[0];
        assert_eq!(task.driver, "docker");
        assert_eq!(task.config.command, "httpd");
        assert_eq!(
            task.config.args,
            ["-vv", "-f", "-p", "8001", "-h", "/local"]
        );
        assert_eq!(task.config.docker.image, "busybox:1");
        assert_eq!(task.config.docker.labels["team"], "storage");
        assert_eq!(task.config.docker.mount[0].tmpfs_size, Some(1_048_576));
        // The job reads back from its own JSON (what `jobs parse` answers and the state keeps).
        let text = serde_json::to_string(&job).unwrap();
        assert!(text.contains(r#""image":"busybox:1""#), "{text}");
        let back = crate::jobspec::json::parse_job(text.as_bytes()).unwrap();
        assert_eq!(back.job, job);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);

        let bogus = src.replace("image   =", "imag =");
        assert_eq!(
            parse_job(&bogus).unwrap_err(),
            JobspecError::Unknown(
                "unknown attribute \"imag\" in config block of task \"plugin\" at line 7".into()
            )
        );
        let raw_exec = src.replace("\"docker\"", "\"raw_exec\"");
        assert!(parse_job(&raw_exec)
            .unwrap_err()
            .to_string()
            .starts_with("unknown attribute \"image\" in config block"));
    }

    #[test]
    fn shutdown_delay_at_group_and_task_level_from_hcl_and_json() {
        let job = parse(&job_with(
            "    shutdown_delay = \"2s\"",
            "      shutdown_delay = \"500ms\"",
        ))
        .unwrap();
        let group = &job.task_groups[0];
        assert_eq!(group.shutdown_delay, Duration::from_secs(2));
        assert_eq!(group.tasks[0].shutdown_delay, Duration::from_millis(500));
        let bytes = serde_json::to_vec(&job).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["TaskGroups"][0]["ShutdownDelay"], 2_000_000_000u64);
        assert_eq!(crate::jobspec::json::parse_job(&bytes).unwrap().job, job);
        let err = parse(&job_with("", "      shutdown_delay = \"soon\"")).unwrap_err();
        assert!(err.to_string().contains("shutdown_delay"), "{err}");
    }
}
