//! Task hooks: the extension points of the task lifecycle.
//!
//! The task runner ([`super::runner`]) calls every hook of a task at these points:
//!
//! ```text
//!  prestart ──► start ──► Started ──► poststart ──► (run) ──► exited ──► restart decision ─┐
//!     ▲                                                                                      │
//!     └──────────────────────────────── restart after the delay ◄────────────────────────────┘
//!                                                 stop: once, when the task will not run again
//! ```
//!
//! Guarantees a hook can rely on:
//! - `prestart` runs before every start, on the runner thread; it may add environment variables.
//!   It answers notes on what it had to repair (a link a task put where nodeward keeps a directory
//!   of its own), each a `Task Setup` event. An error is a `Setup Failure` event and the task
//!   fails without running. It may block (a template waiting for its data): every wait goes
//!   through its [`Interrupt`], which a kill of the task or the agent's shutdown ends at once;
//!   it then answers [`HookError::interrupted`], and the task ends killed (kill) or is left
//!   `pending` to start with the next agent (shutdown), never failed.
//! - `poststart` runs after every successful start with a [`RunHandle`] for that run. Long work
//!   (the CSI supervisor) goes on a thread of the hook's own; it must end when
//!   [`RunHandle::done`] or [`RunHandle::shutdown`] disconnects. Through the handle it may ask
//!   the runner to record an event, restart the run, or signal the task (a template's
//!   `change_mode = "signal"`).
//! - `exited` runs after every run ends, before the restart decision, after `done` disconnected.
//! - `stop` runs exactly once, when the task is dead for good or the agent shuts down.

use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::jobspec::{Job, Task};
use crate::task::events::TaskEvent;
use crate::thread::Never;
use crate::util::allocdir;

/// What a hook knows about its task. Fixed for the task's lifetime.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub alloc_id: String,
    /// The allocation's index in its group and its name (`<job>.<group>[<index>]`).
    pub alloc_index: u32,
    pub alloc_name: String,
    pub job: Arc<Job>,
    pub group: String,
    pub task: Task,
    /// `<data_dir>/alloc/<alloc_id>` ([`allocdir::alloc_dir`]).
    pub alloc_dir: PathBuf,
    /// `<alloc_dir>/<task>` ([`allocdir::task_dir`]).
    pub task_dir: PathBuf,
    pub data_dir: PathBuf,
    pub node_id: String,
    pub node_name: String,
    /// The node when the task starts: `${node.*}`, `${attr.*}` and the agent's `client { meta }`.
    pub node: Arc<NodeVars>,
    /// The host ports of the allocation (its group's `network` block), given at placement.
    pub ports: Vec<crate::jobspec::network::AllocatedPort>,
    /// The CPUs the task holds for its `resources { cores }`, given at placement; empty when it
    /// asks for none.
    pub cores: Vec<u32>,
}

/// What a task's jobspec reads of the node when the task starts (`${node.*}`, `${attr.*}`).
#[derive(Debug, Clone, Default)]
pub struct NodeVars {
    pub datacenter: String,
    pub node_class: String,
    pub node_pool: String,
    /// The node's attributes, as constraints see them.
    pub attributes: BTreeMap<String, String>,
    /// The agent's `client { meta }`.
    pub meta: BTreeMap<String, String>,
}

impl TaskContext {
    /// `<alloc_dir>/alloc`, shared by the allocation's tasks (`NOMAD_ALLOC_DIR`).
    pub fn shared_dir(&self) -> PathBuf {
        allocdir::shared_dir(&self.alloc_dir)
    }

    /// `<alloc_dir>/alloc/logs`, where the task's stdout and stderr files rotate.
    pub fn log_dir(&self) -> PathBuf {
        allocdir::log_dir(&self.alloc_dir)
    }

    /// `<task_dir>/local` (`NOMAD_TASK_DIR`).
    pub fn local_dir(&self) -> PathBuf {
        allocdir::local_dir(&self.task_dir)
    }

    /// `<task_dir>/secrets` (`NOMAD_SECRETS_DIR`).
    pub fn secrets_dir(&self) -> PathBuf {
        allocdir::secrets_dir(&self.task_dir)
    }
}

/// Why a hook failed; shown as the `Setup Failure` message, and as `<hook>: <message>` in the
/// `Task hook failed` event before it (Nomad's `emitHookError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    pub message: String,
    /// The name the event gives the failed hook when it is not the hook's own
    /// ([`TaskHook::name`]): a part of a hook that is a hook of its own in Nomad
    /// (`dispatch_payload`, written by the task directory's hook).
    pub hook: Option<&'static str>,
    /// A blocking prestart gave up because its [`Interrupt`] fired: no failure of the task.
    interrupted: bool,
}

impl HookError {
    pub fn new(message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
            hook: None,
            interrupted: false,
        }
    }

    /// What a blocking prestart answers once its [`Interrupt`] fired ([`Awaited::Interrupted`]).
    pub fn interrupted() -> HookError {
        HookError {
            message: "interrupted by a stop of the task or the agent".to_string(),
            hook: None,
            interrupted: true,
        }
    }

    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// The same failure, named as Nomad's hook `hook` in the `Task hook failed` event.
    pub fn in_hook(mut self, hook: &'static str) -> HookError {
        self.hook = Some(hook);
        self
    }

    /// The name of the hook that failed, for the `Task hook failed` event: `own`, the failing
    /// hook's [`TaskHook::name`], unless the error names another.
    pub fn hook_name(&self, own: &'static str) -> &'static str {
        self.hook.unwrap_or(own)
    }
}

/// What a blocking prestart waits with: it fires when the task is killed or the agent shuts
/// down, so that no prestart holds a stop up.
#[derive(Clone)]
pub struct Interrupt {
    killed: Receiver<Never>,
    shutdown: Receiver<Never>,
}

/// How an [`Interrupt::wait`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Awaited<T> {
    /// The awaited channel yielded this value.
    Ready(T),
    /// Every sender of the awaited channel is gone.
    Closed,
    /// The timeout passed first.
    TimedOut,
    /// The task was killed or the agent shuts down: answer [`HookError::interrupted`].
    Interrupted,
}

impl Interrupt {
    /// Fires when either channel disconnects: the task's kill and the agent's shutdown.
    pub fn new(killed: Receiver<Never>, shutdown: Receiver<Never>) -> Interrupt {
        Interrupt { killed, shutdown }
    }

    /// One that never fires: for a prestart called outside a task runner (a test of a hook).
    pub fn never() -> Interrupt {
        Interrupt::new(crossbeam_channel::never(), crossbeam_channel::never())
    }

    /// Whether it fired.
    pub fn fired(&self) -> bool {
        use crossbeam_channel::TryRecvError::Disconnected;
        matches!(self.killed.try_recv(), Err(Disconnected))
            || matches!(self.shutdown.try_recv(), Err(Disconnected))
    }

    /// Waits for `awaited` to yield, at most `timeout` (`None`: as long as it takes), unless it
    /// fires first; it is looked at first, so a wait that begins after a stop never blocks.
    pub fn wait<T>(&self, awaited: &Receiver<T>, timeout: Option<Duration>) -> Awaited<T> {
        if self.fired() {
            return Awaited::Interrupted;
        }
        let deadline = match timeout {
            Some(t) => crossbeam_channel::after(t),
            None => crossbeam_channel::never(),
        };
        crossbeam_channel::select! {
            recv(awaited) -> v => match v {
                Ok(v) => Awaited::Ready(v),
                Err(_) => Awaited::Closed,
            },
            recv(deadline) -> _ => Awaited::TimedOut,
            recv(self.killed) -> _ => Awaited::Interrupted,
            recv(self.shutdown) -> _ => Awaited::Interrupted,
        }
    }

    /// Sleeps `delay` unless it fires first; `false` when it fired.
    pub fn sleep(&self, delay: Duration) -> bool {
        let never = crossbeam_channel::never::<()>();
        self.wait(&never, Some(delay)) == Awaited::TimedOut
    }
}

pub trait TaskHook: Send + Sync {
    fn name(&self) -> &'static str;

    /// Before every start. May add to the task's environment; answers what it repaired, for the
    /// task's events. May block, waiting only through `stop` (see the module doc).
    fn prestart(
        &self,
        _task: &TaskContext,
        _env: &mut BTreeMap<String, String>,
        _stop: &Interrupt,
    ) -> Result<Vec<String>, HookError> {
        Ok(Vec::new())
    }

    /// After prestart, for a task in a container: the host paths to bind into it (a host
    /// volume's `volume_mount`).
    fn container_binds(&self, _task: &TaskContext) -> Result<Vec<crate::driver::Bind>, HookError> {
        Ok(Vec::new())
    }

    /// After every successful start.
    fn poststart(&self, _task: &TaskContext, _run: RunHandle) {}

    /// After every run ends, before the restart decision.
    fn exited(&self, _task: &TaskContext) {}

    /// Once, when the task will not run again (dead, or the agent shuts down).
    fn stop(&self, _task: &TaskContext) {}
}

/// What every hook binds into a task's container ([`TaskHook::container_binds`]); a failure
/// comes with the name of the hook that failed.
pub fn container_binds(
    hooks: &[Arc<dyn TaskHook>],
    task: &TaskContext,
) -> Result<Vec<crate::driver::Bind>, (&'static str, HookError)> {
    let mut binds = Vec::new();
    for hook in hooks {
        binds.extend(
            hook.container_binds(task)
                .map_err(|e| (e.hook_name(hook.name()), e))?,
        );
    }
    Ok(binds)
}

/// A request from a hook to the task runner.
#[derive(Debug)]
pub enum HookRequest {
    /// Restart the run `run_id` (ignored if that run already ended or is being killed): record
    /// `events` first, then stop the process; `failure` restarts count against the policy.
    Restart {
        run_id: u64,
        events: Vec<TaskEvent>,
        failure: bool,
    },
    /// Record an event now, if `run_id` is still the current run and not being killed.
    Emit { run_id: u64, event: Box<TaskEvent> },
    /// Send `signal` (its number; `name` as the event shows it) to the run `run_id`, with a
    /// `Signaling` event giving `reason`, as an operator's `alloc signal` does; dropped if that
    /// run is over or being killed.
    Signal {
        run_id: u64,
        signal: i32,
        name: String,
        reason: String,
    },
}

/// One run of a task, as seen by a hook's background work.
#[derive(Clone)]
pub struct RunHandle {
    run_id: u64,
    done: Receiver<Never>,
    shutdown: Receiver<Never>,
    requests: Sender<HookRequest>,
    /// The run was started by an earlier agent and re-attached to (live-restore.md).
    reattached: bool,
}

impl RunHandle {
    pub fn new(
        run_id: u64,
        done: Receiver<Never>,
        shutdown: Receiver<Never>,
        requests: Sender<HookRequest>,
    ) -> RunHandle {
        RunHandle {
            run_id,
            done,
            shutdown,
            requests,
            reattached: false,
        }
    }

    /// Marks a run that an earlier agent started: a hook must not treat it as a fresh start (the
    /// CSI supervisor probes at once and applies no health deadline).
    pub fn reattached(mut self, yes: bool) -> RunHandle {
        self.reattached = yes;
        self
    }

    pub fn is_reattached(&self) -> bool {
        self.reattached
    }

    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// Disconnects when this run ends or a kill of the task begins. Use it in `select!`.
    pub fn done(&self) -> &Receiver<Never> {
        &self.done
    }

    /// Disconnects when the agent shuts down.
    pub fn shutdown(&self) -> &Receiver<Never> {
        &self.shutdown
    }

    /// True once the run ended, a kill began, or the agent shuts down.
    pub fn is_over(&self) -> bool {
        use crossbeam_channel::TryRecvError::Disconnected;
        matches!(self.done.try_recv(), Err(Disconnected))
            || matches!(self.shutdown.try_recv(), Err(Disconnected))
    }

    /// Records `event` on the task, unless the run is over by the time the runner sees it.
    pub fn emit(&self, event: TaskEvent) {
        let _ = self.requests.send(HookRequest::Emit {
            run_id: self.run_id,
            event: Box::new(event),
        });
    }

    /// Asks the runner to send `signal` (named `name`) to this run, recording a `Signaling`
    /// event with `reason`. Dropped if the run is over or a kill began.
    pub fn signal(&self, signal: i32, name: &str, reason: &str) {
        let _ = self.requests.send(HookRequest::Signal {
            run_id: self.run_id,
            signal,
            name: name.to_string(),
            reason: reason.to_string(),
        });
    }

    /// Asks the runner to restart this run after recording `events`. The runner drops the request
    /// if the run is over or a kill began, so a kill never races into a restart.
    pub fn restart(&self, events: Vec<TaskEvent>, failure: bool) {
        let _ = self.requests.send(HookRequest::Restart {
            run_id: self.run_id,
            events,
            failure,
        });
    }
}

/// Builds the hooks of one task. The agent's factory knows the volume manager and the CSI registry.
pub trait HookFactory: Send + Sync {
    fn hooks_for(&self, task: &TaskContext) -> Vec<Arc<dyn TaskHook>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, unbounded};

    /// An interrupt and the senders whose drop fires it: the task's kill, the agent's shutdown.
    fn interrupt() -> (Interrupt, Sender<Never>, Sender<Never>) {
        let (kill, killed) = bounded::<Never>(0);
        let (stop, shutdown) = bounded::<Never>(0);
        (Interrupt::new(killed, shutdown), kill, stop)
    }

    #[test]
    fn a_wait_answers_the_value_the_close_or_the_timeout() {
        let (stop, _kill, _shutdown) = interrupt();
        let (tx, rx) = unbounded();
        tx.send(7).unwrap();
        assert_eq!(stop.wait(&rx, None), Awaited::Ready(7));
        let long = Some(Duration::from_secs(600));
        let (tx, rx) = unbounded::<u32>();
        drop(tx);
        assert_eq!(stop.wait(&rx, long), Awaited::Closed);
        // Nothing can arrive: the timeout is the only way out, however long the machine takes.
        let (_tx, rx) = unbounded::<u32>();
        assert_eq!(stop.wait(&rx, Some(Duration::ZERO)), Awaited::TimedOut);
        assert!(stop.sleep(Duration::ZERO));
        assert!(!stop.fired());
    }

    #[test]
    fn a_kill_or_a_shutdown_ends_a_wait_that_nothing_else_would() {
        let (_tx, rx) = unbounded::<u32>();
        for which in ["kill", "shutdown"] {
            let (stop, kill, shutdown) = interrupt();
            let waiter = {
                let (stop, rx) = (stop.clone(), rx.clone());
                std::thread::spawn(move || stop.wait(&rx, None))
            };
            if which == "kill" {
                drop(kill);
            } else {
                drop(shutdown);
            }
            assert_eq!(waiter.join().unwrap(), Awaited::Interrupted, "{which}");
            assert!(stop.fired(), "{which}");
            // Once fired, a new wait or sleep returns at once.
            assert_eq!(stop.wait(&rx, None), Awaited::Interrupted, "{which}");
            assert!(!stop.sleep(Duration::from_secs(600)), "{which}");
        }
    }

    #[test]
    fn an_interrupted_error_is_told_apart_from_a_failure() {
        assert!(HookError::interrupted().is_interrupted());
        assert!(!HookError::new("boom").is_interrupted());
        assert!(!Interrupt::never().fired());
    }
}
