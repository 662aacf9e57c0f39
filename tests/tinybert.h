/* Test helper: write a tiny random BERT model directory (config.json,
 * model.safetensors, vocab.txt) from C, so loader and encoder tests need no
 * downloaded weights. Knobs let a test break the files on purpose. */
#ifndef DONTO_TEST_TINYBERT_H
#define DONTO_TEST_TINYBERT_H
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    int hidden, layers, heads, inter, vocab_extra, maxpos;
    const char *act;        /* hidden_act in config.json */
    const char *prefix;     /* tensor name prefix, e.g. "bert." */
    const char *skip;       /* tensor name to leave out */
    const char *badshape;   /* tensor name written with one extra row */
    int f16;                /* write every tensor as F16 */
    int nan_in_qkv;         /* put a NaN into layer 0 query weight */
    int pooling;            /* -1 none, 0 cls, 1 mean (1_Pooling/config.json) */
    unsigned seed;
} tiny_spec;

static void tiny_default(tiny_spec *s) {
    memset(s, 0, sizeof *s);
    s->hidden = 16, s->layers = 2, s->heads = 4, s->inter = 32, s->maxpos = 64;
    s->act = "gelu", s->prefix = "", s->pooling = -1, s->seed = 1;
}

static const char *tiny_words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "dog",
                                   "cat", "is", "kind", "of", "animal", "##s", "run", "##ning",
                                   ".", ",", "-", "hello", "world", "fox", "quick", "brown"};
#define TINY_NWORDS ((int)(sizeof tiny_words / sizeof *tiny_words))

static float tiny_rand(unsigned *st) {
    *st = *st * 1103515245u + 12345u;
    return ((float)((*st >> 8) & 0xffff) / 65536.0f - 0.5f) * 0.6f;
}

static uint16_t tiny_f16(float f) { /* round-to-nearest for small normal values */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = u & 0x7fffff;
    if (e <= 0) return (uint16_t)s;
    if (e >= 31) return (uint16_t)(s | 0x7c00);
    uint32_t h = s | ((uint32_t)e << 10) | (m >> 13);
    if (m & 0x1000) h++;
    return (uint16_t)h;
}

typedef struct { char name[128]; int nd; long d0, d1; float fill; int ones; } tiny_t;

/* Writes the model into dir (created). Returns 0 on success. */
static int tiny_write(const char *dir, const tiny_spec *s) {
    mkdir(dir, 0755);
    char path[1024];
    /* vocab_extra only lengthens vocab.txt: config and embeddings keep the
     * base size, so the two disagree on purpose. */
    int H = s->hidden, FF = s->inter, V = TINY_NWORDS;
    /* vocab.txt */
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < TINY_NWORDS; i++) fprintf(f, "%s\n", tiny_words[i]);
    for (int i = 0; i < s->vocab_extra; i++) fprintf(f, "extra%d\n", i);
    fclose(f);
    /* config.json */
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "{\"model_type\":\"bert\",\"hidden_size\":%d,\"num_hidden_layers\":%d,"
            "\"num_attention_heads\":%d,\"intermediate_size\":%d,\"vocab_size\":%d,"
            "\"max_position_embeddings\":%d,\"type_vocab_size\":2,\"layer_norm_eps\":1e-12,"
            "\"hidden_act\":\"%s\"}\n",
            H, s->layers, s->heads, FF, TINY_NWORDS, s->maxpos, s->act);
    fclose(f);
    if (s->pooling >= 0) {
        snprintf(path, sizeof path, "%s/1_Pooling", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
        f = fopen(path, "w");
        if (!f) return -1;
        fprintf(f, "{\"pooling_mode_cls_token\":%s,\"pooling_mode_mean_tokens\":%s}\n",
                s->pooling == 0 ? "true" : "false", s->pooling == 1 ? "true" : "false");
        fclose(f);
    }
    /* tensors */
    tiny_t t[512];
    int n = 0;
#define ADD(nm, ND, A, B, ONES) do { snprintf(t[n].name, sizeof t[n].name, "%s%s", s->prefix, nm); t[n].nd = ND; t[n].d0 = A; t[n].d1 = B; t[n].ones = ONES; n++; } while (0)
    ADD("embeddings.word_embeddings.weight", 2, V, H, 0);
    ADD("embeddings.position_embeddings.weight", 2, s->maxpos, H, 0);
    ADD("embeddings.token_type_embeddings.weight", 2, 2, H, 0);
    ADD("embeddings.LayerNorm.weight", 1, H, 0, 1);
    ADD("embeddings.LayerNorm.bias", 1, H, 0, 0);
    for (int l = 0; l < s->layers; l++) {
        char b[128];
#define L2(x, A, B) do { snprintf(b, sizeof b, "encoder.layer.%d.%s", l, x); ADD(b, 2, A, B, 0); } while (0)
#define L1(x, A, ONES) do { snprintf(b, sizeof b, "encoder.layer.%d.%s", l, x); ADD(b, 1, A, 0, ONES); } while (0)
        L2("attention.self.query.weight", H, H); L1("attention.self.query.bias", H, 0);
        L2("attention.self.key.weight", H, H); L1("attention.self.key.bias", H, 0);
        L2("attention.self.value.weight", H, H); L1("attention.self.value.bias", H, 0);
        L2("attention.output.dense.weight", H, H); L1("attention.output.dense.bias", H, 0);
        L1("attention.output.LayerNorm.weight", H, 1); L1("attention.output.LayerNorm.bias", H, 0);
        L2("intermediate.dense.weight", FF, H); L1("intermediate.dense.bias", FF, 0);
        L2("output.dense.weight", H, FF); L1("output.dense.bias", H, 0);
        L1("output.LayerNorm.weight", H, 1); L1("output.LayerNorm.bias", H, 0);
#undef L1
#undef L2
    }
#undef ADD
    json_t *hdr = json_object();
    size_t offs = 0, esz = s->f16 ? 2 : 4;
    for (int i = 0; i < n; i++) {
        if (s->skip && !strcmp(t[i].name, s->skip)) continue;
        if (s->badshape && !strcmp(t[i].name, s->badshape)) t[i].d0++;
        size_t numel = (size_t)t[i].d0 * (size_t)(t[i].nd == 2 ? t[i].d1 : 1);
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(s->f16 ? "F16" : "F32"));
        json_t *sh = json_array();
        json_array_append_new(sh, json_integer(t[i].d0));
        if (t[i].nd == 2) json_array_append_new(sh, json_integer(t[i].d1));
        json_object_set_new(e, "shape", sh);
        json_t *o = json_array();
        json_array_append_new(o, json_integer((json_int_t)offs));
        json_array_append_new(o, json_integer((json_int_t)(offs + numel * esz)));
        json_object_set_new(e, "data_offsets", o);
        json_object_set_new(hdr, t[i].name, e);
        offs += numel * esz;
    }
    char *hs = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(hdr);
    size_t hl = strlen(hs), pad = (8 - hl % 8) % 8;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) return free(hs), -1;
    uint64_t hl8 = hl + pad;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl8 >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hs, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    free(hs);
    /* Data in the same (sorted-by-name) order as the offsets were assigned:
     * offsets were assigned in t[] order, so write in t[] order too. */
    unsigned st = s->seed;
    for (int i = 0; i < n; i++) {
        if (s->skip && !strcmp(t[i].name, s->skip)) continue;
        size_t numel = (size_t)t[i].d0 * (size_t)(t[i].nd == 2 ? t[i].d1 : 1);
        int is_q0 = strstr(t[i].name, "layer.0.attention.self.query.weight") != NULL;
        for (size_t k = 0; k < numel; k++) {
            float v = t[i].ones ? 1.0f + tiny_rand(&st) * 0.2f : tiny_rand(&st);
            if (s->nan_in_qkv && is_q0 && k == 3) v = NAN;
            if (s->f16) {
                uint16_t h = tiny_f16(v);
                fwrite(&h, 2, 1, f);
            } else {
                fwrite(&v, 4, 1, f);
            }
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}
#endif
