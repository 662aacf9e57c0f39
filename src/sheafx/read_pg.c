/* donto-accel: the sheaf export's reader for PostgreSQL. Three
 * `COPY (SELECT ...) TO STDOUT (FORMAT binary)` passes in one REPEATABLE READ
 * transaction (one snapshot): statements hash-joined server-side with their
 * claim vectors, arguments, entity vectors. Binary COPY because it is the
 * cheapest way out of the server: no per-row result objects (single-row mode
 * costs one PGresult per row), no text formatting of uuids, times and the
 * vectors' bytea on the server and no parsing here. COPY takes no parameters,
 * so the model name goes in as an escaped literal (PQescapeLiteral). */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sheafx_int.h"

static int pg_fail(PGconn *c, PGresult *r, donto_err *err, const char *what) {
    donto_seterrc(err, DONTO_E_UNAVAILABLE, "postgres: %s: %s", what,
                  r ? PQresultErrorMessage(r) : PQerrorMessage(c));
    /* one line */
    for (char *p = err->msg; *p; p++)
        if (*p == '\n') *p = *(p + 1) ? ' ' : 0;
    if (r) PQclear(r);
    return -1;
}

static int exec_ok(PGconn *c, const char *sql, donto_err *err) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) return pg_fail(c, r, err, sql);
    PQclear(r);
    return 0;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static int64_t be64(const uint8_t *p) { return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4)); }

typedef struct fld {
    const uint8_t *p;
    int32_t len; /* -1 NULL */
} fld;

typedef int (*row_fn)(sx_data *d, const fld *f, donto_err *err);

/* Run one binary COPY and hand each row's fields to fn. */
static int copy_rows(PGconn *c, const char *sql, int nf, row_fn fn, sx_data *d, const donto_sheafx_opts *o,
                     const char *phase, donto_err *err) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COPY_OUT) return pg_fail(c, r, err, phase);
    PQclear(r);
    char *buf;
    int len, first = 1, rc = 0;
    int64_t n = 0;
    fld f[16];
    while ((len = PQgetCopyData(c, &buf, 0)) > 0) {
        const uint8_t *p = (const uint8_t *)buf, *end = p + len;
        if (first) { /* signature (11), flags (4), extension length (4) + extension */
            if (len < 19 || memcmp(p, "PGCOPY\n\377\r\n\0", 11)) rc = donto_seterr(err, "postgres: %s: not a binary COPY", phase);
            else p += 19 + be32(p + 15);
            first = 0;
        }
        if (rc == 0 && end - p >= 2) {
            int16_t k = (int16_t)be16(p);
            p += 2;
            if (k == -1) { /* trailer */
            } else if (k != nf) {
                rc = donto_seterr(err, "postgres: %s: %d fields, expected %d", phase, k, nf);
            } else {
                for (int i = 0; i < nf && rc == 0; i++) {
                    if (end - p < 4) { rc = donto_seterr(err, "postgres: %s: truncated row", phase); break; }
                    f[i].len = (int32_t)be32(p);
                    p += 4;
                    f[i].p = p;
                    if (f[i].len > 0) {
                        if (end - p < f[i].len) { rc = donto_seterr(err, "postgres: %s: truncated row", phase); break; }
                        p += f[i].len;
                    }
                }
                if (rc == 0) rc = fn(d, f, err);
                if (rc == 0 && o->progress && (++n & 65535) == 0) o->progress(o->ctx, phase, n, 0);
            }
        }
        PQfreemem(buf);
        if (rc) break;
    }
    if (rc) { /* drain */
        while ((len = PQgetCopyData(c, &buf, 0)) > 0) PQfreemem(buf);
    } else if (len == -2) {
        return pg_fail(c, NULL, err, phase);
    }
    while ((r = PQgetResult(c))) {
        if (rc == 0 && PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = pg_fail(c, r, err, phase);
            continue;
        }
        PQclear(r);
    }
    return rc;
}

static int stmt_row(sx_data *d, const fld *f, donto_err *err) {
    if (f[0].len != 16 || f[1].len < 0 || f[3].len != 8 || f[5].len != 1 || f[6].len != 1 || (f[4].len != 8 && f[4].len != -1))
        return donto_seterr(err, "postgres: statements: unexpected row layout");
    int64_t until = f[4].len < 0 ? SX_OPEN : be64(f[4].p);
    return sx_add_stmt(d, f[0].p, (const char *)f[1].p, (size_t)f[1].len, f[2].len < 0 ? NULL : (const char *)f[2].p,
                       f[2].len < 0 ? 0 : (size_t)f[2].len, be64(f[3].p), until, f[5].p[0], f[6].p[0],
                       f[7].len < 0 ? NULL : f[7].p, f[7].len < 0 ? 0 : (size_t)f[7].len, err);
}

/* The same with a ninth field, donto_vector's embedding (store.h,
 * DONTO_VECTORS_DONTO): a claim whose ledger row in vectors has no bytes
 * (field 7 empty) has its vector there, a float4[] in the binary array
 * format (one dimension, no NULLs), read here into float32. */
static int stmt_row_donto(sx_data *d, const fld *f, donto_err *err) {
    if (f[7].len != 0) return stmt_row(d, f, err);
    fld g[8];
    memcpy(g, f, sizeof g);
    g[7].len = -1; /* no vector unless donto_vector has one */
    float v[4096];
    if (f[8].len >= 0) {
        const uint8_t *p = f[8].p;
        uint32_t n = f[8].len >= 20 ? be32(p + 12) : 0;
        if (f[8].len < 20 || be32(p) != 1 || be32(p + 8) != 700 || n == 0 || n > 4096 ||
            (int64_t)f[8].len != 20 + 8 * (int64_t)n)
            return donto_seterr(err, "postgres: statements: donto_vector.embedding is not a float4[] of one dimension");
        for (uint32_t k = 0; k < n; k++) {
            if (be32(p + 20 + 8 * k) != 4) return donto_seterr(err, "postgres: statements: a NULL in donto_vector.embedding");
            uint32_t bits = be32(p + 24 + 8 * k);
            memcpy(&v[k], &bits, 4);
        }
        g[7].p = (const uint8_t *)v;
        g[7].len = (int32_t)(4 * n);
    }
    return stmt_row(d, g, err);
}

static int arg_row(sx_data *d, const fld *f, donto_err *err) {
    if (f[0].len != 16 || f[1].len != 16 || f[2].len < 0 || f[3].len != 8 || f[5].len != 1 || (f[4].len != 8 && f[4].len != -1))
        return donto_seterr(err, "postgres: arguments: unexpected row layout");
    int64_t until = f[4].len < 0 ? SX_OPEN : be64(f[4].p);
    return sx_add_arg(d, f[0].p, f[1].p, (const char *)f[2].p, (size_t)f[2].len, be64(f[3].p), until, f[5].p[0], err);
}

static int evec_row(sx_data *d, const fld *f, donto_err *err) {
    if (f[0].len < 0 || f[1].len < 0) return donto_seterr(err, "postgres: entity vectors: unexpected row layout");
    return sx_add_entity_vec(d, (const char *)f[0].p, (size_t)f[0].len, f[1].p, (size_t)f[1].len, err);
}

/* Milliseconds, rounded up: the times compared with them (as_of, until) are
 * whole milliseconds, and "asserted at or before T" / "retracted after T"
 * must not flip for a row stamped a fraction of a millisecond after T
 * (PostgreSQL keeps microseconds). */
#define MS(col) "ceil(extract(epoch FROM " col ") * 1000)::int8"

int sx_read_pg(donto_store *s, const donto_sheafx_opts *o, sx_data *d, donto_err *err) {
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    PGconn *c = db.pg;
    char *model = PQescapeLiteral(c, o->model, strlen(o->model));
    if (!model) return pg_fail(c, NULL, err, "escape model name");
    char ids[1024];
    size_t n = 0;
    ids[0] = 0;
    for (int i = 0; SX_IDENTITY_PREDICATES[i]; i++)
        n += (size_t)snprintf(ids + n, sizeof ids - n, "%s'%s'", i ? ", " : "", SX_IDENTITY_PREDICATES[i]);
    const char *verified = s->verified_only ? " AND v.verified = 1" : "";
    size_t cap = 4608 + strlen(model);
    char *sql = donto_xmalloc(cap);
    int rc = -1;
    if (exec_ok(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err)) goto out;
    /* Big hash joins (a million claims and their vectors) in memory. */
    if (exec_ok(c, "SET LOCAL work_mem = '512MB'", err)) goto rollback;
    /* The store's 30 s statement timeout is for the coordinator's requests;
     * reading a large substrate is a batch job. */
    if (exec_ok(c, "SET LOCAL statement_timeout = 0", err)) goto rollback;
    { /* a model with no claim vectors at all: say so before the big read */
        snprintf(sql, cap, "SELECT EXISTS (SELECT 1 FROM vectors WHERE target = 0 AND model = %s)", model);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            pg_fail(c, r, err, "probe vectors");
            goto rollback;
        }
        int has = PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (!has) {
            sx_no_vectors(o->model, err);
            goto rollback;
        }
    }
    /* Under donto's layout (the handle's, store.h) a claim's ledger row in
     * vectors has an empty vec and its embedding is donto_vector's. */
    int donto = s->vectors == DONTO_VECTORS_DONTO;
    if (donto && donto_store_vectors_check(s, err)) goto rollback;
    snprintf(sql, cap,
             "COPY (SELECT s.statement_id, s.subject, s.object_iri, " MS("lower(s.tx_time)") ","
             " CASE WHEN upper_inf(s.tx_time) THEN NULL ELSE " MS("upper(s.tx_time)") " END,"
             " substr(s.context, 1, %d) = '%s', s.predicate IN (%s), v.vec%s"
             " FROM donto_statement s LEFT JOIN vectors v ON v.target = 0 AND v.model = %s"
             " AND v.item_id = s.statement_id::text%s%s"
             " WHERE lower(s.tx_time) <= to_timestamp(%lld / 1000.0)) TO STDOUT (FORMAT binary)",
             (int)strlen(DONTO_SHEAF_CONTEXT_PREFIX), DONTO_SHEAF_CONTEXT_PREFIX, ids, donto ? ", dv.embedding" : "",
             model, verified,
             donto ? " LEFT JOIN donto_vector dv ON octet_length(v.vec) = 0 AND dv.subject_type = 'statement'"
                     " AND dv.subject_id = s.statement_id AND dv.model_id = v.model"
                   : "",
             (long long)o->until);
    if (copy_rows(c, sql, donto ? 9 : 8, donto ? stmt_row_donto : stmt_row, d, o, "statements read", err))
        goto rollback;
    snprintf(sql, cap,
             "COPY (SELECT source_statement_id, target_statement_id, relation, " MS("lower(tx_time)") ","
             " CASE WHEN upper_inf(tx_time) THEN NULL ELSE " MS("upper(tx_time)") " END,"
             " substr(context, 1, %d) = '%s' FROM donto_argument"
             " WHERE lower(tx_time) <= to_timestamp(%lld / 1000.0)) TO STDOUT (FORMAT binary)",
             (int)strlen(DONTO_SHEAF_CONTEXT_PREFIX), DONTO_SHEAF_CONTEXT_PREFIX, (long long)o->until);
    if (copy_rows(c, sql, 6, arg_row, d, o, "arguments read", err)) goto rollback;
    snprintf(sql, cap,
             "COPY (SELECT item_id, vec FROM vectors v WHERE target = 2 AND model = %s%s) TO STDOUT (FORMAT binary)",
             model, verified);
    if (copy_rows(c, sql, 2, evec_row, d, o, "entity vectors read", err)) goto rollback;
    if (exec_ok(c, "COMMIT", err)) goto out;
    rc = 0;
    goto out;
rollback:
    PQclear(PQexec(c, "ROLLBACK"));
out:
    PQfreemem(model);
    free(sql);
    return rc;
}
