//! The host's usage (`GET /v1/client/stats`, Nomad's `HostStats`): memory from `/proc/meminfo`,
//! CPU per core from two readings of `/proc/stat` ([`HostSampler`] keeps the previous one),
//! uptime, and the data directory's file system (also the fingerprint's disk).
//!
//! No threads: read on the API worker that asks; the sampler's lock guards the previous
//! reading only and is not held while `/proc` is read.

use parking_lot::Mutex;
use std::io;
use std::path::{Path, PathBuf};

/// A file system's size, in bytes (`statvfs`): `available` is what an unprivileged user may
/// still take, as `df` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Disk {
    pub size: u64,
    pub used: u64,
    pub available: u64,
    pub inodes_used_percent_x100: u64,
}

/// The file system `path` is on.
pub fn disk_of(path: &Path) -> io::Result<Disk> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes into the zeroed struct it is given; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = s.f_frsize as u64;
    let (blocks, free, avail) = (s.f_blocks as u64, s.f_bfree as u64, s.f_bavail as u64);
    let (files, ffree) = (s.f_files as u64, s.f_ffree as u64);
    Ok(Disk {
        size: blocks * unit,
        used: blocks.saturating_sub(free) * unit,
        available: avail * unit,
        inodes_used_percent_x100: (files.saturating_sub(ffree) * 10_000)
            .checked_div(files)
            .unwrap_or(0),
    })
}

/// Host memory, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostMemory {
    pub total: u64,
    pub available: u64,
    pub used: u64,
    pub free: u64,
}

/// One core's time since the previous reading, in percent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostCpu {
    pub name: String,
    pub user: f64,
    pub system: f64,
    pub idle: f64,
    pub total: f64,
}

/// The file system the data directory is on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostDisk {
    pub device: String,
    pub mountpoint: PathBuf,
    pub disk: Disk,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostStats {
    pub memory: HostMemory,
    pub cpus: Vec<HostCpu>,
    pub uptime_seconds: u64,
    pub disk: Option<HostDisk>,
    /// The cores' busy percent as MHz (Nomad's `CPUTicksConsumed`).
    pub cpu_ticks_consumed: f64,
}

/// A core's counters from `/proc/stat`, in ticks: (name, busy user, busy system, idle, total).
type CpuTimes = (String, u64, u64, u64, u64);

/// Keeps the previous `/proc/stat` reading, for per-core percentages.
#[derive(Default)]
pub struct HostSampler {
    /// Guards: the last reading's counters.
    previous: Mutex<Vec<CpuTimes>>,
}

impl HostSampler {
    /// The host's usage now; `data_dir`'s file system is the disk; `mhz_per_core` turns busy
    /// percent into ticks. A first call's CPU percentages are since boot.
    pub fn read(&self, data_dir: &Path, mhz_per_core: f64) -> io::Result<HostStats> {
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let kb = |k| super::meminfo_kb(&meminfo, k).unwrap_or(0) * 1024;
        let memory = HostMemory {
            total: kb("MemTotal"),
            available: kb("MemAvailable"),
            used: kb("MemTotal").saturating_sub(kb("MemAvailable")),
            free: kb("MemFree"),
        };
        let now = parse_proc_stat(&std::fs::read_to_string("/proc/stat")?);
        let before = std::mem::replace(&mut *self.previous.lock(), now.clone());
        let cpus = cpu_percents(&before, &now);
        let cpu_ticks_consumed = cpus
            .iter()
            .map(|c| (100.0 - c.idle) / 100.0 * mhz_per_core)
            .sum();
        let uptime = std::fs::read_to_string("/proc/uptime")?;
        let uptime_seconds = uptime
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        let disk = disk_of(data_dir).ok().map(|disk| {
            let (device, mountpoint) = mount_of(data_dir);
            HostDisk {
                device,
                mountpoint,
                disk,
            }
        });
        Ok(HostStats {
            memory,
            cpus,
            uptime_seconds,
            disk,
            cpu_ticks_consumed,
        })
    }
}

/// The `cpuN` lines of `/proc/stat`: user+nice, system+irq+softirq, idle+iowait, all.
fn parse_proc_stat(text: &str) -> Vec<CpuTimes> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?.to_string();
            let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            // guest and guest_nice (8, 9) are already counted in user and nice.
            let total: u64 = v.iter().take(8).sum();
            Some((
                name,
                at(0) + at(1),
                at(2) + at(5) + at(6),
                at(3) + at(4),
                total,
            ))
        })
        .collect()
}

/// Percentages of each core between two readings (since boot for a core `before` lacks).
fn cpu_percents(before: &[CpuTimes], now: &[CpuTimes]) -> Vec<HostCpu> {
    now.iter()
        .map(|(name, user, system, idle, total)| {
            let prev = before.iter().find(|b| &b.0 == name);
            let (pu, ps, pi, pt) = prev.map_or((0, 0, 0, 0), |b| (b.1, b.2, b.3, b.4));
            let dt = total.saturating_sub(pt) as f64;
            let pct = |a: u64, b: u64| {
                if dt > 0.0 {
                    a.saturating_sub(b) as f64 / dt * 100.0
                } else {
                    0.0
                }
            };
            let idle_pct = if dt > 0.0 { pct(*idle, pi) } else { 100.0 };
            HostCpu {
                name: name.clone(),
                user: pct(*user, pu),
                system: pct(*system, ps),
                idle: idle_pct,
                total: 100.0 - idle_pct,
            }
        })
        .collect()
}

/// The device and mount point of the file system `path` is on (the longest mount point that
/// contains it, from `/proc/self/mounts`).
fn mount_of(path: &Path) -> (String, PathBuf) {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at) = (f.next()?, f.next()?);
            // Mount points escape spaces as \040.
            let at = PathBuf::from(at.replace("\\040", " "));
            path.starts_with(&at).then(|| (dev.to_string(), at))
        })
        .max_by_key(|(_, at)| at.as_os_str().len())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_core_percentages_come_from_two_readings() {
        let a =
            parse_proc_stat("cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\nintr 5\n");
        let b = parse_proc_stat("cpu0 130 10 60 850 50 0 0 0 0 0\n");
        assert_eq!(a, vec![("cpu0".to_string(), 100, 50, 850, 1000)]);
        let p = cpu_percents(&a, &b);
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].user, p[0].system, p[0].idle, p[0].total),
            (40.0, 10.0, 50.0, 50.0)
        );
        // Nothing elapsed: idle, not a division by zero.
        assert_eq!(cpu_percents(&b, &b)[0].idle, 100.0);
    }

    #[test]
    fn the_host_reads() {
        let s = HostSampler::default();
        let h = s.read(Path::new("/"), 1000.0).unwrap();
        assert!(
            h.memory.total > 0 && h.memory.used <= h.memory.total,
            "{h:?}"
        );
        assert!(!h.cpus.is_empty() && h.uptime_seconds > 0, "{h:?}");
        let d = h.disk.unwrap();
        assert_eq!(d.mountpoint, PathBuf::from("/"));
        assert!(d.disk.size > 0);
    }
}
