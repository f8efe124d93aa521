//! HCL2 variables, locals and functions in jobspecs, through the real CLI and agent: a jobspec
//! written the way Nomad's documentation writes one (variables with defaults and a validation,
//! a `locals` block, a heredoc, `file()`) run with `-var`, `-var-file` and `NOMAD_VAR_`, whose
//! task prints what it got; the errors that stop a jobspec before anything is registered; and
//! `POST /v1/jobs/parse` with `Variables`.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const JOBSPEC: &str = r#"
variable "greeting" {
  type        = string
  description = "What the task says first."
  default     = "hello"
}

variable "tier" {
  type        = string
  description = "Which deployment this is; no default, so it must be set."
}

variable "region" {
  type    = string
  default = "eu"

  validation {
    condition     = contains(["eu", "us"], var.region)
    error_message = "The region must be eu or us."
  }
}

variable "count" {
  type    = number
  default = 1
}

locals {
  banner = upper("${var.greeting}-${var.tier}")
  motd   = trimspace(file("motd.txt"))
  script = <<-EOF
    echo "banner=${local.banner}"
    echo "motd=${local.motd}"
    echo "region=${var.region}"
    echo "count=${var.count}"
    echo "taskdir=${NOMAD_TASK_DIR}"
    EOF
}

job "vars" {
  type = "batch"

  group "print" {
    count = var.count

    task "print" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", local.script]
      }

      env {
        GREETING = var.greeting
        KERNEL   = "${attr.kernel.name}"
      }
    }
  }
}
"#;

/// Writes the jobspec, its `motd.txt` and a var file into `dir`; returns the jobspec's path.
fn write_files(dir: &Path) -> String {
    std::fs::write(dir.join("vars.nomad.hcl"), JOBSPEC).unwrap();
    std::fs::write(dir.join("motd.txt"), "Welcome to nodeward\n").unwrap();
    std::fs::write(
        dir.join("prod.vars.hcl"),
        "# Values for production.\ntier   = \"staging\"\nregion = \"us\"\n",
    )
    .unwrap();
    dir.join("vars.nomad.hcl").display().to_string()
}

/// The CLI against `agent`, with `env` added to its environment (only the child's).
fn cli(agent: &TestAgent, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(args)
        .env("NODEWARD_ADDR", format!("http://{}", agent.addr));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run nodeward CLI")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn no_jobs(agent: &TestAgent) {
    assert_eq!(agent.get("/v1/jobs"), json!([]));
}

#[test]
fn a_jobspec_runs_with_var_var_file_and_the_environment() {
    let dir = TempDir::new("vars");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = write_files(dir.path());
    let var_file = dir.path().join("prod.vars.hcl").display().to_string();
    // greeting: the environment over the default; region: the var file over the environment;
    // tier: -var over the var file.
    let out = cli(
        &agent,
        &[
            "job",
            "run",
            "-var-file",
            &var_file,
            "-var",
            "tier=prod",
            &spec,
        ],
        &[
            ("NOMAD_VAR_greeting", "hi"),
            ("NOMAD_VAR_region", "eu"),
            ("NOMAD_VAR_unrelated", "ignored"),
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).starts_with("==> Job \"vars\" registered"),
        "{}",
        text(&out.stdout)
    );
    let alloc = agent.alloc_id("vars");
    wait_for(WAIT, "the batch allocation complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
    let (status, log) = agent.request(
        "GET",
        &format!("/v1/client/fs/logs/{alloc}?task=print&type=stdout"),
        None,
    );
    assert_eq!(status, 200);
    let task_dir = agent.data_dir.join(format!("alloc/{alloc}/print/local"));
    assert_eq!(
        log,
        format!(
            "banner=HI-PROD\nmotd=Welcome to nodeward\nregion=us\ncount=1\ntaskdir={}\n",
            task_dir.display()
        )
    );
    // What was registered: the variables' values, and the names only the node knows as written.
    let job = agent.get("/v1/job/vars");
    let task = &job["TaskGroups"][0]["Tasks"][0];
    assert_eq!(task["Env"]["GREETING"], "hi");
    assert_eq!(task["Env"]["KERNEL"], "${attr.kernel.name}");
    let script = task["Config"]["args"][1].as_str().unwrap();
    assert!(
        script.contains("echo \"taskdir=${NOMAD_TASK_DIR}\"\n"),
        "{script}"
    );
}

#[test]
fn a_variable_without_a_value_is_an_error_and_nothing_is_registered() {
    let dir = TempDir::new("unset");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = write_files(dir.path());
    let out = cli(&agent, &["job", "run", &spec], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "Error parsing job file: {spec}: Unset variable \"tier\" (declared at line 8): a used variable must be set or have a default value\n"
        )
    );
    assert!(out.stdout.is_empty());
    no_jobs(&agent);
}

#[test]
fn a_failing_validation_says_its_error_message() {
    let dir = TempDir::new("valid");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = write_files(dir.path());
    let out = cli(
        &agent,
        &[
            "job",
            "run",
            "-var",
            "tier=prod",
            "-var",
            "region=mars",
            &spec,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "Error parsing job file: {spec}: Invalid value for variable \"region\" from -var: The region must be eu or us. (checked by the validation rule at line 17)\n"
        )
    );
    let out = cli(
        &agent,
        &[
            "job",
            "run",
            "-var",
            "tier=prod",
            "-var",
            "regoin=us",
            &spec,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("Undefined variable \"regoin\" set by -var"),
        "{}",
        text(&out.stderr)
    );
    let out = cli(
        &agent,
        &[
            "job",
            "run",
            "-var",
            "tier=prod",
            "-var",
            "count=two",
            &spec,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "Invalid value for variable \"count\" from -var: a number is required, not \"two\""
        ),
        "{}",
        text(&out.stderr)
    );
    let out = cli(&agent, &["job", "run", "-var", "tier", &spec], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .starts_with("invalid -var \"tier\": expected name=value\n\nUsage: nodeward job run"),
        "{}",
        text(&out.stderr)
    );
    no_jobs(&agent);
}

fn parse(agent: &TestAgent, hcl: &str, variables: &str) -> (u16, String) {
    agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({"JobHCL": hcl, "Variables": variables}).to_string()),
    )
}

#[test]
fn the_parse_api_takes_variables_and_keeps_runtime_names() {
    let dir = TempDir::new("parse");
    let agent = TestAgent::start_in(dir.path(), "");
    // The agent reads no file for a caller: the same jobspec without file().
    let hcl = JOBSPEC.replace("trimspace(file(\"motd.txt\"))", "\"no file\"");
    let (status, body) = parse(&agent, &hcl, "tier = \"prod\"\ncount = 2\n");
    assert_eq!(status, 200, "{body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
    let task = &job["TaskGroups"][0]["Tasks"][0];
    assert_eq!(task["Env"]["GREETING"], "hello");
    assert_eq!(task["Env"]["KERNEL"], "${attr.kernel.name}");
    let script = task["Config"]["args"][1].as_str().unwrap();
    assert_eq!(
        script,
        "echo \"banner=HELLO-PROD\"\necho \"motd=no file\"\necho \"region=eu\"\necho \"count=2\"\necho \"taskdir=${NOMAD_TASK_DIR}\"\n"
    );

    let (status, body) = parse(&agent, &hcl, "");
    assert_eq!(
        (status, body.trim_end()),
        (
            400,
            "Unset variable \"tier\" (declared at line 8): a used variable must be set or have a default value"
        )
    );
    let (status, body) = parse(&agent, &hcl, "tier = \"prod\"\nzone = 1\n");
    assert_eq!(
        (status, body.trim_end()),
        (
            400,
            "Undefined variable \"zone\" set by Variables: the jobspec declares no variable \"zone\" (a variable \"zone\" block would)"
        )
    );
    let (status, body) = parse(&agent, JOBSPEC, "tier = \"prod\"\n");
    assert_eq!(status, 400);
    assert!(body.contains("filesystem functions are disabled"), "{body}");
    no_jobs(&agent);
}
