//! A docker task's logs in nodeward's own log files: the container's stdout and stderr, read from
//! the engine, go into the same rotated `alloc/logs/<task>.stdout.N` and `.stderr.N` files that the
//! keeper writes for `raw_exec` tasks ([`RotatingFile`], reached through [`open_log_dir`] so no
//! link a task planted is followed), so `alloc logs` serves them unchanged. Each line is written
//! exactly once even when the agent is killed at any instant and started again while the
//! container keeps writing (docs/docker.md, "Logs", has the measurements this rests on).
//!
//! How: the engine keeps the container's log and can replay it from a time (`since`). After each
//! batch the copier saves a cursor (what it copied, and where each stream stands in its files);
//! on open it cuts the files back to the cursor, asks the engine from a `since` no later than any
//! message it has not copied, and skips what the cursor says it already has.
//!
//! - Each stream is tracked on its own. dockerd stamps each message in its stream's reader, then
//!   appends it to the container's one log, so stdout and stderr interleave out of time order
//!   (measured: 727 of 60,004 messages stamped before the message logged before them); within
//!   one stream the stamps never go back.
//!   The cursor keeps, per stream, the last copied stamp and how many messages with exactly that
//!   stamp were copied (dockerd splits a line over 16 KiB into messages that share one stamp).
//! - `since` is the earliest stamp a message not copied yet can have: per stream its last copied
//!   stamp, but never earlier than the newest copied stamp of either stream less
//!   [`REORDER_MARGIN`] (a stream that was quiet for an hour would otherwise make the engine
//!   replay that hour). dockerd's `since` keeps a message stamped exactly at it (measured), to the
//!   nanosecond.
//! - A stamp older than its stream's last one, or older than the margin allows, means the wall
//!   clock went back: the cursor switches to counting messages from the container's start (and
//!   is saved before that message is written), and every later open replays the whole log and
//!   skips as many messages per stream as were copied.
//! - Log bytes are written before the cursor that covers them, so a crash leaves bytes past the
//!   cursor, never a cursor past its bytes; open removes those bytes and they are copied again.
//!
//! Protocol: a copier is owned by one thread, the driver's log thread of its container, and
//! shares nothing (no lock, no thread of its own). That thread opens it ([`LogCopier::open`]);
//! then, for each request for the container's log (`stdout=1&stderr=1&timestamps=1&follow=1`),
//! takes its `since` from [`LogCopier::resume`], gives each demuxed frame, whole, to
//! [`LogCopier::frame`], and calls [`LogCopier::commit`] before each read that may block and at
//! the stream's end. A request may be made again at any time: what the engine sends twice is
//! skipped. When a stream ends the thread asks again, and once the container has exited, once
//! more without `follow`: dockerd 20.10 can end a follow stream at the container's exit before
//! it sent the end of the log (measured: in about half of the runs of tests/docker_logs.rs).
//! Any error but [`LogsError::Frame`] leaves the copier broken: the thread drops it and opens a
//! new one, which restores the files to the last commit and asks again from there.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::jobspec::LogConfig;
use nodeward_keeper::logs::{open_log_dir, Position, RotatingFile, Stream};

/// How far before the newest copied stamp a message not copied yet may be stamped: a bound on
/// dockerd's reordering between streams (it stamps a message, then waits for the log's lock).
/// Measured at 3.7 ms at worst over 60,000 messages on a loaded two-core machine; 10 s leaves
/// room for a stalled dockerd, and costs replaying at most 10 s of log after a restart.
pub const REORDER_MARGIN: Duration = Duration::from_secs(10);

/// A commit happens by itself after this many frames or bytes, so that a thread that never
/// waits (a container that never stops writing) still bounds what a restart copies again.
const COMMIT_EVERY_FRAMES: u64 = 1024;
const COMMIT_EVERY_BYTES: u64 = 1024 * 1024;

/// The cursor file's format version.
const CURSOR_VERSION: u32 = 1;

const NANOS: u64 = 1_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("cannot open the log directory {dir} of task {task}: {source}")]
    LogDir {
        task: String,
        dir: PathBuf,
        source: io::Error,
    },
    #[error("cannot restore the {stream} log files of task {task} to their cursor: {source}")]
    Restore {
        task: String,
        stream: &'static str,
        source: io::Error,
    },
    #[error("cannot write the {stream} log of task {task}: {source}")]
    Write {
        task: String,
        stream: &'static str,
        source: io::Error,
    },
    /// A frame that does not start with a timestamp: nothing was written, and the copier goes on.
    #[error("a {stream} log frame of container {container} was not copied: {reason} (it starts with {start:?})")]
    Frame {
        container: String,
        stream: &'static str,
        reason: String,
        start: String,
    },
    #[error("cannot write the log cursor {path}: {source}")]
    Cursor { path: PathBuf, source: io::Error },
    #[error("the log copier of task {task} failed before ({cause}); open it again to go on from its last commit")]
    Broken { task: String, cause: String },
}

/// The `since` to give the engine: a time, to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Since {
    pub secs: u64,
    pub nanos: u32,
}

impl Since {
    fn from_nanos(n: u64) -> Since {
        Since {
            secs: n / NANOS,
            nanos: (n % NANOS) as u32,
        }
    }

    /// Nanoseconds since the Unix epoch.
    pub fn as_nanos(self) -> u64 {
        self.secs * NANOS + u64::from(self.nanos)
    }
}

/// `<secs>.<9 digits>`, the form dockerd's `since` parameter reads to the nanosecond.
impl fmt::Display for Since {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.secs, self.nanos)
    }
}

/// How an open after a restart finds where it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// From `since`, skipping per stream up to the last copied stamp.
    Stamps,
    /// From the container's start, skipping per stream as many messages as were copied: once the
    /// stamps went back, they no longer say what was copied.
    Counts,
}

/// One stream in the cursor file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct StreamRecord {
    /// The last copied message's stamp, in nanoseconds since the Unix epoch.
    last: Option<u64>,
    /// How many copied messages have exactly the stamp `last`.
    at_last: u64,
    /// How many messages were copied since the container started.
    total: u64,
    /// The file the stream writes next, and its size then.
    file: u64,
    size: u64,
}

/// The cursor file: `{"Version":1,"ContainerID":…,"Mode":"stamps",…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct CursorRecord {
    version: u32,
    #[serde(rename = "ContainerID")]
    container_id: String,
    mode: Mode,
    /// The newest stamp copied from either stream.
    newest: Option<u64>,
    stdout: StreamRecord,
    stderr: StreamRecord,
}

impl CursorRecord {
    /// Whether the record can be what a copier saved (a hand-edited or damaged file may parse).
    fn consistent(&self) -> bool {
        let stream_ok = |s: &StreamRecord| match s.last {
            None => s.at_last == 0,
            Some(last) => {
                s.at_last >= 1 && s.at_last <= s.total && self.newest.is_some_and(|n| n >= last)
            }
        };
        self.version == CURSOR_VERSION && stream_ok(&self.stdout) && stream_ok(&self.stderr)
    }
}

/// What is left to skip of what a request makes the engine send again, for one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replay {
    Done,
    /// Messages stamped before `at`, and the first `left` stamped exactly `at`, were copied.
    ToStamp {
        at: u64,
        left: u64,
    },
    /// The first `left` messages of the stream were copied.
    ToCount {
        left: u64,
    },
}

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Skip,
    Copy,
    /// A new message stamped earlier than the stamps can vouch for: the clock went back.
    CopyOutOfOrder,
}

struct StreamCopy {
    file: RotatingFile,
    last: Option<u64>,
    at_last: u64,
    total: u64,
    replay: Replay,
}

impl StreamCopy {
    fn new(file: RotatingFile, rec: StreamRecord) -> Self {
        StreamCopy {
            file,
            last: rec.last,
            at_last: rec.at_last,
            total: rec.total,
            replay: Replay::Done,
        }
    }

    /// Expects the engine to send again, first, what this stream already has.
    fn rearm(&mut self, mode: Mode) {
        self.replay = match (mode, self.last) {
            (Mode::Counts, _) if self.total > 0 => Replay::ToCount { left: self.total },
            (Mode::Stamps, Some(at)) => Replay::ToStamp {
                at,
                left: self.at_last,
            },
            _ => Replay::Done,
        };
    }

    /// Decides about a message of this stream stamped `t`: the whole exactly-once rule, no I/O.
    fn judge(&mut self, t: u64, newest: Option<u64>, mode: Mode) -> Verdict {
        match self.replay {
            Replay::ToCount { left } => {
                self.replay = if left > 1 {
                    Replay::ToCount { left: left - 1 }
                } else {
                    Replay::Done
                };
                return Verdict::Skip;
            }
            Replay::ToStamp { at, .. } if t < at => return Verdict::Skip,
            Replay::ToStamp { at, left } if t == at => {
                self.replay = if left > 1 {
                    Replay::ToStamp { at, left: left - 1 }
                } else {
                    Replay::Done
                };
                return Verdict::Skip;
            }
            // Past the cursor: the replay is over, this one is new.
            Replay::ToStamp { .. } => self.replay = Replay::Done,
            Replay::Done => {}
        }
        let margin = REORDER_MARGIN.as_nanos() as u64;
        let behind_stream = self.last.is_some_and(|last| t < last);
        let behind_margin = newest.is_some_and(|n| t.saturating_add(margin) < n);
        if mode == Mode::Stamps && (behind_stream || behind_margin) {
            Verdict::CopyOutOfOrder
        } else {
            Verdict::Copy
        }
    }

    fn copied(&mut self, t: u64) {
        if self.last == Some(t) {
            self.at_last += 1;
        } else {
            self.last = Some(t);
            self.at_last = 1;
        }
        self.total += 1;
    }

    fn record(&self) -> StreamRecord {
        let Position { index, size } = self.file.position();
        StreamRecord {
            last: self.last,
            at_last: self.at_last,
            total: self.total,
            file: index,
            size,
        }
    }
}

/// Copies one container's log frames into its task's log files; see the module docs.
pub struct LogCopier {
    task: String,
    container_id: String,
    cursor: PathBuf,
    mode: Mode,
    newest: Option<u64>,
    streams: [StreamCopy; 2],
    /// Frames and bytes copied since the last commit; `dirty` once anything changed.
    pending_frames: u64,
    pending_bytes: u64,
    dirty: bool,
    /// Why the copier stopped (a failed write or commit): the files may hold bytes it does not
    /// account for, so it copies nothing more.
    broken: Option<String>,
}

impl LogCopier {
    /// Opens the log files of `task` in `log_dir` (inside `alloc_root`, see [`open_log_dir`]) and
    /// the cursor file `cursor` (a file the agent owns, outside the allocation directory).
    ///
    /// A cursor of `container_id` restores the files to it. No cursor, one of another container
    /// (the task's previous run), or one that cannot be read (a warning says why): the container
    /// is copied from its start, after what the files already hold, and a cursor saying so is
    /// written before anything is copied.
    pub fn open(
        alloc_root: &Path,
        log_dir: &Path,
        task: &str,
        logs: &LogConfig,
        cursor: PathBuf,
        container_id: &str,
    ) -> Result<LogCopier, LogsError> {
        let max_size = u64::from(logs.max_file_size_mb.max(1)) * 1024 * 1024;
        LogCopier::open_sized(
            alloc_root,
            log_dir,
            task,
            (logs.max_files, max_size),
            cursor,
            container_id,
        )
    }

    /// [`LogCopier::open`] with the file size limit in bytes: `(max_files, max_size)`.
    fn open_sized(
        alloc_root: &Path,
        log_dir: &Path,
        task: &str,
        (max_files, max_size): (u32, u64),
        cursor: PathBuf,
        container_id: &str,
    ) -> Result<LogCopier, LogsError> {
        let dir_error = |source| LogsError::LogDir {
            task: task.to_string(),
            dir: log_dir.to_path_buf(),
            source,
        };
        let dir = open_log_dir(alloc_root, log_dir).map_err(dir_error)?;
        let record = read_cursor(&cursor, container_id);
        let open_stream = |stream: Stream| -> Result<StreamCopy, LogsError> {
            let dir = dir.try_clone().map_err(dir_error)?;
            let mut file = RotatingFile::with_max_size(dir, task, stream, max_files, max_size);
            let Some(r) = &record else {
                return Ok(StreamCopy::new(file, StreamRecord::default()));
            };
            let rec = match stream {
                Stream::Stdout => r.stdout,
                Stream::Stderr => r.stderr,
            };
            let to = Position {
                index: rec.file,
                size: rec.size,
            };
            file.truncate_to(to).map_err(|source| LogsError::Restore {
                task: task.to_string(),
                stream: stream.as_str(),
                source,
            })?;
            Ok(StreamCopy::new(file, rec))
        };
        let streams = [open_stream(Stream::Stdout)?, open_stream(Stream::Stderr)?];
        let fresh = record.is_none();
        let mode = record.as_ref().map_or(Mode::Stamps, |r| r.mode);
        let mut copier = LogCopier {
            task: task.to_string(),
            container_id: container_id.to_string(),
            cursor,
            mode,
            newest: record.as_ref().and_then(|r| r.newest),
            streams,
            pending_frames: 0,
            pending_bytes: 0,
            dirty: fresh,
            broken: None,
        };
        // What the engine sends first is what the cursor has (the caller's `resume` does it
        // again; this is for one that forgot).
        copier.resume();
        if fresh {
            // Without it, a crash before the first commit would find no cursor, and the next open
            // would copy the container from its start after the lines this one wrote.
            copier.commit()?;
        }
        Ok(copier)
    }

    /// Call before each request for the container's log (the first after open, and each one
    /// after a stream ended): the `since` to ask with, `None` for the whole log. The engine sends
    /// again some of what the copier already has; from this call on, that is skipped.
    pub fn resume(&mut self) -> Option<Since> {
        for s in &mut self.streams {
            s.rearm(self.mode);
        }
        self.since()
    }

    fn since(&self) -> Option<Since> {
        if self.mode == Mode::Counts {
            return None;
        }
        let newest = self.newest?;
        let floor = newest.saturating_sub(REORDER_MARGIN.as_nanos() as u64);
        let earliest = self
            .streams
            .iter()
            .map(|s| s.last.map_or(floor, |last| last.max(floor)))
            .min()?;
        Some(Since::from_nanos(earliest))
    }

    /// Copies one frame as the engine sent it: `<RFC 3339 timestamp> <bytes>`, one message (a
    /// line, or a piece of a line over 16 KiB). A frame it already copied is skipped.
    pub fn frame(&mut self, stream: Stream, payload: &[u8]) -> Result<(), LogsError> {
        self.check()?;
        let (t, bytes) = split_stamp(payload).map_err(|reason| LogsError::Frame {
            container: self.container_id.clone(),
            stream: stream.as_str(),
            reason,
            start: String::from_utf8_lossy(&payload[..payload.len().min(40)]).into_owned(),
        })?;
        let slot = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        match self.streams[slot].judge(t, self.newest, self.mode) {
            Verdict::Skip => return Ok(()),
            Verdict::Copy => {}
            Verdict::CopyOutOfOrder => {
                log::warn!(
                    "container {} of task {}: a {} log line is stamped {}, before lines already \
                     copied: the clock went back; from now on an agent restart reads this \
                     container's log from its start",
                    self.container_id,
                    self.task,
                    stream.as_str(),
                    Since::from_nanos(t)
                );
                // Saved before the line is written: an open after a crash between the two must
                // already count, or its `since` would leave this line out.
                self.mode = Mode::Counts;
                self.dirty = true;
                self.commit()?;
            }
        }
        let copy = &mut self.streams[slot];
        if let Err(source) = copy.file.write(bytes) {
            self.broken = Some(source.to_string());
            return Err(LogsError::Write {
                task: self.task.clone(),
                stream: stream.as_str(),
                source,
            });
        }
        copy.copied(t);
        self.newest = self.newest.max(Some(t));
        self.dirty = true;
        self.pending_frames += 1;
        self.pending_bytes += bytes.len() as u64;
        if self.pending_frames >= COMMIT_EVERY_FRAMES || self.pending_bytes >= COMMIT_EVERY_BYTES {
            self.commit()?;
        }
        Ok(())
    }

    /// Saves the cursor if anything changed since the last commit. Atomic (a temporary file
    /// renamed over it) but not fsync'd: what it must agree with, the log files, is not fsync'd
    /// either, and both survive a crash of the agent (the page cache belongs to the kernel). After
    /// a power loss the cursor may be ahead of the bytes that reached the disk (those lines are
    /// lost, as with any logger that does not fsync) or behind them (the next open cuts the files
    /// back to it and copies again: nothing is doubled).
    pub fn commit(&mut self) -> Result<(), LogsError> {
        self.check()?;
        if !self.dirty {
            return Ok(());
        }
        let [stdout, stderr] = &self.streams;
        let record = CursorRecord {
            version: CURSOR_VERSION,
            container_id: self.container_id.clone(),
            mode: self.mode,
            newest: self.newest,
            stdout: stdout.record(),
            stderr: stderr.record(),
        };
        if let Err(source) = write_cursor(&self.cursor, &record) {
            // The next open restores the files to the last cursor that was written.
            self.broken = Some(source.to_string());
            return Err(LogsError::Cursor {
                path: self.cursor.clone(),
                source,
            });
        }
        self.dirty = false;
        self.pending_frames = 0;
        self.pending_bytes = 0;
        Ok(())
    }

    fn check(&self) -> Result<(), LogsError> {
        match &self.broken {
            None => Ok(()),
            Some(cause) => Err(LogsError::Broken {
                task: self.task.clone(),
                cause: cause.clone(),
            }),
        }
    }
}

/// Splits a payload into its stamp (nanoseconds since the Unix epoch) and the message's bytes.
fn split_stamp(payload: &[u8]) -> Result<(u64, &[u8]), String> {
    // RFC 3339 with nanoseconds and an offset is at most 35 bytes.
    let space = payload.iter().take(40).position(|&b| b == b' ').ok_or(
        "no timestamp and space before the message (was the log asked with timestamps=1?)",
    )?;
    let text = std::str::from_utf8(&payload[..space]).map_err(|_| "the timestamp is not text")?;
    let time = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("the timestamp {text:?} is not RFC 3339: {e}"))?;
    let nanos = time
        .timestamp_nanos_opt()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("the timestamp {text:?} is out of range"))?;
    Ok((nanos, &payload[space + 1..]))
}

/// The cursor of `container_id` in `path`, if there is a usable one.
fn read_cursor(path: &Path, container_id: &str) -> Option<CursorRecord> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            log::warn!(
                "cannot read the log cursor {}: {e}; copying container {container_id}'s logs from its start",
                path.display()
            );
            return None;
        }
    };
    let record = serde_json::from_slice::<CursorRecord>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|r| {
            if r.consistent() {
                Ok(r)
            } else {
                Err(format!(
                    "version {} or its counts are not what nodeward writes",
                    r.version
                ))
            }
        });
    match record {
        Ok(r) if r.container_id == container_id => Some(r),
        Ok(r) => {
            log::info!(
                "the log cursor {} is of container {}: copying container {container_id}'s logs from its start",
                path.display(),
                r.container_id
            );
            None
        }
        Err(e) => {
            log::warn!(
                "the log cursor {} is unreadable ({e}); copying container {container_id}'s logs from its start",
                path.display()
            );
            None
        }
    }
}

fn write_cursor(path: &Path, record: &CursorRecord) -> io::Result<()> {
    let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} has no file name", path.display())))?;
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    fs::create_dir_all(dir).map_err(|e| on(dir, e))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| on(&tmp, e))?;
    file.write_all(&bytes).map_err(|e| on(&tmp, e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| on(path, e))
}

fn on(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const T0: u64 = 1_796_140_931_000_000_000; // 2026-12-01T16:02:11Z
    const SEC: u64 = NANOS;

    struct Fixture {
        root: PathBuf,
    }

    impl Fixture {
        fn new(tag: &str) -> Fixture {
            // The crash tests create and remove some 100,000 small files: on a tmpfs when there
            // is one, they take a second, not a minute (an ext4 mounted with `discard`).
            let name = format!(
                "nodeward-dlogs-{tag}-{}-{}",
                std::process::id(),
                fastrand::u64(..)
            );
            let logs = Path::new("alloc/a1/alloc/logs");
            let shm = Path::new("/dev/shm").join(&name);
            if fs::create_dir_all(shm.join(logs)).is_ok() {
                return Fixture { root: shm };
            }
            let root = std::env::temp_dir().join(name);
            fs::create_dir_all(root.join(logs)).unwrap();
            Fixture { root }
        }

        fn logs(&self) -> PathBuf {
            self.root.join("alloc/a1/alloc/logs")
        }

        fn cursor(&self) -> PathBuf {
            self.root.join("client/docker/a1/web.logs.json")
        }

        fn open(&self, container: &str, limits: (u32, u64)) -> LogCopier {
            LogCopier::open_sized(
                &self.root.join("alloc"),
                &self.logs(),
                "web",
                limits,
                self.cursor(),
                container,
            )
            .unwrap()
        }

        /// Every file of the log directory, by name.
        fn files(&self) -> BTreeMap<String, Vec<u8>> {
            fs::read_dir(self.logs())
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    (
                        e.file_name().into_string().unwrap(),
                        fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        }

        fn file(&self, name: &str) -> String {
            String::from_utf8(fs::read(self.logs().join(name)).unwrap()).unwrap()
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.root);
        }
    }

    /// A frame's payload as dockerd 20.10 sends it with `timestamps=1` (measured): RFC 3339 in UTC
    /// with exactly nine fraction digits, a space, the message's bytes.
    fn payload(t: u64, bytes: &[u8]) -> Vec<u8> {
        let time = chrono::DateTime::from_timestamp((t / SEC) as i64, (t % SEC) as u32).unwrap();
        let mut p = time
            .format("%Y-%m-%dT%H:%M:%S%.9fZ ")
            .to_string()
            .into_bytes();
        p.extend_from_slice(bytes);
        p
    }

    /// dockerd's log of one container: its messages in the order it keeps them, and its answer
    /// to `logs?timestamps=1&since=`, as measured against dockerd 20.10 with the json-file
    /// driver: every message stamped at or after `since` (to the nanosecond), in log order,
    /// whatever stamps come before or after it (the filter is per message, not a seek); no
    /// `since`: every message.
    struct Engine {
        log: Vec<(Stream, u64, Vec<u8>)>,
    }

    impl Engine {
        fn answer(&self, since: Option<Since>) -> Vec<(Stream, Vec<u8>)> {
            let from = since.map_or(0, Since::as_nanos);
            self.log
                .iter()
                .filter(|(_, t, _)| *t >= from)
                .map(|(s, t, b)| (*s, payload(*t, b)))
                .collect()
        }

        /// What each stream's files must hold once everything is copied.
        fn stream_bytes(&self, stream: Stream) -> Vec<u8> {
            self.log
                .iter()
                .filter(|(s, _, _)| *s == stream)
                .flat_map(|(_, _, b)| b.iter().copied())
                .collect()
        }
    }

    /// A log the way dockerd writes one: each stream's stamps never go back, but a message can be
    /// logged after the other stream's later-stamped one; stamps shared across streams; lines
    /// over the split size cut into pieces that share their first piece's stamp (the other stream
    /// may log between them); empty lines; the last line without a newline.
    fn busy_log(seed: u64, n: usize) -> Engine {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut now = T0;
        let mut last = [T0, T0];
        let mut log = Vec::new();
        let mut i = 0;
        while log.len() < n {
            let slot = rng.usize(0..2);
            let stream = [Stream::Stdout, Stream::Stderr][slot];
            // Stamped up to 3 µs before the clock: dockerd's reader stamps, then waits.
            let t = now.saturating_sub(rng.u64(0..3000)).max(last[slot]);
            last[slot] = t;
            let tag = stream.as_str().as_bytes()[3] as char; // 'o' or 'e'
            match rng.u8(0..10) {
                0 => log.push((stream, t, b"\n".to_vec())),
                1 => {
                    // A long line: pieces of up to 24 bytes, then its end with the newline.
                    let line = format!("{tag}{i} {}\n", "x".repeat(rng.usize(30..90)));
                    let pieces: Vec<&[u8]> = line.as_bytes().chunks(24).collect();
                    for (k, piece) in pieces.iter().enumerate() {
                        log.push((stream, t, piece.to_vec()));
                        if k == 0 && rng.bool() {
                            let other = 1 - slot;
                            let t2 = now.max(last[other]);
                            last[other] = t2;
                            let s2 = [Stream::Stdout, Stream::Stderr][other];
                            log.push((s2, t2, format!("between {i}\n").into_bytes()));
                        }
                    }
                }
                _ => {
                    let line = format!("{tag}{i} {}\n", "y".repeat(rng.usize(0..20)));
                    log.push((stream, t, line.into_bytes()));
                }
            }
            i += 1;
            now += rng.u64(0..2000);
        }
        log.push((Stream::Stdout, now.max(last[0]), b"no newline".to_vec()));
        Engine { log }
    }

    fn feed(c: &mut LogCopier, frames: &[(Stream, Vec<u8>)], commit_every: usize) {
        for (i, (stream, p)) in frames.iter().enumerate() {
            c.frame(*stream, p).unwrap();
            if (i + 1) % commit_every == 0 {
                c.commit().unwrap();
            }
        }
    }

    /// The files after one copier took the whole log, without a crash.
    fn reference(engine: &Engine, limits: (u32, u64)) -> BTreeMap<String, Vec<u8>> {
        let fx = Fixture::new("ref");
        let mut c = fx.open("c1", limits);
        assert_eq!(c.resume(), None);
        feed(&mut c, &engine.answer(None), usize::MAX);
        c.commit().unwrap();
        fx.files()
    }

    /// What a crash leaves besides the frames written since the last commit: a frame cut short
    /// in the newest file of each stream, and the next file begun by a rotation.
    fn tear(fx: &Fixture) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let dir = open_log_dir(&fx.root.join("alloc"), &fx.logs()).unwrap();
            if let Some(f) = nodeward_keeper::logs::log_files(&dir, "web", stream).last() {
                let path = fx.logs().join(&f.name);
                let mut bytes = fs::read(&path).unwrap();
                bytes.extend_from_slice(b"torn");
                fs::write(&path, bytes).unwrap();
                let next = format!("web.{}.{}", stream.as_str(), f.index + 1);
                fs::write(fx.logs().join(next), b"torn").unwrap();
            }
        }
    }

    #[test]
    fn lines_go_to_their_stream_without_their_timestamps() {
        let fx = Fixture::new("strip");
        let mut c = fx.open("c1", (10, 1 << 20));
        c.frame(Stream::Stdout, &payload(T0, b"one\n")).unwrap();
        c.frame(Stream::Stderr, &payload(T0 + 5, b"two\n")).unwrap();
        // The forms RFC 3339 allows besides dockerd's own read the same.
        c.frame(Stream::Stdout, b"2026-12-01T16:02:11.5Z three\n")
            .unwrap();
        c.frame(Stream::Stdout, b"2026-12-01T17:02:12+01:00 four\n")
            .unwrap();
        c.frame(Stream::Stdout, &payload(T0 + SEC, b"")).unwrap();
        // A frame without a timestamp: an error that says why, nothing written, and the copier
        // goes on.
        let e = c.frame(Stream::Stderr, b"no stamp here").unwrap_err();
        assert!(matches!(e, LogsError::Frame { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("stderr log frame of container c1"), "{msg}");
        assert!(msg.contains("not RFC 3339"), "{msg}");
        let e = c.frame(Stream::Stderr, b"nospaceatall").unwrap_err();
        assert!(e.to_string().contains("timestamps=1"), "{e}");
        c.frame(Stream::Stderr, &payload(T0 + 2 * SEC, b"five\n"))
            .unwrap();
        c.commit().unwrap();
        assert_eq!(fx.file("web.stdout.0"), "one\nthree\nfour\n");
        assert_eq!(fx.file("web.stderr.0"), "two\nfive\n");
        assert_eq!(fx.files().len(), 2);
    }

    #[test]
    fn rotates_at_max_file_size_and_keeps_max_files() {
        let engine = busy_log(7, 150);
        // Enough files to keep everything: the streams are whole and cut at the size limit.
        let all = reference(&engine, (1000, 64));
        for stream in [Stream::Stdout, Stream::Stderr] {
            let prefix = format!("web.{}.", stream.as_str());
            let mut files: Vec<(u64, &Vec<u8>)> = all
                .iter()
                .filter_map(|(name, b)| Some((name.strip_prefix(&prefix)?.parse().ok()?, b)))
                .collect();
            files.sort();
            assert!(
                files.len() > 5,
                "{} rotated only {} times",
                prefix,
                files.len()
            );
            let indices: Vec<u64> = files.iter().map(|f| f.0).collect();
            assert_eq!(indices, (0..files.len() as u64).collect::<Vec<_>>());
            for (i, bytes) in &files[..files.len() - 1] {
                assert_eq!(bytes.len(), 64, "{prefix}{i}");
            }
            let joined: Vec<u8> = files.iter().flat_map(|f| f.1.iter().copied()).collect();
            assert_eq!(joined, engine.stream_bytes(stream), "{prefix}*");
        }
        // Three files kept: the newest three of the above, the same bytes.
        let kept = reference(&engine, (3, 64));
        let mut expected = BTreeMap::new();
        for stream in ["stdout", "stderr"] {
            let prefix = format!("web.{stream}.");
            let newest: Vec<_> = {
                let mut v: Vec<_> = all
                    .iter()
                    .filter(|(n, _)| n.starts_with(&prefix))
                    .map(|(n, b)| (n[prefix.len()..].parse::<u64>().unwrap(), n, b))
                    .collect();
                v.sort();
                v.into_iter().rev().take(3).collect()
            };
            for (_, n, b) in newest {
                expected.insert(n.clone(), b.clone());
            }
        }
        assert_eq!(kept, expected);
    }

    #[test]
    fn messages_with_equal_timestamps_are_copied_once_each() {
        let fx = Fixture::new("equal");
        let limits = (10, 1 << 20);
        // A line over 16 KiB in three pieces that share one stamp, the same stamp on the other
        // stream, and the next line.
        let engine = Engine {
            log: vec![
                (Stream::Stdout, T0, b"piece one, ".to_vec()),
                (Stream::Stderr, T0, b"err\n".to_vec()),
                (Stream::Stdout, T0, b"piece two, ".to_vec()),
                (Stream::Stdout, T0, b"end\n".to_vec()),
                (Stream::Stdout, T0 + 1, b"next\n".to_vec()),
            ],
        };
        let answer = engine.answer(None);
        let mut c = fx.open("c1", limits);
        feed(&mut c, &answer[..3], usize::MAX);
        c.commit().unwrap();
        feed(&mut c, &answer[3..4], usize::MAX);
        drop(c); // a crash: "end\n" is past the cursor
        let mut c = fx.open("c1", limits);
        let since = c.resume().unwrap();
        assert_eq!(
            since.as_nanos(),
            T0,
            "the engine is asked from the shared stamp on"
        );
        assert_eq!(since.to_string(), format!("{}.000000000", T0 / SEC));
        let again = engine.answer(Some(since));
        assert_eq!(
            again.len(),
            5,
            "dockerd's since keeps messages stamped at it"
        );
        feed(&mut c, &again, usize::MAX);
        c.commit().unwrap();
        assert_eq!(fx.file("web.stdout.0"), "piece one, piece two, end\nnext\n");
        assert_eq!(fx.file("web.stderr.0"), "err\n");
    }

    /// The requirement itself: an agent killed at any point of the copy (after any frame, with
    /// or without commits, with a frame or a rotation cut short) and opened again while the
    /// container's log has grown gives exactly the files of a copy that never stopped, byte for
    /// byte, rotation and removal of old files included.
    #[test]
    fn a_crash_at_any_point_gives_exactly_the_files_of_an_uninterrupted_copy() {
        let engine = busy_log(42, 90);
        let full = engine.answer(None);
        for limits in [(3, 40), (1, 40), (100, 1 << 20)] {
            let expected = reference(&engine, limits);
            for every in [1, 3, 7, usize::MAX] {
                for cut in 0..=full.len() {
                    let fx = Fixture::new("crash");
                    let mut c = fx.open("c1", limits);
                    feed(&mut c, &full[..cut], every);
                    drop(c);
                    if cut % 2 == 1 {
                        tear(&fx);
                    }
                    let mut c = fx.open("c1", limits);
                    let answer = engine.answer(c.resume());
                    // A second crash part-way through the replay, now and then.
                    if cut % 5 == 0 {
                        feed(&mut c, &answer[..answer.len() / 2], every);
                        drop(c);
                        c = fx.open("c1", limits);
                        let answer = engine.answer(c.resume());
                        feed(&mut c, &answer, every);
                    } else {
                        feed(&mut c, &answer, every);
                    }
                    c.commit().unwrap();
                    assert_eq!(
                        fx.files(),
                        expected,
                        "limits {limits:?}, commit every {every}, crash after {cut} frames"
                    );
                }
            }
        }
    }

    /// A stream that ends early (dockerd can end a follow stream at the container's exit before
    /// the end of its log) is asked for again without a restart: nothing is copied twice.
    #[test]
    fn asking_the_engine_again_copies_nothing_twice() {
        let engine = busy_log(11, 80);
        let full = engine.answer(None);
        let limits = (3, 40);
        let expected = reference(&engine, limits);
        for every in [1, 6, usize::MAX] {
            for cut in 0..=full.len() {
                let fx = Fixture::new("again");
                let mut c = fx.open("c1", limits);
                let first = engine.answer(c.resume());
                feed(&mut c, &first[..cut], every);
                let second = engine.answer(c.resume());
                // Cut short again, and asked once more.
                feed(&mut c, &second[..second.len() / 3], every);
                let third = engine.answer(c.resume());
                feed(&mut c, &third, every);
                c.commit().unwrap();
                assert_eq!(fx.files(), expected, "commit every {every}, cut {cut}");
            }
        }
    }

    #[test]
    fn since_is_the_earliest_stamp_a_message_not_copied_can_have() {
        let fx = Fixture::new("since");
        let margin = REORDER_MARGIN.as_nanos() as u64;
        let mut c = fx.open("c1", (10, 1 << 20));
        assert_eq!(c.since(), None, "nothing copied: the whole log");
        c.frame(Stream::Stdout, &payload(T0 + 100 * SEC, b"a\n"))
            .unwrap();
        // stderr has said nothing: it can only be behind by the reordering margin.
        assert_eq!(c.since().unwrap().as_nanos(), T0 + 100 * SEC - margin);
        c.frame(Stream::Stderr, &payload(T0 + 100 * SEC + 7, b"b\n"))
            .unwrap();
        assert_eq!(c.since().unwrap().as_nanos(), T0 + 100 * SEC);
        // stdout quiet for a minute: not a minute of replay, the margin.
        c.frame(Stream::Stderr, &payload(T0 + 160 * SEC, b"c\n"))
            .unwrap();
        assert_eq!(c.since().unwrap().as_nanos(), T0 + 160 * SEC - margin);
        c.commit().unwrap();
        let c = fx.open("c1", (10, 1 << 20));
        assert_eq!(
            c.since().unwrap(),
            Since {
                secs: T0 / SEC + 150,
                nanos: 0
            }
        );
    }

    /// A wall clock that goes back while the copier watches: the copier counts from then on, so
    /// a crash after it saw the step still loses and doubles nothing.
    #[test]
    fn a_clock_that_goes_back_switches_to_counting() {
        let mut engine = busy_log(3, 60);
        let step = engine.log.len() / 2;
        // From `step` on, stdout is stamped 30 s earlier; later, stderr 1 s (inside the margin,
        // but before its own last stamp).
        let back = engine.log.len() * 3 / 4;
        for (i, (stream, t, _)) in engine.log.iter_mut().enumerate() {
            if i >= step && *stream == Stream::Stdout {
                *t -= 30 * SEC;
            }
            if i >= back && *stream == Stream::Stderr {
                *t -= SEC;
            }
        }
        let first_back = (step..engine.log.len())
            .find(|&i| engine.log[i].0 == Stream::Stdout)
            .unwrap();
        let full = engine.answer(None);
        let limits = (3, 40);
        let expected = reference(&engine, limits);
        // Committed now and then; or last committed just before the first line stamped back,
        // with everything after it lost in the crash but what the copier saved when it saw it.
        for (every, commit_before_step) in [(1, false), (4, false), (usize::MAX, true)] {
            for cut in first_back + 1..=full.len() {
                let fx = Fixture::new("clock");
                let mut c = fx.open("c1", limits);
                if commit_before_step {
                    feed(&mut c, &full[..first_back], usize::MAX);
                    c.commit().unwrap();
                    assert!(c.since().is_some());
                    feed(&mut c, &full[first_back..cut], usize::MAX);
                } else {
                    feed(&mut c, &full[..cut], every);
                }
                assert_eq!(c.since(), None, "counting from the container's start");
                drop(c);
                let mut c = fx.open("c1", limits);
                let answer = engine.answer(c.resume());
                assert_eq!(c.since(), None);
                feed(&mut c, &answer, every);
                c.commit().unwrap();
                assert_eq!(fx.files(), expected, "commit every {every}, cut {cut}");
            }
        }
    }

    #[test]
    fn a_cursor_of_another_container_is_not_used() {
        let fx = Fixture::new("foreign");
        let limits = (10, 1 << 20);
        let mut c = fx.open("old", limits);
        c.frame(Stream::Stdout, &payload(T0, b"one\n")).unwrap();
        c.commit().unwrap();
        c.frame(Stream::Stdout, &payload(T0 + 1, b"two\n")).unwrap();
        drop(c);
        // The task's next run, a new container: the files are the previous run's, kept whole
        // (nothing cut back to the old cursor), and the new container's lines follow them.
        let mut c = fx.open("new", limits);
        assert_eq!(c.since(), None);
        assert_eq!(fx.file("web.stdout.0"), "one\ntwo\n");
        c.frame(Stream::Stdout, &payload(T0 + 2, b"three\n"))
            .unwrap();
        drop(c);
        // Its cursor was written at open, before any line: the crash cuts "three" away only.
        let c = fx.open("new", limits);
        assert_eq!(
            c.since(),
            None,
            "nothing of the new container committed yet"
        );
        assert_eq!(fx.file("web.stdout.0"), "one\ntwo\n");
    }

    #[test]
    fn an_unreadable_cursor_starts_from_the_container_start_and_changes_no_file() {
        let limits = (10, 1 << 20);
        let garbage: [&[u8]; 4] = [
            b"not json",
            b"",
            // Well-formed, but not what a copier writes: a stamp with no message at it.
            br#"{"Version":1,"ContainerID":"c1","Mode":"stamps","Newest":5,
                "Stdout":{"Last":5,"AtLast":0,"Total":1,"File":0,"Size":0},
                "Stderr":{"Last":null,"AtLast":0,"Total":0,"File":0,"Size":0}}"#,
            br#"{"Version":2,"ContainerID":"c1"}"#,
        ];
        for bytes in garbage {
            let fx = Fixture::new("garbage");
            fs::write(fx.logs().join("web.stdout.0"), "old\n").unwrap();
            fs::create_dir_all(fx.cursor().parent().unwrap()).unwrap();
            fs::write(fx.cursor(), bytes).unwrap();
            let mut c = fx.open("c1", limits);
            assert_eq!(c.since(), None);
            assert_eq!(fx.file("web.stdout.0"), "old\n");
            c.frame(Stream::Stdout, &payload(T0, b"new\n")).unwrap();
            c.commit().unwrap();
            let c = fx.open("c1", limits);
            assert_eq!(
                c.since().unwrap().as_nanos(),
                T0 - REORDER_MARGIN.as_nanos() as u64
            );
            assert_eq!(fx.file("web.stdout.0"), "old\nnew\n");
        }
    }

    #[test]
    fn a_failed_write_stops_the_copier_until_it_is_opened_again() {
        let fx = Fixture::new("broken");
        fs::create_dir(fx.logs().join("web.stdout.0")).unwrap();
        let mut c = fx.open("c1", (10, 1 << 20));
        let e = c.frame(Stream::Stdout, &payload(T0, b"a\n")).unwrap_err();
        assert!(
            matches!(e, LogsError::Write { .. }) && e.to_string().contains("is a directory"),
            "{e}"
        );
        // The other stream, or a commit, is refused too: the files are not what it accounts for.
        let e = c.frame(Stream::Stderr, &payload(T0, b"b\n")).unwrap_err();
        assert!(matches!(e, LogsError::Broken { .. }), "{e}");
        assert!(e.to_string().contains("open it again"), "{e}");
        assert!(matches!(c.commit(), Err(LogsError::Broken { .. })));
    }
}
