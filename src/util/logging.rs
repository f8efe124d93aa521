//! The agent's log: to stderr (the journal, under systemd), at the configured level unless
//! `RUST_LOG` says otherwise.

/// Sets up logging: the configured level, unless `RUST_LOG` says otherwise. Logs go to stderr
/// (the journal, under systemd).
pub fn init_logging(level: &str) {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = env_logger::Builder::from_default_env()
            .format_timestamp_millis()
            .try_init();
        return;
    }
    // nodeward's own records pass the filter at every level; the level in force is the global
    // maximum, which SIGHUP can change.
    let _ = env_logger::Builder::new()
        .filter_level(log::LevelFilter::Warn)
        .filter_module("nodeward", log::LevelFilter::Trace)
        .format_timestamp_millis()
        .try_init();
    set_log_level(level);
}

/// Sets the level in force (SIGHUP reloads it), unless `RUST_LOG` rules.
pub fn set_log_level(level: &str) {
    if std::env::var_os("RUST_LOG").is_some() {
        return;
    }
    let filter = level.parse().unwrap_or(log::LevelFilter::Info);
    log::set_max_level(filter);
}
