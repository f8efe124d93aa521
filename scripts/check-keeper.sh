#!/usr/bin/env bash
# Checks that the task keeper stays tiny (live-restore.md: "no gRPC, no HCL, no HTTP linked in"):
# builds nodeward-keeper and looks at what it links. The keeper is its own crate (src/keeper/)
# for this reason: built from the agent's library, it carried gRPC's C core and libstdc++ (their
# static initialisers keep them in however little of the library is used).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_rust
need_packages nm:binutils ldd:libc-bin

cargo build --locked --quiet --bin nodeward-keeper
bin="$CARGO_TARGET_DIR/debug/nodeward-keeper"
[ -x "$bin" ] || die "no $bin after the build"
# One symbol table, read once; an empty one (nm failed, a stripped binary) proves nothing.
syms=$(nm -C "$bin")
[ -n "$syms" ] || die "nm found no symbols in $bin: nothing to check"
bad=0
for what in grpc hcl tiny_http ureq prost env_logger; do
  n=$(grep -ci -- "$what" <<<"$syms" || true)
  if [ "$n" -ne 0 ]; then
    echo "check-keeper: $bin links $n symbols of $what" >&2
    bad=1
  fi
done
if ldd "$bin" | grep -q 'libstdc++'; then
  echo "check-keeper: $bin links libstdc++" >&2
  bad=1
fi
[ "$bad" -eq 0 ] || die "the keeper links more than it should (see above)"
echo "check-keeper: ok ($(ldd "$bin" | grep -c '=>') shared libraries, no gRPC, HCL or HTTP)" >&2
