//! Encoding functions: `base64encode`, `base64decode`, `jsonencode`, `jsondecode`, `csvdecode`,
//! `urlencode`.

use base64::Engine;
use hcl::eval::{FuncArgs, FuncDef};
use hcl::{Map, Value};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::{fixed, string};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![
        ("base64encode", fixed(1, base64encode)),
        ("base64decode", fixed(1, base64decode)),
        ("jsonencode", fixed(1, jsonencode)),
        ("jsondecode", fixed(1, jsondecode)),
        ("csvdecode", fixed(1, csvdecode)),
        ("urlencode", fixed(1, urlencode)),
    ]
}

fn base64encode(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(string(&args, 0)?),
    ))
}

/// The decoded bytes must be UTF-8 text, as cty's strings are.
fn base64decode(args: FuncArgs) -> Result<Value, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(string(&args, 0)?)
        .map_err(|e| format!("not valid base64: {e}"))?;
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|_| "the decoded bytes are not UTF-8 text".to_string())
}

/// JSON with the keys of each object in lexical order, as cty writes it.
fn jsonencode(args: FuncArgs) -> Result<Value, String> {
    let json = serde_json::to_value(&args[0]).map_err(|e| e.to_string())?;
    Ok(Value::String(json.to_string()))
}

fn jsondecode(args: FuncArgs) -> Result<Value, String> {
    serde_json::from_str::<Value>(&string(&args, 0)?).map_err(|e| format!("not valid JSON: {e}"))
}

/// CSV with a header line: a list of objects keyed by the header's names, every value a string.
fn csvdecode(args: FuncArgs) -> Result<Value, String> {
    let text = string(&args, 0)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| format!("not valid CSV: {e}"))?
        .clone();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| format!("not valid CSV: {e}"))?;
        let mut row = Map::new();
        for (name, field) in headers.iter().zip(record.iter()) {
            row.insert(name.to_string(), Value::from(field));
        }
        rows.push(Value::Object(row));
    }
    Ok(Value::Array(rows))
}

/// Go's `url.QueryEscape`: everything but letters, digits and `-_.~` percent-encoded, a space
/// as `+`.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b' ');

fn urlencode(args: FuncArgs) -> Result<Value, String> {
    let s = string(&args, 0)?;
    Ok(Value::String(
        utf8_percent_encode(&s, QUERY).to_string().replace(' ', "+"),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fails, same};

    #[test]
    fn encodings() {
        same("base64encode(\"hello\")", "\"aGVsbG8=\"");
        same("base64decode(\"aGVsbG8=\")", "\"hello\"");
        fails("base64decode(\"!!\")", "not valid base64");
        fails("base64decode(\"/w==\")", "not UTF-8");
        same(
            "jsonencode({ b = [1, true, null], a = \"x\" })",
            "\"{\\\"a\\\":\\\"x\\\",\\\"b\\\":[1,true,null]}\"",
        );
        same("jsondecode(\"{\\\"a\\\": [1, 2.5]}\")", "{ a = [1, 2.5] }");
        fails("jsondecode(\"{\")", "not valid JSON");
        same(
            "csvdecode(\"name,port\\nweb,80\\n\\\"a,b\\\",81\\n\")",
            "[{ name = \"web\", port = \"80\" }, { name = \"a,b\", port = \"81\" }]",
        );
        fails("csvdecode(\"a,b\\n1\\n\")", "not valid CSV");
        same("urlencode(\"a b&c=d/é~\")", "\"a+b%26c%3Dd%2F%C3%A9~\"");
    }
}
