//! The HCL jobspec parser on arbitrary text. A job it accepts must come back unchanged through its
//! API JSON and the JSON parser, as `nodeward::jobspec` promises (`job run` of an HCL file relies
//! on it).
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::jobspec;

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        let Ok(src) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(parsed) = jobspec::hcl::parse_job(src) {
            let json = serde_json::to_vec(&parsed.job).expect("an accepted job serializes");
            let back = jobspec::json::parse_job(&json)
                .unwrap_or_else(|e| panic!("the JSON of an accepted HCL job is refused: {e}"));
            assert_eq!(
                back.job, parsed.job,
                "the job changed on its way through JSON"
            );
        }
    });
});
