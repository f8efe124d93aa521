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
        (
            c + u(t, &["Resources", "CPU"]),
            m + u(t, &["Resources", "MemoryMB"]),
        )
    })
}

/// Nomad's `Allocated Resources` of a node: what the live allocations (`allocs`, with their
/// jobs) ask out of the node's unreserved resources.
pub fn allocated_resources(node: &Value, allocs: &[Value]) -> String {
    let total = |k: &str, field: &str| {
        u(node, &["NodeResources", k, field])
            .saturating_sub(u(node, &["ReservedResources", k, field]))
    };
    let (cpu, mem) = allocs
        .iter()
        .map(alloc_asks)
        .fold((0, 0), |(c, m), (ac, am)| (c + ac, m + am));
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
                format!("0 B/{}", ibytes(total("Disk", "DiskMB") * MIB)),
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
            {"Name": "g", "Tasks": [
                {"Resources": {"CPU": 100, "MemoryMB": 100}},
                {"Resources": {"CPU": 50, "MemoryMB": 50}}
            ]}
        ]}});
        assert_eq!(
            allocated_resources(&node, &[alloc]),
            "Allocated Resources\nCPU           Memory           Disk\n150/4000 MHz  150 MiB/200 MiB  0 B/1.0 GiB\n"
        );
    }
}
