//! The `exec` driver's `config` keys beside `command`, `args`, `cap_add` and `cap_drop` (Nomad's
//! exec driver): `pid_mode` and `ipc_mode`. An exec task runs in PID and IPC namespaces of its
//! own (docs/resources.md "exec"), which is `"private"`, Nomad's default: implemented, and kept
//! as written. `"host"` shares the host's namespaces, which this node does not do: refused,
//! since the task would not see what its author meant it to see. Another value is an error.
//!
//! HCL checks each where it reads it, naming its line; JSON's `Config` object is checked here,
//! by its path. Both end in [`namespace_mode`], one rule.

use serde_json::Value;

use super::invalid;
use super::shared::Extra;
use super::JobspecError;

/// The driver's name in jobspecs.
pub const NAME: &str = "exec";

/// The keys this module reads, in the order they are checked.
pub const KEYS: [&str; 2] = ["pid_mode", "ipc_mode"];

/// The mode an exec task's namespaces have here.
pub const PRIVATE: &str = "private";

/// Checks `value` of `key` (`pid_mode` or `ipc_mode`); `at` says where it is written.
pub fn namespace_mode(at: &str, key: &str, value: &str) -> Result<(), JobspecError> {
    match value {
        PRIVATE => Ok(()),
        "host" => Err(invalid(format!(
            "{at}: {key} \"host\" is refused: this node runs each exec task in PID and IPC \
             namespaces of its own and does not share the host's yet"
        ))),
        other => Err(invalid(format!(
            "{at}: {key} must be \"private\" or \"host\", got {other:?}"
        ))),
    }
}

/// An exec task's `Config` object's `pid_mode` and `ipc_mode` (`path` is the task's,
/// `TaskGroups[0].Tasks[0]`), checked. Go's zero value `""` is "not set".
pub(super) fn convert(
    path: &str,
    extra: &Extra,
) -> Result<(Option<String>, Option<String>), JobspecError> {
    let read = |key: &str| -> Result<Option<String>, JobspecError> {
        let at = format!("field \"{path}.Config.{key}\"");
        match extra.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => namespace_mode(&at, key, s).map(|()| Some(s.clone())),
            Some(other) => Err(invalid(format!(
                "{at} must be \"private\" or \"host\", got {other}"
            ))),
        }
    };
    Ok((read(KEYS[0])?, read(KEYS[1])?))
}

#[cfg(test)]
mod tests {
    use crate::jobspec::{hcl, json, JobspecError};

    fn spec(config: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      \
             config {{\n        command = \"/bin/true\"\n{config}\n      }}\n    }}\n  }}\n}}\n"
        )
    }

    #[test]
    fn private_namespaces_are_kept_from_hcl_and_json_alike() {
        let parsed = hcl::parse_job(&spec(
            "        pid_mode = \"private\"\n        ipc_mode = \"private\"",
        ))
        .unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let config = &parsed.job.task_groups[0].tasks[0].config;
        assert_eq!(config.pid_mode.as_deref(), Some("private"));
        assert_eq!(config.ipc_mode.as_deref(), Some("private"));
        let v = serde_json::to_value(&parsed.job).unwrap();
        assert_eq!(
            v["TaskGroups"][0]["Tasks"][0]["Config"]["pid_mode"],
            "private"
        );
        let back = json::parse_job(&serde_json::to_vec(&parsed.job).unwrap()).unwrap();
        assert_eq!(back.job, parsed.job);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
        // A job that sets neither keeps its JSON: nothing is written.
        let bare = hcl::parse_job(&spec("")).unwrap().job;
        let v = serde_json::to_value(&bare).unwrap();
        assert!(v["TaskGroups"][0]["Tasks"][0]["Config"]
            .get("pid_mode")
            .is_none());
    }

    #[test]
    fn host_namespaces_are_refused_and_other_values_are_errors() {
        assert_eq!(
            hcl::parse_job(&spec("        ipc_mode = \"host\"")).unwrap_err(),
            JobspecError::Invalid(
                "attribute \"ipc_mode\" in config block of task \"t\" at line 7: ipc_mode \
                 \"host\" is refused: this node runs each exec task in PID and IPC namespaces of \
                 its own and does not share the host's yet"
                    .into()
            )
        );
        assert_eq!(
            hcl::parse_job(&spec("        pid_mode = \"shared\"")).unwrap_err(),
            JobspecError::Invalid(
                "attribute \"pid_mode\" in config block of task \"t\" at line 7: pid_mode must \
                 be \"private\" or \"host\", got \"shared\""
                    .into()
            )
        );
        let job = serde_json::json!({"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "exec",
            "Config": {"command": "/bin/true", "pid_mode": "host"}}]}]});
        assert_eq!(
            json::parse_job(job.to_string().as_bytes())
                .unwrap_err()
                .to_string(),
            "field \"TaskGroups[0].Tasks[0].Config.pid_mode\": pid_mode \"host\" is refused: \
             this node runs each exec task in PID and IPC namespaces of its own and does not \
             share the host's yet"
        );
    }
}
