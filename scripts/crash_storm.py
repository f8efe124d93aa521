#!/usr/bin/env python3
"""Crash storm: SIGKILL the agent at random instants while requests are in flight, restart it, and
check after every round that nothing acknowledged was lost and nothing runs twice.

One agent runs on a temporary data directory and a loopback port. Each round, a few client threads
create and delete host volumes (the built-in `mkdir` plugin and an external shell-script plugin) and
register and stop (some with purge) jobs whose one task is `/bin/sleep <marker>`, a marker unique to
the job; half of those tasks ignore their kill signal, so a stop waits out their `kill_timeout`.
After a random delay the agent is SIGKILLed, the clients stop, the agent is started again (in some
rounds it is also interrupted once while it starts, restoring volumes and allocations: half of those
times by SIGKILL, half by SIGTERM, which must end the start-up with exit 0 and lose nothing), and the
checks run:

  - the state file loads: the agent starts and serves its API;
  - every create the API acknowledged (HTTP 200) is listed, `ready`, and in the node's `HostVolumes`
    with the same ID; every acknowledged delete is gone; no volume name appears twice (in
    `GET /v1/volumes?type=host` or in `HostVolumes`); every listed volume is `ready`;
  - every job whose registration was acknowledged is registered and not stopped; an acknowledged stop
    is stopped (or gone, with purge); the agent knows no job nobody registered;
  - every job that should run has exactly one process carrying its marker once the agent has settled
    (tasks outlive the agent: the new agent re-attaches to the running one, or adopts it when its
    start never reached the state file), and a stopped or unknown job none; a count above one at
    any sample is a failure at once.

A request that was in flight at the kill (or failed) may or may not have taken effect: after the
check, the model adopts what the agent says for those.

The script makes itself a child subreaper, so processes orphaned by the killed agent (tasks, plugin
runs) become its children and are reaped instead of piling up as zombies. At the end it stops the
agent, SIGKILLs the process group of every task it knows of and removes its temporary directory.

Prints one line per round and, last, `N passed, M failed` alone on a line. Exit status 0 only when
every round passed.

Usage: scripts/crash_storm.py [--rounds 200] [--bin PATH] [--seed S] [--kill-max 0.6]
                              [--start-kills 0.25] [--time-limit 3600] [--keep]
A failing round prints what it found, what the agent says about the jobs concerned and the tail of
the agent's log; `--seed` repeats a storm's choices (not its timing).
"""
import argparse
import ctypes
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
HTTP_TIMEOUT = 15.0
START_TIMEOUT = 60.0
SETTLE_TIMEOUT = 30.0
# The longest time a client thread may take to notice the stop after the kill.
JOIN_TIMEOUT = 2 * HTTP_TIMEOUT + 5
MAX_VOLUMES_PER_WORKER = 4
MAX_JOBS_PER_WORKER = 3

EXT_PLUGIN = r"""#!/bin/sh
# A host-volume plugin speaking nodeward's DHV protocol. It gets no PATH: every path is absolute.
case "$1" in
  fingerprint) echo '{"version": "0.1.0"}' ;;
  create)
    /bin/mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" || exit 1
    echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": 1048576}" ;;
  delete) /bin/rm -rf "$DHV_CREATED_PATH" || exit 1 ;;
  *) echo '{"error": "unknown operation"}'; exit 1 ;;
esac
"""


def default_bin():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/nodeward/target")
    return os.path.join(target, "release", "nodeward")


# ---- HTTP ----------------------------------------------------------------------------------------


class Interrupted(Exception):
    """SIGTERM: stop the storm, clean up, report."""


class Refused(Exception):
    """The agent answered with a status other than 200."""

    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body.strip()[:200]}")
        self.status = status


def no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"duplicate key {k!r} in a JSON object")
        seen[k] = v
    return seen


def call(addr, method, path, body=None):
    """One request on a connection of its own; returns the decoded JSON of a 200 answer."""
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=HTTP_TIMEOUT)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            raise Refused(resp.status, text)
        return json.loads(text, object_pairs_hook=no_duplicate_keys) if text else None
    finally:
        conn.close()


# ---- processes -----------------------------------------------------------------------------------


def read_proc(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def stat_fields(pid):
    """(state, ppid, pgid) of a process, or None when it is gone."""
    raw = read_proc(pid, "stat")
    if raw is None:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    return rest[0].decode(), int(rest[1]), int(rest[2])


def pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def marker_processes(token):
    """Live (non-zombie) processes whose command line carries a marker of this storm:
    {marker: [(pid, pgid)]}."""
    pattern = re.compile(rb"100000\." + token.encode() + rb"\d{8}")
    found = {}
    for pid in pids():
        cmd = read_proc(pid, "cmdline")
        if not cmd or token.encode() not in cmd:
            continue
        st = stat_fields(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        for marker in set(pattern.findall(cmd)):
            found.setdefault(marker.decode(), []).append((pid, st[2]))
    return found


class Reaper:
    """Reaps zombie children other than the agent (whose status Popen collects)."""

    def __init__(self):
        self.keep = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="reaper", daemon=True)

    def run(self):
        me = os.getpid()
        while not self.stop.wait(0.05):
            for pid in pids():
                if pid in self.keep:
                    continue
                st = stat_fields(pid)
                if st and st[1] == me and st[0] == "Z":
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass


class Agent:
    def __init__(self, binary, tmp, reaper):
        self.binary = binary
        self.tmp = tmp
        self.reaper = reaper
        self.config = os.path.join(tmp, "agent.hcl")
        self.log_path = os.path.join(tmp, "agent.log")
        self.proc = None
        self.addr = None
        self.log_offset = 0
        with open(self.config, "w") as f:
            f.write(
                f'data_dir = "{tmp}/data"\nname = "storm-node"\nlog_level = "info"\n'
                f'bind_addr = "127.0.0.1"\nports {{ http = 0 }}\n'
                f'client {{\n  host_volume_plugin_dir = "{tmp}/plugins"\n'
                f'  host_volumes_dir = "{tmp}/volumes"\n}}\n'
            )

    def start(self, label):
        """Starts the agent and waits for its API; returns None or why it did not start."""
        self.launch(label)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log_since_start()
            i = text.find("API on http://")
            if i >= 0 and "\n" in text[i:]:
                self.addr = text[i + len("API on http://"):].split("\n", 1)[0].strip()
                return None
            if self.proc.poll() is not None:
                return f"agent exited with status {self.proc.returncode} before serving its API"
            time.sleep(0.01)
        return f"agent did not serve its API within {START_TIMEOUT:.0f} s"

    def launch(self, label):
        with open(self.log_path, "ab") as log:
            log.write(f"=== {label} ===\n".encode())
            self.log_offset = log.tell()
            env = dict(os.environ)
            env.pop("RUST_LOG", None)
            self.proc = subprocess.Popen(
                [self.binary, "agent", "-config", self.config],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                start_new_session=True,
            )
        self.reaper.keep.add(self.proc.pid)

    def log_since_start(self):
        with open(self.log_path, "rb") as f:
            f.seek(self.log_offset)
            return f.read().decode("utf-8", "replace")

    def kill(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reaper.keep.discard(self.proc.pid)
        self.proc = None

    def shutdown(self):
        """SIGTERM (the agent leaves its tasks running), SIGKILL after 30 s. Returns the exit status
        (negative: the signal that ended it; None: it needed the SIGKILL)."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self.reaper.keep.discard(self.proc.pid)
        self.proc = None
        return code


# ---- the model of what the agent must hold --------------------------------------------------------

# Volume states in the model: "present" (create acknowledged: id known), "absent" (delete
# acknowledged, or never created), "unsure" (a request in flight or refused: either outcome is fine).
# Job states: "run", "stopped" (stop acknowledged, kept), "purged" (stop with purge acknowledged),
# "unsure".


class Model:
    def __init__(self):
        # Guards: volumes and jobs. Each name is only ever changed by the worker that owns it, one
        # request at a time, so the lock only keeps the dictionaries whole.
        self.lock = threading.Lock()
        self.volumes = {}  # name -> {"state", "id", "plugin"}
        self.jobs = {}  # job id -> {"state", "marker"}
        self.in_flight = {}  # worker -> description of its request now
        self.acked = 0
        self.refused = 0
        # Requests a live agent answered with an error: what, why (reported with the round).
        self.errors = []


class Worker(threading.Thread):
    def __init__(self, wid, kind, plugin, model, addr, stop, rng, token):
        super().__init__(name=f"worker-{wid}", daemon=True)
        self.wid, self.kind, self.plugin = wid, kind, plugin
        self.model, self.addr, self.stop, self.rng, self.token = model, addr, stop, rng, token
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                if self.kind == "volume":
                    self.volume_step()
                else:
                    self.job_step()
        except Exception as e:  # a bug in this script: report it, fail the round
            self.error = f"{type(e).__name__}: {e}"

    def mine(self, table, state):
        prefix = f"w{self.wid}-"
        return sorted(k for k, v in table.items() if k.startswith(prefix) and v["state"] == state)

    def request(self, what, method, path, body=None):
        """Sends one request; returns (answer, None) on a 200, (None, reason) otherwise."""
        with self.model.lock:
            self.model.in_flight[self.wid] = what
        try:
            answer = call(self.addr, method, path, body)
            with self.model.lock:
                self.model.acked += 1
            return answer, None
        except (OSError, http.client.HTTPException, Refused, ValueError) as e:
            with self.model.lock:
                self.model.refused += 1
                if isinstance(e, Refused):
                    self.model.errors.append(f"{what}: {e}")
            if not isinstance(e, Refused):
                self.stop.wait(0.05)  # the agent is gone: do not spin until the round ends
            return None, str(e) or type(e).__name__
        finally:
            with self.model.lock:
                self.model.in_flight.pop(self.wid, None)

    def volume_step(self):
        m = self.model
        with m.lock:
            present = self.mine(m.volumes, "present")
            seq = sum(1 for k in m.volumes if k.startswith(f"w{self.wid}-"))
        if present and (len(present) >= MAX_VOLUMES_PER_WORKER or self.rng.random() < 0.4):
            name = self.rng.choice(present)
            with m.lock:
                vid = m.volumes[name]["id"]
                m.volumes[name]["state"] = "unsure"
            answer, _ = self.request(f"delete {name}", "DELETE", f"/v1/volume/host/{vid}")
            if answer is not None:
                with m.lock:
                    m.volumes[name] = {"state": "absent", "id": vid, "plugin": m.volumes[name]["plugin"]}
            return
        plugin = self.plugin or self.rng.choice(["mkdir", "ext"])
        name = f"w{self.wid}-{plugin}-{seq}"
        with m.lock:
            m.volumes[name] = {"state": "unsure", "id": None, "plugin": plugin}
        body = {"Volume": {"Name": name, "PluginID": plugin, "Parameters": {"mode": "0755"}}}
        answer, _ = self.request(f"create {name}", "PUT", "/v1/volume/host/create", body)
        if answer is not None:
            vol = answer.get("Volume") or {}
            with m.lock:
                m.volumes[name] = {"state": "present", "id": vol.get("ID"), "plugin": plugin}
                if vol.get("State") != "ready":
                    m.volumes[name]["bad_answer"] = f"create answered state {vol.get('State')!r}"

    def job_step(self):
        m = self.model
        with m.lock:
            running = self.mine(m.jobs, "run")
            seq = sum(1 for k in m.jobs if k.startswith(f"w{self.wid}-"))
        if running and (len(running) >= MAX_JOBS_PER_WORKER or self.rng.random() < 0.3):
            jid = running[0]
            purge = self.rng.random() < 0.7
            with m.lock:
                m.jobs[jid]["state"] = "unsure"
            path = f"/v1/job/{jid}" + ("?purge=true" if purge else "")
            answer, _ = self.request(f"stop {jid}", "DELETE", path)
            if answer is not None:
                with m.lock:
                    m.jobs[jid]["state"] = "purged" if purge else "stopped"
            return
        jid = f"w{self.wid}-job-{seq}"
        marker = f"100000.{self.token}{self.wid:02d}{seq:06d}"
        if self.rng.random() < 0.5:
            command = '"/bin/sleep"'
            args = f'"{marker}"'
        else:
            # A task that ignores its kill signal (SIGINT) and dies only by SIGKILL, `kill_timeout`
            # after the stop: a crash within that time must not leave it running.
            command = '"/bin/sh"'
            args = f'"-c", "trap \'\' INT; exec /bin/sleep {marker}"'
        hcl = (
            f'job "{jid}" {{\n  group "g" {{\n    task "t" {{\n      driver = "raw_exec"\n'
            f'      kill_timeout = "2s"\n'
            f'      config {{\n        command = {command}\n        args = [{args}]\n      }}\n'
            f"    }}\n  }}\n}}\n"
        )
        parsed, why = self.request(f"parse {jid}", "POST", "/v1/jobs/parse", {"JobHCL": hcl})
        if parsed is None:
            if self.stop.is_set() or "HTTP" not in why:
                return  # the agent is gone; nothing was registered
            raise RuntimeError(f"the agent refused to parse job {jid}: {why}")
        with m.lock:
            m.jobs[jid] = {"state": "unsure", "marker": marker}
        answer, _ = self.request(f"register {jid}", "PUT", "/v1/jobs", {"Job": parsed})
        if answer is not None:
            with m.lock:
                m.jobs[jid]["state"] = "run"


# ---- the checks after a restart ------------------------------------------------------------------


def check_volumes(addr, model):
    problems = []
    listed = call(addr, "GET", "/v1/volumes?type=host")
    nodes = call(addr, "GET", "/v1/nodes")
    node = call(addr, "GET", f"/v1/node/{nodes[0]['ID']}")
    host_volumes = node.get("HostVolumes") or {}
    by_name = {}
    for v in listed:
        by_name.setdefault(v["Name"], []).append(v)
    for name, vs in by_name.items():
        if len(vs) > 1:
            problems.append(f"volume name {name!r} listed {len(vs)} times: {[v['ID'] for v in vs]}")
    for v in listed:
        if v["State"] != "ready":
            problems.append(f"volume {v['Name']!r} ({v['ID']}) is {v['State']!r} after the restart")
    for name, hv in host_volumes.items():
        ids = [v["ID"] for v in by_name.get(name, [])]
        if hv.get("ID") not in ids:
            problems.append(f"HostVolumes has {name!r} with ID {hv.get('ID')!r}, the list has {ids}")
        elif not os.path.isdir(hv.get("Path", "")):
            problems.append(f"volume {name!r}: its path {hv.get('Path')!r} is not a directory")
    for name in by_name:
        if name not in host_volumes and all(v["State"] == "ready" for v in by_name[name]):
            problems.append(f"ready volume {name!r} is missing from the node's HostVolumes")
    with model.lock:
        for name, want in model.volumes.items():
            got = by_name.get(name, [])
            if "bad_answer" in want:
                problems.append(f"volume {name!r}: {want.pop('bad_answer')}")
            if want["state"] == "present":
                if not any(v["ID"] == want["id"] for v in got):
                    problems.append(f"acknowledged create of {name!r} ({want['id']}) was lost")
                elif name not in host_volumes:
                    problems.append(f"acknowledged volume {name!r} is not in HostVolumes")
            elif want["state"] == "absent":
                if got or name in host_volumes:
                    problems.append(f"acknowledged delete of {name!r} ({want['id']}) came back")
            else:
                if got:
                    want.update(state="present", id=got[0]["ID"])
                else:
                    want["state"] = "absent"
        for name in by_name:
            if name not in model.volumes:
                problems.append(f"volume {name!r} was never requested")
    return problems, len(listed)


def check_jobs(addr, model, token):
    problems = []
    listed = {j["ID"]: j for j in call(addr, "GET", "/v1/jobs")}
    with model.lock:
        for jid, want in model.jobs.items():
            got = listed.get(jid)
            if want["state"] == "run" and (got is None or got.get("Stop")):
                problems.append(f"acknowledged registration of job {jid} was lost"
                                + (" (it is stopped)" if got else ""))
            elif want["state"] == "stopped" and (got is None or not got.get("Stop")):
                problems.append(f"acknowledged stop of job {jid} was lost" if got else
                                f"stopped job {jid} (not purged) is gone")
            elif want["state"] == "purged" and got is not None:
                problems.append(f"acknowledged purge of job {jid} was lost")
            elif want["state"] == "unsure":
                want["state"] = "purged" if got is None else ("stopped" if got.get("Stop") else "run")
        for jid in listed:
            if jid not in model.jobs:
                problems.append(f"job {jid} was never registered")
        expected = {j["marker"]: (jid, 1 if j["state"] == "run" else 0)
                    for jid, j in model.jobs.items()}
    # Wait for the agent to stop leftovers and start each task once; two at any sample is a failure.
    deadline = time.monotonic() + SETTLE_TIMEOUT
    stable_since = None
    while True:
        found = marker_processes(token)
        twice = {a: ps for a, ps in found.items() if len(ps) > 1}
        for arg, ps in twice.items():
            jid = expected.get(arg, ("?",))[0]
            problems.append(f"job {jid}: {len(ps)} processes run its task at once: {ps}")
        if twice:
            return problems
        wrong = {}
        for arg, (jid, n) in expected.items():
            have = len(found.get(arg, []))
            if have != n:
                wrong[jid] = (have, n)
        for arg in found:
            if arg not in expected:
                wrong[f"unknown marker {arg}"] = (len(found[arg]), 0)
        now = time.monotonic()
        if not wrong:
            stable_since = stable_since or now
            if now - stable_since >= 0.3:
                return problems
        else:
            stable_since = None
        if now > deadline:
            for jid, (have, n) in sorted(wrong.items()):
                problems.append(f"job {jid}: {have} task processes {SETTLE_TIMEOUT:.0f} s after the "
                                f"restart, expected {n}; {task_summary(addr, jid)}")
            # Stop what should not run, so later rounds are judged on their own.
            for arg, (jid, n) in expected.items():
                if n == 0:
                    kill_groups(found.get(arg, []))
            for arg in found:
                if arg not in expected:
                    kill_groups(found[arg])
            return problems
        time.sleep(0.05)


def task_summary(addr, jid):
    """What the agent says about a job's task: status and its last events."""
    try:
        allocs = call(addr, "GET", f"/v1/job/{jid}/allocations")
    except (OSError, http.client.HTTPException, Refused, ValueError) as e:
        return f"the agent: {e}"
    out = []
    for a in allocs:
        st = (a.get("TaskStates") or {}).get("t") or {}
        events = [f"{e.get('Type')}: {e.get('DisplayMessage')}" for e in st.get("Events") or []]
        out.append(f"alloc {a['ID'][:8]} desired {a.get('DesiredStatus')} client "
                   f"{a.get('ClientStatus')} task {st.get('State')} failed {st.get('Failed')} "
                   f"events [{' | '.join(events[-5:])}]")
    return "; ".join(out) or "no allocations"


def kill_groups(procs):
    for pid, pgid in procs:
        for target, kill in ((pgid, os.killpg), (pid, os.kill)):
            try:
                kill(target, signal.SIGKILL)
            except OSError:
                pass


# ---- the storm -----------------------------------------------------------------------------------


def storm(args):
    rng = random.Random(args.seed)
    token = f"{rng.randrange(10**6):06d}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("warning: cannot become a child subreaper; orphaned tasks stay zombies",
              file=sys.stderr)
    reaper = Reaper()
    reaper.thread.start()
    tmp = tempfile.mkdtemp(prefix="nw-storm-")
    os.makedirs(os.path.join(tmp, "plugins"))
    plugin = os.path.join(tmp, "plugins", "ext")
    with open(plugin, "w") as f:
        f.write(EXT_PLUGIN)
    os.chmod(plugin, 0o755)
    agent = Agent(args.bin, tmp, reaper)
    model = Model()
    passed = failed = 0
    began = time.monotonic()
    last_start = 0.1
    print(f"crash storm: {args.rounds} rounds, seed {args.seed}, binary {args.bin}, dir {tmp}",
          flush=True)
    def interrupted(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupted)
    try:
        why = agent.start("first start")
        if why:
            print(f"the agent did not start: {why}\n{agent.log_since_start()[-3000:]}", flush=True)
            return 0, 1, tmp
        for rnd in range(1, args.rounds + 1):
            if time.monotonic() - began > args.time_limit:
                print(f"time limit of {args.time_limit:.0f} s reached after {rnd - 1} rounds",
                      flush=True)
                failed += 1
                break
            stop = threading.Event()
            workers = [
                Worker(1, "volume", "mkdir", model, agent.addr, stop, random.Random(rng.random()), token),
                Worker(2, "volume", "ext", model, agent.addr, stop, random.Random(rng.random()), token),
                Worker(3, "volume", None, model, agent.addr, stop, random.Random(rng.random()), token),
                Worker(4, "job", None, model, agent.addr, stop, random.Random(rng.random()), token),
                Worker(5, "job", None, model, agent.addr, stop, random.Random(rng.random()), token),
            ]
            acked0 = model.acked
            with model.lock:
                model.errors.clear()
            for w in workers:
                w.start()
            delay = rng.uniform(0.0, args.kill_max)
            time.sleep(delay)
            with model.lock:
                flight = sorted(model.in_flight.values())
            agent.kill()
            stop.set()
            for w in workers:
                w.join(JOIN_TIMEOUT)
            problems = [f"client {w.name}: {w.error}" for w in workers if w.error]
            problems += [f"client {w.name} did not stop" for w in workers if w.is_alive()]
            acked = model.acked - acked0
            # Sometimes also interrupt the agent while it starts: restoring volumes and allocations.
            early, how = None, ""
            if rng.random() < args.start_kills:
                early = rng.uniform(0.0, max(0.05, 1.2 * last_start))
                agent.launch(f"round {rnd}, interrupted while starting")
                time.sleep(early)
                if rng.random() < 0.5:
                    how = "killed"
                    agent.kill()
                else:
                    how = "stopped with SIGTERM"
                    code = agent.shutdown()
                    # -SIGTERM: the signal came before the agent installed its handlers (the first
                    # milliseconds), which systemd also counts as a clean stop.
                    if code not in (0, -signal.SIGTERM):
                        problems.append(f"SIGTERM while starting: exit status {code}, not 0")
            t0 = time.monotonic()
            why = agent.start(f"round {rnd}")
            restart = time.monotonic() - t0
            last_start = restart
            nvol = 0
            if why:
                problems.append(f"the state file did not load: {why}")
            else:
                try:
                    vp, nvol = check_volumes(agent.addr, model)
                    problems += vp
                    problems += check_jobs(agent.addr, model, token)
                except (OSError, http.client.HTTPException, Refused, ValueError) as e:
                    problems.append(f"checking the agent failed: {e}")
            with model.lock:
                running = sum(1 for j in model.jobs.values() if j["state"] == "run")
                errors = list(model.errors)
            head = (f"round {rnd}/{args.rounds}: killed after {delay:.3f} s with "
                    f"{len(flight)} in flight ({', '.join(flight) or 'none'}); {acked} acknowledged, "
                    f"{len(errors)} answered with an error; "
                    + (f"{how} again {early:.3f} s into its start; " if early is not None else "")
                    + f"restart {restart:.2f} s; "
                    f"{nvol} volumes, {running} jobs running")
            if errors:
                head += " [" + "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else "") + "]"
            if problems:
                failed += 1
                print(f"{head}: FAIL", flush=True)
                for p in problems:
                    print(f"  - {p}", flush=True)
                tail = agent.log_since_start()[-2000:] if not why else agent.log_since_start()[-4000:]
                print("  agent log since the restart (tail):", flush=True)
                for line in tail.splitlines()[-20:]:
                    print(f"    {line}", flush=True)
                if why:
                    break
            else:
                passed += 1
                print(f"{head}: ok", flush=True)
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"interrupted ({e or 'SIGINT'}) during round {passed + failed + 1}", flush=True)
        failed += 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        agent.shutdown()
        stop_keeper(f"{tmp}/data")
        reaper.stop.set()
        cleanup(token)
    print(f"storm took {time.monotonic() - began:.0f} s", flush=True)
    return passed, failed, tmp


def stop_keeper(data_dir):
    """Tasks outlive the agent: SIGTERM the data directory's keeper, which kills every task's
    process group and exits, and wait up to 10 s for it to go."""
    try:
        with open(os.path.join(data_dir, "keeper.pid")) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (OSError, ChildProcessError):
            return
        time.sleep(0.02)


def cleanup(token):
    """SIGKILLs the process group of every task of this storm still running, and reaps them."""
    for _ in range(50):
        found = marker_processes(token)
        if not found:
            break
        for ps in found.values():
            kill_groups(ps)
        time.sleep(0.05)
        reap_children()
    reap_children()


def reap_children():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--bin", default=default_bin(), help="the nodeward binary (default: release build)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    ap.add_argument("--kill-max", type=float, default=0.6,
                    help="the kill comes at a uniformly random delay up to this many seconds")
    ap.add_argument("--start-kills", type=float, default=0.25,
                    help="the share of rounds that also interrupt the agent while it starts again")
    ap.add_argument("--time-limit", type=float, default=3600,
                    help="stop after the round running when this many seconds have passed")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 10**9
    if not os.access(args.bin, os.X_OK):
        print(f"no executable nodeward at {args.bin}; build it or pass --bin", file=sys.stderr)
        return 2
    passed, failed, tmp = storm(args)
    if args.keep or failed:
        print(f"kept {tmp}" if args.keep else f"removing {tmp} (pass --keep to keep it)", flush=True)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 and passed == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
