#!/bin/sh
# donto-sheaf train refuses what cannot work before it trains: a checkpoint path it cannot write,
# and nonsense values (lr <= 0, epochs 0, dropout 1, gen-eps -1, patience 0), exit 2 naming the
# option; sweep grids get the same bounds. usage: sheaf_train_checks.sh BIN DATA_DIR WORKDIR
set -eu
BIN=$1; DATA=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*" >&2; exit 1; }
T="train --data texas --data-dir $DATA --family diag --d 2 --hidden 4"

# an unwritable checkpoint is found before training (no per-split line), exit 1, named
for ck in "$W/no/such/dir/t.json" "$W"; do
  rc=0; "$BIN" $T --epochs 200 --checkpoint "$ck" > "$W/o.txt" 2> "$W/e.txt" || rc=$?
  [ $rc -eq 1 ] || fail "unwritable checkpoint $ck: exit $rc, expected 1"
  if grep -q "^split 0:" "$W/e.txt"; then fail "checkpoint $ck checked only after training: $(cat "$W/e.txt")"; fi
  grep -q "$ck" "$W/e.txt" && grep -q "checkpoint" "$W/e.txt" || fail "unclear error: $(cat "$W/e.txt")"
done
# a writable one: the check leaves no file behind when training then fails, and an existing file
# is not truncated by the check
echo keep > "$W/exists.json"
"$BIN" $T --epochs 2 --split 99 --checkpoint "$W/new.json" 2> /dev/null && fail "split 99 accepted"
[ ! -e "$W/new.json" ] || fail "the writability check left $W/new.json behind"
"$BIN" $T --epochs 2 --split 99 --checkpoint "$W/exists.json" 2> /dev/null && fail "split 99 accepted"
[ "$(cat "$W/exists.json")" = keep ] || fail "the writability check truncated an existing file"

# option bounds: exit 2, the option named
for bad in "--lr 0" "--lr -1" "--epochs 0" "--dropout 1" "--input-dropout 1" "--gen-eps -1" "--patience 0" \
           "--weight-decay -1" "--sheaf-decay -1" "--hidden 0" "--d 0" "--layers 0"; do
  opt=${bad%% *}
  rc=0; "$BIN" $T --epochs 2 $bad > /dev/null 2> "$W/e.txt" || rc=$?
  [ $rc -eq 2 ] || fail "train $bad: exit $rc, expected 2 ($(cat "$W/e.txt"))"
  grep -q -- "$opt" "$W/e.txt" || fail "train $bad: the message names no $opt: $(cat "$W/e.txt")"
done
# values just inside the bounds still train
"$BIN" $T --epochs 2 --lr 1e-6 --dropout 0.99 --input-dropout 0.99 --patience 1 --quiet > /dev/null || fail "edge values refused"
"$BIN" $T --family general --epochs 2 --gen-eps -0.5 --quiet > /dev/null || fail "--gen-eps -0.5 refused"

# sweep grids go through the same table
echo '{"datasets": ["texas"], "lr": [0.01, 0]}' > "$W/grid.json"
rc=0; "$BIN" sweep --grid "$W/grid.json" --data-dir "$DATA" --epochs 2 > /dev/null 2> "$W/e.txt" || rc=$?
[ $rc -ne 0 ] && grep -q "lr" "$W/e.txt" || fail "sweep grid lr 0 accepted (exit $rc): $(cat "$W/e.txt")"
echo "sheaf_train_checks ok"
