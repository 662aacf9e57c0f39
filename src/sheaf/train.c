/*
 * Training of sheaf / GCN models: full batch, NLL on the train mask, Adam (torch's
 * semantics: L2 weight decay added to the gradient, a separate decay for the sheaf
 * learners), evaluation every epoch, model selection on validation loss or accuracy,
 * early stopping after `patience` epochs without improvement (the reference protocol).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

static const uint8_t *split_mask(const uint8_t *masks, const donto_graph *g, int split) {
    return masks ? masks + (size_t)split * g->n : NULL;
}

static void mask_metrics(const donto_sheaf_model *m, const donto_graph *g, const uint8_t *mask, double *acc,
                         double *loss) {
    long cnt = 0, ok = 0;
    double l = 0;
    int K = m->K;
    for (int v = 0; v < g->n; v++) {
        if (mask && !mask[v]) continue;
        if (g->y[v] < 0 || g->y[v] >= K) continue;
        const float *lp = m->logp + (size_t)v * K;
        int best = 0;
        for (int c = 1; c < K; c++)
            if (lp[c] > lp[best]) best = c;
        ok += best == g->y[v];
        l -= lp[g->y[v]];
        cnt++;
    }
    *acc = cnt ? (double)ok / cnt : 0.0;
    *loss = cnt ? l / cnt : 0.0;
}

void donto_sheaf_evaluate(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *out) {
    donto_sheaf_forward(m, g, 0, 0, NULL, NULL);
    mask_metrics(m, g, split_mask(g->train, g, split), &out->train_acc, &out->train_loss);
    mask_metrics(m, g, split_mask(g->val, g, split), &out->val_acc, &out->val_loss);
    mask_metrics(m, g, split_mask(g->test, g, split), &out->test_acc, &out->test_loss);
}

/* torch.optim.Adam (amsgrad off): g += wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
static void adam_step(donto_sheaf_model *m) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    m->adam_t++;
    double bc1 = 1.0 - pow(b1, (double)m->adam_t), bc2 = 1.0 - pow(b2, (double)m->adam_t);
    double step = m->hp.lr / bc1, sbc2 = sqrt(bc2);
    for (int i = 0; i < m->nt; i++) {
        const donto_sheaf_tensor *t = &m->t[i];
        float wd = t->sheaf_group ? m->hp.sheaf_decay : m->hp.weight_decay;
        float *p = m->p + t->off, *g = m->g + t->off, *mm = m->adam_m + t->off, *vv = m->adam_v + t->off;
        size_t n = t->size;
#pragma omp parallel for schedule(static) if (n > 65536 && !m->nthreads)
        for (size_t j = 0; j < n; j++) {
            float gr = g[j] + wd * p[j];
            mm[j] = (float)(b1 * mm[j] + (1 - b1) * gr);
            vv[j] = (float)(b2 * vv[j] + (1 - b2) * (double)gr * gr);
            double den = sqrt((double)vv[j]) / sbc2 + eps;
            p[j] = (float)(p[j] - step * mm[j] / den);
        }
    }
}

double donto_sheaf_train_step(donto_sheaf_model *m, const donto_graph *g, int split) {
    const uint8_t *mask = split_mask(g->train, g, split);
    double loss = donto_sheaf_forward(m, g, 1, (uint64_t)m->adam_t + 1, mask, NULL);
    donto_sheaf_backward(m, g, mask);
    adam_step(m);
    return loss;
}

int donto_sheaf_train(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *best,
                      donto_sheaf_epoch_cb cb, void *ctx, donto_err *err) {
    if (split < 0 || split >= (g->nsplits ? g->nsplits : 1) || !g->train)
        return donto_seterr(err, "split %d not available (graph has %d splits)", split, g->nsplits);
    if (m->n != g->n || m->f != g->f) return donto_seterr(err, "model shape does not match the graph");
    snprintf(m->origin.graph, sizeof m->origin.graph, "%s", g->name);
    memcpy(m->origin.fingerprint, g->fingerprint, sizeof m->origin.fingerprint);
    m->origin.split = split;
    donto_graph_split_fingerprint(g, split, m->origin.split_fingerprint);
    memset(m->adam_m, 0, sizeof(float) * m->np);
    memset(m->adam_v, 0, sizeof(float) * m->np);
    m->adam_t = 0;
    float *bestp = sheaf_xalloc(m->np, sizeof(float), "the best epoch's weights");
    memcpy(bestp, m->p, sizeof(float) * m->np);
    donto_sheaf_metrics b = {0}, now = {0};
    double best_val_acc = 0, best_val_loss = INFINITY;
    int bad = 0;
    double t0 = donto_now();
    b.best_epoch = -1;
    for (int epoch = 0; epoch < m->hp.epochs; epoch++) {
        donto_sheaf_train_step(m, g, split);
        donto_sheaf_evaluate(m, g, split, &now);
        now.epochs_run = epoch + 1;
        int better = m->hp.stop_acc ? now.val_acc > best_val_acc : now.val_loss < best_val_loss;
        if (better) {
            best_val_acc = now.val_acc, best_val_loss = now.val_loss;
            b = now;
            b.best_epoch = epoch;
            memcpy(bestp, m->p, sizeof(float) * m->np);
            bad = 0;
        } else {
            bad++;
        }
        b.epochs_run = epoch + 1;
        b.seconds = donto_now() - t0;
        if (cb) cb(ctx, epoch, &now, &b);
        if (bad == m->hp.patience) break;
    }
    memcpy(m->p, bestp, sizeof(float) * m->np);
    free(bestp);
    b.seconds = donto_now() - t0;
    *best = b;
    return 0;
}
