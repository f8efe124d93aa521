//! What the agent and the keeper read about processes from `/proc`: a process's state, group and start time,
//! which groups still have live members, and who holds a given pipe.

use std::collections::BTreeSet;

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
pub fn process_start_ticks(pid: i32) -> Option<u64> {
    proc_stat(pid).map(|s| s.start_ticks)
}

/// When a process that started `start_ticks` clock ticks after boot started, in nanoseconds
/// since the Unix epoch (`btime` of `/proc/stat`, one-second precision, plus the ticks).
pub fn start_time_nanos(start_ticks: u64) -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let since_boot = (start_ticks as i128 * 1_000_000_000 / hz as i128) as i64;
    Some(btime * 1_000_000_000 + since_boot)
}

/// What the agent reads from `/proc/<pid>/stat`.
pub struct ProcStat {
    /// A zombie (`Z`) or dead (`X`) process runs nothing; only its parent's wait removes it.
    pub gone: bool,
    pub pgid: i32,
    pub start_ticks: u64,
}

pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    // One read() into a buffer on the stack (the line is a few hundred bytes): read_to_string
    // made eight system calls of it, and the keeper reads it at every task start.
    let mut buf = [0u8; 1024];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let n = loop {
        match std::io::Read::read(&mut file, &mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r.ok()?,
        }
    };
    // A line that fills the buffer may go on: the file is read again, whole.
    let long;
    let stat = if n < buf.len() {
        std::str::from_utf8(&buf[..n]).ok()?
    } else {
        long = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        &long
    };
    // The command name (field 2) may hold spaces and parentheses; fields after it follow the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    Some(ProcStat {
        gone: matches!(*fields.first()?, "Z" | "X"),
        pgid: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is alive and is the same process that started at `start_ticks`. A zombie is not
/// alive: a leftover of a crashed agent is nobody's child here, and its zombie lasts until the
/// process it was handed to reaps it (some container inits never do).
pub fn same_process_alive(pid: i32, start_ticks: u64) -> bool {
    pid > 0 && proc_stat(pid).is_some_and(|s| !s.gone && s.start_ticks == start_ticks)
}

/// The groups among `pgids` that still have a member that is not a zombie.
pub fn live_groups(pgids: &BTreeSet<i32>) -> BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(|s| !s.gone && pgids.contains(&s.pgid))
        .map(|s| s.pgid)
        .collect()
}

/// The PIDs in `/proc`, except this agent's own.
pub fn other_processes() -> impl Iterator<Item = i32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(move |pid| *pid != me)
}

/// Processes other than the agent with a descriptor on one of the pipes `inodes`.
pub fn pipe_holders(inodes: &[u64]) -> Vec<i32> {
    let mut found = Vec::new();
    if inodes.is_empty() {
        return found;
    }
    for pid in other_processes() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).ok().is_some_and(|target| {
                target
                    .to_str()
                    .and_then(|t| t.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok())
                    .is_some_and(|ino: u64| inodes.contains(&ino))
            })
        });
        if holds {
            found.push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn a_zombie_is_not_alive_and_keeps_no_group_alive() {
        let mut zombie = Command::new("true").process_group(0).spawn().unwrap();
        let pid = zombie.id() as i32;
        let ticks = process_start_ticks(pid).unwrap();
        // Not waited for, it stays a zombie until reaped.
        let deadline = Instant::now() + Duration::from_secs(60);
        while proc_stat(pid).is_some_and(|s| !s.gone) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(proc_stat(pid).is_some(), "the zombie is still there");
        assert!(!same_process_alive(pid, ticks));
        assert!(live_groups(&BTreeSet::from([pid])).is_empty());
        zombie.wait().unwrap();

        let mut live = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = live.id() as i32;
        let ticks = process_start_ticks(pid).unwrap();
        assert!(same_process_alive(pid, ticks));
        assert!(!same_process_alive(pid, ticks + 1));
        assert_eq!(live_groups(&BTreeSet::from([pid])), BTreeSet::from([pid]));
        live.kill().unwrap();
        live.wait().unwrap();
    }
}
