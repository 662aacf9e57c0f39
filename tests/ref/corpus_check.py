#!/usr/bin/env python3
"""Check the corpus made by scripts/make-corpus with the real tokenizer.

  corpus_check.py [--corpus corpus] [--tokenizer models/all-MiniLM-L6-v2/tokenizer.json]

Checks: claims.jsonl has exactly 10,000 records and chunks.jsonl exactly 1,000; every id
is unique (within and across the files); every record has a non-empty text; token
lengths (HF tokenizers, no truncation, no padding, counting [CLS] and [SEP]) lie in
10-40 for claims and 200-300 for chunks for at least --min-share (default 90%) of the
items. Prints the length distribution; exit 1 if a check fails.
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

SPECS = (("claims.jsonl", 10_000, 10, 40), ("chunks.jsonl", 1_000, 200, 300))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=os.path.join(ROOT, "corpus"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2", "tokenizer.json"))
    ap.add_argument("--min-share", type=float, default=0.90)
    args = ap.parse_args(argv)

    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(args.tokenizer)
    tk.no_truncation()  # MiniLM's tokenizer.json ships truncation=128 and padding=128
    tk.no_padding()

    failures = []
    all_ids = {}
    report = {}
    for fname, want_n, lo, hi in SPECS:
        path = os.path.join(args.corpus, fname)
        if not os.path.exists(path):
            failures.append("%s missing (run scripts/make-corpus --out %s)" % (path, args.corpus))
            continue
        recs = []
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    recs.append(json.loads(line))
                except ValueError as e:
                    failures.append("%s:%d: bad JSON: %s" % (fname, lineno, e))
        if len(recs) != want_n:
            failures.append("%s: %d records, want %d" % (fname, len(recs), want_n))
        dup = 0
        for r in recs:
            i = r.get("id")
            if not isinstance(i, str) or not i:
                failures.append(("%s: record without a string id: %r" % (fname, r))[:200])
                break
            if i in all_ids:
                dup += 1
            all_ids[i] = fname
            if not isinstance(r.get("text"), str) or not r["text"].strip():
                failures.append("%s: %s has no text" % (fname, i))
        if dup:
            failures.append("%s: %d duplicate ids" % (fname, dup))
        texts = [r.get("text", "") for r in recs]
        n = np.array([len(e.ids) for e in tk.encode_batch(texts)]) if texts else np.zeros(1, int)
        share = float(((n >= lo) & (n <= hi)).mean())
        words = np.array([len(t.split()) for t in texts]) if texts else np.zeros(1, int)
        p = np.percentile(n, [1, 5, 50, 95, 99])
        print("%-13s n=%5d tokens mean=%.1f min=%d p1=%d p5=%d median=%d p95=%d p99=%d max=%d total=%d | "
              "words mean=%.1f | in %d-%d: %.1f%%"
              % (fname, len(recs), n.mean(), n.min(), p[0], p[1], p[2], p[3], p[4], n.max(), n.sum(),
                 words.mean(), lo, hi, 100 * share))
        report[fname] = {"n": len(recs), "tokens_mean": float(n.mean()), "tokens_min": int(n.min()),
                         "tokens_max": int(n.max()), "tokens_total": int(n.sum()), "share_in_range": share}
        if share < args.min_share:
            failures.append("%s: only %.1f%% of items have %d-%d tokens (want >= %.0f%%)"
                            % (fname, 100 * share, lo, hi, 100 * args.min_share))
    for f in failures:
        print("corpus_check: FAIL: " + f)
    print(json.dumps({"pass": not failures, "files": report}, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
