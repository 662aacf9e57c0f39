/*
 * Training of sheaf / GCN / MLP models: full batch, NLL on the train mask (edge tasks: the
 * class-weighted NLL on the train pairs), Adam (torch's semantics: L2 weight decay added to the
 * gradient, a separate decay for the sheaf learners), evaluation every epoch (accuracy, loss,
 * macro-F1, and ROC-AUC / average precision for two classes), model selection on validation
 * loss, accuracy or the task's metric (--stop; auto: loss for node tasks as the reference
 * protocol does, the task's metric for edge tasks), early stopping after `patience` epochs
 * without improvement.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sheaf_int.h"

/* Split s's mask of one set (0 train, 1 val, 2 test): over nodes, or over an edge task's pairs. */
static const uint8_t *split_mask(const donto_graph *g, int set, int split) {
    int edge = g->task_kind == DONTO_TASK_EDGE;
    const uint8_t *masks = set == 0 ? (edge ? g->ptrain : g->train) : set == 1 ? (edge ? g->pval : g->val)
                                                                              : (edge ? g->ptest : g->test);
    return masks ? masks + (size_t)split * (edge ? g->npairs : g->n) : NULL;
}

typedef struct { double acc, loss, f1, auc, ap; } set_scores;

/* Scores of the last forward on one mask: examples are labelled nodes or pairs; loss is the mean
 * NLL (edge tasks: weighted by the class weights, as the training loss). */
static void mask_metrics(const donto_sheaf_model *m, const donto_graph *g, const uint8_t *mask, set_scores *o) {
    int edge = m->task == DONTO_TASK_EDGE;
    int n = edge ? m->npairs : g->n, K = edge ? m->Kc : m->K;
    const int *y = edge ? g->pc : g->y;
    const float *logp = edge ? m->plogp : m->logp;
    int *yy = sheaf_xalloc((size_t)n + 1, sizeof(int), "metric labels");
    int *pred = sheaf_xalloc((size_t)n + 1, sizeof(int), "metric predictions");
    double *score = sheaf_xalloc((size_t)n + 1, sizeof(double), "metric scores");
    long cnt = 0, ok = 0;
    double l = 0, wsum = 0;
    for (int v = 0; v < n; v++) {
        if (mask && !mask[v]) continue;
        if (y[v] < 0 || y[v] >= K) continue;
        const float *lp = logp + (size_t)v * K;
        int best = 0;
        for (int c = 1; c < K; c++)
            if (lp[c] > lp[best]) best = c;
        ok += best == y[v];
        double w = edge ? m->cw[y[v]] : 1.0;
        l -= w * lp[y[v]];
        wsum += w;
        yy[cnt] = y[v], pred[cnt] = best, score[cnt] = K == 2 ? exp((double)lp[1]) : 0.0;
        cnt++;
    }
    o->acc = cnt ? (double)ok / cnt : 0.0;
    o->loss = wsum > 0 ? l / wsum : 0.0;
    o->f1 = donto_metric_macro_f1(yy, pred, cnt, K);
    o->auc = K == 2 ? donto_metric_roc_auc(yy, score, cnt) : NAN;
    o->ap = K == 2 ? donto_metric_average_precision(yy, score, cnt) : NAN;
    free(yy), free(pred), free(score);
}

static double metric_value(const set_scores *s, int metric) {
    return metric == DONTO_METRIC_ACCURACY ? s->acc : metric == DONTO_METRIC_ROC_AUC ? s->auc : s->f1;
}

void donto_sheaf_evaluate(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *out) {
    donto_sheaf_forward(m, g, 0, 0, NULL, NULL);
    set_scores s[3];
    for (int k = 0; k < 3; k++) mask_metrics(m, g, split_mask(g, k, split), &s[k]);
    out->train_acc = s[0].acc, out->val_acc = s[1].acc, out->test_acc = s[2].acc;
    out->train_loss = s[0].loss, out->val_loss = s[1].loss, out->test_loss = s[2].loss;
    out->train_f1 = s[0].f1, out->val_f1 = s[1].f1, out->test_f1 = s[2].f1;
    out->train_auc = s[0].auc, out->val_auc = s[1].auc, out->test_auc = s[2].auc;
    out->train_ap = s[0].ap, out->val_ap = s[1].ap, out->test_ap = s[2].ap;
    out->metric = donto_graph_metric(g);
    out->val_metric = metric_value(&s[1], out->metric), out->test_metric = metric_value(&s[2], out->metric);
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
    const uint8_t *mask = split_mask(g, 0, split);
    double loss = donto_sheaf_forward(m, g, 1, (uint64_t)m->adam_t + 1, mask, NULL);
    donto_sheaf_backward(m, g, mask);
    adam_step(m);
    return loss;
}

int donto_sheaf_train(donto_sheaf_model *m, const donto_graph *g, int split, donto_sheaf_metrics *best,
                      donto_sheaf_epoch_cb cb, void *ctx, donto_err *err) {
    if (split < 0 || split >= (g->nsplits ? g->nsplits : 1) || !split_mask(g, 0, split))
        return donto_seterr(err, "split %d not available (graph has %d splits)", split, g->nsplits);
    if (m->n != g->n || m->f != g->f) return donto_seterr(err, "model shape does not match the graph");
    if ((m->task == DONTO_TASK_EDGE) != (g->task_kind == DONTO_TASK_EDGE) ||
        (m->task == DONTO_TASK_EDGE && m->npairs != g->npairs))
        return donto_seterr(err, "the model was built for another task than the graph's");
    donto_sheaf_set_class_weights(m, g, split);
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
    /* selection: higher val accuracy / metric, or lower val loss */
    int stop = m->hp.stop_acc;
    if (stop == DONTO_STOP_AUTO || stop < 0 || stop > DONTO_STOP_AUTO)
        stop = m->task == DONTO_TASK_EDGE ? DONTO_STOP_METRIC : DONTO_STOP_LOSS;
    double best_score = stop == DONTO_STOP_ACC ? 0.0 : -INFINITY; /* accuracy: as before, above 0 */
    int bad = 0;
    double t0 = donto_now();
    b.best_epoch = -1;
    for (int epoch = 0; epoch < m->hp.epochs; epoch++) {
        donto_sheaf_train_step(m, g, split);
        donto_sheaf_evaluate(m, g, split, &now);
        now.epochs_run = epoch + 1;
        double score = stop == DONTO_STOP_LOSS ? -now.val_loss : stop == DONTO_STOP_ACC ? now.val_acc : now.val_metric;
        if (isnan(score)) score = -INFINITY; /* e.g. ROC-AUC of a validation set with one class */
        int better = score > best_score;
        if (better) {
            best_score = score;
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
