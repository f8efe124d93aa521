//! `nodeward-csi-test-plugin`: a CSI plugin for nodeward's tests and demos.
//!
//! It serves the CSI subset nodeward uses (Identity, Node, Controller) on a unix socket and can
//! misbehave in the ways real plugins do, chosen by `--mode` (or `CSI_TEST_MODE`):
//!
//! | mode | behaviour |
//! |---|---|
//! | `healthy` | `Probe` answers `ready = true` (the default) |
//! | `ready-absent` | `Probe` answers without `ready` |
//! | `not-ready` | `Probe` answers `ready = false` |
//! | `socket-after-delay` | creates the socket only after `--delay-ms`, then healthy |
//! | `never-socket` | never creates a socket; sleeps until stopped |
//! | `wrong-service` | the socket serves no CSI service: every call is `Unimplemented` |
//! | `info-fails` | `GetPluginInfo` answers `Internal` |
//! | `empty-name` | `GetPluginInfo` answers an empty name |
//! | `crash-after-healthy` | exits with status 1 `--delay-ms` after its first healthy probe |
//! | `flap` | ready and not ready in turn, each for `--delay-ms` |
//! | `hang` | accepts calls but never answers `Probe` |
//!
//! Options: `--endpoint unix:///path/csi.sock` (default: `CSI_ENDPOINT`), `--delay-ms N`
//! (`CSI_TEST_DELAY_MS`, default 1000), `--count-file PATH` (`CSI_TEST_COUNT_FILE`): after every
//! probe the number of probes received so far is written there, so tests can count probers.
//! `--name NAME` sets the provider name (default `nodeward.test.csi`).
//!
//! SIGINT and SIGTERM stop it cleanly: the socket file is removed and it exits 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, never, select, Receiver, Sender};
use grpcio::{
    EnvBuilder, RpcContext, RpcStatus, RpcStatusCode, ServerBuilder, ServerCredentials, UnarySink,
};
use nodeward::csi::proto::{self, controller_service_capability, node_service_capability};
use nodeward::csi::proto::{plugin_capability, Topology};
use parking_lot::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Healthy,
    ReadyAbsent,
    NotReady,
    SocketAfterDelay,
    NeverSocket,
    WrongService,
    InfoFails,
    EmptyName,
    CrashAfterHealthy,
    Flap,
    Hang,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "healthy" => Mode::Healthy,
            "ready-absent" => Mode::ReadyAbsent,
            "not-ready" => Mode::NotReady,
            "socket-after-delay" => Mode::SocketAfterDelay,
            "never-socket" => Mode::NeverSocket,
            "wrong-service" => Mode::WrongService,
            "info-fails" => Mode::InfoFails,
            "empty-name" => Mode::EmptyName,
            "crash-after-healthy" => Mode::CrashAfterHealthy,
            "flap" => Mode::Flap,
            "hang" => Mode::Hang,
            _ => return None,
        })
    }
}

struct Options {
    mode: Mode,
    socket: PathBuf,
    delay: Duration,
    count_file: Option<PathBuf>,
    name: String,
}

fn parse_options() -> Result<Options, String> {
    let mut mode = std::env::var("CSI_TEST_MODE").unwrap_or_else(|_| "healthy".into());
    let mut endpoint = std::env::var("CSI_ENDPOINT").ok();
    let mut delay_ms = std::env::var("CSI_TEST_DELAY_MS").ok();
    let mut count_file = std::env::var("CSI_TEST_COUNT_FILE").ok();
    let mut name = "nodeward.test.csi".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--mode" => mode = value()?,
            "--endpoint" => endpoint = Some(value()?),
            "--delay-ms" => delay_ms = Some(value()?),
            "--count-file" => count_file = Some(value()?),
            "--name" => name = value()?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mode = Mode::parse(&mode).ok_or_else(|| format!("unknown mode {mode:?}"))?;
    let endpoint = endpoint.ok_or("no endpoint: set CSI_ENDPOINT or pass --endpoint")?;
    let socket = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(&endpoint);
    let delay_ms: u64 = match delay_ms {
        Some(d) => d.parse().map_err(|_| format!("bad --delay-ms {d:?}"))?,
        None => 1000,
    };
    Ok(Options {
        mode,
        socket: PathBuf::from(socket),
        delay: Duration::from_millis(delay_ms),
        count_file: count_file.map(PathBuf::from),
        name,
    })
}

/// What every service instance shares.
struct Shared {
    mode: Mode,
    delay: Duration,
    name: String,
    started: Instant,
    probes: AtomicU64,
    count_file: Option<PathBuf>,
    /// Signalled once, on the first probe answered `ready = true` (crash-after-healthy).
    healthy: Sender<()>,
    /// Guards the replies `hang` mode holds back forever.
    hung: Mutex<Vec<UnarySink<proto::ProbeResponse>>>,
}

impl Shared {
    fn count_probe(&self) {
        let n = self.probes.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(path) = &self.count_file {
            // Write and rename so a reader never sees a half-written number.
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, n.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    }

    fn ready(&self) -> Option<bool> {
        match self.mode {
            Mode::ReadyAbsent => None,
            Mode::NotReady => Some(false),
            Mode::Flap => {
                let period = self.delay.as_millis().max(1);
                Some((self.started.elapsed().as_millis() / period) % 2 == 0)
            }
            _ => Some(true),
        }
    }
}

#[derive(Clone)]
struct Plugin(Arc<Shared>);

fn reply<T: Send + 'static>(ctx: &RpcContext, sink: UnarySink<T>, msg: T) {
    let f = sink.success(msg);
    ctx.spawn(async move {
        let _ = f.await;
    });
}

impl proto::Identity for Plugin {
    fn get_plugin_info(
        &mut self,
        ctx: RpcContext,
        _req: proto::GetPluginInfoRequest,
        sink: UnarySink<proto::GetPluginInfoResponse>,
    ) {
        if self.0.mode == Mode::InfoFails {
            let status = RpcStatus::with_message(
                RpcStatusCode::INTERNAL,
                "plugin info unavailable".to_string(),
            );
            let f = sink.fail(status);
            ctx.spawn(async move {
                let _ = f.await;
            });
            return;
        }
        let name = if self.0.mode == Mode::EmptyName {
            String::new()
        } else {
            self.0.name.clone()
        };
        let mut manifest = std::collections::BTreeMap::new();
        manifest.insert("url".to_string(), "https://example.invalid/csi".to_string());
        reply(
            &ctx,
            sink,
            proto::GetPluginInfoResponse {
                name,
                vendor_version: "1.2.3".into(),
                manifest,
            },
        );
    }

    fn get_plugin_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::GetPluginCapabilitiesRequest,
        sink: UnarySink<proto::GetPluginCapabilitiesResponse>,
    ) {
        use plugin_capability::{service, volume_expansion, Service, Type, VolumeExpansion};
        let service = |t: service::Type| proto::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        let capabilities = vec![
            service(service::Type::ControllerService),
            service(service::Type::VolumeAccessibilityConstraints),
            proto::PluginCapability {
                r#type: Some(Type::VolumeExpansion(VolumeExpansion {
                    r#type: volume_expansion::Type::Online as i32,
                })),
            },
        ];
        reply(
            &ctx,
            sink,
            proto::GetPluginCapabilitiesResponse { capabilities },
        );
    }

    fn probe(
        &mut self,
        ctx: RpcContext,
        _req: proto::ProbeRequest,
        sink: UnarySink<proto::ProbeResponse>,
    ) {
        self.0.count_probe();
        if self.0.mode == Mode::Hang {
            // Keep the call open and never answer: the caller's deadline must end it.
            self.0.hung.lock().push(sink);
            return;
        }
        let ready = self.0.ready();
        if ready == Some(true) {
            let _ = self.0.healthy.try_send(());
        }
        reply(&ctx, sink, proto::ProbeResponse { ready });
    }
}

impl proto::Node for Plugin {
    fn node_get_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::NodeGetCapabilitiesRequest,
        sink: UnarySink<proto::NodeGetCapabilitiesResponse>,
    ) {
        use node_service_capability::{rpc, Rpc, Type};
        let capabilities = [
            rpc::Type::StageUnstageVolume,
            rpc::Type::GetVolumeStats,
            rpc::Type::ExpandVolume,
        ]
        .into_iter()
        .map(|t| proto::NodeServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        })
        .collect();
        reply(
            &ctx,
            sink,
            proto::NodeGetCapabilitiesResponse { capabilities },
        );
    }

    fn node_get_info(
        &mut self,
        ctx: RpcContext,
        _req: proto::NodeGetInfoRequest,
        sink: UnarySink<proto::NodeGetInfoResponse>,
    ) {
        let mut segments = std::collections::BTreeMap::new();
        segments.insert(
            "topology.nodeward.test/node".to_string(),
            "test-node-1".to_string(),
        );
        reply(
            &ctx,
            sink,
            proto::NodeGetInfoResponse {
                node_id: "test-node-1".into(),
                max_volumes_per_node: 16,
                accessible_topology: Some(Topology { segments }),
            },
        );
    }
}

impl proto::Controller for Plugin {
    fn controller_get_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::ControllerGetCapabilitiesRequest,
        sink: UnarySink<proto::ControllerGetCapabilitiesResponse>,
    ) {
        use controller_service_capability::{rpc, Rpc, Type};
        let capabilities = [
            rpc::Type::CreateDeleteVolume,
            rpc::Type::PublishUnpublishVolume,
            rpc::Type::ListVolumes,
            rpc::Type::ExpandVolume,
        ]
        .into_iter()
        .map(|t| proto::ControllerServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        })
        .collect();
        reply(
            &ctx,
            sink,
            proto::ControllerGetCapabilitiesResponse { capabilities },
        );
    }
}

/// Disconnects when SIGINT or SIGTERM arrives.
fn quit_signal() -> Result<Receiver<()>, String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let (tx, rx) = bounded::<()>(0);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                drop(tx);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(rx)
}

/// Waits up to `d`; false when a stop signal came first.
fn sleep_unless_quit(quit: &Receiver<()>, d: Duration) -> bool {
    select! {
        recv(quit) -> _ => false,
        recv(after(d)) -> _ => true,
    }
}

fn remove_socket(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => eprintln!("csi-test-plugin: cannot remove {}: {e}", path.display()),
    }
}

fn run(opts: Options) -> Result<ExitCode, String> {
    let quit = quit_signal()?;
    eprintln!(
        "csi-test-plugin: mode {:?}, socket {}",
        opts.mode,
        opts.socket.display()
    );
    match opts.mode {
        Mode::NeverSocket => {
            let _ = quit.recv();
            return Ok(ExitCode::SUCCESS);
        }
        Mode::SocketAfterDelay if !sleep_unless_quit(&quit, opts.delay) => {
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }

    let (healthy_tx, healthy_rx) = bounded(1);
    let shared = Arc::new(Shared {
        mode: opts.mode,
        delay: opts.delay,
        name: opts.name.clone(),
        started: Instant::now(),
        probes: AtomicU64::new(0),
        count_file: opts.count_file.clone(),
        healthy: healthy_tx,
        hung: Mutex::new(Vec::new()),
    });
    let plugin = Plugin(shared);

    // A stale socket from an earlier run would make binding fail.
    remove_socket(&opts.socket);
    let env = Arc::new(
        EnvBuilder::new()
            .cq_count(1)
            .name_prefix("plugin-grpc")
            .build(),
    );
    let mut builder = ServerBuilder::new(env);
    if opts.mode != Mode::WrongService {
        builder = builder
            .register_service(proto::create_identity(plugin.clone()))
            .register_service(proto::create_node(plugin.clone()))
            .register_service(proto::create_controller(plugin.clone()));
    }
    let mut server = builder
        .build()
        .map_err(|e| format!("cannot build the gRPC server: {e}"))?;
    server
        .add_listening_port(
            format!("unix:{}", opts.socket.display()),
            ServerCredentials::insecure(),
        )
        .map_err(|e| format!("cannot listen on {}: {e}", opts.socket.display()))?;
    server.start();
    eprintln!("csi-test-plugin: listening");

    let crash = opts.mode == Mode::CrashAfterHealthy;
    let mut healthy_rx = if crash { healthy_rx } else { never() };
    let mut crash_at = never();
    loop {
        select! {
            recv(quit) -> _ => break,
            recv(healthy_rx) -> _ => {
                // Only the first healthy probe starts the countdown.
                healthy_rx = never();
                crash_at = after(opts.delay);
            }
            recv(crash_at) -> _ => {
                eprintln!("csi-test-plugin: crashing as asked");
                // No cleanup and no graceful server shutdown: a crashed plugin leaves its
                // socket file behind and drops its connections.
                std::process::exit(1);
            }
        }
    }
    eprintln!("csi-test-plugin: stopping");
    remove_socket(&opts.socket);
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let opts = match parse_options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("csi-test-plugin: {e}");
            return ExitCode::from(2);
        }
    };
    match run(opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("csi-test-plugin: {e}");
            ExitCode::from(1)
        }
    }
}
