/* The ANN index (include/donto/ann.h): recall against the exact scan on
 * clustered data (how real embeddings look), incremental add, save/load
 * round trip, and the file checks (truncated, damaged, wrong dim, not an
 * index), plus FAISS errors surfacing as donto_err. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "donto/ann.h"
#include "donto/recall.h"
#include "donto/vecfile.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float gauss(void) {
    double u = urand(), v = urand();
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}
static void normalise(float *v, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)v[i] * v[i];
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < d; i++) v[i] *= inv;
}
/* n unit vectors: a random centre (of nc) plus Gaussian noise of scale sigma. */
static float *clustered(size_t n, int d, int nc, float sigma, const float *centres) {
    float *x = malloc(n * (size_t)d * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        const float *c = centres + (size_t)(urand() * nc) % (size_t)nc * (size_t)d;
        for (int j = 0; j < d; j++) x[i * d + j] = c[j] + sigma * gauss();
        normalise(x + i * d, d);
    }
    return x;
}

static double recall_at_10(const donto_ann *a, const float *x, size_t n, int d, const float *q, size_t nq) {
    enum { K = 10 };
    size_t hit = 0;
    int64_t lab[K];
    float sc[K];
    donto_hit ex[K];
    for (size_t i = 0; i < nq; i++) {
        donto_err err;
        if (donto_ann_search(a, q + i * d, 1, K, sc, lab, &err)) return -1;
        size_t ne = donto_exact_topk(x, n, d, q + i * d, K, ex);
        for (size_t j = 0; j < ne; j++)
            for (int m = 0; m < K; m++)
                if (lab[m] == (int64_t)ex[j].index) {
                    hit++;
                    break;
                }
    }
    return (double)hit / (double)(nq * K);
}

static char g_dir[256];

static void test_kind(const char *kind, const char *search, double min_recall) {
    enum { D = 64, NC = 100 };
    const size_t n = 20000, nq = 200;
    float *centres = malloc(NC * D * sizeof *centres);
    for (int i = 0; i < NC * D; i++) centres[i] = gauss();
    for (int i = 0; i < NC; i++) normalise(centres + i * D, D);
    float *x = clustered(n, D, NC, 0.08f, centres);
    float *q = clustered(nq, D, NC, 0.08f, centres);
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    o.kind = kind;
    if (!kind) kind = "auto"; /* for messages */
    o.search = search;
    donto_err err = {0};
    donto_ann *a = NULL;
    /* Half at build, half added: labels must continue. */
    CHECK(donto_ann_build(D, x, n / 2, &o, &a, &err) == 0, "%s build: %s", kind, err.msg);
    if (!a) goto out;
    CHECK(donto_ann_add(a, x + n / 2 * D, n - n / 2, &err) == 0, "%s add: %s", kind, err.msg);
    CHECK_EQ_INT(donto_ann_ntotal(a), n);
    CHECK_EQ_INT(donto_ann_dim(a), D);
    double r = recall_at_10(a, x, n, D, q, nq);
    char desc[128];
    donto_ann_describe(a, desc, sizeof desc);
    fprintf(stderr, "%s (%s): recall@10 vs exact = %.3f on %zu clustered %d-d vectors\n", kind, desc, r, n, D);
    CHECK(r >= min_recall, "%s: recall@10 %.3f < %.2f", kind, r, min_recall);
    /* An added vector finds itself first. */
    int64_t lab[3];
    float sc[3];
    size_t probe = n - 7;
    CHECK(donto_ann_search(a, x + probe * D, 1, 3, sc, lab, &err) == 0, "%s", err.msg);
    CHECK(lab[0] == (int64_t)probe && fabsf(sc[0] - 1.0f) < 1e-4f, "%s: self search gave %lld (%.4f)", kind,
          (long long)lab[0], (double)sc[0]);
    CHECK(sc[0] >= sc[1] && sc[1] >= sc[2], "%s: scores not best first", kind);

    /* Save / load round trip: same answers. */
    char path[512];
    snprintf(path, sizeof path, "%s/idx.faiss", g_dir);
    CHECK(donto_ann_save(a, path, &err) == 0, "%s save: %s", kind, err.msg);
    donto_ann *b = NULL;
    CHECK(donto_ann_load(path, D, &o, &b, &err) == 0, "%s load: %s", kind, err.msg);
    if (b) {
        CHECK_EQ_INT(donto_ann_ntotal(b), n);
        int same = 1;
        for (size_t i = 0; i < 20; i++) {
            int64_t l1[10], l2[10];
            float s1[10], s2[10];
            donto_ann_search(a, q + i * D, 1, 10, s1, l1, &err);
            donto_ann_search(b, q + i * D, 1, 10, s2, l2, &err);
            same &= memcmp(l1, l2, sizeof l1) == 0 && memcmp(s1, s2, sizeof s1) == 0;
        }
        CHECK(same, "%s: loaded index answers differently", kind);
        /* Batch search equals one-by-one. */
        int64_t *bl = malloc(20 * 10 * sizeof *bl);
        float *bs = malloc(20 * 10 * sizeof *bs);
        CHECK(donto_ann_search(b, q, 20, 10, bs, bl, &err) == 0, "%s", err.msg);
        int64_t l1[10];
        float s1[10];
        donto_ann_search(b, q + 5 * D, 1, 10, s1, l1, &err);
        CHECK(memcmp(bl + 50, l1, sizeof l1) == 0, "%s: batch row 5 differs from a single search", kind);
        free(bl), free(bs);
        donto_ann_free(b);
        b = NULL;
    }
    /* Wrong dimension. */
    CHECK(donto_ann_load(path, D / 2, &o, &b, &err) == -1 && strstr(err.msg, "expected 32-d"), "%s dim: %s", kind,
          err.msg);
    /* Truncated: half the file. */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(truncate(path, size / 2) == 0, "truncate");
    CHECK(donto_ann_load(path, D, &o, &b, &err) == -1 && strstr(err.msg, "truncated"), "%s truncated: %s", kind, err.msg);
    CHECK(truncate(path, 20) == 0, "truncate");
    CHECK(donto_ann_load(path, D, &o, &b, &err) == -1 && strstr(err.msg, "truncated"), "%s header cut: %s", kind, err.msg);
    /* Damaged: one payload byte flipped. */
    CHECK(donto_ann_save(a, path, &err) == 0, "%s", err.msg);
    f = fopen(path, "r+b");
    fseek(f, size / 2, SEEK_SET);
    int c = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    CHECK(donto_ann_load(path, D, &o, &b, &err) == -1 && strstr(err.msg, "damaged"), "%s flipped: %s", kind, err.msg);
    CHECK(b == NULL, "no index on failure");
    donto_ann_free(a);
out:
    free(centres), free(x), free(q);
}

static void test_errors(void) {
    donto_err err = {0};
    donto_ann *a = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/not-an-index", g_dir);
    FILE *f = fopen(path, "wb");
    fputs("hello, this is not an index file at all; long enough for a header", f);
    fclose(f);
    CHECK(donto_ann_load(path, 0, NULL, &a, &err) == -1 && strstr(err.msg, "not a donto ANN index"), "%s", err.msg);
    snprintf(path, sizeof path, "%s/missing", g_dir);
    CHECK(donto_ann_load(path, 0, NULL, &a, &err) == -1 && strstr(err.msg, "No such file"), "%s", err.msg);
    /* FAISS's own exceptions become errors: a kind it does not know, an IVF
     * with fewer training points than lists, a bad search parameter. */
    float x[8 * 4];
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 5) - 2.0f;
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    o.kind = "NoSuchIndex42";
    CHECK(donto_ann_build(4, x, 8, &o, &a, &err) == -1 && strstr(err.msg, "faiss"), "bad kind: %s", err.msg);
    o.kind = "IVF64,Flat";
    CHECK(donto_ann_build(4, x, 8, &o, &a, &err) == -1 && a == NULL, "IVF64 on 8 points: %s", err.msg);
    fprintf(stderr, "IVF64 on 8 points: %s\n", err.msg);
    o.kind = NULL;
    CHECK(donto_ann_build(4, x, 8, &o, &a, &err) == 0, "%s", err.msg);
    if (a) {
        CHECK(donto_ann_set_search(a, "nosuchparam=3", &err) == -1 && strstr(err.msg, "faiss"), "bad param: %s", err.msg);
        /* k beyond the index: empty slots are -1. */
        int64_t lab[12];
        float sc[12];
        CHECK(donto_ann_search(a, x, 1, 12, sc, lab, &err) == 0, "%s", err.msg);
        CHECK(lab[7] >= 0 && lab[8] == -1 && lab[11] == -1 && isinf(sc[11]), "k > ntotal: %lld %lld", (long long)lab[7],
              (long long)lab[8]);
        donto_ann_free(a);
    }
    CHECK(donto_ann_build(0, x, 8, NULL, &a, &err) == -1, "dim 0");
}

/* A compressed index (IVF-PQ) built from a vector file, re-ranked exactly
 * against its rows: recall vs exact, exact scores, re-rank vs none,
 * save/load + attach. */
/* What a build reported through donto_ann_opts.progress. */
typedef struct {
    int n, bad;
    char phase[16][8];
    size_t done[16], total[16];
} progress_log;
static void record_progress(void *ctx, const char *phase, size_t done, size_t total) {
    progress_log *p = ctx;
    if (p->n == 16) {
        p->bad = 1;
        return;
    }
    snprintf(p->phase[p->n], sizeof p->phase[0], "%s", phase);
    p->done[p->n] = done, p->total[p->n++] = total;
}

static void test_compressed(void) {
    enum { D = 32, NC = 50 };
    const size_t n = 8000, nq = 100;
    float *centres = malloc(NC * D * sizeof *centres);
    for (int i = 0; i < NC * D; i++) centres[i] = gauss();
    for (int i = 0; i < NC; i++) normalise(centres + i * D, D);
    float *x = clustered(n, D, NC, 0.15f, centres);
    float *q = clustered(nq, D, NC, 0.15f, centres);
    donto_err err = {0};
    char path[512], ipath[512];
    snprintf(path, sizeof path, "%s/rows.vec", g_dir);
    snprintf(ipath, sizeof ipath, "%s/pq.faiss", g_dir);
    donto_vecfile *vf = NULL;
    CHECK(donto_vecfile_create(path, D, &vf, &err) == 0, "vecfile: %s", err.msg);
    if (!vf) goto out;
    CHECK(donto_vecfile_append(vf, x, n / 2, &err) == 0 && donto_vecfile_append(vf, x + n / 2 * D, n - n / 2, &err) == 0,
          "append: %s", err.msg);
    CHECK_EQ_INT(donto_vecfile_n(vf), n);
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    o.kind = "IVF32,PQ8";
    progress_log pl = {0};
    o.progress = record_progress, o.progress_ctx = &pl;
    donto_ann *a = NULL;
    CHECK(donto_ann_build_file(vf, &o, &a, &err) == 0, "build: %s", err.msg);
    if (!a) goto out_vf;
    /* Progress: train from 0 to its sample, then add from 0 to every row,
     * never backwards. */
    CHECK(!pl.bad && pl.n == 4, "%d progress calls", pl.n);
    if (pl.n == 4) {
        CHECK(!strcmp(pl.phase[0], "train") && pl.done[0] == 0 && !strcmp(pl.phase[1], "train") &&
                  pl.done[1] == pl.total[1] && pl.total[0] == pl.total[1] && pl.total[1] > 0 && pl.total[1] <= n,
              "train progress: %s %zu/%zu, %s %zu/%zu", pl.phase[0], pl.done[0], pl.total[0], pl.phase[1], pl.done[1],
              pl.total[1]);
        CHECK(!strcmp(pl.phase[2], "add") && pl.done[2] == 0 && pl.total[2] == n && !strcmp(pl.phase[3], "add") &&
                  pl.done[3] == n && pl.total[3] == n,
              "add progress: %s %zu/%zu, %s %zu/%zu", pl.phase[2], pl.done[2], pl.total[2], pl.phase[3], pl.done[3],
              pl.total[3]);
    }
    o.progress = NULL;
    char desc[160];
    donto_ann_describe(a, desc, sizeof desc);
    CHECK(donto_ann_lossy(a) && strstr(desc, "PQ8") && strstr(desc, "rerank=100"), "describe: %s", desc);
    double r = recall_at_10(a, x, n, D, q, nq);
    /* Scores are exact inner products after the re-rank. */
    int64_t lab[5];
    float sc[5];
    CHECK(donto_ann_search(a, q, 1, 5, sc, lab, &err) == 0, "%s", err.msg);
    for (int j = 0; j < 5; j++) {
        double dot = 0;
        for (int m = 0; m < D; m++) dot += (double)q[m] * x[(size_t)lab[j] * D + m];
        CHECK(fabs(dot - sc[j]) < 1e-4, "score %d: %.6f vs exact %.6f", j, (double)sc[j], dot);
    }
    /* Without the rows: the codes' own ranking, worse. */
    CHECK(donto_ann_attach(a, NULL, &err) == 0, "%s", err.msg);
    double r0 = recall_at_10(a, x, n, D, q, nq);
    fprintf(stderr, "%s: recall@10 vs exact %.3f re-ranked, %.3f on the PQ codes alone (%zu x %d-d, %.1f bytes/vector)\n",
            desc, r, r0, n, D, (double)donto_ann_memory(a) / (double)n);
    CHECK(r >= 0.95, "re-ranked recall@10 %.3f < 0.95", r);
    CHECK(r > r0 + 0.05, "re-rank gains only %.3f -> %.3f", r0, r);
    /* Save, load, attach the rows again: the same answers. */
    CHECK(donto_ann_attach(a, vf, &err) == 0, "%s", err.msg);
    CHECK(donto_ann_save(a, ipath, &err) == 0, "%s", err.msg);
    donto_ann *b = NULL;
    donto_vecfile *vf2 = NULL;
    CHECK(donto_ann_load(ipath, D, &o, &b, &err) == 0 && donto_vecfile_open(path, D, &vf2, &err) == 0 &&
              donto_ann_attach(b, vf2, &err) == 0,
          "reload: %s", err.msg);
    if (b && vf2) {
        int64_t l2[5];
        float s2[5];
        CHECK(donto_ann_search(b, q, 1, 5, s2, l2, &err) == 0 && !memcmp(lab, l2, sizeof lab), "reloaded answers differ");
    }
    /* A file with too few rows cannot be attached. */
    donto_vecfile *small = NULL;
    snprintf(path, sizeof path, "%s/small.vec", g_dir);
    CHECK(donto_vecfile_create(path, D, &small, &err) == 0 && donto_vecfile_append(small, x, 10, &err) == 0, "%s", err.msg);
    if (b && small) CHECK(donto_ann_attach(b, small, &err) == -1 && strstr(err.msg, "10"), "short file: %s", err.msg);
    /* A vector file whose size disagrees with its header is refused. */
    donto_vecfile_free(small);
    CHECK(truncate(path, DONTO_VECFILE_HEADER + 5 * D * 4) == 0, "truncate");
    CHECK(donto_vecfile_open(path, D, &small, &err) == -1 && strstr(err.msg, "disagrees"), "cut file: %s", err.msg);
    donto_ann_free(b);
    donto_vecfile_free(vf2);
    donto_ann_free(a);
out_vf:
    donto_vecfile_free(vf);
out:
    free(centres), free(x), free(q);
}

/* Two answers of k agree: the scores rank for rank within tol, and every
 * label of a is in b unless it ties b's last score (equal scores may come
 * in either order; the sums are rounded in a different order). */
static int same_answer(const int64_t *la, const float *sa, const int64_t *lb, const float *sb, int k, double tol) {
    for (int j = 0; j < k; j++) {
        if (fabs((double)sa[j] - sb[j]) > tol) return 0;
        int in = 0;
        for (int m = 0; m < k && !in; m++) in = la[j] == lb[m];
        if (!in && fabs((double)sa[j] - sb[k - 1]) > tol) return 0;
    }
    return 1;
}

/* A small search (fewer queries than FAISS's BLAS threshold of 20) takes
 * ann.cpp's own coarse step, and on IVF-PQ its own scan; a batch of 40
 * takes FAISS's. Both must give the same answers, query by query, for
 * IVF-Flat and IVF-PQ (M = 8, and M = 12: not a multiple of the scan's 8
 * chains), at a few probes (where the choice of lists matters) and at more
 * probes than lists (clamped; then the scan is split over the threads). */
static void test_small_search(void) {
    enum { D = 48, NC = 40, NQ = 40, K = 10 };
    const size_t n = 10000; /* > 8192: all probes split the scan over the team */
    float *centres = malloc(NC * D * sizeof *centres);
    for (int i = 0; i < NC * D; i++) centres[i] = gauss();
    for (int i = 0; i < NC; i++) normalise(centres + i * D, D);
    float *x = clustered(n, D, NC, 0.3f, centres);
    float *q = clustered(NQ, D, NC, 0.3f, centres);
    const char *kinds[] = {"IVF64,Flat", "IVF64,PQ8", "IVF64,PQ12"}, *probes[] = {"nprobe=3", "nprobe=100"};
    for (size_t t = 0; t < sizeof kinds / sizeof *kinds; t++) {
        donto_err err = {0};
        donto_ann_opts o;
        donto_ann_default_opts(&o);
        o.kind = kinds[t];
        donto_ann *a = NULL;
        CHECK(donto_ann_build(D, x, n, &o, &a, &err) == 0, "%s: %s", kinds[t], err.msg);
        if (!a) continue;
        for (size_t p = 0; p < 2; p++) {
            CHECK(donto_ann_set_search(a, probes[p], &err) == 0, "%s", err.msg);
            float bs[NQ * K], os[K];
            int64_t bl[NQ * K], ol[K];
            CHECK(donto_ann_search(a, q, NQ, K, bs, bl, &err) == 0, "batch: %s", err.msg);
            size_t same = 0;
            double worst = 0;
            for (size_t i = 0; i < NQ; i++) {
                CHECK(donto_ann_search(a, q + i * D, 1, K, os, ol, &err) == 0, "one: %s", err.msg);
                same += same_answer(ol, os, bl + i * K, bs + i * K, K, 1e-5);
                for (int j = 0; j < K; j++)
                    if (fabs((double)os[j] - bs[i * K + j]) > worst) worst = fabs((double)os[j] - bs[i * K + j]);
            }
            CHECK(same == NQ, "%s %s: one at a time agrees with the batch on %zu of %d queries "
                  "(largest score difference %.2g)", kinds[t], probes[p], same, NQ, worst);
        }
        donto_ann_free(a);
    }
    free(centres), free(x), free(q);
}

/* "auto" by size and by the memory bound; retraining on growth. */
static void test_choose(void) {
    char kind[128];
    size_t bytes = 0;
    donto_err err = {0};
    donto_ann_opts o;
    donto_ann_default_opts(&o);
    CHECK(donto_ann_choose(500000, 384, &o, kind, sizeof kind, &bytes, &err) == 0 && !strcmp(kind, "IVF2048,Flat"),
          "500k unbounded: %s", kind);
    CHECK(bytes > 500000ull * 1536 && bytes < 500000ull * 1600, "IVF-Flat estimate %zu", bytes);
    CHECK(donto_ann_choose(2000000, 384, &o, kind, sizeof kind, &bytes, &err) == 0 && strstr(kind, ",PQ"),
          "2M: compressed, got %s", kind);
    o.memory_gb = 0.5; /* 500k as IVF-Flat is ~0.78 GB: the next codec down */
    CHECK(donto_ann_choose(500000, 384, &o, kind, sizeof kind, &bytes, &err) == 0 && strstr(kind, ",PQ") &&
              bytes <= 500000000ull,
          "500k in 0.5 GB: %s (%zu bytes)", kind, bytes);
    o.memory_gb = 0.01; /* 42M even as PQ48 needs ~2.4 GB */
    CHECK(donto_ann_choose(42000000, 384, &o, kind, sizeof kind, &bytes, &err) == -1 && strstr(err.msg, "refused") &&
              strstr(err.msg, "--index-memory-gb") && strstr(err.msg, "42000000"),
          "42M in 10 MB: %s", err.msg);
    fprintf(stderr, "refusal: %s\n", err.msg);
    /* Stale: auto at 5,000 vectors (IVF128), not at the same size, but
     * after ~4-fold growth (it would pick 512 lists; below ~40k vectors the
     * 39-points-per-list floor makes the lists grow with n, and 2-fold
     * growth already doubles them). */
    enum { D = 16 };
    float *x = malloc(5000 * D * sizeof *x);
    for (size_t i = 0; i < 5000; i++) {
        for (int j = 0; j < D; j++) x[i * D + j] = gauss();
        normalise(x + i * D, D);
    }
    donto_ann_default_opts(&o);
    donto_ann *a = NULL;
    CHECK(donto_ann_build(D, x, 5000, &o, &a, &err) == 0, "%s", err.msg);
    if (a) {
        CHECK(!donto_ann_stale(a, 5000, &o) && !donto_ann_stale(a, 7000, &o), "not stale at 1-1.4x");
        CHECK(donto_ann_stale(a, 25000, &o), "stale at 5x");
        o.memory_gb = 1e-6;
        CHECK(donto_ann_stale(a, 5000, &o), "stale when over the bound");
    }
    donto_ann_free(a);
    free(x);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/donto-ann-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    test_kind(NULL, NULL, 0.95); /* the default: IVF, lists and probes from n */
    test_kind("HNSW32,Flat", NULL, 0.95);
    test_kind("IVF64,Flat", "nprobe=16", 0.90);
    test_errors();
    test_compressed();
    test_small_search();
    test_choose();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report("test_ann");
}
