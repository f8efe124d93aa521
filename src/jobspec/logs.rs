//! A task's `logs` block (Nomad's `LogConfig`): its rotation, and `disabled` (with Nomad's
//! deprecated inverse, `enabled`). The HCL walker and JSON both give a [`RawLogConfig`];
//! [`convert`] applies the defaults.

use serde::Deserialize;

use super::shared::Extra;
use super::LogConfig;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a LogConfig object")]
pub(crate) struct RawLogConfig {
    pub max_files: Option<u32>,
    #[serde(rename = "MaxFileSizeMB")]
    pub max_file_size_mb: Option<u32>,
    pub disabled: Option<bool>,
    /// Deprecated by Nomad for `disabled`; when it is the only one given, `disabled` is its
    /// inverse (what the job's author meant by it). Not kept: the job has `disabled`.
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The task's `LogConfig`, with Nomad's defaults for what `raw` does not set.
pub(crate) fn convert(raw: Option<RawLogConfig>) -> LogConfig {
    let defaults = LogConfig::default();
    let raw = raw.unwrap_or_default();
    LogConfig {
        max_files: raw.max_files.unwrap_or(defaults.max_files),
        max_file_size_mb: raw.max_file_size_mb.unwrap_or(defaults.max_file_size_mb),
        disabled: raw
            .disabled
            .or(raw.enabled.map(|enabled| !enabled))
            .unwrap_or(defaults.disabled),
    }
}

/// `logs { disabled enabled }` from HCL and JSON: the same job from both, errors with their lines
/// (HCL) or fields (JSON), and the job's JSON keeping it. Shared with [`super::raw_exec`]'s.
#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{json, Value};

    use crate::jobspec::hcl::parse_job as parse_hcl;
    use crate::jobspec::json::parse_job as parse_json;
    use crate::jobspec::{Job, JobspecError, LogConfig};

    pub(crate) fn hcl(task: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n{task}\n    }}\n  }}\n}}\n"
        )
    }

    pub(crate) fn from_hcl(task: &str) -> Result<Job, JobspecError> {
        parse_hcl(&hcl(task)).map(|p| {
            assert!(p.warnings.is_empty(), "{:?}", p.warnings);
            p.job
        })
    }

    /// The JSON job of [`hcl`]'s, with the task's `LogConfig` and `Config` as given.
    pub(crate) fn json_job(logs: Option<Value>, config: Value) -> Value {
        let mut task = json!({"Name": "t", "Driver": "raw_exec", "Config": config});
        if let Some(l) = logs {
            task["LogConfig"] = l;
        }
        json!({"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [task]}]})
    }

    pub(crate) fn from_json(v: &Value) -> Result<(Job, Vec<String>), JobspecError> {
        parse_json(v.to_string().as_bytes()).map(|p| (p.job, p.warnings))
    }

    fn logs_of(job: &Job) -> LogConfig {
        job.task_groups[0].tasks[0].log_config
    }

    pub(crate) fn from_json_value(v: &Value) -> Job {
        from_json(v).unwrap().0
    }

    #[test]
    fn disabled_logs_are_the_same_job_from_hcl_and_json() {
        let job = from_hcl(
            "      config { command = \"true\" }\n      logs {\n        disabled = true\n      }",
        )
        .unwrap();
        assert_eq!(
            logs_of(&job),
            LogConfig {
                disabled: true,
                ..LogConfig::default()
            }
        );
        let (from_json, warnings) = from_json(&json_job(
            Some(json!({"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": true})),
            json!({"command": "true"}),
        ))
        .unwrap();
        assert!(
            warnings.is_empty(),
            "not an ignored field any more: {warnings:?}"
        );
        assert_eq!(from_json, job);
        // The job's JSON says it, and reads back the same.
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(
            v["TaskGroups"][0]["Tasks"][0]["LogConfig"],
            json!({"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": true})
        );
        assert_eq!(from_json_value(&v), job);
        // Not disabled: not written, so jobs and state files keep their JSON.
        let on = from_hcl("      config { command = \"true\" }\n      logs { disabled = false }")
            .unwrap();
        let v = serde_json::to_value(&on).unwrap();
        assert_eq!(
            v["TaskGroups"][0]["Tasks"][0]["LogConfig"],
            json!({"MaxFiles": 10, "MaxFileSizeMB": 10})
        );
    }

    /// The deprecated `enabled`: when it is the only one given, `disabled` is its inverse; when both
    /// are, `disabled` decides.
    #[test]
    fn deprecated_enabled_is_the_inverse_of_disabled() {
        let cases = [
            ("enabled = false", json!({"Enabled": false}), true),
            ("enabled = true", json!({"Enabled": true}), false),
            (
                "enabled = false\n        disabled = false",
                json!({"Enabled": false, "Disabled": false}),
                false,
            ),
            (
                "enabled = true\n        disabled = true",
                json!({"Enabled": true, "Disabled": true}),
                true,
            ),
            (
                "max_files = 3",
                json!({"MaxFiles": 3, "Enabled": null}),
                false,
            ),
        ];
        for (body, json_logs, disabled) in cases {
            let job = from_hcl(&format!(
                "      config {{ command = \"true\" }}\n      logs {{\n        {body}\n      }}"
            ))
            .unwrap();
            assert_eq!(logs_of(&job).disabled, disabled, "{body}");
            let (j, warnings) =
                from_json(&json_job(Some(json_logs), json!({"command": "true"}))).unwrap();
            assert!(warnings.is_empty(), "{body}: {warnings:?}");
            assert_eq!(j, job, "{body}");
        }
    }

    #[test]
    fn bad_logs_values_name_the_attribute_and_line() {
        let e = from_hcl(
            "      config { command = \"true\" }\n      logs {\n        disabled = \"maybe\"\n      }",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attribute \"disabled\" in logs block of task \"t\" at line 7 must be true or false"
        );
        let e = from_hcl(
            "      config { command = \"true\" }\n      logs {\n        enabled = 1\n      }",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("attribute \"enabled\" in logs block of task \"t\" at line 7"),
            "{e}"
        );
        let e = from_json(&json_job(
            Some(json!({"Disabled": "yes"})),
            json!({"command": "true"}),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("Disabled"), "{e}");
    }
}
