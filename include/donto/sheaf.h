/*
 * donto-accel: Neural Sheaf Diffusion (Bodnar et al., NeurIPS 2022) and a GCN
 * baseline, trained and run in C (src/sheaf/).
 *
 * Written the way llm.c writes GPT-2: one forward and one backward function
 * per operation, explicit activations kept for the backward pass, no autograd.
 * All graph work runs over edge lists (O(E d^2) memory, never N x N).
 *
 * Layout conventions (used in every shape comment):
 *   N nodes, F input features, K classes, C channels ("hidden"), d stalk dim,
 *   d' = d + add_lp + add_hp, H = d' * C (a node's flattened stalks),
 *   Eu undirected edges (u < v), E2 = 2 Eu directed edges: 2k = u->v, 2k+1 = v->u.
 *   Stalk features X are [N][d'][C] row-major (row v*d'+i of an (N d') x C matrix).
 */
#ifndef DONTO_SHEAF_H
#define DONTO_SHEAF_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- graphs ---------------------------------------------------------- */

/* A graph carries one task: a node task (labels y, node masks) or an edge task (labelled pairs,
 * pair masks; docs/sheaf-export.md "Version 2"). */
enum { DONTO_TASK_NODE = 0, DONTO_TASK_EDGE = 1 };
/* What model selection reads with --stop metric (and --stop auto on edge tasks). DEFAULT: the
 * documented default, macro-F1 for more than two classes, ROC-AUC for two. */
enum { DONTO_METRIC_DEFAULT = 0, DONTO_METRIC_ACCURACY = 1, DONTO_METRIC_MACRO_F1 = 2, DONTO_METRIC_ROC_AUC = 3 };

typedef struct donto_graph {
    int n, f, nclass;   /* nodes, features, classes */
    float *x;           /* [n][f] */
    int *y;             /* [n], -1 = unlabelled */
    int ne;             /* undirected edges, eu[k] < ev[k], no self-loops, no duplicates */
    int *eu, *ev;       /* [ne] */
    int nsplits;        /* masks: [nsplits][n], 1 = in the set */
    uint8_t *train, *val, *test;
    char **ids;         /* [n] node ids of export files (NULL: nodes are 0..n-1) */
    char name[128];
    char fingerprint[65]; /* SHA-256 hex of features, edges and labels (and an edge task's pairs) */
    int task_kind;      /* DONTO_TASK_NODE (y, train/val/test) or DONTO_TASK_EDGE (the pairs below) */
    int metric;         /* DONTO_METRIC_* of the task ("metric" of an export file) */
    /* edge task: nclass counts pair classes, y is all -1 and the node masks are NULL. A pair is
     * an example of the task, not an edge of the graph. */
    int npairs, directed;
    int *pu, *pv, *pc;  /* [npairs] source, target, class */
    uint8_t *ptrain, *pval, *ptest; /* [nsplits][npairs] pair masks */
    /* What the loader read, for logs, run records and checkpoints: */
    char features_from[256]; /* the features' source and layout ("... dense rows of 1703 values") */
    char splits_from[256];   /* the masks' source ("... splits/texas_split_0.6_0.2_<i>.npz, 10 splits") */
    int splits_random;       /* 1: the masks were drawn at random (--random-splits, synthetic graphs) */
    /* Export files: the task read ("arg_link"; "" when none) and the export's inputs_digest
     * ("sha256:..."; "" when the file records none). Checkpoints keep both. */
    char task_name[64];
    char inputs_digest[80];
    /* The task's class names (an export's "classes", when it names every class): checkpoints
     * keep them ("task": {"class_names"}), the inference operator reports them. */
    int nclass_names;        /* 0: none */
    char **class_names;      /* [nclass_names] */
} donto_graph;

/* How donto_graph_load_opts reads a graph; all zero: the defaults. */
enum { DONTO_SPLITS_REQUIRED = 0, DONTO_SPLITS_RANDOM = 1, DONTO_SPLITS_OPTIONAL = 2 };
enum { DONTO_FEATURES_AUTO = 0, DONTO_FEATURES_DENSE = 1, DONTO_FEATURES_INDICES = 2 };
typedef struct donto_graph_opts {
    const char *data_dir; /* where geom-gcn names are looked up first (NULL: the default places) */
    const char *task;     /* task of an export file (NULL: the first) */
    /* A graph without split masks: REQUIRED, an error naming what was looked for; RANDOM
     * (--random-splits), 10 random 60/20/20 splits of the labelled nodes, seed 0; OPTIONAL
     * (infer), no splits (nsplits 0). A graph with masks keeps them whichever. */
    int splits;
    /* Rows of out1_node_feature_label.txt: AUTO tells dense values from lists of the indices of
     * nonzero features (geom-gcn's film/actor store those) and refuses what it cannot tell;
     * DENSE or INDICES say which. feature_dim: INDICES' dimension (0: the dataset's known one,
     * 932 for film/actor, else the largest index + 1). Not AUTO is an error for other sources. */
    int features;
    int feature_dim;
} donto_graph_opts;

/* Load a graph. `spec` is one of:
 *   a geom-gcn dataset name (texas, wisconsin, cornell, chameleon, ...), looked up under data_dir,
 *     then $DONTO_GEOM_GCN_DIR, then the repository's data/geom-gcn: beside the executable's
 *     directory (/proc/self/exe/../../data/geom-gcn), then in the source tree built from (a
 *     compile-time path); never relative to the current directory;
 *   a dataset directory ROOT/NAME laid out the same way: out1_graph_edges.txt +
 *     out1_node_feature_label.txt, splits in ROOT/splits/NAME_split_0.6_0.2_<i>.npz; or NAME.npz
 *     holding features, labels, edges and masks, used for whatever the text files and the split
 *     files do not provide (on its own when they are absent);
 *   a .npz file (used on its own, as such a directory's NAME.npz);
 *   a donto-sheaf export file (JSON, docs/sheaf-export.md).
 * Features are row-normalised for geom-gcn data (as the reference does). g->features_from and
 * g->splits_from say what was read. */
int donto_graph_load_opts(donto_graph *g, const char *spec, const donto_graph_opts *opts, donto_err *err);
/* donto_graph_load_opts with the defaults (splits required, features detected). */
int donto_graph_load(donto_graph *g, const char *spec, const char *data_dir, const char *task,
                     donto_err *err);
/* An export file's bytes (docs/sheaf-export.md, JSON; not NUL-terminated): as an export file for
 * donto_graph_load_opts with splits optional (a graph without them keeps nsplits 0). `name` names
 * the graph in errors and g->name (NULL: "graph"); task as opts->task. Errors in the input have
 * the code DONTO_E_INVALID. Reentrant: threads may load at once. */
int donto_graph_load_json(donto_graph *g, const char *json, size_t len, const char *name, const char *task,
                          donto_err *err);
/* Parse --features: "dense", "indices" or "indices:DIM" into opts->features/feature_dim. */
int donto_graph_features_parse(const char *text, donto_graph_opts *opts, donto_err *err);
/* Build from arrays (copies them); edges may be directed/duplicated/self-loops: they are
 * symmetrised, deduplicated, self-loops dropped. */
int donto_graph_from_arrays(donto_graph *g, int n, int f, const float *x, const int *y, int nclass,
                            int nedges, const int *src, const int *dst, donto_err *err);
/* Deterministic random graph (tests, benches): n nodes, about m undirected edges. */
int donto_graph_random(donto_graph *g, int n, int f, int nclass, long m, uint64_t seed, donto_err *err);
/* nsplits random 60/20/20 splits of the labelled nodes (--random-splits: 10, seed 0). */
void donto_graph_random_splits(donto_graph *g, int nsplits, uint64_t seed);
/* Replace g's task by a random edge task (tests, parity): npairs random pairs (u != v) with
 * random classes 0..nclass-1 (class c drawn with weight c + 1: imbalanced), one random
 * 60/20/20 split of the pairs. */
int donto_graph_random_pairs(donto_graph *g, int npairs, int nclass, int directed, uint64_t seed, donto_err *err);
/* The metric of g's task, DONTO_METRIC_DEFAULT resolved (macro-F1, or ROC-AUC for two classes). */
int donto_graph_metric(const donto_graph *g);
const char *donto_metric_name(int metric);
void donto_graph_fingerprint(donto_graph *g);
/* SHA-256 hex of split s's train, val and test masks (out: 65 chars; "" when s is no split). */
void donto_graph_split_fingerprint(const donto_graph *g, int split, char out[65]);
void donto_graph_free(donto_graph *g);

/* Read one array from a .npz (zip, stored or deflate) file: dtype is the npy descr
 * (e.g. "<f4", "<i8", "|b1", "|u1"); shape up to 4 dims; data malloc'd. */
typedef struct donto_npy {
    char descr[16];
    int fortran;
    int ndim;
    long shape[4];
    void *data;
    size_t nbytes;
} donto_npy;
int donto_npz_read(const char *path, const char *name, donto_npy *out, donto_err *err);

/* ---- model ----------------------------------------------------------- */

/* MLP: the baseline that ignores the graph (node features only, no diffusion). */
enum { DONTO_SHEAF_DIAG = 0, DONTO_SHEAF_ORTH = 1, DONTO_SHEAF_GENERAL = 2, DONTO_SHEAF_GCN = 3, DONTO_SHEAF_MLP = 4 };
/* Model selection: validation loss, accuracy, the task's metric, or auto (node tasks: loss, the
 * reference protocol; edge tasks: the task's metric). */
enum { DONTO_STOP_LOSS = 0, DONTO_STOP_ACC = 1, DONTO_STOP_METRIC = 2, DONTO_STOP_AUTO = 3 };
enum { DONTO_ORTH_HOUSEHOLDER = 0, DONTO_ORTH_CAYLEY = 1 };

typedef struct donto_sheaf_hp {
    int family;        /* DONTO_SHEAF_* */
    int orth;          /* DONTO_ORTH_* (family ORTH) */
    int d;             /* stalk dim (>= 1) */
    int layers;        /* diffusion layers (GCN: conv layers) */
    int hidden;        /* C channels per stalk dim (GCN: hidden width) */
    int add_lp, add_hp; /* fixed dims as in the reference: add_lp D + A, add_hp D - A */
    int left_weights, right_weights;
    int edge_weights;  /* ORTH only */
    int second_linear;
    float input_dropout, dropout;
    double gen_eps;    /* General: (D + (1+eps) I)^-1/2 */
    /* training */
    float lr, weight_decay, sheaf_decay;
    int epochs, patience;
    int stop_acc;      /* DONTO_STOP_* (named for its first two values: 0 loss, 1 accuracy) */
    uint64_t seed;
} donto_sheaf_hp;

void donto_sheaf_hp_default(donto_sheaf_hp *hp);
const char *donto_sheaf_family_name(int family);
int donto_sheaf_family_parse(const char *s, int *family, int *orth);

/* One named parameter tensor inside the flat parameter buffer. */
typedef struct donto_sheaf_tensor {
    char name[48];
    size_t off, size;
    int rows, cols;
    int sheaf_group; /* 1: sheaf-learner weight decay applies */
} donto_sheaf_tensor;

typedef struct donto_sheaf_model donto_sheaf_model;

/* Create a model for graph shape (n, f, nclass) and edges; weights initialised from hp.seed.
 * NULL with err set on bad hyperparameters, or when the graph's buffers cannot be allocated
 * (the message names the bytes; see src/sheaf/sheaf_int.h for the OOM policy). */
donto_sheaf_model *donto_sheaf_model_new(const donto_sheaf_hp *hp, const donto_graph *g, donto_err *err);
void donto_sheaf_model_free(donto_sheaf_model *m);
const donto_sheaf_hp *donto_sheaf_model_hp(const donto_sheaf_model *m);

/* What a model's weights were trained on: set by donto_sheaf_train, kept by checkpoints. A new
 * model, or a checkpoint that does not record them, has split -1 and empty strings. */
typedef struct donto_sheaf_origin {
    char graph[128];            /* the graph's name */
    char fingerprint[65];       /* its fingerprint (donto_graph.fingerprint) */
    int split;                  /* the split trained on (its train mask; selected on its val mask) */
    char split_fingerprint[65]; /* donto_graph_split_fingerprint of that split */
} donto_sheaf_origin;
const donto_sheaf_origin *donto_sheaf_model_origin(const donto_sheaf_model *m);
/* 0 when g is the graph the model was trained on (the same fingerprint); -1 with an error naming
 * both graphs and fingerprints when it is another one, or when the model records none. */
int donto_sheaf_check_graph(const donto_sheaf_model *m, const donto_graph *g, donto_err *err);
/* 1 when split s of g is held out for the model: g is its graph and s the split it was trained
 * on, with the same masks (any other split's test nodes may be among its training nodes). */
int donto_sheaf_held_out(const donto_sheaf_model *m, const donto_graph *g, int split);
/* Parameters / gradients (flat, nparams floats) and their table. */
float *donto_sheaf_params(donto_sheaf_model *m, size_t *nparams);
float *donto_sheaf_grads(donto_sheaf_model *m);
const donto_sheaf_tensor *donto_sheaf_tensors(const donto_sheaf_model *m, int *count);
/* Forward: logp [n][K] (owned by the model). training = 1 applies dropout with masks drawn
 * from (seed, step). Returns the NLL over `mask` (all labelled nodes when mask = NULL). */
double donto_sheaf_forward(donto_sheaf_model *m, const donto_graph *g, int training, uint64_t step,
                           const uint8_t *mask, const float **logp);
/* Backward of the last forward's mean NLL over `mask`: grads are overwritten. */
void donto_sheaf_backward(donto_sheaf_model *m, const donto_graph *g, const uint8_t *mask);
/* Backward from an arbitrary upstream gradient dlogp [n][K] (tests). */
void donto_sheaf_backward_from(donto_sheaf_model *m, const donto_graph *g, const float *dlogp);
/* Edge-task models (built for a graph with an edge task): forward returns pair log-probabilities
 * [npairs][classes] and the class-weighted mean NLL over a pair mask; backward takes a pair mask
 * or dlogp [npairs][classes]. The encoder's node output [n][hidden] feeds the pair decoder
 * (docs/sheaf.md "Edge tasks"). */
int donto_sheaf_model_task(const donto_sheaf_model *m);    /* DONTO_TASK_* */
int donto_sheaf_model_classes(const donto_sheaf_model *m); /* classes of its output (node or pair) */
/* Class weights of the edge loss, [classes]: w_c = n / (K n_c) over split's train pairs (n_c of
 * class c, n in all, K classes), 0 for a class with none; all 1 for node tasks. */
void donto_sheaf_set_class_weights(donto_sheaf_model *m, const donto_graph *g, int split);
const float *donto_sheaf_class_weights(const donto_sheaf_model *m);

/* Metrics (computed in C; tests check them against sklearn's definitions). */
/* macro-F1 over the classes present in y or pred (sklearn's f1_score(average="macro")). */
double donto_metric_macro_f1(const int *y, const int *pred, long n, int K);
/* ROC-AUC of scores for y == 1 (ties: half), NAN when one class is absent (roc_auc_score). */
double donto_metric_roc_auc(const int *y, const double *score, long n);
/* PR-AUC as average precision: sum over thresholds of (R_k - R_{k-1}) P_k (average_precision_score). */
double donto_metric_average_precision(const int *y, const double *score, long n);

/* ---- training -------------------------------------------------------- */

typedef struct donto_sheaf_metrics {
    double train_acc, val_acc, test_acc;
    double train_loss, val_loss, test_loss; /* edge tasks: the class-weighted NLL */
    double train_f1, val_f1, test_f1;       /* macro-F1 */
    double train_auc, val_auc, test_auc;    /* ROC-AUC, two classes only (NAN otherwise) */
    double train_ap, val_ap, test_ap;       /* PR-AUC (average precision), two classes only */
    int metric;                             /* the task's metric, resolved (DONTO_METRIC_*) */
    double val_metric, test_metric;         /* its values */
    int best_epoch, epochs_run;
    double seconds;
} donto_sheaf_metrics;

typedef void (*donto_sheaf_epoch_cb)(void *ctx, int epoch, const donto_sheaf_metrics *now,
                                     const donto_sheaf_metrics *best);

/* Full-batch training on split `split` with Adam; on return the model holds the weights of
 * the selected epoch and *best its metrics. */
int donto_sheaf_train(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *best,
                      donto_sheaf_epoch_cb cb, void *ctx, donto_err *err);
/* Evaluate (no dropout) on a split; fills accs and losses. */
void donto_sheaf_evaluate(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *out);
/* One training step (forward + backward + Adam) on split's train mask; returns the loss. */
double donto_sheaf_train_step(donto_sheaf_model *m, const donto_graph *g, int split);

/* ---- checkpoints ----------------------------------------------------- */

/* JSON: {"format":"donto-sheaf-checkpoint","version":2,"family",...,"hparams":{...},
 *        "task":{"kind":"node"|"edge","classes":K,"directed":b},  (version 2; version 1 has none)
 *               (+ "class_names":[K names] when the graph names its classes)
 *        "graph":{"n","f","nclass","name","fingerprint"},"split":s,"split_fingerprint":"..",
 *        "metrics":{...},
 *        "tensors":[{"name","rows","cols","data":[...]}]} ; %.9g floats round-trip exactly. */
int donto_sheaf_save(const donto_sheaf_model *m, const donto_graph *g, const donto_sheaf_metrics *met,
                     const char *path, donto_err *err);
/* Load: builds the model for graph g (its f and nclass must match the checkpoint); the origin
 * (graph, split) is the checkpoint's, which the caller compares (donto_sheaf_check_graph,
 * donto_sheaf_held_out). */
donto_sheaf_model *donto_sheaf_load(const char *path, const donto_graph *g, donto_sheaf_hp *hp_out,
                                    donto_err *err);
/* The same from checkpoint bytes in memory (a model registry's row); label names them in
 * messages ("model 'x'"). Both refuse a weight that is not finite as float32. */
donto_sheaf_model *donto_sheaf_load_buffer(const char *buf, size_t len, const char *label, const donto_graph *g,
                                           donto_sheaf_hp *hp_out, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
