//! The CSI volume specification: what `volume create` and `volume register` read when the file
//! says `type = "csi"` (Nomad's CSI volume specification).
//!
//! As for host volumes ([`crate::volume::spec`]), two inputs give one domain type. HCL files are
//! read by the shared front-end: an unknown attribute or block is an error naming it and its
//! line. JSON is Nomad's API shape, a [`RawCsiVolume`] in `{"Volumes": [...]}`; fields nodeward
//! does not implement are ignored and reported as warnings, fields an answer carries are ignored
//! silently. [`RawCsiVolume::validate`] turns either into a [`CsiVolumeSpec`] once, with Nomad's
//! `validation: ...` wording for what is missing.
//!
//! ```hcl
//! type         = "csi"
//! id           = "data"             # required: the volume's ID on this node
//! name         = "data"             # sent to the plugin as the name to create; default: the ID
//! plugin_id    = "hostpath"         # required
//! external_id  = "vol-0a1b"         # volume register only: the plugin's ID of existing storage
//! capacity_min = "1GiB"             # create only, as for host volumes
//! capacity_max = "2GiB"
//! capability { access_mode = "single-node-writer"  attachment_mode = "file-system" }  # one or more
//! mount_options { fs_type = "ext4"  mount_flags = ["noatime"] }
//! secrets    { token = "..." }      # handed to the plugin; never shown by the API
//! parameters { type = "fast" }      # create: handed to the plugin's CreateVolume
//! context    { path = "/srv" }      # register only: the plugin's volume_context
//! topology_request {
//!   required  { topology { segments { rack = "R1" } } }
//!   preferred { topology { segments { rack = "R2" } } }
//! }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::jobspec::validate::validate_name;
use crate::records::{CsiCapability, CsiMountOptions, CsiTopologyRequest, Topology};
use crate::volume::spec::{invalid_mode, parse_capacity, SpecError, NAMESPACE};

/// A validated CSI volume specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiVolumeSpec {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub plugin_id: String,
    /// Only for `volume register`.
    pub external_id: Option<String>,
    /// Bytes; 0 means not requested. Never above `i64::MAX` (CSI's capacities are signed).
    pub capacity_min: u64,
    /// Bytes; 0 means not requested; never below `capacity_min` when both are set.
    pub capacity_max: u64,
    /// At least one.
    pub capabilities: Vec<CsiCapability>,
    pub mount_options: Option<CsiMountOptions>,
    pub secrets: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
    pub context: BTreeMap<String, String>,
    pub topology_request: Option<CsiTopologyRequest>,
}

/// A CSI volume before validation, in Nomad's API field names (`api.CSIVolume`). It is also what
/// the CLI sends after reading an HCL file: only the fields the file sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RawCsiVolume {
    #[serde(rename = "ID", skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "ExternalID", skip_serializing_if = "String::is_empty")]
    pub external_id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(rename = "PluginID", skip_serializing_if = "String::is_empty")]
    pub plugin_id: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub requested_capacity_min: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub requested_capacity_max: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested_capabilities: Vec<RawCapability>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_options: Option<CsiMountOptions>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_topologies: Option<CsiTopologyRequest>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `{"AccessMode": "...", "AttachmentMode": "..."}` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RawCapability {
    pub access_mode: String,
    pub attachment_mode: String,
}

/// The JSON fields of a CSI volume that nodeward reads.
const JSON_FIELDS: [&str; 13] = [
    "ID",
    "Name",
    "ExternalID",
    "Namespace",
    "PluginID",
    "RequestedCapacityMin",
    "RequestedCapacityMax",
    "RequestedCapabilities",
    "MountOptions",
    "Secrets",
    "Parameters",
    "Context",
    "RequestedTopologies",
];

/// Fields a volume answer carries that a client may send back unchanged; ignored silently.
const JSON_OUTPUT_FIELDS: [&str; 25] = [
    "AccessMode",
    "AttachmentMode",
    "Capacity",
    "Topologies",
    "ReadAllocs",
    "WriteAllocs",
    "ReadClaims",
    "WriteClaims",
    "PastClaims",
    "Allocations",
    "Schedulable",
    "Provider",
    "ProviderVersion",
    "ControllerRequired",
    "ControllersHealthy",
    "ControllersExpected",
    "NodesHealthy",
    "NodesExpected",
    "ResourceExhausted",
    "CurrentReaders",
    "CurrentWriters",
    "CreateIndex",
    "ModifyIndex",
    "CreateTime",
    "ModifyTime",
];

impl RawCsiVolume {
    /// Validates once: what is missing is reported together, in Nomad's words (`validation:
    /// missing volume id, missing plugin id`); then each value is checked.
    pub fn validate(self) -> Result<CsiVolumeSpec, SpecError> {
        let mut missing = Vec::new();
        if self.id.is_empty() {
            missing.push("missing volume id");
        }
        if self.plugin_id.is_empty() {
            missing.push("missing plugin id");
        }
        if self.requested_capabilities.is_empty() {
            missing.push("must include at least one capability block");
        }
        if !missing.is_empty() {
            return Err(SpecError::Invalid(format!(
                "validation: {}",
                missing.join(", ")
            )));
        }
        // The ID names the volume in API paths and in the staging and publish directories.
        validate_name("volume", &self.id).map_err(|e| SpecError::Invalid(e.to_string()))?;
        let name = if self.name.is_empty() {
            self.id.clone()
        } else {
            self.name
        };
        if name.len() > 128 || name.chars().any(char::is_control) {
            return Err(SpecError::Invalid(format!(
                "invalid volume name {name:?}: at most 128 bytes and no control characters"
            )));
        }
        if !self.namespace.is_empty() && self.namespace != NAMESPACE {
            return Err(SpecError::Invalid(format!(
                "namespace {:?} does not exist: nodeward has only the \"default\" namespace",
                self.namespace
            )));
        }
        let (min, max) = (self.requested_capacity_min, self.requested_capacity_max);
        for (what, bytes) in [("capacity_min", min), ("capacity_max", max)] {
            if i64::try_from(bytes).is_err() {
                return Err(SpecError::Invalid(format!(
                    "{what} ({bytes} bytes) is larger than CSI allows ({} bytes)",
                    i64::MAX
                )));
            }
        }
        if min > 0 && max > 0 && max < min {
            return Err(SpecError::Invalid(format!(
                "capacity_max ({max} bytes) is less than capacity_min ({min} bytes)"
            )));
        }
        let mut capabilities = Vec::new();
        for c in &self.requested_capabilities {
            let cap = CsiCapability {
                access_mode: c.access_mode.parse().map_err(invalid_mode)?,
                attachment_mode: c.attachment_mode.parse().map_err(invalid_mode)?,
            };
            if !capabilities.contains(&cap) {
                capabilities.push(cap);
            }
        }
        for (what, map) in [
            ("secrets", &self.secrets),
            ("parameters", &self.parameters),
            ("context", &self.context),
        ] {
            if map.keys().any(String::is_empty) {
                return Err(SpecError::Invalid(format!("empty key in {what}")));
            }
        }
        if let Some(t) = &self.requested_topologies {
            if t.required
                .iter()
                .chain(&t.preferred)
                .any(|t| t.segments.is_empty())
            {
                return Err(SpecError::Invalid(
                    "a topology in topology_request has no segments".into(),
                ));
            }
        }
        Ok(CsiVolumeSpec {
            id: self.id,
            name,
            namespace: NAMESPACE.to_string(),
            plugin_id: self.plugin_id,
            external_id: (!self.external_id.is_empty()).then_some(self.external_id),
            capacity_min: min,
            capacity_max: max,
            capabilities,
            mount_options: self.mount_options,
            secrets: self.secrets,
            parameters: self.parameters,
            context: self.context,
            topology_request: self
                .requested_topologies
                .filter(|t| !t.required.is_empty() || !t.preferred.is_empty()),
        })
    }
}

/// A parsed specification and what the user should know about the input (ignored JSON fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCsiVolume {
    pub spec: CsiVolumeSpec,
    pub warnings: Vec<String>,
}

/// Parses an API request body `{"Volumes": [{...}]}` holding one volume (a bare volume object
/// is accepted too).
pub fn parse_json(body: &[u8]) -> Result<ParsedCsiVolume, SpecError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| SpecError::Syntax(format!("invalid JSON: {e}")))?;
    let Value::Object(mut top) = value else {
        return Err(SpecError::Syntax("expected a JSON object".to_string()));
    };
    let volume = match top.remove("Volumes") {
        Some(Value::Array(mut volumes)) if volumes.len() == 1 => volumes.remove(0),
        Some(Value::Array(volumes)) => {
            return Err(SpecError::Invalid(format!(
                "\"Volumes\" must hold exactly one volume, got {}",
                volumes.len()
            )))
        }
        Some(_) => {
            return Err(SpecError::Syntax(
                "\"Volumes\" must be a list of volumes".to_string(),
            ))
        }
        None => Value::Object(top),
    };
    let Value::Object(fields) = volume else {
        return Err(SpecError::Syntax(
            "a volume must be a JSON object".to_string(),
        ));
    };
    let mut warnings = Vec::new();
    let mut kept = Map::new();
    for (key, val) in fields {
        if JSON_FIELDS.contains(&key.as_str()) {
            // Nomad's clients send null for empty maps and lists.
            if !val.is_null() {
                kept.insert(key, val);
            }
        } else if !JSON_OUTPUT_FIELDS.contains(&key.as_str()) && !is_empty_json(&val) {
            warnings.push(format!(
                "field {key:?} is not supported by nodeward and was ignored"
            ));
        }
    }
    for map in ["Secrets", "Parameters", "Context"] {
        // Strings; numbers and booleans are taken as their text, as HCL does.
        if let Some(Value::Object(m)) = kept.get_mut(map) {
            for v in m.values_mut() {
                if v.is_number() || v.is_boolean() {
                    *v = Value::String(v.to_string());
                }
            }
        }
    }
    let raw: RawCsiVolume = serde_json::from_value(Value::Object(kept))
        .map_err(|e| SpecError::Invalid(format!("invalid volume: {e}")))?;
    Ok(ParsedCsiVolume {
        spec: raw.validate()?,
        warnings,
    })
}

fn is_empty_json(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_u64() == Some(0),
    }
}

/// The top-level attributes and blocks of a CSI volume specification.
const HCL_TOP: [&str; 15] = [
    "type",
    "id",
    "name",
    "namespace",
    "plugin_id",
    "external_id",
    "capacity_min",
    "capacity_max",
    "capability",
    "mount_options",
    "secrets",
    "parameters",
    "context",
    "topology_request",
    // Nomad's `volume create` also reads these; nodeward refuses them by name below.
    "snapshot_id",
];

/// Reads an HCL specification file with `type = "csi"` into the raw volume, as written (no
/// defaults applied). Line numbers in errors point at the input.
pub fn read_hcl(input: &str) -> Result<RawCsiVolume, SpecError> {
    crate::hcl::read(input, |doc| {
        let what = "volume specification";
        let top = doc.source.body_value(what, &doc.body, &HCL_TOP)?;
        // The blocks' own attributes, checked with their lines.
        for block in doc.body.blocks() {
            let ident = block.ident.as_str();
            let allowed: &[&str] = match ident {
                "capability" => &["access_mode", "attachment_mode"],
                "mount_options" => &["fs_type", "mount_flags"],
                "topology_request" => &["required", "preferred"],
                _ => &[],
            };
            doc.source
                .body_value(&format!("{ident} block of {what}"), &block.body, allowed)?;
        }
        from_hcl_value(top)
    })
}

fn from_hcl_value(mut top: Map<String, Value>) -> Result<RawCsiVolume, SpecError> {
    match top.remove("type") {
        Some(Value::String(t)) if t == "csi" => {}
        Some(other) => {
            return Err(SpecError::Invalid(format!(
                "type must be \"csi\" in a CSI volume specification, got {other}"
            )))
        }
        None => {
            return Err(SpecError::Invalid(
                "a CSI volume specification needs type = \"csi\"".into(),
            ))
        }
    }
    if top.contains_key("snapshot_id") {
        return Err(SpecError::Unknown(
            "snapshot_id is not supported by nodeward: volumes are created empty".into(),
        ));
    }
    let text = |top: &mut Map<String, Value>, key: &str| -> Result<String, SpecError> {
        match top.remove(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(SpecError::Invalid(format!("{key} must be a string"))),
        }
    };
    let capacity = |top: &mut Map<String, Value>, key: &str| -> Result<u64, SpecError> {
        let parsed = match top.remove(key) {
            None => return Ok(0),
            Some(Value::String(s)) => parse_capacity(&s),
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| SpecError::Invalid(format!("invalid capacity {n}"))),
            Some(_) => Err(SpecError::Invalid("must be a string".to_string())),
        };
        parsed.map_err(|e| SpecError::Invalid(format!("{key}: {e}")))
    };
    let mut raw = RawCsiVolume {
        id: text(&mut top, "id")?,
        name: text(&mut top, "name")?,
        external_id: text(&mut top, "external_id")?,
        namespace: text(&mut top, "namespace")?,
        plugin_id: text(&mut top, "plugin_id")?,
        requested_capacity_min: capacity(&mut top, "capacity_min")?,
        requested_capacity_max: capacity(&mut top, "capacity_max")?,
        ..RawCsiVolume::default()
    };
    for cap in blocks(top.remove("capability"), "capability")? {
        let get = |k: &str| cap.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (access_mode, attachment_mode) = (get("access_mode"), get("attachment_mode"));
        if access_mode.is_empty() || attachment_mode.is_empty() {
            return Err(SpecError::Invalid(
                "capability needs access_mode and attachment_mode (strings)".into(),
            ));
        }
        raw.requested_capabilities.push(RawCapability {
            access_mode,
            attachment_mode,
        });
    }
    if let Some(opts) = single(top.remove("mount_options"), "mount_options")? {
        let fs_type = match opts.get("fs_type") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(SpecError::Invalid("fs_type must be a string".into())),
        };
        let mount_flags = match opts.get("mount_flags") {
            None => Vec::new(),
            Some(Value::Array(flags)) => flags
                .iter()
                .map(|f| {
                    f.as_str().map(String::from).ok_or_else(|| {
                        SpecError::Invalid("mount_flags must be a list of strings".into())
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(SpecError::Invalid(
                    "mount_flags must be a list of strings".into(),
                ))
            }
        };
        raw.mount_options = Some(CsiMountOptions {
            fs_type,
            mount_flags,
        });
    }
    raw.secrets = string_map(top.remove("secrets"), "secrets")?;
    raw.parameters = string_map(top.remove("parameters"), "parameters")?;
    raw.context = string_map(top.remove("context"), "context")?;
    if let Some(req) = single(top.remove("topology_request"), "topology_request")? {
        let mut request = CsiTopologyRequest::default();
        for (key, out) in [
            ("required", &mut request.required),
            ("preferred", &mut request.preferred),
        ] {
            if let Some(side) = single(req.get(key).cloned(), key)? {
                for topology in blocks(side.get("topology").cloned(), "topology")? {
                    let segments = topology.get("segments").cloned();
                    if topology.keys().any(|k| k != "segments") {
                        return Err(SpecError::Unknown(format!(
                            "a topology block in topology_request {key} holds only segments"
                        )));
                    }
                    out.push(Topology {
                        segments: string_map(segments, "segments")?,
                    });
                }
            }
        }
        raw.requested_topologies = Some(request);
    }
    Ok(raw)
}

/// The objects of a repeatable block (an array of objects as `body_value` reads blocks).
fn blocks(value: Option<Value>, what: &str) -> Result<Vec<Map<String, Value>>, SpecError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(o) => Ok(o),
                _ => Err(SpecError::Invalid(format!("{what} must be a block"))),
            })
            .collect(),
        Some(_) => Err(SpecError::Invalid(format!("{what} must be a block"))),
    }
}

/// The object of a block that may be given once.
fn single(value: Option<Value>, what: &str) -> Result<Option<Map<String, Value>>, SpecError> {
    let mut all = blocks(value, what)?;
    if all.len() > 1 {
        return Err(SpecError::Invalid(format!(
            "block {what:?} is given more than once"
        )));
    }
    Ok(all.pop())
}

/// A map of strings, written as an attribute (`parameters = { a = "b" }`) or a block
/// (`parameters { a = "b" }`); numbers and booleans are taken as their text.
fn string_map(value: Option<Value>, what: &str) -> Result<BTreeMap<String, String>, SpecError> {
    let object = match value {
        None => return Ok(BTreeMap::new()),
        Some(Value::Object(o)) => o,
        Some(Value::Array(_)) => single(value, what)?.unwrap_or_default(),
        Some(_) => return Err(SpecError::Invalid(format!("{what} must be a map"))),
    };
    object
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(_) | Value::Bool(_) => Ok((k, v.to_string())),
            _ => Err(SpecError::Invalid(format!(
                "{what}: {k:?} must be a string, number or boolean"
            ))),
        })
        .collect()
}

/// The `type` attribute of a volume specification file in HCL (`host` when it has none), read
/// without the rest of the schema: the CLI picks the specification, and the endpoint, by it.
pub fn hcl_volume_type(input: &str) -> Result<String, SpecError> {
    crate::hcl::read(input, |doc| {
        let Some(attr) = doc.body.get_attribute("type") else {
            return Ok("host".to_string());
        };
        doc.source
            .string("volume specification", attr)
            .map_err(SpecError::from)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::records::{AttachmentMode, CsiAccessMode};

    pub(crate) const EXAMPLE: &str = r#"
type         = "csi"
id           = "data"
name         = "data-volume"
plugin_id    = "hostpath"
capacity_min = "1MiB"
capacity_max = "4MiB"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
capability { access_mode = "multi-node-reader-only"  attachment_mode = "file-system" }
mount_options { fs_type = "ext4"  mount_flags = ["noatime"] }
secrets { token = "s3cret" }
parameters = { kind = "fast", copies = 2 }
topology_request {
  required {
    topology { segments { rack = "R1" } }
  }
  preferred {
    topology { segments = { rack = "R2", zone = "z" } }
  }
}
"#;

    #[test]
    fn the_hcl_example_reads_and_validates() {
        let spec = read_hcl(EXAMPLE).unwrap().validate().unwrap();
        assert_eq!(spec.id, "data");
        assert_eq!(spec.name, "data-volume");
        assert_eq!(spec.plugin_id, "hostpath");
        assert_eq!((spec.capacity_min, spec.capacity_max), (1 << 20, 4 << 20));
        assert_eq!(
            spec.capabilities,
            vec![
                CsiCapability {
                    access_mode: CsiAccessMode::SingleNodeWriter,
                    attachment_mode: AttachmentMode::FileSystem
                },
                CsiCapability {
                    access_mode: CsiAccessMode::MultiNodeReaderOnly,
                    attachment_mode: AttachmentMode::FileSystem
                }
            ]
        );
        let opts = spec.mount_options.unwrap();
        assert_eq!(
            (opts.fs_type.as_str(), opts.mount_flags),
            ("ext4", vec!["noatime".to_string()])
        );
        assert_eq!(spec.secrets["token"], "s3cret");
        assert_eq!(spec.parameters["copies"], "2");
        let topo = spec.topology_request.unwrap();
        assert_eq!(topo.required[0].segments["rack"], "R1");
        assert_eq!(topo.preferred[0].segments["zone"], "z");
        assert_eq!(spec.external_id, None);
        assert_eq!(hcl_volume_type(EXAMPLE).unwrap(), "csi");
        assert_eq!(hcl_volume_type("name = \"x\"\n").unwrap(), "host");
    }

    /// The CLI sends an HCL file as the API's JSON; the agent reads back the same spec.
    #[test]
    fn hcl_round_trips_through_the_api_shape() {
        let raw = read_hcl(EXAMPLE).unwrap();
        let body = serde_json::json!({ "Volumes": [raw.clone()] });
        let parsed = parse_json(body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.spec, raw.validate().unwrap());
        assert!(parsed.warnings.is_empty());
        assert_eq!(body["Volumes"][0]["RequestedCapacityMin"], 1 << 20);
        assert_eq!(body["Volumes"][0]["MountOptions"]["FSType"], "ext4");
        assert_eq!(
            body["Volumes"][0]["RequestedTopologies"]["Required"][0]["Segments"]["rack"],
            "R1"
        );
    }

    #[test]
    fn what_is_missing_is_said_at_once_in_nomads_words() {
        let err = read_hcl("type = \"csi\"\nname = \"x\"\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "validation: missing volume id, missing plugin id, must include at least one capability block"
        );
        let err = parse_json(br#"{"Volumes": []}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"Volumes\" must hold exactly one volume, got 0"
        );
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let base = "type = \"csi\"\nid = \"v\"\nplugin_id = \"p\"\n";
        let cap = "capability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n";
        let check = |extra: &str, want: &str| {
            let err = read_hcl(&format!("{base}{extra}"))
                .and_then(RawCsiVolume::validate)
                .unwrap_err();
            assert!(err.to_string().contains(want), "{err} (want {want:?})");
        };
        check(
            "size = 3\n",
            "unknown attribute \"size\" in volume specification at line 4",
        );
        check(
            "capability {\n  access_mode = \"single-node-writer\"\n  mode = \"x\"\n}\n",
            "unknown attribute \"mode\" in capability block of volume specification at line 6",
        );
        check(
            "capability {\n  access_mode = \"single-node-single-writer\"\n  attachment_mode = \"file-system\"\n}\n",
            "invalid access_mode \"single-node-single-writer\": want one of single-node-reader-only,",
        );
        check(
            "capability {\n  access_mode = \"single-node-writer\"\n}\n",
            "capability needs access_mode and attachment_mode",
        );
        check(
            &format!("{cap}capacity_min = \"2MiB\"\ncapacity_max = \"1MiB\"\n"),
            "capacity_max (1048576 bytes) is less than capacity_min (2097152 bytes)",
        );
        check(
            &format!("{cap}snapshot_id = \"s\"\n"),
            "snapshot_id is not supported",
        );
        check(
            &format!("{cap}mount_options {{ fs_type = 3 }}\n"),
            "fs_type must be a string",
        );
        let err = read_hcl(&format!(
            "type = \"host\"\nid = \"v\"\nplugin_id = \"p\"\n{cap}"
        ))
        .unwrap_err();
        assert!(err.to_string().contains("type must be \"csi\""), "{err}");
        let err = read_hcl(&format!(
            "type = \"csi\"\nid = \"../x\"\nplugin_id = \"p\"\n{cap}"
        ))
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(
            err.to_string().starts_with("invalid volume name \"../x\""),
            "{err}"
        );
        let err = parse_json(
            br#"{"Volumes": [{"ID": "v", "PluginID": "p", "Namespace": "prod",
                 "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]}]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("namespace \"prod\""), "{err}");
    }

    #[test]
    fn json_ignores_answer_fields_and_warns_about_unknown_ones() {
        let parsed = parse_json(
            br#"{"Volumes": [{"ID": "v", "PluginID": "p", "ExternalID": "e",
                 "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "block-device"}],
                 "Context": {"n": 1}, "Schedulable": true, "ReadAllocs": {}, "CloneID": "c",
                 "Secrets": null}]}"#,
        )
        .unwrap();
        assert_eq!(parsed.spec.external_id.as_deref(), Some("e"));
        assert_eq!(parsed.spec.name, "v", "the name defaults to the ID");
        assert_eq!(parsed.spec.context["n"], "1");
        assert_eq!(
            parsed.spec.capabilities[0].attachment_mode,
            AttachmentMode::BlockDevice
        );
        assert_eq!(
            parsed.warnings,
            vec!["field \"CloneID\" is not supported by nodeward and was ignored".to_string()]
        );
    }
}
