//! CSI volumes used by allocations (csi-volumes.md "Claims and mounts"), through the real agent,
//! the real hostpath test plugin as a plugin task, and real bind mounts read back from
//! `/proc/self/mountinfo`: the claim, ControllerPublish, NodeStage and NodePublish before the task
//! starts, the reverse when it stops, claims that make a second writer wait, a plugin that is not
//! there yet, a plugin whose NodePublish fails, an agent killed while a task uses a volume, and
//! a plugin of Python's grpcio publishing through the same path, and a docker task's container
//! bind (with the suite's private dockerd). As root a raw_exec task gets a
//! bind mount at its destination, checked in the mount table too.
//! Every test needs root (bind mounts): they are `#[ignore]`d, and scripts/test.sh selects them as
//! root.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::csi_volumes::{csi_spec, PluginAgent};

const WAIT: Duration = Duration::from_secs(60);
const USAGE: &str = "rw-file-system-single-node-writer";

/// The mount points of this mount namespace (the agent's and the plugin's) under `dir`, one
/// entry per mount.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect()
}

fn csi_dir(p: &PluginAgent) -> PathBuf {
    p.agent.data_dir.join("client/csi")
}

fn publish_target(p: &PluginAgent, alloc: &str, volume: &str) -> PathBuf {
    csi_dir(p).join(format!("per-alloc/{alloc}/{volume}/{USAGE}"))
}

fn staging(p: &PluginAgent, volume: &str) -> PathBuf {
    csi_dir(p).join(format!("staging/hostpath/{volume}/{USAGE}"))
}

fn create_volume(p: &PluginAgent, id: &str) {
    let file = p.spec(&format!("{id}.hcl"), &csi_spec(id, ""));
    let (code, out, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
}

/// A job whose task mounts the CSI volume `volume` at `data` and runs `script`.
fn job(name: &str, volume: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    volume "data" {{
      type            = "csi"
      source          = "{volume}"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }}
    task "t" {{
      driver = "raw_exec"
      volume_mount {{ volume = "data"  destination = "data" }}
      config {{ command = "/bin/sh"  args = ["-c", "{script}"] }}
    }}
  }}
}}"#
    )
}

fn client_status(p: &PluginAgent, alloc: &str) -> (String, String) {
    let a = p.agent.get(&format!("/v1/allocation/{alloc}"));
    (
        a["ClientStatus"].as_str().unwrap_or_default().to_string(),
        a["ClientDescription"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn wait_status(p: &PluginAgent, alloc: &str, want: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    while client_status(p, alloc).0 != want {
        if std::time::Instant::now() > deadline {
            panic!(
                "alloc {alloc} is not {want} but {:?}; events {:?}; agent log:\n{}",
                client_status(p, alloc),
                p.agent.events(alloc, "t"),
                p.agent.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn claims(p: &PluginAgent, volume: &str) -> usize {
    let v = p.agent.get(&format!("/v1/volume/csi/{volume}"));
    v["Allocations"].as_array().map_or(0, |a| a.len())
}

/// Runs a second plugin task of the plugin `hostpath` on the same volume root.
fn plugin_again(p: &PluginAgent) {
    p.agent.run_hcl(&format!(
        r#"
job "hostpath-again" {{
  group "plugin" {{
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{plugin}"
        args    = ["--endpoint", "${{CSI_ENDPOINT}}", "--root", "{root}"]
      }}
      csi_plugin {{ id = "hostpath"  type = "monolith"  health_timeout = "30s" }}
    }}
  }}
}}"#,
        plugin = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin"),
        root = p.root.display()
    ));
}

fn stop_job(p: &PluginAgent, job: &str) {
    let (status, body) = p.agent.request("DELETE", &format!("/v1/job/{job}"), None);
    assert_eq!(status, 200, "{body}");
}

/// The whole flow: a job writes into the volume through its mount; when it stops the volume is
/// unpublished, unstaged and its claim released; a second job reads the data back; the volume
/// is then deleted.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_volume_written_by_one_job_is_read_by_the_next_and_deleted() {
    require_root();
    let p = PluginAgent::start("csi-flow", "", "");
    create_volume(&p, "data");
    let writer = p.agent.run_hcl(&job(
        "writer",
        "data",
        "echo kept > data/file && exec sleep 3600",
    ));
    let alloc = p.agent.alloc_id(&writer);
    wait_status(&p, &alloc, "running");
    let target = publish_target(&p, &alloc, "data");
    // Its content, not only the file: the redirect creates it before echo writes.
    wait_for(WAIT, "the file written through the mount", || {
        std::fs::read_to_string(p.root.join("hp-data/file"))
            .ok()
            .filter(|s| s == "kept\n")
    });
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));
    // As root a raw_exec task gets a bind mount at its destination, not a link.
    let dest = p.agent.data_dir.join(format!("alloc/{alloc}/t/data"));
    assert_eq!(mounts_under(&dest), std::slice::from_ref(&dest));
    assert!(std::fs::symlink_metadata(&dest).unwrap().is_dir());
    assert_eq!(mounts_under(&staging(&p, "data")).len(), 1);
    assert_eq!(claims(&p, "data"), 1);
    let v = p.agent.get("/v1/volume/csi/data");
    assert_eq!(v["AccessMode"], "single-node-writer");
    assert!(v["WriteAllocs"].get(&alloc).is_some(), "{v}");

    stop_job(&p, &writer);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(
        mounts_under(&csi_dir(&p)).is_empty(),
        "unpublished and unstaged"
    );
    assert!(mounts_under(&dest).is_empty(), "the task's bind is gone");
    assert!(!target.exists(), "the plugin removed the target");

    // A read-only request: the task reads the data and cannot write into the volume.
    let script = "cat data/file > ${NOMAD_ALLOC_DIR}/read; \
                  if echo x > data/ro; then echo written; else echo refused; fi > ${NOMAD_ALLOC_DIR}/ro";
    let batch = job("reader", "data", script)
        .replace("job \"reader\" {", "job \"reader\" {\n  type = \"batch\"")
        .replace(
            "attachment_mode = \"file-system\"",
            "attachment_mode = \"file-system\"\n      read_only       = true",
        )
        .replace(
            "destination = \"data\"",
            "destination = \"data\"  read_only = true",
        );
    let reader = p.agent.run_hcl(&batch);
    let alloc2 = p.agent.alloc_id(&reader);
    wait_status(&p, &alloc2, "complete");
    let shared = p.agent.data_dir.join(format!("alloc/{alloc2}/alloc"));
    assert_eq!(
        std::fs::read_to_string(shared.join("read")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("ro")).unwrap(),
        "refused\n"
    );
    assert!(!p.root.join("hp-data/ro").exists());
    wait_for(WAIT, "the reader's claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());

    // Collecting the allocation removes its directory and nothing of the volume.
    let (code, body) = p
        .agent
        .request("PUT", &format!("/v1/client/allocation/{alloc2}/gc"), None);
    assert_eq!((code, body.as_str()), (200, "{}"));
    assert!(!shared.exists(), "the collected allocation directory");
    assert_eq!(
        std::fs::read_to_string(p.root.join("hp-data/file")).unwrap(),
        "kept\n"
    );

    let (code, out, err) = p.cli(&["volume", "delete", "data"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(!p.root.join("hp-data").exists());
}

/// `single-node-writer` takes one writer: a second job waits `pending` with Nomad's reason and
/// starts once the first one's claim is released.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_second_writer_waits_for_the_first_to_stop() {
    require_root();
    let p = PluginAgent::start("csi-writers", "", "");
    create_volume(&p, "data");
    let first = p.agent.run_hcl(&job("first", "data", "exec sleep 3600"));
    let a1 = p.agent.alloc_id(&first);
    wait_status(&p, &a1, "running");
    let second = p.agent.run_hcl(&job("second", "data", "exec sleep 3600"));
    let a2 = p.agent.alloc_id(&second);
    wait_for(WAIT, "the second writer's reason", || {
        let (status, why) = client_status(&p, &a2);
        (status == "pending" && !why.is_empty()).then_some(())
    });
    assert_eq!(
        client_status(&p, &a2),
        (
            "pending".to_string(),
            "volume \"data\" has exhausted its available writer claims".to_string()
        )
    );
    stop_job(&p, &first);
    wait_status(&p, &a2, "running");
    let target = publish_target(&p, &a2, "data");
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));
    assert!(mounts_under(&publish_target(&p, &a1, "data")).is_empty());
    stop_job(&p, &second);
    wait_for(WAIT, "the claims released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());
}

/// A job whose volume's plugin is not on the node waits with Nomad's reason and starts once a
/// plugin task for it is healthy.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_job_waits_for_its_plugin_and_starts_once_it_is_healthy() {
    require_root();
    let p = PluginAgent::start("csi-plugin-wait", "", "");
    create_volume(&p, "data");
    stop_job(&p, "hostpath");
    wait_for(WAIT, "the plugin gone", || {
        let (status, _) = p.agent.request("GET", "/v1/plugin/csi/hostpath", None);
        let v = p.agent.get("/v1/volume/csi/data");
        (status == 404 || v["Schedulable"] == false).then_some(())
    });
    let user = p.agent.run_hcl(&job("user", "data", "exec sleep 3600"));
    let alloc = p.agent.alloc_id(&user);
    let node = p.agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(WAIT, "the plugin's reason", || {
        let (status, why) = client_status(&p, &alloc);
        (status == "pending" && !why.is_empty()).then_some(())
    });
    assert_eq!(
        client_status(&p, &alloc).1,
        format!("CSI plugin hostpath is missing from client {node}")
    );
    // Another plugin task of the same plugin, on the same volume root.
    plugin_again(&p);
    wait_status(&p, &alloc, "running");
    let target = publish_target(&p, &alloc, "data");
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));
    stop_job(&p, &user);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
}

/// A plugin whose NodePublish fails: the allocation fails with Nomad's words and the plugin's
/// message, and what was done before (the stage) is undone: nothing stays mounted, the claim goes.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_failing_node_publish_fails_the_allocation_and_leaves_nothing_mounted() {
    require_root();
    let p = PluginAgent::start(
        "csi-publish-fails",
        "",
        r#", "--mode", "publish-fails", "--fail-message", "disk on fire""#,
    );
    create_volume(&p, "data");
    let user = p.agent.run_hcl(&job("user", "data", "exec sleep 3600"));
    let alloc = p.agent.alloc_id(&user);
    wait_status(&p, &alloc, "failed");
    let events = p.agent.events(&alloc, "t");
    assert!(
        events.contains(&(
            "Setup Failure".to_string(),
            "failed to setup alloc: pre-run hook \"csi_hook\" failed: rpc error: code = Internal desc = disk on fire".to_string()
        )),
        "{events:?}"
    );
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());
    assert!(mounts_under(&p.agent.data_dir).is_empty());
}

/// An agent killed with SIGKILL while a task uses a published volume: after the restart the
/// volume is mounted exactly once, and the task never noticed (same PID, still running, no
/// restart); stopping it then takes the volume down.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_published_volume_survives_an_agent_kill_and_the_task_keeps_running() {
    require_root();
    let mut p = PluginAgent::start("csi-mount-kill", "", "");
    create_volume(&p, "data");
    let user = p.agent.run_hcl(&job(
        "user",
        "data",
        "echo $$ > data/pid && exec sleep 3600",
    ));
    let alloc = p.agent.alloc_id(&user);
    wait_status(&p, &alloc, "running");
    let pid: i32 = wait_for(WAIT, "the task's PID", || {
        std::fs::read_to_string(p.root.join("hp-data/pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    let target = publish_target(&p, &alloc, "data");
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));

    p.agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    p.agent.restart();
    wait_status(&p, &alloc, "running");
    // Counted once the plugin is registered again, so that a publish after it would show.
    wait_for(WAIT, "the plugin healthy again", || {
        let v = p.agent.get("/v1/volume/csi/data");
        (v["Schedulable"] == true).then_some(())
    });
    assert_eq!(
        mounts_under(&target),
        std::slice::from_ref(&target),
        "mounted once"
    );
    let dest = p.agent.data_dir.join(format!("alloc/{alloc}/t/data"));
    assert_eq!(
        mounts_under(&dest),
        std::slice::from_ref(&dest),
        "the task's bind kept, once"
    );
    // The plugin makes a mount that is there already no second time; what it was asked is in
    // its log: one publish.
    let log = p
        .agent
        .data_dir
        .join(format!("alloc/{}/alloc/logs/plugin.stderr.0", p.alloc));
    let log = std::fs::read_to_string(log).unwrap();
    assert_eq!(
        log.matches("csi-test-plugin: published hp-data at").count(),
        1,
        "{log}"
    );
    assert!(alive(pid), "the task kept running");
    let state = p.agent.task_state(&alloc, "t");
    assert_eq!(state["State"], "running");
    assert_eq!(state["Restarts"], 0);
    assert_eq!(
        std::fs::read_to_string(p.root.join("hp-data/pid"))
            .unwrap()
            .trim(),
        pid.to_string()
    );
    stop_job(&p, &user);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());
    assert!(mounts_under(&dest).is_empty());
}

/// A plugin of another gRPC stack (Python's grpcio, `tests/support/py_csi_plugin.py` in mode
/// `publish`) run as the plugin task: the agent creates a volume through it, publishes it into
/// a job's task (a real bind mount the plugin makes), and unpublishes it when the job stops.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_volume_is_published_through_a_python_grpc_plugin() {
    let test = "a_volume_is_published_through_a_python_grpc_plugin";
    require_root();
    let has_grpc = std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpc {
        println!("SKIPPED {test}: python3 cannot import grpc (install it with: python3 -m pip install grpcio)");
        return;
    }
    let dir = TempDir::new("csi-py-mount");
    let root = dir.path().join("vols");
    std::fs::create_dir_all(&root).unwrap();
    let agent = TestAgent::start_in(dir.path(), "");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/py_csi_plugin.py");
    agent.run_hcl(&format!(
        r#"
job "py" {{
  group "plugin" {{
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "python3"
        args    = ["{script}", "${{CSI_ENDPOINT}}", "publish", "{root}"]
      }}
      csi_plugin {{ id = "py"  type = "monolith"  health_timeout = "30s" }}
    }}
  }}
}}"#,
        script = script.display(),
        root = root.display()
    ));
    wait_for(WAIT, "the python plugin healthy on both sides", || {
        let (_, body) = agent.request("GET", "/v1/plugin/csi/py", None);
        let p: serde_json::Value = serde_json::from_str(&body).ok()?;
        (p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1).then_some(())
    });
    let spec = dir.path().join("vol.hcl");
    std::fs::write(
        &spec,
        "type = \"csi\"\nid = \"data\"\nplugin_id = \"py\"\ncapability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n",
    )
    .unwrap();
    let out = agent.cli(&["volume", "create", spec.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let user = agent.run_hcl(&job(
        "user",
        "data",
        "echo via-python > data/file && exec sleep 3600",
    ));
    let alloc = agent.alloc_id(&user);
    let file = root.join("py-data/file");
    wait_for(
        WAIT,
        "the file written through the python plugin's mount",
        || {
            std::fs::read_to_string(&file)
                .ok()
                .filter(|s| s == "via-python\n")
        },
    );
    let target = agent
        .data_dir
        .join(format!("client/csi/per-alloc/{alloc}/data/{USAGE}"));
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));
    let (status, body) = agent.request("DELETE", &format!("/v1/job/{user}"), None);
    assert_eq!(status, 200, "{body}");
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let v = agent.get("/v1/volume/csi/data");
        if v["Allocations"].as_array().is_none_or(|a| a.is_empty()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claim was not released: {v}\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(mounts_under(&agent.data_dir.join("client/csi")).is_empty());
    assert!(!target.exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "via-python\n");
}

/// An unpublish that cannot be made yet (the plugin is gone) is retried and survives an agent
/// killed meanwhile: the next agent resumes it once a plugin task is back, and only then releases
/// the claim.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_pending_unpublish_resumes_after_an_agent_kill() {
    require_root();
    let mut p = PluginAgent::start("csi-unpublish-resume", "", "");
    create_volume(&p, "data");
    let user = p.agent.run_hcl(&job("user", "data", "exec sleep 3600"));
    let alloc = p.agent.alloc_id(&user);
    wait_status(&p, &alloc, "running");
    let target = publish_target(&p, &alloc, "data");
    stop_job(&p, "hostpath");
    wait_for(WAIT, "the plugin gone", || {
        let (status, _) = p.agent.request("GET", "/v1/plugin/csi/hostpath", None);
        (status == 404).then_some(())
    });
    stop_job(&p, &user);
    wait_for(WAIT, "a failed unpublish", || {
        p.agent
            .log_text()
            .contains(&format!(
                "taking down the CSI volumes of allocation {alloc} failed"
            ))
            .then_some(())
    });
    assert_eq!(claims(&p, "data"), 1, "the claim is held while mounted");
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));

    p.agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    p.agent.restart();
    assert_eq!(claims(&p, "data"), 1, "still held by the next agent");
    plugin_again(&p);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(
        mounts_under(&csi_dir(&p)).is_empty(),
        "unpublished and unstaged"
    );
}

/// A docker task gets the published volume as a container bind at its `volume_mount`
/// destination: what it writes there is in the volume, and the volume is taken down when the
/// task is over.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_docker_task_writes_into_a_published_volume() {
    require_root();
    let env = crate::common::docker::required_engine();
    let config = format!(
        "plugin \"docker\" {{\n  config {{ endpoint = \"{}\" }}\n}}\n",
        env.host
    );
    let p = PluginAgent::start_with_config("csi-docker", "", "", &config);
    create_volume(&p, "data");
    let hcl = job("dock", "data", "")
        .replace("job \"dock\" {", "job \"dock\" {\n  type = \"batch\"")
        .replace("destination = \"data\"", "destination = \"/data\"")
        .replace("driver = \"raw_exec\"", "driver = \"docker\"")
        .replace(
            r#"config { command = "/bin/sh"  args = ["-c", ""] }"#,
            r#"config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "echo via-docker > /data/file"]
      }"#,
        );
    let dock = p.agent.run_hcl(&hcl);
    let alloc = p.agent.alloc_id(&dock);
    wait_status(&p, &alloc, "complete");
    assert_eq!(
        std::fs::read_to_string(p.root.join("hp-data/file")).unwrap(),
        "via-docker\n"
    );
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());
    for c in env.containers_of_alloc(&alloc) {
        let _ = env.engine.remove(&c.id, true);
    }
}

/// A plugin task killed and restarted by its restart policy while a volume is published into a
/// running task: the task keeps its mount, nothing is published or staged again when the plugin
/// is back, and stopping the job still takes the volume down through the new plugin process.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_plugin_restart_keeps_published_volumes() {
    require_root();
    let restart = r#"restart {
      attempts = 3
      delay    = "1s"
      mode     = "fail"
    }"#;
    let p = PluginAgent::start("csi-plugin-restart", restart, "");
    create_volume(&p, "data");
    let user = p.agent.run_hcl(&job("user", "data", "exec sleep 3600"));
    let alloc = p.agent.alloc_id(&user);
    wait_status(&p, &alloc, "running");
    let target = publish_target(&p, &alloc, "data");
    let needle = p.root.display().to_string();
    let plugin_pids = pids_with(&needle);
    assert_eq!(plugin_pids.len(), 1, "{plugin_pids:?}");
    unsafe { libc::kill(plugin_pids[0], libc::SIGKILL) };
    wait_for(WAIT, "the plugin restarted and healthy", || {
        let pids = pids_with(&needle);
        let restarts = p.agent.task_state(&p.alloc, "plugin")["Restarts"].clone();
        let v = p.agent.get("/v1/volume/csi/data");
        (pids.len() == 1 && pids[0] != plugin_pids[0] && restarts == 1 && v["Schedulable"] == true)
            .then_some(())
    });
    assert_eq!(mounts_under(&target), std::slice::from_ref(&target));
    assert_eq!(client_status(&p, &alloc).0, "running");
    let log = p
        .agent
        .data_dir
        .join(format!("alloc/{}/alloc/logs/plugin.stderr.0", p.alloc));
    let log = std::fs::read_to_string(log).unwrap();
    assert_eq!(
        log.matches("csi-test-plugin: published hp-data at").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("csi-test-plugin: staged hp-data at").count(),
        1,
        "{log}"
    );
    // Both plugin processes wrote this log: the counts cover the restarted one too.
    assert_eq!(
        log.matches("csi-test-plugin: listening").count(),
        2,
        "{log}"
    );
    stop_job(&p, &user);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&csi_dir(&p)).is_empty());
}

/// A raw_exec task that restarts finds its bind in place and gets no second mount over it; a
/// read-only request makes the bind itself read-only in the mount table, though the
/// `volume_mount` does not say `read_only` (as in Nomad, either makes the mount read-only).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_restarted_task_keeps_one_read_only_bind() {
    require_root();
    let p = PluginAgent::start("csi-bind-restart", "", "");
    create_volume(&p, "data");
    let script = "if [ -f ${NOMAD_ALLOC_DIR}/ran ]; then exec sleep 3600; fi; \
                  touch ${NOMAD_ALLOC_DIR}/ran; exit 1";
    let spec = job("ro", "data", script)
        .replace(
            "attachment_mode = \"file-system\"",
            "attachment_mode = \"file-system\"\n      read_only       = true",
        )
        .replace(
            "driver = \"raw_exec\"",
            "driver = \"raw_exec\"\n      restart { attempts = 2  interval = \"1m\"  delay = \"100ms\"  mode = \"fail\" }",
        );
    let ro = p.agent.run_hcl(&spec);
    let alloc = p.agent.alloc_id(&ro);
    wait_for(WAIT, "the task running again after one restart", || {
        let s = p.agent.task_state(&alloc, "t");
        (s["State"] == "running" && s["Restarts"] == 1).then_some(())
    });
    let dest = p.agent.data_dir.join(format!("alloc/{alloc}/t/data"));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let binds: Vec<&str> = info
        .lines()
        .filter(|l| l.split(' ').nth(4) == dest.to_str())
        .collect();
    assert_eq!(binds.len(), 1, "mounted once: {binds:?}");
    let options = binds[0].split(' ').nth(5).unwrap();
    assert!(options.split(',').any(|o| o == "ro"), "{}", binds[0]);
    stop_job(&p, &ro);
    wait_for(WAIT, "the claim released", || {
        (claims(&p, "data") == 0).then_some(())
    });
    assert!(mounts_under(&dest).is_empty());
    assert!(mounts_under(&csi_dir(&p)).is_empty());
}
