/*
 * The one batcher of the encoder, for every engine (the CPU forward and the
 * CUDA engine alike), in plain C so all of it is tested on the CPU:
 *
 *   - the token-budget batcher: sequences sorted by length, cut into packed
 *     batches whose SUM of lengths fits the budget (not max length x count),
 *     and packed end to end with cumulative offsets (cu_seqlens), so no
 *     padding token is ever computed;
 *   - the engine: a small vtable (bp_engine) that forwards one packed batch
 *     to pooled, L2-normalised vectors. bert_cpu.c and bert_cuda.cu each
 *     provide one; the tests provide fakes. It is only ever reached through
 *     the bp_engine_* wrappers below;
 *   - the slot ring: a FREE / IN_FLIGHT state machine over the engine's
 *     buffer sets. The host packs batch k+1 into a free slot while an
 *     asynchronous engine (a GPU) still computes batch k, and retires slots
 *     strictly in the order they were staged;
 *   - the stream driver (bp_stream): feeds tokenised sequences through an
 *     engine using the batcher, the ring and the scatter of vectors back to
 *     input order. It leaves the last batches in flight when a feed returns,
 *     so the caller can tokenise the next chunk while they compute.
 */
#ifndef DONTO_BATCH_H
#define DONTO_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "donto/encoder.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BP_MAX_SLOTS 8

/* ---------- token-budget batcher ---------- */

typedef struct bp_batch {
    size_t first; /* index into the sorted order */
    int nseq;     /* sequences in the batch */
    int tokens;   /* sum of their lengths (the packed row count) */
    int maxlen;   /* the longest one (attention grid size) */
} bp_batch;

/* order[i] = indices 0..n-1 sorted by (ntok, index): stable, so the same
 * input always gives the same batches. 0, or -1 (out of memory). */
int bp_sort_by_length(const int *ntok, size_t n, size_t *order);

/* Cut the sorted run into batches of at most `budget` tokens and `max_seqs`
 * sequences (a single sequence longer than the budget is refused: -1).
 * out needs room for n batches; *nb gets the count. */
int bp_plan_batches(const int *ntok, const size_t *order, size_t n, int budget, int max_seqs,
                    bp_batch *out, size_t *nb, donto_err *err);

/* Pack batch b: ids laid end to end into packed[b->tokens], cu[0] = 0,
 * cu[s+1] = cu[s] + length of the batch's sequence s. */
void bp_pack(const int32_t *const *ids, const int *ntok, const size_t *order, const bp_batch *b,
             int32_t *packed, int32_t *cu);

/* ---------- engine ---------- */

/* An engine with nslots buffer sets. slot_ids / slot_cu give the host
 * buffers of a slot to pack into; submit starts the batch in the slot
 * (upload, forward, download; a synchronous engine just computes it); wait
 * blocks until the slot's batch is done and gives its nseq x dim pooled,
 * L2-normalised vectors, valid until the slot is staged again.
 *
 * async: 1 when the forward runs off the host's cores (a GPU), so the
 * encoder tokenises the next chunk on a helper thread meanwhile; 0 when the
 * forward itself uses the host's threads (the CPU engine), so tokenising
 * runs in line, between feeds, and the two never compete for cores.
 * info: device figures, or NULL (none). close: frees ctx, or NULL when the
 * engine belongs to someone else (a test's fake). */
typedef struct bp_engine {
    void *ctx;
    int nslots, max_tokens, max_seqs, dim, async;
    int32_t *(*slot_ids)(void *ctx, int slot);
    int32_t *(*slot_cu)(void *ctx, int slot);
    int (*submit)(void *ctx, int slot, int nseq, int ntokens, int maxlen, donto_err *err);
    int (*wait)(void *ctx, int slot, const float **vec, donto_err *err);
    int (*info)(const void *ctx, donto_encoder_devinfo *out);
    void (*close)(void *ctx);
} bp_engine;

static inline int32_t *bp_engine_slot_ids(const bp_engine *e, int slot) { return e->slot_ids(e->ctx, slot); }
static inline int32_t *bp_engine_slot_cu(const bp_engine *e, int slot) { return e->slot_cu(e->ctx, slot); }
static inline int bp_engine_submit(const bp_engine *e, int slot, int nseq, int ntokens, int maxlen, donto_err *err) {
    return e->submit(e->ctx, slot, nseq, ntokens, maxlen, err);
}
static inline int bp_engine_wait(const bp_engine *e, int slot, const float **vec, donto_err *err) {
    return e->wait(e->ctx, slot, vec, err);
}
/* 1 and *out filled when the engine has device figures; 0 otherwise. */
static inline int bp_engine_info(const bp_engine *e, donto_encoder_devinfo *out) {
    return e->info && e->info(e->ctx, out) == 0;
}
static inline void bp_engine_close(bp_engine *e) {
    if (e->close && e->ctx) e->close(e->ctx);
    e->ctx = NULL;
}

/* ---------- slot ring ---------- */

enum { BP_SLOT_FREE = 0, BP_SLOT_IN_FLIGHT = 1 };

typedef struct bp_ring {
    int nslots;
    int next;     /* slot the next batch is staged into */
    int oldest;   /* oldest in-flight slot */
    int inflight; /* slots in flight */
    int state[BP_MAX_SLOTS];
    uint64_t staged, retired; /* counters, for checks */
} bp_ring;

int bp_ring_init(bp_ring *r, int nslots, donto_err *err);
/* The slot for a new batch, marked in flight; -1 when all are in flight
 * (retire the oldest first). */
int bp_ring_stage(bp_ring *r);
/* The oldest in-flight slot; -1 when none. */
int bp_ring_oldest(const bp_ring *r);
/* Mark `slot` free again. Only the oldest in-flight slot may be retired
 * (results come back in submission order); -1 otherwise. */
int bp_ring_retire(bp_ring *r, int slot);

/* ---------- stream driver ---------- */

typedef struct bp_stream {
    const bp_engine *eng;
    bp_ring ring;
    float **dst[BP_MAX_SLOTS]; /* output row of each sequence of the slot's batch */
    int dst_n[BP_MAX_SLOTS];
    size_t *order;
    bp_batch *batches;
    size_t cap;
    uint64_t batches_run, tokens_run;
    int dst_tok[BP_MAX_SLOTS]; /* tokens of the slot's batch */
    /* Called once a batch's vectors are in place (NULL: none): its
     * sequences and tokens. Runs on the thread that drives the stream. */
    void (*on_done)(void *ctx, size_t seqs, size_t tokens);
    void *on_done_ctx;
} bp_stream;

int bp_stream_init(bp_stream *s, const bp_engine *eng, donto_err *err);
void bp_stream_free(bp_stream *s);
/* Run n sequences; vector of sequence i goes to out + i * dim once it is
 * retired (at the latest by bp_stream_drain). Staged batches own copies of
 * their ids, so ids may be reused as soon as this returns. On error every
 * batch in flight is waited for and dropped. */
int bp_stream_feed(bp_stream *s, const int32_t *const *ids, const int *ntok, size_t n, float *out,
                   donto_err *err);
/* Retire every batch in flight. */
int bp_stream_drain(bp_stream *s, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
