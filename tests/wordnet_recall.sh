#!/usr/bin/env bash
# WordNet -> substrate -> enqueue -> coordinator + worker -> recall, end to
# end, with the real model (issue 5's acceptance test):
#   tests/wordnet_recall.sh BUILD_DIR MODEL_DIR [DB_URL]
# DB_URL: postgres://... (run under scripts/pg-test-server, which sets
# DONTO_TEST_PG_URL) or empty for a temp SQLite file. Imports the first 1,500
# synsets (about 2,800 claims), embeds every claim through `serve` + `work`,
# then asks paraphrases of a few synsets' meanings: each answer's top 5 must
# hold a claim about that synset, from the CLI and from GET /embed/recall.
set -euo pipefail
build=$1 model=$2 db=${3:-}
bin=$build/donto-embed
tmp=$(mktemp -d "${TMPDIR:-/tmp}/donto-wnrecall.XXXXXX")
spid=
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
[ -n "$db" ] || db=$tmp/wn.db
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/serve.log" ] && tail -n 20 "$tmp/serve.log" >&2; exit 1; }

"$bin" migrate --db "$db" 2>/dev/null
"$bin" wordnet --db "$db" --limit 1500
"$bin" enqueue --db "$db" --target claim --model-dir "$model"
# A reader: it works (lease, submit) and reads GET /recall (docs/trust.md, Roles).
tok=$("$bin" token add wn-test --role reader --db "$db" 2>/dev/null)
"$bin" serve --db "$db" --listen 127.0.0.1:0 --model "$model" 2>"$tmp/serve.log" &
spid=$!
port=
for _ in $(seq 300); do
  port=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$tmp/serve.log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || fail "serve did not start"
url="http://127.0.0.1:$port/embed"
DONTO_EMBED_TOKEN=$tok timeout 600 "$bin" work --url "$url" --model "$model" --exit-when-idle \
  --worker-id wn-test 2>"$tmp/work.log" || { tail -n 20 "$tmp/work.log" >&2; fail "worker"; }

counts=$("$bin" status --db "$db" --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["claim"]; print(c["embedded"], c["total"], c["pending"], c["leased"])')
read -r emb total pend leased <<<"$counts"
[ "$total" -gt 2000 ] && [ "$emb" = "$total" ] && [ "$pend" = 0 ] && [ "$leased" = 0 ] ||
  fail "claims embedded/total/pending/leased: $counts"
echo "-- $emb of $total WordNet claims embedded through the fabric ($db)"

# query | a lemma of the synset the answer must be about
checks=(
  "changing the motor oil of an automobile|oil change"
  "pollution caused by dust|dust contamination"
  "shifting a car into a lower gear|downshift"
  "trying to become a better person|self-improvement"
  "leaving a place|departure"
)
for c in "${checks[@]}"; do
  q=${c%%|*} want=${c#*|}
  "$bin" recall --db "$db" --model "$model" -k 5 --json "$q" >"$tmp/hits.json" || fail "recall '$q'"
  python3 - "$tmp/hits.json" "$want" "$q" <<'PY' || fail "recall '$q'"
import json, sys
hits = json.load(open(sys.argv[1]))["hits"]
texts = [h.get("text") or "" for h in hits]
ok = len(hits) == 5 and any(sys.argv[2] in t for t in texts) and all(hits[i]["score"] >= hits[i + 1]["score"] for i in range(4))
print("-- %-42s -> %s" % (sys.argv[3], texts[0] if texts else "(none)"))
if not ok:
    print("top 5 for %r hold no claim about %r: %r" % (sys.argv[3], sys.argv[2], texts))
    sys.exit(1)
PY
done
# The coordinator's route answers the same question the same way.
curl -sS --noproxy '*' -H "Authorization: Bearer $tok" "$url/recall?q=pollution+caused+by+dust&k=3" >"$tmp/route.json" ||
  fail "GET /recall"
python3 - "$tmp/route.json" <<'PY' || fail "GET /recall"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["hits"]) == 3 and "dust contamination" in d["hits"][0]["text"], d
print("-- GET /embed/recall: %s" % d["hits"][0]["text"])
PY
echo "wordnet_recall: ok"
