/* donto-accel: `donto-sheaf score` proper (include/donto/sheaf_score.h,
 * docs/sheaf-serving.md "Scores").
 *
 * Design:
 *   - One read: donto_sheafx_live_read gives the substrate as of now as a graph
 *     built by the export's own code (so the same filters: nothing sheaf-written,
 *     nothing asserted after now), with the claims changed since the watermark.
 *   - Items: claim_score, each changed claim (a node); arg_link, each pair
 *     (changed claim u, claim v) joined by a shares_* edge of the graph with no
 *     argument between them in either direction (any context, any time), one
 *     direction per pair (source: the changed claim; both changed: the lower node);
 *     identity, entity pairs (subject of u, subject of v) for a changed claim u and
 *     a neighbour claim v with the same object (and (object, object) for the same
 *     subject), not already joined by an identity statement.
 *   - Batches: items in order, each with its end nodes and their `hops` rounds of
 *     neighbours, until max_nodes nodes; the induced subgraph goes to the operator
 *     (donto_sheaf_op_infer_arrays), and the batch's rows are written in one
 *     transaction that first deletes this model's older scores of the same items.
 *   - The run row (watermark: the newest tx time the read saw) is written last, so
 *     a run that fails leaves the previous watermark: the next run redoes its work.
 * The SQL of both engines is side by side (sql.c). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/sheaf_export.h"
#include "donto/sheaf_op.h"
#include "donto/sheaf_registry.h"
#include "donto/sheaf_score.h"
#include "score_int.h"

void donto_sheaf_score_opts_init(donto_sheaf_score_opts *o) {
    memset(o, 0, sizeof *o);
    o->hops = 1;
    o->max_nodes = 50000;
    o->propose_min = 0.9;
}

/* ---- a set of node pairs ------------------------------------------------------- */

typedef struct pset {
    uint64_t *k;
    size_t cap, n;
} pset;
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static uint64_t ukey(int32_t u, int32_t v) {
    return u < v ? (uint64_t)(uint32_t)u << 32 | (uint32_t)v : (uint64_t)(uint32_t)v << 32 | (uint32_t)u;
}
static int ps_has(const pset *p, uint64_t key) {
    if (!p->cap) return 0;
    for (size_t h = mix(key) & (p->cap - 1); p->k[h] != UINT64_MAX; h = (h + 1) & (p->cap - 1))
        if (p->k[h] == key) return 1;
    return 0;
}
static int ps_add(pset *p, uint64_t key) {
    if (2 * (p->n + 1) > p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 1024;
        uint64_t *k = donto_xmalloc(nc * sizeof *k);
        for (size_t i = 0; i < nc; i++) k[i] = UINT64_MAX;
        for (size_t i = 0; i < p->cap; i++)
            if (p->k[i] != UINT64_MAX) {
                size_t h = mix(p->k[i]) & (nc - 1);
                while (k[h] != UINT64_MAX) h = (h + 1) & (nc - 1);
                k[h] = p->k[i];
            }
        free(p->k);
        p->k = k, p->cap = nc;
    }
    size_t h = mix(key) & (p->cap - 1);
    for (; p->k[h] != UINT64_MAX; h = (h + 1) & (p->cap - 1))
        if (p->k[h] == key) return 0;
    p->k[h] = key, p->n++;
    return 1;
}

/* ---- items ---------------------------------------------------------------------- */

typedef struct items {
    int32_t *u, *v; /* v -1 for a node task */
    size_t n, cap;
} items;
static void items_add(items *it, int32_t u, int32_t v) {
    if (it->n == it->cap) {
        it->cap = it->cap ? 2 * it->cap : 1024;
        it->u = donto_xrealloc(it->u, it->cap * sizeof *it->u);
        it->v = donto_xrealloc(it->v, it->cap * sizeof *it->v);
    }
    it->u[it->n] = u, it->v[it->n++] = v;
}

/* Undirected adjacency of the live graph (CSR). */
typedef struct adj {
    int64_t *off;
    int32_t *nb;
    uint8_t *type;
} adj;
static void adj_build(const donto_sheafx_live *L, adj *a) {
    size_t nn = L->nclaims + L->nentities;
    a->off = donto_xcalloc(nn + 1, sizeof *a->off);
    for (size_t k = 0; k < L->nedges; k++) a->off[L->src[k] + 1]++, a->off[L->dst[k] + 1]++;
    for (size_t i = 0; i < nn; i++) a->off[i + 1] += a->off[i];
    a->nb = donto_xmalloc(((size_t)a->off[nn] + 1) * sizeof *a->nb);
    a->type = donto_xmalloc((size_t)a->off[nn] + 1);
    int64_t *fill = donto_xmalloc((nn + 1) * sizeof *fill);
    memcpy(fill, a->off, (nn + 1) * sizeof *fill);
    for (size_t k = 0; k < L->nedges; k++) {
        int32_t u = L->src[k], v = L->dst[k];
        a->nb[fill[u]] = v, a->type[fill[u]++] = L->etype[k];
        a->nb[fill[v]] = u, a->type[fill[v]++] = L->etype[k];
    }
    free(fill);
}
static void adj_free(adj *a) { free(a->off), free(a->nb), free(a->type); }

enum { ET_SHARES_FIRST = 5, ET_SHARES_LAST = 7 };

static void pick_items(int task, const donto_sheafx_live *L, const adj *a, items *it) {
    size_t nc = L->nclaims;
    if (task == SC_CLAIM_SCORE) {
        for (size_t j = 0; j < nc; j++)
            if (L->changed[j]) items_add(it, (int32_t)j, -1);
        return;
    }
    pset known = {0}, seen = {0};
    if (task == SC_ARG_LINK)
        for (size_t k = 0; k < L->nargued; k++) ps_add(&known, ukey(L->argued[2 * k], L->argued[2 * k + 1]));
    else
        for (size_t k = 0; k < L->nident; k++) ps_add(&known, ukey(L->ident[2 * k], L->ident[2 * k + 1]));
    for (size_t j = 0; j < nc; j++) {
        if (!L->changed[j]) continue;
        int32_t u = (int32_t)j;
        for (int64_t e = a->off[u]; e < a->off[u + 1]; e++) {
            int32_t v = a->nb[e];
            if (a->type[e] < ET_SHARES_FIRST || a->type[e] > ET_SHARES_LAST || (size_t)v >= nc) continue;
            if (task == SC_ARG_LINK) {
                if (L->changed[v] && v < u) continue; /* that pair is v's */
                uint64_t k = ukey(u, v);
                if (ps_has(&known, k) || !ps_add(&seen, k)) continue;
                items_add(it, u, v);
            } else {
                int32_t p[2][2] = {{L->subj[u], L->subj[v]}, {L->obj[u], L->obj[v]}};
                int same[2] = {L->obj[u] >= 0 && L->obj[u] == L->obj[v], L->subj[u] >= 0 && L->subj[u] == L->subj[v]};
                for (int s = 0; s < 2; s++) {
                    int32_t x = p[s][0], y = p[s][1];
                    if (!same[s] || x < 0 || y < 0 || x == y) continue;
                    uint64_t k = ukey(x, y);
                    if (ps_has(&known, k) || !ps_add(&seen, k)) continue;
                    items_add(it, x < y ? x : y, x < y ? y : x);
                }
            }
        }
    }
    free(known.k), free(seen.k);
}

/* ---- the run -------------------------------------------------------------------- */

static void progress(const donto_sheaf_score_opts *o, const char *phase, int64_t done, int64_t total) {
    if (o->progress) o->progress(o->ctx, phase, done, total);
}

int donto_sheaf_score(donto_store *s, const donto_sheaf_score_opts *o, donto_sheaf_score_stats *st, donto_err *err) {
    donto_sheaf_score_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    double t0 = donto_now();
    int task = sc_task_parse(o->task);
    if (task < 0) return donto_seterrc(err, DONTO_E_INVALID, "unknown task '%s' (arg_link, identity or claim_score)", o->task ? o->task : "");
    if (donto_sheaf_registry_schema_check(s, err)) return -1;
    donto_sheaf_reg_model m = {0};
    if (donto_sheaf_registry_active(s, o->task, &m, err)) {
        if (donto_err_code(err) == DONTO_E_NOT_FOUND)
            donto_seterrc(err, DONTO_E_NOT_FOUND, "no active model for task %s; register and activate one (donto-sheaf register/models activate)", o->task);
        return -1;
    }
    snprintf(st->model, sizeof st->model, "%s", m.name);
    st->model_id = m.id;
    int rc = -1;
    donto_sheaf_op *op = donto_sheaf_op_load((const char *)m.checkpoint, m.checkpoint_len, err);
    donto_sheafx_live L = {0};
    adj A = {0};
    items it = {0};
    int32_t *loc = NULL, *nodes = NULL, *bsrc = NULL, *bdst = NULL, *pu = NULL, *pv = NULL;
    float *x = NULL, *out = NULL;
    sc_writer *w = NULL;
    if (!op) goto done;
    int want_kind = task == SC_CLAIM_SCORE ? DONTO_TASK_NODE : DONTO_TASK_EDGE;
    int K = donto_sheaf_op_classes(op);
    int want_k = task == SC_CLAIM_SCORE ? 2 : task == SC_ARG_LINK ? 6 : 2;
    if (donto_sheaf_op_task(op) != want_kind || K != want_k) {
        donto_seterrc(err, DONTO_E_INVALID, "model '%s' is a %s task with %d classes, not %s's (%s, %d classes)", m.name,
                      donto_sheaf_op_task(op) == DONTO_TASK_NODE ? "node" : "edge", K, o->task,
                      want_kind == DONTO_TASK_NODE ? "node" : "edge", want_k);
        goto done;
    }
    /* The watermark: --since, or the last finished run of this task and model. */
    st->since = INT64_MIN;
    if (o->has_since) st->since = o->since;
    else if (sc_last_watermark(s, o->task, m.id, &st->since, err)) goto done;
    donto_sheafx_opts xo;
    donto_sheafx_opts_init(&xo);
    xo.model = o->model && *o->model ? o->model : xo.model;
    xo.as_of = donto_unix_ms();
    xo.progress = o->progress, xo.ctx = o->ctx;
    if (donto_sheafx_live_read(s, &xo, st->since, &L, err)) goto done;
    st->read_s = L.seconds;
    if (L.dims != donto_sheaf_op_feature_dim(op)) {
        donto_seterrc(err, DONTO_E_INVALID,
                      "model '%s' takes %d features per node, but the stored vectors of '%s' have %d "
                      "(score with --model naming the vectors it was trained on)",
                      m.name, donto_sheaf_op_feature_dim(op), xo.model, L.dims);
        goto done;
    }
    st->watermark = L.watermark;
    size_t nn = L.nclaims + L.nentities;
    st->nodes = (int64_t)nn, st->edges = (int64_t)L.nedges, st->changed = (int64_t)L.nchanged;
    if (task == SC_IDENTITY && L.nentities == 0) {
        donto_seterrc(err, DONTO_E_NOT_FOUND, "identity needs entity nodes, and the vectors of '%s' have none for entities", xo.model);
        goto done;
    }
    adj_build(&L, &A);
    pick_items(task, &L, &A, &it);
    progress(o, "items", (int64_t)it.n, (int64_t)it.n);
    const char *cls[8];
    static const char *const DEF[3][6] = {{"none", "supports", "rebuts", "undercuts", "undermines", "qualifies"},
                                          {"distinct", "same"}, {"live", "retracted"}};
    for (int k = 0; k < K; k++) {
        const char *nm = donto_sheaf_op_class_name(op, k);
        cls[k] = nm ? nm : DEF[task][k];
    }
    w = sc_writer_open(s, m.id, m.name, o->task, err);
    if (!w) goto done;
    /* Batches. */
    int64_t cap = o->max_nodes > 0 ? o->max_nodes : INT64_MAX;
    int F = L.dims;
    loc = donto_xmalloc((nn + 1) * sizeof *loc);
    for (size_t i = 0; i < nn; i++) loc[i] = -1;
    nodes = donto_xmalloc((nn + 1) * sizeof *nodes);
    size_t bcap = 1024;
    pu = donto_xmalloc(bcap * sizeof *pu), pv = donto_xmalloc(bcap * sizeof *pv);
    size_t next = 0;
    while (next < it.n) {
        size_t nb = 0, first = next, head = 0;
#define ADD(g)                                                  \
    do {                                                        \
        if (loc[g] < 0) loc[g] = (int32_t)nb, nodes[nb++] = (g); \
    } while (0)
        /* Items with their ends; then hops rounds from them while under cap. */
        while (next < it.n && (first == next || (int64_t)nb + 2 <= cap)) {
            ADD(it.u[next]);
            if (it.v[next] >= 0) ADD(it.v[next]);
            next++;
            if ((int64_t)nb * 2 >= cap && next - first >= 1) break; /* leave room for neighbours */
        }
        for (int h = 0; h < o->hops && (int64_t)nb < cap; h++) {
            size_t end = nb;
            for (; head < end && (int64_t)nb < cap; head++) {
                int32_t g = nodes[head];
                for (int64_t e = A.off[g]; e < A.off[g + 1] && (int64_t)nb < cap; e++) ADD(A.nb[e]);
            }
        }
#undef ADD
        /* The induced subgraph. */
        size_t ne = 0, ecap = 0;
        for (size_t i = 0; i < nb; i++) {
            int32_t g = nodes[i];
            for (int64_t e = A.off[g]; e < A.off[g + 1]; e++) {
                int32_t h2 = A.nb[e];
                if (h2 <= g || loc[h2] < 0) continue;
                if (ne == ecap) {
                    ecap = ecap ? 2 * ecap : 4096;
                    bsrc = donto_xrealloc(bsrc, ecap * sizeof *bsrc), bdst = donto_xrealloc(bdst, ecap * sizeof *bdst);
                }
                bsrc[ne] = (int32_t)i, bdst[ne++] = loc[h2];
            }
        }
        x = donto_xrealloc(x, (nb * (size_t)F + 1) * sizeof *x);
        for (size_t i = 0; i < nb; i++) memcpy(x + i * (size_t)F, L.x + (size_t)nodes[i] * (size_t)F, (size_t)F * sizeof *x);
        size_t ni = next - first, rows = task == SC_CLAIM_SCORE ? nb : ni;
        if (ni > bcap) {
            bcap = ni;
            pu = donto_xrealloc(pu, bcap * sizeof *pu), pv = donto_xrealloc(pv, bcap * sizeof *pv);
        }
        for (size_t i = 0; i < ni; i++) pu[i] = loc[it.u[first + i]], pv[i] = it.v[first + i] >= 0 ? loc[it.v[first + i]] : -1;
        out = donto_xrealloc(out, (rows * (size_t)K + 1) * sizeof *out);
        int r = task == SC_CLAIM_SCORE
                    ? donto_sheaf_op_infer_arrays(op, (int)nb, F, x, (int)ne, bsrc, bdst, 0, NULL, NULL, DONTO_SHEAF_OUT_PROBS,
                                                  out, rows * (size_t)K, err)
                    : donto_sheaf_op_infer_arrays(op, (int)nb, F, x, (int)ne, bsrc, bdst, (int)ni, pu, pv, DONTO_SHEAF_OUT_PROBS,
                                                  out, rows * (size_t)K, err);
        if (r) goto done;
        /* Write: one transaction for the batch. */
        if (sc_writer_begin(w, err)) goto done;
        for (size_t i = 0; i < ni; i++) {
            const float *p = task == SC_CLAIM_SCORE ? out + (size_t)pu[i] * (size_t)K : out + i * (size_t)K;
            const char *a = L.item[it.u[first + i]], *b = it.v[first + i] >= 0 ? L.item[it.v[first + i]] : NULL;
            if (sc_writer_item(w, a, b, cls, p, K, err)) goto done;
            if (task == SC_ARG_LINK && o->propose_min <= 1.0) {
                int best = 1;
                for (int k = 2; k < K; k++)
                    if (p[k] > p[best]) best = k;
                if (p[best] >= o->propose_min) {
                    if (sc_writer_propose(w, a, b, cls[best], p[best], err)) goto done;
                }
            }
        }
        if (sc_writer_commit(w, &st->rows, &st->proposed, err)) goto done;
        for (size_t i = 0; i < nb; i++) loc[nodes[i]] = -1;
        st->items += (int64_t)ni;
        st->batches++;
        progress(o, "scored", st->items, (int64_t)it.n);
    }
    if (sc_writer_finish(w, st->watermark, st->rows, err)) goto done;
    rc = 0;
done:
    sc_writer_close(w);
    free(loc), free(nodes), free(bsrc), free(bdst), free(pu), free(pv), free(x), free(out);
    free(it.u), free(it.v);
    adj_free(&A);
    donto_sheafx_live_free(&L);
    donto_sheaf_op_free(op);
    donto_sheaf_reg_model_free(&m);
    st->seconds = donto_now() - t0;
    st->items_per_s = st->seconds > 0 ? (double)st->items / st->seconds : 0;
    return rc;
}
