/* donto-accel: the sheaf export proper (docs/sheaf-export.md version 2,
 * docs/sheaf.md "Export"): from the rows read (read_sqlite.c / read_pg.c)
 * to the graph, its three tasks and their splits, written as JSON.
 *
 * Everything after the read is the same code for both stores and runs in
 * memory in time linear in the rows (hash sets for pairs, CSR lists per
 * entity); the output is a function of the database, the options and the
 * rng seed only (statements are sorted by uuid, entities by IRI).
 *
 * The leakage rules live here, each in one place:
 *   as-of     eligible(): a node was asserted at or before as_of and not
 *             retracted by then; graph arguments likewise; test labels come
 *             from (as_of, until];
 *   pairs     drop_pair_edges(): no val/test pair is a graph edge, either way;
 *             negatives avoid every argued pair and every pair used in
 *             another split, so a test pair never shows in training labels;
 *   sheaf     rows whose context starts with "sheaf:" are dropped as read.
 * Each can be switched off by a DONTO_SHEAFX_UNSAFE_* bit, for the test that
 * shows the filter is what keeps its planted leak out. */
#define _POSIX_C_SOURCE 200809L
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sheafx_int.h"

/* ---- pair sets ---------------------------------------------------------------- */

typedef struct pset {
    uint64_t *k;
    int32_t *v;
    size_t cap, n;
} pset;
#define PS_EMPTY UINT64_MAX

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static void ps_grow(pset *p) {
    size_t nc = p->cap ? 2 * p->cap : 1024;
    uint64_t *k = donto_xmalloc(nc * sizeof *k);
    int32_t *v = donto_xmalloc(nc * sizeof *v);
    for (size_t i = 0; i < nc; i++) k[i] = PS_EMPTY;
    for (size_t i = 0; i < p->cap; i++) {
        if (p->k[i] == PS_EMPTY) continue;
        size_t h = mix64(p->k[i]) & (nc - 1);
        while (k[h] != PS_EMPTY) h = (h + 1) & (nc - 1);
        k[h] = p->k[i], v[h] = p->v[i];
    }
    free(p->k), free(p->v);
    p->k = k, p->v = v, p->cap = nc;
}
/* Slot of key (or -1 when absent). */
static int32_t *ps_get(const pset *p, uint64_t key) {
    if (!p->cap) return NULL;
    size_t h = mix64(key) & (p->cap - 1);
    while (p->k[h] != PS_EMPTY) {
        if (p->k[h] == key) return &p->v[h];
        h = (h + 1) & (p->cap - 1);
    }
    return NULL;
}
/* Add key with value v; 1 when new, 0 when present (value kept). */
static int ps_add(pset *p, uint64_t key, int32_t v) {
    if (2 * (p->n + 1) > p->cap) ps_grow(p);
    size_t h = mix64(key) & (p->cap - 1);
    while (p->k[h] != PS_EMPTY) {
        if (p->k[h] == key) return 0;
        h = (h + 1) & (p->cap - 1);
    }
    p->k[h] = key, p->v[h] = v, p->n++;
    return 1;
}
static void ps_free(pset *p) { free(p->k), free(p->v), memset(p, 0, sizeof *p); }
static uint64_t dkey(int32_t u, int32_t v) { return (uint64_t)(uint32_t)u << 32 | (uint32_t)v; }
static uint64_t ukey(int32_t u, int32_t v) { return u < v ? dkey(u, v) : dkey(v, u); }

/* ---- growable arrays ------------------------------------------------------------ */

typedef struct pair {
    int32_t u, v; /* node ids */
    int cls;      /* class index */
} pair;
typedef struct pairs {
    pair *p;
    size_t n, cap;
} pairs;
static void pairs_add(pairs *a, int32_t u, int32_t v, int cls) {
    if (a->n == a->cap) a->p = donto_xrealloc(a->p, (a->cap = a->cap ? 2 * a->cap : 256) * sizeof *a->p);
    a->p[a->n++] = (pair){u, v, cls};
}

typedef struct edge {
    int32_t u, v;
    int8_t type; /* 0..4 relations, 5 shares_subject, 6 shares_object, 7 shares_entity, 8 mentions */
    int8_t removed;
} edge;
static const char *const EDGE_TYPES[] = {"supports", "rebuts", "undercuts", "undermines", "qualifies",
                                         "shares_subject", "shares_object", "shares_entity", "mentions"};
enum { ET_SUBJ = 5, ET_OBJ = 6, ET_ENT = 7, ET_MENTION = 8 };

typedef struct graph {
    edge *e;
    size_t n, cap;
    pset idx; /* unordered pair -> edge index */
} graph;
static void add_edge(graph *g, int32_t u, int32_t v, int type) {
    if (u == v) return;
    if (!ps_add(&g->idx, ukey(u, v), (int32_t)g->n)) return;
    if (g->n == g->cap) g->e = donto_xrealloc(g->e, (g->cap = g->cap ? 2 * g->cap : 4096) * sizeof *g->e);
    g->e[g->n++] = (edge){u, v, (int8_t)type, 0};
}

/* ---- sorting ---------------------------------------------------------------------- */

static int cmp_stmt(const void *a, const void *b) { return memcmp(((const sx_stmt *)a)->uuid, ((const sx_stmt *)b)->uuid, 16); }
static int cmp_arg(const void *a, const void *b) {
    const sx_arg *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    if (x->rel != y->rel) return x->rel < y->rel ? -1 : 1;
    return x->from < y->from ? -1 : x->from > y->from;
}

/* Entities in IRI order: order[rank] = index. (A merge sort keeps the
 * comparator free of globals, so two exports may run in two threads.) */
static void msort_ent(int32_t *a, int32_t *tmp, size_t n, char *const *s) {
    if (n < 2) return;
    size_t m = n / 2;
    msort_ent(a, tmp, m, s);
    msort_ent(a + m, tmp, n - m, s);
    size_t i = 0, j = m, k = 0;
    while (i < m && j < n) tmp[k++] = strcmp(s[a[i]], s[a[j]]) <= 0 ? a[i++] : a[j++];
    while (i < m) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

/* ---- JSON out ------------------------------------------------------------------------
 * An output buffer of its own (stdio's per-call locking and fputc were half
 * the export's time), node ids quoted and escaped once, and floats written
 * with 7 significant digits by integer arithmetic in the usual range. */

typedef struct ob {
    FILE *f;
    char *b;
    size_t n, cap;
    int err;
} ob;
static void ob_flush(ob *o) {
    if (o->n && fwrite(o->b, 1, o->n, o->f) != o->n) o->err = 1;
    o->n = 0;
}
static void obw(ob *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        ob_flush(o);
        if (n > o->cap) {
            if (fwrite(p, 1, n, o->f) != n) o->err = 1;
            return;
        }
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void obs(ob *o, const char *s) { obw(o, s, strlen(s)); }
static void obu(ob *o, uint64_t v) {
    char d[24];
    int k = 24;
    do d[--k] = (char)('0' + v % 10), v /= 10;
    while (v);
    obw(o, d + k, (size_t)(24 - k));
}
static void obc(ob *o, char c) {
    if (o->n == o->cap) ob_flush(o);
    o->b[o->n++] = c;
}
static void obf(ob *o, const char *fmt, ...) DONTO_PRINTF(2, 3);
static void obf(ob *o, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        obw(o, tmp, (size_t)k);
        return;
    }
    char *big = donto_xmalloc((size_t)k + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    obw(o, big, (size_t)k);
    free(big);
}

/* "s" quoted and escaped as a JSON string (malloc'd). */
static char *json_quote(const char *s, size_t *len) {
    size_t n = strlen(s), k = 0;
    char *q = donto_xmalloc(6 * n + 3);
    q[k++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') q[k++] = '\\', q[k++] = (char)*p;
        else if (*p < 0x20) k += (size_t)sprintf(q + k, "\\u%04x", *p);
        else q[k++] = (char)*p;
    }
    q[k++] = '"';
    q[k] = 0;
    *len = k;
    return q;
}

/* One float, 7 significant digits (what %.7g keeps), shortest form. */
static void put_float(ob *o, float fv) {
    double v = fv, a = v < 0 ? -v : v;
    char buf[40];
    if (a == 0) {
        obc(o, '0');
        return;
    }
    if (!(a >= 1e-3 && a < 1e4)) {
        int k = snprintf(buf, sizeof buf, "%.7g", v);
        obw(o, buf, (size_t)k);
        return;
    }
    int dec = a >= 1000 ? 3 : a >= 100 ? 4 : a >= 10 ? 5 : a >= 1 ? 6 : a >= 0.1 ? 7 : a >= 0.01 ? 8 : 9;
    static const double P10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    uint64_t m = (uint64_t)(a * P10[dec] + 0.5);
    uint64_t ip = m / (uint64_t)P10[dec], fp = m % (uint64_t)P10[dec];
    int k = 0;
    if (v < 0) buf[k++] = '-';
    {
        char d[8];
        int nd = 0;
        do d[nd++] = (char)('0' + ip % 10), ip /= 10;
        while (ip);
        while (nd) buf[k++] = d[--nd];
    }
    if (fp) {
        char d[12];
        for (int i = dec - 1; i >= 0; i--) d[i] = (char)('0' + fp % 10), fp /= 10;
        int e = dec;
        while (e > 0 && d[e - 1] == '0') e--;
        buf[k++] = '.';
        memcpy(buf + k, d, (size_t)e);
        k += e;
    }
    obw(o, buf, (size_t)k);
}

static void put_floats(ob *o, const float *v, int n) {
    obc(o, '[');
    for (int i = 0; i < n; i++) {
        if (i) obc(o, ',');
        put_float(o, v ? v[i] : 0.0f);
    }
    obc(o, ']');
}

/* ---- the export ------------------------------------------------------------------------ */

typedef struct ctx {
    const donto_sheafx_opts *o;
    sx_data d;
    size_t nst;
    uint8_t *elig, *sel;
    uint8_t *seed_ent;  /* per entity: an end of an identity seed (an entity node) */
    int32_t *rank;      /* entity index -> rank by IRI */
    int32_t *order;     /* rank -> entity index */
    /* per entity: eligible claims with it as subject, as object (CSR) */
    int64_t *s_off, *o_off;
    int32_t *s_list, *o_list;
    int64_t *a_off;     /* per claim: graph arguments (known at as_of), both directions */
    int32_t *a_list;
    int32_t *nid;       /* claim -> node id, -1 */
    int32_t *eid;       /* entity -> node id, -1 */
    int32_t *node_claim; size_t ncn; /* node id -> claim (claims first) */
    int32_t *node_ent;   size_t nen; /* node id - ncn -> entity */
    uint64_t rng;
} ctx;

static int eligible(const ctx *c, const sx_stmt *t) {
    int u = c->o->unsafe;
    if (t->until <= c->o->as_of) return 0;                                /* retracted by as_of */
    if (t->from > c->o->as_of && !(u & DONTO_SHEAFX_UNSAFE_NO_ASOF)) return 0; /* asserted after */
    if (t->sheaf && !(u & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER)) return 0;
    return !t->ident; /* identity evidence is a label, never a node */
}
static int arg_known(const ctx *c, const sx_arg *a) {
    if (a->until <= c->o->as_of) return 0;
    return a->from <= c->o->as_of || (c->o->unsafe & DONTO_SHEAFX_UNSAFE_NO_ASOF);
}
static int arg_usable(const ctx *c, const sx_arg *a) {
    return a->s >= 0 && a->d >= 0 && a->s != a->d && c->elig[a->s] && c->elig[a->d] &&
           (!a->sheaf || (c->o->unsafe & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER));
}
static int seed_arg(const ctx *c, const sx_arg *a) {
    if (c->o->seed == DONTO_SHEAFX_SEED_INCOMPAT)
        return a->rel == SX_REBUTS || a->rel == SX_UNDERCUTS || a->rel == SX_UNDERMINES;
    return 1;
}

static void build_csr(int64_t **off, int32_t **list, size_t nkeys, const int32_t *key_of, const uint8_t *use, size_t n) {
    int64_t *o = donto_xcalloc(nkeys + 1, sizeof *o);
    for (size_t i = 0; i < n; i++)
        if (use[i] && key_of[i] >= 0) o[key_of[i] + 1]++;
    for (size_t k = 0; k < nkeys; k++) o[k + 1] += o[k];
    int32_t *l = donto_xmalloc(((size_t)o[nkeys] + 1) * sizeof *l);
    int64_t *fill = donto_xmalloc((nkeys + 1) * sizeof *fill);
    memcpy(fill, o, (nkeys + 1) * sizeof *fill);
    for (size_t i = 0; i < n; i++)
        if (use[i] && key_of[i] >= 0) l[fill[key_of[i]]++] = (int32_t)i;
    free(fill);
    *off = o, *list = l;
}

/* Select claims: the seeds, then `hops` rounds of their neighbours (claims
 * sharing an entity, graph arguments), at most max_nodes in all. */
static int64_t select_nodes(ctx *c) {
    const donto_sheafx_opts *o = c->o;
    size_t n = c->nst;
    int32_t *queue = donto_xmalloc((n + 1) * sizeof *queue);
    uint8_t *ent_done = donto_xcalloc(c->d.ent.n + 1, 1);
    size_t qn = 0;
    int64_t cap = o->max_nodes > 0 ? o->max_nodes : INT64_MAX, count = 0;
#define TAKE(i)                                                    \
    do {                                                           \
        if (!c->sel[i] && c->elig[i] && count < cap) {             \
            c->sel[i] = 1, queue[qn++] = (int32_t)(i), count++;    \
        }                                                          \
    } while (0)
    /* Seeds, in statement (uuid) order. */
    uint8_t *seed = donto_xcalloc(n + 1, 1);
    if (o->seed == DONTO_SHEAFX_SEED_FRONTIER) {
        for (size_t i = 0; i < n; i++)
            if (c->elig[i] && c->d.st[i].until > o->as_of && c->d.st[i].until <= o->until) seed[i] = 1;
    } else if (o->seed == DONTO_SHEAFX_SEED_IDENTITY) {
        /* The claims naming both ends of each identity statement that is a
         * label (known at as_of or asserted in (as_of, until]), taken pair by
         * pair in statement order: a capped subgraph holds whole pairs. The
         * ends themselves become entity nodes (seed_ent), named by a claim
         * node or not: an adjective satellite of WordNet has no claim but its
         * similar_to, which is a label, never a node. */
        for (size_t i = 0; i < n && count < cap; i++) {
            const sx_stmt *t = &c->d.st[i];
            if (!t->ident || t->obj < 0 || t->obj == t->subj || t->until <= o->as_of || t->from > o->until) continue;
            if (t->sheaf && !(o->unsafe & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER)) continue;
            int32_t ends[2] = {t->subj, t->obj};
            for (int k = 0; k < 2; k++) {
                int32_t e = ends[k];
                c->seed_ent[e] = 1; /* an entity node even if no claim node names it */
                for (int64_t j = c->s_off[e]; j < c->s_off[e + 1]; j++) TAKE(c->s_list[j]);
                for (int64_t j = c->o_off[e]; j < c->o_off[e + 1]; j++) TAKE(c->o_list[j]);
            }
        }
    } else {
        for (size_t k = 0; k < c->d.narg; k++) {
            const sx_arg *a = &c->d.arg[k];
            if (!arg_usable(c, a) || !seed_arg(c, a)) continue;
            if (!arg_known(c, a) && !(a->from > o->as_of && a->from <= o->until)) continue;
            seed[a->s] = seed[a->d] = 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        if (seed[i]) TAKE(i);
    free(seed);
    size_t head = 0;
    for (int h = 0; h < o->hops && count < cap; h++) {
        size_t end = qn;
        for (; head < end && count < cap; head++) {
            int32_t u = queue[head];
            const sx_stmt *t = &c->d.st[u];
            int32_t ents[2] = {t->subj, t->obj};
            for (int k = 0; k < 2; k++) {
                int32_t e = ents[k];
                if (e < 0 || ent_done[e]) continue;
                ent_done[e] = 1;
                for (int64_t j = c->s_off[e]; j < c->s_off[e + 1]; j++) TAKE(c->s_list[j]);
                for (int64_t j = c->o_off[e]; j < c->o_off[e + 1]; j++) TAKE(c->o_list[j]);
            }
            for (int64_t j = c->a_off[u]; j < c->a_off[u + 1]; j++) TAKE(c->a_list[j]);
        }
    }
#undef TAKE
    free(queue);
    free(ent_done);
    return count;
}

static void shuffle(pair *p, size_t n, uint64_t *rng) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)sx_below(rng, i);
        pair t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
}

/* An edge task's examples: positives per split, then negatives. */
typedef struct etask {
    pairs split[3]; /* train, val, test */
} etask;

/* Negatives for split sp: want of them, node pairs (u, v) drawn by pick(),
 * none in `forbid` (argued pairs) or `used` (already an example). */
typedef int (*pick_fn)(ctx *c, int32_t *u, int32_t *v);

static void add_negatives(ctx *c, etask *t, int sp, size_t want, pick_fn pick, const pset *forbid, pset *used, int cls) {
    size_t got = 0, tries = 0, limit = 50 * want + 1000;
    while (got < want && tries++ < limit) {
        int32_t u, v;
        if (pick(c, &u, &v) || u == v) continue;
        uint64_t k = ukey(u, v);
        if (ps_get(forbid, k) || !ps_add(used, k, sp)) continue;
        pairs_add(&t->split[sp], u, v, cls);
        got++;
    }
}

/* arg_link negatives: half share an entity with u (hard), half anywhere. */
static int pick_claims(ctx *c, int32_t *u, int32_t *v) {
    if (!c->ncn) return -1;
    int32_t a = c->node_claim[sx_below(&c->rng, c->ncn)];
    int32_t b = -1;
    if (sx_rng(&c->rng) & 1) {
        const sx_stmt *t = &c->d.st[a];
        int32_t e = (t->obj >= 0 && (sx_rng(&c->rng) & 1)) ? t->obj : t->subj;
        int64_t ns = c->s_off[e + 1] - c->s_off[e], no = c->o_off[e + 1] - c->o_off[e];
        if (ns + no > 1) {
            int64_t j = (int64_t)sx_below(&c->rng, (uint64_t)(ns + no));
            int32_t cand = j < ns ? c->s_list[c->s_off[e] + j] : c->o_list[c->o_off[e] + j - ns];
            if (c->nid[cand] >= 0) b = cand;
        }
    }
    if (b < 0) b = c->node_claim[sx_below(&c->rng, c->ncn)];
    *u = c->nid[a], *v = c->nid[b];
    return 0;
}
static int pick_entities(ctx *c, int32_t *u, int32_t *v) {
    if (c->nen < 2) return -1;
    *u = (int32_t)(c->ncn + sx_below(&c->rng, c->nen));
    *v = (int32_t)(c->ncn + sx_below(&c->rng, c->nen));
    return 0;
}

static void write_pairs_task(ob *f, const char *name, const char *const *classes, int ncls, int directed,
                             const char *metric, const etask *t, const ctx *c, char **ids, const size_t *idl) {
    (void)c;
    obf(f, "{\"name\":\"%s\",\"kind\":\"edge\",\"directed\":%s,\"metric\":\"%s\",\"classes\":[", name,
            directed ? "true" : "false", metric);
    for (int i = 0; i < ncls; i++) obf(f, "%s\"%s\"", i ? "," : "", classes[i]);
    obf(f, "],\n\"pairs\":[");
    size_t k = 0;
    for (int sp = 0; sp < 3; sp++)
        for (size_t i = 0; i < t->split[sp].n; i++, k++) {
            const pair *p = &t->split[sp].p[i];
            obs(f, k ? ",\n[" : "\n[");
            obw(f, ids[p->u], idl[p->u]);
            obc(f, ',');
            obw(f, ids[p->v], idl[p->v]);
            obs(f, ",\"");
            obs(f, classes[p->cls]);
            obs(f, "\"]");
        }
    obf(f, "],\n\"splits\":[{");
    static const char *const SPN[3] = {"train", "val", "test"};
    size_t base = 0;
    for (int sp = 0; sp < 3; sp++) {
        obf(f, "%s\"%s\":[", sp ? "," : "", SPN[sp]);
        for (size_t i = 0; i < t->split[sp].n; i++) {
            if (i) obc(f, ',');
            obu(f, base + i);
        }
        obc(f, ']');
        base += t->split[sp].n;
    }
    obf(f, "}]}");
}

static size_t etask_n(const etask *t) { return t->split[0].n + t->split[1].n + t->split[2].n; }
static void etask_free(etask *t) {
    for (int i = 0; i < 3; i++) free(t->split[i].p);
}

static void digest_inputs(ctx *c, char out[72]) {
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    EVP_DigestInit_ex(m, EVP_sha256(), NULL);
    const donto_sheafx_opts *o = c->o;
    char head[512];
    int hl = snprintf(head, sizeof head, "donto-sheaf-export 2|%s|%lld|%lld|%s|%d|%lld|%s|%llu|%.6g|%d|%d",
                      donto_sheafx_seed_names[o->seed], (long long)o->as_of, (long long)o->until, o->model, o->hops,
                      (long long)o->max_nodes, donto_sheafx_missing_names[o->missing], (unsigned long long)o->rng_seed,
                      o->val_frac, o->neg_ratio, o->unsafe);
    EVP_DigestUpdate(m, head, (size_t)hl + 1);
    int dims = c->d.dims;
    for (size_t i = 0; i < c->nst; i++) {
        const sx_stmt *t = &c->d.st[i];
        EVP_DigestUpdate(m, t->uuid, 16);
        int64_t tv[2] = {t->from, t->until};
        EVP_DigestUpdate(m, tv, sizeof tv);
        uint8_t fl[2] = {t->sheaf, t->ident};
        EVP_DigestUpdate(m, fl, 2);
        const char *sj = c->d.ent.s[t->subj];
        EVP_DigestUpdate(m, sj, strlen(sj) + 1);
        if (t->obj >= 0) EVP_DigestUpdate(m, c->d.ent.s[t->obj], strlen(c->d.ent.s[t->obj]) + 1);
        else EVP_DigestUpdate(m, "", 1);
        if (t->vec >= 0) EVP_DigestUpdate(m, c->d.vecs + t->vec * dims, (size_t)dims * 4);
    }
    for (size_t k = 0; k < c->d.narg; k++) {
        const sx_arg *a = &c->d.arg[k];
        EVP_DigestUpdate(m, a->src, 16);
        EVP_DigestUpdate(m, a->dst, 16);
        int64_t tv[3] = {a->rel, a->from, a->until};
        EVP_DigestUpdate(m, tv, sizeof tv);
        EVP_DigestUpdate(m, &a->sheaf, 1);
    }
    for (size_t r = 0; r < c->d.ent.n; r++) {
        int32_t e = c->order[r];
        if (c->d.ent_vec[e] < 0) continue;
        EVP_DigestUpdate(m, c->d.ent.s[e], strlen(c->d.ent.s[e]) + 1);
        EVP_DigestUpdate(m, c->d.evecs + c->d.ent_vec[e] * dims, (size_t)dims * 4);
    }
    unsigned char h[32];
    EVP_DigestFinal_ex(m, h, NULL);
    EVP_MD_CTX_free(m);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++) sprintf(out + 7 + 2 * i, "%02x", h[i]);
}

/* Deterministic order (statements by uuid, entities by IRI), entity vector
 * rows, and arguments resolved to statement indices (then sorted). */
static void sort_and_resolve(ctx *c) {
    sx_data *d = &c->d;
    size_t n = d->nst, ne = d->ent.n;
    /* Deterministic order: statements by uuid, entities by IRI. */
    qsort(d->st, n, sizeof *d->st, cmp_stmt);
    c->order = donto_xmalloc((ne + 1) * sizeof *c->order);
    c->rank = donto_xmalloc((ne + 1) * sizeof *c->rank);
    {
        int32_t *tmp = donto_xmalloc((ne + 1) * sizeof *tmp);
        for (size_t i = 0; i < ne; i++) c->order[i] = (int32_t)i;
        msort_ent(c->order, tmp, ne, d->ent.s);
        free(tmp);
        for (size_t r = 0; r < ne; r++) c->rank[c->order[r]] = (int32_t)r;
    }
    d->ent_vec = donto_xmalloc((ne + 1) * sizeof *d->ent_vec);
    for (size_t e = 0; e < ne; e++) d->ent_vec[e] = -1;
    for (size_t k = 0; k < d->nevec; k++) d->ent_vec[d->evec_ent[k]] = (int64_t)k;
    /* Arguments: resolve their statements (a sorted uuid -> index map). */
    {
        for (size_t k = 0; k < d->narg; k++) {
            sx_arg *a = &d->arg[k];
            sx_stmt key;
            memcpy(key.uuid, a->src, 16);
            sx_stmt *hs = bsearch(&key, d->st, n, sizeof *d->st, cmp_stmt);
            memcpy(key.uuid, a->dst, 16);
            sx_stmt *hd = bsearch(&key, d->st, n, sizeof *d->st, cmp_stmt);
            a->s = hs ? (int32_t)(hs - d->st) : -1;
            a->d = hd ? (int32_t)(hd - d->st) : -1;
        }
        qsort(d->arg, d->narg, sizeof *d->arg, cmp_arg);
    }
}

/* Claim-claim edges through shared entities (shares_subject, shares_object,
 * shares_entity) between claim nodes (c->nid), in entity IRI order. */
static void entity_edges(const ctx *c, graph *gp) {
    const sx_data *d = &c->d;
    size_t ne = d->ent.n;
    for (size_t r = 0; r < ne; r++) {
        int32_t e = c->order[r];
        int32_t sl[64], ol[64];
        int64_t ns = 0, no = 0;
        /* Node claims naming e; a list of more than 6 links each claim to the next 3 in uuid
         * order (and subject/object lists by a round robin), so an entity
         * named by m claims gives O(m) edges, not O(m^2). */
        int32_t *S = NULL, *O = NULL;
        int64_t cs = c->s_off[e + 1] - c->s_off[e], co = c->o_off[e + 1] - c->o_off[e];
        S = cs <= 64 ? sl : donto_xmalloc((size_t)cs * sizeof *S);
        O = co <= 64 ? ol : donto_xmalloc((size_t)co * sizeof *O);
        for (int64_t j = c->s_off[e]; j < c->s_off[e + 1]; j++)
            if (c->nid[c->s_list[j]] >= 0) S[ns++] = c->nid[c->s_list[j]];
        for (int64_t j = c->o_off[e]; j < c->o_off[e + 1]; j++)
            if (c->nid[c->o_list[j]] >= 0) O[no++] = c->nid[c->o_list[j]];
        int W = 3;
        for (int64_t i = 0; i < ns; i++)
            for (int64_t j = i + 1; j < ns && (ns <= 6 || j <= i + W); j++) add_edge(gp, S[i], S[j], ET_SUBJ);
        for (int64_t i = 0; i < no; i++)
            for (int64_t j = i + 1; j < no && (no <= 6 || j <= i + W); j++) add_edge(gp, O[i], O[j], ET_OBJ);
        if (ns && no) {
            if (ns * no <= 16) {
                for (int64_t i = 0; i < ns; i++)
                    for (int64_t j = 0; j < no; j++) add_edge(gp, S[i], O[j], ET_ENT);
            } else {
                int64_t m = ns > no ? ns : no;
                for (int64_t i = 0; i < m; i++) add_edge(gp, S[i % ns], O[i % no], ET_ENT);
            }
        }
        if (S != sl) free(S);
        if (O != ol) free(O);
    }
}

/* The graph's edges: arguments known at as_of between claim nodes, the claims that share an
 * entity (entity_edges), and each claim's mentions of its entity nodes. */
static void graph_edges(const ctx *c, graph *g) {
    const sx_data *d = &c->d;
    for (size_t k = 0; k < d->narg; k++) {
        const sx_arg *a = &d->arg[k];
        if (arg_usable(c, a) && arg_known(c, a) && c->nid[a->s] >= 0 && c->nid[a->d] >= 0)
            add_edge(g, c->nid[a->s], c->nid[a->d], a->rel);
    }
    entity_edges(c, g);
    if (c->nen)
        for (size_t j = 0; j < c->ncn; j++) {
            const sx_stmt *t = &d->st[c->node_claim[j]];
            if (c->eid[t->subj] >= 0) add_edge(g, (int32_t)j, c->eid[t->subj], ET_MENTION);
            if (t->obj >= 0 && c->eid[t->obj] >= 0) add_edge(g, (int32_t)j, c->eid[t->obj], ET_MENTION);
        }
}

static void progress(const ctx *c, const char *phase, int64_t done, int64_t total) {
    if (c->o->progress) c->o->progress(c->o->ctx, phase, done, total);
}

int donto_sheafx_export(donto_store *s, const donto_sheafx_opts *o, FILE *out, donto_sheafx_stats *st,
                        donto_err *err) {
    donto_sheafx_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    double t0 = donto_now();
    if (o->until <= o->as_of) return donto_seterrc(err, DONTO_E_INVALID, "until must be later than as_of");
    if (o->seed < 0 || o->seed > DONTO_SHEAFX_SEED_IDENTITY) return donto_seterrc(err, DONTO_E_INVALID, "unknown seed");
    if (!o->model || !*o->model) return donto_seterrc(err, DONTO_E_INVALID, "no model named");
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    ctx C = {0}, *c = &C;
    c->o = o;
    c->rng = o->rng_seed ^ 0x5eaf5eaf5eaf5eafULL;
    int rc = db.kind == DONTO_DB_POSTGRES ? sx_read_pg(s, o, &c->d, err) : sx_read_sqlite(s, o, &c->d, err);
    etask arg = {0}, idt = {0};
    pairs score[3] = {{0}};
    graph g = {0};
    pset forbid = {0}, used = {0}, known = {0}, iforbid = {0}, iused = {0}, iknown = {0};
    char **ids = NULL;
    size_t *idl = NULL;
    if (rc) goto out;
    progress(c, "read", (int64_t)c->d.nst, (int64_t)c->d.nst);
    st->read_s = donto_now() - t0;
    sx_data *d = &c->d;
    c->nst = d->nst;
    size_t n = d->nst, ne = d->ent.n;
    st->statements_read = (int64_t)n;
    st->arguments_read = (int64_t)d->narg;
    st->dims = d->dims;
    if (d->nvec == 0) {
        rc = sx_no_vectors(o->model, err);
        goto out;
    }
    sort_and_resolve(c);
    digest_inputs(c, st->digest);
    /* Eligible claims (the as-of and sheaf rules), and what the filter took out. */
    c->elig = donto_xcalloc(n + 1, 1);
    c->sel = donto_xcalloc(n + 1, 1);
    c->seed_ent = donto_xcalloc(c->d.ent.n + 1, 1);
    int32_t *subj = donto_xmalloc((n + 1) * sizeof *subj), *obj = donto_xmalloc((n + 1) * sizeof *obj);
    for (size_t i = 0; i < n; i++) {
        c->elig[i] = (uint8_t)eligible(c, &d->st[i]);
        subj[i] = d->st[i].subj, obj[i] = d->st[i].obj;
        if (d->st[i].sheaf) st->sheaf_statements++;
    }
    for (size_t k = 0; k < d->narg; k++)
        if (d->arg[k].sheaf) st->sheaf_arguments++;
    build_csr(&c->s_off, &c->s_list, ne, subj, c->elig, n);
    build_csr(&c->o_off, &c->o_list, ne, obj, c->elig, n);
    free(subj), free(obj);
    /* Graph arguments per claim (known at as_of), both directions. */
    {
        int64_t *o2 = donto_xcalloc(n + 1, sizeof *o2);
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (arg_usable(c, a) && arg_known(c, a)) o2[a->s + 1]++, o2[a->d + 1]++;
        }
        for (size_t i = 0; i < n; i++) o2[i + 1] += o2[i];
        int32_t *l = donto_xmalloc(((size_t)o2[n] + 1) * sizeof *l);
        int64_t *fill = donto_xmalloc((n + 1) * sizeof *fill);
        memcpy(fill, o2, (n + 1) * sizeof *fill);
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (arg_usable(c, a) && arg_known(c, a)) l[fill[a->s]++] = a->d, l[fill[a->d]++] = a->s;
        }
        free(fill);
        c->a_off = o2, c->a_list = l;
    }
    int64_t nsel = select_nodes(c);
    progress(c, "selected", nsel, nsel);
    if (nsel == 0) {
        rc = donto_seterrc(err, DONTO_E_NOT_FOUND,
                           "empty graph: no claim live at as_of is a seed for '%s' (%zu statements read, "
                           "%lld arguments; check --as-of, --until and --seed)",
                           donto_sheafx_seed_names[o->seed], n, (long long)d->narg);
        goto out;
    }
    /* Features: the missing-vector rule; node ids for claims. */
    c->nid = donto_xmalloc((n + 1) * sizeof *c->nid);
    c->node_claim = donto_xmalloc((n + 1) * sizeof *c->node_claim);
    for (size_t i = 0; i < n; i++) {
        c->nid[i] = -1;
        if (!c->sel[i]) continue;
        st->claims++;
        if (d->st[i].vec >= 0) st->claims_with_vector++;
        else if (o->missing == DONTO_SHEAFX_MISSING_SKIP) {
            st->claims_skipped++;
            c->sel[i] = 0;
            continue;
        } else st->claims_zero++;
        c->nid[i] = (int32_t)c->ncn;
        c->node_claim[c->ncn++] = (int32_t)i;
    }
    if (c->ncn == 0) {
        rc = donto_seterrc(err, DONTO_E_NOT_FOUND,
                           "empty graph: none of the %lld selected claims has a vector for model '%s' "
                           "(--missing zero keeps them with zero features)",
                           (long long)st->claims, o->model);
        goto out;
    }
    /* ---- arg_link ---- */
    for (size_t k = 0; k < d->narg; k++) { /* every argued pair, any time, any context */
        const sx_arg *a = &d->arg[k];
        if (a->s >= 0 && a->d >= 0 && c->nid[a->s] >= 0 && c->nid[a->d] >= 0) ps_add(&forbid, ukey(c->nid[a->s], c->nid[a->d]), 0);
    }
    {
        pairs kp = {0};
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (!arg_usable(c, a) || !arg_known(c, a) || c->nid[a->s] < 0 || c->nid[a->d] < 0) continue;
            int32_t u = c->nid[a->s], v = c->nid[a->d];
            if (!ps_add(&known, ukey(u, v), 0)) continue; /* one example per pair */
            pairs_add(&kp, u, v, 1 + a->rel);
        }
        shuffle(kp.p, kp.n, &c->rng);
        size_t nval = (size_t)(o->val_frac * (double)kp.n + 0.5);
        for (size_t i = 0; i < kp.n; i++) {
            int sp = i < nval ? 1 : 0;
            pairs_add(&arg.split[sp], kp.p[i].u, kp.p[i].v, kp.p[i].cls);
            ps_add(&used, ukey(kp.p[i].u, kp.p[i].v), sp);
        }
        free(kp.p);
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (!arg_usable(c, a) || arg_known(c, a) || a->from <= o->as_of || a->from > o->until) continue;
            if (c->nid[a->s] < 0 || c->nid[a->d] < 0) continue;
            int32_t u = c->nid[a->s], v = c->nid[a->d];
            if (ps_get(&known, ukey(u, v)) || !ps_add(&used, ukey(u, v), 2)) continue;
            pairs_add(&arg.split[2], u, v, 1 + a->rel);
        }
        size_t npos[3] = {arg.split[0].n, arg.split[1].n, arg.split[2].n};
        for (int sp = 0; sp < 3; sp++)
            add_negatives(c, &arg, sp, npos[sp] * (size_t)o->neg_ratio, pick_claims, &forbid, &used, 0);
        for (int sp = 0; sp < 3; sp++) st->arg_pairs[sp] = (int64_t)arg.split[sp].n;
    }
    /* ---- identity ---- */
    c->eid = donto_xmalloc((ne + 1) * sizeof *c->eid);
    for (size_t e = 0; e < ne; e++) c->eid[e] = -1;
    {
        uint8_t *mentioned = donto_xcalloc(ne + 1, 1);
        for (size_t e = 0; e < ne; e++) mentioned[e] = c->seed_ent[e];
        for (size_t j = 0; j < c->ncn; j++) {
            const sx_stmt *t = &d->st[c->node_claim[j]];
            mentioned[t->subj] = 1;
            if (t->obj >= 0) mentioned[t->obj] = 1;
        }
        /* Candidate evidence: identity statements between mentioned entities. */
        int any = 0;
        for (size_t i = 0; i < n && !any; i++) {
            const sx_stmt *t = &d->st[i];
            if (!t->ident || t->obj < 0 || t->obj == t->subj || !mentioned[t->subj] || !mentioned[t->obj]) continue;
            if (t->sheaf && !(o->unsafe & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER)) continue;
            if (t->from <= o->until) any = 1;
        }
        if (any) {
            c->node_ent = donto_xmalloc((ne + 1) * sizeof *c->node_ent);
            for (size_t r = 0; r < ne; r++) {
                int32_t e = c->order[r];
                if (!mentioned[e]) continue;
                st->entities++;
                if (d->ent_vec[e] >= 0) st->entities_with_vector++;
                else if (o->missing == DONTO_SHEAFX_MISSING_SKIP) {
                    st->entities_skipped++;
                    continue;
                } else st->entities_zero++;
                c->eid[e] = (int32_t)(c->ncn + c->nen);
                c->node_ent[c->nen++] = e;
            }
            for (size_t i = 0; i < n; i++) { /* every identity pair by until is off limits for "distinct" */
                const sx_stmt *t = &d->st[i];
                if (t->ident && t->obj >= 0 && c->eid[t->subj] >= 0 && c->eid[t->obj] >= 0)
                    ps_add(&iforbid, ukey(c->eid[t->subj], c->eid[t->obj]), 0);
            }
            pairs kp = {0};
            for (size_t i = 0; i < n; i++) {
                const sx_stmt *t = &d->st[i];
                if (!t->ident || t->obj < 0 || c->eid[t->subj] < 0 || c->eid[t->obj] < 0 || t->subj == t->obj) continue;
                if (t->sheaf && !(o->unsafe & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER)) continue;
                if (t->until <= o->as_of) continue;
                if (t->from > o->as_of && !(o->unsafe & DONTO_SHEAFX_UNSAFE_NO_ASOF)) continue;
                int32_t u = c->eid[t->subj], v = c->eid[t->obj];
                if (ps_add(&iknown, ukey(u, v), 0)) pairs_add(&kp, u, v, 1);
            }
            shuffle(kp.p, kp.n, &c->rng);
            size_t nval = (size_t)(o->val_frac * (double)kp.n + 0.5);
            for (size_t i = 0; i < kp.n; i++) {
                int sp = i < nval ? 1 : 0;
                pairs_add(&idt.split[sp], kp.p[i].u, kp.p[i].v, 1);
                ps_add(&iused, ukey(kp.p[i].u, kp.p[i].v), sp);
            }
            free(kp.p);
            for (size_t i = 0; i < n; i++) {
                const sx_stmt *t = &d->st[i];
                if (!t->ident || t->obj < 0 || c->eid[t->subj] < 0 || c->eid[t->obj] < 0 || t->subj == t->obj) continue;
                if (t->sheaf && !(o->unsafe & DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER)) continue;
                if (t->from <= o->as_of || t->from > o->until) continue;
                int32_t u = c->eid[t->subj], v = c->eid[t->obj];
                if (ps_get(&iknown, ukey(u, v)) || !ps_add(&iused, ukey(u, v), 2)) continue;
                pairs_add(&idt.split[2], u, v, 1);
            }
            size_t npos[3] = {idt.split[0].n, idt.split[1].n, idt.split[2].n};
            for (int sp = 0; sp < 3; sp++)
                add_negatives(c, &idt, sp, npos[sp] * (size_t)o->neg_ratio, pick_entities, &iforbid, &iused, 0);
            for (int sp = 0; sp < 3; sp++) st->identity_pairs[sp] = (int64_t)idt.split[sp].n;
        }
        free(mentioned);
    }
    /* ---- claim_score: retracted in (as_of, until] against still live ---- */
    {
        int any = 0;
        for (size_t j = 0; j < c->ncn && !any; j++) any = d->st[c->node_claim[j]].until <= o->until;
        if (any) {
            pairs all = {0};
            for (size_t j = 0; j < c->ncn; j++) pairs_add(&all, (int32_t)j, -1, d->st[c->node_claim[j]].until <= o->until);
            shuffle(all.p, all.n, &c->rng);
            size_t ntr = (size_t)(0.6 * (double)all.n + 0.5), nva = (size_t)(0.2 * (double)all.n + 0.5);
            for (size_t i = 0; i < all.n; i++) {
                int sp = i < ntr ? 0 : i < ntr + nva ? 1 : 2;
                pairs_add(&score[sp], all.p[i].u, -1, all.p[i].cls);
                st->score_labels[sp]++;
            }
            free(all.p);
        }
    }
    /* ---- graph edges ---- */
    graph_edges(c, &g);
    /* No val/test pair is a graph edge, in either direction. */
    if (!(o->unsafe & DONTO_SHEAFX_UNSAFE_KEEP_PAIR_EDGES)) {
        etask *ts[2] = {&arg, &idt};
        for (int ti = 0; ti < 2; ti++)
            for (int sp = 1; sp < 3; sp++)
                for (size_t i = 0; i < ts[ti]->split[sp].n; i++) {
                    const pair *p = &ts[ti]->split[sp].p[i];
                    int32_t *ei = ps_get(&g.idx, ukey(p->u, p->v));
                    if (ei && !g.e[*ei].removed) g.e[*ei].removed = 1, st->edges_removed_for_pairs++;
                }
    }
    for (size_t k = 0; k < g.n; k++) st->edges += !g.e[k].removed;
    progress(c, "graph built", st->edges, st->edges);
    /* ---- write ---- */
    st->build_s = donto_now() - t0 - st->read_s;
    {
        size_t nn = c->ncn + c->nen;
        ids = donto_xmalloc((nn + 1) * sizeof *ids);
        idl = donto_xmalloc((nn + 1) * sizeof *idl);
        for (size_t j = 0; j < c->ncn; j++) {
            char u[37];
            sx_format_uuid(d->st[c->node_claim[j]].uuid, u);
            ids[j] = donto_xmalloc(44);
            snprintf(ids[j], 44, "claim:%s", u);
        }
        for (size_t j = 0; j < c->nen; j++) {
            const char *iri = d->ent.s[c->node_ent[j]];
            size_t l = strlen(iri) + 8;
            ids[c->ncn + j] = donto_xmalloc(l);
            snprintf(ids[c->ncn + j], l, "entity:%s", iri);
        }
        /* ids quoted once: "claim:<uuid>", "entity:<iri>" */
        for (size_t j = 0; j < nn; j++) {
            size_t l;
            char *q = json_quote(ids[j], &l);
            free(ids[j]);
            ids[j] = q, idl[j] = l;
        }
        ob F = {.f = out, .cap = 1 << 20}, *f = &F;
        F.b = donto_xmalloc(F.cap);
        char ta[32], tu[32];
        donto_sheafx_format_time(o->as_of, ta);
        donto_sheafx_format_time(o->until, tu);
        int dims = d->dims;
        obf(f, "{\"format\":\"donto-sheaf-graph\",\"version\":2,\n\"provenance\":{\"source\":\"donto substrate\","
                   "\"exporter\":\"donto-sheaf export %s\",\"embedding_model\":",
                DONTO_VERSION);
        { size_t l; char *q = json_quote(o->model, &l); obw(f, q, l); free(q); }
        obf(f, "},\n\"export\":{\"seed\":\"%s\",\"as_of\":\"%s\",\"until\":\"%s\",\"model\":",
                donto_sheafx_seed_names[o->seed], ta, tu);
        { size_t l; char *q = json_quote(o->model, &l); obw(f, q, l); free(q); }
        obf(f,
                ",\"hops\":%d,\"max_nodes\":%lld,\"missing\":\"%s\",\n\"coverage\":{\"claims\":%lld,\"with_vector\":%lld,"
                "\"skipped\":%lld,\"zero\":%lld,\"entities\":%lld,\"entities_with_vector\":%lld,"
                "\"entities_skipped\":%lld,\"entities_zero\":%lld},\n\"filtered\":{\"sheaf_written_statements\":%lld,"
                "\"sheaf_written_arguments\":%lld,\"edges_between_heldout_pairs\":%lld},\n\"inputs_digest\":\"%s\","
                "\"store\":\"%s\",\"seed_rng\":%llu,\"val_frac\":%.6g,\"neg_ratio\":%d,\"sheaf_context_prefix\":\"%s\"%s},\n",
                o->hops, (long long)o->max_nodes, donto_sheafx_missing_names[o->missing], (long long)st->claims,
                (long long)st->claims_with_vector, (long long)st->claims_skipped, (long long)st->claims_zero,
                (long long)st->entities, (long long)st->entities_with_vector, (long long)st->entities_skipped,
                (long long)st->entities_zero, (long long)st->sheaf_statements, (long long)st->sheaf_arguments,
                (long long)st->edges_removed_for_pairs, st->digest, db.kind == DONTO_DB_POSTGRES ? "postgres" : "sqlite",
                (unsigned long long)o->rng_seed, o->val_frac, o->neg_ratio, DONTO_SHEAF_CONTEXT_PREFIX,
                o->unsafe ? ",\"unsafe\":true" : "");
        obf(f, "\"feature_dim\":%d,\n\"nodes\":[", dims);
        for (size_t j = 0; j < nn; j++) {
            obs(f, j ? ",\n{\"id\":" : "\n{\"id\":");
            obw(f, ids[j], idl[j]);
            const float *v = NULL;
            if (j < c->ncn) {
                int64_t r = d->st[c->node_claim[j]].vec;
                if (r >= 0) v = d->vecs + r * dims;
                obs(f, ",\"kind\":\"claim\",\"features\":");
            } else {
                int64_t r = d->ent_vec[c->node_ent[j - c->ncn]];
                if (r >= 0) v = d->evecs + r * dims;
                obs(f, ",\"kind\":\"entity\",\"features\":");
            }
            put_floats(f, v, dims);
            obc(f, '}');
            if ((j & 65535) == 65535) progress(c, "nodes written", (int64_t)j + 1, (int64_t)nn);
        }
        obf(f, "],\n\"edge_types\":[");
        for (int k = 0; k < 9; k++) obf(f, "%s\"%s\"", k ? "," : "", EDGE_TYPES[k]);
        obf(f, "],\n\"edges\":[");
        size_t w = 0;
        for (size_t k = 0; k < g.n; k++) {
            if (g.e[k].removed) continue;
            obs(f, w++ ? ",\n{\"src\":" : "\n{\"src\":");
            obw(f, ids[g.e[k].u], idl[g.e[k].u]);
            obs(f, ",\"dst\":");
            obw(f, ids[g.e[k].v], idl[g.e[k].v]);
            obs(f, ",\"type\":\"");
            obs(f, EDGE_TYPES[g.e[k].type]);
            obs(f, "\"}");
        }
        obf(f, "],\n\"tasks\":[");
        static const char *const ARG_CLASSES[] = {"none", "supports", "rebuts", "undercuts", "undermines", "qualifies"};
        static const char *const ID_CLASSES[] = {"distinct", "same"};
        int nt = 0;
        if (etask_n(&arg)) {
            write_pairs_task(f, "arg_link", ARG_CLASSES, 6, 1, "macro_f1", &arg, c, ids, idl);
            nt++;
        }
        if (etask_n(&idt)) {
            obs(f, nt ? ",\n" : "\n");
            write_pairs_task(f, "identity", ID_CLASSES, 2, 0, "roc_auc", &idt, c, ids, idl);
            nt++;
        }
        if (score[0].n + score[1].n + score[2].n) {
            obs(f, nt ? ",\n" : "\n");
            obf(f, "{\"name\":\"claim_score\",\"kind\":\"node\",\"metric\":\"roc_auc\",\"classes\":[\"live\",\"retracted\"],\n\"labels\":{");
            size_t k = 0;
            for (int sp = 0; sp < 3; sp++)
                for (size_t i = 0; i < score[sp].n; i++, k++) {
                    obs(f, k ? ",\n" : "\n");
                    obw(f, ids[score[sp].p[i].u], idl[score[sp].p[i].u]);
                    obs(f, score[sp].p[i].cls ? ":1" : ":0");
                }
            obf(f, "},\n\"splits\":[{");
            static const char *const SPN[3] = {"train", "val", "test"};
            for (int sp = 0; sp < 3; sp++) {
                obf(f, "%s\"%s\":[", sp ? "," : "", SPN[sp]);
                for (size_t i = 0; i < score[sp].n; i++) {
                    if (i) obc(f, ',');
                    obw(f, ids[score[sp].p[i].u], idl[score[sp].p[i].u]);
                }
                obc(f, ']');
            }
            obf(f, "}]}");
            nt++;
        }
        obf(f, "]}\n");
        ob_flush(f);
        free(F.b);
        if (F.err || fflush(out) || ferror(out)) rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "writing the export failed");
        for (size_t j = 0; j < nn; j++) free(ids[j]);
    }
out:
    st->seconds = donto_now() - t0;
    if (rc == 0) st->write_s = st->seconds - st->read_s - st->build_s;
    free(ids), free(idl);
    etask_free(&arg), etask_free(&idt);
    for (int i = 0; i < 3; i++) free(score[i].p);
    free(g.e), ps_free(&g.idx);
    ps_free(&forbid), ps_free(&used), ps_free(&known), ps_free(&iforbid), ps_free(&iused), ps_free(&iknown);
    free(c->elig), free(c->sel), free(c->seed_ent), free(c->rank), free(c->order);
    free(c->s_off), free(c->s_list), free(c->o_off), free(c->o_list), free(c->a_off), free(c->a_list);
    free(c->nid), free(c->eid), free(c->node_claim), free(c->node_ent);
    sx_data_free(&c->d);
    return rc;
}

/* ---- the live graph (for scoring: donto_sheafx_live_read) ----------------------------
 * The same read, filters and edges as the export, at one instant (as_of): every claim
 * live then (not sheaf-written, not identity evidence, with a vector) is a node, the
 * entities they name are nodes when the model has entity vectors, and the edges are the
 * export's (graph arguments known at as_of, shared entities, mentions). No seeds, no
 * hops, no tasks, no splits: the scorer picks its batches from this. */

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

int donto_sheafx_live_read(donto_store *s, const donto_sheafx_opts *oin, int64_t since, donto_sheafx_live *L,
                           donto_err *err) {
    memset(L, 0, sizeof *L);
    double t0 = donto_now();
    if (!oin->model || !*oin->model) return donto_seterrc(err, DONTO_E_INVALID, "no model named");
    donto_sheafx_opts o = *oin;
    o.until = o.as_of; /* read what was asserted by as_of */
    o.unsafe = 0;
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    ctx C = {0}, *c = &C;
    c->o = &o;
    graph g = {0};
    int rc = db.kind == DONTO_DB_POSTGRES ? sx_read_pg(s, &o, &c->d, err) : sx_read_sqlite(s, &o, &c->d, err);
    if (rc) goto out;
    progress(c, "read", (int64_t)c->d.nst, (int64_t)c->d.nst);
    sx_data *d = &c->d;
    size_t n = d->nst, ne = d->ent.n;
    c->nst = n;
    L->statements_read = (int64_t)n, L->arguments_read = (int64_t)d->narg;
    L->as_of = o.as_of, L->since = since, L->dims = d->dims;
    if (d->nvec == 0) {
        rc = sx_no_vectors(o.model, err);
        goto out;
    }
    sort_and_resolve(c);
    /* The watermark: the newest tx time at or before as_of of any row read. */
    int64_t wm = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        const sx_stmt *t = &d->st[i];
        if (t->from <= o.as_of) wm = imax(wm, t->from);
        if (t->until != SX_OPEN && t->until <= o.as_of) wm = imax(wm, t->until);
        if (t->sheaf) L->sheaf_statements++;
    }
    for (size_t k = 0; k < d->narg; k++) {
        const sx_arg *a = &d->arg[k];
        if (a->from <= o.as_of) wm = imax(wm, a->from);
        if (a->until != SX_OPEN && a->until <= o.as_of) wm = imax(wm, a->until);
        if (a->sheaf) L->sheaf_arguments++;
    }
    L->watermark = wm == INT64_MIN ? since : wm;
    c->elig = donto_xcalloc(n + 1, 1);
    int32_t *subj = donto_xmalloc((n + 1) * sizeof *subj), *obj = donto_xmalloc((n + 1) * sizeof *obj);
    for (size_t i = 0; i < n; i++) {
        c->elig[i] = (uint8_t)eligible(c, &d->st[i]);
        subj[i] = d->st[i].subj, obj[i] = d->st[i].obj;
    }
    build_csr(&c->s_off, &c->s_list, ne, subj, c->elig, n);
    build_csr(&c->o_off, &c->o_list, ne, obj, c->elig, n);
    free(subj), free(obj);
    /* Claim nodes: eligible, with a vector (the export's --missing skip). */
    c->nid = donto_xmalloc((n + 1) * sizeof *c->nid);
    c->node_claim = donto_xmalloc((n + 1) * sizeof *c->node_claim);
    for (size_t i = 0; i < n; i++) {
        c->nid[i] = -1;
        if (!c->elig[i] || d->st[i].vec < 0) continue;
        c->nid[i] = (int32_t)c->ncn;
        c->node_claim[c->ncn++] = (int32_t)i;
    }
    if (c->ncn == 0) {
        rc = donto_seterrc(err, DONTO_E_NOT_FOUND, "no live claim has a vector for model '%s'", o.model);
        goto out;
    }
    /* Entity nodes: named by a claim node, with a vector, in IRI order. */
    c->eid = donto_xmalloc((ne + 1) * sizeof *c->eid);
    for (size_t e = 0; e < ne; e++) c->eid[e] = -1;
    if (d->nevec) {
        uint8_t *named = donto_xcalloc(ne + 1, 1);
        for (size_t j = 0; j < c->ncn; j++) {
            const sx_stmt *t = &d->st[c->node_claim[j]];
            named[t->subj] = 1;
            if (t->obj >= 0) named[t->obj] = 1;
        }
        c->node_ent = donto_xmalloc((ne + 1) * sizeof *c->node_ent);
        for (size_t r = 0; r < ne; r++) {
            int32_t e = c->order[r];
            if (!named[e] || d->ent_vec[e] < 0) continue;
            c->eid[e] = (int32_t)(c->ncn + c->nen);
            c->node_ent[c->nen++] = e;
        }
        free(named);
    }
    /* Edges: the export's. */
    graph_edges(c, &g);
    /* What changed after since: claims asserted after it; claims naming an entity of a
     * statement retracted in (since, as_of]; the ends of arguments asserted or retracted
     * in (since, as_of]. */
    L->changed = donto_xcalloc(c->ncn + 1, 1);
    {
        uint8_t *touched = donto_xcalloc(ne + 1, 1);
        for (size_t i = 0; i < n; i++) {
            const sx_stmt *t = &d->st[i];
            if (t->sheaf || t->until == SX_OPEN || t->until <= since || t->until > o.as_of) continue;
            L->retracted_since++;
            touched[t->subj] = 1;
            if (t->obj >= 0) touched[t->obj] = 1;
        }
        for (size_t j = 0; j < c->ncn; j++) {
            const sx_stmt *t = &d->st[c->node_claim[j]];
            if (t->from > since || touched[t->subj] || (t->obj >= 0 && touched[t->obj])) L->changed[j] = 1;
        }
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (a->sheaf || a->s < 0 || a->d < 0) continue;
            int moved = (a->from > since && a->from <= o.as_of) ||
                        (a->until != SX_OPEN && a->until > since && a->until <= o.as_of);
            if (!moved) continue;
            if (c->nid[a->s] >= 0) L->changed[c->nid[a->s]] = 1;
            if (c->nid[a->d] >= 0) L->changed[c->nid[a->d]] = 1;
        }
        free(touched);
        for (size_t j = 0; j < c->ncn; j++) L->nchanged += L->changed[j];
    }
    /* Argued claim pairs (any relation, time or context) and identity pairs of entity nodes. */
    {
        size_t na = 0;
        L->argued = donto_xmalloc((2 * d->narg + 2) * sizeof *L->argued);
        for (size_t k = 0; k < d->narg; k++) {
            const sx_arg *a = &d->arg[k];
            if (a->s < 0 || a->d < 0 || c->nid[a->s] < 0 || c->nid[a->d] < 0) continue;
            L->argued[2 * na] = c->nid[a->s], L->argued[2 * na + 1] = c->nid[a->d], na++;
        }
        L->nargued = na;
        size_t ni = 0, capi = 0;
        for (size_t i = 0; i < n; i++) {
            const sx_stmt *t = &d->st[i];
            if (!t->ident || t->obj < 0 || c->eid[t->subj] < 0 || c->eid[t->obj] < 0) continue;
            if (ni == capi) L->ident = donto_xrealloc(L->ident, (capi = capi ? 2 * capi : 256) * 2 * sizeof *L->ident);
            L->ident[2 * ni] = c->eid[t->subj], L->ident[2 * ni + 1] = c->eid[t->obj], ni++;
        }
        L->nident = ni;
    }
    /* Out: items, features, per-claim ends, edges. */
    {
        int dims = d->dims;
        size_t nn = c->ncn + c->nen;
        L->nclaims = c->ncn, L->nentities = c->nen;
        L->item = donto_xmalloc((nn + 1) * sizeof *L->item);
        L->x = donto_xmalloc((nn * (size_t)dims + 1) * sizeof *L->x);
        L->subj = donto_xmalloc((c->ncn + 1) * sizeof *L->subj);
        L->obj = donto_xmalloc((c->ncn + 1) * sizeof *L->obj);
        for (size_t j = 0; j < c->ncn; j++) {
            const sx_stmt *t = &d->st[c->node_claim[j]];
            L->item[j] = donto_xmalloc(37);
            sx_format_uuid(t->uuid, L->item[j]);
            memcpy(L->x + j * (size_t)dims, d->vecs + t->vec * dims, (size_t)dims * sizeof *L->x);
            L->subj[j] = c->eid[t->subj];
            L->obj[j] = t->obj >= 0 ? c->eid[t->obj] : -1;
        }
        for (size_t j = 0; j < c->nen; j++) {
            int32_t e = c->node_ent[j];
            L->item[c->ncn + j] = donto_xstrdup(d->ent.s[e]);
            memcpy(L->x + (c->ncn + j) * (size_t)dims, d->evecs + d->ent_vec[e] * dims, (size_t)dims * sizeof *L->x);
        }
        L->nedges = g.n;
        L->src = donto_xmalloc((g.n + 1) * sizeof *L->src);
        L->dst = donto_xmalloc((g.n + 1) * sizeof *L->dst);
        L->etype = donto_xmalloc(g.n + 1);
        for (size_t k = 0; k < g.n; k++) L->src[k] = g.e[k].u, L->dst[k] = g.e[k].v, L->etype[k] = (uint8_t)g.e[k].type;
    }
    progress(c, "live graph built", (int64_t)L->nedges, (int64_t)L->nedges);
out:
    L->seconds = donto_now() - t0;
    free(g.e), ps_free(&g.idx);
    free(c->elig), free(c->sel), free(c->seed_ent), free(c->rank), free(c->order);
    free(c->s_off), free(c->s_list), free(c->o_off), free(c->o_list), free(c->a_off), free(c->a_list);
    free(c->nid), free(c->eid), free(c->node_claim), free(c->node_ent);
    sx_data_free(&c->d);
    if (rc) donto_sheafx_live_free(L);
    return rc;
}

void donto_sheafx_live_free(donto_sheafx_live *L) {
    if (!L) return;
    if (L->item)
        for (size_t j = 0; j < L->nclaims + L->nentities; j++) free(L->item[j]);
    free(L->item), free(L->x), free(L->src), free(L->dst), free(L->etype), free(L->subj), free(L->obj);
    free(L->changed), free(L->argued), free(L->ident);
    memset(L, 0, sizeof *L);
}
