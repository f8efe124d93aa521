//! `kill_timeout` has an upper bound, `client { max_kill_timeout }` (Nomad's key), and no wait
//! at start-up outlasts a stop signal. Real agents, a real keeper, tasks that ignore SIGTERM.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn marker() -> String {
    unique_marker(600_000)
}

/// A task that ignores SIGTERM (its kill signal) and asks for an hour to stop.
fn stubborn(name: &str, m: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "1h"
      config {{
        command = "/bin/sh"
        args = ["-c", "trap '' TERM; exec sleep {m}"]
      }}
    }}
  }}
}}"#
    )
}

fn running_pid(agent: &TestAgent, alloc: &str) -> i32 {
    wait_for(WAIT, "the task running", || {
        let s = agent.task_state(alloc, "t");
        (s["State"] == "running")
            .then(|| s["PID"].as_i64())
            .flatten()
    }) as i32
}

/// The PID of a [`stubborn`] task once it ignores SIGTERM: the shell runs as soon as the task is
/// `running` and a SIGTERM before its `trap` would kill it at once.
fn trapped_pid(agent: &TestAgent, alloc: &str) -> i32 {
    let pid = running_pid(agent, alloc);
    wait_for(WAIT, "the task's trap set (it runs sleep)", || {
        is_sleep(pid).then_some(pid)
    })
}

/// A job stop waits `max_kill_timeout` (2s here), not the task's hour, then SIGKILLs it; the
/// `Killing` event says what is really waited. The job keeps the `kill_timeout` it was given.
#[test]
fn a_kill_timeout_is_cut_to_max_kill_timeout() {
    let dir = TempDir::new("kt-cap");
    let agent = TestAgent::start_in(dir.path(), "client { max_kill_timeout = \"2s\" }");
    let m = marker();
    agent.run_hcl(&stubborn("cap", &m));
    let alloc = agent.alloc_id("cap");
    let pid = trapped_pid(&agent, &alloc);
    let (status, body) = agent.request("DELETE", "/v1/job/cap", None);
    assert_eq!(status, 200, "{body}");
    wait_for(WAIT, "the task killed", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    assert!(!alive(pid));
    let events = agent.events(&alloc, "t");
    let tail: Vec<(&str, &str)> = events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|(t, d)| (t.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        tail,
        [
            ("Killing", "Sent interrupt. Waiting 2s before force killing"),
            ("Terminated", "Exit Code: 137, Signal: 9"),
            ("Killed", "Task successfully killed"),
        ]
    );
    let job = agent.get("/v1/job/cap");
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["KillTimeout"],
        3_600_000_000_000i64
    );
}

/// An agent started by hand whose stderr is read line by line; killed if the test fails.
struct Starting {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Starting {
    fn launch(config: &std::path::Path) -> Starting {
        let mut child = Command::new(BIN)
            .args(["agent", "-config"])
            .arg(config)
            .env("RUST_LOG", "nodeward=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Starting { child, lines }
    }

    /// Waits for a log line containing `needle`; returns the lines up to it.
    fn wait_line(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => {
                    seen.push(line);
                    return seen;
                }
                Ok(line) => seen.push(line),
                Err(_) => panic!("no log line with {needle:?}; the log:\n{}", seen.join("\n")),
            }
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An agent that starts after a crash finds a task of a stopped allocation still running (it
/// ignores SIGTERM and asked for an hour) and stops it before anything else; a SIGTERM in the
/// middle of that ends the start-up at once (exit 0, nothing started, the task left to the next
/// agent) instead of after the hour. The next agent, with `max_kill_timeout = "2s"`, stops the
/// task within its start-up.
#[test]
fn a_stop_signal_ends_the_start_up_sweep_at_once() {
    let dir = TempDir::new("kt-sweep");
    let mut agent = TestAgent::start_in(dir.path(), "client { max_kill_timeout = \"2h\" }");
    let m = marker();
    agent.run_hcl(&stubborn("sweep", &m));
    let alloc = agent.alloc_id("sweep");
    let pid = trapped_pid(&agent, &alloc);
    // The stop is on disk before the task gets its signal; the agent then waits out the hour.
    let (status, body) = agent.request("DELETE", "/v1/job/sweep", None);
    assert_eq!(status, 200, "{body}");
    wait_for(WAIT, "the Killing event", || {
        agent
            .events(&alloc, "t")
            .iter()
            .any(|(t, _)| t == "Killing")
            .then_some(())
    });
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(alive(pid));

    let starting = Starting::launch(&agent.config);
    starting.wait_line(&format!(
        "stopping process {pid} of task t in alloc {alloc}: the allocation no longer runs here"
    ));
    let signalled = Instant::now();
    let mut starting = starting;
    unsafe { libc::kill(starting.child.id() as i32, libc::SIGTERM) };
    let status = wait_for(Duration::from_secs(60), "the agent to exit", || {
        starting.child.try_wait().unwrap()
    });
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(
        took < Duration::from_secs(20),
        "the agent took {took:?} to stop during its start-up sweep"
    );
    // Read to the end of its log, not only what the reader thread had taken so far.
    starting.wait_line("start-up cancelled");
    assert!(alive(pid), "the task is the next agent's to stop");

    let config = std::fs::read_to_string(&agent.config).unwrap();
    std::fs::write(&agent.config, config.replace("\"2h\"", "\"2s\"")).unwrap();
    agent.restart();
    assert!(!alive(pid), "the next agent's start-up stopped the task");
    // Recorded as its runner would have: no runner takes over a stopped allocation.
    let state = agent.task_state(&alloc, "t");
    assert_eq!(state["State"], "dead", "{state}");
    assert!(state["PID"].is_null(), "{state}");
    let events = agent.events(&alloc, "t");
    let tail: Vec<&str> = events
        .iter()
        .rev()
        .take(2)
        .map(|(_, d)| d.as_str())
        .collect();
    assert_eq!(
        tail,
        ["Task successfully killed", "Exit Code: 137, Signal: 9"],
        "{events:?}"
    );
}
