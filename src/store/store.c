/* donto-accel: the store's backend-independent parts: the wrappers over the
 * backends' methods (the one place for logging, error codes and fault
 * injection, as SQLite wraps its pMethods), names, verdicts, list frees and
 * the URL dispatch. See include/donto/store.h. */
#include "store_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *const donto_target_names[DONTO_TARGET_N + 1] = {"claim", "predicate", "entity",
                                                            "memory_chunk", NULL};

int donto_target_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < DONTO_TARGET_N; i++)
        if (strcmp(s, donto_target_names[i]) == 0) return i;
    return -1;
}

const char *donto_target_name(donto_target t) {
    return (t >= 0 && t < DONTO_TARGET_N) ? donto_target_names[t] : "unknown";
}

const char *const donto_vectors_layout_names[3] = {"own", "donto", NULL};

const char *donto_reject_reason(donto_reject r) {
    switch (r) {
    case DONTO_REJECT_NONE: return "ok";
    case DONTO_REJECT_UNKNOWN_ITEM: return "unknown_item";
    case DONTO_REJECT_NOT_LEASED: return "not_leased";
    case DONTO_REJECT_LEASE_EXPIRED: return "lease_expired";
    case DONTO_REJECT_WRONG_MODEL: return "wrong_model";
    }
    return "unknown";
}

const char *donto_role_name(donto_role r) {
    return r == DONTO_ROLE_ADMIN     ? "admin"
           : r == DONTO_ROLE_READER  ? "reader"
           : r == DONTO_ROLE_ANALYST ? "analyst"
                                     : "contributor";
}

int donto_role_parse(const char *s) {
    if (s && strcmp(s, "admin") == 0) return DONTO_ROLE_ADMIN;
    if (s && strcmp(s, "reader") == 0) return DONTO_ROLE_READER;
    if (s && strcmp(s, "analyst") == 0) return DONTO_ROLE_ANALYST;
    if (s && strcmp(s, "contributor") == 0) return DONTO_ROLE_CONTRIBUTOR;
    return -1;
}

int donto_worker_token(const char *worker_id, char *out, size_t cap) {
    const char *sep = worker_id ? strchr(worker_id, DONTO_WORKER_SEP) : NULL;
    if (!sep || sep == worker_id || (size_t)(sep - worker_id) >= cap) {
        if (cap) out[0] = 0;
        return -1;
    }
    memcpy(out, worker_id, (size_t)(sep - worker_id));
    out[sep - worker_id] = 0;
    return 0;
}

size_t donto_utf8_prefix(const char *s, size_t max_chars) {
    size_t i = 0, chars = 0;
    while (s[i]) {
        /* A character starts at every byte that is not a continuation byte. */
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (chars == max_chars) break;
            chars++;
        }
        i++;
    }
    return i;
}

void donto_f32_to_le(const float *v, int dims, unsigned char *out) {
    for (int i = 0; i < dims; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        out[4 * i + 0] = (unsigned char)(u);
        out[4 * i + 1] = (unsigned char)(u >> 8);
        out[4 * i + 2] = (unsigned char)(u >> 16);
        out[4 * i + 3] = (unsigned char)(u >> 24);
    }
}

void donto_f32_from_le(const unsigned char *in, int dims, float *out) {
    for (int i = 0; i < dims; i++) {
        uint32_t u = (uint32_t)in[4 * i] | (uint32_t)in[4 * i + 1] << 8 | (uint32_t)in[4 * i + 2] << 16 |
                     (uint32_t)in[4 * i + 3] << 24;
        memcpy(&out[i], &u, 4);
    }
}

void donto_vec_page_free(donto_vec_page *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) free(p->item_ids[i]);
    free(p->item_ids);
    free(p->created);
    free(p->vecs);
    memset(p, 0, sizeof *p);
}

int donto_vec_page_push(donto_vec_page *p, size_t *cap, const char *item_id, size_t id_len,
                        int64_t created, int dims, const void *blob, size_t blob_len, donto_err *err) {
    if (p->n == 0) p->dims = dims;
    if (dims <= 0 || dims != p->dims || blob_len != (size_t)dims * 4)
        return donto_seterr(err, "stored vector of %.*s: %d dims in %zu bytes (page holds %d-d vectors)",
                            (int)(id_len > 200 ? 200 : id_len), item_id, dims, blob_len, p->dims);
    if (p->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        p->item_ids = donto_xrealloc(p->item_ids, *cap * sizeof *p->item_ids);
        p->created = donto_xrealloc(p->created, *cap * sizeof *p->created);
        p->vecs = donto_xrealloc(p->vecs, *cap * (size_t)dims * sizeof *p->vecs);
    }
    char *id = donto_xmalloc(id_len + 1);
    memcpy(id, item_id, id_len);
    id[id_len] = 0;
    p->item_ids[p->n] = id;
    p->created[p->n] = created;
    donto_f32_from_le(blob, dims, p->vecs + p->n * (size_t)dims);
    p->n++;
    return 0;
}

donto_reject donto_submit_verdict_queued(const char *worker_id, int64_t given_lease,
                                         const char *owner, int64_t row_lease) {
    /* Ours, and the fencing token (when given) is the current one: accept even
     * when the lease has expired, since nobody re-leased it (lease_id would
     * have changed), so no one else can be computing it right now. */
    if (owner && strcmp(owner, worker_id) == 0 && (given_lease == 0 || given_lease == row_lease))
        return DONTO_REJECT_NONE;
    /* A stale token says precisely what happened: the lease ran out and the
     * item was leased again (possibly to this same worker). */
    if (given_lease != 0 && given_lease != row_lease) return DONTO_REJECT_LEASE_EXPIRED;
    return DONTO_REJECT_NOT_LEASED;
}

donto_reject donto_submit_verdict_stored(const char *worker_id, int64_t given_lease,
                                         int have_vector, const char *contributor,
                                         int64_t vec_lease, int *repeat) {
    *repeat = 0;
    if (!have_vector) return DONTO_REJECT_UNKNOWN_ITEM;
    if (contributor && strcmp(contributor, worker_id) == 0 &&
        (given_lease == 0 || given_lease == vec_lease)) {
        *repeat = 1; /* a retry of a submit that already landed */
        return DONTO_REJECT_NONE;
    }
    if (given_lease != 0 && given_lease != vec_lease) return DONTO_REJECT_LEASE_EXPIRED;
    return DONTO_REJECT_NOT_LEASED;
}

char *donto_strdup_or_null(const char *s) { return s ? donto_xstrdup(s) : NULL; }

int donto_store_is_uuid(const char *s) {
    if (!s) return 0;
    for (int i = 0; i < 36; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') return 0;
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return 0;
        }
    }
    return s[36] == 0;
}

void donto_check_tally(const donto_check *checks, size_t n, int64_t *passed, int64_t *failed, int64_t *tail) {
    *passed = *failed = *tail = 0;
    for (size_t i = 0; i < n; i++) {
        if (checks[i].pass) {
            ++*passed;
            ++*tail;
        } else {
            ++*failed;
            *tail = 0;
        }
    }
}

void donto_lease_batch_free(donto_lease_batch *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n; i++) {
        free(b->items[i].item_id);
        free(b->items[i].text);
        free(b->items[i].model);
    }
    free(b->items);
    b->items = NULL;
    b->n = 0;
}

void donto_token_list_free(donto_token_info *t, size_t n) {
    if (!t) return;
    for (size_t i = 0; i < n; i++) free(t[i].name);
    free(t);
}

void donto_contributor_list_free(donto_contributor *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) free(c[i].worker_id);
    free(c);
}

void donto_report_list_free(donto_report *r, size_t n) {
    if (!r) return;
    for (size_t i = 0; i < n; i++) {
        free(r[i].worker_id);
        free(r[i].kind);
        free(r[i].message);
    }
    free(r);
}

/* ---- wrappers ------------------------------------------------------------ */

enum {
    OP_MIGRATE, OP_ENQUEUE, OP_LEASE, OP_SUBMIT, OP_RELEASE, OP_REPORT, OP_STATS,
    OP_EMBEDDED_SINCE, OP_CONTRIBUTORS, OP_SERIES, OP_REPORTS_RECENT, OP_TOKEN_ADD,
    OP_TOKEN_CHECK, OP_TOKEN_REVOKE, OP_TOKEN_LIST, OP_VECTORS_MARK, OP_VECTORS_PAGE, OP_PING,
    OP_DB, OP_EXTEND, OP_TRUST_RECORD, OP_SUSPEND, OP_UNSUSPEND, OP_MIGRATIONS_APPLIED, OP_VECTORS_LAYOUT,
    OP_VECTORS_CHECK, OP_N
};
static const char *const OP_NAMES[OP_N] = {
    "migrate", "enqueue", "lease", "submit", "release", "report", "stats", "embedded_since",
    "contributors", "series", "reports_recent", "token_add", "token_check", "token_revoke",
    "token_list", "vectors_mark", "vectors_page", "ping", "db", "extend", "trust_record",
    "suspend", "unsuspend", "migrations_applied", "vectors_layout", "vectors_check",
};

/* Injected faults (tests only): calls left to fail, and with which code. */
static pthread_mutex_t g_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_fault_any; /* fast path: 0 when nothing is armed */
static struct {
    int count;
    donto_code code;
} g_fault[OP_N];

void donto_store_fault(const char *op, int count, donto_code code) {
    pthread_mutex_lock(&g_fault_mu);
    int any = 0;
    for (int i = 0; i < OP_N; i++) {
        if (!op || strcmp(op, "*") == 0 || strcmp(op, OP_NAMES[i]) == 0) {
            g_fault[i].count = count > 0 ? count : 0;
            g_fault[i].code = code;
        }
        any |= g_fault[i].count > 0;
    }
    atomic_store(&g_fault_any, any);
    pthread_mutex_unlock(&g_fault_mu);
}

/* Before a call: the method exists, and no fault is armed for it. */
static int store_pre(donto_store *s, int op, int have, donto_err *err) {
    if (!s) return donto_seterrc(err, DONTO_E_INVALID, "store %s: no store handle", OP_NAMES[op]);
    if (!have)
        return donto_seterrc(err, DONTO_E_NOT_FOUND, "store %s: this backend does not offer it",
                             OP_NAMES[op]);
    if (atomic_load_explicit(&g_fault_any, memory_order_relaxed)) {
        int hit = 0;
        donto_code code = DONTO_E_INTERNAL;
        pthread_mutex_lock(&g_fault_mu);
        if (g_fault[op].count > 0) {
            g_fault[op].count--;
            hit = 1;
            code = g_fault[op].code;
        }
        pthread_mutex_unlock(&g_fault_mu);
        if (hit) return donto_seterrc(err, code, "store %s: injected fault", OP_NAMES[op]);
    }
    return 0;
}

/* After a call: a failure always has a message and a code. */
static int store_post(int op, int rc, donto_err *err) {
    if (rc == 0) return 0;
    if (!err->msg[0]) donto_seterr(err, "store %s failed", OP_NAMES[op]);
    if (err->code <= DONTO_E_NONE || err->code >= DONTO_E_N) err->code = DONTO_E_INTERNAL;
    DLOG_DEBUG("store %s: %s (%s)", OP_NAMES[op], err->msg, donto_code_name(err->code));
    return -1;
}

/* The body of every wrapper: err is never NULL for the backend. */
#define STORE_CALL(OP, FIELD, ...)                                                   \
    donto_err local_ = {0};                                                          \
    if (!err) err = &local_;                                                         \
    err->msg[0] = 0;                                                                 \
    err->code = DONTO_E_NONE;                                                        \
    if (store_pre(s, OP, s && s->ops->FIELD != NULL, err)) return store_post(OP, -1, err); \
    return store_post(OP, s->ops->FIELD(s, __VA_ARGS__), err)

int donto_store_apply_migrations(donto_store *s, const donto_migrations *set, donto_err *err) {
    if (!set || !set->module || (set->n && !set->list))
        return donto_seterrc(err, DONTO_E_INVALID, "store migrate: no migration set");
    STORE_CALL(OP_MIGRATE, migrate, set, err);
}

int donto_store_migrate(donto_store *s, donto_err *err) {
    if (donto_store_apply_migrations(s, &DONTO_STORE_MIGRATIONS, err)) return -1;
    if (s->vectors == DONTO_VECTORS_DONTO &&
        (donto_store_apply_migrations(s, &DONTO_VECTOR_MIGRATIONS, err) || donto_store_vectors_check(s, err)))
        return -1;
    return 0;
}

static int vectors_layout(donto_store *s, int layout, donto_err *err) {
    STORE_CALL(OP_VECTORS_LAYOUT, vectors_layout, layout, err);
}

int donto_store_set_vectors(donto_store *s, donto_vectors_layout layout, donto_err *err) {
    if (layout != DONTO_VECTORS_OWN && layout != DONTO_VECTORS_DONTO)
        return donto_seterrc(err, DONTO_E_INVALID, "store: unknown vectors layout %d", (int)layout);
    if (layout != DONTO_VECTORS_OWN && vectors_layout(s, (int)layout, err)) {
        /* A backend without the method keeps its own table only. */
        if (donto_err_code(err) == DONTO_E_NOT_FOUND)
            donto_seterrc(err, DONTO_E_INVALID, "store: this backend keeps vectors in its own table only");
        return -1;
    }
    s->vectors = (int)layout;
    return 0;
}

int donto_store_vectors_check(donto_store *s, donto_err *err) {
    if (s && s->vectors == DONTO_VECTORS_OWN) return 0;
    STORE_CALL(OP_VECTORS_CHECK, vectors_check, err);
}

int donto_store_enqueue(donto_store *s, const donto_enqueue_item *items, size_t n, size_t *added,
                        donto_err *err) {
    if (added) *added = 0;
    STORE_CALL(OP_ENQUEUE, enqueue, items, n, added, err);
}

int donto_store_lease(donto_store *s, const char *worker_id, int n, int target, int64_t now_ms,
                      int64_t ttl_ms, donto_lease_batch *out, donto_err *err) {
    out->items = NULL;
    out->n = 0;
    STORE_CALL(OP_LEASE, lease, worker_id, n, target, now_ms, ttl_ms, out, err);
}

int donto_store_submit(donto_store *s, const char *worker_id, const donto_submit_item *items,
                       size_t n, int64_t now_ms, donto_submit_result *res, donto_err *err) {
    res->upserted = res->repeated = 0;
    STORE_CALL(OP_SUBMIT, submit, worker_id, items, n, now_ms, res, err);
}

int donto_store_release(donto_store *s, const char *worker_id, const donto_submit_item *items,
                        size_t n, size_t *released, donto_err *err) {
    if (released) *released = 0;
    STORE_CALL(OP_RELEASE, release, worker_id, items, n, released, err);
}

int donto_store_report(donto_store *s, const char *worker_id, const char *kind,
                       const char *message, int64_t now_ms, donto_err *err) {
    STORE_CALL(OP_REPORT, report, worker_id, kind, message, now_ms, err);
}

int donto_store_stats(donto_store *s, int64_t now_ms, donto_target_stats out[DONTO_TARGET_N],
                      donto_err *err) {
    STORE_CALL(OP_STATS, stats, now_ms, out, err);
}

int donto_store_embedded_since(donto_store *s, int64_t since_ms, int64_t *count, donto_err *err) {
    STORE_CALL(OP_EMBEDDED_SINCE, embedded_since, since_ms, count, err);
}

int donto_store_contributors(donto_store *s, int limit, int64_t since_ms, donto_contributor **out,
                             size_t *n, donto_err *err) {
    *out = NULL;
    *n = 0;
    STORE_CALL(OP_CONTRIBUTORS, contributors, limit, since_ms, out, n, err);
}

int donto_store_series(donto_store *s, int64_t since_min, int nmin, int64_t *counts,
                       donto_err *err) {
    STORE_CALL(OP_SERIES, series, since_min, nmin, counts, err);
}

int donto_store_reports_recent(donto_store *s, int limit, donto_report **out, size_t *n,
                               donto_err *err) {
    *out = NULL;
    *n = 0;
    STORE_CALL(OP_REPORTS_RECENT, reports_recent, limit, out, n, err);
}

int donto_store_token_add(donto_store *s, const char *name, donto_role role,
                          const uint8_t hash[32], int64_t now_ms, donto_err *err) {
    STORE_CALL(OP_TOKEN_ADD, token_add, name, role, hash, now_ms, err);
}

int donto_store_token_check(donto_store *s, const uint8_t hash[32], int *found, donto_role *role,
                            char *name, size_t name_cap, donto_trust *trust, donto_err *err) {
    *found = 0;
    if (trust) memset(trust, 0, sizeof *trust);
    STORE_CALL(OP_TOKEN_CHECK, token_check, hash, found, role, name, name_cap, trust, err);
}

int donto_store_token_revoke(donto_store *s, const char *name, int *revoked, donto_err *err) {
    *revoked = 0;
    STORE_CALL(OP_TOKEN_REVOKE, token_revoke, name, revoked, err);
}

int donto_store_token_list(donto_store *s, donto_token_info **out, size_t *n, donto_err *err) {
    *out = NULL;
    *n = 0;
    STORE_CALL(OP_TOKEN_LIST, token_list, out, n, err);
}

int donto_store_vectors_mark(donto_store *s, donto_target t, const char *model, int64_t since_ms,
                             int64_t *count, int64_t *max_created, donto_err *err) {
    STORE_CALL(OP_VECTORS_MARK, vectors_mark, t, model, since_ms, count, max_created, err);
}

int donto_store_vectors_page(donto_store *s, donto_target t, const char *model,
                             int64_t after_created, const char *after_id, size_t limit,
                             donto_vec_page *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    STORE_CALL(OP_VECTORS_PAGE, vectors_page, t, model, after_created, after_id, limit, out, err);
}

int donto_store_extend(donto_store *s, const char *worker_id, const donto_submit_item *items,
                       size_t n, int64_t now_ms, int64_t ttl_ms, size_t *extended, donto_err *err) {
    if (extended) *extended = 0;
    STORE_CALL(OP_EXTEND, extend, worker_id, items, n, now_ms, ttl_ms, extended, err);
}

int donto_store_trust_record(donto_store *s, const char *token, const donto_check *checks,
                             size_t n, int64_t now_ms, donto_err *err) {
    if (!token || !*token) return donto_seterrc(err, DONTO_E_INVALID, "store trust_record: no token");
    STORE_CALL(OP_TRUST_RECORD, trust_record, token, checks, n, now_ms, err);
}

int donto_store_suspend(donto_store *s, const char *token, const char *reason, int64_t now_ms,
                        int64_t *withdrawn, donto_err *err) {
    int64_t w_ = 0;
    if (!withdrawn) withdrawn = &w_;
    *withdrawn = 0;
    if (!token || !*token) return donto_seterrc(err, DONTO_E_INVALID, "store suspend: no token");
    STORE_CALL(OP_SUSPEND, suspend, token, reason ? reason : "", now_ms, withdrawn, err);
}

int donto_store_unsuspend(donto_store *s, const char *token, int *done, donto_err *err) {
    int d_ = 0;
    if (!done) done = &d_;
    *done = 0;
    STORE_CALL(OP_UNSUSPEND, unsuspend, token, done, err);
}

void donto_store_set_verified_only(donto_store *s, int on) {
    if (s) s->verified_only = on ? 1 : 0;
}

int donto_store_ping(donto_store *s, donto_err *err) { STORE_CALL(OP_PING, ping, err); }

static int migrations_applied(donto_store *s, const char *module, uint64_t *mask, donto_err *err) {
    *mask = 0;
    STORE_CALL(OP_MIGRATIONS_APPLIED, migrations_applied, module, mask, err);
}

int donto_store_schema_version(donto_store *s, const donto_migrations *set, donto_schema_version *out,
                               donto_err *err) {
    memset(out, 0, sizeof *out);
    if (!set) set = &DONTO_STORE_MIGRATIONS;
    uint64_t mask = 0;
    if (migrations_applied(s, set->module, &mask, err)) return -1;
    for (int v = 63; v >= 1; v--)
        if (mask >> v & 1) {
            out->current = v;
            break;
        }
    for (size_t i = 0; i < set->n; i++) {
        int v = set->list[i].version;
        if (v > out->expected) out->expected = v;
        if (v < 1 || v > 63)
            return donto_seterrc(err, DONTO_E_INTERNAL, "migration %s %d: versions go from 1 to 63", set->module, v);
        if (!(mask >> v & 1)) out->missing++;
    }
    return 0;
}

int donto_store_schema_check(donto_store *s, const donto_migrations *const *sets, size_t n, donto_err *err) {
    const donto_migrations *own[1] = {&DONTO_STORE_MIGRATIONS};
    if (!sets) sets = own, n = 1;
    char list[DONTO_ERR_MAX / 2] = "";
    size_t len = 0;
    int missing = 0, any = 0;
    for (size_t i = 0; i < n; i++) {
        donto_schema_version v;
        if (donto_store_schema_version(s, sets[i], &v, err)) return -1;
        missing += v.missing > 0;
        any |= v.current > 0;
        int k = snprintf(list + len, sizeof list - len, "%s%s schema %d of %d", i ? ", " : "", sets[i]->module,
                         v.current, v.expected);
        if (k > 0) len += (size_t)k < sizeof list - len ? (size_t)k : sizeof list - len - 1;
    }
    if (!missing) return 0;
    return donto_seterrc(err, DONTO_E_SCHEMA, "%s (%s)",
                         any ? "is migrated by an older build, not up to date" : "is not migrated", list);
}

int donto_store_db(donto_store *s, donto_db *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    STORE_CALL(OP_DB, db, out, err);
}

donto_code donto_db_code(const donto_db *db, const char *sqlstate) {
    if (!db) return DONTO_E_INTERNAL;
    switch (db->kind) {
    case DONTO_DB_SQLITE: return db->sqlite ? donto_store_sq_code(db->sqlite) : DONTO_E_UNAVAILABLE;
    case DONTO_DB_POSTGRES: return db->pg ? donto_store_pg_code(db->pg, sqlstate) : DONTO_E_UNAVAILABLE;
    default: return DONTO_E_INTERNAL;
    }
}

void donto_store_close(donto_store *s) {
    if (s) s->ops->close(s);
}

int donto_store_open(const char *url, donto_store **out, donto_err *err) {
    *out = NULL;
    if (!url || !*url) url = DONTO_STORE_DEFAULT_URL;
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0)
        return donto_store_open_pg(url, out, err);
    return donto_store_open_sqlite(url, 1, out, err);
}

int donto_store_open_existing(const char *url, donto_store **out, donto_err *err) {
    *out = NULL;
    if (!url || !*url) url = DONTO_STORE_DEFAULT_URL;
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0)
        return donto_store_open_pg(url, out, err);
    return donto_store_open_sqlite(url, 0, out, err);
}
