#!/usr/bin/env python3
"""Agent start with N running tasks (1,000 by default) to every task `running` in the API
(live-restore.md: "under 1 s").

Starts a release agent on a temporary data directory and a free port, registers one job (or
`--jobs` K jobs) with N groups in all, of one raw_exec `sleep` task each, and waits until the API shows all N running with a PID.
Then, `--runs` times: SIGTERM the agent (the tasks stay, held by the data directory's keeper),
check that the N processes still run, start the agent again on the same configuration and data
directory, and time, from just before the new agent process is spawned:
  - "API line": the agent's `API on http://...` log line was read;
  - "API answers": the first answer of GET /v1/agent/health;
  - "all running": the end of the first answer of GET /v1/allocations in which all N tasks are
    `running` with the PID they had before (polled without pause from "API answers" on);
  - "all re-attached": the agent has logged `re-attached to process` for all N tasks (its runners
    took their processes back from the keeper; a task's recorded state, `running` and its PID,
    is restored from the state file, so the API alone cannot tell that moment).
After every restart it checks, from the API, that every task kept its PID and StartedAt, that
Restarts is 0 and that no new Started event appeared, and that the keeper is the same process.
Prints each run and the medians; asserts nothing. At the end it SIGTERMs the agent, then the
keeper (which kills every task), and waits until no task process is left.

Usage: scripts/bench/reattach.py [--bin PATH] [--tasks 1000] [--runs 5] [--jobs 1]
"""
import argparse, json, os, shutil, statistics, tempfile, time, urllib.error, urllib.request

from benchlib import (RELEASE_BIN, keeper_pid, pids_with, req, rollup, spawn_agent,
                      stop_agent_and_tasks, write_config)

def jobs(n, k, marker):
    """N groups of one `sleep` task each, spread over K jobs."""
    groups = [{"Name": f"g{i}", "Count": 1, "EphemeralDisk": {"SizeMB": 10},
               "RestartPolicy": {"Attempts": 2, "Interval": 1_800_000_000_000, "Delay": 15_000_000_000, "Mode": "fail"},
               "Tasks": [{"Name": "t", "Driver": "raw_exec", "Resources": {"CPU": 1, "MemoryMB": 16},
                          "Config": {"command": "/bin/sleep", "args": [marker]}}]}
              for i in range(n)]
    return [{"Job": {"ID": f"reattach{j}", "Name": f"reattach{j}", "Type": "service", "TaskGroups": groups[j::k]}}
            for j in range(k)]


def tasks(addr):
    """(alloc ID, task) -> its state in the API: State, PID, Restarts, StartedAt, Started events."""
    out = {}
    for a in req(addr, "GET", "/v1/allocations", timeout=30):
        for name, s in (a.get("TaskStates") or {}).items():
            out[(a["ID"], name)] = {
                "State": s.get("State"), "PID": s.get("PID"), "Restarts": s.get("Restarts"),
                "StartedAt": s.get("StartedAt"),
                "Started": sum(1 for e in s.get("Events") or [] if e.get("Type") == "Started")}
    return out


def all_running(ts, n, pids=None):
    return len(ts) == n and all(
        s["State"] == "running" and s["PID"] and (pids is None or s["PID"] == pids[k])
        for k, s in ts.items())


def restart(binary, cfg, n, before):
    """One agent start on the existing data directory; returns (agent, address, timings, last
    answer)."""
    times = {}
    reattached = []
    def on_line(line, t):
        if "re-attached to process" in line:
            reattached.append(t)
    t0 = time.perf_counter()
    agent, addr = spawn_agent(binary, cfg, on_line)
    times["api_line"] = time.perf_counter() - t0
    pids = {k: s["PID"] for k, s in before.items()}
    while True:
        try:
            req(addr, "GET", "/v1/agent/health", timeout=30)
            break
        except (urllib.error.URLError, ConnectionError):
            pass
    times["api_answers"] = time.perf_counter() - t0
    ts = None
    polls = 0
    while True:
        try:
            polls += 1
            ts = tasks(addr)
        except (urllib.error.URLError, ConnectionError):
            continue
        now = time.perf_counter() - t0
        if all_running(ts, n, pids):
            times["all_running"] = now
            times["polls"] = polls
            break
        if now > 120:
            raise SystemExit(f"not all {n} tasks running 120 s after the agent's start")
    deadline = time.monotonic() + 60
    while len(reattached) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    times["reattached"] = (reattached[-1] - t0) if len(reattached) >= n else None
    times["reattached_count"] = len(reattached)
    return agent, addr, times, ts


def check(before, after):
    """What changed across the restart, as a list of complaints (empty: nothing did)."""
    bad = []
    for k, b in before.items():
        a = after.get(k)
        if a is None:
            bad.append(f"{k}: missing"); continue
        for f in ("PID", "StartedAt", "Started"):
            if a[f] != b[f]:
                bad.append(f"{k}: {f} {b[f]} -> {a[f]}")
        if a["Restarts"] != 0:
            bad.append(f"{k}: Restarts {a['Restarts']}")
        if a["State"] != "running":
            bad.append(f"{k}: State {a['State']}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="spread the tasks over this many jobs")
    a = ap.parse_args()
    n = a.tasks
    marker = f"{500000 + n}.25"
    tmp = tempfile.mkdtemp(prefix="nwr-", dir="/tmp")
    cfg, data = write_config(tmp)
    agent = None
    try:
        agent, addr = spawn_agent(a.bin, cfg)
        t = time.perf_counter()
        for j in jobs(n, a.jobs, marker):
            req(addr, "PUT", "/v1/jobs", j)
        while not all_running(before := tasks(addr), n):
            time.sleep(0.05)
        print(f"registered {n} tasks in {a.jobs} job(s): all running in the API after {time.perf_counter() - t:.2f} s")
        keeper = keeper_pid(data)
        print(f"keeper pid {keeper}: {rollup(keeper).get('Pss', 0):.2f} MB PSS with {n} tasks")
        rows = []
        for run in range(1, a.runs + 1):
            t = time.perf_counter()
            agent.terminate()
            agent.wait(timeout=120)
            stopped = time.perf_counter() - t
            alive = len(pids_with(marker.encode()))
            agent, addr, times, after = restart(a.bin, cfg, n, before)
            bad = check(before, after)
            same_keeper = keeper_pid(data) == keeper
            rows.append(times)
            re = times["reattached"]
            print(f"run {run}: agent stopped in {stopped:.2f} s, {alive} of {n} tasks alive meanwhile; "
                  f"API line {times['api_line'] * 1000:.0f} ms, API answers {times['api_answers'] * 1000:.0f} ms, "
                  f"all running {times['all_running'] * 1000:.0f} ms ({times['polls']} polls), all re-attached "
                  + (f"{re * 1000:.0f} ms" if re is not None else f"- ({times['reattached_count']} logged)")
                  + f"; PIDs, StartedAt, Started events unchanged and Restarts 0: "
                  + ("yes" if not bad else f"NO ({len(bad)}: {bad[:3]})")
                  + f"; same keeper: {'yes' if same_keeper else 'NO'}")
            before = after
        med = lambda k: statistics.median(r[k] for r in rows if r[k] is not None) * 1000
        print(f"median of {len(rows)} restarts with {n} running tasks: API line {med('api_line'):.0f} ms, "
              f"API answers {med('api_answers'):.0f} ms, all running {med('all_running'):.0f} ms, "
              f"all re-attached {med('reattached'):.0f} ms")
        print(f"agent after the last restart: {rollup(agent.pid).get('Pss', 0):.2f} MB PSS; keeper "
              f"{rollup(keeper).get('Pss', 0):.2f} MB PSS")
    finally:
        if agent is not None:
            took = stop_agent_and_tasks(agent, data, marker.encode())
            left = len(pids_with(marker.encode()))
            print(f"cleanup: keeper stopped in {took:.2f} s, {left} task processes left"
                  if took is not None else f"cleanup: no keeper, {left} task processes left")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
