#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, a build check of the fuzz targets, unit and
# end-to-end tests, and the README's first command (scripts/check-dev.sh runs scripts/dev.sh).
# Installs the system packages it needs (cmake, g++, busybox, curl, jq) when it runs as root on
# Debian; otherwise it says exactly what is missing. The first build compiles gRPC's C core
# (about 7 minutes on 2 cores) once per profile: debug for the tests, release for dev.sh; later
# builds reuse $CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_rust
need_python_grpc() {
  # The CSI interop test talks to a plugin written with Python's grpcio, a second gRPC implementation.
  python3 -c 'import grpc, grpc_tools' >/dev/null 2>&1 && return 0
  command -v python3 >/dev/null 2>&1 || need_packages python3:python3 pip3:python3-pip
  echo "installing Python grpcio and grpcio-tools for the CSI interop test" >&2
  python3 -m pip install --quiet --disable-pip-version-check grpcio grpcio-tools 2>/dev/null \
    || python3 -m pip install --quiet --break-system-packages grpcio grpcio-tools \
    || die "cannot install Python grpcio (pip install grpcio grpcio-tools)"
}
need_python_grpc

echo "==> layout (scripts/check-layout.py, docs/architecture.md)" >&2
python3 scripts/check-layout.py
echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check
echo "==> cargo clippy" >&2
cargo clippy --all-targets --locked -- -D warnings
echo "==> cargo check (fuzz targets)" >&2
# scripts/fuzz.sh builds them with nightly-only flags; a plain check on this toolchain is enough to
# keep them compiling against the library (a refactor once broke one unnoticed).
cargo check -p nodeward-fuzz --bins --locked
echo "==> scripts/check-keeper.sh (the keeper links none of the agent)" >&2
bash scripts/check-keeper.sh
echo "==> cargo test" >&2
cargo test --all-targets --locked "$@"
echo "==> scripts/dev.sh (the README's first command)" >&2
bash scripts/check-dev.sh
