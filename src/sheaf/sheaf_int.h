/* Internal state of a sheaf model (src/sheaf/): shared by the model, the trainer and
 * the checkpoint code. Shapes use the names of include/donto/sheaf.h. */
#ifndef DONTO_SHEAF_INT_H
#define DONTO_SHEAF_INT_H

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
};

/* src/sheaf/nsd.c */
const float *sheaf_graph_x(const donto_sheaf_model *m, const donto_graph *g);

#endif
