//! The last stage of [`super::evaluate`]: every attribute of the body whose value is not already
//! a literal is replaced by the literal it evaluates to, and `dynamic` blocks are expanded into
//! the blocks they describe, so that the schema's walker sees ordinary blocks and literals.
//!
//! A `dynamic "<type>" { for_each, iterator, labels, content { ... } }` block, as HCL's
//! `dynblock` extension (which Nomad's jobspec2 uses) has it, becomes one `<type>` block per
//! element of `for_each` (a list, set or map), each the `content` body with `<iterator>.key` and
//! `<iterator>.value` bound to the element's key and value ([`super::elements`]; the iterator is
//! named after the type unless `iterator` names it). The generated blocks keep the line of their `content` block, and their
//! attributes their own lines, for the walker's messages.

use std::collections::BTreeSet;

use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, BlockLabel, Body, Structure};
use hcl::edit::{Decorated, Ident, Span};
use hcl::eval::Context;
use hcl::{Map, Value};

use super::elements::{elements, Sets};
use super::refs::{Refs, LOCAL, VAR};
use super::types::kind;
use super::value::{self, is_static_in};
use super::{Error, Result};
use crate::hcl::funcs::as_string;
use crate::hcl::Source;

/// The identifier of a block that describes blocks.
const DYNAMIC: &str = "dynamic";

/// Replaces the expressions of a body by their values, block by block.
pub(super) struct Walk<'a> {
    pub source: &'a Source,
    pub vars: &'a BTreeSet<String>,
    pub locals: &'a BTreeSet<String>,
    /// Which variables and locals are sets.
    pub sets: &'a Sets,
    pub ctx: &'a Context<'a>,
    /// The iterators of the `dynamic` blocks around the body, which `ctx` declares.
    pub bound: Vec<String>,
}

impl Walk<'_> {
    /// `what` names the body in messages, the way the schema's walker does (`task "web"`,
    /// `config block of task "web"`).
    pub fn body(&self, what: &str, body: &mut Body) -> Result<()> {
        let mut i = 0;
        while i < body.len() {
            let Some(structure) = body.get_mut(i) else {
                break;
            };
            match structure {
                Structure::Block(block) if block.ident.as_str() == DYNAMIC => {
                    let made = self.dynamic(what, block)?;
                    body.remove(i);
                    let n = made.len();
                    for (j, block) in made.into_iter().enumerate() {
                        body.insert(i + j, block);
                    }
                    i += n;
                    continue;
                }
                Structure::Block(block) => {
                    let inner = block_name(what, block);
                    self.body(&inner, &mut block.body)?;
                }
                Structure::Attribute(attr) => {
                    let key = attr.key.as_str().to_string();
                    let line = self.source.line(attr.span());
                    if let Some(value) =
                        self.expression(&mut attr.value, line).map_err(|reason| {
                            Error::Expression {
                                key,
                                what: what.to_string(),
                                line,
                                reason,
                            }
                        })?
                    {
                        attr.value = value;
                    }
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// The literal `expr` evaluates to, or `None` to leave it as it is.
    /// `line` is the attribute's, for messages.
    fn expression(
        &self,
        expr: &mut Expression,
        line: usize,
    ) -> std::result::Result<Option<Expression>, String> {
        if is_static_in(expr, &self.bound) {
            return Ok(None);
        }
        // A bare name (`user = root`, quotes forgotten) is left to the walker, whose message
        // says what the attribute must be.
        if let Expression::Variable(v) = expr {
            let name = v.as_str();
            if name != VAR && name != LOCAL && !self.bound.iter().any(|b| b == name) {
                return Ok(None);
            }
        }
        self.value(expr, line).map(|v| Some(value::to_expr(v)))
    }

    /// Evaluates `expr`, checking the names it refers to first.
    fn value(&self, expr: &mut Expression, line: usize) -> std::result::Result<Value, String> {
        let mut refs = Refs::new(self.source, self.vars, self.locals);
        refs.bind(&self.bound);
        refs.check(expr);
        if let Some(bad) = refs.error {
            return Err(if bad.line == line {
                bad.reason
            } else {
                format!("{} (line {})", bad.reason, bad.line)
            });
        }
        value::evaluate_in(expr, self.ctx, self.sets)
    }

    /// The blocks a `dynamic` block describes, their bodies evaluated.
    fn dynamic(&self, what: &str, block: &Block) -> Result<Vec<Block>> {
        let line = self.source.line(block.span());
        let fail = |reason: String| -> super::super::Error { Error::Dynamic(reason).into() };
        let [label] = block.labels.as_slice() else {
            return Err(fail(format!(
                "a dynamic block in {what} at line {line} needs one label, the type of the blocks it makes: dynamic \"port\" {{ ... }}"
            )));
        };
        let ty = label.as_str().to_string();
        let name = format!("dynamic {ty:?}");
        let mut for_each = None;
        let mut iterator = ty.clone();
        let mut labels = None;
        let mut content = None;
        for structure in block.body.iter() {
            let at = self.source.line(structure.span());
            match structure {
                Structure::Attribute(attr) => match attr.key.as_str() {
                    "for_each" => for_each = Some((attr.value.clone(), at)),
                    "labels" => labels = Some((attr.value.clone(), at)),
                    "iterator" => match &attr.value {
                        Expression::Variable(v) => iterator = v.as_str().to_string(),
                        _ => {
                            return Err(fail(format!(
                                "attribute \"iterator\" in {name} at line {at}: the iterator is a name, not a string or an expression: iterator = {ty}"
                            )))
                        }
                    },
                    other => {
                        return Err(fail(format!(
                            "unknown attribute {other:?} in {name} at line {at}: a dynamic block has for_each, iterator, labels and a content block"
                        )))
                    }
                },
                Structure::Block(b) if b.ident.as_str() == "content" => {
                    if content.is_some() {
                        return Err(fail(format!(
                            "a second content block in {name} at line {at}: a dynamic block has one"
                        )));
                    }
                    self.source.no_labels(&name, b)?;
                    content = Some(b);
                }
                Structure::Block(b) => {
                    return Err(fail(format!(
                        "unknown block {:?} in {name} at line {at}: the blocks it makes are described in its content block",
                        b.ident.as_str()
                    )))
                }
            }
        }
        let Some((mut for_each, at)) = for_each else {
            return Err(fail(format!(
                "{name} in {what} at line {line} has no for_each: it needs the collection to make one block of per element"
            )));
        };
        let Some(content) = content else {
            return Err(fail(format!(
                "{name} in {what} at line {line} has no content block: it needs one to describe the body of each {ty} block"
            )));
        };
        let attr_error = |key: &str, at: usize, reason: String| -> super::super::Error {
            Error::Expression {
                key: key.to_string(),
                what: name.clone(),
                line: at,
                reason,
            }
            .into()
        };
        let collection = self
            .value(&mut for_each, at)
            .map_err(|r| attr_error("for_each", at, r))?;
        let elements = elements(collection, self.sets.made_by(&for_each)).map_err(|kind| {
            attr_error(
                "for_each",
                at,
                format!(
                    "cannot make blocks for each element of {kind}: for_each must be a list, set or map"
                ),
            )
        })?;
        let mut bound = self.bound.clone();
        bound.push(iterator.clone());
        let mut made = Vec::with_capacity(elements.len());
        // One copy of the context for all the elements (a copy is deep: every variable and
        // local); each element only rebinds the iterator.
        let mut ctx = self.ctx.clone();
        for (key, value) in elements {
            let mut it = Map::new();
            it.insert("key".to_string(), key);
            it.insert("value".to_string(), value);
            ctx.declare_var(iterator.as_str(), Value::Object(it));
            let inner = Walk {
                source: self.source,
                vars: self.vars,
                locals: self.locals,
                sets: self.sets,
                ctx: &ctx,
                bound: bound.clone(),
            };
            let mut out = content.clone();
            out.ident = Decorated::new(Ident::new(ty.as_str()));
            if let Some((labels, at)) = &labels {
                let mut labels = labels.clone();
                let values = inner
                    .value(&mut labels, *at)
                    .map_err(|r| attr_error("labels", *at, r))?;
                let Value::Array(values) = values else {
                    return Err(attr_error(
                        "labels",
                        *at,
                        format!("a list of strings is required, not {}", kind(&values)),
                    ));
                };
                out.labels = values
                    .iter()
                    .map(|v| {
                        as_string(v)
                            .map(|s| BlockLabel::String(Decorated::new(s)))
                            .ok_or_else(|| {
                                attr_error(
                                    "labels",
                                    *at,
                                    format!("a label must be a string, not {}", kind(v)),
                                )
                            })
                    })
                    .collect::<Result<_>>()?;
            }
            let inner_what = block_name(what, &out);
            inner.body(&inner_what, &mut out.body)?;
            made.push(out);
        }
        Ok(made)
    }
}

/// How messages name a block inside `what`.
fn block_name(what: &str, block: &Block) -> String {
    match block.labels.first() {
        Some(label) => format!("{} {:?}", block.ident.as_str(), label.as_str()),
        None => format!("{} block of {what}", block.ident.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use hcl::edit::structure::{Body, Structure};
    use serde_json::{Map, Value};

    use super::super::{evaluate, Inputs};
    use crate::hcl::{Document, Source};

    /// Evaluates `src` and reads the result back as data, a block under its type and labels
    /// (`"port http"`).
    fn eval(src: &str) -> Result<Value, String> {
        crate::hcl::read(src, |Document { mut body, source }| {
            evaluate(&mut body, &source, &Inputs::default())?;
            dump(&source, &body).map(Value::Object)
        })
        .map_err(|e: crate::hcl::Error| e.to_string())
    }

    fn dump(source: &Source, body: &Body) -> Result<Map<String, Value>, crate::hcl::Error> {
        let mut attrs = Body::new();
        let mut out = Map::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(a) => attrs.push(a.clone()),
                Structure::Block(b) => {
                    let mut key = b.ident.as_str().to_string();
                    for label in &b.labels {
                        key = format!("{key} {}", label.as_str());
                    }
                    let inner = Value::Object(dump(source, &b.body)?);
                    match out.entry(key).or_insert_with(|| Value::Array(Vec::new())) {
                        Value::Array(items) => items.push(inner),
                        _ => unreachable!(),
                    }
                }
            }
        }
        out.extend(source.body_value("a body", &attrs, &[])?);
        Ok(out)
    }

    #[test]
    fn a_dynamic_block_makes_one_block_per_element() {
        let src = r#"
    variable "ports" {
      default = ["http", "grpc"]
    }
    locals {
      checks = { web = "/health", api = "/ready" }
    }
    network {
      mode = "host"
      dynamic "port" {
        for_each = var.ports
        labels   = [port.value]
        content {
          to   = 8000 + port.key
          host = "${attr.unique.network.ip-address}:${port.value}"
          dir  = "${ NOMAD_TASK_DIR }"
        }
      }
    }
    dynamic "check" {
      for_each = local.checks
      iterator = c
      content {
        name = "check-${c.key}"
        path = c.value
      }
    }
    "#;
        assert_eq!(
            eval(src).unwrap(),
            json!({
                "network": [{
                    "mode": "host",
                    "port http": [{"to": 8000, "host": "${attr.unique.network.ip-address}:http", "dir": "${ NOMAD_TASK_DIR }"}],
                    "port grpc": [{"to": 8001, "host": "${attr.unique.network.ip-address}:grpc", "dir": "${ NOMAD_TASK_DIR }"}],
                }],
                "check": [
                    {"name": "check-api", "path": "/ready"},
                    {"name": "check-web", "path": "/health"},
                ],
            })
        );
    }

    #[test]
    fn dynamic_blocks_nest_and_see_the_outer_iterator() {
        let src = r#"
    locals {
      tasks = { web = ["a", "b"], db = [] }
    }
    group "g" {
      dynamic "task" {
        for_each = local.tasks
        labels   = ["${task.key}"]
        content {
          driver = "raw_exec"
          dynamic "constraint" {
            for_each = task.value
            iterator = attr
            content {
              attribute = "$${meta.${attr.value}}"
              value     = "${task.key}-${attr.key}"
            }
          }
        }
      }
      dynamic "none" {
        for_each = []
        content {
          x = 1
        }
      }
    }
    "#;
        assert_eq!(
            eval(src).unwrap(),
            json!({
                "group g": [{
                    "task db": [{"driver": "raw_exec"}],
                    "task web": [{
                        "driver": "raw_exec",
                        "constraint": [
                            {"attribute": "${meta.a}", "value": "web-0"},
                            {"attribute": "${meta.b}", "value": "web-1"},
                        ],
                    }],
                }],
            })
        );
    }

    /// As HCL iterates a set (cty's `ElementIterator`), each element is its own key: in a
    /// `dynamic` block and in a `for` expression, whether hcl-rs or the evaluator's own `for`
    /// (one holding `try`) evaluates it. A list's key stays its index.
    #[test]
    fn a_sets_elements_are_their_own_keys() {
        let src = r#"
    variable "dcs" {
      type    = set(string)
      default = ["eu", "us", "eu"]
    }
    variable "ports" {
      type    = list(string)
      default = ["a", "b"]
    }
    locals {
      both = setunion(var.dcs, ["zz"])
      from = local.both
    }
    dynamic "dc" {
      for_each = var.dcs
      labels   = [dc.key]
      content {
        value = dc.value
      }
    }
    dynamic "port" {
      for_each = var.ports
      content {
        key = port.key
      }
    }
    dynamic "local" {
      for_each = local.from
      iterator = l
      content {
        key = l.key
      }
    }
    keys     = [for k, v in var.dcs : k]
    lazy     = [for k, v in convert(["x"], set(string)) : try(k, "none")]
    object   = { for k, v in local.both : k => v }
    nested   = [for k, v in var.ports : [for s, _ in var.dcs : "${k}-${s}"]]
    list     = [for k, v in var.ports : k]
    in_local = [for k, v in ["x"] : k]
    template = "dcs: ${join(",", [for k, v in var.dcs : k])}"
    "#;
        assert_eq!(
            eval(src).unwrap(),
            json!({
                "dc eu": [{"value": "eu"}],
                "dc us": [{"value": "us"}],
                "port": [{"key": 0}, {"key": 1}],
                "local": [{"key": "eu"}, {"key": "us"}, {"key": "zz"}],
                "keys": ["eu", "us"],
                "lazy": ["x"],
                "object": {"eu": "eu", "us": "us", "zz": "zz"},
                "nested": [["0-eu", "0-us"], ["1-eu", "1-us"]],
                "list": [0, 1],
                "in_local": [0],
                "template": "dcs: eu,us",
            })
        );
    }

    #[test]
    fn dynamic_errors_name_the_line() {
        let err = |body: &str| eval(&format!("group \"g\" {{\n{body}\n}}\n")).unwrap_err();
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = \"http\"\n    content {}\n  }"),
            "attribute \"for_each\" in dynamic \"port\" at line 3: cannot make blocks for each element of a string: for_each must be a list, set or map"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = null\n    content {}\n  }"),
            "attribute \"for_each\" in dynamic \"port\" at line 3: cannot make blocks for each element of null: for_each must be a list, set or map"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = [1]\n  }"),
            "dynamic \"port\" in group \"g\" at line 2 has no content block: it needs one to describe the body of each port block"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    content {}\n  }"),
            "dynamic \"port\" in group \"g\" at line 2 has no for_each: it needs the collection to make one block of per element"
        );
        assert_eq!(
            err("  dynamic {\n    for_each = [1]\n    content {}\n  }"),
            "a dynamic block in group \"g\" at line 2 needs one label, the type of the blocks it makes: dynamic \"port\" { ... }"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = [1]\n    iterator = \"p\"\n    content {}\n  }"),
            "attribute \"iterator\" in dynamic \"port\" at line 4: the iterator is a name, not a string or an expression: iterator = port"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = [1]\n    foreach = [1]\n    content {}\n  }"),
            "unknown attribute \"foreach\" in dynamic \"port\" at line 4: a dynamic block has for_each, iterator, labels and a content block"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = [1]\n    content {\n      to = port.nope\n    }\n  }"),
            "attribute \"to\" in port block of group \"g\" at line 5: no such key: `nope`"
        );
        assert_eq!(
            err("  dynamic \"port\" {\n    for_each = var.x\n    content {}\n  }"),
            "attribute \"for_each\" in dynamic \"port\" at line 3: reference to undeclared input variable \"x\" (var.x): the jobspec has no variable block that defines it"
        );
        // The iterator is known only inside its block.
        assert!(err(
            "  dynamic \"port\" {\n    for_each = [1]\n    content {}\n  }\n  x = port.value"
        )
        .contains("unknown name \"port\""));
    }
}
