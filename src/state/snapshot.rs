//! The snapshot, `<data_dir>/state.json`: the whole state as of its last compaction, and the
//! identity of the journal that continues it ([`super::journal`]).

use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::StateError;
use crate::records::{AllocRecord, CsiVolumeRecord, JobRecord, PluginRecord, VolumeRecord};

/// The version this build writes. Older files are upgraded on load; newer ones are refused.
///
/// - 1: the first format.
/// - 2: tasks outlive the agent (live-restore.md): a task's driver handle (`Handle`), the restart
///   delay's deadline (`RestartAt`) and the restart tracker's window (`RestartWindowStart`,
///   `RestartWindowCount`). A version-1 task has a `PID` and `PidStartTicks` only: a child of the
///   agent that wrote it, which the runner stops and starts again under the keeper.
/// - 3: the snapshot is continued by a journal of changes (`state.journal`, whose header carries
///   the snapshot's `JournalID`): the state is the snapshot with the journal's records applied.
///   An agent that knows only version 2 would read the snapshot alone and miss the changes the
///   journal holds, so it must refuse the file. The sections are the same as in version 2.
/// - 4: CSI volumes (`CSIVolumes`, in the snapshot and in journal records). An agent that knows
///   only version 3 would read the file without them and drop them at its first compaction,
///   forgetting storage that exists, so it must refuse the file. A version-3 file has none.
pub const STATE_VERSION: u32 = 4;
pub const STATE_FILE: &str = "state.json";

/// Everything in `state.json`. Sections belong to their subsystems; this file only stores them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StateFile {
    pub version: u32,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// The journal that continues this snapshot (version 3): only a `state.journal` whose header
    /// names this ID is replayed over it. Empty in older files, which have no journal.
    #[serde(
        rename = "JournalID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub journal_id: String,
    #[serde(default)]
    pub jobs: Vec<JobRecord>,
    #[serde(default)]
    pub allocations: Vec<AllocRecord>,
    #[serde(default, rename = "CSIPlugins")]
    pub csi_plugins: Vec<PluginRecord>,
    #[serde(default)]
    pub host_volumes: Vec<VolumeRecord>,
    /// Version 4.
    #[serde(default, rename = "CSIVolumes")]
    pub csi_volumes: Vec<CsiVolumeRecord>,
}

pub(super) fn new_state() -> StateFile {
    StateFile {
        version: STATE_VERSION,
        node_id: uuid::Uuid::new_v4().to_string(),
        ..StateFile::default()
    }
}

/// Parses a snapshot, upgrading older versions and refusing newer ones. The journal is not read
/// here: [`super::read`] replays it over what this returns.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<StateFile, StateError> {
    let corrupt = |reason: String| StateError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    let version = value
        .get("Version")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| corrupt("no Version field".to_string()))?;
    if version > u64::from(STATE_VERSION) {
        return Err(StateError::TooNew {
            path: path.to_path_buf(),
            found: version as u32,
            supported: STATE_VERSION,
        });
    }
    // One upgrade step per version. 1 -> 2 only adds fields, which default to "not recorded";
    // 2 -> 3 adds the journal, which a version-2 file does not have (its JournalID is empty, so
    // no journal is replayed over it, whatever lies next to it); 3 -> 4 adds the CSI volumes
    // section, empty in older files (its serde default), and keeps their journal.
    let mut state: StateFile = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
    if state.version < STATE_VERSION {
        log::info!(
            "state file {} has version {}: upgrading it to {STATE_VERSION}",
            path.display(),
            state.version
        );
    }
    if state.version < 3 {
        state.journal_id.clear();
    }
    state.version = STATE_VERSION;
    if uuid::Uuid::parse_str(&state.node_id).is_err() {
        return Err(corrupt(format!("NodeID {:?} is not a UUID", state.node_id)));
    }
    Ok(state)
}

/// Writes `bytes` to `path` atomically and durably, with mode 0600: temp file in the same directory,
/// fsync, rename over `path`, fsync the directory. Never truncates `path` in place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("state path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // Once renamed, the new file is the one every reader (and the next agent) sees: a failure to
    // sync the directory now is not a failed write, or the caller would undo in memory a change
    // the file holds. It is said, and the rename may not survive a power loss.
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        log::warn!(
            "{} is written, but its directory could not be synced ({e}): the change may not survive a power loss",
            path.display()
        );
    }
    Ok(())
}
