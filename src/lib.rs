//! nodeward: a node agent that runs tasks, supervises CSI plugins and manages dynamic host volumes.
//!
//! The binary (`main.rs`) only parses arguments and maps errors to exit codes; everything else lives
//! here, one module per domain concept.

pub mod agent;
pub mod alloc;
pub mod api;
pub mod cgroup;
pub mod cli;
pub mod config;
pub mod csi;
pub mod daemon;
pub mod driver;
pub mod hcl;
pub mod jobspec;
pub mod plan;
pub mod records;
pub mod resources;
pub mod sandbox;
pub mod state;
pub mod task;
pub mod thread;
pub mod util;
pub mod volume;
