//! Nomad 1.10's attributes inside blocks nodeward implements (spec jobspec.md, "The rule": each
//! is implemented, of no effect on one node, or refused), the same from HCL and from JSON.
//!
//! - `volume_mount { propagation_mode }` (JSON `VolumeMount.PropagationMode`): `private`, the
//!   default, is what this node does (an exec or docker task's volume binds are private:
//!   mounts made under them on either side are not seen by the other; a raw_exec task, in the
//!   host's mount namespace, reaches the host path through a link). `host-to-task` and
//!   `bidirectional` are refused: a task that counts on seeing mounts the host makes later
//!   would not see them.
//!   Kept as written. Nomad's API writes `"private"` on every mount: that is no setting.
//! - `volume_mount { selinux_label }` (`"z"`, `"Z"`): no effect, volumes are not relabelled.
//! - a group `volume { sticky }`: no effect, there is no other node for the volume to move to.
//! - `restart { render_templates }` (group and task): no effect (templates are refused), kept
//!   in the restart policy as written.
//! - `network { mbits }` (deprecated in Nomad) and `network { cni { args } }`: no effect, kept
//!   in the network as written.
//!
//! A value outside Nomad's own set is an error with Nomad's words (`volume mount has an invalid
//! propagation mode`); HCL's name the attribute and its line, JSON's the field's path.

use hcl::edit::structure::Block;
use hcl::edit::Span;
use serde_json::Value;

use super::invalid;
use super::shared::is_empty;
use super::{Job, JobspecError};
use crate::hcl::{Items, Source};

/// The no-effect names of this module and why, in the order their warnings are given.
const NO_EFFECT: &[(&str, &str)] = &[
    (
        "restart.render_templates",
        "templates are refused on this node, so there is none to render again",
    ),
    (
        "volume.sticky",
        "there is no other node the allocation's volume could move to",
    ),
    (
        "volume_mount.selinux_label",
        "volumes are not relabelled for SELinux on this node",
    ),
    (
        "network.mbits",
        "deprecated in Nomad; bandwidth is not reserved",
    ),
    (
        "network.cni",
        "CNI arguments are only given to CNI networks, and this node runs host networks only",
    ),
];

/// The propagation mode this node mounts volumes with (Nomad's default).
pub const PRIVATE: &str = "private";

/// A `volume_mount`'s `propagation_mode`; `at` names the mount (and line) in messages.
pub(crate) fn check_propagation(at: &str, mode: &str) -> Result<(), JobspecError> {
    match mode {
        "" | PRIVATE => Ok(()),
        "host-to-task" | "bidirectional" => Err(invalid(format!(
            "{at}: propagation_mode {mode:?} is refused: this node mounts volumes \
             with propagation mode \"private\" only for now"
        ))),
        _ => Err(invalid(format!(
            "{at}: volume mount has an invalid propagation mode: {mode:?}"
        ))),
    }
}

/// A `volume_mount`'s `selinux_label`: empty, `z` or `Z`, as Nomad takes it.
pub(crate) fn check_selinux(at: &str, label: &str) -> Result<(), JobspecError> {
    match label {
        "" | "z" | "Z" => Ok(()),
        _ => Err(invalid(format!(
            "{at}: volume mount has an invalid SELinux label: {label:?}"
        ))),
    }
}

/// The checks above on a converted job, for JSON (HCL's were made where they were read, with
/// their lines): the first bad mount, by its path.
pub fn check(job: &Job) -> Result<(), JobspecError> {
    for (i, g) in job.task_groups.iter().enumerate() {
        for (j, t) in g.tasks.iter().enumerate() {
            for (k, m) in t.volume_mounts.iter().enumerate() {
                let at = |field: &str| {
                    let path = format!("TaskGroups[{i}].Tasks[{j}].VolumeMounts[{k}].{field}");
                    format!("field {path:?} of task {:?}", t.name)
                };
                check_propagation(&at("PropagationMode"), &m.propagation_mode)?;
                check_selinux(&at("SELinuxLabel"), &m.selinux_label)?;
            }
        }
    }
    Ok(())
}

/// An HCL `volume_mount`'s `propagation_mode` and `selinux_label`, checked with their lines;
/// `what` names the block.
pub(crate) fn read_mount_hcl(
    src: &Source,
    what: &str,
    items: &Items,
) -> Result<(Option<String>, Option<String>), JobspecError> {
    let at = |key: &str| {
        let line = items.attr(key).map_or(0, |a| src.line(a.span()));
        format!("attribute {key:?} in {what} at line {line}")
    };
    let mode = src.opt_string(items, "propagation_mode")?;
    if let Some(mode) = &mode {
        check_propagation(&at("propagation_mode"), mode)?;
    }
    let label = src.opt_string(items, "selinux_label")?;
    if let Some(label) = &label {
        check_selinux(&at("selinux_label"), label)?;
    }
    Ok((mode, label))
}

/// An HCL network's `mbits` and `cni { args }` block, as JSON's `MBits` and `CNI`; `what`
/// names the network block.
pub(crate) fn read_network_hcl(
    src: &Source,
    what: &str,
    items: &Items,
) -> Result<(Option<u32>, Option<Value>), JobspecError> {
    let mbits = src.opt_u32(items, "mbits")?;
    let cni = src
        .single(items, "cni")?
        .map(|b| cni_value(src, what, b))
        .transpose()?;
    Ok((mbits, cni))
}

fn cni_value(src: &Source, what: &str, block: &Block) -> Result<Value, JobspecError> {
    src.no_labels(what, block)?;
    let mut body = src.body_value(&format!("cni block of {what}"), &block.body, &["args"])?;
    let args = body.remove("args").unwrap_or(Value::Null);
    Ok(Value::Object(
        [("Args".to_string(), args)].into_iter().collect(),
    ))
}

/// `{"Args": null}` or `{"Args": {}}`, as Go writes a CNI config without arguments.
pub(crate) fn cni_unset(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.len() == 1 && o.get("Args").is_some_and(is_empty))
}

/// Adds the warning of each no-effect name of this module the job sets, once each, in
/// [`NO_EFFECT`]'s order, read from the job.
pub fn warn(job: &Job, warnings: &mut Vec<String>) {
    let groups = || job.task_groups.iter();
    let sticky = groups().any(|g| g.volumes.values().any(|v| v.sticky));
    let render = groups().any(|g| {
        g.restart_policy.render_templates
            || g.tasks.iter().any(|t| t.restart_policy.render_templates)
    });
    let networks = || groups().flat_map(|g| &g.networks);
    let mbits = networks().any(|n| n.mbits != 0);
    let cni = networks().any(|n| n.cni.is_some());
    let selinux = groups()
        .flat_map(|g| &g.tasks)
        .any(|t| t.volume_mounts.iter().any(|m| !m.selinux_label.is_empty()));
    for (name, reason) in NO_EFFECT {
        let set = match *name {
            "restart.render_templates" => render,
            "volume.sticky" => sticky,
            "volume_mount.selinux_label" => selinux,
            "network.mbits" => mbits,
            "network.cni" => cni,
            _ => false,
        };
        let line = super::shared::warning(name, reason);
        if set && !warnings.contains(&line) {
            warnings.push(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::jobspec::{hcl, json, JobspecError, Parsed};
    use serde_json::{json, Value};

    /// A jobspec with a host volume "data", `group` in the group, `task` in its task "web".
    fn spec(group: &str, task: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    volume \"data\" {{\n      type   = \"host\"\n      \
             source = \"data\"\n{group}\n    }}\n    task \"web\" {{\n      driver = \"raw_exec\"\n      \
             config {{ command = \"true\" }}\n{task}\n    }}\n  }}\n}}\n"
        )
    }

    /// [`spec`] with a `volume_mount` of "data" at `d` in the task, `attr` written in it.
    fn mount_spec(attr: &str) -> String {
        spec(
            "",
            &format!(
                "      volume_mount {{\n        volume = \"data\"\n        destination = \"d\"\n        \
                 {attr}\n      }}"
            ),
        )
    }

    fn hcl_ok(src: &str) -> Parsed {
        hcl::parse_job(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
    }

    /// The job's own JSON read back: the same job.
    fn round_trip(parsed: &Parsed) -> Parsed {
        let bytes = serde_json::to_vec(&parsed.job).unwrap();
        let again = json::parse_job(&bytes).unwrap();
        assert_eq!(again.job, parsed.job);
        again
    }

    /// The minimal JSON job with `patch` applied to its group and task.
    fn from_json(group: Value, task: Value) -> Result<Parsed, JobspecError> {
        let mut job = json!({"ID": "j", "TaskGroups": [{"Name": "g",
            "Volumes": {"data": {"Type": "host", "Source": "data"}},
            "Tasks": [{"Name": "web", "Driver": "raw_exec", "Config": {"command": "true"}}]}]});
        for (k, v) in group.as_object().unwrap() {
            job["TaskGroups"][0][k] = v.clone();
        }
        for (k, v) in task.as_object().unwrap() {
            job["TaskGroups"][0]["Tasks"][0][k] = v.clone();
        }
        json::parse_job(job.to_string().as_bytes())
    }

    fn warning(name: &str) -> String {
        let reason = super::NO_EFFECT.iter().find(|(n, _)| *n == name).unwrap().1;
        crate::jobspec::schema::warning(name, reason)
    }

    #[test]
    fn render_templates_is_warned_from_hcl_and_json() {
        let src = |group: &str, task: &str| {
            format!(
                "job \"j\" {{\n  group \"g\" {{\n    restart {{ {group} }}\n    task \"web\" {{\n      \
                 driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n      restart {{ {task} }}\n    \
                 }}\n  }}\n}}\n"
            )
        };
        // At both levels, warned once.
        let parsed = hcl_ok(&src("render_templates = true", "render_templates = true"));
        assert_eq!(parsed.warnings, [warning("restart.render_templates")]);
        let task_only = hcl_ok(&src("", "render_templates = true"));
        assert_eq!(task_only.warnings, parsed.warnings);
        // Kept as written, the task's own inherited from its group's, and read back the same,
        // with the same warning; nothing else of the job changes.
        let group_only = hcl_ok(&src("render_templates = true", ""));
        let task = &group_only.job.task_groups[0].tasks[0];
        assert!(task.restart_policy.render_templates);
        assert_eq!(group_only.job, parsed.job);
        assert_ne!(task_only.job, parsed.job);
        assert!(!task_only.job.task_groups[0].restart_policy.render_templates);
        let mut without = parsed.job.clone();
        without.task_groups[0].restart_policy.render_templates = false;
        without.task_groups[0].tasks[0]
            .restart_policy
            .render_templates = false;
        assert_eq!(without, hcl_ok(&src("", "")).job);
        assert_eq!(round_trip(&parsed).warnings, parsed.warnings);
        let restart = json!({"Attempts": 2, "RenderTemplates": true});
        let from = from_json(json!({}), json!({"RestartPolicy": restart})).unwrap();
        assert_eq!(from.warnings, [warning("restart.render_templates")]);
        let task = &from.job.task_groups[0].tasks[0];
        assert!(task.restart_policy.render_templates);
        assert_eq!(
            serde_json::to_value(&from.job).unwrap()["TaskGroups"][0]["Tasks"][0]["RestartPolicy"]
                ["RenderTemplates"],
            true
        );
        let from = from_json(
            json!({"RestartPolicy": {"RenderTemplates": false}}),
            json!({}),
        );
        assert!(from.unwrap().warnings.is_empty());
        let bad = hcl::parse_job(&src("", "render_templates = \"maybe\""));
        assert_eq!(
            bad.unwrap_err().to_string(),
            "attribute \"render_templates\" in restart block of task \"web\" at line 7 must be true or false"
        );
    }

    #[test]
    fn a_sticky_volume_is_kept_and_warned() {
        let parsed = hcl_ok(&spec("      sticky = true", ""));
        assert!(parsed.job.task_groups[0].volumes["data"].sticky);
        assert_eq!(parsed.warnings, [warning("volume.sticky")]);
        let again = round_trip(&parsed);
        assert_eq!(again.warnings, parsed.warnings);
        let v = serde_json::to_value(&parsed.job).unwrap();
        assert_eq!(v["TaskGroups"][0]["Volumes"]["data"]["Sticky"], true);
        // Go's false is no setting, and a job without it keeps its JSON.
        let group =
            json!({"Volumes": {"data": {"Type": "host", "Source": "data", "Sticky": false}}});
        let unset = from_json(group, json!({})).unwrap();
        assert!(unset.warnings.is_empty());
        let v = serde_json::to_value(&unset.job).unwrap();
        assert_eq!(v["TaskGroups"][0]["Volumes"]["data"].get("Sticky"), None);
    }

    #[test]
    fn propagation_private_is_implemented_and_the_others_refused() {
        let mount = |mode: &str| mount_spec(&format!("propagation_mode = \"{mode}\""));
        let parsed = hcl_ok(&mount("private"));
        assert_eq!(
            parsed.job.task_groups[0].tasks[0].volume_mounts[0].propagation_mode,
            "private"
        );
        assert!(parsed.warnings.is_empty());
        round_trip(&parsed);
        for mode in ["host-to-task", "bidirectional"] {
            assert_eq!(
                hcl::parse_job(&mount(mode)).unwrap_err().to_string(),
                format!(
                    "attribute \"propagation_mode\" in volume_mount block of task \"web\" at line 14: \
                     propagation_mode {mode:?} is refused: this node mounts volumes with \
                     propagation mode \"private\" only for now"
                )
            );
        }
        assert_eq!(
            hcl::parse_job(&mount("shared")).unwrap_err().to_string(),
            "attribute \"propagation_mode\" in volume_mount block of task \"web\" at line 14: \
             volume mount has an invalid propagation mode: \"shared\""
        );
        // Nomad's API writes "private" on every mount: no warning, no refusal.
        let nomads = json!({"Volume": "data", "Destination": "d", "ReadOnly": false,
            "PropagationMode": "private", "SELinuxLabel": ""});
        let from = from_json(json!({}), json!({"VolumeMounts": [nomads]})).unwrap();
        assert!(from.warnings.is_empty(), "{:?}", from.warnings);
        assert_eq!(from.job, parsed.job);
        let mounts =
            json!([{"Volume": "data", "Destination": "d", "PropagationMode": "bidirectional"}]);
        assert_eq!(
            from_json(json!({}), json!({"VolumeMounts": mounts}))
                .unwrap_err()
                .to_string(),
            "field \"TaskGroups[0].Tasks[0].VolumeMounts[0].PropagationMode\" of task \"web\": \
             propagation_mode \"bidirectional\" is refused: this node mounts volumes with \
             propagation mode \"private\" only for now"
        );
    }

    #[test]
    fn an_selinux_label_is_kept_and_warned() {
        let mount = |label: &str| mount_spec(&format!("selinux_label = \"{label}\""));
        let parsed = hcl_ok(&mount("Z"));
        assert_eq!(
            parsed.job.task_groups[0].tasks[0].volume_mounts[0].selinux_label,
            "Z"
        );
        assert_eq!(parsed.warnings, [warning("volume_mount.selinux_label")]);
        assert_eq!(round_trip(&parsed).warnings, parsed.warnings);
        let v = serde_json::to_value(&parsed.job).unwrap();
        assert_eq!(
            v["TaskGroups"][0]["Tasks"][0]["VolumeMounts"][0]["SELinuxLabel"],
            "Z"
        );
        assert_eq!(
            hcl::parse_job(&mount("x")).unwrap_err().to_string(),
            "attribute \"selinux_label\" in volume_mount block of task \"web\" at line 14: \
             volume mount has an invalid SELinux label: \"x\""
        );
        let mounts = json!([{"Volume": "data", "Destination": "d", "SELinuxLabel": "zz"}]);
        assert_eq!(
            from_json(json!({}), json!({"VolumeMounts": mounts}))
                .unwrap_err()
                .to_string(),
            "field \"TaskGroups[0].Tasks[0].VolumeMounts[0].SELinuxLabel\" of task \"web\": \
             volume mount has an invalid SELinux label: \"zz\""
        );
    }

    #[test]
    fn mbits_and_cni_args_are_warned_from_hcl_and_json() {
        let parsed = hcl_ok(&spec(
            "    }\n    network {\n      mbits = 10\n      cni { args = { a = \"b\" } }\n      port \"http\" {}",
            "",
        ));
        assert_eq!(
            parsed.warnings,
            [warning("network.mbits"), warning("network.cni")]
        );
        // Kept as written, in Nomad's shape, and read back the same, with the same warnings;
        // nothing else of the job changes.
        let plain = hcl_ok(&spec("    }\n    network {\n      port \"http\" {}", ""));
        let mut without = parsed.job.clone();
        let network = &mut without.task_groups[0].networks[0];
        assert_eq!(network.mbits, 10);
        assert_eq!(network.cni, Some(json!({"Args": {"a": "b"}})));
        (network.mbits, network.cni) = (0, None);
        assert_eq!(without, plain.job);
        let v = serde_json::to_value(&parsed.job).unwrap();
        assert_eq!(v["TaskGroups"][0]["Networks"][0]["MBits"], 10);
        assert_eq!(round_trip(&parsed).warnings, parsed.warnings);
        let v = serde_json::to_value(&plain.job).unwrap();
        assert!(
            v["TaskGroups"][0]["Networks"][0].get("MBits").is_none(),
            "{v}"
        );
        let net = json!([{"Mode": "host", "MBits": 10, "CNI": {"Args": {"a": "b"}},
            "DynamicPorts": [{"Label": "http"}]}]);
        let from = from_json(json!({"Networks": net}), json!({})).unwrap();
        assert_eq!(from.warnings, parsed.warnings);
        assert_eq!(from.job, parsed.job);
        // Nomad's API writes `"MBits": 0` and no CNI arguments: nothing to warn.
        let net = json!([{"Mode": "host", "MBits": 0, "CNI": {"Args": null}}]);
        assert!(from_json(json!({"Networks": net}), json!({}))
            .unwrap()
            .warnings
            .is_empty());
        let bad = hcl::parse_job(&spec("    }\n    network {\n      mbits = \"lots\"", ""));
        assert_eq!(
            bad.unwrap_err().to_string(),
            "attribute \"mbits\" in network block of group \"g\" at line 8 must be a whole number from 0 to 4294967295"
        );
    }
}
