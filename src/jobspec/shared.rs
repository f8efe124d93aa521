//! The leaf of `src/jobspec/`: what several of its files share and that imports none of them.
//!
//! The raw types and the conversions of each block ([`super::raw`], [`super::constraint`],
//! [`super::network`] ...) all need the unknown-field map and its warning, and the rule's
//! tables ([`super::schema`], [`super::kept`], [`super::settings`]) the warning of a no-effect
//! name and the level it is written at. Kept here, they let the block modules stay leaves
//! instead of reaching back into the raw job (which imports them all).

use std::collections::BTreeMap;

use serde_json::Value;

/// Fields nodeward does not know, by name (JSON only: HCL refuses them).
pub(crate) type Extra = BTreeMap<String, Value>;

/// Where in a job a name is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Job,
    Group,
    Task,
}

/// Adds a warning for each field of `extra` with a value, named `<prefix><key>`.
pub(crate) fn warn_extra(warnings: &mut Vec<String>, prefix: &str, extra: &Extra) {
    for (key, value) in extra {
        if !is_empty(value) {
            warnings.push(format!(
                "field \"{prefix}{key}\" is not supported by nodeward and was ignored"
            ));
        }
    }
}

/// Whether a value is Go's "not set".
pub(crate) fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The one line of a no-effect name's warning.
pub fn warning(name: &str, reason: &str) -> String {
    format!("{name:?} has no effect on one node: {reason}")
}
