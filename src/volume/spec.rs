//! The host volume specification: what `volume create` and `volume register` read.
//!
//! Two inputs, one domain type. HCL files (what the CLI reads) are walked structure by structure so
//! an unknown attribute or block is an error naming it and its line; JSON is Nomad's API shape
//! (`{"Volume": {...}}`), where fields nodeward does not implement are ignored and reported as
//! warnings. Both produce a [`RawVolume`] that mirrors the API shape, and [`RawVolume::validate`]
//! turns it into a [`VolumeSpec`] once: names checked, capacities parsed, modes known. The CLI
//! sends an HCL file as `cli::volume_request` makes it, so the API only ever takes Nomad's JSON
//! shape.
//!
//! Capacities in HCL are strings with a unit, read like Nomad's `humanize.ParseBytes`: decimal units
//! are powers of 1000 (`kb` = 1000, `mb` = 1000², ...) and binary units powers of 1024 (`kib` =
//! 1024, `mib` = 1024², ...); `b` or no unit is bytes. Units are case-insensitive and may be
//! separated from the number by spaces; a decimal number (`1.5GiB`) is rounded down to whole bytes.
//! A bare HCL number is bytes. In JSON, capacities are byte counts.
//!
//! HCL is read by the shared front-end ([`crate::hcl`]); this module has the schema.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::jobspec::validate::validate_name;
pub use crate::records::{AccessMode, AttachmentMode, Capability};

/// Why a volume specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not well-formed HCL or JSON.
    #[error("{0}")]
    Syntax(String),
    /// An attribute or block nodeward does not know (HCL).
    #[error("{0}")]
    Unknown(String),
    /// A value that cannot be used.
    #[error("{0}")]
    Invalid(String),
}

/// A mode spelled wrong, as a specification error.
pub(crate) fn invalid_mode(e: crate::jobspec::BadMode) -> SpecError {
    SpecError::Invalid(e.to_string())
}

/// A validated volume specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Set when the user updates an existing volume (`id = "..."`); a UUID.
    pub id: Option<String>,
    pub name: String,
    /// Always `default`: nodeward has no other namespace.
    pub namespace: String,
    /// The plugin that creates the volume; `None` for a registered volume.
    pub plugin_id: Option<String>,
    /// Placement fields: when set they must name this node (the manager checks).
    pub node_id: Option<String>,
    pub node_pool: Option<String>,
    /// Bytes; 0 means not requested.
    pub capacity_min: u64,
    /// Bytes; 0 means not requested. Never below `capacity_min` when both are set.
    pub capacity_max: u64,
    /// At least one; `single-node-writer` on `file-system` when none was given.
    pub capabilities: Vec<Capability>,
    /// Opaque strings handed to the plugin; empty means none (`DHV_PARAMETERS=null`).
    pub parameters: BTreeMap<String, String>,
    /// Absolute path of a registered volume.
    pub host_path: Option<String>,
}

/// The namespace every volume lives in.
pub const NAMESPACE: &str = "default";

/// A volume specification before validation, in Nomad's API field names. This is also what the CLI
/// sends to the API after reading an HCL file: only the fields the file sets, so the agent applies
/// the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RawVolume {
    #[serde(rename = "ID", skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(rename = "PluginID", skip_serializing_if = "String::is_empty")]
    pub plugin_id: String,
    #[serde(rename = "NodeID", skip_serializing_if = "String::is_empty")]
    pub node_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_pool: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub requested_capacity_min_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub requested_capacity_max_bytes: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested_capabilities: Vec<RawCapability>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host_path: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RawCapability {
    pub access_mode: String,
    pub attachment_mode: String,
}

/// The JSON fields of a volume that nodeward reads; any other field is ignored with a warning.
const JSON_FIELDS: [&str; 11] = [
    "ID",
    "Name",
    "Namespace",
    "PluginID",
    "NodeID",
    "NodePool",
    "RequestedCapacityMinBytes",
    "RequestedCapacityMaxBytes",
    "RequestedCapabilities",
    "Parameters",
    "HostPath",
];

/// Fields a volume answer carries that a client may send back unchanged; ignored silently.
const JSON_OUTPUT_FIELDS: [&str; 9] = [
    "CapacityBytes",
    "State",
    "StatusDescription",
    "Allocations",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
    "Constraints",
];

/// Parses a capacity such as `10MiB`, `1.5 GB` or `4096`. See the module docs for the units.
pub fn parse_capacity(s: &str) -> Result<u64, SpecError> {
    let bad = |why: &str| SpecError::Invalid(format!("invalid capacity {s:?}: {why}"));
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() {
        return Err(bad("no number"));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" => 1 << 10,
        "mb" => 1000u64.pow(2),
        "mib" => 1 << 20,
        "gb" => 1000u64.pow(3),
        "gib" => 1 << 30,
        "tb" => 1000u64.pow(4),
        "tib" => 1 << 40,
        _ => {
            return Err(bad(
                "unknown unit; want b, kb, kib, mb, mib, gb, gib, tb or tib",
            ))
        }
    };
    let too_big = || bad("too large");
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(multiplier).ok_or_else(too_big);
    }
    let f: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let bytes = (f * multiplier as f64).floor();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(too_big());
    }
    Ok(bytes as u64)
}

/// Formats bytes like Nomad's `humanize.IBytes`: `512 B`, `1.5 KiB`, `47 MiB`.
pub fn humanize_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let val = (bytes as f64 / 1024f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", UNITS[exp])
    } else {
        format!("{val:.0} {}", UNITS[exp])
    }
}

impl RawVolume {
    /// Validates once, applying defaults.
    pub fn validate(self) -> Result<VolumeSpec, SpecError> {
        // The same rule as job, group and task names: the name becomes a path component.
        validate_name("volume", &self.name).map_err(|e| SpecError::Invalid(e.to_string()))?;
        let id = non_empty(self.id);
        if let Some(id) = &id {
            if uuid::Uuid::parse_str(id).is_err() {
                return Err(SpecError::Invalid(format!(
                    "invalid volume ID {id:?}: not a UUID"
                )));
            }
        }
        if !self.namespace.is_empty() && self.namespace != NAMESPACE {
            return Err(SpecError::Invalid(format!(
                "namespace {:?} does not exist: nodeward has only the \"default\" namespace",
                self.namespace
            )));
        }
        let plugin_id = non_empty(self.plugin_id);
        let (min, max) = (
            self.requested_capacity_min_bytes,
            self.requested_capacity_max_bytes,
        );
        if min > 0 && max > 0 && max < min {
            return Err(SpecError::Invalid(format!(
                "capacity_max ({max} bytes) is less than capacity_min ({min} bytes)"
            )));
        }
        let mut capabilities = Vec::new();
        for c in &self.requested_capabilities {
            capabilities.push(Capability {
                access_mode: c.access_mode.parse().map_err(invalid_mode)?,
                attachment_mode: c.attachment_mode.parse().map_err(invalid_mode)?,
            });
        }
        if capabilities.is_empty() {
            capabilities.push(Capability {
                access_mode: AccessMode::SingleNodeWriter,
                attachment_mode: AttachmentMode::FileSystem,
            });
        }
        let host_path = non_empty(self.host_path);
        if let Some(p) = &host_path {
            if !p.starts_with('/') {
                return Err(SpecError::Invalid(format!(
                    "host_path {p:?} is not an absolute path"
                )));
            }
        }
        for key in self.parameters.keys() {
            if key.is_empty() {
                return Err(SpecError::Invalid("empty parameter name".to_string()));
            }
        }
        Ok(VolumeSpec {
            id,
            name: self.name,
            namespace: NAMESPACE.to_string(),
            plugin_id,
            node_id: non_empty(self.node_id),
            node_pool: non_empty(self.node_pool),
            capacity_min: min,
            capacity_max: max,
            capabilities,
            parameters: self.parameters,
            host_path,
        })
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A parsed specification and what the user should know about the input (ignored JSON fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedVolume {
    pub spec: VolumeSpec,
    pub warnings: Vec<String>,
}

/// Parses an API request body `{"Volume": {...}}` (a bare volume object is accepted too).
pub fn parse_json(body: &[u8]) -> Result<ParsedVolume, SpecError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| SpecError::Syntax(format!("invalid JSON: {e}")))?;
    let volume = match value {
        serde_json::Value::Object(mut top) => match top.remove("Volume") {
            Some(v) => v,
            None => serde_json::Value::Object(top),
        },
        _ => return Err(SpecError::Syntax("expected a JSON object".to_string())),
    };
    let serde_json::Value::Object(fields) = &volume else {
        return Err(SpecError::Syntax(
            "\"Volume\" must be a JSON object".to_string(),
        ));
    };
    let mut warnings = Vec::new();
    let mut kept = serde_json::Map::new();
    for (key, val) in fields {
        if JSON_FIELDS.contains(&key.as_str()) {
            // Nomad's clients send null for empty maps and lists.
            if !val.is_null() {
                kept.insert(key.clone(), val.clone());
            }
            // Parameters are strings; numbers and booleans are taken as their text, as HCL does.
            if let Some(serde_json::Value::Object(params)) = kept.get_mut("Parameters") {
                for v in params.values_mut() {
                    if v.is_number() || v.is_boolean() {
                        *v = serde_json::Value::String(v.to_string());
                    }
                }
            }
        } else if !JSON_OUTPUT_FIELDS.contains(&key.as_str()) && !is_empty_json(val) {
            warnings.push(format!(
                "field {key:?} is not supported by nodeward and was ignored"
            ));
        }
    }
    let raw: RawVolume = serde_json::from_value(serde_json::Value::Object(kept))
        .map_err(|e| SpecError::Invalid(format!("invalid volume: {e}")))?;
    Ok(ParsedVolume {
        spec: raw.validate()?,
        warnings,
    })
}

fn is_empty_json(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Parses a volume specification file in HCL. One-line blocks with several attributes, as the
/// documentation writes them (`capability { access_mode = "..."  attachment_mode = "..." }`), are
/// accepted, and line numbers in errors point at the input ([`crate::hcl::read`]).
pub fn parse_hcl(input: &str) -> Result<VolumeSpec, SpecError> {
    read_hcl(input)?.validate()
}

/// The HCL file as written, in the API's field names: [`parse_hcl`] without the validation.
/// Reads an HCL specification file into the raw volume, as written (no defaults applied).
pub fn read_hcl(input: &str) -> Result<RawVolume, SpecError> {
    crate::hcl::read(input, |doc| walk_hcl(&doc.source, &doc.body))
}

impl From<crate::hcl::Error> for SpecError {
    fn from(e: crate::hcl::Error) -> SpecError {
        use crate::hcl::Error;
        match e {
            Error::Syntax(e) => SpecError::Syntax(format!("invalid HCL: {e}")),
            Error::Thread(_) => SpecError::Syntax(e.to_string()),
            Error::Unknown(m) => SpecError::Unknown(m),
            Error::Invalid(m) => SpecError::Invalid(m),
            // Volume specifications are read literally; nothing evaluates them.
            Error::Eval(e) => SpecError::Invalid(e.to_string()),
        }
    }
}

/// The volume specification's schema. Its messages put the line first (`line 3: unknown
/// attribute ...`), and the first problem in the order written is the one reported.
fn walk_hcl(
    source: &crate::hcl::Source,
    body: &hcl::edit::structure::Body,
) -> Result<RawVolume, SpecError> {
    use hcl::edit::structure::Structure;
    use hcl::edit::Span;

    let line = |span| source.line(span);
    let mut raw = RawVolume::default();
    let mut volume_type = None;
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let key = attr.key.as_str();
                let at = line(attr.span());
                let value: hcl::Value = hcl::Expression::from(attr.value.clone()).into();
                let text = || string_value(key, at, &value);
                match key {
                    "type" => volume_type = Some(text()?),
                    "id" => raw.id = text()?,
                    "name" => raw.name = text()?,
                    "namespace" => raw.namespace = text()?,
                    "plugin_id" => raw.plugin_id = text()?,
                    "node_id" => raw.node_id = text()?,
                    "node_pool" => raw.node_pool = text()?,
                    "host_path" => raw.host_path = text()?,
                    "capacity_min" => {
                        raw.requested_capacity_min_bytes = capacity_value(key, at, &value)?
                    }
                    "capacity_max" => {
                        raw.requested_capacity_max_bytes = capacity_value(key, at, &value)?
                    }
                    "parameters" => raw.parameters = parameters_value(at, &value)?,
                    _ => {
                        return Err(SpecError::Unknown(format!(
                            "line {at}: unknown attribute {key:?} in volume specification"
                        )))
                    }
                }
            }
            Structure::Block(block) => {
                let ident = block.ident.as_str();
                let at = line(block.span());
                if !block.labels.is_empty() {
                    return Err(SpecError::Invalid(format!(
                        "line {at}: block {ident:?} takes no label"
                    )));
                }
                match ident {
                    "capability" => {
                        let mut cap = RawCapability::default();
                        for inner in block.body.iter() {
                            let Structure::Attribute(attr) = inner else {
                                return Err(SpecError::Unknown(format!(
                                    "line {}: unknown block in capability",
                                    line(inner.span())
                                )));
                            };
                            let key = attr.key.as_str();
                            let at = line(attr.span());
                            let value: hcl::Value =
                                hcl::Expression::from(attr.value.clone()).into();
                            match key {
                                "access_mode" => cap.access_mode = string_value(key, at, &value)?,
                                "attachment_mode" => {
                                    cap.attachment_mode = string_value(key, at, &value)?
                                }
                                _ => {
                                    return Err(SpecError::Unknown(format!(
                                        "line {at}: unknown attribute {key:?} in capability"
                                    )))
                                }
                            }
                        }
                        if cap.access_mode.is_empty() || cap.attachment_mode.is_empty() {
                            return Err(SpecError::Invalid(format!(
                                "line {at}: capability needs access_mode and attachment_mode"
                            )));
                        }
                        raw.requested_capabilities.push(cap);
                    }
                    "parameters" => {
                        for inner in block.body.iter() {
                            let Structure::Attribute(attr) = inner else {
                                return Err(SpecError::Unknown(format!(
                                    "line {}: unknown block in parameters",
                                    line(inner.span())
                                )));
                            };
                            let key = attr.key.as_str();
                            let at = line(attr.span());
                            let value: hcl::Value =
                                hcl::Expression::from(attr.value.clone()).into();
                            raw.parameters
                                .insert(key.to_string(), scalar_string(key, at, &value)?);
                        }
                    }
                    _ => {
                        return Err(SpecError::Unknown(format!(
                            "line {at}: unknown block {ident:?} in volume specification"
                        )))
                    }
                }
            }
        }
    }
    match volume_type.as_deref() {
        None | Some("host") => {}
        Some(other) => {
            return Err(SpecError::Invalid(format!(
                "volume type {other:?} is not supported by the host volume specification"
            )))
        }
    }
    Ok(raw)
}

fn string_value(key: &str, line: usize, value: &hcl::Value) -> Result<String, SpecError> {
    match value {
        hcl::Value::String(s) => Ok(s.clone()),
        _ => Err(SpecError::Invalid(format!(
            "line {line}: {key} must be a string"
        ))),
    }
}

/// A parameter value: strings as written, numbers and booleans as their text (as Nomad does).
fn scalar_string(key: &str, line: usize, value: &hcl::Value) -> Result<String, SpecError> {
    match value {
        hcl::Value::String(s) => Ok(s.clone()),
        hcl::Value::Number(n) => Ok(n.to_string()),
        hcl::Value::Bool(b) => Ok(b.to_string()),
        _ => Err(SpecError::Invalid(format!(
            "line {line}: parameter {key:?} must be a string, number or boolean"
        ))),
    }
}

fn capacity_value(key: &str, line: usize, value: &hcl::Value) -> Result<u64, SpecError> {
    let parsed = match value {
        hcl::Value::String(s) => parse_capacity(s),
        hcl::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| SpecError::Invalid(format!("invalid capacity {n}"))),
        _ => Err(SpecError::Invalid("must be a string".to_string())),
    };
    parsed.map_err(|e| SpecError::Invalid(format!("line {line}: {key}: {e}")))
}

fn parameters_value(
    line: usize,
    value: &hcl::Value,
) -> Result<BTreeMap<String, String>, SpecError> {
    let hcl::Value::Object(map) = value else {
        return Err(SpecError::Invalid(format!(
            "line {line}: parameters must be an object"
        )));
    };
    map.iter()
        .map(|(k, v)| Ok((k.clone(), scalar_string(k, line, v)?)))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Also used by the CLI's request tests.
    pub(crate) const EXAMPLE: &str = r#"
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

    #[test]
    fn hcl_example_parses() {
        let spec = parse_hcl(EXAMPLE).unwrap();
        assert_eq!(spec.name, "test");
        assert_eq!(spec.plugin_id.as_deref(), Some("mkdir"));
        assert_eq!(spec.capacity_min, 10 << 20);
        assert_eq!(spec.capacity_max, 1 << 30);
        assert_eq!(
            spec.capabilities,
            vec![Capability {
                access_mode: AccessMode::SingleNodeWriter,
                attachment_mode: AttachmentMode::FileSystem
            }]
        );
        assert_eq!(spec.parameters["mode"], "0755");
        assert_eq!(spec.parameters["uid"], "1000");
        assert_eq!(spec.namespace, "default");
        assert_eq!(spec.host_path, None);
    }

    #[test]
    fn one_line_blocks_as_documented() {
        let spec = parse_hcl(
            "type = \"host\"\nname = \"test\"\nplugin_id = \"mkdir\"\n\
             capability { access_mode = \"single-node-writer\"  attachment_mode = \"file-system\" }\n\
             parameters { mode = \"0755\"  uid = 0 }\n",
        )
        .unwrap();
        assert_eq!(
            spec.capabilities[0].access_mode,
            AccessMode::SingleNodeWriter
        );
        assert_eq!(spec.parameters.len(), 2);
        let err =
            parse_hcl("name = \"test\"\n\ncapability { access_mode = \"x\"  mode = \"y\" }\n")
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: unknown attribute \"mode\" in capability"
        );
    }

    #[test]
    fn unknown_attribute_and_block_are_named() {
        let err = parse_hcl("name = \"a\"\nsize = 3\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2: unknown attribute \"size\" in volume specification"
        );
        let err = parse_hcl("name = \"a\"\nconstraint { x = 1 }\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2: unknown block \"constraint\" in volume specification"
        );
        let err = parse_hcl("name = \"a\"\nname = \"b\"\n").unwrap_err();
        assert!(err.to_string().contains("redefined attribute"), "{err}");
        let err = parse_hcl("name = \"a\"\ncapability {\n  mode = \"x\"\n}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: unknown attribute \"mode\" in capability"
        );
    }

    #[test]
    fn wrong_type_and_modes_are_refused() {
        let err = parse_hcl("type = \"csi\"\nname = \"a\"\n").unwrap_err();
        assert!(
            err.to_string().contains("\"csi\" is not supported"),
            "{err}"
        );
        let err = parse_hcl(
            "name = \"a\"\ncapability {\n access_mode = \"multi-node\"\n attachment_mode = \"file-system\"\n}",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid access_mode \"multi-node\""),
            "{err}"
        );
        let err = parse_hcl(
            "name = \"a\"\ncapability {\n access_mode = \"single-node-writer\"\n attachment_mode = \"nfs\"\n}",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid attachment_mode \"nfs\""),
            "{err}"
        );
        assert!(
            parse_hcl("name = \"a\"\ncapability {\n access_mode = \"single-node-writer\"\n}")
                .is_err()
        );
    }

    #[test]
    fn capacities() {
        assert_eq!(parse_capacity("10MiB").unwrap(), 10 * 1024 * 1024);
        assert_eq!(parse_capacity("10mb").unwrap(), 10_000_000);
        assert_eq!(parse_capacity("1 KiB").unwrap(), 1024);
        assert_eq!(parse_capacity("1kb").unwrap(), 1000);
        assert_eq!(parse_capacity("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_capacity("1TiB").unwrap(), 1 << 40);
        assert_eq!(parse_capacity("1tb").unwrap(), 1_000_000_000_000);
        assert_eq!(parse_capacity("512").unwrap(), 512);
        assert_eq!(parse_capacity("512B").unwrap(), 512);
        assert_eq!(parse_capacity("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_capacity("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_capacity("10mib").unwrap(), 10 << 20);
        assert_eq!(parse_capacity("2tib").unwrap(), 2 << 40);
        assert_eq!(parse_capacity("1 GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_capacity("3b").unwrap(), 3);
        for bad in [
            "",
            "MiB",
            "10 XB",
            "ten",
            "1.2.3GB",
            "99999999999999999999TiB",
        ] {
            assert!(parse_capacity(bad).is_err(), "{bad}");
        }
        let err = parse_hcl("name = \"a\"\ncapacity_min = \"2GiB\"\ncapacity_max = \"1GiB\"\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "capacity_max (1073741824 bytes) is less than capacity_min (2147483648 bytes)"
        );
        let ok =
            parse_hcl("name = \"a\"\ncapacity_min = \"1GiB\"\ncapacity_max = \"1GiB\"\n").unwrap();
        assert_eq!(ok.capacity_min, ok.capacity_max);
        let err = parse_hcl("name = \"a\"\ncapacity_min = \"1 parsec\"\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 2: capacity_min: invalid capacity"),
            "{err}"
        );
    }

    #[test]
    fn humanize_like_nomad() {
        assert_eq!(humanize_bytes(0), "0 B");
        assert_eq!(humanize_bytes(9), "9 B");
        assert_eq!(humanize_bytes(1023), "1023 B");
        assert_eq!(humanize_bytes(1024), "1.0 KiB");
        assert_eq!(humanize_bytes(1536 << 20), "1.5 GiB");
        assert_eq!(humanize_bytes(1536), "1.5 KiB");
        assert_eq!(humanize_bytes(47 << 20), "47 MiB");
        assert_eq!(humanize_bytes(2 << 30), "2.0 GiB");
        assert_eq!(humanize_bytes(50_000_000), "48 MiB");
    }

    #[test]
    fn names() {
        for good in ["a", "test", "a.b-c_d", &"x".repeat(128), "..."] {
            assert!(validate_name("volume", good).is_ok(), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(129)] {
            assert!(validate_name("volume", bad).is_err(), "{bad}");
        }
        assert!(parse_hcl("name = \"../etc\"\n").is_err());
        assert!(parse_hcl("plugin_id = \"mkdir\"\n").is_err());
    }

    #[test]
    fn json_shape_and_warnings() {
        let body = br#"{"Volume": {"Name": "v", "PluginID": "mkdir", "Namespace": "default",
            "RequestedCapacityMinBytes": 100, "RequestedCapacityMaxBytes": 0,
            "RequestedCapabilities": [{"AccessMode": "single-node-reader-only", "AttachmentMode": "block-device"}],
            "Parameters": null, "Constraints": null, "State": "ready", "Topology": {"x": 1}}}"#;
        let parsed = parse_json(body).unwrap();
        assert_eq!(parsed.spec.capacity_min, 100);
        assert_eq!(
            parsed.spec.capabilities[0].access_mode,
            AccessMode::SingleNodeReaderOnly
        );
        assert_eq!(
            parsed.spec.capabilities[0].attachment_mode,
            AttachmentMode::BlockDevice
        );
        assert_eq!(
            parsed.warnings,
            vec!["field \"Topology\" is not supported by nodeward and was ignored".to_string()]
        );
        let parsed =
            parse_json(br#"{"Volume": {"Name": "v", "Parameters": {"uid": 1000, "x": true}}}"#)
                .unwrap();
        assert_eq!(parsed.spec.parameters["uid"], "1000");
        assert_eq!(parsed.spec.parameters["x"], "true");
        assert!(parse_json(br#"{"Volume": {"Name": "v", "Parameters": {"a": [1]}}}"#).is_err());
        assert!(parse_json(br#"{"Volume": {"Name": "v", "Namespace": "prod"}}"#).is_err());
        assert!(parse_json(br#"{"Volume": {"Name": "v", "ID": "nope"}}"#).is_err());
        assert!(parse_json(br#"{"Volume": {"Name": "v", "HostPath": "rel"}}"#).is_err());
        assert!(parse_json(b"[1]").is_err());
        assert!(parse_json(b"{").is_err());
    }

    #[test]
    fn register_spec_and_parameters_attribute() {
        let spec =
            parse_hcl("name = \"r\"\nhost_path = \"/srv/x\"\nparameters = { a = \"b\", n = 3 }\n")
                .unwrap();
        assert_eq!(spec.host_path.as_deref(), Some("/srv/x"));
        assert_eq!(spec.plugin_id, None);
        assert_eq!(spec.parameters.len(), 2);
        assert_eq!(spec.capabilities.len(), 1);
    }

    /// Found while writing the fuzz targets (fuzz/): the HCL parser overflowed the stack of a
    /// nodeward thread on deeply nested input (see `jobspec::hcl`). Deep input is refused with an
    /// error, on any thread.
    #[test]
    fn deeply_nested_input_is_refused_not_a_stack_overflow() {
        use crate::jobspec::hcl::tests::{nested_values, on_agent_stack};
        on_agent_stack(|| {
            for n in [30, 64, 5000] {
                for (kind, value) in nested_values(n) {
                    let src = format!(
                        "name = \"a\"\nplugin_id = \"p\"\nparameters = {{ a = {value} }}\n"
                    );
                    let parsed = parse_hcl(&src);
                    assert!(n < 5000 || parsed.is_err(), "{kind} nested {n} levels");
                }
            }
        });
    }
}
