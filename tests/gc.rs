//! Bounded growth through the real agent: the allocation garbage collector (by count, by disk
//! usage, on demand through the API and `nodeward system gc`), what it leaves alone, and the
//! per-node allocation limit.

use crate::common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn marker() -> String {
    unique_marker(100_000)
}

/// A job of one task `t` that runs `script` in `/bin/sh`.
fn job(name: &str, kind: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "{kind}"
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}
  }}
}}"#
    )
}

/// A service that sleeps until stopped; returns its allocation and PID, once running.
fn service(agent: &TestAgent, name: &str) -> (String, i64) {
    let alloc =
        agent.alloc_id(&agent.run_hcl(&job(name, "service", &format!("exec sleep {}", marker()))));
    let pid = wait_for(WAIT, "the service running", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "running")
            .then(|| s["PID"].as_i64())
            .flatten()
    });
    (alloc, pid)
}

/// The service `svc` still runs as `pid`: a collection never touches a live allocation.
fn assert_untouched(agent: &TestAgent, svc: &str, pid: i64) {
    let s = agent.task_state(svc, "t");
    assert_eq!(
        (s["State"].as_str(), s["PID"].as_i64()),
        (Some("running"), Some(pid))
    );
}

/// A batch job that runs `script` and completes; returns its allocation once complete.
fn batch(agent: &TestAgent, name: &str, script: &str) -> String {
    let alloc = agent.alloc_id(&agent.run_hcl(&job(name, "batch", script)));
    wait_for(WAIT, "the batch allocation complete", || {
        (status(agent, &alloc).as_deref() == Some("complete")).then_some(())
    });
    alloc
}

/// An allocation's `ClientStatus`; `None` once the agent no longer has it (404).
fn status(agent: &TestAgent, alloc: &str) -> Option<String> {
    let (code, body) = agent.request("GET", &format!("/v1/allocation/{alloc}"), None);
    match code {
        200 => serde_json::from_str::<Value>(&body).ok()?["ClientStatus"]
            .as_str()
            .map(String::from),
        404 => None,
        other => panic!("GET /v1/allocation/{alloc}: {other} {body}"),
    }
}

fn api_allocs(agent: &TestAgent) -> BTreeSet<String> {
    agent
        .get("/v1/allocations")
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect()
}

/// The allocations the state on disk holds (the snapshot with its journal replayed).
fn state_allocs(data_dir: &Path) -> BTreeSet<String> {
    let state: Value = state_on_disk(data_dir).expect("a readable state");
    state["Allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect()
}

fn alloc_dir(agent: &TestAgent, alloc: &str) -> PathBuf {
    agent.data_dir.join("alloc").join(alloc)
}

/// Whether the agent, its state file and the disk are all rid of `alloc`.
fn gone_everywhere(agent: &TestAgent, alloc: &str) -> bool {
    status(agent, alloc).is_none()
        && !state_allocs(&agent.data_dir).contains(alloc)
        && !alloc_dir(agent, alloc).exists()
}

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// More than `gc_max_allocs` allocations: the oldest terminal ones go from the API, the state
/// file and the disk until the node is back at the limit; the running service and the newer
/// terminal allocations (logs included) stay; a link a task planted in its directory is removed
/// without its target being touched.
#[test]
fn terminal_allocations_over_gc_max_allocs_are_collected_oldest_first() {
    let dir = TempDir::new("gc-max");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep"), "host data").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        "client {\n  gc_interval = \"100ms\"\n  gc_max_allocs = 3\n}\n",
    );
    let (svc, pid) = service(&agent, "svc");
    let script = |i: u32| {
        format!(
            "echo run {i}; ln -s {} local/escape; ln -s {} ../alloc/escape",
            outside.display(),
            outside.display()
        )
    };
    let b: Vec<String> = (1..=4)
        .map(|i| batch(&agent, &format!("b{i}"), &script(i)))
        .collect();
    wait_for(WAIT, "b1 and b2 collected", || {
        (gone_everywhere(&agent, &b[0]) && gone_everywhere(&agent, &b[1])).then_some(())
    });
    assert_eq!(api_allocs(&agent), set(&[&svc, &b[2], &b[3]]));
    assert_eq!(state_allocs(&agent.data_dir), set(&[&svc, &b[2], &b[3]]));
    for (i, alloc) in [(3, &b[2]), (4, &b[3])] {
        let log = alloc_dir(&agent, alloc).join("alloc/logs/t.stdout.0");
        // Read until whole: the keeper drains a task's pipe after it reported the exit.
        wait_eq(
            WAIT,
            "the kept allocation's log",
            || std::fs::read_to_string(&log).unwrap(),
            format!("run {i}\n"),
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("keep")).unwrap(),
        "host data",
        "the target of a planted link was touched"
    );
    assert_untouched(&agent, &svc, pid);
    assert!(alive(pid as i32));
    // How many allocations a pass saw depends on when it ran (4 or 5): the limit is what it names.
    for gone in &b[..2] {
        let line = agent.log_line(&format!("{gone} collected"), |l| {
            l.contains(&format!("garbage collected allocation {gone}: "))
        });
        assert!(
            line.contains(": number of allocations (") && line.ends_with(") is over the limit (3)"),
            "{line}"
        );
    }
}

/// `PUT /v1/client/allocation/:id/gc` takes one terminal allocation (an ID prefix works) and
/// refuses a running one in Nomad's words; `PUT /v1/client/gc` and `nodeward system gc` take
/// every terminal allocation; `GET` changes nothing; the running service is never touched.
#[test]
fn the_gc_endpoints_and_the_cli_collect_only_terminal_allocations() {
    let dir = TempDir::new("gc-api");
    let agent = TestAgent::start_in(dir.path(), "");
    let (svc, pid) = service(&agent, "svc");
    let b1 = batch(&agent, "b1", "echo one");
    let b2 = batch(&agent, "b2", "echo two");

    let (code, body) = agent.request("PUT", &format!("/v1/client/allocation/{svc}/gc"), None);
    assert_eq!(
        (code, body),
        (
            400,
            format!(
                "No such allocation on client, or allocation not eligible for GC: alloc {svc} \
                 is not terminal: task \"t\" is running"
            )
        )
    );
    for path in [
        format!("/v1/client/allocation/{b1}/gc"),
        "/v1/client/gc".to_string(),
    ] {
        assert_eq!(agent.request("GET", &path, None).0, 405, "GET {path}");
    }
    let unknown = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        agent
            .request("PUT", &format!("/v1/client/allocation/{unknown}/gc"), None)
            .0,
        404
    );
    assert_eq!(
        api_allocs(&agent),
        set(&[&svc, &b1, &b2]),
        "nothing changed yet"
    );

    let (code, body) = agent.request(
        "PUT",
        &format!("/v1/client/allocation/{}/gc", &b1[..8]),
        None,
    );
    assert_eq!((code, body.as_str()), (200, "{}"));
    assert!(gone_everywhere(&agent, &b1));
    assert!(alloc_dir(&agent, &b2).exists());

    let (code, body) = agent.request("PUT", "/v1/client/gc", Some("{}"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"Collected": [b2]})
    );
    assert!(gone_everywhere(&agent, &b2));

    let b3 = batch(&agent, "b3", "echo three");
    let out = agent.cli(&["system", "gc"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("==> Garbage collected 1 terminal allocation\n    {b3}\n")
    );
    assert!(gone_everywhere(&agent, &b3));
    let out = agent.cli(&["system", "gc"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string()
        ),
        (
            Some(0),
            "==> No terminal allocations to collect\n".to_string()
        )
    );
    let (code, body) = agent.request("POST", "/v1/system/gc", None);
    assert_eq!((code, body.as_str()), (200, "{\"Collected\":[]}"));

    assert_eq!(api_allocs(&agent), set(&[&svc]));
    assert_untouched(&agent, &svc, pid);
}

/// What a collection removed stays removed: the next agent restores neither the allocations nor
/// their directories, and re-attaches to the running service as before.
#[test]
fn collected_allocations_stay_gone_after_an_agent_restart() {
    let dir = TempDir::new("gc-restart");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let (svc, pid) = service(&agent, "svc");
    let b1 = batch(&agent, "b1", "echo one");
    let b2 = batch(&agent, "b2", "echo two");
    let (code, body) = agent.request("PUT", "/v1/client/gc", None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"Collected": [b1, b2]})
    );
    assert_eq!(agent.stop_with(libc::SIGTERM, WAIT), Some(0));
    assert_eq!(state_allocs(&agent.data_dir), set(&[&svc]));
    agent.restart();
    let s = wait_for(WAIT, "the service re-attached", || {
        let s = agent.task_state(&svc, "t");
        (s["State"] == "running").then_some(s)
    });
    assert_eq!(s["PID"].as_i64(), Some(pid));
    assert_eq!(api_allocs(&agent), set(&[&svc]));
    for b in [&b1, &b2] {
        assert!(gone_everywhere(&agent, b), "{b} came back");
    }
    // The jobs stay registered (as in Nomad, a client collection forgets allocations only).
    assert_eq!(agent.get("/v1/job/b1")["Status"], "dead");
}

/// A job of 200 groups of 10,000 allocations (two million runner threads) is refused against
/// the default per-node limit, and nothing changes: no job, no allocation, no process.
#[test]
fn a_job_over_the_node_allocation_limit_is_a_400_and_changes_nothing() {
    let dir = TempDir::new("gc-limit");
    let agent = TestAgent::start_in(dir.path(), "");
    let (svc, pid) = service(&agent, "svc");
    let (code, parsed) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({"JobHCL": job("huge", "service", "exec sleep 1000")}).to_string()),
    );
    assert_eq!(code, 200, "{parsed}");
    let mut huge: Value = serde_json::from_str(&parsed).unwrap();
    let group = huge["TaskGroups"][0].clone();
    huge["TaskGroups"] = (0..200)
        .map(|i| {
            let mut g = group.clone();
            g["Name"] = json!(format!("g{i}"));
            g["Count"] = json!(10_000);
            g
        })
        .collect();
    let state_before = state_allocs(&agent.data_dir);
    let (code, body) = agent.put_json("/v1/jobs", &json!({"Job": huge}));
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            "number of allocations (2000001) is over the limit (10000): job \"huge\" asks for \
             2000000 and 1 of other jobs are live on this node; lower the job's count or raise \
             client { max_allocs }"
        )
    );
    assert_eq!(agent.request("GET", "/v1/job/huge", None).0, 404);
    assert_eq!(api_allocs(&agent), set(&[&svc]));
    assert_eq!(state_allocs(&agent.data_dir), state_before);
    assert!(!agent.get("/v1/jobs").to_string().contains("huge"));
    assert_untouched(&agent, &svc, pid);
}

/// The data directory's file system fuller than `gc_disk_usage_threshold` (statvfs on a small
/// tmpfs): the terminal allocation that filled it is collected, which frees the space; the
/// running service stays.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_full_disk_is_freed_by_collecting_terminal_allocations() {
    require_root();
    let dir = TempDir::new("gc-disk");
    let _tmpfs = Tmpfs::mount(&dir.path().join("data"), "8m");
    let agent = TestAgent::start_in(
        dir.path(),
        // As FULL_DISK_CONFIG: the tmpfs has no room for the allocations' ephemeral disk.
        "client {\n  gc_interval = \"100ms\"\n  gc_disk_usage_threshold = 50\n  disk_free_mb = 10000\n}\n",
    );
    let (svc, pid) = service(&agent, "svc");
    // The task fills the disk and then waits for `go`: until the test knows the allocation's
    // ID, it must not end (the collector, every 100 ms, would take it first).
    let fill = agent.alloc_id(&agent.run_hcl(&job(
        "fill",
        "batch",
        "dd if=/dev/zero of=local/blob bs=1M count=5 && while [ ! -e local/go ]; do sleep 0.1; done",
    )));
    let go = alloc_dir(&agent, &fill).join("t/local/go");
    wait_for(WAIT, "the task directory", || {
        go.parent().unwrap().is_dir().then_some(())
    });
    std::fs::write(&go, "").unwrap();
    wait_for(WAIT, "the filling allocation collected", || {
        gone_everywhere(&agent, &fill).then_some(())
    });
    let line = agent.log_line("a collection for the disk", |l| {
        l.contains(&format!(
            "garbage collected allocation {fill}: disk usage of "
        ))
    });
    assert!(line.ends_with("is over gc threshold of 50"), "{line}");
    assert_eq!(api_allocs(&agent), set(&[&svc]));
    assert_untouched(&agent, &svc, pid);
}

/// A directory bound inside a collected allocation's directory (as a CSI volume at a task's
/// destination) is unmounted before the removal: its files stay where they are, the allocation's
/// directory goes, and nothing is left mounted.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_mount_inside_an_allocation_directory_is_unmounted_not_emptied() {
    require_root();
    let dir = TempDir::new("gc-mnt");
    let agent = TestAgent::start_in(dir.path(), "");
    let b1 = batch(&agent, "b1", "mkdir local/mnt");
    let mnt = alloc_dir(&agent, &b1).join("t/local/mnt");
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("data"), "mounted data").unwrap();
    let bound = std::process::Command::new("mount")
        .arg("--bind")
        .arg(&volume)
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(
        bound.success(),
        "bind {} at {}",
        volume.display(),
        mnt.display()
    );
    let (code, body) = agent.request("PUT", &format!("/v1/client/allocation/{b1}/gc"), None);
    if mnt.exists() {
        // A failed removal must not leave the mount behind the test.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&mnt)
            .status();
    }
    assert_eq!((code, body.as_str()), (200, "{}"));
    assert_eq!(status(&agent, &b1), None);
    assert!(!state_allocs(&agent.data_dir).contains(&b1));
    assert!(!alloc_dir(&agent, &b1).exists(), "the collected directory");
    assert_eq!(
        std::fs::read_to_string(volume.join("data")).unwrap(),
        "mounted data"
    );
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !table.contains(&alloc_dir(&agent, &b1).display().to_string()),
        "nothing mounted under the collected directory:\n{table}"
    );
}
