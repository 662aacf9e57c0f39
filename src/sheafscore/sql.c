/* donto-accel: the score writer (score_int.h): donto_sheaf_score rows, proposed
 * arguments and the run row, on SQLite and PostgreSQL.
 *
 * A batch is buffered, then written in one transaction: SQLite BEGIN IMMEDIATE,
 * per item a DELETE of this model's older scores of (task, item, item2) and an
 * INSERT per class; PostgreSQL BEGIN, the rows COPY'd (text format) into a temp
 * table, one DELETE ... USING it and one INSERT ... SELECT from it. Proposed
 * arguments go to donto_argument with the context "sheaf:model-<name>"
 * (DONTO_SHEAF_CONTEXT_PREFIX), ON CONFLICT DO NOTHING (the unique source,
 * target, relation), so a rerun adds none twice. Times: ms (SQLite),
 * timestamptz (PostgreSQL). */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/sheaf_export.h"
#include "score_int.h"

int sc_task_parse(const char *t) {
    if (!t) return -1;
    if (!strcmp(t, "arg_link")) return SC_ARG_LINK;
    if (!strcmp(t, "identity")) return SC_IDENTITY;
    if (!strcmp(t, "claim_score")) return SC_CLAIM_SCORE;
    return -1;
}


/* COPY text: a field with \, tab, newline, CR escaped; NULL as \N. */
static void sb_field(donto_buf *s, const char *v) {
    if (!v) {
        donto_buf_put(s, "\\N", 2);
        return;
    }
    for (const char *p = v; *p; p++) {
        if (*p == '\\') donto_buf_put(s, "\\\\", 2);
        else if (*p == '\t') donto_buf_put(s, "\\t", 2);
        else if (*p == '\n') donto_buf_put(s, "\\n", 2);
        else if (*p == '\r') donto_buf_put(s, "\\r", 2);
        else donto_buf_put(s, p, 1);
    }
}

typedef struct prop {
    char *src, *dst, *rel;
    float p;
} prop;

struct sc_writer {
    donto_db db;
    int64_t model_id;
    char task[64], context[200], mid[24];
    /* the batch */
    char **item, **item2, **cls;
    float *prob;
    int *first; /* per row: 1 on the first class of an item */
    size_t n, cap;
    prop *props;
    size_t np, capp;
    sqlite3_stmt *del, *ins, *arg;
};

/* The store's classification of the failure (donto_db_code), and "run
 * with --migrate" where the tables are missing. */
static int lite_fail(sqlite3 *db, donto_err *err, const char *what) {
    const char *m = sqlite3_errmsg(db);
    const donto_db d = {DONTO_DB_SQLITE, db, NULL};
    donto_code code = donto_db_code(&d, NULL);
    if (code == DONTO_E_SCHEMA) return donto_seterrc(err, code, "%s: %s (run with --migrate)", what, m);
    return donto_seterrc(err, code, "sqlite: %s: %s", what, m);
}
static int pg_fail(PGresult *r, PGconn *c, donto_err *err, const char *what) {
    const char *m = r ? PQresultErrorMessage(r) : PQerrorMessage(c);
    if (!m || !*m) m = PQerrorMessage(c);
    const donto_db d = {DONTO_DB_POSTGRES, NULL, c};
    donto_code code = donto_db_code(&d, r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL);
    donto_seterrc(err, code, "postgres: %s: %.*s", what, (int)strcspn(m, "\n"), m);
    if (r) PQclear(r);
    return -1;
}
static int pg_exec(PGconn *c, const char *sql, int np, const char *const *pv, donto_err *err, const char *what) {
    PGresult *r = np ? PQexecParams(c, sql, np, NULL, pv, NULL, NULL, 0) : PQexec(c, sql);
    ExecStatusType t = PQresultStatus(r);
    if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) return pg_fail(r, c, err, what);
    PQclear(r);
    return 0;
}

int sc_last_watermark(donto_store *s, const char *task, int64_t model_id, int64_t *wm, donto_err *err) {
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    *wm = INT64_MIN;
    if (db.kind == DONTO_DB_SQLITE) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db.sqlite,
                               "SELECT watermark FROM donto_sheaf_score_run WHERE task = ?1 AND model_id = ?2"
                               " AND finished_at IS NOT NULL ORDER BY run_id DESC LIMIT 1",
                               -1, &q, NULL) != SQLITE_OK)
            return lite_fail(db.sqlite, err, "last run");
        sqlite3_bind_text(q, 1, task, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, model_id);
        int r = sqlite3_step(q);
        if (r == SQLITE_ROW) *wm = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        if (r != SQLITE_ROW && r != SQLITE_DONE) return lite_fail(db.sqlite, err, "last run");
        return 0;
    }
    char mid[24];
    snprintf(mid, sizeof mid, "%lld", (long long)model_id);
    const char *pv[2] = {task, mid};
    PGresult *r = PQexecParams(db.pg,
                               "SELECT round(extract(epoch FROM watermark) * 1000)::bigint FROM donto_sheaf_score_run"
                               " WHERE task = $1 AND model_id = $2::bigint AND finished_at IS NOT NULL"
                               " ORDER BY run_id DESC LIMIT 1",
                               2, NULL, pv, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) return pg_fail(r, db.pg, err, "last run");
    if (PQntuples(r) == 1) *wm = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return 0;
}

sc_writer *sc_writer_open(donto_store *s, int64_t model_id, const char *model_name, const char *task, donto_err *err) {
    sc_writer *w = donto_xcalloc(1, sizeof *w);
    if (donto_store_db(s, &w->db, err)) {
        free(w);
        return NULL;
    }
    w->model_id = model_id;
    snprintf(w->task, sizeof w->task, "%s", task);
    snprintf(w->context, sizeof w->context, "%smodel-%s", DONTO_SHEAF_CONTEXT_PREFIX, model_name);
    snprintf(w->mid, sizeof w->mid, "%lld", (long long)model_id);
    if (w->db.kind == DONTO_DB_SQLITE) {
        sqlite3 *d = w->db.sqlite;
        if (sqlite3_prepare_v2(d, "DELETE FROM donto_sheaf_score WHERE model_id = ?1 AND task = ?2 AND item = ?3 AND item2 IS ?4",
                               -1, &w->del, NULL) != SQLITE_OK ||
            sqlite3_prepare_v2(d, "INSERT INTO donto_sheaf_score (model_id, task, item, item2, class, probability, scored_at)"
                                  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                               -1, &w->ins, NULL) != SQLITE_OK ||
            sqlite3_prepare_v2(d, "INSERT INTO donto_argument (source_statement_id, target_statement_id, relation, strength,"
                                  " context, tx_from) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                               -1, &w->arg, NULL) != SQLITE_OK) {
            lite_fail(d, err, "prepare");
            sc_writer_close(w);
            return NULL;
        }
    } else if (pg_exec(w->db.pg,
                       "CREATE TEMP TABLE IF NOT EXISTS donto_sheaf_score_in (item text, item2 text, class text,"
                       " probability float8)",
                       0, NULL, err, "temp table")) {
        sc_writer_close(w);
        return NULL;
    }
    return w;
}

static void batch_clear(sc_writer *w) {
    for (size_t i = 0; i < w->n; i++) free(w->item[i]), free(w->item2[i]), free(w->cls[i]);
    for (size_t i = 0; i < w->np; i++) free(w->props[i].src), free(w->props[i].dst), free(w->props[i].rel);
    w->n = w->np = 0;
}

int sc_writer_begin(sc_writer *w, donto_err *err) {
    (void)err;
    batch_clear(w);
    return 0;
}

int sc_writer_item(sc_writer *w, const char *item, const char *item2, const char *const *cls, const float *p, int K,
                   donto_err *err) {
    (void)err;
    for (int k = 0; k < K; k++) {
        if (w->n == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 4096;
            w->item = donto_xrealloc(w->item, w->cap * sizeof *w->item);
            w->item2 = donto_xrealloc(w->item2, w->cap * sizeof *w->item2);
            w->cls = donto_xrealloc(w->cls, w->cap * sizeof *w->cls);
            w->prob = donto_xrealloc(w->prob, w->cap * sizeof *w->prob);
            w->first = donto_xrealloc(w->first, w->cap * sizeof *w->first);
        }
        w->item[w->n] = donto_xstrdup(item);
        w->item2[w->n] = item2 ? donto_xstrdup(item2) : NULL;
        w->cls[w->n] = donto_xstrdup(cls[k]);
        w->prob[w->n] = p[k];
        w->first[w->n++] = k == 0;
    }
    return 0;
}

int sc_writer_propose(sc_writer *w, const char *src, const char *dst, const char *rel, float p, donto_err *err) {
    (void)err;
    if (w->np == w->capp) w->props = donto_xrealloc(w->props, (w->capp = w->capp ? 2 * w->capp : 256) * sizeof *w->props);
    w->props[w->np++] = (prop){donto_xstrdup(src), donto_xstrdup(dst), donto_xstrdup(rel), p};
    return 0;
}

static int commit_lite(sc_writer *w, int64_t *rows, int64_t *proposed, donto_err *err) {
    sqlite3 *d = w->db.sqlite;
    if (sqlite3_exec(d, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return lite_fail(d, err, "begin");
    int64_t now = donto_unix_ms(), added = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (w->first[i]) {
            sqlite3_reset(w->del);
            sqlite3_bind_int64(w->del, 1, w->model_id);
            sqlite3_bind_text(w->del, 2, w->task, -1, SQLITE_STATIC);
            sqlite3_bind_text(w->del, 3, w->item[i], -1, SQLITE_STATIC);
            if (w->item2[i]) sqlite3_bind_text(w->del, 4, w->item2[i], -1, SQLITE_STATIC);
            else sqlite3_bind_null(w->del, 4);
            if (sqlite3_step(w->del) != SQLITE_DONE) goto fail;
        }
        sqlite3_reset(w->ins);
        sqlite3_bind_int64(w->ins, 1, w->model_id);
        sqlite3_bind_text(w->ins, 2, w->task, -1, SQLITE_STATIC);
        sqlite3_bind_text(w->ins, 3, w->item[i], -1, SQLITE_STATIC);
        if (w->item2[i]) sqlite3_bind_text(w->ins, 4, w->item2[i], -1, SQLITE_STATIC);
        else sqlite3_bind_null(w->ins, 4);
        sqlite3_bind_text(w->ins, 5, w->cls[i], -1, SQLITE_STATIC);
        sqlite3_bind_double(w->ins, 6, w->prob[i]);
        sqlite3_bind_int64(w->ins, 7, now);
        if (sqlite3_step(w->ins) != SQLITE_DONE) goto fail;
    }
    for (size_t i = 0; i < w->np; i++) {
        sqlite3_reset(w->arg);
        sqlite3_bind_text(w->arg, 1, w->props[i].src, -1, SQLITE_STATIC);
        sqlite3_bind_text(w->arg, 2, w->props[i].dst, -1, SQLITE_STATIC);
        sqlite3_bind_text(w->arg, 3, w->props[i].rel, -1, SQLITE_STATIC);
        sqlite3_bind_double(w->arg, 4, w->props[i].p);
        sqlite3_bind_text(w->arg, 5, w->context, -1, SQLITE_STATIC);
        sqlite3_bind_int64(w->arg, 6, now);
        if (sqlite3_step(w->arg) != SQLITE_DONE) goto fail;
        added += sqlite3_changes(d);
    }
    if (sqlite3_exec(d, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    *rows += (int64_t)w->n, *proposed += added;
    return 0;
fail:
    lite_fail(d, err, "writing scores");
    sqlite3_exec(d, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

static int commit_pg(sc_writer *w, int64_t *rows, int64_t *proposed, donto_err *err) {
    PGconn *c = w->db.pg;
    if (pg_exec(c, "BEGIN", 0, NULL, err, "begin")) return -1;
    donto_buf B = {0};
    char num[32];
    for (size_t i = 0; i < w->n; i++) {
        sb_field(&B, w->item[i]), donto_buf_put(&B, "\t", 1);
        sb_field(&B, w->item2[i]), donto_buf_put(&B, "\t", 1);
        sb_field(&B, w->cls[i]), donto_buf_put(&B, "\t", 1);
        int k = snprintf(num, sizeof num, "%.9g\n", (double)w->prob[i]);
        donto_buf_put(&B, num, (size_t)k);
    }
    int64_t added = 0;
    if (pg_exec(c, "TRUNCATE donto_sheaf_score_in", 0, NULL, err, "temp table")) goto fail;
    {
        PGresult *r = PQexec(c, "COPY donto_sheaf_score_in FROM STDIN");
        if (PQresultStatus(r) != PGRES_COPY_IN) {
            pg_fail(r, c, err, "copy");
            goto fail;
        }
        PQclear(r);
        if (PQputCopyData(c, B.p ? B.p : "", (int)B.len) != 1 || PQputCopyEnd(c, NULL) != 1) {
            pg_fail(NULL, c, err, "copy");
            goto fail;
        }
        r = PQgetResult(c);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            pg_fail(r, c, err, "copy");
            goto fail;
        }
        PQclear(r);
        while ((r = PQgetResult(c))) PQclear(r);
    }
    const char *pv[2] = {w->mid, w->task};
    if (pg_exec(c,
                "DELETE FROM donto_sheaf_score s USING (SELECT DISTINCT item, item2 FROM donto_sheaf_score_in) i"
                " WHERE s.model_id = $1::bigint AND s.task = $2 AND s.item = i.item AND s.item2 IS NOT DISTINCT FROM i.item2",
                2, pv, err, "replace scores") ||
        pg_exec(c,
                "INSERT INTO donto_sheaf_score (model_id, task, item, item2, class, probability, scored_at)"
                " SELECT $1::bigint, $2, item, item2, class, probability, now() FROM donto_sheaf_score_in",
                2, pv, err, "insert scores"))
        goto fail;
    for (size_t i = 0; i < w->np; i++) {
        char ps[32];
        snprintf(ps, sizeof ps, "%.9g", (double)w->props[i].p);
        const char *av[5] = {w->props[i].src, w->props[i].dst, w->props[i].rel, ps, w->context};
        PGresult *r = PQexecParams(c,
                                   "INSERT INTO donto_argument (source_statement_id, target_statement_id, relation, strength,"
                                   " context) VALUES ($1::uuid, $2::uuid, $3, $4::float8, $5) ON CONFLICT DO NOTHING",
                                   5, NULL, av, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            pg_fail(r, c, err, "propose argument");
            goto fail;
        }
        added += strtoll(PQcmdTuples(r), NULL, 10);
        PQclear(r);
    }
    if (pg_exec(c, "COMMIT", 0, NULL, err, "commit")) goto fail;
    donto_buf_free(&B);
    *rows += (int64_t)w->n, *proposed += added;
    return 0;
fail:
    donto_buf_free(&B);
    PQclear(PQexec(c, "ROLLBACK"));
    return -1;
}

int sc_writer_commit(sc_writer *w, int64_t *rows, int64_t *proposed, donto_err *err) {
    int rc = w->db.kind == DONTO_DB_SQLITE ? commit_lite(w, rows, proposed, err) : commit_pg(w, rows, proposed, err);
    batch_clear(w);
    return rc;
}

int sc_writer_finish(sc_writer *w, int64_t watermark, int64_t rows, donto_err *err) {
    if (w->db.kind == DONTO_DB_SQLITE) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(w->db.sqlite,
                               "INSERT INTO donto_sheaf_score_run (task, model_id, watermark, rows, finished_at)"
                               " VALUES (?1, ?2, ?3, ?4, ?5)",
                               -1, &q, NULL) != SQLITE_OK)
            return lite_fail(w->db.sqlite, err, "run row");
        sqlite3_bind_text(q, 1, w->task, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, w->model_id);
        sqlite3_bind_int64(q, 3, watermark);
        sqlite3_bind_int64(q, 4, rows);
        sqlite3_bind_int64(q, 5, donto_unix_ms());
        int r = sqlite3_step(q);
        sqlite3_finalize(q);
        return r == SQLITE_DONE ? 0 : lite_fail(w->db.sqlite, err, "run row");
    }
    char wm[32], rs[32];
    snprintf(wm, sizeof wm, "%lld", (long long)watermark);
    snprintf(rs, sizeof rs, "%lld", (long long)rows);
    const char *pv[4] = {w->task, w->mid, wm, rs};
    return pg_exec(w->db.pg,
                   "INSERT INTO donto_sheaf_score_run (task, model_id, watermark, rows, finished_at)"
                   " VALUES ($1, $2::bigint, to_timestamp($3::bigint / 1000.0), $4::bigint, now())",
                   4, pv, err, "run row");
}

void sc_writer_close(sc_writer *w) {
    if (!w) return;
    batch_clear(w);
    free(w->item), free(w->item2), free(w->cls), free(w->prob), free(w->first), free(w->props);
    if (w->del) sqlite3_finalize(w->del);
    if (w->ins) sqlite3_finalize(w->ins);
    if (w->arg) sqlite3_finalize(w->arg);
    free(w);
}
