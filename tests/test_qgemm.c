/*
 * Tests for the quantized GEMM (src/model/qgemm.c):
 *  - quantization of X rows and of W rows matches a scalar reference exactly;
 *  - Y matches, bit for bit, a scalar reference doing the same integer
 *    arithmetic (exact int32 blocks of 256 k, fp32 block sums, one FMA);
 *  - Y is within the quantization-derived bound of the exact product;
 *  - tails (m, n, k not multiples of the blocks; 1s), bias NULL, ldx > k,
 *    ldy > n (padding untouched), unaligned scratch, zero rows, worst-case
 *    accumulator magnitude, init errors;
 *  - results identical for every thread count, and on the portable path;
 *  - every kernel set this CPU runs (AVX2, AVX-VNNI, AVX-512BW, AVX-512
 *    VNNI) gives the same bits as the portable path on every case above;
 *    a set the CPU lacks prints "SKIP <set>: CPU lacks <features>" and is
 *    not counted (the last line says which sets ran and which were
 *    skipped); asking for such a set falls back to one that runs.
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

/* The SIMD kernel sets this CPU runs (filled in main), and the cases each
 * has matched the portable path on. */
static isa_sets g_isa; /* the kernel sets run here (isa_sets.h) */


static int16_t rclamp(float v, int lim) {
    long r = lrintf(v);
    return (int16_t)(r > lim ? lim : r < -lim ? -lim : r);
}

/* Reference quantization of one vector (same formula as the library). */
static float ref_quant(const float *x, int k, int lim, int16_t *q) {
    float amax = 0;
    for (int c = 0; c < k; c++) amax = fabsf(x[c]) > amax ? fabsf(x[c]) : amax;
    float inv = 0, scale = 0;
    if (amax >= 1e-30f) {
        inv = (float)lim / amax;
        scale = amax / (float)lim;
    }
    for (int c = 0; c < k; c++) q[c] = rclamp(x[c] * inv, lim);
    return scale;
}

typedef struct {
    int m, n, k, ldx, ldy;
    float *X, *W, *bias, *Y;
} problem;

/* Scalar reference of exactly the library's arithmetic.  Also checks that
 * every 256-k block sum fits int32 (the overflow argument). */
static void ref_qgemm(const problem *p, const float *bias, float *R) {
    const int m = p->m, n = p->n, k = p->k;
    int16_t *qx = malloc(sizeof(int16_t) * (size_t)m * k), *qw = malloc(sizeof(int16_t) * (size_t)n * k);
    float *sx = malloc(sizeof(float) * m), *sw = malloc(sizeof(float) * n);
    for (int i = 0; i < m; i++) sx[i] = ref_quant(p->X + (size_t)i * p->ldx, k, DONTO_QGEMM_XMAX, qx + (size_t)i * k);
    for (int j = 0; j < n; j++) sw[j] = ref_quant(p->W + (size_t)j * k, k, DONTO_QGEMM_WMAX, qw + (size_t)j * k);
    int overflow = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float facc = 0.0f;
            for (int k0 = 0; k0 < k; k0 += DONTO_QGEMM_KBLOCK) {
                int64_t s = 0;
                for (int c = k0; c < k && c < k0 + DONTO_QGEMM_KBLOCK; c++)
                    s += (int64_t)qx[(size_t)i * k + c] * qw[(size_t)j * k + c];
                if (s > INT32_MAX || s < INT32_MIN) overflow = 1;
                facc += (float)s;
            }
            R[(size_t)i * p->ldy + j] = fmaf(facc, sx[i] * sw[j], bias ? bias[j] : 0.0f);
        }
    CHECK(!overflow, "int32 block overflow in reference (m=%d n=%d k=%d)", m, n, k);
    free(qx);
    free(qw);
    free(sx);
    free(sw);
}

/* |y - exact| <= sum_k |x||dw| + |w||dx| + |dx||dw| with |dx| <= sx/2,
 * |dw| <= sw/2, plus fp32 rounding slack. */
static void check_bound(const problem *p, const float *bias, const float *Y, double *relerr) {
    const int m = p->m, n = p->n, k = p->k;
    double num = 0, den = 0;
    int bad = 0;
    for (int i = 0; i < m; i++) {
        const float *x = p->X + (size_t)i * p->ldx;
        float ax = 0;
        for (int c = 0; c < k; c++) ax = fmaxf(ax, fabsf(x[c]));
        const double hx = ax / (double)DONTO_QGEMM_XMAX / 2;
        for (int j = 0; j < n; j++) {
            const float *w = p->W + (size_t)j * k;
            float aw = 0;
            for (int c = 0; c < k; c++) aw = fmaxf(aw, fabsf(w[c]));
            const double hw = aw / (double)DONTO_QGEMM_WMAX / 2;
            double exact = bias ? bias[j] : 0.0, bound = 0, mag = 0;
            for (int c = 0; c < k; c++) {
                exact += (double)x[c] * w[c];
                bound += fabs(x[c]) * hw + fabs(w[c]) * hx + hx * hw;
                mag += fabs((double)x[c] * w[c]);
            }
            const double y = Y[(size_t)i * p->ldy + j];
            const double tol = bound * 1.001 + 1e-6 * (mag + (bias ? fabs(bias[j]) : 0)) + 1e-30;
            if (!(fabs(y - exact) <= tol) && bad++ < 5)
                CHECK(0, "bound: m=%d n=%d k=%d Y[%d,%d]=%.9g exact=%.9g |err|=%.3g > %.3g", m, n, k, i, j, y, exact,
                      fabs(y - exact), tol);
            num += (y - exact) * (y - exact);
            den += exact * exact;
        }
    }
    CHECK(bad == 0, "%d elements out of bound (m=%d n=%d k=%d)", bad, m, n, k);
    if (relerr) *relerr = den > 0 ? sqrt(num / den) : 0;
}

static void fill_problem(problem *p, int m, int n, int k, int ldx, int ldy, int outliers) {
    p->m = m, p->n = n, p->k = k, p->ldx = ldx, p->ldy = ldy;
    p->X = malloc(sizeof(float) * (size_t)m * ldx);
    p->W = malloc(sizeof(float) * (size_t)n * k);
    p->bias = malloc(sizeof(float) * n);
    p->Y = malloc(sizeof(float) * (size_t)m * ldy);
    for (size_t i = 0; i < (size_t)m * ldx; i++) p->X[i] = frand(-1.5f, 1.5f);
    if (outliers)
        for (int i = 0; i < m; i++)
            for (int c = 3; c < k; c += 97) p->X[(size_t)i * ldx + c] *= 15.0f;
    for (size_t i = 0; i < (size_t)n * k; i++) p->W[i] = frand(-0.08f, 0.08f);
    for (int j = 0; j < n; j++) p->bias[j] = frand(-0.5f, 0.5f);
}

static void free_problem(problem *p) {
    free(p->X);
    free(p->W);
    free(p->bias);
    free(p->Y);
}

/* Run the full set of checks on one shape. */
static void run_case(int m, int n, int k, int ldx_pad, int ldy_pad, int use_bias, int nthreads) {
    problem p;
    fill_problem(&p, m, n, k, k + ldx_pad, n + ldy_pad, 1);
    const float *bias = use_bias ? p.bias : NULL;
    donto_qweight qw;
    donto_err err;
    if (donto_qweight_init(&qw, p.W, n, k, &err) != 0) {
        CHECK(0, "init failed: %s", err.msg);
        free_problem(&p);
        return;
    }
    /* weights: packed values and scales equal the reference quantization */
    int16_t *qref = malloc(sizeof(int16_t) * k);
    int wbad = 0;
    for (int j = 0; j < n; j++) {
        float s = ref_quant(p.W + (size_t)j * k, k, DONTO_QGEMM_WMAX, qref);
        if (s != qw.scale[j]) wbad++;
        for (int c = 0; c < k; c++)
            if (donto_qweight_get(&qw, j, c) != qref[c]) wbad++;
    }
    CHECK(wbad == 0, "weight quantization differs in %d places (n=%d k=%d)", wbad, n, k);
    free(qref);

    /* Y padding columns must stay untouched: fill with a sentinel. */
    const float sentinel = -12345.5f;
    for (size_t i = 0; i < (size_t)m * p.ldy; i++) p.Y[i] = sentinel;
    /* Unaligned scratch of exactly the advertised size (+1 for the offset). */
    size_t ss = donto_qgemm_scratch_size(m, k);
    char *scratch = malloc(ss + 1);
    donto_qgemm(p.X, m, k, p.ldx, &qw, bias, p.Y, p.ldy, scratch + 1, nthreads);
    /* the portable C path gives the same bits */
    float *P = malloc(sizeof(float) * (size_t)m * p.ldy);
    for (size_t i = 0; i < (size_t)m * p.ldy; i++) P[i] = sentinel;
    donto_qgemm_portable(p.X, m, k, p.ldx, &qw, bias, P, p.ldy, scratch + 1, nthreads);
    CHECK(memcmp(P, p.Y, sizeof(float) * (size_t)m * p.ldy) == 0, "portable path differs (m=%d n=%d k=%d)", m, n, k);
    /* every kernel set the CPU runs: the same bits, padding untouched */
    float *S = malloc(sizeof(float) * (size_t)m * p.ldy);
    for (int t = 0; t < g_isa.n; t++) {
        for (size_t i = 0; i < (size_t)m * p.ldy; i++) S[i] = sentinel;
        donto_qgemm_isa(p.X, m, k, p.ldx, &qw, bias, S, p.ldy, scratch + 1, nthreads, g_isa.set[t]);
        const int same = memcmp(P, S, sizeof(float) * (size_t)m * p.ldy) == 0;
        CHECK(same, "set %s differs from portable (m=%d n=%d k=%d thr=%d)", donto_isa_name(g_isa.set[t]), m, n, k,
              nthreads);
        g_isa.same[g_isa.set[t]] += same;
    }
    free(S);
    free(P);
    free(scratch);

    float *R = malloc(sizeof(float) * (size_t)m * p.ldy);
    for (size_t i = 0; i < (size_t)m * p.ldy; i++) R[i] = sentinel;
    ref_qgemm(&p, bias, R);
    int diff = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < p.ldy; j++) {
            float a = p.Y[(size_t)i * p.ldy + j], b = R[(size_t)i * p.ldy + j];
            if (memcmp(&a, &b, sizeof a) != 0 && diff++ < 3)
                CHECK(0, "exact: m=%d n=%d k=%d ldy=%d Y[%d,%d]=%.9g ref=%.9g", m, n, k, p.ldy, i, j, a, b);
        }
    CHECK(diff == 0, "%d elements differ from the integer reference (m=%d n=%d k=%d thr=%d)", diff, m, n, k, nthreads);
    double rel;
    check_bound(&p, bias, p.Y, &rel);
    if (k >= 32) CHECK(rel < 3e-3, "relative error %.3g too large (m=%d n=%d k=%d)", rel, m, n, k);
    free(R);
    donto_qweight_free(&qw);
    free_problem(&p);
}

/* Quantization of one row on kernel set isa's loop (portable: plain C). */
static void test_quant_row_on(donto_isa isa) {
    const int ks[] = {1, 2, 7, 15, 16, 17, 31, 33, 384, 1000};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        int k = ks[t], kpad = (k + 1) & ~1;
        float *x = malloc(sizeof(float) * k);
        for (int c = 0; c < k; c++) x[c] = frand(-3, 3);
        x[k / 2] = 7.25f; /* the max */
        int16_t *q = malloc(sizeof(int16_t) * kpad), *r = malloc(sizeof(int16_t) * k);
        for (int c = 0; c < kpad; c++) q[c] = 0x5555;
        float s = donto_qgemm_quant_row_isa(x, k, q, kpad, isa);
        float sr = ref_quant(x, k, DONTO_QGEMM_XMAX, r);
        CHECK(s == sr, "%s k=%d scale %.9g != %.9g", donto_isa_name(isa), k, s, sr);
        int bad = 0;
        for (int c = 0; c < k; c++) bad += q[c] != r[c];
        for (int c = k; c < kpad; c++) bad += q[c] != 0;
        CHECK(bad == 0, "%s k=%d: %d quantized values differ", donto_isa_name(isa), k, bad);
        CHECK_EQ_INT(q[k / 2], DONTO_QGEMM_XMAX);
        /* all-zero row: scale 0, values 0 */
        for (int c = 0; c < k; c++) x[c] = 0;
        s = donto_qgemm_quant_row_isa(x, k, q, kpad, isa);
        bad = 0;
        for (int c = 0; c < kpad; c++) bad += q[c] != 0;
        CHECK(s == 0.0f && bad == 0, "%s zero row k=%d: scale %g, %d nonzero", donto_isa_name(isa), k, s, bad);
        free(x);
        free(q);
        free(r);
    }
    /* Ties round to even (x * inv == n.5 exactly, inv == 1), in the vector
     * part (first 16) and in the scalar tail. */
    float x2[19] = {0};
    x2[0] = 4095.0f;
    x2[3] = 2.5f;
    x2[5] = -3.5f;
    x2[15] = 0.5f;
    x2[16] = 6.5f;
    x2[17] = -1.5f;
    x2[18] = 4094.5f;
    int16_t q2[20];
    donto_qgemm_quant_row_isa(x2, 19, q2, 20, isa);
    CHECK(q2[3] == 2 && q2[5] == -4 && q2[15] == 0, "%s vector ties: %d %d %d", donto_isa_name(isa), q2[3], q2[5], q2[15]);
    CHECK(q2[16] == 6 && q2[17] == -2 && q2[18] == 4094 && q2[19] == 0, "%s tail ties: %d %d %d %d", donto_isa_name(isa), q2[16], q2[17],
          q2[18], q2[19]);
}

static void test_quant_row(void) {
    test_quant_row_on(DONTO_ISA_PORTABLE);
    for (int t = 0; t < g_isa.n; t++) test_quant_row_on(g_isa.set[t]);
    /* AUTO: the best set here */
    float x[40];
    int16_t a[40], b[40];
    for (int c = 0; c < 40; c++) x[c] = frand(-3, 3);
    CHECK(donto_qgemm_quant_row(x, 40, a, 40) == donto_qgemm_quant_row_isa(x, 40, b, 40, DONTO_ISA_PORTABLE) &&
              !memcmp(a, b, sizeof a),
          "auto quantization differs from portable");
}

static void test_shapes(void) {
    /* m, n, k: tails of MR (6), NR (16), the 24-row / 128-column tasks,
     * the 256-k accumulation block, and odd k (pair padding). */
    const int cases[][3] = {
        {1, 1, 1},     {1, 16, 32},   {2, 3, 1},     {5, 17, 2},     {6, 16, 3},     {7, 15, 7},
        {13, 33, 31},  {1, 384, 384}, {47, 130, 33}, {48, 128, 64},  {49, 129, 65},  {16, 1152, 384},
        {8, 20, 255},  {9, 20, 256},  {10, 20, 257}, {11, 24, 513},  {12, 40, 1536}, {100, 70, 300},
        {97, 385, 96}, {3, 1, 1000},  {50, 200, 384}, {61, 31, 1537}, {23, 129, 40}, {25, 127, 41},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int m = cases[t][0], n = cases[t][1], k = cases[t][2];
        run_case(m, n, k, 0, 0, 1, 1);
        run_case(m, n, k, 5, 3, 0, 2); /* ldx > k, ldy > n, no bias, 2 threads */
    }
}

static void test_threads_deterministic(void) {
    const int m = 301, n = 400, k = 520;
    problem p;
    fill_problem(&p, m, n, k, k, n, 1);
    donto_qweight qw;
    donto_err err;
    CHECK(donto_qweight_init(&qw, p.W, n, k, &err) == 0, "init: %s", err.msg);
    void *scratch = malloc(donto_qgemm_scratch_size(m, k));
    float *Y1 = malloc(sizeof(float) * (size_t)m * n), *Yt = malloc(sizeof(float) * (size_t)m * n);
    donto_qgemm_portable(p.X, m, k, k, &qw, p.bias, Y1, n, scratch, 1);
    const int threads[] = {1, 2, 3, 4, 7, 0};
    for (int s = -1; s < g_isa.n; s++)
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            memset(Yt, 0, sizeof(float) * (size_t)m * n);
            if (s < 0) donto_qgemm(p.X, m, k, k, &qw, p.bias, Yt, n, scratch, threads[t]);
            else donto_qgemm_isa(p.X, m, k, k, &qw, p.bias, Yt, n, scratch, threads[t], g_isa.set[s]);
            CHECK(memcmp(Y1, Yt, sizeof(float) * (size_t)m * n) == 0, "%s nthreads=%d differs from portable, 1 thread",
                  s < 0 ? "auto" : donto_isa_name(g_isa.set[s]), threads[t]);
        }
    free(scratch);
    free(Y1);
    free(Yt);
    donto_qweight_free(&qw);
    free_problem(&p);
}

/* Worst case for the int32 accumulators: every product at its maximum and
 * of the same sign, k large; and zero rows in X and W. */
static void test_extremes(void) {
    const int m = 7, n = 18, k = 1536;
    problem p;
    fill_problem(&p, m, n, k, k, n, 0);
    for (int c = 0; c < k; c++) {
        p.X[c] = 2.0f;                           /* row 0: all at +max */
        p.X[(size_t)1 * k + c] = -2.0f;          /* row 1: all at -max */
        p.X[(size_t)2 * k + c] = 0.0f;           /* row 2: zero */
        p.X[(size_t)3 * k + c] = c & 1 ? 3 : -3; /* row 3: alternating */
        p.W[c] = 0.5f;                           /* W row 0: all +max */
        p.W[(size_t)1 * k + c] = -0.5f;          /* W row 1: all -max */
        p.W[(size_t)2 * k + c] = 0.0f;           /* W row 2: zero */
        p.W[(size_t)3 * k + c] = c & 1 ? 1 : -1; /* W row 3: alternating */
    }
    for (int c = 0; c < k; c++) p.X[(size_t)5 * k + c] = 1e-37f; /* row 5: below the zero threshold */
    donto_qweight qw;
    donto_err err;
    CHECK(donto_qweight_init(&qw, p.W, n, k, &err) == 0, "init: %s", err.msg);
    void *scratch = malloc(donto_qgemm_scratch_size(m, k));
    donto_qgemm(p.X, m, k, k, &qw, p.bias, p.Y, n, scratch, 2);
    float *R = malloc(sizeof(float) * (size_t)m * n);
    ref_qgemm(&p, p.bias, R);
    CHECK(memcmp(R, p.Y, sizeof(float) * (size_t)m * n) == 0, "extremes differ from reference");
    float *S = malloc(sizeof(float) * (size_t)m * n);
    for (int t = 0; t < g_isa.n; t++) {
        donto_qgemm_isa(p.X, m, k, k, &qw, p.bias, S, n, scratch, 2, g_isa.set[t]);
        CHECK(memcmp(R, S, sizeof(float) * (size_t)m * n) == 0, "extremes: set %s differs from reference",
              donto_isa_name(g_isa.set[t]));
    }
    free(S);
    /* quantization is exact here, so only fp32 rounding remains */
#define NEAR(got, want) CHECK(fabs((got) - (want)) <= 1e-6 * fabs(want), "%.9g != %.9g", (double)(got), (double)(want))
    NEAR(p.Y[0], 2.0 * 0.5 * k + p.bias[0]);
    NEAR(p.Y[1], -2.0 * 0.5 * k + p.bias[1]);
    NEAR(p.Y[(size_t)1 * n + 1], 2.0 * 0.5 * k + p.bias[1]);
    NEAR(p.Y[(size_t)3 * n + 3], 3.0 * k + p.bias[3]);
    for (int j = 0; j < n; j++) {
        CHECK(p.Y[(size_t)2 * n + j] == p.bias[j], "zero row: Y[2,%d]=%g", j, p.Y[(size_t)2 * n + j]);
        CHECK(p.Y[(size_t)5 * n + j] == p.bias[j], "tiny row: Y[5,%d]=%g", j, p.Y[(size_t)5 * n + j]);
    }
    for (int i = 0; i < m; i++) CHECK(p.Y[(size_t)i * n + 2] == p.bias[2], "zero W row: Y[%d,2]", i);
    check_bound(&p, p.bias, p.Y, NULL);
    free(R);
    free(scratch);
    donto_qweight_free(&qw);
    free_problem(&p);
}

static void test_init_errors(void) {
    donto_qweight qw;
    donto_err err;
    float w[6] = {1, 2, 3, 4, 5, 6};
    CHECK(donto_qweight_init(&qw, w, 0, 3, &err) == -1, "n=0 accepted");
    CHECK_STR_CONTAINS(err.msg, "shape");
    CHECK(donto_qweight_init(&qw, w, 2, -1, &err) == -1, "k=-1 accepted");
    CHECK(donto_qweight_init(&qw, NULL, 2, 3, &err) == -1, "NULL W accepted");
    w[4] = NAN;
    CHECK(donto_qweight_init(&qw, w, 2, 3, &err) == -1, "NaN accepted");
    CHECK_STR_CONTAINS(err.msg, "[1, 1]");
    CHECK(qw.packed == NULL && qw.scale == NULL, "state left after failure");
    donto_qweight_free(&qw); /* safe after failure */
    w[4] = INFINITY;
    CHECK(donto_qweight_init(&qw, w, 2, 3, NULL) == -1, "Inf accepted");
    w[4] = 5;
    CHECK(donto_qweight_init(&qw, w, 2, 3, NULL) == 0, "valid init failed");
    CHECK(qw.n == 2 && qw.k == 3 && qw.kpairs == 2 && qw.npanels == 1, "fields");
    donto_qweight_free(&qw);
    CHECK(qw.packed == NULL, "free did not reset");
    donto_qweight_free(&qw); /* double free safe */
    CHECK(donto_qgemm_scratch_size(0, 0) > 0, "scratch size for empty");
}

/* Encoder-shaped sanity: relative error on LayerNorm-like data with outlier
 * dims stays small (a regression guard for the chosen bit widths). */
static void test_encoder_shape_error(void) {
    const int m = 64, n = 384, k = 384;
    problem p;
    fill_problem(&p, m, n, k, k, n, 0);
    for (int i = 0; i < m; i++) {
        for (int c = 0; c < k; c++) {
            double u1 = urand(), u2 = urand();
            p.X[(size_t)i * k + c] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
        }
        p.X[(size_t)i * k + 17] *= 18.0f;
        p.X[(size_t)i * k + 222] *= 12.0f;
    }
    donto_qweight qw;
    CHECK(donto_qweight_init(&qw, p.W, n, k, NULL) == 0, "init");
    void *scratch = malloc(donto_qgemm_scratch_size(m, k));
    donto_qgemm(p.X, m, k, k, &qw, p.bias, p.Y, n, scratch, 0);
    double rel;
    check_bound(&p, p.bias, p.Y, &rel);
    CHECK(rel < 2e-3, "encoder-shape relative error %.3g", rel);
    fprintf(stderr, "encoder-shape (64x384x384, outlier dims) relative error %.3g\n", rel);
    free(scratch);
    donto_qweight_free(&qw);
    free_problem(&p);
}

/* A set the CPU lacks is never run: the call takes the best set instead
 * (so the same bits, and no illegal instruction). */
static void test_fallback(void) {
    const int m = 30, n = 50, k = 70;
    problem p;
    fill_problem(&p, m, n, k, k, n, 1);
    donto_qweight qw;
    CHECK(donto_qweight_init(&qw, p.W, n, k, NULL) == 0, "init");
    void *scratch = malloc(donto_qgemm_scratch_size(m, k));
    float *P = malloc(sizeof(float) * (size_t)m * n);
    donto_qgemm_portable(p.X, m, k, k, &qw, p.bias, P, n, scratch, 1);
    for (int s = DONTO_ISA_AUTO; s < DONTO_ISA_N; s++) {
        if (s != DONTO_ISA_AUTO && cpu_isa_supported((donto_isa)s)) continue;
        donto_qgemm_isa(p.X, m, k, k, &qw, p.bias, p.Y, n, scratch, 1, (donto_isa)s);
        CHECK(memcmp(P, p.Y, sizeof(float) * (size_t)m * n) == 0, "fallback from %s differs",
              donto_isa_name((donto_isa)s));
        CHECK(strstr(donto_qgemm_kernel_name((donto_isa)s), "int16") != NULL, "kernel name");
    }
    free(P);
    free(scratch);
    donto_qweight_free(&qw);
    free_problem(&p);
}

int main(void) {
    xrand_seed(88172645463325252ull);
    /* Which sets run here; a set that cannot is said and left out. */
    isa_sets_find(&g_isa);
    test_quant_row();
    test_init_errors();
    test_shapes();
    test_threads_deterministic();
    test_extremes();
    test_encoder_shape_error();
    test_fallback();
    donto_qgemm(NULL, 0, 0, 0, NULL, NULL, NULL, 0, NULL, 1); /* m = 0: no-op (W unused) */
    isa_sets_report(&g_isa, NULL);
    return check_report("test_qgemm");
}
