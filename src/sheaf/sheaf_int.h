/* Private to src/sheaf/: the model's state and the operations the files share.
 * Shapes use the names of include/donto/sheaf.h.
 *
 * Files, one operation each, forward and backward side by side (llm.c style):
 *   nsd.c        hyperparameters, the parameter table, model_new/free, forward/backward drivers
 *   heads.c      input head (input dropout, sparse or dense lin1, ELU, dropout, lin12),
 *                output head (lin2, log-softmax + NLL)
 *   diffusion.c  one diffusion layer: X -> (1 + tanh eps) X - ELU(L (W1 (x) I) dropout(X) W2^T)
 *   learner.c    sheaf learners (maps = tanh(W [x_u || x_v]), edge weights) and the O(d) maps
 *                (Householder, Cayley)
 *   laplacian.c  normalised sheaf Laplacian blocks (Diag, O(d), General, fixed dims); Z = L Y
 *   gcn.c        the GCN baseline
 *   mlp.c        the MLP baseline (node features only, no graph)
 *   decoder.c    the edge decoder (pair features, 2-layer MLP) and the class-weighted NLL
 *   metrics.c    accuracy / macro-F1 / ROC-AUC / average precision
 *   dense.c      BLAS products split over the OpenMP team, linear, dropout
 *   graph.c, train.c, ckpt.c: graphs, the trainer, checkpoints
 *   op.c         the inference operator (include/donto/sheaf_op.h): read-only weights, one
 *                model per call, so that any number of threads may infer at once
 *
 * Out of memory -- the one place this is decided (docs/sheaf.md repeats it):
 *   - Allocations whose size a user's graph decides are checked where the graph enters the
 *     API: loading or building a graph (graph.c) and building a model for it
 *     (donto_sheaf_model_new, also behind donto_sheaf_load). They fail with a donto_err
 *     naming the bytes and what they were for; donto-sheaf prints it and exits non-zero.
 *     donto_sheaf_model_new allocates every graph-sized buffer the model keeps before it
 *     computes anything.
 *   - Everything after that -- forward/backward scratch, the sparse-feature index built on the
 *     first forward, the trainer's copy of the best weights, checkpoint I/O -- goes through
 *     sheaf_xalloc: the trainer aborts on OOM, as llm.c does, after printing how many bytes it
 *     asked for and what for. Those buffers are no bigger than the model's own.
 *   - donto_xmalloc (util.h) is left to small, bounded buffers (d x d scratch, per-layer
 *     tables, names). */
#ifndef DONTO_SHEAF_INT_H
#define DONTO_SHEAF_INT_H

#include <math.h>

#include "donto/sheaf.h"

#define SHEAF_MAX_D 16
#define SHEAF_MAX_TENSORS 512

/* Counter-based random numbers: a mask bit depends only on (key, index), so masks are
 * the same for any thread count. */
static inline uint64_t sheaf_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline float sheaf_urand(uint64_t key, uint64_t i) {
    return (float)(sheaf_mix64(key ^ sheaf_mix64(i)) >> 40) * (1.0f / 16777216.0f);
}

typedef struct sheaf_layer_act {
    float *X;      /* [N][d'][C] input of the layer (X_t) */
    float *xm;     /* [N][H] learner input (X_t, dropped out when t > 0) */
    uint8_t *mmask;/* [N*H] learner-input dropout mask (NULL: none) */
    float *mz;     /* [E2][P] tanh(learner output) */
    float *sw;     /* [E2] sigmoid of the edge-weight logits (ORTH + edge weights) */
    float *w;      /* [Eu] edge weight w_k = sw[2k] sw[2k+1] */
    float *Q;      /* [E2][d*d] orthogonal maps (ORTH) */
    float *D;      /* DIAG [N][d]; ORTH [N]; GENERAL [N][d*d] */
    float *S;      /* DIAG [N][d]; ORTH [N]; GENERAL [N][d*d]  (D+1)^-1/2 */
    double *evals; /* GENERAL [N][d] eigenvalues of D + (1+eps) I */
    double *evecs; /* GENERAL [N][d*d] eigenvectors (columns) */
    float *Ld;     /* DIAG [N][d']; else [N][d'*d'] normalised diagonal blocks */
    float *Lo;     /* DIAG [Eu][d']; else [Eu][d'*d'] normalised (u,v) blocks */
    float *Xd;     /* [N][d'][C] dropout(X_t) */
    uint8_t *dmask;/* [N*H] */
    float *Y1;     /* [N][d'][C] (I (x) W1) Xd */
    float *Y2;     /* [N][d'][C] Y1 W2^T */
    float *Z;      /* [N][d'][C] L Y2 (pre-ELU) */
} sheaf_layer_act;

struct donto_sheaf_model {
    donto_sheaf_hp hp;
    donto_sheaf_origin origin; /* what the weights were trained on (split -1: unknown) */
    int n, f, K;
    int d, dp, C, H, P, L; /* P: learner outputs per directed edge */
    int dense;             /* Laplacian blocks stored dense d'xd' (ORTH, GENERAL) */
    /* graph (copied) */
    int ne;
    int *eu, *ev;
    int *adj_off, *adj_k; /* CSR over nodes: incident undirected edges */
    uint8_t *adj_side;    /* 0: node is eu[k], 1: node is ev[k] */
    float *deg;           /* [N] */
    float *fix_diag;      /* [N] deg/(deg+1) */
    float *fix_off;       /* [Eu] 1/sqrt((deg_u+1)(deg_v+1)) */
    /* parameters */
    size_t np;
    float *p, *g, *adam_m, *adam_v;
    long adam_t;
    donto_sheaf_tensor t[SHEAF_MAX_TENSORS];
    int nt;
    /* tensor indices (-1 = absent) */
    int i_lin1w, i_lin1b, i_lin12w, i_lin12b, i_lin2w, i_lin2b;
    int *i_learn, *i_wlearn, *i_left, *i_right, *i_eps; /* [L] */
    int *i_gcnw, *i_gcnb;                                 /* [L] */
    /* activations */
    int training;
    uint64_t step;
    float *xin;        /* [N][F] dropped-out input (NULL: the graph's x) */
    uint8_t *inmask;   /* [N*F] */
    float *h1;         /* [N][H] lin1 output (pre-ELU) */
    float *hd;         /* [N][H] dropout(ELU(h1)) */
    uint8_t *hmask;    /* [N*H] */
    sheaf_layer_act *la; /* [L] ; la[t].X, plus Xout below */
    float *Xout;       /* [N][H] X_L */
    float *logits, *logp; /* [N][K] */
    /* GCN activations */
    float **gH;        /* [L] layer inputs (after dropout) [N][in_l] */
    uint8_t **gmask;   /* [L] dropout masks of the layer inputs */
    float **gA;        /* [L] layer outputs (pre-ReLU) [N][out_l] */
    float **gT;        /* [L] H W^T before aggregation */
    /* sparse input features (bag-of-words graphs are ~1-5% dense): CSR + CSC of x */
    const float *xs_src;  /* the x the CSR was built from */
    int xsparse;
    int *xr_off, *xr_col, *xc_off, *xc_row, *xc_perm; /* CSC entry q is CSR entry xc_perm[q] */
    float *xr_val, *xr_dval; /* values, values after input dropout */
    float *WT, *dWT;         /* [F][out] transposed first-layer weight and its gradient */
    int nthreads;            /* threads for this model's parallel loops (1 for small graphs) */
    /* backward scratch */
    float *dX, *dtmp, *dtmp2, *dxm, *dLd, *dLo, *dmz, *dS, *dD, *dQ, *gsu, *gsv;
    float *rowsum, *colsum, *dlogit;
    /* edge task (decoder.c): the encoder's output logits [N][K] (K = hidden) is the node
     * representation h; pairs p = (u, v, class) of the graph's task */
    int task;              /* DONTO_TASK_* */
    int Kc, Zd, Hd;        /* pair classes, decoder input 2K (4K directed), decoder hidden */
    int directed, npairs;
    int i_dec0w, i_dec0b, i_dec1w, i_dec1b;
    float *cw;             /* [Kc] class weights (all 1 for node tasks) */
    float *dz_in, *da, *dr, *pz, *pa, *pr; /* [P][Zd], [P][Hd] x2 (grads), [P][Zd], [P][Hd] x2 */
    float *plogits, *plogp, *dplogits;     /* [P][Kc] */
    float *demb;           /* [N][K] gradient wrt the node representation */
};

/* Parameter tensor i of model m: values and gradient. */
#define TP(m, i) ((m)->p + (m)->t[i].off)
#define TG(m, i) ((m)->g + (m)->t[i].off)

/* calloc(n, size) that aborts on OOM after printing the bytes and `what` (the policy above). */
void *sheaf_xalloc(size_t n, size_t size, const char *what);

/* ---- ckpt.c ---- */

/* A checkpoint's parsed JSON (root) -> a model built for g with its weights; `where` names the
 * source in errors (a path, or "checkpoint" for bytes). donto_sheaf_load and the operator
 * (op.c) both read checkpoints through it. */
struct json_t;
donto_sheaf_model *sheaf_ckpt_model(struct json_t *root, const char *where, const donto_graph *g,
                                    donto_sheaf_hp *hp_out, donto_err *err);

/* ---- small shared helpers ---- */

static inline float elu(float x) { return x > 0 ? x : expm1f(x); }
static inline float elu_grad(float x) { return x > 0 ? 1.0f : expf(x); }

/* Dropout key of one site (input, hidden, layer t's learner/diffusion input) at one step. */
static inline uint64_t site_key(uint64_t seed, uint64_t step, uint64_t site) {
    return sheaf_mix64(sheaf_mix64(seed * 0x2545F4914F6CDD1DULL + 17) ^ sheaf_mix64(step * 1000003ULL + site));
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

/* Small dense d x d products (d <= SHEAF_MAX_D), row-major, double accumulation. */
/* C = A^T B */
static inline void mat_tn(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[k * d + a] * B[k * d + b];
            C[a * d + b] = s;
        }
}
/* C = A B */
static inline void mat_nn(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[a * d + k] * B[k * d + b];
            C[a * d + b] = s;
        }
}
/* C = A B^T */
static inline void mat_nt(double *C, const double *A, const double *B, int d) {
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = 0;
            for (int k = 0; k < d; k++) s += A[a * d + k] * B[b * d + k];
            C[a * d + b] = s;
        }
}
static inline void f2d(double *o, const float *i, int n) { for (int k = 0; k < n; k++) o[k] = i[k]; }

/* ---- dense.c: building blocks ---- */

/* Hold OpenBLAS at one thread for a forward/backward pass; pass what begin returns to end. Any number
 * of threads may hold it at once (the operator's concurrent forwards): the first to begin sets
 * one thread, the last to end restores what the first found. */
int sheaf_blas_single_begin(void);
void sheaf_blas_single_end(int saved);
/* Row-major C[M][N] = alpha op(A)[M][K] op(B)[K][N] + beta C, split over the OpenMP team. */
void sheaf_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);
/* Y[n][out] = X[n][in] W[out][in]^T (+ b) */
void sheaf_linear_forward(float *Y, const float *X, const float *W, const float *b, int n, int in, int out);
/* dW[out][in] += dY^T X ; db[out] += colsum(dY) ; dX[n][in] = dY W (if dX) */
void sheaf_linear_backward(float *dX, float *dW, float *db, const float *dY, const float *X, const float *W,
                           int n, int in, int out);
/* out[n] = dropout(in) with a mask from key; mask[i] = 1 kept */
void sheaf_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t key);
/* Between two linear layers (GCN, MLP): h = dropout(ReLU(a)) over cnt values, the dropout (mask
 * kept) only while training, keyed by site; and back: da = ReLU'(a) * dropout'(dh). */
void sheaf_relu_dropout_forward(const donto_sheaf_model *m, const float *a, float *h, uint8_t *mask, size_t cnt,
                                uint64_t site);
void sheaf_relu_dropout_backward(const donto_sheaf_model *m, const float *a, const float *dh, const uint8_t *mask,
                                 float *da, size_t cnt);
/* din = mask * dout / (1-p) (accumulate when acc) */
void sheaf_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p, int acc);

/* ---- heads.c ---- */

/* The features the first layer reads: x, or its dropped-out copy. */
const float *sheaf_graph_x(const donto_sheaf_model *m, const donto_graph *g);
/* Input dropout of x (dense copy or the sparse index's values); builds the sparse index once per graph. */
void sheaf_input_dropout(donto_sheaf_model *m, const donto_graph *g);
void sheaf_xsparse_free(donto_sheaf_model *m);
/* First layer (NSD lin1, GCN layer 0), dense or sparse: Y[N][out] = x W^T + b ; dW, db (no dx). */
void sheaf_first_linear_forward(donto_sheaf_model *m, const donto_graph *g, float *Y, const float *W,
                                const float *b, int out);
void sheaf_first_linear_backward(donto_sheaf_model *m, const donto_graph *g, float *dW, float *db,
                                 const float *dY, const float *W, int out);
/* NSD input head: x [N][F] -> lin1 -> ELU -> dropout(p) [-> lin12] -> la[0].X [N][H]; backward from dX [N][H]. */
void sheaf_in_head_forward(donto_sheaf_model *m, const donto_graph *g, float p);
void sheaf_in_head_backward(donto_sheaf_model *m, const donto_graph *g, float p, float *dX);
/* NSD output head: Xout [N][H] -> lin2 -> logits [N][K]; backward writes dX [N][H]. */
void sheaf_out_head_forward(donto_sheaf_model *m);
void sheaf_out_head_backward(donto_sheaf_model *m, const float *dlogits, float *dX);
/* logp = log_softmax(logits) [n][K]; returns the mean NLL over mask (all labelled when NULL). */
double sheaf_logsoftmax_nll(float *logp, const float *logits, const int *y, const uint8_t *mask, int n, int K);
/* dlogits [n][K] from dlogp and logp. */
void sheaf_logsoftmax_backward(float *dlogits, const float *dlogp, const float *logp, int n, int K);

/* ---- diffusion.c: layer t, X_t = la[t].X -> X_{t+1} (la[t+1].X or Xout) ---- */

void sheaf_diffusion_forward(donto_sheaf_model *m, int t, float p);
/* dX [N][H]: gradient wrt X_{t+1} on entry, wrt X_t on return. */
void sheaf_diffusion_backward(donto_sheaf_model *m, int t, float p, float *dX);

/* ---- learner.c ---- */

/* xm [N][H] -> a->mz [E2][P] (and a->sw, a->w with edge weights). */
void sheaf_learner_forward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t);
/* m->dmz [E2][P], m->dlogit [E2] -> dW (accumulated), dxm [N][H] (overwritten). */
void sheaf_learner_backward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t, float *dxm);
/* O(d) map of one directed edge: prm [d(d-1)/2] -> Q [d][d] (DONTO_ORTH_*); backward adds into dprm. */
void sheaf_orth_map_forward(double *Q, const float *prm, int d, int orth);
void sheaf_orth_map_backward(float *dprm, const float *prm, const double *dQ, int d, int orth);

/* ---- laplacian.c ---- */

/* a->mz (and a->w) -> D, S, Ld, Lo (the family's blocks plus the fixed dims). */
void sheaf_lap_forward(donto_sheaf_model *m, sheaf_layer_act *a);
/* m->dLd, m->dLo -> m->dmz [E2][P] (and m->dlogit with edge weights). */
void sheaf_lap_backward(donto_sheaf_model *m, sheaf_layer_act *a);
/* Z [N][d'][C] = L Y */
void sheaf_lap_apply(const donto_sheaf_model *m, const sheaf_layer_act *a, float *Z, const float *Y);
/* m->dLd, m->dLo from dZ and Y of Z = L Y */
void sheaf_lap_grad_blocks(donto_sheaf_model *m, const float *dZ, const float *Y);

/* ---- gcn.c ---- */

void sheaf_gcn_forward(donto_sheaf_model *m, const donto_graph *g);
void sheaf_gcn_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits);

/* ---- mlp.c: x -> L linear layers (ReLU + dropout between) -> logits [N][K] ---- */

void sheaf_mlp_forward(donto_sheaf_model *m, const donto_graph *g);
void sheaf_mlp_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits);

/* ---- decoder.c ---- */

/* h = m->logits [N][K] and the graph's pairs -> m->plogits [P][Kc] */
void sheaf_decoder_forward(donto_sheaf_model *m, const donto_graph *g);
/* m->dplogits [P][Kc] -> dec.* gradients (accumulated), m->demb [N][K] (overwritten) */
void sheaf_decoder_backward(donto_sheaf_model *m, const donto_graph *g);
/* logp = log_softmax(logits) [n][K]; the class-weighted mean NLL over mask (all when NULL):
 * sum_i w[y_i] (-logp_i[y_i]) / sum_i w[y_i] (torch's cross_entropy(weight=w)). */
double sheaf_weighted_nll(float *logp, const float *logits, const int *y, const float *w, const uint8_t *mask,
                          int n, int K);

#endif
