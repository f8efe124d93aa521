//! Stopping an allocation (`job stop`, `alloc stop`, a job's update or purge), as Nomad's alloc
//! runner does (its `killTasks`): the leader first, then the other tasks but the sidecars and the
//! poststop tasks, then the sidecars, each stage once the one before is dead; then the poststop
//! tasks run, to completion, and only then is the allocation complete (jobspec.md `lifecycle`).
//!
//! The stop itself never waits for a task. An allocation of an ordered group whose tasks began
//! ([`gate_orders_stop`]) keeps its gate thread: [`stop_alloc`] marks it stopped and wakes the
//! gate, which plans the stop's order ([`crate::alloc::lifecycle::plan_stop`]), kills each stage in turn,
//! starts the poststop tasks once the others are dead and returns once every task is dead. Any
//! other allocation's runners are all sent `Kill` at once (they are all main tasks, or never
//! began), its gate is stopped and returned for the caller to join, and tasks that never ran are
//! marked dead. A purge stops the job's running allocations as a stop does: one whose gate
//! carries out the stop stays, marked purged ([`purge_keeps`]), with its own copy of the job,
//! until its tasks (its poststop tasks too) are all dead; the collector then forgets it
//! (`crate::alloc::gc`). Any other allocation of the job is forgotten at once: nothing of it runs on, and
//! a poststop task that runs (the job was stopped before) is killed ([`end_all`]), the way out of
//! one that hangs. A second stop, of an allocation that runs its
//! poststop tasks, kills them ([`cut_poststop`]) once the state file records the cut
//! ([`cut_record`]): a restart after it runs none of them.

use crate::alloc::lifecycle::{self, Role};
use crate::records::{AllocRecord, DesiredStatus};
use crate::task::events::{TaskState, TaskStatus};
use crate::task::runner::TaskCommand;
use crate::thread::Worker;

use crate::alloc::model::{AllocInner, Allocation};

/// The kill a stop of `alloc` sends its tasks: its group's `shutdown_delay` runs once, from the
/// stop's time (its modify time, which the state file keeps), before any task's own delay; a
/// kill after it (a later stage, an agent restart) waits only what is left (`task::runner`).
pub(in crate::alloc) fn stop_kill(alloc: &Allocation, inner: &AllocInner) -> TaskCommand {
    let delay = alloc.group_spec().shutdown_delay;
    let nanos = i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX);
    TaskCommand::Kill {
        group_delay_ends: (!delay.is_zero()).then(|| inner.modify_time.saturating_add(nanos)),
    }
}

/// A task that never got a runner (its allocation waits for a volume, or for its turn): stopping
/// its allocation makes it dead without having run.
fn never_ran(s: &TaskState) -> bool {
    s.state == TaskStatus::Pending && s.started_at.is_none() && s.events.is_empty()
}

/// Whether a stop of `alloc` now leaves its poststop tasks to run: it has one that is not dead,
/// and its tasks began (some other task has a runner or events: its gate runs their order; an
/// allocation still waiting for its volumes never started and runs nothing).
pub(in crate::alloc) fn poststop_follows(alloc: &Allocation, inner: &AllocInner) -> bool {
    let (poststop_left, began) = stop_view(alloc, inner);
    poststop_left && began
}

/// Whether a poststop task of `alloc` is not dead, and whether its other tasks began (see
/// [`poststop_follows`]).
fn stop_view(alloc: &Allocation, inner: &AllocInner) -> (bool, bool) {
    if inner.pending_reason.is_some() {
        return (false, false);
    }
    let (mut poststop_left, mut began) = (false, false);
    for t in &alloc.group_spec().tasks {
        let s = alloc.tasks[&t.name].lock();
        if Role::of(t) == Role::Poststop {
            poststop_left |= s.state != TaskStatus::Dead;
        } else {
            began |= inner.runners.contains_key(&t.name) || !s.events.is_empty();
        }
    }
    (poststop_left, began)
}

/// Whether the gate of `alloc` carries out a stop now: its group orders its tasks (a
/// `lifecycle` block or a leader), its tasks began, and its gate runs them.
pub(in crate::alloc) fn gate_orders_stop(alloc: &Allocation, inner: &AllocInner) -> bool {
    // A gate thread that ended (a panic is only logged) carries out nothing: all at once then.
    let gate_runs = inner.gate.as_ref().is_some_and(|g| !g.is_finished());
    gate_runs && lifecycle::is_ordered(alloc.group_spec()) && stop_view(alloc, inner).1
}

/// How a stop of an allocation is carried out, decided once, when the change that stops it is
/// staged (`manager`'s commit): the state file is written from it and [`stop_alloc`] acts on
/// it. Deciding twice could disagree: the gate may start the first tasks in between, and a
/// file saying "not ordered, poststop dead" beside an allocation that runs its poststop tasks
/// would lose them at a restart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::alloc) struct StopPlan {
    /// Its gate carries out the stop, in the tasks' order ([`gate_orders_stop`]).
    pub ordered: bool,
    /// Its poststop tasks run after the others ([`poststop_follows`]).
    pub poststop: bool,
}

/// The [`StopPlan`] of a stop of `alloc` now; an allocation stopped already is left alone.
pub(in crate::alloc) fn plan_of(alloc: &Allocation) -> StopPlan {
    let inner = alloc.inner.lock();
    if inner.desired == DesiredStatus::Stop {
        return StopPlan::default();
    }
    let ordered = gate_orders_stop(alloc, &inner);
    StopPlan {
        ordered,
        poststop: ordered && poststop_follows(alloc, &inner),
    }
}

/// An allocation's record as [`stop_alloc`] at `at` will leave it: what a staged stop writes;
/// `poststop`: its poststop tasks will run ([`poststop_follows`]), so they stay pending.
pub(in crate::alloc) fn stopped_record(record: &mut AllocRecord, at: i64, poststop: &[String]) {
    record.desired_status = DesiredStatus::Stop;
    record.modify_time = at;
    for (name, s) in record.task_states.iter_mut() {
        if never_ran(s) && !poststop.contains(name) {
            s.state = TaskStatus::Dead;
        }
    }
}

/// The poststop tasks a stop of `alloc` planned as `plan` leaves to run.
pub(in crate::alloc) fn poststop_to_run(alloc: &Allocation, plan: StopPlan) -> Vec<String> {
    if !plan.poststop {
        return Vec::new();
    }
    poststop_names(alloc)
}

pub(in crate::alloc) fn poststop_names(alloc: &Allocation) -> Vec<String> {
    alloc
        .group_spec()
        .tasks
        .iter()
        .filter(|t| Role::of(t) == Role::Poststop)
        .map(|t| t.name.clone())
        .collect()
}

/// Marks an allocation stopped at `at` and has its tasks killed: by its gate, in their order, when
/// it orders them ([`gate_orders_stop`]; then, `purge`, it is marked purged), otherwise all at
/// once here. Returns its gate, stopped, for the caller to join once it holds no lock (the
/// gate may be taking the allocation's), unless the gate runs on to carry out the stop.
#[must_use = "the gate thread must be joined"]
pub(in crate::alloc) fn stop_alloc(
    alloc: &Allocation,
    at: i64,
    purge: bool,
    plan: StopPlan,
) -> Option<Worker<()>> {
    let mut inner = alloc.inner.lock();
    if inner.desired == DesiredStatus::Stop {
        return None;
    }
    inner.desired = DesiredStatus::Stop;
    inner.modify_time = at;
    // As planned when the state file was written, even if the gate started tasks since: an
    // unordered stop kills whatever runs.
    let ordered = plan.ordered && inner.gate.is_some();
    inner.purged |= purge && ordered;
    let poststop = if ordered && plan.poststop {
        poststop_names(alloc)
    } else {
        Vec::new()
    };
    inner.run_poststop = !poststop.is_empty();
    inner.ordered_stop = ordered;
    let mut gate = None;
    if ordered {
        if let Some(wake) = &inner.wake {
            // Full: a wake-up already waits.
            let _ = wake.try_send(());
        }
    } else {
        gate = inner.gate.take();
        if let Some(g) = &mut gate {
            g.stop();
        }
        inner.pending_reason = None;
        let kill = stop_kill(alloc, &inner);
        for r in inner.runners.values() {
            r.send(kill.clone());
        }
    }
    drop(inner);
    for (name, state) in &alloc.tasks {
        let mut s = state.lock();
        if never_ran(&s) && !poststop.contains(name) {
            s.state = TaskStatus::Dead;
        }
    }
    gate
}

/// Whether `alloc` stays after a purge of its job, marked purged: it is purged already, or it
/// runs and `stopping`, the plan of the stop that the purge makes now, has its gate carry it out
/// ([`stop_alloc`] acts on the same plan).
pub(in crate::alloc) fn purge_keeps(alloc: &Allocation, stopping: Option<StopPlan>) -> bool {
    alloc.inner.lock().purged || stopping.is_some_and(|p| p.ordered)
}

/// Whether the job of `alloc` was purged while it ran its stop (see [`purge_keeps`]).
pub(in crate::alloc) fn is_purged(alloc: &Allocation) -> bool {
    alloc.inner.lock().purged
}

/// Whether a stop of `alloc`, already stopped, now cuts its poststop tasks ([`cut_poststop`]): it
/// still runs them.
pub(in crate::alloc) fn runs_poststop(alloc: &Allocation) -> bool {
    let inner = alloc.inner.lock();
    inner.desired == DesiredStatus::Stop && inner.run_poststop
}

/// The allocations of job `id` that a second stop of the job cuts ([`runs_poststop`]); those of
/// a purged job of the same ID belong to no job now and are not among them.
pub(in crate::alloc) fn to_cut<'a>(
    allocs: impl Iterator<Item = &'a std::sync::Arc<Allocation>>,
    id: &str,
) -> Vec<std::sync::Arc<Allocation>> {
    allocs
        .filter(|a| a.job.id == id && !is_purged(a) && runs_poststop(a))
        .cloned()
        .collect()
}

/// An allocation's record as [`cut_poststop`] will leave it: what a staged second stop writes,
/// so that the cut is on disk before any poststop task is killed, and a restart neither takes
/// over nor starts them (`crate::alloc::restore`).
pub(in crate::alloc) fn cut_record(record: &mut AllocRecord, poststop: &[String]) {
    record.poststop_cut = true;
    for (name, s) in record.task_states.iter_mut() {
        if never_ran(s) && poststop.contains(name) {
            s.state = TaskStatus::Dead;
        }
    }
}

/// A stop of an allocation that is already stopped and runs its poststop tasks, once the state
/// file records it ([`cut_record`]): they are killed as a stop kills a task (`kill_signal`, then
/// SIGKILL after `kill_timeout`), and one that has not started is marked dead and never starts.
/// The operator's way out of a poststop task that hangs, short of a purge.
pub(in crate::alloc) fn cut_poststop(alloc: &Allocation) {
    let mut inner = alloc.inner.lock();
    if inner.desired != DesiredStatus::Stop || !inner.run_poststop {
        return;
    }
    inner.run_poststop = false;
    inner.poststop_cut = true;
    let poststop = poststop_names(alloc);
    for (name, r) in &inner.runners {
        if poststop.contains(name) {
            // The group's delay was waited before the main tasks' kill.
            r.send(TaskCommand::Kill {
                group_delay_ends: None,
            });
        }
    }
    drop(inner);
    for name in &poststop {
        let mut s = alloc.tasks[name].lock();
        if never_ran(&s) {
            s.state = TaskStatus::Dead;
        }
    }
    log::info!(
        "alloc {}: stopped again, its poststop tasks are killed",
        alloc.id
    );
}

/// Ends whatever of a stopped allocation still runs, its poststop tasks too (a purge forgets it):
/// its runners are told to kill and its gate is stopped and returned, to be joined.
#[must_use = "the gate thread must be joined"]
pub(in crate::alloc) fn end_all(alloc: &Allocation) -> Option<Worker<()>> {
    let mut inner = alloc.inner.lock();
    inner.run_poststop = false;
    let mut gate = inner.gate.take();
    if let Some(g) = &mut gate {
        g.stop();
    }
    let kill = stop_kill(alloc, &inner);
    for r in inner.runners.values() {
        r.send(kill.clone());
    }
    drop(inner);
    for state in alloc.tasks.values() {
        let mut s = state.lock();
        if never_ran(&s) {
            s.state = TaskStatus::Dead;
        }
    }
    gate
}

/// Joins stopped gate threads: each returns as soon as it sees its stop channel disconnect.
pub(in crate::alloc) fn join_gates(gates: impl IntoIterator<Item = Worker<()>>) {
    for gate in gates {
        gate.join();
    }
}
