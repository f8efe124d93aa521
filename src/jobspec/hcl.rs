//! Jobspecs in Nomad's HCL syntax.
//!
//! The source is parsed with `hcl-edit` (re-exported by `hcl-rs` as [`hcl::edit`]), whose syntax
//! tree keeps byte spans, so every error can name its line. The tree is then walked block by
//! block: each block accepts a fixed set of attributes and nested blocks, and anything else is an
//! error naming the block, the attribute and the line. Values are read literally and never
//! evaluated: a `"${NOMAD_TASK_DIR}"` comes through as that text and is interpolated when the task
//! starts ([`super::interpolate`]). Defaults are applied here, then [`validate_job`] checks the
//! result.
//!
//! Supported, as in tasks.md, csi.md and host-volumes.md:
//!
//! ```text
//! job "<id>" { type  group "<name>" {..} }
//! group "<name>" { count  restart {..}  volume "<label>" { type source read_only }  task "<name>" {..} }
//! task "<name>" { driver user kill_signal kill_timeout  config { command args }  env {..}
//!                 logs { max_files max_file_size }  volume_mount { volume destination read_only }
//!                 csi_plugin { id type mount_dir stage_publish_base_dir health_timeout }
//!                 resources { cpu memory }  restart { attempts interval delay mode } }
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use hcl::edit::expr::Expression;
use hcl::edit::structure::{Attribute, Block, Body, Structure};
use hcl::edit::template::{Element, Template};
use hcl::edit::Span;

use super::validate::{csi_plugin_type, kill_signal, restart_mode, validate_job};
use super::{
    CsiPluginConfig, DriverConfig, Job, JobType, JobspecError, LogConfig, Parsed, Resources,
    RestartOverride, RestartPolicy, Task, TaskGroup, VolumeMount, VolumeRequest,
    DEFAULT_CSI_HEALTH_TIMEOUT, DEFAULT_CSI_MOUNT_DIR, DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR,
    DEFAULT_KILL_SIGNAL, DEFAULT_KILL_TIMEOUT,
};
use crate::util::duration;

/// Parses a jobspec written in HCL, applies defaults and validates it.
pub fn parse_job(src: &str) -> Result<Parsed, JobspecError> {
    let body = hcl::edit::parser::parse_body(src).map_err(|e| {
        let loc = e.location();
        JobspecError::Syntax(format!(
            "HCL syntax error at line {}, column {}: {}",
            loc.line(),
            loc.column(),
            e.message()
        ))
    })?;
    let source = Source { text: src };
    let top = source.items("the jobspec", &body, &[], &["job"])?;
    let jobs = top.blocks("job");
    let job_block = match jobs.as_slice() {
        [one] => *one,
        [] => return Err(invalid("the jobspec has no job block")),
        [_, second, ..] => {
            return Err(invalid(format!(
                "the jobspec has more than one job block (second at line {})",
                source.line(second.span())
            )))
        }
    };
    let job = source.job(job_block)?;
    validate_job(&job)?;
    Ok(Parsed {
        job,
        warnings: Vec::new(),
    })
}

fn invalid(msg: impl Into<String>) -> JobspecError {
    JobspecError::Invalid(msg.into())
}

/// The text being parsed, to turn spans into line numbers.
struct Source<'a> {
    text: &'a str,
}

/// The attributes and blocks of one block body, after checking that each is allowed there.
struct Items<'b> {
    /// What the body belongs to, for messages: `task "web"`, `config block of task "web"`.
    what: String,
    attrs: BTreeMap<&'b str, &'b Attribute>,
    blocks: Vec<&'b Block>,
}

impl<'b> Items<'b> {
    fn attr(&self, key: &str) -> Option<&'b Attribute> {
        self.attrs.get(key).copied()
    }

    fn blocks(&self, ident: &str) -> Vec<&'b Block> {
        self.blocks
            .iter()
            .copied()
            .filter(|b| b.ident.as_str() == ident)
            .collect()
    }
}

impl<'a> Source<'a> {
    /// 1-based line of the start of `span`; 0 when the parser gave no span (it always does for
    /// parsed input).
    fn line(&self, span: Option<Range<usize>>) -> usize {
        span.map_or(0, |r| {
            let end = r.start.min(self.text.len());
            self.text.as_bytes()[..end]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1
        })
    }

    /// Splits `body` into attributes and blocks, refusing anything not in `attrs`/`blocks` and
    /// attributes given twice.
    fn items<'b>(
        &self,
        what: &str,
        body: &'b Body,
        attrs: &[&str],
        blocks: &[&str],
    ) -> Result<Items<'b>, JobspecError> {
        let mut items = Items {
            what: what.to_string(),
            attrs: BTreeMap::new(),
            blocks: Vec::new(),
        };
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let key = attr.key.as_str();
                    if !attrs.contains(&key) {
                        return Err(JobspecError::Unknown(format!(
                            "unknown attribute {key:?} in {what} at line {}",
                            self.line(attr.span())
                        )));
                    }
                    if items.attrs.insert(key, attr).is_some() {
                        return Err(invalid(format!(
                            "attribute {key:?} is set more than once in {what} (again at line {})",
                            self.line(attr.span())
                        )));
                    }
                }
                Structure::Block(block) => {
                    let ident = block.ident.as_str();
                    if !blocks.contains(&ident) {
                        return Err(JobspecError::Unknown(format!(
                            "unknown block {ident:?} in {what} at line {}",
                            self.line(block.span())
                        )));
                    }
                    items.blocks.push(block);
                }
            }
        }
        Ok(items)
    }

    /// The single label of a `group "x"`-style block.
    fn label(&self, parent: &str, block: &Block) -> Result<String, JobspecError> {
        match block.labels.as_slice() {
            [label] => Ok(label.as_str().to_string()),
            _ => Err(invalid(format!(
                "block {:?} in {parent} at line {} must have exactly one label (its name)",
                block.ident.as_str(),
                self.line(block.span())
            ))),
        }
    }

    /// The body of an unlabeled block that may appear at most once (`config`, `logs`, ...).
    fn single<'b>(
        &self,
        parent: &Items<'b>,
        ident: &str,
    ) -> Result<Option<&'b Block>, JobspecError> {
        let blocks = parent.blocks(ident);
        if let Some(second) = blocks.get(1) {
            return Err(invalid(format!(
                "block {ident:?} is given more than once in {} (again at line {})",
                parent.what,
                self.line(second.span())
            )));
        }
        match blocks.first() {
            Some(block) => {
                self.no_labels(&parent.what, block)?;
                Ok(Some(*block))
            }
            None => Ok(None),
        }
    }

    fn no_labels(&self, parent: &str, block: &Block) -> Result<(), JobspecError> {
        if block.labels.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!(
                "block {:?} in {parent} at line {} must not have labels",
                block.ident.as_str(),
                self.line(block.span())
            )))
        }
    }

    fn job(&self, block: &Block) -> Result<Job, JobspecError> {
        let id = self.label("the jobspec", block)?;
        let what = format!("job {id:?}");
        let items = self.items(&what, &block.body, &["type"], &["group"])?;
        let job_type = match items.attr("type") {
            None => JobType::default(),
            Some(attr) => match self.string(&what, attr)?.as_str() {
                "service" => JobType::Service,
                "batch" => JobType::Batch,
                "system" => JobType::System,
                other => {
                    return Err(invalid(format!(
                        "job type must be \"service\", \"batch\" or \"system\", got: {other:?} (line {})",
                        self.line(attr.span())
                    )))
                }
            },
        };
        let task_groups = items
            .blocks("group")
            .into_iter()
            .map(|g| self.group(&what, job_type, g))
            .collect::<Result<_, _>>()?;
        Ok(Job {
            name: id.clone(),
            id,
            job_type,
            task_groups,
        })
    }

    fn group(&self, job: &str, job_type: JobType, block: &Block) -> Result<TaskGroup, JobspecError> {
        let name = self.label(job, block)?;
        let what = format!("group {name:?}");
        let items = self.items(
            &what,
            &block.body,
            &["count"],
            &["restart", "volume", "task"],
        )?;
        let count = match items.attr("count") {
            Some(attr) => self.u32(&what, attr)?,
            None => 1,
        };
        let restart_policy = match self.single(&items, "restart")? {
            Some(b) => self.restart(&what, b)?.apply(job_type.default_restart_policy()),
            None => job_type.default_restart_policy(),
        };
        let mut volumes = BTreeMap::new();
        for vb in items.blocks("volume") {
            let label = self.label(&what, vb)?;
            let volume = self.volume(&what, &label, vb)?;
            if volumes.insert(label.clone(), volume).is_some() {
                return Err(invalid(format!(
                    "volume {label:?} is defined more than once in {what} (again at line {})",
                    self.line(vb.span())
                )));
            }
        }
        let tasks = items
            .blocks("task")
            .into_iter()
            .map(|t| self.task(&what, restart_policy, t))
            .collect::<Result<_, _>>()?;
        Ok(TaskGroup {
            name,
            count,
            restart_policy,
            volumes,
            tasks,
        })
    }

    fn restart(&self, parent: &str, block: &Block) -> Result<RestartOverride, JobspecError> {
        let what = format!("restart block of {parent}");
        let items = self.items(
            &what,
            &block.body,
            &["attempts", "interval", "delay", "mode"],
            &[],
        )?;
        let mode = match items.attr("mode") {
            Some(attr) => Some(restart_mode(&self.string(&what, attr)?)?),
            None => None,
        };
        Ok(RestartOverride {
            attempts: items
                .attr("attempts")
                .map(|a| self.u32(&what, a))
                .transpose()?,
            interval: items
                .attr("interval")
                .map(|a| self.duration(&what, a))
                .transpose()?,
            delay: items
                .attr("delay")
                .map(|a| self.duration(&what, a))
                .transpose()?,
            mode,
        })
    }

    fn volume(&self, group: &str, label: &str, block: &Block) -> Result<VolumeRequest, JobspecError> {
        let what = format!("volume {label:?} of {group}");
        let items = self.items(&what, &block.body, &["type", "source", "read_only"], &[])?;
        Ok(VolumeRequest {
            name: label.to_string(),
            volume_type: self.opt_string(&what, &items, "type")?.unwrap_or_default(),
            source: self.opt_string(&what, &items, "source")?.unwrap_or_default(),
            read_only: self.opt_bool(&what, &items, "read_only")?.unwrap_or(false),
        })
    }

    fn task(&self, group: &str, group_policy: RestartPolicy, block: &Block) -> Result<Task, JobspecError> {
        let name = self.label(group, block)?;
        let what = format!("task {name:?}");
        let items = self.items(
            &what,
            &block.body,
            &["driver", "user", "kill_signal", "kill_timeout"],
            &[
                "config",
                "env",
                "logs",
                "volume_mount",
                "csi_plugin",
                "resources",
                "restart",
            ],
        )?;
        let kill_signal = match items.attr("kill_signal") {
            Some(attr) => kill_signal(&name, &self.string(&what, attr)?)?,
            None => DEFAULT_KILL_SIGNAL.to_string(),
        };
        let kill_timeout = match items.attr("kill_timeout") {
            Some(attr) => self.duration(&what, attr)?,
            None => DEFAULT_KILL_TIMEOUT,
        };
        let restart_policy = match self.single(&items, "restart")? {
            Some(b) => self.restart(&what, b)?.apply(group_policy),
            None => group_policy,
        };
        let config = match self.single(&items, "config")? {
            Some(b) => self.config(&what, b)?,
            None => DriverConfig {
                command: String::new(),
                args: Vec::new(),
            },
        };
        let env = match self.single(&items, "env")? {
            Some(b) => self.env(&what, b)?,
            None => BTreeMap::new(),
        };
        let log_config = match self.single(&items, "logs")? {
            Some(b) => self.logs(&what, b)?,
            None => LogConfig::default(),
        };
        let volume_mounts = items
            .blocks("volume_mount")
            .into_iter()
            .map(|b| self.volume_mount(&what, b))
            .collect::<Result<_, _>>()?;
        let csi_plugin = self
            .single(&items, "csi_plugin")?
            .map(|b| self.csi_plugin(&what, b))
            .transpose()?;
        let resources = match self.single(&items, "resources")? {
            Some(b) => self.resources(&what, b)?,
            None => Resources::default(),
        };
        Ok(Task {
            driver: self.opt_string(&what, &items, "driver")?.unwrap_or_default(),
            user: self.opt_string(&what, &items, "user")?,
            name,
            config,
            env,
            kill_signal,
            kill_timeout,
            restart_policy,
            log_config,
            volume_mounts,
            csi_plugin,
            resources,
        })
    }

    fn config(&self, task: &str, block: &Block) -> Result<DriverConfig, JobspecError> {
        let what = format!("config block of {task}");
        let items = self.items(&what, &block.body, &["command", "args"], &[])?;
        Ok(DriverConfig {
            command: self.opt_string(&what, &items, "command")?.unwrap_or_default(),
            args: match items.attr("args") {
                Some(attr) => self.strings(&what, attr)?,
                None => Vec::new(),
            },
        })
    }

    /// Every attribute of `env { }` is a variable; numbers and booleans are taken as their text
    /// (`PORT = 8080`), as Nomad does.
    fn env(&self, task: &str, block: &Block) -> Result<BTreeMap<String, String>, JobspecError> {
        let what = format!("env block of {task}");
        let mut env = BTreeMap::new();
        for structure in block.body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let value = self.scalar_text(&attr.value).ok_or_else(|| {
                        self.wrong_type(&what, attr, "a string, number or bool")
                    })??;
                    if env.insert(attr.key.to_string(), value).is_some() {
                        return Err(invalid(format!(
                            "attribute {:?} is set more than once in {what} (again at line {})",
                            attr.key.as_str(),
                            self.line(attr.span())
                        )));
                    }
                }
                Structure::Block(b) => {
                    return Err(JobspecError::Unknown(format!(
                        "unknown block {:?} in {what} at line {}",
                        b.ident.as_str(),
                        self.line(b.span())
                    )))
                }
            }
        }
        Ok(env)
    }

    fn logs(&self, task: &str, block: &Block) -> Result<LogConfig, JobspecError> {
        let what = format!("logs block of {task}");
        let items = self.items(&what, &block.body, &["max_files", "max_file_size"], &[])?;
        let defaults = LogConfig::default();
        Ok(LogConfig {
            max_files: self.opt_u32(&what, &items, "max_files")?.unwrap_or(defaults.max_files),
            max_file_size_mb: self
                .opt_u32(&what, &items, "max_file_size")?
                .unwrap_or(defaults.max_file_size_mb),
        })
    }

    fn volume_mount(&self, task: &str, block: &Block) -> Result<VolumeMount, JobspecError> {
        self.no_labels(task, block)?;
        let what = format!("volume_mount block of {task}");
        let items = self.items(&what, &block.body, &["volume", "destination", "read_only"], &[])?;
        Ok(VolumeMount {
            volume: self.opt_string(&what, &items, "volume")?.unwrap_or_default(),
            destination: self.opt_string(&what, &items, "destination")?.unwrap_or_default(),
            read_only: self.opt_bool(&what, &items, "read_only")?.unwrap_or(false),
        })
    }

    fn csi_plugin(&self, task: &str, block: &Block) -> Result<CsiPluginConfig, JobspecError> {
        let what = format!("csi_plugin block of {task}");
        let items = self.items(
            &what,
            &block.body,
            &["id", "type", "mount_dir", "stage_publish_base_dir", "health_timeout"],
            &[],
        )?;
        // Checked in csi.md's order: the id first, then the type.
        let id = self.opt_string(&what, &items, "id")?.unwrap_or_default();
        if id.is_empty() {
            return Err(invalid("csi_plugin must have a non-empty id"));
        }
        let plugin_type =
            csi_plugin_type(&self.opt_string(&what, &items, "type")?.unwrap_or_default())?;
        let non_empty = |s: Option<String>, default: &str| match s {
            Some(s) if !s.is_empty() => s,
            _ => default.to_string(),
        };
        Ok(CsiPluginConfig {
            id,
            plugin_type,
            mount_dir: non_empty(
                self.opt_string(&what, &items, "mount_dir")?,
                DEFAULT_CSI_MOUNT_DIR,
            ),
            stage_publish_base_dir: non_empty(
                self.opt_string(&what, &items, "stage_publish_base_dir")?,
                DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR,
            ),
            health_timeout: match items.attr("health_timeout") {
                Some(attr) => self.duration(&what, attr)?,
                None => DEFAULT_CSI_HEALTH_TIMEOUT,
            },
        })
    }

    fn resources(&self, task: &str, block: &Block) -> Result<Resources, JobspecError> {
        let what = format!("resources block of {task}");
        let items = self.items(&what, &block.body, &["cpu", "memory"], &[])?;
        let defaults = Resources::default();
        Ok(Resources {
            cpu: self.opt_u32(&what, &items, "cpu")?.unwrap_or(defaults.cpu),
            memory_mb: self.opt_u32(&what, &items, "memory")?.unwrap_or(defaults.memory_mb),
        })
    }

    // ---- values ----

    fn wrong_type(&self, what: &str, attr: &Attribute, expected: &str) -> JobspecError {
        invalid(format!(
            "attribute {:?} in {what} at line {} must be {expected}",
            attr.key.as_str(),
            self.line(attr.span())
        ))
    }

    /// The literal text of a string, with `${...}` kept as written. `None` when `expr` is not a
    /// string; `Some(Err)` for a template directive (`%{if}`), which nodeward does not evaluate.
    fn text(&self, expr: &Expression) -> Option<Result<String, JobspecError>> {
        match expr {
            Expression::String(s) => Some(Ok(s.value().clone())),
            Expression::StringTemplate(t) => Some(self.template_text(t)),
            Expression::HeredocTemplate(h) => Some(self.template_text(&h.template)),
            _ => None,
        }
    }

    fn template_text(&self, template: &Template) -> Result<String, JobspecError> {
        let mut out = String::new();
        for element in template.iter() {
            match element {
                Element::Literal(literal) => out.push_str(literal.as_str()),
                Element::Interpolation(interp) => {
                    match interp.span().and_then(|r| self.text.get(r)) {
                        Some(raw) => out.push_str(raw),
                        None => out.push_str(&format!("${{{}}}", interp.expr)),
                    }
                }
                Element::Directive(d) => {
                    return Err(invalid(format!(
                        "template directives (%{{...}}) are not supported (line {})",
                        self.line(d.span())
                    )))
                }
            }
        }
        Ok(out)
    }

    /// A string, or a number or bool as its text.
    fn scalar_text(&self, expr: &Expression) -> Option<Result<String, JobspecError>> {
        match expr {
            Expression::Number(n) => Some(Ok(n.value().to_string())),
            Expression::Bool(b) => Some(Ok(b.value().to_string())),
            other => self.text(other),
        }
    }

    fn string(&self, what: &str, attr: &Attribute) -> Result<String, JobspecError> {
        self.text(&attr.value)
            .ok_or_else(|| self.wrong_type(what, attr, "a string"))?
    }

    fn strings(&self, what: &str, attr: &Attribute) -> Result<Vec<String>, JobspecError> {
        let Expression::Array(array) = &attr.value else {
            return Err(self.wrong_type(what, attr, "a list of strings"));
        };
        array
            .iter()
            .map(|item| {
                self.scalar_text(item)
                    .ok_or_else(|| self.wrong_type(what, attr, "a list of strings"))?
            })
            .collect()
    }

    fn u32(&self, what: &str, attr: &Attribute) -> Result<u32, JobspecError> {
        let expected = "a whole number from 0 to 4294967295";
        match &attr.value {
            Expression::Number(n) => n
                .value()
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| self.wrong_type(what, attr, expected)),
            _ => Err(self.wrong_type(what, attr, expected)),
        }
    }

    fn duration(&self, what: &str, attr: &Attribute) -> Result<Duration, JobspecError> {
        let text = self
            .text(&attr.value)
            .ok_or_else(|| self.wrong_type(what, attr, "a duration string such as \"15s\""))??;
        duration::parse(&text).map_err(|e| {
            invalid(format!(
                "invalid duration for {:?} in {what} at line {}: {e}",
                attr.key.as_str(),
                self.line(attr.span())
            ))
        })
    }

    fn opt_string(
        &self,
        what: &str,
        items: &Items,
        key: &str,
    ) -> Result<Option<String>, JobspecError> {
        items.attr(key).map(|a| self.string(what, a)).transpose()
    }

    fn opt_u32(&self, what: &str, items: &Items, key: &str) -> Result<Option<u32>, JobspecError> {
        items.attr(key).map(|a| self.u32(what, a)).transpose()
    }

    fn opt_bool(&self, what: &str, items: &Items, key: &str) -> Result<Option<bool>, JobspecError> {
        items
            .attr(key)
            .map(|a| match &a.value {
                Expression::Bool(b) => Ok(*b.value()),
                _ => Err(self.wrong_type(what, a, "true or false")),
            })
            .transpose()
    }
}
