/*
 * The normalised sheaf Laplacian of one layer, built from the restriction maps F_e
 * (learner.c), and its product with the stalk features.
 *   D_v = sum_{e at v} F_e^T F_e ;  S_v = (D_v + 1)^-1/2  (General: (D_v + (1+eps) I)^-1/2)
 *   Ld_v = S_v D_v S_v       diagonal block   [N][d'] (Diag) or [N][d'][d'] (O(d), General)
 *   Lo_k = -S_u F_u^T F_v S_v  block (u,v) of edge k = (u < v)   [Eu][d'] or [Eu][d'][d']
 * plus the fixed add_lp / add_hp dims. Blocks live on the edge list and the per-node CSR
 * (O(E d'^2) memory, never N x N). Builders run a node pass and an edge pass; their
 * backward passes take dLd, dLo (from sheaf_lap_grad_blocks) back to the maps, dmz [E2][P].
 * Z = L Y walks each node's CSR row; every output element is written by one iteration in a
 * fixed order, so results do not depend on the thread count.
 */
#include <math.h>
#include <string.h>

#include "sheaf_int.h"

/* Symmetric eigen decomposition (General's S_v) by cyclic Jacobi (small d, double). A = V diag(w) V^T. */
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
        double Q[SHEAF_MAX_D * SHEAF_MAX_D];
        sheaf_orth_map_forward(Q, a->mz + (size_t)e * P, d, m->hp.orth);
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
        sheaf_orth_map_backward(dp_, a->mz + (size_t)e * P, dQ, d, m->hp.orth);
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

/* the family's blocks, then the fixed dims */
void sheaf_lap_forward(donto_sheaf_model *m, sheaf_layer_act *a) {
    if (m->hp.family == DONTO_SHEAF_DIAG) lap_diag_forward(m, a);
    else if (m->hp.family == DONTO_SHEAF_ORTH) lap_orth_forward(m, a);
    else lap_general_forward(m, a);
    lap_fixed(m, a);
}
/* (the fixed dims have no parameters) */
void sheaf_lap_backward(donto_sheaf_model *m, sheaf_layer_act *a) {
    if (m->hp.family == DONTO_SHEAF_DIAG) lap_diag_backward(m, a);
    else if (m->hp.family == DONTO_SHEAF_ORTH) lap_orth_backward(m, a);
    else lap_general_backward(m, a);
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

void sheaf_lap_apply(const donto_sheaf_model *m, const sheaf_layer_act *a, float *Z, const float *Y) {
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

/* dLd_v = dZ_v Y_v^T ; dLo_k = dZ_u Y_v^T + Y_u dZ_v^T (diag: only the diagonal) */
void sheaf_lap_grad_blocks(donto_sheaf_model *m, const float *dZ, const float *Y) {
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
