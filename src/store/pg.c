/* donto-accel: the PostgreSQL store backend (libpq, one connection per
 * handle; several coordinators may share one database).
 *
 * Leasing is one statement, hence one short transaction:
 *   WITH c AS (SELECT ctid FROM queue WHERE <ready> ORDER BY .. LIMIT n
 *              FOR UPDATE SKIP LOCKED)
 *   UPDATE queue q SET lease_owner, lease_id = nextval, lease_expires
 *   WHERE q.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING ..
 * SKIP LOCKED makes concurrent leasers pass over each other's rows instead of
 * queueing behind them, and a row committed by another leaser in between is
 * re-checked against <ready> before it is locked, so no item is leased twice.
 * (The "WHERE id IN (SELECT .. LIMIT n FOR UPDATE)" form is not used: the
 * planner may run the sub-select more than once and lease more than n. The
 * CTE here runs once; ARRAY() reads its result.)
 * The rows are found again by ctid, a Tid Scan, not by joining c on the
 * primary key: once the statement is prepared, PostgreSQL may switch to a
 * generic plan, and the generic plan of that join is a hash join over a
 * sequential scan of the whole queue (100 ms a lease at 100k queued items,
 * 2.4 s at 3M). A ctid is stable here: the row is locked by this statement
 * until it commits. Should a row be released by another worker between this
 * statement's snapshot and its lock, the version the ctid names and the one
 * the snapshot sees differ, and the UPDATE leaves the row alone: a shorter
 * batch this time, never an item leased twice.
 *
 * ready = lease_expires <= now, where never-leased and released items carry
 * lease_expires = 0: fresh and expired items are one index range, so a lease
 * walks the (target, lease_expires) index and stops after n rows; an expired
 * lease needs no reclaim transaction. A lease for any target walks the
 * targets in order (claim, predicate, entity, memory_chunk), one statement
 * per target until n items are leased; it is one index, not two, because
 * every leased row is rewritten with a new lease_expires and so costs an
 * entry in each index on that column (migration 6 dropped the second one).
 *
 * Vectors in donto's table (a handle set to DONTO_VECTORS_DONTO, store.h,
 * docs/substrate.md): a claim's embedding is upserted into donto_vector in
 * the submit's one statement (a float4[] parameter in binary, sliced per
 * item), its row in `vectors` stays as the ledger with an empty vec, and the
 * reads (Q_*_D) join donto_vector for ledger rows without bytes. Verdicts,
 * fencing and counts stay on the queue and the ledger, unchanged. The table
 * is checked once per handle before the first use (pg_vectors_check).
 *
 * Every statement is parameterized and prepared once per connection. */
#include "store_int.h"

#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

enum {
    Q_LEASE, Q_SUB_LOCK, Q_SUB_VEC, Q_MODEL_GET, Q_MODEL_ADD,
    Q_SUB_WRITE, Q_CONTRIB, Q_MINUTE, Q_SERIES, Q_MIN_PRUNE, Q_RELEASE, Q_REPORT, Q_STATS_VEC, Q_STATS_QUEUE,
    Q_SINCE, Q_CONTRIB_LIST, Q_REPORTS, Q_TOK_ADD, Q_TOK_CHECK, Q_TOK_REVOKE, Q_TOK_LIST,
    Q_MIG_HAS, Q_MIG_ADD, Q_VEC_MARK, Q_VEC_PAGE, Q_REPORT_PRUNE, Q_EXTEND, Q_CHECK_VEC, Q_CHECK_TOK,
    Q_SUSP_WITHDRAW, Q_SUSP_RELEASE, Q_SUSP_TOK, Q_SUSP_REPORT, Q_UNSUSP,
    Q_SUB_WRITE_D, Q_VEC_MARK_D, Q_VEC_PAGE_D, Q_SUSP_WITHDRAW_D, Q_DV_COLS, Q_DV_KEY, Q_N
};

/* A token's trust record, in the order trust_cols() reads it. */
#define TRUST_COLS "suspended, streak, checks, failed, withdrawn, suspended_at, reason"

/* Vectors in donto's table (DONTO_VECTORS_DONTO, store.h): a ledger row of
 * `vectors` whose vec is empty has its embedding in donto_vector, under
 * ('statement', item_id::uuid, model). The cast is guarded by the same test
 * (CASE), so no plan can apply it to another row's id. */
#define DV_JOIN(V, D)                                                                                \
    D ".subject_type = 'statement' AND " D ".subject_id = (CASE WHEN octet_length(" V ".vec) = 0 THEN " \
    V ".item_id::uuid END) AND " D ".model_id = " V ".model"

/* The accepted items of a submit leave the queue and land in `vectors`; the
 * queue row's text goes with them. Shared by both layouts. */
#define SUB_DEL                                                                                    \
    "del AS (DELETE FROM queue q USING u WHERE q.target = u.t AND "                                \
    "q.item_id = u.i AND q.model = u.m RETURNING q.target, q.item_id, q.model, q.text) "
#define SUB_INSERT                                                                                 \
    "INSERT INTO vectors (target, item_id, model, dims, vec, contributor, "                        \
    "lease_id, created, token, verified, text) SELECT u.t, u.i, u.m, u.d, u.v, $7, u.l, $8, "       \
    "$9::text, CASE WHEN $9::text IS NULL THEN 1 ELSE 0 END, del.text FROM u LEFT JOIN del "       \
    "ON del.target = u.t AND del.item_id = u.i AND del.model = u.m "                               \
    "ON CONFLICT (target, item_id, model) DO UPDATE SET dims = EXCLUDED.dims, "                    \
    "vec = EXCLUDED.vec, contributor = EXCLUDED.contributor, "                                     \
    "lease_id = EXCLUDED.lease_id, created = EXCLUDED.created, token = EXCLUDED.token, "           \
    "verified = EXCLUDED.verified, text = EXCLUDED.text"

#define LEASE_SQL                                                                                \
    "WITH c AS (SELECT ctid FROM queue WHERE target = $5 AND lease_expires <= $1 "               \
    "ORDER BY lease_expires LIMIT $2 FOR UPDATE SKIP LOCKED) "                                   \
    "UPDATE queue q SET lease_owner = $3, lease_id = nextval('lease_seq'), lease_expires = $4, " \
    "attempts = q.attempts + 1 WHERE q.ctid = ANY(ARRAY(SELECT ctid FROM c)) "                   \
    "RETURNING q.target, q.item_id, q.model, q.text, q.lease_id"

static const struct {
    const char *sql;
    int nparams;
} SQL[Q_N] = {
    [Q_LEASE] = {LEASE_SQL, 5},
    /* Every queue row of a submit batch, locked in key order: a submit and a
     * lease (or another submit) of the same row are serialized, the verdict
     * is taken on the row as it is now, and two submits cannot deadlock. */
    [Q_SUB_LOCK] = {"SELECT u.ord, q.model, q.lease_owner, q.lease_id, q.text FROM "
                    "unnest($1::smallint[], $2::text[], $3::text[]) WITH ORDINALITY "
                    "AS u(t, i, m, ord) JOIN queue q ON q.target = u.t AND q.item_id = u.i "
                    "AND (u.m IS NULL OR q.model = u.m) "
                    "ORDER BY q.target, q.item_id, q.model FOR UPDATE OF q",
                    3},
    [Q_SUB_VEC] = {"SELECT contributor, lease_id FROM vectors WHERE target = $1 AND item_id = $2 "
                   "AND ($3::text IS NULL OR model = $3) ORDER BY "
                   "(lease_id IS NOT DISTINCT FROM $4::bigint) DESC, "
                   "(contributor IS NOT DISTINCT FROM $5::text) DESC LIMIT 1",
                   5},
    [Q_MODEL_GET] = {"SELECT dims FROM models WHERE name = $1", 1},
    [Q_MODEL_ADD] = {"INSERT INTO models (name, dims) VALUES ($1, $2) ON CONFLICT DO NOTHING", 2},
    /* Accept = leave the queue and land in vectors: one statement for the
     * batch (a data-modifying CTE always runs to completion). */
    [Q_SUB_WRITE] = {"WITH u AS (SELECT * FROM unnest($1::smallint[], $2::text[], $3::text[], "
                     "$4::int[], $5::bytea[], $6::bigint[]) AS u(t, i, m, d, v, l)), " SUB_DEL SUB_INSERT,
                     9},
    /* The same under donto's layout: items sent with an empty vec (claims
     * with a uuid id) also go to donto_vector, their floats sliced from one
     * float4[] ($11, at offsets $10), upserted on donto's UNIQUE key, in the
     * same statement (a data-modifying CTE always runs to completion). */
    [Q_SUB_WRITE_D] = {"WITH u AS (SELECT * FROM unnest($1::smallint[], $2::text[], $3::text[], "
                       "$4::int[], $5::bytea[], $6::bigint[], $10::int[]) AS u(t, i, m, d, v, l, o)), " SUB_DEL ", "
                       "dv AS (INSERT INTO donto_vector (subject_type, subject_id, model_id, model_version, "
                       "dimensions, embedding) SELECT 'statement', u.i::uuid, u.m, $12::text, u.d, "
                       "($11::float4[])[u.o + 1 : u.o + u.d] FROM u WHERE octet_length(u.v) = 0 "
                       "ON CONFLICT (subject_type, subject_id, model_id) DO UPDATE SET "
                       "model_version = EXCLUDED.model_version, dimensions = EXCLUDED.dimensions, "
                       "embedding = EXCLUDED.embedding, created_at = now()) " SUB_INSERT,
                       12},
    [Q_CONTRIB] = {"INSERT INTO contributors (worker_id, total, rejected, last_seen) "
                   "VALUES ($1, $2, $3, $4) ON CONFLICT (worker_id) DO UPDATE SET "
                   "total = contributors.total + EXCLUDED.total, "
                   "rejected = contributors.rejected + EXCLUDED.rejected, "
                   "last_seen = GREATEST(contributors.last_seen, EXCLUDED.last_seen)",
                   4},
    [Q_RELEASE] = {"UPDATE queue SET lease_owner = NULL, lease_expires = 0 WHERE target = $1 "
                   "AND item_id = $2 AND ($3::text IS NULL OR model = $3) AND lease_owner = $4 "
                   "AND ($5::bigint = 0 OR lease_id = $5)",
                   5},
    [Q_REPORT] = {"INSERT INTO reports (worker_id, kind, message, created, token) "
                  "VALUES ($1, $2, $3, $4, $5)",
                  5},
    [Q_STATS_VEC] = {"SELECT target, count(*) FROM vectors GROUP BY target", 0},
    [Q_STATS_QUEUE] = {"SELECT target, count(*) FILTER (WHERE lease_expires <= $1), "
                       "count(*) FILTER (WHERE lease_expires > $1) FROM queue GROUP BY target",
                       1},
    [Q_SINCE] = {"SELECT count(*) FROM vectors WHERE created >= $1", 1},
    [Q_MINUTE] = {"INSERT INTO contributor_minutes (worker_id, minute, n) VALUES ($1, $2, $3) "
                  "ON CONFLICT (worker_id, minute) DO UPDATE SET n = contributor_minutes.n + EXCLUDED.n",
                  3},
    [Q_SERIES] = {"SELECT minute, sum(n)::bigint FROM contributor_minutes WHERE minute >= $1 AND minute < $2 "
                  "GROUP BY minute",
                  2},
    [Q_MIN_PRUNE] = {"DELETE FROM contributor_minutes WHERE minute < $1", 1},
    [Q_CONTRIB_LIST] = {"SELECT c.worker_id, c.total, c.rejected, c.last_seen, coalesce(r.n, 0)::bigint "
                        "FROM contributors c LEFT JOIN (SELECT worker_id, sum(n) AS n FROM "
                        "contributor_minutes WHERE minute >= $2 GROUP BY worker_id) r "
                        "ON r.worker_id = c.worker_id ORDER BY c.total DESC, c.worker_id LIMIT $1",
                        2},
    [Q_REPORTS] = {"SELECT id, worker_id, kind, message, created FROM reports "
                   "ORDER BY created DESC, id DESC LIMIT $1",
                   1},
    [Q_TOK_ADD] = {"INSERT INTO tokens (name, hash, role, created) VALUES ($1, $2, $3, $4)", 4},
    [Q_TOK_CHECK] = {"SELECT name, role, " TRUST_COLS " FROM tokens WHERE hash = $1 AND revoked = 0", 1},
    [Q_TOK_REVOKE] = {"UPDATE tokens SET revoked = 1 WHERE name = $1 AND revoked = 0", 1},
    [Q_TOK_LIST] = {"SELECT name, role, " TRUST_COLS ", created, revoked FROM tokens ORDER BY name", 0},
    [Q_MIG_HAS] = {"SELECT 1 FROM donto_migrations WHERE module = $1 AND version = $2", 2},
    [Q_MIG_ADD] = {"INSERT INTO donto_migrations (module, version, name) VALUES ($1, $2, $3)", 3},
    /* Recall: both walk the vectors_recall index (migration 5). The page is
     * read in binary (raw bytea, no hex round trip). */
    [Q_VEC_MARK] = {"SELECT count(*), max(created) FROM vectors WHERE target = $1 AND model = $2 "
                    "AND created > $3 AND ($4::int = 0 OR verified = 1)",
                    4},
    [Q_VEC_PAGE] = {"SELECT item_id, created, dims, vec FROM vectors WHERE target = $1 AND model = $2 "
                    "AND created >= $3 AND ($4::text IS NULL OR (created, item_id) > ($3, $4::text)) "
                    "AND ($6::int = 0 OR verified = 1) ORDER BY created, item_id LIMIT $5",
                    6},
    /* The same two under donto's layout: a ledger row with an empty vec is
     * read from donto_vector, and left out when donto_vector has no row for
     * it (deleted there). */
    [Q_VEC_MARK_D] = {"SELECT count(*), max(v.created) FROM vectors v WHERE v.target = $1 AND v.model = $2 "
                      "AND v.created > $3 AND ($4::int = 0 OR v.verified = 1) AND (octet_length(v.vec) > 0 OR "
                      "EXISTS (SELECT 1 FROM donto_vector d WHERE " DV_JOIN("v", "d") "))",
                      4},
    [Q_VEC_PAGE_D] = {"SELECT v.item_id, v.created, v.dims, v.vec, d.embedding FROM vectors v "
                      "LEFT JOIN donto_vector d ON " DV_JOIN("v", "d") " WHERE v.target = $1 AND v.model = $2 "
                      "AND v.created >= $3 AND ($4::text IS NULL OR (v.created, v.item_id) > ($3, $4::text)) "
                      "AND ($6::int = 0 OR v.verified = 1) AND (octet_length(v.vec) > 0 OR d.embedding IS NOT NULL) "
                      "ORDER BY v.created, v.item_id LIMIT $5",
                      6},
    /* donto's layout, as pg_vectors_check reads it: the columns the fabric
     * writes and reads, and the UNIQUE key its upsert names. */
    [Q_DV_COLS] = {"SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE "
                   "a.attrelid = to_regclass('donto_vector') AND a.attnum > 0 AND NOT a.attisdropped",
                   0},
    [Q_DV_KEY] = {"SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = to_regclass('donto_vector') "
                  "AND i.indisunique AND i.indnkeyatts = 3 AND i.indpred IS NULL AND (SELECT array_agg(a.attname::text "
                  "ORDER BY a.attname) FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) "
                  "= ARRAY['model_id', 'subject_id', 'subject_type'])",
                  0},
    [Q_REPORT_PRUNE] = {"DELETE FROM reports WHERE created < $1", 1},
    [Q_EXTEND] = {"UPDATE queue SET lease_expires = GREATEST(lease_expires, $6) WHERE target = $1 AND "
                  "item_id = $2 AND ($3::text IS NULL OR model = $3) AND lease_owner = $4 AND "
                  "($5::bigint = 0 OR lease_id = $5)",
                  6},
    /* Trust (migration 7, docs/trust.md). */
    [Q_CHECK_VEC] = {"UPDATE vectors SET verified = 1 WHERE target = $1 AND item_id = $2 AND "
                     "($3::text IS NULL OR model = $3) AND token = $4 AND "
                     "lease_id IS NOT DISTINCT FROM $5::bigint",
                     5},
    [Q_CHECK_TOK] = {"UPDATE tokens SET checks = checks + $2, failed = failed + $3, streak = "
                     "CASE WHEN $3::bigint > 0 THEN $4::bigint ELSE streak + $4::bigint END WHERE name = $1",
                     4},
    /* One statement, so one snapshot: exactly the vectors deleted are queued
     * again. (Two statements would each take their own snapshot under READ
     * COMMITTED, and a submit committing between them would have its
     * vectors deleted without their items queued: lost.) */
    [Q_SUSP_WITHDRAW] = {"WITH w AS (DELETE FROM vectors WHERE token = $1 AND verified = 0 AND text IS NOT NULL "
                         "RETURNING target, item_id, model, text), "
                         "q AS (INSERT INTO queue (target, item_id, model, text) SELECT target, item_id, model, "
                         "text FROM w ON CONFLICT DO NOTHING) SELECT count(*) FROM w",
                         1},
    /* The same under donto's layout: a withdrawn claim's row of
     * donto_vector goes too, in the same statement. */
    [Q_SUSP_WITHDRAW_D] = {"WITH w AS (DELETE FROM vectors v WHERE token = $1 AND verified = 0 AND text IS NOT NULL "
                           "RETURNING target, item_id, model, text, vec), "
                           "dd AS (DELETE FROM donto_vector d USING w WHERE " DV_JOIN("w", "d") "), "
                           "q AS (INSERT INTO queue (target, item_id, model, text) SELECT target, item_id, model, "
                           "text FROM w ON CONFLICT DO NOTHING) SELECT count(*) FROM w",
                           1},
    [Q_SUSP_RELEASE] = {"UPDATE queue SET lease_owner = NULL, lease_expires = 0 WHERE "
                        "lease_owner >= $1 || '/' AND lease_owner < $1 || '0' AND lease_expires > $2",
                        2},
    /* A second suspension (the sweep) keeps the first one's reason and time. */
    [Q_SUSP_TOK] = {"UPDATE tokens SET reason = CASE WHEN suspended = 1 THEN reason ELSE $2 END, "
                    "suspended_at = CASE WHEN suspended = 1 THEN suspended_at ELSE $3 END, suspended = 1, "
                    "streak = 0, withdrawn = withdrawn + $4 WHERE name = $1",
                    4},
    /* Run before Q_SUSP_TOK: one report per suspension, not per sweep. */
    [Q_SUSP_REPORT] = {"INSERT INTO reports (worker_id, kind, message, created, token) "
                       "SELECT 'coordinator', 'suspended', $2, $3, $1 WHERE EXISTS "
                       "(SELECT 1 FROM tokens WHERE name = $1 AND suspended = 0)",
                       3},
    [Q_UNSUSP] = {"UPDATE tokens SET suspended = 0, reason = '', streak = 0 WHERE name = $1 AND suspended = 1",
                  1},
};

#define MODEL_CACHE 8
#define MAXP 16

typedef struct pg_store {
    donto_store base;
    PGconn *conn;
    unsigned char prepared[Q_N];
    int enq_prepared;
    char sqlstate[6]; /* of the last failure, for the retry decision */
    struct {
        char name[128];
        int dims;
    } models[MODEL_CACHE];
    int nmodels;
    int dv_ok; /* donto_vector checked (pg_vectors_check) on this handle */
} pg_store;

/* Parameters of one statement: text, except bytea sent as binary. */
typedef struct pgp {
    const char *v[MAXP];
    int len[MAXP], fmt[MAXP], n;
    char num[MAXP][24];
} pgp;

static void p_text(pgp *p, const char *s) {
    p->v[p->n] = s;
    p->len[p->n] = 0;
    p->fmt[p->n++] = 0;
}
static void p_i64(pgp *p, int64_t x) {
    snprintf(p->num[p->n], sizeof p->num[0], "%lld", (long long)x);
    p_text(p, p->num[p->n]);
}
static void p_bin(pgp *p, const void *b, size_t len) {
    p->v[p->n] = b;
    p->len[p->n] = (int)len;
    p->fmt[p->n++] = 1;
}

/* err = "postgres: <step>: <server or libpq message>"; clears res. */
/* What kind of failure the last one was (util.h), from the connection's
 * state and the SQLSTATE class: 08 connection, 53 resources, 57 operator
 * intervention (shutdown), 40 rollback (deadlock, serialization) are worth
 * a retry later; 23505 (unique) and 23P01 (exclusion) conflict with a row
 * stored; the other 23s (check, not null, foreign key) and 22 are bad data. */
donto_code donto_store_pg_code(const struct pg_conn *conn, const char *sqlstate) {
    if (PQstatus(conn) != CONNECTION_OK) return DONTO_E_UNAVAILABLE;
    const char *c = sqlstate ? sqlstate : "";
    if (!strncmp(c, "08", 2) || !strncmp(c, "53", 2) || !strncmp(c, "57", 2) || !strncmp(c, "40", 2))
        return DONTO_E_UNAVAILABLE;
    if (!strcmp(c, "23505") || !strcmp(c, "23P01")) return DONTO_E_CONFLICT;
    if (!strncmp(c, "23", 2) || !strncmp(c, "22", 2)) return DONTO_E_INVALID;
    if (!strcmp(c, "42P01")) return DONTO_E_SCHEMA; /* undefined table: not migrated */
    return DONTO_E_INTERNAL;
}

static int pg_fail(pg_store *s, donto_err *err, const char *step, PGresult *res) {
    const char *msg = res ? PQresultErrorMessage(res) : "";
    if (!msg || !*msg) msg = PQerrorMessage(s->conn);
    const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    snprintf(s->sqlstate, sizeof s->sqlstate, "%s", st ? st : "");
    size_t len = strlen(msg);
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
    donto_seterrc(err, donto_store_pg_code(s->conn, s->sqlstate), "postgres: %s: %.*s", step, (int)len, msg);
    PQclear(res);
    return -1;
}

/* Run fixed SQL text (never data: no parameters); step names it in errors. */
static int pg_cmd_step(pg_store *s, const char *sql, const char *step, donto_err *err) {
    PGresult *r = PQexec(s->conn, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return pg_fail(s, err, step, r);
    PQclear(r);
    return 0;
}

static int pg_cmd(pg_store *s, const char *sql, donto_err *err) {
    return pg_cmd_step(s, sql, sql, err);
}

static int pg_abort(pg_store *s) {
    if (PQtransactionStatus(s->conn) != PQTRANS_IDLE) {
        PGresult *r = PQexec(s->conn, "ROLLBACK");
        PQclear(r);
    }
    return -1;
}

static void quiet_notice(void *arg, const char *msg) {
    (void)arg;
    (void)msg; /* "relation already exists, skipping" and the like */
}

/* Per-connection settings; run on connect and after a reset. */
static int pg_setup(pg_store *s, donto_err *err) {
    memset(s->prepared, 0, sizeof s->prepared);
    s->enq_prepared = 0;
    PQsetNoticeProcessor(s->conn, quiet_notice, NULL);
    /* No statement may hold locks for long: a stuck one fails and its
     * transaction rolls back, and leases stay short by construction. */
    if (pg_cmd(s, "SET statement_timeout = '30s'", err)) return -1;
    /* A client that dies inside a transaction must not keep its row locks. */
    return pg_cmd(s, "SET idle_in_transaction_session_timeout = '60s'", err);
}

/* Reconnect once if the server went away between calls. */
static int pg_ready(pg_store *s, donto_err *err) {
    if (PQstatus(s->conn) == CONNECTION_OK) return 0;
    PQreset(s->conn);
    if (PQstatus(s->conn) != CONNECTION_OK) return pg_fail(s, err, "reconnect", NULL);
    return pg_setup(s, err);
}

/* Run prepared statement q (prepared on first use); NULL with err set on
 * failure. The caller PQclears the result. */
static PGresult *pg_qf(pg_store *s, int q, const pgp *p, const char *step, int binary, donto_err *err);
static PGresult *pg_q(pg_store *s, int q, const pgp *p, const char *step, donto_err *err) {
    return pg_qf(s, q, p, step, 0, err);
}

/* pg_q with the result in text (0) or binary (1) format. */
static PGresult *pg_qf(pg_store *s, int q, const pgp *p, const char *step, int binary, donto_err *err) {
    if (!s->prepared[q]) {
        char name[16];
        snprintf(name, sizeof name, "dq%d", q);
        PGresult *r = PQprepare(s->conn, name, SQL[q].sql, SQL[q].nparams, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            pg_fail(s, err, step, r);
            donto_preerr(err, "prepare");
            return NULL;
        }
        PQclear(r);
        s->prepared[q] = 1;
    }
    char name[16];
    snprintf(name, sizeof name, "dq%d", q);
    PGresult *r = PQexecPrepared(s->conn, name, p ? p->n : 0, p ? p->v : NULL,
                                 p ? p->len : NULL, p ? p->fmt : NULL, binary);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        pg_fail(s, err, step, r);
        return NULL;
    }
    return r;
}

static int64_t i64(PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}
static char *sdup(PGresult *r, int row, int col) {
    return PQgetisnull(r, row, col) ? NULL : donto_xstrdup(PQgetvalue(r, row, col));
}
static size_t changed(PGresult *r) { return (size_t)strtoull(PQcmdTuples(r), NULL, 10); }

/* Deadlock and serialization failures are worth one more try: the
 * transaction was rolled back whole, nothing half-done remains. */
static int retryable(const pg_store *s) {
    return strcmp(s->sqlstate, "40P01") == 0 || strcmp(s->sqlstate, "40001") == 0;
}

static int pg_migrate(donto_store *b, const donto_migrations *set, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    /* One transaction, under an advisory lock, so that coordinators starting
     * together apply each migration once (DDL is transactional here). The
     * first time, what a database made before the registry recorded in
     * schema_migrations is carried over (store_int.h). */
    if (pg_cmd(s, "BEGIN", err)) return -1;
    if (pg_cmd(s, "SELECT pg_advisory_xact_lock(7316001)", err)) return pg_abort(s);
    PGresult *r = PQexec(s->conn, "SELECT to_regclass('donto_migrations') IS NULL,"
                                  " to_regclass('schema_migrations') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        pg_fail(s, err, "read the catalog", r);
        return pg_abort(s);
    }
    int fresh = PQgetvalue(r, 0, 0)[0] == 't', legacy = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (fresh) {
        if (pg_cmd(s,
                   "CREATE TABLE donto_migrations (module TEXT NOT NULL, version INTEGER NOT NULL,"
                   " name TEXT NOT NULL, applied TIMESTAMPTZ NOT NULL DEFAULT now(),"
                   " PRIMARY KEY (module, version))",
                   err))
            return pg_abort(s);
        if (legacy && pg_cmd_step(s, DONTO_MIGRATIONS_CARRY_OVER, "carry over schema_migrations", err))
            return pg_abort(s);
    }
    for (size_t i = 0; i < set->n; i++) {
        const donto_migration *m = &set->list[i];
        if (!m->sql[DONTO_DB_POSTGRES]) {
            donto_seterrc(err, DONTO_E_INTERNAL, "migration %s %d (%s) has no PostgreSQL SQL",
                          set->module, m->version, m->name);
            return pg_abort(s);
        }
        pgp p = {0};
        p_text(&p, set->module);
        p_i64(&p, m->version);
        if (!(r = pg_q(s, Q_MIG_HAS, &p, "read donto_migrations", err))) return pg_abort(s);
        int have = PQntuples(r) > 0;
        PQclear(r);
        if (have) continue;
        if (pg_cmd_step(s, m->sql[DONTO_DB_POSTGRES], "apply", err)) {
            donto_preerr(err, "migration %s %d (%s)", set->module, m->version, m->name);
            return pg_abort(s);
        }
        p_text(&p, m->name);
        if (!(r = pg_q(s, Q_MIG_ADD, &p, "record migration", err))) return pg_abort(s);
        PQclear(r);
    }
    if (pg_cmd(s, "COMMIT", err)) return pg_abort(s);
    return 0;
}

/* Enqueue in chunks of ENQ_ROWS rows per statement: a multi-row VALUES list
 * of placeholders (the SQL text holds no data), so 100k items cost a few
 * hundred round trips instead of 100k. */
#define ENQ_ROWS 256

static char *enq_sql(size_t rows) {
    size_t cap = 400 + rows * 40;
    char *q = donto_xmalloc(cap);
    size_t len = (size_t)snprintf(q, cap, "INSERT INTO queue (target, item_id, model, text) "
                                          "SELECT v.t::smallint, v.i, v.m, v.x FROM (VALUES ");
    for (size_t r = 0; r < rows; r++)
        len += (size_t)snprintf(q + len, cap - len, "%s($%zu, $%zu, $%zu, $%zu)", r ? ", " : "",
                                4 * r + 1, 4 * r + 2, 4 * r + 3, 4 * r + 4);
    snprintf(q + len, cap - len,
             ") AS v(t, i, m, x) WHERE NOT EXISTS (SELECT 1 FROM vectors w WHERE "
             "w.target = v.t::smallint AND w.item_id = v.i AND w.model = v.m) "
             "ON CONFLICT DO NOTHING");
    return q;
}

static int pg_enqueue(donto_store *b, const donto_enqueue_item *items, size_t n, size_t *added,
                      donto_err *err) {
    pg_store *s = (pg_store *)b;
    size_t count = 0;
    if (added) *added = 0;
    if (n == 0) return 0;
    /* donto_vector keys a statement by its uuid: under donto's layout a
     * claim with another id could never be stored there (store.h). */
    if (b->vectors == DONTO_VECTORS_DONTO)
        for (size_t i = 0; i < n; i++)
            if (items[i].target == DONTO_TARGET_CLAIM && !donto_store_is_uuid(items[i].item_id))
                return donto_seterrc(err, DONTO_E_INVALID,
                                     "postgres: enqueue: claim id '%.100s' is not a uuid, and donto_vector keys "
                                     "statements by uuid (vectors donto)",
                                     items[i].item_id ? items[i].item_id : "");
    if (pg_ready(s, err) || pg_cmd(s, "BEGIN", err)) return -1;
    const char **v = donto_xcalloc(4 * ENQ_ROWS, sizeof *v);
    char(*tnum)[8] = donto_xcalloc(ENQ_ROWS, sizeof *tnum);
    for (size_t i = 0; i < n; i += ENQ_ROWS) {
        size_t rows = n - i < ENQ_ROWS ? n - i : ENQ_ROWS;
        for (size_t r = 0; r < rows; r++) {
            const donto_enqueue_item *it = &items[i + r];
            snprintf(tnum[r], sizeof tnum[r], "%d", (int)it->target);
            v[4 * r + 0] = tnum[r];
            v[4 * r + 1] = it->item_id;
            v[4 * r + 2] = it->model;
            v[4 * r + 3] = it->text;
        }
        PGresult *res;
        if (rows == ENQ_ROWS) { /* the common full chunk: prepared once */
            if (!s->enq_prepared) {
                char *q = enq_sql(ENQ_ROWS);
                res = PQprepare(s->conn, "dq_enq", q, 4 * ENQ_ROWS, NULL);
                free(q);
                if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                    pg_fail(s, err, "enqueue: prepare", res);
                    goto fail;
                }
                PQclear(res);
                s->enq_prepared = 1;
            }
            res = PQexecPrepared(s->conn, "dq_enq", 4 * ENQ_ROWS, v, NULL, NULL, 0);
        } else {
            char *q = enq_sql(rows);
            res = PQexecParams(s->conn, q, (int)(4 * rows), NULL, v, NULL, NULL, 0);
            free(q);
        }
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            pg_fail(s, err, "enqueue insert", res);
            goto fail;
        }
        count += changed(res);
        PQclear(res);
    }
    free(v);
    free(tnum);
    if (pg_cmd(s, "COMMIT", err)) return pg_abort(s);
    if (added) *added = count;
    return 0;
fail:
    free(v);
    free(tnum);
    return pg_abort(s);
}

/* Lease up to n items of one target into out (appending); one statement,
 * so one short transaction. Returns the rows leased, or -1. */
static int pg_lease_target(pg_store *s, const char *worker_id, int n, int target, int64_t now_ms,
                           int64_t ttl_ms, donto_lease_batch *out, donto_err *err) {
    pgp p = {0};
    p_i64(&p, now_ms);
    p_i64(&p, n);
    p_text(&p, worker_id);
    p_i64(&p, now_ms + ttl_ms);
    p_i64(&p, target);
    PGresult *r = pg_q(s, Q_LEASE, &p, "lease", err);
    if (!r) return -1;
    int rows = PQntuples(r);
    if (rows > 0) {
        out->items = donto_xrealloc(out->items, (out->n + (size_t)rows) * sizeof *out->items);
        for (int i = 0; i < rows; i++) {
            donto_leased_item *it = &out->items[out->n + (size_t)i];
            it->target = (donto_target)i64(r, i, 0);
            it->item_id = sdup(r, i, 1);
            it->model = sdup(r, i, 2);
            it->text = sdup(r, i, 3);
            it->lease_id = i64(r, i, 4);
        }
        out->n += (size_t)rows;
    }
    PQclear(r);
    return rows;
}

static int pg_lease(donto_store *b, const char *worker_id, int n, int target, int64_t now_ms,
                    int64_t ttl_ms, donto_lease_batch *out, donto_err *err) {
    pg_store *s = (pg_store *)b;
    out->items = NULL;
    out->n = 0;
    if (n <= 0) return 0;
    if (pg_ready(s, err)) return -1;
    int first = target >= 0 ? target : 0, last = target >= 0 ? target : DONTO_TARGET_N - 1;
    for (int t = first; t <= last && out->n < (size_t)n; t++) {
        if (pg_lease_target(s, worker_id, n - (int)out->n, t, now_ms, ttl_ms, out, err) < 0) {
            /* Rows an earlier target's statement leased are committed: hand
             * them out rather than strand them until their lease expires. */
            if (out->n > 0) return 0;
            return -1;
        }
    }
    return 0;
}

static int pg_model_dims(pg_store *s, const char *model, int *dims, donto_err *err) {
    for (int i = 0; i < s->nmodels; i++)
        if (strcmp(s->models[i].name, model) == 0) return *dims = s->models[i].dims, 0;
    pgp p = {0};
    p_text(&p, model);
    PGresult *r = pg_q(s, Q_MODEL_GET, &p, "submit: read models", err);
    if (!r) return -1;
    *dims = PQntuples(r) > 0 ? (int)i64(r, 0, 0) : 0;
    PQclear(r);
    /* Only a row another transaction committed is cached (rows never change). */
    if (*dims > 0 && s->nmodels < MODEL_CACHE && strlen(model) < sizeof s->models[0].name) {
        strcpy(s->models[s->nmodels].name, model);
        s->models[s->nmodels++].dims = *dims;
    }
    return 0;
}

/* PostgreSQL array literals in a donto_buf (util.h): a submit's items travel
 * as a few array parameters ('{...}' values, never SQL text), so a batch is a
 * handful of round trips whatever its size. */
static void sb_sep(donto_buf *b) { donto_buf_str(b, b->len ? "," : "{"); }
static void sb_end(donto_buf *b) { donto_buf_str(b, b->len ? "}" : "{}"); }
static void sb_i64(donto_buf *b, int64_t x) {
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)x);
    sb_sep(b);
    donto_buf_str(b, t);
}
/* A quoted array element: backslash and double quote are escaped. */
static void sb_text(donto_buf *b, const char *s) {
    sb_sep(b);
    if (!s) {
        donto_buf_str(b, "NULL");
        return;
    }
    donto_buf_str(b, "\"");
    for (const char *c = s; *c; c++) {
        if (*c == '"' || *c == '\\') donto_buf_put(b, "\\", 1);
        donto_buf_put(b, c, 1);
    }
    donto_buf_str(b, "\"");
}
/* bytea element in hex input form: "\\x0a1b.." inside the array literal. */
/* The vectors of a submit as one bytea[] parameter in PostgreSQL's binary
 * array format (array_recv): no hex to write here nor to parse there, for
 * what is the bulk of a submit's bytes (1,536 per 384-d vector). Layout,
 * all integers big-endian: ndim = 1, has_null = 0, element type oid
 * (bytea = 17), length, lower bound = 1, then per element its byte length
 * and bytes. */
#define BYTEA_OID 17u
static void sb_be32(donto_buf *b, uint32_t x) {
    unsigned char c[4] = {(unsigned char)(x >> 24), (unsigned char)(x >> 16), (unsigned char)(x >> 8),
                          (unsigned char)x};
    donto_buf_put(b, (const char *)c, 4);
}
static void sb_bytea_array_head(donto_buf *b, size_t count) {
    sb_be32(b, 1);
    sb_be32(b, 0);
    sb_be32(b, BYTEA_OID);
    sb_be32(b, (uint32_t)count);
    sb_be32(b, 1);
}
/* One element: a vector as little-endian float32 bytes. */
static void sb_bytea_f32(donto_buf *b, const float *v, int dims) {
    size_t n = (size_t)dims * 4;
    sb_be32(b, (uint32_t)n);
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = donto_xrealloc(b->p, b->cap);
    }
    donto_f32_to_le(v, dims, (unsigned char *)b->p + b->len);
    b->len += n;
}

/* The floats of the submit's vectors bound for donto_vector, as one float4[]
 * parameter in the binary array format (array_recv; float4 = oid 700): the
 * header for count elements, then each element as its length (4) and its
 * IEEE bits big-endian. count 0: an empty array (ndim 0). */
#define FLOAT4_OID 700u
static void sb_float4_array_head(donto_buf *b, size_t count) {
    sb_be32(b, count ? 1 : 0);
    sb_be32(b, 0);
    sb_be32(b, FLOAT4_OID);
    if (!count) return;
    sb_be32(b, (uint32_t)count);
    sb_be32(b, 1);
}
static void sb_float4s(donto_buf *b, const float *v, int dims) {
    for (int k = 0; k < dims; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        sb_be32(b, 4);
        sb_be32(b, u);
    }
}

/* Does this accepted item's embedding go to donto_vector (store.h)? */
static int pg_to_donto(const pg_store *s, const donto_submit_item *it) {
    return s->base.vectors == DONTO_VECTORS_DONTO && it->target == DONTO_TARGET_CLAIM && donto_store_is_uuid(it->item_id);
}

static int pg_vectors_check(donto_store *b, donto_err *err);

/* One attempt at the whole submit transaction:
 *   1. lock and read every queue row of the batch in one statement, in key
 *      order (so two submits never deadlock on each other's rows);
 *   2. items with no queue row: look the stored vector up (retries, late
 *      submits; rare);
 *   3. verdicts in C (donto_submit_verdict_*), shared with SQLite;
 *   4. accepted items leave the queue and land in vectors in one statement;
 *   5. the contributor's totals. */
static int pg_submit_once(pg_store *s, const char *worker_id, const donto_submit_item *items,
                          size_t n, int64_t now_ms, donto_submit_result *res, donto_err *err) {
    size_t upserted = 0, repeated = 0, rejected = 0, nacc = 0;
    int rc = -1;
    PGresult *q = NULL;
    char **model = donto_xcalloc(n ? n : 1, sizeof *model);
    int *best = donto_xcalloc(n ? n : 1, sizeof *best);   /* row in q, or -1 */
    int *score = donto_xcalloc(n ? n : 1, sizeof *score);
    unsigned char *accept = donto_xcalloc(n ? n : 1, 1);
    donto_buf at = {0}, ai = {0}, am = {0}, ad = {0}, av = {0}, al = {0}, ao = {0}, af = {0};

    for (size_t i = 0; i < n; i++) {
        best[i] = -1;
        sb_i64(&at, items[i].target);
        sb_text(&ai, items[i].item_id);
        sb_text(&am, items[i].model);
    }
    sb_end(&at);
    sb_end(&ai);
    sb_end(&am);
    if (pg_cmd(s, "BEGIN", err)) goto out;
    pgp p = {0};
    p_text(&p, at.p);
    p_text(&p, ai.p);
    p_text(&p, am.p);
    if (!(q = pg_q(s, Q_SUB_LOCK, &p, "submit: lock queue rows", err))) goto out;
    /* An item queued for several models: prefer the row whose lease_id was
     * given, then one leased by this worker (as SQLite's ORDER BY does). */
    for (int r = 0; r < PQntuples(q); r++) {
        int64_t ord = i64(q, r, 0);
        if (ord < 1 || (size_t)ord > n) continue;
        size_t i = (size_t)ord - 1;
        int sc = 1 + 2 * (!PQgetisnull(q, r, 3) && i64(q, r, 3) == items[i].lease_id) +
                 (!PQgetisnull(q, r, 2) && strcmp(PQgetvalue(q, r, 2), worker_id) == 0);
        if (sc > score[i]) score[i] = sc, best[i] = r;
    }
    for (size_t i = 0; i < n; i++) {
        const donto_submit_item *it = &items[i];
        donto_reject v;
        int repeat = 0;
        if (best[i] >= 0) {
            int r = best[i];
            model[i] = sdup(q, r, 1);
            v = donto_submit_verdict_queued(worker_id, it->lease_id,
                                            PQgetisnull(q, r, 2) ? NULL : PQgetvalue(q, r, 2),
                                            i64(q, r, 3));
        } else {
            pgp pv = {0};
            p_i64(&pv, it->target);
            p_text(&pv, it->item_id);
            p_text(&pv, it->model);
            p_i64(&pv, it->lease_id);
            p_text(&pv, worker_id);
            PGresult *w = pg_q(s, Q_SUB_VEC, &pv, "submit: read vectors", err);
            if (!w) goto out;
            if (PQntuples(w) > 0)
                v = donto_submit_verdict_stored(worker_id, it->lease_id, 1,
                                                PQgetisnull(w, 0, 0) ? NULL : PQgetvalue(w, 0, 0),
                                                i64(w, 0, 1), &repeat);
            else
                v = donto_submit_verdict_stored(worker_id, it->lease_id, 0, NULL, 0, &repeat);
            PQclear(w);
        }
        if (v == DONTO_REJECT_NONE && model[i]) {
            int dims;
            if (pg_model_dims(s, model[i], &dims, err)) goto out;
            if (it->dims <= 0 || !it->vector || (dims > 0 && dims != it->dims)) {
                v = DONTO_REJECT_WRONG_MODEL;
            } else if (dims == 0) {
                pgp m = {0};
                p_text(&m, model[i]);
                p_i64(&m, it->dims);
                PGresult *w = pg_q(s, Q_MODEL_ADD, &m, "submit: add model", err);
                if (!w) goto out;
                PQclear(w);
            }
        }
        if (v == DONTO_REJECT_NONE && model[i]) {
            /* The same item twice in one batch: the second is a repeat (one
             * statement may not upsert a row twice). */
            for (size_t j = 0; j < i && !repeat; j++)
                repeat = accept[j] && items[j].target == it->target &&
                         strcmp(items[j].item_id, it->item_id) == 0 &&
                         strcmp(model[j], model[i]) == 0;
            if (!repeat) {
                accept[i] = 1;
                nacc++;
                if (res->text && best[i] >= 0 && (!res->text_model || !strcmp(res->text_model, model[i])))
                    res->text[i] = sdup(q, best[i], 4);
            }
        }
        res->reject[i] = v;
        if (v == DONTO_REJECT_NONE) {
            upserted++;
            repeated += (size_t)repeat;
        } else {
            rejected++;
        }
    }
    PQclear(q);
    q = NULL;
    if (nacc) {
        at.len = ai.len = am.len = 0;
        int donto = s->base.vectors == DONTO_VECTORS_DONTO;
        size_t nfloats = 0, off = 0;
        for (size_t i = 0; donto && i < n; i++)
            if (accept[i] && pg_to_donto(s, &items[i])) nfloats += (size_t)items[i].dims;
        sb_bytea_array_head(&av, nacc);
        if (donto) sb_float4_array_head(&af, nfloats);
        for (size_t i = 0; i < n; i++) {
            if (!accept[i]) continue;
            const donto_submit_item *it = &items[i];
            int dv = donto && pg_to_donto(s, it);
            sb_i64(&at, it->target);
            sb_text(&ai, it->item_id);
            sb_text(&am, model[i]);
            sb_i64(&ad, it->dims);
            /* An embedding in donto_vector leaves an empty vec in the ledger. */
            sb_bytea_f32(&av, it->vector, dv ? 0 : it->dims);
            sb_i64(&al, it->lease_id);
            if (donto) sb_i64(&ao, (int64_t)off);
            if (dv) {
                sb_float4s(&af, it->vector, it->dims);
                off += (size_t)it->dims;
            }
        }
        sb_end(&at);
        sb_end(&ai);
        sb_end(&am);
        sb_end(&ad);
        sb_end(&al);
        if (donto) sb_end(&ao);
        pgp w = {0};
        p_text(&w, at.p);
        p_text(&w, ai.p);
        p_text(&w, am.p);
        p_text(&w, ad.p);
        p_bin(&w, av.p, av.len);
        p_text(&w, al.p);
        p_text(&w, worker_id);
        p_i64(&w, now_ms);
        char token[DONTO_TOKEN_NAME_MAX + 1];
        p_text(&w, donto_worker_token(worker_id, token, sizeof token) == 0 ? token : NULL);
        if (donto) {
            p_text(&w, ao.p);
            p_bin(&w, af.p, af.len);
            p_text(&w, DONTO_VECTOR_MODEL_VERSION);
        }
        if (!(q = pg_q(s, donto ? Q_SUB_WRITE_D : Q_SUB_WRITE, &w,
                       donto ? "submit: move to vectors and donto_vector" : "submit: move to vectors", err)))
            goto out;
        PQclear(q);
        q = NULL;
    }
    {
        pgp c = {0};
        p_text(&c, worker_id);
        p_i64(&c, (int64_t)(upserted - repeated));
        p_i64(&c, (int64_t)rejected);
        p_i64(&c, now_ms);
        if (!(q = pg_q(s, Q_CONTRIB, &c, "submit: contributor totals", err))) goto out;
        PQclear(q);
        q = NULL;
        if (upserted > repeated) {
            pgp m = {0};
            p_text(&m, worker_id);
            p_i64(&m, now_ms / 60000);
            p_i64(&m, (int64_t)(upserted - repeated));
            if (!(q = pg_q(s, Q_MINUTE, &m, "submit: throughput", err))) goto out;
            PQclear(q);
            q = NULL;
        }
    }
    if (pg_cmd(s, "COMMIT", err)) goto out;
    res->upserted = upserted;
    res->repeated = repeated;
    rc = 0;
out:
    PQclear(q);
    if (rc) pg_abort(s);
    if (rc && res->text)
        for (size_t i = 0; i < n; i++) free(res->text[i]), res->text[i] = NULL;
    for (size_t i = 0; i < n; i++) free(model[i]);
    free(model);
    free(best);
    free(score);
    free(accept);
    free(at.p);
    free(ai.p);
    free(am.p);
    free(ad.p);
    free(av.p);
    free(al.p);
    free(ao.p);
    free(af.p);
    return rc;
}

static int pg_submit(donto_store *b, const char *worker_id, const donto_submit_item *items,
                     size_t n, int64_t now_ms, donto_submit_result *res, donto_err *err) {
    pg_store *s = (pg_store *)b;
    res->upserted = res->repeated = 0;
    if (pg_ready(s, err) || pg_vectors_check(b, err)) return -1;
    for (int attempt = 0;; attempt++) {
        if (pg_submit_once(s, worker_id, items, n, now_ms, res, err) == 0) return 0;
        if (attempt == 2 || !retryable(s)) return -1;
    }
}

/* Run q (release or extend) once per item in one transaction, with
 * (target, item_id, model, worker_id, lease_id) and, when until >= 0, until
 * as $6; count = rows changed. A deadlock or serialization failure rolls
 * the whole transaction back and is tried again (up to three times). */
static int pg_per_item_once(pg_store *s, int q, const char *step, const char *worker_id,
                            const donto_submit_item *items, size_t n, int64_t until, size_t *count,
                            donto_err *err) {
    *count = 0;
    if (pg_cmd(s, "BEGIN", err)) return -1;
    for (size_t i = 0; i < n; i++) {
        pgp p = {0};
        p_i64(&p, items[i].target);
        p_text(&p, items[i].item_id);
        p_text(&p, items[i].model);
        p_text(&p, worker_id);
        p_i64(&p, items[i].lease_id);
        if (until >= 0) p_i64(&p, until);
        PGresult *r = pg_q(s, q, &p, step, err);
        if (!r) return pg_abort(s);
        *count += changed(r);
        PQclear(r);
    }
    if (pg_cmd(s, "COMMIT", err)) return pg_abort(s);
    return 0;
}

static int pg_per_item(pg_store *s, int q, const char *step, const char *worker_id,
                       const donto_submit_item *items, size_t n, int64_t until, size_t *count, donto_err *err) {
    *count = 0;
    if (pg_ready(s, err)) return -1;
    for (int attempt = 0;; attempt++) {
        if (pg_per_item_once(s, q, step, worker_id, items, n, until, count, err) == 0) return 0;
        if (attempt == 2 || !retryable(s)) return -1;
    }
}

static int pg_release(donto_store *b, const char *worker_id, const donto_submit_item *items,
                      size_t n, size_t *released, donto_err *err) {
    size_t count = 0;
    if (pg_per_item((pg_store *)b, Q_RELEASE, "release", worker_id, items, n, -1, &count, err)) return -1;
    if (released) *released = count;
    return 0;
}

static int pg_report(donto_store *b, const char *worker_id, const char *kind, const char *message,
                     int64_t now_ms, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    const char *msg = message ? message : "";
    size_t len = donto_utf8_prefix(msg, DONTO_REPORT_MAX_CHARS);
    char *cut = donto_xmalloc(len + 1);
    memcpy(cut, msg, len);
    cut[len] = 0;
    pgp p = {0};
    p_text(&p, worker_id);
    p_text(&p, kind ? kind : "");
    p_text(&p, cut);
    p_i64(&p, now_ms);
    char token[DONTO_TOKEN_NAME_MAX + 1];
    p_text(&p, donto_worker_token(worker_id, token, sizeof token) == 0 ? token : NULL);
    PGresult *r = NULL;
    if (pg_cmd(s, "BEGIN", err)) goto fail;
    if (!(r = pg_q(s, Q_REPORT, &p, "report insert", err))) goto fail;
    PQclear(r);
    pgp pr = {0};
    p_i64(&pr, now_ms - DONTO_REPORT_KEEP_MS);
    if (!(r = pg_q(s, Q_REPORT_PRUNE, &pr, "report: prune", err))) goto fail;
    PQclear(r);
    pgp c = {0};
    p_text(&c, worker_id);
    p_i64(&c, 0);
    p_i64(&c, 0);
    p_i64(&c, now_ms);
    if (!(r = pg_q(s, Q_CONTRIB, &c, "report: contributor last_seen", err))) goto fail;
    PQclear(r);
    if (pg_cmd(s, "COMMIT", err)) goto fail;
    free(cut);
    return 0;
fail:
    free(cut);
    return pg_abort(s);
}

static int pg_stats(donto_store *b, int64_t now_ms, donto_target_stats out[DONTO_TARGET_N],
                    donto_err *err) {
    pg_store *s = (pg_store *)b;
    memset(out, 0, sizeof(donto_target_stats) * DONTO_TARGET_N);
    if (pg_ready(s, err)) return -1;
    /* One snapshot for both counts, so an item moving from queue to vectors
     * is counted exactly once. */
    if (pg_cmd(s, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err)) return -1;
    PGresult *r = pg_q(s, Q_STATS_VEC, NULL, "stats: count vectors", err);
    if (!r) return pg_abort(s);
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t t = i64(r, i, 0);
        if (t >= 0 && t < DONTO_TARGET_N) out[t].embedded = i64(r, i, 1);
    }
    PQclear(r);
    pgp p = {0};
    p_i64(&p, now_ms);
    if (!(r = pg_q(s, Q_STATS_QUEUE, &p, "stats: count queue", err))) return pg_abort(s);
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t t = i64(r, i, 0);
        if (t < 0 || t >= DONTO_TARGET_N) continue;
        out[t].pending = i64(r, i, 1);
        out[t].leased = i64(r, i, 2);
    }
    PQclear(r);
    if (pg_cmd(s, "COMMIT", err)) return pg_abort(s);
    for (int t = 0; t < DONTO_TARGET_N; t++)
        out[t].total = out[t].embedded + out[t].pending + out[t].leased;
    return 0;
}

static int pg_embedded_since(donto_store *b, int64_t since_ms, int64_t *count, donto_err *err) {
    pg_store *s = (pg_store *)b;
    *count = 0;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, since_ms);
    PGresult *r = pg_q(s, Q_SINCE, &p, "count recent vectors", err);
    if (!r) return -1;
    *count = i64(r, 0, 0);
    PQclear(r);
    return 0;
}

static int pg_contributors(donto_store *b, int limit, int64_t since_ms, donto_contributor **out, size_t *n,
                           donto_err *err) {
    pg_store *s = (pg_store *)b;
    *out = NULL;
    *n = 0;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, limit);
    p_i64(&p, since_ms / 60000);
    PGresult *r = pg_q(s, Q_CONTRIB_LIST, &p, "list contributors", err);
    if (!r) return -1;
    int rows = PQntuples(r);
    if (rows > 0) *out = donto_xcalloc((size_t)rows, sizeof **out);
    for (int i = 0; i < rows; i++) {
        (*out)[i].worker_id = sdup(r, i, 0);
        (*out)[i].total = i64(r, i, 1);
        (*out)[i].rejected = i64(r, i, 2);
        (*out)[i].last_seen = i64(r, i, 3);
        (*out)[i].recent = i64(r, i, 4);
    }
    *n = (size_t)rows;
    PQclear(r);
    return 0;
}

static int pg_series(donto_store *b, int64_t since_min, int nmin, int64_t *counts, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (nmin < 0) return donto_seterr(err, "postgres: series: negative length");
    memset(counts, 0, (size_t)nmin * sizeof *counts);
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, since_min - 60);
    PGresult *r = pg_q(s, Q_MIN_PRUNE, &p, "series: prune", err);
    if (!r) return -1;
    PQclear(r);
    pgp q = {0};
    p_i64(&q, since_min);
    p_i64(&q, since_min + nmin);
    if (!(r = pg_q(s, Q_SERIES, &q, "series", err))) return -1;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t m = i64(r, i, 0) - since_min;
        if (m >= 0 && m < nmin) counts[m] = i64(r, i, 1);
    }
    PQclear(r);
    return 0;
}

static int pg_reports_recent(donto_store *b, int limit, donto_report **out, size_t *n,
                             donto_err *err) {
    pg_store *s = (pg_store *)b;
    *out = NULL;
    *n = 0;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, limit);
    PGresult *r = pg_q(s, Q_REPORTS, &p, "list reports", err);
    if (!r) return -1;
    int rows = PQntuples(r);
    if (rows > 0) *out = donto_xcalloc((size_t)rows, sizeof **out);
    for (int i = 0; i < rows; i++) {
        (*out)[i].id = i64(r, i, 0);
        (*out)[i].worker_id = sdup(r, i, 1);
        (*out)[i].kind = sdup(r, i, 2);
        (*out)[i].message = sdup(r, i, 3);
        (*out)[i].created = i64(r, i, 4);
    }
    *n = (size_t)rows;
    PQclear(r);
    return 0;
}

static int pg_token_add(donto_store *b, const char *name, donto_role role, const uint8_t hash[32],
                        int64_t now_ms, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_text(&p, name);
    p_bin(&p, hash, 32);
    p_text(&p, donto_role_name(role));
    p_i64(&p, now_ms);
    PGresult *r = pg_q(s, Q_TOK_ADD, &p, "token add", err);
    if (!r) {
        if (strcmp(s->sqlstate, "23505") == 0)
            return donto_seterrc(err, DONTO_E_CONFLICT,
                                 "token '%s' already exists (or its hash is in use)", name);
        return -1;
    }
    PQclear(r);
    return 0;
}

/* The TRUST_COLS of row i, from column c on. */
static void trust_cols(PGresult *r, int i, int c, donto_trust *t) {
    t->suspended = i64(r, i, c) != 0;
    t->streak = i64(r, i, c + 1);
    t->checks = i64(r, i, c + 2);
    t->failed = i64(r, i, c + 3);
    t->withdrawn = i64(r, i, c + 4);
    t->suspended_at = i64(r, i, c + 5);
    snprintf(t->reason, sizeof t->reason, "%s", PQgetisnull(r, i, c + 6) ? "" : PQgetvalue(r, i, c + 6));
}

static int pg_token_check(donto_store *b, const uint8_t hash[32], int *found, donto_role *role,
                          char *name, size_t name_cap, donto_trust *trust, donto_err *err) {
    pg_store *s = (pg_store *)b;
    *found = 0;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_bin(&p, hash, 32);
    PGresult *r = pg_q(s, Q_TOK_CHECK, &p, "token check", err);
    if (!r) return -1;
    if (PQntuples(r) > 0) {
        int ro = donto_role_parse(PQgetvalue(r, 0, 1));
        if (ro >= 0) {
            *found = 1;
            if (role) *role = (donto_role)ro;
            if (name && name_cap) snprintf(name, name_cap, "%s", PQgetvalue(r, 0, 0));
            if (trust) trust_cols(r, 0, 2, trust);
        }
    }
    PQclear(r);
    return 0;
}

static int pg_token_revoke(donto_store *b, const char *name, int *revoked, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_text(&p, name);
    PGresult *r = pg_q(s, Q_TOK_REVOKE, &p, "token revoke", err);
    if (!r) return -1;
    if (revoked) *revoked = changed(r) > 0;
    PQclear(r);
    return 0;
}

static int pg_token_list(donto_store *b, donto_token_info **out, size_t *n, donto_err *err) {
    pg_store *s = (pg_store *)b;
    *out = NULL;
    *n = 0;
    if (pg_ready(s, err)) return -1;
    PGresult *r = pg_q(s, Q_TOK_LIST, NULL, "token list", err);
    if (!r) return -1;
    int rows = PQntuples(r);
    if (rows > 0) *out = donto_xcalloc((size_t)rows, sizeof **out);
    for (int i = 0; i < rows; i++) {
        (*out)[i].name = sdup(r, i, 0);
        int ro = donto_role_parse(PQgetvalue(r, i, 1));
        (*out)[i].role = ro < 0 ? DONTO_ROLE_CONTRIBUTOR : (donto_role)ro;
        trust_cols(r, i, 2, &(*out)[i].trust);
        (*out)[i].created = i64(r, i, 9);
        (*out)[i].revoked = i64(r, i, 10) != 0;
    }
    *n = (size_t)rows;
    PQclear(r);
    return 0;
}

static int pg_vectors_mark(donto_store *b, donto_target t, const char *model, int64_t since_ms,
                           int64_t *count, int64_t *max_created, donto_err *err) {
    pg_store *s = (pg_store *)b;
    *count = 0;
    *max_created = INT64_MIN;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, (int64_t)t);
    p_text(&p, model);
    p_i64(&p, since_ms);
    p_i64(&p, b->verified_only);
    if (pg_vectors_check(b, err)) return -1;
    PGresult *r = pg_q(s, b->vectors == DONTO_VECTORS_DONTO ? Q_VEC_MARK_D : Q_VEC_MARK, &p,
                       "vectors high-water mark", err);
    if (!r) return -1;
    *count = i64(r, 0, 0);
    if (!PQgetisnull(r, 0, 1)) *max_created = i64(r, 0, 1);
    PQclear(r);
    return 0;
}

static uint64_t be64(const char *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | (unsigned char)b[i];
    return v;
}

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* A float4[] in the binary array format (array_send) as float32 LE bytes
 * in *buf (grown as needed; *cap its size): one dimension, no NULLs, element
 * type float4. 0 with *n floats, or -1 when it is anything else. An empty
 * array (ndim 0) is -1 too: no vector has 0 dims. */
static int pg_float4_array_le(const char *p, size_t len, unsigned char **buf, size_t *cap, size_t *n) {
    const unsigned char *u = (const unsigned char *)p;
    if (len < 20 || be32(u) != 1 || be32(u + 8) != FLOAT4_OID) return -1;
    size_t count = be32(u + 12);
    if (count == 0 || count > (1u << 20) || len != 20 + count * 8) return -1;
    if (*cap < count * 4) {
        *cap = count * 4;
        *buf = donto_xrealloc(*buf, *cap);
    }
    const unsigned char *e = u + 20;
    for (size_t k = 0; k < count; k++, e += 8) {
        if (be32(e) != 4) return -1; /* a NULL element (-1) or a bad length */
        uint32_t bits = be32(e + 4);
        unsigned char *o = *buf + 4 * k;
        o[0] = (unsigned char)bits, o[1] = (unsigned char)(bits >> 8), o[2] = (unsigned char)(bits >> 16),
        o[3] = (unsigned char)(bits >> 24);
    }
    *n = count;
    return 0;
}

static int pg_vectors_page(donto_store *b, donto_target t, const char *model, int64_t after_created,
                           const char *after_id, size_t limit, donto_vec_page *out, donto_err *err) {
    pg_store *s = (pg_store *)b;
    memset(out, 0, sizeof *out);
    /* after_id NULL: created > after_created, i.e. >= after_created + 1. */
    if (!after_id && after_created == INT64_MAX) return 0;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_i64(&p, (int64_t)t);
    p_text(&p, model);
    p_i64(&p, after_id ? after_created : after_created + 1);
    p_text(&p, after_id);
    p_i64(&p, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    p_i64(&p, b->verified_only);
    if (pg_vectors_check(b, err)) return -1;
    int donto = b->vectors == DONTO_VECTORS_DONTO;
    PGresult *r = pg_qf(s, donto ? Q_VEC_PAGE_D : Q_VEC_PAGE, &p, "read vectors", 1, err);
    if (!r) return -1;
    int rows = PQntuples(r);
    size_t cap = 0, lecap = 0;
    unsigned char *le = NULL; /* a donto_vector embedding as float32 LE bytes */
    for (int i = 0; i < rows; i++) {
        /* Binary columns: text as bytes, int8 and int4 big-endian, bytea raw. */
        if (PQgetlength(r, i, 1) != 8 || PQgetlength(r, i, 2) != 4) {
            PQclear(r);
            free(le);
            donto_vec_page_free(out);
            return donto_seterr(err, "postgres: read vectors: unexpected column sizes");
        }
        int64_t created = (int64_t)be64(PQgetvalue(r, i, 1));
        const unsigned char *d = (const unsigned char *)PQgetvalue(r, i, 2);
        int dims = (int)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
        const void *blob = PQgetvalue(r, i, 3);
        size_t blen = (size_t)PQgetlength(r, i, 3);
        if (donto && blen == 0 && !PQgetisnull(r, i, 4)) {
            size_t nf = 0;
            if (pg_float4_array_le(PQgetvalue(r, i, 4), (size_t)PQgetlength(r, i, 4), &le, &lecap, &nf)) {
                PQclear(r);
                free(le);
                donto_vec_page_free(out);
                return donto_seterr(err, "postgres: read vectors: donto_vector.embedding of %.200s is not a "
                                         "one-dimensional float4[] without NULLs", PQgetvalue(r, i, 0));
            }
            dims = (int)nf, blob = le, blen = nf * 4;
        }
        if (donto_vec_page_push(out, &cap, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0), created, dims,
                                blob, blen, err)) {
            PQclear(r);
            free(le);
            donto_vec_page_free(out);
            return donto_preerr(err, "postgres");
        }
    }
    PQclear(r);
    free(le);
    return 0;
}

static int pg_extend(donto_store *b, const char *worker_id, const donto_submit_item *items, size_t n,
                     int64_t now_ms, int64_t ttl_ms, size_t *extended, donto_err *err) {
    return pg_per_item((pg_store *)b, Q_EXTEND, "extend", worker_id, items, n, now_ms + ttl_ms, extended, err);
}

/* Run q with p inside the caller's transaction; -1 (rolled back) on failure. */
static int pg_step(pg_store *s, int q, const pgp *p, const char *step, size_t *changes, donto_err *err) {
    PGresult *r = pg_q(s, q, p, step, err);
    if (!r) return pg_abort(s);
    if (changes) *changes = changed(r);
    PQclear(r);
    return 0;
}

static int pg_trust_record(donto_store *b, const char *token, const donto_check *checks, size_t n,
                           int64_t now_ms, donto_err *err) {
    pg_store *s = (pg_store *)b;
    (void)now_ms;
    if (pg_ready(s, err)) return -1;
    int64_t passed, failed, tail;
    donto_check_tally(checks, n, &passed, &failed, &tail);
    if (pg_cmd(s, "BEGIN", err)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!checks[i].pass) continue;
        pgp p = {0};
        p_i64(&p, checks[i].target);
        p_text(&p, checks[i].item_id);
        p_text(&p, checks[i].model);
        p_text(&p, token);
        p_i64(&p, checks[i].lease_id);
        if (pg_step(s, Q_CHECK_VEC, &p, "trust: mark verified", NULL, err)) return -1;
    }
    pgp p = {0};
    p_text(&p, token);
    p_i64(&p, passed + failed);
    p_i64(&p, failed);
    p_i64(&p, tail);
    if (pg_step(s, Q_CHECK_TOK, &p, "trust: count checks", NULL, err)) return -1;
    if (pg_cmd(s, "COMMIT", err)) return pg_abort(s);
    return 0;
}

static int pg_suspend(donto_store *b, const char *token, const char *reason, int64_t now_ms,
                      int64_t *withdrawn, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    size_t len = donto_utf8_prefix(reason, DONTO_REPORT_MAX_CHARS);
    char *cut = donto_xmalloc(len + 1);
    memcpy(cut, reason, len);
    cut[len] = 0;
    size_t w = 0;
    int rc = -1;
    pgp t = {0};
    p_text(&t, token);
    pgp rel = {0};
    p_text(&rel, token);
    p_i64(&rel, now_ms);
    if (pg_vectors_check(b, err)) goto out;
    if (pg_cmd(s, "BEGIN", err)) goto out;
    PGresult *wr = pg_q(s, b->vectors == DONTO_VECTORS_DONTO ? Q_SUSP_WITHDRAW_D : Q_SUSP_WITHDRAW, &t,
                        "suspend: withdraw vectors and queue their items again", err);
    if (!wr) {
        pg_abort(s);
        goto out;
    }
    w = (size_t)i64(wr, 0, 0);
    PQclear(wr);
    if (pg_step(s, Q_SUSP_RELEASE, &rel, "suspend: release leases", NULL, err)) goto out;
    pgp r = {0};
    p_text(&r, token);
    p_text(&r, cut);
    p_i64(&r, now_ms);
    if (pg_step(s, Q_SUSP_REPORT, &r, "suspend: report", NULL, err)) goto out;
    pgp m = {0};
    p_text(&m, token);
    p_text(&m, reason);
    p_i64(&m, now_ms);
    p_i64(&m, (int64_t)w);
    if (pg_step(s, Q_SUSP_TOK, &m, "suspend: mark token", NULL, err)) goto out;
    if (pg_cmd(s, "COMMIT", err)) {
        pg_abort(s);
        goto out;
    }
    *withdrawn = (int64_t)w;
    rc = 0;
out:
    free(cut);
    return rc;
}

static int pg_unsuspend(donto_store *b, const char *token, int *done, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    pgp p = {0};
    p_text(&p, token);
    PGresult *r = pg_q(s, Q_UNSUSP, &p, "unsuspend", err);
    if (!r) return -1;
    *done = changed(r) > 0;
    PQclear(r);
    return 0;
}

static int pg_ping(donto_store *b, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    return pg_cmd(s, "SELECT 1", err);
}

static int pg_migrations_applied(donto_store *b, const char *module, uint64_t *mask, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    PGresult *r = PQexec(s->conn, "SELECT to_regclass('donto_migrations') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return pg_fail(s, err, "read the catalog", r);
    int have = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!have) return 0;
    const char *pv[1] = {module};
    r = PQexecParams(s->conn, "SELECT version FROM donto_migrations WHERE module = $1", 1, NULL, pv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return pg_fail(s, err, "read donto_migrations", r);
    for (int i = 0; i < PQntuples(r); i++) {
        long v = strtol(PQgetvalue(r, i, 0), NULL, 10);
        if (v >= 1 && v <= 63) *mask |= (uint64_t)1 << v;
    }
    PQclear(r);
    return 0;
}

/* PostgreSQL can keep claims' embeddings in donto_vector (store.h); the
 * table is checked on first use (pg_vectors_check). */
static int pg_vectors_layout(donto_store *b, int layout, donto_err *err) {
    (void)err;
    if (layout != b->vectors) ((pg_store *)b)->dv_ok = 0;
    return 0;
}

/* Under donto's layout: donto_vector is there with the columns the fabric
 * writes and reads, of donto's types, and the UNIQUE key its upsert names
 * (ON CONFLICT needs it). Once per handle; nothing is ever altered. */
static int pg_vectors_check(donto_store *b, donto_err *err) {
    static const struct {
        const char *name, *type;
    } need[] = {{"subject_type", "text"},   {"subject_id", "uuid"}, {"model_id", "text"},
                {"model_version", "text"},  {"dimensions", "integer"}, {"embedding", "real[]"}};
    pg_store *s = (pg_store *)b;
    if (b->vectors != DONTO_VECTORS_DONTO || s->dv_ok) return 0;
    if (pg_ready(s, err)) return -1;
    PGresult *r = pg_q(s, Q_DV_COLS, NULL, "check donto_vector", err);
    if (!r) return -1;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return donto_seterrc(err, DONTO_E_SCHEMA,
                             "postgres: there is no table donto_vector (donto's migration 0033, or migrate with "
                             "vectors donto to make it)");
    }
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        const char *type = NULL;
        for (int i = 0; i < PQntuples(r) && !type; i++)
            if (!strcmp(PQgetvalue(r, i, 0), need[k].name)) type = PQgetvalue(r, i, 1);
        if (!type || strcmp(type, need[k].type)) {
            donto_seterrc(err, DONTO_E_INVALID,
                          "postgres: donto_vector is not in donto's layout: column %s is %s%s, want %s", need[k].name,
                          type ? "of type " : "", type ? type : "missing", need[k].type);
            PQclear(r);
            return -1;
        }
    }
    PQclear(r);
    if (!(r = pg_q(s, Q_DV_KEY, NULL, "check donto_vector's key", err))) return -1;
    int key = PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!key)
        return donto_seterrc(err, DONTO_E_INVALID,
                             "postgres: donto_vector is not in donto's layout: no UNIQUE (subject_type, subject_id, "
                             "model_id)");
    s->dv_ok = 1;
    return 0;
}

static void pg_close(donto_store *b) {
    pg_store *s = (pg_store *)b;
    if (!s) return;
    PQfinish(s->conn);
    free(s);
}

/* The connection, reconnected once if the server went away. */
static int pg_db(donto_store *b, donto_db *out, donto_err *err) {
    pg_store *s = (pg_store *)b;
    if (pg_ready(s, err)) return -1;
    out->kind = DONTO_DB_POSTGRES;
    out->pg = s->conn;
    return 0;
}

static const donto_store_ops PG_OPS = {
    .migrate = pg_migrate,
    .enqueue = pg_enqueue,
    .lease = pg_lease,
    .submit = pg_submit,
    .release = pg_release,
    .report = pg_report,
    .stats = pg_stats,
    .embedded_since = pg_embedded_since,
    .contributors = pg_contributors,
    .series = pg_series,
    .reports_recent = pg_reports_recent,
    .token_add = pg_token_add,
    .token_check = pg_token_check,
    .token_revoke = pg_token_revoke,
    .token_list = pg_token_list,
    .vectors_mark = pg_vectors_mark,
    .vectors_page = pg_vectors_page,
    .extend = pg_extend,
    .trust_record = pg_trust_record,
    .suspend = pg_suspend,
    .unsuspend = pg_unsuspend,
    .ping = pg_ping,
    .migrations_applied = pg_migrations_applied,
    .db = pg_db,
    .vectors_layout = pg_vectors_layout,
    .vectors_check = pg_vectors_check,
    .close = pg_close,
};

int donto_store_open_pg(const char *url, donto_store **out, donto_err *err) {
    *out = NULL;
    pg_store *s = donto_xcalloc(1, sizeof *s);
    s->base.ops = &PG_OPS;
    s->conn = PQconnectdb(url);
    if (!s->conn || PQstatus(s->conn) != CONNECTION_OK) {
        /* The URL may hold a password: report the server's reason only. */
        if (s->conn)
            pg_fail(s, err, "connect", NULL);
        else
            donto_seterrc(err, DONTO_E_NOMEM, "postgres: connect: out of memory");
        pg_close(&s->base);
        return -1;
    }
    if (pg_setup(s, err)) {
        pg_close(&s->base);
        return -1;
    }
    *out = &s->base;
    return 0;
}
