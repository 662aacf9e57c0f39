/*
 * Glue between the encoder's linear layers and the integer GEMM (qgemm.h):
 * every Linear weight is quantized and packed once at open; the forward pass
 * calls donto_qgemm through the bert_linear_ops interface, so attention,
 * LayerNorm, GELU and pooling are the very same fp32 code as the reference.
 */
#include "quant.h"

#include <stdlib.h>

#include "qgemm.h"

struct bert_quant {
    int layers, hidden, inter;
    donto_qweight (*w)[4];    /* [layers][qkv, attn_out, ffn_in, ffn_out] */
    const float *(*bias)[4]; /* the fp32 biases, same order */
    donto_isa isa;           /* the kernel set of every GEMM */
};

void bert_quant_free(bert_quant *q) {
    if (!q) return;
    for (int l = 0; l < q->layers; l++)
        for (int i = 0; i < 4; i++) donto_qweight_free(&q->w[l][i]);
    free(q->w);
    free(q->bias);
    free(q);
}

int bert_quant_init(bert_quant **out, const donto_bert_weights *w, donto_isa isa, donto_err *err) {
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate;
    bert_quant *q = donto_xcalloc(1, sizeof *q);
    q->layers = c->layers, q->hidden = H, q->inter = FF, q->isa = isa;
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

static void q_gemm(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                   void *scratch) {
    const bert_quant *q = ctx;
    const donto_qweight *W = &q->w[l][which];
    donto_qgemm_isa(X, m, W->k, W->k, W, add_bias ? q->bias[l][which] : NULL, Y, W->n, scratch, 1, q->isa);
}

static size_t q_scratch(const void *ctx, int m) {
    const bert_quant *q = ctx;
    int kmax = q->inter > q->hidden ? q->inter : q->hidden;
    return donto_qgemm_scratch_size(m, kmax);
}

void bert_quant_ops(bert_linear_ops *ops, const bert_quant *q) {
    ops->gemm = q_gemm;
    ops->ctx = q;
    ops->scratch_bytes = q_scratch;
    ops->isa = q->isa;
}

const char *bert_quant_kernel_name(const bert_quant *q) { return donto_qgemm_kernel_name(q->isa); }
