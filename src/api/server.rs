//! The HTTP/1.1 server under the API: listening, workers, limits, tokens, streams, shutdown.
//!
//! Protocol. tiny_http's accept thread hands each connection to a connection thread of its own,
//! which reads request heads (and bodies up to 1 KiB) and queues requests. A fixed pool of
//! `workers` threads pulls them from that queue; per request a worker reads the body within the
//! size and time limits (413, 408), refuses unknown paths (404), writes while shutting down (503)
//! and bad tokens (403), runs the route's handler (a panic in it is a 500) and writes the answer. A [`Response::Stream`] is handed to a
//! thread of its own (at most `max_streams`), so a log that is followed for hours never holds a worker.
//!
//! Stopping: [`ApiServer::stop_writes`] makes every later write a 503 `agent is shutting down`.
//! [`ApiServer::stop`] queues one wake-up per worker behind the requests already queued (so they
//! are answered), joins the workers, closes the shutdown channel that stream readers watch, waits a
//! bounded time for streams to end, and closes the listener.
//!
//! Limits, and what they do not cover (upstream tiny_http has no timeouts or line limits of its
//! own; vendor/tiny_http/NODEWARD-PATCHES.md lists the six patches this relies on: unread bodies
//! not drained, socket timeouts and a connection bound, poisoned connections after a refused
//! body, `TCP_NODELAY`, bounded request lines, and the connection pool's queueing):
//! - every socket has a read and write timeout (`io_timeout`): a client that goes silent mid-head or
//!   mid-body, a half-open connection, or an idle keep-alive connection is closed after it;
//! - a body must arrive within `body_timeout` in total, so a client trickling bytes holds a worker
//!   for at most `body_timeout + io_timeout`;
//! - at most `max_connections` connections are open; more are answered 503 and closed at once.
//!   A client trickling its request *head* holds one connection (not a worker) for as long as it
//!   keeps trickling; that is what the bound is for;
//! - a response is written under the write timeout per write call; a client reading very slowly
//!   can still hold a worker while a large answer is written.

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::router::{ApiError, Method, Request, Response, Router};
use crate::thread::{Never, Worker};

/// The API port when the configuration names none.
pub const DEFAULT_PORT: u16 = 4656;
/// Request bodies above this are refused with 413.
pub const MAX_BODY: usize = 1024 * 1024;

/// How the server listens and what it allows.
#[derive(Clone)]
pub struct ServerConfig {
    /// `bind_addr:port`; port 0 picks a free port (tests).
    pub addr: SocketAddr,
    /// Worker threads answering requests.
    pub workers: usize,
    /// When set, every write (PUT/POST/DELETE) needs this token.
    pub token: Option<String>,
    /// With a token: reads need it too.
    pub acl_reads: bool,
    /// Read and write timeout of every socket.
    pub io_timeout: Duration,
    /// The whole body must arrive within this.
    pub body_timeout: Duration,
    pub max_connections: usize,
    /// Streaming answers (followed logs) served at once.
    pub max_streams: usize,
    pub max_body: usize,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            workers: 4,
            token: None,
            acl_reads: false,
            io_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 256,
            max_streams: 32,
            max_body: MAX_BODY,
        }
    }
}

impl fmt::Debug for ServerConfig {
    // By hand so that the token never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("addr", &self.addr)
            .field("workers", &self.workers)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("acl_reads", &self.acl_reads)
            .field("io_timeout", &self.io_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_streams", &self.max_streams)
            .field("max_body", &self.max_body)
            .finish()
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot serve HTTP on {addr}: {reason}")]
    Serve { addr: SocketAddr, reason: String },
    #[error("cannot start an API thread: {0}")]
    Spawn(io::Error),
}

/// Binds the API's address.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })
}

/// A running API server. Dropping it without [`ApiServer::stop`] leaves its threads running.
pub struct ApiServer {
    shared: Arc<Shared>,
    workers: Vec<Worker<()>>,
    addr: SocketAddr,
}

struct Shared {
    http: tiny_http::Server,
    router: Router,
    token: Option<Vec<u8>>,
    acl_reads: bool,
    body_timeout: Duration,
    max_body: usize,
    max_streams: usize,
    draining: AtomicBool,
    stopping: AtomicBool,
    /// Streams running now; a stream thread decrements it when it ends.
    streams: AtomicUsize,
    /// Guards the sender whose drop tells stream readers the agent is stopping.
    shutdown_tx: Mutex<Option<Sender<Never>>>,
    shutdown_rx: Receiver<Never>,
}

impl ApiServer {
    /// Binds `config.addr` and starts the workers.
    pub fn start(config: ServerConfig, router: Router) -> Result<ApiServer, ServerError> {
        let listener = bind(config.addr)?;
        ApiServer::start_on(listener, config, router)
    }

    /// Starts the workers on a listener bound before (the agent binds its port before it takes
    /// over any task, so that a port in use changes nothing).
    pub fn start_on(
        listener: TcpListener,
        config: ServerConfig,
        router: Router,
    ) -> Result<ApiServer, ServerError> {
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.addr,
            source,
        })?;
        let limits = tiny_http::ConnectionLimits {
            io_timeout: Some(config.io_timeout),
            max_connections: config.max_connections,
        };
        let http =
            tiny_http::Server::from_listener_with_limits(listener, None, limits).map_err(|e| {
                ServerError::Serve {
                    addr,
                    reason: e.to_string(),
                }
            })?;
        let (shutdown_tx, shutdown_rx) = bounded(0);
        let shared = Arc::new(Shared {
            http,
            router,
            token: config.token.map(String::into_bytes),
            acl_reads: config.acl_reads,
            body_timeout: config.body_timeout,
            max_body: config.max_body,
            max_streams: config.max_streams,
            draining: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            streams: AtomicUsize::new(0),
            shutdown_tx: Mutex::new(Some(shutdown_tx)),
            shutdown_rx,
        });
        let mut server = ApiServer {
            shared,
            workers: Vec::new(),
            addr,
        };
        for i in 0..config.workers.max(1) {
            let shared = server.shared.clone();
            match crate::thread::spawn(format!("api-worker-{i}"), move || worker(&shared)) {
                Ok(handle) => server.workers.push(handle),
                Err(e) => {
                    server.stop();
                    return Err(ServerError::Spawn(e));
                }
            }
        }
        log::info!("API listening on http://{addr}");
        Ok(server)
    }

    /// The address actually bound (the port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on every write is answered 503 `agent is shutting down`; reads still work.
    pub fn stop_writes(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    /// Answers what is queued, stops and joins the workers, ends streams, closes the listener.
    pub fn stop(mut self) {
        self.stop_writes();
        self.shared.stopping.store(true, Ordering::SeqCst);
        for _ in 0..self.workers.len() {
            self.shared.http.unblock();
        }
        for worker in self.workers.drain(..) {
            worker.join();
        }
        self.shared.shutdown_tx.lock().take();
        // Stream readers watch the shutdown channel; one that does not is left behind rather than
        // holding up the agent's exit.
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.shared.streams.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        log::info!("API on http://{} stopped", self.addr);
    }
}

fn worker(shared: &Arc<Shared>) {
    loop {
        match shared.http.recv() {
            Ok(rq) => handle(shared, rq),
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(e) => log::error!("API server cannot accept connections: {e}"),
        }
    }
}

fn handle(shared: &Arc<Shared>, mut rq: tiny_http::Request) {
    let method = Method::parse(rq.method().as_str());
    let url = rq.url().to_string();
    let path = url.split('?').next().unwrap_or("").to_string();
    match prepare(shared, &mut rq, &method, &url, &path) {
        Ok(mut request) => match dispatch(&shared.router, &mut request) {
            Ok(Response::Stream(body)) => start_stream(shared, rq, &method, &path, body),
            Ok(response) => respond_ok(rq, &method, &path, response),
            Err(e) => respond_error(rq, &method, &path, &e),
        },
        Err(e) => respond_error(rq, &method, &path, &e),
    }
}

/// Runs the handler; a panic in it is a 500 for this request, not a worker lost for all the next.
fn dispatch(router: &Router, request: &mut Request) -> Result<Response, ApiError> {
    match catch_unwind(AssertUnwindSafe(|| router.dispatch(request))) {
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log::error!(
                "API handler for {} {} panicked: {msg}",
                request.method(),
                request.path()
            );
            Err(ApiError::Internal("internal error".into()))
        }
    }
}

/// Everything before the handler: body, route, shutdown, token.
///
/// The body is read first, even for a request about to be refused: tiny_http does not drain an
/// unread body (see vendor/tiny_http), and what was left would be read as the client's next
/// request on the connection. Only a body over the limit, or one that never arrives, is left
/// unread; the connection is then closed when that rest fails to parse as a request.
fn prepare(
    shared: &Shared,
    rq: &mut tiny_http::Request,
    method: &Method,
    url: &str,
    path: &str,
) -> Result<Request, ApiError> {
    let declared = rq.body_length();
    if declared.is_some_and(|n| n > shared.max_body) {
        return Err(ApiError::TooLarge {
            limit: shared.max_body,
        });
    }
    let deadline = Instant::now() + shared.body_timeout;
    let body = read_body(rq.as_reader(), shared.max_body, deadline)?;
    if declared.is_some_and(|n| body.len() < n) {
        return Err(ApiError::BadRequest(
            "request body is shorter than its Content-Length".into(),
        ));
    }
    if !shared.router.knows_path(path) {
        return Err(ApiError::NotFound(format!("no such API path: {path}")));
    }
    if method.is_write() && shared.draining.load(Ordering::SeqCst) {
        return Err(ApiError::Unavailable("agent is shutting down".into()));
    }
    let token = request_token(rq.headers());
    if let Some(expected) = &shared.token {
        if (method.is_write() || shared.acl_reads) && !token_matches(expected, token.as_deref()) {
            return Err(ApiError::Forbidden);
        }
    }
    let mut request = Request::new(method.clone(), url, body, token);
    request.set_shutdown(shared.shutdown_rx.clone());
    Ok(request)
}

/// Reads at most `limit` bytes, giving up at `deadline` (checked before each read; each read is
/// bounded by the socket's timeout).
fn read_body(reader: &mut dyn Read, limit: usize, deadline: Instant) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if Instant::now() >= deadline {
            return Err(ApiError::RequestTimeout);
        }
        match reader.read(&mut buf) {
            Ok(0) => return Ok(body),
            Ok(n) if body.len() + n > limit => return Err(ApiError::TooLarge { limit }),
            Ok(n) => body.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ApiError::RequestTimeout)
            }
            Err(e) => {
                return Err(ApiError::BadRequest(format!(
                    "cannot read the request body: {e}"
                )))
            }
        }
    }
}

/// `X-Nomad-Token`, or `Authorization: Bearer <token>`.
fn request_token(headers: &[tiny_http::Header]) -> Option<String> {
    let mut bearer = None;
    for h in headers {
        if h.field.equiv("X-Nomad-Token") {
            return Some(h.value.as_str().trim().to_string());
        }
        if h.field.equiv("Authorization") {
            let value = h.value.as_str().trim();
            if let Some((scheme, token)) = value.split_once(' ') {
                if scheme.eq_ignore_ascii_case("bearer") {
                    bearer = Some(token.trim().to_string());
                }
            }
        }
    }
    bearer
}

/// Compares in time that depends only on the lengths, so the token cannot be guessed byte by byte.
fn token_matches(expected: &[u8], given: Option<&str>) -> bool {
    let Some(given) = given else {
        return false;
    };
    let given = given.as_bytes();
    if given.len() != expected.len() {
        return false;
    }
    let diff = expected
        .iter()
        .zip(given)
        .fold(0u8, |acc, (a, b)| std::hint::black_box(acc | (a ^ b)));
    diff == 0
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("static header names and values are valid")
}

fn respond_ok(rq: tiny_http::Request, method: &Method, path: &str, response: Response) {
    let (status, body, content_type) = match response {
        Response::Json(s) => (200, s, "application/json"),
        Response::JsonStatus(status, s) => (status, s, "application/json"),
        Response::Text(s) => (200, s, "text/plain; charset=utf-8"),
        Response::Stream(_) => unreachable!("streams are started by start_stream"),
    };
    log::debug!("{method} {path} {status}");
    let answer = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type));
    if let Err(e) = rq.respond(answer) {
        log::debug!("{method} {path}: cannot write the answer: {e}");
    }
}

fn respond_error(rq: tiny_http::Request, method: &Method, path: &str, error: &ApiError) {
    let status = error.status();
    if status >= 500 {
        log::warn!("{method} {path} {status}: {error}");
    } else {
        log::debug!("{method} {path} {status}: {error}");
    }
    let answer = tiny_http::Response::from_string(error.body())
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"));
    if let Err(e) = rq.respond(answer) {
        log::debug!("{method} {path}: cannot write the answer: {e}");
    }
}

/// Sends `body` chunked on a thread of its own, flushing every chunk (tiny_http's own chunked
/// writer buffers 8 KiB, which would hold back a followed log line).
fn start_stream(
    shared: &Arc<Shared>,
    rq: tiny_http::Request,
    method: &Method,
    path: &str,
    body: Box<dyn Read + Send>,
) {
    // Check and count under one atomic step, so two workers cannot both take the last slot.
    let admitted = shared
        .streams
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < shared.max_streams).then_some(n + 1)
        })
        .is_ok();
    if !admitted {
        let e = ApiError::Unavailable("too many streams open".into());
        return respond_error(rq, method, path, &e);
    }
    log::debug!("{method} {path} 200 (stream)");
    let counter = StreamSlot(shared.clone());
    let name = format!("api-stream-{}", path.rsplit('/').next().unwrap_or(""));
    let spawned = crate::thread::spawn(name, move || {
        let _slot = counter;
        if let Err(e) = stream(rq.into_writer(), body) {
            log::debug!("stream ended: {e}");
        }
    });
    if let Err(e) = spawned {
        log::error!("cannot start a stream thread: {e}");
    }
}

/// Frees a stream slot when the stream thread ends, however it ends.
struct StreamSlot(Arc<Shared>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn stream(mut out: Box<dyn Write + Send>, mut body: Box<dyn Read + Send>) -> io::Result<()> {
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n\
          Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n",
    )?;
    out.flush()?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Without the last chunk the client sees the answer was cut short.
            Err(e) => return Err(e),
        };
        write!(out, "{n:x}\r\n")?;
        out.write_all(&buf[..n])?;
        out.write_all(b"\r\n")?;
        out.flush()?;
    }
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}
