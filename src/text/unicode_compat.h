/*
 * donto-accel (private): Unicode-version compatibility with the reference.
 *
 * Hugging Face `tokenizers` classifies characters with Unicode tables that
 * are several versions older than utf8proc's. donto_ucompat_table (generated
 * from the installed `tokenizers` by tests/ref/gen_unicode_compat.py) lists
 * the few hundred code points where the two disagree, with the reference's
 * view; everything else comes from utf8proc.
 */
#ifndef DONTO_TEXT_UNICODE_COMPAT_H
#define DONTO_TEXT_UNICODE_COMPAT_H

#include <stddef.h>
#include <stdint.h>

/* How the tokenizer treats a character (the categories it cares about). */
enum {
    DONTO_UK_OTHER = 0,   /* part of a word */
    DONTO_UK_CONTROL = 1, /* Cc/Cf/Co: removed by cleaning */
    DONTO_UK_PUNCT = 2,   /* P* or ASCII punctuation: a word of its own */
    DONTO_UK_MARK = 3,    /* Mn: removed when stripping accents */
    DONTO_UK_SPACE = 4    /* White_Space: separates words (never in the table) */
};

typedef struct donto_ucompat {
    uint32_t first, last; /* inclusive code point range */
    uint8_t kind;         /* DONTO_UK_* as the reference sees it */
    uint8_t ccc;          /* canonical combining class as the reference sees it */
    uint8_t nodecomp;     /* 1: the reference has no NFD decomposition for it */
} donto_ucompat;

extern const donto_ucompat donto_ucompat_table[]; /* sorted, disjoint */
extern const size_t donto_ucompat_count;

/* The table entry covering c, or NULL. */
static inline const donto_ucompat *donto_ucompat_find(int32_t c) {
    size_t lo = 0, hi = donto_ucompat_count;
    uint32_t u = (uint32_t)c;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const donto_ucompat *e = &donto_ucompat_table[mid];
        if (u < e->first) hi = mid;
        else if (u > e->last) lo = mid + 1;
        else return e;
    }
    return NULL;
}

#endif
