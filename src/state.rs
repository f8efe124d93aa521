//! The state: what must survive an agent restart. On disk it is a snapshot, `<data_dir>/state.json`
//! ([`snapshot`]), continued by a journal of the changes written since, `<data_dir>/state.journal`
//! ([`journal`]): the state is the snapshot with the journal's records applied in order.
//!
//! Protocol: every subsystem that owns persistent data (allocations, CSI plugins, host volumes)
//! registers a source. A write ([`StateStore::save`]) asks each source for its entries (each
//! takes its own registry lock only for that copy), compares them with what the files hold
//! ([`delta::Written`]: a fingerprint per entry) and appends the entries that differ, and the keys
//! of those that are gone, as one record to the journal, fsync'd before it returns: a write costs
//! what changed, not what exists. A source whose section can grow without bound (host volumes)
//! is *keyed* ([`KeyedSnapshot`]): it names each entry it changes ([`StateStore::changed`],
//! [`StateStore::save_entries`]) and a write asks it for those entries only, never for the
//! section whole. The other sources are compared whole on each write ([`Snapshot`]); they are
//! bounded by the allocations a node keeps.
//!
//! When the journal grows past the snapshot (and at least [`JOURNAL_MIN_BOUND`]), a write
//! compacts instead: the whole state becomes a new snapshot (temp file, fsync, rename over
//! `state.json`, fsync the directory) with a new `JournalID`, then a fresh journal naming that
//! ID takes the old one's place the same way. A crash at any instant leaves the old snapshot and
//! journal, or the new snapshot with the old journal (which names the old ID and is ignored: the
//! new snapshot holds all of it), or the new pair. The first write after start compacts too (the
//! journal may end in a record a crash cut short), so does the first after a failed write (the
//! journal may end in a refused record), and the clean shutdown's last write
//! ([`StateStore::save_compacted`]), which removes the journal: after a clean stop `state.json`
//! alone holds the state.
//!
//! [`StateStore::save`] is synchronous: callers that acknowledge something to a user (a volume
//! create) call it before answering. A change that must be on disk before it is made at all (a job
//! registration: nothing may be killed or started for a change that is then lost) goes through a
//! [`Transaction`]: the caller holds the write lock, stages the change where its `Snapshot::fill`
//! sees it, saves, and only makes the change once the write succeeded, still under the lock, so
//! no other write can land in between. A write is one journal record, replayed whole or not at
//! all. [`StateStore::save_soon`] marks the state dirty for the flusher thread, which coalesces
//! bursts (task events) into one write within [`FLUSH_DELAY`].
//!
//! A write that fails (a full disk, a read-only remount) is retried by the flusher until one
//! succeeds, with a backoff from [`RETRY_FIRST`] to [`RETRY_MAX`]: the in-memory state is then
//! newer than the files, and [`StateStore::failing`] says so (`/v1/agent/health`). One warning is
//! logged when such a failure streak begins and one line when it ends, not one per attempt.
//!
//! Locks: `disk` serialises writers, so two writes never interleave on disk and the last write
//! holds the newest state. It is the only lock here held across I/O, by design; no registry lock
//! is ever taken while it is held except inside `Snapshot::fill` and `KeyedSnapshot::fill_keys`,
//! which copy and return, and a [`Transaction`]'s commit, which changes a registry and returns.
//! `changed` and `failing` are leaves; `sources` is copied and released.

mod delta;
mod journal;
mod lock;
mod snapshot;

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};

use delta::{Delta, Named, Written};
use journal::Found;

pub use delta::{Key, Section};
pub use journal::{PluginKey, JOURNAL_FILE};
pub use lock::{DataDirLock, LOCK_FILE};
pub use snapshot::{decode, write_atomic, StateFile, STATE_FILE, STATE_VERSION};

/// How long the flusher waits to gather a burst of changes into one write.
pub const FLUSH_DELAY: Duration = Duration::from_millis(50);
/// The least time between two background writes: each compares every allocation, so a thousand
/// crash-looping tasks must not turn into a thousand writes a second.
pub const FLUSH_SPACING: Duration = Duration::from_millis(500);
/// The first wait before a failed write is tried again; it doubles up to [`RETRY_MAX`].
pub const RETRY_FIRST: Duration = FLUSH_SPACING;
/// The longest wait between two attempts to write a state file that cannot be written: how long
/// the agent may take to notice that the disk has room again.
pub const RETRY_MAX: Duration = Duration::from_secs(5);
/// The journal is compacted once it would grow past the snapshot's size, and never below this:
/// a small state is not rewritten every few writes, and replaying the journal at start reads at
/// most about twice the state. Compacting when the journal is as large as the snapshot keeps
/// what a write costs, compactions included, within about twice what it changed.
pub const JOURNAL_MIN_BOUND: u64 = 1 << 20;

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

/// A subsystem that owns a section of the state file.
pub trait Snapshot: Send + Sync {
    /// Copies this subsystem's persistent data into `out`. Takes its own lock only for the copy.
    fn fill(&self, out: &mut StateFile);
}

/// A subsystem that names every entry of its section it changes ([`StateStore::changed`] or
/// [`StateStore::save_entries`], after the change), so that a write asks it for those entries
/// only. [`Snapshot::fill`] still gives the whole section, for a compaction.
pub trait KeyedSnapshot: Snapshot {
    /// The section it owns.
    fn section(&self) -> Section;
    /// Copies into `out` those of `keys` (all of its section) that it holds now; a key whose
    /// entry it does not copy is gone from the state. Takes its own lock only for the copy.
    fn fill_keys(&self, keys: &[Key], out: &mut StateFile);
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

/// What the store knows of the files on disk; guarded by the write lock.
struct Disk {
    /// Writes done since start.
    writes: u64,
    /// The fingerprint of every entry the files hold.
    written: Written,
    snapshot_len: u64,
    journal_len: u64,
    /// The next write compacts: the first after start, the first after a failed write, and any
    /// after a compaction that could not start its journal.
    compact: bool,
    /// The least size past which the journal is compacted: [`JOURNAL_MIN_BOUND`] (tests lower it).
    min_bound: u64,
}

#[derive(Clone, Default)]
struct Sources {
    compared: Vec<Arc<dyn Snapshot>>,
    keyed: Vec<Arc<dyn KeyedSnapshot>>,
}

/// What a write covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cover {
    /// Everything that changed.
    All,
    /// The entries named changed (keyed sections) only; the rest waits for the flusher.
    Named,
    /// Everything, as a new snapshot, and no journal after it (the clean shutdown).
    Final,
}

pub struct StateStore {
    path: PathBuf,
    journal: PathBuf,
    node_id: String,
    /// Guards: the files on disk (serialises writers), and what the store knows of them.
    disk: Mutex<Disk>,
    /// Guards: the current failure streak, set by a failed write and cleared by the next one that
    /// succeeds. A leaf: taken under `disk` for the update, never across I/O or a log line.
    failing: Mutex<Option<Failing>>,
    /// Guards: the list of sources. Set up at start, read by every save.
    sources: Mutex<Sources>,
    /// Guards: the entries of keyed sections changed since the write that took them. A leaf.
    changed: Mutex<BTreeSet<Key>>,
    dirty: Sender<()>,
    dirty_rx: Receiver<()>,
}

/// Reads the state as an agent starting now would (the snapshot, its journal replayed), changing
/// nothing. A journal's damaged tail is left out with a warning; see [`journal`].
pub fn read(data_dir: &Path) -> Result<StateFile, StateError> {
    let path = data_dir.join(STATE_FILE);
    let mut state = match fs::read(&path) {
        Ok(bytes) => decode(&path, &bytes)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => snapshot::new_state(),
        Err(source) => return Err(StateError::Read { path, source }),
    };
    if state.journal_id.is_empty() {
        return Ok(state);
    }
    let jpath = data_dir.join(JOURNAL_FILE);
    match journal::read(&jpath, &state.journal_id)? {
        Found::Nothing => {}
        Found::Stale(id) => log::info!(
            "state journal {} continues an earlier snapshot ({id}, not {}): a compaction was \
             interrupted once the new snapshot was in place; the snapshot holds all of it",
            jpath.display(),
            state.journal_id
        ),
        Found::Writes {
            batches, dropped, ..
        } => {
            if let Some(d) = dropped {
                log::warn!(
                    "state journal {}: ignored the last {} bytes, from offset {} ({}): a write \
                     that a crash cut short, never acknowledged",
                    jpath.display(),
                    d.bytes,
                    d.offset,
                    d.why
                );
            }
            delta::apply(&mut state, batches);
        }
    }
    Ok(state)
}

impl StateStore {
    /// Opens the state in `data_dir`, creating the directory (0700) if needed. Returns the store
    /// and what the files held (an empty state with a new node ID when there were none). Nothing
    /// is written here; the first write compacts.
    /// A file that does not parse is never overwritten: unless `fresh` is set, that is an error;
    /// with `fresh` the snapshot and the journal are renamed to `<name>.corrupt-<time>` and the
    /// agent starts empty.
    pub fn open(data_dir: &Path, fresh: bool) -> Result<(Arc<StateStore>, StateFile), StateError> {
        let path = data_dir.join(STATE_FILE);
        let journal = data_dir.join(JOURNAL_FILE);
        let write_err = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        private_dir(data_dir).map_err(write_err)?;
        let state = match read(data_dir) {
            Ok(state) => state,
            Err(StateError::Corrupt { .. }) if fresh => {
                let time = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
                for file in [&path, &journal] {
                    let aside = PathBuf::from(format!("{}.corrupt-{time}", file.display()));
                    match fs::rename(file, &aside) {
                        Ok(()) => log::warn!(
                            "state file {} was corrupt; kept it as {} and started empty",
                            file.display(),
                            aside.display()
                        ),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(source) => {
                            return Err(StateError::Write {
                                path: file.clone(),
                                source,
                            })
                        }
                    }
                }
                snapshot::new_state()
            }
            Err(e) => return Err(e),
        };
        let (dirty, dirty_rx) = bounded(1);
        let store = Arc::new(StateStore {
            path,
            journal,
            node_id: state.node_id.clone(),
            disk: Mutex::new(Disk {
                writes: 0,
                written: Written::default(),
                snapshot_len: 0,
                journal_len: 0,
                compact: true,
                min_bound: JOURNAL_MIN_BOUND,
            }),
            failing: Mutex::new(None),
            sources: Mutex::new(Sources::default()),
            changed: Mutex::new(BTreeSet::new()),
            dirty,
            dirty_rx,
        });
        Ok((store, state))
    }

    /// The snapshot's path, `<data_dir>/state.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal's path, `<data_dir>/state.journal`.
    pub fn journal_path(&self) -> &Path {
        &self.journal
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Adds a source whose section every write compares whole.
    pub fn register(&self, source: Arc<dyn Snapshot>) {
        self.sources.lock().compared.push(source);
    }

    /// Adds a source that names what it changes: writes ask it for those entries only.
    pub fn register_keyed(&self, source: Arc<dyn KeyedSnapshot>) {
        self.sources.lock().keyed.push(source);
    }

    /// Notes that the entry `key` of a keyed section changed (call it after the change): the
    /// next write records it, the flusher's at the latest.
    pub fn changed(&self, key: Key) {
        self.changed.lock().insert(key);
        self.save_soon();
    }

    /// Writes the current state now, durably. Returns once it is on disk. A failure is retried
    /// by the flusher until a write succeeds.
    pub fn save(&self) -> Result<(), StateError> {
        self.transaction().save()
    }

    /// Notes that the entries `keys` of keyed sections changed and writes them now, durably,
    /// without comparing anything else: what costs a write is what the caller changed. Other
    /// changes wait for the flusher (unless this write compacts, which writes everything).
    pub fn save_entries(&self, keys: impl IntoIterator<Item = Key>) -> Result<(), StateError> {
        self.changed.lock().extend(keys);
        self.transaction().write(Cover::Named)
    }

    /// The clean shutdown's last write: the whole state as a new snapshot, and the journal
    /// removed, so that `state.json` alone holds the state.
    pub fn save_compacted(&self) -> Result<(), StateError> {
        self.transaction().write(Cover::Final)
    }

    /// Takes the write lock for a change that must be on disk before it is made: see
    /// [`Transaction`]. No other write happens until it is dropped.
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction {
            store: self,
            disk: self.disk.lock(),
        }
    }

    /// The current failure streak, if the last write failed: the state file is then older than
    /// the agent's state, and stays so until a write succeeds (the flusher keeps trying).
    pub fn failing(&self) -> Option<Failing> {
        self.failing.lock().clone()
    }

    /// Writes what `cover` asks. The caller holds the write lock. Returns whether anything was
    /// written (a write with nothing to record writes nothing). On a failure the entries named
    /// changed are kept for the next write, and that write compacts.
    fn write(&self, disk: &mut Disk, cover: Cover) -> Result<bool, StateError> {
        // Taken before the sources are asked: an entry named after this is asked for next time.
        let named = std::mem::take(&mut *self.changed.lock());
        let result = if disk.compact || cover == Cover::Final {
            self.compact(disk, cover == Cover::Final)
        } else {
            self.append(disk, cover, &named)
        };
        if result.is_err() {
            self.changed.lock().extend(named);
            disk.compact = true;
        }
        result
    }

    /// Journals what changed since the last write.
    fn append(
        &self,
        disk: &mut Disk,
        cover: Cover,
        named: &BTreeSet<Key>,
    ) -> Result<bool, StateError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Write { path, source }
        };
        let sources = self.sources.lock().clone();
        let mut now = StateFile::default();
        if cover == Cover::All {
            for source in &sources.compared {
                source.fill(&mut now);
            }
        }
        let keyed: Vec<Section> = sources.keyed.iter().map(|s| s.section()).collect();
        for source in &sources.keyed {
            let keys: Vec<Key> = named
                .iter()
                .filter(|k| k.section() == source.section())
                .cloned()
                .collect();
            if !keys.is_empty() {
                source.fill_keys(&keys, &mut now);
            }
        }
        let names = Named::of(named.iter().filter(|k| keyed.contains(&k.section())));
        let scopes = names.scopes(&keyed, cover == Cover::All);
        let delta = Delta::between(now, &disk.written, &scopes).map_err(err(&self.path))?;
        if delta.batch.is_empty() {
            return Ok(false);
        }
        let payload = serde_json::to_vec(&delta.batch).map_err(|e| err(&self.path)(e.into()))?;
        let record = journal::frame(&payload);
        drop(payload);
        let bound = disk.snapshot_len.max(disk.min_bound);
        if disk.journal_len + record.len() as u64 > bound {
            return self.compact(disk, false);
        }
        journal::append(&self.journal, disk.journal_len, &record).map_err(err(&self.journal))?;
        disk.journal_len += record.len() as u64;
        delta.recorded(&mut disk.written);
        Ok(true)
    }

    /// Writes the whole state as a new snapshot, then a fresh journal for it (or, when `last`,
    /// removes the journal). The snapshot's rename is the commit: once it is done the write
    /// succeeded, whatever happens to the journal after it.
    fn compact(&self, disk: &mut Disk, last: bool) -> Result<bool, StateError> {
        let err = |source| StateError::Write {
            path: self.path.clone(),
            source,
        };
        let journal_id = if last {
            String::new()
        } else {
            uuid::Uuid::new_v4().to_string()
        };
        let mut state = StateFile {
            version: STATE_VERSION,
            node_id: self.node_id.clone(),
            journal_id: journal_id.clone(),
            ..StateFile::default()
        };
        let sources = self.sources.lock().clone();
        for source in &sources.compared {
            source.fill(&mut state);
        }
        for source in &sources.keyed {
            source.fill(&mut state);
        }
        let bytes = serde_json::to_vec(&state).map_err(|e| err(e.into()))?;
        let written = Written::of(&state).map_err(err)?;
        drop(state);
        let result = write_atomic(&self.path, &bytes);
        let len = bytes.len() as u64;
        drop(bytes);
        if let Err(source) = result {
            release_free_memory();
            return Err(err(source));
        }
        disk.written = written;
        disk.snapshot_len = len;
        disk.journal_len = 0;
        disk.compact = true;
        if last {
            if let Err(e) = fs::remove_file(&self.journal) {
                if e.kind() != io::ErrorKind::NotFound {
                    log::warn!("cannot remove {}: {e}", self.journal.display());
                }
            }
        } else {
            match journal::start(&self.journal, &journal_id) {
                Ok(len) => {
                    disk.journal_len = len;
                    disk.compact = false;
                }
                Err(e) => log::warn!(
                    "state file {} written, but its journal {} could not be started: {e}; the \
                     next write writes the whole state again",
                    self.path.display(),
                    self.journal.display()
                ),
            }
        }
        release_free_memory();
        Ok(true)
    }

    /// Keeps the failure streak up to date after a write, and logs its start and its end: one
    /// warning per streak, whatever the number of attempts.
    fn record(&self, result: &Result<bool, StateError>) {
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
                (Ok(_), Some(_)) => failing.take().map(Note::Ended),
                (Ok(_), None) => None,
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
    /// a probe file twice the state's size on disk (snapshot and journal, at least 64 KiB) is
    /// written next to it, synced and removed. A full disk or a read-only data directory fails
    /// here, not after tasks ran.
    pub fn check_writable(&self) -> Result<(), StateError> {
        let err = |source| StateError::Write {
            path: self.path.clone(),
            source,
        };
        let size: u64 = [&self.path, &self.journal]
            .iter()
            .map(|p| fs::metadata(p).map_or(0, |m| m.len()))
            .sum();
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
        self.disk.lock().writes
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
                            // A write copies every allocation's record and frees the copies:
                            // thousands of small blocks that glibc otherwise sorts out at the
                            // next larger malloc of whichever thread comes next (perf: 0.2 ms of
                            // each restart's runner with 1,000 tasks). Here, after the write lock
                            // is released, on this thread, and the pages go back to the system.
                            release_free_memory();
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
    disk: parking_lot::MutexGuard<'a, Disk>,
}

impl Transaction<'_> {
    /// Writes the state as the sources fill it now (staged changes included), durably, as one
    /// journal record. A failure starts (or continues) a failure streak, which the flusher
    /// retries.
    pub fn save(&mut self) -> Result<(), StateError> {
        self.write(Cover::All)
    }

    fn write(&mut self, cover: Cover) -> Result<(), StateError> {
        let result = self.store.write(&mut self.disk, cover);
        self.store.record(&result);
        match result {
            Ok(wrote) => {
                self.disk.writes += u64::from(wrote);
                Ok(())
            }
            // Whatever the caller does about its change, the rest of the state is not on disk
            // either: the flusher tries again until it is.
            Err(e) => {
                self.store.save_soon();
                Err(e)
            }
        }
    }
}

/// A compaction copies and serialises the whole state, then frees it all; give those pages back
/// so the agent's footprint is what it keeps, not its high-water mark.
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

/// Helpers for tests that need state writes to fail.
#[cfg(test)]
pub(crate) mod testing {
    use super::JOURNAL_FILE;
    use std::fs;
    use std::path::{Path, PathBuf};

    /// Makes every state write in a data directory fail, even as root, while the state stays
    /// readable: a directory where a compaction's temporary snapshot goes, and the journal
    /// replaced by a link to itself moved aside (the store never writes through a link).
    pub struct Blocker {
        dir: PathBuf,
    }

    const ASIDE: &str = ".state.journal.blocked";

    impl Blocker {
        pub fn new(dir: &Path) -> Blocker {
            fs::create_dir(dir.join(".state.json.tmp")).unwrap();
            let journal = dir.join(JOURNAL_FILE);
            if journal.exists() {
                fs::rename(&journal, dir.join(ASIDE)).unwrap();
                std::os::unix::fs::symlink(ASIDE, &journal).unwrap();
            }
            Blocker {
                dir: dir.to_path_buf(),
            }
        }

        /// Writes work again.
        pub fn remove(self) {
            fs::remove_dir(self.dir.join(".state.json.tmp")).unwrap();
            let journal = self.dir.join(JOURNAL_FILE);
            if self.dir.join(ASIDE).exists() {
                fs::remove_file(&journal).unwrap();
                fs::rename(self.dir.join(ASIDE), &journal).unwrap();
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir() -> PathBuf {
        crate::util::scratch::dir("nodeward-state")
    }

    #[test]
    fn new_state_gets_a_node_id_and_modes() {
        let dir = tempdir().join("data");
        let (store, state) = StateStore::open(&dir, false).unwrap();
        assert!(uuid::Uuid::parse_str(&state.node_id).is_ok());
        store.save().unwrap();
        let mode = fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let jmode = fs::metadata(store.journal_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(jmode, 0o600);
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

    use crate::records::{AllocRecord, DesiredStatus, VolumeRecord};
    use std::collections::BTreeMap;

    /// Allocations: a source compared whole on every write.
    #[derive(Default)]
    struct Allocs(Mutex<BTreeMap<String, AllocRecord>>);

    impl Snapshot for Allocs {
        fn fill(&self, out: &mut StateFile) {
            out.allocations = self.0.lock().values().cloned().collect();
        }
    }

    /// Host volumes: a keyed source.
    #[derive(Default)]
    struct Volumes(Mutex<BTreeMap<String, VolumeRecord>>);

    impl Snapshot for Volumes {
        fn fill(&self, out: &mut StateFile) {
            out.host_volumes = self.0.lock().values().cloned().collect();
        }
    }

    impl KeyedSnapshot for Volumes {
        fn section(&self) -> Section {
            Section::HostVolumes
        }
        fn fill_keys(&self, keys: &[Key], out: &mut StateFile) {
            let map = self.0.lock();
            for k in keys {
                if let Key::HostVolume(id) = k {
                    out.host_volumes.extend(map.get(id).cloned());
                }
            }
        }
    }

    fn alloc(id: &str, modify_time: i64) -> AllocRecord {
        AllocRecord {
            id: id.to_string(),
            job_id: "job".to_string(),
            task_group: "g".to_string(),
            name: format!("job.g[{id}]"),
            index: 0,
            desired_status: DesiredStatus::Run,
            create_time: 1,
            modify_time,
            job: None,
            job_version: None,
            task_states: BTreeMap::new(),
            ports: Vec::new(),
            cores: BTreeMap::new(),
            poststop_cut: false,
            purged: false,
        }
    }

    fn volume(id: &str) -> VolumeRecord {
        VolumeRecord {
            id: id.to_string(),
            name: format!("name-{id}"),
            namespace: "default".to_string(),
            plugin_id: "mkdir".to_string(),
            node_id: String::new(),
            node_pool: "default".to_string(),
            requested_capacity_min_bytes: 0,
            requested_capacity_max_bytes: 0,
            requested_capabilities: Vec::new(),
            parameters: BTreeMap::new(),
            host_path: format!("/srv/volumes/{id}"),
            capacity_bytes: 0,
            registered: false,
            create_time: 1,
            modify_time: 1,
        }
    }

    /// A store on `dir` with both kinds of source.
    struct Node {
        dir: PathBuf,
        store: Arc<StateStore>,
        allocs: Arc<Allocs>,
        volumes: Arc<Volumes>,
    }

    /// What a state holds: (allocation, modify time) and volume IDs.
    type Held = (Vec<(String, i64)>, Vec<String>);

    impl Node {
        fn open(dir: &Path) -> Node {
            let (store, state) = StateStore::open(dir, false).unwrap();
            let allocs = Arc::new(Allocs::default());
            let volumes = Arc::new(Volumes::default());
            for a in state.allocations {
                allocs.0.lock().insert(a.id.clone(), a);
            }
            for v in state.host_volumes {
                volumes.0.lock().insert(v.id.clone(), v);
            }
            store.register(allocs.clone());
            store.register_keyed(volumes.clone());
            Node {
                dir: dir.to_path_buf(),
                store,
                allocs,
                volumes,
            }
        }
        fn put_volume(&self, id: &str) -> Result<(), StateError> {
            self.volumes.0.lock().insert(id.to_string(), volume(id));
            self.store.save_entries([Key::HostVolume(id.to_string())])
        }
        fn delete_volume(&self, id: &str) -> Result<(), StateError> {
            self.volumes.0.lock().remove(id);
            self.store.save_entries([Key::HostVolume(id.to_string())])
        }
        fn put_alloc(&self, id: &str, t: i64) {
            self.allocs.0.lock().insert(id.to_string(), alloc(id, t));
        }
        fn in_memory(&self) -> Held {
            let mut s = StateFile::default();
            self.allocs.fill(&mut s);
            self.volumes.fill(&mut s);
            held(&s)
        }
        fn on_disk(&self) -> Held {
            held(&read(&self.dir).unwrap())
        }
        fn journal_len(&self) -> u64 {
            fs::metadata(self.dir.join(JOURNAL_FILE)).unwrap().len()
        }
        fn journal_id(&self) -> String {
            let text = fs::read(self.dir.join(STATE_FILE)).unwrap();
            decode(&self.dir, &text).unwrap().journal_id
        }
    }

    fn held(s: &StateFile) -> Held {
        (
            s.allocations
                .iter()
                .map(|a| (a.id.clone(), a.modify_time))
                .collect(),
            s.host_volumes.iter().map(|v| v.id.clone()).collect(),
        )
    }

    /// A write journals the entries it changed and nothing else: one volume among hundreds
    /// costs one volume's record, the snapshot is not touched, a write with nothing changed
    /// writes nothing, and a keyed write leaves the compared sections to the next full write.
    #[test]
    fn a_write_costs_what_changed() {
        let dir = tempdir();
        let n = Node::open(&dir);
        for i in 0..20 {
            n.put_alloc(&format!("a{i:02}"), 1);
        }
        n.store.save().unwrap();
        let id = n.journal_id();
        for i in 0..300 {
            n.put_volume(&format!("v{i:03}")).unwrap();
        }
        assert_eq!(n.journal_id(), id, "no compaction yet");
        let snapshot = fs::read(n.store.path()).unwrap();
        let one = serde_json::to_vec(&volume("v999")).unwrap().len() as u64;
        let before = n.journal_len();
        n.put_volume("v999").unwrap();
        let grew = n.journal_len() - before;
        assert!(
            grew > one && grew < one + 64,
            "{grew} bytes for a {one}-byte volume"
        );
        assert_eq!(fs::read(n.store.path()).unwrap(), snapshot);
        assert_eq!(n.on_disk(), n.in_memory());

        let (len, writes) = (n.journal_len(), n.store.writes());
        n.store.save().unwrap();
        assert_eq!((n.journal_len(), n.store.writes()), (len, writes));

        n.put_alloc("a07", 2);
        n.put_volume("v000").unwrap();
        assert!(n.on_disk().0.contains(&("a07".to_string(), 1)));
        n.store.save().unwrap();
        assert_eq!(n.on_disk(), n.in_memory());
        n.delete_volume("v150").unwrap();
        n.allocs.0.lock().remove("a03");
        n.store.save().unwrap();
        let (allocs, volumes) = n.on_disk();
        assert!(!volumes.contains(&"v150".to_string()));
        assert!(!allocs.iter().any(|(id, _)| id == "a03"));
        assert_eq!((allocs, volumes), n.in_memory());
        assert_eq!(Node::open(&dir).in_memory(), n.in_memory());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Past its bound the journal is folded into a new snapshot with a new ID and starts again
    /// with its header alone; the state reads back the same throughout.
    #[test]
    fn the_journal_is_compacted_once_it_outgrows_the_snapshot() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.store.disk.lock().min_bound = 16 * 1024;
        n.store.save().unwrap();
        let header = n.journal_len();
        let mut ids = vec![n.journal_id()];
        for i in 0..200 {
            let v = format!("v{i:03}");
            let record = journal::frame(
                &serde_json::to_vec(&journal::Batch {
                    host_volumes: vec![volume(&v)],
                    ..journal::Batch::default()
                })
                .unwrap(),
            );
            let bound = fs::metadata(n.store.path()).unwrap().len().max(16 * 1024);
            let before = n.journal_len();
            n.put_volume(&v).unwrap();
            let passes = before + record.len() as u64 > bound;
            let id = n.journal_id();
            assert_eq!(
                id != *ids.last().unwrap(),
                passes,
                "{v}: {before} + {} vs {bound}",
                record.len()
            );
            if passes {
                assert_eq!(n.journal_len(), header, "a fresh journal");
                ids.push(id);
            } else {
                assert_eq!(n.journal_len(), before + record.len() as u64);
            }
            assert_eq!(n.on_disk(), n.in_memory(), "after {v}");
        }
        assert!(ids.len() >= 3, "compactions: {ids:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A crash may cut the last write anywhere: every cut loses that write alone, and the next
    /// agent's first write starts a fresh journal, so its later writes are not hidden behind the
    /// cut record.
    #[test]
    fn a_torn_journal_tail_loses_only_the_write_it_held() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.put_volume("a").unwrap();
        n.put_volume("b").unwrap();
        let good = fs::read(n.store.journal_path()).unwrap();
        n.put_volume("c").unwrap();
        let whole = fs::read(n.store.journal_path()).unwrap();
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for cut in good.len()..whole.len() {
            fs::write(n.store.journal_path(), &whole[..cut]).unwrap();
            assert_eq!(n.on_disk().1, ids(&["a", "b"]), "cut at {cut}");
        }
        fs::write(n.store.journal_path(), &whole[..whole.len() - 5]).unwrap();
        drop(n);
        let again = Node::open(&dir);
        assert_eq!(again.in_memory().1, ids(&["a", "b"]));
        again.put_volume("d").unwrap();
        again.put_volume("e").unwrap();
        assert_eq!(again.on_disk().1, ids(&["a", "b", "d", "e"]));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A compaction is two renames, the snapshot's then the fresh journal's. Whatever step a
    /// crash stops it at, the files read back as the state before the compaction's write or the
    /// state after it, never a mix: the old journal is never replayed over the new snapshot (it
    /// would bring back a volume the compacting write deleted).
    #[test]
    fn a_crash_between_compaction_steps_leaves_a_whole_state() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.put_alloc("a1", 1);
        n.store.save().unwrap();
        for v in ["v1", "v2", "v3"] {
            n.put_volume(v).unwrap();
        }
        let before = n.on_disk();
        let (s1, j1) = (
            fs::read(n.store.path()).unwrap(),
            fs::read(n.store.journal_path()).unwrap(),
        );
        // The next write compacts: it deletes v1, which the old journal puts.
        n.store.disk.lock().compact = true;
        n.delete_volume("v1").unwrap();
        let after = n.in_memory();
        assert_ne!(n.journal_id(), decode(&dir, &s1).unwrap().journal_id);
        let (s2, j2) = (
            fs::read(n.store.path()).unwrap(),
            fs::read(n.store.journal_path()).unwrap(),
        );
        let lay = |snapshot: &[u8], journal: &[u8], tmp: Option<(&str, &[u8])>| {
            fs::write(n.store.path(), snapshot).unwrap();
            fs::write(n.store.journal_path(), journal).unwrap();
            for t in [".state.json.tmp", ".state.journal.tmp"] {
                let _ = fs::remove_file(dir.join(t));
            }
            if let Some((name, bytes)) = tmp {
                fs::write(dir.join(name), bytes).unwrap();
            }
            n.on_disk()
        };
        assert_eq!(
            lay(&s1, &j1, Some((".state.json.tmp", &s2))),
            before,
            "new snapshot not yet in place"
        );
        assert_eq!(lay(&s2, &j1, None), after, "new snapshot, old journal");
        assert_eq!(
            lay(&s2, &j1, Some((".state.journal.tmp", &j2))),
            after,
            "fresh journal not yet in place"
        );
        assert_eq!(lay(&s2, &j2, None), after, "done");
        assert!(!after.1.contains(&"v1".to_string()));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A write that fails leaves nothing on disk that a restart would replay, and the next write
    /// compacts (the journal may end in bytes of the refused record).
    #[test]
    fn a_refused_write_is_never_replayed_and_the_next_write_compacts() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.put_volume("kept").unwrap();
        let id = n.journal_id();
        let blocker = testing::Blocker::new(&dir);
        let err = n.put_volume("refused").unwrap_err();
        assert!(
            err.to_string().starts_with("cannot write state file "),
            "{err}"
        );
        assert!(n.store.failing().is_some());
        // As the volume manager does when its write fails: the volume is not kept.
        n.volumes.0.lock().remove("refused");
        n.store.changed(Key::HostVolume("refused".to_string()));
        assert_eq!(n.on_disk().1, vec!["kept".to_string()]);
        assert!(
            n.put_volume("refused too").is_err(),
            "a compaction is blocked too"
        );
        n.volumes.0.lock().remove("refused too");
        blocker.remove();
        n.put_volume("later").unwrap();
        assert!(n.store.failing().is_none());
        assert_ne!(n.journal_id(), id, "the write after a failure compacts");
        assert_eq!(n.on_disk().1, vec!["kept".to_string(), "later".to_string()]);
        assert_eq!(Node::open(&dir).in_memory(), n.in_memory());
        let _ = fs::remove_dir_all(&dir);
    }

    /// A damaged record with good ones after it is not a crash: the agent refuses the state,
    /// and `-fresh-state` keeps both files aside.
    #[test]
    fn a_damaged_journal_is_refused_and_fresh_state_keeps_both_files() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.put_volume("a").unwrap();
        let a = n.journal_len() as usize;
        for v in ["b", "c"] {
            n.put_volume(v).unwrap();
        }
        drop(n);
        let journal = dir.join(JOURNAL_FILE);
        let mut bytes = fs::read(&journal).unwrap();
        // A byte inside b's payload.
        bytes[a + journal::FRAME + 20] ^= 0x20;
        fs::write(&journal, &bytes).unwrap();
        let err = StateStore::open(&dir, false).err().unwrap();
        assert!(
            matches!(&err, StateError::Corrupt { path, .. } if *path == journal),
            "{err}"
        );
        assert_eq!(fs::read(&journal).unwrap(), bytes, "left untouched");
        let (_, state) = StateStore::open(&dir, true).unwrap();
        assert!(state.host_volumes.is_empty());
        let kept: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.contains(".corrupt-"))
            .collect();
        assert_eq!(kept.len(), 2, "{kept:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A version-2 file (an older agent's, which has no journal) loads; a journal lying next to
    /// it is not its own and is ignored; the first write makes it the current version with a
    /// journal.
    #[test]
    fn an_older_state_file_loads_and_a_journal_beside_it_is_ignored() {
        let dir = tempdir();
        let v2 = serde_json::json!({
            "Version": 2, "NodeID": uuid::Uuid::new_v4().to_string(),
            "HostVolumes": [volume("old")],
        });
        fs::write(dir.join(STATE_FILE), v2.to_string()).unwrap();
        let batch = journal::Batch {
            host_volumes: vec![volume("stray")],
            ..journal::Batch::default()
        };
        let stray = [
            journal::frame(b"{\"Journal\":1,\"JournalID\":\"left-by-someone\"}"),
            journal::frame(&serde_json::to_vec(&batch).unwrap()),
        ]
        .concat();
        fs::write(dir.join(JOURNAL_FILE), stray).unwrap();
        let n = Node::open(&dir);
        assert_eq!(n.in_memory().1, vec!["old".to_string()]);
        n.put_volume("new").unwrap();
        let text = fs::read_to_string(n.store.path()).unwrap();
        assert!(
            text.contains(&format!("\"Version\":{STATE_VERSION}")),
            "{text}"
        );
        assert_eq!(n.on_disk().1, vec!["new".to_string(), "old".to_string()]);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A version-3 file (the agent before CSI volumes) loads with its journal replayed: the
    /// upgrade to 4 adds an empty CSI volumes section and keeps the journal that continues the
    /// snapshot. The next write is version 4, and CSI volumes written then come back.
    #[test]
    fn a_version_3_file_and_its_journal_load_and_gain_csi_volumes() {
        let dir = tempdir();
        let journal_id = uuid::Uuid::new_v4().to_string();
        let v3 = serde_json::json!({
            "Version": 3, "NodeID": uuid::Uuid::new_v4().to_string(),
            "JournalID": journal_id, "HostVolumes": [volume("old")],
        });
        fs::write(dir.join(STATE_FILE), v3.to_string()).unwrap();
        let batch = journal::Batch {
            host_volumes: vec![volume("journaled")],
            ..journal::Batch::default()
        };
        let header = format!("{{\"Journal\":1,\"JournalID\":\"{journal_id}\"}}");
        let bytes = [
            journal::frame(header.as_bytes()),
            journal::frame(&serde_json::to_vec(&batch).unwrap()),
        ]
        .concat();
        fs::write(dir.join(JOURNAL_FILE), bytes).unwrap();
        let state = read(&dir).unwrap();
        assert_eq!(state.version, STATE_VERSION);
        assert!(state.csi_volumes.is_empty());
        let ids: Vec<&str> = state.host_volumes.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, vec!["journaled", "old"]);

        let (store, _) = StateStore::open(&dir, false).unwrap();
        struct Csi(crate::records::CsiVolumeRecord);
        impl Snapshot for Csi {
            fn fill(&self, out: &mut StateFile) {
                out.csi_volumes = vec![self.0.clone()];
            }
        }
        let record = crate::records::CsiVolumeRecord {
            id: "data".into(),
            name: "data".into(),
            external_id: "hp-data".into(),
            namespace: "default".into(),
            plugin_id: "hostpath".into(),
            provider: String::new(),
            provider_version: String::new(),
            requested_capacity_min: 1 << 20,
            requested_capacity_max: 0,
            capacity: 1 << 20,
            requested_capabilities: Vec::new(),
            mount_options: None,
            secrets: BTreeMap::new(),
            parameters: BTreeMap::new(),
            context: BTreeMap::new(),
            topologies: Vec::new(),
            requested_topologies: None,
            registered: false,
            claims: Vec::new(),
            create_time: 1,
            modify_time: 1,
        };
        store.register(Arc::new(Csi(record.clone())));
        store.save().unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        assert!(text.contains("\"Version\":4"), "{text}");
        assert_eq!(read(&dir).unwrap().csi_volumes, vec![record]);
        let _ = fs::remove_dir_all(&dir);
    }

    /// The clean shutdown's last write leaves the snapshot alone, complete, with no journal; a
    /// write after it still works (it compacts).
    #[test]
    fn the_last_write_leaves_the_snapshot_alone() {
        let dir = tempdir();
        let n = Node::open(&dir);
        n.put_alloc("a", 1);
        n.store.save().unwrap();
        n.put_volume("v").unwrap();
        n.store.save_compacted().unwrap();
        assert!(!n.store.journal_path().exists());
        let text = fs::read(n.store.path()).unwrap();
        let alone = decode(&dir, &text).unwrap();
        assert!(alone.journal_id.is_empty());
        assert_eq!(held(&alone), n.in_memory());
        n.put_volume("w").unwrap();
        assert_eq!(n.on_disk(), n.in_memory());
        let _ = fs::remove_dir_all(&dir);
    }
}
