//! Collection functions: `length`, `concat`, `contains`, `index`, `element`, `slice`,
//! `chunklist`, `flatten`, `compact`, `distinct`, `reverse`, `sort`, `range`, `keys`, `values`,
//! `lookup`, `merge`, `zipmap`, `coalesce`, `coalescelist`, `setunion`, `setintersection`,
//! `setproduct`. Maps' keys come out in lexical order, as cty orders them.

use hcl::eval::{FuncArgs, FuncDef};
use hcl::{Map, Value};

use super::{as_string, fixed, float, int, list, map, num, string, variadic};
use crate::hcl::eval::types::{kind, set_of};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("length", fixed(1, length)),
        ("concat", variadic(0, concat)),
        ("contains", fixed(2, contains)),
        ("index", fixed(2, index)),
        ("element", fixed(2, element)),
        ("slice", fixed(3, slice)),
        ("chunklist", fixed(2, chunklist)),
        ("flatten", fixed(1, flatten)),
        ("compact", fixed(1, compact)),
        ("distinct", fixed(1, distinct)),
        ("reverse", fixed(1, reverse)),
        ("sort", fixed(1, sort)),
        ("range", variadic(1, range)),
        ("keys", fixed(1, keys)),
        ("values", fixed(1, values)),
        ("lookup", variadic(2, lookup)),
        ("merge", variadic(0, merge)),
        ("zipmap", fixed(2, zipmap)),
        ("coalesce", variadic(0, coalesce)),
        ("coalescelist", variadic(0, coalescelist)),
        ("setunion", variadic(0, setunion)),
        ("setintersection", variadic(1, setintersection)),
        ("setproduct", variadic(0, setproduct)),
    ]
}

fn length(args: FuncArgs) -> Result<Value, String> {
    let n = match &args[0] {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.len(),
        Value::Object(entries) => entries.len(),
        other => return Err(format!("length of {} is not defined", kind(other))),
    };
    Ok(Value::from(n as u64))
}

fn concat(args: FuncArgs) -> Result<Value, String> {
    let mut out = Vec::new();
    for i in 0..args.len() {
        out.extend(list(&args, i)?.iter().cloned());
    }
    Ok(Value::Array(out))
}

fn contains(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Bool(list(&args, 0)?.contains(&args[1])))
}

fn index(args: FuncArgs) -> Result<Value, String> {
    list(&args, 0)?
        .iter()
        .position(|v| *v == args[1])
        .map(|i| Value::from(i as u64))
        .ok_or_else(|| "the item is not in the list".to_string())
}

/// `element(list, i)`: the index wraps around the end, as in cty.
fn element(args: FuncArgs) -> Result<Value, String> {
    let items = list(&args, 0)?;
    let i = int(&args, 1)?;
    if items.is_empty() {
        return Err("cannot take an element of an empty list".into());
    }
    if i < 0 {
        return Err(format!("index {i} must not be negative"));
    }
    Ok(items[(i as usize) % items.len()].clone())
}

fn slice(args: FuncArgs) -> Result<Value, String> {
    let items = list(&args, 0)?;
    let (start, end) = (int(&args, 1)?, int(&args, 2)?);
    if start < 0 || end < start || end as usize > items.len() {
        return Err(format!(
            "slice from {start} to {end} is outside a list of {} elements",
            items.len()
        ));
    }
    Ok(Value::Array(items[start as usize..end as usize].to_vec()))
}

fn chunklist(args: FuncArgs) -> Result<Value, String> {
    let items = list(&args, 0)?;
    let size = int(&args, 1)?;
    if size < 0 {
        return Err("the chunk size must not be negative".into());
    }
    if size == 0 {
        return Ok(Value::Array(vec![Value::Array(items.clone())]));
    }
    Ok(Value::Array(
        items
            .chunks(size as usize)
            .map(|c| Value::Array(c.to_vec()))
            .collect(),
    ))
}

fn flatten(args: FuncArgs) -> Result<Value, String> {
    fn into(out: &mut Vec<Value>, items: &[Value]) {
        for item in items {
            match item {
                Value::Array(inner) => into(out, inner),
                other => out.push(other.clone()),
            }
        }
    }
    let mut out = Vec::new();
    into(&mut out, list(&args, 0)?);
    Ok(Value::Array(out))
}

/// The list without its empty strings and nulls.
fn compact(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        list(&args, 0)?
            .iter()
            .filter(|v| !matches!(v, Value::Null) && v.as_str() != Some(""))
            .cloned()
            .collect(),
    ))
}

fn dedup(items: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn distinct(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(dedup(list(&args, 0)?.iter().cloned())))
}

fn reverse(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        list(&args, 0)?.iter().rev().cloned().collect(),
    ))
}

/// Strings in lexical order (numbers and bools are sorted as their text, as cty does).
fn sort(args: FuncArgs) -> Result<Value, String> {
    let mut texts = list(&args, 0)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            as_string(v).ok_or_else(|| format!("element {i} must be a string, not {}", kind(v)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    texts.sort();
    Ok(Value::Array(texts.into_iter().map(Value::String).collect()))
}

/// `range(limit)`, `range(start, limit)`, `range(start, limit, step)`.
fn range(args: FuncArgs) -> Result<Value, String> {
    let f = |i| num(&args, i).map(|n| n.as_f64().unwrap_or_default());
    let (start, limit, step) = match args.len() {
        1 => (0.0, f(0)?, 1.0),
        2 => {
            let (s, l) = (f(0)?, f(1)?);
            (s, l, if l < s { -1.0 } else { 1.0 })
        }
        3 => (f(0)?, f(1)?, f(2)?),
        n => return Err(format!("range takes 1 to 3 arguments, not {n}")),
    };
    if step == 0.0 {
        return Err("the step must not be zero".into());
    }
    let count = ((limit - start) / step).ceil().max(0.0);
    if count > 1024.0 {
        return Err(format!("range would have {count} elements, more than 1024"));
    }
    (0..count as usize)
        .map(|i| float(start + step * i as f64))
        .collect::<Result<_, _>>()
        .map(Value::Array)
}

fn sorted(entries: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut all: Vec<_> = entries.iter().collect();
    all.sort_by(|a, b| a.0.cmp(b.0));
    all
}

fn keys(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        sorted(map(&args, 0)?)
            .into_iter()
            .map(|(k, _)| Value::String(k.clone()))
            .collect(),
    ))
}

fn values(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        sorted(map(&args, 0)?)
            .into_iter()
            .map(|(_, v)| v.clone())
            .collect(),
    ))
}

/// `lookup(map, key)` or `lookup(map, key, default)`.
fn lookup(args: FuncArgs) -> Result<Value, String> {
    let entries = map(&args, 0)?;
    let key = string(&args, 1)?;
    match (entries.get(&key), args.get(2)) {
        (Some(v), _) => Ok(v.clone()),
        (None, Some(default)) => Ok(default.clone()),
        (None, None) => Err(format!(
            "the map has no key {key:?} and no default is given"
        )),
    }
}

fn merge(args: FuncArgs) -> Result<Value, String> {
    let mut out = Map::new();
    for i in 0..args.len() {
        if args[i].is_null() {
            continue;
        }
        for (k, v) in map(&args, i)? {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

fn zipmap(args: FuncArgs) -> Result<Value, String> {
    let (names, values) = (list(&args, 0)?, list(&args, 1)?);
    if names.len() != values.len() {
        return Err(format!("{} keys but {} values", names.len(), values.len()));
    }
    let mut out = Map::new();
    for (k, v) in names.iter().zip(values) {
        let k = as_string(k).ok_or_else(|| format!("a key must be a string, not {}", kind(k)))?;
        out.insert(k, v.clone());
    }
    Ok(Value::Object(out))
}

/// The first argument that is neither null nor an empty string.
fn coalesce(args: FuncArgs) -> Result<Value, String> {
    args.iter()
        .find(|v| !v.is_null() && v.as_str() != Some(""))
        .cloned()
        .ok_or_else(|| "every argument is null or an empty string".to_string())
}

fn coalescelist(args: FuncArgs) -> Result<Value, String> {
    for i in 0..args.len() {
        if !list(&args, i)?.is_empty() {
            return Ok(args[i].clone());
        }
    }
    Err("every list is empty".into())
}

fn setunion(args: FuncArgs) -> Result<Value, String> {
    let mut all = Vec::new();
    for i in 0..args.len() {
        all.extend(list(&args, i)?.iter().cloned());
    }
    Ok(Value::Array(set_of(all)))
}

fn setintersection(args: FuncArgs) -> Result<Value, String> {
    let mut common = set_of(list(&args, 0)?.iter().cloned());
    for i in 1..args.len() {
        let other = list(&args, i)?;
        common.retain(|v| other.contains(v));
    }
    Ok(Value::Array(common))
}

fn setproduct(args: FuncArgs) -> Result<Value, String> {
    let mut rows: Vec<Vec<Value>> = vec![Vec::new()];
    for i in 0..args.len() {
        let items = dedup(list(&args, i)?.iter().cloned());
        rows = rows
            .into_iter()
            .flat_map(|row| {
                items.iter().map(move |item| {
                    let mut next = row.clone();
                    next.push(item.clone());
                    next
                })
            })
            .collect();
    }
    if args.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    Ok(Value::Array(rows.into_iter().map(Value::Array).collect()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn lists() {
        same("length([1, 2])", "2");
        same("length({ a = 1 })", "1");
        same("length(\"ünï\")", "3");
        same("concat([1], [], [2, 3])", "[1, 2, 3]");
        same("contains([\"a\", \"b\"], \"b\")", "true");
        same("index([\"a\", \"b\"], \"b\")", "1");
        same("element([\"a\", \"b\"], 3)", "\"b\"");
        fails("element([], 0)", "empty list");
        same("slice([1, 2, 3, 4], 1, 3)", "[2, 3]");
        same("chunklist([1, 2, 3], 2)", "[[1, 2], [3]]");
        same("flatten([[1, [2]], 3])", "[1, 2, 3]");
        same("compact([\"a\", \"\", null, \"b\"])", "[\"a\", \"b\"]");
        same("distinct([1, 2, 1])", "[1, 2]");
        same("reverse([1, 2])", "[2, 1]");
        same("sort([\"b\", \"a\", \"c\"])", "[\"a\", \"b\", \"c\"]");
        same("range(3)", "[0, 1, 2]");
        same("range(1, 4)", "[1, 2, 3]");
        same("range(4, 1)", "[4, 3, 2]");
        same("range(0, 1, 0.5)", "[0, 0.5]");
        fails("range(0, 1, 0)", "step must not be zero");
        same("coalesce(null, \"\", \"x\")", "\"x\"");
        same("coalescelist([], [1])", "[1]");
        same("setunion([1, 2], [2, 3])", "[1, 2, 3]");
        same("setintersection([1, 2, 3], [2, 3, 4])", "[2, 3]");
        // In cty's set order, not the arguments'.
        same(
            "setunion([\"b\", \"a\"], [\"c\", \"a\"])",
            "[\"a\", \"b\", \"c\"]",
        );
        same("setunion([10, 2], [1])", "[1, 2, 10]");
        same("setintersection([3, 2, 1], [1, 3])", "[1, 3]");
        same(
            "setproduct([\"a\", \"b\"], [1])",
            "[[\"a\", 1], [\"b\", 1]]",
        );
    }

    #[test]
    fn maps() {
        same("keys({ b = 1, a = 2 })", "[\"a\", \"b\"]");
        same("values({ b = 1, a = 2 })", "[2, 1]");
        same("lookup({ a = 1 }, \"a\")", "1");
        same("lookup({ a = 1 }, \"b\", 0)", "0");
        fails("lookup({ a = 1 }, \"b\")", "no key \"b\"");
        same(
            "merge({ a = 1, b = 1 }, null, { b = 2 })",
            "{ a = 1, b = 2 }",
        );
        same("zipmap([\"a\", \"b\"], [1, 2])", "{ a = 1, b = 2 }");
        fails("zipmap([\"a\"], [])", "1 keys but 0 values");
    }
}
