//! The allocation runner: one per allocation, the way Nomad's `client/allocrunner` runs one. It
//! carries out the allocation's life around its tasks: the allocation hooks' prerun ([`hooks`]:
//! the host-volume wait, the CSI claims and mounts), its tasks' runners started ([`tasks`]) at
//! once or in their order ([`order`], carrying out the pure plan of `alloc::lifecycle`), a stop's
//! kills ([`stop`]: who kills what, poststop, purge, who keeps the gate), and the hooks' postrun.
//!
//! What it owns: the allocation keeps, under its inner lock, the runner's gate thread
//! (`gate-<short alloc id>`, a [`Worker`](crate::thread::Worker)), its task runners' handles
//! and, for an ordered allocation, the gate's wake sender; the gate thread owns the ordered hook
//! list ([`AllocRunner`]).
//!
//! Protocol:
//! - [`AllocManager::start_alloc`] starts the runners at once when nothing is to wait for or
//!   order (no missing host volume, no hook that polls or holds what it sets up, such as the
//!   CSI volumes', no `lifecycle` block or leader). Otherwise it
//!   sets the pending reason and spawns the gate (through [`crate::thread::spawn_stoppable`]).
//!   If the allocation was stopped meanwhile, it joins the gate itself (the stop found none to
//!   join), unless the gate is to carry out the stop's order.
//! - The gate runs the hooks' prerun ([`hooks`], in order) until all are ready; between tries it
//!   selects over every hook's wake channel (the volume manager's changes; one disconnected: it
//!   returns), a [`hooks::CSI_POLL`] tick when a hook polls, its stop channel (the hooks'
//!   postrun, then it returns) and the agent's shutdown (it returns). A failed prerun fails every
//!   task that is not dead (`Setup Failure`), runs the postrun and returns.
//! - Then it starts the task runners, under the allocation's inner lock, after checking that it
//!   should still run, so a stop either finds them and kills them or keeps them from starting.
//!   An ordered allocation's gate goes on: it plans ([`order`]) on every ping of its runners'
//!   `changed` channel (bounded 1, `try_send`; a stop pings it too through the allocation's
//!   wake sender), starting each task in its turn and killing what the plan says, until every
//!   task is dead, its stop channel disconnects or the agent shuts down.
//! - With a hook that holds what it set up (the CSI mounts), the gate then waits (select over its
//!   stop, the shutdown and a [`hooks::CSI_POLL`] tick) until every task is dead or the
//!   allocation is stopped, and runs the postrun (the unmount is queued); on shutdown it returns
//!   without, and the mounts stay for the tasks that outlive the agent (live-restore.md).
//! - A stop ([`stop::stop_alloc`]) of an allocation whose gate orders it marks it stopped and
//!   wakes the gate, which carries out Nomad's order; any other stop kills the runners at once
//!   and takes the gate, stopped, for the caller to join with no lock held.
//!   [`AllocManager::join_all`] joins what is left after a shutdown; the collector joins the gate
//!   of an allocation it destroys.
//!
//! Lock order: the gate takes the allocation's inner lock, then (one at a time) a task state,
//! never the registry; it holds no lock while a hook runs or while it waits.

mod hooks;
mod order;
pub(super) mod stop;
mod tasks;

use crossbeam_channel::{select, Receiver, Select};
use std::sync::Arc;

use self::hooks::{all_dead, missing_reason, AllocHook, Prerun};
use super::lifecycle;
use super::manager::AllocManager;
use super::model::Allocation;
use crate::records::DesiredStatus;
use crate::task::events::{now_nanos, now_rfc3339, TaskEvent, TaskStatus};
use crate::thread::Never;
use crate::util::short_id;

/// The body of one allocation's gate thread: the allocation, its hooks in order, and its stop
/// channel (disconnected by a stop of the allocation that takes the gate).
struct AllocRunner {
    manager: Arc<AllocManager>,
    alloc: Arc<Allocation>,
    hooks: Vec<Box<dyn AllocHook>>,
    stop: Receiver<Never>,
    /// The agent picks the allocation up from the state file.
    restored: bool,
}

impl AllocManager {
    /// Starts the tasks of `alloc` now, or from its gate thread once its hooks are ready.
    pub(super) fn start_alloc(self: &Arc<Self>, alloc: &Arc<Allocation>, restored: bool) {
        let ordered = lifecycle::is_ordered(alloc.group_spec());
        let missing = self.missing_volume(alloc);
        let hooks = self.alloc_hooks(alloc);
        // Without a gate only when nothing is to wait for, order, poll or hand back: the hooks
        // say what they need, so a new hook gets its gate without a rule here.
        let gated = ordered || missing.is_some() || hooks.iter().any(|h| h.polls() || h.holds());
        if !gated {
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
        let spawned = crate::thread::spawn_stoppable(
            name,
            move |stop| {
                let runner = AllocRunner {
                    manager: me,
                    alloc: a,
                    hooks,
                    stop,
                    restored,
                };
                runner.run()
            },
            |_| {},
        );
        let gate = match spawned {
            Ok(gate) => gate,
            Err(e) => {
                log::error!("cannot start the gate of alloc {}: {e}", alloc.id);
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
}

/// How a waiting gate was woken.
enum Woken {
    /// A hook's wake channel or the poll tick: ask the hooks again.
    Again,
    /// The allocation's stop.
    Stopped,
    /// The agent's shutdown, or a wake channel whose source is gone.
    Gone,
}

/// Waits for any hook's wake channel, the stop, the shutdown or the poll tick.
fn wait(
    wakes: &[Receiver<()>],
    stop: &Receiver<Never>,
    shutdown: &Receiver<Never>,
    poll: &Receiver<std::time::Instant>,
) -> Woken {
    let mut sel = Select::new();
    for wake in wakes {
        sel.recv(wake);
    }
    let (at_stop, at_shutdown, at_poll) = (sel.recv(stop), sel.recv(shutdown), sel.recv(poll));
    let op = sel.select();
    match op.index() {
        i if i == at_stop => {
            let _ = op.recv(stop);
            Woken::Stopped
        }
        i if i == at_shutdown => {
            let _ = op.recv(shutdown);
            Woken::Gone
        }
        i if i == at_poll => {
            let _ = op.recv(poll);
            Woken::Again
        }
        i => match op.recv(&wakes[i]) {
            Ok(()) => Woken::Again,
            Err(_) => Woken::Gone,
        },
    }
}

impl AllocRunner {
    /// Runs the hooks' prerun until the allocation may start, it is stopped, or the agent shuts
    /// down; then starts its tasks, in their order when they have one, and, when a hook holds
    /// what it set up, waits for the tasks' end to run the postrun.
    fn run(self) {
        let alloc = &self.alloc;
        let wakes: Vec<Receiver<()>> = self.hooks.iter().filter_map(|h| h.wake()).collect();
        let holds = self.hooks.iter().any(|h| h.holds());
        // Neither the plugin registry nor the claims signal their changes: poll them.
        let poll = if self.hooks.iter().any(|h| h.polls()) {
            crossbeam_channel::tick(hooks::CSI_POLL)
        } else {
            crossbeam_channel::never()
        };
        if holds && self.restored && all_dead(alloc) {
            // Over before the restart: what its hooks still hold is handed back.
            return self.postrun();
        }
        let shutdown = &self.manager.engine.deps.shutdown;
        // A stop that the restart interrupted goes on at once: its live tasks are killed in
        // their order whatever its volumes do (a poststop task that needs a missing volume fails
        // at its hook), rather than run on unwatched while the volumes are waited for.
        let resumes_stop = self.restored && alloc.desired() == DesiredStatus::Stop;
        if !resumes_stop {
            loop {
                let reason = match self.prerun() {
                    Prerun::Ready => break,
                    Prerun::Wait(reason) => reason,
                    Prerun::Failed(message) => {
                        self.fail_setup(&message);
                        return self.postrun();
                    }
                };
                alloc.inner.lock().pending_reason = Some(reason);
                match wait(&wakes, &self.stop, shutdown, &poll) {
                    Woken::Again => {}
                    Woken::Stopped => return self.postrun(),
                    Woken::Gone => return,
                }
            }
        }
        alloc.inner.lock().pending_reason = None;
        if lifecycle::is_ordered(alloc.group_spec()) {
            self.manager.coordinate(alloc, &self.stop, self.restored);
        } else {
            let deps = &self.manager.engine.deps;
            self.manager.start_runners(alloc, self.restored, deps);
        }
        if holds {
            self.wait_for_tasks();
        }
    }

    /// Each hook's prerun, in order, up to the first that is not ready.
    fn prerun(&self) -> Prerun {
        for hook in &self.hooks {
            match hook.prerun(&self.alloc) {
                Prerun::Ready => {}
                other => return other,
            }
        }
        Prerun::Ready
    }

    /// Each hook's postrun, in order.
    fn postrun(&self) {
        for hook in &self.hooks {
            hook.postrun(&self.alloc);
        }
    }

    /// Fails every task that has not started with a prerun's error, as Nomad fails an
    /// allocation whose pre-run hook failed.
    fn fail_setup(&self, message: &str) {
        let alloc = &self.alloc;
        log::warn!("alloc {}: {message}", alloc.id);
        alloc.inner.lock().pending_reason = None;
        for state in alloc.tasks.values() {
            let mut s = state.lock();
            if s.state == TaskStatus::Dead {
                continue;
            }
            s.push(TaskEvent::setup_failure(now_nanos(), message, true));
            s.state = TaskStatus::Dead;
            s.failed = true;
            s.finished_at = Some(now_rfc3339());
        }
        self.manager.engine.deps.store.save_soon();
    }

    /// Waits while the allocation's tasks run; runs the postrun when they are all dead or the
    /// allocation is stopped, not when the agent shuts down.
    fn wait_for_tasks(&self) {
        let tick = crossbeam_channel::tick(hooks::CSI_POLL);
        while !all_dead(&self.alloc) {
            select! {
                recv(self.stop) -> _ => break,
                recv(self.manager.engine.deps.shutdown) -> _ => return,
                recv(tick) -> _ => {},
            }
        }
        self.postrun();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, never, unbounded};

    #[test]
    fn a_waiting_gate_wakes_on_any_hooks_channel_and_ends_on_its_stop() {
        let (first_tx, first) = unbounded::<()>();
        let (second_tx, second) = unbounded::<()>();
        let wakes = vec![first, second];
        let (stop_tx, stop) = bounded::<Never>(0);
        let (_shutdown_tx, shutdown) = bounded::<Never>(0);
        let poll = never();
        // The second hook's channel wakes it as the first one's does.
        second_tx.send(()).unwrap();
        assert!(matches!(
            wait(&wakes, &stop, &shutdown, &poll),
            Woken::Again
        ));
        first_tx.send(()).unwrap();
        assert!(matches!(
            wait(&wakes, &stop, &shutdown, &poll),
            Woken::Again
        ));
        // A source gone (its sender dropped) ends the gate, whichever hook it was.
        drop(second_tx);
        assert!(matches!(wait(&wakes, &stop, &shutdown, &poll), Woken::Gone));
        let wakes = vec![wakes[0].clone()];
        drop(stop_tx);
        assert!(matches!(
            wait(&wakes, &stop, &shutdown, &poll),
            Woken::Stopped
        ));
    }
}
