#!/bin/sh
# donto-sheaf finds the geom-gcn graphs the repository carries (data/geom-gcn) wherever it is run
# from: never through the current directory, with $DONTO_GEOM_GCN_DIR unset and no --data-dir.
# usage: sheaf_data.sh BIN REPO_DATA_DIR WORKDIR
set -eu
BIN=$1; REPO_DATA=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
W=$(cd "$W" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
unset DONTO_GEOM_GCN_DIR
fp() { sed 's/.*"fingerprint":"\([0-9a-f]*\)".*/\1/' "$1"; }
TRAIN="train --data texas --family diag --d 2 --hidden 4 --epochs 3 --json"

"$BIN" $TRAIN --data-dir "$REPO_DATA" > "$W/ref.json" || fail "texas under $REPO_DATA"

# A decoy tree of the old cwd-relative defaults (shared/, ../shared/, ../../shared/): a two-node
# 'texas' that must never be picked up.
mkdir -p "$W/cwd/a/b"
for d in "$W/cwd/a/b/shared" "$W/cwd/a/shared" "$W/cwd/shared"; do
  mkdir -p "$d/data/geom-gcn/texas"
  printf 'node_id\tnode_id\n0\t1\n' > "$d/data/geom-gcn/texas/out1_graph_edges.txt"
  printf 'node_id\tfeature\tlabel\n0\t1,0\t0\n1\t0,1\t1\n' > "$d/data/geom-gcn/texas/out1_node_feature_label.txt"
done
(cd "$W/cwd/a/b" && "$BIN" $TRAIN > "$W/cwd.json" 2> "$W/cwd.err") || fail "texas not found from another cwd: $(cat "$W/cwd.err")"
[ "$(fp "$W/cwd.json")" = "$(fp "$W/ref.json")" ] || fail "from another cwd: not the repository's texas"
(cd / && "$BIN" $TRAIN > "$W/root.json" 2> "$W/root.err") || fail "texas not found from /: $(cat "$W/root.err")"
[ "$(fp "$W/root.json")" = "$(fp "$W/ref.json")" ] || fail "from /: not the repository's texas"

# Relative to the executable: a copy of the binary in TREE/build finds TREE/data/geom-gcn/tiny
# (a graph that exists nowhere else).
mkdir -p "$W/tree/build" "$W/tree/data/geom-gcn/tiny"
cp "$BIN" "$W/tree/build/donto-sheaf"
printf 'node_id\tnode_id\n0\t1\n1\t2\n2\t3\n3\t4\n4\t5\n5\t0\n' > "$W/tree/data/geom-gcn/tiny/out1_graph_edges.txt"
printf 'node_id\tfeature\tlabel\n0\t1,0\t0\n1\t0,1\t1\n2\t1,1\t0\n3\t1,0\t0\n4\t0,1\t1\n5\t1,1\t1\n' \
  > "$W/tree/data/geom-gcn/tiny/out1_node_feature_label.txt"
# tiny ships no split files: found, it is refused unless --random-splits (tests/sheaf_load.sh).
(cd "$W/cwd" && "$W/tree/build/donto-sheaf" train --data tiny --d 2 --hidden 2 --epochs 2 --quiet --random-splits \
  2> "$W/tree.err") || fail "data/geom-gcn beside the executable's parent not searched: $(cat "$W/tree.err")"
if (cd "$W/cwd" && "$W/tree/build/donto-sheaf" train --data tiny --epochs 2 2> "$W/tree.err"); then
  fail "tiny without split files trained without --random-splits"
fi
grep -q "tiny_split_0.6_0.2_0.npz" "$W/tree.err" || fail "the no-splits error names no file: $(cat "$W/tree.err")"

# The overrides still win: --data-dir, then $DONTO_GEOM_GCN_DIR.
(cd "$W/cwd" && DONTO_GEOM_GCN_DIR="$W/tree/data/geom-gcn" "$BIN" train --data tiny --d 2 --hidden 2 --epochs 2 --quiet \
  --random-splits 2> /dev/null) || fail "\$DONTO_GEOM_GCN_DIR not used"
(cd "$W/cwd" && "$BIN" train --data tiny --data-dir "$W/tree/data/geom-gcn" --d 2 --hidden 2 --epochs 2 --quiet \
  --random-splits 2> /dev/null) || fail "--data-dir not used"
if (cd "$W/cwd" && "$BIN" train --data nosuchgraph --epochs 2 2> "$W/none.err"); then fail "nosuchgraph found"; fi
grep -q "data/geom-gcn" "$W/none.err" || fail "the not-found message names no place looked in: $(cat "$W/none.err")"
echo "sheaf_data ok"
