/*
 * Quantized GEMM: AVX2, AVX-VNNI, AVX-512BW and AVX-512 VNNI kernels and a
 * portable C path, picked at run time (see qgemm.h for the contract).
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
 * Kernel sets (donto_isa, chosen per call; cpu_isa.h detects the CPU)
 * -------------------------------------------------------------------
 * Every set computes the same integers and the same float operations in
 * the same order, so all give the same bits as the portable path:
 *  - avx2:       6 x 16 micro-tile, vpmaddwd ymm + vpaddd (above).
 *  - avxvnni:    the same tile with VEX vpdpwssd ymm (multiply pairs and
 *                add to the accumulator in one instruction; 12 accumulators
 *                + 2 weights + 1 broadcast, no product register).
 *  - avx512:     8 x 32 micro-tile (8 rows x 2 panels): one zmm holds one
 *                k pair of a whole 16-column panel, so per k pair 2 weight
 *                loads and 8 broadcasts feed 16 vpmaddwd zmm + vpaddd into
 *                16 zmm accumulators (of 32 registers).
 *  - avx512vnni: the same tile with vpdpwssd zmm.
 * vpdpwssd (VNNI) adds the two s16 x s16 products of a lane to the int32
 * accumulator without saturation (wrapping), which is exact here for the
 * same reason as vpmaddwd + vpaddd: every partial sum of a 256-k block is
 * bounded by 256 * 4095 * 2047 < 2^31, whatever the order.  The flush
 * (float(acc) added to the fp32 block sums) and the epilogue FMA are the
 * same operations on every set; the zmm epilogue stores a partial panel
 * with a mask instead of a bounce buffer.  Activations are quantized by the
 * AVX2 code on every SIMD set (bit-identical to the scalar code).
 *
 * Portability: all SIMD code is compiled with target attributes, so one
 * binary built for baseline x86-64 carries every set; the portable C path
 * has the same arithmetic (bit-identical results; ~10x slower when the
 * compiler vectorizes it, ~35x on baseline x86-64).
 */
#include "qgemm.h"

#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "kern_tile.h"

#if defined(__x86_64__) || defined(__i386__)
#define QG_X86 1
#include <immintrin.h>
#define QG_AVX2 __attribute__((target("avx2,fma")))
#define QG_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))
#define QG_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
#define QG_AVX512VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#endif

#define QG_MR DONTO_QGEMM_MR
#define QG_NR DONTO_QGEMM_NR
#define QG_KCP (DONTO_QGEMM_KBLOCK / 2) /* k pairs per exact int32 block */
#ifndef QG_MT
#define QG_MT 24 /* rows per task (multiple of QG_MR) */
#endif
#define QGZ_MR 8 /* rows of the zmm micro-tile (x 2 panels = 32 columns) */
#if QG_MT % DONTO_QGEMM_MR || QG_MT % QGZ_MR
#error "QG_MT must be a multiple of DONTO_QGEMM_MR and of QGZ_MR"
#endif
#ifndef QG_NTP
#define QG_NTP 8 /* 16-column panels per task */
#endif
/* Rows whose max |x| is below this are treated as zero: 4095 / amax would
 * overflow float for amax < ~1.2e-35, and such rows contribute nothing. */
#define QG_TINY 1e-30f

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

#ifdef QG_X86
/* The AVX2 loop's operations 16 lanes at a time, the tail under a mask. */
QG_AVX512 static float qg_quant_row_zmm(const float *x, int k, int16_t *q, int kpad) {
    /* four maxima in flight (one waited on each vmaxps before it) */
    __m512 m4[4];
    for (int e = 0; e < 4; e++) m4[e] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 64 <= k; c += 64)
        for (int e = 0; e < 4; e++) m4[e] = _mm512_max_ps(m4[e], _mm512_abs_ps(_mm512_loadu_ps(x + c + 16 * e)));
    __m512 m = _mm512_max_ps(_mm512_max_ps(m4[0], m4[1]), _mm512_max_ps(m4[2], m4[3]));
    for (; c < k; c += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(ktile_mask16(k - c), x + c)));
    float inv, scale = qg_scales(_mm512_reduce_max_ps(m), DONTO_QGEMM_XMAX, &inv);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-DONTO_QGEMM_XMAX), hi = _mm512_set1_epi32(DONTO_QGEMM_XMAX);
    for (c = 0; c < k; c += 16) {
        const __mmask16 mk = ktile_mask16(k - c);
        const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + c), vinv));
        _mm512_mask_cvtepi32_storeu_epi16(q + c, mk, _mm512_min_epi32(_mm512_max_epi32(i, lo), hi));
    }
    for (int c = k; c < kpad; c++) q[c] = 0;
    return scale;
}
#endif

/* One row of X on kernel set isa's loop: every loop gives the same bits. */
static float qg_quant_row(const float *x, int k, int16_t *q, int kpad, donto_isa isa) {
#ifdef QG_X86
    if (cpu_isa_zmm(isa)) return qg_quant_row_zmm(x, k, q, kpad);
    if (isa >= DONTO_ISA_AVX2) return qg_quant_row_avx2(x, k, q, kpad);
#endif
    (void)isa;
    return qg_quant_row_scalar(x, k, q, kpad);
}

float donto_qgemm_quant_row(const float *x, int k, int16_t *q, int kpad) {
    return qg_quant_row(x, k, q, kpad, cpu_isa_runnable(DONTO_ISA_AUTO));
}

float donto_qgemm_quant_row_isa(const float *x, int k, int16_t *q, int kpad, donto_isa isa) {
    return qg_quant_row(x, k, q, kpad, cpu_isa_runnable(isa));
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

/* ---- AVX2 / AVX-VNNI micro-kernels (ymm) ------------------------------------ */
#ifdef QG_X86
QG_AVX2 static inline __m256i qg_bcast_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* One exact int32 block: MR rows x 16 columns over pairs [0, npairs) of the
 * panel, added (as fp32) into facc.  Used for MR < 6 (the bottom rows).
 * MAC(c, x, w) is c + the pairwise products of x and w: vpmaddwd + vpaddd
 * (AVX2) or vpdpwssd (AVX-VNNI). */
#define QG_BLOCK_BODY(MAC)                                                                \
    __m256i c[QG_MR][2];                                                                  \
    const int16_t *ar[QG_MR];                                                             \
    for (int i = 0; i < MR; i++) {                                                        \
        c[i][0] = c[i][1] = _mm256_setzero_si256();                                       \
        ar[i] = a + (size_t)i * lda;                                                      \
    }                                                                                     \
    for (int p = 0; p < npairs; p++, bp += 2 * QG_NR) {                                   \
        const __m256i w0 = _mm256_load_si256((const __m256i *)bp);                        \
        const __m256i w1 = _mm256_load_si256((const __m256i *)(bp + 16));                 \
        for (int i = 0; i < MR; i++) {                                                    \
            const __m256i x = qg_bcast_pair(ar[i] + 2 * p);                               \
            c[i][0] = MAC(c[i][0], x, w0);                                                \
            c[i][1] = MAC(c[i][1], x, w1);                                                \
        }                                                                                 \
    }                                                                                     \
    for (int i = 0; i < MR; i++) {                                                        \
        __m256 f0 = _mm256_cvtepi32_ps(c[i][0]), f1 = _mm256_cvtepi32_ps(c[i][1]);        \
        if (!first) {                                                                     \
            f0 = _mm256_add_ps(_mm256_load_ps(facc[i]), f0);                              \
            f1 = _mm256_add_ps(_mm256_load_ps(facc[i] + 8), f1);                          \
        }                                                                                 \
        _mm256_store_ps(facc[i], f0);                                                     \
        _mm256_store_ps(facc[i] + 8, f1);                                                 \
    }
#define QG_MAC_AVX2(c, x, w) _mm256_add_epi32((c), _mm256_madd_epi16((x), (w)))
#define QG_MAC_AVXVNNI(c, x, w) _mm256_dpwssd_avx_epi32((c), (x), (w))

QG_AVX2 static inline __attribute__((always_inline)) void qg_block(const int MR, const int16_t *a, size_t lda,
                                                                   const int16_t *bp, int npairs, int first,
                                                                   float facc[QG_MR][QG_NR]) {
    QG_BLOCK_BODY(QG_MAC_AVX2)
}

QG_AVXVNNI static inline __attribute__((always_inline)) void qg_block_vnni(const int MR, const int16_t *a,
                                                                           size_t lda, const int16_t *bp,
                                                                           int npairs, int first,
                                                                           float facc[QG_MR][QG_NR]) {
    QG_BLOCK_BODY(QG_MAC_AVXVNNI)
}

/* The 6-row block in assembly: with intrinsics GCC 12 hoists the six
 * broadcasts ahead of the multiplies and then spills half the accumulators
 * (measured: 35 instead of 70 GMAC/s).  Register use: ymm0-11 accumulators
 * (row r, columns 0-7 / 8-15 in ymm 2r / 2r+1), ymm12-13 the weight pair
 * vectors, ymm14 the broadcast (x[k], x[k+1]) of one row, ymm15 a product
 * (AVX2 only: vpdpwssd accumulates in place).
 * Rows 0-2 are addressed from pa, rows 3-5 from pb = pa + 3 * stride. */
#define QG_ROW(base, idx, r0, r1)                                                    \
    "vpbroadcastd " base idx ", %%ymm14\n\t"                                          \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                          \
    "vpaddd %%ymm15, %%ymm" #r0 ", %%ymm" #r0 "\n\t"                                  \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n\t"                                          \
    "vpaddd %%ymm14, %%ymm" #r1 ", %%ymm" #r1 "\n\t"
/* AVX-VNNI shares its mnemonic with the EVEX (AVX512_VNNI + VL) form; the
 * {vex} prefix makes the assembler emit the VEX encoding, the one an
 * AVX-VNNI CPU without AVX-512 runs ("%{" / "%}" are literal braces in
 * extended asm). */
#define QG_ROW_VNNI(base, idx, r0, r1)                                               \
    "vpbroadcastd " base idx ", %%ymm14\n\t"                                          \
    "%{vex%} vpdpwssd %%ymm12, %%ymm14, %%ymm" #r0 "\n\t"                              \
    "%{vex%} vpdpwssd %%ymm13, %%ymm14, %%ymm" #r1 "\n\t"
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
#define QG_BLOCK6_ASM(ROW)                                                           \
    const char *pa = (const char *)a;                                                 \
    const size_t stride = lda * sizeof(int16_t);                                      \
    const char *pb = pa + 3 * stride;                                                 \
    long n = npairs;                                                                  \
    long set = first;                                                                 \
    __asm__ volatile(                                                                 \
        KASM_ZERO_0_11                                                                \
        KASM_LOOP_6X16(ROW)                                                           \
        "test %[set], %[set]\n\t"                                                     \
        "jz 2f\n\t"                                                                   \
        QG_ACC_ALL(QG_ACC_SET)                                                        \
        "jmp 3f\n\t"                                                                  \
        "2:\n\t"                                                                      \
        QG_ACC_ALL(QG_ACC_ADD)                                                        \
        "3:\n\t"                                                                      \
        : [pa] "+r"(pa), [pb] "+r"(pb), [b] "+r"(bp), [n] "+r"(n)                     \
        : [s] "r"(stride), [f] "r"(&facc[0][0]), [set] "r"(set)                       \
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
QG_AVX2 static void qg_block6_asm(const int16_t *a, size_t lda, const int16_t *bp, int npairs, int first,
                                  float facc[QG_MR][QG_NR]) {
    QG_BLOCK6_ASM(QG_ROW)
}
QG_AVXVNNI static void qg_block6_vnni_asm(const int16_t *a, size_t lda, const int16_t *bp, int npairs, int first,
                                          float facc[QG_MR][QG_NR]) {
    QG_BLOCK6_ASM(QG_ROW_VNNI)
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
    }                                                                                                       \
    QG_AVXVNNI static void qg_block_vnni_##R(const int16_t *a, size_t lda, const int16_t *bp, int npairs,   \
                                             int first, float facc[QG_MR][QG_NR]) {                         \
        qg_block_vnni(R, a, lda, bp, npairs, first, facc);                                                  \
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
static const qg_block_fn qg_blocks_avx2[QG_MR + 1] = {NULL,       qg_block_1, qg_block_2,   qg_block_3,
                                                      qg_block_4, qg_block_5, qg_block6_asm};
static const qg_block_fn qg_blocks_avxvnni[QG_MR + 1] = {NULL,
                                                         qg_block_vnni_1,
                                                         qg_block_vnni_2,
                                                         qg_block_vnni_3,
                                                         qg_block_vnni_4,
                                                         qg_block_vnni_5,
                                                         qg_block6_vnni_asm};
static const qg_store_fn qg_stores[QG_MR + 1] = {NULL,      qg_store_1, qg_store_2, qg_store_3,
                                                 qg_store_4, qg_store_5, qg_store_6};

/* One task: rows [i0, i1) x panels [p0, p1).  Per panel, the k blocks are
 * the outer loop and the 6-row micro-tiles the inner one, so the panel's
 * 256-k slice (8 KB) stays in L1 while all micro-tiles use it; the fp32
 * block sums of the micro-tiles wait in facc (1.5 KB).  blocks: the set's
 * micro-kernels by row count (AVX2 or AVX-VNNI). */
QG_AVX2 static void qg_tile_ymm(const qg_block_fn *blocks, const int16_t *A, size_t lda, const float *sx,
                                const donto_qweight *W, const float *bias, float *Y, size_t ldy, int i0, int i1,
                                int p0, int p1) {
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
                blocks[r](A + (size_t)i * lda + 2 * (size_t)kb, lda, bp + (size_t)kb * 2 * QG_NR, np, first,
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

/* ---- AVX-512 micro-kernels (zmm) -------------------------------------------- */

/* One k pair of a 16-column panel is 16 x 2 int16 = 64 bytes: one zmm, and
 * 64-byte aligned (the packed weights are, and every pair block is 64
 * bytes).  A micro-tile is MR <= 8 rows x NP <= 2 panels; its fp32 block
 * sums wait in facc[8][32] (row i, panel q at facc + 32 i + 16 q). */
typedef void (*qgz_block_fn)(const int16_t *a, size_t lda, const int16_t *bp, size_t pstride, int npairs,
                             int first, float *facc);
typedef void (*qgz_store_fn)(const float *facc, const float *sx, const float *sw, const float *bias, int ncols,
                             float *y, size_t ldy);

/* One exact int32 block of MR rows x NP panels over pairs [0, npairs):
 * panel q's weights start at bp + q * pstride (int16 elements). */
#define QGZ_BLOCK_BODY(MAC)                                                               \
    __m512i c[QGZ_MR][2];                                                                 \
    const int16_t *ar[QGZ_MR];                                                            \
    for (int i = 0; i < MR; i++) {                                                        \
        c[i][0] = c[i][1] = _mm512_setzero_si512();                                       \
        ar[i] = a + (size_t)i * lda;                                                      \
    }                                                                                     \
    for (int p = 0; p < npairs; p++) {                                                    \
        const int16_t *b = bp + (size_t)p * 2 * QG_NR;                                    \
        const __m512i w0 = _mm512_load_si512((const void *)b);                            \
        const __m512i w1 = NP > 1 ? _mm512_load_si512((const void *)(b + pstride)) : w0;  \
        for (int i = 0; i < MR; i++) {                                                    \
            int32_t v;                                                                    \
            memcpy(&v, ar[i] + 2 * p, sizeof v);                                          \
            const __m512i x = _mm512_set1_epi32(v);                                       \
            c[i][0] = MAC(c[i][0], x, w0);                                                \
            if (NP > 1) c[i][1] = MAC(c[i][1], x, w1);                                    \
        }                                                                                 \
    }                                                                                     \
    for (int i = 0; i < MR; i++)                                                          \
        for (int q = 0; q < NP; q++) {                                                    \
            float *f = facc + (size_t)i * 2 * QG_NR + (size_t)q * QG_NR;                  \
            __m512 s = _mm512_cvtepi32_ps(c[i][q]);                                       \
            if (!first) s = _mm512_add_ps(_mm512_load_ps(f), s);                          \
            _mm512_store_ps(f, s);                                                        \
        }
#define QGZ_MAC_BW(c, x, w) _mm512_add_epi32((c), _mm512_madd_epi16((x), (w)))
#define QGZ_MAC_VNNI(c, x, w) _mm512_dpwssd_epi32((c), (x), (w))

/* Epilogue: Y = facc * (sx[row] * sw[col]) + bias[col] for the ncols
 * (1..NP * 16) columns of the micro-tile; masked loads and stores keep to
 * the ncols that exist. */
QG_AVX512 static inline __attribute__((always_inline)) void qgz_store(const int MR, const int NP, const float *facc,
                                                                      const float *sx, const float *sw,
                                                                      const float *bias, int ncols, float *y,
                                                                      size_t ldy) {
    for (int q = 0; q < NP; q++) {
        const int nq = ncols - q * QG_NR >= QG_NR ? QG_NR : ncols - q * QG_NR; /* >= 1 */
        const __mmask16 m = ktile_mask16(nq);
        const __m512 swq = _mm512_load_ps(sw + q * QG_NR);
        const __m512 bq = bias ? _mm512_maskz_loadu_ps(m, bias + q * QG_NR) : _mm512_setzero_ps();
        for (int i = 0; i < MR; i++) {
            const __m512 s = _mm512_mul_ps(_mm512_set1_ps(sx[i]), swq);
            const __m512 yq = _mm512_fmadd_ps(_mm512_load_ps(facc + (size_t)i * 2 * QG_NR + q * QG_NR), s, bq);
            _mm512_mask_storeu_ps(y + (size_t)i * ldy + q * QG_NR, m, yq);
        }
    }
}

/* The full 8 x 32 block in assembly, for the same reason as qg_block6_asm
 * (with intrinsics GCC 12 copies every accumulator each k pair).  Register
 * use: zmm0-15 accumulators (row r, panel q in zmm 2r+q, which is also its
 * place in facc: byte offset 64 (2r+q)), zmm16-17 the two panels' weights
 * of one k pair, zmm18 the broadcast (x[k], x[k+1]) of one row, zmm19-20
 * products (BW only).  Rows 0-2 are addressed from pa, 3-5 from pb = pa +
 * 3 stride, 6-7 from pc = pa + 6 stride. */
#define QGZ_ROW_BW(base, idx, r0, r1)                                                \
    "vpbroadcastd " base idx ", %%zmm18\n\t"                                          \
    "vpmaddwd %%zmm16, %%zmm18, %%zmm19\n\t"                                          \
    "vpaddd %%zmm19, %%zmm" #r0 ", %%zmm" #r0 "\n\t"                                  \
    "vpmaddwd %%zmm17, %%zmm18, %%zmm20\n\t"                                          \
    "vpaddd %%zmm20, %%zmm" #r1 ", %%zmm" #r1 "\n\t"
#define QGZ_ROW_VNNI(base, idx, r0, r1)                                              \
    "vpbroadcastd " base idx ", %%zmm18\n\t"                                          \
    "vpdpwssd %%zmm16, %%zmm18, %%zmm" #r0 "\n\t"                                     \
    "vpdpwssd %%zmm17, %%zmm18, %%zmm" #r1 "\n\t"
#define QGZ_ACC_ADD(r, off)                                                          \
    "vcvtdq2ps %%zmm" #r ", %%zmm" #r "\n\t"                                          \
    "vaddps " #off "(%[f]), %%zmm" #r ", %%zmm" #r "\n\t"                             \
    "vmovups %%zmm" #r ", " #off "(%[f])\n\t"
#define QGZ_ACC_SET(r, off)                                                          \
    "vcvtdq2ps %%zmm" #r ", %%zmm" #r "\n\t"                                          \
    "vmovups %%zmm" #r ", " #off "(%[f])\n\t"
#define QGZ_ACC_ALL(OP)                                                              \
    OP(0, 0) OP(1, 64) OP(2, 128) OP(3, 192) OP(4, 256) OP(5, 320) OP(6, 384) OP(7, 448)  \
    OP(8, 512) OP(9, 576) OP(10, 640) OP(11, 704) OP(12, 768) OP(13, 832) OP(14, 896) OP(15, 960)
#define QGZ_BLOCK8_ASM(ROW)                                                          \
    const char *pa = (const char *)a;                                                 \
    const size_t stride = lda * sizeof(int16_t), pbytes = pstride * sizeof(int16_t);  \
    const char *pb = pa + 3 * stride, *pc = pa + 6 * stride;                          \
    long n = npairs;                                                                  \
    long set = first;                                                                 \
    __asm__ volatile(                                                                 \
        KASM_ZERO_0_15                                                                \
        KASM_LOOP_8X32(ROW)                                                           \
        "test %[set], %[set]\n\t"                                                     \
        "jz 2f\n\t"                                                                   \
        QGZ_ACC_ALL(QGZ_ACC_SET)                                                      \
        "jmp 3f\n\t"                                                                  \
        "2:\n\t"                                                                      \
        QGZ_ACC_ALL(QGZ_ACC_ADD)                                                      \
        "3:\n\t"                                                                      \
        : [pa] "+r"(pa), [pb] "+r"(pb), [pc] "+r"(pc), [b] "+r"(bp), [n] "+r"(n)      \
        : [s] "r"(stride), [ps] "r"(pbytes), [f] "r"(facc), [set] "r"(set)            \
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20");
QG_AVX512 static void qgz_block8_bw_asm(const int16_t *a, size_t lda, const int16_t *bp, size_t pstride,
                                        int npairs, int first, float *facc) {
    QGZ_BLOCK8_ASM(QGZ_ROW_BW)
}
QG_AVX512VNNI static void qgz_block8_vnni_asm(const int16_t *a, size_t lda, const int16_t *bp, size_t pstride,
                                              int npairs, int first, float *facc) {
    QGZ_BLOCK8_ASM(QGZ_ROW_VNNI)
}

#define QGZ_DEF(R, N)                                                                                         \
    QG_AVX512 static void qgz_block_bw_##R##_##N(const int16_t *a, size_t lda, const int16_t *bp, size_t pstride, \
                                                 int npairs, int first, float *facc) {                        \
        const int MR = R, NP = N;                                                                             \
        QGZ_BLOCK_BODY(QGZ_MAC_BW)                                                                            \
    }                                                                                                         \
    QG_AVX512VNNI static void qgz_block_vnni_##R##_##N(const int16_t *a, size_t lda, const int16_t *bp,        \
                                                       size_t pstride, int npairs, int first, float *facc) {  \
        const int MR = R, NP = N;                                                                             \
        QGZ_BLOCK_BODY(QGZ_MAC_VNNI)                                                                          \
    }                                                                                                         \
    QG_AVX512 static void qgz_store_##R##_##N(const float *facc, const float *sx, const float *sw,            \
                                              const float *bias, int ncols, float *y, size_t ldy) {           \
        qgz_store(R, N, facc, sx, sw, bias, ncols, y, ldy);                                                   \
    }
#define QGZ_DEF_ROWS(R) QGZ_DEF(R, 1) QGZ_DEF(R, 2)
QGZ_DEF_ROWS(1)
QGZ_DEF_ROWS(2)
QGZ_DEF_ROWS(3)
QGZ_DEF_ROWS(4)
QGZ_DEF_ROWS(5)
QGZ_DEF_ROWS(6)
QGZ_DEF_ROWS(7)
QGZ_DEF(8, 1)
/* 8 rows x 2 panels, the full tile, is the assembly above. */
#define qgz_block_bw_8_2 qgz_block8_bw_asm
#define qgz_block_vnni_8_2 qgz_block8_vnni_asm
QG_AVX512 static void qgz_store_8_2(const float *facc, const float *sx, const float *sw, const float *bias, int ncols,
                                    float *y, size_t ldy) {
    qgz_store(8, 2, facc, sx, sw, bias, ncols, y, ldy);
}
/* [rows][panels] */
static const qgz_block_fn qgz_blocks_bw[QGZ_MR + 1][3] = KTILE_TABLE_8X2(qgz_block_bw);
static const qgz_block_fn qgz_blocks_vnni[QGZ_MR + 1][3] = KTILE_TABLE_8X2(qgz_block_vnni);
static const qgz_store_fn qgz_stores[QGZ_MR + 1][3] = KTILE_TABLE_8X2(qgz_store);

/* One task, as qg_tile_ymm, with 8 x 32 micro-tiles: per pair of panels,
 * the k blocks outer and the 8-row micro-tiles inner (the two panels'
 * 256-k slices, 16 KB, stay in L1); an odd last panel runs alone. */
QG_AVX512 static void qg_tile_zmm(const qgz_block_fn (*blocks)[3], const int16_t *A, size_t lda, const float *sx,
                                  const donto_qweight *W, const float *bias, float *Y, size_t ldy, int i0, int i1,
                                  int p0, int p1) {
    _Alignas(64) float facc[QG_MT / QGZ_MR][QGZ_MR][2 * QG_NR];
    const int kpairs = W->kpairs;
    const size_t pstride = (size_t)kpairs * 2 * QG_NR;
    for (int p = p0; p < p1; p += 2) {
        const int np = p1 - p >= 2 ? 2 : 1;
        const int16_t *bp = W->packed + (size_t)p * pstride;
        const int j0 = p * QG_NR, nc = W->n - j0 < np * QG_NR ? W->n - j0 : np * QG_NR;
        for (int i = i0; i < i1; i++) {
            const float *yr = Y + (size_t)i * ldy + j0;
            _mm_prefetch((const char *)yr, _MM_HINT_T0);
            if (nc > QG_NR) _mm_prefetch((const char *)(yr + QG_NR), _MM_HINT_T0);
            _mm_prefetch((const char *)(yr + nc - 1), _MM_HINT_T0);
        }
        for (int kb = 0, first = 1; first || kb < kpairs; kb += QG_KCP, first = 0) {
            const int npr = kpairs - kb < QG_KCP ? kpairs - kb : QG_KCP;
            for (int i = i0, t = 0; i < i1; i += QGZ_MR, t++) {
                const int r = i1 - i < QGZ_MR ? i1 - i : QGZ_MR;
                blocks[r][np](A + (size_t)i * lda + 2 * (size_t)kb, lda, bp + (size_t)kb * 2 * QG_NR, pstride, npr,
                              first, &facc[t][0][0]);
            }
        }
        for (int i = i0, t = 0; i < i1; i += QGZ_MR, t++) {
            const int r = i1 - i < QGZ_MR ? i1 - i : QGZ_MR;
            qgz_stores[r][np](&facc[t][0][0], sx + i, W->scale + j0, bias ? bias + j0 : NULL, nc,
                              Y + (size_t)i * ldy + j0, ldy);
        }
    }
}
#endif /* QG_X86 */

static void qg_gemm(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias, float *Y,
                    int ldy, void *scratch, int nthreads, donto_isa isa) {
    if (m <= 0) return;
    assert(W && W->packed && k == W->k && ldx >= k && ldy >= W->n && scratch && X && Y);
    (void)k;
    const int simd = isa >= DONTO_ISA_AVX2; /* every SIMD set includes AVX2 + FMA */
    const int n = W->n, npanels = W->npanels;
    const size_t lda = qg_lda(W->k);
    int16_t *A = (int16_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *sx = (float *)(A + (size_t)m * lda);
    const int mtiles = (m + QG_MT - 1) / QG_MT, ntiles = simd ? (npanels + QG_NTP - 1) / QG_NTP : 1;
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
            if (simd && i + 2 < m) ktile_prefetch_row(X + (size_t)(i + 2) * (size_t)ldx, W->k);
#endif
            sx[i] = qg_quant_row(X + (size_t)i * (size_t)ldx, W->k, A + (size_t)i * lda, 2 * W->kpairs, isa);
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < ntasks; t++) {
            const int ti = t / ntiles, tj = t % ntiles;
            const int i0 = ti * QG_MT, i1 = i0 + QG_MT < m ? i0 + QG_MT : m;
#ifdef QG_X86
            if (simd) {
                const int p0 = tj * QG_NTP, p1 = p0 + QG_NTP < npanels ? p0 + QG_NTP : npanels;
                switch (isa) {
                case DONTO_ISA_AVX512BF16:
                case DONTO_ISA_AVX512VNNI:
                    qg_tile_zmm(qgz_blocks_vnni, A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
                    break;
                case DONTO_ISA_AVX512:
                    qg_tile_zmm(qgz_blocks_bw, A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
                    break;
                case DONTO_ISA_AVXVNNI:
                    qg_tile_ymm(qg_blocks_avxvnni, A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
                    break;
                default:
                    qg_tile_ymm(qg_blocks_avx2, A, lda, sx, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
                    break;
                }
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
    qg_gemm(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, cpu_isa_runnable(DONTO_ISA_AUTO));
}

void donto_qgemm_isa(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias, float *Y,
                     int ldy, void *scratch, int nthreads, donto_isa isa) {
    qg_gemm(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, cpu_isa_runnable(isa));
}

void donto_qgemm_portable(const float *X, int m, int k, int ldx, const donto_qweight *W, const float *bias,
                          float *Y, int ldy, void *scratch, int nthreads) {
    qg_gemm(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, DONTO_ISA_PORTABLE);
}

const char *donto_qgemm_kernel_name(donto_isa isa) {
    switch (cpu_isa_runnable(isa)) {
    case DONTO_ISA_AVX512BF16:
    case DONTO_ISA_AVX512VNNI: return "int16 vpdpwssd zmm 8x32";
    case DONTO_ISA_AVX512: return "int16 vpmaddwd zmm 8x32";
    case DONTO_ISA_AVXVNNI: return "int16 vpdpwssd ymm 6x16";
    case DONTO_ISA_AVX2: return "int16 vpmaddwd ymm 6x16";
    default: return "int16 portable C";
    }
}
