//! The `nodeward` binary: parses arguments and maps errors to exit codes. Everything else is in the
//! library.

use std::process::ExitCode;

use nodeward::cli::agent::{self, AgentArgsError};

fn agent(args: &[String]) -> ExitCode {
    nodeward::daemon::tune_allocator();
    let args = match agent::parse(args) {
        Ok(a) => a,
        Err(AgentArgsError::Help) => {
            print!("{}", agent::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}\n\n{}", agent::USAGE);
            return ExitCode::from(2);
        }
    };
    let config = match nodeward::config::load(&args.configs, args.dev) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::from(1);
        }
    };
    match nodeward::daemon::run(config, args.fresh_state) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("agent") => agent(&args[1..]),
        Some(nodeward::sandbox::CHILD_ARG) => ExitCode::from(nodeward::sandbox::child_main()),
        _ => ExitCode::from(nodeward::cli::run(args) as u8),
    }
}
