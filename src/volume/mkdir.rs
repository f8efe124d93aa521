//! The built-in `mkdir` plugin: a volume is a directory `<host_volumes_dir>/<volume_id>`.
//!
//! Parameters: `mode` (octal string, default `0700`), `uid` and `gid` (numbers, default unchanged).
//! The mode is applied with chmod after mkdir so the agent's umask does not matter. Create and
//! delete are idempotent: an existing directory is success (its mode and owner are applied again),
//! a missing one is a successful delete.
//!
//! This module imports nothing of the plugin machinery ([`super::plugin`] calls it and turns its
//! answers into the protocol's), so the two never depend on each other in a cycle.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum MkdirError {
    #[error("unknown mkdir parameter: {0:?}")]
    UnknownParameter(String),
    #[error("invalid value for {key:?}: {value:?} is not {want}")]
    InvalidValue {
        key: &'static str,
        value: String,
        want: &'static str,
    },
    #[error("volume ID {0:?} cannot be a directory name")]
    BadVolumeId(String),
    #[error("cannot create directory {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("{path} exists and is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("cannot set mode {mode:o} on {path}: {source}")]
    Chmod {
        path: PathBuf,
        mode: u32,
        source: io::Error,
    },
    #[error("cannot change owner of {path} to {owner}: {source}")]
    Chown {
        path: PathBuf,
        owner: String,
        source: io::Error,
    },
    #[error("cannot remove directory {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
}

/// The validated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl Params {
    pub fn parse(params: &BTreeMap<String, String>) -> Result<Params, MkdirError> {
        let mut out = Params {
            mode: 0o700,
            uid: None,
            gid: None,
        };
        for (key, value) in params {
            let invalid = |key, want| MkdirError::InvalidValue {
                key,
                value: value.clone(),
                want,
            };
            match key.as_str() {
                "mode" => {
                    out.mode = u32::from_str_radix(value, 8)
                        .ok()
                        .filter(|m| *m <= 0o7777 && !value.is_empty())
                        .ok_or_else(|| invalid("mode", "an octal file mode such as \"0755\""))?;
                }
                "uid" => {
                    out.uid = Some(value.parse().map_err(|_| invalid("uid", "a user ID"))?);
                }
                "gid" => {
                    out.gid = Some(value.parse().map_err(|_| invalid("gid", "a group ID"))?);
                }
                _ => return Err(MkdirError::UnknownParameter(key.clone())),
            }
        }
        Ok(out)
    }
}

fn volume_path(volumes_dir: &Path, volume_id: &str) -> Result<PathBuf, MkdirError> {
    if volume_id.is_empty() || volume_id == "." || volume_id == ".." || volume_id.contains('/') {
        return Err(MkdirError::BadVolumeId(volume_id.to_string()));
    }
    Ok(volumes_dir.join(volume_id))
}

/// Creates (or re-applies) the volume's directory; answers its path.
pub fn create(volumes_dir: &Path, volume_id: &str, params: &Params) -> Result<PathBuf, MkdirError> {
    let path = volume_path(volumes_dir, volume_id)?;
    // The volumes directory itself may be traversed but not listed: tasks running as other users
    // must reach their volume, but need not learn the others' IDs.
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(volumes_dir)
        .map_err(|source| MkdirError::Create {
            path: volumes_dir.to_path_buf(),
            source,
        })?;
    let created_now = match fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                return Err(MkdirError::NotADirectory { path });
            }
            false
        }
        Err(source) => return Err(MkdirError::Create { path, source }),
    };
    let undo = |path: &Path| {
        // Only what this call made, and only while empty: a re-run never removes a user's data.
        if created_now {
            let _ = fs::remove_dir(path);
        }
    };
    if let Err(source) = fs::set_permissions(&path, fs::Permissions::from_mode(params.mode)) {
        undo(&path);
        return Err(MkdirError::Chmod {
            path,
            mode: params.mode,
            source,
        });
    }
    if params.uid.is_some() || params.gid.is_some() {
        if let Err(source) = std::os::unix::fs::chown(&path, params.uid, params.gid) {
            undo(&path);
            let owner = format!(
                "{}:{}",
                params.uid.map_or("-".to_string(), |u| u.to_string()),
                params.gid.map_or("-".to_string(), |g| g.to_string())
            );
            return Err(MkdirError::Chown {
                path,
                owner,
                source,
            });
        }
    }
    Ok(path)
}

/// Removes the volume's directory and everything in it; a missing directory is success.
pub fn delete(volumes_dir: &Path, volume_id: &str) -> Result<(), MkdirError> {
    let path = volume_path(volumes_dir, volume_id)?;
    match fs::remove_dir_all(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(MkdirError::Remove { path, source }),
    }
}

/// Helpers for the tests of volume code. Here because this module is the leaf that the plugin
/// code's tests can import without a cycle.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;

    /// Removes a test's directory when the test passes; a failing test leaves it for a look.
    pub struct Cleanup(pub PathBuf);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    pub fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nodeward-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Drops CAP_CHOWN from the calling thread only (capset(2) is per thread), so chown to
    /// another user fails even for root. No-op when not root.
    pub fn drop_chown_capability() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const VERSION_3: u32 = 0x2008_0522;
        const CAP_CHOWN: u32 = 0;
        let mut header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        // SAFETY: capget/capset with a v3 header read and write exactly two Data structs.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
                0
            );
            data[0].effective &= !(1 << CAP_CHOWN);
            assert_eq!(
                libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
                0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{drop_chown_capability, tempdir, Cleanup};
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parameter_errors_are_exact() {
        let e = Params::parse(&params(&[("size", "1")])).unwrap_err();
        assert_eq!(e.to_string(), "unknown mkdir parameter: \"size\"");
        for (key, value) in [
            ("mode", "9z"),
            ("mode", "77777"),
            ("mode", ""),
            ("uid", "bob"),
            ("gid", "-1"),
        ] {
            let e = Params::parse(&params(&[(key, value)])).unwrap_err();
            let want = format!("invalid value for \"{key}\"");
            assert!(e.to_string().starts_with(&want), "{e}");
        }
        let p = Params::parse(&params(&[("mode", "0755"), ("uid", "0"), ("gid", "0")])).unwrap();
        assert_eq!(
            p,
            Params {
                mode: 0o755,
                uid: Some(0),
                gid: Some(0)
            }
        );
        assert_eq!(Params::parse(&BTreeMap::new()).unwrap().mode, 0o700);
    }

    #[test]
    fn create_applies_mode_despite_umask_and_is_idempotent() {
        let dir = tempdir("mkdir").join("volumes");
        let _clean = Cleanup(dir.parent().unwrap().to_path_buf());
        let p = Params::parse(&params(&[("mode", "0777")])).unwrap();
        let created = create(&dir, "v1", &p).unwrap();
        assert_eq!(created, dir.join("v1"));
        let mode = fs::metadata(dir.join("v1")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777);
        fs::write(dir.join("v1/data"), "keep").unwrap();
        let p = Params::parse(&params(&[("mode", "0750")])).unwrap();
        create(&dir, "v1", &p).unwrap();
        assert_eq!(fs::read_to_string(dir.join("v1/data")).unwrap(), "keep");
        let mode = fs::metadata(dir.join("v1")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750);
        delete(&dir, "v1").unwrap();
        assert!(!dir.join("v1").exists());
        delete(&dir, "v1").unwrap();
        assert!(create(&dir, "../x", &p).is_err());
    }

    #[test]
    fn chown_failure_removes_the_directory() {
        let dir = tempdir("mkdir").join("volumes");
        let _clean = Cleanup(dir.parent().unwrap().to_path_buf());
        // Run on a thread without CAP_CHOWN (capabilities are per thread), so chown to another
        // user fails even when the tests run as root.
        let d = dir.clone();
        let result = std::thread::spawn(move || {
            drop_chown_capability();
            let p = Params::parse(&params(&[("uid", "12345"), ("mode", "0755")])).unwrap();
            create(&d, "v2", &p).map(|_| ())
        })
        .join()
        .unwrap();
        let err = result.unwrap_err();
        assert!(matches!(err, MkdirError::Chown { .. }), "{err}");
        assert!(!dir.join("v2").exists());
        // An existing directory is never removed by a failed re-run.
        let p = Params::parse(&params(&[])).unwrap();
        create(&dir, "v3", &p).unwrap();
        let d = dir.clone();
        std::thread::spawn(move || {
            drop_chown_capability();
            let p = Params::parse(&params(&[("gid", "12345")])).unwrap();
            assert!(create(&d, "v3", &p).is_err());
        })
        .join()
        .unwrap();
        assert!(dir.join("v3").is_dir());
    }
}
