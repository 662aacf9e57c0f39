/*
 * donto-accel coordinator: serving the sheaf models (issue 18; docs/sheaf-serving.md "Serving").
 *
 *   POST /sheaf/infer?task=T   body: a graph in the export format (docs/sheaf-export.md; an edge
 *                              task's "pairs" are the queries, their classes ignored). Answer: the
 *                              task's active model (id, name), its classes, and one row per node
 *                              (node task) or query pair (edge task) with the probabilities and
 *                              the most probable class.
 *   GET  /sheaf/models         the active model of every task, and which one this process holds.
 *
 * Who may: admin and analyst tokens (the gate in server.c); contributors and readers get 403.
 *
 * Models. The registry (include/donto/sheaf_registry.h) says which model is active per task.
 * Every request asks it (one indexed row, no checkpoint bytes: donto_sheaf_registry_active_info)
 * and compares the id with the operator it holds for the task; when they differ the new
 * checkpoint is read and loaded (one loader at a time: concurrent requests of a changed task do
 * not load it twice), then swapped in under the mutex. Operators are reference counted: a
 * request holds the one it started with until its answer is built, so an activation or a
 * rollback never drops or mixes a request, and the old operator is freed by whoever lets go of
 * it last. No restart, no polling thread: the first request after an activation loads it.
 *
 * Bounds. The body is bounded by the server (max_body; 413). The graph is parsed once
 * (donto_graph_load_json) and refused (400) past max_nodes nodes or max_pairs pairs, before any
 * inference; inference time is linear in the graph and runs on the request's own thread, on
 * the operator's read-only weights (donto_sheaf_op_infer is thread-safe).
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/sheaf.h"
#include "donto/sheaf_op.h"
#include "donto/sheaf_registry.h"
#include "donto/util.h"
#include "donto/wire.h"
#include "sheaf_serve.h"

#define MAX_TASKS 32

typedef struct loaded {
    donto_sheaf_op *op;
    int64_t id;
    char name[128];
    char task[64];
    int refs; /* the cache's one, and one per request using it (under sv->mu) */
} loaded;

struct sheaf_srv {
    pthread_mutex_t mu;      /* cur, refs */
    pthread_mutex_t load_mu; /* one loader at a time */
    loaded *cur[MAX_TASKS];
    int ncur;
    sheaf_srv_limits lim;
    atomic_ullong requests, rows, reloads, errors;
};

sheaf_srv *sheaf_srv_new(const sheaf_srv_limits *lim) {
    sheaf_srv *sv = calloc(1, sizeof *sv);
    if (!sv) return NULL;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_mutex_init(&sv->load_mu, NULL);
    sv->lim = *lim;
    if (!sv->lim.max_nodes) sv->lim.max_nodes = 100000;
    if (!sv->lim.max_pairs) sv->lim.max_pairs = 100000;
    return sv;
}

static void unref_locked(loaded *l) {
    if (--l->refs == 0) {
        donto_sheaf_op_free(l->op);
        free(l);
    }
}

void sheaf_srv_free(sheaf_srv *sv) {
    if (!sv) return;
    for (int i = 0; i < sv->ncur; i++) unref_locked(sv->cur[i]);
    pthread_mutex_destroy(&sv->mu);
    pthread_mutex_destroy(&sv->load_mu);
    free(sv);
}

void sheaf_srv_stats_get(sheaf_srv *sv, sheaf_srv_stats *out) {
    memset(out, 0, sizeof *out);
    if (!sv) return;
    out->requests = atomic_load(&sv->requests);
    out->rows = atomic_load(&sv->rows);
    out->reloads = atomic_load(&sv->reloads);
    out->errors = atomic_load(&sv->errors);
}

static sheaf_answer err_answer(sheaf_srv *sv, unsigned status, const char *code, const char *fmt, ...)
    DONTO_PRINTF(4, 5);
static sheaf_answer err_answer(sheaf_srv *sv, unsigned status, const char *code, const char *fmt, ...) {
    char msg[DONTO_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&sv->errors, 1);
    return (sheaf_answer){status, donto_proto_error_response(code, msg)};
}

/* A failure of the registry (database): its message goes to the log only. */
static sheaf_answer store_failure(sheaf_srv *sv, const char *what, const donto_err *e) {
    DLOG_ERROR("coord: sheaf: %s: %s", what, e->msg);
    if (donto_err_code(e) == DONTO_E_SCHEMA)
        return err_answer(sv, 503, "not_migrated",
                          "the sheaf model registry is not in this database (donto-sheaf models list --migrate)");
    return err_answer(sv, 503, "store_unavailable", "%s: the database did not answer; retry later", what);
}

static loaded *find_locked(sheaf_srv *sv, const char *task) {
    for (int i = 0; i < sv->ncur; i++)
        if (!strcmp(sv->cur[i]->task, task)) return sv->cur[i];
    return NULL;
}

/* The operator of task's active model, held (release with let_go); NULL with *a set. */
static loaded *hold(sheaf_srv *sv, donto_store *s, const char *task, sheaf_answer *a) {
    donto_sheaf_reg_model info;
    donto_err e = {0};
    if (donto_sheaf_registry_active_info(s, task, &info, &e)) {
        if (donto_err_code(&e) == DONTO_E_NOT_FOUND) {
            *a = err_answer(sv, 404, "no_active_model",
                            "task '%s' has no active model (donto-sheaf register ... --activate, or models activate)",
                            task);
            return NULL;
        }
        *a = store_failure(sv, "the registry", &e);
        return NULL;
    }
    int64_t want = info.id;
    donto_sheaf_reg_model_free(&info);
    pthread_mutex_lock(&sv->mu);
    loaded *l = find_locked(sv, task);
    if (l && l->id == want) {
        l->refs++;
        pthread_mutex_unlock(&sv->mu);
        return l;
    }
    pthread_mutex_unlock(&sv->mu);

    /* Load it (one loader at a time; another may have done it meanwhile). */
    pthread_mutex_lock(&sv->load_mu);
    pthread_mutex_lock(&sv->mu);
    l = find_locked(sv, task);
    if (l && l->id == want) {
        l->refs++;
        pthread_mutex_unlock(&sv->mu);
        pthread_mutex_unlock(&sv->load_mu);
        return l;
    }
    pthread_mutex_unlock(&sv->mu);
    donto_sheaf_reg_model m;
    if (donto_sheaf_registry_active(s, task, &m, &e)) { /* it may have changed again: take what is active now */
        pthread_mutex_unlock(&sv->load_mu);
        if (donto_err_code(&e) == DONTO_E_NOT_FOUND) {
            *a = err_answer(sv, 404, "no_active_model", "task '%s' has no active model", task);
            return NULL;
        }
        *a = store_failure(sv, "the registry", &e);
        return NULL;
    }
    donto_sheaf_op *op = donto_sheaf_op_load((const char *)m.checkpoint, m.checkpoint_len, &e);
    if (!op) {
        /* It passed the gate when it was registered: a database that changed under us. */
        DLOG_ERROR("coord: sheaf: model %lld (%s) of task %s does not load: %s", (long long)m.id, m.name, task, e.msg);
        *a = err_answer(sv, 500, "model_unloadable", "the active model of task '%s' (%s) does not load", task, m.name);
        donto_sheaf_reg_model_free(&m);
        pthread_mutex_unlock(&sv->load_mu);
        return NULL;
    }
    loaded *nl = calloc(1, sizeof *nl);
    if (!nl) {
        donto_sheaf_op_free(op);
        donto_sheaf_reg_model_free(&m);
        pthread_mutex_unlock(&sv->load_mu);
        *a = err_answer(sv, 500, "internal", "out of memory");
        return NULL;
    }
    nl->op = op;
    nl->id = m.id;
    snprintf(nl->name, sizeof nl->name, "%s", m.name);
    snprintf(nl->task, sizeof nl->task, "%s", task);
    nl->refs = 2; /* the cache's and this request's */
    donto_sheaf_reg_model_free(&m);
    pthread_mutex_lock(&sv->mu);
    loaded *old = find_locked(sv, task);
    if (old) {
        for (int i = 0; i < sv->ncur; i++)
            if (sv->cur[i] == old) sv->cur[i] = nl;
        unref_locked(old); /* freed now, or by the last request still using it */
    } else if (sv->ncur < MAX_TASKS) {
        sv->cur[sv->ncur++] = nl;
    } else {
        nl->refs = 1; /* not cached: this request's only */
    }
    pthread_mutex_unlock(&sv->mu);
    pthread_mutex_unlock(&sv->load_mu);
    atomic_fetch_add(&sv->reloads, 1);
    DLOG_INFO("coord: sheaf: task %s now served by model %lld (%s, %s)%s", task, (long long)nl->id, nl->name,
              donto_sheaf_op_family_name(op), old ? " (replacing the previous one)" : "");
    return nl;
}

static void let_go(sheaf_srv *sv, loaded *l) {
    pthread_mutex_lock(&sv->mu);
    unref_locked(l);
    pthread_mutex_unlock(&sv->mu);
}

static int task_name_ok(const char *t) {
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > 63) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_' || t[i] == '-')) return 0;
    return 1;
}

sheaf_answer sheaf_srv_infer(sheaf_srv *sv, donto_store *s, const char *task, const char *body, size_t len) {
    atomic_fetch_add(&sv->requests, 1);
    if (!task_name_ok(task))
        return err_answer(sv, 400, "bad_request",
                          task ? "task must be 1-63 characters of a-z, 0-9, '_' and '-'"
                               : "missing query parameter task (e.g. /sheaf/infer?task=arg_link)");
    if (!body || !len) return err_answer(sv, 400, "bad_request", "the body must be a graph in the export format");
    double t0 = donto_now();
    sheaf_answer a = {500, NULL};
    loaded *l = hold(sv, s, task, &a);
    if (!l) return a;
    donto_sheaf_op *op = l->op;
    donto_graph g;
    donto_err e = {0};
    /* An edge task's queries are the pairs of the body's task of that name; a node task reads
     * features and edges only (the body may carry no task at all). */
    int edge = donto_sheaf_op_task(op) == DONTO_TASK_EDGE;
    if (donto_graph_load_json(&g, body, len, "request", edge ? task : NULL, &e)) {
        let_go(sv, l);
        return err_answer(sv, 400, "bad_graph", "%s", e.msg);
    }
    if ((size_t)g.n > sv->lim.max_nodes || (edge && (size_t)g.npairs > sv->lim.max_pairs)) {
        a = err_answer(sv, 400, "graph_too_large", "the graph has %d nodes%s%d pairs; at most %zu nodes and %zu pairs",
                       g.n, edge ? " and " : " (", edge ? g.npairs : 0, sv->lim.max_nodes, sv->lim.max_pairs);
        goto out;
    }
    if (edge && g.task_kind != DONTO_TASK_EDGE) {
        a = err_answer(sv, 400, "bad_graph", "task '%s' is an edge task: the graph needs a task with \"pairs\" to score",
                       task);
        goto out;
    }
    size_t rows = edge ? (size_t)g.npairs : (size_t)g.n;
    int K = donto_sheaf_op_classes(op);
    float *p = malloc((rows ? rows : 1) * (size_t)K * sizeof *p);
    if (!p) {
        a = err_answer(sv, 500, "internal", "out of memory for %zu x %d probabilities", rows, K);
        goto out;
    }
    if (donto_sheaf_op_infer(op, &g, DONTO_SHEAF_OUT_PROBS, p, rows * (size_t)K, &e)) {
        free(p);
        a = err_answer(sv, donto_err_code(&e) == DONTO_E_NOMEM ? 503 : 400,
                       donto_err_code(&e) == DONTO_E_NOMEM ? "busy" : "bad_graph", "%s", e.msg);
        goto out;
    }
    json_t *o = json_object(), *cls = json_array(), *out = json_array();
    for (int k = 0; k < K; k++) {
        const char *nm = donto_sheaf_op_class_name(op, k);
        json_array_append_new(cls, nm ? json_string(nm) : json_integer(k));
    }
    for (size_t r = 0; r < rows; r++) {
        const float *pr = p + r * (size_t)K;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (pr[k] > pr[best]) best = k;
        json_t *row = json_object(), *pj = json_array();
        for (int k = 0; k < K; k++) json_array_append_new(pj, json_real(pr[k]));
        if (edge) {
            int u = g.pu[r], v = g.pv[r];
            json_object_set_new(row, "pair", json_pack("[ss]", g.ids ? g.ids[u] : "", g.ids ? g.ids[v] : ""));
        } else {
            json_object_set_new(row, "node", json_string(g.ids ? g.ids[r] : ""));
        }
        const char *bn = donto_sheaf_op_class_name(op, best);
        json_object_set_new(row, "class", bn ? json_string(bn) : json_integer(best));
        json_object_set_new(row, "probs", pj);
        json_array_append_new(out, row);
    }
    free(p);
    json_object_set_new(o, "task", json_string(task));
    json_object_set_new(o, "model", json_pack("{s:I, s:s, s:s}", "id", (json_int_t)l->id, "name", l->name, "family",
                                              donto_sheaf_op_family_name(op)));
    json_object_set_new(o, "kind", json_string(edge ? "edge" : "node"));
    json_object_set_new(o, "classes", cls);
    json_object_set_new(o, "rows", out);
    json_object_set_new(o, "ms", json_real((donto_now() - t0) * 1e3));
    a.status = 200;
    a.json = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    atomic_fetch_add(&sv->rows, rows);
out:
    donto_graph_free(&g);
    let_go(sv, l);
    return a;
}

sheaf_answer sheaf_srv_models(sheaf_srv *sv, donto_store *s) {
    atomic_fetch_add(&sv->requests, 1);
    donto_sheaf_reg_model *m = NULL;
    size_t n = 0;
    donto_err e = {0};
    if (donto_sheaf_registry_list(s, NULL, &m, &n, &e)) return store_failure(sv, "the registry", &e);
    json_t *o = json_object(), *act = json_array();
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].state, "active")) continue;
        json_t *r = json_pack("{s:s, s:I, s:s, s:s}", "task", m[i].task, "id", (json_int_t)m[i].id, "name", m[i].name,
                              "family", m[i].family);
        if (m[i].parity_max_abs == m[i].parity_max_abs)
            json_object_set_new(r, "parity_max_abs", json_real(m[i].parity_max_abs));
        pthread_mutex_lock(&sv->mu);
        loaded *l = find_locked(sv, m[i].task);
        json_object_set_new(r, "loaded", json_boolean(l && l->id == m[i].id));
        pthread_mutex_unlock(&sv->mu);
        json_array_append_new(act, r);
    }
    donto_sheaf_reg_models_free(m, n);
    json_object_set_new(o, "active", act);
    sheaf_answer a = {200, json_dumps(o, JSON_COMPACT)};
    json_decref(o);
    return a;
}
