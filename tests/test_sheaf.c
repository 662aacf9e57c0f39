#define _POSIX_C_SOURCE 200809L
/* Sheaf learning (src/sheaf/): finite-difference gradient checks for every family and
 * option, npz/geom-gcn loading, checkpoint round trip, determinism across thread counts. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "donto/sheaf.h"
#include "sheaf_int.h"

/* test_oom asks for terabytes on purpose: under ASan, let calloc return NULL as libc does. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* split 0's training mask: over nodes, or over an edge task's pairs */
static const uint8_t *train_mask(const donto_graph *g) {
    return g->task_kind == DONTO_TASK_EDGE ? g->ptrain : g->train;
}

static double loss_at(donto_sheaf_model *m, const donto_graph *g, int training) {
    return donto_sheaf_forward(m, g, training, 7, train_mask(g), NULL);
}

/* For each tensor: directional derivative along a random direction, central differences
 * in float32 vs the analytic gradient. */
static void fd_check(const char *label, donto_sheaf_hp *hp, const donto_graph *g, int training) {
    donto_err err = {0};
    donto_sheaf_model *m = donto_sheaf_model_new(hp, g, &err);
    CHECK(m != NULL, "%s: %s", label, err.msg);
    if (!m) return;
    size_t np;
    float *p = donto_sheaf_params(m, &np);
    /* move away from the structured init (identity W1, eps = 0) */
    uint64_t s = 12345;
    for (size_t i = 0; i < np; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] += (float)(((s >> 40) / 16777216.0 - 0.5) * 0.3);
    }
    loss_at(m, g, training);
    donto_sheaf_backward(m, g, train_mask(g));
    int nt;
    const donto_sheaf_tensor *t = donto_sheaf_tensors(m, &nt);
    float *gr = malloc(sizeof(float) * np);
    memcpy(gr, donto_sheaf_grads(m), sizeof(float) * np);
    float *dir = malloc(sizeof(float) * np);
    int bad = 0;
    for (int i = 0; i < nt; i++) {
        double an = 0;
        for (size_t j = 0; j < t[i].size; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            dir[j] = ((s >> 40) & 1) ? 1.0f : -1.0f;
            an += (double)dir[j] * gr[t[i].off + j];
        }
        float *w = p + t[i].off;
        float *save = malloc(sizeof(float) * t[i].size);
        memcpy(save, w, sizeof(float) * t[i].size);
        /* small enough not to cross ReLU kinks; the edge decoder has P x hidden ReLUs (and 3e-3
         * crossed one of them in "edge diag directed dropout": dec.0.bias 0.0262 vs 0.0228) */
        double h = (g->task_kind == DONTO_TASK_EDGE ? 1e-3 : 3e-3) / sqrt((double)t[i].size);
        for (size_t j = 0; j < t[i].size; j++) w[j] = (float)(save[j] + h * dir[j]);
        double lp = loss_at(m, g, training);
        for (size_t j = 0; j < t[i].size; j++) w[j] = (float)(save[j] - h * dir[j]);
        double lm = loss_at(m, g, training);
        memcpy(w, save, sizeof(float) * t[i].size);
        free(save);
        double fd = (lp - lm) / (2 * h);
        double tol = 2e-2 * fmax(fabs(fd), fabs(an)) + 2e-4;
        if (fabs(fd - an) > tol) bad++;
        CHECK(fabs(fd - an) <= tol, "%s: tensor %s: finite difference %.6g vs analytic %.6g", label, t[i].name, fd, an);
    }
    if (!bad) fprintf(stderr, "fd %-40s ok (%d tensors)\n", label, nt);
    free(gr), free(dir);
    donto_sheaf_model_free(m);
}

static void test_fd(void) {
    donto_err err = {0};
    donto_graph g;
    CHECK(donto_graph_random(&g, 40, 7, 3, 90, 5, &err) == 0, "%s", err.msg);
    struct {
        const char *label;
        int family, orth, d, lp, hpass, second, ew, left, right;
        float drop;
    } cases[] = {
        {"diag d=2", DONTO_SHEAF_DIAG, 0, 2, 0, 0, 0, 0, 1, 1, 0},
        {"diag d=3 lp hp second", DONTO_SHEAF_DIAG, 0, 3, 1, 1, 1, 0, 1, 1, 0},
        {"diag d=1 no-left no-right", DONTO_SHEAF_DIAG, 0, 1, 0, 0, 0, 0, 0, 0, 0},
        {"diag d=2 dropout", DONTO_SHEAF_DIAG, 0, 2, 1, 0, 0, 0, 1, 1, 0.3f},
        {"orth householder d=3 ew", DONTO_SHEAF_ORTH, DONTO_ORTH_HOUSEHOLDER, 3, 0, 0, 0, 1, 1, 1, 0},
        {"orth householder d=4 lp hp ew", DONTO_SHEAF_ORTH, DONTO_ORTH_HOUSEHOLDER, 4, 1, 1, 0, 1, 1, 1, 0},
        {"orth householder d=2 no-ew", DONTO_SHEAF_ORTH, DONTO_ORTH_HOUSEHOLDER, 2, 0, 0, 0, 0, 1, 1, 0},
        {"orth cayley d=3 ew", DONTO_SHEAF_ORTH, DONTO_ORTH_CAYLEY, 3, 1, 0, 0, 1, 1, 1, 0},
        {"orth cayley d=3 ew dropout", DONTO_SHEAF_ORTH, DONTO_ORTH_CAYLEY, 3, 0, 0, 1, 1, 1, 1, 0.3f},
        {"general d=2", DONTO_SHEAF_GENERAL, 0, 2, 0, 0, 0, 0, 1, 1, 0},
        {"general d=3 lp hp", DONTO_SHEAF_GENERAL, 0, 3, 1, 1, 0, 0, 1, 1, 0},
        {"gcn 2 layers", DONTO_SHEAF_GCN, 0, 1, 0, 0, 0, 0, 1, 1, 0},
        {"gcn 3 layers dropout", DONTO_SHEAF_GCN, 0, 1, 0, 0, 0, 0, 1, 1, 0.3f},
        {"mlp 2 layers", DONTO_SHEAF_MLP, 0, 1, 0, 0, 0, 0, 1, 1, 0},
        {"mlp 3 layers dropout", DONTO_SHEAF_MLP, 0, 1, 0, 0, 0, 0, 1, 1, 0.3f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        donto_sheaf_hp hp;
        donto_sheaf_hp_default(&hp);
        hp.family = cases[i].family, hp.orth = cases[i].orth, hp.d = cases[i].d;
        hp.add_lp = cases[i].lp, hp.add_hp = cases[i].hpass, hp.second_linear = cases[i].second;
        hp.edge_weights = cases[i].ew, hp.left_weights = cases[i].left, hp.right_weights = cases[i].right;
        hp.layers = strstr(cases[i].label, "3 layers") ? 3 : 2;
        hp.hidden = 4;
        hp.dropout = cases[i].drop, hp.input_dropout = cases[i].drop;
        fd_check(cases[i].label, &hp, &g, cases[i].drop > 0);
    }
    /* sparse input features (the CSR/CSC first-layer path), with input dropout */
    float *xs = malloc(sizeof(float) * g.n * g.f);
    for (int i = 0; i < g.n * g.f; i++) xs[i] = (i % 7 == 0) ? g.x[i] : 0.0f;
    int *src = malloc(sizeof(int) * g.ne), *dst = malloc(sizeof(int) * g.ne);
    for (int k = 0; k < g.ne; k++) src[k] = g.eu[k], dst[k] = g.ev[k];
    donto_graph gs;
    CHECK(donto_graph_from_arrays(&gs, g.n, g.f, xs, g.y, g.nclass, g.ne, src, dst, &err) == 0, "%s", err.msg);
    donto_graph_random_splits(&gs, 1, 3);
    for (int fam = 0; fam < 2; fam++) {
        donto_sheaf_hp hp;
        donto_sheaf_hp_default(&hp);
        hp.family = fam ? DONTO_SHEAF_GCN : DONTO_SHEAF_DIAG;
        hp.d = 2, hp.hidden = 4, hp.input_dropout = 0.4f, hp.add_lp = 1;
        fd_check(fam ? "gcn sparse features + input dropout" : "diag sparse features + input dropout", &hp, &gs, 1);
    }
    free(xs), free(src), free(dst);
    donto_graph_free(&gs);
    donto_graph_free(&g);
}

/* Edge tasks: the decoder (undirected [h_u*h_v, |h_u-h_v|], directed + [h_u, h_v]) and the
 * class-weighted NLL, with every encoder, checked by finite differences through the whole model. */
static void test_fd_edge(void) {
    donto_err err = {0};
    struct {
        const char *label;
        int family, orth, d, directed, layers;
        float drop;
    } cases[] = {
        {"edge diag undirected", DONTO_SHEAF_DIAG, 0, 2, 0, 2, 0},
        {"edge diag directed dropout", DONTO_SHEAF_DIAG, 0, 2, 1, 2, 0.3f},
        {"edge orth householder directed", DONTO_SHEAF_ORTH, DONTO_ORTH_HOUSEHOLDER, 3, 1, 2, 0},
        {"edge orth cayley undirected", DONTO_SHEAF_ORTH, DONTO_ORTH_CAYLEY, 3, 0, 2, 0},
        {"edge general directed", DONTO_SHEAF_GENERAL, 0, 2, 1, 2, 0},
        {"edge gcn undirected", DONTO_SHEAF_GCN, 0, 1, 0, 2, 0},
        {"edge gcn directed dropout", DONTO_SHEAF_GCN, 0, 1, 1, 3, 0.3f},
        {"edge mlp directed", DONTO_SHEAF_MLP, 0, 1, 1, 2, 0},
        {"edge mlp undirected 1 layer", DONTO_SHEAF_MLP, 0, 1, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        donto_graph g;
        CHECK(donto_graph_random(&g, 40, 7, 3, 90, 5, &err) == 0, "%s", err.msg);
        CHECK(donto_graph_random_pairs(&g, 70, 3, cases[i].directed, 11 + i, &err) == 0, "%s", err.msg);
        donto_sheaf_hp hp;
        donto_sheaf_hp_default(&hp);
        hp.family = cases[i].family, hp.orth = cases[i].orth, hp.d = cases[i].d, hp.layers = cases[i].layers;
        hp.hidden = 4, hp.dropout = cases[i].drop, hp.input_dropout = cases[i].drop;
        fd_check(cases[i].label, &hp, &g, cases[i].drop > 0);
        donto_graph_free(&g);
    }
}

/* Class weights w_c = n / (K n_c) over the train pairs; the edge loss is their weighted mean NLL. */
static void test_edge_loss(void) {
    donto_err err = {0};
    donto_graph g;
    CHECK(donto_graph_random(&g, 30, 5, 2, 60, 2, &err) == 0, "%s", err.msg);
    CHECK(donto_graph_random_pairs(&g, 50, 3, 0, 4, &err) == 0, "%s", err.msg);
    CHECK(g.task_kind == DONTO_TASK_EDGE && g.nclass == 3 && g.train == NULL, "random pairs: an edge task");
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.hidden = 4;
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
    CHECK(m != NULL, "%s", err.msg);
    if (!m) return;
    long cnt[3] = {0}, tot = 0;
    for (int p = 0; p < g.npairs; p++)
        if (g.ptrain[p]) cnt[g.pc[p]]++, tot++;
    const float *w = donto_sheaf_class_weights(m);
    for (int c = 0; c < 3; c++)
        CHECK(cnt[c] && fabs(w[c] - (double)tot / (3.0 * cnt[c])) < 1e-6, "class %d: weight %g, want %g", c, w[c],
              (double)tot / (3.0 * cnt[c]));
    CHECK(cnt[0] < cnt[2], "the random classes are imbalanced (%ld vs %ld)", cnt[0], cnt[2]);
    const float *lp;
    double loss = donto_sheaf_forward(m, &g, 0, 0, g.ptrain, &lp);
    double num = 0, den = 0;
    for (int p = 0; p < g.npairs; p++)
        if (g.ptrain[p]) num -= (double)w[g.pc[p]] * lp[p * 3 + g.pc[p]], den += w[g.pc[p]];
    CHECK(fabs(loss - num / den) < 1e-9, "weighted NLL %.9g, by hand %.9g", loss, num / den);
    for (int p = 0; p < g.npairs; p++) {
        double s = exp(lp[p * 3]) + exp(lp[p * 3 + 1]) + exp(lp[p * 3 + 2]);
        if (fabs(s - 1) > 1e-5) CHECK(0, "pair %d: probabilities sum to %g", p, s);
    }
    /* the undirected decoder is symmetric: (u, v) and (v, u) score alike */
    int u = g.pu[0], v = g.pv[0];
    g.pu[0] = v, g.pv[0] = u;
    float before[3] = {lp[0], lp[1], lp[2]};
    donto_sheaf_forward(m, &g, 0, 0, NULL, &lp);
    CHECK(before[0] == lp[0] && before[1] == lp[1] && before[2] == lp[2], "undirected decoder not symmetric");
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
}

/* Metrics against hand-computed values (sklearn's definitions; the parity test compares with sklearn). */
static void test_metrics(void) {
    int y[5] = {0, 0, 1, 1, 2}, pred[5] = {0, 1, 1, 1, 0};
    /* F1: class 0 2/4, class 1 4/5, class 2 0 -> 1.3 / 3 */
    CHECK(fabs(donto_metric_macro_f1(y, pred, 5, 3) - 1.3 / 3) < 1e-12, "macro-F1 %g", donto_metric_macro_f1(y, pred, 5, 3));
    int y2[4] = {0, 0, 1, 1}, p2[4] = {0, 0, 1, 1};
    CHECK(fabs(donto_metric_macro_f1(y2, p2, 4, 5) - 1.0) < 1e-12, "absent classes do not count");
    double s[4] = {0.1, 0.4, 0.35, 0.8};
    CHECK(fabs(donto_metric_roc_auc(y2, s, 4) - 0.75) < 1e-12, "ROC-AUC %g, want 0.75", donto_metric_roc_auc(y2, s, 4));
    CHECK(fabs(donto_metric_average_precision(y2, s, 4) - 5.0 / 6) < 1e-12, "AP %g, want 5/6",
          donto_metric_average_precision(y2, s, 4));
    int y3[4] = {0, 1, 0, 1};
    double s3[4] = {0.5, 0.5, 0.2, 0.9}; /* a tie counts half: (1.5 + 2) / 4 */
    CHECK(fabs(donto_metric_roc_auc(y3, s3, 4) - 0.875) < 1e-12, "ROC-AUC with ties %g", donto_metric_roc_auc(y3, s3, 4));
    /* AP with a tie at the top: {0.9: +} R .5 P 1; {0.5: +, -} R 1 P 2/3 -> 0.5 + 1/3 */
    CHECK(fabs(donto_metric_average_precision(y3, s3, 4) - (0.5 + 1.0 / 3)) < 1e-12, "AP with ties %g",
          donto_metric_average_precision(y3, s3, 4));
    int y4[3] = {1, 1, 1};
    CHECK(isnan(donto_metric_roc_auc(y4, s, 3)), "ROC-AUC of one class is undefined");
}

static const char *data_dir(void) {
    const char *e = getenv("DONTO_GEOM_GCN_DIR");
    if (e) return e;
    static char buf[4096];
    const char *src = getenv("DONTO_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/data/geom-gcn", src ? src : "."); /* the in-repo copy */
    return buf;
}

static void test_geom_gcn(void) {
    donto_err err = {0};
    char path[8192];
    snprintf(path, sizeof path, "%s/splits/texas_split_0.6_0.2_0.npz", data_dir());
    donto_npy a;
    if (access(path, R_OK) != 0) {
        CHECK(0, "geom-gcn data not found at %s (set DONTO_GEOM_GCN_DIR)", path);
        return;
    }
    CHECK(donto_npz_read(path, "train_mask", &a, &err) == 0, "%s", err.msg);
    CHECK(a.ndim == 1 && a.shape[0] == 183, "train_mask shape");
    free(a.data);
    CHECK(donto_npz_read(path, "no_such_array", &a, &err) == -1, "missing array must fail");
    CHECK_STR_CONTAINS(err.msg, "no array");
    donto_graph g;
    CHECK(donto_graph_load(&g, "texas", data_dir(), NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g.n, 183);
    CHECK_EQ_INT(g.f, 1703);
    CHECK_EQ_INT(g.nclass, 5);
    CHECK_EQ_INT(g.nsplits, 10);
    int tr = 0, va = 0, te = 0;
    for (int v = 0; v < g.n; v++) tr += g.train[v], va += g.val[v], te += g.test[v];
    CHECK(tr == 87 && va == 59 && te == 37, "texas split 0: %d/%d/%d, README says 87/59/37", tr, va, te);
    for (int k = 0; k < g.ne; k++) CHECK(g.eu[k] < g.ev[k], "edge %d not canonical", k);
    double maxdev = 0;
    for (int v = 0; v < g.n; v++) {
        double s = 0;
        for (int j = 0; j < g.f; j++) s += g.x[(size_t)v * g.f + j];
        if (s != 0) maxdev = fmax(maxdev, fabs(s - 1));
    }
    CHECK(maxdev < 1e-5, "rows not normalised (%g)", maxdev);
    donto_graph_free(&g);
    CHECK(donto_graph_load(&g, "chameleon", data_dir(), NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g.n, 2277);
    CHECK_EQ_INT(g.f, 2325);
    CHECK_EQ_INT(g.nclass, 5);
    donto_graph_free(&g);
    CHECK(donto_graph_load(&g, "no-such-dataset", data_dir(), NULL, &err) == -1, "unknown dataset must fail");
}

/* Loading honestly (issue 17): a missing split file is an error unless random splits are asked
 * for; feature files listing the indices of nonzero features are read as such, never as values
 * by accident; an .npz with edges and masks is a graph on its own. Fixtures in a temp dir. */
static void put(const char *dir, const char *rel, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    mkdir(path, 0755);
    *slash = '/';
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) fputs(text, f), fclose(f);
}

static const char EDGES6[] = "node_id\tnode_id\n0\t1\n1\t2\n2\t3\n3\t4\n4\t5\n5\t0\n";

static int load_in(donto_graph *g, const char *dir, const char *name, int splits, const char *features, donto_err *err) {
    donto_graph_opts o = {0};
    o.data_dir = dir, o.splits = splits;
    if (features && donto_graph_features_parse(features, &o, err)) return -1;
    return donto_graph_load_opts(g, name, &o, err);
}

static void test_load_honestly(void) {
    char dir[] = "/tmp/donto_sheaf_load_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    donto_err err = {0};
    donto_graph g;
    /* dense rows */
    put(dir, "dense/out1_graph_edges.txt", EDGES6);
    put(dir, "dense/out1_node_feature_label.txt",
        "node_id\tfeature\tlabel\n0\t1,0,0\t0\n1\t0,1,0\t1\n2\t1,1,0\t0\n3\t1,0,1\t0\n4\t0,1,1\t1\n5\t1,1,1\t1\n");
    /* a missing split file: an error naming the file looked for and --random-splits */
    CHECK(load_in(&g, dir, "dense", DONTO_SPLITS_REQUIRED, NULL, &err) == -1, "no split files must fail");
    CHECK_STR_CONTAINS(err.msg, "splits/dense_split_0.6_0.2_0.npz");
    CHECK_STR_CONTAINS(err.msg, "--random-splits");
    CHECK_STR_CONTAINS(err.msg, "60/20/20");
    CHECK(load_in(&g, dir, "dense", DONTO_SPLITS_RANDOM, NULL, &err) == 0, "%s", err.msg);
    CHECK(g.n == 6 && g.f == 3 && g.nsplits == 10 && g.splits_random == 1, "dense: n %d f %d splits %d", g.n, g.f, g.nsplits);
    CHECK_STR_CONTAINS(g.splits_from, "random");
    CHECK_STR_CONTAINS(g.features_from, "dense rows of 3 values");
    CHECK(fabsf(g.x[2 * 3 + 0] - 0.5f) < 1e-6 && fabsf(g.x[2 * 3 + 2]) < 1e-6, "dense row 2 (1,1,0)/2");
    donto_graph_free(&g);
    CHECK(load_in(&g, dir, "dense", DONTO_SPLITS_OPTIONAL, NULL, &err) == 0, "%s", err.msg);
    CHECK(g.nsplits == 0 && !g.splits_random, "optional splits: none drawn (%d)", g.nsplits);
    donto_graph_free(&g);

    /* index rows of differing lengths: told from the rows, 0/1 rows of the largest index + 1 */
    put(dir, "idx/out1_graph_edges.txt", EDGES6);
    put(dir, "idx/out1_node_feature_label.txt",
        "node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2\t1\n2\t0,5,9\t0\n3\t1,4\t0\n4\t8\t1\n5\t6,2\t1\n");
    CHECK(load_in(&g, dir, "idx", DONTO_SPLITS_RANDOM, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g.f, 10);
    CHECK(fabsf(g.x[2 * 10 + 0] - 1.0f / 3) < 1e-6 && fabsf(g.x[2 * 10 + 5] - 1.0f / 3) < 1e-6 &&
              fabsf(g.x[2 * 10 + 9] - 1.0f / 3) < 1e-6 && g.x[2 * 10 + 1] == 0,
          "node 2 lists 0,5,9");
    CHECK(g.x[1 * 10 + 2] == 1.0f, "node 1 lists 2");
    CHECK_STR_CONTAINS(g.features_from, "indices");
    donto_graph_free(&g);
    CHECK(load_in(&g, dir, "idx", DONTO_SPLITS_RANDOM, "indices:16", &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g.f, 16);
    donto_graph_free(&g);
    CHECK(load_in(&g, dir, "idx", DONTO_SPLITS_RANDOM, "indices:5", &err) == -1, "index 9 of 5 must fail");
    CHECK_STR_CONTAINS(err.msg, "outside 0..4");
    /* the old misleading message ("1 features, earlier lines have 5") is gone: read as values,
     * such rows are an error that says what they look like */
    CHECK(load_in(&g, dir, "idx", DONTO_SPLITS_RANDOM, "dense", &err) == -1, "differing dense rows must fail");
    CHECK(strstr(err.msg, "earlier lines") == NULL, "misleading message: %s", err.msg);
    CHECK_STR_CONTAINS(err.msg, "--features indices");

    /* index rows that happen to have equal lengths: never read as values silently */
    const char *eq = "node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2,4\t1\n2\t0,5\t0\n3\t1,4\t0\n4\t8,2\t1\n5\t6,2\t1\n";
    put(dir, "eq/out1_graph_edges.txt", EDGES6);
    put(dir, "eq/out1_node_feature_label.txt", eq);
    CHECK(load_in(&g, dir, "eq", DONTO_SPLITS_RANDOM, NULL, &err) == -1, "ambiguous rows must fail");
    CHECK_STR_CONTAINS(err.msg, "--features dense");
    CHECK_STR_CONTAINS(err.msg, "--features indices");
    CHECK_STR_CONTAINS(err.msg, "2 whole numbers");
    CHECK(load_in(&g, dir, "eq", DONTO_SPLITS_RANDOM, "indices:12", &err) == 0, "%s", err.msg);
    CHECK(g.f == 12 && g.x[0 * 12 + 3] == 0.5f && g.x[0 * 12 + 7] == 0.5f, "eq as indices:12 (f %d)", g.f);
    donto_graph_free(&g);
    CHECK(load_in(&g, dir, "eq", DONTO_SPLITS_RANDOM, "dense", &err) == 0, "%s", err.msg);
    CHECK(g.f == 2 && fabsf(g.x[0] - 0.3f) < 1e-6, "eq as dense (f %d)", g.f);
    donto_graph_free(&g);
    /* ... or by the name, as geom-gcn's loader does: film is indices into 932 */
    put(dir, "film/out1_graph_edges.txt", EDGES6);
    put(dir, "film/out1_node_feature_label.txt", eq);
    CHECK(load_in(&g, dir, "film", DONTO_SPLITS_RANDOM, NULL, &err) == 0, "%s", err.msg);
    CHECK(g.f == 932 && g.x[4 * 932 + 8] == 0.5f && g.x[4 * 932 + 2] == 0.5f, "film: f %d", g.f);
    CHECK_STR_CONTAINS(g.features_from, "932");
    donto_graph_free(&g);
    /* a film file whose rows look dense is not read as indices silently either */
    char filmdir[4200];
    snprintf(filmdir, sizeof filmdir, "%s/x", dir);
    mkdir(filmdir, 0755);
    put(filmdir, "film/out1_graph_edges.txt", EDGES6);
    put(filmdir, "film/out1_node_feature_label.txt",
        "node_id\tfeature\tlabel\n0\t1,0,0\t0\n1\t0,1,0\t1\n2\t1,1,0\t0\n3\t1,0,1\t0\n4\t0,1,1\t1\n5\t1,1,1\t1\n");
    CHECK(load_in(&g, filmdir, "film", DONTO_SPLITS_RANDOM, NULL, &err) == -1, "dense-looking film must fail");
    CHECK_STR_CONTAINS(err.msg, "--features dense");
    CHECK(load_in(&g, filmdir, "film", DONTO_SPLITS_RANDOM, "dense", &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g.f, 3);
    donto_graph_free(&g);
    /* neither layout: differing lengths with non-integers */
    put(dir, "bad/out1_graph_edges.txt", EDGES6);
    put(dir, "bad/out1_node_feature_label.txt", "node_id\tfeature\tlabel\n0\t3,7\t0\n1\t2.5\t1\n");
    CHECK(load_in(&g, dir, "bad", DONTO_SPLITS_RANDOM, NULL, &err) == -1, "mixed rows must fail");
    CHECK_STR_CONTAINS(err.msg, "neither");
    /* --features is parsed strictly */
    donto_graph_opts o = {0};
    CHECK(donto_graph_features_parse("indices:0", &o, &err) == -1, "indices:0 must fail");
    CHECK(donto_graph_features_parse("sparse", &o, &err) == -1, "sparse must fail");
    CHECK(donto_graph_features_parse("indices", &o, &err) == 0 && o.features == DONTO_FEATURES_INDICES && o.feature_dim == 0,
          "indices");

    /* an .npz holding features, labels, edges and masks is a graph on its own: chameleon's, alone
     * in a directory, is the in-repo chameleon (text edges + split files), masks included */
    char src[8192], dst[8192];
    snprintf(src, sizeof src, "%s/chameleon/chameleon.npz", data_dir());
    snprintf(dst, sizeof dst, "%s/chameleon", dir);
    mkdir(dst, 0755);
    snprintf(dst, sizeof dst, "%s/chameleon/chameleon.npz", dir);
    char *buf;
    size_t len;
    if (donto_read_file(src, &buf, &len, &err) == 0) {
        FILE *f = fopen(dst, "wb");
        CHECK(f && fwrite(buf, 1, len, f) == len, "copy chameleon.npz");
        if (f) fclose(f);
        free(buf);
        donto_graph ref;
        CHECK(donto_graph_load(&ref, "chameleon", data_dir(), NULL, &err) == 0, "%s", err.msg);
        CHECK(load_in(&g, dir, "chameleon", DONTO_SPLITS_REQUIRED, NULL, &err) == 0, "%s", err.msg);
        CHECK(!strcmp(g.fingerprint, ref.fingerprint), "chameleon.npz alone: another graph");
        CHECK(g.nsplits == 10 && ref.nsplits == 10, "chameleon.npz alone: %d splits", g.nsplits);
        for (int s = 0; s < 10 && g.nsplits == 10; s++) {
            char a[65], b[65];
            donto_graph_split_fingerprint(&g, s, a), donto_graph_split_fingerprint(&ref, s, b);
            CHECK(!strcmp(a, b), "chameleon.npz alone: split %d's masks differ from the split files'", s);
        }
        CHECK_STR_CONTAINS(g.splits_from, "train_masks");
        donto_graph_free(&g);
        CHECK(donto_graph_load(&g, dst, NULL, NULL, &err) == 0, "--data FILE.npz: %s", err.msg);
        CHECK(!strcmp(g.fingerprint, ref.fingerprint), "chameleon.npz as a file: another graph");
        donto_graph_free(&g);
        donto_graph_free(&ref);
    } else {
        CHECK(0, "%s", err.msg);
    }
    /* a directory with neither layout says what it wants */
    snprintf(dst, sizeof dst, "%s/empty", dir);
    mkdir(dst, 0755);
    CHECK(load_in(&g, dir, "empty", DONTO_SPLITS_RANDOM, NULL, &err) == -1, "empty dir must fail");
    CHECK_STR_CONTAINS(err.msg, "out1_node_feature_label.txt");
    CHECK_STR_CONTAINS(err.msg, "empty.npz");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

static void test_checkpoint_and_determinism(void) {
    donto_err err = {0};
    donto_graph g;
    CHECK(donto_graph_random(&g, 60, 6, 3, 150, 9, &err) == 0, "%s", err.msg);
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.family = DONTO_SHEAF_ORTH, hp.d = 3, hp.hidden = 5, hp.add_lp = 1, hp.dropout = 0.2f;
    hp.epochs = 15, hp.patience = 100;
    float *ref = NULL;
    size_t np = 0;
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
        donto_sheaf_metrics best;
        CHECK(donto_sheaf_train(m, &g, 0, &best, NULL, NULL, &err) == 0, "%s", err.msg);
        float *p = donto_sheaf_params(m, &np);
        if (!ref) {
            ref = malloc(sizeof(float) * np);
            memcpy(ref, p, sizeof(float) * np);
            /* checkpoint round trip: bit-exact weights, same log-probabilities */
            char path[] = "/tmp/donto_sheaf_ckpt_XXXXXX";
            int fd = mkstemp(path);
            close(fd);
            CHECK(donto_sheaf_save(m, &g, &best, path, &err) == 0, "%s", err.msg);
            donto_sheaf_hp hp2;
            donto_sheaf_model *m2 = donto_sheaf_load(path, &g, &hp2, &err);
            CHECK(m2 != NULL, "%s", err.msg);
            if (m2) {
                size_t np2;
                float *p2 = donto_sheaf_params(m2, &np2);
                CHECK(np2 == np && memcmp(p2, p, sizeof(float) * np) == 0, "checkpoint weights differ");
                const float *l1, *l2;
                donto_sheaf_forward(m, &g, 0, 0, NULL, &l1);
                float *c1 = malloc(sizeof(float) * g.n * g.nclass);
                memcpy(c1, l1, sizeof(float) * g.n * g.nclass);
                donto_sheaf_forward(m2, &g, 0, 0, NULL, &l2);
                CHECK(memcmp(c1, l2, sizeof(float) * g.n * g.nclass) == 0, "log-probabilities differ after reload");
                free(c1);
                CHECK(hp2.d == 3 && hp2.add_lp == 1 && hp2.family == DONTO_SHEAF_ORTH, "hparams lost");
                /* the graph and split trained on survive the round trip */
                const donto_sheaf_origin *o = donto_sheaf_model_origin(m2);
                CHECK(o->split == 0 && !strcmp(o->fingerprint, g.fingerprint), "origin lost: split %d", o->split);
                CHECK(donto_sheaf_check_graph(m2, &g, &err) == 0, "%s", err.msg);
                CHECK(donto_sheaf_held_out(m2, &g, 0) == 1, "the trained split is held out");
                CHECK(donto_sheaf_held_out(m2, &g, 1) == 0, "another split is not held out");
                donto_graph g3;
                donto_graph_random(&g3, g.n, g.f, g.nclass, 3 * g.n, 99, &err);
                CHECK(donto_sheaf_check_graph(m2, &g3, &err) == -1, "another graph must be told apart");
                CHECK_STR_CONTAINS(err.msg, "not on");
                CHECK(donto_sheaf_held_out(m2, &g3, 0) == 0, "another graph's split is not held out");
                donto_graph_free(&g3);
                donto_sheaf_model_free(m2);
            }
            /* a version-1 checkpoint (no "task", written before edge tasks) still loads */
            {
                FILE *f = fopen(path, "r");
                char *buf = malloc(1 << 20);
                size_t len = f ? fread(buf, 1, (1 << 20) - 1, f) : 0;
                if (f) fclose(f);
                buf[len] = 0;
                char *v = strstr(buf, "\"version\":2"), *tk = strstr(buf, "\"task\":{");
                CHECK(v && tk, "checkpoint has version 2 and a task object");
                if (v && tk) {
                    v[10] = '1';
                    char *end = strchr(tk, '}');
                    memmove(tk, end + 2, strlen(end + 2) + 1); /* drop "task":{...}, */
                    f = fopen(path, "w");
                    fputs(buf, f);
                    fclose(f);
                    donto_sheaf_model *m1 = donto_sheaf_load(path, &g, NULL, &err);
                    CHECK(m1 != NULL, "version 1 checkpoint: %s", err.msg);
                    if (m1) {
                        size_t np1;
                        float *p1 = donto_sheaf_params(m1, &np1);
                        CHECK(np1 == np && memcmp(p1, p, sizeof(float) * np) == 0, "version 1 weights differ");
                        donto_sheaf_model_free(m1);
                    }
                }
                free(buf);
            }
            /* a graph with a different feature count is refused */
            donto_graph g2;
            donto_graph_random(&g2, 10, 5, 3, 20, 1, &err);
            CHECK(donto_sheaf_load(path, &g2, NULL, &err) == NULL, "feature mismatch must fail");
            CHECK_STR_CONTAINS(err.msg, "features");
            donto_graph_free(&g2);
            unlink(path);
        } else {
            CHECK(memcmp(ref, p, sizeof(float) * np) == 0, "training with %d threads differs from 1 thread", threads);
        }
        donto_sheaf_model_free(m);
    }
    free(ref);
    donto_graph_free(&g);
}

static void test_bad_input(void) {
    donto_err err = {0};
    donto_graph g;
    int src[2] = {0, 5}, dst[2] = {1, 1};
    float x[4] = {1, 2, 3, 4};
    CHECK(donto_graph_from_arrays(&g, 4, 1, x, NULL, 2, 2, src, dst, &err) == -1, "edge outside the graph must fail");
    CHECK_STR_CONTAINS(err.msg, "outside");
    CHECK(donto_graph_random(&g, 20, 3, 2, 30, 1, &err) == 0, "%s", err.msg);
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.d = 0;
    CHECK(donto_sheaf_model_new(&hp, &g, &err) == NULL, "d = 0 must fail");
    hp.d = 2, hp.dropout = 1.5f;
    CHECK(donto_sheaf_model_new(&hp, &g, &err) == NULL, "dropout 1.5 must fail");
    donto_graph_free(&g);
}

/* Graph-sized allocations fail cleanly where the graph enters the API (policy atop
 * src/sheaf/sheaf_int.h): a graph too big to hold, a model too big for its graph. Nothing is
 * touched before the failing request (calloc'd, never written). */
static void test_oom(void) {
    donto_err err = {0};
    donto_graph g;
    CHECK(donto_graph_random(&g, 1 << 24, 1 << 24, 2, 10, 1, &err) == -1, "a 2^48-float graph must fail");
    CHECK_STR_CONTAINS(err.msg, "out of memory");
    CHECK_STR_CONTAINS(err.msg, "node features");
    int e0[1] = {0};
    memset(&g, 0, sizeof g);
    g.n = 1 << 24, g.f = 1, g.nclass = 2, g.ne = 0, g.eu = e0, g.ev = e0;
    snprintf(g.name, sizeof g.name, "huge");
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.d = 2, hp.layers = 1, hp.hidden = 1 << 21, hp.right_weights = 0; /* [N][H] = 2^46 floats */
    err.msg[0] = 0;
    CHECK(donto_sheaf_model_new(&hp, &g, &err) == NULL, "a model with 2^46-float activations must fail");
    CHECK_STR_CONTAINS(err.msg, "out of memory");
    CHECK_STR_CONTAINS(err.msg, "16777216 nodes");
    CHECK_STR_CONTAINS(err.msg, "bytes");
}

/* The fixed stalk dims are the NSD reference code's (LaplacianBuilder.get_fixed_maps): add_lp
 * is the normalised signless Laplacian (+1/sqrt((deg_u+1)(deg_v+1)) off the diagonal), add_hp
 * the ordinary one (-1/sqrt(..)); deg/(deg+1) on the diagonal for both. The parity tests cannot
 * catch a flip (tests/ref/sheaf_ref.py is ours); the reference's chameleon configuration
 * (add_lp) scores 1.0 point lower with the signs the other way round. */
static void test_fixed_dims(void) {
    donto_err err = {0};
    /* path 0 - 1 - 2: degrees 1, 2, 1 */
    float x[3 * 2] = {1, 0, 0, 1, 1, 1};
    int y[3] = {0, 1, 0}, src[2] = {0, 1}, dst[2] = {1, 2};
    donto_graph g;
    CHECK(donto_graph_from_arrays(&g, 3, 2, x, y, 2, 2, src, dst, &err) == 0, "graph: %s", err.msg);
    int fams[3] = {DONTO_SHEAF_DIAG, DONTO_SHEAF_ORTH, DONTO_SHEAF_GENERAL};
    for (int fi = 0; fi < 3; fi++) {
        donto_sheaf_hp hp;
        donto_sheaf_hp_default(&hp);
        hp.family = fams[fi], hp.d = 2, hp.layers = 1, hp.hidden = 2, hp.add_lp = hp.add_hp = 1;
        donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
        CHECK(m != NULL, "model: %s", err.msg);
        if (!m) continue;
        donto_sheaf_forward(m, &g, 0, 1, NULL, NULL);
        const sheaf_layer_act *a = &m->la[0];
        int dp = m->dp, dense = m->dense;
        size_t bs = dense ? (size_t)dp * dp : (size_t)dp;
        int stride = dense ? dp + 1 : 1, lp = m->d, hpd = m->d + 1;
        for (int k = 0; k < m->ne; k++) {
            int u = m->eu[k], v = m->ev[k];
            double du = u == 1 ? 2 : 1, dv = v == 1 ? 2 : 1, want = 1.0 / sqrt((du + 1) * (dv + 1));
            float olp = a->Lo[k * bs + (size_t)lp * stride], ohp = a->Lo[k * bs + (size_t)hpd * stride];
            CHECK(fabs(olp - want) < 1e-6, "%s edge %d-%d: add_lp off-diagonal %g, want +%g",
                  donto_sheaf_family_name(hp.family), u, v, olp, want);
            CHECK(fabs(ohp + want) < 1e-6, "%s edge %d-%d: add_hp off-diagonal %g, want -%g",
                  donto_sheaf_family_name(hp.family), u, v, ohp, want);
        }
        for (int v = 0; v < 3; v++) {
            double dv = v == 1 ? 2 : 1;
            CHECK(fabs(a->Ld[v * bs + (size_t)lp * stride] - dv / (dv + 1)) < 1e-6, "add_lp diagonal");
            CHECK(fabs(a->Ld[v * bs + (size_t)hpd * stride] - dv / (dv + 1)) < 1e-6, "add_hp diagonal");
        }
        donto_sheaf_model_free(m);
    }
    donto_graph_free(&g);
}

int main(void) {
    test_fd();
    test_fd_edge();
    test_edge_loss();
    test_metrics();
    test_fixed_dims();
    test_geom_gcn();
    test_load_honestly();
    test_checkpoint_and_determinism();
    test_bad_input();
    test_oom();
    return check_report("test_sheaf");
}
