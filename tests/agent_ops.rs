//! Operating the agent: systemd notification, corrupt state, job updates, users, signals, and the
//! CLI tour the README shows.

use crate::common::*;
use serde_json::json;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn notifies_systemd_when_ready_and_when_stopping() {
    let dir = TempDir::new("notify");
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!("data_dir = \"{}\"\nports {{ http = 0 }}\n", data.display()),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["agent", "-config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &sock_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 128];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    // READY comes after the state is restored and written.
    assert!(data.join("state.json").exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn corrupt_state_stops_the_agent_and_is_kept() {
    let dir = TempDir::new("corrupt");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let garbage = b"{\"Version\": 1, \"NodeID\": \"trunc";
    std::fs::write(data.join("state.json"), garbage).unwrap();
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!("data_dir = \"{}\"\nports {{ http = 0 }}\n", data.display()),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["agent", "-config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("state.json") && err.contains("corrupt"),
        "{err}"
    );
    assert_eq!(std::fs::read(data.join("state.json")).unwrap(), garbage);
    // With -fresh-state the file is kept aside and the agent starts.
    let agent = TestAgent::launch(dir.path(), data.clone(), config, &["-fresh-state"]);
    assert_eq!(agent.get("/v1/jobs"), json!([]));
    let kept: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.json.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(std::fs::read(data.join(&kept[0])).unwrap(), garbage);
}

fn job(cmd_arg: &str) -> String {
    format!(
        r#"
job "upd" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{ command = "sleep"  args = ["{cmd_arg}"] }}
    }}
  }}
}}"#
    )
}

#[test]
fn reregistering_a_job_is_a_noop_unless_it_changed() {
    let dir = TempDir::new("update");
    let agent = TestAgent::start_in(dir.path(), "");
    let m1 = format!("{}.1", 300_000 + fastrand::u32(0..99_999));
    let m2 = format!("{}.2", 300_000 + fastrand::u32(0..99_999));
    agent.run_hcl(&job(&m1));
    let first = agent.alloc_id("upd");
    wait_for(WAIT, "first running", || {
        (pids_with(&m1).len() == 1).then_some(())
    });
    agent.run_hcl(&job(&m1));
    assert_eq!(agent.allocs("upd").len(), 1, "an unchanged spec is a no-op");
    agent.run_hcl(&job(&m2));
    wait_for(WAIT, "second running, first gone", || {
        (pids_with(&m2).len() == 1 && pids_with(&m1).is_empty()).then_some(())
    });
    let allocs = agent.allocs("upd");
    assert_eq!(allocs.len(), 2);
    let old = allocs.iter().find(|a| a["ID"] == first.as_str()).unwrap();
    assert_eq!(old["DesiredStatus"], "stop");
    // Stop, then purge.
    let (s, _) = agent.request("DELETE", "/v1/job/upd", None);
    assert_eq!(s, 200);
    wait_for(WAIT, "stopped", || pids_with(&m2).is_empty().then_some(()));
    assert_eq!(agent.get("/v1/job/upd")["Status"], "dead");
    let (s, _) = agent.request("DELETE", "/v1/job/upd?purge=true", None);
    assert_eq!(s, 200);
    assert_eq!(agent.request("GET", "/v1/job/upd", None).0, 404);
    assert_eq!(agent.get("/v1/allocations"), json!([]));
}

#[test]
fn tasks_run_as_their_user_and_take_signals() {
    let dir = TempDir::new("user");
    let agent = TestAgent::start_in(dir.path(), "");
    let root = unsafe { libc::geteuid() } == 0;
    let user = if root { "user = \"nobody\"" } else { "" };
    let job = agent.run_hcl(&format!(
        r#"
job "sig" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      {user}
      config {{
        command = "/bin/sh"
        args = ["-c", "trap 'echo got-usr1 > local/sig' USR1; id -u > local/uid; while true; do sleep 0.1; done"]
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    let local = agent.data_dir.join(format!("alloc/{alloc}/t/local"));
    // Written after the trap is set: a SIGUSR1 before it would end the shell.
    let uid = wait_for(WAIT, "uid written", || {
        std::fs::read_to_string(local.join("uid"))
            .ok()
            .filter(|s| !s.is_empty())
    });
    if root {
        assert_eq!(uid.trim(), "65534", "the task runs as nobody");
    }
    let (s, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/signal"),
        Some(r#"{"Signal": "SIGUSR1", "Task": "t"}"#),
    );
    assert_eq!(s, 200, "{body}");
    wait_for(WAIT, "trap ran", || {
        std::fs::read_to_string(local.join("sig"))
            .ok()
            .filter(|s| s == "got-usr1\n")
    });
    assert!(agent.events(&alloc, "t").contains(&(
        "Signaling".to_string(),
        "Task being sent a signal".to_string()
    )));
    let (s, body) = agent.request(
        "POST",
        &format!("/v1/client/allocation/{alloc}/signal"),
        Some(r#"{"Signal": "SIGNOPE"}"#),
    );
    assert_eq!(s, 400, "{body}");
}

#[test]
fn the_readme_tour_works_from_the_cli() {
    let dir = TempDir::new("tour");
    let agent = TestAgent::start_in(dir.path(), "");
    let port = free_port();
    let spec = dir.path().join("web.nomad.hcl");
    std::fs::write(
        &spec,
        format!(
            r#"
job "web" {{
  group "web" {{
    restart {{ attempts = 2  interval = "30m"  delay = "15s"  mode = "fail" }}
    task "httpd" {{
      driver = "raw_exec"
      config {{ command = "busybox"  args = ["httpd", "-f", "-v", "-p", "127.0.0.1:{port}", "-h", "${{NOMAD_TASK_DIR}}"] }}
    }}
  }}
}}"#
        ),
    )
    .unwrap();
    let out = agent.cli(&["job", "run", spec.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("==> Job \"web\" registered"), "{text}");
    let alloc = agent.alloc_id("web");
    wait_for(WAIT, "running", || {
        (agent.task_state(&alloc, "httpd")["State"] == "running").then_some(())
    });
    let out = agent.cli(&["job", "status", "web"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&alloc[..8]));
    let out = agent.cli(&["alloc", "status", &alloc[..8]]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{out:?}");
    let events_at = text.find("Recent Events:").expect("events table");
    let table: Vec<&str> = text[events_at..].lines().collect();
    assert!(
        table[1].starts_with("Time")
            && table[1].contains("Type")
            && table[1].contains("Description")
    );
    // Newest first.
    assert!(
        table[2].contains("Started") && table[2].contains("Task started by client"),
        "{text}"
    );
    let out = agent.cli(&["alloc", "status", "-json", &alloc]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ID"], alloc.as_str());
    // Fetch a page so httpd logs something, then read it through the CLI.
    let _ = ureq::get(&format!("http://127.0.0.1:{port}/")).call();
    wait_for(WAIT, "log line", || {
        let out = agent.cli(&["alloc", "logs", "-stderr", &alloc, "httpd"]);
        (!out.stdout.is_empty()).then_some(())
    });
    let out = agent.cli(&["alloc", "restart", &alloc]);
    assert!(out.status.success(), "{out:?}");
    wait_for(WAIT, "restarted", || {
        (agent.task_state(&alloc, "httpd")["Restarts"] == 1).then_some(())
    });
    let out = agent.cli(&["job", "stop", "web"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(WAIT, "dead", || {
        (agent.task_state(&alloc, "httpd")["State"] == "dead").then_some(())
    });
    // Bad usage is exit 2, an error from the agent is exit 1.
    assert_eq!(
        agent.cli(&["job", "status", "-nope"]).status.code(),
        Some(2)
    );
    assert_eq!(
        agent.cli(&["alloc", "status", "ffffffff"]).status.code(),
        Some(1)
    );
}

/// live-restore.md "One agent per data directory": a second agent started by mistake on the same
/// data directory once killed the first one's task, started a copy and left it unsupervised.
#[test]
fn a_second_agent_on_the_same_data_directory_touches_nothing() {
    let dir = TempDir::new("second");
    let agent = TestAgent::start_in(dir.path(), "");
    let marker = format!("{}.7", 400_000 + fastrand::u32(0..99_999));
    agent.run_hcl(&format!(
        "job \"lock\" {{\n group \"g\" {{\n  task \"t\" {{\n   driver = \"raw_exec\"\n   \
         config {{\n    command = \"/bin/sleep\"\n    args = [\"{marker}\"]\n   }}\n  }}\n }}\n}}\n"
    ));
    let pid = wait_for(WAIT, "task running", || match pids_with(&marker)[..] {
        [pid] => Some(pid),
        _ => None,
    });
    // The snapshot and its journal, byte for byte.
    let files =
        || ["state.json", "state.journal"].map(|f| std::fs::read(agent.data_dir.join(f)).ok());
    // The first agent's own writes of the task's start are done once the file has its PID.
    wait_for(WAIT, "the state file to record the task", || {
        state_on_disk(&agent.data_dir)?
            .to_string()
            .contains(&format!("\"PID\":{pid}"))
            .then_some(())
    });
    let before = files();
    let mut second = Command::new(BIN)
        .args(["agent", "-config"])
        .arg(&agent.config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Without the lock the second agent would run on (and stop the first one's task): bounded,
    // and never left running.
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = status.unwrap_or_else(|| panic!("the second agent kept running: {stderr}"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another nodeward agent (pid {}) holds {}",
            agent.pid(),
            agent.data_dir.display()
        )),
        "{stderr}"
    );
    assert_eq!(pids_with(&marker), [pid], "the task was touched or copied");
    let keepers = pids_with(&format!("nodeward-keeper {}", agent.data_dir.display()));
    assert_eq!(keepers.len(), 1, "a second keeper was started: {keepers:?}");
    assert_eq!(files(), before, "the state was written");
    assert_eq!(
        agent.task_state(&agent.alloc_id("lock"), "t")["State"],
        "running"
    );
}
