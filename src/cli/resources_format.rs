//! How the CLI prints resources and their usage, as Nomad's does: `node status`'s `Allocated
//! Resources` and `Host Resource Utilization`, `alloc status -stats`'s `Task Resources`. Pure
//! functions of the API's JSON.

use serde_json::Value;

use super::format::{s, table};

/// Bytes as go-humanize's `IBytes` writes them (`0 B`, `1.2 MiB`, `300 MiB`, `7.7 GiB`).
pub fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let e = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let e = e.min(UNITS.len() - 1);
    let val = ((bytes as f64) / 1024f64.powi(e as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", UNITS[e])
    } else {
        format!("{val:.0} {}", UNITS[e])
    }
}

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
}

/// What an allocation (with its `Job`) asks: its group's tasks' `Resources` summed (MHz, MB).
pub fn alloc_asks(alloc: &Value) -> (u64, u64) {
    let group = s(alloc, "TaskGroup");
    let groups = alloc["Job"]["TaskGroups"].as_array().into_iter().flatten();
    let tasks = groups
        .filter(|g| s(g, "Name") == group)
        .flat_map(|g| g["Tasks"].as_array().into_iter().flatten());
    tasks.fold((0, 0), |(c, m), t| {
        let (cpu, mem) = asks_of(alloc, t);
        (c + cpu, m + mem)
    })
}

/// A task's asks (MHz, MB): its `Resources`, but the `CpuShares` the allocation was given where
/// it has them (a task's `cores` count their MHz; the job says `CPU: 0`), as Nomad's CLI reads
/// `AllocatedResources`.
fn asks_of(alloc: &Value, task: &Value) -> (u64, u64) {
    let allocated = &alloc["AllocatedResources"]["Tasks"][s(task, "Name")]["Cpu"]["CpuShares"];
    let cpu = allocated
        .as_u64()
        .unwrap_or_else(|| u(task, &["Resources", "CPU"]));
    (cpu, u(task, &["Resources", "MemoryMB"]))
}

/// Nomad's `Allocated Resources` of a node: what the live allocations (`allocs`, with their
/// jobs) ask out of the node's unreserved resources, the disk being their groups'
/// `ephemeral_disk`.
pub fn allocated_resources(node: &Value, allocs: &[Value]) -> String {
    let total = |k: &str, field: &str| {
        u(node, &["NodeResources", k, field])
            .saturating_sub(u(node, &["ReservedResources", k, field]))
    };
    let (cpu, mem) = allocs
        .iter()
        .map(alloc_asks)
        .fold((0, 0), |(c, m), (ac, am)| (c + ac, m + am));
    let disk: u64 = allocs.iter().map(group_disk_mb).sum();
    const MIB: u64 = 1024 * 1024;
    format!(
        "Allocated Resources\n{}\n",
        table(&[
            vec!["CPU".to_string(), "Memory".into(), "Disk".into()],
            vec![
                format!("{cpu}/{} MHz", total("Cpu", "CpuShares")),
                format!(
                    "{}/{}",
                    ibytes(mem * MIB),
                    ibytes(total("Memory", "MemoryMB") * MIB)
                ),
                format!(
                    "{}/{}",
                    ibytes(disk * MIB),
                    ibytes(total("Disk", "DiskMB") * MIB)
                ),
            ],
        ])
    )
}

/// The `EphemeralDisk.SizeMB` of an allocation's group in its `Job`: a job writes none when it
/// is Nomad's default of 300 MB.
fn group_disk_mb(alloc: &Value) -> u64 {
    let group = s(alloc, "TaskGroup");
    let groups = alloc["Job"]["TaskGroups"].as_array().into_iter().flatten();
    groups
        .filter(|g| s(g, "Name") == group)
        .find_map(|g| g["EphemeralDisk"]["SizeMB"].as_u64())
        .unwrap_or(crate::jobspec::ephemeral_disk::DEFAULT_SIZE_MB)
}

/// A task's `Resources` in an allocation's `Job` (MHz, MB).
fn task_asks(alloc: &Value, task: &str) -> (u64, u64) {
    let group = s(alloc, "TaskGroup");
    let groups = alloc["Job"]["TaskGroups"].as_array().into_iter().flatten();
    groups
        .filter(|g| s(g, "Name") == group)
        .flat_map(|g| g["Tasks"].as_array().into_iter().flatten())
        .find(|t| s(t, "Name") == task)
        .map_or((0, 0), |t| asks_of(alloc, t))
}

/// Nomad's `Task Resources` of one task with its usage from the allocation's stats
/// (`AllocResourceUsage`): `12/100 MHz  1.2 MiB/300 MiB  300 MiB`. The disk is the group's
/// `ephemeral_disk` size (Nomad's CLI prints the allocation's shared disk on every task). A
/// task the stats lack (not running) shows its asks alone.
pub fn task_resources(alloc: &Value, stats: &Value, task: &str) -> String {
    let (cpu, mem) = task_asks(alloc, task);
    let disk = ibytes(group_disk_mb(alloc) * 1024 * 1024);
    let usage = &stats["Tasks"][task]["ResourceUsage"];
    let mem_total = ibytes(mem * 1024 * 1024);
    let (cpu_cell, mem_cell) = if usage.is_object() {
        let ticks = usage["CpuStats"]["TotalTicks"]
            .as_f64()
            .unwrap_or(0.0)
            .floor();
        let measured = usage["MemoryStats"]["Measured"].as_array();
        let rss_measured = measured.is_some_and(|m| m.iter().any(|x| x == "RSS"));
        let used = if rss_measured {
            u(usage, &["MemoryStats", "RSS"])
        } else {
            u(usage, &["MemoryStats", "Usage"])
        };
        (
            format!("{ticks}/{cpu} MHz"),
            format!("{}/{mem_total}", ibytes(used)),
        )
    } else {
        (format!("{cpu} MHz"), mem_total)
    };
    format!(
        "Task Resources:\n{}\n",
        table(&[
            vec![
                "CPU".to_string(),
                "Memory".into(),
                "Disk".into(),
                "Addresses".into()
            ],
            vec![cpu_cell, mem_cell, disk, String::new()],
        ])
    )
}

/// Nomad's `Host Resource Utilization` of `node status -stats`, from `HostStats`.
pub fn host_utilization(node: &Value, host: &Value) -> String {
    let total_cpu = u(node, &["NodeResources", "Cpu", "CpuShares"]);
    let ticks = host["CPUTicksConsumed"].as_f64().unwrap_or(0.0).floor();
    let device = host["DiskStats"][0]["Device"].as_str().unwrap_or("");
    format!(
        "Host Resource Utilization\n{}\n",
        table(&[
            vec!["CPU".to_string(), "Memory".into(), "Disk".into()],
            vec![
                format!("{ticks}/{total_cpu} MHz"),
                format!(
                    "{}/{}",
                    ibytes(u(host, &["Memory", "Used"])),
                    ibytes(u(host, &["Memory", "Total"]))
                ),
                format!("({device})"),
            ],
        ])
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bytes_read_as_go_humanize_writes_them() {
        assert_eq!(ibytes(0), "0 B");
        assert_eq!(ibytes(300 * 1024 * 1024), "300 MiB");
        assert_eq!(ibytes(1_258_291), "1.2 MiB");
        assert_eq!(ibytes(8_160_437_862), "7.6 GiB");
        assert_eq!(ibytes(1023), "1023 B");
    }

    #[test]
    fn allocated_resources_sum_the_live_allocations_asks() {
        let node = json!({
            "NodeResources": {"Cpu": {"CpuShares": 4000}, "Memory": {"MemoryMB": 2048}, "Disk": {"DiskMB": 1024}},
            "ReservedResources": {"Cpu": {"CpuShares": 0}, "Memory": {"MemoryMB": 1848}, "Disk": {"DiskMB": 0}},
        });
        let alloc = json!({"TaskGroup": "g", "Job": {"TaskGroups": [
            {"Name": "other", "Tasks": [{"Resources": {"CPU": 999, "MemoryMB": 999}}]},
            {"Name": "g", "EphemeralDisk": {"SizeMB": 100}, "Tasks": [
                {"Resources": {"CPU": 100, "MemoryMB": 100}},
                {"Resources": {"CPU": 50, "MemoryMB": 50}}
            ]}
        ]}});
        assert_eq!(
            allocated_resources(&node, &[alloc]),
            "Allocated Resources\nCPU           Memory           Disk\n150/4000 MHz  150 MiB/200 MiB  100 MiB/1.0 GiB\n"
        );
        // A task with cores: the job says CPU 0, the allocation its cores' MHz.
        let pinned = json!({"TaskGroup": "g", "Job": {"TaskGroups": [
            {"Name": "g", "Tasks": [{"Name": "t", "Resources": {"CPU": 0, "Cores": 1, "MemoryMB": 10}}]}
        ]}, "AllocatedResources": {"Tasks": {"t": {"Cpu": {"CpuShares": 2000, "ReservedCores": [0]}}}}});
        assert_eq!(alloc_asks(&pinned), (2000, 10));
    }

    #[test]
    fn task_resources_show_usage_over_the_ask() {
        let alloc = json!({"TaskGroup": "g", "Job": {"TaskGroups": [{"Name": "g", "Tasks": [
            {"Name": "t", "Resources": {"CPU": 100, "MemoryMB": 300}}
        ]}]}});
        let stats = json!({"Tasks": {"t": {"ResourceUsage": {
            "CpuStats": {"TotalTicks": 12.7},
            "MemoryStats": {"RSS": 1_258_291, "Usage": 99, "Measured": ["RSS", "Swap"]}
        }}}});
        assert_eq!(
            task_resources(&alloc, &stats, "t"),
            "Task Resources:\nCPU         Memory           Disk     Addresses\n12/100 MHz  1.2 MiB/300 MiB  300 MiB\n"
        );
        assert_eq!(
            task_resources(&alloc, &json!({}), "t"),
            "Task Resources:\nCPU      Memory   Disk     Addresses\n100 MHz  300 MiB  300 MiB\n"
        );
        // The group's ephemeral disk where it has one.
        let mut sized = alloc.clone();
        sized["Job"]["TaskGroups"][0]["EphemeralDisk"] = json!({"SizeMB": 2048});
        assert_eq!(
            task_resources(&sized, &json!({}), "t"),
            "Task Resources:\nCPU      Memory   Disk     Addresses\n100 MHz  300 MiB  2.0 GiB\n"
        );
        let host = json!({"CPUTicksConsumed": 164.9, "Memory": {"Used": 1_288_490_189u64, "Total": 8_160_437_862u64},
                          "DiskStats": [{"Device": "/dev/vda"}]});
        let node = json!({"NodeResources": {"Cpu": {"CpuShares": 2400}}});
        assert_eq!(
            host_utilization(&node, &host),
            "Host Resource Utilization\nCPU           Memory           Disk\n164/2400 MHz  1.2 GiB/7.6 GiB  (/dev/vda)\n"
        );
    }
}
