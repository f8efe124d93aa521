//! String functions: `upper`, `lower`, `title`, `format`, `formatlist`, `join`, `split`,
//! `replace`, `regex_replace`, `trimspace`, `trim`, `trimprefix`, `trimsuffix`, `chomp`,
//! `indent`, `substr`, `strlen`, `strrev`.

use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;

use super::{as_string, fixed, int, list, string, variadic};
use crate::hcl::eval::types::kind;

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("upper", fixed(1, upper)),
        ("lower", fixed(1, lower)),
        ("title", fixed(1, title)),
        ("format", variadic(1, format)),
        ("formatlist", variadic(1, formatlist)),
        ("join", variadic(1, join)),
        ("split", fixed(2, split)),
        ("replace", fixed(3, replace)),
        ("regex_replace", fixed(3, regex_replace)),
        ("trimspace", fixed(1, trimspace)),
        ("trim", fixed(2, trim)),
        ("trimprefix", fixed(2, trimprefix)),
        ("trimsuffix", fixed(2, trimsuffix)),
        ("chomp", fixed(1, chomp)),
        ("indent", fixed(2, indent)),
        ("substr", fixed(3, substr)),
        ("strlen", fixed(1, strlen)),
        ("strrev", fixed(1, strrev)),
    ]
}

fn upper(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(string(&args, 0)?.to_uppercase()))
}

fn lower(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(string(&args, 0)?.to_lowercase()))
}

/// The first letter of each word upper-cased (Go's `strings.Title`).
fn title(args: FuncArgs) -> Result<Value, String> {
    let s = string(&args, 0)?;
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start && c.is_alphanumeric() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = !(c.is_alphanumeric() || c == '_' || c == '\'');
    }
    Ok(Value::String(out))
}

fn format(args: FuncArgs) -> Result<Value, String> {
    let spec = string(&args, 0)?;
    sprintf(&spec, &args[1..]).map(Value::String)
}

/// `format` once per element of the list arguments (all of one length); other arguments are
/// used in every line.
fn formatlist(args: FuncArgs) -> Result<Value, String> {
    let spec = string(&args, 0)?;
    let rest = &args[1..];
    let mut len: Option<usize> = None;
    for (i, v) in rest.iter().enumerate() {
        if let Value::Array(items) = v {
            match len {
                Some(n) if n != items.len() => {
                    return Err(format!(
                        "argument {} has {} elements but an earlier list has {n}",
                        i + 2,
                        items.len()
                    ))
                }
                _ => len = Some(items.len()),
            }
        }
    }
    let Some(n) = len else {
        return Err("formatlist needs at least one list argument".into());
    };
    (0..n)
        .map(|row| {
            let values: Vec<Value> = rest
                .iter()
                .map(|v| match v {
                    Value::Array(items) => items[row].clone(),
                    other => other.clone(),
                })
                .collect();
            sprintf(&spec, &values).map(Value::String)
        })
        .collect::<Result<_, _>>()
        .map(Value::Array)
}

/// Go's `fmt` verbs as cty's `format` has them: `%v %s %q %d %f %e %g %t %x %X %o %b %%`, with
/// the flags `-`, `+`, `0` and ` `, a width and a precision.
pub fn sprintf(spec: &str, values: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = spec.chars().peekable();
    let mut next = 0;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        while let Some(&f) = chars.peek() {
            if "-+0 #".contains(f) {
                flags.push(f);
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = Some(p.parse().unwrap_or(0));
        }
        let verb = chars
            .next()
            .ok_or_else(|| "format string ends with an unfinished %".to_string())?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let value = values.get(next).ok_or_else(|| {
            format!(
                "format has more verbs than arguments ({} given)",
                values.len()
            )
        })?;
        next += 1;
        let text = verb_text(verb, value, &flags, precision)?;
        let width: usize = width.parse().unwrap_or(0);
        let pad = width.saturating_sub(text.chars().count());
        if flags.contains('-') {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if flags.contains('0') && "dfegxXob".contains(verb) {
            let (sign, digits) = match text.strip_prefix(['-', '+']) {
                Some(rest) => (&text[..1], rest),
                None => ("", text.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
    }
    if next < values.len() {
        return Err(format!(
            "format has {next} verbs but {} arguments",
            values.len()
        ));
    }
    Ok(out)
}

fn verb_text(
    verb: char,
    value: &Value,
    flags: &str,
    precision: Option<usize>,
) -> Result<String, String> {
    let wrong = |what: &str| format!("%{verb} needs {what}, not {}", kind(value));
    let number = || super::as_number(value).ok_or_else(|| wrong("a number"));
    let sign = |s: String, negative: bool| {
        if !negative && flags.contains('+') {
            format!("+{s}")
        } else if !negative && flags.contains(' ') {
            format!(" {s}")
        } else {
            s
        }
    };
    let integer = || -> Result<i64, String> {
        let n = number()?;
        n.as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| format!("%{verb} needs a whole number, not {n}"))
    };
    Ok(match verb {
        'v' => match value {
            Value::String(s) => s.clone(),
            Value::Null => "null".into(),
            Value::Number(_) | Value::Bool(_) => as_string(value).unwrap_or_default(),
            other => serde_json::to_string(other).map_err(|e| e.to_string())?,
        },
        's' => {
            let s = as_string(value).ok_or_else(|| wrong("a string"))?;
            match precision {
                Some(p) => s.chars().take(p).collect(),
                None => s,
            }
        }
        'q' => {
            let s = as_string(value).ok_or_else(|| wrong("a string"))?;
            serde_json::to_string(&s).map_err(|e| e.to_string())?
        }
        't' => match value {
            Value::Bool(b) => b.to_string(),
            _ => return Err(wrong("a bool")),
        },
        'd' => {
            let n = integer()?;
            sign(n.to_string(), n < 0)
        }
        'x' | 'X' | 'o' | 'b' => {
            let n = integer()?;
            let abs = n.unsigned_abs();
            let digits = match verb {
                'x' => format!("{abs:x}"),
                'X' => format!("{abs:X}"),
                'o' => format!("{abs:o}"),
                _ => format!("{abs:b}"),
            };
            sign(if n < 0 { format!("-{digits}") } else { digits }, n < 0)
        }
        'f' | 'F' => {
            let f = number()?.as_f64().unwrap_or_default();
            sign(format!("{f:.*}", precision.unwrap_or(6)), f < 0.0)
        }
        'e' | 'E' => {
            let f = number()?.as_f64().unwrap_or_default();
            let s = go_exponent(&format!("{f:.*e}", precision.unwrap_or(6)));
            sign(if verb == 'E' { s.to_uppercase() } else { s }, f < 0.0)
        }
        'g' | 'G' => {
            let f = number()?.as_f64().unwrap_or_default();
            let s = match precision {
                Some(p) => format!("{:.*}", p, f),
                None => f.to_string(),
            };
            sign(s, f < 0.0)
        }
        other => return Err(format!("unsupported format verb %{other}")),
    })
}

/// Rust writes `1.5e2`, Go `1.5e+02`.
fn go_exponent(s: &str) -> String {
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s.to_string(),
    }
}

/// `join(sep, list...)`: the elements of every list, in order, joined by `sep`.
fn join(args: FuncArgs) -> Result<Value, String> {
    let sep = string(&args, 0)?;
    if args.len() < 2 {
        return Err("join needs at least one list to join".into());
    }
    let mut parts = Vec::new();
    for i in 1..args.len() {
        for (j, item) in list(&args, i)?.iter().enumerate() {
            parts.push(as_string(item).ok_or_else(|| {
                format!(
                    "element {j} of argument {} must be a string, not {}",
                    i + 1,
                    kind(item)
                )
            })?);
        }
    }
    Ok(Value::String(parts.join(&sep)))
}

fn split(args: FuncArgs) -> Result<Value, String> {
    let sep = string(&args, 0)?;
    let s = string(&args, 1)?;
    if s.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    let parts: Vec<Value> = if sep.is_empty() {
        s.chars().map(|c| Value::String(c.to_string())).collect()
    } else {
        s.split(sep.as_str()).map(Value::from).collect()
    };
    Ok(Value::Array(parts))
}

fn replace(args: FuncArgs) -> Result<Value, String> {
    let (s, from, to) = (string(&args, 0)?, string(&args, 1)?, string(&args, 2)?);
    Ok(Value::String(s.replace(&from, &to)))
}

/// `regex_replace(string, pattern, replacement)`, `$1` and `${name}` in the replacement.
fn regex_replace(args: FuncArgs) -> Result<Value, String> {
    let (s, pattern, to) = (string(&args, 0)?, string(&args, 1)?, string(&args, 2)?);
    let re = regex::Regex::new(&pattern).map_err(|e| format!("invalid pattern: {e}"))?;
    Ok(Value::String(re.replace_all(&s, to.as_str()).into_owned()))
}

fn trimspace(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(string(&args, 0)?.trim().to_string()))
}

/// `trim(string, cutset)`: every leading and trailing character that is in `cutset`.
fn trim(args: FuncArgs) -> Result<Value, String> {
    let (s, cut) = (string(&args, 0)?, string(&args, 1)?);
    Ok(Value::String(
        s.trim_matches(|c| cut.contains(c)).to_string(),
    ))
}

fn trimprefix(args: FuncArgs) -> Result<Value, String> {
    let (s, prefix) = (string(&args, 0)?, string(&args, 1)?);
    Ok(Value::String(
        s.strip_prefix(prefix.as_str()).unwrap_or(&s).to_string(),
    ))
}

fn trimsuffix(args: FuncArgs) -> Result<Value, String> {
    let (s, suffix) = (string(&args, 0)?, string(&args, 1)?);
    Ok(Value::String(
        s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string(),
    ))
}

/// Every trailing newline removed.
fn chomp(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(
        string(&args, 0)?.trim_end_matches(['\n', '\r']).to_string(),
    ))
}

/// `indent(n, string)`: every line but the first indented by `n` spaces.
fn indent(args: FuncArgs) -> Result<Value, String> {
    let n = usize::try_from(int(&args, 0)?).map_err(|_| "indent must not be negative")?;
    let s = string(&args, 1)?;
    let pad = " ".repeat(n);
    Ok(Value::String(s.replace('\n', &format!("\n{pad}"))))
}

/// `substr(string, offset, length)`, in characters; a negative offset counts from the end, a
/// length of -1 runs to the end.
fn substr(args: FuncArgs) -> Result<Value, String> {
    let chars: Vec<char> = string(&args, 0)?.chars().collect();
    let (offset, length) = (int(&args, 1)?, int(&args, 2)?);
    let len = chars.len() as i64;
    let start = if offset < 0 { len + offset } else { offset };
    if start < 0 || start > len {
        return Err(format!(
            "offset {offset} is outside a string of {len} characters"
        ));
    }
    let end = match length {
        -1 => len,
        l if l < -1 => return Err(format!("length {l} must be -1 or more")),
        l => (start + l).min(len),
    };
    Ok(Value::String(
        chars[start as usize..end as usize].iter().collect(),
    ))
}

fn strlen(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(string(&args, 0)?.chars().count() as u64))
}

fn strrev(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(string(&args, 0)?.chars().rev().collect()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn strings() {
        same("upper(\"web\")", "\"WEB\"");
        same("lower(\"WEB\")", "\"web\"");
        same("title(\"hello nomad-world\")", "\"Hello Nomad-World\"");
        same("join(\",\", [\"a\", 1], [true])", "\"a,1,true\"");
        same("split(\",\", \"a,b,,c\")", "[\"a\", \"b\", \"\", \"c\"]");
        same("split(\",\", \"\")", "[]");
        same("replace(\"a-b-c\", \"-\", \"_\")", "\"a_b_c\"");
        same(
            "regex_replace(\"web-01\", \"([a-z]+)-(\\\\d+)\", \"$2.$1\")",
            "\"01.web\"",
        );
        fails("regex_replace(\"x\", \"(\", \"\")", "invalid pattern");
        let e = crate::hcl::eval::value::evaluate(
            &hcl::edit::parser::parse_expr("regex_replace(\"x\", \"(\", \"\")").unwrap(),
            &super::super::context(),
        )
        .unwrap_err();
        assert!(!e.contains('\n') && e.contains("unclosed group"), "{e}");
        same("trimspace(\"  a b \\n\")", "\"a b\"");
        same("trim(\"?!hello?!\", \"!?\")", "\"hello\"");
        same("trimprefix(\"nomad-web\", \"nomad-\")", "\"web\"");
        same("trimsuffix(\"web.service\", \".service\")", "\"web\"");
        same("chomp(\"line\\n\\n\")", "\"line\"");
        same("indent(2, \"a\\nb\")", "\"a\\n  b\"");
        same("substr(\"hello world\", 1, 4)", "\"ello\"");
        same("substr(\"hello world\", -5, -1)", "\"world\"");
        same("substr(\"ünï\", 1, 10)", "\"nï\"");
        fails("substr(\"abc\", 4, 1)", "offset 4 is outside");
        same("strlen(\"ünï\")", "3");
        same("strrev(\"abc\")", "\"cba\"");
    }

    #[test]
    fn format_verbs() {
        same("format(\"%s-%d\", \"web\", 3)", "\"web-3\"");
        same(
            "format(\"%03d|%-4s|%5.2f\", 7, \"ab\", 3.14159)",
            "\"007|ab  | 3.14\"",
        );
        same(
            "format(\"%q %t %v %v\", \"a\", true, [1, \"b\"], 2)",
            "\"\\\"a\\\" true [1,\\\"b\\\"] 2\"",
        );
        same(
            "format(\"%x %X %o %b %+d %%\", 255, 255, 8, 5, 3)",
            "\"ff FF 10 101 +3 %\"",
        );
        same("format(\"%e\", 1500)", "\"1.500000e+03\"");
        fails("format(\"%d %d\", 1)", "more verbs than arguments");
        fails("format(\"%d\", 1, 2)", "1 verbs but 2 arguments");
        fails("format(\"%d\", \"x\")", "%d needs a number");
        same(
            "formatlist(\"%s=%s\", [\"a\", \"b\"], \"x\")",
            "[\"a=x\", \"b=x\"]",
        );
        fails(
            "formatlist(\"%s%s\", [\"a\"], [\"b\", \"c\"])",
            "has 2 elements",
        );
    }
}
