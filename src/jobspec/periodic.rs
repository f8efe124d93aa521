//! A job's `periodic` and `parameterized` blocks and a task's `dispatch_payload` (jobspec.md;
//! Nomad's `PeriodicConfig`, `ParameterizedJobConfig`, `DispatchPayloadConfig`): a job that is a
//! template for child jobs, launched on a schedule ([`PeriodicConfig`], run by
//! `alloc::periodic`) or dispatched through the API ([`ParameterizedConfig`]).
//!
//! HCL (`read_periodic`, `read_parameterized`, `read_dispatch_payload`) and JSON
//! (`"Periodic"`, `"ParameterizedJob"`, `"DispatchPayload"`) both fill the raw types here, and
//! one conversion each checks them with Nomad's rules and messages.

use hcl::edit::structure::Block;
use serde::{Deserialize, Serialize};

use super::cron::Cron;
use super::invalid;
use super::of_job;
use super::shared::Extra;
use super::table::At;
use super::zone::Zone;
use super::JobspecError;
use crate::hcl::Source;

/// The largest payload a dispatch may carry, as Nomad's `DispatchPayloadSizeLimit`.
pub const DISPATCH_PAYLOAD_SIZE_LIMIT: usize = 16 * 1024;

/// `periodic { crons cron prohibit_overlap time_zone enabled }`, in Nomad's API shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PeriodicConfig {
    pub enabled: bool,
    /// `cron`: one expression (Nomad's older form); empty when `crons` is used.
    pub spec: String,
    /// `crons`: every expression; a launch happens at the earliest next instant of any.
    pub specs: Vec<String>,
    /// Always `cron`.
    pub spec_type: String,
    /// No launch while a child of the job still runs.
    pub prohibit_overlap: bool,
    /// `UTC` unless the job names another zone of the system's database ([`Zone`]).
    pub time_zone: String,
}

impl PeriodicConfig {
    /// The parsed expressions (checked when the job was parsed).
    pub fn crons(&self) -> Vec<Cron> {
        std::iter::once(&self.spec)
            .filter(|s| !s.is_empty())
            .chain(&self.specs)
            .filter_map(|s| Cron::parse(s).ok())
            .collect()
    }

    /// The first launch strictly after `t` (unix seconds), by any of the expressions.
    /// The zone is read again from the system's database each time (a launch computes one), so
    /// a zone whose file went away since the job was parsed launches in UTC, with a warning.
    pub fn next_launch(&self, t: i64) -> Option<i64> {
        let from = chrono::DateTime::from_timestamp(t, 0)?;
        let zone = Zone::load(&self.time_zone).unwrap_or_else(|e| {
            log::warn!(
                "periodic schedule in time zone {:?}: {e}; using UTC",
                self.time_zone
            );
            Zone::UTC
        });
        self.crons()
            .iter()
            .filter_map(|c| c.next_after_in(from, &zone))
            .map(|d| d.timestamp())
            .min()
    }
}

/// `payload = "optional" | "required" | "forbidden"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PayloadRule {
    #[default]
    Optional,
    Required,
    Forbidden,
}

/// `parameterized { payload meta_required meta_optional }`, in Nomad's API shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ParameterizedConfig {
    pub payload: PayloadRule,
    pub meta_required: Vec<String>,
    pub meta_optional: Vec<String>,
}

/// A task's `dispatch_payload { file }`: where in `local/` a dispatched payload is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DispatchPayload {
    pub file: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Periodic object")]
pub(crate) struct RawPeriodic {
    pub enabled: Option<bool>,
    pub spec: Option<String>,
    pub specs: Option<Vec<String>>,
    pub spec_type: Option<String>,
    pub prohibit_overlap: Option<bool>,
    pub time_zone: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a ParameterizedJob object")]
pub(crate) struct RawParameterized {
    pub payload: Option<String>,
    pub meta_required: Option<Vec<String>>,
    pub meta_optional: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a DispatchPayload object")]
pub(crate) struct RawDispatchPayload {
    pub file: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Nomad's `PeriodicConfig.Validate`, with its messages.
pub(crate) fn periodic(job: &str, raw: RawPeriodic) -> Result<PeriodicConfig, JobspecError> {
    let spec = raw.spec.unwrap_or_default();
    let specs = raw.specs.unwrap_or_default();
    if spec.is_empty() && specs.is_empty() {
        return Err(of_job(job, "periodic: Must specify a spec"));
    }
    if !spec.is_empty() && !specs.is_empty() {
        return Err(of_job(job, "periodic: Only cron or crons may be used"));
    }
    let spec_type = raw
        .spec_type
        .filter(|t| !t.is_empty())
        .unwrap_or("cron".into());
    if spec_type != "cron" {
        return Err(of_job(
            job,
            format!("periodic: Unknown periodic specification type {spec_type:?}"),
        ));
    }
    for s in std::iter::once(&spec)
        .filter(|s| !s.is_empty())
        .chain(&specs)
    {
        Cron::parse(s)
            .map_err(|e| of_job(job, format!("periodic: Invalid cron spec {s:?}: {e}")))?;
    }
    let time_zone = raw
        .time_zone
        .filter(|z| !z.is_empty())
        .unwrap_or("UTC".into());
    if let Err(e) = Zone::load(&time_zone) {
        return Err(of_job(
            job,
            format!("periodic: Invalid time zone {time_zone:?}: {e}"),
        ));
    }
    Ok(PeriodicConfig {
        enabled: raw.enabled.unwrap_or(true),
        spec,
        specs,
        spec_type,
        prohibit_overlap: raw.prohibit_overlap.unwrap_or(false),
        time_zone,
    })
}

/// Nomad's `ParameterizedJobConfig.Validate`, with its messages.
pub(crate) fn parameterized(
    job: &str,
    raw: RawParameterized,
) -> Result<ParameterizedConfig, JobspecError> {
    let payload = match raw.payload.as_deref().unwrap_or("") {
        "" | "optional" => PayloadRule::Optional,
        "required" => PayloadRule::Required,
        "forbidden" => PayloadRule::Forbidden,
        other => {
            return Err(of_job(
                job,
                format!("parameterized: Unknown payload requirement: {other:?}"),
            ))
        }
    };
    let meta_required = raw.meta_required.unwrap_or_default();
    let meta_optional = raw.meta_optional.unwrap_or_default();
    let both: Vec<&str> = meta_required
        .iter()
        .filter(|k| meta_optional.contains(k))
        .map(String::as_str)
        .collect();
    if !both.is_empty() {
        return Err(of_job(
            job,
            format!(
                "parameterized: Required and optional meta keys should be disjoint. Following keys exist in both: [{}]",
                both.join(" ")
            ),
        ));
    }
    Ok(ParameterizedConfig {
        payload,
        meta_required,
        meta_optional,
    })
}

/// A task's `dispatch_payload`: the file must stay inside `local/`.
pub(crate) fn dispatch_payload(
    task: &str,
    raw: RawDispatchPayload,
) -> Result<DispatchPayload, JobspecError> {
    let file = raw.file.unwrap_or_default();
    let path = std::path::Path::new(&file);
    let escapes = path.components().any(|c| {
        !matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    });
    if file.is_empty() || escapes {
        return Err(invalid(format!(
            "task {task:?}: dispatch_payload: file {file:?} must be a relative path inside the task's local directory"
        )));
    }
    Ok(DispatchPayload { file })
}

/// Nomad's `validateDispatchRequest`: the payload as the block asks, at most
/// [`DISPATCH_PAYLOAD_SIZE_LIMIT`] bytes, and only the block's meta keys, every required one.
/// Key lists are sorted, in Go's `%v` form (`[a b]`).
pub fn check_dispatch(
    config: &ParameterizedConfig,
    payload: &[u8],
    meta: &std::collections::BTreeMap<String, String>,
) -> Result<(), String> {
    match (config.payload, payload.is_empty()) {
        (PayloadRule::Required, true) => {
            return Err("Payload is not provided but required by parameterized job".into())
        }
        (PayloadRule::Forbidden, false) => {
            return Err("Payload provided but forbidden by parameterized job".into())
        }
        _ => {}
    }
    if payload.len() > DISPATCH_PAYLOAD_SIZE_LIMIT {
        return Err(format!(
            "Payload exceeds maximum size; {} > {DISPATCH_PAYLOAD_SIZE_LIMIT}",
            payload.len()
        ));
    }
    let unpermitted: Vec<&str> = meta
        .keys()
        .filter(|k| !config.meta_required.contains(k) && !config.meta_optional.contains(k))
        .map(String::as_str)
        .collect();
    if !unpermitted.is_empty() {
        return Err(format!(
            "Dispatch request included unpermitted metadata keys: [{}]",
            unpermitted.join(" ")
        ));
    }
    let mut missing: Vec<&str> = config
        .meta_required
        .iter()
        .filter(|k| !meta.contains_key(*k))
        .map(String::as_str)
        .collect();
    missing.sort_unstable();
    if !missing.is_empty() {
        return Err(format!(
            "Dispatch did not provide required meta keys: [{}]",
            missing.join(" ")
        ));
    }
    Ok(())
}

/// The `periodic` block of a job in HCL.
pub(crate) fn read_periodic(
    src: &Source,
    job: &str,
    block: &Block,
) -> Result<RawPeriodic, JobspecError> {
    src.no_labels(job, block)?;
    let what = format!("periodic block of {job}");
    let items = super::table::items(src, &what, block, At::Periodic)?;
    Ok(RawPeriodic {
        enabled: src.opt_bool(&items, "enabled")?,
        spec: src.opt_string(&items, "cron")?,
        specs: items
            .attr("crons")
            .map(|a| src.strings(&what, a))
            .transpose()?,
        prohibit_overlap: src.opt_bool(&items, "prohibit_overlap")?,
        time_zone: src.opt_string(&items, "time_zone")?,
        ..RawPeriodic::default()
    })
}

/// The `parameterized` block of a job in HCL.
pub(crate) fn read_parameterized(
    src: &Source,
    job: &str,
    block: &Block,
) -> Result<RawParameterized, JobspecError> {
    src.no_labels(job, block)?;
    let what = format!("parameterized block of {job}");
    let items = super::table::items(src, &what, block, At::Parameterized)?;
    Ok(RawParameterized {
        payload: src.opt_string(&items, "payload")?,
        meta_required: items
            .attr("meta_required")
            .map(|a| src.strings(&what, a))
            .transpose()?,
        meta_optional: items
            .attr("meta_optional")
            .map(|a| src.strings(&what, a))
            .transpose()?,
        ..RawParameterized::default()
    })
}

/// The `dispatch_payload` block of a task in HCL.
pub(crate) fn read_dispatch_payload(
    src: &Source,
    task: &str,
    block: &Block,
) -> Result<RawDispatchPayload, JobspecError> {
    src.no_labels(task, block)?;
    let what = format!("dispatch_payload block of {task}");
    let items = super::table::items(src, &what, block, At::DispatchPayload)?;
    Ok(RawDispatchPayload {
        file: src.opt_string(&items, "file")?,
        ..RawDispatchPayload::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::{hcl::parse_job, json};

    const PERIODIC: &str = r#"
job "report" {
  type = "batch"
  periodic {
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = true
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
    }
  }
}
"#;

    #[test]
    fn hcl_and_json_read_the_same_periodic_config() {
        let job = parse_job(PERIODIC).unwrap().job;
        let p = job.periodic.clone().unwrap();
        assert!(p.enabled && p.prohibit_overlap);
        assert_eq!(p.specs, vec!["*/1 * * * * * *"]);
        assert_eq!(
            (p.spec_type.as_str(), p.time_zone.as_str()),
            ("cron", "UTC")
        );
        assert_eq!(p.next_launch(1_000), Some(1_001));
        let again = json::parse_job(serde_json::to_string(&job).unwrap().as_bytes()).unwrap();
        assert_eq!(again.job, job);
    }

    #[test]
    fn a_named_time_zone_schedules_in_its_wall_clock() {
        if Zone::load("America/New_York").is_err() {
            println!("SKIPPED a_named_time_zone_schedules_in_its_wall_clock: no zone database");
            return;
        }
        let text = PERIODIC.replace(
            "crons            = [\"*/1 * * * * * *\"]",
            "cron = \"0 9 * * *\"\n    time_zone = \"America/New_York\"",
        );
        let p = parse_job(&text).unwrap().job.periodic.unwrap();
        assert_eq!(p.time_zone, "America/New_York");
        // 2026-01-15 00:00 UTC: 09:00 in New York (EST, -5) is 14:00 UTC; in July (EDT, -4) 13:00.
        assert_eq!(
            p.next_launch(1_768_435_200),
            Some(1_768_435_200 + 14 * 3600)
        );
        assert_eq!(
            p.next_launch(1_784_073_600),
            Some(1_784_073_600 + 13 * 3600)
        );
    }

    #[test]
    fn bad_periodic_blocks_are_refused_with_nomads_words() {
        let with = |block: &str| {
            PERIODIC.replace(
                "crons            = [\"*/1 * * * * * *\"]\n    prohibit_overlap = true",
                block,
            )
        };
        for (block, why) in [
            ("enabled = true", "periodic: Must specify a spec"),
            (
                "cron = \"* * * * *\"\n crons = [\"* * * * *\"]",
                "Only cron or crons may be used",
            ),
            ("cron = \"* * *\"", "periodic: Invalid cron spec \"* * *\""),
            (
                "cron = \"* * * * *\"\n time_zone = \"Mars/Base\"",
                "Invalid time zone \"Mars/Base\"",
            ),
        ] {
            let e = parse_job(&with(block)).unwrap_err().to_string();
            assert!(e.contains(why), "{block}: {e}");
        }
        let service = PERIODIC.replace("type = \"batch\"", "type = \"service\"");
        let e = parse_job(&service).unwrap_err().to_string();
        assert!(
            e.contains("Periodic can only be used with \"batch\" or \"sysbatch\" scheduler"),
            "{e}"
        );
        // A sysbatch job may be a template of children too, as in Nomad since 1.2.
        let sysbatch = PERIODIC.replace("type = \"batch\"", "type = \"sysbatch\"");
        assert!(parse_job(&sysbatch).is_ok());
    }

    #[test]
    fn dispatch_requests_are_checked_with_nomads_words() {
        let config = ParameterizedConfig {
            payload: PayloadRule::Required,
            meta_required: vec!["b".into(), "a".into()],
            meta_optional: vec!["opt".into()],
        };
        let meta = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let full = meta(&[("a", "1"), ("b", "2")]);
        assert_eq!(check_dispatch(&config, b"x", &full), Ok(()));
        assert_eq!(
            check_dispatch(&config, b"", &full).unwrap_err(),
            "Payload is not provided but required by parameterized job"
        );
        assert_eq!(
            check_dispatch(&config, b"x", &meta(&[])).unwrap_err(),
            "Dispatch did not provide required meta keys: [a b]"
        );
        assert_eq!(
            check_dispatch(&config, b"x", &meta(&[("a", "1"), ("b", "2"), ("z", "3")]))
                .unwrap_err(),
            "Dispatch request included unpermitted metadata keys: [z]"
        );
        let big = vec![0u8; DISPATCH_PAYLOAD_SIZE_LIMIT + 1];
        assert_eq!(
            check_dispatch(&config, &big, &full).unwrap_err(),
            "Payload exceeds maximum size; 16385 > 16384"
        );
        let forbidden = ParameterizedConfig {
            payload: PayloadRule::Forbidden,
            ..config
        };
        assert_eq!(
            check_dispatch(&forbidden, b"x", &full).unwrap_err(),
            "Payload provided but forbidden by parameterized job"
        );
    }

    #[test]
    fn parameterized_and_dispatch_payload_parse_and_check() {
        let src = r#"
job "p" {
  type = "batch"
  parameterized {
    payload       = "required"
    meta_required = ["name"]
    meta_optional = ["title"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "cat" }
      dispatch_payload { file = "in/payload.txt" }
    }
  }
}
"#;
        let job = parse_job(src).unwrap().job;
        let p = job.parameterized_job.clone().unwrap();
        assert_eq!(p.payload, PayloadRule::Required);
        assert_eq!(
            (p.meta_required, p.meta_optional),
            (vec!["name".to_string()], vec!["title".to_string()])
        );
        assert_eq!(
            job.task_groups[0].tasks[0]
                .dispatch_payload
                .as_ref()
                .unwrap()
                .file,
            "in/payload.txt"
        );
        let again = json::parse_job(serde_json::to_string(&job).unwrap().as_bytes()).unwrap();
        assert_eq!(again.job, job);

        let e = parse_job(&src.replace("\"required\"", "\"sometimes\"")).unwrap_err();
        assert!(
            e.to_string()
                .contains("Unknown payload requirement: \"sometimes\""),
            "{e}"
        );
        let e = parse_job(&src.replace("[\"title\"]", "[\"name\"]")).unwrap_err();
        assert!(
            e.to_string()
                .contains("Following keys exist in both: [name]"),
            "{e}"
        );
        let e = parse_job(&src.replace("in/payload.txt", "../x")).unwrap_err();
        assert!(
            e.to_string().contains("must be a relative path inside"),
            "{e}"
        );
    }
}
