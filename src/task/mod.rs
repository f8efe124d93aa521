//! Tasks: one runner thread per task, its hooks, its restart tracker and its events.

pub mod bind;
pub mod env;
pub mod events;
pub mod hooks;
pub mod mounts;
pub mod restart;
pub mod runner;
pub mod taskdir;
