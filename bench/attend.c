/*
 * bench_attend: attention of one (sequence, head), all queries, as the
 * forward runs it: the kernel set's loops (bert_attend_one) against the two
 * OpenBLAS GEMMs with the softmax between (bert_attend_gemm), one thread,
 * by sequence length; the forward switches to the GEMMs at
 * bert_attend_gemm_min(isa, D) tokens, and this is what that rests on.
 *
 *   bench_attend [reps]        (default 200)
 *
 * Head sizes 32 (hidden 384, 12 heads: MiniLM, bge-small) and 64 (hidden
 * 768, 12 heads: the base models). Q, K, V are N(0, 1) rows of a [len, 3H]
 * QKV block, as the QKV GEMM leaves them. Times are thread CPU time, the
 * minimum over reps calls, in microseconds; "gemm/loops" over 1 means the
 * loops are faster. Also prints the largest |difference| between the two
 * contexts (they round differently).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "bert_cpu.h"
#include "cpu_isa.h"
#include "donto/encoder.h"
#include "donto/util.h"

int main(int argc, char **argv) {
    bench_blas_steer(argv);
    static const char usage[] = "bench_attend [reps 1..1000000, default 200]";
    const int reps = (int)bench_arg_num(argc, argv, 1, 200, 1, 1e6, usage);
    bench_args_at_most(argc, 1, usage);
    static const int Ds[] = {32, 64};
    static const int lens[] = {8, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256, 384, 512};
    const int NH = 12, lmax = 512, Dmax = 64, Hmax = NH * Dmax;
    float *qkv = donto_aligned_alloc(sizeof(float) * (size_t)lmax * 3 * Hmax);
    float *ctx_l = donto_aligned_alloc(sizeof(float) * (size_t)lmax * Hmax);
    float *ctx_g = donto_aligned_alloc(sizeof(float) * (size_t)lmax * Hmax);
    const size_t sl = bert_attend_scratch_floats(Dmax, lmax), sg = (size_t)lmax * lmax;
    float *scratch = donto_aligned_alloc(sizeof(float) * (sl > sg ? sl : sg));
    if (!qkv || !ctx_l || !ctx_g || !scratch) return 1;
    for (size_t e = 0; e < (size_t)lmax * 3 * Hmax; e++) qkv[e] = (float)bench_nrand();
    openblas_set_num_threads(1);
    char cpu[256];
    cpu_features_describe(cpu, sizeof cpu);
    printf("cpu: %s; kernel set %s; OpenBLAS core %s\n", cpu, donto_isa_name(cpu_isa_best()),
           openblas_get_corename());
    printf("one thread, CPU time per (sequence, head), all queries (min of %d), us\n", reps);
    for (size_t a = 0; a < sizeof Ds / sizeof *Ds; a++) {
        const int D = Ds[a], H = NH * D;
        printf("D %d: the forward takes the GEMMs from %d tokens\n", D, bert_attend_gemm_min(DONTO_ISA_AUTO, D));
        printf("%3s %4s | %9s %9s | %10s | %9s\n", "D", "len", "loops", "gemm", "gemm/loops", "max diff");
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            const int len = lens[b], h = NH / 2;
            double best[2] = {1e30, 1e30};
            for (int r = 0; r < reps; r++) {
                double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                bert_attend_one(DONTO_ISA_AUTO, qkv, H, D, h, 0, len, 0, len, ctx_l, H, scratch);
                double t1 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                bert_attend_gemm(DONTO_ISA_AUTO, qkv, H, D, h, 0, len, ctx_g, scratch);
                double t2 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                if (t1 - t0 < best[0]) best[0] = t1 - t0;
                if (t2 - t1 < best[1]) best[1] = t2 - t1;
            }
            double md = 0;
            for (int i = 0; i < len; i++)
                for (int d = 0; d < D; d++) {
                    const size_t e = (size_t)i * H + (size_t)h * D + d;
                    md = fmax(md, fabs((double)ctx_l[e] - ctx_g[e]));
                }
            printf("%3d %4d | %9.2f %9.2f | %9.2fx | %9.2e\n", D, len, best[0] * 1e6, best[1] * 1e6,
                   best[1] / best[0], md);
        }
    }
    free(qkv), free(ctx_l), free(ctx_g), free(scratch);
    return 0;
}
