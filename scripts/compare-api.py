#!/usr/bin/env python3
"""Compares the API answers of two nodeward binaries on the same state file, byte for byte.

A restructuring (issue 31: plan apart from apply, the allocation runner, the schema table, typed
states) must not change what the API says. This script builds one state with the OLD binary
(jobs of several kinds: a service with two allocations, a batch job that completes, a job that
cannot be placed, a periodic and a parameterized template with a dispatched child, a job with a
prestart task, a task holding a core, a job waiting for a host volume, a host volume, JSON-only
and HCL-only settings),
then reads every read endpoint three times on that one data directory: with OLD, with OLD again
(a control: what differs between two runs of the same binary is volatile, such as uptimes), and
with NEW. Each agent start re-attaches to the same running tasks (live restore). It prints each
endpoint that answers differently under NEW than under the control, with the differing JSON
paths, and exits 1 if there is one.

Usage: scripts/compare-api.py --old PATH --new PATH
Each binary needs its nodeward-keeper beside it. Root is not needed.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time, urllib.error, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench"))
from benchlib import req, spawn_agent as bench_spawn, stop_keeper, write_config  # noqa: E402


def spawn_agent(binary, cfg):
    """benchlib's spawn_agent, saying what the agent printed when it does not start."""
    tail = []
    try:
        return bench_spawn(binary, cfg, on_line=lambda line, _t: tail.append(line))
    except SystemExit:
        raise SystemExit(f"{binary}: the agent did not start:\n" + "".join(tail[-20:]))

JOBS = {
    "web.hcl": """
job "web" {
  datacenters = ["dc1"]
  meta { team = "a" }
  group "g" {
    count = 2
    restart { attempts = 2  interval = "30m"  delay = "15s"  mode = "fail" }
    network { port "http" {} }
    task "t" {
      driver = "raw_exec"
      config { command = "sleep"  args = ["3600"] }
      resources { cpu = 20  memory = 16 }
      kill_timeout = "2s"
    }
  }
}""",
    "once.hcl": """
job "once" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/sh"  args = ["-c", "echo done"] }
    }
  }
}""",
    "nowhere.hcl": """
job "nowhere" {
  constraint { attribute = "${attr.kernel.name}"  value = "windows" }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "sleep"  args = ["3600"] }
    }
  }
}""",
    "cron.hcl": """
job "cron" {
  type = "batch"
  periodic { crons = ["0 3 * * *"]  prohibit_overlap = true }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}""",
    "param.hcl": """
job "param" {
  type = "batch"
  parameterized { meta_optional = ["x"] }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/sh"  args = ["-c", "echo ${NOMAD_META_x}"] }
    }
  }
}""",
    "ordered.hcl": """
job "ordered" {
  group "g" {
    task "init" {
      lifecycle { hook = "prestart" }
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
    task "main" {
      driver = "raw_exec"
      config { command = "sleep"  args = ["3600"] }
      service { name = "main"  provider = "nomad" }
    }
  }
}""",
    "cores.hcl": """
job "cores" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "sleep"  args = ["3600"] }
      resources { cores = 1  memory = 16  memory_max = 32 }
    }
  }
}""",
    "waits.hcl": """
job "waits" {
  group "g" {
    volume "data" { type = "host"  source = "not-yet" }
    task "t" {
      driver = "raw_exec"
      config { command = "sleep"  args = ["3600"] }
      volume_mount { volume = "data"  destination = "data" }
    }
  }
}""",
}

VOLUME = """
name      = "scratch"
type      = "host"
plugin_id = "mkdir"
capability { access_mode = "single-node-writer"  attachment_mode = "file-system" }
"""


def cli(binary, addr, *args, stdin=None):
    env = dict(os.environ, NODEWARD_ADDR=f"http://{addr}")
    r = subprocess.run([binary, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120)
    if r.returncode not in (0, 2):  # 2: placement failures, as Nomad's CLI says
        raise SystemExit(f"{' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return r.stdout


def build_state(binary, cfg, tmp):
    p, addr = spawn_agent(binary, cfg)
    try:
        fill(binary, addr, tmp)
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p


def fill(binary, addr, tmp):
    for name, text in JOBS.items():
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        cli(binary, addr, "job", "run", "-detach", path)
    vol = os.path.join(tmp, "vol.hcl")
    with open(vol, "w") as f:
        f.write(VOLUME)
    cli(binary, addr, "volume", "create", vol)
    cli(binary, addr, "job", "dispatch", "-detach", "-meta", "x=1", "param")
    # Let the batch tasks end and the prestart task hand over to the main one.
    deadline = time.time() + 60
    while time.time() < deadline:
        allocs = req(addr, "GET", "/v1/allocations")
        if all(a["ClientStatus"] != "pending" or a["JobID"] == "waits" for a in allocs) and any(
            a["JobID"] == "once" and a["ClientStatus"] == "complete" for a in allocs
        ):
            break
        time.sleep(0.5)
    time.sleep(2)


def paths(addr):
    """Every read endpoint, for every job, allocation, evaluation, node and volume."""
    out = ["/v1/jobs", "/v1/allocations", "/v1/evaluations", "/v1/nodes", "/v1/volumes",
           "/v1/volumes?type=host", "/v1/volumes?type=csi", "/v1/plugins", "/v1/agent/health"]
    for j in req(addr, "GET", "/v1/jobs"):
        jid = j["ID"]
        out += [f"/v1/job/{jid}", f"/v1/job/{jid}/allocations", f"/v1/job/{jid}/evaluations",
                f"/v1/job/{jid}/summary"]
    out += [f"/v1/allocation/{a['ID']}" for a in req(addr, "GET", "/v1/allocations")]
    out += [f"/v1/evaluation/{e['ID']}" for e in req(addr, "GET", "/v1/evaluations")]
    out += [f"/v1/node/{n['ID']}" for n in req(addr, "GET", "/v1/nodes")]
    for v in req(addr, "GET", "/v1/volumes?type=host") or []:
        out.append(f"/v1/volume/host/{v['ID']}")
    return sorted(set(out))


def read_all(binary, cfg, endpoints=None):
    p, addr = spawn_agent(binary, cfg)
    time.sleep(1)
    endpoints = endpoints or paths(addr)
    answers = {}
    for path in endpoints:
        try:
            with urllib.request.urlopen(f"http://{addr}{path}", timeout=60) as r:
                answers[path] = (r.status, r.read())
        except urllib.error.HTTPError as e:
            answers[path] = (e.code, e.read())
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)
    return endpoints, answers


def diff(a, b, at="$"):
    if type(a) is not type(b):
        return [at]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{at}.{k}")
            else:
                out += diff(a[k], b[k], f"{at}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{at}[len]"]
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in diff(x, y, f"{at}[{i}]")]
    return [] if a == b else [at]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="nw-compare-")
    cfg, data = write_config(tmp)
    try:
        p = build_state(args.old, cfg, tmp)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
        endpoints, first = read_all(args.old, cfg)
        _, control = read_all(args.old, cfg, endpoints)
        _, new = read_all(args.new, cfg, endpoints)
        # Back to the old binary: the new one must leave a state file the old one reads alike.
        _, back = read_all(args.old, cfg, endpoints)
        changed, same, volatile = [], 0, 0
        for path in endpoints:
            if new[path] == control[path]:
                same += 1
                continue
            (sc, bc), (sn, bn) = control[path], new[path]
            try:
                noisy = set(diff(json.loads(first[path][1] or b"null"), json.loads(bc or b"null")))
                d = [x for x in diff(json.loads(bc or b"null"), json.loads(bn or b"null")) if x not in noisy]
            except ValueError:
                d = ["(not JSON)"]
            if sc != sn:
                d.insert(0, f"status {sc} -> {sn}")
            if d:
                changed.append((path, d))
            else:
                volatile += 1
        back_changed = [p for p in endpoints if back[p][0] != control[p][0]]
        print(f"compare-api: {len(endpoints)} endpoints: {same} byte for byte the same, "
              f"{volatile} differ only where two runs of the old binary differ too, "
              f"{len(changed)} differ")
        for path, d in changed:
            print(f"  {path}: " + ", ".join(d[:12]) + (" ..." if len(d) > 12 else ""))
        if back_changed:
            print("  the old binary answers differently after the new one ran: " + ", ".join(back_changed))
        return 1 if changed or back_changed else 0
    finally:
        try:
            p, addr = spawn_agent(args.old, cfg)
            for j in req(addr, "GET", "/v1/jobs"):
                cli(args.old, addr, "job", "stop", "-purge", "-detach", j["ID"])
            time.sleep(3)
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=120)
        finally:
            stop_keeper(data)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
