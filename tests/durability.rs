//! The state file when it cannot be written (agent.md "The state file"): an API write is made
//! whole or not at all, a background write is retried until it succeeds, and
//! `/v1/agent/health` says so meanwhile. A real agent on a small tmpfs that the test fills.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn marker() -> String {
    format!(
        "{}.{}",
        400_000 + fastrand::u32(0..100_000),
        fastrand::u32(1..999_999)
    )
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
fn a_full_disk_changes_nothing_and_the_state_is_written_once_there_is_room() {
    if !is_root() {
        println!(
            "SKIPPED a_full_disk_changes_nothing_and_the_state_is_written_once_there_is_room: \
             needs root to mount a small tmpfs"
        );
        return;
    }
    let dir = TempDir::new("dur-full");
    let data = dir.path().join("data");
    let _tmpfs = Tmpfs::mount(&data, "4m");
    let agent = TestAgent::start_in(dir.path(), "");
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
        std::fs::read_to_string(data.join("state.json"))
            .ok()?
            .contains(&format!("\"PID\":{pid}"))
            .then_some(())
    });
    assert_eq!(health(&agent).0, 200);

    let filler = fill_disk(&data);
    // A background write: the task's `Signaling` event (the task ignores the signal).
    let (status, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/signal"),
        Some(r#"{"Signal": "SIGHUP", "Task": "t"}"#),
    );
    assert_eq!(status, 200, "{body}");
    let message = wait_for(WAIT, "the health to say the state is not durable", || {
        let (status, h) = health(&agent);
        let state = &h["state"];
        (status == 500 && state["ok"] == false)
            .then(|| state["message"].as_str().unwrap().to_string())
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
    assert!(!std::fs::read_to_string(data.join("state.json"))
        .unwrap()
        .contains("Signaling"));

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
        std::fs::read_to_string(data.join("state.json"))
            .ok()?
            .contains("Signaling")
            .then_some(())
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
