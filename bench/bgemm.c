/*
 * bench_bgemm: the bf16 GEMM (src/model/bgemm.c) against the GEMMs it
 * competes with on the same CPU, one thread, at the encoder's shapes:
 *   - the packed fp32 GEMM (fgemm.c), what --precision fp32 runs;
 *   - the int16 GEMM (qgemm.c), what --precision int16 runs;
 *   - OpenBLAS sgemm on bf16-rounded operands, what bf16 ran before the
 *     native kernel (and still runs where there is none).
 * m = rows per call (96 is the encoder's row block). Every time includes
 * the per-call work of its path (rounding or quantising X, the bias).
 *
 *   bench_bgemm [reps]        (default 200)
 *
 * OpenBLAS is steered as donto-embed steers it (bench_blas.h).
 *
 * Times are thread CPU time, the minimum over reps calls. Ratios are
 * "bf16 is Nx faster than". On a CPU without AVX-512 BF16 the bf16 column
 * is the plain C path: it says so, and the ratios are not the kernel's.
 * Also prints the largest |bf16 - fp32| relative to the largest |y|.
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
#include "bf16.h"
#include "bgemm.h"
#include "cpu_isa.h"
#include "donto/util.h"
#include "fgemm.h"
#include "qgemm.h"

int main(int argc, char **argv) {
    bench_blas_steer(argv);
    static const char usage[] = "bench_bgemm [reps 1..1000000, default 200]";
    const int reps = (int)bench_arg_num(argc, argv, 1, 200, 1, 1e6, usage);
    bench_args_at_most(argc, 1, usage);
    const int ms[] = {16, 96, 256};
    const int mmax = 256, kmax = 1536, nmax = 1536;
    float *X = donto_aligned_alloc(sizeof(float) * mmax * kmax), *W = donto_aligned_alloc(sizeof(float) * nmax * kmax);
    float *Wr = donto_aligned_alloc(sizeof(float) * nmax * kmax), *Xr = donto_aligned_alloc(sizeof(float) * mmax * kmax);
    float *bias = donto_aligned_alloc(sizeof(float) * nmax), *Yf = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    float *Yb = donto_aligned_alloc(sizeof(float) * mmax * nmax), *Yq = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    float *Ys = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    void *bscratch = malloc(donto_bgemm_scratch(mmax, kmax)), *qscratch = malloc(donto_qgemm_scratch_size(mmax, kmax));
    openblas_set_num_threads(1);
    char cpu[256];
    cpu_features_describe(cpu, sizeof cpu);
    const int native = donto_bgemm_native(DONTO_ISA_AUTO);
    printf("cpu: %s\nbf16: %s%s; fp32: %s; int16: %s; OpenBLAS core %s\n", cpu, donto_bgemm_kernel_name(DONTO_ISA_AUTO),
           native ? "" : " (no AVX-512 BF16 here: a reference path, not the kernel)",
           donto_fgemm_kernel_name(DONTO_ISA_AUTO), donto_qgemm_kernel_name(DONTO_ISA_AUTO), openblas_get_corename());
    if (native)
        printf("probe (donto_bgemm_probe): one vdpbf16ps takes %.2fx the time of one vfmadd231ps here\n",
               donto_bgemm_probe());
    printf("one thread, CPU time per GEMM (min of %d), us; bf16 GFLOP/s; bf16 speedup over each\n", reps);
    printf("%-8s %4s %5s %5s | %8s %8s %8s %8s | %7s | %6s %6s %6s | %9s\n", "shape", "m", "n", "k", "bf16", "fp32",
           "int16", "sgemm16", "GFLOP/s", "/fp32", "/int16", "/sgemm", "max rdiff");
    for (int si = 0; si < BENCH_BERT_NSHAPES; si++) {
        const int n = bench_bert_shapes[si].n, k = bench_bert_shapes[si].k;
        for (size_t e = 0; e < (size_t)n * k; e++) W[e] = (float)(0.04 * bench_nrand());
        for (int j = 0; j < n; j++) bias[j] = (float)(0.02 * bench_nrand());
        bf16_round_f32(Wr, W, (size_t)n * k);
        donto_fweight fw;
        donto_bweight bw;
        donto_qweight qw;
        if (donto_fweight_init(&fw, W, n, k, NULL) || donto_bweight_init(&bw, W, n, k, NULL) ||
            donto_qweight_init(&qw, W, n, k, NULL))
            return 1;
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
            const int m = ms[mi];
            bench_gen_x(X, m, k);
            double best[4] = {1e30, 1e30, 1e30, 1e30};
            for (int r = 0; r < reps; r++) {
                double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                donto_bgemm_isa(X, m, k, &bw, bias, Yb, n, bscratch, DONTO_ISA_AUTO);
                double t1 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                donto_fgemm_isa(X, m, k, &fw, bias, Yf, n, DONTO_ISA_AUTO);
                double t2 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                donto_qgemm_isa(X, m, k, k, &qw, bias, Yq, n, qscratch, 1, DONTO_ISA_AUTO);
                double t3 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                bf16_round_f32(Xr, X, (size_t)m * k);
                bert_sgemm_xwt(Xr, m, Wr, n, k, bias, Ys);
                double t4 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                const double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
                for (int q = 0; q < 4; q++)
                    if (d[q] < best[q]) best[q] = d[q];
            }
            double md = 0, my = 0;
            for (size_t e = 0; e < (size_t)m * n; e++) {
                md = fmax(md, fabs((double)Yb[e] - Yf[e]));
                my = fmax(my, fabs((double)Yf[e]));
            }
            printf("%-8s %4d %5d %5d | %8.1f %8.1f %8.1f %8.1f | %7.1f | %5.2fx %5.2fx %5.2fx | %9.2e\n",
                   bench_bert_shapes[si].name, m, n, k, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6, best[3] * 1e6,
                   2.0 * m * n * k / best[0] * 1e-9, best[1] / best[0], best[2] / best[0], best[3] / best[0],
                   md / (my > 0 ? my : 1));
        }
        donto_fweight_free(&fw);
        donto_bweight_free(&bw);
        donto_qweight_free(&qw);
    }
    free(X), free(W), free(Wr), free(Xr), free(bias), free(Yf), free(Yb), free(Yq), free(Ys);
    free(bscratch), free(qscratch);
    return 0;
}
