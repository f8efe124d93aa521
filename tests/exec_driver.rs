//! The `exec` driver (resources.md, "The `exec` driver"), through the real agent, keeper and
//! tasks: what an isolated task can and cannot see, its privileges, the placement failure where
//! the driver is denied, and live restore. Needs root (those tests are `#[ignore]`d, and
//! scripts/test.sh selects them as root) and namespaces: a `SKIPPED` line where it has none.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// Whether the exec driver can run here (it needs root); prints the SKIPPED line when this host
/// cannot make its namespaces.
fn can_isolate(test: &str) -> bool {
    require_root();
    if !nodeward::driver::exec::namespaces_available() {
        println!("SKIPPED {test}: this host cannot make mount, PID and IPC namespaces");
        return false;
    }
    true
}

/// A host process and a host directory of the test, gone when the test ends, passed or not.
struct HostThings {
    sleep: std::process::Child,
    dir: PathBuf,
}

impl Drop for HostThings {
    fn drop(&mut self) {
        let _ = self.sleep.kill();
        let _ = self.sleep.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn exec_job(name: &str, script: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}]
      }}
    }}
  }}
}}"#
    )
}

fn wait_running(agent: &TestAgent, alloc: &str) -> Value {
    wait_for(WAIT, "task running with a PID", || {
        let s = agent.task_state(alloc, "t");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    })
}

fn alloc_dir(agent: &TestAgent, alloc: &str) -> PathBuf {
    agent.data_dir.join("alloc").join(alloc)
}

/// The file once its last line is complete: a shell redirect creates the file before the command
/// writes into it, so an empty or half-written file is still being written.
fn read_when_there(path: &Path) -> String {
    wait_for(WAIT, &format!("{} to be written", path.display()), || {
        std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
    })
}

/// The bounding set Nomad's default `allow_caps` for exec leaves, as `/proc/<pid>/status` prints it.
fn default_cap_bnd() -> String {
    let bits = [0u32, 1, 3, 4, 5, 6, 7, 8, 10, 18, 27, 29, 31];
    format!("{:016x}", bits.iter().fold(0u64, |m, b| m | (1 << b)))
}

/// An exec task sees only its own PID namespace, only its chroot and its allocation directory,
/// runs with no_new_privs and the reduced bounding set, cannot write the host's /usr, and what it
/// writes to /alloc and /local is in the host's allocation directory.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn an_exec_task_is_isolated_from_the_host() {
    if !can_isolate("an_exec_task_is_isolated_from_the_host") {
        return;
    }
    let dir = TempDir::new("exec-iso");
    let m = unique_marker(700_000);
    // A host process with a unique argument, and a host file outside the chroot.
    let host = HostThings {
        sleep: std::process::Command::new("sleep").arg(&m).spawn().unwrap(),
        dir: std::env::temp_dir().join(format!("nodeward-secret-{}", unique_marker(0))),
    };
    // Another marker: the script, which names the secret, is in the task's own command line.
    let secret_dir = host.dir.clone();
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("secret"), "host secret").unwrap();
    let agent = TestAgent::start_in(dir.path(), "");
    let script = format!(
        "echo $$ > /local/mypid; \
         cat /proc/[0-9]*/cmdline | tr '\\0' ' ' > /local/cmdlines; \
         ls /proc | grep -E '^[0-9]+$' > /local/pids; \
         if cat {secret}/secret > /local/leak 2>/dev/null; then echo visible; else echo invisible; fi > /local/secret; \
         grep -E '^(NoNewPrivs|CapBnd):' /proc/self/status > /local/status; \
         if touch /usr/nodeward-probe 2>/dev/null; then echo writable; else echo read-only; fi > /local/usr; \
         ls / | tr '\\n' ' ' > /local/root; \
         echo shared > /alloc/from-task; echo local > /local/from-task; \
         echo done > /local/done; exec sleep 3600",
        secret = secret_dir.display()
    );
    // Nomad's `pid_mode` and `ipc_mode` written as their default, "private": what this test
    // finds.
    let hcl = exec_job("iso", &script).replace(
        "command = \"/bin/sh\"",
        "command  = \"/bin/sh\"\n        pid_mode = \"private\"\n        ipc_mode = \"private\"",
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&hcl));
    assert_eq!(
        agent.get("/v1/job/iso")["TaskGroups"][0]["Tasks"][0]["Config"]["pid_mode"],
        "private"
    );
    let s = wait_running(&agent, &alloc);
    let host_pid = s["PID"].as_i64().unwrap();
    let local = alloc_dir(&agent, &alloc).join("t/local");
    read_when_there(&local.join("done"));
    let read = |f: &str| std::fs::read_to_string(local.join(f)).unwrap();
    assert_eq!(
        read("mypid").trim(),
        "1",
        "the task is PID 1 of its namespace"
    );
    assert!(
        !read("cmdlines").contains(&m),
        "a host process is visible: {}",
        read("cmdlines")
    );
    assert!(read("pids").lines().any(|p| p == "1"), "{}", read("pids"));
    assert!(
        !read("pids").lines().any(|p| p == host_pid.to_string()) || host_pid == 1,
        "the host PID numbers show: {}",
        read("pids")
    );
    assert_eq!(read("secret").trim(), "invisible");
    assert!(!local.join("leak").exists() || read("leak").is_empty());
    let status = read("status");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert!(
        status.contains(&format!("CapBnd:\t{}", default_cap_bnd())),
        "{status}"
    );
    assert_eq!(read("usr").trim(), "read-only");
    assert!(!Path::new("/usr/nodeward-probe").exists());
    // Its root is its task directory with what was bound in: no host /tmp, /root or /home.
    let root = read("root");
    for want in [
        "alloc", "bin", "dev", "etc", "local", "proc", "secrets", "usr",
    ] {
        assert!(
            root.split(' ').any(|e| e == want),
            "{want} missing in / : {root}"
        );
    }
    for host_only in ["root", "home", "var", "tmp"] {
        assert!(
            !root.split(' ').any(|e| e == host_only),
            "{host_only} in / : {root}"
        );
    }
    let shared = alloc_dir(&agent, &alloc).join("alloc/from-task");
    assert_eq!(std::fs::read_to_string(shared).unwrap(), "shared\n");
    assert_eq!(read("from-task"), "local\n");
    // The task's mounts are its own: the host's mount table has none of them.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&alloc),
        "a task mount leaked to the host: {mounts}"
    );
    drop(host);
    agent.request("DELETE", "/v1/job/iso", None);
    wait_for(WAIT, "the task to stop", || {
        (!alive(host_pid as i32)).then_some(())
    });
}

/// Nomad's `client { options = { "driver.denylist" = "exec" } }`: the node has no `driver.exec`
/// and an exec job is the `missing drivers` placement failure, with no allocation.
#[test]
fn an_exec_job_is_a_placement_failure_where_the_driver_is_denied() {
    let dir = TempDir::new("exec-deny");
    let agent = TestAgent::start_in(
        dir.path(),
        "client {\n  options = {\n    \"driver.denylist\" = \"exec\"\n  }\n}\n",
    );
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let attrs = agent.get(&format!("/v1/node/{node_id}"))["Attributes"].clone();
    assert!(attrs.get("driver.exec").is_none(), "{attrs}");
    assert_eq!(attrs["driver.raw_exec"], "1");
    let file = dir.path().join("e.hcl");
    std::fs::write(&file, exec_job("denied", "true")).unwrap();
    let out = agent.cli(&["job", "run", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stdout.contains("* Constraint \"missing drivers\": 1 nodes excluded by filter"),
        "{stdout}"
    );
    assert!(agent.allocs("denied").is_empty());
}

/// Where the agent can isolate, `driver.exec = "1"` is fingerprinted.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_exec_driver_is_fingerprinted_where_it_can_isolate() {
    if !can_isolate("the_exec_driver_is_fingerprinted_where_it_can_isolate") {
        return;
    }
    let dir = TempDir::new("exec-fp");
    let agent = TestAgent::start_in(dir.path(), "");
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let attrs = agent.get(&format!("/v1/node/{node_id}"))["Attributes"].clone();
    assert_eq!(attrs["driver.exec"], "1", "{attrs}");
}

/// kill -9 of the agent: the exec task goes on (the keeper is its parent) and the next agent
/// re-attaches to the same process; its logs go on being collected.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn an_exec_task_survives_a_kill_9_of_the_agent() {
    if !can_isolate("an_exec_task_survives_a_kill_9_of_the_agent") {
        return;
    }
    let dir = TempDir::new("exec-lr");
    let mut agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(710_000);
    let script = format!(
        "echo before; while [ ! -e /local/go ]; do sleep 0.2; done; echo after; exec sleep {m}"
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&exec_job("lr", &script)));
    let first = wait_running(&agent, &alloc);
    let pid = first["PID"].as_i64().unwrap() as i32;
    let logs = alloc_dir(&agent, &alloc).join("alloc/logs/t.stdout.0");
    wait_for(WAIT, "the first line in the log", || {
        read_when_there(&logs).contains("before").then_some(())
    });
    // The state file records the run within a second.
    wait_for(WAIT, "the state file to record the run", || {
        state_on_disk(&agent.data_dir)?
            .to_string()
            .contains(&format!("\"PID\":{pid}"))
            .then_some(())
    });
    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    assert!(alive(pid), "the exec task died with the agent");
    std::fs::write(alloc_dir(&agent, &alloc).join("t/local/go"), "").unwrap();
    agent.restart();
    let s = wait_running(&agent, &alloc);
    assert_eq!(s["PID"], pid, "{s}");
    assert_eq!(s["Restarts"], 0, "{s}");
    wait_for(WAIT, "the line written while the agent was away", || {
        read_when_there(&logs).contains("after").then_some(())
    });
    agent.request("DELETE", "/v1/job/lr", None);
    wait_for(WAIT, "the task to stop", || (!alive(pid)).then_some(()));
}

/// A host volume's `volume_mount` is bound in the exec task's root at its destination
/// (read-write here, read-only when the mount says so), and NOMAD_VOLUME_* names that path.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_host_volume_is_bound_inside_an_exec_task() {
    if !can_isolate("a_host_volume_is_bound_inside_an_exec_task") {
        return;
    }
    let dir = TempDir::new("exec-vol");
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("in"), "from host\n").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n  host_volume \"shared\" {{ path = \"{}\" }}\n}}\n",
            vol.display()
        ),
    );
    let job = r#"
job "vol" {
  group "g" {
    volume "v" {
      type   = "host"
      source = "shared"
    }
    volume "r" {
      type      = "host"
      source    = "shared"
      read_only = true
    }
    task "t" {
      driver = "exec"
      kill_timeout = "1s"
      volume_mount {
        volume      = "v"
        destination = "/srv/data"
      }
      volume_mount {
        volume      = "r"
        destination = "ro"
        read_only   = true
      }
      config {
        command = "/bin/sh"
        args = ["-c", "cat /srv/data/in > /local/seen; echo $NOMAD_VOLUME_V $NOMAD_VOLUME_R > /local/env; echo out > /srv/data/out; if echo x > /ro/x 2>/dev/null; then echo rw; else echo ro; fi > /local/ro; echo done > /local/done; exec sleep 3600"]
      }
    }
  }
}"#;
    let alloc = agent.alloc_id(&agent.run_hcl(job));
    let s = wait_running(&agent, &alloc);
    let local = alloc_dir(&agent, &alloc).join("t/local");
    read_when_there(&local.join("done"));
    let read = |f: &str| std::fs::read_to_string(local.join(f)).unwrap();
    assert_eq!(read("seen"), "from host\n");
    assert_eq!(read("env"), "/srv/data /ro\n");
    assert_eq!(read("ro"), "ro\n");
    assert_eq!(std::fs::read_to_string(vol.join("out")).unwrap(), "out\n");
    assert!(!vol.join("x").exists());
    agent.request("DELETE", "/v1/job/vol", None);
    let pid = s["PID"].as_i64().unwrap() as i32;
    wait_for(WAIT, "the task to stop", || (!alive(pid)).then_some(()));
}

/// `${NOMAD_ALLOC_DIR}/volume0` as a destination is the exec task's `/alloc/volume0`: the volume
/// is bound there, inside the allocation directory's own bind, and NOMAD_VOLUME_* names it.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn an_interpolated_volume_destination_is_the_exec_tasks_path() {
    if !can_isolate("an_interpolated_volume_destination_is_the_exec_tasks_path") {
        return;
    }
    let dir = TempDir::new("exec-vmi");
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("in"), "from host\n").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n  host_volume \"shared\" {{ path = \"{}\" }}\n}}\n",
            vol.display()
        ),
    );
    let job = r#"
job "vmi" {
  type = "batch"
  group "g" {
    volume "v" {
      type   = "host"
      source = "shared"
    }
    task "t" {
      driver = "exec"
      volume_mount {
        volume      = "v"
        destination = "${NOMAD_ALLOC_DIR}/volume0"
      }
      config {
        command = "/bin/sh"
        args = ["-c", "cat /alloc/volume0/in > /local/seen && echo $NOMAD_VOLUME_V > /local/env && echo out > /alloc/volume0/out"]
      }
    }
  }
}"#;
    let alloc = agent.alloc_id(&agent.run_hcl(job));
    wait_for(WAIT, "the task to end", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "dead").then_some(())
    });
    assert_eq!(agent.task_state(&alloc, "t")["Failed"], false);
    let local = alloc_dir(&agent, &alloc).join("t/local");
    let read = |f: &str| std::fs::read_to_string(local.join(f)).unwrap();
    assert_eq!(read("seen"), "from host\n");
    assert_eq!(read("env"), "/alloc/volume0\n");
    assert_eq!(std::fs::read_to_string(vol.join("out")).unwrap(), "out\n");
}

/// `cap_drop = ["all"]` with `cap_add = ["kill"]` leaves the bounding set `kill` only; a `cap_add`
/// beyond the driver's set is a Driver Failure naming it; an unknown name is refused at parse.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn cap_add_and_cap_drop_shape_an_exec_tasks_bounding_set() {
    if !can_isolate("cap_add_and_cap_drop_shape_an_exec_tasks_bounding_set") {
        return;
    }
    let dir = TempDir::new("exec-caps");
    let agent = TestAgent::start_in(dir.path(), "");
    let job = |name: &str, caps: &str| {
        format!(
            r#"
job "{name}" {{
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "exec"
      kill_timeout = "1s"
      config {{
        command  = "/bin/sh"
        args     = ["-c", "grep CapBnd /proc/self/status > /local/caps; exec sleep 3600"]
        {caps}
      }}
    }}
  }}
}}"#
        )
    };
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "kill-only",
        r#"cap_drop = ["all"]
        cap_add  = ["kill"]"#,
    )));
    let s = wait_running(&agent, &alloc);
    let caps = read_when_there(&alloc_dir(&agent, &alloc).join("t/local/caps"));
    assert_eq!(caps, "CapBnd:\t0000000000000020\n");
    let refused = agent.alloc_id(&agent.run_hcl(&job("admin", r#"cap_add = ["sys_admin"]"#)));
    let events = wait_for(WAIT, "the driver failure", || {
        let e = agent.events(&refused, "t");
        e.iter().any(|(t, _)| t == "Driver Failure").then_some(e)
    });
    assert!(
        events.iter().any(|(t, m)| t == "Driver Failure"
            && m == "Failed to start task: driver does not allow the following capabilities: sys_admin"),
        "{events:?}"
    );
    let (status, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(
            &serde_json::json!({"JobHCL": job("bad", r#"cap_add = ["no_such_cap"]"#)}).to_string(),
        ),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("unknown capability \"no_such_cap\""),
        "{body}"
    );
    agent.request("DELETE", "/v1/job/kill-only", None);
    let pid = s["PID"].as_i64().unwrap() as i32;
    wait_for(WAIT, "the task to stop", || (!alive(pid)).then_some(()));
}
