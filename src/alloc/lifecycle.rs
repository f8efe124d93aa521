//! The order of an allocation's tasks (jobspec.md `lifecycle`, Nomad's task hook coordinator and
//! its alloc runner's kill rules): prestart tasks first, the main tasks once every prestart task
//! completed and every prestart sidecar runs, poststart tasks once every main task started,
//! poststop tasks once everything else is dead; the sidecars are killed when the main tasks are
//! dead, everything when the leader ends or a task fails for good. A stopped allocation follows
//! [`plan_stop`] instead: its poststop tasks run once the stop killed the others (`super::stop`).
//!
//! [`plan`] is the rule, a pure function of the tasks' states: nothing about the stage is kept
//! apart from them, so an allocation restored after an agent restart resumes where its task
//! states say (a completed prestart task is dead and successful, so it does not run again; a
//! running main task is re-attached by its own runner).
//!
//! Protocol: an allocation with a `lifecycle` or `leader` task keeps its gate thread
//! (`gate-<alloc>`, [`super::gate`]) once its volumes are ready. Its runners get a `changed`
//! sender (bounded 1, `try_send`: never blocks a runner) that they ping after every state change;
//! the gate selects over it, its stop channel and the agent's shutdown, and on each ping reads the
//! task states (one short lock each), plans, and acts: it starts runners (under the allocation's
//! inner lock, as the volume gate does), pushes the kill's event into a task's state and sends its
//! runner `Kill`, or marks a task that never started dead. It returns once every task is dead, when
//! the allocation is stopped with no poststop task to run (the stop kills the runners and joins
//! it) or at shutdown (the tasks run on; the next agent plans again from the states). A stop that
//! leaves poststop tasks to run leaves the gate running: it plans by [`plan_stop`] until every
//! task is dead.

use std::collections::BTreeSet;

use crate::jobspec::lifecycle::Hook;
use crate::jobspec::{Task, TaskGroup};
use crate::task::events::{TaskEvent, TaskStatus};

/// What a task is in its allocation's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Runs to completion before the main tasks start.
    Prestart,
    /// Starts before the main tasks and runs beside them.
    PrestartSidecar,
    Main,
    /// Starts once every main task started.
    Poststart,
    PoststartSidecar,
    /// Starts once every other task is dead.
    Poststop,
}

impl Role {
    pub(super) fn of(task: &Task) -> Role {
        match task.lifecycle {
            None => Role::Main,
            Some(l) => match (l.hook, l.sidecar) {
                (Hook::Prestart, false) => Role::Prestart,
                (Hook::Prestart, true) => Role::PrestartSidecar,
                (Hook::Poststart, false) => Role::Poststart,
                (Hook::Poststart, true) => Role::PoststartSidecar,
                (Hook::Poststop, _) => Role::Poststop,
            },
        }
    }

    fn is_sidecar(self) -> bool {
        matches!(self, Role::PrestartSidecar | Role::PoststartSidecar)
    }
}

/// Whether a group's tasks are ordered (it has a `lifecycle` block or a leader); one that is not
/// starts every task at once and needs no coordinator.
pub(super) fn is_ordered(group: &TaskGroup) -> bool {
    group
        .tasks
        .iter()
        .any(|t| t.lifecycle.is_some() || t.leader)
}

/// One task as the plan sees it.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub name: String,
    pub role: Role,
    pub leader: bool,
    pub status: TaskStatus,
    pub failed: bool,
    /// It has run (its `StartedAt` is set).
    pub started: bool,
    /// It has a runner, now or under an earlier agent (it has events).
    pub launched: bool,
}

/// Why the plan kills tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cause {
    MainDead,
    LeaderDead,
    SiblingFailed(String),
}

impl Cause {
    pub(super) fn event(&self, time: i64) -> TaskEvent {
        match self {
            Cause::MainDead => TaskEvent::main_dead(time),
            Cause::LeaderDead => TaskEvent::leader_dead(time),
            Cause::SiblingFailed(name) => TaskEvent::sibling_failed(time, name),
        }
    }
}

/// What to do now.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// Tasks whose turn it is: start their runners.
    pub start: Vec<String>,
    /// Why `kill` and `abandon` are done.
    pub cause: Option<Cause>,
    /// Running tasks to kill (not already in `killed`).
    pub kill: Vec<String>,
    /// Tasks that never started and never will: dead without running.
    pub abandon: Vec<String>,
    /// Every task is dead: the allocation's order is over.
    pub done: bool,
}

/// The allocation's next steps from its tasks' states; `killed`: tasks already told to die.
pub(super) fn plan(members: &[Member], killed: &BTreeSet<String>) -> Plan {
    let dead = |m: &&Member| m.status == TaskStatus::Dead;
    if members.iter().all(|m| m.status == TaskStatus::Dead) {
        return Plan {
            done: true,
            ..Plan::default()
        };
    }
    let others: Vec<&Member> = members
        .iter()
        .filter(|m| m.role != Role::Poststop)
        .collect();
    let live: Vec<&Member> = others.iter().copied().filter(|m| !dead(m)).collect();
    // Nomad's order of precedence: a dead leader, then a failed task, then the main tasks' end.
    let cause = if others.iter().any(|m| m.leader && dead(m) && m.launched) {
        Some(Cause::LeaderDead)
    } else if let Some(f) = others.iter().find(|m| dead(m) && m.failed) {
        Some(Cause::SiblingFailed(f.name.clone()))
    } else if !live.is_empty() && live.iter().all(|m| m.role.is_sidecar()) {
        Some(Cause::MainDead)
    } else {
        None
    };
    let mut out = Plan::default();
    if let Some(cause) = cause {
        for m in &live {
            if !m.launched {
                out.abandon.push(m.name.clone());
            } else if !killed.contains(&m.name) {
                out.kill.push(m.name.clone());
            }
        }
        out.cause = Some(cause);
    } else {
        let of = |role: Role| others.iter().filter(move |m| m.role == role);
        let prestart_done = of(Role::Prestart).all(|m| dead(m) && !m.failed)
            && of(Role::PrestartSidecar).all(|m| m.started);
        let main_started = of(Role::Main).all(|m| m.started);
        for m in &live {
            let turn = match m.role {
                Role::Prestart | Role::PrestartSidecar => true,
                Role::Main => prestart_done,
                Role::Poststart | Role::PoststartSidecar => prestart_done && main_started,
                Role::Poststop => false,
            };
            if turn && !m.launched {
                out.start.push(m.name.clone());
            }
        }
    }
    if live.is_empty() {
        let poststop = members.iter().filter(|m| m.role == Role::Poststop);
        out.start.extend(
            poststop
                .filter(|m| !m.launched && !dead(m))
                .map(|m| m.name.clone()),
        );
    }
    out
}

/// The next steps of a stopped allocation whose poststop tasks are to run (`super::stop`): the
/// stop killed every other task; once they are all dead the poststop tasks that have not run
/// start, and nothing else does. A poststop task that ran is not started again.
pub(super) fn plan_stop(members: &[Member]) -> Plan {
    let dead = |m: &Member| m.status == TaskStatus::Dead;
    if members.iter().all(dead) {
        return Plan {
            done: true,
            ..Plan::default()
        };
    }
    let (poststop, others): (Vec<&Member>, Vec<&Member>) =
        members.iter().partition(|m| m.role == Role::Poststop);
    let mut out = Plan::default();
    if others.iter().all(|m| dead(m)) {
        out.start = poststop
            .iter()
            .filter(|m| !m.launched && !dead(m))
            .map(|m| m.name.clone())
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::{Dead, Pending, Running};

    fn m(name: &str, role: Role) -> Member {
        Member {
            name: name.to_string(),
            role,
            leader: false,
            status: Pending,
            failed: false,
            started: false,
            launched: false,
        }
    }

    fn running(mut m: Member) -> Member {
        m.status = Running;
        m.started = true;
        m.launched = true;
        m
    }

    fn ended(mut m: Member, failed: bool) -> Member {
        m.status = Dead;
        m.failed = failed;
        m.started = true;
        m.launched = true;
        m
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn prestart_tasks_first_then_main_then_poststart() {
        let all = [
            m("init", Role::Prestart),
            m("proxy", Role::PrestartSidecar),
            m("main", Role::Main),
            m("after", Role::Poststart),
            m("cleanup", Role::Poststop),
        ];
        assert_eq!(plan(&all, &none()).start, names(&["init", "proxy"]));

        let mut now = all.clone();
        now[0] = running(now[0].clone());
        now[1] = running(now[1].clone());
        // The prestart task still runs: main waits.
        assert_eq!(plan(&now, &none()), Plan::default());
        now[0] = ended(now[0].clone(), false);
        assert_eq!(plan(&now, &none()).start, names(&["main"]));
        now[2].launched = true;
        assert_eq!(plan(&now, &none()), Plan::default());
        now[2] = running(now[2].clone());
        assert_eq!(plan(&now, &none()).start, names(&["after"]));
    }

    #[test]
    fn a_prestart_sidecar_must_run_before_main_starts() {
        let mut all = [m("proxy", Role::PrestartSidecar), m("main", Role::Main)];
        all[0].launched = true;
        assert_eq!(plan(&all, &none()), Plan::default());
        all[0] = running(all[0].clone());
        assert_eq!(plan(&all, &none()).start, names(&["main"]));
    }

    #[test]
    fn a_failed_prestart_abandons_main_and_kills_the_rest() {
        let all = [
            ended(m("init", Role::Prestart), true),
            running(m("proxy", Role::PrestartSidecar)),
            m("main", Role::Main),
            m("cleanup", Role::Poststop),
        ];
        let p = plan(&all, &none());
        assert_eq!(p.cause, Some(Cause::SiblingFailed("init".into())));
        assert_eq!((p.kill, p.abandon), (names(&["proxy"]), names(&["main"])));
        assert!(p.start.is_empty());
        // Once told, a task is not killed twice.
        let p = plan(&all, &BTreeSet::from(["proxy".to_string()]));
        assert!(p.kill.is_empty());
    }

    #[test]
    fn main_tasks_dead_kills_the_sidecars_then_poststop_runs() {
        let mut all = [
            running(m("proxy", Role::PrestartSidecar)),
            ended(m("main", Role::Main), false),
            m("cleanup", Role::Poststop),
        ];
        let p = plan(&all, &none());
        assert_eq!(p.cause, Some(Cause::MainDead));
        assert_eq!(p.kill, names(&["proxy"]));
        assert!(p.start.is_empty(), "poststop waits for the sidecar");
        all[0] = ended(all[0].clone(), false);
        assert_eq!(plan(&all, &none()).start, names(&["cleanup"]));
        all[2] = ended(all[2].clone(), false);
        assert!(plan(&all, &none()).done);
    }

    #[test]
    fn a_running_poststart_task_keeps_the_sidecars() {
        let all = [
            running(m("proxy", Role::PrestartSidecar)),
            ended(m("main", Role::Main), false),
            running(m("after", Role::Poststart)),
        ];
        assert_eq!(plan(&all, &none()), Plan::default());
    }

    #[test]
    fn the_leader_ending_kills_the_others() {
        let mut leader = ended(m("leader", Role::Main), false);
        leader.leader = true;
        let all = [
            leader,
            running(m("worker", Role::Main)),
            running(m("proxy", Role::PrestartSidecar)),
        ];
        let p = plan(&all, &none());
        assert_eq!(p.cause, Some(Cause::LeaderDead));
        assert_eq!(p.kill, names(&["worker", "proxy"]));
    }

    #[test]
    fn a_stop_runs_the_poststop_tasks_once_the_others_are_dead() {
        let mut all = [
            running(m("proxy", Role::PrestartSidecar)),
            running(m("main", Role::Main)),
            m("after", Role::Poststart),
            m("cleanup", Role::Poststop),
        ];
        // Being killed by the stop: nothing starts, not even the poststart task's turn.
        assert_eq!(plan_stop(&all), Plan::default());
        all[1] = ended(all[1].clone(), false);
        assert_eq!(plan_stop(&all), Plan::default(), "the sidecar still runs");
        all[0] = ended(all[0].clone(), false);
        all[2].status = Dead;
        assert_eq!(plan_stop(&all).start, names(&["cleanup"]));
        all[3].launched = true;
        assert_eq!(plan_stop(&all), Plan::default(), "started once");
        all[3] = ended(all[3].clone(), false);
        assert!(plan_stop(&all).done);
    }

    #[test]
    fn a_restored_allocation_resumes_at_its_stage() {
        // After an agent restart: the prestart task completed, main runs (re-attached by its
        // runner, so launched): nothing to start again.
        let all = [
            ended(m("init", Role::Prestart), false),
            running(m("main", Role::Main)),
        ];
        assert_eq!(plan(&all, &none()), Plan::default());
    }
}
