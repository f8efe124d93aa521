//! The API through the real agent: who may call it (`Host`, `Origin`, `Content-Type`), slow and
//! idle clients, running out of file descriptors, and followers of a log that went away.
//!
//! Raw sockets where the test needs a header or a timing that an HTTP client would not send.

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
/// How long a client waits for an answer in these tests: well under the agent's 10 s head and body
/// deadlines, so an answer that waited for a slow client misses it.
const ANSWER: Duration = Duration::from_secs(5);

fn connect(agent: &TestAgent) -> TcpStream {
    let s = TcpStream::connect(&agent.addr).unwrap();
    s.set_read_timeout(Some(ANSWER)).unwrap();
    s
}

/// Reads one answer: the head, then `Content-Length` bytes. `None` when none came in time.
fn read_answer(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..end]).into_owned();
            let length = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if let Some(n) = length {
                if out.len() >= end + 4 + n {
                    let status = head.split(' ').nth(1)?.parse().ok()?;
                    let body = String::from_utf8_lossy(&out[end + 4..end + 4 + n]).into_owned();
                    return Some((status, body));
                }
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `raw` on a new connection; the answer, or `None` when none came within [`ANSWER`].
fn exchange(agent: &TestAgent, raw: &str) -> Option<(u16, String)> {
    let mut s = connect(agent);
    s.write_all(raw.as_bytes()).unwrap();
    read_answer(&mut s)
}

/// A request with the agent's own address as `Host` and `headers` (each ending in CRLF).
fn send(agent: &TestAgent, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        agent.addr,
        body.len()
    );
    exchange(agent, &raw).unwrap_or_else(|| panic!("{method} {path}: no answer within {ANSWER:?}"))
}

fn job(id: &str) -> String {
    serde_json::json!({"Job": {"ID": id, "Name": id, "Type": "batch", "TaskGroups": [{
        "Name": "g", "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]}})
    .to_string()
}

/// Whether the agent has the job (its GET is not a 404).
fn has_job(agent: &TestAgent, id: &str) -> bool {
    agent.request("GET", &format!("/v1/job/{id}"), None).0 == 200
}

/// agent.md: a write whose Content-Type is not JSON, or from another site's page, is a 403 with or
/// without ACLs, and changes nothing. Issue 11, item 2: `POST /v1/jobs` with `text/plain` and
/// `Origin: http://evil.example` answered 200 and the job ran as root.
#[test]
fn a_write_from_another_site_is_refused_and_changes_nothing() {
    let dir = TempDir::new("api-csrf");
    let agent = TestAgent::start_in(dir.path(), "");
    let refused: [(&str, &str); 6] = [
        (
            "the web page of the issue",
            "Content-Type: text/plain\r\nOrigin: http://evil.example\r\n",
        ),
        ("a text body", "Content-Type: text/plain;charset=UTF-8\r\n"),
        (
            "a form, as curl -d sends it",
            "Content-Type: application/x-www-form-urlencoded\r\n",
        ),
        (
            "a multipart form",
            "Content-Type: multipart/form-data; boundary=x\r\n",
        ),
        (
            "JSON from another origin",
            "Content-Type: application/json\r\nOrigin: http://evil.example\r\n",
        ),
        (
            "JSON from a cross-site fetch",
            "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n",
        ),
    ];
    for (i, (what, headers)) in refused.iter().enumerate() {
        let id = format!("csrf{i}");
        let (status, body) = send(&agent, "POST", "/v1/jobs", headers, &job(&id));
        assert_eq!(status, 403, "{what}: {body}");
        assert!(body.starts_with("Permission denied: "), "{what}: {body}");
        assert!(!has_job(&agent, &id), "{what}: the job was registered");
    }
    let (_, body) = send(&agent, "POST", "/v1/jobs", refused[0].1, &job("x"));
    assert_eq!(
        body,
        "Permission denied: writes from a web page of another site are refused (Origin \"http://evil.example\")"
    );
    let (_, body) = send(&agent, "POST", "/v1/jobs", refused[2].1, &job("x"));
    assert_eq!(
        body,
        "Permission denied: a write must be sent as Content-Type: application/json, not \"application/x-www-form-urlencoded\""
    );
    // A write without a body from another site (stopping an allocation) is refused too.
    let (status, _) = send(
        &agent,
        "DELETE",
        "/v1/job/none",
        "Origin: http://evil.example\r\n",
        "",
    );
    assert_eq!(status, 403);

    // What the CLI, curl --json and Nomad's API client (no Content-Type at all) send is accepted.
    let own = format!("Origin: http://{}\r\n", agent.addr);
    let accepted: [(&str, &str); 4] = [
        ("JSON", "Content-Type: application/json\r\n"),
        (
            "JSON with a charset",
            "Content-Type: application/json; charset=utf-8\r\n",
        ),
        ("no Content-Type", ""),
        ("the agent's own origin", &own),
    ];
    for (i, (what, headers)) in accepted.iter().enumerate() {
        let id = format!("ok{i}");
        let (status, body) = send(&agent, "PUT", "/v1/jobs", headers, &job(&id));
        assert_eq!(status, 200, "{what}: {body}");
        assert!(has_job(&agent, &id), "{what}");
    }
    assert!(
        !agent.log_text().contains("no ACL token is set"),
        "a loopback agent warns about nothing"
    );
}

/// agent.md: `Host` must be the agent's own address or a name configured for it, so that a page
/// whose name an attacker points at 127.0.0.1 (DNS rebinding) cannot read or write.
#[test]
fn a_host_that_is_not_the_agent_is_refused() {
    let dir = TempDir::new("api-host");
    let agent = TestAgent::start_in(dir.path(), "http_allowed_hosts = [\"nodeward.internal\"]");
    let port = agent.addr.rsplit_once(':').unwrap().1.to_string();
    let get = |host: &str| {
        let raw = format!("GET /v1/jobs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        exchange(&agent, &raw).unwrap_or_else(|| panic!("Host {host}: no answer"))
    };
    let (status, body) = get(&format!("evil.example:{port}"));
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body,
        format!("Permission denied: Host \"evil.example:{port}\" is not an address or a name of this agent (add it to http_allowed_hosts)")
    );
    assert_eq!(get("127.0.0.1.evil.example").0, 403);
    for ok in [
        agent.addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "test-node".to_string(),
        format!("nodeward.internal:{port}"),
        "NODEWARD.INTERNAL".to_string(),
    ] {
        let (status, body) = get(&ok);
        assert_eq!(status, 200, "Host {ok}: {body}");
    }
    // A write with a foreign Host changes nothing either.
    let raw = format!(
        "PUT /v1/jobs HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        job("rebound").len(),
        job("rebound")
    );
    assert_eq!(exchange(&agent, &raw).unwrap().0, 403);
    assert!(!has_job(&agent, "rebound"));
}

/// agent.md: `bind_addr` other than loopback without an ACL token is allowed, and warned about at
/// start.
#[test]
fn an_open_api_without_a_token_is_warned_about() {
    let warning = "can be reached from other machines and no ACL token is set";
    let dir = TempDir::new("api-open");
    let agent = TestAgent::start_in(dir.path(), "bind_addr = \"0.0.0.0\"");
    wait_for(WAIT, "the warning", || {
        agent.log_text().contains(warning).then_some(())
    });
    assert_eq!(agent.request("GET", "/v1/agent/health", None).0, 200);
    drop(agent);

    let dir = TempDir::new("api-opentok");
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token\n").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!(
            "bind_addr = \"0.0.0.0\"\nacl {{ token_file = \"{}\" }}",
            token.display()
        ),
    );
    assert_eq!(agent.request("GET", "/v1/agent/health", None).0, 200);
    assert!(!agent.log_text().contains(warning), "{}", agent.log_text());
}

/// Sends `head` (a request head that declares a body), then one byte of body every 200 ms until
/// `stop`, so that no read ever times out on its own.
fn trickle(agent: &TestAgent, head: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let mut s = connect(agent);
    std::thread::spawn(move || {
        let _ = s.write_all(head.as_bytes());
        while !stop.load(Ordering::SeqCst) {
            if s.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
}

/// agent.md: a handful of idle or trickling connections never delays `/v1/agent/health`. Issue
/// 11, item 6: four of them held the API's four workers for up to 20 s each.
#[test]
fn slow_and_idle_clients_never_delay_health() {
    let dir = TempDir::new("api-slow");
    let agent = TestAgent::start_in(dir.path(), "");
    let stop = Arc::new(AtomicBool::new(false));
    let mut tricklers = Vec::new();
    for _ in 0..6 {
        // A body that trickles in.
        let head = format!(
            "PUT /v1/jobs HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
            agent.addr
        );
        tricklers.push(trickle(&agent, head, stop.clone()));
        // A head that trickles in: the "body" is the head's own bytes, never a blank line.
        tricklers.push(trickle(
            &agent,
            format!("GET /v1/jobs HTTP/1.1\r\nHost: {}\r\nX-Slow: ", agent.addr),
            stop.clone(),
        ));
    }
    // Idle connections, and one that declared a body it never sends.
    let mut idle: Vec<TcpStream> = (0..6).map(|_| connect(&agent)).collect();
    let mut silent = connect(&agent);
    silent
        .write_all(
            format!(
                "PUT /v1/jobs HTTP/1.1\r\nHost: {}\r\nContent-Length: 5000\r\n\r\n",
                agent.addr
            )
            .as_bytes(),
        )
        .unwrap();
    idle.push(silent);
    // Let every slow request reach the point where it waits for its client.
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..10 {
        let raw = format!(
            "GET /v1/agent/health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            agent.addr
        );
        let answer = exchange(&agent, &raw);
        assert_eq!(
            answer.as_ref().map(|a| a.0),
            Some(200),
            "health request {i} not answered within {ANSWER:?} beside slow clients: {answer:?}"
        );
    }
    // Another caller's write goes through too.
    let (status, body) = send(
        &agent,
        "PUT",
        "/v1/jobs",
        "Content-Type: application/json\r\n",
        &job("beside"),
    );
    assert_eq!(status, 200, "{body}");
    stop.store(true, Ordering::SeqCst);
    for t in tricklers {
        t.join().unwrap();
    }
    drop(idle);
}

/// Issue 11, item 6: `Connection: upgrade` made the rest of the socket the request's body, read
/// by a worker until the body deadline. The API has no upgrade: it is refused at once.
#[test]
fn an_upgrade_request_is_refused_at_once() {
    let dir = TempDir::new("api-upg");
    let agent = TestAgent::start_in(dir.path(), "");
    let mut s = connect(&agent);
    s.write_all(
        format!(
            "GET /v1/agent/health HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            agent.addr
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        read_answer(&mut s),
        Some((400, "protocol upgrades are not supported".to_string()))
    );
    // And the connection is closed: nothing of it is read as a request or a body.
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).ok(), Some(0), "{rest:?}");
    assert_eq!(agent.request("GET", "/v1/agent/health", None).0, 200);
}

/// Issue 11, item 6: a body was read before the route and the token were checked, so a request
/// about to be refused still waited for its body. Both are refused before any of it is read.
#[test]
fn a_refused_request_is_answered_without_waiting_for_its_body() {
    let dir = TempDir::new("api-early");
    let token = dir.path().join("token");
    std::fs::write(&token, "a-token\n").unwrap();
    let agent = TestAgent::start_in(
        dir.path(),
        &format!("acl {{ token_file = \"{}\" }}", token.display()),
    );
    let head = |method: &str, path: &str, extra: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n{extra}\r\n",
            agent.addr
        )
    };
    // Heads only: the bodies they declare never come.
    assert_eq!(
        exchange(&agent, &head("PUT", "/v1/nothing", "")),
        Some((404, "no such API path: /v1/nothing".to_string()))
    );
    assert_eq!(
        exchange(&agent, &head("PUT", "/v1/jobs", "X-Nomad-Token: wrong\r\n")),
        Some((403, "Permission denied".to_string()))
    );
    // A refused upload that does arrive is skipped, and its connection goes on.
    let body = job("skipped");
    let mut s = connect(&agent);
    s.write_all(
        format!(
            "PUT /v1/jobs HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{body}",
            agent.addr,
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        read_answer(&mut s),
        Some((403, "Permission denied".to_string()))
    );
    s.write_all(
        format!(
            "PUT /v1/jobs HTTP/1.1\r\nHost: {}\r\nX-Nomad-Token: a-token\r\nContent-Length: {}\r\n\r\n{body}",
            agent.addr,
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(read_answer(&mut s).map(|a| a.0), Some(200));
}

/// Issue 11, item 4: one failed `accept()` (EMFILE) ended the API's accept loop for good while the
/// agent went on. Here the agent's limit on open files (soft and hard, so that raising the soft
/// one cannot help) is low enough for idle connections to exhaust it; once they close, the API
/// answers again.
#[test]
fn the_api_answers_again_after_running_out_of_file_descriptors() {
    let dir = TempDir::new("api-emfile");
    let agent = TestAgent::start_in_with_nofile(dir.path(), "", 64, 64);
    assert_eq!(agent.request("GET", "/v1/agent/health", None).0, 200);
    // More connections than the agent has descriptors; the kernel queues those it cannot take.
    let mut conns = Vec::new();
    for _ in 0..100 {
        let addr: std::net::SocketAddr = agent.addr.parse().unwrap();
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            conns.push(s);
        }
    }
    let fds = format!("/proc/{}/fd", agent.pid());
    wait_for(WAIT, "the agent to use all its descriptors", || {
        let open = std::fs::read_dir(&fds).map(|d| d.count()).unwrap_or(0);
        (open >= 60).then_some(())
    });
    // Hold them past the first failed accept and well past its first retries (5 ms, doubling),
    // and well within the 10 s after which the agent closes idle connections itself: the streak
    // then has several attempts however late a loaded machine runs the accept thread.
    wait_for(WAIT, "a failed accept in the log", || {
        agent
            .log_text()
            .contains("API cannot accept connections")
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    drop(conns);
    let http = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(15)))
            .build(),
    );
    let health = http.get(agent.url("/v1/agent/health")).call();
    assert_eq!(
        health
            .map(|r| r.status().as_u16())
            .map_err(|e| e.to_string()),
        Ok(200),
        "the API no longer answers after EMFILE; its log:\n{}",
        agent.log_text()
    );
    // One warning per streak of failed accepts, however many attempts it took, and one line
    // when it ends.
    let attempts: Vec<u64> = wait_for(WAIT, "every streak to end in the log", || {
        let log = agent.log_text();
        let streaks = log.matches("API cannot accept connections").count();
        let ends: Vec<u64> = log
            .lines()
            .filter_map(|l| {
                let rest = l.split("API accepts connections again, after ").nth(1)?;
                rest.split(' ').next()?.parse().ok()
            })
            .collect();
        (streaks > 0 && ends.len() == streaks).then_some(ends)
    });
    assert!(
        attempts.iter().any(|&n| n > 1),
        "each streak took one attempt: {attempts:?}"
    );
}

/// Issue 11, item 4: the agent raises its soft limit on open files to the hard limit at start.
#[test]
fn the_agent_raises_its_soft_open_files_limit() {
    let dir = TempDir::new("api-nofile");
    let agent = TestAgent::start_in_with_nofile(dir.path(), "", 256, 4096);
    assert_eq!(open_files_limit(agent.pid()), ["4096", "4096"]);
    // What it starts gets the limit it started with back, as Go's runtime gives its children;
    // the keeper raises its own again.
    let job = agent.run_hcl(&format!(
        r#"
job "limits" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args = ["{}"]
      }}
    }}
  }}
}}"#,
        unique_marker(700_000)
    ));
    let alloc = agent.alloc_id(&job);
    let pid = wait_for(WAIT, "the task running", || {
        let s = agent.task_state(&alloc, "t");
        (s["State"] == "running")
            .then(|| s["PID"].as_i64())
            .flatten()
    });
    assert_eq!(open_files_limit(pid as i32), ["256", "4096"]);
    let keeper = agent.keeper_pid().expect("the keeper runs");
    assert_eq!(open_files_limit(keeper), ["4096", "4096"]);
}

/// The soft and hard limits on open files of `pid`, as `/proc/<pid>/limits` writes them.
fn open_files_limit(pid: i32) -> Vec<String> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace()
        .skip(3)
        .take(2)
        .map(str::to_string)
        .collect()
}

/// Opens a follower of the allocation's log; `Some(stream)` once its first line arrived, `None`
/// with the status when it was refused.
fn follow(agent: &TestAgent, alloc: &str) -> Result<TcpStream, u16> {
    let mut s = connect(agent);
    s.write_all(
        format!(
            "GET /v1/client/fs/logs/{alloc}?task=t&follow=true HTTP/1.1\r\nHost: {}\r\n\r\n",
            agent.addr
        )
        .as_bytes(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if text.starts_with("HTTP/1.1 200") && text.contains("hello") {
            return Ok(s);
        }
        if let Some(status) = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|t| t.get(..3))
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|&c| c != 200)
        {
            return Err(status);
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => panic!("follower cut short: {text:?}"),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Issue 11, item 7: a follower whose client went away held its stream slot for as long as the
/// task stayed quiet, so 32 abandoned followers took every slot. The agent notices the closed
/// connection between two waits and frees the slot.
#[test]
fn abandoned_log_followers_free_their_slots() {
    let dir = TempDir::new("api-follow");
    let agent = TestAgent::start_in(dir.path(), "");
    let m = unique_marker(200_000);
    let job = agent.run_hcl(&format!(
        r#"
job "quiet" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "1s"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo hello; exec sleep {m}"]
      }}
    }}
  }}
}}"#
    ));
    let alloc = agent.alloc_id(&job);
    wait_for(WAIT, "the task's first line", || {
        let (status, text) =
            agent.request("GET", &format!("/v1/client/fs/logs/{alloc}?task=t"), None);
        (status == 200 && text.contains("hello")).then_some(())
    });
    let followers: Vec<TcpStream> = (0..32)
        .map(|i| follow(&agent, &alloc).unwrap_or_else(|s| panic!("follower {i}: {s}")))
        .collect();
    assert_eq!(follow(&agent, &alloc).err(), Some(503), "the 33rd follower");
    drop(followers);
    let again = wait_for(WAIT, "a follower served after the others left", || {
        follow(&agent, &alloc).ok()
    });
    drop(again);
}
