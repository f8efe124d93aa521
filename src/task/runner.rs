//! The task runner: one OS thread per task that runs it, restarts it and records its events.
//!
//! Protocol:
//! - Commands ([`TaskCommand`]: kill, restart, signal) arrive on the runner's command channel from
//!   the API. Dropping every sender of that channel counts as a kill.
//! - Hooks' background work (the CSI supervisor) sends [`HookRequest`]s tagged with the run they
//!   belong to; a request for a run that is over, or that arrives once a kill began, is dropped.
//! - The driver (see [`crate::driver`]) sends one exit status per run on the [`RunningTask`]'s exit
//!   channel; the runner hands each finished run back to [`Driver::destroy`].
//! - The agent's shutdown channel disconnects when the agent stops: the runner stops the process
//!   with its kill signal and timeout, leaves the task `pending` (it starts again when the agent
//!   restarts), runs the stop hooks and returns.
//!
//! Every wait is a `select!` over the awaited thing, the command channel, the hook channel and the
//! shutdown channel, so nothing blocks beyond a kill or a shutdown. *Kill* (the task ends for good)
//! and *shutdown* (the agent ends) are kept apart.

use crossbeam_channel::{after, bounded, select, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::{self, Driver, ExitStatus, RunningTask, StartSpec, TaskHandle, TaskRunState};
use crate::jobspec::{interpolate::interpolate, JobType};
use crate::state::StateStore;
use crate::task::events::{now_nanos, now_rfc3339, TaskEvent, TaskState, TaskStatus};
use crate::task::hooks::{HookRequest, RunHandle, TaskContext, TaskHook};
use crate::task::restart::{Decision, RestartTracker, RunEnd};
use crate::thread::{Never, Worker};
use crate::util::short_id;

/// A command from the API to a task.
#[derive(Debug, Clone)]
pub enum TaskCommand {
    /// Stop the task for good (alloc stop, job stop).
    Kill,
    /// A user's `alloc restart`: restart at once, not counted by the policy.
    Restart,
    /// Send a signal to the task's process group.
    Signal { signal: i32, name: String },
}

/// What every runner shares.
#[derive(Clone)]
pub struct RunnerDeps {
    pub driver: Arc<dyn Driver>,
    pub store: Arc<StateStore>,
    /// Disconnects when the agent shuts down.
    pub shutdown: Receiver<Never>,
}

/// The owner's side of a running task runner.
pub struct TaskRunnerHandle {
    commands: Sender<TaskCommand>,
    join: Option<Worker<()>>,
}

impl TaskRunnerHandle {
    pub fn send(&self, cmd: TaskCommand) {
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

/// Starts the runner thread of one task. `restored` is set when the agent picks the task up again
/// from its state file.
pub fn spawn(
    ctx: TaskContext,
    hooks: Vec<Arc<dyn TaskHook>>,
    state: Arc<Mutex<TaskState>>,
    deps: RunnerDeps,
    restored: bool,
) -> std::io::Result<TaskRunnerHandle> {
    let (commands, command_rx) = unbounded();
    let (hook_tx, hook_rx) = unbounded();
    let batch = ctx.job.job_type == JobType::Batch;
    let runner = TaskRunner {
        tracker: RestartTracker::new(ctx.task.restart_policy, batch),
        ctx,
        hooks,
        state,
        deps,
        commands: command_rx,
        hook_tx,
        hook_rx,
        origin: Instant::now(),
        run_id: 0,
        finished: None,
    };
    let name = format!(
        "task-{}-{}",
        short_id(&runner.ctx.alloc_id),
        runner.ctx.task.name
    );
    let (state, store) = (runner.state.clone(), runner.deps.store.clone());
    let join = crate::thread::spawn_guarded(
        name,
        move || runner.run(restored),
        move |msg| runner_failed(&state, &store, msg),
    )?;
    Ok(TaskRunnerHandle {
        commands,
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
            driver::stop_foreign_group(pid, ticks, libc::SIGKILL, Duration::ZERO);
        }
    }
    {
        let mut s = state.lock();
        s.state = TaskStatus::Dead;
        s.pid = None;
        s.pid_start_ticks = None;
        s.finished_at = Some(now_rfc3339());
        s.push(TaskEvent::runner_failure(now_nanos(), msg));
    }
    store.save_soon();
}

struct TaskRunner {
    ctx: TaskContext,
    hooks: Vec<Arc<dyn TaskHook>>,
    /// Shared with the allocation registry, which the API reads.
    state: Arc<Mutex<TaskState>>,
    deps: RunnerDeps,
    commands: Receiver<TaskCommand>,
    hook_tx: Sender<HookRequest>,
    hook_rx: Receiver<HookRequest>,
    tracker: RestartTracker,
    origin: Instant,
    run_id: u64,
    /// The last run that ended, until the next one ends or the runner does: then it goes back to
    /// the driver. Not at once, so the driver's waiter may finish copying output that a process
    /// which escaped the task's group still writes, as long as it did before the driver interface.
    finished: Option<RunningTask>,
}

/// How the wait for a running process ended.
enum Waited {
    Ended(RunEnd, ExitStatus),
    /// The agent is shutting down; the process was stopped.
    Shutdown(ExitStatus),
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
    }

    fn emit(&self, event: TaskEvent) {
        self.update(|s| s.push(event));
    }

    fn run(mut self, restored: bool) {
        if restored {
            self.stop_leftover();
        } else {
            self.emit(TaskEvent::received(now_nanos()));
            self.emit(TaskEvent::task_setup(now_nanos()));
        }
        // Between runs a kill is seen by the restart delay; before the first run, here.
        if self.killed_before_start() {
            return self.finish_killed();
        }
        loop {
            // Read once per start: the task's environment starts from it and `${env.X}` looks in it.
            let agent_env: BTreeMap<String, String> = std::env::vars().collect();
            let mut env = self.base_env(&agent_env);
            for hook in &self.hooks {
                if let Err(e) = hook.prestart(&self.ctx, &mut env) {
                    log::warn!(
                        "task {} of alloc {}: {} hook failed: {e}",
                        self.ctx.task.name,
                        self.ctx.alloc_id,
                        hook.name()
                    );
                    self.emit(TaskEvent::setup_failure(now_nanos(), &e.0, true));
                    return self.finish_dead(false);
                }
            }
            let spec = self.start_spec(env, &agent_env);
            let (end, status) = match self.deps.driver.start(&spec) {
                Err(e) => {
                    self.emit(TaskEvent::driver_failure(now_nanos(), &e.to_string()));
                    (RunEnd::StartFailed, None)
                }
                Ok(task) => match self.supervise(task) {
                    Waited::Ended(end, status) => (end, Some(status)),
                    Waited::Shutdown(status) => {
                        self.emit(TaskEvent::terminated(
                            now_nanos(),
                            status.exit_code,
                            status.signal,
                            "",
                        ));
                        self.update(|s| {
                            s.state = TaskStatus::Pending;
                            s.pid = None;
                            s.pid_start_ticks = None;
                        });
                        return self.run_stop_hooks();
                    }
                },
            };
            if let Some(status) = status {
                self.emit(TaskEvent::terminated(
                    now_nanos(),
                    status.exit_code,
                    status.signal,
                    "",
                ));
            }
            let decision = self
                .tracker
                .decide(end, self.origin.elapsed(), fastrand::f64());
            match decision {
                Decision::Killed => return self.finish_killed(),
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
                    self.emit(TaskEvent::restarting(now_nanos(), delay, &reason));
                    self.update(|s| s.state = TaskStatus::Pending);
                    match self.sleep(delay) {
                        Slept::Elapsed => {}
                        Slept::Killed => return self.finish_killed(),
                        Slept::Shutdown => return self.run_stop_hooks(),
                    }
                    self.update(|s| {
                        s.restarts += 1;
                        s.last_restart = Some(now_rfc3339());
                    });
                }
            }
        }
    }

    /// A kill that arrived before the first start (or between runs) ends the task without running it.
    fn killed_before_start(&self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(TaskCommand::Kill) => return true,
                Ok(_) => continue,
                Err(crossbeam_channel::TryRecvError::Empty) => return false,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return true,
            }
        }
    }

    /// Runs one started task until it exits, is killed or restarted, or the agent shuts down.
    fn supervise(&mut self, task: RunningTask) -> Waited {
        let waited = self.watch(&task);
        if let Some(previous) = self.finished.replace(task) {
            self.deps.driver.destroy(previous);
        }
        waited
    }

    fn watch(&mut self, process: &RunningTask) -> Waited {
        self.run_id += 1;
        let run_id = self.run_id;
        let pid = process.handle().pid();
        self.update(|s| {
            s.state = TaskStatus::Running;
            s.started_at = Some(now_rfc3339());
            s.finished_at = None;
            s.pid = pid.map(|(pid, _)| pid);
            s.pid_start_ticks = pid.map(|(_, ticks)| ticks);
        });
        self.emit(TaskEvent::started(now_nanos()));
        // Hooks' background work watches `done`: dropping `done_tx` tells it the run is over.
        let (done_tx, done_rx) = bounded::<Never>(0);
        let handle = RunHandle::new(
            run_id,
            done_rx,
            self.deps.shutdown.clone(),
            self.hook_tx.clone(),
        );
        for hook in &self.hooks {
            hook.poststart(&self.ctx, handle.clone());
        }
        drop(handle);
        let mut done_tx = Some(done_tx);
        let task = &self.ctx.task;
        let kill_signal = task.kill_signal.number();
        let waited = loop {
            select! {
                recv(process.exited()) -> status => {
                    let status = status.unwrap_or(ExitStatus::lost());
                    break Waited::Ended(RunEnd::Exited { success: status.success() }, status);
                }
                recv(self.commands) -> cmd => match cmd {
                    Ok(TaskCommand::Signal { signal, name }) => {
                        self.emit(TaskEvent::signaling(now_nanos(), &name, ""));
                        if let Err(e) = self.deps.driver.signal(process, signal) {
                            log::warn!("cannot signal task {}: {e}", task.name);
                        }
                    }
                    Ok(TaskCommand::Restart) => {
                        done_tx = None;
                        self.emit(TaskEvent::restart_signaled(now_nanos(), ""));
                        let status = self.stop_process(process, kill_signal);
                        break Waited::Ended(RunEnd::UserRestart, status);
                    }
                    Ok(TaskCommand::Kill) | Err(_) => {
                        done_tx = None;
                        self.emit(TaskEvent::killing(now_nanos(), task.kill_timeout));
                        let status = self.stop_process(process, kill_signal);
                        break Waited::Ended(RunEnd::Killed, status);
                    }
                },
                recv(self.hook_rx) -> req => match req {
                    Ok(HookRequest::Emit { run_id: r, event }) if r == run_id => self.emit(*event),
                    Ok(HookRequest::Restart { run_id: r, events, failure }) if r == run_id => {
                        done_tx = None;
                        for e in events {
                            self.emit(e);
                        }
                        let status = self.stop_process(process, kill_signal);
                        let end = if failure { RunEnd::FailureRestart } else { RunEnd::UserRestart };
                        break Waited::Ended(end, status);
                    }
                    _ => {}
                },
                recv(self.deps.shutdown) -> _ => {
                    done_tx = None;
                    let status = self.stop_process(process, kill_signal);
                    break Waited::Shutdown(status);
                }
            }
        };
        drop(done_tx);
        self.update(|s| {
            s.finished_at = Some(now_rfc3339());
            s.pid = None;
            s.pid_start_ticks = None;
        });
        for hook in &self.hooks {
            hook.exited(&self.ctx);
        }
        waited
    }

    /// Sends the kill signal to the task, waits `kill_timeout`, then kills it for good.
    fn stop_process(&self, task: &RunningTask, signal: i32) -> ExitStatus {
        match self
            .deps
            .driver
            .stop(task, signal, self.ctx.task.kill_timeout)
        {
            Ok(status) => status,
            Err(e) => {
                log::error!("task {}: {e}", self.ctx.task.name);
                ExitStatus::lost()
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
                    Ok(TaskCommand::Kill) | Err(_) => return Slept::Killed,
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
        });
        self.run_stop_hooks();
    }

    fn run_stop_hooks(&mut self) {
        if let Some(task) = self.finished.take() {
            self.deps.driver.destroy(task);
        }
        for hook in &self.hooks {
            hook.stop(&self.ctx);
        }
        self.deps.store.save_soon();
    }

    /// A process recorded by an agent that crashed may still run: stop it before starting again, so
    /// the task never runs twice. The driver is asked to re-attach first; until drivers can (live
    /// restore), a task it re-attaches to is stopped all the same.
    fn stop_leftover(&self) {
        let (pid, ticks) = {
            let s = self.state.lock();
            (s.pid, s.pid_start_ticks)
        };
        if let (Some(pid), Some(ticks)) = (pid, ticks) {
            let driver = &self.deps.driver;
            // The state file keeps the PID and its start time, which is the handle of a process.
            let handle = TaskHandle::process(driver.name(), pid, ticks);
            if driver.inspect(&handle) == TaskRunState::Running {
                log::info!(
                    "stopping leftover process {pid} of task {} (alloc {})",
                    self.ctx.task.name,
                    self.ctx.alloc_id
                );
                let signal = self.ctx.task.kill_signal.number();
                let timeout = self.ctx.task.kill_timeout;
                let stopped = match driver.recover(&handle) {
                    Ok(Some(task)) => {
                        let stopped = driver.stop(&task, signal, timeout).map(|_| ());
                        driver.destroy(task);
                        stopped
                    }
                    Ok(None) => driver.stop_orphan(&handle, signal, timeout),
                    Err(e) => Err(e),
                };
                if let Err(e) = stopped {
                    log::error!(
                        "cannot stop leftover process {pid} of task {}: {e}",
                        self.ctx.task.name
                    );
                }
            }
        }
        self.update(|s| {
            s.pid = None;
            s.pid_start_ticks = None;
        });
    }

    /// The agent's environment, then `NOMAD_*`, then the task's `env` (task wins), interpolated.
    fn base_env(&self, agent_env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let ctx = &self.ctx;
        let mut env = agent_env.clone();
        let nomad = [
            ("NOMAD_ALLOC_ID", ctx.alloc_id.clone()),
            ("NOMAD_ALLOC_DIR", ctx.shared_dir().display().to_string()),
            ("NOMAD_TASK_DIR", ctx.local_dir().display().to_string()),
            ("NOMAD_SECRETS_DIR", ctx.secrets_dir().display().to_string()),
            ("NOMAD_TASK_NAME", ctx.task.name.clone()),
            ("NOMAD_GROUP_NAME", ctx.group.clone()),
            ("NOMAD_JOB_NAME", ctx.job.name.clone()),
            ("NOMAD_JOB_ID", ctx.job.id.clone()),
            ("NOMAD_NODE_ID", ctx.node_id.clone()),
            ("NOMAD_NODE_NAME", ctx.node_name.clone()),
        ];
        for (k, v) in nomad {
            env.insert(k.to_string(), v);
        }
        for (k, v) in &ctx.task.env {
            env.insert(k.clone(), v.clone());
        }
        env
    }

    /// Interpolates `${...}` in command, args and env values from the final environment.
    fn start_spec(
        &self,
        mut env: BTreeMap<String, String>,
        agent_env: &BTreeMap<String, String>,
    ) -> StartSpec {
        let lookup_in = |env: &BTreeMap<String, String>, name: &str| -> Option<String> {
            match name {
                "node.unique.id" => Some(self.ctx.node_id.clone()),
                "node.unique.name" => Some(self.ctx.node_name.clone()),
                _ => name
                    .strip_prefix("env.")
                    .and_then(|v| agent_env.get(v).cloned())
                    .or_else(|| env.get(name).cloned()),
            }
        };
        let snapshot = env.clone();
        for (k, v) in env.iter_mut() {
            if self.ctx.task.env.contains_key(k) {
                *v = interpolate(v, &|n| lookup_in(&snapshot, n));
            }
        }
        let lookup = |n: &str| lookup_in(&env, n);
        let task = &self.ctx.task;
        let command = interpolate(&task.config.command, &lookup);
        let args = task
            .config
            .args
            .iter()
            .map(|a| interpolate(a, &lookup))
            .collect();
        StartSpec {
            command,
            args,
            cwd: self.ctx.task_dir.clone(),
            user: task.user.clone(),
            log_dir: self.ctx.log_dir(),
            task_name: task.name.clone(),
            logs: task.log_config,
            thread_name: format!("wait-{}-{}", short_id(&self.ctx.alloc_id), task.name),
            env,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateStore;

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

    #[test]
    fn a_panicking_runner_stops_its_task_and_marks_it_failed() {
        let dir = std::env::temp_dir().join(format!("nw-runner-{}", uuid::Uuid::new_v4()));
        let (store, _) = StateStore::open(&dir, false).unwrap();
        let pidfile = dir.join("pid");
        let hcl = format!(
            "job \"j\" {{\n group \"g\" {{\n  task \"t\" {{\n   driver = \"raw_exec\"\n   \
             config {{\n    command = \"sh\"\n    args = [\"-c\", \"echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 300\"]\n   \
             }}\n  }}\n }}\n}}\n",
            pidfile.display()
        );
        let job = Arc::new(crate::jobspec::hcl::parse_job(&hcl).unwrap().job);
        let ctx = TaskContext {
            alloc_id: uuid::Uuid::new_v4().to_string(),
            task: job.task_groups[0].tasks[0].clone(),
            group: "g".to_string(),
            job,
            alloc_dir: dir.join("alloc"),
            task_dir: dir.join("alloc/t"),
            data_dir: dir.clone(),
            node_id: "node".to_string(),
            node_name: "node".to_string(),
        };
        std::fs::create_dir_all(&ctx.task_dir).unwrap();
        let (_shutdown_tx, shutdown) = bounded::<Never>(0);
        let deps = RunnerDeps {
            driver: Arc::new(driver::RawExec),
            store,
            shutdown,
        };
        let state = Arc::new(Mutex::new(TaskState::default()));
        let hook: Arc<dyn TaskHook> = Arc::new(PanickingHook(pidfile.clone()));
        let mut handle = spawn(ctx, vec![hook], state.clone(), deps, false).unwrap();
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
