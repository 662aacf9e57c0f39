/*
 * fp32 GEMM with packed weights: an AVX2+FMA kernel, its AVX-512 twin and
 * the same arithmetic in plain C (see fgemm.h for the contract).
 *
 * Layout and blocking
 * -------------------
 *  - W packed at init into panels of 16 output columns: for each k, the 16
 *    columns' weights are 64 contiguous bytes (two ymm), zero padded past n.
 *  - Micro-kernel: 6 rows x 16 columns = 12 ymm accumulators, 2 ymm of
 *    weights, 1 broadcast of x (vbroadcastss from memory, a load-port op):
 *    per k, 2 loads + 6 broadcasts feed 12 FMAs.  Zen 3 issues 2 FMAs per
 *    cycle, so that is 6 cycles of FMA against 4 of loads: FMA-bound, as
 *    OpenBLAS's own Zen kernel is.  Rows < 6 use the same loop for 1..5
 *    rows; a partial last panel goes through a 16-column bounce row.
 *  - Per call: k blocks of FG_KC outer (a panel's k-slice, FG_KC x 64 B =
 *    16 KB, stays in L1 while every 6-row tile of the call streams past
 *    it), then panels, then tiles.  The accumulators start from the bias
 *    (first block) or from Y (the blocks after it), so blocking does not
 *    change the order of the fmas: y = bias, then fma over c = 0 .. k-1.
 *    In the forward (96-row calls, 2,000 claims, 2 threads) FG_KC 256 ran
 *    394-398 items/s against 383-391 for 128 and 380-383 for 384 (no
 *    blocking at k = 384); packing X's tile rows per block (6 floats per
 *    k, contiguous broadcasts) was slower (352-369: the transposing copy
 *    costs more than it saves), and prefetching the tile's Y lines changed
 *    nothing.
 *    On the Emerald Rapids Xeon (zmm kernel, 2026-12-07) FG_KC 512 against
 *    256: bench_fgemm 0-4% faster at 96 rows, the fp32 forward on 2,000
 *    claims a median 601 against 572 items/s over five interleaved runs
 *    whose spread (483-651) is wider than that: not changed.
 *  - The plain C path does the same fmaf()s in the same order, so it gives
 *    the same bits (test_fgemm); it is only a fallback, far slower than
 *    OpenBLAS, and the encoder never picks it (donto_fgemm_preferred).
 *
 * Why own it (measured on the 2-core Zen 3, 2026-12-05; docs/engine.md):
 * OpenBLAS's kernel is about as fast as this one, but every cblas_sgemm
 * call packs W again and needs Y seeded with the bias; in the fp32 forward
 * that was 7.1% of all samples.  One thread (bench_fgemm,
 * bench/results/fgemm-2026-12-05.txt): 92-99 GFLOP/s, 1.11-1.13x OpenBLAS
 * at the forward's 96-row calls, 1.00-1.06x at 256 and 1.61-1.63x at 16;
 * the whole fp32 forward gained ~4% (medians of interleaved runs).
 *
 * The AVX-512 sets run a zmm twin: one zmm per k of a panel, tiles of 8
 * rows x 2 panels (16 accumulators; 2 loads of W and 8 broadcasts per 16
 * FMAs), pairs of panels per k block, masked loads and stores for a
 * partial panel instead of a bounce row. Ice Lake Xeon, one thread
 * (bench_fgemm, bench/results/fgemm-icx-2026-12-06.txt, two runs):
 * 102-153 GFLOP/s (17 of 24 rows at 128-153: this VM's speed varies),
 * 1.04-1.25x OpenBLAS's SkylakeX sgemm at 256 rows, 1.20-1.39x at 96,
 * 2.2-2.5x at 16; the fp32 forward at 2 threads ran 440 -> 508 items/s on
 * 2,000 claims and 25.3 -> 28.7 on 100 chunks (medians of three
 * interleaved runs), so the encoder takes it on every SIMD set.
 */
#include "fgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "kern_tile.h"

#if defined(__x86_64__) || defined(__i386__)
#define FG_X86 1
#include <immintrin.h>
#define FG_AVX2 __attribute__((target("avx2,fma")))
#define FG_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
#endif

#define FG_NR DONTO_FGEMM_NR
#define FG_MR 6
#ifndef FG_KC
#define FG_KC 256 /* k per block: a panel's slice is FG_KC * 64 bytes = 16 KB */
#endif

int donto_fweight_init(donto_fweight *w, const float *W, int n, int k, donto_err *err) {
    memset(w, 0, sizeof *w);
    if (n <= 0 || k <= 0) return donto_seterr(err, "fweight: bad shape [%d, %d]", n, k);
    if (!W) return donto_seterr(err, "fweight: no weights for shape [%d, %d]", n, k);
    const int npanels = (int)(((long)n + FG_NR - 1) / FG_NR);
    const size_t nval = (size_t)npanels * (size_t)k * FG_NR;
    float *p = donto_aligned_alloc(nval * sizeof(float));
    if (!p) return donto_seterr(err, "fweight: out of memory packing [%d, %d]", n, k);
    memset(p, 0, nval * sizeof(float));
    for (int j = 0; j < n; j++) {
        const float *row = W + (size_t)j * (size_t)k;
        float *dst = p + (size_t)(j / FG_NR) * k * FG_NR + (size_t)(j % FG_NR);
        for (int c = 0; c < k; c++) dst[(size_t)c * FG_NR] = row[c];
    }
    w->n = n, w->k = k, w->npanels = npanels, w->packed = p;
    return 0;
}

void donto_fweight_free(donto_fweight *w) {
    if (!w) return;
    free(w->packed);
    memset(w, 0, sizeof *w);
}

/* ---- plain C: the arithmetic, spelled out ------------------------------ */

static void fg_portable(const float *X, int m, int ldx, const donto_fweight *W, const float *bias, float *Y,
                        int ldy) {
    const int k = W->k;
    for (int i = 0; i < m; i++) {
        const float *x = X + (size_t)i * ldx;
        for (int p = 0; p < W->npanels; p++) {
            const float *bp = W->packed + (size_t)p * k * FG_NR;
            const int j0 = p * FG_NR, nc = W->n - j0 < FG_NR ? W->n - j0 : FG_NR;
            float acc[FG_NR];
            for (int c = 0; c < FG_NR; c++) acc[c] = bias && c < nc ? bias[j0 + c] : 0.0f;
            for (int t = 0; t < k; t++)
                for (int c = 0; c < FG_NR; c++) acc[c] = fmaf(x[t], bp[(size_t)t * FG_NR + c], acc[c]);
            memcpy(Y + (size_t)i * ldy + j0, acc, (size_t)nc * sizeof(float));
        }
    }
}

/* ---- AVX2 + FMA ---------------------------------------------------------- */
#ifdef FG_X86
/* One MR x 16 tile over k values [0, kc) of the panel slice bp: start from
 * init (bias row, or NULL for zero) on the first block, else from y; store
 * to y.  y rows hold 16 floats (the caller bounces a partial panel). */
FG_AVX2 static inline __attribute__((always_inline)) void fg_tile(const int MR, const float *a, size_t lda,
                                                                  const float *bp, int kc, const float *init,
                                                                  int first, float *y, size_t ldy) {
    /* Twelve named accumulators, not an array: GCC keeps an array of
     * vectors in memory and stores it on every k (measured: 33 GFLOP/s). */
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
#define FG_INIT(r)                                                                                               \
    if (MR > r) {                                                                                                \
        if (!first) {                                                                                            \
            c##r##0 = _mm256_loadu_ps(y + (size_t)(r) * ldy);                                                    \
            c##r##1 = _mm256_loadu_ps(y + (size_t)(r) * ldy + 8);                                                \
        } else if (init) {                                                                                       \
            c##r##0 = _mm256_loadu_ps(init);                                                                     \
            c##r##1 = _mm256_loadu_ps(init + 8);                                                                 \
        }                                                                                                        \
    }
    FG_INIT(0) FG_INIT(1) FG_INIT(2) FG_INIT(3) FG_INIT(4) FG_INIT(5)
#undef FG_INIT
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
#pragma GCC unroll 4
    for (int t = 0; t < kc; t++) {
        const __m256 b0 = _mm256_load_ps(bp + (size_t)t * FG_NR), b1 = _mm256_load_ps(bp + (size_t)t * FG_NR + 8);
        __m256 x;
#define FG_ROW(r)                                                                                                \
    if (MR > r) {                                                                                                \
        x = _mm256_broadcast_ss(a##r + t);                                                                       \
        c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                                                               \
        c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);                                                               \
    }
        FG_ROW(0) FG_ROW(1) FG_ROW(2) FG_ROW(3) FG_ROW(4) FG_ROW(5)
#undef FG_ROW
    }
#define FG_STORE(r)                                                                                              \
    if (MR > r) {                                                                                                \
        _mm256_storeu_ps(y + (size_t)(r) * ldy, c##r##0);                                                        \
        _mm256_storeu_ps(y + (size_t)(r) * ldy + 8, c##r##1);                                                    \
    }
    FG_STORE(0) FG_STORE(1) FG_STORE(2) FG_STORE(3) FG_STORE(4) FG_STORE(5)
#undef FG_STORE
}

typedef void (*fg_tile_fn)(const float *a, size_t lda, const float *bp, int kc, const float *init, int first,
                           float *y, size_t ldy);
#define FG_DEF_TILE(R)                                                                                           \
    FG_AVX2 static void fg_tile_##R(const float *a, size_t lda, const float *bp, int kc, const float *init,        \
                                    int first, float *y, size_t ldy) {                                           \
        fg_tile(R, a, lda, bp, kc, init, first, y, ldy);                                                         \
    }
FG_DEF_TILE(1)
FG_DEF_TILE(2)
FG_DEF_TILE(3)
FG_DEF_TILE(4)
FG_DEF_TILE(5)
FG_DEF_TILE(6)
static const fg_tile_fn fg_tiles[FG_MR + 1] = {NULL, fg_tile_1, fg_tile_2, fg_tile_3, fg_tile_4, fg_tile_5, fg_tile_6};

static void fg_avx2(const float *X, int m, int ldx, const donto_fweight *W, const float *bias, float *Y, int ldy) {
    const int k = W->k;
    for (int k0 = 0; k0 < k; k0 += FG_KC) {
        const int kc = k - k0 < FG_KC ? k - k0 : FG_KC, first = k0 == 0;
        for (int p = 0; p < W->npanels; p++) {
            const float *bp = W->packed + ((size_t)p * k + (size_t)k0) * FG_NR;
            const int j0 = p * FG_NR, nc = W->n - j0 < FG_NR ? W->n - j0 : FG_NR;
            float binit[FG_NR];
            const float *init = NULL;
            if (bias && nc == FG_NR) init = bias + j0;
            else if (bias) {
                memset(binit, 0, sizeof binit);
                memcpy(binit, bias + j0, (size_t)nc * sizeof(float));
                init = binit;
            }
            for (int i = 0; i < m; i += FG_MR) {
                const int mr = m - i < FG_MR ? m - i : FG_MR;
                const float *a = X + (size_t)i * ldx + k0;
                float *y = Y + (size_t)i * ldy + j0;
                if (nc == FG_NR) {
                    fg_tiles[mr](a, (size_t)ldx, bp, kc, init, first, y, (size_t)ldy);
                } else {
                    /* partial panel: the tile's rows through a 16-wide bounce */
                    float t[FG_MR * FG_NR];
                    for (int r = 0; r < mr; r++) {
                        memset(t + r * FG_NR, 0, sizeof(float) * FG_NR);
                        if (!first) memcpy(t + r * FG_NR, y + (size_t)r * ldy, (size_t)nc * sizeof(float));
                    }
                    fg_tiles[mr](a, (size_t)ldx, bp, kc, init, first, t, FG_NR);
                    for (int r = 0; r < mr; r++) memcpy(y + (size_t)r * ldy, t + r * FG_NR, (size_t)nc * sizeof(float));
                }
            }
        }
    }
}

/* ---- AVX-512 (zmm) ------------------------------------------------------- */

/* One k of a 16-column panel is one zmm. A tile is MR <= 8 rows x NP <= 2
 * panels: 16 accumulators, 2 loads of W + 8 broadcasts of X per 16 FMAs
 * (two 512-bit FMA ports: 8 cycles of FMA against 5 of loads). A partial
 * panel uses masked loads and stores (mq: its columns); the padding
 * columns of W are zero and never stored. Same fmas in the same order as
 * fg_portable: y = bias (or 0, or Y's value from the previous k block),
 * then fma over the block's k. */
#define FGZ_MR 8
FG_AVX512 static inline __attribute__((always_inline)) void fgz_tile(const int MR, const int NP, const float *a,
                                                                     size_t lda, const float *bp, size_t pstride,
                                                                     int kc, const float *init, int first, float *y,
                                                                     size_t ldy, __mmask16 m0, __mmask16 m1) {
    /* named accumulators, as fg_tile (GCC keeps an array of vectors in memory) */
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = c60 = c61 = c70 = c71 =
        _mm512_setzero_ps();
#define FGZ_INIT(r)                                                                                              \
    if (MR > r) {                                                                                                \
        if (!first) {                                                                                            \
            c##r##0 = _mm512_maskz_loadu_ps(m0, y + (size_t)(r) * ldy);                                          \
            if (NP > 1) c##r##1 = _mm512_maskz_loadu_ps(m1, y + (size_t)(r) * ldy + FG_NR);                      \
        } else if (init) {                                                                                       \
            c##r##0 = _mm512_maskz_loadu_ps(m0, init);                                                           \
            if (NP > 1) c##r##1 = _mm512_maskz_loadu_ps(m1, init + FG_NR);                                       \
        }                                                                                                        \
    }
    FGZ_INIT(0) FGZ_INIT(1) FGZ_INIT(2) FGZ_INIT(3) FGZ_INIT(4) FGZ_INIT(5) FGZ_INIT(6) FGZ_INIT(7)
#undef FGZ_INIT
    const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda,
                *a6 = a + 6 * lda, *a7 = a + 7 * lda;
    const float *bq = bp + pstride;
#pragma GCC unroll 4
    for (int t = 0; t < kc; t++) {
        const __m512 b0 = _mm512_load_ps(bp + (size_t)t * FG_NR);
        const __m512 b1 = NP > 1 ? _mm512_load_ps(bq + (size_t)t * FG_NR) : b0;
        __m512 x;
#define FGZ_ROW(r)                                                                                               \
    if (MR > r) {                                                                                                \
        x = _mm512_set1_ps(a##r[t]);                                                                             \
        c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0);                                                               \
        if (NP > 1) c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);                                                   \
    }
        FGZ_ROW(0) FGZ_ROW(1) FGZ_ROW(2) FGZ_ROW(3) FGZ_ROW(4) FGZ_ROW(5) FGZ_ROW(6) FGZ_ROW(7)
#undef FGZ_ROW
    }
#define FGZ_STORE(r)                                                                                             \
    if (MR > r) {                                                                                                \
        _mm512_mask_storeu_ps(y + (size_t)(r) * ldy, m0, c##r##0);                                               \
        if (NP > 1) _mm512_mask_storeu_ps(y + (size_t)(r) * ldy + FG_NR, m1, c##r##1);                           \
    }
    FGZ_STORE(0) FGZ_STORE(1) FGZ_STORE(2) FGZ_STORE(3) FGZ_STORE(4) FGZ_STORE(5) FGZ_STORE(6) FGZ_STORE(7)
#undef FGZ_STORE
}

typedef void (*fgz_tile_fn)(const float *a, size_t lda, const float *bp, size_t pstride, int kc, const float *init,
                            int first, float *y, size_t ldy, __mmask16 m0, __mmask16 m1);
#define FGZ_DEF_TILE(R, N)                                                                                       \
    FG_AVX512 static void fgz_tile_##R##_##N(const float *a, size_t lda, const float *bp, size_t pstride, int kc, \
                                             const float *init, int first, float *y, size_t ldy, __mmask16 m0,   \
                                             __mmask16 m1) {                                                     \
        fgz_tile(R, N, a, lda, bp, pstride, kc, init, first, y, ldy, m0, m1);                                    \
    }
#define FGZ_DEF_ROWS(R) FGZ_DEF_TILE(R, 1) FGZ_DEF_TILE(R, 2)
FGZ_DEF_ROWS(1)
FGZ_DEF_ROWS(2)
FGZ_DEF_ROWS(3)
FGZ_DEF_ROWS(4)
FGZ_DEF_ROWS(5)
FGZ_DEF_ROWS(6)
FGZ_DEF_ROWS(7)
FGZ_DEF_ROWS(8)
/* [rows][panels] */
static const fgz_tile_fn fgz_tiles[FGZ_MR + 1][3] = KTILE_TABLE_8X2(fgz_tile);

/* As fg_avx2, with pairs of panels: per k block, per pair, every 8-row tile
 * (the pair's slice, FG_KC x 128 B = 32 KB, stays in L1 on a 48 KB L1). */
FG_AVX512 static void fg_avx512(const float *X, int m, int ldx, const donto_fweight *W, const float *bias, float *Y,
                                int ldy) {
    const int k = W->k;
    const size_t pstride = (size_t)k * FG_NR;
    for (int k0 = 0; k0 < k; k0 += FG_KC) {
        const int kc = k - k0 < FG_KC ? k - k0 : FG_KC, first = k0 == 0;
        for (int p = 0; p < W->npanels; p += 2) {
            const int np = W->npanels - p >= 2 ? 2 : 1;
            const float *bp = W->packed + (size_t)p * pstride + (size_t)k0 * FG_NR;
            const int j0 = p * FG_NR, nc = W->n - j0 < np * FG_NR ? W->n - j0 : np * FG_NR;
            const int n0 = nc < FG_NR ? nc : FG_NR, n1 = nc - n0; /* columns in each panel */
            const __mmask16 m0 = ktile_mask16(n0);
            const __mmask16 m1 = ktile_mask16(n1);
            const float *init = bias ? bias + j0 : NULL;
            for (int i = 0; i < m; i += FGZ_MR) {
                const int mr = m - i < FGZ_MR ? m - i : FGZ_MR;
                fgz_tiles[mr][np](X + (size_t)i * ldx + k0, (size_t)ldx, bp, pstride, kc, init, first,
                                  Y + (size_t)i * ldy + j0, (size_t)ldy, m0, m1);
            }
        }
    }
}
#endif

void donto_fgemm_isa(const float *X, int m, int ldx, const donto_fweight *W, const float *bias, float *Y, int ldy,
                     donto_isa isa) {
    if (m <= 0) return;
#ifdef FG_X86
    const donto_isa s = cpu_isa_runnable(isa);
    if (cpu_isa_zmm(s)) {
        fg_avx512(X, m, ldx, W, bias, Y, ldy);
        return;
    }
    if (s >= DONTO_ISA_AVX2) {
        fg_avx2(X, m, ldx, W, bias, Y, ldy);
        return;
    }
#endif
    fg_portable(X, m, ldx, W, bias, Y, ldy);
}

int donto_fgemm_preferred(donto_isa isa) { return cpu_isa_runnable(isa) >= DONTO_ISA_AVX2; }

const char *donto_fgemm_kernel_name(donto_isa isa) {
    const donto_isa s = cpu_isa_runnable(isa);
    if (cpu_isa_zmm(s)) return "fp32 fma zmm 8x32";
    return s >= DONTO_ISA_AVX2 ? "fp32 fma ymm 6x16" : "fp32 plain C";
}
