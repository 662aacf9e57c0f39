/*
 * donto-accel: the sheaf inference operator (src/sheaf/op.c). A trained checkpoint
 * (donto_sheaf_save's JSON) as a read-only function from graphs to class probabilities, for
 * the registry and the coordinator, and for any language through its FFI: the shared library
 * libdonto_sheaf_op.so exports this header's functions and nothing else
 * (docs/sheaf-operator.md has a Python ctypes example, tests/ffi_sheaf_op.py).
 *
 * Design:
 *   - One opaque handle; across the boundary only ints, size_t, float and int arrays and char
 *     pointers, no struct by value. Errors: a donto_err (util.h) the caller owns, or one made by
 *     donto_sheaf_err_new() for languages that would rather not lay the struct out; its message
 *     is donto_sheaf_err_message(), its code donto_sheaf_err_code() (DONTO_E_*: INVALID for a
 *     bad checkpoint or graph, NOMEM when a graph's buffers cannot be allocated).
 *   - Thread-safe: after load the weights are read-only. Each infer builds the model's
 *     per-graph buffers for its own graph (donto_sheaf_model_new), copies the weights in, runs
 *     the forward and frees them, so any number of threads may infer with one op at once.
 *   - Results are those of donto_sheaf_load + donto_sheaf_forward (training 0: no dropout) bit
 *     for bit: the same code on the same weights (tests/test_sheaf_op.c checks every family).
 *   - Output: rows in input order, node tasks one per node [n][K], edge tasks one per query
 *     pair [npairs][K]; K = donto_sheaf_op_classes(). DONTO_SHEAF_OUT_PROBS: expf of the
 *     log-probabilities; DONTO_SHEAF_OUT_LOGP: the log-probabilities themselves (what
 *     `donto-sheaf infer` prints).
 *   - Labels and splits of the graphs given are ignored: inference reads features and edges
 *     (and an edge task's pairs).
 */
#ifndef DONTO_SHEAF_OP_H
#define DONTO_SHEAF_OP_H

#include <stddef.h>

#include "donto/sheaf.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_sheaf_op donto_sheaf_op;

enum { DONTO_SHEAF_OUT_PROBS = 0, DONTO_SHEAF_OUT_LOGP = 1 };

/* ---- load ------------------------------------------------------------ */

/* A checkpoint from its bytes (JSON, len bytes, not NUL-terminated). NULL with err set when it
 * is not a readable checkpoint: not JSON (truncated), not finite weights (the message names the
 * tensor and value), tensors of the wrong number or shape, unknown family. */
donto_sheaf_op *donto_sheaf_op_load(const char *checkpoint_json, size_t len, donto_err *err);
/* The same from a file. */
donto_sheaf_op *donto_sheaf_op_load_file(const char *path, donto_err *err);
void donto_sheaf_op_free(donto_sheaf_op *op);

/* ---- introspection --------------------------------------------------- */

int donto_sheaf_op_task(const donto_sheaf_op *op);        /* DONTO_TASK_NODE or DONTO_TASK_EDGE */
int donto_sheaf_op_directed(const donto_sheaf_op *op);    /* edge tasks: 1 when (u, v) is not (v, u) */
int donto_sheaf_op_classes(const donto_sheaf_op *op);     /* K: columns of the output */
/* Class k's name when the checkpoint has names ("task": {"class_names": [...]}), else NULL. */
const char *donto_sheaf_op_class_name(const donto_sheaf_op *op, int k);
int donto_sheaf_op_feature_dim(const donto_sheaf_op *op); /* F: features per node */
int donto_sheaf_op_family(const donto_sheaf_op *op);      /* DONTO_SHEAF_* */
/* "diag", "householder", "cayley", "general", "gcn" or "mlp" (static strings). */
const char *donto_sheaf_op_family_name(const donto_sheaf_op *op);
/* The graph the weights were trained on: name and fingerprint ("" when not recorded). */
const char *donto_sheaf_op_graph_name(const donto_sheaf_op *op);
const char *donto_sheaf_op_graph_fingerprint(const donto_sheaf_op *op);
/* C callers: the weights as a model (hyperparameters, tensor table, parameters). Read only;
 * never run a forward on it (it is built for a two-node placeholder graph). */
const donto_sheaf_model *donto_sheaf_op_model(const donto_sheaf_op *op);

/* ---- inference ------------------------------------------------------- */

/* g (any loader's graph) -> out [rows][K] (what: DONTO_SHEAF_OUT_*), rows g->n for a node task,
 * g->npairs for an edge task. Refused (-1, DONTO_E_INVALID): a graph whose feature dimension is
 * not the model's (the message names both), a task of the other kind or directedness, out_len
 * (floats) below rows * K, node indices outside the graph. */
int donto_sheaf_op_infer(const donto_sheaf_op *op, const donto_graph *g, int what, float *out, size_t out_len,
                         donto_err *err);
/* The same from plain arrays (FFI): x [n][f] row-major, nedges edges src[i] - dst[i] (either
 * direction, duplicates and self-loops dropped: donto_graph_from_arrays), and for an edge task
 * npairs query pairs (pu[i], pv[i]) (npairs 0 and NULLs for a node task). */
int donto_sheaf_op_infer_arrays(const donto_sheaf_op *op, int n, int f, const float *x, int nedges, const int *src,
                                const int *dst, int npairs, const int *pu, const int *pv, int what, float *out,
                                size_t out_len, donto_err *err);
/* The same from an export file's bytes (docs/sheaf-export.md; task NULL: the file's first task;
 * an edge task's "pairs" are the queries, their classes ignored). *out is malloc'd [*rows][K]:
 * free it with donto_sheaf_op_free_output. Rows follow "nodes" (node tasks) or the task's
 * "pairs" (edge tasks). */
int donto_sheaf_op_infer_json(const donto_sheaf_op *op, const char *graph_json, size_t len, const char *task,
                              int what, float **out, size_t *rows, donto_err *err);
void donto_sheaf_op_free_output(float *out);

/* ---- errors for FFI callers ------------------------------------------ */

donto_err *donto_sheaf_err_new(void); /* zeroed; free with donto_sheaf_err_free */
void donto_sheaf_err_free(donto_err *err);
const char *donto_sheaf_err_message(const donto_err *err); /* "" when none */
int donto_sheaf_err_code(const donto_err *err);            /* DONTO_E_* (0: none) */

#ifdef __cplusplus
}
#endif
#endif
