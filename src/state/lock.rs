//! The data directory's lock: one agent per data directory (live-restore.md).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{private_dir, StateError};

/// The lock file in the data directory; holds the PID of the agent that owns it.
pub const LOCK_FILE: &str = "agent.lock";

/// An exclusive `flock` on `<data_dir>/agent.lock`, held for the agent's whole life: one agent per
/// data directory (live-restore.md). The kernel drops it when the process ends, however it ends,
/// so a crashed agent never leaves a stale lock. The descriptor is close-on-exec: a task never
/// inherits it (it would otherwise keep the lock after the agent is gone).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Takes the lock, creating the data directory (0700) if needed, and records this process's
    /// PID in the lock file. Fails at once, changing nothing, when another process holds it.
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, StateError> {
        let path = data_dir.join(LOCK_FILE);
        let err = |source| StateError::Lock {
            path: path.clone(),
            source,
        };
        private_dir(data_dir).map_err(err)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(err)?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(StateError::Held {
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                    data_dir: data_dir.to_path_buf(),
                });
            }
            return Err(err(e));
        }
        file.set_len(0).map_err(err)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(err)?;
        file.sync_all().map_err(err)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn one_agent_per_data_directory() {
        let dir = std::env::temp_dir()
            .join(format!("nodeward-lock-{}", uuid::Uuid::new_v4()))
            .join("data");
        let held = DataDirLock::acquire(&dir).unwrap();
        let pid = std::process::id().to_string();
        assert_eq!(fs::read_to_string(dir.join(LOCK_FILE)).unwrap().trim(), pid);
        // flock locks belong to the open file: a second open, even in this process, is refused.
        let err = DataDirLock::acquire(&dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("another nodeward agent (pid {pid}) holds {}", dir.display())
        );
        drop(held);
        let again = DataDirLock::acquire(&dir).unwrap();
        let mode = fs::metadata(dir.join(LOCK_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        drop(again);
        let _ = fs::remove_dir_all(dir.parent().unwrap());
    }
}
