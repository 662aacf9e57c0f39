#!/bin/sh
# The sheaf export under --vectors donto (issue 20): the same planted
# substrate exported twice, once with its claims' vectors in the store's
# table vectors (--vectors own) and once after they were moved into donto's
# donto_vector (float4[]; the ledger rows in vectors left with no bytes, as
# the PostgreSQL store writes them under --vectors donto). Both exports must
# be byte-identical. Run under scripts/pg-test-server (DONTO_TEST_PG_URL):
#   sheafx_donto.sh DONTO_EMBED DONTO_SHEAF
set -eu
embed=$1 sheaf=$2
url=${DONTO_TEST_PG_URL:?run under scripts/pg-test-server}
psql=${PGBIN:-/usr/lib/postgresql/15/bin}/psql
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sheafx-donto.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
"$embed" migrate --db "$url" --vectors donto
"$sheaf" gen-substrate --db "$url" -n 3000 --model planted-16 -q
args="--db $url --seed arguments --as-of 2025-06-01 --until 2025-09-01 --model planted-16"
"$sheaf" export $args -q --out "$tmp/own.json"
# Move the claims' vectors: float32 LE bytes -> float4[] (IEEE 754 decoded
# in float8, exact), then empty the ledger's bytes.
"$psql" -v ON_ERROR_STOP=1 -q "$url" <<'SQL'
INSERT INTO donto_vector (subject_type, subject_id, model_id, model_version, dimensions, embedding)
SELECT 'statement', v.item_id::uuid, v.model, 'test', v.dims,
       (SELECT array_agg(CASE WHEN (u >> 31) = 1 THEN -1 ELSE 1 END *
                         CASE WHEN ((u >> 23) & 255) = 0 THEN (u & 8388607) * power(2::float8, -149)
                              ELSE (1 + (u & 8388607) / 8388608.0::float8) * power(2::float8, ((u >> 23) & 255) - 127) END
                         ORDER BY k)::float4[]
        FROM (SELECT k, get_byte(v.vec, 4 * k)::bigint | (get_byte(v.vec, 4 * k + 1)::bigint << 8)
                      | (get_byte(v.vec, 4 * k + 2)::bigint << 16) | (get_byte(v.vec, 4 * k + 3)::bigint << 24) AS u
              FROM generate_series(0, v.dims - 1) k) f)
FROM vectors v WHERE v.target = 0;
UPDATE vectors SET vec = '' WHERE target = 0;
SQL
n=$("$psql" -tA "$url" -c "SELECT count(*) FROM donto_vector")
"$sheaf" export $args -q --vectors donto --out "$tmp/donto.json"
cmp "$tmp/own.json" "$tmp/donto.json"
echo "sheafx_donto: $n claim vectors read from donto_vector, export byte-identical ($(wc -c <"$tmp/own.json") bytes)"
