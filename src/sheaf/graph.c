/*
 * Graphs for sheaf learning: the geom-gcn benchmark files (text + numpy .npz, read with
 * zlib's raw inflate; feature rows dense or index lists; an .npz with edges and masks on its
 * own), donto-sheaf export files (docs/sheaf-export.md), and synthetic random graphs. Every
 * loader ends in donto_graph_from_arrays, which symmetrises the edges, drops self-loops and
 * duplicates, as the NSD reference does. A graph without split masks is an error unless the
 * caller asks for random ones (settle_splits; docs/sheaf.md "Datasets").
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "sheaf_int.h"

/* Graph-sized buffers are checked (policy atop sheaf_int.h): NULL and an error naming the size. */
static void *galloc(size_t n, size_t size, const char *what, donto_err *err) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) donto_seterr(err, "out of memory: %.0f bytes (%.2f GiB) for %s", (double)n * size,
                         (double)n * size / 1073741824.0, what);
    return p;
}
static int grealloc(void **p, size_t n, size_t size, const char *what, donto_err *err) {
    void *q = n > SIZE_MAX / size ? NULL : realloc(*p, n * size);
    if (!q) return donto_seterr(err, "out of memory: %.0f bytes (%.2f GiB) for %s", (double)n * size,
                                (double)n * size / 1073741824.0, what);
    *p = q;
    return 0;
}

/* ------------------------------------------------------------------ */
/* npz = zip of .npy files                                              */

static uint32_t rd16(const unsigned char *p) { return p[0] | (p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24); }
static uint64_t rd64(const unsigned char *p) { return rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static int npy_parse(const unsigned char *b, size_t len, donto_npy *out, const char *what, donto_err *err) {
    if (len < 10 || memcmp(b, "\x93NUMPY", 6)) return donto_seterr(err, "%s: not an .npy array", what);
    size_t hl, ho;
    if (b[6] == 1) hl = rd16(b + 8), ho = 10;
    else if (len >= 12) hl = rd32(b + 8), ho = 12;
    else return donto_seterr(err, "%s: truncated .npy header", what);
    if (ho + hl > len) return donto_seterr(err, "%s: truncated .npy header", what);
    char *h = donto_xmalloc(hl + 1);
    memcpy(h, b + ho, hl);
    h[hl] = 0;
    memset(out, 0, sizeof *out);
    char *p = strstr(h, "'descr'");
    if (!p || !(p = strchr(p + 7, '\'')) || sscanf(p + 1, "%15[^']", out->descr) != 1) {
        free(h);
        return donto_seterr(err, "%s: .npy header has no descr", what);
    }
    p = strstr(h, "'fortran_order'");
    if (p && (p = strchr(p + 15, ':'))) {
        while (*++p == ' ') {
        }
        out->fortran = !strncmp(p, "True", 4);
    }
    p = strstr(h, "'shape'");
    if (!p || !(p = strchr(p, '('))) {
        free(h);
        return donto_seterr(err, "%s: .npy header has no shape", what);
    }
    p++;
    while (*p && *p != ')' && out->ndim < 4) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *q = p;
        out->shape[out->ndim] = strtol(p, &p, 10);
        if (p == q || out->shape[out->ndim] < 0) {
            free(h);
            return donto_seterr(err, "%s: bad shape in the .npy header", what);
        }
        if (*p == 'L') p++; /* Python 2's long literals: (3L,) */
        out->ndim++;
    }
    free(h);
    size_t esz = (size_t)atoi(out->descr + 2), cnt = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] && cnt > SIZE_MAX / 16 / (size_t)out->shape[i])
            return donto_seterr(err, "%s: .npy shape too large", what);
        cnt *= (size_t)out->shape[i];
    }
    out->nbytes = cnt * esz;
    if (esz < 1 || esz > 16) return donto_seterr(err, "%s: unsupported dtype %s", what, out->descr);
    if (ho + hl + out->nbytes > len) return donto_seterr(err, "%s: .npy data shorter than its shape", what);
    out->data = galloc(out->nbytes, 1, what, err);
    if (!out->data) return -1;
    memcpy(out->data, b + ho + hl, out->nbytes);
    return 0;
}

/* An .npz read into memory once; arrays are taken from it by name. */
typedef struct {
    const char *path;
    char *buf;
    size_t len;
} npz_file;

static int npz_open(npz_file *z, const char *path, donto_err *err) {
    z->path = path, z->buf = NULL, z->len = 0;
    return donto_read_file(path, &z->buf, &z->len, err);
}
static void npz_close(npz_file *z) {
    free(z->buf);
    z->buf = NULL;
}

/* Array `name` of z: 0 (out filled), 1 when z has no such array (err untouched), -1 when the
 * file is damaged. names (cap > 0): the arrays z holds, "a, b, c" (name NULL: only that). */
static int npz_get(const npz_file *z, const char *name, donto_npy *out, char *names, size_t cap, donto_err *err) {
    const char *path = z->path;
    const unsigned char *b = (const unsigned char *)z->buf;
    size_t len = z->len;
    long eocd = -1;
    for (long i = (long)len - 22; i >= 0 && i >= (long)len - 65557; i--)
        if (rd32(b + i) == 0x06054b50) {
            eocd = i;
            break;
        }
    char want[256];
    snprintf(want, sizeof want, "%s.npy", name ? name : "");
    if (names && cap) names[0] = 0;
    if (eocd < 0) return donto_seterr(err, "%s: not a zip file", path);
    size_t nent = rd16(b + eocd + 10), cd = rd32(b + eocd + 16);
    for (size_t e = 0, p = cd; e < nent; e++) {
        if (p + 46 > len || rd32(b + p) != 0x02014b50) return donto_seterr(err, "%s: bad zip central directory", path);
        int method = rd16(b + p + 10);
        uint64_t csz = rd32(b + p + 20), usz = rd32(b + p + 24), loff = rd32(b + p + 42);
        size_t nl = rd16(b + p + 28), xl = rd16(b + p + 30), cl = rd16(b + p + 32);
        if (p + 46 + nl + xl > len) return donto_seterr(err, "%s: bad zip central directory", path);
        const unsigned char *x = b + p + 46 + nl, *xe = x + xl;
        while (x + 4 <= xe) { /* zip64 extended information */
            size_t id = rd16(x), sz = rd16(x + 2);
            if (id == 1) {
                const unsigned char *q = x + 4;
                if (usz == 0xffffffffu) usz = rd64(q), q += 8;
                if (csz == 0xffffffffu) csz = rd64(q), q += 8;
                if (loff == 0xffffffffu) loff = rd64(q), q += 8;
            }
            x += 4 + sz;
        }
        if (names && cap && nl > 4 && !memcmp(b + p + 46 + nl - 4, ".npy", 4)) {
            size_t l = strlen(names);
            snprintf(names + l, cap - l, "%s%.*s", l ? ", " : "", (int)(nl - 4), (const char *)b + p + 46);
        }
        if (name && nl == strlen(want) && !memcmp(b + p + 46, want, nl)) {
            if (loff + 30 > len || rd32(b + loff) != 0x04034b50)
                return donto_seterr(err, "%s: bad zip local header for %s", path, want);
            size_t data = loff + 30 + rd16(b + loff + 26) + rd16(b + loff + 28);
            if (data + csz > len) return donto_seterr(err, "%s: %s truncated", path, want);
            unsigned char *raw = galloc(usz, 1, want, err);
            if (!raw) return -1;
            if (method == 0) {
                if (usz > csz) return free(raw), donto_seterr(err, "%s: %s truncated", path, want);
                memcpy(raw, b + data, usz);
            } else if (method == 8) {
                z_stream s;
                memset(&s, 0, sizeof s);
                if (inflateInit2(&s, -15) != Z_OK) return free(raw), donto_seterr(err, "zlib init failed");
                s.next_in = (unsigned char *)b + data, s.avail_in = (uInt)csz;
                s.next_out = raw, s.avail_out = (uInt)usz;
                int zr = inflate(&s, Z_FINISH);
                inflateEnd(&s);
                if (zr != Z_STREAM_END || s.total_out != usz)
                    return free(raw), donto_seterr(err, "%s: %s: corrupt deflate data", path, want);
            } else {
                free(raw);
                return donto_seterr(err, "%s: %s: unsupported zip compression %d", path, want, method);
            }
            char what[512];
            snprintf(what, sizeof what, "%s:%s", path, want);
            int rc = npy_parse(raw, usz, out, what, err);
            free(raw);
            return rc;
        }
        p += 46 + nl + xl + cl;
    }
    return 1;
}

/* The first of names[] that z holds: 0 (*which its index), 1 when it holds none, -1 on error. */
static int npz_first(const npz_file *z, const char *const *names, donto_npy *out, int *which, donto_err *err) {
    for (int i = 0; names[i]; i++) {
        int rc = npz_get(z, names[i], out, NULL, 0, err);
        if (rc <= 0) {
            *which = i;
            return rc;
        }
    }
    return 1;
}

int donto_npz_read(const char *path, const char *name, donto_npy *out, donto_err *err) {
    npz_file z;
    if (npz_open(&z, path, err)) return -1;
    int rc = npz_get(&z, name, out, NULL, 0, err);
    npz_close(&z);
    if (rc == 1) return donto_seterr(err, "%s: no array '%s'", path, name);
    return rc;
}

/* Element type of an array: kind 'f' (float), 'i' (signed), 'u' (unsigned, bool) and size;
 * -1 for what the loaders do not read (strings, objects, big-endian, float16). */
static int npy_type(const donto_npy *a, char *kind, int *size) {
    const char *d = a->descr;
    if (d[0] != '<' && d[0] != '|' && d[0] != '=') return -1;
    char k = d[1];
    int s = atoi(d + 2);
    if (k == 'b' && s == 1) k = 'u';
    if (!((k == 'f' && (s == 4 || s == 8)) || ((k == 'i' || k == 'u') && (s == 1 || s == 2 || s == 4 || s == 8))))
        return -1;
    *kind = k, *size = s;
    return 0;
}

static double npy_at(const donto_npy *a, char kind, int size, size_t i) {
    const unsigned char *p = (const unsigned char *)a->data + i * (size_t)size;
    union { float f4; double f8; int8_t i1; int16_t i2; int32_t i4; int64_t i8; uint8_t u1; uint16_t u2; uint32_t u4; uint64_t u8; } v;
    memcpy(&v, p, size);
    if (kind == 'f') return size == 4 ? v.f4 : v.f8;
    if (kind == 'i') return size == 1 ? v.i1 : size == 2 ? v.i2 : size == 4 ? v.i4 : (double)v.i8;
    return size == 1 ? v.u1 : size == 2 ? v.u2 : size == 4 ? v.u4 : (double)v.u8;
}

/* Flat index of element (i, j) of a 2-D array, in either memory order. */
static size_t npy_idx2(const donto_npy *a, long i, long j) {
    return a->fortran ? (size_t)j * (size_t)a->shape[0] + (size_t)i : (size_t)i * (size_t)a->shape[1] + (size_t)j;
}

/* ------------------------------------------------------------------ */
/* building, fingerprint, freeing                                        */

static int cmp_pair(const void *a, const void *b) {
    const int *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

void donto_graph_fingerprint(donto_graph *g) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char h[32];
    unsigned int hl = 0;
    int hdr[3] = {g->n, g->f, g->ne};
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, hdr, sizeof hdr);
    EVP_DigestUpdate(c, g->x, sizeof(float) * (size_t)g->n * g->f);
    EVP_DigestUpdate(c, g->y, sizeof(int) * (size_t)g->n);
    EVP_DigestUpdate(c, g->eu, sizeof(int) * (size_t)g->ne);
    EVP_DigestUpdate(c, g->ev, sizeof(int) * (size_t)g->ne);
    if (g->task_kind == DONTO_TASK_EDGE) { /* node-task digests stay what they were */
        int th[4] = {g->task_kind, g->npairs, g->directed, g->nclass};
        EVP_DigestUpdate(c, th, sizeof th);
        EVP_DigestUpdate(c, g->pu, sizeof(int) * (size_t)g->npairs);
        EVP_DigestUpdate(c, g->pv, sizeof(int) * (size_t)g->npairs);
        EVP_DigestUpdate(c, g->pc, sizeof(int) * (size_t)g->npairs);
    }
    EVP_DigestFinal_ex(c, h, &hl);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++) snprintf(g->fingerprint + 2 * i, 3, "%02x", h[i]);
}

void donto_graph_split_fingerprint(const donto_graph *g, int split, char out[65]) {
    out[0] = 0;
    int edge = g->task_kind == DONTO_TASK_EDGE;
    const uint8_t *tr = edge ? g->ptrain : g->train, *va = edge ? g->pval : g->val, *te = edge ? g->ptest : g->test;
    int n = edge ? g->npairs : g->n; /* an edge task's masks are over its pairs */
    if (split < 0 || split >= g->nsplits || !tr || !va || !te) return;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char h[32];
    unsigned int hl = 0;
    size_t off = (size_t)split * n;
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, &n, sizeof n);
    if (edge) EVP_DigestUpdate(c, "pairs", 5);
    EVP_DigestUpdate(c, tr + off, (size_t)n);
    EVP_DigestUpdate(c, va + off, (size_t)n);
    EVP_DigestUpdate(c, te + off, (size_t)n);
    EVP_DigestFinal_ex(c, h, &hl);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

int donto_graph_from_arrays(donto_graph *g, int n, int f, const float *x, const int *y, int nclass, int nedges,
                            const int *src, const int *dst, donto_err *err) {
    memset(g, 0, sizeof *g);
    if (n < 1 || f < 1) return donto_seterr(err, "graph needs at least one node and one feature");
    int *pairs = galloc(2 * (size_t)nedges, sizeof(int), "the edge list", err);
    if (!pairs) return -1;
    int m = 0;
    for (int i = 0; i < nedges; i++) {
        int a = src[i], b = dst[i];
        if (a < 0 || a >= n || b < 0 || b >= n) {
            free(pairs);
            return donto_seterr(err, "edge %d (%d, %d) names a node outside 0..%d", i, a, b, n - 1);
        }
        if (a == b) continue;
        pairs[2 * m] = a < b ? a : b, pairs[2 * m + 1] = a < b ? b : a;
        m++;
    }
    qsort(pairs, m, 2 * sizeof(int), cmp_pair);
    g->eu = galloc(m, sizeof(int), "the edge list", err), g->ev = galloc(m, sizeof(int), "the edge list", err);
    if (!g->eu || !g->ev) return free(pairs), donto_graph_free(g), -1;
    for (int i = 0; i < m; i++) {
        if (i && pairs[2 * i] == pairs[2 * i - 2] && pairs[2 * i + 1] == pairs[2 * i - 1]) continue;
        g->eu[g->ne] = pairs[2 * i], g->ev[g->ne] = pairs[2 * i + 1], g->ne++;
    }
    free(pairs);
    g->n = n, g->f = f;
    g->x = galloc((size_t)n * f, sizeof(float), "node features", err);
    g->y = galloc(n, sizeof(int), "node labels", err);
    if (!g->x || !g->y) return donto_graph_free(g), -1;
    memcpy(g->x, x, sizeof(float) * (size_t)n * f);
    int mx = -1;
    for (int i = 0; i < n; i++) {
        g->y[i] = y ? y[i] : -1;
        if (g->y[i] > mx) mx = g->y[i];
    }
    g->nclass = nclass > mx ? nclass : mx + 1;
    donto_graph_fingerprint(g);
    return 0;
}

void donto_graph_free(donto_graph *g) {
    if (!g) return;
    free(g->x), free(g->y), free(g->eu), free(g->ev), free(g->train), free(g->val), free(g->test);
    free(g->pu), free(g->pv), free(g->pc), free(g->ptrain), free(g->pval), free(g->ptest);
    if (g->ids)
        for (int i = 0; i < g->n; i++) free(g->ids[i]);
    free(g->ids);
    for (int k = 0; k < g->nclass_names; k++) free(g->class_names[k]);
    free(g->class_names);
    memset(g, 0, sizeof *g);
}

/* Split s of a seeded 60/20/20 draw: shuffle ids[cnt] (Fisher-Yates on
 * sheaf_mix64) and mark the first 60% in train, the next 20% in val, the
 * rest in test (each a mask row indexed by id). Node splits and an edge
 * task's pair splits share it. */
static void split_602020(int *ids, int cnt, uint64_t seed, int s, uint8_t *train, uint8_t *val, uint8_t *test) {
    for (int i = cnt - 1; i > 0; i--) {
        int j = (int)(sheaf_mix64(seed * 7919 + (uint64_t)s * 104729 + i) % (uint64_t)(i + 1));
        int t = ids[i];
        ids[i] = ids[j], ids[j] = t;
    }
    int ntr = (int)(0.6 * cnt), nva = (int)(0.2 * cnt);
    for (int i = 0; i < cnt; i++) (i < ntr ? train : i < ntr + nva ? val : test)[ids[i]] = 1;
}

void donto_graph_random_splits(donto_graph *g, int nsplits, uint64_t seed) {
    free(g->train), free(g->val), free(g->test);
    g->nsplits = nsplits;
    g->train = sheaf_xalloc((size_t)nsplits * g->n, 1, "split masks");
    g->val = sheaf_xalloc((size_t)nsplits * g->n, 1, "split masks");
    g->test = sheaf_xalloc((size_t)nsplits * g->n, 1, "split masks");
    int *ids = sheaf_xalloc(g->n, sizeof(int), "split shuffle");
    for (int s = 0; s < nsplits; s++) {
        int cnt = 0;
        for (int v = 0; v < g->n; v++)
            if (g->y[v] >= 0) ids[cnt++] = v;
        const size_t row = (size_t)s * g->n;
        split_602020(ids, cnt, seed, s, g->train + row, g->val + row, g->test + row);
    }
    free(ids);
}

int donto_graph_random(donto_graph *g, int n, int f, int nclass, long m, uint64_t seed, donto_err *err) {
    if (n < 2 || f < 1 || nclass < 2 || m < 0) return donto_seterr(err, "random graph: bad sizes");
    float *x = galloc((size_t)n * f, sizeof(float), "node features", err);
    int *y = galloc(n, sizeof(int), "node labels", err);
    int *src = galloc(m, sizeof(int), "the edge list", err), *dst = galloc(m, sizeof(int), "the edge list", err);
    if (!x || !y || !src || !dst) return free(x), free(y), free(src), free(dst), -1;
    for (int v = 0; v < n; v++) {
        y[v] = (int)(sheaf_mix64(seed ^ (0x1000000ULL + v)) % (uint64_t)nclass);
        for (int j = 0; j < f; j++) x[(size_t)v * f + j] = sheaf_urand(seed + 1, (uint64_t)v * f + j);
    }
    for (long i = 0; i < m; i++) {
        src[i] = (int)(sheaf_mix64(seed * 31 + 2 * (uint64_t)i) % (uint64_t)n);
        dst[i] = (int)(sheaf_mix64(seed * 31 + 2 * (uint64_t)i + 1) % (uint64_t)n);
    }
    int rc = donto_graph_from_arrays(g, n, f, x, y, nclass, (int)m, src, dst, err);
    free(x), free(y), free(src), free(dst);
    if (!rc) {
        snprintf(g->name, sizeof g->name, "random-%d-%ld-%llu", n, m, (unsigned long long)seed);
        donto_graph_random_splits(g, 1, seed);
        snprintf(g->features_from, sizeof g->features_from, "synthetic");
        snprintf(g->splits_from, sizeof g->splits_from, "random 60/20/20 of the labelled nodes, 1 split, seed %llu",
                 (unsigned long long)seed);
        g->splits_random = 1;
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* edge tasks                                                            */

int donto_graph_metric(const donto_graph *g) {
    if (g->metric > DONTO_METRIC_DEFAULT && g->metric <= DONTO_METRIC_ROC_AUC) return g->metric;
    return g->nclass == 2 ? DONTO_METRIC_ROC_AUC : DONTO_METRIC_MACRO_F1;
}

const char *donto_metric_name(int metric) {
    switch (metric) {
    case DONTO_METRIC_ACCURACY: return "accuracy";
    case DONTO_METRIC_MACRO_F1: return "macro_f1";
    case DONTO_METRIC_ROC_AUC: return "roc_auc";
    }
    return "default";
}

/* Random 60/20/20 splits of an edge task's pairs (a task without "splits"). */
static int random_pair_splits(donto_graph *g, int nsplits, uint64_t seed, donto_err *err) {
    size_t sz = (size_t)nsplits * (g->npairs ? g->npairs : 1);
    free(g->ptrain), free(g->pval), free(g->ptest);
    g->ptrain = galloc(sz, 1, "pair split masks", err), g->pval = galloc(sz, 1, "pair split masks", err);
    g->ptest = galloc(sz, 1, "pair split masks", err);
    int *ids = galloc(g->npairs, sizeof(int), "pair split shuffle", err);
    if (!g->ptrain || !g->pval || !g->ptest || !ids) return free(ids), -1;
    g->nsplits = nsplits;
    for (int s = 0; s < nsplits; s++) {
        for (int i = 0; i < g->npairs; i++) ids[i] = i;
        const size_t row = (size_t)s * g->npairs;
        split_602020(ids, g->npairs, seed, s, g->ptrain + row, g->pval + row, g->ptest + row);
    }
    free(ids);
    return 0;
}

int donto_graph_random_pairs(donto_graph *g, int npairs, int nclass, int directed, uint64_t seed, donto_err *err) {
    if (npairs < 1 || nclass < 2 || g->n < 2) return donto_seterr(err, "random pairs: bad sizes");
    free(g->train), free(g->val), free(g->test);
    g->train = g->val = g->test = NULL;
    free(g->pu), free(g->pv), free(g->pc);
    g->pu = galloc(npairs, sizeof(int), "pairs", err), g->pv = galloc(npairs, sizeof(int), "pairs", err);
    g->pc = galloc(npairs, sizeof(int), "pairs", err);
    if (!g->pu || !g->pv || !g->pc) return -1;
    for (int i = 0; i < g->n; i++) g->y[i] = -1;
    for (int p = 0; p < npairs; p++) {
        int u = (int)(sheaf_mix64(seed * 131 + 3 * (uint64_t)p) % (uint64_t)g->n);
        int v = (int)(sheaf_mix64(seed * 131 + 3 * (uint64_t)p + 1) % (uint64_t)(g->n - 1));
        g->pu[p] = u, g->pv[p] = v >= u ? v + 1 : v;
        /* imbalanced on purpose (class c drawn with weight c + 1), so that class weights matter */
        uint64_t r = sheaf_mix64(seed * 131 + 3 * (uint64_t)p + 2) % (uint64_t)(nclass * (nclass + 1) / 2);
        int c = 0;
        while (r >= (uint64_t)(c + 1)) r -= (uint64_t)(c + 1), c++;
        g->pc[p] = c;
    }
    g->task_kind = DONTO_TASK_EDGE, g->npairs = npairs, g->nclass = nclass, g->directed = directed != 0;
    g->metric = DONTO_METRIC_DEFAULT;
    if (random_pair_splits(g, 1, seed, err)) return -1;
    donto_graph_fingerprint(g);
    return 0;
}

/* ------------------------------------------------------------------ */
/* geom-gcn                                                             */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int read_edges_txt(const char *path, int **src, int **dst, int *m, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    int cap = 1024, cnt = 0;
    *src = donto_xmalloc(sizeof(int) * cap), *dst = donto_xmalloc(sizeof(int) * cap);
    char *save = NULL, *line = strtok_r(buf, "\n", &save);
    int lineno = 0;
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (lineno == 1 && !isdigit((unsigned char)line[0])) continue; /* header */
        char *e1, *e2;
        long a = strtol(line, &e1, 10), b = strtol(e1, &e2, 10);
        if (e1 == line || e2 == e1) {
            free(buf), free(*src), free(*dst);
            *src = *dst = NULL;
            return donto_seterr(err, "%s:%d: expected two node ids", path, lineno);
        }
        if (cnt == cap) {
            cap *= 2;
            if (grealloc((void **)src, cap, sizeof(int), "the edge list", err) ||
                grealloc((void **)dst, cap, sizeof(int), "the edge list", err)) {
                free(buf), free(*src), free(*dst);
                *src = *dst = NULL;
                return -1;
            }
        }
        (*src)[cnt] = (int)a, (*dst)[cnt] = (int)b, cnt++;
    }
    free(buf);
    *m = cnt;
    return 0;
}

/* The feature dimension of datasets whose feature file lists the indices of each node's nonzero
 * features: geom-gcn's film (PyG calls it Actor), which geom-gcn's loader (utils_data.py) reads
 * as np.zeros(932) with the listed entries set to 1. 0 for any other name. */
static int known_index_dim(const char *name) {
    return !strcmp(name, "film") || !strcmp(name, "actor") ? 932 : 0;
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

typedef struct {
    char *feat; /* the features field, NUL-terminated */
    int id, label, lineno, count;
} feat_row;

/* out1_node_feature_label.txt: a header, then id<TAB>features<TAB>label per node, features
 * either dense values "f1,f2,...,fF" or the indices of the nonzero ones "j1,j2,..." (film).
 * The layout is o->features, the dataset name's (known_index_dim), or told from the rows:
 *   differing numbers of values, all whole numbers >= 0          -> indices
 *   the same number on every line, and some value not a whole number >= 0, or a line repeating
 *   a value (an index list names each index once), or only 0s and 1s  -> dense
 *   the same number on every line, whole numbers, some above 1, none repeated in a line: either
 *   could be meant -> an error asking for --features.
 * Index rows become 0/1 rows. desc says what was read. */
static int read_features_txt(const char *path, const char *name, const donto_graph_opts *o, float **x, int **y,
                             int *n, int *f, char *desc, size_t dcap, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    feat_row *rows = galloc(lines, sizeof *rows, "feature rows", err);
    if (!rows) return free(buf), -1;
    long *tmp = NULL;
    size_t tcap = 0;
    int cnt = 0, rc = 0, lineno = 0, first = 1;
    /* what the rows look like */
    int minlen = -1, maxlen = -1, minline = 0, maxline = 0, nonint = 0, nonint_line = 0, dup = 0;
    int all01 = 1, maxint_line = 0;
    long maxint = -1;
    char nonint_tok[64] = "";
    for (char *p = buf, *end = buf + len; p < end && !rc;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        char *line = p;
        *nl = 0, p = nl + 1, lineno++;
        if (nl > line && nl[-1] == '\r') nl[-1] = 0;
        if (!*line) continue;
        if (first) {
            first = 0;
            if (!isdigit((unsigned char)line[0])) continue; /* header */
        }
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL, *ie, *le;
        if (!t2) {
            rc = donto_seterr(err, "%s:%d: expected id<TAB>features<TAB>label", path, lineno);
            break;
        }
        feat_row *r = &rows[cnt];
        long id = strtol(line, &ie, 10), lab = strtol(t2 + 1, &le, 10);
        while (*ie == ' ') ie++;
        while (*le == ' ' || *le == '\r') le++;
        if (ie != t1 || le == t2 + 1 || *le || id < 0 || id > INT_MAX || lab < -1 || lab > INT_MAX) {
            rc = donto_seterr(err, "%s:%d: expected a node id and a class label (whole numbers)", path, lineno);
            break;
        }
        *t2 = 0;
        r->feat = t1 + 1, r->id = (int)id, r->label = (int)lab, r->lineno = lineno, r->count = 0;
        int ints = !nonint;
        for (char *q = r->feat; *q;) { /* an empty field: no values */
            char *te = strchr(q, ',');
            if (!te) te = q + strlen(q);
            char *s0 = q, *s1 = te;
            while (s0 < s1 && (*s0 == ' ' || *s0 == '\r')) s0++;
            while (s1 > s0 && (s1[-1] == ' ' || s1[-1] == '\r')) s1--;
            int isint = s1 > s0 && s1 - s0 <= 18;
            for (char *c = s0; c < s1 && isint; c++) isint = isdigit((unsigned char)*c);
            if (!isint) {
                char num[64];
                snprintf(num, sizeof num, "%.*s", (int)(s1 - s0 < 63 ? s1 - s0 : 63), s0);
                char *ne;
                double dv = strtod(num, &ne);
                if (s1 == s0 || *ne || ne == num || !isfinite(dv)) {
                    rc = donto_seterr(err, "%s:%d: feature %d ('%s') is not a finite number", path, lineno,
                                      r->count + 1, num);
                    break;
                }
                if (!nonint) nonint = 1, nonint_line = lineno, snprintf(nonint_tok, sizeof nonint_tok, "%s", num);
                ints = 0;
            } else if (ints) {
                long v = strtol(s0, NULL, 10);
                if (v > 1) all01 = 0;
                if (v > maxint) maxint = v, maxint_line = lineno;
                if ((size_t)r->count >= tcap) {
                    tcap = tcap ? 2 * tcap : 1024;
                    if (grealloc((void **)&tmp, tcap, sizeof(long), "feature rows", err)) {
                        rc = -1;
                        break;
                    }
                }
                tmp[r->count] = v;
            }
            r->count++;
            if (!*te) break;
            q = te + 1;
            if (!*q) { /* a trailing comma */
                rc = donto_seterr(err, "%s:%d: feature %d is empty", path, lineno, r->count + 1);
                break;
            }
        }
        if (rc) break;
        if (ints && !dup && r->count > 1) {
            qsort(tmp, (size_t)r->count, sizeof(long), cmp_long);
            for (int k = 1; k < r->count && !dup; k++)
                if (tmp[k] == tmp[k - 1]) dup = 1;
        }
        if (minlen < 0 || r->count < minlen) minlen = r->count, minline = lineno;
        if (r->count > maxlen) maxlen = r->count, maxline = lineno;
        cnt++;
    }
    free(tmp);
    if (!rc && cnt == 0) rc = donto_seterr(err, "%s: no nodes", path);
    int mode = rc ? 0 : o->features, dim = o->feature_dim, kd = known_index_dim(name), equal = minlen == maxlen;
    char lens[160];
    snprintf(lens, sizeof lens, "line %d has %d value%s, line %d has %d", minline, minlen, minlen == 1 ? "" : "s",
             maxline, maxlen);
    const char *why = NULL; /* where the index dimension came from */
    if (!rc && mode == DONTO_FEATURES_AUTO && kd) {
        if (equal && (nonint || dup || all01))
            rc = donto_seterr(err,
                              "%s: geom-gcn reads %s's rows as lists of feature indices (of %d), but these look like "
                              "dense values (every line has %d, %s); give --features dense to read them as values, "
                              "or --features indices:%d",
                              path, name, kd, minlen,
                              nonint ? "not all whole numbers" : dup ? "a value repeated within a line" : "all 0 or 1", kd);
        mode = DONTO_FEATURES_INDICES;
    }
    if (!rc && mode == DONTO_FEATURES_AUTO) {
        if (!equal && nonint)
            rc = donto_seterr(err,
                              "%s: %s, and not all are whole numbers (line %d: '%s'): neither dense rows (the same "
                              "count on every line) nor lists of feature indices",
                              path, lens, nonint_line, nonint_tok);
        else if (!equal) mode = DONTO_FEATURES_INDICES, why = "lengths differ, so indices; DIM = the largest + 1";
        else if (nonint || dup || all01) mode = DONTO_FEATURES_DENSE;
        else
            rc = donto_seterr(err,
                              "%s: every line has %d whole number%s, some above 1, none repeated within a line: "
                              "dense feature values, or lists of the indices of nonzero features? Say which with "
                              "--features dense or --features indices[:DIM]",
                              path, minlen, minlen == 1 ? "" : "s");
    }
    if (!rc && mode == DONTO_FEATURES_DENSE) {
        if (!equal)
            rc = donto_seterr(err, "%s: %s: dense rows need the same number of values on every line%s", path, lens,
                              nonint ? "" : " (these are all whole numbers: lists of feature indices? --features indices[:DIM])");
        else if (minlen == 0) rc = donto_seterr(err, "%s: no feature values", path);
        *f = minlen;
    } else if (!rc && mode == DONTO_FEATURES_INDICES) {
        if (o->feature_dim) dim = o->feature_dim, why = "--features indices:DIM";
        else if (kd) dim = kd, why = "geom-gcn's dimension for this dataset";
        else if (!why) why = "--features indices: DIM = the largest + 1";
        if (nonint)
            rc = donto_seterr(err, "%s:%d: '%s' is not a feature index (a whole number >= 0)", path, nonint_line,
                              nonint_tok);
        else if (dim > 0 && maxint >= dim)
            rc = donto_seterr(err, "%s:%d: feature index %ld is outside 0..%d (%s)%s", path, maxint_line, maxint,
                              dim - 1, why, o->feature_dim ? "" : "; give --features indices:DIM with the true dimension");
        else if (maxint < 0) rc = donto_seterr(err, "%s: no feature indices on any line", path);
        if (!dim) dim = (int)maxint + 1;
        *f = dim;
    }
    /* rows are keyed by node id: 0..cnt-1, each once */
    uint8_t *seen = rc ? NULL : galloc(cnt, 1, "node ids", err);
    if (!rc && !seen) rc = -1;
    for (int i = 0; i < cnt && !rc; i++) {
        if (rows[i].id >= cnt) rc = donto_seterr(err, "%s:%d: node id %d outside 0..%d", path, rows[i].lineno, rows[i].id, cnt - 1);
        else if (seen[rows[i].id]++) rc = donto_seterr(err, "%s:%d: node id %d appears twice", path, rows[i].lineno, rows[i].id);
    }
    free(seen);
    *x = NULL, *y = NULL;
    if (!rc) {
        *x = galloc((size_t)cnt * *f, sizeof(float), "node features", err);
        *y = galloc(cnt, sizeof(int), "node labels", err);
        if (!*x || !*y) rc = -1;
    }
    for (int i = 0; i < cnt && !rc; i++) {
        float *xr = *x + (size_t)rows[i].id * *f;
        (*y)[rows[i].id] = rows[i].label;
        char *q = rows[i].feat;
        for (int j = 0; j < rows[i].count; j++) {
            if (mode == DONTO_FEATURES_DENSE) xr[j] = strtof(q, &q);
            else xr[strtol(q, &q, 10)] = 1.0f;
            while (*q == ' ' || *q == '\r') q++;
            if (*q == ',') q++;
        }
    }
    if (!rc && mode == DONTO_FEATURES_DENSE) snprintf(desc, dcap, "dense rows of %d values", *f);
    else if (!rc && equal)
        snprintf(desc, dcap, "indices of nonzero features, %d a row, as 0/1 rows of %d (%s)", minlen, *f, why);
    else if (!rc)
        snprintf(desc, dcap, "indices of nonzero features, %d to %d a row, as 0/1 rows of %d (%s)", minlen, maxlen,
                 *f, why);
    free(rows), free(buf);
    if (rc) {
        free(*x), free(*y);
        *x = NULL, *y = NULL;
        return -1;
    }
    *n = cnt;
    return 0;
}

static void row_normalise(float *x, int n, int f) {
    for (int v = 0; v < n; v++) {
        double s = 0;
        for (int j = 0; j < f; j++) s += x[(size_t)v * f + j];
        if (s != 0)
            for (int j = 0; j < f; j++) x[(size_t)v * f + j] = (float)(x[(size_t)v * f + j] / s);
    }
}

static int npy_to_bool(const donto_npy *a, long n, uint8_t *out) {
    char k;
    int sz;
    if (npy_type(a, &k, &sz) || k == 'f') return -1;
    for (long i = 0; i < n; i++) out[i] = npy_at(a, k, sz, (size_t)i) != 0;
    return 0;
}

static void alloc_masks(donto_graph *g, int ns, donto_err *err, int *rc) {
    g->nsplits = ns;
    g->train = galloc((size_t)ns * g->n, 1, "split masks", err);
    g->val = galloc((size_t)ns * g->n, 1, "split masks", err);
    g->test = galloc((size_t)ns * g->n, 1, "split masks", err);
    *rc = g->train && g->val && g->test ? 0 : -1;
}

/* geom-gcn's fixed splits, ROOT/splits/NAME_split_0.6_0.2_<i>.npz for i = 0, 1, ...; none
 * found leaves g->nsplits 0. */
static int load_geom_splits(donto_graph *g, const char *root, const char *name, donto_err *err) {
    char path[4096];
    int ns = 0, rc;
    while (ns < 100) {
        snprintf(path, sizeof path, "%s/splits/%s_split_0.6_0.2_%d.npz", root, name, ns);
        if (!is_file(path)) break;
        ns++;
    }
    if (ns == 0) return 0;
    alloc_masks(g, ns, err, &rc);
    if (rc) return -1;
    const char *names[3] = {"train_mask", "val_mask", "test_mask"};
    uint8_t *dst[3] = {g->train, g->val, g->test};
    for (int s = 0; s < ns; s++) {
        snprintf(path, sizeof path, "%s/splits/%s_split_0.6_0.2_%d.npz", root, name, s);
        for (int k = 0; k < 3; k++) {
            donto_npy a;
            if (donto_npz_read(path, names[k], &a, err)) return -1;
            int bad = a.ndim != 1 || a.shape[0] != g->n || npy_to_bool(&a, g->n, dst[k] + (size_t)s * g->n);
            free(a.data);
            if (bad) return donto_seterr(err, "%s: %s is not a bool/integer vector of %d nodes", path, names[k], g->n);
        }
    }
    snprintf(g->splits_from, sizeof g->splits_from, "%s/splits/%s_split_0.6_0.2_<i>.npz, %d splits", root, name, ns);
    return 0;
}

/* Array names a dataset's NAME.npz may use: geom-gcn repackagings (chameleon.npz: node_features,
 * node_labels, edges [E,2], train_masks [10,N]) and PyG's (x, y, edge_index [2,E], train_mask). */
static const char *const NPZ_X[] = {"node_features", "x", "features", NULL};
static const char *const NPZ_Y[] = {"node_labels", "y", "labels", NULL};
static const char *const NPZ_E[] = {"edges", "edge_index", NULL};
static const char *const NPZ_MASKS[3][5] = {{"train_masks", "train_mask", NULL},
                                             {"val_masks", "val_mask", "valid_masks", "valid_mask", NULL},
                                             {"test_masks", "test_mask", NULL}};

static void npz_missing(const npz_file *z, const char *what, const char *const *names, donto_err *err) {
    char alts[128] = "", held[256];
    for (int i = 0; names[i]; i++) {
        size_t l = strlen(alts);
        snprintf(alts + l, sizeof alts - l, "%s%s", i ? "|" : "", names[i]);
    }
    if (npz_get(z, NULL, NULL, held, sizeof held, err) < 0) return;
    donto_seterr(err, "%s: no %s array (%s); it holds: %s", z->path, what, alts, held[0] ? held : "nothing");
}

static int npz_features(const npz_file *z, float **x, int **y, int *n, int *f, char *desc, size_t dcap, donto_err *err) {
    donto_npy fx = {0}, ly = {0};
    int wx, wy, rc = npz_first(z, NPZ_X, &fx, &wx, err);
    if (rc) return rc > 0 ? (npz_missing(z, "features", NPZ_X, err), -1) : -1;
    rc = npz_first(z, NPZ_Y, &ly, &wy, err);
    if (rc) return free(fx.data), rc > 0 ? (npz_missing(z, "labels", NPZ_Y, err), -1) : -1;
    char kx, ky;
    int sx, sy;
    if (fx.ndim != 2 || ly.ndim != 1 || ly.shape[0] != fx.shape[0] || fx.shape[0] < 1 || fx.shape[1] < 1) {
        donto_seterr(err, "%s: %s must be [N,F] and %s [N]", z->path, NPZ_X[wx], NPZ_Y[wy]);
        return free(fx.data), free(ly.data), -1;
    }
    if (npy_type(&fx, &kx, &sx) || npy_type(&ly, &ky, &sy)) {
        donto_seterr(err, "%s: %s (%s) or %s (%s): unsupported dtype", z->path, NPZ_X[wx], fx.descr, NPZ_Y[wy], ly.descr);
        return free(fx.data), free(ly.data), -1;
    }
    *n = (int)fx.shape[0], *f = (int)fx.shape[1];
    *x = galloc((size_t)*n * *f, sizeof(float), "node features", err);
    *y = galloc(*n, sizeof(int), "node labels", err);
    rc = *x && *y ? 0 : -1;
    for (long i = 0; i < fx.shape[0] && !rc; i++)
        for (long j = 0; j < fx.shape[1]; j++) (*x)[(size_t)i * *f + j] = (float)npy_at(&fx, kx, sx, npy_idx2(&fx, i, j));
    for (int i = 0; i < *n && !rc; i++) {
        double v = npy_at(&ly, ky, sy, (size_t)i);
        if (v != floor(v) || v < -1 || v > INT_MAX)
            rc = donto_seterr(err, "%s: %s[%d] = %g is not a class index (or -1: unlabelled)", z->path, NPZ_Y[wy], i, v);
        else (*y)[i] = (int)v;
    }
    if (!rc) snprintf(desc, dcap, "%s [%d,%d] of %s", NPZ_X[wx], *n, *f, strrchr(z->path, '/') ? strrchr(z->path, '/') + 1 : z->path);
    free(fx.data), free(ly.data);
    if (rc) free(*x), free(*y), *x = NULL, *y = NULL;
    return rc;
}

/* edges [E,2] or edge_index [2,E] (a 2x2 array is read as its name says); 1 when z has none. */
static int npz_edges(const npz_file *z, int **src, int **dst, int *m, donto_err *err) {
    donto_npy a = {0};
    int w, rc = npz_first(z, NPZ_E, &a, &w, err);
    if (rc) return rc;
    char k;
    int sz;
    if (a.ndim != 2 || (a.shape[0] != 2 && a.shape[1] != 2) || npy_type(&a, &k, &sz) || k == 'f') {
        donto_seterr(err, "%s: %s must be integers of shape [E,2] or [2,E] (is %s, %d-D)", z->path, NPZ_E[w], a.descr, a.ndim);
        return free(a.data), -1;
    }
    int by_col = a.shape[1] == 2 && (a.shape[0] != 2 || !strcmp(NPZ_E[w], "edges")); /* [E,2] */
    long e = by_col ? a.shape[0] : a.shape[1];
    if (e > INT_MAX) return free(a.data), donto_seterr(err, "%s: %ld edges (at most %d)", z->path, e, INT_MAX);
    *m = (int)e;
    *src = galloc(e, sizeof(int), "the edge list", err), *dst = galloc(e, sizeof(int), "the edge list", err);
    rc = *src && *dst ? 0 : -1;
    for (long i = 0; i < e && !rc; i++) {
        double u = npy_at(&a, k, sz, by_col ? npy_idx2(&a, i, 0) : npy_idx2(&a, 0, i));
        double v = npy_at(&a, k, sz, by_col ? npy_idx2(&a, i, 1) : npy_idx2(&a, 1, i));
        (*src)[i] = u < 0 || u > INT_MAX ? -1 : (int)u, (*dst)[i] = v < 0 || v > INT_MAX ? -1 : (int)v;
    }
    free(a.data);
    if (rc) free(*src), free(*dst), *src = *dst = NULL;
    return rc;
}

/* train/val/test masks [S,N], [N,S] or [N]; 1 when z has none of them. */
static int npz_masks(const npz_file *z, donto_graph *g, donto_err *err) {
    donto_npy a[3];
    memset(a, 0, sizeof a);
    int w[3], got = 0, rc = 0, ns = -1;
    for (int k = 0; k < 3 && rc >= 0; k++) {
        int r = npz_first(z, NPZ_MASKS[k], &a[k], &w[k], err);
        if (r < 0) rc = -1;
        got += r == 0;
        if (r == 1) w[k] = -1;
    }
    if (rc < 0 || got == 0) goto out;
    if (got < 3) {
        for (int k = 0; k < 3; k++)
            if (w[k] < 0) npz_missing(z, k == 0 ? "train mask" : k == 1 ? "val mask" : "test mask", NPZ_MASKS[k], err);
        rc = -1;
        goto out;
    }
    int trans[3];
    for (int k = 0; k < 3 && !rc; k++) {
        char t;
        int sz;
        long s = a[k].ndim == 1 && a[k].shape[0] == g->n ? 1
                 : a[k].ndim == 2 && a[k].shape[1] == g->n ? a[k].shape[0]
                 : a[k].ndim == 2 && a[k].shape[0] == g->n ? a[k].shape[1] : -1;
        trans[k] = a[k].ndim == 2 && a[k].shape[1] != g->n; /* [N,S] */
        if (s < 1 || s > 100000 || npy_type(&a[k], &t, &sz) || t == 'f')
            rc = donto_seterr(err, "%s: %s must be bool/integer [S,%d], [%d,S] or [%d]", z->path, NPZ_MASKS[k][w[k]], g->n,
                              g->n, g->n);
        else if (ns >= 0 && s != ns)
            rc = donto_seterr(err, "%s: %s has %ld splits, %s %d", z->path, NPZ_MASKS[k][w[k]], s, NPZ_MASKS[0][w[0]], ns);
        else ns = (int)s;
    }
    if (rc) goto out;
    alloc_masks(g, ns, err, &rc);
    uint8_t *dst[3] = {g->train, g->val, g->test};
    for (int k = 0; k < 3 && !rc; k++) {
        char t;
        int sz;
        npy_type(&a[k], &t, &sz);
        for (int s = 0; s < ns; s++)
            for (int v = 0; v < g->n; v++) {
                size_t i = a[k].ndim == 1 ? (size_t)v : trans[k] ? npy_idx2(&a[k], v, s) : npy_idx2(&a[k], s, v);
                dst[k][(size_t)s * g->n + v] = npy_at(&a[k], t, sz, i) != 0;
            }
    }
    if (!rc)
        snprintf(g->splits_from, sizeof g->splits_from, "%s/%s/%s of %s, %d split%s", NPZ_MASKS[0][w[0]], NPZ_MASKS[1][w[1]],
                 NPZ_MASKS[2][w[2]], z->path, ns, ns == 1 ? "" : "s");
out:
    for (int k = 0; k < 3; k++) free(a[k].data);
    return rc < 0 ? -1 : got == 0 ? 1 : 0;
}

/* A dataset directory ROOT/NAME: features from out1_node_feature_label.txt, else NAME.npz; edges
 * from out1_graph_edges.txt, else NAME.npz; splits from ROOT/splits/NAME_split_0.6_0.2_<i>.npz,
 * else NAME.npz's masks, else none (g->nsplits 0, what was looked for in looked). npz_only: that
 * .npz file alone (--data FILE.npz). */
static int load_geom_gcn(donto_graph *g, const char *root, const char *name, const char *npz_only,
                         const donto_graph_opts *o, char *looked, size_t lcap, donto_err *err) {
    char dir[2048], fpath[4096], epath[4096], zpath[4096];
    if (strlen(root) + strlen(name) + 2 > sizeof dir) return donto_seterr(err, "path too long");
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(fpath, sizeof fpath, "%s/out1_node_feature_label.txt", dir);
    snprintf(epath, sizeof epath, "%s/out1_graph_edges.txt", dir);
    if (npz_only) snprintf(zpath, sizeof zpath, "%s", npz_only);
    else snprintf(zpath, sizeof zpath, "%s/%s.npz", dir, name);
    int has_f = !npz_only && is_file(fpath), has_e = !npz_only && is_file(epath), has_z = is_file(zpath);
    if (!has_f && !has_z)
        return donto_seterr(err,
                            "%s: neither out1_node_feature_label.txt nor %s.npz: a dataset directory holds geom-gcn's "
                            "out1_graph_edges.txt + out1_node_feature_label.txt, or NAME.npz with features, labels, "
                            "edges and masks (donto-sheaf train --help)",
                            dir, name);
    npz_file z = {0};
    if (has_z && npz_open(&z, zpath, err)) return -1;
    float *x = NULL;
    int *y = NULL, n = 0, f = 0, *src = NULL, *dst = NULL, m = 0, rc;
    char fdesc[256] = "", layout[200] = "";
    if (has_f) {
        rc = read_features_txt(fpath, name, o, &x, &y, &n, &f, layout, sizeof layout, err);
        snprintf(fdesc, sizeof fdesc, "out1_node_feature_label.txt: %s", layout);
    } else if (o->features != DONTO_FEATURES_AUTO) {
        rc = donto_seterr(err, "%s: --features is for geom-gcn's out1_node_feature_label.txt, and %s has none (its "
                               "features come from %s)", dir, npz_only ? zpath : dir, zpath);
    } else {
        rc = npz_features(&z, &x, &y, &n, &f, fdesc, sizeof fdesc, err);
    }
    if (!rc && has_e) rc = read_edges_txt(epath, &src, &dst, &m, err);
    else if (!rc && has_z) {
        rc = npz_edges(&z, &src, &dst, &m, err);
        if (rc > 0) {
            char held[256] = "";
            npz_get(&z, NULL, NULL, held, sizeof held, NULL);
            rc = donto_seterr(err, "%s: no edges: no out1_graph_edges.txt, and %s has no edges|edge_index array (it "
                                   "holds: %s)", dir, zpath, held);
        }
    } else if (!rc) rc = donto_seterr(err, "%s: no out1_graph_edges.txt", dir);
    if (!rc) {
        row_normalise(x, n, f);
        rc = donto_graph_from_arrays(g, n, f, x, y, 0, m, src, dst, err);
    }
    free(x), free(y), free(src), free(dst);
    if (!rc) {
        snprintf(g->name, sizeof g->name, "%s", name);
        snprintf(g->features_from, sizeof g->features_from, "%s", fdesc);
        if (!npz_only) rc = load_geom_splits(g, root, name, err);
        if (!rc && g->nsplits == 0 && has_z) rc = npz_masks(&z, g, err) < 0 ? -1 : 0;
        if (!rc && g->nsplits == 0) {
            if (npz_only)
                snprintf(looked, lcap, "%.900s holds no train_masks|train_mask, val_masks|val_mask, test_masks|test_mask",
                         zpath);
            else
                snprintf(looked, lcap, "looked for %.400s/splits/%.400s_split_0.6_0.2_0.npz (geom-gcn's fixed splits)%s", root,
                         name, has_z ? " and for train/val/test masks in its .npz" : "");
        }
        if (rc) donto_graph_free(g);
    }
    if (has_z) npz_close(&z);
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* donto-sheaf export format (JSON)                                      */

/* Node ids -> indices: ids in file order, ord the indices sorted by id (binary search). */
typedef struct { const char **ids; int n; int *ord; } idmap;
/* qsort has no context argument: the ids being sorted, one per thread (donto_graph_load_json may
 * run in several threads at once) */
static _Thread_local const char **cmp_ids;
static int cmp_ord(const void *a, const void *b) { return strcmp(cmp_ids[*(const int *)a], cmp_ids[*(const int *)b]); }
/* Sort; the first duplicate id, or NULL. */
static const char *id_index(idmap *m) {
    for (int i = 0; i < m->n; i++) m->ord[i] = i;
    cmp_ids = m->ids;
    qsort(m->ord, (size_t)m->n, sizeof(int), cmp_ord);
    for (int i = 1; i < m->n; i++)
        if (!strcmp(m->ids[m->ord[i]], m->ids[m->ord[i - 1]])) return m->ids[m->ord[i]];
    return NULL;
}
static int id_find(const idmap *m, const char *id) {
    int lo = 0, hi = m->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(m->ids[m->ord[mid]], id);
        if (!c) return m->ord[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* A class given as an index into classes (or any index without classes) or as a name; -1 if neither. */
static int class_of(json_t *val, json_t *classes, int nclass) {
    if (json_is_integer(val)) {
        json_int_t c = json_integer_value(val);
        return c >= 0 && (!nclass || c < nclass) && c < 1000000 ? (int)c : -1;
    }
    if (json_is_string(val) && classes)
        for (size_t c = 0; c < json_array_size(classes); c++) {
            const char *cn = json_string_value(json_array_get(classes, c));
            if (cn && !strcmp(cn, json_string_value(val))) return (int)c;
        }
    return -1;
}

/* "metric": absent -> DEFAULT; otherwise one of the names, or -1. */
static int metric_of(json_t *v) {
    const char *s = json_string_value(v);
    if (!v) return DONTO_METRIC_DEFAULT;
    if (!s) return -1;
    if (!strcmp(s, "accuracy")) return DONTO_METRIC_ACCURACY;
    if (!strcmp(s, "macro_f1")) return DONTO_METRIC_MACRO_F1;
    if (!strcmp(s, "roc_auc")) return DONTO_METRIC_ROC_AUC;
    return -1;
}

/* The edge task of an export file (version 2) into g, whose nodes are loaded: pairs [src, dst,
 * class] (ids, class index or name), directed, splits as index lists into pairs. Errors name the
 * file, the task and the field (tasks[i].pairs[j][k], tasks[i].splits[s].val[j]). */
static int load_edge_task(donto_graph *g, json_t *task, int ti, const idmap *im, const char *path, donto_err *err) {
    const char *tn = json_string_value(json_object_get(task, "name"));
    char where[160];
    snprintf(where, sizeof where, "%s: tasks[%d] '%s'", path, ti, tn ? tn : "?");
    json_t *classes = json_object_get(task, "classes"), *pairs = json_object_get(task, "pairs");
    json_t *dir = json_object_get(task, "directed");
    if (classes && !json_is_array(classes)) return donto_seterr(err, "%s: \"classes\" must be an array of names", where);
    int nclass = classes ? (int)json_array_size(classes) : 0;
    if (!json_is_array(pairs) || !json_array_size(pairs))
        return donto_seterr(err, "%s: an edge task needs a non-empty \"pairs\" array of [src, dst, class]", where);
    if (json_object_get(task, "labels"))
        return donto_seterr(err, "%s: an edge task has \"pairs\", not \"labels\"", where);
    if (dir && !json_is_boolean(dir)) return donto_seterr(err, "%s: \"directed\" must be true or false", where);
    int metric = metric_of(json_object_get(task, "metric"));
    if (metric < 0) return donto_seterr(err, "%s: \"metric\" must be \"macro_f1\", \"roc_auc\" or \"accuracy\"", where);
    if ((size_t)json_array_size(pairs) > (size_t)INT32_MAX / 4) return donto_seterr(err, "%s: too many pairs", where);
    int np = (int)json_array_size(pairs);
    g->pu = galloc(np, sizeof(int), "pairs", err), g->pv = galloc(np, sizeof(int), "pairs", err);
    g->pc = galloc(np, sizeof(int), "pairs", err);
    if (!g->pu || !g->pv || !g->pc) return -1;
    int mx = -1;
    for (int p = 0; p < np; p++) {
        json_t *t = json_array_get(pairs, p);
        if (!json_is_array(t) || json_array_size(t) != 3)
            return donto_seterr(err, "%s: pairs[%d] must be [src, dst, class]", where, p);
        const char *a = json_string_value(json_array_get(t, 0)), *b = json_string_value(json_array_get(t, 1));
        int u = a ? id_find(im, a) : -1, v = b ? id_find(im, b) : -1;
        if (u < 0) return donto_seterr(err, "%s: pairs[%d][0]: unknown node '%s'", where, p, a ? a : "(not a string)");
        if (v < 0) return donto_seterr(err, "%s: pairs[%d][1]: unknown node '%s'", where, p, b ? b : "(not a string)");
        if (u == v) return donto_seterr(err, "%s: pairs[%d]: a node paired with itself ('%s')", where, p, a);
        int c = class_of(json_array_get(t, 2), classes, nclass);
        if (c < 0) {
            char *cs = json_dumps(json_array_get(t, 2), JSON_ENCODE_ANY);
            donto_seterr(err, "%s: pairs[%d][2]: %s is not a class index or name (%d classes)", where, p, cs ? cs : "?",
                         nclass);
            free(cs);
            return -1;
        }
        g->pu[p] = u, g->pv[p] = v, g->pc[p] = c;
        if (c > mx) mx = c;
    }
    g->task_kind = DONTO_TASK_EDGE, g->npairs = np, g->directed = json_is_true(dir);
    g->nclass = nclass > mx ? nclass : mx + 1;
    g->metric = metric;
    if (g->nclass < 2) return donto_seterr(err, "%s: an edge task needs at least two classes", where);
    free(g->train), free(g->val), free(g->test);
    g->train = g->val = g->test = NULL;
    json_t *splits = json_object_get(task, "splits");
    if (splits && !json_is_array(splits)) return donto_seterr(err, "%s: \"splits\" must be an array", where);
    if (!json_array_size(splits)) return 0; /* none: donto_graph_load_opts decides (settle_splits) */
    int ns = (int)json_array_size(splits);
    size_t sz = (size_t)ns * np;
    g->nsplits = ns;
    g->ptrain = galloc(sz, 1, "pair split masks", err), g->pval = galloc(sz, 1, "pair split masks", err);
    g->ptest = galloc(sz, 1, "pair split masks", err);
    if (!g->ptrain || !g->pval || !g->ptest) return -1;
    static const char *const keys[3] = {"train", "val", "test"};
    uint8_t *dstm[3] = {g->ptrain, g->pval, g->ptest};
    for (int s = 0; s < ns; s++)
        for (int k = 0; k < 3; k++) {
            json_t *arr = json_object_get(json_array_get(splits, s), keys[k]);
            if (arr && !json_is_array(arr))
                return donto_seterr(err, "%s: splits[%d].%s must be an array of pair indices", where, s, keys[k]);
            for (size_t i = 0; i < json_array_size(arr); i++) {
                json_t *iv = json_array_get(arr, i);
                json_int_t q = json_is_integer(iv) ? json_integer_value(iv) : -1;
                if (q < 0 || q >= np)
                    return donto_seterr(err, "%s: splits[%d].%s[%zu]: %s is not a pair index (0..%d)", where, s, keys[k],
                                        i, json_is_integer(iv) ? "it" : "not an integer: it", np - 1);
                for (int o = 0; o < 3; o++)
                    if (dstm[o][(size_t)s * np + q])
                        return donto_seterr(err, "%s: splits[%d].%s[%zu]: pair %d is already in %s", where, s, keys[k],
                                            i, (int)q, keys[o]);
                dstm[k][(size_t)s * np + q] = 1;
            }
        }
    return 0;
}

/* The task's "classes" as g's class names when they name each of its classes. */
static void keep_class_names(donto_graph *g, json_t *classes) {
    if (!json_is_array(classes) || (int)json_array_size(classes) != g->nclass) return;
    for (int k = 0; k < g->nclass; k++)
        if (!json_is_string(json_array_get(classes, k))) return;
    g->class_names = donto_xcalloc((size_t)g->nclass, sizeof(char *));
    for (int k = 0; k < g->nclass; k++) g->class_names[k] = donto_xstrdup(json_string_value(json_array_get(classes, k)));
    g->nclass_names = g->nclass;
}

/* An export's parsed JSON into g; `path` names it in errors and becomes g->name. */
static int load_export_json(donto_graph *g, json_t *root, const char *path, const char *task_name, donto_err *err) {
    int rc = -1;
    float *x = NULL;
    int *y = NULL, *src = NULL, *dst = NULL;
    idmap im = {0};
    const char *fmt = json_string_value(json_object_get(root, "format"));
    json_t *nodes = json_object_get(root, "nodes"), *edges = json_object_get(root, "edges");
    json_t *tasks = json_object_get(root, "tasks");
    if (!fmt || strcmp(fmt, "donto-sheaf-graph")) {
        donto_seterr(err, "%s: \"format\" must be \"donto-sheaf-graph\"", path);
        goto out;
    }
    json_int_t version = json_integer_value(json_object_get(root, "version"));
    if (version != 1 && version != 2) {
        donto_seterr(err, "%s: unsupported version (this reader knows versions 1 and 2)", path);
        goto out;
    }
    if (!json_is_array(nodes) || json_array_size(nodes) == 0 || !json_is_array(edges)) {
        donto_seterr(err, "%s: needs a non-empty \"nodes\" array and an \"edges\" array", path);
        goto out;
    }
    int n = (int)json_array_size(nodes), f = (int)json_integer_value(json_object_get(root, "feature_dim"));
    if (!(im.ids = galloc(n, sizeof(char *), "node ids", err)) || !(im.ord = galloc(n, sizeof(int), "node ids", err)))
        goto out;
    for (int i = 0; i < n; i++) {
        json_t *nd = json_array_get(nodes, i), *fe = json_object_get(nd, "features");
        const char *id = json_string_value(json_object_get(nd, "id"));
        if (!id) {
            donto_seterr(err, "%s: node %d has no string \"id\"", path, i);
            goto out;
        }
        im.ids[i] = id, im.n = i + 1;
        if (!fe) {
            if (json_object_get(nd, "embedding"))
                donto_seterr(err, "%s: node '%s' references a stored embedding; this reader needs inline \"features\" "
                                  "(resolve embeddings when exporting)", path, id);
            else donto_seterr(err, "%s: node '%s' has no \"features\"", path, id);
            goto out;
        }
        if (!json_is_array(fe)) {
            donto_seterr(err, "%s: node '%s': \"features\" must be an array", path, id);
            goto out;
        }
        if (f <= 0) f = (int)json_array_size(fe);
        if ((int)json_array_size(fe) != f || f <= 0) {
            donto_seterr(err, "%s: node '%s' has %zu features, expected %d", path, id, json_array_size(fe), f);
            goto out;
        }
        if (!x && !(x = galloc((size_t)n * f, sizeof(float), "node features", err))) goto out;
        for (int j = 0; j < f; j++) {
            json_t *v = json_array_get(fe, j);
            if (!json_is_number(v)) {
                donto_seterr(err, "%s: node '%s': feature %d is not a number", path, id, j);
                goto out;
            }
            x[(size_t)i * f + j] = (float)json_number_value(v);
        }
    }
    const char *dup = id_index(&im);
    if (dup) {
        donto_seterr(err, "%s: duplicate node id '%s'", path, dup);
        goto out;
    }
    int m = (int)json_array_size(edges);
    src = galloc(m, sizeof(int), "the edge list", err), dst = galloc(m, sizeof(int), "the edge list", err);
    if (!src || !dst) goto out;
    for (int i = 0; i < m; i++) {
        json_t *e = json_array_get(edges, i);
        const char *a = json_string_value(json_object_get(e, "src")), *b = json_string_value(json_object_get(e, "dst"));
        src[i] = a ? id_find(&im, a) : -1, dst[i] = b ? id_find(&im, b) : -1;
        if (src[i] < 0 || dst[i] < 0) {
            donto_seterr(err, "%s: edge %d: src/dst must name nodes (got '%s' -> '%s')", path, i, a ? a : "?", b ? b : "?");
            goto out;
        }
    }
    if (!(y = galloc(n, sizeof(int), "node labels", err))) goto out;
    for (int i = 0; i < n; i++) y[i] = -1;
    json_t *task = NULL;
    int task_i = -1;
    if (json_is_array(tasks)) {
        for (size_t i = 0; i < json_array_size(tasks); i++) {
            json_t *t = json_array_get(tasks, i);
            const char *tn = json_string_value(json_object_get(t, "name"));
            if (!task_name || (tn && !strcmp(tn, task_name))) {
                task = t, task_i = (int)i;
                break;
            }
        }
    }
    if (task_name && !task) {
        donto_seterr(err, "%s: no task named '%s'", path, task_name);
        goto out;
    }
    int edge_task = 0, metric = DONTO_METRIC_DEFAULT;
    if (task) {
        json_t *kind = json_object_get(task, "kind");
        const char *ks = json_string_value(kind);
        if (kind && (!ks || (strcmp(ks, "node") && strcmp(ks, "edge")))) {
            donto_seterr(err, "%s: tasks[%d].kind must be \"node\" or \"edge\"", path, task_i);
            goto out;
        }
        edge_task = ks && !strcmp(ks, "edge");
        if (edge_task && version < 2) {
            donto_seterr(err, "%s: tasks[%d] is an edge task, which needs \"version\": 2", path, task_i);
            goto out;
        }
        if ((metric = metric_of(json_object_get(task, "metric"))) < 0) {
            donto_seterr(err, "%s: tasks[%d].metric must be \"macro_f1\", \"roc_auc\" or \"accuracy\"", path, task_i);
            goto out;
        }
    }
    int nclass = 0;
    json_t *classes = task ? json_object_get(task, "classes") : NULL;
    if (json_is_array(classes)) nclass = (int)json_array_size(classes);
    if (task && !edge_task) {
        json_t *labels = json_object_get(task, "labels");
        const char *key;
        json_t *val;
        json_object_foreach(labels, key, val) {
            int v = id_find(&im, key);
            if (v < 0) {
                donto_seterr(err, "%s: label for unknown node '%s'", path, key);
                goto out;
            }
            if (json_is_integer(val)) y[v] = (int)json_integer_value(val);
            else if (json_is_string(val) && classes) {
                for (size_t c = 0; c < json_array_size(classes); c++)
                    if (!strcmp(json_string_value(json_array_get(classes, c)) ? json_string_value(json_array_get(classes, c)) : "",
                                json_string_value(val)))
                        y[v] = (int)c;
            }
            if (y[v] < 0 || (nclass && y[v] >= nclass)) {
                donto_seterr(err, "%s: node '%s': label is not a class index or name", path, key);
                goto out;
            }
        }
    }
    if (donto_graph_from_arrays(g, n, f, x, y, nclass, m, src, dst, err)) goto out;
    snprintf(g->name, sizeof g->name, "%s", path);
    if (!(g->ids = galloc(n, sizeof(char *), "node ids", err))) {
        donto_graph_free(g);
        goto out;
    }
    for (int i = 0; i < n; i++) g->ids[i] = donto_xstrdup(im.ids[i]);
    g->metric = metric;
    {   /* the task's name and the export's inputs digest, for checkpoints (a model registry keys on them) */
        const char *tn = task ? json_string_value(json_object_get(task, "name")) : NULL;
        const char *dg = json_string_value(json_object_get(json_object_get(root, "export"), "inputs_digest"));
        snprintf(g->task_name, sizeof g->task_name, "%s", tn ? tn : "");
        snprintf(g->inputs_digest, sizeof g->inputs_digest, "%s", dg ? dg : "");
    }
    if (edge_task) {
        if (load_edge_task(g, task, task_i, &im, path, err)) {
            donto_graph_free(g);
            goto out;
        }
        snprintf(g->features_from, sizeof g->features_from, "the export's \"features\", %d per node", f);
        if (g->nsplits > 0)
            snprintf(g->splits_from, sizeof g->splits_from, "the task's \"splits\" over its %d pairs, %d split%s",
                     g->npairs, g->nsplits, g->nsplits == 1 ? "" : "s");
        donto_graph_fingerprint(g);
        keep_class_names(g, classes);
        rc = 0;
        goto out;
    }
    json_t *splits = task ? json_object_get(task, "splits") : NULL;
    if (json_is_array(splits) && json_array_size(splits) > 0) {
        int ns = (int)json_array_size(splits);
        g->nsplits = ns;
        g->train = galloc((size_t)ns * n, 1, "split masks", err), g->val = galloc((size_t)ns * n, 1, "split masks", err);
        g->test = galloc((size_t)ns * n, 1, "split masks", err);
        if (!g->train || !g->val || !g->test) {
            donto_graph_free(g);
            goto out;
        }
        const char *keys[3] = {"train", "val", "test"};
        uint8_t *dstm[3] = {g->train, g->val, g->test};
        for (int s = 0; s < ns; s++)
            for (int k = 0; k < 3; k++) {
                json_t *arr = json_object_get(json_array_get(splits, s), keys[k]);
                for (size_t i = 0; i < json_array_size(arr); i++) {
                    const char *id = json_string_value(json_array_get(arr, i));
                    int v = id ? id_find(&im, id) : -1;
                    if (v < 0) {
                        donto_seterr(err, "%s: split %d %s names unknown node '%s'", path, s, keys[k], id ? id : "?");
                        donto_graph_free(g);
                        goto out;
                    }
                    dstm[k][(size_t)s * n + v] = 1;
                }
            }
        snprintf(g->splits_from, sizeof g->splits_from, "the task's \"splits\", %d split%s", ns, ns == 1 ? "" : "s");
    } /* else none: donto_graph_load_opts decides (an error unless --random-splits) */
    snprintf(g->features_from, sizeof g->features_from, "the export's \"features\", %d per node", f);
    keep_class_names(g, classes);
    rc = 0;
out:
    free(im.ids), free(im.ord), free(x), free(y), free(src), free(dst);
    return rc;
}

static int load_export(donto_graph *g, const char *path, const char *task_name, donto_err *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return donto_seterr(err, "%s:%d: %s", path, je.line, je.text);
    int rc = load_export_json(g, root, path, task_name, err);
    json_decref(root);
    return rc;
}

int donto_graph_load_json(donto_graph *g, const char *json, size_t len, const char *name, const char *task,
                          donto_err *err) {
    memset(g, 0, sizeof *g);
    const char *where = name && *name ? name : "graph";
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return donto_seterrc(err, DONTO_E_INVALID, "%s (%zu bytes of JSON): line %d: %s", where, len, je.line, je.text);
    int rc = load_export_json(g, root, where, task, err);
    json_decref(root);
    if (rc) {
        if (donto_err_code(err) == DONTO_E_INTERNAL && err) err->code = DONTO_E_INVALID; /* the input's fault */
        return -1;
    }
    if (!g->splits_from[0]) snprintf(g->splits_from, sizeof g->splits_from, "none");
    return 0;
}

/* ------------------------------------------------------------------ */

/* The geom-gcn roots searched after --data-dir and $DONTO_GEOM_GCN_DIR, never relative to the
 * current directory: data/geom-gcn beside the executable's parent directory (a build directory
 * one level below the repository root: build/donto-sheaf -> data/geom-gcn), then the source
 * tree's data/geom-gcn, fixed at compile time (DONTO_GEOM_GCN_SOURCE_DIR, src/CMakeLists.txt). */
static void exe_data_root(char *out, size_t cap) {
    char exe[4096];
    out[0] = 0;
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return;
    exe[k] = 0;
    for (int up = 0; up < 2; up++) { /* strip the file name, then its directory */
        char *slash = strrchr(exe, '/');
        if (!slash) return;
        *slash = 0;
    }
    if (strlen(exe) + sizeof "/data/geom-gcn" <= cap) snprintf(out, cap, "%s/data/geom-gcn", exe);
}

#ifndef DONTO_GEOM_GCN_SOURCE_DIR
#define DONTO_GEOM_GCN_SOURCE_DIR ""
#endif

int donto_graph_features_parse(const char *t, donto_graph_opts *o, donto_err *err) {
    if (!strcmp(t, "auto") || !strcmp(t, "dense")) {
        o->features = t[0] == 'a' ? DONTO_FEATURES_AUTO : DONTO_FEATURES_DENSE, o->feature_dim = 0;
        return 0;
    }
    if (!strncmp(t, "indices", 7) && (t[7] == 0 || t[7] == ':')) {
        long d = 0;
        if (t[7] == ':') {
            char *e;
            errno = 0;
            d = strtol(t + 8, &e, 10);
            if (e == t + 8 || *e || errno || d < 1 || d > (1L << 30))
                return donto_seterr(err, "'%s': DIM must be a whole number in 1..%ld", t, 1L << 30);
        }
        o->features = DONTO_FEATURES_INDICES, o->feature_dim = (int)d;
        return 0;
    }
    return donto_seterr(err, "'%s' is not dense, indices, indices:DIM or auto", t);
}

/* A graph without masks: an error naming what was looked for, unless the caller asked for random
 * splits (--random-splits) or needs none (infer). */
static int settle_splits(donto_graph *g, const donto_graph_opts *o, const char *looked, int geom, donto_err *err) {
    if (g->nsplits > 0) return 0;
    if (g->task_kind == DONTO_TASK_EDGE && o->splits != DONTO_SPLITS_REQUIRED) {
        /* an edge task's masks are over its pairs (infer's --pairs needs them too) */
        if (random_pair_splits(g, 10, 0, err)) {
            donto_graph_free(g);
            return -1;
        }
        snprintf(g->splits_from, sizeof g->splits_from, "random 60/20/20 of the task's pairs, 10 splits, seed 0%s",
                 o->splits == DONTO_SPLITS_RANDOM ? " (--random-splits)" : "");
        g->splits_random = 1;
        return 0;
    }
    if (o->splits == DONTO_SPLITS_RANDOM) {
        donto_graph_random_splits(g, 10, 0);
        snprintf(g->splits_from, sizeof g->splits_from,
                 "random 60/20/20 of the labelled nodes, 10 splits, seed 0 (--random-splits)");
        g->splits_random = 1;
        return 0;
    }
    if (o->splits == DONTO_SPLITS_OPTIONAL) {
        snprintf(g->splits_from, sizeof g->splits_from, "none");
        return 0;
    }
    donto_seterr(err,
                 "%s: no splits: %s. Give --random-splits to draw 10 random 60/20/20 splits of the labelled "
                 "%s (seed 0) instead%s",
                 g->name, looked, g->task_kind == DONTO_TASK_EDGE ? "pairs" : "nodes",
                 geom ? ": not geom-gcn's fixed 48/32/20 splits, so results are not comparable with published ones"
                      : "");
    donto_graph_free(g);
    return -1;
}

int donto_graph_load(donto_graph *g, const char *spec, const char *data_dir, const char *task, donto_err *err) {
    donto_graph_opts o = {0};
    o.data_dir = data_dir, o.task = task;
    return donto_graph_load_opts(g, spec, &o, err);
}

int donto_graph_load_opts(donto_graph *g, const char *spec, const donto_graph_opts *opts, donto_err *err) {
    static const donto_graph_opts dflt = {0};
    const donto_graph_opts *o = opts ? opts : &dflt;
    const char *data_dir = o->data_dir;
    memset(g, 0, sizeof *g);
    char looked_splits[1024] = "";
    size_t sl = strlen(spec);
    int rc;
    if (is_file(spec) && sl > 4 && !strcmp(spec + sl - 4, ".npz")) {
        /* an .npz on its own: NAME.npz in ROOT */
        char root[4096], name[4096];
        snprintf(root, sizeof root, "%s", spec);
        char *slash = strrchr(root, '/');
        snprintf(name, sizeof name, "%s", slash ? slash + 1 : root);
        name[strlen(name) - 4] = 0;
        if (slash) *slash = 0;
        else snprintf(root, sizeof root, ".");
        rc = load_geom_gcn(g, root[0] ? root : "/", name, spec, o, looked_splits, sizeof looked_splits, err);
        return rc ? rc : settle_splits(g, o, looked_splits, 1, err);
    }
    if (is_file(spec)) {
        if (o->features != DONTO_FEATURES_AUTO)
            return donto_seterr(err, "%s: --features is for geom-gcn's out1_node_feature_label.txt; an export file "
                                     "gives its features as numbers", spec);
        if (load_export(g, spec, o->task, err)) return -1;
        if (o->task) snprintf(looked_splits, sizeof looked_splits, "task '%.200s' has no \"splits\"", o->task);
        else snprintf(looked_splits, sizeof looked_splits, "its first task has no \"splits\"");
        return settle_splits(g, o, looked_splits, 0, err);
    }
    if (is_dir(spec)) {
        /* a geom-gcn dataset directory: root = its parent */
        char root[4096], name[4096];
        snprintf(root, sizeof root, "%s", spec);
        size_t l = strlen(root);
        while (l > 1 && root[l - 1] == '/') root[--l] = 0;
        char *slash = strrchr(root, '/');
        if (slash) {
            snprintf(name, sizeof name, "%s", slash + 1);
            if (slash == root) root[1] = 0;
            else *slash = 0;
        } else {
            snprintf(name, sizeof name, "%s", root);
            snprintf(root, sizeof root, ".");
        }
        rc = load_geom_gcn(g, root, name, NULL, o, looked_splits, sizeof looked_splits, err);
        return rc ? rc : settle_splits(g, o, looked_splits, 1, err);
    }
    const char *env = getenv("DONTO_GEOM_GCN_DIR");
    char exe_root[4096];
    exe_data_root(exe_root, sizeof exe_root);
    const char *roots[4] = {data_dir, env && *env ? env : NULL, exe_root[0] ? exe_root : NULL,
                            DONTO_GEOM_GCN_SOURCE_DIR[0] ? DONTO_GEOM_GCN_SOURCE_DIR : NULL};
    static const char *const what[4] = {"--data-dir", "$DONTO_GEOM_GCN_DIR", "beside the executable",
                                        "the source tree"};
    char looked[2048] = "";
    for (int i = 0; i < 4; i++) {
        if (!roots[i] || (i == 3 && roots[2] && !strcmp(roots[2], roots[3]))) continue;
        char d[8192];
        snprintf(d, sizeof d, "%s/%s", roots[i], spec);
        if (is_dir(d)) {
            rc = load_geom_gcn(g, roots[i], spec, NULL, o, looked_splits, sizeof looked_splits, err);
            return rc ? rc : settle_splits(g, o, looked_splits, 1, err);
        }
        size_t l = strlen(looked);
        snprintf(looked + l, sizeof looked - l, "%s%s (%s)", l ? ", " : "", roots[i], what[i]);
    }
    return donto_seterr(err, "'%s' is neither a file, a directory, nor a geom-gcn dataset under %s", spec,
                        looked[0] ? looked : "(no data directory)");
}
