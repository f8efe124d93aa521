//! Stats routes (resources.md "Stats"): `GET /v1/client/allocation/:id/stats` (Nomad's
//! `AllocResourceUsage`: each running task's `ResourceUsage` and their sum) and
//! `GET /v1/client/stats` (Nomad's `HostStats`). The readings come from `resources::usage` and
//! `resources::stats`, one function per source: a task's process tree in `/proc`, a docker
//! container's engine stats.

use serde_json::{json, Value};
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
fn resource_usage(u: &Usage) -> Value {
    let r = &u.reading;
    json!({
        "MemoryStats": {
            "RSS": r.rss,
            "Cache": r.cache,
            "Swap": r.swap,
            "Usage": r.usage,
            "MaxUsage": r.max_usage,
            "KernelUsage": 0,
            "KernelMaxUsage": 0,
            "Measured": r.memory_measured,
        },
        "CpuStats": {
            "SystemMode": u.system_percent,
            "UserMode": u.user_percent,
            "TotalTicks": u.total_ticks,
            "ThrottledPeriods": r.throttled_periods,
            "ThrottledTime": r.throttled_time,
            "Percent": u.percent,
            "Measured": r.cpu_measured,
        },
        "DeviceStats": [],
    })
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
    let mut tasks = serde_json::Map::new();
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
            json!({"ResourceUsage": resource_usage(&u), "Timestamp": now_nanos(), "Pids": null}),
        );
        usages.push(u);
    }
    // Tasks of allocations that are gone are forgotten as any allocation's stats are read.
    let live: std::collections::HashSet<String> = agent.allocs.alloc_ids().into_iter().collect();
    agent
        .stats
        .tasks
        .retain(|k| k.split('/').next().is_some_and(|a| live.contains(a)));
    Ok(json!({
        "ResourceUsage": resource_usage(&sum(&usages)),
        "Tasks": tasks,
        "Timestamp": now_nanos(),
    }))
}

fn host_stats(agent: &Agent) -> Result<Value, ApiError> {
    let h = agent
        .stats
        .host
        .read(&agent.config.data_dir, mhz_per_core(agent))
        .map_err(|e| ApiError::Internal(format!("reading the host's stats: {e}")))?;
    let cpus: Vec<Value> = h
        .cpus
        .iter()
        .map(|c| json!({"CPU": c.name, "User": c.user, "System": c.system, "Idle": c.idle, "Total": c.total}))
        .collect();
    let disks: Vec<Value> = h
        .disk
        .iter()
        .map(|d| {
            let used_pct = if d.disk.size == 0 {
                0.0
            } else {
                d.disk.used as f64 / d.disk.size as f64 * 100.0
            };
            json!({
                "Device": d.device,
                "Mountpoint": d.mountpoint,
                "Size": d.disk.size,
                "Used": d.disk.used,
                "Available": d.disk.available,
                "UsedPercent": used_pct,
                "InodesUsedPercent": d.disk.inodes_used_percent_x100 as f64 / 100.0,
            })
        })
        .collect();
    Ok(json!({
        "Memory": {
            "Total": h.memory.total,
            "Available": h.memory.available,
            "Used": h.memory.used,
            "Free": h.memory.free,
        },
        "CPU": cpus,
        "CPUTicksConsumed": h.cpu_ticks_consumed,
        "DiskStats": disks,
        "AllocDirStats": disks.first(),
        "DeviceStats": [],
        "Uptime": h.uptime_seconds,
        "Timestamp": now_nanos(),
    }))
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/client/allocation/:id/stats", move |req| {
        Response::json(alloc_stats(&a, &alloc_id(&a, req)?)?)
    });
    let a = agent.clone();
    r.get("/v1/client/stats", move |_| Response::json(host_stats(&a)?));
}
