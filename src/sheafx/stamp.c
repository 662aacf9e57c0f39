/* donto-accel: a simulated history for a substrate loaded all at once (a
 * WordNet import), so that an export of it has a test window: every live
 * statement and argument is re-stamped as asserted at as_of - 1 day, then a
 * seeded share of the arguments and of the identity statements is re-stamped
 * as asserted at a seeded time in (as_of, until]. Which rows are held out,
 * and when they are asserted, depends only on (seed, the unordered pair the
 * row joins: an argument's two claims, an identity statement's two
 * entities), not on the row's id nor on the order the database returns
 * them: a symmetric fact stored both ways (WordNet's similar_to, antonymy)
 * is held out whole. Holding out one direction alone would leave the pair
 * known at as_of through the other, and the export rightly keeps such a
 * pair out of the test set (before this, 4 in 5 of WordNet's held-out
 * identity pairs were lost that way). Set-based where SQL can say it (the bulk re-stamp is one
 * UPDATE per table); the held-out rows are chosen here and written with one
 * UPDATE ... FROM unnest(...) on PostgreSQL, one prepared UPDATE per row
 * in the same transaction on SQLite. */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sheafx_int.h"

#define DAY_MS ((int64_t)86400000)

static uint64_t id_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return sx_rng(&h);
}

/* Held out? Then *t = its new assertion time. The key is the unordered
 * pair {a, b}, or the row's id when the row does not join two things. */
static int held(const char *id, const char *a, const char *b, uint64_t seed, double frac, int64_t as_of,
                int64_t until, int64_t *t) {
    uint64_t r;
    if (a && b) {
        if (strcmp(a, b) > 0) {
            const char *x = a;
            a = b, b = x;
        }
        uint64_t h = id_hash(a, seed);
        r = id_hash(b, h ^ 0x7c); /* a then b: {a, b} and {b, a} hash alike */
    } else {
        r = id_hash(id, seed);
    }
    if ((double)(r >> 11) * (1.0 / 9007199254740992.0) >= frac) return 0;
    uint64_t r2 = r;
    *t = as_of + 1 + (int64_t)sx_below(&r2, (uint64_t)(until - as_of));
    return 1;
}

static void ident_in(char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; SX_IDENTITY_PREDICATES[i]; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s'%s'", i ? ", " : "", SX_IDENTITY_PREDICATES[i]);
}

typedef struct idlist {
    char **id;
    int64_t *t;
    size_t n, cap;
} idlist;
static void idl_add(idlist *l, const char *id, int64_t t) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->id = donto_xrealloc(l->id, l->cap * sizeof *l->id);
        l->t = donto_xrealloc(l->t, l->cap * sizeof *l->t);
    }
    l->id[l->n] = donto_xstrdup(id);
    l->t[l->n++] = t;
}
static void idl_free(idlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->id[i]);
    free(l->id), free(l->t);
    memset(l, 0, sizeof *l);
}

/* ---- SQLite ------------------------------------------------------------------ */

static int sq_err(sqlite3 *db, donto_err *err, const char *what) {
    return donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: %s: %s", what, sqlite3_errmsg(db));
}

static int sq_pick(sqlite3 *db, const char *sql, uint64_t seed, double frac, int64_t a, int64_t u, idlist *l,
                   donto_err *err) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return sq_err(db, err, "select");
    int r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t t;
        const char *id = (const char *)sqlite3_column_text(q, 0);
        const char *ka = (const char *)sqlite3_column_text(q, 1), *kb = (const char *)sqlite3_column_text(q, 2);
        if (held(id, ka, kb, seed, frac, a, u, &t)) idl_add(l, id, t);
    }
    sqlite3_finalize(q);
    return r == SQLITE_DONE ? 0 : sq_err(db, err, "select");
}

static int sq_apply(sqlite3 *db, const char *sql, const idlist *l, donto_err *err) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return sq_err(db, err, "update");
    for (size_t i = 0; i < l->n; i++) {
        sqlite3_bind_int64(q, 1, l->t[i]);
        sqlite3_bind_text(q, 2, l->id[i], -1, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) {
            sqlite3_finalize(q);
            return sq_err(db, err, "update");
        }
        sqlite3_reset(q);
    }
    sqlite3_finalize(q);
    return 0;
}

static int stamp_sqlite(sqlite3 *db, int64_t as_of, int64_t until, double frac, uint64_t seed,
                        donto_sheafx_stamp_stats *st, donto_err *err) {
    char sql[1024], ids[512];
    ident_in(ids, sizeof ids);
    idlist A = {0}, I = {0};
    int rc = -1;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return sq_err(db, err, "begin");
    snprintf(sql, sizeof sql, "UPDATE donto_statement SET tx_from = %lld WHERE tx_until IS NULL", (long long)(as_of - DAY_MS));
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) { sq_err(db, err, "restamp statements"); goto out; }
    st->statements = sqlite3_changes(db);
    snprintf(sql, sizeof sql, "UPDATE donto_argument SET tx_from = %lld WHERE tx_until IS NULL", (long long)(as_of - DAY_MS));
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) { sq_err(db, err, "restamp arguments"); goto out; }
    st->arguments = sqlite3_changes(db);
    if (sq_pick(db,
                "SELECT CAST(argument_id AS TEXT), source_statement_id, target_statement_id FROM donto_argument "
                "WHERE tx_until IS NULL",
                seed, frac, as_of, until, &A, err))
        goto out;
    snprintf(sql, sizeof sql,
             "SELECT statement_id, subject, object_iri FROM donto_statement WHERE tx_until IS NULL AND predicate IN (%s)",
             ids);
    if (sq_pick(db, sql, seed ^ 0x1de7, frac, as_of, until, &I, err)) goto out;
    if (sq_apply(db, "UPDATE donto_argument SET tx_from = ?1 WHERE argument_id = CAST(?2 AS INTEGER)", &A, err)) goto out;
    if (sq_apply(db, "UPDATE donto_statement SET tx_from = ?1 WHERE statement_id = ?2", &I, err)) goto out;
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) { sq_err(db, err, "commit"); goto out; }
    st->held_arguments = (int64_t)A.n, st->held_identity = (int64_t)I.n;
    rc = 0;
out:
    if (rc) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    idl_free(&A), idl_free(&I);
    return rc;
}

/* ---- PostgreSQL ----------------------------------------------------------------- */

static int pg_run(PGconn *c, const char *sql, int np, const char *const *pv, int64_t *changed, idlist *pick,
                  uint64_t seed, double frac, int64_t a, int64_t u, donto_err *err) {
    PGresult *r = PQexecParams(c, sql, np, NULL, pv, NULL, NULL, 0);
    ExecStatusType k = PQresultStatus(r);
    if (k != PGRES_COMMAND_OK && k != PGRES_TUPLES_OK) {
        donto_seterrc(err, DONTO_E_UNAVAILABLE, "postgres: %.60s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
        return -1;
    }
    if (changed) *changed = strtoll(PQcmdTuples(r), NULL, 10);
    if (pick)
        for (int i = 0; i < PQntuples(r); i++) {
            int64_t t;
            const char *ka = PQgetisnull(r, i, 1) ? NULL : PQgetvalue(r, i, 1);
            const char *kb = PQgetisnull(r, i, 2) ? NULL : PQgetvalue(r, i, 2);
            if (held(PQgetvalue(r, i, 0), ka, kb, seed, frac, a, u, &t)) idl_add(pick, PQgetvalue(r, i, 0), t);
        }
    PQclear(r);
    return 0;
}

/* {"a","b"} and {1,2} array literals of a list. */
static char *arr_ids(const idlist *l) {
    size_t cap = 16, n = 0;
    for (size_t i = 0; i < l->n; i++) cap += strlen(l->id[i]) + 3;
    char *s = donto_xmalloc(cap);
    s[n++] = '{';
    for (size_t i = 0; i < l->n; i++) n += (size_t)snprintf(s + n, cap - n, "%s\"%s\"", i ? "," : "", l->id[i]);
    snprintf(s + n, cap - n, "}");
    return s;
}
static char *arr_times(const idlist *l) {
    size_t cap = 16 + 22 * l->n, n = 0;
    char *s = donto_xmalloc(cap);
    s[n++] = '{';
    for (size_t i = 0; i < l->n; i++) n += (size_t)snprintf(s + n, cap - n, "%s%lld", i ? "," : "", (long long)l->t[i]);
    snprintf(s + n, cap - n, "}");
    return s;
}

static int stamp_pg(PGconn *c, int64_t as_of, int64_t until, double frac, uint64_t seed, donto_sheafx_stamp_stats *st,
                    donto_err *err) {
    char sql[1024], ids[512], base[32];
    ident_in(ids, sizeof ids);
    snprintf(base, sizeof base, "%lld", (long long)(as_of - DAY_MS));
    const char *pb[1] = {base};
    idlist A = {0}, I = {0};
    int rc = -1;
    if (pg_run(c, "BEGIN", 0, NULL, NULL, NULL, 0, 0, 0, 0, err)) return -1;
    if (pg_run(c, "SET LOCAL statement_timeout = 0", 0, NULL, NULL, NULL, 0, 0, 0, 0, err)) goto out;
    if (pg_run(c, "UPDATE donto_statement SET tx_time = tstzrange(to_timestamp($1::int8 / 1000.0), NULL) WHERE upper_inf(tx_time)",
               1, pb, &st->statements, NULL, 0, 0, 0, 0, err))
        goto out;
    if (pg_run(c, "UPDATE donto_argument SET tx_time = tstzrange(to_timestamp($1::int8 / 1000.0), NULL) WHERE upper_inf(tx_time)",
               1, pb, &st->arguments, NULL, 0, 0, 0, 0, err))
        goto out;
    if (pg_run(c,
               "SELECT argument_id::text, source_statement_id::text, target_statement_id::text FROM donto_argument "
               "WHERE upper_inf(tx_time)",
               0, NULL, NULL, &A, seed, frac, as_of, until, err))
        goto out;
    snprintf(sql, sizeof sql,
             "SELECT statement_id::text, subject, object_iri FROM donto_statement WHERE upper_inf(tx_time) AND predicate "
             "IN (%s)",
             ids);
    if (pg_run(c, sql, 0, NULL, NULL, &I, seed ^ 0x1de7, frac, as_of, until, err)) goto out;
    for (int k = 0; k < 2; k++) {
        idlist *l = k ? &I : &A;
        if (!l->n) continue;
        char *ai = arr_ids(l), *at = arr_times(l);
        const char *pv[2] = {ai, at};
        int r = pg_run(c,
                       k ? "UPDATE donto_statement SET tx_time = tstzrange(to_timestamp(x.t / 1000.0), NULL) "
                           "FROM unnest($1::uuid[], $2::int8[]) AS x(id, t) WHERE statement_id = x.id"
                         : "UPDATE donto_argument SET tx_time = tstzrange(to_timestamp(x.t / 1000.0), NULL) "
                           "FROM unnest($1::int8[], $2::int8[]) AS x(id, t) WHERE argument_id = x.id",
                       2, pv, NULL, NULL, 0, 0, 0, 0, err);
        free(ai), free(at);
        if (r) goto out;
    }
    if (pg_run(c, "COMMIT", 0, NULL, NULL, NULL, 0, 0, 0, 0, err)) goto out;
    st->held_arguments = (int64_t)A.n, st->held_identity = (int64_t)I.n;
    rc = 0;
out:
    if (rc) PQclear(PQexec(c, "ROLLBACK"));
    idl_free(&A), idl_free(&I);
    return rc;
}

int donto_sheafx_stamp_history(donto_store *s, int64_t as_of, int64_t until, double holdout, uint64_t seed,
                               donto_sheafx_stamp_stats *st, donto_err *err) {
    donto_sheafx_stamp_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (until <= as_of) return donto_seterrc(err, DONTO_E_INVALID, "until must be later than as_of");
    if (!(holdout >= 0 && holdout <= 1)) return donto_seterrc(err, DONTO_E_INVALID, "holdout must be in [0, 1]");
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    return db.kind == DONTO_DB_POSTGRES ? stamp_pg(db.pg, as_of, until, holdout, seed, st, err)
                                        : stamp_sqlite(db.sqlite, as_of, until, holdout, seed, st, err);
}
