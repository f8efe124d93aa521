#!/usr/bin/env python3
"""Checks the layout rules of docs/architecture.md, so they cannot erode unnoticed.

1. No import cycle between the top-level modules of src/ (records, state, thread, jobspec, ...),
   nor between the files of src/api/ and of src/volume/; inside any other folder of src/, no
   import circle of more than 3 files (a folder that must have a larger one for a while is
   listed in SHRINKING with the size it may not grow past; none is today).
2. No file under src/ has more than 700 lines before its #[cfg(test)] module.
3. HTTP stays in src/api/: no `json!(` (API JSON), no `Request`/`Response` of the API router,
   and no HTTP status code outside src/api/ (and src/cli/, which prints the CLI's own output).
4. The scheduler's plan (src/plan/, when it exists) imports nothing that runs tasks: no `alloc`,
   `task`, `driver`, `api`, `agent` or `daemon`.

5. src/api/ builds no `json!(` literal outside its tests: every answer is a typed Serialize
   struct (issue 31 took the count from 75 to 0).

Reads the sources as text (`crate::a::b` paths, `super::x`, `use crate::{a, b}` groups), outside
their #[cfg(test)] modules. Prints every violation and exits 1 if there is one.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MAX_LINES = 700
# Folders whose files must not import each other in a cycle (besides the top-level modules).
INNER = ("api", "volume")
# Only these may speak HTTP and build API JSON.
HTTP_OK = ("api", "cli")
# Clients of another HTTP API, not nodeward's: they read the status codes of the answers they get
# (the Docker Engine API's 404 and 409), and choose none.
HTTP_CLIENTS = ("driver/docker/engine/",)
# The largest import circle allowed inside any folder of src/ (besides INNER, which allow none).
MAX_CIRCLE = 3
# Folders whose circle is still larger: the size it may not grow past (none: issue 31 broke the
# last one, csi/volumes, up).
SHRINKING = {}
# What the scheduler's plan may not import: it places, it runs nothing.
PLAN_FORBIDDEN = ("alloc", "task", "driver", "api", "agent", "daemon")


def sources():
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if f.endswith(".rs"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)
                if rel.startswith("bin" + os.sep):
                    continue
                yield rel, open(path, encoding="utf-8").read()


def before_tests(text):
    i = text.find("#[cfg(test)]")
    return text if i < 0 else text[:i]


def module_of(rel):
    """src/api/jobs.rs -> ['api', 'jobs'], src/api/mod.rs -> ['api'], src/lib.rs -> []."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def referenced_paths(text):
    """Every crate path this file names, as lists of segments."""
    out = []
    for m in re.finditer(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
        out.append(m.group(1).split("::"))
    for m in re.finditer(r"\bcrate::\{([^}]*)\}", text, flags=re.S):
        for item in m.group(1).split(","):
            item = item.strip()
            if item:
                out.append(re.split(r"::", re.sub(r"\s+as\s+\w+$", "", item))[:2])
    return out


def find_cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sccs


def add_folder_edges(folder_edges, modules, mod, code):
    """Edges between files of one folder: `crate::a::b::x` or `super::x` from a::b::y."""
    if len(mod) < 2:
        return
    parent = mod[:-1]
    me = mod[-1]
    targets = []
    for path in referenced_paths(code):
        t = tuple(path)
        if len(t) > len(parent) and t[: len(parent)] == parent:
            targets.append(t[len(parent)])
    targets += re.findall(r"\bsuper::([a-z_][a-z0-9_]*)", code)
    for t in targets:
        if parent + (t,) in modules and t != me:
            folder_edges.setdefault(parent, {}).setdefault(me, set()).add(t)


def main():
    problems = []
    files = dict(sources())
    top_edges, inner_edges = {}, {d: {} for d in INNER}
    modules = {tuple(module_of(rel)) for rel in files}
    folder_edges = {}
    api_json = 0
    for rel, text in files.items():
        code = strip_comments(before_tests(text))
        mod = module_of(rel)
        lines = before_tests(text).count("\n")
        if lines > MAX_LINES:
            problems.append(f"{rel}: {lines} lines before its tests (at most {MAX_LINES})")
        if not mod:
            continue
        for path in referenced_paths(code):
            if path[0] != mod[0] and (path[0],) in modules:
                top_edges.setdefault(mod[0], set()).add(path[0])
            if mod[0] in INNER and path[0] == mod[0] and len(mod) > 1 and len(path) > 1:
                if (mod[0], path[1]) in modules and path[1] != mod[1]:
                    inner_edges[mod[0]].setdefault(mod[1], set()).add(path[1])
        if mod[0] in INNER and len(mod) > 1:
            for m in re.finditer(r"\bsuper::([a-z_][a-z0-9_]*)", code):
                if (mod[0], m.group(1)) in modules and m.group(1) != mod[1]:
                    inner_edges[mod[0]].setdefault(mod[1], set()).add(m.group(1))
        add_folder_edges(folder_edges, modules, tuple(mod), code)
        if mod[0] == "plan":
            for path in referenced_paths(code):
                if path[0] in PLAN_FORBIDDEN:
                    problems.append(f"{rel}: the plan imports crate::{'::'.join(path)}")
        if mod[0] == "api":
            api_json += code.count("json!(")
            for n, line in enumerate(code.splitlines(), 1):
                if "json!(" in line:
                    problems.append(f"{rel}:{n}: a json! literal: answer a typed Serialize struct: {line.strip()}")
        if mod[0] not in HTTP_OK and not rel.startswith(HTTP_CLIENTS):
            for n, line in enumerate(code.splitlines(), 1):
                if "json!(" in line:
                    problems.append(f"{rel}:{n}: API JSON built outside src/api/: {line.strip()}")
                if re.search(r"\bapi::(Request|Response|ApiError)\b", line):
                    problems.append(f"{rel}:{n}: HTTP types outside src/api/: {line.strip()}")
                if re.search(r"\b(status|StatusCode)\b.*\b(200|400|403|404|409|413|500|503)\b", line) or re.search(
                    r"=>\s*[45]\d\d\b|\bfn status\(.*->\s*u16", line
                ):
                    problems.append(f"{rel}:{n}: HTTP status chosen outside src/api/: {line.strip()}")
    for comp in find_cycles(top_edges):
        problems.append("import cycle between top-level modules: " + " -> ".join(comp))
    for folder, edges in inner_edges.items():
        for comp in find_cycles(edges):
            problems.append(f"import cycle inside src/{folder}/: " + " -> ".join(comp))
    for folder, edges in sorted(folder_edges.items()):
        name = "/".join(folder)
        if folder and folder[0] in INNER and len(folder) == 1:
            continue
        allowed = SHRINKING.get(name, MAX_CIRCLE)
        for comp in find_cycles(edges):
            if len(comp) > allowed:
                problems.append(
                    f"import circle of {len(comp)} files inside src/{name}/ (at most {allowed}): " + " -> ".join(comp)
                )
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layout problem(s); see docs/architecture.md")
        return 1
    print(f"layout: {len(files)} files, no import cycle, none over {MAX_LINES} lines, HTTP only in src/api/")
    print(f"layout: src/api/ builds {api_json} json! literal(s): its answers are typed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
