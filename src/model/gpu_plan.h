/*
 * Host-side logic of the GPU engine, in plain C so it builds and is tested
 * without a GPU:
 *
 *   - the token-budget batcher: sequences sorted by length, cut into packed
 *     batches whose SUM of lengths fits the budget (not max length x count),
 *     and packed end to end with cumulative offsets (cu_seqlens), so no
 *     padding token is ever computed;
 *   - the buffer plan: one device arena carved into the activation buffers
 *     for the largest batch (reused by every batch), plus per-slot pinned
 *     host / device buffers for ids, offsets and output vectors;
 *   - the slot ring: a double (or deeper) buffering state machine. A slot is
 *     FREE or IN_FLIGHT; the host packs batch k+1 into a free slot while the
 *     device still computes batch k, and retires slots strictly in the order
 *     they were staged;
 *   - the stream driver (gp_stream): feeds tokenised sequences through an
 *     engine (a struct of function pointers: the CUDA engine, or a CPU fake
 *     in the tests) using the batcher, the ring and the scatter of vectors
 *     back to input order. It leaves the last batches in flight when a feed
 *     returns, so the caller can tokenise the next chunk while they compute.
 */
#ifndef DONTO_GPU_PLAN_H
#define DONTO_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "donto/model.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GP_MAX_SLOTS 8

/* ---------- token-budget batcher ---------- */

typedef struct gp_batch {
    size_t first; /* index into the sorted order */
    int nseq;     /* sequences in the batch */
    int tokens;   /* sum of their lengths (the packed row count) */
    int maxlen;   /* the longest one (attention grid size) */
} gp_batch;

/* order[i] = indices 0..n-1 sorted by (ntok, index): stable, so the same
 * input always gives the same batches. 0, or -1 (out of memory). */
int gp_sort_by_length(const int *ntok, size_t n, size_t *order);

/* Cut the sorted run into batches of at most `budget` tokens and `max_seqs`
 * sequences (a single sequence longer than the budget is refused: -1).
 * out needs room for n batches; *nb gets the count. */
int gp_plan_batches(const int *ntok, const size_t *order, size_t n, int budget, int max_seqs,
                    gp_batch *out, size_t *nb, donto_err *err);

/* Pack batch b: ids laid end to end into packed[b->tokens], cu[0] = 0,
 * cu[s+1] = cu[s] + length of the batch's sequence s. */
void gp_pack(const int32_t *const *ids, const int *ntok, const size_t *order, const gp_batch *b,
             int32_t *packed, int32_t *cu);

/* ---------- buffer plan ---------- */

typedef struct gp_region {
    size_t off, bytes;
} gp_region;

typedef struct gp_bufplan {
    int max_tokens, max_seqs, in_bytes; /* in_bytes: GEMM operand size (2 bf16, 4 fp32) */
    /* Device arena (one allocation, reused by every batch). */
    gp_region x;    /* fp32 [T,H] residual stream */
    gp_region xc;   /* fp32 [S,H] CLS rows gathered for the CLS-only last layer */
    gp_region xin;  /* in   [T,H] GEMM copy of x */
    gp_region ctx;  /* in   [T,H] attention output */
    gp_region y;    /* fp32 [T,max(3H,FF)] GEMM output (QKV, then the others) */
    gp_region fin;  /* in   [T,FF] GELU output, the FFN-out GEMM input */
    gp_region ws;   /* cuBLASLt workspace */
    size_t arena_bytes;
    /* Per slot, the same layout in pinned host memory and in device memory. */
    gp_region ids;  /* int32 [T] */
    gp_region cu;   /* int32 [S+1] */
    gp_region out;  /* fp32 [S,H] pooled, normalised vectors */
    size_t slot_bytes;
} gp_bufplan;

/* Alignment of every region (bytes): enough for cuBLASLt and vector loads. */
#define GP_ALIGN 256

int gp_bufplan_make(const donto_bert_config *c, int max_tokens, int max_seqs, int in_bytes,
                    size_t workspace, gp_bufplan *p, donto_err *err);

/* ---------- slot ring ---------- */

enum { GP_SLOT_FREE = 0, GP_SLOT_IN_FLIGHT = 1 };

typedef struct gp_ring {
    int nslots;
    int next;     /* slot the next batch is staged into */
    int oldest;   /* oldest in-flight slot */
    int inflight; /* slots in flight */
    int state[GP_MAX_SLOTS];
    uint64_t staged, retired; /* counters, for checks */
} gp_ring;

int gp_ring_init(gp_ring *r, int nslots, donto_err *err);
/* The slot for a new batch, marked in flight; -1 when all are in flight
 * (retire the oldest first). */
int gp_ring_stage(gp_ring *r);
/* The oldest in-flight slot; -1 when none. */
int gp_ring_oldest(const gp_ring *r);
/* Mark `slot` free again. Only the oldest in-flight slot may be retired
 * (results come back in submission order); -1 otherwise. */
int gp_ring_retire(gp_ring *r, int slot);

/* ---------- bf16 ---------- */

/* fp32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN): how the
 * CUDA engine stores its GEMM weights, and how bench_bf16_emulate rounds. */
uint16_t gp_f32_to_bf16(float f);
static inline float gp_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/* ---------- stream driver ---------- */

/* An engine with nslots buffer sets. slot_ids/slot_cu give the host
 * (pinned) buffers of a slot to pack into; submit starts the batch in the
 * slot asynchronously (upload, forward, download); wait blocks until the
 * slot's batch is done and gives its nseq x dim vectors, valid until the slot
 * is staged again. */
typedef struct gp_engine {
    void *ctx;
    int nslots, max_tokens, max_seqs, dim;
    int32_t *(*slot_ids)(void *ctx, int slot);
    int32_t *(*slot_cu)(void *ctx, int slot);
    int (*submit)(void *ctx, int slot, int nseq, int ntokens, int maxlen, donto_err *err);
    int (*wait)(void *ctx, int slot, const float **vec, donto_err *err);
} gp_engine;

typedef struct gp_stream {
    const gp_engine *eng;
    gp_ring ring;
    float **dst[GP_MAX_SLOTS]; /* output row of each sequence of the slot's batch */
    int dst_n[GP_MAX_SLOTS];
    size_t *order;
    gp_batch *batches;
    size_t cap;
    uint64_t batches_run, tokens_run;
} gp_stream;

int gp_stream_init(gp_stream *s, const gp_engine *eng, donto_err *err);
void gp_stream_free(gp_stream *s);
/* Run n sequences; vector of sequence i goes to out + i * dim once it is
 * retired (at the latest by gp_stream_drain). Staged batches own copies of
 * their ids, so ids may be reused as soon as this returns. On error every
 * batch in flight is waited for and dropped. */
int gp_stream_feed(gp_stream *s, const int32_t *const *ids, const int *ntok, size_t n, float *out,
                   donto_err *err);
/* Retire every batch in flight. */
int gp_stream_drain(gp_stream *s, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
