/* donto-accel: the store's backend-independent parts: names, verdicts,
 * list frees and the URL dispatch. See include/donto/store.h. */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

static const char *const TARGET_NAMES[DONTO_TARGET_N] = {"claim", "predicate", "entity",
                                                         "memory_chunk"};

int donto_target_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < DONTO_TARGET_N; i++)
        if (strcmp(s, TARGET_NAMES[i]) == 0) return i;
    return -1;
}

const char *donto_target_name(donto_target t) {
    return (t >= 0 && t < DONTO_TARGET_N) ? TARGET_NAMES[t] : "unknown";
}

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
    return r == DONTO_ROLE_ADMIN ? "admin" : "contributor";
}

int donto_role_parse(const char *s) {
    if (s && strcmp(s, "admin") == 0) return DONTO_ROLE_ADMIN;
    if (s && strcmp(s, "contributor") == 0) return DONTO_ROLE_CONTRIBUTOR;
    return -1;
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

int donto_store_open(const char *url, donto_store **out, donto_err *err) {
    *out = NULL;
    if (!url || !*url) url = DONTO_STORE_DEFAULT_URL;
    if (strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0)
        return donto_store_open_pg(url, out, err);
    return donto_store_open_sqlite(url, out, err);
}
