//! The node's resources (resources.md "Node resources and placement"): what the host has
//! ([`NodeResources`], fingerprinted once when the agent starts), what the agent's
//! `client { reserved { } }` keeps for the host ([`ReservedResources`]), and what is left for
//! allocations ([`Capacity`]), which placement checks asks against (`alloc::capacity`).
//!
//! No threads: the fingerprint is a few reads of `/proc`, `/sys` and `statvfs`, the rest plain
//! values. The readings are parsed by pure functions so that they are tested on fixed text.

use std::path::Path;

pub mod stats;
pub mod usage;

/// The previous readings the stats compute percentages from: per task, and the host's.
#[derive(Default)]
pub struct Samplers {
    pub tasks: usage::UsageTracker,
    pub host: stats::HostSampler,
}

#[derive(Debug, thiserror::Error)]
pub enum ResourcesError {
    #[error("cannot fingerprint the node's {what}: {reason}")]
    Fingerprint { what: &'static str, reason: String },
    #[error("client.reserved.{key}: {asked} {unit} is more than the node has ({has} {unit})")]
    OverReserved {
        key: &'static str,
        asked: u64,
        has: u64,
        unit: &'static str,
    },
    #[error("client.reserved.cores: core {core} is not one of the node's cores (0-{last})")]
    UnknownCore { core: u32, last: u32 },
}

/// What the host has, in Nomad's units (`NodeResources`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeResources {
    /// Cores × MHz per core (`Cpu.CpuShares`).
    pub cpu_mhz: u64,
    pub total_cores: u32,
    /// The cores' IDs (`Cpu.ReservableCpuCores`).
    pub cores: Vec<u32>,
    pub memory_mb: u64,
    /// Free space on the data directory's file system when the agent started.
    pub disk_mb: u64,
}

/// The agent's `client { reserved { cpu memory disk cores } }` (Nomad's keys and units: MHz,
/// MB, MB, a cpuset such as `"0,2-3"`). Validated against the node by [`Capacity::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservedResources {
    pub cpu_mhz: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub cores: Vec<u32>,
}

/// What is left for allocations: the node less what is reserved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_mhz: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// The cores tasks' `cores` may be given, sorted: the node's less `reserved { cores }`.
    pub cores: Vec<u32>,
    /// What one core counts for in MHz (Nomad's `SharesPerCore`): a task's `cores` ask this
    /// much `cpu` each, for its weight and for the `cpu` dimension.
    pub mhz_per_core: u64,
}

impl Capacity {
    /// The node's unreserved capacity; reserving more than the node has is a configuration
    /// error (a node that can place nothing is not what anyone meant).
    pub fn new(node: &NodeResources, reserved: &ReservedResources) -> Result<Self, ResourcesError> {
        let left = |key, asked, has, unit| {
            if asked > has {
                Err(ResourcesError::OverReserved {
                    key,
                    asked,
                    has,
                    unit,
                })
            } else {
                Ok(has - asked)
            }
        };
        let cpu_mhz = left("cpu", reserved.cpu_mhz, node.cpu_mhz, "MHz")?;
        let memory_mb = left("memory", reserved.memory_mb, node.memory_mb, "MB")?;
        let disk_mb = left("disk", reserved.disk_mb, node.disk_mb, "MB")?;
        if let Some(core) = reserved.cores.iter().find(|c| !node.cores.contains(c)) {
            return Err(ResourcesError::UnknownCore {
                core: *core,
                last: node.total_cores.saturating_sub(1),
            });
        }
        Ok(Capacity {
            cpu_mhz,
            memory_mb,
            disk_mb,
            cores: node
                .cores
                .iter()
                .filter(|c| !reserved.cores.contains(c))
                .copied()
                .collect(),
            mhz_per_core: node.cpu_mhz / u64::from(node.total_cores.max(1)),
        })
    }
}

/// Parses a cpuset (`"0,2-3"`) into sorted, distinct core IDs.
pub fn parse_cpuset(text: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{part:?} is not a core number or range (\"0,2-3\")"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("{part:?}: the range runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A CPU list as the kernel's `cpuset.cpus` and Nomad's `NOMAD_CPU_CORES` write it: sorted,
/// runs of consecutive IDs as ranges (`[0, 1, 2, 5]` → `"0-2,5"`); empty for none.
pub fn format_cpuset(cores: &[u32]) -> String {
    let mut sorted = cores.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// The node's totals as the agent's configuration states them (`client { cpu_total_compute
/// memory_total_mb disk_free_mb }`), each replacing the fingerprint's reading when set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub cpu_mhz: Option<u64>,
    pub memory_mb: Option<u64>,
    /// The disk placement counts allocations' `ephemeral_disk` against (the data directory's
    /// free space otherwise).
    pub disk_free_mb: Option<u64>,
}

/// The frequency a core is counted at when neither cpufreq nor /proc/cpuinfo gives one (ARM
/// boards, some virtual machines): Nomad's default of 1 GHz, so that the agent still starts and
/// places tasks; `client { cpu_total_compute }` states the real figure.
const DEFAULT_CORE_MHZ: u64 = 1000;

/// Reads the host's resources; `data_dir` names the file system whose free space is the disk;
/// `totals` replace what the operator stated.
pub fn fingerprint(data_dir: &Path, totals: Totals) -> Result<NodeResources, ResourcesError> {
    let read = |what, path: &str| {
        std::fs::read_to_string(path).map_err(|e| ResourcesError::Fingerprint {
            what,
            reason: format!("{path}: {e}"),
        })
    };
    let cpuinfo = read("cpu", "/proc/cpuinfo")?;
    let cores = match std::fs::read_to_string("/sys/devices/system/cpu/online") {
        Ok(online) => parse_cpuset(online.trim()).unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let cores = if cores.is_empty() {
        (0..cpuinfo_cores(&cpuinfo).max(1)).collect()
    } else {
        cores
    };
    // The highest frequency the core runs at, as Nomad's fingerprint prefers; /proc/cpuinfo's
    // current `cpu MHz` where cpufreq is absent (most virtual machines).
    let max_khz = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let mhz = max_khz.map(|k| k / 1000).or_else(|| cpuinfo_mhz(&cpuinfo));
    let cpu_mhz = match (totals.cpu_mhz, mhz) {
        (Some(total), _) => total,
        (None, Some(mhz)) => mhz * cores.len() as u64,
        (None, None) => {
            log::warn!(
                "no CPU frequency in cpufreq or /proc/cpuinfo: counting {DEFAULT_CORE_MHZ} MHz per \
                 core; set client {{ cpu_total_compute }} to the node's total MHz"
            );
            DEFAULT_CORE_MHZ * cores.len() as u64
        }
    };
    let memory_mb = match totals.memory_mb {
        Some(total) => total,
        None => {
            let meminfo = read("memory", "/proc/meminfo")?;
            meminfo_kb(&meminfo, "MemTotal").ok_or(ResourcesError::Fingerprint {
                what: "memory",
                reason: "no MemTotal in /proc/meminfo".to_string(),
            })? / 1024
        }
    };
    let disk_mb = match totals.disk_free_mb {
        Some(free) => free,
        None => {
            stats::disk_of(data_dir)
                .map_err(|e| ResourcesError::Fingerprint {
                    what: "disk",
                    reason: format!("{}: {e}", data_dir.display()),
                })?
                .available
                / (1024 * 1024)
        }
    };
    Ok(NodeResources {
        cpu_mhz,
        total_cores: cores.len() as u32,
        cores,
        memory_mb,
        disk_mb,
    })
}

/// How many `processor` entries /proc/cpuinfo lists.
fn cpuinfo_cores(cpuinfo: &str) -> u32 {
    cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count() as u32
}

/// The first core's `cpu MHz`, rounded down.
fn cpuinfo_mhz(cpuinfo: &str) -> Option<u64> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "cpu MHz")
            .then(|| v.trim().parse::<f64>().ok())
            .flatten()
            .map(|f| f as u64)
    })
}

/// A `/proc/meminfo` value in kB (`MemTotal:  8048576 kB`).
pub fn meminfo_kb(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key)
            .then(|| v.split_whitespace().next()?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nmodel name\t: Virtual CPU\ncpu MHz\t\t: 2394.454\n\n\
                           processor\t: 1\nmodel name\t: Virtual CPU\ncpu MHz\t\t: 2394.454\n";

    #[test]
    fn cpuinfo_and_meminfo_are_read_as_nomad_counts_them() {
        assert_eq!(cpuinfo_cores(CPUINFO), 2);
        assert_eq!(cpuinfo_mhz(CPUINFO), Some(2394));
        let meminfo = "MemTotal:        4028180 kB\nMemFree:          123456 kB\n";
        assert_eq!(meminfo_kb(meminfo, "MemTotal"), Some(4028180));
        assert_eq!(meminfo_kb(meminfo, "MemFree"), Some(123456));
        assert_eq!(meminfo_kb(meminfo, "Swap"), None);
    }

    #[test]
    fn cpusets_parse_or_say_why_not() {
        assert_eq!(parse_cpuset("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(parse_cpuset("1, 1").unwrap(), vec![1]);
        assert_eq!(parse_cpuset("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpuset("3-1").unwrap_err().contains("backwards"));
        assert!(parse_cpuset("a").unwrap_err().contains("\"a\""));
    }

    #[test]
    fn cpu_lists_are_written_with_ranges_as_the_kernel_does() {
        assert_eq!(format_cpuset(&[]), "");
        assert_eq!(format_cpuset(&[0]), "0");
        assert_eq!(format_cpuset(&[1, 0]), "0-1");
        assert_eq!(format_cpuset(&[0, 2]), "0,2");
        assert_eq!(format_cpuset(&[5, 0, 1, 2, 7, 8, 2]), "0-2,5,7-8");
        for text in ["0", "0-1", "0,2", "0-2,5,7-8"] {
            assert_eq!(format_cpuset(&parse_cpuset(text).unwrap()), text);
        }
    }

    #[test]
    fn capacity_is_the_node_less_what_is_reserved_and_never_less_than_nothing() {
        let node = NodeResources {
            cpu_mhz: 4000,
            total_cores: 2,
            cores: vec![0, 1],
            memory_mb: 2048,
            disk_mb: 10_000,
        };
        let reserved = ReservedResources {
            cpu_mhz: 500,
            memory_mb: 1848,
            disk_mb: 0,
            cores: vec![1],
        };
        assert_eq!(
            Capacity::new(&node, &reserved).unwrap(),
            Capacity {
                cpu_mhz: 3500,
                memory_mb: 200,
                disk_mb: 10_000,
                cores: vec![0],
                mhz_per_core: 2000,
            }
        );
        let too_much = ReservedResources {
            memory_mb: 4096,
            ..ReservedResources::default()
        };
        assert_eq!(
            Capacity::new(&node, &too_much).unwrap_err().to_string(),
            "client.reserved.memory: 4096 MB is more than the node has (2048 MB)"
        );
        let no_core = ReservedResources {
            cores: vec![5],
            ..ReservedResources::default()
        };
        assert_eq!(
            Capacity::new(&node, &no_core).unwrap_err().to_string(),
            "client.reserved.cores: core 5 is not one of the node's cores (0-1)"
        );
    }
}
