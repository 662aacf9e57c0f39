/* Test helper for the PyTorch parity check (tests/ref/sheaf_ref.py): builds a sheaf model
 * on a graph, moves the weights off their structured init, runs forward (no dropout) and the
 * backward of the mean NLL on split 0's train mask, and writes everything the reference needs:
 *   ckpt.json (weights + hyperparameters, the product's checkpoint format), x.f32, y.i32,
 *   eu.i32, ev.i32, mask.u8, logp.f32, grads.f32 (flat, checkpoint tensor order), meta.json
 *   (with the C metrics of split 0's train set: accuracy, macro-F1, ROC-AUC, AP).
 * --edge undirected|directed [--edge-classes K]: a random edge task on the graph instead
 * (donto_graph_random_pairs); then y.i32/mask.u8/logp.f32 are over the pairs, plus pu.i32,
 * pv.i32 and cw.f32 (the class weights of the weighted NLL). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/sheaf.h"

static int wr(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) return fprintf(stderr, "sheaf_dump: cannot write %s\n", path), -1;
    return fclose(f);
}

int main(int argc, char **argv) {
    const char *out = NULL, *graph = "random", *data_dir = NULL;
    int edge = -1, edge_classes = 3;
    double perturb = 0.3;
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.hidden = 6, hp.layers = 2, hp.d = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--out")) out = v, i++;
        else if (!strcmp(a, "--graph")) graph = v, i++;
        else if (!strcmp(a, "--data-dir")) data_dir = v, i++;
        else if (!strcmp(a, "--family")) {
            if (donto_sheaf_family_parse(v, &hp.family, &hp.orth)) return fprintf(stderr, "bad family\n"), 2;
            i++;
        } else if (!strcmp(a, "--d")) hp.d = atoi(v), i++;
        else if (!strcmp(a, "--layers")) hp.layers = atoi(v), i++;
        else if (!strcmp(a, "--hidden")) hp.hidden = atoi(v), i++;
        else if (!strcmp(a, "--gen-eps")) hp.gen_eps = atof(v), i++;
        else if (!strcmp(a, "--perturb")) perturb = atof(v), i++;
        else if (!strcmp(a, "--seed")) hp.seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--edge")) edge = !strcmp(v, "directed"), i++;
        else if (!strcmp(a, "--edge-classes")) edge_classes = atoi(v), i++;
        else if (!strcmp(a, "--add-lp")) hp.add_lp = 1;
        else if (!strcmp(a, "--add-hp")) hp.add_hp = 1;
        else if (!strcmp(a, "--second-linear")) hp.second_linear = 1;
        else if (!strcmp(a, "--no-edge-weights")) hp.edge_weights = 0;
        else if (!strcmp(a, "--no-left-weights")) hp.left_weights = 0;
        else if (!strcmp(a, "--no-right-weights")) hp.right_weights = 0;
        else return fprintf(stderr, "sheaf_dump: unknown option %s\n", a), 2;
    }
    if (!out) return fprintf(stderr, "usage: sheaf_dump --out DIR [--graph random|texas|...] [model options]\n"), 2;
    donto_err err = {0};
    donto_graph g;
    int rc = !strcmp(graph, "random") ? donto_graph_random(&g, 300, 24, 4, 900, 3, &err)
                                      : donto_graph_load(&g, graph, data_dir, NULL, &err);
    if (rc) return fprintf(stderr, "sheaf_dump: %s\n", err.msg), 1;
    if (edge >= 0 && donto_graph_random_pairs(&g, 2 * g.n, edge_classes, edge, 7, &err))
        return fprintf(stderr, "sheaf_dump: %s\n", err.msg), 1;
    int E = edge >= 0, nex = E ? g.npairs : g.n; /* examples: pairs or nodes */
    const uint8_t *mask = E ? g.ptrain : g.train;
    const int *ylab = E ? g.pc : g.y;
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
    if (!m) return fprintf(stderr, "sheaf_dump: %s\n", err.msg), 1;
    size_t np;
    float *p = donto_sheaf_params(m, &np);
    uint64_t s = 977;
    for (size_t i = 0; i < np; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] += (float)(((s >> 40) / 16777216.0 - 0.5) * perturb);
    }
    const float *logp;
    double loss = donto_sheaf_forward(m, &g, 0, 0, mask, &logp);
    donto_sheaf_backward(m, &g, mask);
    char path[4096];
    snprintf(path, sizeof path, "%s/ckpt.json", out);
    if (donto_sheaf_save(m, &g, NULL, path, &err)) return fprintf(stderr, "sheaf_dump: %s\n", err.msg), 1;
    if (wr(out, "x.f32", g.x, sizeof(float) * (size_t)g.n * g.f) || wr(out, "y.i32", ylab, sizeof(int) * nex) ||
        wr(out, "eu.i32", g.eu, sizeof(int) * g.ne) || wr(out, "ev.i32", g.ev, sizeof(int) * g.ne) ||
        wr(out, "mask.u8", mask, nex) || wr(out, "logp.f32", logp, sizeof(float) * (size_t)nex * g.nclass) ||
        wr(out, "grads.f32", donto_sheaf_grads(m), sizeof(float) * np))
        return 1;
    if (E && (wr(out, "pu.i32", g.pu, sizeof(int) * nex) || wr(out, "pv.i32", g.pv, sizeof(int) * nex) ||
              wr(out, "cw.f32", donto_sheaf_class_weights(m), sizeof(float) * g.nclass)))
        return 1;
    donto_sheaf_metrics mt;
    donto_sheaf_evaluate(m, &g, 0, &mt); /* the same forward (no dropout): metrics of the logp above */
    snprintf(path, sizeof path, "%s/meta.json", out);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "{\"n\": %d, \"f\": %d, \"K\": %d, \"ne\": %d, \"loss\": %.17g, \"edge\": %s, \"directed\": %s, "
               "\"P\": %d, \"train_acc\": %.17g, \"train_f1\": %.17g, \"train_auc\": %.17g, \"train_ap\": %.17g}\n",
            g.n, g.f, g.nclass, g.ne, loss, E ? "true" : "false", E && g.directed ? "true" : "false", E ? g.npairs : 0,
            mt.train_acc, mt.train_f1, isfinite(mt.train_auc) ? mt.train_auc : -1.0,
            isfinite(mt.train_ap) ? mt.train_ap : -1.0);
    fclose(f);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return 0;
}
