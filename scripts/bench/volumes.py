#!/usr/bin/env python3
"""Benchmark of nodeward's host volumes.

1. Restore at start: 1,000 volumes in the state file, created through the built-in `mkdir` and
   (separately) through an external shell-script plugin; the agent is restarted and the time from
   its start to `host volumes restored` in its log (restores finish before the API answers) is
   printed, next to the start time of an agent with no volumes.
2. Create throughput as the state grows: creates per second through the API while the first 200
   volumes are created, and 200 more with 10,000 volumes already in the state (seeded by copying
   records into state.json after a clean stop, then restored by the agent), with the bytes the
   agent wrote per create (`wchar` of /proc/<pid>/io: every file and socket) and the size of the
   state on disk. Every create is acknowledged only once it is durable. With `--old-bin` a second
   build (a copy of an older release binary, with its nodeward-keeper next to it) is measured the
   same way in the same run, side by side.
Prints numbers; asserts nothing.

Usage: scripts/bench/volumes.py [--bin PATH] [--old-bin PATH] [--volumes 1000] [--big 10000]
                                [--creates 200] [--skip-restore]
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


def wchar(pid):
    """Bytes the process has passed to write() and its kin so far (/proc/<pid>/io)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("wchar:"))


def state_size(data):
    """Bytes of state on disk: the snapshot and, when there is one, its journal."""
    return sum(os.path.getsize(os.path.join(data, f)) for f in ("state.json", "state.journal")
               if os.path.exists(os.path.join(data, f)))


def measured_creates(ag, n, prefix):
    """Creates/s of `n` creates through `mkdir`, and the bytes the agent wrote per create."""
    w0 = wchar(ag.p.pid)
    rate = create_many(ag, n, "mkdir", prefix)
    return rate, (wchar(ag.p.pid) - w0) / n


def growth(binary, tmp, creates, big):
    """Create throughput of `binary` with `creates` and with `big` + `creates` volumes."""
    ag = Agent(binary, tmp).start()
    small_rate, small_bytes = measured_creates(ag, creates, "s")
    ag.stop()
    path = os.path.join(ag.data, "state.json")
    with open(path) as f:
        state = json.load(f)
    template = state["HostVolumes"][0]
    vols_dir = os.path.dirname(template["HostPath"])
    for i in range(big):
        r = dict(template)
        r["ID"] = str(uuid.uuid4()); r["Name"] = f"big{i}"; r["HostPath"] = os.path.join(vols_dir, r["ID"])
        state["HostVolumes"].append(r)
    with open(path, "w") as f:
        json.dump(state, f)
    ag.start()
    size = os.path.getsize(path)
    big_rate, big_bytes = measured_creates(ag, creates, "t")
    on_disk = state_size(ag.data)
    ag.stop()
    return dict(small_rate=small_rate, small_bytes=small_bytes, big_rate=big_rate, big_bytes=big_bytes,
                seeded=size, on_disk=on_disk, restored=ag.restored)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--old-bin", help="a second build to measure side by side (its nodeward-keeper next to it)")
    ap.add_argument("--skip-restore", action="store_true", help="only the create throughput")
    ap.add_argument("--volumes", type=int, default=1000)
    ap.add_argument("--big", type=int, default=10000)
    ap.add_argument("--creates", type=int, default=200)
    a = ap.parse_args()
    for b in filter(None, (a.bin, a.old_bin)):
        if not os.path.exists(b):
            raise SystemExit(f"{b} not found: run 'cargo build --release' first")
    tmp = tempfile.mkdtemp(prefix="nwv-", dir="/tmp")
    try:
        empty = Agent(a.bin, os.path.join(tmp, "empty")).start(); empty.stop()
        print(f"agent start with no volumes: {empty.ready * 1000:.0f} ms to serving")
        for plugin in () if a.skip_restore else ("mkdir", "script"):
            ag = Agent(a.bin, os.path.join(tmp, plugin)).start()
            rate = create_many(ag, a.volumes, plugin, "v")
            ag.stop()
            ag.start()
            ready = sum(1 for v in req(ag.addr, "GET", "/v1/volumes?type=host") if v["State"] == "ready")
            ag.stop()
            print(f"{plugin:>6}: created {a.volumes} at {rate:.0f}/s; restart restored {ready} ready "
                  f"in {ag.restored * 1000 if ag.restored else float('nan'):.0f} ms (serving after {ag.ready * 1000:.0f} ms)")
        # Create throughput as the state grows, for each build.
        builds = [("this build", a.bin)] + ([("old build", a.old_bin)] if a.old_bin else [])
        print(f"\ncreate throughput ({a.creates} creates through mkdir, each acknowledged once durable):")
        print(f"{'build':>10}  {'volumes':>7}  {'creates/s':>9}  {'bytes written/create':>20}  state on disk")
        for name, binary in builds:
            g = growth(binary, os.path.join(tmp, "big-" + name.split()[0]), a.creates, a.big)
            print(f"{name:>10}  {a.creates:>7}  {g['small_rate']:>9.0f}  {g['small_bytes']:>20.0f}")
            print(f"{name:>10}  {a.big + a.creates:>7}  {g['big_rate']:>9.0f}  {g['big_bytes']:>20.0f}  "
                  f"{g['on_disk'] / 1e6:.1f} MB (seeded snapshot {g['seeded'] / 1e6:.1f} MB); restore of "
                  f"{a.big + a.creates} took {g['restored'] * 1000 if g['restored'] else float('nan'):.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    main()
