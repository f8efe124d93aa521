//! The jobspec rule (spec jobspec.md) through the real CLI and agent: a jobspec written the way
//! Nomad's documentation writes a typical job — `update`, `migrate`, `reschedule`, `service`,
//! `ephemeral_disk`, `meta` at three levels and a task directly in `job` — runs with the merged
//! `NOMAD_META_*` in its environment and `${meta.x}` interpolated, and `job run` prints one warning per
//! block (or `ephemeral_disk`'s `sticky`) that has no effect on one node; a `template` is refused with its line and nothing is
//! registered; a name Nomad does not know is still an error with its line; the JSON a Nomad
//! client would send for the same job registers the same job.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const TYPICAL: &str = r#"
job "docs" {
  type        = "batch"
  region      = "eu"
  namespace   = "default"
  priority    = 60
  all_at_once = false

  meta {
    owner = "ops"
    tier  = "job"
  }

  update {
    max_parallel     = 1
    min_healthy_time = "10s"
    healthy_deadline = "3m"
  }

  migrate {
    max_parallel = 1
  }

  group "cache" {
    meta {
      tier = "group"
      zone = "a"
    }

    reschedule {
      delay          = "30s"
      delay_function = "exponential"
      max_delay      = "1h"
      unlimited      = true
    }

    ephemeral_disk {
      size   = 10
      sticky = false
    }

    service {
      name = "cache"
      port = "db"
    }

    task "redis" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo grouped=$NOMAD_GROUP_NAME ${meta.tier} $NOMAD_META_zone $NOMAD_META_OWNER $NOMAD_META_rack"]
      }

      meta {
        tier = "task"
        rack = 7
      }
    }
  }

  task "lone" {
    driver = "raw_exec"

    config {
      command = "/bin/sh"
      args    = ["-c", "echo group=$NOMAD_GROUP_NAME"]
    }
  }
}
"#;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The task's output once it has a whole line (the keeper drains a task's pipes after it reported
/// the exit).
fn stdout_of(agent: &TestAgent, alloc: &str, task: &str) -> String {
    wait_log_lines(agent, alloc, task, "stdout", 1)
}

fn complete(agent: &TestAgent, alloc: &str) {
    wait_for(WAIT, "the batch allocation complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
}

#[test]
fn a_typical_nomad_job_runs_with_its_warnings_printed() {
    let dir = TempDir::new("rule");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("docs.nomad.hcl");
    std::fs::write(&spec, TYPICAL).unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let warnings = [
        "\"update\" has no effect on one node",
        "\"migrate\" has no effect on one node",
        "\"reschedule\" has no effect on one node",
        "\"ephemeral_disk.sticky\" has no effect on one node",
        "\"service\" has no effect on one node: services are not registered on this node",
    ];
    assert!(stdout.starts_with("Job Warnings:\n"), "{stdout}");
    for w in warnings {
        assert_eq!(stdout.matches(w).count(), 1, "{w} once in:\n{stdout}");
    }

    // The task written in the job ran in a group of its own name.
    let job = agent.get("/v1/job/docs");
    let groups: Vec<&str> = job["TaskGroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["Name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["cache", "lone"]);
    let allocs = agent.allocs("docs");
    assert_eq!(allocs.len(), 2, "{allocs:?}");
    for alloc in &allocs {
        let id = alloc["ID"].as_str().unwrap();
        complete(&agent, id);
        match alloc["TaskGroup"].as_str().unwrap() {
            "lone" => assert_eq!(stdout_of(&agent, id, "lone"), "group=lone\n"),
            // The task's meta over the group's over the job's, as written and upper-cased,
            // and `${meta.x}` interpolated by the agent.
            "cache" => assert_eq!(
                stdout_of(&agent, id, "redis"),
                "grouped=cache task a ops 7\n"
            ),
            other => panic!("group {other}"),
        }
    }
}

#[test]
fn hcl_and_nomad_api_json_give_the_same_job() {
    let dir = TempDir::new("rule-json");
    let agent = TestAgent::start_in(dir.path(), "");
    let (status, from_hcl) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({ "JobHCL": TYPICAL }).to_string()),
    );
    assert_eq!(status, 200, "{from_hcl}");
    let from_hcl: Value = serde_json::from_str(&from_hcl).unwrap();
    // What a Nomad client sends for the same job: the no-effect blocks as Nomad's API fields.
    let task = |name: &str, script: &str| {
        json!({"Name": name, "Driver": "raw_exec",
               "Config": {"command": "/bin/sh", "args": ["-c", script]}})
    };
    let mut redis = task(
        "redis",
        "echo grouped=$NOMAD_GROUP_NAME ${meta.tier} $NOMAD_META_zone $NOMAD_META_OWNER $NOMAD_META_rack",
    );
    redis["Meta"] = json!({"tier": "task", "rack": "7"});
    let nomad = json!({"Job": {
        "ID": "docs", "Name": "docs", "Type": "batch", "Region": "eu", "Namespace": "default",
        "Priority": 60, "AllAtOnce": false,
        "Meta": {"owner": "ops", "tier": "job"},
        "Update": {"MaxParallel": 1, "MinHealthyTime": 10_000_000_000u64,
                   "HealthyDeadline": 180_000_000_000u64},
        "Migrate": {"MaxParallel": 1},
        "TaskGroups": [
            {"Name": "cache", "Count": 1,
             "ReschedulePolicy": {"Delay": 30_000_000_000u64, "DelayFunction": "exponential",
                                  "MaxDelay": 3_600_000_000_000u64, "Unlimited": true},
             "EphemeralDisk": {"SizeMB": 10, "Sticky": false, "Migrate": false},
             "Services": [{"Name": "cache", "PortLabel": "db"}],
             "Meta": {"tier": "group", "zone": "a"},
             "Tasks": [redis]},
            {"Name": "lone", "Count": 1, "Tasks": [task("lone", "echo group=$NOMAD_GROUP_NAME")]}
        ]
    }});
    let (status, body) = agent.put_json("/v1/jobs", &nomad);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let warnings = answer["Warnings"].as_str().unwrap();
    // The same no-effect names as from HCL, each once with its reason (a false `Sticky` is how
    // Go writes "not set": no warning).
    for name in ["update", "migrate", "reschedule", "service"] {
        let w = format!("\"{name}\" has no effect on one node");
        assert_eq!(warnings.matches(&w).count(), 1, "{w} in {warnings}");
    }
    assert!(!warnings.contains("not supported"), "{warnings}");
    let registered = agent.get("/v1/job/docs");
    assert_eq!(registered["TaskGroups"], from_hcl["TaskGroups"]);
    assert_eq!(registered["TaskGroups"][0]["EphemeralDisk"]["SizeMB"], 10);
    assert_eq!(registered["Type"], from_hcl["Type"]);
    assert_eq!(registered["Meta"], from_hcl["Meta"]);
    assert_eq!(
        (&registered["Region"], &registered["Priority"]),
        (&json!("eu"), &json!(60))
    );
    assert_eq!(
        (&from_hcl["Region"], &from_hcl["Priority"]),
        (&json!("eu"), &json!(60))
    );
    assert_eq!(registered["Meta"], json!({"owner": "ops", "tier": "job"}));
    // The no-effect blocks are kept in the job as registered, in Nomad's API shape, and the
    // HCL's are what Nomad's client sends for them.
    for (job, from) in [(&registered, "JSON"), (&from_hcl, "HCL")] {
        assert_eq!(job["Update"], nomad["Job"]["Update"], "{from}");
        assert_eq!(job["Migrate"], json!({"MaxParallel": 1}), "{from}");
        let group = &job["TaskGroups"][0];
        assert_eq!(
            group["ReschedulePolicy"], nomad["Job"]["TaskGroups"][0]["ReschedulePolicy"],
            "{from}"
        );
        assert_eq!(
            group["Services"],
            json!([{"Name": "cache", "PortLabel": "db"}]),
            "{from}"
        );
    }
}

/// What a registered job keeps of its no-effect blocks is in the state file: a SIGKILL of the
/// agent and a start on the same data directory show them unchanged.
#[test]
fn no_effect_blocks_are_kept_across_an_agent_restart() {
    let dir = TempDir::new("rule-kept");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("docs.nomad.hcl");
    std::fs::write(&spec, TYPICAL).unwrap();
    let out = agent.cli(&["job", "run", "-detach", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = agent.get("/v1/job/docs");
    assert_eq!(
        before["Update"],
        json!({"MaxParallel": 1, "MinHealthyTime": 10_000_000_000u64,
               "HealthyDeadline": 180_000_000_000u64})
    );
    agent.stop_with(libc::SIGKILL, WAIT);
    agent.restart();
    let after = agent.get("/v1/job/docs");
    for key in ["Update", "Migrate"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(
        after["TaskGroups"][0]["ReschedulePolicy"],
        before["TaskGroups"][0]["ReschedulePolicy"]
    );
    assert_eq!(
        after["TaskGroups"][0]["Services"],
        before["TaskGroups"][0]["Services"]
    );
    // `job inspect` prints them too.
    let out = agent.cli(&["job", "inspect", "docs"]);
    let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspect["Job"]["Update"], before["Update"]);
}

#[test]
fn a_template_is_refused_with_its_line_and_nothing_is_registered() {
    let dir = TempDir::new("rule-tmpl");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("tmpl.nomad.hcl");
    std::fs::write(
        &spec,
        "job \"tmpl\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      \
         config { command = \"true\" }\n\n      template {\n        data        = \"port={{ env \\\"NOMAD_PORT_http\\\" }}\"\n        \
         destination = \"local/app.conf\"\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "block \"template\" in task \"t\" at line 7 is refused: this node does not support \
             templates yet"
        ),
        "{stderr}"
    );
    // The API refuses it the same way, with a 400.
    let (status, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({ "JobHCL": std::fs::read_to_string(&spec).unwrap() }).to_string()),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("at line 7"), "{body}");
    let (status, body) = agent.put_json(
        "/v1/jobs",
        &json!({"Job": {"ID": "tmpl", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "true"},
            "Templates": [{"EmbeddedTmpl": "x", "DestPath": "local/x"}]}]}]}}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("TaskGroups[0].Tasks[0].Templates"), "{body}");
    assert_eq!(agent.get("/v1/jobs"), json!([]));
}

#[test]
fn a_name_nomad_does_not_know_is_still_an_error_with_its_line() {
    let dir = TempDir::new("rule-unknown");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("typo.nomad.hcl");
    let typo = TYPICAL.replace("migrate {", "migrat {");
    let line = 1 + typo.lines().position(|l| l.contains("migrat {")).unwrap();
    std::fs::write(&spec, &typo).unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "unknown block \"migrat\" in job \"docs\" at line {line}"
        )),
        "{stderr}"
    );
    assert_eq!(agent.get("/v1/jobs"), json!([]));
}

/// A stop waits the group's and then the task's `shutdown_delay` before the kill signal, with
/// the task running meanwhile: the test drops a file into the task's directory once it sees the
/// "Waiting for shutdown delay" event, and the task's signal trap finds that file already there.
#[test]
fn shutdown_delay_comes_between_the_kill_decision_and_the_signal() {
    let dir = TempDir::new("rule-delay");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(
        r#"
job "delay" {
  group "g" {
    shutdown_delay = "2s"

    task "t" {
      driver         = "raw_exec"
      shutdown_delay = "3s"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOF
          cd "$NOMAD_TASK_DIR"
          trap 'if [ -e seen ]; then echo signal-after-seen >> out; else echo signal-before-seen >> out; fi; exit 0' INT
          echo started > out
          while true; do sleep 0.1; done
          EOF
        ]
      }
    }
  }
}
"#,
    );
    let alloc = agent.alloc_id(&job);
    let local = agent.data_dir.join(format!("alloc/{alloc}/t/local"));
    wait_for(WAIT, "the task to start", || {
        std::fs::read_to_string(local.join("out"))
            .ok()
            .filter(|s| s.starts_with("started"))
    });
    let (status, body) = agent.request("DELETE", "/v1/job/delay", None);
    assert_eq!(status, 200, "{body}");
    wait_for(WAIT, "the shutdown delay event", || {
        agent
            .events(&alloc, "t")
            .iter()
            .any(|(t, _)| t == "Waiting for shutdown delay")
            .then_some(())
    });
    std::fs::write(local.join("seen"), "").unwrap();
    wait_for(WAIT, "the task to be killed", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(local.join("out")).unwrap(),
        "started\nsignal-after-seen\n"
    );
    let events = agent.events(&alloc, "t");
    let at = |ty: &str| events.iter().position(|(t, _)| t == ty);
    let waiting = at("Waiting for shutdown delay").unwrap();
    assert!(at("Killing").unwrap() < waiting, "{events:?}");
    assert!(waiting < at("Killed").unwrap(), "{events:?}");
    assert_eq!(
        events[waiting].1,
        "Waiting for shutdown_delay of 5s before killing the task."
    );
    // Kept in the job in Nomad's shape.
    let registered = agent.get("/v1/job/delay");
    assert_eq!(
        registered["TaskGroups"][0]["ShutdownDelay"],
        2_000_000_000u64
    );
    assert_eq!(
        registered["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"],
        3_000_000_000u64
    );
}

/// The forms the real-world figure found refused (docs/jobspec.md "Measured"), written as
/// Nomad's own e2e jobspecs write them: a number as a string, `memory_max` (the hard limit) and
/// the deprecated `disk` (no effect) in `resources`, and a parameterized sysbatch job.
const NOMADS_OWN_FORMS: &str = r#"
job "forms" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ran"]
      }
      resources {
        cpu        = "500"
        memory     = 64
        memory_max = 128
        disk       = 50
      }
    }
  }
}
"#;

#[test]
fn forms_found_in_nomads_own_jobspecs_run() {
    let dir = TempDir::new("forms");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("forms.nomad");
    std::fs::write(&spec, NOMADS_OWN_FORMS).unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let w = "\"disk\" has no effect on one node";
    assert_eq!(stdout.matches(w).count(), 1, "{w} once in:\n{stdout}");
    assert!(!stdout.contains("memory_max"), "{stdout}");
    let job = agent.get("/v1/job/forms");
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"], 500);
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMaxMB"],
        128
    );
    let allocs = agent.allocs("forms");
    let id = allocs[0]["ID"].as_str().unwrap();
    complete(&agent, id);
    assert_eq!(stdout_of(&agent, id, "t"), "ran\n");

    // A sysbatch job is a template of dispatched children, as in Nomad; a service job is not.
    let sysbatch = NOMADS_OWN_FORMS.replace("\"forms\"", "\"sb\"").replace(
        "type = \"batch\"",
        "type = \"sysbatch\"\n  parameterized {}",
    );
    let spec = dir.path().join("sb.nomad");
    std::fs::write(&spec, &sysbatch).unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(agent.allocs("sb").is_empty());
    std::fs::write(&spec, sysbatch.replace("sysbatch", "service")).unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(
            "Parameterized job can only be used with \"batch\" or \"sysbatch\" scheduler"
        ),
        "{}",
        text(&out.stderr)
    );
}

/// The docker driver's `auth_soft_fail` is accepted from HCL and JSON and kept (it has no effect:
/// nodeward pulls without credentials), without a warning.
#[test]
fn docker_auth_soft_fail_is_accepted_and_kept() {
    let dir = TempDir::new("rule-auth");
    let agent = TestAgent::start_in(dir.path(), "");
    let hcl = r#"
job "pub" {
  group "g" {
    task "web" {
      driver = "docker"
      config {
        image          = "busybox:1"
        auth_soft_fail = true
      }
    }
  }
}
"#;
    let (status, parsed) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({ "JobHCL": hcl }).to_string()),
    );
    assert_eq!(status, 200, "{parsed}");
    let parsed: Value = serde_json::from_str(&parsed).unwrap();
    let config = &parsed["TaskGroups"][0]["Tasks"][0]["Config"];
    assert_eq!(config["auth_soft_fail"], true, "{config}");
    let (status, body) = agent.put_json("/v1/jobs", &json!({ "Job": parsed }));
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert!(
        !answer["Warnings"]
            .as_str()
            .unwrap_or_default()
            .contains("auth_soft_fail"),
        "{answer}"
    );
    let registered = agent.get("/v1/job/pub");
    assert_eq!(
        registered["TaskGroups"][0]["Tasks"][0]["Config"]["auth_soft_fail"],
        true
    );
}

/// A new version that changes only no-effect settings (`update`, a `service`) is Nomad's in-place
/// update: the job's version and settings change, its allocation runs on untouched and belongs to
/// the new version at once (its `Job` and `JobVersion`), also across a kill -9 of the agent; a
/// change to the task still replaces the allocation.
#[test]
fn a_change_to_no_effect_blocks_only_updates_the_job_in_place() {
    let dir = TempDir::new("rule-inplace");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("web.nomad.hcl");
    let job = |update: &str, extra: &str, env: &str| {
        format!(
            "job \"web\" {{\n  update {{ {update} }}\n  group \"g\" {{\n{extra}\n    task \"t\" {{\n      \
             driver = \"raw_exec\"\n      config {{\n        command = \"/bin/sh\"\n        \
             args = [\"-c\", \"sleep 300\"]\n      }}\n      env {{ MARK = \"{env}\" }}\n    }}\n  }}\n}}\n"
        )
    };
    let run = |agent: &TestAgent, text: &str| {
        std::fs::write(&spec, text).unwrap();
        let out = agent.cli(&["job", "run", "-detach", spec.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text_of(&out.stderr));
    };
    let running = |agent: &TestAgent| -> Vec<String> {
        agent
            .allocs("web")
            .iter()
            .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
            .map(|a| a["ID"].as_str().unwrap().to_string())
            .collect()
    };
    let started = |agent: &TestAgent, id: &str| -> usize {
        let a = agent.get(&format!("/v1/allocation/{id}"));
        a["TaskStates"]["t"]["Events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["Type"] == "Started")
            .count()
    };
    // The allocation's job and its version, as `GET /v1/allocation/:id` shows them.
    let version_of = |alloc: &Value| {
        (
            alloc["JobVersion"].clone(),
            alloc["Job"]["Version"].clone(),
            alloc["Job"]["Update"].clone(),
            alloc["Job"]["TaskGroups"][0]["Services"].clone(),
        )
    };
    let new_version = (
        json!(1),
        json!(1),
        json!({"MaxParallel": 2}),
        json!([{"Name": "web"}]),
    );
    run(&agent, &job("max_parallel = 1", "", "a"));
    let first = wait_for(WAIT, "the allocation running", || running(&agent).pop());
    assert_eq!(agent.get("/v1/job/web")["Version"], 0);
    let placed = agent.get(&format!("/v1/allocation/{first}"));
    assert_eq!(
        version_of(&placed),
        (json!(0), json!(0), json!({"MaxParallel": 1}), Value::Null)
    );

    run(
        &agent,
        &job("max_parallel = 2", "    service { name = \"web\" }", "a"),
    );
    let registered = agent.get("/v1/job/web");
    assert_eq!(registered["Version"], 1);
    assert_eq!(registered["Update"], json!({"MaxParallel": 2}));
    assert_eq!(
        registered["TaskGroups"][0]["Services"],
        json!([{"Name": "web"}])
    );
    assert_eq!(running(&agent), std::slice::from_ref(&first));
    assert_eq!(started(&agent, &first), 1, "the task was restarted");
    let allocs = agent.allocs("web");
    assert_eq!(allocs.len(), 1, "{allocs:?}");
    assert_eq!(allocs[0]["JobVersion"], 1, "{allocs:?}");
    // At once, without an agent restart: the allocation is the new version's.
    let updated = agent.get(&format!("/v1/allocation/{first}"));
    assert_eq!(version_of(&updated), new_version);
    let pid = updated["TaskStates"]["t"]["PID"].clone();
    assert!(pid.is_i64(), "{updated}");
    // The state file written with the job has it too.
    let on_disk = state_on_disk(&agent.data_dir).unwrap();
    let record = on_disk["Allocations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["ID"] == first.as_str())
        .unwrap()
        .clone();
    assert_eq!(record["JobVersion"], 1, "{record}");
    assert!(
        record.get("Job").is_none(),
        "a copy of the old job: {record}"
    );

    // Across a SIGKILL of the agent the allocation is the new version's.
    agent.stop_with(libc::SIGKILL, WAIT);
    agent.restart();
    let alloc = wait_for(WAIT, "the allocation re-attached", || {
        let a = agent.get(&format!("/v1/allocation/{first}"));
        (a["ClientStatus"] == "running").then_some(a)
    });
    assert_eq!(version_of(&alloc), new_version);
    assert_eq!(
        alloc["TaskStates"]["t"]["PID"], pid,
        "the task was replaced"
    );
    assert_eq!(started(&agent, &first), 1, "the task was restarted");
    assert_eq!(agent.get("/v1/job/web")["Version"], 1);

    // A change to the task is a new allocation, as before.
    run(
        &agent,
        &job("max_parallel = 2", "    service { name = \"web\" }", "b"),
    );
    let second = wait_for(WAIT, "the new allocation running", || {
        running(&agent).into_iter().find(|id| *id != first)
    });
    assert_ne!(second, first);
    assert_eq!(agent.get("/v1/job/web")["Version"], 2);
    agent.cli(&["job", "stop", "-purge", "web"]);
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Nomad 1.10's attributes inside implemented blocks, written as Nomad's docs write them: a
/// group volume's `sticky`, a mount's `propagation_mode = "private"` (what this node does) and
/// `selinux_label`, a restart's `render_templates`, a network's `mbits` and `cni { args }`. The
/// job runs with the volume mounted, `job run` prints one warning for each that has no effect,
/// and `GET /v1/job/:id` keeps the kept ones in Nomad's shape; a propagation this node does not
/// do is refused with its line, and nothing is registered.
#[test]
fn nomad_1_10_attributes_in_implemented_blocks_run_warn_or_are_refused() {
    let dir = TempDir::new("rule-attrs");
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("hello"), "from the volume\n").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n  host_volume \"certs\" {{\n    path = \"{}\"\n  }}\n}}\n",
            vol.display()
        ),
    );
    let spec = |propagation: &str| {
        format!(
            r#"
job "docs" {{
  type = "batch"

  group "example" {{
    network {{
      mbits = 10
      port "http" {{}}
      cni {{
        args = {{
          "nomad.region" = "global"
        }}
      }}
    }}

    restart {{
      attempts         = 1
      render_templates = true
    }}

    volume "certs" {{
      type      = "host"
      source    = "certs"
      read_only = true
      sticky    = true
    }}

    task "example" {{
      driver = "raw_exec"

      volume_mount {{
        volume           = "certs"
        destination      = "certs"
        propagation_mode = "{propagation}"
        selinux_label    = "z"
      }}

      config {{
        command = "/bin/cat"
        args    = ["certs/hello"]
      }}
    }}
  }}
}}
"#
        )
    };
    let file = dir.path().join("docs.nomad.hcl");
    std::fs::write(&file, spec("private")).unwrap();
    let out = agent.cli(&["job", "run", file.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("Job Warnings:\n"), "{stdout}");
    for name in [
        "restart.render_templates",
        "volume.sticky",
        "volume_mount.selinux_label",
        "network.mbits",
        "network.cni",
    ] {
        let w = format!("\"{name}\" has no effect on one node: ");
        assert_eq!(stdout.matches(&w).count(), 1, "{w} once in:\n{stdout}");
    }
    assert!(!stdout.contains("propagation"), "{stdout}");
    let alloc = agent.alloc_id("docs");
    complete(&agent, &alloc);
    assert_eq!(stdout_of(&agent, &alloc, "example"), "from the volume\n");

    let job = agent.get("/v1/job/docs");
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Volumes"]["certs"]["Sticky"], true, "{group}");
    assert_eq!(group["RestartPolicy"]["RenderTemplates"], true, "{group}");
    assert_eq!(group["Networks"][0]["MBits"], 10, "{group}");
    let mount = &group["Tasks"][0]["VolumeMounts"][0];
    assert_eq!(mount["PropagationMode"], "private", "{mount}");
    assert_eq!(mount["SELinuxLabel"], "z", "{mount}");

    std::fs::write(
        &file,
        spec("bidirectional").replace("job \"docs\"", "job \"bidi\""),
    )
    .unwrap();
    let out = agent.cli(&["job", "run", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "attribute \"propagation_mode\" in volume_mount block of task \"example\" at line 34: \
             propagation_mode \"bidirectional\" is refused: this node mounts volumes with \
             propagation mode \"private\" only for now"
        ),
        "{stderr}"
    );
    let (status, _) = agent.request("GET", "/v1/job/bidi", None);
    assert_eq!(status, 404);
}
