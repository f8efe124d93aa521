//! The volume mount hook: makes a task's `volume_mount`s visible before every start.
//!
//! `raw_exec` has no filesystem isolation, so a mount is a symlink `<task dir>/<destination>` to the
//! volume's host path, plus `NOMAD_VOLUME_<NAME>` (the host path) in the environment; a CSI
//! volume is a bind mount there instead where the agent is root ([`crate::task::bind`]). A volume that
//! vanished between scheduling and start is a `Setup Failure`.
//!
//! The task owns its task directory, so the directories on the way to a destination, and the
//! destination itself, may be links it planted: they are reached from the allocation root
//! without following a link ([`nodeward_keeper::beneath`]). A link where a directory of the path
//! belongs is removed and the directory made again (reported as a `Task Setup` event); a link at
//! the destination is the previous run's volume link and is replaced; anything else there is the
//! task's own file and an error.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nodeward_keeper::beneath::Kind;

use crossbeam_channel::Receiver;

use crate::jobspec::{VolumeMount, VolumeRequest};
use crate::task::hooks::{HookError, Interrupt, TaskContext, TaskHook};
use crate::task::taskdir::open_parent_beneath;

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

/// Where an allocation's CSI volumes are published on this node (the CSI volume manager, which
/// publishes them before the allocation's tasks start).
pub trait CsiMountPaths: Send + Sync {
    /// The published path of the task's allocation for `request`, `None` when not published.
    fn published(&self, task: &TaskContext, request: &VolumeRequest) -> Option<PathBuf>;
}

pub struct VolumeMountHook {
    pub volumes: Arc<dyn VolumeLookup>,
    /// `None` where CSI volumes are not used (tests of the runner).
    pub csi: Option<Arc<dyn CsiMountPaths>>,
    /// The agent's variables tasks get (`task_env_passthrough`), for `${env.X}` in a destination.
    pub task_env: Arc<BTreeMap<String, String>>,
}

/// A `volume_mount` as this run mounts it: its destination interpolated.
struct Resolved<'t> {
    mount: &'t VolumeMount,
    request: &'t VolumeRequest,
    volume: HostVolume,
    destination: String,
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

/// `rel` as plain names (a `.` dropped), or `None` when it would leave the directory it is in.
fn inside(rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Makes `<task dir>/<rel>` a link to `target`; answers what had to be replaced on the way.
fn link_volume(
    task: &TaskContext,
    source: &str,
    rel: &Path,
    target: &Path,
) -> Result<Vec<String>, HookError> {
    let shown = task.task_dir.join(rel);
    let fail = |e: std::io::Error| {
        HookError::new(format!(
            "cannot link volume {source:?} at {}: {e}",
            shown.display()
        ))
    };
    let (parent, replaced) = open_parent_beneath(task, rel, fail)?;
    let name = rel.file_name().unwrap_or(OsStr::new(""));
    match parent.entry(name) {
        Ok(e) if e.kind == Kind::Symlink => parent.remove_file(name).map_err(fail)?,
        Ok(_) => {
            return Err(HookError::new(format!(
                "volume_mount destination {} exists and is not a volume link",
                shown.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    parent.symlink(target, name).map_err(fail)?;
    Ok(replaced
        .into_iter()
        .map(|r| format!("{r}, and made the directory again for a volume_mount"))
        .collect())
}

impl VolumeMountHook {
    /// Each `volume_mount` of the task with its group's request, the ready host volume and its
    /// destination interpolated with the task's environment, and checked as the jobspec checks
    /// one written without `${...}`.
    fn resolve<'t>(&self, task: &'t TaskContext) -> Result<Vec<Resolved<'t>>, HookError> {
        let group = task
            .job
            .task_groups
            .iter()
            .find(|g| g.name == task.group)
            .ok_or_else(|| HookError::new(format!("group {:?} not found", task.group)))?;
        task.task
            .volume_mounts
            .iter()
            .map(|mount| {
                let request = group.volumes.get(&mount.volume).ok_or_else(|| {
                    HookError::new(format!(
                        "volume_mount names unknown volume {:?}",
                        mount.volume
                    ))
                })?;
                let volume = if request.is_csi() {
                    let path = self.csi.as_ref().and_then(|c| c.published(task, request));
                    let path = path.ok_or_else(|| {
                        HookError::new(format!("CSI volume {:?} is not published", request.source))
                    })?;
                    HostVolume {
                        name: request.source.clone(),
                        path,
                        read_only: request.read_only,
                        id: None,
                    }
                } else {
                    self.volumes.lookup(&request.source).ok_or_else(|| {
                        HookError::new(format!("missing host volume {:?}", request.source))
                    })?
                };
                let destination = crate::task::env::interpolate_for_task(
                    task,
                    &self.task_env,
                    &mount.destination,
                );
                crate::jobspec::validate::check_mount_destination(
                    &task.task.driver,
                    &mount.destination,
                    &destination,
                )
                .map_err(HookError::new)?;
                Ok(Resolved {
                    mount,
                    request,
                    volume,
                    destination,
                })
            })
            .collect()
    }
}

impl TaskHook for VolumeMountHook {
    fn container_binds(&self, task: &TaskContext) -> Result<Vec<crate::driver::Bind>, HookError> {
        Ok(self
            .resolve(task)?
            .into_iter()
            .map(|r| crate::driver::Bind {
                host: r.volume.path,
                container: r.destination,
                read_only: r.mount.read_only || r.request.read_only || r.volume.read_only,
            })
            .collect())
    }

    fn name(&self) -> &'static str {
        // Nomad's hook of host and CSI volume mounts.
        "volumes"
    }

    fn prestart(
        &self,
        task: &TaskContext,
        env: &mut BTreeMap<String, String>,
        _stop: &Interrupt,
    ) -> Result<Vec<String>, HookError> {
        let mut notes = Vec::new();
        let container = task.task.driver == crate::jobspec::docker::NAME;
        let exec = task.task.driver == crate::driver::exec::NAME;
        for Resolved {
            mount,
            request,
            volume,
            destination,
        } in self.resolve(task)?
        {
            if container || exec {
                // Bound at its destination by the docker driver, or in an exec task's root by
                // the keeper (`container_binds`): a link would not resolve there.
                let shown = if exec {
                    crate::driver::exec::path_in_task(&destination)
                } else {
                    destination
                };
                env.insert(volume_env_name(&mount.volume), shown);
                if !request.is_csi() {
                    self.volumes.claim(&request.source, &task.alloc_id);
                }
                continue;
            }
            // `resolve` checked it: this is the path below the task directory it names.
            let rel = inside(&destination).ok_or_else(|| {
                HookError::new(format!(
                    "volume_mount destination {destination:?} must be a relative path inside the task directory"
                ))
            })?;
            if request.is_csi() && crate::task::bind::can_bind() {
                let read_only = mount.read_only || request.read_only || volume.read_only;
                notes.extend(crate::task::bind::bind_volume(
                    task,
                    &request.source,
                    &rel,
                    &volume.path,
                    read_only,
                )?);
            } else {
                notes.extend(link_volume(task, &request.source, &rel, &volume.path)?);
            }
            env.insert(
                volume_env_name(&mount.volume),
                volume.path.display().to_string(),
            );
            if !request.is_csi() {
                self.volumes.claim(&request.source, &task.alloc_id);
            }
        }
        Ok(notes)
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
        assert_eq!(inside("data"), Some(PathBuf::from("data")));
        assert_eq!(inside("local/data"), Some(PathBuf::from("local/data")));
        assert_eq!(inside("./a/b/"), Some(PathBuf::from("a/b")));
        assert_eq!(inside("../x"), None);
        assert_eq!(inside("/etc"), None);
        assert_eq!(inside("a/../../b"), None);
        assert_eq!(inside("."), None);
    }
}
