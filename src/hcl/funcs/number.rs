//! Numeric functions: `abs`, `ceil`, `floor`, `max`, `min`, `parseint`, `pow`, `log`, `signum`.

use hcl::eval::{FuncArgs, FuncDef};
use hcl::{Number, Value};

use super::{fixed, float, int, num, string, variadic};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("abs", fixed(1, abs)),
        ("ceil", fixed(1, ceil)),
        ("floor", fixed(1, floor)),
        ("max", variadic(1, max)),
        ("min", variadic(1, min)),
        ("parseint", fixed(2, parseint)),
        ("pow", fixed(2, pow)),
        ("log", fixed(2, log)),
        ("signum", fixed(1, signum)),
    ]
}

fn f64_of(n: Number) -> f64 {
    n.as_f64().unwrap_or_default()
}

fn abs(args: FuncArgs) -> Result<Value, String> {
    let n = num(&args, 0)?;
    match n.as_i64() {
        Some(i) => Ok(Value::from(i.unsigned_abs())),
        None => float(f64_of(n).abs()),
    }
}

fn ceil(args: FuncArgs) -> Result<Value, String> {
    float(f64_of(num(&args, 0)?).ceil())
}

fn floor(args: FuncArgs) -> Result<Value, String> {
    float(f64_of(num(&args, 0)?).floor())
}

fn extreme(args: &FuncArgs, pick_max: bool) -> Result<Value, String> {
    let mut best = num(args, 0)?;
    for i in 1..args.len() {
        let n = num(args, i)?;
        let better = if pick_max {
            f64_of(n) > f64_of(best)
        } else {
            f64_of(n) < f64_of(best)
        };
        if better {
            best = n;
        }
    }
    Ok(Value::Number(best))
}

fn max(args: FuncArgs) -> Result<Value, String> {
    extreme(&args, true)
}

fn min(args: FuncArgs) -> Result<Value, String> {
    extreme(&args, false)
}

/// `parseint("ff", 16)`: a whole number written in `base` (2 to 62, as cty allows).
fn parseint(args: FuncArgs) -> Result<Value, String> {
    let s = string(&args, 0)?;
    let base = int(&args, 1)?;
    if !(2..=36).contains(&base) {
        return Err(format!("base {base} must be from 2 to 36"));
    }
    i64::from_str_radix(&s, base as u32)
        .map(Value::from)
        .map_err(|_| format!("cannot parse {s:?} as a base {base} integer"))
}

fn pow(args: FuncArgs) -> Result<Value, String> {
    float(f64_of(num(&args, 0)?).powf(f64_of(num(&args, 1)?)))
}

fn log(args: FuncArgs) -> Result<Value, String> {
    float(f64_of(num(&args, 0)?).log(f64_of(num(&args, 1)?)))
}

fn signum(args: FuncArgs) -> Result<Value, String> {
    let f = f64_of(num(&args, 0)?);
    Ok(Value::from(if f > 0.0 {
        1
    } else if f < 0.0 {
        -1
    } else {
        0
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn numbers() {
        same("abs(-3)", "3");
        same("abs(-1.5)", "1.5");
        same("ceil(1.2)", "2");
        same("floor(1.8)", "1");
        same("floor(-1.5)", "-2");
        same("max(3, 7, \"2\")", "7");
        same("min(3, 7, 2.5)", "2.5");
        same("parseint(\"ff\", 16)", "255");
        same("parseint(\"-101\", 2)", "-5");
        fails(
            "parseint(\"zz\", 10)",
            "cannot parse \"zz\" as a base 10 integer",
        );
        fails("parseint(\"1\", 99)", "base 99");
        same("pow(2, 10)", "1024");
        same("log(8, 2)", "3");
        same("signum(-4)", "-1");
        same("8 / 2", "4");
        fails("abs(\"x\")", "must be a number");
    }
}
