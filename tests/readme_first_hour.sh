#!/bin/sh
# README.md's "Your first hour" block, run line by line (issue 16): every line
# of the fenced block after the `first-hour` marker is run from the
# repository root with `sh -c`, against the demo database `make run` leaves
# in ./donto.db; each must exit 0. Exit 77 (skipped, said so) when there is
# no demo database yet: run `make run` first.
#   tests/readme_first_hour.sh SOURCE_DIR
set -u
SRC=$1
cd "$SRC" || exit 1
if [ ! -s donto.db ] || [ ! -x build/donto-embed ]; then
    echo "readme_first_hour: SKIPPED: no ./donto.db or build/donto-embed in $SRC (run \`make run\` first)" >&2
    exit 77
fi
block=$(awk '/<!-- first-hour:/ {armed = 1; next}
             armed && /^```sh/ {inb = 1; next}
             inb && /^```/ {exit}
             inb {print}' README.md)
if [ -z "$block" ]; then
    echo "readme_first_hour: FAIL: no first-hour block in README.md" >&2
    exit 1
fi
n=0 fails=0
tmp=$(mktemp)
# One line per command (no continuation lines in that block, by design).
printf '%s\n' "$block" > "$tmp.lines"
while IFS= read -r line; do
    case "$line" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    start=$(date +%s)
    if timeout 300 sh -c "$line" > "$tmp" 2>&1 < /dev/null; then
        echo "ok   [$(( $(date +%s) - start )) s] $line"
    else
        rc=$?
        echo "FAIL [exit $rc] $line"
        sed 's/^/     | /' "$tmp" | tail -n 15
        fails=$((fails + 1))
    fi
done < "$tmp.lines"
rm -f "$tmp" "$tmp.lines"
echo "readme_first_hour: $n lines, $fails failed"
[ "$fails" -eq 0 ] && [ "$n" -gt 0 ]
