"""Helpers shared by nodeward's benchmark scripts: the agent under test, its API, /proc readings."""
import json, os, signal, subprocess, threading, time, urllib.request

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/nodeward/target"))
RELEASE_BIN = os.path.join(TARGET, "release", "nodeward")


def req(addr, method, path, body=None, timeout=300):
    """One API call; the answer as JSON (None for an empty body)."""
    data = json.dumps(body).encode() if body is not None else None
    # urllib would label a body as a form, which the API refuses: writes are JSON (agent.md).
    headers = {"Content-Type": "application/json"} if data is not None else {}
    r = urllib.request.Request(f"http://{addr}{path}", data=data, method=method, headers=headers)
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def write_config(tmp, extra=""):
    """An agent configuration under `tmp`: its data directory `tmp`/d, a free loopback port
    (port 0: the kernel picks one at each start). Returns (config file, data directory)."""
    data = os.path.join(tmp, "d")
    cfg = os.path.join(tmp, "agent.hcl")
    with open(cfg, "w") as f:
        f.write(f'data_dir = "{data}"\nlog_level = "warn"\nports {{ http = 0 }}\n{extra}\n')
    return cfg, data


def spawn_agent(binary, cfg, on_line=None):
    """Starts an agent on `cfg` and waits for its API. `on_line(line, t)` (optional) sees every
    line of its stderr with the perf_counter time it was read, before and after the API is up.
    Returns (process, API address)."""
    p = subprocess.Popen([binary, "agent", "-config", cfg], stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, RUST_LOG="nodeward=info"))
    addr = None
    for line in p.stderr:
        if on_line:
            on_line(line, time.perf_counter())
        if "API on http://" in line:
            addr = line.split("API on http://", 1)[1].strip()
            break
    if addr is None:
        raise SystemExit("agent did not start")
    # Keep draining stderr so the agent never blocks on it.
    def drain():
        for line in p.stderr:
            if on_line:
                on_line(line, time.perf_counter())
    threading.Thread(target=drain, daemon=True).start()
    return p, addr


def start_agent(binary, tmp, extra=""):
    """Starts an agent on a fresh data directory under `tmp` and a free loopback port.
    Returns (process, API address, data directory)."""
    cfg, data = write_config(tmp, extra)
    p, addr = spawn_agent(binary, cfg)
    return p, addr, data


def alive(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def keeper_pid(data):
    """The PID of the task keeper of data directory `data` (`nodeward-keeper`, the parent of every
    task since live restore), or None when none runs: its `keeper.pid`, checked against its
    command line, else the process whose command line is `nodeward-keeper <data>`."""
    want = os.fsencode(os.path.abspath(data))
    def is_keeper(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return False
        return (len(argv) >= 2 and os.path.basename(argv[0]) == b"nodeward-keeper"
                and os.path.abspath(argv[1]) == want)
    try:
        with open(os.path.join(data, "keeper.pid")) as f:
            pid = int(f.read().strip())
        if is_keeper(pid) and alive(pid):
            return pid
    except (OSError, ValueError):
        pass
    for p in os.listdir("/proc"):
        if p.isdigit() and is_keeper(int(p)) and alive(int(p)):
            return int(p)
    return None


def stop_keeper(data, timeout=60):
    """SIGTERM to the data directory's keeper, which kills every task's process group and ends;
    SIGKILL after `timeout` (its tasks die with it: parent-death signal). Returns the seconds it
    took to end, None when no keeper runs."""
    kp = keeper_pid(data)
    if not kp:
        return None
    t = time.perf_counter()
    os.kill(kp, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(kp) and time.monotonic() < deadline:
        time.sleep(0.01)
    if alive(kp):
        os.kill(kp, signal.SIGKILL)
        while alive(kp):
            time.sleep(0.01)
    return time.perf_counter() - t


def stop_agent_and_tasks(agent, data, marker=None, timeout=60):
    """Stops what an agent run left: SIGTERM to the agent (which leaves its tasks running), then
    SIGTERM to the data directory's keeper, which kills every task's process group and ends;
    then waits until no process with `marker` (bytes) in its command line is left, SIGKILLing
    stragglers at the end. Returns the seconds the keeper took to end (None without a keeper)."""
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    took = stop_keeper(data, timeout)
    if marker:
        deadline = time.monotonic() + timeout
        while pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        for p in pids_with(marker):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    return took


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


def rollup(pid):
    """Every field of /proc/<pid>/smaps_rollup in MB (Rss, Pss, Pss_Anon, Pss_File, ...), and
    the thread count as Threads; {} when the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if v.strip().endswith("kB"):
                    out[k] = int(v.split()[0]) / 1024
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    out["Threads"] = int(line.split()[1])
    except OSError:
        return {}
    return out


def pss_by_mapping(pid):
    """PSS (MB) of `pid` by what is mapped, from /proc/<pid>/smaps: each file by its base name,
    `[heap]`, `[stack]`, and `anon` for unnamed mappings (thread stacks, malloc arenas)."""
    out, name = {}, None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 5)
                if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                    path = head[5].strip() if len(head) == 6 else ""
                    name = os.path.basename(path) if path.startswith("/") else (path or "anon")
                elif line.startswith("Pss:") and name is not None:
                    out[name] = out.get(name, 0.0) + int(line.split()[1]) / 1024
    except OSError:
        return {}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def pids_with(marker):
    """The live processes that have `marker` (bytes) in their command line."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker in f.read() and alive(pid):
                    out.append(int(pid))
        except OSError:
            pass
    return out


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
