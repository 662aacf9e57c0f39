#!/bin/sh
# The sheaf operator from Python (docs/sheaf-operator.md): the doc's ctypes example is
# tests/ffi_sheaf_op.py's, word for word; run against checkpoints of a directed and an undirected
# edge task and a node task, its probabilities are expf of `donto-sheaf infer`'s log-probabilities
# bit for bit, and its log-probabilities are infer's.
# usage: sheaf_op_ffi.sh BIN LIB PYTHON SOURCE_DIR WORKDIR
set -eu
BIN=$1; LIB=$2; PY=$3; SRC=$4; W=$5
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$PY" - "$SRC/docs/sheaf-operator.md" "$SRC/tests/ffi_sheaf_op.py" <<'PYEOF' || fail "the doc's example is not tests/ffi_sheaf_op.py's"
import re, sys
doc, src = open(sys.argv[1]).read(), open(sys.argv[2]).read()
blk = re.search(r"```python\n(.*?)```", doc, re.S)
ex = re.search(r"# --- example \(docs/sheaf-operator.md\) ---\n(.*?)# --- end example ---\n", src, re.S)
sys.exit(0 if blk and ex and blk.group(1) == ex.group(1) else 1)
PYEOF

# the planted export (tests/sheaf_edge_gen.py: arg_link directed, identity undirected) plus a node
# task on the same nodes (community i % 4 of claim:i, no splits: --random-splits)
"$PY" "$SRC/tests/sheaf_edge_gen.py" "$W/g.json" --nodes 120 --pairs 300
"$PY" - "$W/g.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["tasks"].append({"name": "comm", "kind": "node", "classes": ["a", "b", "c", "d"],
                   "labels": {n["id"]: int(n["id"].split(":")[1]) % 4 for n in d["nodes"]}})
json.dump(d, open(sys.argv[1], "w"))
PYEOF

run() { # task family [train options]
  t=$1; fam=$2; shift 2
  "$BIN" train --data "$W/g.json" --task "$t" --family "$fam" --hidden 8 --epochs 30 --checkpoint "$W/$t.ck" \
    --quiet "$@" > /dev/null || fail "train $t $fam"
  "$BIN" infer --checkpoint "$W/$t.ck" --in "$W/g.json" --task "$t" --out "$W/$t.jsonl" 2> /dev/null \
    || fail "infer $t"
  "$PY" "$SRC/tests/ffi_sheaf_op.py" "$LIB" "$W/$t.ck" "$W/g.json" --task "$t" --compare "$W/$t.jsonl" \
    || fail "$t ($fam): the operator through ctypes differs from donto-sheaf infer"
}
run arg_link diag --d 2
run identity householder --d 3
run comm general --d 2 --random-splits

# a bad checkpoint is a Python exception with the library's message
head -c 300 "$W/comm.ck" > "$W/cut.ck"
if "$PY" "$SRC/tests/ffi_sheaf_op.py" "$LIB" "$W/cut.ck" "$W/g.json" --task comm > /dev/null 2> "$W/err.txt"; then
  fail "a truncated checkpoint loaded"
fi
grep -q "not JSON" "$W/err.txt" || fail "truncated checkpoint: unclear error: $(tail -1 "$W/err.txt")"
echo "sheaf_op_ffi: ok"
