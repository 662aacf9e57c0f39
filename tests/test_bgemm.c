/*
 * Tests for the bf16 GEMM (src/model/bgemm.c):
 *  - bf16 rounding: nearest with ties to even, subnormals to zero, NaN
 *    quiet, infinities kept (donto_bf16_from_f32), on chosen bit patterns;
 *  - Y equals, bit for bit, a scalar reference written here from the
 *    contract in bgemm.h (bf16 operands, pairs of k with the odd element
 *    first, one fmaf per product, subnormals flushed), on the plain C path
 *    and on every kernel set this CPU runs (the vdpbf16ps kernel on
 *    avx512bf16; a set the CPU lacks prints "SKIP <set>: CPU lacks ...");
 *  - the reference is within a rounding bound of the double-precision
 *    product of the bf16 operands;
 *  - tails: m 1..13, n 1, 15, 16, 17, 40, odd k and k past the kernel's k
 *    block; bias NULL, ldx > k, ldy > n (padding untouched), m = 0; a
 *    case with exponents across the whole fp32 range (subnormal operands,
 *    products that underflow) so the flushing is compared too;
 *  - the scratch is allocated at exactly donto_bgemm_scratch bytes (ASan
 *    sees a write past it);
 *  - init errors leave a zeroed, freeable weight; where the kernel is
 *    native (donto_bgemm_native) and its name.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgemm.h"
#include "check.h"
#include "cpu_isa.h"
#include "isa_sets.h"
#include "xrand.h"

static isa_sets g_isa;

#define PAD_MARK -777.0f

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The contract's bf16 rounding, written out again. */
static float ref_bf16(float v) {
    uint32_t u = u_of(v);
    if (isnan(v)) return f_of((u | 0x00400000u) & 0xffff0000u);
    if (fabsf(v) < 0x1p-126f) return copysignf(0.0f, v);
    u += 0x7fffu + ((u >> 16) & 1u);
    return f_of(u & 0xffff0000u);
}
static float ref_ftz(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }

static void test_rounding(void) {
    const uint32_t in[] = {0x3F800000u, 0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF80C000u, 0x7F7FFFFFu,
                           0x7F800000u, 0xFF800000u, 0x00000001u, 0x007FFFFFu, 0x807FFFFFu, 0x00800000u,
                           0x00808000u, 0x00818000u};
    const uint16_t want[] = {0x3F80u, 0x3F80u, 0x3F82u, 0x3F81u, 0xBF81u, 0x7F80u, 0x7F80u,
                             0xFF80u, 0x0000u, 0x0000u, 0x8000u, 0x0080u, 0x0080u, 0x0082u};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        const uint16_t h = donto_bf16_from_f32(f_of(in[i]));
        CHECK(h == want[i], "bf16(%08x) = %04x, want %04x", in[i], h, want[i]);
        CHECK(u_of(donto_bf16_to_f32(h)) == (uint32_t)h << 16, "bf16 %04x back to fp32", h);
    }
    const uint16_t q = donto_bf16_from_f32(f_of(0x7F800001u)); /* signalling NaN */
    CHECK((q & 0x7FC0u) == 0x7FC0u, "a NaN comes back quiet: %04x", q);
    /* against the written-out rounding on random bit patterns */
    long bad = 0;
    for (int i = 0; i < 200000; i++) {
        const uint32_t u = (uint32_t)(urand() * 4294967296.0);
        const float v = f_of(u);
        if (isnan(v)) continue;
        bad += u_of(donto_bf16_to_f32(donto_bf16_from_f32(v))) != u_of(ref_bf16(v));
    }
    CHECK(bad == 0, "%ld of 200000 random floats round differently from the reference", bad);
}

/* One case. wide: operands with exponents over the whole range. */
static void one_case(int m, int n, int k, int ldx, int ldy, int with_bias, int wide) {
    const size_t mx = (size_t)(m ? m : 1);
    float *X = malloc(sizeof(float) * mx * ldx);
    float *W = malloc(sizeof(float) * (size_t)n * k), *bias = malloc(sizeof(float) * n);
    float *Yr = malloc(sizeof(float) * mx * ldy), *Y = malloc(sizeof(float) * mx * ldy);
    for (size_t e = 0; e < (size_t)m * ldx; e++)
        X[e] = wide ? ldexpf(frand(-1, 1), (int)(urand() * 120) - 80) : frand(-2, 2);
    for (size_t e = 0; e < (size_t)n * k; e++)
        W[e] = wide ? ldexpf(frand(-1, 1), (int)(urand() * 120) - 80) : frand(-0.1f, 0.1f);
    for (int j = 0; j < n; j++) bias[j] = frand(-1, 1);
    if (wide && n > 1) bias[1] = 1e-40f; /* subnormal: read as zero */
    donto_bweight bw;
    donto_err e = {0};
    CHECK(donto_bweight_init(&bw, W, n, k, &e) == 0, "init [%d,%d]: %s", n, k, e.msg);
    CHECK(bw.npanels == (n + 15) / 16 && bw.kpairs == (k + 1) / 2, "npanels %d kpairs %d for [%d,%d]", bw.npanels,
          bw.kpairs, n, k);
    /* the reference, from the contract */
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float y = with_bias ? ref_ftz(bias[j]) : 0.0f;
            double d = y, mag = fabs(d);
            for (int t = 0; t < (k + 1) / 2; t++) {
                for (int c = 2 * t + 1; c >= 2 * t; c--) {
                    const float xv = c < k ? ref_bf16(X[(size_t)i * ldx + c]) : 0.0f;
                    const float wv = c < k ? ref_bf16(W[(size_t)j * k + c]) : 0.0f;
                    y = ref_ftz(fmaf(xv, wv, y));
                    d += (double)xv * wv;
                    mag += fabs((double)xv * wv);
                }
            }
            Yr[(size_t)i * ldy + j] = y;
            /* |fl - exact| <= k * u * sum|terms| (u = 2^-24), with margin, plus
             * what flushing can lose (k + 1 times 2^-126) */
            const double err = fabs((double)y - d), bound = (k + 1) * 6e-8 * mag + (k + 1) * 0x1p-126;
            if (err / bound > worst) worst = err / bound;
        }
    CHECK(worst <= 1.0, "m=%d n=%d k=%d: reference off the double product by %.2f of the bound", m, n, k, worst);
    void *scratch = malloc(donto_bgemm_scratch(m, k));
    donto_isa sets[DONTO_ISA_N + 1];
    int ns = 0;
    sets[ns++] = DONTO_ISA_PORTABLE;
    for (int t = 0; t < g_isa.n; t++) sets[ns++] = g_isa.set[t];
    for (int t = 0; t < ns; t++) {
        for (size_t q = 0; q < mx * ldy; q++) Y[q] = PAD_MARK;
        donto_bgemm_isa(X, m, ldx, &bw, with_bias ? bias : NULL, Y, ldy, scratch, sets[t]);
        long bad = 0, pad = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < ldy; j++) {
                const float y = Y[(size_t)i * ldy + j];
                if (j < n) bad += memcmp(&y, &Yr[(size_t)i * ldy + j], sizeof y) != 0;
                else pad += y != PAD_MARK;
            }
        if (m == 0) pad += Y[0] != PAD_MARK;
        CHECK(bad == 0, "set %s m=%d n=%d k=%d ldx=%d ldy=%d bias=%d wide=%d: %ld outputs differ from the reference",
              donto_isa_name(sets[t]), m, n, k, ldx, ldy, with_bias, wide, bad);
        CHECK(pad == 0, "set %s m=%d n=%d k=%d: %ld padding floats written", donto_isa_name(sets[t]), m, n, k, pad);
        if (sets[t] != DONTO_ISA_PORTABLE && !bad && !pad) g_isa.same[sets[t]]++;
    }
    donto_bweight_free(&bw);
    CHECK(bw.packed == NULL && bw.n == 0, "free leaves a zeroed weight");
    free(scratch);
    free(X), free(W), free(bias), free(Yr), free(Y);
}

int main(void) {
    xrand_seed(0x9E3779B97F4A7C15ull);
    isa_sets_find(&g_isa);
    test_rounding();
    /* the encoder's shapes, at a row block and a tail */
    one_case(96, 1152, 384, 384, 1152, 1, 0);
    one_case(13, 384, 1536, 1536, 384, 1, 0);
    one_case(7, 1536, 384, 384, 1536, 1, 0);
    /* tails of every dimension (k 257, 800: past the 128-pair block) */
    const int mv[] = {1, 2, 3, 5, 7, 8, 9, 12, 13}, nv[] = {1, 15, 16, 17, 40}, kv[] = {1, 2, 3, 17, 257, 800};
    for (size_t a = 0; a < sizeof mv / sizeof *mv; a++)
        for (size_t b = 0; b < sizeof nv / sizeof *nv; b++)
            for (size_t c = 0; c < sizeof kv / sizeof *kv; c++)
                one_case(mv[a], nv[b], kv[c], kv[c], nv[b], (int)((a + b + c) & 1), 0);
    /* exponents over the whole range: flushing on both paths */
    one_case(11, 40, 301, 301, 40, 1, 1);
    one_case(16, 33, 64, 64, 33, 1, 1);
    /* leading dimensions past the shape: padding untouched */
    one_case(9, 40, 33, 41, 53, 1, 0);
    one_case(6, 17, 400, 405, 20, 0, 0);
    one_case(0, 16, 8, 8, 16, 1, 0);

    /* init errors */
    donto_bweight bw;
    donto_err e = {0};
    float w1 = 1.0f;
    CHECK(donto_bweight_init(&bw, &w1, 0, 1, &e) == -1 && strstr(e.msg, "bad shape"), "n = 0 refused: %s", e.msg);
    CHECK(bw.packed == NULL, "a failed init leaves no buffer");
    donto_bweight_free(&bw);
    CHECK(donto_bweight_init(&bw, NULL, 4, 4, &e) == -1 && strstr(e.msg, "no weights"), "NULL W refused: %s", e.msg);
    donto_bweight_free(&bw);

    /* native on avx512bf16 only, named by what runs */
    CHECK(!donto_bgemm_native(DONTO_ISA_PORTABLE), "portable is not native");
    for (int t = 0; t < g_isa.n; t++) {
        const donto_isa s = g_isa.set[t];
        CHECK(donto_bgemm_native(s) == cpu_isa_bf16(s), "native on %s: %d", donto_isa_name(s), donto_bgemm_native(s));
        CHECK(strstr(donto_bgemm_kernel_name(s), cpu_isa_bf16(s) ? "vdpbf16ps" : "plain C") != NULL,
              "kernel on %s: %s", donto_isa_name(s), donto_bgemm_kernel_name(s));
    }
    /* the probe: a ratio where the kernel runs, 0 where it cannot */
    const double ratio = donto_bgemm_probe();
    if (cpu_isa_supported(DONTO_ISA_AVX512BF16)) {
        CHECK(ratio > 0.1 && ratio < 100, "probe ratio %.3f", ratio);
        printf("probe: one vdpbf16ps zmm takes %.2fx the time of one vfmadd231ps zmm here\n", ratio);
    } else {
        CHECK(ratio == 0, "probe ratio %.3f without the kernel", ratio);
    }
    CHECK(donto_bgemm_probe() == ratio, "the probe runs once");
    isa_sets_report(&g_isa, donto_bgemm_kernel_name);
    if (!cpu_isa_supported(DONTO_ISA_AVX512BF16))
        printf("SKIP the vdpbf16ps kernel: no kernel set here runs it (the sets above ran the plain C path)\n");
    return check_report("test_bgemm");
}
