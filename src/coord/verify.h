/*
 * donto-accel coordinator: the background verification pool (issue 15).
 *
 * The coordinator re-embeds a sample of each token's submitted items with its
 * own engine (fp32, CPU) and compares the submitted vector with its own by
 * cosine. This pool does the re-embedding off the HTTP threads: a bounded
 * queue of jobs, one (or a few) worker threads at lowered priority, one
 * encode call per batch of up to batch_max jobs, and a callback per job with
 * the cosine and the verdict. What to sample is trust.h's business; what to do
 * with a verdict (the row's verified flag, the token's counters, suspension)
 * is the caller's.
 *
 *   verify_config c; verify_config_default(&c);
 *   c.model_dir = "models/all-MiniLM-L6-v2"; c.done = on_done; c.ctx = srv;
 *   verify_pool *vp; if (verify_pool_open(&c, &vp, &err)) ...
 *   verify_job j = {.token = tok, .text = text, .vec = v, .dims = 384, ...};
 *   if (verify_push(vp, &j)) ...   (1: not queued, a skipped check, never a pass)
 *   verify_pool_close(vp);
 *
 * Threads: verify_push and verify_pool_stats may be called from any number
 * of threads at once; done() runs on a pool thread (with no pool lock held,
 * so it may push or read stats), never on the pusher's. verify_pool_close
 * must not race with other calls on the same pool (stop the HTTP threads
 * first); pushes that arrive while it runs are refused (1).
 */
#ifndef DONTO_COORD_VERIFY_H
#define DONTO_COORD_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "donto/encoder.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default pass mark: a submitted vector passes when its cosine with the
 * coordinator's own fp32 vector is >= this. Measured by bench/verify-tolerance
 * (BENCHMARKS.md, "Verification tolerance (issue 15)", 2026-12-01),
 * all-MiniLM-L6-v2, all 10,000 claims and 1,000 chunks against fp32 on one
 * thread: the worst honest cosine was 0.9999760 (bf16 CPU emulation; int16
 * 0.9999910, fp32 on 2 threads 1.0000000); the best attack 0.98524 (right
 * vector + gaussian noise aimed at 0.98; a neighbour's vector <= 0.712,
 * random <= 0.192). No GPU was measured, so the honest floor is taken as the
 * bf16 acceptance gate of scripts/gpu-check, 0.999. The tolerance is the
 * geometric mean of floor and attack on the (1 - cosine) scale,
 * 1 - sqrt((1 - 0.999) (1 - 0.98524)) = 0.99616, rounded down: 0.996, ~4x
 * from each side (and 167x below the worst honest vector measured). */
#define VERIFY_MIN_COSINE_DEFAULT 0.996f

/* The cosine reported for jobs that cannot match at all (they fail):
 * dims != the encoder's dimension; a vector with a zero or non-finite norm. */
#define VERIFY_COS_BAD_DIMS (-2.0f)
#define VERIFY_COS_BAD_VECTOR (-3.0f)

/* One check. verify_push copies every field (strings may be NULL: kept
 * NULL; vec must hold dims floats); in done() the job is the pool's copy,
 * valid for that call only. */
typedef struct verify_job {
    char *token;      /* the contributor's token (or its id): whose counters */
    char *worker_id;
    int target;       /* donto_target */
    char *item_id;
    char *model;      /* the model the vector claims to be from */
    char *text;       /* the item's text, as the coordinator leased it */
    float *vec;       /* the submitted vector, dims floats */
    int dims;
    int64_t lease_id;
} verify_job;

typedef struct verify_config {
    donto_encoder *enc;      /* borrowed (must outlive the pool); or NULL and: */
    const char *model_dir;   /* open an fp32 CPU encoder here (owned by the pool) */
    int engine_threads;      /* that encoder's threads (default 1) */
    int isa;                 /* that encoder's CPU kernel set (donto_isa; 0: auto) */
    const char *model;       /* optional: jobs naming another model are not queued
                                (push returns 1, counted dropped): a vector from
                                another model cannot be checked against ours */
    int threads;             /* pool threads (default 1) */
    int nice;                /* raise each pool thread's nice value by this (0: leave it;
                                10 yields to worker processes on the same machine, but
                                then checks lag behind under load) */
    int queue_cap;           /* jobs waiting, at most (default 4096) */
    int batch_max;           /* jobs per encode call (default 32) */
    float min_cosine;        /* pass when cosine >= this (default VERIFY_MIN_COSINE_DEFAULT) */
    /* ref: the coordinator's own vector of the job's text (dims floats,
     * valid during the call; NULL when the dims did not match). A job whose
     * text the encoder could not take is not checked: done() is called with
     * pass -1, cosine NaN and ref NULL (counted dropped, not done). */
    void (*done)(void *ctx, const verify_job *job, float cosine, int pass, const float *ref);
    void *ctx;
} verify_config;

typedef struct verify_stats {
    int64_t queued;          /* waiting now (not counting a batch being encoded) */
    int64_t accepted;        /* pushes that were queued, since open */
    int64_t done;            /* checked: passed + failed */
    int64_t passed;
    int64_t failed;
    int64_t dropped;         /* skipped checks: queue full, closing, other model,
                                encoder error, left in the queue at close */
    double mean_latency_ms;  /* push to verdict, over done jobs (0 when none) */
    double max_latency_ms;
} verify_stats;

typedef struct verify_pool verify_pool;

/* Zeros, then the defaults above (enc and model_dir NULL, min_cosine
 * VERIFY_MIN_COSINE_DEFAULT). A field left <= 0 in a config given to open
 * takes its default too, min_cosine included: a zeroed config must not pass
 * every vector. */
void verify_config_default(verify_config *c);

/* Starts the pool's threads. -1 with err (DONTO_E_INVALID: neither enc nor
 * model_dir, or no done callback; the encoder's own error when model_dir
 * cannot be opened; DONTO_E_INTERNAL when a thread cannot start). */
int verify_pool_open(const verify_config *cfg, verify_pool **out, donto_err *err);

/* Copies job into the queue and returns 0; never blocks on the queue. Returns
 * 1 (counted dropped: a check skipped, not a pass) when the queue is full,
 * the pool is closing, the job names another model than cfg->model, or the
 * copy cannot be allocated. -1 when job is malformed (NULL text, NULL vec
 * with dims > 0, or dims < 0): nothing is counted. A job whose dims differ
 * from the encoder's is queued and fails (VERIFY_COS_BAD_DIMS). */
int verify_push(verify_pool *p, const verify_job *job);

void verify_pool_stats(verify_pool *p, verify_stats *out);

/* Wakes the threads, lets each finish the batch it is encoding (their done()
 * calls happen), joins them, drops the jobs still queued (counted, no done()
 * call), closes an owned encoder and frees everything. NULL is a no-op. */
void verify_pool_close(verify_pool *p);
/* The same, and the final figures into *last (when non-NULL): what close
 * dropped is counted in last->dropped; last->queued is 0. */
void verify_pool_close_stats(verify_pool *p, verify_stats *last);

/* Cosine of a and b over n floats, computed in double; VERIFY_COS_BAD_VECTOR
 * when either has a zero or non-finite norm. */
float verify_cosine(const float *a, const float *b, int n);

#ifdef __cplusplus
}
#endif
#endif
