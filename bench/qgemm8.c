/*
 * bench_qgemm8: CPU time per GEMM, one thread, at BERT shapes: OpenBLAS
 * sgemm vs the int16 path vs the int8 path (qgemm.h) with a weight scale per
 * row and with scales per group of k, m = tokens.
 *
 *   bench_qgemm8 [reps] [nout] [group]   (default 200 reps, 8 outlier
 *                                         channels, groups of 64)
 *
 * Times are thread CPU time (CLOCK_THREAD_CPUTIME_ID), the minimum over
 * reps calls, so a busy machine (this one is shared; run it under nice)
 * inflates them less than wall time would; quantizing X and the bias are
 * inside the int16 / int8 times.  Also prints each path's relative error
 * against the fp32 product on LayerNorm-like / post-GELU-like data with
 * outlier channels (the int8 outliers are the nout largest-|x| channels of
 * a calibration draw, as quant.c picks them).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "cpu_isa.h"
#include "donto/util.h"
#include "qgemm.h"

int main(int argc, char **argv) {
    bench_blas_steer(argv);
    static const char usage[] = "bench_qgemm8 [reps 1..1000000, default 200] [outlier channels 0..32, default 8] "
                                "[weight scale group 4..512, a multiple of 4, default 64]";
    const int reps = (int)bench_arg_num(argc, argv, 1, 200, 1, 1e6, usage);
    const int nout = (int)bench_arg_num(argc, argv, 2, 8, 0, DONTO_QGEMM8_MAXOUT, usage);
    const int group = (int)bench_arg_num(argc, argv, 3, 64, 4, DONTO_QGEMM8_GMAX, usage);
    bench_args_at_most(argc, 3, usage);
    if (group % 4) {
        fprintf(stderr, "bench_qgemm8: group %d is not a multiple of 4\n%s\n", group, usage);
        return 2;
    }
    const int ms[] = {16, 64, 256};
    const int mmax = 256, kmax = 1536, nmax = 1536;
    float *X = donto_aligned_alloc(sizeof(float) * mmax * kmax), *W = donto_aligned_alloc(sizeof(float) * nmax * kmax);
    float *bias = donto_aligned_alloc(sizeof(float) * nmax), *Yf = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    float *Y16 = donto_aligned_alloc(sizeof(float) * mmax * nmax), *Y8 = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    float *Y8g = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    size_t ss = donto_qgemm_scratch_size(mmax, kmax), s8 = donto_qgemm8_scratch_size(mmax, kmax);
    void *scratch = donto_aligned_alloc(ss > s8 ? ss : s8);
    openblas_set_num_threads(1);
    printf("one thread, CPU time per GEMM (min of %d), us; int8: %s, %d outlier channels; int8g: %s, weight scales "
           "per %d k\n",
           reps, donto_qgemm8_kernel_name(DONTO_ISA_AUTO), nout, donto_qgemm8_group_kernel_name(DONTO_ISA_AUTO), group);
    printf("%-8s %4s %5s %5s | %8s %8s %8s %8s | %6s %6s %6s | %9s %9s %9s\n", "shape", "m", "n", "k", "sgemm", "int16",
           "int8", "int8g", "8/16", "8g/16", "8/f32", "err16", "err8", "err8g");
    for (int si = 0; si < BENCH_BERT_NSHAPES; si++) {
        const int n = bench_bert_shapes[si].n, k = bench_bert_shapes[si].k;
        for (size_t e = 0; e < (size_t)n * k; e++) W[e] = (float)(0.04 * bench_nrand() * (bench_urand() < 0.001 ? 5 : 1));
        for (int j = 0; j < n; j++) bias[j] = (float)(0.02 * bench_nrand());
        bench_gen_x(X, mmax, k);
        int out[DONTO_QGEMM8_MAXOUT];
        bench_top_channels(X, mmax, k, out, nout); /* "calibration" */
        donto_qweight q16;
        donto_qweight8 q8, q8g;
        if (donto_qweight_init(&q16, W, n, k, NULL) || donto_qweight8_init(&q8, W, n, k, out, nout, NULL) ||
            donto_qweight8_init_ex(&q8g, W, n, k, out, nout, group, NULL))
            return 1;
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int m = ms[mi];
            bench_gen_x(X, m, k);
            double best[4] = {1e30, 1e30, 1e30, 1e30};
            for (int r = 0; r < reps; r++)
                for (int lib = 0; lib < 4; lib++) {
                    double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                    if (lib == 0) {
                        for (int i = 0; i < m; i++) memcpy(Yf + (size_t)i * n, bias, sizeof(float) * n);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, X, k, W, k, 1.0f, Yf, n);
                    } else if (lib == 1)
                        donto_qgemm(X, m, k, k, &q16, bias, Y16, n, scratch, 1);
                    else if (lib == 2)
                        donto_qgemm8_isa(X, m, k, k, &q8, bias, Y8, n, scratch, 1, DONTO_ISA_AUTO);
                    else
                        donto_qgemm8_isa(X, m, k, k, &q8g, bias, Y8g, n, scratch, 1, DONTO_ISA_AUTO);
                    double dt = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID) - t0;
                    if (dt < best[lib]) best[lib] = dt;
                }
            printf("%-8s %4d %5d %5d | %8.1f %8.1f %8.1f %8.1f | %5.2fx %5.2fx %5.2fx | %9.2e %9.2e %9.2e\n",
                   bench_bert_shapes[si].name, m, n, k, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6, best[3] * 1e6,
                   best[1] / best[2], best[1] / best[3], best[0] / best[2], bench_rel_err(Y16, Yf, (size_t)m * n),
                   bench_rel_err(Y8, Yf, (size_t)m * n), bench_rel_err(Y8g, Yf, (size_t)m * n));
            fflush(stdout);
        }
        donto_qweight_free(&q16);
        donto_qweight8_free(&q8);
        donto_qweight8_free(&q8g);
    }
    return 0;
}
