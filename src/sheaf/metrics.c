/*
 * Classification metrics of the trainer, with sklearn's definitions (tests/test_sheaf.c checks
 * hand-computed cases; tests/ref/sheaf_ref.py compares with sklearn itself):
 *   macro-F1: the mean over the classes present in y or pred of F1_c = 2 TP / (2 TP + FP + FN)
 *             (f1_score(average="macro"), 0 for a class with no TP, FP, FN);
 *   ROC-AUC:  P(score of a positive > score of a negative), ties counting half, via mid-ranks
 *             (roc_auc_score); NAN when one class is absent;
 *   AP:       the PR-AUC as average precision, sum_k (R_k - R_{k-1}) P_k over the distinct scores
 *             from the highest down (average_precision_score); NAN without positives.
 * Binary metrics take y in {0, 1} and the score of class 1.
 */
#include <math.h>
#include <stdlib.h>

#include "sheaf_int.h"

double donto_metric_macro_f1(const int *y, const int *pred, long n, int K) {
    long *tp = sheaf_xalloc((size_t)K * 3, sizeof(long), "F1 counts"), *fp = tp + K, *fn = tp + 2 * K;
    for (long i = 0; i < n; i++) {
        if (y[i] < 0 || y[i] >= K || pred[i] < 0 || pred[i] >= K) continue;
        if (y[i] == pred[i]) tp[y[i]]++;
        else fp[pred[i]]++, fn[y[i]]++;
    }
    double s = 0;
    int cnt = 0;
    for (int c = 0; c < K; c++) {
        long d = 2 * tp[c] + fp[c] + fn[c];
        if (!d) continue; /* absent from y and pred */
        s += 2.0 * tp[c] / d;
        cnt++;
    }
    free(tp);
    return cnt ? s / cnt : 0.0;
}

typedef struct { double s; int y; } scored;
static int cmp_desc(const void *a, const void *b) {
    double x = ((const scored *)a)->s, z = ((const scored *)b)->s;
    return (x < z) - (x > z);
}
static scored *sorted_desc(const int *y, const double *score, long n) {
    scored *v = sheaf_xalloc((size_t)n, sizeof *v, "metric ranks");
    for (long i = 0; i < n; i++) v[i].s = score[i], v[i].y = y[i] == 1;
    qsort(v, (size_t)n, sizeof *v, cmp_desc);
    return v;
}

double donto_metric_roc_auc(const int *y, const double *score, long n) {
    scored *v = sorted_desc(y, score, n);
    double pos = 0, neg = 0, u = 0; /* u: pairs (positive, negative) the positive wins, ties half */
    for (long i = 0; i < n;) {
        long j = i;
        double tp = 0, tn = 0;
        while (j < n && v[j].s == v[i].s) tp += v[j].y, tn += !v[j].y, j++;
        /* a tie group: its positives beat every negative below it, and half of its own */
        u += tp * (0.5 * tn);
        pos += tp;
        neg += tn;
        i = j;
    }
    /* positives beat the negatives ranked below them: count per group from the bottom */
    double below = 0;
    for (long i = n - 1; i >= 0;) {
        long j = i;
        double tp = 0, tn = 0;
        while (j >= 0 && v[j].s == v[i].s) tp += v[j].y, tn += !v[j].y, j--;
        u += tp * below;
        below += tn;
        i = j;
    }
    free(v);
    return pos > 0 && neg > 0 ? u / (pos * neg) : NAN;
}

double donto_metric_average_precision(const int *y, const double *score, long n) {
    scored *v = sorted_desc(y, score, n);
    double P = 0;
    for (long i = 0; i < n; i++) P += v[i].y;
    double tp = 0, fp = 0, ap = 0, prev_r = 0;
    for (long i = 0; i < n;) {
        long j = i;
        while (j < n && v[j].s == v[i].s) tp += v[j].y, fp += !v[j].y, j++;
        double r = P > 0 ? tp / P : 0, prec = tp / (tp + fp);
        ap += (r - prev_r) * prec;
        prev_r = r;
        i = j;
    }
    free(v);
    return P > 0 ? ap : NAN;
}
