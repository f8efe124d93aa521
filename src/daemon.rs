//! The agent process: [`run`] installs the signal handlers and logging, starts the [`Agent`],
//! serves the API and waits for a stop signal; [`tune_allocator`] runs before anything else.
//!
//! Threads and how they stop:
//! - the main thread runs [`run`]: it starts everything, then waits on the signal channel;
//! - one signal thread (signal-hook) forwards SIGINT/SIGTERM/SIGHUP to the main thread; a second
//!   SIGINT/SIGTERM during shutdown exits the process at once. A first SIGINT/SIGTERM that arrives
//!   while the agent is still starting (stopping leftovers, restoring volumes through slow
//!   plugins) trips the [`StopSwitch`] itself, so the start-up is cancelled at once: restores in
//!   flight end, restored allocations are not started, the API never opens. [`run`] joins it
//!   before it returns.
//!
//! Shutdown order: stop taking API writes, [`Agent::shutdown`], stop the API, exit 0.
//!
//! At start [`run`] raises the soft limit on open files to the hard one, before anything opens a
//! file or starts the keeper (which inherits it).

use crossbeam_channel::bounded;

use crate::agent::{Agent, AgentError};
use crate::config::AgentConfig;
use crate::state::DataDirLock;
use crate::thread::StopSwitch;
use crate::util::logging::init_logging;
use crate::util::systemd;

/// Marks the agent process started again by [`tune_allocator`]; holds the caller's own
/// `GLIBC_TUNABLES` (empty when it had none), restored before any task inherits the environment.
const REEXEC_MARK: &str = "NODEWARD_ORIGINAL_GLIBC_TUNABLES";

/// glibc's malloc suits a few busy threads; the agent runs two mostly idle threads per task. Each
/// thread's cache of freed blocks (tcache) and a spread over up to eight arenas per core kept
/// about 14 KB per task of freed memory out of reach (measured: 1000 tasks, heap 34 MB -> 19 MB).
/// glibc reads these tunables only when a process starts, so the agent starts itself once more
/// with them set (same PID, arguments and environment), then puts the environment back as it
/// was, so tasks never see the tunables.
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    {
        use std::os::unix::process::CommandExt;
        const TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2";
        if let Some(original) = std::env::var_os(REEXEC_MARK) {
            // Second start: the tunables are in force; restore what the caller had.
            std::env::remove_var(REEXEC_MARK);
            if original.is_empty() {
                std::env::remove_var("GLIBC_TUNABLES");
            } else {
                std::env::set_var("GLIBC_TUNABLES", original);
            }
            return;
        }
        let original = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
        let mut tunables = original.clone();
        if !tunables.is_empty() {
            tunables.push(":");
        }
        tunables.push(TUNABLES);
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_default();
        // The executable's real path, not /proc/self/exe: the kernel names the process after the
        // file it executes, and operators find the agent as `nodeward` (pgrep, ps -C), not `exe`.
        // exec only returns on failure; the agent then runs with glibc's defaults.
        let exe = std::env::current_exe()
            .ok()
            .filter(|p| p.exists())
            .unwrap_or_else(|| "/proc/self/exe".into());
        let err = std::process::Command::new(exe)
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .env(REEXEC_MARK, original)
            .exec();
        eprintln!("note: running with default malloc settings ({err})");
    }
}

/// Raises the soft limit on open files to the hard limit. Every task holds several descriptors in
/// the agent and the keeper (pipes, a pidfd, its log files), and every API connection one: the
/// usual soft limit of 1024 ran out at a few hundred tasks, and the API stopped accepting
/// connections. The hard limit is the operator's (systemd: `LimitNOFILE=` in the unit); the keeper
/// and the tasks inherit the raised limit, as under Nomad.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        let e = std::io::Error::last_os_error();
        log::warn!("cannot read the open files limit: {e}");
        return;
    }
    if lim.rlim_cur >= lim.rlim_max {
        log::debug!("open files limit: {}", lim.rlim_cur);
        return;
    }
    let soft = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one rlimit we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        let e = std::io::Error::last_os_error();
        log::warn!(
            "cannot raise the open files limit from {soft} to {}: {e}",
            lim.rlim_max
        );
        return;
    }
    log::debug!("open files limit raised from {soft} to {}", lim.rlim_max);
    crate::driver::process::set_child_nofile(libc::rlimit {
        rlim_cur: soft,
        rlim_max: lim.rlim_max,
    });
}

/// Runs the agent until SIGINT or SIGTERM. Returns once the shutdown is complete.
pub fn run(config: AgentConfig, fresh_state: bool) -> Result<(), AgentError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    init_logging(&config.log_level);
    raise_open_files_limit();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| AgentError::Start(format!("cannot install signal handlers: {e}")))?;
    let (sig_tx, sig_rx) = bounded::<i32>(16);
    let signal_handle = signals.handle();
    let stop = StopSwitch::default();
    let signal_stop = stop.clone();
    let signal_thread = crate::thread::spawn("signals", move || {
        let mut stopping = false;
        for sig in signals.forever() {
            if sig != SIGHUP {
                if stopping {
                    eprintln!("second signal received: exiting at once");
                    std::process::exit(1);
                }
                stopping = true;
                if signal_stop.trip_if_starting() {
                    log::warn!("signal {sig} received while starting: cancelling the start-up");
                }
            }
            let _ = sig_tx.send(sig);
        }
    })
    .map_err(|e| AgentError::Start(format!("cannot start the signal thread: {e}")))?;

    if config.dev {
        log::info!("dev mode: data in {}", config.data_dir.display());
    }
    // Everything that can fail comes before a task is adopted or started: the data directory's
    // lock (a second agent touches nothing), the API's port, then the state file (Agent::start).
    let lock = DataDirLock::acquire(&config.data_dir)?;
    let listener = crate::api::bind(&config).map_err(|e| AgentError::Start(e.to_string()))?;
    let mut config = config;
    // The port the API listens on (`ports { http = 0 }` lets the kernel choose it), which no
    // allocation may be given (alloc::ports).
    if let Ok(addr) = listener.local_addr() {
        config.http_port = addr.port();
    }
    let agent = Agent::start(config, fresh_state, stop.clone(), lock)?;
    if !stop.mark_started() {
        log::info!("start-up cancelled by a stop signal");
        agent.shutdown();
        signal_handle.close();
        signal_thread.join();
        return Ok(());
    }
    let api =
        crate::api::serve(agent.clone(), listener).map_err(|e| AgentError::Start(e.to_string()))?;
    log::info!(
        "nodeward agent started: node {} ({}), API on http://{}",
        agent.node_id,
        agent.config.name,
        api.local_addr()
    );
    systemd::notify("READY=1");
    for sig in sig_rx.iter() {
        if sig == SIGHUP {
            agent.reload();
            continue;
        }
        log::info!("received signal {sig}");
        break;
    }
    api.stop_writes();
    agent.shutdown();
    api.stop();
    signal_handle.close();
    signal_thread.join();
    if agent.config.throwaway_data_dir {
        // Throw-away, as Nomad's dev mode: its tasks were stopped, its data goes with it.
        // Unmounts what is still mounted inside first, so no volume's data goes with it.
        match crate::util::mounts::remove_tree(&agent.config.data_dir) {
            Ok(()) => log::info!("dev mode: removed {}", agent.config.data_dir.display()),
            Err(e) => log::warn!(
                "dev mode: cannot remove {}: {e}",
                agent.config.data_dir.display()
            ),
        }
    }
    Ok(())
}
