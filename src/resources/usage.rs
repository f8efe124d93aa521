//! Task resource usage (resources.md "Stats"): one reading per source, each giving a
//! [`Reading`] — the task's process tree from `/proc` ([`proc_tree`]), the docker engine's
//! stats (the driver's), and a task cgroup's (converted where the stats are served, `api::stats`) — and a [`UsageTracker`]
//! that turns two readings of a task into CPU percentages, as Nomad's collectors do.
//!
//! No threads: readings are taken on the API worker that asks. The tracker's lock guards the
//! previous reading of each task only; nothing is read from `/proc` while it is held.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// One reading of a task's usage: memory now, CPU time consumed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    pub rss: u64,
    pub cache: u64,
    pub swap: u64,
    /// Bytes charged in all (a cgroup's or the engine's `usage`; the RSS for `/proc`).
    pub usage: u64,
    pub max_usage: u64,
    /// CPU time in user and kernel mode, seconds.
    pub user_seconds: f64,
    pub system_seconds: f64,
    pub throttled_periods: u64,
    pub throttled_time: u64,
    /// Which memory and CPU fields the source measures (Nomad's `Measured`).
    pub memory_measured: &'static [&'static str],
    pub cpu_measured: &'static [&'static str],
}

/// What `/proc` measures of a process tree.
pub const PROC_MEMORY_MEASURED: &[&str] = &["RSS", "Swap"];
/// What a task's cgroup measures.
pub const CGROUP_MEMORY_MEASURED: &[&str] = &["RSS", "Cache", "Swap", "Usage", "Max Usage"];
/// What a v2 cgroup measures on a kernel that keeps no peak (`memory.peak`, before Linux 5.19).
pub const CGROUP_NO_PEAK_MEMORY_MEASURED: &[&str] = &["RSS", "Cache", "Swap", "Usage"];
/// What the docker engine measures.
pub const DOCKER_MEMORY_MEASURED: &[&str] = &["RSS", "Cache", "Swap", "Usage", "Max Usage"];
/// The CPU fields `/proc` and the engine measure.
pub const CPU_MEASURED: &[&str] = &["System Mode", "User Mode", "Percent"];
/// The CPU fields a cgroup measures (its `cpu.stat` counts the throttling too).
pub const CGROUP_CPU_MEASURED: &[&str] = &[
    "System Mode",
    "User Mode",
    "Throttled Periods",
    "Throttled Time",
    "Percent",
];

/// A task's usage as the API shows it (Nomad's `ResourceUsage`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub reading: Reading,
    /// Percent of one core, from the last two readings (0 at the first).
    pub percent: f64,
    pub user_percent: f64,
    pub system_percent: f64,
    /// The percent as MHz of the node's cores (Nomad's `TotalTicks`).
    pub total_ticks: f64,
}

/// The previous reading of each task, for CPU percentages.
#[derive(Default)]
pub struct UsageTracker {
    /// Guards: task key (`<alloc>/<task>`) → when it was read and its CPU seconds then.
    previous: Mutex<HashMap<String, (Instant, f64, f64)>>,
}

impl UsageTracker {
    /// The usage of `key` from `reading`, taken at `now`; `mhz_per_core` turns percent into
    /// ticks.
    pub fn usage(&self, key: &str, reading: Reading, now: Instant, mhz_per_core: f64) -> Usage {
        let before = self.previous.lock().insert(
            key.to_string(),
            (now, reading.user_seconds, reading.system_seconds),
        );
        let (user_percent, system_percent) = match before {
            Some((then, user, system)) if now > then => {
                let wall = (now - then).as_secs_f64();
                let pct = |d: f64| (d.max(0.0) / wall) * 100.0;
                (
                    pct(reading.user_seconds - user),
                    pct(reading.system_seconds - system),
                )
            }
            _ => (0.0, 0.0),
        };
        let percent = user_percent + system_percent;
        Usage {
            reading,
            percent,
            user_percent,
            system_percent,
            total_ticks: percent / 100.0 * mhz_per_core,
        }
    }

    /// Forgets the tasks whose keys `keep` does not return true for (allocations gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.previous.lock().retain(|k, _| keep(k));
    }
}

/// The usage of the process tree led by `pid` (it and every descendant), from `/proc`:
/// `VmRSS` and `VmSwap` of `/proc/<pid>/status`, `utime` and `stime` of `/proc/<pid>/stat`.
/// `None` when `pid` is gone.
pub fn proc_tree(pid: i32) -> Option<Reading> {
    let tree = descendants(pid, &parents());
    let ticks = clock_ticks();
    let mut r = Reading {
        memory_measured: PROC_MEMORY_MEASURED,
        cpu_measured: CPU_MEASURED,
        ..Reading::default()
    };
    let mut found = false;
    for p in tree {
        let (Ok(status), Ok(stat)) = (
            std::fs::read_to_string(format!("/proc/{p}/status")),
            std::fs::read_to_string(format!("/proc/{p}/stat")),
        ) else {
            continue; // Exited between the scan and the read.
        };
        found |= p == pid;
        r.rss += status_kb(&status, "VmRSS") * 1024;
        r.swap += status_kb(&status, "VmSwap") * 1024;
        if let Some((user, system)) = stat_times(&stat) {
            r.user_seconds += user as f64 / ticks;
            r.system_seconds += system as f64 / ticks;
        }
    }
    r.usage = r.rss;
    found.then_some(r)
}

/// Every process's parent, from `/proc/<pid>/stat`.
fn parents() -> BTreeMap<i32, i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeMap::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, stat_field(&stat, 4)?.parse().ok()?))
        })
        .collect()
}

/// `pid` and its descendants in `parents` (pid → parent).
pub fn descendants(pid: i32, parents: &BTreeMap<i32, i32>) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// A field of `/proc/<pid>/stat`, numbered as proc(5) does (1 is the PID); the command in
/// parentheses may hold spaces, so fields are counted after its closing one.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

/// `utime` and `stime` (fields 14 and 15), in clock ticks.
fn stat_times(stat: &str) -> Option<(u64, u64)> {
    Some((
        stat_field(stat, 14)?.parse().ok()?,
        stat_field(stat, 15)?.parse().ok()?,
    ))
}

/// A `kB` line of `/proc/<pid>/status` (0 when absent: a kernel thread has no `VmRSS`).
fn status_kb(status: &str, key: &str) -> u64 {
    super::meminfo_kb(status, key).unwrap_or(0)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stat_fields_are_counted_after_the_command() {
        let stat =
            "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 5000";
        assert_eq!(stat_field(stat, 4), Some("1"));
        assert_eq!(stat_times(stat), Some((250, 75)));
    }

    #[test]
    fn descendants_are_the_whole_tree() {
        let parents = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 10), (20, 1)]);
        let mut tree = descendants(10, &parents);
        tree.sort_unstable();
        assert_eq!(tree, vec![10, 11, 12, 13]);
    }

    #[test]
    fn percent_comes_from_two_readings() {
        let t = UsageTracker::default();
        let start = Instant::now();
        let r = |user, system| Reading {
            user_seconds: user,
            system_seconds: system,
            ..Reading::default()
        };
        assert_eq!(t.usage("a/t", r(1.0, 1.0), start, 2000.0).percent, 0.0);
        let u = t.usage("a/t", r(1.5, 1.25), start + Duration::from_secs(1), 2000.0);
        assert_eq!(
            (u.user_percent, u.system_percent, u.percent),
            (50.0, 25.0, 75.0)
        );
        assert_eq!(u.total_ticks, 1500.0);
        t.retain(|k| k != "a/t");
        assert_eq!(
            t.usage("a/t", r(9.0, 9.0), start + Duration::from_secs(2), 1.0)
                .percent,
            0.0
        );
    }

    #[test]
    fn this_process_tree_is_read() {
        let r = proc_tree(std::process::id() as i32).unwrap();
        assert!(r.rss > 0 && r.usage == r.rss, "{r:?}");
        assert!(proc_tree(i32::MAX).is_none());
    }
}
