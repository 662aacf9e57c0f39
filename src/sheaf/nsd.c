/*
 * Neural Sheaf Diffusion (Diag, O(d), General) and a GCN baseline: parameters,
 * forward and backward, one function per operation (llm.c style).
 *
 * Shapes: see include/donto/sheaf.h. Everything graph-shaped runs over the edge list
 * or its per-node CSR; each output element is written by exactly one loop iteration
 * in a fixed order, so results are identical for any OpenMP thread count.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf/sheaf_int.h"

/* ------------------------------------------------------------------ */
/* small helpers                                                        */

static void xsparse_free(donto_sheaf_model *m);
static float *fbuf(size_t n) { return donto_xcalloc(n ? n : 1, sizeof(float)); }
static uint8_t *bbuf(size_t n) { return donto_xcalloc(n ? n : 1, 1); }

/* OpenBLAS (Debian's pthread build) runs its own thread pool beside OpenMP's:
 * on a small machine the two pools spin against each other between calls
 * (chameleon epochs varied 0.13-0.32 s with the wait policy alone). So the
 * forward and backward passes hold OpenBLAS at one thread
 * (blas_single_begin/end) and split each product over the OpenMP team here,
 * along M or N, never K: every element of C is still one BLAS dot product
 * in BLAS's own order, so results do not depend on the thread count. */
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

static int blas_single_begin(void) {
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    return saved;
}
static void blas_single_end(int saved) { openblas_set_num_threads(saved); }

/* Row-major C[M][N] = alpha op(A)[M][K] op(B)[K][N] + beta C. */
static void sgemm_par(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int nt = omp_get_max_threads();
    int by_m = M >= N, len = by_m ? M : N;
    if (nt < 2 || len < 64) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int lo = (int)((long long)len * t / T), hi = (int)((long long)len * (t + 1) / T);
        if (hi > lo) {
            if (by_m) /* rows lo..hi of op(A) and of C */
                cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, alpha,
                            A + (ta == CblasNoTrans ? (size_t)lo * lda : (size_t)lo), lda, B, ldb, beta,
                            C + (size_t)lo * ldc, ldc);
            else /* columns lo..hi of op(B) and of C */
                cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, alpha, A, lda,
                            B + (tb == CblasNoTrans ? (size_t)lo : (size_t)lo * ldb), ldb, beta, C + lo, ldc);
        }
    }
}

/* Y[n][out] = X[n][in] W[out][in]^T (+ b) */
static void linear_forward(float *Y, const float *X, const float *W, const float *b, int n, int in, int out) {
    if (n == 0 || out == 0) return;
    if (in == 0) {
        memset(Y, 0, sizeof(float) * (size_t)n * out);
    } else {
        sgemm_par(CblasNoTrans, CblasTrans, n, out, in, 1.0f, X, in, W, in, 0.0f, Y, out);
    }
    if (b) {
#pragma omp parallel for schedule(static)
        for (int r = 0; r < n; r++)
            for (int j = 0; j < out; j++) Y[(size_t)r * out + j] += b[j];
    }
}

/* dW[out][in] += dY^T X ; db[out] += colsum(dY) ; dX[n][in] = dY W (if dX) */
static void linear_backward(float *dX, float *dW, float *db, const float *dY, const float *X, const float *W,
                            int n, int in, int out) {
    if (n == 0 || out == 0 || in == 0) {
        if (dX && in) memset(dX, 0, sizeof(float) * (size_t)n * in);
    } else {
        sgemm_par(CblasTrans, CblasNoTrans, out, in, n, 1.0f, dY, out, X, in, 1.0f, dW, in);
        if (dX) sgemm_par(CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dY, out, W, in, 0.0f, dX, in);
    }
    if (db) {
#pragma omp parallel for schedule(static)
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int r = 0; r < n; r++) s += dY[(size_t)r * out + j];
            db[j] += (float)s;
        }
    }
}

/* out = dropout(in) with a mask from (key); mask[i] = 1 kept. p = 0: plain copy, no mask. */
static void dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t key) {
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint8_t k = sheaf_urand(key, i) >= p;
        mask[i] = k;
        out[i] = k ? in[i] * scale : 0.0f;
    }
}
/* din = mask * dout / (1-p) (accumulate when acc) */
static void dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p, int acc) {
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = mask[i] ? dout[i] * scale : 0.0f;
        din[i] = acc ? din[i] + v : v;
    }
}

static inline float elu(float x) { return x > 0 ? x : expm1f(x); }
static inline float elu_grad(float x) { return x > 0 ? 1.0f : expf(x); }

static uint64_t site_key(uint64_t seed, uint64_t step, uint64_t site) {
    return sheaf_mix64(sheaf_mix64(seed * 0x2545F4914F6CDD1DULL + 17) ^ sheaf_mix64(step * 1000003ULL + site));
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
#define TP(m, i) ((m)->p + (m)->t[i].off)
#define TG(m, i) ((m)->g + (m)->t[i].off)

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
    hp->seed = 43;
}

const char *donto_sheaf_family_name(int family) {
    switch (family) {
    case DONTO_SHEAF_DIAG: return "diag";
    case DONTO_SHEAF_ORTH: return "orth";
    case DONTO_SHEAF_GENERAL: return "general";
    case DONTO_SHEAF_GCN: return "gcn";
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
    else return -1;
    return 0;
}

const donto_sheaf_hp *donto_sheaf_model_hp(const donto_sheaf_model *m) { return &m->hp; }
float *donto_sheaf_params(donto_sheaf_model *m, size_t *np) {
    if (np) *np = m->np;
    return m->p;
}
float *donto_sheaf_grads(donto_sheaf_model *m) { return m->g; }
const donto_sheaf_tensor *donto_sheaf_tensors(const donto_sheaf_model *m, int *count) {
    *count = m->nt;
    return m->t;
}
const float *sheaf_graph_x(const donto_sheaf_model *m, const donto_graph *g) { return m->xin ? m->xin : g->x; }

static int learner_outputs(const donto_sheaf_hp *hp) {
    switch (hp->family) {
    case DONTO_SHEAF_DIAG: return hp->d;
    case DONTO_SHEAF_ORTH: return hp->d * (hp->d - 1) / 2;
    default: return hp->d * hp->d;
    }
}

donto_sheaf_model *donto_sheaf_model_new(const donto_sheaf_hp *hp, const donto_graph *g, donto_err *err) {
    if (hp->layers < 1 || hp->layers > 64) return donto_seterr(err, "layers must be in 1..64 (got %d)", hp->layers), NULL;
    if (hp->hidden < 1) return donto_seterr(err, "hidden must be >= 1 (got %d)", hp->hidden), NULL;
    if (hp->family != DONTO_SHEAF_GCN && (hp->d < 1 || hp->d > SHEAF_MAX_D - 2))
        return donto_seterr(err, "d must be in 1..%d (got %d)", SHEAF_MAX_D - 2, hp->d), NULL;
    if (hp->family < 0 || hp->family > DONTO_SHEAF_GCN) return donto_seterr(err, "unknown family %d", hp->family), NULL;
    if (hp->input_dropout < 0 || hp->input_dropout >= 1 || hp->dropout < 0 || hp->dropout >= 1)
        return donto_seterr(err, "dropout must be in [0, 1)"), NULL;
    if (g->n < 1 || g->f < 1 || g->nclass < 2) return donto_seterr(err, "graph needs nodes, features and >= 2 classes"), NULL;

    donto_sheaf_model *m = donto_xcalloc(1, sizeof *m);
    m->hp = *hp;
    if (m->hp.sheaf_decay < 0) m->hp.sheaf_decay = m->hp.weight_decay;
    if (m->hp.family != DONTO_SHEAF_ORTH) m->hp.edge_weights = 0;
    m->n = g->n, m->f = g->f, m->K = g->nclass;
    m->L = hp->layers;
    m->C = hp->hidden;
    m->d = hp->family == DONTO_SHEAF_GCN ? 1 : hp->d;
    m->dp = hp->family == DONTO_SHEAF_GCN ? 1 : hp->d + (hp->add_lp ? 1 : 0) + (hp->add_hp ? 1 : 0);
    m->H = m->dp * m->C;
    m->P = learner_outputs(&m->hp);
    m->dense = hp->family == DONTO_SHEAF_ORTH || hp->family == DONTO_SHEAF_GENERAL;
    int n = m->n, L = m->L;

    /* graph: edges + CSR + degrees */
    m->ne = g->ne;
    m->eu = donto_xmalloc(sizeof(int) * (g->ne ? g->ne : 1));
    m->ev = donto_xmalloc(sizeof(int) * (g->ne ? g->ne : 1));
    memcpy(m->eu, g->eu, sizeof(int) * g->ne);
    memcpy(m->ev, g->ev, sizeof(int) * g->ne);
    m->adj_off = donto_xcalloc((size_t)n + 1, sizeof(int));
    for (int k = 0; k < m->ne; k++) m->adj_off[m->eu[k] + 1]++, m->adj_off[m->ev[k] + 1]++;
    for (int v = 0; v < n; v++) m->adj_off[v + 1] += m->adj_off[v];
    m->adj_k = donto_xmalloc(sizeof(int) * (2 * (size_t)m->ne + 1));
    m->adj_side = bbuf(2 * (size_t)m->ne + 1);
    int *fill = donto_xcalloc((size_t)n, sizeof(int));
    for (int k = 0; k < m->ne; k++) {
        int u = m->eu[k], v = m->ev[k];
        int a = m->adj_off[u] + fill[u]++, b = m->adj_off[v] + fill[v]++;
        m->adj_k[a] = k, m->adj_side[a] = 0;
        m->adj_k[b] = k, m->adj_side[b] = 1;
    }
    free(fill);
    m->deg = fbuf(n), m->fix_diag = fbuf(n), m->fix_off = fbuf(m->ne);
    for (int v = 0; v < n; v++) {
        m->deg[v] = (float)(m->adj_off[v + 1] - m->adj_off[v]);
        m->fix_diag[v] = m->deg[v] / (m->deg[v] + 1.0f);
    }
    for (int k = 0; k < m->ne; k++)
        m->fix_off[k] = (float)(1.0 / sqrt(((double)m->deg[m->eu[k]] + 1.0) * ((double)m->deg[m->ev[k]] + 1.0)));

    /* parameter table */
    m->i_lin1w = m->i_lin1b = m->i_lin12w = m->i_lin12b = m->i_lin2w = m->i_lin2b = -1;
    m->i_learn = donto_xmalloc(sizeof(int) * L), m->i_wlearn = donto_xmalloc(sizeof(int) * L);
    m->i_left = donto_xmalloc(sizeof(int) * L), m->i_right = donto_xmalloc(sizeof(int) * L);
    m->i_eps = donto_xmalloc(sizeof(int) * L);
    m->i_gcnw = donto_xmalloc(sizeof(int) * L), m->i_gcnb = donto_xmalloc(sizeof(int) * L);
    for (int t = 0; t < L; t++)
        m->i_learn[t] = m->i_wlearn[t] = m->i_left[t] = m->i_right[t] = m->i_eps[t] = m->i_gcnw[t] = m->i_gcnb[t] = -1;
    char nm[48];
    if (hp->family == DONTO_SHEAF_GCN) {
        for (int l = 0; l < L; l++) {
            int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
            snprintf(nm, sizeof nm, "gcn.%d.weight", l);
            m->i_gcnw[l] = add_tensor(m, nm, out, in, 0);
            snprintf(nm, sizeof nm, "gcn.%d.bias", l);
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
    m->p = fbuf(m->np), m->g = fbuf(m->np), m->adam_m = fbuf(m->np), m->adam_v = fbuf(m->np);

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

    /* activations */
    size_t NH = (size_t)n * m->H, E2 = 2 * (size_t)m->ne, Eu = (size_t)m->ne;
    size_t dd = (size_t)m->d * m->d, dpb = m->dense ? (size_t)m->dp * m->dp : (size_t)m->dp;
    m->logits = fbuf((size_t)n * m->K), m->logp = fbuf((size_t)n * m->K);
    {
        int out0 = hp->family == DONTO_SHEAF_GCN ? (L == 1 ? m->K : m->C) : m->H;
        m->WT = fbuf((size_t)m->f * out0), m->dWT = fbuf((size_t)m->f * out0);
    }
    /* small graphs: one thread (team start-up would cost more than the work) */
    m->nthreads = (size_t)n * m->H * (size_t)(m->P + m->dp + 4) + (size_t)m->ne * m->dp * m->dp * m->C < 2000000 ? 1 : 0;
    m->inmask = bbuf((size_t)n * m->f);
    if (hp->input_dropout > 0) m->xin = fbuf((size_t)n * m->f);
    if (hp->family == DONTO_SHEAF_GCN) {
        m->gH = donto_xcalloc(L, sizeof(float *)), m->gA = donto_xcalloc(L, sizeof(float *));
        m->gT = donto_xcalloc(L, sizeof(float *)), m->gmask = donto_xcalloc(L, sizeof(uint8_t *));
        for (int l = 0; l < L; l++) {
            int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
            if (l > 0) m->gH[l] = fbuf((size_t)n * in), m->gmask[l] = bbuf((size_t)n * in);
            m->gA[l] = fbuf((size_t)n * out), m->gT[l] = fbuf((size_t)n * out);
        }
        size_t w = (size_t)n * (m->C > m->K ? m->C : m->K);
        m->dX = fbuf(w), m->dtmp = fbuf(w), m->dtmp2 = fbuf(w);
        return m;
    }
    m->h1 = fbuf(NH), m->hd = fbuf(NH), m->hmask = bbuf(NH);
    m->la = donto_xcalloc(L, sizeof *m->la);
    for (int t = 0; t < L; t++) {
        sheaf_layer_act *a = &m->la[t];
        a->X = fbuf(NH);
        if (t > 0) a->xm = fbuf(NH), a->mmask = bbuf(NH);
        a->mz = fbuf(E2 * m->P);
        if (m->hp.edge_weights) a->sw = fbuf(E2), a->w = fbuf(Eu);
        if (hp->family == DONTO_SHEAF_ORTH) a->Q = fbuf(E2 * dd);
        size_t nd = hp->family == DONTO_SHEAF_GENERAL ? dd : hp->family == DONTO_SHEAF_DIAG ? (size_t)m->d : 1;
        a->D = fbuf((size_t)n * nd), a->S = fbuf((size_t)n * nd);
        if (hp->family == DONTO_SHEAF_GENERAL) {
            a->evals = donto_xcalloc((size_t)n * m->d, sizeof(double));
            a->evecs = donto_xcalloc((size_t)n * dd, sizeof(double));
        }
        a->Ld = fbuf((size_t)n * dpb), a->Lo = fbuf(Eu * dpb);
        a->Xd = fbuf(NH), a->dmask = bbuf(NH);
        a->Y1 = fbuf(NH), a->Y2 = fbuf(NH), a->Z = fbuf(NH);
    }
    m->Xout = fbuf(NH);
    m->dX = fbuf(NH), m->dtmp = fbuf(NH), m->dtmp2 = fbuf(NH + 2 * (size_t)n), m->dxm = fbuf(NH);
    m->dLd = fbuf((size_t)n * dpb), m->dLo = fbuf(Eu * dpb);
    m->dmz = fbuf(E2 * (m->P ? m->P : 1));
    m->dS = fbuf((size_t)n * (dd > 1 ? dd : 1) * 2), m->dD = fbuf((size_t)n * (dd > 1 ? dd : 1) * 2);
    if (m->dense) m->dQ = fbuf(E2 * dd), m->gsu = fbuf(Eu * dd), m->gsv = fbuf(Eu * dd);
    m->rowsum = fbuf((size_t)n * (m->P > 1 ? m->P : 1)), m->colsum = fbuf((size_t)n * (m->P > 1 ? m->P : 1));
    m->dlogit = fbuf(E2);
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
    xsparse_free(m);
    free(m->WT), free(m->dWT);
    free(m);
}

/* ------------------------------------------------------------------ */
/* small dense linear algebra (d <= SHEAF_MAX_D), double accumulation    */

/* C[a][b] = sum_k A[k][a] B[k][b]  (A^T B), all d x d row-major */
static void mat_tn(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[k * d + a] * B[k * d + b];
            C[a * d + b] = s;
        }
}
static void mat_nn(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[a * d + k] * B[k * d + b];
            C[a * d + b] = s;
        }
}
static void mat_nt(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[a * d + k] * B[b * d + k];
            C[a * d + b] = s;
        }
}
static void f2d(double *o, const float *i, int n) { for (int k = 0; k < n; k++) o[k] = i[k]; }

/* Householder: v_j (j < d-1) has 1 at j and params below it (strict lower triangle of a
 * d x d matrix, row-major tril order: idx(i,j) = i(i-1)/2 + j). Q = H_0 H_1 ... H_{d-2},
 * H_j = I - tau_j v_j v_j^T, tau_j = 2 / |v_j|^2 (same as torch.linalg.householder_product). */
static inline int tril_idx(int i, int j) { return i * (i - 1) / 2 + j; }

static void householder_vec(double *v, double *tau, const float *prm, int d, int j) {
    double nn = 1;
    for (int i = 0; i < d; i++) v[i] = 0;
    v[j] = 1;
    for (int i = j + 1; i < d; i++) v[i] = prm[tril_idx(i, j)], nn += v[i] * v[i];
    *tau = 2.0 / nn;
}
/* A <- A H_j (right multiply) */
static void apply_h_right(double *A, const double *v, double tau, int d) {
    for (int r = 0; r < d; r++) {
        double s = 0;
        for (int k = 0; k < d; k++) s += A[r * d + k] * v[k];
        for (int k = 0; k < d; k++) A[r * d + k] -= tau * s * v[k];
    }
}
/* A <- H_j A */
static void apply_h_left(double *A, const double *v, double tau, int d) {
    for (int c = 0; c < d; c++) {
        double s = 0;
        for (int k = 0; k < d; k++) s += v[k] * A[k * d + c];
        for (int k = 0; k < d; k++) A[k * d + c] -= tau * s * v[k];
    }
}
static void householder_forward(double *Q, const float *prm, int d) {
    double v[SHEAF_MAX_D], tau;
    for (int i = 0; i < d * d; i++) Q[i] = 0;
    for (int i = 0; i < d; i++) Q[i * d + i] = 1;
    for (int j = 0; j < d - 1; j++) {
        householder_vec(v, &tau, prm, d, j);
        apply_h_right(Q, v, tau, d);
    }
}
/* dprm[idx] = dQ/dparams. G_j = Pre_j^T dQ Suf_j^T with Pre_j = H_0..H_{j-1}, Suf_j = H_{j+1}..H_{d-2};
 * for H = I - tau v v^T, tau = 2/|v|^2: dv = -tau (G + G^T) v + tau^2 (v^T G v) v. */
static void householder_backward(float *dprm, const float *prm, const double *dQ, int d) {
    double V[SHEAF_MAX_D][SHEAF_MAX_D], tau[SHEAF_MAX_D];
    double T[SHEAF_MAX_D * SHEAF_MAX_D], Pre[SHEAF_MAX_D * SHEAF_MAX_D];
    int k = d - 1;
    if (k < 1) return;
    for (int j = 0; j < k; j++) householder_vec(V[j], &tau[j], prm, d, j);
    /* T_j = dQ Suf_j^T, built from the right: T_{k-1} = dQ, T_{j-1} = T_j H_j (H symmetric) */
    double Ts[SHEAF_MAX_D][SHEAF_MAX_D * SHEAF_MAX_D];
    memcpy(Ts[k - 1], dQ, sizeof(double) * d * d);
    for (int j = k - 1; j > 0; j--) {
        memcpy(Ts[j - 1], Ts[j], sizeof(double) * d * d);
        apply_h_right(Ts[j - 1], V[j], tau[j], d);
    }
    for (int i = 0; i < d * d; i++) Pre[i] = 0;
    for (int i = 0; i < d; i++) Pre[i * d + i] = 1;
    for (int j = 0; j < k; j++) {
        /* G = Pre^T T_j */
        double G[SHEAF_MAX_D * SHEAF_MAX_D];
        mat_tn(G, Pre, Ts[j], d);
        double Gv[SHEAF_MAX_D], GTv[SHEAF_MAX_D], vGv = 0;
        for (int a = 0; a < d; a++) {
            double s1 = 0, s2 = 0;
            for (int b = 0; b < d; b++) s1 += G[a * d + b] * V[j][b], s2 += G[b * d + a] * V[j][b];
            Gv[a] = s1, GTv[a] = s2;
        }
        for (int a = 0; a < d; a++) vGv += V[j][a] * Gv[a];
        for (int i = j + 1; i < d; i++)
            dprm[tril_idx(i, j)] += (float)(-tau[j] * (Gv[i] + GTv[i]) + tau[j] * tau[j] * vGv * V[j][i]);
        memcpy(T, Pre, sizeof(double) * d * d);
        apply_h_right(T, V[j], tau[j], d);
        memcpy(Pre, T, sizeof(double) * d * d);
    }
    (void)apply_h_left;
}

/* Invert a small matrix (Gauss-Jordan, partial pivoting). */
static void mat_inv(double *inv, const double *A, int d) {
    double M[SHEAF_MAX_D * 2 * SHEAF_MAX_D];
    int w = 2 * d;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < w; j++) M[i * w + j] = j < d ? A[i * d + j] : (j - d == i);
    for (int c = 0; c < d; c++) {
        int piv = c;
        for (int r = c + 1; r < d; r++)
            if (fabs(M[r * w + c]) > fabs(M[piv * w + c])) piv = r;
        if (piv != c)
            for (int j = 0; j < w; j++) {
                double t = M[c * w + j];
                M[c * w + j] = M[piv * w + j], M[piv * w + j] = t;
            }
        double p = M[c * w + c];
        for (int j = 0; j < w; j++) M[c * w + j] /= p;
        for (int r = 0; r < d; r++) {
            if (r == c) continue;
            double f = M[r * w + c];
            if (f != 0)
                for (int j = 0; j < w; j++) M[r * w + j] -= f * M[c * w + j];
        }
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) inv[i * d + j] = M[i * w + d + j];
}
/* Cayley: A skew (A[i][j] = p_idx(i,j) for i > j), Q = (I - A/2)^-1 (I + A/2). */
static void cayley_forward(double *Q, double *Minv, const float *prm, int d) {
    double M[SHEAF_MAX_D * SHEAF_MAX_D], N[SHEAF_MAX_D * SHEAF_MAX_D];
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            double a = i > j ? prm[tril_idx(i, j)] : i < j ? -prm[tril_idx(j, i)] : 0.0;
            M[i * d + j] = (i == j) - 0.5 * a;
            N[i * d + j] = (i == j) + 0.5 * a;
        }
    mat_inv(Minv, M, d);
    mat_nn(Q, Minv, N, d);
}
/* dA = 0.5 M^-T dQ (I + Q^T); dp_idx(i,j) = dA[i][j] - dA[j][i] */
static void cayley_backward(float *dprm, const float *prm, const double *dQ, int d) {
    double Q[SHEAF_MAX_D * SHEAF_MAX_D], Minv[SHEAF_MAX_D * SHEAF_MAX_D], T[SHEAF_MAX_D * SHEAF_MAX_D],
        IQ[SHEAF_MAX_D * SHEAF_MAX_D], dA[SHEAF_MAX_D * SHEAF_MAX_D];
    cayley_forward(Q, Minv, prm, d);
    mat_tn(T, Minv, dQ, d); /* M^-T dQ */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) IQ[i * d + j] = (i == j) + Q[j * d + i];
    mat_nn(dA, T, IQ, d);
    for (int i = 1; i < d; i++)
        for (int j = 0; j < i; j++) dprm[tril_idx(i, j)] += (float)(0.5 * (dA[i * d + j] - dA[j * d + i]));
}

/* Symmetric eigen decomposition by cyclic Jacobi (small d, double). A = V diag(w) V^T. */
static void sym_eig(double *w, double *V, const double *Ain, int d) {
    double A[SHEAF_MAX_D * SHEAF_MAX_D];
    memcpy(A, Ain, sizeof(double) * d * d);
    for (int i = 0; i < d * d; i++) V[i] = 0;
    for (int i = 0; i < d; i++) V[i * d + i] = 1;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, tot = 0;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                tot += A[i * d + j] * A[i * d + j];
                if (i != j) off += A[i * d + j] * A[i * d + j];
            }
        if (off <= 1e-30 * tot || off == 0) break;
        for (int p = 0; p < d - 1; p++)
            for (int q = p + 1; q < d; q++) {
                double apq = A[p * d + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (A[q * d + q] - A[p * d + p]) / (2 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < d; k++) { /* A <- J^T A J */
                    double akp = A[k * d + p], akq = A[k * d + q];
                    A[k * d + p] = c * akp - s * akq;
                    A[k * d + q] = s * akp + c * akq;
                }
                for (int k = 0; k < d; k++) {
                    double apk = A[p * d + k], aqk = A[q * d + k];
                    A[p * d + k] = c * apk - s * aqk;
                    A[q * d + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < d; k++) {
                    double vkp = V[k * d + p], vkq = V[k * d + q];
                    V[k * d + p] = c * vkp - s * vkq;
                    V[k * d + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < d; i++) w[i] = A[i * d + i];
}

/* ------------------------------------------------------------------ */
/* sheaf learner: z_e = W [x_row(e) || x_col(e)], maps = tanh(z)         */

/* xm [N][H] -> mz [E2][P]; optionally edge-weight sigmoids sw [E2] and w [Eu]. */
static void learner_forward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t) {
    int n = m->n, H = m->H, P = m->P;
    if (P > 0) {
        const float *W = TP(m, m->i_learn[t]); /* [P][2H] */
        float *A = m->rowsum, *B = m->colsum; /* [N][P] scratch */
        sgemm_par(CblasNoTrans, CblasTrans, n, P, H, 1.0f, xm, H, W, 2 * H, 0.0f, A, P);
        sgemm_par(CblasNoTrans, CblasTrans, n, P, H, 1.0f, xm, H, W + H, 2 * H, 0.0f, B, P);
#pragma omp parallel for schedule(static)
        for (int k = 0; k < m->ne; k++) {
            int u = m->eu[k], v = m->ev[k];
            float *z0 = a->mz + (size_t)(2 * k) * P, *z1 = a->mz + (size_t)(2 * k + 1) * P;
            for (int j = 0; j < P; j++) {
                z0[j] = tanhf(A[(size_t)u * P + j] + B[(size_t)v * P + j]);
                z1[j] = tanhf(A[(size_t)v * P + j] + B[(size_t)u * P + j]);
            }
        }
    }
    if (m->hp.edge_weights) {
        const float *aw = TP(m, m->i_wlearn[t]); /* [1][2H] */
        float *al = m->dtmp2, *ar = m->dtmp2 + n; /* [N] each, scratch */
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++) {
            double sl = 0, sr = 0;
            for (int j = 0; j < H; j++) sl += (double)xm[(size_t)v * H + j] * aw[j], sr += (double)xm[(size_t)v * H + j] * aw[H + j];
            al[v] = (float)sl, ar[v] = (float)sr;
        }
#pragma omp parallel for schedule(static)
        for (int k = 0; k < m->ne; k++) {
            int u = m->eu[k], v = m->ev[k];
            float s0 = 1.0f / (1.0f + expf(-(al[u] + ar[v]))), s1 = 1.0f / (1.0f + expf(-(al[v] + ar[u])));
            a->sw[2 * k] = s0, a->sw[2 * k + 1] = s1;
            a->w[k] = s0 * s1;
        }
    }
}

/* dmz [E2][P] (gradient wrt tanh outputs, turned into dz here), dlogit [E2] (edge weights)
 * -> dW, dxm [N][H] (overwritten). */
static void learner_backward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t, float *dxm) {
    int n = m->n, H = m->H, P = m->P;
    memset(dxm, 0, sizeof(float) * (size_t)n * H);
    if (P > 0) {
        const float *W = TP(m, m->i_learn[t]);
        float *dW = TG(m, m->i_learn[t]);
        size_t E2P = (size_t)2 * m->ne * P;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < E2P; i++) m->dmz[i] *= 1.0f - a->mz[i] * a->mz[i];
        float *R = m->rowsum, *Cc = m->colsum; /* [N][P] */
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++) {
            double r[SHEAF_MAX_D * SHEAF_MAX_D], c[SHEAF_MAX_D * SHEAF_MAX_D];
            for (int j = 0; j < P; j++) r[j] = c[j] = 0;
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                int k = m->adj_k[q], s = m->adj_side[q];
                const float *zr = m->dmz + (size_t)(2 * k + s) * P, *zc = m->dmz + (size_t)(2 * k + 1 - s) * P;
                for (int j = 0; j < P; j++) r[j] += zr[j], c[j] += zc[j];
            }
            for (int j = 0; j < P; j++) R[(size_t)v * P + j] = (float)r[j], Cc[(size_t)v * P + j] = (float)c[j];
        }
        sgemm_par(CblasTrans, CblasNoTrans, P, H, n, 1.0f, R, P, xm, H, 1.0f, dW, 2 * H);
        sgemm_par(CblasTrans, CblasNoTrans, P, H, n, 1.0f, Cc, P, xm, H, 1.0f, dW + H, 2 * H);
        sgemm_par(CblasNoTrans, CblasNoTrans, n, H, P, 1.0f, R, P, W, 2 * H, 1.0f, dxm, H);
        sgemm_par(CblasNoTrans, CblasNoTrans, n, H, P, 1.0f, Cc, P, W + H, 2 * H, 1.0f, dxm, H);
    }
    if (m->hp.edge_weights) {
        const float *aw = TP(m, m->i_wlearn[t]);
        float *daw = TG(m, m->i_wlearn[t]);
        float *rho = m->dtmp2, *gam = m->dtmp2 + n;
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++) {
            double r = 0, c = 0;
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                int k = m->adj_k[q], s = m->adj_side[q];
                r += m->dlogit[2 * k + s], c += m->dlogit[2 * k + 1 - s];
            }
            rho[v] = (float)r, gam[v] = (float)c;
        }
#pragma omp parallel for schedule(static)
        for (int j = 0; j < H; j++) {
            double sl = 0, sr = 0;
            for (int v = 0; v < n; v++) sl += (double)rho[v] * xm[(size_t)v * H + j], sr += (double)gam[v] * xm[(size_t)v * H + j];
            daw[j] += (float)sl, daw[H + j] += (float)sr;
        }
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++)
            for (int j = 0; j < H; j++) dxm[(size_t)v * H + j] += rho[v] * aw[j] + gam[v] * aw[H + j];
    }
}

/* ------------------------------------------------------------------ */
/* Laplacian builders                                                   */

/* The fixed extra stalk dims of the blocks (same for every family), as the
 * NSD reference code builds them (LaplacianBuilder.get_fixed_maps): the
 * diagonal is deg/(deg+1) for both; off the diagonal add_lp puts
 * +1/sqrt((deg_u+1)(deg_v+1)) (the normalised signless Laplacian D + A) and
 * add_hp -1/sqrt(..) (the ordinary D - A). The flags' names say the opposite
 * of what they do (the reference's own --help calls add_lp the high-pass
 * filter); they keep the reference's names and behaviour so its published
 * configurations mean the same here. With the ordinary Laplacian under
 * add_lp, chameleon Diag-NSD scored 1.0 point lower (BENCHMARKS.md). */
static void lap_fixed(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp;
    if (dp == d) return;
    int lp = m->hp.add_lp, hp = m->hp.add_hp;
    size_t bs = m->dense ? (size_t)dp * dp : (size_t)dp;
    int stride = m->dense ? dp + 1 : 1; /* diagonal step inside a block */
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        float *b = a->Ld + v * bs;
        for (int j = d; j < dp; j++) b[j * stride] = m->fix_diag[v];
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        float *b = a->Lo + k * bs;
        int j = d;
        if (lp) b[j * stride] = m->fix_off[k], j++;
        if (hp) b[j * stride] = -m->fix_off[k];
    }
}

/* Diag: F = m (d numbers per directed edge). D_v = sum m^2, s = (D+1)^-1/2,
 * Ld_v = D s^2, Lo_k = -s_u m_{2k} m_{2k+1} s_v. */
static void lap_diag_forward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        for (int i = 0; i < d; i++) {
            double s = 0;
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                float x = a->mz[(size_t)(2 * m->adj_k[q] + m->adj_side[q]) * d + i];
                s += (double)x * x;
            }
            a->D[(size_t)v * d + i] = (float)s;
            a->S[(size_t)v * d + i] = (float)(1.0 / sqrt(s + 1.0));
            a->Ld[(size_t)v * dp + i] = (float)(s / (s + 1.0));
        }
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        int u = m->eu[k], v = m->ev[k];
        for (int i = 0; i < d; i++)
            a->Lo[(size_t)k * dp + i] = -a->S[(size_t)u * d + i] * a->mz[(size_t)(2 * k) * d + i] *
                                        a->mz[(size_t)(2 * k + 1) * d + i] * a->S[(size_t)v * d + i];
    }
}

static void lap_diag_backward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp;
    float *dD = m->dD; /* [N][d] */
    /* per node: dD_v = dLd/(D+1)^2 + ds_v (-s^3/2), ds_v = sum_k dLo_k Lo_k / s_v */
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        for (int i = 0; i < d; i++) {
            double ds = 0, s = a->S[(size_t)v * d + i];
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                int k = m->adj_k[q];
                ds += (double)m->dLo[(size_t)k * dp + i] * a->Lo[(size_t)k * dp + i];
            }
            ds /= s;
            double D1 = a->D[(size_t)v * d + i] + 1.0;
            dD[(size_t)v * d + i] = (float)(m->dLd[(size_t)v * dp + i] / (D1 * D1) - 0.5 * s * s * s * ds);
        }
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        int u = m->eu[k], v = m->ev[k];
        for (int i = 0; i < d; i++) {
            float m0 = a->mz[(size_t)(2 * k) * d + i], m1 = a->mz[(size_t)(2 * k + 1) * d + i];
            float c = -m->dLo[(size_t)k * dp + i] * a->S[(size_t)u * d + i] * a->S[(size_t)v * d + i];
            m->dmz[(size_t)(2 * k) * d + i] = c * m1 + 2.0f * m0 * dD[(size_t)u * d + i];
            m->dmz[(size_t)(2 * k + 1) * d + i] = c * m0 + 2.0f * m1 * dD[(size_t)v * d + i];
        }
    }
}

/* O(d): F_e = w Q(m_e). D_v = sum w^2 (scalar), s = (D+1)^-1/2, Ld_v = D s^2 I,
 * Lo_k = -s_u s_v w_k^2 Q_{2k}^T Q_{2k+1}. */
static void lap_orth_forward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp, P = m->P, ew = m->hp.edge_weights;
    size_t dd = (size_t)d * d, bs = (size_t)dp * dp;
#pragma omp parallel for schedule(static)
    for (int e = 0; e < 2 * m->ne; e++) {
        double Q[SHEAF_MAX_D * SHEAF_MAX_D], Minv[SHEAF_MAX_D * SHEAF_MAX_D];
        if (m->hp.orth == DONTO_ORTH_CAYLEY) cayley_forward(Q, Minv, a->mz + (size_t)e * P, d);
        else householder_forward(Q, a->mz + (size_t)e * P, d);
        for (size_t i = 0; i < dd; i++) a->Q[e * dd + i] = (float)Q[i];
    }
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        double s = 0;
        for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
            double w = ew ? a->w[m->adj_k[q]] : 1.0;
            s += w * w;
        }
        a->D[v] = (float)s;
        a->S[v] = (float)(1.0 / sqrt(s + 1.0));
        float *b = a->Ld + v * bs;
        memset(b, 0, sizeof(float) * bs);
        for (int i = 0; i < d; i++) b[i * dp + i] = (float)(s / (s + 1.0));
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        double q0[SHEAF_MAX_D * SHEAF_MAX_D], q1[SHEAF_MAX_D * SHEAF_MAX_D], Pk[SHEAF_MAX_D * SHEAF_MAX_D];
        f2d(q0, a->Q + (size_t)(2 * k) * dd, (int)dd), f2d(q1, a->Q + (size_t)(2 * k + 1) * dd, (int)dd);
        mat_tn(Pk, q0, q1, d);
        double w = ew ? a->w[k] : 1.0;
        double c = -(double)a->S[m->eu[k]] * a->S[m->ev[k]] * w * w;
        float *b = a->Lo + k * bs;
        memset(b, 0, sizeof(float) * bs);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) b[i * dp + j] = (float)(c * Pk[i * d + j]);
    }
}

static void lap_orth_backward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp, P = m->P, ew = m->hp.edge_weights;
    size_t dd = (size_t)d * d, bs = (size_t)dp * dp;
    float *gP = m->gsu; /* [Eu] <dLo_k, P_k> */
    /* pass 1 (edges): dQ for both directed edges, <dLo, P> */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        double q0[SHEAF_MAX_D * SHEAF_MAX_D], q1[SHEAF_MAX_D * SHEAF_MAX_D], Pk[SHEAF_MAX_D * SHEAF_MAX_D];
        double dP[SHEAF_MAX_D * SHEAF_MAX_D], t0[SHEAF_MAX_D * SHEAF_MAX_D], t1[SHEAF_MAX_D * SHEAF_MAX_D];
        f2d(q0, a->Q + (size_t)(2 * k) * dd, (int)dd), f2d(q1, a->Q + (size_t)(2 * k + 1) * dd, (int)dd);
        mat_tn(Pk, q0, q1, d);
        double w = ew ? a->w[k] : 1.0;
        double c = -(double)a->S[m->eu[k]] * a->S[m->ev[k]] * w * w, g = 0;
        const float *dL = m->dLo + k * bs;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) dP[i * d + j] = c * dL[i * dp + j], g += dL[i * dp + j] * Pk[i * d + j];
        gP[k] = (float)g;
        mat_nt(t0, q1, dP, d); /* dQ_{2k} = Q_{2k+1} dP^T */
        mat_nn(t1, q0, dP, d); /* dQ_{2k+1} = Q_{2k} dP */
        for (size_t i = 0; i < dd; i++) m->dQ[(size_t)(2 * k) * dd + i] = (float)t0[i], m->dQ[(size_t)(2 * k + 1) * dd + i] = (float)t1[i];
    }
    /* pass 2 (nodes): dD_v = tr(dLd_v)/(D+1)^2 - s^3/2 ds_v, ds_v = sum_k gP_k * (-s_o w^2) */
    if (ew) {
#pragma omp parallel for schedule(static)
        for (int v = 0; v < m->n; v++) {
            double ds = 0, tr = 0, s = a->S[v];
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                int k = m->adj_k[q], o = m->adj_side[q] ? m->eu[k] : m->ev[k];
                ds += gP[k] * (-(double)a->S[o] * a->w[k] * a->w[k]);
            }
            for (int i = 0; i < d; i++) tr += m->dLd[(size_t)v * bs + i * dp + i];
            double D1 = a->D[v] + 1.0;
            m->dD[v] = (float)(tr / (D1 * D1) - 0.5 * s * s * s * ds);
        }
        /* pass 3 (edges): dw2 = gP (-s_u s_v) + dD_u + dD_v ; dw = 2 w dw2 ; sigmoids */
#pragma omp parallel for schedule(static)
        for (int k = 0; k < m->ne; k++) {
            int u = m->eu[k], v = m->ev[k];
            double dw2 = gP[k] * (-(double)a->S[u] * a->S[v]) + m->dD[u] + m->dD[v];
            double dw = 2.0 * a->w[k] * dw2;
            double s0 = a->sw[2 * k], s1 = a->sw[2 * k + 1];
            m->dlogit[2 * k] = (float)(dw * s1 * s0 * (1 - s0));
            m->dlogit[2 * k + 1] = (float)(dw * s0 * s1 * (1 - s1));
        }
    }
    /* orthogonal-map backward per directed edge */
#pragma omp parallel for schedule(static)
    for (int e = 0; e < 2 * m->ne; e++) {
        double dQ[SHEAF_MAX_D * SHEAF_MAX_D];
        f2d(dQ, m->dQ + (size_t)e * dd, (int)dd);
        float *dp_ = m->dmz + (size_t)e * P;
        for (int j = 0; j < P; j++) dp_[j] = 0;
        if (m->hp.orth == DONTO_ORTH_CAYLEY) cayley_backward(dp_, a->mz + (size_t)e * P, dQ, d);
        else householder_backward(dp_, a->mz + (size_t)e * P, dQ, d);
    }
}

/* General: F_e = m_e as d x d. D_v = sum F^T F, S_v = (D_v + (1+eps) I)^-1/2 by eigh,
 * Ld_v = S D S, Lo_k = -S_u F_{2k}^T F_{2k+1} S_v. */
static void lap_general_forward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp;
    size_t dd = (size_t)d * d, bs = (size_t)dp * dp;
    double eps1 = 1.0 + m->hp.gen_eps;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        double D[SHEAF_MAX_D * SHEAF_MAX_D] = {0}, M[SHEAF_MAX_D * SHEAF_MAX_D], w[SHEAF_MAX_D], V[SHEAF_MAX_D * SHEAF_MAX_D];
        double S[SHEAF_MAX_D * SHEAF_MAX_D], T[SHEAF_MAX_D * SHEAF_MAX_D], Ld[SHEAF_MAX_D * SHEAF_MAX_D];
        for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
            const float *F = a->mz + (size_t)(2 * m->adj_k[q] + m->adj_side[q]) * dd;
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++) {
                    double s = 0;
                    for (int r = 0; r < d; r++) s += (double)F[r * d + i] * F[r * d + j];
                    D[i * d + j] += s;
                }
        }
        for (size_t i = 0; i < dd; i++) M[i] = D[i];
        for (int i = 0; i < d; i++) M[i * d + i] += eps1;
        sym_eig(w, V, M, d);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int r = 0; r < d; r++) s += V[i * d + r] * V[j * d + r] / sqrt(w[r]);
                S[i * d + j] = s;
            }
        mat_nn(T, S, D, d);
        mat_nn(Ld, T, S, d);
        for (int i = 0; i < d; i++) a->evals[(size_t)v * d + i] = w[i];
        for (size_t i = 0; i < dd; i++)
            a->evecs[v * dd + i] = V[i], a->S[v * dd + i] = (float)S[i], a->D[v * dd + i] = (float)D[i];
        float *b = a->Ld + v * bs;
        memset(b, 0, sizeof(float) * bs);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) b[i * dp + j] = (float)Ld[i * d + j];
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        double F0[SHEAF_MAX_D * SHEAF_MAX_D], F1[SHEAF_MAX_D * SHEAF_MAX_D], Pk[SHEAF_MAX_D * SHEAF_MAX_D];
        double Su[SHEAF_MAX_D * SHEAF_MAX_D], Sv[SHEAF_MAX_D * SHEAF_MAX_D], T[SHEAF_MAX_D * SHEAF_MAX_D], R[SHEAF_MAX_D * SHEAF_MAX_D];
        f2d(F0, a->mz + (size_t)(2 * k) * dd, (int)dd), f2d(F1, a->mz + (size_t)(2 * k + 1) * dd, (int)dd);
        f2d(Su, a->S + (size_t)m->eu[k] * dd, (int)dd), f2d(Sv, a->S + (size_t)m->ev[k] * dd, (int)dd);
        mat_tn(Pk, F0, F1, d);
        mat_nn(T, Su, Pk, d);
        mat_nn(R, T, Sv, d);
        float *b = a->Lo + k * bs;
        memset(b, 0, sizeof(float) * bs);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) b[i * dp + j] = (float)-R[i * d + j];
    }
}

static void lap_general_backward(donto_sheaf_model *m, sheaf_layer_act *a) {
    int d = m->d, dp = m->dp;
    size_t dd = (size_t)d * d, bs = (size_t)dp * dp;
    /* pass 1 (edges): dF from Lo, and the edge's contributions to dS_u, dS_v */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        double F0[SHEAF_MAX_D * SHEAF_MAX_D], F1[SHEAF_MAX_D * SHEAF_MAX_D], Pk[SHEAF_MAX_D * SHEAF_MAX_D];
        double Su[SHEAF_MAX_D * SHEAF_MAX_D], Sv[SHEAF_MAX_D * SHEAF_MAX_D], G[SHEAF_MAX_D * SHEAF_MAX_D];
        double T[SHEAF_MAX_D * SHEAF_MAX_D], dP[SHEAF_MAX_D * SHEAF_MAX_D], X1[SHEAF_MAX_D * SHEAF_MAX_D];
        f2d(F0, a->mz + (size_t)(2 * k) * dd, (int)dd), f2d(F1, a->mz + (size_t)(2 * k + 1) * dd, (int)dd);
        f2d(Su, a->S + (size_t)m->eu[k] * dd, (int)dd), f2d(Sv, a->S + (size_t)m->ev[k] * dd, (int)dd);
        const float *dL = m->dLo + k * bs;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) G[i * d + j] = dL[i * dp + j];
        mat_tn(Pk, F0, F1, d);
        /* Lo = -Su P Sv: dP = -Su G Sv ; dSu = -G Sv P^T ; dSv = -P^T Su G */
        mat_nn(T, Su, G, d);
        mat_nn(dP, T, Sv, d);
        for (size_t i = 0; i < dd; i++) dP[i] = -dP[i];
        mat_nt(T, Sv, Pk, d); /* Sv P^T */
        mat_nn(X1, G, T, d);
        for (size_t i = 0; i < dd; i++) m->gsu[k * dd + i] = (float)-X1[i];
        mat_nn(T, Su, G, d);
        mat_tn(X1, Pk, T, d);
        for (size_t i = 0; i < dd; i++) m->gsv[k * dd + i] = (float)-X1[i];
        /* P = F0^T F1: dF0 = F1 dP^T, dF1 = F0 dP */
        mat_nt(T, F1, dP, d);
        mat_nn(X1, F0, dP, d);
        for (size_t i = 0; i < dd; i++)
            m->dmz[(size_t)(2 * k) * dd + i] = (float)T[i], m->dmz[(size_t)(2 * k + 1) * dd + i] = (float)X1[i];
    }
    /* pass 2 (nodes): dS_v, then dD_v through Ld = S D S and S = f(D + (1+eps) I) */
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++) {
        double dS[SHEAF_MAX_D * SHEAF_MAX_D] = {0}, S[SHEAF_MAX_D * SHEAF_MAX_D], D[SHEAF_MAX_D * SHEAF_MAX_D];
        double G[SHEAF_MAX_D * SHEAF_MAX_D], T[SHEAF_MAX_D * SHEAF_MAX_D], T2[SHEAF_MAX_D * SHEAF_MAX_D], dD[SHEAF_MAX_D * SHEAF_MAX_D];
        const double *V = a->evecs + v * dd, *w = a->evals + (size_t)v * d;
        f2d(S, a->S + v * dd, (int)dd), f2d(D, a->D + v * dd, (int)dd);
        for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
            int k = m->adj_k[q];
            const float *c = m->adj_side[q] ? m->gsv + (size_t)k * dd : m->gsu + (size_t)k * dd;
            for (size_t i = 0; i < dd; i++) dS[i] += c[i];
        }
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) G[i * d + j] = m->dLd[(size_t)v * bs + i * dp + j];
        /* Ld = S D S: dS += G S D + D S G ; dD = S G S */
        mat_nn(T, G, S, d);
        mat_nn(T2, T, D, d);
        for (size_t i = 0; i < dd; i++) dS[i] += T2[i];
        mat_nn(T, D, S, d);
        mat_nn(T2, T, G, d);
        for (size_t i = 0; i < dd; i++) dS[i] += T2[i];
        mat_nn(T, S, G, d);
        mat_nn(dD, T, S, d);
        /* S = V f(w) V^T, f = x^-1/2: dM = V (K o (V^T dS V)) V^T, K_ij = (f_i - f_j)/(w_i - w_j) */
        mat_tn(T, V, dS, d);
        mat_nn(T2, T, V, d);
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                double K, wi = w[i], wj = w[j];
                if (fabs(wi - wj) > 1e-9 * (wi + wj)) K = (1 / sqrt(wi) - 1 / sqrt(wj)) / (wi - wj);
                else K = -0.5 * pow(0.5 * (wi + wj), -1.5);
                T2[i * d + j] *= K;
            }
        mat_nn(T, V, T2, d);
        mat_nt(T2, T, V, d);
        for (size_t i = 0; i < dd; i++) dD[i] += T2[i];
        for (size_t i = 0; i < dd; i++) m->dD[v * dd + i] = (float)dD[i];
    }
    /* pass 3 (directed edges): D_row += F^T F: dF += F (dD + dD^T) */
#pragma omp parallel for schedule(static)
    for (int e = 0; e < 2 * m->ne; e++) {
        int k = e / 2, row = (e & 1) ? m->ev[k] : m->eu[k];
        const float *F = a->mz + (size_t)e * dd, *G = m->dD + (size_t)row * dd;
        float *dF = m->dmz + (size_t)e * dd;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int r = 0; r < d; r++) s += (double)F[i * d + r] * (G[r * d + j] + G[j * d + r]);
                dF[i * d + j] += (float)s;
            }
    }
}

/* ------------------------------------------------------------------ */
/* Z = L Y (sparse block multiply) and its backward                     */

/* The Laplacian loops gather whole rows (H floats) of the nodes at the other
 * end of each edge: addresses in graph order, which the hardware prefetcher
 * cannot guess, and on large graphs (100k nodes: 64 MB per feature matrix)
 * each row is a cache miss. Asking for the row needed PF_AHEAD edges later
 * hides most of that latency. Only a hint: results are unchanged. */
#define PF_AHEAD 4
static inline void prefetch_row(const float *p, size_t H) {
    const char *c = (const char *)p;
    for (size_t b = 0; b < H * sizeof(float); b += 64) __builtin_prefetch(c + b);
}

static void lap_apply(const donto_sheaf_model *m, const sheaf_layer_act *a, float *Z, const float *Y) {
    int dp = m->dp, C = m->C;
    size_t H = (size_t)m->H;
    if (!m->dense) {
        int qend = m->adj_off[m->n];
#pragma omp parallel for schedule(dynamic, 64)
        for (int v = 0; v < m->n; v++) {
            float *z = Z + v * H;
            const float *y = Y + v * H;
            for (int i = 0; i < dp; i++) {
                float l = a->Ld[(size_t)v * dp + i];
                for (int c = 0; c < C; c++) z[i * C + c] = l * y[i * C + c];
            }
            for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
                if (q + PF_AHEAD < qend) {
                    int k2 = m->adj_k[q + PF_AHEAD];
                    prefetch_row(Y + (size_t)(m->adj_side[q + PF_AHEAD] ? m->eu[k2] : m->ev[k2]) * H, H);
                    __builtin_prefetch(a->Lo + (size_t)k2 * dp);
                }
                int k = m->adj_k[q], o = m->adj_side[q] ? m->eu[k] : m->ev[k];
                const float *yo = Y + (size_t)o * H, *lo = a->Lo + (size_t)k * dp;
                for (int i = 0; i < dp; i++) {
                    float l = lo[i];
                    for (int c = 0; c < C; c++) z[i * C + c] += l * yo[i * C + c];
                }
            }
        }
        return;
    }
    size_t bs = (size_t)dp * dp;
#pragma omp parallel for schedule(dynamic, 64)
    for (int v = 0; v < m->n; v++) {
        float *z = Z + v * H;
        const float *y = Y + v * H, *ld = a->Ld + v * bs;
        for (int i = 0; i < dp; i++) {
            for (int c = 0; c < C; c++) z[i * C + c] = 0;
            for (int j = 0; j < dp; j++) {
                float l = ld[i * dp + j];
                if (l == 0) continue;
                for (int c = 0; c < C; c++) z[i * C + c] += l * y[j * C + c];
            }
        }
        for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
            int k = m->adj_k[q], side = m->adj_side[q], o = side ? m->eu[k] : m->ev[k];
            const float *yo = Y + (size_t)o * H, *lo = a->Lo + (size_t)k * bs;
            for (int i = 0; i < dp; i++)
                for (int j = 0; j < dp; j++) {
                    float l = side ? lo[j * dp + i] : lo[i * dp + j]; /* block (v,o) = Lo^T when v is ev */
                    if (l == 0) continue;
                    for (int c = 0; c < C; c++) z[i * C + c] += l * yo[j * C + c];
                }
        }
    }
}

/* sum_c a[c] b[c] + e[c] f[c] with 8 float lanes (vectorisable, fixed order: deterministic) */
static inline double dot2(const float *a, const float *b, const float *e, const float *f, int C) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[c + l] * b[c + l] + (e ? e[c + l] * f[c + l] : 0.0f);
    double s = 0;
    for (; c < C; c++) s += (double)a[c] * b[c] + (e ? (double)e[c] * f[c] : 0.0);
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* dLd_v = dZ_v Y_v^T ; dLo_k = dZ_u Y_v^T + Y_u dZ_v^T (diag: only the diagonal) */
static void lap_grad_blocks(donto_sheaf_model *m, const float *dZ, const float *Y) {
    int dp = m->dp, C = m->C;
    size_t H = (size_t)m->H;
    if (!m->dense) {
#pragma omp parallel for schedule(static)
        for (int v = 0; v < m->n; v++)
            for (int i = 0; i < dp; i++)
                m->dLd[(size_t)v * dp + i] = (float)dot2(dZ + v * H + i * C, Y + v * H + i * C, NULL, NULL, C);
#pragma omp parallel for schedule(static)
        for (int k = 0; k < m->ne; k++) {
            if (k + PF_AHEAD < m->ne) {
                size_t u2 = (size_t)m->eu[k + PF_AHEAD] * H, v2 = (size_t)m->ev[k + PF_AHEAD] * H;
                prefetch_row(dZ + u2, H);
                prefetch_row(Y + u2, H);
                prefetch_row(dZ + v2, H);
                prefetch_row(Y + v2, H);
            }
            size_t u = (size_t)m->eu[k] * H, v = (size_t)m->ev[k] * H;
            for (int i = 0; i < dp; i++)
                m->dLo[(size_t)k * dp + i] =
                    (float)dot2(dZ + u + i * C, Y + v + i * C, Y + u + i * C, dZ + v + i * C, C);
        }
        return;
    }
    size_t bs = (size_t)dp * dp;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < m->n; v++)
        for (int i = 0; i < dp; i++)
            for (int j = 0; j < dp; j++) {
                double s = 0;
                for (int c = 0; c < C; c++) s += (double)dZ[v * H + i * C + c] * Y[v * H + j * C + c];
                m->dLd[v * bs + i * dp + j] = (float)s;
            }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m->ne; k++) {
        size_t u = (size_t)m->eu[k] * H, v = (size_t)m->ev[k] * H;
        for (int i = 0; i < dp; i++)
            for (int j = 0; j < dp; j++) {
                double s = 0;
                for (int c = 0; c < C; c++)
                    s += (double)dZ[u + i * C + c] * Y[v + j * C + c] + (double)Y[u + i * C + c] * dZ[v + j * C + c];
                m->dLo[k * bs + i * dp + j] = (float)s;
            }
    }
}

/* ------------------------------------------------------------------ */
/* left weights: Y_v = W1 X_v (d'xd' times d'xC per node)                */

static void left_forward(float *Y, const float *X, const float *W, int n, int dp, int C) {
    size_t H = (size_t)dp * C;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < n; v++)
        for (int i = 0; i < dp; i++) {
            float *y = Y + v * H + (size_t)i * C;
            for (int c = 0; c < C; c++) y[c] = 0;
            for (int j = 0; j < dp; j++) {
                float w = W[i * dp + j];
                const float *x = X + v * H + (size_t)j * C;
                for (int c = 0; c < C; c++) y[c] += w * x[c];
            }
        }
}
/* dX_v = W^T dY_v ; dW += sum_v dY_v X_v^T (fixed chunks, double) */
static void left_backward(float *dX, float *dW, const float *dY, const float *X, const float *W, int n, int dp, int C) {
    size_t H = (size_t)dp * C;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < n; v++)
        for (int j = 0; j < dp; j++) {
            float *x = dX + v * H + (size_t)j * C;
            for (int c = 0; c < C; c++) x[c] = 0;
            for (int i = 0; i < dp; i++) {
                float w = W[i * dp + j];
                const float *y = dY + v * H + (size_t)i * C;
                for (int c = 0; c < C; c++) x[c] += w * y[c];
            }
        }
    /* dW: 64 fixed node chunks, each a partial sum in node order, then summed in chunk
     * order: one pass over the data and the same result for any thread count */
    enum { NCH = 64 };
    int nij = dp * dp;
    double *part = donto_xcalloc((size_t)NCH * nij, sizeof(double));
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < NCH; ch++) {
        int v0 = (int)((long)n * ch / NCH), v1 = (int)((long)n * (ch + 1) / NCH);
        double *pp = part + (size_t)ch * nij;
        for (int v = v0; v < v1; v++)
            for (int i = 0; i < dp; i++)
                for (int j = 0; j < dp; j++)
                    pp[i * dp + j] += dot2(dY + v * H + (size_t)i * C, X + v * H + (size_t)j * C, NULL, NULL, C);
    }
    for (int ch = 0; ch < NCH; ch++)
        for (int ij = 0; ij < nij; ij++) dW[ij] += (float)part[(size_t)ch * nij + ij];
    free(part);
}

/* ------------------------------------------------------------------ */
/* log-softmax + NLL                                                    */

static double logsoftmax_nll(float *logp, const float *logits, const int *y, const uint8_t *mask, int n, int K) {
    double loss = 0;
    long cnt = 0;
#pragma omp parallel for schedule(static)
    for (int v = 0; v < n; v++) {
        const float *z = logits + (size_t)v * K;
        double mx = z[0];
        for (int c = 1; c < K; c++) mx = z[c] > mx ? z[c] : mx;
        double s = 0;
        for (int c = 0; c < K; c++) s += exp(z[c] - mx);
        double lse = mx + log(s);
        for (int c = 0; c < K; c++) logp[(size_t)v * K + c] = (float)(z[c] - lse);
    }
    for (int v = 0; v < n; v++) {
        if (mask && !mask[v]) continue;
        if (y[v] < 0 || y[v] >= K) continue;
        loss -= logp[(size_t)v * K + y[v]];
        cnt++;
    }
    return cnt ? loss / cnt : 0.0;
}

/* ------------------------------------------------------------------ */
/* forward                                                              */

/* ------------------------------------------------------------------ */
/* sparse input features                                                */

static void xsparse_free(donto_sheaf_model *m) {
    free(m->xr_off), free(m->xr_col), free(m->xr_val), free(m->xr_dval);
    free(m->xc_off), free(m->xc_row), free(m->xc_perm);
    m->xr_off = m->xr_col = m->xc_off = m->xc_row = m->xc_perm = NULL;
    m->xr_val = m->xr_dval = NULL;
    m->xsparse = 0;
}

/* Build CSR/CSC of the graph's features once per graph (below 30% density). */
static void xsparse_prepare(donto_sheaf_model *m, const donto_graph *g) {
    if (m->xs_src == g->x) return;
    xsparse_free(m);
    m->xs_src = g->x;
    size_t n = (size_t)m->n, f = (size_t)m->f, nnz = 0;
    for (size_t i = 0; i < n * f; i++) nnz += g->x[i] != 0;
    if (nnz > 0.3 * (double)(n * f)) return;
    m->xsparse = 1;
    m->xr_off = donto_xcalloc(n + 1, sizeof(int));
    m->xr_col = donto_xmalloc(sizeof(int) * (nnz + 1));
    m->xr_val = fbuf(nnz), m->xr_dval = fbuf(nnz);
    m->xc_off = donto_xcalloc(f + 1, sizeof(int));
    m->xc_row = donto_xmalloc(sizeof(int) * (nnz + 1));
    m->xc_perm = donto_xmalloc(sizeof(int) * (nnz + 1));
    size_t q = 0;
    for (size_t v = 0; v < n; v++) {
        for (size_t j = 0; j < f; j++)
            if (g->x[v * f + j] != 0) {
                m->xr_col[q] = (int)j, m->xr_val[q] = g->x[v * f + j], q++;
                m->xc_off[j + 1]++;
            }
        m->xr_off[v + 1] = (int)q;
    }
    for (size_t j = 0; j < f; j++) m->xc_off[j + 1] += m->xc_off[j];
    int *fill = donto_xcalloc(f, sizeof(int));
    for (size_t v = 0; v < n; v++)
        for (int r = m->xr_off[v]; r < m->xr_off[v + 1]; r++) {
            int j = m->xr_col[r], c = m->xc_off[j] + fill[j]++;
            m->xc_row[c] = (int)v, m->xc_perm[c] = r;
        }
    free(fill);
    memcpy(m->xr_dval, m->xr_val, sizeof(float) * nnz);
}

/* Y[n][out] = Xsparse W^T + b, via WT = W^T [F][out] (contiguous rows to add). */
static void sparse_linear_forward(donto_sheaf_model *m, float *Y, const float *W, const float *b, int out) {
    int n = m->n, f = m->f;
    for (int o = 0; o < out; o++)
        for (int j = 0; j < f; j++) m->WT[(size_t)j * out + o] = W[(size_t)o * f + j];
#pragma omp parallel for schedule(dynamic, 32)
    for (int v = 0; v < n; v++) {
        float *y = Y + (size_t)v * out;
        for (int o = 0; o < out; o++) y[o] = b ? b[o] : 0.0f;
        for (int r = m->xr_off[v]; r < m->xr_off[v + 1]; r++) {
            float x = m->xr_dval[r];
            if (x == 0) continue;
            const float *w = m->WT + (size_t)m->xr_col[r] * out;
            for (int o = 0; o < out; o++) y[o] += x * w[o];
        }
    }
}
/* dW[out][F] += dY^T Xsparse (per feature column, CSC order: deterministic) */
static void sparse_linear_backward_w(donto_sheaf_model *m, float *dW, const float *dY, int out) {
    int f = m->f;
#pragma omp parallel for schedule(dynamic, 32)
    for (int j = 0; j < f; j++) {
        float *acc = m->dWT + (size_t)j * out;
        for (int o = 0; o < out; o++) acc[o] = 0;
        for (int c = m->xc_off[j]; c < m->xc_off[j + 1]; c++) {
            float x = m->xr_dval[m->xc_perm[c]];
            if (x == 0) continue;
            const float *d = dY + (size_t)m->xc_row[c] * out;
            for (int o = 0; o < out; o++) acc[o] += x * d[o];
        }
    }
    for (int o = 0; o < out; o++)
        for (int j = 0; j < f; j++) dW[(size_t)o * f + j] += m->dWT[(size_t)j * out + o];
}

/* the first layer (NSD lin1, GCN layer 0): dense or sparse */
static void first_linear_forward(donto_sheaf_model *m, const donto_graph *g, float *Y, const float *W, const float *b,
                                 int out) {
    if (m->xsparse) sparse_linear_forward(m, Y, W, b, out);
    else linear_forward(Y, sheaf_graph_x(m, g), W, b, m->n, m->f, out);
}
static void first_linear_backward(donto_sheaf_model *m, const donto_graph *g, float *dW, float *db, const float *dY,
                                  const float *W, int out) {
    if (m->xsparse) {
        sparse_linear_backward_w(m, dW, dY, out);
        if (db)
#pragma omp parallel for schedule(static)
            for (int o = 0; o < out; o++) {
                double s = 0;
                for (int v = 0; v < m->n; v++) s += dY[(size_t)v * out + o];
                db[o] += (float)s;
            }
    } else {
        linear_backward(NULL, dW, db, dY, sheaf_graph_x(m, g), W, m->n, m->f, out);
    }
}

static void input_dropout(donto_sheaf_model *m, const donto_graph *g) {
    xsparse_prepare(m, g);
    if (m->xsparse) {
        int nnzt = m->xr_off[m->n];
        if (m->training && m->hp.input_dropout > 0) {
            uint64_t key = site_key(m->hp.seed, m->step, 1);
            float p = m->hp.input_dropout, scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
            for (int v = 0; v < m->n; v++)
                for (int r = m->xr_off[v]; r < m->xr_off[v + 1]; r++)
                    m->xr_dval[r] = sheaf_urand(key, (uint64_t)v * m->f + m->xr_col[r]) >= p ? m->xr_val[r] * scale : 0.0f;
        } else {
            memcpy(m->xr_dval, m->xr_val, sizeof(float) * nnzt);
        }
        return;
    }
    if (m->xin) {
        if (m->training && m->hp.input_dropout > 0)
            dropout_forward(m->xin, m->inmask, g->x, (size_t)m->n * m->f, m->hp.input_dropout, site_key(m->hp.seed, m->step, 1));
        else
            memcpy(m->xin, g->x, sizeof(float) * (size_t)m->n * m->f);
    }
}

static void gcn_aggregate(const donto_sheaf_model *m, float *out, const float *T, const float *b, int width) {
#pragma omp parallel for schedule(dynamic, 64)
    for (int v = 0; v < m->n; v++) {
        float *o = out + (size_t)v * width;
        const float *t = T + (size_t)v * width;
        float self = 1.0f / (m->deg[v] + 1.0f);
        for (int c = 0; c < width; c++) o[c] = self * t[c];
        for (int q = m->adj_off[v]; q < m->adj_off[v + 1]; q++) {
            int k = m->adj_k[q], u = m->adj_side[q] ? m->eu[k] : m->ev[k];
            float w = m->fix_off[k];
            const float *tu = T + (size_t)u * width;
            for (int c = 0; c < width; c++) o[c] += w * tu[c];
        }
        if (b)
            for (int c = 0; c < width; c++) o[c] += b[c];
    }
}

static void gcn_forward(donto_sheaf_model *m, const donto_graph *g) {
    int n = m->n, L = m->L;
    const float *x = sheaf_graph_x(m, g);
    for (int l = 0; l < L; l++) {
        int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
        const float *h = l == 0 ? x : m->gH[l];
        if (l == 0) first_linear_forward(m, g, m->gT[l], TP(m, m->i_gcnw[l]), NULL, out);
        else linear_forward(m->gT[l], h, TP(m, m->i_gcnw[l]), NULL, n, in, out);
        gcn_aggregate(m, l == L - 1 ? m->logits : m->gA[l], m->gT[l], TP(m, m->i_gcnb[l]), out);
        if (l < L - 1) {
            size_t cnt = (size_t)n * out;
            float *nx = m->gH[l + 1];
            const float *a = m->gA[l];
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < cnt; i++) nx[i] = a[i] > 0 ? a[i] : 0;
            if (m->training && m->hp.dropout > 0)
                dropout_forward(nx, m->gmask[l + 1], nx, cnt, m->hp.dropout, site_key(m->hp.seed, m->step, 300 + l));
        }
    }
}

static void nsd_forward(donto_sheaf_model *m, const donto_graph *g) {
    int n = m->n, H = m->H, L = m->L, dp = m->dp, C = m->C;
    size_t NH = (size_t)n * H;
    float p = m->training ? m->hp.dropout : 0.0f;
    const float *x = sheaf_graph_x(m, g);
    /* lin1 -> ELU -> dropout [-> lin12] : [N][F] -> [N][H] */
    (void)x;
    first_linear_forward(m, g, m->h1, TP(m, m->i_lin1w), TP(m, m->i_lin1b), H);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < NH; i++) m->hd[i] = elu(m->h1[i]);
    if (p > 0) dropout_forward(m->hd, m->hmask, m->hd, NH, p, site_key(m->hp.seed, m->step, 2));
    if (m->hp.second_linear)
        linear_forward(m->la[0].X, m->hd, TP(m, m->i_lin12w), TP(m, m->i_lin12b), n, H, H);
    else
        memcpy(m->la[0].X, m->hd, sizeof(float) * NH);

    for (int t = 0; t < L; t++) {
        sheaf_layer_act *a = &m->la[t];
        float *Xnext = t + 1 < L ? m->la[t + 1].X : m->Xout;
        /* sheaf learner on dropout(X) (no dropout at t = 0) */
        const float *xm = a->X;
        if (t > 0 && p > 0) {
            dropout_forward(a->xm, a->mmask, a->X, NH, p, site_key(m->hp.seed, m->step, 100 + t));
            xm = a->xm;
        }
        learner_forward(m, a, xm, t);
        if (m->hp.family == DONTO_SHEAF_DIAG) lap_diag_forward(m, a);
        else if (m->hp.family == DONTO_SHEAF_ORTH) lap_orth_forward(m, a);
        else lap_general_forward(m, a);
        lap_fixed(m, a);
        /* Xd = dropout(X); Y1 = (I (x) W1) Xd; Y2 = Y1 W2^T; Z = L Y2 */
        const float *xd = a->X;
        if (p > 0) {
            dropout_forward(a->Xd, a->dmask, a->X, NH, p, site_key(m->hp.seed, m->step, 200 + t));
            xd = a->Xd;
        }
        const float *y1 = xd;
        if (m->hp.left_weights) {
            left_forward(a->Y1, xd, TP(m, m->i_left[t]), n, dp, C);
            y1 = a->Y1;
        }
        const float *y2 = y1;
        if (m->hp.right_weights) {
            linear_forward(a->Y2, y1, TP(m, m->i_right[t]), NULL, n * dp, C, C);
            y2 = a->Y2;
        } else {
            memcpy(a->Y2, y1, sizeof(float) * NH);
        }
        (void)y2;
        lap_apply(m, a, a->Z, a->Y2);
        /* X_{t+1} = (1 + tanh eps) X_t - ELU(Z) */
        const float *eps = TP(m, m->i_eps[t]);
        float coef[SHEAF_MAX_D];
        for (int i = 0; i < dp; i++) coef[i] = 1.0f + tanhf(eps[i]);
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++)
            for (int i = 0; i < dp; i++)
                for (int c = 0; c < C; c++) {
                    size_t o = (size_t)v * H + (size_t)i * C + c;
                    Xnext[o] = coef[i] * a->X[o] - elu(a->Z[o]);
                }
    }
    linear_forward(m->logits, m->Xout, TP(m, m->i_lin2w), TP(m, m->i_lin2b), n, H, m->K);
}

double donto_sheaf_forward(donto_sheaf_model *m, const donto_graph *g, int training, uint64_t step,
                           const uint8_t *mask, const float **logp) {
    m->training = training;
    m->step = step;
    int saved = omp_get_max_threads(), blas = blas_single_begin();
    if (m->nthreads) omp_set_num_threads(m->nthreads);
    input_dropout(m, g);
    if (m->hp.family == DONTO_SHEAF_GCN) gcn_forward(m, g);
    else nsd_forward(m, g);
    double loss = logsoftmax_nll(m->logp, m->logits, g->y, mask, m->n, m->K);
    if (m->nthreads) omp_set_num_threads(saved);
    blas_single_end(blas);
    if (logp) *logp = m->logp;
    return loss;
}

/* ------------------------------------------------------------------ */
/* backward                                                             */

static void gcn_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits) {
    int n = m->n, L = m->L;
    const float *x = sheaf_graph_x(m, g);
    float *dA = dlogits;
    for (int l = L - 1; l >= 0; l--) {
        int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
        float *db = TG(m, m->i_gcnb[l]);
        for (int c = 0; c < out; c++) {
            double s = 0;
            for (int v = 0; v < n; v++) s += dA[(size_t)v * out + c];
            db[c] += (float)s;
        }
        /* A = Ahat T + b: dT = Ahat dA (symmetric) */
        float *dT = m->dtmp;
        gcn_aggregate(m, dT, dA, NULL, out);
        const float *h = l == 0 ? x : m->gH[l];
        float *dH = l > 0 ? m->dtmp2 : NULL;
        if (l == 0) first_linear_backward(m, g, TG(m, m->i_gcnw[l]), NULL, dT, TP(m, m->i_gcnw[l]), out);
        else linear_backward(dH, TG(m, m->i_gcnw[l]), NULL, dT, h, TP(m, m->i_gcnw[l]), n, in, out);
        if (l > 0) {
            size_t cnt = (size_t)n * in;
            const float *a = m->gA[l - 1];
            float *dprev = m->dX;
            int drop = m->training && m->hp.dropout > 0;
            float scale = drop ? 1.0f / (1.0f - m->hp.dropout) : 1.0f;
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < cnt; i++) {
                float gv = dH[i];
                if (drop) gv = m->gmask[l][i] ? gv * scale : 0.0f;
                dprev[i] = a[i] > 0 ? gv : 0.0f;
            }
            dA = dprev;
        }
    }
}

static void nsd_backward(donto_sheaf_model *m, const donto_graph *g, const float *dlogits) {
    int n = m->n, H = m->H, L = m->L, dp = m->dp, C = m->C;
    size_t NH = (size_t)n * H;
    float p = m->training ? m->hp.dropout : 0.0f;
    float *dX = m->dX; /* running gradient wrt X_{t+1} */
    linear_backward(dX, TG(m, m->i_lin2w), TG(m, m->i_lin2b), dlogits, m->Xout, TP(m, m->i_lin2w), n, H, m->K);
    for (int t = L - 1; t >= 0; t--) {
        sheaf_layer_act *a = &m->la[t];
        const float *eps = TP(m, m->i_eps[t]);
        float *deps = TG(m, m->i_eps[t]);
        /* X_{t+1} = coef X_t - ELU(Z): deps, dZ (into dtmp), dX_t partial (in place) */
        float *dZ = m->dtmp;
        for (int i = 0; i < dp; i++) {
            double s = 0;
            for (int v = 0; v < n; v++)
                for (int c = 0; c < C; c++) {
                    size_t o = (size_t)v * H + (size_t)i * C + c;
                    s += (double)dX[o] * a->X[o];
                }
            double th = tanh(eps[i]);
            deps[i] += (float)(s * (1.0 - th * th));
        }
        float coef[SHEAF_MAX_D];
        for (int i = 0; i < dp; i++) coef[i] = 1.0f + tanhf(eps[i]);
#pragma omp parallel for schedule(static)
        for (int v = 0; v < n; v++)
            for (int i = 0; i < dp; i++)
                for (int c = 0; c < C; c++) {
                    size_t o = (size_t)v * H + (size_t)i * C + c;
                    dZ[o] = -dX[o] * elu_grad(a->Z[o]);
                    dX[o] *= coef[i];
                }
        /* Z = L Y2: dY2 = L dZ ; dL blocks */
        lap_grad_blocks(m, dZ, a->Y2);
        float *dY2 = m->dtmp2;
        lap_apply(m, a, dY2, dZ);
        /* Y2 = Y1 W2^T */
        const float *xd = p > 0 ? a->Xd : a->X;
        const float *y1 = m->hp.left_weights ? a->Y1 : xd;
        float *dY1 = dY2;
        if (m->hp.right_weights) {
            dY1 = m->dtmp;
            linear_backward(dY1, TG(m, m->i_right[t]), NULL, dY2, y1, TP(m, m->i_right[t]), n * dp, C, C);
        }
        float *dXd = dY1;
        if (m->hp.left_weights) {
            dXd = dY1 == m->dtmp ? m->dtmp2 : m->dtmp;
            left_backward(dXd, TG(m, m->i_left[t]), dY1, xd, TP(m, m->i_left[t]), n, dp, C);
        }
        if (p > 0) dropout_backward(dX, dXd, a->dmask, NH, p, 1);
        else {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < NH; i++) dX[i] += dXd[i];
        }
        /* Laplacian -> maps -> learner -> dxm */
        if (m->hp.family == DONTO_SHEAF_DIAG) lap_diag_backward(m, a);
        else if (m->hp.family == DONTO_SHEAF_ORTH) lap_orth_backward(m, a);
        else lap_general_backward(m, a);
        const float *xm = (t > 0 && p > 0) ? a->xm : a->X;
        learner_backward(m, a, xm, t, m->dxm);
        if (t > 0 && p > 0) dropout_backward(dX, m->dxm, a->mmask, NH, p, 1);
        else {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < NH; i++) dX[i] += m->dxm[i];
        }
    }
    /* dX_0 -> lin12 -> dropout -> ELU -> lin1 */
    float *dh = dX;
    if (m->hp.second_linear) {
        linear_backward(m->dtmp, TG(m, m->i_lin12w), TG(m, m->i_lin12b), dX, m->hd, TP(m, m->i_lin12w), n, H, H);
        dh = m->dtmp;
    }
    if (p > 0) dropout_backward(dh, dh, m->hmask, NH, p, 0);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < NH; i++) dh[i] *= elu_grad(m->h1[i]);
    first_linear_backward(m, g, TG(m, m->i_lin1w), TG(m, m->i_lin1b), dh, TP(m, m->i_lin1w), H);
}

void donto_sheaf_backward_from(donto_sheaf_model *m, const donto_graph *g, const float *dlogp) {
    int n = m->n, K = m->K;
    int saved = omp_get_max_threads(), blas = blas_single_begin();
    if (m->nthreads) omp_set_num_threads(m->nthreads);
    memset(m->g, 0, sizeof(float) * m->np);
    float *dlogits = donto_xmalloc(sizeof(float) * (size_t)n * K);
    /* logp = z - lse(z): dz = dlogp - softmax * sum(dlogp) */
#pragma omp parallel for schedule(static)
    for (int v = 0; v < n; v++) {
        double s = 0;
        for (int c = 0; c < K; c++) s += dlogp[(size_t)v * K + c];
        for (int c = 0; c < K; c++)
            dlogits[(size_t)v * K + c] = (float)(dlogp[(size_t)v * K + c] - exp((double)m->logp[(size_t)v * K + c]) * s);
    }
    if (m->hp.family == DONTO_SHEAF_GCN) gcn_backward(m, g, dlogits);
    else nsd_backward(m, g, dlogits);
    free(dlogits);
    if (m->nthreads) omp_set_num_threads(saved);
    blas_single_end(blas);
}

void donto_sheaf_backward(donto_sheaf_model *m, const donto_graph *g, const uint8_t *mask) {
    int n = m->n, K = m->K;
    long cnt = 0;
    for (int v = 0; v < n; v++)
        if ((!mask || mask[v]) && g->y[v] >= 0 && g->y[v] < K) cnt++;
    float *dlogp = donto_xcalloc((size_t)n * K, sizeof(float));
    if (cnt)
        for (int v = 0; v < n; v++)
            if ((!mask || mask[v]) && g->y[v] >= 0 && g->y[v] < K) dlogp[(size_t)v * K + g->y[v]] = -1.0f / (float)cnt;
    donto_sheaf_backward_from(m, g, dlogp);
    free(dlogp);
}
