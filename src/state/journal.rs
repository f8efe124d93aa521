//! The journal, `<data_dir>/state.journal`: the changes written since the snapshot.
//!
//! Format (integers little-endian):
//!
//! ```text
//! journal = record*                 the first record is the header
//! record  = length:u32 crc:u32 payload[length]
//! crc     = CRC-32 (IEEE) of the four length bytes followed by the payload
//! header  = {"Journal":1,"JournalID":"<uuid>"}
//! other   = one write: a Batch, {"Jobs":[...],"Allocations":[...],"CSIPlugins":[...],
//!           "HostVolumes":[...],"CSIVolumes":[...],"Removed":{"Jobs":["<id>"],...}} (empty
//!           parts left out)
//! ```
//!
//! A journal continues the snapshot whose `JournalID` its header names, and no other: a journal
//! left by a compaction that was interrupted between installing the new snapshot and its fresh
//! journal names the old snapshot and is ignored (the new snapshot already holds all of it). A
//! write is one record, so it is replayed whole or not at all. Records hold whole entries (a job,
//! an allocation, a CSI registration, a host volume) put, and the keys of entries removed;
//! replaying applies them in order over the snapshot.
//!
//! A record is appended and fsync'd before the write it holds is acknowledged, and no record is
//! written while the one before it is not on disk, so only the last record can be damaged by a
//! crash: it is cut short, or its bytes are not all there (a checksum that does not match). Such
//! a tail is ignored on load, with a warning naming its offset; it was never acknowledged. A
//! damaged record that is followed by a good one is not a crash's doing: the journal is corrupt,
//! and is refused like a snapshot that does not parse.

use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::StateError;
use crate::records::{
    AllocRecord, CsiVolumeRecord, JobRecord, PluginKind, PluginRecord, VolumeRecord,
};

pub const JOURNAL_FILE: &str = "state.journal";
/// The journal format this build writes; a journal of a newer format is refused.
pub const JOURNAL_FORMAT: u32 = 1;
/// A record's frame: its payload's length and checksum.
pub const FRAME: usize = 8;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Header {
    journal: u32,
    #[serde(rename = "JournalID")]
    journal_id: String,
}

/// One write: the entries it puts (whole) and the keys of those it removes, per section.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Batch {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<AllocRecord>,
    #[serde(default, rename = "CSIPlugins", skip_serializing_if = "Vec::is_empty")]
    pub csi_plugins: Vec<PluginRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_volumes: Vec<VolumeRecord>,
    #[serde(default, rename = "CSIVolumes", skip_serializing_if = "Vec::is_empty")]
    pub csi_volumes: Vec<CsiVolumeRecord>,
    #[serde(default, skip_serializing_if = "Removed::is_empty")]
    pub removed: Removed,
}

/// The keys of the entries a write removes.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Removed {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<String>,
    #[serde(default, rename = "CSIPlugins", skip_serializing_if = "Vec::is_empty")]
    pub csi_plugins: Vec<PluginKey>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_volumes: Vec<String>,
    #[serde(default, rename = "CSIVolumes", skip_serializing_if = "Vec::is_empty")]
    pub csi_volumes: Vec<String>,
}

impl Removed {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.allocations.is_empty()
            && self.csi_plugins.is_empty()
            && self.host_volumes.is_empty()
            && self.csi_volumes.is_empty()
    }
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.allocations.is_empty()
            && self.csi_plugins.is_empty()
            && self.host_volumes.is_empty()
            && self.csi_volumes.is_empty()
            && self.removed.is_empty()
    }
}

/// What identifies a CSI plugin registration: one per plugin, allocation and side.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PluginKey {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    pub kind: PluginKind,
}

/// A payload in its frame, ready to append.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a state write under 4 GiB");
    let mut out = Vec::with_capacity(FRAME + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(len, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

fn checksum(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// One record read at an offset.
enum Record<'a> {
    End,
    /// The payload, and the offset of the next record.
    Good(&'a [u8], usize),
    /// Cut short: the journal ends inside the record.
    Short(String),
    /// All its bytes are there but they do not match the checksum; the next record would start
    /// at this offset.
    Mismatch(usize),
}

fn record_at(bytes: &[u8], at: usize) -> Record<'_> {
    let left = bytes.len() - at;
    if left == 0 {
        return Record::End;
    }
    if left < FRAME {
        return Record::Short(format!(
            "its {FRAME}-byte frame is cut short at {left} bytes"
        ));
    }
    let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("four bytes"));
    let (len, crc) = (word(at), word(at + 4));
    if left - FRAME < len as usize {
        return Record::Short(format!(
            "it is cut short: {len} bytes announced, {} there",
            left - FRAME
        ));
    }
    let end = at + FRAME + len as usize;
    let payload = &bytes[at + FRAME..end];
    if checksum(len, payload) == crc {
        Record::Good(payload, end)
    } else {
        Record::Mismatch(end)
    }
}

/// A damaged tail that a load ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub offset: u64,
    pub bytes: u64,
    pub why: String,
}

/// What the journal next to a snapshot holds for it.
#[derive(Debug)]
pub enum Found {
    /// There is no journal.
    Nothing,
    /// A journal that continues another snapshot (its ID): ignored.
    Stale(String),
    /// The writes to replay, in order, and a damaged tail left out.
    Writes {
        batches: Vec<Batch>,
        dropped: Option<Dropped>,
    },
}

/// Reads the journal at `path` for the snapshot whose journal is `journal_id`.
pub fn read(path: &Path, journal_id: &str) -> Result<Found, StateError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(source) => {
            return Err(StateError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    parse(path, &bytes, journal_id)
}

/// [`read`] on the journal's bytes.
pub fn parse(path: &Path, bytes: &[u8], journal_id: &str) -> Result<Found, StateError> {
    let corrupt = |reason: String| StateError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut batches = Vec::new();
    let mut at = 0;
    let dropped = loop {
        let why = match record_at(bytes, at) {
            Record::End => break None,
            Record::Good(payload, next) => {
                if at == 0 {
                    let header: Header = serde_json::from_slice(payload)
                        .map_err(|e| corrupt(format!("its header does not parse: {e}")))?;
                    if header.journal > JOURNAL_FORMAT {
                        return Err(StateError::TooNew {
                            path: path.to_path_buf(),
                            found: header.journal,
                            supported: JOURNAL_FORMAT,
                        });
                    }
                    if header.journal_id != journal_id {
                        return Ok(Found::Stale(header.journal_id));
                    }
                } else {
                    let batch = serde_json::from_slice(payload).map_err(|e| {
                        corrupt(format!("the record at offset {at} does not parse: {e}"))
                    })?;
                    batches.push(batch);
                }
                at = next;
                continue;
            }
            Record::Short(why) => why,
            Record::Mismatch(next) => {
                if matches!(record_at(bytes, next), Record::Good(..)) {
                    return Err(corrupt(format!(
                        "the record at offset {at} does not match its checksum, and the record \
                         after it does: the journal was damaged, not cut short by a crash"
                    )));
                }
                "its checksum does not match".to_string()
            }
        };
        break Some(Dropped {
            offset: at as u64,
            bytes: (bytes.len() - at) as u64,
            why,
        });
    };
    if at == 0 && dropped.is_none() {
        return Ok(Found::Nothing);
    }
    // A header cut short leaves nothing to replay: nothing of that journal was acknowledged.
    Ok(Found::Writes { batches, dropped })
}

/// A new journal for the snapshot `journal_id`, holding its header only, atomically in place
/// of any journal at `path`. Returns its length.
pub fn start(path: &Path, journal_id: &str) -> io::Result<u64> {
    let header = serde_json::to_vec(&Header {
        journal: JOURNAL_FORMAT,
        journal_id: journal_id.to_string(),
    })?;
    let record = frame(&header);
    super::write_atomic(path, &record)?;
    Ok(record.len() as u64)
}

/// Appends `record` (framed) to the journal at `path`, which is `len` bytes long, and syncs it.
/// A failure cuts the journal back to `len` as far as it can: a record whose write was refused
/// must not come back after a crash. The journal is opened for each write without following a
/// link and never created here: only [`start`] makes one.
pub fn append(path: &Path, len: u64, record: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let written = file.write_all(record).and_then(|()| file.sync_data());
    if written.is_err() {
        let _ = file.set_len(len).and_then(|()| file.sync_data());
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str) -> Vec<u8> {
        frame(format!("{{\"Journal\":1,\"JournalID\":\"{id}\"}}").as_bytes())
    }

    fn volume(id: &str) -> VolumeRecord {
        serde_json::from_value(serde_json::json!({
            "ID": id, "Name": id, "Namespace": "default", "HostPath": format!("/v/{id}"),
        }))
        .unwrap()
    }

    fn put(id: &str) -> Vec<u8> {
        let batch = Batch {
            host_volumes: vec![volume(id)],
            ..Batch::default()
        };
        frame(&serde_json::to_vec(&batch).unwrap())
    }

    fn ids(found: &Found) -> Vec<String> {
        match found {
            Found::Writes { batches, .. } => batches
                .iter()
                .flat_map(|b| b.host_volumes.iter().map(|v| v.id.clone()))
                .collect(),
            other => panic!("no writes: {other:?}"),
        }
    }

    fn dropped(found: &Found) -> Option<Dropped> {
        match found {
            Found::Writes { dropped, .. } => dropped.clone(),
            other => panic!("no writes: {other:?}"),
        }
    }

    const P: &str = "/d/state.journal";

    #[test]
    fn records_are_read_back_in_order() {
        let bytes = [header("j1"), put("a"), put("b"), put("c")].concat();
        let found = parse(Path::new(P), &bytes, "j1").unwrap();
        assert_eq!(ids(&found), ["a", "b", "c"]);
        assert!(matches!(found, Found::Writes { dropped: None, .. }));
    }

    #[test]
    fn a_journal_of_another_snapshot_is_stale() {
        let bytes = [header("old"), put("a")].concat();
        let found = parse(Path::new(P), &bytes, "new").unwrap();
        assert!(matches!(found, Found::Stale(id) if id == "old"));
    }

    /// A crash can stop the last write at any byte: whatever the cut, the records before it are
    /// replayed, the cut one is not, and the warning names where it began.
    #[test]
    fn a_torn_last_record_is_dropped_at_every_byte_offset() {
        let good = [header("j"), put("a"), put("b")].concat();
        let last = put("c");
        for cut in 0..last.len() {
            let bytes = [&good[..], &last[..cut]].concat();
            let found = parse(Path::new(P), &bytes, "j").unwrap();
            assert_eq!(ids(&found), ["a", "b"], "cut at {cut}");
            let d = dropped(&found);
            if cut == 0 {
                assert_eq!(d, None);
            } else {
                let d = d.unwrap_or_else(|| panic!("cut at {cut}: nothing dropped"));
                assert_eq!((d.offset, d.bytes), (good.len() as u64, cut as u64));
                assert!(d.why.contains("cut short"), "{d:?}");
            }
        }
        // The header itself cut short: nothing to replay.
        let h = header("j");
        for cut in 1..h.len() {
            let found = parse(Path::new(P), &h[..cut], "j").unwrap();
            assert_eq!(ids(&found), Vec::<String>::new());
            assert_eq!(dropped(&found).unwrap().offset, 0);
        }
    }

    /// Every byte of the last record flipped in turn: the checksum (or the length) catches it,
    /// and the record is dropped as a damaged tail.
    #[test]
    fn a_last_record_with_a_bad_checksum_is_dropped() {
        let good = [header("j"), put("a")].concat();
        let last = put("b");
        for i in 0..last.len() {
            let mut bad = last.clone();
            bad[i] ^= 0x40;
            let bytes = [&good[..], &bad[..]].concat();
            let found = parse(Path::new(P), &bytes, "j").unwrap();
            assert_eq!(ids(&found), ["a"], "byte {i}");
            assert_eq!(
                dropped(&found).unwrap().offset,
                good.len() as u64,
                "byte {i}"
            );
        }
        // Zeros where the record should be (a file extended but never written).
        let bytes = [&good[..], &[0u8; 64][..]].concat();
        let found = parse(Path::new(P), &bytes, "j").unwrap();
        assert_eq!(ids(&found), ["a"]);
        assert_eq!(dropped(&found).unwrap().bytes, 64);
    }

    /// A damaged record with a good one after it is corruption, not a crash: refused.
    #[test]
    fn a_damaged_record_in_the_middle_is_refused() {
        let mut middle = put("b");
        let n = middle.len();
        middle[n - 3] ^= 1;
        let bytes = [header("j"), put("a"), middle, put("c")].concat();
        let err = parse(Path::new(P), &bytes, "j").unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("does not match its checksum"),
            "{err}"
        );
    }

    #[test]
    fn a_good_record_that_does_not_parse_is_refused() {
        let bytes = [header("j"), frame(b"{\"Jobs\": 7}")].concat();
        let err = parse(Path::new(P), &bytes, "j").unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
        let newer = frame(b"{\"Journal\":2,\"JournalID\":\"j\"}");
        let err = parse(Path::new(P), &newer, "j").unwrap_err();
        assert!(matches!(err, StateError::TooNew { found: 2, .. }), "{err}");
    }

    #[test]
    fn append_adds_records_and_a_refused_append_leaves_none() {
        let dir = std::env::temp_dir().join(format!("nodeward-journal-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(JOURNAL_FILE);
        assert!(append(&path, 0, &put("a")).is_err(), "append never creates");
        let mut len = start(&path, "j").unwrap();
        for id in ["a", "b"] {
            let r = put(id);
            append(&path, len, &r).unwrap();
            len += r.len() as u64;
        }
        assert_eq!(ids(&read(&path, "j").unwrap()), ["a", "b"]);
        // A link in its place is never written through.
        let real = dir.join("real");
        fs::rename(&path, &real).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(append(&path, len, &put("c")).is_err());
        fs::remove_file(&path).unwrap();
        fs::rename(&real, &path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), len);
        let _ = fs::remove_dir_all(&dir);
    }
}
