//! The `raw_exec` driver: the task is a local process with no isolation (tasks.md).
//!
//! The command is resolved through the task's `PATH`; the process runs in its task directory, in
//! a process group of its own, optionally as another user, with exactly the environment the runner
//! built. The data directory's keeper ([`process::keeper`]) starts it and is its parent: it copies
//! stdout and stderr into rotated log files and, when the process exits, SIGKILLs the rest of its
//! group, so no process of a task outlives it; a process that escaped the group but still holds
//! the task's output is killed [`process::DRAIN_AFTER_EXIT`] later. The task outlives the agent;
//! [`RawExec::recover`] re-attaches to it.

use crossbeam_channel::{after, select, Receiver};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::exec::ExecSettings;
use super::process::keeper::{client::Kept, StartTask};
use super::process::{self, RunAs};
use crate::cgroup::{Cgroups, Limits, TaskCgroup};
use crate::thread::Never;

use super::{
    Attached, Driver, DriverError, HandleState, KeeperClient, KeeperError, RunningTask, StartSpec,
    TaskExit, TaskHandle, TaskRunState, TaskStats,
};

/// The driver's name in jobspecs and node attributes.
pub const NAME: &str = "raw_exec";

/// How long a stopped task may take to be reaped after SIGKILL before the stop gives up on it.
const REAP_AFTER_SIGKILL: Duration = process::REAP_AFTER_SIGKILL;

/// The `raw_exec` driver, and the `exec` driver ([`super::exec`]): the same with an isolation.
pub struct RawExec {
    keeper: Arc<KeeperClient>,
    /// `exec`'s settings, and whether this node can isolate (else it is not fingerprinted).
    exec: Option<(ExecSettings, bool)>,
    /// The node's cgroups; `None` runs tasks unconfined (docs/resources.md).
    cgroups: Option<Arc<Cgroups>>,
}

impl RawExec {
    pub fn new(keeper: Arc<KeeperClient>) -> RawExec {
        RawExec {
            keeper,
            exec: None,
            cgroups: None,
        }
    }

    /// The `exec` driver; `available`: the node can isolate its tasks.
    pub fn isolated(keeper: Arc<KeeperClient>, settings: ExecSettings, available: bool) -> RawExec {
        RawExec {
            keeper,
            exec: Some((settings, available)),
            cgroups: None,
        }
    }

    fn my_name(&self) -> &'static str {
        if self.exec.is_some() {
            super::exec::NAME
        } else {
            NAME
        }
    }

    /// Confines every task it starts to a cgroup of its own, with its limits.
    pub fn with_cgroups(mut self, cgroups: Option<Cgroups>) -> RawExec {
        self.cgroups = cgroups.map(Arc::new);
        self
    }

    /// A task's cgroup, by the naming rule: an agent that restarted finds the cgroups of the
    /// tasks it re-attached to the same way.
    fn cgroup(&self, alloc_id: &str, task: &str) -> Option<TaskCgroup> {
        self.cgroups.as_ref().map(|c| c.task(alloc_id, task))
    }

    fn kept(task: &RunningTask) -> &Kept {
        match &task.attached {
            Attached::Kept(kept) => kept,
            // Each runner calls the driver its task names, which made the task.
            Attached::Container(_) => unreachable!("raw_exec given a container"),
        }
    }

    fn attach(&self, kept: Kept) -> RunningTask {
        RunningTask {
            handle: TaskHandle::kept(self.my_name(), kept.pid, kept.start_ticks),
            attached: Attached::Kept(kept),
            started_nanos: None,
        }
    }

    fn check(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        if handle.driver == self.my_name() && handle.version == super::handle::HANDLE_VERSION {
            return Ok(());
        }
        Err(DriverError::ForeignHandle {
            driver: self.my_name(),
            handle_driver: handle.driver.clone(),
            version: handle.version,
        })
    }

    /// Starts a task; `forget`: a run of it that is over, which the keeper is told to forget in
    /// the same message (and is forgotten even when the start fails).
    fn start_after(
        &self,
        spec: &StartSpec,
        forget: Option<i32>,
    ) -> Result<RunningTask, DriverError> {
        let path = spec.env.get("PATH").map(String::as_str);
        let resolved = match &self.exec {
            Some((settings, _)) => {
                super::exec::resolve_in_task(settings, &spec.cwd, &spec.command, path)
            }
            None => resolve_command(&spec.command, path),
        }
        .ok_or_else(|| DriverError::NotFound {
            command: spec.command.clone(),
        })
        .and_then(|program| {
            let run_as = spec
                .user
                .as_deref()
                .map(RunAs::user)
                .transpose()
                .map_err(DriverError::Process)?;
            Ok((program, run_as))
        });
        let resolved = resolved.and_then(|r| match &self.exec {
            Some(_) => super::exec::task_caps(&spec.cap_add, &spec.cap_drop)
                .map(|caps| (r, Some(caps)))
                .map_err(DriverError::CapsNotAllowed),
            None => Ok((r, None)),
        });
        // Made (or a restart's reused) and its limits written before the process exists.
        let resolved = resolved.and_then(|(r, caps)| {
            let cgroup = self
                .cgroup(&spec.alloc_id, &spec.task_name)
                .map(|cg| {
                    cg.create(&Limits::of(&spec.resources, &spec.cores))
                        .map(|()| cg.paths())
                })
                .transpose()
                .map_err(DriverError::Cgroup)?;
            Ok((r, caps, cgroup))
        });
        let ((program, run_as), caps, cgroup) = match resolved {
            Ok(r) => r,
            Err(e) => {
                if let Some(pid) = forget {
                    self.keeper.forget(pid);
                }
                return Err(e);
            }
        };
        let task = StartTask {
            alloc_id: spec.alloc_id.clone(),
            task: spec.task_name.clone(),
            program,
            args: spec.args.clone(),
            env: spec.env.clone(),
            cwd: spec.cwd.clone(),
            run_as: run_as.map(|r| (r.uid, r.gid, r.groups)),
            log_dir: spec.log_dir.clone(),
            log_name: spec.task_name.clone(),
            max_files: spec.logs.max_files,
            max_file_size_mb: spec.logs.max_file_size_mb,
            logs_disabled: spec.logs.disabled,
            oom_score_adj: spec.oom_score_adj.map(|n| n as i32),
            isolate: self.exec.as_ref().zip(caps).map(|((settings, _), caps)| {
                // The log directory is `<alloc_dir>/alloc/logs`: its parent is `/alloc`.
                let shared = spec.log_dir.parent().unwrap_or(&spec.log_dir);
                super::exec::isolation(settings, &spec.cwd, shared, &spec.binds, caps)
            }),
            cgroup,
        };
        let kept = self.keeper.start(task, forget).map_err(|e| match e {
            KeeperError::Refused {
                errno: Some(errno), ..
            } => DriverError::Spawn {
                command: spec.command.clone(),
                source: io::Error::from_raw_os_error(errno),
            },
            e => DriverError::Keeper(e),
        })?;
        Ok(self.attach(kept))
    }

    /// Waits up to `within` for the exit; `None` when it did not come (or was received before).
    fn wait(kept: &Kept, within: Duration) -> Option<TaskExit> {
        select! {
            recv(kept.exited) -> exit => exit.ok(),
            recv(after(within)) -> _ => None,
        }
    }
}

impl Driver for RawExec {
    fn name(&self) -> &'static str {
        self.my_name()
    }

    fn fingerprint(&self) -> std::collections::BTreeMap<String, String> {
        match &self.exec {
            Some((_, false)) => Default::default(),
            _ => [(format!("driver.{}", self.my_name()), "1".to_string())].into(),
        }
    }

    fn start(&self, spec: &StartSpec) -> Result<RunningTask, DriverError> {
        self.start_after(spec, None)
    }

    fn restart(&self, previous: RunningTask, spec: &StartSpec) -> Result<RunningTask, DriverError> {
        let pid = Self::kept(&previous).pid;
        // A run whose exit the keeper reported needs nothing more than to be forgotten, which
        // goes with the start; one that may still run is killed first, as destroy does.
        if !self.keeper.has_exited(pid) {
            self.destroy(previous);
            return self.start(spec);
        }
        drop(previous);
        self.start_after(spec, Some(pid))
    }

    fn recover(&self, handle: &TaskHandle) -> Result<Option<RunningTask>, DriverError> {
        self.check(handle)?;
        Ok(match &handle.state {
            &HandleState::Kept { pid, start_ticks } => {
                self.keeper.claim(pid, start_ticks).map(|k| self.attach(k))
            }
            // A child of an agent before the keeper: nothing can reap it or read its output now.
            HandleState::Process { .. } => None,
            // Not raw_exec's (`check` refused it).
            HandleState::Container { .. } => None,
        })
    }

    fn reattached(&self, alloc_id: &str, task: &str, cores: &[u32]) {
        if let Some(cg) = self.cgroup(alloc_id, task) {
            cg.hold(cores);
        }
    }

    fn adopt(&self, alloc_id: &str, task: &str) -> Option<RunningTask> {
        self.keeper
            .claim_by_name(alloc_id, task)
            .map(|k| self.attach(k))
    }

    fn stop(
        &self,
        task: &RunningTask,
        signal: i32,
        timeout: Duration,
    ) -> Result<TaskExit, DriverError> {
        let kept = Self::kept(task);
        if let Err(e) = self.keeper.signal(kept.pid, signal) {
            log::warn!("cannot signal process group {}: {e}", kept.pid);
        }
        if let Some(exit) = Self::wait(kept, timeout) {
            return Ok(exit);
        }
        let _ = self.keeper.signal(kept.pid, libc::SIGKILL);
        Self::wait(kept, REAP_AFTER_SIGKILL).ok_or(DriverError::Unkillable { pid: kept.pid })
    }

    fn stop_orphan(
        &self,
        handle: &TaskHandle,
        signal: i32,
        timeout: Duration,
        cancel: &Receiver<Never>,
    ) -> Result<bool, DriverError> {
        self.check(handle)?;
        match &handle.state {
            &HandleState::Process { pid, start_ticks } => {
                if process::same_process_alive(pid, start_ticks) {
                    return Ok(process::stop_foreign_group(
                        pid,
                        start_ticks,
                        signal,
                        timeout,
                        cancel,
                    ));
                }
            }
            &HandleState::Kept { pid, start_ticks } => {
                if let Some(kept) = self.keeper.claim(pid, start_ticks) {
                    if let Err(e) = self.keeper.signal(kept.pid, signal) {
                        log::warn!("cannot signal process group {}: {e}", kept.pid);
                    }
                    let exited = select! {
                        recv(kept.exited) -> _ => true,
                        recv(after(timeout)) -> _ => false,
                        // Not destroyed: that would SIGKILL it. The keeper keeps it for the next
                        // agent, which stops it again.
                        recv(cancel) -> _ => return Ok(false),
                    };
                    if !exited {
                        let _ = self.keeper.signal(kept.pid, libc::SIGKILL);
                        if Self::wait(&kept, REAP_AFTER_SIGKILL).is_none() {
                            return Err(DriverError::Unkillable { pid: kept.pid });
                        }
                    }
                    self.destroy(self.attach(kept));
                }
            }
            HandleState::Container { .. } => {}
        }
        Ok(true)
    }

    fn destroy(&self, task: RunningTask) {
        let kept = Self::kept(&task);
        // A task whose exit the keeper reported is reaped: no round trip to kill it (this is on
        // the path from a crash to the restart). Otherwise the keeper answers whether it still
        // ran, and it is given SIGKILL_WAIT to go.
        if !self.keeper.has_exited(kept.pid) {
            if let Ok(true) = self.keeper.signal(kept.pid, libc::SIGKILL) {
                let _ = Self::wait(kept, process::SIGKILL_WAIT);
            }
        }
        self.keeper.forget(kept.pid);
        // The task is gone for good (a restart after a crash reuses its cgroup and does not come
        // here): whatever is left in its cgroup dies with it, and the cgroup goes.
        if let Some(cg) = self.cgroup(&kept.alloc_id, &kept.task) {
            if let Err(e) = cg.remove() {
                log::warn!("task {} of alloc {}: {e}", kept.task, kept.alloc_id);
            }
        }
    }

    fn inspect(&self, handle: &TaskHandle) -> TaskRunState {
        match (self.check(handle), handle.pid()) {
            (Ok(()), Some((pid, ticks))) if process::same_process_alive(pid, ticks) => {
                TaskRunState::Running
            }
            (Ok(()), _) => TaskRunState::Exited,
            (Err(_), _) => TaskRunState::Unknown,
        }
    }

    fn signal(&self, task: &RunningTask, signal: i32) -> Result<(), DriverError> {
        self.keeper
            .signal(Self::kept(task).pid, signal)
            .map(|_| ())
            .map_err(DriverError::Keeper)
    }

    fn stats(&self, _task: &RunningTask) -> Result<TaskStats, DriverError> {
        Err(DriverError::NotSupported {
            driver: self.my_name(),
            operation: "stats",
        })
    }
}

/// Resolves `command` through `path` (the task's PATH, else the agent's), like `exec.LookPath`.
pub fn resolve_command(command: &str, path: Option<&str>) -> Option<PathBuf> {
    if command.is_empty() {
        return None;
    }
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_executable(&p).then_some(p);
    }
    let agent_path = std::env::var("PATH").ok();
    let path = path
        .map(str::to_string)
        .or(agent_path)
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_string());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_resolve_through_the_path() {
        assert_eq!(resolve_command("", None), None);
        assert_eq!(
            resolve_command("sh", Some("/nonexistent:/bin")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            resolve_command("/bin/sh", Some("")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(resolve_command("no-such-command-here", Some("/bin")), None);
        assert_eq!(resolve_command("/etc/passwd", None), None, "not executable");
        let _ = Path::new("/");
    }
}
