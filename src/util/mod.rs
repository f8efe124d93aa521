//! Small helpers shared by every module.

pub mod duration;
pub mod hcl_lines;
pub mod systemd;
