"""Helpers shared by nodeward's benchmark scripts: the agent under test, its API, /proc readings."""
import json, os, subprocess, threading, urllib.request

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/nodeward/target"))
RELEASE_BIN = os.path.join(TARGET, "release", "nodeward")


def req(addr, method, path, body=None, timeout=300):
    """One API call; the answer as JSON (None for an empty body)."""
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://{addr}{path}", data=data, method=method)
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def start_agent(binary, tmp, extra=""):
    """Starts an agent on a fresh data directory under `tmp` and a free loopback port.
    Returns (process, API address, data directory)."""
    data = os.path.join(tmp, "d")
    cfg = os.path.join(tmp, "agent.hcl")
    with open(cfg, "w") as f:
        f.write(f'data_dir = "{data}"\nlog_level = "warn"\nports {{ http = 0 }}\n{extra}\n')
    p = subprocess.Popen([binary, "agent", "-config", cfg], stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, RUST_LOG="nodeward=info"))
    addr = None
    for line in p.stderr:
        if "API on http://" in line:
            addr = line.split("API on http://", 1)[1].strip()
            break
    if addr is None:
        raise SystemExit("agent did not start")
    # Keep draining stderr so the agent never blocks on it.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, addr, data


def cpu_ns(pids):
    """On-CPU time of every thread of `pids` (an int or a list), in nanoseconds."""
    total = 0
    for pid in [pids] if isinstance(pids, int) else pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def memory(pid):
    """RSS and PSS (MB) and the thread count of `pid`."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Rss", "Pss"):
                out[k] = int(v.split()[0]) / 1024
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                out["Threads"] = int(line.split()[1])
    return out


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def procs_with(marker):
    """How many processes have `marker` (bytes) in their command line."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read():
                    n += 1
        except OSError:
            pass
    return n
