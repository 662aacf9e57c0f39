/*
 * donto-accel: sheaf scores written back to the substrate (module sheaf_score,
 * src/sheafscore/; docs/sheaf-serving.md "Scores"). The task's active model (the
 * registry) runs over the substrate as it is now (donto_sheafx_live_read: the
 * export's reader, filters and edges), incrementally: only the claims that changed
 * since the last finished run of this task and model (its watermark), and for the
 * edge tasks the candidate pairs touching them. It writes donto_sheaf_score rows
 * (replacing the model's older scores of the same items), proposes arguments under
 * the context "sheaf:model-<name>" (which the export never reads back), and ends
 * with a donto_sheaf_score_run row.
 *
 * Errors: 0, or -1 with err: DONTO_E_NOT_FOUND (no active model, no vectors,
 * tables missing), DONTO_E_INVALID (the model does not fit the vectors or task),
 * DONTO_E_UNAVAILABLE (the database).
 */
#ifndef DONTO_SHEAF_SCORE_H
#define DONTO_SHEAF_SCORE_H

#include <stdint.h>

#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_sheaf_score_opts {
    const char *task;        /* arg_link | identity | claim_score */
    const char *model;       /* whose stored vectors are the features (the export's --model) */
    int64_t since;           /* changed after this (ms); used when has_since */
    int has_since;           /* else: the watermark of the last finished run (none: everything) */
    int hops;                /* neighbourhood of each item given to the model (default 1) */
    int64_t max_nodes;       /* nodes per batch at most (default 50000) */
    double propose_min;      /* arg_link: propose an argument at this probability (default 0.9; > 1: never) */
    void (*progress)(void *ctx, const char *phase, int64_t done, int64_t total);
    void *ctx;
} donto_sheaf_score_opts;
void donto_sheaf_score_opts_init(donto_sheaf_score_opts *o);

typedef struct donto_sheaf_score_stats {
    char model[128];
    int64_t model_id;
    int64_t since, watermark;            /* ms (since INT64_MIN: first run) */
    int64_t nodes, edges, changed;       /* the live graph; claims changed since */
    int64_t items, rows, proposed, batches;
    double seconds, read_s, items_per_s;
} donto_sheaf_score_stats;

/* Score task with its active model; see the header comment. */
int donto_sheaf_score(donto_store *s, const donto_sheaf_score_opts *o, donto_sheaf_score_stats *st, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
