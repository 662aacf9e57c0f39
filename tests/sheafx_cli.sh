#!/bin/sh
# donto-sheaf export / gen-substrate through the real binary: bad input is
# one clear line on stderr and exit 2 (usage) or 1 (runtime); a failed
# export leaves no output file; a good one writes the file and a --json
# summary. Usage: tests/sheafx_cli.sh PATH/TO/donto-sheaf
set -u
B=${1:?usage: $0 donto-sheaf}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheafx_cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0 n=0
# expect NAME STATUS PATTERN -- CMD...: exit status, exactly one stderr line, matching PATTERN.
expect() {
  name=$1 want=$2 pat=$3
  shift 4
  n=$((n + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"
  got=$?
  lines=$(wc -l <"$tmp/err")
  if [ "$got" != "$want" ] || [ "$lines" != 1 ] || ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL $name: exit $got (want $want), $lines stderr lines (want 1), want /$pat/:" >&2
    sed 's/^/    /' "$tmp/err" >&2
    fails=$((fails + 1))
  else
    echo "ok   $name: exit $got: $(cat "$tmp/err")"
  fi
}
db=$tmp/g.db
"$B" gen-substrate --db "$db" --statements 2000 --quiet || { echo "gen-substrate failed" >&2; exit 1; }
X="$B export --db $db --model planted-16 --until 2025-09-01"
expect unknown-seed 2 "seed: 'everything' is not one of" -- $X --seed everything --as-of 2025-06-01
expect no-seed 2 "seed is required" -- $X --as-of 2025-06-01
expect no-as-of 2 "as-of is required" -- $X --seed arguments
expect bad-time 2 "as-of: 'June': expected" -- $X --seed arguments --as-of June
expect future-as-of 2 "is in the future" -- "$B" export --db "$db" --seed arguments --as-of 2999-01-01
expect until-before 2 "until must be later" -- $X --seed arguments --as-of 2025-10-01
expect json-stdout 2 "json needs --out" -- $X --seed arguments --as-of 2025-06-01 --json
expect no-db 1 "does not exist\|not migrated\|no such" -- "$B" export --db "$tmp/none.db" --seed arguments --as-of 2025-06-01
expect empty-graph 1 "empty graph" -- $X --seed arguments --as-of 2020-01-01 --out "$tmp/empty.json"
n=$((n + 1)); if [ -e "$tmp/empty.json" ] || [ -e "$tmp/empty.json.tmp" ]; then echo "FAIL a failed export left a file" >&2; fails=$((fails + 1)); else echo "ok   failed export leaves no file"; fi
expect no-vectors 1 "model 'other' has no vectors" -- "$B" export --db "$db" --seed arguments --as-of 2025-06-01 --until 2025-09-01 --model other
expect replant 1 "has statements already" -- "$B" gen-substrate --db "$db" --quiet
expect stamp-no-rewrite 2 "add --rewrite" -- "$B" stamp-history --db "$db" --as-of 2025-06-01 --until 2025-09-01
expect stamp-future 2 "is in the future" -- "$B" stamp-history --db "$db" --as-of 2025-06-01 --until 2999-01-01 --rewrite
# A good export: exit 0, the file, a JSON summary.
n=$((n + 1))
if $X --seed frontier --as-of 2025-06-01 --out "$tmp/g.json" --json --quiet >"$tmp/sum" 2>"$tmp/err" &&
   grep -q '"claims_per_s"' "$tmp/sum" && grep -q '"version":2' "$tmp/g.json" && [ ! -s "$tmp/err" ]; then
  echo "ok   good export: $(cut -c1-120 "$tmp/sum")"
else
  echo "FAIL good export" >&2; cat "$tmp/err" >&2; fails=$((fails + 1))
fi
echo "sheafx_cli: $n checks, $fails failed"
[ $fails = 0 ]
