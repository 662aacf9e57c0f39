/*
 * donto-accel: approximate nearest-neighbour index over unit vectors, a thin
 * C face on FAISS (Debian's libfaiss-dev, which ships no C API library).
 * src/recall/ann.cpp is the only C++ in the project; every FAISS exception
 * is caught there and becomes a donto_err.
 *
 * Similarity is the inner product (vectors are L2-normalised, so it is the
 * cosine). The index kind is a FAISS index_factory description, or "auto"
 * (the default): IVF with about 4 sqrt(n) lists, probing 32 of them (1/128
 * of them on very large indexes) per query; the lists hold the float32
 * vectors (IVF-Flat) up to DONTO_ANN_FLAT_MAX vectors, and a compressed
 * code above that or when the memory bound asks for it (donto_ann_choose:
 * the codec ladder, measured in docs/recall.md). Why IVF and not HNSW
 * (Debian's FAISS is a generic SSE build and HNSW construction was ~200
 * vectors/s on our 2 cores) is measured in docs/recall.md.
 *
 * Compressed codes give approximate scores, so a lossy index asks FAISS for
 * max(k, rerank) candidates and re-scores them exactly against the float32
 * rows of a vector file (include/donto/vecfile.h) attached to it; the
 * answer's scores are then exact inner products, as with IVF-Flat.
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

/* Build progress: phase "train" (done 0, then total, of the training
 * sample's rows) and "add" (rows added so far, of all rows), called on the
 * building thread between steps: at 10M rows a build takes about an hour on
 * 2 cores (BENCHMARKS.md). */
typedef void (*donto_ann_progress_fn)(void *ctx, const char *phase, size_t done, size_t total);

typedef struct donto_ann_opts {
    const char *kind;   /* FAISS index_factory string or "auto"; NULL: "auto" */
    const char *search; /* FAISS ParameterSpace string, e.g. "nprobe=32" or
                         * "efSearch=64"; NULL: IVF nprobe = max(32, nlist/128),
                         * HNSW efSearch = DONTO_ANN_HNSW_EF_SEARCH */
    int threads;        /* OpenMP threads for build/add/batch search; 0: leave as is */
    double memory_gb;   /* "auto" keeps the index within this many GB (1e9 bytes):
                         * codes, ids, centroids; not the vector file, which is
                         * mapped, not resident. 0: no bound */
    size_t rerank;      /* a lossy index re-ranks this many candidates exactly;
                         * 0: DONTO_ANN_RERANK */
    donto_ann_progress_fn progress; /* NULL: none */
    void *progress_ctx;
} donto_ann_opts;

#define DONTO_ANN_DEFAULT_KIND "auto"
/* When an HNSW kind is asked for: construction and search depth. */
#define DONTO_ANN_HNSW_EF_CONSTRUCTION 40
#define DONTO_ANN_HNSW_EF_SEARCH 64

/* "auto" keeps IVF-Flat (float32 in the lists) up to this many vectors
 * (1.5 GB at 384-d) when the memory bound allows it; compressed above. */
#define DONTO_ANN_FLAT_MAX 1000000
#define DONTO_ANN_RERANK 100
/* "auto" rebuilds (retrains) once the collection has grown so much that it
 * would pick twice the lists it has (lists ~ 4 sqrt(n): about 4-fold
 * growth), or another codec, or the index outgrows the memory bound. */

void donto_ann_default_opts(donto_ann_opts *o);

/* What "auto" builds for n dim-d vectors under o->memory_gb: the factory
 * string into kind, its estimated memory into *bytes. -1 with a message
 * naming the collection size, the smallest index's need and the bound when
 * nothing fits. A kind other than "auto" is returned as given. */
int donto_ann_choose(size_t n, int dim, const donto_ann_opts *o, char *kind, size_t cap, size_t *bytes,
                     donto_err *err);
/* 1 when an index's codes are approximate (PQ, SQ): searches then re-rank
 * against the attached vector file. */
int donto_ann_lossy(const donto_ann *a);
/* 1 when "auto" would now build something else for n vectors (see above). */
int donto_ann_stale(const donto_ann *a, size_t n, const donto_ann_opts *o);
/* Estimated memory of the index (codes, ids, centroids, tables), bytes. */
size_t donto_ann_memory(const donto_ann *a);

struct donto_vecfile;
/* Build over the rows of a vector file without copying them all: trains on
 * an evenly spaced sample (64 per list), adds in chunks read through the
 * mapping and dropped after use, so resident memory stays at the index plus
 * the sample. v stays attached for re-ranking (borrowed: it must outlive
 * the index, and not be appended to during a search). */
int donto_ann_build_file(struct donto_vecfile *v, const donto_ann_opts *o, donto_ann **out, donto_err *err);
/* Attach (or with NULL detach) the float32 rows used to re-rank; the file
 * must hold at least ntotal rows of the index's dimension. */
int donto_ann_attach(donto_ann *a, const struct donto_vecfile *v, donto_err *err);

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

/* "IVF4096,Flat nprobe=64" / "HNSW32,Flat efSearch=64" /
 * "IVF4096,PQ48 nprobe=32 rerank=100": what was built. */
void donto_ann_describe(const donto_ann *a, char *buf, size_t cap);
size_t donto_ann_ntotal(const donto_ann *a);
int donto_ann_dim(const donto_ann *a);
void donto_ann_free(donto_ann *a);

#ifdef __cplusplus
}
#endif
#endif
