//! The order of a stop (jobspec.md `lifecycle`, Nomad's alloc runner `killTasks`) through the real
//! agent: the leader first, then the other tasks but the sidecars, then the sidecars, then the
//! poststop tasks, across a kill -9 of the agent too. Each task's signal handler writes its name to
//! one file and then holds its task alive until the test lets it go, so the file's lines are the
//! order the tasks got their signals, and a stage that began before the one ahead of it ended
//! would show in it. Also a purge, which runs the poststop tasks before the allocation goes.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A `raw_exec` task that, once started, writes `<name> up` to `<dir>/up`, and on SIGINT or SIGTERM
/// writes `<name>` to `<dir>/order` (once, however often it is signalled) and ends once
/// `<dir>/go-<name>` exists. Unsignalled, it exits 0 once `<dir>/end-<name>` exists. `extra` goes
/// into its block.
fn held(name: &str, extra: &str, dir: &Path) -> String {
    let order = dir.join("order");
    let (mark, go) = (
        dir.join(format!("got-{name}")),
        dir.join(format!("go-{name}")),
    );
    let script = format!(
        "trap '[ -f {mark} ] || {{ touch {mark}; echo {name} >> {order}; }}; \
         while [ ! -f {go} ]; do sleep 0.05; done; exit 0' INT TERM; \
         echo {name} up >> {up}; while [ ! -f {end} ]; do sleep 0.05; done",
        mark = mark.display(),
        order = order.display(),
        go = go.display(),
        up = dir.join("up").display(),
        end = dir.join(format!("end-{name}")).display(),
    );
    format!(
        r#"
    task "{name}" {{
      driver = "raw_exec"
      kill_timeout = "5m"
      {extra}
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}"#
    )
}

/// A service job: a leader, a main task `worker`, a prestart sidecar `proxy` (all [`held`]) and a
/// poststop task `cleanup` that writes `cleanup` to `order`. `header` goes before the group.
fn ordered_job(name: &str, dir: &Path, header: &str) -> String {
    let sidecar = "lifecycle {\n        hook = \"prestart\"\n        sidecar = true\n      }";
    let cleanup = format!(
        r#"
    task "cleanup" {{
      driver = "raw_exec"
      lifecycle {{ hook = "poststop" }}
      config {{
        command = "/bin/sh"
        args = ["-c", "echo cleanup >> {}"]
      }}
    }}"#,
        dir.join("order").display()
    );
    format!(
        r#"
job "{name}" {{
  {header}
  group "g" {{
    {}
    {}
    {}
    {cleanup}
  }}
}}"#,
        held("leader", "leader = true", dir),
        held("worker", "", dir),
        held("proxy", sidecar, dir),
    )
}

/// Tasks may wait 5 minutes for their turn, not the default cap of 30 seconds.
const CONFIG: &str = "client { max_kill_timeout = \"5m\" }";

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn wait_lines(path: &Path, want: &[&str]) {
    wait_for(WAIT, &format!("{want:?} in {}", path.display()), || {
        (lines(path) == want).then_some(())
    });
}

fn types(agent: &TestAgent, alloc: &str, task: &str) -> Vec<String> {
    agent
        .events(alloc, task)
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

fn client_status(agent: &TestAgent, alloc: &str) -> String {
    agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn go(dir: &Path, task: &str) {
    std::fs::write(dir.join(format!("go-{task}")), "").unwrap();
}

/// Lets every held task go when dropped, so that a test that fails leaves no task waiting.
struct Release(PathBuf);

impl Drop for Release {
    fn drop(&mut self) {
        for task in ["leader", "worker", "proxy"] {
            let _ = std::fs::write(self.0.join(format!("go-{task}")), "");
        }
    }
}

/// Starts the job and waits for its three held tasks to run.
fn start(agent: &TestAgent, name: &str, dir: &Path) -> (String, PathBuf) {
    start_job(agent, &ordered_job(name, dir, ""), dir)
}

fn start_job(agent: &TestAgent, hcl: &str, dir: &Path) -> (String, PathBuf) {
    let job = agent.run_hcl(hcl);
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "the tasks up", || {
        (lines(&dir.join("up")).len() == 3).then_some(())
    });
    (alloc, dir.join("order"))
}

/// The rest of the order once the leader is let go: the worker, then the sidecar, then the
/// poststop task, each stage only once the one before ended.
fn finish_after_leader(agent: &TestAgent, alloc: &str, dir: &Path, order: &Path) {
    go(dir, "leader");
    wait_lines(order, &["leader", "worker"]);
    assert_eq!(agent.task_state(alloc, "leader")["State"], "dead");
    assert!(!types(agent, alloc, "proxy").contains(&"Killing".to_string()));
    go(dir, "worker");
    wait_lines(order, &["leader", "worker", "proxy"]);
    assert_eq!(agent.task_state(alloc, "worker")["State"], "dead");
    assert_eq!(agent.task_state(alloc, "cleanup")["State"], "pending");
    go(dir, "proxy");
    wait_lines(order, &["leader", "worker", "proxy", "cleanup"]);
    wait_for(WAIT, "alloc complete", || {
        (client_status(agent, alloc) == "complete").then_some(())
    });
}

/// The tasks after the leader get Nomad's `Leader Task Dead` before their `Killing`.
fn assert_leader_dead_then_killing(agent: &TestAgent, alloc: &str) {
    for task in ["worker", "proxy"] {
        let t = types(agent, alloc, task);
        let at = |kind: &str| t.iter().position(|x| x == kind);
        let (dead, killing) = (at("Leader Task Dead"), at("Killing"));
        assert!(
            dead.is_some() && killing.is_some() && dead < killing,
            "{task}: {t:?}"
        );
    }
}

/// `job stop`: the leader alone gets its signal, and only once it ended the worker, then the
/// sidecar, then the poststop task runs. The stop answers at once.
#[test]
fn a_stop_kills_the_leader_then_main_then_the_sidecar_then_runs_poststop() {
    let tmp = TempDir::new("lc-order");
    let dir = tmp.path();
    let agent = TestAgent::start_in(dir, CONFIG);
    let _release = Release(dir.to_path_buf());
    let (alloc, order) = start(&agent, "ordered", dir);
    let (status, body) = agent.request("DELETE", "/v1/job/ordered", None);
    assert_eq!(status, 200, "{body}");
    wait_lines(&order, &["leader"]);
    for task in ["worker", "proxy"] {
        assert_eq!(agent.task_state(&alloc, task)["State"], "running");
        assert!(!types(&agent, &alloc, task).contains(&"Killing".to_string()));
    }
    assert!(types(&agent, &alloc, "leader").contains(&"Killing".to_string()));
    finish_after_leader(&agent, &alloc, dir, &order);
    assert_leader_dead_then_killing(&agent, &alloc);
}

/// kill -9 of the agent while the stop waits for the leader: the next agent takes the live tasks
/// over and carries on the order (it neither kills everything at once nor loses the poststop
/// task).
#[test]
fn a_stop_carries_on_its_order_across_a_kill_9_of_the_agent() {
    let tmp = TempDir::new("lc-order-kill");
    let dir = tmp.path();
    let mut agent = TestAgent::start_in(dir, CONFIG);
    let _release = Release(dir.to_path_buf());
    let (alloc, order) = start(&agent, "ordered-kill", dir);
    let pids: Vec<_> = ["leader", "worker", "proxy"]
        .iter()
        .map(|t| agent.task_state(&alloc, t)["PID"].as_i64().unwrap())
        .collect();
    cli_ok(&agent, &["alloc", "stop", &alloc]);
    wait_lines(&order, &["leader"]);

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    wait_for(WAIT, "the tasks taken over", || {
        let same = ["leader", "worker", "proxy"]
            .iter()
            .zip(&pids)
            .all(|(t, p)| {
                let s = agent.task_state(&alloc, t);
                s["State"] == "running" && s["PID"] == *p
            });
        same.then_some(())
    });
    assert_eq!(lines(&order), ["leader"], "the restart killed out of order");
    finish_after_leader(&agent, &alloc, dir, &order);
    assert_leader_dead_then_killing(&agent, &alloc);
}

/// The leader ending on its own (a batch job's leader that exits 0) kills the others in the same
/// order: the worker, then the sidecar once the worker ended; then the poststop task runs.
#[test]
fn the_leader_ending_kills_main_then_the_sidecar() {
    let tmp = TempDir::new("lc-order-leader");
    let dir = tmp.path();
    let agent = TestAgent::start_in(dir, CONFIG);
    let _release = Release(dir.to_path_buf());
    let hcl = ordered_job("leader-ends", dir, "type = \"batch\"");
    let (alloc, order) = start_job(&agent, &hcl, dir);
    std::fs::write(dir.join("end-leader"), "").unwrap();
    wait_lines(&order, &["worker"]);
    let leader = agent.task_state(&alloc, "leader");
    assert_eq!(
        (&leader["State"], &leader["Failed"]),
        (&"dead".into(), &false.into())
    );
    assert_eq!(agent.task_state(&alloc, "proxy")["State"], "running");
    assert!(!types(&agent, &alloc, "proxy").contains(&"Killing".to_string()));
    go(dir, "worker");
    wait_lines(&order, &["worker", "proxy"]);
    assert_eq!(agent.task_state(&alloc, "cleanup")["State"], "pending");
    go(dir, "proxy");
    wait_lines(&order, &["worker", "proxy", "cleanup"]);
    wait_for(WAIT, "alloc complete", || {
        (client_status(&agent, &alloc) == "complete").then_some(())
    });
    assert_leader_dead_then_killing(&agent, &alloc);
}

/// [`ordered_job`] with `shutdown_delay`s: the group's 1s, the worker's 2s, the sidecar's 1s, the
/// leader none of its own.
fn delayed_job(name: &str, dir: &Path, header: &str) -> String {
    ordered_job(name, dir, header)
        .replacen(
            "group \"g\" {",
            "group \"g\" {\n    shutdown_delay = \"1s\"",
            1,
        )
        .replacen(
            "task \"worker\" {\n      driver = \"raw_exec\"",
            "task \"worker\" {\n      driver = \"raw_exec\"\n      shutdown_delay = \"2s\"",
            1,
        )
        .replacen(
            "task \"proxy\" {\n      driver = \"raw_exec\"",
            "task \"proxy\" {\n      driver = \"raw_exec\"\n      shutdown_delay = \"1s\"",
            1,
        )
}

/// The delay each task's `Waiting for shutdown delay` event names, `None` without one.
fn waited(agent: &TestAgent, alloc: &str, task: &str) -> Option<String> {
    agent
        .events(alloc, task)
        .into_iter()
        .find(|(t, _)| t == "Waiting for shutdown delay")
        .map(|(_, m)| m)
}

fn waiting_for(d: &str) -> Option<String> {
    Some(format!(
        "Waiting for shutdown_delay of {d} before killing the task."
    ))
}

/// A stop waits the group's `shutdown_delay` once, before its first stage (the leader), as
/// Nomad's alloc runner waits it before it kills any task; the stages after it wait only their
/// tasks' own. A leader that ends on its own is no stop of the allocation: the tasks it takes
/// down wait their own delays only.
#[test]
fn the_group_shutdown_delay_is_waited_once_per_stop_and_not_for_a_leader_end() {
    let tmp = TempDir::new("lc-delay");
    let dir = tmp.path();
    let agent = TestAgent::start_in(dir, CONFIG);
    let _release = Release(dir.to_path_buf());
    let (alloc, order) = start_job(&agent, &delayed_job("delays", dir, ""), dir);
    let registered = agent.get("/v1/job/delays");
    assert_eq!(
        registered["TaskGroups"][0]["ShutdownDelay"], 1_000_000_000u64,
        "{registered}"
    );
    cli_ok(&agent, &["job", "stop", "delays"]);
    wait_lines(&order, &["leader"]);
    finish_after_leader(&agent, &alloc, dir, &order);
    assert_eq!(waited(&agent, &alloc, "leader"), waiting_for("1s"));
    assert_eq!(waited(&agent, &alloc, "worker"), waiting_for("2s"));
    assert_eq!(waited(&agent, &alloc, "proxy"), waiting_for("1s"));

    let sub = dir.join("leader-ends");
    std::fs::create_dir(&sub).unwrap();
    let _release = Release(sub.clone());
    let (alloc, order) = start_job(
        &agent,
        &delayed_job("delays-leader", &sub, "type = \"batch\""),
        &sub,
    );
    std::fs::write(sub.join("end-leader"), "").unwrap();
    wait_lines(&order, &["worker"]);
    go(&sub, "worker");
    wait_lines(&order, &["worker", "proxy"]);
    go(&sub, "proxy");
    wait_lines(&order, &["worker", "proxy", "cleanup"]);
    assert_eq!(waited(&agent, &alloc, "leader"), None);
    assert_eq!(waited(&agent, &alloc, "worker"), waiting_for("2s"));
    assert_eq!(waited(&agent, &alloc, "proxy"), waiting_for("1s"));
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

/// A purge of a running job stops its allocation as a stop does: the poststop task runs, the
/// allocation stays visible in `/v1/allocations` while it does (the job is gone at once), across a
/// kill -9 of the agent too, and once it ended the collector forgets the allocation.
#[test]
fn a_purge_runs_the_poststop_task_then_forgets_the_allocation() {
    let tmp = TempDir::new("lc-purge-poststop");
    let dir = tmp.path();
    let mut agent = TestAgent::start_in(dir, "client { gc_interval = \"1s\" }");
    let (up, go, done) = (dir.join("up"), dir.join("go"), dir.join("done"));
    let job = agent.run_hcl(&format!(
        r#"
job "purged" {{
  group "g" {{
    task "main" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "touch {up}; exec sleep 3600"]
      }}
    }}
    task "cleanup" {{
      driver = "raw_exec"
      lifecycle {{ hook = "poststop" }}
      config {{
        command = "/bin/sh"
        args = ["-c", "while [ ! -f {go} ]; do sleep 0.05; done; echo cleaned > {done}"]
      }}
    }}
  }}
}}"#,
        up = up.display(),
        go = go.display(),
        done = done.display(),
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "main running", || up.exists().then_some(()));
    let (status, body) = agent.request("DELETE", "/v1/job/purged?purge=true", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(agent.request("GET", "/v1/job/purged", None).0, 404);
    let cleanup = wait_for(WAIT, "cleanup running", || {
        let s = agent.task_state(&alloc, "cleanup");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    assert_eq!(agent.task_state(&alloc, "main")["State"], "dead");
    let listed = |agent: &TestAgent| {
        agent
            .get("/v1/allocations")
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["ID"] == alloc)
    };
    assert!(
        listed(&agent),
        "the purged job's running allocation is not listed"
    );
    wait_for(WAIT, "the state file to record cleanup's run", || {
        let s = state_on_disk(&agent.data_dir)?.to_string();
        s.contains(&format!("\"PID\":{}", cleanup["PID"]))
            .then_some(())
    });

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    wait_for(WAIT, "cleanup taken over", || {
        let s = agent.task_state(&alloc, "cleanup");
        (s["State"] == "running" && s["PID"] == cleanup["PID"]).then_some(())
    });
    assert!(listed(&agent));
    assert_eq!(agent.request("GET", "/v1/job/purged", None).0, 404);
    std::fs::write(&go, "").unwrap();
    wait_for(WAIT, "the allocation forgotten", || {
        (agent
            .request("GET", &format!("/v1/allocation/{alloc}"), None)
            .0
            == 404)
            .then_some(())
    });
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "cleaned\n");
    assert!(!listed(&agent));
    let on_disk = state_on_disk(&agent.data_dir).unwrap().to_string();
    assert!(
        !on_disk.contains(&alloc),
        "the state file keeps the allocation"
    );
}

/// A `raw_exec` task that writes a line to `<dir>/starts-<name>` at each start, then runs `then`.
fn counted(name: &str, extra: &str, then: &str, dir: &Path) -> String {
    let script = format!(
        "echo start >> {}; {then}",
        dir.join(format!("starts-{name}")).display()
    );
    format!(
        r#"
    task "{name}" {{
      driver = "raw_exec"
      {extra}
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}"#
    )
}

/// The tasks of a stopped allocation that do not run when the agent comes back are never started
/// again, whatever their restart policy says: a task whose process ended while no agent ran
/// (its restart would be at once, or its policy allows none) and a task waiting out a restart
/// delay end killed, not failed, without a second start, while the stop still waits for its leader; a prestart task that ran stays dead.
/// Once the leader ends, the poststop task runs once and the allocation completes.
#[test]
fn a_restart_starts_no_task_of_a_stopped_allocation_but_its_poststop_task() {
    let tmp = TempDir::new("lc-stop-no-start");
    let dir = tmp.path();
    let mut agent = TestAgent::start_in(dir, CONFIG);
    let _release = Release(dir.to_path_buf());
    let end_gone = dir.join("end-gone");
    let starts = |task: &str| lines(&dir.join(format!("starts-{task}"))).len();
    let hcl = format!(
        r#"
job "no-start" {{
  group "g" {{
    {leader}
    {init}
    {gone}
    {last}
    {delayed}
    {cleanup}
  }}
}}"#,
        leader = held("leader", "leader = true", dir),
        init = counted(
            "init",
            "lifecycle {\n        hook = \"prestart\"\n      }",
            "exit 0",
            dir
        ),
        gone = counted(
            "gone",
            "restart {\n        attempts = 3\n        delay = \"0s\"\n        interval = \"1h\"\n        mode = \"fail\"\n      }",
            &format!(
                "while [ ! -f {} ]; do sleep 0.05; done; exit 1",
                end_gone.display()
            ),
            dir
        ),
        // Its policy allows no restart: ended on the stop, it is killed, not failed.
        last = counted(
            "last",
            "restart {\n        attempts = 0\n        mode = \"fail\"\n      }",
            &format!(
                "while [ ! -f {} ]; do sleep 0.05; done; exit 1",
                end_gone.display()
            ),
            dir
        ),
        delayed = counted(
            "delayed",
            "restart {\n        attempts = 2\n        delay = \"1h\"\n        interval = \"3h\"\n        mode = \"fail\"\n      }",
            "exit 1",
            dir
        ),
        cleanup = counted(
            "cleanup",
            "lifecycle {\n        hook = \"poststop\"\n      }",
            "exit 0",
            dir
        ),
    );
    let job = agent.run_hcl(&hcl);
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "the leader up and gone running", || {
        let running = |task: &str| {
            let t = agent.task_state(&alloc, task);
            t["State"] == "running" && t["PID"].is_i64()
        };
        (lines(&dir.join("up")).len() == 1 && running("gone") && running("last")).then_some(())
    });
    wait_for(WAIT, "delayed waiting out its restart delay", || {
        types(&agent, &alloc, "delayed")
            .contains(&"Restarting".to_string())
            .then_some(())
    });
    assert_eq!(agent.task_state(&alloc, "init")["State"], "dead");
    cli_ok(&agent, &["alloc", "stop", &alloc]);
    // The stop is held open: the leader ignores its signal until the test lets it go.
    wait_lines(&dir.join("order"), &["leader"]);
    wait_for(
        WAIT,
        "the state file to record the stop and the tasks",
        || {
            let state = state_on_disk(&agent.data_dir)?;
            let a = state["Allocations"]
                .as_array()?
                .iter()
                .find(|a| a["ID"] == alloc)?
                .clone();
            let t = &a["TaskStates"];
            (a["DesiredStatus"] == "stop"
                && t["gone"]["PID"].is_i64()
                && t["last"]["PID"].is_i64()
                && t["delayed"]["RestartAt"].is_i64()
                && t["init"]["State"] == "dead")
                .then_some(())
        },
    );

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    // `gone` ends while no agent runs: its restart policy would start it again at once.
    std::fs::write(&end_gone, "").unwrap();
    agent.restart();
    for task in ["gone", "last", "delayed", "init"] {
        wait_for(WAIT, &format!("{task} dead"), || {
            (agent.task_state(&alloc, task)["State"] == "dead").then_some(())
        });
        assert_eq!(starts(task), 1, "{task} was started again");
        let t = types(&agent, &alloc, task);
        let started = t.iter().filter(|x| *x == "Started").count();
        assert_eq!(started, 1, "{task}: {t:?}");
    }
    assert_eq!(agent.task_state(&alloc, "leader")["State"], "running");
    assert_eq!(agent.task_state(&alloc, "cleanup")["State"], "pending");
    assert_eq!(
        starts("cleanup"),
        0,
        "the poststop task ran before the leader ended"
    );

    go(dir, "leader");
    wait_for(WAIT, "alloc complete", || {
        (client_status(&agent, &alloc) == "complete").then_some(())
    });
    for task in ["init", "gone", "last", "delayed", "cleanup"] {
        assert_eq!(starts(task), 1, "{task}");
        let state = agent.task_state(&alloc, task);
        assert_eq!(state["Failed"], false, "{task}: {state}");
    }
}
