//! `nodeward agent`'s command line: the same Go-style flags as every other command
//! ([`super::flags`]), so `-dev=false` means what it says and `-config=x` works.

use super::flags::{self, bool_flag, value_flag, Flag, FlagError};
use std::path::PathBuf;

pub const USAGE: &str = "Usage: nodeward agent [-dev] [-config <file or dir>]... [-fresh-state]

  -dev            Run a throw-away agent: data in a fresh temporary directory, debug logging,
                  API on 127.0.0.1:4656.
  -config PATH    An HCL or JSON configuration file, or a directory of them (merged in name
                  order). May be given more than once; later files win.
  -fresh-state    If the state file is corrupt, keep it aside as state.json.corrupt-<time> and
                  start empty instead of refusing to start.
";

const FLAGS: &[Flag] = &[
    bool_flag("dev"),
    bool_flag("fresh-state"),
    value_flag("config"),
];

/// What `nodeward agent` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    pub dev: bool,
    pub fresh_state: bool,
    pub configs: Vec<PathBuf>,
}

/// Why the agent's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentArgsError {
    /// `-h`: print [`USAGE`] and exit 0.
    #[error("help requested")]
    Help,
    #[error(transparent)]
    Flag(FlagError),
    #[error("unexpected argument {0:?}")]
    Positional(String),
    #[error("nodeward agent needs -dev or -config")]
    NoConfig,
}

/// Parses the arguments after `agent`.
pub fn parse(args: &[String]) -> Result<AgentArgs, AgentArgsError> {
    let parsed = flags::parse(FLAGS, args).map_err(|e| match e {
        FlagError::Help => AgentArgsError::Help,
        e => AgentArgsError::Flag(e),
    })?;
    if let Some(extra) = parsed.args.first() {
        return Err(AgentArgsError::Positional(extra.clone()));
    }
    let out = AgentArgs {
        dev: parsed.flag("dev"),
        fresh_state: parsed.flag("fresh-state"),
        configs: parsed.values("config").iter().map(PathBuf::from).collect(),
    };
    if !out.dev && out.configs.is_empty() {
        return Err(AgentArgsError::NoConfig);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<AgentArgs, AgentArgsError> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn agent_flags_read_like_every_other_command() {
        let a = p("-dev -config a.hcl --config=b.hcl -fresh-state").unwrap();
        assert!(a.dev && a.fresh_state);
        assert_eq!(a.configs, [PathBuf::from("a.hcl"), PathBuf::from("b.hcl")]);
        // Once `-dev=false` turned dev mode on.
        assert_eq!(p("-dev=false"), Err(AgentArgsError::NoConfig));
        let a = p("-dev=false -config c.hcl").unwrap();
        assert!(!a.dev);
        assert_eq!(p("-h"), Err(AgentArgsError::Help));
        assert_eq!(
            p("-dev -bogus").unwrap_err().to_string(),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(
            p("-config").unwrap_err().to_string(),
            "flag needs an argument: -config"
        );
        assert_eq!(
            p("-dev extra").unwrap_err().to_string(),
            "unexpected argument \"extra\""
        );
    }
}
