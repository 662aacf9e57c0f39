/* The deterministic driver shared by the CTest runs of the libFuzzer
 * harnesses (test_fuzz_protocol.c: tests/fuzz/fuzz_protocol.c over
 * tests/fuzz/corpus; test_fuzz_client.c: tests/fuzz/fuzz_client.c over
 * tests/fuzz/corpus_client): every seed file, then seeded mutations of them
 * (byte flips, inserts, deletes, JSON-ish tokens, splices, truncations, a
 * changed first byte, which picks the parser). Include it after the harness
 * (it calls LLVMFuzzerTestOneInput). DONTO_FUZZ_ITERS overrides the number
 * of mutations (default 20000). */
#ifndef DONTO_FUZZ_DRIVER_H
#define DONTO_FUZZ_DRIVER_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEEDS 256
#define MAX_LEN 65536

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    uint64_t x = rng_state;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return rng_state = x;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

typedef struct {
    uint8_t *d;
    size_t n;
} buf;

static const char *const k_tokens[] = {
    "\"", "\\", "{", "}", "[", "]", ",", ":", "null", "true", "false", "NaN", "Infinity", "-Infinity",
    "1e39", "1e999", "-0", "0", "-1", "9223372036854775807", "18446744073709551616", "\"item_id\"",
    "\"vector_b64\"", "\"vector\"", "\"lease_id\"", "\"model\"", "\"target\"", "\"claim\"", "\"n\"",
    "\"worker_id\"", "\"items\"", "\"message\"", "\"kind\"", "\\u0000", "\\ud800", "\xc3\xa9", "\xff",
    "=", "==", "AAAA", "AACAPw", "\x01", "\"BAAI/bge-base-en-v1.5\"", "\"batch\"", "\"text\"",
    "\"upserted\"", "\"rejected\"", "\"reason\"", "\"released\"", "\"error\"",
};

static void mutate(buf *b, const buf *seeds, size_t nseeds) {
    int rounds = 1 + (int)rnd_below(6);
    for (int r = 0; r < rounds; r++) {
        size_t pos = rnd_below(b->n + 1);
        switch (rnd_below(7)) {
        case 0: /* flip a bit */
            if (b->n > 1) b->d[1 + rnd_below(b->n - 1)] ^= (uint8_t)(1u << rnd_below(8));
            break;
        case 1: /* random byte */
            if (b->n > 1) b->d[1 + rnd_below(b->n - 1)] = (uint8_t)rnd();
            break;
        case 2: { /* delete a span */
            if (b->n <= 1) break;
            size_t at = 1 + rnd_below(b->n - 1), k = 1 + rnd_below(16);
            if (at + k > b->n) k = b->n - at;
            memmove(b->d + at, b->d + at + k, b->n - at - k);
            b->n -= k;
            break;
        }
        case 3: { /* insert a token */
            const char *t = k_tokens[rnd_below(sizeof k_tokens / sizeof k_tokens[0])];
            size_t k = strlen(t);
            if (pos == 0) pos = 1;
            if (pos > b->n) pos = b->n;
            if (b->n + k > MAX_LEN) break;
            memmove(b->d + pos + k, b->d + pos, b->n - pos);
            memcpy(b->d + pos, t, k);
            b->n += k;
            break;
        }
        case 4: /* truncate */
            if (b->n > 1) b->n = 1 + rnd_below(b->n);
            break;
        case 5: { /* splice in a span of another seed */
            const buf *o = &seeds[rnd_below(nseeds)];
            if (o->n <= 1) break;
            size_t from = 1 + rnd_below(o->n - 1), k = 1 + rnd_below(o->n - from);
            if (pos == 0) pos = 1;
            if (pos > b->n) pos = b->n;
            if (b->n + k > MAX_LEN) break;
            memmove(b->d + pos + k, b->d + pos, b->n - pos);
            memcpy(b->d + pos, o->d + from, k);
            b->n += k;
            break;
        }
        default: /* another parser for the same body */
            if (b->n) b->d[0] = (uint8_t)rnd();
            break;
        }
    }
}

/* Run LLVMFuzzerTestOneInput over tests/fuzz/<corpus>, then over seeded
 * mutations of it; 0 when nothing aborted (a broken invariant aborts). */
static int fuzz_drive(const char *name, const char *corpus) {
    const char *src = getenv("DONTO_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/%s", src ? src : ".", corpus);
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "%s: cannot open %s (set DONTO_SOURCE_DIR)\n", name, dir);
        return 1;
    }
    static buf seeds[MAX_SEEDS];
    size_t nseeds = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && nseeds < MAX_SEEDS) {
        if (de->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        uint8_t *d = malloc(MAX_LEN);
        size_t n = fread(d, 1, MAX_LEN, f);
        fclose(f);
        seeds[nseeds].d = d;
        seeds[nseeds].n = n;
        nseeds++;
    }
    closedir(dp);
    /* readdir order is the file system's: sort so the run is the same everywhere. */
    for (size_t i = 1; i < nseeds; i++)
        for (size_t j = i; j > 0 && (seeds[j - 1].n > seeds[j].n ||
                                     (seeds[j - 1].n == seeds[j].n &&
                                      memcmp(seeds[j - 1].d, seeds[j].d, seeds[j].n) > 0));
             j--) {
            buf t = seeds[j];
            seeds[j] = seeds[j - 1];
            seeds[j - 1] = t;
        }
    if (nseeds < 8) {
        fprintf(stderr, "%s: only %zu seeds in %s\n", name, nseeds, dir);
        return 1;
    }
    for (size_t i = 0; i < nseeds; i++) LLVMFuzzerTestOneInput(seeds[i].d, seeds[i].n);
    long iters = 20000;
    const char *it = getenv("DONTO_FUZZ_ITERS");
    if (it && atol(it) > 0) iters = atol(it);
    buf b = {malloc(MAX_LEN), 0};
    for (long i = 0; i < iters; i++) {
        const buf *s = &seeds[rnd_below(nseeds)];
        memcpy(b.d, s->d, s->n);
        b.n = s->n;
        mutate(&b, seeds, nseeds);
        LLVMFuzzerTestOneInput(b.d, b.n);
    }
    free(b.d);
    for (size_t i = 0; i < nseeds; i++) free(seeds[i].d);
    fprintf(stderr, "%s: %zu seeds, %ld mutations, no invariant broken\n", name, nseeds, iters);
    return 0;
}

#endif
