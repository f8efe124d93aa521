//! The volume specification parsers on arbitrary input: the same bytes go to the HCL parser (a
//! `volume create` file) and to the JSON parser (the API's request body). What the HCL parser
//! accepts must reach the API unchanged through `hcl_to_api_json`, as the CLI sends it, and an
//! accepted JSON body must be accepted back from its own JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::volume::spec::{self, RawCapability, RawVolume, VolumeSpec};

/// The validated spec back in the API's shape, every field as it was read.
fn to_api(spec: &VolumeSpec) -> RawVolume {
    RawVolume {
        id: spec.id.clone().unwrap_or_default(),
        name: spec.name.clone(),
        namespace: spec.namespace.clone(),
        plugin_id: spec.plugin_id.clone().unwrap_or_default(),
        node_id: spec.node_id.clone().unwrap_or_default(),
        node_pool: spec.node_pool.clone().unwrap_or_default(),
        requested_capacity_min_bytes: spec.capacity_min,
        requested_capacity_max_bytes: spec.capacity_max,
        requested_capabilities: spec
            .capabilities
            .iter()
            .map(|c| RawCapability {
                access_mode: c.access_mode.as_str().to_string(),
                attachment_mode: c.attachment_mode.as_str().to_string(),
            })
            .collect(),
        parameters: spec.parameters.clone(),
        host_path: spec.host_path.clone().unwrap_or_default(),
    }
}

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(parsed) = spec::parse_hcl(text) {
                let body = nodeward::cli::volume_request::hcl_to_api_json(text)
                    .expect("an accepted file converts");
                let body = serde_json::to_vec(&body).expect("JSON serializes");
                let back = spec::parse_json(&body)
                    .unwrap_or_else(|e| panic!("the API JSON of an accepted file is refused: {e}"));
                assert_eq!(
                    back.spec, parsed,
                    "the volume changed on its way to the API"
                );
            }
        }
        if let Ok(parsed) = spec::parse_json(data) {
            let body = serde_json::to_vec(&to_api(&parsed.spec)).expect("JSON serializes");
            let back = spec::parse_json(&body)
                .unwrap_or_else(|e| panic!("the JSON of an accepted volume is refused: {e}"));
            assert_eq!(
                back.spec, parsed.spec,
                "the volume changed on its way through JSON"
            );
        }
    });
});
