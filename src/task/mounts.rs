//! The volume mount hook: makes a task's `volume_mount`s visible before every start.
//!
//! `raw_exec` has no filesystem isolation, so a mount is a symlink `<task dir>/<destination>` to the
//! volume's host path, plus `NOMAD_VOLUME_<NAME>` (the host path) in the environment. A volume that
//! vanished between scheduling and start is a `Setup Failure`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::task::hooks::{HookError, TaskContext, TaskHook};

/// A host volume as allocations see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVolume {
    pub name: String,
    pub path: PathBuf,
    pub read_only: bool,
    /// Dynamic volumes have an ID; static ones from the agent configuration do not.
    pub id: Option<String>,
}

/// What allocations need from the volume manager.
pub trait VolumeLookup: Send + Sync {
    /// A ready host volume by name.
    fn lookup(&self, name: &str) -> Option<HostVolume>;
    /// Receives a message (coalesced) whenever the set of ready volumes may have changed.
    fn changes(&self) -> Receiver<()>;
    /// Records that allocation `alloc_id` uses the volume named `name`.
    fn claim(&self, _name: &str, _alloc_id: &str) {}
    /// Forgets every use by allocation `alloc_id`.
    fn release(&self, _alloc_id: &str) {}
}

pub struct VolumeMountHook {
    pub volumes: Arc<dyn VolumeLookup>,
}

/// `NOMAD_VOLUME_<NAME>`: the volume label upper-cased, with characters that cannot be in a
/// variable name turned into `_`.
pub fn volume_env_name(label: &str) -> String {
    let mut s = String::from("NOMAD_VOLUME_");
    s.extend(label.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

fn inside(base: &Path, rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(base.join(rel))
}

impl TaskHook for VolumeMountHook {
    fn name(&self) -> &'static str {
        "volume_mounts"
    }

    fn prestart(
        &self,
        task: &TaskContext,
        env: &mut BTreeMap<String, String>,
    ) -> Result<(), HookError> {
        let group = task
            .job
            .task_groups
            .iter()
            .find(|g| g.name == task.group)
            .ok_or_else(|| HookError(format!("group {:?} not found", task.group)))?;
        for mount in &task.task.volume_mounts {
            let request = group.volumes.get(&mount.volume).ok_or_else(|| {
                HookError(format!(
                    "volume_mount names unknown volume {:?}",
                    mount.volume
                ))
            })?;
            let volume = self
                .volumes
                .lookup(&request.source)
                .ok_or_else(|| HookError(format!("missing host volume {:?}", request.source)))?;
            let link = inside(&task.task_dir, &mount.destination).ok_or_else(|| {
                HookError(format!(
                    "volume_mount destination {:?} must be a relative path inside the task directory",
                    mount.destination
                ))
            })?;
            if let Some(parent) = link.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| HookError(format!("cannot create {}: {e}", parent.display())))?;
            }
            match fs::symlink_metadata(&link) {
                Ok(m) if m.file_type().is_symlink() => {
                    let _ = fs::remove_file(&link);
                }
                Ok(_) => {
                    return Err(HookError(format!(
                        "volume_mount destination {} exists and is not a volume link",
                        link.display()
                    )))
                }
                Err(_) => {}
            }
            std::os::unix::fs::symlink(&volume.path, &link).map_err(|e| {
                HookError(format!(
                    "cannot link volume {:?} at {}: {e}",
                    request.source,
                    link.display()
                ))
            })?;
            env.insert(
                volume_env_name(&mount.volume),
                volume.path.display().to_string(),
            );
            self.volumes.claim(&request.source, &task.alloc_id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        assert_eq!(volume_env_name("data"), "NOMAD_VOLUME_DATA");
        assert_eq!(volume_env_name("my-vol.1"), "NOMAD_VOLUME_MY_VOL_1");
    }

    #[test]
    fn destinations_stay_inside() {
        let base = Path::new("/t");
        assert_eq!(inside(base, "data"), Some(PathBuf::from("/t/data")));
        assert_eq!(
            inside(base, "local/data"),
            Some(PathBuf::from("/t/local/data"))
        );
        assert_eq!(inside(base, "../x"), None);
        assert_eq!(inside(base, "/etc"), None);
        assert_eq!(inside(base, "a/../../b"), None);
    }
}
