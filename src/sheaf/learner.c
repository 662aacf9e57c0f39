/*
 * Sheaf learners: the restriction maps of every directed edge e = (u, v) of layer t,
 *   z_e = W_t [x_u || x_v]  (W_t [P][2H], no bias),  maps_e = tanh(z_e)  [P]
 *   Diag:    F_e = diag(maps_e)                    P = d
 *   O(d):    F_e = w_e Q(maps_e)                   P = d(d-1)/2, Q Householder or Cayley (below),
 *            w_e = sigmoid(a.[x_u||x_v]) sigmoid(a.[x_v||x_u]) when edge weights are on
 *   General: F_e = maps_e as a d x d matrix        P = d^2
 * W [x_u || x_v] = (x W_l^T)_u + (x W_r^T)_v, so the learner is two [N][H] x [H][P] products
 * and a gather over edges, and its backward sums dz per node first (CSR) and runs the same
 * products transposed. The Laplacian (laplacian.c) turns maps_e into blocks; the O(d) maps Q
 * and their backward are here, called per edge by laplacian.c.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "sheaf_int.h"

/* ------------------------------------------------------------------ */
/* sheaf learner: z_e = W [x_row(e) || x_col(e)], maps = tanh(z)         */

/* xm [N][H] -> mz [E2][P]; optionally edge-weight sigmoids sw [E2] and w [Eu]. */
void sheaf_learner_forward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t) {
    int n = m->n, H = m->H, P = m->P;
    if (P > 0) {
        const float *W = TP(m, m->i_learn[t]); /* [P][2H] */
        float *A = m->rowsum, *B = m->colsum; /* [N][P] scratch */
        sheaf_sgemm(CblasNoTrans, CblasTrans, n, P, H, 1.0f, xm, H, W, 2 * H, 0.0f, A, P);
        sheaf_sgemm(CblasNoTrans, CblasTrans, n, P, H, 1.0f, xm, H, W + H, 2 * H, 0.0f, B, P);
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
void sheaf_learner_backward(donto_sheaf_model *m, sheaf_layer_act *a, const float *xm, int t, float *dxm) {
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
        sheaf_sgemm(CblasTrans, CblasNoTrans, P, H, n, 1.0f, R, P, xm, H, 1.0f, dW, 2 * H);
        sheaf_sgemm(CblasTrans, CblasNoTrans, P, H, n, 1.0f, Cc, P, xm, H, 1.0f, dW + H, 2 * H);
        sheaf_sgemm(CblasNoTrans, CblasNoTrans, n, H, P, 1.0f, R, P, W, 2 * H, 1.0f, dxm, H);
        sheaf_sgemm(CblasNoTrans, CblasNoTrans, n, H, P, 1.0f, Cc, P, W + H, 2 * H, 1.0f, dxm, H);
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
/* O(d) restriction maps: Householder and Cayley, forward and backward   */

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

/* ------------------------------------------------------------------ */
/* O(d) map of one directed edge (laplacian.c calls these per edge)      */

void sheaf_orth_map_forward(double *Q, const float *prm, int d, int orth) {
    double Minv[SHEAF_MAX_D * SHEAF_MAX_D];
    if (orth == DONTO_ORTH_CAYLEY) cayley_forward(Q, Minv, prm, d);
    else householder_forward(Q, prm, d);
}
void sheaf_orth_map_backward(float *dprm, const float *prm, const double *dQ, int d, int orth) {
    if (orth == DONTO_ORTH_CAYLEY) cayley_backward(dprm, prm, dQ, d);
    else householder_backward(dprm, prm, dQ, d);
}
