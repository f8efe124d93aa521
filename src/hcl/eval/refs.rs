//! The names an expression refers to, checked before hcl-rs evaluates it.
//!
//! [`Refs`] walks one expression of the syntax tree and, in place:
//! - leaves `var.<name>` and `local.<name>` alone, noting each name, and records a reference to a
//!   variable or local value the jobspec does not declare (an error with its line);
//! - replaces a reference to any other name inside a string template (`"${attr.kernel.name}"`,
//!   `"${NOMAD_TASK_DIR}/x"`, `"${meta.team}"`) by a string of its own `${...}` text, so that it
//!   evaluates to what was written and the agent interpolates it when the task starts, as
//!   Nomad's jobspec2 does (its `UnknownVariable` hook);
//! - records an unknown name outside a template (`user = root`, a missing pair of quotes) as an
//!   error, since there it cannot stand for text interpolated later;
//! - keeps track of the names a `for` expression or `%{ for }` directive binds, which are known
//!   inside it.

use std::collections::BTreeSet;

use hcl::edit::expr::{Expression, ForExpr, Traversal, TraversalOperator};
use hcl::edit::template::{
    Directive, Element, ForTemplateExpr, HeredocTemplate, StringTemplate, Template,
};
use hcl::edit::visit_mut::{self, VisitMut};
use hcl::edit::{Decorated, Span};

use crate::hcl::Source;

/// The namespaces of the language: `var.<name>` and `local.<name>`.
pub const VAR: &str = "var";
pub const LOCAL: &str = "local";

/// A reference the expression cannot have, with the line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRef {
    pub line: usize,
    pub reason: String,
}

pub struct Refs<'a> {
    source: &'a Source,
    /// Declared variables and local values.
    vars: &'a BTreeSet<String>,
    locals: &'a BTreeSet<String>,
    /// Names bound by the `for` expressions and directives around the current node.
    bound: Vec<String>,
    /// How many string templates the current node is inside.
    in_template: usize,
    /// How many `try(...)` or `can(...)` calls the current node is an argument of: there a bad
    /// reference is not an error of the jobspec but of that argument's evaluation, which `try`
    /// passes over and `can` answers `false` for, as in Nomad's HCL.
    in_try: usize,
    /// The `local.<name>`s referred to (the order in which locals are evaluated).
    pub locals_used: BTreeSet<String>,
    /// The `var.<name>`s referred to (what a validation condition may use).
    pub vars_used: BTreeSet<String>,
    /// The first bad reference, in the order written.
    pub error: Option<BadRef>,
}

impl<'a> Refs<'a> {
    pub fn new(
        source: &'a Source,
        vars: &'a BTreeSet<String>,
        locals: &'a BTreeSet<String>,
    ) -> Refs<'a> {
        Refs {
            source,
            vars,
            locals,
            bound: Vec::new(),
            in_template: 0,
            in_try: 0,
            locals_used: BTreeSet::new(),
            vars_used: BTreeSet::new(),
            error: None,
        }
    }

    /// Makes `names` known, as names bound around the expression (the iterators of the
    /// `dynamic` blocks it is in).
    pub fn bind(&mut self, names: &[String]) {
        self.bound.extend(names.iter().cloned());
    }

    /// Walks `expr`, changing it as the module says; the findings are in the fields.
    pub fn check(&mut self, expr: &mut Expression) {
        self.visit_expr_mut(expr);
    }

    fn fail(&mut self, span: Option<std::ops::Range<usize>>, reason: String) {
        if self.error.is_none() && self.in_try == 0 {
            self.error = Some(BadRef {
                line: self.source.line(span),
                reason,
            });
        }
    }

    /// A reference to the namespace `ns` with the attribute `name` (`var.x`); `None` for `var`
    /// alone or `var[...]`, which hcl-rs evaluates (to the whole object).
    fn namespaced(&mut self, ns: &str, name: Option<&str>, span: Option<std::ops::Range<usize>>) {
        let Some(name) = name else { return };
        let (declared, used, what) = if ns == VAR {
            (self.vars, &mut self.vars_used, "input variable")
        } else {
            (self.locals, &mut self.locals_used, "local value")
        };
        if declared.contains(name) {
            used.insert(name.to_string());
        } else {
            let kind = if ns == VAR { "variable" } else { "locals" };
            self.fail(
                span,
                format!(
                    "reference to undeclared {what} {name:?} ({ns}.{name}): the jobspec has no {kind} block that defines it"
                ),
            );
        }
    }

    /// `expr` is a reference to a name the language does not know: its `${...}` text inside a
    /// template, an error outside one.
    fn unknown(&mut self, expr: &mut Expression, root: &str) {
        let span = expr.span();
        if self.in_template == 0 {
            self.fail(
                span,
                format!(
                    "unknown name {root:?}: outside a string only var.<name>, local.<name> and names bound by a for expression are known (quote text: \"{root}\")"
                ),
            );
            return;
        }
        let text = self
            .source
            .raw(span)
            .map(str::to_string)
            .unwrap_or_else(|| expr.to_string());
        *expr = Expression::String(Decorated::new(format!("${{{}}}", text.trim())));
    }
}

/// The name of a plain variable expression.
fn root_name(expr: &Expression) -> Option<&str> {
    match expr {
        Expression::Variable(v) => Some(v.as_str()),
        _ => None,
    }
}

/// The first attribute a traversal reads (`x` of `var.x`).
fn first_attr(traversal: &Traversal) -> Option<&str> {
    match traversal.operators.first().map(|op| op.value()) {
        Some(TraversalOperator::GetAttr(ident)) => Some(ident.as_str()),
        _ => None,
    }
}

impl VisitMut for Refs<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expression) {
        match expr {
            Expression::Variable(v) => {
                let name = v.as_str().to_string();
                if self.bound.contains(&name) || name == VAR || name == LOCAL {
                    return;
                }
                self.unknown(expr, &name);
            }
            Expression::Traversal(traversal) => {
                let Some(root) = root_name(&traversal.expr).map(str::to_string) else {
                    return visit_mut::visit_expr_mut(self, expr);
                };
                if self.bound.contains(&root) {
                    return visit_mut::visit_expr_mut(self, expr);
                }
                if root == VAR || root == LOCAL {
                    let attr = first_attr(traversal).map(str::to_string);
                    let span = traversal.span();
                    self.namespaced(&root, attr.as_deref(), span);
                    return visit_mut::visit_expr_mut(self, expr);
                }
                self.unknown(expr, &root);
            }
            Expression::FuncCall(call)
                if call.name.namespace.is_empty()
                    && matches!(call.name.name.as_str(), "try" | "can") =>
            {
                self.in_try += 1;
                visit_mut::visit_expr_mut(self, expr);
                self.in_try -= 1;
            }
            // convert()'s second argument is a type (`list(string)`), not a value.
            Expression::FuncCall(call)
                if call.name.namespace.is_empty()
                    && call.name.name.as_str() == "convert"
                    && call.args.len() == 2 =>
            {
                if let Some(value) = call.args.get_mut(0) {
                    self.visit_expr_mut(value);
                }
            }
            _ => visit_mut::visit_expr_mut(self, expr),
        }
    }

    fn visit_for_expr_mut(&mut self, node: &mut ForExpr) {
        // The collection is outside the names the `for` binds.
        self.visit_expr_mut(&mut node.intro.collection_expr);
        let before = self.bound.len();
        if let Some(key) = &node.intro.key_var {
            self.bound.push(key.as_str().to_string());
        }
        self.bound.push(node.intro.value_var.as_str().to_string());
        if let Some(key_expr) = &mut node.key_expr {
            self.visit_expr_mut(key_expr);
        }
        self.visit_expr_mut(&mut node.value_expr);
        if let Some(cond) = &mut node.cond {
            self.visit_expr_mut(&mut cond.expr);
        }
        self.bound.truncate(before);
    }

    fn visit_string_template_mut(&mut self, node: &mut StringTemplate) {
        self.in_template += 1;
        for element in node.iter_mut() {
            self.visit_element_mut(element);
        }
        self.in_template -= 1;
    }

    fn visit_heredoc_template_mut(&mut self, node: &mut HeredocTemplate) {
        self.in_template += 1;
        self.visit_template_mut(&mut node.template);
        self.in_template -= 1;
    }

    fn visit_element_mut(&mut self, node: &mut Element) {
        match node {
            Element::Literal(_) => {}
            Element::Interpolation(interp) => self.visit_expr_mut(&mut interp.expr),
            Element::Directive(directive) => match directive.as_mut() {
                Directive::If(d) => {
                    self.visit_expr_mut(&mut d.if_expr.cond_expr);
                    self.visit_template_mut(&mut d.if_expr.template);
                    if let Some(else_expr) = &mut d.else_expr {
                        self.visit_template_mut(&mut else_expr.template);
                    }
                }
                Directive::For(d) => self.visit_for_template_expr_mut(&mut d.for_expr),
            },
        }
    }

    // hcl-edit's own walk of a `%{ for }` skips its collection expression.
    fn visit_for_template_expr_mut(&mut self, node: &mut ForTemplateExpr) {
        self.visit_expr_mut(&mut node.collection_expr);
        let before = self.bound.len();
        if let Some(key) = &node.key_var {
            self.bound.push(key.as_str().to_string());
        }
        self.bound.push(node.value_var.as_str().to_string());
        self.visit_template_mut(&mut node.template);
        self.bound.truncate(before);
    }

    fn visit_template_mut(&mut self, node: &mut Template) {
        for element in node.iter_mut() {
            self.visit_element_mut(element);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(src: &str, vars: &[&str], locals: &[&str]) -> (String, Refs<'static>) {
        let source: &'static Source = Box::leak(Box::new(Source::as_written(src)));
        let vars: &'static BTreeSet<String> =
            Box::leak(Box::new(vars.iter().map(|s| s.to_string()).collect()));
        let locals: &'static BTreeSet<String> =
            Box::leak(Box::new(locals.iter().map(|s| s.to_string()).collect()));
        let mut expr = hcl::edit::parser::parse_expr(src).unwrap();
        let mut refs = Refs::new(source, vars, locals);
        refs.check(&mut expr);
        (hcl::Expression::from(expr).to_string(), refs)
    }

    #[test]
    fn unknown_names_in_templates_become_their_text() {
        let (out, refs) = check(
            "\"${attr.kernel.name}-${ NOMAD_TASK_DIR }-${env[\"HOME\"]}-${var.a}-${local.b}\"",
            &["a"],
            &["b"],
        );
        assert_eq!(refs.error, None);
        assert_eq!(
            out,
            r#""${ "$${attr.kernel.name}" }-${ "$${NOMAD_TASK_DIR}" }-${ "$${env[\"HOME\"]}" }-${var.a}-${local.b}""#
        );
        assert_eq!(refs.vars_used, BTreeSet::from(["a".to_string()]));
        assert_eq!(refs.locals_used, BTreeSet::from(["b".to_string()]));
    }

    #[test]
    fn undeclared_and_unknown_names_are_errors_with_their_line() {
        let (_, refs) = check("[\n  var.a,\n  var.nope\n]", &["a"], &[]);
        let e = refs.error.unwrap();
        assert_eq!(e.line, 3);
        assert!(
            e.reason
                .starts_with("reference to undeclared input variable \"nope\" (var.nope)"),
            "{}",
            e.reason
        );
        let (_, refs) = check("\"${local.x}\"", &[], &[]);
        assert!(refs.error.unwrap().reason.contains("local value \"x\""));
        let (_, refs) = check("root", &[], &[]);
        assert!(refs
            .error
            .unwrap()
            .reason
            .starts_with("unknown name \"root\""));
    }

    #[test]
    fn names_bound_by_for_are_known_inside_it_only() {
        let (_, refs) = check("[for s in var.l : upper(s)]", &["l"], &[]);
        assert_eq!(refs.error, None);
        let (_, refs) = check("[for s in s : s]", &[], &[]);
        assert!(refs.error.is_some());
        let (out, refs) = check(
            "\"%{ for k, v in var.m }${k}=${v} ${node.class}%{ endfor }\"",
            &["m"],
            &[],
        );
        assert_eq!(refs.error, None);
        assert!(out.contains("$${node.class}"), "{out}");
    }
}
