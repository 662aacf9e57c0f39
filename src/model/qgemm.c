/*
 * Quantized GEMM, AVX2 (see qgemm.h for the contract).
 *
 * Why 13-bit activations x 12-bit weights on vpmaddwd, and not int8
 * -----------------------------------------------------------------
 * Measured on this project's target (AMD EPYC Zen 3, AVX2+FMA, no VNNI):
 *
 *  - Throughput.  Instruction microbenchmarks (ops per cycle at ~3 GHz):
 *    vfmadd231ps ~1.9 (46 GMAC/s/core fp32); vpmaddwd alone ~1.9 but
 *    vpmaddwd+vpaddd only ~1.5 pairs (~75 GMAC/s: the adds compete for the
 *    multiply pipes); vpmaddubsw+vpmaddwd(ones)+vpaddd ~1 group (96
 *    GMAC/s).  Register-blocked kernels with data in L1: int16 6x16 75-79
 *    GMAC/s (4x24, 3x32, 2x48 and dot-product 3x4/4x3 layouts measured no
 *    better: the madd+add pair is the limit, not loads or broadcasts);
 *    int8 u8 x s8 ~90 GMAC/s.  OpenBLAS 0.3.21 sgemm: 75-85 GFLOP/s
 *    (38-42 GMAC/s).  Whole GEMM here: 120-132 GOP/s single-threaded,
 *    ~1.55x sgemm on the encoder shapes (bench/qgemm.c); int8 would be
 *    ~1.25x faster still, i.e. ~1.9-2x sgemm.
 *
 *  - Accuracy.  The int8 scheme (activations u7 asymmetric per row, because
 *    u8 x s8 pairs saturate vpmaddubsw's int16; weights s8 per output row)
 *    was simulated on the real all-MiniLM-L6-v2 weights with every Linear
 *    quantized: sentence-embedding cosine vs fp32 min 0.97-0.99 / mean
 *    ~0.995 over two sentence sets (even u8-asym x s8, which the hardware
 *    cannot do without saturation, only reaches min 0.991-0.995).  BERT's LayerNorm outputs have a few outlier
 *    dims ~10-20x the rest, so a per-row 8-bit grid leaves the ordinary dims
 *    with only a handful of levels; and the FFN-output weights alone lose
 *    0.2-0.4% cosine at 8 bits.  Bits needed for >= 0.9999 on L6 (and so
 *    margin for 12 layers): ~12-13 on activations, ~11-12 on weights.
 *    This scheme (13/12 bits) simulates to min 0.99997 / mean 0.99999.
 *
 *  - vpmaddwd multiplies s16 x s16 exactly into s32 pairs; with |x| <= 4095
 *    and |w| <= 2047 a block of 256 k values sums to at most
 *    256 * 4095 * 2047 = 2,145,911,040 < 2^31, so the int32 accumulators
 *    are exact if flushed to fp32 every 256 k (DONTO_QGEMM_KBLOCK); the flush
 *    costs ~1% (one cvtdq2ps + add per accumulator per block).
 *
 *  - Symmetric quantization (no zero points) because vpmaddwd is signed x
 *    signed: no compensation terms.  Skewed post-GELU rows waste ~1 bit of
 *    the 13, which the accuracy budget absorbs.
 *
 * Layout and blocking
 * -------------------
 *  - W packed at init into panels of 16 output columns: for each pair of k
 *    values, 16 columns x 2 int16 = 64 bytes (two ymm: columns 0-7, 8-15),
 *    so vpmaddwd(broadcast(x[k], x[k+1]), panel) gives 8 columns' partial
 *    dot products.  k is padded to even, n to a multiple of 16, with zeros.
 *  - X quantized per call into scratch, row-major int16, rows padded to a
 *    multiple of 32 elements.
 *  - Micro-kernel: 6 rows x 16 columns = 12 ymm int32 accumulators, 2 ymm
 *    of weights, 1 broadcast: 2 loads + 6 broadcasts per 12 vpmaddwd, in
 *    inline assembly (see qg_block6_asm).  Rows < 6 at the bottom use the
 *    same loop written with intrinsics, instantiated for 1..5 rows;
 *    columns < 16 on the right are computed on the zero padding and not
 *    stored.  No scalar tail code is needed.
 *  - Per task: for each 16-column panel, k blocks outer and micro-tiles
 *    inner (the panel's 8 KB k-slice stays in L1); the Y lines of the panel
 *    are prefetched before the k loop (without it the epilogue's store
 *    misses cost ~10%).
 *  - Epilogue: y = float(acc) * (sx[row] * sw[col]) + bias[col], one FMA.
 *  - Threads: one parallel region; first every row of X is quantized
 *    (omp for over rows), then tiles of 24 rows x 128 columns are handed
 *    out dynamically.  Each output element is computed by one thread with
 *    the same operation order whatever the thread count, so results are
 *    bit-identical for any nthreads.
 *
 * Portability: the AVX2 code is compiled with target attributes and chosen
 * at run time (__builtin_cpu_supports), so builds without -march=native
 * (DONTO_NATIVE=OFF) still get it; elsewhere a portable C path with the
 * same arithmetic (bit-identical results; ~10x slower when the compiler
 * vectorizes it, ~35x on baseline x86-64) is used.
 */
#include "qgemm.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define QG_X86 1
#include <immintrin.h>
#define QG_AVX2 __attribute__((target("avx2,fma")))
#endif

#define QG_MR DONTO_QGEMM_MR
#define QG_NR DONTO_QGEMM_NR
#define QG_KCP (DONTO_QGEMM_KBLOCK / 2) /* k pairs per exact int32 block */
#ifndef QG_MT
#define QG_MT 24 /* rows per task (multiple of QG_MR) */
#endif
#if QG_MT % DONTO_QGEMM_MR
#error "QG_MT must be a multiple of DONTO_QGEMM_MR"
#endif
#ifndef QG_NTP
#define QG_NTP 8 /* 16-column panels per task */
#endif
/* Rows whose max |x| is below this are treated as zero: 4095 / amax would
 * overflow float for amax < ~1.2e-35, and such rows contribute nothing. */
#define QG_TINY 1e-30f

static int qg_have_avx2(void) {
#ifdef QG_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Row stride (int16 elements) of quantized activations in scratch. */
static size_t qg_lda(int k) {
    size_t kp = ((size_t)k + 1) & ~(size_t)1;
    return (kp + 31) & ~(size_t)31;
}

size_t donto_qgemm_scratch_size(int m, int k) {
    if (m <= 0 || k <= 0) return 64;
    return 64 + (size_t)m * qg_lda(k) * sizeof(int16_t) + (((size_t)m * sizeof(float) + 63) & ~(size_t)63);
}

/* ---- quantization (shared formulas) ---------------------------------- */

static float qg_absmax_scalar(const float *x, int k) {
    float amax = 0.0f;
    for (int c = 0; c < k; c++) {
        float a = fabsf(x[c]);
        if (a > amax) amax = a;
    }
    return amax;
}

/* Round-to-nearest-even (the default fenv mode, as cvtps2dq) and clamp. */
static inline int16_t qg_round_clamp(float v, int lim) {
    long r = lrintf(v);
    if (r > lim) r = lim;
    if (r < -lim) r = -lim;
    return (int16_t)r;
}

/* inv (multiplier onto the grid) and the dequant scale for a given max |x|. */
static inline float qg_scales(float amax, int lim, float *inv) {
    if (!(amax >= QG_TINY)) {
        *inv = 0.0f;
        return 0.0f;
    }
    *inv = (float)lim / amax;
    return amax / (float)lim;
}

static float qg_quant_row_scalar(const float *x, int k, int16_t *q, int kpad) {
    float inv, scale = qg_scales(qg_absmax_scalar(x, k), DONTO_QGEMM_XMAX, &inv);
    int c = 0;
    for (; c < k; c++) q[c] = qg_round_clamp(x[c] * inv, DONTO_QGEMM_XMAX);
    for (; c < kpad; c++) q[c] = 0;
    return scale;
}

#ifdef QG_X86
QG_AVX2 static inline float qg_hmax(__m256 v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

QG_AVX2 static float qg_quant_row_avx2(const float *x, int k, int16_t *q, int kpad) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= k; c += 16) {
        m0 = _mm256_max_ps(m0, _mm256_and_ps(_mm256_loadu_ps(x + c), absmask));
        m1 = _mm256_max_ps(m1, _mm256_and_ps(_mm256_loadu_ps(x + c + 8), absmask));
    }
    float amax = qg_hmax(_mm256_max_ps(m0, m1));
    for (; c < k; c++) {
        float a = fabsf(x[c]);
        if (a > amax) amax = a;
    }
    float inv, scale = qg_scales(amax, DONTO_QGEMM_XMAX, &inv);
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-DONTO_QGEMM_XMAX), hi = _mm256_set1_epi32(DONTO_QGEMM_XMAX);
    for (c = 0; c + 16 <= k; c += 16) {
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c), vinv));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8), vinv));
        i0 = _mm256_min_epi32(_mm256_max_epi32(i0, lo), hi);
        i1 = _mm256_min_epi32(_mm256_max_epi32(i1, lo), hi);
        /* packs works per 128-bit lane: [a0-3 b0-3 a4-7 b4-7] -> reorder. */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8);
        _mm256_storeu_si256((__m256i *)(q + c), p);
    }
    for (; c < k; c++) q[c] = qg_round_clamp(x[c] * inv, DONTO_QGEMM_XMAX);
    for (; c < kpad; c++) q[c] = 0;
    return scale;
}
#endif

static float qg_quant_row(const float *x, int k, int16_t *q, int kpad, int avx2) {
#ifdef QG_X86
    if (avx2) return qg_quant_row_avx2(x, k, q, kpad);
#endif
    (void)avx2;
    return qg_quant_row_scalar(x, k, q, kpad);
}

float donto_qgemm_quant_row(const float *x, int k, int16_t *q, int kpad) {
    return qg_quant_row(x, k, q, kpad, qg_have_avx2());
}

/* ---- weights --------------------------------------------------------- */

static inline size_t qg_widx(int kpairs, int j, int c) {
    return ((size_t)(j / QG_NR) * kpairs + (size_t)(c / 2)) * 2 * QG_NR + (size_t)(j % QG_NR) * 2 + (c & 1);
}

int donto_qweight_init(donto_qweight *q, const float *W, int n, int k, donto_err *err) {
    memset(q, 0, sizeof *q);
    if (n <= 0 || k <= 0) return donto_seterr(err, "qweight: bad shape [%d, %d]", n, k);
    if (!W) return donto_seterr(err, "qweight: no weights for shape [%d, %d]", n, k);
    const int kpairs = (int)(((long)k + 1) / 2);
    const int npanels = (int)(((long)n + QG_NR - 1) / QG_NR);
    const size_t nval = (size_t)npanels * (size_t)kpairs * 2 * QG_NR;
    int16_t *packed = donto_aligned_alloc(nval * sizeof(int16_t));
    float *scale = donto_aligned_alloc((size_t)npanels * QG_NR * sizeof(float));
    if (!packed || !scale) {
        free(packed);
        free(scale);
        return donto_seterr(err, "qweight: out of memory packing [%d, %d]", n, k);
    }
    memset(packed, 0, nval * sizeof(int16_t));
    memset(scale, 0, (size_t)npanels * QG_NR * sizeof(float));
    for (int j = 0; j < n; j++) {
        const float *row = W + (size_t)j * (size_t)k;
        for (int c = 0; c < k; c++) {
            if (!isfinite(row[c])) {
                free(packed);
                free(scale);
                return donto_seterr(err, "qweight: weight [%d, %d] is not finite (%g)", j, c, (double)row[c]);
            }
        }
        float inv;
        scale[j] = qg_scales(qg_absmax_scalar(row, k), DONTO_QGEMM_WMAX, &inv);
        for (int c = 0; c < k; c++) packed[qg_widx(kpairs, j, c)] = qg_round_clamp(row[c] * inv, DONTO_QGEMM_WMAX);
    }
    q->n = n;
    q->k = k;
    q->kpairs = kpairs;
    q->npanels = npanels;
    q->packed = packed;
    q->scale = scale;
    return 0;
}

void donto_qweight_free(donto_qweight *q) {
    if (!q) return;
    free(q->packed);
    free(q->scale);
    memset(q, 0, sizeof *q);
}

int donto_qweight_get(const donto_qweight *q, int j, int c) { return q->packed[qg_widx(q->kpairs, j, c)]; }

/* ---- portable path: the arithmetic, spelled out ------------------------ */

/* Y[i, j] = fma(sum over 256-k blocks b of float(exact int32 dot_b),
 *               sx[i] * sw[j], bias[j] or 0)
 * One row against one 16-column panel at a time (the inner loop over the
 * panel's columns is contiguous, so compilers vectorize it). */
static void qg_tile_portable(const int16_t *A, size_t lda, const float *sx, const donto_qweight *W,
                             const float *bias, float *Y, size_t ldy, int i0, int i1) {
    const int kpairs = W->kpairs;
    for (int i = i0; i < i1; i++) {
        const int16_t *a = A + (size_t)i * lda;
        for (int p = 0; p < W->npanels; p++) {
            const int16_t *bp = W->packed + (size_t)p * kpairs * 2 * QG_NR;
            float facc[QG_NR] = {0};
            for (int p0 = 0; p0 < kpairs; p0 += QG_KCP) {
                int32_t s[QG_NR] = {0};
                for (int t = p0; t < kpairs && t < p0 + QG_KCP; t++) {
                    const int32_t x0 = a[2 * t], x1 = a[2 * t + 1];
                    const int16_t *b = bp + (size_t)t * 2 * QG_NR;
                    for (int c = 0; c < QG_NR; c++) s[c] += x0 * b[2 * c] + x1 * b[2 * c + 1];
                }
                for (int c = 0; c < QG_NR; c++) facc[c] += (float)s[c];
            }
            const int j0 = p * QG_NR, nc = W->n - j0 < QG_NR ? W->n - j0 : QG_NR;
            for (int c = 0; c < nc; c++)
                Y[(size_t)i * ldy + j0 + c] = fmaf(facc[c], sx[i] * W->scale[j0 + c], bias ? bias[j0 + c] : 0.0f);
        }
    }
}

/* ---- AVX2 micro-kernels --------------------------------------------------- */
#ifdef QG_X86
QG_AVX2 static inline __m256i qg_bcast_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* One exact int32 block: MR rows x 16 columns over pairs [0, npairs) of the
 * panel, added (as fp32) into facc.  Used for MR < 6 (the bottom rows). */
QG_AVX2 static inline __attribute__((always_inline)) void qg_block(const int MR, const int16_t *a, size_t lda,
                                                                   const int16_t *bp, int npairs, int first,
                                                                   float facc[QG_MR][QG_NR]) {
    __m256i c[QG_MR][2];
    const int16_t *ar[QG_MR];
    for (int i = 0; i < MR; i++) {
        c[i][0] = c[i][1] = _mm256_setzero_si256();
        ar[i] = a + (size_t)i * lda;
    }
    for (int p = 0; p < npairs; p++, bp += 2 * QG_NR) {
        const __m256i w0 = _mm256_load_si256((const __m256i *)bp);
        const __m256i w1 = _mm256_load_si256((const __m256i *)(bp + 16));
        for (int i = 0; i < MR; i++) {
            const __m256i x = qg_bcast_pair(ar[i] + 2 * p);
            c[i][0] = _mm256_add_epi32(c[i][0], _mm256_madd_epi16(x, w0));
            c[i][1] = _mm256_add_epi32(c[i][1], _mm256_madd_epi16(x, w1));
        }
    }
    for (int i = 0; i < MR; i++) {
        __m256 f0 = _mm256_cvtepi32_ps(c[i][0]), f1 = _mm256_cvtepi32_ps(c[i][1]);
        if (!first) {
            f0 = _mm256_add_ps(_mm256_load_ps(facc[i]), f0);
            f1 = _mm256_add_ps(_mm256_load_ps(facc[i] + 8), f1);
        }
        _mm256_store_ps(facc[i], f0);
        _mm256_store_ps(facc[i] + 8, f1);
    }
}

/* The 6-row block in assembly: with intrinsics GCC 12 hoists the six
 * broadcasts ahead of the multiplies and then spills half the accumulators
 * (measured: 35 instead of 70 GMAC/s).  Register use: ymm0-11 accumulators
 * (row r, columns 0-7 / 8-15 in ymm 2r / 2r+1), ymm12-13 the weight pair
 * vectors, ymm14 the broadcast (x[k], x[k+1]) of one row, ymm15 a product.
 * Rows 0-2 are addressed from pa, rows 3-5 from pb = pa + 3 * stride. */
#define QG_ROW(base, idx, r0, r1)                                                    \
    "vpbroadcastd " base idx ", %%ymm14\n\t"                                          \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                          \
    "vpaddd %%ymm15, %%ymm" #r0 ", %%ymm" #r0 "\n\t"                                  \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n\t"                                          \
    "vpaddd %%ymm14, %%ymm" #r1 ", %%ymm" #r1 "\n\t"
#define QG_ACC_ADD(r, off)                                                           \
    "vcvtdq2ps %%ymm" #r ", %%ymm" #r "\n\t"                                          \
    "vaddps " #off "(%[f]), %%ymm" #r ", %%ymm" #r "\n\t"                             \
    "vmovups %%ymm" #r ", " #off "(%[f])\n\t"
#define QG_ACC_SET(r, off)                                                           \
    "vcvtdq2ps %%ymm" #r ", %%ymm" #r "\n\t"                                          \
    "vmovups %%ymm" #r ", " #off "(%[f])\n\t"
#define QG_ACC_ALL(OP)                                                               \
    OP(0, 0) OP(1, 32) OP(2, 64) OP(3, 96) OP(4, 128) OP(5, 160) OP(6, 192) OP(7, 224) \
    OP(8, 256) OP(9, 288) OP(10, 320) OP(11, 352)
/* first != 0: facc = float(block), else facc += float(block). */
QG_AVX2 static void qg_block6_asm(const int16_t *a, size_t lda, const int16_t *bp, int npairs, int first,
                                  float facc[QG_MR][QG_NR]) {
    const char *pa = (const char *)a;
    const size_t stride = lda * sizeof(int16_t);
    const char *pb = pa + 3 * stride;
    long n = npairs;
    long set = first;
    __asm__ volatile(
        "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"
        "vpxor %%xmm1, %%xmm1, %%xmm1\n\t"
        "vpxor %%xmm2, %%xmm2, %%xmm2\n\t"
        "vpxor %%xmm3, %%xmm3, %%xmm3\n\t"
        "vpxor %%xmm4, %%xmm4, %%xmm4\n\t"
        "vpxor %%xmm5, %%xmm5, %%xmm5\n\t"
        "vpxor %%xmm6, %%xmm6, %%xmm6\n\t"
        "vpxor %%xmm7, %%xmm7, %%xmm7\n\t"
        "vpxor %%xmm8, %%xmm8, %%xmm8\n\t"
        "vpxor %%xmm9, %%xmm9, %%xmm9\n\t"
        "vpxor %%xmm10, %%xmm10, %%xmm10\n\t"
        "vpxor %%xmm11, %%xmm11, %%xmm11\n\t"
        "1:\n\t"
        "vmovdqa (%[b]), %%ymm12\n\t"
        "vmovdqa 32(%[b]), %%ymm13\n\t"
        QG_ROW("(%[pa])", "", 0, 1)
        QG_ROW("(%[pa],", "%[s],1)", 2, 3)
        QG_ROW("(%[pa],", "%[s],2)", 4, 5)
        QG_ROW("(%[pb])", "", 6, 7)
        QG_ROW("(%[pb],", "%[s],1)", 8, 9)
        QG_ROW("(%[pb],", "%[s],2)", 10, 11)
        "add $4, %[pa]\n\t"
        "add $4, %[pb]\n\t"
        "add $64, %[b]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        "test %[set], %[set]\n\t"
        "jz 2f\n\t"
        QG_ACC_ALL(QG_ACC_SET)
        "jmp 3f\n\t"
        "2:\n\t"
        QG_ACC_ALL(QG_ACC_ADD)
        "3:\n\t"
        : [pa] "+r"(pa), [pb] "+r"(pb), [b] "+r"(bp), [n] "+r"(n)
        : [s] "r"(stride), [f] "r"(&facc[0][0]), [set] "r"(set)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

/* Epilogue of one micro-tile: Y = facc * (sx[row] * sw[col]) + bias[col],
 * storing ncols <= 16 columns. */
QG_AVX2 static inline __attribute__((always_inline)) void qg_store(const int MR, float facc[QG_MR][QG_NR],
                                                                   const float *sx, const float *sw,
                                                                   const float *bias, int ncols, float *y,
                                                                   size_t ldy) {
    const __m256 sw0 = _mm256_load_ps(sw), sw1 = _mm256_load_ps(sw + 8);
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    if (bias) {
        if (ncols == QG_NR) {
            b0 = _mm256_loadu_ps(bias);
            b1 = _mm256_loadu_ps(bias + 8);
        } else {
            float tb[QG_NR] = {0};
            memcpy(tb, bias, (size_t)ncols * sizeof(float));
            b0 = _mm256_loadu_ps(tb);
            b1 = _mm256_loadu_ps(tb + 8);
        }
    }
    for (int i = 0; i < MR; i++) {
        const __m256 s = _mm256_set1_ps(sx[i]);
        const __m256 y0 = _mm256_fmadd_ps(_mm256_load_ps(facc[i]), _mm256_mul_ps(s, sw0), b0);
        const __m256 y1 = _mm256_fmadd_ps(_mm256_load_ps(facc[i] + 8), _mm256_mul_ps(s, sw1), b1);
        float *yr = y + (size_t)i * ldy;
        if (ncols == QG_NR) {
            _mm256_storeu_ps(yr, y0);
            _mm256_storeu_ps(yr + 8, y1);
        } else {
            float t[QG_NR];
            _mm256_storeu_ps(t, y0);
            _mm256_storeu_ps(t + 8, y1);
            memcpy(yr, t, (size_t)ncols * sizeof(float));
        }
    }
}

typedef void (*qg_block_fn)(const int16_t *a, size_t lda, const int16_t *bp, int npairs, int first,
                            float facc[QG_MR][QG_NR]);
typedef void (*qg_store_fn)(float facc[QG_MR][QG_NR], const float *sx, const float *sw, const float *bias,
                            int ncols, float *y, size_t ldy);
#define QG_DEF_BLOCK(R)                                                                                     \
    QG_AVX2 static void qg_block_##R(const int16_t *a, size_t lda, const int16_t *bp, int npairs, int first, \
                                     float facc[QG_MR][QG_NR]) {                                            \
        qg_block(R, a, lda, bp, npairs, first, facc);                                                       \
    }
#define QG_DEF_STORE(R)                                                                                     \
    QG_AVX2 static void qg_store_##R(float facc[QG_MR][QG_NR], const float *sx, const float *sw,            \
                                     const float *bias, int ncols, float *y, size_t ldy) {                  \
        qg_store(R, facc, sx, sw, bias, ncols, y, ldy);                                                     \
    }
QG_DEF_BLOCK(1)
QG_DEF_BLOCK(2)
QG_DEF_BLOCK(3)
QG_DEF_BLOCK(4)
QG_DEF_BLOCK(5)
QG_DEF_STORE(1)
QG_DEF_STORE(2)
QG_DEF_STORE(3)
QG_DEF_STORE(4)
QG_DEF_STORE(5)
QG_DEF_STORE(6)
static const qg_block_fn qg_blocks[QG_MR + 1] = {NULL,      qg_block_1, qg_block_2,   qg_block_3,
                                                 qg_block_4, qg_block_5, qg_block6_asm};
static const qg_store_fn qg_stores[QG_MR + 1] = {NULL,      qg_store_1, qg_store_2, qg_store_3,
                                                 qg_store_4, qg_store_5, qg_store_6};

/* One task: rows [i0, i1) x panels [p0, p1).  Per panel, the k blocks are
 * the outer loop and the 6-row micro-tiles the inner one, so the panel's
 * 256-k slice (8 KB) stays in L1 while all micro-tiles use it; the fp32
 * block sums of the micro-tiles wait in facc (1.5 KB). */
QG_AVX2 static void qg_tile_avx2(const int16_t *A, size_t lda, const float *sx, const donto_qweight *W,
                                 const float *bias, float *Y, size_t ldy, int i0, int i1, int p0, int p1) {
    _Alignas(32) float facc[QG_MT / QG_MR][QG_MR][QG_NR];
    const int kpairs = W->kpairs;
    for (int p = p0; p < p1; p++) {
        const int16_t *bp = W->packed + (size_t)p * kpairs * 2 * QG_NR;
        const int j0 = p * QG_NR, nc = W->n - j0 < QG_NR ? W->n - j0 : QG_NR;
        /* The epilogue's stores to Y would mostly miss (Y is large and cold)
         * and stall on the store buffer: request the lines now, thousands
         * of cycles before they are written. */
        for (int i = i0; i < i1; i++) {
            _mm_prefetch((const char *)(Y + (size_t)i * ldy + j0), _MM_HINT_T0);
            _mm_prefetch((const char *)(Y + (size_t)i * ldy + j0 + nc - 1), _MM_HINT_T0);
        }
        /* kpairs >= 1: the first block sets facc, later ones add to it. */
        for (int kb = 0, first = 1; first || kb < kpairs; kb += QG_KCP, first = 0) {
            const int np = kpairs - kb < QG_KCP ? kpairs - kb : QG_KCP;
            for (int i = i0, t = 0; i < i1; i += QG_MR, t++) {
                const int r = i1 - i < QG_MR ? i1 - i : QG_MR;
                qg_blocks[r](A + (size_t)i * lda + 2 * (size_t)kb, lda, bp + (size_t)kb * 2 * QG_NR, np, first,
                             facc[t]);
            }
        }
        for (int i = i0, t = 0; i < i1; i += QG_MR, t++) {
            const int r = i1 - i < QG_MR ? i1 - i : QG_MR;
            qg_stores[r](facc[t], sx + i, W->scale + j0, bias ? bias + j0 : NULL, nc, Y + (size_t)i * ldy + j0,
                         ldy);
        }
    }
}
#endif /* QG_X86 */

static void qg_gemm(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias, float *Y,
                    int ldy, void *scratch, int nthreads, int avx2) {
    if (m <= 0) return;
    assert(W && W->packed && k == W->k && ldx >= k && ldy >= W->n && scratch && X && Y);
    (void)k;
    const int n = W->n, npanels = W->npanels;
    const size_t lda = qg_lda(W->k);
    int16_t *A = (int16_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *sx = (float *)(A + (size_t)m * lda);
    const int mtiles = (m + QG_MT - 1) / QG_MT, ntiles = avx2 ? (npanels + QG_NTP - 1) / QG_NTP : 1;
    const int ntasks = mtiles * ntiles;
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (nt > ntasks) nt = ntasks;
    /* Below ~1 MMAC the fork/join costs more than it saves. */
    if ((double)m * n * W->k < 1e6) nt = 1;

#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        /* dynamic: a thread the OS delays does not hold up the other. */
#pragma omp for schedule(dynamic, 16)
        for (int i = 0; i < m; i++) {
#ifdef QG_X86
            /* X is read once, usually from L3: fetch two rows ahead. */
            if (avx2 && i + 2 < m)
                for (int c = 0; c < W->k; c += 16)
                    _mm_prefetch((const char *)(X + (size_t)(i + 2) * (size_t)ldx + c), _MM_HINT_T0);
#endif
            sx[i] = qg_quant_row(X + (size_t)i * (size_t)ldx, W->k, A + (size_t)i * lda, 2 * W->kpairs, avx2);
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < ntasks; t++) {
            const int ti = t / ntiles, tj = t % ntiles;
            const int i0 = ti * QG_MT, i1 = i0 + QG_MT < m ? i0 + QG_MT : m;
#ifdef QG_X86
            if (avx2) {
                const int p0 = tj * QG_NTP, p1 = p0 + QG_NTP < npanels ? p0 + QG_NTP : npanels;
                qg_tile_avx2(A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
                continue;
            }
#endif
            (void)tj;
            qg_tile_portable(A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1);
        }
    }
}

void donto_qgemm(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias, float *Y,
                 int ldy, void *scratch, int nthreads) {
    qg_gemm(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, qg_have_avx2());
}

void donto_qgemm_portable(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias,
                          float *Y, int ldy, void *scratch, int nthreads) {
    qg_gemm(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, 0);
}
