//! The state file: `<data_dir>/state.json`, what must survive an agent restart.
//!
//! Protocol: every subsystem that owns persistent data (allocations, CSI plugins, host volumes)
//! registers a [`Snapshot`] source. [`StateStore::save`] asks each source to fill a fresh
//! [`StateFile`] (each takes its own registry lock only for that copy) and writes the whole file
//! atomically and durably: temp file in the same directory, fsync, rename over the old file, fsync
//! the directory. A crash at any instant leaves the old or the new file, never a mix.
//!
//! [`StateStore::save`] is synchronous: callers that acknowledge something to a user (a volume
//! create) call it before answering. A change that must be on disk before it is made at all (a job
//! registration: nothing may be killed or started for a change that is then lost) goes through a
//! [`Transaction`]: the caller holds the write lock, stages the change where its `Snapshot::fill`
//! sees it, saves, and only makes the change once the write succeeded, still under the lock, so
//! no other write can land in between. [`StateStore::save_soon`] marks the state dirty for the
//! flusher thread, which coalesces bursts (task events) into one write within [`FLUSH_DELAY`].
//!
//! A write that fails (a full disk, a read-only remount) is retried by the flusher until one
//! succeeds, with a backoff from [`RETRY_FIRST`] to [`RETRY_MAX`]: the in-memory state is then
//! newer than the file, and [`StateStore::failing`] says so (`/v1/agent/health`). One warning is
//! logged when such a failure streak begins and one line when it ends, not one per attempt.
//!
//! Lock: `write` serialises writers, so two saves never interleave on disk and the last write holds
//! the newest snapshot. It is the only lock here held across I/O, by design; no registry lock is
//! ever taken while it is held except inside `Snapshot::fill`, which copies and returns, and a
//! [`Transaction`]'s commit, which changes a registry and returns. `failing` is a leaf.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::records::{AllocRecord, JobRecord, PluginRecord, VolumeRecord};

/// The version this build writes. Older files are upgraded on load; newer ones are refused.
///
/// - 1: the first format.
/// - 2: tasks outlive the agent (live-restore.md): a task's driver handle (`Handle`), the restart
///   delay's deadline (`RestartAt`) and the restart tracker's window (`RestartWindowStart`,
///   `RestartWindowCount`). A version-1 task has a `PID` and `PidStartTicks` only: a child of the
///   agent that wrote it, which the runner stops and starts again under the keeper.
pub const STATE_VERSION: u32 = 2;
pub const STATE_FILE: &str = "state.json";
/// How long the flusher waits to gather a burst of changes into one write.
pub const FLUSH_DELAY: Duration = Duration::from_millis(50);
/// The least time between two background writes: each rewrites the whole file, so a thousand
/// crash-looping tasks must not turn into a thousand writes a second.
pub const FLUSH_SPACING: Duration = Duration::from_millis(500);
/// The first wait before a failed write is tried again; it doubles up to [`RETRY_MAX`].
pub const RETRY_FIRST: Duration = FLUSH_SPACING;
/// The longest wait between two attempts to write a state file that cannot be written: how long
/// the agent may take to notice that the disk has room again.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read state file {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("state file {path} is corrupt: {reason}; it was left untouched. Start the agent with -fresh-state to move it aside (it is kept as {path}.corrupt-<time>) and start empty")]
    Corrupt { path: PathBuf, reason: String },
    #[error("state file {path} has version {found}, newer than this nodeward understands ({supported}); upgrade nodeward or restore an older state file")]
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("cannot write state file {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("another nodeward agent (pid {pid}) holds {}", data_dir.display())]
    Held { pid: String, data_dir: PathBuf },
    #[error("cannot lock the data directory {}: {source}", path.display())]
    Lock { path: PathBuf, source: io::Error },
}

/// The lock file in the data directory; holds the PID of the agent that owns it.
pub const LOCK_FILE: &str = "agent.lock";

/// An exclusive `flock` on `<data_dir>/agent.lock`, held for the agent's whole life: one agent per
/// data directory (live-restore.md). The kernel drops it when the process ends, however it ends,
/// so a crashed agent never leaves a stale lock. The descriptor is close-on-exec: a task never
/// inherits it (it would otherwise keep the lock after the agent is gone).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock, creating the data directory (0700) if needed, and records this process's
    /// PID in the lock file. Fails at once, changing nothing, when another process holds it.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, StateError> {
        let path = data_dir.join(LOCK_FILE);
        let err = |source| StateError::Lock {
            path: path.clone(),
            source,
        };
        private_dir(data_dir).map_err(err)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(err)?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(StateError::Held {
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                    data_dir: data_dir.to_path_buf(),
                });
            }
            return Err(err(e));
        }
        file.set_len(0).map_err(err)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(err)?;
        file.sync_all().map_err(err)?;
        Ok(DataDirLock { _file: file })
    }
}

/// Everything in `state.json`. Sections belong to their subsystems; this file only stores them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StateFile {
    pub version: u32,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(default)]
    pub jobs: Vec<JobRecord>,
    #[serde(default)]
    pub allocations: Vec<AllocRecord>,
    #[serde(default, rename = "CSIPlugins")]
    pub csi_plugins: Vec<PluginRecord>,
    #[serde(default)]
    pub host_volumes: Vec<VolumeRecord>,
}

/// A subsystem that owns a section of the state file.
pub trait Snapshot: Send + Sync {
    /// Copies this subsystem's persistent data into `out`. Takes its own lock only for the copy.
    fn fill(&self, out: &mut StateFile);
}

/// A failure streak: the state file could not be written since `since`, in `attempts` tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When the first failed write of the streak was tried (RFC 3339, UTC).
    pub since: String,
    pub attempts: u64,
    /// The last attempt's error.
    pub error: String,
}

pub struct StateStore {
    path: PathBuf,
    node_id: String,
    /// Guards: the file on disk (serialises writers); the value counts writes done.
    write: Mutex<u64>,
    /// Guards: the current failure streak, set by a failed write and cleared by the next one that
    /// succeeds. A leaf: taken under `write` for the update, never across I/O or a log line.
    failing: Mutex<Option<Failing>>,
    /// Guards: the list of sources. Set up at start, read by every save.
    sources: Mutex<Vec<Arc<dyn Snapshot>>>,
    dirty: Sender<()>,
    dirty_rx: Receiver<()>,
}

impl StateStore {
    /// Opens `<data_dir>/state.json`, creating the data directory (0700) if needed. Returns the store
    /// and what the file held (an empty state with a new node ID when there was no file).
    /// A file that does not parse is never overwritten: unless `fresh` is set, that is an error; with
    /// `fresh` it is renamed to `state.json.corrupt-<time>` and the agent starts empty.
    pub fn open(data_dir: &Path, fresh: bool) -> Result<(Arc<StateStore>, StateFile), StateError> {
        let path = data_dir.join(STATE_FILE);
        let write_err = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        private_dir(data_dir).map_err(write_err)?;
        let state = match fs::read(&path) {
            Ok(bytes) => match decode(&path, &bytes) {
                Ok(state) => state,
                Err(StateError::Corrupt { .. }) if fresh => {
                    let aside = PathBuf::from(format!(
                        "{}.corrupt-{}",
                        path.display(),
                        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
                    ));
                    fs::rename(&path, &aside).map_err(write_err)?;
                    log::warn!(
                        "state file {} was corrupt; kept it as {} and started empty",
                        path.display(),
                        aside.display()
                    );
                    new_state()
                }
                Err(e) => return Err(e),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => new_state(),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        let (dirty, dirty_rx) = bounded(1);
        let store = Arc::new(StateStore {
            path,
            node_id: state.node_id.clone(),
            write: Mutex::new(0),
            failing: Mutex::new(None),
            sources: Mutex::new(Vec::new()),
            dirty,
            dirty_rx,
        });
        Ok((store, state))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn register(&self, source: Arc<dyn Snapshot>) {
        self.sources.lock().push(source);
    }

    /// Writes the current state now, durably. Returns once it is on disk. A failure is retried
    /// by the flusher until a write succeeds.
    pub fn save(&self) -> Result<(), StateError> {
        self.transaction().save()
    }

    /// Takes the write lock for a change that must be on disk before it is made: see
    /// [`Transaction`]. No other write happens until it is dropped.
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction {
            store: self,
            writes: self.write.lock(),
        }
    }

    /// The current failure streak, if the last write failed: the state file is then older than
    /// the agent's state, and stays so until a write succeeds (the flusher keeps trying).
    pub fn failing(&self) -> Option<Failing> {
        self.failing.lock().clone()
    }

    /// Serialises and writes every source's section. The caller holds the write lock.
    fn write_file(&self) -> Result<(), StateError> {
        let mut state = StateFile {
            version: STATE_VERSION,
            node_id: self.node_id.clone(),
            ..StateFile::default()
        };
        let sources = self.sources.lock().clone();
        for source in &sources {
            source.fill(&mut state);
        }
        let bytes = serde_json::to_vec(&state).map_err(|e| StateError::Write {
            path: self.path.clone(),
            source: io::Error::other(e),
        })?;
        drop(state);
        let written = write_atomic(&self.path, &bytes);
        drop(bytes);
        release_free_memory();
        written.map_err(|source| StateError::Write {
            path: self.path.clone(),
            source,
        })
    }

    /// Keeps the failure streak up to date after a write, and logs its start and its end: one
    /// warning per streak, whatever the number of attempts.
    fn record(&self, result: &Result<(), StateError>) {
        enum Note {
            Began,
            Ended(Failing),
        }
        let note = {
            let mut failing = self.failing.lock();
            match (result, failing.as_mut()) {
                (Err(e), None) => {
                    *failing = Some(Failing {
                        since: chrono::Utc::now()
                            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        attempts: 1,
                        error: e.to_string(),
                    });
                    Some(Note::Began)
                }
                (Err(e), Some(streak)) => {
                    streak.attempts += 1;
                    streak.error = e.to_string();
                    None
                }
                (Ok(()), Some(_)) => failing.take().map(Note::Ended),
                (Ok(()), None) => None,
            }
        };
        match (note, result) {
            (Some(Note::Began), Err(e)) => log::warn!(
                "{e}; the agent keeps trying (every {RETRY_MAX:?} at most) and reports the state \
                 as not durable in /v1/agent/health until a write succeeds"
            ),
            (Some(Note::Ended(streak)), _) => log::info!(
                "state file {} written again, after {} failed attempts since {}",
                self.path.display(),
                streak.attempts,
                streak.since
            ),
            _ => {}
        }
    }

    /// Checks, before the agent adopts or starts any task, that the state file can be written:
    /// a probe file twice the state file's size (at least 64 KiB) is written next to it, synced
    /// and removed. A full disk or a read-only data directory fails here, not after tasks ran.
    pub fn check_writable(&self) -> Result<(), StateError> {
        let err = |source| StateError::Write {
            path: self.path.clone(),
            source,
        };
        let size = fs::metadata(&self.path).map_or(0, |m| m.len());
        let probe = self.path.with_file_name(".state.json.probe");
        let bytes = vec![b' '; (2 * size).max(64 * 1024) as usize];
        let written = write_atomic(&probe, &bytes);
        let _ = fs::remove_file(&probe);
        written.map_err(err)
    }

    /// Marks the state dirty; the flusher writes it within about [`FLUSH_DELAY`].
    pub fn save_soon(&self) {
        let _ = self.dirty.try_send(());
    }

    /// Writes done since start.
    pub fn writes(&self) -> u64 {
        *self.write.lock()
    }

    /// The flusher loop: run it on a thread of its own. Ends when `stop` disconnects, after a last
    /// write if anything was pending. A write that fails is tried again, with a backoff, until
    /// one succeeds: the dirty mark is only gone once the state is on disk.
    pub fn run_flusher(&self, stop: Receiver<crate::thread::Never>) {
        let mut last_write: Option<std::time::Instant> = None;
        loop {
            crossbeam_channel::select! {
                recv(self.dirty_rx) -> _ => {
                    // Gather the burst, and keep background writes apart, unless a stop comes.
                    let spacing = last_write
                        .map(|t| FLUSH_SPACING.saturating_sub(t.elapsed()))
                        .unwrap_or_default();
                    crossbeam_channel::select! {
                        recv(stop) -> _ => {
                            let _ = self.save();
                            return;
                        }
                        default(FLUSH_DELAY.max(spacing)) => {}
                    }
                    let mut backoff = RETRY_FIRST;
                    loop {
                        // Marks made before this write are covered by it.
                        let _ = self.dirty_rx.try_recv();
                        if self.save().is_ok() {
                            break;
                        }
                        crossbeam_channel::select! {
                            recv(stop) -> _ => {
                                // The shutdown writes once more and reports a failure.
                                return;
                            }
                            default(backoff) => {}
                        }
                        backoff = (backoff * 2).min(RETRY_MAX);
                    }
                    last_write = Some(std::time::Instant::now());
                }
                recv(stop) -> _ => {
                    if self.dirty_rx.try_recv().is_ok() {
                        let _ = self.save();
                    }
                    return;
                }
            }
        }
    }
}

/// The write lock, held for a change that must be on disk before it is made (see the module
/// doc): stage the change where the owner's [`Snapshot::fill`] sees it, [`Transaction::save`],
/// and make it only if that succeeded, before the transaction is dropped.
pub struct Transaction<'a> {
    store: &'a StateStore,
    writes: parking_lot::MutexGuard<'a, u64>,
}

impl Transaction<'_> {
    /// Writes the state as the sources fill it now (staged changes included), durably. A failure
    /// starts (or continues) a failure streak, which the flusher retries.
    pub fn save(&mut self) -> Result<(), StateError> {
        let result = self.store.write_file();
        self.store.record(&result);
        match result {
            Ok(()) => *self.writes += 1,
            // Whatever the caller does about its change, the rest of the state is not on disk
            // either: the flusher tries again until it is.
            Err(_) => self.store.save_soon(),
        }
        result
    }
}

/// A save copies and serialises the whole state, then frees it all; give those pages back so the
/// agent's footprint is what it keeps, not its high-water mark.
fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Creates the data directory if needed, mode 0700 whatever the umask.
fn private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

fn new_state() -> StateFile {
    StateFile {
        version: STATE_VERSION,
        node_id: uuid::Uuid::new_v4().to_string(),
        ..StateFile::default()
    }
}

/// Parses a state file, upgrading older versions and refusing newer ones.
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
    // One upgrade step per version. 1 -> 2 only adds fields, which default to "not recorded".
    let mut state: StateFile = serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?;
    if state.version < 2 {
        log::info!(
            "state file {} has version {}: upgrading it to {STATE_VERSION}",
            path.display(),
            state.version
        );
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
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("nodeward-state-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn new_state_gets_a_node_id_and_modes() {
        let dir = tempdir().join("data");
        let (store, state) = StateStore::open(&dir, false).unwrap();
        assert!(uuid::Uuid::parse_str(&state.node_id).is_ok());
        store.save().unwrap();
        let mode = fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(dmode, 0o700);
        let (_, again) = StateStore::open(&dir, false).unwrap();
        assert_eq!(again.node_id, state.node_id);
    }

    fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A background write that fails is tried again until one succeeds (the dirty mark is not
    /// consumed by the failure), and the streak is reported meanwhile. A directory where the
    /// temporary file goes makes every write fail, even as root.
    #[test]
    fn the_flusher_retries_a_failed_write_until_it_succeeds() {
        let dir = tempdir();
        let (store, _) = StateStore::open(&dir, false).unwrap();
        let blocker = dir.join(".state.json.tmp");
        fs::create_dir(&blocker).unwrap();
        let (stop_tx, stop) = bounded::<crate::thread::Never>(0);
        let flusher = {
            let store = store.clone();
            std::thread::spawn(move || store.run_flusher(stop))
        };
        store.save_soon();
        eventually("two failed attempts", || {
            store.failing().is_some_and(|f| f.attempts >= 2)
        });
        let failing = store.failing().unwrap();
        assert!(
            failing.error.starts_with("cannot write state file "),
            "{failing:?}"
        );
        assert_eq!(store.writes(), 0);
        assert!(!store.path().exists());
        fs::remove_dir(&blocker).unwrap();
        eventually("the retry to succeed", || store.failing().is_none());
        assert_eq!(store.writes(), 1);
        assert!(store.path().exists());
        drop(stop_tx);
        flusher.join().unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_agent_per_data_directory() {
        let dir = tempdir().join("data");
        let held = DataDirLock::acquire(&dir).unwrap();
        let pid = std::process::id().to_string();
        assert_eq!(fs::read_to_string(dir.join(LOCK_FILE)).unwrap().trim(), pid);
        // flock locks belong to the open file: a second open, even in this process, is refused.
        let err = DataDirLock::acquire(&dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("another nodeward agent (pid {pid}) holds {}", dir.display())
        );
        drop(held);
        let again = DataDirLock::acquire(&dir).unwrap();
        let mode = fs::metadata(dir.join(LOCK_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        drop(again);
    }

    #[test]
    fn corrupt_file_is_refused_and_kept() {
        let dir = tempdir();
        fs::write(dir.join(STATE_FILE), b"{\"Version\": 1, \"NodeID\": ").unwrap();
        let err = StateStore::open(&dir, false).err().unwrap();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
        assert_eq!(
            fs::read(dir.join(STATE_FILE)).unwrap(),
            b"{\"Version\": 1, \"NodeID\": "
        );
        let (_, state) = StateStore::open(&dir, true).unwrap();
        assert!(state.jobs.is_empty());
        let kept = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains(".corrupt-"));
        assert!(kept);
    }

    #[test]
    fn newer_version_is_refused() {
        let dir = tempdir();
        let body = format!(
            "{{\"Version\": 99, \"NodeID\": \"{}\"}}",
            uuid::Uuid::new_v4()
        );
        fs::write(dir.join(STATE_FILE), body).unwrap();
        let err = StateStore::open(&dir, true).err().unwrap();
        assert!(matches!(err, StateError::TooNew { found: 99, .. }), "{err}");
    }
}
