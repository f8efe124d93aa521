#!/usr/bin/env python3
"""How many real-world Nomad jobspecs nodeward parses and runs unchanged (issue 14's figure).

Starts an agent (debug build by default) on a temporary data directory, with the docker driver
pointed at `--docker` when given, and for every `*.nomad` / `*.hcl` file in the directories named
(default: tests/data/jobspecs/real, whose SOURCES.md says where each file comes from):
  1. parse:  `POST /v1/jobs/parse` with the file's text, as Nomad's API takes it;
  2. submit: `nodeward job run -detach <file>`, the CLI a user types (its own HCL evaluation,
             `file()` relative to the jobspec);
  3. run:    waits up to --wait seconds for the job's allocations. A raw_exec job runs when an
             allocation reaches `running` or `complete` (or
             fails after its task started: a jobspec written to fail); a periodic or parameterized
             job runs when it is registered with no placement failure (Nomad places nothing for
             it until a launch or a dispatch); a job with a docker task runs when it is
             placed (an allocation exists): its images are not on this machine and no registry is
             reached. A job with no allocation is a placement failure, read from its evaluation.
Then the job is purged. Prints one line per file and the counts, with the refusal reasons grouped
(line numbers and the job's own names blanked out so that equal reasons group). Asserts nothing.

Usage: scripts/bench/jobspecs.py [--bin PATH] [--docker unix:///tmp/dk/docker.sock] [--wait 20]
                                 [--json out.json] [DIR ...]
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile, time, shutil
import urllib.error

from benchlib import req, start_agent, stop_agent_and_tasks

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))


def api(addr, method, path, body=None):
    """(status, JSON or text) of one call; HTTP errors are answers, not exceptions."""
    try:
        return 200, req(addr, method, path, body, timeout=60)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace").strip()


def reason_key(text):
    """A refusal's first line with what differs between equal reasons blanked out."""
    line = text.strip().splitlines()[0] if text.strip() else "(no message)"
    line = re.sub(r"^Error: ", "", line)
    line = re.sub(r"^parsing job file: [^:]+: ", "", line)
    line = re.sub(r"line \d+", "line N", line)
    line = re.sub(r'\b(job|group|task|port|volume) "[^"]*"', r'\1 "…"', line)
    return line


def alloc_state(addr, jid):
    """Each allocation's client status; a failed one whose task started counts as `ran`: the
    task ran and its exit was its own (a jobspec written to fail)."""
    code, allocs = api(addr, "GET", f"/v1/job/{jid}/allocations")
    if code != 200:
        return []
    def status(a):
        started = any(e.get("Type") == "Started" for t in (a.get("TaskStates") or {}).values()
                      for e in t.get("Events") or [])
        return "ran" if a.get("ClientStatus") == "failed" and started else a.get("ClientStatus")
    return [status(a) for a in allocs]


def placement_failure(addr, jid):
    code, evals = api(addr, "GET", f"/v1/job/{jid}/evaluations")
    if code != 200:
        return None
    for ev in evals:
        for tg, metric in (ev.get("FailedTGAllocs") or {}).items():
            for c, n in (metric.get("ConstraintFiltered") or {}).items():
                return f'placement: Constraint "{c}": {n} nodes excluded by filter'
            for d, n in (metric.get("DimensionExhausted") or {}).items():
                return f"placement: Dimension \"{d}\" exhausted on {n} nodes"
            return "placement: failed (" + json.dumps(metric, sort_keys=True)[:120] + ")"
    return None


def one(binary, addr, path, wait):
    text = open(path).read()
    out = {"file": os.path.relpath(path, REPO) if path.startswith(REPO) else path}
    code, job = api(addr, "POST", "/v1/jobs/parse", {"JobHCL": text, "Canonicalize": True})
    out["parses"] = code == 200
    if code != 200:
        out["reason"] = reason_key(job if isinstance(job, str) else json.dumps(job))
        return out
    jid = job.get("ID") or job.get("Name")
    drivers = {t.get("Driver") for g in job.get("TaskGroups") or [] for t in g.get("Tasks") or []}
    env = dict(os.environ, NODEWARD_ADDR=f"http://{addr}")
    r = subprocess.run([binary, "job", "run", "-detach", path], env=env, capture_output=True,
                       text=True, timeout=120, cwd=os.path.dirname(path))
    out["submitted"] = r.returncode == 0
    if r.returncode != 0:
        out["reason"] = "job run: " + reason_key(r.stderr or r.stdout)
        return out
    docker = "docker" in drivers
    if job.get("Periodic") or job.get("ParameterizedJob"):
        # Nomad places nothing for such a job either: its children come on schedule or dispatch.
        failure = placement_failure(addr, jid)
        out["runs"] = failure is None
        if failure:
            out["reason"] = failure
        api(addr, "DELETE", f"/v1/job/{jid}?purge=true")
        return out
    deadline = time.monotonic() + wait
    states = []
    while time.monotonic() < deadline:
        states = alloc_state(addr, jid)
        if docker and states:
            break
        if any(s in ("running", "complete", "ran") for s in states):
            break
        time.sleep(0.5)
    out["allocs"] = states
    out["runs"] = bool(states) if docker else any(s in ("running", "complete", "ran") for s in states)
    if not out["runs"]:
        out["reason"] = placement_failure(addr, jid) or (
            f"allocation {'/'.join(sorted(set(states)))} within {wait}s" if states else
            f"no allocation within {wait}s")
    api(addr, "DELETE", f"/v1/job/{jid}?purge=true")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(TARGET, "debug", "nodeward"))
    ap.add_argument("--docker", help="unix:// endpoint of a Docker engine for the docker driver")
    ap.add_argument("--wait", type=float, default=20.0)
    ap.add_argument("--json", help="write the per-file results here")
    ap.add_argument("dirs", nargs="*", default=[os.path.join(REPO, "tests/data/jobspecs/real")])
    a = ap.parse_args()
    files = sorted(os.path.join(d, f) for d in a.dirs for f in os.listdir(d)
                   if f.endswith((".nomad", ".hcl")))
    tmp = tempfile.mkdtemp(prefix="nodeward-jobspecs-")
    extra = f'plugin "docker" {{ config {{ endpoint = "{a.docker}" }} }}' if a.docker else ""
    agent, addr, data = start_agent(a.bin, tmp, extra)
    results = []
    try:
        for f in files:
            r = one(a.bin, addr, f, a.wait)
            results.append(r)
            verdict = "runs" if r.get("runs") else ("parses" if r["parses"] else "refused")
            print(f"{verdict:8} {os.path.basename(f)}" + (f"  -- {r['reason']}" if "reason" in r else ""),
                  flush=True)
    finally:
        stop_agent_and_tasks(agent, data)
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(results)
    parses = sum(r["parses"] for r in results)
    runs = sum(bool(r.get("runs")) for r in results)
    print(f"\n{n} jobspecs: {parses} parse, {runs} run")
    for reason, c in collections.Counter(r["reason"] for r in results if "reason" in r).most_common():
        print(f"{c:4}  {reason}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
