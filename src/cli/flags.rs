//! Command-line flags the way Go's `flag` package reads them, which is what Nomad users type.
//!
//! `-json`, `--json`, `-config=x`, `-config x`, `-force=false`; flags come before positional
//! arguments (the first argument that is not a flag ends them, as does `--`); `-h`, `-help` and
//! `--help` ask for the usage. A boolean flag never takes the next argument as its value. A value
//! flag given twice keeps both values ([`Parsed::values`]); [`Parsed::value`] is the last one.
//! (clap cannot read single-dash long flags, hence this small parser.)

use std::collections::BTreeMap;

/// Whether a flag takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Value,
}

/// One accepted flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub name: &'static str,
    pub kind: Kind,
}

pub const fn bool_flag(name: &'static str) -> Flag {
    Flag {
        name,
        kind: Kind::Bool,
    }
}

pub const fn value_flag(name: &'static str) -> Flag {
    Flag {
        name,
        kind: Kind::Value,
    }
}

/// Why the arguments were refused; the messages are Go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// `-h`, `-help` or `--help`: not an error, the caller prints the usage.
    #[error("help requested")]
    Help,
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    #[error("invalid boolean value {value:?} for -{flag}")]
    InvalidBool { flag: String, value: String },
    #[error("bad flag syntax: {0}")]
    Syntax(String),
}

/// The flags that were set and the positional arguments after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    bools: BTreeMap<String, bool>,
    values: BTreeMap<String, Vec<String>>,
    pub args: Vec<String>,
}

impl Parsed {
    /// A boolean flag; false when not given.
    pub fn flag(&self, name: &str) -> bool {
        self.bools.get(name).copied().unwrap_or(false)
    }

    /// A boolean flag; `default` when not given (`-diff=false` turns off what is on).
    pub fn flag_or(&self, name: &str, default: bool) -> bool {
        self.bools.get(name).copied().unwrap_or(default)
    }

    /// The last value of a value flag.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// Every value of a value flag, in order.
    pub fn values(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Parses `args` (without the command words) against `flags`.
pub fn parse(flags: &[Flag], args: &[String]) -> Result<Parsed, FlagError> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        // "-" alone, and anything not starting with "-", is the first positional argument.
        let Some(body) = arg.strip_prefix('-').filter(|b| !b.is_empty()) else {
            break;
        };
        let body = body.strip_prefix('-').unwrap_or(body);
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::Syntax(arg.clone()));
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if matches!(name, "h" | "help") {
            return Err(FlagError::Help);
        }
        let Some(flag) = flags.iter().find(|f| f.name == name) else {
            return Err(FlagError::Unknown(name.to_string()));
        };
        match flag.kind {
            Kind::Bool => {
                let value = match inline.as_deref() {
                    None => true,
                    Some(v) => parse_bool(v).ok_or_else(|| FlagError::InvalidBool {
                        flag: name.to_string(),
                        value: v.to_string(),
                    })?,
                };
                parsed.bools.insert(name.to_string(), value);
            }
            Kind::Value => {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i)
                            .cloned()
                            .ok_or_else(|| FlagError::MissingValue(name.to_string()))?
                    }
                };
                parsed
                    .values
                    .entry(name.to_string())
                    .or_default()
                    .push(value);
            }
        }
        i += 1;
    }
    parsed.args = args[i..].to_vec();
    Ok(parsed)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[Flag] = &[
        bool_flag("json"),
        bool_flag("force"),
        value_flag("config"),
        value_flag("n"),
    ];

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn p(s: &str) -> Result<Parsed, FlagError> {
        parse(FLAGS, &args(s))
    }

    #[test]
    fn single_and_double_dash_flags_with_values_in_both_forms() {
        let parsed = p("-json --force -config=a.hcl --config b.hcl -n 5 job1 extra").unwrap();
        assert!(parsed.flag("json"));
        assert!(parsed.flag("force"));
        assert_eq!(parsed.value("config"), Some("b.hcl"));
        assert_eq!(parsed.values("config"), ["a.hcl", "b.hcl"]);
        assert_eq!(parsed.value("n"), Some("5"));
        assert_eq!(parsed.args, args("job1 extra"));
        let none = p("").unwrap();
        assert!(!none.flag("json"));
        assert_eq!(none.value("config"), None);
        assert!(none.args.is_empty());
    }

    #[test]
    fn flags_end_at_the_first_positional_argument_or_double_dash() {
        let parsed = p("job1 -json").unwrap();
        assert!(!parsed.flag("json"));
        assert_eq!(parsed.args, args("job1 -json"));
        let parsed = p("-force -- -json").unwrap();
        assert!(parsed.flag("force"));
        assert_eq!(parsed.args, args("-json"));
        assert_eq!(p("- x").unwrap().args, args("- x"));
    }

    #[test]
    fn bool_flags_take_inline_values_only() {
        assert!(!p("-force=false").unwrap().flag("force"));
        assert!(p("-force=t").unwrap().flag("force"));
        let parsed = p("-force false").unwrap();
        assert!(parsed.flag("force"));
        assert_eq!(parsed.args, args("false"));
        assert_eq!(
            p("-force=maybe").unwrap_err().to_string(),
            r#"invalid boolean value "maybe" for -force"#
        );
    }

    #[test]
    fn help_unknown_and_missing_values() {
        assert_eq!(p("-h"), Err(FlagError::Help));
        assert_eq!(p("-json -help"), Err(FlagError::Help));
        assert_eq!(p("--help"), Err(FlagError::Help));
        assert_eq!(
            p("-purge x").unwrap_err().to_string(),
            "flag provided but not defined: -purge"
        );
        assert_eq!(
            p("-config").unwrap_err().to_string(),
            "flag needs an argument: -config"
        );
        assert_eq!(p("---x"), Err(FlagError::Syntax("---x".into())));
        assert_eq!(p("-=x"), Err(FlagError::Syntax("-=x".into())));
        // An empty inline value is a value.
        assert_eq!(p("-config=").unwrap().value("config"), Some(""));
    }
}
