/*
 * bench_util.h: what the benches share, header-only (each bench is one
 * translation unit, so every helper is static inline and costs nothing
 * where it is unused).
 *
 *   bench_seed / bench_urand / bench_nrand   one xorshift64 stream per bench:
 *                                            uniform in (0, 1), N(0, 1)
 *   bench_cpu_now(clock)                     seconds of a CPU-time clock
 *   bench_bert_shapes                        the encoder's Linear layers (n, k)
 *   bench_gen_x / bench_top_channels         BERT-like GEMM inputs with
 *                                            outlier channels, and the
 *                                            channels of largest |x|
 *   bench_rel_err                            ||Y - R|| / ||R||
 *   bench_pct                                a percentile (sorts in place)
 *   bench_normalise                          a row to unit L2 norm
 *   bench_read_npy                           a float32 [n, dim] .npy, or exit
 *   bench_arg_num                            a numeric argument in [lo, hi],
 *                                            or the usage line and exit
 *   bench_args_at_most                       no more than n arguments, or
 *                                            the usage line and exit 2
 *
 * The data and clocks only: what a bench measures and prints stays in it.
 */
#ifndef DONTO_BENCH_UTIL_H
#define DONTO_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/util.h"

/* ---- random draws ------------------------------------------------------- */

static inline uint64_t *bench_rng(void) {
    static uint64_t state = 0x9E3779B97F4A7C15ull;
    return &state;
}
/* Restart the stream at s (non-zero): the same s, the same data. */
static inline void bench_seed(uint64_t s) { *bench_rng() = s ? s : 0x9E3779B97F4A7C15ull; }
/* Uniform in the open interval (0, 1): never 0, so log() is safe. */
static inline double bench_urand(void) {
    uint64_t *s = bench_rng();
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
/* N(0, 1) by Box-Muller (one of the pair). */
static inline double bench_nrand(void) {
    double u = bench_urand(), v = bench_urand();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- clocks ------------------------------------------------------------- */

/* Seconds on clock c: CLOCK_THREAD_CPUTIME_ID for CPU time a busy machine
 * inflates less than wall time, CLOCK_PROCESS_CPUTIME_ID for all threads. */
static inline double bench_cpu_now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- GEMM data ---------------------------------------------------------- */

/* The encoder's Linear layers at BERT-small width (hidden 384, FFN 1536;
 * MiniLM and bge-small): Y[m, n] = X[m, k] W^T, one entry per matrix. */
typedef struct bench_shape {
    const char *name;
    int n, k;
} bench_shape;
#define BENCH_BERT_NSHAPES 4
static const bench_shape bench_bert_shapes[BENCH_BERT_NSHAPES] = {
    {"QKV", 1152, 384}, {"attn-out", 384, 384}, {"FFN-in", 1536, 384}, {"FFN-out", 384, 1536}};

/* X [m, k], BERT-like: for k = 384 LayerNorm-like rows, N(0, 1) with 4
 * outlier channels 16x larger (offset 1); otherwise post-GELU rows,
 * GELU(N(-0.6, 1.2^2)) with 3 outlier neurons 15x larger. */
static inline void bench_gen_x(float *X, int m, int k) {
    static const int lo[4] = {17, 101, 222, 350}, go[3] = {5, 700, 1400};
    for (int i = 0; i < m; i++)
        for (int c = 0; c < k; c++) {
            if (k == 384) {
                double g = 1.0, b = 0.0;
                for (int o = 0; o < 4; o++)
                    if (c == lo[o]) g = 16.0, b = 1.0;
                X[(size_t)i * k + c] = (float)(bench_nrand() * g + b);
            } else {
                double z = -0.6 + 1.2 * bench_nrand();
                double g = 0.5 * z * (1.0 + erf(z / sqrt(2.0)));
                for (int o = 0; o < 3; o++)
                    if (c == go[o]) g *= 15.0;
                X[(size_t)i * k + c] = (float)g;
            }
        }
}

/* out[0..nout): the channels of X [m, k] with the largest max |x| over its
 * rows, largest first (how src/model/quant.c picks int8 outliers). */
static inline void bench_top_channels(const float *X, int m, int k, int *out, int nout) {
    float *mx = calloc((size_t)k, sizeof(float));
    if (!mx) abort();
    for (int i = 0; i < m; i++)
        for (int c = 0; c < k; c++) mx[c] = fmaxf(mx[c], fabsf(X[(size_t)i * k + c]));
    for (int o = 0; o < nout; o++) {
        int best = 0;
        for (int c = 1; c < k; c++)
            if (mx[c] > mx[best]) best = c;
        out[o] = best;
        mx[best] = -1.0f;
    }
    free(mx);
}

/* Relative Frobenius error of Y against the reference R, both [cnt]. */
static inline double bench_rel_err(const float *Y, const float *R, size_t cnt) {
    double num = 0, den = 0;
    for (size_t i = 0; i < cnt; i++) {
        double d = (double)Y[i] - R[i];
        num += d * d;
        den += (double)R[i] * R[i];
    }
    return sqrt(num / den);
}

/* ---- figures and files -------------------------------------------------- */

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* The p-th quantile (0 < p <= 1) of v [n], nearest rank; sorts v. */
static inline double bench_pct(double *v, size_t n, double p) {
    qsort(v, n, sizeof *v, bench_cmp_double);
    size_t i = (size_t)ceil(p * (double)n) - 1;
    return v[i < n ? i : n - 1];
}

static inline void bench_normalise(float *v, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)v[i] * v[i];
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < d; i++) v[i] *= inv;
}

/* A float32 [n, dim] .npy (C order, as numpy.save writes it) into a malloc'd
 * array; anything else ends the bench with a message naming prog. */
static inline float *bench_read_npy(const char *prog, const char *path, size_t *n, int *dim) {
    char *buf;
    size_t len;
    donto_err err = {0};
    if (donto_read_file(path, &buf, &len, &err)) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        exit(1);
    }
    size_t hl = len > 10 ? ((unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8) : 0;
    unsigned long long rows = 0;
    int cols = 0;
    const char *shape = len > 10 && !memcmp(buf, "\x93NUMPY", 6) ? strstr(buf + 10, "'shape': (") : NULL;
    if (!shape || !strstr(buf + 10, "'descr': '<f4'") || sscanf(shape, "'shape': (%llu, %d)", &rows, &cols) != 2 ||
        cols <= 0 || len < 10 + hl || (len - 10 - hl) / 4 / (size_t)cols < rows) {
        fprintf(stderr, "%s: %s: expected a float32 [n, dim] .npy\n", prog, path);
        exit(1);
    }
    float *v = malloc(rows * (size_t)cols * 4);
    if (!v) abort();
    memcpy(v, buf + 10 + hl, rows * (size_t)cols * 4);
    free(buf);
    *n = rows, *dim = cols;
    return v;
}

/* ---- arguments ----------------------------------------------------------- */

/* argv[i] as a number in [lo, hi], dflt when absent. "-h"/"--help" prints
 * usage and exits 0; anything else that is not such a number (atoi read
 * "--help" as 0 reps and the bench printed a table of garbage) prints what
 * is wrong and usage, and exits 2. */
static inline double bench_arg_num(int argc, char **argv, int i, double dflt, double lo, double hi,
                                   const char *usage) {
    for (int a = 1; a < argc; a++)
        if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
            printf("usage: %s\n", usage);
            exit(0);
        }
    if (i >= argc) return dflt;
    char *end = NULL;
    const double v = strtod(argv[i], &end);
    if (end == argv[i] || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: argument %d '%s' is not a number in [%g, %g]\nusage: %s\n", argv[0], i, argv[i], lo,
                hi, usage);
        exit(2);
    }
    return v;
}

/* More than nargs arguments: the usage line, exit 2. */
static inline void bench_args_at_most(int argc, int nargs, const char *usage) {
    if (argc > nargs + 1) {
        fprintf(stderr, "usage: %s\n", usage);
        exit(2);
    }
}
#endif
