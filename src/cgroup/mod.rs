//! cgroups: one per task, made by the agent before the task starts, with the limits its
//! `resources` ask for (docs/resources.md, "cgroups").
//!
//! - [`Cgroups::detect`]: at start, which hierarchy the node has (v2, v1, or none usable), and
//!   the parent cgroup `client { cgroup_parent }` made in it. The agent logs the outcome once; with
//!   none, tasks run unconfined.
//! - [`TaskCgroup`]: `<parent>/<alloc_id>.<task>` (in each v1 controller, or one v2 directory).
//!   The `raw_exec` driver [`TaskCgroup::create`]s it and writes its limits before every start,
//!   hands its paths to the keeper (whose child joins it before `execve` and which kills what is
//!   left in it and reads the OOM kill when the task's process is reaped:
//!   `nodeward_keeper::cgroup`), and [`TaskCgroup::remove`]s it when the task is destroyed.
//!   [`TaskCgroup::usage`] reads what the task uses.
//! - [`Partition`]: which task cgroups hold CPUs for their `cores`; the others get the rest.
//!
//! No thread of its own: every call runs on its caller's (the agent's start, a task runner's).
//! The name is a pure function of the allocation and the task, so an agent that restarts finds
//! the cgroups of the tasks the keeper kept without any record of them.

mod partition;
mod usage;

use std::io;
use std::path::{Path, PathBuf};

pub use nodeward_keeper::cgroup::CgroupPaths;
pub use partition::Partition;
pub use usage::CgroupUsage;

use crate::jobspec::Resources;

/// `client { cgroup_parent }` when not set.
pub const DEFAULT_PARENT: &str = "nodeward";
/// Where the kernel's cgroup filesystems are mounted.
pub const HOST_ROOT: &str = "/sys/fs/cgroup";
/// The v1 controllers a task cgroup is made in; all must be mounted and writable.
const V1_CONTROLLERS: [&str; 5] = ["memory", "cpu", "cpuset", "pids", "freezer"];
/// Optional v1 controllers: CPU time is accounted in `cpuacct` where it is mounted on its own.
const V1_OPTIONAL: [&str; 1] = ["cpuacct"];
/// What a v2 parent enables for its children.
const V2_CONTROLLERS: [&str; 4] = ["cpu", "cpuset", "memory", "pids"];
/// The agent's OOM score adjustment: the kernel picks a task, then the keeper (-500), and the
/// agent last.
pub const AGENT_OOM_SCORE_ADJ: i32 = -999;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroups are not usable: {0}")]
    Unavailable(String),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err("write", path))
}

fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(io_err("read", path))
}

fn mkdir(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir_all(path).map_err(io_err("create", path))
}

/// Checks `client { cgroup_parent }`: a relative path of plain names (a systemd slice name is
/// one), so that no task cgroup is made outside the parent.
pub fn check_parent(parent: &str) -> Result<(), String> {
    let ok_name = |n: &str| {
        !n.is_empty()
            && n != "."
            && n != ".."
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c))
    };
    if parent.is_empty() || parent.starts_with('/') || !parent.split('/').all(ok_name) {
        return Err(format!(
            "{parent:?} is not a relative cgroup path of names made of letters, digits and - _ . @ :"
        ));
    }
    Ok(())
}

/// The cgroup hierarchy in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The node attribute `os.cgroups.version`.
    pub fn attribute(self) -> &'static str {
        match self {
            Version::V1 => "1",
            Version::V2 => "2",
        }
    }
}

/// The node's cgroups as the agent uses them: the hierarchy, where it is mounted, the parent.
#[derive(Debug, Clone)]
pub struct Cgroups {
    version: Version,
    root: PathBuf,
    parent: String,
    /// v1: the optional controllers that are mounted, besides [`V1_CONTROLLERS`].
    optional: Vec<&'static str>,
    /// The CPUs the task cgroups hold, shared by every clone.
    partition: Partition,
}

impl Cgroups {
    /// The agent's cgroups from its configuration: `None`, logged once, when they are switched
    /// off or cannot be used. Also lowers the agent's OOM score adjustment.
    pub fn for_agent(enabled: bool, parent: &str) -> Option<Cgroups> {
        protect_agent_from_oom();
        if !enabled {
            log::info!("cgroups: off (client {{ cgroups = false }}): tasks run unconfined");
            return None;
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            log::warn!("cgroups: not used (the agent is not root): tasks run unconfined");
            return None;
        }
        match Cgroups::detect(Path::new(HOST_ROOT), parent) {
            Ok(c) => {
                log::info!(
                    "cgroups: v{} under {}, parent {:?}",
                    c.version.attribute(),
                    c.root.display(),
                    c.parent
                );
                Some(c)
            }
            Err(e) => {
                log::warn!("cgroups: {e}: tasks run unconfined");
                None
            }
        }
    }

    /// Which hierarchy `root` holds, and the parent made in it: v2 when `root` is a unified
    /// hierarchy (it has `cgroup.controllers`), else v1 when every controller of
    /// [`V1_CONTROLLERS`] is mounted below it. An empty v2 hierarchy beside v1 (a "hybrid"
    /// system) has no controllers to use: v1 is.
    pub fn detect(root: &Path, parent: &str) -> Result<Cgroups, CgroupError> {
        check_parent(parent).map_err(CgroupError::Unavailable)?;
        let c = if root.join("cgroup.controllers").is_file() {
            Cgroups {
                version: Version::V2,
                root: root.to_path_buf(),
                parent: parent.to_string(),
                optional: Vec::new(),
                partition: Partition::new(root.join(parent), true),
            }
        } else {
            let missing: Vec<_> = V1_CONTROLLERS
                .iter()
                .filter(|c| !root.join(c).join("cgroup.procs").is_file())
                .collect();
            if !missing.is_empty() {
                return Err(CgroupError::Unavailable(format!(
                    "no cgroup v2 hierarchy at {}, and no v1 controller {missing:?} there",
                    root.display()
                )));
            }
            Cgroups {
                version: Version::V1,
                root: root.to_path_buf(),
                parent: parent.to_string(),
                optional: V1_OPTIONAL
                    .into_iter()
                    .filter(|c| root.join(c).join("cgroup.procs").is_file())
                    .collect(),
                partition: Partition::new(root.join("cpuset").join(parent), false),
            }
        };
        c.make_parent()?;
        Ok(c)
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Keeps tasks without cores off `client { reserved { cores } }` too (tasks with cores are
    /// never given them: placement leaves them out).
    pub fn with_reserved_cores(mut self, cores: &[u32]) -> Cgroups {
        self.partition.reserve(cores);
        self
    }

    /// Makes the parent (each level of it) and readies it for task cgroups: v2 enables the
    /// controllers for its children at every level; v1's cpuset needs its CPUs and memory nodes
    /// before a process may join below it.
    fn make_parent(&self) -> Result<(), CgroupError> {
        match self.version {
            Version::V2 => {
                let mut dir = self.root.clone();
                let enable = V2_CONTROLLERS.map(|c| format!("+{c}")).join(" ");
                for name in self.parent.split('/') {
                    write(&dir.join("cgroup.subtree_control"), &enable)?;
                    dir.push(name);
                    mkdir(&dir)?;
                }
                write(&dir.join("cgroup.subtree_control"), &enable)
            }
            Version::V1 => {
                for c in self.v1_controllers() {
                    let mut dir = self.root.join(c);
                    for name in self.parent.split('/') {
                        let up = dir.clone();
                        dir.push(name);
                        mkdir(&dir)?;
                        if c == "cpuset" {
                            inherit_cpuset(&up, &dir)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    fn v1_controllers(&self) -> impl Iterator<Item = &'static str> + '_ {
        V1_CONTROLLERS
            .into_iter()
            .chain(self.optional.iter().copied())
    }

    /// The cgroup of a task: `<parent>/<alloc_id>.<task>`.
    pub fn task(&self, alloc_id: &str, task: &str) -> TaskCgroup {
        let name = format!("{}/{alloc_id}.{task}", self.parent);
        let dirs = match self.version {
            Version::V2 => vec![("", self.root.join(&name))],
            Version::V1 => self
                .v1_controllers()
                .map(|c| (c, self.root.join(c).join(&name)))
                .collect(),
        };
        TaskCgroup {
            version: self.version,
            dirs,
            partition: self.partition.clone(),
        }
    }
}

/// v1's cpuset: a new cgroup has no CPUs and no memory nodes, and no process may join it until
/// it has; it gets its parent's.
fn inherit_cpuset(parent: &Path, dir: &Path) -> Result<(), CgroupError> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        if read(&dir.join(f))?.trim().is_empty() {
            write(&dir.join(f), read(&parent.join(f))?.trim())?;
        }
    }
    Ok(())
}

/// What a task's cgroup enforces, from its `resources`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The hard limit: `memory_max` when set, else `memory`.
    pub memory_hard_bytes: u64,
    /// `memory` when `memory_max` is set (then it is the soft limit), else `None`.
    pub memory_soft_bytes: Option<u64>,
    /// `cpu` in MHz, as v1 shares (Nomad's: one share per MHz, at least 2).
    pub cpu_shares: u64,
    /// The CPUs of its `cores`, its `cpuset.cpus`; empty when it asks for none, and then it
    /// gets the shared set ([`Partition`]).
    pub cpus: Vec<u32>,
}

const MIB: u64 = 1024 * 1024;

impl Limits {
    /// The limits of `r`, with `cores` the CPUs the task holds (empty for none).
    pub fn of(r: &Resources, cores: &[u32]) -> Limits {
        let mb = u64::from(r.memory_mb);
        let max = u64::from(r.memory_max_mb);
        Limits {
            memory_hard_bytes: if max > 0 { max * MIB } else { mb * MIB },
            memory_soft_bytes: (max > 0).then_some(mb * MIB),
            cpu_shares: u64::from(r.cpu).max(2),
            cpus: cores.to_vec(),
        }
    }

    /// v2's `cpu.weight` (1 to 10000) for the shares: runc's and systemd's conversion, which maps
    /// v1's range (2 to 262144, default 1024) onto v2's linearly.
    pub fn cpu_weight(&self) -> u64 {
        let shares = self.cpu_shares.clamp(2, 262_144);
        1 + ((shares - 2) * 9999) / 262_142
    }
}

/// The OOM score adjustment of the agent, lowered once at start (needs CAP_SYS_RESOURCE; without
/// it the agent keeps what it has).
fn protect_agent_from_oom() {
    let path = "/proc/self/oom_score_adj";
    if let Err(e) = std::fs::write(path, AGENT_OOM_SCORE_ADJ.to_string()) {
        log::info!("cannot lower the agent's OOM score adjustment: {e}");
    }
}

/// One task's cgroup (module doc).
#[derive(Debug, Clone)]
pub struct TaskCgroup {
    version: Version,
    /// v2: one directory (controller `""`); v1: one per controller.
    dirs: Vec<(&'static str, PathBuf)>,
    partition: Partition,
}

impl TaskCgroup {
    fn dir(&self, controller: &str) -> &Path {
        self.dirs
            .iter()
            .find(|(c, _)| self.version == Version::V2 || *c == controller)
            .map(|(_, d)| d.as_path())
            .unwrap_or(&self.dirs[0].1)
    }

    fn has(&self, controller: &str) -> bool {
        self.version == Version::V2 || self.dirs.iter().any(|(c, _)| *c == controller)
    }

    /// The directory the memory limits are in (tests and operators read it).
    pub fn memory_dir(&self) -> &Path {
        self.dir("memory")
    }

    /// Makes the cgroup (an existing one, a restart's, is reused) and writes its limits.
    pub fn create(&self, limits: &Limits) -> Result<(), CgroupError> {
        for (c, d) in &self.dirs {
            mkdir(d)?;
            if *c == "cpuset" {
                inherit_cpuset(d.parent().unwrap_or(d), d)?;
            }
        }
        // A freeze an agent killed in the middle of [`TaskCgroup::remove`] left behind would
        // hold the task before it runs (and the keeper with it).
        let paths = self.paths();
        nodeward_keeper::cgroup::thaw(&paths).map_err(io_err("thaw", &paths.kill))?;
        let hard = limits.memory_hard_bytes.to_string();
        let mem = self.memory_dir();
        match self.version {
            Version::V2 => {
                write(&mem.join("memory.max"), &hard)?;
                let low = limits.memory_soft_bytes.unwrap_or(0).to_string();
                write(&mem.join("memory.low"), &low)?;
                // No swap beyond the limit: a task that outgrows it is OOM-killed, not swapped.
                let swap = mem.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
                write(
                    &self.dir("cpu").join("cpu.weight"),
                    &limits.cpu_weight().to_string(),
                )?;
            }
            Version::V1 => {
                // memsw (memory + swap) may not be below memory: the first write of the memory
                // limit fails when it would be above the old memsw, and succeeds after it.
                let first = write(&mem.join("memory.limit_in_bytes"), &hard);
                let memsw = mem.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &hard)?;
                }
                if first.is_err() {
                    write(&mem.join("memory.limit_in_bytes"), &hard)?;
                }
                let soft = match limits.memory_soft_bytes {
                    Some(b) => b.to_string(),
                    None => "-1".to_string(),
                };
                write(&mem.join("memory.soft_limit_in_bytes"), &soft)?;
                write(
                    &self.dir("cpu").join("cpu.shares"),
                    &limits.cpu_shares.to_string(),
                )?;
            }
        }
        // Its cores, or the CPUs no task holds.
        self.partition.apply(self.dir("cpuset"), &limits.cpus)
    }

    /// Takes a re-attached task's cgroup back as this agent's: its `cores` held (the tasks
    /// without cores kept off them after an agent restart too), or, with none, the shared set.
    pub fn hold(&self, cores: &[u32]) {
        self.partition.hold(self.dir("cpuset"), cores);
    }

    /// What the keeper needs: the directories the task's process joins, where OOM kills are
    /// counted, where the processes are killed from.
    pub fn paths(&self) -> CgroupPaths {
        CgroupPaths {
            v2: self.version == Version::V2,
            join: self.dirs.iter().map(|(_, d)| d.clone()).collect(),
            memory: self.memory_dir().to_path_buf(),
            kill: self.dir("freezer").to_path_buf(),
        }
    }

    /// The PIDs in the cgroup (empty when it is gone).
    pub fn procs(&self) -> Vec<i32> {
        nodeward_keeper::cgroup::procs(self.dir("freezer")).unwrap_or_default()
    }

    /// Kills every process left in the cgroup and removes it (each v1 directory). Killed
    /// processes leave their cgroup as they exit; the removal waits a bounded time for that.
    pub fn remove(&self) -> Result<(), CgroupError> {
        self.partition.release(self.dir("cpuset"));
        let paths = self.paths();
        nodeward_keeper::cgroup::kill_all(&paths)
            .map_err(io_err("kill the processes of", &paths.kill))?;
        for (_, d) in &self.dirs {
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    // EBUSY: a process killed above has not exited yet.
                    Err(_) if tries < 200 => {
                        tries += 1;
                        if tries % 50 == 0 {
                            let _ = nodeward_keeper::cgroup::kill_all(&paths);
                        }
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    Err(e) => return Err(io_err("remove", d)(e)),
                }
            }
        }
        Ok(())
    }

    /// What the task uses now, read from the cgroup's files.
    pub fn usage(&self) -> Result<CgroupUsage, CgroupError> {
        match self.version {
            Version::V2 => usage::v2(self.dir("memory")),
            Version::V1 => usage::v1(
                self.dir("memory"),
                self.dir("cpu"),
                self.has("cpuacct").then(|| self.dir("cpuacct")),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
