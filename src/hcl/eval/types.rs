//! A variable's `type`: the type constraint language of HCL (`string`, `number`, `bool`, `any`,
//! `list(T)`, `set(T)`, `map(T)`, `object({ name = T, opt = optional(T) })`, `tuple([T, ...])`),
//! and the conversion of a value to it, with the conversions Nomad's (cty's) allows: a number or
//! bool to its text, a string that spells a number or bool to that, element by element into
//! collections. Pure functions; no evaluation happens here.

use std::fmt;

use hcl::expr::{Expression, ObjectKey};
use hcl::{Map, Number, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Any,
    String,
    Number,
    Bool,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(Vec<ObjectAttr>),
    Tuple(Vec<Type>),
}

/// One attribute of an `object({...})` type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectAttr {
    pub name: String,
    pub ty: Type,
    /// `optional(T)`: a value may leave it out (it is then null).
    pub optional: bool,
}

const EXPECTED: &str =
    "a type is string, number, bool, any, list(T), set(T), map(T), object({...}) or tuple([...])";

impl Type {
    /// Reads a type constraint written as an expression (`list(string)`).
    pub fn parse(expr: &Expression) -> Result<Type, String> {
        match expr {
            Expression::Variable(v) => match v.as_str() {
                "string" => Ok(Type::String),
                "number" => Ok(Type::Number),
                "bool" => Ok(Type::Bool),
                "any" => Ok(Type::Any),
                other => Err(format!("{other:?} is not a type: {EXPECTED}")),
            },
            Expression::FuncCall(call) if call.name.namespace.is_empty() => {
                let name = call.name.name.as_str();
                let [arg] = call.args.as_slice() else {
                    return Err(format!("{name}(...) takes exactly one argument"));
                };
                match name {
                    "list" => Ok(Type::List(Box::new(Type::parse(arg)?))),
                    "set" => Ok(Type::Set(Box::new(Type::parse(arg)?))),
                    "map" => Ok(Type::Map(Box::new(Type::parse(arg)?))),
                    "object" => object_type(arg),
                    "tuple" => match arg {
                        Expression::Array(items) => Ok(Type::Tuple(
                            items.iter().map(Type::parse).collect::<Result<_, _>>()?,
                        )),
                        _ => {
                            Err("tuple(...) takes a list of types: tuple([string, number])".into())
                        }
                    },
                    "optional" => Err(
                        "optional(...) is only allowed for an attribute of object({...})".into(),
                    ),
                    other => Err(format!("{other}(...) is not a type: {EXPECTED}")),
                }
            }
            Expression::Parenthesis(inner) => Type::parse(inner),
            other => Err(format!("`{other}` is not a type: {EXPECTED}")),
        }
    }

    /// The type of a default value, for a variable that declares none (as Nomad: `default = 3`
    /// makes `-var n=4` a number). Lists and objects take any value of their kind.
    pub fn of_default(value: &Value) -> Option<Type> {
        match value {
            Value::String(_) => Some(Type::String),
            Value::Number(_) => Some(Type::Number),
            Value::Bool(_) => Some(Type::Bool),
            Value::Null | Value::Array(_) | Value::Object(_) => None,
        }
    }

    /// Whether a value given as text (`-var`, `NOMAD_VAR_`) is that text itself rather than an
    /// HCL expression, as in Nomad: for string and number variables, and those with no type.
    pub fn takes_text(ty: Option<&Type>) -> bool {
        matches!(ty, None | Some(Type::String) | Some(Type::Number))
    }

    /// `value` converted to this type, or why it cannot be.
    pub fn convert(&self, value: Value) -> Result<Value, String> {
        match (self, value) {
            (_, Value::Null) => Ok(Value::Null),
            (Type::Any, v) => Ok(v),
            (Type::String, Value::String(s)) => Ok(Value::String(s)),
            (Type::String, Value::Number(n)) => Ok(Value::String(n.to_string())),
            (Type::String, Value::Bool(b)) => Ok(Value::String(b.to_string())),
            (Type::Number, Value::Number(n)) => Ok(Value::Number(n)),
            (Type::Number, Value::String(s)) => parse_number(&s)
                .map(Value::Number)
                .ok_or_else(|| format!("a number is required, not {s:?}")),
            (Type::Bool, Value::Bool(b)) => Ok(Value::Bool(b)),
            (Type::Bool, Value::String(s)) if s == "true" || s == "false" => {
                Ok(Value::Bool(s == "true"))
            }
            (Type::List(elem), Value::Array(items)) => convert_items(elem, items).map(Value::Array),
            (Type::Set(elem), Value::Array(items)) => {
                Ok(Value::Array(set_of(convert_items(elem, items)?)))
            }
            (Type::Map(elem), Value::Object(entries)) => {
                let mut out = Map::new();
                for (key, v) in entries {
                    let v = elem
                        .convert(v)
                        .map_err(|e| format!("element {key:?}: {e}"))?;
                    out.insert(key, v);
                }
                Ok(Value::Object(out))
            }
            (Type::Object(attrs), Value::Object(mut entries)) => {
                let mut out = Map::new();
                for attr in attrs {
                    match entries.swap_remove(&attr.name) {
                        Some(v) => {
                            let v = attr
                                .ty
                                .convert(v)
                                .map_err(|e| format!("attribute {:?}: {e}", attr.name))?;
                            out.insert(attr.name.clone(), v);
                        }
                        None if attr.optional => {
                            out.insert(attr.name.clone(), Value::Null);
                        }
                        None => return Err(format!("attribute {:?} is required", attr.name)),
                    }
                }
                Ok(Value::Object(out))
            }
            (Type::Tuple(types), Value::Array(items)) => {
                if types.len() != items.len() {
                    return Err(format!(
                        "a tuple of {} elements is required, not {}",
                        types.len(),
                        items.len()
                    ));
                }
                types
                    .iter()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (t, v))| t.convert(v).map_err(|e| format!("element {i}: {e}")))
                    .collect::<Result<_, _>>()
                    .map(Value::Array)
            }
            (ty, v) => Err(format!("{} is required, not {}", ty.article(), kind(&v))),
        }
    }

    fn article(&self) -> String {
        match self {
            Type::Any => "a value".into(),
            Type::String => "a string".into(),
            Type::Number => "a number".into(),
            Type::Bool => "a bool".into(),
            Type::Object(_) => "an object".into(),
            other => format!("a {other}"),
        }
    }
}

/// Written the way a type constraint is: `list(map(string))`.
impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Any => f.write_str("any"),
            Type::String => f.write_str("string"),
            Type::Number => f.write_str("number"),
            Type::Bool => f.write_str("bool"),
            Type::List(t) => write!(f, "list({t})"),
            Type::Set(t) => write!(f, "set({t})"),
            Type::Map(t) => write!(f, "map({t})"),
            Type::Object(attrs) => {
                f.write_str("object({")?;
                for (i, a) in attrs.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    if a.optional {
                        write!(f, "{sep}{} = optional({})", a.name, a.ty)?;
                    } else {
                        write!(f, "{sep}{} = {}", a.name, a.ty)?;
                    }
                }
                f.write_str("})")
            }
            Type::Tuple(types) => {
                f.write_str("tuple([")?;
                for (i, t) in types.iter().enumerate() {
                    write!(f, "{}{t}", if i == 0 { "" } else { ", " })?;
                }
                f.write_str("])")
            }
        }
    }
}

fn object_type(arg: &Expression) -> Result<Type, String> {
    let Expression::Object(object) = arg else {
        return Err("object(...) takes an object of types: object({ name = string })".into());
    };
    let mut attrs = Vec::new();
    for (key, value) in object {
        let name = match key {
            ObjectKey::Identifier(ident) => ident.to_string(),
            ObjectKey::Expression(Expression::String(s)) => s.clone(),
            other => {
                return Err(format!(
                    "`{other:?}` is not an attribute name of object(...)"
                ))
            }
        };
        let (ty, optional) = match value {
            Expression::FuncCall(call)
                if call.name.namespace.is_empty() && call.name.name.as_str() == "optional" =>
            {
                match call.args.as_slice() {
                    [inner] => (Type::parse(inner)?, true),
                    _ => return Err("optional(...) takes exactly one type".into()),
                }
            }
            other => (Type::parse(other)?, false),
        };
        attrs.push(ObjectAttr { name, ty, optional });
    }
    Ok(Type::Object(attrs))
}

fn convert_items(elem: &Type, items: Vec<Value>) -> Result<Vec<Value>, String> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| elem.convert(v).map_err(|e| format!("element {i}: {e}")))
        .collect()
}

/// `items` as a set: each distinct element once, in cty's order, the one a set's elements are
/// iterated and turned into a list in (`for`, `dynamic`, an attribute's value): strings in
/// lexical (byte) order, numbers by value, `false` before `true`, nulls last. Elements of
/// other kinds (lists, objects, or kinds mixed) have no order in cty that a jobspec may rely
/// on; they keep the order they came in.
pub fn set_of(items: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    let known = |v: &Value| !v.is_null();
    let all = |f: fn(&Value) -> bool| out.iter().filter(|v| known(v)).all(f);
    if all(Value::is_string) {
        out.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    } else if all(Value::is_number) {
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        out.sort_by(|a, b| f(a).total_cmp(&f(b)));
    } else if all(Value::is_boolean) {
        out.sort_by_key(Value::as_bool);
    }
    // Stable: the nulls (at most one) go last, the rest keep the order just made.
    out.sort_by_key(Value::is_null);
    out
}

/// A number spelled as text (`"8080"`, `"-1"`, `"0.5"`), as cty reads one.
pub fn parse_number(s: &str) -> Option<Number> {
    let s = s.trim();
    if let Ok(u) = s.parse::<u64>() {
        return Some(Number::from(u));
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(Number::from(i));
    }
    // Rust's float syntax also takes "inf" and "NaN", which are not HCL numbers.
    if !s
        .bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
    {
        return None;
    }
    s.parse::<f64>().ok().and_then(Number::from_f64)
}

/// What kind of value `v` is, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(s: &str) -> Result<Type, String> {
        let expr: hcl::edit::expr::Expression = hcl::edit::parser::parse_expr(s).unwrap();
        Type::parse(&expr.into())
    }

    fn value(s: &str) -> Value {
        let expr: hcl::edit::expr::Expression = hcl::edit::parser::parse_expr(s).unwrap();
        hcl::eval::Evaluate::evaluate(&Expression::from(expr), &hcl::eval::Context::new()).unwrap()
    }

    #[test]
    fn a_set_is_in_ctys_order() {
        let strings = |v: &[&str]| Value::from(v.to_vec());
        let set = |v: Value| match v {
            Value::Array(items) => Value::Array(set_of(items)),
            _ => unreachable!(),
        };
        assert_eq!(
            set(strings(&["b", "a", "B", "b", "a1"])),
            strings(&["B", "a", "a1", "b"])
        );
        let numbers = |v: &[f64]| Value::from(v.to_vec());
        assert_eq!(
            set(numbers(&[10.0, 9.0, -1.0, 2.5, 9.0])),
            numbers(&[-1.0, 2.5, 9.0, 10.0])
        );
        assert_eq!(
            set(Value::from(vec![true, false, true])),
            Value::from(vec![false, true])
        );
        let with_null = Value::Array(vec![Value::Null, "b".into(), "a".into()]);
        let nulls_last = Value::Array(vec!["a".into(), "b".into(), Value::Null]);
        assert_eq!(set(with_null), nulls_last);
        // No order for lists: as they came, once each.
        let lists = Value::Array(vec![strings(&["2"]), strings(&["1"]), strings(&["2"])]);
        let once = Value::Array(vec![strings(&["2"]), strings(&["1"])]);
        assert_eq!(set(lists), once);
        assert_eq!(set(Value::Array(vec![])), Value::Array(vec![]));
    }

    #[test]
    fn parses_type_constraints() {
        assert_eq!(ty("string").unwrap(), Type::String);
        assert_eq!(
            ty("list(map(number))").unwrap(),
            Type::List(Box::new(Type::Map(Box::new(Type::Number))))
        );
        let object = ty("object({ name = string, port = optional(number) })").unwrap();
        assert_eq!(
            object.to_string(),
            "object({name = string, port = optional(number)})"
        );
        assert_eq!(
            ty("tuple([string, bool])").unwrap().to_string(),
            "tuple([string, bool])"
        );
        assert!(ty("strin")
            .unwrap_err()
            .starts_with("\"strin\" is not a type"));
        assert!(ty("list(string, number)").is_err());
        assert!(ty("\"string\"").is_err());
        assert!(ty("optional(string)").is_err());
    }

    #[test]
    fn converts_as_cty_does() {
        assert_eq!(Type::String.convert(value("8080")), Ok(Value::from("8080")));
        assert_eq!(Type::String.convert(value("true")), Ok(Value::from("true")));
        assert_eq!(
            Type::Number.convert(value("\"8080\"")),
            Ok(Value::from(8080))
        );
        assert_eq!(Type::Number.convert(value("\"-1.5\"")), Ok(value("-1.5")));
        assert_eq!(
            Type::Number.convert(value("\"eighty\"")),
            Err("a number is required, not \"eighty\"".into())
        );
        assert_eq!(
            Type::Number.convert(value("\"inf\"")),
            Err("a number is required, not \"inf\"".into())
        );
        assert_eq!(
            Type::Bool.convert(value("\"false\"")),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            Type::Bool.convert(value("1")),
            Err("a bool is required, not a number".into())
        );
        assert_eq!(
            ty("list(number)").unwrap().convert(value("[1, \"2\"]")),
            Ok(value("[1, 2]"))
        );
        assert_eq!(
            ty("list(number)").unwrap().convert(value("[1, \"x\"]")),
            Err("element 1: a number is required, not \"x\"".into())
        );
        assert_eq!(
            ty("set(string)")
                .unwrap()
                .convert(value("[\"a\", \"b\", \"a\"]")),
            Ok(value("[\"a\", \"b\"]"))
        );
        assert_eq!(
            ty("map(string)").unwrap().convert(value("{ a = 1 }")),
            Ok(value("{ a = \"1\" }"))
        );
        let object = ty("object({ name = string, port = optional(number) })").unwrap();
        assert_eq!(
            object.convert(value("{ name = \"web\", extra = true }")),
            Ok(value("{ name = \"web\", port = null }"))
        );
        assert_eq!(
            object.convert(value("{ port = 1 }")),
            Err("attribute \"name\" is required".into())
        );
        assert_eq!(
            ty("tuple([string, number])")
                .unwrap()
                .convert(value("[\"a\"]")),
            Err("a tuple of 2 elements is required, not 1".into())
        );
        assert_eq!(
            ty("list(string)").unwrap().convert(value("\"a\"")),
            Err("a list(string) is required, not a string".into())
        );
        assert_eq!(Type::Any.convert(value("[1]")), Ok(value("[1]")));
        assert_eq!(Type::String.convert(Value::Null), Ok(Value::Null));
    }
}
