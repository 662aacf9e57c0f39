/*
 * The edge decoder: scores a pair (u, v) of nodes from the encoder's final node
 * representations h [N][K] (NSD: lin2 of the last stalks; GCN and MLP: their last layer; K =
 * hidden), for edge tasks (docs/sheaf.md "Edge tasks"):
 *
 *   z_p = [h_u * h_v, |h_u - h_v|]                 [P][2K]  undirected: symmetric in u, v
 *   z_p = [h_u * h_v, |h_u - h_v|, h_u, h_v]       [P][4K]  directed: (u, v) != (v, u)
 *   a = z W0^T + b0   [P][Hd]   (Hd = hidden)
 *   r = ReLU(a)
 *   logits = r W1^T + b1   [P][Kc]
 *   loss = class-weighted mean NLL of log_softmax(logits) over a pair mask
 *
 * The symmetric part says how alike two nodes are (the usual link-prediction features); the
 * ordered copy [h_u, h_v] lets the MLP tell source from target (A supports B is not B supports
 * A) at 2K more inputs, where a bilinear term would cost K^2 per class.
 * Forward and backward written out; the pair scatter of the backward is serial (fixed order:
 * deterministic for any thread count).
 */
#include <math.h>
#include <string.h>

#include "sheaf_int.h"

/* h [N][K], pairs -> z [P][Zd] -> a, r [P][Hd] -> plogits [P][Kc] */
void sheaf_decoder_forward(donto_sheaf_model *m, const donto_graph *g) {
    int P = m->npairs, K = m->K, Zd = m->Zd, Hd = m->Hd;
    const float *h = m->logits;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < P; p++) {
        const float *hu = h + (size_t)g->pu[p] * K, *hv = h + (size_t)g->pv[p] * K;
        float *z = m->pz + (size_t)p * Zd;
        for (int k = 0; k < K; k++) {
            z[k] = hu[k] * hv[k];
            z[K + k] = fabsf(hu[k] - hv[k]);
        }
        if (m->directed) {
            memcpy(z + 2 * K, hu, sizeof(float) * K);
            memcpy(z + 3 * K, hv, sizeof(float) * K);
        }
    }
    sheaf_linear_forward(m->pa, m->pz, TP(m, m->i_dec0w), TP(m, m->i_dec0b), P, Zd, Hd);
    size_t PH = (size_t)P * Hd;
    for (size_t i = 0; i < PH; i++) m->pr[i] = m->pa[i] > 0 ? m->pa[i] : 0.0f;
    sheaf_linear_forward(m->plogits, m->pr, TP(m, m->i_dec1w), TP(m, m->i_dec1b), P, Hd, m->Kc);
}

/* dplogits [P][Kc] -> dW1, db1, dr [P][Hd] -> da -> dW0, db0, dz [P][Zd] -> demb [N][K] */
void sheaf_decoder_backward(donto_sheaf_model *m, const donto_graph *g) {
    int P = m->npairs, K = m->K, Zd = m->Zd, Hd = m->Hd;
    sheaf_linear_backward(m->dr, TG(m, m->i_dec1w), TG(m, m->i_dec1b), m->dplogits, m->pr, TP(m, m->i_dec1w), P, Hd,
                          m->Kc);
    size_t PH = (size_t)P * Hd;
    for (size_t i = 0; i < PH; i++) m->da[i] = m->pa[i] > 0 ? m->dr[i] : 0.0f;
    sheaf_linear_backward(m->dz_in, TG(m, m->i_dec0w), TG(m, m->i_dec0b), m->da, m->pz, TP(m, m->i_dec0w), P, Zd, Hd);
    const float *h = m->logits;
    memset(m->demb, 0, sizeof(float) * (size_t)m->n * K);
    for (int p = 0; p < P; p++) {
        int u = g->pu[p], v = g->pv[p];
        const float *hu = h + (size_t)u * K, *hv = h + (size_t)v * K, *dz = m->dz_in + (size_t)p * Zd;
        float *du = m->demb + (size_t)u * K, *dv = m->demb + (size_t)v * K;
        for (int k = 0; k < K; k++) {
            float diff = hu[k] - hv[k], sg = diff > 0 ? 1.0f : diff < 0 ? -1.0f : 0.0f; /* d|x|/dx, 0 at 0 */
            du[k] += dz[k] * hv[k] + sg * dz[K + k];
            dv[k] += dz[k] * hu[k] - sg * dz[K + k];
        }
        if (m->directed)
            for (int k = 0; k < K; k++) du[k] += dz[2 * K + k], dv[k] += dz[3 * K + k];
    }
}

double sheaf_weighted_nll(float *logp, const float *logits, const int *y, const float *w, const uint8_t *mask,
                          int n, int K) {
    sheaf_logsoftmax_nll(logp, logits, y, mask, n, K); /* fills logp */
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        if (y[i] < 0 || y[i] >= K) continue;
        num -= (double)w[y[i]] * logp[(size_t)i * K + y[i]];
        den += w[y[i]];
    }
    return den > 0 ? num / den : 0.0;
}
