/* donto-accel: the substrate on SQLite. Writes run inside the caller's
 * transaction (BEGIN IMMEDIATE: the store's write discipline); statements are
 * prepared once per call and stepped per row, which SQLite runs at
 * in-process speed (no round trips to save). Time columns hold Unix ms. */
#define _POSIX_C_SOURCE 200809L
#include "substrate_int.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>



static int fail(sqlite3 *db, donto_err *err, const char *step) {
    return donto_seterr(err, "sqlite: %s: %s", step, sqlite3_errmsg(db));
}

static sqlite3_stmt *prep(sqlite3 *db, const char *sql, const char *step, donto_err *err) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fail(db, err, step);
        return NULL;
    }
    return st;
}

static void bind_opt(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static int exec(sqlite3 *db, const char *sql, donto_err *err) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        donto_seterr(err, "sqlite: %s: %s", sql, msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int sq_begin(donto_store *s, donto_err *err) {
    return exec(sub_sqlite(s), "BEGIN IMMEDIATE", err);
}
static int sq_commit(donto_store *s, donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    if (exec(db, "COMMIT", err) == 0) return 0;
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}
static void sq_rollback(donto_store *s) {
    sqlite3 *db = sub_sqlite(s);
    if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

/* Fill-in upserts: a non-NULL label/description replaces a NULL one, an
 * existing value is never overwritten (changes() counts only real changes). */
static const char *const PUT_SQL[SUB_KIND_N] = {
    [SUB_STATEMENT] = "INSERT INTO donto_statement (statement_id, subject, predicate, object_iri, "
                      "object_lit, context, tx_from) VALUES (?1, ?2, ?3, ?4, ?5, "
                      "coalesce(?6, 'donto:default'), ?7) ON CONFLICT DO NOTHING",
    [SUB_PREDICATE] = "INSERT INTO donto_predicate (iri, label, description) VALUES (?1, ?2, ?3) "
                      "ON CONFLICT (iri) DO UPDATE SET "
                      "label = coalesce(donto_predicate.label, excluded.label), "
                      "description = coalesce(donto_predicate.description, excluded.description) "
                      "WHERE (donto_predicate.label IS NULL AND excluded.label IS NOT NULL) OR "
                      "(donto_predicate.description IS NULL AND excluded.description IS NOT NULL)",
    [SUB_ENTITY] = "INSERT INTO donto_entity_symbol (iri, normalized_label, kind) VALUES (?1, ?2, ?3) "
                   "ON CONFLICT (iri) DO UPDATE SET "
                   "normalized_label = coalesce(donto_entity_symbol.normalized_label, "
                   "excluded.normalized_label), "
                   "kind = coalesce(donto_entity_symbol.kind, excluded.kind) "
                   "WHERE (donto_entity_symbol.normalized_label IS NULL AND "
                   "excluded.normalized_label IS NOT NULL) OR "
                   "(donto_entity_symbol.kind IS NULL AND excluded.kind IS NOT NULL)",
    [SUB_CHUNK] = "INSERT INTO donto_memory_chunk (chunk_id, source, text, tx_from) "
                  "VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
    [SUB_ARGUMENT] = "INSERT INTO donto_argument (source_statement_id, target_statement_id, "
                     "relation, strength, context, tx_from) VALUES (?1, ?2, ?3, ?4, "
                     "coalesce(?5, 'donto:default'), ?6) "
                     "ON CONFLICT DO NOTHING",
};

static int sq_put(donto_store *s, sub_kind k, const char *const *cells, size_t nrows,
                  size_t *inserted, donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    *inserted = 0;
    sqlite3_stmt *st = prep(db, PUT_SQL[k], "prepare insert", err);
    if (!st) return -1;
    int nc = SUB_NCOLS[k];
    int64_t now = donto_unix_ms();
    for (size_t r = 0; r < nrows; r++) {
        for (int c = 0; c < nc; c++) bind_opt(st, c + 1, cells[r * (size_t)nc + (size_t)c]);
        if (k == SUB_STATEMENT || k == SUB_CHUNK || k == SUB_ARGUMENT)
            sqlite3_bind_int64(st, nc + 1, now);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            fail(db, err, "insert");
            sqlite3_finalize(st);
            return -1;
        }
        *inserted += (size_t)sqlite3_changes(db);
    }
    sqlite3_finalize(st);
    return 0;
}

static int sq_retract(donto_store *s, const char *const *ids, size_t n, size_t *retracted, int *status,
                      donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    *retracted = 0;
    sqlite3_stmt *up = prep(db,
                            "UPDATE donto_statement SET tx_until = max(?2, tx_from) "
                            "WHERE statement_id = ?1 AND tx_until IS NULL",
                            "prepare retract", err);
    sqlite3_stmt *del = prep(db, "DELETE FROM queue WHERE target = 0 AND item_id = ?1",
                             "prepare retract", err);
    sqlite3_stmt *has = status ? prep(db, "SELECT 1 FROM donto_statement WHERE statement_id = ?1",
                                      "prepare retract", err)
                               : NULL;
    int ok = up && del && (has || !status);
    int64_t now = donto_unix_ms();
    for (size_t i = 0; ok && i < n; i++) {
        sqlite3_bind_text(up, 1, ids[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(up, 2, now);
        int rc = sqlite3_step(up);
        sqlite3_reset(up);
        if (rc != SQLITE_DONE) {
            ok = 0;
            fail(db, err, "retract");
            break;
        }
        if (sqlite3_changes(db) == 0) {
            if (status) { /* unknown, or retracted before? */
                sqlite3_bind_text(has, 1, ids[i], -1, SQLITE_STATIC);
                rc = sqlite3_step(has);
                sqlite3_reset(has);
                if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
                    ok = 0;
                    fail(db, err, "retract: look up");
                    break;
                }
                status[i] = rc == SQLITE_ROW ? DONTO_RETRACT_ALREADY : DONTO_RETRACT_UNKNOWN;
            }
            continue;
        }
        if (status) status[i] = DONTO_RETRACT_DONE;
        (*retracted)++;
        sqlite3_bind_text(del, 1, ids[i], -1, SQLITE_STATIC);
        rc = sqlite3_step(del);
        sqlite3_reset(del);
        if (rc != SQLITE_DONE) {
            ok = 0;
            fail(db, err, "retract: delete queue entry");
        }
    }
    sqlite3_finalize(up);
    sqlite3_finalize(del);
    sqlite3_finalize(has);
    return ok ? 0 : -1;
}

/* Per target: select list and joins (ending in a WHERE clause), the id. */
static const struct {
    const char *sel, *id;
} TGT[DONTO_TARGET_N] = {
    [DONTO_TARGET_CLAIM] = {"SELECT s.statement_id, s.subject, se.normalized_label, s.predicate, "
                            "p.label, s.object_iri, oe.normalized_label, s.object_lit "
                            "FROM donto_statement s "
                            "LEFT JOIN donto_entity_symbol se ON se.iri = s.subject "
                            "LEFT JOIN donto_predicate p ON p.iri = s.predicate "
                            "LEFT JOIN donto_entity_symbol oe ON oe.iri = s.object_iri "
                            "WHERE s.tx_until IS NULL",
                            "s.statement_id"},
    [DONTO_TARGET_PREDICATE] = {"SELECT p.iri, p.label, p.description FROM donto_predicate p "
                                "WHERE 1",
                                "p.iri"},
    [DONTO_TARGET_ENTITY] = {"SELECT e.iri, e.normalized_label, e.kind FROM donto_entity_symbol e "
                             "WHERE 1",
                             "e.iri"},
    [DONTO_TARGET_MEMORY_CHUNK] = {"SELECT c.chunk_id, c.text FROM donto_memory_chunk c "
                                   "WHERE c.tx_until IS NULL",
                                   "c.chunk_id"},
};

static int collect(sqlite3 *db, sqlite3_stmt *st, sub_rows *out, donto_err *err) {
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char **cells = donto_xcalloc((size_t)out->ncols, sizeof *cells);
        for (int c = 0; c < out->ncols; c++) {
            const unsigned char *t = sqlite3_column_text(st, c);
            cells[c] = t ? donto_xstrdup((const char *)t) : NULL;
        }
        sub_rows_add(out, cells);
        free(cells);
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : fail(db, err, "read rows");
}

static int sq_scan(donto_store *s, donto_target t, const char *model, const char *after, int limit,
                   sub_rows *out, donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    char sql[2048];
    snprintf(sql, sizeof sql,
             "%s AND %s > ?2 AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.target = %d AND "
             "v.item_id = %s AND v.model = ?1) AND NOT EXISTS (SELECT 1 FROM queue q WHERE "
             "q.target = %d AND q.item_id = %s AND q.model = ?1) ORDER BY %s LIMIT ?3",
             TGT[t].sel, TGT[t].id, (int)t, TGT[t].id, (int)t, TGT[t].id, TGT[t].id);
    sqlite3_stmt *st = prep(db, sql, "prepare scan", err);
    if (!st) return -1;
    out->ncols = SUB_SCAN_COLS[t];
    sqlite3_bind_text(st, 1, model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, after ? after : "", -1, SQLITE_STATIC); /* '' sorts first */
    sqlite3_bind_int(st, 3, limit);
    int rc = collect(db, st, out, err);
    sqlite3_finalize(st);
    return rc;
}

static int sq_queue_put(donto_store *s, donto_target t, const char *model, const char *const *ids,
                        const char *const *texts, size_t n, size_t *added, donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    *added = 0;
    sqlite3_stmt *st = prep(db,
                            "INSERT INTO queue (target, item_id, model, text) SELECT ?1, ?2, ?3, ?4 "
                            "WHERE NOT EXISTS (SELECT 1 FROM vectors WHERE target = ?1 AND "
                            "item_id = ?2 AND model = ?3) ON CONFLICT DO NOTHING",
                            "prepare enqueue", err);
    if (!st) return -1;
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int(st, 1, (int)t);
        sqlite3_bind_text(st, 2, ids[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, model, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, texts[i], -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE) {
            sqlite3_finalize(st);
            return fail(db, err, "enqueue");
        }
        *added += (size_t)sqlite3_changes(db);
    }
    sqlite3_finalize(st);
    return 0;
}

static int sq_fetch(donto_store *s, donto_target t, const char *const *ids, size_t n,
                    sub_rows *out, donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    char sql[1024];
    snprintf(sql, sizeof sql, "%s AND %s = ?1", TGT[t].sel, TGT[t].id);
    sqlite3_stmt *st = prep(db, sql, "prepare fetch", err);
    if (!st) return -1;
    out->ncols = SUB_SCAN_COLS[t];
    /* One read transaction: the rows come from one snapshot. */
    if (exec(db, "BEGIN", err)) {
        sqlite3_finalize(st);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!ids[i]) continue;
        sqlite3_bind_text(st, 1, ids[i], -1, SQLITE_STATIC);
        rc = collect(db, st, out, err);
    }
    sqlite3_finalize(st);
    sqlite3_exec(db, rc ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
    return rc;
}

static int sq_counts(donto_store *s, int64_t out[DONTO_TARGET_N], donto_err *err) {
    sqlite3 *db = sub_sqlite(s);
    static const char *const q[DONTO_TARGET_N] = {
        "SELECT count(*) FROM donto_statement WHERE tx_until IS NULL",
        "SELECT count(*) FROM donto_predicate",
        "SELECT count(*) FROM donto_entity_symbol",
        "SELECT count(*) FROM donto_memory_chunk WHERE tx_until IS NULL",
    };
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        sqlite3_stmt *st = prep(db, q[t], "prepare count", err);
        if (!st) return -1;
        int rc = sqlite3_step(st);
        out[t] = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        if (rc != SQLITE_ROW) return fail(db, err, "count");
    }
    return 0;
}

const sub_ops SUB_SQLITE_OPS = {
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .put = sq_put,
    .retract = sq_retract,
    .scan = sq_scan,
    .queue_put = sq_queue_put,
    .fetch = sq_fetch,
    .counts = sq_counts,
};
