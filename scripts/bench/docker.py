#!/usr/bin/env python3
"""The docker driver beside the engine's own floor, in one run (docs/benchmarks.md "Docker").

Starts 20 containers (`busybox:1 sleep`) through nodeward (one job, a group of count 20), through
a shell loop of `docker run -d`, and through the Engine API directly (create + start, the engine's
own time); then kills a container's process with SIGKILL, again and again,
and times kill -> a new container running: nodeward restarting its task (restart delay 0) beside a
shell loop of `docker wait; docker rm; docker run -d` (what a script supervising one container
does) and beside the same loop on the Engine API (wait, remove, create, start). Both talk to the same engine; the agent's overhead is the difference.

Needs root and Debian's docker.io. The engine is the one at --endpoint, else
NODEWARD_TEST_DOCKER_HOST, else a private one started here with scripts/docker-env.sh (and
stopped at the end). Release binaries: `cargo build --release --locked`.

    scripts/bench/docker.py [--containers 20] [--kills 15] [--bin PATH] [--endpoint unix:///...]
"""
import argparse, http.client, json, os, socket, statistics, subprocess, sys, tempfile, time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import RELEASE_BIN, pct, req, start_agent  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Engine:
    """The Engine API over its unix socket, for timing (one connection per call)."""

    def __init__(self, endpoint):
        self.path = endpoint[len("unix://"):]
        self.endpoint = endpoint

    def call(self, method, path, body=None):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        c = http.client.HTTPConnection("docker")
        c.sock = s
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {"Content-Length": "0"}
        c.request(method, "/v1.41" + path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read()
        c.close()
        return json.loads(text) if text else None

    def running(self, label):
        f = urllib.parse.quote(json.dumps({"label": [label], "status": ["running"]}))
        return self.call("GET", f"/containers/json?filters={f}")

    def pid(self, cid):
        return self.call("GET", f"/containers/{cid}/json")["State"]["Pid"]

    def docker(self, *args):
        return subprocess.run(["docker", "-H", self.endpoint, *args], check=True,
                              capture_output=True, text=True).stdout.strip()


def wait(what, f, timeout=120, step=0.001):
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        v = f()
        if v:
            return v
        time.sleep(step)
    raise SystemExit(f"timed out waiting for {what}")


def crash_loop(engine, label, kills, pick):
    """Kills the process of one running container of `label` `kills` times; the seconds from
    each kill to a new container of it running."""
    out = []
    for _ in range(kills):
        old = pick()
        pid = engine.pid(old["Id"])
        t0 = time.perf_counter()
        os.kill(pid, 9)
        new = wait("a new container", lambda: [c for c in engine.running(label)
                                               if c["Id"] != old["Id"] and c.get("Labels", {}).get("slot") == old.get("Labels", {}).get("slot")]
                   or None)
        out.append(time.perf_counter() - t0)
        time.sleep(0.3)
        del new
    return out


def slot0(engine, tag):
    """The running container of slot 0 of a floor loop's containers."""
    return [c for c in engine.running(f"{tag}=1") if c["Labels"].get("slot") == "0"][0]


def remove_tagged(engine, tag):
    ids = engine.docker("ps", "-aq", "--filter", f"label={tag}=1").split()
    if ids:
        engine.docker("rm", "-f", *ids)


def run_engine_floor(engine, n, kills):
    tag = f"nwbench-{os.getpid()}"
    t0 = time.perf_counter()
    for i in range(n):
        engine.docker("run", "-d", "--network", "none", "--label", f"{tag}=1", "--label", f"slot={i}",
                      "--name", f"{tag}-{i}", "busybox:1", "sleep", "3600")
    wait("all running", lambda: len(engine.running(f"{tag}=1")) == n)
    start = time.perf_counter() - t0
    # One shell supervisor for container 0: when it ends, it is replaced by a new one.
    loop = subprocess.Popen(["sh", "-c", f"""
        while true; do
          docker -H {engine.endpoint} wait {tag}-0 >/dev/null 2>&1
          docker -H {engine.endpoint} rm -f {tag}-0 >/dev/null 2>&1
          docker -H {engine.endpoint} run -d --network none --label {tag}=1 --label slot=0 --name {tag}-0 busybox:1 sleep 3600 >/dev/null || exit 1
        done"""])
    try:
        times = crash_loop(engine, f"{tag}=1", kills, lambda: slot0(engine, tag))
    finally:
        loop.kill()
        remove_tagged(engine, tag)
    return start, times


def run_api_floor(engine, n, kills):
    """The same through the Engine API directly (no CLI processes): the engine's own time."""
    tag = f"nwapi-{os.getpid()}"

    def create(i):
        cid = engine.call("POST", f"/containers/create?name={tag}-{i}", {
            "Image": "busybox:1", "Cmd": ["sleep", "3600"], "Labels": {tag: "1", "slot": str(i)},
            "HostConfig": {"NetworkMode": "none"}})["Id"]
        engine.call("POST", f"/containers/{cid}/start")
        return cid

    t0 = time.perf_counter()
    for i in range(n):
        create(i)
    wait("all running", lambda: len(engine.running(f"{tag}=1")) == n)
    start = time.perf_counter() - t0
    import threading
    stop = threading.Event()

    def supervise():
        while not stop.is_set():
            cur = [c for c in engine.running(f"{tag}=1") if c["Labels"].get("slot") == "0"]
            if not cur:
                time.sleep(0.01)
                continue
            engine.call("POST", f"/containers/{cur[0]['Id']}/wait")
            if stop.is_set():
                return
            engine.call("DELETE", f"/containers/{cur[0]['Id']}?force=1")
            create(0)
    th = threading.Thread(target=supervise, daemon=True)
    th.start()
    try:
        times = crash_loop(engine, f"{tag}=1", kills, lambda: slot0(engine, tag))
    finally:
        stop.set()
        remove_tagged(engine, tag)
    return start, times


def run_nodeward(binary, engine, n, kills):
    tmp = tempfile.mkdtemp(prefix="nwb", dir="/tmp")
    extra = f'plugin "docker" {{\n config {{ endpoint = "{engine.endpoint}" }}\n}}\n'
    agent, addr, _ = start_agent(binary, tmp, extra)
    job = {"Job": {"ID": "bench", "Name": "bench", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": n, "EphemeralDisk": {"SizeMB": 10},
        "RestartPolicy": {"Attempts": 100000, "Interval": 3600 * 10**9, "Delay": 0, "Mode": "delay"},
        "Tasks": [{"Name": "t", "Driver": "docker", "Resources": {"CPU": 1, "MemoryMB": 16}, "KillTimeout": 10**9,
                   "Config": {"image": "busybox:1", "command": "sleep", "args": ["3600"],
                              "network_mode": "none"}}]}]}}
    try:
        t0 = time.perf_counter()
        req(addr, "PUT", "/v1/jobs", job)
        label = "com.hashicorp.nomad.job_name=bench"

        def all_running():
            allocs = req(addr, "GET", "/v1/job/bench/allocations")
            return len(allocs) == n and all(
                (a.get("TaskStates") or {}).get("t", {}).get("State") == "running" for a in allocs)
        wait("all running in the API", all_running, step=0.005)
        start = time.perf_counter() - t0
        first = engine.running(label)[0]
        alloc = first["Labels"]["com.hashicorp.nomad.alloc_id"]
        alloc_label = f"com.hashicorp.nomad.alloc_id={alloc}"
        times = crash_loop(engine, alloc_label, kills, lambda: engine.running(alloc_label)[0])
        req(addr, "DELETE", "/v1/job/bench")
        wait("the job's containers gone", lambda: not engine.running(label), step=0.05)
    finally:
        agent.terminate()
        agent.wait(timeout=60)
        subprocess.run(["rm", "-rf", tmp])
    return start, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=20)
    ap.add_argument("--kills", type=int, default=15)
    ap.add_argument("--bin", default=RELEASE_BIN)
    ap.add_argument("--endpoint", default=os.environ.get("NODEWARD_TEST_DOCKER_HOST"))
    a = ap.parse_args()
    own = None
    if not a.endpoint:
        own = tempfile.mkdtemp(prefix="nwbd", dir="/tmp")
        a.endpoint = subprocess.run(["bash", f"{ROOT}/scripts/docker-env.sh", "start", own],
                                    check=True, capture_output=True, text=True).stdout.strip()
    engine = Engine(a.endpoint)
    try:
        rows = [("docker CLI loop", *run_engine_floor(engine, a.containers, a.kills)),
                ("Engine API loop", *run_api_floor(engine, a.containers, a.kills)),
                ("nodeward", *run_nodeward(a.bin, engine, a.containers, a.kills))]
    finally:
        if own:
            subprocess.run(["bash", f"{ROOT}/scripts/docker-env.sh", "stop", own])
    print(f"load average {os.getloadavg()[0]:.2f}; {a.containers} containers, {a.kills} kills")
    print(f"{'':18} {'start ' + str(a.containers):>10} {'restart median':>15} {'p90':>8}")
    for name, start, times in rows:
        ms = [t * 1000 for t in times]
        print(f"{name:18} {start:9.3f}s {statistics.median(ms):13.1f}ms {pct(ms, 90):7.1f}ms")
    (_, s1, t1) = rows[-1]
    for name, s0, t0 in rows[:-1]:
        print(f"nodeward / {name}: start {s1 / s0:.2f}x, restart median "
              f"{statistics.median(t1) / statistics.median(t0):.2f}x, nodeward's restart overhead "
              f"{(statistics.median(t1) - statistics.median(t0)) * 1000:+.1f} ms")


if __name__ == "__main__":
    main()
