//! Stats routes (resources.md "Stats"): `GET /v1/client/allocation/:id/stats` (Nomad's
//! `AllocResourceUsage`: each running task's `ResourceUsage` and their sum) and
//! `GET /v1/client/stats` (Nomad's `HostStats`). The readings come from `resources::usage` and
//! `resources::stats`, one function per source: a task's process tree in `/proc`, a docker
//! container's engine stats.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::allocations::alloc_id;
use super::router::{ApiError, Response, Router};
use crate::agent::Agent;
use crate::records::TaskStatus;
use crate::resources::usage::{self, Reading, Usage};

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// MHz of one core, to turn percents into Nomad's ticks.
fn mhz_per_core(agent: &Agent) -> f64 {
    let r = &agent.node.resources;
    r.cpu_mhz as f64 / f64::from(r.total_cores.max(1))
}

/// Nomad's `ResourceUsage` of one reading.
fn resource_usage(u: &Usage) -> ResourceUsage {
    let r = &u.reading;
    ResourceUsage {
        memory_stats: MemoryStats {
            rss: r.rss,
            cache: r.cache,
            swap: r.swap,
            usage: r.usage,
            max_usage: r.max_usage,
            kernel_usage: 0,
            kernel_max_usage: 0,
            measured: r.memory_measured,
        },
        cpu_stats: CpuStats {
            system_mode: u.system_percent,
            user_mode: u.user_percent,
            total_ticks: u.total_ticks,
            throttled_periods: r.throttled_periods,
            throttled_time: r.throttled_time,
            percent: u.percent,
            measured: r.cpu_measured,
        },
        device_stats: [],
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ResourceUsage {
    memory_stats: MemoryStats,
    cpu_stats: CpuStats,
    device_stats: [(); 0],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct MemoryStats {
    #[serde(rename = "RSS")]
    rss: u64,
    cache: u64,
    swap: u64,
    usage: u64,
    max_usage: u64,
    kernel_usage: u64,
    kernel_max_usage: u64,
    measured: &'static [&'static str],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CpuStats {
    system_mode: f64,
    user_mode: f64,
    total_ticks: f64,
    throttled_periods: u64,
    throttled_time: u64,
    percent: f64,
    measured: &'static [&'static str],
}

/// One task's part of Nomad's `AllocResourceUsage`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TaskUsage {
    resource_usage: ResourceUsage,
    timestamp: i64,
    /// Nomad's per-process usage, which nodeward does not report.
    pids: Option<()>,
}

/// Nomad's `AllocResourceUsage`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AllocUsage {
    resource_usage: ResourceUsage,
    tasks: BTreeMap<String, TaskUsage>,
    timestamp: i64,
}

/// The sum of the tasks' usages (Nomad's allocation `ResourceUsage`).
fn sum(usages: &[Usage]) -> Usage {
    let mut t = Usage::default();
    for u in usages {
        let (a, b) = (&mut t.reading, &u.reading);
        a.rss += b.rss;
        a.cache += b.cache;
        a.swap += b.swap;
        a.usage += b.usage;
        a.max_usage += b.max_usage;
        a.throttled_periods += b.throttled_periods;
        a.throttled_time += b.throttled_time;
        a.memory_measured = b.memory_measured;
        a.cpu_measured = b.cpu_measured;
        t.percent += u.percent;
        t.user_percent += u.user_percent;
        t.system_percent += u.system_percent;
        t.total_ticks += u.total_ticks;
    }
    if t.reading.memory_measured.is_empty() {
        t.reading.memory_measured = usage::PROC_MEMORY_MEASURED;
        t.reading.cpu_measured = usage::CPU_MEASURED;
    }
    t
}

/// A reading of a task's cgroup: everything its processes were charged, wherever they went
/// (a `setsid` child included).
fn cgroup_reading(u: &crate::cgroup::CgroupUsage) -> Reading {
    Reading {
        rss: u.memory_rss,
        cache: u.memory_cache,
        swap: u.memory_swap,
        usage: u.memory_usage,
        max_usage: u.memory_max_usage,
        user_seconds: u.cpu_user_ns as f64 / 1e9,
        system_seconds: u.cpu_system_ns as f64 / 1e9,
        throttled_periods: u.cpu_throttled_periods,
        throttled_time: u.cpu_throttled_ns,
        // v1 always keeps the peak; v2 only from Linux 5.19 (`memory.peak`, read as 0 before).
        memory_measured: if u.memory_max_usage > 0 {
            usage::CGROUP_MEMORY_MEASURED
        } else {
            usage::CGROUP_NO_PEAK_MEMORY_MEASURED
        },
        cpu_measured: usage::CGROUP_CPU_MEASURED,
    }
}

/// The reading of a task's cgroup, when the agent confines tasks and this one has a cgroup (a
/// task started before cgroups were turned on has none: its `/proc` tree is read instead).
fn task_cgroup_reading(agent: &Agent, alloc_id: &str, task: &str) -> Option<Reading> {
    let cgroup = agent.cgroups.as_ref()?.task(alloc_id, task);
    if !cgroup.memory_dir().is_dir() {
        return None;
    }
    match cgroup.usage() {
        Ok(u) => Some(cgroup_reading(&u)),
        Err(e) => {
            log::warn!(
                "task {task:?} of allocation {alloc_id}: {e}; its /proc tree is read instead"
            );
            None
        }
    }
}

fn alloc_stats(agent: &Agent, id: &str) -> Result<Value, ApiError> {
    let alloc = agent.allocs.get(id)?;
    // What to read, copied out of the task states: no lock is held while /proc or the engine
    // is read.
    let running: Vec<(String, Option<crate::records::TaskHandle>, Option<i32>)> = alloc
        .lock_tasks()
        .iter()
        .filter(|(_, s)| s.state == TaskStatus::Running)
        .map(|(name, s)| (name.to_string(), s.handle.clone(), s.pid))
        .collect();
    let mut tasks = BTreeMap::new();
    let mut usages = Vec::new();
    for (name, handle, pid) in running {
        let reading: Option<Reading> = match (&handle, pid) {
            (Some(h), _) if h.driver == "docker" => Some(agent.docker.usage(h).map_err(|e| {
                ApiError::Internal(format!(
                    "reading the stats of task {name:?} of allocation {id}: {e}"
                ))
            })?),
            (_, Some(pid)) => {
                task_cgroup_reading(agent, id, &name).or_else(|| usage::proc_tree(pid))
            }
            _ => None,
        };
        // A task that ended since its state was copied has nothing to read.
        let Some(reading) = reading else { continue };
        let u = agent.stats.tasks.usage(
            &format!("{id}/{name}"),
            reading,
            Instant::now(),
            mhz_per_core(agent),
        );
        tasks.insert(
            name,
            TaskUsage {
                resource_usage: resource_usage(&u),
                timestamp: now_nanos(),
                pids: None,
            },
        );
        usages.push(u);
    }
    // Tasks of allocations that are gone are forgotten as any allocation's stats are read.
    let live: std::collections::HashSet<String> = agent.allocs.alloc_ids().into_iter().collect();
    agent
        .stats
        .tasks
        .retain(|k| k.split('/').next().is_some_and(|a| live.contains(a)));
    to_value(AllocUsage {
        resource_usage: resource_usage(&sum(&usages)),
        tasks,
        timestamp: now_nanos(),
    })
}

fn host_stats(agent: &Agent) -> Result<Value, ApiError> {
    let h = agent
        .stats
        .host
        .read(&agent.config.data_dir, mhz_per_core(agent))
        .map_err(|e| ApiError::Internal(format!("reading the host's stats: {e}")))?;
    let disks: Vec<DiskStats> = h
        .disk
        .iter()
        .map(|d| {
            let used_pct = if d.disk.size == 0 {
                0.0
            } else {
                d.disk.used as f64 / d.disk.size as f64 * 100.0
            };
            DiskStats {
                device: &d.device,
                mountpoint: &d.mountpoint,
                size: d.disk.size,
                used: d.disk.used,
                available: d.disk.available,
                used_percent: used_pct,
                inodes_used_percent: d.disk.inodes_used_percent_x100 as f64 / 100.0,
            }
        })
        .collect();
    to_value(HostStatsAnswer {
        memory: HostMemoryAnswer {
            total: h.memory.total,
            available: h.memory.available,
            used: h.memory.used,
            free: h.memory.free,
        },
        cpu: h.cpus.iter().map(HostCpuAnswer::of).collect(),
        cpu_ticks_consumed: h.cpu_ticks_consumed,
        alloc_dir_stats: disks.first(),
        disk_stats: &disks,
        device_stats: [],
        uptime: h.uptime_seconds,
        timestamp: now_nanos(),
    })
}

/// A typed answer as the JSON value the route sends.
fn to_value(answer: impl Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(answer).map_err(|e| ApiError::Internal(e.to_string()))
}

/// Nomad's `HostStats`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct HostStatsAnswer<'a> {
    memory: HostMemoryAnswer,
    #[serde(rename = "CPU")]
    cpu: Vec<HostCpuAnswer<'a>>,
    #[serde(rename = "CPUTicksConsumed")]
    cpu_ticks_consumed: f64,
    disk_stats: &'a [DiskStats<'a>],
    alloc_dir_stats: Option<&'a DiskStats<'a>>,
    device_stats: [(); 0],
    uptime: u64,
    timestamp: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct HostMemoryAnswer {
    total: u64,
    available: u64,
    used: u64,
    free: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct HostCpuAnswer<'a> {
    #[serde(rename = "CPU")]
    cpu: &'a str,
    user: f64,
    system: f64,
    idle: f64,
    total: f64,
}

impl<'a> HostCpuAnswer<'a> {
    fn of(c: &'a crate::resources::stats::HostCpu) -> HostCpuAnswer<'a> {
        HostCpuAnswer {
            cpu: &c.name,
            user: c.user,
            system: c.system,
            idle: c.idle,
            total: c.total,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DiskStats<'a> {
    device: &'a str,
    mountpoint: &'a std::path::Path,
    size: u64,
    used: u64,
    available: u64,
    used_percent: f64,
    inodes_used_percent: f64,
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/client/allocation/:id/stats", move |req| {
        Response::json(alloc_stats(&a, &alloc_id(&a, req)?)?)
    });
    let a = agent.clone();
    r.get("/v1/client/stats", move |_| Response::json(host_stats(&a)?));
}
