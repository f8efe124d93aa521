//! Task hooks' events through the real agent (docs/decisions.md "Events beyond the
//! specification's table"): a hook that fails before a start emits Nomad's `Task hook failed`,
//! then the `Setup Failure` that fails the task.

use crate::common::*;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A task hook that fails before the start (a `volume_mount` destination that interpolates to a
/// path outside the task directory): Nomad's `Task hook failed` event naming the hook, then the
/// `Setup Failure` that fails the task.
#[test]
fn a_failing_task_hook_emits_task_hook_failed_then_setup_failure() {
    let tmp = TempDir::new("lc-hook-failed");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let agent = TestAgent::start_in(
        tmp.path(),
        &format!(
            "client {{\n  host_volume \"data\" {{ path = \"{}\" }}\n}}\n",
            data.display()
        ),
    );
    let job = agent.run_hcl(
        r#"
job "hookfail" {
  type = "batch"
  group "g" {
    restart { attempts = 0  mode = "fail" }
    volume "data" {
      type   = "host"
      source = "data"
    }
    task "t" {
      driver = "raw_exec"
      volume_mount {
        volume      = "data"
        destination = "${NOMAD_ALLOC_DIR}/data"
      }
      config { command = "true" }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "the task failed", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "dead" && s["Failed"] == true).then_some(())
    });
    let events = agent.events(&alloc, "t");
    let error = format!(
        "volume_mount destination \"${{NOMAD_ALLOC_DIR}}/data\" (interpolated: \"{}/alloc/data\") must be a relative path inside the task directory, without \"..\"",
        agent.data_dir.join("alloc").join(&alloc).display()
    );
    let hook = events.iter().position(|e| e.0 == "Task hook failed");
    let setup = events.iter().position(|e| e.0 == "Setup Failure");
    assert!(
        hook.is_some() && hook.map(|h| h + 1) == setup,
        "{events:#?}"
    );
    assert_eq!(events[hook.unwrap()].1, format!("volumes: {error}"));
    assert_eq!(events[setup.unwrap()].1, error);
    let state = agent.task_state(&alloc, "t");
    let event = &state["Events"][hook.unwrap()];
    assert_eq!(event["Message"], format!("volumes: {error}"), "{event}");
    assert_eq!(event["FailsTask"], false, "{event}");
}
