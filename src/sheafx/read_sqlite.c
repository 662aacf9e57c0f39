/* donto-accel: the sheaf export's reader for SQLite: three scans (statements
 * joined with their claim vectors, arguments, entity vectors), each one
 * prepared statement stepped once per row inside one read transaction, so
 * the three see the same database. Filters that are cheap in SQL stay in
 * SQL (asserted by until); the leakage rules are applied in export.c, the
 * same code for both stores. */
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "sheafx_int.h"

static int sq_fail(sqlite3 *db, donto_err *err, const char *what) {
    return donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: %s: %s", what, sqlite3_errmsg(db));
}

/* "'a', 'b'" of the identity predicates (constants without quotes). */
static void ident_list(char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; SX_IDENTITY_PREDICATES[i]; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s'%s'", i ? ", " : "", SX_IDENTITY_PREDICATES[i]);
}

int sx_read_sqlite(donto_store *s, const donto_sheafx_opts *o, sx_data *d, donto_err *err) {
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    sqlite3 *c = db.sqlite;
    char ids[1024], sql[2048];
    ident_list(ids, sizeof ids);
    const char *verified = s->verified_only ? " AND v.verified = 1" : "";
    if (sqlite3_exec(c, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) return sq_fail(c, err, "begin");
    int rc = -1;
    sqlite3_stmt *q = NULL;
    /* A model with no claim vectors at all: say so before the big read. */
    if (sqlite3_prepare_v2(c, "SELECT EXISTS (SELECT 1 FROM vectors WHERE target = 0 AND model = ?1)", -1, &q, NULL) != SQLITE_OK) {
        sq_fail(c, err, "probe vectors");
        goto out;
    }
    sqlite3_bind_text(q, 1, o->model, -1, SQLITE_STATIC);
    if (sqlite3_step(q) != SQLITE_ROW) {
        sq_fail(c, err, "probe vectors");
        goto out;
    }
    if (!sqlite3_column_int(q, 0)) {
        sx_no_vectors(o->model, err);
        goto out;
    }
    sqlite3_finalize(q);
    q = NULL;
    snprintf(sql, sizeof sql,
             "SELECT s.statement_id, s.subject, s.object_iri, s.tx_from, s.tx_until,"
             " substr(s.context, 1, %d) = '%s', s.predicate IN (%s), v.vec"
             " FROM donto_statement s LEFT JOIN vectors v ON v.target = 0"
             " AND v.item_id = s.statement_id AND v.model = ?1%s WHERE s.tx_from <= ?2",
             (int)strlen(DONTO_SHEAF_CONTEXT_PREFIX), DONTO_SHEAF_CONTEXT_PREFIX, ids, verified);
    if (sqlite3_prepare_v2(c, sql, -1, &q, NULL) != SQLITE_OK) {
        sq_fail(c, err, "prepare statements");
        goto out;
    }
    sqlite3_bind_text(q, 1, o->model, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, o->until);
    int r;
    int64_t n = 0;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        uint8_t u[16];
        const char *id = (const char *)sqlite3_column_text(q, 0);
        if (!id || sx_parse_uuid(id, u)) {
            donto_seterrc(err, DONTO_E_INVALID, "sqlite: statement id '%s' is not a uuid", id ? id : "");
            goto out;
        }
        const char *subj = (const char *)sqlite3_column_text(q, 1);
        const char *obj = (const char *)sqlite3_column_text(q, 2);
        int64_t until = sqlite3_column_type(q, 4) == SQLITE_NULL ? SX_OPEN : sqlite3_column_int64(q, 4);
        const void *vec = sqlite3_column_blob(q, 7);
        size_t vb = (size_t)sqlite3_column_bytes(q, 7);
        if (sx_add_stmt(d, u, subj, strlen(subj), obj, obj ? strlen(obj) : 0, sqlite3_column_int64(q, 3),
                        until, sqlite3_column_int(q, 5), sqlite3_column_int(q, 6), vec, vb, err))
            goto out;
        if (o->progress && (++n & 65535) == 0) o->progress(o->ctx, "statements read", n, 0);
    }
    if (r != SQLITE_DONE) {
        sq_fail(c, err, "read statements");
        goto out;
    }
    sqlite3_finalize(q);
    snprintf(sql, sizeof sql,
             "SELECT source_statement_id, target_statement_id, relation, tx_from, tx_until,"
             " substr(context, 1, %d) = '%s' FROM donto_argument WHERE tx_from <= ?1",
             (int)strlen(DONTO_SHEAF_CONTEXT_PREFIX), DONTO_SHEAF_CONTEXT_PREFIX);
    if (sqlite3_prepare_v2(c, sql, -1, &q, NULL) != SQLITE_OK) {
        q = NULL;
        sq_fail(c, err, "prepare arguments");
        goto out;
    }
    sqlite3_bind_int64(q, 1, o->until);
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        uint8_t a[16], b[16];
        const char *sa = (const char *)sqlite3_column_text(q, 0), *sb = (const char *)sqlite3_column_text(q, 1);
        const char *rel = (const char *)sqlite3_column_text(q, 2);
        if (!sa || !sb || sx_parse_uuid(sa, a) || sx_parse_uuid(sb, b)) {
            donto_seterrc(err, DONTO_E_INVALID, "sqlite: an argument names a statement id that is not a uuid");
            goto out;
        }
        int64_t until = sqlite3_column_type(q, 4) == SQLITE_NULL ? SX_OPEN : sqlite3_column_int64(q, 4);
        if (sx_add_arg(d, a, b, rel, strlen(rel), sqlite3_column_int64(q, 3), until, sqlite3_column_int(q, 5), err))
            goto out;
    }
    if (r != SQLITE_DONE) {
        sq_fail(c, err, "read arguments");
        goto out;
    }
    sqlite3_finalize(q);
    snprintf(sql, sizeof sql, "SELECT item_id, vec FROM vectors v WHERE target = 2 AND model = ?1%s", verified);
    if (sqlite3_prepare_v2(c, sql, -1, &q, NULL) != SQLITE_OK) {
        q = NULL;
        sq_fail(c, err, "prepare entity vectors");
        goto out;
    }
    sqlite3_bind_text(q, 1, o->model, -1, SQLITE_STATIC);
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        const char *iri = (const char *)sqlite3_column_text(q, 0);
        if (sx_add_entity_vec(d, iri, strlen(iri), sqlite3_column_blob(q, 1), (size_t)sqlite3_column_bytes(q, 1), err))
            goto out;
    }
    if (r != SQLITE_DONE) {
        sq_fail(c, err, "read entity vectors");
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(q);
    sqlite3_exec(c, "COMMIT", NULL, NULL, NULL);
    return rc;
}
