/*
 * The NSD model's heads and the input path shared with the GCN baseline.
 *   input:  x [N][F] -> input dropout -> lin1 [H][F] -> ELU -> dropout [-> lin12 [H][H]] -> X_0 [N][H]
 *   output: X_L [N][H] -> lin2 [K][H] -> logits [N][K] -> log_softmax -> logp, mean NLL on a mask
 * Bag-of-words features (0.5-5% dense) take a sparse first layer: a CSR + CSC index of x,
 * built on the first forward over a graph (sizes: nnz), whose values carry the input
 * dropout; the backward reads it column by column (CSC), so dW is deterministic.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

const float *sheaf_graph_x(const donto_sheaf_model *m, const donto_graph *g) { return m->xin ? m->xin : g->x; }

/* ------------------------------------------------------------------ */
/* input head: sparse or dense first layer, input dropout               */

void sheaf_xsparse_free(donto_sheaf_model *m) {
    free(m->xr_off), free(m->xr_col), free(m->xr_val), free(m->xr_dval);
    free(m->xc_off), free(m->xc_row), free(m->xc_perm);
    m->xr_off = m->xr_col = m->xc_off = m->xc_row = m->xc_perm = NULL;
    m->xr_val = m->xr_dval = NULL;
    m->xsparse = 0;
}

/* Build CSR/CSC of the graph's features once per graph (below 30% density). */
static void xsparse_prepare(donto_sheaf_model *m, const donto_graph *g) {
    if (m->xs_src == g->x) return;
    sheaf_xsparse_free(m);
    m->xs_src = g->x;
    size_t n = (size_t)m->n, f = (size_t)m->f, nnz = 0;
    for (size_t i = 0; i < n * f; i++) nnz += g->x[i] != 0;
    if (nnz > 0.3 * (double)(n * f)) return;
    m->xsparse = 1;
    m->xr_off = sheaf_xalloc(n + 1, sizeof(int), "sparse features: row offsets");
    m->xr_col = sheaf_xalloc(nnz + 1, sizeof(int), "sparse features: columns");
    m->xr_val = sheaf_xalloc(nnz + 1, sizeof(float), "sparse features: values");
    m->xr_dval = sheaf_xalloc(nnz + 1, sizeof(float), "sparse features: dropped-out values");
    m->xc_off = sheaf_xalloc(f + 1, sizeof(int), "sparse features: column offsets");
    m->xc_row = sheaf_xalloc(nnz + 1, sizeof(int), "sparse features: rows");
    m->xc_perm = sheaf_xalloc(nnz + 1, sizeof(int), "sparse features: CSC order");
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
    int *fill = sheaf_xalloc(f, sizeof(int), "sparse features: fill counts");
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
void sheaf_first_linear_forward(donto_sheaf_model *m, const donto_graph *g, float *Y, const float *W,
                                const float *b, int out) {
    if (m->xsparse) sparse_linear_forward(m, Y, W, b, out);
    else sheaf_linear_forward(Y, sheaf_graph_x(m, g), W, b, m->n, m->f, out);
}
void sheaf_first_linear_backward(donto_sheaf_model *m, const donto_graph *g, float *dW, float *db,
                                 const float *dY, const float *W, int out) {
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
        sheaf_linear_backward(NULL, dW, db, dY, sheaf_graph_x(m, g), W, m->n, m->f, out);
    }
}

void sheaf_input_dropout(donto_sheaf_model *m, const donto_graph *g) {
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
            sheaf_dropout_forward(m->xin, m->inmask, g->x, (size_t)m->n * m->f, m->hp.input_dropout, site_key(m->hp.seed, m->step, 1));
        else
            memcpy(m->xin, g->x, sizeof(float) * (size_t)m->n * m->f);
    }
}

/* x [N][F] -> lin1 -> h1 [N][H] -> ELU -> dropout -> hd [N][H] [-> lin12] -> la[0].X [N][H] */
void sheaf_in_head_forward(donto_sheaf_model *m, const donto_graph *g, float p) {
    int n = m->n, H = m->H;
    size_t NH = (size_t)n * H;
    sheaf_first_linear_forward(m, g, m->h1, TP(m, m->i_lin1w), TP(m, m->i_lin1b), H);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < NH; i++) m->hd[i] = elu(m->h1[i]);
    if (p > 0) sheaf_dropout_forward(m->hd, m->hmask, m->hd, NH, p, site_key(m->hp.seed, m->step, 2));
    if (m->hp.second_linear)
        sheaf_linear_forward(m->la[0].X, m->hd, TP(m, m->i_lin12w), TP(m, m->i_lin12b), n, H, H);
    else
        memcpy(m->la[0].X, m->hd, sizeof(float) * NH);
}

/* dX [N][H] (wrt la[0].X; used as scratch) -> dlin12, dlin1 (no dx) */
void sheaf_in_head_backward(donto_sheaf_model *m, const donto_graph *g, float p, float *dX) {
    int n = m->n, H = m->H;
    size_t NH = (size_t)n * H;
    float *dh = dX;
    if (m->hp.second_linear) {
        sheaf_linear_backward(m->dtmp, TG(m, m->i_lin12w), TG(m, m->i_lin12b), dX, m->hd, TP(m, m->i_lin12w), n, H, H);
        dh = m->dtmp;
    }
    if (p > 0) sheaf_dropout_backward(dh, dh, m->hmask, NH, p, 0);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < NH; i++) dh[i] *= elu_grad(m->h1[i]);
    sheaf_first_linear_backward(m, g, TG(m, m->i_lin1w), TG(m, m->i_lin1b), dh, TP(m, m->i_lin1w), H);
}

/* ------------------------------------------------------------------ */
/* output head: lin2, log-softmax + NLL                                 */

double sheaf_logsoftmax_nll(float *logp, const float *logits, const int *y, const uint8_t *mask, int n, int K) {
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

/* logp = z - lse(z): dz = dlogp - softmax * sum(dlogp) ; dlogits, dlogp, logp [n][K] */
void sheaf_logsoftmax_backward(float *dlogits, const float *dlogp, const float *logp, int n, int K) {
#pragma omp parallel for schedule(static)
    for (int v = 0; v < n; v++) {
        double s = 0;
        for (int c = 0; c < K; c++) s += dlogp[(size_t)v * K + c];
        for (int c = 0; c < K; c++)
            dlogits[(size_t)v * K + c] = (float)(dlogp[(size_t)v * K + c] - exp((double)logp[(size_t)v * K + c]) * s);
    }
}

/* Xout [N][H] -> lin2 -> logits [N][K] */
void sheaf_out_head_forward(donto_sheaf_model *m) {
    sheaf_linear_forward(m->logits, m->Xout, TP(m, m->i_lin2w), TP(m, m->i_lin2b), m->n, m->H, m->K);
}
/* dlogits [N][K] -> dlin2, dX [N][H] (overwritten) */
void sheaf_out_head_backward(donto_sheaf_model *m, const float *dlogits, float *dX) {
    sheaf_linear_backward(dX, TG(m, m->i_lin2w), TG(m, m->i_lin2b), dlogits, m->Xout, TP(m, m->i_lin2w), m->n, m->H, m->K);
}
