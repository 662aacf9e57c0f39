/*
 * donto-sheaf: train | eval | infer | sweep for Neural Sheaf Diffusion models
 * (logic in src/sheaf/, see docs/sheaf.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/sheaf.h"

void openblas_set_num_threads(int);

static void usage_main(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf <command> [options]\n"
            "\n"
            "Neural Sheaf Diffusion (Diag, O(d), General) and a GCN baseline for node classification.\n"
            "\n"
            "commands:\n"
            "  train    train on one split or all splits, optionally save a checkpoint\n"
            "  eval     evaluate a checkpoint on a graph's splits\n"
            "  infer    predictions and log-probabilities of a checkpoint for a graph\n"
            "  sweep    grid or random search over hyperparameters, across splits\n"
            "  version  print the version\n"
            "\n"
            "`donto-sheaf <command> --help` describes each command.\n");
}

static const char *HP_HELP =
    "model and training options:\n"
    "  --family F          diag | orth (O(d), Householder) | cayley (O(d), Cayley) | general | gcn (default diag)\n"
    "  --orth M            householder | cayley (for --family orth)\n"
    "  --d N               stalk dimension (default 2)\n"
    "  --layers N          diffusion layers / GCN layers (default 2)\n"
    "  --hidden N          channels per stalk dim / GCN width (default 20)\n"
    "  --add-lp, --add-hp  add a fixed stalk dim as the NSD reference code does: add-lp\n"
    "                      D + A (signless), add-hp D - A (see docs/sheaf.md)\n"
    "  --no-left-weights, --no-right-weights, --no-edge-weights, --second-linear\n"
    "  --gen-eps X         General: (D + (1+X) I)^-1/2 (default 0)\n"
    "  --lr X              Adam learning rate (default 0.01)\n"
    "  --weight-decay X    L2 decay (default 5e-4); --sheaf-decay X for the sheaf learners (default = weight decay)\n"
    "  --input-dropout X, --dropout X   (default 0)\n"
    "  --epochs N          (default 1500)   --patience N  early stopping (default 200)\n"
    "  --stop loss|acc     model selection on validation loss (default) or accuracy\n"
    "  --seed N            (default 43; split i uses seed + i)\n"
    "  --threads N         OpenMP/BLAS threads (default: all CPUs)\n";

/* long options shared by train and sweep (model hyperparameters) */
enum {
    O_FAMILY = 1000, O_ORTH, O_D, O_LAYERS, O_HIDDEN, O_LP, O_HP, O_NOLEFT, O_NORIGHT, O_NOEW, O_SECOND, O_GENEPS,
    O_LR, O_WD, O_SD, O_INDROP, O_DROP, O_EPOCHS, O_PAT, O_STOP, O_SEED, O_THREADS,
    O_DATA, O_DATADIR, O_TASK, O_SPLIT, O_CKPT, O_JSON, O_LOG, O_QUIET, O_IN, O_OUT, O_GRID, O_HELP, O_RANDOM, O_CSV
};

#define HP_OPTIONS                                                                                              \
    {"family", 1, 0, O_FAMILY}, {"orth", 1, 0, O_ORTH}, {"d", 1, 0, O_D}, {"layers", 1, 0, O_LAYERS},         \
        {"hidden", 1, 0, O_HIDDEN}, {"add-lp", 0, 0, O_LP}, {"add-hp", 0, 0, O_HP},                             \
        {"no-left-weights", 0, 0, O_NOLEFT}, {"no-right-weights", 0, 0, O_NORIGHT},                             \
        {"no-edge-weights", 0, 0, O_NOEW}, {"second-linear", 0, 0, O_SECOND}, {"gen-eps", 1, 0, O_GENEPS},       \
        {"lr", 1, 0, O_LR}, {"weight-decay", 1, 0, O_WD}, {"sheaf-decay", 1, 0, O_SD},                          \
        {"input-dropout", 1, 0, O_INDROP}, {"dropout", 1, 0, O_DROP}, {"epochs", 1, 0, O_EPOCHS},               \
        {"patience", 1, 0, O_PAT}, {"stop", 1, 0, O_STOP}, {"seed", 1, 0, O_SEED}, {"threads", 1, 0, O_THREADS}

static int parse_num(const char *s, double *out, const char *opt) {
    char *e;
    *out = strtod(s, &e);
    if (e == s || *e) {
        fprintf(stderr, "donto-sheaf: --%s expects a number, got '%s'\n", opt, s);
        return -1;
    }
    return 0;
}

/* 1 handled, 0 not a hyperparameter option, -1 error */
static int hp_option(int c, const char *arg, donto_sheaf_hp *hp, int *threads) {
    double v;
    switch (c) {
    case O_FAMILY:
        if (donto_sheaf_family_parse(arg, &hp->family, &hp->orth)) {
            fprintf(stderr, "donto-sheaf: unknown family '%s' (diag, orth, cayley, general, gcn)\n", arg);
            return -1;
        }
        return 1;
    case O_ORTH:
        if (!strcmp(arg, "householder")) hp->orth = DONTO_ORTH_HOUSEHOLDER;
        else if (!strcmp(arg, "cayley")) hp->orth = DONTO_ORTH_CAYLEY;
        else {
            fprintf(stderr, "donto-sheaf: --orth householder|cayley\n");
            return -1;
        }
        return 1;
    case O_LP: hp->add_lp = 1; return 1;
    case O_HP: hp->add_hp = 1; return 1;
    case O_NOLEFT: hp->left_weights = 0; return 1;
    case O_NORIGHT: hp->right_weights = 0; return 1;
    case O_NOEW: hp->edge_weights = 0; return 1;
    case O_SECOND: hp->second_linear = 1; return 1;
    case O_STOP:
        if (!strcmp(arg, "acc")) hp->stop_acc = 1;
        else if (!strcmp(arg, "loss")) hp->stop_acc = 0;
        else {
            fprintf(stderr, "donto-sheaf: --stop loss|acc\n");
            return -1;
        }
        return 1;
    case O_D: case O_LAYERS: case O_HIDDEN: case O_GENEPS: case O_LR: case O_WD: case O_SD: case O_INDROP:
    case O_DROP: case O_EPOCHS: case O_PAT: case O_SEED: case O_THREADS:
        if (parse_num(arg, &v, "option")) return -1;
        switch (c) {
        case O_D: hp->d = (int)v; break;
        case O_LAYERS: hp->layers = (int)v; break;
        case O_HIDDEN: hp->hidden = (int)v; break;
        case O_GENEPS: hp->gen_eps = v; break;
        case O_LR: hp->lr = (float)v; break;
        case O_WD: hp->weight_decay = (float)v; break;
        case O_SD: hp->sheaf_decay = (float)v; break;
        case O_INDROP: hp->input_dropout = (float)v; break;
        case O_DROP: hp->dropout = (float)v; break;
        case O_EPOCHS: hp->epochs = (int)v; break;
        case O_PAT: hp->patience = (int)v; break;
        case O_SEED: hp->seed = (uint64_t)v; break;
        case O_THREADS: *threads = (int)v; break;
        }
        return 1;
    }
    return 0;
}

static void set_threads(int threads) {
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
}

static int parse_split(const char *s, int *split) {
    if (!strcmp(s, "all")) {
        *split = -1;
        return 0;
    }
    double v;
    if (parse_num(s, &v, "split")) return -1;
    *split = (int)v;
    return 0;
}

typedef struct {
    int log, split;
} log_ctx;

static void epoch_log(void *vctx, int epoch, const donto_sheaf_metrics *now, const donto_sheaf_metrics *best) {
    log_ctx *c = vctx;
    fprintf(stderr,
            "split %d epoch %4d  train %.4f/%.4f  val %.4f/%.4f  test %.4f/%.4f  best@%d val %.4f test %.4f\n",
            c->split, epoch, now->train_loss, now->train_acc, now->val_loss, now->val_acc, now->test_loss,
            now->test_acc, best->best_epoch, best->val_acc, best->test_acc);
}

static json_t *metrics_json(const donto_sheaf_metrics *m, int split) {
    json_t *o = json_object();
    json_object_set_new(o, "split", json_integer(split));
    json_object_set_new(o, "train_acc", json_real(m->train_acc));
    json_object_set_new(o, "val_acc", json_real(m->val_acc));
    json_object_set_new(o, "test_acc", json_real(m->test_acc));
    json_object_set_new(o, "val_loss", json_real(m->val_loss));
    json_object_set_new(o, "test_loss", json_real(m->test_loss));
    json_object_set_new(o, "best_epoch", json_integer(m->best_epoch));
    json_object_set_new(o, "epochs_run", json_integer(m->epochs_run));
    json_object_set_new(o, "seconds", json_real(m->seconds));
    return o;
}

static void mean_std(const double *x, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = n ? s / n : 0;
    for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *sd = n ? sqrt(q / n) : 0; /* population std, as the reference reports */
}

/* Train over splits; fills per-split metrics. Saves the best-validation model when ckpt. */
static int run_splits(const donto_sheaf_hp *hp, const donto_graph *g, int split, int log, int quiet, const char *ckpt,
                      json_t *splits_out, double *test_mean, double *test_sd, double *val_mean, donto_err *err) {
    int s0 = split < 0 ? 0 : split, s1 = split < 0 ? g->nsplits : split + 1;
    if (s0 >= g->nsplits) return donto_seterr(err, "split %d not available (graph has %d)", split, g->nsplits);
    double *tests = calloc(s1 - s0, sizeof(double)), *vals = calloc(s1 - s0, sizeof(double));
    double best_val = -1;
    for (int s = s0; s < s1; s++) {
        donto_sheaf_hp h = *hp;
        h.seed = hp->seed + (uint64_t)s;
        donto_sheaf_model *m = donto_sheaf_model_new(&h, g, err);
        if (!m) return free(tests), free(vals), -1;
        donto_sheaf_metrics best;
        log_ctx lc = {log, s};
        if (donto_sheaf_train(m, g, s, &best, log ? epoch_log : NULL, &lc, err)) {
            donto_sheaf_model_free(m);
            free(tests), free(vals);
            return -1;
        }
        tests[s - s0] = best.test_acc, vals[s - s0] = best.val_acc;
        if (!quiet)
            fprintf(stderr, "split %d: test_acc %.4f val_acc %.4f val_loss %.4f best_epoch %d epochs %d (%.1fs)\n", s,
                    best.test_acc, best.val_acc, best.val_loss, best.best_epoch, best.epochs_run, best.seconds);
        if (splits_out) json_array_append_new(splits_out, metrics_json(&best, s));
        if (ckpt && best.val_acc > best_val) {
            best_val = best.val_acc;
            if (donto_sheaf_save(m, g, &best, ckpt, err)) {
                donto_sheaf_model_free(m);
                free(tests), free(vals);
                return -1;
            }
        }
        donto_sheaf_model_free(m);
    }
    double vs;
    mean_std(tests, s1 - s0, test_mean, test_sd);
    mean_std(vals, s1 - s0, val_mean, &vs);
    free(tests), free(vals);
    return 0;
}

static json_t *hp_summary(const donto_sheaf_hp *hp) {
    json_t *o = json_object();
    json_object_set_new(o, "family", json_string(hp->family == DONTO_SHEAF_ORTH && hp->orth == DONTO_ORTH_CAYLEY
                                                     ? "cayley"
                                                     : donto_sheaf_family_name(hp->family)));
    json_object_set_new(o, "d", json_integer(hp->d));
    json_object_set_new(o, "layers", json_integer(hp->layers));
    json_object_set_new(o, "hidden", json_integer(hp->hidden));
    json_object_set_new(o, "add_lp", json_boolean(hp->add_lp));
    json_object_set_new(o, "add_hp", json_boolean(hp->add_hp));
    json_object_set_new(o, "second_linear", json_boolean(hp->second_linear));
    json_object_set_new(o, "lr", json_real(hp->lr));
    json_object_set_new(o, "weight_decay", json_real(hp->weight_decay));
    json_object_set_new(o, "sheaf_decay", json_real(hp->sheaf_decay < 0 ? hp->weight_decay : hp->sheaf_decay));
    json_object_set_new(o, "input_dropout", json_real(hp->input_dropout));
    json_object_set_new(o, "dropout", json_real(hp->dropout));
    json_object_set_new(o, "epochs", json_integer(hp->epochs));
    json_object_set_new(o, "patience", json_integer(hp->patience));
    json_object_set_new(o, "stop", json_string(hp->stop_acc ? "acc" : "loss"));
    return o;
}

/* ------------------------------------------------------------------ */

static void usage_train(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf train --data GRAPH [options]\n"
            "\n"
            "Train with the reference protocol: full batch, Adam, evaluation every epoch, model selection\n"
            "and early stopping on validation; prints per-split test accuracy and mean +- std.\n"
            "\n"
            "  --data GRAPH        geom-gcn name (texas, wisconsin, cornell, chameleon), dataset dir, or export file\n"
            "  --data-dir DIR      where geom-gcn datasets live (default $DONTO_GEOM_GCN_DIR, ../shared/data/geom-gcn)\n"
            "  --task NAME         task of an export file (default: the first)\n"
            "  --split I|all       (default 0)\n"
            "  --checkpoint FILE   save the model (best validation accuracy over the splits run)\n"
            "  --log               one line per epoch on stderr\n"
            "  --json              one JSON object on stdout\n"
            "  --quiet             no per-split lines\n"
            "%s",
            HP_HELP);
}

static int cmd_train(int argc, char **argv) {
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    const char *data = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL;
    int split = 0, json_out = 0, log = 0, quiet = 0, threads = 0;
    static struct option opts[] = {HP_OPTIONS,
                                   {"data", 1, 0, O_DATA},
                                   {"data-dir", 1, 0, O_DATADIR},
                                   {"task", 1, 0, O_TASK},
                                   {"split", 1, 0, O_SPLIT},
                                   {"checkpoint", 1, 0, O_CKPT},
                                   {"json", 0, 0, O_JSON},
                                   {"log", 0, 0, O_LOG},
                                   {"quiet", 0, 0, O_QUIET},
                                   {"help", 0, 0, 'h'},
                                   {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = hp_option(c, optarg, &hp, &threads);
        if (r < 0) return 2;
        if (r) continue;
        switch (c) {
        case O_DATA: data = optarg; break;
        case O_DATADIR: data_dir = optarg; break;
        case O_TASK: task = optarg; break;
        case O_SPLIT:
            if (parse_split(optarg, &split)) return 2;
            break;
        case O_CKPT: ckpt = optarg; break;
        case O_JSON: json_out = 1; break;
        case O_LOG: log = 1; break;
        case O_QUIET: quiet = 1; break;
        case 'h': usage_train(stdout); return 0;
        default: usage_train(stderr); return 2;
        }
    }
    if (!data) {
        fprintf(stderr, "donto-sheaf train: --data is required\n");
        usage_train(stderr);
        return 2;
    }
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    if (donto_graph_load(&g, data, data_dir, task, &err)) {
        fprintf(stderr, "donto-sheaf train: %s\n", err.msg);
        return 1;
    }
    json_t *splits = json_array();
    double tm, ts, vm;
    int rc = run_splits(&hp, &g, split, log, quiet || json_out, ckpt, splits, &tm, &ts, &vm, &err);
    if (rc) {
        fprintf(stderr, "donto-sheaf train: %s\n", err.msg);
        json_decref(splits);
        donto_graph_free(&g);
        return 1;
    }
    if (json_out) {
        json_t *o = json_object();
        json_object_set_new(o, "dataset", json_string(g.name));
        json_object_set_new(o, "fingerprint", json_string(g.fingerprint));
        json_object_set_new(o, "hparams", hp_summary(&hp));
        json_object_set_new(o, "splits", splits);
        json_object_set_new(o, "test_acc_mean", json_real(tm));
        json_object_set_new(o, "test_acc_std", json_real(ts));
        json_object_set_new(o, "val_acc_mean", json_real(vm));
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        json_decref(splits);
        printf("%s %s: test_acc %.2f +- %.2f (val %.2f) over %d split(s)\n", g.name,
               hp.family == DONTO_SHEAF_ORTH && hp.orth == DONTO_ORTH_CAYLEY ? "cayley" : donto_sheaf_family_name(hp.family),
               100 * tm, 100 * ts, 100 * vm, split < 0 ? g.nsplits : 1);
    }
    donto_graph_free(&g);
    return 0;
}

/* ------------------------------------------------------------------ */

static void usage_eval(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf eval --checkpoint FILE --data GRAPH [--split I|all] [--json]\n"
            "\n"
            "Accuracy and NLL of a checkpoint on the train/val/test masks of a graph's split(s).\n"
            "  --data-dir DIR, --task NAME, --threads N  as for train\n");
}

static int cmd_eval(int argc, char **argv) {
    const char *data = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL;
    int split = 0, json_out = 0, threads = 0;
    static struct option opts[] = {{"data", 1, 0, O_DATA},     {"data-dir", 1, 0, O_DATADIR}, {"task", 1, 0, O_TASK},
                                   {"split", 1, 0, O_SPLIT},   {"checkpoint", 1, 0, O_CKPT},  {"json", 0, 0, O_JSON},
                                   {"threads", 1, 0, O_THREADS}, {"help", 0, 0, 'h'},         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_DATA: data = optarg; break;
        case O_DATADIR: data_dir = optarg; break;
        case O_TASK: task = optarg; break;
        case O_SPLIT:
            if (parse_split(optarg, &split)) return 2;
            break;
        case O_CKPT: ckpt = optarg; break;
        case O_JSON: json_out = 1; break;
        case O_THREADS: threads = atoi(optarg); break;
        case 'h': usage_eval(stdout); return 0;
        default: usage_eval(stderr); return 2;
        }
    }
    if (!data || !ckpt) {
        fprintf(stderr, "donto-sheaf eval: --checkpoint and --data are required\n");
        return 2;
    }
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    if (donto_graph_load(&g, data, data_dir, task, &err)) {
        fprintf(stderr, "donto-sheaf eval: %s\n", err.msg);
        return 1;
    }
    donto_sheaf_model *m = donto_sheaf_load(ckpt, &g, NULL, &err);
    if (!m) {
        fprintf(stderr, "donto-sheaf eval: %s\n", err.msg);
        donto_graph_free(&g);
        return 1;
    }
    int s0 = split < 0 ? 0 : split, s1 = split < 0 ? g.nsplits : split + 1;
    if (s0 >= g.nsplits) {
        fprintf(stderr, "donto-sheaf eval: split %d not available (graph has %d)\n", split, g.nsplits);
        donto_sheaf_model_free(m), donto_graph_free(&g);
        return 1;
    }
    json_t *arr = json_array();
    for (int s = s0; s < s1; s++) {
        donto_sheaf_metrics mt = {0};
        donto_sheaf_evaluate(m, &g, s, &mt);
        mt.best_epoch = -1;
        if (json_out) json_array_append_new(arr, metrics_json(&mt, s));
        else
            printf("split %d: train_acc %.4f val_acc %.4f test_acc %.4f  train_loss %.4f val_loss %.4f test_loss %.4f\n", s,
                   mt.train_acc, mt.val_acc, mt.test_acc, mt.train_loss, mt.val_loss, mt.test_loss);
    }
    if (json_out) {
        char *s = json_dumps(arr, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
    }
    json_decref(arr);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return 0;
}

/* ------------------------------------------------------------------ */

static void usage_infer(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf infer --checkpoint FILE --in GRAPH [--out FILE] [--format jsonl|tsv]\n"
            "\n"
            "Predicted class and log-probabilities for every node (the same forward as training's eval).\n"
            "  jsonl (default): {\"node\": id, \"pred\": k, \"logp\": [...]} per line (%%.9g floats)\n"
            "  tsv: node<TAB>pred<TAB>logp_0<TAB>...\n"
            "  --data-dir DIR, --task NAME, --threads N  as for train\n");
}

static int cmd_infer(int argc, char **argv) {
    const char *in = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL, *out = NULL, *format = "jsonl";
    int threads = 0;
    static struct option opts[] = {{"in", 1, 0, O_IN},       {"data", 1, 0, O_IN},       {"data-dir", 1, 0, O_DATADIR},
                                   {"task", 1, 0, O_TASK},   {"checkpoint", 1, 0, O_CKPT}, {"out", 1, 0, O_OUT},
                                   {"format", 1, 0, 'f'},    {"threads", 1, 0, O_THREADS}, {"help", 0, 0, 'h'},
                                   {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_IN: in = optarg; break;
        case O_DATADIR: data_dir = optarg; break;
        case O_TASK: task = optarg; break;
        case O_CKPT: ckpt = optarg; break;
        case O_OUT: out = optarg; break;
        case 'f': format = optarg; break;
        case O_THREADS: threads = atoi(optarg); break;
        case 'h': usage_infer(stdout); return 0;
        default: usage_infer(stderr); return 2;
        }
    }
    if (!in || !ckpt) {
        fprintf(stderr, "donto-sheaf infer: --checkpoint and --in are required\n");
        return 2;
    }
    if (strcmp(format, "jsonl") && strcmp(format, "tsv")) {
        fprintf(stderr, "donto-sheaf infer: --format jsonl|tsv\n");
        return 2;
    }
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    if (donto_graph_load(&g, in, data_dir, task, &err)) {
        fprintf(stderr, "donto-sheaf infer: %s\n", err.msg);
        return 1;
    }
    donto_sheaf_model *m = donto_sheaf_load(ckpt, &g, NULL, &err);
    if (!m) {
        fprintf(stderr, "donto-sheaf infer: %s\n", err.msg);
        donto_graph_free(&g);
        return 1;
    }
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "donto-sheaf infer: cannot write %s\n", out);
        donto_sheaf_model_free(m), donto_graph_free(&g);
        return 1;
    }
    const float *logp;
    donto_sheaf_forward(m, &g, 0, 0, NULL, &logp);
    int nt;
    const donto_sheaf_tensor *tt = donto_sheaf_tensors(m, &nt);
    int K = tt[nt - 1].cols; /* the output bias: one entry per class */
    for (int v = 0; v < g.n; v++) {
        const float *lp = logp + (size_t)v * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lp[k] > lp[best]) best = k;
        if (!strcmp(format, "jsonl")) {
            if (g.ids) {
                json_t *js = json_string(g.ids[v]);
                char *s = json_dumps(js, JSON_ENCODE_ANY);
                fprintf(f, "{\"node\":%s,\"pred\":%d,\"logp\":[", s, best);
                free(s), json_decref(js);
            } else {
                fprintf(f, "{\"node\":%d,\"pred\":%d,\"logp\":[", v, best);
            }
            for (int k = 0; k < K; k++) fprintf(f, "%s%.9g", k ? "," : "", lp[k]);
            fprintf(f, "]}\n");
        } else {
            if (g.ids) fprintf(f, "%s\t%d", g.ids[v], best);
            else fprintf(f, "%d\t%d", v, best);
            for (int k = 0; k < K; k++) fprintf(f, "\t%.9g", lp[k]);
            fputc('\n', f);
        }
    }
    int rc = 0;
    if (out && fclose(f)) rc = 1, fprintf(stderr, "donto-sheaf infer: write error on %s\n", out);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return rc;
}

/* ------------------------------------------------------------------ */
/* sweep: grid file = JSON object {"datasets": [...], "<option>": [values...], "random": N?, "seed": S?}
 * option names are the train options without dashes (family, d, layers, hidden, lr, weight-decay, ...). */

static void usage_sweep(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf sweep --grid FILE [--out results.csv] [--json] [--split I|all] [options]\n"
            "\n"
            "Grid or random search. FILE is JSON: {\"datasets\": [\"texas\", ...], \"family\": [\"diag\", \"orth\"],\n"
            "\"d\": [2, 3], \"lr\": [0.01, 0.02], \"add-lp\": [false, true], ..., \"random\": N (optional: N random\n"
            "configurations instead of the full grid)}. Keys are the train options without the dashes; options\n"
            "given on the command line are the defaults for keys the grid does not set. Each configuration runs on\n"
            "all splits (or --split I). Writes one CSV row per (dataset, configuration) to --out (default stdout),\n"
            "and prints the best configuration per dataset (by mean validation accuracy) on stderr.\n"
            "  --json   write JSON (an array of result objects, then {\"best\": ...}) instead of CSV\n"
            "  --data-dir DIR as for train\n"
            "%s",
            HP_HELP);
}

static int apply_grid_value(donto_sheaf_hp *hp, const char *key, json_t *v) {
    static struct option opts[] = {HP_OPTIONS, {0, 0, 0, 0}};
    for (int i = 0; opts[i].name; i++) {
        if (strcmp(opts[i].name, key)) continue;
        int threads = 0;
        if (!opts[i].has_arg) {
            if (json_is_true(v)) return hp_option(opts[i].val, NULL, hp, &threads) < 0 ? -1 : 0;
            return json_is_false(v) ? 0 : -1;
        }
        char buf[64];
        if (json_is_string(v)) snprintf(buf, sizeof buf, "%s", json_string_value(v));
        else if (json_is_number(v)) snprintf(buf, sizeof buf, "%.17g", json_number_value(v));
        else return -1;
        return hp_option(opts[i].val, buf, hp, &threads) < 0 ? -1 : 0;
    }
    return -1;
}

static int cmd_sweep(int argc, char **argv) {
    donto_sheaf_hp base;
    donto_sheaf_hp_default(&base);
    const char *grid = NULL, *data_dir = NULL, *out = NULL;
    int split = -1, json_out = 0, threads = 0;
    static struct option opts[] = {HP_OPTIONS,
                                   {"grid", 1, 0, O_GRID},
                                   {"data-dir", 1, 0, O_DATADIR},
                                   {"out", 1, 0, O_OUT},
                                   {"split", 1, 0, O_SPLIT},
                                   {"json", 0, 0, O_JSON},
                                   {"help", 0, 0, 'h'},
                                   {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = hp_option(c, optarg, &base, &threads);
        if (r < 0) return 2;
        if (r) continue;
        switch (c) {
        case O_GRID: grid = optarg; break;
        case O_DATADIR: data_dir = optarg; break;
        case O_OUT: out = optarg; break;
        case O_SPLIT:
            if (parse_split(optarg, &split)) return 2;
            break;
        case O_JSON: json_out = 1; break;
        case 'h': usage_sweep(stdout); return 0;
        default: usage_sweep(stderr); return 2;
        }
    }
    if (!grid) {
        fprintf(stderr, "donto-sheaf sweep: --grid is required\n");
        return 2;
    }
    set_threads(threads);
    json_error_t je;
    json_t *gj = json_load_file(grid, 0, &je);
    if (!gj || !json_is_object(gj)) {
        fprintf(stderr, "donto-sheaf sweep: %s:%d: %s\n", grid, je.line, gj ? "not a JSON object" : je.text);
        json_decref(gj);
        return 1;
    }
    json_t *datasets = json_object_get(gj, "datasets");
    if (!json_is_array(datasets) || !json_array_size(datasets)) {
        fprintf(stderr, "donto-sheaf sweep: %s: needs \"datasets\": [...]\n", grid);
        json_decref(gj);
        return 1;
    }
    /* axes */
    const char *keys[64];
    json_t *vals[64];
    int nax = 0;
    long total = 1;
    const char *key;
    json_t *val;
    json_object_foreach(gj, key, val) {
        if (!strcmp(key, "datasets") || !strcmp(key, "random") || !strcmp(key, "seed")) continue;
        if (!json_is_array(val)) val = json_pack("[O]", val), json_object_set_new(gj, key, val);
        if (nax == 64 || !json_array_size(val)) continue;
        donto_sheaf_hp probe = base;
        if (apply_grid_value(&probe, key, json_array_get(val, 0))) {
            fprintf(stderr, "donto-sheaf sweep: %s: unknown option or bad value for \"%s\"\n", grid, key);
            json_decref(gj);
            return 1;
        }
        keys[nax] = key, vals[nax] = val, nax++;
        total *= (long)json_array_size(val);
    }
    long nrandom = (long)json_integer_value(json_object_get(gj, "random"));
    uint64_t rseed = (uint64_t)json_integer_value(json_object_get(gj, "seed"));
    long nconf = nrandom > 0 ? nrandom : total;
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        fprintf(stderr, "donto-sheaf sweep: cannot write %s\n", out);
        json_decref(gj);
        return 1;
    }
    if (!json_out) {
        fprintf(f, "dataset,config");
        for (int a = 0; a < nax; a++) fprintf(f, ",%s", keys[a]);
        fprintf(f, ",splits,val_acc_mean,test_acc_mean,test_acc_std\n");
    }
    json_t *results = json_array(), *best = json_object();
    int rc = 0;
    for (size_t di = 0; di < json_array_size(datasets) && !rc; di++) {
        const char *ds = json_string_value(json_array_get(datasets, di));
        donto_err err = {0};
        donto_graph g;
        if (!ds || donto_graph_load(&g, ds, data_dir, NULL, &err)) {
            fprintf(stderr, "donto-sheaf sweep: %s\n", ds ? err.msg : "datasets must be strings");
            rc = 1;
            break;
        }
        double best_val = -1;
        for (long ci = 0; ci < nconf; ci++) {
            donto_sheaf_hp hp = base;
            json_t *conf = json_object();
            long idx = ci;
            for (int a = 0; a < nax; a++) {
                size_t na = json_array_size(vals[a]), pick;
                if (nrandom > 0) pick = (size_t)(((uint64_t)(ci + 1) * 0x9E3779B97F4A7C15ULL ^ (rseed + a) * 0xBF58476D1CE4E5B9ULL) % na);
                else pick = (size_t)(idx % (long)na), idx /= (long)na;
                json_t *v = json_array_get(vals[a], pick);
                apply_grid_value(&hp, keys[a], v);
                json_object_set(conf, keys[a], v);
            }
            double tm, ts, vm;
            json_t *sp = json_array();
            if (run_splits(&hp, &g, split, 0, 1, NULL, sp, &tm, &ts, &vm, &err)) {
                fprintf(stderr, "donto-sheaf sweep: %s: config %ld: %s\n", ds, ci, err.msg);
                json_decref(sp), json_decref(conf);
                continue;
            }
            int nsp = (int)json_array_size(sp);
            json_t *r = json_object();
            json_object_set_new(r, "dataset", json_string(ds));
            json_object_set_new(r, "config", json_integer(ci));
            json_object_set(r, "params", conf);
            json_object_set_new(r, "splits", json_integer(nsp));
            json_object_set_new(r, "val_acc_mean", json_real(vm));
            json_object_set_new(r, "test_acc_mean", json_real(tm));
            json_object_set_new(r, "test_acc_std", json_real(ts));
            json_decref(sp);
            if (!json_out) {
                fprintf(f, "%s,%ld", ds, ci);
                for (int a = 0; a < nax; a++) {
                    char *s = json_dumps(json_object_get(conf, keys[a]), JSON_ENCODE_ANY);
                    fprintf(f, ",%s", s);
                    free(s);
                }
                fprintf(f, ",%d,%.6f,%.6f,%.6f\n", nsp, vm, tm, ts);
                fflush(f);
            }
            fprintf(stderr, "sweep %s config %ld/%ld: val %.4f test %.4f +- %.4f\n", ds, ci + 1, nconf, vm, tm, ts);
            if (vm > best_val) {
                best_val = vm;
                json_object_set(best, ds, r);
            }
            json_array_append_new(results, r);
            json_decref(conf);
        }
        json_t *b = json_object_get(best, ds);
        if (b) {
            char *s = json_dumps(b, JSON_COMPACT | JSON_REAL_PRECISION(6));
            fprintf(stderr, "best %s: %s\n", ds, s);
            free(s);
        }
        donto_graph_free(&g);
    }
    if (json_out) {
        json_t *o = json_object();
        json_object_set(o, "results", results);
        json_object_set(o, "best", best);
        char *s = json_dumps(o, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(o);
    }
    if (out) fclose(f);
    json_decref(results), json_decref(best), json_decref(gj);
    return rc;
}

int donto_sheaf_main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage_main(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "infer")) return cmd_infer(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("donto-sheaf %s\n", DONTO_VERSION);
        return 0;
    }
    fprintf(stderr, "donto-sheaf: unknown command '%s'\n", cmd);
    usage_main(stderr);
    return 2;
}
