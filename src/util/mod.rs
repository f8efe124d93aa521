//! Small helpers shared by every module.

pub mod duration;
pub mod systemd;
