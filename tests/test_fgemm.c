/*
 * Tests for the packed fp32 GEMM (src/model/fgemm.c):
 *  - Y equals, bit for bit, a scalar reference written here from the
 *    contract (y = bias, then fmaf over c = 0 .. k-1 in order), on the
 *    portable path and on every kernel set this CPU runs;
 *  - Y is within a rounding bound of the double-precision product;
 *  - tails: m 1..13, n not a multiple of 16 (1, 15, 17, 40), k 1 and k past
 *    the kernel's k block (the blocks start from Y, so the order holds);
 *    bias NULL, ldx > k, ldy > n (padding left untouched), m = 0;
 *  - init errors (bad shape, no weights) leave a zeroed, freeable weight;
 *  - which sets the encoder should use it on (donto_fgemm_preferred).
 * A set the CPU lacks prints "SKIP <set>: CPU lacks ..." (isa_sets.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_isa.h"
#include "fgemm.h"
#include "isa_sets.h"
#include "xrand.h"

static isa_sets g_isa;


#define PAD_MARK -777.0f

static void one_case(int m, int n, int k, int ldx, int ldy, int with_bias) {
    float *X = malloc(sizeof(float) * (size_t)(m ? m : 1) * ldx);
    float *W = malloc(sizeof(float) * (size_t)n * k), *bias = malloc(sizeof(float) * n);
    float *Yr = malloc(sizeof(float) * (size_t)(m ? m : 1) * ldy), *Y = malloc(sizeof(float) * (size_t)(m ? m : 1) * ldy);
    for (size_t e = 0; e < (size_t)m * ldx; e++) X[e] = frand(-2, 2);
    for (size_t e = 0; e < (size_t)n * k; e++) W[e] = frand(-0.1f, 0.1f);
    for (int j = 0; j < n; j++) bias[j] = frand(-1, 1);
    donto_fweight fw;
    donto_err e = {0};
    CHECK(donto_fweight_init(&fw, W, n, k, &e) == 0, "init [%d,%d]: %s", n, k, e.msg);
    CHECK(fw.npanels == (n + 15) / 16, "npanels %d for n %d", fw.npanels, n);
    /* the reference, from the contract */
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float y = with_bias ? bias[j] : 0.0f;
            double d = with_bias ? bias[j] : 0.0, mag = fabs(d);
            for (int c = 0; c < k; c++) {
                y = fmaf(X[(size_t)i * ldx + c], W[(size_t)j * k + c], y);
                d += (double)X[(size_t)i * ldx + c] * W[(size_t)j * k + c];
                mag += fabs((double)X[(size_t)i * ldx + c] * W[(size_t)j * k + c]);
            }
            Yr[(size_t)i * ldy + j] = y;
            /* |fl - exact| <= k * u * sum|terms| (u = 2^-24), with margin */
            const double err = fabs((double)y - d), bound = (k + 1) * 6e-8 * mag + 1e-30;
            if (err / bound > worst) worst = err / bound;
        }
    CHECK(worst <= 1.0, "m=%d n=%d k=%d: reference off the double product by %.2f of the bound", m, n, k, worst);
    donto_isa sets[DONTO_ISA_N + 1];
    int ns = 0;
    sets[ns++] = DONTO_ISA_PORTABLE;
    for (int t = 0; t < g_isa.n; t++) sets[ns++] = g_isa.set[t];
    for (int t = 0; t < ns; t++) {
        for (size_t q = 0; q < (size_t)(m ? m : 1) * ldy; q++) Y[q] = PAD_MARK;
        donto_fgemm_isa(X, m, ldx, &fw, with_bias ? bias : NULL, Y, ldy, sets[t]);
        long bad = 0, pad = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < ldy; j++) {
                const float y = Y[(size_t)i * ldy + j];
                if (j < n) bad += memcmp(&y, &Yr[(size_t)i * ldy + j], sizeof y) != 0;
                else pad += y != PAD_MARK;
            }
        if (m == 0) pad += Y[0] != PAD_MARK;
        CHECK(bad == 0, "set %s m=%d n=%d k=%d ldx=%d ldy=%d bias=%d: %ld outputs differ from the reference",
              donto_isa_name(sets[t]), m, n, k, ldx, ldy, with_bias, bad);
        CHECK(pad == 0, "set %s m=%d n=%d k=%d: %ld padding floats written", donto_isa_name(sets[t]), m, n, k, pad);
        if (sets[t] != DONTO_ISA_PORTABLE && !bad && !pad) g_isa.same[sets[t]]++;
    }
    donto_fweight_free(&fw);
    CHECK(fw.packed == NULL && fw.n == 0, "free leaves a zeroed weight");
    free(X), free(W), free(bias), free(Yr), free(Y);
}

int main(void) {
    xrand_seed(0x2545F4914F6CDD1Dull);
    isa_sets_find(&g_isa);
    /* the encoder's shapes, at a row block and a tail */
    one_case(96, 1152, 384, 384, 1152, 1);
    one_case(13, 384, 1536, 1536, 384, 1);
    one_case(7, 1536, 384, 384, 1536, 1);
    /* tails of every dimension */
    const int mv[] = {1, 2, 3, 4, 5, 6, 7, 12, 13}, nv[] = {1, 15, 16, 17, 40}, kv[] = {1, 2, 17, 385, 800};
    for (size_t a = 0; a < sizeof mv / sizeof *mv; a++)
        for (size_t b = 0; b < sizeof nv / sizeof *nv; b++)
            for (size_t c = 0; c < sizeof kv / sizeof *kv; c++)
                one_case(mv[a], nv[b], kv[c], kv[c], nv[b], (int)((a + b + c) & 1));
    /* leading dimensions past the shape: padding untouched */
    one_case(9, 40, 33, 41, 53, 1);
    one_case(6, 17, 400, 405, 20, 0);
    one_case(0, 16, 8, 8, 16, 1);

    /* init errors */
    donto_fweight fw;
    donto_err e = {0};
    float w1 = 1.0f;
    CHECK(donto_fweight_init(&fw, &w1, 0, 1, &e) == -1 && strstr(e.msg, "bad shape"), "n = 0 refused: %s", e.msg);
    CHECK(fw.packed == NULL, "a failed init leaves no buffer");
    donto_fweight_free(&fw);
    CHECK(donto_fweight_init(&fw, NULL, 4, 4, &e) == -1 && strstr(e.msg, "no weights"), "NULL W refused: %s", e.msg);
    donto_fweight_free(&fw);

    /* where the encoder uses it: every SIMD set (ymm kernel, zmm on the
     * AVX-512 sets), not portable */
    CHECK(!donto_fgemm_preferred(DONTO_ISA_PORTABLE), "portable is not preferred");
    for (int t = 0; t < g_isa.n; t++) {
        const donto_isa s = g_isa.set[t];
        const int zmm = cpu_isa_zmm(s);
        CHECK(donto_fgemm_preferred(s) == 1, "preferred on %s: %d", donto_isa_name(s), donto_fgemm_preferred(s));
        CHECK(strstr(donto_fgemm_kernel_name(s), zmm ? "zmm" : "ymm") != NULL, "kernel on %s: %s",
              donto_isa_name(s), donto_fgemm_kernel_name(s));
    }
    isa_sets_report(&g_isa, donto_fgemm_kernel_name);
    return check_report("test_fgemm");
}
