#!/bin/sh
# A checkpoint knows the graph and the split it was trained on: eval/infer on another graph is an
# error unless --allow-other-graph; eval on splits other than the trained one (whose test nodes the
# model may have trained on) is refused unless --allow-other-splits, which marks them not held out.
# usage: sheaf_ckpt.sh BIN DATA_DIR WORKDIR
set -eu
BIN=$1; DATA=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }
D="--data-dir $DATA"

"$BIN" train --data texas $D --family diag --d 2 --hidden 8 --epochs 20 --split 1 --checkpoint "$W/t.json" --quiet \
  || fail "train"

# another graph (wisconsin: same features and classes, so the model loads)
if "$BIN" eval --checkpoint "$W/t.json" --data wisconsin $D > "$W/o.txt" 2> "$W/e.txt"; then
  fail "eval of a texas checkpoint on wisconsin exits 0: $(cat "$W/o.txt")"
fi
grep -q "texas" "$W/e.txt" && grep -q "wisconsin" "$W/e.txt" && grep -q "fingerprint" "$W/e.txt" \
  && grep -q -- "--allow-other-graph" "$W/e.txt" || fail "eval on wisconsin: unclear error: $(cat "$W/e.txt")"
[ ! -s "$W/o.txt" ] || fail "eval on wisconsin printed results"
if "$BIN" infer --checkpoint "$W/t.json" --in wisconsin $D > "$W/o.txt" 2> "$W/e.txt"; then
  fail "infer of a texas checkpoint on wisconsin exits 0"
fi
grep -q "texas" "$W/e.txt" && grep -q "wisconsin" "$W/e.txt" || fail "infer on wisconsin: unclear error: $(cat "$W/e.txt")"
[ ! -s "$W/o.txt" ] || fail "infer on wisconsin printed predictions"
"$BIN" eval --checkpoint "$W/t.json" --data wisconsin $D --allow-other-graph > /dev/null 2> "$W/e.txt" \
  || fail "eval --allow-other-graph: $(cat "$W/e.txt")"
grep -q "not trained on" "$W/e.txt" || fail "eval --allow-other-graph says nothing: $(cat "$W/e.txt")"
"$BIN" infer --checkpoint "$W/t.json" --in wisconsin $D --allow-other-graph --out "$W/p.jsonl" 2> /dev/null \
  || fail "infer --allow-other-graph"
[ "$(wc -l < "$W/p.jsonl")" -eq 251 ] || fail "infer --allow-other-graph: expected 251 lines"

# splits: the default is the trained split; others are refused
"$BIN" eval --checkpoint "$W/t.json" --data texas $D --json > "$W/d.json" || fail "eval without --split"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if [e['split'] for e in r]==[1] and r[0]['held_out'] is True else 1)" \
  "$W/d.json" || fail "eval without --split: not the trained split 1, held out: $(cat "$W/d.json")"
for s in 0 all; do
  if "$BIN" eval --checkpoint "$W/t.json" --data texas $D --split $s > "$W/o.txt" 2> "$W/e.txt"; then
    fail "eval --split $s of a split-1 checkpoint exits 0: $(cat "$W/o.txt")"
  fi
  grep -q "split 1" "$W/e.txt" && grep -q -- "--allow-other-splits" "$W/e.txt" \
    || fail "eval --split $s: unclear error: $(cat "$W/e.txt")"
done
"$BIN" eval --checkpoint "$W/t.json" --data texas $D --split all --allow-other-splits --json > "$W/a.json" \
  || fail "eval --split all --allow-other-splits"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if len(r)==10 and all(e['held_out']==(e['split']==1) for e in r) else 1)" \
  "$W/a.json" || fail "eval --split all --allow-other-splits: held_out marks wrong: $(cat "$W/a.json")"
"$BIN" eval --checkpoint "$W/t.json" --data texas $D --split all --allow-other-splits > "$W/a.txt" || fail "text eval"
[ "$(grep -c "not held out" "$W/a.txt")" -eq 9 ] || fail "text eval: 9 splits should say not held out: $(cat "$W/a.txt")"

# a checkpoint that records no training split (older files): eval refuses unless forced
python3 - "$W/t.json" "$W/old.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("split", None); c.pop("split_fingerprint", None)
json.dump(c, open(sys.argv[2], "w"))
PY
if "$BIN" eval --checkpoint "$W/old.json" --data texas $D --split 1 2> "$W/e.txt" > /dev/null; then
  fail "eval of a checkpoint without its split exits 0"
fi
grep -q "no training split" "$W/e.txt" || fail "old checkpoint: unclear error: $(cat "$W/e.txt")"
"$BIN" eval --checkpoint "$W/old.json" --data texas $D --split 1 --allow-other-splits > /dev/null || fail "old checkpoint forced"

"$BIN" eval --help | grep -q -- "--allow-other-splits" || fail "eval --help"
"$BIN" eval --help | grep -q -- "--allow-other-graph" || fail "eval --help"
"$BIN" infer --help | grep -q -- "--allow-other-graph" || fail "infer --help"
echo "sheaf_ckpt ok"
