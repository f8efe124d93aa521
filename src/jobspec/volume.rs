//! A group's `volume` blocks: the CSI access and attachment modes and mount options (which CSI
//! volume records reuse, through `records`), reading the modes spelled as strings, and checking
//! each request as Nomad's `VolumeRequest.Validate` does, so that a job Nomad refuses is refused
//! here with the same words, prefixed with the volume and group.

use super::invalid;
use super::{JobType, JobspecError, VolumeRequest, VOLUME_TYPE_CSI, VOLUME_TYPE_HOST};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A mode spelled wrong: `invalid access_mode "x": want one of ...`. The one message of every
/// place a mode is read (jobspecs, host and CSI volume specifications), which each prefixes or
/// wraps in its own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMode(String);

impl fmt::Display for BadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadMode {}

/// The value of `all` whose name is `raw`, or the message naming `field` and the choices.
pub fn parse_mode<T: Copy>(
    field: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    raw: &str,
) -> Result<T, BadMode> {
    all.iter()
        .copied()
        .find(|m| name(*m) == raw)
        .ok_or_else(|| {
            let want = all.iter().map(|m| name(*m)).collect::<Vec<_>>();
            let want = match want.as_slice() {
                [a, b] => format!("{a} or {b}"),
                _ => format!("one of {}", want.join(", ")),
            };
            BadMode(format!("invalid {field} {raw:?}: want {want}"))
        })
}

/// How a volume is presented to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttachmentMode {
    FileSystem,
    BlockDevice,
}

impl AttachmentMode {
    pub const ALL: [AttachmentMode; 2] = [AttachmentMode::FileSystem, AttachmentMode::BlockDevice];

    pub fn as_str(self) -> &'static str {
        match self {
            AttachmentMode::FileSystem => "file-system",
            AttachmentMode::BlockDevice => "block-device",
        }
    }
}

/// How a CSI volume may be accessed (csi-volumes.md), as Nomad spells CSI's access modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CsiAccessMode {
    SingleNodeReaderOnly,
    SingleNodeWriter,
    MultiNodeReaderOnly,
    MultiNodeSingleWriter,
    MultiNodeMultiWriter,
}

impl CsiAccessMode {
    pub const ALL: [CsiAccessMode; 5] = [
        CsiAccessMode::SingleNodeReaderOnly,
        CsiAccessMode::SingleNodeWriter,
        CsiAccessMode::MultiNodeReaderOnly,
        CsiAccessMode::MultiNodeSingleWriter,
        CsiAccessMode::MultiNodeMultiWriter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CsiAccessMode::SingleNodeReaderOnly => "single-node-reader-only",
            CsiAccessMode::SingleNodeWriter => "single-node-writer",
            CsiAccessMode::MultiNodeReaderOnly => "multi-node-reader-only",
            CsiAccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
            CsiAccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
        }
    }

    /// Whether a claim in this mode may write (Nomad's `ValidCSIVolumeWriteAccessMode`).
    pub fn can_write(self) -> bool {
        matches!(
            self,
            CsiAccessMode::SingleNodeWriter
                | CsiAccessMode::MultiNodeSingleWriter
                | CsiAccessMode::MultiNodeMultiWriter
        )
    }
}

/// `mount_options { fs_type  mount_flags }` (Nomad's `CSIMountOptions`). The flags may hold
/// credentials: they go to the plugin and into the state file (mode 0600), never into a log line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CsiMountOptions {
    #[serde(rename = "FSType")]
    pub fs_type: String,
    pub mount_flags: Vec<String>,
}

/// `attachment_mode = "file-system" | "block-device"`.
impl FromStr for AttachmentMode {
    type Err = BadMode;

    fn from_str(raw: &str) -> Result<Self, BadMode> {
        parse_mode("attachment_mode", &Self::ALL, Self::as_str, raw)
    }
}

/// `access_mode = "single-node-writer"` and the other CSI access modes, as Nomad spells them.
impl FromStr for CsiAccessMode {
    type Err = BadMode;

    fn from_str(raw: &str) -> Result<Self, BadMode> {
        parse_mode("access_mode", &Self::ALL, Self::as_str, raw)
    }
}

/// Checks one request; `ctx` names it (`volume "data" in group "web"`), `count` is the group's.
/// The first broken rule is the error, in Nomad's words.
pub fn validate(
    ctx: &str,
    volume: &VolumeRequest,
    count: u32,
    job_type: JobType,
) -> Result<(), JobspecError> {
    let fail = |msg: String| Err(invalid(format!("{ctx}: {msg}")));
    match volume.volume_type.as_str() {
        VOLUME_TYPE_HOST | VOLUME_TYPE_CSI => {}
        other => {
            return fail(format!(
                "volume has unrecognized type {other:?} (want \"host\" or \"csi\")"
            ))
        }
    }
    if volume.source.is_empty() {
        return fail("volume has an empty source".to_string());
    }
    if volume.per_alloc && job_type == JobType::System {
        return fail("volume cannot be per_alloc for system or sysbatch jobs".to_string());
    }
    if !volume.is_csi() {
        if volume.attachment_mode.is_some() {
            return fail("host volumes cannot have an attachment mode".to_string());
        }
        if volume.access_mode.is_some() {
            return fail("host volumes cannot have an access mode".to_string());
        }
        if volume.mount_options.is_some() {
            return fail("host volumes cannot have mount options".to_string());
        }
        if volume.per_alloc {
            return fail("host volumes do not support per_alloc".to_string());
        }
        return Ok(());
    }
    match volume.attachment_mode {
        None => return fail("CSI volumes must have an attachment mode".to_string()),
        Some(AttachmentMode::BlockDevice) if volume.mount_options.is_some() => {
            return fail("block devices cannot have mount options".to_string())
        }
        Some(_) => {}
    }
    let Some(mode) = volume.access_mode else {
        return fail("CSI volumes must have an access mode".to_string());
    };
    let shared = count > 1 && !volume.per_alloc;
    match mode {
        CsiAccessMode::SingleNodeReaderOnly | CsiAccessMode::MultiNodeReaderOnly
            if !volume.read_only =>
        {
            fail(format!("{} volumes must be read-only", mode.as_str()))
        }
        CsiAccessMode::SingleNodeWriter if shared => fail(format!(
            "volume with {} access mode allows only one reader",
            mode.as_str()
        )),
        CsiAccessMode::MultiNodeSingleWriter if !volume.read_only && shared => fail(format!(
            "volume with {} access mode allows only one writer",
            mode.as_str()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csi(mode: &str, read_only: bool) -> VolumeRequest {
        VolumeRequest {
            name: "data".to_string(),
            volume_type: "csi".to_string(),
            source: "vol".to_string(),
            read_only,
            access_mode: Some(mode.parse().unwrap()),
            attachment_mode: Some(AttachmentMode::FileSystem),
            per_alloc: false,
            mount_options: None,
            sticky: false,
        }
    }

    fn check(v: &VolumeRequest, count: u32) -> Result<(), String> {
        validate("v", v, count, JobType::Service).map_err(|e| e.to_string())
    }

    #[test]
    fn csi_requests_follow_nomads_rules() {
        assert_eq!(check(&csi("single-node-writer", false), 1), Ok(()));
        assert_eq!(check(&csi("multi-node-multi-writer", false), 3), Ok(()));
        assert_eq!(check(&csi("multi-node-single-writer", true), 3), Ok(()));
        assert_eq!(
            check(&csi("single-node-reader-only", false), 1).unwrap_err(),
            "v: single-node-reader-only volumes must be read-only"
        );
        assert_eq!(
            check(&csi("multi-node-reader-only", false), 1).unwrap_err(),
            "v: multi-node-reader-only volumes must be read-only"
        );
        assert_eq!(
            check(&csi("single-node-writer", false), 2).unwrap_err(),
            "v: volume with single-node-writer access mode allows only one reader"
        );
        assert_eq!(
            check(&csi("multi-node-single-writer", false), 2).unwrap_err(),
            "v: volume with multi-node-single-writer access mode allows only one writer"
        );
        let mut per_alloc = csi("single-node-writer", false);
        per_alloc.per_alloc = true;
        assert_eq!(check(&per_alloc, 2), Ok(()));
        assert_eq!(per_alloc.source_for(1), "vol[1]");
        assert_eq!(
            validate("v", &per_alloc, 1, JobType::System)
                .unwrap_err()
                .to_string(),
            "v: volume cannot be per_alloc for system or sysbatch jobs"
        );
        let mut modeless = csi("single-node-writer", false);
        modeless.access_mode = None;
        assert_eq!(
            check(&modeless, 1).unwrap_err(),
            "v: CSI volumes must have an access mode"
        );
        modeless.attachment_mode = None;
        assert_eq!(
            check(&modeless, 1).unwrap_err(),
            "v: CSI volumes must have an attachment mode"
        );
        let mut block = csi("single-node-writer", false);
        block.attachment_mode = Some(AttachmentMode::BlockDevice);
        block.mount_options = Some(CsiMountOptions::default());
        assert_eq!(
            check(&block, 1).unwrap_err(),
            "v: block devices cannot have mount options"
        );
    }

    const HCL: &str = r#"
job "j" {
  group "g" {
    volume "data" {
      type            = "csi"
      source          = "vol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
      read_only       = false
      per_alloc       = true
      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
      volume_mount { volume = "data"  destination = "data" }
    }
  }
}
"#;

    #[test]
    fn hcl_and_json_read_the_same_csi_request() {
        let job = crate::jobspec::hcl::parse_job(HCL).unwrap().job;
        let v = &job.task_groups[0].volumes["data"];
        assert_eq!(
            *v,
            VolumeRequest {
                name: "data".to_string(),
                volume_type: "csi".to_string(),
                source: "vol".to_string(),
                read_only: false,
                access_mode: Some(CsiAccessMode::SingleNodeWriter),
                attachment_mode: Some(AttachmentMode::FileSystem),
                per_alloc: true,
                mount_options: Some(CsiMountOptions {
                    fs_type: "ext4".to_string(),
                    mount_flags: vec!["noatime".to_string()],
                }),
                sticky: false,
            }
        );
        let json = serde_json::to_vec(&job).unwrap();
        let text = String::from_utf8(json.clone()).unwrap();
        assert!(
            text.contains(r#""AccessMode":"single-node-writer","AttachmentMode":"file-system","PerAlloc":true,"MountOptions":{"FSType":"ext4","MountFlags":["noatime"]}"#),
            "{text}"
        );
        let parsed = crate::jobspec::json::parse_job(&json).unwrap();
        assert_eq!(parsed.job, job);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);

        let bad = HCL.replace("single-node-writer", "exclusive");
        let e = crate::jobspec::hcl::parse_job(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid access_mode \"exclusive\""), "{e}");
        let bad = HCL.replace("fs_type", "fstype");
        assert!(crate::jobspec::hcl::parse_job(&bad).is_err());
    }

    #[test]
    fn host_requests_refuse_csi_fields() {
        let mut host = csi("single-node-writer", false);
        host.volume_type = "host".to_string();
        host.attachment_mode = None;
        assert_eq!(
            check(&host, 1).unwrap_err(),
            "v: host volumes cannot have an access mode"
        );
        host.access_mode = None;
        assert_eq!(check(&host, 1), Ok(()));
        host.per_alloc = true;
        assert_eq!(
            check(&host, 1).unwrap_err(),
            "v: host volumes do not support per_alloc"
        );
        host.volume_type = "nfs".to_string();
        assert_eq!(
            check(&host, 1).unwrap_err(),
            "v: volume has unrecognized type \"nfs\" (want \"host\" or \"csi\")"
        );
        assert_eq!(
            "rw".parse::<CsiAccessMode>().unwrap_err().to_string(),
            "invalid access_mode \"rw\": want one of single-node-reader-only, single-node-writer, multi-node-reader-only, multi-node-single-writer, multi-node-multi-writer"
        );
        assert_eq!(
            "nfs".parse::<AttachmentMode>().unwrap_err().to_string(),
            "invalid attachment_mode \"nfs\": want file-system or block-device"
        );
        assert_eq!(
            "single-node-writer".parse(),
            Ok(CsiAccessMode::SingleNodeWriter)
        );
    }
}
