#!/bin/sh
# Installs what nodeward's tests use beyond the Rust toolchain.
# - cmake: builds gRPC's C core (grpcio-sys).
# - Python's grpcio: a second, independent gRPC implementation for the CSI interoperability test
#   (tests/csi_supervisor.rs skips that test, saying so, when it is missing).
set -eu
if ! command -v cmake >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        apt-get install -y cmake
    else
        echo "install cmake with your package manager" >&2
        exit 1
    fi
fi
if ! python3 -c 'import grpc' >/dev/null 2>&1; then
    python3 -m pip install grpcio
fi
