//! The volume specification parsers on arbitrary input: the same bytes go to the HCL parser (a
//! `volume create` file) and to the JSON parser (the API's request body). What the HCL parser
//! accepts must reach the API unchanged through `hcl_to_api_json`, as the CLI sends it, and an
//! accepted JSON body must be accepted back from its own JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::volume::spec;

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        if let Ok(text) = std::str::from_utf8(data) {
            if let Ok(parsed) = spec::parse_hcl(text) {
                let body = spec::hcl_to_api_json(text).expect("an accepted file converts");
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
            let body = serde_json::to_vec(&parsed.spec.to_raw()).expect("JSON serializes");
            let back = spec::parse_json(&body)
                .unwrap_or_else(|e| panic!("the JSON of an accepted volume is refused: {e}"));
            assert_eq!(
                back.spec, parsed.spec,
                "the volume changed on its way through JSON"
            );
        }
    });
});
