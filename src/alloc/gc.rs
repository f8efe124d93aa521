//! The allocation garbage collector, after Nomad's client GC (`client/gc.go`): terminal
//! allocations are destroyed, oldest first, when the node holds more than `gc_max_allocs`
//! allocations or the data directory's file system is fuller than `gc_disk_usage_threshold` or
//! `gc_inode_usage_threshold` percent; `PUT /v1/client/gc` destroys every terminal allocation
//! and `PUT /v1/client/allocation/:id/gc` one.
//!
//! Destroying an allocation: it leaves the registry, the state file is written without it (and
//! without the copy of an older job version its record held), then its directory goes, logs
//! included. In that order, so that an agent that dies between the two steps leaves a directory
//! no allocation owns, never an allocation without its directory: every pass also removes such
//! directories ([`Collector::sweep`]), which is where those of purged jobs go too. An allocation
//! kept after its job's purge to carry out its stop (`super::stop::purge_keeps`) is destroyed by
//! the first pass that finds it terminal, whatever the limits.
//!
//! An allocation is terminal when every task is `dead`, nothing waits for its host volumes and
//! the keeper holds none of its tasks; a task that runs, waits out a restart delay or is being
//! stopped keeps its allocation. `dead` is final (a runner that records it only runs its stop
//! hooks and ends), so a terminal allocation's runners are joined, bounded, before it goes.
//!
//! Thread: `alloc-gc`, started by the agent and joined at its shutdown. It `select!`s over the
//! shutdown channel and a tick of `gc_interval`; each pass checks the shutdown between
//! allocations. API workers call [`Collector::collect`] and [`Collector::collect_all`] on their
//! own threads; an allocation is taken out of the registry under its lock, so two collectors
//! never destroy the same one.
//!
//! Locks: no lock is held across I/O (a state write, a directory removal). The registry lock is
//! held to choose and take allocations (each allocation's inner state and task states under it,
//! in the registry's order); [`Collector::destroying`] is a leaf, taken under the registry lock
//! or alone.

use crossbeam_channel::{select, tick, Receiver, TryRecvError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::manager::AllocManager;
use super::model::Allocation;
use super::AllocError;
use crate::config::GcConfig;
use crate::records::TaskStatus;
use crate::task::runner::TaskRunnerHandle;
use crate::thread::{Never, Worker};
use crate::util::allocdir;

/// How long a terminal allocation's runners get to finish their stop hooks before the collector
/// gives up on it for this pass.
const RUNNER_END: Duration = Duration::from_secs(30);

/// How full the data directory's file system is, in percent (`statvfs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskUsage {
    pub used_percent: f64,
    pub inodes_used_percent: f64,
}

impl DiskUsage {
    /// The usage of the file system `path` is on. Blocks count as `df` counts them: used out of
    /// what is used plus what an unprivileged user may still take. A file system without inode
    /// counts (btrfs) reports 0 % of inodes used.
    pub fn of(path: &Path) -> io::Result<DiskUsage> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: statvfs writes into the zeroed struct it is given; `c` is a valid C string.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(DiskUsage::from_counts(
            s.f_blocks as u64,
            s.f_bfree as u64,
            s.f_bavail as u64,
            s.f_files as u64,
            s.f_ffree as u64,
        ))
    }

    /// The percentages from `statvfs`'s counts.
    pub fn from_counts(blocks: u64, free: u64, avail: u64, files: u64, ffree: u64) -> DiskUsage {
        let used = blocks.saturating_sub(free);
        let usable = used + avail.min(free);
        let percent = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 * 100.0 / whole as f64
            }
        };
        DiskUsage {
            used_percent: percent(used, usable),
            inodes_used_percent: percent(files.saturating_sub(ffree), files),
        }
    }
}

/// The limit a pass found exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Disk,
    Inodes,
    Allocs,
}

/// Why a pass must collect, in Nomad's words, and how many allocations are over `gc_max_allocs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reason {
    pub over: Over,
    pub text: String,
    /// Allocations over `gc_max_allocs` (0 when there are not more).
    pub excess: usize,
}

impl Reason {
    /// How many allocations to destroy before looking again: those over `gc_max_allocs`, or at
    /// least `parallel` when the disk is what is over (it is measured again after them).
    pub fn batch(&self, parallel: usize) -> usize {
        match self.over {
            Over::Allocs => self.excess,
            Over::Disk | Over::Inodes => self.excess.max(parallel),
        }
    }
}

/// Whether the node is over a limit: disk usage first, then inodes, then the number of
/// allocations (terminal or not), as Nomad checks them. `usage` is `None` when `statvfs` failed:
/// the count still applies.
pub fn gc_reason(config: &GcConfig, usage: Option<DiskUsage>, allocs: usize) -> Option<Reason> {
    let excess = allocs.saturating_sub(config.max_allocs);
    let (over, text) = match usage {
        Some(u) if u.used_percent > config.disk_usage_threshold => (
            Over::Disk,
            format!(
                "disk usage of {:.0} is over gc threshold of {:.0}",
                u.used_percent, config.disk_usage_threshold
            ),
        ),
        Some(u) if u.inodes_used_percent > config.inode_usage_threshold => (
            Over::Inodes,
            format!(
                "inode usage of {:.0} is over gc threshold of {:.0}",
                u.inodes_used_percent, config.inode_usage_threshold
            ),
        ),
        _ if excess > 0 => (
            Over::Allocs,
            format!(
                "number of allocations ({allocs}) is over the limit ({})",
                config.max_allocs
            ),
        ),
        _ => return None,
    };
    Some(Reason { over, text, excess })
}

/// Why an allocation is not terminal yet, or since when it is (nanoseconds: its last task event,
/// or its last change when its tasks never ran).
fn terminal_since(alloc: &Allocation, held: &HashSet<(String, String)>) -> Result<i64, String> {
    let mut since = {
        let inner = alloc.inner.lock();
        // A gate that started the runners has ended; one that has not still waits.
        if inner.gate.as_ref().is_some_and(|g| !g.is_finished()) {
            return Err("it waits for its host volumes".to_string());
        }
        inner.modify_time
    };
    for (name, state) in alloc.lock_tasks().iter() {
        if state.state != TaskStatus::Dead {
            return Err(format!("task {name:?} is {}", state.state.as_str()));
        }
        if held.contains(&(alloc.id.clone(), name.to_string())) {
            return Err(format!("the task keeper still holds task {name:?}"));
        }
        if let Some(last) = state.events.back() {
            since = since.max(last.time);
        }
    }
    Ok(since)
}

/// An allocation taken out of the registry, with what it still owned.
struct Taken {
    alloc: Arc<Allocation>,
    runners: BTreeMap<String, TaskRunnerHandle>,
    gate: Option<Worker<()>>,
}

/// The garbage collector of one agent's allocations.
pub struct Collector {
    allocs: Arc<AllocManager>,
    config: GcConfig,
    root: PathBuf,
    shutdown: Receiver<Never>,
    /// Guards: the IDs of allocations taken out of the registry whose directories are not yet
    /// removed, so that [`Collector::sweep`] leaves them to their collector. A leaf, taken
    /// under the registry lock or alone.
    destroying: Mutex<HashSet<String>>,
    /// Guards: the reason of the last pass that found nothing to collect, so that a node that
    /// stays over a limit is told once per reason, not every `gc_interval`. Taken alone.
    skipped: Mutex<Option<String>>,
}

impl Collector {
    pub fn new(
        allocs: Arc<AllocManager>,
        config: GcConfig,
        shutdown: Receiver<Never>,
    ) -> Collector {
        let root = allocdir::alloc_root(&allocs.engine.data_dir);
        Collector {
            allocs,
            config,
            root,
            shutdown,
            destroying: Mutex::new(HashSet::new()),
            skipped: Mutex::new(None),
        }
    }

    /// The `alloc-gc` thread's body: a pass every `gc_interval` until the shutdown.
    pub fn run(&self) {
        let ticks = tick(self.config.interval);
        loop {
            select! {
                recv(self.shutdown) -> _ => return,
                recv(ticks) -> _ => {}
            }
            if let Err(e) = self.keep_below_limits() {
                log::error!("garbage collection: {e}");
            }
        }
    }

    fn stopping(&self) -> bool {
        matches!(self.shutdown.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// One periodic pass: while a limit is exceeded, destroys the oldest terminal allocations
    /// (as many as are over `gc_max_allocs`, at least `gc_parallel_destroys` for the disk), then
    /// removes directories no allocation owns. Returns the IDs destroyed.
    pub fn keep_below_limits(&self) -> Result<Vec<String>, AllocError> {
        // The allocations of purged jobs whose stop ended: their job is gone, nothing shows them.
        let purged = self.take_where(usize::MAX, None, true)?;
        let mut collected = self.destroy(purged, "its job was purged")?;
        while !self.stopping() {
            let usage = match DiskUsage::of(self.usage_path()) {
                Ok(u) => Some(u),
                Err(e) => {
                    log::debug!("cannot read the usage of {}: {e}", self.root.display());
                    None
                }
            };
            let count = self.allocs.registry.lock().allocs.len();
            let Some(reason) = gc_reason(&self.config, usage, count) else {
                *self.skipped.lock() = None;
                break;
            };
            let taken = self.take(reason.batch(self.config.parallel_destroys), None)?;
            if taken.is_empty() {
                let mut skipped = self.skipped.lock();
                if skipped.as_deref() != Some(reason.text.as_str()) {
                    // As Nomad: a node a little over gc_max_allocs with everything running is
                    // normal (the count counts running allocations); twice over, or a full
                    // disk, is worth a warning.
                    let level = match reason.over {
                        Over::Allocs if count < self.config.max_allocs.saturating_mul(2) => {
                            log::Level::Info
                        }
                        _ => log::Level::Warn,
                    };
                    log::log!(
                        level,
                        "garbage collection skipped because no terminal allocations: {}",
                        reason.text
                    );
                    *skipped = Some(reason.text);
                }
                break;
            }
            let ids = self.destroy(taken, &reason.text)?;
            if ids.is_empty() {
                // Every one was put back (its runners did not end): the next pass tries again.
                break;
            }
            collected.extend(ids);
        }
        self.sweep();
        Ok(collected)
    }

    /// Destroys every terminal allocation (`PUT /v1/client/gc`). Returns their IDs, oldest first.
    pub fn collect_all(&self) -> Result<Vec<String>, AllocError> {
        let taken = self.take(usize::MAX, None)?;
        let ids = self.destroy(taken, "forced full node collection")?;
        self.sweep();
        Ok(ids)
    }

    /// Destroys one allocation, by full ID (`PUT /v1/client/allocation/:id/gc`); one that is
    /// not terminal is refused with the reason.
    pub fn collect(&self, id: &str) -> Result<(), AllocError> {
        let taken = self.take(1, Some(id))?;
        if self.destroy(taken, "forced collection")?.is_empty() {
            return Err(AllocError::NotCollectable {
                id: id.to_string(),
                reason: format!("the runners of its tasks did not end within {RUNNER_END:?}"),
            });
        }
        Ok(())
    }

    fn usage_path(&self) -> &Path {
        if self.root.is_dir() {
            &self.root
        } else {
            &self.allocs.engine.data_dir
        }
    }

    /// Takes up to `limit` terminal allocations out of the registry, oldest first; `only`: that
    /// one allocation, an error when it is unknown or not terminal.
    fn take(&self, limit: usize, only: Option<&str>) -> Result<Vec<Taken>, AllocError> {
        self.take_where(limit, only, false)
    }

    /// [`Collector::take`]; `purged`: only allocations of purged jobs (`super::stop`).
    fn take_where(
        &self,
        limit: usize,
        only: Option<&str>,
        purged: bool,
    ) -> Result<Vec<Taken>, AllocError> {
        // Before the registry lock: the keeper's maps are leaves. A terminal allocation starts no
        // task, so the set cannot gain one of its tasks meanwhile.
        let held = self.allocs.engine.keeper.running();
        let mut reg = self.allocs.registry.lock();
        let mut chosen: Vec<(i64, i64, String)> = match only {
            Some(id) => {
                let alloc = reg.allocs.get(id).ok_or(AllocError::AllocNotFound)?;
                let since =
                    terminal_since(alloc, &held).map_err(|reason| AllocError::NotCollectable {
                        id: id.to_string(),
                        reason,
                    })?;
                vec![(since, alloc.create_time, id.to_string())]
            }
            None => reg
                .allocs
                .values()
                .filter(|a| !purged || super::runner::stop::is_purged(a))
                .filter_map(|a| {
                    let since = terminal_since(a, &held).ok()?;
                    Some((since, a.create_time, a.id.clone()))
                })
                .collect(),
        };
        chosen.sort();
        chosen.truncate(limit);
        let removed: Vec<Arc<Allocation>> = chosen
            .into_iter()
            .filter_map(|(_, _, id)| reg.allocs.remove(&id))
            .collect();
        self.destroying
            .lock()
            .extend(removed.iter().map(|a| a.id.clone()));
        Ok(removed
            .into_iter()
            .map(|alloc| {
                let (runners, gate) = {
                    let mut inner = alloc.inner.lock();
                    (std::mem::take(&mut inner.runners), inner.gate.take())
                };
                Taken {
                    alloc,
                    runners,
                    gate,
                }
            })
            .collect())
    }

    /// Puts allocations back that could not be destroyed, as they were.
    fn put_back(&self, back: Vec<Taken>) {
        if back.is_empty() {
            return;
        }
        let allocs: Vec<Arc<Allocation>> = back
            .into_iter()
            .map(|t| {
                let mut inner = t.alloc.inner.lock();
                inner.runners = t.runners;
                inner.gate = t.gate;
                drop(inner);
                t.alloc
            })
            .collect();
        let mut reg = self.allocs.registry.lock();
        let mut destroying = self.destroying.lock();
        for alloc in allocs {
            destroying.remove(&alloc.id);
            reg.allocs.insert(alloc.id.clone(), alloc);
        }
    }

    /// Destroys taken allocations: joins their runners (finishing their stop hooks), writes the
    /// state file without them, removes their directories. Returns their IDs. When the state
    /// cannot be written they are put back, nothing removed.
    fn destroy(&self, taken: Vec<Taken>, reason: &str) -> Result<Vec<String>, AllocError> {
        if taken.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + RUNNER_END;
        let (mut ready, mut back) = (Vec::new(), Vec::new());
        for mut t in taken {
            if t.runners.values().all(|r| self.ends_by(r, deadline)) {
                t.runners.values_mut().for_each(TaskRunnerHandle::join);
                if let Some(gate) = t.gate.take() {
                    gate.join();
                }
                ready.push(t);
            } else {
                log::warn!(
                    "garbage collection: the runners of alloc {} did not end within {RUNNER_END:?}; \
                     it is kept for a later pass",
                    t.alloc.id
                );
                back.push(t);
            }
        }
        self.put_back(back);
        if let Err(e) = self.allocs.store.save() {
            self.put_back(ready);
            return Err(AllocError::State(e));
        }
        let ids: Vec<String> = ready.iter().map(|t| t.alloc.id.clone()).collect();
        for id in &ids {
            log::info!("garbage collected allocation {id}: {reason}");
            self.allocs.engine.volumes.release(id);
        }
        crate::thread::parallel_map(ids.clone(), self.config.parallel_destroys, |id| {
            remove_alloc_dir(&self.root, &id);
            self.destroying.lock().remove(&id);
        });
        Ok(ids)
    }

    /// Waits until the runner has ended, the deadline passes or the agent shuts down.
    fn ends_by(&self, runner: &TaskRunnerHandle, deadline: Instant) -> bool {
        while !runner.is_finished() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            select! {
                recv(self.shutdown) -> _ => return runner.is_finished(),
                default(left.min(Duration::from_millis(5))) => {}
            }
        }
        true
    }

    /// Removes the directories under `<data_dir>/alloc` that no allocation owns: those of purged
    /// jobs, and those an agent that died in the middle of a collection left. A directory whose
    /// allocation the registry has, a collector is destroying, or the keeper still runs a task
    /// of, stays. The listing is read before the registry: a directory made after it belongs to
    /// an allocation that was in the registry first.
    fn sweep(&self) {
        let names: Vec<String> = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| is_alloc_id(n))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => {
                log::warn!(
                    "garbage collection: cannot list {}: {e}",
                    self.root.display()
                );
                return;
            }
        };
        if names.is_empty() {
            return;
        }
        let held: HashSet<String> = self
            .allocs
            .engine
            .keeper
            .running()
            .into_iter()
            .map(|(alloc, _)| alloc)
            .collect();
        let orphans: Vec<String> = {
            let reg = self.allocs.registry.lock();
            let destroying = self.destroying.lock();
            names
                .into_iter()
                .filter(|n| {
                    !reg.allocs.contains_key(n) && !destroying.contains(n) && !held.contains(n)
                })
                .collect()
        };
        for id in orphans {
            log::info!("garbage collection: removing the directory of alloc {id}, which this agent no longer has");
            remove_alloc_dir(&self.root, &id);
        }
    }
}

/// A directory name under `<data_dir>/alloc` that is an allocation's (a hyphenated UUID).
fn is_alloc_id(name: &str) -> bool {
    name.len() == 36 && uuid::Uuid::try_parse(name).is_ok()
}

/// Removes `<root>/<id>` and everything in it, logs and task directories included. What is
/// mounted inside (a CSI volume bound at a task's destination) is unmounted first, so its data
/// stays ([`crate::util::mounts::remove_tree`]); the links a task planted there are removed,
/// never followed. A mount that cannot be unmounted leaves the directory, with a warning.
fn remove_alloc_dir(root: &Path, id: &str) {
    let dir = root.join(id);
    if let Err(e) = crate::util::mounts::remove_tree(&dir) {
        log::warn!(
            "garbage collection: left {} in place: {e}; run the collection again",
            dir.display()
        );
        return;
    }
    // The docker driver's log cursors of the allocation go with it.
    let docker = root
        .parent()
        .map(|data_dir| crate::util::allocdir::docker_dir(data_dir, id));
    if let Some(dir) = docker {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("garbage collection: cannot remove {}: {e}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{gated_job, manager};
    use super::*;
    use crate::state::{Snapshot, StateFile};

    fn config(max_allocs: usize) -> GcConfig {
        GcConfig {
            max_allocs,
            ..GcConfig::default()
        }
    }

    fn usage(disk: f64, inodes: f64) -> Option<DiskUsage> {
        Some(DiskUsage {
            used_percent: disk,
            inodes_used_percent: inodes,
        })
    }

    /// The limits in Nomad's order and words; a value at the threshold is not over it.
    #[test]
    fn the_reason_to_collect_follows_nomad() {
        let c = GcConfig::default();
        assert_eq!(gc_reason(&c, usage(80.0, 70.0), 50), None);
        let r = gc_reason(&c, usage(85.2, 90.0), 60).unwrap();
        assert_eq!(
            (r.over, r.text.as_str(), r.excess),
            (
                Over::Disk,
                "disk usage of 85 is over gc threshold of 80",
                10
            )
        );
        assert_eq!(r.batch(2), 10);
        let r = gc_reason(&c, usage(10.0, 70.6), 3).unwrap();
        assert_eq!(
            (r.over, r.text.as_str()),
            (Over::Inodes, "inode usage of 71 is over gc threshold of 70")
        );
        assert_eq!(r.batch(2), 2, "the disk is measured again after a few");
        let r = gc_reason(&c, usage(10.0, 10.0), 51).unwrap();
        assert_eq!(
            (r.over, r.text.as_str(), r.batch(2)),
            (
                Over::Allocs,
                "number of allocations (51) is over the limit (50)",
                1
            )
        );
        assert_eq!(
            gc_reason(&c, None, 52).map(|r| r.excess),
            Some(2),
            "the count holds when statvfs fails"
        );
        assert_eq!(gc_reason(&config(0), None, 0), None);
    }

    /// `df`'s arithmetic: used out of used plus what is still available to users; no inodes
    /// counted is 0 %.
    #[test]
    fn disk_usage_from_statvfs_counts() {
        let u = DiskUsage::from_counts(100, 20, 10, 1000, 250);
        assert!((u.used_percent - 80.0 * 100.0 / 90.0).abs() < 1e-9, "{u:?}");
        assert_eq!(u.inodes_used_percent, 75.0);
        let empty = DiskUsage::from_counts(0, 0, 0, 0, 0);
        assert_eq!((empty.used_percent, empty.inodes_used_percent), (0.0, 0.0));
        let here = DiskUsage::of(Path::new("/")).unwrap();
        assert!((0.0..=100.0).contains(&here.used_percent), "{here:?}");
    }

    fn alloc_of(allocs: &AllocManager, job: &str) -> String {
        allocs.job_allocations(job).unwrap()[0].id.clone()
    }

    fn in_state(allocs: &AllocManager, id: &str) -> bool {
        let mut state = StateFile::default();
        allocs.fill(&mut state);
        state.allocations.iter().any(|a| a.id == id)
    }

    /// Oldest terminal first, out of the registry and the state file, then off the disk; a link
    /// a task planted is removed, its target untouched; an allocation that still waits is
    /// refused in Nomad's words; directories no allocation owns go, other names stay.
    #[test]
    fn terminal_allocations_go_oldest_first_and_orphans_are_swept() {
        let (allocs, dir, _shutdown) = manager("gc");
        for job in ["a", "b", "c"] {
            allocs.register_job(gated_job(job, 1)).unwrap();
        }
        let [a, b, c] = ["a", "b", "c"].map(|j| alloc_of(&allocs, j));
        allocs.stop_job("a", false).unwrap();
        allocs.stop_job("b", false).unwrap();
        let root = allocdir::alloc_root(&dir);
        let outside = dir.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "host data").unwrap();
        for id in [&a, &b, &c] {
            let logs = allocdir::log_dir(&root.join(id));
            std::fs::create_dir_all(&logs).unwrap();
            std::fs::write(logs.join("a.stdout.0"), "out").unwrap();
        }
        std::os::unix::fs::symlink(&outside, root.join(&a).join("a")).unwrap();
        let (_keep, never) = crossbeam_channel::bounded::<Never>(0);
        let gc = Collector::new(allocs.clone(), config(2), never);

        assert_eq!(gc.keep_below_limits().unwrap(), [a.as_str()]);
        assert!(allocs.get(&a).is_err() && !in_state(&allocs, &a));
        assert!(!root.join(&a).exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "host data"
        );
        assert!(root.join(&b).exists() && in_state(&allocs, &b));
        assert_eq!(gc.keep_below_limits().unwrap(), Vec::<String>::new());

        let refused = gc.collect(&c).unwrap_err().to_string();
        assert_eq!(
            refused,
            format!(
                "No such allocation on client, or allocation not eligible for GC: alloc {c} is \
                 not terminal: it waits for its host volumes"
            )
        );
        assert!(allocs.get(&c).is_ok() && root.join(&c).exists());
        assert!(matches!(gc.collect("nope"), Err(AllocError::AllocNotFound)));

        let orphan = uuid::Uuid::new_v4().to_string();
        std::fs::create_dir_all(root.join(&orphan).join("alloc")).unwrap();
        std::fs::create_dir_all(root.join("lost+found")).unwrap();
        assert_eq!(gc.collect_all().unwrap(), [b.as_str()]);
        assert!(!root.join(&b).exists() && !in_state(&allocs, &b));
        assert!(
            !root.join(&orphan).exists(),
            "a directory no allocation owns"
        );
        assert!(root.join("lost+found").exists() && root.join(&c).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
