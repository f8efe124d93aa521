//! Requests, responses, errors and the route table of the HTTP API: the pure part of the server.
//!
//! A [`Router`] maps a method and a path pattern (`/v1/job/:id/allocations`) to a handler. A handler
//! sees a [`Request`] whose body was already read and size-checked, and answers a [`Response`] or an
//! [`ApiError`], which becomes a status code with a one-line plain-text reason, as Nomad answers.
//!
//! It imports nothing else of the API: the server, the ID resolver and the resource files build
//! on it.

use crossbeam_channel::Receiver;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::sync::Arc;

use crate::thread::Never;

/// Why a request failed; each variant is one HTTP status with a one-line reason as the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed or names something ambiguously.
    #[error("{0}")]
    BadRequest(String),
    /// 403: the token is missing or wrong. The reason never repeats the token.
    #[error("Permission denied")]
    Forbidden,
    /// 403: the request may not come from where it comes from (another web site, a name that is
    /// not the agent's); the reason says which.
    #[error("Permission denied: {0}")]
    Denied(String),
    /// 404: an unknown ID or route.
    #[error("{0}")]
    NotFound(String),
    /// 405: the path exists, but not for this method.
    #[error("method {method} not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// 408: the client did not send its body in time.
    #[error("timed out reading the request body")]
    RequestTimeout,
    /// 413: the body is over the limit.
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// 500: the agent failed.
    #[error("{0}")]
    Internal(String),
    /// 503: the agent is shutting down, or the server is at a limit.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Forbidden | ApiError::Denied(_) => 403,
            ApiError::NotFound(_) => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::RequestTimeout => 408,
            ApiError::TooLarge { .. } => 413,
            ApiError::Internal(_) => 500,
            ApiError::Unavailable(_) => 503,
        }
    }

    /// The one-line reason sent as the body: line breaks in a message would break that contract.
    pub fn body(&self) -> String {
        self.to_string().replace(['\r', '\n'], " ")
    }
}

/// The HTTP methods the API uses; anything else is kept as written so it can be refused with 405.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Put,
    Post,
    Delete,
    Other(String),
}

impl Method {
    pub fn parse(s: &str) -> Method {
        match s.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            other => Method::Other(other.to_string()),
        }
    }

    /// Writes change state and always need the token when ACLs are on.
    pub fn is_write(&self) -> bool {
        !matches!(self, Method::Get)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Other(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the client of a request has gone away (closed its connection). A stream that waits
/// for more to send (a followed log) asks between waits, so that nobody's follower holds a slot.
pub type PeerGone = Arc<dyn Fn() -> bool + Send + Sync>;

/// One API request as a handler sees it: the body is already read and within the limit.
pub struct Request {
    method: Method,
    path: String,
    params: BTreeMap<String, String>,
    query: BTreeMap<String, String>,
    body: Vec<u8>,
    token: Option<String>,
    shutdown: Receiver<Never>,
    peer_gone: PeerGone,
}

impl Request {
    /// `url` is the request target (`/v1/jobs?prefix=x`); path parameters are filled by the router.
    pub fn new(method: Method, url: &str, body: Vec<u8>, token: Option<String>) -> Request {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, parse_query(q)),
            None => (url, BTreeMap::new()),
        };
        Request {
            method,
            path: path.to_string(),
            params: BTreeMap::new(),
            query,
            body,
            token,
            // Outside a server (tests, fuzzing) nothing ever stops a request, and no client leaves.
            shutdown: crossbeam_channel::never(),
            peer_gone: Arc::new(|| false),
        }
    }

    pub(super) fn set_shutdown(&mut self, shutdown: Receiver<Never>) {
        self.shutdown = shutdown;
    }

    pub(super) fn set_peer_gone(&mut self, peer_gone: PeerGone) {
        self.peer_gone = peer_gone;
    }

    /// Tells whether the client has closed its connection (see [`PeerGone`]).
    pub fn peer_gone(&self) -> PeerGone {
        self.peer_gone.clone()
    }

    /// Disconnects when the server stops: a [`Response::Stream`] reader that waits for more data
    /// (a followed log) selects on it so that it ends promptly.
    pub fn shutdown(&self) -> Receiver<Never> {
        self.shutdown.clone()
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The path without the query string, not decoded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A `:name` segment of the route pattern, percent-decoded. Empty when the route has none.
    pub fn param(&self, name: &str) -> &str {
        self.params.get(name).map(String::as_str).unwrap_or("")
    }

    /// A query parameter, percent-decoded.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }

    /// A boolean query flag: `?purge=true`, `?purge=1` or a bare `?purge` are true.
    pub fn query_bool(&self, name: &str) -> Result<bool, ApiError> {
        match self.query(name) {
            None => Ok(false),
            Some("" | "true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(other) => Err(ApiError::BadRequest(format!(
                "invalid value for {name:?}: {other:?}"
            ))),
        }
    }

    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as JSON of type `T`; a malformed body is a 400 that says why.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        json_body(&self.body)
    }

    /// The token the client sent (`X-Nomad-Token` or `Authorization: Bearer`), if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

impl fmt::Debug for Request {
    // By hand so that the token never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("params", &self.params)
            .field("query", &self.query)
            .field("body_len", &self.body.len())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Parses a request body as JSON of type `T`, as [`Request::json`] does: the entry point of the
/// handlers' body parsing, usable without a request.
pub fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::BadRequest("missing request body".into()));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON in request body: {e}")))
}

/// Like [`json_body`] for an endpoint whose body is optional: none is `T::default()`.
pub fn optional_json_body<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Ok(T::default());
    }
    json_body(body)
}

/// What a handler answers; status 200 unless it says otherwise.
pub enum Response {
    /// `application/json`, encoded ([`Response::json`] builds it from any serialisable value).
    Json(String),
    /// `application/json` with another status: a report that is itself the answer, such as
    /// `/v1/agent/health` answering 500 with its checks when one fails (as Nomad does).
    JsonStatus(u16, String),
    /// `text/plain`.
    Text(String),
    /// A body of unknown length sent chunked as it is read, by the connection's own thread so that
    /// a long stream (`alloc logs -f`) never holds a worker. The stream ends when the reader returns
    /// EOF or an error, or when the client stops reading; a reader that waits for more asks
    /// [`Request::peer_gone`] between waits.
    Stream(Box<dyn Read + Send>),
}

impl Response {
    /// Encodes `value` straight to text, without a `serde_json::Value` in between.
    pub fn json(value: impl serde::Serialize) -> Result<Response, ApiError> {
        serde_json::to_string(&value)
            .map(Response::Json)
            .map_err(|e| ApiError::Internal(format!("cannot encode the answer as JSON: {e}")))
    }

    /// [`Response::json`] with a status other than 200 (a failing health check's 500).
    pub fn json_status(status: u16, value: impl serde::Serialize) -> Result<Response, ApiError> {
        match Response::json(value)? {
            Response::Json(s) if status != 200 => Ok(Response::JsonStatus(status, s)),
            other => Ok(other),
        }
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Response::Json(s) => f.debug_tuple("Json").field(s).finish(),
            Response::JsonStatus(code, s) => {
                f.debug_tuple("JsonStatus").field(code).field(s).finish()
            }
            Response::Text(s) => f.debug_tuple("Text").field(s).finish(),
            Response::Stream(_) => f.write_str("Stream(..)"),
        }
    }
}

/// A handler: shared by all worker threads.
pub type Handler = Box<dyn Fn(&Request) -> Result<Response, ApiError> + Send + Sync>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

struct Route {
    method: Method,
    pattern: Vec<Segment>,
    handler: Handler,
}

/// The route table. Build it once, then hand it to the server (`ApiServer::start`).
#[derive(Default)]
pub struct Router {
    routes: Vec<Route>,
}

impl Router {
    pub fn new() -> Router {
        Router::default()
    }

    /// Adds a route. `pattern` is a path whose `:name` segments match any one segment
    /// (`/v1/job/:id/allocations`). Where two patterns match a path, the one with more literal
    /// segments wins, so `/v1/volume/host/create` beats `/v1/volume/host/:id`.
    ///
    /// # Panics
    /// On a pattern that does not start with `/`: routes are fixed at build time.
    pub fn route<F>(&mut self, method: Method, pattern: &str, handler: F) -> &mut Router
    where
        F: Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static,
    {
        assert!(
            pattern.starts_with('/'),
            "route pattern {pattern:?} must start with /"
        );
        let pattern = split_path(pattern)
            .map(|s| match s.strip_prefix(':') {
                Some(name) => Segment::Param(name.to_string()),
                None => Segment::Literal(s.to_string()),
            })
            .collect();
        self.routes.push(Route {
            method,
            pattern,
            handler: Box::new(handler),
        });
        self
    }

    pub fn get<F>(&mut self, pattern: &str, handler: F) -> &mut Router
    where
        F: Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static,
    {
        self.route(Method::Get, pattern, handler)
    }

    pub fn put<F>(&mut self, pattern: &str, handler: F) -> &mut Router
    where
        F: Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static,
    {
        self.route(Method::Put, pattern, handler)
    }

    pub fn post<F>(&mut self, pattern: &str, handler: F) -> &mut Router
    where
        F: Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static,
    {
        self.route(Method::Post, pattern, handler)
    }

    pub fn delete<F>(&mut self, pattern: &str, handler: F) -> &mut Router
    where
        F: Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static,
    {
        self.route(Method::Delete, pattern, handler)
    }

    /// Whether a route serves `method` on `path`: the 404 or 405 [`Router::dispatch`] would
    /// answer, known before a body is read.
    pub fn check(&self, method: &Method, path: &str) -> Result<(), ApiError> {
        self.find(method, path).map(|_| ())
    }

    /// Finds the handler for the request, fills its path parameters and runs it.
    pub fn dispatch(&self, request: &mut Request) -> Result<Response, ApiError> {
        let (route, params) = self.find(&request.method, &request.path)?;
        request.params = params;
        (route.handler)(request)
    }

    fn find(
        &self,
        method: &Method,
        path: &str,
    ) -> Result<(&Route, BTreeMap<String, String>), ApiError> {
        let segments: Vec<&str> = split_path(path).collect();
        let mut best: Option<(usize, &Route, BTreeMap<String, String>)> = None;
        let mut path_known = false;
        for route in &self.routes {
            let Some(params) = matches(&route.pattern, &segments) else {
                continue;
            };
            path_known = true;
            if route.method != *method {
                continue;
            }
            let literals = route
                .pattern
                .iter()
                .filter(|s| matches!(s, Segment::Literal(_)))
                .count();
            if best.as_ref().is_none_or(|(n, _, _)| literals > *n) {
                best = Some((literals, route, params));
            }
        }
        match best {
            Some((_, route, params)) => Ok((route, params)),
            None if path_known => Err(ApiError::MethodNotAllowed {
                method: method.to_string(),
                path: path.to_string(),
            }),
            None => Err(ApiError::NotFound(format!("no such API path: {path}"))),
        }
    }
}

fn split_path(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// The decoded path parameters when `segments` matches `pattern`.
fn matches(pattern: &[Segment], segments: &[&str]) -> Option<BTreeMap<String, String>> {
    if pattern.len() != segments.len() {
        return None;
    }
    let mut params = BTreeMap::new();
    for (p, s) in pattern.iter().zip(segments) {
        match p {
            Segment::Literal(l) if l == s => {}
            Segment::Literal(_) => return None,
            Segment::Param(name) => {
                params.insert(name.clone(), percent_decode(s, false));
            }
        }
    }
    Some(params)
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Decodes `%XX` escapes (and `+` as a space in query strings); a malformed escape stays as written.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> impl Fn(&Request) -> Result<Response, ApiError> + Send + Sync + 'static {
        let text = text.to_string();
        move |req: &Request| Ok(Response::Text(format!("{text} {}", req.param("id"))))
    }

    fn run(router: &Router, method: Method, url: &str) -> Result<String, ApiError> {
        let mut req = Request::new(method, url, Vec::new(), None);
        match router.dispatch(&mut req)? {
            Response::Text(s) => Ok(s),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn dispatch_prefers_literals_and_tells_404_from_405() {
        let mut r = Router::new();
        r.get("/v1/volume/host/:id", ok("get"))
            .put("/v1/volume/host/create", ok("create"))
            .delete("/v1/volume/host/:id", ok("delete"));
        assert_eq!(
            run(&r, Method::Put, "/v1/volume/host/create").unwrap(),
            "create "
        );
        assert_eq!(
            run(&r, Method::Get, "/v1/volume/host/abc").unwrap(),
            "get abc"
        );
        assert_eq!(
            run(&r, Method::Delete, "/v1/volume/host/a%2Fb").unwrap(),
            "delete a/b"
        );
        assert_eq!(
            run(&r, Method::Post, "/v1/volume/host/abc")
                .unwrap_err()
                .status(),
            405
        );
        assert_eq!(
            run(&r, Method::Get, "/v1/volume/host")
                .unwrap_err()
                .status(),
            404
        );
        assert!(r.check(&Method::Put, "/v1/volume/host/create").is_ok());
        assert_eq!(
            r.check(&Method::Post, "/v1/volume/host/abc")
                .unwrap_err()
                .status(),
            405
        );
        assert_eq!(r.check(&Method::Get, "/v1/x").unwrap_err().status(), 404);
        assert_eq!(
            r.check(&Method::Get, "/v1/volume/x/y/z")
                .unwrap_err()
                .status(),
            404
        );
    }

    #[test]
    fn query_parameters_are_decoded() {
        let req = Request::new(
            Method::Get,
            "/x?a=1&b=hello+world&c=%41%zz&purge",
            vec![],
            None,
        );
        assert_eq!(req.path(), "/x");
        assert_eq!(req.query("a"), Some("1"));
        assert_eq!(req.query("b"), Some("hello world"));
        assert_eq!(req.query("c"), Some("A%zz"));
        assert_eq!(req.query_bool("purge"), Ok(true));
        assert_eq!(req.query_bool("nothing"), Ok(false));
        assert_eq!(req.query_bool("a"), Ok(true));
        assert_eq!(req.query_bool("b").unwrap_err().status(), 400);
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let req = Request::new(Method::Get, "/x", vec![], Some("hunter2".into()));
        assert_eq!(req.token(), Some("hunter2"));
        assert!(!format!("{req:?}").contains("hunter2"));
    }

    #[test]
    fn error_bodies_are_one_line() {
        let e = ApiError::Internal("a\nb\r\nc".into());
        assert_eq!(e.body(), "a b  c");
    }
}
