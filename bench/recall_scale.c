/* bench_recall_scale: the ANN index at scale in bounded memory, driven by
 * bench/recall-scale (the wrapper documents options and output).
 *
 * Data: N vectors of the real distribution: the MiniLM embeddings of
 * corpus/claims.jsonl (an .npy), each base vector one of 90% of the claims
 * (every 10th claim is held out as a query source) plus seeded isotropic
 * Gaussian noise of norm sigma, normalised; queries are the held-out claims
 * plus fresh noise. Row i depends only on (seed, i), so the rows are
 * generated in chunks, written to a vector file (include/donto/vecfile.h,
 * mapped, pages dropped after use) and folded into the exact top 10 of
 * every query by sgemm chunk by chunk: the float32 rows are never all in
 * RAM. The index is then built from the file (donto_ann_build_file:
 * trained on a sample, added in chunks) and searched one query at a time
 * with every core. Difficulty check: the same pipeline on the real claims
 * alone (9,000 base, 1,000 held-out queries) and on the generator at the
 * same size, with the mean cosine of the 1st and 10th true neighbour. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* sync() */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "donto/ann.h"
#include "donto/util.h"
#include "donto/vecfile.h"

enum { K = 10 };

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
typedef struct {
    uint64_t s;
} rng;
static double urand(rng *r) { return (double)((r->s = mix(r->s)) >> 11) / 9007199254740992.0; }
static float gauss(rng *r) {
    double u = urand(r), v = urand(r);
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}
/* The index build's progress on stderr, a line a minute (10M: about an hour). */
static void show_progress(void *ctx, const char *phase, size_t done, size_t total) {
    double *clock = ctx, now = donto_now();
    if (now - clock[1] < 60) return;
    clock[1] = now;
    fprintf(stderr, "[build] %s: %zu of %zu vectors, %.0f s\n", phase, done, total, now - clock[0]);
}

typedef struct {
    const float *src; /* [nsrc, d] source claims */
    size_t nsrc;
    int d;
    float sigma;
    uint64_t seed;
} gen_t;

/* Row i: a source claim picked by (seed, i) plus noise of norm ~sigma.
 * Rows depend on i alone, so they are generated on every core. */
static void gen_rows(const gen_t *g, size_t from, size_t n, float *out) {
    float s = g->sigma / sqrtf((float)g->d);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        rng r = {mix(g->seed ^ mix(from + i))};
        const float *c = g->src + (size_t)(mix(r.s) % g->nsrc) * (size_t)g->d;
        float *v = out + i * (size_t)g->d;
        for (int j = 0; j < g->d; j++) v[j] = c[j] + s * gauss(&r);
        bench_normalise(v, g->d);
    }
}

/* Fold the rows [from, from+m) into each query's exact top K. */
static void truth_fold(const float *x, size_t from, size_t m, int d, const float *q, size_t nq, float *best,
                       int64_t *lab, float *tmp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)m, d, 1.0f, q, d, x, d, 0.0f, tmp, (int)m);
    for (size_t i = 0; i < nq; i++) {
        float *bs = best + i * K;
        int64_t *bl = lab + i * K;
        for (size_t j = 0; j < m; j++) {
            float v = tmp[i * m + j];
            if (v <= bs[K - 1]) continue;
            int p = K - 1;
            while (p > 0 && bs[p - 1] < v) bs[p] = bs[p - 1], bl[p] = bl[p - 1], p--;
            bs[p] = v, bl[p] = (int64_t)(from + j);
        }
    }
}

static void die(const char *what, const donto_err *e) {
    fprintf(stderr, "bench_recall_scale: %s: %s\n", what, e ? e->msg : "");
    exit(1);
}

typedef struct {
    double build_s, recall, p50, p99, nn1, nn10;
    size_t bytes;
    char desc[160];
} result;

static int g_cold;           /* --cold: evict the vector file from the page cache before the queries */
static const char *g_index; /* --index FILE: load the big set's index from FILE, or save it there */
static int g_pace_ms;       /* --pace MS: a pause before each query (one query's latency, the disk not kept busy) */
static const char *g_keep;  /* --keep-vectors FILE: the big set's rows, kept in FILE and read from it next time */
static int g_settle;        /* --settle S: sync, then S seconds of nothing, before the queries */

/* One set: rows come from gen (or, gen == NULL, from real [n, d]); queries
 * q [nq, d]. The vector file goes to path. */
static result run_set(const char *name, const gen_t *gen, const float *real, size_t n, int d, const float *q,
                      size_t nq, const donto_ann_opts *o, const char *path, const char *sweep) {
    result res = {0};
    donto_err err = {0};
    donto_vecfile *vf = NULL;
    /* --keep-vectors FILE: the big set's rows stay in FILE after the run,
     * and a later run with the same --n/--sigma/--seed reads them from it
     * instead of writing them again (the rows are generated all the same,
     * for the exact top 10): its queries then do not follow a 15 GB write. */
    const int big = gen && n > 100000; /* the measured set, not the difficulty check's */
    const char *keep = big ? g_keep : NULL;
    int reuse = 0;
    if (keep) {
        path = keep;
        if (access(keep, R_OK) == 0) {
            if (donto_vecfile_open(keep, d, &vf, &err)) die(keep, &err);
            if (donto_vecfile_n(vf) != n) {
                fprintf(stderr, "bench_recall_scale: %s holds %zu rows, not --n %zu\n", keep, donto_vecfile_n(vf), n);
                exit(1);
            }
            reuse = 1;
            fprintf(stderr, "[%s] rows read from %s (not written)\n", name, keep);
        }
    }
    if (!vf && donto_vecfile_create(path, d, &vf, &err)) die("vector file", &err);
    const size_t chunk = 65536;
    float *x = malloc(chunk * (size_t)d * sizeof *x), *tmp = malloc(chunk * nq * sizeof *tmp);
    float *best = malloc(nq * K * sizeof *best);
    int64_t *gt = malloc(nq * K * sizeof *gt);
    for (size_t i = 0; i < nq * K; i++) best[i] = -INFINITY, gt[i] = -1;
    double t0 = donto_now();
    for (size_t at = 0; at < n; at += chunk) {
        size_t m = n - at < chunk ? n - at : chunk;
        if (gen)
            gen_rows(gen, at, m, x);
        else
            memcpy(x, real + at * (size_t)d, m * (size_t)d * sizeof *x);
        truth_fold(x, at, m, d, q, nq, best, gt, tmp);
        if (!reuse && donto_vecfile_append(vf, x, m, &err)) die("append", &err);
        donto_vecfile_drop(vf, at, m);
    }
    free(x), free(tmp);
    for (size_t i = 0; i < nq; i++) res.nn1 += best[i * K], res.nn10 += best[i * K + K - 1];
    res.nn1 /= (double)nq, res.nn10 /= (double)nq;
    fprintf(stderr, "[%s] %zu rows generated + exact top %d of %zu queries in %.1f s\n", name, n, K, nq,
            donto_now() - t0);
    donto_ann *a;
    t0 = donto_now();
    /* --index FILE: the index of the big set is loaded from FILE when it
     * exists (the data are deterministic: same --n, --sigma, --seed), else
     * built and saved there, so its queries can be run again without a
     * rebuild (an hour and a half at 10M). build_s is then the load's. */
    int load = g_index && big && access(g_index, R_OK) == 0;
    if (load) {
        if (donto_ann_load(g_index, d, o, &a, &err) || donto_ann_attach(a, vf, &err)) die(g_index, &err);
        fprintf(stderr, "[%s] index loaded from %s (not built)\n", name, g_index);
    } else {
        double clock[2] = {t0, t0}; /* start, last line */
        donto_ann_opts bo = *o;
        bo.progress = show_progress, bo.progress_ctx = clock;
        if (donto_ann_build_file(vf, &bo, &a, &err)) die("build", &err);
    }
    res.build_s = donto_now() - t0;
    if (g_index && big && !load && donto_ann_save(a, g_index, &err)) die(g_index, &err);
    res.bytes = donto_ann_memory(a);
    /* The generated rows on disk before the queries: dirty pages cannot be
     * evicted by --cold, and their writeback would overlap the queries.
     * (It did not remove the stalls of the 10M reload runs: the guest's
     * fsync returns before this VM's host has written the data, and reads
     * wait behind that write for up to a second; --settle, docs/recall.md
     * "Reads behind writes".) */
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd)) fprintf(stderr, "%s: not synced\n", path);
    if (g_cold) { /* the float32 rows out of memory: a file larger than RAM, as at 42M */
        donto_vecfile_drop(vf, 0, n);
        if (fd < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) fprintf(stderr, "--cold: %s: not evicted\n", path);
    }
    if (fd >= 0) close(fd);
    if (g_settle > 0) { /* the index just saved (and the rows) reach the disk before any query is timed */
        fprintf(stderr, "[%s] --settle: sync, then %d s before the queries\n", name, g_settle);
        sync();
        sleep((unsigned)g_settle);
    }
    char *list = donto_xstrdup(sweep ? sweep : "");
    const char *def = o->search ? o->search : "";
    for (char *tok = strtok(list, ";");; tok = strtok(NULL, ";")) {
        const char *setting = tok ? tok : def;
        if (donto_ann_set_search(a, setting, &err)) die("search setting", &err);
        double *ms = malloc(nq * sizeof *ms);
        size_t hit = 0;
        for (size_t i = 0; i < nq; i++) {
            int64_t lab[K];
            float sc[K];
            if (g_pace_ms > 0) { /* --pace: the disk idle between queries, not timed */
                struct timespec ts = {g_pace_ms / 1000, (long)(g_pace_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            double t = donto_now();
            if (donto_ann_search(a, q + i * (size_t)d, 1, K, sc, lab, &err)) die("search", &err);
            ms[i] = (donto_now() - t) * 1e3;
            for (int j = 0; j < K; j++)
                for (int k = 0; k < K; k++)
                    if (lab[k] == gt[i * K + j]) {
                        hit++;
                        break;
                    }
        }
        /* The slowest queries, by position: a warm-up (the first ones) or spread out. */
        double *pos = malloc(nq * sizeof *pos);
        memcpy(pos, ms, nq * sizeof *pos);
        fprintf(stderr, "[%s] slowest queries (#index: ms):", name);
        for (int s = 0; s < 8 && s < (int)nq; s++) {
            size_t w = 0;
            for (size_t i = 1; i < nq; i++)
                if (pos[i] > pos[w]) w = i;
            fprintf(stderr, " #%zu: %.1f", w, pos[w]);
            pos[w] = -1;
        }
        fprintf(stderr, "\n");
        free(pos);
        double r = (double)hit / (double)(nq * K), p50 = bench_pct(ms, nq, 0.5), p99 = bench_pct(ms, nq, 0.99);
        free(ms);
        donto_ann_describe(a, res.desc, sizeof res.desc);
        printf("%-9s n=%zu %s: build %.1f s, %.1f bytes/vector, recall@10 %.4f, p50 %.3f ms, p99 %.3f ms, "
               "true nn1/nn10 cos %.3f/%.3f%s\n",
               name, n, res.desc, res.build_s, (double)res.bytes / (double)n, r, p50, p99, res.nn1, res.nn10,
               tok ? "" : " [default]");
        fflush(stdout);
        if (!tok) {
            res.recall = r, res.p50 = p50, res.p99 = p99;
            break;
        }
    }
    free(list);
    donto_ann_free(a);
    donto_vecfile_free(vf);
    if (!keep) remove(path);
    free(best), free(gt);
    return res;
}

int main(int argc, char **argv) {
    size_t n = 1000000, nq = 500;
    float sigma = 0.6f;
    uint64_t seed = 42;
    int check = 1;
    const char *claims = NULL, *dir = "/tmp", *sweep = NULL;
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
        if (ARG("--n")) n = strtoull(v, NULL, 10);
        else if (ARG("--claims")) claims = v;
        else if (ARG("--queries")) nq = strtoull(v, NULL, 10);
        else if (ARG("--sigma")) sigma = strtof(v, NULL);
        else if (ARG("--seed")) seed = strtoull(v, NULL, 10);
        else if (ARG("--dir")) dir = v;
        else if (ARG("--kind")) o.kind = v;
        else if (ARG("--search")) o.search = v;
        else if (ARG("--sweep")) sweep = v;
        else if (ARG("--rerank")) o.rerank = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--cold")) g_cold = 1;
        else if (ARG("--index")) g_index = v;
        else if (ARG("--keep-vectors")) g_keep = v;
        else if (ARG("--pace")) g_pace_ms = atoi(v);
        else if (ARG("--settle")) g_settle = atoi(v);
        else if (ARG("--memory-gb")) o.memory_gb = strtod(v, NULL);
        else if (ARG("--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--no-check")) check = 0;
        else {
            fprintf(stderr, "bench_recall_scale: unknown or incomplete option %s (see bench/recall-scale --help)\n", a);
            return 2;
        }
    }
    if (!claims || n < 1000 || nq < 1) {
        fprintf(stderr, "bench_recall_scale: need --claims FILE.npy, --n >= 1000, --queries >= 1\n");
        return 2;
    }
    size_t rn;
    int d;
    float *rv = bench_read_npy("bench_recall_scale", claims, &rn, &d);
    /* Every 10th claim is a query source, held out of the base. */
    size_t nqs = (rn + 9) / 10, nbs = rn - nqs;
    float *qsrc = malloc(nqs * (size_t)d * sizeof *qsrc), *bsrc = malloc(nbs * (size_t)d * sizeof *bsrc);
    for (size_t i = 0, a = 0, b = 0; i < rn; i++)
        memcpy(i % 10 == 0 ? qsrc + a++ * (size_t)d : bsrc + b++ * (size_t)d, rv + i * (size_t)d, (size_t)d * 4);
    free(rv);
    gen_t gb = {bsrc, nbs, d, sigma, seed}, gq = {qsrc, nqs, d, sigma, seed ^ 0x5bd1e995ULL};
    float *q = malloc(nq * (size_t)d * sizeof *q);
    for (size_t i = 0; i < nq; i++) { /* query i: held-out claim i % nqs, fresh noise */
        gen_t one = gq;
        one.src = qsrc + (i % nqs) * (size_t)d, one.nsrc = 1;
        gen_rows(&one, i, 1, q + i * (size_t)d);
    }
    printf("bench_recall_scale: %zu vectors = %zu MiniLM claims (%s; every 10th held out as a query source) + "
           "noise of norm %.2f (cos to its claim ~%.2f), seed %llu; %zu queries, k=%d; index %s%s%.1f GB bound, "
           "rerank %zu\n",
           n, nbs, claims, (double)sigma, 1.0 / sqrt(1.0 + (double)sigma * sigma), (unsigned long long)seed, nq, K,
           o.kind, ", ", o.memory_gb, o.rerank ? o.rerank : (size_t)DONTO_ANN_RERANK);
    char path[4096];
    snprintf(path, sizeof path, "%s/recall-scale-%d.vec", dir, (int)getpid());
    if (check) {
        /* Difficulty: the real claims alone vs the generator at their size,
         * both with the default index for that size (IVF-Flat), so that only
         * the data differs. */
        donto_ann_opts oc;
        donto_ann_default_opts(&oc);
        size_t rq = nqs < nq ? nqs : nq;
        run_set("real", NULL, bsrc, nbs, d, qsrc, rq, &oc, path, NULL);
        run_set("gen-small", &gb, NULL, nbs, d, q, nq, &oc, path, NULL);
    }
    result r = run_set("gen", &gb, NULL, n, d, q, nq, &o, path, sweep);
    double bpv = (double)r.bytes / (double)n;
    printf("peak RSS %.0f MiB\n", (double)donto_peak_rss() / 1048576.0);
    printf("n=%zu index_bytes_per_vector=%.1f build_s=%.1f recall_at_10=%.4f p99_ms=%.3f ram_gb_42m=%.2f\n", n, bpv,
           r.build_s, r.recall, r.p99, bpv * 42e6 / 1e9);
    free(qsrc), free(bsrc), free(q);
    return 0;
}
