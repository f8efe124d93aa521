//! HCL2's expression language in jobspecs, as Nomad's jobspec2 has it: `variable` and `locals`
//! blocks, `var.<name>` and `local.<name>`, operators, conditionals, `for` expressions, template
//! directives and Nomad's functions ([`super::funcs`]), evaluated by hcl-rs ([`hcl::eval`]),
//! with `try`, `can` and `convert`, which hcl-rs cannot call, evaluated first ([`lazy`]).
//!
//! [`evaluate`] is a pass over a parsed document before its schema's walker reads it. It takes the
//! `variable`, `variables` and `locals` blocks out of the body, works out each variable's value
//! ([`vars`]: defaults, `NOMAD_VAR_`, `-var-file`, `-var`; types; validations), evaluates the
//! local values in the order they depend on each other, and then ([`walk`]) replaces every
//! attribute value that is not already a literal by the literal it evaluates to and expands
//! `dynamic` blocks into the blocks they describe. The walker reads literals and ordinary blocks
//! as it always has; an attribute keeps its span, so the walker's errors keep their line numbers.
//!
//! Names the language does not know (`${attr.kernel.name}`, `${node.unique.id}`, `${meta.team}`,
//! `${NOMAD_TASK_DIR}`, `${env.HOME}`) stay the `${...}` text written in a string ([`refs`]), as
//! in Nomad, and are interpolated by the agent when the task starts
//! ([`crate::jobspec::interpolate`]).
//!
//! It runs on the caller's thread (the parser's, see [`super::read`]) and starts none.

mod elements;
mod lazy;
pub mod refs;
pub mod types;
pub mod value;
pub mod vars;
mod walk;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, Body};
use hcl::edit::Span;
use hcl::eval::Context;
use hcl::{Map, Value};

use super::funcs::{self, Files, FuncEnv};
use super::Source;
use elements::Sets;
use refs::{Refs, LOCAL, VAR};
use types::Type;
use walk::Walk;

/// What the caller gives a jobspec besides its text.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `NOMAD_VAR_<name>` variables of the environment, as `(name, value)`, the prefix removed.
    pub env: Vec<(String, String)>,
    /// `-var-file` files (or the API's `Variables`), in the order given.
    pub var_files: Vec<VarFile>,
    /// `-var name=value`, in the order given.
    pub args: Vec<(String, String)>,
    /// What `file()` may read.
    pub files: Files,
    /// The instant `timestamp()` answers; now when not given.
    pub now: Option<DateTime<Utc>>,
}

/// A text of `name = value` lines and what to call it in messages (`-var-file prod.hcl`,
/// `Variables`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarFile {
    pub name: String,
    pub text: String,
}

/// Where a variable's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// `NOMAD_VAR_<name>`.
    Env(String),
    /// A -var-file or `Variables`, by its [`VarFile::name`].
    File(String),
    /// `-var`.
    Arg,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("its default"),
            Origin::Env(name) => write!(f, "NOMAD_VAR_{name}"),
            Origin::File(name) => f.write_str(name),
            Origin::Arg => f.write_str("-var"),
        }
    }
}

/// Why a jobspec's variables, locals or expressions cannot be evaluated. Messages follow Nomad's
/// summaries (`Unset variable "x"`, `Invalid value for variable`) and name the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Declared variables that nothing gives a value: `(name, line of its declaration)`, all of
    /// them in one message.
    #[error("{}", unset(.0))]
    Unset(Vec<(String, usize)>),
    /// A value set for a variable the jobspec does not declare.
    #[error("Undefined variable {name:?} set by {origin}: the jobspec declares no variable {name:?} (a variable {name:?} block would)")]
    Undeclared { name: String, origin: Origin },
    /// A value that does not fit the variable's type.
    #[error("Invalid value for variable {name:?} from {origin}: {reason}")]
    Value {
        name: String,
        origin: Origin,
        reason: String,
    },
    /// A value its validation refuses: the validation's `error_message`.
    #[error("Invalid value for variable {name:?} from {origin}: {message} (checked by the validation rule at line {line})")]
    Validation {
        name: String,
        origin: Origin,
        message: String,
        line: usize,
    },
    /// A `variable` or `locals` block that cannot be used (the message names it and its line).
    #[error("{0}")]
    Declaration(String),
    /// An attribute whose expression does not evaluate.
    #[error("attribute {key:?} in {what} at line {line}: {reason}")]
    Expression {
        key: String,
        what: String,
        line: usize,
        reason: String,
    },
    /// A `dynamic` block that cannot be expanded (the message names it and its line).
    #[error("{0}")]
    Dynamic(String),
    /// A -var-file or `Variables` that is not a list of `name = value` lines.
    #[error("{name}: {reason}")]
    VarFile { name: String, reason: String },
}

fn unset(vars: &[(String, usize)]) -> String {
    vars.iter()
        .map(|(name, line)| {
            format!(
                "Unset variable {name:?} (declared at line {line}): a used variable must be set or have a default value"
            )
        })
        .collect::<Vec<_>>()
        // One line: the API answers an error with a one-line reason.
        .join("; ")
}

type Result<T> = std::result::Result<T, super::Error>;

/// The names of the language's own top-level blocks.
const BLOCKS: [&str; 3] = ["variable", "variables", "locals"];

/// Evaluates `body` in place as the module says; `source` is the text it was parsed from.
pub fn evaluate(body: &mut Body, source: &Source, inputs: &Inputs) -> Result<()> {
    let env = FuncEnv {
        files: inputs.files.clone(),
        now: inputs.now.unwrap_or_else(Utc::now),
    };
    funcs::with_env(env, || {
        let mut lang: Vec<Block> = Vec::new();
        for ident in BLOCKS {
            lang.extend(body.remove_blocks(ident));
        }
        // In the order written, for messages that follow the file.
        lang.sort_by_key(|b| b.span().map(|s| s.start));
        let mut ctx = funcs::context();
        let declared = vars::declare(&lang, source, &ctx)?;
        let values = vars::assign(&declared, inputs)?;
        vars::validate(&declared, &values, &ctx)?;
        let mut var = Map::new();
        for (v, assigned) in declared.iter().zip(values) {
            var.insert(
                v.name.clone(),
                assigned.map(|a| a.value).unwrap_or_default(),
            );
        }
        let names: BTreeSet<String> = declared.iter().map(|v| v.name.clone()).collect();
        ctx.declare_var(VAR, Value::Object(var));
        let mut sets = Sets {
            vars: declared
                .iter()
                .filter(|v| matches!(v.ty, Some(Type::Set(_))))
                .map(|v| v.name.clone())
                .collect(),
            locals: BTreeSet::new(),
        };
        let locals = locals(&lang, source, &names, &mut sets, &mut ctx)?;
        Walk {
            source,
            vars: &names,
            locals: &locals,
            sets: &sets,
            ctx: &ctx,
            bound: Vec::new(),
        }
        .body("the jobspec", body)
    })
}

/// One `locals` attribute.
struct Local {
    expr: Expression,
    line: usize,
    deps: BTreeSet<String>,
}

/// Evaluates the `locals` blocks into `ctx`'s `local` object, each after those it refers to, and
/// adds those that are sets to `sets`; returns their names.
fn locals(
    lang: &[Block],
    source: &Source,
    vars: &BTreeSet<String>,
    sets: &mut Sets,
    ctx: &mut Context,
) -> Result<BTreeSet<String>> {
    let mut found: BTreeMap<String, (Expression, usize)> = BTreeMap::new();
    for block in lang.iter().filter(|b| b.ident.as_str() == "locals") {
        source.no_labels("the jobspec", block)?;
        for structure in block.body.iter() {
            let line = source.line(structure.span());
            let Some(attr) = structure.as_attribute() else {
                return Err(Error::Declaration(format!(
                    "a locals block holds name = value lines, not blocks (line {line})"
                ))
                .into());
            };
            let name = attr.key.as_str().to_string();
            if let Some((_, first)) = found.get(&name) {
                return Err(Error::Declaration(format!(
                    "Duplicate local value {name:?} at line {line} (first defined at line {first})"
                ))
                .into());
            }
            found.insert(name, (attr.value.clone(), line));
        }
    }
    let names: BTreeSet<String> = found.keys().cloned().collect();
    let mut pending: BTreeMap<String, Local> = BTreeMap::new();
    for (name, (mut expr, line)) in found {
        let mut refs = Refs::new(source, vars, &names);
        refs.check(&mut expr);
        if let Some(bad) = refs.error {
            return Err(Error::Declaration(format!(
                "local value {name:?} at line {}: {}",
                bad.line, bad.reason
            ))
            .into());
        }
        let deps = refs.locals_used;
        pending.insert(name, Local { expr, line, deps });
    }
    let mut done = Map::new();
    ctx.declare_var(LOCAL, Value::Object(done.clone()));
    while !pending.is_empty() {
        let ready: Vec<String> = pending
            .iter()
            .filter(|(_, l)| l.deps.iter().all(|d| done.contains_key(d)))
            .map(|(n, _)| n.clone())
            .collect();
        if ready.is_empty() {
            let cycle: Vec<String> = pending.keys().map(|n| format!("local.{n}")).collect();
            let line = pending.values().map(|l| l.line).min().unwrap_or(0);
            return Err(Error::Declaration(format!(
                "local values refer to each other in a cycle, so none of them has a value: {} (line {line})",
                cycle.join(", ")
            ))
            .into());
        }
        for name in ready {
            let Some(local) = pending.remove(&name) else {
                continue;
            };
            let value = value::evaluate_in(&local.expr, ctx, sets).map_err(|reason| {
                Error::Declaration(format!(
                    "local value {name:?} at line {}: {reason}",
                    local.line
                ))
            })?;
            // Those it refers to are done, so whether they are sets is known.
            if sets.made_by(&local.expr) {
                sets.locals.insert(name.clone());
            }
            done.insert(name, value);
            ctx.declare_var(LOCAL, Value::Object(done.clone()));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hcl::Document;
    use serde_json::json;

    /// Evaluates `src` and reads the result back as data (as a schema would).
    fn eval_with(src: &str, inputs: &Inputs) -> std::result::Result<serde_json::Value, String> {
        crate::hcl::read(src, |Document { mut body, source }| {
            evaluate(&mut body, &source, inputs)?;
            source
                .body_value("the jobspec", &body, &[])
                .map(serde_json::Value::Object)
        })
        .map_err(|e: super::super::Error| e.to_string())
    }

    fn eval(src: &str) -> std::result::Result<serde_json::Value, String> {
        eval_with(src, &Inputs::default())
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const VARS: &str = r#"
variable "image" {
  type    = string
  default = "busybox:1"
}
variable "count" {
  type    = number
  default = 1
}
variable "ports" {
  type    = list(number)
  default = [8080]
}
variable "tier" {
  default = "dev"
}
image = var.image
count = var.count
ports = var.ports
tier  = var.tier
"#;

    #[test]
    fn defaults_then_env_then_files_then_args() {
        assert_eq!(
            eval(VARS).unwrap(),
            json!({"image": "busybox:1", "count": 1, "ports": [8080], "tier": "dev"})
        );
        let inputs = Inputs {
            env: pairs(&[("image", "env:1"), ("count", "2"), ("unrelated", "x")]),
            var_files: vec![
                VarFile {
                    name: "-var-file a.hcl".into(),
                    text: "count = 3\nports = [1, \"2\"]\n".into(),
                },
                VarFile {
                    name: "-var-file b.json".into(),
                    text: r#"{"tier": "prod"}"#.into(),
                },
            ],
            args: pairs(&[("count", "4"), ("tier", "qa"), ("count", "5")]),
            ..Inputs::default()
        };
        assert_eq!(
            eval_with(VARS, &inputs).unwrap(),
            json!({"image": "env:1", "count": 5, "ports": [1, 2], "tier": "qa"})
        );
        let list = Inputs {
            args: pairs(&[("ports", "[80, 443]")]),
            ..Inputs::default()
        };
        assert_eq!(eval_with(VARS, &list).unwrap()["ports"], json!([80, 443]));
    }

    #[test]
    fn wrong_and_undeclared_values_are_refused() {
        let bad = |args: &[(&str, &str)]| {
            eval_with(
                VARS,
                &Inputs {
                    args: pairs(args),
                    ..Inputs::default()
                },
            )
            .unwrap_err()
        };
        assert_eq!(
            bad(&[("count", "many")]),
            "Invalid value for variable \"count\" from -var: a number is required, not \"many\""
        );
        assert_eq!(
            bad(&[("ports", "[80, x]")]),
            "Invalid value for variable \"ports\" from -var: a value here cannot refer to `x`; quote text: \"...\""
        );
        assert_eq!(
            bad(&[("nope", "1")]),
            "Undefined variable \"nope\" set by -var: the jobspec declares no variable \"nope\" (a variable \"nope\" block would)"
        );
        let file = |text: &str| {
            eval_with(
                VARS,
                &Inputs {
                    var_files: vec![VarFile {
                        name: "-var-file v.hcl".into(),
                        text: text.into(),
                    }],
                    ..Inputs::default()
                },
            )
            .unwrap_err()
        };
        assert_eq!(
            file("nope = 1\n"),
            "Undefined variable \"nope\" set by -var-file v.hcl: the jobspec declares no variable \"nope\" (a variable \"nope\" block would)"
        );
        assert!(
            file("count = \n").starts_with("-var-file v.hcl: HCL syntax error at line 1, column 9"),
            "{}",
            file("count = \n")
        );
        assert_eq!(
            file("\nvariable \"count\" {}\n"),
            "-var-file v.hcl: a variable block declares a variable, which belongs in the jobspec; here set its value with name = value (line 2)"
        );
        assert_eq!(
            file("count = upper(\"x\")\n"),
            "-var-file v.hcl: the value of \"count\" at line 1: call to unknown function \"upper\" (docs/jobspec.md lists the functions a jobspec can call)"
        );
    }

    #[test]
    fn a_variable_without_a_value_is_named_with_its_line() {
        let src = "variable \"a\" {}\nvariable \"b\" {\n  type = string\n}\nvariable \"c\" {\n  default = 1\n}\n";
        assert_eq!(
            eval(src).unwrap_err(),
            "Unset variable \"a\" (declared at line 1): a used variable must be set or have a default value; \
             Unset variable \"b\" (declared at line 2): a used variable must be set or have a default value"
        );
        let set = Inputs {
            env: pairs(&[("a", "x"), ("b", "y")]),
            ..Inputs::default()
        };
        assert_eq!(eval_with(src, &set).unwrap(), json!({}));
    }

    #[test]
    fn validations_say_their_error_message() {
        let src = r#"
variable "port" {
  type = number
  default = 8080
  validation {
    condition     = var.port > 1024 && var.port < 65536
    error_message = "The port must be above 1024."
  }
}
port = var.port
"#;
        assert_eq!(eval(src).unwrap(), json!({"port": 8080}));
        let low = Inputs {
            args: pairs(&[("port", "80")]),
            ..Inputs::default()
        };
        assert_eq!(
            eval_with(src, &low).unwrap_err(),
            "Invalid value for variable \"port\" from -var: The port must be above 1024. (checked by the validation rule at line 5)"
        );
        let other = src.replace("var.port > 1024", "var.other > 1024");
        assert_eq!(
            eval(&other).unwrap_err(),
            "the condition of the validation block of variable \"port\" at line 6 must refer to var.port and to no other variable or local value"
        );
        let empty = src.replace("The port must be above 1024.", " ");
        assert!(eval(&empty).unwrap_err().contains("is empty"));
    }

    #[test]
    fn declarations_are_checked() {
        assert_eq!(
            eval("variable \"a\" {\n  type = strin\n}\n").unwrap_err(),
            "invalid type for variable \"a\" at line 2: \"strin\" is not a type: a type is string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])"
        );
        assert_eq!(
            eval("variable \"a\" {\n  type = number\n  default = \"x\"\n}\n").unwrap_err(),
            "invalid default value for variable \"a\" at line 3: not compatible with its type number: a number is required, not \"x\""
        );
        assert_eq!(
            eval("variable \"a\" {\n  default = 1\n}\nvariable \"a\" {\n  default = 2\n}\n")
                .unwrap_err(),
            "Duplicate variable \"a\" at line 4 (first declared at line 1)"
        );
        assert_eq!(
            eval("variable \"a\" {\n  defualt = 1\n}\n").unwrap_err(),
            "unknown attribute \"defualt\" in variable \"a\" at line 2"
        );
        assert_eq!(
            eval("variable \"a\" {\n  default = var.b\n}\n").unwrap_err(),
            "invalid default value for variable \"a\" at line 2: reference to undeclared input variable \"b\" (var.b): the jobspec has no variable block that defines it"
        );
        // Nomad's older form.
        assert_eq!(
            eval("variables {\n  a = 1\n}\nx = var.a + 1\n").unwrap(),
            json!({"x": 2})
        );
    }

    #[test]
    fn locals_are_evaluated_in_the_order_they_need() {
        let src = r#"
locals {
  full = "${local.name}-${var.env}"
  name = upper(local.base)
}
locals {
  base = "web"
}
variable "env" {
  default = "prod"
}
x = local.full
"#;
        assert_eq!(eval(src).unwrap(), json!({"x": "WEB-prod"}));
        let cycle = "locals {\n  a = local.b\n  b = local.a\n}\n";
        assert_eq!(
            eval(cycle).unwrap_err(),
            "local values refer to each other in a cycle, so none of them has a value: local.a, local.b (line 2)"
        );
        assert_eq!(
            eval("locals {\n  a = 1\n}\nlocals {\n  a = 2\n}\n").unwrap_err(),
            "Duplicate local value \"a\" at line 5 (first defined at line 2)"
        );
        assert_eq!(
            eval("locals {\n  a = local.nope\n}\n").unwrap_err(),
            "local value \"a\" at line 2: reference to undeclared local value \"nope\" (local.nope): the jobspec has no locals block that defines it"
        );
    }

    #[test]
    fn runtime_names_pass_through_as_written() {
        let src = r#"
variable "dir" {
  default = "data"
}
a = "${NOMAD_TASK_DIR}/${var.dir}"
b = "${ attr.kernel.name }"
c = "${upper(var.dir)}-${node.unique.id}-${meta.team}-${env["HOME"]}"
d = "$${var.dir}"
e = <<-EOF
    dir=${var.dir}
    task=${NOMAD_TASK_DIR}
    EOF
"#;
        assert_eq!(
            eval(src).unwrap(),
            json!({
                "a": "${NOMAD_TASK_DIR}/data",
                "b": "${ attr.kernel.name }",
                "c": "DATA-${node.unique.id}-${meta.team}-${env[\"HOME\"]}",
                "d": "${var.dir}",
                "e": "dir=data\ntask=${NOMAD_TASK_DIR}\n",
            })
        );
    }

    #[test]
    fn the_language_evaluates() {
        let src = r#"
variable "tags" {
  default = ["a", "b"]
}
variable "debug" {
  type    = bool
  default = false
}
list   = [for t in var.tags : "tag-${t}"]
map    = { for i, t in var.tags : t => i }
cond   = var.debug ? "-v" : "-q"
math   = 1 + 2 * 3
dir    = "%{ for t in var.tags }${t};%{ endfor }%{ if var.debug }debug%{ else }quiet%{ endif }"
joined = join(",", concat(var.tags, ["c"]))
object = { (var.tags[0]) = length(var.tags) }
block {
  nested = format("%s:%d", "x", 3)
}
"#;
        assert_eq!(
            eval(src).unwrap(),
            json!({
                "list": ["tag-a", "tag-b"],
                "map": {"a": 0, "b": 1},
                "cond": "-q",
                "math": 7,
                "dir": "a;b;quiet",
                "joined": "a,b,c",
                "object": {"a": 2},
                "block": [{"nested": "x:3"}],
            })
        );
    }

    #[test]
    fn try_and_can_pass_over_bad_references_as_nomad_does() {
        assert_eq!(
            eval("x = try(var.nope, \"d\")\ny = can(local.maybe)\nz = try(attr.x, 1)\n").unwrap(),
            serde_json::json!({"x": "d", "y": false, "z": 1})
        );
        // Outside them the reference is still the jobspec's error.
        assert!(eval("x = [try(1), var.nope]\n")
            .unwrap_err()
            .contains("reference to undeclared input variable \"nope\""));
    }

    #[test]
    fn expression_errors_name_the_attribute_and_line() {
        assert_eq!(
            eval("\nblock {\n  x = var.nope\n}\n").unwrap_err(),
            "attribute \"x\" in block block of the jobspec at line 3: reference to undeclared input variable \"nope\" (var.nope): the jobspec has no variable block that defines it"
        );
        assert_eq!(
            eval("x = [\n  attr.kernel.name,\n]\n").unwrap_err(),
            "attribute \"x\" in the jobspec at line 1: unknown name \"attr\": outside a string only var.<name>, local.<name> and names bound by a for expression are known (quote text: \"attr\") (line 2)"
        );
        assert_eq!(
            eval("x = nosuch(1)\n").unwrap_err(),
            "attribute \"x\" in the jobspec at line 1: call to unknown function \"nosuch\" (docs/jobspec.md lists the functions a jobspec can call)"
        );
        assert_eq!(
            eval("x = upper([])\n").unwrap_err(),
            "attribute \"x\" in the jobspec at line 1: upper(): argument 1 must be a string, not a list"
        );
        // A bare name is left to the schema, whose message says what the attribute must be.
        assert_eq!(
            eval("x = root\n").unwrap_err(),
            "attribute \"x\" in the jobspec at line 1 must be a literal value (a string, number, bool, list or object)"
        );
    }

    #[test]
    fn try_can_and_convert_work_in_locals_and_validations() {
        let src = r#"
variable "port" {
  default = "8080"
  validation {
    condition     = can(parseint(var.port, 10))
    error_message = "The port must be a number."
  }
}
variable "cfg" {
  default = { name = "web" }
}
locals {
  port  = try(var.cfg.port, parseint(var.port, 10))
  ports = convert([var.port, 9090], list(number))
}
x = [local.port, local.ports]
"#;
        assert_eq!(eval(src).unwrap(), json!({"x": [8080, [8080, 9090]]}));
        let bad = Inputs {
            args: pairs(&[("port", "http")]),
            ..Inputs::default()
        };
        assert_eq!(
            eval_with(src, &bad).unwrap_err(),
            "Invalid value for variable \"port\" from -var: The port must be a number. (checked by the validation rule at line 4)"
        );
    }

    #[test]
    fn sensitive_values_stay_out_of_messages() {
        let src = "variable \"token\" {\n  type = number\n  sensitive = true\n}\n";
        let inputs = Inputs {
            args: pairs(&[("token", "s3cret")]),
            ..Inputs::default()
        };
        let e = eval_with(src, &inputs).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(e.contains("the value is sensitive"), "{e}");
    }
}
