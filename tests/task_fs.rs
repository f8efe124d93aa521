//! What a task can touch on the host through the agent's own file operations (docs/security.md
//! "What a task can touch on the host"): links a task plants in its allocation directory are
//! never followed by the agent (task directory, volume links), the keeper (log files) or the API
//! (log reads), and a CSI plugin ID cannot name a directory outside the data directory.

use crate::common::*;
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A root-owned 0700 directory with a file in it: what a task must not be given.
fn root_dir(parent: &Path, name: &str) -> PathBuf {
    let d = parent.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("keep"), "root's").unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// (uid, gid, mode) of `p`, not following a link.
fn owner_mode(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

/// Waits for the tasks `tasks` of the only allocation of `job` to be dead; answers the
/// allocation's ID and their states.
fn wait_dead_tasks(
    agent: &TestAgent,
    job: &str,
    tasks: &[&str],
) -> (String, Vec<serde_json::Value>) {
    let alloc = wait_for(WAIT, "the allocation", || {
        let a = agent.allocs(job);
        (a.len() == 1).then(|| a[0]["ID"].as_str().unwrap().to_string())
    });
    let states = tasks
        .iter()
        .map(|t| {
            wait_for(WAIT, "the task to be dead", || {
                let s = agent.task_state(&alloc, t);
                (s["State"] == "dead").then_some(s)
            })
        })
        .collect();
    (alloc, states)
}

/// [`wait_dead_tasks`] for the one task `t`.
fn wait_dead(agent: &TestAgent, job: &str) -> (String, serde_json::Value) {
    let (alloc, mut states) = wait_dead_tasks(agent, job, &["t"]);
    (alloc, states.remove(0))
}

/// The takeover of issue 11: a task run as `nobody` runs `rm -rf local secrets; ln -s <dir>
/// local; exit 1`, and the task directory hook of its restart used to follow the link and make
/// a root 0700 directory nobody's, 0755. Task `t` links `local`, task `u` links `secrets`. The
/// links are replaced by fresh directories, the targets are untouched, and the events say so.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_cannot_take_over_a_host_directory_through_its_task_directory() {
    require_root();
    let dir = TempDir::new("takeover");
    let (one, two) = (root_dir(dir.path(), "one"), root_dir(dir.path(), "two"));
    let agent = TestAgent::start_in(dir.path(), "");
    let task = |name: &str, link: &str, target: &Path| {
        format!(
            r#"
    task "{name}" {{
      driver = "raw_exec"
      user = "nobody"
      config {{
        command = "/bin/sh"
        args = ["-c", "if [ -e ran ]; then exit 0; fi; touch ran; rm -rf local secrets; ln -s {} {link}; exit 1"]
      }}
    }}"#,
            target.display()
        )
    };
    let job = agent.run_hcl(&format!(
        r#"
job "takeover" {{
  type = "batch"
  group "g" {{
    restart {{ attempts = 1  interval = "1h"  delay = "1s"  mode = "fail" }}
    {}
    {}
  }}
}}"#,
        task("t", "local", &one),
        task("u", "secrets", &two)
    ));
    let (alloc, states) = wait_dead_tasks(&agent, &job, &["t", "u"]);
    for state in &states {
        assert_eq!(state["Failed"], false, "the second run exits 0: {state}");
        assert_eq!(state["Restarts"], 1, "{state}");
    }
    for d in [&one, &two] {
        assert_eq!(owner_mode(d), (0, 0, 0o700), "{} was changed", d.display());
        assert_eq!(std::fs::read_to_string(d.join("keep")).unwrap(), "root's");
    }
    for (task, name, target) in [("t", "local", &one), ("u", "secrets", &two)] {
        let task_dir = agent.data_dir.join(format!("alloc/{alloc}/{task}"));
        for (d, mode) in [("local", 0o755), ("secrets", 0o700)] {
            let path = task_dir.join(d);
            let m = std::fs::symlink_metadata(&path).unwrap();
            assert!(m.is_dir(), "{} is a directory again", path.display());
            assert_eq!(
                owner_mode(&path),
                (65534, m.gid(), mode),
                "{}",
                path.display()
            );
        }
        let said = format!(
            "removed the symbolic link {} (to {:?}) without following it, and made the directory again",
            task_dir.join(name).display(),
            target
        );
        let events = agent.events(&alloc, task);
        assert!(
            events
                .iter()
                .any(|(t, m)| t == "Task Setup" && m.starts_with(&said)),
            "no Task Setup event {said:?} in {events:?}"
        );
    }
    agent.log_line("the removed link", |l| {
        l.contains("removed the symbolic link")
    });
}

/// A volume is linked at `sub/data`; the task replaces `sub` with a link to a root directory.
/// The volume hook of the restart must not create the volume link inside that directory.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_link_planted_in_a_volume_mount_path_is_not_followed() {
    require_root();
    let dir = TempDir::new("mntlink");
    let target = root_dir(dir.path(), "target");
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{\n host_volume \"hv\" {{ path = \"{}\" }}\n}}\n",
            vol.display()
        ),
    );
    let job = agent.run_hcl(&format!(
        r#"
job "mnt" {{
  type = "batch"
  group "g" {{
    restart {{ attempts = 1  interval = "1h"  delay = "1s"  mode = "fail" }}
    volume "data" {{ type = "host"  source = "hv" }}
    task "t" {{
      driver = "raw_exec"
      user = "nobody"
      volume_mount {{ volume = "data"  destination = "sub/data" }}
      config {{
        command = "/bin/sh"
        args = ["-c", "if [ -e ran ]; then exit 0; fi; touch ran; mv sub sub.old; ln -s {} sub; exit 1"]
      }}
    }}
  }}
}}"#,
        target.display()
    ));
    let (alloc, state) = wait_dead(&agent, &job);
    assert_eq!(state["Failed"], false, "the second run exits 0: {state}");
    assert!(
        std::fs::symlink_metadata(target.join("data")).is_err(),
        "the volume link was created in {}",
        target.display()
    );
    assert_eq!(owner_mode(&target), (0, 0, 0o700));
    let sub = agent.data_dir.join(format!("alloc/{alloc}/t/sub"));
    assert!(std::fs::symlink_metadata(&sub).unwrap().is_dir());
    assert_eq!(std::fs::read_link(sub.join("data")).unwrap(), vol);
    let events = agent.events(&alloc, "t");
    assert!(
        events.iter().any(|(t, m)| t == "Task Setup"
            && m.starts_with(&format!("removed the symbolic link {}", sub.display()))),
        "{events:?}"
    );
}

/// A task (here run as the agent's user, which may write its allocation's log directory) plants
/// links named like its log files. The keeper must not write through them when it rotates, and
/// the logs API must not serve what they point at.
#[test]
fn links_named_like_log_files_are_neither_written_nor_served() {
    let dir = TempDir::new("loglink");
    let secret = dir.path().join("secret");
    let marker = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(&secret, &marker).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let agent = TestAgent::start_in(dir.path(), "");
    let s = secret.display();
    // .1 is where the keeper rotates to after 1 MiB; .7 is where a reader moves on to; stderr
    // has no file but the link.
    let script = format!(
        "L=$NOMAD_ALLOC_DIR/logs; ln -s {s} $L/t.stdout.1; ln -s {s} $L/t.stdout.7; ln -s {s} $L/t.stderr.0; head -c 1100000 /dev/zero | tr '\\\\0' x"
    );
    let job = agent.run_hcl(&format!(
        r#"
job "logs" {{
  type = "batch"
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      logs {{ max_files = 10  max_file_size = 1 }}
      config {{
        command = "/bin/sh"
        args = ["-c", "{script}"]
      }}
    }}
  }}
}}"#
    ));
    let (alloc, state) = wait_dead(&agent, &job);
    assert_eq!(state["Failed"], false, "{state}");
    // The keeper drains the pipe (up to 64 KiB of it) after it reported the exit: what follows
    // holds once the whole output is in.
    let body = wait_log(&agent, &alloc, "t", "stdout", |t| t.len() >= 1_100_000);
    let after = std::fs::read_to_string(&secret).unwrap();
    assert!(
        after == marker,
        "the keeper wrote {} bytes through a link",
        after.len() - marker.len().min(after.len())
    );
    let logs = agent.data_dir.join(format!("alloc/{alloc}/alloc/logs"));
    assert!(!std::fs::symlink_metadata(logs.join("t.stdout.1"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!body.contains(&marker), "the API served the link's target");
    assert_eq!(body.len(), 1_100_000, "the whole output, once");
    assert!(body.bytes().all(|b| b == b'x'));
    let (status, body) = agent.request(
        "GET",
        &format!("/v1/client/fs/logs/{alloc}?task=t&type=stderr"),
        None,
    );
    assert_eq!((status, body.as_str()), (200, ""));
    let keeper_log = std::fs::read_to_string(agent.data_dir.join("keeper.log")).unwrap();
    assert!(
        keeper_log.contains(&format!(
            "removed the symbolic link {} (to {secret:?})",
            logs.join("t.stdout.1").display()
        )),
        "{keeper_log}"
    );
}

/// A task replaces its allocation's log directory with a link to a directory of fake log files:
/// the logs API refuses, naming the link, and serves nothing from there.
#[test]
fn a_linked_log_directory_is_not_served() {
    let dir = TempDir::new("logdir");
    let fake = dir.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let marker = format!("SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(fake.join("t.stdout.0"), &marker).unwrap();
    let agent = TestAgent::start_in(dir.path(), "");
    let job = agent.run_hcl(&format!(
        r#"
job "logdir" {{
  type = "batch"
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "mv $NOMAD_ALLOC_DIR/logs $NOMAD_ALLOC_DIR/old; ln -s {} $NOMAD_ALLOC_DIR/logs"]
      }}
    }}
  }}
}}"#,
        fake.display()
    ));
    let (alloc, _) = wait_dead(&agent, &job);
    let (status, body) = agent.request(
        "GET",
        &format!("/v1/client/fs/logs/{alloc}?task=t&type=stdout"),
        None,
    );
    assert!(!body.contains(&marker), "the API served {body:?}");
    assert_eq!(status, 500, "{body}");
    assert!(
        body.contains("logs is a symbolic link") && body.contains("does not follow"),
        "{body}"
    );
}

/// A CSI plugin ID is a path component of the staging directory: `/etc` or `../../usr` would have
/// had the agent chmod that directory 0700. Refused at registration, nothing changed.
#[test]
fn a_csi_plugin_id_that_is_not_a_name_is_refused() {
    let dir = TempDir::new("csiid");
    let target = dir.path().join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = TestAgent::start_in(dir.path(), "");
    let id = target.display().to_string();
    let body = json!({"Job": {"ID": "csi", "Name": "csi", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/sleep", "args": ["30"]},
        "CSIPluginConfig": {"ID": id, "Type": "monolith"}}]}]}});
    let (status, text) = agent.put_json("/v1/jobs", &body);
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains(&format!(
            "invalid csi_plugin id {id:?}: may only contain the characters A-Z a-z 0-9 _ . -"
        )),
        "{text}"
    );
    assert_eq!(agent.request("GET", "/v1/job/csi", None).0, 404);
    let (status, text) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&json!({"JobHCL": "job \"csi\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   config { command = \"true\" }\n   csi_plugin {\n    id = \"../../../../usr\"\n    type = \"monolith\"\n   }\n  }\n }\n}\n"}).to_string()),
    );
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("invalid csi_plugin id \"../../../../usr\""),
        "{text}"
    );
    assert_eq!(owner_mode(&target).2, 0o755, "the directory was changed");
    assert!(!agent.data_dir.join("client/csi").exists());
}

/// A task's directory is `<alloc_dir>/<task>`: a task named `alloc` would be given the group's
/// shared `alloc/` (its logs included) and, run as another user, its ownership. Refused at
/// registration.
#[test]
fn a_task_named_like_the_shared_directory_is_refused() {
    let dir = TempDir::new("allocname");
    let agent = TestAgent::start_in(dir.path(), "");
    let body = json!({"Job": {"ID": "shared", "Name": "shared", "TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "alloc", "Driver": "raw_exec", "User": "nobody",
         "Config": {"command": "/bin/sleep", "args": ["30"]}}]}]}});
    let (status, text) = agent.put_json("/v1/jobs", &body);
    assert_eq!(
        (status, text.as_str()),
        (
            400,
            "invalid task name \"alloc\": it is the name of the allocation's shared directory"
        )
    );
    assert_eq!(agent.request("GET", "/v1/job/shared", None).0, 404);
    assert!(!agent
        .data_dir
        .join("alloc")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));
}
