//! The state-file loader (`state::decode`) on arbitrary bytes. A state it accepts must load back
//! from what the agent would write for it, the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;
use nodeward::state;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    common::on_agent_stack(|| {
        let path = Path::new("/fuzz/state.json");
        if let Ok(loaded) = state::decode(path, data) {
            let written = serde_json::to_vec(&loaded).expect("a loaded state serializes");
            let again = state::decode(path, &written)
                .unwrap_or_else(|e| panic!("a written state does not load: {e}"));
            let rewritten = serde_json::to_vec(&again).expect("a loaded state serializes");
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&rewritten),
                "the state changed on its way through the file"
            );
        }
    });
});
