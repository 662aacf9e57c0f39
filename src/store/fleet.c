/* donto-accel: what many coordinators on one database share beyond the
 * queue (docs/fleet.md): fleet-wide counters and a lock across processes.
 *
 * Counters (store migration 9, table donto_counters): the coordinator's
 * event counts that /embed/stats shows for the whole fleet (the verifier's
 * verdicts, skipped checks, canary verdicts). Each event adds to its row at
 * once with one upsert, so a coordinator killed at any moment has lost
 * nothing it counted, and every coordinator reads the same figures. The
 * rows are few and the events rare (a sampled share of submitted items), so
 * one row per name is no point of contention worth batching for.
 *
 * The lock: a PostgreSQL session advisory lock on a key, held by the
 * connection behind one store handle (released by the server when that
 * connection dies, so a SIGKILLed holder never wedges the others); on
 * SQLite, nothing (one file, one host: coordinators sharing it already
 * serialise on its writer lock, and the fleet is a PostgreSQL setup).
 *
 * A token's leases across the fleet: the items it holds leased now,
 * whichever coordinator leased them (queue rows whose owner is
 * "<token>/..." and whose lease has not run out), for --max-outstanding.
 * One range of the queue_ready index (lease_expires > now: the leases live
 * now, of every token) filtered by owner; its cost grows with the fleet's
 * items in flight, not with the queue.
 *
 * All three go through donto_store_db() (the live connection) rather than a
 * method of each backend: a few statements in the SQL both databases
 * speak, kept here in one place. A backend without a database (the
 * coordinator tests' fake store) answers DONTO_E_NOT_FOUND, and callers fall
 * back to their own process's figures. */
#include "store_int.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pg_exec(PGconn *c, const char *sql, int n, const char *const *vals, PGresult **out, const char *what,
                   donto_err *err) {
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        /* The backend's own classifier (42P01, no such table: not migrated). */
        donto_code code = donto_store_pg_code(c, r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL);
        donto_seterrc(err, code, "postgres: %s: %s", what, PQerrorMessage(c));
        PQclear(r);
        return -1;
    }
    if (out) *out = r;
    else PQclear(r);
    return 0;
}

static int sq_fail(sqlite3 *db, const char *what, donto_err *err) {
    return donto_seterrc(err, donto_store_sq_code(db), "sqlite: %s: %s", what, sqlite3_errmsg(db));
}

#define COUNTER_ADD_SQL                                                                                \
    "INSERT INTO donto_counters (name, value) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET value =" \
    " donto_counters.value + excluded.value"

int donto_store_counter_add(donto_store *s, const char *name, int64_t delta, donto_err *err) {
    donto_err local = {0};
    if (!err) err = &local;
    if (!name || !*name) return donto_seterrc(err, DONTO_E_INVALID, "counter add: no name");
    if (delta == 0) return 0;
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    if (db.kind == DONTO_DB_POSTGRES) {
        char d[24];
        snprintf(d, sizeof d, "%" PRId64, delta);
        const char *v[2] = {name, d};
        char sql[256];
        snprintf(sql, sizeof sql, COUNTER_ADD_SQL, "$1", "$2::bigint");
        return pg_exec(db.pg, sql, 2, v, NULL, "counter add", err);
    }
    char sql[256];
    snprintf(sql, sizeof sql, COUNTER_ADD_SQL, "?1", "?2");
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db.sqlite, sql, -1, &st, NULL) != SQLITE_OK) return sq_fail(db.sqlite, "counter add", err);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, delta);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : sq_fail(db.sqlite, "counter add", err);
}

int donto_store_counters_get(donto_store *s, const char *const *names, size_t n, int64_t *out, donto_err *err) {
    donto_err local = {0};
    if (!err) err = &local;
    for (size_t i = 0; i < n; i++) out[i] = 0;
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    const char *sql = "SELECT name, value FROM donto_counters";
    if (db.kind == DONTO_DB_POSTGRES) {
        PGresult *r = NULL;
        if (pg_exec(db.pg, sql, 0, NULL, &r, "counters", err)) return -1;
        for (int row = 0; row < PQntuples(r); row++)
            for (size_t i = 0; i < n; i++)
                if (!strcmp(PQgetvalue(r, row, 0), names[i])) out[i] = strtoll(PQgetvalue(r, row, 1), NULL, 10);
        PQclear(r);
        return 0;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db.sqlite, sql, -1, &st, NULL) != SQLITE_OK) return sq_fail(db.sqlite, "counters", err);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        for (size_t i = 0; name && i < n; i++)
            if (!strcmp(name, names[i])) out[i] = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : sq_fail(db.sqlite, "counters", err);
}

static int advisory(donto_store *s, int64_t key, int lock, donto_err *err) {
    donto_err local = {0};
    if (!err) err = &local;
    donto_db db;
    if (donto_store_db(s, &db, err)) return err->code == DONTO_E_NOT_FOUND ? 0 : -1; /* no database: nothing to lock */
    if (db.kind != DONTO_DB_POSTGRES) return 0;
    char k[24];
    snprintf(k, sizeof k, "%" PRId64, key);
    const char *v[1] = {k};
    return pg_exec(db.pg, lock ? "SELECT pg_advisory_lock($1::bigint)" : "SELECT pg_advisory_unlock($1::bigint)", 1,
                   v, NULL, lock ? "advisory lock" : "advisory unlock", err);
}

int donto_store_lock(donto_store *s, int64_t key, donto_err *err) { return advisory(s, key, 1, err); }
int donto_store_unlock(donto_store *s, int64_t key, donto_err *err) { return advisory(s, key, 0, err); }

int donto_store_leased_by(donto_store *s, const char *token, int64_t now_ms, int64_t *count, int64_t *first_expiry,
                          donto_err *err) {
    donto_err local = {0};
    if (!err) err = &local;
    *count = 0, *first_expiry = 0;
    if (!token || !*token) return donto_seterrc(err, DONTO_E_INVALID, "leased by: no token");
    char prefix[DONTO_TOKEN_NAME_MAX + 2];
    snprintf(prefix, sizeof prefix, "%s%c", token, DONTO_WORKER_SEP);
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    /* substr/length, not LIKE (a token name may hold % or _) nor a range
     * (collations differ): both databases speak these. */
    if (db.kind == DONTO_DB_POSTGRES) {
        char now[24];
        snprintf(now, sizeof now, "%" PRId64, now_ms);
        const char *v[2] = {prefix, now};
        PGresult *r = NULL;
        if (pg_exec(db.pg,
                    "SELECT count(*), coalesce(min(lease_expires), 0) FROM queue WHERE lease_expires > $2::bigint"
                    " AND substr(lease_owner, 1, length($1)) = $1",
                    2, v, &r, "leased by token", err))
            return -1;
        *count = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        *first_expiry = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
        PQclear(r);
        return 0;
    }
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db.sqlite,
                           "SELECT count(*), coalesce(min(lease_expires), 0) FROM queue WHERE lease_expires > ?2"
                           " AND substr(lease_owner, 1, length(?1)) = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return sq_fail(db.sqlite, "leased by token", err);
    sqlite3_bind_text(st, 1, prefix, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, now_ms);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *count = sqlite3_column_int64(st, 0), *first_expiry = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : sq_fail(db.sqlite, "leased by token", err);
}
