/*
 * Neural Sheaf Diffusion (Diag, O(d), General) and a GCN baseline: the model and the
 * forward / backward drivers. The operations live one per file, forward and backward
 * side by side (the list is atop sheaf_int.h); this file builds the parameter table and
 * the buffers and chains the ops:
 *
 *   NSD: x -> input head (heads.c) -> L diffusion layers (diffusion.c, which runs learner.c
 *        and laplacian.c) -> output head (heads.c) -> log-softmax + NLL
 *   GCN: x -> gcn.c -> log-softmax + NLL
 *   MLP: x -> mlp.c -> log-softmax + NLL        (the baseline without the graph)
 *   edge tasks: any of the above up to its logits [N][K] (K = hidden: the node representation)
 *        -> decoder.c (pair features, 2-layer MLP) -> log-softmax + class-weighted NLL on pairs
 *
 * Shapes: see include/donto/sheaf.h. Everything graph-shaped runs over the edge list
 * or its per-node CSR; each output element is written by exactly one loop iteration
 * in a fixed order, so results are identical for any OpenMP thread count.
 *
 * Memory (policy atop sheaf_int.h): donto_sheaf_model_new allocates every graph-sized
 * buffer before any work, checked, and fails with an error naming the size; the scratch
 * of forward/backward goes through sheaf_xalloc, which aborts on OOM.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

void *sheaf_xalloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "donto-sheaf: out of memory: %.0f bytes for %s (training aborts on OOM: src/sheaf/sheaf_int.h)\n",
                (double)n * size, what);
        abort();
    }
    return p;
}

/* ------------------------------------------------------------------ */
/* parameters and initialisation                                        */

typedef struct { uint64_t s; } rng;
static double rng_u(rng *r) { return (double)(sheaf_mix64(r->s++) >> 11) * (1.0 / 9007199254740992.0); }
static double rng_n(rng *r) {
    double u1 = rng_u(r), u2 = rng_u(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int add_tensor(donto_sheaf_model *m, const char *name, int rows, int cols, int sheaf_group) {
    donto_sheaf_tensor *t = &m->t[m->nt];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols, t->size = (size_t)rows * cols, t->off = m->np;
    t->sheaf_group = sheaf_group;
    m->np += t->size;
    return m->nt++;
}

/* torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
static void init_uniform(float *w, size_t n, int fan_in, rng *r) {
    double b = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0.0;
    for (size_t i = 0; i < n; i++) w[i] = (float)((2.0 * rng_u(r) - 1.0) * b);
}
static void init_orthogonal(float *w, int c, rng *r) {
    double *a = donto_xmalloc(sizeof(double) * c * c);
    for (int i = 0; i < c * c; i++) a[i] = rng_n(r);
    /* Gram-Schmidt on rows (twice for stability) */
    for (int i = 0; i < c; i++) {
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < i; j++) {
                double dot = 0;
                for (int k = 0; k < c; k++) dot += a[i * c + k] * a[j * c + k];
                for (int k = 0; k < c; k++) a[i * c + k] -= dot * a[j * c + k];
            }
        double nrm = 0;
        for (int k = 0; k < c; k++) nrm += a[i * c + k] * a[i * c + k];
        nrm = sqrt(nrm);
        for (int k = 0; k < c; k++) a[i * c + k] /= nrm;
    }
    for (int i = 0; i < c * c; i++) w[i] = (float)a[i];
    free(a);
}

void donto_sheaf_hp_default(donto_sheaf_hp *hp) {
    memset(hp, 0, sizeof *hp);
    hp->family = DONTO_SHEAF_DIAG;
    hp->orth = DONTO_ORTH_HOUSEHOLDER;
    hp->d = 2, hp->layers = 2, hp->hidden = 20;
    hp->left_weights = hp->right_weights = 1;
    hp->edge_weights = 1;
    hp->lr = 0.01f, hp->weight_decay = 5e-4f, hp->sheaf_decay = -1.0f; /* < 0: = weight_decay */
    hp->epochs = 1500, hp->patience = 200;
    hp->stop_acc = DONTO_STOP_AUTO;
    hp->seed = 43;
}

const char *donto_sheaf_family_name(int family) {
    switch (family) {
    case DONTO_SHEAF_DIAG: return "diag";
    case DONTO_SHEAF_ORTH: return "orth";
    case DONTO_SHEAF_GENERAL: return "general";
    case DONTO_SHEAF_GCN: return "gcn";
    case DONTO_SHEAF_MLP: return "mlp";
    }
    return "?";
}

int donto_sheaf_family_parse(const char *s, int *family, int *orth) {
    if (!strcmp(s, "diag")) *family = DONTO_SHEAF_DIAG;
    else if (!strcmp(s, "orth") || !strcmp(s, "bundle") || !strcmp(s, "o(d)") || !strcmp(s, "householder"))
        *family = DONTO_SHEAF_ORTH, *orth = !strcmp(s, "householder") ? DONTO_ORTH_HOUSEHOLDER : *orth;
    else if (!strcmp(s, "cayley")) *family = DONTO_SHEAF_ORTH, *orth = DONTO_ORTH_CAYLEY;
    else if (!strcmp(s, "general") || !strcmp(s, "gen")) *family = DONTO_SHEAF_GENERAL;
    else if (!strcmp(s, "gcn")) *family = DONTO_SHEAF_GCN;
    else if (!strcmp(s, "mlp")) *family = DONTO_SHEAF_MLP;
    else return -1;
    return 0;
}

const donto_sheaf_hp *donto_sheaf_model_hp(const donto_sheaf_model *m) { return &m->hp; }
const donto_sheaf_origin *donto_sheaf_model_origin(const donto_sheaf_model *m) { return &m->origin; }
float *donto_sheaf_params(donto_sheaf_model *m, size_t *np) {
    if (np) *np = m->np;
    return m->p;
}
float *donto_sheaf_grads(donto_sheaf_model *m) { return m->g; }
int donto_sheaf_model_task(const donto_sheaf_model *m) { return m->task; }
int donto_sheaf_model_classes(const donto_sheaf_model *m) { return m->task == DONTO_TASK_EDGE ? m->Kc : m->K; }
const float *donto_sheaf_class_weights(const donto_sheaf_model *m) { return m->cw; }

void donto_sheaf_set_class_weights(donto_sheaf_model *m, const donto_graph *g, int split) {
    int K = donto_sheaf_model_classes(m);
    for (int c = 0; c < K; c++) m->cw[c] = 1.0f;
    if (m->task != DONTO_TASK_EDGE || g->npairs != m->npairs || split < 0 || split >= g->nsplits || !g->ptrain) return;
    long *cnt = sheaf_xalloc((size_t)K, sizeof(long), "class counts"), tot = 0;
    const uint8_t *mask = g->ptrain + (size_t)split * g->npairs;
    for (int p = 0; p < g->npairs; p++)
        if (mask[p] && g->pc[p] >= 0 && g->pc[p] < K) cnt[g->pc[p]]++, tot++;
    for (int c = 0; c < K; c++) m->cw[c] = cnt[c] ? (float)((double)tot / ((double)K * cnt[c])) : 0.0f;
    free(cnt);
}

const donto_sheaf_tensor *donto_sheaf_tensors(const donto_sheaf_model *m, int *count) {
    *count = m->nt;
    return m->t;
}
static int learner_outputs(const donto_sheaf_hp *hp) {
    switch (hp->family) {
    case DONTO_SHEAF_DIAG: return hp->d;
    case DONTO_SHEAF_ORTH: return hp->d * (hp->d - 1) / 2;
    default: return hp->d * hp->d;
    }
}


/* ------------------------------------------------------------------ */
/* buffers: every graph-sized one, allocated up front and checked       */

/* calloc that records the first failure and then allocates nothing more */
typedef struct {
    double bytes; /* the request that failed (0: none) */
    const char *what;
} ckalloc;

static void *ck(ckalloc *c, size_t n, size_t size, const char *what) {
    if (c->what) return NULL;
    void *p = calloc(n ? n : 1, size);
    if (!p) c->bytes = (double)(n ? n : 1) * size, c->what = what;
    return p;
}
#define FBUF(n, what) ck(c, (n), sizeof(float), what)
#define BBUF(n, what) ck(c, (n), 1, what)

static void model_alloc(donto_sheaf_model *m, ckalloc *c, int **fill) {
    const donto_sheaf_hp *hp = &m->hp;
    int n = m->n, L = m->L;
    /* graph: edges + CSR + degrees */
    m->eu = ck(c, m->ne, sizeof(int), "edge list");
    m->ev = ck(c, m->ne, sizeof(int), "edge list");
    m->adj_off = ck(c, (size_t)n + 1, sizeof(int), "adjacency (CSR offsets)");
    m->adj_k = ck(c, 2 * (size_t)m->ne + 1, sizeof(int), "adjacency (CSR)");
    m->adj_side = BBUF(2 * (size_t)m->ne + 1, "adjacency (CSR)");
    *fill = ck(c, n, sizeof(int), "adjacency (CSR fill counts)"); /* the caller frees it */
    m->deg = FBUF(n, "node degrees"), m->fix_diag = FBUF(n, "fixed Laplacian dims");
    m->fix_off = FBUF(m->ne, "fixed Laplacian dims");
    /* parameters, gradients, Adam moments */
    m->p = FBUF(m->np, "parameters"), m->g = FBUF(m->np, "gradients");
    m->adam_m = FBUF(m->np, "Adam moments"), m->adam_v = FBUF(m->np, "Adam moments");

    /* activations */
    size_t NH = (size_t)n * m->H, E2 = 2 * (size_t)m->ne, Eu = (size_t)m->ne;
    size_t dd = (size_t)m->d * m->d, dpb = m->dense ? (size_t)m->dp * m->dp : (size_t)m->dp;
    m->logits = FBUF((size_t)n * m->K, "logits"), m->logp = FBUF((size_t)n * m->K, "log-probabilities");
    {
        int out0 = hp->family == DONTO_SHEAF_GCN || hp->family == DONTO_SHEAF_MLP ? (L == 1 ? m->K : m->C) : m->H;
        m->WT = FBUF((size_t)m->f * out0, "first-layer weight (transposed)");
        m->dWT = FBUF((size_t)m->f * out0, "first-layer gradient (transposed)");
    }
    m->inmask = BBUF((size_t)n * m->f, "input dropout mask");
    if (hp->input_dropout > 0) m->xin = FBUF((size_t)n * m->f, "dropped-out input features");
    if (m->task == DONTO_TASK_EDGE) {
        size_t P = (size_t)m->npairs;
        m->pz = FBUF(P * m->Zd, "pair features"), m->dz_in = FBUF(P * m->Zd, "pair feature gradients");
        m->pa = FBUF(P * m->Hd, "decoder activations"), m->pr = FBUF(P * m->Hd, "decoder activations");
        m->da = FBUF(P * m->Hd, "decoder gradients"), m->dr = FBUF(P * m->Hd, "decoder gradients");
        m->plogits = FBUF(P * m->Kc, "pair logits"), m->plogp = FBUF(P * m->Kc, "pair log-probabilities");
        m->dplogits = FBUF(P * m->Kc, "pair logit gradients");
        m->demb = FBUF((size_t)n * m->K, "node representation gradients");
    }
    m->cw = FBUF(m->task == DONTO_TASK_EDGE ? m->Kc : m->K, "class weights");
    if (hp->family == DONTO_SHEAF_GCN || hp->family == DONTO_SHEAF_MLP) {
        m->gH = donto_xcalloc(L, sizeof(float *)), m->gA = donto_xcalloc(L, sizeof(float *));
        m->gT = donto_xcalloc(L, sizeof(float *)), m->gmask = donto_xcalloc(L, sizeof(uint8_t *));
        for (int l = 0; l < L; l++) {
            int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
            if (l > 0) m->gH[l] = FBUF((size_t)n * in, "GCN activations"), m->gmask[l] = BBUF((size_t)n * in, "GCN dropout masks");
            m->gA[l] = FBUF((size_t)n * out, "GCN activations"), m->gT[l] = FBUF((size_t)n * out, "GCN activations");
        }
        size_t w = (size_t)n * (m->C > m->K ? m->C : m->K);
        m->dX = FBUF(w, "backward scratch"), m->dtmp = FBUF(w, "backward scratch"), m->dtmp2 = FBUF(w, "backward scratch");
        return;
    }
    m->h1 = FBUF(NH, "input head activations"), m->hd = FBUF(NH, "input head activations");
    m->hmask = BBUF(NH, "dropout masks");
    m->la = donto_xcalloc(L, sizeof *m->la);
    for (int t = 0; t < L; t++) {
        sheaf_layer_act *a = &m->la[t];
        a->X = FBUF(NH, "layer activations");
        if (t > 0) a->xm = FBUF(NH, "layer activations"), a->mmask = BBUF(NH, "dropout masks");
        a->mz = FBUF(E2 * m->P, "restriction maps");
        if (m->hp.edge_weights) a->sw = FBUF(E2, "edge weights"), a->w = FBUF(Eu, "edge weights");
        if (hp->family == DONTO_SHEAF_ORTH) a->Q = FBUF(E2 * dd, "orthogonal maps");
        size_t nd = hp->family == DONTO_SHEAF_GENERAL ? dd : hp->family == DONTO_SHEAF_DIAG ? (size_t)m->d : 1;
        a->D = FBUF((size_t)n * nd, "Laplacian diagonal"), a->S = FBUF((size_t)n * nd, "Laplacian normalisation");
        if (hp->family == DONTO_SHEAF_GENERAL) {
            a->evals = ck(c, (size_t)n * m->d, sizeof(double), "eigenvalues");
            a->evecs = ck(c, (size_t)n * dd, sizeof(double), "eigenvectors");
        }
        a->Ld = FBUF((size_t)n * dpb, "Laplacian blocks"), a->Lo = FBUF(Eu * dpb, "Laplacian blocks");
        a->Xd = FBUF(NH, "layer activations"), a->dmask = BBUF(NH, "dropout masks");
        a->Y1 = FBUF(NH, "layer activations"), a->Y2 = FBUF(NH, "layer activations");
        a->Z = FBUF(NH, "layer activations");
    }
    m->Xout = FBUF(NH, "layer activations");
    m->dX = FBUF(NH, "backward scratch"), m->dtmp = FBUF(NH, "backward scratch");
    m->dtmp2 = FBUF(NH + 2 * (size_t)n, "backward scratch"), m->dxm = FBUF(NH, "backward scratch");
    m->dLd = FBUF((size_t)n * dpb, "Laplacian gradients"), m->dLo = FBUF(Eu * dpb, "Laplacian gradients");
    m->dmz = FBUF(E2 * (m->P ? m->P : 1), "restriction map gradients");
    m->dS = FBUF((size_t)n * (dd > 1 ? dd : 1) * 2, "Laplacian gradients");
    m->dD = FBUF((size_t)n * (dd > 1 ? dd : 1) * 2, "Laplacian gradients");
    if (m->dense)
        m->dQ = FBUF(E2 * dd, "orthogonal map gradients"), m->gsu = FBUF(Eu * dd, "Laplacian gradients"),
        m->gsv = FBUF(Eu * dd, "Laplacian gradients");
    m->rowsum = FBUF((size_t)n * (m->P > 1 ? m->P : 1), "learner scratch");
    m->colsum = FBUF((size_t)n * (m->P > 1 ? m->P : 1), "learner scratch");
    m->dlogit = FBUF(E2, "edge weight gradients");
}
#undef FBUF
#undef BBUF

donto_sheaf_model *donto_sheaf_model_new(const donto_sheaf_hp *hp, const donto_graph *g, donto_err *err) {
    if (hp->layers < 1 || hp->layers > 64) return donto_seterr(err, "layers must be in 1..64 (got %d)", hp->layers), NULL;
    if (hp->hidden < 1) return donto_seterr(err, "hidden must be >= 1 (got %d)", hp->hidden), NULL;
    int simple = hp->family == DONTO_SHEAF_GCN || hp->family == DONTO_SHEAF_MLP; /* no stalks */
    if (!simple && (hp->d < 1 || hp->d > SHEAF_MAX_D - 2))
        return donto_seterr(err, "d must be in 1..%d (got %d)", SHEAF_MAX_D - 2, hp->d), NULL;
    if (hp->family < 0 || hp->family > DONTO_SHEAF_MLP) return donto_seterr(err, "unknown family %d", hp->family), NULL;
    if (hp->input_dropout < 0 || hp->input_dropout >= 1 || hp->dropout < 0 || hp->dropout >= 1)
        return donto_seterr(err, "dropout must be in [0, 1)"), NULL;
    if (g->n < 1 || g->f < 1 || g->nclass < 2) return donto_seterr(err, "graph needs nodes, features and >= 2 classes"), NULL;
    if (g->task_kind == DONTO_TASK_EDGE && (g->npairs < 1 || !g->pu || !g->pv || !g->pc))
        return donto_seterr(err, "the graph's edge task has no pairs"), NULL;

    donto_sheaf_model *m = donto_xcalloc(1, sizeof *m);
    m->hp = *hp;
    m->origin.split = -1; /* untrained */
    if (m->hp.sheaf_decay < 0) m->hp.sheaf_decay = m->hp.weight_decay;
    if (m->hp.family != DONTO_SHEAF_ORTH) m->hp.edge_weights = 0;
    m->n = g->n, m->f = g->f, m->K = g->nclass;
    m->L = hp->layers;
    m->C = hp->hidden;
    m->task = g->task_kind == DONTO_TASK_EDGE ? DONTO_TASK_EDGE : DONTO_TASK_NODE;
    if (m->task == DONTO_TASK_EDGE) { /* the encoder's output: node representations of width C */
        m->Kc = g->nclass, m->K = m->C, m->Hd = m->C;
        m->directed = g->directed != 0, m->npairs = g->npairs;
        m->Zd = (m->directed ? 4 : 2) * m->K;
    }
    m->d = simple ? 1 : hp->d;
    m->dp = simple ? 1 : hp->d + (hp->add_lp ? 1 : 0) + (hp->add_hp ? 1 : 0);
    m->H = m->dp * m->C;
    m->P = learner_outputs(&m->hp);
    m->dense = hp->family == DONTO_SHEAF_ORTH || hp->family == DONTO_SHEAF_GENERAL;
    m->ne = g->ne;
    int n = m->n, L = m->L;

    /* parameter table */
    m->i_lin1w = m->i_lin1b = m->i_lin12w = m->i_lin12b = m->i_lin2w = m->i_lin2b = -1;
    m->i_dec0w = m->i_dec0b = m->i_dec1w = m->i_dec1b = -1;
    m->i_learn = donto_xmalloc(sizeof(int) * L), m->i_wlearn = donto_xmalloc(sizeof(int) * L);
    m->i_left = donto_xmalloc(sizeof(int) * L), m->i_right = donto_xmalloc(sizeof(int) * L);
    m->i_eps = donto_xmalloc(sizeof(int) * L);
    m->i_gcnw = donto_xmalloc(sizeof(int) * L), m->i_gcnb = donto_xmalloc(sizeof(int) * L);
    for (int t = 0; t < L; t++)
        m->i_learn[t] = m->i_wlearn[t] = m->i_left[t] = m->i_right[t] = m->i_eps[t] = m->i_gcnw[t] = m->i_gcnb[t] = -1;
    char nm[48];
    if (simple) {
        const char *pre = hp->family == DONTO_SHEAF_GCN ? "gcn" : "mlp";
        for (int l = 0; l < L; l++) {
            int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
            snprintf(nm, sizeof nm, "%s.%d.weight", pre, l);
            m->i_gcnw[l] = add_tensor(m, nm, out, in, 0);
            snprintf(nm, sizeof nm, "%s.%d.bias", pre, l);
            m->i_gcnb[l] = add_tensor(m, nm, 1, out, 0);
        }
    } else {
        m->i_lin1w = add_tensor(m, "lin1.weight", m->H, m->f, 0);
        m->i_lin1b = add_tensor(m, "lin1.bias", 1, m->H, 0);
        if (hp->second_linear) {
            m->i_lin12w = add_tensor(m, "lin12.weight", m->H, m->H, 0);
            m->i_lin12b = add_tensor(m, "lin12.bias", 1, m->H, 0);
        }
        for (int t = 0; t < L; t++) {
            snprintf(nm, sizeof nm, "sheaf_learner.%d.weight", t);
            m->i_learn[t] = add_tensor(m, nm, m->P, 2 * m->H, 1);
            if (m->hp.edge_weights) {
                snprintf(nm, sizeof nm, "weight_learner.%d.weight", t);
                m->i_wlearn[t] = add_tensor(m, nm, 1, 2 * m->H, 0);
            }
            if (hp->left_weights) {
                snprintf(nm, sizeof nm, "left.%d.weight", t);
                m->i_left[t] = add_tensor(m, nm, m->dp, m->dp, 0);
            }
            if (hp->right_weights) {
                snprintf(nm, sizeof nm, "right.%d.weight", t);
                m->i_right[t] = add_tensor(m, nm, m->C, m->C, 0);
            }
            snprintf(nm, sizeof nm, "epsilons.%d", t);
            m->i_eps[t] = add_tensor(m, nm, m->dp, 1, 0);
        }
        m->i_lin2w = add_tensor(m, "lin2.weight", m->K, m->H, 0);
        m->i_lin2b = add_tensor(m, "lin2.bias", 1, m->K, 0);
    }
    if (m->task == DONTO_TASK_EDGE) {
        m->i_dec0w = add_tensor(m, "dec.0.weight", m->Hd, m->Zd, 0);
        m->i_dec0b = add_tensor(m, "dec.0.bias", 1, m->Hd, 0);
        m->i_dec1w = add_tensor(m, "dec.1.weight", m->Kc, m->Hd, 0);
        m->i_dec1b = add_tensor(m, "dec.1.bias", 1, m->Kc, 0);
    }

    /* every graph-sized buffer, before any work */
    ckalloc c = {0, NULL};
    int *fill = NULL;
    model_alloc(m, &c, &fill);
    if (c.what) {
        free(fill);
        donto_seterr(err,
                     "out of memory: a %s model (d %d, layers %d, hidden %d) for graph %s (%d nodes, %d features, "
                     "%d edges) could not get %.0f bytes (%.2f GiB) for %s",
                     donto_sheaf_family_name(hp->family), m->d, L, m->C, g->name[0] ? g->name : "(unnamed)", n,
                     m->f, m->ne, c.bytes, c.bytes / 1073741824.0, c.what);
        donto_sheaf_model_free(m);
        return NULL;
    }

    /* graph: edges + CSR + degrees */
    memcpy(m->eu, g->eu, sizeof(int) * g->ne);
    memcpy(m->ev, g->ev, sizeof(int) * g->ne);
    for (int k = 0; k < m->ne; k++) m->adj_off[m->eu[k] + 1]++, m->adj_off[m->ev[k] + 1]++;
    for (int v = 0; v < n; v++) m->adj_off[v + 1] += m->adj_off[v];
    for (int k = 0; k < m->ne; k++) {
        int u = m->eu[k], v = m->ev[k];
        int a = m->adj_off[u] + fill[u]++, b = m->adj_off[v] + fill[v]++;
        m->adj_k[a] = k, m->adj_side[a] = 0;
        m->adj_k[b] = k, m->adj_side[b] = 1;
    }
    free(fill);
    for (int v = 0; v < n; v++) {
        m->deg[v] = (float)(m->adj_off[v + 1] - m->adj_off[v]);
        m->fix_diag[v] = m->deg[v] / (m->deg[v] + 1.0f);
    }
    for (int k = 0; k < m->ne; k++)
        m->fix_off[k] = (float)(1.0 / sqrt(((double)m->deg[m->eu[k]] + 1.0) * ((double)m->deg[m->ev[k]] + 1.0)));

    /* initial weights, deterministic for the seed */
    rng r = {sheaf_mix64(hp->seed ^ 0x5eedf00dULL)};
    for (int i = 0; i < m->nt; i++) {
        donto_sheaf_tensor *t = &m->t[i];
        float *w = m->p + t->off;
        if (!strncmp(t->name, "left.", 5)) {
            for (int a = 0; a < t->rows; a++) w[a * t->cols + a] = 1.0f;
        } else if (!strncmp(t->name, "right.", 6)) {
            init_orthogonal(w, t->rows, &r);
        } else if (!strncmp(t->name, "epsilons.", 9)) {
            /* zeros */
        } else if (strstr(t->name, ".bias")) {
            int fan_in = m->t[i - 1].cols; /* the weight just before it */
            init_uniform(w, t->size, fan_in, &r);
        } else {
            init_uniform(w, t->size, t->cols, &r);
        }
    }
    donto_sheaf_set_class_weights(m, g, 0);
    /* small graphs: one thread (team start-up would cost more than the work) */
    m->nthreads = (size_t)n * m->H * (size_t)(m->P + m->dp + 4) + (size_t)m->ne * m->dp * m->dp * m->C < 2000000 ? 1 : 0;
    return m;
}

void donto_sheaf_model_free(donto_sheaf_model *m) {
    if (!m) return;
    free(m->eu), free(m->ev), free(m->adj_off), free(m->adj_k), free(m->adj_side);
    free(m->deg), free(m->fix_diag), free(m->fix_off);
    free(m->p), free(m->g), free(m->adam_m), free(m->adam_v);
    free(m->i_learn), free(m->i_wlearn), free(m->i_left), free(m->i_right), free(m->i_eps);
    free(m->xin), free(m->inmask), free(m->h1), free(m->hd), free(m->hmask);
    if (m->la) {
        for (int t = 0; t < m->L; t++) {
            sheaf_layer_act *a = &m->la[t];
            free(a->X), free(a->xm), free(a->mmask), free(a->mz), free(a->sw), free(a->w), free(a->Q);
            free(a->D), free(a->S), free(a->evals), free(a->evecs), free(a->Ld), free(a->Lo);
            free(a->Xd), free(a->dmask), free(a->Y1), free(a->Y2), free(a->Z);
        }
        free(m->la);
    }
    if (m->gH) {
        for (int l = 0; l < m->L; l++) free(m->gH[l]), free(m->gA[l]), free(m->gT[l]), free(m->gmask[l]);
        free(m->gH), free(m->gA), free(m->gT), free(m->gmask);
    }
    free(m->i_gcnw), free(m->i_gcnb);
    free(m->Xout), free(m->logits), free(m->logp);
    free(m->dX), free(m->dtmp), free(m->dtmp2), free(m->dxm), free(m->dLd), free(m->dLo), free(m->dmz);
    free(m->dS), free(m->dD), free(m->dQ), free(m->gsu), free(m->gsv);
    free(m->rowsum), free(m->colsum), free(m->dlogit);
    sheaf_xsparse_free(m);
    free(m->WT), free(m->dWT);
    free(m->pz), free(m->dz_in), free(m->pa), free(m->pr), free(m->da), free(m->dr);
    free(m->plogits), free(m->plogp), free(m->dplogits), free(m->demb), free(m->cw);
    free(m);
}

/* ------------------------------------------------------------------ */
/* forward / backward drivers                                           */

static void nsd_forward(donto_sheaf_model *m, const donto_graph *g) {
    float p = m->training ? m->hp.dropout : 0.0f;
    sheaf_in_head_forward(m, g, p);
    for (int t = 0; t < m->L; t++) sheaf_diffusion_forward(m, t, p);
    sheaf_out_head_forward(m);
}

static void nsd_backward(donto_sheaf_model *m, const donto_graph *g, const float *dlogits) {
    float p = m->training ? m->hp.dropout : 0.0f;
    float *dX = m->dX; /* running gradient wrt X_{t+1} */
    sheaf_out_head_backward(m, dlogits, dX);
    for (int t = m->L - 1; t >= 0; t--) sheaf_diffusion_backward(m, t, p, dX);
    sheaf_in_head_backward(m, g, p, dX);
}

double donto_sheaf_forward(donto_sheaf_model *m, const donto_graph *g, int training, uint64_t step,
                           const uint8_t *mask, const float **logp) {
    m->training = training;
    m->step = step;
    int saved = omp_get_max_threads(), blas = sheaf_blas_single_begin();
    if (m->nthreads) omp_set_num_threads(m->nthreads);
    sheaf_input_dropout(m, g);
    if (m->hp.family == DONTO_SHEAF_GCN) sheaf_gcn_forward(m, g);
    else if (m->hp.family == DONTO_SHEAF_MLP) sheaf_mlp_forward(m, g);
    else nsd_forward(m, g);
    double loss;
    if (m->task == DONTO_TASK_EDGE) {
        if (g->npairs != m->npairs || !g->pc) { /* the model was built for this graph (model_new) */
            fprintf(stderr, "donto-sheaf: edge model of %d pairs run on a graph with %d\n", m->npairs, g->npairs);
            abort();
        }
        sheaf_decoder_forward(m, g);
        loss = sheaf_weighted_nll(m->plogp, m->plogits, g->pc, m->cw, mask, m->npairs, m->Kc);
    } else {
        loss = sheaf_logsoftmax_nll(m->logp, m->logits, g->y, mask, m->n, m->K);
    }
    if (m->nthreads) omp_set_num_threads(saved);
    sheaf_blas_single_end(blas);
    if (logp) *logp = m->task == DONTO_TASK_EDGE ? m->plogp : m->logp;
    return loss;
}

/* the encoder's backward from dlogits [N][K] */
static void encoder_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits) {
    if (m->hp.family == DONTO_SHEAF_GCN) sheaf_gcn_backward(m, g, dlogits);
    else if (m->hp.family == DONTO_SHEAF_MLP) sheaf_mlp_backward(m, g, dlogits);
    else nsd_backward(m, g, dlogits);
}

void donto_sheaf_backward_from(donto_sheaf_model *m, const donto_graph *g, const float *dlogp) {
    int n = m->n, K = m->K;
    int saved = omp_get_max_threads(), blas = sheaf_blas_single_begin();
    if (m->nthreads) omp_set_num_threads(m->nthreads);
    memset(m->g, 0, sizeof(float) * m->np);
    if (m->task == DONTO_TASK_EDGE) {
        sheaf_logsoftmax_backward(m->dplogits, dlogp, m->plogp, m->npairs, m->Kc);
        sheaf_decoder_backward(m, g);
        encoder_backward(m, g, m->demb);
    } else {
        float *dlogits = sheaf_xalloc((size_t)n * K, sizeof(float), "logit gradients");
        sheaf_logsoftmax_backward(dlogits, dlogp, m->logp, n, K);
        encoder_backward(m, g, dlogits);
        free(dlogits);
    }
    if (m->nthreads) omp_set_num_threads(saved);
    sheaf_blas_single_end(blas);
}

void donto_sheaf_backward(donto_sheaf_model *m, const donto_graph *g, const uint8_t *mask) {
    if (m->task == DONTO_TASK_EDGE) { /* d/dlogp of sum_i w[y_i] (-logp_i[y_i]) / sum_i w[y_i] */
        int P = m->npairs, K = m->Kc;
        double den = 0;
        for (int p = 0; p < P; p++)
            if ((!mask || mask[p]) && g->pc[p] >= 0 && g->pc[p] < K) den += m->cw[g->pc[p]];
        float *dlogp = sheaf_xalloc((size_t)P * K, sizeof(float), "log-probability gradients");
        if (den > 0)
            for (int p = 0; p < P; p++)
                if ((!mask || mask[p]) && g->pc[p] >= 0 && g->pc[p] < K)
                    dlogp[(size_t)p * K + g->pc[p]] = (float)(-m->cw[g->pc[p]] / den);
        donto_sheaf_backward_from(m, g, dlogp);
        free(dlogp);
        return;
    }
    int n = m->n, K = m->K;
    long cnt = 0;
    for (int v = 0; v < n; v++)
        if ((!mask || mask[v]) && g->y[v] >= 0 && g->y[v] < K) cnt++;
    float *dlogp = sheaf_xalloc((size_t)n * K, sizeof(float), "log-probability gradients");
    if (cnt)
        for (int v = 0; v < n; v++)
            if ((!mask || mask[v]) && g->y[v] >= 0 && g->y[v] < K) dlogp[(size_t)v * K + g->y[v]] = -1.0f / (float)cnt;
    donto_sheaf_backward_from(m, g, dlogp);
    free(dlogp);
}
