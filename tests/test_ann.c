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

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/donto-ann-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    test_kind(NULL, NULL, 0.95); /* the default: IVF, lists and probes from n */
    test_kind("HNSW32,Flat", NULL, 0.95);
    test_kind("IVF64,Flat", "nprobe=16", 0.90);
    test_errors();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report("test_ann");
}
