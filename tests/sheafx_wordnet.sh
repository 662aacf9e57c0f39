#!/usr/bin/env bash
# The sheaf export on the WordNet substrate with the fabric's vectors:
# import the first N adjective synsets (antonymy, similar_to), embed their claims and entities through the
# coordinator and a worker (the real model), give the import a simulated
# history (stamp-history), export, and check the graph: version 2, every
# claim node with a 384-d vector, arg_link pairs in train, val and test,
# rebuts among the positives (antonymy), no sheaf-written rows; a pair
# stored both ways (similar_to) is held out whole by stamp-history; the
# identity seed gives the identity task positives in train, val and test.
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
"$emb" wordnet --db "$db" --pos a,v --limit "$n" # adjectives (antonymy, similar_to), then verbs
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
python3 - "$db" <<'PY' || fail "stamp-history split a pair stored both ways across as_of"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
by = {}
for a, b, t in c.execute("SELECT subject, object_iri, tx_from FROM donto_statement WHERE predicate IN "
                         "('owl:sameAs', 'skos:exactMatch', 'wn:similar_to', 'wn:verb_group') "
                         "AND object_iri IS NOT NULL AND tx_until IS NULL"):
    by.setdefault(tuple(sorted((a, b))), set()).add(t)
stored_twice = c.execute("SELECT count(*) FROM donto_statement x JOIN donto_statement y ON x.subject = y.object_iri "
                         "AND y.subject = x.object_iri AND x.predicate = y.predicate WHERE x.predicate = 'wn:similar_to' "
                         "AND x.subject < y.subject").fetchone()[0]
split = [k for k, ts in by.items() if len(ts) > 1]
print("-- identity pairs: %d, stored both ways: %d, split across as_of: %d" % (len(by), stored_twice, len(split)))
assert stored_twice > 0, "no pair stored both ways: the check would be vacuous"
assert not split, split[:3]
PY
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
# The identity seed: whole identity pairs, in every split.
"$sh" export --db "$db" --seed identity --as-of 2025-06-01 --until 2025-09-01 --model "$vmodel" --hops 1 \
  --out "$tmp/wn_id.json" --json --quiet >"$tmp/sum_id" || fail "export --seed identity"
echo "-- $(cat "$tmp/sum_id")"
python3 - "$tmp/wn_id.json" <<'PY' || fail "identity export content"
import json, sys
g = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in g["tasks"]}
assert "identity" in t, "no identity task"
a = t["identity"]
sp = a["splits"][0]
pos = {k: sum(1 for i in sp[k] if a["pairs"][i][2] == "same") for k in ("train", "val", "test")}
print("-- identity positives per split:", pos)
assert all(v > 0 for v in pos.values()), pos
PY
echo "sheafx_wordnet: ok"
