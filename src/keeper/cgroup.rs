//! A task's cgroup as the keeper uses it: the child joins it before `execve` (so not one
//! instruction of the task runs outside it), and when the task's main process is reaped the
//! keeper kills every process left in it and reads whether the kernel OOM-killed the task.
//!
//! The agent makes the cgroup and writes its limits (`nodeward::cgroup`); it hands the keeper the
//! paths in [`crate::StartTask::cgroup`]. The agent's side also calls [`kill_all`] before it
//! removes a cgroup. Everything here runs on the keeper's one thread, or in the child between
//! `clone` and `execve` ([`Join`]: no allocation there).

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Where a task's cgroup is: on v2 one directory; on v1 one per controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupPaths {
    pub v2: bool,
    /// Every directory the task's process joins (v2 `cgroup.procs`, v1 `tasks`).
    pub join: Vec<PathBuf>,
    /// The memory controller's directory: OOM kills are counted there.
    pub memory: PathBuf,
    /// Where the processes are killed from: the v2 directory, or v1's freezer directory.
    pub kill: PathBuf,
}

/// How long a v1 freeze may take before the processes are killed anyway (a freeze waits for
/// every task to reach the refrigerator; one in an uninterruptible sleep delays it).
const FREEZE_WAIT: Duration = Duration::from_millis(200);

/// The files the child writes `0` to, prepared before the `clone`: v2's `cgroup.procs`, v1's
/// `tasks`. The child has one thread (it was just forked), so moving that thread moves the
/// process; and a v1 `tasks` write of the writer itself skips the kernel's threadgroup lock,
/// whose write side waits for an RCU grace period (5 ms here, 18 ms under load): writing
/// `cgroup.procs` made every v1 start and restart wait that long.
pub(crate) struct Join {
    files: Vec<CString>,
}

impl Join {
    pub(crate) fn new(paths: Option<&CgroupPaths>) -> io::Result<Join> {
        let file = if paths.is_some_and(|p| p.v2) {
            "cgroup.procs"
        } else {
            "tasks"
        };
        let files = paths
            .map(|p| p.join.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|d| {
                CString::new(d.join(file).into_os_string().into_encoded_bytes())
                    .map_err(|_| io::Error::other("the task's cgroup path has a NUL byte"))
            })
            .collect::<io::Result<_>>()?;
        Ok(Join { files })
    }

    /// Moves the calling process into every cgroup; the OS error of the first that fails.
    ///
    /// # Safety
    /// Async-signal-safe: only system calls on memory prepared in [`Join::new`].
    pub(crate) unsafe fn join(&self) -> Result<(), i32> {
        for f in &self.files {
            // SAFETY: open/write/close on a NUL-terminated path and a static buffer.
            unsafe {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(errno());
                }
                // "0" is the writer itself, on v1 and v2.
                let n = libc::write(fd, c"0".as_ptr().cast(), 1);
                let e = errno();
                libc::close(fd);
                if n != 1 {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// How many processes the kernel's OOM killer has killed in the cgroup so far: v2's
/// `memory.events` `oom_kill`, v1's `memory.oom_control` `oom_kill` (Linux 4.13+), else v1's
/// `memory.failcnt` (how often the limit was hit: the best older kernels tell).
pub fn oom_kills(p: &CgroupPaths) -> Option<u64> {
    let field = |file: &str, key: &str| -> Option<u64> {
        let text = std::fs::read_to_string(p.memory.join(file)).ok()?;
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    };
    if p.v2 {
        return field("memory.events", "oom_kill");
    }
    field("memory.oom_control", "oom_kill").or_else(|| {
        std::fs::read_to_string(p.memory.join("memory.failcnt"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// The PIDs in a cgroup directory's `cgroup.procs`.
pub fn procs(dir: &Path) -> io::Result<Vec<i32>> {
    Ok(std::fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

/// Thaws the cgroup. A freeze that was never undone (the agent killed with SIGKILL between
/// [`kill_all`]'s freeze and thaw) would stop the next process that joins it before its
/// `execve`, and with it the keeper, which waits for that `execve` (`CLONE_VFORK`): every task of
/// the node would go unwatched. A cgroup without a freezer (or gone) has nothing to thaw.
pub fn thaw(p: &CgroupPaths) -> io::Result<()> {
    let (file, thawed) = if p.v2 {
        ("cgroup.freeze", "0")
    } else {
        ("freezer.state", "THAWED")
    };
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p.kill.join(file));
    match opened {
        Ok(mut f) => io::Write::write_all(&mut f, thawed.as_bytes()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Kills every process in the cgroup: v2's `cgroup.kill` (Linux 5.14+); otherwise freeze, SIGKILL
/// each process, thaw (so that none can fork a child the kill would miss). A cgroup that is gone
/// has nothing to kill.
pub fn kill_all(p: &CgroupPaths) -> io::Result<()> {
    if !p.kill.exists() {
        return Ok(());
    }
    if p.v2 && std::fs::write(p.kill.join("cgroup.kill"), "1").is_ok() {
        return Ok(());
    }
    let (freeze, frozen, thaw) = if p.v2 {
        (("cgroup.freeze", "1"), ("cgroup.events", "frozen 1"), "0")
    } else {
        (
            ("freezer.state", "FROZEN"),
            ("freezer.state", "FROZEN"),
            "THAWED",
        )
    };
    let froze = std::fs::write(p.kill.join(freeze.0), freeze.1).is_ok();
    if froze {
        let deadline = Instant::now() + FREEZE_WAIT;
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(p.kill.join(frozen.0)).unwrap_or_default();
            if state.lines().any(|l| l.trim() == frozen.1) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let result = procs(&p.kill).map(|pids| {
        for pid in pids {
            // SAFETY: kill(2) takes a pid and a signal; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    if froze {
        // Killed processes die once thawed.
        let _ = std::fs::write(p.kill.join(freeze.0), thaw);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(dir: &Path, v2: bool) -> CgroupPaths {
        CgroupPaths {
            v2,
            join: vec![dir.to_path_buf()],
            memory: dir.to_path_buf(),
            kill: dir.to_path_buf(),
        }
    }

    #[test]
    fn oom_kills_are_read_from_either_hierarchy() {
        let dir = std::env::temp_dir().join(format!("nw-keeper-cg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(oom_kills(&paths(&dir, true)), Some(1));
        std::fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        assert_eq!(oom_kills(&paths(&dir, false)), Some(3));
        std::fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\n",
        )
        .unwrap();
        std::fs::write(dir.join("memory.failcnt"), "7\n").unwrap();
        assert_eq!(oom_kills(&paths(&dir, false)), Some(7), "old kernels");
        std::fs::write(dir.join("cgroup.procs"), "12\n\n34\n").unwrap();
        assert_eq!(procs(&dir).unwrap(), vec![12, 34]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            kill_all(&paths(&dir, false)).is_ok(),
            "a cgroup that is gone"
        );
    }
}
