/*
 * bf16 GEMM with packed weights: an AVX-512 BF16 kernel (vdpbf16ps) and the
 * same arithmetic in plain C (bgemm.h has the contract).
 *
 * Layout and blocking (the zmm fp32 kernel's, fgemm.c, on pairs of k)
 * -------------------------------------------------------------------
 *  - W rounded and packed at init into panels of 16 output columns: for
 *    each pair of k, the 16 columns' two bf16 weights are one 32-bit lane,
 *    so a pair of a panel is one zmm (64 bytes).
 *  - X rounded per call into the scratch, a row of pairs per input row
 *    (vcvtne2ps2bf16: 32 floats per instruction).
 *  - Micro-kernel: 8 rows x 2 panels = 16 zmm accumulators; per pair of k
 *    2 loads of W and 8 broadcasts of an X pair (vpbroadcastd from memory)
 *    feed 16 vdpbf16ps, each 32 multiply-adds: twice the work of the fp32
 *    kernel's vfmadd231ps per instruction. Rows < 8 and a single panel use
 *    the same loop; a partial panel is masked on load and store.
 *  - k blocks of BG_KC pairs outer (a pair of panels' slice, BG_KC x 128 B,
 *    stays in L1 while the call's row tiles stream past it), then pairs of
 *    panels, then 8-row tiles. The accumulators start from the bias (first
 *    block) or from Y (the others), so the blocking does not change the
 *    order of the operations.
 *  - The plain C path does the same operations in the same order on the
 *    same packed operands, so every set gives the same bits (test_bgemm).
 *    It is a reference, not a fast path: the encoder takes this GEMM only
 *    on the avx512bf16 set (donto_bgemm_native).
 */
#include "bgemm.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "kern_tile.h"

#if defined(__x86_64__) || defined(__i386__)
#define BG_X86 1
#include <immintrin.h>
#define BG_BF16 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#endif

#define BG_NR DONTO_BGEMM_NR
#define BG_MR 8
#ifndef BG_KC
#define BG_KC 128 /* pairs of k per block: a pair of panels' slice is BG_KC * 128 bytes = 16 KB */
#endif

/* ---- bf16 values ---------------------------------------------------------- */

uint16_t donto_bf16_from_f32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16); /* quiet NaN */
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;                                     /* subnormal: zero */
    u += 0x7fffu + ((u >> 16) & 1u);                                                  /* nearest, ties even */
    return (uint16_t)(u >> 16);
}

float donto_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* A subnormal read or written as zero of its sign. */
static inline float bg_ftz(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }

/* u32 lanes per row of X's pairs in the scratch: 64-byte rows */
static size_t bg_lda(int k) { return ((size_t)(k + 1) / 2 + 15) & ~(size_t)15; }

size_t donto_bgemm_scratch(int m, int k) {
    if (m <= 0 || k <= 0) return 64;
    return (size_t)m * bg_lda(k) * sizeof(uint32_t) + 64;
}

int donto_bweight_init(donto_bweight *w, const float *W, int n, int k, donto_err *err) {
    memset(w, 0, sizeof *w);
    if (n <= 0 || k <= 0) return donto_seterr(err, "bweight: bad shape [%d, %d]", n, k);
    if (!W) return donto_seterr(err, "bweight: no weights for shape [%d, %d]", n, k);
    const int npanels = (int)(((long)n + BG_NR - 1) / BG_NR), kpairs = (int)(((long)k + 1) / 2);
    const size_t nval = (size_t)npanels * (size_t)kpairs * BG_NR;
    uint32_t *p = donto_aligned_alloc(nval * sizeof(uint32_t));
    if (!p) return donto_seterr(err, "bweight: out of memory packing [%d, %d]", n, k);
    memset(p, 0, nval * sizeof(uint32_t));
    for (int j = 0; j < n; j++) {
        const float *row = W + (size_t)j * (size_t)k;
        uint32_t *dst = p + (size_t)(j / BG_NR) * kpairs * BG_NR + (size_t)(j % BG_NR);
        for (int c = 0; c < k; c++)
            dst[(size_t)(c / 2) * BG_NR] |= (uint32_t)donto_bf16_from_f32(row[c]) << (c % 2 ? 16 : 0);
    }
    w->n = n, w->k = k, w->kpairs = kpairs, w->npanels = npanels, w->packed = p;
    return 0;
}

void donto_bweight_free(donto_bweight *w) {
    if (!w) return;
    free(w->packed);
    memset(w, 0, sizeof *w);
}

/* ---- plain C: the arithmetic, spelled out ---------------------------------- */

static void bg_round_rows(const float *X, int m, int k, size_t ldx, uint32_t *A, size_t lda) {
    for (int i = 0; i < m; i++) {
        const float *x = X + (size_t)i * ldx;
        uint32_t *a = A + (size_t)i * lda;
        memset(a, 0, lda * sizeof *a);
        for (int c = 0; c < k; c++) a[c / 2] |= (uint32_t)donto_bf16_from_f32(x[c]) << (c % 2 ? 16 : 0);
    }
}

static void bg_portable(const uint32_t *A, size_t lda, int m, const donto_bweight *W, const float *bias, float *Y,
                        size_t ldy) {
    const int kp = W->kpairs;
    for (int i = 0; i < m; i++) {
        const uint32_t *a = A + (size_t)i * lda;
        for (int p = 0; p < W->npanels; p++) {
            const uint32_t *bp = W->packed + (size_t)p * kp * BG_NR;
            const int j0 = p * BG_NR, nc = W->n - j0 < BG_NR ? W->n - j0 : BG_NR;
            float acc[BG_NR];
            for (int c = 0; c < BG_NR; c++) acc[c] = bias && c < nc ? bg_ftz(bias[j0 + c]) : 0.0f;
            for (int t = 0; t < kp; t++) {
                const float xlo = donto_bf16_to_f32((uint16_t)a[t]), xhi = donto_bf16_to_f32((uint16_t)(a[t] >> 16));
                for (int c = 0; c < BG_NR; c++) {
                    const uint32_t wv = bp[(size_t)t * BG_NR + c];
                    acc[c] = bg_ftz(fmaf(xhi, donto_bf16_to_f32((uint16_t)(wv >> 16)), acc[c]));
                    acc[c] = bg_ftz(fmaf(xlo, donto_bf16_to_f32((uint16_t)wv), acc[c]));
                }
            }
            memcpy(Y + (size_t)i * ldy + j0, acc, (size_t)nc * sizeof(float));
        }
    }
}

/* ---- AVX-512 BF16 ----------------------------------------------------------- */
#ifdef BG_X86
/* X rows to pairs: 32 floats per vcvtne2ps2bf16 (masked loads past k read
 * zeros, which is the padding of an odd k and of the row). */
BG_BF16 static void bg_round_rows_zmm(const float *X, int m, int k, size_t ldx, uint32_t *A, size_t lda) {
    for (int i = 0; i < m; i++) {
        const float *x = X + (size_t)i * ldx;
        uint32_t *a = A + (size_t)i * lda;
        for (int c = 0; c < k; c += 32) {
            const int left = k - c;
            const __mmask16 mlo = ktile_mask16(left);
            const __mmask16 mhi = ktile_mask16(left - 16);
            const __m512 lo = _mm512_maskz_loadu_ps(mlo, x + c), hi = _mm512_maskz_loadu_ps(mhi, x + c + 16);
            _mm512_storeu_si512((void *)(a + c / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* One MR x (NP x 16) tile over pairs [0, kc) of the panel slices bp and
 * bp + pstride: start from init (the bias) on the first block, else from y;
 * masked by m0 / m1 (the columns of each panel) on load and store. */
BG_BF16 static inline __attribute__((always_inline)) void bgz_tile(const int MR, const int NP, const uint32_t *a,
                                                                  size_t lda, const uint32_t *bp, size_t pstride,
                                                                  int kc, const float *init, int first, float *y,
                                                                  size_t ldy, __mmask16 m0, __mmask16 m1) {
    /* named accumulators, as fgemm.c's tiles (GCC keeps an array of vectors in memory) */
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = c60 = c61 = c70 = c71 =
        _mm512_setzero_ps();
#define BGZ_INIT(r)                                                                                              \
    if (MR > r) {                                                                                                \
        if (!first) {                                                                                            \
            c##r##0 = _mm512_maskz_loadu_ps(m0, y + (size_t)(r) * ldy);                                          \
            if (NP > 1) c##r##1 = _mm512_maskz_loadu_ps(m1, y + (size_t)(r) * ldy + BG_NR);                      \
        } else if (init) {                                                                                       \
            c##r##0 = _mm512_maskz_loadu_ps(m0, init);                                                           \
            if (NP > 1) c##r##1 = _mm512_maskz_loadu_ps(m1, init + BG_NR);                                       \
        }                                                                                                        \
    }
    BGZ_INIT(0) BGZ_INIT(1) BGZ_INIT(2) BGZ_INIT(3) BGZ_INIT(4) BGZ_INIT(5) BGZ_INIT(6) BGZ_INIT(7)
#undef BGZ_INIT
    const uint32_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda,
                   *a5 = a + 5 * lda, *a6 = a + 6 * lda, *a7 = a + 7 * lda;
    const uint32_t *bq = bp + pstride;
#pragma GCC unroll 4
    for (int t = 0; t < kc; t++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(bp + (size_t)t * BG_NR));
        const __m512bh b1 = NP > 1 ? (__m512bh)_mm512_load_si512((const void *)(bq + (size_t)t * BG_NR)) : b0;
        __m512bh x;
#define BGZ_ROW(r)                                                                                               \
    if (MR > r) {                                                                                                \
        x = (__m512bh)_mm512_set1_epi32((int)a##r[t]);                                                           \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, x, b0);                                                              \
        if (NP > 1) c##r##1 = _mm512_dpbf16_ps(c##r##1, x, b1);                                                  \
    }
        BGZ_ROW(0) BGZ_ROW(1) BGZ_ROW(2) BGZ_ROW(3) BGZ_ROW(4) BGZ_ROW(5) BGZ_ROW(6) BGZ_ROW(7)
#undef BGZ_ROW
    }
#define BGZ_STORE(r)                                                                                             \
    if (MR > r) {                                                                                                \
        _mm512_mask_storeu_ps(y + (size_t)(r) * ldy, m0, c##r##0);                                               \
        if (NP > 1) _mm512_mask_storeu_ps(y + (size_t)(r) * ldy + BG_NR, m1, c##r##1);                           \
    }
    BGZ_STORE(0) BGZ_STORE(1) BGZ_STORE(2) BGZ_STORE(3) BGZ_STORE(4) BGZ_STORE(5) BGZ_STORE(6) BGZ_STORE(7)
#undef BGZ_STORE
}

typedef void (*bgz_tile_fn)(const uint32_t *a, size_t lda, const uint32_t *bp, size_t pstride, int kc,
                            const float *init, int first, float *y, size_t ldy, __mmask16 m0, __mmask16 m1);
#define BGZ_DEF_TILE(R, N)                                                                                       \
    BG_BF16 static void bgz_tile_##R##_##N(const uint32_t *a, size_t lda, const uint32_t *bp, size_t pstride,     \
                                           int kc, const float *init, int first, float *y, size_t ldy,           \
                                           __mmask16 m0, __mmask16 m1) {                                         \
        bgz_tile(R, N, a, lda, bp, pstride, kc, init, first, y, ldy, m0, m1);                                    \
    }
#define BGZ_DEF_ROWS(R) BGZ_DEF_TILE(R, 1) BGZ_DEF_TILE(R, 2)
BGZ_DEF_ROWS(1)
BGZ_DEF_ROWS(2)
BGZ_DEF_ROWS(3)
BGZ_DEF_ROWS(4)
BGZ_DEF_ROWS(5)
BGZ_DEF_ROWS(6)
BGZ_DEF_ROWS(7)
BGZ_DEF_ROWS(8)
/* [rows][panels] */
static const bgz_tile_fn bgz_tiles[BG_MR + 1][3] = KTILE_TABLE_8X2(bgz_tile);

BG_BF16 static void bg_zmm(const uint32_t *A, size_t lda, int m, const donto_bweight *W, const float *bias, float *Y,
                           size_t ldy) {
    const int kp = W->kpairs;
    const size_t pstride = (size_t)kp * BG_NR;
    for (int k0 = 0; k0 < kp; k0 += BG_KC) {
        const int kc = kp - k0 < BG_KC ? kp - k0 : BG_KC, first = k0 == 0;
        for (int p = 0; p < W->npanels; p += 2) {
            const int np = W->npanels - p >= 2 ? 2 : 1;
            const uint32_t *bp = W->packed + (size_t)p * pstride + (size_t)k0 * BG_NR;
            const int j0 = p * BG_NR, nc = W->n - j0 < np * BG_NR ? W->n - j0 : np * BG_NR;
            const int n0 = nc < BG_NR ? nc : BG_NR, n1 = nc - n0; /* columns in each panel */
            const __mmask16 m0 = ktile_mask16(n0);
            const __mmask16 m1 = ktile_mask16(n1);
            const float *init = bias ? bias + j0 : NULL;
            for (int i = 0; i < m; i += BG_MR) {
                const int mr = m - i < BG_MR ? m - i : BG_MR;
                bgz_tiles[mr][np](A + (size_t)i * lda + k0, lda, bp, pstride, kc, init, first, Y + (size_t)i * ldy + j0,
                                  ldy, m0, m1);
            }
        }
    }
}
#endif

/* ---- how fast vdpbf16ps is here -------------------------------------------- */

#ifdef BG_X86
#define BG_PROBE_ITERS 2048 /* x 16 instructions: 32K per timed run */
/* Seconds for BG_PROBE_ITERS x 16 independent vfmadd231ps zmm (which = 0)
 * or vdpbf16ps zmm (which = 1), the best of 5 runs. */
BG_BF16 static double bg_probe_run(int which) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        __m512 c[16];
        for (int r = 0; r < 16; r++) c[r] = _mm512_set1_ps((float)r);
        const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-3f);
        const __m512bh ab = (__m512bh)_mm512_set1_epi32(0x3f803f80), bb = (__m512bh)_mm512_set1_epi32(0x3a833a83);
        const double t0 = donto_now();
        for (int it = 0; it < BG_PROBE_ITERS; it++) {
            if (which)
                for (int r = 0; r < 16; r++) c[r] = _mm512_dpbf16_ps(c[r], ab, bb);
            else
                for (int r = 0; r < 16; r++) c[r] = _mm512_fmadd_ps(a, b, c[r]);
            __asm__ volatile("" : "+v"(c[0]), "+v"(c[5]), "+v"(c[10]), "+v"(c[15]));
        }
        const double t = donto_now() - t0;
        __m512 sum = c[0];
        for (int r = 1; r < 16; r++) sum = _mm512_add_ps(sum, c[r]);
        volatile float sink = _mm512_reduce_add_ps(sum);
        (void)sink;
        if (t < best) best = t;
    }
    return best;
}
#endif

static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static double g_probe_ratio;

static void bg_probe(void) {
#ifdef BG_X86
    if (!cpu_isa_supported(DONTO_ISA_AVX512BF16)) return;
    (void)bg_probe_run(0); /* warm the 512-bit units up */
    const double fma = bg_probe_run(0), dp = bg_probe_run(1);
    g_probe_ratio = fma > 0 ? dp / fma : 0;
#endif
}

double donto_bgemm_probe(void) {
    pthread_once(&g_probe_once, bg_probe);
    return g_probe_ratio;
}

void donto_bgemm_isa(const float *X, int m, int ldx, const donto_bweight *W, const float *bias, float *Y, int ldy,
                     void *scratch, donto_isa isa) {
    if (m <= 0) return;
    const size_t lda = bg_lda(W->k);
    uint32_t *A = (uint32_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
#ifdef BG_X86
    if (donto_bgemm_native(isa)) {
        bg_round_rows_zmm(X, m, W->k, (size_t)ldx, A, lda);
        bg_zmm(A, lda, m, W, bias, Y, (size_t)ldy);
        return;
    }
#endif
    bg_round_rows(X, m, W->k, (size_t)ldx, A, lda);
    bg_portable(A, lda, m, W, bias, Y, (size_t)ldy);
}

int donto_bgemm_native(donto_isa isa) { return cpu_isa_bf16(cpu_isa_runnable(isa)); }

const char *donto_bgemm_kernel_name(donto_isa isa) {
    return donto_bgemm_native(isa) ? "bf16 vdpbf16ps zmm 8x32" : "bf16 plain C";
}
