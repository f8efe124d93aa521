//! What a `for` expression and a `dynamic` block go over: the `(key, value)` pairs of a
//! collection, as cty iterates them (HCL's `ElementIterator`): a list's index and element, a
//! map's key and element in the keys' lexical order, and a set's element as both key and value.
//!
//! A value here does not say that it is a set: hcl-rs has lists, and a set is a list of distinct
//! elements once evaluated. So whether a collection is a set is read from the expression that
//! makes it ([`Sets::made_by`]): a call of a function that returns a set, `convert(x, set(T))`, a
//! variable of a `set(T)` type, or a local value whose own expression makes a set.

use std::collections::BTreeSet;

use hcl::edit::expr::{Expression, TraversalOperator};
use hcl::Value;

use super::refs::{LOCAL, VAR};
use super::types::{kind, Type};

/// The functions whose result is always a set, as cty's and go-cty-funcs' are (`setproduct` is
/// one only over sets). A name nodeward does not define fails as an unknown function anyway.
const SET_FUNCS: [&str; 5] = [
    "toset",
    "setunion",
    "setintersection",
    "setsubtract",
    "fileset",
];

/// The names whose values are sets.
#[derive(Debug, Clone, Default)]
pub struct Sets {
    /// Variables declared with a `set(T)` type.
    pub vars: BTreeSet<String>,
    /// Local values whose expression makes a set.
    pub locals: BTreeSet<String>,
}

impl Sets {
    /// Whether `expr` evaluates to a set, as the module says.
    pub fn made_by(&self, expr: &Expression) -> bool {
        match expr {
            Expression::Parenthesis(inner) => self.made_by(inner.inner()),
            Expression::FuncCall(call) if call.name.namespace.is_empty() => {
                let name = call.name.name.as_str();
                let args: Vec<&Expression> = call.args.iter().collect();
                match (name, args.as_slice()) {
                    ("convert", [_, ty]) => matches!(
                        Type::parse(&hcl::Expression::from((*ty).clone())),
                        Ok(Type::Set(_))
                    ),
                    ("setproduct", args) => {
                        !args.is_empty() && args.iter().all(|a| self.made_by(a))
                    }
                    (name, _) => SET_FUNCS.contains(&name),
                }
            }
            Expression::Traversal(t) => {
                let [op] = t.operators.as_slice() else {
                    return false;
                };
                let TraversalOperator::GetAttr(name) = op.value() else {
                    return false;
                };
                match &t.expr {
                    Expression::Variable(v) if v.as_str() == VAR => {
                        self.vars.contains(name.as_str())
                    }
                    Expression::Variable(v) if v.as_str() == LOCAL => {
                        self.locals.contains(name.as_str())
                    }
                    _ => false,
                }
            }
            Expression::Conditional(c) => self.made_by(&c.true_expr) && self.made_by(&c.false_expr),
            _ => false,
        }
    }
}

/// The `(key, value)` pairs of `collection`, a set's when `set`; or the kind of value it is
/// when it is not a collection (`a string`), for the caller's message.
pub fn elements(collection: Value, set: bool) -> Result<Vec<(Value, Value)>, &'static str> {
    match collection {
        Value::Array(items) if set => Ok(items.into_iter().map(|v| (v.clone(), v)).collect()),
        Value::Array(items) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (Value::from(i), v))
            .collect()),
        Value::Object(entries) => {
            let mut entries: Vec<(String, Value)> = entries.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(entries
                .into_iter()
                .map(|(k, v)| (Value::String(k), v))
                .collect())
        }
        other => Err(kind(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcl::Map;

    fn parse(s: &str) -> Expression {
        hcl::edit::parser::parse_expr(s).unwrap()
    }

    fn sets() -> Sets {
        Sets {
            vars: ["dcs".to_string()].into(),
            locals: ["names".to_string()].into(),
        }
    }

    #[test]
    fn sets_are_read_from_the_expression_that_makes_them() {
        for s in [
            "setunion([1], [2])",
            "setintersection(var.a, var.b)",
            "fileset(\".\", \"*.txt\")",
            "convert([1, 1], set(number))",
            "setproduct(var.dcs, local.names)",
            "var.dcs",
            "local.names",
            "(var.dcs)",
            "var.on ? var.dcs : setunion([], [])",
        ] {
            assert!(sets().made_by(&parse(s)), "{s}");
        }
        for s in [
            "[1, 2]",
            "var.ports",
            "local.other",
            "var.dcs[0]",
            "var.cfg.dcs",
            "convert([1], list(number))",
            "setproduct(var.dcs, [1])",
            "distinct(var.dcs)",
            "var.on ? var.dcs : [1]",
        ] {
            assert!(!sets().made_by(&parse(s)), "{s}");
        }
    }

    #[test]
    fn a_sets_element_is_its_own_key() {
        let list = Value::from(vec!["a", "b"]);
        assert_eq!(
            elements(list.clone(), false),
            Ok(vec![(0.into(), "a".into()), (1.into(), "b".into())])
        );
        assert_eq!(
            elements(list, true),
            Ok(vec![("a".into(), "a".into()), ("b".into(), "b".into())])
        );
        let map: Map<String, Value> = [("z".to_string(), 1.into()), ("a".to_string(), 2.into())]
            .into_iter()
            .collect();
        assert_eq!(
            elements(Value::Object(map), true),
            Ok(vec![("a".into(), 2.into()), ("z".into(), 1.into())])
        );
        assert_eq!(elements(Value::from("x"), false), Err("a string"));
        assert_eq!(elements(Value::Null, true), Err("null"));
    }
}
