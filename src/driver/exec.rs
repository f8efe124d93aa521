//! The `exec` driver (resources.md, "The `exec` driver"): `raw_exec`'s process, started by the
//! keeper the same way, but isolated as Nomad's `exec` driver isolates it — born in new mount,
//! PID and IPC namespaces, its task directory as `/` with the agent's `chroot_env` bound in
//! read-only, `/alloc`, a minimal `/dev` and a fresh `/proc`, `no_new_privs`, and Nomad's
//! default capability set for `exec` in its bounding set. The keeper does the isolation in the
//! task's child (`nodeward_keeper::isolate`); this module says what it is.
//!
//! The driver is fingerprinted (`driver.exec = "1"`) only where the agent is root and a probe at
//! start ([`namespaces_available`]) could make those namespaces, and not when the operator denies
//! it (`client { options { "driver.denylist" = "exec" } }`, Nomad's key): elsewhere its jobs get
//! the `missing drivers` placement failure. It has no threads of its own: it is a [`RawExec`]
//! with an isolation, and shares its protocol.

use std::path::{Path, PathBuf};

use nodeward_keeper::{Bind, Isolation};

use super::RawExec;

/// The driver's name in jobspecs and node attributes.
pub const NAME: &str = "exec";

/// Nomad's default `chroot_env`: each host directory bound at the same path, when it exists.
pub const DEFAULT_CHROOT_ENV: [&str; 8] = [
    "/bin",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/run/resolvconf",
    "/sbin",
    "/usr",
];

/// Nomad's default `allow_caps` for `exec`: what stays in a task's bounding set.
pub const DEFAULT_CAPS: [&str; 13] = crate::util::caps::NOMAD_DEFAULT_CAPS;

/// The agent's settings for the `exec` driver.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecSettings {
    /// `client { chroot_env }`: (host path, path in the task); Nomad's default list when absent.
    pub chroot_env: Vec<(PathBuf, PathBuf)>,
    /// False when `client { options { "driver.denylist" } }` names `exec`.
    pub enabled: bool,
}

impl Default for ExecSettings {
    fn default() -> Self {
        ExecSettings {
            chroot_env: DEFAULT_CHROOT_ENV
                .iter()
                .map(|p| (PathBuf::from(p), PathBuf::from(p)))
                .collect(),
            enabled: true,
        }
    }
}

pub use crate::util::caps::cap_number;

/// Whether this agent can isolate a task: it is root and a child can be cloned into new mount,
/// PID and IPC namespaces. Probed once at start.
pub fn namespaces_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    extern "C" fn child(_: *mut libc::c_void) -> libc::c_int {
        0
    }
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: without CLONE_VM the child has a copy of this memory; it only returns, which
    // exits it. The stack is ours and outlives the call.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len());
        libc::clone(
            child,
            top.cast(),
            libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::SIGCHLD,
            std::ptr::null_mut(),
        )
    };
    if pid < 0 {
        log::info!(
            "the exec driver is not available: cannot make mount, PID and IPC namespaces: {}",
            std::io::Error::last_os_error()
        );
        return false;
    }
    let mut status = 0;
    // SAFETY: waitpid on the child made above; writes one int we own.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Where an exec task sees a `volume_mount` destination: an absolute one as written; a relative
/// one in its task directory, which is its `/`.
pub fn path_in_task(destination: &str) -> String {
    if destination.starts_with('/') {
        destination.to_string()
    } else {
        format!("/{destination}")
    }
}

/// The capabilities an exec task keeps: Nomad's default set without `cap_drop` (`all`: every
/// one), with `cap_add`, which may only name capabilities of that set (as Nomad's `allow_caps`).
/// `Err`: the ones `cap_add` names that it may not, comma-separated.
pub fn task_caps(cap_add: &[String], cap_drop: &[String]) -> Result<Vec<u32>, String> {
    let allowed: Vec<u32> = DEFAULT_CAPS.iter().filter_map(|c| cap_number(c)).collect();
    let all = |list: &[String]| list.iter().any(|c| c.eq_ignore_ascii_case("all"));
    let mut keep: Vec<u32> = if all(cap_drop) {
        Vec::new()
    } else {
        let dropped: Vec<u32> = cap_drop.iter().filter_map(|c| cap_number(c)).collect();
        allowed
            .iter()
            .copied()
            .filter(|c| !dropped.contains(c))
            .collect()
    };
    if all(cap_add) {
        return Ok(allowed);
    }
    let mut refused = Vec::new();
    for name in cap_add {
        match cap_number(name) {
            Some(n) if allowed.contains(&n) => keep.push(n),
            _ => refused.push(name.to_ascii_lowercase()),
        }
    }
    if !refused.is_empty() {
        return Err(refused.join(", "));
    }
    keep.sort_unstable();
    keep.dedup();
    Ok(keep)
}

/// The isolation of a task whose directory is `task_dir` and whose allocation's shared directory
/// is `shared_dir`, with `volumes` bound in: what the keeper builds its root from.
pub fn isolation(
    settings: &ExecSettings,
    task_dir: &Path,
    shared_dir: &Path,
    volumes: &[super::Bind],
    keep_caps: Vec<u32>,
) -> Isolation {
    let mut binds: Vec<Bind> = settings
        .chroot_env
        .iter()
        // Nomad skips entries that do not exist on this host (`/lib32` on most).
        .filter(|(src, _)| src.exists())
        .map(|(src, dst)| Bind {
            source: src.clone(),
            target: dst.clone(),
            read_only: true,
        })
        .collect();
    binds.push(Bind {
        source: shared_dir.to_path_buf(),
        // Where Nomad shows it (and NOMAD_ALLOC_DIR says), as for a container.
        target: PathBuf::from("/alloc"),
        read_only: false,
    });
    binds.extend(volumes.iter().map(|v| Bind {
        source: v.host.clone(),
        target: PathBuf::from(path_in_task(&v.container)),
        read_only: v.read_only,
    }));
    Isolation {
        root: task_dir.to_path_buf(),
        binds,
        keep_caps,
    }
}

/// The program an `exec` task runs, as its root shows it: a command with a `/` is a path in the
/// task (relative ones from its root, the task directory); a bare name is looked up in the
/// task's `PATH` in the host directories that `chroot_env` binds.
pub fn resolve_in_task(
    settings: &ExecSettings,
    task_dir: &Path,
    command: &str,
    path: Option<&str>,
) -> Option<PathBuf> {
    // The host path that `inside` (absolute, in the task) shows, if it is one bound in.
    let on_host = |inside: &Path| -> Option<PathBuf> {
        let rel = inside.strip_prefix("/").ok()?;
        settings
            .chroot_env
            .iter()
            .filter_map(|(src, dst)| Some(src.join(inside.strip_prefix(dst).ok()?)))
            .find(|p| p.exists())
            .or_else(|| Some(task_dir.join(rel)))
    };
    let executable = |inside: &Path| on_host(inside).is_some_and(|h| is_executable(&h));
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let inside = Path::new("/").join(command);
        return executable(&inside).then_some(inside);
    }
    path.unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(command))
        .find(|p| executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The `exec` driver: a [`RawExec`] whose tasks the keeper isolates.
pub fn driver(keeper: std::sync::Arc<super::KeeperClient>, settings: ExecSettings) -> RawExec {
    let available = settings.enabled && namespaces_available();
    RawExec::isolated(keeper, settings, available)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_caps_are_nomads() {
        let mut caps: Vec<u32> = DEFAULT_CAPS.iter().filter_map(|c| cap_number(c)).collect();
        caps.sort();
        assert_eq!(caps, [0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 27, 29, 31]);
        assert_eq!(cap_number("CAP_SYS_ADMIN"), Some(21));
        assert_eq!(cap_number("bogus"), None);
    }

    #[test]
    fn cap_add_and_cap_drop_work_on_the_default_set() {
        let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(task_caps(&[], &[]).unwrap().len(), 13);
        assert_eq!(task_caps(&[], &s(&["all"])).unwrap(), Vec::<u32>::new());
        assert_eq!(task_caps(&s(&["kill"]), &s(&["ALL"])).unwrap(), [5]);
        assert_eq!(task_caps(&[], &s(&["CAP_CHOWN"])).unwrap().len(), 12);
        assert_eq!(
            task_caps(&s(&["sys_admin", "net_raw"]), &[]).unwrap_err(),
            "sys_admin, net_raw"
        );
    }

    #[test]
    fn commands_resolve_inside_the_task() {
        let s = ExecSettings::default();
        let dir = std::env::temp_dir();
        assert_eq!(
            resolve_in_task(&s, &dir, "sh", Some("/nonexistent:/bin")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            resolve_in_task(&s, &dir, "/bin/sh", None),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(resolve_in_task(&s, &dir, "no-such-command", None), None);
        let only_usr = ExecSettings {
            chroot_env: vec![("/usr".into(), "/usr".into())],
            enabled: true,
        };
        // /bin is not bound in: a command there does not exist for the task.
        assert_eq!(resolve_in_task(&only_usr, &dir, "/bin/sh", None), None);
    }
}
