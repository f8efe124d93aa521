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

use super::procfs::{live_groups, other_processes, same_process_alive};
use super::signal_group;

/// How long a process may take to die once SIGKILLed (it dies when it next runs) before the agent
/// goes on anyway: a leftover must be gone before the task's new process starts.
pub const SIGKILL_WAIT: Duration = Duration::from_secs(2);

/// Stops the process group led by `pid`, which is not a child of this agent (an agent that crashed
/// started it): the kill signal, up to `timeout` for it to go, then SIGKILL for the whole group.
pub fn stop_foreign_group(pid: i32, start_ticks: u64, signal: i32, timeout: Duration) {
    let _ = signal_group(pid, signal);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && same_process_alive(pid, start_ticks) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = signal_group(pid, libc::SIGKILL);
    let deadline = Instant::now() + SIGKILL_WAIT;
    while Instant::now() < deadline && same_process_alive(pid, start_ticks) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops process groups found by [`find_task_processes`], each with its own signal, all at once:
/// the signals, up to `wait` for every group to empty, then SIGKILL for the groups, and
/// [`SIGKILL_WAIT`] at most for them to go. Returns once no member is left (or the waits ran out).
pub fn stop_groups(signals: &BTreeMap<i32, i32>, wait: Duration) {
    for (&pgid, &signal) in signals {
        let _ = signal_group(pgid, signal);
    }
    let pgids: BTreeSet<i32> = signals.keys().copied().collect();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && !live_groups(&pgids).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pgid in &pgids {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
    // Only once they are gone may the tasks start again: never two processes of one task.
    let deadline = Instant::now() + SIGKILL_WAIT;
    while Instant::now() < deadline && !live_groups(&pgids).is_empty() {
        std::thread::sleep(Duration::from_millis(5));
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
    for pid in other_processes() {
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
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
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
