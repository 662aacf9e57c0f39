/*
 * Glue between the encoder's linear layers and the integer GEMM (qgemm.h):
 * every Linear weight is quantized and packed once at open; the forward pass
 * calls donto_qgemm through the bert_linear_ops interface, so attention,
 * LayerNorm, GELU and pooling are the very same fp32 code as the reference.
 */
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "qgemm.h"

struct bert_quant {
    int layers, hidden, inter;
    int bits;                 /* 16 or 8 */
    donto_qweight (*w)[4];    /* [layers][qkv, attn_out, ffn_in, ffn_out] (int16) */
    donto_qweight8 (*w8)[4];  /* the same (int8) */
    const float *(*bias)[4]; /* the fp32 biases, same order */
    donto_isa isa;           /* the kernel set of every GEMM */
    char name[128];          /* the kernels, for logs and --stats */
};

void bert_quant_free(bert_quant *q) {
    if (!q) return;
    for (int l = 0; l < q->layers; l++)
        for (int i = 0; i < 4; i++) {
            if (q->w) donto_qweight_free(&q->w[l][i]);
            if (q->w8) donto_qweight8_free(&q->w8[l][i]);
        }
    free(q->w);
    free(q->w8);
    free(q->bias);
    free(q);
}

int bert_quant_init(bert_quant **out, const donto_bert_weights *w, donto_isa isa, donto_err *err) {
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate;
    bert_quant *q = donto_xcalloc(1, sizeof *q);
    q->layers = c->layers, q->hidden = H, q->inter = FF, q->isa = isa, q->bits = 16;
    q->w = donto_xcalloc((size_t)c->layers, sizeof *q->w);
    q->bias = donto_xcalloc((size_t)c->layers, sizeof *q->bias);
    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        q->bias[l][0] = L->qkv_b, q->bias[l][1] = L->attn_out_b;
        q->bias[l][2] = L->ffn_in_b, q->bias[l][3] = L->ffn_out_b;
        if (donto_qweight_init(&q->w[l][0], L->qkv_w, 3 * H, H, err) ||
            donto_qweight_init(&q->w[l][1], L->attn_out_w, H, H, err) ||
            donto_qweight_init(&q->w[l][2], L->ffn_in_w, FF, H, err) ||
            donto_qweight_init(&q->w[l][3], L->ffn_out_w, H, FF, err)) {
            donto_preerr(err, "quantizing layer %d", l);
            bert_quant_free(q);
            *out = NULL;
            return -1;
        }
    }
    *out = q;
    return 0;
}

/* ---- int8: calibration, then quantization ------------------------------ */

typedef struct {
    bert_linear_ops fp;
    float **amax; /* [layers * 4][k] max |x| per input channel */
    int hidden, inter;
} calib_ctx;

static void calib_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                       void *scratch) {
    const calib_ctx *cc = vctx;
    const int k = which == 3 ? cc->inter : cc->hidden;
    float *a = cc->amax[l * 4 + which];
    for (int i = 0; i < m; i++)
        for (int c = 0; c < k; c++) {
            const float v = fabsf(X[(size_t)i * k + c]);
            if (v > a[c]) a[c] = v;
        }
    cc->fp.gemm(cc->fp.ctx, l, which, X, m, Y, add_bias, scratch);
}

static size_t calib_scratch(const void *vctx, int m) {
    const calib_ctx *cc = vctx;
    return cc->fp.scratch_bytes(cc->fp.ctx, m);
}

/* The nout channels of a[0..k) with the largest values, largest first. */
static void top_channels(const float *a, int k, int *out, int nout) {
    char *taken = donto_xcalloc((size_t)k, 1);
    for (int o = 0; o < nout; o++) {
        int best = -1;
        for (int c = 0; c < k; c++)
            if (!taken[c] && (best < 0 || a[c] > a[best])) best = c;
        taken[best] = 1;
        out[o] = best;
    }
    free(taken);
}

void bert_int8_default_scheme(donto_isa isa, bert_int8_scheme *sch) {
    memset(sch, 0, sizeof *sch);
    sch->nout = DONTO_INT8_NOUT;
    if (cpu_isa_vnni(cpu_isa_runnable(isa))) {
        for (int i = 0; i < 4; i++) sch->group[i] = DONTO_INT8_GROUP_VNNI;
    } else {
        sch->keep16 = DONTO_INT8_KEEP16_DEFAULT;
    }
}

int bert_quant_init8(bert_quant **out, const donto_bert_weights *w, donto_isa isa, const int32_t *ids,
                     const int *off, int nseq, const bert_int8_scheme *sch, donto_err *err) {
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate, L = c->layers, nout = sch->nout;
    const unsigned keep16 = sch->keep16;
    *out = NULL;
    if (nout < 0 || nout > DONTO_QGEMM8_MAXOUT || nout > H)
        return donto_seterr(err, "int8: %d outlier channels (0..%d)", nout, DONTO_QGEMM8_MAXOUT);
    if (nseq < 1) return donto_seterr(err, "int8: no calibration sequences");
    /* Calibration: the fp32 forward over the calibration batch, recording
     * every Linear input's max |x| per channel. */
    calib_ctx cc = {.hidden = H, .inter = FF};
    bert_fp32_ops(&cc.fp, w);
    cc.amax = donto_xcalloc((size_t)L * 4, sizeof *cc.amax);
    for (int i = 0; i < L * 4; i++) cc.amax[i] = donto_xcalloc((size_t)(i % 4 == 3 ? FF : H), sizeof(float));
    bert_linear_ops ops = {.gemm = calib_gemm, .ctx = &cc, .scratch_bytes = calib_scratch, .isa = isa};
    int maxlen = 0;
    for (int s = 0; s < nseq; s++) maxlen = off[s + 1] - off[s] > maxlen ? off[s + 1] - off[s] : maxlen;
    const size_t sb = bert_cpu_scratch_bytes(c, &ops, off[nseq], maxlen, 1);
    void *scratch = donto_aligned_alloc(sb);
    float *vec = donto_xcalloc((size_t)nseq * H, sizeof(float));
    int rc = 0;
    if (!scratch) {
        rc = donto_seterr(err, "int8: out of memory for calibration");
        goto done;
    }
    bert_cpu_forward(w, &ops, DONTO_POOL_MEAN, ids, off, nseq, vec, scratch, sb, 1);

    bert_quant *q = donto_xcalloc(1, sizeof *q);
    q->layers = L, q->hidden = H, q->inter = FF, q->isa = isa, q->bits = 8;
    q->w8 = donto_xcalloc((size_t)L, sizeof *q->w8);
    q->w = donto_xcalloc((size_t)L, sizeof *q->w);
    q->bias = donto_xcalloc((size_t)L, sizeof *q->bias);
    int chans[DONTO_QGEMM8_MAXOUT];
    for (int l = 0; l < L && !rc; l++) {
        const donto_bert_layer *Ly = &w->layer[l];
        const float *wm[4] = {Ly->qkv_w, Ly->attn_out_w, Ly->ffn_in_w, Ly->ffn_out_w};
        const int n[4] = {3 * H, H, FF, H}, k[4] = {H, H, H, FF};
        q->bias[l][0] = Ly->qkv_b, q->bias[l][1] = Ly->attn_out_b;
        q->bias[l][2] = Ly->ffn_in_b, q->bias[l][3] = Ly->ffn_out_b;
        for (int i = 0; i < 4 && !rc; i++) {
            if (keep16 >> i & 1) {
                if (donto_qweight_init(&q->w[l][i], wm[i], n[i], k[i], err))
                    rc = donto_preerr(err, "quantizing layer %d (int16)", l);
                continue;
            }
            top_channels(cc.amax[l * 4 + i], k[i], chans, nout);
            if (donto_qweight8_init_ex(&q->w8[l][i], wm[i], n[i], k[i], chans, nout, sch->group[i], err))
                rc = donto_preerr(err, "quantizing layer %d (int8)", l);
        }
    }
    if (!rc) {
        /* Name the mix: "int8 ... [with weight scales per G k] [+ int16 ... for ffn_out]". */
        static const char *const mat[4] = {"qkv", "attn_out", "ffn_in", "ffn_out"};
        int gr = 0;
        for (int i = 0; i < 4; i++)
            if (!(keep16 >> i & 1) && sch->group[i]) gr = sch->group[i];
        int o = snprintf(q->name, sizeof q->name, "%s",
                         gr ? donto_qgemm8_group_kernel_name(isa) : donto_qgemm8_kernel_name(isa));
        if (gr) o += snprintf(q->name + o, sizeof q->name - (size_t)o, " with weight scales per %d k", gr);
        if (keep16 & 15u) {
            o += snprintf(q->name + o, sizeof q->name - (size_t)o, " + %s for", donto_qgemm_kernel_name(isa));
            for (int i = 0; i < 4; i++)
                if (keep16 >> i & 1) o += snprintf(q->name + o, sizeof q->name - (size_t)o, " %s", mat[i]);
        }
    }
    if (rc) bert_quant_free(q);
    else *out = q;
done:
    free(scratch);
    free(vec);
    for (int i = 0; i < L * 4; i++) free(cc.amax[i]);
    free(cc.amax);
    return rc ? -1 : 0;
}

static void q_gemm8(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                    void *scratch) {
    const bert_quant *q = ctx;
    const donto_qweight8 *W = &q->w8[l][which];
    if (!W->packed) { /* kept at int16 */
        const donto_qweight *W16 = &q->w[l][which];
        donto_qgemm_isa(X, m, W16->k, W16->k, W16, add_bias ? q->bias[l][which] : NULL, Y, W16->n, scratch, 1,
                        q->isa);
        return;
    }
    donto_qgemm8_isa(X, m, W->k, W->k, W, add_bias ? q->bias[l][which] : NULL, Y, W->n, scratch, 1, q->isa);
}

static void q_gemm(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                   void *scratch) {
    const bert_quant *q = ctx;
    const donto_qweight *W = &q->w[l][which];
    donto_qgemm_isa(X, m, W->k, W->k, W, add_bias ? q->bias[l][which] : NULL, Y, W->n, scratch, 1, q->isa);
}

static size_t q_scratch(const void *ctx, int m) {
    const bert_quant *q = ctx;
    int kmax = q->inter > q->hidden ? q->inter : q->hidden;
    const size_t s16 = donto_qgemm_scratch_size(m, kmax);
    if (q->bits != 8) return s16;
    const size_t s8 = donto_qgemm8_scratch_size(m, kmax);
    return s8 > s16 ? s8 : s16;
}

void bert_quant_ops(bert_linear_ops *ops, const bert_quant *q) {
    ops->gemm = q->bits == 8 ? q_gemm8 : q_gemm;
    ops->ctx = q;
    ops->scratch_bytes = q_scratch;
    /* Weights are packed once, so a call has no setup to repeat: blocks
     * of 96 rows (4 of the GEMM's 24-row tiles) go to whichever thread is
     * free. */
    ops->row_block = 96;
    ops->isa = q->isa;
}

const char *bert_quant_kernel_name(const bert_quant *q) {
    return q->bits == 8 ? q->name : donto_qgemm_kernel_name(q->isa);
}
