//! HCL2 evaluation of jobspecs the API is sent (`POST /v1/jobs/parse`), in a short-lived child
//! process with hard limits, so that no jobspec can crash or starve the agent.
//!
//! A jobspec's expressions can build values without bound (nested `for` expressions over
//! `range(1024)`, locals that double a list thirty times): evaluated in the agent, one request
//! could take all the node's memory and get the agent killed, or keep a worker busy for minutes.
//! Here the evaluation runs in the agent's own binary (`/proc/self/exe`, which still names it
//! after an upgrade replaced the file) in the hidden mode [`CHILD_ARG`], started through
//! [`crate::driver::process`] like every child of the agent:
//!
//! - limits: [`Limits`] (address space, CPU time, a wall-clock deadline after which the agent
//!   kills it, the size of its answer); no core dump, no file written;
//! - what it sees: stdin (the [`Evaluation`] as JSON), stdout (its [`Reply`]), stderr (kept for
//!   the reason of a crash); no other descriptor, an empty environment, cwd `/`, the user `nobody`
//!   when the agent is root, and no file functions (the evaluation's `Files::Disabled`);
//! - at most [`Limits::children`] at once: a request that finds no free slot within
//!   [`SLOT_WAIT`] is refused as [`SandboxError::Busy`].
//!
//! Thread protocol: [`Sandbox::parse_job`] runs on the caller's thread (an API worker). It takes a
//! slot, spawns the child (one waiter thread, joined by `release` before the call returns),
//! `select!`s over the child's exit and the deadline, then over the end of its stdout and the same
//! deadline; at the deadline it SIGKILLs the child's group. Nothing outlives the call.

use chrono::{DateTime, Utc};
use crossbeam_channel::{at, bounded, select, Receiver, Sender};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::driver::process::{
    self, AfterExit, Capped, Drain, ExitStatus, Limit, ProcessError, ProcessSpec, Resource, RunAs,
    Supervision,
};
use crate::hcl::eval::{Inputs, VarFile};
use crate::hcl::funcs::Files;
use crate::jobspec::{self, Job, JobspecError};

/// The first argument that starts the binary in the child's mode ([`child_main`]). Not a command
/// of the CLI, and not in its help: only the agent starts it.
pub const CHILD_ARG: &str = "__evaluate-jobspec";

/// How long a request waits for one of the [`Limits::children`] slots before it is refused.
pub const SLOT_WAIT: Duration = Duration::from_secs(1);

/// The most stderr of a child kept for the reason of its crash.
const STDERR_KEPT: usize = 4096;

/// The most of stdin the child reads: a request body is at most 1 MiB (the API's limit), which its
/// JSON encoding may at most make six times larger.
const INPUT_LIMIT: u64 = 8 << 20;

/// How long a child killed at the deadline may take to be reaped before the caller goes on.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

/// The bounds of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of address space (`RLIMIT_AS`); the binary and its thread stacks count too.
    pub memory: u64,
    /// Seconds of CPU time (`RLIMIT_CPU`, SIGXCPU then SIGKILL a second later).
    pub cpu_secs: u64,
    /// Wall-clock time, after which the agent kills the child (one that sleeps or is starved of
    /// the CPU uses no CPU time, and must not hold a worker forever).
    pub deadline: Duration,
    /// Bytes of the child's answer, the parsed job's JSON.
    pub output: usize,
    /// Children running at once.
    pub children: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 512 << 20,
            cpu_secs: 5,
            deadline: Duration::from_secs(10),
            output: 16 << 20,
            children: 2,
        }
    }
}

/// Why an evaluation gave no job. The first five are the jobspec's (a 400); the rest the agent's.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The evaluation's own error, in the words of an in-process parse.
    #[error("{0}")]
    Jobspec(String),
    #[error("the jobspec's evaluation used more than {} MiB of memory", .limit >> 20)]
    Memory { limit: u64 },
    #[error("the jobspec's evaluation used more than {secs} s of CPU time")]
    Cpu { secs: u64 },
    #[error("the jobspec's evaluation did not end within {} s", .limit.as_secs())]
    Deadline { limit: Duration },
    #[error("the jobspec's evaluation nests too deeply: it overflowed its stack")]
    Stack,
    #[error("the job evaluated from the jobspec is larger than {} MiB of JSON", .limit >> 20)]
    TooLarge { limit: usize },
    #[error("the agent is already evaluating {max} jobspecs, as many as it evaluates at once; try again")]
    Busy { max: usize },
    #[error("cannot start the jobspec's evaluation process {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: ProcessError,
    },
    #[error("the jobspec's evaluation process ended with {}: {stderr}", describe(.status))]
    Crashed { status: ExitStatus, stderr: String },
    #[error("the jobspec's evaluation process gave an unreadable answer: {0}")]
    Reply(String),
}

impl SandboxError {
    /// Whether the jobspec caused it (the caller's to fix), not the agent.
    pub fn is_jobspec(&self) -> bool {
        matches!(
            self,
            SandboxError::Jobspec(_)
                | SandboxError::Memory { .. }
                | SandboxError::Cpu { .. }
                | SandboxError::Deadline { .. }
                | SandboxError::Stack
                | SandboxError::TooLarge { .. }
        )
    }
}

fn describe(status: &ExitStatus) -> String {
    if status.signal != 0 {
        format!("signal {}", status.signal)
    } else {
        format!("exit code {}", status.exit_code)
    }
}

/// What one evaluation is given: the child's stdin, and the in-process parse's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evaluation {
    pub hcl: String,
    /// `(name, text)` of each var file, in order (the API's `Variables`).
    pub var_files: Vec<(String, String)>,
    /// The error of every file function.
    pub files_disabled: String,
    /// What `timestamp()` answers, in nanoseconds since the epoch: the agent's clock, not the
    /// child's.
    pub now_nanos: i64,
}

impl Evaluation {
    pub fn new(hcl: String, var_files: Vec<VarFile>, files_disabled: &str) -> Evaluation {
        Evaluation {
            hcl,
            var_files: var_files.into_iter().map(|f| (f.name, f.text)).collect(),
            files_disabled: files_disabled.to_string(),
            now_nanos: Utc::now().timestamp_nanos_opt().unwrap_or(0),
        }
    }

    /// Evaluates and parses the jobspec in this process: what the child does, and what a caller
    /// without limits (the fuzz target) does.
    pub fn run(&self) -> Result<Job, JobspecError> {
        let inputs = Inputs {
            var_files: self
                .var_files
                .iter()
                .map(|(name, text)| VarFile {
                    name: name.clone(),
                    text: text.clone(),
                })
                .collect(),
            files: Files::Disabled(self.files_disabled.clone()),
            now: Some(DateTime::from_timestamp_nanos(self.now_nanos)),
            ..Inputs::default()
        };
        Ok(jobspec::hcl::parse_job_with(&self.hcl, &inputs)?.job)
    }
}

/// What the child answers on stdout.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Job(Box<Job>),
    Error(String),
}

/// The mode [`CHILD_ARG`]: reads an [`Evaluation`] on stdin, writes a [`Reply`] on stdout.
/// Answers the exit code: 0 when a reply was written, whatever it says.
pub fn child_main() -> u8 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .lock()
        .take(INPUT_LIMIT)
        .read_to_end(&mut input)
    {
        eprintln!("cannot read the evaluation request: {e}");
        return 2;
    }
    let evaluation: Evaluation = match serde_json::from_slice(&input) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("invalid evaluation request: {e}");
            return 2;
        }
    };
    let reply = match evaluation.run() {
        Ok(job) => Reply::Job(Box::new(job)),
        Err(e) => Reply::Error(e.to_string()),
    };
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &reply)
        .map_err(std::io::Error::from)
        .and_then(|()| out.flush());
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cannot write the evaluation's answer: {e}");
            2
        }
    }
}

/// Runs evaluations in children of `program` within [`Limits`], [`Limits::children`] at once.
pub struct Sandbox {
    program: PathBuf,
    limits: Limits,
    /// `nobody`'s credentials when the agent is root: the evaluation needs no right at all.
    run_as: Option<RunAs>,
    /// One token per free slot: taking one is starting a child, and its [`Slot`] gives it back.
    free: (Sender<()>, Receiver<()>),
}

/// A taken slot, given back when dropped.
struct Slot<'a>(&'a Sender<()>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Sandbox {
    /// Children of `program` (the agent passes `/proc/self/exe`).
    pub fn new(program: PathBuf, limits: Limits) -> Sandbox {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let run_as = if root {
            match RunAs::user("nobody") {
                Ok(r) => Some(r),
                Err(e) => {
                    log::warn!("jobspecs are evaluated as root: {e}");
                    None
                }
            }
        } else {
            None
        };
        let free = bounded(limits.children);
        for _ in 0..limits.children {
            let _ = free.0.send(());
        }
        Sandbox {
            program,
            limits,
            run_as,
            free,
        }
    }

    /// The agent's: its own binary, the default limits.
    pub fn for_agent() -> Sandbox {
        Sandbox::new(PathBuf::from("/proc/self/exe"), Limits::default())
    }

    /// Evaluates and parses `evaluation` in a child. See the module docs for the protocol.
    pub fn parse_job(&self, evaluation: &Evaluation) -> Result<Job, SandboxError> {
        let Ok(()) = self.free.1.recv_timeout(SLOT_WAIT) else {
            return Err(SandboxError::Busy {
                max: self.limits.children,
            });
        };
        let _slot = Slot(&self.free.0);
        let input = serde_json::to_vec(evaluation).map_err(|e| SandboxError::Spawn {
            program: self.program.clone(),
            source: ProcessError::Spawn(e.into()),
        })?;
        self.run(&input)
    }

    fn run(&self, input: &[u8]) -> Result<Job, SandboxError> {
        let l = &self.limits;
        let limits = [
            Limit {
                resource: Resource::AddressSpace,
                soft: l.memory,
                hard: l.memory,
            },
            Limit {
                resource: Resource::CpuSeconds,
                soft: l.cpu_secs,
                hard: l.cpu_secs + 1,
            },
            // A killed child leaves no core file of hundreds of MiB behind.
            Limit {
                resource: Resource::CoreSize,
                soft: 0,
                hard: 0,
            },
            Limit {
                resource: Resource::FileSize,
                soft: 0,
                hard: 0,
            },
        ];
        let args = [CHILD_ARG.to_string()];
        let env = BTreeMap::new();
        let spec = ProcessSpec {
            program: &self.program,
            args: &args,
            env: &env,
            cwd: Path::new("/"),
            run_as: self.run_as.as_ref(),
            stdin: Some(input),
            limits: &limits,
        };
        let deadline_at = Instant::now() + l.deadline;
        let deadline = at(deadline_at);
        let (out_tx, out_rx) = bounded(1);
        let (err_tx, err_rx) = bounded(1);
        let child = process::spawn(
            &spec,
            Box::new(Capped::new(l.output, out_tx)),
            Box::new(Capped::new(STDERR_KEPT, err_tx)),
            Supervision {
                after_exit: AfterExit::KillGroup,
                drain: Drain::For(process::DRAIN_AFTER_EXIT),
            },
            "jobspec-eval".to_string(),
        )
        .map_err(|source| SandboxError::Spawn {
            program: self.program.clone(),
            source,
        })?;
        let timed_out = |child: process::Child| {
            child.kill(REAP_AFTER_KILL);
            child.release();
            Err(SandboxError::Deadline { limit: l.deadline })
        };
        let exited = child.exited().clone();
        let status = select! {
            recv(exited) -> st => st.unwrap_or(ExitStatus::lost()),
            recv(deadline) -> _ => return timed_out(child),
        };
        // The group is killed at the exit (`AfterExit::KillGroup`), so the pipes close at once.
        let (stdout, truncated) = select! {
            recv(out_rx) -> r => r.unwrap_or_default(),
            recv(deadline) -> _ => return timed_out(child),
        };
        let stderr = select! {
            recv(err_rx) -> r => r.map(|(bytes, _)| bytes).unwrap_or_default(),
            recv(deadline) -> _ => return timed_out(child),
        };
        child.release();
        outcome(
            status,
            &stdout,
            truncated,
            &String::from_utf8_lossy(&stderr),
            l,
        )
    }
}

/// What a child's end says: its reply, or the limit that ended it. Pure, for the tests.
fn outcome(
    status: ExitStatus,
    stdout: &[u8],
    truncated: bool,
    stderr: &str,
    limits: &Limits,
) -> Result<Job, SandboxError> {
    if status.success() {
        if truncated {
            return Err(SandboxError::TooLarge {
                limit: limits.output,
            });
        }
        return match serde_json::from_slice(stdout) {
            Ok(Reply::Job(job)) => Ok(*job),
            Ok(Reply::Error(e)) => Err(SandboxError::Jobspec(e)),
            Err(e) => Err(SandboxError::Reply(e.to_string())),
        };
    }
    // SIGXCPU at the soft CPU limit; SIGKILL (which the agent sends only at the deadline, handled
    // before) at the hard one.
    if status.signal == libc::SIGXCPU || status.signal == libc::SIGKILL {
        return Err(SandboxError::Cpu {
            secs: limits.cpu_secs,
        });
    }
    // The standard library's words when an allocation fails, before it aborts.
    if stderr.contains("memory allocation of") {
        return Err(SandboxError::Memory {
            limit: limits.memory,
        });
    }
    if stderr.contains("has overflowed its stack") {
        return Err(SandboxError::Stack);
    }
    Err(SandboxError::Crashed {
        status,
        stderr: stderr.trim().lines().last().unwrap_or("").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(exit_code: i32, signal: i32) -> ExitStatus {
        ExitStatus { exit_code, signal }
    }

    #[test]
    fn a_childs_end_names_the_limit_it_hit() {
        let l = Limits::default();
        let err = |st, stderr: &str| outcome(st, b"", false, stderr, &l).unwrap_err().to_string();
        assert_eq!(
            err(
                status(134, libc::SIGABRT),
                "memory allocation of 1073741824 bytes failed\n"
            ),
            "the jobspec's evaluation used more than 512 MiB of memory"
        );
        assert_eq!(
            err(status(152, libc::SIGXCPU), ""),
            "the jobspec's evaluation used more than 5 s of CPU time"
        );
        assert_eq!(
            err(status(137, libc::SIGKILL), ""),
            "the jobspec's evaluation used more than 5 s of CPU time"
        );
        assert_eq!(
            err(
                status(134, libc::SIGABRT),
                "\nthread 'hcl-parser' has overflowed its stack\nfatal runtime error: stack overflow\n"
            ),
            "the jobspec's evaluation nests too deeply: it overflowed its stack"
        );
        assert_eq!(
            err(status(2, 0), "invalid evaluation request: EOF\n"),
            "the jobspec's evaluation process ended with exit code 2: invalid evaluation request: EOF"
        );
        assert_eq!(
            outcome(status(0, 0), b"{\"Job\":", true, "", &l)
                .unwrap_err()
                .to_string(),
            "the job evaluated from the jobspec is larger than 16 MiB of JSON"
        );
    }

    #[test]
    fn a_childs_reply_is_the_job_or_its_error_verbatim() {
        let l = Limits::default();
        let reply = serde_json::to_vec(&Reply::Error("Unset variable \"tier\"".into())).unwrap();
        let e = outcome(status(0, 0), &reply, false, "", &l).unwrap_err();
        assert!(e.is_jobspec());
        assert_eq!(e.to_string(), "Unset variable \"tier\"");
        let evaluation = Evaluation::new(
            "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n".into(),
            Vec::new(),
            "no files",
        );
        let job = evaluation.run().unwrap();
        let reply = serde_json::to_vec(&Reply::Job(Box::new(job.clone()))).unwrap();
        assert_eq!(outcome(status(0, 0), &reply, false, "", &l).unwrap(), job);
        let e = outcome(status(0, 0), b"{}", false, "", &l).unwrap_err();
        assert!(!e.is_jobspec());
    }

    /// A script in place of the agent's binary, in a directory any user may enter.
    fn script(body: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("nw-sandbox-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join("eval");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, path)
    }

    fn evaluation() -> Evaluation {
        Evaluation::new("job \"a\" {}".into(), Vec::new(), "no files")
    }

    /// The child reads the request on stdin, works from `/` and, when the agent is root, is
    /// `nobody`.
    #[test]
    fn the_child_gets_the_request_on_stdin_in_root_as_nobody() {
        let (dir, program) =
            script(r#"printf '{"Error":"%s %s %s"}' "$(id -u)" "$(pwd)" "$(head -c 1)""#);
        let sandbox = Sandbox::new(program, Limits::default());
        let e = sandbox.parse_job(&evaluation()).unwrap_err();
        let uid = match &sandbox.run_as {
            Some(r) => r.uid,
            // SAFETY: getuid has no preconditions.
            None => unsafe { libc::getuid() },
        };
        assert_eq!(e.to_string(), format!("{uid} / {{"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A child that neither answers nor uses CPU is killed at the deadline.
    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let (dir, program) = script("exec sleep 60");
        let sandbox = Sandbox::new(
            program,
            Limits {
                deadline: Duration::from_millis(300),
                ..Limits::default()
            },
        );
        let e = sandbox.parse_job(&evaluation()).unwrap_err();
        assert!(matches!(e, SandboxError::Deadline { .. }), "{e}");
        assert!(e.is_jobspec());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// With every slot taken, a request is refused once it has waited [`SLOT_WAIT`], and gets
    /// the slot back once it is free.
    #[test]
    fn no_free_slot_is_busy() {
        let (dir, program) = script(r#"printf '{"Error":"ran"}'"#);
        let sandbox = Sandbox::new(
            program,
            Limits {
                children: 1,
                ..Limits::default()
            },
        );
        sandbox.free.1.recv().unwrap();
        let e = sandbox.parse_job(&evaluation()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the agent is already evaluating 1 jobspecs, as many as it evaluates at once; try again"
        );
        assert!(!e.is_jobspec());
        sandbox.free.0.send(()).unwrap();
        assert_eq!(
            sandbox.parse_job(&evaluation()).unwrap_err().to_string(),
            "ran"
        );
        assert_eq!(
            sandbox.parse_job(&evaluation()).unwrap_err().to_string(),
            "ran"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
