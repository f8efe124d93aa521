//! The `exec` driver's isolation of a task (resources.md, "The `exec` driver"), applied in the
//! child between `clone` and `execve` ([`crate::spawn`]).
//!
//! The child is cloned into new mount, PID and IPC namespaces ([`CLONE_FLAGS`]); it is PID 1 of
//! its PID namespace, so when it exits the kernel kills every other process of that namespace.
//! Then, in its private mount namespace only (nothing propagates to the host's):
//! 1. the task directory becomes a mount point of its own (a bind onto itself), and every
//!    `chroot_env` entry is bound read-only inside it, the allocation's shared directory at
//!    `/alloc` read-write, a small `/dev` (a tmpfs with the host's null, zero, full, random,
//!    urandom and tty bound in, a new devpts instance, a tmpfs `/dev/shm`) and a fresh `/proc`
//!    of the new PID namespace;
//! 2. `pivot_root` makes the task directory `/` and the host's root is detached, so no host path
//!    outside what was bound can be reached (a `chroot` could be left by a task holding
//!    `CAP_SYS_CHROOT`, which the default set keeps);
//! 3. every capability not kept is dropped from the bounding set and `no_new_privs` is set.
//!
//! Binding the `chroot_env` directories read-only is Nomad's result (the task sees those host
//! paths and cannot change them) without Nomad's copy of them into every task directory.
//!
//! Everything here runs in a child that shares the keeper's memory (`CLONE_VM | CLONE_VFORK`):
//! [`Prepared::new`] builds every path and option string before the `clone`; [`Prepared::apply`]
//! only makes system calls on them, allocates nothing and cannot panic.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::Isolation;

/// The namespaces an isolated task is born in.
pub(crate) const CLONE_FLAGS: libc::c_int =
    libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// The devices bound into the task's `/dev` from the host's.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// One system call of the setup, its arguments prepared.
enum Step {
    /// `mkdir`; one that exists already is fine.
    MkDir(CString),
    /// An empty file to bind a file onto; one that exists already is fine.
    Touch(CString),
    Mount {
        source: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    Symlink {
        to: CString,
        at: CString,
    },
}

/// An isolation ready for the child: only read there.
pub(crate) struct Prepared {
    root: CString,
    steps: Vec<Step>,
    /// Bit `n` set: capability `n` stays in the bounding set.
    keep: u64,
    last_cap: u32,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::other(format!("a NUL byte in the path {}", p.display())))
}

fn text(s: &str) -> CString {
    CString::new(s).expect("constant without NUL")
}

impl Prepared {
    pub(crate) fn new(iso: &Isolation) -> io::Result<Prepared> {
        if !iso.root.is_absolute() {
            return Err(io::Error::other(format!(
                "the task's root {} is not an absolute path",
                iso.root.display()
            )));
        }
        let root = iso.root.clone();
        let mut steps = vec![
            // Nothing mounted from here on may reach the host's mount namespace.
            Step::Mount {
                source: None,
                target: text("/"),
                fstype: None,
                flags: libc::MS_REC | libc::MS_PRIVATE,
                data: None,
            },
            // pivot_root needs the new root to be a mount point.
            Step::Mount {
                source: Some(cstr(&root)?),
                target: cstr(&root)?,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
        ];
        // The directories leading to `inside` (absolute, within the root), made in the root.
        let make_parents = |steps: &mut Vec<Step>, inside: &Path, last: bool| -> io::Result<()> {
            let mut at = root.clone();
            let parts: Vec<_> = inside
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect();
            for (i, c) in parts.iter().enumerate() {
                at.push(c);
                if i + 1 < parts.len() || last {
                    steps.push(Step::MkDir(cstr(&at)?));
                }
            }
            Ok(())
        };
        let inside = |p: &Path| -> io::Result<std::path::PathBuf> {
            if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
                return Err(io::Error::other(format!(
                    "a task path {} is not absolute or has \"..\"",
                    p.display()
                )));
            }
            Ok(root.join(p.strip_prefix("/").unwrap_or(p)))
        };
        for bind in &iso.binds {
            let is_dir = std::fs::metadata(&bind.source)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot bind {} into the task: {e}", bind.source.display()),
                    )
                })?
                .is_dir();
            let target = inside(&bind.target)?;
            make_parents(&mut steps, &bind.target, is_dir)?;
            if !is_dir {
                steps.push(Step::Touch(cstr(&target)?));
            }
            steps.push(Step::Mount {
                source: Some(cstr(&bind.source)?),
                target: cstr(&target)?,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            });
            if bind.read_only {
                // A bind takes the flags of its source; read-only needs a second, remounting call.
                steps.push(Step::Mount {
                    source: None,
                    target: cstr(&target)?,
                    fstype: None,
                    flags: libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID,
                    data: None,
                });
            }
        }
        let dev = root.join("dev");
        steps.push(Step::MkDir(cstr(&dev)?));
        steps.push(Step::Mount {
            source: Some(text("tmpfs")),
            target: cstr(&dev)?,
            fstype: Some(text("tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
            data: Some(text("mode=755,size=65536k")),
        });
        for name in DEVICES {
            let at = cstr(&dev.join(name))?;
            steps.push(Step::Touch(at.clone()));
            steps.push(Step::Mount {
                source: Some(cstr(&Path::new("/dev").join(name))?),
                target: at,
                fstype: None,
                flags: libc::MS_BIND,
                data: None,
            });
        }
        steps.push(Step::MkDir(cstr(&dev.join("pts"))?));
        steps.push(Step::Mount {
            source: Some(text("devpts")),
            target: cstr(&dev.join("pts"))?,
            fstype: Some(text("devpts")),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
            // Its own instance: the task sees none of the host's terminals.
            data: Some(text("newinstance,ptmxmode=0666,mode=0620")),
        });
        steps.push(Step::Symlink {
            to: text("pts/ptmx"),
            at: cstr(&dev.join("ptmx"))?,
        });
        steps.push(Step::MkDir(cstr(&dev.join("shm"))?));
        steps.push(Step::Mount {
            source: Some(text("shm")),
            target: cstr(&dev.join("shm"))?,
            fstype: Some(text("tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: Some(text("mode=1777,size=65536k")),
        });
        let proc = root.join("proc");
        steps.push(Step::MkDir(cstr(&proc)?));
        // Mounted by the child, which is in the new PID namespace: it shows that namespace only.
        steps.push(Step::Mount {
            source: Some(text("proc")),
            target: cstr(&proc)?,
            fstype: Some(text("proc")),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: None,
        });
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40u32)
            .min(63);
        let keep = iso
            .keep_caps
            .iter()
            .filter(|&&c| c < 64)
            .fold(0u64, |m, &c| m | (1 << c));
        Ok(Prepared {
            root: cstr(&root)?,
            steps,
            keep,
            last_cap,
        })
    }

    /// Makes the task's root, enters it and drops what the task may not keep. Answers the OS
    /// error of the failed step, or 0.
    ///
    /// # Safety
    /// Only in the child of `clone(CLONE_VM | CLONE_VFORK | CLONE_FLAGS)`, before its
    /// credentials change (dropping from the bounding set needs `CAP_SETPCAP`).
    pub(crate) unsafe fn apply(&self) -> i32 {
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        // SAFETY: system calls on strings this plan owns, which outlive the child's use of them.
        unsafe {
            for step in &self.steps {
                let ok = match step {
                    Step::MkDir(p) => {
                        libc::mkdir(p.as_ptr(), 0o755) == 0 || errno() == libc::EEXIST
                    }
                    Step::Touch(p) => {
                        let fd = libc::open(
                            p.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                            0o644,
                        );
                        fd >= 0 && libc::close(fd) == 0
                    }
                    Step::Mount {
                        source,
                        target,
                        fstype,
                        flags,
                        data,
                    } => {
                        libc::mount(
                            ptr(source),
                            target.as_ptr(),
                            ptr(fstype),
                            *flags,
                            ptr(data).cast(),
                        ) == 0
                    }
                    Step::Symlink { to, at } => {
                        libc::symlink(to.as_ptr(), at.as_ptr()) == 0 || errno() == libc::EEXIST
                    }
                };
                if !ok {
                    return errno();
                }
            }
            let dot = c".".as_ptr();
            if libc::chdir(self.root.as_ptr()) != 0
                || libc::syscall(libc::SYS_pivot_root, dot, dot) != 0
                || libc::umount2(dot, libc::MNT_DETACH) != 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                return errno();
            }
            for cap in 0..=self.last_cap {
                if self.keep & (1 << cap) == 0
                    && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                {
                    return errno();
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return errno();
            }
        }
        0
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bind;

    #[test]
    fn a_plan_refuses_paths_that_leave_the_root() {
        let iso = |target: &str| Isolation {
            root: "/r".into(),
            binds: vec![Bind {
                source: "/bin".into(),
                target: target.into(),
                read_only: true,
            }],
            keep_caps: vec![0, 5],
        };
        assert!(Prepared::new(&iso("/bin")).is_ok());
        for bad in ["bin", "/../etc", "/a/../../b"] {
            let e = Prepared::new(&iso(bad)).err().expect(bad);
            assert!(e.to_string().contains("has \"..\""), "{bad}: {e}");
        }
        let missing = Isolation {
            root: "/r".into(),
            binds: vec![Bind {
                source: "/no/such/dir".into(),
                target: "/x".into(),
                read_only: true,
            }],
            keep_caps: vec![],
        };
        let e = Prepared::new(&missing).err().unwrap();
        assert!(e.to_string().contains("cannot bind /no/such/dir"), "{e}");
        assert_eq!(Prepared::new(&iso("/bin")).unwrap().keep, 0b100001);
    }
}
