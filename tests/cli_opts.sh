#!/bin/sh
# The command lines' option checks (include/donto/opt.h) through the real binaries: a bad
# value, an unknown option or a missing value exits 2 with one line on stderr that names the
# option (and the bounds) and points to --help, before anything is opened or loaded; every
# command's --help exits 0. usage: cli_opts.sh DONTO_EMBED DONTO_SHEAF WORKDIR
set -u
EMBED=$1; SHEAF=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# usage_error PATTERN CMD...: exit 2, exactly one line on stderr holding PATTERN and the hint
usage_error() {
    pat=$1; shift
    "$@" > "$W/out" 2> "$W/err"; rc=$?
    [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2 ($(cat "$W/err"))"
    [ "$(wc -l < "$W/err")" -eq 1 ] || fail "$*: expected one line on stderr, got: $(cat "$W/err")"
    grep -qF -- "$pat" "$W/err" || fail "$*: '$(cat "$W/err")' lacks '$pat'"
    grep -qF -- "(see --help)" "$W/err" || fail "$*: no hint to --help: $(cat "$W/err")"
}

usage_error "--threads: 0 is out of range (1..1024)" "$EMBED" embed --model "$W/none" --threads 0
usage_error "--threads: 'abc' is not a whole number" "$EMBED" embed --model "$W/none" --threads abc
usage_error "--batch-tokens: 99999999999999999999 is out of range" "$EMBED" embed --model "$W/none" --batch-tokens 99999999999999999999
usage_error "--format: 'xml' is not one of jsonl|npy|f32" "$EMBED" embed --model "$W/none" --format xml
usage_error "--gpu: 'x' is not a whole number (or all)" "$EMBED" embed --model "$W/none" --gpu x
usage_error "unknown option '--bogus'" "$EMBED" embed --model "$W/none" --bogus
usage_error "--model needs a value" "$EMBED" embed --model
usage_error "--model is required" "$EMBED" embed
usage_error "-k: 0 is out of range (1..1000)" "$EMBED" recall -k 0 query
usage_error "-k: 10001 is out of range (1..10000)" "$EMBED" search -k 10001 --model m --vectors v --texts t q
usage_error "--threads: 2000 is out of range (1..1024)" "$EMBED" serve --db "$W/q.db" --threads 2000
usage_error "--lease-ttl: '1h' is not a whole number" "$EMBED" serve --db "$W/q.db" --lease-ttl 1h
usage_error "unexpected argument 'x'" "$EMBED" migrate --db "$W/q.db" x
usage_error "--role: 'king' is not one of contributor|reader|analyst|admin" "$EMBED" token add x --role king --db "$W/q.db"
usage_error "-n: 'abc' is not a whole number" "$EMBED" work -n abc --model m --url http://x --token t
usage_error "--idle-sleep: -1 is out of range (0..86400)" "$EMBED" work --idle-sleep -1 --model m --url http://x --token t
usage_error "--timeout: 0.5 is out of range (1..86400)" "$EMBED" work --timeout 0.5 --model m --url http://x --token t
EMBED_N=0 usage_error "EMBED_N: 0 is out of range" "$EMBED" work --model m --url http://x --token t
usage_error "--limit: -5 is out of range" "$EMBED" wordnet --db "$W/q.db" --limit -5
usage_error "--batch: 0 is out of range" "$EMBED" enqueue --db "$W/q.db" --batch 0
usage_error "--target: 'claims' is not one of" "$EMBED" enqueue --db "$W/q.db" --target claims
usage_error "--format: 'csv' is not one of" "$EMBED" load --db "$W/q.db" --format csv x.jsonl
usage_error "--repo needs a value" "$EMBED" model fetch --repo=
usage_error "unknown option '--bogus'" "$EMBED" model fetch --bogus
usage_error "--isa: 'avx1024' is not one of auto|portable|avx2|avxvnni|avx512|avx512vnni|avx512bf16" "$EMBED" embed --model "$W/none" --isa avx1024
EMBED_ISA=sse usage_error "EMBED_ISA: 'sse' is not one of" "$EMBED" work --model m --url http://x --token t
# A kernel set the CPU lacks is refused before anything loads, naming what the CPU has (on a CPU
# that runs every set there is nothing to refuse).
"$EMBED" embed --model "$W/none" --isa avx512bf16 > "$W/out" 2> "$W/err"
if grep -qF "which this CPU lacks" "$W/err"; then
    for c in embed recall search work serve; do
        case $c in
        embed) set -- embed --model "$W/none" ;;
        recall) set -- recall --db "$W/q.db" --model "$W/none" query ;;
        search) set -- search --model "$W/none" --vectors v --texts t q ;;
        work) set -- work --model "$W/none" --url http://x --token t ;;
        serve) set -- serve --db "$W/q.db" --model "$W/none" ;;
        esac
        usage_error "--isa avx512bf16: kernel set avx512bf16 needs" "$EMBED" "$@" --isa avx512bf16
        grep -qF "which this CPU lacks (it has: " "$W/err" || fail "$c --isa: $(cat "$W/err")"
    done
else
    echo "SKIP --isa refusal: this CPU runs avx512bf16"
fi

usage_error "--seed: -1 is out of range (0..9223372036854775807)" "$SHEAF" train --data texas --seed -1
usage_error "--epochs: '1.5' is not a whole number" "$SHEAF" train --data texas --epochs 1.5
usage_error "--d: 0 is out of range" "$SHEAF" train --data texas --d 0
usage_error "--lr: 'nan' is not a finite number" "$SHEAF" train --data texas --lr nan
usage_error "--dropout: 2 is out of range (must be >= 0 and < 1)" "$SHEAF" train --data texas --dropout 2
usage_error "--family: unknown family 'transformer'" "$SHEAF" train --data texas --family transformer  # mlp is a family (the baseline without the graph)
usage_error "--split: 'one' is not a whole number (or all)" "$SHEAF" train --data texas --split one
usage_error "--data is required" "$SHEAF" train
usage_error "--threads: 'abc' is not a whole number" "$SHEAF" eval --checkpoint c.json --data texas --threads abc
usage_error "--threads: 'abc' is not a whole number" "$SHEAF" infer --checkpoint c.json --in texas --threads abc
usage_error "--format: 'xml' is not one of jsonl|tsv" "$SHEAF" infer --checkpoint c.json --in texas --format xml
usage_error "--hidden: 0 is out of range" "$SHEAF" sweep --grid g.json --hidden 0

# --help: exit 0, on stdout, and it lists the options the checks above used
for c in embed search recall serve migrate status token work load wordnet enqueue retract; do
    "$EMBED" $c --help > "$W/help" 2> "$W/err" || fail "$c --help: exit $?"
    grep -q -- "--help" "$W/help" || fail "$c --help lacks --help: $(cat "$W/help")"
done
"$EMBED" model fetch --help > "$W/help" || fail "model fetch --help"
for c in train eval infer sweep; do
    "$SHEAF" $c --help > "$W/help" 2> "$W/err" || fail "sheaf $c --help: exit $?"
    grep -q -- "--threads" "$W/help" || fail "sheaf $c --help lacks --threads"
done
"$SHEAF" train --help > "$W/help"
for o in family orth d layers hidden add-lp add-hp no-left-weights no-right-weights no-edge-weights \
         second-linear gen-eps lr weight-decay sheaf-decay input-dropout dropout epochs patience stop seed \
         data data-dir task split checkpoint log json quiet; do
    grep -q -- "--$o\b" "$W/help" || fail "train --help lacks --$o"
done
[ "$fails" -eq 0 ] || { echo "cli_opts: $fails failure(s)" >&2; exit 1; }
echo "cli_opts ok"
