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
    let log = wait_log_lines(&agent, &alloc, "print", "stdout", 5);
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

/// `dynamic` blocks and `try`/`convert`/`cidrhost` evaluate in the agent's evaluation child as
/// in the CLI; `fileset` is a filesystem function, refused there.
#[test]
fn the_parse_api_expands_dynamic_blocks() {
    let dir = TempDir::new("dynamic");
    let agent = TestAgent::start_in(dir.path(), "");
    let hcl = r#"
variable "ports" {
  default = ["http", "admin"]
}
job "dyn" {
  group "g" {
    network {
      dynamic "port" {
        for_each = var.ports
        labels   = [port.value]
        content {
          to = 8000 + port.key
        }
      }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = convert([try(var.nope_is_caught[0], 5), cidrhost("10.1.0.0/16", 300)], list(string))
      }
    }
  }
}
"#;
    // As in Nomad's HCL, try() passes over a reference to an undeclared variable.
    let (status, body) = parse(&agent, hcl, "");
    assert_eq!(status, 200, "{body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Config"]["args"],
        json!(["5", "10.1.1.44"])
    );
    let hcl = hcl.replace("var.nope_is_caught[0]", "var.ports[9]");
    let (status, body) = parse(&agent, &hcl, "");
    assert_eq!(status, 200, "{body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    let group = &job["TaskGroups"][0];
    let ports = &group["Networks"][0]["DynamicPorts"];
    assert_eq!(ports[0]["Label"], "http");
    assert_eq!(ports[0]["To"], 8000);
    assert_eq!(ports[1]["Label"], "admin");
    assert_eq!(ports[1]["To"], 8001);
    assert_eq!(
        group["Tasks"][0]["Config"]["args"],
        json!(["5", "10.1.1.44"])
    );
    let files = hcl.replace(
        "cidrhost(\"10.1.0.0/16\", 300)",
        "length(fileset(\".\", \"*\"))",
    );
    let (status, body) = parse(&agent, &files, "");
    assert_eq!(status, 400);
    assert!(
        body.contains("fileset(): filesystem functions are disabled"),
        "{body}"
    );
    no_jobs(&agent);
}

/// The endpoint evaluates in a child process of the agent: what it answers is the job that
/// evaluating in this process gives, byte for byte once parsed.
#[test]
fn a_parse_through_the_evaluation_child_gives_the_in_process_job() {
    let dir = TempDir::new("child");
    let agent = TestAgent::start_in(dir.path(), "");
    let hcl = JOBSPEC.replace("trimspace(file(\"motd.txt\"))", "\"no file\"");
    let body = json!({"JobHCL": hcl, "Variables": "tier = \"prod\"\n"}).to_string();
    let (status, answer) = agent.request("POST", "/v1/jobs/parse", Some(&body));
    assert_eq!(status, 200, "{answer}");
    let in_process =
        nodeward::api::routes::ParseRequest::parse_job(body.as_bytes()).expect("in-process parse");
    assert_eq!(
        serde_json::from_str::<Value>(&answer).unwrap(),
        serde_json::to_value(&in_process).unwrap()
    );
}

/// Doubles a list thirty times: 2^30 strings, far more than the child's address space holds.
fn memory_bomb() -> String {
    let mut locals = String::from("  a0 = [\"0123456789abcdef\"]\n");
    for i in 1..=30 {
        locals.push_str(&format!(
            "  a{i} = concat(local.a{}, local.a{})\n",
            i - 1,
            i - 1
        ));
    }
    format!("locals {{\n{locals}}}\n{}", bomb_job("length(local.a30)"))
}

/// 2^30 steps of three nested `for` expressions, each list short: CPU time, little memory.
const CPU_BOMB: &str = "length([for i in range(1024) : length([for j in range(1024) : length([for k in range(1024) : k])])])";

fn bomb_job(value: &str) -> String {
    format!(
        "job \"bomb\" {{\n  meta {{\n    n = {value}\n  }}\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"/bin/true\"\n      }}\n    }}\n  }}\n}}\n"
    )
}

/// No jobspec sent to the API can take the agent's memory or CPU: the evaluation's child hits its
/// limit and the caller gets a 400 that names it; the agent answers and runs jobs as before, and
/// no evaluation child of it is left.
#[test]
fn jobspecs_built_to_exhaust_the_agent_are_refused_and_it_carries_on() {
    let dir = TempDir::new("bombs");
    let agent = TestAgent::start_in(dir.path(), "");
    let (status, body) = parse(&agent, &memory_bomb(), "");
    assert_eq!(
        (status, body.trim_end()),
        (
            400,
            "the jobspec's evaluation used more than 512 MiB of memory"
        )
    );
    let (status, body) = parse(&agent, &bomb_job(CPU_BOMB), "");
    // Which limit comes first depends on how busy the machine's CPUs are: 5 s of CPU time, or
    // 10 s of wall-clock time for a child that gets less than half a CPU.
    assert_eq!(status, 400, "{body}");
    assert!(
        [
            "the jobspec's evaluation used more than 5 s of CPU time",
            "the jobspec's evaluation did not end within 10 s"
        ]
        .contains(&body.trim_end()),
        "{body}"
    );
    assert_eq!(agent.request("GET", "/v1/agent/health", None).0, 200);
    let leftovers: Vec<i32> = pids_with(nodeward::sandbox::CHILD_ARG)
        .into_iter()
        .filter(|pid| parent_of(*pid) == Some(agent.pid()))
        .collect();
    assert_eq!(leftovers, Vec::<i32>::new());
    let job = agent.run_hcl(
        r#"job "after" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo still here"]
      }
    }
  }
}
"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "the batch allocation complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
}

/// The parent PID of `pid`, from `/proc/<pid>/stat` (after the command name's closing paren).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
