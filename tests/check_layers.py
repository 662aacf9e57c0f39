#!/usr/bin/env python3
"""The module walls, checked from the sources (CTest `layers`).

The build already enforces them (cmake/DontoModule.cmake: a module sees only
its own and its dependencies' public headers, and src/ is on no include
path). This is the second line, and it also catches what a compiler cannot:
a relative path ("../store/store_int.h") that would reach around the walls.

  check_layers.py SOURCE_DIR MODULES_TXT

MODULES_TXT is written by CMake at configure time, one line per module:
  "TARGET DIR: dep dep ... | header.h header.h ..."
Rules:
  1. a file in src/DIR includes only: its module's private headers by bare
     name (a file that exists in src/DIR), and "donto/H.h" where H.h is owned
     by its module or by one of its dependencies (transitively);
  2. a public header include/donto/H.h includes only public headers of its
     owner and the owner's dependencies;
  3. cmd/*.c includes only public headers;
  4. nothing under src/, cmd/, tests/ or bench/ includes a path that climbs
     out of its folder ("../") or names a module folder ("store/x.h"): tests
     and benchmarks reach a module's private headers by bare name, given
     access by donto_private_headers() in CMake;
  5. the dependency graph has no cycle, and every dependency is a module.
Prints each violation as FILE:LINE: message and exits 1 if there is any.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def load_modules(path):
    mods = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#") or ":" not in line:
                continue
            head, rest = line.split(":", 1)
            target, folder = head.split()
            deps, headers = rest.split("|")
            mods[target] = {"dir": folder, "deps": deps.split(), "headers": headers.split()}
    return mods


def closure(mods, name, seen=None):
    seen = set() if seen is None else seen
    for d in mods[name]["deps"]:
        if d not in seen:
            seen.add(d)
            closure(mods, d, seen)
    return seen


def find_cycle(mods):
    state = {}

    def visit(m, path):
        state[m] = 1
        for d in mods[m]["deps"]:
            if state.get(d) == 1:
                return path + [m, d]
            if d in mods and not state.get(d):
                c = visit(d, path + [m])
                if c:
                    return c
        state[m] = 2
        return None

    for m in mods:
        if not state.get(m):
            c = visit(m, [])
            if c:
                return c
    return None


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def main():
    src_dir, table = sys.argv[1], sys.argv[2]
    mods = load_modules(table)
    bad = []
    folders = {m["dir"] for m in mods.values()}

    for name, m in mods.items():
        for d in m["deps"]:
            if d not in mods:
                bad.append(f"{table}: module {name} depends on unknown module {d}")
    cycle = find_cycle(mods)
    if cycle:
        bad.append(f"{table}: dependency cycle: {' -> '.join(cycle)}")

    owner = {}
    for name, m in mods.items():
        for h in m["headers"]:
            owner[h] = name

    def visible(name):
        vis = {name} | closure(mods, name)
        # cli_sheaf shares the cli folder and its header
        return {h for h, o in owner.items() if o in vis}

    # 1. module sources (a folder may hold more than one target: its files
    # are checked against the union, and each target's own deps below)
    by_dir = {}
    for name, m in mods.items():
        by_dir.setdefault(m["dir"], []).append(name)
    for folder, names in by_dir.items():
        d = os.path.join(src_dir, "src", folder)
        allowed = set()
        for n in names:
            allowed |= visible(n)
        allowed |= {h for n in names for h in mods[n]["headers"]}
        for f in sorted(os.listdir(d)):
            if not f.endswith((".c", ".h", ".cpp", ".cu", ".cuh")):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, src_dir)
            for ln, inc in includes(p):
                if inc.startswith("donto/"):
                    h = inc[len("donto/"):]
                    if h not in owner:
                        bad.append(f"{rel}:{ln}: {inc} is not a public header of any module")
                    elif h not in allowed:
                        bad.append(f"{rel}:{ln}: {inc} belongs to module {owner[h]}, "
                                   f"which {'/'.join(names)} does not depend on")
                elif "/" in inc:
                    bad.append(f"{rel}:{ln}: \"{inc}\" reaches into another folder "
                               f"(a module's private headers are included by bare name from inside it)")
                elif not os.path.exists(os.path.join(d, inc)):
                    bad.append(f"{rel}:{ln}: \"{inc}\" is not a header of src/{folder}")

    # 2. public headers
    for h, o in owner.items():
        p = os.path.join(src_dir, "include", "donto", h)
        vis = visible(o) | set(mods[o]["headers"])
        for ln, inc in includes(p):
            if not inc.startswith("donto/") or inc[len("donto/"):] not in vis:
                bad.append(f"include/donto/{h}:{ln}: \"{inc}\" is not a public header of {o} or its dependencies")

    # 3./4. mains, tests, benchmarks
    for top in ("cmd", "tests", "bench"):
        base = os.path.join(src_dir, top)
        for root, _, files in os.walk(base):
            if os.path.relpath(root, src_dir).startswith(os.path.join("tests", "walls")):
                continue  # the wall probes break the rules on purpose
            for f in files:
                if not f.endswith((".c", ".h", ".cpp", ".cu")):
                    continue
                p = os.path.join(root, f)
                rel = os.path.relpath(p, src_dir)
                for ln, inc in includes(p):
                    first = inc.split("/")[0]
                    if inc.startswith("../") or "/../" in inc:
                        bad.append(f"{rel}:{ln}: \"{inc}\" climbs out of its folder")
                    elif "/" in inc and first in folders:
                        bad.append(f"{rel}:{ln}: \"{inc}\" names a module folder (use the bare name and "
                                   f"donto_private_headers() in CMake)")
                    elif top == "cmd" and not inc.startswith("donto/"):
                        bad.append(f"{rel}:{ln}: a main includes only public headers")

    for b in bad:
        print(b)
    print(f"layers: {len(mods)} modules in {len(folders)} folders, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
