//! The docker driver through the real agent against the suite's private dockerd
//! (`tests/common/docker.rs`): seed 1's own jobspec, a containerised CSI plugin, exits, OOM,
//! logs, and the agent killed under a running container. Every test needs the private dockerd:
//! they are `#[ignore]`d, and scripts/test.sh, which starts it as root, selects them.

use crate::common::docker::{required_engine, DockerEnv, CSI_PLUGIN_IMAGE};
use crate::common::*;
use serde_json::Value;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

/// The agent's configuration for the private engine.
fn plugin_config(env: &DockerEnv) -> String {
    format!(
        "plugin \"docker\" {{\n  config {{ endpoint = \"{}\" }}\n}}\n",
        env.host
    )
}

/// The private engine and an agent configured for it, with `extra` appended to its
/// configuration, in a temporary directory tagged `tag`.
fn docker_agent(tag: &str, extra: &str) -> (DockerEnv, TempDir, TestAgent) {
    let env = required_engine();
    let dir = TempDir::new(tag);
    let agent = TestAgent::start_in(dir.path(), &format!("{}{extra}", plugin_config(&env)));
    (env, dir, agent)
}

/// A batch job `name` of one docker task `t` that runs `script` with busybox's `sh` and is never
/// restarted; `extra` goes into the task block.
fn batch_sh(name: &str, script: &str, extra: &str) -> String {
    let script = serde_json::to_string(script).unwrap();
    format!(
        "job \"{name}\" {{\n  type = \"batch\"\n  group \"g\" {{\n    restart {{\n      attempts = 0\n      mode     = \"fail\"\n    }}\n    task \"t\" {{\n      driver = \"docker\"\n      config {{\n        image   = \"busybox:1\"\n        command = \"sh\"\n        args    = [\"-c\", {script}]\n      }}\n      {extra}\n    }}\n  }}\n}}\n"
    )
}

/// Removes, when dropped, every container of an allocation: a failed test leaves nothing
/// running in the engine.
struct Cleanup<'a> {
    env: &'a DockerEnv,
    alloc: String,
}

impl Cleanup<'_> {
    fn of<'a>(env: &'a DockerEnv, alloc: &str) -> Cleanup<'a> {
        Cleanup {
            env,
            alloc: alloc.to_string(),
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for c in self.env.containers_of_alloc(&self.alloc) {
            let _ = self.env.engine.remove(&c.id, true);
        }
    }
}

fn wait_state(agent: &TestAgent, alloc: &str, task: &str, state: &str) -> Value {
    wait_for(WAIT, &format!("task {task} {state}"), || {
        let s = agent.task_state(alloc, task);
        (s["State"] == state).then_some(s)
    })
}

/// Seed 1's jobspec as the seed writes it (docker.md "Seed 1, unchanged"), with a restart policy
/// short enough for a test: the seed's events and texts, the 5 s deadline, the 137 exit.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn seed_1s_jobspec_runs_unchanged_in_a_container() {
    let (env, _dir, agent) = docker_agent("dk-seed", "");
    let job = agent.run_hcl(
        r#"
job "plugin" {
  group "csi" {
    restart {
      attempts = 1
      interval = "1m"
      delay    = "1s"
      mode     = "fail"
    }
    task "plugin" {
      driver = "docker"
      config {
        image   = "busybox:1"
        command = "httpd"
        args    = ["-vv", "-f", "-p", "8001", "-h", "/local"]
      }
      csi_plugin {
        id             = "whatever"
        type           = "monolith"
        health_timeout = "5s"
      }
      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_state(&agent, &alloc, "plugin", "dead");
    let exit =
        "Exit Code: 137, Exit Message: \"Docker container exited with non-zero exit code: 137\"";
    let events = assert_seed_events(&agent, &alloc, "plugin", exit);
    // The deadline counts from the start; busybox httpd, PID 1 of its container, ignores the
    // kill signal (SIGINT) and is SIGKILLed after the default 5 s kill_timeout.
    for (i, (t, _, at)) in events.iter().enumerate() {
        if t == "Plugin became unhealthy" {
            let waited = Duration::from_nanos((at - events[i - 1].2) as u64);
            assert!(waited >= Duration::from_millis(4990), "{waited:?}");
        }
        if t == "Terminated" {
            let waited = Duration::from_nanos((at - events[i - 1].2) as u64);
            assert!(
                waited >= Duration::from_millis(4990),
                "kill_timeout: {waited:?}"
            );
        }
    }
    let state = agent.task_state(&alloc, "plugin");
    assert_eq!(state["Failed"], true);
    assert_eq!(state["Restarts"], 1);
    assert_eq!(
        env.containers_of_alloc(&alloc),
        vec![],
        "a container of a task that ended is never left behind"
    );
}

/// The repo's CSI test plugin in an image: the socket directory is bound at mount_dir, the
/// plugin listens on CSI_ENDPOINT inside, the agent probes the host side and registers it.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_containerised_csi_plugin_becomes_healthy_and_registered() {
    let (env, _dir, agent) = docker_agent("dk-csi", "");
    let image = env.csi_plugin_image();
    assert_eq!(image, CSI_PLUGIN_IMAGE);
    let job = agent.run_hcl(&format!(
        r#"
job "csi" {{
  group "g" {{
    task "plugin" {{
      driver = "docker"
      config {{
        image   = "{image}"
        command = "/bin/nodeward-csi-test-plugin"
        args    = ["--mode", "healthy", "--endpoint", "${{CSI_ENDPOINT}}"]
      }}
      csi_plugin {{
        id             = "hostpath"
        type           = "monolith"
        health_timeout = "30s"
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_for(WAIT, "healthy event", || {
        agent
            .events(&alloc, "plugin")
            .contains(&("Plugin became healthy".into(), "plugin: hostpath".into()))
            .then_some(())
    });
    // The plugin is registered after its first good probe (and that event): once the agent has
    // asked it what it is.
    wait_for(WAIT, "the plugin registered and healthy", || {
        let (code, body) = agent.request("GET", "/v1/plugin/csi/hostpath", None);
        let plugin: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        (code == 200 && plugin["NodesHealthy"] == 1).then_some(())
    });
    let c = env.containers_of_alloc(&alloc);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].name, format!("plugin-{alloc}"));
    let state = agent.task_state(&alloc, "plugin");
    assert_eq!(state["State"], "running");
    assert_eq!(state["Restarts"], 0);
}

/// A container that writes to both streams and exits 3: its exit and message, its logs in the
/// task's files, the container removed.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_that_exits_3_reports_it_and_keeps_its_logs() {
    let (env, _dir, agent) = docker_agent("dk-exit", "");
    let script = "echo out $NOMAD_TASK_DIR $NOMAD_ALLOC_DIR; echo err >&2; test -d /local && test -d /secrets && exit 3";
    let job = agent.run_hcl(&batch_sh("exit3", script, ""));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], true, "{state}");
    let events = agent.events(&alloc, "t");
    assert!(
        events.contains(&(
            "Terminated".into(),
            "Exit Code: 3, Exit Message: \"Docker container exited with non-zero exit code: 3\""
                .into()
        )),
        "{events:#?}"
    );
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 1);
    assert_eq!(out, "out /local /alloc\n");
    let err = wait_log_lines(&agent, &alloc, "t", "stderr", 1);
    assert_eq!(err, "err\n");
    wait_for(WAIT, "the container removed", || {
        env.containers_of_alloc(&alloc).is_empty().then_some(())
    });
}

/// A container of a task with `resources { cores = 1 }` runs on its one CPU: the engine got it as
/// `CpusetCpus`, and the container's processes may run there only (`Cpus_allowed_list`), which
/// is also its `NOMAD_CPU_CORES`.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_with_cores_runs_on_its_own_cpu() {
    let (env, _dir, agent) = docker_agent("dk-cores", "");
    let script = "echo \"cores=$NOMAD_CPU_CORES\"; grep Cpus_allowed_list /proc/self/status";
    let job = agent.run_hcl(&batch_sh(
        "pinned",
        script,
        "resources {\n        cores  = 1\n        memory = 32\n      }",
    ));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], false, "{state}");
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 2);
    let mut lines = out.lines();
    let cores = lines.next().and_then(|l| l.strip_prefix("cores=")).unwrap();
    assert!(cores.parse::<u32>().is_ok(), "one CPU: {out}");
    let allowed = lines.next().unwrap().split_whitespace().last().unwrap();
    assert_eq!(allowed, cores, "{out}");
}

/// A container over its memory limit is killed by the kernel: `OOM Killed`.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_over_its_memory_is_oom_killed() {
    let (env, _dir, agent) = docker_agent("dk-oom", "");
    let job = agent.run_hcl(&batch_sh(
        "oom",
        "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done",
        "resources { memory = 16 }",
    ));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_state(&agent, &alloc, "t", "dead");
    let terminated: Vec<String> = agent
        .events(&alloc, "t")
        .into_iter()
        .filter(|(t, _)| t == "Terminated")
        .map(|(_, m)| m)
        .collect();
    assert_eq!(terminated.len(), 1, "{terminated:?}");
    assert!(
        terminated[0].ends_with("Exit Message: \"OOM Killed\""),
        "{terminated:?}"
    );
}

/// kill -9 of the agent, five times, under a container that writes a numbered line every 10 ms:
/// the same container every time, no new Started, Restarts 0, and every line in the task's log
/// once and in order.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn agent_kills_leave_the_container_running_and_its_logs_whole() {
    let (env, _dir, mut agent) = docker_agent("dk-kill", "");
    let job = agent.run_hcl(
        r#"
job "lines" {
  group "g" {
    task "t" {
      driver       = "docker"
      kill_timeout = "1s"
      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "trap 'exit 0' INT; p=xxxxxxxxxx; p=$p$p$p$p$p$p$p$p$p$p; p=$p$p$p$p$p$p; i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo line $i $p; usleep 10000; done; sleep 3600"]
      }
      logs {
        max_files     = 3
        max_file_size = 1
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    let first = wait_state(&agent, &alloc, "t", "running");
    let containers = env.containers_of_alloc(&alloc);
    assert_eq!(containers.len(), 1);
    let id = containers[0].id.clone();
    for round in 0..5 {
        std::thread::sleep(Duration::from_millis(200 + fastrand::u64(0..600)));
        agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..500)));
        agent.restart();
        let s = wait_state(&agent, &alloc, "t", "running");
        assert_eq!(s["Restarts"], 0, "round {round}: {s}");
        assert_eq!(s["StartedAt"], first["StartedAt"], "round {round}");
        let now = env.containers_of_alloc(&alloc);
        assert_eq!(now.len(), 1, "round {round}");
        assert_eq!(now[0].id, id, "round {round}: another container");
    }
    let types: Vec<String> = agent
        .events(&alloc, "t")
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(types, ["Received", "Task Setup", "Started"]);
    // Every line, once, in order, once the container wrote them all: 1.2 MiB, so the log rotated
    // at its 1 MiB while the agent was being killed.
    let pad = "x".repeat(600);
    let logs = wait_for(WAIT, "2000 lines in the log", || {
        let (code, text) = agent.request(
            "GET",
            &format!("/v1/client/fs/logs/{alloc}?task=t&type=stdout&plain=true&origin=start"),
            None,
        );
        (code == 200 && text.ends_with(&format!("line 2000 {pad}\n"))).then_some(text)
    });
    let expected: String = (1..=2000).map(|i| format!("line {i} {pad}\n")).collect();
    assert!(
        logs == expected,
        "the log has lost or doubled lines: {} bytes, expected {}",
        logs.len(),
        expected.len()
    );
    let files = std::fs::read_dir(agent.data_dir.join(format!("alloc/{alloc}/alloc/logs")))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("t.stdout.")
        })
        .count();
    assert_eq!(files, 2, "the log rotated once, at 1 MiB");
}

/// A container that exits 7 while no agent runs: the next agent reports exit code 7 at the time
/// the container really ended, then applies the restart policy.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_container_that_exits_while_the_agent_is_down_reports_its_exit() {
    let (env, _dir, mut agent) = docker_agent("dk-away", "");
    let job = agent.run_hcl(&batch_sh(
        "away",
        "while [ ! -e /local/go ]; do usleep 50000; done; exit 7",
        "",
    ));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_state(&agent, &alloc, "t", "running");
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    // The task directory's local/ is bound at /local: the container sees the file and exits.
    let local = agent.data_dir.join(format!("alloc/{alloc}/t/local/go"));
    std::fs::write(&local, "").unwrap();
    let id = env.containers_of_alloc(&alloc)[0].id.clone();
    let ended = env.wait_status(&id, "exited", WAIT);
    let finished = ended.state.finished_at.expect("a finish time");
    agent.restart();
    let s = wait_state(&agent, &alloc, "t", "dead");
    let events = agent.event_times(&alloc, "t");
    let terminated = events
        .iter()
        .find(|(t, _, _)| t == "Terminated")
        .expect("a Terminated event");
    assert_eq!(
        terminated.1,
        "Exit Code: 7, Exit Message: \"Docker container exited with non-zero exit code: 7\""
    );
    assert_eq!(terminated.2, finished, "the exit time is the container's");
    assert_eq!(s["Failed"], true);
    assert_eq!(events.last().unwrap().0, "Not Restarting", "{events:#?}");
    let started = events.iter().filter(|(t, _, _)| t == "Started").count();
    assert_eq!(started, 1, "{events:#?}");
}

/// A host volume's `volume_mount` is bound at its destination in the container.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_host_volume_is_bound_into_the_container() {
    let volume = TempDir::new("dk-vol-data");
    let data = volume.path().to_path_buf();
    let (env, _dir, agent) = docker_agent(
        "dk-vol",
        &format!(
            "client {{\n  host_volume \"data\" {{\n    path = \"{}\"\n  }}\n}}\n",
            data.display()
        ),
    );
    let job = agent.run_hcl(
        r#"
job "vol" {
  type = "batch"
  group "g" {
    volume "data" {
      type   = "host"
      source = "data"
    }
    task "t" {
      driver = "docker"
      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "echo hello > /data/hello && echo $NOMAD_VOLUME_DATA"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], false, "{state}");
    assert_eq!(
        std::fs::read_to_string(data.join("hello")).unwrap(),
        "hello\n"
    );
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 1);
    assert_eq!(out, "/data\n");
}

/// A `volume_mount` destination written as Nomad's jobspecs do, `${NOMAD_ALLOC_DIR}/volume0`, is
/// interpolated with the container's environment: the volume is at `/alloc/volume0` inside it.
/// One that interpolates to a path with `..` fails the task with a Setup Failure naming both.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn an_interpolated_volume_destination_is_the_containers_path() {
    let volume = TempDir::new("dk-vmi-data");
    let data = volume.path().to_path_buf();
    std::fs::write(data.join("in"), "from host\n").unwrap();
    let (env, _dir, agent) = docker_agent(
        "dk-vmi",
        &format!(
            "client {{\n  host_volume \"data\" {{\n    path = \"{}\"\n  }}\n}}\n",
            data.display()
        ),
    );
    let job = |name: &str, destination: &str| {
        batch_sh(
            name,
            "cat ${NOMAD_ALLOC_DIR}/volume0/in && echo $NOMAD_VOLUME_DATA && echo out > /alloc/volume0/out",
            &format!(
                "volume_mount {{\n        volume      = \"data\"\n        destination = \"{destination}\"\n      }}"
            ),
        )
        .replace(
            "  group \"g\" {\n",
            "  group \"g\" {\n    volume \"data\" {\n      type   = \"host\"\n      source = \"data\"\n    }\n",
        )
    };
    let alloc = agent.alloc_id(&agent.run_hcl(&job("vmi", "${NOMAD_ALLOC_DIR}/volume0")));
    let _cleanup = Cleanup::of(&env, &alloc);
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], false, "{state}");
    let out = wait_log_lines(&agent, &alloc, "t", "stdout", 2);
    assert_eq!(out, "from host\n/alloc/volume0\n");
    assert_eq!(std::fs::read_to_string(data.join("out")).unwrap(), "out\n");

    let bad = agent.alloc_id(&agent.run_hcl(&job("vmi-bad", "${NOMAD_ALLOC_DIR}/../etc")));
    let _cleanup_bad = Cleanup::of(&env, &bad);
    let state = wait_state(&agent, &bad, "t", "dead");
    assert_eq!(state["Failed"], true, "{state}");
    let events = agent.events(&bad, "t");
    assert!(
        events.contains(&(
            "Setup Failure".to_string(),
            "volume_mount destination \"${NOMAD_ALLOC_DIR}/../etc\" (interpolated: \"/alloc/../etc\") of a docker task must be an absolute path in the container, without \"..\"".to_string()
        )),
        "{events:?}"
    );
}

/// The docker config is interpolated as the task's command is, with the container's values, as
/// Nomad interpolates a driver's whole config: `work_dir`, `hostname` and a label's value.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn the_docker_config_is_interpolated_with_the_containers_values() {
    let (env, _dir, agent) = docker_agent("dk-interp", "");
    let script = "pwd && hostname && while [ ! -e /local/go ]; do sleep 0.1; done";
    let hcl = batch_sh("interp", script, "").replace(
        "command = \"sh\"",
        "command  = \"sh\"\n        work_dir = \"${NOMAD_TASK_DIR}\"\n        hostname = \"${NOMAD_TASK_NAME}-${NOMAD_ALLOC_INDEX}\"\n        labels { job = \"${NOMAD_JOB_NAME}\" }",
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&hcl));
    let _cleanup = Cleanup::of(&env, &alloc);
    assert_eq!(
        wait_log_lines(&agent, &alloc, "t", "stdout", 2),
        "/local\nt-0\n"
    );
    let containers = env.containers_of_alloc(&alloc);
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(
        containers[0].labels.get("job").map(String::as_str),
        Some("interp")
    );
    let local = agent.data_dir.join(format!("alloc/{alloc}/t/local"));
    std::fs::write(local.join("go"), "").unwrap();
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], false, "{state}");
}

/// An image the engine does not have is pulled: `Downloading image`, and a pull that fails is a
/// Driver Failure with the engine's message, counted by the restart policy.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn an_image_that_cannot_be_pulled_is_a_driver_failure() {
    let (env, _dir, agent) = docker_agent("dk-pull", "");
    // A registry on a loopback port nothing listens on: the pull fails at once, offline too.
    let (port, _refusing) = refused_port();
    let job = agent.run_hcl(&format!(
        r#"
job "pull" {{
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "docker"
      config {{
        image = "127.0.0.1:{port}/nodeward/missing:1"
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let state = wait_state(&agent, &alloc, "t", "dead");
    assert_eq!(state["Failed"], true, "{state}");
    let events = agent.events(&alloc, "t");
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "Received",
            "Task Setup",
            "Driver",
            "Driver Failure",
            "Not Restarting"
        ],
        "{events:#?}"
    );
    assert_eq!(events[2].1, "Downloading image");
    let failure = &events[3].1;
    assert!(
        failure.starts_with(&format!(
            "Failed to start task: Failed to pull `127.0.0.1:{port}/nodeward/missing:1`: "
        )) && failure.contains("connection refused"),
        "{failure}"
    );
    assert!(env.containers_of_alloc(&alloc).is_empty());
}

/// A dockerd of the test's own, with `--live-restore` (its containers outlive it), that the test
/// may stop and start again.
struct OwnEngine {
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl OwnEngine {
    fn start(dir: &std::path::Path) -> OwnEngine {
        let mut e = OwnEngine {
            dir: dir.to_path_buf(),
            child: None,
        };
        e.launch();
        e
    }

    fn host(&self) -> String {
        format!("unix://{}/docker.sock", self.dir.display())
    }

    fn launch(&mut self) {
        let d = &self.dir;
        let child = std::process::Command::new("dockerd")
            .arg("--data-root")
            .arg(d.join("root"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--host")
            .arg(self.host())
            .arg("--pidfile")
            .arg(d.join("dockerd.pid"))
            .args(["--iptables=false", "--bridge=none", "--live-restore"])
            .stdout(std::fs::File::create(d.join("dockerd.log")).unwrap())
            .stderr(std::fs::File::create(d.join("dockerd.err")).unwrap())
            .spawn()
            .expect("dockerd");
        self.child = Some(child);
        let endpoint = nodeward::driver::docker::engine::Endpoint::parse(&self.host()).unwrap();
        wait_for(WAIT, "the test's dockerd answering", || {
            nodeward::driver::docker::engine::Engine::connect(
                endpoint.clone(),
                Duration::from_secs(2),
            )
            .ok()
        });
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for OwnEngine {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = std::process::Command::new("docker")
                .args(["-H", &self.host(), "rm", "-f"])
                .args(
                    String::from_utf8_lossy(
                        &std::process::Command::new("docker")
                            .args(["-H", &self.host(), "ps", "-aq"])
                            .output()
                            .map(|o| o.stdout)
                            .unwrap_or_default(),
                    )
                    .split_whitespace(),
                )
                .output();
        }
        self.stop();
        let _ = std::process::Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/docker-env.sh"
            ))
            .arg("stop")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// dockerd stopped under a running container: the driver turns unhealthy (no `driver.docker`
/// attribute), the agent stays up and the task is not marked dead; dockerd back: healthy again,
/// the same container watched, and a stop still stops it.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn the_agent_rides_out_a_dockerd_restart() {
    let _env = required_engine();
    // A short path: the engine's socket must fit in 107 bytes.
    let short = std::path::PathBuf::from(format!("/tmp/nwdk{}", std::process::id()));
    std::fs::create_dir_all(&short).unwrap();
    let mut own = OwnEngine::start(&short);
    let image = std::process::Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/docker-env.sh"
        ))
        .args(["image"])
        .arg(&short)
        .arg("busybox:1")
        .env("NODEWARD_TEST_DOCKER_HOST", own.host())
        .output()
        .unwrap();
    assert!(
        image.status.success(),
        "{}",
        String::from_utf8_lossy(&image.stderr)
    );
    let dir = TempDir::new("dk-restart");
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "plugin \"docker\" {{\n  config {{ endpoint = \"{}\" }}\n}}\n",
            own.host()
        ),
    );
    let node = |agent: &TestAgent| {
        let id = agent.get("/v1/nodes")[0]["ID"]
            .as_str()
            .unwrap()
            .to_string();
        agent.get(&format!("/v1/node/{id}"))["Attributes"].clone()
    };
    let job = agent.run_hcl(
        r#"
job "ride" {
  group "g" {
    task "t" {
      driver       = "docker"
      kill_timeout = "1s"
      config {
        image   = "busybox:1"
        command = "sleep"
        args    = ["3600"]
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let first = wait_state(&agent, &alloc, "t", "running");
    assert_eq!(node(&agent)["driver.docker"], "1");
    own.stop();
    wait_for(WAIT, "driver.docker gone from the node", || {
        unsafe { libc::kill(agent.pid(), libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(300));
        node(&agent).get("driver.docker").is_none().then_some(())
    });
    let s = agent.task_state(&alloc, "t");
    assert_eq!(
        s["State"], "running",
        "marked dead while the engine was away: {s}"
    );
    own.launch();
    wait_for(WAIT, "driver.docker back on the node", || {
        unsafe { libc::kill(agent.pid(), libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(300));
        (node(&agent)["driver.docker"] == "1").then_some(())
    });
    let s = agent.task_state(&alloc, "t");
    assert_eq!(s["State"], "running", "{s}");
    assert_eq!(s["Restarts"], 0);
    assert_eq!(s["StartedAt"], first["StartedAt"]);
    // The watch went on with the engine: a stop stops and removes the container.
    let (code, _) = agent.request("DELETE", "/v1/job/ride", None);
    assert_eq!(code, 200);
    wait_state(&agent, &alloc, "t", "dead");
    let events = agent.events(&alloc, "t");
    assert!(
        events
            .iter()
            .any(|(t, m)| t == "Terminated" && m.starts_with("Exit Code: 137")),
        "{events:#?}"
    );
    let left = std::process::Command::new("docker")
        .args(["-H", &own.host(), "ps", "-aq"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "a container was left"
    );
}

/// `alloc signal` reaches the container's process; `alloc restart` replaces the container, and
/// the old one is removed.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn signal_and_restart_reach_the_container() {
    let (env, _dir, agent) = docker_agent("dk-sig", "");
    let job = agent.run_hcl(
        r#"
job "sig" {
  group "g" {
    task "t" {
      driver       = "docker"
      kill_timeout = "1s"
      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "trap 'echo got-usr1 > /local/sig' USR1; : > /local/trapped; while true; do sleep 0.1; done"]
      }
    }
  }
}"#,
    );
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_state(&agent, &alloc, "t", "running");
    let first = env.containers_of_alloc(&alloc)[0].id.clone();
    // Signalled before its trap is set, the container's init would ignore SIGUSR1 for good.
    let trapped = agent
        .data_dir
        .join(format!("alloc/{alloc}/t/local/trapped"));
    wait_for(WAIT, "the trap set in the container", || {
        trapped.exists().then_some(())
    });
    let (s, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/signal"),
        Some(r#"{"Signal": "SIGUSR1", "Task": "t"}"#),
    );
    assert_eq!(s, 200, "{body}");
    let local = agent.data_dir.join(format!("alloc/{alloc}/t/local/sig"));
    wait_for(WAIT, "the trap ran in the container", || {
        std::fs::read_to_string(&local)
            .ok()
            .filter(|s| s == "got-usr1\n")
    });
    let (s, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/restart"),
        Some(r#"{"TaskName": "t"}"#),
    );
    assert_eq!(s, 200, "{body}");
    let second = wait_for(WAIT, "a new container", || {
        let now = env.containers_of_alloc(&alloc);
        (now.len() == 1 && now[0].id != first && now[0].state == "running")
            .then(|| now[0].id.clone())
    });
    assert_ne!(second, first);
    assert!(
        env.engine.inspect(&first).unwrap().is_none(),
        "the old container was removed"
    );
    let s = wait_state(&agent, &alloc, "t", "running");
    assert_eq!(s["Handle"]["State"]["Id"], second.as_str(), "{s}");
}

/// A job stopped while its image is being pulled from a registry that never answers: the pull
/// is cancelled and the task ends, long before the pull's own 10-minute deadline.
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_stop_cancels_an_image_pull_in_progress() {
    let (env, _dir, agent) = docker_agent("dk-pcan", "");
    // A "registry" that takes the connection and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let job = agent.run_hcl(&format!(
        r#"
job "hang" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image              = "127.0.0.1:{port}/nodeward/hang:1"
        image_pull_timeout = "10m"
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_for(WAIT, "the pull under way", || {
        agent
            .events(&alloc, "t")
            .iter()
            .any(|(t, m)| t == "Driver" && m == "Downloading image")
            .then_some(())
    });
    let (code, _) = agent.request("DELETE", "/v1/job/hang", None);
    assert_eq!(code, 200);
    // WAIT (90 s) is far below the pull's 10 minutes: only a cancelled pull ends in time.
    let s = wait_state(&agent, &alloc, "t", "dead");
    let events = agent.events(&alloc, "t");
    assert!(
        events
            .iter()
            .any(|(t, m)| t == "Driver Failure" && m.contains("cancelled")),
        "{events:#?}"
    );
    assert_eq!(s["State"], "dead", "{s}");
    drop(silent);
}

/// `ports = ["http"]` publishes the group's port: the container listens on the `to` port
/// (`NOMAD_PORT_http` inside), the host port (the one of a one-port dynamic range) answers
/// through the engine's docker-proxy (the private engine runs with `--iptables=false`).
#[test]
#[ignore = "needs the private dockerd scripts/test.sh starts as root"]
fn a_docker_task_answers_on_its_published_host_port() {
    let test = "a_docker_task_answers_on_its_published_host_port";
    let host_port = free_port();
    let (env, _dir, agent) = docker_agent(
        "dk-ports",
        &format!(
            "client {{\n  min_dynamic_port = {host_port}\n  max_dynamic_port = {host_port}\n}}\n"
        ),
    );
    if !env
        .docker(&["network", "inspect", "bridge"])
        .status
        .success()
    {
        println!("SKIPPED {test}: the engine has no bridge network (started with --bridge=none)");
        return;
    }
    let hcl = r#"job "dkports" {
  group "g" {
    network {
      port "http" {
        to = 8001
      }
    }
    task "web" {
      driver = "docker"
      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "echo inside=$NOMAD_PORT_http host=${NOMAD_HOST_PORT_http} > /local/index.html && exec httpd -f -p $NOMAD_PORT_http -h /local"]
        ports   = ["http"]
      }
    }
  }
}
"#;
    agent.run_hcl(hcl);
    let alloc = agent.alloc_id("dkports");
    let _cleanup = Cleanup::of(&env, &alloc);
    wait_state(&agent, &alloc, "web", "running");
    let a = agent.get(&format!("/v1/allocation/{alloc}"));
    let port = &a["AllocatedResources"]["Shared"]["Ports"][0];
    assert_eq!(
        (&port["Label"], &port["Value"], &port["To"], &port["HostIP"]),
        (
            &Value::from("http"),
            &Value::from(host_port),
            &Value::from(8001),
            &Value::from("127.0.0.1")
        ),
        "{a}"
    );
    let body = wait_for(WAIT, "the published port answering", || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", host_port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.contains("200 OK").then_some(answer)
    });
    assert!(
        body.ends_with(&format!("inside=8001 host={host_port}\n")),
        "{body}"
    );
    // What the engine was asked for: Nomad's bindings, TCP and UDP, on the host IP.
    let containers = env.containers_of_alloc(&alloc);
    let inspect = env.docker(&["inspect", &containers[0].id]);
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let bindings = &inspect[0]["HostConfig"]["PortBindings"];
    for proto in ["tcp", "udp"] {
        assert_eq!(
            bindings[format!("8001/{proto}")][0],
            serde_json::json!({"HostIp": "127.0.0.1", "HostPort": host_port.to_string()}),
            "{bindings}"
        );
    }
    assert_eq!(agent.request("DELETE", "/v1/job/dkports", None).0, 200);
}
