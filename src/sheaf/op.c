/*
 * The sheaf inference operator (include/donto/sheaf_op.h): a checkpoint as a read-only,
 * thread-safe function from graphs to class probabilities.
 *
 * Design. A donto_sheaf_model holds its graph's buffers (activations, CSR, scratch) and the
 * forward writes into them, so one model cannot run two forwards at once. The operator keeps
 * the weights in a model built for a two-node placeholder graph (`w`: the checkpoint read by
 * the same code as donto_sheaf_load, sheaf_ckpt_model, so every check on shapes and values is
 * the same) and never runs it. Each infer builds a model for its own graph with the
 * checkpoint's hyperparameters (donto_sheaf_model_new: the parameter table depends on F, K, the
 * task and the hyperparameters only, never on the graph's size), copies the weights in, runs
 * donto_sheaf_forward (training 0) and frees the model: per-call workspace, nothing shared but
 * the read-only weights, hence bit-identical to donto_sheaf_load + donto_sheaf_forward.
 *
 * What the forward shares between threads, made safe for this: OpenBLAS's process-wide thread
 * count (a counted hold, dense.c), OpenMP's thread count (omp_set_num_threads sets the calling
 * thread's own value), the export loader's sort context (thread-local, graph.c).
 *
 * Labels are not inputs: each call gives the model labels -1 (node tasks) or class 0 (edge
 * tasks' pairs), so that no label of the caller's graph can index outside the model's classes;
 * the log-probabilities do not depend on them.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "donto/sheaf_op.h"
#include "sheaf_int.h"

struct donto_sheaf_op {
    donto_sheaf_model *w; /* the weights (a model for the placeholder graph; never run) */
    int task, directed;   /* DONTO_TASK_*; edge tasks: directed pairs */
    int f, K;             /* features per node; output classes (node or pair) */
    char **class_names;   /* [K] or NULL */
};

/* ---- load ------------------------------------------------------------ */

static int jint(json_t *o, const char *k, long lo, long hi, int *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) return -1;
    *out = (int)json_integer_value(v);
    return 0;
}

static donto_sheaf_op *op_from_json(json_t *root, const char *where, donto_err *err) {
    json_t *gj = json_object_get(root, "graph"), *tj = json_object_get(root, "task");
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, "donto-sheaf-checkpoint"))
        return donto_seterrc(err, DONTO_E_INVALID, "%s: not a donto-sheaf checkpoint (no \"format\": "
                                                   "\"donto-sheaf-checkpoint\")", where), NULL;
    int f, K;
    if (jint(gj, "f", 1, 1 << 24, &f))
        return donto_seterrc(err, DONTO_E_INVALID, "%s: \"graph\".\"f\" (features per node) is missing or not in "
                                                   "1..%d", where, 1 << 24), NULL;
    if (jint(gj, "nclass", 2, 1 << 20, &K))
        return donto_seterrc(err, DONTO_E_INVALID, "%s: \"graph\".\"nclass\" (classes) is missing or not in 2..%d",
                             where, 1 << 20), NULL;
    const char *kind = json_string_value(json_object_get(tj, "kind"));
    int edge = kind && !strcmp(kind, "edge");
    json_t *dj = json_object_get(tj, "directed");
    int directed = edge && json_is_true(dj);

    /* the placeholder graph: two nodes, one edge, (edge tasks) one pair; zero features */
    float *x = donto_xcalloc((size_t)2 * f, sizeof(float));
    int y[2] = {-1, -1}, e0[1] = {0}, e1[1] = {1}, pc[1] = {0};
    donto_graph g;
    memset(&g, 0, sizeof g);
    g.n = 2, g.f = f, g.nclass = K, g.x = x, g.y = y, g.ne = 1, g.eu = e0, g.ev = e1;
    snprintf(g.name, sizeof g.name, "(operator placeholder)");
    if (edge) g.task_kind = DONTO_TASK_EDGE, g.npairs = 1, g.directed = directed, g.pu = e0, g.pv = e1, g.pc = pc;
    donto_sheaf_model *w = sheaf_ckpt_model(root, where, &g, NULL, err);
    free(x);
    if (!w) return NULL;

    donto_sheaf_op *op = donto_xcalloc(1, sizeof *op);
    op->w = w, op->task = edge ? DONTO_TASK_EDGE : DONTO_TASK_NODE, op->directed = directed;
    op->f = f, op->K = K;
    json_t *names = json_object_get(tj, "class_names");
    if (names) {
        if (!json_is_array(names) || (int)json_array_size(names) != K) {
            donto_seterrc(err, DONTO_E_INVALID, "%s: \"task\".\"class_names\" must be an array of %d names", where, K);
            donto_sheaf_op_free(op);
            return NULL;
        }
        op->class_names = donto_xcalloc((size_t)K, sizeof(char *));
        for (int k = 0; k < K; k++) {
            const char *s = json_string_value(json_array_get(names, k));
            if (!s) {
                donto_seterrc(err, DONTO_E_INVALID, "%s: \"task\".\"class_names\"[%d] is not a string", where, k);
                donto_sheaf_op_free(op);
                return NULL;
            }
            op->class_names[k] = donto_xstrdup(s);
        }
    }
    return op;
}

donto_sheaf_op *donto_sheaf_op_load(const char *checkpoint_json, size_t len, donto_err *err) {
    if (!checkpoint_json) return donto_seterrc(err, DONTO_E_INVALID, "checkpoint: no bytes (NULL)"), NULL;
    json_error_t je;
    json_t *root = json_loadb(checkpoint_json, len, 0, &je);
    if (!root)
        return donto_seterrc(err, DONTO_E_INVALID, "checkpoint (%zu bytes): not JSON at line %d, column %d: %s", len,
                             je.line, je.column, je.text), NULL;
    donto_sheaf_op *op = op_from_json(root, "checkpoint", err);
    json_decref(root);
    return op;
}

donto_sheaf_op *donto_sheaf_op_load_file(const char *path, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return NULL;
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!root)
        return donto_seterrc(err, DONTO_E_INVALID, "%s (%zu bytes): not JSON at line %d, column %d: %s", path, len,
                             je.line, je.column, je.text), NULL;
    donto_sheaf_op *op = op_from_json(root, path, err);
    json_decref(root);
    return op;
}

void donto_sheaf_op_free(donto_sheaf_op *op) {
    if (!op) return;
    donto_sheaf_model_free(op->w);
    if (op->class_names)
        for (int k = 0; k < op->K; k++) free(op->class_names[k]);
    free(op->class_names);
    free(op);
}

/* ---- introspection --------------------------------------------------- */

int donto_sheaf_op_task(const donto_sheaf_op *op) { return op->task; }
int donto_sheaf_op_directed(const donto_sheaf_op *op) { return op->directed; }
int donto_sheaf_op_classes(const donto_sheaf_op *op) { return op->K; }
const char *donto_sheaf_op_class_name(const donto_sheaf_op *op, int k) {
    return op->class_names && k >= 0 && k < op->K ? op->class_names[k] : NULL;
}
int donto_sheaf_op_feature_dim(const donto_sheaf_op *op) { return op->f; }
int donto_sheaf_op_family(const donto_sheaf_op *op) { return op->w->hp.family; }
const char *donto_sheaf_op_family_name(const donto_sheaf_op *op) {
    if (op->w->hp.family == DONTO_SHEAF_ORTH) return op->w->hp.orth == DONTO_ORTH_CAYLEY ? "cayley" : "householder";
    return donto_sheaf_family_name(op->w->hp.family);
}
const char *donto_sheaf_op_graph_name(const donto_sheaf_op *op) { return op->w->origin.graph; }
const char *donto_sheaf_op_graph_fingerprint(const donto_sheaf_op *op) { return op->w->origin.fingerprint; }
const donto_sheaf_model *donto_sheaf_op_model(const donto_sheaf_op *op) { return op->w; }

/* ---- inference ------------------------------------------------------- */

static const char *task_name(int t) { return t == DONTO_TASK_EDGE ? "edge" : "node"; }

int donto_sheaf_op_infer(const donto_sheaf_op *op, const donto_graph *g, int what, float *out, size_t out_len,
                         donto_err *err) {
    if (!op || !g) return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: no %s (NULL)", op ? "graph" : "operator");
    if (what != DONTO_SHEAF_OUT_PROBS && what != DONTO_SHEAF_OUT_LOGP)
        return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: output kind %d is neither probabilities (0) nor "
                                                   "log-probabilities (1)", what);
    const char *gn = g->name[0] ? g->name : "graph";
    if (g->f != op->f)
        return donto_seterrc(err, DONTO_E_INVALID, "%s has %d features per node, the model was trained on %d", gn, g->f,
                             op->f);
    int gtask = g->task_kind == DONTO_TASK_EDGE ? DONTO_TASK_EDGE : DONTO_TASK_NODE;
    if (gtask != op->task)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: the model is for a %s task, the graph's task is a %s task", gn,
                             task_name(op->task), task_name(gtask));
    if (op->task == DONTO_TASK_EDGE && (g->directed != 0) != op->directed)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: the model is for a %s edge task, the graph's is %s", gn,
                             op->directed ? "directed" : "undirected", g->directed ? "directed" : "undirected");
    if (g->n < 1 || !g->x || (g->ne > 0 && (!g->eu || !g->ev)) || g->ne < 0)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: no nodes, no features, or edges without arrays", gn);
    for (int k = 0; k < g->ne; k++)
        if (g->eu[k] < 0 || g->eu[k] >= g->n || g->ev[k] < 0 || g->ev[k] >= g->n)
            return donto_seterrc(err, DONTO_E_INVALID, "%s: edge %d (%d, %d) names a node outside 0..%d", gn, k, g->eu[k],
                                 g->ev[k], g->n - 1);
    size_t rows = (size_t)g->n;
    if (op->task == DONTO_TASK_EDGE) {
        if (g->npairs < 1 || !g->pu || !g->pv)
            return donto_seterrc(err, DONTO_E_INVALID, "%s: an edge task needs query pairs (none given)", gn);
        for (int p = 0; p < g->npairs; p++)
            if (g->pu[p] < 0 || g->pu[p] >= g->n || g->pv[p] < 0 || g->pv[p] >= g->n)
                return donto_seterrc(err, DONTO_E_INVALID, "%s: pair %d (%d, %d) names a node outside 0..%d", gn, p,
                                     g->pu[p], g->pv[p], g->n - 1);
        rows = (size_t)g->npairs;
    }
    size_t need = rows * (size_t)op->K;
    if (!out || out_len < need)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: the output needs %zu rows x %d classes = %zu floats, %s %zu",
                             gn, rows, op->K, need, out ? "given" : "given NULL for", out_len);

    /* the call's own graph view: the caller's features, edges and pairs; no labels, no splits */
    donto_graph gg = *g;
    gg.nclass = op->K;
    gg.nsplits = 0, gg.train = gg.val = gg.test = NULL, gg.ptrain = gg.pval = gg.ptest = NULL;
    int *lab = calloc(rows, sizeof(int)); /* node tasks: -1 (set below); edge tasks: class 0 */
    if (!lab) return donto_seterrc(err, DONTO_E_NOMEM, "%s: out of memory for %zu labels", gn, rows);
    if (op->task == DONTO_TASK_EDGE) gg.pc = lab, gg.y = NULL;
    else {
        for (size_t v = 0; v < rows; v++) lab[v] = -1;
        gg.y = lab, gg.pc = NULL;
    }
    donto_sheaf_model *m = donto_sheaf_model_new(&op->w->hp, &gg, err);
    if (!m) {
        free(lab);
        if (donto_err_code(err) == DONTO_E_INTERNAL && err) err->code = DONTO_E_NOMEM; /* the graph's buffers */
        return donto_preerr(err, "sheaf operator");
    }
    if (m->np != op->w->np) { /* cannot happen: the table depends on F, K, task and hyperparameters */
        donto_sheaf_model_free(m), free(lab);
        return donto_seterrc(err, DONTO_E_INTERNAL, "sheaf operator: %zu parameters for this graph, %zu loaded", m->np,
                             op->w->np);
    }
    memcpy(m->p, op->w->p, sizeof(float) * m->np);
    const float *logp;
    donto_sheaf_forward(m, &gg, 0, 0, NULL, &logp);
    if (what == DONTO_SHEAF_OUT_LOGP) memcpy(out, logp, sizeof(float) * need);
    else
        for (size_t i = 0; i < need; i++) out[i] = expf(logp[i]);
    donto_sheaf_model_free(m);
    free(lab);
    return 0;
}

int donto_sheaf_op_infer_arrays(const donto_sheaf_op *op, int n, int f, const float *x, int nedges, const int *src,
                                const int *dst, int npairs, const int *pu, const int *pv, int what, float *out,
                                size_t out_len, donto_err *err) {
    if (!op) return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: no operator (NULL)");
    if (f != op->f)
        return donto_seterrc(err, DONTO_E_INVALID, "graph has %d features per node, the model was trained on %d", f,
                             op->f);
    if (n < 1 || !x || nedges < 0 || (nedges > 0 && (!src || !dst)) || npairs < 0 || (npairs > 0 && (!pu || !pv)))
        return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: a graph needs n >= 1 nodes with features, and "
                                                   "arrays for its %d edges and %d pairs", nedges, npairs);
    if (op->task == DONTO_TASK_NODE && npairs > 0)
        return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: the model is for a node task; %d pairs given",
                             npairs);
    donto_graph g;
    if (donto_graph_from_arrays(&g, n, f, x, NULL, op->K, nedges, src, dst, err)) {
        if (donto_err_code(err) == DONTO_E_INTERNAL && err) err->code = DONTO_E_INVALID;
        return -1;
    }
    if (op->task == DONTO_TASK_EDGE) /* the pairs, borrowed for the call */
        g.task_kind = DONTO_TASK_EDGE, g.directed = op->directed, g.npairs = npairs, g.pu = (int *)pu,
        g.pv = (int *)pv;
    int rc = donto_sheaf_op_infer(op, &g, what, out, out_len, err);
    g.pu = g.pv = NULL, g.npairs = 0;
    donto_graph_free(&g);
    return rc;
}

int donto_sheaf_op_infer_json(const donto_sheaf_op *op, const char *graph_json, size_t len, const char *task,
                              int what, float **out, size_t *rows, donto_err *err) {
    if (out) *out = NULL;
    if (rows) *rows = 0;
    if (!op || !graph_json || !out)
        return donto_seterrc(err, DONTO_E_INVALID, "sheaf operator: no %s (NULL)",
                             !op ? "operator" : !graph_json ? "graph bytes" : "output pointer");
    donto_graph g;
    if (donto_graph_load_json(&g, graph_json, len, "graph", task, err)) return -1;
    size_t r = op->task == DONTO_TASK_EDGE && g.task_kind == DONTO_TASK_EDGE ? (size_t)g.npairs : (size_t)g.n;
    float *buf = malloc((r ? r : 1) * (size_t)op->K * sizeof(float));
    if (!buf) {
        donto_graph_free(&g);
        return donto_seterrc(err, DONTO_E_NOMEM, "sheaf operator: out of memory for %zu x %d outputs", r, op->K);
    }
    int rc = donto_sheaf_op_infer(op, &g, what, buf, r * (size_t)op->K, err);
    donto_graph_free(&g);
    if (rc) {
        free(buf);
        return -1;
    }
    *out = buf;
    if (rows) *rows = r;
    return 0;
}

void donto_sheaf_op_free_output(float *out) { free(out); }

/* ---- errors for FFI callers ------------------------------------------ */

donto_err *donto_sheaf_err_new(void) { return donto_xcalloc(1, sizeof(donto_err)); }
void donto_sheaf_err_free(donto_err *err) { free(err); }
const char *donto_sheaf_err_message(const donto_err *err) { return err ? err->msg : ""; }
int donto_sheaf_err_code(const donto_err *err) { return err && err->msg[0] ? (int)donto_err_code(err) : 0; }
