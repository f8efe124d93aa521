#!/usr/bin/env python3
"""nodeward beside s6 and daemontools, measured the same way in one run.

For each size N (100 by default; `--services 100,1000` runs both) and each supervisor: N services
running `sleep` (the same shell wrapper that writes its PID to a file, then execs sleep); time from
start until all N have written their PID; crash -> restarted latency of one service over >= 30
SIGKILLs, from the kill until the new process has written its PID; the supervisor's memory as the
PSS summed over all its processes, and how many they are (nodeward: the agent and its task keeper
`nodeward-keeper`, the parent of every task; s6: s6-svscan and every s6-supervise; daemontools:
svscan and every supervise); idle CPU over 10 s (summed over those processes' threads). Kills are
1.2 s apart because s6 and daemontools delay the restart of a service that lived less than a
second. For nodeward, the probe's own events split each restart (read after it, outside the
timing): kill -> `Terminated` (the keeper reaped it and the agent heard), `Terminated` -> `Started`
(the restart decision and the keeper's fork and exec), `Started` -> PID written (the shell).
Prints a table, the ratios and where nodeward's memory is (agent / keeper); asserts nothing.

Everything started is stopped at the end: nodeward's agent with SIGTERM (which leaves the tasks
running, live-restore.md), then its keeper with SIGTERM (which kills every task); s6's and
daemontools' trees with SIGKILL. The script waits until no service process is left.

Needs the Debian packages s6 and daemontools (installs them with apt-get when run as root).
nodeward's services are one job of N groups (one task each) unless `--jobs K` spreads them over K
jobs.

Usage: scripts/bench/supervisors.py [--bin PATH] [--services 100[,1000]] [--kills 30] [--jobs 1]
"""
import argparse, os, shutil, signal, statistics, subprocess, tempfile, time

from benchlib import (RELEASE_BIN, alive, cpu_ns, keeper_pid, pct, pids_with, pss_by_mapping, req, rollup,
                      start_agent, stop_agent_and_tasks)


def wrapper(pidfile, marker):
    return f"echo $$ > {pidfile}; exec sleep {marker}"


def children(parent, name):
    """The processes whose parent is `parent` and whose argv[0]'s basename is `name` (bytes)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if os.path.basename(f.read().split(b"\0")[0]) == name:
                    out.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return out


def pss(pids):
    return sum(rollup(p).get("Pss", 0.0) for p in pids)


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def wait_all_written(pidfiles):
    """Returns once every PID file names a process (checked from the first one not yet written)."""
    i = 0
    while i < len(pidfiles):
        if read_pid(pidfiles[i]):
            i += 1
        else:
            time.sleep(0.002)


def measure(name, start, owned, pidfiles, n, kills, after_kill=None):
    t0 = time.perf_counter()
    start()
    wait_all_written(pidfiles)
    started = time.perf_counter() - t0
    time.sleep(2)
    pids = owned()
    mem = pss(pids)
    c0 = cpu_ns(pids); time.sleep(10); c1 = cpu_ns(pids)
    lat = []
    probe = pidfiles[0]
    for _ in range(kills):
        time.sleep(1.2)
        old = read_pid(probe)
        t, wall = time.perf_counter(), time.time_ns()
        os.kill(old, signal.SIGKILL)
        while True:
            p = read_pid(probe)
            if p and p != old:
                break
            os.sched_yield()
        lat.append((time.perf_counter() - t) * 1000)
        if after_kill:
            after_kill(wall, wall + int(lat[-1] * 1e6))
    return {"name": name, "n": n, "start_s": started, "restart_med_ms": statistics.median(lat),
            "restart_p90_ms": pct(lat, 90), "pss_mb": mem,
            "idle_cpu_ms_10s": (c1 - c0) / 1e6, "procs": len(owned())}


def run_nodeward(binary, tmp, n, kills, jobs=1):
    marker = f"{200000 + n}.5"
    pidfiles = [os.path.join(tmp, f"p{i}") for i in range(n)]
    agent, addr, data = start_agent(binary, tmp)
    def start():
        groups = [{"Name": f"s{i}", "Count": 1, "EphemeralDisk": {"SizeMB": 10},
                   "RestartPolicy": {"Attempts": 100000, "Interval": 3_600_000_000_000 * 24 * 365, "Delay": 0, "Mode": "delay"},
                   "Tasks": [{"Name": "t", "Driver": "raw_exec", "Resources": {"CPU": 1, "MemoryMB": 16},
                              "Config": {"command": "/bin/sh", "args": ["-c", wrapper(pidfiles[i], marker)]}}]}
                  for i in range(n)]
        for j in range(jobs):
            req(addr, "PUT", "/v1/jobs", {"Job": {"ID": f"svc{j}", "Name": f"svc{j}", "TaskGroups": groups[j::jobs]}},
                timeout=60)
    def owned():
        kp = keeper_pid(data)
        return [agent.pid] + ([kp] if kp else [])
    split = []
    def after_kill(killed, seen):
        # Outside the timed part: the probe's own events split the restart in three.
        if "probe" not in state:
            state["probe"] = next(x["ID"] for x in req(addr, "GET", "/v1/job/svc0/allocations")
                                  if x["TaskGroup"] == "s0")
        ev = req(addr, "GET", f"/v1/allocation/{state['probe']}")["TaskStates"]["t"]["Events"]
        term = next((e["Time"] for e in ev if e["Type"] == "Terminated" and e["Time"] >= killed), None)
        started = next((e["Time"] for e in ev if e["Type"] == "Started" and term and e["Time"] >= term), None)
        if term and started:
            split.append(((term - killed) / 1e6, (started - term) / 1e6, (seen - started) / 1e6))
    state = {}
    try:
        res = measure("nodeward", start, owned, pidfiles, n, kills, after_kill)
        if split:
            res["split"] = [statistics.median(x[i] for x in split) for i in range(3)]
        kp = keeper_pid(data)
        res["parts"] = {"agent": rollup(agent.pid), "keeper": rollup(kp) if kp else {}}
        res["maps"] = {"agent": pss_by_mapping(agent.pid), "keeper": pss_by_mapping(kp) if kp else {}}
    finally:
        stop_agent_and_tasks(agent, data, marker.encode())
    return res


def run_svscan(kind, tmp, n, kills):
    marker = f"{300000 + n}.5" if kind == "s6" else f"{400000 + n}.5"
    scan = os.path.join(tmp, "scan"); os.makedirs(scan)
    pidfiles = [os.path.join(tmp, f"p{i}") for i in range(n)]
    for i in range(n):
        d = os.path.join(scan, f"s{i}"); os.makedirs(d)
        with open(os.path.join(d, "run"), "w") as f:
            f.write(f"#!/bin/sh\n{wrapper(pidfiles[i], marker)}\n")
        os.chmod(os.path.join(d, "run"), 0o755)
    # s6-svscan supervises at most 1000 services unless told more (-c).
    svscan = ["s6-svscan", "-c", str(max(1000, 2 * n)), scan] if kind == "s6" else ["svscan", scan]
    sup = b"s6-supervise" if kind == "s6" else b"supervise"
    state = {}
    def start():
        state["p"] = subprocess.Popen(svscan, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    def owned():
        return [state["p"].pid] + children(state["p"].pid, sup)
    try:
        res = measure(kind, start, owned, pidfiles, n, kills)
        sups = owned()[1:]
        res["parts"] = {"scanner": rollup(state["p"].pid),
                        "one supervisor": rollup(sups[0]) if sups else {}}
    finally:
        # Stop the tree: the scanner, its supervisors and the services (ours only).
        if "p" in state:
            sups = owned()[1:]
            os.killpg(state["p"].pid, signal.SIGKILL)
            for p in sups + pids_with(marker.encode()):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            state["p"].wait()
            deadline = time.monotonic() + 30
            while (pids_with(marker.encode()) or any(alive(p) for p in sups)) and time.monotonic() < deadline:
                time.sleep(0.02)
    return res


def version(kind):
    pkg = {"s6": "s6", "daemontools": "daemontools"}.get(kind)
    if not pkg:
        return ""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
    return r.stdout.strip()


def part(d):
    return (f"PSS {d.get('Pss', 0):.2f} MB (anon {d.get('Pss_Anon', 0):.2f}, file {d.get('Pss_File', 0):.2f}), "
            f"RSS {d.get('Rss', 0):.2f} MB, {d.get('Threads', 0)} threads")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--services", default="100", help="N, or several: 100,1000")
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=1, help="nodeward: spread the N groups over this many jobs")
    a = ap.parse_args()
    sizes = [int(x) for x in a.services.split(",")]
    if not (shutil.which("s6-svscan") and shutil.which("svscan")):
        if os.geteuid() == 0:
            subprocess.run(["apt-get", "install", "-y", "-qq", "s6", "daemontools"], check=True,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        else:
            raise SystemExit("needs the Debian packages s6 and daemontools")
    rows = []
    for n in sizes:
        for kind in ("nodeward", "s6", "daemontools"):
            tmp = tempfile.mkdtemp(prefix="nws-", dir="/tmp")
            try:
                rows.append(run_nodeward(a.bin, tmp, n, a.kills, a.jobs) if kind == "nodeward"
                            else run_svscan(kind, tmp, n, a.kills))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'N':>5} {'supervisor':>12} {'version':>10} {'start s':>8} {'restart med ms':>15} {'p90 ms':>7} "
          f"{'PSS MB':>7} {'procs':>6} {'idle CPU ms/10s':>16}")
    for r in rows:
        print(f"{r['n']:>5} {r['name']:>12} {version(r['name']):>10} {r['start_s']:>8.3f} {r['restart_med_ms']:>15.2f} "
              f"{r['restart_p90_ms']:>7.2f} {r['pss_mb']:>7.1f} {r['procs']:>6} {r['idle_cpu_ms_10s']:>16.2f}")
    for n in sizes:
        nw = next(r for r in rows if r["n"] == n and r["name"] == "nodeward")
        for r in rows:
            if r["n"] == n and r is not nw:
                print(f"N={n} nodeward / {r['name']} (lower is better for nodeward): start "
                      f"{nw['start_s'] / r['start_s']:.2f}x, restart median {nw['restart_med_ms'] / r['restart_med_ms']:.2f}x, "
                      f"p90 {nw['restart_p90_ms'] / r['restart_p90_ms']:.2f}x, PSS {nw['pss_mb'] / r['pss_mb']:.2f}x")
        if "split" in nw:
            k, d, s_ = nw["split"]
            print(f"N={n} nodeward restart, medians from the probe's events: kill -> Terminated {k:.2f} ms, "
                  f"Terminated -> Started {d:.2f} ms, Started -> PID written {s_:.2f} ms")
        for who, d in nw["parts"].items():
            print(f"N={n} nodeward {who}: {part(d)}")
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(nw["maps"][who].items())[:6])
            print(f"N={n} nodeward {who} PSS by mapping (MB): {top}")
        for r in rows:
            if r["n"] == n and r is not nw:
                for who, d in r["parts"].items():
                    print(f"N={n} {r['name']} {who}: {part(d)}")


if __name__ == "__main__":
    main()
