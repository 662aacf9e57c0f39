/*
 * bench_sgemm: the machine's fp32 GEMM throughput with OpenBLAS cblas_sgemm,
 * the yardstick bench/embed-vs-ort divides the encoders' achieved FLOP/s by.
 *
 *   bench_sgemm [--threads N] [--repeat R] [--min-seconds S]
 *
 * Shapes (row-major, C[m,n] = A[m,k] * B[k,n], B transposed as a Linear weight):
 *   square     m = n = k = 1024
 *   bert_ffn1  m = 4096, k = 384,  n = 1536   (tokens x hidden -> intermediate)
 *   bert_ffn2  m = 4096, k = 1536, n = 384    (intermediate -> hidden)
 *   bert_qkv   m = 4096, k = 384,  n = 1152   (fused Q/K/V projection)
 * Each shape: one warm-up, then R measurements of at least S seconds each
 * (as many calls as fit); the best GFLOP/s (2mnk / time) is reported.
 * Output: one JSON object on stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *alloc_fill(size_t n, unsigned seed) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(float)) != 0) return NULL;
    unsigned s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)((int)(s >> 9) % 2001 - 1000) * 1e-3f;
    }
    return p;
}

struct shape {
    const char *name;
    int m, n, k;
};

static double bench_shape(const struct shape *sh, int repeat, double min_s, double *best_t) {
    float *a = alloc_fill((size_t)sh->m * sh->k, 1);
    float *b = alloc_fill((size_t)sh->n * sh->k, 2);
    float *c = alloc_fill((size_t)sh->m * sh->n, 3);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        exit(1);
    }
    /* warm-up: thread pool start, page faults */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh->m, sh->n, sh->k, 1.0f, a, sh->k, b, sh->k,
                0.0f, c, sh->n);
    double best = 0.0;
    *best_t = 0.0;
    for (int r = 0; r < repeat; r++) {
        int calls = 0;
        double t0 = now_s(), t;
        do {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh->m, sh->n, sh->k, 1.0f, a, sh->k, b,
                        sh->k, 0.0f, c, sh->n);
            calls++;
            t = now_s() - t0;
        } while (t < min_s);
        double per = t / calls;
        double gf = 2.0 * sh->m * sh->n * (double)sh->k / per * 1e-9;
        if (gf > best) {
            best = gf;
            *best_t = per;
        }
    }
    volatile float sink = c[0];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int repeat = 5;
    double min_s = 0.2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            repeat = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--min-seconds") && i + 1 < argc) {
            min_s = atof(argv[++i]);
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: bench_sgemm [--threads N] [--repeat R] [--min-seconds S]\n"
                   "Best-of-R cblas_sgemm GFLOP/s on square 1024^3 and BERT-like shapes; JSON on stdout.\n");
            return 0;
        } else {
            fprintf(stderr, "bench_sgemm: unknown argument %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1) threads = 1;
    if (repeat < 1) repeat = 1;
    openblas_set_num_threads(threads);

    static const struct shape shapes[] = {
        {"square", 1024, 1024, 1024},
        {"bert_ffn1", 4096, 1536, 384},
        {"bert_ffn2", 4096, 384, 1536},
        {"bert_qkv", 4096, 1152, 384},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    double gf[sizeof shapes / sizeof shapes[0]], secs[sizeof shapes / sizeof shapes[0]];
    double best = 0.0, bert_sum_t = 0.0, bert_sum_f = 0.0;
    for (int i = 0; i < nshapes; i++) {
        gf[i] = bench_shape(&shapes[i], repeat, min_s, &secs[i]);
        if (gf[i] > best) best = gf[i];
        if (strncmp(shapes[i].name, "bert_", 5) == 0) {
            bert_sum_t += secs[i];
            bert_sum_f += 2.0 * shapes[i].m * shapes[i].n * (double)shapes[i].k;
        }
    }
    const char *core = openblas_get_corename();
    printf("{\"threads\":%d,\"openblas_threads\":%d,\"openblas_core\":\"%s\",\"repeat\":%d,\"shapes\":[", threads,
           openblas_get_num_threads(), core ? core : "?", repeat);
    for (int i = 0; i < nshapes; i++) {
        printf("%s{\"name\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"seconds\":%.6g,\"gflops\":%.2f}", i ? "," : "",
               shapes[i].name, shapes[i].m, shapes[i].n, shapes[i].k, secs[i], gf[i]);
    }
    printf("],\"gflops_square\":%.2f,\"gflops_bert\":%.2f,\"gflops_best\":%.2f}\n", gf[0],
           bert_sum_t > 0 ? bert_sum_f / bert_sum_t * 1e-9 : 0.0, best);
    return 0;
}
