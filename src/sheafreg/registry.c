/* donto-accel: the sheaf model registry's rows (include/donto/sheaf_registry.h,
 * docs/sheaf-serving.md). The SQL of both engines side by side; one small
 * runner (q_run) executes a statement on whichever connection the store hands
 * out (donto_store_db) with text parameters and at most one binary one (the
 * checkpoint), and returns the rows as strings (blobs as bytes), so each
 * operation is written once.
 *
 * Transactions: writes that touch two rows (activate, add --activate) run in
 * one transaction, SQLite's BEGIN IMMEDIATE (one writer at a time) or
 * PostgreSQL's BEGIN + LOCK TABLE ... SHARE ROW EXCLUSIVE (writers queue,
 * readers do not wait); a reader of the active model is one SELECT, so it
 * sees the state before or after an activation, never between. The partial
 * unique index makes "one active per task" hold whatever the code does. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/sheaf_registry.h"

/* ---- a tiny statement runner over both engines ----------------------------- */

typedef struct cell {
    char *p;    /* NUL-terminated (blobs too, after their bytes) */
    size_t len;
    int null;
} cell;
typedef struct rows {
    int nrow, ncol;
    cell *c; /* [nrow][ncol] */
} rows;

static void rows_free(rows *r) {
    if (!r) return;
    for (int i = 0; i < r->nrow * r->ncol; i++) free(r->c[i].p);
    free(r->c);
    memset(r, 0, sizeof *r);
}
static const char *rs(const rows *r, int i, int j) { return r->c[i * r->ncol + j].null ? NULL : r->c[i * r->ncol + j].p; }
static int64_t ri(const rows *r, int i, int j) {
    const char *s = rs(r, i, j);
    return s ? strtoll(s, NULL, 10) : 0;
}

static char *dupn(const void *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}


static int missing_tables(donto_err *err, const char *detail) {
    return donto_seterrc(err, DONTO_E_SCHEMA,
                         "the sheaf model registry's tables are missing (%s): run with --migrate", detail);
}

/* Run sql (the engine's) with text params (NULL = SQL NULL) and, when blob is
 * given, the binary parameter number blob_at (1-based). out: the rows (NULL:
 * none wanted). */
static int q_run(const donto_db *db, const char *sql_lite, const char *sql_pg, int np, const char *const *params,
                 int blob_at, const void *blob, size_t bloblen, rows *out, donto_err *err) {
    if (out) memset(out, 0, sizeof *out);
    if (db->kind == DONTO_DB_SQLITE) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db->sqlite, sql_lite, -1, &st, NULL) != SQLITE_OK) {
            const char *m = sqlite3_errmsg(db->sqlite);
            donto_code dc = donto_db_code(db, NULL);
            return dc == DONTO_E_SCHEMA ? missing_tables(err, m) : donto_seterrc(err, dc, "sqlite: %s", m);
        }
        for (int i = 0; i < np; i++) {
            if (i + 1 == blob_at) sqlite3_bind_blob(st, i + 1, blob, (int)bloblen, SQLITE_STATIC);
            else if (params[i]) sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_STATIC);
            else sqlite3_bind_null(st, i + 1);
        }
        int rc, cap = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (!out) continue;
            int nc = sqlite3_column_count(st);
            out->ncol = nc;
            if (out->nrow == cap) {
                cap = cap ? 2 * cap : 8;
                cell *c = realloc(out->c, (size_t)cap * nc * sizeof *c);
                if (!c) {
                    sqlite3_finalize(st);
                    rows_free(out);
                    return donto_seterrc(err, DONTO_E_NOMEM, "sqlite: out of memory reading rows");
                }
                out->c = c;
            }
            for (int j = 0; j < nc; j++) {
                cell *c = &out->c[out->nrow * nc + j];
                c->null = sqlite3_column_type(st, j) == SQLITE_NULL;
                const void *p = sqlite3_column_type(st, j) == SQLITE_BLOB ? sqlite3_column_blob(st, j)
                                                                          : (const void *)sqlite3_column_text(st, j);
                c->len = (size_t)sqlite3_column_bytes(st, j);
                c->p = dupn(p ? p : "", p ? c->len : 0);
            }
            out->nrow++;
        }
        if (rc != SQLITE_DONE) {
            donto_seterrc(err, donto_db_code(db, NULL), "sqlite: %s", sqlite3_errmsg(db->sqlite));
            sqlite3_finalize(st);
            if (out) rows_free(out);
            return -1;
        }
        sqlite3_finalize(st);
        return 0;
    }
    int lens[12] = {0}, fmts[12] = {0};
    if (np > 12) return donto_seterrc(err, DONTO_E_INTERNAL, "registry: too many parameters");
    const char *pv[12] = {0};
    for (int i = 0; i < np; i++) {
        pv[i] = params[i];
        if (i + 1 == blob_at) pv[i] = blob, lens[i] = (int)bloblen, fmts[i] = 1;
    }
    PGresult *r = PQexecParams(db->pg, sql_pg, np, NULL, pv, lens, fmts, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorMessage(r);
        if (!msg || !*msg) msg = PQerrorMessage(db->pg);
        size_t l = strlen(msg);
        while (l && (msg[l - 1] == '\n' || msg[l - 1] == ' ')) l--;
        donto_code dc = donto_db_code(db, state);
        int rc = dc == DONTO_E_SCHEMA ? missing_tables(err, "relation does not exist")
                                      : donto_seterrc(err, dc, "postgres: %.*s", (int)l, msg);
        PQclear(r);
        return rc;
    }
    if (out && st == PGRES_TUPLES_OK) {
        out->nrow = PQntuples(r), out->ncol = PQnfields(r);
        out->c = calloc((size_t)out->nrow * out->ncol + 1, sizeof *out->c);
        for (int i = 0; out->c && i < out->nrow; i++)
            for (int j = 0; j < out->ncol; j++) {
                cell *c = &out->c[i * out->ncol + j];
                c->null = PQgetisnull(r, i, j);
                const char *v = PQgetvalue(r, i, j);
                if (PQftype(r, j) == 17 /* bytea */ && !c->null) {
                    size_t n = 0;
                    unsigned char *b = PQunescapeBytea((const unsigned char *)v, &n);
                    c->p = dupn(b ? (const char *)b : "", b ? n : 0), c->len = b ? n : 0;
                    PQfreemem(b);
                } else c->p = dupn(v, strlen(v)), c->len = strlen(v);
            }
    }
    PQclear(r);
    return 0;
}

static int q_exec(const donto_db *db, const char *lite, const char *pg, donto_err *err) {
    return q_run(db, lite, pg, 0, NULL, 0, NULL, 0, NULL, err);
}
static int q_begin(const donto_db *db, donto_err *err) {
    if (db->kind == DONTO_DB_SQLITE) return q_exec(db, "BEGIN IMMEDIATE", NULL, err);
    if (q_exec(db, NULL, "BEGIN", err)) return -1;
    if (q_exec(db, NULL, "LOCK TABLE donto_sheaf_model IN SHARE ROW EXCLUSIVE MODE", err)) {
        donto_err e2 = {0};
        q_exec(db, NULL, "ROLLBACK", &e2);
        return -1;
    }
    return 0;
}
static int q_commit(const donto_db *db, donto_err *err) { return q_exec(db, "COMMIT", "COMMIT", err); }
static void q_rollback(const donto_db *db) {
    donto_err e = {0};
    q_exec(db, "ROLLBACK", "ROLLBACK", &e);
}

static int get_db(donto_store *s, donto_db *db, donto_err *err) {
    if (donto_store_db(s, db, err)) return -1;
    if (db->kind != DONTO_DB_SQLITE && db->kind != DONTO_DB_POSTGRES)
        return donto_seterrc(err, DONTO_E_INVALID, "the sheaf model registry knows SQLite and PostgreSQL only");
    return 0;
}

/* ---- rows -> models ------------------------------------------------------------- */

#define COLS_LITE                                                                                           \
    "model_id, name, task, family, state, hparams, metrics, parity, export_digest, created_at, activated_at"
#define COLS_PG                                                                                             \
    "model_id, name, task, family, state, hparams::text, metrics::text, parity::text, export_digest,"      \
    " (extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM activated_at) * 1000)::bigint"

static char *sdup(const char *s) { return s ? dupn(s, strlen(s)) : NULL; }

static void fill(const rows *r, int i, donto_sheaf_reg_model *m, int with_ckpt) {
    memset(m, 0, sizeof *m);
    m->id = ri(r, i, 0);
    snprintf(m->name, sizeof m->name, "%s", rs(r, i, 1) ? rs(r, i, 1) : "");
    snprintf(m->task, sizeof m->task, "%s", rs(r, i, 2) ? rs(r, i, 2) : "");
    snprintf(m->family, sizeof m->family, "%s", rs(r, i, 3) ? rs(r, i, 3) : "");
    snprintf(m->state, sizeof m->state, "%s", rs(r, i, 4) ? rs(r, i, 4) : "");
    m->hparams = sdup(rs(r, i, 5));
    m->metrics = sdup(rs(r, i, 6));
    m->parity = sdup(rs(r, i, 7));
    m->export_digest = sdup(rs(r, i, 8));
    m->created_at = ri(r, i, 9);
    m->activated_at = ri(r, i, 10);
    m->parity_max_abs = NAN;
    json_t *pj = m->parity ? json_loads(m->parity, 0, NULL) : NULL;
    json_t *ma = json_object_get(pj, "max_abs");
    if (json_is_number(ma)) m->parity_max_abs = json_number_value(ma);
    json_decref(pj);
    if (with_ckpt && r->ncol > 11 && !r->c[i * r->ncol + 11].null) {
        const cell *c = &r->c[i * r->ncol + 11];
        m->checkpoint = (unsigned char *)dupn(c->p, c->len);
        m->checkpoint_len = c->len;
    }
}

void donto_sheaf_reg_model_free(donto_sheaf_reg_model *m) {
    if (!m) return;
    free(m->hparams), free(m->metrics), free(m->parity), free(m->export_digest), free(m->checkpoint);
    memset(m, 0, sizeof *m);
}
void donto_sheaf_reg_models_free(donto_sheaf_reg_model *m, size_t n) {
    for (size_t i = 0; m && i < n; i++) donto_sheaf_reg_model_free(&m[i]);
    free(m);
}

/* ---- operations --------------------------------------------------------------------- */

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

/* The row of ref (an id or a name), with the checkpoint when asked. */
static int find(const donto_db *db, const char *ref, int with_ckpt, rows *out, donto_err *err) {
    char lite[512], pg[512];
    const char *p[1] = {ref};
    if (all_digits(ref)) {
        snprintf(lite, sizeof lite, "SELECT " COLS_LITE "%s FROM donto_sheaf_model WHERE model_id = CAST(?1 AS INTEGER)",
                 with_ckpt ? ", checkpoint" : "");
        snprintf(pg, sizeof pg, "SELECT " COLS_PG "%s FROM donto_sheaf_model WHERE model_id = $1::bigint",
                 with_ckpt ? ", checkpoint" : "");
        if (q_run(db, lite, pg, 1, p, 0, NULL, 0, out, err)) return -1;
        if (out->nrow) return 0;
        rows_free(out);
    }
    snprintf(lite, sizeof lite, "SELECT " COLS_LITE "%s FROM donto_sheaf_model WHERE name = ?1",
             with_ckpt ? ", checkpoint" : "");
    snprintf(pg, sizeof pg, "SELECT " COLS_PG "%s FROM donto_sheaf_model WHERE name = $1", with_ckpt ? ", checkpoint" : "");
    if (q_run(db, lite, pg, 1, p, 0, NULL, 0, out, err)) return -1;
    if (!out->nrow) {
        rows_free(out);
        return donto_seterrc(err, DONTO_E_NOT_FOUND, "no model named '%s' in the registry%s", ref,
                             all_digits(ref) ? " (nor with that id)" : "");
    }
    return 0;
}

int donto_sheaf_registry_add(donto_store *s, const char *name, const char *task, const donto_sheaf_check *c,
                             const void *ckpt, size_t len, int activate, int64_t *id, donto_err *err) {
    donto_db db;
    if (!name || !*name || !task || !*task)
        return donto_seterrc(err, DONTO_E_INVALID, "a model needs a name and a task");
    if (get_db(s, &db, err) || q_begin(&db, err)) return -1;
    char now[32];
    snprintf(now, sizeof now, "%lld", (long long)donto_unix_ms());
    const char *pt[1] = {task};
    if (activate && q_run(&db, "UPDATE donto_sheaf_model SET state = 'retired' WHERE task = ?1 AND state = 'active'",
                          "UPDATE donto_sheaf_model SET state = 'retired' WHERE task = $1 AND state = 'active'", 1, pt,
                          0, NULL, 0, NULL, err))
        goto fail;
    const char *p[9] = {name, task, c->family, c->hparams, NULL, c->metrics, c->export_digest, c->parity, now};
    rows r;
    const char *lite = activate
                           ? "INSERT INTO donto_sheaf_model (name, task, family, hparams, checkpoint, metrics, export_digest,"
                             " parity, created_at, state, activated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
                             " CAST(?9 AS INTEGER), 'active', CAST(?9 AS INTEGER)) RETURNING model_id"
                           : "INSERT INTO donto_sheaf_model (name, task, family, hparams, checkpoint, metrics, export_digest,"
                             " parity, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, CAST(?9 AS INTEGER))"
                             " RETURNING model_id";
    const char *pg = activate
                         ? "INSERT INTO donto_sheaf_model (name, task, family, hparams, checkpoint, metrics, export_digest,"
                           " parity, state, activated_at) VALUES ($1, $2, $3, $4::jsonb, $5, $6::jsonb, $7, $8::jsonb,"
                           " 'active', now()) RETURNING model_id, $9::text"
                         : "INSERT INTO donto_sheaf_model (name, task, family, hparams, checkpoint, metrics, export_digest,"
                           " parity) VALUES ($1, $2, $3, $4::jsonb, $5, $6::jsonb, $7, $8::jsonb) RETURNING model_id, $9::text";
    if (q_run(&db, lite, pg, 9, p, 5, ckpt, len, &r, err)) {
        if (donto_err_code(err) == DONTO_E_CONFLICT)
            donto_seterrc(err, DONTO_E_CONFLICT, "a model named '%s' is already registered (choose another --name)", name);
        goto fail;
    }
    if (id) *id = r.nrow ? ri(&r, 0, 0) : 0;
    rows_free(&r);
    if (q_commit(&db, err)) goto fail;
    return 0;
fail:
    q_rollback(&db);
    return -1;
}

int donto_sheaf_registry_list(donto_store *s, const char *task, donto_sheaf_reg_model **out, size_t *n,
                              donto_err *err) {
    donto_db db;
    *out = NULL, *n = 0;
    if (get_db(s, &db, err)) return -1;
    rows r;
    const char *p[1] = {task};
    int rc = task ? q_run(&db, "SELECT " COLS_LITE " FROM donto_sheaf_model WHERE task = ?1 ORDER BY model_id",
                          "SELECT " COLS_PG " FROM donto_sheaf_model WHERE task = $1 ORDER BY model_id", 1, p, 0, NULL,
                          0, &r, err)
                  : q_run(&db, "SELECT " COLS_LITE " FROM donto_sheaf_model ORDER BY model_id",
                          "SELECT " COLS_PG " FROM donto_sheaf_model ORDER BY model_id", 0, NULL, 0, NULL, 0, &r, err);
    if (rc) return -1;
    *out = calloc((size_t)r.nrow + 1, sizeof **out);
    if (!*out) {
        rows_free(&r);
        return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < r.nrow; i++) fill(&r, i, &(*out)[i], 0);
    *n = (size_t)r.nrow;
    rows_free(&r);
    return 0;
}

int donto_sheaf_registry_get(donto_store *s, const char *ref, int with_ckpt, donto_sheaf_reg_model *out,
                             donto_err *err) {
    donto_db db;
    memset(out, 0, sizeof *out);
    rows r;
    if (get_db(s, &db, err) || find(&db, ref, with_ckpt, &r, err)) return -1;
    fill(&r, 0, out, with_ckpt);
    rows_free(&r);
    return 0;
}

int donto_sheaf_registry_activate(donto_store *s, const char *ref, int64_t *previous, donto_err *err) {
    donto_db db;
    if (previous) *previous = 0;
    if (get_db(s, &db, err) || q_begin(&db, err)) return -1;
    rows r, a;
    if (find(&db, ref, 0, &r, err)) goto fail;
    char id[32], task[64];
    snprintf(id, sizeof id, "%lld", (long long)ri(&r, 0, 0));
    snprintf(task, sizeof task, "%s", rs(&r, 0, 2));
    int already = !strcmp(rs(&r, 0, 4), "active");
    rows_free(&r);
    if (already) return q_commit(&db, err) ? (q_rollback(&db), -1) : 0;
    const char *pt[1] = {task};
    if (q_run(&db, "SELECT model_id FROM donto_sheaf_model WHERE task = ?1 AND state = 'active'",
              "SELECT model_id FROM donto_sheaf_model WHERE task = $1 AND state = 'active'", 1, pt, 0, NULL, 0, &a, err))
        goto fail;
    if (previous && a.nrow) *previous = ri(&a, 0, 0);
    rows_free(&a);
    if (q_run(&db, "UPDATE donto_sheaf_model SET state = 'retired' WHERE task = ?1 AND state = 'active'",
              "UPDATE donto_sheaf_model SET state = 'retired' WHERE task = $1 AND state = 'active'", 1, pt, 0, NULL, 0,
              NULL, err))
        goto fail;
    char now[32];
    snprintf(now, sizeof now, "%lld", (long long)donto_unix_ms());
    const char *p2[2] = {id, now};
    if (q_run(&db,
              "UPDATE donto_sheaf_model SET state = 'active', activated_at = CAST(?2 AS INTEGER)"
              " WHERE model_id = CAST(?1 AS INTEGER)",
              "UPDATE donto_sheaf_model SET state = 'active', activated_at = now() WHERE model_id = $1::bigint"
              " AND $2::text IS NOT NULL",
              2, p2, 0, NULL, 0, NULL, err))
        goto fail;
    if (q_commit(&db, err)) goto fail;
    return 0;
fail:
    q_rollback(&db);
    return -1;
}

int donto_sheaf_registry_retire(donto_store *s, const char *ref, donto_err *err) {
    donto_db db;
    if (get_db(s, &db, err) || q_begin(&db, err)) return -1;
    rows r;
    if (find(&db, ref, 0, &r, err)) goto fail;
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)ri(&r, 0, 0));
    rows_free(&r);
    const char *p[1] = {id};
    if (q_run(&db, "UPDATE donto_sheaf_model SET state = 'retired' WHERE model_id = CAST(?1 AS INTEGER)",
              "UPDATE donto_sheaf_model SET state = 'retired' WHERE model_id = $1::bigint", 1, p, 0, NULL, 0, NULL, err) ||
        q_commit(&db, err))
        goto fail;
    return 0;
fail:
    q_rollback(&db);
    return -1;
}

/* The active row of task, with its checkpoint bytes or without. */
static int active_row(donto_store *s, const char *task, int with_ckpt, donto_sheaf_reg_model *out, donto_err *err) {
    donto_db db;
    memset(out, 0, sizeof *out);
    if (get_db(s, &db, err)) return -1;
    rows r;
    const char *p[1] = {task};
    if (with_ckpt ? q_run(&db, "SELECT " COLS_LITE ", checkpoint FROM donto_sheaf_model WHERE task = ?1 AND state = 'active'",
                          "SELECT " COLS_PG ", checkpoint FROM donto_sheaf_model WHERE task = $1 AND state = 'active'", 1,
                          p, 0, NULL, 0, &r, err)
                  : q_run(&db, "SELECT " COLS_LITE " FROM donto_sheaf_model WHERE task = ?1 AND state = 'active'",
                          "SELECT " COLS_PG " FROM donto_sheaf_model WHERE task = $1 AND state = 'active'", 1, p, 0,
                          NULL, 0, &r, err))
        return -1;
    if (!r.nrow) {
        rows_free(&r);
        return donto_seterrc(err, DONTO_E_NOT_FOUND, "task '%s' has no active model", task);
    }
    fill(&r, 0, out, with_ckpt);
    rows_free(&r);
    return 0;
}

int donto_sheaf_registry_active(donto_store *s, const char *task, donto_sheaf_reg_model *out, donto_err *err) {
    return active_row(s, task, 1, out, err);
}

int donto_sheaf_registry_active_info(donto_store *s, const char *task, donto_sheaf_reg_model *out, donto_err *err) {
    return active_row(s, task, 0, out, err);
}
