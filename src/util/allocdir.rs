//! The allocation directory's layout (tasks.md "Allocation directory"), in one place:
//!
//! ```text
//! <data_dir>/alloc/                 alloc_root: every allocation of this agent
//!   <alloc_id>/                     alloc_dir
//!     alloc/                        shared_dir: shared by the tasks (NOMAD_ALLOC_DIR)
//!       logs/                       log_dir: <task>.stdout.N, <task>.stderr.N
//!     <task>/                       task_dir: the task's working directory
//!       local/                      local_dir (NOMAD_TASK_DIR)
//!       secrets/                    secrets_dir (NOMAD_SECRETS_DIR)
//! ```
//!
//! Only paths: the task directory hook creates the directories, leftover stopping and the log API
//! find things in them. Below [`alloc_root`] a task can plant links, so nothing opens these paths
//! by name: they are walked from the allocation root with `nodeward_keeper::beneath`. Like Nomad's `client/allocdir`, it depends on nothing, so the allocation
//! manager, the task runner and the API can all use it.

use std::path::{Path, PathBuf};

/// `<data_dir>/alloc`: the directories of every allocation of the agent on `data_dir`.
pub fn alloc_root(data_dir: &Path) -> PathBuf {
    // The keeper's constant: it writes task logs only beneath this directory.
    data_dir.join(nodeward_keeper::ALLOC_ROOT)
}

/// `<data_dir>/alloc/<alloc_id>`.
pub fn alloc_dir(data_dir: &Path, alloc_id: &str) -> PathBuf {
    alloc_root(data_dir).join(alloc_id)
}

/// `<alloc_dir>/<task>`: the task's working directory.
pub fn task_dir(alloc_dir: &Path, task: &str) -> PathBuf {
    alloc_dir.join(task)
}

/// `<alloc_dir>/alloc`: shared by the allocation's tasks (`NOMAD_ALLOC_DIR`).
pub fn shared_dir(alloc_dir: &Path) -> PathBuf {
    alloc_dir.join("alloc")
}

/// `<alloc_dir>/alloc/logs`: the tasks' rotated stdout and stderr files.
pub fn log_dir(alloc_dir: &Path) -> PathBuf {
    shared_dir(alloc_dir).join("logs")
}

/// `<task_dir>/local` (`NOMAD_TASK_DIR`).
pub fn local_dir(task_dir: &Path) -> PathBuf {
    task_dir.join("local")
}

/// `<task_dir>/secrets` (`NOMAD_SECRETS_DIR`).
pub fn secrets_dir(task_dir: &Path) -> PathBuf {
    task_dir.join("secrets")
}

/// `<data_dir>/client/docker/<alloc_id>`: the docker driver's files of an allocation (its log
/// cursors), outside the allocation directory its tasks can write.
pub fn docker_dir(data_dir: &Path, alloc_id: &str) -> PathBuf {
    data_dir.join("client/docker").join(alloc_id)
}

/// `<data_dir>/client/csi/plugins/<alloc_id>`: where the plugin of an allocation creates its
/// socket (a containerised plugin sees it at its `mount_dir`).
pub fn csi_socket_dir(data_dir: &Path, alloc_id: &str) -> PathBuf {
    data_dir.join("client/csi/plugins").join(alloc_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_of_tasks_md() {
        let alloc = alloc_dir(Path::new("/data"), "1e1d");
        assert_eq!(alloc_root(Path::new("/data")), Path::new("/data/alloc"));
        assert_eq!(alloc, Path::new("/data/alloc/1e1d"));
        assert_eq!(shared_dir(&alloc), Path::new("/data/alloc/1e1d/alloc"));
        assert_eq!(log_dir(&alloc), Path::new("/data/alloc/1e1d/alloc/logs"));
        let task = task_dir(&alloc, "web");
        assert_eq!(task, Path::new("/data/alloc/1e1d/web"));
        assert_eq!(local_dir(&task), Path::new("/data/alloc/1e1d/web/local"));
        assert_eq!(
            secrets_dir(&task),
            Path::new("/data/alloc/1e1d/web/secrets")
        );
    }
}
