/* donto-accel: the substrate on PostgreSQL. Bulk writes go through COPY into
 * a per-connection temporary table and one INSERT .. SELECT .. ON CONFLICT
 * per batch: a batch of 20,000 rows is three round trips, not 20,000, and
 * the conflict rules (skip, or fill in NULL labels) are set-based SQL. The
 * queue's rows skip the staging table: enqueue's writers probe a batch for
 * what has gone since their cursor's snapshot, then COPY the rest straight
 * into the queue (see enq_put). Reads are parameterized; ids travel as one
 * text[] array literal. */
#define _POSIX_C_SOURCE 200809L
#include "substrate_int.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static PGconn *conn_of(donto_store *s) { return sub_pg(s); }

static int fail(PGconn *c, PGresult *r, donto_err *err, const char *step) {
    const char *msg = r ? PQresultErrorMessage(r) : "";
    if (!msg || !*msg) msg = PQerrorMessage(c);
    size_t len = strlen(msg);
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
    donto_seterr(err, "postgres: %s: %.*s", step, (int)len, msg);
    PQclear(r);
    return -1;
}

static int cmd(PGconn *c, const char *sql, const char *step, donto_err *err) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(c, r, err, step);
    PQclear(r);
    return 0;
}

static int pg_begin(donto_store *s, donto_err *err) {
    PGconn *c = conn_of(s);
    if (!c) return donto_seterr(err, "postgres: no connection");
    return cmd(c, "BEGIN", "begin", err);
}
static int pg_commit(donto_store *s, donto_err *err) {
    PGconn *c = conn_of(s);
    if (!c) return donto_seterr(err, "postgres: no connection");
    if (cmd(c, "COMMIT", "commit", err) == 0) return 0;
    PQclear(PQexec(c, "ROLLBACK"));
    return -1;
}
static void pg_rollback(donto_store *s) {
    PGconn *c = conn_of(s);
    if (c && PQtransactionStatus(c) != PQTRANS_IDLE) PQclear(PQexec(c, "ROLLBACK"));
}

/* ---- COPY ------------------------------------------------------------------ */

typedef struct cbuf {
    char *p;
    size_t n, cap;
} cbuf;
static void cb_put(cbuf *b, const char *s, size_t len) {
    if (b->n + len > b->cap) {
        b->cap = (b->n + len) * 2 + 4096;
        b->p = donto_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
}
/* One COPY text-format field: backslash escapes for the four special bytes. */
static void cb_field(cbuf *b, const char *v) {
    if (!v) {
        cb_put(b, "\\N", 2);
        return;
    }
    const char *run = v;
    for (const char *p = v;; p++) {
        char esc = 0;
        switch (*p) {
        case '\\': esc = '\\'; break;
        case '\t': esc = 't'; break;
        case '\n': esc = 'n'; break;
        case '\r': esc = 'r'; break;
        case 0: break;
        default: continue;
        }
        cb_put(b, run, (size_t)(p - run));
        if (!*p) break;
        char e[2] = {'\\', esc};
        cb_put(b, e, 2);
        run = p + 1;
    }
}

/* COPY rows (row-major, ncols cells each) with copy_sql ("COPY t FROM STDIN"). */
static int copy_rows(PGconn *c, const char *copy_sql, const char *const *cells, size_t nrows,
                     int ncols, donto_err *err) {
    PGresult *r = PQexec(c, copy_sql);
    if (PQresultStatus(r) != PGRES_COPY_IN) return fail(c, r, err, "copy");
    PQclear(r);
    cbuf b = {0};
    int ok = 1;
    for (size_t i = 0; i < nrows && ok; i++) {
        for (int k = 0; k < ncols; k++) {
            if (k) cb_put(&b, "\t", 1);
            cb_field(&b, cells[i * (size_t)ncols + (size_t)k]);
        }
        cb_put(&b, "\n", 1);
        if (b.n > (1u << 20) || i + 1 == nrows) {
            if (PQputCopyData(c, b.p, (int)b.n) != 1) ok = 0;
            b.n = 0;
        }
    }
    free(b.p);
    if (PQputCopyEnd(c, ok ? NULL : "client error") != 1) ok = 0;
    r = PQgetResult(c);
    int st = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok || !st) {
        fail(c, r, err, "copy data");
        while ((r = PQgetResult(c))) PQclear(r);
        return -1;
    }
    PQclear(r);
    while ((r = PQgetResult(c))) PQclear(r);
    return 0;
}

/* Temporary staging tables, one per kind, all text. */
static const char *const TMP_DDL =
    "CREATE TEMP TABLE IF NOT EXISTS sub_tmp_0 (c1 text, c2 text, c3 text, c4 text, c5 text, "
    "c6 text);"
    "CREATE TEMP TABLE IF NOT EXISTS sub_tmp_1 (c1 text, c2 text, c3 text);"
    "CREATE TEMP TABLE IF NOT EXISTS sub_tmp_2 (c1 text, c2 text, c3 text);"
    "CREATE TEMP TABLE IF NOT EXISTS sub_tmp_3 (c1 text, c2 text, c3 text);"
    "CREATE TEMP TABLE IF NOT EXISTS sub_tmp_4 (c1 text, c2 text, c3 text, c4 text, c5 text)";

static const char *const PUT_SQL[SUB_KIND_N] = {
    [SUB_STATEMENT] = "INSERT INTO donto_statement (statement_id, subject, predicate, object_iri, "
                      "object_lit, context) SELECT c1::uuid, c2, c3, c4, c5::jsonb, "
                      "coalesce(c6, 'donto:default') FROM sub_tmp_0 ON CONFLICT DO NOTHING",
    /* DISTINCT ON: one row per key (DO UPDATE may not touch a row twice), the
     * most complete one. */
    [SUB_PREDICATE] = "INSERT INTO donto_predicate AS d (iri, label, description) "
                      "SELECT DISTINCT ON (c1) c1, c2, c3 FROM sub_tmp_1 "
                      "ORDER BY c1, (c2 IS NULL), (c3 IS NULL) "
                      "ON CONFLICT (iri) DO UPDATE SET label = coalesce(d.label, EXCLUDED.label), "
                      "description = coalesce(d.description, EXCLUDED.description) "
                      "WHERE (d.label IS NULL AND EXCLUDED.label IS NOT NULL) OR "
                      "(d.description IS NULL AND EXCLUDED.description IS NOT NULL)",
    [SUB_ENTITY] = "INSERT INTO donto_entity_symbol AS d (iri, normalized_label, kind) "
                   "SELECT DISTINCT ON (c1) c1, c2, c3 FROM sub_tmp_2 "
                   "ORDER BY c1, (c2 IS NULL), (c3 IS NULL) "
                   "ON CONFLICT (iri) DO UPDATE SET "
                   "normalized_label = coalesce(d.normalized_label, EXCLUDED.normalized_label), "
                   "kind = coalesce(d.kind, EXCLUDED.kind) "
                   "WHERE (d.normalized_label IS NULL AND EXCLUDED.normalized_label IS NOT NULL) "
                   "OR (d.kind IS NULL AND EXCLUDED.kind IS NOT NULL)",
    [SUB_CHUNK] = "INSERT INTO donto_memory_chunk (chunk_id, source, text) "
                  "SELECT c1, c2, c3 FROM sub_tmp_3 ON CONFLICT DO NOTHING",
    [SUB_ARGUMENT] = "INSERT INTO donto_argument (source_statement_id, target_statement_id, "
                     "relation, strength, context) SELECT c1::uuid, c2::uuid, c3, c4::float8, "
                     "coalesce(c5, 'donto:default') FROM sub_tmp_4 ON CONFLICT DO NOTHING",
};

static int pg_put(donto_store *s, sub_kind k, const char *const *cells, size_t nrows,
                  size_t *inserted, donto_err *err) {
    PGconn *c = conn_of(s);
    *inserted = 0;
    if (!c) return donto_seterr(err, "postgres: no connection");
    if (nrows == 0) return 0;
    if (cmd(c, TMP_DDL, "staging tables", err)) return -1;
    char copy[64], trunc[64];
    snprintf(copy, sizeof copy, "COPY sub_tmp_%d FROM STDIN", (int)k);
    snprintf(trunc, sizeof trunc, "TRUNCATE sub_tmp_%d", (int)k);
    if (cmd(c, trunc, "truncate staging", err)) return -1;
    if (copy_rows(c, copy, cells, nrows, SUB_NCOLS[k], err)) return -1;
    PGresult *r = PQexec(c, PUT_SQL[k]);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) return fail(c, r, err, "insert");
    *inserted = (size_t)strtoull(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return cmd(c, trunc, "truncate staging", err);
}

/* A PostgreSQL array literal {"a","b"} of the strings (quotes and
 * backslashes escaped); NULL entries are skipped. */
static char *array_lit(const char *const *v, size_t n) {
    cbuf b = {0};
    cb_put(&b, "{", 1);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if (!v[i]) continue;
        if (!first) cb_put(&b, ",", 1);
        first = 0;
        cb_put(&b, "\"", 1);
        for (const char *p = v[i]; *p; p++) {
            if (*p == '"' || *p == '\\') cb_put(&b, "\\", 1);
            cb_put(&b, p, 1);
        }
        cb_put(&b, "\"", 1);
    }
    cb_put(&b, "}", 2); /* with the NUL */
    return b.p;
}

static int pg_retract(donto_store *s, const char *const *ids, size_t n, size_t *retracted, int *status,
                      donto_err *err) {
    PGconn *c = conn_of(s);
    *retracted = 0;
    if (!c) return donto_seterr(err, "postgres: no connection");
    if (n == 0) return 0;
    char *arr = array_lit(ids, n);
    const char *pv[1] = {arr};
    /* The range stays non-empty even when retracted in the transaction that
     * asserted it (now() = lower bound): closed [t, t]. */
    PGresult *r = PQexecParams(
        c,
        "WITH r AS (UPDATE donto_statement SET tx_time = CASE WHEN now() > lower(tx_time) "
        "THEN tstzrange(lower(tx_time), now()) "
        "ELSE tstzrange(lower(tx_time), lower(tx_time), '[]') END "
        "WHERE statement_id = ANY($1::uuid[]) AND upper_inf(tx_time) "
        "RETURNING statement_id::text AS id), "
        "d AS (DELETE FROM queue q USING r WHERE q.target = 0 AND q.item_id = r.id) "
        /* the count, then every id asked for that exists, and whether this
         * statement retracted it (the outer query sees the rows as they
         * were before the update) */
        "SELECT NULL, (SELECT count(*) FROM r) UNION ALL "
        "SELECT x.statement_id::text, CASE WHEN x.statement_id::text IN (SELECT id FROM r) THEN 1 ELSE 2 END "
        "FROM donto_statement x WHERE x.statement_id = ANY($1::uuid[])",
        1, NULL, pv, NULL, NULL, 0);
    free(arr);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return fail(c, r, err, "retract");
    for (int row = 0; row < PQntuples(r); row++) {
        if (PQgetisnull(r, row, 0)) {
            *retracted = (size_t)strtoull(PQgetvalue(r, row, 1), NULL, 10);
            continue;
        }
        const char *id = PQgetvalue(r, row, 0);
        int v = atoi(PQgetvalue(r, row, 1));
        for (size_t i = 0; status && i < n; i++)
            if (!strcmp(ids[i], id)) status[i] = v;
    }
    PQclear(r);
    return 0;
}

/* Per target: select list and joins (ending in a WHERE clause), the id as
 * stored and its type (fetch), and the id as text (queue/vectors item_id).
 * cur/cur_id, where set, replace sel/id in enqueue's cursor. */
static const struct {
    const char *sel, *key, *id, *type, *cur, *cur_id;
} TGT[DONTO_TARGET_N] = {
    [DONTO_TARGET_CLAIM] = {"SELECT s.statement_id::text, s.subject, se.normalized_label, "
                            "s.predicate, p.label, s.object_iri, oe.normalized_label, "
                            "s.object_lit::text FROM donto_statement s "
                            "LEFT JOIN donto_entity_symbol se ON se.iri = s.subject "
                            "LEFT JOIN donto_predicate p ON p.iri = s.predicate "
                            "LEFT JOIN donto_entity_symbol oe ON oe.iri = s.object_iri "
                            "WHERE upper_inf(s.tx_time)",
                            "s.statement_id", "s.statement_id::text", "uuid",
                            /* The id as text once a row, not three times
                             * (output and both anti-joins; uuid_out was a
                             * fifth of the cursor's time). OFFSET 0 keeps
                             * the planner from folding the subquery back. */
                            "SELECT s.sid, s.subject, se.normalized_label, s.predicate, p.label, "
                            "s.object_iri, oe.normalized_label, s.object_lit::text FROM "
                            "(SELECT st.statement_id::text AS sid, st.subject, st.predicate, "
                            "st.object_iri, st.object_lit FROM donto_statement st "
                            "WHERE upper_inf(st.tx_time) OFFSET 0) s "
                            "LEFT JOIN donto_entity_symbol se ON se.iri = s.subject "
                            "LEFT JOIN donto_predicate p ON p.iri = s.predicate "
                            "LEFT JOIN donto_entity_symbol oe ON oe.iri = s.object_iri "
                            "WHERE true",
                            "s.sid"},
    [DONTO_TARGET_PREDICATE] = {"SELECT p.iri, p.label, p.description FROM donto_predicate p "
                                "WHERE true",
                                "p.iri", "p.iri", "text"},
    [DONTO_TARGET_ENTITY] = {"SELECT e.iri, e.normalized_label, e.kind "
                             "FROM donto_entity_symbol e WHERE true",
                             "e.iri", "e.iri", "text"},
    [DONTO_TARGET_MEMORY_CHUNK] = {"SELECT c.chunk_id, c.text FROM donto_memory_chunk c "
                                   "WHERE upper_inf(c.tx_time)",
                                   "c.chunk_id", "c.chunk_id", "text"},
};

static void collect(PGresult *r, sub_rows *out) {
    int rows = PQntuples(r);
    for (int i = 0; i < rows; i++) {
        char **cells = donto_xcalloc((size_t)out->ncols, sizeof *cells);
        for (int c = 0; c < out->ncols; c++)
            cells[c] = PQgetisnull(r, i, c) ? NULL : donto_xstrdup(PQgetvalue(r, i, c));
        sub_rows_add(out, cells);
        free(cells);
    }
}

/* Gone since the cursor's snapshot: an item retracted after it is not
 * queued (the retraction may already have run its queue delete). Rows are
 * never deleted, so "not retracted" is "live"; the partial indexes of
 * retracted rows keep this a probe into a small index. x.k is the claim's
 * uuid when the ids travel as uuid[] too, x.id the id as text. */
static const char *const GONE[DONTO_TARGET_N] = {
    [DONTO_TARGET_CLAIM] = "OR EXISTS (SELECT 1 FROM donto_statement r WHERE "
                           "r.statement_id = x.id::uuid AND NOT upper_inf(r.tx_time))",
    [DONTO_TARGET_PREDICATE] = "",
    [DONTO_TARGET_ENTITY] = "",
    [DONTO_TARGET_MEMORY_CHUNK] = "OR EXISTS (SELECT 1 FROM donto_memory_chunk r WHERE "
                                  "r.chunk_id = x.id AND NOT upper_inf(r.tx_time))",
};
/* GONE[claim] when the ids travel as uuid[] too: no cast per row. */
static const char *const GONE_CLAIM_UUID =
    "OR EXISTS (SELECT 1 FROM donto_statement r WHERE r.statement_id = x.k "
    "AND NOT upper_inf(r.tx_time))";

static void put_be32(cbuf *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    cb_put(b, (const char *)x, 4);
}
static void put_be16(cbuf *b, uint16_t v) {
    unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)v};
    cb_put(b, (const char *)x, 2);
}
/* A length-prefixed string: an element of a binary array, a field of a
 * binary COPY row. */
static void put_lstr(cbuf *b, const char *v) {
    size_t len = strlen(v);
    put_be32(b, (uint32_t)len);
    cb_put(b, v, len);
}
/* Header of a one-dimensional binary array (array_recv) of n elements, no
 * NULLs. The server copies each element as it is: no quoting, no parsing. */
static void array_head_bin(cbuf *b, uint32_t elem_oid, size_t n) {
    put_be32(b, 1), put_be32(b, 0), put_be32(b, elem_oid);
    put_be32(b, (uint32_t)n), put_be32(b, 1);
}

/* The 16 bytes of a uuid in its canonical text form (8-4-4-4-12 lower-case
 * hex, as uuid_out writes it). */
static int uuid_bytes(const char *s, unsigned char out[16]) {
    int j = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return -1;
            continue;
        }
        int c = (unsigned char)s[i], v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else return -1; /* upper case too: the text must be what uuid_out gives */
        if (j & 1) out[j / 2] = (unsigned char)(out[j / 2] | v);
        else out[j / 2] = (unsigned char)(v << 4);
        j++;
    }
    return s[36] ? -1 : 0;
}

/* A batch's rows in the order of the queue's key (target, item_id, model):
 * sorted inserts touch each index page once, not once per row. Claims sort
 * by their uuid's bytes, which is the order of the canonical text too;
 * other ids by their bytes (the key's order under the C collation, and
 * only a little less local under another). */
typedef struct enq_key {
    unsigned char u[16];
    const char *id;
    const char *text;
} enq_key;
static int cmp_ukey(const void *a, const void *b) {
    return memcmp(((const enq_key *)a)->u, ((const enq_key *)b)->u, 16);
}
static int cmp_tkey(const void *a, const void *b) {
    return strcmp(((const enq_key *)a)->id, ((const enq_key *)b)->id);
}

/* Queue (ids[i], texts[i]), i < n, on a writer's connection:
 *
 * 1. One probe statement returns the rows that have gone since the cursor's
 *    snapshot: a vector stored meanwhile, or the item retracted (GONE).
 * 2. COPY ... FROM STDIN (FORMAT binary) of the others, in key order. No
 *    ON CONFLICT: the cursor left out everything queued in its snapshot.
 *    COPY inserts a page of heap rows with one WAL record and runs no
 *    executor per row; the same batch through INSERT .. SELECT over
 *    unnest() with the probes inside took about a fifth longer.
 * 3. A row that a concurrent enqueue queued since the snapshot makes the
 *    COPY fail whole with unique_violation; the same rows then go again as
 *    INSERT .. ON CONFLICT DO NOTHING, so the outcome is the same.
 *
 * Each statement commits on its own (the probe writes nothing, and each
 * insert is the whole batch or nothing). Returns 0, -1 (err set), or -2:
 * deadlock or serialization failure, nothing inserted, the caller may run
 * the batch again. */
static int enq_put(PGconn *c, donto_target t, const char *model, const char *const *ids,
                   const char *const *texts, size_t n, size_t *added, donto_err *err) {
    *added = 0;
    if (n == 0) return 0;
    if (n > INT32_MAX / 2) return donto_seterr(err, "enqueue: batch of %zu rows is too large", n);
    enq_key *key = donto_xmalloc(n * sizeof *key);
    int as_uuid = t == DONTO_TARGET_CLAIM;
    for (size_t i = 0; i < n; i++) {
        key[i].id = ids[i], key[i].text = texts[i];
        if (as_uuid && uuid_bytes(ids[i], key[i].u)) as_uuid = 0;
    }
    qsort(key, n, sizeof *key, as_uuid ? cmp_ukey : cmp_tkey);

    cbuf a_k = {0}, a_id = {0}, a_text = {0}, cp = {0};
    char tnum[8], sql[1024];
    snprintf(tnum, sizeof tnum, "%d", (int)t);
    PGresult *r = NULL;
    unsigned char *gone = NULL;
    int rc = 0;

    /* 1: the probe, over the ids in key order (the index probes too are
     * local), returning the 1-based positions of what has gone */
    array_head_bin(&a_id, 25 /* text */, n);
    for (size_t i = 0; i < n; i++) put_lstr(&a_id, key[i].id);
    if (as_uuid) {
        array_head_bin(&a_k, 2950 /* uuid */, n);
        for (size_t i = 0; i < n; i++) {
            put_be32(&a_k, 16);
            cb_put(&a_k, (const char *)key[i].u, 16);
        }
    }
    if (a_id.n > INT32_MAX || a_k.n > INT32_MAX) {
        rc = donto_seterr(err, "enqueue: batch of %zu rows is over 2 GB", n);
        goto out;
    }
    snprintf(sql, sizeof sql,
             "SELECT x.i FROM unnest($3::text[]%s) WITH ORDINALITY AS x(id%s, i) "
             "WHERE EXISTS (SELECT 1 FROM vectors v WHERE v.target = $1::smallint "
             "AND v.item_id = x.id AND v.model = $2) %s",
             as_uuid ? ", $4::uuid[]" : "", as_uuid ? ", k" : "",
             as_uuid ? GONE_CLAIM_UUID : GONE[t]);
    {
        const char *pv[4] = {tnum, model, a_id.p, a_k.p};
        const Oid types[4] = {0, 0, 1009 /* text[] */, 2951 /* uuid[] */};
        const int lens[4] = {0, 0, (int)a_id.n, (int)a_k.n}, fmts[4] = {0, 0, 1, 1};
        r = PQexecParams(c, sql, as_uuid ? 4 : 3, types, pv, lens, fmts, 0);
    }
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        rc = fail(c, r, err, "enqueue: probe");
        r = NULL;
        goto out;
    }
    gone = donto_xcalloc(n, 1);
    for (int i = 0; i < PQntuples(r); i++) {
        long long pos = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        if (pos >= 1 && (size_t)pos <= n) gone[pos - 1] = 1;
    }
    PQclear(r);
    r = NULL;

    size_t keep = 0;
    for (size_t i = 0; i < n; i++) keep += !gone[i];
    if (keep == 0) goto out;

    /* 2: COPY the rest; binary rows: a field count, then each field's
     * length and bytes (target: int2, big-endian) */
    static const char sig[11] = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\377', '\r', '\n', '\0'};
    cb_put(&cp, sig, sizeof sig);
    put_be32(&cp, 0), put_be32(&cp, 0); /* flags, header extension */
    for (size_t i = 0; i < n; i++) {
        if (gone[i]) continue;
        put_be16(&cp, 4);
        put_be32(&cp, 2), put_be16(&cp, (uint16_t)t);
        put_lstr(&cp, key[i].id), put_lstr(&cp, model), put_lstr(&cp, key[i].text);
    }
    put_be16(&cp, 0xffff); /* trailer */
    r = PQexec(c, "COPY queue (target, item_id, model, text) FROM STDIN (FORMAT binary)");
    if (PQresultStatus(r) != PGRES_COPY_IN) {
        rc = fail(c, r, err, "enqueue: copy");
        r = NULL;
        goto out;
    }
    PQclear(r);
    int sent = 1;
    for (size_t off = 0; off < cp.n && sent == 1;) { /* in pieces: PQputCopyData takes an int */
        size_t len = cp.n - off < (1u << 24) ? cp.n - off : (1u << 24);
        sent = PQputCopyData(c, cp.p + off, (int)len);
        off += len;
    }
    if (sent != 1 || PQputCopyEnd(c, NULL) != 1) {
        rc = fail(c, NULL, err, "enqueue: copy");
        for (PGresult *x; (x = PQgetResult(c));) PQclear(x);
        goto out;
    }
    r = PQgetResult(c);
    for (PGresult *x; (x = PQgetResult(c));) PQclear(x);
    const char *st = PQresultStatus(r) == PGRES_COMMAND_OK ? NULL
                     : PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (st && !strcmp(st, "23505")) {
        /* 3: someone queued part of this batch meanwhile */
        PQclear(r);
        a_id.n = 0;
        array_head_bin(&a_id, 25, keep);
        array_head_bin(&a_text, 25, keep);
        for (size_t i = 0; i < n; i++)
            if (!gone[i]) put_lstr(&a_id, key[i].id), put_lstr(&a_text, key[i].text);
        if (a_text.n > INT32_MAX) {
            rc = donto_seterr(err, "enqueue: batch of %zu rows is over 2 GB", n);
            r = NULL;
            goto out;
        }
        const char *pv[4] = {tnum, model, a_id.p, a_text.p};
        const Oid types[4] = {0, 0, 1009, 1009};
        const int lens[4] = {0, 0, (int)a_id.n, (int)a_text.n}, fmts[4] = {0, 0, 1, 1};
        r = PQexecParams(c,
                         "INSERT INTO queue (target, item_id, model, text) "
                         "SELECT $1::smallint, x.id, $2, x.text FROM unnest($3::text[], $4::text[]) "
                         "AS x(id, text) ON CONFLICT DO NOTHING",
                         4, types, pv, lens, fmts, 0);
        st = PQresultStatus(r) == PGRES_COMMAND_OK ? NULL : PQresultErrorField(r, PG_DIAG_SQLSTATE);
    }
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        /* deadlock (with a concurrent inserter of the same items in another
         * order) or serialization failure: the caller may run it again */
        int again = st && (!strcmp(st, "40P01") || !strcmp(st, "40001"));
        rc = fail(c, r, err, "enqueue");
        if (again) rc = -2;
        r = NULL;
        goto out;
    }
    *added = (size_t)strtoull(PQcmdTuples(r), NULL, 10);
out:
    PQclear(r);
    free(gone);
    free(key);
    free(a_k.p), free(a_id.p), free(a_text.p), free(cp.p);
    return rc;
}

static void quiet_notice(void *arg, const char *msg) {
    (void)arg;
    (void)msg; /* "relation already exists, skipping" */
}

/* A second connection with the same parameters as c. */
static PGconn *clone_conn(PGconn *c, donto_err *err) {
    PQconninfoOption *opt = PQconninfo(c);
    if (!opt) return donto_seterr(err, "postgres: connection parameters: out of memory"), NULL;
    size_t n = 0;
    for (PQconninfoOption *o = opt; o->keyword; o++) n++;
    const char **k = donto_xcalloc(n + 1, sizeof *k), **v = donto_xcalloc(n + 1, sizeof *v);
    size_t m = 0;
    for (PQconninfoOption *o = opt; o->keyword; o++) {
        if (!o->val) continue;
        k[m] = o->keyword;
        v[m++] = o->val;
    }
    PGconn *d = PQconnectdbParams(k, v, 0);
    free(k);
    free(v);
    PQconninfoFree(opt);
    if (!d || PQstatus(d) != CONNECTION_OK) {
        if (d) fail(d, NULL, err, "second connection");
        else donto_seterr(err, "postgres: second connection: out of memory");
        PQfinish(d);
        return NULL;
    }
    PQsetNoticeProcessor(d, quiet_notice, NULL);
    return d;
}

/* ---- enqueue ---------------------------------------------------------------
 *
 * One pass, linear in the substrate: a cursor (one snapshot, hash joins, no
 * ORDER BY) on this handle's connection is read in batches; writer threads,
 * each with its own connection, render a batch in C and commit it, so an
 * interrupted run keeps every batch it committed (resumable) and a rerun
 * skips them (the cursor's anti-join, and the fallback to ON CONFLICT:
 * idempotent). A keyset loop (ORDER BY id LIMIT n per batch) would re-join
 * the remainder for every batch: quadratic.
 *
 * Why writer threads: the server backend that inserts is the bottleneck
 * (heap, WAL and two index entries per row, one core), while the cursor's
 * backend and this process use a fraction of another. Two writers put the
 * inserts on two backends. */

enum { ENQ_WRITERS = 2, ENQ_SLOTS = 1 };
/* work_mem of the cursor's transaction: an upper bound for each hash
 * table, used only as far as the data needs it. */
#define ENQ_WORK_MEM "256MB"

/* A fetched batch: the cursor's result and a view of its cells (pointers
 * into the result, not copies: 8 cells a row, a malloc each, cost more than
 * rendering the row). */
typedef struct enq_batch {
    PGresult *res;
    sub_rows view;
} enq_batch;

static void enq_batch_view(PGresult *r, int ncols, enq_batch *b) {
    size_t n = (size_t)PQntuples(r);
    b->res = r;
    b->view = (sub_rows){.ncols = ncols, .nrows = n, .cap = n};
    b->view.cell = donto_xmalloc((n ? n : 1) * (size_t)ncols * sizeof *b->view.cell);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < ncols; c++)
            b->view.cell[i * (size_t)ncols + (size_t)c] =
                PQgetisnull(r, (int)i, c) ? NULL : PQgetvalue(r, (int)i, c);
}

static void enq_batch_free(enq_batch *b) {
    free(b->view.cell); /* the cells belong to the result */
    PQclear(b->res);
    *b = (enq_batch){0};
}

typedef struct enq_shared {
    pthread_mutex_t mu;
    pthread_cond_t can_put, can_take;
    enq_batch slot[ENQ_SLOTS]; /* fetched batches waiting for a writer */
    int head, count;
    int eof;                  /* the reader has put its last batch */
    int failed;               /* a writer failed: everyone stops */
    donto_err err;            /* the first failure */
    donto_target t;
    const char *model;
    const donto_render_opts *ro;
    donto_progress_fn progress;
    void *ctx;
    size_t base, added;
} enq_shared;

typedef struct enq_writer {
    enq_shared *sh;
    PGconn *c;
    pthread_t th;
    int started;
} enq_writer;

static void enq_fail(enq_shared *sh, const donto_err *e) {
    pthread_mutex_lock(&sh->mu);
    if (!sh->failed) sh->failed = 1, sh->err = *e;
    pthread_cond_broadcast(&sh->can_put);
    pthread_cond_broadcast(&sh->can_take);
    pthread_mutex_unlock(&sh->mu);
}

/* Render and commit one batch through this writer's connection. */
static int enq_write(enq_writer *w, sub_rows *rows, size_t *got, donto_err *err) {
    enq_shared *sh = w->sh;
    size_t n = rows->nrows;
    const char **ids = donto_xmalloc(n * sizeof *ids);
    char **texts = donto_xmalloc(n * sizeof *texts);
    for (size_t i = 0; i < n; i++) {
        ids[i] = sub_cell(rows, i, 0);
        texts[i] = sub_render(sh->t, rows, i, sh->ro);
    }
    int rc = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (attempt) nanosleep(&(struct timespec){0, 20000000L * attempt}, NULL);
        rc = enq_put(w->c, sh->t, sh->model, ids, (const char *const *)texts, n, got, err);
        if (rc != -2) break; /* a deadlock victim goes again; nothing of it was committed */
    }
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(ids);
    return rc;
}

static void *enq_writer_main(void *arg) {
    enq_writer *w = arg;
    enq_shared *sh = w->sh;
    for (;;) {
        pthread_mutex_lock(&sh->mu);
        while (sh->count == 0 && !sh->eof && !sh->failed) pthread_cond_wait(&sh->can_take, &sh->mu);
        if (sh->failed || sh->count == 0) { /* failed, or eof and drained */
            pthread_mutex_unlock(&sh->mu);
            return NULL;
        }
        enq_batch rows = sh->slot[sh->head];
        sh->head = (sh->head + 1) % ENQ_SLOTS, sh->count--;
        pthread_cond_signal(&sh->can_put);
        pthread_mutex_unlock(&sh->mu);

        donto_err err = {0};
        size_t got = 0;
        int rc = enq_write(w, &rows.view, &got, &err);
        enq_batch_free(&rows);
        if (rc) {
            enq_fail(sh, &err);
            return NULL;
        }
        pthread_mutex_lock(&sh->mu);
        sh->added += got;
        if (sh->progress) sh->progress(sh->ctx, donto_target_name(sh->t), sh->base + sh->added, 0);
        pthread_mutex_unlock(&sh->mu);
    }
}

/* Hand a fetched batch to the writers (blocks while the slots are full).
 * Returns -1 when a writer has failed: the batch is dropped, not queued. */
static int enq_hand_over(enq_shared *sh, enq_batch *rows) {
    pthread_mutex_lock(&sh->mu);
    while (sh->count == ENQ_SLOTS && !sh->failed) pthread_cond_wait(&sh->can_put, &sh->mu);
    int failed = sh->failed;
    if (!failed) {
        sh->slot[(sh->head + sh->count) % ENQ_SLOTS] = *rows;
        sh->count++;
        pthread_cond_signal(&sh->can_take);
    }
    pthread_mutex_unlock(&sh->mu);
    if (failed) enq_batch_free(rows);
    return failed ? -1 : 0;
}

static int pg_enqueue(donto_store *s, donto_target t, const char *model,
                      const donto_render_opts *ro, int batch, donto_progress_fn progress,
                      void *ctx, size_t base, size_t *added, donto_err *err) {
    *added = 0;
    PGconn *a = conn_of(s);
    if (!a) return donto_seterr(err, "postgres: no connection");
    enq_shared sh = {.t = t, .model = model, .ro = ro, .progress = progress, .ctx = ctx, .base = base};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.can_put, NULL);
    pthread_cond_init(&sh.can_take, NULL);
    enq_writer w[ENQ_WRITERS] = {{0}};
    int rc = -1;
    for (int i = 0; i < ENQ_WRITERS; i++) {
        w[i].sh = &sh;
        /* A session of its own, so the setting lasts as long as the
         * writer: commits do not wait for the WAL flush. A crash loses at
         * most the last few batches, which a rerun queues again. */
        if (!(w[i].c = clone_conn(a, err)) ||
            cmd(w[i].c, "SET synchronous_commit = off", "set synchronous_commit", err))
            goto out;
    }
    const char *cur = TGT[t].cur ? TGT[t].cur : TGT[t].sel;
    const char *cur_id = TGT[t].cur_id ? TGT[t].cur_id : TGT[t].id;
    char sql[2048], fetch[64];
    snprintf(sql, sizeof sql,
             "DECLARE sub_cur NO SCROLL CURSOR FOR %s AND NOT EXISTS (SELECT 1 FROM vectors v "
             "WHERE v.target = %d AND v.item_id = %s AND v.model = $1) AND NOT EXISTS "
             "(SELECT 1 FROM queue q WHERE q.target = %d AND q.item_id = %s AND q.model = $1)",
             cur, (int)t, cur_id, (int)t, cur_id);
    snprintf(fetch, sizeof fetch, "FETCH FORWARD %d FROM sub_cur", batch);
    /* The read side may run longer than the store's 30 s statement limit
     * and sits idle in its transaction while the writers write. */
    if (cmd(a, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin", err) ||
        cmd(a, "SET LOCAL statement_timeout = 0", "set timeout", err) ||
        cmd(a, "SET LOCAL idle_in_transaction_session_timeout = 0", "set timeout", err) ||
        /* A full pass: hash joins are right whatever the statistics say (a
         * queue that grew since the last ANALYZE looked empty to the planner,
         * which then chose a nested loop over a sequential scan: minutes). */
        cmd(a, "SET LOCAL enable_nestloop = off", "set planner", err) ||
        /* The entities' hash tables in memory: with the default 4 MB a
         * million claims' joins spilled to temporary files. */
        cmd(a, "SET LOCAL work_mem = '" ENQ_WORK_MEM "'", "set work_mem", err))
        goto out;
    const char *pv[1] = {model};
    PGresult *r = PQexecParams(a, sql, 1, NULL, pv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fail(a, r, err, "declare cursor");
        goto out;
    }
    PQclear(r);
    for (int i = 0; i < ENQ_WRITERS; i++) {
        if (pthread_create(&w[i].th, NULL, enq_writer_main, &w[i])) {
            donto_seterr(err, "enqueue: cannot start a writer thread");
            goto out;
        }
        w[i].started = 1;
    }
    /* The next FETCH runs on the server while the last batch is handed over. */
    if (!PQsendQuery(a, fetch)) {
        fail(a, NULL, err, "fetch");
        goto out;
    }
    for (;;) {
        r = PQgetResult(a);
        for (PGresult *x; (x = PQgetResult(a));) PQclear(x);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fail(a, r, err, "fetch");
            goto out;
        }
        enq_batch rows;
        enq_batch_view(r, SUB_SCAN_COLS[t], &rows);
        size_t n = rows.view.nrows;
        if (n == 0) {
            enq_batch_free(&rows);
            break;
        }
        if (n == (size_t)batch && !PQsendQuery(a, fetch)) {
            enq_batch_free(&rows);
            fail(a, NULL, err, "fetch");
            goto out;
        }
        if (enq_hand_over(&sh, &rows)) goto out; /* a writer failed */
        if (n < (size_t)batch) break;
    }
    rc = 0;
out:
    pthread_mutex_lock(&sh.mu);
    sh.eof = 1;
    if (rc) sh.failed = 1; /* the writers stop after the batch they hold */
    pthread_cond_broadcast(&sh.can_take);
    pthread_mutex_unlock(&sh.mu);
    for (int i = 0; i < ENQ_WRITERS; i++)
        if (w[i].started) pthread_join(w[i].th, NULL);
    for (int i = 0; i < sh.count; i++) enq_batch_free(&sh.slot[(sh.head + i) % ENQ_SLOTS]);
    if (sh.failed && sh.err.msg[0]) *err = sh.err, rc = -1;
    *added = sh.added;
    if (PQtransactionStatus(a) != PQTRANS_IDLE) {
        for (PGresult *x; (x = PQgetResult(a));) PQclear(x); /* a FETCH still in flight */
        PQclear(PQexec(a, rc ? "ROLLBACK" : "COMMIT"));
    }
    for (int i = 0; i < ENQ_WRITERS; i++) PQfinish(w[i].c);
    pthread_cond_destroy(&sh.can_put);
    pthread_cond_destroy(&sh.can_take);
    pthread_mutex_destroy(&sh.mu);
    return rc;
}

static int pg_fetch(donto_store *s, donto_target t, const char *const *ids, size_t n,
                    sub_rows *out, donto_err *err) {
    PGconn *c = conn_of(s);
    if (!c) return donto_seterr(err, "postgres: no connection");
    out->ncols = SUB_SCAN_COLS[t];
    if (n == 0) return 0;
    char sql[1024];
    snprintf(sql, sizeof sql, "%s AND %s = ANY($1::%s[])", TGT[t].sel, TGT[t].key, TGT[t].type);
    char *arr = array_lit(ids, n);
    const char *pv[1] = {arr};
    PGresult *r = PQexecParams(c, sql, 1, NULL, pv, NULL, NULL, 0);
    free(arr);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return fail(c, r, err, "fetch");
    collect(r, out);
    PQclear(r);
    return 0;
}

static int pg_counts(donto_store *s, int64_t out[DONTO_TARGET_N], donto_err *err) {
    PGconn *c = conn_of(s);
    if (!c) return donto_seterr(err, "postgres: no connection");
    PGresult *r = PQexec(c,
                         "SELECT (SELECT count(*) FROM donto_statement WHERE upper_inf(tx_time)), "
                         "(SELECT count(*) FROM donto_predicate), "
                         "(SELECT count(*) FROM donto_entity_symbol), "
                         "(SELECT count(*) FROM donto_memory_chunk WHERE upper_inf(tx_time))");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return fail(c, r, err, "count");
    for (int t = 0; t < DONTO_TARGET_N; t++) out[t] = strtoll(PQgetvalue(r, 0, t), NULL, 10);
    PQclear(r);
    return 0;
}

const sub_ops SUB_PG_OPS = {
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .put = pg_put,
    .retract = pg_retract,
    .fetch = pg_fetch,
    .counts = pg_counts,
    .enqueue = pg_enqueue,
};
