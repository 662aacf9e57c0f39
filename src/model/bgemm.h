/*
 * bf16 GEMM with the weights packed once (private to the model library):
 * the --precision bf16 path's native kernel on AVX-512 BF16 (vdpbf16ps).
 *
 *   Y[m, n] = bf16(X)[m, k] * bf16(W)^T + bias     (W row-major [n, k], as PyTorch)
 *
 * Arithmetic (every kernel set, the same bits; it is what vdpbf16ps does,
 * checked against the instruction on 3.2M random pairs, any exponent):
 *  - bf16(v): v rounded to bfloat16, nearest with ties to even, a subnormal
 *    v read as zero of its sign, a NaN made quiet (donto_bf16_from_f32;
 *    vcvtne2ps2bf16 does the same);
 *  - k is taken in pairs (2t, 2t+1), an odd k padded with a zero pair half;
 *  - each output starts from bias[j] (or +0), a subnormal one read as zero,
 *    and for t = 0 .. ceil(k/2)-1 in order:
 *        y = ftz(fma(x[2t+1], w[2t+1], y));  y = ftz(fma(x[2t], w[2t], y))
 *    (the odd element first, one rounding per product: a product of two
 *    bf16 values is exact in fp32; ftz: a subnormal result becomes zero).
 *
 * Thread safety: donto_bgemm_isa reads X and W, writes Y and its scratch;
 * calls with distinct Y and scratch may run concurrently. It runs on the
 * calling thread only.
 */
#ifndef DONTO_BGEMM_H
#define DONTO_BGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "donto/encoder.h"
#include "donto/util.h"

#define DONTO_BGEMM_NR 16 /* output columns per packed panel */

typedef struct donto_bweight {
    int n, k;
    int kpairs;      /* ceil(k / 2) */
    int npanels;     /* ceil(n / 16) */
    uint32_t *packed; /* [npanels][kpairs][16]: w[j][2t] in the low half, w[j][2t+1] in the high, as
                       * bf16; zero padded past n and k; 64-byte aligned */
} donto_bweight;

/* Round and pack W (row-major [n, k]). Returns 0, or -1 with err set (bad
 * shape, out of memory); on failure *w is zeroed, so donto_bweight_free is
 * safe. */
int donto_bweight_init(donto_bweight *w, const float *W, int n, int k, donto_err *err);
void donto_bweight_free(donto_bweight *w);

/* Scratch bytes donto_bgemm_isa needs for m rows of k (X in bf16). */
size_t donto_bgemm_scratch(int m, int k);

/* Y[m, n] (leading dim ldy >= n) = bf16(X)[m, k] (leading dim ldx >= k) *
 * bf16(W)^T + bias (n floats, or NULL), on kernel set isa (DONTO_ISA_AUTO:
 * the best this CPU runs; the vdpbf16ps kernel where the set is
 * avx512bf16, the same arithmetic in plain C on every other set).
 * scratch: donto_bgemm_scratch(m, W->k) bytes. X and Y must not overlap;
 * m <= 0 does nothing. */
void donto_bgemm_isa(const float *X, int m, int ldx, const donto_bweight *W, const float *bias, float *Y, int ldy,
                     void *scratch, donto_isa isa);
/* 1 where isa (resolved, runnable here) has the native kernel. The plain C
 * path is a reference, far slower than fp32: the encoder uses this GEMM
 * only where this is 1. */
int donto_bgemm_native(donto_isa isa);
/* "bf16 vdpbf16ps zmm 8x32" or "bf16 plain C", for logs. */
const char *donto_bgemm_kernel_name(donto_isa isa);

/* Whether the kernel pays here: the time of one vdpbf16ps zmm over that of
 * one vfmadd231ps zmm, measured once per process on this core (16
 * independent accumulators each, best of 5 runs of 32K instructions, about
 * a millisecond in all). A vdpbf16ps does two multiply-adds per lane to the
 * FMA's one, so below 2 the kernel beats the fp32 one per flop. Measured
 * 4.2 on an Intel Xeon of family 6 model 207 (Emerald Rapids, no AMX in
 * the VM): there the fp32 kernel is faster. 0 where no set here runs it. */
double donto_bgemm_probe(void);

/* The bf16 rounding above, as bits; and back (exact). */
uint16_t donto_bf16_from_f32(float v);
float donto_bf16_to_f32(uint16_t h);

#endif
