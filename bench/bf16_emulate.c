/*
 * CPU emulation of the CUDA engine's bf16 numerics, to estimate its parity
 * before a GPU run: the CPU forward pass (bert_cpu.c) with a linear backend
 * that rounds BOTH GEMM operands to bf16 (round to nearest even) and
 * accumulates in fp32, which is what the CUDA bf16 path does (its GEMM
 * inputs xin/ctx/fin and weights are bf16; LayerNorm, softmax, GELU, the
 * residual stream and the GEMM outputs stay fp32). Only the summation order
 * differs from the GPU. Prints min / mean cosine against the fp32 path.
 *
 *   bench_bf16_emulate --model DIR --corpus FILE.jsonl [--limit N] [--threads N]
 *
 * An estimate, not a GPU measurement: scripts/gpu-check measures the real one.
 * Last line: min_cosine=... mean_cosine=... texts=...
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "donto/model.h"
#include "donto/tokenizer.h"
#include "bert_cpu.h"
#include "gpu_plan.h"

static float bf16_round(float f) { return gp_bf16_to_f32(gp_f32_to_bf16(f)); }

typedef struct {
    const donto_bert_weights *w;
    float *wq[64][4]; /* bf16-rounded copies of each layer's matrices */
} emu;

static void emu_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                     void *scratch) {
    const emu *e = vctx;
    const donto_bert_layer *L = &e->w->layer[l];
    const int H = e->w->cfg.hidden, FF = e->w->cfg.intermediate;
    const int n = which == 0 ? 3 * H : which == 2 ? FF : H, k = which == 3 ? FF : H;
    const float *bias = which == 0 ? L->qkv_b : which == 1 ? L->attn_out_b : which == 2 ? L->ffn_in_b : L->ffn_out_b;
    float *xr = scratch;
    for (size_t i = 0; i < (size_t)m * k; i++) xr[i] = bf16_round(X[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, xr, k, e->wq[l][which], k, 0.0f, Y, n);
    if (add_bias)
        for (int r = 0; r < m; r++)
            for (int j = 0; j < n; j++) Y[(size_t)r * n + j] += bias[j];
}

static size_t emu_scratch(const void *vctx, int m) {
    const emu *e = vctx;
    int k = e->w->cfg.intermediate > e->w->cfg.hidden ? e->w->cfg.intermediate : e->w->cfg.hidden;
    return (size_t)m * (size_t)k * sizeof(float);
}

static const char *arg(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv) {
    const char *model = arg(argc, argv, "--model", NULL), *corpus = arg(argc, argv, "--corpus", NULL);
    if (!model || !corpus) {
        fprintf(stderr, "usage: bench_bf16_emulate --model DIR --corpus FILE.jsonl [--limit N] [--threads N]\n");
        return 2;
    }
    long limit = atol(arg(argc, argv, "--limit", "0"));
    int nt = atoi(arg(argc, argv, "--threads", "1"));
    openblas_set_num_threads(1);
    donto_err err = {0};
    donto_bert_weights *w;
    if (donto_bert_load(model, &w, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", model);
    donto_tokenizer *tok;
    if (donto_tokenizer_open(path, NULL, &tok, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, ML = c->max_position;
    if (c->layers > 64) return 1;
    emu e = {.w = w};
    for (int l = 0; l < c->layers; l++)
        for (int which = 0; which < 4; which++) {
            const donto_bert_layer *L = &w->layer[l];
            const float *W = which == 0 ? L->qkv_w : which == 1 ? L->attn_out_w : which == 2 ? L->ffn_in_w : L->ffn_out_w;
            size_t cnt = which == 0 ? 3 * (size_t)H * H : which == 1 ? (size_t)H * H : (size_t)H * c->intermediate;
            e.wq[l][which] = malloc(cnt * sizeof(float));
            for (size_t i = 0; i < cnt; i++) e.wq[l][which][i] = bf16_round(W[i]);
        }
    bert_linear_ops ref_ops, emu_ops = {.gemm = emu_gemm, .ctx = &e, .scratch_bytes = emu_scratch, .isa = DONTO_ISA_AUTO};
    bert_fp32_ops(&ref_ops, w);
    size_t sb = bert_cpu_scratch_bytes(c, &emu_ops, ML, ML, nt);
    size_t sr = bert_cpu_scratch_bytes(c, &ref_ops, ML, ML, nt);
    void *scratch = donto_aligned_alloc(sb > sr ? sb : sr);
    int32_t *ids = malloc((size_t)ML * sizeof *ids);
    float *va = malloc((size_t)H * 4), *vb = malloc((size_t)H * 4);
    FILE *f = fopen(corpus, "r");
    if (!f) return 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    double mn = 2, sum = 0;
    long n = 0;
    while ((len = getline(&line, &cap, f)) > 0 && (!limit || n < limit)) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, 0, &je);
        json_t *t = j ? json_object_get(j, "text") : NULL;
        if (json_is_string(t)) {
            int k = donto_tokenizer_encode(tok, json_string_value(t), json_string_length(t), ids, ML);
            int off[2] = {0, k};
            bert_cpu_forward(w, &ref_ops, (int)c->pooling, ids, off, 1, va, scratch, sr, nt);
            bert_cpu_forward(w, &emu_ops, (int)c->pooling, ids, off, 1, vb, scratch, sb, nt);
            double d = 0;
            for (int i = 0; i < H; i++) d += (double)va[i] * vb[i];
            mn = d < mn ? d : mn;
            sum += d;
            n++;
        }
        json_decref(j);
    }
    fclose(f);
    printf("min_cosine=%.7f mean_cosine=%.7f texts=%ld\n", mn, n ? sum / (double)n : 0.0, n);
    return 0;
}
