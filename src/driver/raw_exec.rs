//! The `raw_exec` driver: the task is a local process with no isolation (tasks.md).
//!
//! The command is resolved through the task's `PATH`; the process runs in its task directory, in
//! a process group of its own, optionally as another user, with exactly the environment the runner
//! built. Its waiter (see [`super::process`]) copies stdout and stderr into rotated log files and,
//! when the process exits, SIGKILLs the rest of its group, so no process of a task outlives it;
//! a process that escaped the group but still holds the task's output is killed
//! [`process::DRAIN_AFTER_EXIT`] later.
//!
//! After an agent restart the runner stops a task's orphan by PID and start time
//! ([`process::stop_foreign_group`]) before the task starts again.

use std::path::{Path, PathBuf};

use super::logs::{RotatingFile, Stream};
use super::process::{self, AfterExit, Drain, ProcessError, ProcessSpec, RunAs, Supervision};
use super::{Driver, DriverError, StartSpec, TaskProcess};

/// The driver's name in jobspecs and node attributes.
pub const NAME: &str = "raw_exec";

/// The `raw_exec` driver.
#[derive(Debug, Default)]
pub struct RawExec;

impl process::Sink for RotatingFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        RotatingFile::write(self, bytes)
    }
}

impl Driver for RawExec {
    fn start(&self, spec: &StartSpec) -> Result<TaskProcess, DriverError> {
        let program = resolve_command(&spec.command, spec.env.get("PATH").map(String::as_str))
            .ok_or_else(|| DriverError::NotFound {
                command: spec.command.clone(),
            })?;
        let run_as = spec
            .user
            .as_deref()
            .map(RunAs::user)
            .transpose()
            .map_err(DriverError::Process)?;
        let log = |stream| {
            Box::new(RotatingFile::open(
                &spec.log_dir,
                &spec.task_name,
                stream,
                spec.logs.max_files,
                spec.logs.max_file_size_mb,
            ))
        };
        let child = process::spawn(
            &ProcessSpec {
                program: &program,
                args: &spec.args,
                env: &spec.env,
                cwd: &spec.cwd,
                run_as: run_as.as_ref(),
            },
            log(Stream::Stdout),
            log(Stream::Stderr),
            Supervision {
                after_exit: AfterExit::KillGroup,
                drain: Drain::For(process::DRAIN_AFTER_EXIT),
            },
            spec.thread_name.clone(),
        )
        .map_err(|e| match e {
            ProcessError::Spawn(source) => DriverError::Spawn {
                command: spec.command.clone(),
                source,
            },
            e => DriverError::Process(e),
        })?;
        let id = child.id();
        Ok(TaskProcess {
            pid: id.pid,
            start_ticks: id.start_ticks,
            exited: child.exited().clone(),
            child,
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
