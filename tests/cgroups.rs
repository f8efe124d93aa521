//! cgroups (resources.md, "cgroups"): a task's memory limit is enforced and its OOM kill reported,
//! and every process a task left behind dies with it, across an agent restart too. Real agent,
//! real keeper, real tasks in real (v1 or v2) cgroups; each test needs root (they are `#[ignore]`d,
//! and scripts/test.sh selects them as root) and prints a SKIPPED line where the machine has no
//! cgroups it may use.

use crate::common::*;
use nodeward::resources::{format_cpuset, parse_cpuset};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const MIB: u64 = 1024 * 1024;

fn marker() -> String {
    unique_marker(900_000)
}

/// An agent whose node has cgroups (it needs root), or `None` after the SKIPPED line when the
/// machine has none it may use.
fn agent_with_cgroups(test: &str, dir: &Path) -> Option<(TestAgent, String)> {
    require_root();
    let agent = TestAgent::start_in(dir, "");
    let id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let attrs = agent.get(&format!("/v1/node/{id}"))["Attributes"].clone();
    match attrs["os.cgroups.version"].as_str() {
        Some(v) => Some((agent, v.to_string())),
        None => {
            println!("SKIPPED {test}: the agent found no cgroups it may use on this machine");
            None
        }
    }
}

/// The task's memory cgroup directory, by the naming rule (`<parent>/<alloc_id>.<task>`).
fn memory_dir(version: &str, alloc: &str) -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    let name = format!("nodeward/{alloc}.t");
    if version == "2" {
        root.join(name)
    } else {
        root.join("memory").join(name)
    }
}

fn limit_bytes(version: &str, dir: &Path) -> u64 {
    let file = if version == "2" {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn job(name: &str, command: &str, args: &[&str]) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    restart {{ attempts = 0  mode = "fail" }}
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = {command:?}
        args = {args:?}
      }}
      resources {{ memory = 32 }}
    }}
  }}
}}"#
    )
}

fn wait_dead(agent: &TestAgent, alloc: &str) -> Value {
    wait_for(WAIT, "the task dead", || {
        let s = agent.task_state(alloc, "t");
        (s["State"] == "dead").then_some(s)
    })
}

/// A shell that leaves a child behind which called `setsid`, closed its output and so left the
/// task's process group and pipes: only its cgroup still holds it. The child writes its PID to
/// `pidfile` before it becomes `sleep <m>`; the shell then runs `then`.
fn escaper(m: &str, pidfile: &Path, then: &str) -> String {
    format!(
        "setsid sh -c 'echo $$ > {p}; exec sleep {m}' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {p} ]; do sleep 0.05; done; {then}",
        p = pidfile.display()
    )
}

fn pid_in(pidfile: &Path) -> i32 {
    wait_for(WAIT, "the child's PID", || {
        std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
    })
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_over_its_memory_limit_is_oom_killed_and_reported() {
    let test = "a_task_over_its_memory_limit_is_oom_killed_and_reported";
    let dir = TempDir::new("cg-oom");
    let Some((agent, version)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        println!("SKIPPED {test}: no /usr/bin/python3 to allocate memory with");
        return;
    }
    // 100 MiB written (not only reserved: `bytes * n` fills it), then a pause that an OOM kill
    // cuts short; a task that is not killed exits 0.
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "oom",
        "/usr/bin/python3",
        &[
            "-c",
            "import time\nb = b'x' * (100 * 1024 * 1024)\ntime.sleep(2)",
        ],
    )));
    let state = wait_dead(&agent, &alloc);
    assert_eq!(state["Failed"], true, "{state:#}");
    let events = agent.events(&alloc, "t");
    assert!(
        events.contains(&(
            "Terminated".to_string(),
            "Exit Code: 137, Signal: 9, Exit Message: \"OOM Killed\"".to_string()
        )),
        "{version}: {events:#?}"
    );
    // The agent is not the victim: it answers, and its OOM score is the lowest there is.
    assert!(alive(agent.pid()));
    assert_eq!(agent.task_state(&alloc, "t")["State"], "dead");
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_runs_in_its_cgroup_and_what_it_leaves_behind_dies_with_it() {
    let test = "a_task_runs_in_its_cgroup_and_what_it_leaves_behind_dies_with_it";
    let dir = TempDir::new("cg-exit");
    let Some((agent, _)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let m = marker();
    let pidfile = dir.path().join("child.pid");
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        "leaver",
        "/bin/sh",
        &["-c", &escaper(&m, &pidfile, "exit 0")],
    )));
    wait_dead(&agent, &alloc);
    let events = agent.events(&alloc, "t");
    assert!(
        events.contains(&("Terminated".to_string(), "Exit Code: 0".to_string())),
        "{events:#?}"
    );
    let child = pid_in(&pidfile);
    wait_for(WAIT, "the task's escaped child to die", || {
        (!alive(child)).then_some(())
    });
    assert_eq!(pids_with(&m), Vec::<i32>::new());
}

/// Where `pid` is, as `/proc/<pid>/cgroup` says: its lines joined.
fn cgroup_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
}

/// A running task with an escaped child: its limit file reads 32 MiB, the child is in the task's
/// cgroup; then (after an agent killed with SIGKILL and started again, when `restart`) `job stop`
/// kills the child too and the cgroup is removed.
fn stop_kills_the_whole_tree(test: &str, restart: bool) {
    let dir = TempDir::new("cg-stop");
    let Some((mut agent, version)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let m = marker();
    let pidfile = dir.path().join("child.pid");
    let job_name = if restart { "kept" } else { "stopped" };
    let alloc = agent.alloc_id(&agent.run_hcl(&job(
        job_name,
        "/bin/sh",
        &["-c", &escaper(&m, &pidfile, "exec sleep 9999")],
    )));
    let child = pid_in(&pidfile);
    let mem = memory_dir(&version, &alloc);
    let name = format!("{alloc}.t");
    let check = |when: &str| {
        assert_eq!(limit_bytes(&version, &mem), 32 * MIB, "{when}");
        assert!(
            cgroup_of(child).contains(&name),
            "{when}: {}",
            cgroup_of(child)
        );
        assert!(alive(child), "{when}");
    };
    check("running");
    if restart {
        agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
        agent.restart();
        wait_for(WAIT, "the task re-attached", || {
            (agent.task_state(&alloc, "t")["State"] == "running").then_some(())
        });
        check("after the agent's restart");
    }
    let out = agent.cli(&["job", "stop", job_name]);
    assert!(out.status.success(), "{out:?}");
    wait_dead(&agent, &alloc);
    wait_for(WAIT, "the task's escaped child to die", || {
        (!alive(child)).then_some(())
    });
    assert_eq!(pids_with(&m), Vec::<i32>::new());
    wait_for(WAIT, "the task's cgroup removed", || {
        (!mem.exists()).then_some(())
    });
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn stopping_a_task_kills_every_process_in_its_cgroup() {
    stop_kills_the_whole_tree("stopping_a_task_kills_every_process_in_its_cgroup", false);
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn cgroups_and_their_limits_survive_an_agent_restart() {
    stop_kills_the_whole_tree("cgroups_and_their_limits_survive_an_agent_restart", true);
}

/// A task with `resources { cores = 1 }` holds one CPU: `NOMAD_CPU_CORES` names it, its
/// cgroup's `cpuset.cpus` is that CPU, and its processes may run on that CPU only
/// (`Cpus_allowed_list`, what the kernel enforces).
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_task_with_cores_runs_on_its_own_cpu() {
    let test = "a_task_with_cores_runs_on_its_own_cpu";
    let dir = TempDir::new("cg-cores");
    let Some((agent, version)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let m = marker();
    let hcl = format!(
        r#"
job "pinned" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo \"cores=$NOMAD_CPU_CORES\"; grep Cpus_allowed_list /proc/self/status; exec sleep {m}"]
      }}
      resources {{
        cores  = 1
        memory = 32
      }}
    }}
  }}
}}"#
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&hcl));
    let out = wait_for(WAIT, "the task's output", || {
        let out = agent.cli(&["alloc", "logs", &alloc, "t"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        // The whole line: its CPU list is its last word.
        (text.contains("Cpus_allowed_list") && text.ends_with('\n')).then_some(text)
    });
    let mut lines = out.lines();
    let cores = lines
        .next()
        .unwrap()
        .strip_prefix("cores=")
        .unwrap()
        .to_string();
    let cpu: u32 = cores.parse().unwrap_or_else(|_| panic!("one CPU: {out}"));
    let allowed = lines.next().unwrap().split_whitespace().last().unwrap();
    assert_eq!(allowed, cores, "{out}");
    let root = Path::new("/sys/fs/cgroup");
    let name = format!("nodeward/{alloc}.t");
    let cpuset = if version == "2" {
        root.join(name)
    } else {
        root.join("cpuset").join(name)
    };
    let cpus = std::fs::read_to_string(cpuset.join("cpuset.cpus")).unwrap();
    assert_eq!(cpus.trim(), cpu.to_string(), "v{version}");
    let out = agent.cli(&["job", "stop", "pinned"]);
    assert!(out.status.success(), "{out:?}");
    wait_dead(&agent, &alloc);
    assert_eq!(pids_with(&m), Vec::<i32>::new());
}

/// The task cgroup's `cpuset.cpus` (v1's cpuset controller, or the v2 directory).
fn cpuset_of(version: &str, alloc: &str) -> String {
    let root = Path::new("/sys/fs/cgroup");
    let name = format!("nodeward/{alloc}.t");
    let dir = if version == "2" {
        root.join(name)
    } else {
        root.join("cpuset").join(name)
    };
    std::fs::read_to_string(dir.join("cpuset.cpus"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The CPUs process `pid` may run on, as the kernel enforces them.
fn allowed_cpus(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A service whose task sleeps (marked `m`), asking `cores` cores (none when 0).
fn sleeper(name: &str, m: &str, cores: u32) -> String {
    let resources = if cores > 0 {
        format!("cores = {cores}\n        memory = 32")
    } else {
        "cpu = 100\n        memory = 32".to_string()
    };
    format!(
        r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sleep"
        args = ["{m}"]
      }}
      resources {{
        {resources}
      }}
    }}
  }}
}}"#
    )
}

/// Tasks without cores run on the CPUs no task with cores holds (Nomad's shared set): a running
/// one is moved off the CPU a new `cores = 1` task gets, one started after an agent crash and
/// restart is kept off it too, and both get every CPU back once the cores task stops.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn tasks_without_cores_are_kept_off_the_cpus_others_hold() {
    let test = "tasks_without_cores_are_kept_off_the_cpus_others_hold";
    if std::thread::available_parallelism().unwrap().get() < 2 {
        println!("SKIPPED {test}: needs two CPUs");
        return;
    }
    let dir = TempDir::new("cg-shared");
    let Some((mut agent, version)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let all = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let all = all.trim();
    let pid_of = |m: &str| wait_for(WAIT, "the task's process", || pids_with(m).first().copied());
    let (mb, ma, mc) = (marker(), marker(), marker());
    let plain = agent.alloc_id(&agent.run_hcl(&sleeper("plain", &mb, 0)));
    let plain_pid = pid_of(&mb);
    assert_eq!(allowed_cpus(plain_pid), all);
    let pinned = agent.alloc_id(&agent.run_hcl(&sleeper("pinned", &ma, 1)));
    let pinned_pid = pid_of(&ma);
    let held = allowed_cpus(pinned_pid);
    assert_eq!(cpuset_of(&version, &pinned), held);
    // The online CPUs but the held one, in the kernel's list form.
    let held_cpu: u32 = held.parse().unwrap_or_else(|_| panic!("one CPU: {held}"));
    let mut left = parse_cpuset(all).unwrap();
    left.retain(|c| *c != held_cpu);
    let shared = format_cpuset(&left);
    let check_shared = |pid: i32, alloc: &str, when: &str| {
        assert_eq!(cpuset_of(&version, alloc), shared, "{when}: held {held}");
        assert_eq!(allowed_cpus(pid), shared, "{when}: held {held}");
    };
    check_shared(plain_pid, &plain, "moved off the held CPU");

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    wait_for(WAIT, "the cores task re-attached", || {
        (agent.task_state(&pinned, "t")["State"] == "running").then_some(())
    });
    let later = agent.alloc_id(&agent.run_hcl(&sleeper("later", &mc, 0)));
    let later_pid = pid_of(&mc);
    check_shared(later_pid, &later, "started after the agent's restart");

    let out = agent.cli(&["job", "stop", "pinned"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(WAIT, "every CPU shared again", || {
        (allowed_cpus(plain_pid) == all && allowed_cpus(later_pid) == all).then_some(())
    });
    for job in ["plain", "later"] {
        let out = agent.cli(&["job", "stop", job]);
        assert!(out.status.success(), "{out:?}");
    }
    wait_for(WAIT, "the tasks gone", || {
        (pids_with(&mb).is_empty() && pids_with(&mc).is_empty() && pids_with(&ma).is_empty())
            .then_some(())
    });
}

/// `client { reserved { cores = "0" } }` keeps every task off CPU 0: a task without cores runs
/// on the others, and a `cores = 1` task gets one of them.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn reserved_cores_are_kept_from_every_task() {
    let test = "reserved_cores_are_kept_from_every_task";
    if std::thread::available_parallelism().unwrap().get() < 2 {
        println!("SKIPPED {test}: needs two CPUs");
        return;
    }
    require_root();
    let dir = TempDir::new("cg-reserved");
    let agent = TestAgent::start_in(dir.path(), "client {\n  reserved { cores = \"0\" }\n}\n");
    let nodes = agent.get("/v1/nodes");
    let node = agent.get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()));
    let Some(version) = node["Attributes"]["os.cgroups.version"].as_str() else {
        println!("SKIPPED {test}: the agent found no cgroups it may use on this machine");
        return;
    };
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut rest = parse_cpuset(online.trim()).unwrap();
    rest.retain(|c| *c != 0);
    let rest = format_cpuset(&rest);
    let pid_of = |m: &str| wait_for(WAIT, "the task's process", || pids_with(m).first().copied());
    let (mp, mq) = (marker(), marker());
    let plain = agent.alloc_id(&agent.run_hcl(&sleeper("plain", &mp, 0)));
    assert_eq!(allowed_cpus(pid_of(&mp)), rest);
    assert_eq!(cpuset_of(version, &plain), rest);
    agent.run_hcl(&sleeper("pinned", &mq, 1));
    let held = allowed_cpus(pid_of(&mq));
    assert_ne!(held, "0", "a reserved core was given");
    assert!(!allowed_cpus(pid_of(&mp)).split(',').any(|c| c == "0"));
    for job in ["plain", "pinned"] {
        let out = agent.cli(&["job", "stop", job]);
        assert!(out.status.success(), "{out:?}");
    }
    wait_for(WAIT, "the tasks gone", || {
        (pids_with(&mp).is_empty() && pids_with(&mq).is_empty()).then_some(())
    });
}

/// Stats are read from the task's cgroup: a child that left the task's process tree (a double
/// fork, then `setsid`) and holds 64 MiB is counted in its task's RSS, which the task's own
/// `/proc` tree (a `sleep`) could not show.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_tasks_stats_count_what_its_escaped_children_hold() {
    let test = "a_tasks_stats_count_what_its_escaped_children_hold";
    let dir = TempDir::new("cg-stats");
    let Some((agent, _)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    if !Path::new("/usr/bin/python3").exists() {
        println!("SKIPPED {test}: no /usr/bin/python3 to hold memory with");
        return;
    }
    let m = marker();
    let ready = dir.path().join("held");
    let hold = format!(
        "import time\nb = b'\\x01' * (64 * 1024 * 1024)\nopen({:?}, 'w').write('ok')\ntime.sleep({m})",
        ready.display().to_string()
    );
    let script =
        format!("(setsid /usr/bin/python3 -c \"$0\" </dev/null >/dev/null 2>&1 &); exec sleep {m}");
    let hcl = format!(
        r#"
job "escaped-stats" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", {script:?}, {hold:?}]
      }}
      resources {{ memory = 256 }}
    }}
  }}
}}"#
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&hcl));
    wait_for(WAIT, "the escaped child holding its memory", || {
        ready.exists().then_some(())
    });
    let stats = agent.get(&format!("/v1/client/allocation/{alloc}/stats"));
    let memory = &stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"];
    let rss = memory["RSS"].as_u64().unwrap();
    println!("stats: the task's RSS {rss} B with a 64 MiB escaped child");
    assert!(rss >= 64 * MIB * 9 / 10, "{stats}");
    assert!(memory["Usage"].as_u64().unwrap() >= rss, "{stats}");
    assert_eq!(
        memory["Measured"],
        serde_json::json!(["RSS", "Cache", "Swap", "Usage", "Max Usage"])
    );
    let cpu = &stats["Tasks"]["t"]["ResourceUsage"]["CpuStats"];
    assert_eq!(
        cpu["Measured"],
        serde_json::json!([
            "System Mode",
            "User Mode",
            "Throttled Periods",
            "Throttled Time",
            "Percent"
        ])
    );
    let out = agent.cli(&["job", "stop", "escaped-stats"]);
    assert!(out.status.success(), "{out:?}");
    wait_dead(&agent, &alloc);
    wait_for(WAIT, "the escaped child to die", || {
        pids_with(&m).is_empty().then_some(())
    });
}

/// Thaws a cgroup when dropped: a test that fails must not leave a keeper held by a freeze.
struct Thaw(PathBuf, &'static str, &'static str);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join(self.1), self.2);
    }
}

/// An agent killed between the freeze and the thaw of a task's cgroup (its removal kills what is
/// left there that way) leaves the cgroup frozen, and the task's next start reuses it. That start
/// must not stop there: the child would sit frozen before its `execve`, and the keeper, which
/// waits for that `execve`, with it, leaving every task of the node unwatched. Here the main
/// task's cgroup is made and frozen while its prestart task runs; the main task then starts.
#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn a_cgroup_left_frozen_does_not_hold_the_next_start() {
    let test = "a_cgroup_left_frozen_does_not_hold_the_next_start";
    let dir = TempDir::new("cg-frozen");
    let Some((agent, version)) = agent_with_cgroups(test, dir.path()) else {
        return;
    };
    let go = dir.path().join("go");
    let hcl = format!(
        r#"
job "thawed" {{
  group "g" {{
    task "init" {{
      driver = "raw_exec"
      lifecycle {{
        hook = "prestart"
      }}
      config {{
        command = "/bin/sh"
        args = ["-c", "while [ ! -f {go} ]; do sleep 0.05; done"]
      }}
    }}
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", "exec sleep 9999"]
      }}
    }}
  }}
}}"#,
        go = go.display()
    );
    let alloc = agent.alloc_id(&agent.run_hcl(&hcl));
    wait_for(WAIT, "the prestart task running", || {
        (agent.task_state(&alloc, "init")["State"] == "running").then_some(())
    });
    let name = format!("nodeward/{alloc}.t");
    let root = Path::new("/sys/fs/cgroup");
    let (kill_dir, file, frozen, thawed) = if version == "2" {
        (root.join(&name), "cgroup.freeze", "1", "0")
    } else {
        (
            root.join("freezer").join(&name),
            "freezer.state",
            "FROZEN",
            "THAWED",
        )
    };
    std::fs::create_dir(&kill_dir).unwrap();
    std::fs::write(kill_dir.join(file), frozen).unwrap();
    let _thaw = Thaw(kill_dir.clone(), file, thawed);
    std::fs::write(&go, "").unwrap();
    let t = wait_for(WAIT, "the main task running", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "running" && s["PID"].is_i64()).then_some(s)
    });
    let pid = t["PID"].as_i64().unwrap() as i32;
    wait_for(WAIT, "the main task's sleep", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() == "sleep")
            .then_some(())
    });
    assert!(
        cgroup_of(pid).contains(&format!("{alloc}.t")),
        "{}",
        cgroup_of(pid)
    );
    // The keeper still answers: the job stops.
    let out = agent.cli(&["job", "stop", "thawed"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(WAIT, "the main task dead", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
}
