/* A libcurl write callback that collects a response body into a growing,
 * NUL-terminated heap buffer: the HTTP tests' one copy of it.
 *   buf b = {NULL, 0};
 *   curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
 *   curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);   ...   free(b.p);
 * Out of memory: returns 0, which makes libcurl fail the transfer. */
#ifndef DONTO_TEST_CURLBUF_H
#define DONTO_TEST_CURLBUF_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n;
} buf;

static inline size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    buf *b = u;
    size_t n = sz * nm;
    char *q = realloc(b->p, b->n + n + 1);
    if (!q) return 0;
    memcpy(q + b->n, d, n);
    b->p = q;
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

#endif
