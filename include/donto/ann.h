/*
 * donto-accel: approximate nearest-neighbour index over unit vectors, a thin
 * C face on FAISS (Debian's libfaiss-dev, which ships no C API library).
 * src/recall/ann.cpp is the only C++ in the project; every FAISS exception
 * is caught there and becomes a donto_err.
 *
 * Similarity is the inner product (vectors are L2-normalised, so it is the
 * cosine). The index kind is a FAISS index_factory description, or "auto"
 * (the default): IVF-Flat with about 4 sqrt(n) lists, probing 32 of
 * them (1/128 of them on very large indexes) per query. Why IVF and not HNSW (Debian's FAISS is a generic
 * SSE build and HNSW construction was ~200 vectors/s on our 2 cores) is
 * measured in docs/recall.md.
 *
 * File format (donto_ann_save): a 40-byte header
 *   "DONTOANN" | u32 version (1) | u32 dim | u64 ntotal | u64 payload bytes |
 *   u64 payload hash
 * then FAISS's own serialisation as the payload. donto_ann_load checks the
 * magic, the length (a truncated file is named as such), the hash, then
 * parses, then checks dim and ntotal against the header and the caller's
 * dim: a bad file is an error, never a crash or a wrong answer.
 */
#ifndef DONTO_ANN_H
#define DONTO_ANN_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_ann donto_ann;

typedef struct donto_ann_opts {
    const char *kind;   /* FAISS index_factory string or "auto"; NULL: "auto" */
    const char *search; /* FAISS ParameterSpace string, e.g. "nprobe=32" or
                         * "efSearch=64"; NULL: IVF nprobe = max(32, nlist/128),
                         * HNSW efSearch = DONTO_ANN_HNSW_EF_SEARCH */
    int threads;        /* OpenMP threads for build/add/batch search; 0: leave as is */
} donto_ann_opts;

#define DONTO_ANN_DEFAULT_KIND "auto"
/* When an HNSW kind is asked for: construction and search depth. */
#define DONTO_ANN_HNSW_EF_CONSTRUCTION 40
#define DONTO_ANN_HNSW_EF_SEARCH 64

void donto_ann_default_opts(donto_ann_opts *o);

/* Build an index over x [n, dim] (row i gets label i); trains first when the
 * kind needs it (IVF: needs n >= its list count). o may be NULL. */
int donto_ann_build(int dim, const float *x, size_t n, const donto_ann_opts *o, donto_ann **out,
                    donto_err *err);
/* Append x [n, dim]; the new rows get labels ntotal .. ntotal+n-1. */
int donto_ann_add(donto_ann *a, const float *x, size_t n, donto_err *err);
/* For each of nq queries q [nq, dim]: the k best labels and scores, best
 * first; slots past the index's size get label -1 and score -INFINITY.
 * Safe to call from several threads at once on one index. */
int donto_ann_search(const donto_ann *a, const float *q, size_t nq, size_t k, float *scores,
                     int64_t *labels, donto_err *err);
/* Apply a ParameterSpace string ("efSearch=64", "nprobe=16"); NULL or "":
 * the defaults above. */
int donto_ann_set_search(donto_ann *a, const char *params, donto_err *err);

/* Write atomically (path.tmp, then rename). */
int donto_ann_save(const donto_ann *a, const char *path, donto_err *err);
/* Load and validate (see above). dim > 0: the file must hold dim-d vectors.
 * o (may be NULL) supplies the search parameters to apply. */
int donto_ann_load(const char *path, int dim, const donto_ann_opts *o, donto_ann **out,
                   donto_err *err);

/* "IVF4096,Flat nprobe=64" / "HNSW32,Flat efSearch=64": what was built. */
void donto_ann_describe(const donto_ann *a, char *buf, size_t cap);
size_t donto_ann_ntotal(const donto_ann *a);
int donto_ann_dim(const donto_ann *a);
void donto_ann_free(donto_ann *a);

#ifdef __cplusplus
}
#endif
#endif
