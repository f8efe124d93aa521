//! What a task gets of the agent's environment (docs/security.md, "What a task gets from the
//! agent"): the variables `client { task_env_passthrough }` lets through, never the agent's token
//! or its systemd socket, nothing else of the agent's. Checked on the real processes' environment
//! (`/proc/<pid>/environ`) of tasks, of a CSI plugin task and of the keeper that starts them.

use crate::common::*;
use std::collections::BTreeMap;
use std::time::Duration;

const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");
const WAIT: Duration = Duration::from_secs(60);

fn marker() -> String {
    unique_marker(500_000)
}

/// The agent's environment in these tests: what a service unit might export.
fn agent_env(m: &str) -> Vec<(String, String)> {
    [
        ("NODEWARD_TOKEN", format!("token-{m}")),
        ("NOTIFY_SOCKET", format!("/nonexistent/notify-{m}")),
        ("DB_PASSWORD", format!("secret-{m}")),
        ("LANG", "C.UTF-8".to_string()),
        ("LC_TIME", "C".to_string()),
        ("TZ", "UTC".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn start(dir: &TempDir, extra: &str, env: &[(String, String)]) -> TestAgent {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    TestAgent::start_in_with_env(dir.path(), extra, &env)
}

/// The environment of a live task. Read again while it is empty: a process in the middle of an
/// `execve` (the task's shell execs `sleep`) shows an empty one until the new program's stack is
/// set up, which a loaded machine made long enough to be seen.
fn environ(pid: i32) -> BTreeMap<String, String> {
    parse_environ(&wait_for(WAIT, "a task's environment", || {
        std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .filter(|e| !e.is_empty())
    }))
}

/// The environment of the keeper, which is empty by design and never execs.
fn keeper_environ(pid: i32) -> BTreeMap<String, String> {
    parse_environ(&std::fs::read(format!("/proc/{pid}/environ")).unwrap())
}

fn parse_environ(bytes: &[u8]) -> BTreeMap<String, String> {
    bytes
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let v = String::from_utf8_lossy(v);
            let (k, v) = v.split_once('=').unwrap_or((&v, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// A task that records what `${env.X}` gave it and sleeps.
fn job(name: &str, m: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      env {{ GREETING = "hello" }}
      config {{
        command = "/bin/sh"
        args = ["-c", "echo '${{env.DB_PASSWORD}}|${{env.NODEWARD_TOKEN}}|${{env.LANG}}' > local/interpolated; exec sleep {m}"]
      }}
    }}
  }}
}}"#
    )
}

fn running_pid(agent: &TestAgent, alloc: &str, task: &str) -> i32 {
    wait_for(WAIT, "the task running", || {
        let s = agent.task_state(alloc, task);
        (s["State"] == "running")
            .then(|| s["PID"].as_i64())
            .flatten()
    }) as i32
}

fn interpolated(agent: &TestAgent, alloc: &str) -> String {
    let path = agent
        .data_dir
        .join(format!("alloc/{alloc}/t/local/interpolated"));
    wait_for(WAIT, "the task's interpolated line", || {
        std::fs::read_to_string(&path)
            .ok()
            .filter(|s| s.ends_with('\n'))
    })
    .trim_end()
    .to_string()
}

/// With the default passthrough a task gets `PATH`, `LANG`, `LC_*`, `TZ`, its `NOMAD_*` and its
/// own `env`: none of the agent's token, notification socket or other secrets, neither in its
/// environment nor through `${env.X}`. The keeper, which forks every task, has none of them
/// either, and a CSI plugin task is treated like any task.
#[test]
fn a_task_gets_only_the_passed_through_variables_of_the_agent() {
    let dir = TempDir::new("env-def");
    let m = marker();
    let env = agent_env(&m);
    let agent = start(&dir, "", &env);
    agent.run_hcl(&job("env", &m));
    let alloc = agent.alloc_id("env");
    let pid = running_pid(&agent, &alloc, "t");
    let task = environ(pid);
    // PWD: the task's shell sets and exports it itself.
    let allowed = |k: &str| {
        ["PATH", "LANG", "TZ", "GREETING", "PWD"].contains(&k)
            || k.starts_with("LC_")
            || k.starts_with("NOMAD_")
    };
    let extra: Vec<&String> = task.keys().filter(|k| !allowed(k)).collect();
    assert!(
        extra.is_empty(),
        "the task got {extra:?} of the agent: {task:?}"
    );
    assert_eq!(task.get("LANG").map(String::as_str), Some("C.UTF-8"));
    assert_eq!(task.get("LC_TIME").map(String::as_str), Some("C"));
    assert_eq!(task.get("TZ").map(String::as_str), Some("UTC"));
    assert_eq!(task.get("GREETING").map(String::as_str), Some("hello"));
    assert_eq!(task.get("NOMAD_ALLOC_ID"), Some(&alloc));
    assert!(task.contains_key("PATH"));
    assert_eq!(
        interpolated(&agent, &alloc),
        "${env.DB_PASSWORD}|${env.NODEWARD_TOKEN}|C.UTF-8",
        "an agent variable that is not passed through is not interpolated either"
    );

    let keeper = agent.keeper_pid().expect("the keeper runs");
    let kept = keeper_environ(keeper);
    for (k, _) in &env {
        assert!(!kept.contains_key(k), "the keeper has {k}: {kept:?}");
    }

    agent.run_hcl(&format!(
        r#"
job "csi-env" {{
  group "g" {{
    task "plugin" {{
      driver = "raw_exec"
      config {{ command = "{PLUGIN}"  args = ["--mode", "healthy", "--endpoint", "${{CSI_ENDPOINT}}"] }}
      csi_plugin {{ id = "envcheck"  type = "monolith"  health_timeout = "30s" }}
    }}
  }}
}}"#
    ));
    let plugin_alloc = agent.alloc_id("csi-env");
    let plugin = environ(running_pid(&agent, &plugin_alloc, "plugin"));
    let extra: Vec<&String> = plugin
        .keys()
        .filter(|k| !allowed(k) && k.as_str() != "CSI_ENDPOINT")
        .collect();
    assert!(extra.is_empty(), "the plugin got {extra:?}: {plugin:?}");
    assert!(plugin.contains_key("CSI_ENDPOINT"), "{plugin:?}");
}

/// `task_env_passthrough = ["*"]` passes the agent's whole environment, except what is never
/// passed: the token and the notification socket stay the agent's, pattern or not.
#[test]
fn the_agents_token_and_notify_socket_never_reach_a_task() {
    let dir = TempDir::new("env-all");
    let m = marker();
    let agent = start(
        &dir,
        "client { task_env_passthrough = [\"*\"] }",
        &agent_env(&m),
    );
    agent.run_hcl(&job("env", &m));
    let alloc = agent.alloc_id("env");
    let task = environ(running_pid(&agent, &alloc, "t"));
    assert_eq!(task.get("DB_PASSWORD"), Some(&format!("secret-{m}")));
    assert!(!task.contains_key("NODEWARD_TOKEN"), "{task:?}");
    assert!(!task.contains_key("NOTIFY_SOCKET"), "{task:?}");
    assert_eq!(
        interpolated(&agent, &alloc),
        format!("secret-{m}|${{env.NODEWARD_TOKEN}}|C.UTF-8")
    );
}

/// Listing a variable that is never passed is a configuration error: the agent does not start.
#[test]
fn listing_the_token_for_tasks_is_a_configuration_error() {
    let dir = TempDir::new("env-bad");
    let config = dir.path().join("agent.hcl");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\nports {{ http = 0 }}\nclient {{ task_env_passthrough = [\"PATH\", \"NOTIFY_SOCKET\"] }}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["agent", "-config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "client.task_env_passthrough: NOTIFY_SOCKET is never passed to tasks: it is the agent's systemd notification socket"
        ),
        "{stderr}"
    );
}

/// `${node.*}`, `${attr.*}` and `${meta.*}` in a task's arguments are what the node is when the
/// task starts, as Nomad's client fills them in: its datacenter, class, pool, region, name and
/// attributes, and the agent's `client { meta }` for a key the job does not set (a key it sets
/// is the job's). An attribute the node does not have stays as written. `env` written as a map
/// attribute, as Nomad takes it, gives the task its variables, interpolated as a block's.
#[test]
fn node_attributes_and_meta_are_filled_in_when_a_task_starts() {
    let dir = TempDir::new("env-node");
    let agent = TestAgent::start_in(
        dir.path(),
        "datacenter = \"eu-west-1\"\nclient {\n  node_class = \"gpu\"\n  meta {\n    rack = \"r1\"\n    zone = \"node-zone\"\n  }\n}\n",
    );
    let m = marker();
    agent.run_hcl(&format!(
        r#"
job "node-vars" {{
  datacenters = ["eu-*"]
  meta {{
    zone     = "job-zone"
    my-key   = "dashed"
  }}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      env = merge({{ FROM_MAP = "map" }}, {{ DC = "${{node.datacenter}}" }})
      config {{
        command = "/bin/sh"
        args = ["-c", "echo \"$1|$NOMAD_META_my_key|$NOMAD_META_MY_KEY|$FROM_MAP|$DC\" > local/interpolated; exec sleep {m}", "x",
                "${{node.datacenter}}|${{node.class}}|${{node.pool}}|${{node.region}}|${{node.unique.name}}|${{attr.kernel.name}}|${{attr.cpu.arch}}|${{meta.rack}}|${{meta.zone}}|${{attr.no.such}}|${{attr.unique.network.ip-address}}|${{attr.memory.totalbytes}}|${{attr.cpu.totalcompute}}|${{meta.my-key}}"]
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id("node-vars");
    let node_id = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let node = agent.get(&format!("/v1/node/{node_id}"));
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let want = [
        s(&node["Datacenter"]),
        s(&node["NodeClass"]),
        s(&node["NodePool"]),
        "global".to_string(),
        s(&node["Name"]),
        s(&node["Attributes"]["kernel.name"]),
        s(&node["Attributes"]["cpu.arch"]),
        s(&node["Meta"]["rack"]),
        "job-zone".to_string(),
        "${attr.no.such}".to_string(),
        s(&node["Attributes"]["unique.network.ip-address"]),
        s(&node["Attributes"]["memory.totalbytes"]),
        s(&node["Attributes"]["cpu.totalcompute"]),
        "dashed".to_string(),
        "dashed".to_string(),
        "dashed".to_string(),
        "map".to_string(),
        "eu-west-1".to_string(),
    ]
    .join("|");
    assert_eq!(s(&node["Datacenter"]), "eu-west-1");
    assert_eq!(s(&node["Meta"]["rack"]), "r1");
    // The resource attributes are the node's resources, in Nomad's units.
    let memory_mb = node["NodeResources"]["Memory"]["MemoryMB"]
        .as_u64()
        .unwrap();
    assert_eq!(
        s(&node["Attributes"]["memory.totalbytes"]),
        (memory_mb * 1024 * 1024).to_string()
    );
    let ip: std::net::IpAddr = s(&node["Attributes"]["unique.network.ip-address"])
        .parse()
        .unwrap();
    assert!(!ip.is_unspecified());
    assert_eq!(interpolated(&agent, &alloc), want);
}

/// Each allocation's task gets Nomad's names for it: `NOMAD_ALLOC_INDEX`, `NOMAD_ALLOC_NAME`,
/// `NOMAD_SHORT_ALLOC_ID`, and the job's `NOMAD_NAMESPACE` and `NOMAD_REGION`, the node's
/// `NOMAD_DC`; the same names interpolate in the task's config.
#[test]
fn each_allocation_gets_its_index_name_and_short_id() {
    let dir = TempDir::new("env-alloc");
    let agent = TestAgent::start_in(dir.path(), "datacenter = \"dc7\"\n");
    let m = marker();
    agent.run_hcl(&format!(
        r#"
job "ids" {{
  region      = "eu"
  namespace   = "ops"
  datacenters = ["dc7"]
  group "g" {{
    count = 2
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo \"$1\" > local/interpolated; exec sleep {m}", "x", "${{NOMAD_ALLOC_NAME}}|${{NOMAD_ALLOC_INDEX}}"]
      }}
    }}
  }}
}}"#
    ));
    let mut seen = Vec::new();
    for a in agent.allocs("ids") {
        let id = a["ID"].as_str().unwrap().to_string();
        let name = a["Name"].as_str().unwrap().to_string();
        let env = environ(running_pid(&agent, &id, "t"));
        let get = |k: &str| env.get(k).cloned().unwrap_or_default();
        let index = get("NOMAD_ALLOC_INDEX");
        assert_eq!(name, format!("ids.g[{index}]"));
        assert_eq!(get("NOMAD_ALLOC_NAME"), name);
        assert_eq!(get("NOMAD_SHORT_ALLOC_ID"), id[..8]);
        assert_eq!(
            (get("NOMAD_NAMESPACE"), get("NOMAD_REGION"), get("NOMAD_DC")),
            ("ops".to_string(), "eu".to_string(), "dc7".to_string())
        );
        assert_eq!(interpolated(&agent, &id), format!("{name}|{index}"));
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1"]);
}
