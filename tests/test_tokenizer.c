/*
 * Tokenizer unit tests: a small vocabulary written to a temp file (every
 * rule of the pipeline in isolation), the real all-MiniLM-L6-v2 vocabulary
 * (ids known from Hugging Face), invalid UTF-8, defensive inputs, errors,
 * concurrency. The id-for-id comparison with Hugging Face on large string
 * sets is tests/ref/tokenizer_parity.py.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "check.h"
#include "donto/tokenizer.h"
#include "unicode_compat.h"

#define MAXIDS 4096

/* The small vocabulary: id = line number. */
static const char *const SMALL[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",               /* 0-4 */
    "hello", "world", "##s", "un", "##aff",                     /* 5-9 */
    "##able", ",", "!", "a", "##a",                             /* 10-14 */
    "cafe", "中", "文", "中文", "i\xcc\x87",                    /* 15-19: "i̇" */
    "q\xf0\x9d\x85\xa5\xf0\x9d\x85\xad",                        /* 20: q U+1D165 U+1D16D */
    "\xe2\x80\x94", "[", "]", "sep", "Hello",                   /* 21-25: em dash */
    "/", "dup", "dup", "##",                                    /* 26-29: dup twice */
};
#define NSMALL ((int)(sizeof SMALL / sizeof SMALL[0]))

static char tmpdir[] = "/tmp/donto-tok-XXXXXX";

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_small_vocab(const char *path, const char *eol) {
    char buf[4096];
    size_t n = 0;
    for (int i = 0; i < NSMALL; i++) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", SMALL[i], eol);
    write_file(path, buf, n);
}

/* Encode and compare with an expected id list (terminated by -1). */
static int expect(const donto_tokenizer *tok, const char *text, size_t len, int max_len,
                  const int32_t *want, const char *what) {
    int32_t ids[MAXIDS];
    int n = donto_tokenizer_encode(tok, text, len, ids, max_len);
    int nw = 0;
    while (want[nw] >= 0) nw++;
    int ok = n == nw;
    for (int i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    if (!ok) {
        fprintf(stderr, "  %s: got", what);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, " (n=%d), want", n);
        for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
        fputc('\n', stderr);
    }
    return ok;
}

#define EXPECT(tok, text, max_len, ...)                                                          \
    do {                                                                                     \
        static const int32_t want_[] = {__VA_ARGS__, -1};                                    \
        CHECK(expect(tok, text, sizeof(text) - 1, max_len, want_, #text), "encode %s", #text); \
    } while (0)

static void test_small_vocab(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/vocab.txt", tmpdir);
    write_small_vocab(path, "\n");
    donto_err err = {0};
    donto_tokenizer *t = NULL;
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) == 0, "open: %s", err.msg);
    if (!t) return;

    CHECK_EQ_INT(donto_tokenizer_vocab_size(t), NSMALL);
    CHECK_EQ_INT(donto_tokenizer_cls_id(t), 2);
    CHECK_EQ_INT(donto_tokenizer_sep_id(t), 3);
    CHECK_EQ_INT(donto_tokenizer_unk_id(t), 1);
    CHECK_EQ_INT(donto_tokenizer_pad_id(t), 0);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, "hello"), 5);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, "##able"), 10);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, "nope"), -1);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, ""), -1);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, "dup"), 28); /* the later line wins, as in HF */
    CHECK(donto_tokenizer_token(t, 27) && !strcmp(donto_tokenizer_token(t, 27), "dup"), "token 27");
    CHECK(donto_tokenizer_token(t, 5) && !strcmp(donto_tokenizer_token(t, 5), "hello"), "token 5");
    CHECK(donto_tokenizer_token(t, NSMALL) == NULL, "token out of range");
    CHECK(donto_tokenizer_token(t, -1) == NULL, "token -1");

    /* Basic split, lowercase, punctuation. */
    EXPECT(t, "Hello, world!", 64, 2, 5, 11, 6, 12, 3);
    EXPECT(t, "", 64, 2, 3);
    EXPECT(t, "   \t\n  ", 64, 2, 3);
    /* WordPiece: greedy longest match; a failing position makes one [UNK]. */
    EXPECT(t, "unaffable", 64, 2, 8, 9, 10, 3);
    EXPECT(t, "worlds", 64, 2, 6, 7, 3);
    EXPECT(t, "unaffablex hello", 64, 2, 1, 5, 3);
    EXPECT(t, "xyz", 64, 2, 1, 3);
    /* "##" is punctuation twice, never a continuation prefix of the text. */
    EXPECT(t, "##", 64, 2, 1, 1, 3);
    /* Accents: NFD then drop Mn, precomposed or not. */
    EXPECT(t, "Caf\xc3\xa9", 64, 2, 15, 3);
    EXPECT(t, "CAFE\xcc\x81", 64, 2, 15, 3);
    EXPECT(t, "\xcc\x81" "cafe", 64, 2, 15, 3);
    /* Cleaning: controls, NUL, U+FFFD, format characters vanish inside a
     * word; every kind of whitespace separates. */
    EXPECT(t, "hel\x00lo wor\x07ld", 64, 2, 5, 6, 3);
    EXPECT(t, "hel\xe2\x80\x8blo \xef\xbb\xbfworld hel\xc2\xadlo he\xef\xbf\xbdllo", 64, 2, 5, 6, 5, 5, 3);
    EXPECT(t, "hello\xc2\xa0world\xe3\x80\x80hello\xe2\x80\xa8world\thello\rworld", 64, 2, 5, 6, 5, 6, 5,
           6, 3);
    /* U+000B, U+000C, U+0085 are control before they are whitespace. */
    EXPECT(t, "hel\x0blo wor\x0cld hel\xc2\x85lo", 64, 2, 5, 6, 5, 3);
    /* Unicode punctuation splits; an unknown one is [UNK]. */
    EXPECT(t, "hello\xe2\x80\x94world", 64, 2, 5, 21, 6, 3);
    EXPECT(t, "hello\xc2\xbfworld", 64, 2, 5, 1, 6, 3);
    /* CJK ideographs are words of their own. */
    EXPECT(t, "\xe4\xb8\xad\xe6\x96\x87", 64, 2, 16, 17, 3);
    EXPECT(t, "hello\xe4\xb8\xadworld", 64, 2, 5, 16, 6, 3);
    /* Special tokens: matched in the raw text, case-sensitively. */
    EXPECT(t, "hello [SEP] world[CLS]!", 64, 2, 5, 3, 6, 2, 12, 3);
    EXPECT(t, "[sep]", 64, 2, 22, 24, 23, 3);
    EXPECT(t, "[[MASK]]", 64, 2, 22, 4, 23, 3);
    EXPECT(t, "[SE\x00P]", 64, 2, 22, 24, 23, 3); /* NUL breaks the match, then vanishes */
    EXPECT(t, "[SEP", 64, 2, 22, 24, 3);
    /* Canonical ordering: classes 226 and 216 are swapped into order; a mark
     * in between (class 230) is dropped without breaking the run, U+034F
     * (a mark of class 0) is dropped but does break it. */
    EXPECT(t, "Q\xf0\x9d\x85\xad\xf0\x9d\x85\xa5", 64, 2, 20, 3);
    EXPECT(t, "q\xf0\x9d\x85\xa5\xf0\x9d\x85\xad", 64, 2, 20, 3);
    EXPECT(t, "q\xf0\x9d\x85\xad\xcc\x81\xf0\x9d\x85\xa5", 64, 2, 20, 3);
    EXPECT(t, "q\xf0\x9d\x85\xad\xcd\x8f\xf0\x9d\x85\xa5", 64, 2, 1, 3);

    /* Word length limit: 100 characters (after normalization) is fine. */
    {
        char buf[512];
        int32_t ids[MAXIDS];
        memset(buf, 'a', 100);
        int n = donto_tokenizer_encode(t, buf, 100, ids, MAXIDS);
        CHECK_EQ_INT(n, 102);
        CHECK(n == 102 && ids[1] == 13 && ids[2] == 14 && ids[100] == 14, "100 x a");
        memset(buf, 'a', 101);
        n = donto_tokenizer_encode(t, buf, 101, ids, MAXIDS);
        CHECK(n == 3 && ids[1] == 1, "101 x a -> [UNK] (n=%d)", n);
        /* 100 x "a" + U+0301: 200 code points in, 100 characters out. */
        for (int i = 0; i < 100; i++) memcpy(buf + 3 * i, "a\xcc\x81", 3);
        n = donto_tokenizer_encode(t, buf, 300, ids, MAXIDS);
        CHECK_EQ_INT(n, 102);
        /* A long run of combining characters in one word. */
        size_t len = 0;
        buf[len++] = 'q';
        for (int i = 0; i < 120; i++, len += 4) memcpy(buf + len, "\xf0\x9d\x85\xa5", 4);
        n = donto_tokenizer_encode(t, buf, len, ids, MAXIDS);
        CHECK(n == 3 && ids[1] == 1, "combining run -> [UNK] (n=%d)", n);
    }

    /* Truncation: at most max_len ids, [SEP] always last. */
    EXPECT(t, "hello world hello world", 4, 2, 5, 6, 3);
    EXPECT(t, "hello world", 2, 2, 3);
    EXPECT(t, "hello world", 3, 2, 5, 3);
    EXPECT(t, "unaffable", 3, 2, 8, 3);
    /* Truncated inside a word that fails later: the word is one [UNK]. */
    EXPECT(t, "unaffablex", 3, 2, 1, 3);
    {
        int32_t ids[4];
        CHECK_EQ_INT(donto_tokenizer_encode(t, "hello", 5, ids, 1), -1);
        CHECK_EQ_INT(donto_tokenizer_encode(t, "hello", 5, ids, 0), -1);
        CHECK_EQ_INT(donto_tokenizer_encode(t, NULL, 0, ids, 4), 2);
        CHECK_EQ_INT(donto_tokenizer_encode(t, NULL, 3, ids, 4), -1);
        CHECK_EQ_INT(donto_tokenizer_encode(t, "hello", 5, NULL, 4), -1);
        CHECK_EQ_INT(donto_tokenizer_encode(NULL, "hello", 5, ids, 4), -1);
    }
    /* Not NUL-terminated: only len bytes are read. */
    EXPECT(t, "hello", 64, 2, 5, 3);
    {
        static const int32_t want[] = {2, 5, 3, -1};
        CHECK(expect(t, "helloworld", 5, 64, want, "prefix"), "len respected");
    }
    donto_tokenizer_close(t);
}

/* Invalid UTF-8: each byte that does not start a well-formed sequence is
 * U+FFFD and vanishes; it never swallows the bytes after it. */
static void test_invalid_utf8(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/vocab.txt", tmpdir);
    write_small_vocab(path, "\n");
    donto_err err;
    donto_tokenizer *t = NULL;
    if (donto_tokenizer_open(path, NULL, &t, &err) != 0) {
        CHECK(0, "open: %s", err.msg);
        return;
    }
    EXPECT(t, "hel\xfflo", 64, 2, 5, 3);
    EXPECT(t, "hel\x80\xbflo", 64, 2, 5, 3);        /* stray continuation bytes */
    EXPECT(t, "hello\xe2\x82", 64, 2, 5, 3);        /* truncated at the end */
    EXPECT(t, "\xe2hello", 64, 2, 5, 3);            /* lead byte, then ASCII */
    EXPECT(t, "\xf0\x9f\x98world", 64, 2, 6, 3);    /* 3 of 4 bytes */
    EXPECT(t, "\xc0\xafhello", 64, 2, 5, 3);        /* overlong "/": not punctuation */
    EXPECT(t, "\xe0\x80\xafhello", 64, 2, 5, 3);    /* overlong, 3 bytes */
    EXPECT(t, "hel\xed\xa0\x80lo", 64, 2, 5, 3);    /* UTF-16 surrogate */
    EXPECT(t, "hel\xf4\x90\x80\x80lo", 64, 2, 5, 3); /* above U+10FFFF */
    EXPECT(t, "hel\xf5\xf8\xfelo", 64, 2, 5, 3);
    EXPECT(t, "\xc3" "Caf\xc3\xa9\xc3", 64, 2, 15, 3);
    EXPECT(t, "[SE\xffP]", 64, 2, 22, 24, 23, 3);    /* U+FFFD sits in the raw text */
    EXPECT(t, "\xff\xfe\xfd", 64, 2, 3);
    donto_tokenizer_close(t);
}

static void test_options(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/vocab.txt", tmpdir);
    write_small_vocab(path, "\n");
    donto_err err;
    donto_tokenizer_opts o;
    donto_tokenizer *t = NULL;

    /* Cased, no accent stripping: "Hello" is its own entry; İ stays. */
    donto_tokenizer_default_opts(&o);
    o.lowercase = 0;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) == 0, "open cased: %s", err.msg);
    if (t) {
        EXPECT(t, "Hello hello", 64, 2, 25, 5, 3);
        EXPECT(t, "Caf\xc3\xa9", 64, 2, 1, 3);
        donto_tokenizer_close(t);
        t = NULL;
    }
    /* Lowercase without stripping: the full lowercase of U+0130 is "i̇". */
    donto_tokenizer_default_opts(&o);
    o.strip_accents = 0;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) == 0, "open no-strip: %s", err.msg);
    if (t) {
        EXPECT(t, "\xc4\xb0", 64, 2, 19, 3);
        EXPECT(t, "Caf\xc3\xa9", 64, 2, 1, 3);
        donto_tokenizer_close(t);
        t = NULL;
    }
    /* With stripping (the default) U+0130 decomposes first: I + dot -> i. */
    /* No CJK spacing: the two ideographs stay one word. */
    donto_tokenizer_default_opts(&o);
    o.tokenize_cjk = 0;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) == 0, "open no-cjk: %s", err.msg);
    if (t) {
        EXPECT(t, "\xe4\xb8\xad\xe6\x96\x87", 64, 2, 18, 3);
        donto_tokenizer_close(t);
        t = NULL;
    }
    /* A shorter word limit. */
    donto_tokenizer_default_opts(&o);
    o.max_input_chars_per_word = 5;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) == 0, "open limit 5: %s", err.msg);
    if (t) {
        EXPECT(t, "hello worlds", 64, 2, 5, 1, 3);
        donto_tokenizer_close(t);
        t = NULL;
    }
    /* A limit above the on-stack scratch (heap path). */
    donto_tokenizer_default_opts(&o);
    o.max_input_chars_per_word = 5000;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) == 0, "open limit 5000: %s", err.msg);
    if (t) {
        char *buf = malloc(4000);
        int32_t *ids = malloc(5000 * sizeof *ids);
        memset(buf, 'a', 4000);
        CHECK_EQ_INT(donto_tokenizer_encode(t, buf, 4000, ids, 5000), 4002);
        free(buf);
        free(ids);
        donto_tokenizer_close(t);
        t = NULL;
    }
    /* Invalid options. */
    donto_tokenizer_default_opts(&o);
    o.max_input_chars_per_word = 0;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) != 0 && t == NULL, "limit 0 accepted");
    CHECK_STR_CONTAINS(err.msg, "max_input_chars_per_word");
    donto_tokenizer_default_opts(&o);
    o.strip_accents = 7;
    CHECK(donto_tokenizer_open(path, &o, &t, &err) != 0, "strip_accents 7 accepted");
    CHECK_STR_CONTAINS(err.msg, "strip_accents");
}

static void test_vocab_errors(void) {
    char path[256];
    donto_err err;
    donto_tokenizer *t = (donto_tokenizer *)&err; /* must be reset to NULL */

    snprintf(path, sizeof path, "%s/does-not-exist.txt", tmpdir);
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) != 0 && t == NULL, "missing file accepted");
    CHECK_STR_CONTAINS(err.msg, "does-not-exist.txt");

    snprintf(path, sizeof path, "%s/empty.txt", tmpdir);
    write_file(path, "", 0);
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) != 0, "empty file accepted");
    CHECK_STR_CONTAINS(err.msg, "empty");

    snprintf(path, sizeof path, "%s/nocls.txt", tmpdir);
    write_file(path, "[PAD]\n[UNK]\n[SEP]\nhello\n", 24);
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) != 0, "vocab without [CLS] accepted");
    CHECK_STR_CONTAINS(err.msg, "[CLS]");

    snprintf(path, sizeof path, "%s/nothing.txt", tmpdir);
    write_file(path, "a\nb\n", 4);
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) != 0, "vocab without specials accepted");
    CHECK_STR_CONTAINS(err.msg, "[CLS] [SEP] [UNK] [PAD]");

    CHECK(donto_tokenizer_open(NULL, NULL, &t, &err) != 0, "NULL path accepted");
    donto_tokenizer_close(NULL);

    /* CRLF line ends and no final newline: same ids as the LF file. */
    snprintf(path, sizeof path, "%s/crlf.txt", tmpdir);
    write_small_vocab(path, "\r\n");
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) == 0, "crlf: %s", err.msg);
    if (t) {
        CHECK_EQ_INT(donto_tokenizer_vocab_size(t), NSMALL);
        EXPECT(t, "Hello, world!", 64, 2, 5, 11, 6, 12, 3);
        donto_tokenizer_close(t);
    }
    snprintf(path, sizeof path, "%s/nofinal.txt", tmpdir);
    write_file(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello", 29);
    CHECK(donto_tokenizer_open(path, NULL, &t, &err) == 0, "no final newline: %s", err.msg);
    if (t) {
        CHECK_EQ_INT(donto_tokenizer_vocab_size(t), 5);
        EXPECT(t, "hello", 64, 2, 4, 3);
        donto_tokenizer_close(t);
    }
}

/* run_add in tokenizer.c relies on this: every character that survives
 * accent stripping with a non-zero combining class is an ordinary word
 * character (no whitespace, no punctuation) and its own lowercase. */
static void test_combining_assumption(void) {
    int seen = 0;
    for (int32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        const utf8proc_property_t *p = utf8proc_get_property(c);
        int cat = p->category, ccc = p->combining_class;
        const donto_ucompat *o = donto_ucompat_find(c);
        if (o) { /* the reference's view: see unicode_compat.h */
            ccc = o->ccc;
            if (o->kind == DONTO_UK_MARK) cat = UTF8PROC_CATEGORY_MN;
            else if (o->kind == DONTO_UK_CONTROL) cat = UTF8PROC_CATEGORY_CF;
            else if (o->kind == DONTO_UK_PUNCT) cat = UTF8PROC_CATEGORY_PO;
            else if (cat == UTF8PROC_CATEGORY_MN) cat = UTF8PROC_CATEGORY_MC;
        }
        /* Marks are deleted, controls never reach NFD. */
        if (ccc == 0 || cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_CC ||
            cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO)
            continue;
        seen++;
        CHECK(cat != UTF8PROC_CATEGORY_ZS && cat != UTF8PROC_CATEGORY_ZL && cat != UTF8PROC_CATEGORY_ZP &&
                  !(cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) && c != 0x130,
              "U+%04X has class %d and category %d", (unsigned)c, ccc, cat);
        CHECK(utf8proc_tolower(c) == c, "U+%04X lowercases", (unsigned)c);
    }
    CHECK(seen > 0 && seen < 200, "%d combining non-marks", seen);
    /* The compatibility table is sorted and disjoint (binary search). */
    for (size_t i = 0; i < donto_ucompat_count; i++) {
        CHECK(donto_ucompat_table[i].first <= donto_ucompat_table[i].last, "entry %zu", i);
        if (i) CHECK(donto_ucompat_table[i - 1].last < donto_ucompat_table[i].first, "order %zu", i);
    }
}

/* ------------------------------------------------------ real vocabulary */

typedef struct job {
    const donto_tokenizer *tok;
    const char *text;
    size_t len;
    const int32_t *want;
    int nwant;
    int failures;
} job;

static void *worker(void *arg) {
    job *j = arg;
    int32_t ids[512];
    for (int r = 0; r < 200; r++) {
        int n = donto_tokenizer_encode(j->tok, j->text, j->len, ids, 512);
        if (n != j->nwant || memcmp(ids, j->want, (size_t)n * sizeof *ids) != 0) j->failures++;
    }
    return NULL;
}

static void test_real_vocab(void) {
    const char *src = getenv("DONTO_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/all-MiniLM-L6-v2/vocab.txt", src ? src : ".");
    if (access(path, R_OK) != 0) {
        CHECK(0, "real vocabulary %s is missing: run scripts/get-model (make test does)", path);
        return;
    }
    donto_err err;
    donto_tokenizer *t = NULL;
    if (donto_tokenizer_open(path, NULL, &t, &err) != 0) {
        CHECK(0, "open %s: %s", path, err.msg);
        return;
    }
    CHECK_EQ_INT(donto_tokenizer_vocab_size(t), 30522);
    CHECK_EQ_INT(donto_tokenizer_cls_id(t), 101);
    CHECK_EQ_INT(donto_tokenizer_sep_id(t), 102);
    CHECK_EQ_INT(donto_tokenizer_unk_id(t), 100);
    CHECK_EQ_INT(donto_tokenizer_pad_id(t), 0);
    CHECK_EQ_INT(donto_tokenizer_token_id(t, "[MASK]"), 103);

    /* Ids as produced by Hugging Face tokenizers 0.19.1. */
    EXPECT(t, "Hello, world!", 512, 101, 7592, 1010, 2088, 999, 102);
    EXPECT(t, "unaffable tokenization", 512, 101, 14477, 20961, 3468, 19204, 3989, 102);
    EXPECT(t, "Caf\xc3\xa9 na\xc3\xafve \xc3\x85ngstr\xc3\xb6m", 512, 101, 7668, 15743, 17076, 15687, 102);
    EXPECT(t, "\xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", 512, 101, 1746, 1861, 1864,
           1876, 1950, 102);
    EXPECT(t, "a [SEP] b [MASK]", 512, 101, 1037, 102, 1038, 103, 102);
    EXPECT(t, "\xf0\x9f\x98\x80 \xc2\xbfQu\xc3\xa9?", 512, 101, 100, 1094, 10861, 1029, 102);
    EXPECT(t, "\xc4\xb0stanbul", 512, 101, 9960, 102);
    EXPECT(t, "HTTPS://Example.com/a?b=c", 512, 101, 16770, 1024, 1013, 1013, 2742, 1012, 4012, 1013,
           1037, 1029, 1038, 1027, 1039, 102);

    /* Enormous inputs: truncation stops early; a single 4 MB "word" is one
     * [UNK]; a 4 MB text with a big max_len is handled whole. */
    {
        size_t big = 4u << 20;
        char *buf = malloc(big);
        int32_t *ids = malloc((big / 2 + 2) * sizeof *ids);
        if (!buf || !ids) {
            CHECK(0, "out of memory");
        } else {
            for (size_t i = 0; i < big; i += 4) memcpy(buf + i, "the ", 4);
            int n = donto_tokenizer_encode(t, buf, big, ids, 512);
            CHECK(n == 512 && ids[0] == 101 && ids[1] == 1996 && ids[510] == 1996 && ids[511] == 102,
                  "big text truncated (n=%d)", n);
            n = donto_tokenizer_encode(t, buf, big, ids, (int)(big / 4 + 2));
            CHECK_EQ_INT(n, (int)(big / 4 + 2));
            memset(buf, 'x', big);
            n = donto_tokenizer_encode(t, buf, big, ids, 512);
            CHECK(n == 3 && ids[1] == 100, "huge word (n=%d)", n);
        }
        free(buf);
        free(ids);
    }

    /* One tokenizer, several threads at once: same ids as alone. */
    {
        static const char text[] =
            "The quick brown fox jumps over the lazy dog. Caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 [SEP] "
            "unaffable \xf0\x9f\x98\x80 tokenization!";
        int32_t want[512];
        int nwant = donto_tokenizer_encode(t, text, sizeof text - 1, want, 512);
        enum { NT = 4 };
        pthread_t th[NT];
        job jobs[NT];
        for (int i = 0; i < NT; i++) {
            jobs[i] = (job){t, text, sizeof text - 1, want, nwant, 0};
            CHECK(pthread_create(&th[i], NULL, worker, &jobs[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            CHECK_EQ_INT(jobs[i].failures, 0);
        }
    }
    donto_tokenizer_close(t);
}

static void cleanup(void) {
    static const char *const names[] = {"vocab.txt", "empty.txt", "nocls.txt", "nothing.txt",
                                        "crlf.txt", "nofinal.txt"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_small_vocab();
    test_invalid_utf8();
    test_options();
    test_vocab_errors();
    test_combining_assumption();
    test_real_vocab();
    cleanup();
    return check_report("test_tokenizer");
}
