/* Tests: one read-only SQL query against the store's database, SQLite (a
 * file path) or PostgreSQL (a postgres:// or postgresql:// URL), for the
 * facts the store API does not expose (which items are leased to whom,
 * which vectors a token stored, whether they are verified). Values come back
 * as text; a bytea/blob column as its raw bytes (PostgreSQL's hex text is
 * decoded). The SQL must be valid on both (no parameters: callers format
 * their own literals, from names they chose). */
#ifndef DONTO_TEST_SQLQ_H
#define DONTO_TEST_SQLQ_H

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* vals[i]: lens[i] bytes (text NUL-terminated; a blob not necessarily); NULL for SQL NULL. */
typedef void (*sqlq_row_fn)(int ncols, const char *const *vals, const int *lens, void *u);

static inline int sqlq_is_pg(const char *db) {
    return !strncmp(db, "postgres://", 11) || !strncmp(db, "postgresql://", 13);
}

static inline int sqlq_hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

#define SQLQ_MAXCOLS 8

/* Runs sql, calls fn once per row; 0, or -1 (message on stderr). */
static inline int sqlq(const char *db, const char *sql, sqlq_row_fn fn, void *u) {
    const char *vals[SQLQ_MAXCOLS];
    int lens[SQLQ_MAXCOLS];
    if (sqlq_is_pg(db)) {
        PGconn *c = PQconnectdb(db);
        if (PQstatus(c) != CONNECTION_OK) {
            fprintf(stderr, "sqlq: connect: %s", PQerrorMessage(c));
            PQfinish(c);
            return -1;
        }
        PGresult *r = PQexec(c, sql);
        int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : -1;
        if (rc) fprintf(stderr, "sqlq: %s: %s", sql, PQerrorMessage(c));
        int nc = rc ? 0 : PQnfields(r);
        if (nc > SQLQ_MAXCOLS) nc = SQLQ_MAXCOLS;
        char *bufs[SQLQ_MAXCOLS] = {0};
        for (int i = 0; !rc && i < PQntuples(r); i++) {
            for (int k = 0; k < nc; k++) {
                if (PQgetisnull(r, i, k)) {
                    vals[k] = NULL, lens[k] = 0;
                    continue;
                }
                const char *v = PQgetvalue(r, i, k);
                int l = PQgetlength(r, i, k);
                if (PQftype(r, k) == 17 /* bytea */ && l >= 2 && v[0] == '\\' && v[1] == 'x') {
                    int bl = (l - 2) / 2;
                    free(bufs[k]);
                    bufs[k] = malloc((size_t)bl + 1);
                    for (int j = 0; j < bl; j++)
                        bufs[k][j] = (char)(sqlq_hexval(v[2 + 2 * j]) << 4 | sqlq_hexval(v[3 + 2 * j]));
                    bufs[k][bl] = 0;
                    vals[k] = bufs[k], lens[k] = bl;
                } else {
                    vals[k] = v, lens[k] = l;
                }
            }
            fn(nc, vals, lens, u);
        }
        for (int k = 0; k < SQLQ_MAXCOLS; k++) free(bufs[k]);
        PQclear(r);
        PQfinish(c);
        return rc;
    }
    sqlite3 *h = NULL;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlq: open %s: %s\n", db, h ? sqlite3_errmsg(h) : "?");
        sqlite3_close(h);
        return -1;
    }
    sqlite3_busy_timeout(h, 10000);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(h, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        int nc = sqlite3_column_count(st);
        if (nc > SQLQ_MAXCOLS) nc = SQLQ_MAXCOLS;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            for (int k = 0; k < nc; k++) {
                int t = sqlite3_column_type(st, k);
                if (t == SQLITE_NULL) {
                    vals[k] = NULL, lens[k] = 0;
                } else if (t == SQLITE_BLOB) {
                    vals[k] = sqlite3_column_blob(st, k), lens[k] = sqlite3_column_bytes(st, k);
                } else {
                    vals[k] = (const char *)sqlite3_column_text(st, k), lens[k] = sqlite3_column_bytes(st, k);
                }
            }
            fn(nc, vals, lens, u);
        }
        rc = rc == SQLITE_DONE ? 0 : -1;
    } else {
        rc = -1;
    }
    if (rc) fprintf(stderr, "sqlq: %s: %s\n", sql, sqlite3_errmsg(h));
    sqlite3_finalize(st);
    sqlite3_close(h);
    return rc;
}

static inline void sqlq_first_ll(int ncols, const char *const *vals, const int *lens, void *u) {
    (void)lens;
    if (ncols > 0 && vals[0]) *(long long *)u = atoll(vals[0]);
}

/* The first column of the first row as an integer; -1 on error. */
static inline long long sqlq_ll(const char *db, const char *sql) {
    long long v = 0;
    return sqlq(db, sql, sqlq_first_ll, &v) ? -1 : v;
}

#endif
