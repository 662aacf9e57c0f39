#!/bin/sh
# donto-sheaf register / models end to end (docs/sheaf-serving.md):
#   sheafreg_cli.sh DONTO_SHEAF PYTHON SHEAF_REF_PY WORKDIR
# A tiny checkpoint trained on texas registers through the parity gate (the reference
# run as a command); a copy given a probe by sheaf_ref.py registers with no reference at
# all; a weight changed after the probe was recorded fails the gate with its numbers; a
# changed shape, a weight beyond float32, a truncated file, a non-checkpoint are refused
# (exit 1, nothing written); activate / roll back; the database refuses a second active
# model; list/show --json parse; usage errors exit 2.
set -u
B=$1 PY=$2 REF=$3 W=$4
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 1
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect() { # expect RC DESC CMD... (stdout+stderr in out.txt)
  want=$1 desc=$2; shift 2
  "$@" >out.txt 2>&1; rc=$?
  if [ "$rc" = "$want" ]; then ok "$desc (exit $rc)"; else bad "$desc: exit $rc, expected $want"; cat out.txt; fi
}
REFCMD="$PY $REF infer"
"$B" train --data texas --epochs 5 --split 0 --checkpoint t.json >/dev/null 2>&1 || { echo "train failed"; exit 1; }
"$PY" "$REF" probe --checkpoint t.json --out tp.json || exit 1
DB=r.db
expect 1 "models list before the registry exists" "$B" models list --db $DB
grep -q -- "--migrate" out.txt && ok "says --migrate" || bad "no --migrate hint: $(cat out.txt)"
expect 0 "register t.json (reference run as a command)" "$B" register t.json --db $DB --task texas --reference "$REFCMD" --migrate
cat out.txt
grep -q "parity max abs" out.txt || bad "no parity figure"
expect 0 "register tp.json (probe in the checkpoint, no reference)" "$B" register tp.json --db $DB --task texas --reference false --json
cat out.txt
"$PY" -c "import json,sys; o=json.load(open('out.txt')); assert o['parity']['probe']['source']=='checkpoint' and o['parity_max_abs']<=1e-5, o" \
  && ok "register --json parses" || bad "register --json"
# tampering
"$PY" - <<'PY'
import json
ck = json.load(open("tp.json"))
t = ck["tensors"][0]; t["data"][0] += 0.01                      # a weight changed after the probe
json.dump(ck, open("tp_changed.json", "w"))
ck = json.load(open("t.json"))
t = ck["tensors"][0]; t["data"] = t["data"][:-1]                # a shape that is not the hyperparameters'
json.dump(ck, open("t_shape.json", "w"))
ck = json.load(open("t.json"))
s = json.dumps(ck).replace(repr(ck["tensors"][1]["data"][0]), "1e39", 1)  # beyond float32
open("t_inf.json", "w").write(s)
s = json.dumps(ck); i = s.index('"data": [') + 9
open("t_nan.json", "w").write(s[:i] + "NaN, " + s[i:])           # NaN (not JSON, as jansson and Python's strict mode say)
raw = open("t.json").read()
open("t_trunc.json", "w").write(raw[: len(raw) * 2 // 3])
open("not_ckpt.json", "w").write('{"format": "donto-sheaf-graph", "version": 2}')
PY
expect 1 "changed weight (probe recorded before)" "$B" register tp_changed.json --db $DB --task texas --reference false
cat out.txt
grep -q "parity gate failed: max abs diff" out.txt && ok "names the numbers" || bad "no numbers"
expect 1 "changed shape" "$B" register t_shape.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
expect 1 "weight beyond float32" "$B" register t_inf.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
expect 1 "NaN" "$B" register t_nan.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
expect 1 "truncated" "$B" register t_trunc.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
expect 1 "not a checkpoint" "$B" register not_ckpt.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
cat >liar.sh <<LIAR
#!/bin/sh
# the reference's outputs with one log-probability moved by 1e-3
"$PY" "$REF" infer "\$@" || exit 1
for a; do out=\$a; done
"$PY" -c "import json,sys; o=json.load(open(sys.argv[1])); o['logp'][3][1]+=1e-3; json.dump(o,open(sys.argv[1],'w'))" "\$out"
LIAR
expect 1 "a reference that disagrees by 1e-3" "$B" register t.json --name liar --db $DB --task texas --reference "sh liar.sh"; cat out.txt
grep -q "worst at node 3 class 1" out.txt && ok "names where" || bad "not the planted difference"
expect 1 "no probe, no reference" "$B" register t.json --name noref --db $DB --task texas --reference ""; cat out.txt
expect 2 "no --task for a checkpoint without one" "$B" register t.json --db $DB --name x --reference "$REFCMD"
expect 1 "duplicate name" "$B" register t.json --db $DB --task texas --reference "$REFCMD"; cat out.txt
"$B" models list --db $DB --json >list.json
"$PY" -c "import json; l=json.load(open('list.json')); assert [m['name'] for m in l]==['t','tp'] and all(m['state']=='candidate' for m in l), l" \
  && ok "nothing refused was written (2 models)" || { bad "list after refusals"; cat list.json; }
# activate, switch, roll back
expect 0 "activate t" "$B" models activate t --db $DB; cat out.txt
expect 0 "activate tp" "$B" models activate tp --db $DB --json; cat out.txt
"$PY" -c "import json; o=json.load(open('out.txt')); assert o['state']=='active' and o['previous']==1, o" && ok "tp active, previous 1" || bad "activate --json"
expect 0 "roll back: activate 1" "$B" models activate 1 --db $DB; cat out.txt
"$B" models list --db $DB --task texas >out.txt 2>&1; cat out.txt
"$PY" - "$DB" <<'PY' && ok "database refuses a second active model" || bad "second active model accepted"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
states = dict(c.execute("SELECT name, state FROM donto_sheaf_model"))
assert states == {"t": "active", "tp": "retired"}, states
try:
    c.execute("UPDATE donto_sheaf_model SET state = 'active' WHERE name = 'tp'"); c.commit()
except sqlite3.IntegrityError as e:
    print("  refused:", e); sys.exit(0)
sys.exit(1)
PY
expect 0 "show --json" "$B" models show t --db $DB --json
"$PY" -c "import json; o=json.load(open('out.txt')); assert o['hparams']['family']=='diag' and o['parity']['max_abs']<=1e-5 and 'checkpoint' not in o, o" \
  && ok "show --json parses (hparams, parity, no bytes)" || { bad "show --json"; cat out.txt; }
expect 0 "show (text)" "$B" models show tp --db $DB
expect 0 "retire t" "$B" models retire t --db $DB
expect 1 "unknown model" "$B" models activate nosuch --db $DB; cat out.txt
expect 2 "unknown subcommand" "$B" models frob --db $DB
expect 1 "a missing database" "$B" models list --db nosuch.db; cat out.txt
expect 0 "register --help" "$B" register --help
expect 0 "models --help" "$B" models --help
[ $fail = 0 ] && echo "sheafreg_cli: all ok" || echo "sheafreg_cli: FAILED"
exit $fail
