#define _POSIX_C_SOURCE 200809L
/*
 * The sheaf inference operator (include/donto/sheaf_op.h, src/sheaf/op.c):
 *   1. bit for bit the existing path: for node and edge tasks and every family (diag,
 *      householder, cayley, general, gcn, mlp), a model trained a few epochs on a random graph
 *      is saved; donto_sheaf_load + donto_sheaf_forward (no dropout) on it is the reference, and
 *      op_infer (from the file and from bytes; log-probabilities and probabilities), op_infer_arrays
 *      and op_infer_json (the graph written as an export file) must give the same bits;
 *   2. thread safety: 4 threads x ITERS infers on one op, every result equal to the reference
 *      (also on a graph big enough for the forward's OpenMP teams);
 *   3. refusals: truncated, NaN, out-of-float-range and wrong-shape checkpoints give NULL and
 *      DONTO_E_INVALID with a message that says what; a graph of the wrong feature dimension
 *      names both dimensions; a short output buffer is refused;
 *   4. introspection: task, classes (and names when the checkpoint has them), features, family.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "donto/sheaf.h"
#include "donto/sheaf_op.h"
#include "donto/util.h"

#define THREADS 4
#define ITERS 25

static char *slurp(const char *path, size_t *len) {
    char *buf = NULL;
    donto_err e = {0};
    if (donto_read_file(path, &buf, len, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        exit(2);
    }
    return buf;
}

/* g as an export file (docs/sheaf-export.md): nodes n<i>, features %.9g (exact), edges, and
 * for an edge task its pairs. */
static char *graph_json(const donto_graph *g, size_t *len) {
    size_t cap = 256 + (size_t)g->n * (32 + 18 * (size_t)g->f) + (size_t)g->ne * 48 + (size_t)g->npairs * 48;
    char *s = malloc(cap), *p = s;
    p += sprintf(p, "{\"format\":\"donto-sheaf-graph\",\"version\":2,\"feature_dim\":%d,\"nodes\":[", g->f);
    for (int v = 0; v < g->n; v++) {
        p += sprintf(p, "%s{\"id\":\"n%d\",\"features\":[", v ? "," : "", v);
        for (int j = 0; j < g->f; j++) p += sprintf(p, "%s%.9g", j ? "," : "", g->x[(size_t)v * g->f + j]);
        p += sprintf(p, "]}");
    }
    p += sprintf(p, "],\"edges\":[");
    for (int k = 0; k < g->ne; k++) p += sprintf(p, "%s{\"src\":\"n%d\",\"dst\":\"n%d\"}", k ? "," : "", g->eu[k], g->ev[k]);
    p += sprintf(p, "]");
    if (g->task_kind == DONTO_TASK_EDGE) {
        p += sprintf(p, ",\"tasks\":[{\"name\":\"t\",\"kind\":\"edge\",\"directed\":%s,\"pairs\":[",
                     g->directed ? "true" : "false");
        for (int q = 0; q < g->npairs; q++)
            p += sprintf(p, "%s[\"n%d\",\"n%d\",%d]", q ? "," : "", g->pu[q], g->pv[q], g->pc[q]);
        p += sprintf(p, "]}]");
    }
    p += sprintf(p, "}");
    *len = (size_t)(p - s);
    return s;
}

typedef struct {
    const donto_sheaf_op *op;
    const donto_graph *g;
    const float *ref; /* [rows][K] log-probabilities */
    size_t count;
    atomic_int *bad;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    float *out = malloc(a->count * sizeof(float));
    donto_err e = {0};
    for (int it = 0; it < ITERS; it++) {
        memset(out, 0xff, a->count * sizeof(float));
        if (donto_sheaf_op_infer(a->op, a->g, DONTO_SHEAF_OUT_LOGP, out, a->count, &e) ||
            memcmp(out, a->ref, a->count * sizeof(float)))
            atomic_fetch_add(a->bad, 1);
    }
    free(out);
    return NULL;
}

/* 4 threads x ITERS infers of g on op; returns how many differed from ref. */
static int hammer(const donto_sheaf_op *op, const donto_graph *g, const float *ref, size_t count) {
    atomic_int bad = 0;
    pthread_t th[THREADS];
    worker_arg a = {op, g, ref, count, &bad};
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, &a);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    return atomic_load(&bad);
}

static void set_family(donto_sheaf_hp *hp, const char *name) {
    int fam = 0, orth = DONTO_ORTH_HOUSEHOLDER;
    if (donto_sheaf_family_parse(name, &fam, &orth)) abort();
    hp->family = fam, hp->orth = orth;
}

/* Train a few epochs on g, save, compare the operator with the reference path (and, with
 * threads_too, hammer it from THREADS threads). */
static void one_model(const donto_graph *g, const char *family, int threads_too) {
    donto_err e = {0};
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    set_family(&hp, family);
    hp.d = !strcmp(family, "general") ? 2 : 3, hp.layers = 2, hp.hidden = 6, hp.add_lp = 1;
    hp.second_linear = !strcmp(family, "diag");
    hp.dropout = 0.2f, hp.input_dropout = 0.1f, hp.epochs = 4, hp.patience = 100, hp.seed = 7;
    const char *kind = g->task_kind == DONTO_TASK_EDGE ? (g->directed ? "edge/directed" : "edge/undirected") : "node";
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, g, &e);
    CHECK(m != NULL, "%s %s: %s", kind, family, e.msg);
    if (!m) return;
    donto_sheaf_metrics best;
    CHECK(donto_sheaf_train(m, g, 0, &best, NULL, NULL, &e) == 0, "%s", e.msg);
    char path[] = "/tmp/donto_sheaf_op_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(donto_sheaf_save(m, g, &best, path, &e) == 0, "%s", e.msg);
    donto_sheaf_model_free(m);

    /* the reference: the existing single-threaded path */
    donto_sheaf_model *r = donto_sheaf_load(path, g, NULL, &e);
    CHECK(r != NULL, "%s", e.msg);
    if (!r) return;
    const float *logp;
    donto_sheaf_forward(r, g, 0, 0, NULL, &logp);
    int K = donto_sheaf_model_classes(r);
    size_t rows = g->task_kind == DONTO_TASK_EDGE ? (size_t)g->npairs : (size_t)g->n, cnt = rows * K;
    float *ref = malloc(cnt * sizeof(float)), *out = malloc(cnt * sizeof(float));
    memcpy(ref, logp, cnt * sizeof(float));
    donto_sheaf_model_free(r);

    size_t blen;
    char *bytes = slurp(path, &blen);
    donto_sheaf_op *op = donto_sheaf_op_load(bytes, blen, &e), *opf = donto_sheaf_op_load_file(path, &e);
    CHECK(op && opf, "%s %s: %s", kind, family, e.msg);
    if (!op || !opf) goto out;
    CHECK_EQ_INT(donto_sheaf_op_task(op), g->task_kind == DONTO_TASK_EDGE ? DONTO_TASK_EDGE : DONTO_TASK_NODE);
    CHECK_EQ_INT(donto_sheaf_op_classes(op), K);
    CHECK_EQ_INT(donto_sheaf_op_feature_dim(op), g->f);
    CHECK_EQ_INT(donto_sheaf_op_directed(op), g->task_kind == DONTO_TASK_EDGE && g->directed);
    CHECK(!strcmp(donto_sheaf_op_family_name(op), family), "family %s, expected %s", donto_sheaf_op_family_name(op),
          family);
    CHECK(donto_sheaf_op_class_name(op, 0) == NULL, "class names from a checkpoint that has none");
    CHECK(!strcmp(donto_sheaf_op_graph_fingerprint(op), g->fingerprint), "origin fingerprint");

    /* bit for bit: log-probabilities and probabilities, from bytes and from the file */
    const donto_sheaf_op *ops[2] = {op, opf};
    for (int i = 0; i < 2; i++) {
        memset(out, 0, cnt * sizeof(float));
        CHECK(donto_sheaf_op_infer(ops[i], g, DONTO_SHEAF_OUT_LOGP, out, cnt, &e) == 0, "%s", e.msg);
        CHECK(!memcmp(out, ref, cnt * sizeof(float)), "%s %s: op_infer log-probabilities differ from the forward's",
              kind, family);
    }
    CHECK(donto_sheaf_op_infer(op, g, DONTO_SHEAF_OUT_PROBS, out, cnt, &e) == 0, "%s", e.msg);
    int same = 1;
    double rowerr = 0;
    for (size_t i = 0; i < cnt; i++) {
        float pr = expf(ref[i]);
        if (memcmp(&pr, &out[i], sizeof pr)) same = 0;
    }
    for (size_t v = 0; v < rows; v++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += out[v * K + k];
        if (fabs(s - 1) > rowerr) rowerr = fabs(s - 1);
    }
    CHECK(same, "%s %s: probabilities are not expf(log-probabilities)", kind, family);
    CHECK(rowerr < 1e-5, "%s %s: probability rows sum to 1 +- %g", kind, family, rowerr);

    /* plain arrays (the FFI entry): the same edges in either direction, the same pairs */
    int *src = malloc(sizeof(int) * (g->ne ? g->ne : 1)), *dst = malloc(sizeof(int) * (g->ne ? g->ne : 1));
    for (int k = 0; k < g->ne; k++) src[k] = g->ev[k], dst[k] = g->eu[k]; /* reversed: symmetrised anyway */
    int edge = g->task_kind == DONTO_TASK_EDGE;
    memset(out, 0, cnt * sizeof(float));
    CHECK(donto_sheaf_op_infer_arrays(op, g->n, g->f, g->x, g->ne, src, dst, edge ? g->npairs : 0, edge ? g->pu : NULL,
                                      edge ? g->pv : NULL, DONTO_SHEAF_OUT_LOGP, out, cnt, &e) == 0, "%s", e.msg);
    CHECK(!memcmp(out, ref, cnt * sizeof(float)), "%s %s: op_infer_arrays differs", kind, family);
    free(src), free(dst);

    /* the graph as export-format JSON bytes */
    size_t jlen, jrows = 0;
    char *js = graph_json(g, &jlen);
    float *jout = NULL;
    CHECK(donto_sheaf_op_infer_json(op, js, jlen, NULL, DONTO_SHEAF_OUT_LOGP, &jout, &jrows, &e) == 0, "%s", e.msg);
    CHECK(jout && jrows == rows && !memcmp(jout, ref, cnt * sizeof(float)), "%s %s: op_infer_json differs (%zu rows)",
          kind, family, jrows);
    donto_sheaf_op_free_output(jout);
    free(js);

    /* threads */
    if (threads_too) {
        int bad = hammer(op, g, ref, cnt);
        CHECK(bad == 0, "%s %s: %d of %d concurrent infers differ", kind, family, bad, THREADS * ITERS);
        fprintf(stderr, "  %-16s %-12s %zu x %d bit-identical; %d threads x %d infers: %d differ\n", kind, family, rows,
                K, THREADS, ITERS, bad);
    }
out:
    donto_sheaf_op_free(op), donto_sheaf_op_free(opf);
    free(bytes), free(ref), free(out);
    unlink(path);
}

/* A checkpoint's bytes with the first occurrence of `from` replaced by `to`. */
static char *edit(const char *s, size_t len, const char *from, const char *to, size_t *olen) {
    const char *at = strstr(s, from);
    if (!at) return NULL;
    size_t a = (size_t)(at - s), fl = strlen(from), tl = strlen(to);
    char *o = malloc(len - fl + tl + 1);
    memcpy(o, s, a), memcpy(o + a, to, tl), memcpy(o + a + tl, at + fl, len - a - fl);
    *olen = len - fl + tl;
    o[*olen] = 0;
    return o;
}

static void refusals(const donto_graph *g) {
    donto_err e = {0};
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.d = 2, hp.layers = 1, hp.hidden = 4;
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, g, &e);
    char path[] = "/tmp/donto_sheaf_opbad_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(m && donto_sheaf_save(m, g, NULL, path, &e) == 0, "%s", e.msg);
    donto_sheaf_model_free(m);
    size_t len, bl;
    char *s = slurp(path, &len);
    unlink(path);

    /* truncated */
    donto_err e1 = {0};
    CHECK(donto_sheaf_op_load(s, len / 2, &e1) == NULL, "a truncated checkpoint loaded");
    CHECK_EQ_INT(donto_err_code(&e1), DONTO_E_INVALID);
    CHECK_STR_CONTAINS(e1.msg, "not JSON");
    fprintf(stderr, "  truncated:    %s\n", e1.msg);
    /* NaN (not JSON: jansson refuses the token) */
    char *b = edit(s, len, "\"data\":[", "\"data\":[NaN,", &bl);
    donto_err e2 = {0};
    CHECK(b && donto_sheaf_op_load(b, bl, &e2) == NULL, "a NaN checkpoint loaded");
    CHECK_EQ_INT(donto_err_code(&e2), DONTO_E_INVALID);
    fprintf(stderr, "  NaN:          %s\n", e2.msg);
    free(b);
    /* a number that is no float (inf once converted) */
    size_t dl;
    char *d0 = edit(s, len, "\"data\":[", "\"data\":[1e39,", &dl); /* one value too many... */
    const char *first = strstr(d0, "1e39,") + 5;                   /* ...so drop the old first value */
    const char *comma = strchr(first, ',');
    memmove((char *)first, comma + 1, strlen(comma + 1) + 1);
    donto_err e3 = {0};
    CHECK(donto_sheaf_op_load(d0, strlen(d0), &e3) == NULL, "a checkpoint with 1e39 loaded");
    CHECK_EQ_INT(donto_err_code(&e3), DONTO_E_INVALID);
    CHECK_STR_CONTAINS(e3.msg, "not a finite float");
    CHECK_STR_CONTAINS(e3.msg, "lin1.weight");
    fprintf(stderr, "  1e39:         %s\n", e3.msg);
    free(d0);
    /* wrong shape: one value missing */
    char *w = edit(s, len, "\"data\":[", "\"data\":[", &bl);
    char *f0 = strstr(w, "\"data\":[") + 8, *c0 = strchr(f0, ',');
    memmove(f0, c0 + 1, strlen(c0 + 1) + 1);
    donto_err e4 = {0};
    CHECK(donto_sheaf_op_load(w, strlen(w), &e4) == NULL, "a checkpoint with a value missing loaded");
    CHECK_EQ_INT(donto_err_code(&e4), DONTO_E_INVALID);
    CHECK_STR_CONTAINS(e4.msg, "expected 'lin1.weight'");
    fprintf(stderr, "  wrong shape:  %s\n", e4.msg);
    free(w);
    /* not a checkpoint */
    donto_err e5 = {0};
    CHECK(donto_sheaf_op_load("{\"format\":\"x\"}", 14, &e5) == NULL, "not a checkpoint loaded");
    CHECK_STR_CONTAINS(e5.msg, "not a donto-sheaf checkpoint");

    /* class names, and the graph checks */
    char *named = edit(s, len, "\"task\":{", "\"task\":{\"class_names\":[\"a\",\"b\",\"c\"],", &bl);
    donto_err e6 = {0};
    donto_sheaf_op *op = donto_sheaf_op_load(named, bl, &e6);
    CHECK(op != NULL, "%s", e6.msg);
    free(named);
    if (op) {
        CHECK(donto_sheaf_op_class_name(op, 2) && !strcmp(donto_sheaf_op_class_name(op, 2), "c"), "class name 2");
        CHECK(donto_sheaf_op_class_name(op, 3) == NULL, "class name 3 of 3");
        donto_graph h;
        donto_err eg = {0};
        CHECK(donto_graph_random(&h, 20, g->f + 1, 3, 40, 5, &eg) == 0, "%s", eg.msg);
        float *out = malloc(sizeof(float) * 20 * 3);
        donto_err e7 = {0};
        CHECK(donto_sheaf_op_infer(op, &h, DONTO_SHEAF_OUT_PROBS, out, 60, &e7) == -1, "wrong feature dim accepted");
        CHECK_EQ_INT(donto_err_code(&e7), DONTO_E_INVALID);
        char both[64];
        snprintf(both, sizeof both, "has %d features per node, the model was trained on %d", g->f + 1, g->f);
        CHECK_STR_CONTAINS(e7.msg, both);
        fprintf(stderr, "  feature dim:  %s\n", e7.msg);
        donto_err e8 = {0};
        CHECK(donto_sheaf_op_infer_arrays(op, 20, g->f + 1, h.x, 0, NULL, NULL, 0, NULL, NULL, 0, out, 60, &e8) == -1,
              "wrong feature dim accepted (arrays)");
        CHECK_STR_CONTAINS(e8.msg, "the model was trained on");
        donto_err e9 = {0};
        CHECK(donto_sheaf_op_infer(op, g, DONTO_SHEAF_OUT_PROBS, out, 60, &e9) == -1, "a short output accepted");
        CHECK_STR_CONTAINS(e9.msg, "floats");
        fprintf(stderr, "  short output: %s\n", e9.msg);
        free(out);
        donto_graph_free(&h);
        donto_sheaf_op_free(op);
    }
    free(s);
}

int main(void) {
    static const char *const families[] = {"diag", "householder", "cayley", "general", "gcn", "mlp"};
    donto_err e = {0};
    donto_graph g, ge, gd, big;
    if (donto_graph_random(&g, 60, 12, 3, 150, 11, &e) || donto_graph_random(&ge, 60, 12, 3, 150, 12, &e) ||
        donto_graph_random(&gd, 50, 10, 3, 120, 13, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    if (donto_graph_random_pairs(&ge, 90, 3, 0, 3, &e) || donto_graph_random_pairs(&gd, 80, 2, 1, 4, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    fprintf(stderr, "bit for bit against donto_sheaf_load + donto_sheaf_forward:\n");
    for (int i = 0; i < 6; i++) {
        one_model(&g, families[i], 1);
        one_model(&ge, families[i], 1);
        one_model(&gd, families[i], i == 0 || i == 2);
    }
    /* big enough for the forward's OpenMP team (src/sheaf/nsd.c: small graphs run on one thread) */
    if (donto_graph_random(&big, 3000, 16, 4, 15000, 21, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    one_model(&big, "householder", 1);
    fprintf(stderr, "refusals:\n");
    refusals(&g);
    donto_graph_free(&g), donto_graph_free(&ge), donto_graph_free(&gd), donto_graph_free(&big);
    return check_report("test_sheaf_op");
}
