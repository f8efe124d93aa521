//! Removing a directory tree that file systems may be mounted inside, without touching theirs.
//!
//! An allocation directory can hold a mount: a CSI volume bound at a task's `volume_mount`
//! destination, or one a plugin left behind. `std::fs::remove_dir_all` would walk into it and
//! delete the volume's data. [`remove_tree`] first unmounts every mount at or beneath the tree
//! (deepest first, from `/proc/self/mountinfo`, a plain `umount` so that nothing is still
//! attached when the removal starts, where `MNT_DETACH` would leave a busy mount reachable), then
//! removes the tree, refusing to descend into a directory that is still a mount point or on another
//! file system than its parent. No threads; callers are the collector's destroy workers and the
//! dev-mode shutdown.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum MountsError {
    #[error("cannot read /proc/self/mountinfo: {0}")]
    MountTable(#[source] io::Error),
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("refusing to remove {}: it is a mount point or on another file system", path.display())]
    Mounted { path: PathBuf },
}

/// The mount points of a `/proc/<pid>/mountinfo` text (its fifth field, octal escapes such as
/// `\040` for a space decoded), in the table's order.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| {
            let b = field.as_bytes();
            let mut out = Vec::with_capacity(b.len());
            let mut i = 0;
            while i < b.len() {
                let octal = b
                    .get(i + 1..i + 4)
                    .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
                match octal {
                    Some(d) => {
                        out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                        i += 4;
                    }
                    None => {
                        out.push(b[i]);
                        i += 1;
                    }
                }
            }
            PathBuf::from(std::ffi::OsString::from_vec(out))
        })
        .collect()
}

/// The mount points at or beneath `dir` in this process's mount table, deepest first, and of
/// one path mounted over twice the later (upper) mount first: the order they can be unmounted in.
pub fn mounts_beneath(dir: &Path) -> Result<Vec<PathBuf>, MountsError> {
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(MountsError::Remove {
                path: dir.to_path_buf(),
                source: e,
            })
        }
    };
    let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountsError::MountTable)?;
    let mut found: Vec<(usize, PathBuf)> = mount_points(&table)
        .into_iter()
        .filter(|m| m.starts_with(&dir))
        .enumerate()
        .collect();
    found.sort_by(|(ia, a), (ib, b)| {
        let depth = |p: &Path| p.components().count();
        depth(b).cmp(&depth(a)).then(ib.cmp(ia))
    });
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Whether `path` is a mount point in this process's mount table.
pub fn is_mount_point(path: &Path) -> Result<bool, MountsError> {
    let Ok(path) = std::fs::canonicalize(path) else {
        return Ok(false);
    };
    let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountsError::MountTable)?;
    Ok(mount_points(&table).contains(&path))
}

/// Unmounts `path` (a plain `umount`: it fails while the mount is busy rather than leaving it
/// attached out of sight).
pub fn unmount(path: &Path) -> Result<(), MountsError> {
    use std::os::unix::ffi::OsStrExt;
    let fail = |source| MountsError::Unmount {
        path: path.to_path_buf(),
        source,
    };
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| fail(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        return Err(fail(io::Error::last_os_error()));
    }
    Ok(())
}

/// Unmounts every mount at or beneath `dir`, deepest first; answers what was unmounted.
pub fn unmount_beneath(dir: &Path) -> Result<Vec<PathBuf>, MountsError> {
    let mounts = mounts_beneath(dir)?;
    for m in &mounts {
        unmount(m)?;
    }
    Ok(mounts)
}

/// Unmounts what is mounted inside `dir`, then removes `dir` and everything in it. Links are
/// removed, never followed. A directory still a mount point (one mounted again meanwhile) or on
/// another file system than its parent is not entered: the removal stops with
/// [`MountsError::Mounted`] and what is left stays. A missing `dir` is not an error.
pub fn remove_tree(dir: &Path) -> Result<(), MountsError> {
    unmount_beneath(dir)?;
    remove_unmounted(dir)
}

/// The removal of [`remove_tree`] without its unmounting.
fn remove_unmounted(dir: &Path) -> Result<(), MountsError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(MountsError::MountTable)?;
    let mounted: HashSet<PathBuf> = mount_points(&table).into_iter().collect();
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(MountsError::Remove {
                path: dir.to_path_buf(),
                source: e,
            })
        }
    };
    let parent_dev = match dir.parent().map(std::fs::metadata) {
        Some(Ok(m)) => Some(m.dev()),
        _ => None,
    };
    remove_walk(&dir, parent_dev, &mounted)
}

/// Removes `path`; a directory only when it is on `parent_dev` and not in `mounted`. A bind
/// mount of a directory of the same file system keeps its `st_dev`, hence the mount table too.
/// The tasks that could swap a directory for a link are gone when a tree is removed.
fn remove_walk(
    path: &Path,
    parent_dev: Option<u64>,
    mounted: &HashSet<PathBuf>,
) -> Result<(), MountsError> {
    let fail = |source| MountsError::Remove {
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(fail(e)),
    };
    if !meta.is_dir() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(fail(e)),
            _ => Ok(()),
        };
    }
    if mounted.contains(path) || parent_dev.is_some_and(|d| d != meta.dev()) {
        return Err(MountsError::Mounted {
            path: path.to_path_buf(),
        });
    }
    for entry in std::fs::read_dir(path).map_err(fail)? {
        let entry = entry.map_err(fail)?;
        remove_walk(&entry.path(), Some(meta.dev()), mounted)?;
    }
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(fail(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn mount_points_are_read_from_mountinfo() {
        let table = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                     35 22 0:31 / /data/alloc/x/t/local/my\\040disk rw - tmpfs tmpfs rw\n";
        assert_eq!(
            mount_points(table),
            [
                PathBuf::from("/"),
                PathBuf::from("/data/alloc/x/t/local/my disk")
            ]
        );
    }

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = unmount_beneath(&self.0);
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn temp() -> TempDir {
        let dir = std::env::temp_dir().join(format!("nodeward-mounts-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        TempDir(fs::canonicalize(&dir).unwrap())
    }

    fn bind(src: &Path, dst: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let (s, d) = (c(src), c(dst));
        // SAFETY: NUL-terminated paths that outlive the call.
        let rc = unsafe {
            libc::mount(
                s.as_ptr(),
                d.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(
            rc,
            0,
            "bind {src:?} at {dst:?}: {}",
            io::Error::last_os_error()
        );
    }

    /// A volume's directory bound inside a task directory, twice (one mount over another), and
    /// a link out of the tree; answers the tree and the bound file. Needs root: its tests are
    /// `#[ignore]`d, scripts/test.sh selects them as root, and one selected without root fails.
    fn tree_with_bind(t: &TempDir) -> (PathBuf, PathBuf) {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "this test needs root (scripts/test.sh runs it as root)"
        );
        let volume = t.0.join("volume");
        fs::create_dir_all(&volume).unwrap();
        fs::write(volume.join("data.txt"), "kept").unwrap();
        let alloc = t.0.join("alloc");
        let dest = alloc.join("web/local/data");
        fs::create_dir_all(&dest).unwrap();
        bind(&volume, &dest);
        bind(&volume, &dest);
        std::os::unix::fs::symlink(&volume, alloc.join("web/link")).unwrap();
        (alloc, volume.join("data.txt"))
    }

    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn removal_unmounts_first_and_keeps_the_bound_files() {
        let t = temp();
        let (alloc, kept) = tree_with_bind(&t);
        assert_eq!(mounts_beneath(&alloc).unwrap().len(), 2);
        remove_tree(&alloc).unwrap();
        assert!(!alloc.exists());
        assert_eq!(fs::read_to_string(&kept).unwrap(), "kept");
        assert!(mounts_beneath(&t.0).unwrap().is_empty());
    }

    #[test]
    #[ignore = "needs root: scripts/test.sh runs it as root"]
    fn removal_never_enters_a_mount_point() {
        let t = temp();
        let (alloc, kept) = tree_with_bind(&t);
        let err = remove_unmounted(&alloc).unwrap_err();
        assert!(
            matches!(&err, MountsError::Mounted { path } if path.ends_with("web/local/data")),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&kept).unwrap(), "kept");
        assert!(is_mount_point(&alloc.join("web/local/data")).unwrap());
    }

    #[test]
    fn a_missing_tree_is_removed_already() {
        let t = temp();
        remove_tree(&t.0.join("nothing")).unwrap();
    }
}
