//! `yamldecode` and `yamlencode`, as Nomad's jobspec2 has them (go-cty-yaml).
//!
//! Decoding reads one YAML 1.2 document with yaml-rust2's parser: mappings become objects (keys
//! as text), sequences lists, plain scalars are resolved by the core schema (`true`, `42`, `1.5`,
//! `null`), quoted and block scalars are strings. Aliases are expanded, within a bound on the
//! values a document may expand to (a few aliases of aliases would otherwise build billions).
//!
//! Encoding writes block style as go-cty-yaml does: keys in lexical order, every string
//! double-quoted except a multi-line one, which is a literal block (`|`), `...` after a plain
//! scalar document. Long strings are not folded across lines, where go-yaml folds at 80
//! columns; the value read back is the same.

use std::collections::HashMap;

use hcl::eval::{FuncArgs, FuncDef};
use hcl::{Map, Number, Value};
use yaml_rust2::parser::{MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::{Event, Yaml};

use super::{fixed, string};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("yamldecode", fixed(1, yamldecode)),
        ("yamlencode", fixed(1, yamlencode)),
    ]
}

/// The most values (scalars and collections, alias copies included) one document may hold.
const MAX_VALUES: usize = 1_000_000;

fn yamldecode(args: FuncArgs) -> Result<Value, String> {
    let text = string(&args, 0)?;
    let mut builder = Builder::default();
    Parser::new_from_str(&text)
        .load(&mut builder, true)
        .map_err(|e| format!("invalid YAML: {e}"))?;
    if let Some(e) = builder.error {
        return Err(e);
    }
    match builder.docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(builder.docs.remove(0)),
        n => Err(format!(
            "the YAML holds {n} documents; yamldecode reads one"
        )),
    }
}

/// Builds values from the parser's events.
#[derive(Default)]
struct Builder {
    docs: Vec<Value>,
    /// Open collections, innermost last.
    stack: Vec<Open>,
    /// Anchored values, with how many values each is.
    anchors: HashMap<usize, (Value, usize)>,
    /// Values made so far, alias copies included.
    values: usize,
    error: Option<String>,
}

/// An open collection: its anchor, how many values it holds so far, and its items (an object's
/// with the key that waits for its value).
struct Open {
    anchor: usize,
    size: usize,
    items: Items,
}

enum Items {
    List(Vec<Value>),
    Object(Map<String, Value>, Option<String>),
}

impl Builder {
    fn fail(&mut self, reason: String, mark: Marker) {
        if self.error.is_none() {
            self.error = Some(format!("{reason} (YAML line {})", mark.line()));
        }
    }

    /// Counts `n` more values; false past the bound.
    fn count(&mut self, n: usize, mark: Marker) -> bool {
        self.values = self.values.saturating_add(n);
        if self.values > MAX_VALUES {
            self.fail(
                format!("the YAML expands to more than {MAX_VALUES} values"),
                mark,
            );
            return false;
        }
        true
    }

    /// Adds a finished value (of `size` values) to the open collection, or as a document.
    fn push(&mut self, value: Value, anchor: usize, size: usize, mark: Marker) {
        if anchor > 0 {
            self.anchors.insert(anchor, (value.clone(), size));
        }
        let Some(open) = self.stack.last_mut() else {
            self.docs.push(value);
            return;
        };
        match &mut open.items {
            Items::List(items) => {
                items.push(value);
                open.size += size;
            }
            Items::Object(map, key) => match key.take() {
                None => match key_text(&value) {
                    Some(k) => *key = Some(k),
                    None => self.fail("a mapping key must be a scalar".into(), mark),
                },
                Some(k) => {
                    open.size += size;
                    if map.insert(k.clone(), value).is_some() {
                        self.fail(format!("duplicate mapping key {k:?}"), mark);
                    }
                }
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let start = |anchor, items| Open {
            anchor,
            size: 1,
            items,
        };
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                // A long string counts by its length too: an alias of a 500 KB string repeated
                // 150,000 times would otherwise be 150,000 values and 75 GB.
                let size = 1 + text.len() / 64;
                if self.count(size, mark) {
                    match scalar(text, style, tag.as_ref()) {
                        Ok(v) => self.push(v, anchor, size, mark),
                        Err(e) => self.fail(e, mark),
                    }
                }
            }
            Event::SequenceStart(anchor, _) => {
                if self.count(1, mark) {
                    self.stack.push(start(anchor, Items::List(Vec::new())));
                }
            }
            Event::MappingStart(anchor, _) => {
                if self.count(1, mark) {
                    self.stack
                        .push(start(anchor, Items::Object(Map::new(), None)));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(open) = self.stack.pop() {
                    let value = match open.items {
                        Items::List(items) => Value::Array(items),
                        Items::Object(map, _) => Value::Object(map),
                    };
                    self.push(value, open.anchor, open.size, mark);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some((value, size)) => {
                    if self.count(size, mark) {
                        self.push(value, 0, size, mark);
                    }
                }
                None => self.fail("an alias to an anchor not defined before it".into(), mark),
            },
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// A scalar's value: a plain one resolved by the core schema, `!!str` and quoted ones text.
fn scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    let core = tag
        .filter(|t| t.handle == "tag:yaml.org,2002:")
        .map(|t| t.suffix.as_str());
    if style != TScalarStyle::Plain || core == Some("str") || (tag.is_some() && core.is_none()) {
        return Ok(Value::String(text));
    }
    Ok(match Yaml::from_str(&text) {
        Yaml::Integer(i) => Value::from(i),
        Yaml::Real(r) => match r.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Value::Number(n),
            None => return Err(format!("{r} is not a finite number")),
        },
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Null => Value::Null,
        _ => Value::String(text),
    })
}

fn key_text(key: &Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".into()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn yamlencode(args: FuncArgs) -> Result<Value, String> {
    let value = &args[0];
    let mut out = block(value, 0);
    if matches!(value, Value::Null | Value::Bool(_) | Value::Number(_)) {
        out.push_str("...\n");
    }
    Ok(Value::String(out))
}

/// `value` in block style; its first line starts where the caller is, the others at `indent`.
/// Ends with a line break.
fn block(value: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(&pad);
                }
                out.push_str(&quoted(key));
                out.push(':');
                match &map[key] {
                    Value::Object(m) if !m.is_empty() => {
                        out.push('\n');
                        out.push_str(&" ".repeat(indent + 2));
                        out.push_str(&block(&map[key], indent + 2));
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push('\n');
                        out.push_str(&pad);
                        out.push_str(&block(&map[key], indent));
                    }
                    other => {
                        out.push(' ');
                        out.push_str(&block(other, indent + 2));
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&pad);
                }
                out.push_str("- ");
                out.push_str(&block(item, indent + 2));
            }
        }
        Value::Object(_) => out.push_str("{}\n"),
        Value::Array(_) => out.push_str("[]\n"),
        Value::Null => out.push_str("null\n"),
        Value::Bool(b) => out.push_str(&format!("{b}\n")),
        Value::Number(n) => out.push_str(&format!("{n}\n")),
        Value::String(s) if literal_fits(s) => {
            out.push_str(match s.trim_end_matches('\n').len() {
                n if n == s.len() => "|-\n",
                n if n + 1 == s.len() => "|\n",
                _ => "|+\n",
            });
            let indent = indent.max(2);
            for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                if !line.is_empty() {
                    out.push_str(&" ".repeat(indent));
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        Value::String(s) => {
            out.push_str(&quoted(s));
            out.push('\n');
        }
    }
    out
}

/// Whether a string is written as a literal block: it has a line break, and nothing a literal
/// block cannot hold as it is (a leading space on the first line, control characters).
fn literal_fits(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\n'])
        && !s.chars().any(|c| c.is_control() && c != '\n')
        && !s.lines().any(|l| l.ends_with(' '))
}

/// A double-quoted YAML string.
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn decodes_one_document() {
        same(
            "yamldecode(\"a: 1\\nb: [x, 'true', true, 1.5, ~]\\nc:\\n  d: \\\"e\\\"\\n\")",
            "{a = 1, b = [\"x\", \"true\", true, 1.5, null], c = {d = \"e\"}}",
        );
        same("yamldecode(\"- 1\\n- two\\n\")", "[1, \"two\"]");
        same("yamldecode(\"hello\")", "\"hello\"");
        same("yamldecode(\"\")", "null");
        same("yamldecode(\"k: !!str 10\\n\")", "{k = \"10\"}");
        same("yamldecode(\"s: |\\n  a\\n  b\\n\")", "{s = \"a\\nb\\n\"}");
        same(
            "yamldecode(\"base: &b {x: 1}\\ncopy: *b\\n\")",
            "{base = {x = 1}, copy = {x = 1}}",
        );
        fails("yamldecode(\"a: 1\\n---\\nb: 2\\n\")", "holds 2 documents");
        fails("yamldecode(\"a: [1\")", "invalid YAML");
        fails(
            "yamldecode(\"a: 1\\na: 2\\n\")",
            "duplicate mapping key \"a\"",
        );
        // Aliases of aliases cannot expand without bound.
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, next) in ["a", "b", "c", "d", "e", "f", "g"]
            .windows(2)
            .map(|w| (w[0], w[1]))
        {
            laughs.push_str(&format!(
                "{next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        fails(
            &format!("yamldecode({laughs:?})"),
            "expands to more than 1000000 values",
        );
        // Nor can few aliases of one long string: its length counts.
        let long = format!(
            "a: &a \"{}\"\nb: [{}]\n",
            "x".repeat(64_000),
            ["*a"; 2_000].join(", ")
        );
        fails(
            &format!("yamldecode({long:?})"),
            "expands to more than 1000000 values",
        );
    }

    #[test]
    fn encodes_as_go_cty_yaml_does() {
        same(
            "yamlencode({a = \"b\", c = \"d\"})",
            "\"\\\"a\\\": \\\"b\\\"\\n\\\"c\\\": \\\"d\\\"\\n\"",
        );
        same(
            "yamlencode({foo = [1, {a = \"b\", c = \"d\"}, 3], bar = \"baz\"})",
            "\"\\\"bar\\\": \\\"baz\\\"\\n\\\"foo\\\":\\n- 1\\n- \\\"a\\\": \\\"b\\\"\\n  \\\"c\\\": \\\"d\\\"\\n- 3\\n\"",
        );
        same("yamlencode(true)", "\"true\\n...\\n\"");
        same("yamlencode(\"hello\")", "\"\\\"hello\\\"\\n\"");
        same("yamlencode({})", "\"{}\\n\"");
        same("yamlencode([])", "\"[]\\n\"");
        same("yamlencode([[1, 2], {}])", "\"- - 1\\n  - 2\\n- {}\\n\"");
        same(
            "yamlencode({a = {b = {c = 1}}})",
            "\"\\\"a\\\":\\n  \\\"b\\\":\\n    \\\"c\\\": 1\\n\"",
        );
        same(
            "yamlencode({s = \"x\\ny\"})",
            "\"\\\"s\\\": |-\\n  x\\n  y\\n\"",
        );
        same(
            "yamlencode({s = \"q\\\"\\t\"})",
            "\"\\\"s\\\": \\\"q\\\\\\\"\\\\t\\\"\\n\"",
        );
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same() {
        for v in [
            "{a = [1, \"two\", {b = null}], c = \"multi\\nline\\n\\n\", d = \" lead\\nx\", e = {}, f = [[]]}",
            "[\"x\\ny\\n\", 2.5, false, \"\", \"null\", \"1\"]",
        ] {
            same(&format!("yamldecode(yamlencode({v}))"), v);
        }
    }
}
