//! HTTP/1.1 to the Docker engine over its unix socket: the endpoint, one connection per call,
//! deadlines, and the [`Closer`] that cancels a call from another thread.
//!
//! The framing (request line, headers, `Content-Length` and chunked bodies) is `ureq-proto`'s
//! sans-IO state machine; this file owns the socket. Every read and write first sets the socket's
//! timeout to what is left of the call's deadline, so no call outlives it. A call that streams
//! for as long as a container lives (a wait, a followed log) has a deadline for its head only;
//! its body is bounded by its [`Closer`] instead.
//!
//! Cancellation: a [`Closer`] holds a clone of the socket of every call it was given while that
//! call runs. [`Closer::close`] marks it closed and shuts those sockets down, which wakes a thread
//! blocked reading one at once (it reads an end of file); the call sees the mark and answers
//! [`EngineError::Cancelled`]. A call given a closer that is already closed does not connect.

use parking_lot::Mutex;
use std::fmt;
use std::io::{self, Read, Write};

use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ureq_proto::client::state::RecvBody;
use ureq_proto::client::{Call, RecvResponseResult, SendRequestResult};
use ureq_proto::http::{self, HeaderMap, Method};
use ureq_proto::BodyMode;

use super::EngineError;

/// The engine's default endpoint, as Docker's own client has it.
pub const DEFAULT_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// Where the engine listens: a unix socket, written `unix:///path` as in `DOCKER_HOST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    raw: String,
    path: PathBuf,
}

impl Endpoint {
    /// Parses `unix:///path` (the form of Nomad's `endpoint` and of `DOCKER_HOST`). Any other
    /// scheme (`tcp://`, `ssh://`, `npipe://`, `fd://`) is refused.
    pub fn parse(raw: &str) -> Result<Endpoint, EngineError> {
        let value = raw.trim();
        let bad = |reason: &'static str| EngineError::BadEndpoint {
            endpoint: raw.to_string(),
            reason,
        };
        let Some(path) = value.strip_prefix("unix://") else {
            return Err(bad("only unix:// endpoints are supported"));
        };
        if path.is_empty() {
            return Err(bad("no socket path after unix://"));
        }
        if !path.starts_with('/') {
            return Err(bad("the socket path must be absolute (unix:///path)"));
        }
        Ok(Endpoint {
            raw: value.to_string(),
            path: PathBuf::from(path),
        })
    }

    /// The endpoint `DOCKER_HOST` names, when it is set and not empty.
    pub fn from_env() -> Option<Result<Endpoint, EngineError>> {
        let value = std::env::var("DOCKER_HOST").ok()?;
        (!value.trim().is_empty()).then(|| Endpoint::parse(&value))
    }

    /// The configured endpoint, else `DOCKER_HOST`, else [`DEFAULT_ENDPOINT`].
    pub fn resolve(configured: Option<&str>) -> Result<Endpoint, EngineError> {
        match configured {
            Some(raw) => Endpoint::parse(raw),
            None => Endpoint::from_env().unwrap_or_else(|| Endpoint::parse(DEFAULT_ENDPOINT)),
        }
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// Cancels engine calls from another thread: give it to a call (a pull, a wait, a followed
/// log), and [`Closer::close`] makes that call return [`EngineError::Cancelled`] at once. One
/// closer may serve several calls (say, a task's wait and its log stream); once closed it stays
/// closed. Clones share one state.
#[derive(Clone, Default)]
pub struct Closer {
    inner: Arc<Mutex<CloserState>>,
}

/// Guarded by `Closer::inner`: whether the closer was closed, and the sockets of the calls it
/// serves now. Held only to push, remove or shut down a socket (`shutdown(2)` does not block).
#[derive(Default)]
struct CloserState {
    closed: bool,
    next_id: u64,
    sockets: Vec<(u64, UnixStream)>,
}

impl Closer {
    pub fn new() -> Closer {
        Closer::default()
    }

    /// Cancels every call this closer serves, now and later. Idempotent.
    pub fn close(&self) {
        let mut state = self.inner.lock();
        state.closed = true;
        for (_, socket) in state.sockets.drain(..) {
            // An error means the connection is gone already, which is what closing wants.
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// Makes `socket` one this closer shuts down; `None` when it is closed already.
    fn watch(&self, socket: &UnixStream) -> io::Result<Option<Watch>> {
        let clone = socket.try_clone()?;
        let mut state = self.inner.lock();
        if state.closed {
            return Ok(None);
        }
        state.next_id += 1;
        let id = state.next_id;
        state.sockets.push((id, clone));
        Ok(Some(Watch {
            closer: self.clone(),
            id,
        }))
    }
}

impl fmt::Debug for Closer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Closer")
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// A socket a [`Closer`] watches, until this is dropped (the call is over).
struct Watch {
    closer: Closer,
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.closer
            .inner
            .lock()
            .sockets
            .retain(|(id, _)| *id != self.id);
    }
}

/// How long a call may take: its head (connect, request, response head) by `head`, its body by
/// `body` (`None`: as long as the engine streams, bounded by the call's closer).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadlines {
    pub head: Instant,
    pub body: Option<Instant>,
    /// The timeout the deadlines came from, for the message when one passes.
    pub timeout: Duration,
}

impl Deadlines {
    /// One deadline for the whole call.
    pub fn whole(timeout: Duration) -> Deadlines {
        let at = Instant::now() + timeout;
        Deadlines {
            head: at,
            body: Some(at),
            timeout,
        }
    }

    /// A deadline for the head; the body streams without one.
    pub fn head_only(timeout: Duration) -> Deadlines {
        Deadlines {
            head: Instant::now() + timeout,
            body: None,
            timeout,
        }
    }
}

/// One request to the engine.
pub(super) struct Request<'a> {
    pub method: Method,
    /// Path and query, versioned already (`/v1.41/containers/json?all=1`).
    pub target: String,
    /// A JSON body.
    pub body: Option<Vec<u8>>,
    /// What the call does, for errors: `inspect container "web"`.
    pub what: String,
    pub deadlines: Deadlines,
    pub closer: Option<&'a Closer>,
}

/// The engine's answer: status, headers and a body to read.
pub(super) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The largest body read whole into memory (an inspect, a list, an error): far above what the
/// engine sends, small enough that a broken engine cannot make the agent allocate without bound.
const MAX_BODY: u64 = 64 << 20;
const BUF_SIZE: usize = 64 << 10;

/// Sends `req` on a new connection and reads the answer's head.
pub(super) fn send(endpoint: &Endpoint, req: Request<'_>) -> Result<Response, EngineError> {
    let what = req.what.clone();
    let timeout = req.deadlines.timeout;
    if req.closer.is_some_and(Closer::is_closed) {
        return Err(EngineError::Cancelled { call: what });
    }
    let stream = connect(endpoint, req.deadlines.head)
        .map_err(|e| io_error(endpoint, &what, timeout, req.closer, e))?;
    let watch = match req.closer {
        Some(closer) => match closer.watch(&stream) {
            Ok(Some(watch)) => Some(watch),
            Ok(None) => return Err(EngineError::Cancelled { call: what }),
            Err(e) => {
                return Err(EngineError::Io {
                    call: what,
                    source: e,
                })
            }
        },
        None => None,
    };
    let mut conn = Conn {
        stream,
        buf: vec![0; BUF_SIZE],
        start: 0,
        end: 0,
        deadline: Some(req.deadlines.head),
        what,
        timeout,
        closer: req.closer.cloned(),
        _watch: watch,
    };
    let (status, headers, call) = conn.exchange(req.method, &req.target, req.body.as_deref())?;
    conn.deadline = req.deadlines.body;
    Ok(Response {
        status,
        headers,
        body: Body { conn, call },
    })
}

/// Connects within the deadline. A local socket accepts at once or refuses; the deadline covers
/// an engine so busy its listen backlog is full.
fn connect(endpoint: &Endpoint, deadline: Instant) -> io::Result<UnixStream> {
    if Instant::now() >= deadline {
        return Err(io::ErrorKind::TimedOut.into());
    }
    UnixStream::connect(endpoint.socket_path())
}

/// The error for an I/O failure of a call: cancelled when its closer was closed (closing is what
/// broke the connection), timed out, unreachable when the socket cannot be reached, else the
/// error itself.
fn io_error(
    endpoint: &Endpoint,
    what: &str,
    timeout: Duration,
    closer: Option<&Closer>,
    e: io::Error,
) -> EngineError {
    if closer.is_some_and(Closer::is_closed) {
        return EngineError::Cancelled {
            call: what.to_string(),
        };
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => EngineError::TimedOut {
            call: what.to_string(),
            timeout,
        },
        io::ErrorKind::NotFound
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::PermissionDenied => EngineError::Unreachable {
            endpoint: endpoint.to_string(),
            source: e,
        },
        _ => EngineError::Io {
            call: what.to_string(),
            source: e,
        },
    }
}

/// One connection, its input buffer (`buf[start..end]` read and not yet used) and its deadline.
struct Conn {
    stream: UnixStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    deadline: Option<Instant>,
    what: String,
    timeout: Duration,
    closer: Option<Closer>,
    _watch: Option<Watch>,
}

impl Conn {
    fn bad(&self, reason: impl fmt::Display) -> EngineError {
        EngineError::BadAnswer {
            call: self.what.clone(),
            reason: reason.to_string(),
        }
    }

    fn failed(&self, e: io::Error) -> EngineError {
        if self.closer.as_ref().is_some_and(Closer::is_closed) {
            return EngineError::Cancelled {
                call: self.what.clone(),
            };
        }
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => EngineError::TimedOut {
                call: self.what.clone(),
                timeout: self.timeout,
            },
            _ => EngineError::Io {
                call: self.what.clone(),
                source: e,
            },
        }
    }

    /// The socket timeout for the next read or write: what is left of the deadline.
    fn arm(&self) -> Result<(), EngineError> {
        let left = match self.deadline {
            None => None,
            Some(at) => match at.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                _ => return Err(self.failed(io::ErrorKind::TimedOut.into())),
            },
        };
        self.stream
            .set_read_timeout(left)
            .and_then(|()| self.stream.set_write_timeout(left))
            .map_err(|e| self.failed(e))
    }

    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), EngineError> {
        while !bytes.is_empty() {
            self.arm()?;
            match self.stream.write(bytes) {
                Ok(0) => return Err(self.failed(io::ErrorKind::WriteZero.into())),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(e)),
            }
        }
        Ok(())
    }

    /// Reads more input; `false` at the end of the stream. A shut-down socket (a closed
    /// [`Closer`]) reads as an end too: the caller's error then says cancelled.
    fn fill(&mut self) -> Result<bool, EngineError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A head larger than the buffer: grow it, up to a bound.
            if self.buf.len() >= 1 << 20 {
                return Err(self.bad("response head larger than 1 MiB"));
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            self.arm()?;
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    if self.closer.as_ref().is_some_and(Closer::is_closed) {
                        return Err(EngineError::Cancelled {
                            call: self.what.clone(),
                        });
                    }
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(e)),
            }
        }
    }

    /// Writes the request and reads the response head.
    fn exchange(
        &mut self,
        method: Method,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<(u16, HeaderMap, Option<Call<RecvBody>>), EngineError> {
        // The host is a placeholder: the engine ignores it, and a unix socket has none (Docker's
        // own client sends "docker" too).
        let method_has_body = method == Method::POST || method == Method::PUT;
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("http://docker{target}"));
        builder = match body {
            Some(body) => builder
                .header("content-type", "application/json")
                .header("content-length", body.len()),
            // Without a length ureq-proto sends a POST's body chunked, and the engine refuses
            // any body on some calls ("starting container with non-empty request body").
            None if method_has_body => builder.header("content-length", 0),
            None => builder,
        };
        let request = builder.body(()).map_err(|e| self.bad(e))?;
        let call = Call::new(request).map_err(|e| self.bad(e))?;
        let mut call = call.proceed();
        let mut out = vec![0u8; 16 << 10];
        let mut recv = loop {
            let n = call.write(&mut out).map_err(|e| self.bad(e))?;
            self.write_all(&out[..n])?;
            if call.can_proceed() {
                break match call.proceed().map_err(|e| self.bad(e))? {
                    Some(SendRequestResult::RecvResponse(recv)) => recv,
                    Some(SendRequestResult::SendBody(mut send)) => {
                        let mut input = body.unwrap_or_default();
                        loop {
                            let (used, n) = send.write(input, &mut out).map_err(|e| self.bad(e))?;
                            input = &input[used..];
                            self.write_all(&out[..n])?;
                            if send.can_proceed() {
                                break;
                            }
                        }
                        match send.proceed() {
                            Some(recv) => recv,
                            None => return Err(self.bad("request body not sent whole")),
                        }
                    }
                    Some(SendRequestResult::Await100(_)) | None => {
                        return Err(self.bad("unexpected request state"))
                    }
                };
            }
        };
        let response = loop {
            let (used, response) = recv
                .try_response(&self.buf[self.start..self.end], false)
                .map_err(|e| self.bad(e))?;
            self.start += used;
            if let Some(response) = response {
                break response;
            }
            if !self.fill()? {
                return Err(self.bad("connection closed before the response head"));
            }
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let call = match recv.proceed() {
            Some(RecvResponseResult::RecvBody(call)) => Some(call),
            Some(RecvResponseResult::Cleanup(_)) => None,
            // The engine does not redirect; a 3xx with a body is read like any other answer.
            Some(RecvResponseResult::Redirect(_)) | None => None,
        };
        Ok((status, headers, call))
    }
}

/// A response body: chunked or sized, decoded. Reading past its end gives 0.
pub(super) struct Body {
    conn: Conn,
    /// `None`: the answer has no body (a 204, a `Content-Length: 0`).
    call: Option<Call<RecvBody>>,
}

impl Body {
    /// Reads decoded body bytes into `out`; 0 at the end of the body.
    pub fn read_some(&mut self, out: &mut [u8]) -> Result<usize, EngineError> {
        let Some(call) = self.call.as_mut() else {
            return Ok(0);
        };
        loop {
            let input = &self.conn.buf[self.conn.start..self.conn.end];
            let (used, n) = call.read(input, out).map_err(|e| self.conn.bad(e))?;
            self.conn.start += used;
            if n > 0 {
                return Ok(n);
            }
            let close_delimited = matches!(call.body_mode(), BodyMode::CloseDelimited);
            // A sized or chunked body read to its end; a close-delimited one reads on.
            if call.can_proceed() && !close_delimited {
                return Ok(0);
            }
            if used > 0 {
                continue;
            }
            if !self.conn.fill()? {
                if close_delimited {
                    return Ok(0);
                }
                return Err(self.conn.bad("connection closed in the middle of the body"));
            }
        }
    }

    /// The whole body, at most [`MAX_BODY`] bytes.
    pub fn read_all(&mut self) -> Result<Vec<u8>, EngineError> {
        let mut all = Vec::new();
        let mut chunk = vec![0u8; BUF_SIZE];
        loop {
            let n = self.read_some(&mut chunk)?;
            if n == 0 {
                return Ok(all);
            }
            if all.len() as u64 + n as u64 > MAX_BODY {
                return Err(self.conn.bad(format!("body larger than {MAX_BODY} bytes")));
            }
            all.extend_from_slice(&chunk[..n]);
        }
    }

    /// The whole body as JSON of type `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, EngineError> {
        let bytes = self.read_all()?;
        serde_json::from_slice(&bytes)
            .map_err(|e| self.conn.bad(format!("{e} in {}", excerpt(&bytes))))
    }

    /// An error answer for the call this body belongs to.
    pub fn bad(&self, reason: impl fmt::Display) -> EngineError {
        self.conn.bad(reason)
    }

    pub fn what(&self) -> &str {
        &self.conn.what
    }
}

/// The start of a body, for an error message.
pub(super) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
    if bytes.len() > 200 {
        format!("{text:?}...")
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;

    #[test]
    fn endpoints_are_unix_sockets() {
        let e = Endpoint::parse("unix:///var/run/docker.sock").unwrap();
        assert_eq!(e.socket_path(), Path::new("/var/run/docker.sock"));
        assert_eq!(e.to_string(), "unix:///var/run/docker.sock");
        for (raw, reason) in [
            (
                "tcp://127.0.0.1:2375",
                "only unix:// endpoints are supported",
            ),
            ("ssh://me@host", "only unix:// endpoints are supported"),
            (
                "npipe:////./pipe/docker_engine",
                "only unix:// endpoints are supported",
            ),
            (
                "/var/run/docker.sock",
                "only unix:// endpoints are supported",
            ),
            ("unix://", "no socket path after unix://"),
            (
                "unix://run/docker.sock",
                "the socket path must be absolute (unix:///path)",
            ),
        ] {
            let err = Endpoint::parse(raw).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid Docker endpoint {raw:?}: {reason}")
            );
        }
    }

    /// A one-shot server on a socket in a fresh directory: answers the first request with
    /// `answer` (after reading its head), then holds the connection open until told to stop.
    fn serve(answer: &'static [u8]) -> (tempdir::Dir, Endpoint) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("d.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let mut conn = conn;
            conn.write_all(answer).unwrap();
            // Keep the connection open: an unfinished body must end by deadline or closer.
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
        });
        let endpoint = Endpoint::parse(&format!("unix://{}", path.display())).unwrap();
        (dir, endpoint)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p =
                    std::env::temp_dir().join(format!("nw-eng-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn get(
        endpoint: &Endpoint,
        deadlines: Deadlines,
        closer: Option<&Closer>,
    ) -> Result<Response, EngineError> {
        send(
            endpoint,
            Request {
                method: Method::GET,
                target: "/x".into(),
                body: None,
                what: "get x".into(),
                deadlines,
                closer,
            },
        )
    }

    #[test]
    fn a_chunked_body_is_decoded() {
        let (_dir, endpoint) = serve(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        );
        let mut r = get(&endpoint, Deadlines::whole(Duration::from_secs(5)), None).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.read_all().unwrap(), b"abcdefg");
    }

    #[test]
    fn an_answer_without_a_body_reads_empty() {
        let (_dir, endpoint) = serve(b"HTTP/1.1 204 No Content\r\n\r\n");
        let mut r = get(&endpoint, Deadlines::whole(Duration::from_secs(5)), None).unwrap();
        assert_eq!(r.status, 204);
        assert_eq!(r.body.read_all().unwrap(), b"");
    }

    #[test]
    fn a_body_that_stalls_times_out_naming_the_call() {
        let (_dir, endpoint) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
        let mut r = get(
            &endpoint,
            Deadlines::whole(Duration::from_millis(300)),
            None,
        )
        .unwrap();
        let err = r.body.read_all().unwrap_err();
        assert!(matches!(err, EngineError::TimedOut { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "get x: no answer from the Docker engine within 300ms"
        );
    }

    #[test]
    fn a_closed_closer_cancels_a_blocked_read_from_another_thread() {
        let (_dir, endpoint) =
            serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n");
        let closer = Closer::new();
        let mut r = get(
            &endpoint,
            Deadlines::head_only(Duration::from_secs(5)),
            Some(&closer),
        )
        .unwrap();
        let mut one = [0u8; 1];
        assert_eq!(r.body.read_some(&mut one).unwrap(), 1);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let reader = std::thread::spawn(move || tx.send(r.body.read_some(&mut one)).unwrap());
        // The reader blocks (no deadline on the body); closing must wake it.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        closer.close();
        let err = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, EngineError::Cancelled { .. }), "{err:?}");
        assert_eq!(err.to_string(), "get x: cancelled");
        reader.join().unwrap();
        // A call given a closed closer does not start.
        let err = get(
            &endpoint,
            Deadlines::whole(Duration::from_secs(5)),
            Some(&closer),
        )
        .err()
        .unwrap();
        assert!(matches!(err, EngineError::Cancelled { .. }), "{err:?}");
    }

    #[test]
    fn a_missing_socket_is_unreachable_naming_the_endpoint() {
        let endpoint = Endpoint::parse("unix:///nonexistent/nodeward-test.sock").unwrap();
        let err = get(&endpoint, Deadlines::whole(Duration::from_secs(1)), None)
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "cannot reach the Docker engine at unix:///nonexistent/nodeward-test.sock: No such file or directory (os error 2)"
        );
    }
}
