//! What `volume create <file>` and `volume register <file>` send to the agent: the API's request
//! body, built from an HCL specification file or taken from a JSON one, and which API it goes to.
//! The file's `type` decides: `host` (the default) sends `{"Volume": {...}}` to the host volume
//! API, `csi` sends `{"Volumes": [{...}]}` to the CSI volume API under the volume's ID.

use std::path::Path;

use serde_json::Value;

use crate::csi::volumes::spec as csi_spec;
use crate::volume::spec::{self, SpecError};

/// A request for one of the two volume APIs.
#[derive(Debug, Clone, PartialEq)]
pub enum VolumeRequest {
    /// `{"Volume": {...}}` for `/v1/volume/host/...`.
    Host(Value),
    /// `{"Volumes": [{...}]}` for `/v1/volume/csi/<id>...`.
    Csi { id: String, body: Value },
}

/// An HCL specification file as the API's request body `{"Volume": {...}}`. It is validated here,
/// so a mistake is reported with its line before anything is sent, but sent as written: the agent
/// applies the defaults.
pub fn hcl_to_api_json(input: &str) -> Result<Value, SpecError> {
    let raw = spec::read_hcl(input)?;
    raw.clone().validate()?;
    Ok(serde_json::json!({ "Volume": raw }))
}

/// An HCL CSI volume specification as the CSI API's request, validated here as the host one is.
fn csi_hcl_request(input: &str) -> Result<VolumeRequest, SpecError> {
    let raw = csi_spec::read_hcl(input)?;
    let spec = raw.clone().validate()?;
    Ok(VolumeRequest::Csi {
        id: spec.id,
        body: serde_json::json!({ "Volumes": [raw] }),
    })
}

/// What `volume create <file>` and `volume register <file>` send: HCL through the schema of its
/// `type`, or, for a `.json` file, the API's shape as it is, left for the agent to validate:
/// `{"Volumes": [...]}` or a volume object with `"Type": "csi"` is a CSI volume, `{"Volume":
/// {...}}` or any other object a host volume.
pub fn api_request(file: &Path, text: &str) -> Result<VolumeRequest, SpecError> {
    let cannot_parse = |reason: &dyn std::fmt::Display| {
        SpecError::Syntax(format!("cannot parse {}: {reason}", file.display()))
    };
    let is_json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if !is_json {
        let syntax = |e: SpecError| match e {
            SpecError::Syntax(m) => cannot_parse(&m),
            other => other,
        };
        return match csi_spec::hcl_volume_type(text).map_err(syntax)?.as_str() {
            "csi" => csi_hcl_request(text).map_err(syntax),
            "host" => hcl_to_api_json(text)
                .map(VolumeRequest::Host)
                .map_err(syntax),
            other => Err(SpecError::Invalid(format!(
                "volume type {other:?} is not supported: want \"host\" or \"csi\""
            ))),
        };
    }
    let v: Value = serde_json::from_str(text).map_err(|e| cannot_parse(&e))?;
    let Value::Object(mut top) = v else {
        return Err(SpecError::Invalid(
            "a JSON volume specification must be an object".into(),
        ));
    };
    if let Some(volumes) = top.get("Volumes") {
        let id = volumes
            .get(0)
            .and_then(|v| v.get("ID"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        return csi_json(id, Value::Object(top));
    }
    let mut volume = match top.remove("Volume") {
        Some(Value::Object(v)) => v,
        Some(_) => {
            return Err(SpecError::Invalid(
                "\"Volume\" must be a JSON object".into(),
            ))
        }
        None => top,
    };
    let kind = volume
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or("host")
        .to_string();
    match kind.as_str() {
        "csi" => {
            volume.remove("Type");
            let id = volume
                .get("ID")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            csi_json(id, serde_json::json!({ "Volumes": [volume] }))
        }
        "host" => {
            volume.remove("Type");
            Ok(VolumeRequest::Host(serde_json::json!({ "Volume": volume })))
        }
        other => Err(SpecError::Invalid(format!(
            "volume type {other:?} is not supported: want \"host\" or \"csi\""
        ))),
    }
}

/// A CSI request needs its volume's ID for the path.
fn csi_json(id: String, body: Value) -> Result<VolumeRequest, SpecError> {
    if id.is_empty() {
        return Err(SpecError::Invalid(
            "validation: missing volume id (\"ID\" of the volume)".into(),
        ));
    }
    Ok(VolumeRequest::Csi { id, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::spec::tests::EXAMPLE;
    use crate::volume::spec::{parse_hcl, parse_json};

    #[test]
    fn hcl_round_trips_through_json() {
        let spec = parse_hcl(EXAMPLE).unwrap();
        let body = serde_json::to_vec(&hcl_to_api_json(EXAMPLE).unwrap()).unwrap();
        let parsed = parse_json(&body).unwrap();
        assert_eq!(parsed.spec, spec);
        assert!(parsed.warnings.is_empty());
    }

    #[test]
    fn hcl_request_is_the_api_shape_as_written() {
        let VolumeRequest::Host(v) = api_request(Path::new("vol.hcl"), EXAMPLE).unwrap() else {
            panic!("a host volume")
        };
        assert_eq!(
            v,
            serde_json::json!({"Volume": {
                "Name": "test", "PluginID": "mkdir",
                "RequestedCapacityMinBytes": 10 * 1024 * 1024,
                "RequestedCapacityMaxBytes": 1024u64 * 1024 * 1024,
                "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}],
                "Parameters": {"mode": "0755", "uid": "1000"}
            }})
        );
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
        let VolumeRequest::Host(v) = api_request(Path::new("vol.hcl"), hcl).unwrap() else {
            panic!("a host volume")
        };
        assert_eq!(v["Volume"]["HostPath"], "/srv/existing");
        assert_eq!(
            v["Volume"]["RequestedCapabilities"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let err = api_request(Path::new("v.hcl"), "name = ").unwrap_err();
        assert!(err.to_string().starts_with("cannot parse v.hcl:"), "{err}");
    }

    /// The file's type picks the API: an HCL `type = "csi"` or a JSON volume with `"Type":
    /// "csi"` (or the CSI API's `{"Volumes": [...]}`) goes to the CSI volume API under its ID.
    #[test]
    fn csi_files_go_to_the_csi_api() {
        use crate::csi::volumes::spec::tests::EXAMPLE as CSI;
        let VolumeRequest::Csi { id, body } = api_request(Path::new("v.hcl"), CSI).unwrap() else {
            panic!("a CSI volume")
        };
        assert_eq!(id, "data");
        assert_eq!(body["Volumes"][0]["PluginID"], "hostpath");
        assert_eq!(body["Volumes"][0]["Secrets"]["token"], "s3cret");
        let json = r#"{"Type": "csi", "ID": "d", "PluginID": "p"}"#;
        assert_eq!(
            api_request(Path::new("v.json"), json).unwrap(),
            VolumeRequest::Csi {
                id: "d".into(),
                body: serde_json::json!({"Volumes": [{"ID": "d", "PluginID": "p"}]})
            }
        );
        let api = r#"{"Volumes": [{"ID": "d"}]}"#;
        assert!(matches!(
            api_request(Path::new("v.json"), api).unwrap(),
            VolumeRequest::Csi { id, .. } if id == "d"
        ));
        // Checked before anything is sent.
        let err = api_request(Path::new("v.hcl"), "type = \"csi\"\nid = \"d\"\n").unwrap_err();
        assert!(
            err.to_string().starts_with("validation: missing plugin id"),
            "{err}"
        );
        let err = api_request(Path::new("v.hcl"), "type = \"nfs\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume type \"nfs\" is not supported: want \"host\" or \"csi\""
        );
        let err = api_request(Path::new("v.json"), r#"{"Type": "csi"}"#).unwrap_err();
        assert!(err.to_string().contains("missing volume id"), "{err}");
    }

    #[test]
    fn json_requests_are_sent_as_they_are() {
        let wrapped = r#"{"Volume": {"Name": "a", "PluginID": "mkdir"}}"#;
        let v = api_request(Path::new("v.json"), wrapped).unwrap();
        assert_eq!(
            v,
            VolumeRequest::Host(serde_json::json!({"Volume": {"Name": "a", "PluginID": "mkdir"}}))
        );
        let bare = r#"{"Name": "a"}"#;
        let v = api_request(Path::new("v.JSON"), bare).unwrap();
        assert_eq!(
            v,
            VolumeRequest::Host(serde_json::json!({"Volume": {"Name": "a"}}))
        );
        assert!(api_request(Path::new("v.json"), "[1]").is_err());
    }
}
