//! Input variables: `variable "<name>" { type default description sensitive validation {..} }`
//! blocks (and Nomad's older `variables { name = default }`), the values the caller sets, and the
//! checks on the value each variable ends up with.
//!
//! Precedence is Nomad's: the default, then `NOMAD_VAR_<name>`, then each `-var-file` (or the
//! API's `Variables`) in the order given, then each `-var`; the last one set wins. A value set for
//! a variable the jobspec does not declare is an error (from the environment it is ignored, as
//! the environment holds whatever else the shell has); a variable left without a value is an error
//! naming it and its line. Validations run on the value used.

use std::collections::BTreeSet;

use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use hcl::eval::Context;
use hcl::{Map, Value};

use super::refs::{Refs, VAR};
use super::types::Type;
use super::value::{constant, evaluate, from_text};
use super::{Error, Inputs, Origin, VarFile};
use crate::hcl::Source;

/// The HCL front-end's error: a schema problem in a `variable` block keeps its own kind.
type Result<T> = std::result::Result<T, crate::hcl::Error>;

/// One declared variable.
#[derive(Debug, Clone)]
pub struct Variable {
    pub name: String,
    /// The line of its `variable` block (or of its attribute in `variables {}`).
    pub line: usize,
    /// The declared type, or the type of the default when none is declared.
    pub ty: Option<Type>,
    pub default: Option<Value>,
    pub description: Option<String>,
    /// Its value is left out of messages.
    pub sensitive: bool,
    pub validations: Vec<Validation>,
}

/// A `validation { condition error_message }` block.
#[derive(Debug, Clone)]
pub struct Validation {
    /// Checked to refer only to the variable itself.
    pub condition: Expression,
    pub error_message: String,
    pub line: usize,
}

/// A variable's value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    pub value: Value,
    pub origin: Origin,
}

fn declaration(msg: String) -> crate::hcl::Error {
    Error::Declaration(msg).into()
}

/// Whether `name` can be a variable's name: HCL's identifiers.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// Reads the `variable` and `variables` blocks, in the order written.
pub fn declare(blocks: &[Block], source: &Source, ctx: &Context) -> Result<Vec<Variable>> {
    let mut vars: Vec<Variable> = Vec::new();
    let add = |v: Variable, vars: &mut Vec<Variable>| {
        if let Some(first) = vars.iter().find(|d| d.name == v.name) {
            return Err(declaration(format!(
                "Duplicate variable {:?} at line {} (first declared at line {})",
                v.name, v.line, first.line
            )));
        }
        vars.push(v);
        Ok(())
    };
    for block in blocks {
        match block.ident.as_str() {
            "variable" => {
                let v = variable_block(block, source, ctx)?;
                add(v, &mut vars)?;
            }
            "variables" => {
                source.no_labels("the jobspec", block)?;
                for structure in block.body.iter() {
                    let Structure::Attribute(attr) = structure else {
                        return Err(declaration(format!(
                            "a variables block holds name = default lines, not blocks (line {})",
                            source.line(structure.span())
                        )));
                    };
                    let line = source.line(attr.span());
                    let default = default_value(&attr.value, source, ctx).map_err(|e| {
                        declaration(format!(
                            "invalid default value for variable {:?} at line {line}: {e}",
                            attr.key.as_str()
                        ))
                    })?;
                    let v = Variable {
                        name: attr.key.as_str().to_string(),
                        line,
                        ty: Type::of_default(&default),
                        default: Some(default),
                        description: None,
                        sensitive: false,
                        validations: Vec::new(),
                    };
                    add(v, &mut vars)?;
                }
            }
            _ => {}
        }
    }
    Ok(vars)
}

/// A default may be written with functions and templates, but refer to no variable.
fn default_value(
    expr: &Expression,
    source: &Source,
    ctx: &Context,
) -> std::result::Result<Value, String> {
    let none = BTreeSet::new();
    let mut expr = expr.clone();
    let mut refs = Refs::new(source, &none, &none);
    refs.check(&mut expr);
    if let Some(bad) = refs.error {
        return Err(bad.reason);
    }
    evaluate(&expr, ctx)
}

fn variable_block(block: &Block, source: &Source, ctx: &Context) -> Result<Variable> {
    let name = source.label("the jobspec", block)?;
    let line = source.line(block.span());
    if !valid_name(&name) {
        return Err(declaration(format!(
            "invalid variable name {name:?} at line {line}: a name must start with a letter or underscore and may contain only letters, digits, underscores, and dashes"
        )));
    }
    let what = format!("variable {name:?}");
    let items = source.items(
        &what,
        &block.body,
        &["type", "default", "description", "sensitive"],
        &["validation"],
    )?;
    let declared = items
        .attr("type")
        .map(|attr| {
            Type::parse(&hcl::Expression::from(attr.value.clone())).map_err(|e| {
                declaration(format!(
                    "invalid type for variable {name:?} at line {}: {e}",
                    source.line(attr.span())
                ))
            })
        })
        .transpose()?;
    let default = items
        .attr("default")
        .map(|attr| {
            let at = source.line(attr.span());
            let value = default_value(&attr.value, source, ctx).map_err(|e| {
                declaration(format!("invalid default value for variable {name:?} at line {at}: {e}"))
            })?;
            match &declared {
                Some(ty) => ty.convert(value).map_err(|e| {
                    declaration(format!(
                        "invalid default value for variable {name:?} at line {at}: not compatible with its type {ty}: {e}"
                    ))
                }),
                None => Ok(value),
            }
        })
        .transpose()?;
    let ty = declared.or_else(|| default.as_ref().and_then(Type::of_default));
    let validations = items
        .blocks("validation")
        .into_iter()
        .map(|b| validation_block(&name, b, source))
        .collect::<Result<_>>()?;
    Ok(Variable {
        description: source.opt_string(&items, "description")?,
        sensitive: source.opt_bool(&items, "sensitive")?.unwrap_or(false),
        name,
        line,
        ty,
        default,
        validations,
    })
}

fn validation_block(name: &str, block: &Block, source: &Source) -> Result<Validation> {
    let what = format!("validation block of variable {name:?}");
    source.no_labels(&what, block)?;
    let line = source.line(block.span());
    let items = source.items(&what, &block.body, &["condition", "error_message"], &[])?;
    let (Some(condition), Some(message)) = (items.attr("condition"), items.attr("error_message"))
    else {
        return Err(declaration(format!(
            "the {what} at line {line} must set both condition and error_message"
        )));
    };
    let error_message = source.string(&what, message)?;
    if error_message.trim().is_empty() {
        return Err(declaration(format!(
            "the error_message of the {what} at line {line} is empty; it is what the user reads when the value is refused"
        )));
    }
    let only = BTreeSet::from([name.to_string()]);
    let none = BTreeSet::new();
    let mut expr = condition.value.clone();
    let mut refs = Refs::new(source, &only, &none);
    refs.check(&mut expr);
    if refs.error.is_some() || !refs.vars_used.contains(name) {
        return Err(declaration(format!(
            "the condition of the {what} at line {} must refer to var.{name} and to no other variable or local value",
            source.line(condition.span())
        )));
    }
    Ok(Validation {
        condition: expr,
        error_message,
        line,
    })
}

/// The value of every variable, by the precedence of the module's doc.
pub fn assign(vars: &[Variable], inputs: &Inputs) -> Result<Vec<Option<Assigned>>> {
    let mut values: Vec<Option<Assigned>> = vars
        .iter()
        .map(|v| {
            v.default.clone().map(|value| Assigned {
                value,
                origin: Origin::Default,
            })
        })
        .collect();
    let find = |name: &str| vars.iter().position(|v| v.name == name);
    let checked = |v: &Variable,
                   origin: &Origin,
                   value: std::result::Result<Value, String>|
     -> Result<Value> {
        value.map_err(|reason| {
            Error::Value {
                name: v.name.clone(),
                origin: origin.clone(),
                reason: if v.sensitive {
                    "not compatible with its type (the value is sensitive and not shown)"
                        .to_string()
                } else {
                    reason
                },
            }
            .into()
        })
    };
    for (name, text) in &inputs.env {
        // The environment holds much else; only declared names are taken, as Nomad does.
        let Some(i) = find(name) else { continue };
        let origin = Origin::Env(name.clone());
        let value = checked(&vars[i], &origin, from_text(text, vars[i].ty.as_ref()))?;
        values[i] = Some(Assigned { value, origin });
    }
    for file in &inputs.var_files {
        for (name, value) in var_file(file)? {
            let origin = Origin::File(file.name.clone());
            let Some(i) = find(&name) else {
                return Err(Error::Undeclared { name, origin }.into());
            };
            let converted = match &vars[i].ty {
                Some(ty) => ty.convert(value),
                None => Ok(value),
            };
            let value = checked(&vars[i], &origin, converted)?;
            values[i] = Some(Assigned { value, origin });
        }
    }
    for (name, text) in &inputs.args {
        let Some(i) = find(name) else {
            return Err(Error::Undeclared {
                name: name.clone(),
                origin: Origin::Arg,
            }
            .into());
        };
        let value = checked(&vars[i], &Origin::Arg, from_text(text, vars[i].ty.as_ref()))?;
        values[i] = Some(Assigned {
            value,
            origin: Origin::Arg,
        });
    }
    let unset: Vec<(String, usize)> = vars
        .iter()
        .zip(&values)
        .filter(|(_, a)| a.is_none())
        .map(|(v, _)| (v.name.clone(), v.line))
        .collect();
    if !unset.is_empty() {
        return Err(Error::Unset(unset).into());
    }
    Ok(values)
}

/// The assignments of a -var-file (or of `Variables`): HCL `name = value` lines, or a JSON
/// object when the text starts with `{`, as Nomad reads them.
pub fn var_file(file: &VarFile) -> Result<Vec<(String, Value)>> {
    let fail = |reason: String| -> crate::hcl::Error {
        Error::VarFile {
            name: file.name.clone(),
            reason,
        }
        .into()
    };
    if file.text.trim_start().starts_with('{') {
        let object: Map<String, Value> = serde_json::from_str(&file.text)
            .map_err(|e| fail(format!("not a JSON object of variable values: {e}")))?;
        return Ok(object.into_iter().collect());
    }
    let body: Body = hcl::edit::parser::parse_body(&file.text).map_err(|e| {
        let at = e.location();
        fail(format!(
            "HCL syntax error at line {}, column {}: {}",
            at.line(),
            at.column(),
            e.message()
        ))
    })?;
    let source = Source::as_written(&file.text);
    let mut out = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let line = source.line(attr.span());
                let value = constant(&attr.value).map_err(|e| {
                    fail(format!(
                        "the value of {:?} at line {line}: {e}",
                        attr.key.as_str()
                    ))
                })?;
                out.push((attr.key.as_str().to_string(), value));
            }
            Structure::Block(block) => {
                let line = source.line(block.span());
                let reason = if block.ident.as_str() == "variable" {
                    "a variable block declares a variable, which belongs in the jobspec; here set its value with name = value".to_string()
                } else {
                    format!(
                        "unexpected block {:?}; only name = value lines belong here",
                        block.ident.as_str()
                    )
                };
                return Err(fail(format!("{reason} (line {line})")));
            }
        }
    }
    Ok(out)
}

/// Runs every variable's validations on its value; `ctx` has the functions.
pub fn validate(vars: &[Variable], values: &[Option<Assigned>], ctx: &Context) -> Result<()> {
    for (v, assigned) in vars.iter().zip(values) {
        let Some(assigned) = assigned else { continue };
        if v.validations.is_empty() {
            continue;
        }
        let mut ctx = ctx.clone();
        let mut object = Map::new();
        object.insert(v.name.clone(), assigned.value.clone());
        ctx.declare_var(VAR, Value::Object(object));
        for rule in &v.validations {
            let result = evaluate(&rule.condition, &ctx).map_err(|e| {
                declaration(format!(
                    "the condition of the validation of variable {:?} at line {} does not evaluate: {e}",
                    v.name, rule.line
                ))
            })?;
            match result {
                Value::Bool(true) => {}
                Value::Bool(false) => {
                    return Err(Error::Validation {
                        name: v.name.clone(),
                        origin: assigned.origin.clone(),
                        message: rule.error_message.clone(),
                        line: rule.line,
                    }
                    .into())
                }
                other => {
                    return Err(declaration(format!(
                        "the condition of the validation of variable {:?} at line {} must be true or false, not {}",
                        v.name,
                        rule.line,
                        super::types::kind(&other)
                    )))
                }
            }
        }
    }
    Ok(())
}
