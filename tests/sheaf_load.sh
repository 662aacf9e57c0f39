#!/bin/sh
# donto-sheaf loads graphs honestly (issue 17): a graph without splits is an error naming what was
# looked for unless --random-splits, which every command taking a graph accepts and whose use is
# said and recorded; feature files listing the indices of nonzero features are read as such, and
# rows that could be either need --features (or the dataset's name); an .npz with edges and masks
# (written here by numpy, PyG's names and geom-gcn's) is a graph on its own; --help says how a
# dataset is laid out. usage: sheaf_load.sh BIN PYTHON WORKDIR (PYTHON with numpy)
set -eu
BIN=$1; PY=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
W=$(cd "$W" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
T="train --d 2 --hidden 2 --epochs 3"
edges() { printf 'node_id\tnode_id\n0\t1\n1\t2\n2\t3\n3\t4\n4\t5\n5\t0\n0\t3\n'; }
ds() { mkdir -p "$W/d/$1"; edges > "$W/d/$1/out1_graph_edges.txt"; printf "$2" > "$W/d/$1/out1_node_feature_label.txt"; }
ds dense 'node_id\tfeature\tlabel\n0\t1,0,0\t0\n1\t0,1,0\t1\n2\t1,1,0\t0\n3\t1,0,1\t0\n4\t0,1,1\t1\n5\t1,1,1\t1\n'
ds idx 'node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2\t1\n2\t0,5,9\t0\n3\t1,4\t0\n4\t8\t1\n5\t6,2\t1\n'
ds eq 'node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2,4\t1\n2\t0,5\t0\n3\t1,4\t0\n4\t8,2\t1\n5\t6,2\t1\n'
ds film 'node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2,4\t1\n2\t0,5\t0\n3\t1,4\t0\n4\t8,2\t1\n5\t6,2\t1\n'
D="--data-dir $W/d"

# no split files: exit 1 naming the file looked for and --random-splits; by name and by path
for spec in "dense $D" "$W/d/dense"; do
  rc=0; "$BIN" $T --data $spec > "$W/o.txt" 2> "$W/e.txt" || rc=$?
  [ $rc -eq 1 ] || fail "no splits ($spec): exit $rc, expected 1"
  grep -q "splits/dense_split_0.6_0.2_0.npz" "$W/e.txt" && grep -q -- "--random-splits" "$W/e.txt" \
    && grep -q "60/20/20" "$W/e.txt" || fail "no splits ($spec): unclear error: $(cat "$W/e.txt")"
  [ ! -s "$W/o.txt" ] || fail "no splits ($spec): printed results"
done
# --random-splits: trains, says so (even with --quiet), records it in --json and the checkpoint
"$BIN" $T --data dense $D --random-splits --quiet --checkpoint "$W/ck.json" > "$W/o.txt" 2> "$W/e.txt" \
  || fail "--random-splits: $(cat "$W/e.txt")"
grep -q "random 60/20/20" "$W/e.txt" || fail "--random-splits not said on stderr: $(cat "$W/e.txt")"
grep -q "random" "$W/o.txt" || fail "--random-splits not said in the result line: $(cat "$W/o.txt")"
"$BIN" $T --data dense $D --random-splits --json > "$W/r.json" 2> /dev/null || fail "--random-splits --json"
"$PY" - "$W/r.json" "$W/ck.json" <<'PY' || fail "--random-splits not recorded: $(cat "$W/r.json")"
import json, sys
r = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))["graph"]
assert r["random_splits"] is True and "random 60/20/20" in r["splits_source"], r
assert "dense rows of 3 values" in r["features"], r
assert c["random_splits"] is True and "random 60/20/20" in c["splits"], c
PY
# texas keeps its fixed splits, and says so
"$BIN" $T --data texas --json > "$W/t.json" 2> /dev/null || fail "texas"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['random_splits'] is False and 'texas_split_0.6_0.2_<i>.npz' in r['splits_source'] else 1)" \
  "$W/t.json" || fail "texas: splits_source: $(cat "$W/t.json")"
# eval needs the same masks: without --random-splits it is the no-splits error, with it held out
if "$BIN" eval --checkpoint "$W/ck.json" --data dense $D > /dev/null 2> "$W/e.txt"; then fail "eval without --random-splits"; fi
grep -q -- "--random-splits" "$W/e.txt" || fail "eval: unclear error: $(cat "$W/e.txt")"
"$BIN" eval --checkpoint "$W/ck.json" --data dense $D --random-splits --json > "$W/ev.json" 2> /dev/null || fail "eval --random-splits"
grep -q '"held_out":true' "$W/ev.json" || fail "eval --random-splits: not held out: $(cat "$W/ev.json")"
# infer needs no splits
"$BIN" infer --checkpoint "$W/ck.json" --in dense $D --format tsv > "$W/p.tsv" || fail "infer without splits"
[ "$(wc -l < "$W/p.tsv")" -eq 6 ] || fail "infer: expected 6 lines"
# sweep: the same rule for the grid's datasets
echo '{"datasets": ["dense"], "lr": [0.01]}' > "$W/grid.json"
if "$BIN" sweep --grid "$W/grid.json" $D --epochs 2 > /dev/null 2> "$W/e.txt"; then fail "sweep without splits"; fi
grep -q -- "--random-splits" "$W/e.txt" || fail "sweep: unclear error: $(cat "$W/e.txt")"
"$BIN" sweep --grid "$W/grid.json" $D --epochs 2 --d 2 --hidden 2 --random-splits --json > "$W/sw.json" 2> /dev/null \
  || fail "sweep --random-splits"
grep -q '"random_splits": true' "$W/sw.json" || fail "sweep --json does not record random splits: $(cat "$W/sw.json")"

# an export file without "splits": the same rule (docs/sheaf-export.md)
cat > "$W/g.json" <<'J'
{"format": "donto-sheaf-graph", "version": 1,
 "nodes": [{"id": "a", "features": [1, 0]}, {"id": "b", "features": [0, 1]}, {"id": "c", "features": [1, 1]},
           {"id": "d", "features": [0.5, 0]}, {"id": "e", "features": [0, 0.5]}, {"id": "f", "features": [1, 0.2]}],
 "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "c"}, {"src": "c", "dst": "d"}],
 "tasks": [{"name": "t", "labels": {"a": 0, "b": 1, "c": 0, "d": 0, "e": 1, "f": 0}}]}
J
if "$BIN" $T --data "$W/g.json" 2> "$W/e.txt"; then fail "export without splits trained"; fi
grep -q '"splits"' "$W/e.txt" && grep -q -- "--random-splits" "$W/e.txt" || fail "export: unclear error: $(cat "$W/e.txt")"
"$BIN" $T --data "$W/g.json" --random-splits --quiet > /dev/null 2>&1 || fail "export --random-splits"

# feature layouts: index lists of differing lengths are told from the rows
"$BIN" $T --data idx $D --random-splits --json > "$W/i.json" 2> /dev/null || fail "index rows"
grep -q 'indices of nonzero features, 1 to 3 a row, as 0/1 rows of 10' "$W/i.json" || fail "index rows: $(cat "$W/i.json")"
# read as values they are an error that says what they look like, not "1 features, earlier lines have 5"
if "$BIN" $T --data idx $D --random-splits --features dense 2> "$W/e.txt"; then fail "index rows as dense"; fi
if grep -q "earlier lines" "$W/e.txt"; then fail "the misleading message: $(cat "$W/e.txt")"; fi
grep -q -- "--features indices" "$W/e.txt" || fail "index rows as dense: unclear error: $(cat "$W/e.txt")"
# equal lengths: an error asking which, unless --features or the name says
if "$BIN" $T --data eq $D --random-splits 2> "$W/e.txt"; then fail "ambiguous rows loaded"; fi
grep -q -- "--features dense" "$W/e.txt" && grep -q -- "--features indices" "$W/e.txt" \
  || fail "ambiguous rows: unclear error: $(cat "$W/e.txt")"
"$BIN" $T --data eq $D --random-splits --features indices:12 --json > "$W/q.json" 2> /dev/null || fail "--features indices:12"
grep -q 'as 0/1 rows of 12' "$W/q.json" || fail "--features indices:12: $(cat "$W/q.json")"
"$BIN" $T --data eq $D --random-splits --features dense --json > "$W/q.json" 2> /dev/null || fail "--features dense"
grep -q 'dense rows of 2 values' "$W/q.json" || fail "--features dense: $(cat "$W/q.json")"
"$BIN" $T --data film $D --random-splits --json > "$W/f.json" 2> /dev/null || fail "film by name"
grep -q 'as 0/1 rows of 932' "$W/f.json" || fail "film: not 932 features: $(cat "$W/f.json")"
rc=0; "$BIN" $T --data eq $D --features sparse > /dev/null 2> "$W/e.txt" || rc=$?
[ $rc -eq 2 ] && grep -q -- "--features" "$W/e.txt" || fail "--features sparse: exit $rc: $(cat "$W/e.txt")"
if "$BIN" $T --data "$W/g.json" --random-splits --features dense 2> "$W/e.txt"; then fail "--features on an export file"; fi

# --help says how a dataset is laid out and what --random-splits does
for c in train eval infer sweep; do
  "$BIN" $c --help > "$W/h.txt"
  for w in --random-splits --features out1_node_feature_label.txt out1_graph_edges.txt \
           "splits/NAME_split_0.6_0.2_<i>.npz" NAME.npz edge_index train_masks 60/20/20; do
    grep -q -- "$w" "$W/h.txt" || fail "$c --help does not mention $w"
  done
done

# .npz files written by numpy: PyG's names (x, y, edge_index [2,E], train_mask [N,S]) uncompressed,
# geom-gcn's (node_features Fortran-ordered float64, node_labels int32, edges [E,2], train_masks
# [S,N], uint8 val_masks) compressed, and single [N] masks; each alone in its directory, the same
# graph as the text files, the same masks whichever names
if ! "$PY" -c "import numpy" 2> /dev/null; then echo "sheaf_load: $PY has no numpy: the npz part skipped" >&2; exit 77; fi
"$PY" - "$W/d" <<'PY'
import os, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(1)
n, f = 12, 5
x = (rng.random((n, f)) < 0.4).astype(np.float32); x[:, 0] = 1
y = rng.integers(0, 3, n)
e = np.array([[i, (i + 1) % n] for i in range(n)] + [[0, 6], [3, 9]])
tr, va, te = (np.zeros((n, 2), bool) for _ in range(3))
for s in range(2):
    p = rng.permutation(n); tr[p[:6], s] = 1; va[p[6:9], s] = 1; te[p[9:], s] = 1
for name in ("pyg", "geo", "one", "txt"):
    os.makedirs(os.path.join(d, name), exist_ok=True)
np.savez(f"{d}/pyg/pyg.npz", x=x, y=y, edge_index=e.T.copy(), train_mask=tr, val_mask=va, test_mask=te)
np.savez_compressed(f"{d}/geo/geo.npz", node_features=np.asfortranarray(x.astype(np.float64)),
                    node_labels=y.astype(np.int32), edges=e, train_masks=np.asfortranarray(tr.T),
                    val_masks=va.T.astype(np.uint8), test_masks=te.T)
np.savez(f"{d}/one/one.npz", features=x, labels=y, edges=e, train_mask=tr[:, 1], val_mask=va[:, 1], test_mask=te[:, 1])
with open(f"{d}/txt/out1_graph_edges.txt", "w") as o:
    o.write("node_id\tnode_id\n" + "".join(f"{a}\t{b}\n" for a, b in e))
with open(f"{d}/txt/out1_node_feature_label.txt", "w") as o:
    o.write("node_id\tfeature\tlabel\n" + "".join(f"{i}\t{','.join(str(int(v)) for v in x[i])}\t{y[i]}\n" for i in range(n)))
np.savez(f"{d}/noedges.npz", x=x, y=y)
PY
"$BIN" $T --data txt $D --random-splits --json > "$W/txt.json" 2> /dev/null || fail "txt"
for spec in "$W/d/pyg" "$W/d/geo" "$W/d/geo/geo.npz" "one $D"; do
  "$BIN" $T --data $spec --split all --json > "$W/z.json" 2> "$W/e.txt" || fail "npz $spec: $(cat "$W/e.txt")"
  "$PY" - "$W/z.json" "$W/txt.json" "$spec" <<'PY' || fail "npz $spec: $(cat "$W/z.json")"
import json, sys
z, t, spec = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert z["fingerprint"] == t["fingerprint"], "not the text files' graph"
assert z["random_splits"] is False and "mask" in z["splits_source"], z["splits_source"]
assert len(z["splits"]) == (1 if spec.startswith("one") else 2), len(z["splits"])
PY
done
# the masks are the same whichever names and memory order: split 1 of pyg is split 1 of geo and one's only split
"$BIN" $T --data "$W/d/pyg" --split 1 --checkpoint "$W/pyg1.json" --quiet 2> /dev/null || fail "pyg split 1"
"$BIN" eval --checkpoint "$W/pyg1.json" --data "$W/d/geo" --split 1 --json > "$W/g1.json" 2> "$W/e.txt" || fail "geo: $(cat "$W/e.txt")"
grep -q '"held_out":true' "$W/g1.json" || fail "geo's split 1 masks differ from pyg's: $(cat "$W/g1.json")"
"$BIN" eval --checkpoint "$W/pyg1.json" --data one $D --split 0 --allow-other-splits --json > "$W/o1.json" 2> /dev/null || fail "one"
"$PY" -c "import json,sys; a=json.load(open(sys.argv[1]))[0]; b=json.load(open(sys.argv[2]))[0]; sys.exit(0 if a['test_acc']==b['test_acc'] and a['val_acc']==b['val_acc'] else 1)" \
  "$W/g1.json" "$W/o1.json" || fail "one's masks differ from split 1's"
# an .npz without edges says what it holds
if "$BIN" $T --data "$W/d/noedges.npz" --random-splits 2> "$W/e.txt"; then fail "npz without edges"; fi
grep -q "edge_index" "$W/e.txt" && grep -q "holds: x, y" "$W/e.txt" || fail "npz without edges: unclear error: $(cat "$W/e.txt")"
echo "sheaf_load ok"
