/*
 * The MLP baseline: the node features alone, no graph (does the sheaf add anything over the
 * embeddings?). L layers of
 *   A_l = H_l W_l^T + b_l,  H_{l+1} = dropout(ReLU(A_l)),  logits = A_{L-1}
 * with H_0 = the (dropped-out) features [N][F] through the sparse or dense first layer
 * (heads.c). Widths: F -> C ... C -> K (K = hidden for edge tasks, whose decoder reads the
 * logits as node representations). The GCN's buffers (gH, gA, gmask) hold the activations.
 */
#include <string.h>

#include "sheaf_int.h"

void sheaf_mlp_forward(donto_sheaf_model *m, const donto_graph *g) {
    int n = m->n, L = m->L;
    for (int l = 0; l < L; l++) {
        int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
        float *A = l == L - 1 ? m->logits : m->gA[l];
        if (l == 0) sheaf_first_linear_forward(m, g, A, TP(m, m->i_gcnw[l]), TP(m, m->i_gcnb[l]), out);
        else sheaf_linear_forward(A, m->gH[l], TP(m, m->i_gcnw[l]), TP(m, m->i_gcnb[l]), n, in, out);
        if (l < L - 1) sheaf_relu_dropout_forward(m, A, m->gH[l + 1], m->gmask[l + 1], (size_t)n * out, 400 + l);
    }
}

/* dlogits [N][K] -> every layer's dW, db (no dx) */
void sheaf_mlp_backward(donto_sheaf_model *m, const donto_graph *g, float *dlogits) {
    int n = m->n, L = m->L;
    const float *dA = dlogits;
    for (int l = L - 1; l >= 0; l--) {
        int in = l == 0 ? m->f : m->C, out = l == L - 1 ? m->K : m->C;
        if (l == 0) {
            sheaf_first_linear_backward(m, g, TG(m, m->i_gcnw[l]), TG(m, m->i_gcnb[l]), dA, TP(m, m->i_gcnw[l]), out);
            break;
        }
        float *dH = m->dtmp2;
        sheaf_linear_backward(dH, TG(m, m->i_gcnw[l]), TG(m, m->i_gcnb[l]), dA, m->gH[l], TP(m, m->i_gcnw[l]), n, in, out);
        float *dprev = l % 2 ? m->dX : m->dtmp; /* never the buffer dA points at */
        sheaf_relu_dropout_backward(m, m->gA[l - 1], dH, m->gmask[l], dprev, (size_t)n * in);
        dA = dprev;
    }
}
