//! A volume specification file (host-volumes.md) turned into the API's `{"Volume": {...}}`.
//!
//! The CLI does the conversion so that the API only ever takes Nomad's JSON shape: an HCL file's
//! snake_case keys become PascalCase fields, capacities (`"10MiB"`) become byte counts, and
//! `capability` blocks become `RequestedCapabilities`. A `.json` file is already in the API's
//! shape (`{"Volume": {...}}`, or the bare volume object) and is sent as it is. Values the CLI
//! cannot judge (access modes, plugin ids, paths) are left to the agent, which validates them.

use serde_json::{json, Map, Value};
use std::path::Path;

/// Why a volume specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("cannot parse {file}: {reason}")]
    Syntax { file: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

/// Converts the text of `file` (HCL, or JSON when the name ends in `.json`).
pub fn to_request(file: &Path, text: &str) -> Result<Value, SpecError> {
    let name = file.display().to_string();
    let is_json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if is_json {
        let v: Value = serde_json::from_str(text).map_err(|e| SpecError::Syntax {
            file: name,
            reason: e.to_string(),
        })?;
        return match v {
            Value::Object(ref o) if o.contains_key("Volume") => Ok(v),
            Value::Object(_) => Ok(json!({ "Volume": v })),
            _ => Err(SpecError::Invalid(
                "a JSON volume specification must be an object".into(),
            )),
        };
    }
    let raw: Value = hcl::from_str(text).map_err(|e| SpecError::Syntax {
        file: name,
        reason: e.to_string(),
    })?;
    from_hcl_value(&raw).map(|v| json!({ "Volume": v }))
}

fn from_hcl_value(raw: &Value) -> Result<Value, SpecError> {
    let Value::Object(fields) = raw else {
        return Err(SpecError::Invalid(
            "a volume specification must be a set of attributes".into(),
        ));
    };
    let mut out = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "type" => {
                let t = as_string(key, value)?;
                if t != "host" {
                    return Err(SpecError::Invalid(format!(
                        "unsupported volume type {t:?}: only \"host\" volumes are supported"
                    )));
                }
            }
            "id" => put_string(&mut out, "ID", key, value)?,
            "name" => put_string(&mut out, "Name", key, value)?,
            "namespace" => put_string(&mut out, "Namespace", key, value)?,
            "plugin_id" => put_string(&mut out, "PluginID", key, value)?,
            "node_id" => put_string(&mut out, "NodeID", key, value)?,
            "node_pool" => put_string(&mut out, "NodePool", key, value)?,
            "host_path" => put_string(&mut out, "HostPath", key, value)?,
            "capacity_min" => {
                out.insert(
                    "RequestedCapacityMinBytes".into(),
                    capacity(key, value)?.into(),
                );
            }
            "capacity_max" => {
                out.insert(
                    "RequestedCapacityMaxBytes".into(),
                    capacity(key, value)?.into(),
                );
            }
            "capability" => {
                out.insert("RequestedCapabilities".into(), capabilities(value)?);
            }
            "parameters" => {
                out.insert("Parameters".into(), parameters(value)?);
            }
            other => {
                return Err(SpecError::Invalid(format!(
                    "unknown attribute or block {other:?} in volume specification"
                )))
            }
        }
    }
    if out
        .get("Name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        return Err(SpecError::Invalid(
            "volume specification must have a name".into(),
        ));
    }
    let min = out.get("RequestedCapacityMinBytes").and_then(Value::as_u64);
    let max = out.get("RequestedCapacityMaxBytes").and_then(Value::as_u64);
    if let (Some(min), Some(max)) = (min, max) {
        if max < min {
            return Err(SpecError::Invalid(format!(
                "capacity_max ({max} bytes) is less than capacity_min ({min} bytes)"
            )));
        }
    }
    Ok(Value::Object(out))
}

fn as_string<'a>(key: &str, value: &'a Value) -> Result<&'a str, SpecError> {
    value
        .as_str()
        .ok_or_else(|| SpecError::Invalid(format!("{key} must be a string, got {value}")))
}

fn put_string(
    out: &mut Map<String, Value>,
    field: &str,
    key: &str,
    value: &Value,
) -> Result<(), SpecError> {
    let s = as_string(key, value)?;
    out.insert(field.into(), Value::String(s.to_string()));
    Ok(())
}

/// One block becomes an object, repeated blocks an array: both become a list.
fn capabilities(value: &Value) -> Result<Value, SpecError> {
    let blocks: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut out = Vec::new();
    for block in blocks {
        let Value::Object(fields) = block else {
            return Err(SpecError::Invalid("capability must be a block".into()));
        };
        let mut cap = Map::new();
        for (key, value) in fields {
            match key.as_str() {
                "access_mode" => put_string(&mut cap, "AccessMode", key, value)?,
                "attachment_mode" => put_string(&mut cap, "AttachmentMode", key, value)?,
                other => {
                    return Err(SpecError::Invalid(format!(
                        "unknown attribute {other:?} in capability block"
                    )))
                }
            }
        }
        out.push(Value::Object(cap));
    }
    Ok(Value::Array(out))
}

/// The parameters are an opaque string map: numbers and booleans are written as text.
fn parameters(value: &Value) -> Result<Value, SpecError> {
    let Value::Object(fields) = value else {
        return Err(SpecError::Invalid("parameters must be a block".into()));
    };
    let mut out = Map::new();
    for (key, value) in fields {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                return Err(SpecError::Invalid(format!(
                    "parameter {key:?} must be a string, got {other}"
                )))
            }
        };
        out.insert(key.clone(), Value::String(text));
    }
    Ok(Value::Object(out))
}

fn capacity(key: &str, value: &Value) -> Result<u64, SpecError> {
    let parsed = match value {
        Value::Number(n) => n.as_u64().ok_or_else(|| format!("{n} is not a byte count")),
        Value::String(s) => parse_bytes(s),
        other => Err(format!("{other} is not a size")),
    };
    parsed.map_err(|reason| SpecError::Invalid(format!("invalid {key} {value}: {reason}")))
}

/// `"10MiB"`, `"1.5 GB"`, `"512"`: units b, kb/kib, mb/mib, gb/gib, tb/tib in any case; the `i`
/// units are powers of 1024, the others of 1000 (as Nomad's go-humanize reads them).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    if number.is_empty() {
        return Err("missing number".into());
    }
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1 << 10,
        "mb" => 1000 * 1000,
        "mib" => 1 << 20,
        "gb" => 1000 * 1000 * 1000,
        "gib" => 1 << 30,
        "tb" => 1000 * 1000 * 1000 * 1000,
        "tib" => 1 << 40,
        other => return Err(format!("unknown unit {other:?}")),
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(factor)
            .ok_or_else(|| "size is too large".to_string());
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number"))?;
    let bytes = value * factor as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err("size is too large".into());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hcl_spec_becomes_the_api_shape() {
        let hcl = r#"
type      = "host"
name      = "test"
plugin_id = "mkdir"
capacity_min = "10MiB"
capacity_max = "1GiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
parameters {
  mode = "0755"
  uid  = 1000
}
"#;
        let v = to_request(Path::new("vol.hcl"), hcl).unwrap();
        assert_eq!(
            v,
            json!({"Volume": {
                "Name": "test", "PluginID": "mkdir",
                "RequestedCapacityMinBytes": 10 * 1024 * 1024,
                "RequestedCapacityMaxBytes": 1024u64 * 1024 * 1024,
                "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}],
                "Parameters": {"mode": "0755", "uid": "1000"}
            }})
        );
    }

    #[test]
    fn repeated_capabilities_and_register_fields() {
        let hcl = r#"
name = "existing"
host_path = "/srv/existing"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}
"#;
        let v = to_request(Path::new("vol.hcl"), hcl).unwrap();
        assert_eq!(v["Volume"]["HostPath"], "/srv/existing");
        assert_eq!(
            v["Volume"]["RequestedCapabilities"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |text: &str| {
            to_request(Path::new("v.hcl"), text)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(r#"plugin_id = "mkdir""#),
            "volume specification must have a name"
        );
        assert_eq!(
            err("name = \"a\"\nsize = 3"),
            "unknown attribute or block \"size\" in volume specification"
        );
        assert_eq!(
            err("name = \"a\"\ncapacity_min = \"2GiB\"\ncapacity_max = \"1GiB\""),
            "capacity_max (1073741824 bytes) is less than capacity_min (2147483648 bytes)"
        );
        assert_eq!(
            err("name = \"a\"\ncapacity_min = \"10 parsecs\""),
            "invalid capacity_min \"10 parsecs\": unknown unit \"parsecs\""
        );
        assert_eq!(
            err("name = \"a\"\ntype = \"csi\""),
            "unsupported volume type \"csi\": only \"host\" volumes are supported"
        );
        assert!(err("name = ").starts_with("cannot parse v.hcl:"));
    }

    #[test]
    fn json_specs_are_sent_as_they_are() {
        let wrapped = r#"{"Volume": {"Name": "a", "PluginID": "mkdir"}}"#;
        let v = to_request(Path::new("v.json"), wrapped).unwrap();
        assert_eq!(v, json!({"Volume": {"Name": "a", "PluginID": "mkdir"}}));
        let bare = r#"{"Name": "a"}"#;
        let v = to_request(Path::new("v.JSON"), bare).unwrap();
        assert_eq!(v, json!({"Volume": {"Name": "a"}}));
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("10MiB"), Ok(10 << 20));
        assert_eq!(parse_bytes("10mib"), Ok(10 << 20));
        assert_eq!(parse_bytes("1 GB"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert_eq!(parse_bytes("2tib"), Ok(2 << 40));
        assert_eq!(parse_bytes("3b"), Ok(3));
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
