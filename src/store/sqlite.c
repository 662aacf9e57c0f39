/* donto-accel: the SQLite store backend (WAL, one writer at a time).
 *
 * Every write is one BEGIN IMMEDIATE transaction: the write lock is taken up
 * front, so two handles never both read "ready" rows and then both lease
 * them; leases are disjoint by construction. Readers (stats, lists) do not
 * block the writer in WAL mode. Statements are prepared once per handle and
 * reset after each use so no read snapshot lingers. */
#define _POSIX_C_SOURCE 200809L
#include "store_int.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    Q_LEASE, Q_SEQ_GET, Q_SEQ_SET, Q_LEASE_SET, Q_ENQ, Q_SUB_QUEUE,
    Q_SUB_VEC, Q_MODEL_GET, Q_MODEL_ADD, Q_VEC_UPSERT, Q_QUEUE_DEL, Q_CONTRIB, Q_MINUTE, Q_SERIES, Q_MIN_PRUNE, Q_RELEASE,
    Q_REPORT, Q_STATS_VEC, Q_STATS_QUEUE, Q_SINCE, Q_CONTRIB_LIST, Q_REPORTS, Q_TOK_ADD,
    Q_TOK_CHECK, Q_TOK_REVOKE, Q_TOK_LIST, Q_MIG_HAS, Q_MIG_ADD, Q_VEC_MARK, Q_VEC_PAGE,
    Q_REPORT_PRUNE, Q_EXTEND, Q_CHECK_VEC, Q_CHECK_TOK, Q_SUSP_REQUEUE, Q_SUSP_DELETE, Q_SUSP_RELEASE,
    Q_SUSP_TOK, Q_SUSP_REPORT, Q_UNSUSP, Q_N
};

/* A token's trust record, in the order trust_cols() reads it. */
#define TRUST_COLS "suspended, streak, checks, failed, withdrawn, suspended_at, reason"

static const char *const SQL[Q_N] = {
    /* A lease for any target walks the targets in order, as on PostgreSQL
     * (pg.c says why there is one ready index, not two). */
    [Q_LEASE] = "SELECT target, item_id, model, text FROM queue WHERE target = ?3 AND "
                "lease_expires <= ?1 ORDER BY lease_expires LIMIT ?2",
    [Q_SEQ_GET] = "SELECT next FROM lease_seq WHERE id = 1",
    [Q_SEQ_SET] = "UPDATE lease_seq SET next = ?1 WHERE id = 1",
    [Q_LEASE_SET] = "UPDATE queue SET lease_owner = ?1, lease_id = ?2, lease_expires = ?3, "
                    "attempts = attempts + 1 WHERE target = ?4 AND item_id = ?5 AND model = ?6",
    [Q_ENQ] = "INSERT INTO queue (target, item_id, model, text) SELECT ?1, ?2, ?3, ?4 "
              "WHERE NOT EXISTS (SELECT 1 FROM vectors WHERE target = ?1 AND item_id = ?2 AND "
              "model = ?3) ON CONFLICT DO NOTHING",
    /* Prefer the row this submit is about when an item is queued for two models. */
    [Q_SUB_QUEUE] = "SELECT model, lease_owner, lease_id, text FROM queue WHERE target = ?1 AND "
                    "item_id = ?2 AND (?3 IS NULL OR model = ?3) "
                    "ORDER BY (lease_id IS ?4) DESC, (lease_owner IS ?5) DESC LIMIT 1",
    [Q_SUB_VEC] = "SELECT contributor, lease_id FROM vectors WHERE target = ?1 AND item_id = ?2 "
                  "AND (?3 IS NULL OR model = ?3) "
                  "ORDER BY (lease_id IS ?4) DESC, (contributor IS ?5) DESC LIMIT 1",
    [Q_MODEL_GET] = "SELECT dims FROM models WHERE name = ?1",
    [Q_MODEL_ADD] = "INSERT INTO models (name, dims) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
    [Q_VEC_UPSERT] = "INSERT INTO vectors (target, item_id, model, dims, vec, contributor, "
                     "lease_id, created, token, verified, text) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
                     "?8, ?9, ?9 IS NULL, ?10) "
                     "ON CONFLICT (target, item_id, model) DO UPDATE SET dims = excluded.dims, "
                     "vec = excluded.vec, contributor = excluded.contributor, "
                     "lease_id = excluded.lease_id, created = excluded.created, "
                     "token = excluded.token, verified = excluded.verified, text = excluded.text",
    [Q_QUEUE_DEL] = "DELETE FROM queue WHERE target = ?1 AND item_id = ?2 AND model = ?3",
    [Q_CONTRIB] = "INSERT INTO contributors (worker_id, total, rejected, last_seen) "
                  "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (worker_id) DO UPDATE SET "
                  "total = total + excluded.total, rejected = rejected + excluded.rejected, "
                  "last_seen = max(last_seen, excluded.last_seen)",
    [Q_MINUTE] = "INSERT INTO contributor_minutes (worker_id, minute, n) VALUES (?1, ?2, ?3) "
                 "ON CONFLICT (worker_id, minute) DO UPDATE SET n = n + excluded.n",
    [Q_SERIES] = "SELECT minute, sum(n) FROM contributor_minutes WHERE minute >= ?1 AND minute < ?2 "
                 "GROUP BY minute",
    [Q_MIN_PRUNE] = "DELETE FROM contributor_minutes WHERE minute < ?1",
    [Q_RELEASE] = "UPDATE queue SET lease_owner = NULL, lease_expires = 0 WHERE target = ?1 AND "
                  "item_id = ?2 AND (?3 IS NULL OR model = ?3) AND lease_owner = ?4 AND "
                  "(?5 = 0 OR lease_id = ?5)",
    [Q_REPORT] = "INSERT INTO reports (worker_id, kind, message, created, token) "
                 "VALUES (?1, ?2, ?3, ?4, ?5)",
    [Q_STATS_VEC] = "SELECT target, count(*) FROM vectors GROUP BY target",
    [Q_STATS_QUEUE] = "SELECT target, sum(lease_expires <= ?1), sum(lease_expires > ?1) "
                      "FROM queue GROUP BY target",
    [Q_SINCE] = "SELECT count(*) FROM vectors WHERE created >= ?1",
    [Q_CONTRIB_LIST] = "SELECT c.worker_id, c.total, c.rejected, c.last_seen, coalesce(r.n, 0) "
                       "FROM contributors c LEFT JOIN (SELECT worker_id, sum(n) AS n FROM "
                       "contributor_minutes WHERE minute >= ?2 GROUP BY worker_id) r "
                       "ON r.worker_id = c.worker_id ORDER BY c.total DESC, c.worker_id LIMIT ?1",
    [Q_REPORTS] = "SELECT id, worker_id, kind, message, created FROM reports "
                  "ORDER BY created DESC, id DESC LIMIT ?1",
    [Q_TOK_ADD] = "INSERT INTO tokens (name, hash, role, created) VALUES (?1, ?2, ?3, ?4)",
    [Q_TOK_CHECK] = "SELECT name, role, " TRUST_COLS " FROM tokens WHERE hash = ?1 AND revoked = 0",
    [Q_TOK_REVOKE] = "UPDATE tokens SET revoked = 1 WHERE name = ?1 AND revoked = 0",
    [Q_TOK_LIST] = "SELECT name, role, " TRUST_COLS ", created, revoked FROM tokens ORDER BY name",
    [Q_MIG_HAS] = "SELECT 1 FROM donto_migrations WHERE module = ?1 AND version = ?2",
    [Q_MIG_ADD] = "INSERT INTO donto_migrations (module, version, name, applied) "
                  "VALUES (?1, ?2, ?3, CAST(strftime('%s', 'now') AS INTEGER))",
    /* Recall: both walk the vectors_recall index (migration 5). */
    [Q_VEC_MARK] = "SELECT count(*), max(created) FROM vectors WHERE target = ?1 AND model = ?2 "
                   "AND created > ?3 AND (?4 = 0 OR verified = 1)",
    [Q_VEC_PAGE] = "SELECT item_id, created, dims, vec FROM vectors WHERE target = ?1 AND model = ?2 "
                   "AND created >= ?3 AND (?4 IS NULL OR (created, item_id) > (?3, ?4)) "
                   "AND (?6 = 0 OR verified = 1) ORDER BY created, item_id LIMIT ?5",
    [Q_REPORT_PRUNE] = "DELETE FROM reports WHERE created < ?1",
    [Q_EXTEND] = "UPDATE queue SET lease_expires = max(lease_expires, ?6) WHERE target = ?1 AND "
                 "item_id = ?2 AND (?3 IS NULL OR model = ?3) AND lease_owner = ?4 AND "
                 "(?5 = 0 OR lease_id = ?5)",
    /* Trust (migration 7, docs/trust.md). */
    /* "+token": not the vectors_token index (it would scan every vector of
     * the token, per check), the primary key (target, item_id, ...). */
    [Q_CHECK_VEC] = "UPDATE vectors SET verified = 1 WHERE target = ?1 AND item_id = ?2 AND "
                    "(?3 IS NULL OR model = ?3) AND +token = ?4 AND lease_id IS ?5",
    [Q_CHECK_TOK] = "UPDATE tokens SET checks = checks + ?2, failed = failed + ?3, streak = "
                    "CASE WHEN ?3 > 0 THEN ?4 ELSE streak + ?4 END WHERE name = ?1",
    /* Queue again, then delete: two statements, safe here because the
     * transaction holds the write lock (no submit commits in between;
     * pg.c needs one statement for that). */
    [Q_SUSP_REQUEUE] = "INSERT INTO queue (target, item_id, model, text) SELECT target, item_id, model, "
                       "text FROM vectors WHERE token = ?1 AND verified = 0 AND text IS NOT NULL "
                       "ON CONFLICT DO NOTHING",
    [Q_SUSP_DELETE] = "DELETE FROM vectors WHERE token = ?1 AND verified = 0 AND text IS NOT NULL",
    [Q_SUSP_RELEASE] = "UPDATE queue SET lease_owner = NULL, lease_expires = 0 WHERE "
                       "lease_owner >= ?1 || '/' AND lease_owner < ?1 || '0' AND lease_expires > ?2",
    /* A second suspension (the sweep) keeps the first one's reason and time. */
    [Q_SUSP_TOK] = "UPDATE tokens SET reason = CASE WHEN suspended = 1 THEN reason ELSE ?2 END, "
                   "suspended_at = CASE WHEN suspended = 1 THEN suspended_at ELSE ?3 END, suspended = 1, "
                   "streak = 0, withdrawn = withdrawn + ?4 WHERE name = ?1",
    /* Run before Q_SUSP_TOK: one report per suspension, not per sweep. */
    [Q_SUSP_REPORT] = "INSERT INTO reports (worker_id, kind, message, created, token) "
                      "SELECT 'coordinator', 'suspended', ?2, ?3, ?1 WHERE EXISTS "
                      "(SELECT 1 FROM tokens WHERE name = ?1 AND suspended = 0)",
    [Q_UNSUSP] = "UPDATE tokens SET suspended = 0, reason = '', streak = 0 WHERE name = ?1 AND suspended = 1",
};

#define MODEL_CACHE 8

typedef struct sq_store {
    donto_store base;
    sqlite3 *db;
    sqlite3_stmt *st[Q_N];
    double busy_start;
    /* model -> dims, only values read back from committed rows */
    struct {
        char name[128];
        int dims;
    } models[MODEL_CACHE];
    int nmodels;
} sq_store;

/* What kind of failure SQLite's last result code is (util.h). */
donto_code donto_store_sq_code(sqlite3 *db) {
    int ext = sqlite3_extended_errcode(db);
    switch (ext & 0xff) {
    case SQLITE_BUSY: case SQLITE_LOCKED: case SQLITE_CANTOPEN: case SQLITE_IOERR:
    case SQLITE_FULL: case SQLITE_READONLY: case SQLITE_PROTOCOL:
        return DONTO_E_UNAVAILABLE;
    case SQLITE_CONSTRAINT: /* a duplicate key conflicts; check, not null, foreign key: bad data */
        return ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY ? DONTO_E_CONFLICT
                                                                                      : DONTO_E_INVALID;
    case SQLITE_NOMEM: return DONTO_E_NOMEM;
    case SQLITE_TOOBIG: case SQLITE_MISMATCH: case SQLITE_RANGE: return DONTO_E_INVALID;
    /* SQLite has no code of its own for a missing table: its message. */
    case SQLITE_ERROR: return strstr(sqlite3_errmsg(db), "no such table") ? DONTO_E_SCHEMA : DONTO_E_INTERNAL;
    default: return DONTO_E_INTERNAL;
    }
}

static int sq_fail(sq_store *s, donto_err *err, const char *step) {
    return donto_seterrc(err, donto_store_sq_code(s->db), "sqlite: %s: %s", step, sqlite3_errmsg(s->db));
}

/* The prepared statement for q, ready to bind (reset, bindings cleared). */
static sqlite3_stmt *sq_get(sq_store *s, int q, donto_err *err) {
    if (!s->st[q]) {
        if (sqlite3_prepare_v3(s->db, SQL[q], -1, SQLITE_PREPARE_PERSISTENT, &s->st[q], NULL) !=
            SQLITE_OK) {
            sq_fail(s, err, "prepare");
            donto_preerr(err, "statement %d", q);
            return NULL;
        }
    }
    return s->st[q];
}

static void sq_done(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

/* Step a statement that returns no rows; resets it. */
static int sq_run(sq_store *s, sqlite3_stmt *st, const char *step, donto_err *err) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        sq_fail(s, err, step);
        sq_done(st);
        return -1;
    }
    sq_done(st);
    return 0;
}

/* Run SQL without parameters (fixed text only); step names it in errors. */
static int sq_exec_step(sq_store *s, const char *sql, const char *step, donto_err *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        donto_seterr(err, "sqlite: %s: %s", step, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int sq_exec(sq_store *s, const char *sql, donto_err *err) {
    return sq_exec_step(s, sql, sql, err);
}

static int sq_begin(sq_store *s, donto_err *err) { return sq_exec(s, "BEGIN IMMEDIATE", err); }
static int sq_commit(sq_store *s, donto_err *err) {
    if (sq_exec(s, "COMMIT", err) == 0) return 0;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}
/* Roll back after a failure; err already holds the reason. */
static int sq_abort(sq_store *s) {
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

static char *col_dup(sqlite3_stmt *st, int c) {
    const unsigned char *t = sqlite3_column_text(st, c);
    return t ? donto_xstrdup((const char *)t) : NULL;
}

/* Short sleeps instead of SQLite's default 1..100 ms back-off: with many
 * handles contending, the write lock would otherwise sit idle between polls. */
static int sq_busy(void *arg, int count) {
    sq_store *s = arg;
    if (count == 0) s->busy_start = donto_now();
    if (donto_now() - s->busy_start > 30.0) return 0;
    long us = 50L * (count + 1);
    if (us > 2000) us = 2000;
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
    return 1;
}

/* Create donto_migrations, and the first time carry over what a database
 * made before the registry recorded in schema_migrations. */
static int sq_migrations_table(sq_store *s, donto_err *err) {
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st = NULL;
    int fresh = 1, legacy = 0;
    if (sqlite3_prepare_v2(s->db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN"
                           " ('donto_migrations', 'schema_migrations')", -1, &st, NULL) != SQLITE_OK) {
        sq_fail(s, err, "read sqlite_master");
        return sq_abort(s);
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && strcmp(t, "donto_migrations") == 0) fresh = 0;
        if (t && strcmp(t, "schema_migrations") == 0) legacy = 1;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        sq_fail(s, err, "read sqlite_master");
        return sq_abort(s);
    }
    if (fresh) {
        if (sq_exec(s,
                    "CREATE TABLE donto_migrations (module TEXT NOT NULL, version INTEGER NOT NULL,"
                    " name TEXT NOT NULL, applied INTEGER NOT NULL, PRIMARY KEY (module, version))",
                    err))
            return sq_abort(s);
        if (legacy && sq_exec_step(s, DONTO_MIGRATIONS_CARRY_OVER, "carry over schema_migrations", err))
            return sq_abort(s);
    }
    return sq_commit(s, err);
}

/* Each migration in its own transaction (BEGIN IMMEDIATE: one migrating
 * process at a time; a second finds it recorded and skips it). */
static int sq_migrate(donto_store *b, const donto_migrations *set, donto_err *err) {
    sq_store *s = (sq_store *)b;
    if (sq_migrations_table(s, err)) return -1;
    for (size_t i = 0; i < set->n; i++) {
        const donto_migration *m = &set->list[i];
        if (!m->sql[DONTO_DB_SQLITE])
            return donto_seterrc(err, DONTO_E_INTERNAL, "migration %s %d (%s) has no SQLite SQL",
                                 set->module, m->version, m->name);
        if (sq_begin(s, err)) return -1;
        sqlite3_stmt *st = sq_get(s, Q_MIG_HAS, err);
        if (!st) return sq_abort(s);
        bind_text(st, 1, set->module);
        sqlite3_bind_int(st, 2, m->version);
        int rc = sqlite3_step(st);
        sq_done(st);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            sq_fail(s, err, "read donto_migrations");
            return sq_abort(s);
        }
        if (rc == SQLITE_ROW) { /* already applied */
            if (sq_commit(s, err)) return -1;
            continue;
        }
        if (sq_exec_step(s, m->sql[DONTO_DB_SQLITE], "apply", err)) {
            donto_preerr(err, "migration %s %d (%s)", set->module, m->version, m->name);
            return sq_abort(s);
        }
        if (!(st = sq_get(s, Q_MIG_ADD, err))) return sq_abort(s);
        bind_text(st, 1, set->module);
        sqlite3_bind_int(st, 2, m->version);
        bind_text(st, 3, m->name);
        if (sq_run(s, st, "record migration", err)) return sq_abort(s);
        if (sq_commit(s, err)) return -1;
    }
    /* Statements prepared before the schema changed re-prepare themselves. */
    return 0;
}

static int sq_enqueue(donto_store *b, const donto_enqueue_item *items, size_t n, size_t *added,
                      donto_err *err) {
    sq_store *s = (sq_store *)b;
    size_t count = 0;
    if (added) *added = 0;
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st = sq_get(s, Q_ENQ, err);
    if (!st) return sq_abort(s);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int(st, 1, items[i].target);
        bind_text(st, 2, items[i].item_id);
        bind_text(st, 3, items[i].model);
        bind_text(st, 4, items[i].text);
        if (sq_run(s, st, "enqueue insert", err)) return sq_abort(s);
        count += (size_t)sqlite3_changes(s->db);
    }
    if (sq_commit(s, err)) return -1;
    if (added) *added = count;
    return 0;
}

static int sq_lease(donto_store *b, const char *worker_id, int n, int target, int64_t now_ms,
                    int64_t ttl_ms, donto_lease_batch *out, donto_err *err) {
    sq_store *s = (sq_store *)b;
    out->items = NULL;
    out->n = 0;
    if (n <= 0) return 0;
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st;
    size_t cap = 0; /* grown as rows come: n is the caller's cap, maybe huge */
    int first = target >= 0 ? target : 0, last = target >= 0 ? target : DONTO_TARGET_N - 1;
    for (int t = first; t <= last && out->n < (size_t)n; t++) {
        if (!(st = sq_get(s, Q_LEASE, err))) goto fail;
        sqlite3_bind_int64(st, 1, now_ms);
        sqlite3_bind_int(st, 2, n - (int)out->n);
        sqlite3_bind_int(st, 3, t);
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (out->n == cap) {
                cap = cap ? 2 * cap : 64;
                out->items = donto_xrealloc(out->items, cap * sizeof *out->items);
            }
            donto_leased_item *it = &out->items[out->n++];
            memset(it, 0, sizeof *it);
            it->target = (donto_target)sqlite3_column_int(st, 0);
            it->item_id = col_dup(st, 1);
            it->model = col_dup(st, 2);
            it->text = col_dup(st, 3);
        }
        sq_done(st);
        if (rc != SQLITE_DONE) {
            sq_fail(s, err, "lease select");
            goto fail;
        }
    }
    if (out->n == 0) {
        if (sq_commit(s, err)) goto fail;
        donto_lease_batch_free(out);
        return 0;
    }
    /* lease_id: a counter row bumped inside this write transaction. */
    if (!(st = sq_get(s, Q_SEQ_GET, err))) goto fail;
    if (sqlite3_step(st) != SQLITE_ROW) {
        sq_fail(s, err, "read lease_seq");
        sq_done(st);
        goto fail;
    }
    int64_t next = sqlite3_column_int64(st, 0);
    sq_done(st);
    if (!(st = sq_get(s, Q_LEASE_SET, err))) goto fail;
    for (size_t i = 0; i < out->n; i++) {
        donto_leased_item *it = &out->items[i];
        it->lease_id = next++;
        bind_text(st, 1, worker_id);
        sqlite3_bind_int64(st, 2, it->lease_id);
        sqlite3_bind_int64(st, 3, now_ms + ttl_ms);
        sqlite3_bind_int(st, 4, it->target);
        bind_text(st, 5, it->item_id);
        bind_text(st, 6, it->model);
        if (sq_run(s, st, "lease update", err)) goto fail;
    }
    if (!(st = sq_get(s, Q_SEQ_SET, err))) goto fail;
    sqlite3_bind_int64(st, 1, next);
    if (sq_run(s, st, "bump lease_seq", err)) goto fail;
    if (sq_commit(s, err)) goto fail;
    return 0;
fail:
    sq_abort(s);
    donto_lease_batch_free(out);
    return -1;
}

/* Dims of a model, from the cache or the models table; 0 when unknown. */
static int sq_model_dims(sq_store *s, const char *model, int *dims, donto_err *err) {
    for (int i = 0; i < s->nmodels; i++)
        if (strcmp(s->models[i].name, model) == 0) return *dims = s->models[i].dims, 0;
    sqlite3_stmt *st = sq_get(s, Q_MODEL_GET, err);
    if (!st) return -1;
    bind_text(st, 1, model);
    int rc = sqlite3_step(st);
    *dims = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sq_done(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sq_fail(s, err, "read models");
    if (*dims > 0 && s->nmodels < MODEL_CACHE && strlen(model) < sizeof s->models[0].name) {
        /* Only a committed row is cached: rows in the models table never change. */
        strcpy(s->models[s->nmodels].name, model);
        s->models[s->nmodels++].dims = *dims;
    }
    return 0;
}

static int sq_submit(donto_store *b, const char *worker_id, const donto_submit_item *items,
                     size_t n, int64_t now_ms, donto_submit_result *res, donto_err *err) {
    sq_store *s = (sq_store *)b;
    size_t upserted = 0, repeated = 0, rejected = 0;
    res->upserted = res->repeated = 0;
    unsigned char *buf = NULL;
    size_t bufcap = 0;
    char token[DONTO_TOKEN_NAME_MAX + 1];
    int have_token = donto_worker_token(worker_id, token, sizeof token) == 0;
    if (sq_begin(s, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        const donto_submit_item *it = &items[i];
        donto_reject r = DONTO_REJECT_UNKNOWN_ITEM;
        int repeat = 0;
        char *model = NULL, *text = NULL;
        sqlite3_stmt *st = sq_get(s, Q_SUB_QUEUE, err);
        if (!st) goto fail;
        sqlite3_bind_int(st, 1, it->target);
        bind_text(st, 2, it->item_id);
        bind_text(st, 3, it->model);
        sqlite3_bind_int64(st, 4, it->lease_id);
        bind_text(st, 5, worker_id);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            model = col_dup(st, 0);
            text = col_dup(st, 3);
            const char *owner = (const char *)sqlite3_column_text(st, 1);
            r = donto_submit_verdict_queued(worker_id, it->lease_id, owner,
                                            sqlite3_column_int64(st, 2));
        }
        sq_done(st);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
            sq_fail(s, err, "submit: read queue");
            goto fail;
        }
        if (rc == SQLITE_DONE) {
            if (!(st = sq_get(s, Q_SUB_VEC, err))) goto fail;
            sqlite3_bind_int(st, 1, it->target);
            bind_text(st, 2, it->item_id);
            bind_text(st, 3, it->model);
            sqlite3_bind_int64(st, 4, it->lease_id);
            bind_text(st, 5, worker_id);
            rc = sqlite3_step(st);
            if (rc == SQLITE_ROW)
                r = donto_submit_verdict_stored(worker_id, it->lease_id, 1,
                                                (const char *)sqlite3_column_text(st, 0),
                                                sqlite3_column_int64(st, 1), &repeat);
            else
                r = donto_submit_verdict_stored(worker_id, it->lease_id, 0, NULL, 0, &repeat);
            sq_done(st);
            if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
                sq_fail(s, err, "submit: read vectors");
                goto fail;
            }
        }
        if (r == DONTO_REJECT_NONE && model) {
            int dims;
            if (sq_model_dims(s, model, &dims, err)) {
                free(model);
                goto fail;
            }
            if (it->dims <= 0 || !it->vector || (dims > 0 && dims != it->dims)) {
                r = DONTO_REJECT_WRONG_MODEL;
            } else if (dims == 0) {
                if (!(st = sq_get(s, Q_MODEL_ADD, err))) goto fail_model;
                bind_text(st, 1, model);
                sqlite3_bind_int(st, 2, it->dims);
                if (sq_run(s, st, "submit: add model", err)) goto fail_model;
            }
        }
        if (r == DONTO_REJECT_NONE && model) {
            size_t need = (size_t)it->dims * 4;
            if (need > bufcap) {
                buf = donto_xrealloc(buf, need);
                bufcap = need;
            }
            donto_f32_to_le(it->vector, it->dims, buf);
            if (!(st = sq_get(s, Q_VEC_UPSERT, err))) goto fail_model;
            sqlite3_bind_int(st, 1, it->target);
            bind_text(st, 2, it->item_id);
            bind_text(st, 3, model);
            sqlite3_bind_int(st, 4, it->dims);
            sqlite3_bind_blob(st, 5, buf, (int)need, SQLITE_STATIC);
            bind_text(st, 6, worker_id);
            sqlite3_bind_int64(st, 7, it->lease_id);
            sqlite3_bind_int64(st, 8, now_ms);
            bind_text(st, 9, have_token ? token : NULL);
            bind_text(st, 10, text);
            if (sq_run(s, st, "submit: upsert vector", err)) goto fail_model;
            if (!(st = sq_get(s, Q_QUEUE_DEL, err))) goto fail_model;
            sqlite3_bind_int(st, 1, it->target);
            bind_text(st, 2, it->item_id);
            bind_text(st, 3, model);
            if (sq_run(s, st, "submit: delete from queue", err)) goto fail_model;
            if (res->text && !repeat && (!res->text_model || !strcmp(res->text_model, model))) {
                res->text[i] = text;
                text = NULL;
            }
        }
        free(model);
        free(text);
        res->reject[i] = r;
        if (r == DONTO_REJECT_NONE) {
            upserted++;
            repeated += (size_t)repeat;
        } else {
            rejected++;
        }
        continue;
    fail_model:
        free(model);
        free(text);
        goto fail;
    }
    {
        sqlite3_stmt *st = sq_get(s, Q_CONTRIB, err);
        if (!st) goto fail;
        bind_text(st, 1, worker_id);
        sqlite3_bind_int64(st, 2, (int64_t)(upserted - repeated));
        sqlite3_bind_int64(st, 3, (int64_t)rejected);
        sqlite3_bind_int64(st, 4, now_ms);
        if (sq_run(s, st, "submit: contributor totals", err)) goto fail;
        if (upserted > repeated) {
            if (!(st = sq_get(s, Q_MINUTE, err))) goto fail;
            bind_text(st, 1, worker_id);
            sqlite3_bind_int64(st, 2, now_ms / 60000);
            sqlite3_bind_int64(st, 3, (int64_t)(upserted - repeated));
            if (sq_run(s, st, "submit: throughput", err)) goto fail;
        }
    }
    if (sq_commit(s, err)) goto fail;
    free(buf);
    res->upserted = upserted;
    res->repeated = repeated;
    return 0;
fail:
    free(buf);
    if (res->text)
        for (size_t i = 0; i < n; i++) free(res->text[i]), res->text[i] = NULL;
    return sq_abort(s);
}

/* Run q (release or extend) once per item in one transaction, binding
 * (target, item_id, model, worker_id, lease_id) and, when until >= 0, until
 * as ?6; count = rows changed. */
static int sq_per_item(sq_store *s, int q, const char *step, const char *worker_id,
                       const donto_submit_item *items, size_t n, int64_t until, size_t *count, donto_err *err) {
    *count = 0;
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st = sq_get(s, q, err);
    if (!st) return sq_abort(s);
    for (size_t i = 0; i < n; i++) {
        sqlite3_bind_int(st, 1, items[i].target);
        bind_text(st, 2, items[i].item_id);
        bind_text(st, 3, items[i].model);
        bind_text(st, 4, worker_id);
        sqlite3_bind_int64(st, 5, items[i].lease_id);
        if (until >= 0) sqlite3_bind_int64(st, 6, until);
        if (sq_run(s, st, step, err)) return sq_abort(s);
        *count += (size_t)sqlite3_changes(s->db);
    }
    return sq_commit(s, err);
}

static int sq_release(donto_store *b, const char *worker_id, const donto_submit_item *items,
                      size_t n, size_t *released, donto_err *err) {
    size_t count = 0;
    if (sq_per_item((sq_store *)b, Q_RELEASE, "release", worker_id, items, n, -1, &count, err)) return -1;
    if (released) *released = count;
    return 0;
}

static int sq_report(donto_store *b, const char *worker_id, const char *kind, const char *message,
                     int64_t now_ms, donto_err *err) {
    sq_store *s = (sq_store *)b;
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st = sq_get(s, Q_REPORT, err);
    if (!st) return sq_abort(s);
    const char *msg = message ? message : "";
    bind_text(st, 1, worker_id);
    bind_text(st, 2, kind ? kind : "");
    sqlite3_bind_text(st, 3, msg, (int)donto_utf8_prefix(msg, DONTO_REPORT_MAX_CHARS),
                      SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, now_ms);
    char token[DONTO_TOKEN_NAME_MAX + 1];
    bind_text(st, 5, donto_worker_token(worker_id, token, sizeof token) == 0 ? token : NULL);
    if (sq_run(s, st, "report insert", err)) return sq_abort(s);
    if (!(st = sq_get(s, Q_REPORT_PRUNE, err))) return sq_abort(s);
    sqlite3_bind_int64(st, 1, now_ms - DONTO_REPORT_KEEP_MS);
    if (sq_run(s, st, "report: prune", err)) return sq_abort(s);
    if (!(st = sq_get(s, Q_CONTRIB, err))) return sq_abort(s);
    bind_text(st, 1, worker_id);
    sqlite3_bind_int64(st, 2, 0);
    sqlite3_bind_int64(st, 3, 0);
    sqlite3_bind_int64(st, 4, now_ms);
    if (sq_run(s, st, "report: contributor last_seen", err)) return sq_abort(s);
    return sq_commit(s, err);
}

static int sq_stats(donto_store *b, int64_t now_ms, donto_target_stats out[DONTO_TARGET_N],
                    donto_err *err) {
    sq_store *s = (sq_store *)b;
    memset(out, 0, sizeof(donto_target_stats) * DONTO_TARGET_N);
    /* One read transaction so the two counts come from one snapshot. */
    if (sq_exec(s, "BEGIN", err)) return -1;
    sqlite3_stmt *st = sq_get(s, Q_STATS_VEC, err);
    if (!st) return sq_abort(s);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int t = sqlite3_column_int(st, 0);
        if (t >= 0 && t < DONTO_TARGET_N) out[t].embedded = sqlite3_column_int64(st, 1);
    }
    sq_done(st);
    if (rc != SQLITE_DONE) return sq_fail(s, err, "stats: count vectors"), sq_abort(s);
    if (!(st = sq_get(s, Q_STATS_QUEUE, err))) return sq_abort(s);
    sqlite3_bind_int64(st, 1, now_ms);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int t = sqlite3_column_int(st, 0);
        if (t < 0 || t >= DONTO_TARGET_N) continue;
        out[t].pending = sqlite3_column_int64(st, 1);
        out[t].leased = sqlite3_column_int64(st, 2);
    }
    sq_done(st);
    if (rc != SQLITE_DONE) return sq_fail(s, err, "stats: count queue"), sq_abort(s);
    for (int t = 0; t < DONTO_TARGET_N; t++)
        out[t].total = out[t].embedded + out[t].pending + out[t].leased;
    return sq_commit(s, err);
}

static int sq_embedded_since(donto_store *b, int64_t since_ms, int64_t *count, donto_err *err) {
    sq_store *s = (sq_store *)b;
    sqlite3_stmt *st = sq_get(s, Q_SINCE, err);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, since_ms);
    int rc = sqlite3_step(st);
    *count = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sq_done(st);
    return rc == SQLITE_ROW ? 0 : sq_fail(s, err, "count recent vectors");
}

static int sq_contributors(donto_store *b, int limit, int64_t since_ms, donto_contributor **out, size_t *n,
                           donto_err *err) {
    sq_store *s = (sq_store *)b;
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = sq_get(s, Q_CONTRIB_LIST, err);
    if (!st) return -1;
    sqlite3_bind_int(st, 1, limit);
    sqlite3_bind_int64(st, 2, since_ms / 60000);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) *out = donto_xrealloc(*out, (cap = cap ? 2 * cap : 16) * sizeof **out);
        donto_contributor *c = &(*out)[(*n)++];
        c->worker_id = col_dup(st, 0);
        c->total = sqlite3_column_int64(st, 1);
        c->rejected = sqlite3_column_int64(st, 2);
        c->last_seen = sqlite3_column_int64(st, 3);
        c->recent = sqlite3_column_int64(st, 4);
    }
    sq_done(st);
    if (rc != SQLITE_DONE) {
        donto_contributor_list_free(*out, *n);
        *out = NULL;
        *n = 0;
        return sq_fail(s, err, "list contributors");
    }
    return 0;
}

static int sq_series(donto_store *b, int64_t since_min, int nmin, int64_t *counts, donto_err *err) {
    sq_store *s = (sq_store *)b;
    if (nmin < 0) return donto_seterr(err, "sqlite: series: negative length");
    memset(counts, 0, (size_t)nmin * sizeof *counts);
    sqlite3_stmt *st = sq_get(s, Q_MIN_PRUNE, err);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, since_min - 60);
    int rc = sqlite3_step(st);
    sq_done(st);
    /* A prune that loses to a busy writer is retried by the next call. */
    if (rc != SQLITE_DONE && rc != SQLITE_BUSY) return sq_fail(s, err, "series: prune");
    if (!(st = sq_get(s, Q_SERIES, err))) return -1;
    sqlite3_bind_int64(st, 1, since_min);
    sqlite3_bind_int64(st, 2, since_min + nmin);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t m = sqlite3_column_int64(st, 0) - since_min;
        if (m >= 0 && m < nmin) counts[m] = sqlite3_column_int64(st, 1);
    }
    sq_done(st);
    return rc == SQLITE_DONE ? 0 : sq_fail(s, err, "series");
}

static int sq_reports_recent(donto_store *b, int limit, donto_report **out, size_t *n,
                             donto_err *err) {
    sq_store *s = (sq_store *)b;
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = sq_get(s, Q_REPORTS, err);
    if (!st) return -1;
    sqlite3_bind_int(st, 1, limit);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) *out = donto_xrealloc(*out, (cap = cap ? 2 * cap : 16) * sizeof **out);
        donto_report *r = &(*out)[(*n)++];
        r->id = sqlite3_column_int64(st, 0);
        r->worker_id = col_dup(st, 1);
        r->kind = col_dup(st, 2);
        r->message = col_dup(st, 3);
        r->created = sqlite3_column_int64(st, 4);
    }
    sq_done(st);
    if (rc != SQLITE_DONE) {
        donto_report_list_free(*out, *n);
        *out = NULL;
        *n = 0;
        return sq_fail(s, err, "list reports");
    }
    return 0;
}

static int sq_token_add(donto_store *b, const char *name, donto_role role, const uint8_t hash[32],
                        int64_t now_ms, donto_err *err) {
    sq_store *s = (sq_store *)b;
    sqlite3_stmt *st = sq_get(s, Q_TOK_ADD, err);
    if (!st) return -1;
    bind_text(st, 1, name);
    sqlite3_bind_blob(st, 2, hash, 32, SQLITE_STATIC);
    bind_text(st, 3, donto_role_name(role));
    sqlite3_bind_int64(st, 4, now_ms);
    int rc = sqlite3_step(st);
    int ext = sqlite3_extended_errcode(s->db);
    sq_done(st);
    if (rc == SQLITE_DONE) return 0;
    if (ext == SQLITE_CONSTRAINT_PRIMARYKEY || ext == SQLITE_CONSTRAINT_UNIQUE)
        return donto_seterrc(err, DONTO_E_CONFLICT, "token '%s' already exists (or its hash is in use)",
                             name);
    return sq_fail(s, err, "token add");
}

/* The TRUST_COLS of a row, from column c on. */
static void trust_cols(sqlite3_stmt *st, int c, donto_trust *t) {
    t->suspended = sqlite3_column_int(st, c) != 0;
    t->streak = sqlite3_column_int64(st, c + 1);
    t->checks = sqlite3_column_int64(st, c + 2);
    t->failed = sqlite3_column_int64(st, c + 3);
    t->withdrawn = sqlite3_column_int64(st, c + 4);
    t->suspended_at = sqlite3_column_int64(st, c + 5);
    const unsigned char *r = sqlite3_column_text(st, c + 6);
    snprintf(t->reason, sizeof t->reason, "%s", r ? (const char *)r : "");
}

static int sq_token_check(donto_store *b, const uint8_t hash[32], int *found, donto_role *role,
                          char *name, size_t name_cap, donto_trust *trust, donto_err *err) {
    sq_store *s = (sq_store *)b;
    *found = 0;
    sqlite3_stmt *st = sq_get(s, Q_TOK_CHECK, err);
    if (!st) return -1;
    sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int r = donto_role_parse((const char *)sqlite3_column_text(st, 1));
        if (r >= 0) {
            *found = 1;
            if (role) *role = (donto_role)r;
            if (name && name_cap) snprintf(name, name_cap, "%s", sqlite3_column_text(st, 0));
            if (trust) trust_cols(st, 2, trust);
        }
    }
    sq_done(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sq_fail(s, err, "token check");
    return 0;
}

static int sq_token_revoke(donto_store *b, const char *name, int *revoked, donto_err *err) {
    sq_store *s = (sq_store *)b;
    sqlite3_stmt *st = sq_get(s, Q_TOK_REVOKE, err);
    if (!st) return -1;
    bind_text(st, 1, name);
    if (sq_run(s, st, "token revoke", err)) return -1;
    if (revoked) *revoked = sqlite3_changes(s->db) > 0;
    return 0;
}

static int sq_token_list(donto_store *b, donto_token_info **out, size_t *n, donto_err *err) {
    sq_store *s = (sq_store *)b;
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = sq_get(s, Q_TOK_LIST, err);
    if (!st) return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) *out = donto_xrealloc(*out, (cap = cap ? 2 * cap : 16) * sizeof **out);
        donto_token_info *t = &(*out)[(*n)++];
        t->name = col_dup(st, 0);
        int r = donto_role_parse((const char *)sqlite3_column_text(st, 1));
        t->role = r < 0 ? DONTO_ROLE_CONTRIBUTOR : (donto_role)r;
        trust_cols(st, 2, &t->trust);
        t->created = sqlite3_column_int64(st, 9);
        t->revoked = sqlite3_column_int(st, 10) != 0;
    }
    sq_done(st);
    if (rc != SQLITE_DONE) {
        donto_token_list_free(*out, *n);
        *out = NULL;
        *n = 0;
        return sq_fail(s, err, "token list");
    }
    return 0;
}

static int sq_vectors_mark(donto_store *b, donto_target t, const char *model, int64_t since_ms,
                           int64_t *count, int64_t *max_created, donto_err *err) {
    sq_store *s = (sq_store *)b;
    *count = 0;
    *max_created = INT64_MIN;
    sqlite3_stmt *st = sq_get(s, Q_VEC_MARK, err);
    if (!st) return -1;
    sqlite3_bind_int(st, 1, (int)t);
    bind_text(st, 2, model);
    sqlite3_bind_int64(st, 3, since_ms);
    sqlite3_bind_int(st, 4, b->verified_only);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *count = sqlite3_column_int64(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) *max_created = sqlite3_column_int64(st, 1);
    }
    sq_done(st);
    return rc == SQLITE_ROW ? 0 : sq_fail(s, err, "vectors high-water mark");
}

static int sq_vectors_page(donto_store *b, donto_target t, const char *model, int64_t after_created,
                           const char *after_id, size_t limit, donto_vec_page *out, donto_err *err) {
    sq_store *s = (sq_store *)b;
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = sq_get(s, Q_VEC_PAGE, err);
    if (!st) return -1;
    sqlite3_bind_int(st, 1, (int)t);
    bind_text(st, 2, model);
    /* after_id NULL: created > after_created, i.e. >= after_created + 1. */
    if (!after_id && after_created == INT64_MAX) return 0;
    sqlite3_bind_int64(st, 3, after_id ? after_created : after_created + 1);
    if (after_id) bind_text(st, 4, after_id);
    sqlite3_bind_int64(st, 5, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    sqlite3_bind_int(st, 6, b->verified_only);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (donto_vec_page_push(out, &cap, (const char *)sqlite3_column_text(st, 0),
                                (size_t)sqlite3_column_bytes(st, 0), sqlite3_column_int64(st, 1),
                                sqlite3_column_int(st, 2), sqlite3_column_blob(st, 3),
                                (size_t)sqlite3_column_bytes(st, 3), err)) {
            sq_done(st);
            donto_vec_page_free(out);
            return donto_preerr(err, "sqlite");
        }
    }
    sq_done(st);
    if (rc != SQLITE_DONE) {
        donto_vec_page_free(out);
        return sq_fail(s, err, "read vectors");
    }
    return 0;
}

static int sq_extend(donto_store *b, const char *worker_id, const donto_submit_item *items, size_t n,
                     int64_t now_ms, int64_t ttl_ms, size_t *extended, donto_err *err) {
    return sq_per_item((sq_store *)b, Q_EXTEND, "extend", worker_id, items, n, now_ms + ttl_ms, extended, err);
}

static int sq_trust_record(donto_store *b, const char *token, const donto_check *checks, size_t n,
                           int64_t now_ms, donto_err *err) {
    sq_store *s = (sq_store *)b;
    (void)now_ms;
    int64_t passed, failed, tail;
    donto_check_tally(checks, n, &passed, &failed, &tail);
    if (sq_begin(s, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!checks[i].pass) continue;
        sqlite3_stmt *st = sq_get(s, Q_CHECK_VEC, err);
        if (!st) return sq_abort(s);
        sqlite3_bind_int(st, 1, checks[i].target);
        bind_text(st, 2, checks[i].item_id);
        bind_text(st, 3, checks[i].model);
        bind_text(st, 4, token);
        sqlite3_bind_int64(st, 5, checks[i].lease_id);
        if (sq_run(s, st, "trust: mark verified", err)) return sq_abort(s);
    }
    sqlite3_stmt *st = sq_get(s, Q_CHECK_TOK, err);
    if (!st) return sq_abort(s);
    bind_text(st, 1, token);
    sqlite3_bind_int64(st, 2, passed + failed);
    sqlite3_bind_int64(st, 3, failed);
    sqlite3_bind_int64(st, 4, tail);
    if (sq_run(s, st, "trust: count checks", err)) return sq_abort(s);
    return sq_commit(s, err);
}

static int sq_suspend(donto_store *b, const char *token, const char *reason, int64_t now_ms,
                      int64_t *withdrawn, donto_err *err) {
    sq_store *s = (sq_store *)b;
    if (sq_begin(s, err)) return -1;
    sqlite3_stmt *st = sq_get(s, Q_SUSP_REQUEUE, err);
    if (!st) return sq_abort(s);
    bind_text(st, 1, token);
    if (sq_run(s, st, "suspend: queue again", err)) return sq_abort(s);
    if (!(st = sq_get(s, Q_SUSP_DELETE, err))) return sq_abort(s);
    bind_text(st, 1, token);
    if (sq_run(s, st, "suspend: withdraw vectors", err)) return sq_abort(s);
    int64_t w = sqlite3_changes(s->db);
    if (!(st = sq_get(s, Q_SUSP_RELEASE, err))) return sq_abort(s);
    bind_text(st, 1, token);
    sqlite3_bind_int64(st, 2, now_ms);
    if (sq_run(s, st, "suspend: release leases", err)) return sq_abort(s);
    if (!(st = sq_get(s, Q_SUSP_REPORT, err))) return sq_abort(s);
    bind_text(st, 1, token);
    sqlite3_bind_text(st, 2, reason, (int)donto_utf8_prefix(reason, DONTO_REPORT_MAX_CHARS), SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now_ms);
    if (sq_run(s, st, "suspend: report", err)) return sq_abort(s);
    if (!(st = sq_get(s, Q_SUSP_TOK, err))) return sq_abort(s);
    bind_text(st, 1, token);
    bind_text(st, 2, reason);
    sqlite3_bind_int64(st, 3, now_ms);
    sqlite3_bind_int64(st, 4, w);
    if (sq_run(s, st, "suspend: mark token", err)) return sq_abort(s);
    if (sq_commit(s, err)) return -1;
    *withdrawn = w;
    return 0;
}

static int sq_unsuspend(donto_store *b, const char *token, int *done, donto_err *err) {
    sq_store *s = (sq_store *)b;
    sqlite3_stmt *st = sq_get(s, Q_UNSUSP, err);
    if (!st) return -1;
    bind_text(st, 1, token);
    if (sq_run(s, st, "unsuspend", err)) return -1;
    *done = sqlite3_changes(s->db) > 0;
    return 0;
}

static int sq_ping(donto_store *b, donto_err *err) {
    return sq_exec((sq_store *)b, "SELECT 1", err);
}

static int sq_migrations_applied(donto_store *b, const char *module, uint64_t *mask, donto_err *err) {
    sq_store *s = (sq_store *)b;
    sqlite3_stmt *st = NULL;
    /* Not through sq_get: the table may not exist, and a persistent
     * statement would keep failing to prepare once it does. */
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'donto_migrations'",
                           -1, &st, NULL) != SQLITE_OK)
        return sq_fail(s, err, "read sqlite_master");
    int rc = sqlite3_step(st);
    int have = rc == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return sq_fail(s, err, "read sqlite_master");
    if (!have) return 0;
    if (sqlite3_prepare_v2(s->db, "SELECT version FROM donto_migrations WHERE module = ?1", -1, &st, NULL) != SQLITE_OK)
        return sq_fail(s, err, "read donto_migrations");
    bind_text(st, 1, module);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int v = sqlite3_column_int(st, 0);
        if (v >= 1 && v <= 63) *mask |= (uint64_t)1 << v;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : sq_fail(s, err, "read donto_migrations");
}

static void sq_close(donto_store *b) {
    sq_store *s = (sq_store *)b;
    if (!s) return;
    for (int i = 0; i < Q_N; i++) sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    free(s);
}

static int sq_db(donto_store *b, donto_db *out, donto_err *err) {
    out->kind = DONTO_DB_SQLITE;
    out->sqlite = ((sq_store *)b)->db;
    return 0;
}

/* donto_vector is donto's PostgreSQL table (float4[] embeddings, uuid
 * subjects): a SQLite database keeps every vector in `vectors`. */
static int sq_vectors_layout(donto_store *b, int layout, donto_err *err) {
    (void)b;
    if (layout == DONTO_VECTORS_OWN) return 0;
    return donto_seterrc(err, DONTO_E_INVALID,
                         "vectors in donto's table (donto_vector) need a PostgreSQL database; SQLite keeps "
                         "its vectors in its own table (vectors own)");
}

static const donto_store_ops SQ_OPS = {
    .migrate = sq_migrate,
    .enqueue = sq_enqueue,
    .lease = sq_lease,
    .submit = sq_submit,
    .release = sq_release,
    .report = sq_report,
    .stats = sq_stats,
    .embedded_since = sq_embedded_since,
    .contributors = sq_contributors,
    .series = sq_series,
    .reports_recent = sq_reports_recent,
    .token_add = sq_token_add,
    .token_check = sq_token_check,
    .token_revoke = sq_token_revoke,
    .token_list = sq_token_list,
    .vectors_mark = sq_vectors_mark,
    .vectors_page = sq_vectors_page,
    .extend = sq_extend,
    .trust_record = sq_trust_record,
    .suspend = sq_suspend,
    .unsuspend = sq_unsuspend,
    .ping = sq_ping,
    .migrations_applied = sq_migrations_applied,
    .db = sq_db,
    .vectors_layout = sq_vectors_layout,
    .close = sq_close,
};

int donto_store_open_sqlite(const char *path, int create, donto_store **out, donto_err *err) {
    *out = NULL;
    /* A reader never creates the file (a mistyped --db would otherwise leave
     * an empty database behind and fail later on a missing table). */
    struct stat sb;
    int empty = 0;
    if (!create && strcmp(path, ":memory:") != 0) {
        if (stat(path, &sb) != 0) return donto_seterrc(err, DONTO_E_NOT_FOUND, "%s does not exist", path);
        empty = sb.st_size == 0; /* no database yet: left as it is (the schema check says so) */
    }
    sq_store *s = donto_xcalloc(1, sizeof *s);
    s->base.ops = &SQ_OPS;
    /* NOMUTEX: a handle is used by one thread at a time (see store.h). */
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc != SQLITE_OK) {
        donto_seterr(err, "sqlite: open %s: %s", path,
                     s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        sq_close(&s->base);
        return -1;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_handler(s->db, sq_busy, s);
    /* WAL: readers never block the writer. NORMAL: durable at checkpoints,
     * a crash loses at most the last transactions, never corrupts. */
    if ((!empty && sq_exec(s, "PRAGMA journal_mode=WAL", err)) ||
        sq_exec(s, "PRAGMA synchronous=NORMAL", err) ||
        sq_exec(s, "PRAGMA foreign_keys=ON", err)) {
        donto_preerr(err, "%s", path);
        sq_close(&s->base);
        return -1;
    }
    *out = &s->base;
    return 0;
}
