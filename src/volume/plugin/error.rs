//! Why a plugin lookup or run failed. Messages follow host-volumes.md exactly: they reach the
//! user as the API's error and the volume's status.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::driver::ExitStatus;
use crate::volume::mkdir;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("no such plugin: {0:?}")]
    NoSuchPlugin(String),
    #[error("plugin not executable: {0:?}")]
    NotExecutable(String),
    /// The built-in plugin refused its parameters (the user's mistake).
    #[error(transparent)]
    MkdirParameters(mkdir::MkdirError),
    #[error("error creating volume {volume_id:?} with plugin {plugin:?}: {failure}")]
    Create {
        volume_id: String,
        plugin: String,
        failure: Failure,
    },
    #[error("error deleting volume {volume_id:?} with plugin {plugin:?}: {failure}")]
    Delete {
        volume_id: String,
        plugin: String,
        failure: Failure,
    },
    #[error("error fingerprinting plugin {plugin:?}: {failure}")]
    Fingerprint { plugin: String, failure: Failure },
}

impl PluginError {
    /// True when the request was at fault (unknown plugin, bad parameters), not the plugin or node.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            PluginError::NoSuchPlugin(_)
                | PluginError::NotExecutable(_)
                | PluginError::MkdirParameters(_)
        )
    }
}

/// What went wrong in one plugin run.
#[derive(Debug)]
pub enum Failure {
    /// Non-zero exit or death by a signal; `error` is the plugin's `{"error": ...}`, if it said so.
    Exit {
        status: ExitStatus,
        error: Option<String>,
    },
    TimedOut(Duration),
    Cancelled,
    Spawn(io::Error),
    /// Exit 0, but the answer is unusable.
    BadOutput(String),
    /// The built-in plugin failed on the node.
    Builtin(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Exit { status, error } => {
                // Go's spelling, which Nomad's messages carry.
                if status.signal != 0 {
                    write!(f, "signal: {}", signal_name(status.signal))?;
                } else {
                    write!(f, "exit status {}", status.exit_code)?;
                }
                if let Some(e) = error {
                    write!(f, ": {e}")?;
                }
                Ok(())
            }
            Failure::TimedOut(d) => write!(
                f,
                "timed out after {}; the plugin was killed",
                crate::util::duration::format(*d)
            ),
            Failure::Cancelled => write!(f, "cancelled: the agent is shutting down"),
            Failure::Spawn(e) => write!(f, "cannot start plugin: {e}"),
            Failure::BadOutput(why) => write!(f, "invalid plugin output: {why}"),
            Failure::Builtin(why) => write!(f, "{why}"),
        }
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "killed".to_string(),
        libc::SIGTERM => "terminated".to_string(),
        libc::SIGINT => "interrupt".to_string(),
        libc::SIGSEGV => "segmentation fault".to_string(),
        libc::SIGABRT => "aborted".to_string(),
        other => format!("signal {other}"),
    }
}
