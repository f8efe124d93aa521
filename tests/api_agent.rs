//! The API through the real agent: its limits on open files.

use crate::common::*;

/// Issue 11, item 4: the agent raises its soft limit on open files to the hard limit at start.
#[test]
fn the_agent_raises_its_soft_open_files_limit() {
    let dir = TempDir::new("api-nofile");
    let agent = TestAgent::start_in_with_nofile(dir.path(), "", 256, 4096);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["4096", "4096"], "{line}");
}
