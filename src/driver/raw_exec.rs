//! The `raw_exec` driver: the task is a local process with no isolation (tasks.md).
//!
//! The command is resolved through the task's `PATH`; the process runs in its task directory, in
//! a process group of its own, optionally as another user, with exactly the environment the runner
//! built. Its waiter (see [`super::process`]) copies stdout and stderr into rotated log files and,
//! when the process exits, SIGKILLs the rest of its group, so no process of a task outlives it;
//! a process that escaped the group but still holds the task's output is killed
//! [`process::DRAIN_AFTER_EXIT`] later.
//!
//! Re-attaching after an agent restart is not supported yet: [`RawExec::recover`] answers `None`
//! and the runner stops the orphan, by PID and start time, before the task starts again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::logs::{RotatingFile, Stream};
use super::process::{
    self, AfterExit, Drain, ProcessError, ProcessId, ProcessSpec, RunAs, Supervision,
};
use super::{
    Attached, Driver, DriverError, ExitStatus, RunningTask, StartSpec, TaskHandle, TaskRunState,
    TaskStats,
};

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

impl RawExec {
    fn child(task: &RunningTask) -> &process::Child {
        match &task.attached {
            Attached::Process(child) => child,
        }
    }

    /// The process a handle of this driver names.
    fn process_of(handle: &TaskHandle) -> Result<ProcessId, DriverError> {
        match handle.pid() {
            Some((pid, start_ticks))
                if handle.driver == NAME && handle.version == super::handle::HANDLE_VERSION =>
            {
                Ok(ProcessId { pid, start_ticks })
            }
            _ => Err(DriverError::ForeignHandle {
                driver: NAME,
                handle_driver: handle.driver.clone(),
                version: handle.version,
            }),
        }
    }
}

impl Driver for RawExec {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, spec: &StartSpec) -> Result<RunningTask, DriverError> {
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
        Ok(RunningTask {
            handle: TaskHandle::process(NAME, id.pid, id.start_ticks),
            attached: Attached::Process(child),
        })
    }

    fn recover(&self, handle: &TaskHandle) -> Result<Option<RunningTask>, DriverError> {
        Self::process_of(handle)?;
        // The process is not this agent's child: nothing can reap it or read its output here.
        // Re-attaching needs a supervisor that outlives the agent (live-restore.md).
        Ok(None)
    }

    fn stop(
        &self,
        task: &RunningTask,
        signal: i32,
        timeout: Duration,
    ) -> Result<ExitStatus, DriverError> {
        let child = Self::child(task);
        child.stop(signal, timeout).ok_or(DriverError::Unkillable {
            pid: child.id().pid,
        })
    }

    fn stop_orphan(
        &self,
        handle: &TaskHandle,
        signal: i32,
        timeout: Duration,
    ) -> Result<(), DriverError> {
        let id = Self::process_of(handle)?;
        if id.is_alive() {
            process::stop_foreign_group(id.pid, id.start_ticks, signal, timeout);
        }
        Ok(())
    }

    fn destroy(&self, task: RunningTask) {
        let Attached::Process(child) = task.attached;
        child.kill_unless_reaped();
        child.release();
    }

    fn inspect(&self, handle: &TaskHandle) -> TaskRunState {
        match Self::process_of(handle) {
            Ok(id) if id.is_alive() => TaskRunState::Running,
            Ok(_) => TaskRunState::Exited,
            Err(_) => TaskRunState::Unknown,
        }
    }

    fn signal(&self, task: &RunningTask, signal: i32) -> Result<(), DriverError> {
        Self::child(task)
            .signal_group(signal)
            .map_err(DriverError::Signal)
    }

    fn stats(&self, _task: &RunningTask) -> Result<TaskStats, DriverError> {
        Err(DriverError::NotSupported {
            driver: NAME,
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
    use crate::jobspec::LogConfig;
    use std::collections::BTreeMap;
    use std::time::Instant;

    fn spec(dir: &Path, args: &[&str]) -> StartSpec {
        StartSpec {
            command: "sh".to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            cwd: dir.to_path_buf(),
            user: None,
            log_dir: dir.to_path_buf(),
            task_name: "t".to_string(),
            logs: LogConfig {
                max_files: 2,
                max_file_size_mb: 1,
            },
            thread_name: "t-raw-exec".to_string(),
        }
    }

    #[test]
    fn a_task_through_the_driver_interface() {
        let dir = std::env::temp_dir().join(format!("nw-raw-exec-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let driver = RawExec;
        assert_eq!(driver.name(), "raw_exec");
        let missing = StartSpec {
            command: "no-such-command-here".to_string(),
            ..spec(&dir, &[])
        };
        assert_eq!(
            driver.start(&missing).err().unwrap().to_string(),
            "exec: \"no-such-command-here\": executable file not found in $PATH"
        );

        let task = driver
            .start(&spec(&dir, &["-c", "echo started; exec sleep 30"]))
            .unwrap();
        let handle = task.handle().clone();
        let log = dir.join("t.stdout.0");
        // Stopped before it has written, the shell would die before its echo.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read(&log).map_or(true, |l| l.is_empty()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(driver.inspect(&handle), TaskRunState::Running);
        assert!(driver.recover(&handle).unwrap().is_none());
        assert!(matches!(
            driver.stats(&task),
            Err(DriverError::NotSupported { .. })
        ));
        let st = driver
            .stop(&task, libc::SIGTERM, Duration::from_secs(10))
            .unwrap();
        assert_eq!(
            (st.exit_code, st.signal),
            (128 + libc::SIGTERM, libc::SIGTERM)
        );
        assert_eq!(driver.inspect(&handle), TaskRunState::Exited);
        driver.destroy(task);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\n");

        // A task no RunningTask is attached to is stopped by its handle; one that is gone is not
        // an error, and a handle of another driver is refused.
        let orphan = driver.start(&spec(&dir, &["-c", "exec sleep 30"])).unwrap();
        let handle = orphan.handle().clone();
        let started = Instant::now();
        driver
            .stop_orphan(&handle, libc::SIGTERM, Duration::from_secs(10))
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(orphan.exited().recv().is_ok());
        driver.destroy(orphan);
        driver
            .stop_orphan(&handle, libc::SIGTERM, Duration::from_secs(10))
            .unwrap();
        let foreign = TaskHandle {
            driver: "docker".to_string(),
            ..handle
        };
        assert!(matches!(
            driver.recover(&foreign),
            Err(DriverError::ForeignHandle { .. })
        ));
        assert_eq!(driver.inspect(&foreign), TaskRunState::Unknown);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
