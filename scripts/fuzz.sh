#!/usr/bin/env bash
# Fuzzes nodeward's parsers with cargo-fuzz (libFuzzer): each target for SECONDS (default 600),
# at most JOBS (default 1) targets at a time, at the lowest CPU priority. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      # all targets when none is named
#   JOBS=2 scripts/fuzz.sh 600
#
# Installs cargo-fuzz when it is missing (`cargo install cargo-fuzz`, a few minutes). cargo-fuzz
# needs nightly compiler flags (-Zsanitizer, sancov passes); on a stable toolchain the script sets
# RUSTC_BOOTSTRAP=1, which lets stable rustc accept them. FUZZ_SANITIZER=none builds without
# AddressSanitizer if a toolchain lacks its runtime. The first build compiles gRPC's C core again
# for the fuzz target directory (about 7 minutes on 2 cores).
#
# An input that panics, runs out of memory (-rss_limit_mb=2048) or takes longer than 10 s
# (-timeout=10) stops its target and is saved under fuzz/artifacts/<target>/; reproduce it with
# `cargo fuzz run <target> fuzz/artifacts/<target>/<file>` (same environment as below). New
# coverage is added to fuzz/corpus/<target>/, which is minimised (`cargo fuzz cmin`) after the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_rust

seconds="${1:-600}"
shift || true
targets=("$@")
jobs="${JOBS:-1}"
sanitizer="${FUZZ_SANITIZER:-address}"
target_dir="${FUZZ_TARGET_DIR:-$HOME/.cache/nodeward/target-fuzz}"
logs="${FUZZ_LOGS:-$target_dir/logs}"

case "$seconds" in
  '' | *[!0-9]*) die "SECONDS must be a whole number, got: $seconds" ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked || die "cargo install cargo-fuzz failed"
fi
if ! rustc --version | grep -q nightly; then
  export RUSTC_BOOTSTRAP=1
fi
# The fuzz crate is a member of nodeward's workspace, whose [profile.release] (thin LTO, 4 codegen
# units) is made for the shipped agent. Fuzz builds keep cargo's default release profile, as when
# the fuzz crate was a workspace of its own: quicker to rebuild after a change to the library.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16

if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

# -a: debug assertions and overflow checks, so that arithmetic overflow is a finding.
fuzz_args=(--fuzz-dir fuzz --sanitizer "$sanitizer" -a --target-dir "$target_dir")

echo "building ${#targets[@]} fuzz targets" >&2
nice -n 19 cargo fuzz build "${fuzz_args[@]}" || die "cargo fuzz build failed"

mkdir -p "$logs"
run_one() {
  local t="$1"
  local log="$logs/$t.log"
  echo "fuzzing $t for ${seconds}s (log: $log)" >&2
  if nice -n 19 cargo fuzz run "${fuzz_args[@]}" "$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    >"$log" 2>&1; then
    local runs speed
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    echo "$t: ok, ${runs:-?} runs, ${speed:-?} execs/s" >&2
  else
    echo "$t: FAILED, see $log and fuzz/artifacts/$t/" >&2
    return 1
  fi
}

failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done

# Set-cover merging keeps fewer inputs than plain merging (about 2 MB for all targets after 10 minutes
# each) and still every feature.
for t in "${targets[@]}"; do
  nice -n 19 cargo fuzz cmin "${fuzz_args[@]}" "$t" -- -set_cover_merge=1 -rss_limit_mb=2048 -timeout=10 \
    >>"$logs/$t.log" 2>&1 || echo "$t: cmin failed, see $logs/$t.log" >&2
done
du -sh fuzz/corpus >&2
exit "$failed"
