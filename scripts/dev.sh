#!/usr/bin/env bash
# Runs a throw-away agent (`nodeward agent -dev`): data in a fresh temporary directory, debug
# logging, API on http://127.0.0.1:4656. Extra arguments go to the agent.
# Installs the system packages the build needs, like scripts/test.sh. The first release build
# compiles gRPC's C core (about 7 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_rust
# The agent starts its task keeper from the same directory: build both, run the agent.
cargo build --release --locked --bin nodeward-keeper
exec cargo run --release --locked --bin nodeward -- agent -dev "$@"
