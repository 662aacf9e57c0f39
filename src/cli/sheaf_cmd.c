/*
 * donto-sheaf: train | eval | infer | sweep for Neural Sheaf Diffusion models
 * (logic in src/sheaf/, see docs/sheaf.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/opt.h"
#include "donto/sheaf.h"

void openblas_set_num_threads(int);

static void usage_main(FILE *f) {
    fprintf(f,
            "usage: donto-sheaf <command> [options]\n"
            "\n"
            "Neural Sheaf Diffusion (Diag, O(d), General), a GCN and an MLP baseline for node classification\n"
            "and for edge tasks (labelled pairs of nodes, export files version 2: docs/sheaf-export.md).\n"
            "\n"
            "commands:\n"
            "  train    train on one split or all splits, optionally save a checkpoint\n"
            "  eval     evaluate a checkpoint on a graph's splits\n"
            "  infer    predictions and log-probabilities of a checkpoint for a graph\n"
            "  sweep    grid or random search over hyperparameters, across splits\n"
            "  export   the substrate as a leakage-free graph (tasks arg_link, identity, claim_score)\n"
            "  gen-substrate  plant a donto-shaped substrate with known structure (tests, benchmarks)\n"
            "  stamp-history  give a substrate loaded at once (WordNet) a simulated history for export\n"
            "  register add a checkpoint to the model registry (parity-gated against the PyTorch reference)\n"
            "  models   the model registry: list, show, activate, retire\n"
            "  score    the active model over what changed in the substrate, scores written back\n"
            "  version  print the version\n"
            "\n"
            "`donto-sheaf <command> --help` describes each command.\n");
}

/* The model and training options, shared by train and sweep (and sweep's grid
 * keys, which are their names): one table fragment that writes into *hp. */
static int parse_family(const char *v, void *dest, donto_err *err) {
    donto_sheaf_hp *hp = dest;
    if (donto_sheaf_family_parse(v, &hp->family, &hp->orth))
        return donto_seterr(err, "unknown family '%s' (diag, orth, cayley, general, gcn, mlp)", v);
    return 0;
}

static const char *const ORTHS[] = {"householder", "cayley", NULL};
static const int ORTH_VALUES[] = {DONTO_ORTH_HOUSEHOLDER, DONTO_ORTH_CAYLEY};
static const char *const STOPS[] = {"loss", "acc", "metric", "auto", NULL};

enum { HP_NOPT = 23 }; /* 22 options and the end */

static void hp_opts(donto_opt *t, donto_sheaf_hp *hp, int *threads) {
    const donto_opt o[] = {
        {DONTO_OPT_CALLBACK, "family", 0, hp, .parse = parse_family, .metavar = "F",
         .help = "diag | orth (O(d), Householder) | cayley (O(d), Cayley) | general | gcn |\n"
                 "mlp (node features only, no graph: the baseline) (default diag)"},
        {DONTO_OPT_CHOICE, "orth", 0, &hp->orth, .choices = ORTHS, .values = ORTH_VALUES, .metavar = "M",
         .help = "householder | cayley (for --family orth)"},
        {DONTO_OPT_INT, "d", 0, &hp->d, .min = 1, .max = 64, .metavar = "N", .help = "stalk dimension (default 2)"},
        {DONTO_OPT_INT, "layers", 0, &hp->layers, .min = 1, .max = 64, .metavar = "N",
         .help = "diffusion layers / GCN layers (default 2)"},
        {DONTO_OPT_INT, "hidden", 0, &hp->hidden, .min = 1, .max = 1 << 20, .metavar = "N",
         .help = "channels per stalk dim / GCN width (default 20)"},
        {DONTO_OPT_FLAG, "add-lp", 0, &hp->add_lp,
         .help = "add a fixed stalk dim as the NSD reference code does: D + A (signless)\n(see docs/sheaf.md)"},
        {DONTO_OPT_FLAG, "add-hp", 0, &hp->add_hp, .help = "the same with D - A"},
        {DONTO_OPT_FLAG_OFF, "no-left-weights", 0, &hp->left_weights, .help = "no left (stalk) weights"},
        {DONTO_OPT_FLAG_OFF, "no-right-weights", 0, &hp->right_weights, .help = "no right (channel) weights"},
        {DONTO_OPT_FLAG_OFF, "no-edge-weights", 0, &hp->edge_weights, .help = "no learned edge weights (orth only)"},
        {DONTO_OPT_FLAG, "second-linear", 0, &hp->second_linear, .help = "a second input linear layer (H x H) after the first"},
        {DONTO_OPT_DOUBLE, "gen-eps", 0, &hp->gen_eps, .fmin = -1, .fmin_open = 1, .fmax = 1e6, .metavar = "X",
         .help = "General: (D + (1+X) I)^-1/2, X > -1 (default 0)"},
        {DONTO_OPT_FLOAT, "lr", 0, &hp->lr, .fmin = 0, .fmin_open = 1, .fmax = 1e3, .metavar = "X",
         .help = "Adam learning rate, > 0 (default 0.01)"},
        {DONTO_OPT_FLOAT, "weight-decay", 0, &hp->weight_decay, .fmin = 0, .fmax = 1e3, .metavar = "X",
         .help = "L2 decay (default 5e-4)"},
        {DONTO_OPT_FLOAT, "sheaf-decay", 0, &hp->sheaf_decay, .fmin = 0, .fmax = 1e3, .metavar = "X",
         .help = "L2 decay of the sheaf learners (default = weight decay)"},
        {DONTO_OPT_FLOAT, "input-dropout", 0, &hp->input_dropout, .fmin = 0, .fmax = 1, .fmax_open = 1, .metavar = "X",
         .help = "dropout of the input features, in [0, 1) (default 0)"},
        {DONTO_OPT_FLOAT, "dropout", 0, &hp->dropout, .fmin = 0, .fmax = 1, .fmax_open = 1, .metavar = "X",
         .help = "dropout, in [0, 1) (default 0)"},
        {DONTO_OPT_INT, "epochs", 0, &hp->epochs, .min = 1, .max = 100000000, .metavar = "N",
         .help = "at most N epochs, N >= 1 (default 1500)"},
        {DONTO_OPT_INT, "patience", 0, &hp->patience, .min = 1, .max = 100000000, .metavar = "N",
         .help = "stop after N epochs without a better validation score (default 200)"},
        {DONTO_OPT_CHOICE, "stop", 0, &hp->stop_acc, .choices = STOPS, .metavar = "loss|acc|metric|auto",
         .help = "model selection on validation loss, accuracy, or the task's metric (macro_f1,\n"
                 "roc_auc, accuracy: the export's \"metric\"); auto (default): loss for node tasks,\n"
                 "the metric for edge tasks"},
        /* uint64_t written as its corresponding signed type (C17 6.5p7), never negative */
        {DONTO_OPT_INT64, "seed", 0, (int64_t *)&hp->seed, .min = 0, .max = INT64_MAX, .metavar = "N",
         .help = "(default 43; split i uses seed + i)"},
        {DONTO_OPT_INT, "threads", 0, threads, .min = 1, .max = 1024, .metavar = "N",
         .help = "OpenMP/BLAS threads (default: all CPUs)"},
        {0}};
    _Static_assert(sizeof o / sizeof o[0] == HP_NOPT, "HP_NOPT");
    memcpy(t, o, sizeof o);
}

#define THREADS_OPT(p)                                                                                            \
    {                                                                                                             \
        DONTO_OPT_INT, "threads", 0, (p), .min = 1, .max = 1024, .metavar = "N",                                  \
        .help = "OpenMP/BLAS threads (default: all CPUs)"                                                         \
    }
#define SPLIT_OPT(p, dflt)                                                                                        \
    {                                                                                                             \
        DONTO_OPT_INT, "split", 0, (p), .min = 0, .max = 1000000, .word = "all", .word_value = -1,                \
        .metavar = "I|all", .help = "the split to run, or all (default " dflt ")"                                 \
    }

#define SEEDS_OPT(p)                                                                                              \
    {                                                                                                             \
        DONTO_OPT_INT, "seeds", 0, (p), .min = 1, .max = 10000, .metavar = "N",                                   \
        .help = "runs per split with seeds seed + split + 1000003 j, j < N; mean +- std over\n"                  \
                "all runs (default 1)"                                                                            \
    }

/* How graphs are read (donto_graph_opts): the options of every command that loads one. */
_Static_assert(DONTO_SPLITS_RANDOM == 1, "--random-splits is a flag: it sets opts.splits to 1");
static int parse_features(const char *v, void *dest, donto_err *err) {
    return donto_graph_features_parse(v, dest, err);
}
#define GRAPH_LOAD_OPTS(go)                                                                                       \
    {DONTO_OPT_FLAG, "random-splits", 0, &(go)->splits,                                                           \
     .help = "a graph without splits: 10 random 60/20/20 splits of its labelled nodes (seed 0)\n"                 \
             "instead of an error (not geom-gcn's protocol; a graph with splits keeps them)"},                    \
    {                                                                                                             \
        DONTO_OPT_CALLBACK, "features", 0, (go), .parse = parse_features, .metavar = "dense|indices[:DIM]",      \
        .help = "how out1_node_feature_label.txt lists features: values, or the indices of the\n"                 \
                "nonzero ones out of DIM (default: film/actor 932, else the largest + 1);\n"                      \
                "default: told from the rows, an error when it cannot be"                                         \
    }

/* How a graph is named: the end of --help of every command that loads one. */
#define GRAPH_HELP                                                                                                \
    "GRAPH is one of\n"                                                                                            \
    "  NAME       a dataset directory NAME under --data-dir, $DONTO_GEOM_GCN_DIR, or the repository's\n"          \
    "             data/geom-gcn (which carries texas, wisconsin, cornell, chameleon)\n"                           \
    "  DIR/NAME   a dataset directory anywhere, laid out as geom-gcn's; it holds either\n"                        \
    "               out1_graph_edges.txt (u<TAB>v lines) + out1_node_feature_label.txt\n"                         \
    "               (id<TAB>f1,f2,...<TAB>label lines), the splits in DIR/splits/NAME_split_0.6_0.2_<i>.npz\n"    \
    "               (i = 0, 1, ...; arrays train_mask, val_mask, test_mask), or\n"                                \
    "               NAME.npz with node_features|x|features [N,F], node_labels|y|labels [N],\n"                    \
    "               edges [E,2] | edge_index [2,E], train_masks|train_mask, val_masks|val_mask,\n"                \
    "               test_masks|test_mask ([S,N], [N,S] or [N]): used on its own, or for what the\n"               \
    "               text files and the split files do not give\n"                                                 \
    "  FILE.npz   such an .npz on its own\n"                                                                     \
    "  FILE       an export file (docs/sheaf-export.md)\n"                                                       \
    "A graph without splits is an error unless --random-splits, which draws 10 random 60/20/20 splits of\n"      \
    "the labelled nodes (seed 0): not geom-gcn's protocol (its fixed splits are 48/32/20), so the run says\n"    \
    "so. Feature lines hold values or the indices of the nonzero features (geom-gcn's film: 932 0/1\n"          \
    "features); which is told from the rows or the name, and --features says it where it cannot be.\n"

/* One line on stderr saying what was loaded (always when the splits were drawn at random). */
static void say_graph(const char *prog, const donto_graph *g, int quiet) {
    if (quiet && !g->splits_random) return;
    fprintf(stderr, "%s: %s: %d nodes, %d edges; features: %s; splits: %s\n", prog, g->name, g->n, g->ne,
            g->features_from, g->splits_from);
}

static void set_threads(int threads) {
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
}

typedef struct {
    int log, split;
} log_ctx;

static void epoch_log(void *vctx, int epoch, const donto_sheaf_metrics *now, const donto_sheaf_metrics *best) {
    log_ctx *c = vctx;
    fprintf(stderr,
            "split %d epoch %4d  train %.4f/%.4f  val %.4f/%.4f  test %.4f/%.4f  %s val %.4f test %.4f  best@%d val %.4f "
            "test %.4f\n",
            c->split, epoch, now->train_loss, now->train_acc, now->val_loss, now->val_acc, now->test_loss,
            now->test_acc, donto_metric_name(now->metric), now->val_metric, now->test_metric, best->best_epoch,
            best->val_acc, best->test_acc);
}

/* a JSON number, or null for NAN (ROC-AUC of more than two classes) */
static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *metrics_json(const donto_sheaf_metrics *m, int split) {
    json_t *o = json_object();
    json_object_set_new(o, "split", json_integer(split));
    json_object_set_new(o, "metric", json_string(donto_metric_name(m->metric)));
    json_object_set_new(o, "val_metric", jreal(m->val_metric));
    json_object_set_new(o, "test_metric", jreal(m->test_metric));
    json_object_set_new(o, "train_macro_f1", jreal(m->train_f1));
    json_object_set_new(o, "val_macro_f1", jreal(m->val_f1));
    json_object_set_new(o, "test_macro_f1", jreal(m->test_f1));
    json_object_set_new(o, "val_roc_auc", jreal(m->val_auc));
    json_object_set_new(o, "test_roc_auc", jreal(m->test_auc));
    json_object_set_new(o, "val_pr_auc", jreal(m->val_ap));
    json_object_set_new(o, "test_pr_auc", jreal(m->test_ap));
    json_object_set_new(o, "train_acc", jreal(m->train_acc));
    json_object_set_new(o, "val_acc", jreal(m->val_acc));
    json_object_set_new(o, "test_acc", jreal(m->test_acc));
    json_object_set_new(o, "train_loss", jreal(m->train_loss));
    json_object_set_new(o, "val_loss", jreal(m->val_loss));
    json_object_set_new(o, "test_loss", jreal(m->test_loss));
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

/* Means and (population) standard deviations over the runs of one configuration. */
typedef struct {
    int runs, metric, edge;
    double test_acc, test_acc_sd, val_acc;
    double test_f1, test_f1_sd;
    double test_metric, test_metric_sd, val_metric; /* the task's metric (donto_graph_metric) */
} run_summary;

/* Train over splits x seeds (split s, seed j: hp.seed + s + 1000003 j; j = 0 is the single-seed
 * protocol); fills per-run metrics. Saves the model of the best validation score (accuracy for
 * node tasks, the task's metric for edge tasks) when ckpt. */
static int run_splits(const donto_sheaf_hp *hp, const donto_graph *g, int split, int seeds, int log, int quiet,
                      const char *ckpt, json_t *splits_out, run_summary *sum, donto_err *err) {
    int s0 = split < 0 ? 0 : split, s1 = split < 0 ? g->nsplits : split + 1;
    if (s0 >= g->nsplits) return donto_seterr(err, "split %d not available (graph has %d)", split, g->nsplits);
    if (seeds < 1) seeds = 1;
    int nr = (s1 - s0) * seeds, r = 0, edge = g->task_kind == DONTO_TASK_EDGE;
    double *v = calloc((size_t)nr * 6, sizeof(double));
    double *tacc = v, *vacc = v + nr, *tf1 = v + 2 * nr, *tmet = v + 3 * nr, *vmet = v + 4 * nr;
    double best_val = -INFINITY;
    for (int s = s0; s < s1; s++)
        for (int j = 0; j < seeds; j++, r++) {
            donto_sheaf_hp h = *hp;
            h.seed = hp->seed + (uint64_t)s + (uint64_t)j * 1000003u;
            donto_sheaf_model *m = donto_sheaf_model_new(&h, g, err);
            if (!m) return free(v), -1;
            donto_sheaf_metrics best;
            log_ctx lc = {log, s};
            if (donto_sheaf_train(m, g, s, &best, log ? epoch_log : NULL, &lc, err)) {
                donto_sheaf_model_free(m);
                free(v);
                return -1;
            }
            tacc[r] = best.test_acc, vacc[r] = best.val_acc, tf1[r] = best.test_f1;
            tmet[r] = best.test_metric, vmet[r] = best.val_metric;
            sum->metric = best.metric;
            if (!quiet) {
                fprintf(stderr, "split %d", s);
                if (seeds > 1) fprintf(stderr, " seed %llu", (unsigned long long)h.seed);
                fprintf(stderr, ": test_acc %.4f val_acc %.4f val_loss %.4f test_macro_f1 %.4f", best.test_acc,
                        best.val_acc, best.val_loss, best.test_f1);
                if (isfinite(best.test_auc))
                    fprintf(stderr, " test_roc_auc %.4f test_pr_auc %.4f", best.test_auc, best.test_ap);
                fprintf(stderr, " best_epoch %d epochs %d (%.1fs)\n", best.best_epoch, best.epochs_run, best.seconds);
            }
            if (splits_out) {
                json_t *js = metrics_json(&best, s);
                json_object_set_new(js, "seed", json_integer((json_int_t)h.seed));
                json_array_append_new(splits_out, js);
            }
            double sel = edge ? best.val_metric : best.val_acc;
            if (ckpt && (sel > best_val || r == 0)) {
                best_val = sel;
                if (donto_sheaf_save(m, g, &best, ckpt, err)) {
                    donto_sheaf_model_free(m);
                    free(v);
                    return -1;
                }
            }
            donto_sheaf_model_free(m);
        }
    double sd;
    sum->runs = nr, sum->edge = edge;
    mean_std(tacc, nr, &sum->test_acc, &sum->test_acc_sd);
    mean_std(vacc, nr, &sum->val_acc, &sd);
    mean_std(tf1, nr, &sum->test_f1, &sum->test_f1_sd);
    mean_std(tmet, nr, &sum->test_metric, &sum->test_metric_sd);
    mean_std(vmet, nr, &sum->val_metric, &sd);
    free(v);
    return 0;
}

/* the summary's fields into a JSON object */
static void summary_json(json_t *o, const run_summary *s) {
    json_object_set_new(o, "runs", json_integer(s->runs));
    json_object_set_new(o, "test_acc_mean", jreal(s->test_acc));
    json_object_set_new(o, "test_acc_std", jreal(s->test_acc_sd));
    json_object_set_new(o, "val_acc_mean", jreal(s->val_acc));
    json_object_set_new(o, "test_macro_f1_mean", jreal(s->test_f1));
    json_object_set_new(o, "test_macro_f1_std", jreal(s->test_f1_sd));
    json_object_set_new(o, "metric", json_string(donto_metric_name(s->metric)));
    json_object_set_new(o, "val_metric_mean", jreal(s->val_metric));
    json_object_set_new(o, "test_metric_mean", jreal(s->test_metric));
    json_object_set_new(o, "test_metric_std", jreal(s->test_metric_sd));
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
    json_object_set_new(o, "stop", json_string(STOPS[hp->stop_acc >= 0 && hp->stop_acc <= 3 ? hp->stop_acc : 3]));
    return o;
}

/* Can the checkpoint be written? Asked before training, so that a bad path costs no training
 * time: an existing file is opened for writing without truncating it, a new one is created and
 * removed again. 0, or -1 with the reason in why. */
static int check_writable(const char *path, char *why, size_t cap) {
    struct stat st;
    int fd;
    if (!stat(path, &st)) {
        if (S_ISDIR(st.st_mode)) return snprintf(why, cap, "it is a directory"), -1;
        fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK);
        if (fd < 0) return snprintf(why, cap, "%s", strerror(errno)), -1;
        close(fd);
        return 0;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return snprintf(why, cap, "%s", strerror(errno)), -1;
    close(fd);
    unlink(path);
    return 0;
}

/* ------------------------------------------------------------------ */

static int cmd_train(int argc, char **argv) {
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    const char *data = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL;
    int split = 0, json_out = 0, log = 0, quiet = 0, threads = 0, seeds = 1;
    donto_graph_opts go = {0};
    donto_opt hpt[HP_NOPT];
    hp_opts(hpt, &hp, &threads);
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "data", 0, &data, .metavar = "GRAPH",
         .help = "geom-gcn name (texas, wisconsin, cornell, chameleon), dataset directory,\n"
                 ".npz, or export file (below)"},
        {DONTO_OPT_STRING, "data-dir", 0, &data_dir, .metavar = "DIR",
         .help = "where geom-gcn datasets live (default $DONTO_GEOM_GCN_DIR, else the repository's\n"
                 "data/geom-gcn: beside the executable's directory, or the source tree built from)"},
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "NAME", .help = "task of an export file (default: the first)"},
        GRAPH_LOAD_OPTS(&go),
        SPLIT_OPT(&split, "0"),
        SEEDS_OPT(&seeds),
        {DONTO_OPT_STRING, "checkpoint", 0, &ckpt, .metavar = "FILE",
         .help = "save the model (best validation accuracy over the runs; edge tasks: the task's metric)"},
        {DONTO_OPT_FLAG, "log", 0, &log, .help = "one line per epoch on stderr"},
        {DONTO_OPT_FLAG, "json", 0, &json_out, .help = "one JSON object on stdout"},
        {DONTO_OPT_FLAG, "quiet", 0, &quiet, .help = "no per-split lines"},
        {DONTO_OPT_INCLUDE, .dest = hpt, .help = "model and training options:"},
        {0}};
    const donto_opt_cmd cmd = {
        "donto-sheaf train",
        "usage: donto-sheaf train --data GRAPH [options]\n"
        "\n"
        "Train with the reference protocol: full batch, Adam, evaluation every epoch, model selection\n"
        "and early stopping on validation; prints per-split test accuracy and mean +- std. An export\n"
        "file's edge task (--task arg_link) trains the edge decoder over the node representations\n"
        "(docs/sheaf.md \"Edge tasks\") with class-weighted NLL, and reports macro-F1 (and ROC-AUC,\n"
        "PR-AUC for two classes) besides accuracy, selected on the task's metric.\n"
        "\n",
        opts, "\n" GRAPH_HELP};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!data) return donto_opt_usage_error(&cmd, "--data is required");
    char why[256];
    if (ckpt && check_writable(ckpt, why, sizeof why)) {
        fprintf(stderr, "donto-sheaf train: cannot write the checkpoint %s: %s (checked before training)\n", ckpt, why);
        return 1;
    }
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    go.data_dir = data_dir, go.task = task;
    if (donto_graph_load_opts(&g, data, &go, &err)) {
        fprintf(stderr, "donto-sheaf train: %s\n", err.msg);
        return 1;
    }
    say_graph("donto-sheaf train", &g, quiet || json_out);
    json_t *splits = json_array();
    run_summary sum = {0};
    int rc = run_splits(&hp, &g, split, seeds, log, quiet || json_out, ckpt, splits, &sum, &err);
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
        json_object_set_new(o, "features", json_string(g.features_from));
        json_object_set_new(o, "splits_source", json_string(g.splits_from));
        json_object_set_new(o, "random_splits", json_boolean(g.splits_random));
        json_object_set_new(o, "hparams", hp_summary(&hp));
        json_object_set_new(o, "task", json_string(g.task_kind == DONTO_TASK_EDGE ? "edge" : "node"));
        json_object_set_new(o, "splits", splits);
        summary_json(o, &sum);
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        json_decref(splits);
        const char *fam =
            hp.family == DONTO_SHEAF_ORTH && hp.orth == DONTO_ORTH_CAYLEY ? "cayley" : donto_sheaf_family_name(hp.family);
        printf("%s %s: test_acc %.2f +- %.2f (val %.2f) test_macro_f1 %.2f +- %.2f", g.name, fam, 100 * sum.test_acc,
               100 * sum.test_acc_sd, 100 * sum.val_acc, 100 * sum.test_f1, 100 * sum.test_f1_sd);
        if (sum.edge && sum.metric != DONTO_METRIC_MACRO_F1 && sum.metric != DONTO_METRIC_ACCURACY)
            printf(" test_%s %.2f +- %.2f", donto_metric_name(sum.metric), 100 * sum.test_metric, 100 * sum.test_metric_sd);
        printf(" over %d split(s)", split < 0 ? g.nsplits : 1);
        if (seeds > 1) printf(" x %d seeds", seeds);
        if (g.splits_random) printf(" (random 60/20/20 splits, --random-splits)");
        printf("\n");
    }
    donto_graph_free(&g);
    return 0;
}

/* ------------------------------------------------------------------ */

/* The graph check of eval and infer: 0 to go on (the checkpoint's graph, or another one with
 * --allow-other-graph, said on stderr), 1 to stop (said on stderr). */
static int graph_gate(const char *prog, const char *ckpt, const donto_sheaf_model *m, const donto_graph *g,
                      int allow_other) {
    donto_err err = {0};
    if (!donto_sheaf_check_graph(m, g, &err)) return 0;
    if (!allow_other) {
        fprintf(stderr, "%s: %s: %s; give --allow-other-graph to run it on this graph anyway\n", prog, ckpt, err.msg);
        return 1;
    }
    fprintf(stderr, "%s: warning: %s was not trained on this graph (--allow-other-graph): %s\n", prog, ckpt, err.msg);
    return 0;
}

#define ALLOW_OTHER_GRAPH_OPT(p)                                                                                  \
    {                                                                                                             \
        DONTO_OPT_FLAG, "allow-other-graph", 0, (p),                                                              \
        .help = "run the checkpoint on a graph other than the one it was trained on\n"                           \
                "(by default a different graph fingerprint is an error)"                                          \
    }

static int cmd_eval(int argc, char **argv) {
    const char *data = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL;
    int split = -2, json_out = 0, threads = 0, other_graph = 0, other_splits = 0; /* split -2: the checkpoint's */
    donto_graph_opts go = {0};
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "checkpoint", 0, &ckpt, .metavar = "FILE", .help = "the model (required)"},
        {DONTO_OPT_STRING, "data", 0, &data, .metavar = "GRAPH", .help = "the graph, as for train (required)"},
        {DONTO_OPT_STRING, "data-dir", 0, &data_dir, .metavar = "DIR", .help = "as for train"},
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "NAME", .help = "as for train"},
        GRAPH_LOAD_OPTS(&go),
        SPLIT_OPT(&split, "the split the checkpoint was trained on"),
        {DONTO_OPT_FLAG, "allow-other-splits", 0, &other_splits,
         .help = "evaluate splits other than the one trained on, marked not held out\n"
                 "(by default refused: their test nodes may be among its training nodes)"},
        ALLOW_OTHER_GRAPH_OPT(&other_graph),
        {DONTO_OPT_FLAG, "json", 0, &json_out,
         .help = "a JSON array of per-split metrics (\"held_out\": false for a split not trained on)"},
        THREADS_OPT(&threads),
        {0}};
    const donto_opt_cmd cmd = {
        "donto-sheaf eval",
        "usage: donto-sheaf eval --checkpoint FILE --data GRAPH [--split I|all] [--json]\n"
        "\n"
        "Accuracy, NLL and macro-F1 (ROC-AUC and PR-AUC for two classes) of a checkpoint on the\n"
        "train/val/test masks of a graph's split(s) (an edge task's: its pairs).\n"
        "\n",
        opts,
        "\n"
        "A checkpoint records the graph (fingerprint) and the split it was trained on. Another graph is an\n"
        "error unless --allow-other-graph. Only the trained split's test accuracy is held out: the test\n"
        "nodes of the other splits overlap its training and validation nodes, so --split I (another I) and\n"
        "--split all are refused unless --allow-other-splits, and their results are then marked not held\n"
        "out (so are every split's for a checkpoint that records no training split).\n"
        "\n" GRAPH_HELP};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!data || !ckpt) return donto_opt_usage_error(&cmd, "--checkpoint and --data are required");
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    go.data_dir = data_dir, go.task = task;
    if (donto_graph_load_opts(&g, data, &go, &err)) {
        fprintf(stderr, "donto-sheaf eval: %s\n", err.msg);
        return 1;
    }
    say_graph("donto-sheaf eval", &g, 1);
    donto_sheaf_model *m = donto_sheaf_load(ckpt, &g, NULL, &err);
    if (!m) {
        fprintf(stderr, "donto-sheaf eval: %s\n", err.msg);
        donto_graph_free(&g);
        return 1;
    }
    if (graph_gate("donto-sheaf eval", ckpt, m, &g, other_graph)) {
        donto_sheaf_model_free(m), donto_graph_free(&g);
        return 1;
    }
    const donto_sheaf_origin *o = donto_sheaf_model_origin(m);
    int same_graph = !donto_sheaf_check_graph(m, &g, NULL);
    if (split == -2) split = same_graph && o->split >= 0 ? o->split : 0;
    int s0 = split < 0 ? 0 : split, s1 = split < 0 ? g.nsplits : split + 1;
    if (s0 >= g.nsplits) {
        fprintf(stderr, "donto-sheaf eval: split %d not available (graph has %d)\n", split, g.nsplits);
        donto_sheaf_model_free(m), donto_graph_free(&g);
        return 1;
    }
    for (int s = s0; s < s1 && same_graph && !other_splits; s++) {
        if (donto_sheaf_held_out(m, &g, s)) continue;
        if (o->split < 0)
            fprintf(stderr,
                    "donto-sheaf eval: %s records no training split (an older checkpoint), so no split's test "
                    "accuracy can be told held out; give --allow-other-splits to evaluate anyway\n", ckpt);
        else if (s == o->split)
            fprintf(stderr,
                    "donto-sheaf eval: %s was trained on split %d of %s, but this graph's split %d has other masks; "
                    "give --allow-other-splits to evaluate anyway\n", ckpt, o->split, o->graph, s);
        else
            fprintf(stderr,
                    "donto-sheaf eval: %s was trained on split %d of %s: split %d's test nodes may be among its "
                    "training and validation nodes, so its test accuracy is not held out; evaluate split %d (the "
                    "default), or give --allow-other-splits to evaluate %s marked not held out\n",
                    ckpt, o->split, o->graph, s, o->split, split < 0 ? "all splits" : "it");
        donto_sheaf_model_free(m), donto_graph_free(&g);
        return 1;
    }
    json_t *arr = json_array();
    for (int s = s0; s < s1; s++) {
        donto_sheaf_metrics mt = {0};
        donto_sheaf_evaluate(m, &g, s, &mt);
        mt.best_epoch = -1;
        int held = donto_sheaf_held_out(m, &g, s);
        const char *why = held ? "" : !same_graph ? "  (another graph)"
                                  : o->split < 0  ? "  (not held out: training split unknown)"
                                  : s == o->split ? "  (not held out: masks differ from training's)"
                                                  : "  (not held out: trained on another split)";
        if (json_out) {
            json_t *j = metrics_json(&mt, s);
            json_object_set_new(j, "held_out", json_boolean(held));
            json_object_set_new(j, "same_graph", json_boolean(same_graph));
            json_array_append_new(arr, j);
        } else {
            printf("split %d: train_acc %.4f val_acc %.4f test_acc %.4f  train_loss %.4f val_loss %.4f test_loss %.4f"
                   "  val_macro_f1 %.4f test_macro_f1 %.4f",
                   s, mt.train_acc, mt.val_acc, mt.test_acc, mt.train_loss, mt.val_loss, mt.test_loss, mt.val_f1,
                   mt.test_f1);
            if (isfinite(mt.test_auc))
                printf("  val_roc_auc %.4f test_roc_auc %.4f test_pr_auc %.4f", mt.val_auc, mt.test_auc, mt.test_ap);
            printf("%s\n", why);
        }
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

static const char *const INFER_FORMATS[] = {"jsonl", "tsv", NULL};
enum { INFER_JSONL, INFER_TSV };
static const char *const PAIR_SETS[] = {"all", "train", "val", "test", NULL};

/* a node's id: the export's string (JSON-quoted for jsonl), or its index */
static void put_node(FILE *f, const donto_graph *g, int v, int jsonl) {
    if (!g->ids) fprintf(f, "%d", v);
    else if (!jsonl) fputs(g->ids[v], f);
    else {
        json_t *js = json_string(g->ids[v]);
        char *s = json_dumps(js, JSON_ENCODE_ANY);
        fputs(s, f);
        free(s), json_decref(js);
    }
}

/* Edge task: the pairs of a set of split `split` (all pairs for set 0), one line each. */
static void infer_pairs(FILE *f, const donto_graph *g, const float *logp, int K, int split, int set, int format) {
    const uint8_t *masks[3] = {g->ptrain, g->pval, g->ptest};
    static const char *const names[3] = {"train", "val", "test"};
    for (int p = 0; p < g->npairs; p++) {
        int in = -1;
        for (int k = 0; k < 3; k++)
            if (masks[k] && split >= 0 && split < g->nsplits && masks[k][(size_t)split * g->npairs + p]) in = k;
        if (set > 0 && in != set - 1) continue;
        const float *lp = logp + (size_t)p * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lp[k] > lp[best]) best = k;
        if (format == INFER_JSONL) {
            fprintf(f, "{\"pair\":%d,\"src\":", p);
            put_node(f, g, g->pu[p], 1);
            fprintf(f, ",\"dst\":");
            put_node(f, g, g->pv[p], 1);
            fprintf(f, ",\"label\":%d,\"set\":\"%s\",\"pred\":%d,\"logp\":[", g->pc[p], in >= 0 ? names[in] : "none", best);
            for (int k = 0; k < K; k++) fprintf(f, "%s%.9g", k ? "," : "", lp[k]);
            fprintf(f, "]}\n");
        } else {
            fprintf(f, "%d\t", p);
            put_node(f, g, g->pu[p], 0);
            fputc('\t', f);
            put_node(f, g, g->pv[p], 0);
            fprintf(f, "\t%d\t%s\t%d", g->pc[p], in >= 0 ? names[in] : "none", best);
            for (int k = 0; k < K; k++) fprintf(f, "\t%.9g", lp[k]);
            fputc('\n', f);
        }
    }
}

static int cmd_infer(int argc, char **argv) {
    const char *in = NULL, *data_dir = NULL, *task = NULL, *ckpt = NULL, *out = NULL;
    int threads = 0, format = INFER_JSONL, other_graph = 0, split = -2, pairs = 0;
    donto_graph_opts go = {0};
    go.splits = DONTO_SPLITS_OPTIONAL; /* predictions need no masks; --random-splits draws them anyway */
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "checkpoint", 0, &ckpt, .metavar = "FILE", .help = "the model (required)"},
        {DONTO_OPT_STRING, "in", 0, &in, .metavar = "GRAPH", .help = "the graph, as --data of train (required)"},
        {DONTO_OPT_STRING, "data", 0, &in, .metavar = "GRAPH", .help = "the same as --in"},
        {DONTO_OPT_STRING, "data-dir", 0, &data_dir, .metavar = "DIR", .help = "as for train"},
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "NAME", .help = "as for train"},
        GRAPH_LOAD_OPTS(&go),
        {DONTO_OPT_STRING, "out", 0, &out, .metavar = "FILE", .help = "output (default: stdout)"},
        {DONTO_OPT_CHOICE, "format", 0, &format, .choices = INFER_FORMATS,
         .help = "jsonl (default): {\"node\": id, \"pred\": k, \"logp\": [...]} per line (%.9g floats)\n"
                 "tsv: node<TAB>pred<TAB>logp_0<TAB>...\n"
                 "edge tasks: {\"pair\": i, \"src\", \"dst\", \"label\", \"set\": train|val|test|none,\n"
                 "\"pred\", \"logp\"}; tsv: pair src dst label set pred logp_0 ..."},
        {DONTO_OPT_CHOICE, "pairs", 0, &pairs, .choices = PAIR_SETS, .metavar = "all|train|val|test",
         .help = "edge tasks: score every pair of the task (default), or one set of --split's"},
        {DONTO_OPT_INT, "split", 0, &split, .min = 0, .max = 1000000, .metavar = "I",
         .help = "edge tasks: the split whose sets --pairs and \"set\" name (default: the checkpoint's)"},
        ALLOW_OTHER_GRAPH_OPT(&other_graph),
        THREADS_OPT(&threads),
        {0}};
    const donto_opt_cmd cmd = {
        "donto-sheaf infer",
        "usage: donto-sheaf infer --checkpoint FILE --in GRAPH [--out FILE] [--format jsonl|tsv]\n"
        "\n"
        "Predicted class and log-probabilities for every node (the same forward as training's eval);\n"
        "for an edge task (--task), for every pair of the task or of one set (--pairs).\n"
        "The graph must be the one the checkpoint was trained on (the same fingerprint: features, labels,\n"
        "edges) unless --allow-other-graph. A graph without splits is fine here.\n"
        "\n",
        opts, "\n" GRAPH_HELP};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!in || !ckpt) return donto_opt_usage_error(&cmd, "--checkpoint and --in are required");
    set_threads(threads);
    donto_err err = {0};
    donto_graph g;
    go.data_dir = data_dir, go.task = task;
    if (donto_graph_load_opts(&g, in, &go, &err)) {
        fprintf(stderr, "donto-sheaf infer: %s\n", err.msg);
        return 1;
    }
    say_graph("donto-sheaf infer", &g, 1);
    donto_sheaf_model *m = donto_sheaf_load(ckpt, &g, NULL, &err);
    if (!m) {
        fprintf(stderr, "donto-sheaf infer: %s\n", err.msg);
        donto_graph_free(&g);
        return 1;
    }
    if (graph_gate("donto-sheaf infer", ckpt, m, &g, other_graph)) {
        donto_sheaf_model_free(m), donto_graph_free(&g);
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
    int K = donto_sheaf_model_classes(m), rc = 0, nodes = g.n;
    if (g.task_kind == DONTO_TASK_EDGE) {
        const donto_sheaf_origin *o = donto_sheaf_model_origin(m);
        if (split == -2) split = o->split >= 0 && o->split < g.nsplits ? o->split : 0;
        if (split >= g.nsplits)
            rc = 1, fprintf(stderr, "donto-sheaf infer: split %d not available (graph has %d)\n", split, g.nsplits);
        else infer_pairs(f, &g, logp, K, split, pairs, format);
        nodes = 0; /* pair lines only */
    }
    for (int v = 0; v < nodes; v++) {
        const float *lp = logp + (size_t)v * K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (lp[k] > lp[best]) best = k;
        if (format == INFER_JSONL) {
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
    if (out && fclose(f)) rc = 1, fprintf(stderr, "donto-sheaf infer: write error on %s\n", out);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return rc;
}

/* ------------------------------------------------------------------ */
/* sweep: grid file = JSON object {"datasets": [...], "<option>": [values...], "random": N?, "seed": S?}
 * option names are the train options without dashes (family, d, layers, hidden, lr, weight-decay, ...). */

/* Set hyperparameter `key` of hp from a grid value: true sets a flag (false
 * leaves it), numbers and strings go through the option's checks. */
static int apply_grid_value(donto_sheaf_hp *hp, const char *key, json_t *v, donto_err *err) {
    int threads = 0;
    donto_opt t[HP_NOPT];
    hp_opts(t, hp, &threads);
    const donto_opt *o = donto_opt_find(t, key);
    if (!o) return donto_seterr(err, "unknown option");
    if (o->type == DONTO_OPT_FLAG || o->type == DONTO_OPT_FLAG_OFF) {
        if (json_is_boolean(v)) return json_is_true(v) ? donto_opt_set(t, key, NULL, err) : 0;
        return donto_seterr(err, "--%s takes true or false", key);
    }
    char buf[64];
    if (json_is_string(v)) return donto_opt_set(t, key, json_string_value(v), err);
    if (json_is_integer(v)) snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
    else return donto_seterr(err, "--%s takes a number or a string", key);
    return donto_opt_set(t, key, buf, err);
}

static int cmd_sweep(int argc, char **argv) {
    donto_sheaf_hp base;
    donto_sheaf_hp_default(&base);
    const char *grid = NULL, *data_dir = NULL, *out = NULL, *task = NULL;
    int split = -1, json_out = 0, threads = 0, seeds = 1;
    donto_graph_opts go = {0};
    donto_opt hpt[HP_NOPT];
    hp_opts(hpt, &base, &threads);
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "grid", 0, &grid, .metavar = "FILE", .help = "the grid (required)"},
        {DONTO_OPT_STRING, "out", 0, &out, .metavar = "FILE", .help = "results (default: stdout)"},
        {DONTO_OPT_FLAG, "json", 0, &json_out,
         .help = "write JSON (an array of result objects, then {\"best\": ...}) instead of CSV"},
        SPLIT_OPT(&split, "all"),
        SEEDS_OPT(&seeds),
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "NAME",
         .help = "task of the export files (default: the grid's \"task\", else each file's first)"},
        {DONTO_OPT_STRING, "data-dir", 0, &data_dir, .metavar = "DIR", .help = "as for train"},
        GRAPH_LOAD_OPTS(&go),
        {DONTO_OPT_INCLUDE, .dest = hpt, .help = "model and training options (the defaults for keys the grid does not set):"},
        {0}};
    const donto_opt_cmd cmd = {
        "donto-sheaf sweep",
        "usage: donto-sheaf sweep --grid FILE [--out results.csv] [--json] [--split I|all] [options]\n"
        "\n"
        "Grid or random search. FILE is JSON: {\"datasets\": [\"texas\", ...], \"family\": [\"diag\", \"orth\"],\n"
        "\"d\": [2, 3], \"lr\": [0.01, 0.02], \"add-lp\": [false, true], ..., \"random\": N (optional: N random\n"
        "configurations instead of the full grid), \"task\": NAME, \"seeds\": N (optional)}. Keys are the train\n"
        "options without the dashes; options given on the command line are the defaults for keys the grid\n"
        "does not set. Each configuration runs on all splits (or --split I) x --seeds seeds. Writes one CSV\n"
        "row per (dataset, configuration) with means and stds over the runs to --out (default stdout), and\n"
        "prints the best configuration per dataset on stderr: by mean validation accuracy for node tasks, by\n"
        "the task's validation metric (macro_f1, roc_auc: the export's \"metric\") for edge tasks.\n"
        "\n",
        opts, "\nThe grid's datasets are GRAPHs, read with --random-splits and --features as given.\n" GRAPH_HELP};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!grid) return donto_opt_usage_error(&cmd, "--grid is required");
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
        if (!strcmp(key, "datasets") || !strcmp(key, "random") || !strcmp(key, "seed") || !strcmp(key, "task") ||
            !strcmp(key, "seeds"))
            continue;
        if (!json_is_array(val)) val = json_pack("[O]", val), json_object_set_new(gj, key, val);
        if (nax == 64 || !json_array_size(val)) continue;
        for (size_t vi = 0; vi < json_array_size(val); vi++) { /* every value, before any run */
            donto_sheaf_hp probe = base;
            donto_err perr = {0};
            if (apply_grid_value(&probe, key, json_array_get(val, vi), &perr)) {
                fprintf(stderr, "donto-sheaf sweep: %s: \"%s\": %s\n", grid, key, perr.msg);
                json_decref(gj);
                return 1;
            }
        }
        keys[nax] = key, vals[nax] = val, nax++;
        total *= (long)json_array_size(val);
    }
    if (!task) task = json_string_value(json_object_get(gj, "task"));
    if (json_object_get(gj, "seeds")) {
        json_int_t ns = json_integer_value(json_object_get(gj, "seeds"));
        if (ns < 1 || ns > 10000) {
            fprintf(stderr, "donto-sheaf sweep: %s: \"seeds\" must be an integer in 1..10000\n", grid);
            json_decref(gj);
            return 1;
        }
        if (seeds == 1) seeds = (int)ns;
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
        fprintf(f, ",splits,val_acc_mean,test_acc_mean,test_acc_std,runs,test_macro_f1_mean,test_macro_f1_std,metric,"
                   "val_metric_mean,test_metric_mean,test_metric_std\n");
    }
    json_t *results = json_array(), *best = json_object();
    int rc = 0;
    for (size_t di = 0; di < json_array_size(datasets) && !rc; di++) {
        const char *ds = json_string_value(json_array_get(datasets, di));
        donto_err err = {0};
        donto_graph g;
        go.data_dir = data_dir, go.task = task;
        if (!ds || donto_graph_load_opts(&g, ds, &go, &err)) {
            fprintf(stderr, "donto-sheaf sweep: %s\n", ds ? err.msg : "datasets must be strings");
            rc = 1;
            break;
        }
        say_graph("donto-sheaf sweep", &g, 1);
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
                apply_grid_value(&hp, keys[a], v, NULL); /* checked above */
                json_object_set(conf, keys[a], v);
            }
            run_summary sum = {0};
            json_t *sp = json_array();
            if (run_splits(&hp, &g, split, seeds, 0, 1, NULL, sp, &sum, &err)) {
                fprintf(stderr, "donto-sheaf sweep: %s: config %ld: %s\n", ds, ci, err.msg);
                json_decref(sp), json_decref(conf);
                continue;
            }
            int nsp = split < 0 ? g.nsplits : 1;
            json_t *r = json_object();
            json_object_set_new(r, "dataset", json_string(ds));
            json_object_set_new(r, "config", json_integer(ci));
            json_object_set(r, "params", conf);
            json_object_set_new(r, "splits", json_integer(nsp));
            json_object_set_new(r, "seeds", json_integer(seeds));
            summary_json(r, &sum);
            json_object_set_new(r, "random_splits", json_boolean(g.splits_random));
            json_decref(sp);
            double tm = sum.test_acc, ts = sum.test_acc_sd, vm = sum.val_acc;
            if (!json_out) {
                fprintf(f, "%s,%ld", ds, ci);
                for (int a = 0; a < nax; a++) {
                    char *s = json_dumps(json_object_get(conf, keys[a]), JSON_ENCODE_ANY);
                    fprintf(f, ",%s", s);
                    free(s);
                }
                fprintf(f, ",%d,%.6f,%.6f,%.6f,%d,%.6f,%.6f,%s,%.6f,%.6f,%.6f\n", nsp, vm, tm, ts, sum.runs, sum.test_f1,
                        sum.test_f1_sd, donto_metric_name(sum.metric), sum.val_metric, sum.test_metric,
                        sum.test_metric_sd);
                fflush(f);
            }
            fprintf(stderr, "sweep %s config %ld/%ld: val %.4f test %.4f +- %.4f  %s val %.4f test %.4f +- %.4f (%d runs)\n",
                    ds, ci + 1, nconf, vm, tm, ts, donto_metric_name(sum.metric), sum.val_metric, sum.test_metric,
                    sum.test_metric_sd, sum.runs);
            double sel = sum.edge ? sum.val_metric : vm;
            if (sel > best_val) {
                best_val = sel;
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
    if (!strcmp(cmd, "export")) return donto_sheaf_export_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen-substrate")) return donto_sheaf_gen_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "stamp-history")) return donto_sheaf_stamp_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "register")) return donto_sheaf_register_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "models")) return donto_sheaf_models_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "score")) return donto_sheaf_score_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("donto-sheaf %s\n", DONTO_VERSION);
        return 0;
    }
    fprintf(stderr, "donto-sheaf: unknown command '%s'\n", cmd);
    usage_main(stderr);
    return 2;
}
