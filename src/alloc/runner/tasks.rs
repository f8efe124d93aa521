//! Starting an allocation's task runners: one [`runner`](crate::task::runner) thread per task
//! that is not dead and has none, under the allocation's inner lock, unless the allocation was
//! stopped. Called by the allocation runner ([`super`]) on the caller's thread (nothing to wait
//! for) or on its gate thread.

use std::sync::Arc;

use crate::alloc::lifecycle::Role;
use crate::alloc::manager::AllocManager;
use crate::alloc::model::Allocation;
use crate::jobspec::Task;
use crate::records::DesiredStatus;
use crate::task::events::TaskStatus;
use crate::task::hooks::TaskContext;
use crate::task::runner::{self, Pickup, RunnerDeps};
use crate::util::allocdir;

impl AllocManager {
    /// Starts one runner per task that is not dead, unless the allocation was stopped.
    pub(super) fn start_runners(&self, alloc: &Arc<Allocation>, restored: bool, deps: &RunnerDeps) {
        let specs: Vec<&Task> = alloc.group_spec().tasks.iter().collect();
        self.start_tasks(alloc, &specs, restored, deps);
    }

    /// Starts the runners of `specs` that are not dead and have none, unless the allocation was
    /// stopped (then only its poststop tasks, when they are to run, and, `restored`, the live
    /// tasks whose kill its gate carries on: [`super::stop`]); `restored`: the agent picks them up
    /// from the state file.
    pub(super) fn start_tasks(
        &self,
        alloc: &Arc<Allocation>,
        specs: &[&Task],
        restored: bool,
        deps: &RunnerDeps,
    ) {
        let alloc_dir = allocdir::alloc_dir(&self.engine.data_dir, &alloc.id);
        // The node as its tasks see it (`${attr.*}`, `${node.*}`) and what one core counts for,
        // read before the allocation is locked (the node reads its drivers' and volumes'
        // fingerprints).
        let node = self.engine.node.node();
        let per_core = node.capacity.as_ref().map_or(0, |c| c.mhz_per_core);
        let node = Arc::new(crate::task::hooks::NodeVars {
            datacenter: node.datacenter,
            node_class: node.node_class,
            node_pool: node.node_pool,
            attributes: node.attributes,
            meta: node.meta,
        });
        let mut inner = alloc.inner.lock();
        let stopped = inner.desired == DesiredStatus::Stop;
        if stopped && !inner.ordered_stop {
            return;
        }
        for spec in specs {
            let allowed = match Role::of(spec) {
                Role::Poststop => inner.run_poststop,
                _ => restored,
            };
            if stopped && !allowed {
                continue;
            }
            let state = alloc.tasks[&spec.name].clone();
            if state.lock().state == TaskStatus::Dead || inner.runners.contains_key(&spec.name) {
                continue;
            }
            let mut task = (*spec).clone();
            // The job keeps what was asked (the API shows it); the runner applies the cap.
            task.kill_timeout = self.engine.kill_timeout(task.kill_timeout);
            // A task with cores weighs, and says in NOMAD_CPU_LIMIT, what its cores count for
            // (Nomad's scheduler writes it in the task's CpuShares).
            if task.resources.cores > 0 {
                let mhz = crate::alloc::capacity::task_cpu_mhz(&task.resources, per_core);
                task.resources.cpu = u32::try_from(mhz).unwrap_or(u32::MAX);
            }
            let ctx = TaskContext {
                alloc_id: alloc.id.clone(),
                alloc_index: alloc.index,
                alloc_name: alloc.name.clone(),
                job: alloc.job.clone(),
                group: alloc.group.clone(),
                task,
                alloc_dir: alloc_dir.clone(),
                task_dir: allocdir::task_dir(&alloc_dir, &spec.name),
                data_dir: self.engine.data_dir.clone(),
                node_id: self.engine.node_id.clone(),
                node_name: self.engine.node_name.clone(),
                node: node.clone(),
                ports: alloc.ports.clone(),
                cores: alloc.cores.get(&spec.name).cloned().unwrap_or_default(),
            };
            let pickup = match (restored, stopped && Role::of(spec) != Role::Poststop) {
                (false, _) => Pickup::New,
                (true, false) => Pickup::Restored,
                // Its stop kills it in its turn; it never starts again (`Pickup`).
                (true, true) => Pickup::RestoredStopping,
            };
            let hooks = self.engine.hooks.hooks_for(&ctx);
            match runner::spawn(ctx, hooks, state, deps.clone(), pickup) {
                Ok(handle) => {
                    inner.runners.insert(spec.name.clone(), handle);
                }
                Err(e) => log::error!("cannot start runner of task {}: {e}", spec.name),
            }
        }
    }
}
