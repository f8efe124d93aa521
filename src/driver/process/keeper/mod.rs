//! The agent's side of the task keeper (`nodeward-keeper`, the parent of every task, so that tasks
//! outlive the agent: live-restore.md, docs/live-restore.md). The keeper and its protocol are the
//! crate `nodeward_keeper` (`src/keeper/`), which links none of the agent; [`client`] is how the
//! agent starts it, talks to it and takes over the tasks it holds.

pub mod client;
mod reader;

pub use nodeward_keeper::{
    Event, Exit, Held, Request, StartTask, LOG_FILE, PID_FILE, PROGRAM, PROTOCOL_VERSION,
    SOCKET_FILE,
};
