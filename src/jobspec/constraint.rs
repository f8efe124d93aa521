//! Where a job may run: `constraint` blocks (job, group and task level), `datacenters` and
//! `node_pool`, read from HCL and JSON into the same domain values (docs/jobspec.md "Placement").
//!
//! A constraint is Nomad's triple, `LTarget Operand RTarget` (`${attr.kernel.name} = linux`), kept
//! as written so that a placement failure names it as Nomad does. HCL's shorthands become that
//! triple as Nomad's jobspec reads them: `version = ">= 1.2"` is operator `version` with that
//! value, likewise `semver`, `regexp`, `set_contains`, `set_contains_all` and `set_contains_any`;
//! `distinct_hosts = true` is operator `distinct_hosts`; `distinct_property = "${meta.rack}"` is
//! operator `distinct_property` on that attribute; `is_set = true` / `is_not_set = true` are those
//! operators. A block without an operator is `=`.
//!
//! Checked once, where the job is read: the operator is one Nomad knows, the targets it needs are
//! there, a `regexp` compiles, a `version`/`semver` constraint parses, a `distinct_property` limit is
//! a count, and `distinct_hosts`/`distinct_property` are not set on a task (they count allocations
//! of a job or a group). Evaluating them against this node is the allocation module's
//! (`alloc::placement`).

use serde::{Deserialize, Serialize};
use std::fmt;

use hcl::edit::structure::Block;
use hcl::edit::Span;

use super::invalid;
use super::shared::Extra;
use super::JobspecError;
use crate::hcl::Source;
use crate::util::version::{Constraints, Flavor};

/// `node_pool` when the job names none, as in Nomad.
pub const DEFAULT_NODE_POOL: &str = "default";
/// The pool whose jobs run on a node of any pool (Nomad's `all`).
pub const ALL_NODE_POOLS: &str = "all";
/// `datacenters` when the job names none: every datacenter (Nomad 1.5 and later).
pub const ANY_DATACENTER: &str = "*";

/// A constraint's operator, as spelled: `=`, `==` and `is` mean the same but a placement failure
/// names the one the jobspec wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Operator {
    Eq,
    EqEq,
    Is,
    Ne,
    Not,
    Lt,
    Le,
    Gt,
    Ge,
    Regexp,
    Version,
    Semver,
    SetContains,
    SetContainsAll,
    SetContainsAny,
    IsSet,
    IsNotSet,
    DistinctHosts,
    DistinctProperty,
}

const OPERATORS: [Operator; 19] = [
    Operator::Eq,
    Operator::EqEq,
    Operator::Is,
    Operator::Ne,
    Operator::Not,
    Operator::Lt,
    Operator::Le,
    Operator::Gt,
    Operator::Ge,
    Operator::Regexp,
    Operator::Version,
    Operator::Semver,
    Operator::SetContains,
    Operator::SetContainsAll,
    Operator::SetContainsAny,
    Operator::IsSet,
    Operator::IsNotSet,
    Operator::DistinctHosts,
    Operator::DistinctProperty,
];

impl Operator {
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Eq => "=",
            Operator::EqEq => "==",
            Operator::Is => "is",
            Operator::Ne => "!=",
            Operator::Not => "not",
            Operator::Lt => "<",
            Operator::Le => "<=",
            Operator::Gt => ">",
            Operator::Ge => ">=",
            Operator::Regexp => "regexp",
            Operator::Version => "version",
            Operator::Semver => "semver",
            Operator::SetContains => "set_contains",
            Operator::SetContainsAll => "set_contains_all",
            Operator::SetContainsAny => "set_contains_any",
            Operator::IsSet => "is_set",
            Operator::IsNotSet => "is_not_set",
            Operator::DistinctHosts => "distinct_hosts",
            Operator::DistinctProperty => "distinct_property",
        }
    }

    pub fn parse(text: &str) -> Option<Operator> {
        OPERATORS.into_iter().find(|o| o.as_str() == text)
    }

    /// The operators that count allocations instead of reading the node: a job or group matter.
    pub fn is_distinct(self) -> bool {
        matches!(self, Operator::DistinctHosts | Operator::DistinctProperty)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for Operator {
    type Error = String;
    fn try_from(s: String) -> Result<Operator, String> {
        Operator::parse(&s).ok_or_else(|| unknown_operator(&s))
    }
}

impl From<Operator> for String {
    fn from(o: Operator) -> String {
        o.as_str().to_string()
    }
}

fn unknown_operator(spelled: &str) -> String {
    let known: Vec<String> = OPERATORS
        .iter()
        .map(|o| format!("{:?}", o.as_str()))
        .collect();
    format!(
        "unknown constraint operator {spelled:?}; one of {}",
        known.join(", ")
    )
}

/// One constraint in Nomad's API shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraint {
    #[serde(rename = "LTarget")]
    pub l_target: String,
    #[serde(rename = "RTarget")]
    pub r_target: String,
    #[serde(rename = "Operand")]
    pub operand: Operator,
}

/// Nomad's `Constraint.String()`, the text a placement failure names: `${attr.kernel.name} =
/// linux`, `${meta.x} is_set ` (with the empty value).
impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.l_target, self.operand, self.r_target)
    }
}

/// A constraint as the input gave it (JSON's `{"LTarget", "RTarget", "Operand"}`, or an HCL
/// block with its shorthands applied).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "PascalCase", expecting = "a Constraint object")]
pub(crate) struct RawConstraint {
    #[serde(rename = "LTarget")]
    pub l_target: Option<String>,
    #[serde(rename = "RTarget")]
    pub r_target: Option<String>,
    pub operand: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Which level a constraint is set at: distinct operators are refused on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Job,
    Group,
    Task,
}

/// Converts and checks a level's constraints; `what` names where they are (`TaskGroups[0]` in
/// JSON, `group "web"`), each message adds the constraint's index.
pub(crate) fn convert(
    what: &str,
    level: Level,
    raw: Option<Vec<RawConstraint>>,
) -> Result<Vec<Constraint>, JobspecError> {
    raw.unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| one(&format!("{what}: constraint {}", i + 1), level, c))
        .collect()
}

/// One constraint, checked; `ctx` names it in messages.
fn one(ctx: &str, level: Level, raw: RawConstraint) -> Result<Constraint, JobspecError> {
    let spelled = raw.operand.filter(|o| !o.is_empty());
    let operand = match spelled.as_deref() {
        None => Operator::Eq,
        Some(s) => {
            Operator::parse(s).ok_or_else(|| invalid(format!("{ctx}: {}", unknown_operator(s))))?
        }
    };
    let c = Constraint {
        l_target: raw.l_target.unwrap_or_default(),
        r_target: raw.r_target.unwrap_or_default(),
        operand,
    };
    check(ctx, level, &c)?;
    Ok(c)
}

/// Nomad's rules for one constraint, with nodeward's messages.
fn check(ctx: &str, level: Level, c: &Constraint) -> Result<(), JobspecError> {
    let op = c.operand;
    if level == Level::Task && op.is_distinct() {
        return Err(invalid(format!(
            "{ctx}: operator {:?} counts the allocations of a job or a group: set it on the job or the group, not on a task",
            op.as_str()
        )));
    }
    if op != Operator::DistinctHosts && c.l_target.is_empty() {
        return Err(invalid(format!(
            "{ctx}: operator {:?} needs an attribute",
            op.as_str()
        )));
    }
    let needs_value = !matches!(
        op,
        Operator::IsSet | Operator::IsNotSet | Operator::DistinctHosts | Operator::DistinctProperty
    );
    if needs_value && c.r_target.is_empty() {
        return Err(invalid(format!(
            "{ctx}: operator {:?} needs a value",
            op.as_str()
        )));
    }
    let bad = |why: String| Err(invalid(format!("{ctx}: {why}")));
    match op {
        Operator::IsSet | Operator::IsNotSet if !c.r_target.is_empty() => bad(format!(
            "operator {:?} takes no value, got {:?}",
            op.as_str(),
            c.r_target
        )),
        Operator::Regexp => match regex::Regex::new(&c.r_target) {
            Ok(_) => Ok(()),
            Err(e) => bad(format!(
                "regular expression {:?} does not compile: {e}",
                c.r_target
            )),
        },
        Operator::Version | Operator::Semver => {
            let flavor = if op == Operator::Version {
                Flavor::Version
            } else {
                Flavor::Semver
            };
            match Constraints::parse(&c.r_target, flavor) {
                Ok(_) => Ok(()),
                Err(e) => bad(format!("{} constraint {:?}: {e}", op.as_str(), c.r_target)),
            }
        }
        Operator::DistinctHosts if !matches!(c.r_target.as_str(), "" | "true" | "false") => bad(
            format!("distinct_hosts must be true or false, got {:?}", c.r_target),
        ),
        Operator::DistinctProperty if !c.r_target.is_empty() => match c.r_target.parse::<u64>() {
            Ok(n) if n > 0 => Ok(()),
            _ => bad(format!(
                "distinct_property allows a number of allocations per value, at least 1, got {:?}",
                c.r_target
            )),
        },
        _ => Ok(()),
    }
}

/// The job's `datacenters`: Nomad's default (`["*"]`) when not given or empty, as Nomad
/// canonicalizes a job (and as Go writes an unset list).
pub(crate) fn datacenters(
    what: &str,
    raw: Option<Vec<String>>,
) -> Result<Vec<String>, JobspecError> {
    match raw {
        None => Ok(any_datacenter()),
        Some(list) if list.is_empty() => Ok(any_datacenter()),
        Some(list) => match list.iter().find(|d| d.is_empty()) {
            Some(_) => Err(invalid(format!(
                "{what}: datacenters must not hold an empty name"
            ))),
            None => Ok(list),
        },
    }
}

/// The job's `node_pool`, `default` when not given (Go's empty string included).
pub(crate) fn node_pool(raw: Option<String>) -> String {
    raw.filter(|p| !p.is_empty())
        .unwrap_or_else(default_node_pool)
}

/// Nomad's default `datacenters`: any.
pub(crate) fn any_datacenter() -> Vec<String> {
    vec![ANY_DATACENTER.to_string()]
}

pub(crate) fn default_node_pool() -> String {
    DEFAULT_NODE_POOL.to_string()
}

/// Whether the job's `datacenters` are Nomad's default, which the job's JSON leaves out.
pub(crate) fn is_any_datacenter(list: &[String]) -> bool {
    matches!(list, [one] if one == ANY_DATACENTER)
}

pub(crate) fn is_default_pool(pool: &str) -> bool {
    pool == DEFAULT_NODE_POOL
}

/// The shorthand attributes of a `constraint` block and the operator each sets; the value goes to
/// `value`, except `distinct_property`'s, which is the attribute (`is_set`, `is_not_set` and
/// `distinct_hosts` are switches).
const SHORTHANDS: [(&str, Operator); 9] = [
    ("version", Operator::Version),
    ("semver", Operator::Semver),
    ("regexp", Operator::Regexp),
    ("set_contains", Operator::SetContains),
    ("set_contains_all", Operator::SetContainsAll),
    ("set_contains_any", Operator::SetContainsAny),
    ("is_set", Operator::IsSet),
    ("is_not_set", Operator::IsNotSet),
    ("distinct_property", Operator::DistinctProperty),
];

/// Reads the `constraint` blocks of `parent` (`job "x"`, `group "web"`, `task "t"`), checked with
/// the lines they are on.
pub(crate) fn from_hcl(
    src: &Source,
    parent: &str,
    level: Level,
    blocks: Vec<&Block>,
) -> Result<Vec<RawConstraint>, JobspecError> {
    blocks
        .into_iter()
        .map(|b| {
            let raw = block(src, parent, b)?;
            let ctx = format!(
                "constraint block of {parent} at line {}",
                src.line(b.span())
            );
            one(&ctx, level, raw.clone())?;
            Ok(raw)
        })
        .collect()
}

fn block(src: &Source, parent: &str, b: &Block) -> Result<RawConstraint, JobspecError> {
    src.no_labels(parent, b)?;
    let what = format!("constraint block of {parent}");
    let mut attrs = vec!["attribute", "operator", "value", "distinct_hosts"];
    attrs.extend(SHORTHANDS.iter().map(|(name, _)| *name));
    let items = src.items(&what, &b.body, &attrs, &[])?;
    let text = |key: &str| -> Result<Option<String>, JobspecError> {
        items
            .attr(key)
            .map(|a| {
                src.scalar_text(&a.value)
                    .ok_or_else(|| src.wrong_type(&what, a, "a string"))?
            })
            .transpose()
            .map_err(JobspecError::from)
    };
    let mut raw = RawConstraint {
        l_target: text("attribute")?,
        r_target: text("value")?,
        operand: text("operator")?,
        ..RawConstraint::default()
    };
    let line = src.line(b.span());
    let mut set_by: Option<&str> = None;
    let mut set = |raw: &mut RawConstraint, key: &'static str, op: Operator| {
        if let Some(first) = set_by {
            return Err(invalid(format!(
                "{what} at line {line} sets both {first:?} and {key:?}: write one constraint block for each"
            )));
        }
        if let Some(spelled) = raw.operand.as_deref().filter(|s| *s != op.as_str()) {
            return Err(invalid(format!(
                "{what} at line {line}: {key:?} is operator {:?}, but operator is {spelled:?}",
                op.as_str()
            )));
        }
        set_by = Some(key);
        raw.operand = Some(op.as_str().to_string());
        Ok(())
    };
    if let Some(a) = items.attr("distinct_hosts") {
        let on = src.bool(&what, a)?;
        set(&mut raw, "distinct_hosts", Operator::DistinctHosts)?;
        if !on {
            raw.r_target = Some("false".to_string());
        }
    }
    for (key, op) in SHORTHANDS {
        let Some(value) = text(key)? else { continue };
        set(&mut raw, key, op)?;
        match op {
            Operator::DistinctProperty => raw.l_target = Some(value),
            Operator::IsSet | Operator::IsNotSet => match value.as_str() {
                "true" => {}
                _ => {
                    return Err(invalid(format!(
                        "{what} at line {line}: {key} may only be true (else leave the constraint out), got {value:?}"
                    )))
                }
            },
            _ => raw.r_target = Some(value),
        }
    }
    Ok(raw)
}

/// One warning per field of a constraint nodeward does not know (JSON), by its path.
pub(crate) fn warn_unknown(out: &mut Vec<String>, path: &str, list: &Option<Vec<RawConstraint>>) {
    for (i, c) in list.iter().flatten().enumerate() {
        super::shared::warn_extra(out, &format!("{path}Constraints[{i}]."), &c.extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(l: &str, op: &str, r: &str) -> RawConstraint {
        RawConstraint {
            l_target: Some(l.to_string()),
            r_target: Some(r.to_string()),
            operand: Some(op.to_string()),
            ..RawConstraint::default()
        }
    }

    fn err(level: Level, c: RawConstraint) -> String {
        one("group \"g\": constraint 1", level, c)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn constraints_read_as_nomad_names_them() {
        let c = one("x", Level::Job, raw("${attr.kernel.name}", "==", "linux")).unwrap();
        assert_eq!(c.operand, Operator::EqEq);
        assert_eq!(c.to_string(), "${attr.kernel.name} == linux");
        let default = RawConstraint {
            operand: None,
            ..raw("${node.class}", "", "web")
        };
        assert_eq!(
            one("x", Level::Job, default).unwrap().to_string(),
            "${node.class} = web"
        );
        let set = one("x", Level::Task, raw("${meta.rack}", "is_set", "")).unwrap();
        assert_eq!(set.to_string(), "${meta.rack} is_set ");
        assert_eq!(
            serde_json::to_value(&set).unwrap(),
            serde_json::json!({"LTarget": "${meta.rack}", "RTarget": "", "Operand": "is_set"})
        );
        for op in OPERATORS {
            assert_eq!(Operator::parse(op.as_str()), Some(op));
        }
    }

    #[test]
    fn bad_constraints_are_refused_with_the_reason() {
        assert_eq!(
            err(Level::Group, raw("${attr.x}", "like", "y")),
            format!("group \"g\": constraint 1: {}", unknown_operator("like"))
        );
        assert!(err(Level::Group, raw("${attr.x}", "regexp", "("))
            .starts_with("group \"g\": constraint 1: regular expression \"(\" does not compile"));
        assert_eq!(
            err(Level::Group, raw("${attr.x}", "version", ">= x")),
            "group \"g\": constraint 1: version constraint \">= x\": malformed constraint: \">= x\""
        );
        assert!(err(Level::Group, raw("${attr.x}", "semver", "~> 1.2")).contains("semver"));
        assert_eq!(
            err(Level::Group, raw("", "=", "y")),
            "group \"g\": constraint 1: operator \"=\" needs an attribute"
        );
        assert_eq!(
            err(Level::Group, raw("${attr.x}", "<", "")),
            "group \"g\": constraint 1: operator \"<\" needs a value"
        );
        assert!(err(Level::Group, raw("${attr.x}", "is_set", "y")).contains("takes no value"));
        assert!(
            err(Level::Group, raw("${meta.r}", "distinct_property", "0")).contains("at least 1")
        );
        assert!(err(Level::Group, raw("", "distinct_hosts", "maybe")).contains("true or false"));
        assert!(err(Level::Task, raw("", "distinct_hosts", "")).contains("not on a task"));
        assert!(one("x", Level::Group, raw("", "distinct_hosts", "")).is_ok());
    }

    /// Every HCL form gives the JSON form Nomad's API carries, and the job reads back from its
    /// own JSON.
    #[test]
    fn hcl_shorthands_are_nomads_triples_and_json_gives_the_same_job() {
        let hcl = r#"
job "placed" {
  datacenters = ["eu-*", "dc1"]
  node_pool   = "gpu"
  constraint { distinct_hosts = true }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "g" {
    count = 2
    constraint {
      attribute = "${attr.os.name}"
      operator  = "regexp"
      value     = "^(debian|ubuntu)$"
    }
    constraint {
      attribute = "${attr.kernel.version}"
      version   = ">= 4.0"
    }
    constraint { distinct_property = "${meta.rack}" }
    task "t" {
      driver = "raw_exec"
      config { command = "true" }
      constraint {
        attribute = "${meta.tags}"
        set_contains_any = "ssd,nvme"
      }
      constraint {
        attribute = "${meta.gpu}"
        is_not_set = true
      }
    }
  }
}
"#;
        let from_hcl = crate::jobspec::hcl::parse_job(hcl).unwrap().job;
        let c = |l: &str, op: &str, r: &str| serde_json::json!({"LTarget": l, "RTarget": r, "Operand": op});
        let json = serde_json::json!({"Job": {
            "ID": "placed",
            "Datacenters": ["eu-*", "dc1"],
            "NodePool": "gpu",
            "Constraints": [c("", "distinct_hosts", ""), c("${attr.kernel.name}", "=", "linux")],
            "TaskGroups": [{
                "Name": "g",
                "Count": 2,
                "Constraints": [
                    c("${attr.os.name}", "regexp", "^(debian|ubuntu)$"),
                    c("${attr.kernel.version}", "version", ">= 4.0"),
                    c("${meta.rack}", "distinct_property", ""),
                ],
                "Tasks": [{
                    "Name": "t",
                    "Driver": "raw_exec",
                    "Config": {"command": "true"},
                    "Constraints": [
                        c("${meta.tags}", "set_contains_any", "ssd,nvme"),
                        c("${meta.gpu}", "is_not_set", ""),
                    ],
                }],
            }],
        }});
        let from_json = crate::jobspec::json::parse_job(json.to_string().as_bytes()).unwrap();
        assert!(from_json.warnings.is_empty(), "{:?}", from_json.warnings);
        assert_eq!(from_json.job, from_hcl);
        let own = serde_json::to_value(&from_hcl).unwrap();
        assert_eq!(own["Constraints"], json["Job"]["Constraints"]);
        assert_eq!(
            own["TaskGroups"][0]["Tasks"][0]["Constraints"][1],
            c("${meta.gpu}", "is_not_set", "")
        );
        let back = crate::jobspec::json::parse_job(own.to_string().as_bytes()).unwrap();
        assert_eq!(back.job, from_hcl);
    }

    #[test]
    fn hcl_constraint_errors_name_the_line() {
        let job = |constraint: &str| {
            format!(
                "job \"j\" {{\n  group \"g\" {{\n    constraint {{\n{constraint}\n    }}\n    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{ command = \"true\" }}\n    }}\n  }}\n}}\n"
            )
        };
        let err = |c: &str| {
            crate::jobspec::hcl::parse_job(&job(c))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("      attribute = \"${attr.x}\"\n      regexp = \"(\"")
                .split(": regular")
                .next()
                .unwrap(),
            "constraint block of group \"g\" at line 3"
        );
        assert_eq!(
            err("      attribute = \"${attr.x}\"\n      version = \"1\"\n      semver = \"1\""),
            "constraint block of group \"g\" at line 3 sets both \"version\" and \"semver\": write one constraint block for each"
        );
        assert_eq!(
            err("      attribute = \"${attr.x}\"\n      operator = \"=\"\n      regexp = \"x\""),
            "constraint block of group \"g\" at line 3: \"regexp\" is operator \"regexp\", but operator is \"=\""
        );
        assert_eq!(
            err("      attr = \"${attr.x}\""),
            "unknown attribute \"attr\" in constraint block of group \"g\" at line 4"
        );
    }

    #[test]
    fn datacenters_and_pools_default_as_in_nomad() {
        assert_eq!(datacenters("job", None).unwrap(), ["*"]);
        assert_eq!(datacenters("job", Some(vec![])).unwrap(), ["*"]);
        assert!(datacenters("job", Some(vec!["".into()])).is_err());
        assert_eq!(node_pool(Some(String::new())), "default");
        assert_eq!(node_pool(Some("gpu".into())), "gpu");
    }
}
