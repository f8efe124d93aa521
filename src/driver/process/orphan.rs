//! Processes this agent did not start: task processes left running by an agent that crashed.
//!
//! They are nobody's child here, so there is no pidfd to wait on and no status to reap: they are
//! found through their environment in `/proc`, trusted only by PID *and* start time (or by
//! process group, while the group has members), and their end is awaited by polling `/proc`.
//! This runs once per task at agent start, so a short poll is the simple way to wait.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};

use super::procfs::{live_groups, other_processes, same_process_alive};
use super::signal_group;
use crate::thread::Never;

/// How long a process may take to die once SIGKILLed (it dies when it next runs) before the agent
/// goes on anyway: a leftover must be gone before the task's new process starts.
pub const SIGKILL_WAIT: Duration = Duration::from_secs(2);

/// Stops the process group led by `pid`, which is not a child of this agent (an agent that crashed
/// started it): the kill signal, up to `timeout` for it to go, then SIGKILL for the whole group.
/// Returns false, leaving the process to the next agent, when `cancel` disconnects first (the
/// agent is stopping): a stop signal never waits out a kill timeout.
pub fn stop_foreign_group(
    pid: i32,
    start_ticks: u64,
    signal: i32,
    timeout: Duration,
    cancel: &Receiver<Never>,
) -> bool {
    let _ = signal_group(pid, signal);
    let gone = || !same_process_alive(pid, start_ticks);
    if poll_until(Instant::now() + timeout, POLL, cancel, gone).is_none() {
        return false;
    }
    let _ = signal_group(pid, libc::SIGKILL);
    poll_until(Instant::now() + SIGKILL_WAIT, POLL_AFTER_KILL, cancel, gone).is_some()
}

/// Stops process groups found by [`find_task_processes`], each with its own signal, all at once:
/// the signals, up to `wait` for every group to empty, then SIGKILL for the groups, and
/// [`SIGKILL_WAIT`] at most for them to go. Returns true once no member is left (or the waits ran
/// out); false, at once, when `cancel` disconnects first: the groups that are left are the next
/// agent's to stop.
pub fn stop_groups(signals: &BTreeMap<i32, i32>, wait: Duration, cancel: &Receiver<Never>) -> bool {
    for (&pgid, &signal) in signals {
        let _ = signal_group(pgid, signal);
    }
    let pgids: BTreeSet<i32> = signals.keys().copied().collect();
    let empty = || live_groups(&pgids).is_empty();
    if poll_until(Instant::now() + wait, POLL, cancel, empty).is_none() {
        return false;
    }
    for &pgid in &pgids {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
    // Only once they are gone may the tasks start again: never two processes of one task.
    poll_until(
        Instant::now() + SIGKILL_WAIT,
        POLL_AFTER_KILL,
        cancel,
        empty,
    )
    .is_some()
}

const POLL: Duration = Duration::from_millis(20);
const POLL_AFTER_KILL: Duration = Duration::from_millis(5);

/// Checks `done` every `every` until it holds or `deadline` passes: `Some(whether it held)`;
/// `None` as soon as `cancel` disconnects.
fn poll_until(
    deadline: Instant,
    every: Duration,
    cancel: &Receiver<Never>,
    done: impl Fn() -> bool,
) -> Option<bool> {
    loop {
        if done() {
            return Some(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Some(false);
        }
        select! {
            recv(cancel) -> _ => return None,
            default(every.min(left)) => {}
        }
    }
}

/// A process of a task, found through `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pid: i32,
    pub pgid: i32,
    pub alloc_id: String,
    pub task: String,
}

/// Finds processes whose environment marks them as a task (`NOMAD_ALLOC_ID` and
/// `NOMAD_TASK_NAME`) of one of `alloc_ids`, or of any allocation whose directory
/// (`NOMAD_ALLOC_DIR`) lies under `alloc_root`, this agent's `<data_dir>/alloc`. After an agent
/// crash the first finds a task process even when the crash came before its PID reached the state
/// file; the second finds the task of an allocation the state file no longer holds: a job purged
/// while its task was still stopping (waiting out its `kill_timeout`) when the agent died.
pub fn find_task_processes(alloc_ids: &HashSet<String>, alloc_root: &Path) -> Vec<Leftover> {
    let mut found = Vec::new();
    // A relative root would match relative paths a task set for itself.
    let alloc_root = alloc_root.is_absolute().then_some(alloc_root);
    // A container's processes (docker tasks carry NOMAD_ALLOC_ID too) are the engine's: they
    // run in a PID namespace of their own, and the docker driver re-attaches to them.
    let own_pid_ns = std::fs::read_link("/proc/self/ns/pid").ok();
    for pid in other_processes() {
        if own_pid_ns.is_some()
            && std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok() != own_pid_ns
        {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut alloc = None;
        let mut task = None;
        let mut alloc_dir = None;
        for var in environ.split(|b| *b == 0) {
            if let Some(v) = var.strip_prefix(b"NOMAD_ALLOC_ID=") {
                alloc = Some(String::from_utf8_lossy(v).into_owned());
            } else if let Some(v) = var.strip_prefix(b"NOMAD_TASK_NAME=") {
                task = Some(String::from_utf8_lossy(v).into_owned());
            } else if let Some(v) = var.strip_prefix(b"NOMAD_ALLOC_DIR=") {
                alloc_dir = Some(PathBuf::from(std::ffi::OsStr::from_bytes(v)));
            }
        }
        let (Some(alloc_id), Some(task)) = (alloc, task) else {
            continue;
        };
        let ours = |dir: &Path| alloc_root.is_some_and(|root| dir.starts_with(root));
        if !alloc_ids.contains(&alloc_id) && !alloc_dir.as_deref().is_some_and(ours) {
            continue;
        }
        // SAFETY: getpgid takes a pid and returns its group or -1.
        let pgid = unsafe { libc::getpgid(pid) };
        if pgid > 0 {
            found.push(Leftover {
                pid,
                pgid,
                alloc_id,
                task,
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// A process group that ignores SIGTERM, its leader's PID and start time once it ignores it.
    fn stubborn() -> (std::process::Child, i32, u64) {
        let ready = std::env::temp_dir().join(format!("nw-stubborn-{}", uuid::Uuid::new_v4()));
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap '' TERM; touch {}; exec sleep 300",
                ready.display()
            ))
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_file(&ready);
        let ticks = super::super::process_start_ticks(pid).unwrap();
        (child, pid, ticks)
    }

    /// A stop signal ends the wait for a leftover at once, however long its kill timeout, and
    /// leaves the process as it is; without one the wait ends at the timeout with SIGKILL.
    #[test]
    fn waits_for_leftovers_end_at_once_when_the_agent_stops() {
        let stopping = crossbeam_channel::bounded::<Never>(0).1;
        let (mut child, pid, ticks) = stubborn();
        let started = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(!stop_foreign_group(
            pid,
            ticks,
            libc::SIGTERM,
            hour,
            &stopping
        ));
        assert!(!stop_groups(
            &BTreeMap::from([(pid, libc::SIGTERM)]),
            hour,
            &stopping
        ));
        assert!(started.elapsed() < Duration::from_secs(60), "it waited");
        assert!(
            same_process_alive(pid, ticks),
            "a cancelled stop kills nothing"
        );
        let never = crossbeam_channel::never();
        let short = Duration::from_millis(50);
        assert!(stop_foreign_group(pid, ticks, libc::SIGTERM, short, &never));
        let _ = child.wait();
        let (mut child, pid, _) = stubborn();
        assert!(stop_groups(
            &BTreeMap::from([(pid, libc::SIGTERM)]),
            short,
            &never
        ));
        let _ = child.wait();
    }

    #[test]
    fn leftovers_are_found_by_allocation_id_or_by_a_directory_under_this_agent() {
        let root = PathBuf::from(format!("/nw-data-{}/alloc", uuid::Uuid::new_v4()));
        let id = || uuid::Uuid::new_v4().to_string();
        let (known, purged, foreign) = (id(), id(), id());
        let spawn = |alloc: &str, dir: PathBuf| {
            Command::new("sleep")
                .arg("30")
                .env("NOMAD_ALLOC_ID", alloc)
                .env("NOMAD_TASK_NAME", "t")
                .env("NOMAD_ALLOC_DIR", dir)
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let mut children = [
            spawn(&known, PathBuf::from("/elsewhere/alloc").join(&known)),
            spawn(&purged, root.join(&purged).join("alloc")),
            spawn(&foreign, PathBuf::from("/other/alloc").join(&foreign)),
        ];
        // The environment is in /proc once the child has exec'd.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while children.iter().any(|c| {
            std::fs::read(format!("/proc/{}/environ", c.id()))
                .map(|e| !e.windows(14).any(|w| w == b"NOMAD_ALLOC_ID"))
                .unwrap_or(true)
        }) && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let found = find_task_processes(&HashSet::from([known.clone()]), &root);
        for c in &mut children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let mut allocs: Vec<&str> = found.iter().map(|l| l.alloc_id.as_str()).collect();
        allocs.sort();
        let mut want = vec![known.as_str(), purged.as_str()];
        want.sort();
        assert_eq!(allocs, want, "{found:?}");
        assert!(found.iter().all(|l| l.task == "t" && l.pgid == l.pid));
    }
}
