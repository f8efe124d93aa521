//! The CPUs of the task cgroups (docs/resources.md, "`resources { cores }`"): a task with
//! `cores` runs on its own CPUs, every other task on the shared set, the parent's CPUs less
//! those held, as Nomad partitions them. When a task with cores is made or removed, the other
//! tasks' cgroups get the new shared set.
//!
//! One [`Partition`] per agent, shared by every clone of its `Cgroups` (both drivers). Its lock
//! guards the held map *and* every write of a task's `cpuset.cpus`, so that a task made while
//! the shared set changes gets the new set: the two cannot interleave. Writes are a few small
//! files of cgroupfs, under the lock; nothing else is done under it.
//!
//! Only this agent's task cgroups are rewritten (those it made or re-attached to), never every
//! directory under the parent: another agent given the same `cgroup_parent` keeps its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{read, write, CgroupError};
use crate::resources::{format_cpuset, parse_cpuset};

/// The held CPUs of the agent's task cgroups.
#[derive(Debug, Clone)]
pub struct Partition {
    /// The parent's directory in the cpuset hierarchy: its children are the task cgroups.
    dir: PathBuf,
    v2: bool,
    /// `client { reserved { cores } }`: the system's, no task runs on them.
    reserved: Vec<u32>,
    /// Guards the writes too (module doc).
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Task cgroup name (`<alloc_id>.<task>`) → the CPUs it holds.
    held: BTreeMap<String, Vec<u32>>,
    /// This agent's task cgroups that hold none: they get the shared set.
    others: std::collections::BTreeSet<String>,
}

/// What the tasks without cores run on: `all` less the `reserved` ones and what is `held`; when
/// that would leave none (a cpuset without CPUs takes no process), all but the reserved ones,
/// shared with the tasks that hold them; all of them when even those are none.
pub fn shared(all: &[u32], reserved: &[u32], held: &BTreeMap<String, Vec<u32>>) -> Vec<u32> {
    let unreserved: Vec<u32> = all
        .iter()
        .filter(|c| !reserved.contains(c))
        .copied()
        .collect();
    let left: Vec<u32> = unreserved
        .iter()
        .filter(|c| !held.values().any(|h| h.contains(c)))
        .copied()
        .collect();
    match (left.is_empty(), unreserved.is_empty()) {
        (false, _) => left,
        (true, false) => unreserved,
        (true, true) => all.to_vec(),
    }
}

impl Partition {
    pub(super) fn new(dir: PathBuf, v2: bool) -> Partition {
        Partition {
            dir,
            v2,
            reserved: Vec::new(),
            state: Arc::default(),
        }
    }

    pub(super) fn reserve(&mut self, cores: &[u32]) {
        self.reserved = cores.to_vec();
    }

    /// The parent's CPUs (v2: the effective ones, its own file may be empty).
    fn all(&self) -> Result<Vec<u32>, CgroupError> {
        let file = if self.v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.cpus"
        };
        let text = read(&self.dir.join(file))?;
        parse_cpuset(text.trim()).map_err(|e| {
            CgroupError::Unavailable(format!("{}: {e}", self.dir.join(file).display()))
        })
    }

    /// What a task without cores writes: v2's empty ("the parent's") while nothing is held or
    /// reserved. Empty is a newline: writing no bytes at all makes no `write(2)`, and the
    /// kernel would keep the list from before.
    fn shared_text(&self, held: &BTreeMap<String, Vec<u32>>) -> Result<String, CgroupError> {
        if self.v2 && held.is_empty() && self.reserved.is_empty() {
            return Ok("\n".to_string());
        }
        Ok(format_cpuset(&shared(&self.all()?, &self.reserved, held)))
    }

    /// Writes the `cpuset.cpus` of the task cgroup `dir`: its `cores` (held from now on), or the
    /// shared set when it has none. A change of what is held gives the others the new set.
    pub(super) fn apply(&self, dir: &Path, cores: &[u32]) -> Result<(), CgroupError> {
        let name = name_of(dir);
        let mut st = self.state.lock();
        if cores.is_empty() {
            st.others.insert(name.clone());
            let before = st.held.remove(&name).is_some();
            write(&dir.join("cpuset.cpus"), &self.shared_text(&st.held)?)?;
            if before {
                self.rewrite_others(&st);
            }
            return Ok(());
        }
        st.others.remove(&name);
        write(&dir.join("cpuset.cpus"), &format_cpuset(cores))?;
        if st.held.insert(name, cores.to_vec()).as_deref() != Some(cores) {
            self.rewrite_others(&st);
        }
        Ok(())
    }

    /// Marks the task cgroup `dir` as this agent's again, holding `cores` (none: the shared
    /// set): a task an earlier agent started, re-attached. Its own file is written again: until
    /// this call it was not known, and what is held may have changed since it was written (a
    /// rewrite of the others' may even have given a task with cores the shared set meanwhile).
    pub(super) fn hold(&self, dir: &Path, cores: &[u32]) {
        if let Err(e) = self.apply(dir, cores) {
            log::warn!("cgroups: the CPUs of {}: {e}", dir.display());
        }
    }

    /// The task cgroup `dir` is going: its CPUs go back to the shared set. A task with cores
    /// that died while no agent ran was never held by this one, but its cgroup still has its
    /// CPUs and the others were kept off them: a cgroup whose CPUs are not the shared set
    /// gives them back too.
    pub(super) fn release(&self, dir: &Path) {
        let name = name_of(dir);
        let mut st = self.state.lock();
        st.others.remove(&name);
        let was_held = st.held.remove(&name).is_some();
        let stale = !was_held
            && match (self.shared_text(&st.held), read(&dir.join("cpuset.cpus"))) {
                (Ok(shared), Ok(own)) => own.trim() != shared.trim(),
                _ => false,
            };
        if was_held || stale {
            self.rewrite_others(&st);
        }
    }

    /// Gives every task cgroup of this agent that holds nothing the shared set. One that cannot
    /// be written (removed meanwhile) is skipped with a log line: it is gone or gets the set
    /// when made.
    fn rewrite_others(&self, st: &State) {
        let text = match self.shared_text(&st.held) {
            Ok(t) => t,
            Err(e) => return log::warn!("cgroups: the shared CPUs: {e}"),
        };
        for name in &st.others {
            let path = self.dir.join(name);
            if let Err(e) = write(&path.join("cpuset.cpus"), &text) {
                log::debug!("cgroups: shared CPUs {text:?} not given: {e}");
            }
        }
    }
}

fn name_of(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_set_is_what_is_not_held_or_everything() {
        let all = [0, 1, 2, 3];
        let mut held = BTreeMap::new();
        assert_eq!(shared(&all, &[], &held), vec![0, 1, 2, 3]);
        assert_eq!(shared(&all, &[0], &held), vec![1, 2, 3], "not the system's");
        held.insert("a.t".to_string(), vec![0, 2]);
        assert_eq!(shared(&all, &[], &held), vec![1, 3]);
        assert_eq!(shared(&all, &[3], &held), vec![1]);
        held.insert("b.t".to_string(), vec![1, 3]);
        assert_eq!(shared(&all, &[], &held), vec![0, 1, 2, 3], "none left: all");
        assert_eq!(shared(&all, &[0], &held), vec![1, 2, 3]);
        assert_eq!(shared(&all, &[0, 1, 2, 3], &held), vec![0, 1, 2, 3]);
    }

    #[test]
    fn tasks_without_cores_follow_what_the_others_hold() {
        let dir = std::env::temp_dir().join(format!("nw-part-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpuset.cpus"), "0-3\n").unwrap();
        let (plain, pinned) = (dir.join("a1.web"), dir.join("a2.db"));
        for d in [&plain, &pinned] {
            std::fs::create_dir_all(d).unwrap();
        }
        let get = |d: &Path| std::fs::read_to_string(d.join("cpuset.cpus")).unwrap();
        let p = Partition::new(dir.clone(), false);
        p.apply(&plain, &[]).unwrap();
        assert_eq!(get(&plain), "0-3");
        p.apply(&pinned, &[1, 2]).unwrap();
        assert_eq!((get(&pinned), get(&plain)), ("1-2".into(), "0,3".into()));
        p.release(&pinned);
        assert_eq!(get(&plain), "0-3", "released CPUs are shared again");
        p.hold(&pinned, &[3]);
        assert_eq!(get(&plain), "0-2", "a re-attached task's CPUs are held");

        // After an agent restart: two re-attached tasks with cores; the first one's hold must
        // not leave the second on the shared set.
        std::fs::remove_dir_all(&pinned).unwrap();
        let (one, two) = (dir.join("a3.x"), dir.join("a4.y"));
        for (d, cpus) in [(&one, "0\n"), (&two, "1\n"), (&plain, "2-3\n")] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("cpuset.cpus"), cpus).unwrap();
        }
        let p = Partition::new(dir.clone(), false);
        p.hold(&one, &[0]);
        p.hold(&plain, &[]);
        p.hold(&two, &[1]);
        assert_eq!((get(&one), get(&two)), ("0".into(), "1".into()));
        assert_eq!(get(&plain), "2-3");

        // A task with cores that died while no agent ran, never held by this one: as it goes,
        // its CPU is shared again although nothing had been rewritten since the start.
        std::fs::remove_dir_all(&one).unwrap();
        std::fs::remove_dir_all(&two).unwrap();
        std::fs::write(plain.join("cpuset.cpus"), "0-2\n").unwrap();
        std::fs::create_dir_all(&pinned).unwrap();
        std::fs::write(pinned.join("cpuset.cpus"), "3\n").unwrap();
        let p = Partition::new(dir.clone(), false);
        // Before the plain task is re-attached, nothing of it is known: it is not touched.
        p.hold(&plain, &[]);
        std::fs::write(plain.join("cpuset.cpus"), "0-2\n").unwrap();
        p.release(&pinned);
        assert_eq!(get(&plain), "0-3");

        // A cgroup under the same parent that this agent never made nor re-attached (another
        // agent's) is never rewritten.
        let foreign = dir.join("a9.other");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("cpuset.cpus"), "3\n").unwrap();
        let pinned2 = dir.join("a5.z");
        std::fs::create_dir_all(&pinned2).unwrap();
        p.apply(&pinned2, &[0]).unwrap();
        assert_eq!(get(&plain), "1-3");
        assert_eq!(get(&foreign), "3\n", "untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
