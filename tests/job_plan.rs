//! `job plan` and `job run -check-index`, as Nomad operators' scripts use them
//! (`nomad job plan web.nomad`, then `nomad job run -check-index N web.nomad`), through the real
//! CLI and agent.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A job whose task prints `MARK` and sleeps; `{update}` is put in the group.
fn web(mark: &str, update: &str, constraint: &str) -> String {
    format!(
        r#"
job "web" {{
  group "g" {{
    {update}
    {constraint}
    task "t" {{
      driver = "raw_exec"

      env {{
        MARK = "{mark}"
      }}

      config {{
        command = "/bin/sh"
        args    = ["-c", "echo $MARK; sleep 300"]
      }}
    }}
  }}
}}
"#
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn both(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

fn write(dir: &Path, name: &str, spec: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, spec).unwrap();
    path.to_str().unwrap().to_string()
}

fn plan(agent: &TestAgent, file: &str) -> (Option<i32>, String) {
    let out = agent.cli(&["job", "plan", file]);
    (out.status.code(), both(&out))
}

/// The index a plan's output names for `-check-index`.
fn index_in(output: &str) -> String {
    output
        .lines()
        .find_map(|l| l.strip_prefix("Job Modify Index: "))
        .unwrap_or_else(|| panic!("no index in {output}"))
        .to_string()
}

/// The IDs of the job's allocations that should run.
fn running(agent: &TestAgent) -> Vec<String> {
    agent
        .allocs("web")
        .iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .map(|a| a["ID"].as_str().unwrap().to_string())
        .collect()
}

fn wait_running(agent: &TestAgent) -> String {
    wait_for(WAIT, "the allocation to run", || {
        agent
            .allocs("web")
            .iter()
            .find(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
            .map(|a| a["ID"].as_str().unwrap().to_string())
    })
}

fn jobs(agent: &TestAgent) -> Vec<Value> {
    agent
        .get("/v1/jobs")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn plan_shows_what_run_would_change_and_check_index_guards_the_run() {
    let dir = TempDir::new("job-plan");
    let agent = TestAgent::start_in(dir.path(), "");
    let first = write(dir.path(), "web.nomad", &web("a", "", ""));

    // A new job: everything is created; nothing is registered by the plan.
    let (code, out) = plan(&agent, &first);
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "+ Job: \"web\"",
        "+ Task Group: \"g\" (1 create)",
        "  + Task: \"t\" (forces create)",
        "Scheduler dry-run:\n- All tasks successfully allocated.",
        "Job Modify Index: 0",
        &format!("nodeward job run -check-index 0 {first}"),
        "When running the job with the check-index flag, the job will only be run if the",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    assert!(jobs(&agent).is_empty(), "the plan registered the job");

    // The index the plan gave registers the job.
    let run = agent.cli(&["job", "run", "-detach", "-check-index", "0", &first]);
    assert!(run.status.success(), "{}", both(&run));
    let alloc = wait_running(&agent);
    let detail = agent.get("/v1/job/web");
    let registered = detail["JobModifyIndex"].as_u64().unwrap();
    assert!(registered > 0, "{detail}");

    // The same job again: nothing changes, and the index is the job's.
    let (code, out) = plan(&agent, &first);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with("Job: \"web\"\nTask Group: \"g\" (1 ignore)\n  Task: \"t\"\n"),
        "{out}"
    );
    assert_eq!(index_in(&out), registered.to_string(), "{out}");

    // A changed env: the allocation would be replaced, and the change is shown.
    let changed = write(dir.path(), "changed.nomad", &web("b", "", ""));
    let (code, out) = plan(&agent, &changed);
    assert_eq!(code, Some(1), "{out}");
    for line in [
        "+/- Job: \"web\"",
        "+/- Task Group: \"g\" (1 create/destroy update)",
        "  +/- Task: \"t\" (forces create/destroy update)",
        "    +/- Env[MARK]: \"a\" => \"b\"",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    assert_eq!(
        running(&agent),
        vec![alloc.clone()],
        "the plan replaced the allocation"
    );
    let api = agent.put_json(
        "/v1/job/web/plan",
        &serde_json::json!({"Job": agent.get("/v1/job/web"), "Diff": true}),
    );
    assert_eq!(api.0, 200, "{}", api.1);
    let api: Value = serde_json::from_str(&api.1).unwrap();
    assert_eq!(api["Diff"]["Type"], "None", "{api}");
    assert_eq!(
        api["Annotations"]["DesiredTGUpdates"]["g"]["Ignore"], 1,
        "{api}"
    );

    // A change to `update {}` only: an in-place update, no allocation created or destroyed.
    let update = "update {\n      max_parallel = 2\n    }";
    let in_place = write(dir.path(), "in-place.nomad", &web("a", update, ""));
    let (code, out) = plan(&agent, &in_place);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("+/- Task Group: \"g\" (1 in-place update)"),
        "{out}"
    );
    assert!(out.contains("Update {"), "{out}");
    assert!(out.contains("  Task: \"t\"\n"), "{out}");

    // A stale index is refused, in Nomad's words, and nothing is registered.
    let stale = registered - 1;
    let run = agent.cli(&["job", "run", "-check-index", &stale.to_string(), &changed]);
    assert_eq!(run.status.code(), Some(1), "{}", both(&run));
    assert_eq!(
        text(&run.stderr),
        format!(
            "Enforcing job modify index {stale}: job exists with conflicting job modify index: \
             {registered}\nJob not updated\n"
        )
    );
    let run = agent.cli(&["job", "run", "-check-index", "0", &changed]);
    assert_eq!(run.status.code(), Some(1), "{}", both(&run));
    assert!(text(&run.stderr).starts_with("Enforcing job modify index 0: job already exists\n"));
    assert_eq!(agent.get("/v1/job/web")["JobModifyIndex"], registered);
    assert_eq!(running(&agent), vec![alloc.clone()]);

    // The index the plan of the change gave registers the change, and then is stale.
    let (_, out) = plan(&agent, &changed);
    let index = index_in(&out);
    let run = agent.cli(&["job", "run", "-detach", "-check-index", &index, &changed]);
    assert!(run.status.success(), "{}", both(&run));
    let now = agent.get("/v1/job/web")["JobModifyIndex"].as_u64().unwrap();
    assert!(now > registered, "{now} after {registered}");
    wait_for(WAIT, "the allocation to be replaced", || {
        (!running(&agent).contains(&alloc)).then_some(())
    });
    let run = agent.cli(&["job", "run", "-check-index", &index, &first]);
    assert_eq!(run.status.code(), Some(1), "{}", both(&run));

    // A job that does not exist is refused for any other index than 0.
    let other = write(
        dir.path(),
        "other.nomad",
        &web("a", "", "").replace("\"web\"", "\"other\""),
    );
    let run = agent.cli(&["job", "run", "-check-index", "5", &other]);
    assert_eq!(run.status.code(), Some(1), "{}", both(&run));
    assert!(text(&run.stderr).starts_with("Enforcing job modify index 5: job does not exist\n"));
    assert_eq!(jobs(&agent).len(), 1);

    // A plan's errors exit 255, as Nomad's.
    let out = agent.cli(&[
        "job",
        "plan",
        &dir.path().join("missing.nomad").to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(255), "{}", both(&out));
}

#[test]
fn plan_of_a_job_this_node_cannot_place_says_why() {
    let dir = TempDir::new("job-plan-fail");
    let agent = TestAgent::start_in(dir.path(), "");
    let constraint =
        "constraint {\n      attribute = \"${attr.kernel.name}\"\n      value = \"windows\"\n    }";
    let file = write(dir.path(), "web.nomad", &web("a", "", constraint));
    let (code, out) = plan(&agent, &file);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "Scheduler dry-run:\n- WARNING: Failed to place all allocations.\n  \
             Task Group \"g\" (failed to place 1 allocation):\n    \
             * Constraint \"${attr.kernel.name} = windows\": 1 nodes excluded by filter\n\n"
        ),
        "{out}"
    );
    assert!(jobs(&agent).is_empty(), "the plan registered the job");
}
