/*
 * `donto-embed search`: exact semantic search over vectors that `embed`
 * wrote (npy), with the texts they came from (the same JSONL, same order).
 * The stepping stone to the database-backed `recall`.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/opt.h"
#include "donto/recall.h"

/* Read a float32 [n, dim] .npy (the layout `embed --format npy` writes). */
static float *read_npy(const char *path, size_t *n, int *dim, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return NULL;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        free(buf);
        donto_seterr(err, "%s: not an .npy file", path);
        return NULL;
    }
    size_t hl = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
    unsigned long long rows = 0;
    int cols = 0;
    const char *shape = 10 + hl <= len ? strstr(buf + 10, "'shape': (") : NULL;
    if (!shape || buf[1] != 'N' || !strstr(buf + 10, "'<f4'") ||
        sscanf(shape, "'shape': (%llu, %d)", &rows, &cols) != 2 || cols <= 0 ||
        (len - 10 - hl) / 4 / (size_t)cols < rows) {
        free(buf);
        donto_seterr(err, "%s: expected a float32 [n, dim] array", path);
        return NULL;
    }
    float *v = malloc(rows * (size_t)cols * 4 + 1);
    if (!v) {
        free(buf);
        donto_seterr(err, "%s: out of memory", path);
        return NULL;
    }
    memcpy(v, buf + 10 + hl, rows * (size_t)cols * 4);
    free(buf);
    *n = rows, *dim = cols;
    return v;
}

int donto_search_cmd(int argc, char **argv) {
    const char *model = NULL, *vpath = NULL, *tpath = NULL;
    int64_t k = 5;
    int json = 0, isa = DONTO_ISA_AUTO;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "DIR", .help = "the model that embedded V.npy (required)"},
        {DONTO_OPT_STRING, "vectors", 0, &vpath, .metavar = "V.npy", .help = "float32 [n, dim] vectors (required)"},
        {DONTO_OPT_STRING, "texts", 0, &tpath, .metavar = "T.jsonl", .help = "their texts, line i = row i (required)"},
        {DONTO_OPT_INT64, NULL, 'k', &k, .min = 1, .max = 10000, .metavar = "N", .help = "how many texts (default 5)"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "a JSON array of {index, score, text}"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni | avx512bf16 (the CPU kernel set, docs/engine.md)"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed search",
                               "usage: donto-embed search --model DIR --vectors V.npy --texts T.jsonl [-k N] [--json] QUERY\n"
                               "\n"
                               "Embed QUERY and print the N (default 5) most similar texts of T.jsonl, whose\n"
                               "vectors `donto-embed embed --format npy` wrote to V.npy in the same order.\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (!model || !vpath || !tpath) return donto_opt_usage_error(&cmd, "--model, --vectors and --texts are required");
    if (npos != 1) return donto_opt_usage_error(&cmd, "one QUERY, got %d arguments", npos);
    const char *query = argv[1];
    donto_err err = {0};
    if (donto_isa_check((donto_isa)isa, &err))
        return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), err.msg);
    size_t n;
    int dim;
    float *vecs = read_npy(vpath, &n, &dim, &err);
    if (!vecs) {
        fprintf(stderr, "donto-embed search: %s\n", err.msg);
        return 1;
    }
    /* Texts: line i of the JSONL is row i of the vectors. */
    FILE *f = fopen(tpath, "r");
    if (!f) {
        fprintf(stderr, "donto-embed search: %s: %s\n", tpath, strerror(errno));
        free(vecs);
        return 1;
    }
    char **texts = donto_xcalloc(n, sizeof *texts);
    char *line = NULL;
    size_t cap = 0, got = 0;
    while (got < n && getline(&line, &cap, f) >= 0) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *t = o ? json_object_get(o, "text") : NULL;
        texts[got++] = donto_xstrdup(json_is_string(t) ? json_string_value(t) : line);
        json_decref(o);
    }
    free(line);
    fclose(f);
    int rc = 0;
    donto_encoder *enc = NULL;
    float *q = NULL;
    donto_hit *hits = NULL;
    if (got != n) {
        fprintf(stderr, "donto-embed search: %s has %zu texts but %s has %zu vectors\n", tpath, got, vpath, n);
        rc = 1;
        goto out;
    }
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.isa = (donto_isa)isa;
    if (donto_encoder_open(model, &eo, &enc, &err)) {
        fprintf(stderr, "donto-embed search: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    if (donto_encoder_dim(enc) != dim) {
        fprintf(stderr, "donto-embed search: the model makes %d-d vectors, %s holds %d-d\n",
                donto_encoder_dim(enc), vpath, dim);
        rc = 1;
        goto out;
    }
    q = donto_xmalloc((size_t)dim * sizeof *q);
    hits = donto_xmalloc((size_t)k * sizeof *hits);
    if (donto_encoder_encode(enc, &query, NULL, 1, q, NULL, &err)) {
        fprintf(stderr, "donto-embed search: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    size_t nh = donto_exact_topk(vecs, n, dim, q, (size_t)k, hits);
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < nh; i++)
            json_array_append_new(arr, json_pack("{s:I, s:f, s:s}", "index", (json_int_t)hits[i].index,
                                                 "score", (double)hits[i].score, "text", texts[hits[i].index]));
        char *s = json_dumps(arr, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(arr);
    } else {
        printf("query: %s\n", query);
        for (size_t i = 0; i < nh; i++) printf("  %.4f  %s\n", (double)hits[i].score, texts[hits[i].index]);
    }
out:
    for (size_t i = 0; i < got; i++) free(texts[i]);
    free(texts);
    free(vecs);
    free(q);
    free(hits);
    donto_encoder_close(enc);
    return rc;
}
