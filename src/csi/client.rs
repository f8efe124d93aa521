//! A small CSI client over a plugin's unix socket.
//!
//! Every call takes a timeout (the gRPC deadline) and a list of "stop" receivers
//! ([`crate::thread::Never`] channels that signal by disconnecting). The calling thread waits
//! for the reply in a `Select` over a wake-up channel fed by the call's future and the stop
//! receivers, so a supervisor whose task is killed or whose agent shuts down cancels the call in
//! flight and returns at once, instead of sitting out a 5 s probe timeout. No thread is created per
//! call and no async runtime is involved: grpcio's completion-queue thread wakes the caller.
//!
//! All clients share one gRPC [`Environment`] (one completion-queue thread), created on the first
//! [`CsiClient::new`]. An agent that runs no CSI plugin never starts anything gRPC.
//!
//! The calls are one typed method each: the plugin supervisor's Identity and capability calls,
//! and the volume calls of csi-volumes.md (Controller `CreateVolume` ... `ValidateVolumeCapabilities`,
//! Node `NodeStageVolume` ... `NodeGetVolumeStats`). A request that lacks a field the CSI spec
//! requires is refused before anything is sent ([`CsiError::Missing`]), so a bug in the caller
//! reads as such instead of as a plugin's puzzling `InvalidArgument`.
//!
//! Every call first checks that the socket file exists, so a plugin that has not created its socket
//! yet gets the exact, stable message csi.md requires instead of gRPC's connection error (which
//! varies between gRPC versions), and the channel never enters gRPC's reconnect backoff because of a
//! socket that simply is not there yet.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crossbeam_channel::{after, bounded, Receiver, Select, Sender};
use grpcio::{CallOption, ChannelBuilder, ClientUnaryReceiver, EnvBuilder, Environment};

use super::proto;
use crate::thread::Never;

/// The longest any single CSI call may take (csi.md: probes and registration calls use 5 s).
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a volume call may take: creating, attaching or mounting storage may take a cloud
/// provider a while. As long as a host volume plugin's create, and inside the CLI's wait for the
/// agent's answer (90 s), so that a slow plugin's error still reaches the user.
pub const VOLUME_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a probe may take when `left` remains before a deadline: `min(5s, left)`.
pub fn call_timeout(left: Duration) -> Duration {
    left.min(MAX_CALL_TIMEOUT)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsiError {
    /// The socket file is missing or unreadable. The wording is Nomad's (and csi.md's contract).
    #[error("timeout while connecting to gRPC socket: failed to stat socket: stat {}: {reason}", path.display())]
    Socket { path: PathBuf, reason: String },
    /// `Probe` answered `ready = false`.
    #[error("plugin reported not ready")]
    NotReady,
    /// `GetPluginInfo` answered without a name.
    #[error("plugin returned empty name field")]
    EmptyName,
    /// The plugin answered with a gRPC error status, or the call failed in gRPC (deadline, no
    /// connection). Worded the way Go's gRPC prints a status, which CSI plugin authors know.
    #[error("rpc error: code = {code} desc = {message}")]
    Rpc {
        method: &'static str,
        code: StatusCode,
        message: String,
    },
    /// The request lacks a field the CSI spec requires; nothing was sent.
    #[error("{method}: missing {field}")]
    Missing {
        method: &'static str,
        field: &'static str,
    },
    /// The call could not be made or its reply not decoded.
    #[error("{method}: {message}")]
    Call {
        method: &'static str,
        message: String,
    },
    /// A stop receiver disconnected while the call was in flight; the call was cancelled.
    #[error("{method} cancelled: the task or the agent is stopping")]
    Cancelled { method: &'static str },
}

impl CsiError {
    pub fn is_cancelled(&self) -> bool {
        matches!(self, CsiError::Cancelled { .. })
    }

    /// The gRPC status code, when the plugin or gRPC gave one.
    pub fn code(&self) -> Option<StatusCode> {
        match self {
            CsiError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A gRPC status code, printed with Go's names (`Unimplemented`, `DeadlineExceeded`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCode(pub i32);

impl StatusCode {
    pub const CANCELLED: StatusCode = StatusCode(1);
    pub const DEADLINE_EXCEEDED: StatusCode = StatusCode(4);
    pub const UNIMPLEMENTED: StatusCode = StatusCode(12);
    pub const INTERNAL: StatusCode = StatusCode(13);
    pub const UNAVAILABLE: StatusCode = StatusCode(14);
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 17] = [
            "OK",
            "Canceled",
            "Unknown",
            "InvalidArgument",
            "DeadlineExceeded",
            "NotFound",
            "AlreadyExists",
            "PermissionDenied",
            "ResourceExhausted",
            "FailedPrecondition",
            "Aborted",
            "OutOfRange",
            "Unimplemented",
            "Internal",
            "Unavailable",
            "DataLoss",
            "Unauthenticated",
        ];
        match usize::try_from(self.0).ok().and_then(|i| NAMES.get(i)) {
            Some(name) => f.write_str(name),
            None => write!(f, "Code({})", self.0),
        }
    }
}

/// The process-wide gRPC environment, created on first use.
fn environment() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| {
        Arc::new(
            EnvBuilder::new()
                .cq_count(1)
                .name_prefix("csi-grpc")
                .build(),
        )
    })
    .clone()
}

/// A client for one plugin socket. Cheap to keep for a supervisor's lifetime; it connects on the
/// first call and reconnects by itself.
pub struct CsiClient {
    socket: PathBuf,
    identity: proto::IdentityClient,
    node: proto::NodeClient,
    controller: proto::ControllerClient,
}

impl CsiClient {
    /// Prepares a client for `socket`. Nothing is connected until the first call.
    pub fn new(socket: &Path) -> CsiClient {
        let channel = ChannelBuilder::new(environment())
            // Each plugin socket gets its own connection state, so one plugin's failures never
            // delay another's reconnects.
            .use_local_subchannel_pool(true)
            // gRPC's default reconnect backoff grows to 120 s; a plugin that restarts its server
            // within one task run must be seen again within one probe interval.
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(1))
            .connect(&format!("unix:{}", socket.display()));
        CsiClient {
            socket: socket.to_path_buf(),
            identity: proto::IdentityClient::new(channel.clone()),
            node: proto::NodeClient::new(channel.clone()),
            controller: proto::ControllerClient::new(channel),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `Identity.Probe`: `Ok` when the plugin is ready or does not say (`ready` absent),
    /// [`CsiError::NotReady`] when it answers `ready = false`.
    pub fn probe(&self, timeout: Duration, stop: &[&Receiver<Never>]) -> Result<(), CsiError> {
        const METHOD: &str = "Probe";
        self.stat()?;
        let call = self
            .identity
            .probe_async_opt(&proto::ProbeRequest {}, options(timeout));
        let reply = wait(METHOD, call, timeout, stop)?;
        match reply.ready {
            Some(false) => Err(CsiError::NotReady),
            Some(true) | None => Ok(()),
        }
    }

    /// `Identity.GetPluginInfo`; an empty name is [`CsiError::EmptyName`].
    pub fn get_plugin_info(
        &self,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::GetPluginInfoResponse, CsiError> {
        const METHOD: &str = "GetPluginInfo";
        self.stat()?;
        let call = self
            .identity
            .get_plugin_info_async_opt(&proto::GetPluginInfoRequest {}, options(timeout));
        let reply = wait(METHOD, call, timeout, stop)?;
        if reply.name.is_empty() {
            return Err(CsiError::EmptyName);
        }
        Ok(reply)
    }

    pub fn get_plugin_capabilities(
        &self,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::GetPluginCapabilitiesResponse, CsiError> {
        const METHOD: &str = "GetPluginCapabilities";
        self.stat()?;
        let call = self.identity.get_plugin_capabilities_async_opt(
            &proto::GetPluginCapabilitiesRequest {},
            options(timeout),
        );
        wait(METHOD, call, timeout, stop)
    }

    pub fn node_get_info(
        &self,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeGetInfoResponse, CsiError> {
        const METHOD: &str = "NodeGetInfo";
        self.stat()?;
        let call = self
            .node
            .node_get_info_async_opt(&proto::NodeGetInfoRequest {}, options(timeout));
        wait(METHOD, call, timeout, stop)
    }

    pub fn node_get_capabilities(
        &self,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeGetCapabilitiesResponse, CsiError> {
        const METHOD: &str = "NodeGetCapabilities";
        self.stat()?;
        let call = self.node.node_get_capabilities_async_opt(
            &proto::NodeGetCapabilitiesRequest {},
            options(timeout),
        );
        wait(METHOD, call, timeout, stop)
    }

    pub fn controller_get_capabilities(
        &self,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::ControllerGetCapabilitiesResponse, CsiError> {
        const METHOD: &str = "ControllerGetCapabilities";
        self.stat()?;
        let call = self.controller.controller_get_capabilities_async_opt(
            &proto::ControllerGetCapabilitiesRequest {},
            options(timeout),
        );
        wait(METHOD, call, timeout, stop)
    }

    // ---- Controller: volumes ------------------------------------------------------------

    /// `Controller.CreateVolume`; the answer must name the volume the plugin made.
    pub fn create_volume(
        &self,
        req: &proto::CreateVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::CreateVolumeResponse, CsiError> {
        const METHOD: &str = "CreateVolume";
        require(METHOD, "name", !req.name.is_empty())?;
        require(
            METHOD,
            "volume_capabilities",
            !req.volume_capabilities.is_empty(),
        )?;
        let reply = self.call(METHOD, timeout, stop, |o| {
            self.controller.create_volume_async_opt(req, o)
        })?;
        if reply.volume.as_ref().is_none_or(|v| v.volume_id.is_empty()) {
            return Err(CsiError::Call {
                method: METHOD,
                message: "the plugin answered without a volume ID".into(),
            });
        }
        Ok(reply)
    }

    pub fn delete_volume(
        &self,
        req: &proto::DeleteVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::DeleteVolumeResponse, CsiError> {
        const METHOD: &str = "DeleteVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        self.call(METHOD, timeout, stop, |o| {
            self.controller.delete_volume_async_opt(req, o)
        })
    }

    pub fn controller_publish_volume(
        &self,
        req: &proto::ControllerPublishVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::ControllerPublishVolumeResponse, CsiError> {
        const METHOD: &str = "ControllerPublishVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(METHOD, "node_id", !req.node_id.is_empty())?;
        require(METHOD, "volume_capability", req.volume_capability.is_some())?;
        self.call(METHOD, timeout, stop, |o| {
            self.controller.controller_publish_volume_async_opt(req, o)
        })
    }

    pub fn controller_unpublish_volume(
        &self,
        req: &proto::ControllerUnpublishVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::ControllerUnpublishVolumeResponse, CsiError> {
        const METHOD: &str = "ControllerUnpublishVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        self.call(METHOD, timeout, stop, |o| {
            self.controller
                .controller_unpublish_volume_async_opt(req, o)
        })
    }

    /// `Controller.ValidateVolumeCapabilities`: the answer's `confirmed` is absent when the
    /// plugin does not confirm them (its `message` may say why); that is an answer, not an error.
    pub fn validate_volume_capabilities(
        &self,
        req: &proto::ValidateVolumeCapabilitiesRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::ValidateVolumeCapabilitiesResponse, CsiError> {
        const METHOD: &str = "ValidateVolumeCapabilities";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(
            METHOD,
            "volume_capabilities",
            !req.volume_capabilities.is_empty(),
        )?;
        self.call(METHOD, timeout, stop, |o| {
            self.controller
                .validate_volume_capabilities_async_opt(req, o)
        })
    }

    // ---- Node: volumes ------------------------------------------------------------------

    pub fn node_stage_volume(
        &self,
        req: &proto::NodeStageVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeStageVolumeResponse, CsiError> {
        const METHOD: &str = "NodeStageVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(
            METHOD,
            "staging_target_path",
            !req.staging_target_path.is_empty(),
        )?;
        require(METHOD, "volume_capability", req.volume_capability.is_some())?;
        self.call(METHOD, timeout, stop, |o| {
            self.node.node_stage_volume_async_opt(req, o)
        })
    }

    pub fn node_unstage_volume(
        &self,
        req: &proto::NodeUnstageVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeUnstageVolumeResponse, CsiError> {
        const METHOD: &str = "NodeUnstageVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(
            METHOD,
            "staging_target_path",
            !req.staging_target_path.is_empty(),
        )?;
        self.call(METHOD, timeout, stop, |o| {
            self.node.node_unstage_volume_async_opt(req, o)
        })
    }

    pub fn node_publish_volume(
        &self,
        req: &proto::NodePublishVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodePublishVolumeResponse, CsiError> {
        const METHOD: &str = "NodePublishVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(METHOD, "target_path", !req.target_path.is_empty())?;
        require(METHOD, "volume_capability", req.volume_capability.is_some())?;
        self.call(METHOD, timeout, stop, |o| {
            self.node.node_publish_volume_async_opt(req, o)
        })
    }

    pub fn node_unpublish_volume(
        &self,
        req: &proto::NodeUnpublishVolumeRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeUnpublishVolumeResponse, CsiError> {
        const METHOD: &str = "NodeUnpublishVolume";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(METHOD, "target_path", !req.target_path.is_empty())?;
        self.call(METHOD, timeout, stop, |o| {
            self.node.node_unpublish_volume_async_opt(req, o)
        })
    }

    pub fn node_get_volume_stats(
        &self,
        req: &proto::NodeGetVolumeStatsRequest,
        timeout: Duration,
        stop: &[&Receiver<Never>],
    ) -> Result<proto::NodeGetVolumeStatsResponse, CsiError> {
        const METHOD: &str = "NodeGetVolumeStats";
        require(METHOD, "volume_id", !req.volume_id.is_empty())?;
        require(METHOD, "volume_path", !req.volume_path.is_empty())?;
        self.call(METHOD, timeout, stop, |o| {
            self.node.node_get_volume_stats_async_opt(req, o)
        })
    }

    /// Checks the socket, starts the call with `timeout` as its gRPC deadline and waits for it.
    fn call<T: Unpin>(
        &self,
        method: &'static str,
        timeout: Duration,
        stop: &[&Receiver<Never>],
        start: impl FnOnce(CallOption) -> grpcio::Result<ClientUnaryReceiver<T>>,
    ) -> Result<T, CsiError> {
        self.stat()?;
        wait(method, start(options(timeout)), timeout, stop)
    }

    fn stat(&self) -> Result<(), CsiError> {
        std::fs::metadata(&self.socket)
            .map(|_| ())
            .map_err(|e| CsiError::Socket {
                path: self.socket.clone(),
                reason: os_error_text(&e),
            })
    }
}

/// [`CsiError::Missing`] unless `present`.
fn require(method: &'static str, field: &'static str, present: bool) -> Result<(), CsiError> {
    if present {
        Ok(())
    } else {
        Err(CsiError::Missing { method, field })
    }
}

fn options(timeout: Duration) -> CallOption {
    CallOption::default().timeout(timeout)
}

/// The OS's description of an error in lower case, as Go prints it (`no such file or directory`).
fn os_error_text(e: &io::Error) -> String {
    let text = e.to_string();
    // Rust appends " (os error N)" to the OS's text; Go does not.
    let text = match (e.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(at)) => text[..at].to_string(),
        _ => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// Wakes the waiting thread when the call's future can make progress.
struct ChannelWaker(Sender<()>);

impl Wake for ChannelWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // A full channel already holds a pending wake-up; one is enough.
        let _ = self.0.try_send(());
    }
}

/// Waits for `call`'s reply, cancelling it when any of `stop` disconnects.
///
/// gRPC enforces `timeout` itself; the extra second of grace here only guards against a reply that
/// never wakes the waiter, so no thread can be wedged even by a bug in this shell.
fn wait<T: Unpin>(
    method: &'static str,
    call: grpcio::Result<ClientUnaryReceiver<T>>,
    timeout: Duration,
    stop: &[&Receiver<Never>],
) -> Result<T, CsiError> {
    let mut call = call.map_err(|e| grpc_error(method, e))?;
    let (wake_tx, wake_rx) = bounded(1);
    let waker = Waker::from(Arc::new(ChannelWaker(wake_tx)));
    let mut cx = Context::from_waker(&waker);
    let give_up = after(timeout + Duration::from_secs(1));
    loop {
        if let Poll::Ready(result) = Pin::new(&mut call).poll(&mut cx) {
            return result.map_err(|e| grpc_error(method, e));
        }
        let mut select = Select::new();
        let woken = select.recv(&wake_rx);
        let expired = select.recv(&give_up);
        for s in stop {
            select.recv(s);
        }
        let op = select.select();
        match op.index() {
            i if i == woken => {
                let _ = op.recv(&wake_rx);
            }
            i if i == expired => {
                let _ = op.recv(&give_up);
                call.cancel();
                return Err(CsiError::Rpc {
                    method,
                    code: StatusCode::DEADLINE_EXCEEDED,
                    message: "Deadline Exceeded".into(),
                });
            }
            i => {
                let _ = op.recv(stop[i - 2]);
                call.cancel();
                return Err(CsiError::Cancelled { method });
            }
        }
    }
}

fn grpc_error(method: &'static str, e: grpcio::Error) -> CsiError {
    match e {
        grpcio::Error::RpcFailure(status) => CsiError::Rpc {
            method,
            code: StatusCode(status.code().into()),
            message: status.message().to_string(),
        },
        other => CsiError::Call {
            method,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_timeout_is_capped_at_five_seconds() {
        assert_eq!(call_timeout(Duration::from_secs(30)), MAX_CALL_TIMEOUT);
        assert_eq!(
            call_timeout(Duration::from_millis(1200)),
            Duration::from_millis(1200)
        );
        assert_eq!(call_timeout(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn missing_socket_reads_like_nomad() {
        let path = std::env::temp_dir().join("nodeward-csi-no-such-dir/csi.sock");
        let client = CsiClient::new(&path);
        let err = client.probe(Duration::from_secs(1), &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "timeout while connecting to gRPC socket: failed to stat socket: stat {}: no such file or directory",
                path.display()
            )
        );
    }

    #[test]
    fn status_codes_print_go_names() {
        let e = CsiError::Rpc {
            method: "Probe",
            code: StatusCode::UNIMPLEMENTED,
            message: "unknown service csi.v1.Identity".into(),
        };
        assert_eq!(
            e.to_string(),
            "rpc error: code = Unimplemented desc = unknown service csi.v1.Identity"
        );
        assert_eq!(StatusCode(99).to_string(), "Code(99)");
        assert_eq!(
            StatusCode::DEADLINE_EXCEEDED.to_string(),
            "DeadlineExceeded"
        );
    }

    /// A request without a field the spec requires is refused before the socket is even looked
    /// at: no plugin is needed to see it.
    #[test]
    fn incomplete_requests_are_refused_before_sending() {
        let client = CsiClient::new(Path::new("/nonexistent/nodeward-csi/csi.sock"));
        let t = Duration::from_secs(1);
        let err = client
            .create_volume(&proto::CreateVolumeRequest::default(), t, &[])
            .unwrap_err();
        assert_eq!(err.to_string(), "CreateVolume: missing name");
        let err = client
            .node_publish_volume(
                &proto::NodePublishVolumeRequest {
                    volume_id: "v".into(),
                    target_path: "/t".into(),
                    ..Default::default()
                },
                t,
                &[],
            )
            .unwrap_err();
        assert_eq!(
            err,
            CsiError::Missing {
                method: "NodePublishVolume",
                field: "volume_capability"
            }
        );
        let err = client
            .node_unstage_volume(
                &proto::NodeUnstageVolumeRequest {
                    volume_id: "v".into(),
                    ..Default::default()
                },
                t,
                &[],
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "NodeUnstageVolume: missing staging_target_path"
        );
        // A complete request gets as far as the socket.
        let err = client
            .delete_volume(
                &proto::DeleteVolumeRequest {
                    volume_id: "v".into(),
                    ..Default::default()
                },
                t,
                &[],
            )
            .unwrap_err();
        assert!(matches!(err, CsiError::Socket { .. }), "{err}");
    }

    /// A stale socket file (nothing listening) fails fast and readably instead of waiting out the
    /// whole timeout.
    #[test]
    fn stale_socket_is_unavailable() {
        let dir = std::env::temp_dir().join(format!("nodeward-csi-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("csi.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let err = CsiClient::new(&path)
            .probe(Duration::from_secs(2), &[])
            .unwrap_err();
        assert_eq!(err.code(), Some(StatusCode::UNAVAILABLE), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
