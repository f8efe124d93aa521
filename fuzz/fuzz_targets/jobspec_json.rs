//! The JSON jobspec parser (the body of `PUT /v1/jobs`) on arbitrary bytes. A job it accepts must
//! be accepted back unchanged from its own JSON, which is what the state file stores.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::jobspec;

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        if let Ok(parsed) = jobspec::json::parse_job(data) {
            let json = serde_json::to_vec(&parsed.job).expect("an accepted job serializes");
            let back = jobspec::json::parse_job(&json)
                .unwrap_or_else(|e| panic!("the JSON of an accepted job is refused: {e}"));
            assert_eq!(
                back.job, parsed.job,
                "the job changed on its way through JSON"
            );
        }
    });
});
