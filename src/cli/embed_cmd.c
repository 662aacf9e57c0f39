/*
 * `donto-embed embed`: texts in, vectors out.
 *
 * Input: JSONL ({"id": ..., "text": "..."} per line) or plain lines (one
 * text per line, id = 0-based line number); the format is detected from the
 * first non-blank line unless --lines is given. Output, in input order:
 *   jsonl  {"id": <id as given>, "vector": [...]} (%.9g: exact float round trip)
 *   npy    float32 [n, dim] (needs a seekable --out: the row count is patched in)
 *   f32    raw little-endian float32, n * dim
 * Work proceeds in chunks of --chunk texts, so memory stays bounded for any
 * input size. A malformed input line stops the run with its line number:
 * a silently skipped text would be a missing vector later.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/opt.h"

enum { FMT_JSONL, FMT_NPY, FMT_F32 };

typedef struct {
    char **text;
    size_t *len;
    char **id; /* JSON text of the id */
    size_t n, cap;
} chunk;

static void chunk_clear(chunk *c) {
    for (size_t i = 0; i < c->n; i++) free(c->text[i]), free(c->id[i]);
    c->n = 0;
}

static void chunk_push(chunk *c, char *text, size_t len, char *id) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->text = donto_xrealloc(c->text, c->cap * sizeof *c->text);
        c->len = donto_xrealloc(c->len, c->cap * sizeof *c->len);
        c->id = donto_xrealloc(c->id, c->cap * sizeof *c->id);
    }
    c->text[c->n] = text, c->len[c->n] = len, c->id[c->n] = id;
    c->n++;
}

/* Parse one JSONL record into (text, id). */
static int parse_record(const char *line, size_t len, size_t lineno, char **text, size_t *tlen,
                        char **id, donto_err *err) {
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return donto_seterr(err, "input line %zu: not a JSON object (%s)", lineno, o ? "wrong type" : je.text);
    }
    json_t *t = json_object_get(o, "text"), *i = json_object_get(o, "id");
    if (!json_is_string(t)) {
        json_decref(o);
        return donto_seterr(err, "input line %zu: \"text\" is missing or not a string", lineno);
    }
    *tlen = json_string_length(t);
    *text = donto_xmalloc(*tlen + 1);
    memcpy(*text, json_string_value(t), *tlen + 1);
    if (i) *id = json_dumps(i, JSON_ENCODE_ANY | JSON_COMPACT);
    else {
        char buf[32];
        snprintf(buf, sizeof buf, "%zu", lineno - 1);
        *id = donto_xstrdup(buf);
    }
    json_decref(o);
    if (!*id) {
        free(*text);
        return donto_seterr(err, "input line %zu: cannot re-encode \"id\"", lineno);
    }
    return 0;
}

static int write_npy_header(FILE *f, size_t n, int dim) {
    /* Fixed 128-byte header (magic 10 + dict padded with spaces + '\n'), so
     * the row count can be patched in place once known. */
    char dict[118];
    int k = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %d), }", n, dim);
    if (k < 0 || k >= (int)sizeof dict) return -1;
    memset(dict + k, ' ', sizeof dict - (size_t)k);
    dict[sizeof dict - 1] = '\n';
    unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(sizeof dict & 0xff),
                               (unsigned char)(sizeof dict >> 8)};
    return fwrite(magic, 1, 10, f) == 10 && fwrite(dict, 1, sizeof dict, f) == sizeof dict ? 0 : -1;
}

static int write_vectors(FILE *f, int fmt, const chunk *c, const float *v, int dim) {
    if (fmt == FMT_JSONL) {
        for (size_t i = 0; i < c->n; i++) {
            fprintf(f, "{\"id\":%s,\"vector\":[", c->id[i]);
            for (int d = 0; d < dim; d++) fprintf(f, d ? ",%.9g" : "%.9g", (double)v[i * (size_t)dim + (size_t)d]);
            fputs("]}\n", f);
        }
    } else {
        size_t k = c->n * (size_t)dim;
        if (fwrite(v, sizeof *v, k, f) != k) return -1;
    }
    return ferror(f) ? -1 : 0;
}

static const char *const FORMATS[] = {"jsonl", "npy", "f32", NULL};

int donto_embed_cmd(int argc, char **argv) {
    const char *model = NULL, *in = NULL, *outp = NULL;
    int fmt = FMT_JSONL, stats = 0, quiet = 0, lines = 0, prec = -1, dev = DONTO_DEVICE_CPU, isa = DONTO_ISA_AUTO;
    int64_t chunk_n = 8192;
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "DIR",
         .help = "model directory: config.json, model.safetensors, vocab.txt (required)"},
        {DONTO_OPT_STRING, "in", 0, &in, .metavar = "FILE",
         .help = "input (default: stdin): JSONL {\"id\",\"text\"} or plain lines"},
        {DONTO_OPT_FLAG, "lines", 0, &lines, .help = "treat every input line as a text, even if it looks like JSON"},
        {DONTO_OPT_STRING, "out", 0, &outp, .metavar = "FILE", .help = "output (default: stdout)"},
        {DONTO_OPT_CHOICE, "format", 0, &fmt, .choices = FORMATS, .metavar = "F", .help = "jsonl (default) | npy | f32"},
        {DONTO_OPT_INT, "threads", 0, &eo.threads, .min = 1, .max = 1024, .metavar = "N",
         .help = "worker threads (default: all CPUs)"},
        {DONTO_OPT_CHOICE, "precision", 0, &prec, .choices = donto_precision_names, .metavar = "P",
         .help = "fp32 (default, reference) | int16 (CPU fast path) | bf16 (GPU)"},
        {DONTO_OPT_CHOICE, "device", 0, &dev, .choices = donto_device_names, .metavar = "D",
         .help = "cpu (default) | cuda (needs a -DDONTO_CUDA=ON build; default\n"
                 "precision there bf16, fp32 for parity checks)"},
        {DONTO_OPT_INT, "gpu", 0, &eo.gpu, .min = 0, .max = 1024, .word = "all", .word_value = -1, .metavar = "N|all",
         .help = "CUDA device ordinal (default 0); all: one engine per GPU"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni (the CPU kernel set, docs/engine.md)"},
        {DONTO_OPT_INT, "max-len", 0, &eo.max_len, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "tokens per text incl. [CLS]/[SEP] (default: model max, 512)"},
        {DONTO_OPT_INT, "batch-tokens", 0, &eo.batch_tokens, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "tokens per packed forward batch (default 4096)"},
        {DONTO_OPT_INT64, "chunk", 0, &chunk_n, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "texts read and encoded per round (default 8192)"},
        {DONTO_OPT_FLAG, "stats", 0, &stats, .help = "print one JSON line of figures to stderr at the end"},
        {DONTO_OPT_FLAG, "quiet", 0, &quiet, .help = "no progress line"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed embed",
                               "usage: donto-embed embed --model DIR [options]\n"
                               "\n"
                               "Embed texts with a BERT-family encoder (tokenizer + forward + pooling + L2 norm).\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!model) return donto_opt_usage_error(&cmd, "--model is required");
    donto_err err = {0};
    if (donto_isa_check((donto_isa)isa, &err))
        return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), err.msg);
    eo.isa = (donto_isa)isa;
    eo.device = (donto_device)dev;
    if (prec >= 0) eo.precision = (donto_precision)prec;
    const int prec_set = prec >= 0;
    if (eo.device == DONTO_DEVICE_CUDA && !prec_set) eo.precision = DONTO_PREC_BF16;
    donto_encoder *enc;
    if (donto_encoder_open(model, &eo, &enc, &err)) {
        fprintf(stderr, "donto-embed embed: %s\n", err.msg);
        return 1;
    }
    const int dim = donto_encoder_dim(enc);
    FILE *fi = in ? fopen(in, "rb") : stdin;
    if (!fi) {
        fprintf(stderr, "donto-embed embed: %s: %s\n", in, strerror(errno));
        donto_encoder_close(enc);
        return 1;
    }
    FILE *fo = outp ? fopen(outp, "wb") : stdout;
    if (!fo) {
        fprintf(stderr, "donto-embed embed: %s: %s\n", outp, strerror(errno));
        if (in) fclose(fi);
        donto_encoder_close(enc);
        return 1;
    }
    int rc = 0;
    if (fmt == FMT_NPY && (fseek(fo, 0, SEEK_SET) != 0 || write_npy_header(fo, 0, dim) != 0)) {
        fprintf(stderr, "donto-embed embed: --format npy needs a seekable --out file (use f32 or jsonl for pipes)\n");
        rc = 1;
    }
    const int progress = !quiet && isatty(2);
    chunk c = {0};
    float *vec = NULL;
    char *line = NULL;
    size_t cap = 0, lineno = 0, items = 0, tokens = 0, truncated = 0;
    int mode = lines ? 1 : -1; /* -1 unknown, 0 jsonl, 1 plain */
    double enc_s = 0, t_start = donto_now();
    while (!rc) {
        ssize_t len = getline(&line, &cap, fi);
        int eof = len < 0;
        if (!eof) {
            lineno++;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (mode < 0) {
                const char *p = line;
                while (*p == ' ' || *p == '\t') p++;
                if (!*p) continue; /* leading blank lines decide nothing */
                mode = *p == '{' ? 0 : 1;
            }
            if (mode == 0) {
                const char *p = line;
                while (*p == ' ' || *p == '\t') p++;
                if (!*p) continue;
                char *text = NULL, *id = NULL;
                size_t tl = 0;
                if (parse_record(line, (size_t)len, lineno, &text, &tl, &id, &err)) {
                    fprintf(stderr, "donto-embed embed: %s\n", err.msg);
                    rc = 1;
                    break;
                }
                chunk_push(&c, text, tl, id);
            } else {
                char buf[32];
                snprintf(buf, sizeof buf, "%zu", lineno - 1);
                char *text = donto_xmalloc((size_t)len + 1);
                memcpy(text, line, (size_t)len + 1);
                chunk_push(&c, text, (size_t)len, donto_xstrdup(buf));
            }
        } else if (ferror(fi)) {
            fprintf(stderr, "donto-embed embed: read error: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        if (c.n && (eof || c.n >= (size_t)chunk_n)) {
            vec = donto_xrealloc(vec, c.n * (size_t)dim * sizeof *vec);
            donto_encode_stats st;
            double t0 = donto_now();
            if (donto_encoder_encode(enc, (const char *const *)c.text, c.len, c.n, vec, &st, &err)) {
                fprintf(stderr, "donto-embed embed: %s\n", err.msg);
                rc = 1;
                break;
            }
            enc_s += donto_now() - t0;
            items += c.n, tokens += st.tokens, truncated += st.truncated;
            if (write_vectors(fo, fmt, &c, vec, dim)) {
                fprintf(stderr, "donto-embed embed: write error: %s\n", strerror(errno));
                rc = 1;
                break;
            }
            chunk_clear(&c);
            if (progress)
                fprintf(stderr, "\rembedded %zu items  %.1f items/s  %.0f tokens/s   ", items,
                        items / (enc_s > 0 ? enc_s : 1), tokens / (enc_s > 0 ? enc_s : 1));
        }
        if (eof) break;
    }
    if (progress) fputc('\n', stderr);
    if (!rc && fmt == FMT_NPY && (fflush(fo) != 0 || fseek(fo, 0, SEEK_SET) != 0 || write_npy_header(fo, items, dim) != 0)) {
        fprintf(stderr, "donto-embed embed: cannot finish the npy header: %s\n", strerror(errno));
        rc = 1;
    }
    if (fo != stdout ? fclose(fo) != 0 : fflush(fo) != 0) {
        if (!rc) fprintf(stderr, "donto-embed embed: write error: %s\n", strerror(errno));
        rc = 1;
    }
    if (in) fclose(fi);
    if (!rc && truncated && !quiet)
        DLOG_WARN("%zu text(s) reached max_len and were truncated", truncated);
    if (!rc && stats) {
        /* which kernels ran: the CPU kernel set, the GEMM, OpenBLAS's core */
        donto_encoder_kernels kern;
        donto_encoder_kernels_get(enc, &kern);
        fprintf(stderr,
                "{\"items\":%zu,\"tokens\":%zu,\"seconds\":%.6f,\"items_per_s\":%.3f,"
                "\"tokens_per_s\":%.1f,\"peak_rss_mb\":%.1f,\"precision\":\"%s\",\"threads\":%d,"
                "\"wall_seconds\":%.3f,\"device\":\"%s\",\"isa\":\"%s\",\"gemm\":\"%s\","
                "\"blas_core\":\"%s\",\"blas_weaker\":%s}\n",
                items, tokens, enc_s, enc_s > 0 ? items / enc_s : 0.0, enc_s > 0 ? tokens / enc_s : 0.0,
                donto_peak_rss() / 1048576.0, donto_precision_name(eo.precision),
                eo.threads > 0 ? eo.threads : donto_ncpu(), donto_now() - t_start, donto_device_name(eo.device),
                kern.isa, kern.gemm, kern.blas_core, kern.blas_weaker ? "true" : "false");
    }
    chunk_clear(&c);
    free(c.text), free(c.len), free(c.id);
    free(vec);
    free(line);
    donto_encoder_close(enc);
    return rc;
}
