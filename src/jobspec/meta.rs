//! `meta` at job, group and task level (spec jobspec.md): string keys and values that the task
//! gets in its environment and in `${...}` interpolation, merged with the task's winning over its
//! group's, and the group's over the job's, as Nomad merges them.
//!
//! From HCL a `meta { key = "value" }` block (numbers and booleans taken as their text, as Nomad
//! does); from JSON Nomad's `Meta` object. The task's environment gets each key as
//! `NOMAD_META_<key>` and, when that differs, `NOMAD_META_<KEY upper-cased>` (Nomad's
//! `client/taskenv`); interpolation reads `${NOMAD_META_<key>}` and `${meta.<key>}`.

use std::collections::BTreeMap;

use super::{Job, JobspecError, Task};
use crate::hcl::{Items, Source};

/// Keys and values of one `meta` block, or the merge of the three levels.
pub type Meta = BTreeMap<String, String>;

/// The `meta` block of `items` (at most one) or its attribute form (`meta = { k = "v" }`, as
/// Nomad takes it), or `None`.
pub(crate) fn read_hcl(src: &Source, items: &Items) -> Result<Option<Meta>, JobspecError> {
    Ok(src.scalar_block_or_map(items, "meta")?)
}

/// The task's meta: the job's, then the group's, then the task's, the later winning.
pub fn merged(job: &Job, group: &str, task: &Task) -> Meta {
    let mut meta = job.meta.clone();
    if let Some(g) = job.task_groups.iter().find(|g| g.name == group) {
        meta.extend(g.meta.clone());
    }
    meta.extend(task.meta.clone());
    meta
}

/// `NOMAD_META_<key>` and `NOMAD_META_<KEY>` for each key (Nomad sets both), their names
/// cleaned as Nomad cleans them ([`crate::util::env_var_name`]: `my-key` is `NOMAD_META_my_key`,
/// which a shell can read).
pub fn env(meta: &Meta) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in meta {
        let name = env_name(k);
        let upper = env_name(&k.to_uppercase());
        out.push((name.clone(), v.clone()));
        if upper != name {
            out.push((upper, v.clone()));
        }
    }
    out
}

/// The variable meta `key` is in: `NOMAD_META_<key>`, cleaned.
pub fn env_name(key: &str) -> String {
    crate::util::env_var_name(&format!("NOMAD_META_{key}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::hcl::parse_job;

    /// `meta = { }` and `env = { }` as attributes, as Nomad takes them at every level, with
    /// keys a block cannot have and values from functions; the block and the attribute in one
    /// place, or a value that is not a map of scalars, are refused with their lines.
    #[test]
    fn meta_and_env_may_be_map_attributes() {
        let job = parse_job(
            r#"
locals {
  common = { LOG_LEVEL = "info", PORT = 8080 }
}
job "j" {
  meta = { "team.name" = "ops", tier = "job" }
  group "g" {
    meta = { tier = "group" }
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
      env = merge(local.common, { "a.b" = "c", ON = true })
    }
  }
}
"#,
        )
        .unwrap()
        .job;
        let task = &job.task_groups[0].tasks[0];
        let m = merged(&job, "g", task);
        assert_eq!(m.get("team.name").map(String::as_str), Some("ops"));
        assert_eq!(m.get("tier").map(String::as_str), Some("group"));
        let env: Vec<(&str, &str)> = task
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("LOG_LEVEL", "info"),
                ("ON", "true"),
                ("PORT", "8080"),
                ("a.b", "c")
            ]
        );

        let task_with = |body: &str| {
            format!(
                "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n{body}\n    }}\n  }}\n}}\n"
            )
        };
        let err = parse_job(&task_with(
            "      env { A = \"1\" }\n      env = { B = \"2\" }",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"env\" is given both as a block (line 6) and as an attribute (line 7) in task \"t\""),
            "{err}"
        );
        let err = parse_job(&task_with("      meta = [\"a\"]"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("attribute \"meta\" in meta of task \"t\" at line 6 must be a map of strings, numbers or bools"),
            "{err}"
        );
        let err = parse_job(&task_with("      env = { A = [1] }"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must be a map of strings, numbers or bools"),
            "{err}"
        );
    }

    #[test]
    fn three_levels_merge_with_the_task_winning() {
        let job = parse_job(
            r#"
job "j" {
  meta { owner = "ops"  tier = "job"  build = 7 }
  group "g" {
    meta { tier = "group"  zone = "a" }
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
      meta { tier = "task" }
    }
  }
}
"#,
        )
        .unwrap()
        .job;
        let m = merged(&job, "g", &job.task_groups[0].tasks[0]);
        let want: Meta = [
            ("build", "7"),
            ("owner", "ops"),
            ("tier", "task"),
            ("zone", "a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(m, want);
        // Kept per level in the job, in Nomad's shape.
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["Meta"]["owner"], "ops");
        assert_eq!(v["TaskGroups"][0]["Meta"]["zone"], "a");
        assert_eq!(v["TaskGroups"][0]["Tasks"][0]["Meta"]["tier"], "task");
        let back = crate::jobspec::json::parse_job(&serde_json::to_vec(&job).unwrap()).unwrap();
        assert_eq!(back.job, job);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    }

    #[test]
    fn env_has_the_key_as_written_and_upper_cased() {
        let meta: Meta = [("rack", "r1"), ("ZONE", "z"), ("my-key", "v")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            env(&meta),
            [
                ("NOMAD_META_ZONE".to_string(), "z".to_string()),
                ("NOMAD_META_my_key".to_string(), "v".to_string()),
                ("NOMAD_META_MY_KEY".to_string(), "v".to_string()),
                ("NOMAD_META_rack".to_string(), "r1".to_string()),
                ("NOMAD_META_RACK".to_string(), "r1".to_string()),
            ]
        );
    }

    #[test]
    fn a_block_inside_meta_is_refused_with_its_line() {
        let err = parse_job(
            "job \"j\" {\n  meta {\n    x { }\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"true\" }\n    }\n  }\n}\n",
        )
        .unwrap_err();
        assert_eq!(
            err,
            JobspecError::Unknown(
                "unknown block \"x\" in meta block of job \"j\" at line 3".into()
            )
        );
    }
}
