/*
 * The bf16 linear backend (bf16.h): weights rounded once, activations per
 * call, fp32 sgemm on the rounded values (exact products, fp32 sums).
 *
 *   W[n, k] (row-major, PyTorch's Linear layout) -> Wb[n, k] bf16 values, held as fp32, at open
 *   X[m, k] fp32 -> Xb[m, k] bf16 values, held as fp32, in the calling thread's scratch
 *   Y[m, n] = Xb Wb^T (+ b)            sgemm(NoTrans, Trans); Y seeded with b, beta 1
 */
#include "bf16.h"

#include <stdlib.h>
#include <string.h>

struct bert_bf16 {
    int layers, hidden, inter;
    float *(*w)[4];           /* [layers][qkv, attn_out, ffn_in, ffn_out], bf16 values */
    int (*nk)[4][2];          /* their [n, k] */
    const float *(*bias)[4];  /* the fp32 biases, same order */
};

void bf16_round_f32(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* quiet NaN */
        else u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
        memcpy(&dst[i], &u, 4);
    }
}

void bert_bf16_free(bert_bf16 *b) {
    if (!b) return;
    for (int l = 0; l < b->layers; l++)
        for (int i = 0; i < 4; i++) free(b->w[l][i]);
    free(b->w);
    free(b->nk);
    free(b->bias);
    free(b);
}

int bert_bf16_init(bert_bf16 **out, const donto_bert_weights *w, donto_err *err) {
    (void)err;
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate;
    bert_bf16 *b = donto_xcalloc(1, sizeof *b);
    b->layers = c->layers, b->hidden = H, b->inter = FF;
    b->w = donto_xcalloc((size_t)c->layers, sizeof *b->w);
    b->nk = donto_xcalloc((size_t)c->layers, sizeof *b->nk);
    b->bias = donto_xcalloc((size_t)c->layers, sizeof *b->bias);
    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        const float *src[4] = {L->qkv_w, L->attn_out_w, L->ffn_in_w, L->ffn_out_w};
        const int nk[4][2] = {{3 * H, H}, {H, H}, {FF, H}, {H, FF}};
        b->bias[l][0] = L->qkv_b, b->bias[l][1] = L->attn_out_b;
        b->bias[l][2] = L->ffn_in_b, b->bias[l][3] = L->ffn_out_b;
        for (int i = 0; i < 4; i++) {
            const size_t cnt = (size_t)nk[i][0] * (size_t)nk[i][1];
            b->w[l][i] = donto_xmalloc(cnt * sizeof(float));
            bf16_round_f32(b->w[l][i], src[i], cnt);
            b->nk[l][i][0] = nk[i][0], b->nk[l][i][1] = nk[i][1];
        }
    }
    *out = b;
    return 0;
}

static void b_gemm(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias, void *scratch) {
    const bert_bf16 *b = ctx;
    const int n = b->nk[l][which][0], k = b->nk[l][which][1];
    float *xb = scratch;
    bf16_round_f32(xb, X, (size_t)m * (size_t)k);
    bert_sgemm_xwt(xb, m, b->w[l][which], n, k, add_bias ? b->bias[l][which] : NULL, Y);
}

static size_t b_scratch(const void *ctx, int m) {
    const bert_bf16 *b = ctx;
    const int kmax = b->inter > b->hidden ? b->inter : b->hidden;
    return (size_t)m * (size_t)kmax * sizeof(float) + 64;
}

void bert_bf16_ops(bert_linear_ops *ops, const bert_bf16 *b) {
    ops->gemm = b_gemm;
    ops->ctx = b;
    ops->scratch_bytes = b_scratch;
    ops->row_block = 0; /* OpenBLAS packs W per call */
    ops->isa = DONTO_ISA_AUTO;
}
