#!/usr/bin/env python3
"""Reference sentence embeddings with transformers.BertModel (fp32, CPU).

Test-only: this is the oracle the C engine is compared against, never product code.

  bert_ref.py --model DIR --in FILE.jsonl [--in FILE2.jsonl] [--limit N] [--max-len 512]
              [--pooling cls|mean|auto] --out ref.npy

Reads JSONL records with a "text" field (and usually "id"); --limit N keeps the first
N records of EACH input file (--limit 700,300: one count per --in); texts are embedded in input order (files concatenated).
Tokenisation: transformers.AutoTokenizer (fast) from DIR with truncation=True,
max_length=--max-len, padding to the longest item of each batch, attention_mask.
Batches are formed over length-sorted texts (results are put back in input order);
padding with an attention mask does not change BERT outputs beyond fp rounding.
Pooling: cls = last_hidden_state[:, 0]; mean = mean over attention_mask; auto reads
DIR/1_Pooling/config.json (pooling_mode_mean_tokens -> mean, pooling_mode_cls_token ->
cls; cls if the file is absent). Vectors are L2-normalised; output float32 [n, hidden].
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def read_jsonl(paths, limit=None):
    """-> (ids, texts) over all files, first `limit` records of each file.

    limit: None, an int (same for every file), a list of ints (one per file) or a
    string "N" / "N1,N2,..." (one per file)."""
    if isinstance(paths, str):
        paths = [paths]
    limits = parse_limits(limit, len(paths))
    ids, texts = [], []
    for p, limit in zip(paths, limits):
        n = 0
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if limit is not None and n >= limit:
                    break
                rec = json.loads(line)
                texts.append(rec["text"])
                ids.append(str(rec.get("id", "%s:%d" % (os.path.basename(p), lineno))))
                n += 1
    return ids, texts


def parse_limits(limit, nfiles):
    if limit is None or limit == "":
        return [None] * nfiles
    if isinstance(limit, int):
        return [limit] * nfiles
    if isinstance(limit, str):
        limit = [int(x) for x in limit.split(",")]
    limit = list(limit)
    if len(limit) == 1:
        return limit * nfiles
    if len(limit) != nfiles:
        raise SystemExit("--limit has %d values for %d inputs" % (len(limit), nfiles))
    return limit


def resolve_max_len(model_dir):
    """The model's own token limit, as sentence-transformers takes it (and donto-embed):
    sentence_bert_config.json max_seq_length, else tokenizer_config.json model_max_length,
    either at most config.json max_position_embeddings."""
    def load(name):
        p = os.path.join(model_dir, name)
        if not os.path.exists(p):
            return {}
        with open(p, encoding="utf-8") as fh:
            return json.load(fh)
    maxpos = load("config.json").get("max_position_embeddings", 512)
    st = load("sentence_bert_config.json").get("max_seq_length")
    if st is not None:
        return min(int(st), maxpos)
    tok = load("tokenizer_config.json").get("model_max_length")
    if tok is not None and 2 <= tok <= maxpos:
        return int(tok)
    return maxpos


def resolve_pooling(model_dir, pooling="auto"):
    if pooling in ("cls", "mean"):
        return pooling
    cfg = os.path.join(model_dir, "1_Pooling", "config.json")
    if not os.path.exists(cfg):
        return "cls"
    with open(cfg, encoding="utf-8") as fh:
        c = json.load(fh)
    if c.get("pooling_mode_mean_tokens"):
        return "mean"
    if c.get("pooling_mode_cls_token"):
        return "cls"
    raise SystemExit("bert_ref: unsupported pooling in %s: %s" % (cfg, c))


def pool(last_hidden, mask, pooling):
    """last_hidden [b, t, h] (torch or numpy), mask [b, t] -> L2-normalised [b, h] numpy fp32."""
    h = np.asarray(last_hidden, dtype=np.float32)
    m = np.asarray(mask, dtype=np.float32)
    if pooling == "cls":
        v = h[:, 0, :]
    else:
        s = (h * m[:, :, None]).sum(axis=1)
        v = s / np.clip(m.sum(axis=1, keepdims=True), 1e-9, None)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.clip(n, 1e-12, None)).astype(np.float32)


def load_model(model_dir):
    import torch
    import transformers
    from transformers import AutoTokenizer, BertModel
    transformers.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(model_dir, use_fast=True)
    kw = {"add_pooling_layer": False, "torch_dtype": torch.float32}
    try:
        model = BertModel.from_pretrained(model_dir, attn_implementation="eager", **kw)
    except TypeError:
        model = BertModel.from_pretrained(model_dir, **kw)
    model.eval()
    return tok, model


def tune_runtime(threads):
    """CPU settings measured fastest for Debian's torch 1.13 (generic BLAS = OpenBLAS) here:
    torch intra-op threads 1 (its OpenMP elementwise loops only contend on 2 cores) and
    OpenBLAS with `threads` threads for the GEMMs; glibc malloc told to keep big buffers
    (otherwise every activation is mmap'd and page-faulted afresh: ~30% of the time in sys).
    Only affects this process. Returns a short description."""
    import ctypes
    import ctypes.util
    import torch
    torch.set_num_threads(1)
    blas = "?"
    for name in ("libopenblas.so.0", ctypes.util.find_library("openblas") or "", "libblas.so.3"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_set_num_threads(int(threads))
            blas = "openblas x%d" % threads
            break
        except (OSError, AttributeError):
            continue
    if blas == "?":
        torch.set_num_threads(threads)
        blas = "torch x%d" % threads
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-2, 1 << 28)   # M_TOP_PAD
        libc.mallopt(-3, 1 << 25)   # M_MMAP_THRESHOLD (glibc max: 32 MiB)
    except (OSError, AttributeError):
        pass
    return blas


def embed(model_dir, texts, max_len=512, pooling="auto", batch_size=8, threads=2, verbose=False):
    """-> float32 [n, hidden], L2-normalised, in the order of `texts`."""
    import torch
    blas = tune_runtime(threads)
    pooling = resolve_pooling(model_dir, pooling)
    tok, model = load_model(model_dir)
    hidden = model.config.hidden_size
    out = np.zeros((len(texts), hidden), dtype=np.float32)
    # length-sorted batches (stable) for speed
    lens = [len(t) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: (lens[i], i))
    t0 = time.time()
    ntok = 0
    with torch.no_grad():
        for b in range(0, len(order), batch_size):
            idx = order[b:b + batch_size]
            enc = tok([texts[i] for i in idx], truncation=True, max_length=max_len,
                      padding=True, return_tensors="pt")
            tti = enc.get("token_type_ids")
            if tti is None:
                tti = torch.zeros_like(enc["input_ids"])
            res = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                        token_type_ids=tti)
            out[idx] = pool(res.last_hidden_state.numpy(), enc["attention_mask"].numpy(), pooling)
            ntok += int(enc["attention_mask"].sum())
    dt = time.time() - t0
    if verbose:
        print("bert_ref: %d texts, %d tokens, pooling=%s, max_len=%d, %.1fs (%.0f tokens/s, %s)"
              % (len(texts), ntok, pooling, max_len, dt, ntok / max(dt, 1e-9), blas), file=sys.stderr)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model dir (config.json, model.safetensors, tokenizer)")
    ap.add_argument("--in", dest="inputs", action="append", required=True,
                    help="input JSONL with a 'text' field (repeatable)")
    ap.add_argument("--limit", default=None,
                    help="first N records of each input, or N1,N2,... one per --in")
    ap.add_argument("--max-len", type=int, default=512, help="truncate to this many tokens (default 512)")
    ap.add_argument("--pooling", choices=["cls", "mean", "auto"], default="auto")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2,
                    help="BLAS threads (default 2; torch's own intra-op threads are set to 1)")
    ap.add_argument("--out", required=True, help="output .npy (float32 [n, hidden])")
    args = ap.parse_args(argv)
    ids, texts = read_jsonl(args.inputs, args.limit)
    if not texts:
        sys.exit("bert_ref: no input texts")
    vecs = embed(args.model, texts, args.max_len, args.pooling, args.batch_size, args.threads, verbose=True)
    np.save(args.out, vecs)
    print("bert_ref: wrote %s %s" % (args.out, vecs.shape), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
