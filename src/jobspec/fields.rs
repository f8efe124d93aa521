//! The job fields that only a cluster acts on: `region`, `namespace`, `priority` and
//! `all_at_once` (spec jobspec.md, "Job fields"). They are read from HCL attributes and Nomad's
//! JSON (`Region`, `Namespace`, `Priority`, `AllAtOnce`), given Nomad's defaults (`global`,
//! `default`, 50, false), checked as Nomad checks them (priority 1..=100), and kept in the job so
//! that it reads back as it was written (a field at its default is not written: see
//! [`JobFields`]). Nothing on one node depends on them.

use hcl::edit::expr::Expression;
use serde::{Deserialize, Deserializer};

use super::invalid;
use super::{JobFields, JobspecError};
use crate::hcl::{Items, Source};

/// The priorities Nomad accepts.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<u32> = 1..=100;

/// The fields as the input gave them. Go writes unset as `""` and `0`, which read as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RawJobFields {
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub region: Option<String>,
    #[serde(default, deserialize_with = "empty_is_unset")]
    pub namespace: Option<String>,
    #[serde(default, deserialize_with = "zero_is_unset")]
    pub priority: Option<i64>,
    pub all_at_once: Option<bool>,
}

fn empty_is_unset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

fn zero_is_unset<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Option::<i64>::deserialize(d)?.filter(|p| *p != 0))
}

/// The fields of a `job` block's attributes.
pub(crate) fn read_hcl(src: &Source, items: &Items) -> Result<RawJobFields, JobspecError> {
    let priority = match items.attr("priority") {
        None => None,
        Some(attr) => Some(
            match &attr.value {
                Expression::Number(n) => n.value().as_i64(),
                _ => None,
            }
            .ok_or_else(|| src.wrong_type(&items.what, attr, "a whole number"))?,
        ),
    };
    Ok(RawJobFields {
        region: src.opt_string(items, "region")?,
        namespace: src.opt_string(items, "namespace")?,
        priority,
        all_at_once: src.opt_bool(items, "all_at_once")?,
    })
}

/// Nomad's defaults for what is unset; a priority outside 1..=100 is refused with Nomad's text.
pub(crate) fn convert(raw: RawJobFields) -> Result<JobFields, JobspecError> {
    let defaults = JobFields::default();
    let priority = match raw.priority {
        None => defaults.priority,
        Some(p) => u32::try_from(p)
            .ok()
            .filter(|p| PRIORITY_RANGE.contains(p))
            .ok_or_else(|| priority_error(p))?,
    };
    Ok(JobFields {
        region: raw.region.unwrap_or(defaults.region),
        namespace: raw.namespace.unwrap_or(defaults.namespace),
        priority,
        all_at_once: raw.all_at_once.unwrap_or(false),
    })
}

pub(crate) fn priority_error(p: impl std::fmt::Display) -> JobspecError {
    invalid(format!(
        "Job priority must be between [{}, {}], got {p}",
        PRIORITY_RANGE.start(),
        PRIORITY_RANGE.end()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::{hcl, json, JobType};

    fn job(attrs: &str) -> String {
        format!(
            "job \"j\" {{\n{attrs}\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n    }}\n  }}\n}}\n"
        )
    }

    #[test]
    fn fields_are_kept_and_read_back_in_nomads_shape() {
        let src =
            job("  region = \"eu\"\n  namespace = \"web\"\n  priority = 80\n  all_at_once = true");
        let parsed = hcl::parse_job(&src).unwrap().job;
        let v = serde_json::to_value(&parsed).unwrap();
        assert_eq!(v["Region"], "eu");
        assert_eq!(v["Namespace"], "web");
        assert_eq!(v["Priority"], 80);
        assert_eq!(v["AllAtOnce"], true);
        let back = json::parse_job(&serde_json::to_vec(&parsed).unwrap()).unwrap();
        assert_eq!(back.job, parsed);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
    }

    #[test]
    fn defaults_are_nomads() {
        let parsed = hcl::parse_job(&job("")).unwrap().job;
        assert_eq!(parsed.fields, JobFields::default());
        assert_eq!(
            (
                parsed.fields.region.as_str(),
                parsed.fields.namespace.as_str()
            ),
            ("global", "default")
        );
        assert_eq!(parsed.fields.priority, 50);
        // At their defaults they are not written: a job that sets none keeps its JSON.
        let v = serde_json::to_value(&parsed).unwrap();
        assert!(
            v.get("Region").is_none() && v.get("Priority").is_none(),
            "{v}"
        );
        // Go's zero values are "unset".
        let go = serde_json::json!({"ID": "j", "Region": "", "Priority": 0, "TaskGroups": [
            {"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]}]});
        let parsed = json::parse_job(go.to_string().as_bytes()).unwrap().job;
        assert_eq!(parsed.fields, JobFields::default());
    }

    #[test]
    fn priority_is_checked_as_nomad_does() {
        for bad in ["101", "-1"] {
            let err = hcl::parse_job(&job(&format!("  priority = {bad}"))).unwrap_err();
            assert_eq!(
                err,
                JobspecError::Invalid(format!("Job priority must be between [1, 100], got {bad}"))
            );
        }
        assert_eq!(
            hcl::parse_job(&job("  priority = 1"))
                .unwrap()
                .job
                .fields
                .priority,
            1
        );
    }

    #[test]
    fn system_and_sysbatch_run_each_group_once() {
        let sys = hcl::parse_job(&job("  type = \"sysbatch\"")).unwrap().job;
        assert_eq!(sys.job_type, JobType::SysBatch);
        assert!(sys.job_type.runs_to_completion());
        assert_eq!(serde_json::to_value(&sys).unwrap()["Type"], "sysbatch");
        let two =
            job("  type = \"system\"").replace("group \"g\" {", "group \"g\" {\n    count = 2");
        assert_eq!(
            hcl::parse_job(&two).unwrap_err(),
            JobspecError::Invalid(
                "Job task group g has count 2. Count cannot exceed 1 with system scheduler".into()
            )
        );
    }

    #[test]
    fn id_and_name_each_default_to_the_label_as_in_nomad() {
        let parsed = |attrs: &str| {
            let job = hcl::parse_job(&job(attrs)).unwrap().job;
            (job.id, job.name)
        };
        assert_eq!(parsed(""), ("j".to_string(), "j".to_string()));
        assert_eq!(
            parsed("  name = \"web-front\""),
            ("j".to_string(), "web-front".to_string())
        );
        assert_eq!(
            parsed("  id = \"web\""),
            ("web".to_string(), "j".to_string())
        );
        let both = hcl::parse_job(&job("  id = \"web\"\n  name = \"Web\""))
            .unwrap()
            .job;
        let back = json::parse_job(&serde_json::to_vec(&both).unwrap()).unwrap();
        assert_eq!(back.job, both);
        assert!(back.warnings.is_empty(), "{:?}", back.warnings);
        let err = hcl::parse_job(&job("  id = 3")).unwrap_err().to_string();
        assert!(err.contains("\"id\""), "{err}");
    }
}
