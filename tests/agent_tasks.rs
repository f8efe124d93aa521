//! End-to-end tests of the task engine: the real agent binary, real processes, real HTTP.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn marker() -> String {
    // A unique sleep length marks this test's processes in /proc.
    unique_marker(100_000)
}

#[test]
fn crash_loop_shows_the_exact_event_sequence_and_gives_up() {
    let dir = TempDir::new("crash");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(
        r#"
job "crash" {
  group "g" {
    restart { attempts = 2  interval = "1m"  delay = "100ms"  mode = "fail" }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/sh"  args = ["-c", "exit 3"] }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "task dead", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    let events = agent.events(&alloc, "t");
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    // 11 events happened; the oldest (Received) fell out of the last-10 window.
    assert_eq!(
        types,
        [
            "Task Setup",
            "Started",
            "Terminated",
            "Restarting",
            "Started",
            "Terminated",
            "Restarting",
            "Started",
            "Terminated",
            "Not Restarting"
        ],
        "{events:#?}"
    );
    assert_eq!(events[2].1, "Exit Code: 3");
    assert!(
        events[3].1.starts_with("Task restarting in 1"),
        "{}",
        events[3].1
    );
    assert_eq!(
        events[9].1,
        "Exceeded allowed attempts 2 in interval 1m0s and mode is \"fail\""
    );
    let state = agent.task_state(&alloc, "t");
    assert_eq!(state["Failed"], true);
    assert_eq!(state["Restarts"], 2);
    let a = agent.get(&format!("/v1/allocation/{alloc}"));
    assert_eq!(a["ClientStatus"], "failed");
    // The restart delay honours the policy: 100ms plus up to 25% jitter.
    let raw = agent.task_state(&alloc, "t")["Events"].clone();
    for e in raw
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["Type"] == "Restarting")
    {
        let d = e["StartDelay"].as_i64().unwrap();
        assert!((100_000_000..125_000_000).contains(&d), "{d}");
    }
}

#[test]
fn kill_timeout_escalates_to_sigkill_of_the_whole_group() {
    let dir = TempDir::new("kill");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let job = agent.run_hcl(&format!(
        r#"
job "stubborn" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", "trap '' INT; sleep {m} & echo $! > child.pid; wait"]
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let pidfile = agent.data_dir.join(format!("alloc/{alloc}/t/child.pid"));
    let child: i32 = wait_for(WAIT, "child pid", || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    });
    assert!(alive(child));
    let (status, body) = agent.request("POST", &format!("/v1/allocation/{alloc}/stop"), None);
    assert_eq!(status, 200, "{body}");
    wait_for(WAIT, "task dead", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    let events = agent.events(&alloc, "t");
    let tail: Vec<(String, String)> = events[events.len() - 3..].to_vec();
    assert_eq!(
        tail,
        [
            (
                "Killing".to_string(),
                "Sent interrupt. Waiting 1s before force killing".to_string()
            ),
            (
                "Terminated".to_string(),
                "Exit Code: 137, Signal: 9".to_string()
            ),
            ("Killed".to_string(), "Task successfully killed".to_string()),
        ]
    );
    wait_for(WAIT, "child gone", || (!alive(child)).then_some(()));
    assert!(pids_with(&m).is_empty());
    assert_eq!(agent.task_state(&alloc, "t")["Failed"], false);
    assert_eq!(
        agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"],
        "complete"
    );
}

#[test]
fn logs_rotate_and_are_served() {
    let dir = TempDir::new("logs");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(
        r#"
job "chatty" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      logs { max_files = 2  max_file_size = 1 }
      config { command = "/bin/sh"  args = ["-c", "yes nodeward | head -c 3500000; echo done >&2"] }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "batch task complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
    let logs = agent.data_dir.join(format!("alloc/{alloc}/alloc/logs"));
    // The keeper drains the pipes after it reported the exit: wait for the whole stream.
    wait_eq(
        WAIT,
        "the last file of stdout complete",
        || std::fs::metadata(logs.join("t.stdout.3")).map_or(0, |m| m.len()),
        3_500_000 - 3 * 1024 * 1024,
    );
    let mut names: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t.stdout."))
        .collect();
    names.sort();
    // 3.5 MB over 1 MiB files is four files (0..=3); the newest two are kept.
    assert_eq!(names, ["t.stdout.2", "t.stdout.3"]);
    assert_eq!(
        std::fs::metadata(logs.join("t.stdout.2")).unwrap().len(),
        1024 * 1024
    );
    let err = wait_log(&agent, &alloc, "t", "stderr", |t| t.ends_with('\n'));
    assert_eq!(err, "done\n");
    let (status, tail) = agent.request(
        "GET",
        &format!("/v1/client/fs/logs/{alloc}?task=t&type=stdout&origin=end&offset=9"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(tail.len(), 9);
    assert!("nodeward\n".repeat(2).contains(&tail), "{tail:?}");
}

fn sleeper(m: &str) -> String {
    format!(
        r#"
job "sleeper" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      config {{ command = "sleep"  args = ["{m}"] }}
    }}
  }}
}}"#
    )
}

/// live-restore.md: SIGTERM ends the agent, never its tasks; the next agent re-attaches.
#[test]
fn sigterm_leaves_tasks_running_and_the_next_agent_reattaches() {
    let dir = TempDir::new("sigterm");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let job = agent.run_hcl(&sleeper(&m));
    let alloc = agent.alloc_id(&job);
    let pid = wait_for(WAIT, "sleep running", || pids_with(&m).first().copied());
    wait_for(WAIT, "task running", || {
        (agent.task_state(&alloc, "t")["State"] == "running").then_some(())
    });
    let before = agent.task_state(&alloc, "t");
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(20)),
        Some(0)
    );
    assert_eq!(pids_with(&m), vec![pid], "the task stopped with the agent");
    agent.restart();
    assert_eq!(agent.alloc_id(&job), alloc);
    let after = agent.task_state(&alloc, "t");
    assert_eq!(after["State"], "running");
    assert_eq!(after["PID"], pid);
    assert_eq!(after["Restarts"], 0);
    assert_eq!(after["StartedAt"], before["StartedAt"]);
    assert_eq!(after["Events"], before["Events"], "no new event");
    assert_eq!(pids_with(&m), vec![pid]);
}

#[test]
fn sigkill_of_the_agent_never_leaves_a_task_running_twice() {
    let dir = TempDir::new("sigkill");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let job = agent.run_hcl(&sleeper(&m));
    let alloc = agent.alloc_id(&job);
    // Killed at once: the state file may not hold the task's start yet; the keeper does.
    let first = wait_for(WAIT, "sleep running", || pids_with(&m).first().copied());
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(alive(first), "the task process lives on without its agent");
    agent.restart();
    wait_for(WAIT, "task running", || {
        (agent.task_state(&alloc, "t")["State"] == "running").then_some(())
    });
    assert_eq!(agent.task_state(&alloc, "t")["PID"], first);
    assert_eq!(pids_with(&m), vec![first]);
    assert_eq!(agent.alloc_id(&job), alloc);
}

/// A task that ignores its kill signal, so it outlives a stop by its `kill_timeout`.
fn stubborn(m: &str) -> String {
    format!(
        r#"
job "stubborn" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "60s"
      config {{ command = "sh"  args = ["-c", "trap '' INT; exec sleep {m}"] }}
    }}
  }}
}}"#
    )
}

/// A purge forgets the allocation at once, while its task may still be stopping; if the agent dies
/// then, the restarted agent must still find and stop that task (found by the crash storm).
#[test]
fn task_of_a_job_purged_just_before_a_crash_is_stopped_on_restart() {
    let dir = TempDir::new("purge");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let job = agent.run_hcl(&stubborn(&m));
    // Once it is `sleep`, not the shell: a shell that has not set its trap yet dies of the stop.
    let pid = wait_for(WAIT, "task running, its trap set", || {
        pids_with(&m).into_iter().find(|&p| is_sleep(p))
    });
    let (status, body) = agent.request("DELETE", &format!("/v1/job/{job}?purge=true"), None);
    assert_eq!(status, 200, "{body}");
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(
        alive(pid),
        "the task should still wait for its kill_timeout"
    );
    agent.restart();
    wait_for(WAIT, "the purged job's task stopped", || {
        pids_with(&m).is_empty().then_some(())
    });
    assert_eq!(agent.get("/v1/jobs"), json!([]));
}

#[test]
fn bad_input_gets_a_reason_and_changes_nothing() {
    let dir = TempDir::new("bad");
    let agent = TestAgent::start_in(dir.path(), "");
    let parse = |hcl: &str| {
        agent.request(
            "POST",
            "/v1/jobs/parse",
            Some(&json!({ "JobHCL": hcl }).to_string()),
        )
    };
    let (s, body) = parse("job \"x\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      bogus = 1\n      config { command = \"true\" }\n    }\n  }\n}\n");
    assert_eq!(s, 400);
    assert!(body.contains("bogus") && body.contains("line 5"), "{body}");
    let (s, body) = parse("job \"x\" {");
    assert_eq!(s, 400, "{body}");
    let (s, body) = parse("job \"../x\" { group \"g\" { task \"t\" { driver = \"raw_exec\"\n config { command = \"true\" } } } }");
    assert_eq!(s, 400);
    assert!(body.contains("../x"), "{body}");
    let (s, body) = parse("job \"x\" { group \"g\" { task \"t\" { driver = \"raw_exec\"\n kill_timeout = \"-5s\"\n config { command = \"true\" } } } }");
    assert_eq!(s, 400);
    assert!(body.contains("-5s"), "{body}");
    let (s, _) = agent.request("PUT", "/v1/jobs", Some("{\"Job\": "));
    assert_eq!(s, 400);
    let (s, body) = agent.request(
        "PUT",
        "/v1/jobs",
        Some(&json!({"Job": {"ID": "", "TaskGroups": []}}).to_string()),
    );
    assert_eq!(s, 400, "{body}");
    let big = format!("{{\"Job\": \"{}\"}}", "x".repeat(2 * 1024 * 1024));
    let (s, _) = agent.request("PUT", "/v1/jobs", Some(&big));
    assert_eq!(s, 413);
    let (s, _) = agent.request("GET", "/v1/allocation/nope", None);
    assert_eq!(s, 404);
    assert_eq!(agent.get("/v1/jobs"), json!([]));
    assert_eq!(agent.get("/v1/allocations"), json!([]));
}

#[test]
fn user_restart_is_immediate_and_not_counted() {
    let dir = TempDir::new("restart");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let job = agent.run_hcl(&sleeper(&m));
    let alloc = agent.alloc_id(&job);
    let first = wait_for(WAIT, "sleep running", || pids_with(&m).first().copied());
    let (s, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/restart"),
        Some(r#"{"TaskName": "t"}"#),
    );
    assert_eq!(s, 200, "{body}");
    let second = wait_for(WAIT, "restarted", || {
        pids_with(&m).into_iter().find(|p| *p != first)
    });
    assert!(!alive(first));
    assert!(alive(second));
    // The new process runs before its runner has heard from the keeper that it started.
    let events = wait_for(WAIT, "the restart's Started event", || {
        let events = agent.events(&alloc, "t");
        (events.iter().filter(|(t, _)| t == "Started").count() == 2).then_some(events)
    });
    let n = events.len();
    assert_eq!(events[n - 4].0, "Restart Signaled");
    assert_eq!(events[n - 4].1, "Task signaled to restart");
    assert_eq!(events[n - 3].0, "Terminated");
    assert_eq!(
        events[n - 2],
        ("Restarting".into(), "Task restarting in 0s".into())
    );
    assert_eq!(events[n - 1].0, "Started");
    let state = agent.task_state(&alloc, "t");
    assert_eq!(state["Restarts"], 1);
    assert_eq!(state["Failed"], false);
}

#[test]
fn missing_command_is_a_driver_failure() {
    let dir = TempDir::new("nocmd");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(
        r#"
job "nocmd" {
  group "g" {
    restart { attempts = 0  mode = "fail" }
    task "t" {
      driver = "raw_exec"
      config { command = "nodeward-no-such-command" }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "task dead", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    let events = agent.events(&alloc, "t");
    assert!(events.contains(&(
        "Driver Failure".to_string(),
        "Failed to start task: exec: \"nodeward-no-such-command\": executable file not found in $PATH".to_string()
    )), "{events:#?}");
    assert_eq!(events.last().unwrap().1, "Policy allows no restarts");
}

#[test]
fn environment_and_interpolation() {
    let dir = TempDir::new("env");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(
        r#"
job "envy" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      env { GREETING = "hello ${NOMAD_TASK_NAME}" }
      config {
        command = "/bin/sh"
        args = ["-c", "echo $GREETING; echo '${NOMAD_JOB_NAME}/${node.unique.name}/${unknown.thing}'; pwd; echo $NOMAD_TASK_DIR; ps -o pgid= -p $$; echo $$; echo tunables=$${GLIBC_TUNABLES:-none}/$${NODEWARD_ORIGINAL_GLIBC_TUNABLES:-none}"]
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "done", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 7);
    let lines: Vec<&str> = out.lines().collect();
    let task_dir = agent.data_dir.join(format!("alloc/{alloc}/t"));
    assert_eq!(lines[0], "hello t");
    assert_eq!(lines[1], "envy/test-node/${unknown.thing}");
    assert_eq!(lines[2], task_dir.display().to_string());
    assert_eq!(lines[3], task_dir.join("local").display().to_string());
    // The task leads a process group of its own.
    assert_eq!(lines[4].trim(), lines[5].trim());
    // The agent's own malloc tuning is not passed on to tasks.
    assert_eq!(lines[6], "tunables=none/none");
    for d in ["local", "secrets"] {
        assert!(task_dir.join(d).is_dir());
    }
    assert!(agent
        .data_dir
        .join(format!("alloc/{alloc}/alloc/logs"))
        .is_dir());
}
