#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, a build check of the fuzz targets, unit and
# end-to-end tests, and the README's first command (scripts/check-dev.sh runs scripts/dev.sh).
# Installs the system packages it needs (cmake, g++, busybox, curl, jq, docker.io) when it runs as
# root on Debian; otherwise it says exactly what is missing. As root it starts a private dockerd
# for the docker tests (scripts/docker-env.sh) and stops it at the end. The first build compiles
# gRPC's C core (about 7 minutes on 2 cores) once per profile: debug for the tests, release for
# dev.sh; later builds reuse $CARGO_TARGET_DIR.
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
echo "==> a private dockerd for the docker tests (scripts/docker-env.sh)" >&2
# The docker tests talk to an engine of their own, never the system's (/var/run/docker.sock):
# its socket, data root and bridge live under a short temporary directory (a unix socket path
# has at most 107 bytes), and the trap stops it and removes them however this script ends.
# Without root the docker tests are counted as ignored; as root, when it cannot start, they fail
# saying why.
start_private_dockerd() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "docker tests: no private dockerd (not root: dockerd needs root); they will be counted as ignored" >&2
    return 0
  fi
  if ! (need_packages dockerd:docker.io docker:docker.io ip:iproute2); then
    echo "docker tests: no private dockerd (docker.io could not be installed); they will fail" >&2
    return 0
  fi
  docker_dir=$(mktemp -d /tmp/nwd.XXXXXX)
  trap 'bash scripts/docker-env.sh stop "$docker_dir" >&2 || true; rm -rf "$docker_dir"' EXIT
  # An interrupted run still goes through the EXIT trap.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local endpoint
  if endpoint=$(bash scripts/docker-env.sh start "$docker_dir"); then
    export NODEWARD_TEST_DOCKER_HOST="$endpoint"
    echo "docker tests: private dockerd at $endpoint" >&2
  else
    echo "docker tests: no private dockerd (it did not start: see the lines above); they will fail" >&2
  fi
}
start_private_dockerd

echo "==> cargo test" >&2
# The tests that need root or the private dockerd are #[ignore]d with that reason, so a run
# without root counts them as ignored instead of passing them having checked nothing. As root
# this script selects them too; one that still cannot run (no dockerd) fails and says why.
harness=()
case " $* " in *" -- "*) ;; *) harness=(--) ;; esac
if [ "$(id -u)" -eq 0 ]; then
  harness+=(--include-ignored)
else
  echo "cargo test: not root, so the tests that need root or a dockerd are counted as ignored;" \
    "run this script as root for the whole suite" >&2
  harness=()
fi
cargo test --all-targets --locked "$@" "${harness[@]}"
echo "==> scripts/dev.sh (the README's first command)" >&2
bash scripts/check-dev.sh
