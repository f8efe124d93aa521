//! A CSI volume bound at a `raw_exec` task's `volume_mount` destination, where the agent is root.
//!
//! The destination `<task dir>/<destination>` and the directories on the way are made beneath the
//! allocation root without following a link the task planted ([`nodeward_keeper::beneath`]); the
//! mount targets `/proc/self/fd/<fd>` of the directory so opened, so a link swapped in meanwhile
//! cannot redirect it. A read-only volume is remounted read-only (a first bind ignores the flag).
//! A destination already a mount point (the task restarted, or the agent did under a running
//! task) is left as it is: never mounted twice. The binds are taken down by the CSI unmounter
//! before `NodeUnpublishVolume` and by every removal of the allocation directory
//! ([`crate::util::mounts`]). No threads: called from the volume mount hook.

use std::ffi::{CString, OsStr};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::task::hooks::{HookError, TaskContext};
use crate::task::taskdir::open_parent_beneath;

/// Whether this agent makes bind mounts (mounting needs root).
pub fn can_bind() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mount_fd(source: &Path, fd: &impl AsRawFd, flags: libc::c_ulong) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let src = CString::new(source.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let dst = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    // SAFETY: NUL-terminated strings that outlive the call; no data argument.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Binds `target` (the published volume) at `<task dir>/<rel>`, read-only when `read_only`;
/// answers what had to be replaced on the way (a link where a directory belongs).
pub fn bind_volume(
    task: &TaskContext,
    source: &str,
    rel: &Path,
    target: &Path,
    read_only: bool,
) -> Result<Vec<String>, HookError> {
    let shown = task.task_dir.join(rel);
    let fail = |e: std::io::Error| {
        HookError::new(format!(
            "cannot bind-mount volume {source:?} at {}: {e}",
            shown.display()
        ))
    };
    let (parent, mut replaced) = open_parent_beneath(task, rel, fail)?;
    let name = rel.file_name().unwrap_or(OsStr::new(""));
    // The link of an agent that could not bind is replaced by the directory to mount on.
    let made = parent.make_dir(name, 0o755).map_err(fail)?;
    replaced.extend(made.replaced);
    let dest = made.dir;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dest.as_raw_fd())).map_err(fail)?;
    let mounted = crate::util::mounts::is_mount_point(&real)
        .map_err(|e| HookError::new(format!("cannot bind-mount volume {source:?}: {e}")))?;
    if !mounted {
        mount_fd(target, &dest, libc::MS_BIND).map_err(fail)?;
        if read_only {
            // Opened again: the descriptor from before names the directory under the mount.
            let top = parent.open_dir(name).map_err(fail)?;
            let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            if let Err(e) = mount_fd(target, &top, flags) {
                let _ = crate::util::mounts::unmount(&real);
                return Err(fail(e));
            }
        }
    }
    Ok(replaced
        .into_iter()
        .map(|r| format!("{r}, and made the directory again for a volume_mount"))
        .collect())
}
