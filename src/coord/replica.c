/* donto-accel coordinator: replication; see replica.h. */
#define _POSIX_C_SOURCE 200809L
#include "replica.h"
#include "verify.h" /* verify_cosine */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vote {
    char token[DONTO_TOKEN_NAME_MAX + 1];
    char worker[DONTO_TOKEN_NAME_MAX + 1];
    int64_t lease_id;
    float *vec; /* dims floats */
    int dims;
} vote;

typedef struct rep {
    int used;
    uint64_t seq; /* the order added: the oldest waiting one goes first */
    donto_target target;
    char *item_id, *model, *text;
    vote v[REPLICA_VOTES_MAX]; /* v[0]: the origin (the stored vector) */
    int nv;
    /* Out to a token (else waiting since `since`). */
    int out;
    char out_token[DONTO_TOKEN_NAME_MAX + 1];
    int64_t out_lease, out_expires, since;
} rep;

struct replica_set {
    pthread_mutex_t mu;
    rep *reps;
    size_t cap, n; /* slots, slots used */
    uint64_t seq;
    int quorum, max_votes;
    float min_cosine;
    replica_counts k;
};

static void rep_clear(rep *x) {
    free(x->item_id), free(x->model), free(x->text);
    for (int i = 0; i < x->nv; i++) free(x->v[i].vec);
    memset(x, 0, sizeof *x);
}

replica_set *replica_new(size_t cap, int quorum, int max_votes, float min_cosine) {
    replica_set *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->cap = cap ? cap : 1;
    r->reps = calloc(r->cap, sizeof *r->reps);
    if (!r->reps || pthread_mutex_init(&r->mu, NULL)) {
        free(r->reps);
        free(r);
        return NULL;
    }
    r->quorum = quorum < 2 ? 2 : quorum > REPLICA_VOTES_MAX ? REPLICA_VOTES_MAX : quorum;
    r->max_votes = max_votes < r->quorum ? r->quorum : max_votes > REPLICA_VOTES_MAX ? REPLICA_VOTES_MAX : max_votes;
    r->min_cosine = min_cosine;
    return r;
}

void replica_free(replica_set *r) {
    if (!r) return;
    for (size_t i = 0; i < r->cap; i++)
        if (r->reps[i].used) rep_clear(&r->reps[i]);
    free(r->reps);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Copy a vote; -1 when out of memory. */
static int vote_set(vote *v, const char *token, const char *worker, int64_t lease_id, const float *vec, int dims) {
    memset(v, 0, sizeof *v);
    snprintf(v->token, sizeof v->token, "%s", token);
    snprintf(v->worker, sizeof v->worker, "%s", worker ? worker : "");
    v->lease_id = lease_id;
    v->dims = dims;
    if (dims > 0 && vec) {
        if (!(v->vec = malloc((size_t)dims * sizeof *vec))) return -1;
        memcpy(v->vec, vec, (size_t)dims * sizeof *vec);
    }
    return 0;
}

/* Cosine of two votes (verify_cosine); VERIFY_COS_BAD_DIMS when either has
 * no vector or the dims differ. */
static float vote_cos(const vote *a, const vote *b) {
    if (!a->vec || !b->vec || a->dims != b->dims) return VERIFY_COS_BAD_DIMS;
    return verify_cosine(a->vec, b->vec, a->dims);
}

/* Replicas out past their expiry wait again (under the lock). */
static void expire(replica_set *r, int64_t now) {
    for (size_t i = 0; i < r->cap; i++) {
        rep *x = &r->reps[i];
        if (x->used && x->out && x->out_expires <= now) x->out = 0, x->since = now;
    }
}

int replica_add(replica_set *r, const char *token, const char *worker, donto_target target, const char *item_id,
                const char *model, const char *text, const float *vec, int dims, int64_t lease_id, int64_t now_ms) {
    if (!r || !token || !item_id || !text || !vec || dims <= 0 || strlen(token) > DONTO_TOKEN_NAME_MAX ||
        strlen(item_id) > REPLICA_ITEM_ID_MAX)
        return -1;
    pthread_mutex_lock(&r->mu);
    int rc = -1;
    rep *x = NULL;
    if (r->n < r->cap)
        for (size_t i = 0; i < r->cap && !x; i++)
            if (!r->reps[i].used) x = &r->reps[i];
    if (x) {
        memset(x, 0, sizeof *x);
        x->target = target;
        x->item_id = strdup(item_id);
        x->model = strdup(model ? model : "");
        x->text = strdup(text);
        if (x->item_id && x->model && x->text && vote_set(&x->v[0], token, worker, lease_id, vec, dims) == 0) {
            x->nv = 1;
            x->used = 1;
            x->seq = ++r->seq;
            x->since = now_ms;
            r->n++;
            r->k.added++;
            rc = 0;
        } else {
            x->nv = 1; /* frees v[0].vec if it was set */
            rep_clear(x);
        }
    }
    if (rc) r->k.refused++;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* May token be handed x now? (under the lock) */
static int eligible(const rep *x, const char *token, int target) {
    if (!x->used || x->out || (target >= 0 && (int)x->target != target)) return 0;
    for (int i = 0; i < x->nv; i++)
        if (!strcmp(x->v[i].token, token)) return 0;
    return 1;
}

size_t replica_available(replica_set *r, const char *token, int target, size_t max) {
    if (!r || !token) return 0;
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->cap && n < max; i++) n += eligible(&r->reps[i], token, target);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int replica_issue(replica_set *r, const char *token, int target, int64_t lease_id, int64_t now_ms,
                  int64_t expires_ms, donto_leased_item *item) {
    if (!r || !token || strlen(token) > DONTO_TOKEN_NAME_MAX) return 0;
    int ok = 0;
    pthread_mutex_lock(&r->mu);
    expire(r, now_ms);
    rep *best = NULL;
    for (size_t i = 0; i < r->cap; i++)
        if (eligible(&r->reps[i], token, target) && (!best || r->reps[i].seq < best->seq)) best = &r->reps[i];
    if (best) {
        memset(item, 0, sizeof *item);
        item->target = best->target;
        item->item_id = strdup(best->item_id);
        item->model = strdup(best->model);
        item->text = strdup(best->text);
        item->lease_id = lease_id;
        if (item->item_id && item->model && item->text) {
            best->out = 1;
            snprintf(best->out_token, sizeof best->out_token, "%s", token);
            best->out_lease = lease_id;
            best->out_expires = expires_ms;
            ok = 1;
        } else {
            free(item->item_id), free(item->model), free(item->text);
            memset(item, 0, sizeof *item);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* The replica out to token matching the item (under the lock). */
static rep *find_out(replica_set *r, const char *token, donto_target target, const char *item_id, int64_t lease_id) {
    for (size_t i = 0; i < r->cap; i++) {
        rep *x = &r->reps[i];
        if (x->used && x->out && x->target == target && !strcmp(x->item_id, item_id) &&
            !strcmp(x->out_token, token) && (lease_id == 0 || lease_id == x->out_lease))
            return x;
    }
    return NULL;
}

/* Count a vote and decide (under the lock): the state. */
static int decide(replica_set *r, rep *x, replica_result *res) {
    int best = -1, best_n = 0;
    for (int i = 0; i < x->nv; i++) {
        int n = 1;
        for (int j = 0; j < x->nv; j++)
            if (j != i && vote_cos(&x->v[i], &x->v[j]) >= r->min_cosine) n++;
        if (n > best_n) best = i, best_n = n; /* ties: the earlier vote */
    }
    res->nvotes = (size_t)x->nv;
    if (best >= 0 && best_n >= r->quorum) {
        int failed = 0;
        for (int j = 0; j < x->nv; j++) {
            replica_vote *v = &res->votes[j];
            snprintf(v->token, sizeof v->token, "%s", x->v[j].token);
            snprintf(v->worker, sizeof v->worker, "%s", x->v[j].worker);
            v->lease_id = x->v[j].lease_id;
            v->origin = j == 0;
            v->cosine = j == best ? 1.0f : vote_cos(&x->v[best], &x->v[j]);
            v->pass = j == best || v->cosine >= r->min_cosine;
            failed += !v->pass;
        }
        if (failed) r->k.disagreed++;
        else r->k.agreed++;
        return REPLICA_DECIDED;
    }
    if (x->nv >= r->max_votes) {
        r->k.dropped++;
        return REPLICA_DROPPED;
    }
    return REPLICA_WAIT;
}

int replica_take(replica_set *r, const char *token, const char *worker, donto_target target, const char *item_id,
                 int64_t lease_id, const float *vec, int dims, int64_t now_ms, replica_result *res) {
    if (!r || !token || !item_id) return 0;
    memset(res, 0, sizeof *res);
    pthread_mutex_lock(&r->mu);
    expire(r, now_ms);
    rep *x = find_out(r, token, target, item_id, lease_id);
    if (x) {
        x->out = 0;
        x->since = now_ms;
        snprintf(res->origin_token, sizeof res->origin_token, "%s", x->v[0].token);
        snprintf(res->item_id, sizeof res->item_id, "%s", x->item_id);
        res->target = x->target;
        vote *v = &x->v[x->nv];
        /* Out of memory for the copy: a vote with no vector, which agrees
         * with nobody; the replica then waits for others. */
        if (vote_set(v, token, worker, x->out_lease, vec, vec ? dims : 0)) v->vec = NULL;
        x->nv++;
        res->cosine_to_origin = vote_cos(&x->v[0], v);
        res->state = decide(r, x, res);
        if (res->state != REPLICA_WAIT) {
            rep_clear(x);
            r->n--;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return x != NULL;
}

int replica_touch(replica_set *r, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                  int extend, int64_t expires_ms, int64_t now_ms) {
    if (!r || !token || !item_id) return 0;
    pthread_mutex_lock(&r->mu);
    expire(r, now_ms);
    rep *x = find_out(r, token, target, item_id, lease_id);
    if (x) {
        if (!extend) x->out = 0, x->since = now_ms;
        else if (x->out_expires < expires_ms) x->out_expires = expires_ms;
    }
    pthread_mutex_unlock(&r->mu);
    return x != NULL;
}

size_t replica_forget(replica_set *r, const char *token) {
    if (!r || !token) return 0;
    size_t own = 0;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->cap; i++) {
        rep *x = &r->reps[i];
        if (!x->used) continue;
        if (!strcmp(x->v[0].token, token)) {
            rep_clear(x);
            r->n--;
            own++;
            continue;
        }
        int k = 1;
        for (int j = 1; j < x->nv; j++) {
            if (!strcmp(x->v[j].token, token)) free(x->v[j].vec);
            else x->v[k++] = x->v[j];
        }
        for (int j = k; j < x->nv; j++) memset(&x->v[j], 0, sizeof x->v[j]);
        x->nv = k;
        if (x->out && !strcmp(x->out_token, token)) x->out = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return own;
}

size_t replica_take_stale(replica_set *r, int64_t older_than_ms, int64_t now_ms, replica_stale_fn fn, void *ctx) {
    if (!r) return 0;
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    expire(r, now_ms);
    for (size_t i = 0; i < r->cap; i++) {
        rep *x = &r->reps[i];
        if (!x->used || x->out || x->since >= older_than_ms) continue;
        if (fn)
            fn(ctx, x->v[0].token, x->v[0].worker, x->target, x->item_id, x->model, x->text, x->v[0].vec,
               x->v[0].dims, x->v[0].lease_id);
        rep_clear(x);
        r->n--;
        r->k.stale++;
        n++;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

void replica_get_counts(replica_set *r, replica_counts *out) {
    memset(out, 0, sizeof *out);
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    *out = r->k;
    for (size_t i = 0; i < r->cap; i++)
        if (r->reps[i].used) r->reps[i].out ? out->out++ : out->waiting++;
    pthread_mutex_unlock(&r->mu);
}
