#!/usr/bin/env python3
"""The sheaf inference operator from Python through ctypes (standard library only).

The part between the "example" markers is docs/sheaf-operator.md's example, word for word (the
CTest sheaf_op_ffi checks that, then runs this file). The rest is the test: --compare checks the
operator's log-probabilities bit for bit against `donto-sheaf infer`'s (%.9g, exact for floats)
and its probabilities bit for bit against expf of them (glibc's expf, called through ctypes:
the function the library uses).

usage: ffi_sheaf_op.py LIB CHECKPOINT GRAPH.json [--task NAME] [--compare INFER.jsonl]
"""
import argparse
import ctypes
import json
import struct
import sys

# --- example (docs/sheaf-operator.md) ---
import ctypes

P, F32P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_float)
PROBS, LOGP = 0, 1  # DONTO_SHEAF_OUT_*


def open_lib(path):
    lib = ctypes.CDLL(path)
    sig = {  # name: (restype, argtypes), as in include/donto/sheaf_op.h
        "err_new": (P, []), "err_free": (None, [P]), "err_message": (ctypes.c_char_p, [P]),
        "op_load": (P, [ctypes.c_char_p, ctypes.c_size_t, P]), "op_free": (None, [P]),
        "op_task": (ctypes.c_int, [P]), "op_classes": (ctypes.c_int, [P]),
        "op_feature_dim": (ctypes.c_int, [P]), "op_family_name": (ctypes.c_char_p, [P]),
        "op_class_name": (ctypes.c_char_p, [P, ctypes.c_int]),
        "op_infer_json": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int,
                                         ctypes.POINTER(F32P), ctypes.POINTER(ctypes.c_size_t), P]),
        "op_free_output": (None, [F32P]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, "donto_sheaf_" + name)
        fn.restype, fn.argtypes = res, args
    return lib


class SheafOp:
    """A checkpoint's bytes -> an operator; thread-safe, so one may serve every thread."""

    def __init__(self, lib, checkpoint: bytes):
        self.lib, err = lib, lib.donto_sheaf_err_new()
        try:
            self.op = lib.donto_sheaf_op_load(checkpoint, len(checkpoint), err)
            if not self.op:
                raise ValueError(lib.donto_sheaf_err_message(err).decode())
        finally:
            lib.donto_sheaf_err_free(err)
        self.classes = lib.donto_sheaf_op_classes(self.op)
        self.family = lib.donto_sheaf_op_family_name(self.op).decode()
        self.feature_dim = lib.donto_sheaf_op_feature_dim(self.op)

    def infer_json(self, graph: bytes, task: str = None, what: int = PROBS):
        """An export file's bytes -> one row of K floats per node (node tasks) or pair (edge tasks)."""
        out, rows, err = F32P(), ctypes.c_size_t(), self.lib.donto_sheaf_err_new()
        try:
            if self.lib.donto_sheaf_op_infer_json(self.op, graph, len(graph), task.encode() if task else None,
                                                  what, ctypes.byref(out), ctypes.byref(rows), err):
                raise ValueError(self.lib.donto_sheaf_err_message(err).decode())
            K = self.classes
            return [out[r * K:(r + 1) * K] for r in range(rows.value)]
        finally:
            self.lib.donto_sheaf_op_free_output(out)
            self.lib.donto_sheaf_err_free(err)

    def close(self):
        self.lib.donto_sheaf_op_free(self.op)
        self.op = None


# usage:
#   lib = open_lib("build/libdonto_sheaf_op.so")
#   op = SheafOp(lib, open("model.ckpt", "rb").read())
#   probs = op.infer_json(open("graph.json", "rb").read(), task="arg_link")
#   op.close()
# --- end example ---


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("checkpoint")
    ap.add_argument("graph")
    ap.add_argument("--task")
    ap.add_argument("--compare", help="donto-sheaf infer's jsonl for the same checkpoint and graph")
    a = ap.parse_args()
    lib = open_lib(a.lib)
    with open(a.checkpoint, "rb") as f:
        op = SheafOp(lib, f.read())
    with open(a.graph, "rb") as f:
        graph = f.read()
    probs = op.infer_json(graph, a.task)
    print(f"{op.family}: {len(probs)} rows x {op.classes} classes, {op.feature_dim} features", file=sys.stderr)
    if not a.compare:
        for r, p in enumerate(probs):
            print(json.dumps({"row": r, "probs": p}))
        op.close()
        return 0
    # the class names the checkpoint kept from the export's "classes"
    doc = json.loads(graph)
    task = next(t for t in doc.get("tasks", []) if not a.task or t.get("name") == a.task)
    names = [(lib.donto_sheaf_op_class_name(op.op, k) or b"").decode() for k in range(op.classes)]
    if task.get("classes") and names != task["classes"]:
        print(f"FAIL: class names {names}, the export's {task['classes']}", file=sys.stderr)
        return 1
    logp = op.infer_json(graph, a.task, LOGP)
    with open(a.compare) as f:
        ref = [json.loads(line)["logp"] for line in f if line.strip()]
    libm = ctypes.CDLL("libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    bad = 0
    if len(ref) != len(probs):
        print(f"FAIL: {len(probs)} rows from the operator, {len(ref)} from donto-sheaf infer", file=sys.stderr)
        return 1
    for r, (lp_ref, lp, p) in enumerate(zip(ref, logp, probs)):
        for k in range(op.classes):
            want = struct.unpack("<f", struct.pack("<f", lp_ref[k]))[0]  # %.9g -> the float itself
            if bits(lp[k]) != bits(want) or bits(p[k]) != bits(libm.expf(want)):
                bad += 1
                if bad <= 5:
                    print(f"row {r} class {k}: logp {lp[k]!r} vs infer {want!r}; prob {p[k]!r} vs "
                          f"expf {libm.expf(want)!r}", file=sys.stderr)
    n = len(ref) * op.classes
    print(f"{'FAIL' if bad else 'ok'}: {n - bad} of {n} probabilities equal expf of donto-sheaf infer's "
          f"log-probabilities, log-probabilities bit for bit", file=sys.stderr)
    op.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
