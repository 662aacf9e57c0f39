/*
 * The GCN baseline (Kipf & Welling): L layers of
 *   A_l = Ahat (H_l W_l^T) + b_l,  Ahat = (D + I)^-1/2 (A + I) (D + I)^-1/2
 *   H_{l+1} = dropout(ReLU(A_l)),  logits = A_{L-1}
 * with H_0 = the (dropped-out) features [N][F] through the sparse or dense first layer
 * (heads.c). Ahat is applied over the per-node CSR (self weight 1/(deg+1), edge weight
 * fix_off); it is symmetric, so the backward applies it again. Widths: F -> C ... C -> K.
 */
#include <string.h>

#include "sheaf_int.h"

/* out[N][width] = Ahat T (+ b) */
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

void sheaf_gcn_forward(donto_sheaf_model *m, const donto_graph *g) {
    int n = m->n, L = m->L;
    const float *x = sheaf_graph_x(m, g);
    for (int l = 0; l < L; l++) {
        int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
        const float *h = l == 0 ? x : m->gH[l];
        if (l == 0) sheaf_first_linear_forward(m, g, m->gT[l], TP(m, m->i_gcnw[l]), NULL, out);
        else sheaf_linear_forward(m->gT[l], h, TP(m, m->i_gcnw[l]), NULL, n, in, out);
        gcn_aggregate(m, l == L - 1 ? m->logits : m->gA[l], m->gT[l], TP(m, m->i_gcnb[l]), out);
        if (l < L - 1) sheaf_relu_dropout_forward(m, m->gA[l], m->gH[l + 1], m->gmask[l + 1], (size_t)n * out, 300 + l);
    }
}
void sheaf_gcn_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits) {
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
        if (l == 0) sheaf_first_linear_backward(m, g, TG(m, m->i_gcnw[l]), NULL, dT, TP(m, m->i_gcnw[l]), out);
        else sheaf_linear_backward(dH, TG(m, m->i_gcnw[l]), NULL, dT, h, TP(m, m->i_gcnw[l]), n, in, out);
        if (l > 0) {
            sheaf_relu_dropout_backward(m, m->gA[l - 1], dH, m->gmask[l], m->dX, (size_t)n * in);
            dA = m->dX;
        }
    }
}
