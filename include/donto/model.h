/*
 * donto-accel: BERT-family encoder weights, read straight from a Hugging Face
 * model directory (config.json + model.safetensors + vocab.txt).
 *
 * model.safetensors is mmap'ed; every tensor the encoder needs is checked for
 * name, dtype and shape against config.json before anything runs. F32 tensors
 * are used in place when aligned; F16/BF16 tensors are widened to F32 once.
 */
#ifndef DONTO_MODEL_H
#define DONTO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DONTO_POOL_CLS = 0, DONTO_POOL_MEAN = 1 } donto_pooling;

typedef struct donto_bert_config {
    int vocab_size;        /* 30522 */
    int hidden;            /* H: 384 */
    int layers;            /* L: 12 (bge-small), 6 (MiniLM-L6) */
    int heads;             /* NH: 12, head dim H/NH = 32 */
    int intermediate;      /* FF: 1536 */
    int max_position;      /* 512 */
    int type_vocab;        /* 2 */
    float ln_eps;          /* 1e-12 */
    donto_pooling pooling; /* from 1_Pooling/config.json, else CLS */
    int normalize;         /* L2-normalise the pooled vector (always 1 for now) */
} donto_bert_config;

/* One transformer layer. Linear weights are row-major [out, in] as in
 * PyTorch (y = x W^T + b). Q, K and V are stored fused as qkv_w [3H, H]. */
typedef struct donto_bert_layer {
    const float *qkv_w, *qkv_b;       /* [3H, H], [3H] (rows: Q, then K, then V) */
    const float *attn_out_w, *attn_out_b; /* [H, H], [H] */
    const float *ln1_g, *ln1_b;       /* [H] attention.output.LayerNorm */
    const float *ffn_in_w, *ffn_in_b; /* [FF, H], [FF] intermediate.dense */
    const float *ffn_out_w, *ffn_out_b; /* [H, FF], [H] output.dense */
    const float *ln2_g, *ln2_b;       /* [H] output.LayerNorm */
} donto_bert_layer;

typedef struct donto_bert_weights {
    donto_bert_config cfg;
    const float *word_emb; /* [V, H] */
    const float *pos_emb;  /* [P, H] */
    const float *type_emb; /* [T, H] (row 0 used: all token types are 0) */
    const float *emb_ln_g, *emb_ln_b; /* [H] */
    donto_bert_layer *layer;          /* [L] */
    /* private: storage */
    void *map;
    size_t map_len;
    void **owned;
    int n_owned, cap_owned;
} donto_bert_weights;

/* Parse a HF config.json (BertModel). Validates every field it uses. */
int donto_bert_config_parse(const char *json, size_t len, donto_bert_config *cfg, donto_err *err);

/* Load <dir>/config.json, <dir>/model.safetensors and, when present,
 * <dir>/1_Pooling/config.json (sentence-transformers pooling). */
int donto_bert_load(const char *dir, donto_bert_weights **out, donto_err *err);
void donto_bert_free(donto_bert_weights *w);

#ifdef __cplusplus
}
#endif
#endif
