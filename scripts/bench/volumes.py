#!/usr/bin/env python3
"""Benchmark of nodeward's host volumes.

1. Restore at start: 1,000 volumes in the state file, created through the built-in `mkdir` and
   (separately) through an external shell-script plugin; the agent is restarted and the time from
   its start to `host volumes restored` in its log (restores finish before the API answers) is
   printed, next to the start time of an agent with no volumes.
2. Create throughput as the state file grows: creates per second through the API with 0 and with
   10,000 volumes already in the state file (the state is seeded by copying records, then the agent
   restores them), and the state file's size. Every create rewrites the whole state file (atomic
   and durable); the figures show how much that costs.
Prints numbers; asserts nothing.

Usage: scripts/bench/volumes.py [--bin PATH] [--volumes 1000] [--big 10000] [--creates 200]
"""
import argparse, json, os, shutil, signal, subprocess, tempfile, threading, time, uuid

from benchlib import RELEASE_BIN, req

PLUGIN = """#!/bin/sh
case "$1" in
  fingerprint) echo '{"version": "0.1.0"}' ;;
  create) /bin/mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" && echo "{\\"path\\": \\"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\\", \\"bytes\\": 0}" ;;
  delete) /bin/rm -rf "$DHV_CREATED_PATH" ;;
esac
"""


class Agent:
    def __init__(self, binary, tmp):
        self.binary, self.tmp = binary, tmp
        self.data = os.path.join(tmp, "d")
        self.plugins = os.path.join(tmp, "plugins")
        os.makedirs(self.plugins, exist_ok=True)
        self.cfg = os.path.join(tmp, "agent.hcl")
        with open(self.cfg, "w") as f:
            f.write(f'data_dir = "{self.data}"\nlog_level = "info"\nports {{ http = 0 }}\n'
                    f'client {{\n  host_volume_plugin_dir = "{self.plugins}"\n}}\n')
        p = os.path.join(self.plugins, "script")
        with open(p, "w") as f:
            f.write(PLUGIN)
        os.chmod(p, 0o755)

    def start(self):
        t0 = time.perf_counter()
        self.p = subprocess.Popen([self.binary, "agent", "-config", self.cfg], stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, RUST_LOG="nodeward=info"))
        self.restored = None
        for line in self.p.stderr:
            if "host volumes restored" in line and self.restored is None:
                self.restored = time.perf_counter() - t0
            if "API on http://" in line:
                self.addr = line.split("API on http://", 1)[1].strip()
                break
        self.ready = time.perf_counter() - t0
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()
        return self

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=300)

def create_many(agent, n, plugin, prefix):
    t0 = time.perf_counter()
    for i in range(n):
        req(agent.addr, "PUT", "/v1/volume/host/create", {"Volume": {"Name": f"{prefix}{i}", "PluginID": plugin}})
    return n / (time.perf_counter() - t0)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--volumes", type=int, default=1000)
    ap.add_argument("--big", type=int, default=10000)
    ap.add_argument("--creates", type=int, default=200)
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        raise SystemExit(f"{a.bin} not found: run 'cargo build --release' first")
    tmp = tempfile.mkdtemp(prefix="nwv-", dir="/tmp")
    try:
        empty = Agent(a.bin, os.path.join(tmp, "empty")).start(); empty.stop()
        print(f"agent start with no volumes: {empty.ready * 1000:.0f} ms to serving")
        for plugin in ("mkdir", "script"):
            ag = Agent(a.bin, os.path.join(tmp, plugin)).start()
            rate = create_many(ag, a.volumes, plugin, "v")
            ag.stop()
            ag.start()
            ready = sum(1 for v in req(ag.addr, "GET", "/v1/volumes?type=host") if v["State"] == "ready")
            ag.stop()
            print(f"{plugin:>6}: created {a.volumes} at {rate:.0f}/s; restart restored {ready} ready "
                  f"in {ag.restored * 1000 if ag.restored else float('nan'):.0f} ms (serving after {ag.ready * 1000:.0f} ms)")
        # Create throughput with a big state file.
        ag = Agent(a.bin, os.path.join(tmp, "big")).start()
        small_rate = create_many(ag, a.creates, "mkdir", "s")
        ag.stop()
        path = os.path.join(ag.data, "state.json")
        with open(path) as f:
            state = json.load(f)
        template = state["HostVolumes"][0]
        vols_dir = os.path.dirname(template["HostPath"])
        for i in range(a.big):
            r = dict(template)
            r["ID"] = str(uuid.uuid4()); r["Name"] = f"big{i}"; r["HostPath"] = os.path.join(vols_dir, r["ID"])
            state["HostVolumes"].append(r)
        with open(path, "w") as f:
            json.dump(state, f)
        ag.start()
        size = os.path.getsize(path)
        big_rate = create_many(ag, a.creates, "mkdir", "t")
        ag.stop()
        print(f"creates/s with {a.creates} volumes in the state: {small_rate:.0f}; with {a.big + a.creates}: "
              f"{big_rate:.0f} (state file {size / 1e6:.1f} MB, rewritten whole on every create); "
              f"restore of {a.big + a.creates} took {ag.restored * 1000 if ag.restored else float('nan'):.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    main()
