//! `raw_exec`'s `config` keys beside `command` and `args` (Nomad 1.9's driver): `oom_score_adj`,
//! implemented, and `cgroup_v1_override` / `cgroup_v2_override`, refused.
//!
//! HCL checks each where it reads it, so that the message names the line, and hands
//! `oom_score_adj` on as the number it read; JSON's `Config` object is checked here, by its path.
//! Both end in [`oom_score_adj`], one rule.

use serde_json::Value;

use super::invalid;
use super::shared::Extra;
use super::JobspecError;

/// The driver's name in jobspecs.
pub const NAME: &str = "raw_exec";

/// The kernel's highest `oom_score_adj` (`OOM_SCORE_ADJ_MAX`).
pub const MAX_OOM_SCORE_ADJ: i64 = 1000;

pub const CGROUP_V1_OVERRIDE: &str = "cgroup_v1_override";
pub const CGROUP_V2_OVERRIDE: &str = "cgroup_v2_override";
/// The config keys that are refused: running the task in the operator's cgroup instead of one of
/// its own would silently change what limits it and what is killed with it.
pub const REFUSED: [&str; 2] = [CGROUP_V1_OVERRIDE, CGROUP_V2_OVERRIDE];

/// The refusal of a cgroup override; `what` names it (`attribute "cgroup_v2_override" in config
/// block of task "t" at line 5`, or a JSON field's path).
pub fn refused_override(what: &str) -> JobspecError {
    invalid(format!(
        "{what} is refused: this node places each task in a cgroup of its own and does not run \
         tasks in an operator's cgroup yet"
    ))
}

/// Checks an `oom_score_adj`; `at` says where it is written. A negative value is refused with
/// Nomad's words, one above the kernel's maximum because the kernel would refuse it at start.
pub fn oom_score_adj(at: &str, n: i64) -> Result<u32, JobspecError> {
    if n < 0 {
        return Err(invalid(format!("{at}: oom_score_adj must not be negative")));
    }
    if n > MAX_OOM_SCORE_ADJ {
        return Err(invalid(format!(
            "{at}: oom_score_adj must be at most {MAX_OOM_SCORE_ADJ} (the kernel's maximum), got {n}"
        )));
    }
    Ok(n as u32)
}

/// A `raw_exec` task's `Config` object beside `command` and `args` (`path` is the task's,
/// `TaskGroups[0].Tasks[0]`): its `oom_score_adj`, once checked; a cgroup override is refused.
/// An override written as Go's zero value (`""`, `{}`) is what Go writes for "not set".
pub(super) fn convert(path: &str, extra: &Extra) -> Result<Option<u32>, JobspecError> {
    for key in REFUSED {
        if extra.get(key).is_some_and(|v| !super::shared::is_empty(v)) {
            return Err(refused_override(&format!("field \"{path}.Config.{key}\"")));
        }
    }
    let at = format!("field \"{path}.Config.oom_score_adj\"");
    match extra.get("oom_score_adj") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => oom_score_adj(&at, n).map(Some),
            None if n.as_f64().is_some_and(|f| f < 0.0) => oom_score_adj(&at, -1).map(Some),
            None => Err(invalid(format!(
                "{at} must be a whole number from 0 to {MAX_OOM_SCORE_ADJ}, got {n}"
            ))),
        },
        Some(other) => Err(invalid(format!(
            "{at} must be a whole number from 0 to {MAX_OOM_SCORE_ADJ}, got {other}"
        ))),
    }
}

/// The keys [`convert`] reads, which are not "ignored" fields of a `raw_exec` config.
pub(super) const KEYS: [&str; 3] = ["oom_score_adj", CGROUP_V1_OVERRIDE, CGROUP_V2_OVERRIDE];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extra(v: Value) -> Extra {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn json_oom_score_adj_is_checked_by_its_path() {
        let p = "TaskGroups[0].Tasks[0]";
        assert_eq!(convert(p, &extra(json!({}))), Ok(None));
        assert_eq!(convert(p, &extra(json!({"oom_score_adj": 0}))), Ok(Some(0)));
        assert_eq!(
            convert(p, &extra(json!({"oom_score_adj": 1000}))),
            Ok(Some(1000))
        );
        assert_eq!(
            convert(p, &extra(json!({"oom_score_adj": -1}))).unwrap_err(),
            JobspecError::Invalid(
                "field \"TaskGroups[0].Tasks[0].Config.oom_score_adj\": oom_score_adj must not be negative"
                    .into()
            )
        );
        assert_eq!(
            convert(p, &extra(json!({"oom_score_adj": 1001}))).unwrap_err(),
            JobspecError::Invalid(
                "field \"TaskGroups[0].Tasks[0].Config.oom_score_adj\": oom_score_adj must be at most 1000 (the kernel's maximum), got 1001"
                    .into()
            )
        );
        assert!(convert(p, &extra(json!({"oom_score_adj": "high"})))
            .unwrap_err()
            .to_string()
            .contains("must be a whole number from 0 to 1000"));
        assert!(convert(p, &extra(json!({"oom_score_adj": 1.5})))
            .unwrap_err()
            .to_string()
            .contains("must be a whole number from 0 to 1000"));
    }

    #[test]
    fn json_cgroup_overrides_are_refused_unless_empty() {
        let p = "TaskGroups[0].Tasks[0]";
        assert_eq!(
            convert(
                p,
                &extra(json!({"cgroup_v2_override": "custom.slice/app.scope"}))
            )
            .unwrap_err()
            .to_string(),
            "field \"TaskGroups[0].Tasks[0].Config.cgroup_v2_override\" is refused: this node \
             places each task in a cgroup of its own and does not run tasks in an operator's \
             cgroup yet"
        );
        assert!(convert(
            p,
            &extra(json!({"cgroup_v1_override": {"pids": "/sys/fs/cgroup/pids/x"}}))
        )
        .unwrap_err()
        .to_string()
        .contains("Config.cgroup_v1_override\" is refused"));
        assert_eq!(
            convert(
                p,
                &extra(json!({"cgroup_v1_override": {}, "cgroup_v2_override": ""}))
            ),
            Ok(None)
        );
    }

    // From HCL and JSON, through the whole parse.
    use crate::jobspec::hcl::parse_job as parse_hcl;
    use crate::jobspec::logs::tests::{from_hcl, from_json, from_json_value, json_job};

    #[test]
    fn oom_score_adj_is_the_same_job_from_hcl_and_json() {
        let job = from_hcl(
            "      config {\n        command = \"true\"\n        oom_score_adj = 500\n      }",
        )
        .unwrap();
        assert_eq!(job.task_groups[0].tasks[0].config.oom_score_adj, Some(500));
        let (j, warnings) = from_json(&json_job(
            None,
            json!({"command": "true", "oom_score_adj": 500}),
        ))
        .unwrap();
        assert!(warnings.is_empty(), "read, not ignored: {warnings:?}");
        assert_eq!(j, job);
        // Kept in the job's JSON config, under its config key, and read back.
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(
            v["TaskGroups"][0]["Tasks"][0]["Config"],
            json!({"command": "true", "args": [], "oom_score_adj": 500})
        );
        assert_eq!(from_json_value(&v), job);
        // HCL2 converts a string to the number; 0 and 1000 are the ends of the range.
        for (written, n) in [("\"250\"", 250), ("0", 0), ("1000", 1000)] {
            let job = from_hcl(&format!(
                "      config {{\n        command = \"true\"\n        oom_score_adj = {written}\n      }}"
            ))
            .unwrap();
            assert_eq!(job.task_groups[0].tasks[0].config.oom_score_adj, Some(n));
        }
        // Unset: none, and nothing in the JSON.
        let job = from_hcl("      config { command = \"true\" }").unwrap();
        assert_eq!(job.task_groups[0].tasks[0].config.oom_score_adj, None);
        let v = serde_json::to_value(&job).unwrap();
        assert!(v["TaskGroups"][0]["Tasks"][0]["Config"]
            .get("oom_score_adj")
            .is_none());
    }

    #[test]
    fn bad_oom_score_adj_is_refused_with_its_line() {
        let config = |v: &str| {
            format!(
                "      config {{\n        command = \"true\"\n        oom_score_adj = {v}\n      }}"
            )
        };
        assert_eq!(
            from_hcl(&config("-1")).unwrap_err(),
            JobspecError::Invalid(
                "config block of task \"t\" at line 7: oom_score_adj must not be negative".into()
            )
        );
        assert_eq!(
            from_hcl(&config("1001")).unwrap_err().to_string(),
            "config block of task \"t\" at line 7: oom_score_adj must be at most 1000 (the kernel's \
             maximum), got 1001"
        );
        assert_eq!(
            from_hcl(&config("\"high\"")).unwrap_err().to_string(),
            "attribute \"oom_score_adj\" in config block of task \"t\" at line 7 must be a whole number"
        );
        assert!(from_hcl(&config("2.5"))
            .unwrap_err()
            .to_string()
            .contains("must be a whole number"));
        assert_eq!(
            from_json(&json_job(
                None,
                json!({"command": "true", "oom_score_adj": -5})
            ))
            .unwrap_err()
            .to_string(),
            "field \"TaskGroups[0].Tasks[0].Config.oom_score_adj\": oom_score_adj must not be negative"
        );
    }

    /// Nomad's `exec` driver has no `oom_score_adj` (its `exec2` plugin has): an attribute Nomad does
    /// not know there stays an error, as for any driver config key it does not know.
    #[test]
    fn exec_and_docker_have_no_oom_score_adj() {
        let src = "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"true\"\n        oom_score_adj = 5\n      }\n    }\n  }\n}\n";
        assert_eq!(
            parse_hcl(src).unwrap_err().to_string(),
            "unknown attribute \"oom_score_adj\" in config block of task \"t\" at line 7"
        );
        let mut v = json_job(None, json!({"command": "true", "oom_score_adj": 5}));
        v["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("exec");
        let (job, warnings) = from_json(&v).unwrap();
        assert_eq!(job.task_groups[0].tasks[0].config.oom_score_adj, None);
        assert_eq!(
            warnings,
            ["field \"TaskGroups[0].Tasks[0].Config.oom_score_adj\" is not supported by nodeward and was ignored"]
        );
    }

    #[test]
    fn cgroup_overrides_are_refused_with_their_line() {
        let e = from_hcl(
            "      config {\n        command = \"true\"\n        cgroup_v2_override = \"custom.slice/app.scope\"\n      }",
        )
        .unwrap_err();
        assert_eq!(
            e,
            JobspecError::Invalid(
                "attribute \"cgroup_v2_override\" in config block of task \"t\" at line 7 is refused: \
                 this node places each task in a cgroup of its own and does not run tasks in an \
                 operator's cgroup yet"
                    .into()
            )
        );
        let e = from_hcl(
            "      config {\n        command = \"true\"\n\n        cgroup_v1_override = { pids = \"/sys/fs/cgroup/pids/x\" }\n      }",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "attribute \"cgroup_v1_override\" in config block of task \"t\" at line 8 is refused"
            ),
            "{e}"
        );
        let e = from_json(&json_job(
            None,
            json!({"command": "true", "cgroup_v2_override": "custom.slice"}),
        ))
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "field \"TaskGroups[0].Tasks[0].Config.cgroup_v2_override\" is refused: this node"
            ),
            "{e}"
        );
    }
}
