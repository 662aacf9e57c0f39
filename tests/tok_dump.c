/*
 * tok_dump: run the donto tokenizer over a file of texts.
 *
 *   tok_dump [--vocab PATH] [--max-len N] [--lines] [--bench] [FILE...]
 *
 * Input (FILE..., or stdin when none): JSONL, one {"id": .., "text": ".."}
 * object per line, or with --lines one raw text per line (bytes as they are,
 * so invalid UTF-8 can be fed; only the "\n" is removed).
 * Output: one JSON array of token ids per input text, in input order.
 * With --bench nothing is printed per text: all texts are encoded repeatedly
 * on one thread for at least two seconds and the speed goes to stdout.
 *
 * Used by tests/ref/tokenizer_parity.py to compare against Hugging Face.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/tokenizer.h"

typedef struct text {
    char *s;
    size_t len;
} text;

typedef struct texts {
    text *v;
    size_t n, cap;
    size_t bytes;
} texts;

static void texts_add(texts *t, char *s, size_t len) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->v = donto_xrealloc(t->v, t->cap * sizeof *t->v);
    }
    t->v[t->n].s = s;
    t->v[t->n].len = len;
    t->n++;
    t->bytes += len;
}

/* Read every text of one input. Returns 0, or -1 after printing why. */
static int read_input(FILE *f, const char *name, int lines_mode, texts *out) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    long lineno = 0;
    while ((r = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)r;
        if (len && line[len - 1] == '\n') len--;
        if (lines_mode) {
            char *s = donto_xmalloc(len + 1);
            memcpy(s, line, len);
            s[len] = 0;
            texts_add(out, s, len);
            continue;
        }
        if (len == 0) continue; /* blank JSONL lines carry nothing */
        json_error_t jerr;
        /* JSON_ALLOW_NUL: "\u0000" is a legitimate test input. */
        json_t *obj = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
        json_t *txt = obj ? json_object_get(obj, "text") : NULL;
        if (!txt || !json_is_string(txt)) {
            fprintf(stderr, "%s:%ld: %s\n", name, lineno,
                    obj ? "no string field \"text\"" : jerr.text);
            json_decref(obj);
            free(line);
            return -1;
        }
        size_t n = json_string_length(txt);
        char *s = donto_xmalloc(n + 1);
        memcpy(s, json_string_value(txt), n);
        s[n] = 0;
        texts_add(out, s, n);
        json_decref(obj);
    }
    free(line);
    if (ferror(f)) {
        fprintf(stderr, "%s: read error\n", name);
        return -1;
    }
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: tok_dump [--vocab PATH] [--max-len N] [--lines] [--bench] [FILE...]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *vocab = "models/all-MiniLM-L6-v2/vocab.txt";
    int max_len = 512, lines_mode = 0, bench = 0;
    const char *files[256];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = argv[++i];
        else if (!strcmp(argv[i], "--max-len") && i + 1 < argc) max_len = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lines")) lines_mode = 1;
        else if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (argv[i][0] == '-' && argv[i][1]) return usage();
        else if (nfiles < 256) files[nfiles++] = argv[i];
        else return usage();
    }
    if (max_len < 2) {
        fprintf(stderr, "tok_dump: --max-len must be >= 2\n");
        return 2;
    }

    donto_err err;
    donto_tokenizer *tok;
    if (donto_tokenizer_open(vocab, NULL, &tok, &err) != 0) {
        fprintf(stderr, "tok_dump: %s\n", err.msg);
        return 1;
    }

    texts all = {0};
    int rc = 0;
    if (nfiles == 0) {
        rc = read_input(stdin, "<stdin>", lines_mode, &all);
    } else {
        for (int i = 0; i < nfiles && rc == 0; i++) {
            FILE *f = fopen(files[i], "rb");
            if (!f) {
                perror(files[i]);
                rc = -1;
                break;
            }
            rc = read_input(f, files[i], lines_mode, &all);
            fclose(f);
        }
    }

    int32_t *ids = donto_xmalloc((size_t)max_len * sizeof *ids);
    if (rc == 0 && bench) {
        /* Warm up once, then repeat the whole set until >= 1 s has passed. */
        long long pieces = 0;
        for (size_t i = 0; i < all.n; i++)
            pieces += donto_tokenizer_encode(tok, all.v[i].s, all.v[i].len, ids, max_len) - 2;
        /* The best round is reported next to the mean: on a shared machine
         * the best is the figure closest to what one idle core does. */
        int rounds = 0;
        double t0 = donto_now(), best = 1e30, dt;
        do {
            double r0 = donto_now();
            for (size_t i = 0; i < all.n; i++)
                donto_tokenizer_encode(tok, all.v[i].s, all.v[i].len, ids, max_len);
            double r = donto_now() - r0;
            if (r < best) best = r;
            rounds++;
            dt = donto_now() - t0;
        } while (dt < 2.0 || rounds < 5);
        double mean = dt / rounds;
        printf("texts %zu, bytes %zu, word pieces %lld (max_len %d), rounds %d\n", all.n, all.bytes,
               pieces, max_len, rounds);
        printf("one thread: best %.2f M tokens/s (%.1f MB/s, %.0f texts/s), mean %.2f M tokens/s\n",
               pieces / best / 1e6, all.bytes / best / 1e6, all.n / best, pieces / mean / 1e6);
    } else if (rc == 0) {
        /* Output is buffered by stdio; one line per text. */
        for (size_t i = 0; i < all.n; i++) {
            int n = donto_tokenizer_encode(tok, all.v[i].s, all.v[i].len, ids, max_len);
            if (n < 2) {
                fprintf(stderr, "tok_dump: encode failed on text %zu\n", i);
                rc = -1;
                break;
            }
            putchar('[');
            for (int k = 0; k < n; k++) printf(k ? ",%d" : "%d", (int)ids[k]);
            fputs("]\n", stdout);
        }
        if (fflush(stdout) != 0) rc = -1;
    }

    free(ids);
    for (size_t i = 0; i < all.n; i++) free(all.v[i].s);
    free(all.v);
    donto_tokenizer_close(tok);
    return rc == 0 ? 0 : 1;
}
