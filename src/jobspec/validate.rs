//! Jobspec validation (placeholder until the parser work lands).

/// The number of a signal given by name (`SIGINT` or `INT`).
pub fn signal_number(name: &str) -> Option<i32> {
    let n = name.strip_prefix("SIG").unwrap_or(name);
    Some(match n {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        _ => return None,
    })
}
