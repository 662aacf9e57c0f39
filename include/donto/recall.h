/*
 * donto-accel: exact nearest-neighbour search over unit vectors.
 *
 * Vectors are L2-normalised, so cosine similarity is a dot product. The scan
 * is a blocked matrix-vector product (BLAS sgemv) followed by a bounded
 * min-heap for the top k; it touches every vector once and needs no index.
 */
#ifndef DONTO_RECALL_H
#define DONTO_RECALL_H

#include <stddef.h>
#include <stdint.h>

#include "donto/ann.h"
#include "donto/encoder.h"
#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_hit {
    size_t index;
    float score;
} donto_hit;

/* Top k rows of vecs [n, dim] by dot product with q [dim], best first.
 * Returns the number of hits written (min(k, n)). */
size_t donto_exact_topk(const float *vecs, size_t n, int dim, const float *q, size_t k,
                        donto_hit *out);

/*
 * Recall over the store: embed a query, find the stored vectors of one
 * target (and one model) nearest to it, return them with their texts.
 *
 * Small collections are searched exactly (the scan above, over a copy of
 * the vectors kept in memory). From ann_min vectors on, an ANN index
 * (include/donto/ann.h) is used instead; it is saved beside the database as
 * <index_prefix>.<target>.faiss plus <index_prefix>.<target>.ids (the item
 * ids in index order, the model, and the high-water mark it was built at:
 * vector count and latest `created`). Every query first asks the store for
 * the current mark (one indexed count): unchanged -> search; only new rows
 * since the mark -> read just those and add them; anything else (a vector
 * replaced, rows gone, a different model, a bad file) -> rebuild.
 *
 * A donto_recall may be shared by threads (the coordinator). Queries search
 * under a read lock, so they run at once; bringing a target's index in step
 * with the store runs under that target's build lock only, outside the read
 * lock: a rebuild streams the vectors into a file beside the index
 * (include/donto/vecfile.h), builds a new index from it and swaps it in
 * under a short write lock, and while it runs other queries answer from the
 * old index (info.stale = 1). Adding a few new rows takes the write lock for
 * the add itself. A collection the memory bound (index_memory_gb) cannot
 * hold is refused: its queries fail with a message naming the need and the
 * bound, and its old index is dropped.
 */
typedef struct donto_recall donto_recall;

typedef struct donto_recall_opts {
    const char *model_name;    /* the stored vectors' model name (required) */
    const char *index_prefix;  /* ANN files at <prefix>.<target>.faiss/.ids;
                                * NULL: the index lives in memory only */
    size_t ann_min;            /* ANN from this many vectors on; 0: DONTO_RECALL_ANN_MIN */
    int exact;                 /* 1: always search exactly */
    const donto_ann_opts *ann; /* NULL: donto_ann_default_opts */
    double index_memory_gb;    /* > 0: bound on each index (overrides ann->memory_gb) */
} donto_recall_opts;

/* Below this, an exact scan costs about as much as an HNSW search and
 * needs no index (see docs/recall.md). */
#define DONTO_RECALL_ANN_MIN 20000
/* Vectors read from the store per page when (re)building. */
#define DONTO_RECALL_PAGE 4096

typedef struct donto_recall_hit {
    donto_target target;
    char *item_id;
    float score;
    char *text; /* NULL when the substrate does not know the item */
} donto_recall_hit;
void donto_recall_hits_free(donto_recall_hit *h, size_t n);

/* What a query did (optional out parameter). */
typedef struct donto_recall_info {
    int ann;            /* 1: searched the ANN index; 0: exact */
    size_t collection;  /* vectors searched */
    size_t added;       /* vectors read from the store by this query */
    int rebuilt;        /* 1: the collection was (re)built from scratch */
    int loaded;         /* 1: the index came from its files */
    int stale;          /* 1: answered from the index as it was, while another
                         * request brings it in step with the store */
} donto_recall_info;

/* enc is borrowed (may be NULL: then only donto_recall_search_vec works). */
int donto_recall_open(donto_encoder *enc, const donto_recall_opts *o, donto_recall **out, donto_err *err);
void donto_recall_close(donto_recall *r);

/* Top k items of target t for the query text, best first. *hits is a heap
 * array of *n (<= k) hits; free with donto_recall_hits_free. */
int donto_recall_query(donto_recall *r, donto_store *s, donto_target t, const char *query, size_t k,
                       donto_recall_hit **hits, size_t *n, donto_recall_info *info, donto_err *err);
/* The same for an already embedded query q [dim]. */
int donto_recall_search_vec(donto_recall *r, donto_store *s, donto_target t, const float *q, int dim,
                            size_t k, donto_recall_hit **hits, size_t *n, donto_recall_info *info,
                            donto_err *err);

/* For tests: hook(arg) runs inside every rebuild, after the rows are read
 * and before the index is built and swapped in (no read lock held). */
void donto_recall_set_rebuild_hook(donto_recall *r, void (*hook)(void *arg), void *arg);

/* The answer as one JSON object (compact, heap string; NULL when a text is
 * not valid UTF-8 and cannot be encoded):
 *   {"query", "target", "model", "ann": bool, "collection": N,
 *    "hits": [{"target", "item_id", "score", "text": string|null}, ...]}
 * Shared by `donto-embed recall --json` and GET /embed/recall. */
char *donto_recall_json(const char *query, donto_target t, const char *model, const donto_recall_info *info,
                        const donto_recall_hit *hits, size_t n);

/* The stored model name for a model directory: given when non-NULL, else
 * the first line of DIR/model_name.txt, else "BAAI/bge-small-en-v1.5" (the
 * worker's rule, so recall looks for what workers stored). Heap string. */
char *donto_recall_model_name(const char *model_dir, const char *given);
/* Where the ANN files of a database go: the SQLite file's own path (files
 * beside it); NULL for PostgreSQL and ":memory:" (index kept in memory). */
char *donto_recall_default_prefix(const char *db_url);

#ifdef __cplusplus
}
#endif
#endif
