#!/usr/bin/env bash
# The sheaf export on the WordNet substrate with the fabric's vectors:
# import the first N synsets, embed their claims and entities through the
# coordinator and a worker (the real model), give the import a simulated
# history (stamp-history), export, and check the graph: version 2, every
# claim node with a 384-d vector, arg_link pairs in train, val and test,
# rebuts among the positives (antonymy), no sheaf-written rows.
#   tests/sheafx_wordnet.sh BUILD_DIR MODEL_DIR [N]
set -euo pipefail
build=$1 model=$2 n=${3:-3000}
emb=$build/donto-embed sh=$build/donto-sheaf
tmp=$(mktemp -d "${TMPDIR:-/tmp}/donto-sxwn.XXXXXX")
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/serve.log" ] && tail -n 20 "$tmp/serve.log" >&2; exit 1; }
db=$tmp/wn.db
name=$(cat "$model/model_name.txt" 2>/dev/null || basename "$model")
"$emb" migrate --db "$db" 2>/dev/null
"$emb" wordnet --db "$db" --limit "$n"
"$emb" enqueue --db "$db" --target claim --model-dir "$model"
"$emb" enqueue --db "$db" --target entity --model-dir "$model"
tok=$("$emb" token add sxwn --role contributor --db "$db" 2>/dev/null)
"$emb" serve --db "$db" --listen 127.0.0.1:0 --model "$model" 2>"$tmp/serve.log" &
spid=$!
port=
for _ in $(seq 300); do
  port=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$tmp/serve.log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || fail "serve did not start"
DONTO_EMBED_TOKEN=$tok timeout 900 "$emb" work --url "http://127.0.0.1:$port/embed" --model "$model" --exit-when-idle \
  --worker-id sxwn 2>"$tmp/work.log" || { tail -n 20 "$tmp/work.log" >&2; fail "worker"; }
kill "$spid"; wait "$spid" 2>/dev/null || true; spid=
vmodel=$("$emb" status --db "$db" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("model") or "")' 2>/dev/null || true)
[ -n "$vmodel" ] || vmodel=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select model from vectors limit 1").fetchone()[0])' "$db")
"$sh" stamp-history --db "$db" --as-of 2025-06-01 --until 2025-09-01 --holdout 0.2 --rewrite
"$sh" export --db "$db" --seed arguments --as-of 2025-06-01 --until 2025-09-01 --model "$vmodel" --hops 1 \
  --out "$tmp/wn.json" --json --quiet >"$tmp/sum" || fail "export"
echo "-- $(cat "$tmp/sum")"
python3 - "$tmp/wn.json" <<'PY' || fail "export content"
import json, sys
g = json.load(open(sys.argv[1]))
assert g["version"] == 2, g["version"]
claims = [n for n in g["nodes"] if n["kind"] == "claim"]
assert claims and all(len(n["features"]) == 384 for n in claims), "features"
assert g["export"]["filtered"]["sheaf_written_statements"] == 0
t = {x["name"]: x for x in g["tasks"]}
a = t["arg_link"]
sp = a["splits"][0]
pos = lambda idx: [a["pairs"][i] for i in idx if a["pairs"][i][2] != "none"]
counts = {k: (len(sp[k]), len(pos(sp[k]))) for k in ("train", "val", "test")}
print("-- arg_link (examples, positives) per split:", counts, "nodes", len(g["nodes"]), "edges", len(g["edges"]))
assert all(counts[k][1] > 0 for k in counts), counts
assert any(p[2] == "rebuts" for p in a["pairs"]), "no rebuts"
edges = {(e["src"], e["dst"]) for e in g["edges"]}
for i in sp["val"] + sp["test"]:
    u, v, _ = a["pairs"][i]
    assert (u, v) not in edges and (v, u) not in edges, "held-out pair is a graph edge"
PY
echo "sheafx_wordnet: ok"
