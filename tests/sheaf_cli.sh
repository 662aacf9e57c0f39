#!/bin/sh
# donto-sheaf end to end: train -> checkpoint -> eval -> infer on texas and on an export file
# (docs/sheaf-export.md); bad inputs give clear errors. usage: sheaf_cli.sh BIN DATA_DIR WORKDIR
set -eu
BIN=$1; DATA=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" train --data texas --data-dir "$DATA" --family diag --d 2 --hidden 8 --epochs 40 --split 1 \
  --checkpoint "$W/t.json" --json > "$W/train.json"
grep -q '"test_acc_mean"' "$W/train.json" || fail "train --json"
"$BIN" eval --checkpoint "$W/t.json" --data texas --data-dir "$DATA" --split 1 --json > "$W/eval.json"
grep -q '"val_acc"' "$W/eval.json" || fail "eval --json"
"$BIN" infer --checkpoint "$W/t.json" --in texas --data-dir "$DATA" --out "$W/p.jsonl"
[ "$(wc -l < "$W/p.jsonl")" -eq 183 ] || fail "infer: expected 183 lines"
# eval's val accuracy equals the training run's selected val accuracy (same forward)
python3 - "$W/train.json" "$W/eval.json" <<'PY' || fail "eval differs from training's evaluation"
import json, sys
t = json.load(open(sys.argv[1]))["splits"][0]["val_acc"]
e = json.load(open(sys.argv[2]))[0]["val_acc"]
sys.exit(0 if abs(t - e) < 1e-9 else 1)
PY

cat > "$W/g.json" <<'J'
{"format": "donto-sheaf-graph", "version": 1, "provenance": {"source": "test"},
 "nodes": [{"id": "a", "features": [1, 0]}, {"id": "b", "features": [0, 1]}, {"id": "c", "features": [1, 1]},
           {"id": "d", "features": [0.5, 0]}, {"id": "e", "features": [0, 0.5]}, {"id": "f", "features": [1, 0.2]}],
 "edges": [{"src": "a", "dst": "b", "type": "contradicts"}, {"src": "b", "dst": "c"}, {"src": "c", "dst": "d"},
           {"src": "d", "dst": "e"}, {"src": "e", "dst": "f"}, {"src": "f", "dst": "a"}],
 "tasks": [{"name": "t", "classes": ["x", "y"], "labels": {"a": "x", "b": 1, "c": 0, "d": "x", "e": "y", "f": 0},
            "splits": [{"train": ["a", "b", "c"], "val": ["d"], "test": ["e", "f"]}]}]}
J
"$BIN" train --data "$W/g.json" --task t --family orth --d 2 --hidden 4 --epochs 10 --checkpoint "$W/g_ck.json" --quiet
"$BIN" infer --checkpoint "$W/g_ck.json" --in "$W/g.json" --format tsv > "$W/g.tsv"
[ "$(cut -f1 "$W/g.tsv" | tr '\n' ' ')" = "a b c d e f " ] || fail "infer keeps node ids"

echo '{"format": "donto-sheaf-graph", "version": 1, "nodes": [{"id": "a", "embedding": {"key": "a"}}], "edges": []}' > "$W/bad.json"
if "$BIN" train --data "$W/bad.json" 2> "$W/err.txt"; then fail "embedding reference accepted"; fi
grep -q "stored embedding" "$W/err.txt" || fail "unclear error: $(cat "$W/err.txt")"
if "$BIN" infer --checkpoint "$W/g_ck.json" --in texas --data-dir "$DATA" 2> "$W/err2.txt"; then fail "feature mismatch accepted"; fi
grep -q "features" "$W/err2.txt" || fail "unclear error: $(cat "$W/err2.txt")"
echo "sheaf_cli ok"
