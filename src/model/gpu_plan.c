/*
 * Host-side logic of the GPU engine (see gpu_plan.h): batcher, packing,
 * buffer plan, slot ring and the stream driver. No CUDA here: the CUDA
 * engine plugs in as a gp_engine, and the tests plug in a CPU fake.
 */
#include "model/gpu_plan.h"

#include <stdlib.h>
#include <string.h>

/* ---------- batcher ---------- */

typedef struct {
    int len;
    size_t idx;
} len_idx;

static int cmp_len(const void *a, const void *b) {
    const len_idx *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int gp_sort_by_length(const int *ntok, size_t n, size_t *order) {
    if (n == 0) return 0;
    len_idx *t = malloc(n * sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < n; i++) t[i] = (len_idx){ntok[i], i};
    qsort(t, n, sizeof *t, cmp_len);
    for (size_t i = 0; i < n; i++) order[i] = t[i].idx;
    free(t);
    return 0;
}

int gp_plan_batches(const int *ntok, const size_t *order, size_t n, int budget, int max_seqs,
                    gp_batch *out, size_t *nb, donto_err *err) {
    *nb = 0;
    if (budget < 1 || max_seqs < 1) return donto_seterr(err, "batcher: budget %d / max_seqs %d must be positive", budget, max_seqs);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        gp_batch b = {i, 0, 0, 0};
        while (i < n && b.nseq < max_seqs) {
            int len = ntok[order[i]];
            if (len < 1) return donto_seterr(err, "batcher: sequence %zu is empty", order[i]);
            if (len > budget)
                return donto_seterr(err, "batcher: sequence %zu has %d tokens, over the %d-token batch budget",
                                    order[i], len, budget);
            if (b.tokens + len > budget) break;
            b.tokens += len;
            if (len > b.maxlen) b.maxlen = len;
            b.nseq++;
            i++;
        }
        out[k++] = b;
    }
    *nb = k;
    return 0;
}

void gp_pack(const int32_t *const *ids, const int *ntok, const size_t *order, const gp_batch *b,
             int32_t *packed, int32_t *cu) {
    int32_t t = 0;
    cu[0] = 0;
    for (int s = 0; s < b->nseq; s++) {
        size_t i = order[b->first + (size_t)s];
        memcpy(packed + t, ids[i], (size_t)ntok[i] * sizeof *packed);
        t += ntok[i];
        cu[s + 1] = t;
    }
}

/* ---------- buffer plan ---------- */

static size_t align_up(size_t n) { return (n + GP_ALIGN - 1) & ~(size_t)(GP_ALIGN - 1); }

static gp_region take(size_t *at, size_t bytes) {
    gp_region r = {*at, bytes};
    *at += align_up(bytes ? bytes : 1);
    return r;
}

int gp_bufplan_make(const donto_bert_config *c, int max_tokens, int max_seqs, int in_bytes,
                    size_t workspace, gp_bufplan *p, donto_err *err) {
    memset(p, 0, sizeof *p);
    if (max_tokens < 1 || max_seqs < 1 || max_seqs > max_tokens)
        return donto_seterr(err, "buffer plan: need 1 <= max_seqs (%d) <= max_tokens (%d)", max_seqs, max_tokens);
    if (in_bytes != 2 && in_bytes != 4) return donto_seterr(err, "buffer plan: operand size %d", in_bytes);
    const size_t T = (size_t)max_tokens, S = (size_t)max_seqs, H = (size_t)c->hidden,
                 FF = (size_t)c->intermediate;
    const size_t wide = FF > 3 * H ? FF : 3 * H;
    p->max_tokens = max_tokens, p->max_seqs = max_seqs, p->in_bytes = in_bytes;
    size_t at = 0;
    p->x = take(&at, T * H * 4);
    p->xc = take(&at, S * H * 4);
    p->xin = take(&at, T * H * (size_t)in_bytes);
    p->ctx = take(&at, T * H * (size_t)in_bytes);
    p->y = take(&at, T * wide * 4);
    p->fin = take(&at, T * FF * (size_t)in_bytes);
    p->ws = take(&at, workspace);
    p->arena_bytes = at;
    at = 0;
    p->ids = take(&at, T * 4);
    p->cu = take(&at, (S + 1) * 4);
    p->out = take(&at, S * H * 4);
    p->slot_bytes = at;
    return 0;
}

/* ---------- bf16 ---------- */

uint16_t gp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1); /* ties to even; overflow carries into inf, as it should */
    return (uint16_t)(u >> 16);
}

/* ---------- ring ---------- */

int gp_ring_init(gp_ring *r, int nslots, donto_err *err) {
    memset(r, 0, sizeof *r);
    if (nslots < 1 || nslots > GP_MAX_SLOTS)
        return donto_seterr(err, "slot ring: %d slots (allowed 1..%d)", nslots, GP_MAX_SLOTS);
    r->nslots = nslots;
    return 0;
}

int gp_ring_stage(gp_ring *r) {
    if (r->inflight == r->nslots) return -1;
    int s = r->next;
    if (r->state[s] != GP_SLOT_FREE) return -1; /* cannot happen while the counters agree */
    r->state[s] = GP_SLOT_IN_FLIGHT;
    r->next = (s + 1) % r->nslots;
    r->inflight++;
    r->staged++;
    return s;
}

int gp_ring_oldest(const gp_ring *r) { return r->inflight ? r->oldest : -1; }

int gp_ring_retire(gp_ring *r, int slot) {
    if (!r->inflight || slot != r->oldest || r->state[slot] != GP_SLOT_IN_FLIGHT) return -1;
    r->state[slot] = GP_SLOT_FREE;
    r->oldest = (slot + 1) % r->nslots;
    r->inflight--;
    r->retired++;
    return 0;
}

/* ---------- stream driver ---------- */

int gp_stream_init(gp_stream *s, const gp_engine *eng, donto_err *err) {
    memset(s, 0, sizeof *s);
    s->eng = eng;
    if (gp_ring_init(&s->ring, eng->nslots, err)) return -1;
    for (int i = 0; i < eng->nslots; i++) {
        s->dst[i] = malloc((size_t)eng->max_seqs * sizeof **s->dst);
        if (!s->dst[i]) {
            gp_stream_free(s);
            return donto_seterr(err, "out of memory");
        }
    }
    return 0;
}

void gp_stream_free(gp_stream *s) {
    for (int i = 0; i < GP_MAX_SLOTS; i++) free(s->dst[i]), s->dst[i] = NULL;
    free(s->order), free(s->batches);
    s->order = NULL, s->batches = NULL, s->cap = 0;
}

/* Wait for the oldest batch and copy its vectors to their rows. */
static int retire_one(gp_stream *s, donto_err *err) {
    int slot = gp_ring_oldest(&s->ring);
    if (slot < 0) return 0;
    const float *vec = NULL;
    int rc = s->eng->wait(s->eng->ctx, slot, &vec, err);
    if (!rc) {
        const size_t dim = (size_t)s->eng->dim;
        for (int i = 0; i < s->dst_n[slot]; i++) memcpy(s->dst[slot][i], vec + (size_t)i * dim, dim * sizeof *vec);
    }
    s->dst_n[slot] = 0;
    gp_ring_retire(&s->ring, slot);
    return rc;
}

/* After an error: wait out everything in flight (its results are dropped),
 * so the engine's buffers are quiet and the next call starts clean. */
static void abort_all(gp_stream *s) {
    while (gp_ring_oldest(&s->ring) >= 0) {
        int slot = gp_ring_oldest(&s->ring);
        const float *vec;
        s->eng->wait(s->eng->ctx, slot, &vec, NULL);
        s->dst_n[slot] = 0;
        gp_ring_retire(&s->ring, slot);
    }
}

int gp_stream_drain(gp_stream *s, donto_err *err) {
    while (gp_ring_oldest(&s->ring) >= 0)
        if (retire_one(s, err)) {
            abort_all(s);
            return -1;
        }
    return 0;
}

int gp_stream_feed(gp_stream *s, const int32_t *const *ids, const int *ntok, size_t n, float *out,
                   donto_err *err) {
    if (n == 0) return 0;
    const gp_engine *e = s->eng;
    if (n > s->cap) {
        size_t *o = realloc(s->order, n * sizeof *o);
        if (o) s->order = o;
        gp_batch *b = realloc(s->batches, n * sizeof *b);
        if (b) s->batches = b;
        if (!o || !b) {
            abort_all(s);
            return donto_seterr(err, "out of memory planning %zu sequences", n);
        }
        s->cap = n;
    }
    size_t nb;
    if (gp_sort_by_length(ntok, n, s->order) ||
        gp_plan_batches(ntok, s->order, n, e->max_tokens, e->max_seqs, s->batches, &nb, err)) {
        abort_all(s);
        if (err && !err->msg[0]) donto_seterr(err, "out of memory sorting %zu sequences", n);
        return -1;
    }
    for (size_t k = 0; k < nb; k++) {
        const gp_batch *b = &s->batches[k];
        int slot;
        /* All slots busy: retiring the oldest is the only wait, and the
         * batches behind it keep the device busy meanwhile. */
        while ((slot = gp_ring_stage(&s->ring)) < 0)
            if (retire_one(s, err)) {
                abort_all(s);
                return -1;
            }
        gp_pack(ids, ntok, s->order, b, e->slot_ids(e->ctx, slot), e->slot_cu(e->ctx, slot));
        for (int i = 0; i < b->nseq; i++)
            s->dst[slot][i] = out + s->order[b->first + (size_t)i] * (size_t)e->dim;
        s->dst_n[slot] = b->nseq;
        if (e->submit(e->ctx, slot, b->nseq, b->tokens, b->maxlen, err)) {
            /* The slot never started: free it without waiting on it. Slots
             * are retired oldest-first, so wait out the older ones first. */
            s->dst_n[slot] = 0;
            while (gp_ring_oldest(&s->ring) != slot) {
                int o = gp_ring_oldest(&s->ring);
                const float *vec;
                e->wait(e->ctx, o, &vec, NULL);
                s->dst_n[o] = 0;
                gp_ring_retire(&s->ring, o);
            }
            gp_ring_retire(&s->ring, slot);
            return -1;
        }
        s->batches_run++;
        s->tokens_run += (uint64_t)b->tokens;
    }
    return 0;
}
