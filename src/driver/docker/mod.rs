//! The docker driver (in progress).

pub mod logs;
