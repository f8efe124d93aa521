//! The few system calls the keeper and the agent both make.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

/// After a task exited, how long its output pipes may stay open before the processes that hold
/// them (ones that left its process group) are killed; after that, how long draining goes on.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Sends `signal` to process group `pgid`. A group that is already gone is not an error.
pub fn signal_group(pgid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        return Ok(());
    }
    Err(err)
}

/// SIGKILLs one process (not its group).
pub fn kill_process(pid: i32) {
    // SAFETY: kill(2) takes a pid and a signal; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// A pidfd for `pid`: readable once the process exits.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Writes `bytes` to `path` atomically (a temporary file in the same directory, renamed over it),
/// mode 0600.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
