#!/usr/bin/env bash
# A private Docker engine for nodeward's tests: its own socket, data root, exec root, pidfile and
# network bridge under one directory, so it never touches the system's dockerd
# (/var/run/docker.sock) nor another private one. Needs root and Debian's docker.io.
#
#   scripts/docker-env.sh start DIR    start dockerd, wait for it, build busybox:1; prints the
#                                      endpoint (unix://DIR/docker.sock) on stdout
#   scripts/docker-env.sh stop DIR     stop it (TERM, bounded wait, KILL), unmount and remove
#                                      its data, delete its bridge
#   scripts/docker-env.sh image DIR TAG [BINARY...]
#                                      build image TAG: busybox and its libraries, plus each
#                                      BINARY and the libraries ldd lists for it, in /bin (into
#                                      NODEWARD_TEST_DOCKER_HOST's engine when that is set)
#
# Networking: dockerd runs with --iptables=false (the tests must not rewrite the host's
# firewall) and --ip-forward=false (nothing leaves the machine through it). With --bridge=none a
# container of network mode "bridge" gets a loopback only and its published ports are silently
# not published; so each private dockerd gets a bridge of its own (nw<hash of DIR>, a free
# 172.31.N.0/24), and published ports work through docker-proxy, the engine's userland proxy,
# which needs no iptables rule. Containers reach the host's published ports and each other, and
# nothing beyond the machine.
#
# DIR must be short: a unix socket path has at most 107 bytes.
set -euo pipefail

die() {
  echo "docker-env: $*" >&2
  exit 1
}

usage() {
  die "usage: $0 start DIR | stop DIR | image DIR TAG [BINARY...]"
}

[ $# -ge 2 ] || usage
cmd=$1
dir=$(realpath -m "$2")
sock="$dir/docker.sock"
docker_cli() {
  docker -H "unix://$sock" "$@"
}

bridge_name() {
  echo "nw$(printf '%s' "$dir" | md5sum | cut -c1-8)"
}

# copy_with_libs BINARY ROOTFS: BINARY into ROOTFS/bin, and every library ldd lists for it at its
# own path (the dynamic loader included).
copy_with_libs() {
  local bin=$1 rootfs=$2 lib
  install -D -m 0755 "$bin" "$rootfs/bin/$(basename "$bin")"
  # ldd prints "name => /path (addr)" or "/path (addr)"; a static binary prints no path.
  for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true); do
    [ -e "$rootfs$lib" ] || install -D -m 0755 "$lib" "$rootfs$lib"
  done
}

# build_image TAG [BINARY...]
build_image() {
  local tag=$1 rootfs applet
  shift
  command -v busybox >/dev/null || die "busybox is not installed (apt-get install busybox)"
  rootfs=$(mktemp -d "$dir/rootfs.XXXXXX")
  copy_with_libs "$(command -v busybox)" "$rootfs"
  for applet in $(busybox --list); do
    [ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
  done
  local b
  for b in "$@"; do
    [ -x "$b" ] || die "no executable $b"
    copy_with_libs "$b" "$rootfs"
  done
  mkdir -p "$rootfs/tmp" "$rootfs/etc" "$rootfs/root"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  tar -C "$rootfs" -c . | docker_cli import - "$tag" >/dev/null || {
    rm -rf "$rootfs"
    die "docker import of $tag failed"
  }
  rm -rf "$rootfs"
}

# pick_subnet: a 172.31.N.0/24 that no interface of this host has.
pick_subnet() {
  local n i
  n=$(( 0x$(printf '%s' "$dir" | md5sum | cut -c1-2) ))
  for i in $(seq 0 255); do
    local third=$(( (n + i) % 256 ))
    if ! ip -4 addr show | grep -q "inet 172\.31\.$third\."; then
      echo "172.31.$third"
      return 0
    fi
  done
  return 1
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (dockerd does)"
  command -v dockerd >/dev/null || die "dockerd is not installed (apt-get install docker.io)"
  command -v docker >/dev/null || die "the docker client is not installed (apt-get install docker.io)"
  [ ${#sock} -le 100 ] || die "$sock is too long for a unix socket: use a shorter DIR"
  mkdir -p "$dir"
  if [ -f "$dir/dockerd.pid" ] && kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
    die "a dockerd runs already for $dir (pid $(cat "$dir/dockerd.pid")); stop it first"
  fi
  local bridge net
  bridge=$(bridge_name)
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    net=$(pick_subnet) || die "no free 172.31.N.0/24 for the bridge"
    ip link add "$bridge" type bridge || die "cannot create the bridge $bridge"
    ip addr add "$net.1/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  echo "$bridge" >"$dir/bridge"
  # setsid: the engine outlives this script and is in no terminal's process group.
  setsid dockerd \
    --data-root "$dir/root" \
    --exec-root "$dir/exec" \
    --host "unix://$sock" \
    --pidfile "$dir/dockerd.pid" \
    --iptables=false \
    --ip-forward=false \
    --ip-masq=false \
    --bridge "$bridge" \
    </dev/null >"$dir/dockerd.log" 2>&1 &
  local pid=$! i
  # Ready in about a second here; 60 s bounds a slow first start (it creates its data root).
  for i in $(seq 1 240); do
    if curl -sf --max-time 2 --unix-socket "$sock" http://docker/_ping >/dev/null 2>&1; then
      build_image busybox:1
      echo "unix://$sock"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || {
      tail -5 "$dir/dockerd.log" >&2
      die "dockerd exited during start-up (log: $dir/dockerd.log)"
    }
    sleep 0.25
  done
  tail -5 "$dir/dockerd.log" >&2
  stop
  die "dockerd did not answer /_ping within 60s (log: $dir/dockerd.log)"
}

# pids_under PATTERN: processes whose command line contains PATTERN (this engine's containerd
# and shims name its exec root).
pids_under() {
  local p
  for p in /proc/[0-9]*; do
    { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "$1" && echo "${p#/proc/}"
  done
  return 0
}

stop() {
  local pid="" i
  [ -f "$dir/dockerd.pid" ] && pid=$(cat "$dir/dockerd.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    # Containers a test left behind are killed and removed first: at TERM the engine would stop
    # each with its 10 s stop timeout (--shutdown-timeout does not shorten that).
    local ids
    ids=$(timeout 10 docker -H "unix://$sock" ps -aq 2>/dev/null || true)
    if [ -n "$ids" ]; then
      echo "docker-env: removing containers left in $dir: $(echo $ids)" >&2
      timeout 20 docker -H "unix://$sock" rm -f $ids >/dev/null 2>&1 || true
    fi
    kill -TERM "$pid" 2>/dev/null || true
    # dockerd stops its containerd and exits.
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "docker-env: dockerd $pid did not stop within 20s: killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # What a killed engine leaves: its containerd, shims and their containers' processes.
  local left
  left=$(pids_under "$dir/exec")
  [ -n "$left" ] && kill -KILL $left 2>/dev/null || true
  # Mounts under the data and exec roots (overlays, shm, netns), deepest first.
  local m
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$dir/root" "$dir/exec" "$dir"/rootfs.* "$sock" "$dir/dockerd.pid" 2>/dev/null || true
  local bridge
  bridge=$(cat "$dir/bridge" 2>/dev/null || bridge_name)
  ip link del "$bridge" 2>/dev/null || true
  rm -f "$dir/bridge"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  image)
    [ $# -ge 3 ] || usage
    # The test harness names the engine it runs against, whose socket may be named otherwise.
    case "${NODEWARD_TEST_DOCKER_HOST:-}" in
      unix://*) sock=${NODEWARD_TEST_DOCKER_HOST#unix://} ;;
    esac
    shift 2
    build_image "$@"
    ;;
  *) usage ;;
esac
