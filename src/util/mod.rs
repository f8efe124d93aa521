//! Small helpers shared by every module.

pub mod duration;
