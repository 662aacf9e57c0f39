/*
 * `donto-embed embed`: texts in, vectors out.
 *
 * Input, in one format for the whole file (--format-in, never decided per
 * line):
 *   jsonl  {"id": ..., "text": "..."} per line; blank lines are skipped; the
 *          id defaults to the 0-based line number
 *   text   every line is one text, id = its 0-based line number
 *   auto   (default) by the file name (.jsonl/.ndjson/.json: jsonl; .txt:
 *          text), else by the first non-empty line ('{': jsonl, else text).
 *          Then a JSON-looking line in a text input is a text, and a line
 *          that is not a JSON object with a string "text" in a JSONL input
 *          is a bad line.
 * A bad line is reported with its line number and what is wrong. By default
 * the run fails and leaves no output: --out is written to a temporary file
 * renamed into place only on success (when the input is a file, every line
 * is checked before any work starts). With --skip-bad, bad lines are skipped,
 * counted and named (the first few line numbers); the output holds the good
 * records in input order, each with its id (jsonl output) or as the next row.
 * Output, in input order:
 *   jsonl  {"id": <id as given>, "vector": [...]} (%.9g: exact float round trip)
 *   npy    float32 [n, dim] (needs a seekable --out: the row count is patched in)
 *   f32    raw little-endian float32, n * dim
 * Work proceeds in chunks of --chunk texts, so memory stays bounded for any
 * input size. Progress is measured in tokens (the work), with items too: a
 * line redrawn in place on a terminal, else a log line every
 * --progress-every seconds with items, tokens, rates and the ETA (the token
 * total comes from a first pass over an input file; stdin has no total).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/opt.h"

enum { FMT_JSONL, FMT_NPY, FMT_F32 };
enum { IN_AUTO, IN_JSONL, IN_TEXT };
#define BAD_SHOWN 5 /* bad lines named one by one; the rest are counted */

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

/* Parse one JSONL record into (text, id); err says what is wrong with it. */
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

/* The input: its format, decided once, and the bad lines met. */
typedef struct {
    FILE *f;
    const char *name; /* --in, or NULL (stdin) */
    int fmt;          /* IN_JSONL | IN_TEXT once decided */
    char why[128];    /* how the format was decided */
    int skip_bad;     /* skip bad lines (else the first one is an error) */
    int scan;         /* the first pass: count every bad line, go on */
    int report;       /* print the first bad lines as they are met */
    size_t lineno;
    char *line;
    size_t cap;
    size_t blank_run;            /* auto: blank lines before the deciding line */
    size_t blank_next, blank_end; /* text, auto: those blank lines, still to give */
    char *held;                   /* ... and then the deciding line */
    size_t held_len, held_lineno;
    size_t nbad, bad_line[BAD_SHOWN];
    size_t json_like, json_like_first; /* text lines that look like JSON objects */
} input;

static const char *const IN_FORMATS[] = {"auto", "jsonl", "text", NULL};

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* auto: the file name decides when it can. */
static void input_decide_by_name(input *in) {
    static const char *const J[] = {".jsonl", ".ndjson", ".json", NULL}, *const T[] = {".txt", ".text", NULL};
    if (in->fmt != IN_AUTO || !in->name) return;
    for (int k = 0; J[k]; k++)
        if (ends_with(in->name, J[k])) {
            in->fmt = IN_JSONL;
            snprintf(in->why, sizeof in->why, "jsonl (the file name ends in %s)", J[k]);
        }
    for (int k = 0; T[k]; k++)
        if (ends_with(in->name, T[k])) {
            in->fmt = IN_TEXT;
            snprintf(in->why, sizeof in->why, "text (the file name ends in %s)", T[k]);
        }
}

static void input_bad(input *in, const donto_err *e) {
    if (in->nbad < BAD_SHOWN) in->bad_line[in->nbad] = in->lineno;
    in->nbad++;
    if (in->report && (in->skip_bad || in->scan) && in->nbad <= BAD_SHOWN)
        fprintf(stderr, "donto-embed embed: %s%s\n", e->msg, in->skip_bad ? " (skipped)" : "");
}

static int text_record(const char *t, size_t len, size_t lineno, char **text, size_t *tl, char **id) {
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", lineno - 1);
    *text = donto_xmalloc(len + 1);
    memcpy(*text, t, len);
    (*text)[len] = 0;
    *tl = len, *id = donto_xstrdup(buf);
    return 1;
}

/* The next record: 1 and (text, id), 0 at the end, -1 on a read error or a
 * bad line without --skip-bad (err set). */
static int input_next(input *in, char **text, size_t *tl, char **id, donto_err *err) {
    if (in->blank_next < in->blank_end) return text_record("", 0, in->blank_next++, text, tl, id);
    if (in->held) {
        int r = text_record(in->held, in->held_len, in->held_lineno, text, tl, id);
        free(in->held), in->held = NULL;
        return r;
    }
    for (;;) {
        errno = 0;
        ssize_t len = getline(&in->line, &in->cap, in->f);
        if (len < 0) {
            if (ferror(in->f)) return donto_seterr(err, "read error: %s", strerror(errno ? errno : EIO));
            return 0;
        }
        in->lineno++;
        char *line = in->line;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        int json_like = *p == '{' && len > 0 && line[len - 1] == '}';
        if (in->fmt == IN_AUTO) {
            if (!*p) {
                in->blank_run++;
                continue;
            }
            in->fmt = *p == '{' ? IN_JSONL : IN_TEXT;
            snprintf(in->why, sizeof in->why, "%s (its first non-empty line, %zu, %s with '{')",
                     in->fmt == IN_JSONL ? "jsonl" : "text", in->lineno,
                     in->fmt == IN_JSONL ? "starts" : "does not start");
            if (in->fmt == IN_TEXT && in->blank_run) { /* the blank lines are texts too, in order */
                in->blank_next = in->lineno - in->blank_run, in->blank_end = in->lineno;
                in->held = donto_xmalloc((size_t)len + 1);
                memcpy(in->held, line, (size_t)len + 1);
                in->held_len = (size_t)len, in->held_lineno = in->lineno;
                return input_next(in, text, tl, id, err);
            }
        }
        if (in->fmt == IN_JSONL) {
            if (!*p) continue;
            donto_err e = {0};
            if (parse_record(line, (size_t)len, in->lineno, text, tl, id, &e)) {
                input_bad(in, &e);
                if (in->skip_bad || in->scan) continue;
                *err = e;
                return -1;
            }
            return 1;
        }
        if (json_like && !in->json_like++) in->json_like_first = in->lineno;
        return text_record(line, (size_t)len, in->lineno, text, tl, id);
    }
}

/* "25, 27, 29 and 3 more" */
static void bad_list(const input *in, char *buf, size_t n) {
    size_t k = 0, shown = in->nbad < BAD_SHOWN ? in->nbad : BAD_SHOWN;
    buf[0] = 0;
    for (size_t i = 0; i < shown && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%zu", i ? ", " : "", in->bad_line[i]);
    if (in->nbad > shown && k < n) snprintf(buf + k, n - k, " and %zu more", in->nbad - shown);
}

/* ---------- progress: tokens done of the total, items too ---------- */

typedef struct {
    pthread_mutex_t mu;
    int on, tty;
    double every, t0, last;
    size_t items, tokens;             /* done */
    size_t items_total, tokens_total; /* 0 tokens_total: unknown (not a file) */
    size_t lines, shown_items;        /* lines printed; items in the last one */
} progress;

static void fmt_dur(char *b, size_t n, double s) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress_print(progress *p, double now) {
    double el = now - p->t0, d = el > 1e-9 ? el : 1e-9;
    char line[320], e1[32], e2[32];
    fmt_dur(e1, sizeof e1, el);
    if (p->tokens_total) {
        double frac = (double)p->tokens / (double)p->tokens_total;
        if (p->tokens) fmt_dur(e2, sizeof e2, el * (double)(p->tokens_total - (p->tokens < p->tokens_total ? p->tokens : p->tokens_total)) / (double)p->tokens);
        else snprintf(e2, sizeof e2, "?");
        snprintf(line, sizeof line, "%zu/%zu items, %zu/%zu tokens (%.1f%%), %.1f items/s, %.0f tokens/s, elapsed %s, ETA %s",
                 p->items, p->items_total, p->tokens, p->tokens_total, 100.0 * frac, (double)p->items / d,
                 (double)p->tokens / d, e1, e2);
    } else {
        snprintf(line, sizeof line, "%zu items, %zu tokens, %.1f items/s, %.0f tokens/s, elapsed %s", p->items, p->tokens,
                 (double)p->items / d, (double)p->tokens / d, e1);
    }
    if (p->tty) fprintf(stderr, "\r%s   ", line);
    else fprintf(stderr, "donto-embed embed: %s\n", line);
    p->last = now, p->lines++, p->shown_items = p->items;
}

/* The encoder's per-batch callback (from its threads). */
static void progress_batch(void *ctx, size_t texts, size_t tokens) {
    progress *p = ctx;
    pthread_mutex_lock(&p->mu);
    p->items += texts, p->tokens += tokens;
    if (p->on) {
        double now = donto_now(), gap = p->tty && p->every > 0.25 ? 0.25 : p->every;
        if (now - p->last >= gap) progress_print(p, now);
    }
    pthread_mutex_unlock(&p->mu);
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

/* A first pass over an input file: every line checked (bad lines counted
 * and, unless skipped, fatal before any work), texts and tokens counted for
 * the progress total. The file is rewound for the real pass. */
static int prescan(input *in, const donto_encoder *enc, size_t *items, size_t *tokens, donto_err *err) {
    const donto_tokenizer *tok = donto_encoder_tokenizer(enc);
    const int ml = donto_encoder_max_len(enc);
    int32_t *ids = donto_xmalloc((size_t)ml * sizeof *ids);
    char *text, *id;
    size_t tl;
    int r;
    in->scan = 1, in->report = 1;
    *items = *tokens = 0;
    while ((r = input_next(in, &text, &tl, &id, err)) == 1) {
        int n = donto_tokenizer_encode(tok, text, tl, ids, ml);
        *tokens += n > 0 ? (size_t)n : 0;
        (*items)++;
        free(text), free(id);
    }
    free(ids);
    if (r < 0) return -1;
    if (fseek(in->f, 0, SEEK_SET) != 0) return donto_seterr(err, "cannot rewind the input: %s", strerror(errno));
    return 0;
}

/* Ready for the real pass, which meets the same lines again: it counts them
 * anew and says nothing. */
static void input_rewound(input *in) {
    in->scan = 0, in->report = 0, in->lineno = 0, in->nbad = 0, in->json_like = 0;
    in->blank_run = in->blank_next = in->blank_end = 0;
}

int donto_embed_cmd(int argc, char **argv) {
    const char *model = NULL, *in = NULL, *outp = NULL;
    int fmt = FMT_JSONL, stats = 0, quiet = 0, lines = 0, prec = -1, dev = DONTO_DEVICE_CPU, isa = DONTO_ISA_AUTO;
    int fmt_in = IN_AUTO, skip_bad = 0;
    double every = 10;
    int64_t chunk_n = 8192;
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "DIR",
         .help = "model directory: config.json, model.safetensors, vocab.txt (required)"},
        {DONTO_OPT_STRING, "in", 0, &in, .metavar = "FILE",
         .help = "input (default: stdin): JSONL {\"id\",\"text\"} or plain lines (--format-in)"},
        {DONTO_OPT_CHOICE, "format-in", 0, &fmt_in, .choices = IN_FORMATS, .metavar = "F",
         .help = "auto (default: by the file name, .jsonl or .txt, else the first\n"
                 "non-empty line) | jsonl | text; decided once for the whole input"},
        {DONTO_OPT_FLAG, "lines", 0, &lines, .help = "same as --format-in text"},
        {DONTO_OPT_FLAG, "skip-bad", 0, &skip_bad,
         .help = "skip bad JSONL lines (counted, the first line numbers named);\n"
                 "default: a bad line fails the run and no output is left"},
        {DONTO_OPT_STRING, "out", 0, &outp, .metavar = "FILE", .help = "output (default: stdout)"},
        {DONTO_OPT_CHOICE, "format", 0, &fmt, .choices = FORMATS, .metavar = "F", .help = "jsonl (default) | npy | f32"},
        {DONTO_OPT_INT, "threads", 0, &eo.threads, .min = 1, .max = 1024, .metavar = "N",
         .help = "worker threads (default: all CPUs)"},
        {DONTO_OPT_CHOICE, "precision", 0, &prec, .choices = donto_precision_names, .metavar = "P",
         .help = "fp32 (the reference; default without AVX2) | int16 (CPU fast path; default\n"
                 "with AVX2; min cosine to fp32 0.99997 on the parity texts) | int8 (CPU,\n"
                 "experimental: under the 0.999 cosine gate on some texts) | bf16 (GPU; on the\n"
                 "CPU: bf16 accuracy; vdpbf16ps only where it beats the fp32 kernel)"},
        {DONTO_OPT_CHOICE, "device", 0, &dev, .choices = donto_device_names, .metavar = "D",
         .help = "cpu (default) | cuda (needs a -DDONTO_CUDA=ON build; default\n"
                 "precision there bf16, fp32 for parity checks)"},
        {DONTO_OPT_INT, "gpu", 0, &eo.gpu, .min = 0, .max = 1024, .word = "all", .word_value = -1, .metavar = "N|all",
         .help = "CUDA device ordinal (default 0); all: one engine per GPU"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni | avx512bf16 (the CPU kernel set, docs/engine.md)"},
        {DONTO_OPT_INT, "max-len", 0, &eo.max_len, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "tokens per text incl. [CLS]/[SEP], at most the model's\n"
                 "max_position_embeddings (default: the model's own limit, as\n"
                 "sentence-transformers reads it: sentence_bert_config.json\n"
                 "max_seq_length, else tokenizer_config.json model_max_length,\n"
                 "else max_position_embeddings; --stats says which)"},
        {DONTO_OPT_INT, "batch-tokens", 0, &eo.batch_tokens, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "tokens per packed forward batch (default 4096)"},
        {DONTO_OPT_INT64, "chunk", 0, &chunk_n, .min = 1, .max = 1 << 24, .metavar = "N",
         .help = "texts read and encoded per round (default 8192)"},
        {DONTO_OPT_FLAG, "stats", 0, &stats, .help = "print one JSON line of figures to stderr at the end"},
        {DONTO_OPT_DOUBLE, "progress-every", 0, &every, .fmin = 0, .fmax = 86400, .metavar = "SECS",
         .help = "progress when stderr is not a terminal: a log line every SECS\n"
                 "(default 10; 0: after every batch); a terminal gets one line\n"
                 "redrawn in place"},
        {DONTO_OPT_FLAG, "quiet", 0, &quiet, .help = "no progress"},
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
    if (lines && fmt_in == IN_JSONL) return donto_opt_usage_error(&cmd, "--lines contradicts --format-in jsonl");
    if (lines) fmt_in = IN_TEXT;
    donto_err err = {0};
    if (donto_isa_check((donto_isa)isa, &err))
        return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), err.msg);
    eo.isa = (donto_isa)isa;
    eo.device = (donto_device)dev;
    const int prec_set = prec >= 0;
    eo.precision = prec_set ? (donto_precision)prec : donto_precision_default(eo.device, eo.isa);
    const int max_len_set = eo.max_len > 0;
    progress pg = {.on = !quiet, .tty = isatty(2), .every = every};
    pthread_mutex_init(&pg.mu, NULL);
    eo.progress = progress_batch, eo.progress_ctx = &pg;
    donto_encoder *enc;
    if (donto_encoder_open(model, &eo, &enc, &err)) {
        fprintf(stderr, "donto-embed embed: %s\n", err.msg);
        pthread_mutex_destroy(&pg.mu);
        return 1;
    }
    const int dim = donto_encoder_dim(enc);
    const char *max_len_from = max_len_set ? "--max-len" : donto_encoder_max_len_from(enc);
    input inp = {.f = in ? fopen(in, "rb") : stdin, .name = in, .fmt = fmt_in, .skip_bad = skip_bad, .report = 1};
    if (fmt_in != IN_AUTO) snprintf(inp.why, sizeof inp.why, "%s (--format-in)", IN_FORMATS[fmt_in]);
    input_decide_by_name(&inp);
    if (!inp.f) {
        fprintf(stderr, "donto-embed embed: %s: %s\n", in, strerror(errno));
        donto_encoder_close(enc);
        pthread_mutex_destroy(&pg.mu);
        return 1;
    }
    int rc = 0;
    /* An input file is read twice: every line checked and the tokens
     * counted first, so a bad line fails the run before any work and the
     * progress has its total. */
    struct stat isb;
    if (in && fstat(fileno(inp.f), &isb) == 0 && S_ISREG(isb.st_mode)) {
        if (prescan(&inp, enc, &pg.items_total, &pg.tokens_total, &err)) {
            fprintf(stderr, "donto-embed embed: %s\n", err.msg);
            rc = 1;
        } else if (inp.nbad && !skip_bad) {
            char bl[160];
            bad_list(&inp, bl, sizeof bl);
            fprintf(stderr, "donto-embed embed: %s: %zu bad input line%s (%s), read as %s; nothing was embedded "
                            "(--skip-bad embeds the others%s)\n",
                    in, inp.nbad, inp.nbad == 1 ? "" : "s", bl, inp.why,
                    inp.fmt == IN_JSONL ? ", --format-in text reads every line as a text" : "");
            rc = 1;
        }
        input_rewound(&inp);
    }
    /* --out is written to a temporary file beside it and renamed into place
     * on success, so a failed run leaves no half-written output (and an
     * older file of that name as it was). Not for a device or a pipe. */
    char *tmp = NULL;
    FILE *fo = NULL;
    if (!rc) {
        struct stat osb;
        if (outp && (stat(outp, &osb) != 0 || S_ISREG(osb.st_mode))) {
            size_t n = strlen(outp) + 32;
            tmp = donto_xmalloc(n);
            snprintf(tmp, n, "%s.tmp.%ld", outp, (long)getpid());
        }
        fo = outp ? fopen(tmp ? tmp : outp, "wb") : stdout;
        if (!fo) {
            fprintf(stderr, "donto-embed embed: %s: %s\n", tmp ? tmp : outp, strerror(errno));
            rc = 1;
        }
    }
    if (!rc && fmt == FMT_NPY && (fseek(fo, 0, SEEK_SET) != 0 || write_npy_header(fo, 0, dim) != 0)) {
        fprintf(stderr, "donto-embed embed: --format npy needs a seekable --out file (use f32 or jsonl for pipes)\n");
        rc = 1;
    }
    int npy_started = !rc && fmt == FMT_NPY;
    chunk c = {0};
    float *vec = NULL;
    size_t items = 0, tokens = 0, truncated = 0;
    double enc_s = 0, t_start = donto_now();
    pg.t0 = pg.last = donto_now();
    while (!rc) {
        char *text, *id;
        size_t tl;
        int r = input_next(&inp, &text, &tl, &id, &err);
        if (r < 0) {
            fprintf(stderr, "donto-embed embed: %s%s%s\n", err.msg, inp.lineno ? "; input read as " : "",
                    inp.lineno ? inp.why : "");
            rc = 1;
            break;
        }
        if (r == 1) chunk_push(&c, text, tl, id);
        if (c.n && (r == 0 || c.n >= (size_t)chunk_n)) {
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
        }
        if (r == 0) break;
    }
    if (pg.on && pg.lines > 0 && pg.shown_items != pg.items) { /* the last figures */
        pthread_mutex_lock(&pg.mu);
        progress_print(&pg, donto_now());
        pthread_mutex_unlock(&pg.mu);
    }
    if (pg.on && pg.tty && pg.lines) fputc('\n', stderr);
    /* The npy header always says the rows the file holds (also on stdout,
     * where a failed run cannot take back what it wrote). */
    if (npy_started && (fflush(fo) != 0 || fseek(fo, 0, SEEK_SET) != 0 || write_npy_header(fo, items, dim) != 0)) {
        if (!rc) fprintf(stderr, "donto-embed embed: cannot finish the npy header: %s\n", strerror(errno));
        rc = 1;
    }
    if (fo && (fo != stdout ? fclose(fo) != 0 : fflush(fo) != 0)) {
        if (!rc) fprintf(stderr, "donto-embed embed: write error: %s\n", strerror(errno));
        rc = 1;
    }
    if (tmp) {
        if (!rc && rename(tmp, outp) != 0) {
            fprintf(stderr, "donto-embed embed: cannot rename %s to %s: %s\n", tmp, outp, strerror(errno));
            rc = 1;
        }
        if (rc) unlink(tmp);
    }
    if (in) fclose(inp.f);
    if (!rc && inp.nbad) {
        char bl[160];
        bad_list(&inp, bl, sizeof bl);
        fprintf(stderr, "donto-embed embed: skipped %zu bad input line%s (line%s %s); the output holds the other %zu "
                        "record%s in input order\n",
                inp.nbad, inp.nbad == 1 ? "" : "s", inp.nbad == 1 ? "" : "s", bl, items, items == 1 ? "" : "s");
    }
    if (!rc && inp.json_like && !quiet)
        DLOG_WARN("%zu line%s of the input (first: line %zu) look%s like JSON but the input is read as %s: "
                  "embedded as text (--format-in jsonl reads them as records)",
                  inp.json_like, inp.json_like == 1 ? "" : "s", inp.json_like_first, inp.json_like == 1 ? "s" : "",
                  inp.why);
    if (!rc && truncated && !quiet)
        DLOG_WARN("%zu of %zu text(s) reached the limit of %d tokens (%s) and were truncated", truncated, items,
                  donto_encoder_max_len(enc), max_len_from);
    if (!rc && stats) {
        /* which kernels ran: the CPU kernel set, the GEMM, OpenBLAS's core */
        donto_encoder_kernels kern;
        donto_encoder_kernels_get(enc, &kern);
        fprintf(stderr,
                "{\"items\":%zu,\"tokens\":%zu,\"seconds\":%.6f,\"items_per_s\":%.3f,"
                "\"tokens_per_s\":%.1f,\"peak_rss_mb\":%.1f,\"precision\":\"%s\",\"precision_from\":\"%s\","
                "\"threads\":%d,"
                "\"wall_seconds\":%.3f,\"device\":\"%s\","
                "\"max_len\":%d,\"max_len_from\":\"%s\",\"max_position_embeddings\":%d,\"lowercase\":%s,"
                "\"truncated\":%zu,\"input_format\":\"%s\",\"skipped\":%zu,\"isa\":\"%s\",\"gemm\":\"%s\","
                "\"blas_core\":\"%s\",\"blas_weaker\":%s,\"blas_steer\":\"%s\"}\n",
                items, tokens, enc_s, enc_s > 0 ? items / enc_s : 0.0, enc_s > 0 ? tokens / enc_s : 0.0,
                donto_peak_rss() / 1048576.0, donto_precision_name(eo.precision), prec_set ? "--precision" : "default",
                eo.threads > 0 ? eo.threads : donto_ncpu(), donto_now() - t_start, donto_device_name(eo.device),
                donto_encoder_max_len(enc), max_len_from, donto_encoder_config(enc)->max_position,
                donto_encoder_lowercase(enc) ? "true" : "false", truncated,
                inp.fmt == IN_JSONL ? "jsonl" : inp.fmt == IN_TEXT ? "text" : "empty", inp.nbad, kern.isa, kern.gemm,
                kern.blas_core, kern.blas_weaker ? "true" : "false", kern.blas_steer);
    }
    chunk_clear(&c);
    free(c.text), free(c.len), free(c.id);
    free(vec);
    free(inp.line);
    free(inp.held);
    free(tmp);
    donto_encoder_close(enc);
    pthread_mutex_destroy(&pg.mu);
    return rc;
}
