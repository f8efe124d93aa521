//! A group's `ephemeral_disk` (spec jobspec.md "No effect on one node"): its `size` in MB is what
//! each allocation of the group asks of the node's disk at placement (`alloc::capacity`), and
//! what `alloc status -stats` prints as the task's disk. `sticky` and `migrate` need another node
//! to move the allocation directory to: they have no effect, are warned once when set (`schema`
//! for HCL, [`RawEphemeralDisk`]'s reader for JSON) and are kept in the job as written.
//!
//! From HCL `ephemeral_disk { size = 300  sticky = false  migrate = false }`; from JSON Nomad's
//! `EphemeralDisk {SizeMB, Sticky, Migrate}`. Absent, the group asks Nomad's default of 300 MB;
//! a size under 10 MB is refused with Nomad's `EphemeralDisk.Validate` text.

use serde::{Deserialize, Serialize};

use super::invalid;
use super::shared::Extra;
use super::table::At;
use super::JobspecError;
use crate::hcl::{Items, Source};

/// Nomad's `DefaultEphemeralDisk().SizeMB`.
pub const DEFAULT_SIZE_MB: u64 = 300;
/// Nomad's smallest `SizeMB` (`EphemeralDisk.Validate`).
pub const MIN_SIZE_MB: i64 = 10;

/// The group's ephemeral disk, as its job's JSON writes it (`{"SizeMB": 300}`). A job with the
/// default does not write it, so a job without the block keeps its JSON byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EphemeralDisk {
    #[serde(rename = "SizeMB")]
    pub size_mb: u64,
    /// No effect on one node; kept as written, not written when false.
    #[serde(rename = "Sticky", default, skip_serializing_if = "std::ops::Not::not")]
    pub sticky: bool,
    /// No effect on one node; kept as written, not written when false.
    #[serde(
        rename = "Migrate",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub migrate: bool,
}

impl Default for EphemeralDisk {
    fn default() -> Self {
        EphemeralDisk {
            size_mb: DEFAULT_SIZE_MB,
            sticky: false,
            migrate: false,
        }
    }
}

impl EphemeralDisk {
    pub fn is_default(&self) -> bool {
        *self == EphemeralDisk::default()
    }
}

/// The fields of an `ephemeral_disk` block (HCL) or `EphemeralDisk` object (JSON).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "an EphemeralDisk object")]
pub(crate) struct RawEphemeralDisk {
    #[serde(rename = "SizeMB")]
    pub size_mb: Option<i64>,
    pub sticky: Option<bool>,
    pub migrate: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The `ephemeral_disk` block of a group's `items` (at most one), or `None`. Its `sticky` and
/// `migrate` were warned before (`schema::prepare_hcl`).
pub(crate) fn read_hcl(
    src: &Source,
    items: &Items,
) -> Result<Option<RawEphemeralDisk>, JobspecError> {
    let Some(block) = src.single(items, "ephemeral_disk")? else {
        return Ok(None);
    };
    src.no_labels(&items.what, block)?;
    let what = format!("ephemeral_disk block of {}", items.what);
    let inner = super::table::items(src, &what, block, At::EphemeralDisk)?;
    Ok(Some(RawEphemeralDisk {
        size_mb: src.opt_u32(&inner, "size")?.map(i64::from),
        sticky: src.opt_bool(&inner, "sticky")?,
        migrate: src.opt_bool(&inner, "migrate")?,
        ..RawEphemeralDisk::default()
    }))
}

/// The names of `raw`'s no-effect settings that are set (`ephemeral_disk.sticky`), for the JSON
/// front-end's warnings; HCL's are warned where they are written (`schema::prepare_hcl`).
pub(crate) fn no_effect_set(raw: &RawEphemeralDisk) -> impl Iterator<Item = &'static str> {
    [
        (raw.sticky, "ephemeral_disk.sticky"),
        (raw.migrate, "ephemeral_disk.migrate"),
    ]
    .into_iter()
    .filter_map(|(set, name)| (set == Some(true)).then_some(name))
}

/// The group's disk with Nomad's default applied, validated as Nomad validates it. `group` names
/// the group in the error (`group "g"`).
pub(crate) fn convert(
    group: &str,
    raw: Option<&RawEphemeralDisk>,
) -> Result<EphemeralDisk, JobspecError> {
    let kept = EphemeralDisk {
        sticky: raw.and_then(|r| r.sticky).unwrap_or(false),
        migrate: raw.and_then(|r| r.migrate).unwrap_or(false),
        ..EphemeralDisk::default()
    };
    let Some(size) = raw.and_then(|r| r.size_mb) else {
        return Ok(kept);
    };
    match u64::try_from(size) {
        Ok(size_mb) if size >= MIN_SIZE_MB => Ok(EphemeralDisk { size_mb, ..kept }),
        _ => Err(invalid(format!(
            "{group} ephemeral disk: minimum DiskMB value is {MIN_SIZE_MB}; got {size}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::{hcl, json};

    fn hcl_job(group: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n{group}\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n    }}\n  }}\n}}\n"
        )
    }

    fn json_job(disk: serde_json::Value) -> Vec<u8> {
        serde_json::json!({"ID": "j", "TaskGroups": [{"Name": "g", "EphemeralDisk": disk,
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]}]})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn hcl_size_is_read_and_sticky_and_migrate_are_kept_and_warned() {
        let parsed = hcl::parse_job(&hcl_job(
            "    ephemeral_disk {\n      size = 500\n      sticky = true\n      migrate = false\n    }",
        ))
        .unwrap();
        assert_eq!(
            parsed.job.task_groups[0].ephemeral_disk,
            EphemeralDisk {
                size_mb: 500,
                sticky: true,
                migrate: false
            }
        );
        assert_eq!(
            parsed.warnings,
            [
                "\"ephemeral_disk.sticky\" has no effect on one node: there is no other node \
                 to keep the allocation directory for",
                "\"ephemeral_disk.migrate\" has no effect on one node: there is no other node \
                 to migrate the allocation directory to",
            ]
        );
        // Kept and written in Nomad's shape, and read back.
        let encoded = serde_json::to_value(&parsed.job.task_groups[0]).unwrap();
        assert_eq!(
            encoded["EphemeralDisk"],
            serde_json::json!({"SizeMB": 500, "Sticky": true})
        );
        let bytes = serde_json::to_vec(&parsed.job).unwrap();
        assert_eq!(json::parse_job(&bytes).unwrap().job, parsed.job);
    }

    #[test]
    fn without_a_size_the_group_asks_nomads_default() {
        let none = hcl::parse_job(&hcl_job("")).unwrap();
        assert_eq!(none.job.task_groups[0].ephemeral_disk.size_mb, 300);
        let empty = hcl::parse_job(&hcl_job("    ephemeral_disk {}")).unwrap();
        assert_eq!(empty.job.task_groups[0].ephemeral_disk.size_mb, 300);
        assert!(empty.warnings.is_empty(), "{:?}", empty.warnings);
        // The default is not written: the job's JSON stays as it was before the block was read.
        let encoded = serde_json::to_value(&none.job.task_groups[0]).unwrap();
        assert!(encoded.get("EphemeralDisk").is_none(), "{encoded}");
    }

    #[test]
    fn json_reads_size_mb_and_keeps_and_warns_a_set_sticky() {
        let parsed = json::parse_job(&json_job(
            serde_json::json!({"SizeMB": 150, "Sticky": false, "Migrate": false}),
        ))
        .unwrap();
        assert_eq!(parsed.job.task_groups[0].ephemeral_disk.size_mb, 150);
        // Go writes false for "not set": no warning.
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let sticky = json::parse_job(&json_job(serde_json::json!({"Sticky": true}))).unwrap();
        let disk = sticky.job.task_groups[0].ephemeral_disk;
        assert_eq!(
            (disk.size_mb, disk.sticky, disk.migrate),
            (300, true, false)
        );
        assert_eq!(
            sticky.warnings,
            [
                "\"ephemeral_disk.sticky\" has no effect on one node: there is no other node to \
              keep the allocation directory for"
            ]
        );
    }

    #[test]
    fn a_size_under_10_mb_is_refused_with_nomads_text() {
        let err = |e: JobspecError| e.to_string();
        for (size, got) in [("0", "0"), ("9", "9")] {
            let src = hcl_job(&format!("    ephemeral_disk {{ size = {size} }}"));
            assert!(
                err(hcl::parse_job(&src).unwrap_err()).contains(&format!(
                    "group \"g\" ephemeral disk: minimum DiskMB value is 10; got {got}"
                )),
                "{size}"
            );
        }
        let negative = json::parse_job(&json_job(serde_json::json!({"SizeMB": -5}))).unwrap_err();
        assert_eq!(
            negative,
            JobspecError::Invalid(
                "group \"g\" ephemeral disk: minimum DiskMB value is 10; got -5".into()
            )
        );
        let src = hcl_job("    ephemeral_disk { size = 10 }");
        assert_eq!(
            hcl::parse_job(&src).unwrap().job.task_groups[0]
                .ephemeral_disk
                .size_mb,
            10
        );
        let typo = hcl_job("    ephemeral_disk { sise = 10 }");
        assert!(err(hcl::parse_job(&typo).unwrap_err())
            .contains("unknown attribute \"sise\" in ephemeral_disk block of group \"g\""));
    }
}
