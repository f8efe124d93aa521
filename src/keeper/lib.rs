//! The task keeper: one small process per data directory that is the parent of every task, owns
//! their output pipes and log rotation, reaps them and keeps their exit status, so that tasks
//! outlive the agent (live-restore.md; the choice and its measurements: docs/live-restore.md).
//!
//! This crate is what the keeper and the agent share, and all the keeper links (no gRPC, no HCL,
//! no HTTP: `scripts/check-keeper.sh` checks the binary):
//!
//! - [`daemon`] starts the keeper process (`nodeward-keeper`, `src/bin/nodeward-keeper.rs`): binds
//!   its socket, forks, reports its PID; [`serve`] is the process once it runs: one thread, one
//!   `epoll(7)` set over its socket, the agent's connection, and every task's pidfd and pipes;
//!   `spawn` makes a task's process without copying the keeper.
//! - [`logs`]: task log files and their rotation (the keeper writes them, the agent's API reads
//!   them); [`beneath`]: paths inside an allocation directory, reached without following a link
//!   (the keeper's log files, the agent's task directories, volume links and log reads);
//!   [`procfs`]: what both read about processes from `/proc`; [`sys`]: the few system
//!   calls both make (signalling a process group, `pidfd_open`).
//! - The agent's side is `nodeward::driver::process::keeper::client`: it starts the keeper when
//!   none runs, connects, and turns the keeper's messages into the exit channels the task runners
//!   select on.
//! - This file is the protocol between the two: one JSON object per line on the unix socket
//!   `<data_dir>/keeper.sock` (0600, in the 0700 data directory; the keeper also checks that the
//!   peer has its own uid). A version in the first exchange lets a newer agent talk to an older
//!   keeper left running across an upgrade.
//!
//! Protocol:
//! - The agent sends [`Request::Hello`]; the keeper answers [`Event::Welcome`] with every task it
//!   holds, running or exited with its status kept.
//! - [`Request::Start`] (answered by [`Event::Started`] or [`Event::Failed`], by `seq`),
//!   [`Request::Signal`] (answered by [`Event::Done`] or [`Event::Failed`]), [`Request::Forget`]
//!   (no answer: the agent has taken the exit status; the keeper drops the task once its pipes are
//!   drained).
//! - [`Event::Exited`] when a task is reaped. It is kept until the agent forgets the task: a task
//!   that exits while no agent is connected is reported in the next [`Event::Welcome`].
//! - One agent at a time: a new connection replaces the old one. Tasks are addressed by PID: the
//!   keeper is their parent, so a running task's PID is its own. Once a task is reaped the kernel
//!   may give its PID to a new task before the agent forgets the old one (the agent forgets a
//!   task right after its exit, or with the start that replaces it): a [`Request::Signal`] then
//!   names the one still running, a [`Request::Forget`] the one that exited.
//! - The keeper ends when it holds no task and no agent is connected. It dies with SIGTERM or
//!   SIGINT after killing every task's process group; a keeper that dies any other way takes its
//!   tasks with it (each task has the parent-death signal SIGKILL), and the agent reports them
//!   failed.

pub mod beneath;
pub mod cgroup;
pub mod daemon;
mod isolate;
pub mod logs;
mod poller;
pub mod procfs;
pub mod serve;
mod spawn;
pub mod sys;
mod task;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The keeper's socket in the data directory.
pub const SOCKET_FILE: &str = "keeper.sock";
/// The keeper's PID, for operators and tests (`kill $(cat keeper.pid)`).
pub const PID_FILE: &str = "keeper.pid";
/// The keeper's own diagnostics (it has no terminal once started).
pub const LOG_FILE: &str = "keeper.log";
/// The allocation root, `<data_dir>/alloc`: every allocation directory is in it. Below it nothing
/// follows a link ([`beneath`]); the keeper writes task logs only there.
pub const ALLOC_ROOT: &str = "alloc";
/// The keeper's file name, installed next to `nodeward`.
pub const PROGRAM: &str = "nodeward-keeper";

/// What the agent asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Op")]
pub enum Request {
    Hello { version: u32 },
    Start { seq: u64, spec: Box<StartTask> },
    Signal { seq: u64, pid: i32, signal: i32 },
    Forget { pid: i32 },
}

/// A task to start: everything was resolved by the agent (the program's path, the user's ids).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartTask {
    /// Names the task in [`Event::Welcome`]: the allocation and the task name.
    pub alloc_id: String,
    pub task: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    /// uid, gid, supplementary groups; `None` runs as the keeper's user.
    pub run_as: Option<(u32, u32, Vec<u32>)>,
    pub log_dir: PathBuf,
    pub log_name: String,
    pub max_files: u32,
    pub max_file_size_mb: u32,
    /// `logs { disabled = true }`: the task's stdout and stderr are `/dev/null`, it has no pipes
    /// and no log file is opened. A keeper before this field ignores it and keeps the logs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub logs_disabled: bool,
    /// Written to the task's `/proc/<pid>/oom_score_adj` before it execs; `None` gives it 0.
    /// A keeper before this field ignores it: the task gets 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    /// The cgroup the agent made for the task, which its process joins before it execs; `None`
    /// runs it unconfined (no cgroups on the node, or an agent before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<cgroup::CgroupPaths>,
    /// The `exec` driver's isolation; `None` for `raw_exec`. Absent from an older agent's
    /// message, which meant none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate: Option<Isolation>,
}

/// How an `exec` task is isolated ([`isolate`]): its namespaces, its root, its capabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Isolation {
    /// The host directory that becomes the task's `/`: its task directory.
    pub root: PathBuf,
    /// What is bound into the root besides what the task directory holds.
    pub binds: Vec<Bind>,
    /// The capabilities kept in the bounding set, by number (`CAP_CHOWN` is 0).
    pub keep_caps: Vec<u32>,
}

/// A host path bound into an isolated task's root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bind {
    pub source: PathBuf,
    /// Absolute, as the task sees it.
    pub target: PathBuf,
    pub read_only: bool,
}

/// How a task ended, as the keeper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub exit_code: i32,
    pub signal: i32,
    /// When it was reaped, in nanoseconds since the Unix epoch.
    pub at_nanos: i64,
    /// Killed by the kernel for its cgroup's memory limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
}

/// A task the keeper holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub pid: i32,
    pub start_ticks: u64,
    pub alloc_id: String,
    pub task: String,
    pub exit: Option<Exit>,
}

/// What the keeper tells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Ev")]
pub enum Event {
    Welcome {
        version: u32,
        pid: i32,
        tasks: Vec<Held>,
    },
    Started {
        seq: u64,
        pid: i32,
        start_ticks: u64,
    },
    /// `running`: the task had not exited yet (a signal to an exited task is not sent: its group
    /// was killed at its exit and its number may be another's by now).
    Done {
        seq: u64,
        running: bool,
    },
    /// `errno` is the OS error when there is one (a failed exec), so the agent's message is the
    /// same as for a process it would have started itself.
    Failed {
        seq: u64,
        errno: Option<i32>,
        message: String,
    },
    Exited {
        pid: i32,
        exit: Exit,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_of_json_each_way() {
        let start = Request::Start {
            seq: 7,
            spec: Box::new(StartTask {
                alloc_id: "a".into(),
                task: "t".into(),
                program: "/bin/sh".into(),
                args: vec!["-c".into(), "echo\nhi".into()],
                env: BTreeMap::from([("K".into(), "v\n".into())]),
                cwd: "/".into(),
                run_as: Some((1, 2, vec![2, 3])),
                log_dir: "/l".into(),
                log_name: "t".into(),
                max_files: 2,
                max_file_size_mb: 1,
                logs_disabled: false,
                oom_score_adj: None,
                isolate: None,
                cgroup: None,
            }),
        };
        let line = serde_json::to_string(&start).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with(r#"{"Op":"Start","seq":7,"#), "{line}");
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), start);
        // The fields a keeper of the previous build does not know are left out at their
        // defaults, so its message is what that build sent and read.
        assert!(
            !line.contains("logs_disabled") && !line.contains("oom_score_adj"),
            "{line}"
        );
        let Request::Start { spec, .. } = &start else {
            unreachable!()
        };
        let newer = StartTask {
            logs_disabled: true,
            oom_score_adj: Some(500),
            ..(**spec).clone()
        };
        let line = serde_json::to_string(&newer).unwrap();
        assert!(
            line.contains(r#""logs_disabled":true,"oom_score_adj":500"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<StartTask>(&line).unwrap(), newer);
        // And a field this build does not know (a newer agent's) is ignored, as the previous
        // build ignores these two.
        let future = line.replacen('{', r#"{"a_later_field":[1],"#, 1);
        assert_eq!(serde_json::from_str::<StartTask>(&future).unwrap(), newer);
        let ev = Event::Exited {
            pid: 5,
            exit: Exit {
                exit_code: 7,
                signal: 0,
                at_nanos: 1,
                oom_killed: false,
            },
        };
        let line = serde_json::to_string(&ev).unwrap();
        assert_eq!(
            line,
            r#"{"Ev":"Exited","pid":5,"exit":{"exit_code":7,"signal":0,"at_nanos":1}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), ev);
        assert!(serde_json::from_str::<Request>(r#"{"Op":"Nope"}"#).is_err());
    }
}
