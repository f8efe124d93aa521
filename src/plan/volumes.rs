//! Host volumes as a feasibility rule: a group that mounts a node's host volume read-write
//! cannot run where that volume is read-only, and a node that lacks a volume the group mounts
//! makes its allocation wait at its gate until the volume appears.
//!
//! Two uses, both pure over what a node has (`name → read-only?`):
//!
//! - [`check_writable`]: the API refuses, before any registration, a job that this node cannot
//!   run as written (a read-write mount of a read-only static volume), in the words the API has
//!   always answered with ([`PlanError::ReadOnlyVolume`]);
//! - [`fits`]: the planner prefers, per group, the nodes that have every host volume it mounts
//!   in a usable mode. When none has them, no node is filtered: the allocation is placed and
//!   waits for its volumes, as it always has on one node (a dynamic volume created later, a
//!   static one whose plugin comes up).
//!
//! CSI volumes are not host volumes: they are claimed when the allocation starts.

use std::collections::BTreeMap;

use super::PlanError;
use crate::jobspec::{Job, TaskGroup};

/// One host volume of a node, as placement reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostVolumeView {
    pub read_only: bool,
}

/// The host volume requests of `group` that a task mounts: `(task, volume, source, writes)`.
fn mounts(group: &TaskGroup) -> impl Iterator<Item = (&str, &str, &str, bool)> {
    group.tasks.iter().flat_map(move |task| {
        task.volume_mounts.iter().filter_map(move |mount| {
            let request = group.volumes.get(&mount.volume).filter(|r| !r.is_csi())?;
            let writes = !mount.read_only && !request.read_only;
            Some((
                task.name.as_str(),
                mount.volume.as_str(),
                request.source.as_str(),
                writes,
            ))
        })
    })
}

/// Refuses a job that mounts a read-only host volume read-write; `read_only(source)` says
/// whether the node's volume of that name is read-only (`None`: the node has none, which is
/// waited for).
pub fn check_writable(
    job: &Job,
    read_only: impl Fn(&str) -> Option<bool>,
) -> Result<(), PlanError> {
    for group in &job.task_groups {
        for (task, volume, source, writes) in mounts(group) {
            if writes && read_only(source) == Some(true) {
                return Err(PlanError::ReadOnlyVolume {
                    task: task.to_string(),
                    volume: volume.to_string(),
                    host_volume: source.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Whether a node with `volumes` has every host volume `group` mounts, writable where it is
/// mounted read-write.
pub fn fits(group: &TaskGroup, volumes: &BTreeMap<String, HostVolumeView>) -> bool {
    mounts(group).all(|(_, _, source, writes)| {
        volumes
            .get(source)
            .is_some_and(|v| !(writes && v.read_only))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(read_only_mount: bool) -> Job {
        let hcl = format!(
            "job \"j\" {{\n group \"g\" {{\n  volume \"data\" {{\n   type = \"host\"\n   \
             source = \"shared\"\n  }}\n  task \"t\" {{\n   driver = \"raw_exec\"\n   \
             config {{ command = \"true\" }}\n   volume_mount {{\n    volume = \"data\"\n    \
             destination = \"data\"\n    read_only = {read_only_mount}\n   }}\n  }}\n }}\n}}\n"
        );
        crate::jobspec::hcl::parse_job(&hcl).unwrap().job
    }

    #[test]
    fn a_read_write_mount_of_a_read_only_volume_is_refused_in_the_apis_words() {
        let err = check_writable(&job(false), |_| Some(true)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "task \"t\" mounts volume \"data\" read-write, but host volume \"shared\" is read-only"
        );
        assert!(check_writable(&job(true), |_| Some(true)).is_ok());
        assert!(check_writable(&job(false), |_| Some(false)).is_ok());
        assert!(check_writable(&job(false), |_| None).is_ok(), "waited for");
    }

    #[test]
    fn a_node_fits_a_group_with_its_volumes_in_a_usable_mode() {
        let group = job(false).task_groups[0].clone();
        let with =
            |read_only| BTreeMap::from([("shared".to_string(), HostVolumeView { read_only })]);
        assert!(fits(&group, &with(false)));
        assert!(!fits(&group, &with(true)));
        assert!(!fits(&group, &BTreeMap::new()));
        assert!(fits(&job(true).task_groups[0], &with(true)));
    }
}
