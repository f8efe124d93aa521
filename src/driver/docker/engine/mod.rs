//! The Docker Engine API client the docker driver calls: plain synchronous HTTP/1.1 over the
//! engine's unix socket, one connection per call, typed bodies ([`types`]), image references
//! ([`reference`]) and the multiplexed log stream ([`logs`]).
//!
//! - **Endpoint**: `unix:///path` ([`Endpoint::resolve`]: the agent's `endpoint`, else
//!   `DOCKER_HOST`, else `unix:///var/run/docker.sock`); any other scheme is refused.
//! - **Version**: [`Engine::connect`] asks `GET /_ping` (its `Api-Version` header) and `GET
//!   /version` (the engine's `MinAPIVersion`), then prefixes every call with `/v<version>`: the
//!   engine's newest, capped at [`NEWEST_API`] (1.41, Docker 20.10, what the tests run against),
//!   raised to the engine's own minimum when that is newer (Docker 29 accepts only 1.44 and
//!   later; a version nodeward has not been tested with). An engine older than
//!   [`OLDEST_API`] (1.25, Docker 1.13: `HostConfig.Mounts` and `Init`) is refused.
//! - **Timeouts**: every call has one, the engine's default ([`DEFAULT_TIMEOUT`],
//!   [`Engine::with_timeout`]) for the whole exchange. A pull has the timeout it is given. A
//!   wait and a followed log have one for their answer's head only; their bodies last as long as
//!   the container, and end by its exit or by their [`Closer`].
//! - **Cancellation**: a pull, a wait and a log stream take a [`Closer`]; [`Closer::close`] from
//!   any thread shuts their sockets down and the blocked call returns
//!   [`EngineError::Cancelled`] at once.
//!
//! Thread protocol: an [`Engine`] is a small `Clone + Send + Sync` value with no thread and no
//! lock of its own; each call connects, runs on the caller's thread and closes. The only state
//! shared between threads is a [`Closer`] (one mutex, held to add, remove or shut down a
//! socket).
//!
//! What Docker 20.10 (API 1.41, `json-file` logs) does, measured here (`tests/docker_engine.rs`
//! asserts each):
//!
//! - **Logs `since`** is inclusive and compared at nanosecond resolution: with `since` equal to
//!   a line's timestamp that line is returned, with one nanosecond more it is not. Lines written
//!   earlier in the same second as `since` are left out (the comparison is not by whole seconds;
//!   only an integer `since` counts from the start of its second). The fraction is decimal:
//!   `.4` is 400 ms, so [`logs::since_param`] always writes nine digits.
//! - **Timestamps** (`timestamps=1`) are RFC 3339 with exactly nine fraction digits, then a space,
//!   at the start of each frame. A line longer than 16 KiB arrives as several frames of 16 KiB
//!   with the same timestamp, the last one holding the rest and the newline, so a `since` of
//!   that timestamp returns every piece again. A last line without a newline arrives without one.
//! - **A followed log ends** (`Ok(None)` from [`LogStream::next_frame`]) when the container
//!   exits, after its last line. Following a container that has not started yet ends at once,
//!   with nothing: start the follow after [`Engine::start`].
//! - **Wait** (`condition=not-running`) on a container that has exited answers at once with its
//!   code; on one that was created and never started it answers at once with 0, so the driver
//!   waits only after starting. The answer's head comes at once; its body when the container
//!   stops.
//! - **Pull** with no registry reachable fails fast with a `500` and the engine's message: about
//!   30 ms for a Docker Hub name (`Get "https://registry-1.docker.io/v2/": dial tcp: lookup
//!   registry-1.docker.io ...: no such host`) and for a local registry port nothing listens on
//!   (`... connect: connection refused`).
//! - **Inspect times**: for a container that exits at once, `FinishedAt` may be earlier than
//!   `StartedAt` (by about half a millisecond, one run in two here): a duration computed from
//!   them must not assume the order.
//! - **Stdout and stderr** are read apart by the engine: within a stream the order is kept,
//!   between the two it is not (a line to stderr may come before an earlier one to stdout).
//! - **Stats** (`stream=false`) takes about a second: the engine samples twice for the CPU rate.

pub mod http;
pub mod logs;
pub mod reference;
pub mod types;
pub mod version;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Serialize;
use std::fmt;
use std::io;
use std::time::Duration;
use ureq_proto::http::Method;

use crate::util::duration;
pub use http::{Closer, Endpoint, DEFAULT_ENDPOINT};
use http::{Deadlines, Request, Response};
pub use logs::{since_param, Demuxer, Frame, LogStream, Stream};
pub use reference::{ImageRef, ReferenceError};
pub use types::{
    BindOptions, ContainerInfo, ContainerState, ContainerStats, ContainerSummary, CpuSample,
    CreateContainer, DeviceMapping, Empty, EngineVersion, HostConfig, MemoryStats, Mount,
    MountKind, PortBinding, TmpfsOptions, Ulimit, VolumeDriver, VolumeOptions,
};
use version::WAIT_CONDITION_API;
pub use version::{negotiate, ApiVersion, Ping, NEWEST_API, OLDEST_API};

/// The default timeout of a call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the engine client. The messages end up in task events: they say which call failed
/// on what, and carry the engine's own message verbatim.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid Docker endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        endpoint: String,
        reason: &'static str,
    },
    #[error("cannot reach the Docker engine at {endpoint}: {source}")]
    Unreachable { endpoint: String, source: io::Error },
    #[error(
        "the Docker engine at {endpoint} speaks API version {version}, older than the oldest \
         nodeward supports ({OLDEST_API})"
    )]
    TooOld { endpoint: String, version: String },
    #[error("{call}: no answer from the Docker engine within {}", duration::format(*.timeout))]
    TimedOut { call: String, timeout: Duration },
    #[error("{call}: cancelled")]
    Cancelled { call: String },
    /// A 404: no such container or image.
    #[error("{call}: {message}")]
    NotFound { call: String, message: String },
    /// A 409 other than a name in use.
    #[error("{call}: {message}")]
    Conflict { call: String, message: String },
    /// A container of this name exists already (the driver removes a stale one and retries).
    #[error("create container {name:?}: {message}")]
    NameInUse { name: String, message: String },
    /// Any other answer than the call expects, with the engine's message.
    #[error("{call}: {message}")]
    Engine {
        call: String,
        status: u16,
        message: String,
    },
    /// An image pull the engine refused or that failed in its progress stream.
    #[error("Failed to pull `{image}`: {message}")]
    Pull { image: String, message: String },
    #[error(transparent)]
    BadReference(#[from] ReferenceError),
    #[error("{call}: bad answer from the Docker engine: {reason}")]
    BadAnswer { call: String, reason: String },
    #[error("{call}: {source}")]
    Io { call: String, source: io::Error },
}

impl EngineError {
    /// Whether the engine could not be reached or did not answer: the driver is unhealthy then,
    /// rather than the call wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            EngineError::Unreachable { .. } | EngineError::TimedOut { .. }
        )
    }
}

/// A signal for [`Engine::kill`]: a number, or a name as the engine takes it (`SIGTERM`, `TERM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    Number(i32),
    Name(String),
}

impl From<i32> for Signal {
    fn from(n: i32) -> Signal {
        Signal::Number(n)
    }
}

impl From<&str> for Signal {
    fn from(name: &str) -> Signal {
        Signal::Name(name.to_string())
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signal::Number(n) => write!(f, "{n}"),
            Signal::Name(name) => f.write_str(name),
        }
    }
}

/// What [`Engine::kill`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    Signalled,
    /// The container was not running (it had exited, or never started).
    NotRunning,
}

/// A client of one engine, with the API version negotiated. Cheap to clone; see the module doc.
#[derive(Debug, Clone)]
pub struct Engine {
    endpoint: Endpoint,
    api: ApiVersion,
    timeout: Duration,
    version: EngineVersion,
}

/// Query values and path segments: everything but unreserved characters is escaped.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn enc(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

impl Engine {
    /// Connects to the engine at `endpoint` and negotiates the API version, each call within
    /// `timeout` (also the default timeout of later calls).
    pub fn connect(endpoint: Endpoint, timeout: Duration) -> Result<Engine, EngineError> {
        let mut engine = Engine {
            endpoint,
            api: OLDEST_API,
            timeout,
            version: EngineVersion {
                version: String::new(),
                api_version: String::new(),
                min_api_version: None,
                os_type: String::new(),
                arch: String::new(),
                kernel_version: String::new(),
            },
        };
        let ping = engine.ping()?;
        engine.version = engine.get_version()?;
        let newest = ping
            .api_version
            .or_else(|| ApiVersion::parse(&engine.version.api_version));
        let oldest = engine
            .version
            .min_api_version
            .as_deref()
            .and_then(ApiVersion::parse);
        let too_old = || EngineError::TooOld {
            endpoint: engine.endpoint.to_string(),
            version: engine.version.api_version.clone(),
        };
        engine.api = negotiate(newest.ok_or_else(too_old)?, oldest).ok_or_else(too_old)?;
        Ok(engine)
    }

    /// The same engine with another default timeout per call.
    pub fn with_timeout(&self, timeout: Duration) -> Engine {
        Engine {
            timeout,
            ..self.clone()
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The API version every call uses.
    pub fn api_version(&self) -> ApiVersion {
        self.api
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The engine's version as [`Engine::connect`] read it.
    pub fn engine_version(&self) -> &EngineVersion {
        &self.version
    }

    fn send(
        &self,
        method: Method,
        target: String,
        body: Option<Vec<u8>>,
        what: String,
        deadlines: Deadlines,
        closer: Option<&Closer>,
    ) -> Result<Response, EngineError> {
        http::send(
            &self.endpoint,
            Request {
                method,
                target,
                body,
                what,
                deadlines,
                closer,
            },
        )
    }

    /// A call of the negotiated version within the default timeout.
    fn call(&self, method: Method, path: &str, what: String) -> Result<Response, EngineError> {
        let target = format!("/v{}{path}", self.api);
        self.send(
            method,
            target,
            None,
            what,
            Deadlines::whole(self.timeout),
            None,
        )
    }

    /// `GET /_ping`: whether the engine answers (the driver's health check).
    pub fn ping(&self) -> Result<Ping, EngineError> {
        let what = "ping".to_string();
        let mut r = self.send(
            Method::GET,
            "/_ping".into(),
            None,
            what,
            Deadlines::whole(self.timeout),
            None,
        )?;
        let ping = Ping {
            api_version: r.header("api-version").and_then(ApiVersion::parse),
            os_type: r.header("ostype").map(str::to_string),
        };
        expect_success(&mut r, "ping")?;
        Ok(ping)
    }

    /// `GET /version`, fresh (the fingerprint's `driver.docker.version` and `os_type`).
    pub fn version(&self) -> Result<EngineVersion, EngineError> {
        self.get_version()
    }

    fn get_version(&self) -> Result<EngineVersion, EngineError> {
        // Unversioned: it must work before a version is chosen.
        let mut r = self.send(
            Method::GET,
            "/version".into(),
            None,
            "version".into(),
            Deadlines::whole(self.timeout),
            None,
        )?;
        expect_success(&mut r, "version")?;
        Ok(r.body.json::<types::RawVersion>()?.into())
    }

    /// Whether the engine has `image` (`busybox:1`; without a tag, `latest`).
    pub fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        let reference = ImageRef::parse(image)?;
        let what = format!("inspect image {image:?}");
        // The engine's route takes the name with its slashes as they are; a parsed reference has
        // nothing else that needs escaping in a path.
        let path = format!("/images/{reference}/json");
        let mut r = self.call(Method::GET, &path, what.clone())?;
        match classify(&mut r, &what)? {
            Outcome::Success => Ok(true),
            Outcome::NotFound(_) => Ok(false),
        }
    }

    /// Pulls `image` from its registry (`POST /images/create`), within `timeout`. A refusal or a
    /// failure in the progress stream is [`EngineError::Pull`] with the engine's message.
    pub fn pull(&self, image: &str, timeout: Duration, closer: &Closer) -> Result<(), EngineError> {
        let reference = ImageRef::parse(image)?;
        let (name, tag) = reference.pull_params();
        let target = format!(
            "/v{}/images/create?fromImage={}&tag={}",
            self.api,
            enc(name),
            enc(tag)
        );
        let what = format!("pull {image:?}");
        let mut r = self.send(
            Method::POST,
            target,
            None,
            what.clone(),
            Deadlines::whole(timeout),
            Some(closer),
        )?;
        let failed = |message: String| EngineError::Pull {
            image: image.to_string(),
            message,
        };
        if !(200..300).contains(&r.status) {
            return Err(failed(error_message(&mut r)?));
        }
        // Newline-delimited JSON: read it line by line, to the end of the stream.
        let mut pending: Vec<u8> = Vec::new();
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            let n = r.body.read_some(&mut chunk)?;
            pending.extend_from_slice(&chunk[..n]);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                if let Some(message) = progress_error(&line) {
                    return Err(failed(message));
                }
            }
            if n == 0 {
                return match progress_error(&pending) {
                    Some(message) => Err(failed(message)),
                    None => Ok(()),
                };
            }
            if pending.len() > 1 << 20 {
                return Err(r.body.bad("a progress line longer than 1 MiB"));
            }
        }
    }

    /// Creates a container named `name`; answers its ID. A name in use is
    /// [`EngineError::NameInUse`]; an image the engine does not have, [`EngineError::NotFound`].
    pub fn create_container(
        &self,
        name: &str,
        config: &CreateContainer,
    ) -> Result<String, EngineError> {
        let what = format!("create container {name:?}");
        let body = serde_json::to_vec(config).map_err(|e| EngineError::BadAnswer {
            call: what.clone(),
            reason: format!("cannot encode the request: {e}"),
        })?;
        let target = format!("/v{}/containers/create?name={}", self.api, enc(name));
        let mut r = self.send(
            Method::POST,
            target,
            Some(body),
            what.clone(),
            Deadlines::whole(self.timeout),
            None,
        )?;
        if r.status == 409 {
            return Err(EngineError::NameInUse {
                name: name.to_string(),
                message: error_message(&mut r)?,
            });
        }
        match classify(&mut r, &what)? {
            Outcome::Success => Ok(r.body.json::<types::Created>()?.id),
            Outcome::NotFound(message) => Err(EngineError::NotFound {
                call: what,
                message,
            }),
        }
    }

    /// Starts a container; one already running is no error (the engine's 304).
    pub fn start(&self, id: &str) -> Result<(), EngineError> {
        let what = format!("start container {id:?}");
        let mut r = self.call(
            Method::POST,
            &format!("/containers/{}/start", enc(id)),
            what.clone(),
        )?;
        if r.status == 304 {
            return Ok(());
        }
        self.expect_found(&mut r, what)
    }

    /// Sends `signal` to a container's main process. One that is not running is
    /// [`Killed::NotRunning`], not an error.
    pub fn kill(&self, id: &str, signal: impl Into<Signal>) -> Result<Killed, EngineError> {
        let signal = signal.into();
        let what = format!("kill container {id:?} with {signal}");
        let path = format!(
            "/containers/{}/kill?signal={}",
            enc(id),
            enc(&signal.to_string())
        );
        let mut r = self.call(Method::POST, &path, what.clone())?;
        if r.status == 409 {
            let message = error_message(&mut r)?;
            if message.contains("is not running") {
                return Ok(Killed::NotRunning);
            }
            return Err(EngineError::Conflict {
                call: what,
                message,
            });
        }
        self.expect_found(&mut r, what).map(|()| Killed::Signalled)
    }

    /// Removes a container (`force`: a running one too) and its anonymous volumes. One that is
    /// gone, or already being removed, is no error.
    pub fn remove(&self, id: &str, force: bool) -> Result<(), EngineError> {
        let what = format!("remove container {id:?}");
        let path = format!("/containers/{}?v=1&force={}", enc(id), u8::from(force));
        let mut r = self.call(Method::DELETE, &path, what.clone())?;
        if r.status == 409 {
            let message = error_message(&mut r)?;
            if message.contains("already in progress") {
                return Ok(());
            }
            return Err(EngineError::Conflict {
                call: what,
                message,
            });
        }
        match classify(&mut r, &what)? {
            Outcome::Success | Outcome::NotFound(_) => Ok(()),
        }
    }

    /// A container's configuration and state; `None` when there is no such container.
    pub fn inspect(&self, id: &str) -> Result<Option<ContainerInfo>, EngineError> {
        let what = format!("inspect container {id:?}");
        let mut r = self.call(
            Method::GET,
            &format!("/containers/{}/json", enc(id)),
            what.clone(),
        )?;
        match classify(&mut r, &what)? {
            Outcome::Success => {
                let raw: types::RawInspect = r.body.json()?;
                raw.into_info()
                    .map(Some)
                    .map_err(|reason| EngineError::BadAnswer { call: what, reason })
            }
            Outcome::NotFound(_) => Ok(None),
        }
    }

    /// Every container, running or not, with the label `label` (`key`, or `key=value`).
    pub fn list(&self, label: &str) -> Result<Vec<ContainerSummary>, EngineError> {
        #[derive(Serialize)]
        struct Filters<'a> {
            label: [&'a str; 1],
        }
        let what = format!("list containers labelled {label:?}");
        let filters = serde_json::to_string(&Filters { label: [label] }).map_err(|e| {
            EngineError::BadAnswer {
                call: what.clone(),
                reason: format!("cannot encode the filter: {e}"),
            }
        })?;
        let path = format!("/containers/json?all=1&filters={}", enc(&filters));
        let mut r = self.call(Method::GET, &path, what.clone())?;
        self.expect_found(&mut r, what)?;
        let raw: Vec<types::RawSummary> = r.body.json()?;
        Ok(raw.into_iter().map(ContainerSummary::from).collect())
    }

    /// Blocks until the container is not running and answers its exit code: at once for one
    /// that exited already (and 0 for one never started). Its answer's head comes within the
    /// default timeout; then it waits as long as the container runs, until `closer` is closed.
    pub fn wait(&self, id: &str, closer: &Closer) -> Result<i64, EngineError> {
        let what = format!("wait for container {id:?}");
        let condition = if self.api >= WAIT_CONDITION_API {
            "?condition=not-running"
        } else {
            ""
        };
        let target = format!("/v{}/containers/{}/wait{condition}", self.api, enc(id));
        let mut r = self.send(
            Method::POST,
            target,
            None,
            what.clone(),
            Deadlines::head_only(self.timeout),
            Some(closer),
        )?;
        self.expect_found(&mut r, what.clone())?;
        let answer: types::WaitAnswer = r.body.json()?;
        match answer.error {
            Some(e) if !e.message.is_empty() => Err(EngineError::Engine {
                call: what,
                status: r.status,
                message: e.message,
            }),
            _ => Ok(answer.status_code),
        }
    }

    /// A container's stdout and stderr with timestamps, from `since` (nanoseconds since the
    /// epoch, inclusive; `None`: from its first line). Followed (`follow`), the stream ends after
    /// the container exits (not always at the end of its log: see the module doc), or when
    /// `closer` is closed; not followed, at the end of what the engine has.
    pub fn logs(
        &self,
        id: &str,
        since: Option<i64>,
        follow: bool,
        closer: &Closer,
    ) -> Result<LogStream, EngineError> {
        let what = format!("read the logs of container {id:?}");
        let since = since.map_or(String::new(), |s| format!("&since={}", since_param(s)));
        let target = format!(
            "/v{}/containers/{}/logs?follow={}&stdout=1&stderr=1&timestamps=1{since}",
            self.api,
            enc(id),
            u8::from(follow)
        );
        let mut r = self.send(
            Method::GET,
            target,
            None,
            what.clone(),
            Deadlines::head_only(self.timeout),
            Some(closer),
        )?;
        self.expect_found(&mut r, what)?;
        Ok(LogStream::new(r.body))
    }

    /// One resource sample of a container (takes the engine about a second).
    pub fn stats(&self, id: &str) -> Result<ContainerStats, EngineError> {
        let what = format!("stats of container {id:?}");
        let path = format!("/containers/{}/stats?stream=false", enc(id));
        let mut r = self.call(Method::GET, &path, what.clone())?;
        self.expect_found(&mut r, what)?;
        Ok(r.body.json::<types::RawStats>()?.into_stats())
    }

    /// A success, else the error: a 404 is [`EngineError::NotFound`].
    fn expect_found(&self, r: &mut Response, what: String) -> Result<(), EngineError> {
        match classify(r, &what)? {
            Outcome::Success => Ok(()),
            Outcome::NotFound(message) => Err(EngineError::NotFound {
                call: what,
                message,
            }),
        }
    }
}

enum Outcome {
    Success,
    NotFound(String),
}

/// A 2xx is a success and a 404 not found; anything else is an error with the engine's message.
fn classify(r: &mut Response, what: &str) -> Result<Outcome, EngineError> {
    match r.status {
        200..=299 => Ok(Outcome::Success),
        404 => Ok(Outcome::NotFound(error_message(r)?)),
        409 => Err(EngineError::Conflict {
            call: what.to_string(),
            message: error_message(r)?,
        }),
        status => Err(EngineError::Engine {
            call: what.to_string(),
            status,
            message: error_message(r)?,
        }),
    }
}

/// A success, else [`EngineError::Engine`].
fn expect_success(r: &mut Response, what: &str) -> Result<(), EngineError> {
    if (200..300).contains(&r.status) {
        return Ok(());
    }
    Err(EngineError::Engine {
        call: what.to_string(),
        status: r.status,
        message: error_message(r)?,
    })
}

/// The engine's message in an error answer: `{"message": ...}`, or the text of a plain one (the
/// engine answers a version it does not speak in plain text).
fn error_message(r: &mut Response) -> Result<String, EngineError> {
    let bytes = r.body.read_all()?;
    if let Ok(body) = serde_json::from_slice::<types::ErrorBody>(&bytes) {
        return Ok(body.message);
    }
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    Ok(if text.is_empty() {
        format!("status {} with no message", r.status)
    } else {
        text
    })
}

/// The error of one progress line of a pull, if it reports one.
fn progress_error(line: &[u8]) -> Option<String> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let progress: types::Progress = serde_json::from_slice(line).ok()?;
    let detail = progress.error_detail.and_then(|d| d.message);
    progress.error.filter(|e| !e.is_empty()).or(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_line_with_an_error_carries_the_engines_message() {
        assert_eq!(
            progress_error(br#"{"status":"Pulling from library/busybox","id":"1"}"#),
            None
        );
        assert_eq!(
            progress_error(
                br#"{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}"#
            ),
            Some("manifest unknown".into())
        );
        assert_eq!(
            progress_error(br#"{"errorDetail":{"message":"only detail"}}"#),
            Some("only detail".into())
        );
        assert_eq!(progress_error(b"  \r\n"), None);
    }

    #[test]
    fn query_components_are_escaped() {
        assert_eq!(
            enc(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
        assert_eq!(enc("web-1.x_y~"), "web-1.x_y~");
    }

    #[test]
    fn messages_read_well() {
        let e = EngineError::Pull {
            image: "busybox:2".into(),
            message: "manifest unknown".into(),
        };
        assert_eq!(
            e.to_string(),
            "Failed to pull `busybox:2`: manifest unknown"
        );
        let e = EngineError::TimedOut {
            call: "inspect container \"web\"".into(),
            timeout: Duration::from_secs(10),
        };
        assert_eq!(
            e.to_string(),
            "inspect container \"web\": no answer from the Docker engine within 10s"
        );
    }
}
