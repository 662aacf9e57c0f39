/* donto-accel coordinator: canary items; see canary.h. */
#define _POSIX_C_SOURCE 200809L
#include "canary.h"
#include "verify.h" /* verify_cosine */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref {
    donto_target target;
    char *item_id, *model, *text;
    float *vec;
    int dims;
} ref;

typedef struct out {
    char token[DONTO_TOKEN_NAME_MAX + 1];
    int64_t lease_id, expires;
    ref r; /* its own copy: the pool may drop the reference meanwhile */
} out;

struct canary_set {
    pthread_mutex_t mu;
    ref *pool;
    size_t pool_cap, npool, next; /* ring: next slot to overwrite once full */
    out *outs;
    size_t out_cap, nout;
};

static void ref_clear(ref *r) {
    free(r->item_id);
    free(r->model);
    free(r->text);
    free(r->vec);
    memset(r, 0, sizeof *r);
}

/* Deep copy; -1 when out of memory (dst left clear). */
static int ref_copy(ref *dst, donto_target t, const char *id, const char *model, const char *text, const float *v,
                    int dims) {
    memset(dst, 0, sizeof *dst);
    dst->target = t;
    dst->dims = dims;
    dst->item_id = strdup(id);
    dst->model = strdup(model);
    dst->text = strdup(text);
    dst->vec = malloc((size_t)dims * sizeof *v);
    if (!dst->item_id || !dst->model || !dst->text || !dst->vec) {
        ref_clear(dst);
        return -1;
    }
    memcpy(dst->vec, v, (size_t)dims * sizeof *v);
    return 0;
}

canary_set *canary_new(size_t pool_cap, size_t outstanding_cap) {
    canary_set *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->pool = calloc(pool_cap ? pool_cap : 1, sizeof *c->pool);
    c->outs = calloc(outstanding_cap ? outstanding_cap : 1, sizeof *c->outs);
    if (!c->pool || !c->outs || pthread_mutex_init(&c->mu, NULL)) {
        free(c->pool);
        free(c->outs);
        free(c);
        return NULL;
    }
    c->pool_cap = pool_cap ? pool_cap : 1;
    c->out_cap = outstanding_cap ? outstanding_cap : 1;
    return c;
}

void canary_free(canary_set *c) {
    if (!c) return;
    for (size_t i = 0; i < c->npool; i++) ref_clear(&c->pool[i]);
    for (size_t i = 0; i < c->nout; i++) ref_clear(&c->outs[i].r);
    free(c->pool);
    free(c->outs);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void canary_offer(canary_set *c, donto_target target, const char *item_id, const char *model, const char *text,
                  const float *vec, int dims) {
    if (!c || !item_id || !model || !text || !vec || dims <= 0) return;
    ref r;
    if (ref_copy(&r, target, item_id, model, text, vec, dims)) return;
    pthread_mutex_lock(&c->mu);
    /* The same item twice (a retried check): keep one. */
    for (size_t i = 0; i < c->npool; i++)
        if (c->pool[i].target == target && !strcmp(c->pool[i].item_id, item_id) && !strcmp(c->pool[i].model, model)) {
            pthread_mutex_unlock(&c->mu);
            ref_clear(&r);
            return;
        }
    if (c->npool < c->pool_cap) {
        c->pool[c->npool++] = r;
    } else {
        ref_clear(&c->pool[c->next]);
        c->pool[c->next] = r;
        c->next = (c->next + 1) % c->pool_cap;
    }
    pthread_mutex_unlock(&c->mu);
}

static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Drop expired outstanding canaries (under the lock). */
static void expire(canary_set *c, int64_t now) {
    size_t k = 0;
    for (size_t i = 0; i < c->nout; i++) {
        if (c->outs[i].expires > now) c->outs[k++] = c->outs[i];
        else ref_clear(&c->outs[i].r);
    }
    c->nout = k;
}

int canary_issue(canary_set *c, const char *token, int target, int64_t lease_id, int64_t now_ms,
                 int64_t expires_ms, uint64_t *rng, donto_leased_item *item) {
    if (!c) return 0;
    int ok = 0;
    pthread_mutex_lock(&c->mu);
    expire(c, now_ms);
    const ref *r = NULL;
    if (c->npool > 0) {
        /* A random one of the target asked for (target < 0: any). */
        size_t start = (size_t)(next_rand(rng) % c->npool);
        for (size_t k = 0; k < c->npool && !r; k++) {
            const ref *x = &c->pool[(start + k) % c->npool];
            if (target < 0 || (int)x->target == target) r = x;
        }
    }
    if (r && c->nout < c->out_cap && strlen(token) <= DONTO_TOKEN_NAME_MAX) {
        out *o = &c->outs[c->nout];
        if (ref_copy(&o->r, r->target, r->item_id, r->model, r->text, r->vec, r->dims) == 0) {
            snprintf(o->token, sizeof o->token, "%s", token);
            o->lease_id = lease_id;
            o->expires = expires_ms;
            memset(item, 0, sizeof *item);
            item->target = r->target;
            item->item_id = strdup(r->item_id);
            item->model = strdup(r->model);
            item->text = strdup(r->text);
            item->lease_id = lease_id;
            if (item->item_id && item->model && item->text) {
                c->nout++;
                ok = 1;
            } else {
                free(item->item_id), free(item->model), free(item->text);
                memset(item, 0, sizeof *item);
                ref_clear(&o->r);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* The outstanding canary of token matching the item, or -1 (under the lock). */
static long find(canary_set *c, const char *token, donto_target target, const char *item_id, int64_t lease_id) {
    for (size_t i = 0; i < c->nout; i++) {
        const out *o = &c->outs[i];
        if (o->r.target == target && !strcmp(o->r.item_id, item_id) && !strcmp(o->token, token) &&
            (lease_id == 0 || lease_id == o->lease_id))
            return (long)i;
    }
    return -1;
}

int canary_take(canary_set *c, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                const float *vec, int dims, float *cos_out, int64_t now_ms) {
    if (!c || !item_id || !token) return 0;
    pthread_mutex_lock(&c->mu);
    expire(c, now_ms);
    long i = find(c, token, target, item_id, lease_id);
    if (i >= 0) {
        out *o = &c->outs[i];
        *cos_out = dims == o->r.dims && vec ? verify_cosine(vec, o->r.vec, dims) : VERIFY_COS_BAD_DIMS;
        ref_clear(&o->r);
        c->outs[i] = c->outs[--c->nout];
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0;
}

int canary_touch(canary_set *c, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                 int extend, int64_t expires_ms, int64_t now_ms) {
    if (!c || !item_id || !token) return 0;
    pthread_mutex_lock(&c->mu);
    expire(c, now_ms);
    long i = find(c, token, target, item_id, lease_id);
    if (i >= 0) {
        if (extend) {
            if (c->outs[i].expires < expires_ms) c->outs[i].expires = expires_ms;
        } else {
            ref_clear(&c->outs[i].r);
            c->outs[i] = c->outs[--c->nout];
        }
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0;
}

void canary_counts(canary_set *c, size_t *pool, size_t *outstanding) {
    *pool = *outstanding = 0;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    *pool = c->npool;
    *outstanding = c->nout;
    pthread_mutex_unlock(&c->mu);
}
