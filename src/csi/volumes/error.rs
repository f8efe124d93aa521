//! Why a change to the node's CSI volumes failed: the one error type of `csi::volumes`.
//!
//! Variants say what failed, on which volume and why, in Nomad's words where Nomad has them
//! (`volume in use: <id>`, `volume not found: <id>`, `no CSI plugin named: <id> could be found`,
//! `volume "<id>" has exhausted its available writer claims`); the API decides what each means for
//! an HTTP client (`api::csi_volumes`), the domain only reports it.

use crate::csi::client::CsiError;
use crate::records::{AttachmentMode, CsiAccessMode};
use crate::state::StateError;
use crate::volume::spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum CsiVolumeError {
    /// The specification does not parse or validate.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The request cannot be carried out as written (a field for the other operation, an ID in
    /// the body that is not the one in the path).
    #[error("{0}")]
    Invalid(String),
    #[error("CSI volume {0:?} already exists")]
    Exists(String),
    #[error("volume not found: {0}")]
    NotFound(String),
    /// Another create, delete or claim is working on the volume.
    #[error("CSI volume {0:?} is busy: another operation on it is in progress; try again")]
    Busy(String),
    /// Claimed by an allocation: it may not be deleted or deregistered.
    #[error("volume in use: {0}")]
    InUse(String),
    #[error("no CSI plugin named: {0} could be found")]
    NoPlugin(String),
    /// The plugin is registered, but no healthy controller of it can take the call.
    #[error("CSI plugin {plugin:?} has no healthy controller on this node: {reason}")]
    NoController { plugin: String, reason: String },
    /// The plugin's controller does not have the capability the operation needs.
    #[error("CSI plugin {plugin:?} does not support {what}")]
    Unsupported { plugin: String, what: &'static str },
    /// The plugin answered the call with an error, or the call failed; `doing` is "creating",
    /// "deleting" or "validating".
    #[error("error {doing} volume {id:?} with plugin {plugin:?}: {source}")]
    Plugin {
        doing: &'static str,
        id: String,
        plugin: String,
        source: CsiError,
    },
    /// `ValidateVolumeCapabilities` did not confirm what `volume register` asked for.
    #[error("CSI plugin {plugin:?} does not confirm the capabilities of volume {id:?}: {message}")]
    NotConfirmed {
        id: String,
        plugin: String,
        message: String,
    },
    #[error("{what}, but the state file could not be written: {source}")]
    State { what: String, source: StateError },
    // ---- claims (csi-volumes.md "Claims and mounts") ----
    #[error("volume {0:?} has exhausted its available writer claims")]
    NoFreeWriter(String),
    #[error("volume {0:?} has exhausted its available reader claims")]
    NoFreeReader(String),
    #[error("volume {id:?} is read-only: access mode {} allows no writer", mode.as_str())]
    ReadOnly { id: String, mode: CsiAccessMode },
    #[error("volume {id:?} does not have the capability {} on {}", access.as_str(), attachment.as_str())]
    NoCapability {
        id: String,
        access: CsiAccessMode,
        attachment: AttachmentMode,
    },
    /// Nomad's words: a claimed volume keeps the modes of its first claim.
    #[error("cannot change {0} mode of claimed volume")]
    ModeChange(&'static str),
}

impl CsiVolumeError {
    /// Whether the caller's request is at fault (as opposed to the node, a plugin or the disk).
    pub fn is_user_error(&self) -> bool {
        match self {
            CsiVolumeError::Plugin { source, .. } => source.code().is_some_and(|c| {
                // InvalidArgument, NotFound, AlreadyExists, OutOfRange: the plugin refused what
                // was asked (storage it does not have, a name taken, a size it cannot give).
                matches!(c.0, 3 | 5 | 6 | 11)
            }),
            CsiVolumeError::State { .. } => false,
            _ => true,
        }
    }
}
