/*
 * Graphs for sheaf learning: the geom-gcn benchmark files (text + numpy .npz, read with
 * zlib's raw inflate), donto-sheaf export files (docs/sheaf-export.md), and synthetic
 * random graphs. Every loader ends in donto_graph_from_arrays, which symmetrises the
 * edges, drops self-loops and duplicates, as the NSD reference does.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
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
        out->shape[out->ndim++] = strtol(p, &p, 10);
    }
    free(h);
    size_t esz = (size_t)atoi(out->descr + 2), cnt = 1;
    for (int i = 0; i < out->ndim; i++) cnt *= (size_t)out->shape[i];
    out->nbytes = cnt * esz;
    if (ho + hl + out->nbytes > len) return donto_seterr(err, "%s: .npy data shorter than its shape", what);
    out->data = galloc(out->nbytes, 1, what, err);
    if (!out->data) return -1;
    memcpy(out->data, b + ho + hl, out->nbytes);
    return 0;
}

int donto_npz_read(const char *path, const char *name, donto_npy *out, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    const unsigned char *b = (const unsigned char *)buf;
    long eocd = -1;
    for (long i = (long)len - 22; i >= 0 && i >= (long)len - 65557; i--)
        if (rd32(b + i) == 0x06054b50) {
            eocd = i;
            break;
        }
    int rc = -1;
    char want[256];
    snprintf(want, sizeof want, "%s.npy", name);
    if (eocd < 0) {
        donto_seterr(err, "%s: not a zip file", path);
        goto done;
    }
    size_t nent = rd16(b + eocd + 10), cd = rd32(b + eocd + 16);
    for (size_t e = 0, p = cd; e < nent; e++) {
        if (p + 46 > len || rd32(b + p) != 0x02014b50) {
            donto_seterr(err, "%s: bad zip central directory", path);
            goto done;
        }
        int method = rd16(b + p + 10);
        uint64_t csz = rd32(b + p + 20), usz = rd32(b + p + 24), loff = rd32(b + p + 42);
        size_t nl = rd16(b + p + 28), xl = rd16(b + p + 30), cl = rd16(b + p + 32);
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
        if (nl == strlen(want) && !memcmp(b + p + 46, want, nl)) {
            if (loff + 30 > len || rd32(b + loff) != 0x04034b50) {
                donto_seterr(err, "%s: bad zip local header for %s", path, want);
                goto done;
            }
            size_t data = loff + 30 + rd16(b + loff + 26) + rd16(b + loff + 28);
            if (data + csz > len) {
                donto_seterr(err, "%s: %s truncated", path, want);
                goto done;
            }
            unsigned char *raw = galloc(usz, 1, want, err);
            if (!raw) goto done;
            if (method == 0) {
                memcpy(raw, b + data, usz);
            } else if (method == 8) {
                z_stream s;
                memset(&s, 0, sizeof s);
                if (inflateInit2(&s, -15) != Z_OK) {
                    free(raw);
                    donto_seterr(err, "zlib init failed");
                    goto done;
                }
                s.next_in = (unsigned char *)b + data, s.avail_in = (uInt)csz;
                s.next_out = raw, s.avail_out = (uInt)usz;
                int zr = inflate(&s, Z_FINISH);
                inflateEnd(&s);
                if (zr != Z_STREAM_END || s.total_out != usz) {
                    free(raw);
                    donto_seterr(err, "%s: %s: corrupt deflate data", path, want);
                    goto done;
                }
            } else {
                free(raw);
                donto_seterr(err, "%s: %s: unsupported zip compression %d", path, want, method);
                goto done;
            }
            char what[512];
            snprintf(what, sizeof what, "%s:%s", path, want);
            rc = npy_parse(raw, usz, out, what, err);
            free(raw);
            goto done;
        }
        p += 46 + nl + xl + cl;
    }
    donto_seterr(err, "%s: no array '%s'", path, name);
done:
    free(buf);
    return rc;
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
    memset(g, 0, sizeof *g);
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
        for (int i = cnt - 1; i > 0; i--) {
            int j = (int)(sheaf_mix64(seed * 7919 + (uint64_t)s * 104729 + i) % (uint64_t)(i + 1));
            int t = ids[i];
            ids[i] = ids[j], ids[j] = t;
        }
        int ntr = (int)(0.6 * cnt), nva = (int)(0.2 * cnt);
        for (int i = 0; i < cnt; i++) {
            uint8_t *dst = i < ntr ? g->train : i < ntr + nva ? g->val : g->test;
            dst[(size_t)s * g->n + ids[i]] = 1;
        }
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
        int cnt = g->npairs;
        for (int i = 0; i < cnt; i++) ids[i] = i;
        for (int i = cnt - 1; i > 0; i--) {
            int j = (int)(sheaf_mix64(seed * 7919 + (uint64_t)s * 104729 + i) % (uint64_t)(i + 1));
            int t = ids[i];
            ids[i] = ids[j], ids[j] = t;
        }
        int ntr = (int)(0.6 * cnt), nva = (int)(0.2 * cnt);
        for (int i = 0; i < cnt; i++) {
            uint8_t *dst = i < ntr ? g->ptrain : i < ntr + nva ? g->pval : g->ptest;
            dst[(size_t)s * g->npairs + ids[i]] = 1;
        }
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
            free(buf);
            return donto_seterr(err, "%s:%d: expected two node ids", path, lineno);
        }
        if (cnt == cap) {
            cap *= 2;
            if (grealloc((void **)src, cap, sizeof(int), "the edge list", err) ||
                grealloc((void **)dst, cap, sizeof(int), "the edge list", err)) {
                free(buf), free(*src), free(*dst);
                return -1;
            }
        }
        (*src)[cnt] = (int)a, (*dst)[cnt] = (int)b, cnt++;
    }
    free(buf);
    *m = cnt;
    return 0;
}

static int read_features_txt(const char *path, float **x, int **y, int *n, int *f, donto_err *err) {
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    /* count lines */
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    int cap = lines + 1, cnt = 0, nf = -1;
    int *ids = galloc(cap, sizeof(int), "node ids", err), *lab = galloc(cap, sizeof(int), "node labels", err);
    if (!ids || !lab) return free(buf), free(ids), free(lab), -1;
    float *feat = NULL;
    char *save = NULL, *line = strtok_r(buf, "\n", &save);
    int lineno = 0, rc = 0;
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (lineno == 1 && !isdigit((unsigned char)line[0])) continue;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2) {
            rc = donto_seterr(err, "%s:%d: expected id<TAB>features<TAB>label", path, lineno);
            break;
        }
        int k = 1;
        for (char *p = t1 + 1; p < t2; p++) k += *p == ',';
        if (nf < 0) {
            nf = k;
            if (!(feat = galloc((size_t)cap * nf, sizeof(float), "node features", err))) {
                rc = -1;
                break;
            }
        }
        if (k != nf) {
            rc = donto_seterr(err, "%s:%d: %d features, earlier lines have %d", path, lineno, k, nf);
            break;
        }
        ids[cnt] = atoi(line), lab[cnt] = atoi(t2 + 1);
        char *p = t1 + 1;
        for (int j = 0; j < nf; j++) {
            feat[(size_t)cnt * nf + j] = strtof(p, &p);
            if (*p == ',') p++;
        }
        cnt++;
    }
    free(buf);
    if (rc || cnt == 0) {
        free(ids), free(lab), free(feat);
        return rc ? rc : donto_seterr(err, "%s: no nodes", path);
    }
    /* rows are keyed by node id */
    *x = galloc((size_t)cnt * nf, sizeof(float), "node features", err);
    *y = galloc(cnt, sizeof(int), "node labels", err);
    if (!*x || !*y) return free(ids), free(lab), free(feat), free(*x), free(*y), -1;
    for (int i = 0; i < cnt; i++) {
        if (ids[i] < 0 || ids[i] >= cnt) {
            int bad = ids[i];
            free(ids), free(lab), free(feat), free(*x), free(*y);
            return donto_seterr(err, "%s: node id %d outside 0..%d", path, bad, cnt - 1);
        }
        memcpy(*x + (size_t)ids[i] * nf, feat + (size_t)i * nf, sizeof(float) * nf);
        (*y)[ids[i]] = lab[i];
    }
    free(ids), free(lab), free(feat);
    *n = cnt, *f = nf;
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
    if (strcmp(a->descr, "|u1") && strcmp(a->descr, "|b1")) return -1;
    for (long i = 0; i < n; i++) out[i] = ((const uint8_t *)a->data)[i] != 0;
    return 0;
}

static int load_geom_splits(donto_graph *g, const char *root, const char *name, donto_err *err) {
    char path[4096];
    int ns = 0;
    while (ns < 100) {
        snprintf(path, sizeof path, "%s/splits/%s_split_0.6_0.2_%d.npz", root, name, ns);
        if (!is_file(path)) break;
        ns++;
    }
    if (ns == 0) {
        donto_graph_random_splits(g, 10, 0);
        return 0;
    }
    g->nsplits = ns;
    g->train = galloc((size_t)ns * g->n, 1, "split masks", err);
    g->val = galloc((size_t)ns * g->n, 1, "split masks", err);
    g->test = galloc((size_t)ns * g->n, 1, "split masks", err);
    if (!g->train || !g->val || !g->test) return -1;
    const char *names[3] = {"train_mask", "val_mask", "test_mask"};
    uint8_t *dst[3] = {g->train, g->val, g->test};
    for (int s = 0; s < ns; s++) {
        snprintf(path, sizeof path, "%s/splits/%s_split_0.6_0.2_%d.npz", root, name, s);
        for (int k = 0; k < 3; k++) {
            donto_npy a;
            if (donto_npz_read(path, names[k], &a, err)) return -1;
            int bad = a.ndim != 1 || a.shape[0] != g->n || npy_to_bool(&a, g->n, dst[k] + (size_t)s * g->n);
            free(a.data);
            if (bad) return donto_seterr(err, "%s: %s is not a bool/u1 vector of %d nodes", path, names[k], g->n);
        }
    }
    return 0;
}

static int load_geom_gcn(donto_graph *g, const char *root, const char *name, donto_err *err) {
    char dir[2048], path[4096];
    if (strlen(root) + strlen(name) + 2 > sizeof dir) return donto_seterr(err, "path too long");
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    float *x = NULL;
    int *y = NULL, n = 0, f = 0, *src = NULL, *dst = NULL, m = 0;
    snprintf(path, sizeof path, "%s/out1_node_feature_label.txt", dir);
    if (is_file(path)) {
        if (read_features_txt(path, &x, &y, &n, &f, err)) return -1;
    } else {
        snprintf(path, sizeof path, "%s/%s.npz", dir, name);
        donto_npy fx, ly;
        if (donto_npz_read(path, "node_features", &fx, err)) return -1;
        if (donto_npz_read(path, "node_labels", &ly, err)) return free(fx.data), -1;
        if (fx.ndim != 2 || ly.ndim != 1 || ly.shape[0] != fx.shape[0] || fx.fortran) {
            free(fx.data), free(ly.data);
            return donto_seterr(err, "%s: node_features/node_labels have unexpected shapes", path);
        }
        n = (int)fx.shape[0], f = (int)fx.shape[1];
        x = galloc((size_t)n * f, sizeof(float), "node features", err);
        y = galloc(n, sizeof(int), "node labels", err);
        if (!x || !y) return free(x), free(y), free(fx.data), free(ly.data), -1;
        int ok = 1;
        if (!strcmp(fx.descr, "<f4")) memcpy(x, fx.data, sizeof(float) * (size_t)n * f);
        else if (!strcmp(fx.descr, "<f8"))
            for (size_t i = 0; i < (size_t)n * f; i++) x[i] = (float)((double *)fx.data)[i];
        else ok = 0;
        if (!strcmp(ly.descr, "<i8"))
            for (int i = 0; i < n; i++) y[i] = (int)((int64_t *)ly.data)[i];
        else if (!strcmp(ly.descr, "<i4")) memcpy(y, ly.data, sizeof(int) * n);
        else ok = 0;
        free(fx.data), free(ly.data);
        if (!ok) {
            free(x), free(y);
            return donto_seterr(err, "%s: unsupported dtypes", path);
        }
    }
    snprintf(path, sizeof path, "%s/out1_graph_edges.txt", dir);
    if (read_edges_txt(path, &src, &dst, &m, err)) return free(x), free(y), -1;
    row_normalise(x, n, f);
    int rc = donto_graph_from_arrays(g, n, f, x, y, 0, m, src, dst, err);
    free(x), free(y), free(src), free(dst);
    if (rc) return -1;
    snprintf(g->name, sizeof g->name, "%s", name);
    if (load_geom_splits(g, root, name, err)) return donto_graph_free(g), -1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* donto-sheaf export format (JSON)                                      */

/* Node ids -> indices: ids in file order, ord the indices sorted by id (binary search). */
typedef struct { const char **ids; int n; int *ord; } idmap;
static const char **cmp_ids; /* qsort has no context argument; the loader is not reentrant here */
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
    if (!json_array_size(splits)) return random_pair_splits(g, 10, 0, err);
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

static int load_export(donto_graph *g, const char *path, const char *task_name, donto_err *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return donto_seterr(err, "%s:%d: %s", path, je.line, je.text);
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
    if (edge_task) {
        if (load_edge_task(g, task, task_i, &im, path, err)) {
            donto_graph_free(g);
            goto out;
        }
        donto_graph_fingerprint(g);
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
    } else {
        donto_graph_random_splits(g, 10, 0);
    }
    rc = 0;
out:
    free(im.ids), free(im.ord), free(x), free(y), free(src), free(dst);
    json_decref(root);
    return rc;
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

int donto_graph_load(donto_graph *g, const char *spec, const char *data_dir, const char *task, donto_err *err) {
    memset(g, 0, sizeof *g);
    if (is_file(spec)) return load_export(g, spec, task, err);
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
        return load_geom_gcn(g, root, name, err);
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
        if (is_dir(d)) return load_geom_gcn(g, roots[i], spec, err);
        size_t l = strlen(looked);
        snprintf(looked + l, sizeof looked - l, "%s%s (%s)", l ? ", " : "", roots[i], what[i]);
    }
    return donto_seterr(err, "'%s' is neither a file, a directory, nor a geom-gcn dataset under %s", spec,
                        looked[0] ? looked : "(no data directory)");
}
