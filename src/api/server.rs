//! The HTTP/1.1 server under the API: listening, connections, workers, limits, streams, shutdown.
//!
//! Protocol. tiny_http's accept thread gives each connection a thread of its own (vendored,
//! patched: `from_listener_with_handler`), which runs [`serve`] for each of its requests in turn:
//! it reads the head (within `head_timeout` in all), checks it (upgrade 400, `Host` 403, route
//! 404/405, a write from another site or not in JSON 403, a write while shutting down 503, the
//! token 403, a declared body over the limit 413: [`super::admission`]), and only then reads the
//! body (within `body_timeout` in all: 408, 413). The request then goes to the workers' queue; one
//! of the `workers` threads runs the route's handler (a panic in it is a 500) and hands the answer
//! back, and the connection's thread writes it. A [`Response::Stream`] (a followed log) is
//! written by the connection's thread too, at most `max_streams` at once. So a worker only ever
//! runs handlers: a client that is slow to send its head or body, or to read its answer, holds its
//! own connection's thread and nothing else, and `/v1/agent/health` is answered whatever a handful
//! of slow clients do.
//!
//! Stopping: [`ApiServer::stop_writes`] makes every later write a 503 `agent is shutting down`.
//! [`ApiServer::stop`] closes the listener, closes the workers' queue (each worker ends once the
//! requests already queued are answered; a request after that is a 503) and joins them, closes the
//! shutdown channel that stream readers watch, and waits a bounded time for streams to end.
//!
//! Limits (upstream tiny_http has no timeouts or line limits of its own; the patches this relies
//! on are listed in vendor/tiny_http/NODEWARD-PATCHES.md):
//! - every socket has a read and write timeout (`io_timeout`) on each call, and deadlines on the
//!   whole head (`head_timeout`, counted from the moment the connection waits for it, so an idle
//!   keep-alive connection closes after it too) and on the whole body (`body_timeout`): a client
//!   sending a byte now and then gains nothing;
//! - at most `max_connections` connections are open; more are answered 503 and closed at once.
//!   A slow client holds one of them for at most `head_timeout` + `body_timeout` per request;
//! - a request refused before its body was read: the connection skips the body when it arrives
//!   (within `head_timeout`, at most `max_body` bytes) and goes on; otherwise it closes;
//! - a stream notices a client that went away between two waits ([`Request::peer_gone`]) and ends;
//! - accept errors (out of file descriptors, out of memory) are retried with a pause that doubles
//!   up to a second, logged once per streak.

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::io::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::admission::{request_token, Admission};
use super::router::{ApiError, Method, PeerGone, Request, Response, Router};
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
    /// Worker threads running handlers.
    pub workers: usize,
    /// When set, every write (PUT/POST/DELETE) needs this token.
    pub token: Option<String>,
    /// With a token: reads need it too.
    pub acl_reads: bool,
    /// Names the API answers to in `Host`, besides IP addresses and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Read and write timeout of every socket call.
    pub io_timeout: Duration,
    /// A whole request head must arrive within this.
    pub head_timeout: Duration,
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
            allowed_hosts: Vec::new(),
            io_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
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
            .field("allowed_hosts", &self.allowed_hosts)
            .field("io_timeout", &self.io_timeout)
            .field("head_timeout", &self.head_timeout)
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
    /// tiny_http's accept thread; dropping it closes the listener.
    http: Option<tiny_http::Server>,
    core: Arc<Core>,
    workers: Vec<Worker<()>>,
    addr: SocketAddr,
}

/// What connection threads and workers share.
struct Core {
    router: Router,
    admission: Admission,
    body_timeout: Duration,
    max_body: usize,
    max_streams: usize,
    draining: AtomicBool,
    /// Guards the sender of the workers' queue; `None` once the server stops (dropping it ends
    /// each worker when the queue is empty). Held only for a send that cannot block (unbounded).
    jobs: Mutex<Option<Sender<Job>>>,
    /// Streams running now; a stream decrements it when it ends.
    streams: AtomicUsize,
    /// Guards the sender whose drop tells stream readers the agent is stopping.
    shutdown_tx: Mutex<Option<Sender<Never>>>,
    shutdown_rx: Receiver<Never>,
}

/// A request for a worker, and where its answer goes.
struct Job {
    request: Request,
    reply: Sender<Result<Response, ApiError>>,
}

/// Serves each connection's requests on the connection's thread (tiny_http's handler mode).
struct Connections(Arc<Core>);

impl tiny_http::ConnectionHandler for Connections {
    fn handle(&self, request: tiny_http::Request) {
        serve(&self.0, request);
    }

    fn accept_failed(&self, error: &io::Error, streak: u64) {
        if streak == 1 {
            log::warn!(
                "API cannot accept connections: {error}; trying again with a pause of up to 1s \
                 (not logged again until it works)"
            );
        }
    }

    fn accept_recovered(&self, streak: u64) {
        log::info!("API accepts connections again, after {streak} failed attempts");
    }
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
        let (shutdown_tx, shutdown_rx) = bounded(0);
        let (jobs_tx, jobs_rx) = unbounded::<Job>();
        let core = Arc::new(Core {
            router,
            admission: Admission::new(config.token, config.acl_reads, &config.allowed_hosts),
            body_timeout: config.body_timeout,
            max_body: config.max_body,
            max_streams: config.max_streams,
            draining: AtomicBool::new(false),
            jobs: Mutex::new(Some(jobs_tx)),
            streams: AtomicUsize::new(0),
            shutdown_tx: Mutex::new(Some(shutdown_tx)),
            shutdown_rx,
        });
        let mut server = ApiServer {
            http: None,
            core,
            workers: Vec::new(),
            addr,
        };
        for i in 0..config.workers.max(1) {
            let core = server.core.clone();
            let jobs = jobs_rx.clone();
            match crate::thread::spawn(format!("api-worker-{i}"), move || worker(&core, &jobs)) {
                Ok(handle) => server.workers.push(handle),
                Err(e) => {
                    server.stop();
                    return Err(ServerError::Spawn(e));
                }
            }
        }
        let limits = tiny_http::ConnectionLimits {
            io_timeout: Some(config.io_timeout),
            max_connections: config.max_connections,
            head_timeout: Some(config.head_timeout),
            max_skip: config.max_body as u64,
        };
        let handler = Arc::new(Connections(server.core.clone()));
        match tiny_http::Server::from_listener_with_handler(listener, limits, handler) {
            Ok(http) => server.http = Some(http),
            Err(e) => {
                server.stop();
                return Err(ServerError::Serve {
                    addr,
                    reason: e.to_string(),
                });
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
        self.core.draining.store(true, Ordering::SeqCst);
    }

    /// Closes the listener, answers what is queued, stops and joins the workers, ends streams.
    pub fn stop(mut self) {
        self.stop_writes();
        drop(self.http.take());
        self.core.jobs.lock().take();
        for worker in self.workers.drain(..) {
            worker.join();
        }
        self.core.shutdown_tx.lock().take();
        // Stream readers watch the shutdown channel; one that does not is left behind rather than
        // holding up the agent's exit.
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.core.streams.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        log::info!("API on http://{} stopped", self.addr);
    }
}

/// A worker: runs the handler of each queued request until the queue is closed and empty.
fn worker(core: &Core, jobs: &Receiver<Job>) {
    for Job { mut request, reply } in jobs.iter() {
        let answer = dispatch(&core.router, &mut request);
        // The connection's thread waits on a channel of one: this never blocks.
        let _ = reply.send(answer);
    }
}

/// One request, on its connection's thread: checks, body, a worker's answer, the answer written.
fn serve(core: &Core, mut rq: tiny_http::Request) {
    let method = Method::parse(rq.method().as_str());
    let url = rq.url().to_string();
    let path = url.split('?').next().unwrap_or("").to_string();
    let request = match admit(core, &mut rq, &method, &url, &path) {
        Ok(request) => request,
        Err(e) => return respond_error(rq, &method, &path, &e),
    };
    match run(core, request) {
        Ok(Response::Stream(body)) => stream_here(core, rq, &method, &path, body),
        Ok(response) => respond_ok(rq, &method, &path, response),
        Err(e) => respond_error(rq, &method, &path, &e),
    }
}

/// Hands the request to a worker and waits for its answer.
fn run(core: &Core, request: Request) -> Result<Response, ApiError> {
    let stopped = || ApiError::Unavailable("agent is shutting down".into());
    let (reply, answer) = bounded(1);
    {
        let jobs = core.jobs.lock();
        let Some(jobs) = jobs.as_ref() else {
            return Err(stopped());
        };
        jobs.send(Job { request, reply }).map_err(|_| stopped())?;
    }
    // A worker answers every job it takes, and they take every job before they end.
    answer.recv().unwrap_or_else(|_| Err(stopped()))
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

/// Everything before the handler, in this order: what the head allows (upgrade, host, route,
/// origin, content type, shutdown, token, declared size), then the body.
///
/// Nothing of the body is read until the head passed: a request about to be refused costs no
/// wait for a body that may never come. The connection skips the body of a refused request
/// (tiny_http, patched), so that a keep-alive client can go on.
fn admit(
    core: &Core,
    rq: &mut tiny_http::Request,
    method: &Method,
    url: &str,
    path: &str,
) -> Result<Request, ApiError> {
    let policy = &core.admission;
    policy.check_upgrade(rq.headers())?;
    policy.check_host(rq.headers())?;
    core.router.check(method, path)?;
    policy.check_origin(method, rq.headers())?;
    policy.check_content_type(method, rq.headers())?;
    if method.is_write() && core.draining.load(Ordering::SeqCst) {
        return Err(ApiError::Unavailable("agent is shutting down".into()));
    }
    let token = request_token(rq.headers());
    policy.check_token(method, token.as_deref())?;
    let declared = rq.body_length();
    if declared.is_some_and(|n| n > core.max_body) {
        return Err(ApiError::TooLarge {
            limit: core.max_body,
        });
    }
    rq.set_read_deadline(Some(Instant::now() + core.body_timeout));
    let body = read_body(rq.as_reader(), core.max_body);
    rq.set_read_deadline(None);
    let body = body?;
    if declared.is_some_and(|n| body.len() < n) {
        return Err(ApiError::BadRequest(
            "request body is shorter than its Content-Length".into(),
        ));
    }
    let mut request = Request::new(method.clone(), url, body, token);
    request.set_shutdown(core.shutdown_rx.clone());
    request.set_peer_gone(peer_gone(rq.peer_socket()));
    Ok(request)
}

/// Reads at most `limit` bytes; the connection's deadline bounds the whole read.
fn read_body(reader: &mut dyn Read, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut body = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
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

/// Tells whether the client at the other end of the request's socket has gone away.
fn peer_gone(socket: Option<tiny_http::PeerSocket>) -> PeerGone {
    match socket {
        Some(socket) => Arc::new(move || peer_closed(&socket)),
        None => Arc::new(|| false),
    }
}

/// The peer closed (end of file, or a reset), without waiting: `poll` with a timeout of 0, then a
/// peek that tells end of file from bytes the client sent meanwhile (it is still there).
fn peer_closed(socket: &tiny_http::PeerSocket) -> bool {
    let fd = socket.as_raw_fd();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the length of the call; a timeout of 0 never blocks.
    if unsafe { libc::poll(&mut pfd, 1, 0) } <= 0 {
        return false;
    }
    if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP) != 0 {
        return true;
    }
    let mut byte = 0u8;
    // SAFETY: a one-byte buffer we own; MSG_PEEK leaves the byte in the socket, MSG_DONTWAIT
    // never blocks.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
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
        Response::Stream(_) => unreachable!("streams are written by stream_here"),
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

/// Sends `body` chunked on this connection's thread, flushing every chunk (tiny_http's own chunked
/// writer buffers 8 KiB, which would hold back a followed log line).
fn stream_here(
    core: &Core,
    rq: tiny_http::Request,
    method: &Method,
    path: &str,
    body: Box<dyn Read + Send>,
) {
    // Check and count under one atomic step, so two connections cannot both take the last slot.
    let admitted = core
        .streams
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < core.max_streams).then_some(n + 1)
        })
        .is_ok();
    if !admitted {
        let e = ApiError::Unavailable("too many streams open".into());
        return respond_error(rq, method, path, &e);
    }
    let _slot = StreamSlot(&core.streams);
    log::debug!("{method} {path} 200 (stream)");
    if let Err(e) = stream(rq.into_writer(), body) {
        log::debug!("{method} {path}: stream ended: {e}");
    }
}

/// Frees a stream slot when the stream ends, however it ends.
struct StreamSlot<'a>(&'a AtomicUsize);

impl Drop for StreamSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
