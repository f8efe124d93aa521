//! Dynamic host volumes through the real agent, the CLI and real shell-script plugins.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// An external plugin speaking the DHV protocol. It has no PATH: everything is absolute.
fn write_plugin(dir: &Path, id: &str, create_extra: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        r#"#!/bin/sh
case "$1" in
  fingerprint) echo '{{"version": "0.1.0"}}' ;;
  create)
    {create_extra}
    /bin/mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" || exit 1
    echo "{{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": 50000000}}" ;;
  delete) /bin/rm -rf "$DHV_CREATED_PATH" ;;
  *) echo '{{"error": "unknown operation"}}'; exit 1 ;;
esac
"#
    );
    let p = dir.join(id);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn start(dir: &TempDir) -> TestAgent {
    TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n host_volume_plugin_dir = \"{}\"\n host_volume \"ro\" {{ path = \"/tmp\"  read_only = true }}\n}}\n",
            dir.path().join("plugins").display()
        ),
    )
}

fn create(agent: &TestAgent, name: &str, plugin: &str) -> (u16, Value) {
    let (s, body) = agent.put_json(
        "/v1/volume/host/create",
        &json!({"Volume": {"Name": name, "PluginID": plugin, "Parameters": {"mode": "0755"}}}),
    );
    (
        s,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn host_volumes(agent: &TestAgent) -> Value {
    let id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    agent.get(&format!("/v1/node/{id}"))["HostVolumes"].clone()
}

fn volume_state(agent: &TestAgent, id: &str) -> String {
    agent.get(&format!("/v1/volume/host/{id}"))["State"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn create_shows_in_the_node_survives_restarts_and_deletes() {
    let dir = TempDir::new("vol-e2e");
    write_plugin(&dir.path().join("plugins"), "ext", "");
    let mut agent = start(&dir);
    let spec = dir.path().join("vol.hcl");
    std::fs::write(
        &spec,
        "type = \"host\"\nname = \"test\"\nplugin_id = \"mkdir\"\ncapacity_min = \"10MiB\"\ncapacity_max = \"1GiB\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\nparameters { mode = \"0755\" }\n",
    )
    .unwrap();
    let out = agent.cli(&["volume", "create", spec.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    let first = stdout.lines().next().unwrap();
    assert!(
        first.starts_with("==> Created host volume test with ID "),
        "{stdout}"
    );
    let id = first.rsplit(' ').next().unwrap().to_string();
    assert!(
        stdout.contains(&format!("  ✓ Host volume \"{}\" ready", &id[..8])),
        "{stdout}"
    );
    assert!(stdout.contains("State     = ready"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "Host Path = {}",
            agent.data_dir.join("host_volumes").join(&id).display()
        )),
        "{stdout}"
    );

    let (s, ext) = create(&agent, "other", "ext");
    assert_eq!(s, 200, "{ext}");
    let ext_id = ext["Volume"]["ID"].as_str().unwrap().to_string();
    assert_eq!(ext["Volume"]["CapacityBytes"], 50_000_000);

    let hv = host_volumes(&agent);
    assert_eq!(hv["test"]["ID"], id.as_str());
    assert_eq!(hv["test"]["ReadOnly"], false);
    assert_eq!(hv["other"]["ID"], ext_id.as_str());
    assert_eq!(hv["ro"]["ReadOnly"], true);
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let attrs = agent.get(&format!("/v1/node/{node_id}"))["Attributes"].clone();
    assert_eq!(attrs["plugins.host_volume.mkdir.version"], "0.0.1");
    assert_eq!(attrs["plugins.host_volume.ext.version"], "0.1.0");

    for signal in [libc::SIGTERM, libc::SIGKILL] {
        agent.stop_with(signal, Duration::from_secs(20));
        // The plugin re-creates what is gone: create is idempotent.
        std::fs::remove_dir_all(agent.data_dir.join("host_volumes").join(&id)).ok();
        agent.restart();
        let hv = host_volumes(&agent);
        assert_eq!(hv["test"]["ID"], id.as_str(), "after signal {signal}");
        assert_eq!(hv["other"]["ID"], ext_id.as_str());
        assert_eq!(volume_state(&agent, &id), "ready");
        assert!(agent.data_dir.join("host_volumes").join(&id).is_dir());
    }

    let out = agent.cli(&["volume", "delete", &id[..8]]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("Successfully deleted volume \"{id}\"!")
    );
    assert!(host_volumes(&agent).get("test").is_none());
    assert!(!agent.data_dir.join("host_volumes").join(&id).exists());
    let (s, _) = agent.request("GET", &format!("/v1/volume/host/{id}"), None);
    assert_eq!(s, 404);
}

#[test]
fn restore_is_partial_and_sighup_retries() {
    let dir = TempDir::new("vol-partial");
    let plugins = dir.path().join("plugins");
    write_plugin(&plugins, "keep", "");
    write_plugin(&plugins, "flaky", "");
    let mut agent = start(&dir);
    let (_, a) = create(&agent, "kept", "keep");
    let (_, b) = create(&agent, "lost", "flaky");
    let (a, b) = (
        a["Volume"]["ID"].as_str().unwrap().to_string(),
        b["Volume"]["ID"].as_str().unwrap().to_string(),
    );
    agent.stop_with(libc::SIGTERM, Duration::from_secs(20));
    let stash = dir.path().join("flaky.stash");
    std::fs::rename(plugins.join("flaky"), &stash).unwrap();
    agent.restart();
    assert_eq!(volume_state(&agent, &a), "ready");
    assert_eq!(volume_state(&agent, &b), "unavailable");
    let v = agent.get(&format!("/v1/volume/host/{b}"));
    assert!(v.to_string().contains("no such plugin"), "{v}");
    assert!(host_volumes(&agent).get("lost").is_none());
    let state = state_on_disk(&agent.data_dir).unwrap().to_string();
    assert!(
        state.contains(&b),
        "an unavailable volume stays in the state file"
    );
    std::fs::rename(&stash, plugins.join("flaky")).unwrap();
    unsafe { libc::kill(agent.pid(), libc::SIGHUP) };
    wait_for(WAIT, "volume ready after SIGHUP", || {
        (volume_state(&agent, &b) == "ready").then_some(())
    });
    assert_eq!(host_volumes(&agent)["lost"]["ID"], b.as_str());
}

#[test]
fn shutdown_cancels_a_plugin_call() {
    let dir = TempDir::new("vol-cancel");
    let plugins = dir.path().join("plugins");
    write_plugin(&plugins, "slow", "/bin/sleep 30");
    let mut agent = start(&dir);
    let addr = agent.url("/v1/volume/host/create");
    let client = std::thread::spawn(move || {
        let _ = ureq::put(&addr)
            .send(json!({"Volume": {"Name": "slow", "PluginID": "slow"}}).to_string());
    });
    wait_for(WAIT, "plugin running", || {
        (!pids_with("/bin/sleep 30").is_empty()).then_some(())
    });
    let sleepers = pids_with("/bin/sleep 30");
    let t0 = Instant::now();
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(20)),
        Some(0)
    );
    let took = t0.elapsed();
    println!("shutdown during a plugin create took {took:?}");
    // Far under the plugin's 30 s, with room for a busy machine.
    assert!(took < Duration::from_secs(10), "{took:?}");
    for p in sleepers {
        wait_for(WAIT, "plugin child killed", || (!alive(p)).then_some(()));
    }
    let _ = client.join();
    // The volume is recorded whole or not at all; the agent starts on that state.
    agent.restart();
    let vols = agent.get("/v1/volumes?type=host");
    for v in vols.as_array().unwrap() {
        assert_eq!(v["Name"], "slow");
        assert!(
            matches!(
                v["State"].as_str(),
                Some("ready" | "unavailable" | "pending")
            ),
            "{v}"
        );
    }
}

#[test]
fn jobs_mount_volumes_and_wait_for_missing_ones() {
    let dir = TempDir::new("vol-jobs");
    let agent = start(&dir);
    let job = agent.run_hcl(
        r#"
job "user" {
  type = "batch"
  group "g" {
    volume "data" { type = "host"  source = "later" }
    task "t" {
      driver = "raw_exec"
      volume_mount { volume = "data"  destination = "data" }
      config { command = "/bin/sh"  args = ["-c", "echo hi > data/hello; echo $NOMAD_VOLUME_DATA"] }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let a = agent.get(&format!("/v1/allocation/{alloc}"));
    assert_eq!(a["ClientStatus"], "pending");
    assert_eq!(a["ClientDescription"], "missing host volume \"later\"");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"],
        "pending"
    );
    let (s, v) = create(&agent, "later", "mkdir");
    assert_eq!(s, 200, "{v}");
    let path = v["Volume"]["HostPath"].as_str().unwrap().to_string();
    wait_for(WAIT, "job complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(Path::new(&path).join("hello")).unwrap(),
        "hi\n"
    );
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 1);
    assert_eq!(out.trim(), path);
    let v = agent.get(&format!(
        "/v1/volume/host/{}",
        v["Volume"]["ID"].as_str().unwrap()
    ));
    assert!(
        v.to_string().contains(&alloc),
        "the volume lists its allocation: {v}"
    );

    // A read-write mount of a read-only static volume is refused at submission.
    let (s, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(
            &json!({"JobHCL": r#"
job "rw" {
  group "g" {
    volume "v" { type = "host"  source = "ro" }
    task "t" {
      driver = "raw_exec"
      volume_mount { volume = "v"  destination = "v" }
      config { command = "true" }
    }
  }
}"#})
            .to_string(),
        ),
    );
    assert_eq!(s, 200, "{body}");
    let (s, body) = agent.put_json(
        "/v1/jobs",
        &json!({"Job": serde_json::from_str::<Value>(&body).unwrap()}),
    );
    assert_eq!(s, 400, "{body}");
    assert!(body.contains("read-only"), "{body}");
    assert_eq!(agent.request("GET", "/v1/job/rw", None).0, 404);

    // A CSI volume request is read and checked with Nomad's rules at submission...
    let csi = |access: &str| {
        format!(
            r#"
job "csi" {{
  group "g" {{
    volume "v" {{
      type = "csi"  source = "vol"  access_mode = "{access}"  attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "raw_exec"
      volume_mount {{ volume = "v"  destination = "v" }}
      config {{ command = "true" }}
    }}
  }}
}}"#
        )
    };
    let (s, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({ "JobHCL": csi("single-node-reader-only") }).to_string()),
    );
    assert_eq!(s, 400, "{body}");
    assert!(
        body.contains(
            "volume \"v\" in group \"g\": single-node-reader-only volumes must be read-only"
        ),
        "{body}"
    );
    let (s, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({ "JobHCL": csi("single-node-writer") }).to_string()),
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["TaskGroups"][0]["Volumes"]["v"]
            ["AccessMode"],
        "single-node-writer"
    );
    // ...and accepted: its allocation waits for the volume, in Nomad's words.
    let (s, body) = agent.put_json(
        "/v1/jobs",
        &json!({"Job": serde_json::from_str::<Value>(&body).unwrap()}),
    );
    assert_eq!(s, 200, "{body}");
    let alloc = agent.alloc_id("csi");
    wait_for(Duration::from_secs(30), "the CSI volume's reason", || {
        let a = agent.get(&format!("/v1/allocation/{alloc}"));
        (a["ClientDescription"] == "missing CSI Volume vol").then_some(())
    });
    assert_eq!(
        agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"],
        "pending"
    );
}

/// A SIGTERM while the agent is still starting, restoring a volume through a plugin that hangs,
/// cancels the start-up at once: the plugin is killed, no task is started, the agent exits 0, and
/// the state file still holds the volume and the job, which the next start brings back.
#[test]
fn sigterm_while_restoring_cancels_the_start_up() {
    let dir = TempDir::new("vol-startstop");
    let plugins = dir.path().join("plugins");
    let hang = dir.path().join("hang-now");
    write_plugin(
        &plugins,
        "hangs",
        &format!("[ -e {} ] && /bin/sleep 31", hang.display()),
    );
    let mut agent = start(&dir);
    let (s, v) = create(&agent, "late", "hangs");
    assert_eq!(s, 200, "{v}");
    let id = v["Volume"]["ID"].as_str().unwrap().to_string();
    let tag = format!("1000.{}", std::process::id());
    let job = agent.run_hcl(&format!(
        r#"
job "startstop" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{ command = "/bin/sleep"  args = ["{tag}"] }}
    }}
  }}
}}"#
    ));
    let task = wait_for(WAIT, "task running", || pids_with(&tag).first().copied());
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(20)),
        Some(0)
    );
    // live-restore.md: the task outlives the agent.
    assert_eq!(
        pids_with(&tag),
        vec![task],
        "the task stopped with the agent"
    );

    std::fs::write(&hang, "").unwrap();
    let mut starting = std::process::Command::new(BIN)
        .arg("agent")
        .arg("-config")
        .arg(&agent.config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sleepers = wait_for(WAIT, "restore hanging in the plugin", || {
        let p = pids_with("/bin/sleep 31");
        (!p.is_empty()).then_some(p)
    });
    let t0 = Instant::now();
    unsafe { libc::kill(starting.id() as i32, libc::SIGTERM) };
    let status = wait_for(Duration::from_secs(40), "agent exit", || {
        starting.try_wait().unwrap()
    });
    let took = t0.elapsed();
    println!("SIGTERM during the restore: exit after {took:?}");
    assert_eq!(status.code(), Some(0));
    assert!(
        took < Duration::from_secs(10),
        "the start-up waited for the plugin: {took:?}"
    );
    for p in sleepers {
        wait_for(WAIT, "plugin killed", || (!alive(p)).then_some(()));
    }
    assert_eq!(
        pids_with(&tag),
        vec![task],
        "a task was started or stopped while the start-up was cancelled"
    );
    let state = state_on_disk(&agent.data_dir).unwrap().to_string();
    assert!(state.contains(&id) && state.contains(&job), "{state}");

    std::fs::remove_file(&hang).unwrap();
    agent.restart();
    assert_eq!(volume_state(&agent, &id), "ready");
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "task re-attached", || {
        (agent.task_state(&alloc, "t")["State"] == "running").then_some(())
    });
    assert_eq!(pids_with(&tag), vec![task]);
}
