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
//!
//! An allocation whose tasks are ordered (`lifecycle` blocks, a leader: [`super::lifecycle`])
//! always gets a gate thread, and it does not return once the volumes are ready: it starts each
//! task in its turn and kills what the order says, until every task is dead or the agent shuts
//! down. A stop of it once its tasks began is carried out by the gate too, in Nomad's order
//! (`super::stop`); a stop before that ends the gate.
//!
//! So does an allocation with CSI volumes ([`super::csi`]): its gate also polls (every
//! [`super::csi::CSI_POLL`]) until its volumes are claimed and mounted, and after starting the
//! tasks waits for them all to be dead, or for its stop, to queue the volumes' unmount; on
//! shutdown it returns and leaves them mounted.

use crossbeam_channel::{bounded, select, Receiver};
use std::collections::BTreeSet;
use std::sync::Arc;

use super::csi;
use super::lifecycle::{self, Member, Role};
use super::manager::AllocManager;
use super::model::Allocation;
use crate::csi::volumes::attach::Prepared;
use crate::jobspec::Task;
use crate::records::DesiredStatus;
use crate::task::events::{now_nanos, now_rfc3339, TaskStatus};
use crate::task::hooks::TaskContext;
use crate::task::runner::{self, Pickup, RunnerDeps, TaskCommand};
use crate::thread::Never;
use crate::util::{allocdir, short_id};

fn missing_reason(source: &str) -> String {
    format!("missing host volume {source:?}")
}

impl AllocManager {
    /// Starts the tasks of `alloc` now, or once its host volumes are ready.
    pub(super) fn start_alloc(self: &Arc<Self>, alloc: &Arc<Allocation>, restored: bool) {
        let ordered = lifecycle::is_ordered(alloc.group_spec());
        let missing = self.missing_volume(alloc);
        if missing.is_none() && !ordered && !csi::has_csi(alloc) {
            return self.start_runners(alloc, restored, &self.engine.deps);
        }
        {
            let mut inner = alloc.inner.lock();
            // A stopped allocation (restored) starts only to carry on its stop's order.
            if inner.desired == DesiredStatus::Stop && !inner.ordered_stop {
                return;
            }
            inner.pending_reason = missing.as_deref().map(missing_reason);
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
        if inner.desired == DesiredStatus::Stop && !inner.ordered_stop {
            // Stopped while the gate started: the stop found no gate to join, so join it here
            // (unless the gate is to carry out the stop's order: then it is kept, as the stop
            // would).
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
            .find(|v| !v.is_csi() && self.engine.volumes.lookup(&v.source).is_none())
            .map(|v| v.source.clone())
    }

    /// Waits until the allocation's volumes are ready (host volumes there, CSI volumes claimed
    /// and mounted: [`super::csi`]), it is stopped, or the agent shuts down; then starts its
    /// tasks, in their order when they have one. With CSI volumes it then waits for the tasks'
    /// end to have the volumes taken down.
    fn gate(self: Arc<Self>, alloc: Arc<Allocation>, stop: Receiver<Never>, restored: bool) {
        let changes = self.engine.volumes.changes();
        let with_csi = csi::has_csi(&alloc);
        // Neither the plugin registry nor the claims signal their changes: poll them.
        let poll = if with_csi {
            crossbeam_channel::tick(csi::CSI_POLL)
        } else {
            crossbeam_channel::never()
        };
        if with_csi && restored && csi::all_dead(&alloc) {
            // Over before the restart: what its volumes still hold is taken down.
            return self.release_csi(&alloc);
        }
        // A stop that the restart interrupted goes on at once: its live tasks are killed in
        // their order whatever its volumes do (a poststop task that needs a missing volume fails
        // at its hook), rather than run on unwatched while the volumes are waited for.
        let resumes_stop = restored && alloc.desired() == DesiredStatus::Stop;
        if !resumes_stop {
            loop {
                let reason = match self.missing_volume(&alloc) {
                    Some(missing) => Some(missing_reason(&missing)),
                    None => match self.prepare_csi(&alloc) {
                        Prepared::Ready => None,
                        Prepared::Wait(reason) => Some(reason),
                        Prepared::Failed(message) => {
                            self.fail_csi_setup(&alloc, &message);
                            return self.release_csi(&alloc);
                        }
                    },
                };
                let Some(reason) = reason else { break };
                alloc.inner.lock().pending_reason = Some(reason);
                select! {
                    recv(changes) -> msg => if msg.is_err() { return },
                    recv(stop) -> _ => return self.release_csi(&alloc),
                    recv(self.engine.deps.shutdown) -> _ => return,
                    recv(poll) -> _ => {},
                }
            }
        }
        alloc.inner.lock().pending_reason = None;
        if lifecycle::is_ordered(alloc.group_spec()) {
            self.coordinate(&alloc, &stop, restored);
        } else {
            self.start_runners(&alloc, restored, &self.engine.deps);
        }
        if with_csi {
            self.watch_csi(&alloc, &stop);
        }
    }

    /// Starts one runner per task that is not dead, unless the allocation was stopped.
    fn start_runners(&self, alloc: &Arc<Allocation>, restored: bool, deps: &RunnerDeps) {
        let specs: Vec<&Task> = alloc.group_spec().tasks.iter().collect();
        self.start_tasks(alloc, &specs, restored, deps);
    }

    /// Starts the runners of `specs` that are not dead and have none, unless the allocation was
    /// stopped (then only its poststop tasks, when they are to run, and, `restored`, the live
    /// tasks whose kill its gate carries on: `super::stop`); `restored`: the agent picks them up
    /// from the state file.
    fn start_tasks(
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
                let mhz = super::capacity::task_cpu_mhz(&task.resources, per_core);
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

    /// Runs an ordered allocation's tasks in their turn ([`lifecycle::plan`]) until every task is
    /// dead, the allocation is stopped or the agent shuts down.
    fn coordinate(&self, alloc: &Arc<Allocation>, stop: &Receiver<Never>, restored: bool) {
        let (changed_tx, changed) = bounded::<()>(1);
        let mut deps = self.engine.deps.clone();
        // A stop wakes the gate to carry out its order (`super::stop`).
        alloc.inner.lock().wake = Some(changed_tx.clone());
        deps.changed = Some(changed_tx);
        let specs = &alloc.group_spec().tasks;
        if restored {
            // What an earlier agent started is picked up at once by its runner (re-attached,
            // or its end recorded); what it never started waits for its turn.
            let begun: Vec<&Task> = specs
                .iter()
                .filter(|t| !alloc.tasks[&t.name].lock().events.is_empty())
                .collect();
            self.start_tasks(alloc, &begun, true, &deps);
        }
        let mut killed = BTreeSet::new();
        loop {
            let members = self.members(alloc);
            let plan = if alloc.desired() == DesiredStatus::Stop {
                lifecycle::plan_stop(&members, &killed)
            } else {
                lifecycle::plan(&members, &killed)
            };
            if plan.done {
                return;
            }
            if !plan.kill.is_empty() || !plan.abandon.is_empty() {
                self.carry_out_kill(alloc, &plan, &mut killed);
            }
            let starting: Vec<&Task> = specs
                .iter()
                .filter(|t| plan.start.contains(&t.name))
                .collect();
            if !starting.is_empty() {
                log::info!(
                    "alloc {}: starting tasks {:?} in their turn",
                    alloc.id,
                    plan.start
                );
                self.start_tasks(alloc, &starting, false, &deps);
            }
            if !plan.abandon.is_empty() {
                // No runner pings for a task marked dead here: plan again at once.
                continue;
            }
            select! {
                recv(changed) -> _ => {},
                recv(stop) -> _ => return,
                recv(self.engine.deps.shutdown) -> _ => return,
            }
        }
    }

    /// The allocation's tasks as the plan sees them (one short lock each).
    fn members(&self, alloc: &Allocation) -> Vec<Member> {
        let with_runner: BTreeSet<String> = alloc.inner.lock().runners.keys().cloned().collect();
        alloc
            .group_spec()
            .tasks
            .iter()
            .map(|t| {
                let s = alloc.tasks[&t.name].lock();
                Member {
                    name: t.name.clone(),
                    role: Role::of(t),
                    leader: t.leader,
                    status: s.state,
                    failed: s.failed,
                    started: s.started_at.is_some(),
                    launched: with_runner.contains(&t.name) || !s.events.is_empty(),
                }
            })
            .collect()
    }

    /// Tells each task to kill why (the plan's cause, as an event; a stop's kill has none but the
    /// runner's `Killing`), then kills it; a task that never started is marked dead with the same
    /// event.
    fn carry_out_kill(
        &self,
        alloc: &Allocation,
        plan: &lifecycle::Plan,
        killed: &mut BTreeSet<String>,
    ) {
        let cause = plan.cause.as_ref();
        if !plan.kill.is_empty() {
            log::info!(
                "alloc {}: killing tasks {:?}: {}",
                alloc.id,
                plan.kill,
                cause.map_or("stopped".to_string(), |c| format!("{c:?}"))
            );
        }
        for name in &plan.kill {
            if let Some(cause) = cause {
                alloc.tasks[name].lock().push(cause.event(now_nanos()));
            }
            let inner = alloc.inner.lock();
            if let Some(runner) = inner.runners.get(name) {
                // A stop's kill waits the group's delay once; a leader's or the main tasks'
                // end in an allocation that runs on is no stop, and waits the task's own only.
                runner.send(if inner.desired == DesiredStatus::Stop {
                    super::stop::stop_kill(alloc, &inner)
                } else {
                    TaskCommand::Kill {
                        group_delay_ends: None,
                    }
                });
            }
            drop(inner);
            killed.insert(name.clone());
        }
        for name in &plan.abandon {
            let mut s = alloc.tasks[name].lock();
            if let Some(cause) = cause {
                s.push(cause.event(now_nanos()));
            }
            s.state = TaskStatus::Dead;
            s.finished_at = Some(now_rfc3339());
        }
        self.engine.deps.store.save_soon();
    }
}
