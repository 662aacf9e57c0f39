#!/usr/bin/env python3
"""OpenBLAS steering (src/model/blas_steer.c) through the real binary.

  blas_steer.py BIN MODEL_DIR WORKDIR

`donto-embed embed --stats` under several environments; each run's vectors must
equal the plain run's (1e-5), and its --stats line says which OpenBLAS core ran
and what the steering did:
  default                 blas_weaker false (steered if OpenBLAS guessed wrong)
  OPENBLAS_CORETYPE=Prescott (the user's choice): kept, blas_weaker, a warning
  + DONTO_BLAS_STEER=Haswell: steered over it (a re-exec): core Haswell
  DONTO_BLAS_STEER_FAULT=check: the steered core fails its check -> undone
  DONTO_BLAS_STEER=SkylakeX on a CPU without AVX-512: the check dies of
    SIGILL -> undone (skipped, and said so, on an AVX-512 CPU)
  DONTO_BLAS_STEER=off    nothing steered
Prints one line per case; exit 1 if any check failed, 77 if the CPU has no AVX2
(the Haswell cases need it).
"""
import json
import os
import subprocess
import sys

import numpy as np

BIN, MODEL, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
TEXTS = ["the cat sat on the mat", "an oak is a kind of tree", "Paris is the capital of France",
         "x", "a longer sentence about bitemporal claims, their contexts and their arguments"]
INP = os.path.join(WORK, "in.jsonl")
with open(INP, "w") as f:
    for i, t in enumerate(TEXTS):
        f.write(json.dumps({"id": i, "text": t}) + "\n")

flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
if not {"avx2", "fma"} <= flags:
    print("SKIP: this CPU has no AVX2+FMA (the Haswell cases need it)")
    sys.exit(77)
has_avx512 = "avx512f" in flags

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += 0 if ok else 1


def run(name, env_extra, drop=()):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DONTO_BLAS_") and k != "OPENBLAS_CORETYPE" and k not in drop}
    env.update(env_extra)
    out = os.path.join(WORK, name + ".f32")
    p = subprocess.run([BIN, "embed", "--model", MODEL, "--in", INP, "--out", out, "--format", "f32",
                        "--threads", "1", "--stats"], env=env, capture_output=True, text=True, timeout=120)
    stats = None
    for line in p.stderr.splitlines():
        if line.startswith("{") and '"blas_core"' in line:
            stats = json.loads(line)
    if p.returncode != 0 or stats is None:
        print(f"--- {name}: rc={p.returncode}\n{p.stderr}---")
        check(False, f"{name}: embed ran and printed --stats")
        return None, None, p.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(TEXTS), -1), stats, p.stderr


base, st0, _ = run("default", {})
if base is None:
    sys.exit(1)
print(f"default: blas_core={st0['blas_core']} blas_steer={st0.get('blas_steer', '')!r}")
check(st0["blas_weaker"] is False, f"default: OpenBLAS's kernels are not weaker than the CPU "
                                   f"(core {st0['blas_core']}, steer {st0.get('blas_steer', '')!r})")


def same(v, name):
    if v is not None:
        d = float(np.abs(v - base).max())
        check(d <= 1e-5, f"{name}: vectors equal the default run's (max abs diff {d:.2e})")


v, st, err = run("user_prescott", {"OPENBLAS_CORETYPE": "Prescott"})
if st:
    check(st["blas_core"] == "Prescott", f"user's OPENBLAS_CORETYPE kept: core {st['blas_core']}")
    check(st["blas_weaker"] is True and "is the user's" in st.get("blas_steer", ""),
          f"user's choice: weaker, not steered: {st.get('blas_steer', '')!r}")
    check("set OPENBLAS_CORETYPE=" in err, "user's choice: a warning says what to set")
same(v, "user_prescott")

v, st, _ = run("steer_haswell", {"OPENBLAS_CORETYPE": "Prescott", "DONTO_BLAS_STEER": "Haswell"})
if st:
    check(st["blas_core"] == "Haswell" and st.get("blas_steer", "") == "Prescott->Haswell",
          f"DONTO_BLAS_STEER=Haswell: core {st['blas_core']}, steer {st.get('blas_steer', '')!r}")
    check(st["blas_weaker"] is has_avx512, f"steered to Haswell: weaker only on an AVX-512 CPU "
                                           f"({st['blas_weaker']})")
same(v, "steer_haswell")

v, st, _ = run("steer_fault", {"OPENBLAS_CORETYPE": "Prescott", "DONTO_BLAS_STEER": "Haswell",
                               "DONTO_BLAS_STEER_FAULT": "check"})
if st:
    check(st["blas_core"] == "Prescott" and st.get("blas_steer", "").startswith("undone: OpenBLAS core Haswell failed")
          and "wrong product" in st.get("blas_steer", ""),
          f"a steered core that fails its check is undone: core {st['blas_core']}, {st.get('blas_steer', '')!r}")
same(v, "steer_fault")

if has_avx512:
    print("SKIP steer_sigill: this CPU runs SkylakeX kernels (the case needs a CPU without AVX-512)")
else:
    v, st, _ = run("steer_sigill", {"DONTO_BLAS_STEER": "SkylakeX"})
    if st:
        check(st["blas_core"] == st0["blas_core"] and "killed by signal 4" in st.get("blas_steer", ""),
              f"SkylakeX on a CPU without AVX-512: its check dies, steering undone: core {st['blas_core']}, "
              f"{st.get('blas_steer', '')!r}")
    same(v, "steer_sigill")

v, st, _ = run("off", {"OPENBLAS_CORETYPE": "Prescott", "DONTO_BLAS_STEER": "off"})
if st:
    check(st["blas_core"] == "Prescott" and st.get("blas_steer", "").startswith("off"),
          f"DONTO_BLAS_STEER=off: core {st['blas_core']}, {st.get('blas_steer', '')!r}")
same(v, "off")

v, st, _ = run("bad_name", {"DONTO_BLAS_STEER": "Pentium9"})
if st:
    check("not an OpenBLAS core name" in st.get("blas_steer", ""), f"a bad core name is said so: {st.get('blas_steer', '')!r}")
same(v, "bad_name")

print(f"blas_steer: {failed} failed")
sys.exit(1 if failed else 0)
