/*
 * Tests for the int8 GEMM (src/model/qgemm8.c, qgemm.h "int8 path"):
 *  - Y matches, bit for bit, a scalar reference written here from the
 *    documented scheme (u8 asymmetric rows over the ordinary channels, s8
 *    rows, exact int32 sums, zero-point correction, one FMA, then the fp32
 *    outlier channels in list order);
 *  - Y is close to the exact product (relative error on outlier data);
 *  - tails (m, n, k not multiples of 6/16/4), bias NULL, ldx > k, ldy > n
 *    (padding untouched), no outliers, all-zero rows, worst-case saturation
 *    inputs (x at both ends of the grid, |w| at WMAX), thread counts;
 *  - every kernel set this CPU runs gives the same bits as portable; a set
 *    the CPU lacks prints "SKIP <set>: CPU lacks <features>".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_isa.h"
#include "isa_sets.h"
#include "xrand.h"
#include "qgemm.h"

static isa_sets g_isa; /* the kernel sets run here (isa_sets.h) */


static long rclamp(long r, long lo, long hi) { return r < lo ? lo : r > hi ? hi : r; }

/* Channels [c0, c1) of weight row w on the s8 grid, one scale (returned in
 * *sw); returns the sum of the quantized values. */
static int32_t ref_quant_weights(const float *w, int c0, int c1, const char *isout, int8_t *wq, float *sw) {
    float amax = 0;
    for (int c = c0; c < c1; c++)
        if (!isout[c] && fabsf(w[c]) > amax) amax = fabsf(w[c]);
    float inv = amax >= 1e-30f ? (float)DONTO_QGEMM8_WMAX / amax : 0;
    *sw = amax >= 1e-30f ? amax / (float)DONTO_QGEMM8_WMAX : 0;
    int32_t cs = 0;
    for (int c = c0; c < c1; c++) {
        long r = isout[c] ? 0 : rclamp(lrintf(w[c] * inv), -DONTO_QGEMM8_WMAX, DONTO_QGEMM8_WMAX);
        wq[c] = (int8_t)r;
        cs += (int32_t)r;
    }
    return cs;
}

/* A row of X on the activation grid, as documented: asymmetric over the
 * ordinary channels (outliers count as 0). */
static void ref_quant_row(const float *x, int k, const char *isout, int xmax, uint8_t *xq, float *sx, int32_t *zp) {
    float lo = 0, hi = 0;
    for (int c = 0; c < k; c++) {
        float v = isout[c] ? 0.0f : x[c];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    float range = hi - lo, inv = 0;
    *sx = 0, *zp = 0;
    if (range >= 1e-30f) {
        inv = (float)xmax / range;
        *sx = range / (float)xmax;
        *zp = (int32_t)lrintf(-lo * inv);
    }
    for (int c = 0; c < k; c++) xq[c] = (uint8_t)rclamp(lrintf((isout[c] ? 0.0f : x[c]) * inv) + *zp, 0, xmax);
}

/* The documented schemes (qgemm.h), spelled out on unpacked data: group
 * 0, a weight scale per row (one group of all k, the "int8 path" formula);
 * else scales per row and group of k (donto_qweight8_init_ex). */
static void ref_qgemm8(const float *X, int m, int k, int ldx, const float *W, int n, const int *out, int nout,
                       int group, const float *bias, int xmax, float *R, int ldy) {
    const int gk = group ? group : k, ng = (k + gk - 1) / gk;
    char *isout = calloc((size_t)k, 1);
    for (int o = 0; o < nout; o++) isout[out[o]] = 1;
    int8_t *wq = malloc((size_t)n * k);
    float *sw = malloc(sizeof(float) * n * ng), *corr = malloc(sizeof(float) * n);
    int32_t *cs = malloc(sizeof(int32_t) * n);
    for (int j = 0; j < n; j++) {
        corr[j] = 0, cs[j] = 0;
        for (int g = 0; g < ng; g++) {
            const int c0 = g * gk, c1 = c0 + gk < k ? c0 + gk : k;
            const int32_t gcs = ref_quant_weights(W + (size_t)j * k, c0, c1, isout, wq + (size_t)j * k, &sw[j * ng + g]);
            cs[j] += gcs;
            corr[j] = fmaf((float)gcs, sw[j * ng + g], corr[j]);
        }
    }
    uint8_t *xq = malloc((size_t)k);
    for (int i = 0; i < m; i++) {
        const float *x = X + (size_t)i * ldx;
        float sx;
        int32_t zp;
        ref_quant_row(x, k, isout, xmax, xq, &sx, &zp);
        for (int j = 0; j < n; j++) {
            float f = 0;
            int32_t s = 0; /* over all of k (one group when group is 0) */
            for (int g = 0; g < ng; g++) {
                int32_t sg = 0;
                for (int c = g * gk; c < k && c < (g + 1) * gk; c++) sg += (int32_t)xq[c] * wq[(size_t)j * k + c];
                s += sg;
                f = fmaf((float)sg, sw[j * ng + g], f);
            }
            const float b = bias ? bias[j] : 0.0f;
            float y = group ? fmaf(fmaf(-(float)zp, corr[j], f), sx, b) : fmaf((float)(s - zp * cs[j]), sx * sw[j], b);
            for (int o = 0; o < nout; o++) y = fmaf(x[out[o]], W[(size_t)j * k + out[o]], y);
            R[(size_t)i * ldy + j] = y;
        }
    }
    free(isout), free(wq), free(sw), free(corr), free(cs), free(xq);
}

/* LayerNorm-like rows with a few outlier channels 15-25x the rest. */
static void fill(float *X, int m, int k, int ldx, float *W, int n, int *out, int nout) {
    for (int i = 0; i < m; i++)
        for (int c = 0; c < ldx; c++) X[(size_t)i * ldx + c] = c < k ? frand(-2, 2) : NAN;
    for (int o = 0; o < nout; o++)
        for (int i = 0; i < m; i++) X[(size_t)i * ldx + out[o]] *= frand(15, 25);
    for (size_t e = 0; e < (size_t)n * k; e++) W[e] = frand(-0.1f, 0.1f);
}

static void pick_outliers(int k, int *out, int nout) {
    for (int o = 0; o < nout; o++) out[o] = (int)(((long)o * 7919 + 13) % k);
}

static void run_case_ex(int m, int n, int k, int ldx_pad, int ldy_pad, int use_bias, int nout, int nthreads,
                        int group) {
    const int ldx = k + ldx_pad, ldy = n + ldy_pad;
    float *X = malloc(sizeof(float) * (size_t)m * ldx), *W = malloc(sizeof(float) * (size_t)n * k);
    float *bias = malloc(sizeof(float) * n);
    int out[DONTO_QGEMM8_MAXOUT];
    if (nout > k) nout = k;
    pick_outliers(k, out, nout);
    /* distinct channels: the stride 7919 is prime; for small k drop repeats */
    int u = 0;
    for (int o = 0; o < nout; o++) {
        int dup = 0;
        for (int p = 0; p < u; p++) dup |= out[p] == out[o];
        if (!dup) out[u++] = out[o];
    }
    nout = u;
    fill(X, m, k, ldx, W, n, out, nout);
    for (int j = 0; j < n; j++) bias[j] = frand(-1, 1);
    float *R = malloc(sizeof(float) * (size_t)m * ldy), *P = malloc(sizeof(float) * (size_t)m * ldy),
          *Y = malloc(sizeof(float) * (size_t)m * ldy);
    donto_qweight8 qw;
    CHECK(donto_qweight8_init_ex(&qw, W, n, k, out, nout, group, NULL) == 0, "init %dx%d", n, k);
    if (group && m > 2) /* a zero row */
        for (int c = 0; c < k; c++) X[2 * (size_t)ldx + c] = 0.0f;
    char *scratch = malloc(donto_qgemm8_scratch_size(m, k) + 3);
    /* Both activation grids: u7 (every set) and u8 (the VNNI sets; the
     * others run the portable path on it) */
    static const int grids[2] = {DONTO_QGEMM8_XMAX, DONTO_QGEMM8_XMAX_VNNI};
    for (int g = 0; g < 2; g++) {
        const int xmax = grids[g];
        for (size_t e = 0; e < (size_t)m * ldy; e++) R[e] = P[e] = Y[e] = -7.0f;
        ref_qgemm8(X, m, k, ldx, W, n, out, nout, group, use_bias ? bias : NULL, xmax, R, ldy);
        donto_qgemm8_grid(X, m, k, ldx, &qw, use_bias ? bias : NULL, P, ldy, scratch + 3, nthreads,
                          DONTO_ISA_PORTABLE, xmax);
        CHECK(memcmp(R, P, sizeof(float) * (size_t)m * ldy) == 0,
              "portable != reference m%d n%d k%d nout%d group%d xmax%d", m, n, k, nout, group, xmax);
        for (int t = 0; t < g_isa.n; t++) {
            for (size_t e = 0; e < (size_t)m * ldy; e++) Y[e] = -7.0f;
            donto_qgemm8_grid(X, m, k, ldx, &qw, use_bias ? bias : NULL, Y, ldy, scratch + 3, nthreads,
                              g_isa.set[t], xmax);
            int same = memcmp(P, Y, sizeof(float) * (size_t)m * ldy) == 0;
            CHECK(same, "set %s != portable m%d n%d k%d nout%d group%d threads %d xmax %d",
                  donto_isa_name(g_isa.set[t]), m, n, k, nout, group, nthreads, xmax);
            if (xmax == donto_qgemm8_xmax(g_isa.set[t])) {
                g_isa.same[g_isa.set[t]] += same;
                /* the set's own grid is what donto_qgemm8_isa runs */
                for (size_t e = 0; e < (size_t)m * ldy; e++) Y[e] = -7.0f;
                donto_qgemm8_isa(X, m, k, ldx, &qw, use_bias ? bias : NULL, Y, ldy, scratch + 3, nthreads,
                                 g_isa.set[t]);
                CHECK(memcmp(P, Y, sizeof(float) * (size_t)m * ldy) == 0, "set %s: donto_qgemm8_isa off its grid",
                      donto_isa_name(g_isa.set[t]));
            }
        }
    }
    free(scratch);
    donto_qweight8_free(&qw);
    free(X), free(W), free(bias), free(R), free(P), free(Y);
}

static void run_case(int m, int n, int k, int ldx_pad, int ldy_pad, int use_bias, int nout, int nthreads) {
    run_case_ex(m, n, k, ldx_pad, ldy_pad, use_bias, nout, nthreads, 0);
}

static void test_shapes(void) {
    /* rows: around the 6-row (ymm) and 8-row (zmm) micro-tiles and the
     * 24-row task; columns: around a 16-column panel, the zmm kernel's
     * 2-panel tile (33: two panels and one column) and the 8-panel task
     * (130: an odd ninth panel alone) */
    const int ms[] = {1, 5, 6, 7, 8, 9, 17, 23, 24, 25, 61};
    const int ns[] = {1, 15, 16, 17, 33, 130};
    const int ks[] = {1, 3, 4, 5, 33, 384};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                run_case(ms[a], ns[b], ks[c], (int)((a + c) % 3), (int)(b % 2) * 5, (int)((a + b) % 2),
                         (int)((a + b + c) % 4) * 3, 1);
    run_case(130, 1536, 384, 0, 0, 1, 8, 1);
    run_case(70, 384, 1536, 0, 0, 1, 8, 2);
    run_case(70, 384, 1536, 3, 1, 1, DONTO_QGEMM8_MAXOUT, 0);
}

/* Weight scales per group of k: groups that do and do not divide k (a
 * last short group), one quad per group, groups over all of k, 64 (the
 * VNNI zmm kernel's unrolled groups) with k a multiple of it or not; the
 * zmm tiles of 6 rows (VNNI) and of 8, one or two panels. */
static void test_groups(void) {
    const int ms[] = {1, 5, 6, 7, 12, 13, 25, 49};
    const int ns[] = {17, 32, 33, 130};
    const int ks[] = {5, 33, 64, 200, 384};
    const int gs[] = {4, 8, 64, 128, 512};
    int v = 0;
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++, v++)
                run_case_ex(ms[a], ns[b], ks[c], v % 3, (v % 2) * 5, v % 2, (v % 4) * 3, 1, gs[(a + b + c) % 5]);
    run_case_ex(70, 384, 1536, 0, 0, 1, 8, 1, 64);
    run_case_ex(70, 384, 1536, 1, 2, 1, 8, 2, 128);
    run_case_ex(61, 1152, 384, 0, 0, 1, 0, 1, 64);
    /* full 6 x 32 tiles of groups of 64, whose epilogue runs in the
     * group kernel's registers on VNNI: without bias, with padded strides */
    run_case_ex(30, 64, 256, 0, 0, 0, 0, 1, 64);
    run_case_ex(30, 96, 128, 2, 3, 0, 5, 1, 64);
    run_case_ex(13, 160, 192, 1, 7, 1, 3, 2, 64);
}

/* Extremes: saturation-prone inputs (every x at the grid ends, every |w| at
 * WMAX), all-zero rows, and the thread count not changing any bit. */
static void test_extremes(void) {
    const int m = 13, n = 40, k = 1536;
    float *X = malloc(sizeof(float) * m * k), *W = malloc(sizeof(float) * n * k);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < k; c++) X[(size_t)i * k + c] = i == 3 ? 0.0f : ((c + i) % 2 ? 1000.0f : -1000.0f * (i % 2));
    for (int j = 0; j < n; j++)
        for (int c = 0; c < k; c++) W[(size_t)j * k + c] = ((c + j) % 3 ? 1.0f : -1.0f) * 0.5f;
    float *R = malloc(sizeof(float) * m * n), *R8 = malloc(sizeof(float) * m * n), *Y = malloc(sizeof(float) * m * n);
    ref_qgemm8(X, m, k, k, W, n, NULL, 0, 0, NULL, DONTO_QGEMM8_XMAX, R, n);
    ref_qgemm8(X, m, k, k, W, n, NULL, 0, 0, NULL, DONTO_QGEMM8_XMAX_VNNI, R8, n);
    donto_qweight8 qw;
    CHECK(donto_qweight8_init(&qw, W, n, k, NULL, 0, NULL) == 0, "init");
    CHECK(donto_qweight8_get(&qw, 0, 1) == DONTO_QGEMM8_WMAX, "w at WMAX");
    void *scratch = malloc(donto_qgemm8_scratch_size(m, k));
    for (int s = DONTO_ISA_PORTABLE; s < DONTO_ISA_N; s++) {
        if (!cpu_isa_supported((donto_isa)s)) continue;
        for (int nt = 1; nt <= 3; nt++) {
            memset(Y, 0, sizeof(float) * m * n);
            donto_qgemm8_isa(X, m, k, k, &qw, NULL, Y, n, scratch, nt, (donto_isa)s);
            const float *want = donto_qgemm8_xmax((donto_isa)s) == DONTO_QGEMM8_XMAX ? R : R8;
            CHECK(memcmp(want, Y, sizeof(float) * m * n) == 0, "extremes: set %s threads %d",
                  donto_isa_name((donto_isa)s), nt);
        }
    }
    for (int j = 0; j < n; j++) CHECK(Y[3 * n + j] == 0.0f, "zero row");
    /* exactness check on one value: x alternates 1000 / -1000*(i%2) */
    double exact = 0, mag = 0;
    for (int c = 0; c < k; c++) exact += (double)X[k + c] * W[c], mag += fabs((double)X[k + c] * W[c]);
    CHECK(fabs(Y[n] - exact) <= 1e-2 * mag, "extreme value %g vs %g (sum |xw| %g)", (double)Y[n], exact, mag);
    free(scratch);
    donto_qweight8_free(&qw);
    free(X), free(W), free(R), free(R8), free(Y);
}

/* ||Y - X W^T|| / ||X W^T||, the product in double. */
static double rel_err(const float *X, const float *W, const float *Y, int m, int n, int k) {
    double num = 0, den = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double e = 0;
            for (int c = 0; c < k; c++) e += (double)X[(size_t)i * k + c] * W[(size_t)j * k + c];
            num += (Y[(size_t)i * n + j] - e) * (Y[(size_t)i * n + j] - e);
            den += e * e;
        }
    return sqrt(num / den);
}

/* Accuracy on outlier data: the outlier channels in fp32 keep the error
 * at the 8-bit level of the ordinary channels. */
static void test_error(void) {
    const int m = 64, n = 384, k = 384, nout = 6;
    float *X = malloc(sizeof(float) * m * k), *W = malloc(sizeof(float) * n * k), *Y = malloc(sizeof(float) * m * n);
    int out[6];
    pick_outliers(k, out, nout);
    fill(X, m, k, k, W, n, out, nout);
    void *scratch = malloc(donto_qgemm8_scratch_size(m, k));
    /* rel[v][g]: v 0 without the outlier channels, 1 with; g 0 the u7
     * grid, 1 the u8 grid of the VNNI sets (the portable path computes
     * both on every CPU) */
    double rel[2][2];
    static const int grids[2] = {DONTO_QGEMM8_XMAX, DONTO_QGEMM8_XMAX_VNNI};
    for (int v = 0; v < 2; v++) {
        donto_qweight8 qw;
        CHECK(donto_qweight8_init(&qw, W, n, k, out, v ? nout : 0, NULL) == 0, "init");
        for (int g = 0; g < 2; g++) {
            donto_qgemm8_grid(X, m, k, k, &qw, NULL, Y, n, scratch, 1, DONTO_ISA_PORTABLE, grids[g]);
            rel[v][g] = rel_err(X, W, Y, m, n, k);
        }
        donto_qweight8_free(&qw);
    }
    fprintf(stderr, "int8 relative error, outlier data: u7 %.3g without, %.3g with the outlier channels; u8 %.3g / %.3g\n",
            rel[0][0], rel[1][0], rel[0][1], rel[1][1]);
    CHECK(rel[1][0] < 1.5e-2 && rel[1][0] < rel[0][0] / 2, "outlier channels: %.3g vs %.3g", rel[1][0], rel[0][0]);
    /* the u8 grid halves the activations' step: with the outliers out,
     * where that error dominates, the error drops by a quarter or more */
    CHECK(rel[1][1] < rel[1][0] * 0.75, "u8 grid: %.3g vs u7 %.3g", rel[1][1], rel[1][0]);
    CHECK(donto_qgemm8_xmax(DONTO_ISA_PORTABLE) == DONTO_QGEMM8_XMAX &&
              donto_qgemm8_xmax(DONTO_ISA_AVX2) == DONTO_QGEMM8_XMAX,
          "u7 off VNNI");
    if (cpu_isa_supported(DONTO_ISA_AVX512VNNI))
        CHECK(donto_qgemm8_xmax(DONTO_ISA_AVX512VNNI) == DONTO_QGEMM8_XMAX_VNNI, "u8 on avx512vnni");
    if (cpu_isa_supported(DONTO_ISA_AVXVNNI))
        CHECK(donto_qgemm8_xmax(DONTO_ISA_AVXVNNI) == DONTO_QGEMM8_XMAX_VNNI, "u8 on avxvnni");
    free(scratch);
    free(X), free(W), free(Y);
}

/* Accuracy of the weight scale groups: when the size of a row's weights
 * varies along k (here by 30x between groups of 64 channels), scales per
 * group keep the small ones off a grid set by the large ones. */
static void test_group_error(void) {
    const int m = 48, n = 64, k = 384;
    float *X = malloc(sizeof(float) * m * k), *W = malloc(sizeof(float) * n * k), *Y = malloc(sizeof(float) * m * n);
    fill(X, m, k, k, W, n, NULL, 0);
    for (int j = 0; j < n; j++)
        for (int c = 0; c < k; c++) W[(size_t)j * k + c] *= (c / 64 + j) % 6 ? 0.033f : 1.0f;
    void *scratch = malloc(donto_qgemm8_scratch_size(m, k));
    double rel[2];
    for (int v = 0; v < 2; v++) {
        donto_qweight8 qw;
        CHECK(donto_qweight8_init_ex(&qw, W, n, k, NULL, 0, v ? 64 : 0, NULL) == 0, "init");
        donto_qgemm8_grid(X, m, k, k, &qw, NULL, Y, n, scratch, 1, DONTO_ISA_PORTABLE, DONTO_QGEMM8_XMAX_VNNI);
        rel[v] = rel_err(X, W, Y, m, n, k);
        donto_qweight8_free(&qw);
    }
    fprintf(stderr, "int8 relative error, weights of group-varying size: %.3g per row, %.3g per group of 64\n", rel[0],
            rel[1]);
    CHECK(rel[1] < rel[0] * 0.6, "group scales: %.3g vs per row %.3g", rel[1], rel[0]);
    free(scratch);
    free(X), free(W), free(Y);
}

static void test_init_errors(void) {
    donto_qweight8 q;
    float w[8] = {0, 1, 2, 3, 4, 5, 6, NAN};
    int o2[2] = {1, 1}, o1[1] = {9};
    CHECK(donto_qweight8_init(&q, w, 0, 4, NULL, 0, NULL) == -1 && q.packed == NULL, "bad shape");
    CHECK(donto_qweight8_init(&q, w, 2, 4, NULL, 0, NULL) == -1 && q.packed == NULL, "nan");
    CHECK(donto_qweight8_init(&q, w, 1, 4, o2, 2, NULL) == -1 && q.packed == NULL, "repeated outlier");
    CHECK(donto_qweight8_init(&q, w, 1, 4, o1, 1, NULL) == -1 && q.packed == NULL, "outlier out of range");
    CHECK(donto_qweight8_init(&q, w, 1, 4, o1, DONTO_QGEMM8_MAXOUT + 1, NULL) == -1, "too many outliers");
    CHECK(donto_qweight8_init_ex(&q, w, 1, 4, NULL, 0, 6, NULL) == -1 && q.packed == NULL, "group not of quads");
    CHECK(donto_qweight8_init_ex(&q, w, 1, 4, NULL, 0, DONTO_QGEMM8_GMAX + 4, NULL) == -1, "group too large");
    CHECK(donto_qweight8_init_ex(&q, w, 1, 4, NULL, 0, -4, NULL) == -1, "negative group");
    donto_qweight8_free(&q);
}

int main(void) {
    xrand_seed(0x2545F4914F6CDD1Dull);
    isa_sets_find(&g_isa);
    test_init_errors();
    test_shapes();
    test_groups();
    test_extremes();
    test_error();
    test_group_error();
    isa_sets_report(&g_isa, donto_qgemm8_kernel_name);
    return check_report("test_qgemm8");
}
