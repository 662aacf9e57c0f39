#!/bin/sh
# A newcomer's first hour (issue 16), through the real binary:
#   db         a wrong --db path or an unmigrated database: every command that
#              reads a database says so (and how to migrate) and creates
#              nothing; serve refuses to start on one; /health names the schema
#   db_pg      the same for an unmigrated PostgreSQL database (DONTO_TEST_PG_URL,
#              run through scripts/pg-test-server)
#   retract    an unknown id is an error, an already retracted one is said so
#              (retract_pg: on PostgreSQL)
#   recall     recall finds the model of the stored vectors without --model (or
#              says to pass --model, naming what it tried); GET /recall answers
#              a client's bad query (invalid UTF-8, empty, bad k) with 4xx
#   make       make run keeps its data in ./donto.db as the README's examples
#              expect, installs no test-only packages, prints no "Entering
#              directory" lines; the README names status and the admin prompt
#   worker     permanent setup errors (unresolvable host, untrusted
#              certificate, revoked token) stop the worker at once with the
#              cause; a refused connection is retried for --start-retry only
# usage: first_hour.sh SECTION DONTO_EMBED WORKDIR MODEL_DIR (make: SOURCE_DIR)
set -u
SECTION=$1; EMBED=$2; W=$3; MODEL=$4
rm -rf "$W"; mkdir -p "$W"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
spid=
cleanup() { [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; return 0; }
trap cleanup EXIT

# run CMD...: stdout in $W/out, stderr in $W/err, status in $rc (bounded).
run() { timeout 20 "$@" > "$W/out" 2> "$W/err"; rc=$?; }
# refused PATTERN CMD...: exits non-zero (not a timeout), stderr holds PATTERN
refused() {
    pat=$1; shift
    run "$@"
    { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; } || fail "$*: exit $rc, expected an error ($(cat "$W/err"))"
    grep -qF -- "$pat" "$W/err" || fail "$*: stderr '$(cat "$W/err")' lacks '$pat'"
}
ok() { run "$@"; [ "$rc" -eq 0 ] || fail "$*: exit $rc ($(cat "$W/err"))"; }

# serve_start ARGS...: start serve on a free loopback port; sets $spid, $port
serve_start() {
    "$EMBED" serve --listen 127.0.0.1:0 "$@" 2> "$W/serve.log" &
    spid=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/.*(port \([0-9]*\)).*/\1/p' "$W/serve.log" | head -n1)
        [ -n "$port" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || { fail "serve $*: did not start: $(cat "$W/serve.log")"; spid=; }
}
serve_stop() { cleanup; spid=; }
# get PATH [TOKEN]: body in $W/body, status in $code
get() {
    code=$(curl -sS --noproxy '*' -o "$W/body" -w '%{http_code}' ${2:+-H "Authorization: Bearer $2"} \
        "http://127.0.0.1:$port$1")
}

claims() {
    printf '%s\n' '{"id": "c000001", "text": "a dog is a kind of animal", "subject": "dog", "predicate": "hypernym", "object": "animal"}' \
        '{"id": "c000002", "text": "a wheel is a part of a car", "subject": "wheel", "predicate": "part_holonym", "object": "car"}' \
        '{"id": "c000003", "text": "joy is a feeling of great happiness", "subject": "joy", "predicate": "hypernym", "object": "feeling"}' \
        > "$W/claims.jsonl"
}

case $SECTION in
db)
    nope="$W/nope.db"
    # Commands that read a database never create one.
    refused "$nope does not exist" "$EMBED" status --db "$nope"
    refused "$nope does not exist" "$EMBED" status --db "$nope" --json
    refused "$nope does not exist" "$EMBED" token list --db "$nope"
    refused "$nope does not exist" "$EMBED" token add alice --db "$nope"
    refused "$nope does not exist" "$EMBED" enqueue --db "$nope"
    refused "$nope does not exist" "$EMBED" retract --db "$nope" c000001
    refused "$nope does not exist" "$EMBED" recall --db "$nope" --model "$MODEL" "a dog"
    refused "donto-embed migrate --db $nope" "$EMBED" status --db "$nope"
    refused "--migrate" "$EMBED" serve --db "$nope" --listen 127.0.0.1:0
    [ -e "$nope" ] && fail "a command created $nope"
    # An existing file that is not migrated (what the old commands left behind).
    empty="$W/empty.db"
    : > "$empty"
    refused "$empty is not migrated" "$EMBED" status --db "$empty"
    refused "donto-embed migrate --db $empty" "$EMBED" status --db "$empty"
    refused "is not migrated" "$EMBED" token add alice --db "$empty"
    refused "is not migrated" "$EMBED" enqueue --db "$empty"
    refused "is not migrated" "$EMBED" recall --db "$empty" --model "$MODEL" "a dog"
    refused "is not migrated" "$EMBED" serve --db "$empty" --listen 127.0.0.1:0
    refused "--migrate" "$EMBED" serve --db "$empty" --listen 127.0.0.1:0
    [ -s "$empty" ] && fail "a command wrote tables into $empty"
    # Those meant to create one do: migrate, load, serve --migrate.
    ok "$EMBED" migrate --db "$W/m.db"
    ok "$EMBED" status --db "$W/m.db"
    ok "$EMBED" token add alice --db "$W/m.db"
    claims
    ok "$EMBED" load --db "$W/l.db" "$W/claims.jsonl"
    ok "$EMBED" enqueue --db "$W/l.db"
    grep -q "enqueue: [1-9][0-9]* items queued" "$W/out" || fail "enqueue: $(cat "$W/out")"
    serve_start --db "$W/s.db" --migrate
    if [ -n "$spid" ]; then
        get /embed/health
        [ "$code" = 200 ] || fail "/health on a migrated database: $code $(cat "$W/body")"
        grep -qF '"schema"' "$W/body" || fail "/health names no schema version: $(cat "$W/body")"
        grep -qF '"ok": true' "$W/body" || grep -qF '"ok":true' "$W/body" || fail "/health: $(cat "$W/body")"
        # The database loses its last migration under the running server.
        python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("DELETE FROM donto_migrations WHERE module = ? AND version = (SELECT max(version) FROM donto_migrations WHERE module = ?)", ("store", "store")); c.commit()' "$W/s.db"
        get /embed/health
        [ "$code" = 503 ] || fail "/health on an unmigrated database: $code $(cat "$W/body")"
        grep -qF "not migrated" "$W/body" || fail "/health on an unmigrated database: $(cat "$W/body")"
        serve_stop
    fi
    ;;
db_pg)
    url=${DONTO_TEST_PG_URL:?run through scripts/pg-test-server}
    refused "is not migrated" "$EMBED" status --db "$url"
    refused "donto-embed migrate --db" "$EMBED" status --db "$url"
    refused "is not migrated" "$EMBED" token list --db "$url"
    refused "is not migrated" "$EMBED" enqueue --db "$url"
    refused "--migrate" "$EMBED" serve --db "$url" --listen 127.0.0.1:0
    ok "$EMBED" migrate --db "$url"
    ok "$EMBED" status --db "$url"
    ;;
retract|retract_pg)
    claims
    rdb="$W/r.db"
    [ "$SECTION" = retract_pg ] && rdb=${DONTO_TEST_PG_URL:?run through scripts/pg-test-server}
    ok "$EMBED" load --db "$rdb" "$W/claims.jsonl"
    ok "$EMBED" retract --db "$rdb" c000001
    grep -qF "1 of 1" "$W/out" || fail "retract: $(cat "$W/out")"
    ok "$EMBED" retract --db "$rdb" c000001
    grep -qF "already retracted" "$W/out" "$W/err" || fail "retract again: $(cat "$W/out" "$W/err")"
    refused "c999999: no such statement" "$EMBED" retract --db "$rdb" c999999
    refused "no such statement" "$EMBED" retract --db "$rdb" c000002 c999999
    grep -qF "1 of 2" "$W/out" || fail "retract of a known and an unknown id: $(cat "$W/out")"
    ;;
recall)
    claims
    db="$W/v.db"
    ok "$EMBED" load --db "$db" "$W/claims.jsonl"
    ok "$EMBED" enqueue --db "$db" --model-dir "$MODEL"
    "$EMBED" token add w --db "$db" > "$W/w.token" 2>/dev/null
    reader=$("$EMBED" token add r --role reader --db "$db" 2>/dev/null)
    serve_start --db "$db" --model "$MODEL"
    [ -n "$spid" ] || exit 1
    run "$EMBED" work --url "http://127.0.0.1:$port/embed" --token-file "$W/w.token" --model "$MODEL" --exit-when-idle
    [ "$rc" -eq 0 ] || fail "work: exit $rc: $(tail -n 5 "$W/err")"
    # GET /recall: what the client got wrong is a 4xx, never a 500.
    get '/embed/recall?q=a+dog&k=2' "$reader"
    [ "$code" = 200 ] || fail "recall: $code $(cat "$W/body")"
    get '/embed/recall?q=%FF%FEdog' "$reader"
    [ "$code" = 400 ] || fail "recall of invalid UTF-8: $code $(cat "$W/body")"
    grep -qF "UTF-8" "$W/body" || fail "recall of invalid UTF-8: $(cat "$W/body")"
    get '/embed/recall?q=caf%C3' "$reader"
    [ "$code" = 400 ] || fail "recall of a cut UTF-8 sequence: $code $(cat "$W/body")"
    get '/embed/recall?q=' "$reader"
    [ "$code" = 400 ] || fail "recall of an empty q: $code $(cat "$W/body")"
    get '/embed/recall?q=dog&k=99999999999999999999' "$reader"
    [ "$code" = 400 ] || fail "recall with a huge k: $code $(cat "$W/body")"
    get '/embed/recall?q=dog&k=100000' "$reader"
    [ "$code" = 200 ] || fail "recall with k over the cap: $code $(cat "$W/body")"
    get '/embed/recall?q=dog&target=claims' "$reader"
    [ "$code" = 400 ] || fail "recall of an unknown target: $code $(cat "$W/body")"
    serve_stop
    # Without --model: the stored vectors' model, found under ./models.
    mkdir -p "$W/here/models" "$W/bare"
    ln -s "$(cd "$MODEL" && pwd)" "$W/here/models/$(basename "$MODEL")"
    (cd "$W/here" && "$EMBED" recall --db "$db" -k 1 "a dog" > "$W/out" 2> "$W/err"); rc=$?
    [ "$rc" -eq 0 ] || fail "recall without --model: exit $rc ($(cat "$W/err"))"
    grep -qF "dog - is a kind of - animal" "$W/out" || fail "recall without --model: $(cat "$W/out")"
    # No such directory: the error says which it tried and to pass --model.
    (cd "$W/bare" && "$EMBED" recall --db "$db" "a dog" > "$W/out" 2> "$W/err"); rc=$?
    [ "$rc" -ne 0 ] || fail "recall without a model directory: exit 0"
    grep -qF -- "--model DIR" "$W/err" || fail "recall without a model directory: $(cat "$W/err")"
    grep -qF "models/all-MiniLM-L6-v2" "$W/err" || fail "recall: the path tried is not named: $(cat "$W/err")"
    (cd "$W/bare" && "$EMBED" recall --db "$db" --model-name BAAI/bge-small-en-v1.5 "a dog" > "$W/out" 2> "$W/err"); rc=$?
    [ "$rc" -ne 0 ] || fail "recall of a model with no directory: exit 0"
    grep -qF "models/bge-small-en-v1.5" "$W/err" || fail "recall: the path tried is not named: $(cat "$W/err")"
    grep -qF -- "--model DIR" "$W/err" || fail "recall: no hint to --model: $(cat "$W/err")"
    ;;
worker)
    db="$W/k.db"
    ok "$EMBED" migrate --db "$db"
    tok=$("$EMBED" token add w --db "$db" 2>/dev/null)
    # A refused connection: retried for --start-retry, then exit 1 with curl's reason.
    t0=$(date +%s)
    refused "Couldn't connect" "$EMBED" work --url http://127.0.0.1:1/embed --token "$tok" --model "$MODEL" \
        --exit-when-idle --start-retry 2
    [ $(($(date +%s) - t0)) -le 30 ] || fail "work against a refused port took $(($(date +%s) - t0)) s"
    grep -qF "no answer 0" "$W/err" && fail "work: the log says 'no answer 0': $(cat "$W/err")"
    # A host that does not resolve: permanent, at once.
    refused "resolve" "$EMBED" work --url http://no-such-host.invalid/embed --token "$tok" --model "$MODEL" --exit-when-idle
    # A certificate the worker does not trust: permanent, at once.
    openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
        -days 1 -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null || fail "openssl req failed"
    serve_start --db "$db" --tls-cert "$W/cert.pem" --tls-key "$W/key.pem"
    if [ -n "$spid" ]; then
        refused "certificate" "$EMBED" work --url "https://127.0.0.1:$port/embed" --token "$tok" --model "$MODEL" --exit-when-idle
        ok "$EMBED" work --url "https://127.0.0.1:$port/embed" --cacert "$W/cert.pem" --token "$tok" --model "$MODEL" --exit-when-idle
        serve_stop
    fi
    # A revoked token: 401 with the coordinator's message, at once.
    serve_start --db "$db"
    if [ -n "$spid" ]; then
        ok "$EMBED" token revoke w --db "$db"
        refused "HTTP 401" "$EMBED" work --url "http://127.0.0.1:$port/embed" --token "$tok" --model "$MODEL" --exit-when-idle
        grep -qF "no answer 0" "$W/err" && fail "work: the log says 'no answer 0': $(cat "$W/err")"
        serve_stop
    fi
    ;;
make)
    # `make run` and the README agree on where the data is, it installs only
    # what it needs, and make's "Entering directory" lines are off. Dry runs
    # only (-n): nothing is built or installed. MODEL_DIR is the source tree.
    src=$MODEL
    cd "$src" || exit 1
    run make -n run
    grep -q '^scripts/bootstrap *$' "$W/out" || fail "make run: no plain scripts/bootstrap: $(cat "$W/out")"
    grep -qF -- "--test" "$W/out" && fail "make run installs the test-only packages: $(grep -F -- --test "$W/out")"
    grep -q '^scripts/run-demo .* donto.db$' "$W/out" || fail "make run does not keep its data in donto.db: $(grep run-demo "$W/out")"
    grep -qF "Entering directory" "$W/out" "$W/err" && fail "make run: 'Entering directory' lines"
    run make -n test
    grep -q '^scripts/bootstrap --test$' "$W/out" || fail "make test: no scripts/bootstrap --test: $(grep bootstrap "$W/out")"
    make -p -n run 2>/dev/null | grep -q '^MAKEFLAGS.*no-print-directory' ||
        fail "make: MAKEFLAGS lacks --no-print-directory"
    grep -q 'db=${2:-donto.db}' "$src/scripts/run-demo" || fail "scripts/run-demo does not default to donto.db"
    grep -qF "out/demo.db" "$src/README.md" "$src/scripts/run-demo" && fail "out/demo.db is still named"
    for w in "build/donto-embed status" "/embed/admin" "into its prompt"; do
        grep -qF "$w" "$src/README.md" || fail "README.md does not mention '$w'"
    done
    ;;
*) echo "first_hour.sh: unknown section $SECTION" >&2; exit 2 ;;
esac
[ $fails -eq 0 ] && echo "first_hour $SECTION: all checks passed"
exit $((fails > 0))
