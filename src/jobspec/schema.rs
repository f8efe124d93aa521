//! The jobspec rule (spec `jobspec.md`, "The rule"): every block and attribute of Nomad's jobspec
//! is implemented, has no effect on one node (accepted and warned once), or is refused.
//!
//! This module applies the rows of the schema table ([`super::table`]) that are not
//! "implemented" before the front-ends read a job:
//!
//! - HCL: [`prepare_hcl`] runs on the evaluated syntax tree, before the walker
//!   ([`super::hcl`]). It takes the no-effect blocks and attributes out of the tree (the walker
//!   then refuses only what Nomad does not know), refuses `template`, `artifact` and `vault` with
//!   their line, and gives a task written directly in `job` a group of its own name, as Nomad does.
//! - JSON: [`check_json`] refuses a non-empty `Templates`, `Artifacts` or `Vault`; every other
//!   field nodeward does not read is warned by the raw job, as before.
//!
//! Each no-effect name is warned once per job, whatever the number of blocks that carry it. The
//! walker's lists are the table's implemented rows, so nothing here needs to change when one of
//! these moves to "implemented": its row changes class and the walker reads it.

use std::collections::BTreeSet;

use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::{Decorated, Ident, Span};
use serde_json::Value;

use super::invalid;
use super::kept::{Collect, Kept, KeptHcl};
pub use super::shared::{warning, Level};
use super::JobspecError;
use crate::hcl::Source;

/// Attributes of a task's `resources` accepted with no effect, as the JSON front-end ignores
/// `DiskMB` (Nomad's own jobspecs write it). `memory_max` is implemented (resources.md).
pub const RESOURCES_NO_EFFECT: &[(&str, &str)] =
    &[("disk", "deprecated in Nomad; disk is not reserved per task")];

/// Attributes of a group's `ephemeral_disk` accepted with no effect (its `size` is read,
/// `jobspec::ephemeral_disk`): the attribute, the name it is warned by, and why.
pub const EPHEMERAL_DISK_NO_EFFECT: &[(&str, &str, &str)] = &[
    (
        "sticky",
        "ephemeral_disk.sticky",
        "there is no other node to keep the allocation directory for",
    ),
    (
        "migrate",
        "ephemeral_disk.migrate",
        "there is no other node to migrate the allocation directory to",
    ),
];

/// The warning of a no-effect name, whatever level it was met at (its reason is the same at
/// each).
pub fn no_effect_warning(name: &str) -> String {
    let reason = super::table::any_reason(name)
        .or_else(|| {
            EPHEMERAL_DISK_NO_EFFECT
                .iter()
                .find(|(_, n, _)| *n == name)
                .map(|(_, _, reason)| *reason)
        })
        .unwrap_or("");
    warning(name, reason)
}

/// The HCL half of the rule, applied to the evaluated top-level body of a jobspec. Returns the
/// warnings, in the order their names are first written, and the no-effect settings taken out,
/// in Nomad's API shape, for the walked job to keep ([`super::kept`]).
pub fn prepare_hcl(body: &mut Body, src: &Source) -> Result<(Vec<String>, KeptHcl), JobspecError> {
    let mut out = Warnings::default();
    let mut kept = KeptHcl::default();
    for job in body.get_blocks_mut("job") {
        tasks_in_job(&mut job.body);
        let job_what = what("job", job);
        kept.job = strip(&mut job.body, src, Level::Job, &job_what, &mut out)?;
        for group in job.body.get_blocks_mut("group") {
            let group_what = what("group", group);
            let group_name = label(group);
            let group_kept = strip(&mut group.body, src, Level::Group, &group_what, &mut out)?;
            kept.groups.insert(group_name.clone(), group_kept);
            for task in group.body.get_blocks_mut("task") {
                let task_what = what("task", task);
                let task_kept = strip(&mut task.body, src, Level::Task, &task_what, &mut out)?;
                kept.tasks
                    .insert((group_name.clone(), label(task)), task_kept);
                for resources in task.body.get_blocks_mut("resources") {
                    let table: Vec<_> = RESOURCES_NO_EFFECT
                        .iter()
                        .map(|&(n, reason)| (n, n, reason))
                        .collect();
                    strip_attributes(&mut resources.body, &table, &mut out);
                }
            }
        }
    }
    Ok((out.list, kept))
}

fn label(block: &Block) -> String {
    block
        .labels
        .first()
        .map(|l| l.as_str().to_string())
        .unwrap_or_default()
}

/// Takes the attributes of `table` (attribute, warned name, reason) out of a block's body,
/// warned: [`RESOURCES_NO_EFFECT`] from `resources`.
fn strip_attributes(body: &mut Body, table: &[(&str, &'static str, &str)], out: &mut Warnings) {
    let mut i = 0;
    while i < body.len() {
        let found = match body.get(i) {
            Some(Structure::Attribute(a)) => table.iter().find(|(n, _, _)| *n == a.key.as_str()),
            _ => None,
        };
        match found {
            Some((_, name, reason)) => {
                out.add(name, reason);
                body.remove(i);
            }
            None => i += 1,
        }
    }
}

/// Warns the attributes of `table` (attribute, warned name, reason) that `body` holds.
fn warn_attributes(body: &Body, table: &[(&str, &'static str, &str)], out: &mut Warnings) {
    for a in body.attributes() {
        if let Some((_, name, reason)) = table.iter().find(|(n, _, _)| *n == a.key.as_str()) {
            out.add(name, reason);
        }
    }
}

/// Warnings named once each.
#[derive(Default)]
struct Warnings {
    seen: BTreeSet<&'static str>,
    list: Vec<String>,
}

impl Warnings {
    fn add(&mut self, name: &'static str, reason: &str) {
        if self.seen.insert(name) {
            self.list.push(warning(name, reason));
        }
    }
}

/// A task written directly in `job` becomes `group "<task>" { task "<task>" {..} }`, in its
/// place (Nomad's jobspec does the same). The group keeps the task's span, so an error about
/// the group names the task's line.
fn tasks_in_job(body: &mut Body) {
    for i in 0..body.len() {
        let is_task =
            matches!(body.get(i), Some(Structure::Block(b)) if b.ident.as_str() == "task");
        if !is_task {
            continue;
        }
        let Structure::Block(task) = body.remove(i) else {
            unreachable!("checked above")
        };
        let mut group = task.clone();
        group.ident = Decorated::new(Ident::new("group"));
        group.body = Body::new();
        group.body.push(task);
        body.insert(i, group);
    }
}

/// Takes the no-effect names out of one body, kept in Nomad's API shape (returned), and refuses
/// the refused ones; everything else is left for the walker, which refuses what Nomad does not
/// know.
fn strip(
    body: &mut Body,
    src: &Source,
    level: Level,
    what: &str,
    out: &mut Warnings,
) -> Result<Kept, JobspecError> {
    let mut kept = Collect::new(src, level);
    let mut i = 0;
    while i < body.len() {
        let (name, kind, line) = match body.get(i) {
            Some(Structure::Block(b)) => (b.ident.as_str(), "block", src.line(b.span())),
            Some(Structure::Attribute(a)) => (a.key.as_str(), "attribute", src.line(a.span())),
            None => break,
        };
        if let Some(things) = super::table::refused(level, name).filter(|_| kind == "block") {
            return Err(refused(name, what, line, things));
        }
        if let Some((row, reason)) = super::table::no_effect(level).find(|(e, _)| e.hcl == name) {
            out.add(row.hcl, reason);
            if let Some(structure) = body.get(i) {
                kept.add(what, structure)?;
            }
            body.remove(i);
            continue;
        }
        // In its place, so its warnings keep the order the names are written in; they stay
        // in the block, which keeps them (`ephemeral_disk`).
        if let (Level::Group, Some(Structure::Block(disk))) = (level, body.get(i)) {
            if disk.ident.as_str() == "ephemeral_disk" {
                warn_attributes(&disk.body, EPHEMERAL_DISK_NO_EFFECT, out);
            }
        }
        i += 1;
    }
    Ok(kept.kept)
}

fn refused(name: &str, what: &str, line: usize, things: &str) -> JobspecError {
    invalid(format!(
        "block {name:?} in {what} at line {line} is refused: this node does not support {things} yet"
    ))
}

fn what(ident: &str, block: &Block) -> String {
    match block.labels.first() {
        Some(label) => format!("{ident} {:?}", label.as_str()),
        None => ident.to_string(),
    }
}

/// The JSON half of the rule: a non-empty `Vault` (job, group or task), `Templates` or
/// `Artifacts` (task) is refused with its path.
pub fn check_json(job: &Value) -> Result<(), JobspecError> {
    let refuse = |path: String, things: &str| {
        Err(invalid(format!(
            "field {path:?} is refused: this node does not support {things} yet"
        )))
    };
    // The first refused field set, at `level`, by its API name: the table's order.
    let first = |v: &Value, level: Level| {
        super::table::refused_rows(level)
            .find(|(e, _)| v.get(e.api).is_some_and(|v| !is_unset(v)))
            .map(|(e, things)| (e.api, things))
    };
    if let Some((key, things)) = first(job, Level::Job) {
        return refuse(key.into(), things);
    }
    for (i, group) in array(job, "TaskGroups").iter().enumerate() {
        if let Some((key, things)) = first(group, Level::Group) {
            return refuse(format!("TaskGroups[{i}].{key}"), things);
        }
        for (j, task) in array(group, "Tasks").iter().enumerate() {
            if let Some((key, things)) = first(task, Level::Task) {
                return refuse(format!("TaskGroups[{i}].Tasks[{j}].{key}"), things);
            }
        }
    }
    Ok(())
}

fn array<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Go writes an unset list or struct as `null` or empty.
fn is_unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::{hcl, json};

    const TYPICAL: &str = r#"
job "docs" {
  update { max_parallel = 1 }
  migrate { max_parallel = 1 }
  group "web" {
    reschedule { delay = "30s" }
    ephemeral_disk { sticky = true }
    service { name = "web" }
    task "server" {
      driver = "raw_exec"
      config { command = "true" }
      service { name = "again" }
      identity { env = true }
    }
  }
}
"#;

    #[test]
    fn no_effect_names_are_taken_out_and_warned_once_each() {
        let parsed = hcl::parse_job(TYPICAL).unwrap();
        assert_eq!(
            parsed.warnings,
            [
                warning(
                    "update",
                    super::super::table::no_effect_reason(Level::Job, "update").unwrap()
                ),
                warning(
                    "migrate",
                    super::super::table::no_effect_reason(Level::Job, "migrate").unwrap()
                ),
                warning(
                    "reschedule",
                    super::super::table::no_effect_reason(Level::Group, "reschedule").unwrap()
                ),
                warning("ephemeral_disk.sticky", EPHEMERAL_DISK_NO_EFFECT[0].2),
                "\"service\" has no effect on one node: services are not registered on this node"
                    .to_string(),
                warning(
                    "identity",
                    super::super::table::no_effect_reason(Level::Task, "identity").unwrap()
                ),
            ]
        );
        // Kept where they were written, in Nomad's API shape.
        let job = &parsed.job;
        assert_eq!(job.kept["Update"], serde_json::json!({"MaxParallel": 1}));
        assert_eq!(job.kept["Migrate"], serde_json::json!({"MaxParallel": 1}));
        let group = &job.task_groups[0];
        assert_eq!(
            group.kept["ReschedulePolicy"],
            serde_json::json!({"Delay": 30_000_000_000u64})
        );
        assert_eq!(group.kept["Services"], serde_json::json!([{"Name": "web"}]));
        assert!(group.ephemeral_disk.sticky);
        let task = &group.tasks[0];
        assert_eq!(
            task.kept["Services"],
            serde_json::json!([{"Name": "again"}])
        );
        assert_eq!(task.kept["Identity"], serde_json::json!({"Env": true}));
        // Nothing else of the job changes: it is the job without them, plus them.
        let without = r#"
job "docs" {
  group "web" {
    ephemeral_disk { sticky = true }
    task "server" {
      driver = "raw_exec"
      config { command = "true" }
    }
  }
}
"#;
        let mut bare = parsed.job.clone();
        bare.kept.clear();
        bare.task_groups[0].kept.clear();
        bare.task_groups[0].tasks[0].kept.clear();
        assert_eq!(bare, hcl::parse_job(without).unwrap().job);
        // HCL and its JSON give the same job, and the JSON warns the same names (in the
        // order of its fields, not of the HCL's lines).
        let bytes = serde_json::to_vec(&parsed.job).unwrap();
        let from_json = json::parse_job(&bytes).unwrap();
        assert_eq!(from_json.job, parsed.job);
        let sorted = |mut w: Vec<String>| {
            w.sort();
            w
        };
        assert_eq!(sorted(from_json.warnings), sorted(parsed.warnings));
    }

    #[test]
    fn kept_blocks_take_nomads_api_shape() {
        let src = r#"
job "shape" {
  affinity {
    attribute = "${node.datacenter}"
    value     = "dc1"
    weight    = 100
  }
  spread {
    attribute = "${node.datacenter}"
    target "dc1" { percent = 60 }
    target "dc2" { percent = 40 }
  }
  group "g" {
    max_client_disconnect = "1h"
    update {
      max_parallel     = 1
      min_healthy_time = "10s"
      auto_revert      = true
    }
    scaling {
      min = 1
      max = 3
      policy {
        cooldown = "1m"
        check "cpu" { source = "nomad-apm" }
      }
    }
    service {
      name = "web"
      port = "http"
      tags = ["a", "b"]
      meta = { version = "1" }
      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
      identity "vault" { aud = ["vault.io"] }
      scaling "cpu" { max = 500 }
      action "hello" {
        command = "echo"
        args    = ["hi"]
      }
    }
  }
}
"#;
        use serde_json::json;
        let job = hcl::parse_job(src).unwrap().job;
        assert_eq!(
            job.kept["Affinities"],
            json!([{"LTarget": "${node.datacenter}", "RTarget": "dc1", "Weight": 100}])
        );
        assert_eq!(
            job.kept["Spreads"],
            json!([{"Attribute": "${node.datacenter}", "SpreadTarget": [
                {"Value": "dc1", "Percent": 60}, {"Value": "dc2", "Percent": 40}]}])
        );
        let g = &job.task_groups[0].kept;
        assert_eq!(g["MaxClientDisconnect"], json!(3_600_000_000_000u64));
        assert_eq!(
            g["Update"],
            json!({"MaxParallel": 1, "MinHealthyTime": 10_000_000_000u64, "AutoRevert": true})
        );
        assert_eq!(
            g["Scaling"],
            json!({"Min": 1, "Max": 3, "Policy": {"cooldown": "1m", "check": {"cpu": {"source": "nomad-apm"}}}})
        );
        assert_eq!(
            g["Services"],
            json!([{"Name": "web", "PortLabel": "http", "Tags": ["a", "b"], "Meta": {"version": "1"},
                "Checks": [{"Type": "http", "Path": "/health", "Interval": 10_000_000_000u64,
                    "Timeout": 2_000_000_000u64}]}])
        );
        let t = &job.task_groups[0].tasks[0].kept;
        assert_eq!(
            t["Identities"],
            json!([{"Name": "vault", "Audience": ["vault.io"]}])
        );
        assert_eq!(
            t["ScalingPolicies"],
            json!([{"Type": "vertical_cpu", "Max": 500}])
        );
        assert_eq!(
            t["Actions"],
            json!([{"Name": "hello", "Command": "echo", "Args": ["hi"]}])
        );
        // A duration spelled wrong is an error naming it, as for the settings nodeward reads.
        let bad = src.replace("min_healthy_time = \"10s\"", "min_healthy_time = \"10 s\"");
        let err = hcl::parse_job(&bad).unwrap_err().to_string();
        assert!(
            err.contains(
                "invalid duration for \"min_healthy_time\" in update block of group \"g\" at line"
            ),
            "{err}"
        );
    }

    #[test]
    fn refused_blocks_name_their_line() {
        let src = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"true\" }\n      template {\n        data = \"x\"\n        destination = \"local/x\"\n      }\n    }\n  }\n}\n";
        assert_eq!(
            hcl::parse_job(src).unwrap_err(),
            JobspecError::Invalid(
                "block \"template\" in task \"t\" at line 6 is refused: this node does not \
                 support templates yet"
                    .into()
            )
        );
        let vault = src.replace("template {", "vault {");
        assert!(hcl::parse_job(&vault)
            .unwrap_err()
            .to_string()
            .contains("block \"vault\" in task \"t\" at line 6 is refused"));
        let artifact = src.replace("template {", "artifact {");
        assert!(hcl::parse_job(&artifact)
            .unwrap_err()
            .to_string()
            .contains("does not support artifacts yet"));
        let schedule = src.replace("template {\n        data = \"x\"\n        destination = \"local/x\"", "schedule {\n        cron {\n          start = \"0 12 * * * *\"\n          end = \"0 16\"\n        }");
        assert_eq!(
            hcl::parse_job(&schedule).unwrap_err().to_string(),
            "block \"schedule\" in task \"t\" at line 6 is refused: this node does not \
             support time-based task schedules yet"
        );
        let json = serde_json::json!({"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "true"},
            "Schedule": {"Cron": {"Start": "0 12 * * * *", "End": "0 16"}}}]}]});
        assert_eq!(
            json::parse_job(json.to_string().as_bytes())
                .unwrap_err()
                .to_string(),
            "field \"TaskGroups[0].Tasks[0].Schedule\" is refused: this node does not support \
             time-based task schedules yet"
        );
    }

    #[test]
    fn a_name_in_the_wrong_level_or_unknown_is_still_an_error() {
        // `update` is a job or group block, not a task's.
        let src = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"true\" }\n      update { max_parallel = 1 }\n    }\n  }\n}\n";
        assert_eq!(
            hcl::parse_job(src).unwrap_err(),
            JobspecError::Unknown("unknown block \"update\" in task \"t\" at line 6".into())
        );
        let typo = src.replace("update { max_parallel = 1 }", "drivr = 1");
        assert_eq!(
            hcl::parse_job(&typo).unwrap_err(),
            JobspecError::Unknown("unknown attribute \"drivr\" in task \"t\" at line 6".into())
        );
    }

    #[test]
    fn a_task_in_the_job_gets_a_group_of_its_name() {
        let direct = r#"
job "j" {
  task "t" {
    driver = "raw_exec"
    config { command = "true" }
  }
}
"#;
        let grouped = r#"
job "j" {
  group "t" {
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
    }
  }
}
"#;
        let job = hcl::parse_job(direct).unwrap().job;
        assert_eq!(job, hcl::parse_job(grouped).unwrap().job);
        assert_eq!(job.task_groups[0].name, "t");
        assert_eq!(job.task_groups[0].count, 1);
    }

    #[test]
    fn json_refuses_templates_artifacts_and_vault_when_set() {
        let job = |task: Value| serde_json::json!({"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [task]}]});
        let base =
            serde_json::json!({"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}});
        let mut with = base.clone();
        with["Templates"] = serde_json::json!([{"EmbeddedTmpl": "x", "DestPath": "local/x"}]);
        assert_eq!(
            json::parse_job(job(with).to_string().as_bytes()).unwrap_err(),
            JobspecError::Invalid(
                "field \"TaskGroups[0].Tasks[0].Templates\" is refused: this node does not \
                 support templates yet"
                    .into()
            )
        );
        // Go writes them unset as null or empty: that is no template.
        let mut empty = base.clone();
        empty["Templates"] = Value::Null;
        empty["Artifacts"] = serde_json::json!([]);
        empty["Vault"] = Value::Null;
        assert!(json::parse_job(job(empty).to_string().as_bytes()).is_ok());
    }
}
