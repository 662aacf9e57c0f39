/*
 * One diffusion layer t (X_t = la[t].X [N][d'][C] -> X_{t+1}):
 *   xm   = dropout(X_t) (t > 0)            -> sheaf learner (learner.c) -> maps
 *   L    = the layer's sheaf Laplacian from the maps (laplacian.c)
 *   Xd   = dropout(X_t)
 *   Y1   = (I (x) W1) Xd      left weights, W1 [d'][d'] on every node's stalks
 *   Y2   = Y1 W2^T            right weights, W2 [C][C] on the channels
 *   Z    = L Y2
 *   X_{t+1} = (1 + tanh eps) X_t - ELU(Z)   eps [d']
 * X_t reaches the loss through the residual term, Xd and xm: the backward adds all three
 * into the running dX. Activations live in m->la[t] (sheaf_int.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

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
    double *part = donto_xcalloc((size_t)NCH * nij, sizeof(double)); /* small: 64 d'^2 */
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
/* the layer                                                            */

void sheaf_diffusion_forward(donto_sheaf_model *m, int t, float p) {
    int n = m->n, H = m->H, L = m->L, dp = m->dp, C = m->C;
    size_t NH = (size_t)n * H;
    sheaf_layer_act *a = &m->la[t];
    float *Xnext = t + 1 < L ? m->la[t + 1].X : m->Xout;
    /* sheaf learner on dropout(X) (no dropout at t = 0) */
    const float *xm = a->X;
    if (t > 0 && p > 0) {
        sheaf_dropout_forward(a->xm, a->mmask, a->X, NH, p, site_key(m->hp.seed, m->step, 100 + t));
        xm = a->xm;
    }
    sheaf_learner_forward(m, a, xm, t);
    sheaf_lap_forward(m, a);
    /* Xd = dropout(X); Y1 = (I (x) W1) Xd; Y2 = Y1 W2^T; Z = L Y2 */
    const float *xd = a->X;
    if (p > 0) {
        sheaf_dropout_forward(a->Xd, a->dmask, a->X, NH, p, site_key(m->hp.seed, m->step, 200 + t));
        xd = a->Xd;
    }
    const float *y1 = xd;
    if (m->hp.left_weights) {
        left_forward(a->Y1, xd, TP(m, m->i_left[t]), n, dp, C);
        y1 = a->Y1;
    }
    if (m->hp.right_weights) {
        sheaf_linear_forward(a->Y2, y1, TP(m, m->i_right[t]), NULL, n * dp, C, C);
    } else {
        memcpy(a->Y2, y1, sizeof(float) * NH);
    }
    sheaf_lap_apply(m, a, a->Z, a->Y2);
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

void sheaf_diffusion_backward(donto_sheaf_model *m, int t, float p, float *dX) {
    int n = m->n, H = m->H, dp = m->dp, C = m->C;
    size_t NH = (size_t)n * H;
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
    sheaf_lap_grad_blocks(m, dZ, a->Y2);
    float *dY2 = m->dtmp2;
    sheaf_lap_apply(m, a, dY2, dZ);
    /* Y2 = Y1 W2^T */
    const float *xd = p > 0 ? a->Xd : a->X;
    const float *y1 = m->hp.left_weights ? a->Y1 : xd;
    float *dY1 = dY2;
    if (m->hp.right_weights) {
        dY1 = m->dtmp;
        sheaf_linear_backward(dY1, TG(m, m->i_right[t]), NULL, dY2, y1, TP(m, m->i_right[t]), n * dp, C, C);
    }
    float *dXd = dY1;
    if (m->hp.left_weights) {
        dXd = dY1 == m->dtmp ? m->dtmp2 : m->dtmp;
        left_backward(dXd, TG(m, m->i_left[t]), dY1, xd, TP(m, m->i_left[t]), n, dp, C);
    }
    if (p > 0) sheaf_dropout_backward(dX, dXd, a->dmask, NH, p, 1);
    else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < NH; i++) dX[i] += dXd[i];
    }
    /* Laplacian -> maps -> learner -> dxm */
    sheaf_lap_backward(m, a);
    const float *xm = (t > 0 && p > 0) ? a->xm : a->X;
    sheaf_learner_backward(m, a, xm, t, m->dxm);
    if (t > 0 && p > 0) sheaf_dropout_backward(dX, m->dxm, a->mmask, NH, p, 1);
    else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < NH; i++) dX[i] += m->dxm[i];
    }
}
