//! `job validate` and jobspecs on standard input, as Nomad operators' scripts use them
//! (`nomad job validate web.nomad && nomad job run web.nomad`, `render | nomad job run -`),
//! through the real CLI and agent.

use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const WEB: &str = r#"
variable "greeting" {
  type    = string
  default = "hello"
}

job "web" {
  update {
    max_parallel = 1
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo ${var.greeting}; sleep 300"]
      }
    }
  }
}
"#;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn jobs(agent: &TestAgent) -> Vec<Value> {
    agent
        .get("/v1/jobs")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn validate_checks_a_jobspec_and_registers_nothing() {
    let dir = TempDir::new("validate");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = dir.path().join("web.nomad");
    std::fs::write(&spec, WEB).unwrap();
    let out = agent.cli(&["job", "validate", spec.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    // Nomad's lines: the warnings, then success; a warning given by the CLI's parse and the
    // agent's is printed once.
    assert!(
        stdout.starts_with("Job Warnings:\n\"update\" has no effect on one node"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("\"update\" has no effect").count(),
        1,
        "{stdout}"
    );
    assert!(stdout.ends_with("Job validation successful\n"), "{stdout}");
    assert!(jobs(&agent).is_empty(), "validate registered a job");

    // A name Nomad does not know: exit 1, the error with its line, nothing registered.
    let bad = dir.path().join("bad.nomad");
    std::fs::write(
        &bad,
        WEB.replace("driver = \"raw_exec\"", "drivr = \"raw_exec\""),
    )
    .unwrap();
    let out = agent.cli(&["job", "validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown attribute \"drivr\" in task \"t\" at line 14"),
        "{stderr}"
    );
    // A variable without a value names it, as `job run` does.
    let unset = dir.path().join("unset.nomad");
    std::fs::write(&unset, WEB.replace("  default = \"hello\"\n", "")).unwrap();
    let out = agent.cli(&["job", "validate", unset.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("greeting"),
        "{}",
        text(&out.stderr)
    );
    // -var gives it one.
    let out = agent.cli(&[
        "job",
        "validate",
        "-var",
        "greeting=hi",
        unset.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A JSON job that breaks a rule is the agent's answer: Nomad's `Job validation errors:`.
    let json_job = dir.path().join("web.json");
    let job = json!({"Job": {"ID": "web", "TaskGroups": [{"Name": "g", "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
                   "KillTimeout": -1}]}]}});
    std::fs::write(&json_job, job.to_string()).unwrap();
    let out = agent.cli(&["job", "validate", json_job.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("Job validation errors:\n1 error occurred:\n\t* "),
        "{stderr}"
    );
    assert!(stderr.contains("KillTimeout"), "{stderr}");
    assert!(jobs(&agent).is_empty(), "validate registered a job");

    // Without an agent to ask, the CLI checks the JSON job itself: still an error, exit 1.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let out = std::process::Command::new(BIN)
        .args(["job", "validate", json_job.to_str().unwrap()])
        .env("NODEWARD_ADDR", &closed)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Driver configuration not validated"));
    assert!(
        text(&out.stderr).contains("KillTimeout"),
        "{}",
        text(&out.stderr)
    );

    // The API answers in Nomad's shape; malformed JSON is a 400.
    let (status, body) = agent.put_json("/v1/validate/job", &job);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["DriverConfigValidated"], true);
    assert_eq!(
        answer["ValidationErrors"].as_array().unwrap().len(),
        1,
        "{answer}"
    );
    let (status, _) = agent.request("PUT", "/v1/validate/job", Some("{not json"));
    assert_eq!(status, 400);
}

#[test]
fn a_jobspec_is_read_from_standard_input() {
    let dir = TempDir::new("stdin");
    let agent = TestAgent::start_in(dir.path(), "");
    let out = agent.cli_with_stdin(&["job", "validate", "-"], WEB);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = agent.cli_with_stdin(
        &["job", "run", "-detach", "-var", "greeting=from-stdin", "-"],
        WEB,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let alloc = wait_for(WAIT, "the allocation running", || {
        agent
            .allocs("web")
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
    });
    let id = alloc["ID"].as_str().unwrap();
    wait_for(WAIT, "the task's greeting", || {
        let (status, log) = agent.request(
            "GET",
            &format!("/v1/client/fs/logs/{id}?task=t&type=stdout"),
            None,
        );
        (status == 200 && log == "from-stdin\n").then_some(())
    });
    // -json reads JSON from standard input, whatever the name.
    let job = json!({"Job": {"ID": "piped", "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}});
    let out = agent.cli_with_stdin(&["job", "run", "-detach", "-json", "-"], &job.to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(agent.get("/v1/job/piped")["ID"], "piped");
    agent.cli(&["job", "stop", "-purge", "web"]);
}
