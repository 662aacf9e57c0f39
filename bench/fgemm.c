/*
 * bench_fgemm: the packed fp32 GEMM (src/model/fgemm.c) against OpenBLAS
 * cblas_sgemm as the encoder called it (bert_sgemm_xwt: Y seeded with the
 * bias, then sgemm with beta = 1, W packed by OpenBLAS on every call), one
 * thread, at the encoder's shapes; m = rows per call (96 is the encoder's
 * row block).
 *
 *   bench_fgemm [reps]        (default 200)
 *
 * Times are thread CPU time, the minimum over reps calls (less inflated by
 * a busy machine than wall time); the bias fill is inside the sgemm time,
 * as it is inside the forward.  Also prints the largest |difference|
 * between the two results, relative to the largest |y|.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "bert_cpu.h"
#include "cpu_isa.h"
#include "donto/util.h"
#include "fgemm.h"

int main(int argc, char **argv) {
    bench_blas_steer(argv);
    static const char usage[] = "bench_fgemm [reps 1..1000000, default 200]";
    const int reps = (int)bench_arg_num(argc, argv, 1, 200, 1, 1e6, usage);
    bench_args_at_most(argc, 1, usage);
    const int ms[] = {16, 96, 256};
    const int mmax = 256, kmax = 1536, nmax = 1536;
    float *X = donto_aligned_alloc(sizeof(float) * mmax * kmax), *W = donto_aligned_alloc(sizeof(float) * nmax * kmax);
    float *bias = donto_aligned_alloc(sizeof(float) * nmax), *Ys = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    float *Yp = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    openblas_set_num_threads(1);
    char cpu[256];
    cpu_features_describe(cpu, sizeof cpu);
    printf("cpu: %s; packed kernel: %s; OpenBLAS core %s\n", cpu, donto_fgemm_kernel_name(DONTO_ISA_AUTO),
           openblas_get_corename());
    printf("one thread, CPU time per GEMM (min of %d), us\n", reps);
    printf("%-8s %4s %5s %5s | %9s %9s | %7s %7s | %9s\n", "shape", "m", "n", "k", "sgemm", "packed", "GFLOP/s",
           "speedup", "max rdiff");
    for (int si = 0; si < BENCH_BERT_NSHAPES; si++) {
        const int n = bench_bert_shapes[si].n, k = bench_bert_shapes[si].k;
        for (size_t e = 0; e < (size_t)n * k; e++) W[e] = (float)(0.04 * bench_nrand());
        for (int j = 0; j < n; j++) bias[j] = (float)(0.02 * bench_nrand());
        donto_fweight fw;
        if (donto_fweight_init(&fw, W, n, k, NULL)) return 1;
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int m = ms[mi];
            bench_gen_x(X, m, k);
            double best[2] = {1e30, 1e30};
            for (int r = 0; r < reps; r++) {
                double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                bert_sgemm_xwt(X, m, W, n, k, bias, Ys);
                double t1 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                donto_fgemm_isa(X, m, k, &fw, bias, Yp, n, DONTO_ISA_AUTO);
                double t2 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                if (t1 - t0 < best[0]) best[0] = t1 - t0;
                if (t2 - t1 < best[1]) best[1] = t2 - t1;
            }
            double md = 0, my = 0;
            for (size_t e = 0; e < (size_t)m * n; e++) {
                md = fmax(md, fabs((double)Ys[e] - Yp[e]));
                my = fmax(my, fabs((double)Ys[e]));
            }
            printf("%-8s %4d %5d %5d | %9.1f %9.1f | %7.1f %6.2fx | %9.2e\n", bench_bert_shapes[si].name, m, n, k, best[0] * 1e6,
                   best[1] * 1e6, 2.0 * m * n * k / best[1] * 1e-9, best[0] / best[1], md / (my > 0 ? my : 1));
        }
        donto_fweight_free(&fw);
    }
    free(X), free(W), free(bias), free(Ys), free(Yp);
    return 0;
}
