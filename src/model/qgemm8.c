/*
 * The int8 GEMM (qgemm.h, "int8 path"): u8 activations x s8 weights with
 * exact int32 sums, and a short list of outlier input channels per weight
 * computed in fp32 beside it (LLM.int8()-style decomposition with a static
 * channel list chosen by calibration, see quant.c).
 *
 * Why this scheme
 * ---------------
 * Simulated on all-MiniLM-L6-v2 (every encoder Linear fake-quantized in
 * torch, 300 claims + 100 chunks of the corpus, min sentence cosine vs
 * fp32; calibration: 96 other corpus texts), see docs/engine.md "int8":
 * the figures are there.  Per-row int8 alone loses on the LayerNorm
 * outlier channels (|x| 10-30x the median channel); taking the few largest
 * calibrated channels out of the 8-bit grid recovers most of it.
 *
 * AVX2 has no saturation-free u8 x s8 product at full range: vpmaddubsw
 * adds two u8 x s8 products into a saturating s16, so 2 * XMAX * WMAX must
 * stay below 32768 (127 x 127 here: u7 x s8).  vpmaddwd with ones widens
 * the pairs to int32 and vpaddd accumulates.  VNNI's vpdpbusd does all
 * three in one instruction without saturation, so the VNNI sets quantize
 * activations on the full u8 grid (XMAX_VNNI 255): half the step, and on
 * MiniLM the edge cases' min cosine to fp32 goes from 0.99856 to 0.99927.
 *
 * Layout: W packed per 16-column panel, per quad of k values 16 cols x 4
 * bytes (64 bytes: two ymm, or one zmm); X quantized per call into
 * scratch, rows of u8 padded to 32 bytes.  With a weight scale per row,
 * one int32 block over all of k (exact for k <= DONTO_QGEMM8_KMAX), so no
 * flushes; with scales per group of k (qgemm.h), a flush to fp32 after
 * every group.  Micro-kernels: 6 rows x 16 columns in ymm (12
 * accumulators, 2 weight vectors, 1 broadcast, 1 product; the ones vector
 * is a memory operand), 8 rows x 32 columns in zmm on every AVX-512 set
 * (16 accumulators, 2 weight vectors, 1 broadcast; without VNNI also 2
 * products and the ones); for groups on VNNI, 6 rows x 32 columns in zmm
 * with the fp32 sums in registers too (12 + 12).
 *
 * On one grid every set computes the same int32 sums, the same epilogue
 * FMA and the same outlier pass, in the same order, so results are
 * bit-identical to the portable path on that grid (donto_qgemm8_grid).
 */
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "kern_tile.h"
#include "qgemm.h"

#if defined(__x86_64__) || defined(__i386__)
#define Q8_X86 1
#include <immintrin.h>
#define Q8_AVX2 __attribute__((target("avx2,fma")))
#define Q8_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))
#define Q8_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
#define Q8_AVX512VNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#endif

#define Q8_MR 6
#define Q8_NR 16
#define Q8_MT 24 /* rows per task */
#define Q8_NTP 8 /* panels per task */
#define Q8_TINY 1e-30f

_Static_assert(2 * DONTO_QGEMM8_XMAX * DONTO_QGEMM8_WMAX < 32768, "vpmaddubsw would saturate");
_Static_assert(2LL * DONTO_QGEMM8_KMAX * DONTO_QGEMM8_XMAX_VNNI * DONTO_QGEMM8_WMAX < 2147483648LL,
               "int32 sums (with the zero-point term) would overflow");
_Static_assert(DONTO_QGEMM8_XMAX_VNNI <= 255, "u8 lanes");

static size_t q8_lda(int k) {
    size_t kq = ((size_t)k + 3) & ~(size_t)3;
    return (kq + 31) & ~(size_t)31;
}

/* Scratch: A [m][lda] u8, then per row sx and zp, then each row's
 * outlier channels' values [m][MAXOUT] (row stride nout), gathered once per
 * row so the epilogues read them from one line instead of nout lines of X
 * per tile and panel. */
static size_t q8_al(size_t b) { return (b + 63) & ~(size_t)63; }

size_t donto_qgemm8_scratch_size(int m, int k) {
    if (m <= 0 || k <= 0) return 64;
    return 64 + q8_al((size_t)m * q8_lda(k)) + 2 * q8_al((size_t)m * 4) +
           q8_al((size_t)m * DONTO_QGEMM8_MAXOUT * sizeof(float));
}

/* ---- weights ---------------------------------------------------------- */

static inline size_t q8_widx(int kquads, int j, int c) {
    return ((size_t)(j / Q8_NR) * kquads + (size_t)(c / 4)) * 4 * Q8_NR + (size_t)(j % Q8_NR) * 4 + (c & 3);
}

void donto_qweight8_free(donto_qweight8 *q) {
    if (!q) return;
    free(q->packed);
    free(q->scale);
    free(q->colsum);
    free(q->keep);
    free(q->out_idx);
    free(q->out_w);
    free(q->gscale);
    free(q->gcorr);
    memset(q, 0, sizeof *q);
}

int donto_qweight8_init(donto_qweight8 *q, const float *W, int n, int k, const int *outliers, int nout,
                        donto_err *err) {
    return donto_qweight8_init_ex(q, W, n, k, outliers, nout, 0, err);
}

int donto_qweight8_init_ex(donto_qweight8 *q, const float *W, int n, int k, const int *outliers, int nout,
                           int group, donto_err *err) {
    memset(q, 0, sizeof *q);
    if (group < 0 || group % 4 || group > DONTO_QGEMM8_GMAX)
        return donto_seterr(err, "qweight8: weight group %d (0, or a multiple of 4 up to %d)", group,
                            DONTO_QGEMM8_GMAX);
    if (n <= 0 || k <= 0 || k > DONTO_QGEMM8_KMAX)
        return donto_seterr(err, "qweight8: bad shape [%d, %d] (k <= %d)", n, k, DONTO_QGEMM8_KMAX);
    if (!W) return donto_seterr(err, "qweight8: no weights for shape [%d, %d]", n, k);
    if (nout < 0 || nout > DONTO_QGEMM8_MAXOUT || (nout && !outliers))
        return donto_seterr(err, "qweight8: %d outlier channels (at most %d)", nout, DONTO_QGEMM8_MAXOUT);
    const int kquads = (int)(((long)k + 3) / 4), npanels = (int)(((long)n + Q8_NR - 1) / Q8_NR);
    const size_t npad = (size_t)npanels * Q8_NR, nval = npad * (size_t)kquads * 4;
    q->n = n, q->k = k, q->kquads = kquads, q->npanels = npanels, q->nout = nout;
    q->group = group;
    const size_t ng = group ? ((size_t)k + (size_t)group - 1) / (size_t)group : 1;
    if (group) {
        q->gscale = donto_aligned_alloc(ng * npad * sizeof(float));
        q->gcorr = donto_aligned_alloc(npad * sizeof(float));
        if (!q->gscale || !q->gcorr) {
            donto_qweight8_free(q);
            return donto_seterr(err, "qweight8: out of memory packing [%d, %d]", n, k);
        }
        memset(q->gscale, 0, ng * npad * sizeof(float));
        memset(q->gcorr, 0, npad * sizeof(float));
    }
    q->packed = donto_aligned_alloc(nval);
    q->scale = donto_aligned_alloc(npad * sizeof(float));
    q->colsum = donto_aligned_alloc(npad * sizeof(int32_t));
    q->keep = malloc((size_t)k * sizeof(float));
    q->out_idx = malloc((size_t)(nout ? nout : 1) * sizeof(int));
    q->out_w = donto_aligned_alloc((size_t)(nout ? nout : 1) * npad * sizeof(float));
    if (!q->packed || !q->scale || !q->colsum || !q->keep || !q->out_idx || !q->out_w) {
        donto_qweight8_free(q);
        return donto_seterr(err, "qweight8: out of memory packing [%d, %d]", n, k);
    }
    memset(q->packed, 0, nval);
    memset(q->scale, 0, npad * sizeof(float));
    memset(q->colsum, 0, npad * sizeof(int32_t));
    memset(q->out_w, 0, (size_t)(nout ? nout : 1) * npad * sizeof(float));
    for (int c = 0; c < k; c++) q->keep[c] = 1.0f;
    for (int o = 0; o < nout; o++) {
        const int c = outliers[o];
        if (c < 0 || c >= k || q->keep[c] == 0.0f) {
            donto_qweight8_free(q);
            return donto_seterr(err, "qweight8: outlier channel %d out of range or repeated (k %d)", c, k);
        }
        q->keep[c] = 0.0f;
        q->out_idx[o] = c;
    }
    for (int j = 0; j < n; j++) {
        const float *row = W + (size_t)j * (size_t)k;
        for (int c = 0; c < k; c++)
            if (!isfinite(row[c])) {
                donto_qweight8_free(q);
                return donto_seterr(err, "qweight8: weight [%d, %d] is not finite (%g)", j, c, (double)row[c]);
            }
        int32_t cs = 0;
        float gcorr = 0.0f;
        /* per row (group 0: one group of all k), or per group of k */
        const int gk = group ? group : k;
        for (int g = 0, c0 = 0; c0 < k; g++, c0 += gk) {
            const int c1 = c0 + gk < k ? c0 + gk : k;
            float gmax = 0.0f;
            for (int c = c0; c < c1; c++) {
                const float a = fabsf(row[c]) * q->keep[c];
                if (a > gmax) gmax = a;
            }
            const float inv = gmax >= Q8_TINY ? (float)DONTO_QGEMM8_WMAX / gmax : 0.0f;
            const float sc = gmax >= Q8_TINY ? gmax / (float)DONTO_QGEMM8_WMAX : 0.0f;
            int32_t gcs = 0;
            for (int c = c0; c < c1; c++) {
                long r = q->keep[c] != 0.0f ? lrintf(row[c] * inv) : 0;
                if (r > DONTO_QGEMM8_WMAX) r = DONTO_QGEMM8_WMAX;
                if (r < -DONTO_QGEMM8_WMAX) r = -DONTO_QGEMM8_WMAX;
                q->packed[q8_widx(kquads, j, c)] = (int8_t)r;
                gcs += (int32_t)r;
            }
            cs += gcs;
            if (group) {
                q->gscale[(size_t)g * npad + j] = sc;
                gcorr = fmaf((float)gcs, sc, gcorr); /* |gcs| <= 512 * 127: exact */
            } else {
                q->scale[j] = sc;
            }
        }
        q->colsum[j] = cs;
        if (group) q->gcorr[j] = gcorr;
        for (int o = 0; o < nout; o++) q->out_w[(size_t)o * npad + j] = row[outliers[o]];
    }
    return 0;
}

int donto_qweight8_get(const donto_qweight8 *q, int j, int c) { return q->packed[q8_widx(q->kquads, j, c)]; }

/* ---- activations -------------------------------------------------------- */

/* Grid of a row from its range (xmax + 1 levels); returns the dequant
 * scale, sets inv, zp. */
static inline float q8_grid(float lo, float hi, int xmax, float *inv, int32_t *zp) {
    const float range = hi - lo;
    if (!(range >= Q8_TINY)) {
        *inv = 0.0f;
        *zp = 0;
        return 0.0f;
    }
    *inv = (float)xmax / range;
    *zp = (int32_t)lrintf(-lo * *inv);
    return range / (float)xmax;
}

static inline uint8_t q8_round(float v, float inv, int32_t zp, int xmax) {
    long r = lrintf(v * inv) + zp;
    if (r < 0) r = 0;
    if (r > xmax) r = xmax;
    return (uint8_t)r;
}

static float q8_quant_row_scalar(const float *x, const float *keep, int k, int xmax, uint8_t *q, int kpad,
                                 int32_t *zp) {
    float lo = 0.0f, hi = 0.0f;
    for (int c = 0; c < k; c++) {
        const float v = x[c] * keep[c];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    float inv;
    const float s = q8_grid(lo, hi, xmax, &inv, zp);
    int c = 0;
    for (; c < k; c++) q[c] = q8_round(x[c] * keep[c], inv, *zp, xmax);
    for (; c < kpad; c++) q[c] = 0;
    return s;
}

#ifdef Q8_X86
/* The range [lo, hi] (from 0) of n lanes' minima tl and maxima th, in lane
 * order, as the scalar loop compares. */
static inline void q8_fold_range(const float *tl, const float *th, int n, float *lo, float *hi) {
    float l = 0.0f, h = 0.0f;
    for (int e = 0; e < n; e++) {
        l = tl[e] < l ? tl[e] : l;
        h = th[e] > h ? th[e] : h;
    }
    *lo = l, *hi = h;
}

Q8_AVX2 static float q8_quant_row_avx2(const float *x, const float *keep, int k, int xmax, uint8_t *q, int kpad,
                                       int32_t *zp) {
    /* four minima and maxima in flight (one pair waited on each vminps /
     * vmaxps before it); min and max give the same value in any order */
    __m256 lo4[4], hi4[4];
    for (int e = 0; e < 4; e++) lo4[e] = hi4[e] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 32 <= k; c += 32)
        for (int e = 0; e < 4; e++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * e), _mm256_loadu_ps(keep + c + 8 * e));
            lo4[e] = _mm256_min_ps(lo4[e], v);
            hi4[e] = _mm256_max_ps(hi4[e], v);
        }
    __m256 vlo = _mm256_min_ps(_mm256_min_ps(lo4[0], lo4[1]), _mm256_min_ps(lo4[2], lo4[3]));
    __m256 vhi = _mm256_max_ps(_mm256_max_ps(hi4[0], hi4[1]), _mm256_max_ps(hi4[2], hi4[3]));
    for (; c + 8 <= k; c += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(keep + c));
        vlo = _mm256_min_ps(vlo, v);
        vhi = _mm256_max_ps(vhi, v);
    }
    _Alignas(32) float tl[8], th[8];
    _mm256_store_ps(tl, vlo);
    _mm256_store_ps(th, vhi);
    float lo, hi;
    q8_fold_range(tl, th, 8, &lo, &hi);
    for (; c < k; c++) {
        const float v = x[c] * keep[c];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    float inv;
    const float s = q8_grid(lo, hi, xmax, &inv, zp);
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vzp = _mm256_set1_epi32(*zp), zero = _mm256_setzero_si256(), top = _mm256_set1_epi32(xmax);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (c = 0; c + 32 <= k; c += 32) {
        __m256i i[4];
        for (int e = 0; e < 4; e++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * e), _mm256_loadu_ps(keep + c + 8 * e));
            i[e] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v, vinv)), vzp);
            i[e] = _mm256_min_epi32(_mm256_max_epi32(i[e], zero), top);
        }
        const __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        _mm256_storeu_si256((__m256i *)(q + c), _mm256_permutevar8x32_epi32(p, perm));
    }
    for (; c < k; c++) q[c] = q8_round(x[c] * keep[c], inv, *zp, xmax);
    for (; c < kpad; c++) q[c] = 0;
    return s;
}

/* The AVX2 loop's operations 16 lanes at a time, the tail under a mask
 * (masked-off lanes read 0, which the range starts from anyway). */
Q8_AVX512 static float q8_quant_row_zmm(const float *x, const float *keep, int k, int xmax, uint8_t *q,
                                        int kpad, int32_t *zp) {
    /* four minima and maxima in flight, as the AVX2 loop */
    __m512 lo4[4], hi4[4];
    for (int e = 0; e < 4; e++) lo4[e] = hi4[e] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 64 <= k; c += 64)
        for (int e = 0; e < 4; e++) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + c + 16 * e), _mm512_loadu_ps(keep + c + 16 * e));
            lo4[e] = _mm512_min_ps(lo4[e], v);
            hi4[e] = _mm512_max_ps(hi4[e], v);
        }
    __m512 vlo = _mm512_min_ps(_mm512_min_ps(lo4[0], lo4[1]), _mm512_min_ps(lo4[2], lo4[3]));
    __m512 vhi = _mm512_max_ps(_mm512_max_ps(hi4[0], hi4[1]), _mm512_max_ps(hi4[2], hi4[3]));
    for (; c < k; c += 16) {
        const __mmask16 m = ktile_mask16(k - c);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), _mm512_maskz_loadu_ps(m, keep + c));
        vlo = _mm512_min_ps(vlo, v);
        vhi = _mm512_max_ps(vhi, v);
    }
    _Alignas(64) float tl[16], th[16];
    _mm512_store_ps(tl, vlo);
    _mm512_store_ps(th, vhi);
    float lo, hi;
    q8_fold_range(tl, th, 16, &lo, &hi);
    float inv;
    const float s = q8_grid(lo, hi, xmax, &inv, zp);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i vzp = _mm512_set1_epi32(*zp), zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(xmax);
    for (int c = 0; c < k; c += 16) {
        const __mmask16 m = ktile_mask16(k - c);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), _mm512_maskz_loadu_ps(m, keep + c));
        const __m512i i = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, vinv)), vzp);
        _mm512_mask_cvtepi32_storeu_epi8(q + c, m, _mm512_min_epi32(_mm512_max_epi32(i, zero), top));
    }
    for (int c = k; c < kpad; c++) q[c] = 0;
    return s;
}
#endif

/* ---- portable path ---------------------------------------------------------- */

/* The int32 sums of one row and panel over quads [t0, t1). */
static void q8_sums_portable(const uint8_t *a, const int8_t *bp, int t0, int t1, int32_t s[Q8_NR]) {
    for (int c = 0; c < Q8_NR; c++) s[c] = 0;
    for (int t = t0; t < t1; t++) {
        const int32_t x0 = a[4 * t], x1 = a[4 * t + 1], x2 = a[4 * t + 2], x3 = a[4 * t + 3];
        const int8_t *b = bp + (size_t)t * 4 * Q8_NR;
        for (int c = 0; c < Q8_NR; c++) s[c] += x0 * b[4 * c] + x1 * b[4 * c + 1] + x2 * b[4 * c + 2] + x3 * b[4 * c + 3];
    }
}

static void q8_tile_portable(const float *X, size_t ldx, const uint8_t *A, size_t lda, const float *sx,
                             const int32_t *zp, const donto_qweight8 *W, const float *bias, float *Y, size_t ldy,
                             int i0, int i1) {
    const int kq = W->kquads, gq = W->group ? W->group / 4 : kq;
    const size_t npad = (size_t)W->npanels * Q8_NR;
    for (int i = i0; i < i1; i++) {
        const uint8_t *a = A + (size_t)i * lda;
        for (int p = 0; p < W->npanels; p++) {
            const int8_t *bp = W->packed + (size_t)p * kq * 4 * Q8_NR;
            const int j0 = p * Q8_NR, nc = W->n - j0 < Q8_NR ? W->n - j0 : Q8_NR;
            int32_t s[Q8_NR];
            float f[Q8_NR] = {0}, *yr = Y + (size_t)i * ldy + j0;
            if (W->group)
                for (int g = 0, t0 = 0; t0 < kq; g++, t0 += gq) {
                    q8_sums_portable(a, bp, t0, t0 + gq < kq ? t0 + gq : kq, s);
                    const float *gsc = W->gscale + (size_t)g * npad + j0;
                    for (int c = 0; c < nc; c++) f[c] = fmaf((float)s[c], gsc[c], f[c]);
                }
            else
                q8_sums_portable(a, bp, 0, kq, s);
            for (int c = 0; c < nc; c++) {
                float y = W->group ? fmaf(fmaf(-(float)zp[i], W->gcorr[j0 + c], f[c]), sx[i], bias ? bias[j0 + c] : 0.0f)
                                   : fmaf((float)(s[c] - zp[i] * W->colsum[j0 + c]), sx[i] * W->scale[j0 + c],
                                          bias ? bias[j0 + c] : 0.0f);
                for (int o = 0; o < W->nout; o++)
                    y = fmaf(X[(size_t)i * ldx + W->out_idx[o]], W->out_w[(size_t)o * npad + j0 + c], y);
                yr[c] = y;
            }
        }
    }
}

/* ---- ymm kernels ------------------------------------------------------------ */
#ifdef Q8_X86
static const int16_t q8_ones[16] __attribute__((aligned(32))) = {1, 1, 1, 1, 1, 1, 1, 1,
                                                                 1, 1, 1, 1, 1, 1, 1, 1};

typedef void (*q8_block_fn)(const uint8_t *a, size_t lda, const int8_t *bp, int nquads, int32_t acc[Q8_MR][Q8_NR]);

#define Q8_BLOCK_BODY(MAC)                                                                 \
    __m256i c[Q8_MR][2];                                                                   \
    const uint8_t *ar[Q8_MR];                                                              \
    for (int i = 0; i < MR; i++) {                                                         \
        c[i][0] = c[i][1] = _mm256_setzero_si256();                                        \
        ar[i] = a + (size_t)i * lda;                                                       \
    }                                                                                      \
    for (int t = 0; t < nquads; t++, bp += 4 * Q8_NR) {                                    \
        const __m256i w0 = _mm256_load_si256((const __m256i *)bp);                         \
        const __m256i w1 = _mm256_load_si256((const __m256i *)(bp + 32));                  \
        for (int i = 0; i < MR; i++) {                                                     \
            int32_t v;                                                                     \
            memcpy(&v, ar[i] + 4 * t, 4);                                                  \
            const __m256i x = _mm256_set1_epi32(v);                                        \
            c[i][0] = MAC(c[i][0], x, w0);                                                 \
            c[i][1] = MAC(c[i][1], x, w1);                                                 \
        }                                                                                  \
    }                                                                                      \
    for (int i = 0; i < MR; i++) {                                                         \
        _mm256_store_si256((__m256i *)acc[i], c[i][0]);                                    \
        _mm256_store_si256((__m256i *)(acc[i] + 8), c[i][1]);                              \
    }
#define Q8_MAC_AVX2(c, x, w) \
    _mm256_add_epi32((c), _mm256_madd_epi16(_mm256_maddubs_epi16((x), (w)), _mm256_load_si256((const __m256i *)q8_ones)))
#define Q8_MAC_AVXVNNI(c, x, w) _mm256_dpbusd_avx_epi32((c), (x), (w))

/* Tiles of 1 to 5 rows; the full 6-row tile is in assembly (below). */
#define Q8_DEF_BLOCKS(R)                                                                                          \
    Q8_AVX2 static void q8_block_avx2_##R(const uint8_t *a, size_t lda, const int8_t *bp, int nquads,            \
                                          int32_t acc[Q8_MR][Q8_NR]) {                                            \
        const int MR = R;                                                                                         \
        Q8_BLOCK_BODY(Q8_MAC_AVX2)                                                                                \
    }                                                                                                             \
    Q8_AVXVNNI static void q8_block_avxvnni_##R(const uint8_t *a, size_t lda, const int8_t *bp, int nquads,        \
                                                int32_t acc[Q8_MR][Q8_NR]) {                                      \
        const int MR = R;                                                                                         \
        Q8_BLOCK_BODY(Q8_MAC_AVXVNNI)                                                                             \
    }
Q8_DEF_BLOCKS(1)
Q8_DEF_BLOCKS(2)
Q8_DEF_BLOCKS(3)
Q8_DEF_BLOCKS(4)
Q8_DEF_BLOCKS(5)

/* The 6-row blocks in assembly (as qgemm.c's int16 kernels: with
 * intrinsics GCC hoists the broadcasts and spills accumulators; the
 * avxvnni block in intrinsics took 37% of int8's samples against 27% for
 * the int16 kernel doing the same number of instructions).
 * ymm0-11 accumulators, ymm12-13 weights, ymm14 broadcast, ymm15 product.
 * AVX-VNNI: one VEX vpdpbusd per row and panel ({vex}: the encoding a CPU
 * without AVX-512 VNNI runs). */
#define Q8_ROW(base, idx, r0, r1)                                                    \
    "vpbroadcastd " base idx ", %%ymm14\n\t"                                          \
    "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n\t"                                        \
    "vpmaddwd (%[ones]), %%ymm15, %%ymm15\n\t"                                        \
    "vpaddd %%ymm15, %%ymm" #r0 ", %%ymm" #r0 "\n\t"                                  \
    "vpmaddubsw %%ymm13, %%ymm14, %%ymm14\n\t"                                        \
    "vpmaddwd (%[ones]), %%ymm14, %%ymm14\n\t"                                        \
    "vpaddd %%ymm14, %%ymm" #r1 ", %%ymm" #r1 "\n\t"
#define Q8_ROW_VNNI(base, idx, r0, r1)                                               \
    "vpbroadcastd " base idx ", %%ymm14\n\t"                                          \
    "%{vex%} vpdpbusd %%ymm12, %%ymm14, %%ymm" #r0 "\n\t"                             \
    "%{vex%} vpdpbusd %%ymm13, %%ymm14, %%ymm" #r1 "\n\t"
#define Q8_ST(r, off) "vmovdqu %%ymm" #r ", " #off "(%[f])\n\t"
#define Q8_BLOCK6_ASM(ROW)                                                                                           \
    const char *pa = (const char *)a, *pb = pa + 3 * lda;                                                            \
    long n = nquads;                                                                                                 \
    if (n <= 0) {                                                                                                    \
        memset(acc, 0, sizeof(int32_t) * Q8_MR * Q8_NR);                                                             \
        return;                                                                                                      \
    }                                                                                                                \
    __asm__ volatile(                                                                                                \
        KASM_ZERO_0_11                                                                                               \
        KASM_LOOP_6X16(ROW)                                                                                          \
        Q8_ST(0, 0) Q8_ST(1, 32) Q8_ST(2, 64) Q8_ST(3, 96) Q8_ST(4, 128) Q8_ST(5, 160)                               \
        Q8_ST(6, 192) Q8_ST(7, 224) Q8_ST(8, 256) Q8_ST(9, 288) Q8_ST(10, 320) Q8_ST(11, 352)                        \
        : [pa] "+r"(pa), [pb] "+r"(pb), [b] "+r"(bp), [n] "+r"(n)                                                    \
        : [s] "r"(lda), [f] "r"(&acc[0][0]), [ones] "r"(q8_ones)                                                     \
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",   \
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
Q8_AVX2 static void q8_block6_asm(const uint8_t *a, size_t lda, const int8_t *bp, int nquads,
                                  int32_t acc[Q8_MR][Q8_NR]) {
    Q8_BLOCK6_ASM(Q8_ROW)
}
Q8_AVXVNNI static void q8_block6_vnni_asm(const uint8_t *a, size_t lda, const int8_t *bp, int nquads,
                                          int32_t acc[Q8_MR][Q8_NR]) {
    Q8_BLOCK6_ASM(Q8_ROW_VNNI)
}

static const q8_block_fn q8_blocks_avx2[Q8_MR + 1] = {NULL,
                                                      q8_block_avx2_1,
                                                      q8_block_avx2_2,
                                                      q8_block_avx2_3,
                                                      q8_block_avx2_4,
                                                      q8_block_avx2_5,
                                                      q8_block6_asm};
static const q8_block_fn q8_blocks_avxvnni[Q8_MR + 1] = {NULL,
                                                         q8_block_avxvnni_1,
                                                         q8_block_avxvnni_2,
                                                         q8_block_avxvnni_3,
                                                         q8_block_avxvnni_4,
                                                         q8_block_avxvnni_5,
                                                         q8_block6_vnni_asm};
/* Epilogue: y = float(acc - zp * colsum) * (sx * sw) + bias, ncols <= 16,
 * then the outlier channels, fp32, one FMA each in list order.  The outlier
 * loop runs over channels outside and rows inside, so the MR x 2 FMA chains
 * are independent (row by row, the 8 FMAs of a row waited on each other:
 * that loop was 7% of the int8 forward); every output still gets its FMAs
 * in list order, so the bits are those of the portable path. */
Q8_AVX2 static inline __attribute__((always_inline)) void q8_store_rows(
    const int MR, int32_t acc[Q8_MR][Q8_NR], float facc[Q8_MR][Q8_NR], const float *sx, const int32_t *zp,
    const int32_t *colsum, const float *sw, const float *bias, int ncols, float *y, size_t ldy, const float *xo,
    const donto_qweight8 *W, int j0) {
    const size_t npad = (size_t)W->npanels * Q8_NR;
    const __m256 sw0 = _mm256_load_ps(sw), sw1 = _mm256_load_ps(sw + 8);
    const __m256i cs0 = _mm256_load_si256((const __m256i *)colsum), cs1 = _mm256_load_si256((const __m256i *)(colsum + 8));
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    if (bias) {
        float tb[Q8_NR] = {0};
        memcpy(tb, bias, (size_t)ncols * sizeof(float));
        b0 = _mm256_loadu_ps(tb);
        b1 = _mm256_loadu_ps(tb + 8);
    }
    const __m256 gc0 = facc ? _mm256_loadu_ps(W->gcorr + j0) : _mm256_setzero_ps();
    const __m256 gc1 = facc ? _mm256_loadu_ps(W->gcorr + j0 + 8) : _mm256_setzero_ps();
    __m256 y0[Q8_MR], y1[Q8_MR];
    for (int i = 0; i < MR; i++) {
        const __m256 s = _mm256_set1_ps(sx[i]);
        if (facc) { /* group scales: (f - zp * gcorr) * sx + bias */
            const __m256 z = _mm256_set1_ps((float)zp[i]);
            y0[i] = _mm256_fmadd_ps(_mm256_fnmadd_ps(z, gc0, _mm256_load_ps(facc[i])), s, b0);
            y1[i] = _mm256_fmadd_ps(_mm256_fnmadd_ps(z, gc1, _mm256_load_ps(facc[i] + 8)), s, b1);
            continue;
        }
        const __m256i z = _mm256_set1_epi32(zp[i]);
        const __m256i a0 = _mm256_sub_epi32(_mm256_load_si256((const __m256i *)acc[i]), _mm256_mullo_epi32(z, cs0));
        const __m256i a1 =
            _mm256_sub_epi32(_mm256_load_si256((const __m256i *)(acc[i] + 8)), _mm256_mullo_epi32(z, cs1));
        y0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_mul_ps(s, sw0), b0);
        y1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), _mm256_mul_ps(s, sw1), b1);
    }
    for (int o = 0; o < W->nout; o++) {
        const float *wo = W->out_w + (size_t)o * npad + j0;
        const __m256 w0 = _mm256_loadu_ps(wo), w1 = _mm256_loadu_ps(wo + 8);
        for (int i = 0; i < MR; i++) {
            const __m256 xv = _mm256_broadcast_ss(xo + (size_t)i * W->nout + o);
            y0[i] = _mm256_fmadd_ps(xv, w0, y0[i]);
            y1[i] = _mm256_fmadd_ps(xv, w1, y1[i]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float *yr = y + (size_t)i * ldy;
        if (ncols == Q8_NR) {
            _mm256_storeu_ps(yr, y0[i]);
            _mm256_storeu_ps(yr + 8, y1[i]);
        } else {
            float t[Q8_NR];
            _mm256_storeu_ps(t, y0[i]);
            _mm256_storeu_ps(t + 8, y1[i]);
            memcpy(yr, t, (size_t)ncols * sizeof(float));
        }
    }
}

/* Full 6-row tiles with a constant row count (the accumulators stay in
 * registers), the short last tile of a task with a variable one. */
Q8_AVX2 static void q8_store(int MR, int32_t acc[Q8_MR][Q8_NR], float facc[Q8_MR][Q8_NR], const float *sx,
                             const int32_t *zp, const int32_t *colsum, const float *sw, const float *bias, int ncols,
                             float *y, size_t ldy, const float *xo, const donto_qweight8 *W, int j0) {
    if (MR == Q8_MR) q8_store_rows(Q8_MR, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
    else q8_store_rows(MR, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
}

/* Group scales: f += float(acc) * gscale for MR rows x 16 columns, as the
 * portable path (float(acc) is exact). */
Q8_AVX2 static void q8_flush(int MR, int32_t acc[Q8_MR][Q8_NR], const float *gsc, int first, float f[Q8_MR][Q8_NR]) {
    const __m256 sc0 = _mm256_loadu_ps(gsc), sc1 = _mm256_loadu_ps(gsc + 8);
    for (int i = 0; i < MR; i++) {
        const __m256 a0 = _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)acc[i]));
        const __m256 a1 = _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)(acc[i] + 8)));
        const __m256 f0 = first ? _mm256_setzero_ps() : _mm256_load_ps(f[i]);
        const __m256 f1 = first ? _mm256_setzero_ps() : _mm256_load_ps(f[i] + 8);
        _mm256_store_ps(f[i], _mm256_fmadd_ps(a0, sc0, f0));
        _mm256_store_ps(f[i] + 8, _mm256_fmadd_ps(a1, sc1, f1));
    }
}

/* One task: rows [i0, i1) x panels [p0, p1); per panel the 6-row
 * micro-tiles run over all of k (the panel, k x 16 bytes, stays in L1). */
Q8_AVX2 static void q8_tile_ymm(const q8_block_fn *blocks, const float *xo, const uint8_t *A, size_t lda,
                                const float *sx, const int32_t *zp, const donto_qweight8 *W, const float *bias,
                                float *Y, size_t ldy, int i0, int i1, int p0, int p1) {
    _Alignas(32) int32_t acc[Q8_MR][Q8_NR];
    _Alignas(32) float facc[Q8_MR][Q8_NR];
    const int kq = W->kquads, gq = W->group / 4;
    const size_t npad = (size_t)W->npanels * Q8_NR;
    for (int p = p0; p < p1; p++) {
        const int8_t *bp = W->packed + (size_t)p * kq * 4 * Q8_NR;
        const int j0 = p * Q8_NR, nc = W->n - j0 < Q8_NR ? W->n - j0 : Q8_NR;
        for (int i = i0; i < i1; i++) {
            _mm_prefetch((const char *)(Y + (size_t)i * ldy + j0), _MM_HINT_T0);
            _mm_prefetch((const char *)(Y + (size_t)i * ldy + j0 + nc - 1), _MM_HINT_T0);
        }
        for (int i = i0; i < i1; i += Q8_MR) {
            const int r = i1 - i < Q8_MR ? i1 - i : Q8_MR;
            if (W->group) {
                for (int g = 0, t0 = 0; t0 < kq; g++, t0 += gq) {
                    blocks[r](A + (size_t)i * lda + 4 * (size_t)t0, lda, bp + (size_t)t0 * 4 * Q8_NR,
                              t0 + gq < kq ? gq : kq - t0, acc);
                    q8_flush(r, acc, W->gscale + (size_t)g * npad + j0, g == 0, facc);
                }
            } else {
                blocks[r](A + (size_t)i * lda, lda, bp, kq, acc);
            }
            q8_store(r, acc, W->group ? facc : NULL, sx + i, zp + i, W->colsum + j0, W->scale + j0,
                     bias ? bias + j0 : NULL, nc, Y + (size_t)i * ldy + j0, ldy, xo + (size_t)i * W->nout, W, j0);
        }
    }
}
/* ---- zmm kernels (every AVX-512 set) ------------------------------------------ */

/* One k quad of a 16-column panel is 16 x 4 int8 = 64 bytes: one zmm (the
 * ymm kernels load it as two halves). A micro-tile is MR <= 8 rows x NP <= 2
 * panels: 16 zmm accumulators, each vpdpbusd 64 u8 x s8 products, twice
 * the ymm kernel's per instruction. Its int32 sums wait in acc[8][32] (row
 * i, panel q at acc + 32 i + 16 q) for the epilogue. Without VNNI (the
 * avx512 set) the same tiles run the AVX2 kernel's three steps in zmm:
 * vpmaddubsw (u7 grid: no saturation), vpmaddwd with ones, vpaddd; 64
 * products per 3 instructions where the int16 kernel gets 32 per 2. */
#define Q8Z_MR 8
_Static_assert(Q8_MT % Q8Z_MR == 0, "a task's rows are whole zmm micro-tiles");
typedef void (*q8z_block_fn)(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride, int nquads,
                             int32_t *acc);

/* MR rows x NP panels over all nquads; panel q's weights at bp + q pstride. */
#define Q8Z_BLOCK_BODY(MAC)                                                               \
    __m512i c[Q8Z_MR][2];                                                                 \
    const uint8_t *ar[Q8Z_MR];                                                            \
    for (int i = 0; i < MR; i++) {                                                        \
        c[i][0] = c[i][1] = _mm512_setzero_si512();                                       \
        ar[i] = a + (size_t)i * lda;                                                      \
    }                                                                                     \
    for (int t = 0; t < nquads; t++) {                                                    \
        const int8_t *b = bp + (size_t)t * 4 * Q8_NR;                                     \
        const __m512i w0 = _mm512_load_si512((const void *)b);                            \
        const __m512i w1 = NP > 1 ? _mm512_load_si512((const void *)(b + pstride)) : w0;  \
        for (int i = 0; i < MR; i++) {                                                    \
            int32_t v;                                                                    \
            memcpy(&v, ar[i] + 4 * t, sizeof v);                                          \
            const __m512i x = _mm512_set1_epi32(v);                                       \
            c[i][0] = MAC(c[i][0], x, w0);                                                \
            if (NP > 1) c[i][1] = MAC(c[i][1], x, w1);                                    \
        }                                                                                 \
    }                                                                                     \
    for (int i = 0; i < MR; i++)                                                          \
        for (int q = 0; q < NP; q++) _mm512_store_si512((void *)(acc + 32 * i + 16 * q), c[i][q]);
#define Q8Z_MAC_VNNI(c, x, w) _mm512_dpbusd_epi32((c), (x), (w))
#define Q8Z_MAC_BW(c, x, w) _mm512_add_epi32((c), _mm512_madd_epi16(_mm512_maddubs_epi16((x), (w)), ones))

/* The full 8 x 32 block in assembly, as qgemm.c's qgz_block8_asm (with
 * intrinsics GCC copies accumulators every k step). zmm0-15 accumulators
 * (row r, panel q in zmm 2r+q, also its place in acc: byte offset 64
 * (2r+q)), zmm16-17 the two panels' weights of one k quad, zmm18 the
 * broadcast quad of one row. Rows 0-2 from pa, 3-5 from pb = pa + 3 lda,
 * 6-7 from pc = pa + 6 lda. */
#define Q8Z_ROW(base, idx, r0, r1)                                                   \
    "vpbroadcastd " base idx ", %%zmm18\n\t"                                          \
    "vpdpbusd %%zmm16, %%zmm18, %%zmm" #r0 "\n\t"                                     \
    "vpdpbusd %%zmm17, %%zmm18, %%zmm" #r1 "\n\t"
#define Q8Z_ST(r) "vmovdqa32 %%zmm" #r ", " #r "*64(%[f])\n\t"
/* SETUP runs once before the k loop (the block without VNNI makes its
 * ones there); both blocks declare zmm0-21 clobbered. */
#define Q8Z_BLOCK8_ASM(SETUP, ROW)                                                                                \
    const char *pa = (const char *)a, *pb = pa + 3 * lda, *pc = pa + 6 * lda;                                    \
    long n = nquads; /* >= 1: k >= 1 */                                                                           \
    __asm__ volatile(                                                                                             \
        KASM_ZERO_0_15                                                                                            \
        SETUP                                                                                                     \
        KASM_LOOP_8X32(ROW)                                                                                       \
        Q8Z_ST(0) Q8Z_ST(1) Q8Z_ST(2) Q8Z_ST(3) Q8Z_ST(4) Q8Z_ST(5) Q8Z_ST(6) Q8Z_ST(7)                           \
        Q8Z_ST(8) Q8Z_ST(9) Q8Z_ST(10) Q8Z_ST(11) Q8Z_ST(12) Q8Z_ST(13) Q8Z_ST(14) Q8Z_ST(15)                     \
        : [pa] "+r"(pa), [pb] "+r"(pb), [pc] "+r"(pc), [b] "+r"(bp), [n] "+r"(n)                                 \
        : [s] "r"(lda), [ps] "r"(pstride), [f] "r"(acc)                                                           \
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21");
Q8_AVX512VNNI static void q8z_block8_asm(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride, int nquads,
                                         int32_t *acc) {
    Q8Z_BLOCK8_ASM("", Q8Z_ROW)
}

/* The same block without VNNI: zmm19-20 the two products, zmm21 the ones
 * (all bits set, shifted right by 15 in each 16-bit lane). */
#define Q8ZB_ROW(base, idx, r0, r1)                                                  \
    "vpbroadcastd " base idx ", %%zmm18\n\t"                                          \
    "vpmaddubsw %%zmm16, %%zmm18, %%zmm19\n\t"                                        \
    "vpmaddubsw %%zmm17, %%zmm18, %%zmm20\n\t"                                        \
    "vpmaddwd %%zmm21, %%zmm19, %%zmm19\n\t"                                          \
    "vpmaddwd %%zmm21, %%zmm20, %%zmm20\n\t"                                          \
    "vpaddd %%zmm19, %%zmm" #r0 ", %%zmm" #r0 "\n\t"                                 \
    "vpaddd %%zmm20, %%zmm" #r1 ", %%zmm" #r1 "\n\t"
#define Q8ZB_ONES "vpternlogd $0xff, %%zmm21, %%zmm21, %%zmm21\n\tvpsrlw $15, %%zmm21, %%zmm21\n\t"
Q8_AVX512 static void q8zb_block8_asm(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride, int nquads,
                                      int32_t *acc) {
    Q8Z_BLOCK8_ASM(Q8ZB_ONES, Q8ZB_ROW)
}

#define Q8Z_DEF(R, N)                                                                                          \
    Q8_AVX512VNNI static void q8z_block_##R##_##N(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride, \
                                                 int nquads, int32_t *acc) {                                   \
        const int MR = R, NP = N;                                                                              \
        Q8Z_BLOCK_BODY(Q8Z_MAC_VNNI)                                                                           \
    }                                                                                                          \
    Q8_AVX512 static void q8zb_block_##R##_##N(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride,   \
                                               int nquads, int32_t *acc) {                                     \
        const int MR = R, NP = N;                                                                              \
        const __m512i ones = _mm512_set1_epi16(1);                                                             \
        Q8Z_BLOCK_BODY(Q8Z_MAC_BW)                                                                             \
    }
#define Q8Z_DEF_ROWS(R) Q8Z_DEF(R, 1) Q8Z_DEF(R, 2)
Q8Z_DEF_ROWS(1)
Q8Z_DEF_ROWS(2)
Q8Z_DEF_ROWS(3)
Q8Z_DEF_ROWS(4)
Q8Z_DEF_ROWS(5)
Q8Z_DEF_ROWS(6)
Q8Z_DEF_ROWS(7)
Q8Z_DEF(8, 1)
#define q8z_block_8_2 q8z_block8_asm
#define q8zb_block_8_2 q8zb_block8_asm
/* [rows][panels]: with VNNI, without */
static const q8z_block_fn q8z_blocks[Q8Z_MR + 1][3] = KTILE_TABLE_8X2(q8z_block);
static const q8z_block_fn q8zb_blocks[Q8Z_MR + 1][3] = KTILE_TABLE_8X2(q8zb_block);

/* The epilogue of q8_store_rows on NP panels of 16 columns: the same
 * operations in the same order per output, so the same bits; masked loads
 * and stores keep to the ncols (1..32) that exist. Both panels' outputs
 * stay in registers through the outlier channels, so each of a row's
 * gathered values (xo, row stride nout) is broadcast once for 2 x 16
 * columns. facc: the group scales' fp32 sums, or NULL for a scale per row
 * (acc); q8z_store's branches test it, so each inlined full tile has the
 * code of its own form. */
Q8_AVX512 static inline __attribute__((always_inline)) void q8z_store_rows(
    const int MR, const int NP, const int32_t *acc, const float *facc, const float *sx, const int32_t *zp,
    const int32_t *colsum, const float *sw, const float *bias, int ncols, float *y, size_t ldy, const float *xo,
    const donto_qweight8 *W, int j0) {
    const size_t npad = (size_t)W->npanels * Q8_NR;
    const int nout = W->nout;
    __m512 yv[Q8Z_MR][2];
    __mmask16 m[2];
    for (int q = 0; q < NP; q++) {
        const int nq = ncols - q * Q8_NR >= Q8_NR ? Q8_NR : ncols - q * Q8_NR; /* >= 1 */
        m[q] = ktile_mask16(nq);
        const __m512 swq = _mm512_loadu_ps(sw + q * Q8_NR);
        const __m512i csq = _mm512_loadu_si512((const void *)(colsum + q * Q8_NR));
        const __m512 bq = bias ? _mm512_maskz_loadu_ps(m[q], bias + q * Q8_NR) : _mm512_setzero_ps();
        const __m512 gcq = facc ? _mm512_loadu_ps(W->gcorr + j0 + q * Q8_NR) : _mm512_setzero_ps();
        for (int i = 0; i < MR; i++) {
            if (facc) { /* group scales: (f - zp * gcorr) * sx + bias */
                const __m512 t =
                    _mm512_fnmadd_ps(_mm512_set1_ps((float)zp[i]), gcq, _mm512_load_ps(facc + 32 * i + 16 * q));
                yv[i][q] = _mm512_fmadd_ps(t, _mm512_set1_ps(sx[i]), bq);
                continue;
            }
            const __m512i a = _mm512_sub_epi32(_mm512_load_si512((const void *)(acc + 32 * i + 16 * q)),
                                               _mm512_mullo_epi32(_mm512_set1_epi32(zp[i]), csq));
            yv[i][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(_mm512_set1_ps(sx[i]), swq), bq);
        }
    }
    for (int o = 0; o < nout; o++) {
        const float *wo = W->out_w + (size_t)o * npad + j0;
        const __m512 w0 = _mm512_loadu_ps(wo), w1 = NP > 1 ? _mm512_loadu_ps(wo + Q8_NR) : w0;
        for (int i = 0; i < MR; i++) {
            const __m512 xv = _mm512_set1_ps(xo[(size_t)i * nout + o]);
            yv[i][0] = _mm512_fmadd_ps(xv, w0, yv[i][0]);
            if (NP > 1) yv[i][1] = _mm512_fmadd_ps(xv, w1, yv[i][1]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int q = 0; q < NP; q++) _mm512_mask_storeu_ps(y + (size_t)i * ldy + q * Q8_NR, m[q], yv[i][q]);
}

/* Full 8-row tiles with constant counts (the outputs stay in registers),
 * the short last tile of a task with a variable row count. */
Q8_AVX512 static void q8z_store(int MR, int NP, const int32_t *acc, const float *facc, const float *sx,
                                const int32_t *zp, const int32_t *colsum, const float *sw, const float *bias, int ncols,
                                float *y, size_t ldy, const float *xo, const donto_qweight8 *W, int j0) {
    if (MR == Q8Z_MR && NP == 2 && !facc)
        q8z_store_rows(Q8Z_MR, 2, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
    else if (MR == Q8Z_MR && NP == 2) /* group scales without VNNI */
        q8z_store_rows(Q8Z_MR, 2, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
    else if (MR == 6 && NP == 2 && facc) /* the tiles of group scales on VNNI */
        q8z_store_rows(6, 2, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
    else q8z_store_rows(MR, NP, acc, facc, sx, zp, colsum, sw, bias, ncols, y, ldy, xo, W, j0);
}

/* q8_flush on MR rows x NP panels of the zmm tile (row i, panel q at
 * 32 i + 16 q). */
Q8_AVX512 static void q8z_flush(int MR, int NP, const int32_t *acc, const float *gsc, int first, float *f) {
    for (int q = 0; q < NP; q++) {
        const __m512 sc = _mm512_loadu_ps(gsc + 16 * q);
        for (int i = 0; i < MR; i++) {
            float *fr = f + 32 * i + 16 * q;
            const __m512 a = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(acc + 32 * i + 16 * q)));
            _mm512_store_ps(fr, _mm512_fmadd_ps(a, sc, first ? _mm512_setzero_ps() : _mm512_load_ps(fr)));
        }
    }
}

/* The full 6 x 32 tile with group scales, flushed in registers (VNNI):
 * zmm0-11 the int32 sums of the current group (row r, panel q: zmm 2r+q),
 * zmm12-23 the fp32 sums f (zmm 12+2r+q), zmm24-25 the two panels' weights
 * of one k quad, zmm26 the broadcast quad. Per group and output,
 * q8z_flush's f += float(acc) * gscale (vcvtdq2ps, vfmadd231ps with the
 * group's scales at g and g + 64 bytes). fb: f out, [6][32] floats. */
#define Q8G_ROW(base, idx, r0, r1)                                                   \
    "vpbroadcastd " base idx ", %%zmm26\n\t"                                          \
    "vpdpbusd %%zmm24, %%zmm26, %%zmm" #r0 "\n\t"                                     \
    "vpdpbusd %%zmm25, %%zmm26, %%zmm" #r1 "\n\t"
#define Q8G_FL(sc, a, f)                                                                 \
    "vcvtdq2ps %%zmm" #a ", %%zmm" #a "\n\t"                                             \
    "vfmadd231ps " #sc "(%[g]), %%zmm" #a ", %%zmm" #f "\n\t"
#define Q8G_FLUSH                                                                                        \
    Q8G_FL(0, 0, 12) Q8G_FL(64, 1, 13) Q8G_FL(0, 2, 14) Q8G_FL(64, 3, 15) Q8G_FL(0, 4, 16)              \
    Q8G_FL(64, 5, 17) Q8G_FL(0, 6, 18) Q8G_FL(64, 7, 19) Q8G_FL(0, 8, 20) Q8G_FL(64, 9, 21)             \
    Q8G_FL(0, 10, 22) Q8G_FL(64, 11, 23)
#define Q8G_ZF(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define Q8G_ZERO_F                                                                                       \
    Q8G_ZF(12) Q8G_ZF(13) Q8G_ZF(14) Q8G_ZF(15) Q8G_ZF(16) Q8G_ZF(17) Q8G_ZF(18) Q8G_ZF(19) Q8G_ZF(20) \
    Q8G_ZF(21) Q8G_ZF(22) Q8G_ZF(23)
#define Q8G_STF(r, off) "vmovaps %%zmm" #r ", " #off "(%[fb])\n\t"
#define Q8G_STORE_F                                                                                           \
    Q8G_STF(12, 0) Q8G_STF(13, 64) Q8G_STF(14, 128) Q8G_STF(15, 192) Q8G_STF(16, 256) Q8G_STF(17, 320)       \
    Q8G_STF(18, 384) Q8G_STF(19, 448) Q8G_STF(20, 512) Q8G_STF(21, 576) Q8G_STF(22, 640) Q8G_STF(23, 704)
#define Q8G_CLOBBERS                                                                                             \
    "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",     \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", \
        "xmm23", "xmm24", "xmm25", "xmm26"
Q8_AVX512VNNI static void q8g_block6_asm(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride,
                                         int nquads, int gquads, const float *gp, size_t gstride, float *fb) {
    const char *pa = (const char *)a, *pb = pa + 3 * lda;
    long rem = nquads, n = 0, gq = gquads;
    __asm__ volatile(
        Q8G_ZERO_F
        "2:\n\t"
        KASM_ZERO_0_11
        "mov %[gq], %[n]\n\t"
        "cmp %[n], %[rem]\n\t"
        "cmovl %[rem], %[n]\n\t"
        "sub %[n], %[rem]\n\t"
        KASM_LOOP_6X32(Q8G_ROW)
        Q8G_FLUSH
        "add %[gs], %[g]\n\t"
        "test %[rem], %[rem]\n\t"
        "jnz 2b\n\t"
        Q8G_STORE_F
        : [pa] "+r"(pa), [pb] "+r"(pb), [b] "+r"(bp), [n] "+r"(n), [rem] "+r"(rem), [g] "+r"(gp)
        : [s] "r"(lda), [ps] "r"(pstride), [gq] "r"(gq), [gs] "r"(gstride), [fb] "r"(fb)
        : Q8G_CLOBBERS);
}

/* The same for groups of 64 (16 k quads) over a k of whole groups, the
 * group's quads unrolled: a loop of 16 left on a misprediction at every
 * group's end, which took ~10% of the forward with groups of 64. Quad i
 * reads its weights 64 i bytes on and its activations 4 i. */
#define Q8G_QUAD(i)                                                                                          \
    "vmovdqa64 64*" #i "(%[b]), %%zmm24\n\t"                                                               \
    "vmovdqa64 64*" #i "(%[b],%[ps],1), %%zmm25\n\t"                                                       \
    KASM_ROWS_6_AT(Q8G_ROW, "4*" #i)
Q8_AVX512VNNI static void q8g64_block6_asm(const uint8_t *a, size_t lda, const int8_t *bp, size_t pstride,
                                           int ngroups, const float *gp, size_t gstride, float *fb) {
    const char *pa = (const char *)a, *pb = pa + 3 * lda;
    long ng = ngroups; /* >= 1 */
    __asm__ volatile(
        Q8G_ZERO_F
        "2:\n\t"
        KASM_ZERO_0_11
        Q8G_QUAD(0) Q8G_QUAD(1) Q8G_QUAD(2) Q8G_QUAD(3) Q8G_QUAD(4) Q8G_QUAD(5) Q8G_QUAD(6) Q8G_QUAD(7)
        Q8G_QUAD(8) Q8G_QUAD(9) Q8G_QUAD(10) Q8G_QUAD(11) Q8G_QUAD(12) Q8G_QUAD(13) Q8G_QUAD(14) Q8G_QUAD(15)
        "add $64, %[pa]\n\t"
        "add $64, %[pb]\n\t"
        "add $1024, %[b]\n\t"
        Q8G_FLUSH
        "add %[gs], %[g]\n\t"
        "dec %[ng]\n\t"
        "jnz 2b\n\t"
        Q8G_STORE_F
        : [pa] "+r"(pa), [pb] "+r"(pb), [b] "+r"(bp), [ng] "+r"(ng), [g] "+r"(gp)
        : [s] "r"(lda), [ps] "r"(pstride), [gs] "r"(gstride), [fb] "r"(fb)
        : Q8G_CLOBBERS);
}

/* One task: rows [i0, i1) x panels [p0, p1); per pair of panels the 8-row
 * micro-tiles run over all of k (the pair's weights, k x 32 bytes, stay
 * in L1); an odd last panel runs alone. */
Q8_AVX512 static void q8_tile_zmm(const q8z_block_fn (*blocks)[3], const float *xo, const uint8_t *A, size_t lda,
                                  const float *sx, const int32_t *zp, const donto_qweight8 *W, const float *bias,
                                  float *Y, size_t ldy, int i0, int i1, int p0, int p1) {
    _Alignas(64) int32_t acc[Q8Z_MR * 2 * Q8_NR];
    _Alignas(64) float facc[Q8Z_MR * 2 * Q8_NR];
    const int kq = W->kquads, gq = W->group / 4;
    const size_t npad = (size_t)W->npanels * Q8_NR;
    /* group scales on VNNI: 6-row tiles, the full ones flushed in registers */
    const int g6 = W->group && blocks == q8z_blocks, mr = g6 ? 6 : Q8Z_MR;
    const size_t pstride = (size_t)kq * 4 * Q8_NR;
    for (int p = p0; p < p1; p += 2) {
        const int np = p1 - p >= 2 ? 2 : 1;
        const int8_t *bp = W->packed + (size_t)p * pstride;
        const int j0 = p * Q8_NR, nc = W->n - j0 < np * Q8_NR ? W->n - j0 : np * Q8_NR;
        for (int i = i0; i < i1; i += mr) {
            const int r = i1 - i < mr ? i1 - i : mr;
            if (g6 && r == 6 && np == 2 && gq == 16 && kq % 16 == 0) {
                q8g64_block6_asm(A + (size_t)i * lda, lda, bp, pstride, kq / 16, W->gscale + j0, npad * sizeof(float),
                                 facc);
            } else if (g6 && r == 6 && np == 2) {
                q8g_block6_asm(A + (size_t)i * lda, lda, bp, pstride, kq, gq, W->gscale + j0, npad * sizeof(float), facc);
            } else if (W->group) {
                for (int g = 0, t0 = 0; t0 < kq; g++, t0 += gq) {
                    blocks[r][np](A + (size_t)i * lda + 4 * (size_t)t0, lda, bp + (size_t)t0 * 4 * Q8_NR, pstride,
                                  t0 + gq < kq ? gq : kq - t0, acc);
                    q8z_flush(r, np, acc, W->gscale + (size_t)g * npad + j0, g == 0, facc);
                }
            } else {
                blocks[r][np](A + (size_t)i * lda, lda, bp, pstride, kq, acc);
            }
            q8z_store(r, np, acc, W->group ? facc : NULL, sx + i, zp + i, W->colsum + j0, W->scale + j0,
                      bias ? bias + j0 : NULL, nc, Y + (size_t)i * ldy + j0, ldy, xo + (size_t)i * W->nout, W, j0);
        }
    }
}
#endif /* Q8_X86 */

int donto_qgemm8_xmax(donto_isa isa) {
    return cpu_isa_vnni(cpu_isa_runnable(isa)) ? DONTO_QGEMM8_XMAX_VNNI : DONTO_QGEMM8_XMAX;
}

void donto_qgemm8_isa(const float *X, int m, int k, int ldx, const donto_qweight8 *W, const float *bias, float *Y,
                      int ldy, void *scratch, int nthreads, donto_isa isa) {
    donto_qgemm8_grid(X, m, k, ldx, W, bias, Y, ldy, scratch, nthreads, isa, donto_qgemm8_xmax(isa));
}

void donto_qgemm8_grid(const float *X, int m, int k, int ldx, const donto_qweight8 *W, const float *bias, float *Y,
                       int ldy, void *scratch, int nthreads, donto_isa isa, int xmax) {
    if (m <= 0) return;
    assert(W && W->packed && k == W->k && ldx >= k && ldy >= W->n && scratch && X && Y);
    assert(xmax == DONTO_QGEMM8_XMAX || xmax == DONTO_QGEMM8_XMAX_VNNI);
    (void)k;
    isa = cpu_isa_runnable(isa);
    /* vpmaddubsw would saturate past XMAX: the portable path then */
    if (xmax > DONTO_QGEMM8_XMAX && !cpu_isa_vnni(isa)) isa = DONTO_ISA_PORTABLE;
    const int simd = isa >= DONTO_ISA_AVX2;
    const int n = W->n, npanels = W->npanels;
    const size_t lda = q8_lda(W->k);
    uint8_t *A = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *sx = (float *)(A + q8_al((size_t)m * lda));
    int32_t *zp = (int32_t *)((char *)sx + q8_al((size_t)m * 4));
    float *xo = (float *)((char *)zp + q8_al((size_t)m * 4)); /* [m][nout] */
    const int nout = W->nout;
    const int mtiles = (m + Q8_MT - 1) / Q8_MT, ntiles = simd ? (npanels + Q8_NTP - 1) / Q8_NTP : 1;
    const int ntasks = mtiles * ntiles;
    int nt = nthreads > 0 ? nthreads : omp_get_max_threads();
    if (nt > ntasks) nt = ntasks;
    if ((double)m * n * W->k < 1e6) nt = 1;
#ifdef Q8_X86
    const q8_block_fn *blocks = isa == DONTO_ISA_AVXVNNI ? q8_blocks_avxvnni : q8_blocks_avx2;
#endif

#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(dynamic, 16)
        for (int i = 0; i < m; i++) {
            const float *x = X + (size_t)i * (size_t)ldx;
            uint8_t *q = A + (size_t)i * lda;
            for (int o = 0; o < nout; o++) xo[(size_t)i * nout + o] = x[W->out_idx[o]];
#ifdef Q8_X86
            if (simd && i + 2 < m) ktile_prefetch_row(x + 2 * (size_t)ldx, W->k);
            if (cpu_isa_zmm(isa)) /* any grid: xmax is a parameter */
                sx[i] = q8_quant_row_zmm(x, W->keep, W->k, xmax, q, 4 * W->kquads, &zp[i]);
            else if (simd)
                sx[i] = q8_quant_row_avx2(x, W->keep, W->k, xmax, q, 4 * W->kquads, &zp[i]);
            else
#endif
                sx[i] = q8_quant_row_scalar(x, W->keep, W->k, xmax, q, 4 * W->kquads, &zp[i]);
        }
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < ntasks; t++) {
            const int ti = t / ntiles, tj = t % ntiles;
            const int i0 = ti * Q8_MT, i1 = i0 + Q8_MT < m ? i0 + Q8_MT : m;
            const int p0 = simd ? tj * Q8_NTP : 0;
            const int p1 = simd && p0 + Q8_NTP < npanels ? p0 + Q8_NTP : npanels;
#ifdef Q8_X86
            if (cpu_isa_zmm(isa))
                q8_tile_zmm(cpu_isa_vnni(isa) ? q8z_blocks : q8zb_blocks, xo, A, lda, sx, zp, W, bias, Y,
                            (size_t)ldy, i0, i1, p0, p1);
            else if (simd)
                q8_tile_ymm(blocks, xo, A, lda, sx, zp, W, bias, Y, (size_t)ldy, i0, i1, p0, p1);
            else
#endif
                q8_tile_portable(X, (size_t)ldx, A, lda, sx, zp, W, bias, Y, (size_t)ldy, i0, i1); /* every panel */
            (void)p0, (void)p1;
        }
    }
}

const char *donto_qgemm8_kernel_name(donto_isa isa) {
    switch (cpu_isa_runnable(isa)) {
    case DONTO_ISA_AVX512BF16:
    case DONTO_ISA_AVX512VNNI: return "int8 u8 vpdpbusd zmm 8x32";
    case DONTO_ISA_AVXVNNI: return "int8 u8 vpdpbusd ymm 6x16";
    case DONTO_ISA_AVX512: return "int8 u7 vpmaddubsw zmm 8x32";
    case DONTO_ISA_AVX2: return "int8 u7 vpmaddubsw ymm 6x16";
    default: return "int8 u7 portable C";
    }
}

const char *donto_qgemm8_group_kernel_name(donto_isa isa) {
    return cpu_isa_zmm(cpu_isa_runnable(isa)) && cpu_isa_vnni(cpu_isa_runnable(isa)) ? "int8 u8 vpdpbusd zmm 6x32"
                                                                                      : donto_qgemm8_kernel_name(isa);
}
