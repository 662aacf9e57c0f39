/*
 * Tests for the forward's attention loops (bert_cpu_kern.h, attend_one: the
 * path of every sequence shorter than bert_attend_gemm_min, on the AVX2
 * sets every sequence of a 384-wide model) and of its GEMM form
 * (bert_attend_gemm, for longer ones):
 *  - ctx equals a double-precision softmax(Q K^T / sqrt(D)) V within 1e-5,
 *    on the portable loops and on every kernel set this CPU runs;
 *  - shapes: head sizes with a register path (32, 64), other multiples of 8
 *    (8, 24, 40) and over 64 (96), one not a multiple of 8 (12); lengths
 *    around the 8- and 16-key blocks (1..9, 15..17, 19, 24, 33, 47) and
 *    longer ones (64, 100, 129, 260: several rounds of 12 queries); all queries,
 *    the CLS query alone, and the second half (odd and even query counts,
 *    for the 6 / 2 score blocks and the 3 / 2 / 1 P V blocks); head 0 and
 *    the last head; the sequence at row 0 and further down;
 *  - only ctx rows [0, q1 - q0) and the head's columns are written;
 *  - qkv is allocated to the sequence's last row exactly, so a read past
 *    it (a partial key block not clamped to the sequence) is a heap overflow
 *    under the ASan build; rows before the sequence are NaN, so a read of
 *    them that reached the output would show;
 *  - SIMD sets on the same loops (bert_kern_name: avx2, avx512) give the
 *    same bits;
 *  - the GEMM form (all queries) is within 1e-5 of the same reference.
 * A set the CPU lacks prints "SKIP <set>: CPU lacks ..." (isa_sets.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_cpu.h"
#include "check.h"
#include "cpu_isa.h"
#include "isa_sets.h"
#include "xrand.h"

#define MARK -777.0f
#define NHEADS 3

static isa_sets g_isa;
static int g_first[DONTO_ISA_N]; /* per set (index into g_isa.set): the first set on the same loops */
static long g_cases;

/* ctx[i][d] for queries [q0, q1) of head h, in double. */
static void reference(const float *qkv, int H, int D, int h, int o, int len, int q0, int q1, double *out) {
    const int ld = 3 * H;
    double *p = malloc(sizeof(double) * (size_t)len);
    for (int i = q0; i < q1; i++) {
        const float *q = qkv + (size_t)(o + i) * ld + h * D;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < len; j++) {
            const float *k = qkv + (size_t)(o + j) * ld + H + h * D;
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)q[d] * k[d];
            p[j] = s / sqrt((double)D);
            mx = p[j] > mx ? p[j] : mx;
        }
        for (int j = 0; j < len; j++) sum += p[j] = exp(p[j] - mx);
        for (int d = 0; d < D; d++) {
            double a = 0;
            for (int j = 0; j < len; j++) a += p[j] / sum * qkv[(size_t)(o + j) * ld + 2 * H + h * D + d];
            out[(size_t)(i - q0) * D + d] = a;
        }
    }
    free(p);
}

/* One shape on every set; returns nothing, CHECKs everything. */
static void one_case(int D, int len, int q0, int q1, int h, int o) {
    const int H = NHEADS * D, ld = 3 * H, rows = q1 - q0, cs = H + 5;
    float *qkv = malloc(sizeof(float) * (size_t)(o + len) * ld);
    for (size_t e = 0; e < (size_t)o * ld; e++) qkv[e] = NAN;
    for (size_t e = (size_t)o * ld; e < (size_t)(o + len) * ld; e++) qkv[e] = frand(-2, 2);
    double *ref = malloc(sizeof(double) * (size_t)rows * D);
    reference(qkv, H, D, h, o, len, q0, q1, ref);
    float *scratch = malloc(sizeof(float) * bert_attend_scratch_floats(D, len));
    float *ctx = malloc(sizeof(float) * (size_t)(rows + 1) * cs), *first[DONTO_ISA_N] = {0};
    for (int t = -1; t < g_isa.n; t++) {
        const donto_isa isa = t < 0 ? DONTO_ISA_PORTABLE : g_isa.set[t];
        for (size_t e = 0; e < (size_t)(rows + 1) * cs; e++) ctx[e] = MARK;
        bert_attend_one(isa, qkv, H, D, h, o, len, q0, q1, ctx, cs, scratch);
        double worst = 0;
        long stray = 0;
        for (int i = 0; i <= rows; i++)
            for (int c = 0; c < cs; c++) {
                const float v = ctx[(size_t)i * cs + c];
                if (i < rows && c >= h * D && c < (h + 1) * D) {
                    const double err = fabs((double)v - ref[(size_t)i * D + c - h * D]);
                    worst = !(err <= worst) ? err : worst; /* NaN sticks */
                } else if (v != MARK) {
                    stray++;
                }
            }
        CHECK(worst <= 1e-5, "set %s D=%d len=%d q=[%d,%d) h=%d o=%d: max error %.3g vs double",
              donto_isa_name(isa), D, len, q0, q1, h, o, worst);
        CHECK(stray == 0, "set %s D=%d len=%d q=[%d,%d) h=%d o=%d: %ld values written outside the head's rows",
              donto_isa_name(isa), D, len, q0, q1, h, o, stray);
        if (t < 0) continue;
        const int f = g_first[t];
        if (f == t) {
            first[t] = memcpy(malloc(sizeof(float) * (size_t)(rows + 1) * cs), ctx, sizeof(float) * (size_t)(rows + 1) * cs);
            g_isa.same[isa]++;
        } else if (memcmp(first[f], ctx, sizeof(float) * (size_t)(rows + 1) * cs) == 0) {
            g_isa.same[isa]++;
        } else {
            CHECK(0, "set %s D=%d len=%d q=[%d,%d): bits differ from %s (both on the %s loops)", donto_isa_name(isa), D,
                  len, q0, q1, donto_isa_name(g_isa.set[f]), bert_kern_name(isa));
        }
    }
    for (int t = 0; t < g_isa.n; t++) free(first[t]);
    if (q0 == 0 && q1 == len) {
        /* the GEMM form writes rows [o, o + len) of a stride-H context */
        float *g = malloc(sizeof(float) * (size_t)(o + len) * H), *sg = malloc(sizeof(float) * (size_t)len * len);
        bert_attend_gemm(DONTO_ISA_AUTO, qkv, H, D, h, o, len, g, sg);
        double worst = 0;
        for (int i = 0; i < len; i++)
            for (int d = 0; d < D; d++) {
                const double err = fabs((double)g[(size_t)(o + i) * H + h * D + d] - ref[(size_t)i * D + d]);
                worst = !(err <= worst) ? err : worst;
            }
        CHECK(worst <= 1e-5, "GEMM form D=%d len=%d h=%d o=%d: max error %.3g vs double", D, len, h, o, worst);
        free(sg);
        free(g);
    }
    g_cases++;
    free(ctx);
    free(scratch);
    free(ref);
    free(qkv);
}

int main(void) {
    isa_sets_find(&g_isa);
    for (int t = 0; t < g_isa.n; t++) {
        g_first[t] = t;
        for (int u = 0; u < t; u++)
            if (!strcmp(bert_kern_name(g_isa.set[u]), bert_kern_name(g_isa.set[t]))) {
                g_first[t] = u;
                break;
            }
    }
    static const int Ds[] = {8, 12, 24, 32, 40, 64, 96};
    static const int lens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 19, 24, 33, 47, 64, 100, 129, 260};
    for (size_t a = 0; a < sizeof Ds / sizeof *Ds; a++)
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            const int D = Ds[a], len = lens[b];
            one_case(D, len, 0, len, 0, 0);                 /* all queries, first head, row 0 */
            one_case(D, len, 0, len, NHEADS - 1, 3);        /* last head, further down */
            one_case(D, len, 0, 1, 1, 2);                   /* the CLS query alone */
            if (len > 1) one_case(D, len, len / 2, len, 1, 0); /* the second half */
        }
    printf("%ld shapes\n", g_cases);
    /* per set: the shapes within 1e-5 of double with the bits of the first
     * set on the same loops; portable is checked against double only */
    for (int t = 0; t < g_isa.n; t++) {
        const donto_isa s = g_isa.set[t];
        if (g_first[t] == t)
            printf("set %s (%s loops): %ld shapes within 1e-5 of double\n", donto_isa_name(s), bert_kern_name(s),
                   g_isa.same[s]);
        else
            printf("set %s (%s loops): %ld shapes within 1e-5 of double, bits equal to set %s\n", donto_isa_name(s),
                   bert_kern_name(s), g_isa.same[s], donto_isa_name(g_isa.set[g_first[t]]));
    }
    for (int t = 0; t < g_isa.n; t++) CHECK(g_isa.same[g_isa.set[t]] > 0, "set %s ran no case", donto_isa_name(g_isa.set[t]));
    printf("kernel sets run: portable");
    for (int t = 0; t < g_isa.n; t++) printf(" %s", donto_isa_name(g_isa.set[t]));
    printf("; skipped:%s\n", *g_isa.skipped ? g_isa.skipped : " none");
    return check_report("test_attend");
}
