//! Dynamic and static host volumes (host-volumes.md).
//!
//! - [`spec`]: the volume specification (HCL and Nomad's API JSON) and its validation.
//! - [`plugin`]: finding and running DHV plugins, confined to the plugin directory.
//! - [`mkdir`]: the built-in `mkdir` plugin.
//! - [`registry`]: the pure core: the map of dynamic volumes and every change to it (reserve,
//!   commit, delete, restore bookkeeping, `HostVolumes`, claims), without locks or I/O.
//! - [`manager`]: the I/O and threads around the registry: plugin runs, state writes, restore and
//!   the retry thread, behind one mutex.
//! - [`error`]: why a volume request failed.
//!
//! The HTTP side (request bodies, ID prefixes, status codes, Nomad's JSON) is `api::volumes`; the
//! CLI's text for `volume create`, `volume register` and `volume status` is `cli::volume_format`.

pub mod error;
pub mod manager;
pub mod mkdir;
pub mod plugin;
pub mod registry;
pub mod spec;

pub use crate::records::{VolumeRecord, VolumeState};
pub use error::VolumeError;
pub use manager::{ManagerConfig, VolumeManager};
pub use registry::{HostVolumeConfig, RestoreReport, VolumeView};
