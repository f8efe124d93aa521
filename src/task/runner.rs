//! The task runner: one OS thread per task that runs it, restarts it and records its events.
//!
//! Protocol:
//! - Commands ([`TaskCommand`]: kill, restart, signal) arrive on the runner's command channel from
//!   the API. Dropping every sender of that channel counts as a kill.
//! - Hooks' background work (the CSI supervisor) sends [`HookRequest`]s (an event, a restart, a
//!   signal) tagged with the run they belong to; a request for a run that is over, or that
//!   arrives once a kill began, is dropped.
//! - A prestart hook that blocks waits through an [`Interrupt`] made of the task's kill and the
//!   agent's shutdown: a kill then ends the task killed, a shutdown leaves it `pending`.
//! - The driver (see [`crate::driver`]) sends one exit status per run on the [`RunningTask`]'s exit
//!   channel; the runner hands each finished run back to [`Driver::destroy`].
//! - The agent's shutdown channel disconnects when the agent stops: the runner leaves the task
//!   running (its state `running`, its handle recorded) for the next agent to re-attach to, or,
//!   with `stop_tasks_on_shutdown` (always with `-dev`), stops it with its kill signal and
//!   timeout and leaves it `pending`; it runs the stop hooks and returns.
//! - Restored from the state file, a runner first re-attaches (`TaskRunner::reattach`,
//!   live-restore.md): to its running task, to the end of a run that exited while no agent
//!   watched, to a restart delay in progress, or it reports the task lost.
//!
//! Every wait is a `select!` over the awaited thing, the command channel, the hook channel and the
//! shutdown channel, so nothing blocks beyond a kill or a shutdown. *Kill* (the task ends for good)
//! and *shutdown* (the agent ends) are kept apart.

use crossbeam_channel::{after, bounded, select, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::{self, Driver, Drivers, RunningTask, TaskExit};
use crate::jobspec::lifecycle::Hook;
use crate::state::StateStore;
use crate::task::events::{
    nanos_rfc3339, now_nanos, now_rfc3339, TaskEvent, TaskState, TaskStatus,
};
use crate::task::hooks::{HookRequest, RunHandle, TaskContext, TaskHook};
use crate::task::restart::{Decision, RestartTracker, RunEnd};
use crate::thread::{Never, Worker};
use crate::util::short_id;

mod kill;
mod reattach;
mod start;
pub use reattach::Pickup;
use reattach::Resume;
use start::NotStarted;

/// A command from the API to a task.
#[derive(Debug, Clone)]
pub enum TaskCommand {
    /// Stop the task for good (alloc stop, job stop, a leader's end). `group_delay_ends`: a
    /// stop of the allocation waits its group's `shutdown_delay` once, until this wall-clock time
    /// (unix nanoseconds), before any task's own delay; `None` for a kill that is not an
    /// allocation's stop (a leader's or the main tasks' end), which waits the task's own only.
    Kill { group_delay_ends: Option<i64> },
    /// A user's `alloc restart`: restart at once, not counted by the policy.
    Restart,
    /// Send a signal to the task's process group.
    Signal { signal: i32, name: String },
}

/// What every runner shares.
#[derive(Clone)]
pub struct RunnerDeps {
    /// The node's drivers; each runner uses the one its task names.
    pub drivers: Drivers,
    pub store: Arc<StateStore>,
    /// Disconnects when the agent shuts down.
    pub shutdown: Receiver<Never>,
    /// Stop tasks when the agent shuts down (`agent -dev`, `client { stop_tasks_on_shutdown }`);
    /// otherwise they run on and the next agent re-attaches to them.
    pub stop_tasks_on_shutdown: bool,
    /// The agent's variables every task gets ([`crate::task::env`], `task_env_passthrough`).
    pub task_env: Arc<BTreeMap<String, String>>,
    /// Pinged (never blocking: bounded, `try_send`) after each change of the task's state, for
    /// the allocation that orders its tasks (`alloc::lifecycle`); `None` when none listens.
    pub changed: Option<Sender<()>>,
}

impl RunnerDeps {
    /// Tells whoever orders the allocation's tasks that a task's state changed.
    fn ping(&self) {
        if let Some(changed) = &self.changed {
            let _ = changed.try_send(());
        }
    }
}

/// The owner's side of a running task runner.
pub struct TaskRunnerHandle {
    commands: Sender<TaskCommand>,
    /// Dropped at the first kill (or with the handle): cancels a start in progress (a pull).
    kill: Mutex<Option<Sender<Never>>>,
    join: Option<Worker<()>>,
}

impl TaskRunnerHandle {
    pub fn send(&self, cmd: TaskCommand) {
        if matches!(cmd, TaskCommand::Kill { .. }) {
            self.kill.lock().take();
        }
        let _ = self.commands.send(cmd);
    }

    /// Waits for the runner thread to end.
    pub fn join(&mut self) {
        if let Some(j) = self.join.take() {
            j.join();
        }
    }

    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }
}

/// Starts the runner thread of one task, picked up as `pickup` says.
pub fn spawn(
    ctx: TaskContext,
    hooks: Vec<Arc<dyn TaskHook>>,
    state: Arc<Mutex<TaskState>>,
    deps: RunnerDeps,
    pickup: Pickup,
) -> std::io::Result<TaskRunnerHandle> {
    let (commands, command_rx) = unbounded();
    let (kill, killed) = bounded::<Never>(0);
    let (hook_tx, hook_rx) = unbounded();
    // Nomad's rule: a task that exits 0 is restarted only in a service or system job, and a
    // lifecycle task only when it is a prestart or poststart sidecar, whatever its job's type.
    let restart_on_success = match ctx.task.lifecycle {
        None => !ctx.job.job_type.runs_to_completion(),
        Some(l) => l.sidecar && l.hook != Hook::Poststop,
    };
    let mut tracker = RestartTracker::new(ctx.task.restart_policy, !restart_on_success);
    {
        let s = state.lock();
        let start = s
            .restart_window_start
            .map(|n| Duration::from_nanos(n.max(0) as u64));
        tracker.restore(start, s.restart_window_count);
    }
    let driver = deps.drivers.for_task(&ctx.task.driver);
    let runner = TaskRunner {
        driver,
        tracker,
        ctx,
        hooks,
        state,
        deps,
        commands: command_rx,
        killed,
        hook_tx,
        hook_rx,
        run_id: 0,
        ended: None,
    };
    let name = format!(
        "task-{}-{}",
        short_id(&runner.ctx.alloc_id),
        runner.ctx.task.name
    );
    let (state, deps) = (runner.state.clone(), runner.deps.clone());
    let join = crate::thread::spawn_guarded(
        name,
        move || runner.run(pickup),
        move |msg| {
            runner_failed(&state, &deps.store, msg);
            deps.ping();
        },
    )?;
    Ok(TaskRunnerHandle {
        commands,
        kill: Mutex::new(Some(kill)),
        join: Some(join),
    })
}

/// A runner thread panicked: nothing supervises its task any more. Its process group (when the
/// recorded PID is still that process) is killed, and the task is shown `dead` and failed with a
/// `Runner Failure` event, so it never looks `running` while nobody watches it.
fn runner_failed(state: &Mutex<TaskState>, store: &StateStore, msg: &str) {
    let pid = {
        let s = state.lock();
        s.pid.zip(s.pid_start_ticks)
    };
    if let Some((pid, ticks)) = pid {
        if driver::same_process_alive(pid, ticks) {
            let never = crossbeam_channel::never();
            driver::stop_foreign_group(pid, ticks, libc::SIGKILL, Duration::ZERO, &never);
        }
    }
    {
        let mut s = state.lock();
        s.state = TaskStatus::Dead;
        s.pid = None;
        s.pid_start_ticks = None;
        s.handle = None;
        s.finished_at = Some(now_rfc3339());
        s.push(TaskEvent::runner_failure(now_nanos(), msg));
    }
    store.save_soon();
}

struct TaskRunner {
    ctx: TaskContext,
    /// The driver the task names.
    driver: Arc<dyn Driver>,
    hooks: Vec<Arc<dyn TaskHook>>,
    /// Shared with the allocation registry, which the API reads.
    state: Arc<Mutex<TaskState>>,
    deps: RunnerDeps,
    commands: Receiver<TaskCommand>,
    /// Disconnects at the task's first kill.
    killed: Receiver<Never>,
    hook_tx: Sender<HookRequest>,
    hook_rx: Receiver<HookRequest>,
    tracker: RestartTracker,
    run_id: u64,
    /// The run that ended last, not yet handed back to the driver: a restart at once hands it
    /// back with the next start ([`Driver::restart`]), so that releasing it costs nothing between
    /// a crash and the restarted process; every other way on releases it at once (a restart
    /// delay, `run_stop_hooks`, and `Drop`).
    ended: Option<RunningTask>,
}

impl Drop for TaskRunner {
    fn drop(&mut self) {
        self.release_ended();
    }
}

/// How the wait for a running process ended.
enum Waited {
    Ended(RunEnd, TaskExit),
    /// The agent is shutting down and stops its tasks; the process was stopped.
    Shutdown(TaskExit),
    /// The agent is shutting down and leaves the task running for the next agent.
    Detached,
}

/// How the runner came to a run it watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attach {
    /// It started the run.
    Started,
    /// An earlier agent started it and recorded it: re-attached by its handle.
    Recorded,
    /// An earlier agent started it but crashed before recording it: found by its name.
    Adopted,
}

/// The wall clock as time since the Unix epoch: the restart tracker's time base, which the state
/// file keeps across agent restarts.
fn wall_clock() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// How a restart delay ended.
enum Slept {
    Elapsed,
    Killed,
    Shutdown,
}

impl TaskRunner {
    fn update(&self, f: impl FnOnce(&mut TaskState)) {
        f(&mut self.state.lock());
        self.deps.store.save_soon();
        self.deps.ping();
    }

    fn emit(&self, event: TaskEvent) {
        self.update(|s| s.push(event));
    }

    fn run(mut self, pickup: Pickup) {
        let mut resume = if pickup == Pickup::New {
            self.emit(TaskEvent::received(now_nanos()));
            self.emit(TaskEvent::task_setup(now_nanos()));
            Resume::Start
        } else {
            self.reattach()
        };
        // A task of a stopped allocation starts no run once the agent restarted (see `Pickup`).
        let no_new_run = pickup == Pickup::RestoredStopping;
        if no_new_run && matches!(resume, Resume::Start | Resume::Delay(_)) {
            log::info!(
                "task {} of alloc {}: not started again, its allocation is stopped",
                self.ctx.task.name,
                self.ctx.alloc_id
            );
            return self.finish_killed();
        }
        // Between runs a kill is seen by the restart delay; before the first run, here (a
        // re-attached run sees it in its watch).
        let picked_up = matches!(resume, Resume::Running(..) | Resume::Shutdown);
        if !picked_up && self.killed_before_start() {
            return self.finish_killed();
        }
        loop {
            let (end, exit) = match std::mem::replace(&mut resume, Resume::Start) {
                Resume::Running(task, how) => match self.supervise(task, how) {
                    Waited::Ended(end, exit) => (end, Some(exit)),
                    Waited::Shutdown(exit) => return self.shut_down(exit),
                    Waited::Detached => return self.run_stop_hooks(),
                },
                Resume::Ended(end, exit) => (end, Some(exit)),
                Resume::Shutdown => return self.run_stop_hooks(),
                Resume::Delay(left) => {
                    match self.sleep(left) {
                        Slept::Elapsed => {}
                        Slept::Killed => return self.finish_killed(),
                        Slept::Shutdown => return self.run_stop_hooks(),
                    }
                    self.count_restart();
                    continue;
                }
                Resume::Start => match self.start_run() {
                    Ok(task) => match self.supervise(task, Attach::Started) {
                        Waited::Ended(end, exit) => (end, Some(exit)),
                        Waited::Shutdown(exit) => return self.shut_down(exit),
                        Waited::Detached => return self.run_stop_hooks(),
                    },
                    Err(NotStarted::Driver(end)) => (end, None),
                    Err(NotStarted::HookFailed) => return self.finish_dead(false),
                    Err(NotStarted::Killed) => return self.finish_killed(),
                    // Left `pending`: the next agent starts it.
                    Err(NotStarted::Shutdown) => return self.run_stop_hooks(),
                },
            };
            if let Some(exit) = exit {
                self.record_exit(&exit);
            }
            let decision = self.tracker.decide(end, wall_clock(), fastrand::f64());
            let (window_start, count) = self.tracker.window();
            self.update(|s| {
                s.restart_window_start = window_start.map(|d| d.as_nanos() as i64);
                s.restart_window_count = count;
            });
            match decision {
                Decision::Killed => return self.finish_killed(),
                // The allocation is being stopped: whether its policy would restart it or not,
                // the task ended on the stop (the kill came while no agent ran), as without a
                // restart it would have been killed.
                Decision::Restart { .. } | Decision::NotRestarting { .. } if no_new_run => {
                    return self.finish_killed()
                }
                Decision::NotRestarting { reason } => {
                    self.emit(TaskEvent::not_restarting(now_nanos(), &reason));
                    return self.finish_dead(true);
                }
                Decision::Complete { reason } => {
                    log::info!(
                        "task {} of alloc {} complete: {reason}",
                        self.ctx.task.name,
                        self.ctx.alloc_id
                    );
                    return self.finish_dead(false);
                }
                Decision::Restart { delay, reason } => {
                    if !delay.is_zero() {
                        // Only a restart at once takes the ended run along; otherwise the keeper
                        // would keep it, and its PID in its requests' names, for the delay.
                        self.release_ended();
                    }
                    self.emit(TaskEvent::restarting(now_nanos(), delay, &reason));
                    let at = now_nanos().saturating_add(delay.as_nanos() as i64);
                    self.update(|s| {
                        s.state = TaskStatus::Pending;
                        s.restart_at = Some(at);
                    });
                    match self.sleep(delay) {
                        Slept::Elapsed => {}
                        Slept::Killed => return self.finish_killed(),
                        // The deadline stays recorded: the next agent waits out the rest.
                        Slept::Shutdown => return self.run_stop_hooks(),
                    }
                    self.count_restart();
                }
            }
        }
    }

    /// A restart delay ended: the next run counts as a restart.
    fn count_restart(&self) {
        self.update(|s| {
            s.restarts += 1;
            s.last_restart = Some(now_rfc3339());
            s.restart_at = None;
        });
    }

    /// The `Terminated` event of a run, at the time the task really ended.
    fn record_exit(&self, exit: &TaskExit) {
        let (at, event) = TaskEvent::terminated_by(exit, now_nanos());
        self.emit(event);
        self.update(|s| s.finished_at = Some(nanos_rfc3339(at)));
    }

    /// The agent shut down and stopped the task (`agent -dev`, `stop_tasks_on_shutdown`): it is
    /// left `pending`, to start again with the next agent.
    fn shut_down(&mut self, exit: TaskExit) {
        self.record_exit(&exit);
        self.update(|s| {
            s.state = TaskStatus::Pending;
            s.pid = None;
            s.pid_start_ticks = None;
            s.handle = None;
        });
        self.run_stop_hooks()
    }

    /// A kill that arrived before the first start (or between runs) ends the task without running it.
    fn killed_before_start(&self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(TaskCommand::Kill { .. }) => return true,
                Ok(_) => continue,
                Err(crossbeam_channel::TryRecvError::Empty) => return false,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return true,
            }
        }
    }

    /// Runs one started (or re-attached) task until it exits, is killed or restarted, or the
    /// agent shuts down. A run that ended is kept for the next start to hand back to the driver
    /// (the keeper drains what is left of its output on its own); one stopped by the shutdown is
    /// handed back at once; one left running for the next agent is not.
    fn supervise(&mut self, task: RunningTask, how: Attach) -> Waited {
        let waited = self.watch(&task, how);
        match waited {
            Waited::Ended(..) => self.ended = Some(task),
            Waited::Shutdown(_) => self.driver.destroy(task),
            Waited::Detached => {}
        }
        waited
    }

    /// Hands the run that ended last back to the driver, when no start did.
    fn release_ended(&mut self) {
        if let Some(task) = self.ended.take() {
            self.driver.destroy(task);
        }
    }

    fn watch(&mut self, process: &RunningTask, how: Attach) -> Waited {
        self.run_id += 1;
        let run_id = self.run_id;
        let handle = process.handle().clone();
        let pid = handle.pid();
        // An adopted run: the agent that started it crashed before its start reached the state
        // file. Its start is recorded now, at the time the process really started.
        let started = match how {
            Attach::Recorded => None,
            // A process just started: now. A container: its own start time, as for an adopted run.
            Attach::Started if process.handle().container_id().is_none() => Some(now_nanos()),
            _ => Some(process.started_nanos().unwrap_or_else(now_nanos)),
        };
        self.update(|s| {
            s.state = TaskStatus::Running;
            if let Some(at) = started {
                s.started_at = Some(nanos_rfc3339(at));
            }
            s.finished_at = None;
            s.pid = pid.map(|(pid, _)| pid);
            s.pid_start_ticks = pid.map(|(_, ticks)| ticks);
            s.handle = Some(handle);
        });
        if let Some(at) = started {
            if how == Attach::Adopted && self.state.lock().events.is_empty() {
                self.emit(TaskEvent::received(at));
                self.emit(TaskEvent::task_setup(at));
            }
            self.emit(TaskEvent::started(at));
        }
        let reattached = how != Attach::Started;
        // Hooks' background work watches `done`: dropping `done_tx` tells it the run is over.
        let (done_tx, done_rx) = bounded::<Never>(0);
        let handle = RunHandle::new(
            run_id,
            done_rx,
            self.deps.shutdown.clone(),
            self.hook_tx.clone(),
        )
        .reattached(reattached);
        for hook in &self.hooks {
            hook.poststart(&self.ctx, handle.clone());
        }
        drop(handle);
        let mut done_tx = Some(done_tx);
        let task = &self.ctx.task;
        let kill_signal = task.kill_signal.number();
        let waited = loop {
            select! {
                recv(process.exited()) -> exit => {
                    let exit = exit.unwrap_or(TaskExit::Unknown);
                    break Waited::Ended(RunEnd::Exited { success: exit.success() }, exit);
                }
                recv(self.commands) -> cmd => match cmd {
                    Ok(TaskCommand::Signal { signal, name }) => {
                        self.emit(TaskEvent::signaling(now_nanos(), &name, ""));
                        if let Err(e) = self.driver.signal(process, signal) {
                            log::warn!("cannot signal task {}: {e}", task.name);
                        }
                    }
                    Ok(TaskCommand::Restart) => {
                        done_tx = None;
                        self.emit(TaskEvent::restart_signaled(now_nanos(), ""));
                        let exit = self.stop_process(process, kill_signal);
                        break Waited::Ended(RunEnd::UserRestart, exit);
                    }
                    cmd @ (Ok(TaskCommand::Kill { .. }) | Err(_)) => {
                        done_tx = None;
                        self.emit(TaskEvent::killing(now_nanos(), task.kill_timeout));
                        let group_delay_ends = match cmd {
                            Ok(TaskCommand::Kill { group_delay_ends }) => group_delay_ends,
                            _ => None,
                        };
                        if let Some(exit) = self.shutdown_delay(process, group_delay_ends) {
                            break Waited::Ended(RunEnd::Killed, exit);
                        }
                        let exit = self.stop_process(process, kill_signal);
                        break Waited::Ended(RunEnd::Killed, exit);
                    }
                },
                recv(self.hook_rx) -> req => match req {
                    Ok(HookRequest::Emit { run_id: r, event }) if r == run_id => self.emit(*event),
                    Ok(HookRequest::Signal { run_id: r, signal, name, reason }) if r == run_id => {
                        self.emit(TaskEvent::signaling(now_nanos(), &name, &reason));
                        if let Err(e) = self.driver.signal(process, signal) {
                            log::warn!("cannot signal task {}: {e}", task.name);
                        }
                    }
                    Ok(HookRequest::Restart { run_id: r, events, failure }) if r == run_id => {
                        done_tx = None;
                        for e in events {
                            self.emit(e);
                        }
                        let exit = self.stop_process(process, kill_signal);
                        let end = if failure { RunEnd::FailureRestart } else { RunEnd::UserRestart };
                        break Waited::Ended(end, exit);
                    }
                    _ => {}
                },
                recv(self.deps.shutdown) -> _ => {
                    done_tx = None;
                    if !self.deps.stop_tasks_on_shutdown {
                        break Waited::Detached;
                    }
                    let exit = self.stop_process(process, kill_signal);
                    break Waited::Shutdown(exit);
                }
            }
        };
        drop(done_tx);
        if matches!(waited, Waited::Detached) {
            // The task runs on; its state (running, its handle) is what the next agent resumes.
            return waited;
        }
        self.update(|s| {
            s.finished_at = Some(now_rfc3339());
            s.pid = None;
            s.pid_start_ticks = None;
            s.handle = None;
        });
        for hook in &self.hooks {
            hook.exited(&self.ctx);
        }
        waited
    }

    /// Sends the kill signal to the task, waits `kill_timeout`, then kills it for good.
    fn stop_process(&self, task: &RunningTask, signal: i32) -> TaskExit {
        match self.driver.stop(task, signal, self.ctx.task.kill_timeout) {
            Ok(exit) => exit,
            Err(e) => {
                log::error!("task {}: {e}", self.ctx.task.name);
                TaskExit::Unknown
            }
        }
    }

    /// Sleeps the restart delay; a kill ends the task at once, a user restart skips the delay.
    fn sleep(&self, delay: Duration) -> Slept {
        let timer = if delay.is_zero() {
            crossbeam_channel::at(Instant::now())
        } else {
            after(delay)
        };
        loop {
            select! {
                recv(timer) -> _ => return Slept::Elapsed,
                recv(self.commands) -> cmd => match cmd {
                    Ok(TaskCommand::Kill { .. }) | Err(_) => return Slept::Killed,
                    Ok(TaskCommand::Restart) => return Slept::Elapsed,
                    Ok(TaskCommand::Signal { .. }) => {}
                },
                recv(self.hook_rx) -> _ => {}
                recv(self.deps.shutdown) -> _ => return Slept::Shutdown,
            }
        }
    }

    fn finish_killed(&mut self) {
        self.emit(TaskEvent::killed(now_nanos()));
        self.finish_dead(false)
    }

    fn finish_dead(&mut self, failed: bool) {
        // What is left of the last run (a container) is gone before the task shows dead.
        self.release_ended();
        self.update(|s| {
            s.state = TaskStatus::Dead;
            if failed {
                s.failed = true;
            }
            if s.finished_at.is_none() {
                s.finished_at = Some(now_rfc3339());
            }
            s.pid = None;
            s.pid_start_ticks = None;
            s.handle = None;
            s.restart_at = None;
        });
        self.run_stop_hooks();
    }

    fn run_stop_hooks(&mut self) {
        self.release_ended();
        for hook in &self.hooks {
            hook.stop(&self.ctx);
        }
        self.deps.store.save_soon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateStore;
    use crate::task::hooks::{Awaited, HookError, Interrupt};

    /// Panics in `poststart`, once the task's shell has written its PID.
    struct PanickingHook(std::path::PathBuf);

    impl TaskHook for PanickingHook {
        fn name(&self) -> &'static str {
            "panicking"
        }

        fn poststart(&self, _task: &TaskContext, _run: RunHandle) {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !self.0.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            panic!("hook bug");
        }
    }

    /// A raw_exec task `t` that runs `script` with `sh -c` in a fresh data directory, the
    /// context and the dependencies of its runner, and the sender of their shutdown channel.
    fn raw_exec_task(name: &str, script: &str) -> (TaskContext, RunnerDeps, Sender<Never>) {
        let dir = std::env::temp_dir().join(format!("nw-{name}-{}", uuid::Uuid::new_v4()));
        let (store, _) = StateStore::open(&dir, false).unwrap();
        let hcl = format!(
            "job \"j\" {{\n group \"g\" {{\n  task \"t\" {{\n   driver = \"raw_exec\"\n   \
             config {{\n    command = \"sh\"\n    args = [\"-c\", {}]\n   \
             }}\n  }}\n }}\n}}\n",
            serde_json::to_string(script).unwrap()
        );
        let job = Arc::new(crate::jobspec::hcl::parse_job(&hcl).unwrap().job);
        let ctx = TaskContext {
            alloc_index: 0,
            alloc_name: "j.g[0]".to_string(),
            alloc_id: uuid::Uuid::new_v4().to_string(),
            task: job.task_groups[0].tasks[0].clone(),
            group: "g".to_string(),
            job,
            alloc_dir: dir.join("alloc"),
            task_dir: dir.join("alloc/t"),
            data_dir: dir.clone(),
            node_id: "node".to_string(),
            node_name: "node".to_string(),
            node: Default::default(),
            ports: Vec::new(),
            cores: Vec::new(),
        };
        // No task directory hook here: the keeper refuses a start without a log directory.
        std::fs::create_dir_all(&ctx.task_dir).unwrap();
        std::fs::create_dir_all(ctx.log_dir()).unwrap();
        let (shutdown_tx, shutdown) = bounded::<Never>(0);
        let keeper = driver::KeeperClient::open(&dir, keeper_program()).unwrap();
        let deps = RunnerDeps {
            drivers: Drivers::new(vec![Arc::new(driver::RawExec::new(keeper))]),
            store,
            shutdown,
            stop_tasks_on_shutdown: true,
            task_env: Default::default(),
            changed: None,
        };
        (ctx, deps, shutdown_tx)
    }

    #[test]
    fn a_panicking_runner_stops_its_task_and_marks_it_failed() {
        let pidfile = std::env::temp_dir().join(format!("nw-pid-{}", uuid::Uuid::new_v4()));
        let p = pidfile.display();
        let script = format!("echo $$ > {p}.tmp && mv {p}.tmp {p} && exec sleep 300");
        let (ctx, deps, _shutdown_tx) = raw_exec_task("runner", &script);
        let dir = ctx.data_dir.clone();
        let state = Arc::new(Mutex::new(TaskState::default()));
        let hook: Arc<dyn TaskHook> = Arc::new(PanickingHook(pidfile.clone()));
        let mut handle = spawn(ctx, vec![hook], state.clone(), deps, Pickup::New).unwrap();
        handle.join();

        let s = state.lock().clone();
        assert_eq!(s.state, TaskStatus::Dead);
        assert!(s.failed);
        assert_eq!(s.pid, None);
        let last = s.events.back().unwrap();
        assert_eq!(last.event_type, crate::task::events::RUNNER_FAILURE);
        assert!(last.display_message.contains("hook bug"), "{last:?}");
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The waiter reaps the killed child; until then it may linger as a zombie.
        let deadline = Instant::now() + Duration::from_secs(30);
        while driver::process_start_ticks(pid).is_some_and(|_| !is_zombie(pid))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            driver::process_start_ticks(pid).is_none() || is_zombie(pid),
            "the task's process was left running unsupervised"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&pidfile);
    }

    /// Blocks in `prestart` until its interrupt fires, telling the test when it began to wait.
    struct WaitingHook {
        waiting: Sender<()>,
        answered: Sender<Awaited<()>>,
    }

    impl TaskHook for WaitingHook {
        fn name(&self) -> &'static str {
            "waiting"
        }

        fn prestart(
            &self,
            _task: &TaskContext,
            _env: &mut BTreeMap<String, String>,
            stop: &Interrupt,
        ) -> Result<Vec<String>, HookError> {
            let (_keep, nothing) = unbounded::<()>();
            self.waiting.send(()).unwrap();
            let waited = stop.wait(&nothing, None);
            let interrupted = waited == Awaited::Interrupted;
            self.answered.send(waited).unwrap();
            if interrupted {
                Err(HookError::interrupted())
            } else {
                Ok(Vec::new())
            }
        }
    }

    /// A task whose runner waits in [`WaitingHook`]'s prestart: its handle, its state, the
    /// sender of its shutdown channel, and what the hook's wait answers.
    struct Waiting(
        TaskRunnerHandle,
        Arc<Mutex<TaskState>>,
        Sender<Never>,
        Receiver<Awaited<()>>,
    );

    fn waiting_task(name: &str) -> Waiting {
        let (ctx, deps, shutdown_tx) = raw_exec_task(name, "exec sleep 300");
        let (waiting, began) = unbounded();
        let (answered, answer) = unbounded();
        let hook: Arc<dyn TaskHook> = Arc::new(WaitingHook { waiting, answered });
        let state = Arc::new(Mutex::new(TaskState::default()));
        let handle = spawn(ctx, vec![hook], state.clone(), deps, Pickup::New).unwrap();
        began
            .recv_timeout(Duration::from_secs(60))
            .expect("the prestart hook never began to wait");
        Waiting(handle, state, shutdown_tx, answer)
    }

    #[test]
    fn a_kill_interrupts_a_blocking_prestart_and_the_task_ends_killed_not_failed() {
        let Waiting(mut handle, state, _shutdown_tx, answer) = waiting_task("prestart-kill");
        handle.send(TaskCommand::Kill {
            group_delay_ends: None,
        });
        assert_eq!(
            answer.recv_timeout(Duration::from_secs(60)),
            Ok(Awaited::Interrupted)
        );
        handle.join();
        let s = state.lock().clone();
        assert_eq!(s.state, TaskStatus::Dead);
        assert!(!s.failed, "{s:?}");
        let types: Vec<_> = s.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types.last(),
            Some(&crate::task::events::KILLED),
            "{types:?}"
        );
        assert!(
            !types.contains(&crate::task::events::SETUP_FAILURE),
            "{types:?}"
        );
        assert_eq!(s.pid, None, "no run was started");
    }

    #[test]
    fn a_shutdown_interrupts_a_blocking_prestart_and_leaves_the_task_pending() {
        let Waiting(mut handle, state, shutdown_tx, answer) = waiting_task("prestart-shutdown");
        drop(shutdown_tx);
        assert_eq!(
            answer.recv_timeout(Duration::from_secs(60)),
            Ok(Awaited::Interrupted)
        );
        handle.join();
        let s = state.lock().clone();
        assert_eq!(s.state, TaskStatus::Pending, "{s:?}");
        assert!(!s.failed, "{s:?}");
        assert_eq!(s.pid, None, "no run was started");
    }

    /// Asks, once the task wrote its PID, for SIGUSR1 through the hook request path.
    struct SignalingHook(std::path::PathBuf);

    impl TaskHook for SignalingHook {
        fn name(&self) -> &'static str {
            "signaling"
        }

        fn poststart(&self, _task: &TaskContext, run: RunHandle) {
            let pidfile = self.0.clone();
            std::thread::spawn(move || {
                while !pidfile.exists() && !run.is_over() {
                    std::thread::sleep(Duration::from_millis(5));
                }
                run.signal(libc::SIGUSR1, "SIGUSR1", "template with change_mode signal");
            });
        }
    }

    #[test]
    fn a_hook_signal_request_reaches_the_task_with_its_event() {
        let base = std::env::temp_dir().join(format!("nw-sig-{}", uuid::Uuid::new_v4()));
        let (pidfile, got) = (base.with_extension("pid"), base.with_extension("got"));
        let script = format!(
            "trap 'echo usr1 > {g}; exit 0' USR1; echo $$ > {p}.tmp && mv {p}.tmp {p}; \
             while :; do sleep 0.05; done",
            g = got.display(),
            p = pidfile.display()
        );
        let (ctx, deps, _shutdown_tx) = raw_exec_task("signal", &script);
        let hook: Arc<dyn TaskHook> = Arc::new(SignalingHook(pidfile.clone()));
        let state = Arc::new(Mutex::new(TaskState::default()));
        let mut handle = spawn(ctx, vec![hook], state.clone(), deps, Pickup::New).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !got.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        handle.send(TaskCommand::Kill {
            group_delay_ends: None,
        });
        handle.join();
        assert_eq!(std::fs::read_to_string(&got).unwrap_or_default(), "usr1\n");
        let s = state.lock().clone();
        let signaled = s
            .events
            .iter()
            .find(|e| e.event_type == crate::task::events::SIGNALING)
            .unwrap_or_else(|| panic!("no Signaling event: {:?}", s.events));
        assert_eq!(signaled.task_signal, "SIGUSR1");
        assert_eq!(
            signaled.task_signal_reason,
            "template with change_mode signal"
        );
        for f in [&pidfile, &got] {
            let _ = std::fs::remove_file(f);
        }
    }

    /// The keeper binary of this build (`cargo test` builds it with the other binaries).
    fn keeper_program() -> std::path::PathBuf {
        let p = driver::KeeperClient::locate();
        assert!(
            p.exists(),
            "{} is missing: build the binaries first (cargo build --bins)",
            p.display()
        );
        p
    }

    fn is_zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }
}
