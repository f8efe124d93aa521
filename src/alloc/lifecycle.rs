//! The order of an allocation's tasks (jobspec.md `lifecycle`, Nomad's task hook coordinator and
//! its alloc runner's kill rules): prestart tasks first, the main tasks once every prestart task
//! completed and every prestart sidecar runs, poststart tasks once every main task started,
//! poststop tasks once everything else is dead; the sidecars are killed when the main tasks are
//! dead, everything when the leader ends or a task fails for good. A stopped allocation follows
//! [`plan_stop`] instead: its tasks are killed in their order and its poststop tasks run once the
//! others are dead (`super::stop`). Every kill goes by Nomad's order ([`kill_stage`], its alloc
//! runner's `killTasks`): the leader alone first, then the other tasks but the sidecars, then the
//! sidecars, each stage once the one before is dead.
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
//! the allocation is stopped while its tasks had not begun (the stop kills the runners and joins
//! it) or at shutdown (the tasks run on; the next agent plans again from the states). A stop of an
//! allocation whose tasks began leaves the gate running and wakes it (the allocation keeps a
//! sender of `changed`): it plans by [`plan_stop`] until every task is dead. An agent restarted in
//! the middle re-attaches the stopped allocation's live tasks and its gate plans on from their
//! states; the kill of the current stage is sent again (the gate's memory of who was told is
//! gone), so a task being killed gets a second `Killing`.

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

/// The tasks a kill takes now, of `live` (launched, not dead, no poststop task), in Nomad's order
/// (its alloc runner's `killTasks`): a live leader alone; once it is dead, every other task but the
/// sidecars (main tasks and prestart or poststart tasks still running) together; once they are all
/// dead, the sidecars.
fn kill_stage<'a>(live: &[&'a Member]) -> Vec<&'a Member> {
    if let Some(leader) = live.iter().find(|m| m.leader) {
        return vec![leader];
    }
    let not_sidecars: Vec<&Member> = live
        .iter()
        .copied()
        .filter(|m| !m.role.is_sidecar())
        .collect();
    if not_sidecars.is_empty() {
        live.to_vec()
    } else {
        not_sidecars
    }
}

/// Fills `out`'s kill of `live` (the tasks but the poststop tasks that are not dead): the ones that
/// never launched are abandoned at once, the others killed stage by stage ([`kill_stage`]), each
/// once (`killed`: tasks already told).
fn kill_in_order(out: &mut Plan, live: &[&Member], killed: &BTreeSet<String>) {
    let (launched, never): (Vec<&Member>, Vec<&Member>) =
        live.iter().copied().partition(|m| m.launched);
    out.abandon = never.iter().map(|m| m.name.clone()).collect();
    out.kill = kill_stage(&launched)
        .into_iter()
        .filter(|m| !killed.contains(&m.name))
        .map(|m| m.name.clone())
        .collect();
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
        kill_in_order(&mut out, &live, killed);
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

/// The next steps of a stopped allocation whose tasks began (`super::stop`): its tasks but the
/// poststop tasks are killed in Nomad's order ([`kill_stage`]); each kill's event is the runner's
/// `Killing`, and once a leader is dead the tasks killed after it first get `Leader Task Dead`, as
/// Nomad's alloc runner gives them when it sees the dead leader. Once they are all dead the poststop
/// tasks that have not run start (unless a second stop cut them: they are dead), and nothing else
/// does. A poststop task that ran is not started again.
pub(super) fn plan_stop(members: &[Member], killed: &BTreeSet<String>) -> Plan {
    let dead = |m: &Member| m.status == TaskStatus::Dead;
    if members.iter().all(dead) {
        return Plan {
            done: true,
            ..Plan::default()
        };
    }
    let (poststop, others): (Vec<&Member>, Vec<&Member>) =
        members.iter().partition(|m| m.role == Role::Poststop);
    let live: Vec<&Member> = others.iter().copied().filter(|m| !dead(m)).collect();
    let mut out = Plan::default();
    if live.is_empty() {
        out.start = poststop
            .iter()
            .filter(|m| !m.launched && !dead(m))
            .map(|m| m.name.clone())
            .collect();
        return out;
    }
    kill_in_order(&mut out, &live, killed);
    if others.iter().any(|m| m.leader && m.launched && dead(m)) {
        out.cause = Some(Cause::LeaderDead);
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
    fn the_leader_ending_kills_the_main_tasks_then_the_sidecars() {
        let mut leader = ended(m("leader", Role::Main), false);
        leader.leader = true;
        let mut all = [
            leader,
            running(m("worker", Role::Main)),
            running(m("proxy", Role::PrestartSidecar)),
        ];
        let p = plan(&all, &none());
        assert_eq!(p.cause, Some(Cause::LeaderDead));
        assert_eq!(
            p.kill,
            names(&["worker"]),
            "the sidecar waits for the main tasks"
        );
        let told = BTreeSet::from(["worker".to_string()]);
        assert!(plan(&all, &told).kill.is_empty());
        all[1] = ended(all[1].clone(), false);
        let p = plan(&all, &told);
        assert_eq!(
            (p.cause, p.kill),
            (Some(Cause::LeaderDead), names(&["proxy"]))
        );
    }

    #[test]
    fn a_failed_task_kills_a_live_leader_first() {
        let mut leader = running(m("leader", Role::Main));
        leader.leader = true;
        let all = [
            leader,
            ended(m("worker", Role::Main), true),
            running(m("other", Role::Main)),
        ];
        let p = plan(&all, &none());
        assert_eq!(p.cause, Some(Cause::SiblingFailed("worker".into())));
        assert_eq!(p.kill, names(&["leader"]));
    }

    #[test]
    fn a_stop_kills_the_leader_then_the_others_then_the_sidecars_then_runs_poststop() {
        let mut leader = running(m("leader", Role::Main));
        leader.leader = true;
        let mut all = [
            leader,
            running(m("proxy", Role::PrestartSidecar)),
            running(m("main", Role::Main)),
            running(m("after", Role::Poststart)),
            m("cleanup", Role::Poststop),
        ];
        let mut told = none();
        let p = plan_stop(&all, &told);
        assert_eq!((p.cause, &p.kill), (None, &names(&["leader"])));
        told.insert("leader".into());
        assert_eq!(
            plan_stop(&all, &told),
            Plan::default(),
            "wait for the leader"
        );
        all[0] = ended(all[0].clone(), false);
        let p = plan_stop(&all, &told);
        assert_eq!(p.cause, Some(Cause::LeaderDead));
        assert_eq!(p.kill, names(&["main", "after"]));
        told.extend(p.kill);
        all[2] = ended(all[2].clone(), false);
        assert!(
            plan_stop(&all, &told).kill.is_empty(),
            "a poststart task runs"
        );
        all[3] = ended(all[3].clone(), false);
        assert_eq!(plan_stop(&all, &told).kill, names(&["proxy"]));
        told.insert("proxy".into());
        assert!(plan_stop(&all, &told).start.is_empty(), "the sidecar runs");
        all[1] = ended(all[1].clone(), false);
        let p = plan_stop(&all, &told);
        assert_eq!((p.start, p.kill), (names(&["cleanup"]), vec![]));
        all[4].launched = true;
        assert_eq!(plan_stop(&all, &told), Plan::default(), "started once");
        all[4] = ended(all[4].clone(), false);
        assert!(plan_stop(&all, &told).done);
    }

    #[test]
    fn a_stop_without_a_leader_kills_the_main_tasks_first() {
        let all = [
            running(m("proxy", Role::PoststartSidecar)),
            running(m("a", Role::Main)),
            running(m("b", Role::Main)),
            m("never", Role::Poststart),
        ];
        let p = plan_stop(&all, &none());
        assert_eq!((p.cause, p.kill), (None, names(&["a", "b"])));
        assert_eq!(p.abandon, names(&["never"]));
    }

    #[test]
    fn a_restored_stop_kills_its_stage_again() {
        // After an agent restart the gate's memory of whom it told is gone: the live stage is
        // told again, the tasks already dead are not.
        let all = [
            ended(m("a", Role::Main), false),
            running(m("b", Role::Main)),
            running(m("proxy", Role::PrestartSidecar)),
        ];
        assert_eq!(plan_stop(&all, &none()).kill, names(&["b"]));
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
