//! Stats through the real agent: an allocation's task usage read from its cgroup, or its process
//! tree where the node has no cgroups (a task holding a known amount of memory in a child process), the sum over its tasks, CPU percent
//! from two readings, `alloc status -stats`'s Task Resources, the host's stats and
//! `node status -stats`.

use crate::common::*;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const PYTHON: &str = "/usr/bin/python3";
const HELD: u64 = 64 * 1024 * 1024;

/// A group of two tasks: `idle`, a Python that writes `<ready>.idle` once started and sleeps,
/// and `holder`, a shell whose child Python allocates and touches 64 MiB, then writes `ready` and
/// sleeps. Their RSS differs by the 64 MiB (and the shell's own pages) once both files are there:
/// a Python still starting up has less.
fn job(ready: &Path) -> String {
    let m = unique_marker(300_000);
    let idle = ready.with_extension("idle");
    let idle = idle.display();
    let hold = format!(
        "import time\nb = b'\\x01' * {HELD}\nopen({:?}, 'w').write('ok')\ntime.sleep({m})",
        ready.display().to_string()
    );
    format!(
        r#"
job "st" {{
  group "g" {{
    task "idle" {{
      driver = "raw_exec"
      config {{
        command = "{PYTHON}"
        args = ["-c", "import time; open('{idle}', 'w').write('ok'); time.sleep({m})"]
      }}
    }}
    task "holder" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "{PYTHON} -c \"$0\"; true", {hold:?}]
      }}
    }}
  }}
}}"#
    )
}

#[test]
fn task_stats_read_the_cgroup_or_process_tree_and_the_host_stats_read_the_host() {
    if !Path::new(PYTHON).is_file() {
        println!("SKIPPED task_stats_read_the_cgroup_or_process_tree_and_the_host_stats_read_the_host: no {PYTHON}");
        return;
    }
    let dir = TempDir::new("stats");
    let agent = TestAgent::start_in(dir.path(), "");
    let ready = dir.path().join("ready");
    agent.run_hcl(&job(&ready));
    let alloc = wait_for(WAIT, "both tasks running and the memory held", || {
        let allocs = agent.allocs("st");
        let a = allocs.first()?;
        (a["ClientStatus"] == "running" && ready.exists() && ready.with_extension("idle").exists())
            .then(|| a["ID"].as_str().unwrap().to_string())
    });
    let stats = agent.get(&format!("/v1/client/allocation/{alloc}/stats"));
    let rss = |t: &str| {
        stats["Tasks"][t]["ResourceUsage"]["MemoryStats"]["RSS"]
            .as_u64()
            .unwrap()
    };
    let (idle, holder) = (rss("idle"), rss("holder"));
    let extra = holder.saturating_sub(idle);
    println!("stats: idle RSS {idle} B, holder tree RSS {holder} B, difference {extra} B (held {HELD} B)");
    assert!(
        extra.abs_diff(HELD) <= HELD / 10,
        "the holder's tree holds {extra} bytes more than the idle task, not 64 MiB ±10%: {stats}"
    );
    assert_eq!(
        stats["ResourceUsage"]["MemoryStats"]["RSS"]
            .as_u64()
            .unwrap(),
        idle + holder,
        "{stats}"
    );
    // Read from the task's cgroup where the node confines tasks (as root), else from /proc.
    let node = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let cgroups =
        agent.get(&format!("/v1/node/{node}"))["Attributes"]["os.cgroups.version"].is_string();
    let measured = &stats["Tasks"]["holder"]["ResourceUsage"]["MemoryStats"]["Measured"];
    let expected = if cgroups {
        serde_json::json!(["RSS", "Cache", "Swap", "Usage", "Max Usage"])
    } else {
        serde_json::json!(["RSS", "Swap"])
    };
    println!(
        "stats: read from {}",
        if cgroups { "the cgroups" } else { "/proc" }
    );
    assert_eq!(measured, &expected, "{stats}");
    assert!(stats["Timestamp"].as_i64().unwrap() > 0);

    // The second reading has a percentage; the sleeping tasks use next to none.
    let again = agent.get(&format!("/v1/client/allocation/{}/stats", &alloc[..8]));
    let pct = again["ResourceUsage"]["CpuStats"]["Percent"]
        .as_f64()
        .unwrap();
    assert!((0.0..100.0).contains(&pct), "{again}");

    let out = agent.cli(&["alloc", "status", "-stats", &alloc]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let holder_mib = format!("{:.0} MiB/300 MiB", holder as f64 / 1048576.0);
    assert!(
        text.contains("Task \"holder\" is \"running\"\nTask Resources:\nCPU"),
        "{text}"
    );
    assert!(text.contains("/100 MHz"), "{text}");
    // The table's memory cell rounds as go-humanize does; within one MiB of the reading.
    let cell = text
        .lines()
        .skip_while(|l| !l.starts_with("Task \"holder\""))
        .nth(3)
        .unwrap_or("");
    assert!(
        cell.contains("MiB/300 MiB  300 MiB"),
        "{cell} (~{holder_mib})\n{text}"
    );

    let host = agent.get("/v1/client/stats");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kb: u64 = meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        host["Memory"]["Total"].as_u64().unwrap(),
        total_kb * 1024,
        "{host}"
    );
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(host["CPU"].as_array().unwrap().len(), cores, "{host}");
    assert!(host["Uptime"].as_u64().unwrap() > 0);
    assert!(host["DiskStats"][0]["Size"].as_u64().unwrap() > 0, "{host}");
    let out = agent.cli(&["node", "status", "-self", "-stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Host Resource Utilization\nCPU"), "{text}");

    // An unknown allocation is a 404, not an empty answer.
    let (code, body) = agent.request("GET", "/v1/client/allocation/ffffffff-0000/stats", None);
    assert_eq!(code, 404, "{body}");
}

/// A docker task's usage comes from the engine: a container whose `dd` holds a 32 MiB buffer
/// (its write to a pipe nobody reads blocks) reads an RSS of 32 MiB ±10%, with the engine's
/// fields measured.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_docker_tasks_stats_come_from_the_engine() {
    let env = crate::common::docker::required_engine();
    let dir = TempDir::new("stats-dk");
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "plugin \"docker\" {{\n  config {{ endpoint = \"{}\" }}\n}}\n",
            env.host
        ),
    );
    let held: u64 = 32 * 1024 * 1024;
    let script = format!(
        "dd if=/dev/zero bs={held} count=1 | sleep {}",
        unique_marker(300_000)
    );
    agent.run_hcl(&format!(
        "job \"dk\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"docker\"\n      \
         config {{\n        image = \"busybox:1\"\n        command = \"sh\"\n        \
         args = [\"-c\", {script:?}]\n      }}\n    }}\n  }}\n}}\n"
    ));
    let alloc = wait_for(WAIT * 3, "the container running", || {
        let allocs = agent.allocs("dk");
        let a = allocs.first()?;
        (a["ClientStatus"] == "running").then(|| a["ID"].as_str().unwrap().to_string())
    });
    // dd has its buffer once it has read it from /dev/zero, a moment after the start.
    let stats = wait_for(WAIT, "the container's RSS reaching the buffer", || {
        let s = agent.get(&format!("/v1/client/allocation/{alloc}/stats"));
        let rss = s["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"].as_u64()?;
        (rss >= held * 9 / 10).then_some(s)
    });
    let usage = &stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"];
    let rss = usage["RSS"].as_u64().unwrap();
    println!("stats: docker task RSS {rss} B (held {held} B)");
    assert!(rss.abs_diff(held) <= held / 10, "{stats}");
    assert!(
        usage["Measured"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "Cache"),
        "{stats}"
    );
    assert!(usage["Usage"].as_u64().unwrap() >= rss, "{stats}");
    let out = agent.cli(&["job", "stop", "dk"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(WAIT, "the container gone", || {
        env.containers_of_alloc(&alloc).is_empty().then_some(())
    });
}
