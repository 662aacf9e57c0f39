#!/usr/bin/env python3
"""Parity gate: donto-embed vectors vs the transformers reference (tests/ref/bert_ref.py).

  vector_parity.py --bin PATH/donto-embed --model DIR --in FILE.jsonl [--in FILE2.jsonl]
                   [--limit N] [--precision fp32|int16|bf16|int8] [--min-cos 0.99999] [--max-abs 1e-4]
                   [--ref ref.npy | --ref-dir DIR] [--workdir DIR] [--threads 2]

Runs our CLI exactly as
  PATH/donto-embed embed --model DIR --in FILE --out OUT.npy --format npy [--precision P] --threads T
(with several --in files or a --limit, FILE is a combined JSONL {"id","text"} written to the
work dir: the first N records of each input, in order). Expects a float32 [n, dim] .npy in
input order. The reference is computed with bert_ref (fp32 torch) or read from a cache:
  --ref FILE    use FILE if it exists (and its FILE.json key matches, when present), else
                compute and write FILE + FILE.json
  --ref-dir DIR cache under DIR/ref-<key>.npy, key = sha256 of model files, texts,
                max_len, pooling and the reference version
The comparison always runs. Prints n, min / mean cosine, max abs component difference,
the worst item id, and a JSON summary as the last line. Exit status: 0 pass, 1 a threshold
failed, 2 error (CLI failed, shape mismatch, ...), 77 skipped (--skip-unsupported and the
CLI rejected the requested precision).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_ref  # noqa: E402

REF_VERSION = "bert_ref-1"
MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "1_Pooling/config.json")


def file_digest(path, h):
    with open(path, "rb") as fh:
        while True:
            b = fh.read(1 << 22)
            if not b:
                break
            h.update(b)


def ref_key(model_dir, texts, max_len, pooling):
    h = hashlib.sha256()
    h.update(("%s\nmax_len=%d\npooling=%s\n" % (REF_VERSION, max_len, pooling)).encode())
    for f in MODEL_FILES:
        p = os.path.join(model_dir, f)
        if os.path.exists(p):
            h.update(("file %s\n" % f).encode())
            file_digest(p, h)
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def get_reference(args, texts, pooling):
    key = ref_key(args.model, texts, args.max_len, pooling)
    path = args.ref
    if path is None and args.ref_dir:
        os.makedirs(args.ref_dir, exist_ok=True)
        path = os.path.join(args.ref_dir, "ref-%s.npy" % key[:24])
    if path and os.path.exists(path):
        meta_p = path + ".json"
        ok = True
        if os.path.exists(meta_p):
            with open(meta_p, encoding="utf-8") as fh:
                ok = json.load(fh).get("key") == key
        if ok:
            ref = np.load(path)
            if ref.shape[0] == len(texts):
                print("vector_parity: reference from cache %s" % path)
                return ref, 0.0, path
        print("vector_parity: cache %s is stale, recomputing" % path)
    t0 = time.time()
    ref = bert_ref.embed(args.model, texts, max_len=args.max_len, pooling=pooling,
                         batch_size=args.batch_size, threads=args.threads, verbose=True)
    dt = time.time() - t0
    if path:
        tmp = path + ".tmp.npy"
        np.save(tmp, ref)
        os.replace(tmp, path)
        with open(path + ".json", "w", encoding="utf-8") as fh:
            json.dump({"key": key, "model": os.path.abspath(args.model), "n": len(texts),
                       "max_len": args.max_len, "pooling": pooling, "seconds": round(dt, 2)}, fh)
    return ref, dt, path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="path to donto-embed")
    ap.add_argument("--model", required=True, help="model dir")
    ap.add_argument("--in", dest="inputs", action="append", required=True, help="input JSONL (repeatable)")
    ap.add_argument("--limit", default=None,
                    help="first N records of EACH input, or N1,N2,... one per --in")
    ap.add_argument("--precision", choices=["fp32", "int16", "bf16", "int8"], default=None,
                    help="passed to the CLI as --precision (default: not passed)")
    ap.add_argument("--min-cos", type=float, default=0.99999)
    ap.add_argument("--max-abs", type=float, default=1e-4)
    ap.add_argument("--max-len", type=int, default=None,
                    help="reference token limit (default: the model's own, as donto-embed reads it)")
    ap.add_argument("--pooling", choices=["cls", "mean", "auto"], default="auto")
    ap.add_argument("--ref", default=None, help="reference .npy cache file")
    ap.add_argument("--ref-dir", default=None, help="reference cache dir (file name from a content key)")
    ap.add_argument("--workdir", default=None, help="where to write the combined input and our output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8, help="reference batch size")
    ap.add_argument("--skip-unsupported", action="store_true",
                    help="exit 77 (CTest skip) if the CLI rejects --precision")
    ap.add_argument("--name", default=None, help="label for the JSON summary")
    args = ap.parse_args(argv)

    ids, texts = bert_ref.read_jsonl(args.inputs, args.limit)
    if not texts:
        print("vector_parity: no input texts", file=sys.stderr)
        return 2
    pooling = bert_ref.resolve_pooling(args.model, args.pooling)
    if args.max_len is None:
        args.max_len = bert_ref.resolve_max_len(args.model)
    tmpdir = None
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        work = args.workdir
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="vector_parity-")
        work = tmpdir.name
    tag = args.name or "parity"
    if len(args.inputs) == 1 and args.limit is None:
        in_path = args.inputs[0]
    else:
        in_path = os.path.join(work, "%s-input.jsonl" % tag)
        with open(in_path, "w", encoding="utf-8") as fh:
            for i, t in zip(ids, texts):
                fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
    out_path = os.path.join(work, "%s-ours.npy" % tag)
    if os.path.exists(out_path):
        os.remove(out_path)

    cmd = [args.bin, "embed", "--model", args.model, "--in", in_path, "--out", out_path, "--format", "npy"]
    if args.precision:
        cmd += ["--precision", args.precision]
    cmd += ["--threads", str(args.threads)]
    print("vector_parity: %d texts (%s), pooling=%s" % (len(texts), ", ".join(args.inputs), pooling))
    print("vector_parity: $ " + " ".join(cmd))
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t_ours = time.time() - t0
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:])
        sys.stderr.write(proc.stderr[-4000:])
        err = proc.stderr.lower()
        if (args.skip_unsupported and args.precision and re.search(r"int16|precision", err) and re.search(
                r"unsupported|not (yet )?(built|supported|implemented|available)|not .*yet|unknown|invalid|unrecogni[sz]ed",
                err)):
            print("vector_parity: SKIP: the CLI rejected --precision %s" % args.precision)
            return 77
        print("vector_parity: ERROR: %s exited %d" % (args.bin, proc.returncode), file=sys.stderr)
        return 2
    print("vector_parity: ours %.2fs wall (incl. model load)" % t_ours)
    try:
        ours = np.load(out_path)
    except Exception as e:  # noqa: BLE001
        print("vector_parity: ERROR: cannot read %s: %s" % (out_path, e), file=sys.stderr)
        return 2

    ref, t_ref, ref_path = get_reference(args, texts, pooling)
    if ours.dtype != np.float32 or ours.ndim != 2 or ours.shape != ref.shape:
        print("vector_parity: ERROR: ours %s %s vs reference %s float32"
              % (ours.dtype, ours.shape, ref.shape), file=sys.stderr)
        return 2

    o = ours.astype(np.float64)
    r = ref.astype(np.float64)
    onorm = np.linalg.norm(o, axis=1)
    cos = (o * r).sum(axis=1) / np.clip(onorm * np.linalg.norm(r, axis=1), 1e-30, None)
    cos[~np.isfinite(cos)] = -1.0
    absd = np.abs(o - r)
    absd[~np.isfinite(absd)] = np.inf
    row_abs = absd.max(axis=1)
    worst = int(np.argmin(cos))
    worst_abs = int(np.argmax(row_abs))
    res = {
        "name": tag, "n": len(texts), "dim": int(ours.shape[1]), "precision": args.precision or "default",
        "pooling": pooling, "min_cos": float(cos.min()), "mean_cos": float(cos.mean()),
        "max_abs": float(row_abs.max()), "worst_id": ids[worst], "worst_abs_id": ids[worst_abs],
        "norm_min": float(onorm.min()), "norm_max": float(onorm.max()),
        "min_cos_gate": args.min_cos, "max_abs_gate": args.max_abs,
        "ours_s": round(t_ours, 3), "ref_s": round(t_ref, 3),
    }
    ok = res["min_cos"] >= args.min_cos and res["max_abs"] <= args.max_abs
    res["pass"] = bool(ok)
    print("n=%d dim=%d  min_cos=%.8f  mean_cos=%.8f  max_abs=%.3g  worst=%s (cos %.8f)  worst_abs=%s (%.3g)"
          % (res["n"], res["dim"], res["min_cos"], res["mean_cos"], res["max_abs"], ids[worst],
             cos[worst], ids[worst_abs], row_abs[worst_abs]))
    print("norms of our vectors: min %.6f max %.6f" % (res["norm_min"], res["norm_max"]))
    if not ok:
        bad = np.argsort(cos)[:5]
        for b in bad:
            print("  %s cos=%.8f max_abs=%.3g text=%r" % (ids[b], cos[b], row_abs[b], texts[b][:120]))
        print("vector_parity: FAIL (gates: min_cos >= %g, max_abs <= %g)" % (args.min_cos, args.max_abs))
    else:
        print("vector_parity: PASS (gates: min_cos >= %g, max_abs <= %g)" % (args.min_cos, args.max_abs))
    print(json.dumps(res, sort_keys=True))
    if tmpdir:
        tmpdir.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
