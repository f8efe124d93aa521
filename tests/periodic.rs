//! Periodic and parameterized jobs (jobspec.md `periodic`, `parameterized`, `dispatch_payload`)
//! through the real agent, its CLI and real task processes: children launched on a per-second
//! schedule and by `job periodic force`, `prohibit_overlap` proven by counting children, and
//! dispatches whose task prints its payload and meta (and owns it when run as a user), and
//! finished children kept to `job_gc_children` while launches go on. No assert on how long anything took; the
//! waits are generous.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn periodic_job(name: &str, overlap: bool, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  type = "batch"
  periodic {{
    crons            = ["*/1 * * * * * *"]
    prohibit_overlap = {overlap}
  }}
  group "g" {{
    restart {{ attempts = 0  mode = "fail" }}
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args    = ["-c", {script:?}]
      }}
    }}
  }}
}}"#
    )
}

/// The IDs of the jobs launched or dispatched from `parent`, in ID order.
fn children(agent: &TestAgent, parent: &str) -> Vec<String> {
    agent
        .get("/v1/jobs")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|j| j["ParentID"] == parent)
        .map(|j| j["ID"].as_str().unwrap().to_string())
        .collect()
}

fn enc(id: &str) -> String {
    id.replace('/', "%2F")
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_per_second_schedule_launches_children_that_run_until_the_parent_stops() {
    let dir = TempDir::new("periodic-run");
    let agent = TestAgent::start_in(dir.path(), "");
    let runs = dir.path().join("runs");
    let id = agent.run_hcl(&periodic_job(
        "tick",
        false,
        &format!("echo $NOMAD_JOB_PARENT_ID >> {}", runs.display()),
    ));
    // The parent is a template: running, without allocations of its own.
    assert!(agent.allocs(&id).is_empty());
    assert_eq!(agent.get("/v1/job/tick")["Status"], "running");
    let launched = wait_for(WAIT, "two children that ran", || {
        let c = children(&agent, "tick");
        (c.len() >= 2 && lines(&runs) >= 2).then_some(c)
    });
    for child in &launched {
        let (parent, at) = child.split_once("/periodic-").expect(child);
        assert_eq!(parent, "tick");
        assert!(at.parse::<i64>().unwrap() > 1_700_000_000, "{child}");
        let job = agent.get(&format!("/v1/job/{}", enc(child)));
        assert_eq!(job["ParentID"], "tick");
        assert!(
            job.get("Periodic").is_none(),
            "a child is no template: {job}"
        );
    }
    // Each child's task ran, and knew its parent.
    let ran = std::fs::read_to_string(&runs).unwrap();
    assert!(ran.lines().all(|l| l == "tick"), "{ran}");
    let first = &launched[0];
    wait_for(WAIT, "a child complete", || {
        let allocs = agent.allocs(&enc(first));
        (allocs.len() == 1 && allocs[0]["ClientStatus"] == "complete").then_some(())
    });
    let status = stdout(&agent.cli(&["job", "status", "tick"]));
    assert!(status.contains("Periodic             = true"), "{status}");
    assert!(status.contains("Next Periodic Launch = "), "{status}");
    assert!(status.contains("Previously Launched Jobs"), "{status}");
    assert!(status.contains(first.as_str()), "{status}");

    // Stopped, the parent launches nothing more: the stop and a launch are decided under the
    // same lock, so the count after the stop's answer is final.
    let (code, body) = agent.request("DELETE", "/v1/job/tick", None);
    assert_eq!(code, 200, "{body}");
    let after_stop = children(&agent, "tick").len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(children(&agent, "tick").len(), after_stop);
    let status = stdout(&agent.cli(&["job", "status", "tick"]));
    assert!(status.contains("Next Periodic Launch = none"), "{status}");
}

#[test]
fn prohibit_overlap_launches_no_second_child_while_one_runs_and_force_launches_now() {
    let dir = TempDir::new("periodic-overlap");
    let agent = TestAgent::start_in(dir.path(), "");
    let marker = unique_marker(41_000);
    agent.run_hcl(&periodic_job("slow", true, &format!("exec sleep {marker}")));
    let first = wait_for(WAIT, "the first child running", || {
        let c = children(&agent, "slow");
        let first = c.first()?.clone();
        let allocs = agent.allocs(&enc(&first));
        (allocs.first()?["ClientStatus"] == "running").then_some(first)
    });
    // Several scheduled instants pass while the child runs; none launches a second child. Counted
    // in the agent's log rather than slept for: a busy machine may let seconds pass unevaluated.
    let skipped = || {
        agent
            .log_text()
            .lines()
            .filter(|l| {
                l.contains("periodic job \"slow\": launch at ")
                    && l.ends_with(" skipped (a child still runs, or it exists)")
            })
            .count()
    };
    let before = skipped();
    wait_for(WAIT, "three more launches skipped", || {
        (skipped() >= before + 3).then_some(())
    });
    assert_eq!(children(&agent, "slow"), vec![first.clone()]);
    assert_eq!(pids_with(&marker).len(), 1);

    // `job periodic force` launches one now, as Nomad's does, whatever runs.
    let out = stdout(&agent.cli(&["job", "periodic", "force", "slow"]));
    assert!(out.contains("Force periodic successful"), "{out}");
    let both = wait_for(WAIT, "a forced second child", || {
        let c = children(&agent, "slow");
        (c.len() == 2).then_some(c)
    });
    assert!(both.contains(&first));

    // Forcing a job that is not periodic is refused with Nomad's words.
    agent.run_hcl(
        r#"job "plain" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#,
    );
    let (code, body) = agent.request("POST", "/v1/job/plain/periodic/force", Some("{}"));
    assert_eq!(
        (code, body.trim()),
        (400, "can't force launch non-periodic job")
    );

    // Nor one whose schedule is disabled: Nomad forces only the schedules it tracks.
    agent.run_hcl(
        r#"job "off" {
  type = "batch"
  periodic {
    crons   = ["0 0 1 1 *"]
    enabled = false
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}"#,
    );
    let (code, body) = agent.request("POST", "/v1/job/off/periodic/force", Some("{}"));
    assert_eq!(
        (code, body.trim()),
        (
            400,
            "force launch for job \"off\" failed: can't force run non-tracked job \"off\" (default)"
        )
    );
    assert!(children(&agent, "off").is_empty());

    agent.request("DELETE", "/v1/job/slow", None);
    agent.request("DELETE", "/v1/job/off", None);
    for child in both {
        agent.request("DELETE", &format!("/v1/job/{}", enc(&child)), None);
    }
    wait_for(WAIT, "the children's tasks gone", || {
        pids_with(&marker).is_empty().then_some(())
    });
}

const PARAMETERIZED: &str = r#"
job "render" {
  type = "batch"
  parameterized {
    payload       = "required"
    meta_required = ["name"]
    meta_optional = ["title"]
  }
  group "g" {
    restart { attempts = 0  mode = "fail" }
    task "t" {
      driver = "raw_exec"
      dispatch_payload { file = "input/payload.txt" }
      config {
        command = "/bin/sh"
        args    = ["-c", "cat ${NOMAD_TASK_DIR}/input/payload.txt; echo; echo name=$NOMAD_META_name title=$NOMAD_META_title"]
      }
    }
  }
}"#;

/// Waits for the dispatched job `child`'s task to complete and for its whole output, `want` (the
/// keeper drains the task's pipes after it reported the exit).
fn wait_dispatched_output(agent: &TestAgent, child: &str, want: &str) {
    let alloc = wait_for(WAIT, "the dispatched task complete", || {
        let allocs = agent.allocs(&enc(child));
        let a = allocs.first()?;
        (a["ClientStatus"] == "complete").then(|| a["ID"].as_str().unwrap().to_string())
    });
    wait_eq(
        WAIT,
        "the dispatched task's output",
        || stdout(&agent.cli(&["alloc", "logs", &alloc, "t"])),
        want.to_string(),
    );
}

#[test]
fn a_dispatch_gives_the_task_its_payload_and_meta() {
    let dir = TempDir::new("dispatch-run");
    let agent = TestAgent::start_in(dir.path(), "");
    agent.run_hcl(PARAMETERIZED);
    assert!(agent.allocs("render").is_empty());
    let payload = dir.path().join("payload.txt");
    std::fs::write(&payload, "hello from the payload").unwrap();
    let out = stdout(&agent.cli(&[
        "job",
        "dispatch",
        "-meta",
        "name=World",
        "-meta",
        "title=Dr",
        "render",
        payload.to_str().unwrap(),
    ]));
    let child = out
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let (parent, rest) = child.split_once("/dispatch-").expect(&child);
    assert_eq!(parent, "render");
    let (secs, hex) = rest.split_once('-').expect(rest);
    assert!(secs.parse::<i64>().is_ok(), "{child}");
    assert!(
        hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{child}"
    );

    wait_dispatched_output(
        &agent,
        &child,
        "hello from the payload\nname=World title=Dr\n",
    );
    let status = stdout(&agent.cli(&["job", "status", "render"]));
    assert!(status.contains("Dispatched Jobs"), "{status}");
    assert!(status.contains(child.as_str()), "{status}");
}

#[test]
fn a_dispatch_that_breaks_the_rules_is_refused_and_creates_nothing() {
    let dir = TempDir::new("dispatch-bad");
    let agent = TestAgent::start_in(dir.path(), "");
    agent.run_hcl(PARAMETERIZED);
    let jobs_before = agent.get("/v1/jobs");
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    for (body, want) in [
        (
            json!({"Payload": b64("x"), "Meta": {"title": "Dr"}}),
            "Dispatch did not provide required meta keys: [name]",
        ),
        (
            json!({"Payload": b64("x"), "Meta": {"name": "a", "colour": "red"}}),
            "Dispatch request included unpermitted metadata keys: [colour]",
        ),
        (
            json!({"Meta": {"name": "a"}}),
            "Payload is not provided but required by parameterized job",
        ),
        (
            json!({"Payload": b64(&"x".repeat(16 * 1024 + 1)), "Meta": {"name": "a"}}),
            "Payload exceeds maximum size; 16385 > 16384",
        ),
    ] {
        let (code, text) =
            agent.request("POST", "/v1/job/render/dispatch", Some(&body.to_string()));
        assert_eq!((code, text.trim()), (400, want), "{body}");
    }
    // The CLI says the same (the payload is checked first, as in Nomad: give one).
    let payload = dir.path().join("payload");
    std::fs::write(&payload, "x").unwrap();
    let out = agent.cli(&[
        "job",
        "dispatch",
        "-meta",
        "title=Dr",
        "render",
        payload.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Dispatch did not provide required meta keys: [name]"),
        "{err}"
    );
    // Not a parameterized job.
    agent.run_hcl(&periodic_job("cron", false, "true"));
    agent.request("DELETE", "/v1/job/cron", None);
    let (code, text) = agent.request("POST", "/v1/job/cron/dispatch", Some("{}"));
    assert_eq!(code, 400, "{text}");
    let jobs_after: Vec<Value> = agent
        .get("/v1/jobs")
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["ID"] != "cron" && j["ParentID"] != "cron")
        .cloned()
        .collect();
    assert_eq!(Value::Array(jobs_after), jobs_before);
}

/// `job dispatch <job> -` reads the payload from standard input, as Nomad's does; a payload
/// larger than a dispatch may carry, from standard input or a file, is refused by the CLI with
/// the agent's words and creates nothing.
#[test]
fn a_dispatch_reads_its_payload_from_stdin_and_refuses_one_too_large() {
    let dir = TempDir::new("dispatch-stdin");
    let agent = TestAgent::start_in(dir.path(), "");
    agent.run_hcl(PARAMETERIZED);
    let args = [
        "job",
        "dispatch",
        "-detach",
        "-meta",
        "name=Pipe",
        "render",
        "-",
    ];
    let out = agent.cli_with_stdin(&args, "piped in");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = stdout(&out).trim().to_string();
    assert!(child.starts_with("render/dispatch-"), "{child}");
    wait_dispatched_output(&agent, &child, "piped in\nname=Pipe title=\n");

    let jobs_before = agent.get("/v1/jobs");
    let big = "x".repeat(20 * 1024);
    let file = dir.path().join("big");
    std::fs::write(&file, &big).unwrap();
    for out in [
        agent.cli_with_stdin(&args, &big),
        agent.cli(&[&args[..6], &[file.to_str().unwrap()]].concat()),
    ] {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Payload exceeds maximum size; 20480 > 16384"),
            "{err}"
        );
    }
    assert_eq!(agent.get("/v1/jobs"), jobs_before);
}

#[test]
fn the_schedule_survives_a_restart_of_the_agent() {
    let dir = TempDir::new("periodic-restart");
    let mut agent = TestAgent::start_in(dir.path(), "");
    agent.run_hcl(&periodic_job("again", false, "true"));
    wait_for(WAIT, "a child before the restart", || {
        (!children(&agent, "again").is_empty()).then_some(())
    });
    agent.stop_with(libc::SIGTERM, Duration::from_secs(30));
    agent.restart();
    // The parent came back from the state file, and launches go on.
    assert_eq!(
        agent.get("/v1/job/again")["Periodic"]["Specs"],
        json!(["*/1 * * * * * *"])
    );
    let before = children(&agent, "again");
    wait_for(WAIT, "a child launched after the restart", || {
        children(&agent, "again")
            .iter()
            .any(|c| !before.contains(c))
            .then_some(())
    });
    agent.request("DELETE", "/v1/job/again", None);
}

/// Whether every allocation of the job `id` is complete (a finished child).
fn complete(agent: &TestAgent, id: &str) -> bool {
    agent
        .allocs(&enc(id))
        .iter()
        .all(|a| a["ClientStatus"] == "complete")
}

#[test]
fn finished_children_stay_bounded_while_launches_go_on_and_system_gc_forgets_them() {
    const KEEP: usize = 2;
    let dir = TempDir::new("periodic-gc");
    let agent = TestAgent::start_in(
        dir.path(),
        &format!("client {{\n  job_gc_children = {KEEP}\n}}\n"),
    );
    let runs = dir.path().join("runs");
    // `prohibit_overlap`: a launch happens only once every earlier child finished, so right
    // after it the parent has its `KEEP` newest finished children and the new one: never more
    // than `KEEP + 1`, whenever the count is read.
    agent.run_hcl(&periodic_job(
        "churn",
        true,
        &format!("echo $NOMAD_JOB_ID >> {}", runs.display()),
    ));
    let mut seen = std::collections::BTreeSet::new();
    wait_for(WAIT, "many more launches than children kept", || {
        let c = children(&agent, "churn");
        assert!(c.len() <= KEEP + 1, "{c:?}");
        seen.extend(c);
        (lines(&runs) >= KEEP + 4 && seen.len() >= KEEP + 4).then_some(())
    });
    // The forgotten were the oldest: the ones kept are the newest launched.
    let kept = children(&agent, "churn");
    let oldest = seen.iter().take(seen.len() - KEEP - 1).collect::<Vec<_>>();
    assert!(
        kept.iter().all(|k| !oldest.contains(&k)),
        "{kept:?} {oldest:?}"
    );
    let (code, body) = agent.request("DELETE", "/v1/job/churn", None);
    assert_eq!(code, 200, "{body}");
    let kept = children(&agent, "churn");
    assert!(kept.len() <= KEEP + 1, "{kept:?}");

    // A child that still runs is never forgotten; `PUT /v1/system/gc` forgets the finished.
    agent.run_hcl(
        r#"
job "slow" {
  type = "batch"
  parameterized {}
  group "g" {
    task "t" {
      driver = "raw_exec"
      kill_timeout = "1s"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
    }
  }
}"#,
    );
    let out = stdout(&agent.cli(&["job", "dispatch", "slow"]));
    let running = out
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    wait_for(WAIT, "the dispatched child running", || {
        let allocs = agent.allocs(&enc(&running));
        (allocs.first()?["ClientStatus"] == "running").then_some(())
    });
    wait_for(WAIT, "the periodic children complete", || {
        kept.iter().all(|k| complete(&agent, k)).then_some(())
    });
    let (code, body) = agent.request("PUT", "/v1/system/gc", None);
    assert_eq!(code, 200, "{body}");
    assert!(children(&agent, "churn").is_empty());
    assert_eq!(children(&agent, "slow"), vec![running.clone()]);
    let (code, _) = agent.request("GET", &format!("/v1/job/{}", enc(&kept[0])), None);
    assert_eq!(code, 404, "a forgotten child is gone");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_run_as_a_user_owns_its_payload() {
    // The task reads its payload by a path relative to its directory (its working directory):
    // the test's temporary directory above it is root's, 0700.
    require_root();
    let dir = TempDir::new("dispatch-user");
    let agent = TestAgent::start_in(dir.path(), "");
    agent.run_hcl(
        r#"
job "mine" {
  type = "batch"
  parameterized { payload = "required" }
  group "g" {
    restart { attempts = 0  mode = "fail" }
    task "t" {
      driver = "raw_exec"
      user = "nobody"
      dispatch_payload { file = "in.txt" }
      config {
        command = "/bin/sh"
        args    = ["-c", "id -un; stat -c '%U %a' local/in.txt; cat local/in.txt"]
      }
    }
  }
}"#,
    );
    let payload = dir.path().join("in.txt");
    std::fs::write(&payload, "only for nobody").unwrap();
    let out = stdout(&agent.cli(&["job", "dispatch", "mine", payload.to_str().unwrap()]));
    let child = out
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let alloc = wait_for(WAIT, "the dispatched task done", || {
        let allocs = agent.allocs(&enc(&child));
        let a = allocs.first()?;
        matches!(a["ClientStatus"].as_str(), Some("complete" | "failed"))
            .then(|| a["ID"].as_str().unwrap().to_string())
    });
    // The keeper drains the task's pipes after it reported the exit: wait for the whole output.
    let want = "nobody\nnobody 600\nonly for nobody";
    let logs = wait_for(WAIT, "the dispatched task's output", || {
        let logs = stdout(&agent.cli(&["alloc", "logs", &alloc, "t"]));
        (logs.len() >= want.len()).then_some(logs)
    });
    let errs = agent.cli(&["alloc", "logs", "-stderr", &alloc, "t"]);
    assert_eq!(
        logs,
        want,
        "stderr: {}",
        String::from_utf8_lossy(&errs.stdout)
    );
}
