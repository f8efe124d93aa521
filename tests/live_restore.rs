//! Live restore (live-restore.md): tasks outlive the agent, whatever happens to it, and the next
//! agent re-attaches to them. Real agent processes killed with SIGKILL, a real keeper, real tasks.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn marker() -> String {
    unique_marker(300_000)
}

fn job(name: &str, restart: &str, task_extra: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    {restart}
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      {task_extra}
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}
  }}
}}"#
    )
}

fn wait_running(agent: &TestAgent, alloc: &str) -> Value {
    wait_for(WAIT, "task running with a PID", || {
        let s = agent.task_state(alloc, "t");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    })
}

/// Live `sleep <m>` processes (not the shells whose command lines name them).
fn sleepers(m: &str) -> Vec<i32> {
    pids_with(m)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).next() == Some(b"sleep"))
        })
        .collect()
}

/// Waits until the state file records the run `pid` (the flusher writes within a second): a
/// test that compares what the next agent shows with what this one showed needs it there.
fn wait_persisted(agent: &TestAgent, pid: i32) {
    wait_for(WAIT, "the state file to record the run", || {
        state_on_disk(&agent.data_dir)?
            .to_string()
            .contains(&format!("\"PID\":{pid}"))
            .then_some(())
    });
}

fn event_types(state: &Value) -> Vec<String> {
    state["Events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Type"].as_str().unwrap().to_string())
        .collect()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// kill -9 of the agent, ten times in a row: the task is never touched.
#[test]
fn ten_agent_kills_in_a_row_leave_the_task_untouched() {
    let dir = TempDir::new("lr-ten");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let pidfile = dir.path().join("pids");
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "ten",
        "",
        "",
        &format!("echo $$ >> {} && exec sleep {m}", pidfile.display()),
    )));
    let first = wait_running(&agent, &alloc);
    let pid = first["PID"].as_i64().unwrap() as i32;
    wait_persisted(&agent, pid);
    for round in 0..10 {
        agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
        assert!(alive(pid), "round {round}: the task died with the agent");
        agent.restart();
        let s = wait_running(&agent, &alloc);
        assert_eq!(s["PID"], pid, "round {round}: {s}");
        assert_eq!(s["Restarts"], 0, "round {round}: {s}");
        assert_eq!(s["StartedAt"], first["StartedAt"], "round {round}");
    }
    assert_eq!(lines(&pidfile), vec![pid.to_string()], "the task ran again");
    assert_eq!(pids_with(&m), vec![pid]);
    let s = agent.task_state(&alloc, "t");
    assert_eq!(event_types(&s), ["Received", "Task Setup", "Started"]);
}

/// kill -9 of the agent at random instants under a task that crashes every second with a 3 s
/// restart delay: the restart count never goes back and keeps progressing; never two runs.
#[test]
fn agent_kills_at_random_instants_never_reset_the_restart_count() {
    let dir = TempDir::new("lr-loop");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "loop",
        r#"restart { attempts = 1000  interval = "1h"  delay = "3s"  mode = "delay" }"#,
        "",
        &format!("sleep {m} & sleep 1; kill $!; exit 99"),
    )));
    let mut seen = 0;
    for round in 0..10 {
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..2500)));
        agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
        assert!(sleepers(&m).len() <= 1, "round {round}: two runs at once");
        agent.restart();
        let restarts = agent.task_state(&alloc, "t")["Restarts"].as_u64().unwrap();
        assert!(
            restarts >= seen,
            "round {round}: restarts went back from {seen} to {restarts}"
        );
        seen = restarts;
    }
    let target = seen + 2;
    wait_for(WAIT, "two more restarts", || {
        let s = agent.task_state(&alloc, "t");
        (s["Restarts"].as_u64().unwrap() >= target).then_some(())
    });
    let s = agent.task_state(&alloc, "t");
    assert!(s["Restarts"].as_u64().unwrap() >= 3, "{s}");
    let events = agent.events(&alloc, "t");
    assert!(
        events
            .iter()
            .any(|(t, m)| t == "Terminated" && m == "Exit Code: 99"),
        "{events:#?}"
    );
}

/// A task that writes a numbered line every 10 ms: with the agent killed and gone for 2 s, every
/// number is in the log files once, in order, across a rotation.
#[test]
fn logs_lose_and_double_nothing_while_the_agent_is_away() {
    let dir = TempDir::new("lr-logs");
    let mut agent = TestAgent::start_in(dir.path(), "");
    const N: u32 = 500;
    // 4 KiB lines: 500 of them cross the 1 MB rotation once.
    let script = format!(
        "pad=$(head -c 4090 /dev/zero | tr '\\0' x); i=0; while [ $i -lt {N} ]; do i=$((i+1)); \
         printf '%05d %s\\n' $i $pad; sleep 0.01; done; exec sleep 3600"
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "logs",
        "",
        "logs { max_files = 10  max_file_size = 1 }",
        &script,
    )));
    wait_running(&agent, &alloc);
    let logs = agent.data_dir.join(format!("alloc/{alloc}/alloc/logs"));
    let read_all = || -> Vec<u32> {
        let mut files: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let i = name.strip_prefix("t.stdout.")?.parse().ok()?;
                Some((i, e.path()))
            })
            .collect();
        files.sort();
        // One stream: rotation splits it at a size, not at a line.
        let text: String = files
            .iter()
            .map(|(_, p)| std::fs::read_to_string(p).unwrap_or_default())
            .collect();
        text.lines()
            .filter(|l| l.len() == 4096)
            .map(|l| l[..5].parse().unwrap())
            .collect()
    };
    wait_for(WAIT, "the first lines", || {
        (read_all().len() > 20).then_some(())
    });
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(2));
    agent.restart();
    let got = wait_for(Duration::from_secs(120), "every line", || {
        let got = read_all();
        (got.len() >= N as usize).then_some(got)
    });
    assert_eq!(got, (1..=N).collect::<Vec<_>>());
    let files = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("t.stdout."))
        .count();
    assert!(files >= 2, "no rotation happened: {files} file");
    // The API serves the same stream.
    let (status, body) = agent.request(
        "GET",
        &format!("/v1/client/fs/logs/{alloc}?task=t&type=stdout&plain=true&origin=end&offset=4097"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(&format!("{N:05} ")), "{}", &body[..20]);
}

/// A task that exits 7 while the agent is away is reported with its real code and exit time,
/// then goes through its restart policy.
#[test]
fn a_task_that_exits_while_the_agent_is_away_is_reported_as_it_ended() {
    let dir = TempDir::new("lr-exit");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let go = dir.path().join("go");
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "exit7",
        r#"restart { attempts = 0  mode = "fail" }"#,
        "",
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exit 7",
            go.display()
        ),
    )));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    wait_persisted(&agent, pid);
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    let before = chrono::Utc::now().timestamp_nanos_opt().unwrap();
    std::fs::write(&go, "").unwrap();
    // Reaped, not only dead: a zombie is dead to `alive`, and the keeper stamps the exit when it
    // reaps, which a busy machine may put off. After the reap the stamp is a moment away.
    wait_for(WAIT, "the keeper to reap the task", || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    let restarted = chrono::Utc::now().timestamp_nanos_opt().unwrap();
    agent.restart();
    let s = wait_for(WAIT, "task dead", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "dead").then_some(s)
    });
    let events = s["Events"].as_array().unwrap();
    let types = event_types(&s);
    assert_eq!(
        types,
        [
            "Received",
            "Task Setup",
            "Started",
            "Terminated",
            "Not Restarting"
        ]
    );
    let terminated = &events[3];
    assert_eq!(terminated["DisplayMessage"], "Exit Code: 7");
    assert_eq!(terminated["ExitCode"], 7);
    let at = terminated["Time"].as_i64().unwrap();
    // Stamped by the keeper while no agent ran: after the go file, before the new agent started
    // (a time taken at re-attach would be after `restarted`).
    assert!(
        before <= at && at < restarted,
        "exit time {at} not between {before} and {restarted}"
    );
    assert_eq!(s["Failed"], true);
}

/// The keeper killed with SIGKILL takes its task (and what the task started) with it; the agent
/// reports the failure and runs the task again under a new keeper. Nothing is left unsupervised.
#[test]
fn a_killed_keeper_takes_its_tasks_down_and_the_agent_reports_it() {
    let dir = TempDir::new("lr-keeper");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "keeper",
        r#"restart { attempts = 3  interval = "1h"  delay = "100ms"  mode = "fail" }"#,
        "",
        &format!("sleep {m} & wait"),
    )));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    let child = wait_for(WAIT, "the task's child", || pids_with(&m).first().copied());
    let keeper = agent.keeper_pid().expect("a keeper runs");
    // The OOM killer spares the keeper (it would take every task with it), not the tasks.
    let oom = |pid: i32| -> i32 {
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // Tasks get 0 back, whatever the agent's and the keeper's are (docs/resources.md).
    assert_eq!(oom(pid), 0, "the task's OOM score adjustment");
    // Lowering it needs CAP_SYS_RESOURCE, which some containers withhold even from root.
    let can_lower = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("echo -1 > /proc/self/oom_score_adj")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    if can_lower {
        assert_eq!(oom(agent.pid()), -999, "the agent's");
        assert_eq!(oom(keeper), -500, "the keeper's");
    } else {
        println!("SKIPPED the keeper's OOM protection: this process may not lower oom_score_adj (no CAP_SYS_RESOURCE)");
    }
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    wait_for(WAIT, "the task restarted", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "running" && s["Restarts"] == 1 && s["PID"] != pid).then_some(s)
    });
    assert!(!alive(pid), "the task outlived its keeper");
    assert!(!alive(child), "the task's child outlived its keeper");
    let events = agent.events(&alloc, "t");
    assert!(
        events.contains(&(
            "Terminated".to_string(),
            "Exit Code: -1, Exit Message: \"the task's keeper process died\"".to_string()
        )),
        "{events:#?}"
    );
    // The new run's shell and its child.
    let now = pids_with(&m);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(!now.contains(&pid) && !now.contains(&child));
    let new_keeper = agent.keeper_pid().expect("a new keeper");
    assert_ne!(new_keeper, keeper);
}

/// A task whose process is gone when the agent comes back (the machine rebooted; here its keeper
/// was killed while no agent watched) is reported lost, counted as a failure.
#[test]
fn a_task_lost_while_the_agent_was_away_is_a_counted_failure() {
    let dir = TempDir::new("lr-lost");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "lost",
        r#"restart { attempts = 0  mode = "fail" }"#,
        "",
        "exec sleep 3600",
    )));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    // Its start reached the state file: a run the file never recorded cannot be missed.
    wait_persisted(&agent, pid);
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    let keeper = keeper_pid(&agent.data_dir).unwrap();
    unsafe { libc::kill(keeper, libc::SIGKILL) };
    wait_for(WAIT, "the task gone", || (!alive(pid)).then_some(()));
    agent.restart();
    let s = wait_for(WAIT, "task dead", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "dead").then_some(s)
    });
    let events = agent.events(&alloc, "t");
    assert_eq!(
        events[3],
        (
            "Terminated".to_string(),
            "Exit Code: -1, Exit Message: \"task process was lost while the agent was not running\""
                .to_string()
        ),
        "{events:#?}"
    );
    assert_eq!(events[4].0, "Not Restarting");
    assert_eq!(s["Failed"], true);
}

/// A restart delay in progress when the agent dies continues to its recorded deadline: not
/// started over, not skipped.
#[test]
fn a_restart_delay_continues_to_its_deadline_across_an_agent_restart() {
    let dir = TempDir::new("lr-delay");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let pidfile = dir.path().join("pids");
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "delay",
        r#"restart { attempts = 5  interval = "1h"  delay = "6s"  mode = "fail" }"#,
        "",
        &format!(
            "echo $$ >> {p}; [ $(wc -l < {p}) -ge 2 ] && exec sleep 3600; exit 1",
            p = pidfile.display()
        ),
    )));
    let restart_at = wait_for(WAIT, "the restart delay recorded", || {
        let v = state_on_disk(&agent.data_dir)?;
        v["Allocations"][0]["TaskStates"]["t"]["RestartAt"].as_i64()
    });
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(1));
    agent.restart();
    let s = wait_running(&agent, &alloc);
    assert_eq!(s["Restarts"], 1);
    // Running comes with the PID, before the shell has written it.
    wait_for(WAIT, "the second run's PID in the file", || {
        (lines(&pidfile).len() >= 2).then_some(())
    });
    assert_eq!(lines(&pidfile).len(), 2, "one restart, not two");
    let events = s["Events"].as_array().unwrap();
    let started = events
        .iter()
        .rev()
        .find(|e| e["Type"] == "Started")
        .unwrap()["Time"]
        .as_i64()
        .unwrap();
    assert!(
        started >= restart_at,
        "started at {started}, before its deadline {restart_at}"
    );
    // Started over, it would begin a whole delay after the new agent: 6 s past the deadline.
    assert!(
        started < restart_at + 6_000_000_000,
        "the delay started over: {} ms past the deadline",
        (started - restart_at) / 1_000_000
    );
    let restarting = events.iter().filter(|e| e["Type"] == "Restarting").count();
    assert_eq!(restarting, 1, "{events:#?}");
}

/// `agent -dev` is throw-away: SIGTERM stops its tasks and removes its data directory.
#[test]
fn dev_mode_stops_its_tasks_and_removes_its_data_on_sigterm() {
    let dir = TempDir::new("lr-dev");
    let config = dir.path().join("ports.hcl");
    std::fs::write(&config, "ports { http = 0 }\n").unwrap();
    let mut agent = TestAgent::launch(dir.path(), dir.path().join("unused"), config, &["-dev"]);
    let data_dir = wait_for(WAIT, "the dev data directory in the log", || {
        let log = agent.log_text();
        let at = log.find("dev mode: data in ")?;
        let rest = &log[at + "dev mode: data in ".len()..];
        Some(std::path::PathBuf::from(rest.lines().next()?.trim()))
    });
    agent.data_dir = data_dir.clone();
    let m = marker();
    let alloc = agent.alloc_id(&agent.run_hcl(&job("dev", "", "", &format!("exec sleep {m}"))));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    let keeper = agent.keeper_pid().unwrap();
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    assert!(!alive(pid), "a -dev agent left its task running");
    assert!(!data_dir.exists(), "{} is still there", data_dir.display());
    wait_for(WAIT, "the keeper to end", || (!alive(keeper)).then_some(()));
}

/// `client { stop_tasks_on_shutdown = true }`: SIGTERM stops every task; the next agent starts
/// them again.
#[test]
fn stop_tasks_on_shutdown_stops_them_and_the_next_agent_starts_them() {
    let dir = TempDir::new("lr-stop");
    let mut agent = TestAgent::start_in(dir.path(), "client { stop_tasks_on_shutdown = true }");
    let m = marker();
    let alloc = agent.alloc_id(&agent.run_hcl(&job("stop", "", "", &format!("exec sleep {m}"))));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    assert!(!alive(pid), "the task outlived the agent");
    agent.restart();
    let s = wait_running(&agent, &alloc);
    assert_ne!(s["PID"], pid);
    assert_eq!(pids_with(&m).len(), 1);
}

/// A CSI plugin task across an agent kill -9: still registered and healthy, not restarted, no
/// new `Started` or `Plugin became healthy`.
#[test]
fn a_csi_plugin_task_keeps_serving_across_an_agent_kill() {
    const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");
    let dir = TempDir::new("lr-csi");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(&format!(
        r#"
job "csi" {{
  group "g" {{
    restart {{ attempts = 0  mode = "fail" }}
    task "plugin" {{
      driver = "raw_exec"
      config {{ command = "{PLUGIN}"  args = ["--mode", "healthy", "--endpoint", "${{CSI_ENDPOINT}}"] }}
      csi_plugin {{ id = "hostpath"  type = "monolith"  health_timeout = "30s" }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let healthy = |agent: &TestAgent| {
        let n = agent.get(&format!("/v1/node/{node_id}"));
        n["CSINodePlugins"]["hostpath"]["Healthy"] == true
    };
    wait_for(WAIT, "healthy and registered", || {
        (healthy(&agent)
            && agent
                .events(&alloc, "plugin")
                .iter()
                .any(|(t, _)| t == "Plugin became healthy"))
        .then_some(())
    });
    let before = agent.task_state(&alloc, "plugin");
    // The registration reached the state file.
    wait_for(WAIT, "the state file", || {
        state_on_disk(&agent.data_dir)?
            .to_string()
            .contains("\"Healthy\":true")
            .then_some(())
    });
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    assert!(healthy(&agent), "not registered right after the restart");
    // The new agent's supervisor probes at once (its log says so), then the two are compared.
    wait_for(WAIT, "probed by the new agent", || {
        agent
            .log_text()
            .contains("re-attached: healthy")
            .then_some(())
    });
    assert!(healthy(&agent));
    let after = agent.task_state(&alloc, "plugin");
    assert_eq!(after["State"], "running");
    assert_eq!(after["PID"], before["PID"]);
    assert_eq!(after["Restarts"], 0);
    assert_eq!(after["Events"], before["Events"], "new events: {after}");
}

fn start_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    fields[19].parse().unwrap()
}

/// An agent of this version adopts what a version-1 state file holds: a task that was stopped
/// cleanly starts under the keeper with its history and restart count; a process that a
/// version-1 agent left running (a child of that agent: nothing can read its output now) is
/// stopped and started again under the keeper. The file is written back as the current version, and the
/// next agent re-attaches to both.
#[test]
fn a_version_1_state_file_is_adopted() {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("lr-v1");
    let mut agent = TestAgent::start_in(dir.path(), "client { stop_tasks_on_shutdown = true }");
    let (m1, m2) = (marker(), marker());
    let pend = agent.alloc_id(&agent.run_hcl(&job("pend", "", "", &format!("exec sleep {m1}"))));
    let left = agent.alloc_id(&agent.run_hcl(&job("left", "", "", &format!("exec sleep {m2}"))));
    wait_running(&agent, &pend);
    wait_running(&agent, &left);
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    assert!(pids_with(&m1).is_empty() && pids_with(&m2).is_empty());

    // What a version-1 agent would have written: no handles, no restart window; one task stopped
    // cleanly with 3 restarts behind it, one left running by an agent that crashed.
    let mut leftover = std::process::Command::new("sleep")
        .arg(&m2)
        .env_clear()
        .env("NOMAD_ALLOC_ID", &left)
        .env("NOMAD_TASK_NAME", "t")
        .process_group(0)
        .spawn()
        .unwrap();
    let old = leftover.id() as i32;
    let path = agent.data_dir.join("state.json");
    // A clean stop leaves the snapshot alone, with no journal.
    assert!(!agent.data_dir.join("state.journal").exists());
    let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(state["Version"], nodeward::state::STATE_VERSION);
    state["Version"] = 1.into();
    for a in state["Allocations"].as_array_mut().unwrap() {
        let id = a["ID"].as_str().unwrap().to_string();
        let t = a["TaskStates"]["t"].as_object_mut().unwrap();
        for k in [
            "Handle",
            "RestartAt",
            "RestartWindowStart",
            "RestartWindowCount",
        ] {
            t.remove(k);
        }
        if id == pend {
            t.insert("Restarts".into(), 3.into());
        } else {
            t.insert("State".into(), "running".into());
            t.insert("PID".into(), old.into());
            t.insert("PidStartTicks".into(), start_ticks(old).into());
        }
    }
    std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    let events_before = agent.task_state_from_file(&pend);
    let config = std::fs::read_to_string(&agent.config).unwrap();
    std::fs::write(
        &agent.config,
        config.replace("client { stop_tasks_on_shutdown = true }", ""),
    )
    .unwrap();

    agent.restart();
    let p = wait_running(&agent, &pend);
    assert_eq!(p["Restarts"], 3);
    let events = p["Events"].as_array().unwrap();
    assert_eq!(
        &events[..events_before.len()],
        &events_before[..],
        "the history was kept"
    );
    let st = leftover.wait().unwrap();
    assert!(!st.success(), "the version-1 leftover was stopped: {st:?}");
    let l = wait_for(WAIT, "the left task running under the keeper", || {
        let s = agent.task_state(&left, "t");
        (s["State"] == "running" && s["PID"].is_i64() && s["PID"] != old).then_some(s)
    });
    assert_eq!(pids_with(&m2), vec![l["PID"].as_i64().unwrap() as i32]);
    wait_for(
        WAIT,
        "the state file written as the current version",
        || {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
            let kept = state_on_disk(&agent.data_dir)?
                .to_string()
                .contains("\"Kind\":\"Kept\"");
            (v["Version"] == nodeward::state::STATE_VERSION && kept).then_some(())
        },
    );

    // Adopted for good: the next agent re-attaches to both.
    let (p1, p2) = (p["PID"].clone(), l["PID"].clone());
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    assert_eq!(wait_running(&agent, &pend)["PID"], p1);
    assert_eq!(wait_running(&agent, &left)["PID"], p2);
}

/// A full disk found at start changes no task: the agent exits 1 before it adopts or starts
/// anything, and the next agent, with room again, re-attaches to the same process.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_full_disk_at_start_changes_no_task() {
    require_root();
    let dir = TempDir::new("lr-full");
    let data = dir.path().join("data");
    let _tmpfs = Tmpfs::mount(&data, "4m");
    let mut agent = TestAgent::start_in(dir.path(), FULL_DISK_CONFIG);
    let (m, m2) = (marker(), marker());
    let alloc = agent.alloc_id(&agent.run_hcl(&job("full", "", "", &format!("exec sleep {m}"))));
    let other = agent.alloc_id(&agent.run_hcl(&job("other", "", "", &format!("exec sleep {m2}"))));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    let pid2 = wait_running(&agent, &other)["PID"].as_i64().unwrap() as i32;
    wait_persisted(&agent, pid);
    wait_persisted(&agent, pid2);
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    // The second task waits to be started: a start-up that went ahead would start it.
    unsafe { libc::kill(pid2, libc::SIGKILL) };
    wait_for(WAIT, "the second task gone", || {
        (!alive(pid2)).then_some(())
    });
    let mut state = state_on_disk(&data).unwrap();
    for a in state["Allocations"].as_array_mut().unwrap() {
        if a["ID"] == other.as_str() {
            a["TaskStates"]["t"] = serde_json::json!({"State": "pending", "Failed": false,
                "Restarts": 0, "Events": []});
        }
    }
    write_state(&data, &state);
    let filler = fill_disk(&data);
    let state_before = std::fs::read(data.join("state.json")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["agent", "-config"])
        .arg(&agent.config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write state file"), "{stderr}");
    assert_eq!(pids_with(&m), vec![pid], "a task was touched");
    assert!(pids_with(&m2).is_empty(), "a task was started");
    assert_eq!(
        std::fs::read(data.join("state.json")).unwrap(),
        state_before
    );
    assert!(
        !data.join("state.journal").exists(),
        "a journal was started"
    );
    std::fs::remove_file(&filler).unwrap();
    agent.restart();
    assert_eq!(wait_running(&agent, &alloc)["PID"], pid);
    assert_eq!(pids_with(&m), vec![pid]);
    wait_running(&agent, &other);
    assert_eq!(pids_with(&m2).len(), 1);
}

/// A keeper whose socket is gone (its data directory was removed while no agent ran) can never
/// be reached again: it stops its tasks and ends instead of holding them forever.
#[test]
fn a_keeper_no_agent_can_reach_stops_its_tasks_and_ends() {
    let dir = TempDir::new("lr-gone");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = marker();
    let alloc = agent.alloc_id(&agent.run_hcl(&job("gone", "", "", &format!("exec sleep {m}"))));
    let pid = wait_running(&agent, &alloc)["PID"].as_i64().unwrap() as i32;
    let keeper = agent.keeper_pid().unwrap();
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    assert!(alive(pid));
    std::fs::remove_file(agent.data_dir.join("keeper.sock")).unwrap();
    wait_for(WAIT, "the keeper to end", || (!alive(keeper)).then_some(()));
    assert!(!alive(pid), "the unreachable keeper left its task running");
}
