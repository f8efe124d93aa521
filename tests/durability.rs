//! The state file when it cannot be written (agent.md "The state file"): an API write is made
//! whole or not at all, a background write is retried until it succeeds, and
//! `/v1/agent/health` says so meanwhile. A real agent on a small tmpfs that the test fills.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn marker() -> String {
    unique_marker(400_000)
}

/// A job whose task ignores SIGHUP and SIGTERM and sleeps; `greeting` is its env, to change it.
fn job(m: &str, greeting: &str) -> String {
    format!(
        r#"
job "web" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      env {{ GREETING = "{greeting}" }}
      config {{
        command = "/bin/sh"
        args = ["-c", "trap '' HUP TERM; exec sleep {m}"]
      }}
    }}
  }}
}}"#
    )
}

fn parse(agent: &TestAgent, hcl: &str) -> Value {
    let (status, job) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({"JobHCL": hcl}).to_string()),
    );
    assert_eq!(status, 200, "parse: {job}");
    serde_json::from_str(&job).unwrap()
}

fn health(agent: &TestAgent) -> (u16, Value) {
    let (status, body) = agent.request("GET", "/v1/agent/health", None);
    (status, serde_json::from_str(&body).unwrap())
}

/// The number in "(N failed attempts)" of the health's state message.
fn attempts(message: &str) -> u64 {
    message
        .rsplit_once(" failed attempts")
        .and_then(|(head, _)| head.rsplit_once('(').map(|(_, n)| n.parse().unwrap()))
        .unwrap_or_else(|| panic!("no attempt count in {message:?}"))
}

fn count(agent: &TestAgent, needle: &str) -> usize {
    agent
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(needle))
        .count()
}

/// The disk fills up under a running agent. A background write (a task event) fails: the
/// health says the state is not durable, the flusher keeps trying, with one warning for the
/// whole streak. A changed registration, a job stop and an allocation stop each answer a clear
/// 500 and change nothing: the old task runs on, the job keeps its version. Once there is room
/// again the background write lands by itself (the event reaches the file with no other write
/// asking for it), the health recovers with one line in the log, and the same registration
/// succeeds with `Changed: true`.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_full_disk_changes_nothing_and_the_state_is_written_once_there_is_room() {
    require_root();
    let dir = TempDir::new("dur-full");
    let data = dir.path().join("data");
    let _tmpfs = Tmpfs::mount(&data, "4m");
    let agent = TestAgent::start_in(dir.path(), FULL_DISK_CONFIG);
    let m = marker();
    agent.run_hcl(&job(&m, "v1"));
    let alloc = agent.alloc_id("web");
    let pid = wait_for(WAIT, "the task running", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "running")
            .then(|| s["PID"].as_i64())
            .flatten()
    });
    wait_for(WAIT, "the state file to record the run", || {
        state_on_disk(&data)?
            .to_string()
            .contains(&format!("\"PID\":{pid}"))
            .then_some(())
    });
    assert_eq!(health(&agent).0, 200);

    let filler = fill_disk(&data);
    // A background write: the task's `Signaling` event (the task ignores the signal). An event
    // appended to the state journal may still fit in the last page the journal has; the first
    // that does not fails, and every write after a failure rewrites the whole state, which needs
    // room. So signal until a write fails.
    let signal = || {
        let (status, body) = agent.request(
            "POST",
            &format!("/v1/client/allocation/{alloc}/signal"),
            Some(r#"{"Signal": "SIGHUP", "Task": "t"}"#),
        );
        assert_eq!(status, 200, "{body}");
        std::time::Instant::now()
    };
    let mut signalled = signal();
    let message = wait_for(WAIT, "the health to say the state is not durable", || {
        let (status, h) = health(&agent);
        let state = &h["state"];
        if status == 500 && state["ok"] == false {
            return Some(state["message"].as_str().unwrap().to_string());
        }
        // The flusher writes within half a second: that event was written.
        if signalled.elapsed() > Duration::from_secs(2) {
            signalled = signal();
        }
        None
    });
    assert!(
        message.starts_with("state not durable: cannot write state file ")
            && message.contains("No space left on device"),
        "{message}"
    );
    assert_eq!(health(&agent).1["client"]["ok"], true);
    wait_for(WAIT, "three failed attempts", || {
        let (_, h) = health(&agent);
        let m = h["state"]["message"].as_str()?.to_string();
        (attempts(&m) >= 3).then_some(())
    });
    assert_eq!(
        count(&agent, "the agent keeps trying"),
        1,
        "one warning per streak"
    );
    // The newest event is the one that could not be written.
    let events = agent.task_state(&alloc, "t")["Events"].clone();
    let unwritten = events.as_array().unwrap().last().unwrap().clone();
    assert_eq!(unwritten["Type"], "Signaling");
    let on_disk = |event: &Value| {
        let state = state_on_disk(&data).unwrap();
        let a = state["Allocations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["ID"] == alloc.as_str())
            .unwrap()
            .clone();
        a["TaskStates"]["t"]["Events"]
            .as_array()
            .unwrap()
            .contains(event)
    };
    assert!(!on_disk(&unwritten));

    // API writes: all or nothing.
    let changed = parse(&agent, &job(&m, "v2"));
    let unchanged = |what: &str| {
        assert!(alive(pid as i32), "{what} stopped the old job's task");
        let allocs = agent.allocs("web");
        assert_eq!(allocs.len(), 1, "{what}: {allocs:?}");
        assert_eq!(allocs[0]["DesiredStatus"], "run", "{what}");
        assert_eq!(agent.task_state(&alloc, "t")["State"], "running", "{what}");
        let job = agent.get("/v1/job/web");
        assert_eq!(job["Version"], 0, "{what}");
        assert_eq!(job["Stop"], false, "{what}");
        assert_eq!(
            job["TaskGroups"][0]["Tasks"][0]["Env"]["GREETING"], "v1",
            "{what}"
        );
    };
    let (status, register) = agent.put_json("/v1/jobs", &json!({"Job": changed}));
    assert_eq!(status, 500, "{register}");
    unchanged("a failed registration");
    let (status, stop) = agent.request("DELETE", "/v1/job/web", None);
    assert_eq!(status, 500, "{stop}");
    unchanged("a failed job stop");
    let (status, body) = agent.request("DELETE", "/v1/job/web?purge=true", None);
    assert_eq!(status, 500, "{body}");
    unchanged("a failed purge");
    let (status, alloc_stop) =
        agent.request("POST", &format!("/v1/allocation/{alloc}/stop"), Some("{}"));
    assert_eq!(status, 500, "{alloc_stop}");
    unchanged("a failed allocation stop");
    assert!(
        register.starts_with("registering job \"web\": cannot write state file ")
            && register.contains("No space left on device")
            && register.ends_with("; nothing was changed"),
        "{register}"
    );
    assert!(stop.starts_with("stopping job \"web\": "), "{stop}");
    assert!(
        alloc_stop.starts_with(&format!("stopping allocation {alloc}: ")),
        "{alloc_stop}"
    );

    std::fs::remove_file(&filler).unwrap();
    wait_for(WAIT, "the health to recover", || {
        let (status, h) = health(&agent);
        (status == 200 && h["state"]["ok"] == true).then_some(())
    });
    wait_for(WAIT, "the event written by the flusher's retry", || {
        on_disk(&unwritten).then_some(())
    });
    // Logged when the retry succeeded: the line may still be on its way from the agent.
    wait_for(WAIT, "the line of the write that succeeded", || {
        (count(&agent, "written again, after ") > 0).then_some(())
    });
    assert_eq!(count(&agent, "the agent keeps trying"), 1);
    assert_eq!(count(&agent, "written again, after "), 1);

    let (status, body) = agent.put_json("/v1/jobs", &json!({"Job": changed}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["Changed"],
        true
    );
    wait_for(WAIT, "the old task stopped", || {
        (!alive(pid as i32)).then_some(())
    });
    let job = agent.get("/v1/job/web");
    assert_eq!(job["Version"], 1);
    let new = wait_for(WAIT, "the new allocation running", || {
        agent
            .allocs("web")
            .into_iter()
            .find(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
    });
    assert_ne!(new["ID"], alloc.as_str());
}

/// The host volumes an agent lists: ID → state.
fn volumes(agent: &TestAgent) -> std::collections::BTreeMap<String, String> {
    agent
        .get("/v1/volumes?type=host")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let id = v["ID"].as_str().unwrap().to_string();
            (id, v["State"].as_str().unwrap().to_string())
        })
        .collect()
}

/// A volume create costs what it changes: the agent appends the volume to the state journal
/// instead of rewriting `state.json` (whose inode stays the same through hundreds of creates and
/// deletes), about one volume's record per write. Killed with SIGKILL, and with the journal
/// ending in a record a crash cut short, the next agent has exactly the volumes whose create was
/// acknowledged and not those whose delete was, says which bytes it ignored, and a clean stop
/// then leaves `state.json` alone holding them all.
#[test]
fn acknowledged_volume_writes_survive_a_kill_9_and_cost_what_they_change() {
    use std::os::unix::fs::MetadataExt;
    let dir = TempDir::new("dur-journal");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let snapshot = agent.data_dir.join("state.json");
    let journal = agent.data_dir.join("state.journal");
    let inode = std::fs::metadata(&snapshot).unwrap().ino();
    let start = std::fs::metadata(&journal).map_or(0, |m| m.len());
    let mut acknowledged = std::collections::BTreeSet::new();
    let mut writes = 0;
    for i in 0..300 {
        let (status, body) = agent.put_json(
            "/v1/volume/host/create",
            &json!({"Volume": {"Name": format!("v{i}"), "PluginID": "mkdir"}}),
        );
        assert_eq!(status, 200, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["Volume"]["ID"]
            .as_str()
            .unwrap()
            .to_string();
        acknowledged.insert(id.clone());
        writes += 1;
        if i % 10 == 3 {
            let (status, body) = agent.request("DELETE", &format!("/v1/volume/host/{id}"), None);
            assert_eq!(status, 200, "{body}");
            acknowledged.remove(&id);
            writes += 1;
        }
    }
    assert_eq!(
        std::fs::metadata(&snapshot).unwrap().ino(),
        inode,
        "state.json was rewritten by a volume write"
    );
    let grown = std::fs::metadata(&journal).unwrap().len() - start;
    assert!(
        grown / writes < 1024,
        "{grown} bytes of journal for {writes} volume writes"
    );

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    // The start of a record that a crash cut short: 200 bytes announced, a few there.
    let torn_at = std::fs::metadata(&journal).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut file, b"\xc8\0\0\0\x01\x02\x03\x04{\"HostVolu").unwrap();
    drop(file);
    agent.restart();
    let listed = volumes(&agent);
    assert_eq!(
        listed
            .keys()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        acknowledged
    );
    assert!(listed.values().all(|s| s == "ready"), "{listed:?}");
    let log = agent.log_text();
    assert!(
        log.contains(&format!(
            "state journal {}: ignored the last 18 bytes, from offset {torn_at} (it is cut short: \
             200 bytes announced, 10 there)",
            journal.display()
        )),
        "{log}"
    );

    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    assert!(
        !journal.exists(),
        "a clean stop folds the journal into state.json"
    );
    let alone: Value = serde_json::from_slice(&std::fs::read(&snapshot).unwrap()).unwrap();
    assert_eq!(
        alone["HostVolumes"].as_array().unwrap().len(),
        acknowledged.len()
    );
    agent.restart();
    assert_eq!(volumes(&agent).len(), acknowledged.len());
}
