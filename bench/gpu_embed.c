/*
 * GPU (or CPU) embedding throughput and parity, one corpus per run.
 *
 *   bench_gpu_embed --model DIR --corpus FILE.jsonl [--device cpu|cuda]
 *       [--precision P] [--gpu N] [--batch-tokens N] [--threads N]
 *       [--seconds S (-1: first pass only)] [--copies K] [--write-ref F.f32] [--ref F.f32]
 *       [--peak-tflops X] [--label NAME]
 *
 * Reads the "text" of every JSONL line. One untimed pass first (it also
 * gives the vectors for --write-ref / --ref), then timed encode calls of K
 * copies of the corpus each (default: enough copies for ~2 s a call, so the
 * engine's chunk pipeline - tokenising one chunk while the previous one
 * computes - is what is measured) until --seconds have passed.
 * --ref compares the first pass with reference vectors (cosine per row).
 * The model FLOPs count the dense layers (2 x params x tokens) plus
 * attention (4 x len x H per token per layer); --peak-tflops turns them into
 * a share of the card's peak (H200 dense bf16: 989).
 * Last line: key=value figures, the same as the JSON line before it.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/encoder.h"

static void die(const char *m) {
    fprintf(stderr, "bench_gpu_embed: %s\n", m);
    exit(1);
}

static const char *arg(int argc, char **argv, const char *name, const char *dflt) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv) {
    const char *model = arg(argc, argv, "--model", NULL), *corpus = arg(argc, argv, "--corpus", NULL);
    if (!model || !corpus) die("usage: --model DIR --corpus FILE.jsonl [options] (see the source header)");
    const char *dev_s = arg(argc, argv, "--device", "cuda"), *label = arg(argc, argv, "--label", "run");
    const char *wref = arg(argc, argv, "--write-ref", NULL), *rref = arg(argc, argv, "--ref", NULL);
    double seconds = atof(arg(argc, argv, "--seconds", "5")), peak = atof(arg(argc, argv, "--peak-tflops", "989"));
    int copies = atoi(arg(argc, argv, "--copies", "0"));
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    int d = donto_device_parse(dev_s);
    if (d < 0) die("--device cpu|cuda");
    o.device = (donto_device)d;
    o.precision = o.device == DONTO_DEVICE_CUDA ? DONTO_PREC_BF16 : DONTO_PREC_FP32;
    const char *p_s = arg(argc, argv, "--precision", NULL);
    if (p_s) {
        int p = donto_precision_parse(p_s);
        if (p < 0) die("--precision fp32|int16|bf16");
        o.precision = (donto_precision)p;
    }
    o.gpu = atoi(arg(argc, argv, "--gpu", "0"));
    o.batch_tokens = atoi(arg(argc, argv, "--batch-tokens", "0"));
    o.threads = atoi(arg(argc, argv, "--threads", "0"));

    /* Corpus. */
    FILE *f = fopen(corpus, "r");
    if (!f) die("cannot open the corpus");
    size_t n = 0, cap = 0;
    char **texts = NULL, *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, 0, &je);
        json_t *t = j ? json_object_get(j, "text") : NULL;
        if (json_is_string(t)) {
            if (n == cap) texts = realloc(texts, (cap = cap ? 2 * cap : 4096) * sizeof *texts);
            texts[n++] = strdup(json_string_value(t));
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (!n) die("no texts in the corpus");

    donto_err err = {0};
    donto_encoder *enc;
    double t0 = donto_now();
    if (donto_encoder_open(model, &o, &enc, &err)) {
        fprintf(stderr, "bench_gpu_embed: %s\n", err.msg);
        return 1;
    }
    const double open_s = donto_now() - t0;
    const int H = donto_encoder_dim(enc);
    const donto_bert_config *c = donto_encoder_config(enc);

    /* Pass 1 (untimed): warm-up, parity vectors, token lengths. */
    float *v1 = malloc(n * (size_t)H * sizeof *v1);
    int32_t *ids = malloc((size_t)c->max_position * sizeof *ids);
    double tokens1 = 0, attn_tok1 = 0; /* sum len, sum len^2 */
    for (size_t i = 0; i < n; i++) {
        int k = donto_tokenizer_encode(donto_encoder_tokenizer(enc), texts[i], strlen(texts[i]), ids, c->max_position);
        tokens1 += k;
        attn_tok1 += (double)k * k;
    }
    free(ids);
    donto_encode_stats st;
    t0 = donto_now();
    if (donto_encoder_encode(enc, (const char *const *)texts, NULL, n, v1, &st, &err)) {
        fprintf(stderr, "bench_gpu_embed: %s\n", err.msg);
        return 1;
    }
    const double first_s = donto_now() - t0;
    double min_cos = 2, sum_cos = 0;
    int have_ref = 0;
    if (wref) {
        FILE *w = fopen(wref, "wb");
        if (!w || fwrite(v1, sizeof *v1, n * (size_t)H, w) != n * (size_t)H || fclose(w)) die("cannot write --write-ref");
    }
    if (rref) {
        float *r = malloc(n * (size_t)H * sizeof *r);
        FILE *rf = fopen(rref, "rb");
        if (!rf || fread(r, sizeof *r, n * (size_t)H, rf) != n * (size_t)H) die("cannot read --ref (same corpus?)");
        fclose(rf);
        for (size_t i = 0; i < n; i++) {
            double dot = 0, na = 0, nb = 0;
            for (int k = 0; k < H; k++) {
                double a = v1[i * (size_t)H + (size_t)k], b = r[i * (size_t)H + (size_t)k];
                dot += a * b, na += a * a, nb += b * b;
            }
            double cs = dot / (sqrt(na * nb) + 1e-30);
            if (!(cs >= -2)) cs = -2; /* NaN counts as the worst */
            min_cos = cs < min_cos ? cs : min_cos;
            sum_cos += cs;
        }
        free(r);
        have_ref = 1;
    }

    /* Timed: calls of `copies` copies of the corpus until `seconds` pass. */
    if (copies <= 0) {
        copies = first_s > 0 ? (int)(2.0 / first_s) : 1;
        if (copies < 1) copies = 1;
        if (copies > 64) copies = 64;
    }
    const size_t m = n * (size_t)copies;
    const char **rep = malloc(m * sizeof *rep);
    for (size_t i = 0; i < m; i++) rep[i] = texts[i % n];
    float *vm = malloc(m * (size_t)H * sizeof *vm);
    double el = 0, items = 0, toks = 0;
    int calls = 0;
    t0 = donto_now();
    /* --seconds below 0: parity only, the first pass is the timing. */
    while (seconds >= 0 && (calls == 0 || el < seconds)) {
        if (donto_encoder_encode(enc, rep, NULL, m, vm, &st, &err)) {
            fprintf(stderr, "bench_gpu_embed: %s\n", err.msg);
            return 1;
        }
        calls++;
        items += (double)m;
        toks += (double)st.tokens;
        el = donto_now() - t0;
    }
    if (!calls) items = (double)n, toks = tokens1, el = first_s;

    /* Model FLOPs of the timed work. */
    const double Hd = c->hidden, FF = c->intermediate, L = c->layers;
    const double dense_per_tok = L * 2.0 * (4.0 * Hd * Hd + 2.0 * Hd * FF);
    const double flops = (items / (double)n) * (tokens1 * dense_per_tok + L * 4.0 * Hd * attn_tok1);
    const double tflops = flops / el / 1e12;
    donto_encoder_devinfo di;
    donto_encoder_devinfo_get(enc, &di);
    printf("{\"label\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\",\"gpu_name\":\"%s\",\"texts\":%zu,"
           "\"avg_tokens\":%.2f,\"copies\":%d,\"calls\":%d,\"seconds\":%.3f,\"items\":%.0f,\"items_per_s\":%.1f,"
           "\"tokens_per_s\":%.1f,\"model_tflops\":%.3f,\"peak_tflops\":%.1f,\"share_of_peak\":%.5f,"
           "\"first_pass_s\":%.3f,\"open_s\":%.3f,\"gpu_mem_engine_mb\":%.1f,\"gpu_mem_used_mb\":%.1f,"
           "\"gpu_mem_total_mb\":%.1f,\"batch_tokens\":%d,\"engines\":%d",
           label, dev_s, donto_precision_name(o.precision), di.name, n, tokens1 / (double)n, copies, calls, el, items,
           items / el, toks / el, tflops, peak, tflops / peak, first_s, open_s, di.mem_engine / 1048576.0,
           di.mem_used_peak / 1048576.0, di.mem_total / 1048576.0, di.batch_tokens, di.engines);
    if (have_ref) printf(",\"min_cosine\":%.7f,\"mean_cosine\":%.7f", min_cos, sum_cos / (double)n);
    printf("}\n");
    printf("label=%s items_per_s=%.1f tokens_per_s=%.1f share_of_peak=%.5f", label, items / el, toks / el,
           tflops / peak);
    if (have_ref) printf(" min_cosine=%.7f", min_cos);
    printf("\n");
    donto_encoder_close(enc);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts), free(rep), free(v1), free(vm);
    return 0;
}
