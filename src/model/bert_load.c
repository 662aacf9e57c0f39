/*
 * Load a BERT encoder from a Hugging Face model directory.
 *
 * Every tensor the forward pass reads is looked up by name, and its dtype and
 * shape are checked against config.json before any pointer is kept, so a
 * wrong, truncated or mismatched file fails here with a message that names
 * the tensor instead of producing garbage vectors later.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "donto/model.h"
#include "safetensors.h"

static int get_int(json_t *root, const char *key, int dflt, int min, int max, int *out,
                   donto_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v) {
        if (dflt < 0) return donto_seterr(err, "config.json: missing \"%s\"", key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v)) return donto_seterr(err, "config.json: \"%s\" must be an integer", key);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return donto_seterr(err, "config.json: \"%s\" = %lld is outside [%d, %d]", key, (long long)x,
                            min, max);
    *out = (int)x;
    return 0;
}

int donto_bert_config_parse(const char *json, size_t len, donto_bert_config *cfg, donto_err *err) {
    memset(cfg, 0, sizeof *cfg);
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) return donto_seterr(err, "config.json: invalid JSON at line %d: %s", je.line, je.text);
    int rc = -1;
    if (!json_is_object(root)) {
        donto_seterr(err, "config.json: top level is not an object");
        goto out;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "bert") != 0)) {
        donto_seterr(err, "config.json: model_type \"%s\" is not supported (only \"bert\")",
                     json_is_string(mt) ? json_string_value(mt) : "?");
        goto out;
    }
    if (get_int(root, "hidden_size", -1, 1, 16384, &cfg->hidden, err) ||
        get_int(root, "num_hidden_layers", -1, 1, 256, &cfg->layers, err) ||
        get_int(root, "num_attention_heads", -1, 1, 1024, &cfg->heads, err) ||
        get_int(root, "intermediate_size", -1, 1, 1 << 17, &cfg->intermediate, err) ||
        get_int(root, "vocab_size", -1, 1, 1 << 24, &cfg->vocab_size, err) ||
        get_int(root, "max_position_embeddings", 512, 2, 1 << 20, &cfg->max_position, err) ||
        get_int(root, "type_vocab_size", 2, 1, 1 << 16, &cfg->type_vocab, err))
        goto out;
    if (cfg->hidden % cfg->heads) {
        donto_seterr(err, "config.json: hidden_size %d is not a multiple of num_attention_heads %d",
                     cfg->hidden, cfg->heads);
        goto out;
    }
    if (cfg->hidden / cfg->heads > 256) { /* the attention kernel's accumulator */
        donto_seterr(err, "config.json: head size %d is over the supported 256", cfg->hidden / cfg->heads);
        goto out;
    }
    json_t *act = json_object_get(root, "hidden_act");
    /* HF "gelu" is the exact erf form; the tanh variants would give other
     * vectors, so they are refused rather than silently approximated. */
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu") != 0)) {
        donto_seterr(err, "config.json: hidden_act \"%s\" is not supported (only exact \"gelu\")",
                     json_is_string(act) ? json_string_value(act) : "?");
        goto out;
    }
    json_t *pe = json_object_get(root, "position_embedding_type");
    if (pe && (!json_is_string(pe) || strcmp(json_string_value(pe), "absolute") != 0)) {
        donto_seterr(err, "config.json: position_embedding_type must be \"absolute\"");
        goto out;
    }
    json_t *eps = json_object_get(root, "layer_norm_eps");
    cfg->ln_eps = 1e-12f;
    if (eps) {
        if (!json_is_number(eps) || !(json_number_value(eps) > 0) || json_number_value(eps) > 1) {
            donto_seterr(err, "config.json: layer_norm_eps must be a number in (0, 1]");
            goto out;
        }
        cfg->ln_eps = (float)json_number_value(eps);
    }
    cfg->pooling = DONTO_POOL_CLS;
    cfg->normalize = 1;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* sentence-transformers writes the pooling mode to 1_Pooling/config.json.
 * Missing file: CLS (what bge uses). Present but unsupported: error. */
static int read_pooling(const char *dir, donto_pooling *out, donto_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        *out = DONTO_POOL_CLS;
        return 0;
    }
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    json_error_t je;
    json_t *root = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return donto_seterr(err, "%s: invalid JSON", path);
    }
    int cls = json_is_true(json_object_get(root, "pooling_mode_cls_token"));
    int mean = json_is_true(json_object_get(root, "pooling_mode_mean_tokens"));
    int other = json_is_true(json_object_get(root, "pooling_mode_max_tokens")) ||
                json_is_true(json_object_get(root, "pooling_mode_mean_sqrt_len_tokens"));
    json_decref(root);
    if (cls + mean != 1 || other)
        return donto_seterr(err, "%s: exactly one of pooling_mode_cls_token / pooling_mode_mean_tokens must be set", path);
    *out = cls ? DONTO_POOL_CLS : DONTO_POOL_MEAN;
    return 0;
}

static void *own(donto_bert_weights *w, size_t bytes) {
    if (w->n_owned == w->cap_owned) {
        w->cap_owned = w->cap_owned ? 2 * w->cap_owned : 64;
        w->owned = donto_xrealloc(w->owned, (size_t)w->cap_owned * sizeof *w->owned);
    }
    void *p = donto_aligned_alloc(bytes);
    if (p) w->owned[w->n_owned++] = p;
    return p;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) {
            u = s;
        } else { /* subnormal: renormalise */
            int sh = 0;
            while (!(m & 0x400)) m <<= 1, sh++;
            u = s | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) {
        u = s | 0x7f800000u | (m << 13);
    } else {
        u = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Find tensor `prefix+name`, check it has exactly the given shape, and return
 * a float32 view (in place when possible, else a converted owned copy). */
static const float *tensor(donto_bert_weights *w, const st_file *sf, const char *prefix,
                           const char *name, int ndim, int64_t d0, int64_t d1, donto_err *err) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const st_tensor *t = st_find(sf, full);
    if (!t) {
        donto_seterr(err, "%s: missing tensor %s", sf->path, full);
        return NULL;
    }
    int64_t want[2] = {d0, d1};
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[128] = "", exp[64];
        size_t n = 0;
        for (int i = 0; i < t->ndim && n < sizeof got - 24; i++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
        if (ndim == 1) snprintf(exp, sizeof exp, "%lld", (long long)d0);
        else snprintf(exp, sizeof exp, "%lld,%lld", (long long)d0, (long long)d1);
        donto_seterr(err, "%s: tensor %s has shape [%s], config.json implies [%s]", sf->path, full, got, exp);
        return NULL;
    }
    size_t numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    if (t->dtype == ST_F32) {
        if (((uintptr_t)t->data & 3) == 0) return (const float *)t->data;
        float *p = own(w, numel * 4);
        if (!p) goto oom;
        memcpy(p, t->data, numel * 4);
        return p;
    }
    if (t->dtype == ST_F16 || t->dtype == ST_BF16) {
        float *p = own(w, numel * 4);
        if (!p) goto oom;
        for (size_t i = 0; i < numel; i++) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            p[i] = t->dtype == ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return p;
    }
    donto_seterr(err, "%s: tensor %s has dtype %s (need F32, F16 or BF16)", sf->path, full, t->dtype_name);
    return NULL;
oom:
    donto_seterr(err, "out of memory converting tensor %s", full);
    return NULL;
}

static int check_finite(const float *p, size_t n, const char *what, donto_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return donto_seterr(err, "tensor %s holds a non-finite value at %zu (corrupt file?)", what, i);
    return 0;
}

int donto_bert_load(const char *dir, donto_bert_weights **out, donto_err *err) {
    *out = NULL;
    char path[4096];
    char *cjson;
    size_t clen;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (donto_read_file(path, &cjson, &clen, err)) return -1;
    donto_bert_weights *w = donto_xcalloc(1, sizeof *w);
    int rc = donto_bert_config_parse(cjson, clen, &w->cfg, err);
    free(cjson);
    if (rc) {
        donto_preerr(err, "%s", dir);
        free(w);
        return -1;
    }
    if (read_pooling(dir, &w->cfg.pooling, err)) {
        free(w);
        return -1;
    }
    st_file *sf = donto_xcalloc(1, sizeof *sf);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_open(path, sf, err)) {
        free(sf);
        free(w);
        return -1;
    }
    w->map = sf;
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate;
    /* bge and MiniLM ship BertModel names; BertFor* checkpoints prefix "bert.". */
    const char *pre = st_find(sf, "embeddings.word_embeddings.weight") ? "" : "bert.";
#define T1(dst, name, n) if (!((dst) = tensor(w, sf, pre, name, 1, n, 0, err))) goto fail
#define T2(dst, name, a, b) if (!((dst) = tensor(w, sf, pre, name, 2, a, b, err))) goto fail
    T2(w->word_emb, "embeddings.word_embeddings.weight", c->vocab_size, H);
    T2(w->pos_emb, "embeddings.position_embeddings.weight", c->max_position, H);
    T2(w->type_emb, "embeddings.token_type_embeddings.weight", c->type_vocab, H);
    T1(w->emb_ln_g, "embeddings.LayerNorm.weight", H);
    T1(w->emb_ln_b, "embeddings.LayerNorm.bias", H);
    w->layer = donto_xcalloc((size_t)c->layers, sizeof *w->layer);
    for (int l = 0; l < c->layers; l++) {
        donto_bert_layer *L = &w->layer[l];
        char n[160];
        const float *q, *k, *v, *qb, *kb, *vb;
#define LN(s) (snprintf(n, sizeof n, "encoder.layer.%d.%s", l, s), n)
        T2(q, LN("attention.self.query.weight"), H, H);
        T2(k, LN("attention.self.key.weight"), H, H);
        T2(v, LN("attention.self.value.weight"), H, H);
        T1(qb, LN("attention.self.query.bias"), H);
        T1(kb, LN("attention.self.key.bias"), H);
        T1(vb, LN("attention.self.value.bias"), H);
        T2(L->attn_out_w, LN("attention.output.dense.weight"), H, H);
        T1(L->attn_out_b, LN("attention.output.dense.bias"), H);
        T1(L->ln1_g, LN("attention.output.LayerNorm.weight"), H);
        T1(L->ln1_b, LN("attention.output.LayerNorm.bias"), H);
        T2(L->ffn_in_w, LN("intermediate.dense.weight"), FF, H);
        T1(L->ffn_in_b, LN("intermediate.dense.bias"), FF);
        T2(L->ffn_out_w, LN("output.dense.weight"), H, FF);
        T1(L->ffn_out_b, LN("output.dense.bias"), H);
        T1(L->ln2_g, LN("output.LayerNorm.weight"), H);
        T1(L->ln2_b, LN("output.LayerNorm.bias"), H);
#undef LN
        /* Fuse Q, K, V into one [3H, H] matrix so one GEMM produces all three. */
        float *qkv = own(w, (size_t)3 * H * H * sizeof(float));
        float *qkvb = own(w, (size_t)3 * H * sizeof(float));
        if (!qkv || !qkvb) {
            donto_seterr(err, "out of memory fusing QKV");
            goto fail;
        }
        memcpy(qkv, q, (size_t)H * H * 4);
        memcpy(qkv + (size_t)H * H, k, (size_t)H * H * 4);
        memcpy(qkv + (size_t)2 * H * H, v, (size_t)H * H * 4);
        memcpy(qkvb, qb, (size_t)H * 4);
        memcpy(qkvb + H, kb, (size_t)H * 4);
        memcpy(qkvb + 2 * H, vb, (size_t)H * 4);
        L->qkv_w = qkv;
        L->qkv_b = qkvb;
    }
#undef T1
#undef T2
    /* A flipped bit in the small tensors (biases, norms, fused QKV) is cheap to
     * catch; the big matrices are checked by the finite-output check. */
    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        if (check_finite(L->qkv_w, (size_t)3 * H * H, "qkv", err) ||
            check_finite(L->ln1_g, (size_t)H, "LayerNorm", err) ||
            check_finite(L->ln2_g, (size_t)H, "LayerNorm", err))
            goto fail;
    }
    *out = w;
    return 0;
fail:
    donto_bert_free(w);
    return -1;
}

void donto_bert_free(donto_bert_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->layer);
    if (w->map) {
        st_close((st_file *)w->map);
        free(w->map);
    }
    free(w);
}
