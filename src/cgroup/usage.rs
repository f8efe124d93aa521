//! A task's resource usage read from its cgroup's files (v1 and v2), for the stats endpoints.

use std::path::Path;

use super::{read, CgroupError};

/// Memory in bytes and CPU time in nanoseconds, as the cgroup counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    pub memory_rss: u64,
    pub memory_cache: u64,
    pub memory_usage: u64,
    /// The most it used (v2: `memory.peak`, Linux 5.19+; 0 where the kernel does not keep it).
    pub memory_max_usage: u64,
    pub memory_swap: u64,
    pub cpu_total_ns: u64,
    /// The total split into user and kernel mode (v1: `cpuacct.usage_user`/`_sys`, Linux
    /// 4.7+; where the kernel does not split it, all of it is counted as user time).
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cpu_throttled_ns: u64,
    pub cpu_throttled_periods: u64,
}

/// `cpu_user_ns`/`cpu_system_ns` from what the kernel split, or all as user time.
fn split(total: u64, user: u64, system: u64) -> (u64, u64) {
    if user == 0 && system == 0 {
        (total, 0)
    } else {
        (user, system)
    }
}

/// `key value` lines (`memory.stat`, `cpu.stat`).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn number(path: &Path) -> Result<u64, CgroupError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| CgroupError::Io {
        action: "parse",
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("not a number: {:?}", text.trim())),
    })
}

/// A file that older kernels lack reads as 0.
fn optional(path: &Path) -> Result<u64, CgroupError> {
    if path.exists() {
        number(path)
    } else {
        Ok(0)
    }
}

pub(super) fn v2(dir: &Path) -> Result<CgroupUsage, CgroupError> {
    let stat = read(&dir.join("memory.stat"))?;
    let cpu = read(&dir.join("cpu.stat"))?;
    let total = field(&cpu, "usage_usec").unwrap_or(0) * 1000;
    let (user, system) = split(
        total,
        field(&cpu, "user_usec").unwrap_or(0) * 1000,
        field(&cpu, "system_usec").unwrap_or(0) * 1000,
    );
    Ok(CgroupUsage {
        memory_rss: field(&stat, "anon").unwrap_or(0),
        memory_cache: field(&stat, "file").unwrap_or(0),
        memory_usage: number(&dir.join("memory.current"))?,
        memory_max_usage: optional(&dir.join("memory.peak"))?,
        memory_swap: optional(&dir.join("memory.swap.current"))?,
        cpu_total_ns: total,
        cpu_user_ns: user,
        cpu_system_ns: system,
        cpu_throttled_ns: field(&cpu, "throttled_usec").unwrap_or(0) * 1000,
        cpu_throttled_periods: field(&cpu, "nr_throttled").unwrap_or(0),
    })
}

/// v1: `cpuacct` (where it is mounted) counts CPU time; `cpu.stat` the throttling.
pub(super) fn v1(
    memory: &Path,
    cpu: &Path,
    cpuacct: Option<&Path>,
) -> Result<CgroupUsage, CgroupError> {
    let stat = read(&memory.join("memory.stat"))?;
    // The hierarchical totals include the task's cgroup's children, if it made any.
    let get = |k: &str| field(&stat, &format!("total_{k}")).or_else(|| field(&stat, k));
    let cpu_stat = read(&cpu.join("cpu.stat"))?;
    let acct = cpuacct.unwrap_or(cpu);
    let total = match cpuacct {
        Some(d) => number(&d.join("cpuacct.usage"))?,
        None => optional(&cpu.join("cpuacct.usage"))?,
    };
    let (user, system) = split(
        total,
        optional(&acct.join("cpuacct.usage_user"))?,
        optional(&acct.join("cpuacct.usage_sys"))?,
    );
    Ok(CgroupUsage {
        memory_rss: get("rss").unwrap_or(0),
        memory_cache: get("cache").unwrap_or(0),
        memory_usage: number(&memory.join("memory.usage_in_bytes"))?,
        memory_max_usage: number(&memory.join("memory.max_usage_in_bytes"))?,
        memory_swap: get("swap").unwrap_or(0),
        cpu_total_ns: total,
        cpu_user_ns: user,
        cpu_system_ns: system,
        cpu_throttled_ns: field(&cpu_stat, "throttled_time").unwrap_or(0),
        cpu_throttled_periods: field(&cpu_stat, "nr_throttled").unwrap_or(0),
    })
}
