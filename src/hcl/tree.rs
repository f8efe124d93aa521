//! A block body read as plain data, for schemas that are a driver's own (the docker driver's
//! `config`): attributes become JSON values, nested blocks become arrays of objects (a block may
//! be repeated, as `mount`), so that HCL and JSON jobspecs feed one typed reader. Values are read
//! literally, as [`super::value`] reads them: `"${NOMAD_TASK_DIR}"` stays that text.

use hcl::edit::expr::{Expression, ObjectKey};
use hcl::edit::structure::{Body, Structure};
use hcl::edit::Span;
use serde_json::{Map, Number, Value};

use super::error::invalid;
use super::{Error, Source};

impl Source {
    /// The attributes and blocks of `body` as a JSON object; `what` names the body in messages.
    /// `allowed` lists the attribute and block names the body may hold: anything else is an error
    /// naming it and its line.
    pub fn body_value(
        &self,
        what: &str,
        body: &Body,
        allowed: &[&str],
    ) -> Result<Map<String, Value>, Error> {
        let mut out = Map::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let key = attr.key.as_str();
                    if !allowed.is_empty() && !allowed.contains(&key) {
                        return Err(Error::Unknown(format!(
                            "unknown attribute {key:?} in {what} at line {}",
                            self.line(attr.span())
                        )));
                    }
                    let value = self.expr_value(what, key, &attr.value, attr.span())?;
                    out.insert(key.to_string(), value);
                }
                Structure::Block(block) => {
                    let ident = block.ident.as_str();
                    if !allowed.is_empty() && !allowed.contains(&ident) {
                        return Err(Error::Unknown(format!(
                            "unknown block {ident:?} in {what} at line {}",
                            self.line(block.span())
                        )));
                    }
                    self.no_labels(what, block)?;
                    let inner =
                        self.body_value(&format!("{ident} block of {what}"), &block.body, &[])?;
                    match out
                        .entry(ident.to_string())
                        .or_insert_with(|| Value::Array(Vec::new()))
                    {
                        Value::Array(items) => items.push(Value::Object(inner)),
                        _ => {
                            return Err(invalid(format!(
                                "{ident:?} in {what} at line {} is both an attribute and a block",
                                self.line(block.span())
                            )))
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The value of `attr` in `what`, read as [`Source::body_value`] reads attributes.
    pub fn attr_value(
        &self,
        what: &str,
        attr: &hcl::edit::structure::Attribute,
    ) -> Result<Value, Error> {
        self.expr_value(what, attr.key.as_str(), &attr.value, attr.span())
    }

    fn expr_value(
        &self,
        what: &str,
        key: &str,
        expr: &Expression,
        span: Option<std::ops::Range<usize>>,
    ) -> Result<Value, Error> {
        let unsupported = || {
            invalid(format!(
                "attribute {key:?} in {what} at line {} must be a literal value (a string, number, bool, list or object)",
                self.line(span.clone())
            ))
        };
        Ok(match expr {
            Expression::Null(_) => Value::Null,
            Expression::Bool(b) => Value::Bool(*b.value()),
            Expression::Number(n) => {
                let n = n.value();
                let number = if let Some(u) = n.as_u64() {
                    Number::from(u)
                } else if let Some(i) = n.as_i64() {
                    Number::from(i)
                } else {
                    n.as_f64()
                        .and_then(Number::from_f64)
                        .ok_or_else(unsupported)?
                };
                Value::Number(number)
            }
            Expression::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.expr_value(what, key, item, span.clone()))
                    .collect::<Result<_, _>>()?,
            ),
            Expression::Object(object) => {
                let mut map = Map::new();
                for (k, v) in object.iter() {
                    let name = match k {
                        ObjectKey::Ident(ident) => ident.as_str().to_string(),
                        ObjectKey::Expression(e) => match self.text(e) {
                            Some(text) => text?,
                            None => return Err(unsupported()),
                        },
                    };
                    map.insert(name, self.expr_value(what, key, v.expr(), span.clone())?);
                }
                Value::Object(map)
            }
            Expression::Parenthesis(inner) => self.expr_value(what, key, inner.inner(), span)?,
            other => match self.text(other) {
                Some(text) => Value::String(text?),
                None => return Err(unsupported()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(src: &str, allowed: &[&str]) -> Result<Value, Error> {
        crate::hcl::read(src, |doc| {
            doc.source
                .body_value("config block of task \"t\"", &doc.body, allowed)
                .map(Value::Object)
        })
    }

    #[test]
    fn attributes_and_blocks_become_data() {
        let v = read(
            "image = \"busybox:1\"\nargs = [\"-p\", 8001, true]\nshm_size = 64\nports = []\n\
             labels { a = \"b\" }\nmount {\n type = \"tmpfs\"\n target = \"/t\"\n tmpfs_options { size = 100 }\n}\n\
             mount {\n type = \"bind\"\n}\nsysctl = { \"net.core.somaxconn\" = \"16\" }\ndir = \"${NOMAD_TASK_DIR}/x\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "image": "busybox:1",
                "args": ["-p", 8001, true],
                "shm_size": 64,
                "ports": [],
                "labels": [{"a": "b"}],
                "mount": [
                    {"type": "tmpfs", "target": "/t", "tmpfs_options": [{"size": 100}]},
                    {"type": "bind"}
                ],
                "sysctl": {"net.core.somaxconn": "16"},
                "dir": "${NOMAD_TASK_DIR}/x",
            })
        );
    }

    #[test]
    fn unknown_names_and_expressions_are_refused_with_their_line() {
        let e = read("image = \"x\"\nbogus = 1\n", &["image"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown attribute \"bogus\" in config block of task \"t\" at line 2"
        );
        let e = read("image = \"x\"\nmount {}\n", &["image"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown block \"mount\" in config block of task \"t\" at line 2"
        );
        let e = read("image = 1 + 2\n", &[]).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "attribute \"image\" in config block of task \"t\" at line 1 must be a literal value"
            ),
            "{e}"
        );
    }
}
