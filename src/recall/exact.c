/* Exact top-k by dot product. See include/donto/recall.h. */
#include "donto/recall.h"

#include <cblas.h>
#include <stdlib.h>

/* Min-heap on score: the root is the weakest of the current top k, so a
 * candidate only has to beat the root to get in. Ties break on the lower
 * index so results are deterministic. */
static int worse(const donto_hit *a, const donto_hit *b) {
    return a->score < b->score || (a->score == b->score && a->index > b->index);
}

static void sift_down(donto_hit *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m])) m = l;
        if (r < n && worse(&h[r], &h[m])) m = r;
        if (m == i) return;
        donto_hit t = h[i];
        h[i] = h[m], h[m] = t, i = m;
    }
}

static int cmp_best_first(const void *a, const void *b) {
    const donto_hit *x = a, *y = b;
    return worse(x, y) ? 1 : worse(y, x) ? -1 : 0;
}

size_t donto_exact_topk(const float *vecs, size_t n, int dim, const float *q, size_t k,
                        donto_hit *out) {
    if (k > n) k = n;
    if (k == 0) return 0;
    enum { BLOCK = 4096 };
    float *s = malloc(BLOCK * sizeof *s);
    if (!s) return 0;
    size_t have = 0;
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = n - b < BLOCK ? n - b : BLOCK;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, dim, 1.0f, vecs + b * (size_t)dim, dim, q, 1,
                    0.0f, s, 1);
        for (size_t i = 0; i < m; i++) {
            donto_hit c = {b + i, s[i]};
            if (have < k) {
                out[have++] = c;
                if (have == k)
                    for (size_t j = k / 2 + 1; j-- > 0;) sift_down(out, k, j);
            } else if (worse(&out[0], &c)) {
                out[0] = c;
                sift_down(out, k, 0);
            }
        }
    }
    free(s);
    qsort(out, have, sizeof *out, cmp_best_first);
    return have;
}
