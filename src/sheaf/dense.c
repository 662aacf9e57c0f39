/*
 * Building blocks of the sheaf ops: dense products, linear layers, dropout.
 *
 * Every product goes through sheaf_sgemm, which keeps OpenBLAS at one thread and
 * splits the product over the OpenMP team along M or N (never K), so each element
 * of C is one BLAS dot product whatever the thread count. Shapes are row-major.
 */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "sheaf_int.h"


/* OpenBLAS (Debian's pthread build) runs its own thread pool beside OpenMP's:
 * on a small machine the two pools spin against each other between calls
 * (chameleon epochs varied 0.13-0.32 s with the wait policy alone). So the
 * forward and backward passes hold OpenBLAS at one thread
 * (sheaf_blas_single_begin/end) and split each product over the OpenMP team here,
 * along M or N, never K: every element of C is still one BLAS dot product
 * in BLAS's own order, so results do not depend on the thread count. */
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

/* The OpenBLAS thread count is process-wide, so concurrent passes (donto_sheaf_op_infer from
 * several threads) share one hold: a count of holders under a lock; the first saves and sets one
 * thread, the last restores. (A save/restore per pass would let one pass restore the pool under
 * another, and leave the process at one thread when two overlapped.) */
static pthread_mutex_t blas_hold_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_holders, blas_saved;

int sheaf_blas_single_begin(void) {
    pthread_mutex_lock(&blas_hold_mu);
    if (blas_holders++ == 0) {
        blas_saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&blas_hold_mu);
    return 0;
}
void sheaf_blas_single_end(int saved) {
    (void)saved;
    pthread_mutex_lock(&blas_hold_mu);
    if (--blas_holders == 0) openblas_set_num_threads(blas_saved);
    pthread_mutex_unlock(&blas_hold_mu);
}

/* Row-major C[M][N] = alpha op(A)[M][K] op(B)[K][N] + beta C (trans_*: CblasTrans or CblasNoTrans). */
void sheaf_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    enum CBLAS_TRANSPOSE ta = trans_a == CblasTrans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b == CblasTrans ? CblasTrans : CblasNoTrans;
    int nt = omp_get_max_threads();
    int by_m = M >= N, len = by_m ? M : N;
    if (nt < 2 || len < 64) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int lo = (int)((long long)len * t / T), hi = (int)((long long)len * (t + 1) / T);
        if (hi > lo) {
            if (by_m) /* rows lo..hi of op(A) and of C */
                cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, alpha,
                            A + (ta == CblasNoTrans ? (size_t)lo * lda : (size_t)lo), lda, B, ldb, beta,
                            C + (size_t)lo * ldc, ldc);
            else /* columns lo..hi of op(B) and of C */
                cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, alpha, A, lda,
                            B + (tb == CblasNoTrans ? (size_t)lo : (size_t)lo * ldb), ldb, beta, C + lo, ldc);
        }
    }
}

/* Y[n][out] = X[n][in] W[out][in]^T (+ b) */
void sheaf_linear_forward(float *Y, const float *X, const float *W, const float *b, int n, int in, int out) {
    if (n == 0 || out == 0) return;
    if (in == 0) {
        memset(Y, 0, sizeof(float) * (size_t)n * out);
    } else {
        sheaf_sgemm(CblasNoTrans, CblasTrans, n, out, in, 1.0f, X, in, W, in, 0.0f, Y, out);
    }
    if (b) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < n; r++)
            for (int j = 0; j < out; j++) Y[(size_t)r * out + j] += b[j];
    }
}

/* dW[out][in] += dY^T X ; db[out] += colsum(dY) ; dX[n][in] = dY W (if dX) */
void sheaf_linear_backward(float *dX, float *dW, float *db, const float *dY, const float *X, const float *W,
                           int n, int in, int out) {
    if (n == 0 || out == 0 || in == 0) {
        if (dX && in) memset(dX, 0, sizeof(float) * (size_t)n * in);
    } else {
        sheaf_sgemm(CblasTrans, CblasNoTrans, out, in, n, 1.0f, dY, out, X, in, 1.0f, dW, in);
        if (dX) sheaf_sgemm(CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dY, out, W, in, 0.0f, dX, in);
    }
    if (db) {
#pragma omp parallel for schedule(static)
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int r = 0; r < n; r++) s += dY[(size_t)r * out + j];
            db[j] += (float)s;
        }
    }
}

/* out = dropout(in) with a mask from (key); mask[i] = 1 kept. p = 0: plain copy, no mask. */
void sheaf_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t key) {
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint8_t k = sheaf_urand(key, i) >= p;
        mask[i] = k;
        out[i] = k ? in[i] * scale : 0.0f;
    }
}
/* din = mask * dout / (1-p) (accumulate when acc) */
void sheaf_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p, int acc) {
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = mask[i] ? dout[i] * scale : 0.0f;
        din[i] = acc ? din[i] + v : v;
    }
}

void sheaf_relu_dropout_forward(const donto_sheaf_model *m, const float *a, float *h, uint8_t *mask, size_t cnt,
                                uint64_t site) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < cnt; i++) h[i] = a[i] > 0 ? a[i] : 0;
    if (m->training && m->hp.dropout > 0)
        sheaf_dropout_forward(h, mask, h, cnt, m->hp.dropout, site_key(m->hp.seed, m->step, site));
}

void sheaf_relu_dropout_backward(const donto_sheaf_model *m, const float *a, const float *dh, const uint8_t *mask,
                                 float *da, size_t cnt) {
    const int drop = m->training && m->hp.dropout > 0;
    const float scale = drop ? 1.0f / (1.0f - m->hp.dropout) : 1.0f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < cnt; i++) {
        float gv = dh[i];
        if (drop) gv = mask[i] ? gv * scale : 0.0f;
        da[i] = a[i] > 0 ? gv : 0.0f;
    }
}
