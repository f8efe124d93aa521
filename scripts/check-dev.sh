#!/usr/bin/env bash
# Runs the README's first command, `scripts/dev.sh`, as the README gives it, and checks what it
# promises: a release agent in dev mode (data in a fresh temporary directory, debug logging) whose
# API answers and runs a task (under its keeper), and that stops cleanly on SIGTERM: throw-away,
# as Nomad's dev mode, it stops its task and removes its data directory (exit 0, port closed, no
# process left, the keeper gone too). scripts/test.sh runs it; it once failed on every fresh machine (`cargo run could not
# determine which binary to run`) and nothing noticed.
#
# The only extra argument is a -config file moving the API to a free port the kernel picked, so
# that the check never meets an agent already on 4656. The first run builds the release profile,
# which compiles gRPC's C core (about 7 minutes on 2 cores); CHECK_DEV_BUILD_TIMEOUT (seconds,
# default 2400) bounds the build, CHECK_DEV_TIMEOUT (default 60) the agent's start and stop.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_rust

build_timeout="${CHECK_DEV_BUILD_TIMEOUT:-2400}"
timeout="${CHECK_DEV_TIMEOUT:-60}"
tmp="${TMPDIR:-/tmp}"
tmp="${tmp%/}"
work=$(mktemp -d "$tmp/nw-check-dev-XXXXXX")
log="$work/dev.log"
dev_pid=
data_dir=

cleanup() {
  local rc=$?
  # dev.sh runs in a process group of its own (setsid below): on failure, stop the build or the
  # agent with everything it started.
  if [ -n "$dev_pid" ] && kill -0 "$dev_pid" 2>/dev/null; then
    kill -TERM -- "-$dev_pid" 2>/dev/null || true
    sleep 1
    kill -KILL -- "-$dev_pid" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$log" ]; then
    echo "--- last lines of scripts/dev.sh's output ($log):" >&2
    tail -n 40 "$log" >&2
  fi
  # A dev agent that failed may leave its data directory and keeper; this check removes them.
  if [ -n "$data_dir" ] && [ -f "$data_dir/keeper.pid" ]; then
    kill -TERM "$(cat "$data_dir/keeper.pid")" 2>/dev/null || true
  fi
  case "$data_dir" in
    "$tmp"/nodeward-dev-*) rm -rf -- "$data_dir" ;;
  esac
  [ "$rc" -ne 0 ] || rm -rf -- "$work"
}
trap cleanup EXIT

fail() {
  echo "check-dev: FAILED: $*" >&2
  exit 1
}

# A port that was free a moment ago; the agent binds it a few seconds later at the earliest.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'ports { http = %s }\n' "$port" >"$work/port.hcl"
base="http://127.0.0.1:$port"

echo "check-dev: scripts/dev.sh -config $work/port.hcl (API on $base; output in $log)" >&2
echo "check-dev: the first run builds the release profile, which takes minutes" >&2
# setsid does not fork here (a background job of a script is no process group leader): dev.sh
# keeps the PID $! and leads a process group of its own.
setsid scripts/dev.sh -config "$work/port.hcl" </dev/null >"$log" 2>&1 &
dev_pid=$!

# `cargo run` execs the agent on Unix, so dev.sh's PID becomes the agent's once the build is
# done; should cargo ever stay the parent instead, the agent is its child. The agent is known by
# its executable, not its name: it re-executes itself through /proc/self/exe at start (to set
# allocator tunables), which renames it "exe".
agent_pid() {
  local p exe
  for p in "$dev_pid" $(pgrep -P "$dev_pid" 2>/dev/null || true); do
    exe=$(readlink "/proc/$p/exe" 2>/dev/null) || continue
    if [ "${exe##*/}" = nodeward ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# Bounded waits: WHAT, SECONDS, then a command that succeeds when the wait is over. Stops at once
# when dev.sh has exited.
wait_until() {
  local what="$1" secs="$2"
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null; do
    kill -0 "$dev_pid" 2>/dev/null || fail "scripts/dev.sh exited while waiting for $what"
    [ "$SECONDS" -lt "$deadline" ] || fail "no $what within ${secs}s"
    sleep 0.2
  done
}

healthy() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/v1/agent/health")" = 200 ]
}

wait_until "agent process (the release build)" "$build_timeout" agent_pid
pid=$(agent_pid)
echo "check-dev: agent running as PID $pid after ${SECONDS}s" >&2
wait_until "200 from GET /v1/agent/health" "$timeout" healthy

# What -dev promises, as the agent itself reports it.
self=$(curl -sS --max-time 10 "$base/v1/agent/self") || fail "GET /v1/agent/self"
[ "$(jq -r .config.DevMode <<<"$self")" = true ] || fail "DevMode is not true: $self"
[ "$(jq -r .config.LogLevel <<<"$self")" = debug ] || fail "log level is not debug: $self"
[ "$(jq -r .config.Ports.HTTP <<<"$self")" = "$port" ] || fail "the -config port was not used: $self"
data_dir=$(jq -r .config.DataDir <<<"$self")
case "$data_dir" in
  "$tmp"/nodeward-dev-*) ;;
  *) data_dir= && fail "the data directory is not a fresh temporary one: $self" ;;
esac
[ -d "$data_dir" ] || fail "data directory $data_dir does not exist"
grep -qF "dev mode: data in $data_dir" "$log" || fail "no 'dev mode: data in $data_dir' in the log"

# A task, which runs under the keeper (a process next to the agent, not its child).
marker="4242.$$"
job=$(jq -n --arg m "$marker" '{Job: {ID: "dev-check", Name: "dev-check", TaskGroups: [{Name: "g",
  Tasks: [{Name: "t", Driver: "raw_exec", Config: {command: "sleep", args: [$m]}}]}]}}')
curl -sS --max-time 10 -X PUT -H 'Content-Type: application/json' -d "$job" "$base/v1/jobs" >/dev/null \
  || fail "PUT /v1/jobs"
task_running() { pgrep -f "/sleep $marker\$"; }
wait_until "the task running" "$timeout" task_running
task=$(task_running)
keeper=$(cat "$data_dir/keeper.pid" 2>/dev/null) || fail "no keeper.pid in $data_dir"
[ "$(cut -d' ' -f4 "/proc/$task/stat")" = "$keeper" ] || fail "the task's parent is not the keeper $keeper"

kill -TERM "$pid"
deadline=$((SECONDS + timeout))
while kill -0 "$pid" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the agent did not exit within ${timeout}s of SIGTERM"
  sleep 0.1
done
# dev.sh's exit status is the agent's: the same process after cargo's exec (or cargo passing on
# its child's status).
rc=0
wait "$dev_pid" || rc=$?
group=$dev_pid
dev_pid=
[ "$rc" -eq 0 ] || fail "the agent exited with status $rc after SIGTERM"

# What a clean stop of a dev agent leaves: nothing. The task stopped, the keeper gone, the data
# directory removed, the API closed, no process of the group left.
if kill -0 "$task" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$task/stat" 2>/dev/null)" != Z ]; then
  fail "the dev agent left its task $task running"
fi
deadline=$((SECONDS + timeout))
while kill -0 "$keeper" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$keeper/stat" 2>/dev/null)" != Z ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the keeper $keeper did not end after the dev agent stopped"
  sleep 0.1
done
[ ! -e "$data_dir" ] || fail "the dev agent left its data directory $data_dir"
if curl -s -o /dev/null --max-time 5 "$base/v1/agent/health"; then
  fail "something still answers on $base after the agent exited"
fi
left=$(pgrep -g "$group" 2>/dev/null || true)
[ -z "$left" ] || fail "processes left in the agent's process group: $left"
echo "check-dev: ok (started, answered, ran a task under its keeper, stopped it and removed its data on SIGTERM, exit 0)" >&2
