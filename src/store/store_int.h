/* donto-accel: what the two store backends share (not a public header). */
#ifndef DONTO_STORE_INT_H
#define DONTO_STORE_INT_H

#include "donto/store.h"

/* create 0: a file that does not exist is -1, DONTO_E_NOT_FOUND. */
int donto_store_open_sqlite(const char *path, int create, donto_store **out, donto_err *err);
int donto_store_open_pg(const char *url, donto_store **out, donto_err *err);

/* What kind of failure a database's last one was (util.h), one classifier
 * per backend, for everything in the store that talks to a connection:
 * PostgreSQL from the connection's state and the SQLSTATE (sqlstate: the
 * failed result's PG_DIAG_SQLSTATE, "" or NULL when none); SQLite from its
 * last result code and message. Opaque handles, so this header needs
 * neither library's. */
struct pg_conn;
struct sqlite3;
donto_code donto_store_pg_code(const struct pg_conn *conn, const char *sqlstate);
donto_code donto_store_sq_code(struct sqlite3 *db);


/* Byte length of the longest prefix of s holding at most max_chars UTF-8
 * characters (continuation bytes never split). */
size_t donto_utf8_prefix(const char *s, size_t max_chars);

/* Vectors are stored as float32 little-endian bytes whatever the host. */
void donto_f32_to_le(const float *v, int dims, unsigned char *out);
void donto_f32_from_le(const unsigned char *in, int dims, float *out);
/* Append one row to a page being filled (cap: its row capacity; vecs are
 * float32 LE bytes). -1 with err set when dims or the blob length disagree
 * with the page's first row. */
int donto_vec_page_push(donto_vec_page *p, size_t *cap, const char *item_id, size_t id_len,
                        int64_t created, int dims, const void *blob, size_t blob_len, donto_err *err);

/* The submit decision for one item, shared so both backends agree.
 * Queue row found: its owner and lease_id. */
donto_reject donto_submit_verdict_queued(const char *worker_id, int64_t given_lease,
                                         const char *owner, int64_t row_lease);
/* No queue row: is there a stored vector, and from whom / which lease?
 * Returns NONE for a repeat of this worker's own accepted submit (*repeat=1). */
donto_reject donto_submit_verdict_stored(const char *worker_id, int64_t given_lease,
                                         int have_vector, const char *contributor,
                                         int64_t vec_lease, int *repeat);

char *donto_strdup_or_null(const char *s);

/* s is a uuid in the canonical 8-4-4-4-12 hex form (either case). */
int donto_store_is_uuid(const char *s);

/* A batch of checks, for the token's record: passed, failed, and tail =
 * the passes after the last failure (the new streak when failed > 0, else
 * what the streak grows by). Shared so both backends count alike. */
void donto_check_tally(const donto_check *checks, size_t n, int64_t *passed, int64_t *failed, int64_t *tail);


/* The table that records applied migrations, per (module, version). A
 * database made before the registry kept one list, schema_migrations, in
 * which 1-9 were the store's and 10 and up the substrate's (10 = its 1);
 * each backend's migrate runs this statement (the same SQL on both) once,
 * in the transaction that creates donto_migrations. */
#define DONTO_MIGRATIONS_CARRY_OVER                                                      \
    "INSERT INTO donto_migrations SELECT CASE WHEN version < 10 THEN 'store'"             \
    " ELSE 'substrate' END, CASE WHEN version < 10 THEN version ELSE version - 9 END,"    \
    " name, applied FROM schema_migrations"

#endif
