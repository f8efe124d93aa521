//! Carrying out an ordered allocation's plan (`alloc::lifecycle`, pure) on its gate thread:
//! each task started in its turn, what the plan says killed (a stop's kills in Nomad's order,
//! [`super::stop`]), until every task is dead.

use crossbeam_channel::{bounded, select, Receiver};
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::alloc::lifecycle::{self, Member, Role};
use crate::alloc::manager::AllocManager;
use crate::alloc::model::Allocation;
use crate::jobspec::Task;
use crate::records::DesiredStatus;
use crate::task::events::{now_nanos, now_rfc3339, TaskStatus};
use crate::task::runner::TaskCommand;
use crate::thread::Never;

impl AllocManager {
    /// Runs an ordered allocation's tasks in their turn ([`lifecycle::plan`]) until every task is
    /// dead, the allocation is stopped or the agent shuts down.
    pub(super) fn coordinate(
        &self,
        alloc: &Arc<Allocation>,
        stop: &Receiver<Never>,
        restored: bool,
    ) {
        let (changed_tx, changed) = bounded::<()>(1);
        let mut deps = self.engine.deps.clone();
        // A stop wakes the gate to carry out its order ([`super::stop`]).
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
