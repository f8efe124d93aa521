//! What `volume create <file>` and `volume register <file>` send to the agent: the API's request
//! body `{"Volume": {...}}`, built from an HCL specification file or taken from a JSON one.

use std::path::Path;

use crate::volume::spec::{self, SpecError};

/// An HCL specification file as the API's request body `{"Volume": {...}}`. It is validated here,
/// so a mistake is reported with its line before anything is sent, but sent as written: the agent
/// applies the defaults.
pub fn hcl_to_api_json(input: &str) -> Result<serde_json::Value, SpecError> {
    let raw = spec::read_hcl(input)?;
    raw.clone().validate()?;
    Ok(serde_json::json!({ "Volume": raw }))
}

/// What `volume create <file>` and `volume register <file>` send: HCL through
/// [`hcl_to_api_json`], or, for a `.json` file, the API's shape as it is (`{"Volume": {...}}`, or
/// the bare volume object wrapped), left for the agent to validate.
pub fn api_request(file: &Path, text: &str) -> Result<serde_json::Value, SpecError> {
    let cannot_parse = |reason: &dyn std::fmt::Display| {
        SpecError::Syntax(format!("cannot parse {}: {reason}", file.display()))
    };
    let is_json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if !is_json {
        return hcl_to_api_json(text).map_err(|e| match e {
            SpecError::Syntax(m) => cannot_parse(&m),
            other => other,
        });
    }
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| cannot_parse(&e))?;
    match v {
        serde_json::Value::Object(ref o) if o.contains_key("Volume") => Ok(v),
        serde_json::Value::Object(_) => Ok(serde_json::json!({ "Volume": v })),
        _ => Err(SpecError::Invalid(
            "a JSON volume specification must be an object".into(),
        )),
    }
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
        let v = api_request(Path::new("vol.hcl"), EXAMPLE).unwrap();
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
        let v = api_request(Path::new("vol.hcl"), hcl).unwrap();
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

    #[test]
    fn json_requests_are_sent_as_they_are() {
        let wrapped = r#"{"Volume": {"Name": "a", "PluginID": "mkdir"}}"#;
        let v = api_request(Path::new("v.json"), wrapped).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"Volume": {"Name": "a", "PluginID": "mkdir"}})
        );
        let bare = r#"{"Name": "a"}"#;
        let v = api_request(Path::new("v.JSON"), bare).unwrap();
        assert_eq!(v, serde_json::json!({"Volume": {"Name": "a"}}));
        assert!(api_request(Path::new("v.json"), "[1]").is_err());
    }
}
