#!/usr/bin/env python3
"""nodeward beside s6 and daemontools, measured the same way in one run.

For each supervisor: 100 services running `sleep` (the same shell wrapper that writes its PID to a
file, then execs sleep); time from start until all 100 run; crash -> restarted latency of one
service over >= 30 SIGKILLs, from the kill until the new process has written its PID; the
supervisor's memory as the PSS summed over all its processes (nodeward: the agent; s6: s6-svscan
and every s6-supervise; daemontools: svscan and every supervise); idle CPU over 10 s (summed over
those processes' threads). Kills are 1.2 s apart because s6 and daemontools delay the restart of a
service that lived less than a second. Prints a table and the ratios; asserts nothing.

Needs the Debian packages s6 and daemontools (installs them with apt-get when run as root).
Usage: scripts/bench/supervisors.py [--bin PATH] [--services 100] [--kills 30]
"""
import argparse, json, os, shutil, signal, statistics, subprocess, tempfile, time, urllib.request

from benchlib import RELEASE_BIN, cpu_ns, start_agent

def wrapper(pidfile, marker):
    return f"echo $$ > {pidfile}; exec sleep {marker}"

def procs(pred):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                if pred(cmd):
                    out.append(int(p))
            except OSError:
                pass
    return out

def pss(pids):
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("Pss:")) / 1024
        except (OSError, StopIteration):
            pass
    return total


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0

def measure(name, start, owned, pidfiles, marker, n, kills):
    t0 = time.perf_counter()
    handle = start()
    while len(procs(lambda c: c[0].endswith(b"sleep") and marker.encode() in c)) < n:
        time.sleep(0.002)
    started = time.perf_counter() - t0
    time.sleep(2)
    mem = pss(owned())
    c0 = cpu_ns(owned()); time.sleep(10); c1 = cpu_ns(owned())
    lat = []
    probe = pidfiles[0]
    for _ in range(kills):
        time.sleep(1.2)
        old = read_pid(probe)
        t = time.perf_counter()
        os.kill(old, signal.SIGKILL)
        while True:
            p = read_pid(probe)
            if p and p != old:
                break
            os.sched_yield()
        lat.append((time.perf_counter() - t) * 1000)
    return handle, {"name": name, "start_s": started, "restart_med_ms": statistics.median(lat),
                    "restart_p90_ms": sorted(lat)[int(0.9 * (len(lat) - 1))], "pss_mb": mem,
                    "idle_cpu_ms_10s": (c1 - c0) / 1e6, "procs": len(owned())}

def run_nodeward(binary, tmp, n, kills):
    marker = "200001.5"
    pidfiles = [os.path.join(tmp, f"p{i}") for i in range(n)]
    agent, addr, _ = start_agent(binary, tmp)
    def start():
        groups = [{"Name": f"s{i}", "Count": 1,
                   "RestartPolicy": {"Attempts": 100000, "Interval": 3_600_000_000_000 * 24 * 365, "Delay": 0, "Mode": "delay"},
                   "Tasks": [{"Name": "t", "Driver": "raw_exec",
                              "Config": {"command": "/bin/sh", "args": ["-c", wrapper(pidfiles[i], marker)]}}]}
                  for i in range(n)]
        body = json.dumps({"Job": {"ID": "svc", "Name": "svc", "TaskGroups": groups}}).encode()
        urllib.request.urlopen(urllib.request.Request(f"http://{addr}/v1/jobs", data=body, method="PUT"), timeout=60).read()
        return agent
    handle, res = measure("nodeward", start, lambda: [agent.pid], pidfiles, marker, n, kills)
    agent.send_signal(signal.SIGTERM); agent.wait(timeout=120)
    return res

def run_svscan(kind, tmp, n, kills):
    marker = "200002.5" if kind == "s6" else "200003.5"
    scan = os.path.join(tmp, "scan"); os.makedirs(scan)
    pidfiles = [os.path.join(tmp, f"p{i}") for i in range(n)]
    for i in range(n):
        d = os.path.join(scan, f"s{i}"); os.makedirs(d)
        with open(os.path.join(d, "run"), "w") as f:
            f.write(f"#!/bin/sh\n{wrapper(pidfiles[i], marker)}\n")
        os.chmod(os.path.join(d, "run"), 0o755)
    svscan = ["s6-svscan", scan] if kind == "s6" else ["svscan", scan]
    sup = b"s6-supervise" if kind == "s6" else b"supervise"
    state = {}
    def start():
        state["p"] = subprocess.Popen(svscan, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return state["p"]
    def owned():
        return [state["p"].pid] + procs(lambda c: c[0].endswith(sup) and os.path.basename(c[0]) == sup)
    handle, res = measure(kind, start, owned, pidfiles, marker, n, kills)
    # Stop the tree: the scanner, its supervisors and the services.
    os.killpg(handle.pid, signal.SIGKILL)
    for p in procs(lambda c: marker.encode() in b" ".join(c)) + procs(lambda c: os.path.basename(c[0]) == sup):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    handle.wait()
    return res

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--services", type=int, default=100)
    ap.add_argument("--kills", type=int, default=30)
    a = ap.parse_args()
    if not (shutil.which("s6-svscan") and shutil.which("svscan")):
        if os.geteuid() == 0:
            subprocess.run(["apt-get", "install", "-y", "-qq", "s6", "daemontools"], check=True,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        else:
            raise SystemExit("needs the Debian packages s6 and daemontools")
    rows = []
    for kind in ("nodeward", "s6", "daemontools"):
        tmp = tempfile.mkdtemp(prefix="nws-", dir="/tmp")
        try:
            rows.append(run_nodeward(a.bin, tmp, a.services, a.kills) if kind == "nodeward"
                        else run_svscan(kind, tmp, a.services, a.kills))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'supervisor':>12} {'start s':>8} {'restart med ms':>15} {'p90 ms':>7} {'PSS MB':>7} {'procs':>6} {'idle CPU ms/10s':>16}")
    for r in rows:
        print(f"{r['name']:>12} {r['start_s']:>8.3f} {r['restart_med_ms']:>15.2f} {r['restart_p90_ms']:>7.2f} "
              f"{r['pss_mb']:>7.1f} {r['procs']:>6} {r['idle_cpu_ms_10s']:>16.2f}")
    nw = rows[0]
    for r in rows[1:]:
        print(f"nodeward vs {r['name']}: start {r['start_s'] / nw['start_s']:.1f}x faster, restart "
              f"{r['restart_med_ms'] / nw['restart_med_ms']:.1f}x faster, memory {nw['pss_mb'] / r['pss_mb']:.2f}x of theirs")

if __name__ == "__main__":
    main()
