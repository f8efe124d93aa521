//! `nodeward-csi-test-plugin`: a small hostpath-style CSI plugin for nodeward's tests and demos.
//!
//! One process serves the Identity, Controller and Node services (a monolith) on a unix socket.
//! Volumes are directories under a root directory (`--root`, [`hostpath`]): `CreateVolume` makes
//! one (idempotent by name, the requested capacity recorded and answered), `DeleteVolume` removes
//! it, `NodeStageVolume` bind-mounts it at the staging path (or does nothing with `--stage none`,
//! and then does not advertise `STAGE_UNSTAGE_VOLUME`), `NodePublishVolume` bind-mounts it (from
//! the staging path when staged) at the target path, read-only where asked, and the unpublish and
//! unstage calls unmount. Mounts need root (`CAP_SYS_ADMIN`); without it those calls fail with the
//! kernel's reason.
//!
//! It can also misbehave in the ways real plugins do, chosen by `--mode` (or `CSI_TEST_MODE`):
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
//! | `publish-fails` | healthy, but `NodePublishVolume` answers `Internal` with `--fail-message` |
//!
//! Options: `--endpoint unix:///path/csi.sock` (default: `CSI_ENDPOINT`), `--delay-ms N`
//! (`CSI_TEST_DELAY_MS`, default 1000), `--count-file PATH` (`CSI_TEST_COUNT_FILE`): after every
//! probe the number of probes received so far is written there, so tests can count probers.
//! `--name NAME` sets the provider name (default `nodeward.test.csi`). `--root DIR`
//! (`CSI_TEST_ROOT`): where volumes live; without it every volume call fails with
//! `FailedPrecondition`. `--stage bind|none` (`CSI_TEST_STAGE`, default `bind`). `--fail-message
//! TEXT` (`CSI_TEST_FAIL_MESSAGE`): what `publish-fails` answers.
//!
//! Threads: gRPC's completion-queue thread runs every call (each call is short: a directory or a
//! mount system call); the main thread waits for SIGINT or SIGTERM (a `signals` thread feeds it),
//! which stop it cleanly: the socket file is removed and it exits 0.

mod hostpath;
mod services;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{after, bounded, never, select, Receiver};
use grpcio::{EnvBuilder, ServerBuilder, ServerCredentials};
use nodeward::csi::proto;

use hostpath::{Stage, Volumes};
use services::{Mode, Plugin, Shared};

struct Options {
    mode: Mode,
    socket: PathBuf,
    delay: Duration,
    count_file: Option<PathBuf>,
    name: String,
    root: Option<PathBuf>,
    stage: Stage,
    fail_message: String,
}

fn parse_options() -> Result<Options, String> {
    let env = |name: &str| std::env::var(name).ok();
    let mut mode = env("CSI_TEST_MODE").unwrap_or_else(|| "healthy".into());
    let mut endpoint = env("CSI_ENDPOINT");
    let mut delay_ms = env("CSI_TEST_DELAY_MS");
    let mut count_file = env("CSI_TEST_COUNT_FILE");
    let mut name = "nodeward.test.csi".to_string();
    let mut root = env("CSI_TEST_ROOT");
    let mut stage = env("CSI_TEST_STAGE").unwrap_or_else(|| "bind".into());
    let mut fail_message =
        env("CSI_TEST_FAIL_MESSAGE").unwrap_or_else(|| "publish failed as asked".into());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--mode" => mode = value()?,
            "--endpoint" => endpoint = Some(value()?),
            "--delay-ms" => delay_ms = Some(value()?),
            "--count-file" => count_file = Some(value()?),
            "--name" => name = value()?,
            "--root" => root = Some(value()?),
            "--stage" => stage = value()?,
            "--fail-message" => fail_message = value()?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mode = Mode::parse(&mode).ok_or_else(|| format!("unknown mode {mode:?}"))?;
    let stage = match stage.as_str() {
        "bind" => Stage::Bind,
        "none" => Stage::None,
        other => return Err(format!("unknown --stage {other:?}: want bind or none")),
    };
    let endpoint = endpoint.ok_or("no endpoint: set CSI_ENDPOINT or pass --endpoint")?;
    let socket = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(&endpoint);
    let delay_ms: u64 = match delay_ms {
        Some(d) => d.parse().map_err(|_| format!("bad --delay-ms {d:?}"))?,
        None => 1000,
    };
    let root = match root.filter(|r| !r.is_empty()) {
        Some(r) if !r.starts_with('/') => {
            return Err(format!("--root {r:?} is not an absolute path"))
        }
        r => r.map(PathBuf::from),
    };
    Ok(Options {
        mode,
        socket: PathBuf::from(socket),
        delay: Duration::from_millis(delay_ms),
        count_file: count_file.map(PathBuf::from),
        name,
        root,
        stage,
        fail_message,
    })
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
        "csi-test-plugin: mode {:?}, socket {}, volume root {}",
        opts.mode,
        opts.socket.display(),
        opts.root
            .as_deref()
            .map_or("(none)".into(), |r| r.display().to_string())
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

    let volumes = Volumes::new(opts.root.clone(), opts.stage)?;
    let (healthy_tx, healthy_rx) = bounded(1);
    let plugin = Plugin(Arc::new(Shared::new(
        opts.mode,
        opts.delay,
        opts.name.clone(),
        opts.count_file.clone(),
        healthy_tx,
        volumes,
        opts.fail_message.clone(),
    )));

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
