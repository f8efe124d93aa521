//! Group `network` ports through the real agent (jobspec.md, "`network` blocks"): a raw_exec task
//! listens on its static and dynamic ports and answers there, dynamic ports come from the
//! configured range, a port another allocation holds refuses the registration with Nomad's
//! placement text, and an agent killed with SIGKILL comes back with the same ports in its API and
//! in the environment of the re-attached task. Static ports and the ranges are ports the kernel
//! said were free.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// An agent whose dynamic ports are `min..=max`.
fn agent(tag: &str, min: u16, max: u16) -> (TempDir, TestAgent) {
    let dir = TempDir::new(tag);
    let agent = TestAgent::start_in(
        dir.path(),
        &format!("client {{\n  min_dynamic_port = {min}\n  max_dynamic_port = {max}\n}}\n"),
    );
    (dir, agent)
}

/// A service job of one raw_exec task that writes its `NOMAD_*` variables to `local/env.txt`,
/// then (`;`: the file is whole before either server starts) serves its task directory with busybox httpd on port `web` (through `${...}` interpolation)
/// and on port `dyn` (through the shell's variables).
fn web_job(name: &str, static_port: u16) -> String {
    format!(
        r#"job "{name}" {{
  group "g" {{
    network {{
      port "web" {{
        static = {static_port}
      }}
      port "dyn" {{}}
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "sh"
        args = ["-c", "env | grep ^NOMAD_ | sort > local/env.txt; busybox httpd -f -p 127.0.0.1:$NOMAD_PORT_dyn -h local & exec busybox httpd -f -p ${{NOMAD_ADDR_web}} -h local"]
      }}
    }}
  }}
}}
"#
    )
}

/// A job whose one task sleeps, asking for `ports` (HCL `port` blocks).
fn sleeper(name: &str, ports: &str) -> String {
    format!(
        "job \"{name}\" {{\n  group \"g\" {{\n    network {{\n{ports}\n    }}\n    task \"t\" {{\n      \
         driver = \"raw_exec\"\n      config {{\n        command = \"sleep\"\n        args = [\"300\"]\n      \
         }}\n    }}\n  }}\n}}\n"
    )
}

/// Registers `hcl`; the status and body of the registration.
fn register(agent: &TestAgent, hcl: &str) -> (u16, String) {
    let (status, job) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&serde_json::json!({ "JobHCL": hcl }).to_string()),
    );
    assert_eq!(status, 200, "parse: {job}");
    let job: Value = serde_json::from_str(&job).unwrap();
    agent.put_json("/v1/jobs", &serde_json::json!({ "Job": job }))
}

/// The allocation's ports, label → (host port, to), from `GET /v1/allocation/:id`.
fn ports_of(agent: &TestAgent, alloc: &str) -> BTreeMap<String, (u64, u64)> {
    let a = agent.get(&format!("/v1/allocation/{alloc}"));
    a["AllocatedResources"]["Shared"]["Ports"]
        .as_array()
        .unwrap_or_else(|| panic!("no ports in {a}"))
        .iter()
        .map(|p| {
            assert_eq!(p["HostIP"], "127.0.0.1", "{p}");
            (
                p["Label"].as_str().unwrap().to_string(),
                (p["Value"].as_u64().unwrap(), p["To"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// The body of `GET <path>` on `127.0.0.1:<port>`, once an answer there has `marker` in it (a
/// server of another test on a port the kernel gave out twice is not taken for the task).
fn http_get(port: u16, path: &str, marker: &str) -> String {
    wait_for(
        WAIT,
        &format!("an answer with {marker} on port {port}"),
        || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
            let mut answer = String::new();
            s.read_to_string(&mut answer).ok()?;
            let (head, body) = answer.split_once("\r\n\r\n")?;
            (head.contains(" 200 ") && body.contains(marker)).then(|| body.to_string())
        },
    )
}

fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn running_pid(agent: &TestAgent, alloc: &str) -> i32 {
    wait_for(WAIT, "the task running", || {
        let s = agent.task_state(alloc, "t");
        (s["State"] == "running").then(|| s["PID"].as_i64())?
    }) as i32
}

#[test]
fn a_task_answers_on_its_static_and_dynamic_ports() {
    let (web, dynamic) = (free_port(), free_port());
    // A range of one port: the dynamic port can only be that one.
    let (_dir, agent) = agent("ports-web", dynamic, dynamic);
    register_ok(&agent, &web_job("web", web));
    let alloc = agent.alloc_id("web");
    let ports = ports_of(&agent, &alloc);
    assert_eq!(
        ports,
        BTreeMap::from([
            ("web".to_string(), (u64::from(web), 0)),
            ("dyn".to_string(), (u64::from(dynamic), 0)),
        ])
    );
    let env = env_lines(&http_get(web, "/env.txt", &alloc));
    let want = [
        ("NOMAD_PORT_web", web.to_string()),
        ("NOMAD_HOST_PORT_web", web.to_string()),
        ("NOMAD_ALLOC_PORT_web", web.to_string()),
        ("NOMAD_IP_web", "127.0.0.1".to_string()),
        ("NOMAD_ADDR_web", format!("127.0.0.1:{web}")),
        ("NOMAD_HOST_ADDR_web", format!("127.0.0.1:{web}")),
        ("NOMAD_PORT_dyn", dynamic.to_string()),
        ("NOMAD_HOST_PORT_dyn", dynamic.to_string()),
        ("NOMAD_ADDR_dyn", format!("127.0.0.1:{dynamic}")),
    ];
    for (k, v) in want {
        assert_eq!(env.get(k), Some(&v), "{k} in {env:?}");
    }
    // The dynamic port answers too, with the same file.
    assert_eq!(env_lines(&http_get(dynamic, "/env.txt", &alloc)), env);

    // Nomad's table in `alloc status`.
    let out = agent.cli(&["alloc", "status", &alloc]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Allocation Addresses (mode = \"host\"):\nLabel  Dynamic  Address\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("*web   yes      127.0.0.1:{web}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("*dyn   yes      127.0.0.1:{dynamic}\n")),
        "{text}"
    );
    // The job reads back in Nomad's shape.
    let job = agent.get("/v1/job/web");
    let net = &job["TaskGroups"][0]["Networks"][0];
    assert_eq!(net["Mode"], "host", "{job}");
    assert_eq!(net["ReservedPorts"][0]["Value"], web, "{job}");
    assert_eq!(net["DynamicPorts"][0]["Label"], "dyn", "{job}");
}

/// Registers `hcl`, which this node cannot place for want of ports: the job is registered with
/// no allocation, and the registration's failure for group `g` is the one `dimension` exhausted.
fn register_unplaced(agent: &TestAgent, hcl: &str, job: &str, dimension: &str) {
    let (status, body) = register(agent, hcl);
    assert_eq!(status, 200, "register: {body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let metric = &answer["FailedTGAllocs"]["g"];
    assert_eq!(metric["DimensionExhausted"][dimension], 1, "{body}");
    assert_eq!(agent.get(&format!("/v1/job/{job}"))["ID"], job);
    assert!(agent.allocs(job).is_empty(), "{:?}", agent.allocs(job));
}

fn register_ok(agent: &TestAgent, hcl: &str) {
    let (status, body) = register(agent, hcl);
    assert_eq!(status, 200, "register: {body}");
}

#[test]
fn dynamic_ports_come_from_the_configured_range_until_it_is_used_up() {
    let low = free_port();
    let (_dir, agent) = agent("ports-range", low, low + 2);
    let three = "      port \"a\" {}\n      port \"b\" {}\n      port \"c\" { to = -1 }";
    register_ok(&agent, &sleeper("three", three));
    let ports = ports_of(&agent, &agent.alloc_id("three"));
    let mut values: Vec<u64> = ports.values().map(|(v, _)| *v).collect();
    values.sort();
    assert_eq!(values, [low, low + 1, low + 2].map(u64::from), "{ports:?}");
    // `to = -1` maps the port to itself, as in Nomad.
    assert_eq!(ports["c"].1, ports["c"].0);

    // The range is used up: a placement failure in Nomad's words, the job registered without
    // an allocation.
    register_unplaced(
        &agent,
        &sleeper("more", "      port \"d\" {}"),
        "more",
        "network: dynamic port selection failed",
    );

    // A stopped allocation gives its ports back once its task is dead, and the same job sent
    // again (a new evaluation, as in Nomad) is placed.
    let three = agent.alloc_id("three");
    assert_eq!(agent.request("DELETE", "/v1/job/three", None).0, 200);
    wait_for(Duration::from_secs(30), "the stopped task dead", || {
        (agent.task_state(&three, "t")["State"] == "dead").then_some(())
    });
    register_ok(&agent, &sleeper("more", "      port \"d\" {}"));
    let (v, _) = ports_of(&agent, &agent.alloc_id("more"))["d"];
    assert!((u64::from(low)..=u64::from(low) + 2).contains(&v), "{v}");
}

#[test]
fn a_static_port_held_by_another_allocation_is_a_placement_failure() {
    let (_dir, agent) = agent("ports-static", 20000, 32000);
    let port = free_port();
    let ask = format!("      port \"web\" {{ static = {port} }}");
    register_ok(&agent, &sleeper("first", &ask));
    register_unplaced(
        &agent,
        &sleeper("second", &ask),
        "second",
        &format!("network: reserved port collision web={port}"),
    );
    // `job run` prints it as Nomad's does, and exits 2.
    let file = agent.data_dir.parent().unwrap().join("second.hcl");
    std::fs::write(&file, sleeper("second", &ask)).unwrap();
    let out = agent.cli(&["job", "run", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stdout.contains(&format!(
            "* Dimension \"network: reserved port collision web={port}\" exhausted on 1 nodes"
        )),
        "{stdout}"
    );
    // Re-registering the holder with a change replaces its allocation on the same port.
    register_ok(
        &agent,
        &sleeper("first", &format!("{ask}\n      port \"x\" {{}}")),
    );
    let allocs = agent.allocs("first");
    let live: Vec<&Value> = allocs
        .iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect();
    assert_eq!(live.len(), 1, "{allocs:?}");
    let id = live[0]["ID"].as_str().unwrap();
    assert_eq!(ports_of(&agent, id)["web"].0, u64::from(port));

    // The agent's own HTTP port is never given.
    let api: u16 = agent.addr.rsplit(':').next().unwrap().parse().unwrap();
    register_unplaced(
        &agent,
        &sleeper("api", &format!("      port \"http\" {{ static = {api} }}")),
        "api",
        &format!("network: reserved port collision http={api}"),
    );
}

#[test]
fn bridge_networks_are_refused_with_their_line() {
    let (_dir, agent) = agent("ports-bridge", 20000, 32000);
    let hcl = "job \"b\" {\n  group \"g\" {\n    network {\n      mode = \"bridge\"\n    }\n    \
               task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"true\" }\n    }\n  }\n}\n";
    let (status, body) = agent.request(
        "POST",
        "/v1/jobs/parse",
        Some(&serde_json::json!({ "JobHCL": hcl }).to_string()),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(
            "network block of group \"g\" at line 4: network mode \"bridge\" is not supported on \
             this node yet"
        ),
        "{body}"
    );
}

/// kill -9 of the agent, then a new one: the same ports in the API and in the environment of the
/// task it re-attaches to (same PID), which still answers; and they are still taken.
#[test]
fn ports_are_kept_across_an_agent_kill_and_restart() {
    let (web, dynamic) = (free_port(), free_port());
    let (_dir, mut agent) = agent("ports-restart", dynamic, dynamic);
    register_ok(&agent, &web_job("kept", web));
    let alloc = agent.alloc_id("kept");
    let before = ports_of(&agent, &alloc);
    let pid = running_pid(&agent, &alloc);
    let env_before = env_lines(&http_get(web, "/env.txt", &alloc));

    agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    agent.restart();
    assert_eq!(running_pid(&agent, &alloc), pid, "the task is re-attached");
    assert_eq!(ports_of(&agent, &alloc), before);
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ: BTreeMap<String, String> = environ
        .split(|b| *b == 0)
        .filter_map(|v| {
            let v = String::from_utf8_lossy(v);
            let (k, v) = v.split_once('=')?;
            k.starts_with("NOMAD_")
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect();
    assert_eq!(environ, env_before);
    assert_eq!(environ["NOMAD_PORT_dyn"], dynamic.to_string());
    assert_eq!(
        env_lines(&http_get(dynamic, "/env.txt", &alloc)),
        env_before
    );

    // The restored allocation still holds its ports.
    register_unplaced(
        &agent,
        &sleeper("other", &format!("      port \"web\" {{ static = {web} }}")),
        "other",
        &format!("network: reserved port collision web={web}"),
    );
}
