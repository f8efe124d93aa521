//! Starting an allocation's tasks: at once when its host volumes are ready, otherwise from a gate
//! thread that waits for them.
//!
//! Protocol: [`AllocManager::start_alloc`] sets the pending reason and spawns the gate
//! (`gate-<short alloc id>`, through [`crate::thread::spawn_stoppable`]); the allocation keeps its
//! [`Worker`](crate::thread::Worker). The gate selects over volume changes, its stop channel and
//! the agent's shutdown; once every volume is ready it starts the runners and returns. It also
//! returns when its stop channel disconnects (the allocation was stopped: the stopper joins it),
//! on shutdown ([`AllocManager::join_all`] joins it), or when the volume manager goes away. The
//! runners are started under the allocation's inner lock, after checking that it should still
//! run, so a stop either finds them and kills them or keeps them from starting.

use crossbeam_channel::{select, Receiver};
use std::sync::Arc;

use super::manager::AllocManager;
use super::model::Allocation;
use crate::records::DesiredStatus;
use crate::task::events::TaskStatus;
use crate::task::hooks::TaskContext;
use crate::task::runner;
use crate::thread::Never;
use crate::util::{allocdir, short_id};

fn missing_reason(source: &str) -> String {
    format!("missing host volume {source:?}")
}

impl AllocManager {
    /// Starts the tasks of `alloc` now, or once its host volumes are ready.
    pub(super) fn start_alloc(self: &Arc<Self>, alloc: &Arc<Allocation>, restored: bool) {
        let Some(missing) = self.missing_volume(alloc) else {
            return self.start_runners(alloc, restored);
        };
        {
            let mut inner = alloc.inner.lock();
            if inner.desired == DesiredStatus::Stop {
                return;
            }
            inner.pending_reason = Some(missing_reason(&missing));
        }
        let me = self.clone();
        let a = alloc.clone();
        let name = format!("gate-{}", short_id(&alloc.id));
        // A panic is logged and counted by the thread helper; the allocation stays pending.
        let spawned =
            crate::thread::spawn_stoppable(name, move |stop| me.gate(a, stop, restored), |_| {});
        let gate = match spawned {
            Ok(gate) => gate,
            Err(e) => {
                log::error!("cannot start volume wait of alloc {}: {e}", alloc.id);
                return;
            }
        };
        let mut inner = alloc.inner.lock();
        if inner.desired == DesiredStatus::Stop {
            // Stopped while the gate started: the stop found no gate to join, so join it here.
            drop(inner);
            gate.join();
            return;
        }
        inner.gate = Some(gate);
    }

    fn missing_volume(&self, alloc: &Allocation) -> Option<String> {
        alloc
            .group_spec()
            .volumes
            .values()
            .find(|v| self.engine.volumes.lookup(&v.source).is_none())
            .map(|v| v.source.clone())
    }

    /// Waits until the allocation's volumes are ready, it is stopped, or the agent shuts down.
    fn gate(self: Arc<Self>, alloc: Arc<Allocation>, stop: Receiver<Never>, restored: bool) {
        let changes = self.engine.volumes.changes();
        loop {
            match self.missing_volume(&alloc) {
                None => {
                    alloc.inner.lock().pending_reason = None;
                    return self.start_runners(&alloc, restored);
                }
                Some(missing) => {
                    alloc.inner.lock().pending_reason = Some(missing_reason(&missing));
                }
            }
            select! {
                recv(changes) -> msg => if msg.is_err() { return },
                recv(stop) -> _ => return,
                recv(self.engine.deps.shutdown) -> _ => return,
            }
        }
    }

    /// Starts one runner per task that is not dead, unless the allocation was stopped.
    fn start_runners(&self, alloc: &Arc<Allocation>, restored: bool) {
        let alloc_dir = allocdir::alloc_dir(&self.engine.data_dir, &alloc.id);
        let mut inner = alloc.inner.lock();
        if inner.desired == DesiredStatus::Stop {
            return;
        }
        for spec in &alloc.group_spec().tasks {
            let state = alloc.tasks[&spec.name].clone();
            if state.lock().state == TaskStatus::Dead {
                continue;
            }
            let mut task = spec.clone();
            // The job keeps what was asked (the API shows it); the runner applies the cap.
            task.kill_timeout = self.engine.kill_timeout(task.kill_timeout);
            let ctx = TaskContext {
                alloc_id: alloc.id.clone(),
                job: alloc.job.clone(),
                group: alloc.group.clone(),
                task,
                alloc_dir: alloc_dir.clone(),
                task_dir: allocdir::task_dir(&alloc_dir, &spec.name),
                data_dir: self.engine.data_dir.clone(),
                node_id: self.engine.node_id.clone(),
                node_name: self.engine.node_name.clone(),
                ports: alloc.ports.clone(),
            };
            let hooks = self.engine.hooks.hooks_for(&ctx);
            match runner::spawn(ctx, hooks, state, self.engine.deps.clone(), restored) {
                Ok(handle) => {
                    inner.runners.insert(spec.name.clone(), handle);
                }
                Err(e) => log::error!("cannot start runner of task {}: {e}", spec.name),
            }
        }
    }
}
