#!/usr/bin/env python3
"""Benchmark of nodeward's CSI plugin supervision.

1. Detection latency: a plugin task creates its socket 500 ms after it starts (the test plugin in
   `socket-after-delay` mode). The benchmark watches for the socket file from outside, with the wall
   clock, and takes the agent's `Plugin became healthy` event time (also wall clock, ns): the
   difference is how long the agent took to notice a ready plugin. Runs >= 20 times; prints median
   and p90. (Nomad retries every 5 s, so its figure is up to 5 s.)
2. Watching cost: 100 healthy plugin tasks with `csi_probe_interval = "1s"` (30x the default rate);
   the agent's CPU time over 30 s, per second, and its threads.
Prints numbers; asserts nothing.

Usage: scripts/bench/csi.py [--runs 20] [--plugins 100]   (needs `cargo build --release --bins`)
"""
import argparse, os, signal, statistics, tempfile, time, shutil

from benchlib import RELEASE_BIN, TARGET, cpu_ns, pct, req, start_agent, stop_agent_and_tasks



def plugin_job(jid, plugin, mode, count=1, delay_ms=500):
    return {"Job": {"ID": jid, "Name": jid, "TaskGroups": [{"Name": "g", "Count": count, "EphemeralDisk": {"SizeMB": 10},
        "RestartPolicy": {"Attempts": 0, "Interval": 1_800_000_000_000, "Delay": 15_000_000_000, "Mode": "fail"},
        "Tasks": [{"Name": "plugin", "Driver": "raw_exec", "Resources": {"CPU": 1, "MemoryMB": 16},
                   "Config": {"command": plugin, "args": ["--mode", mode, "--delay-ms", str(delay_ms), "--endpoint", "${CSI_ENDPOINT}"]},
                   "CSIPluginConfig": {"ID": "bench", "Type": "node", "MountDir": "/csi",
                                       "StagePublishBaseDir": "/local/csi", "HealthTimeout": 30_000_000_000}}]}]}}


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--plugin", default=os.path.join(TARGET, "release", "nodeward-csi-test-plugin"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--plugins", type=int, default=100)
    a = ap.parse_args()
    for b in (a.bin, a.plugin):
        if not os.path.exists(b):
            raise SystemExit(f"{b} not found: run 'cargo build --release --bins' first")
    tmp = tempfile.mkdtemp(prefix="nwb-", dir="/tmp")
    agent, addr, data = start_agent(a.bin, tmp)
    lat = []
    try:
        for i in range(a.runs):
            jid = f"p{i}"
            req(addr, "PUT", "/v1/jobs", plugin_job(jid, a.plugin, "socket-after-delay"))
            alloc = None
            while not alloc:
                allocs = req(addr, "GET", f"/v1/job/{jid}/allocations")
                alloc = allocs[0]["ID"] if allocs else None
            sock = os.path.join(data, "client/csi/plugins", alloc, "csi.sock")
            while not os.path.exists(sock):
                time.sleep(0.0002)
            ready = time.time_ns()
            healthy = None
            while healthy is None:
                ev = req(addr, "GET", f"/v1/allocation/{alloc}")["TaskStates"]["plugin"]["Events"]
                healthy = next((e["Time"] for e in ev if e["Type"] == "Plugin became healthy"), None)
                time.sleep(0.01)
            lat.append((healthy - ready) / 1e6)
            req(addr, "DELETE", f"/v1/job/{jid}?purge=true")
    finally:
        # SIGTERM leaves the tasks running (live restore); the keeper's SIGTERM kills them.
        stop_agent_and_tasks(agent, data, timeout=120)
    print(f"socket ready -> Plugin became healthy over {len(lat)} runs: median {statistics.median(lat):.1f} ms, "
          f"p90 {pct(lat, 90):.1f} ms, max {max(lat):.1f} ms")

    tmp2 = tempfile.mkdtemp(prefix="nwb-", dir="/tmp")
    agent, addr, data = start_agent(a.bin, tmp2, 'client {\n  csi_probe_interval = "1s"\n}')
    try:
        req(addr, "PUT", "/v1/jobs", plugin_job("many", a.plugin, "healthy", count=a.plugins))
        node = req(addr, "GET", "/v1/nodes")[0]["ID"]
        deadline = time.time() + 120
        while time.time() < deadline:
            allocs = req(addr, "GET", "/v1/job/many/allocations")
            healthy = sum(1 for al in allocs if any(e["Type"] == "Plugin became healthy" for e in al["TaskStates"]["plugin"]["Events"]))
            if healthy == a.plugins:
                break
            time.sleep(0.5)
        time.sleep(3)
        c0 = cpu_ns(agent.pid); time.sleep(30); c1 = cpu_ns(agent.pid)
        per_s = (c1 - c0) / 1e6 / 30
        print(f"{healthy} healthy plugins probed every 1s: agent CPU {per_s:.2f} ms per second "
              f"({per_s / 10:.3f}% of a core), {threads(agent.pid)} threads; "
              f"at the default 30s interval that is about {per_s / 30:.3f} ms per second")
    finally:
        stop_agent_and_tasks(agent, data, timeout=180)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(tmp2, ignore_errors=True)

if __name__ == "__main__":
    main()
