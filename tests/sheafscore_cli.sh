#!/bin/sh
# donto-sheaf score end to end (docs/sheaf-serving.md "Scores"):
#   sheafscore_cli.sh DONTO_SHEAF PYTHON SHEAF_REF_PY WORKDIR [pg]
# Plants a substrate, exports it, trains tiny claim_score, arg_link and identity models, registers
# and activates them, scores: rows with probabilities in [0,1] summing to 1 per item; a
# rerun scores nothing; after adding two claims and retracting one only those (and their
# pairs / neighbours) are rescored; proposed arguments carry the sheaf: context and are not
# in a new export; identity scores entity pairs not already joined by owl:sameAs; no active
# model -> exit 1; unknown task -> exit 2. With "pg": the same
# on $DONTO_TEST_PG_URL (scripts/pg-test-server).
set -u
B=$1 PY=$2 REF=$3 W=$4 MODE=${5:-sqlite}
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
if [ "$MODE" = pg ]; then DB=$DONTO_TEST_PG_URL; q() { psql -qAtX "$DB" -c "$1"; }
else DB=s.db; q() { sqlite3 "$DB" "$1"; }; fi
REFCMD="$PY $REF infer"
X="--as-of 2025-06-01 --until 2025-09-01 --model planted-16 --quiet"
"$B" gen-substrate --db "$DB" --statements 3000 --quiet || { echo "gen-substrate failed"; exit 1; }
"$B" export --db "$DB" --seed frontier $X --out g.json || exit 1
"$B" export --db "$DB" --seed arguments $X --out ga.json || exit 1
"$B" train --data g.json --task claim_score --epochs 5 --split 0 --checkpoint cs.json >/dev/null 2>&1 || { echo "train cs failed"; exit 1; }
"$B" train --data ga.json --task arg_link --epochs 5 --split 0 --checkpoint al.json >/dev/null 2>&1 || { echo "train al failed"; exit 1; }
"$B" score --db "$DB" --task claim_score --model planted-16 --migrate >out.txt 2>&1; rc=$?
[ $rc = 1 ] && grep -q "no active model for task claim_score; register and activate one" out.txt && ok "no active model: exit 1, says so" || { bad "no active model: exit $rc"; cat out.txt; }
"$B" score --db "$DB" --task frob >out.txt 2>&1; [ $? = 2 ] && ok "unknown task: exit 2" || bad "unknown task"
"$B" score --help >/dev/null && ok "--help" || bad "--help"
"$B" register cs.json --db "$DB" --activate --reference "$REFCMD" >/dev/null || { echo "register cs failed"; exit 1; }
"$B" register al.json --db "$DB" --activate --reference "$REFCMD" >/dev/null || { echo "register al failed"; exit 1; }
score() { "$B" score --db "$DB" --model planted-16 --quiet --json "$@"; }
field() { "$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).read())[sys.argv[2]])" "$1" "$2"; }
score --task claim_score >r1.json || { bad "score claim_score"; cat r1.json; }
cat r1.json
n1=$(field r1.json items)
[ "$n1" -gt 1000 ] && ok "first run scores every live claim ($n1)" || bad "first run: $n1 items"
[ "$(q "SELECT count(*) FROM donto_sheaf_score WHERE task = 'claim_score'")" = $((2 * n1)) ] && ok "2 rows per item" || bad "row count"
bad_sum=$(q "SELECT count(*) FROM (SELECT item, sum(probability) s, min(probability) lo, max(probability) hi FROM donto_sheaf_score WHERE task = 'claim_score' GROUP BY item) t WHERE abs(s - 1) > 1e-5 OR lo < 0 OR hi > 1")
[ "$bad_sum" = 0 ] && ok "probabilities in [0,1], summing to 1 per item" || bad "$bad_sum items off"
score --task claim_score >r2.json; [ "$(field r2.json items)" = 0 ] && ok "rerun with nothing changed: 0 items" || { bad "rerun"; cat r2.json; }
[ "$(q "SELECT count(*) FROM donto_sheaf_score_run WHERE task = 'claim_score'")" = 2 ] && ok "two run rows" || bad "run rows"
# change: two new claims (vectors copied from a live one), one retraction
src=$(q "SELECT statement_id FROM donto_statement WHERE context = 'donto:default' AND predicate <> 'owl:sameAs' ORDER BY statement_id LIMIT 1")
ret=$(q "SELECT statement_id FROM donto_statement WHERE context = 'donto:default' AND predicate <> 'owl:sameAs' ORDER BY statement_id DESC LIMIT 1")
sleep 0.01
for id in 00000000-0000-4000-8000-00000000000a 00000000-0000-4000-8000-00000000000b; do
  if [ "$MODE" = pg ]; then
    q "INSERT INTO donto_statement (statement_id, subject, predicate, object_iri) VALUES ('$id', 'ex:e1', 'ex:p1', 'ex:e2')"
  else
    q "INSERT INTO donto_statement (statement_id, subject, predicate, object_iri, tx_from) VALUES ('$id', 'ex:e1', 'ex:p1', 'ex:e2', CAST(strftime('%s','now') AS INTEGER) * 1000 - 5)"
  fi
  q "CREATE TEMP TABLE t AS SELECT * FROM vectors WHERE target = 0 AND item_id = '$src'; UPDATE t SET item_id = '$id'; INSERT INTO vectors SELECT * FROM t; DROP TABLE t"
done
if [ "$MODE" = pg ]; then q "UPDATE donto_statement SET tx_time = tstzrange(lower(tx_time), now()) WHERE statement_id = '$ret'"
else q "UPDATE donto_statement SET tx_until = CAST(strftime('%s','now') AS INTEGER) * 1000 - 1 WHERE statement_id = '$ret'"; fi
sleep 0.01
score --task claim_score >r3.json; cat r3.json
n3=$(field r3.json items)
[ "$n3" -ge 2 ] && [ "$n3" -lt 200 ] && ok "after 2 additions and 1 retraction: $n3 items rescored" || bad "rescored $n3"
[ "$(q "SELECT count(*) FROM donto_sheaf_score WHERE task = 'claim_score' AND item IN ('00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b')")" = 4 ] \
  && ok "the new claims are scored" || bad "new claims not scored"
[ "$(q "SELECT count(*) FROM donto_sheaf_score WHERE task = 'claim_score'")" = $((2 * n1 + 4)) ] && ok "no duplicate rows (replaced)" || bad "duplicates"
# arg_link with proposals (a 5-epoch model is near uniform: a low --propose-min makes some)
score --task arg_link --propose-min 0.18 >a1.json || { bad "score arg_link"; cat a1.json; }
cat a1.json
na=$(field a1.json items) np=$(field a1.json arguments_proposed)
[ "$na" -gt 0 ] && ok "arg_link: $na pairs" || bad "arg_link items"
bad_sum=$(q "SELECT count(*) FROM (SELECT item, item2, sum(probability) s FROM donto_sheaf_score WHERE task = 'arg_link' GROUP BY item, item2) t WHERE abs(s - 1) > 1e-5")
[ "$bad_sum" = 0 ] && ok "arg_link probabilities sum to 1 per pair" || bad "arg_link sums"
[ "$np" -gt 0 ] && [ "$(q "SELECT count(*) FROM donto_argument WHERE context = 'sheaf:model-al'")" = "$np" ] \
  && ok "$np proposed arguments under sheaf:model-al" || bad "proposals: $np"
score --task arg_link >a2.json; [ "$(field a2.json items)" = 0 ] && ok "arg_link rerun: 0 items" || bad "arg_link rerun"
"$B" export --db "$DB" --seed arguments --as-of 2025-06-01 --model planted-16 --quiet --out g2.json || bad "export after scoring"
q "SELECT source_statement_id || ' ' || target_statement_id FROM donto_argument WHERE context = 'sheaf:model-al'" >prop.txt
"$PY" - g2.json prop.txt <<'PY' && ok "proposed arguments absent from a new export's graph and labels" || bad "a proposal leaked into the export"
import json, sys
g = json.load(open(sys.argv[1]))
props = set()
for l in open(sys.argv[2]):
    a, b = l.split()
    props.add(frozenset(("claim:" + a, "claim:" + b)))
rel = {"supports", "rebuts", "undercuts", "undermines", "qualifies"}
for e in g["edges"]:
    if e["type"] in rel and frozenset((e["src"], e["dst"])) in props: sys.exit("edge %r" % e)
for t in g["tasks"]:
    for p in t.get("pairs", []):
        if p[2] != "none" and frozenset(p[:2]) in props and t["name"] == "arg_link":
            sys.exit("label %r" % p)
print("  export: %d sheaf-written arguments filtered" % g["export"]["filtered"]["sheaf_written_arguments"])
PY
# identity: entity pairs, each not already joined by an identity statement
"$B" export --db "$DB" --seed identity $X --out gi.json || exit 1
"$B" train --data gi.json --task identity --epochs 5 --split 0 --checkpoint id.json >/dev/null 2>&1 || { echo "train id failed"; exit 1; }
"$B" register id.json --db "$DB" --activate --reference "$REFCMD" >/dev/null || { echo "register id failed"; exit 1; }
score --task identity --propose-min 1.1 >i1.json || { bad "score identity"; cat i1.json; }
cat i1.json
ni=$(field i1.json items)
[ "$ni" -gt 0 ] && ok "identity: $ni entity pairs" || bad "identity items: $ni"
[ "$(q "SELECT count(DISTINCT item || ' ' || item2) FROM donto_sheaf_score WHERE task = 'identity'")" = "$ni" ] \
  && ok "identity: one set of rows per pair" || bad "identity: pairs in the table differ from items"
bad_sum=$(q "SELECT count(*) FROM (SELECT item, item2, sum(probability) s FROM donto_sheaf_score WHERE task = 'identity' GROUP BY item, item2) t WHERE abs(s - 1) > 1e-5")
[ "$bad_sum" = 0 ] && ok "identity probabilities sum to 1 per pair" || bad "identity sums: $bad_sum"
not_ent=$(q "SELECT count(*) FROM donto_sheaf_score s WHERE task = 'identity' AND (item2 IS NULL OR item = item2 OR NOT EXISTS (SELECT 1 FROM donto_statement d WHERE d.subject = s.item OR d.object_iri = s.item) OR NOT EXISTS (SELECT 1 FROM donto_statement d WHERE d.subject = s.item2 OR d.object_iri = s.item2))")
[ "$not_ent" = 0 ] && ok "identity items are pairs of two entities the substrate names" || bad "identity: $not_ent rows not entity pairs"
joined=$(q "SELECT count(*) FROM donto_sheaf_score s JOIN donto_statement d ON d.predicate = 'owl:sameAs' AND ((d.subject = s.item AND d.object_iri = s.item2) OR (d.subject = s.item2 AND d.object_iri = s.item)) WHERE s.task = 'identity'")
[ "$joined" = 0 ] && ok "no scored pair is already joined by owl:sameAs" || bad "identity: $joined scored pairs already joined"
score --task identity >i2.json; [ "$(field i2.json items)" = 0 ] && ok "identity rerun: 0 items" || bad "identity rerun"
[ $fail = 0 ] && echo "sheafscore_cli ($MODE): all ok" || echo "sheafscore_cli ($MODE): FAILED"
exit $fail
