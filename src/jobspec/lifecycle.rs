//! A task's `lifecycle { hook sidecar }` block and its `leader` flag: when in its allocation's
//! life a task runs (jobspec.md, Nomad's `TaskLifecycleConfig`).
//!
//! The HCL reader and the JSON shape (`"Lifecycle": {"Hook": "prestart", "Sidecar": false}`) both
//! fill [`RawLifecycle`]; [`lifecycle`] turns it into the domain [`TaskLifecycle`] with Nomad's
//! checks. A task without a block is a main task. Which task starts when is the allocation's
//! business (`alloc::lifecycle`); this module only says what each task asked for.

use serde::{Deserialize, Serialize};

use super::invalid;
use super::shared::Extra;
use super::JobspecError;

/// `hook = "prestart" | "poststart" | "poststop"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// Runs before the main tasks start: to completion, or beside them when a sidecar.
    Prestart,
    /// Starts once every main task runs.
    Poststart,
    /// Starts once every main task is dead.
    Poststop,
}

impl Hook {
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Prestart => "prestart",
            Hook::Poststart => "poststart",
            Hook::Poststop => "poststop",
        }
    }
}

/// A task's `lifecycle` block, in Nomad's API shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskLifecycle {
    pub hook: Hook,
    /// Runs for as long as the main tasks do (restarted by its policy) instead of to completion.
    pub sidecar: bool,
}

/// The block as written: JSON's `Lifecycle` object, or what the HCL reader found.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Lifecycle object")]
pub(crate) struct RawLifecycle {
    pub hook: Option<String>,
    pub sidecar: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Nomad's `TaskLifecycleConfig.Validate`: a hook must be named and be one of the three.
pub(crate) fn lifecycle(task: &str, raw: RawLifecycle) -> Result<TaskLifecycle, JobspecError> {
    let invalid = |why: String| invalid(format!("task {task:?}: lifecycle: {why}"));
    let hook = match raw.hook.as_deref().unwrap_or_default() {
        "prestart" => Hook::Prestart,
        "poststart" => Hook::Poststart,
        "poststop" => Hook::Poststop,
        "" => return Err(invalid("no lifecycle hook provided".to_string())),
        other => return Err(invalid(format!("invalid hook: {other}"))),
    };
    Ok(TaskLifecycle {
        hook,
        sidecar: raw.sidecar.unwrap_or(false),
    })
}

/// The group's rule (Nomad's `TaskGroup.Validate`): at most one leader.
pub(crate) fn check_leaders<'a>(
    group: &str,
    leaders: impl Iterator<Item = &'a str>,
) -> Result<(), JobspecError> {
    let leaders: Vec<&str> = leaders.collect();
    if leaders.len() > 1 {
        return Err(invalid(format!(
            "group {group:?}: Only one task may be marked as leader (tasks {})",
            leaders
                .iter()
                .map(|l| format!("{l:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(hook: Option<&str>, sidecar: Option<bool>) -> RawLifecycle {
        RawLifecycle {
            hook: hook.map(str::to_string),
            sidecar,
            extra: Extra::default(),
        }
    }

    #[test]
    fn reads_the_three_hooks_and_defaults_sidecar_to_false() {
        for (text, hook) in [
            ("prestart", Hook::Prestart),
            ("poststart", Hook::Poststart),
            ("poststop", Hook::Poststop),
        ] {
            let l = lifecycle("t", raw(Some(text), None)).unwrap();
            assert_eq!(
                l,
                TaskLifecycle {
                    hook,
                    sidecar: false
                }
            );
            assert_eq!(l.hook.as_str(), text);
        }
        let l = lifecycle("t", raw(Some("prestart"), Some(true))).unwrap();
        assert!(l.sidecar);
    }

    #[test]
    fn refuses_a_missing_or_unknown_hook_as_nomad_does() {
        assert_eq!(
            lifecycle("t", raw(None, Some(true))).unwrap_err(),
            JobspecError::Invalid("task \"t\": lifecycle: no lifecycle hook provided".into())
        );
        assert_eq!(
            lifecycle("t", raw(Some("prestop"), None)).unwrap_err(),
            JobspecError::Invalid("task \"t\": lifecycle: invalid hook: prestop".into())
        );
    }

    const HCL: &str = r#"job "j" {
  group "g" {
    task "init" {
      driver = "raw_exec"
      config { command = "true" }
      lifecycle {
        hook    = "prestart"
        sidecar = false
      }
    }
    task "main" {
      driver = "raw_exec"
      leader = true
      config { command = "true" }
    }
  }
}
"#;

    #[test]
    fn hcl_and_json_give_the_same_job_in_nomads_shape() {
        let job = crate::jobspec::hcl::parse_job(HCL).unwrap().job;
        let tasks = &job.task_groups[0].tasks;
        let want = TaskLifecycle {
            hook: Hook::Prestart,
            sidecar: false,
        };
        assert_eq!(tasks[0].lifecycle, Some(want));
        assert!(!tasks[0].leader && tasks[1].leader && tasks[1].lifecycle.is_none());
        let json = serde_json::to_value(&job).unwrap();
        let t = &json["TaskGroups"][0]["Tasks"];
        assert_eq!(
            t[0]["Lifecycle"],
            serde_json::json!({"Hook": "prestart", "Sidecar": false})
        );
        assert_eq!(t[1]["Leader"], serde_json::json!(true));
        let body = serde_json::json!({ "Job": json }).to_string();
        let back = crate::jobspec::json::parse_job(body.as_bytes()).unwrap();
        assert_eq!(back.job, job);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    }

    #[test]
    fn hcl_errors_name_the_block_and_line() {
        let bad = HCL.replace("sidecar = false", "sidecar = false\n        when = 1");
        let e = crate::jobspec::hcl::parse_job(&bad)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown attribute \"when\" in lifecycle block of task \"init\" at line 9"
        );
        let bad = HCL.replace("\"prestart\"", "\"prestop\"");
        let e = crate::jobspec::hcl::parse_job(&bad)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "task \"init\": lifecycle: invalid hook: prestop");
        let two = HCL.replace(
            "command = \"true\" }\n      lifecycle",
            "command = \"true\" }\n      leader = true\n      lifecycle",
        );
        let e = crate::jobspec::hcl::parse_job(&two)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Only one task may be marked as leader"), "{e}");
    }

    #[test]
    fn one_leader_at_most() {
        check_leaders("g", ["a"].into_iter()).unwrap();
        assert_eq!(
            check_leaders("g", ["a", "b"].into_iter()).unwrap_err(),
            JobspecError::Invalid(
                "group \"g\": Only one task may be marked as leader (tasks \"a\", \"b\")".into()
            )
        );
    }
}
