//! nodeward's integration tests: one test binary with a module per area, as ripgrep's
//! `tests/tests.rs` does. One binary links the library (and gRPC's C core) once instead of once per
//! file, and the modules share `common` without `#[path]` tricks.
//!
//! All tests run as threads of this one process, so a test must not change or measure the
//! process as a whole: no `std::env::set_var`, no `umask` (set it in the child:
//! [`common::TestAgent::start_in_with_umask`]), no counting this process's threads or memory
//! except for what the test itself started (a thread that was not there before), or in a process
//! of its own ([`common::alone_in_process`]). A test finds its processes by a command line no
//! other test uses (`pids_with` and a marker).

mod common;

mod agent_ops;
mod agent_tasks;
mod api_agent;
mod api_server;
mod capacity;
mod cgroups;
mod cli;
mod crash_storm;
mod csi_agent;
mod csi_mounts;
mod csi_supervisor;
mod csi_volumes;
mod docker_driver;
mod docker_engine;
mod docker_logs;
mod durability;
mod exec_driver;
mod gc;
mod job_plan;
mod jobspec_rsa;
mod jobspec_rule;
mod jobspec_validate;
mod jobspec_vars;
mod kill_timeouts;
mod lifecycle;
mod lifecycle_stop;
mod live_restore;
mod misbehaving;
mod periodic;
mod placement;
mod ports;
mod security;
mod stats;
mod task_env;
mod task_fs;
mod task_hooks;
mod task_logs;
mod volumes;
mod volumes_agent;
