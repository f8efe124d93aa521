//! The API server over real HTTP on loopback: routing, limits, tokens, slow clients, deadlines,
//! streams, stop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nodeward::api::{ApiError, ApiServer, Request, Response, Router, ServerConfig};

const TOKEN: &str = "s3cret-token";

fn router() -> Router {
    let mut r = Router::new();
    r.get("/v1/jobs", |_req: &Request| {
        Response::json(serde_json::json!([{"ID": "example"}]))
    });
    r.get("/v1/job/:id/allocations", |req: &Request| {
        Response::json(serde_json::json!({
            "job": req.param("id"),
            "prefix": req.query("prefix"),
        }))
    });
    r.put("/v1/jobs", |req: &Request| {
        let v: serde_json::Value = req.json()?;
        Response::json(serde_json::json!({"got": v}))
    });
    r.put("/v1/volume/host/create", |_req: &Request| {
        Ok(Response::Text("create".into()))
    });
    r.get("/v1/volume/host/:id", |req: &Request| {
        Err(ApiError::NotFound(format!(
            "volume {:?} not found",
            req.param("id")
        )))
    });
    r.get(
        "/v1/panic",
        |_req: &Request| -> Result<Response, ApiError> { panic!("handler bug") },
    );
    r.get("/v1/stream", |req: &Request| {
        let shutdown = req.shutdown();
        Ok(Response::Stream(Box::new(Ticker {
            sent: false,
            shutdown,
        })))
    });
    r
}

/// Sends "hello\n" once, then waits for the server's shutdown.
struct Ticker {
    sent: bool,
    shutdown: crossbeam_channel::Receiver<nodeward::thread::Never>,
}

impl Read for Ticker {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.sent {
            self.sent = true;
            buf[..6].copy_from_slice(b"hello\n");
            return Ok(6);
        }
        let _ = self.shutdown.recv_timeout(Duration::from_secs(60));
        Ok(0)
    }
}

fn start(config: ServerConfig) -> ApiServer {
    let config = ServerConfig {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..config
    };
    ApiServer::start(config, router()).expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Sends `raw` and reads the whole answer (the server closes or the request said close).
fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut s = connect(addr);
    s.write_all(raw).unwrap();
    read_answer(&mut s)
}

/// Reads one answer: the head, then `Content-Length` bytes (or up to the end when there is none).
fn read_answer(s: &mut TcpStream) -> (u16, String) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = find(&out, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..end]).into_owned();
            let length = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if length.is_some_and(|n| out.len() >= end + 4 + n) {
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, String) {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n");
    exchange(addr, raw.as_bytes())
}

fn send(addr: SocketAddr, method: &str, path: &str, extra: &str, body: &str) -> (u16, String) {
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    exchange(addr, raw.as_bytes())
}

#[test]
fn routes_params_and_status_codes() {
    let server = start(ServerConfig::default());
    let addr = server.local_addr();

    let (status, body) = get(addr, "/v1/jobs", "");
    assert_eq!(status, 200);
    assert_eq!(body, r#"[{"ID":"example"}]"#);

    let (status, body) = get(addr, "/v1/job/my%20job/allocations?prefix=a%2Fb", "");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v, serde_json::json!({"job": "my job", "prefix": "a/b"}));

    let (status, body) = get(addr, "/v1/nothing", "");
    assert_eq!(
        (status, body.as_str()),
        (404, "no such API path: /v1/nothing")
    );

    let (status, body) = send(addr, "DELETE", "/v1/jobs", "", "");
    assert_eq!(
        (status, body.as_str()),
        (405, "method DELETE not allowed on /v1/jobs")
    );

    // A literal segment beats a parameter; the handler's own 404 comes through.
    assert_eq!(
        send(addr, "PUT", "/v1/volume/host/create", "", "{}"),
        (200, "create".into())
    );
    let (status, body) = get(addr, "/v1/volume/host/abc", "");
    assert_eq!((status, body.as_str()), (404, r#"volume "abc" not found"#));

    let (status, body) = send(addr, "PUT", "/v1/jobs", "", "{not json");
    assert_eq!(status, 400);
    assert!(body.starts_with("invalid JSON in request body"), "{body}");

    let (status, body) = send(addr, "PUT", "/v1/jobs", "", r#"{"Job":{"ID":"x"}}"#);
    assert_eq!(status, 200);
    assert_eq!(body, r#"{"got":{"Job":{"ID":"x"}}}"#);
    server.stop();
}

#[test]
fn bodies_over_the_limit_are_413_and_a_huge_declared_length_is_harmless() {
    let server = start(ServerConfig::default());
    let addr = server.local_addr();

    // Declared too large: refused before reading.
    let (status, body) = exchange(
        addr,
        b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2097152\r\n\r\n{}",
    );
    assert_eq!(
        (status, body.as_str()),
        (413, "request body is larger than 1048576 bytes")
    );

    // Chunked, no length: counted while reading.
    let chunk = "a".repeat(64 * 1024);
    let mut raw =
        b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..17 {
        raw.extend_from_slice(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes());
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let (status, _) = exchange(addr, &raw);
    assert_eq!(status, 413);

    // A terabyte declared, a few bytes sent, then the client hangs up. Unpatched tiny_http
    // allocated the declared size when dropping the request and aborted the whole process.
    let mut s = connect(addr);
    s.write_all(
        b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000000\r\n\r\n{\"a\"",
    )
    .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let (status, _) = read_answer(&mut s);
    assert_eq!(status, 413);
    let mut s = connect(addr);
    s.write_all(
        b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n{\"a\"",
    )
    .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let (status, body) = read_answer(&mut s);
    assert_eq!(
        (status, body.as_str()),
        (400, "request body is shorter than its Content-Length")
    );

    assert_eq!(get(addr, "/v1/jobs", "").0, 200, "the server survived");
    server.stop();
}

#[test]
fn token_guards_writes_and_optionally_reads() {
    let server = start(ServerConfig {
        token: Some(TOKEN.into()),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let body = r#"{"Job":{}}"#;
    assert_eq!(
        send(addr, "PUT", "/v1/jobs", "", body),
        (403, "Permission denied".into())
    );
    let wrong = "X-Nomad-Token: s3cret-tokeN\r\n";
    assert_eq!(send(addr, "PUT", "/v1/jobs", wrong, body).0, 403);
    let short = "X-Nomad-Token: s3cret\r\n";
    assert_eq!(send(addr, "PUT", "/v1/jobs", short, body).0, 403);
    let right = format!("X-Nomad-Token: {TOKEN}\r\n");
    assert_eq!(send(addr, "PUT", "/v1/jobs", &right, body).0, 200);
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(send(addr, "PUT", "/v1/jobs", &bearer, body).0, 200);
    assert_eq!(
        get(addr, "/v1/jobs", "").0,
        200,
        "reads are open by default"
    );
    server.stop();

    let server = start(ServerConfig {
        token: Some(TOKEN.into()),
        acl_reads: true,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    assert_eq!(get(addr, "/v1/jobs", "").0, 403);
    assert_eq!(get(addr, "/v1/jobs", &right).0, 200);
    server.stop();
}

#[test]
fn slow_clients_do_not_block_other_requests() {
    // One worker: a client that holds it would block everyone.
    let server = start(ServerConfig {
        workers: 1,
        io_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();

    // Half a request head: stays with its connection's thread, never reaches the worker.
    let mut half_head = connect(addr);
    half_head.write_all(b"GET /v1/jobs HTTP/1.1\r\nHo").unwrap();
    // A body that never completes: read by its connection's thread until the body deadline, then
    // 408; the worker never waits for it.
    let mut half_body = connect(addr);
    half_body
        .write_all(
            b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\n\r\n{\"Job\":",
        )
        .unwrap();

    for _ in 0..3 {
        assert_eq!(get(addr, "/v1/jobs", "").0, 200);
    }
    let (status, body) = read_answer(&mut half_body);
    assert_eq!(
        (status, body.as_str()),
        (408, "timed out reading the request body")
    );
    // The half head is dropped after the socket timeout (before the head's deadline): the server
    // closes the connection.
    let mut rest = Vec::new();
    let n = half_head.read_to_end(&mut rest).unwrap_or(0);
    assert!(
        n == 0 || String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 408"),
        "{rest:?}"
    );
    server.stop();
}

#[test]
fn connections_beyond_the_bound_get_503() {
    let server = start(ServerConfig {
        max_connections: 2,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let idle: Vec<TcpStream> = (0..2).map(|_| connect(addr)).collect();
    // Wait until both are counted: a request on one of them proves it was accepted.
    let mut first = &idle[0];
    first
        .write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 12];
    first.read_exact(&mut buf).unwrap();
    let mut second = &idle[1];
    second
        .write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    second.read_exact(&mut buf).unwrap();
    let (status, body) = get(addr, "/v1/jobs", "");
    assert_eq!(
        (status, body.as_str()),
        (503, "too many open connections\n")
    );
    drop(idle);
    server.stop();
}

#[test]
fn streams_run_beside_the_workers_and_end_at_stop() {
    let server = start(ServerConfig {
        workers: 1,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut stream = connect(addr);
    stream
        .write_all(b"GET /v1/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("hello\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stream closed early: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&seen).into_owned();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");

    // The only worker is free while the stream is open.
    assert_eq!(get(addr, "/v1/jobs", "").0, 200);

    server.stop_writes();
    let (status, body) = send(addr, "PUT", "/v1/jobs", "", "{}");
    assert_eq!((status, body.as_str()), (503, "agent is shutting down"));
    assert_eq!(get(addr, "/v1/jobs", "").0, 200, "reads still work");

    server.stop();
    let mut rest = Vec::new();
    while find(&rest, b"0\r\n\r\n").is_none() {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "stream closed without its last chunk: {rest:?}");
        rest.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_panicking_handler_is_a_500_and_the_worker_survives() {
    let server = start(ServerConfig {
        workers: 1,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    for _ in 0..2 {
        assert_eq!(get(addr, "/v1/panic", ""), (500, "internal error".into()));
    }
    assert_eq!(get(addr, "/v1/jobs", "").0, 200);
    server.stop();
}

/// The address of socket `fd` (`peer`: of its other end), if it is an IPv4 socket.
fn socket_addr(fd: i32, peer: bool) -> Option<SocketAddr> {
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let p = &mut sa as *mut libc::sockaddr_in as *mut libc::sockaddr;
    // SAFETY: sa has room for `len` bytes; the calls write at most that much.
    let rc = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    (rc == 0 && sa.sin_family == libc::AF_INET as libc::sa_family_t).then(|| {
        SocketAddr::from((
            u32::from_be(sa.sin_addr.s_addr).to_be_bytes(),
            u16::from_be(sa.sin_port),
        ))
    })
}

#[test]
fn answers_are_not_held_back_by_nagle() {
    // tiny_http writes an answer through a 1 KiB buffer, so a body above that goes out in several
    // writes; with Nagle's algorithm on, the second waits for the client's delayed ACK (40 ms on
    // Linux), and a keep-alive client gets about 20 answers per second per connection.
    let server = start(ServerConfig::default());
    let addr = server.local_addr();
    let mut client = connect(addr);
    client
        .write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert_eq!(read_answer(&mut client).0, 200);
    let mine = client.local_addr().unwrap();
    // The server's end of this connection lives in this process: find it among our descriptors.
    let server_end = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|&fd| socket_addr(fd, false) == Some(addr) && socket_addr(fd, true) == Some(mine))
        .expect("the server's socket of this connection");
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `on` has room for an int, which is what TCP_NODELAY answers.
    let rc = unsafe {
        libc::getsockopt(
            server_end,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &mut on as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(on, 1, "TCP_NODELAY is off on accepted connections");
}

#[test]
fn a_refused_request_leaves_its_keep_alive_connection_usable() {
    let server = start(ServerConfig {
        token: Some(TOKEN.into()),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut s = connect(addr);
    // Refused before its body is read: the connection skips the body and reads the next request.
    let body = format!("{{\"Job\": \"{}\"}}", "x".repeat(5000));
    let raw = format!(
        "PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(raw.as_bytes()).unwrap();
    assert_eq!(read_answer(&mut s), (403, "Permission denied".into()));
    s.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert_eq!(read_answer(&mut s).0, 200);
    server.stop();
}

#[test]
fn an_endless_request_line_is_cut_off() {
    let server = start(ServerConfig {
        io_timeout: Duration::from_secs(120),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut s = connect(addr);
    s.write_all(b"GET /v1/jobs").unwrap();
    // Unpatched tiny_http buffered this forever, waiting for a line break.
    let chunk = vec![b'a'; 64 * 1024];
    let mut closed = false;
    for _ in 0..64 {
        if s.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        let mut rest = Vec::new();
        // The server closes the connection (a reset, since it left bytes unread); the client's
        // 30 s read timeout would fail this.
        match s.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        }
    }
    assert_eq!(get(addr, "/v1/jobs", "").0, 200);
    server.stop();
}

/// Connections opened in a burst are each served at once, while every one stays open. tiny_http's
/// thread pool queued a connection for an idle thread that a moment earlier had been handed
/// another one: that connection then waited, its request unread, until some other connection
/// closed (under wrk's 64 connections, two stayed unanswered for minutes).
#[test]
fn a_burst_of_keep_alive_connections_is_served_while_all_stay_open() {
    let server = start(ServerConfig::default());
    let addr = server.local_addr();
    for round in 0..5 {
        let mut conns: Vec<TcpStream> = (0..48).map(|_| connect(addr)).collect();
        for c in &conns {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        for c in conns.iter_mut() {
            c.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
        }
        let unanswered = conns
            .iter_mut()
            .map(|c| {
                let mut head = [0u8; 12];
                c.read_exact(&mut head).is_err() || &head != b"HTTP/1.1 200"
            })
            .filter(|&failed| failed)
            .count();
        assert_eq!(unanswered, 0, "round {round}: connections left unanswered");
        drop(conns);
        // Let the pool's threads go idle again, as before a new burst.
        std::thread::sleep(Duration::from_millis(200));
    }
    server.stop();
}

/// Sends `first`, then one byte every 100 ms (each well within the socket's 5 s timeout) until the
/// server answers or closes; what it answered, or `None` if it was still reading after 20 s.
fn trickle_until_cut_off(addr: SocketAddr, first: &[u8]) -> Option<String> {
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    s.write_all(first).unwrap();
    let mut buf = [0u8; 1024];
    for _ in 0..200 {
        if s.write_all(b"a").is_err() {
            return Some(String::new());
        }
        match s.read(&mut buf) {
            Ok(n) => return Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Some(String::new()),
        }
    }
    None
}

/// Issue 11, item 6: each read had a timeout, but a client sending a byte before each ran out kept
/// a head (or a body) open for as long as it liked. Heads and bodies have deadlines of their own.
#[test]
fn a_trickled_head_or_body_is_cut_off_at_its_deadline() {
    let server = start(ServerConfig {
        io_timeout: Duration::from_secs(5),
        head_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let head = trickle_until_cut_off(
        addr,
        b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",
    )
    .expect("a trickled head is still read after 20 s");
    assert!(
        head.is_empty() || head.starts_with("HTTP/1.1 408"),
        "{head:?}"
    );
    let body = trickle_until_cut_off(
        addr,
        b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n",
    )
    .expect("a trickled body is still read after 20 s");
    assert!(body.starts_with("HTTP/1.1 408"), "{body:?}");
    assert!(
        body.ends_with("timed out reading the request body"),
        "{body:?}"
    );
    assert_eq!(get(addr, "/v1/jobs", "").0, 200);
    server.stop();
}

/// A keep-alive connection that stays idle is closed at the head's deadline, without an answer
/// (a 408 there could be read as the answer to the request the client is about to send).
#[test]
fn an_idle_keep_alive_connection_is_closed_without_an_answer() {
    let server = start(ServerConfig {
        head_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let mut s = connect(addr);
    s.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert_eq!(read_answer_keep_alive(&mut s), 200);
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "{rest:?}");
    server.stop();
}

/// The status of one answer with a `Content-Length`, leaving the connection open.
fn read_answer_keep_alive(s: &mut TcpStream) -> u16 {
    let mut out = Vec::new();
    let mut buf = [0u8; 1];
    while find(&out, b"\r\n\r\n").is_none() {
        assert_eq!(s.read(&mut buf).unwrap(), 1, "closed mid-answer");
        out.push(buf[0]);
    }
    let head = String::from_utf8_lossy(&out).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap();
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).unwrap();
    head.split(' ').nth(1).unwrap().parse().unwrap()
}
