#!/usr/bin/env python3
"""Load test of nodeward's API beside a crash-looping workload.

Starts a release agent on a temporary data directory, registers 100 crash-looping tasks
(`/bin/sh -c "sleep 0.5; exit 1"`, restart mode "delay" with delay 1s, so each task restarts every
1.5 s or so for the whole run), then runs wrk with 64 connections against
`GET /v1/allocation/:id` on loopback (the Lua script spreads requests over the 100 allocations)
for --duration seconds, and prints requests/s and latency percentiles.

Beside the load it samples the agent at the start, every 60 s, at the end and 5 s later (once the load's connections
are gone): threads, open file
descriptors, zombie children, RSS, live task processes and the restarts performed so far (they
must keep growing: a wedged runner or lost state would show as a flat line). At the end the agent
is stopped with SIGTERM and must exit 0 without leaving a task process behind. Before the job is
registered and after it is stopped (its processes gone) the agent alone is sampled too: threads,
descriptors, zombies and RSS with no task and no connection, so what a run leaves behind shows.

Prints numbers; asserts nothing about speed. Needs wrk (Debian package `wrk`; installed with
apt-get when missing and run as root).

Usage: scripts/bench/load.py [--bin PATH] [--duration 600] [--connections 64] [--tasks 100]
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, threading, time, uuid

import benchlib
from benchlib import procs_with, stop_keeper

MAX_DURATION = 3600

def req(addr, method, path, body=None):
    return benchlib.req(addr, method, path, body, timeout=60)

def need_wrk():
    if shutil.which("wrk"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("wrk is missing: install it (e.g. 'sudo apt-get install wrk')")
    print("installing wrk", file=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False, stdout=subprocess.DEVNULL)
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, stdout=subprocess.DEVNULL)

def start_agent(binary, tmp):
    data = os.path.join(tmp, "data")
    cfg = os.path.join(tmp, "agent.hcl")
    with open(cfg, "w") as f:
        f.write(f'data_dir = "{data}"\nlog_level = "warn"\nports {{ http = 0 }}\n')
    env = dict(os.environ, RUST_LOG="nodeward=info")
    p = subprocess.Popen([binary, "agent", "-config", cfg], stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stderr:
        if "API on http://" in line:
            addr = line.split("API on http://", 1)[1].strip()
            break
    else:
        raise SystemExit("agent did not start")
    # Keep draining stderr so the agent never blocks on it.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, addr

def zombie_pids(ppid, pids=None):
    """Children of `ppid` that are zombies (among `pids` when given)."""
    found = set()
    for pid in (pids if pids is not None else os.listdir("/proc")):
        if not str(pid).isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if rest[0] == "Z" and int(rest[1]) == ppid:
            found.add(int(pid))
    return found

def zombie_children(ppid):
    """Zombie children still unreaped 1 s after they were seen. With ~60 task exits per second a
    scan of /proc sometimes meets a child in the moment between its exit and the agent's reap;
    only a zombie that lasts is one the agent failed to reap."""
    seen = zombie_pids(ppid)
    if not seen:
        return 0
    time.sleep(1)
    return len(zombie_pids(ppid, seen))

def proc_sample(pid):
    """Threads, descriptors, zombie children and RSS of the agent (alone when no task runs and no
    client is connected)."""
    s = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "Threads":
                s["threads"] = int(v)
            elif k == "VmRSS":
                s["rss_mib"] = round(int(v.split()[0]) / 1024, 1)
    s["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    s["zombies"] = zombie_children(pid)
    return s

def settle(pid, marker, limit=30):
    """Waits until no task process is left and the agent's thread count stops changing."""
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        now = proc_sample(pid)["threads"]
        if procs_with(marker) == 0 and now == last:
            return
        last = now
        time.sleep(1)

def sample(pid, addr, marker, t0):
    s = {"t_s": round(time.monotonic() - t0), **proc_sample(pid)}
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    s["cpu_s"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)
    s["task_procs"] = procs_with(marker)
    allocs = req(addr, "GET", "/v1/allocations")
    restarts = 0
    running = 0
    for a in allocs:
        full = req(addr, "GET", f"/v1/allocation/{a['ID']}")
        for st in (full.get("TaskStates") or {}).values():
            restarts += st.get("Restarts", 0)
            running += st.get("State") == "running"
    s["restarts"] = restarts
    s["tasks_running"] = running
    return s

LUA = r"""
local ids = {}
for id in string.gmatch(os.getenv("NODEWARD_ALLOCS"), "[^,]+") do ids[#ids + 1] = id end
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/v1/allocation/" .. ids[(n % #ids) + 1])
end
done = function(summary, latency, requests)
  local errs = summary.errors
  io.write(string.format("RESULT {\"requests\": %d, \"duration_us\": %d, \"rps\": %.1f, " ..
    "\"non2xx\": %d, \"connect_errors\": %d, \"read_errors\": %d, \"write_errors\": %d, \"timeouts\": %d, " ..
    "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, \"mean_ms\": %.3f}\n",
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    errs.status, errs.connect, errs.read, errs.write, errs.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000, latency.mean / 1000))
end
"""

def main():
    ap = argparse.ArgumentParser()
    default_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/nodeward/target")), "release", "nodeward")
    ap.add_argument("--bin", default=default_bin)
    ap.add_argument("--duration", type=int, default=600, help=f"seconds of load, at most {MAX_DURATION}")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--tasks", type=int, default=100)
    a = ap.parse_args()
    if not 1 <= a.duration <= MAX_DURATION:
        raise SystemExit(f"--duration must be between 1 and {MAX_DURATION} seconds")
    if not os.path.exists(a.bin):
        raise SystemExit(f"{a.bin} not found: run 'cargo build --release' first")
    need_wrk()
    tmp = tempfile.mkdtemp(prefix="nodeward-load-")
    agent, addr = start_agent(a.bin, tmp)
    marker = f"0.5{uuid.uuid4().int % 10**9:09d}"
    samples, result, idle = [], None, {}
    try:
        time.sleep(1)
        idle["before"] = proc_sample(agent.pid)
        req(addr, "PUT", "/v1/jobs", {"Job": {"ID": "crashloop", "Name": "crashloop", "Type": "service",
            "TaskGroups": [{"Name": "g", "Count": a.tasks, "EphemeralDisk": {"SizeMB": 10},
                "RestartPolicy": {"Attempts": 100_000, "Interval": 100_000 * 2 * 10**9, "Delay": 10**9, "Mode": "delay"},
                "Tasks": [{"Name": "t", "Driver": "raw_exec", "Resources": {"CPU": 1, "MemoryMB": 16},
                           "Config": {"command": "/bin/sh", "args": ["-c", f"sleep {marker}; exit 1"]},
                           "KillTimeout": 2 * 10**9}]}]}})
        ids = [x["ID"] for x in req(addr, "GET", "/v1/job/crashloop/allocations")]
        assert len(ids) == a.tasks, ids
        time.sleep(5)  # every task has crashed and restarted at least once
        t0 = time.monotonic()
        samples.append(sample(agent.pid, addr, marker.encode(), t0))
        print("start:", json.dumps(samples[-1]), flush=True)
        lua = os.path.join(tmp, "allocs.lua")
        with open(lua, "w") as f:
            f.write(LUA)
        wrk = subprocess.Popen(["wrk", "-t", str(a.threads), "-c", str(a.connections), "-d", f"{a.duration}s",
                                "--timeout", "10s", "--latency", "-s", lua, f"http://{addr}"],
                               stdout=subprocess.PIPE, text=True, env=dict(os.environ, NODEWARD_ALLOCS=",".join(ids)))
        next_at = t0 + 60
        while wrk.poll() is None:
            time.sleep(1)
            if time.monotonic() >= next_at and wrk.poll() is None:
                samples.append(sample(agent.pid, addr, marker.encode(), t0))
                print("sample:", json.dumps(samples[-1]), flush=True)
                next_at += 60
        out = wrk.stdout.read()
        print(out)
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
        samples.append(sample(agent.pid, addr, marker.encode(), t0))
        print("end:", json.dumps(samples[-1]), flush=True)
        # wrk's connections just closed: their server threads end within moments.
        time.sleep(5)
        samples.append(sample(agent.pid, addr, marker.encode(), t0))
        print("end + 5 s:", json.dumps(samples[-1]), flush=True)
        # Stop the job and compare the agent alone with the agent alone before the run: whatever the
        # load grew and kept would show here, free of the crash loops' moment-to-moment count.
        req(addr, "DELETE", "/v1/job/crashloop")
        settle(agent.pid, marker.encode())
        idle["after"] = proc_sample(agent.pid)
    finally:
        t_stop = time.monotonic()
        agent.send_signal(signal.SIGTERM)
        try:
            code = agent.wait(timeout=120)
        except subprocess.TimeoutExpired:
            agent.kill()
            code = "killed after 120 s"
        stop_s = time.monotonic() - t_stop
        left = procs_with(marker.encode())
        # SIGTERM leaves running tasks to the keeper (live restore): its SIGTERM kills them.
        stop_keeper(os.path.join(tmp, "data"))
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nagent stopped with SIGTERM in {stop_s:.2f} s, exit {code}; task processes left: {left}")
    if result:
        print(f"\n{a.duration} s, {a.connections} connections, {a.tasks} crash-looping tasks:")
        print(f"  requests/s {result['rps']:.0f}   latency ms: p50 {result['p50_ms']:.2f}  p90 {result['p90_ms']:.2f}"
              f"  p99 {result['p99_ms']:.2f}  p99.9 {result['p999_ms']:.2f}  max {result['max_ms']:.2f}")
        print(f"  errors: non-2xx {result['non2xx']}, connect {result['connect_errors']}, read {result['read_errors']},"
              f" write {result['write_errors']}, timeouts {result['timeouts']}")
    print(f"\n{'t s':>5} {'threads':>8} {'fds':>5} {'zombies':>8} {'RSS MiB':>8} {'task procs':>10} {'running':>8} {'restarts':>9} {'agent CPU s':>12}")
    for s in samples:
        print(f"{s['t_s']:>5} {s['threads']:>8} {s['fds']:>5} {s['zombies']:>8} {s['rss_mib']:>8} "
              f"{s['task_procs']:>10} {s['tasks_running']:>8} {s['restarts']:>9} {s['cpu_s']:>12}")
    if len(idle) == 2:
        print("\nthe agent alone (no task, no connection), before the job and after it was stopped:")
        for k in ("threads", "fds", "zombies", "rss_mib"):
            print(f"  {k:>8}: {idle['before'][k]} -> {idle['after'][k]}")
    if result and len(samples) >= 2:
        cpu = samples[-2]["cpu_s"] - samples[0]["cpu_s"]
        print(f"\nagent CPU during the load: {cpu:.1f} s in {a.duration} s "
              f"({100 * cpu / a.duration:.0f}% of one core), {1e6 * cpu / max(result['requests'], 1):.0f} us per request "
              f"(the crash loops included)")
    print(json.dumps({"result": result, "samples": samples, "idle": idle, "stop_s": stop_s, "exit": code, "left": left}))

if __name__ == "__main__":
    main()
