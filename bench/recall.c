/* bench_recall: exact scan vs the ANN index (include/donto/ann.h) on
 * synthetic unit vectors, optionally also on real embeddings. Driven by
 * bench/recall (the wrapper documents the options and the output). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "donto/ann.h"
#include "donto/recall.h"
#include "donto/util.h"

enum { K = 10 };

/* Mixture of Gaussians on the sphere: nc random unit centres; a point is a
 * centre plus isotropic noise of total norm ~sigma, normalised (cosine to
 * its centre ~ 1/sqrt(1+sigma^2)). nc == 0: uniform on the sphere. */
static void gen(float *x, size_t n, int d, const float *centres, int nc, float sigma) {
    float s = sigma / sqrtf((float)d);
    for (size_t i = 0; i < n; i++) {
        float *v = x + i * (size_t)d;
        if (nc) {
            const float *c = centres + (size_t)(bench_urand() * nc) % (size_t)nc * (size_t)d;
            for (int j = 0; j < d; j++) v[j] = c[j] + s * (float)bench_nrand();
        } else {
            for (int j = 0; j < d; j++) v[j] = (float)bench_nrand();
        }
        bench_normalise(v, d);
    }
}

/* Ground truth: exact top K of every query, by blocked sgemm (fast) with a
 * sorted insertion list per query. */
static void truth(const float *x, size_t n, int d, const float *q, size_t nq, int64_t *lab) {
    enum { B = 8192 };
    float *s = malloc((size_t)B * nq * sizeof *s);
    float *best = malloc(nq * K * sizeof *best);
    for (size_t i = 0; i < nq * K; i++) best[i] = -INFINITY, lab[i] = -1;
    for (size_t b = 0; b < n; b += B) {
        size_t m = n - b < B ? n - b : B;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)m, d, 1.0f, q, d, x + b * (size_t)d, d,
                    0.0f, s, (int)m);
        for (size_t i = 0; i < nq; i++) {
            float *bs = best + i * K;
            int64_t *bl = lab + i * K;
            for (size_t j = 0; j < m; j++) {
                float v = s[i * m + j];
                if (v <= bs[K - 1]) continue;
                int p = K - 1;
                while (p > 0 && bs[p - 1] < v) bs[p] = bs[p - 1], bl[p] = bl[p - 1], p--;
                bs[p] = v, bl[p] = (int64_t)(b + j);
            }
        }
    }
    free(s), free(best);
}

typedef struct {
    double qps, p50, p99, recall;
} figures;

static figures run_exact(const float *x, size_t n, int d, const float *q, size_t nq) {
    double *ms = malloc(nq * sizeof *ms);
    donto_hit h[K];
    double t0 = donto_now();
    for (size_t i = 0; i < nq; i++) {
        double a = donto_now();
        donto_exact_topk(x, n, d, q + i * (size_t)d, K, h);
        ms[i] = (donto_now() - a) * 1e3;
    }
    figures f = {(double)nq / (donto_now() - t0), 0, 0, 1.0};
    f.p50 = bench_pct(ms, nq, 0.50), f.p99 = bench_pct(ms, nq, 0.99);
    free(ms);
    return f;
}

static figures run_ann(const donto_ann *a, const float *q, size_t nq, int d, const int64_t *gt) {
    double *ms = malloc(nq * sizeof *ms);
    int64_t lab[K];
    float sc[K];
    size_t hit = 0;
    donto_err err;
    double t0 = donto_now();
    for (size_t i = 0; i < nq; i++) {
        double t = donto_now();
        if (donto_ann_search(a, q + i * (size_t)d, 1, K, sc, lab, &err)) {
            fprintf(stderr, "bench_recall: %s\n", err.msg);
            exit(1);
        }
        ms[i] = (donto_now() - t) * 1e3;
        for (int j = 0; j < K; j++)
            for (int m = 0; m < K; m++)
                if (lab[m] == gt[i * K + j]) {
                    hit++;
                    break;
                }
    }
    figures f = {(double)nq / (donto_now() - t0), 0, 0, (double)hit / (double)(nq * K)};
    f.p50 = bench_pct(ms, nq, 0.50), f.p99 = bench_pct(ms, nq, 0.99);
    free(ms);
    return f;
}

/* One data set: exact, then ANN at the default search setting and at each
 * of the sweep settings. Returns the default's figures. */
static void one_set(const char *name, const float *x, size_t n, int d, const float *q, size_t nq, size_t nq_exact,
                    const donto_ann_opts *o, const char *sweep, figures *ex_out, figures *ann_out, double *build_s) {
    int64_t *gt = malloc(nq * K * sizeof *gt);
    double t0 = donto_now();
    truth(x, n, d, q, nq, gt);
    fprintf(stderr, "[%s] ground truth for %zu queries in %.1f s\n", name, nq, donto_now() - t0);
    figures ex = run_exact(x, n, d, q, nq_exact);
    printf("%-10s n=%zu dim=%d exact (sgemv + heap, 1 query at a time): %.1f q/s  p50 %.3f ms  p99 %.3f ms  (%zu queries)\n",
           name, n, d, ex.qps, ex.p50, ex.p99, nq_exact);
    fflush(stdout);
    donto_err err = {0};
    donto_ann *a = NULL;
    t0 = donto_now();
    if (donto_ann_build(d, x, n, o, &a, &err)) {
        fprintf(stderr, "bench_recall: %s\n", err.msg);
        exit(1);
    }
    *build_s = donto_now() - t0;
    char desc[128];
    donto_ann_describe(a, desc, sizeof desc);
    printf("%-10s ANN build (%s: %s) %.1f s (%.0f vectors/s)\n", name, o->kind, desc, *build_s, (double)n / *build_s);
    fflush(stdout);
    char *list = donto_xstrdup(sweep ? sweep : "");
    for (char *tok = strtok(list, ";"); tok; tok = strtok(NULL, ";")) {
        if (donto_ann_set_search(a, tok, &err)) {
            fprintf(stderr, "bench_recall: %s\n", err.msg);
            exit(1);
        }
        figures f = run_ann(a, q, nq, d, gt);
        printf("%-10s ANN %s %-14s %.1f q/s  p50 %.3f ms  p99 %.3f ms  recall@10 %.4f  (x%.0f exact q/s)\n", name,
               o->kind, tok, f.qps, f.p50, f.p99, f.recall, f.qps / ex.qps);
    }
    free(list);
    const char *def = o->search ? o->search : "";
    if (donto_ann_set_search(a, def, &err)) {
        fprintf(stderr, "bench_recall: %s\n", err.msg);
        exit(1);
    }
    figures f = run_ann(a, q, nq, d, gt);
    donto_ann_describe(a, desc, sizeof desc);
    printf("%-10s ANN %-28s %.1f q/s  p50 %.3f ms  p99 %.3f ms  recall@10 %.4f  (x%.0f exact q/s) [default]\n",
           name, desc, f.qps, f.p50, f.p99, f.recall, f.qps / ex.qps);
    fflush(stdout);
    *ex_out = ex, *ann_out = f;
    donto_ann_free(a);
    free(gt);
}

int main(int argc, char **argv) {
    bench_seed(0x2545f4914f6cdd1dULL); /* bench_recall's own stream since issue 5 */
    size_t n = 1000000, nq = 1000, nq_exact = 200;
    int d = 384, nc = 1000, uniform = 0;
    float sigma = 1.0f;
    const char *real = NULL, *sweep = NULL;
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
        if (ARG("--n")) n = strtoull(v, NULL, 10);
        else if (ARG("--dim")) d = atoi(v);
        else if (ARG("--queries")) nq = strtoull(v, NULL, 10);
        else if (ARG("--exact-queries")) nq_exact = strtoull(v, NULL, 10);
        else if (ARG("--clusters")) nc = atoi(v);
        else if (ARG("--sigma")) sigma = strtof(v, NULL);
        else if (ARG("--real")) real = v;
        else if (ARG("--kind")) o.kind = v;
        else if (ARG("--search")) o.search = v;
        else if (ARG("--sweep")) sweep = v;
        else if (ARG("--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--uniform")) uniform = 1;
        else {
            fprintf(stderr, "bench_recall: unknown or incomplete option %s (see bench/recall --help)\n", a);
            return 2;
        }
    }
    if (n < K || nq < 1 || nq_exact < 1 || d < 1 || nc < 1) {
        fprintf(stderr, "bench_recall: bad sizes\n");
        return 2;
    }
    if (nq_exact > nq) nq_exact = nq;
    printf("bench_recall: %zu synthetic %d-d unit vectors, mixture of %d Gaussians (sigma %.2f: cos to centre ~%.2f); "
           "%zu ANN queries, %zu exact queries, k=%d; index %s, build threads %s\n",
           n, d, nc, (double)sigma, 1.0 / sqrt(1.0 + (double)sigma * sigma), nq, nq_exact, K, o.kind,
           o.threads ? "as given" : "all");
    float *centres = malloc((size_t)nc * d * sizeof *centres);
    for (size_t i = 0; i < (size_t)nc * d; i++) centres[i] = (float)bench_nrand();
    for (int i = 0; i < nc; i++) bench_normalise(centres + (size_t)i * d, d);
    float *x = malloc(n * (size_t)d * sizeof *x), *q = malloc(nq * (size_t)d * sizeof *q);
    if (!x || !q) return fprintf(stderr, "bench_recall: out of memory\n"), 1;
    double t0 = donto_now();
    gen(x, n, d, centres, nc, sigma);
    gen(q, nq, d, centres, nc, sigma);
    fprintf(stderr, "generated in %.1f s\n", donto_now() - t0);
    figures ex, an;
    double build;
    one_set("clustered", x, n, d, q, nq, nq_exact, &o, sweep, &ex, &an, &build);
    if (uniform) {
        figures ue, ua;
        double ub;
        gen(x, n, d, NULL, 0, 0);
        gen(q, nq, d, NULL, 0, 0);
        one_set("uniform", x, n, d, q, nq, nq_exact, &o, sweep, &ue, &ua, &ub);
    }
    free(x), free(q), free(centres);
    if (real) {
        size_t rn;
        int rd;
        float *rv = bench_read_npy("bench_recall", real, &rn, &rd);
        /* Queries: every 10th real vector (at most nq), held out of the base. */
        size_t rq = rn / 10 < nq ? rn / 10 : nq, nb = 0, nqq = 0;
        float *base = malloc(rn * (size_t)rd * sizeof *base), *qq = malloc((rq ? rq : 1) * (size_t)rd * sizeof *qq);
        for (size_t i = 0; i < rn; i++) {
            if (i % 10 == 0 && nqq < rq)
                memcpy(qq + nqq++ * (size_t)rd, rv + i * (size_t)rd, (size_t)rd * 4);
            else
                memcpy(base + nb++ * (size_t)rd, rv + i * (size_t)rd, (size_t)rd * 4);
        }
        if (nqq && nb >= K) {
            figures re, ra;
            double rb;
            one_set("real", base, nb, rd, qq, nqq, nqq < nq_exact ? nqq : nq_exact, &o, sweep, &re, &ra, &rb);
        } else {
            fprintf(stderr, "bench_recall: %s has too few vectors (%zu)\n", real, rn);
        }
        free(rv), free(base), free(qq);
    }
    printf("peak RSS %.0f MiB\n", (double)donto_peak_rss() / 1048576.0);
    printf("n=%zu exact_p99_ms=%.3f ann_p99_ms=%.3f ann_recall_at_10=%.4f\n", n, ex.p99, an.p99, an.recall);
    return 0;
}
