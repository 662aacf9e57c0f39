/*
 * The encoder's one batcher (see batch.h): length sort, token-budget
 * batches, packing, the slot ring and the stream driver that feeds them to
 * an engine (the CPU forward, the CUDA engine, or a test's fake).
 */
#include "batch.h"

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

int bp_sort_by_length(const int *ntok, size_t n, size_t *order) {
    if (n == 0) return 0;
    len_idx *t = malloc(n * sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < n; i++) t[i] = (len_idx){ntok[i], i};
    qsort(t, n, sizeof *t, cmp_len);
    for (size_t i = 0; i < n; i++) order[i] = t[i].idx;
    free(t);
    return 0;
}

int bp_plan_batches(const int *ntok, const size_t *order, size_t n, int budget, int max_seqs,
                    bp_batch *out, size_t *nb, donto_err *err) {
    *nb = 0;
    if (budget < 1 || max_seqs < 1) return donto_seterr(err, "batcher: budget %d / max_seqs %d must be positive", budget, max_seqs);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        bp_batch b = {i, 0, 0, 0};
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

void bp_pack(const int32_t *const *ids, const int *ntok, const size_t *order, const bp_batch *b,
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

/* ---------- ring ---------- */

int bp_ring_init(bp_ring *r, int nslots, donto_err *err) {
    memset(r, 0, sizeof *r);
    if (nslots < 1 || nslots > BP_MAX_SLOTS)
        return donto_seterr(err, "slot ring: %d slots (allowed 1..%d)", nslots, BP_MAX_SLOTS);
    r->nslots = nslots;
    return 0;
}

int bp_ring_stage(bp_ring *r) {
    if (r->inflight == r->nslots) return -1;
    int s = r->next;
    if (r->state[s] != BP_SLOT_FREE) return -1; /* cannot happen while the counters agree */
    r->state[s] = BP_SLOT_IN_FLIGHT;
    r->next = (s + 1) % r->nslots;
    r->inflight++;
    r->staged++;
    return s;
}

int bp_ring_oldest(const bp_ring *r) { return r->inflight ? r->oldest : -1; }

int bp_ring_retire(bp_ring *r, int slot) {
    if (!r->inflight || slot != r->oldest || r->state[slot] != BP_SLOT_IN_FLIGHT) return -1;
    r->state[slot] = BP_SLOT_FREE;
    r->oldest = (slot + 1) % r->nslots;
    r->inflight--;
    r->retired++;
    return 0;
}

/* ---------- stream driver ---------- */

int bp_stream_init(bp_stream *s, const bp_engine *eng, donto_err *err) {
    memset(s, 0, sizeof *s);
    s->eng = eng;
    if (bp_ring_init(&s->ring, eng->nslots, err)) return -1;
    for (int i = 0; i < eng->nslots; i++) {
        s->dst[i] = malloc((size_t)eng->max_seqs * sizeof **s->dst);
        if (!s->dst[i]) {
            bp_stream_free(s);
            return donto_seterr(err, "out of memory");
        }
    }
    return 0;
}

void bp_stream_free(bp_stream *s) {
    for (int i = 0; i < BP_MAX_SLOTS; i++) free(s->dst[i]), s->dst[i] = NULL;
    free(s->order), free(s->batches);
    s->order = NULL, s->batches = NULL, s->cap = 0;
}

/* Wait for the oldest batch and copy its vectors to their rows. */
static int retire_one(bp_stream *s, donto_err *err) {
    int slot = bp_ring_oldest(&s->ring);
    if (slot < 0) return 0;
    const float *vec = NULL;
    int rc = bp_engine_wait(s->eng, slot, &vec, err);
    if (!rc) {
        const size_t dim = (size_t)s->eng->dim;
        for (int i = 0; i < s->dst_n[slot]; i++) memcpy(s->dst[slot][i], vec + (size_t)i * dim, dim * sizeof *vec);
        if (s->on_done) s->on_done(s->on_done_ctx, (size_t)s->dst_n[slot], (size_t)s->dst_tok[slot]);
    }
    s->dst_n[slot] = 0;
    bp_ring_retire(&s->ring, slot);
    return rc;
}

/* After an error: wait out everything in flight (its results are dropped),
 * so the engine's buffers are quiet and the next call starts clean. */
static void abort_all(bp_stream *s) {
    while (bp_ring_oldest(&s->ring) >= 0) {
        int slot = bp_ring_oldest(&s->ring);
        const float *vec;
        bp_engine_wait(s->eng, slot, &vec, NULL);
        s->dst_n[slot] = 0;
        bp_ring_retire(&s->ring, slot);
    }
}

int bp_stream_drain(bp_stream *s, donto_err *err) {
    while (bp_ring_oldest(&s->ring) >= 0)
        if (retire_one(s, err)) {
            abort_all(s);
            return -1;
        }
    return 0;
}

int bp_stream_feed(bp_stream *s, const int32_t *const *ids, const int *ntok, size_t n, float *out,
                   donto_err *err) {
    if (n == 0) return 0;
    const bp_engine *e = s->eng;
    if (n > s->cap) {
        size_t *o = realloc(s->order, n * sizeof *o);
        if (o) s->order = o;
        bp_batch *b = realloc(s->batches, n * sizeof *b);
        if (b) s->batches = b;
        if (!o || !b) {
            abort_all(s);
            return donto_seterr(err, "out of memory planning %zu sequences", n);
        }
        s->cap = n;
    }
    size_t nb;
    if (bp_sort_by_length(ntok, n, s->order) ||
        bp_plan_batches(ntok, s->order, n, e->max_tokens, e->max_seqs, s->batches, &nb, err)) {
        abort_all(s);
        if (err && !err->msg[0]) donto_seterr(err, "out of memory sorting %zu sequences", n);
        return -1;
    }
    for (size_t k = 0; k < nb; k++) {
        const bp_batch *b = &s->batches[k];
        int slot;
        /* All slots busy: retiring the oldest is the only wait, and the
         * batches behind it keep the device busy meanwhile. */
        while ((slot = bp_ring_stage(&s->ring)) < 0)
            if (retire_one(s, err)) {
                abort_all(s);
                return -1;
            }
        bp_pack(ids, ntok, s->order, b, bp_engine_slot_ids(e, slot), bp_engine_slot_cu(e, slot));
        for (int i = 0; i < b->nseq; i++)
            s->dst[slot][i] = out + s->order[b->first + (size_t)i] * (size_t)e->dim;
        s->dst_n[slot] = b->nseq;
        s->dst_tok[slot] = b->tokens;
        if (bp_engine_submit(e, slot, b->nseq, b->tokens, b->maxlen, err)) {
            /* The slot never started: free it without waiting on it. Slots
             * are retired oldest-first, so wait out the older ones first. */
            s->dst_n[slot] = 0;
            while (bp_ring_oldest(&s->ring) != slot) {
                int o = bp_ring_oldest(&s->ring);
                const float *vec;
                bp_engine_wait(e, o, &vec, NULL);
                s->dst_n[o] = 0;
                bp_ring_retire(&s->ring, o);
            }
            bp_ring_retire(&s->ring, slot);
            return -1;
        }
        s->batches_run++;
        s->tokens_run += (uint64_t)b->tokens;
    }
    return 0;
}
