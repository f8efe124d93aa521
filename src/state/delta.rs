//! What a write changes. Every entry of the state has a key in its section; the store keeps a
//! fingerprint of each entry as the files hold it ([`Written`]), so a write compares what the
//! sources hold now with that and journals only the entries that differ ([`Delta`]), and a load
//! applies the journal's records over the snapshot entry by entry ([`apply`]).

use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::io;

use super::journal::{Batch, PluginKey};
use super::StateFile;
use crate::records::{AllocRecord, CsiVolumeRecord, JobRecord, PluginRecord, VolumeRecord};

/// A section of the state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Jobs,
    Allocations,
    CsiPlugins,
    HostVolumes,
    CsiVolumes,
}

/// One entry of the state: its section and its key there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Job(String),
    Allocation(String),
    CsiPlugin(PluginKey),
    HostVolume(String),
    CsiVolume(String),
}

impl Key {
    pub fn section(&self) -> Section {
        match self {
            Key::Job(_) => Section::Jobs,
            Key::Allocation(_) => Section::Allocations,
            Key::CsiPlugin(_) => Section::CsiPlugins,
            Key::HostVolume(_) => Section::HostVolumes,
            Key::CsiVolume(_) => Section::CsiVolumes,
        }
    }
}

/// An entry of a section: a record with a key.
pub(super) trait Entry: Serialize {
    type Key: Clone + Eq + Hash + Ord;
    fn key(&self) -> Self::Key;
}

impl Entry for JobRecord {
    type Key = String;
    fn key(&self) -> String {
        self.job.id.clone()
    }
}

impl Entry for AllocRecord {
    type Key = String;
    fn key(&self) -> String {
        self.id.clone()
    }
}

impl Entry for PluginRecord {
    type Key = PluginKey;
    fn key(&self) -> PluginKey {
        PluginKey {
            plugin_id: self.plugin_id.clone(),
            alloc_id: self.alloc_id.clone(),
            kind: self.kind,
        }
    }
}

impl Entry for VolumeRecord {
    type Key = String;
    fn key(&self) -> String {
        self.id.clone()
    }
}

impl Entry for CsiVolumeRecord {
    type Key = String;
    fn key(&self) -> String {
        self.id.clone()
    }
}

/// A 64-bit fingerprint of an entry's JSON, computed as it is serialised (nothing is kept).
fn fingerprint<E: Serialize>(entry: &E) -> io::Result<u64> {
    use std::hash::Hasher;
    struct HashWriter(std::collections::hash_map::DefaultHasher);
    impl io::Write for HashWriter {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut w = HashWriter(Default::default());
    serde_json::to_writer(&mut w, entry)?;
    Ok(w.0.finish())
}

/// The fingerprint of every entry the files hold (snapshot and journal, as a load reads them).
#[derive(Debug, Default)]
pub(super) struct Written {
    jobs: HashMap<String, u64>,
    allocations: HashMap<String, u64>,
    csi_plugins: HashMap<PluginKey, u64>,
    host_volumes: HashMap<String, u64>,
    csi_volumes: HashMap<String, u64>,
}

fn fingerprints<E: Entry>(entries: &[E]) -> io::Result<HashMap<E::Key, u64>> {
    entries
        .iter()
        .map(|e| Ok((e.key(), fingerprint(e)?)))
        .collect()
}

impl Written {
    /// What a snapshot of `state` holds.
    pub fn of(state: &StateFile) -> io::Result<Written> {
        Ok(Written {
            jobs: fingerprints(&state.jobs)?,
            allocations: fingerprints(&state.allocations)?,
            csi_plugins: fingerprints(&state.csi_plugins)?,
            host_volumes: fingerprints(&state.host_volumes)?,
            csi_volumes: fingerprints(&state.csi_volumes)?,
        })
    }
}

/// Which entries of a section a write compares.
#[derive(Debug)]
pub(super) enum Scope<'a, K> {
    /// None: the section was not filled.
    Skip,
    /// All of them: an entry missing from the fill was removed.
    All,
    /// Those named (a keyed section): a named entry missing from the fill was removed.
    Keys(&'a [K]),
}

impl<K> Clone for Scope<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Scope<'_, K> {}

/// The change of one entry's fingerprint that a write makes: `None` once it is removed.
type Update<K> = (K, Option<u64>);

/// A write's changes: the record to journal and, once it is on disk, the fingerprints to keep.
#[derive(Default)]
pub(super) struct Delta {
    pub batch: Batch,
    jobs: Vec<Update<String>>,
    allocations: Vec<Update<String>>,
    csi_plugins: Vec<Update<PluginKey>>,
    host_volumes: Vec<Update<String>>,
    csi_volumes: Vec<Update<String>>,
}

/// The scopes of the five sections, in the state file's order.
pub(super) struct Scopes<'a> {
    pub jobs: Scope<'a, String>,
    pub allocations: Scope<'a, String>,
    pub csi_plugins: Scope<'a, PluginKey>,
    pub host_volumes: Scope<'a, String>,
    pub csi_volumes: Scope<'a, String>,
}

/// The keys a write names in keyed sections, per section.
#[derive(Default)]
pub(super) struct Named {
    jobs: Vec<String>,
    allocations: Vec<String>,
    csi_plugins: Vec<PluginKey>,
    host_volumes: Vec<String>,
    csi_volumes: Vec<String>,
}

impl Named {
    pub fn of<'k>(keys: impl IntoIterator<Item = &'k Key>) -> Named {
        let mut n = Named::default();
        for k in keys {
            match k.clone() {
                Key::Job(id) => n.jobs.push(id),
                Key::Allocation(id) => n.allocations.push(id),
                Key::CsiPlugin(key) => n.csi_plugins.push(key),
                Key::HostVolume(id) => n.host_volumes.push(id),
                Key::CsiVolume(id) => n.csi_volumes.push(id),
            }
        }
        n
    }

    /// What a write compares: the `keyed` sections by these names, the others whole when `all`
    /// and not at all otherwise.
    pub fn scopes(&self, keyed: &[Section], all: bool) -> Scopes<'_> {
        fn scope<K>(keyed: bool, all: bool, keys: &[K]) -> Scope<'_, K> {
            match (keyed, all) {
                (true, _) => Scope::Keys(keys),
                (false, true) => Scope::All,
                (false, false) => Scope::Skip,
            }
        }
        let k = |s: Section| keyed.contains(&s);
        Scopes {
            jobs: scope(k(Section::Jobs), all, &self.jobs),
            allocations: scope(k(Section::Allocations), all, &self.allocations),
            csi_plugins: scope(k(Section::CsiPlugins), all, &self.csi_plugins),
            host_volumes: scope(k(Section::HostVolumes), all, &self.host_volumes),
            csi_volumes: scope(k(Section::CsiVolumes), all, &self.csi_volumes),
        }
    }
}

impl Delta {
    /// Compares `now` (what the sources filled) with `written`, section by section in `scopes`.
    pub fn between(now: StateFile, written: &Written, scopes: &Scopes) -> io::Result<Delta> {
        let mut d = Delta::default();
        let b = &mut d.batch;
        let r = &mut b.removed;
        compare(
            now.jobs,
            &written.jobs,
            scopes.jobs,
            (&mut b.jobs, &mut r.jobs, &mut d.jobs),
        )?;
        compare(
            now.allocations,
            &written.allocations,
            scopes.allocations,
            (&mut b.allocations, &mut r.allocations, &mut d.allocations),
        )?;
        compare(
            now.csi_plugins,
            &written.csi_plugins,
            scopes.csi_plugins,
            (&mut b.csi_plugins, &mut r.csi_plugins, &mut d.csi_plugins),
        )?;
        compare(
            now.host_volumes,
            &written.host_volumes,
            scopes.host_volumes,
            (
                &mut b.host_volumes,
                &mut r.host_volumes,
                &mut d.host_volumes,
            ),
        )?;
        compare(
            now.csi_volumes,
            &written.csi_volumes,
            scopes.csi_volumes,
            (&mut b.csi_volumes, &mut r.csi_volumes, &mut d.csi_volumes),
        )?;
        Ok(d)
    }

    /// The write is on disk: `written` now holds what it wrote.
    pub fn recorded(self, written: &mut Written) {
        keep(&mut written.jobs, self.jobs);
        keep(&mut written.allocations, self.allocations);
        keep(&mut written.csi_plugins, self.csi_plugins);
        keep(&mut written.host_volumes, self.host_volumes);
        keep(&mut written.csi_volumes, self.csi_volumes);
    }
}

fn keep<K: Eq + Hash>(map: &mut HashMap<K, u64>, updates: Vec<Update<K>>) {
    for (k, h) in updates {
        match h {
            Some(h) => map.insert(k, h),
            None => map.remove(&k),
        };
    }
}

type Out<'a, E> = (
    &'a mut Vec<E>,
    &'a mut Vec<<E as Entry>::Key>,
    &'a mut Vec<Update<<E as Entry>::Key>>,
);

fn compare<E: Entry>(
    now: Vec<E>,
    written: &HashMap<E::Key, u64>,
    scope: Scope<'_, E::Key>,
    (put, removed, updates): Out<'_, E>,
) -> io::Result<()> {
    if matches!(scope, Scope::Skip) {
        return Ok(());
    }
    let mut seen = HashSet::with_capacity(now.len());
    for e in now {
        let key = e.key();
        let h = fingerprint(&e)?;
        if written.get(&key) != Some(&h) {
            updates.push((key.clone(), Some(h)));
            put.push(e);
        }
        seen.insert(key);
    }
    let gone: Vec<E::Key> = match scope {
        Scope::Skip => Vec::new(),
        Scope::All => written
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect(),
        Scope::Keys(keys) => keys
            .iter()
            .filter(|k| !seen.contains(*k) && written.contains_key(*k))
            .cloned()
            .collect(),
    };
    for k in gone {
        updates.push((k.clone(), None));
        removed.push(k);
    }
    Ok(())
}

/// Applies the journal's writes, in order, over the snapshot `state`.
pub(super) fn apply(state: &mut StateFile, batches: Vec<Batch>) {
    if batches.is_empty() {
        return;
    }
    let (mut jobs, mut allocs, mut plugins, mut volumes, mut csi_volumes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for b in batches {
        let r = b.removed;
        jobs.push((r.jobs, b.jobs));
        allocs.push((r.allocations, b.allocations));
        plugins.push((r.csi_plugins, b.csi_plugins));
        volumes.push((r.host_volumes, b.host_volumes));
        csi_volumes.push((r.csi_volumes, b.csi_volumes));
    }
    apply_section(&mut state.jobs, jobs);
    apply_section(&mut state.allocations, allocs);
    apply_section(&mut state.csi_plugins, plugins);
    apply_section(&mut state.host_volumes, volumes);
    apply_section(&mut state.csi_volumes, csi_volumes);
}

fn apply_section<E: Entry>(section: &mut Vec<E>, writes: Vec<(Vec<E::Key>, Vec<E>)>) {
    if writes.iter().all(|(r, p)| r.is_empty() && p.is_empty()) {
        return;
    }
    let mut map: BTreeMap<E::Key, E> = std::mem::take(section)
        .into_iter()
        .map(|e| (e.key(), e))
        .collect();
    for (removed, put) in writes {
        for k in removed {
            map.remove(&k);
        }
        for e in put {
            map.insert(e.key(), e);
        }
    }
    *section = map.into_values().collect();
}
