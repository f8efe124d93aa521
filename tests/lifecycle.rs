//! Task lifecycle (jobspec.md `lifecycle`, `leader`): the order of an allocation's tasks through
//! the real agent, real task processes and an agent killed with SIGKILL. Order is proven by files
//! the tasks write and check, and by the times of their events, never by how long anything took.

use crate::common::*;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// One `raw_exec` task running `script` with `/bin/sh`; `extra` goes into its block.
fn task(name: &str, extra: &str, script: &str) -> String {
    format!(
        r#"
    task "{name}" {{
      driver = "raw_exec"
      kill_timeout = "2s"
      {extra}
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}"#
    )
}

/// A batch job of one group with no restarts, so a task that fails fails for good.
fn batch(name: &str, tasks: &[String]) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  group "g" {{
    restart {{ attempts = 0  mode = "fail" }}
    {}
  }}
}}"#,
        tasks.concat()
    )
}

fn hook(hook: &str, sidecar: bool) -> String {
    format!("lifecycle {{\n        hook = {hook:?}\n        sidecar = {sidecar}\n      }}")
}

fn client_status(agent: &TestAgent, alloc: &str) -> String {
    agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_status(agent: &TestAgent, alloc: &str, want: &str) {
    wait_for(WAIT, &format!("alloc {want}"), || {
        (client_status(agent, alloc) == want).then_some(())
    });
}

/// The time of a task's first event of type `kind`.
fn time_of(agent: &TestAgent, alloc: &str, task: &str, kind: &str) -> i64 {
    let events = agent.event_times(alloc, task);
    events
        .iter()
        .find(|(t, _, _)| t == kind)
        .unwrap_or_else(|| panic!("task {task} has no {kind:?} event: {events:#?}"))
        .2
}

fn types(agent: &TestAgent, alloc: &str, task: &str) -> Vec<String> {
    agent
        .events(alloc, task)
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
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

/// Prestart runs to completion first; main starts only after it, and finds what it wrote; a
/// poststart task starts once main runs (main waits for the file the poststart task writes).
#[test]
fn prestart_completes_before_main_and_poststart_follows_main() {
    let dir = TempDir::new("lc-order");
    let agent = TestAgent::start_in(dir.path(), "");
    let out = dir.path().join("order");
    let o = out.display();
    let job = agent.run_hcl(&batch(
        "order",
        &[
            task(
                "main",
                "",
                &format!(
                    "grep -q init-done {o} || exit 7; echo main-started >> {o}; \
                     while ! grep -q post-done {o}; do sleep 0.05; done; echo main-done >> {o}"
                ),
            ),
            task(
                "init",
                &hook("prestart", false),
                &format!("echo init-started >> {o}; sleep 0.3; echo init-done >> {o}"),
            ),
            task(
                "post",
                &hook("poststart", false),
                // Started once main's process runs, which may be before main's first line:
                // it waits for it rather than assume it (the event times below check the rule).
                &format!(
                    "while ! grep -q main-started {o}; do sleep 0.05; done; echo post-done >> {o}"
                ),
            ),
        ],
    ));
    let alloc = agent.alloc_id(&job);
    wait_status(&agent, &alloc, "complete");
    assert_eq!(
        read(&out).lines().collect::<Vec<_>>(),
        [
            "init-started",
            "init-done",
            "main-started",
            "post-done",
            "main-done"
        ]
    );
    // Main was received only once init had ended: it waited, pending, for its turn.
    let init_end = time_of(&agent, &alloc, "init", "Terminated");
    assert!(time_of(&agent, &alloc, "main", "Received") >= init_end);
    assert!(
        time_of(&agent, &alloc, "post", "Received") >= time_of(&agent, &alloc, "main", "Started")
    );
    for t in ["init", "main", "post"] {
        let s = agent.task_state(&alloc, t);
        assert_eq!(
            (s["State"].as_str(), s["Failed"].as_bool()),
            (Some("dead"), Some(false)),
            "{t}: {s}"
        );
    }
}

/// A prestart task that fails with no restarts left fails the allocation; main never starts.
#[test]
fn a_failing_prestart_fails_the_allocation_and_main_never_starts() {
    let dir = TempDir::new("lc-fail");
    let agent = TestAgent::start_in(dir.path(), "");
    let ran = dir.path().join("main-ran");
    let job = agent.run_hcl(&batch(
        "failing",
        &[
            task("init", &hook("prestart", false), "exit 3"),
            task("main", "", &format!("touch {}", ran.display())),
        ],
    ));
    let alloc = agent.alloc_id(&job);
    wait_status(&agent, &alloc, "failed");
    wait_for(WAIT, "main dead", || {
        (agent.task_state(&alloc, "main")["State"] == "dead").then_some(())
    });
    let init = agent.task_state(&alloc, "init");
    assert_eq!(init["Failed"], true, "{init}");
    assert_eq!(
        types(&agent, &alloc, "init"),
        [
            "Received",
            "Task Setup",
            "Started",
            "Terminated",
            "Not Restarting"
        ]
    );
    let main = agent.task_state(&alloc, "main");
    assert_eq!(
        agent.events(&alloc, "main"),
        [(
            "Sibling Task Failed".to_string(),
            "Task's sibling \"init\" failed".to_string()
        )]
    );
    assert!(main["StartedAt"].is_null(), "{main}");
    assert!(!ran.exists(), "main ran after a failed prestart task");
}

/// A batch job's sidecar is killed when its main task ends, with Nomad's event; a poststop task
/// runs after both are dead.
#[test]
fn main_ending_kills_the_sidecar_then_poststop_runs() {
    let dir = TempDir::new("lc-sidecar");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(400_000);
    let out = dir.path().join("order");
    let o = out.display();
    let job = agent.run_hcl(&batch(
        "sidecar",
        &[
            task("proxy", &hook("prestart", true), &format!("exec sleep {m}")),
            task("main", "", &format!("echo main-done >> {o}")),
            task(
                "cleanup",
                &hook("poststop", false),
                &format!("grep -q main-done {o} || exit 5; echo cleanup-done >> {o}"),
            ),
        ],
    ));
    let alloc = agent.alloc_id(&job);
    wait_status(&agent, &alloc, "complete");
    assert_eq!(
        read(&out).lines().collect::<Vec<_>>(),
        ["main-done", "cleanup-done"]
    );
    let proxy = agent.events(&alloc, "proxy");
    let kinds: Vec<&str> = proxy.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Received",
            "Task Setup",
            "Started",
            "Main Tasks Dead",
            "Killing",
            "Terminated",
            "Killed"
        ],
        "{proxy:#?}"
    );
    assert_eq!(proxy[3].1, "Main tasks dead, destroying all sidecar tasks");
    assert!(
        sleepers(&m).is_empty(),
        "the sidecar outlived the main task"
    );
    // The sidecar started before main; poststop started after the sidecar was dead.
    assert!(
        time_of(&agent, &alloc, "main", "Received") >= time_of(&agent, &alloc, "proxy", "Started")
    );
    assert!(
        time_of(&agent, &alloc, "cleanup", "Received")
            >= time_of(&agent, &alloc, "proxy", "Killed")
    );
    for t in ["proxy", "main", "cleanup"] {
        assert_eq!(agent.task_state(&alloc, t)["Failed"], false, "{t}");
    }
}

/// The leader ending kills the other tasks, each told why.
#[test]
fn the_leader_ending_kills_the_others() {
    let dir = TempDir::new("lc-leader");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(500_000);
    let up = dir.path().join("worker-up");
    let job = agent.run_hcl(&batch(
        "leader",
        &[
            task(
                "leader",
                "leader = true",
                &format!("while [ ! -f {} ]; do sleep 0.05; done", up.display()),
            ),
            task(
                "worker",
                "",
                &format!("touch {} && exec sleep {m}", up.display()),
            ),
        ],
    ));
    let alloc = agent.alloc_id(&job);
    wait_status(&agent, &alloc, "complete");
    let worker = agent.events(&alloc, "worker");
    let kinds: Vec<&str> = worker.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Received",
            "Task Setup",
            "Started",
            "Leader Task Dead",
            "Killing",
            "Terminated",
            "Killed"
        ],
        "{worker:#?}"
    );
    assert_eq!(worker[3].1, "Leader Task in Group dead");
    assert!(sleepers(&m).is_empty(), "the worker outlived the leader");
}

/// kill -9 of the agent once the prestart task completed and main runs: the next agent neither
/// runs the prestart task again nor starts main again (same PID, same events).
#[test]
fn after_an_agent_kill_prestart_does_not_run_again_and_main_keeps_its_pid() {
    let dir = TempDir::new("lc-restore");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(600_000);
    let runs = dir.path().join("init-runs");
    let pids = dir.path().join("main-pids");
    let job = agent.run_hcl(&format!(
        r#"
job "restore" {{
  group "g" {{
    {}
    {}
  }}
}}"#,
        task(
            "init",
            &hook("prestart", false),
            &format!("echo run >> {}", runs.display())
        ),
        task(
            "main",
            "",
            &format!("echo $$ >> {} && exec sleep {m}", pids.display())
        ),
    ));
    let alloc = agent.alloc_id(&job);
    let main = wait_for(WAIT, "main running", || {
        let s = agent.task_state(&alloc, "main");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    let pid = main["PID"].as_i64().unwrap() as i32;
    wait_status(&agent, &alloc, "running");
    let init_events = agent.events(&alloc, "init");
    wait_for(WAIT, "the state file to record both tasks", || {
        let s = state_on_disk(&agent.data_dir)?.to_string();
        (s.contains(&format!("\"PID\":{pid}")) && s.contains("\"State\":\"dead\"")).then_some(())
    });

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(alive(pid), "main died with the agent");
    agent.restart();

    let again = wait_for(WAIT, "main re-attached", || {
        let s = agent.task_state(&alloc, "main");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    assert_eq!(again["PID"], pid, "{again}");
    assert_eq!(again["StartedAt"], main["StartedAt"]);
    assert_eq!(again["Restarts"], 0);
    assert_eq!(
        types(&agent, &alloc, "main"),
        ["Received", "Task Setup", "Started"]
    );
    assert_eq!(agent.events(&alloc, "init"), init_events);
    assert_eq!(read(&runs), "run\n", "the prestart task ran again");
    assert_eq!(read(&pids), format!("{pid}\n"), "main started again");
    assert_eq!(client_status(&agent, &alloc), "running");
    assert_eq!(sleepers(&m), vec![pid]);
}

/// kill -9 of the agent while the prestart task still runs: the next agent re-attaches to it and
/// starts main only once it completed, once.
#[test]
fn after_an_agent_kill_during_prestart_main_starts_once_it_completes() {
    let dir = TempDir::new("lc-restore-pre");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let go = dir.path().join("go");
    let out = dir.path().join("order");
    let (g, o) = (go.display(), out.display());
    let job = agent.run_hcl(&batch(
        "restore-pre",
        &[
            task(
                "init",
                &hook("prestart", false),
                &format!(
                    "echo init-started >> {o}; while [ ! -f {g} ]; do sleep 0.05; done; \
                     echo init-done >> {o}"
                ),
            ),
            task(
                "main",
                "",
                &format!("grep -q init-done {o} || exit 7; echo main-ran >> {o}"),
            ),
        ],
    ));
    let alloc = agent.alloc_id(&job);
    let init = wait_for(WAIT, "init running", || {
        let s = agent.task_state(&alloc, "init");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    let pid = init["PID"].as_i64().unwrap();
    wait_for(WAIT, "the state file to record init's run", || {
        let s = state_on_disk(&agent.data_dir)?.to_string();
        s.contains(&format!("\"PID\":{pid}")).then_some(())
    });
    assert_eq!(agent.task_state(&alloc, "main")["State"], "pending");
    assert!(agent.events(&alloc, "main").is_empty());

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    wait_for(WAIT, "init re-attached", || {
        let s = agent.task_state(&alloc, "init");
        (s["State"] == "running" && s["PID"] == pid).then_some(())
    });
    assert!(
        agent.events(&alloc, "main").is_empty(),
        "main started before init ended"
    );
    std::fs::write(&go, "").unwrap();
    wait_status(&agent, &alloc, "complete");
    assert_eq!(
        read(&out).lines().collect::<Vec<_>>(),
        ["init-started", "init-done", "main-ran"]
    );
    assert!(
        time_of(&agent, &alloc, "main", "Received")
            >= time_of(&agent, &alloc, "init", "Terminated")
    );
}

/// A service job of one group: `main` runs `exec sleep <m>` (after writing its PID to `pid`);
/// `cleanup` is a poststop task running `poststop`.
fn service_with_poststop(name: &str, m: &str, pid: &Path, poststop: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    {}
    {}
  }}
}}"#,
        task(
            "main",
            "",
            &format!("echo $$ > {} && exec sleep {m}", pid.display())
        ),
        task("cleanup", &hook("poststop", false), poststop),
    )
}

fn cli_ok(agent: &TestAgent, args: &[&str]) {
    let out = agent.cli(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `job stop` kills the main task, then runs the poststop task to completion (it finds main
/// gone), and only then is the allocation complete, as in Nomad.
#[test]
fn job_stop_kills_main_then_runs_poststop() {
    let dir = TempDir::new("lc-stop");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(700_000);
    let pid = dir.path().join("main-pid");
    let done = dir.path().join("cleanup-done");
    let job = agent.run_hcl(&service_with_poststop(
        "stopped",
        &m,
        &pid,
        &format!(
            "kill -0 $(cat {}) 2>/dev/null && exit 4; echo cleaned > {}",
            pid.display(),
            done.display()
        ),
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "main running", || {
        (agent.task_state(&alloc, "main")["State"] == "running" && pid.exists()).then_some(())
    });
    assert_eq!(agent.task_state(&alloc, "cleanup")["State"], "pending");
    assert!(!done.exists(), "poststop ran while main runs");

    cli_ok(&agent, &["job", "stop", &job]);
    wait_status(&agent, &alloc, "complete");
    assert_eq!(read(&done), "cleaned\n");
    let cleanup = agent.task_state(&alloc, "cleanup");
    assert_eq!(
        (cleanup["State"].as_str(), cleanup["Failed"].as_bool()),
        (Some("dead"), Some(false)),
        "{cleanup}"
    );
    assert_eq!(
        types(&agent, &alloc, "cleanup"),
        ["Received", "Task Setup", "Started", "Terminated"]
    );
    assert!(types(&agent, &alloc, "main").contains(&"Killed".to_string()));
    assert!(
        time_of(&agent, &alloc, "cleanup", "Received") >= time_of(&agent, &alloc, "main", "Killed")
    );
    assert!(sleepers(&m).is_empty(), "main outlived the stop");
    let a = agent.get(&format!("/v1/allocation/{alloc}"));
    assert_eq!(a["DesiredStatus"], "stop", "{a}");
}

/// `alloc stop` with a poststop task that runs across a kill -9 of the agent: the next agent
/// takes it over (same PID) instead of starting it again, and once it completed, another restart
/// does not run it again.
#[test]
fn a_poststop_task_runs_once_across_agent_restarts() {
    let dir = TempDir::new("lc-stop-restore");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(800_000);
    let pid = dir.path().join("main-pid");
    let go = dir.path().join("go");
    let runs = dir.path().join("cleanup-runs");
    let job = agent.run_hcl(&service_with_poststop(
        "stop-restore",
        &m,
        &pid,
        &format!(
            "echo run >> {}; while [ ! -f {} ]; do sleep 0.05; done",
            runs.display(),
            go.display()
        ),
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "main running", || {
        (agent.task_state(&alloc, "main")["State"] == "running").then_some(())
    });
    cli_ok(&agent, &["alloc", "stop", &alloc]);
    let cleanup = wait_for(WAIT, "cleanup running", || {
        let s = agent.task_state(&alloc, "cleanup");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    let cleanup_pid = cleanup["PID"].as_i64().unwrap();
    assert_eq!(agent.task_state(&alloc, "main")["State"], "dead");
    assert_eq!(client_status(&agent, &alloc), "running");
    wait_for(WAIT, "the state file to record cleanup's run", || {
        let s = state_on_disk(&agent.data_dir)?.to_string();
        s.contains(&format!("\"PID\":{cleanup_pid}")).then_some(())
    });

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(
        alive(cleanup_pid as i32),
        "the poststop task died with the agent"
    );
    agent.restart();
    wait_for(WAIT, "cleanup re-attached", || {
        let s = agent.task_state(&alloc, "cleanup");
        (s["State"] == "running" && s["PID"] == cleanup_pid).then_some(())
    });
    std::fs::write(&go, "").unwrap();
    wait_status(&agent, &alloc, "complete");
    assert_eq!(read(&runs), "run\n", "the poststop task ran again");
    let events = agent.events(&alloc, "cleanup");

    agent.stop_with(libc::SIGTERM, Duration::from_secs(30));
    agent.restart();
    assert_eq!(client_status(&agent, &alloc), "complete");
    assert_eq!(agent.events(&alloc, "cleanup"), events);
    assert_eq!(read(&runs), "run\n", "a completed poststop task ran again");
    assert_eq!(agent.task_state(&alloc, "cleanup")["Failed"], false);
}

/// A poststop task that never ends keeps its stopped allocation running, as in Nomad; stopping
/// it again (`alloc stop`, or `job stop` of the stopped job) kills it as a stop kills a task, and
/// the allocation is complete.
#[test]
fn a_second_stop_kills_a_poststop_task_that_hangs() {
    let dir = TempDir::new("lc-stop-again");
    let agent = TestAgent::start_in(dir.path(), "");
    for (i, again) in [["alloc", "stop"], ["job", "stop"]].iter().enumerate() {
        let m = unique_marker(960_000 + 2 * i as u32);
        let post = unique_marker(961_000 + 2 * i as u32);
        let pid = dir.path().join(format!("main-pid-{i}"));
        let job = agent.run_hcl(&service_with_poststop(
            &format!("again-{i}"),
            &m,
            &pid,
            &format!("exec sleep {post}"),
        ));
        let alloc = agent.alloc_id(&job);
        wait_for(WAIT, "main running", || {
            (agent.task_state(&alloc, "main")["State"] == "running").then_some(())
        });
        cli_ok(&agent, &["job", "stop", &job]);
        wait_for(WAIT, "cleanup running", || {
            (agent.task_state(&alloc, "cleanup")["State"] == "running").then_some(())
        });
        // "running" is recorded when the shell starts; its `exec sleep` follows.
        wait_for(WAIT, "the poststop sleep running", || {
            (sleepers(&post).len() == 1).then_some(())
        });
        assert_eq!(client_status(&agent, &alloc), "running");

        let target = if again[0] == "alloc" { &alloc } else { &job };
        cli_ok(&agent, &[again[0], again[1], target]);
        wait_status(&agent, &alloc, "complete");
        assert!(
            sleepers(&post).is_empty(),
            "{again:?}: the poststop task lives on"
        );
        let kinds = types(&agent, &alloc, "cleanup");
        assert_eq!(
            kinds[kinds.len() - 3..],
            ["Killing", "Terminated", "Killed"],
            "{again:?}: {kinds:?}"
        );
        assert_eq!(agent.task_state(&alloc, "cleanup")["Failed"], false);
    }
}

/// A second stop is on disk before it kills anything: an agent killed with SIGKILL right after
/// it, before the poststop task's death is necessarily recorded, comes back without taking the
/// poststop task over or starting it again, and the allocation ends complete.
#[test]
fn a_second_stop_holds_across_a_kill_9_of_the_agent() {
    let dir = TempDir::new("lc-stop-again-restore");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(970_000);
    let post = unique_marker(971_000);
    let pid = dir.path().join("main-pid");
    let runs = dir.path().join("cleanup-runs");
    // It ignores its kill signal: only the SIGKILL after `kill_timeout` ends it, a timer the
    // runner of the agent killed below holds. So it most likely outlives that agent, and the
    // next one finds it running in the state file (the race the cut's record is for).
    let job = agent.run_hcl(&service_with_poststop(
        "again-restore",
        &m,
        &pid,
        &format!(
            "trap '' INT TERM; echo run >> {}; exec sleep {post}",
            runs.display()
        ),
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "main running", || {
        (agent.task_state(&alloc, "main")["State"] == "running").then_some(())
    });
    cli_ok(&agent, &["job", "stop", &job]);
    let cleanup = wait_for(WAIT, "cleanup running", || {
        let s = agent.task_state(&alloc, "cleanup");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    let cleanup_pid = cleanup["PID"].as_i64().unwrap();
    wait_for(WAIT, "the state file to record cleanup's run", || {
        let s = state_on_disk(&agent.data_dir)?.to_string();
        s.contains(&format!("\"PID\":{cleanup_pid}")).then_some(())
    });
    // Its line written, so its trap is set: the second stop's signal cannot end it before.
    wait_for(WAIT, "cleanup's line", || {
        (read(&runs) == "run\n").then_some(())
    });

    cli_ok(&agent, &["alloc", "stop", &alloc]);
    // The answer came once the cut was written, not some time after it.
    let state = state_on_disk(&agent.data_dir).expect("a state file");
    let record = state["Allocations"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["ID"] == alloc.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(record["PoststopCut"], true, "{record}");
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    println!(
        "second stop then kill -9: the poststop task was {} when the agent died",
        if alive(cleanup_pid as i32) {
            "still running"
        } else {
            "already dead"
        }
    );

    agent.restart();
    wait_status(&agent, &alloc, "complete");
    assert!(sleepers(&post).is_empty(), "the poststop task lives on");
    assert_eq!(read(&runs), "run\n", "the poststop task ran again");
    let s = agent.task_state(&alloc, "cleanup");
    assert_eq!(
        (s["State"].as_str(), s["Failed"].as_bool()),
        (Some("dead"), Some(false)),
        "{s}"
    );
    let kinds = types(&agent, &alloc, "cleanup");
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("Killed"),
        "{kinds:?}"
    );
}

/// Purging the job of a stopped allocation whose poststop task hangs ends that task (killed as a
/// stop kills a task) and forgets the allocation.
#[test]
fn a_purge_kills_a_poststop_task_that_hangs() {
    let dir = TempDir::new("lc-stop-purge");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(900_000);
    let post = unique_marker(950_000);
    let pid = dir.path().join("main-pid");
    let job = agent.run_hcl(&service_with_poststop(
        "stop-purge",
        &m,
        &pid,
        &format!("exec sleep {post}"),
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "main running", || {
        (agent.task_state(&alloc, "main")["State"] == "running").then_some(())
    });
    cli_ok(&agent, &["job", "stop", &job]);
    wait_for(WAIT, "cleanup running", || {
        (agent.task_state(&alloc, "cleanup")["State"] == "running").then_some(())
    });
    // "running" is recorded when the shell starts; its `exec sleep` follows.
    wait_for(WAIT, "the poststop sleep running", || {
        (sleepers(&post).len() == 1).then_some(())
    });
    assert_eq!(client_status(&agent, &alloc), "running");

    cli_ok(&agent, &["job", "stop", "-purge", &job]);
    wait_for(WAIT, "the poststop task killed", || {
        sleepers(&post).is_empty().then_some(())
    });
    let (status, _) = agent.request("GET", &format!("/v1/allocation/{alloc}"), None);
    assert_eq!(status, 404);
}
