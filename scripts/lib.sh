# Shared by the scripts: finds or installs what building and testing nodeward needs.
# Sourced, not run.

# Where cargo builds: outside the clone so that builds survive a fresh checkout (gRPC's C core takes
# minutes to compile). Nothing depends on it being there.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/nodeward/target}"

die() {
  echo "error: $*" >&2
  exit 1
}

# need_packages CMD:PACKAGE...: installs the Debian package of every missing command.
need_packages() {
  local missing=()
  local pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing system packages: ${missing[*]} (install them, e.g. 'sudo apt-get install ${missing[*]}')"
  fi
  echo "installing system packages: ${missing[*]}" >&2
  apt-get update -qq >/dev/null || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

# need_rust: cargo and rustc must be there; this machine kind cannot fetch a toolchain.
need_rust() {
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (1.85 or newer, the rust-version in Cargo.toml), e.g. from rustup.rs"
  # gRPC's C core is built with cmake; busybox and ps serve as real programs in the tests.
  need_packages cmake:cmake c++:g++ busybox:busybox curl:curl jq:jq ps:procps
}
