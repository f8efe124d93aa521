//! CSI volumes (csi-volumes.md): volumes that the node's CSI plugins create, or that exist
//! already and are registered, with the claims of this node's allocations on them.
//!
//! - [`spec`]: the CSI volume specification (HCL and Nomad's API JSON) and its validation.
//! - [`request`]: the CSI requests made from specs and records (pure).
//! - [`registry`]: the pure core: the map of volumes and every change to it (reserve, persist,
//!   commit, removal, claims in Nomad's rules), without locks or I/O.
//! - [`manager`]: the plugin calls and state writes around the registry, behind one mutex.
//! - [`mounts`]: the pure core of using a volume in an allocation: its claim, its staging and
//!   publish directories, and the plugin calls still due to mount or unmount it.
//! - [`attach`]: the calls of [`mounts`]' plan for an allocation, and the `csi-unmount` thread
//!   that takes its volumes down once its tasks are dead.
//! - [`error`]: why a volume request failed.
//!
//! The HTTP side (request bodies, ID prefixes, status codes, Nomad's JSON) is `api::csi_volumes`;
//! the CLI's text is `cli::volume_format`. The records the state file keeps are
//! [`crate::records::CsiVolumeRecord`] (section `CSIVolumes`, state version 4).

pub mod attach;
pub mod error;
pub mod manager;
pub mod mounts;
pub mod registry;
pub mod request;
pub mod spec;

pub use crate::records::{ClaimMode, CsiAccessMode, CsiClaimRecord, CsiVolumeRecord};
pub use error::CsiVolumeError;
pub use manager::CsiVolumeManager;
pub use registry::CsiVolumeView;
pub use spec::{CsiVolumeSpec, ParsedCsiVolume, RawCsiVolume};
