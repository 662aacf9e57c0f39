/*
 * Quantized GEMM for the encoder's Linear layers (private to the library).
 *
 *   Y[m, n] = X[m, k] * W^T + bias        (W row-major [n, k], as PyTorch)
 *
 * Weights are quantized once (per output row, symmetric) and packed into the
 * micro-kernel's panel layout; activations are quantized per row (per token)
 * on every call, symmetric, into caller-provided scratch.  The integer dot
 * products are exact (int32 accumulators, flushed to fp32 every 256 k), so
 * the only error is the rounding of X and W to their integer grids.  The
 * kernel sets (AVX2, AVX-VNNI, AVX-512BW, AVX-512 VNNI, portable C; one is
 * picked per call, see donto_qgemm_isa) give bit-identical results.
 *
 * Scheme ("int16 path"; the reasons are measured in qgemm.c's header):
 *   activations: 13-bit symmetric per row, q = rint(x * 4095 / max|x_row|)
 *   weights:     12-bit symmetric per output row, q = rint(w * 2047 / max|w_row|)
 *   kernel:      AVX2 vpmaddwd (s16 x s16 -> pairwise s32) + vpaddd,
 *                6 rows x 16 columns of int32 accumulators; AVX-VNNI the
 *                same tile with vpdpwssd ymm; AVX-512BW vpmaddwd + vpaddd
 *                zmm and AVX-512 VNNI vpdpwssd zmm, 8 rows x 32 columns.
 * Per-GEMM relative error ~4e-4..1.7e-3 (real MiniLM activations /
 * synthetic data with outlier dims), vs 1e-2..5e-2 for the int8 u7 x s8
 * scheme; ~1.55x the single-thread throughput of OpenBLAS sgemm on Zen 3.
 *
 * Thread safety: donto_qgemm only reads W and writes Y and scratch; calls
 * with distinct Y/scratch may run concurrently.  Results are deterministic
 * and independent of the thread count (each output element is computed by
 * one thread with a fixed operation order).
 *
 * Inputs must be finite (a row of X containing Inf/NaN gives NaN or
 * meaningless outputs for that row; non-finite weights are rejected at init).
 */
#ifndef DONTO_QGEMM_H
#define DONTO_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "donto/encoder.h"
#include "donto/util.h"

/* Quantization grid limits (exposed for tests). */
#define DONTO_QGEMM_XMAX 4095 /* activations: [-4095, 4095] */
#define DONTO_QGEMM_WMAX 2047 /* weights:     [-2047, 2047] */
/* Micro-kernel geometry (of the ymm kernels) and the k-block after which
 * int32 accumulators are flushed to fp32.  Every kernel set sums at most
 * 256 products into one int32 lane between flushes (vpmaddwd + vpaddd and
 * vpdpwssd alike, ymm or zmm), and every partial sum is bounded by
 * 256 * 4095 * 2047 = 2,145,911,040 < 2^31, so no overflow is possible. */
#define DONTO_QGEMM_MR 6
#define DONTO_QGEMM_NR 16
#define DONTO_QGEMM_KBLOCK 256

typedef struct donto_qweight {
    int n, k;
    int kpairs;      /* ceil(k / 2): the kernel consumes k in pairs */
    int npanels;     /* ceil(n / 16) */
    int16_t *packed; /* [npanels][kpairs][16 cols][2], zero padded; 64-byte aligned */
    float *scale;    /* [npanels * 16] per output row dequant scale (0 in padding) */
} donto_qweight;

/* Quantize and pack W (row-major [n, k], finite).  Returns 0, or -1 with err
 * set (bad shape, non-finite weight, out of memory).  On failure *q is left
 * zeroed, so donto_qweight_free is always safe after init. */
int donto_qweight_init(donto_qweight *q, const float *W, int n, int k, donto_err *err);
void donto_qweight_free(donto_qweight *q);

/* Bytes of scratch donto_qgemm needs for an m x k input. */
size_t donto_qgemm_scratch_size(int m, int k);

/* Y[m, n] (leading dim ldy >= n) = X[m, k] (leading dim ldx >= k) * W^T + bias
 * (bias: n floats, or NULL).  k must equal W->k.  scratch: at least
 * donto_qgemm_scratch_size(m, k) bytes, any alignment.  nthreads <= 0: the
 * OpenMP default.  X and Y must not overlap.  m <= 0: nothing happens. */
void donto_qgemm(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias,
                 float *Y, int ldy, void *scratch, int nthreads);

/* donto_qgemm on kernel set isa (DONTO_ISA_AUTO: the best this CPU runs;
 * a set the CPU lacks, which callers should not ask for, runs the best one
 * instead, never an illegal instruction).  Every set gives the same bits. */
void donto_qgemm_isa(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias, float *Y,
                     int ldy, void *scratch, int nthreads, donto_isa isa);
/* The kernel donto_qgemm_isa runs for isa, for logs: "int16 vpmaddwd ymm 6x16". */
const char *donto_qgemm_kernel_name(donto_isa isa);

/* Building blocks, exposed for the tests and the benchmark. */
/* Quantize one row of k floats to the activation grid: writes kpad int16
 * values (zeros after k) and returns the dequant scale (max|x| / 4095, or 0
 * for an all-zero row). */
float donto_qgemm_quant_row(const float *x, int k, int16_t *q, int kpad);
/* The same on kernel set isa's loop (plain C, ymm or zmm): the same bits. */
float donto_qgemm_quant_row_isa(const float *x, int k, int16_t *q, int kpad, donto_isa isa);
/* The same computation on the portable C path (what donto_qgemm does on a
 * CPU without AVX2+FMA): results are bit-identical to donto_qgemm. */
void donto_qgemm_portable(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias,
                          float *Y, int ldy, void *scratch, int nthreads);
/* Quantized weight of row j, column c (unpacks one value; its scale is
 * q->scale[j]). */
int donto_qweight_get(const donto_qweight *q, int j, int c);

/* ---- int8 path (--precision int8) ---------------------------------------
 *
 *   Y[m, n] = X[m, k] * W^T + bias,   X split by input channel:
 *     ordinary channels: u8 activations x s8 weights, exact int32 sums
 *     outlier channels (a fixed list per weight, <= DONTO_QGEMM8_MAXOUT,
 *       chosen from calibration): fp32, added after the integer part
 *
 * Scheme (the measurements that chose it are in qgemm8.c's header):
 *   activations: asymmetric per row over the ordinary channels on a grid
 *                of XMAX + 1 levels, XMAX by kernel set (below),
 *                q = clamp(rint(x * XMAX / (hi - lo)) + zp, 0, XMAX),
 *                lo = min(0, min x), hi = max(0, max x), zp = rint(-lo * inv)
 *   weights:     symmetric per output row over the ordinary channels,
 *                q = rint(w * WMAX / max|w|), 0 in the outlier channels
 *   result:      y = float(acc - zp * colsum[j]) * (sx * sw[j]) + bias[j],
 *                then y = fma(x[o], w[j, o], y) for each outlier channel o
 *                in list order
 *   kernel:      AVX2 vpmaddubsw (u8 x s8 -> s16 pairs) + vpmaddwd(1) +
 *                vpaddd, 6 x 16 tile, on avx2 and avx512; AVX-VNNI
 *                vpdpbusd ymm 6 x 16; AVX-512 VNNI vpdpbusd zmm 8 x 32.
 * The grid: vpmaddubsw saturates its s16 pair sums, so 2 * XMAX * WMAX
 * must stay below 32768: u7 x s8 (XMAX 127; 2 * 127 * 127 = 32258)
 * measured better than u8 x s7 (2 * 255 * 64 = 32640) once the outlier
 * channels are out (min cosine 0.99834 vs 0.99802 on MiniLM,
 * docs/engine.md). vpdpbusd does not saturate, so the VNNI sets take the
 * full u8 grid (XMAX_VNNI 255), twice as fine: on MiniLM it lifts the min
 * cosine to fp32 from 0.99856 to 0.99927 on the tokenizer's edge cases
 * (docs/engine.md). The int32 sums are exact for k <= DONTO_QGEMM8_KMAX
 * (k * 255 * 127 * 2 < 2^31, with the zero-point term), so every kernel
 * set gives the bits of the portable path on the same grid. */
#ifndef DONTO_QGEMM8_XMAX /* overridable only for accuracy experiments */
#define DONTO_QGEMM8_XMAX 127
#define DONTO_QGEMM8_WMAX 127
#endif
#define DONTO_QGEMM8_XMAX_VNNI 255
#define DONTO_QGEMM8_MAXOUT 32
#define DONTO_QGEMM8_KMAX 32768

typedef struct donto_qweight8 {
    int n, k;
    int kquads;      /* ceil(k / 4) */
    int npanels;     /* ceil(n / 16) */
    int8_t *packed;  /* [npanels][kquads][16 cols][4], zero padded; 64-byte aligned */
    float *scale;    /* [npanels * 16] per output row dequant scale (0 in padding) */
    int32_t *colsum; /* [npanels * 16] sum of the row's quantized weights */
    float *keep;     /* [k] 1 for an ordinary channel, 0 for an outlier one */
    int nout;
    int *out_idx;    /* [nout] outlier input channels */
    float *out_w;    /* [nout][npanels * 16] their fp32 weights (0 in padding) */
    /* Finer weight scales (donto_qweight8_init_ex, group > 0): one per
     * output row and group of `group` input channels; the kernel flushes its
     * int32 sums to fp32 after every group. */
    int group;        /* 0: one scale per row (scale, colsum above) */
    float *gscale;    /* [ceil(k / group)][npanels * 16] dequant scale per row and group */
    float *gcorr;     /* [npanels * 16] the zero point's weight: sum over g of gcolsum * gscale */
} donto_qweight8;

/* Quantize and pack W (row-major [n, k], finite) with input channels
 * outliers[0..nout) (distinct, < k; nout <= DONTO_QGEMM8_MAXOUT) kept fp32.
 * Returns 0, or -1 with err set; on failure *q is zeroed. */
int donto_qweight8_init(donto_qweight8 *q, const float *W, int n, int k, const int *outliers, int nout,
                        donto_err *err);
/* The same, with weight scales per group of `group` input channels (0: per
 * row; else a multiple of 4, at most DONTO_QGEMM8_GMAX):
 *   w[j, c] = gscale[g][j] * q (g = c / group, |q| <= WMAX over the group's
 *   ordinary channels), gcolsum[g][j] = the group's sum of q,
 *   gcorr[j] = fma(gcolsum[g][j], gscale[g][j], ...) over g in order, from 0;
 * per output
 *   f = 0; for each group g in order: f = fma(float(acc_g), gscale[g][j], f)
 *   y = fma(fma(-zp, gcorr[j], f), sx, bias[j])
 * (float(acc_g) is exact: |acc_g| < 2^24), then the static outliers as in
 * the row scheme. */
#define DONTO_QGEMM8_GMAX 512 /* group * 255 * 127 < 2^24 */
int donto_qweight8_init_ex(donto_qweight8 *q, const float *W, int n, int k, const int *outliers, int nout,
                           int group, donto_err *err);
void donto_qweight8_free(donto_qweight8 *q);
size_t donto_qgemm8_scratch_size(int m, int k);
/* As donto_qgemm_isa, on the int8 path, with the activation grid of the
 * set (donto_qgemm8_xmax). */
void donto_qgemm8_isa(const float *X, int m, int k, int ldx, const donto_qweight8 *W, const float *bias, float *Y,
                      int ldy, void *scratch, int nthreads, donto_isa isa);
/* The activation grid the set runs: DONTO_QGEMM8_XMAX_VNNI on the VNNI
 * sets, DONTO_QGEMM8_XMAX on the others. */
int donto_qgemm8_xmax(donto_isa isa);
/* donto_qgemm8_isa on an explicit grid, xmax DONTO_QGEMM8_XMAX or
 * DONTO_QGEMM8_XMAX_VNNI: every set gives the portable path's bits on the
 * same grid. A set whose kernel cannot multiply that grid (vpmaddubsw,
 * past XMAX) runs the portable path. For tests and benchmarks. */
void donto_qgemm8_grid(const float *X, int m, int k, int ldx, const donto_qweight8 *W, const float *bias, float *Y,
                       int ldy, void *scratch, int nthreads, donto_isa isa, int xmax);
/* "int8 u7 vpmaddubsw ymm 6x16" etc. (the grid, then the kernel) */
const char *donto_qgemm8_kernel_name(donto_isa isa);
/* The same for weights with scale groups (on the VNNI zmm sets a 6 x 32
 * tile that flushes its groups in registers). */
const char *donto_qgemm8_group_kernel_name(donto_isa isa);
/* Quantized weight of row j, column c. */
int donto_qweight8_get(const donto_qweight8 *q, int j, int c);

#endif
