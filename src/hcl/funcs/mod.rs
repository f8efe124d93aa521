//! Nomad's HCL2 functions that do not reach the network, for [`super::eval`]: strings
//! ([`text`]), numbers ([`number`]), collections ([`collection`]), encodings ([`encoding`],
//! [`yaml`]),
//! dates and times ([`time`]), hashes and UUIDs ([`crypto`]), RSA decryption ([`rsa`]), IP
//! networks ([`cidr`]) and files
//! ([`file`], [`fileset`]). `try`, `can` and `convert` need their arguments unevaluated and are
//! the evaluator's own ([`super::eval`]). Each follows
//! the behaviour of the function of the same name in Nomad's jobspec2 (go-cty's standard library
//! and go-cty-funcs); docs/jobspec.md lists them.
//!
//! hcl-rs calls a function through a plain `fn` pointer, so what a function needs from outside
//! (the directory `file()` reads from, the clock of `timestamp()`) is set for the duration of one
//! evaluation by [`with_env`], in a thread-local of the evaluating thread. One evaluation runs on
//! one thread (the HCL parser's), so the setting cannot leak into another parse.
//!
//! Arguments are checked here, not by hcl-rs's parameter types, because cty converts a number or
//! bool where a string is wanted (`upper(5)` is `"5"`), and because the messages can then name
//! what was wrong.

pub mod cidr;
pub mod collection;
pub mod crypto;
pub mod encoding;
pub mod file;
pub mod fileset;
pub mod number;
pub mod rsa;
pub mod text;
pub mod time;
pub mod yaml;

use std::cell::RefCell;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use hcl::eval::{Context, FuncArgs, FuncDef, ParamType};
use hcl::{Number, Value};

use super::eval::types::{kind, parse_number};

/// What `file()` and its kin may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Files {
    /// Files relative to this directory (the jobspec's), as Nomad's CLI resolves them.
    Dir(PathBuf),
    /// No file may be read; the reason is the error of every file function.
    Disabled(String),
}

impl Default for Files {
    fn default() -> Self {
        Files::Disabled("filesystem functions are disabled here".into())
    }
}

/// What the functions of one evaluation see of the world.
#[derive(Debug, Clone)]
pub struct FuncEnv {
    pub files: Files,
    /// `timestamp()`: one instant for the whole jobspec, so that two calls agree.
    pub now: DateTime<Utc>,
}

thread_local! {
    static ENV: RefCell<Option<FuncEnv>> = const { RefCell::new(None) };
}

/// Runs `f` with `env` as the functions' environment on this thread.
pub fn with_env<T>(env: FuncEnv, f: impl FnOnce() -> T) -> T {
    /// Clears the environment however `f` ends, a panic included.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ENV.with(|e| e.borrow_mut().take());
        }
    }
    ENV.with(|e| *e.borrow_mut() = Some(env));
    let _reset = Reset;
    f()
}

/// The environment set by [`with_env`]; a default one (no files, the current time) outside it.
pub(crate) fn env() -> FuncEnv {
    ENV.with(|e| e.borrow().clone()).unwrap_or_else(|| FuncEnv {
        files: Files::default(),
        now: Utc::now(),
    })
}

/// A context with every function declared.
pub fn context() -> Context<'static> {
    let mut ctx = Context::new();
    for (name, def) in all() {
        ctx.declare_func(name, def);
    }
    ctx
}

/// Every function, by name.
pub fn all() -> Vec<(&'static str, FuncDef)> {
    let mut all = Vec::new();
    all.extend(text::funcs());
    all.extend(number::funcs());
    all.extend(collection::funcs());
    all.extend(encoding::funcs());
    all.extend(yaml::funcs());
    all.extend(time::funcs());
    all.extend(crypto::funcs());
    all.extend(rsa::funcs());
    all.extend(file::funcs());
    all.extend(fileset::funcs());
    all.extend(cidr::funcs());
    all
}

/// A function of exactly `n` arguments of any type.
pub(crate) fn fixed(n: usize, f: hcl::eval::Func) -> FuncDef {
    FuncDef::new(f, std::iter::repeat_n(ParamType::Any, n))
}

/// A function of `n` arguments and any number more.
pub(crate) fn variadic(n: usize, f: hcl::eval::Func) -> FuncDef {
    FuncDef::builder()
        .params(std::iter::repeat_n(ParamType::Any, n))
        .variadic_param(ParamType::Any)
        .build(f)
}

/// Argument `i` as text: a string, or a number or bool as its text (cty's conversion).
pub(crate) fn string(args: &FuncArgs, i: usize) -> Result<String, String> {
    as_string(&args[i]).ok_or_else(|| {
        format!(
            "argument {} must be a string, not {}",
            i + 1,
            kind(&args[i])
        )
    })
}

pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Argument `i` as a number: a number, or a string that spells one.
pub(crate) fn num(args: &FuncArgs, i: usize) -> Result<Number, String> {
    as_number(&args[i]).ok_or_else(|| {
        format!(
            "argument {} must be a number, not {}",
            i + 1,
            kind(&args[i])
        )
    })
}

pub(crate) fn as_number(v: &Value) -> Option<Number> {
    match v {
        Value::Number(n) => Some(*n),
        Value::String(s) => parse_number(s),
        _ => None,
    }
}

/// Argument `i` as a whole number.
pub(crate) fn int(args: &FuncArgs, i: usize) -> Result<i64, String> {
    let n = num(args, i)?;
    n.as_i64()
        .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .ok_or_else(|| format!("argument {} must be a whole number, not {n}", i + 1))
}

/// Argument `i` as a list (a tuple or a set, as cty has them, are lists here).
pub(crate) fn list(args: &FuncArgs, i: usize) -> Result<&Vec<Value>, String> {
    args[i]
        .as_array()
        .ok_or_else(|| format!("argument {} must be a list, not {}", i + 1, kind(&args[i])))
}

/// Argument `i` as a map or object.
pub(crate) fn map(args: &FuncArgs, i: usize) -> Result<&hcl::Map<String, Value>, String> {
    args[i].as_object().ok_or_else(|| {
        format!(
            "argument {} must be a map or object, not {}",
            i + 1,
            kind(&args[i])
        )
    })
}

/// A float result as a number (an integral float becomes an integer).
pub(crate) fn float(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("the result ({f}) is not a finite number"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hcl::eval::Evaluate;

    /// Evaluates `src` with every function declared.
    pub(crate) fn eval(src: &str) -> Result<Value, String> {
        let expr: hcl::Expression = hcl::edit::parser::parse_expr(src)
            .map_err(|e| e.to_string())?
            .into();
        expr.evaluate(&context()).map_err(|e| e.kind().to_string())
    }

    /// Evaluates `src` and the HCL of the value it should give, and compares them.
    #[track_caller]
    pub(crate) fn same(src: &str, expected: &str) {
        assert_eq!(eval(src), eval(expected), "{src}");
    }

    #[track_caller]
    pub(crate) fn fails(src: &str, needle: &str) {
        let e = eval(src).expect_err(src);
        assert!(e.contains(needle), "{src}: {e}");
    }

    #[test]
    fn every_function_has_one_definition() {
        let names: Vec<_> = all().into_iter().map(|(n, _)| n).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(names.len(), unique.len());
    }

    #[test]
    fn arguments_are_converted_as_cty_converts_them() {
        same("upper(5)", "\"5\"");
        same("abs(\"-3\")", "3");
        fails("upper([])", "argument 1 must be a string, not a list");
        fails("upper()", "expected 1 positional arguments, got 0");
    }
}
