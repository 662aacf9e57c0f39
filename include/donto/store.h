/*
 * donto-accel: the embedding work queue's storage, behind one interface with
 * two backends (SQLite in WAL mode: the embedded default; PostgreSQL: the
 * production engine, several coordinators may share one database).
 *
 * Model of the queue:
 *   queue item   (target, item_id, text, model) waiting for a vector; hot
 *                table, kept small: an item leaves it when its vector lands.
 *   lease        a worker holds a batch of items until lease expiry
 *                (now + ttl). Each leased item carries a lease_id (fencing
 *                token): a submit whose lease_id is no longer the item's
 *                current one (expired and re-leased) is rejected per item.
 *   vector       float32 bytes stored with model, dims, contributor, time;
 *                upsert is idempotent on (target, item_id, model).
 * Time is passed in by the caller (now_ms, Unix milliseconds), so tests
 * drive expiry with an injected clock and no backend reads the wall clock.
 *
 * Backends: src/store/sqlite.c (WAL, synchronous=NORMAL, a bounded busy
 * wait; writes are BEGIN IMMEDIATE, one writer at a time) and src/store/pg.c
 * (libpq; leases with FOR UPDATE SKIP LOCKED, one statement per lease call).
 * Both keep the same schema, applied by numbered migrations, and the same
 * verdict rules (src/store/store.c); tests/test_store.c runs one suite on
 * both.
 *
 * Every function returns 0 on success or -1 with err set (the message names
 * the backend and the SQL step that failed). A store handle is
 * used by one thread at a time; the coordinator keeps a bounded pool of
 * handles and a request holds exactly one while it runs (never waiting for a
 * second one: the deadlock of the first coordinator).
 */
#ifndef DONTO_STORE_H
#define DONTO_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DONTO_TARGET_CLAIM = 0,
    DONTO_TARGET_PREDICATE = 1,
    DONTO_TARGET_ENTITY = 2,
    DONTO_TARGET_MEMORY_CHUNK = 3,
    DONTO_TARGET_N = 4,
} donto_target;

/* "claim" | "predicate" | "entity" | "memory_chunk" -> target, or -1. */
int donto_target_parse(const char *s);
/* The names, indexed by target and NULL-terminated (an option table's choices). */
extern const char *const donto_target_names[DONTO_TARGET_N + 1];
const char *donto_target_name(donto_target t);

/* What a token may do (docs/trust.md): contributors lease, submit, release
 * and report; readers also query recall; analysts query the sheaf models
 * (/sheaf/ routes, docs/sheaf-serving.md); admins see everything. */
typedef enum { DONTO_ROLE_CONTRIBUTOR = 0, DONTO_ROLE_ADMIN = 1, DONTO_ROLE_READER = 2, DONTO_ROLE_ANALYST = 3 } donto_role;
/* "contributor" | "reader" | "analyst" | "admin" -> role, or -1; and back. */
int donto_role_parse(const char *s);
const char *donto_role_name(donto_role r);

/* Who a worker is. A worker id on the wire names a worker within the token
 * that sent it: the coordinator hands the store "<token name>/<worker id>",
 * so two tokens can never act as the same worker, and every lease, vector
 * and report names its token. Token names therefore hold no '/'. The store
 * reads the token back as the part before the first '/' (none: no token, a
 * vector written by the operator's own tools, which counts as verified). */
#define DONTO_WORKER_SEP '/'
/* The longest token name (bytes). */
#define DONTO_TOKEN_NAME_MAX 100
/* Copy the token part of worker_id into out (cap bytes); 0 when there is
 * one, -1 when worker_id has no token part or it does not fit. */
int donto_worker_token(const char *worker_id, char *out, size_t cap);

typedef struct donto_enqueue_item {
    donto_target target;
    const char *item_id; /* opaque string id (claims use uuids, others IRIs) */
    const char *text;
    const char *model;   /* e.g. "BAAI/bge-small-en-v1.5" */
} donto_enqueue_item;

typedef struct donto_leased_item {
    donto_target target;
    char *item_id;
    char *text;
    char *model;
    int64_t lease_id;
} donto_leased_item;

typedef struct donto_lease_batch {
    donto_leased_item *items;
    size_t n;
} donto_lease_batch;
void donto_lease_batch_free(donto_lease_batch *b);

typedef struct donto_submit_item {
    donto_target target;
    const char *item_id;
    int64_t lease_id;     /* 0: not given (legacy clients); then the item must be
                           * leased by this worker (the owner is the only fence) */
    const float *vector;  /* dims floats, already validated (finite, unit norm) */
    int dims;
    const char *model;    /* NULL: whichever model the item is queued for (an item
                           * queued for two models needs lease_id or model) */
} donto_submit_item;

typedef enum {
    DONTO_REJECT_NONE = 0,
    DONTO_REJECT_UNKNOWN_ITEM,    /* no such queue item (and no stored vector) */
    DONTO_REJECT_NOT_LEASED,      /* not leased by this worker */
    DONTO_REJECT_LEASE_EXPIRED,   /* lease_id is stale: expired and re-leased */
    DONTO_REJECT_WRONG_MODEL,     /* dims do not match the model's dims (fixed by the
                                   * first vector ever accepted for that model) */
} donto_reject;
const char *donto_reject_reason(donto_reject r);

typedef struct donto_submit_result {
    size_t upserted;      /* items accepted (reject NONE), repeats included */
    size_t repeated;      /* of those: already stored from this worker's lease (a
                           * retried submit); not counted again anywhere */
    donto_reject *reject; /* [n] per item, caller-allocated */
    char **text;          /* optional [n], caller-allocated and zeroed: for each item
                           * newly stored (not a repeat), its text (heap; the caller
                           * frees); NULL: not wanted. The verifier needs them. */
    const char *text_model; /* with text: only items queued for this model get one
                             * (NULL: any model) */
} donto_submit_result;

/* embedded: vectors stored; pending: queued and ready (never leased, released
 * or lease expired); leased: lease still running; total = the three summed. */
typedef struct donto_target_stats {
    int64_t embedded, pending, leased, total;
} donto_target_stats;

/* Lists returned by the store are heap arrays; free with the matching
 * donto_*_list_free. */
/* A token's trust record (docs/trust.md): the coordinator's checks of the
 * vectors it submitted, and whether it is suspended. */
typedef struct donto_trust {
    int suspended;          /* 0 or 1: refused (403) until an admin lifts it */
    int64_t streak;         /* checks passed in a row since the last failure */
    int64_t checks, failed; /* checks done, and failed */
    int64_t withdrawn;      /* vectors withdrawn (re-queued) at suspensions */
    int64_t suspended_at;   /* Unix ms of the last suspension, 0: never */
    char reason[256];       /* why it was suspended ("" when not) */
} donto_trust;

typedef struct donto_token_info {
    char *name;
    donto_role role;
    int64_t created; /* Unix ms */
    int revoked;     /* 0 or 1 */
    donto_trust trust;
} donto_token_info;
void donto_token_list_free(donto_token_info *t, size_t n);

typedef struct donto_contributor {
    char *worker_id;
    int64_t total;     /* vectors accepted (repeats not counted) */
    int64_t rejected;  /* submitted items rejected */
    int64_t last_seen; /* Unix ms of the last submit or report */
    int64_t recent;    /* vectors accepted in the minutes from since_ms on (see contributors) */
} donto_contributor;
void donto_contributor_list_free(donto_contributor *c, size_t n);

#define DONTO_REPORT_MAX_CHARS 1500
typedef struct donto_report {
    int64_t id;
    char *worker_id, *kind, *message;
    int64_t created; /* Unix ms */
} donto_report;
void donto_report_list_free(donto_report *r, size_t n);

/* A page of stored vectors (vectors_page), for the recall index. */
typedef struct donto_vec_page {
    size_t n;
    int dims;          /* 0 when n == 0 */
    char **item_ids;   /* [n] */
    int64_t *created;  /* [n] Unix ms */
    float *vecs;       /* [n * dims], row i = item_ids[i] */
} donto_vec_page;
void donto_vec_page_free(donto_vec_page *p);

typedef struct donto_store donto_store;

/* ---- the database behind a store, for modules with tables of their own --
 *
 * A module that keeps its own tables in the store's database (the substrate)
 * owns its SQL and its migrations; the store hands it the connection through
 * a method, with the engine named, as SQLite's xFileControl hands out a file
 * handle. A new backend adds a kind here; each such module then adds its SQL
 * for that kind (docs/architecture.md). */
typedef enum donto_db_kind {
    DONTO_DB_SQLITE = 0,
    DONTO_DB_POSTGRES = 1,
    DONTO_DB_KIND_N = 2,
} donto_db_kind;

struct sqlite3;
struct pg_conn;
typedef struct donto_db {
    donto_db_kind kind;
    struct sqlite3 *sqlite; /* kind == DONTO_DB_SQLITE, else NULL */
    struct pg_conn *pg;     /* kind == DONTO_DB_POSTGRES (connected), else NULL */
} donto_db;

/* Migrations, owned by the module whose tables they make, applied by the
 * store in version order, each once, recorded per (module, version) in the
 * table donto_migrations. A migration has its SQL for every kind of
 * database. Never edit one that has shipped: add the next version. */
typedef struct donto_migration {
    int version;                     /* 1, 2, ... within its module */
    const char *name;
    const char *sql[DONTO_DB_KIND_N]; /* [DONTO_DB_SQLITE], [DONTO_DB_POSTGRES] */
} donto_migration;

typedef struct donto_migrations {
    const char *module;              /* "store", "substrate", ... */
    const donto_migration *list;
    size_t n;
} donto_migrations;

/* One check of a stored vector by the coordinator's own engine. */
typedef struct donto_check {
    donto_target target;
    const char *item_id;
    const char *model;
    int64_t lease_id; /* the vector checked is the one stored from this lease */
    int pass;         /* 1: it matched the reference; 0: it did not */
} donto_check;

/* The backend's methods. Callers use the donto_store_*() wrappers below,
 * never these pointers: the wrappers are the one place for logging, error
 * codes and fault injection. Optional methods may be NULL (their wrapper
 * then fails with DONTO_E_NOT_FOUND). */
typedef struct donto_store_ops {
    /* Apply the migrations of set not yet applied (see donto_migrations). */
    int (*migrate)(donto_store *s, const donto_migrations *set, donto_err *err);
    int (*enqueue)(donto_store *s, const donto_enqueue_item *items, size_t n, size_t *added,
                   donto_err *err);
    int (*lease)(donto_store *s, const char *worker_id, int n, int target, int64_t now_ms,
                 int64_t ttl_ms, donto_lease_batch *out, donto_err *err);
    int (*submit)(donto_store *s, const char *worker_id, const donto_submit_item *items, size_t n,
                  int64_t now_ms, donto_submit_result *res, donto_err *err);
    int (*release)(donto_store *s, const char *worker_id, const donto_submit_item *items, size_t n,
                   size_t *released, donto_err *err);
    int (*report)(donto_store *s, const char *worker_id, const char *kind, const char *message,
                  int64_t now_ms, donto_err *err);
    int (*stats)(donto_store *s, int64_t now_ms, donto_target_stats out[DONTO_TARGET_N], donto_err *err);
    int (*embedded_since)(donto_store *s, int64_t since_ms, int64_t *count, donto_err *err);
    int (*contributors)(donto_store *s, int limit, int64_t since_ms, donto_contributor **out, size_t *n,
                        donto_err *err);
    int (*series)(donto_store *s, int64_t since_min, int nmin, int64_t *counts, donto_err *err);
    int (*reports_recent)(donto_store *s, int limit, donto_report **out, size_t *n,
                          donto_err *err);
    int (*token_add)(donto_store *s, const char *name, donto_role role, const uint8_t hash[32],
                     int64_t now_ms, donto_err *err);
    int (*token_check)(donto_store *s, const uint8_t hash[32], int *found, donto_role *role,
                       char *name, size_t name_cap, donto_trust *trust, donto_err *err);
    int (*token_revoke)(donto_store *s, const char *name, int *revoked, donto_err *err);
    int (*token_list)(donto_store *s, donto_token_info **out, size_t *n, donto_err *err);
    int (*vectors_mark)(donto_store *s, donto_target t, const char *model, int64_t since_ms,
                        int64_t *count, int64_t *max_created, donto_err *err);
    int (*vectors_page)(donto_store *s, donto_target t, const char *model, int64_t after_created,
                        const char *after_id, size_t limit, donto_vec_page *out, donto_err *err);
    int (*extend)(donto_store *s, const char *worker_id, const donto_submit_item *items, size_t n,
                  int64_t now_ms, int64_t ttl_ms, size_t *extended, donto_err *err);
    int (*trust_record)(donto_store *s, const char *token, const donto_check *checks, size_t n,
                        int64_t now_ms, donto_err *err);
    int (*suspend)(donto_store *s, const char *token, const char *reason, int64_t now_ms,
                   int64_t *withdrawn, donto_err *err);
    int (*unsuspend)(donto_store *s, const char *token, int *done, donto_err *err);
    int (*ping)(donto_store *s, donto_err *err);
    /* Which migrations of module are recorded: bit v of *mask for version v
     * (1..63); 0 when the database has no donto_migrations table. */
    int (*migrations_applied)(donto_store *s, const char *module, uint64_t *mask, donto_err *err);
    /* The database (optional: a test's fake store has none). */
    int (*db)(donto_store *s, donto_db *out, donto_err *err);
    /* Can this backend keep its vectors in layout (optional: without it,
     * only DONTO_VECTORS_OWN)? 0, or -1 with DONTO_E_INVALID saying why. The
     * wrapper records the layout in the handle (s->vectors). */
    int (*vectors_layout)(donto_store *s, int layout, donto_err *err);
    /* With DONTO_VECTORS_DONTO: is donto_vector there, in donto's layout?
     * -1 with DONTO_E_NOT_FOUND (absent) or DONTO_E_INVALID (another shape). */
    int (*vectors_check)(donto_store *s, donto_err *err);
    void (*close)(donto_store *s);
} donto_store_ops;

struct donto_store {
    const donto_store_ops *ops;
    int verified_only; /* donto_store_set_verified_only: reads see verified vectors only */
    int vectors;       /* donto_vectors_layout, set by donto_store_set_vectors */
    /* backend state follows in the backend's own struct */
};

/* ---- where the vectors live (docs/substrate.md "Vectors in donto's table") --
 * DONTO_VECTORS_OWN (the default): every vector in the store's own table
 * `vectors`. DONTO_VECTORS_DONTO (PostgreSQL only): a claim's embedding goes
 * to donto's own table donto_vector (donto's migration 0033: subject_type
 * 'statement', subject_id = the statement's uuid, model_id = the model's
 * name, model_version = DONTO_VECTOR_MODEL_VERSION, dimensions, embedding
 * float4[]), upserted on its UNIQUE (subject_type, subject_id, model_id);
 * `vectors` keeps the claim's ledger row (contributor, lease, time, token,
 * verified, text) with an empty vec. Predicates, entities and memory chunks
 * have no place in donto_vector (its CHECK admits statement, document,
 * revision, span and annotation; its subject_id is a uuid): they stay in
 * `vectors` in both layouts. Every read of vectors through the handle
 * (vectors_mark, vectors_page, stats) and suspension's withdrawal follow the
 * layout; callers only choose it. */
typedef enum donto_vectors_layout {
    DONTO_VECTORS_OWN = 0,
    DONTO_VECTORS_DONTO = 1,
} donto_vectors_layout;
/* "own", "donto", NULL (an option table's choices, indexed by layout). */
extern const char *const donto_vectors_layout_names[3];
/* What donto_vector.model_version says for the vectors the fabric writes
 * (model_id names the model): float32 vectors of unit L2 norm, checked by
 * the coordinator on submit, embedded by donto-accel's encoder. */
#define DONTO_VECTOR_MODEL_VERSION "donto-accel/unit-norm"
/* Keep this handle's vectors in layout: -1 with DONTO_E_INVALID when the
 * backend cannot (SQLite: donto's table is PostgreSQL's, the message names
 * PostgreSQL). Set it before migrating (donto_store_migrate then also makes
 * donto_vector, in donto's layout, when the database has none) and before
 * any read or write of vectors. */
int donto_store_set_vectors(donto_store *s, donto_vectors_layout layout, donto_err *err);
/* The table donto_vector is there and has donto's layout (DONTO_VECTORS_OWN:
 * always 0). -1 with DONTO_E_NOT_FOUND when it is absent (migrate with the
 * same layout), DONTO_E_INVALID when it has another shape. */
int donto_store_vectors_check(donto_store *s, donto_err *err);
/* The migration that makes donto_vector when a database has none (module
 * "donto_vector"; donto_store_migrate applies it under DONTO_VECTORS_DONTO). */
extern const donto_migrations DONTO_VECTOR_MIGRATIONS;

/* Open by URL: "postgres://..." or "postgresql://..." -> PostgreSQL,
 * anything else is a SQLite file path (":memory:" allowed). Does not migrate.
 * A SQLite file that does not exist is created (empty): for `migrate`, the
 * loaders and tests. */
int donto_store_open(const char *url, donto_store **out, donto_err *err);
/* The same for a command that reads a database and must never create one:
 * a SQLite file that does not exist is -1 with DONTO_E_NOT_FOUND and
 * "PATH does not exist" (PostgreSQL: as donto_store_open; its database is
 * made by an operator). Check the schema with donto_store_schema_check. */
int donto_store_open_existing(const char *url, donto_store **out, donto_err *err);
#define DONTO_STORE_DEFAULT_URL "./donto.db"

/* Close a handle (NULL is fine). */
void donto_store_close(donto_store *s);

/* ---- the store's operations ----------------------------------------------
 * Every one returns 0, or -1 with err set: its message names the backend and
 * the SQL step that failed, its code says what kind of failure it is
 * (DONTO_E_UNAVAILABLE: the database cannot be reached or is busy, retry;
 * DONTO_E_CONFLICT: a name or key is taken; DONTO_E_INVALID: bad input;
 * DONTO_E_NOMEM; DONTO_E_INTERNAL otherwise). */

/* Apply the store's own migrations (queue, vectors, tokens, ...). Modules
 * with tables of their own apply theirs with donto_store_apply_migrations. */
int donto_store_migrate(donto_store *s, donto_err *err);
int donto_store_apply_migrations(donto_store *s, const donto_migrations *set, donto_err *err);

/* Add items; an item already queued or embedded for its model is left as it is. */
int donto_store_enqueue(donto_store *s, const donto_enqueue_item *items, size_t n, size_t *added,
                        donto_err *err);
/* Lease up to n ready items (target < 0: any), ready = never leased,
 * released, or lease expired (lease_expires <= now_ms); they expire at
 * now_ms + ttl_ms. Each item is leased to at most one worker at a time;
 * every leased item gets a new lease_id, larger than any before it. An
 * empty batch (out->n == 0) means nothing is ready. */
int donto_store_lease(donto_store *s, const char *worker_id, int n, int target, int64_t now_ms,
                      int64_t ttl_ms, donto_lease_batch *out, donto_err *err);
/* Store vectors for leased items; per-item verdicts in res->reject, in
 * this order:
 *   queued, leased by worker_id, lease_id 0 or the current one -> accept
 *     (also after expiry when nobody re-leased it: late but harmless);
 *   queued, lease_id given and not the current one -> LEASE_EXPIRED;
 *   queued otherwise -> NOT_LEASED;
 *   not queued, vector stored from this worker's lease -> accept as a
 *     repeat (res->repeated; nothing written or counted again);
 *   not queued, vector from another lease -> LEASE_EXPIRED when a stale
 *     lease_id was given, else NOT_LEASED; nothing at all -> UNKNOWN_ITEM;
 *   accepted but dims differ from the model's -> WRONG_MODEL.
 * Accepted vectors are upserted and leave the queue, and the worker's
 * totals and rejections are counted, all in one transaction; -1 means
 * nothing of the batch was stored. */
int donto_store_submit(donto_store *s, const char *worker_id, const donto_submit_item *items,
                       size_t n, int64_t now_ms, donto_submit_result *res, donto_err *err);
/* Hand leased items back at once (they become ready). Only items leased
 * by worker_id, and with the given lease_id when non-zero (vector and
 * dims are ignored); released = how many were. */
int donto_store_release(donto_store *s, const char *worker_id, const donto_submit_item *items,
                        size_t n, size_t *released, donto_err *err);
/* A worker's free-form report; message cut to DONTO_REPORT_MAX_CHARS
 * characters (UTF-8 aware). Also refreshes the contributor's last_seen, and
 * prunes reports older than DONTO_REPORT_KEEP_MS (the coordinator limits
 * how often a token may report, so the table stays bounded). */
#define DONTO_REPORT_KEEP_MS ((int64_t)30 * 24 * 3600 * 1000)
int donto_store_report(donto_store *s, const char *worker_id, const char *kind,
                       const char *message, int64_t now_ms, donto_err *err);
int donto_store_stats(donto_store *s, int64_t now_ms, donto_target_stats out[DONTO_TARGET_N],
                      donto_err *err);
/* Vectors stored at or after since_ms (items per minute: since = now - 60000). */
int donto_store_embedded_since(donto_store *s, int64_t since_ms, int64_t *count, donto_err *err);
/* Per-contributor totals, most productive first, at most limit rows;
 * recent counts the vectors accepted in the whole minutes (Unix ms /
 * 60000) at or after since_ms's minute. */
int donto_store_contributors(donto_store *s, int limit, int64_t since_ms, donto_contributor **out,
                             size_t *n, donto_err *err);
/* Throughput series: counts[i] = vectors accepted in minute since_min + i
 * (minutes are Unix ms / 60000), i < nmin. Kept per contributor and
 * minute at submit time (each worker updates its own row: no hot row
 * shared by the fleet); rows older than an hour before since_min are
 * pruned here, since the series is all they serve. */
int donto_store_series(donto_store *s, int64_t since_min, int nmin, int64_t *counts,
                       donto_err *err);
/* The latest reports, newest first, at most limit rows. */
int donto_store_reports_recent(donto_store *s, int limit, donto_report **out, size_t *n,
                               donto_err *err);
/* Tokens: only SHA-256 hashes are stored (the caller hashes). -1 with
 * DONTO_E_CONFLICT when the name (or the hash) is already taken. */
int donto_store_token_add(donto_store *s, const char *name, donto_role role,
                          const uint8_t hash[32], int64_t now_ms, donto_err *err);
/* found = 0 when unknown or revoked; trust (NULL: not wanted) gets its
 * trust record. */
int donto_store_token_check(donto_store *s, const uint8_t hash[32], int *found, donto_role *role,
                            char *name, size_t name_cap, donto_trust *trust, donto_err *err);
/* revoked = 1 when the name existed and was not revoked yet. */
int donto_store_token_revoke(donto_store *s, const char *name, int *revoked, donto_err *err);
/* Every token, by name (never the hash). */
int donto_store_token_list(donto_store *s, donto_token_info **out, size_t *n, donto_err *err);
/* Recall's high-water mark: how many vectors of (target, model) have
 * created > since_ms (INT64_MIN: all of them), and the largest created
 * among those (INT64_MIN when count is 0). */
int donto_store_vectors_mark(donto_store *s, donto_target t, const char *model, int64_t since_ms,
                             int64_t *count, int64_t *max_created, donto_err *err);
/* Read the vectors of (target, model) in chunks, in (created, item_id)
 * order: at most limit rows after the cursor, i.e. with
 * (created, item_id) > (after_created, after_id); after_id NULL means
 * created > after_created. Start with (INT64_MIN, NULL), continue from
 * the last row returned; a page shorter than limit is the last. Free
 * out with donto_vec_page_free. */
int donto_store_vectors_page(donto_store *s, donto_target t, const char *model,
                             int64_t after_created, const char *after_id, size_t limit,
                             donto_vec_page *out, donto_err *err);
/* Push back the expiry of leased items to now_ms + ttl_ms (a heartbeat from
 * a worker whose batch takes long): only items still leased by worker_id
 * under the given lease_id (0: any of its leases); extended = how many. */
int donto_store_extend(donto_store *s, const char *worker_id, const donto_submit_item *items,
                       size_t n, int64_t now_ms, int64_t ttl_ms, size_t *extended, donto_err *err);

/* ---- trust (docs/trust.md) --------------------------------------------------
 * Record checks of token's vectors, in one transaction: each passed check
 * marks that vector verified (when the stored vector is still the one from
 * that lease and that token) and adds one to the token's streak; a failed
 * one zeroes the streak. checks and failed count both. */
int donto_store_trust_record(donto_store *s, const char *token, const donto_check *checks,
                             size_t n, int64_t now_ms, donto_err *err);
/* Suspend token, in one transaction: it is marked suspended with reason;
 * every vector it submitted that is not verified is withdrawn (deleted) and
 * its item queued again with its text; its running leases are released; a
 * report row (kind "suspended") records it. withdrawn = vectors withdrawn.
 * Suspending an already suspended token withdraws what is left and keeps
 * the first reason and time. */
int donto_store_suspend(donto_store *s, const char *token, const char *reason, int64_t now_ms,
                        int64_t *withdrawn, donto_err *err);
/* Lift a suspension: the token starts again as untrusted (streak 0).
 * done = 1 when it was suspended. */
int donto_store_unsuspend(donto_store *s, const char *token, int *done, donto_err *err);
/* From now on, reads of vectors through this handle (vectors_mark,
 * vectors_page: recall and exports) see verified vectors only. */
void donto_store_set_verified_only(donto_store *s, int on);

/* ---- schema versions ---------------------------------------------------------
 * How far a database is migrated, per module: current = the highest version
 * of set recorded (0: none, or no donto_migrations table at all), expected
 * = the highest this build has, missing = this build's migrations of set
 * not recorded (0: up to date). set NULL: the store's own. */
typedef struct donto_schema_version {
    int current, expected, missing;
} donto_schema_version;
int donto_store_schema_version(donto_store *s, const donto_migrations *set, donto_schema_version *out,
                               donto_err *err);
/* 0 when every migration of sets[0..n) is recorded; else -1 with
 * DONTO_E_NOT_FOUND and "is not migrated (store schema 0 of 7, substrate
 * schema 0 of 1)" (nothing at all) or "is migrated by an older build, not up
 * to date (store schema 6 of 7)"
 * (the caller says which database and how to migrate it). sets NULL: the
 * store's own only. */
int donto_store_schema_check(donto_store *s, const donto_migrations *const *sets, size_t n, donto_err *err);
/* The store's own migrations (queue, vectors, tokens, ...). */
extern const donto_migrations DONTO_STORE_MIGRATIONS;

/* Is the database reachable (cheap round trip)? */
int donto_store_ping(donto_store *s, donto_err *err);
/* The database behind s (reconnected if it went away). */
int donto_store_db(donto_store *s, donto_db *out, donto_err *err);
/* What kind of failure a module's own statement on db met (util.h's codes),
 * classified as the store classifies its own failures: a lost connection,
 * resources, shutdown, deadlock or a busy database DONTO_E_UNAVAILABLE (try
 * again later); a duplicate key DONTO_E_CONFLICT; another constraint or a bad
 * value DONTO_E_INVALID; a missing table DONTO_E_SCHEMA (not migrated); the
 * rest DONTO_E_INTERNAL. sqlstate: the failed PostgreSQL result's SQLSTATE
 * (PG_DIAG_SQLSTATE; NULL when there is none); SQLite's last error on
 * db->sqlite is read instead. */
donto_code donto_db_code(const donto_db *db, const char *sqlstate);

/* ---- many coordinators on one database (docs/fleet.md; src/store/fleet.c) ----
 * Fleet-wide counters (store migration 9): add delta to the counter name
 * (created at 0), at once and for every process sharing the database. */
int donto_store_counter_add(donto_store *s, const char *name, int64_t delta, donto_err *err);
/* The values of the n counters names (0 for one never added to). A database
 * before migration 9, or a backend without one: DONTO_E_NOT_FOUND. */
int donto_store_counters_get(donto_store *s, const char *const *names, size_t n, int64_t *out, donto_err *err);
/* A lock across the processes sharing the database, held by s's connection
 * until donto_store_unlock on the same s (or until that connection dies):
 * PostgreSQL's session advisory lock on key; SQLite: nothing, returns 0. */
int donto_store_lock(donto_store *s, int64_t key, donto_err *err);
int donto_store_unlock(donto_store *s, int64_t key, donto_err *err);
/* Items token holds leased now (leases of its workers "<token>/...", from
 * any coordinator, not run out at now_ms), and the earliest of their
 * expiries (0: none): the fleet-wide --max-outstanding. */
int donto_store_leased_by(donto_store *s, const char *token, int64_t now_ms, int64_t *count, int64_t *first_expiry,
                          donto_err *err);

/* ---- fault injection, for tests -------------------------------------------
 * Make the next `count` calls of the operation named op ("lease", "submit",
 * ... as in donto_store_<op>; "*" for every operation) fail, in any store
 * handle of this process, with code and a message saying it was injected,
 * before the backend is called. count 0 clears op; donto_store_fault(NULL,
 * 0, 0) clears all. Process-wide and thread-safe; never set outside tests. */
void donto_store_fault(const char *op, int count, donto_code code);

#ifdef __cplusplus
}
#endif
#endif
