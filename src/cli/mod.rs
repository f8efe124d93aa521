//! The `nodeward` command line (agent.md "CLI"): Nomad's commands, talking to the agent's API.
//!
//! `main.rs` parses `nodeward agent ...` with [`agent::parse`] and hands every other command line
//! to [`run`].
//! Each command parses its Go-style flags ([`flags`]), calls the API at `NODEWARD_ADDR` with
//! `NODEWARD_TOKEN` ([`client`]) and prints with the pure functions of [`format`]. Exit status: 0 on
//! success, 1 when the command failed (`Error ...: <reason>` on stderr), 2 on bad usage (the reason
//! and the command's usage on stderr), and 2 from `job run` when the job was registered but not
//! all of it could be placed, as Nomad's; `job plan` exits 0 (nothing created or
//! destroyed), 1 (allocations would be) or 255 (it failed), as Nomad's. `-h` prints the usage on stdout and exits 0.

pub mod agent;
pub mod client;
pub mod flags;
pub mod format;
pub mod resources_format;
pub mod volume_format;
pub mod volume_request;

mod alloc;
mod job;
mod job_children;
mod job_file;
mod job_plan;
mod node;
mod system;
mod volume;

use std::io::{self, Write};

use client::Client;
use flags::{Flag, FlagError, Parsed};

/// Where the CLI finds the agent.
#[derive(Clone)]
pub struct Env {
    /// `NODEWARD_ADDR`, default `http://127.0.0.1:4656`.
    pub addr: String,
    /// `NODEWARD_TOKEN`, sent as `X-Nomad-Token`.
    pub token: Option<String>,
}

impl Env {
    pub fn from_process() -> Env {
        Env {
            addr: std::env::var("NODEWARD_ADDR")
                .ok()
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| "http://127.0.0.1:4656".into()),
            token: std::env::var("NODEWARD_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
        }
    }
}

/// Runs one command line (without the program name) and returns the exit status.
pub fn run(args: Vec<String>) -> i32 {
    let env = Env::from_process();
    let stdout = io::stdout();
    let stderr = io::stderr();
    run_with(&args, &env, &mut stdout.lock(), &mut stderr.lock())
}

/// [`run`] with the environment and the output streams given (tests).
pub fn run_with(args: &[String], env: &Env, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let (spec, rest) = match find_command(&words) {
        Lookup::Found(spec, n) => (spec, &args[n..]),
        Lookup::Help => {
            let _ = write!(out, "{USAGE}");
            return 0;
        }
        Lookup::Version => {
            let _ = writeln!(out, "nodeward v{}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Lookup::Group(group) => {
            let _ = write!(err, "{}", group_usage(group));
            return 2;
        }
        Lookup::Unknown => {
            let _ = write!(err, "Unknown command: {:?}\n\n{USAGE}", args.join(" "));
            return 2;
        }
    };
    let parsed = match flags::parse(spec.flags, rest) {
        Ok(p) => p,
        Err(FlagError::Help) => {
            let _ = writeln!(out, "{}", spec.usage);
            return 0;
        }
        Err(e) => {
            let _ = writeln!(err, "{e}\n\n{}", spec.usage);
            return 2;
        }
    };
    if parsed.args.len() < spec.args.0 || parsed.args.len() > spec.args.1 {
        let _ = writeln!(err, "{}", usage_error(spec));
        return 2;
    }
    let mut ctx = Ctx {
        client: Client::new(&env.addr, env.token.clone()),
        out,
    };
    match (spec.run)(&mut ctx, &parsed) {
        Ok(()) => 0,
        Err(CmdError::Usage(reason)) => {
            let _ = writeln!(err, "{reason}\n\n{}", spec.usage);
            2
        }
        Err(CmdError::Failed(message)) => {
            let _ = writeln!(err, "{message}");
            1
        }
        Err(CmdError::Exit(code)) => code,
        Err(CmdError::FailedWith(code, message)) => {
            let _ = writeln!(err, "{message}");
            code
        }
    }
}

fn usage_error(spec: &Spec) -> String {
    let expected = match spec.args {
        (0, 0) => "This command takes no arguments".to_string(),
        (a, b) if a == b => format!("This command takes {a} argument{}", plural(a)),
        (0, b) => format!("This command takes at most {b} argument{}", plural(b)),
        (a, b) => format!("This command takes {a} to {b} arguments"),
    };
    format!("{expected}\n\n{}", spec.usage)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// What a command has to work with.
pub(crate) struct Ctx<'a> {
    pub client: Client,
    pub out: &'a mut dyn Write,
}

impl Ctx<'_> {
    /// Writes to stdout; a closed stdout (`| head`) is not worth an error.
    pub fn print(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
        let _ = self.out.flush();
    }

    pub fn println(&mut self, text: &str) {
        self.print(&format!("{text}\n"));
    }

    /// Pretty JSON, for `-json` and `inspect`.
    pub fn print_json(&mut self, value: &serde_json::Value) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
        self.println(&text);
    }
}

/// How a command failed.
#[derive(Debug)]
pub(crate) enum CmdError {
    /// Bad usage found after flag parsing (exit 2).
    Usage(String),
    /// The command failed (exit 1); the message is printed as is.
    Failed(String),
    /// The command printed what happened and exits with this status: `job run`'s 2 when the
    /// job could not be placed, as Nomad's.
    Exit(i32),
    /// The command failed with this status (`job plan`'s 255, as Nomad's); the message is
    /// printed as is.
    FailedWith(i32, String),
}

/// `Error <doing>: <reason>`, the shape of every failure message.
pub(crate) fn failed(doing: &str, reason: impl std::fmt::Display) -> CmdError {
    CmdError::Failed(format!("Error {doing}: {reason}"))
}

pub(crate) type CmdResult = Result<(), CmdError>;

/// One command: its words, flags, positional argument count (min, max), usage and body.
pub(crate) struct Spec {
    pub words: &'static [&'static str],
    pub flags: &'static [Flag],
    pub args: (usize, usize),
    pub usage: &'static str,
    pub run: fn(&mut Ctx, &Parsed) -> CmdResult,
}

fn commands() -> Vec<&'static Spec> {
    let mut all: Vec<&'static Spec> = Vec::new();
    all.extend(job::COMMANDS);
    all.extend(job_file::COMMANDS);
    all.extend(job_plan::COMMANDS);
    all.extend(job_children::COMMANDS);
    all.extend(alloc::COMMANDS);
    all.extend(node::COMMANDS);
    all.extend(system::COMMANDS);
    all.extend(volume::COMMANDS);
    all
}

enum Lookup {
    Found(&'static Spec, usize),
    Help,
    Version,
    /// A command group without a subcommand (`nodeward job`).
    Group(&'static str),
    Unknown,
}

fn find_command(words: &[&str]) -> Lookup {
    match words.first() {
        None => return Lookup::Group(""),
        Some(&("-h" | "-help" | "--help" | "help")) => return Lookup::Help,
        Some(&("version" | "-v" | "-version" | "--version")) => return Lookup::Version,
        _ => {}
    }
    for spec in commands() {
        let n = spec.words.len();
        if words.len() >= n && words[..n] == *spec.words {
            return Lookup::Found(spec, n);
        }
    }
    for group in ["job", "alloc", "node", "volume", "plugin", "system"] {
        if words.len() == 1 && words[0] == group {
            return Lookup::Group(group);
        }
    }
    Lookup::Unknown
}

fn group_usage(group: &str) -> String {
    if group.is_empty() {
        return USAGE.to_string();
    }
    let mut s = format!("Usage: nodeward {group} <subcommand> [options] [args]\n\nSubcommands:\n");
    for spec in commands() {
        if spec.words[0] == group {
            let first = spec.usage.lines().next().unwrap_or("");
            s.push_str(&format!("    {}\n", first.trim_start_matches("Usage: ")));
        }
    }
    s
}

/// The top-level usage.
pub const USAGE: &str = "\
Usage: nodeward <command> [options] [args]

Commands:
    agent              Run the node agent
    job run            Register a job from an HCL or JSON jobspec
    job status         List jobs, or show one job and its allocations
    job stop           Stop a job (and with -purge, forget it)
    job inspect        Show a job as JSON
    job validate       Check a jobspec without registering it
    job plan           Show what registering a jobspec would change, registering nothing
    job periodic force Launch a periodic job's child now
    job dispatch       Dispatch a parameterized job
    alloc status       Show an allocation, its tasks and their recent events
    alloc restart      Restart an allocation's tasks
    alloc signal       Send a signal to an allocation's tasks
    alloc stop         Stop an allocation
    alloc logs         Print or follow a task's stdout or stderr
    node status        List the node, or show it
    volume create      Create a host or CSI volume through its plugin
    volume register    Register an existing directory or CSI volume
    volume status      List host and CSI volumes, or show one
    volume delete      Delete a host or CSI volume through its plugin
    volume deregister  Forget a CSI volume, leaving its storage
    plugin status      List CSI plugins, or show one
    system gc          Destroy every terminal allocation now
    version            Print the version

Environment:
    NODEWARD_ADDR    The agent's API address (default http://127.0.0.1:4656)
    NODEWARD_TOKEN   The API token, sent as X-Nomad-Token

Run `nodeward <command> -h` for a command's options.
";
