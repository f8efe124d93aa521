//! The `nodeward` binary: parses arguments and maps errors to exit codes. Everything else is in the
//! library.

use std::path::PathBuf;
use std::process::ExitCode;

const AGENT_USAGE: &str = "Usage: nodeward agent [-dev] [-config <file or dir>]... [-fresh-state]

  -dev            Run a throw-away agent: data in a fresh temporary directory, debug logging,
                  API on 127.0.0.1:4656.
  -config PATH    An HCL or JSON configuration file, or a directory of them (merged in name
                  order). May be given more than once; later files win.
  -fresh-state    If the state file is corrupt, keep it aside as state.json.corrupt-<time> and
                  start empty instead of refusing to start.
";

fn agent(args: &[String]) -> ExitCode {
    nodeward::agent::tune_allocator();
    let mut dev = false;
    let mut fresh = false;
    let mut configs = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let flag = a.trim_start_matches('-');
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        match name {
            "dev" if a.starts_with('-') => dev = true,
            "fresh-state" if a.starts_with('-') => fresh = true,
            "config" if a.starts_with('-') => match inline.or_else(|| it.next().cloned()) {
                Some(v) => configs.push(PathBuf::from(v)),
                None => {
                    eprintln!("-config needs a value\n\n{AGENT_USAGE}");
                    return ExitCode::from(2);
                }
            },
            "h" | "help" if a.starts_with('-') => {
                print!("{AGENT_USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("unknown argument {a:?}\n\n{AGENT_USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if !dev && configs.is_empty() {
        eprintln!("nodeward agent needs -dev or -config\n\n{AGENT_USAGE}");
        return ExitCode::from(2);
    }
    let config = match nodeward::config::load(&configs, dev) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::from(1);
        }
    };
    match nodeward::agent::run(config, fresh) {
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
        _ => ExitCode::from(nodeward::cli::run(args) as u8),
    }
}
