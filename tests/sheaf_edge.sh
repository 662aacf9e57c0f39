#!/bin/sh
# donto-sheaf on edge tasks (export files version 2, docs/sheaf-export.md): a synthetic export with
# planted communities (tests/sheaf_edge_gen.py) -> train / eval / infer / sweep with --task, and
# the behaviour check: Diag-NSD learns arg_link and identity, which the features-only MLP cannot
# (the labels depend on communities that only the graph reveals). Loader errors name the field.
# usage: sheaf_edge.sh BIN GEN.py WORKDIR
set -eu
BIN=$1; GEN=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }
# field F of the JSON object in file $1
jget() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# exit 0 when the python expression $1 is true
ok() { python3 -c "import sys; sys.exit(0 if ($1) else 1)"; }

python3 "$GEN" "$W/g.json" --seed 1
NSD="--family diag --d 3 --layers 4 --hidden 16 --lr 0.03 --epochs 800 --patience 300"

# arg_link: directed, 3 classes, selected on macro-F1
"$BIN" train --data "$W/g.json" --task arg_link $NSD --checkpoint "$W/arg.ck" --json > "$W/arg_nsd.json"
"$BIN" train --data "$W/g.json" --task arg_link --family mlp --layers 2 --hidden 16 --lr 0.03 --epochs 800 \
  --patience 300 --json > "$W/arg_mlp.json"
nsd=$(jget "$W/arg_nsd.json" test_macro_f1_mean); mlp=$(jget "$W/arg_mlp.json" test_macro_f1_mean)
[ "$(jget "$W/arg_nsd.json" metric)" = macro_f1 ] || fail "arg_link's metric is macro_f1"
echo "arg_link test macro-F1: diag NSD $nsd, MLP (features only) $mlp (chance about 0.33)"
ok "$nsd > 0.8" || fail "NSD did not learn arg_link (macro-F1 $nsd)"
ok "$mlp < 0.5" || fail "the MLP learnt arg_link from features alone ($mlp): the planted structure leaks"

# identity: undirected, 2 classes, selected on ROC-AUC (the default for two classes)
"$BIN" train --data "$W/g.json" --task identity $NSD --json > "$W/id_nsd.json"
"$BIN" train --data "$W/g.json" --task identity --family mlp --hidden 16 --lr 0.03 --epochs 800 --patience 300 \
  --json > "$W/id_mlp.json"
[ "$(jget "$W/id_nsd.json" metric)" = roc_auc ] || fail "identity's metric defaults to roc_auc"
nsd=$(jget "$W/id_nsd.json" test_metric_mean); mlp=$(jget "$W/id_mlp.json" test_metric_mean)
echo "identity test ROC-AUC: diag NSD $nsd, MLP $mlp (chance 0.5)"
ok "$nsd > 0.85" || fail "NSD did not learn identity (ROC-AUC $nsd)"
ok "$mlp < 0.7" || fail "the MLP learnt identity from features alone ($mlp)"
grep -q '"test_pr_auc"' "$W/id_nsd.json" || fail "train --json: no PR-AUC for a binary task"

# eval: the checkpoint's validation macro-F1 is the training run's selected one (same forward)
"$BIN" eval --checkpoint "$W/arg.ck" --data "$W/g.json" --task arg_link --json > "$W/eval.json"
python3 - "$W/arg_nsd.json" "$W/eval.json" <<'PY' || fail "eval differs from training's evaluation"
import json, sys
t = json.load(open(sys.argv[1]))["splits"][0]
e = json.load(open(sys.argv[2]))[0]
assert e["held_out"] is True, e
assert abs(t["val_macro_f1"] - e["val_macro_f1"]) < 1e-9 and abs(t["test_macro_f1"] - e["test_macro_f1"]) < 1e-9, (t, e)
PY
"$BIN" eval --checkpoint "$W/arg.ck" --data "$W/g.json" --task arg_link | grep -q "test_macro_f1" || fail "eval prints macro-F1"

# infer: every pair (1500), or the test pairs of the split (300), with ids
"$BIN" infer --checkpoint "$W/arg.ck" --in "$W/g.json" --task arg_link --out "$W/all.jsonl"
[ "$(wc -l < "$W/all.jsonl")" -eq 1500 ] || fail "infer: expected 1500 pair lines"
"$BIN" infer --checkpoint "$W/arg.ck" --in "$W/g.json" --task arg_link --pairs test --format tsv > "$W/test.tsv"
[ "$(wc -l < "$W/test.tsv")" -eq 300 ] || fail "infer --pairs test: expected 300 lines"
[ "$(cut -f5 "$W/test.tsv" | sort -u)" = test ] || fail "infer --pairs test: sets $(cut -f5 "$W/test.tsv" | sort -u)"
python3 - "$W/all.jsonl" <<'PY' || fail "infer's predictions disagree with the labels more than training's"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert all(r["src"].startswith("claim:") and len(r["logp"]) == 3 for r in rows)
acc = sum(r["pred"] == r["label"] for r in rows if r["set"] == "test") / sum(r["set"] == "test" for r in rows)
assert acc > 0.8, acc
PY
# a checkpoint for the edge task is refused on the node... (no node task here): on the other edge task
if "$BIN" infer --checkpoint "$W/arg.ck" --in "$W/g.json" --task identity --allow-other-graph 2> "$W/e0.txt"; then
  fail "a directed 3-class decoder ran on the undirected identity task"
fi
grep -q "directed" "$W/e0.txt" || fail "unclear error: $(cat "$W/e0.txt")"

# sweep: grid over family, d, layers, hidden, lr with 2 seeds -> mean +- std of the task's metric
cat > "$W/grid.json" <<J
{"datasets": ["$W/g.json"], "task": "arg_link", "seeds": 2, "family": ["diag", "mlp"], "d": [2],
 "layers": [2], "hidden": [8], "lr": [0.03], "epochs": [60]}
J
"$BIN" sweep --grid "$W/grid.json" --out "$W/sweep.csv" 2> "$W/sweep.err"
python3 - "$W/sweep.csv" <<'PY' || fail "sweep CSV: $(cat "$W/sweep.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, rows
for r in rows:
    assert r["runs"] == "2" and r["metric"] == "macro_f1", r
    assert 0 <= float(r["test_metric_mean"]) <= 1 and float(r["test_metric_std"]) >= 0, r
PY
grep -q "^best " "$W/sweep.err" || fail "sweep names no best configuration"

# loader errors name the field
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
base = json.load(open(f"{w}/g.json"))
def bad(name, edit):
    d = json.loads(json.dumps(base))
    edit(d)
    json.dump(d, open(f"{w}/{name}.json", "w"))
bad("v1", lambda d: d.update(version=1))
bad("node", lambda d: d["tasks"][0]["pairs"][5].__setitem__(1, "claim:nope"))
bad("cls", lambda d: d["tasks"][0]["pairs"][2].__setitem__(2, "maybe"))
bad("idx", lambda d: d["tasks"][0]["splits"][0]["val"].__setitem__(0, 99999))
bad("dup", lambda d: d["tasks"][0]["splits"][0]["test"].append(d["tasks"][0]["splits"][0]["train"][0]))
bad("self", lambda d: d["tasks"][0]["pairs"][3].__setitem__(1, d["tasks"][0]["pairs"][3][0]))
bad("metric", lambda d: d["tasks"][0].update(metric="f2"))
bad("nosplits", lambda d: d["tasks"][0].pop("splits"))
PY
expect() { # file, message
  if "$BIN" train --data "$W/$1.json" --task arg_link --epochs 1 2> "$W/err.txt"; then fail "$1: accepted"; fi
  grep -qF "$2" "$W/err.txt" || fail "$1: unclear error: $(cat "$W/err.txt")"
}
expect v1 'needs "version": 2'
expect node "pairs[5][1]: unknown node 'claim:nope'"
expect cls 'pairs[2][2]: "maybe" is not a class'
expect idx "splits[0].val[0]"
expect dup "is already in train"
expect self "paired with itself"
expect metric 'tasks[0].metric must be'
# an edge task without splits: an error unless --random-splits, which draws them over the pairs (and says so)
expect nosplits 'no splits'
grep -qF -- '--random-splits' "$W/err.txt" || fail "nosplits: the error does not name --random-splits"
"$BIN" train --data "$W/nosplits.json" --task arg_link --epochs 2 --random-splits 2> "$W/err.txt" > /dev/null \
  || fail "nosplits --random-splits: $(cat "$W/err.txt")"
grep -qF "random 60/20/20 of the task's pairs" "$W/err.txt" || fail "random pair splits not said: $(cat "$W/err.txt")"
echo "sheaf_edge ok"
