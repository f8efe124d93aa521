//! A task's `resources { device ... numa ... secrets }` (spec jobspec.md, "The rule": every block
//! of Nomad's jobspec is accepted, and is implemented, of no effect, or refused).
//!
//! - `device "<vendor/type/name>" { count constraint affinity }`: this node fingerprints no
//!   devices (no device plugins), so a task that asks for one cannot be placed here: Nomad's
//!   placement failure `Constraint "missing devices": 1 nodes excluded by filter`, the job
//!   registered with no allocation, as for a driver this node lacks. The requests are kept in
//!   Nomad's API shape (`Resources.Devices`).
//! - `numa { affinity = "none" | "prefer" | "require" }`: cores are not placed by NUMA node here
//!   (docs/resources.md). `none` and `prefer` ask nothing placement must keep: no effect, warned.
//!   `require` asks for what this node does not do, and is refused.
//! - `secrets` (MB of a tmpfs secrets directory): the secrets directory is a directory of the
//!   task's, not a tmpfs: no effect, warned; kept as `SecretsMB`.

use hcl::edit::Span;
use serde_json::Value;

use super::invalid;
use super::JobspecError;
use crate::hcl::{Items, Source};

/// Nomad's placement-failure name for a group whose tasks ask for devices this node lacks.
pub const MISSING_DEVICES: &str = "missing devices";

/// The `device` blocks (in Nomad's API shape) and the `numa` block of a `resources` block's
/// `items`, `what` naming it.
pub(crate) fn read_hcl(
    src: &Source,
    what: &str,
    items: &Items,
) -> Result<(Option<Vec<Value>>, Option<Value>), JobspecError> {
    let devices = items
        .blocks("device")
        .into_iter()
        .map(|b| {
            if b.labels.len() != 1 {
                return Err(invalid(format!(
                    "block \"device\" in {what} at line {} needs one label: the device's name (\"nvidia/gpu\")",
                    src.line(b.span())
                )));
            }
            super::kept::block_value(src, what, b)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let numa = src
        .single(items, "numa")?
        .map(|b| super::kept::block_value(src, what, b))
        .transpose()?;
    Ok(((!devices.is_empty()).then_some(devices), numa))
}

/// `numa { affinity = "require" }` is refused: this node cannot keep it. Another affinity, or
/// none, is accepted (and warned as no effect, [`no_effect`]).
pub(crate) fn check_numa(task: &str, numa: Option<&Value>) -> Result<(), JobspecError> {
    let affinity = numa
        .and_then(|n| n.get("Affinity"))
        .and_then(Value::as_str)
        .unwrap_or("none");
    match affinity {
        "none" | "prefer" => Ok(()),
        "require" => Err(invalid(format!(
            "numa affinity \"require\" of task {task:?} is refused: this node does not place \
             cores by NUMA node yet"
        ))),
        other => Err(invalid(format!(
            "task {task:?}: numa affinity must be one of none, prefer or require, got {other:?}"
        ))),
    }
}

/// Adds the warning of each no-effect name the job's tasks set ([`no_effect`]), once each, to
/// `warnings`: both front-ends call it on the job they made.
pub fn warn(job: &super::Job, warnings: &mut Vec<String>) {
    for task in job.task_groups.iter().flat_map(|g| &g.tasks) {
        for (name, reason) in no_effect(&task.resources) {
            let line = super::shared::warning(name, reason);
            if !warnings.contains(&line) {
                warnings.push(line);
            }
        }
    }
}

/// The no-effect names a task's resources set, for its warnings: `resources.numa` and
/// `resources.secrets`.
pub fn no_effect(r: &super::Resources) -> impl Iterator<Item = (&'static str, &'static str)> {
    [
        (
            r.numa.is_some(),
            "resources.numa",
            "cores are not placed by NUMA node on this node",
        ),
        (
            r.secrets_mb != 0,
            "resources.secrets",
            "the secrets directory is not a tmpfs on this node",
        ),
    ]
    .into_iter()
    .filter_map(|(set, name, reason)| set.then_some((name, reason)))
}

#[cfg(test)]
mod tests {
    use crate::jobspec::{hcl, json, JobspecError};
    use serde_json::json;

    fn job(resources: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      \
             config {{ command = \"true\" }}\n      resources {{\n{resources}\n      }}\n    }}\n  }}\n}}\n"
        )
    }

    #[test]
    fn devices_are_read_in_nomads_shape_from_hcl_and_json() {
        let parsed = hcl::parse_job(&job(
            "        device \"nvidia/gpu\" { count = 2 }\n        device \"fpga\" {}",
        ))
        .unwrap();
        let r = &parsed.job.task_groups[0].tasks[0].resources;
        assert_eq!(
            r.devices,
            [
                json!({"Name": "nvidia/gpu", "Count": 2}),
                json!({"Name": "fpga"})
            ]
        );
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let bytes = serde_json::to_vec(&parsed.job).unwrap();
        assert_eq!(json::parse_job(&bytes).unwrap().job, parsed.job);
        let unlabeled = hcl::parse_job(&job("        device { count = 1 }")).unwrap_err();
        assert!(
            unlabeled.to_string().contains("needs one label"),
            "{unlabeled}"
        );
    }

    #[test]
    fn numa_require_is_refused_and_the_rest_warned() {
        let err = hcl::parse_job(&job(
            "        cores = 1\n        numa { affinity = \"require\" }",
        ))
        .unwrap_err();
        assert_eq!(
            err,
            JobspecError::Invalid(
                "numa affinity \"require\" of task \"t\" is refused: this node does not place \
                 cores by NUMA node yet"
                    .into()
            )
        );
        let prefer = hcl::parse_job(&job(
            "        cores = 1\n        numa { affinity = \"prefer\" }\n        secrets = 5",
        ))
        .unwrap();
        assert_eq!(
            prefer.warnings,
            [
                "\"resources.numa\" has no effect on one node: cores are not placed by NUMA node on this node",
                "\"resources.secrets\" has no effect on one node: the secrets directory is not a tmpfs on this node",
            ]
        );
        let r = &prefer.job.task_groups[0].tasks[0].resources;
        assert_eq!(
            (r.numa.clone(), r.secrets_mb),
            (Some(json!({"Affinity": "prefer"})), 5)
        );
        // JSON the same, and Go's unset values are nothing.
        let bytes = serde_json::to_vec(&prefer.job).unwrap();
        let again = json::parse_job(&bytes).unwrap();
        assert_eq!((again.job, again.warnings), (prefer.job, prefer.warnings));
        let unset = json!({"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t",
            "Driver": "raw_exec", "Config": {"command": "true"},
            "Resources": {"CPU": 100, "Devices": null, "NUMA": null, "SecretsMB": 0}}]}]});
        let parsed = json::parse_job(unset.to_string().as_bytes()).unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let typo = hcl::parse_job(&job("        numa { affinity = \"always\" }")).unwrap_err();
        assert!(typo
            .to_string()
            .contains("must be one of none, prefer or require"));
    }
}
