//! Misbehaving peers through the real agent: tasks that fork and leave, print without end or die in
//! every way; a CSI plugin that never answers; host-volume plugins that vanish or hang. After each,
//! the agent has no more threads than before (a small margin for the HTTP server's connection
//! threads) and no process of the scenario is left.
//!
//! What tests/agent_tasks.rs, tests/csi_agent.rs and tests/volumes*.rs already cover (kill_timeout
//! escalation, a CSI plugin without a socket, shutdown during a hanging probe or plugin call, the
//! library-level plugin timeouts and output cap) is not repeated.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Thread growth tolerated: tiny_http keeps a thread per open connection for a moment.
const THREAD_MARGIN: usize = 3;

fn marker() -> String {
    // A unique sleep length marks a scenario's processes in /proc.
    unique_marker(100_000)
}

fn threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Thread names and how many of each, to tell what leaked.
fn thread_names(pid: i32) -> std::collections::BTreeMap<String, usize> {
    let mut names = std::collections::BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        *names.entry(comm.trim().to_string()).or_insert(0) += 1;
    }
    names
}

fn status_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

/// The agent's direct children that are zombies (exited, never reaped).
fn zombie_children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let ppid: i32 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        if ppid == pid && state == Some("Z") {
            out.push(p);
        }
    }
    out
}

/// What the agent looked like before a scenario.
struct Baseline {
    pid: i32,
    threads: usize,
}

impl Baseline {
    fn take(agent: &TestAgent) -> Baseline {
        // Once start-up threads (restore, fingerprints) have come and gone: the count unchanged
        // for a second, not after a fixed time a busy machine may spend before they even start
        // (a baseline taken before a long-lived thread starts would see it as a leak).
        let pid = agent.pid();
        let deadline = Instant::now() + WAIT;
        let (mut last, mut since) = (threads(pid), Instant::now());
        while since.elapsed() < Duration::from_secs(1) {
            assert!(
                Instant::now() < deadline,
                "the agent's threads never settled"
            );
            std::thread::sleep(Duration::from_millis(50));
            let now = threads(pid);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
        let b = Baseline { pid, threads: last };
        println!("baseline: {} threads", b.threads);
        b
    }

    /// Waits until the agent is back to its thread count (plus the margin), no process carries
    /// `marker` and the agent has no zombie children.
    fn settled(&self, what: &str, markers: &[&str]) {
        let deadline = Instant::now() + WAIT;
        while threads(self.pid) > self.threads + THREAD_MARGIN {
            assert!(
                Instant::now() < deadline,
                "{what}: {} threads after {WAIT:?}, {} before: {:?}",
                threads(self.pid),
                self.threads,
                thread_names(self.pid)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        for m in markers {
            wait_for(WAIT, &format!("{what}: no process with {m}"), || {
                pids_with(m).is_empty().then_some(())
            });
        }
        wait_for(WAIT, &format!("{what}: no zombie children"), || {
            zombie_children(self.pid).is_empty().then_some(())
        });
        println!(
            "{what}: {} threads (baseline {})",
            threads(self.pid),
            self.threads
        );
    }
}

fn wait_dead(agent: &TestAgent, alloc: &str, task: &str) -> Value {
    wait_for(WAIT, &format!("{task} dead"), || {
        let s = agent.task_state(alloc, task);
        (s["State"] == "dead").then_some(s)
    })
}

/// Registers a batch job of one `/bin/sh -c script` task (JSON, so the script is taken as it is);
/// returns its allocation.
fn batch(agent: &TestAgent, name: &str, restart: Value, command: &str, args: &[&str]) -> String {
    let job = json!({"Job": {"ID": name, "Name": name, "Type": "batch", "TaskGroups": [{
        "Name": "g", "Count": 1, "RestartPolicy": restart,
        "Tasks": [{"Name": "t", "Driver": "raw_exec",
                   "Config": {"command": command, "args": args}}]}]}});
    let (s, b) = agent.put_json("/v1/jobs", &job);
    assert_eq!(s, 200, "{b}");
    agent.alloc_id(name)
}

fn no_restarts() -> Value {
    json!({"Attempts": 0, "Interval": 60_000_000_000u64, "Delay": 100_000_000, "Mode": "fail"})
}

#[test]
fn tasks_that_fork_and_exit_leave_no_process_behind() {
    let dir = TempDir::new("mis-fork");
    let agent = TestAgent::start_in(dir.path(), "");
    let base = Baseline::take(&agent);
    // Children, grandchildren (daemonised by a subshell) and a child in a session of its own.
    let (m1, m2, m3, m4) = (marker(), marker(), marker(), marker());
    let script = format!(
        "sleep {m1} & sleep {m1} & (sleep {m2} &) ; (/usr/bin/setsid sleep {m3} &) ; sleep 0.2; exit 0"
    );
    let alloc = batch(&agent, "forker", no_restarts(), "/bin/sh", &["-c", &script]);
    let state = wait_dead(&agent, &alloc, "t");
    assert_eq!(state["Failed"], false, "{state}");
    // A crash loop whose every run leaves a child.
    let alloc2 = batch(
        &agent,
        "crashforker",
        json!({"Attempts": 3, "Interval": 60_000_000_000u64, "Delay": 100_000_000, "Mode": "fail"}),
        "/bin/sh",
        &["-c", &format!("sleep {m4} & sleep {m4} & exit 1")],
    );
    let state = wait_dead(&agent, &alloc2, "t");
    assert_eq!(state["Restarts"], 3, "{state}");
    base.settled("forking tasks", &[&m1, &m2, &m3, &m4]);

    // A running service that forks, then is stopped.
    let m5 = marker();
    let job = agent.run_hcl(&format!(
        r#"
job "svc" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{ command = "/bin/sh"  args = ["-c", "sleep {m5} & (sleep {m5} &) ; (/usr/bin/setsid sleep {m5} &) ; exec sleep {m5}"] }}
    }}
  }}
}}"#
    ));
    let alloc3 = agent.alloc_id(&job);
    wait_for(WAIT, "four sleepers", || {
        (pids_with(&m5).len() == 4).then_some(())
    });
    let (s, b) = agent.request("POST", &format!("/v1/allocation/{alloc3}/stop"), None);
    assert_eq!(s, 200, "{b}");
    wait_dead(&agent, &alloc3, "t");
    base.settled("stopped forking service", &[&m5]);
}

#[test]
fn tasks_printing_gigabytes_keep_the_agent_small() {
    let dir = TempDir::new("mis-print");
    let agent = TestAgent::start_in(dir.path(), "");
    let base = Baseline::take(&agent);
    let rss_before = status_kib(base.pid, "VmRSS:");
    let hwm_before = status_kib(base.pid, "VmHWM:");
    // 1 GiB without a single newline on stdout, 1 GiB of short lines on stderr, at once.
    let alloc = batch(
        &agent,
        "chatty",
        no_restarts(),
        "/bin/sh",
        &[
            "-c",
            "/usr/bin/head -c 1073741824 /dev/zero & /usr/bin/yes | /usr/bin/head -c 1073741824 >&2; wait",
        ],
    );
    let t0 = Instant::now();
    let state = wait_for(Duration::from_secs(600), "chatty task dead", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "dead").then_some(s)
    });
    println!("2 GiB of output took {:?}", t0.elapsed());
    assert_eq!(state["Failed"], false, "{state}");
    let rss_after = status_kib(base.pid, "VmRSS:");
    let hwm_after = status_kib(base.pid, "VmHWM:");
    println!("agent RSS {rss_before} -> {rss_after} KiB, peak {hwm_before} -> {hwm_after} KiB");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    assert!(
        hwm_after < hwm_before + 128 * 1024,
        "peak RSS grew from {hwm_before} to {hwm_after} KiB"
    );
    // The keeper read all of it, through one buffer: its peak stays small.
    let keeper = agent.keeper_pid().expect("the keeper runs");
    let keeper_hwm = status_kib(keeper, "VmHWM:");
    println!("keeper peak RSS {keeper_hwm} KiB");
    assert!(keeper_hwm < 32 * 1024, "keeper peak RSS {keeper_hwm} KiB");
    // Rotation bounds the disk too: 10 files of 10 MB per stream by default.
    let logs = agent.data_dir.join(format!("alloc/{alloc}/alloc/logs"));
    let total: u64 = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    println!("log directory holds {} MiB", total >> 20);
    assert!(total <= 2 * 10 * 10 * 1024 * 1024 + (1 << 20), "{total}");
    // The newest bytes are served.
    // Once the keeper drained the pipe, which it does after it reported the exit.
    wait_eq(
        WAIT,
        "the newest bytes of stderr",
        || {
            agent.request(
                "GET",
                &format!("/v1/client/fs/logs/{alloc}?task=t&type=stderr&origin=end&offset=6"),
                None,
            )
        },
        (200, "y\ny\ny\n".to_string()),
    );
    base.settled("chatty task", &[]);
}

#[test]
fn tasks_exiting_in_every_way_are_reported_as_nomad_does() {
    let dir = TempDir::new("mis-exit");
    let agent = TestAgent::start_in(dir.path(), "");
    let base = Baseline::take(&agent);
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"\x7fELF not really").unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cases: &[(&str, &str, &str, bool)] = &[
        ("zero", "exit 0", "Exit Code: 0", false),
        ("seven", "exit 7", "Exit Code: 7", true),
        ("max", "exit 255", "Exit Code: 255", true),
        ("closed", "exec >&- 2>&-; exit 3", "Exit Code: 3", true),
        ("hup", "kill -HUP $$", "Exit Code: 129, Signal: 1", true),
        ("term", "kill -TERM $$", "Exit Code: 143, Signal: 15", true),
        ("usr1", "kill -USR1 $$", "Exit Code: 138, Signal: 10", true),
        (
            "segv",
            "ulimit -c 0; kill -SEGV $$",
            "Exit Code: 139, Signal: 11",
            true,
        ),
        ("kill", "kill -KILL $$", "Exit Code: 137, Signal: 9", true),
        ("exec", "exec /bin/sleep 0.1", "Exit Code: 0", false),
    ];
    let mut allocs = Vec::new();
    for (name, script, _, _) in cases {
        allocs.push(batch(
            &agent,
            name,
            no_restarts(),
            "/bin/sh",
            &["-c", script],
        ));
    }
    let bad = batch(
        &agent,
        "badexec",
        no_restarts(),
        garbage.to_str().unwrap(),
        &[],
    );
    for ((name, _, message, failed), alloc) in cases.iter().zip(&allocs) {
        let state = wait_dead(&agent, alloc, "t");
        let events = agent.events(alloc, "t");
        let terminated: Vec<&str> = events
            .iter()
            .filter(|(t, _)| t == "Terminated")
            .map(|(_, m)| m.as_str())
            .collect();
        assert_eq!(terminated, [*message], "{name}: {events:#?}");
        assert_eq!(state["Failed"], *failed, "{name}: {state}");
        let want_last = if *failed {
            "Policy allows no restarts"
        } else {
            "Exit Code: 0"
        };
        assert_eq!(events.last().unwrap().1, want_last, "{name}: {events:#?}");
        let status = agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"].clone();
        assert_eq!(
            status,
            if *failed { "failed" } else { "complete" },
            "{name}"
        );
    }
    let state = wait_dead(&agent, &bad, "t");
    assert_eq!(state["Failed"], true);
    let events = agent.events(&bad, "t");
    let failure = events
        .iter()
        .find(|(t, _)| t == "Driver Failure")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(
        failure
            .1
            .starts_with("Failed to start task: failed to start"),
        "{events:#?}"
    );
    base.settled("exits", &[]);
}

const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");

fn hanging_csi_job(name: &str, m: &str, restart: &str, health_timeout: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    restart {{ {restart} }}
    task "plugin" {{
      driver = "raw_exec"
      kill_timeout = "3s"
      config {{ command = "{PLUGIN}"  args = ["--mode", "hang", "--name", "{m}", "--endpoint", "${{CSI_ENDPOINT}}"] }}
      csi_plugin {{ id = "hang-{name}"  type = "monolith"  health_timeout = "{health_timeout}" }}
    }}
  }}
}}"#
    )
}

#[test]
fn a_csi_plugin_that_never_answers_meets_its_deadline_and_stops_promptly() {
    let dir = TempDir::new("mis-csi");
    let agent = TestAgent::start_in(dir.path(), "");
    // gRPC's core starts its global threads (timer, executor, resolver, the completion queue) at
    // its first use and keeps them: the baseline is taken after a first round has run.
    let mut base = None;
    let mut markers = Vec::new();
    for round in 0..2 {
        let m = marker();
        let job = agent.run_hcl(&hanging_csi_job(
            &format!("deadline{round}"),
            &m,
            "attempts = 1  interval = \"1m\"  delay = \"500ms\"  mode = \"fail\"",
            "2s",
        ));
        let alloc = agent.alloc_id(&job);
        let t0 = Instant::now();
        let state = wait_dead(&agent, &alloc, "plugin");
        println!(
            "two runs of a hanging plugin with a 2s health timeout: {:?}",
            t0.elapsed()
        );
        assert_eq!(state["Failed"], true, "{state}");
        assert_eq!(state["Restarts"], 1, "{state}");
        let events = agent.events(&alloc, "plugin");
        let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
        let unhealthy: Vec<&(String, String)> = events
            .iter()
            .filter(|(t, _)| t == "Plugin became unhealthy")
            .collect();
        assert_eq!(unhealthy.len(), 2, "{events:#?}");
        for (_, msg) in unhealthy {
            assert!(msg.starts_with("Error: CSI plugin failed probe: "), "{msg}");
        }
        assert!(
            events.contains(&(
                "Restarting".to_string(),
                "CSI plugin did not become healthy before configured 2s health timeout".to_string()
            )),
            "{events:#?}"
        );
        assert_eq!(types.last(), Some(&"Not Restarting"), "{events:#?}");
        assert!(agent
            .get("/v1/plugins?type=csi")
            .as_array()
            .unwrap()
            .is_empty());
        wait_for(WAIT, "plugin processes gone", || {
            pids_with(&m).is_empty().then_some(())
        });
        if base.is_none() {
            base = Some(Baseline::take(&agent));
        }
        markers.push(m);
    }
    let base = base.unwrap();

    // Stopped while a probe hangs: the stop does not wait for the probe.
    let m2 = marker();
    let job = agent.run_hcl(&hanging_csi_job(
        "stopped",
        &m2,
        "attempts = 0  mode = \"fail\"",
        "1m",
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "plugin running", || {
        (agent.task_state(&alloc, "plugin")["State"] == "running").then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let (s, b) = agent.request("POST", &format!("/v1/allocation/{alloc}/stop"), None);
    assert_eq!(s, 200, "{b}");
    wait_dead(&agent, &alloc, "plugin");
    let took = t0.elapsed();
    println!("stop with a hanging probe took {took:?}");
    // At most kill_timeout (3s) for the plugin's process; a stop waiting on the probe would hang.
    assert!(took < Duration::from_secs(15), "{took:?}");
    let events = agent.events(&alloc, "plugin");
    assert_eq!(events.last().unwrap().0, "Killed", "{events:#?}");
    markers.push(m2);
    let markers: Vec<&str> = markers.iter().map(String::as_str).collect();
    base.settled("hanging CSI plugins", &markers);
}

fn create_in_background(
    agent: &TestAgent,
    name: &str,
    plugin: &str,
) -> std::thread::JoinHandle<(u16, String)> {
    let url = agent.url("/v1/volume/host/create");
    let body = json!({"Volume": {"Name": name, "PluginID": plugin}}).to_string();
    std::thread::spawn(move || {
        let http = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(120)))
                .build(),
        );
        let mut r = http.put(&url).send(body).unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    })
}

#[test]
fn a_dhv_plugin_that_vanishes_or_dies_mid_call_leaves_a_consistent_state() {
    let dir = TempDir::new("mis-dhv");
    let plugins = dir.path().join("plugins");
    let (m1, m2) = (marker(), marker());
    let body = |m: &str| {
        format!(
            r#"case "$1" in
  fingerprint) echo '{{"version": "1.0.0"}}' ;;
  create) /bin/sleep {m}
    /bin/mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" || exit 1
    echo "{{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": 1}}" ;;
  delete) /bin/rm -rf "$DHV_CREATED_PATH" ;;
esac"#
        )
    };
    // `sleep` with a marker as its length would sleep for days: the marker is a fraction here.
    let (s1, s2) = (format!("3.{}", &m1[7..]), format!("600.{}", &m2[7..]));
    plugin(&plugins, "vanish", &body(&s1));
    plugin(&plugins, "dies", &body(&s2));
    let mut agent = start_with_plugins(&dir);
    let base = Baseline::take(&agent);

    // The file is removed while the plugin sleeps in create: the running plugin finishes.
    let call = create_in_background(&agent, "v", "vanish");
    wait_for(WAIT, "vanish sleeping", || {
        (!pids_with(&s1).is_empty()).then_some(())
    });
    std::fs::remove_file(plugins.join("vanish")).unwrap();
    let (s, b) = call.join().unwrap();
    assert_eq!(s, 200, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    let id = v["Volume"]["ID"].as_str().unwrap().to_string();
    assert_eq!(
        agent.get(&format!("/v1/volume/host/{id}"))["State"],
        "ready"
    );
    // Deleting needs the plugin: refused and kept, unless forced.
    let (s, b) = agent.request("DELETE", &format!("/v1/volume/host/{id}"), None);
    assert!(s >= 400, "{s} {b}");
    assert!(b.contains("no such plugin: \"vanish\""), "{b}");
    assert_eq!(
        agent.get(&format!("/v1/volume/host/{id}"))["State"],
        "ready"
    );
    let (s, b) = agent.request("DELETE", &format!("/v1/volume/host/{id}?force=true"), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        agent
            .request("GET", &format!("/v1/volume/host/{id}"), None)
            .0,
        404
    );

    // The plugin is killed from outside while it sleeps in create: an error, nothing recorded.
    let call = create_in_background(&agent, "d", "dies");
    let sleeper = wait_for(WAIT, "dies sleeping", || pids_with(&s2).first().copied());
    let shell = std::fs::read_to_string(format!("/proc/{sleeper}/stat"))
        .unwrap()
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<i32>()
        .unwrap();
    unsafe { libc::kill(shell, libc::SIGKILL) };
    let (s, b) = call.join().unwrap();
    assert_eq!(s, 500, "{b}");
    // The plugin's end decides the answer: its sleeping child, which still holds stdout, must not
    // keep the request waiting for the 60 s create timeout.
    assert!(
        b.starts_with("error creating volume \"")
            && b.contains("with plugin \"dies\": ")
            && b.ends_with("signal: killed"),
        "{b}"
    );
    assert_eq!(agent.get("/v1/volumes?type=host"), json!([]));
    base.settled("vanishing and dying plugins", &[&s1, &s2]);

    // What the agent persisted agrees: nothing comes back after a restart.
    agent.stop_with(libc::SIGTERM, Duration::from_secs(30));
    agent.restart();
    assert_eq!(agent.get("/v1/volumes?type=host"), json!([]));
}

#[test]
fn a_dhv_plugin_hanging_in_fingerprint_is_killed_at_its_timeout() {
    let dir = TempDir::new("mis-fp");
    let plugins = dir.path().join("plugins");
    let m = marker();
    plugin(
        &plugins,
        "stuck",
        &format!("/bin/sleep {m} &\n/bin/sleep {m}"),
    );
    plugin(&plugins, "fine", "echo '{\"version\": \"2.0.0\"}'");
    let t0 = Instant::now();
    let agent = start_with_plugins(&dir);
    let base = Baseline::take(&agent);
    let attrs = || {
        let node = agent.get("/v1/nodes")[0]["ID"]
            .as_str()
            .unwrap()
            .to_string();
        agent.get(&format!("/v1/node/{node}"))["Attributes"].clone()
    };
    for round in 0..3 {
        wait_for(WAIT, "the fingerprint to end", || {
            (attrs()["plugins.host_volume.fine.version"] == "2.0.0" && pids_with(&m).is_empty())
                .then_some(())
        });
        println!("round {round}: fingerprints done after {:?}", t0.elapsed());
        assert!(attrs().get("plugins.host_volume.stuck.version").is_none());
        // The API answers while a fingerprint hangs.
        unsafe { libc::kill(agent.pid(), libc::SIGHUP) };
        wait_for(WAIT, "the stuck plugin to run again", || {
            (!pids_with(&m).is_empty()).then_some(())
        });
        assert_eq!(agent.get("/v1/agent/health")["client"]["ok"], true);
    }
    base.settled("hanging fingerprints", &[&m]);
}
