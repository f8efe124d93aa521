//! The functions hcl-rs cannot call, because they need their arguments unevaluated: `try`
//! (the first argument that evaluates without an error), `can` (whether its argument does) and
//! `convert` (whose second argument is a type, `list(string)`, not a value), as Nomad's jobspec2
//! has them (HCL's `tryfunc` and `typeexpr` extensions).
//!
//! [`resolve`] replaces each call of one of them in an expression by the literal it evaluates
//! to, before hcl-rs evaluates the rest. A call inside a `for` expression may refer to the names
//! the `for` binds, so a `for` expression that holds one is evaluated here, element by element;
//! of a conditional that holds one only the branch its condition chooses is. A `%{ for }`
//! template directive cannot hold one (a `for` expression can).
//!
//! A `for` expression with a key over a set is evaluated here too, since hcl-rs would make the
//! keys the indexes of the list the set is here, where HCL makes each the element
//! ([`super::elements`]).

use hcl::edit::expr::{Expression, ForExpr, FuncCall};
use hcl::edit::template::ForTemplateExpr;
use hcl::edit::visit::{self, Visit};
use hcl::edit::visit_mut::{self, VisitMut};
use hcl::eval::Context;
use hcl::{Map, Value};

use super::elements::{elements, Sets};
use super::types::{kind, Type};
use super::value::{evaluate_in as evaluate, to_expr};
use crate::hcl::funcs::as_string;

/// The names of the functions evaluated here.
const LAZY: [&str; 3] = ["try", "can", "convert"];

/// Whether `call` is one of the functions evaluated here.
pub fn is_lazy(call: &FuncCall) -> bool {
    call.name.namespace.is_empty() && LAZY.contains(&call.name.name.as_str())
}

/// Whether `expr` calls one of the functions evaluated here, or has a `for` expression that
/// binds the keys of one of `sets`.
pub fn needed(expr: &Expression, sets: &Sets) -> bool {
    let mut find = Find { sets, found: false };
    find.visit_expr(expr);
    find.found
}

/// Finds what [`needed`] looks for.
struct Find<'a> {
    sets: &'a Sets,
    found: bool,
}

impl Visit for Find<'_> {
    fn visit_func_call(&mut self, node: &FuncCall) {
        self.found |= is_lazy(node);
        visit::visit_func_call(self, node);
    }

    fn visit_for_expr(&mut self, node: &ForExpr) {
        self.found |=
            node.intro.key_var.is_some() && self.sets.made_by(&node.intro.collection_expr);
        visit::visit_for_expr(self, node);
    }

    // hcl-edit's own walk of a `%{ for }` skips its collection expression.
    fn visit_for_template_expr(&mut self, node: &ForTemplateExpr) {
        self.visit_expr(&node.collection_expr);
        visit::visit_for_template_expr(self, node);
    }
}

/// Replaces the calls of `expr` to the functions evaluated here by their values, as the module
/// says.
pub fn resolve(expr: &mut Expression, ctx: &Context, sets: &Sets) -> Result<(), String> {
    let mut resolver = Resolver {
        ctx,
        sets,
        error: None,
    };
    resolver.visit_expr_mut(expr);
    resolver.error.map_or(Ok(()), Err)
}

struct Resolver<'a, 'c> {
    ctx: &'a Context<'c>,
    sets: &'a Sets,
    error: Option<String>,
}

impl Resolver<'_, '_> {
    /// The value of an expression this replaces entirely.
    fn value(&self, expr: &Expression) -> Result<Option<Value>, String> {
        match expr {
            Expression::FuncCall(call) if is_lazy(call) => {
                call_lazy(call, self.ctx, self.sets).map(Some)
            }
            Expression::ForExpr(f) => for_expr(f, self.ctx, self.sets).map(Some),
            Expression::Conditional(c) => {
                let chosen = match evaluate(&c.cond_expr, self.ctx, self.sets)? {
                    Value::Bool(true) => &c.true_expr,
                    Value::Bool(false) => &c.false_expr,
                    other => {
                        return Err(format!(
                            "the condition of a conditional must be a bool, not {}",
                            kind(&other)
                        ))
                    }
                };
                evaluate(chosen, self.ctx, self.sets).map(Some)
            }
            _ => Ok(None),
        }
    }
}

impl VisitMut for Resolver<'_, '_> {
    fn visit_expr_mut(&mut self, expr: &mut Expression) {
        if self.error.is_some() || !needed(expr, self.sets) {
            return;
        }
        match self.value(expr) {
            Ok(Some(v)) => *expr = to_expr(v),
            Ok(None) => visit_mut::visit_expr_mut(self, expr),
            Err(e) => self.error = Some(e),
        }
    }

    fn visit_for_template_expr_mut(&mut self, node: &mut ForTemplateExpr) {
        self.visit_expr_mut(&mut node.collection_expr);
        // Only the functions: a `for` over a set in the template is left to hcl-rs.
        let none = Sets::default();
        let mut find = Find {
            sets: &none,
            found: false,
        };
        find.visit_template(&node.template);
        if self.error.is_none() && find.found {
            self.error = Some(
                "try(), can() and convert() cannot be used inside a %{ for } directive; a for expression, [for x in xs : ...], can hold them"
                    .into(),
            );
        }
    }
}

/// `try(...)`, `can(...)` or `convert(...)`.
fn call_lazy(call: &FuncCall, ctx: &Context, sets: &Sets) -> Result<Value, String> {
    let name = call.name.name.as_str();
    let args: Vec<&Expression> = call.args.iter().collect();
    if call.args.expand_final() {
        return Err(format!(
            "{name}(): its arguments cannot be expanded from a list with ..."
        ));
    }
    match (name, args.as_slice()) {
        ("try", []) => Err("try(): at least one argument is required".into()),
        ("try", args) => {
            let mut errors = Vec::new();
            for (i, arg) in args.iter().enumerate() {
                match evaluate(arg, ctx, sets) {
                    Ok(v) => return Ok(v),
                    Err(e) => errors.push(format!("argument {}: {e}", i + 1)),
                }
            }
            Err(format!(
                "try(): no argument evaluated without an error ({})",
                errors.join("; ")
            ))
        }
        ("can", [arg]) => Ok(Value::Bool(evaluate(arg, ctx, sets).is_ok())),
        ("can", args) => Err(format!(
            "can(): takes exactly one argument, not {}",
            args.len()
        )),
        ("convert", [value, ty]) => {
            let ty = Type::parse(&hcl::Expression::from((*ty).clone()))
                .map_err(|e| format!("convert(): argument 2 is a type: {e}"))?;
            let value = evaluate(value, ctx, sets)?;
            ty.convert(value)
                .map_err(|e| format!("convert(): cannot convert to {ty}: {e}"))
        }
        (_, args) => Err(format!(
            "{name}(): takes a value and a type, convert(var.x, list(string)), not {} arguments",
            args.len()
        )),
    }
}

/// A `for` expression, evaluated element by element in a scope of its own.
fn for_expr(f: &ForExpr, ctx: &Context, sets: &Sets) -> Result<Value, String> {
    let collection = evaluate(&f.intro.collection_expr, ctx, sets)?;
    let elements = elements(collection, sets.made_by(&f.intro.collection_expr))
        .map_err(|kind| format!("a for expression goes over a list, set or map, not {kind}"))?;
    let mut list = Vec::new();
    let mut object: Map<String, Value> = Map::new();
    let mut groups: Map<String, Vec<Value>> = Map::new();
    // One copy of the context for all the elements (a copy is deep); each rebinds the names.
    let mut scope = ctx.clone();
    for (key, value) in elements {
        if let Some(k) = &f.intro.key_var {
            scope.declare_var(k.as_str(), key);
        }
        scope.declare_var(f.intro.value_var.as_str(), value);
        if let Some(cond) = &f.cond {
            match evaluate(&cond.expr, &scope, sets)? {
                Value::Bool(true) => {}
                Value::Bool(false) => continue,
                other => {
                    return Err(format!(
                        "the condition of a for expression must be a bool, not {}",
                        kind(&other)
                    ))
                }
            }
        }
        let Some(key_expr) = &f.key_expr else {
            list.push(evaluate(&f.value_expr, &scope, sets)?);
            continue;
        };
        let k = evaluate(key_expr, &scope, sets)?;
        let k = as_string(&k).ok_or_else(|| {
            format!(
                "a key of a for expression must be a string, not {}",
                kind(&k)
            )
        })?;
        let v = evaluate(&f.value_expr, &scope, sets)?;
        if f.grouping {
            groups.entry(k).or_default().push(v);
        } else if object.contains_key(&k) {
            return Err(format!(
                "two elements of a for expression have the key {k:?}; ... after the value groups them"
            ));
        } else {
            object.insert(k, v);
        }
    }
    Ok(if f.key_expr.is_none() {
        Value::Array(list)
    } else if f.grouping {
        Value::Object(
            groups
                .into_iter()
                .map(|(k, v)| (k, Value::Array(v)))
                .collect(),
        )
    } else {
        Value::Object(object)
    })
}

#[cfg(test)]
mod tests {
    use hcl::Value;

    use super::Sets;

    /// Evaluates `src` as the jobspec's attributes are, with every function declared.
    fn eval(src: &str) -> Result<Value, String> {
        let expr = hcl::edit::parser::parse_expr(src).map_err(|e| e.to_string())?;
        super::evaluate(&expr, &crate::hcl::funcs::context(), &Sets::default())
    }

    #[track_caller]
    fn same(src: &str, expected: &str) {
        assert_eq!(eval(src), eval(expected), "{src}");
    }

    #[track_caller]
    fn fails(src: &str, needle: &str) {
        let e = eval(src).expect_err(src);
        assert!(e.contains(needle), "{src}: {e}");
    }

    #[test]
    fn try_returns_the_first_argument_that_evaluates() {
        same("try({a = 1}.b, {a = 1}.a, 3)", "1");
        same("try(parseint(\"x\", 10), 2)", "2");
        same("try(\"ok\")", "\"ok\"");
        same(
            "[for m in [{n = \"a\"}, {}] : try(m.n, \"none\")]",
            "[\"a\", \"none\"]",
        );
        same(
            "{ for k, m in {x = {n = 1}, y = {}} : k => try(m.n, 0) if k != \"z\" }",
            "{x = 1, y = 0}",
        );
        same(
            "{ for m in [1, 2, 1] : \"${m}\" => try(m * 2, 0)... }",
            "{\"1\" = [2, 2], \"2\" = [4]}",
        );
        same("true ? try([][0], \"d\") : try(nope(), 1)", "\"d\"");
        same("\"x-${try(upper([]), \"y\")}\"", "\"x-y\"");
        same("upper(try(1, 2))", "\"1\"");
        fails(
            "try([][0], upper([]))",
            "try(): no argument evaluated without an error (argument 1: ",
        );
        fails("try()", "try(): at least one argument is required");
        fails(
            "\"%{ for x in [1] }${try(x, 1)}%{ endfor }\"",
            "cannot be used inside a %{ for } directive",
        );
    }

    #[test]
    fn can_says_whether_its_argument_evaluates() {
        same("can(parseint(\"12\", 10))", "true");
        same("can(parseint(\"ab\", 10))", "false");
        same(
            "[for x in [\"1\", \"a\"] : can(parseint(x, 10))]",
            "[true, false]",
        );
        fails("can(1, 2)", "can(): takes exactly one argument, not 2");
    }

    #[test]
    fn convert_converts_to_a_type() {
        same("convert(\"5\", number)", "5");
        same("convert([1, \"2\"], list(string))", "[\"1\", \"2\"]");
        same("convert({a = 1}, map(string))", "{a = \"1\"}");
        same("convert([1, 1, 2], set(number))", "[1, 2]");
        same("convert(true, string)", "\"true\"");
        same("[for x in [\"1\"] : convert(x, number)]", "[1]");
        fails(
            "convert(\"x\", number)",
            "convert(): cannot convert to number: a number is required, not \"x\"",
        );
        fails(
            "convert(1, strng)",
            "convert(): argument 2 is a type: \"strng\" is not a type",
        );
        fails("convert(1)", "convert(): takes a value and a type");
        assert!(eval("convert([], bool)").is_err());
    }
}
