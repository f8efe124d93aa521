//! Attribute values read literally, never evaluated: strings keep `${...}` as written (a
//! jobspec's `"${NOMAD_TASK_DIR}"` only has a value when the task starts), numbers and booleans are
//! what they say, durations are Go's syntax ([`crate::util::duration`]). A value of the wrong type is
//! an error naming the attribute, where it is, its line and what was expected.

use std::collections::BTreeMap;
use std::time::Duration;

use hcl::edit::expr::{Expression, ObjectKey};
use hcl::edit::structure::{Attribute, Block, Structure};
use hcl::edit::template::{Element, Template};
use hcl::edit::Span;

use super::error::invalid;
use super::{Error, Items, Source};
use crate::util::duration;

impl Source {
    /// `attr` in `what` is not `expected` ("a string", "true or false").
    pub fn wrong_type(&self, what: &str, attr: &Attribute, expected: &str) -> Error {
        invalid(format!(
            "attribute {:?} in {what} at line {} must be {expected}",
            attr.key.as_str(),
            self.line(attr.span())
        ))
    }

    /// The literal text of a string, with `${...}` kept as written. `None` when `expr` is not a
    /// string; `Some(Err)` for a template directive (`%{if}`), which nodeward does not evaluate.
    pub fn text(&self, expr: &Expression) -> Option<Result<String, Error>> {
        match expr {
            Expression::String(s) => Some(Ok(s.value().clone())),
            Expression::StringTemplate(t) => Some(self.template_text(t)),
            Expression::HeredocTemplate(h) => Some(self.template_text(&h.template)),
            _ => None,
        }
    }

    fn template_text(&self, template: &Template) -> Result<String, Error> {
        let mut out = String::new();
        for element in template.iter() {
            match element {
                Element::Literal(literal) => out.push_str(literal.as_str()),
                Element::Interpolation(interp) => match self.raw(interp.span()) {
                    Some(raw) => out.push_str(raw),
                    None => out.push_str(&format!("${{{}}}", interp.expr)),
                },
                Element::Directive(d) => {
                    return Err(invalid(format!(
                        "template directives (%{{...}}) are not supported (line {})",
                        self.line(d.span())
                    )))
                }
            }
        }
        Ok(out)
    }

    /// An attribute whose value is a map of scalars, as `env = { PORT = 8080, "a.b" = "c" }` or
    /// what `merge(local.env, {...})` evaluated to: each value a string, number or bool, taken
    /// as its text.
    pub fn scalar_map(
        &self,
        what: &str,
        attr: &Attribute,
    ) -> Result<BTreeMap<String, String>, Error> {
        let expected = "a map of strings, numbers or bools";
        let expr = match &attr.value {
            Expression::Parenthesis(inner) => inner.inner(),
            other => other,
        };
        let Expression::Object(object) = expr else {
            return Err(self.wrong_type(what, attr, expected));
        };
        let mut out = BTreeMap::new();
        for (k, v) in object.iter() {
            let key = match k {
                ObjectKey::Ident(ident) => ident.as_str().to_string(),
                ObjectKey::Expression(e) => self
                    .text(e)
                    .ok_or_else(|| self.wrong_type(what, attr, expected))??,
            };
            let value = self
                .scalar_text(v.expr())
                .ok_or_else(|| self.wrong_type(what, attr, expected))??;
            out.insert(key, value);
        }
        Ok(out)
    }

    /// The block `ident` of `items` or its attribute form (`env { }` or `env = { }`, as Nomad
    /// takes both): its attributes, each a string, number or bool taken as its text; both forms
    /// at once is an error, and so is a block inside the block.
    pub fn scalar_block_or_map(
        &self,
        items: &Items,
        ident: &str,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        match (self.single(items, ident)?, items.attr(ident)) {
            (Some(b), Some(a)) => Err(invalid(format!(
                "{ident:?} is given both as a block (line {}) and as an attribute (line {}) in {}",
                self.line(b.span()),
                self.line(a.span()),
                items.what
            ))),
            (Some(b), None) => {
                let what = format!("{ident} block of {}", items.what);
                self.scalar_block(&what, b).map(Some)
            }
            (None, Some(a)) => {
                let what = format!("{ident} of {}", items.what);
                self.scalar_map(&what, a).map(Some)
            }
            (None, None) => Ok(None),
        }
    }

    /// Every attribute of `block` (`env { PORT = 8080 }`), a string, number or bool taken as its
    /// text, as Nomad takes it.
    fn scalar_block(&self, what: &str, block: &Block) -> Result<BTreeMap<String, String>, Error> {
        let mut out = BTreeMap::new();
        for structure in block.body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let value = self
                        .scalar_text(&attr.value)
                        .ok_or_else(|| self.wrong_type(what, attr, "a string, number or bool"))??;
                    out.insert(attr.key.to_string(), value);
                }
                Structure::Block(b) => {
                    return Err(Error::Unknown(format!(
                        "unknown block {:?} in {what} at line {}",
                        b.ident.as_str(),
                        self.line(b.span())
                    )))
                }
            }
        }
        Ok(out)
    }

    /// A string, or a number or bool as its text (`PORT = 8080` is `"8080"`, as Nomad reads it).
    pub fn scalar_text(&self, expr: &Expression) -> Option<Result<String, Error>> {
        match expr {
            Expression::Number(n) => Some(Ok(n.value().to_string())),
            Expression::Bool(b) => Some(Ok(b.value().to_string())),
            other => self.text(other),
        }
    }

    pub fn string(&self, what: &str, attr: &Attribute) -> Result<String, Error> {
        self.text(&attr.value)
            .ok_or_else(|| self.wrong_type(what, attr, "a string"))?
    }

    /// A list whose items are strings, numbers or bools, each as its text.
    pub fn strings(&self, what: &str, attr: &Attribute) -> Result<Vec<String>, Error> {
        let Expression::Array(array) = &attr.value else {
            return Err(self.wrong_type(what, attr, "a list of strings"));
        };
        array
            .iter()
            .map(|item| {
                self.scalar_text(item)
                    .ok_or_else(|| self.wrong_type(what, attr, "a list of strings"))?
            })
            .collect()
    }

    pub fn u32(&self, what: &str, attr: &Attribute) -> Result<u32, Error> {
        let expected = "a whole number from 0 to 4294967295";
        match &attr.value {
            Expression::Number(n) => n
                .value()
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| self.wrong_type(what, attr, expected)),
            // HCL2 converts a string to the number an attribute wants, as Nomad's decoder does:
            // Nomad's own jobspecs write `cpu = "500"`.
            Expression::String(s) => s
                .value()
                .parse::<u32>()
                .map_err(|_| self.wrong_type(what, attr, expected)),
            _ => Err(self.wrong_type(what, attr, expected)),
        }
    }

    pub fn bool(&self, what: &str, attr: &Attribute) -> Result<bool, Error> {
        match &attr.value {
            Expression::Bool(b) => Ok(*b.value()),
            // HCL2's string to bool conversion takes exactly these two.
            Expression::String(s) if s.value() == "true" => Ok(true),
            Expression::String(s) if s.value() == "false" => Ok(false),
            _ => Err(self.wrong_type(what, attr, "true or false")),
        }
    }

    /// A duration string such as `"15s"` or `"1h30m"`.
    pub fn duration(&self, what: &str, attr: &Attribute) -> Result<Duration, Error> {
        let text = self
            .text(&attr.value)
            .ok_or_else(|| self.wrong_type(what, attr, "a duration string such as \"15s\""))??;
        duration::parse(&text).map_err(|e| {
            invalid(format!(
                "invalid duration for {:?} in {what} at line {}: {e}",
                attr.key.as_str(),
                self.line(attr.span())
            ))
        })
    }

    /// [`Source::string`] of the attribute `key` of `items`, if it is there.
    pub fn opt_string(&self, items: &Items, key: &str) -> Result<Option<String>, Error> {
        items
            .attr(key)
            .map(|a| self.string(&items.what, a))
            .transpose()
    }

    /// [`Source::u32`] of the attribute `key` of `items`, if it is there.
    pub fn opt_u32(&self, items: &Items, key: &str) -> Result<Option<u32>, Error> {
        items
            .attr(key)
            .map(|a| self.u32(&items.what, a))
            .transpose()
    }

    /// [`Source::bool`] of the attribute `key` of `items`, if it is there.
    pub fn opt_bool(&self, items: &Items, key: &str) -> Result<Option<bool>, Error> {
        items
            .attr(key)
            .map(|a| self.bool(&items.what, a))
            .transpose()
    }

    /// [`Source::duration`] of the attribute `key` of `items`, if it is there.
    pub fn opt_duration(&self, items: &Items, key: &str) -> Result<Option<Duration>, Error> {
        items
            .attr(key)
            .map(|a| self.duration(&items.what, a))
            .transpose()
    }
}
