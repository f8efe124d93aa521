//! Dynamic and static host volumes (host-volumes.md).
//!
//! - [`spec`]: the volume specification (HCL and Nomad's API JSON) and its validation.
//! - [`plugin`]: finding and running DHV plugins, confined to the plugin directory.
//! - [`mkdir`]: the built-in `mkdir` plugin.
//! - [`manager`]: the node's registry of volumes: create, register, delete, restore, `HostVolumes`.
//!
//! The HTTP side (request bodies, ID prefixes, status codes, Nomad's JSON) is `api::volumes`; the
//! CLI's text for `volume create`, `volume register` and `volume status` is `cli::volume_format`.

pub mod manager;
pub mod mkdir;
pub mod plugin;
pub mod spec;

pub use crate::records::{VolumeRecord, VolumeState};
pub use manager::{HostVolumeConfig, ManagerConfig, VolumeError, VolumeManager, VolumeView};
