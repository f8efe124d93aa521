//! The start of a run: the prestart hooks (each may block, through an [`Interrupt`] that the
//! task's kill and the agent's shutdown fire), the binds hooks give a container or an exec
//! task, and the driver's start.

use std::sync::Arc;

use super::{RunEnd, TaskRunner};
use crate::driver::{self, RunningTask};
use crate::task::events::{now_nanos, TaskEvent};
use crate::task::hooks::{HookError, Interrupt};

/// Why [`TaskRunner::start_run`] started no run.
pub(super) enum NotStarted {
    /// The driver could not start it.
    Driver(RunEnd),
    /// A hook failed: the task is dead.
    HookFailed,
    /// A blocking prestart was interrupted by the task's kill.
    Killed,
    /// A blocking prestart was interrupted by the agent's shutdown.
    Shutdown,
}

impl TaskRunner {
    /// A hook `name` failed before a start: Nomad's `Task hook failed` event (`<hook>: <error>`),
    /// then the `Setup Failure` that fails the task.
    fn hook_failed(&self, name: &str, e: &HookError) {
        let at = now_nanos();
        self.emit(TaskEvent::hook_failed(at, name, &e.message));
        self.emit(TaskEvent::setup_failure(at, &e.message, true));
    }

    /// Runs the prestart hooks and starts a run.
    pub(super) fn start_run(&mut self) -> Result<RunningTask, NotStarted> {
        let passed = self.deps.task_env.clone();
        let mut env = crate::task::env::base_env(&self.ctx, &passed);
        let stop = Interrupt::new(self.killed.clone(), self.deps.shutdown.clone());
        for hook in &self.hooks {
            let (task, alloc, name) = (&self.ctx.task.name, &self.ctx.alloc_id, hook.name());
            let notes = hook.prestart(&self.ctx, &mut env, &stop).map_err(|e| {
                if e.is_interrupted() {
                    log::info!("task {task} of alloc {alloc}: {name} hook interrupted by a stop");
                    return self.why_interrupted();
                }
                let name = e.hook_name(name);
                log::warn!("task {task} of alloc {alloc}: {name} hook failed: {e}");
                self.hook_failed(name, &e);
                NotStarted::HookFailed
            })?;
            for note in notes {
                log::warn!("task {task} of alloc {alloc}: {name} hook: {note}");
                self.emit(TaskEvent::task_setup_note(now_nanos(), &note));
            }
        }
        let mut spec = crate::task::env::start_spec(&self.ctx, env, &passed);
        if let Some(container) = spec.container.as_mut() {
            let binds = crate::task::hooks::container_binds(&self.hooks, &self.ctx);
            container.binds.extend(binds.map_err(|(name, e)| {
                self.hook_failed(name, &e);
                NotStarted::HookFailed
            })?);
        } else if self.ctx.task.driver == driver::exec::NAME {
            // Bound in its root by the keeper, as a container's are by the engine.
            spec.binds = crate::task::hooks::container_binds(&self.hooks, &self.ctx).map_err(
                |(name, e)| {
                    self.hook_failed(name, &e);
                    NotStarted::HookFailed
                },
            )?;
        }
        let (state, store) = (self.state.clone(), self.deps.store.clone());
        spec.cancel = Some([self.killed.clone(), self.deps.shutdown.clone()]);
        spec.progress = Some(driver::Progress(Arc::new(move |message: &str| {
            state.lock().push(TaskEvent::driver(now_nanos(), message));
            store.save_soon();
        })));
        let started = match self.ended.take() {
            Some(previous) => self.driver.restart(previous, &spec),
            None => self.driver.start(&spec),
        };
        started.map_err(|e| {
            self.emit(TaskEvent::driver_failure(now_nanos(), &e.to_string()));
            NotStarted::Driver(RunEnd::StartFailed)
        })
    }

    /// A prestart hook was interrupted: by the task's kill, or else by the agent's shutdown. A
    /// kill wins when both came (the task is not to run again either way).
    fn why_interrupted(&self) -> NotStarted {
        use crossbeam_channel::TryRecvError::Disconnected;
        if matches!(self.killed.try_recv(), Err(Disconnected)) {
            NotStarted::Killed
        } else {
            NotStarted::Shutdown
        }
    }
}
