//! Why a change to the node's host volumes failed: the one error type of the volume module.
//!
//! Variants say what failed, on which volume, and why; the API decides what each means for an
//! HTTP client (`api::volumes`), the domain only reports it.

use std::path::PathBuf;

use super::plugin::PluginError;
use crate::state::StateError;

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The request cannot be carried out as written (placement, a field for the other operation,
    /// a change to what a volume cannot change).
    #[error("{0}")]
    Invalid(String),
    #[error("volume name already exists on this node")]
    NameExists,
    /// No dynamic volume has this (full) ID.
    #[error("host volume {0:?} not found")]
    NotFound(String),
    /// Another create, delete or restore is working on the volume.
    #[error("volume {0:?} is busy: another operation on it is in progress; try again")]
    Busy(String),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("could not verify host path for {name:?}: {source}")]
    HostPath {
        name: String,
        source: std::io::Error,
    },
    #[error("{what}, but the state file could not be written: {source}")]
    State { what: String, source: StateError },
    #[error("cannot prepare {path}: {source}")]
    Setup {
        path: PathBuf,
        source: std::io::Error,
    },
}
