/* donto-accel wire module, private: what the server side (wire.c) and the
 * client side (client.c) share. A JSON text writer that appends straight
 * into a growing buffer (jw), escaping strings exactly as jansson's
 * json_dumps does, and the base64 encoder of float32 vectors. Static inline:
 * both files get their own copy, nothing leaves the module. */
#ifndef DONTO_WIRE_INT_H
#define DONTO_WIRE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Standard base64 (with '=' padding) of n little-endian float32 values,
 * written to dst, which holds at least DONTO_WIRE_B64_LEN(n) + 1 bytes;
 * NUL-terminated. Returns the length written (without the NUL). */
#define DONTO_WIRE_B64_LEN(n) (((n) * 4 + 2) / 3 * 4)
size_t donto_wire_f32_b64_into(char *dst, const float *v, size_t n);

/* A JSON text being written. A failed allocation sets failed; every later
 * call is then a no-op, so a builder checks once at the end. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} jw;

static inline void jw_grow(jw *w, size_t more) {
    if (w->failed || w->len + more <= w->cap) return;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + more) {
        if (cap > SIZE_MAX / 2) {
            w->failed = 1;
            return;
        }
        cap *= 2;
    }
    char *p = realloc(w->p, cap);
    if (!p) {
        w->failed = 1;
        return;
    }
    w->p = p;
    w->cap = cap;
}

static inline void jw_put(jw *w, const char *s, size_t n) {
    jw_grow(w, n);
    if (w->failed) return;
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

static inline void jw_lit(jw *w, const char *s) { jw_put(w, s, strlen(s)); }

/* The UTF-8 jansson accepts in json_string: utf8proc (already linked for
 * the tokenizer) rejects the same overlong forms, UTF-16 surrogates and
 * code points above U+10FFFF. */
static inline int utf8_valid(const char *s) {
    const utf8proc_uint8_t *u = (const utf8proc_uint8_t *)s;
    utf8proc_int32_t cp;
    while (*u) {
        utf8proc_ssize_t k = utf8proc_iterate(u, -1, &cp);
        if (k <= 0) return 0;
        u += k;
    }
    return 1;
}

/* A quoted JSON string, escaped as jansson escapes: \" \\ \b \f \n \r \t,
 * other bytes below 0x20 as \u00XX, everything else (UTF-8 included) as is. */
static inline void jw_str(jw *w, const char *s) {
    if (!s) s = "";
    int ok = utf8_valid(s);
    jw_put(w, "\"", 1);
    const char *run = s;
    for (const char *c = s;; c++) {
        unsigned char u = (unsigned char)*c;
        if (u >= 0x20 && u != '"' && u != '\\' && (ok || u < 0x80)) continue;
        jw_put(w, run, (size_t)(c - run));
        run = c + 1;
        if (!u) break;
        char esc[8];
        switch (u) {
        case '"': jw_put(w, "\\\"", 2); break;
        case '\\': jw_put(w, "\\\\", 2); break;
        case '\b': jw_put(w, "\\b", 2); break;
        case '\f': jw_put(w, "\\f", 2); break;
        case '\n': jw_put(w, "\\n", 2); break;
        case '\r': jw_put(w, "\\r", 2); break;
        case '\t': jw_put(w, "\\t", 2); break;
        default:
            if (u >= 0x80) {
                jw_put(w, "?", 1); /* invalid UTF-8: store_string's rule */
            } else {
                snprintf(esc, sizeof esc, "\\u%04X", u);
                jw_put(w, esc, 6);
            }
        }
    }
    jw_put(w, "\"", 1);
}

#endif
