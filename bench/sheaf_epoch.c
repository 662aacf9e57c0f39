/* Times one training epoch (forward + backward + Adam step, dropout on) of donto-sheaf's
 * trainer; used by bench/sheaf-vs-torch. Prints one JSON line.
 * usage: bench_sheaf_epoch --graph chameleon|random:N:M[:F[:K]] [--data-dir D] [--family F]
 *        [--d 4] [--layers 5] [--hidden 32] [--add-lp] [--add-hp] [--second-linear]
 *        [--input-dropout X] [--dropout X] [--threads T] [--epochs 5] [--warmup 1] */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/sheaf.h"

void openblas_set_num_threads(int);

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *graph = NULL, *data_dir = NULL;
    int threads = 1, epochs = 5, warmup = 1;
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.d = 4, hp.layers = 5, hp.hidden = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--graph")) graph = v, i++;
        else if (!strcmp(a, "--data-dir")) data_dir = v, i++;
        else if (!strcmp(a, "--family")) {
            if (donto_sheaf_family_parse(v, &hp.family, &hp.orth)) return fprintf(stderr, "bad family %s\n", v), 2;
            i++;
        } else if (!strcmp(a, "--d")) hp.d = atoi(v), i++;
        else if (!strcmp(a, "--layers")) hp.layers = atoi(v), i++;
        else if (!strcmp(a, "--hidden")) hp.hidden = atoi(v), i++;
        else if (!strcmp(a, "--input-dropout")) hp.input_dropout = (float)atof(v), i++;
        else if (!strcmp(a, "--dropout")) hp.dropout = (float)atof(v), i++;
        else if (!strcmp(a, "--threads")) threads = atoi(v), i++;
        else if (!strcmp(a, "--epochs")) epochs = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warmup = atoi(v), i++;
        else if (!strcmp(a, "--add-lp")) hp.add_lp = 1;
        else if (!strcmp(a, "--add-hp")) hp.add_hp = 1;
        else if (!strcmp(a, "--second-linear")) hp.second_linear = 1;
        else return fprintf(stderr, "bench_sheaf_epoch: unknown option %s\n", a), 2;
    }
    if (!graph || epochs < 1) return fprintf(stderr, "usage: bench_sheaf_epoch --graph G [options]\n"), 2;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    donto_err err = {0};
    donto_graph g;
    int rc;
    if (!strncmp(graph, "random:", 7)) {
        int n = 0, f = 64, k = 5;
        long m = 0;
        sscanf(graph + 7, "%d:%ld:%d:%d", &n, &m, &f, &k);
        rc = donto_graph_random(&g, n, f, k, m, 1, &err);
    } else {
        rc = donto_graph_load(&g, graph, data_dir, NULL, &err);
    }
    if (rc) return fprintf(stderr, "bench_sheaf_epoch: %s\n", err.msg), 1;
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
    if (!m) return fprintf(stderr, "bench_sheaf_epoch: %s\n", err.msg), 1;
    double *t = malloc(sizeof(double) * epochs);
    for (int e = 0; e < warmup + epochs; e++) {
        double t0 = donto_now();
        donto_sheaf_train_step(m, &g, 0);
        if (e >= warmup) t[e - warmup] = donto_now() - t0;
    }
    qsort(t, epochs, sizeof(double), cmp_d);
    printf("{\"epoch_s\": %.6f, \"epochs\": %d, \"n\": %d, \"edges\": %d, \"peak_rss_mb\": %.1f, \"threads\": %d}\n",
           t[epochs / 2], epochs, g.n, g.ne, donto_peak_rss() / 1048576.0, threads);
    free(t);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return 0;
}
