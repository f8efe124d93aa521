//! Node resources and placement by resources through the real agent: the fingerprint and
//! `client { reserved }` in `/v1/node/:id` and `node status`, a job that does not fit in what
//! is left getting Nomad's `Dimension "memory" exhausted` with no allocation, and its placement
//! once a stopped job frees the room; the same for a group's `ephemeral_disk` against the
//! node's disk; a reservation larger than the node refused at start.

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// The host's memory in MB, as the fingerprint counts it (`MemTotal` / 1024).
fn host_memory_mb() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

/// A service of one task that sleeps, asking `memory` MB.
fn service(dir: &TempDir, name: &str, memory: u64) -> PathBuf {
    let p = dir.path().join(format!("{name}.hcl"));
    std::fs::write(
        &p,
        format!(
            r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      config {{
        command = "/bin/sleep"
        args = ["{}"]
      }}
      resources {{
        cpu    = 50
        memory = {memory}
      }}
    }}
  }}
}}"#,
            unique_marker(200_000)
        ),
    )
    .unwrap();
    p
}

fn run(agent: &TestAgent, file: &std::path::Path) -> (Option<i32>, String) {
    let out = agent.cli(&["job", "run", file.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

fn running(agent: &TestAgent, job: &str) -> String {
    wait_for(WAIT, &format!("{job} running"), || {
        let allocs = agent.allocs(job);
        let a = allocs.iter().find(|a| a["ClientStatus"] == "running")?;
        Some(a["ID"].as_str()?.to_string())
    })
}

/// With 200 MB left after `client { reserved { memory } }`, a 150 MB job runs, a 100 MB one
/// is refused with Nomad's words and exit 2 and gets no allocation, and it is placed once the
/// first is stopped.
#[test]
fn a_job_that_does_not_fit_in_unreserved_memory_waits_for_room() {
    let total = host_memory_mb();
    let dir = TempDir::new("cap");
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n  reserved {{\n    memory = {}\n    cpu = 10\n  }}\n}}\n",
            total - 200
        ),
    );
    let nodes = agent.get("/v1/nodes");
    let node = agent.get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()));
    let res = &node["NodeResources"];
    assert_eq!(res["Memory"]["MemoryMB"], total, "{node}");
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(res["Cpu"]["TotalCpuCores"], cores, "{node}");
    assert_eq!(
        res["Cpu"]["ReservableCpuCores"].as_array().unwrap().len() as u64,
        cores
    );
    // Cores × MHz: at least 100 MHz a core on any machine that runs this.
    assert!(
        res["Cpu"]["CpuShares"].as_u64().unwrap() >= 100 * cores,
        "{node}"
    );
    assert!(res["Disk"]["DiskMB"].as_u64().unwrap() > 0, "{node}");
    let reserved = &node["ReservedResources"];
    assert_eq!(reserved["Memory"]["MemoryMB"], total - 200, "{node}");
    assert_eq!(reserved["Cpu"]["CpuShares"], 10, "{node}");
    assert_eq!(reserved["Disk"]["DiskMB"], 0, "{node}");

    let out = agent.cli(&["node", "status", "-self"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("Allocated Resources\nCPU"), "{text}");
    assert!(text.contains("0 B/200 MiB"), "{text}");

    let (code, out) = run(&agent, &service(&dir, "big", 150));
    assert_eq!(code, Some(0), "{out}");
    running(&agent, "big");
    let out = agent.cli(&["node", "status", "-self"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("150 MiB/200 MiB"), "{text}");

    let (code, out) = run(&agent, &service(&dir, "more", 100));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "    Task Group \"g\" (failed to place 1 allocation):\n      \
             * Resources exhausted on 1 nodes\n      \
             * Dimension \"memory\" exhausted on 1 nodes\n"
        ),
        "{out}"
    );
    assert!(agent.allocs("more").is_empty());
    let status = agent.cli(&["job", "status", "more"]);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        status.contains("Placement Failure\nTask Group \"g\":\n  * Resources exhausted on 1 nodes\n  * Dimension \"memory\" exhausted on 1 nodes\n"),
        "{status}"
    );
    let evals = agent.get("/v1/job/more/evaluations");
    let failed = evals
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e["FailedTGAllocs"].get("g").cloned())
        .unwrap_or(Value::Null);
    assert_eq!(failed["DimensionExhausted"]["memory"], 1, "{evals}");

    let out = agent.cli(&["job", "stop", "big"]);
    assert!(out.status.success(), "{out:?}");
    running(&agent, "more");
    assert_eq!(agent.allocs("more").len(), 1);
}

/// A service of one task that sleeps, its group asking `disk` MB of ephemeral disk.
fn disk_service(dir: &TempDir, name: &str, disk: u64) -> PathBuf {
    let p = dir.path().join(format!("{name}.hcl"));
    std::fs::write(
        &p,
        format!(
            r#"
job "{name}" {{
  group "g" {{
    ephemeral_disk {{
      size = {disk}
    }}
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      config {{
        command = "/bin/sleep"
        args = ["{}"]
      }}
      resources {{
        cpu    = 50
        memory = 50
      }}
    }}
  }}
}}"#,
            unique_marker(200_000)
        ),
    )
    .unwrap();
    p
}

/// The groups' `ephemeral_disk { size }` counts against the node's disk (`Disk.DiskMB`): a
/// job asking more than the node has is refused with Nomad's `Dimension "disk"` and exit 2 and
/// gets no allocation; a small one runs, shows its size in `alloc status -stats`, and what it
/// holds is counted against the next job.
#[test]
fn a_job_whose_ephemeral_disk_does_not_fit_gets_no_allocation() {
    let dir = TempDir::new("cap-disk");
    let agent = TestAgent::start_in(dir.path(), "");
    let nodes = agent.get("/v1/nodes");
    let node = agent.get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()));
    let disk = node["NodeResources"]["Disk"]["DiskMB"].as_u64().unwrap();
    assert_eq!(node["ReservedResources"]["Disk"]["DiskMB"], 0, "{node}");
    assert!(disk > 20, "{node}");
    let disk_failure = "    Task Group \"g\" (failed to place 1 allocation):\n      \
                        * Resources exhausted on 1 nodes\n      \
                        * Dimension \"disk\" exhausted on 1 nodes\n";

    let (code, out) = run(&agent, &disk_service(&dir, "huge", disk + 1));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains(disk_failure), "{out}");
    assert!(agent.allocs("huge").is_empty());

    let (code, out) = run(&agent, &disk_service(&dir, "small", 10));
    assert_eq!(code, Some(0), "{out}");
    let alloc = running(&agent, "small");
    let out = agent.cli(&["alloc", "status", "-stats", &alloc]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("50 MiB  10 MiB"), "{text}");

    // What is left once the small job holds its 10 MB is one MB too few for this one.
    let (code, out) = run(&agent, &disk_service(&dir, "rest", disk - 9));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains(disk_failure), "{out}");
    assert!(agent.allocs("rest").is_empty());
}

/// Reserving more memory than the node has is a configuration error: the agent says which key
/// and why, and does not start.
#[test]
fn a_reservation_larger_than_the_node_is_refused_at_start() {
    let dir = TempDir::new("cap-over");
    let config = dir.path().join("agent.hcl");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\nports {{ http = 0 }}\nclient {{\n  reserved {{ memory = {} }}\n}}\n",
            data.display(),
            host_memory_mb() + 1000
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["agent", "-config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let want = format!(
        "config: client.reserved.memory: {} MB is more than the node has ({} MB)",
        host_memory_mb() + 1000,
        host_memory_mb()
    );
    assert!(err.contains(&want), "{err}");
}

/// `client { cpu_total_compute memory_total_mb }` state the node's totals instead of the
/// fingerprint (Nomad's overrides, for boards whose CPU states no frequency), and placement
/// counts against them: a 300 MB job does not fit in a node stated to have 256 MB.
#[test]
fn the_operators_totals_replace_the_fingerprint() {
    let dir = TempDir::new("cap-totals");
    let agent = TestAgent::start_in(
        dir.path(),
        "client {\n  cpu_total_compute = 123456\n  memory_total_mb = 256\n}\n",
    );
    let nodes = agent.get("/v1/nodes");
    let node = agent.get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()));
    let res = &node["NodeResources"];
    assert_eq!(res["Cpu"]["CpuShares"], 123456, "{node}");
    assert_eq!(res["Memory"]["MemoryMB"], 256, "{node}");
    let job = service(&dir, "big", 300);
    let (code, out) = run(&agent, &job);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("Dimension \"memory\" exhausted on 1 nodes"),
        "{out}"
    );
}

/// A service of one task asking `cores` cores that writes what it got (`NOMAD_CPU_CORES` and
/// `NOMAD_CPU_LIMIT`) to its stdout, then sleeps.
fn cores_service(dir: &TempDir, name: &str, cores: usize) -> PathBuf {
    let p = dir.path().join(format!("{name}.hcl"));
    std::fs::write(
        &p,
        format!(
            r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo \"cores=$NOMAD_CPU_CORES limit=$NOMAD_CPU_LIMIT\"; exec sleep {}"]
      }}
      resources {{
        cores  = {cores}
        memory = 32
      }}
    }}
  }}
}}"#,
            unique_marker(210_000)
        ),
    )
    .unwrap();
    p
}

/// What a task wrote to its stdout.
fn stdout_of(agent: &TestAgent, alloc: &str) -> String {
    wait_for(WAIT, "the task's output", || {
        let out = agent.cli(&["alloc", "logs", alloc, "t"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.contains('\n').then_some(text)
    })
}

/// `resources { cores }` is a dimension: a job asking every core of the node runs with all of
/// them (`NOMAD_CPU_CORES`, and `NOMAD_CPU_LIMIT` their MHz); a second one asking as many gets
/// Nomad's `Dimension "cores" exhausted` and no allocation, after an agent crash and restart too
/// (the cores are kept in the state file), and runs with the same cores once the first stops.
#[test]
fn a_job_whose_cores_are_held_waits_for_them() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let dir = TempDir::new("cap-cores");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let nodes = agent.get("/v1/nodes");
    let node = agent.get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()));
    let per_core = node["NodeResources"]["Cpu"]["CpuShares"].as_u64().unwrap() / cores as u64;
    let all = if cores == 1 {
        "0".to_string()
    } else {
        format!("0-{}", cores - 1)
    };
    let want = format!("cores={all} limit={}\n", per_core * cores as u64);

    let (code, out) = run(&agent, &cores_service(&dir, "first", cores));
    assert_eq!(code, Some(0), "{out}");
    let first = running(&agent, "first");
    assert_eq!(stdout_of(&agent, &first), want);
    // The allocation says what it got, as Nomad's AllocatedResources, and node status counts it.
    let a = agent.get(&format!("/v1/allocation/{first}"));
    let cpu = &a["AllocatedResources"]["Tasks"]["t"]["Cpu"];
    let ids: Vec<u64> = (0..cores as u64).collect();
    assert_eq!(cpu["ReservedCores"], serde_json::json!(ids), "{a}");
    assert_eq!(cpu["CpuShares"], per_core * cores as u64, "{a}");
    assert_eq!(
        a["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["Cores"],
        cores
    );
    let out = agent.cli(&["node", "status", "-self"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let total = node["NodeResources"]["Cpu"]["CpuShares"].as_u64().unwrap();
    assert!(
        text.contains(&format!("{}/{total} MHz", per_core * cores as u64)),
        "{text}"
    );

    let second = cores_service(&dir, "second", cores);
    let refused = |agent: &TestAgent| {
        let (code, out) = run(agent, &second);
        assert_eq!(code, Some(2), "{out}");
        assert!(
            out.contains(
                "    Task Group \"g\" (failed to place 1 allocation):\n      \
                 * Resources exhausted on 1 nodes\n      \
                 * Dimension \"cores\" exhausted on 1 nodes\n"
            ),
            "{out}"
        );
        assert!(agent.allocs("second").is_empty());
    };
    refused(&agent);
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    running(&agent, "first");
    // Purged, so that its registration is new and placed again, not the same job unchanged.
    let (status, body) = agent.request("DELETE", "/v1/job/second?purge=true", None);
    assert_eq!(status, 200, "{body}");
    refused(&agent);

    let out = agent.cli(&["job", "stop", "first"]);
    assert!(out.status.success(), "{out:?}");
    let second = running(&agent, "second");
    assert_eq!(stdout_of(&agent, &second), want);
}
