/*
 * fp32 GEMM with the weights packed once (private to the model library).
 *
 *   Y[m, n] = X[m, k] * W^T + bias        (W row-major [n, k], as PyTorch)
 *
 * Why not OpenBLAS for the encoder's Linear layers on AVX2: cblas_sgemm packs
 * W (and X) on every call and needs Y seeded with the bias first; in the fp32
 * forward on the 2-core Zen 3 that was sgemm_oncopy 3.3%, sgemm_incopy 1.2%
 * and the bias memcpy 2.6% of all samples (perf, 2,000 claims, 2026-12-05).
 * The weights never change, so they are packed here once, at open, into
 * panels of 16 output columns; the bias is the accumulators' start value.
 * The measurements that chose this are in fgemm.c's header.
 *
 * Arithmetic (every kernel set, the same bits): each output element is
 *   y = bias[j] (or 0);  for c = 0 .. k-1:  y = fma(x[c], w[j, c], y)
 * in that order, one fma per product, whatever the blocking, the row count
 * or the thread that computes it.
 *
 * Thread safety: donto_fgemm_isa only reads X and W and writes Y; calls with
 * distinct Y may run concurrently.  It runs on the calling thread only.
 */
#ifndef DONTO_FGEMM_H
#define DONTO_FGEMM_H

#include "donto/encoder.h"
#include "donto/util.h"

#define DONTO_FGEMM_NR 16 /* output columns per packed panel */

typedef struct donto_fweight {
    int n, k;
    int npanels;   /* ceil(n / 16) */
    float *packed; /* [npanels][k][16], zero padded; 64-byte aligned */
} donto_fweight;

/* Pack W (row-major [n, k]).  Returns 0, or -1 with err set (bad shape, out
 * of memory); on failure *w is zeroed, so donto_fweight_free is safe. */
int donto_fweight_init(donto_fweight *w, const float *W, int n, int k, donto_err *err);
void donto_fweight_free(donto_fweight *w);

/* Y[m, n] (leading dim ldy >= n) = X[m, k] (leading dim ldx >= k) * W^T +
 * bias (n floats, or NULL), on kernel set isa (DONTO_ISA_AUTO: the best this
 * CPU runs; a set the CPU lacks runs the best one it has).  X and Y must not
 * overlap; m <= 0 does nothing. */
void donto_fgemm_isa(const float *X, int m, int ldx, const donto_fweight *W, const float *bias, float *Y, int ldy,
                     donto_isa isa);
/* 1 where the encoder should use this GEMM for its fp32 Linear layers:
 * every SIMD set (ymm kernel on avx2/avxvnni, zmm on the AVX-512 sets; both
 * faster than OpenBLAS in the forward, fgemm.c's header).  0 on portable
 * (plain C, far slower than OpenBLAS). */
int donto_fgemm_preferred(donto_isa isa);
/* The kernel donto_fgemm_isa runs for isa, for logs: "fp32 fma ymm 6x16",
 * "fp32 fma zmm 8x32". */
const char *donto_fgemm_kernel_name(donto_isa isa);

#endif
