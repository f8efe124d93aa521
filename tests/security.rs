//! Security defaults through the real agent: where the API listens, the ACL token, what reaches the
//! logs, file modes of the state, and the confinement and environment of host-volume plugins.
//!
//! The library-level tests (tests/api_server.rs, tests/volumes.rs) check the pieces; these check
//! that the agent wires them the same way from its configuration.

use crate::common::*;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// A request with optional headers; answers (status, body).
fn call(
    agent: &TestAgent,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let http = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    );
    let url = agent.url(path);
    let resp = match method {
        "GET" | "DELETE" => {
            let mut rq = if method == "GET" {
                http.get(&url)
            } else {
                http.delete(&url)
            };
            for (k, v) in headers {
                rq = rq.header(*k, *v);
            }
            rq.call()
        }
        _ => {
            let mut rq = if method == "PUT" {
                http.put(&url)
            } else {
                http.post(&url)
            };
            for (k, v) in headers {
                rq = rq.header(*k, *v);
            }
            rq.send(body.unwrap_or(""))
        }
    };
    let mut resp = resp.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

/// A fresh token (long, random, unlike anything else in a log) in a 0600 file.
fn token_file(dir: &Path) -> (String, std::path::PathBuf) {
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (token, path)
}

fn job_body(id: &str) -> String {
    json!({"Job": {"ID": id, "Name": id, "Type": "batch", "TaskGroups": [{
        "Name": "g", "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}})
    .to_string()
}

/// An address of this host that is not loopback, if it has one (no packet is sent: connecting a UDP
/// socket only picks the route).
fn non_loopback_ip() -> Option<IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

fn reachable(ip: IpAddr, port: u16) -> bool {
    TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(5)).is_ok()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn the_api_listens_on_loopback_unless_bind_addr_says_otherwise() {
    let dir = TempDir::new("sec-bind");
    let agent = TestAgent::start_in(dir.path(), "");
    // The address comes from the agent's own log line: "... API on http://<addr>".
    assert!(agent.addr.starts_with("127.0.0.1:"), "{}", agent.addr);
    assert_eq!(
        agent.get("/v1/agent/self")["config"]["BindAddr"],
        "127.0.0.1"
    );
    let outside = non_loopback_ip();
    match outside {
        Some(ip) => assert!(
            !reachable(ip, port_of(&agent.addr)),
            "the default agent answers on {ip}"
        ),
        None => println!("no non-loopback address on this host: reachability not checked"),
    }
    drop(agent);

    let dir = TempDir::new("sec-bind0");
    let agent = TestAgent::start_in(dir.path(), "bind_addr = \"0.0.0.0\"");
    assert!(agent.addr.starts_with("0.0.0.0:"), "{}", agent.addr);
    assert_eq!(agent.get("/v1/agent/self")["config"]["BindAddr"], "0.0.0.0");
    if let Some(ip) = outside {
        assert!(
            reachable(ip, port_of(&agent.addr)),
            "bind_addr = 0.0.0.0 does not answer on {ip}"
        );
    }
}

#[test]
fn with_a_token_every_write_needs_it_and_reads_too_when_enforced() {
    let dir = TempDir::new("sec-acl");
    let (token, file) = token_file(dir.path());
    let agent = TestAgent::start_in(
        dir.path(),
        &format!("acl {{ token_file = \"{}\" }}", file.display()),
    );
    let wrong = format!("{token}x");
    let parse = json!({"JobHCL": "job \"p\" {\n group \"g\" {\n  task \"t\" {\n   driver = \"raw_exec\"\n   config { command = \"/bin/true\" }\n  }\n }\n}\n"})
    .to_string();
    let volume = json!({"Volume": {"Name": "v", "PluginID": "mkdir"}}).to_string();
    let job_a = job_body("a");
    let writes: [(&str, &str, Option<&str>); 4] = [
        ("PUT", "/v1/jobs", Some(&job_a)),
        ("POST", "/v1/jobs/parse", Some(&parse)),
        ("PUT", "/v1/volume/host/create", Some(&volume)),
        ("DELETE", "/v1/job/a", None),
    ];
    for (method, path, body) in writes {
        for headers in [vec![], vec![("X-Nomad-Token", wrong.as_str())]] {
            let (s, b) = call(&agent, method, path, body, &headers);
            assert_eq!(
                (s, b.as_str()),
                (403, "Permission denied"),
                "{method} {path}"
            );
        }
    }
    // Nothing was done by the refused writes.
    assert_eq!(agent.get("/v1/jobs"), json!([]));
    assert_eq!(agent.get("/v1/volumes?type=host"), json!([]));
    for (method, path, body) in writes {
        let (s, b) = call(
            &agent,
            method,
            path,
            body,
            &[("X-Nomad-Token", token.as_str())],
        );
        assert_eq!(s, 200, "{method} {path}: {b}");
    }
    let bearer = format!("Bearer {token}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        Some(&job_body("b")),
        &[("Authorization", bearer.as_str())],
    );
    assert_eq!(s, 200, "{b}");
    // Reads are open unless enforce_reads is set.
    assert_eq!(call(&agent, "GET", "/v1/job/b", None, &[]).0, 200);
    drop(agent);

    let dir = TempDir::new("sec-acl-r");
    let (token, file) = token_file(dir.path());
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "acl {{\n token_file = \"{}\"\n enforce_reads = true\n}}",
            file.display()
        ),
    );
    for path in [
        "/v1/jobs",
        "/v1/allocations",
        "/v1/nodes",
        "/v1/agent/self",
        "/v1/volumes?type=host",
    ] {
        for headers in [vec![], vec![("X-Nomad-Token", "nope")]] {
            let (s, b) = call(&agent, "GET", path, None, &headers);
            assert_eq!((s, b.as_str()), (403, "Permission denied"), "GET {path}");
        }
        let (s, b) = call(
            &agent,
            "GET",
            path,
            None,
            &[("X-Nomad-Token", token.as_str())],
        );
        assert_eq!(s, 200, "GET {path}: {b}");
    }
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        Some(&job_body("c")),
        &[("X-Nomad-Token", "nope")],
    );
    assert_eq!((s, b.as_str()), (403, "Permission denied"));
}

#[test]
fn tokens_never_reach_the_log_nor_agent_self() {
    let dir = TempDir::new("sec-log");
    let (token, file) = token_file(dir.path());
    // The harness runs the agent with debug logging (log_level and RUST_LOG).
    let agent = TestAgent::start_in(
        dir.path(),
        &format!("acl {{ token_file = \"{}\" }}", file.display()),
    );
    let wrong = format!("wrong-{}", uuid::Uuid::new_v4().simple());
    let bearer_wrong = format!("Bearer {wrong}");
    let bearer = format!("Bearer {token}");
    for headers in [
        vec![("X-Nomad-Token", token.as_str())],
        vec![("X-Nomad-Token", wrong.as_str())],
        vec![("Authorization", bearer.as_str())],
        vec![("Authorization", bearer_wrong.as_str())],
    ] {
        call(&agent, "PUT", "/v1/jobs", Some(&job_body("l")), &headers);
        call(&agent, "GET", "/v1/nodes", None, &headers);
        call(
            &agent,
            "POST",
            "/v1/jobs/parse",
            Some("{not json"),
            &headers,
        );
        call(&agent, "GET", "/v1/no/such/path", None, &headers);
    }
    let (s, self_) = call(&agent, "GET", "/v1/agent/self", None, &[]);
    assert_eq!(s, 200);
    assert!(!self_.contains(&token), "{self_}");
    let self_: Value = serde_json::from_str(&self_).unwrap();
    assert_eq!(self_["config"]["ACLEnabled"], true);
    // A reload logs the configuration again.
    unsafe { libc::kill(agent.pid(), libc::SIGHUP) };
    wait_for(Duration::from_secs(30), "the reload", || {
        agent.log_text().contains("reload: ").then_some(())
    });
    let mut agent = agent;
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    let log = agent.log_text();
    assert!(
        log.lines().count() > 10,
        "the debug log has the requests: {log}"
    );
    assert!(
        log.contains("PUT /v1/jobs"),
        "requests are logged at debug: {log}"
    );
    assert!(!log.contains(&token), "the token is in the log:\n{log}");
    assert!(!log.contains(&wrong), "a wrong token is in the log:\n{log}");
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_state_file_and_data_dir_stay_private_whatever_the_umask() {
    let dir = TempDir::new("sec-mode");
    // A wide-open umask for the agent, so that the modes below come from the agent and not from a
    // friendly umask. Set in the agent's process only: this process's umask is every test's.
    let mut agent = TestAgent::start_in_with_umask(dir.path(), "", 0);
    let data_dir = agent.data_dir.clone();
    let state = data_dir.join("state.json");
    let check = |when: &str| {
        assert_eq!(mode_of(&data_dir), 0o700, "data dir {when}");
        assert_eq!(mode_of(&state), 0o600, "state file {when}");
        for e in std::fs::read_dir(&data_dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("state") {
                assert_eq!(mode_of(&e.path()), 0o600, "{name} {when}");
            }
        }
    };
    wait_for(Duration::from_secs(30), "the state file", || {
        state.exists().then_some(())
    });
    check("after start");
    let (s, b) = agent.put_json("/v1/jobs", &serde_json::from_str(&job_body("w")).unwrap());
    assert_eq!(s, 200, "{b}");
    let alloc = wait_for(Duration::from_secs(30), "the allocation", || {
        agent
            .allocs("w")
            .first()
            .map(|a| a["ID"].as_str().unwrap().to_string())
    });
    wait_for(Duration::from_secs(30), "the task to finish", || {
        (agent.task_state(&alloc, "t")["State"] == "dead").then_some(())
    });
    let (s, b) = agent.put_json(
        "/v1/volume/host/create",
        &json!({"Volume": {"Name": "v", "PluginID": "mkdir"}}),
    );
    assert_eq!(s, 200, "{b}");
    check("after writes");
    assert_eq!(
        mode_of(&data_dir.join("state.journal")),
        0o600,
        "state journal"
    );
    assert_eq!(
        agent.stop_with(libc::SIGTERM, Duration::from_secs(30)),
        Some(0)
    );
    check("after shutdown");
    // A data directory someone opened up is closed again at start.
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    agent.restart();
    let (s, b) = agent.request("DELETE", "/v1/job/w?purge=true", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(mode_of(&data_dir), 0o700, "data dir after a restart");
    assert_eq!(
        mode_of(&state),
        0o600,
        "state file after a restart and a write"
    );
}

#[test]
fn plugin_lookup_through_the_agent_is_confined_to_the_plugin_dir() {
    let dir = TempDir::new("sec-look");
    let plugins = dir.path().join("plugins");
    let outside = dir.path().join("outside");
    plugin(
        &outside,
        "evil",
        &format!(
            "/usr/bin/touch {}/ran; echo '{{\"path\": \"/tmp\"}}'",
            outside.display()
        ),
    );
    std::fs::create_dir_all(&plugins).unwrap();
    std::os::unix::fs::symlink(outside.join("evil"), plugins.join("escape")).unwrap();
    let agent = start_with_plugins(&dir);
    for id in ["../x", "/bin/sh", "escape", "../outside/evil"] {
        let (s, body) = agent.put_json(
            "/v1/volume/host/create",
            &json!({"Volume": {"Name": "v", "PluginID": id}}),
        );
        assert_eq!(
            (s, body.as_str()),
            (400, format!("no such plugin: {id:?}").as_str()),
            "plugin_id {id}"
        );
    }
    assert!(
        !outside.join("ran").exists(),
        "a plugin outside the directory ran"
    );
    assert_eq!(agent.get("/v1/volumes?type=host"), json!([]));
    // Nor is an escaping file fingerprinted into the node's attributes.
    let node = agent.get("/v1/nodes")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let attrs = agent.get(&format!("/v1/node/{node}"))["Attributes"].clone();
    assert!(
        attrs.get("plugins.host_volume.escape.version").is_none(),
        "{attrs}"
    );
}

#[test]
fn plugins_get_only_the_dhv_environment_through_the_agent() {
    let dir = TempDir::new("sec-env");
    let (_token, file) = token_file(dir.path());
    // The plugin answers with the names of its environment as the error of a failed create: the
    // agent passes that on in its answer.
    plugin(
        &dir.path().join("plugins"),
        "envdump",
        r#"case "$1" in
  fingerprint) echo '{"version": "1.0.0"}' ;;
  *) names=$(/usr/bin/tr '\0' '\n' < /proc/$$/environ | /usr/bin/cut -d= -f1 | /usr/bin/tr '\n' ' ')
     echo "{\"error\": \"$names\"}"; exit 1 ;;
esac"#,
    );
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "acl {{ token_file = \"{}\" }}\nclient {{ host_volume_plugin_dir = \"{}\" }}",
            file.display(),
            dir.path().join("plugins").display()
        ),
    );
    let token = std::fs::read_to_string(&file).unwrap().trim().to_string();
    let (s, body) = call(
        &agent,
        "PUT",
        "/v1/volume/host/create",
        Some(
            &json!({"Volume": {"Name": "v", "PluginID": "envdump", "Parameters": {"k": "v"}}})
                .to_string(),
        ),
        &[("X-Nomad-Token", token.as_str())],
    );
    assert_eq!(s, 500, "{body}");
    let names = body
        .rsplit_once("exit status 1: ")
        .unwrap_or_else(|| panic!("{body}"))
        .1;
    let mut names: Vec<&str> = names.split_whitespace().collect();
    names.sort();
    let mut want = [
        "DHV_CAPACITY_MAX_BYTES",
        "DHV_CAPACITY_MIN_BYTES",
        "DHV_NAMESPACE",
        "DHV_NODE_ID",
        "DHV_NODE_POOL",
        "DHV_OPERATION",
        "DHV_PARAMETERS",
        "DHV_PLUGIN_DIR",
        "DHV_VOLUME_ID",
        "DHV_VOLUME_NAME",
        "DHV_VOLUMES_DIR",
    ];
    want.sort();
    assert_eq!(names, want, "{body}");
    assert!(!body.contains(&token));
    // The agent's own environment (PATH, HOME, RUST_LOG, ...) is there to leak, and did not.
    assert!(std::env::var_os("PATH").is_some());
}
