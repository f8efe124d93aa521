#!/usr/bin/env python3
"""Benchmark of nodeward's task engine (issue: start, restart, memory, idle CPU).

Starts a release agent on a temporary data directory and, for N in (100, 1000) by default:
  1. submit -> all running: one job with a group of count=N `sleep` tasks; the clock runs from the
     PUT /v1/jobs until N processes carrying this run's marker exist in /proc;
  2. memory and threads of the agent with N tasks: RSS and PSS from /proc/<pid>/smaps_rollup;
  3. idle CPU: the agent's on-CPU time over 10 s (sum of every thread's schedstat), N tasks idle;
  4. crash -> restarted: one extra task with delay = "0s" writes its PID to a file and sleeps; the
     benchmark SIGKILLs it >= 20 times and measures, from outside, the time from the kill until the
     file names the new process (the new process exists and has run its first instruction);
     the agent's own Terminated -> Started event times are printed too.
With --cgroups both (the default as root), every size runs twice in the same run, once with
`client { cgroups = true }` (each task in a cgroup of its own with its limits, joined before it
execs, the whole cgroup killed when it dies) and once with `cgroups = false`, and the cost of
confinement is printed as on/off ratios. The "on" run checks that its tasks are in cgroups.
Prints numbers; asserts nothing about speed.

Usage: scripts/bench/tasks.py [--bin PATH] [--sizes 100,1000] [--kills 30] [--cgroups on|off|both]
"""
import argparse, json, os, signal, statistics, subprocess, tempfile, time, uuid, shutil

from benchlib import RELEASE_BIN, cpu_ns, memory, pct, procs_with, req, start_agent, stop_agent_and_tasks



def job(jid, count, args, delay="15s", attempts=2, mode="fail"):
    return {"Job": {"ID": jid, "Name": jid, "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": count, "EphemeralDisk": {"SizeMB": 10},
        "RestartPolicy": {"Attempts": attempts, "Interval": 600_000_000_000 if attempts > 2 else 1_800_000_000_000,
                          "Delay": int(float(delay.rstrip("s")) * 1e9), "Mode": mode},
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Resources": {"CPU": 1, "MemoryMB": 16}, "Config": {"command": args[0], "args": args[1:]},
                   "KillTimeout": 2_000_000_000}]}]}}



def ticks(pid):
    """utime + stime of the whole process in clock ticks (10 ms): a coarse cross-check."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def in_task_cgroup(marker):
    """Whether a process carrying `marker` is in a nodeward task cgroup (`.../nodeward/<alloc>.t`)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker not in f.read():
                    continue
            with open(f"/proc/{pid}/cgroup") as f:
                return any("/nodeward/" in line and line.rstrip().endswith(".t") for line in f)
        except OSError:
            pass
    return False


def run_size(binary, n, kills, cgroups="off"):
    tmp = tempfile.mkdtemp(prefix="nodeward-bench-")
    on = cgroups == "on"
    agent, addr, data = start_agent(binary, tmp, f"client {{ cgroups = {'true' if on else 'false'} }}")
    res = {"N": n, "cgroups": cgroups}
    try:
        time.sleep(1)
        res["baseline"] = memory(agent.pid)
        marker = f"{100000 + n}.{uuid.uuid4().int % 999999}"
        t0 = time.perf_counter()
        req(addr, "PUT", "/v1/jobs", job("sleepers", n, ["sleep", marker]))
        while procs_with(marker.encode()) < n:
            time.sleep(0.002)
        res["start_s"] = time.perf_counter() - t0
        confined = in_task_cgroup(marker.encode())
        if confined != on:
            raise SystemExit(f"cgroups {cgroups}: a task is {'' if confined else 'not '}in a task cgroup")
        time.sleep(2)
        res.update(memory(agent.pid))
        c0, t0 = cpu_ns(agent.pid), ticks(agent.pid); time.sleep(10); c1, t1 = cpu_ns(agent.pid), ticks(agent.pid)
        res["idle_cpu_ms_per_10s"] = (c1 - c0) / 1e6
        res["idle_cpu_ticks_per_10s"] = t1 - t0
        # Crash -> restart, with N tasks running beside it.
        pidfile = os.path.join(tmp, "probe.pid")
        req(addr, "PUT", "/v1/jobs", job("probe", 1, ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000000"],
                                         delay="0s", attempts=10000, mode="delay"))
        def read_pid():
            try:
                with open(pidfile) as f:
                    return int(f.read().strip() or 0)
            except (OSError, ValueError):
                return 0
        while read_pid() == 0:
            time.sleep(0.001)
        lat = []
        for _ in range(kills):
            old = read_pid()
            time.sleep(0.1)
            t0 = time.perf_counter()
            os.kill(old, signal.SIGKILL)
            while True:
                p = read_pid()
                if p and p != old:
                    break
                os.sched_yield()
            lat.append((time.perf_counter() - t0) * 1000)
        res["restart_ms_median"] = statistics.median(lat)
        res["restart_ms_p90"] = pct(lat, 90)
        alloc = req(addr, "GET", "/v1/job/probe/allocations")[0]["ID"]
        ev = req(addr, "GET", f"/v1/allocation/{alloc}")["TaskStates"]["t"]["Events"]
        internal = [(b["Time"] - a["Time"]) / 1e6 for a, b in zip(ev, ev[1:]) if a["Type"] == "Terminated" and b["Type"] == "Restarting"]
        starts = []
        for i, e in enumerate(ev):
            if e["Type"] == "Terminated":
                nxt = [x for x in ev[i + 1:] if x["Type"] == "Started"]
                if nxt:
                    starts.append((nxt[0]["Time"] - e["Time"]) / 1e6)
        if starts:
            res["agent_terminated_to_started_ms_median"] = statistics.median(starts)
    finally:
        # SIGTERM leaves the tasks running (live restore); the keeper's SIGTERM kills them.
        stop_agent_and_tasks(agent, data)
        shutil.rmtree(tmp, ignore_errors=True)
    return res

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--cgroups", choices=["on", "off", "both"], default="both" if os.geteuid() == 0 else "off",
                    help="run with task cgroups on, off, or both side by side (needs root for on)")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        raise SystemExit(f"{a.bin} not found: run 'cargo build --release' first")
    if a.cgroups != "off" and os.geteuid() != 0:
        raise SystemExit("--cgroups on|both needs root (the agent confines tasks only as root)")
    modes = ["off", "on"] if a.cgroups == "both" else [a.cgroups]
    results = [run_size(a.bin, int(n), a.kills, m) for n in a.sizes.split(",") for m in modes]
    for r in results:
        b = r["baseline"]
        print(f"idle agent before the N={r['N']} cgroups={r['cgroups']} run: RSS {b['Rss']:.1f} MB, PSS {b['Pss']:.1f} MB, {b['Threads']} threads")
    print(f"{'N':>5} {'cgroups':>7} {'start s':>8} {'restart med ms':>15} {'p90 ms':>7} {'RSS MB':>7} {'PSS MB':>7} {'threads':>8} {'idle CPU ms/10s':>16}")
    for r in results:
        print(f"{r['N']:>5} {r['cgroups']:>7} {r['start_s']:>8.3f} {r['restart_ms_median']:>15.2f} {r['restart_ms_p90']:>7.2f} "
              f"{r['Rss']:>7.1f} {r['Pss']:>7.1f} {r['Threads']:>8} {r['idle_cpu_ms_per_10s']:>16.2f}")
    if a.cgroups == "both":
        print("cost of confinement (cgroups on / off, same run):")
        for n in a.sizes.split(","):
            off, on = (next(r for r in results if r["N"] == int(n) and r["cgroups"] == m) for m in ("off", "on"))
            print(f"  N={n}: start {on['start_s'] / off['start_s']:.2f}x, "
                  f"crash->restarted median {on['restart_ms_median'] / off['restart_ms_median']:.2f}x "
                  f"(p90 {on['restart_ms_p90'] / off['restart_ms_p90']:.2f}x)")
    print(json.dumps(results, indent=1))

if __name__ == "__main__":
    main()
