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

#ifdef __cplusplus
}
#endif
#endif
