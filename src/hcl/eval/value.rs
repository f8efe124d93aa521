//! Between the syntax tree and values: which expressions are already literals, evaluating one
//! expression with hcl-rs, a value written back as a literal expression, and a value given as
//! text on a command line.

use hcl::edit::expr::{Expression, ObjectKey, TraversalOperator};
use hcl::edit::template::{Element, Template};
use hcl::eval::{Context, ErrorKind, Evaluate};
use hcl::Value;

use super::elements::Sets;
use super::lazy;
use super::refs::{LOCAL, VAR};
use super::types::Type;
use crate::hcl::funcs;

/// Whether `expr` has nothing for the language to evaluate: values as written (strings,
/// numbers, bools, null, lists and objects of them), where a string's interpolations only name
/// what the agent interpolates when the task starts (`"${NOMAD_TASK_DIR}/x"`,
/// `"${ node.unique.id }"`). The walker reads such an expression as it is, `${...}` as written.
pub fn is_static(expr: &Expression) -> bool {
    is_static_in(expr, &[])
}

/// [`is_static`] where `bound` are names of the language too (the iterators of `dynamic` blocks).
pub fn is_static_in(expr: &Expression, bound: &[String]) -> bool {
    let template_is_static = |t: &Template| {
        t.iter().all(|e| match e {
            Element::Literal(_) => true,
            Element::Interpolation(i) => is_runtime_name(&i.expr, bound),
            Element::Directive(_) => false,
        })
    };
    match expr {
        Expression::Null(_)
        | Expression::Bool(_)
        | Expression::Number(_)
        | Expression::String(_) => true,
        Expression::Array(items) => items.iter().all(|e| is_static_in(e, bound)),
        Expression::Object(object) => object.iter().all(|(k, v)| {
            let key = match k {
                ObjectKey::Ident(_) => true,
                ObjectKey::Expression(e) => is_static_in(e, bound),
            };
            key && is_static_in(v.expr(), bound)
        }),
        Expression::StringTemplate(t) => t.iter().all(|e| match e {
            Element::Literal(_) => true,
            Element::Interpolation(i) => is_runtime_name(&i.expr, bound),
            Element::Directive(_) => false,
        }),
        Expression::HeredocTemplate(h) => template_is_static(&h.template),
        _ => false,
    }
}

/// A name outside the language (`NOMAD_TASK_DIR`, `attr.kernel.name`, `env["HOME"]`), read
/// with nothing but attribute names and literal indexes.
fn is_runtime_name(expr: &Expression, bound: &[String]) -> bool {
    let outside = |name: &str| name != VAR && name != LOCAL && !bound.iter().any(|b| b == name);
    match expr {
        Expression::Variable(v) => outside(v.as_str()),
        Expression::Traversal(t) => {
            matches!(&t.expr, Expression::Variable(v) if outside(v.as_str()))
                && t.operators.iter().all(|op| match op.value() {
                    TraversalOperator::GetAttr(_) | TraversalOperator::LegacyIndex(_) => true,
                    TraversalOperator::Index(e) => is_static(e),
                    _ => false,
                })
        }
        _ => false,
    }
}

/// Evaluates `expr`; the error is hcl-rs's reason, without the expression it quotes (the caller
/// names the attribute and line instead).
/// `try`, `can` and `convert` are evaluated first ([`lazy`]).
pub fn evaluate(expr: &Expression, ctx: &Context) -> Result<Value, String> {
    evaluate_in(expr, ctx, &Sets::default())
}

/// [`evaluate`] where `sets` are the names whose values are sets (a `for` over one binds each
/// element as its key, [`super::elements`]).
pub fn evaluate_in(expr: &Expression, ctx: &Context, sets: &Sets) -> Result<Value, String> {
    let expr = if lazy::needed(expr, sets) {
        let mut expr = expr.clone();
        lazy::resolve(&mut expr, ctx, sets)?;
        hcl::Expression::from(expr)
    } else {
        hcl::Expression::from(expr.clone())
    };
    expr.evaluate(ctx).map_err(|e| reason(e.kind()))
}

fn reason(kind: &ErrorKind) -> String {
    let text = match kind {
        ErrorKind::UndefinedFunc(name) => format!(
            "call to unknown function {:?} (docs/jobspec.md lists the functions a jobspec can call)",
            name.to_string()
        ),
        ErrorKind::FuncCall(name, msg) => format!("{name}(): {msg}"),
        other => other.to_string(),
    };
    // A reason may quote a value, which may be a secret `rsadecrypt` handled.
    let text = funcs::rsa::redact(text);
    // Some reasons span lines (a regex's syntax error draws a caret under the pattern); the API
    // answers an error with one line.
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `value` as the literal expression the walker reads.
pub fn to_expr(value: Value) -> Expression {
    Expression::from(hcl::Expression::from(value))
}

/// A value given as text (`-var name=text`, `NOMAD_VAR_name=text`), read as Nomad reads it: the
/// text itself for a string, number or untyped variable, else an HCL expression (`["a", "b"]`,
/// `{ a = 1 }`, `true`), then converted to the variable's type.
pub fn from_text(text: &str, ty: Option<&Type>) -> Result<Value, String> {
    let value = if Type::takes_text(ty) {
        Value::String(text.to_string())
    } else {
        let expr = hcl::edit::parser::parse_expr(text)
            .map_err(|e| format!("{text:?} is not an HCL value: {}", e.message()))?;
        constant(&expr)?
    };
    match ty {
        Some(ty) => ty.convert(value),
        None => Ok(value),
    }
}

/// Evaluates an expression that may not refer to anything (a value in a -var-file, in
/// `Variables`, on a command line): no variables, no functions, as in Nomad.
pub fn constant(expr: &Expression) -> Result<Value, String> {
    evaluate(expr, &Context::new()).map_err(|e| match e.strip_prefix("undefined variable ") {
        Some(name) => format!("a value here cannot refer to {name}; quote text: \"...\""),
        None => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Expression {
        hcl::edit::parser::parse_expr(s).unwrap()
    }

    #[test]
    fn values_and_runtime_names_are_left_to_the_walker() {
        for s in [
            "1",
            "\"a\"",
            "[1, \"b\", { c = true }]",
            "null",
            "\"$${x}\"",
            "<<EOF\nx ${NOMAD_ALLOC_DIR}\nEOF",
            "\"${NOMAD_TASK_DIR}/${ attr.kernel.name }${env[\"HOME\"]}\"",
        ] {
            assert!(is_static(&parse(s)), "{s}");
        }
        for s in [
            "-var.n",
            "\"${var.x}\"",
            "\"${local.x}\"",
            "\"${upper(x)}\"",
            "\"%{ if true }x%{ endif }\"",
            "var.x",
            "upper(\"a\")",
            "[1, x]",
            "{ (k) = 1 }",
            "1 + 1",
        ] {
            assert!(!is_static(&parse(s)), "{s}");
        }
    }

    #[test]
    fn text_values_follow_the_type() {
        assert_eq!(from_text("8080", None), Ok(Value::from("8080")));
        assert_eq!(
            from_text("8080", Some(&Type::Number)),
            Ok(Value::from(8080))
        );
        assert_eq!(
            from_text("web", Some(&Type::Number)),
            Err("a number is required, not \"web\"".into())
        );
        assert_eq!(
            from_text("[a, b]", Some(&Type::String)),
            Ok(Value::from("[a, b]"))
        );
        let list = Type::List(Box::new(Type::String));
        assert_eq!(
            from_text("[\"a\", 1]", Some(&list)),
            Ok(Value::Array(vec![Value::from("a"), Value::from("1")]))
        );
        assert!(from_text("[a]", Some(&list))
            .unwrap_err()
            .contains("cannot refer to `a`"));
        assert!(from_text("[", Some(&list))
            .unwrap_err()
            .contains("is not an HCL value"));
        assert_eq!(from_text("true", Some(&Type::Bool)), Ok(Value::Bool(true)));
    }

    #[test]
    fn values_become_literal_expressions() {
        let v = evaluate(&parse("{ a = [1, \"${\"$\"}{x}\"] }"), &Context::new()).unwrap();
        let expr = to_expr(v);
        assert!(is_static(&expr));
        let Expression::Object(o) = &expr else {
            panic!()
        };
        let (_, items) = o.iter().next().unwrap();
        let Expression::Array(items) = items.expr() else {
            panic!()
        };
        let Some(Expression::String(s)) = items.get(1) else {
            panic!()
        };
        assert_eq!(s.value(), "${x}");
    }
}
