//! CSI plugin supervision through the real agent: real plugin processes over real unix sockets.

use crate::common::*;
use std::time::{Duration, Instant};

const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");
const WAIT: Duration = Duration::from_secs(60);

/// The project's first seed: a plugin task that never becomes healthy is restarted as a counted
/// failure, and a fresh supervisor runs with the next start.
#[test]
fn plugin_that_never_becomes_healthy_is_restarted_then_given_up() {
    let busybox = which("busybox").expect("busybox is installed by scripts/test.sh");
    let dir = TempDir::new("csi-seed");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(&format!(
        r#"
job "plugin" {{
  group "csi" {{
    restart {{ attempts = 1  interval = "1m"  delay = "1s"  mode = "fail" }}
    task "plugin" {{
      driver = "raw_exec"
      config {{ command = "{busybox}"  args = ["httpd", "-f", "-p", "127.0.0.1:0", "-h", "${{NOMAD_TASK_DIR}}"] }}
      csi_plugin {{ id = "whatever"  type = "monolith"  health_timeout = "5s" }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "plugin task dead", || {
        (agent.task_state(&alloc, "plugin")["State"] == "dead").then_some(())
    });
    // Twelve events happened; the last ten are kept, starting with the first Started.
    let events = assert_seed_events(&agent, &alloc, "plugin", "Exit Code: 130, Signal: 2");
    // The deadline is counted from poststart: never early, and late only by scheduling noise.
    for (i, (t, _, at)) in events.iter().enumerate() {
        if t == "Plugin became unhealthy" {
            let started = events[i - 1].2;
            let waited = Duration::from_nanos((at - started) as u64);
            println!("health deadline: waited {waited:?} for a 5s timeout");
            assert!(waited >= Duration::from_millis(4990), "{waited:?}");
        }
    }
    let state = agent.task_state(&alloc, "plugin");
    assert_eq!(state["Failed"], true);
    assert_eq!(state["Restarts"], 1);
}

fn plugin_job(mode: &str, extra_args: &str, health_timeout: &str) -> String {
    format!(
        r#"
job "csi-{mode}" {{
  group "g" {{
    restart {{ attempts = 0  mode = "fail" }}
    task "plugin" {{
      driver = "raw_exec"
      config {{ command = "{PLUGIN}"  args = ["--mode", "{mode}", "--endpoint", "${{CSI_ENDPOINT}}"{extra_args}] }}
      csi_plugin {{ id = "hostpath"  type = "monolith"  health_timeout = "{health_timeout}" }}
    }}
  }}
}}"#
    )
}

#[test]
fn healthy_plugin_is_registered_on_the_node() {
    let dir = TempDir::new("csi-healthy");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(&plugin_job(
        "socket-after-delay",
        r#", "--delay-ms", "300""#,
        "10s",
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "healthy event", || {
        agent
            .events(&alloc, "plugin")
            .contains(&("Plugin became healthy".into(), "plugin: hostpath".into()))
            .then_some(())
    });
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let node = wait_for(WAIT, "registration", || {
        let n = agent.get(&format!("/v1/node/{}", &node_id[..8]));
        (n["CSINodePlugins"]["hostpath"]["Healthy"] == true
            && n["CSIControllerPlugins"]["hostpath"]["Healthy"] == true)
            .then_some(n)
    });
    let np = &node["CSINodePlugins"]["hostpath"];
    assert_eq!(np["AllocID"], alloc.as_str());
    assert_eq!(np["Provider"], "nodeward.test.csi");
    assert!(np["NodeInfo"]["ID"].is_string(), "{np}");
    let plugins = agent.get("/v1/plugins?type=csi");
    assert!(plugins.to_string().contains("hostpath"), "{plugins}");
    let one = agent.get("/v1/plugin/csi/hostpath");
    assert!(one.to_string().contains(&alloc), "{one}");
    let out = agent.cli(&["plugin", "status"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hostpath"));
    // The task got CSI_ENDPOINT pointing into the allocation's socket directory.
    let sock = agent
        .data_dir
        .join(format!("client/csi/plugins/{alloc}/csi.sock"));
    assert!(sock.exists());
    // Stopping the task deregisters the plugin and removes the socket directory.
    let (s, _) = agent.request("POST", &format!("/v1/allocation/{alloc}/stop"), None);
    assert_eq!(s, 200);
    wait_for(WAIT, "deregistered", || {
        let n = agent.get(&format!("/v1/node/{node_id}"));
        n["CSINodePlugins"].get("hostpath").is_none().then_some(())
    });
    assert!(!sock.parent().unwrap().exists());
}

#[test]
fn kill_while_waiting_for_health_neither_restarts_nor_reports_unhealthy() {
    let dir = TempDir::new("csi-kill");
    let agent = TestAgent::start_in(dir.path(), "");
    // A health deadline far enough that the stop below comes before it however busy the machine.
    let job = agent.run_hcl(&plugin_job("never-socket", "", "10s"));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "started", || {
        (agent.task_state(&alloc, "plugin")["State"] == "running").then_some(())
    });
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    let (s, _) = agent.request("POST", &format!("/v1/allocation/{alloc}/stop"), None);
    assert_eq!(s, 200);
    wait_for(WAIT, "dead", || {
        (agent.task_state(&alloc, "plugin")["State"] == "dead").then_some(())
    });
    // Well past the health deadline: nothing may have come after the kill.
    std::thread::sleep(
        (started + Duration::from_secs(12)).saturating_duration_since(Instant::now()),
    );
    let types: Vec<String> = agent
        .events(&alloc, "plugin")
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert!(
        !types
            .iter()
            .any(|t| t == "Plugin became unhealthy" || t == "Restarting"),
        "{types:?}"
    );
    assert_eq!(types.last().unwrap(), "Killed");
}

#[test]
fn agent_shutdown_during_a_hanging_probe_is_prompt() {
    let dir = TempDir::new("csi-hang");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(&plugin_job("hang", "", "30s"));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "started", || {
        (agent.task_state(&alloc, "plugin")["State"] == "running").then_some(())
    });
    // Let the supervisor get into a probe that the plugin never answers.
    std::thread::sleep(Duration::from_millis(800));
    let t0 = Instant::now();
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(20)),
        Some(0)
    );
    let took = t0.elapsed();
    println!("agent shutdown with a hanging probe took {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

fn which(cmd: &str) -> Option<String> {
    std::env::var("PATH").ok()?.split(':').find_map(|d| {
        let p = std::path::Path::new(d).join(cmd);
        p.exists().then(|| p.display().to_string())
    })
}
