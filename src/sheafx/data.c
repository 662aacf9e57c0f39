/* donto-accel: the sheaf export's row store (flat arrays the readers fill),
 * interned entity IRIs, uuids, times and option defaults. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/models.h"
#include "donto/substrate.h"
#include "sheafx_int.h"

const char *const donto_sheafx_seed_names[5] = {"arguments", "frontier", "incompatibilities", "identity", NULL};
const char *const donto_sheafx_missing_names[3] = {"skip", "zero", NULL};
const char *const SX_REL_NAMES[SX_NREL] = {"supports", "rebuts", "undercuts", "undermines", "qualifies"};

/* Identity evidence (docs/sheaf.md "Export"): owl:sameAs and skos:exactMatch
 * in both spellings, and WordNet's near-synonymy between synsets
 * (similar_to: adjective satellites; verb_group: verbs of one sense group),
 * since WordNet's synonymy proper is within a synset, i.e. one entity. */
const char *const SX_IDENTITY_PREDICATES[] = {"owl:sameAs",
                                              "http://www.w3.org/2002/07/owl#sameAs",
                                              "skos:exactMatch",
                                              "http://www.w3.org/2004/02/skos/core#exactMatch",
                                              "wn:similar_to",
                                              "wn:verb_group",
                                              NULL};

int sx_rel_parse(const char *s, size_t n) {
    for (int i = 0; i < SX_NREL; i++)
        if (strlen(SX_REL_NAMES[i]) == n && !memcmp(SX_REL_NAMES[i], s, n)) return i;
    return -1;
}

void donto_sheafx_opts_init(donto_sheafx_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = DONTO_SHEAFX_SEED_ARGUMENTS;
    o->model = DONTO_DEFAULT_MODEL;
    o->hops = 1;
    o->max_nodes = 50000;
    o->missing = DONTO_SHEAFX_MISSING_SKIP;
    o->rng_seed = 1;
    o->val_frac = 0.2;
    o->neg_ratio = 1;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

int32_t sx_intern(sx_strtab *t, const char *s, size_t len) {
    if (2 * (t->n + 1) > t->nslot) {
        size_t ns = t->nslot ? 2 * t->nslot : 1024;
        int32_t *slot = donto_xcalloc(ns, sizeof *slot);
        for (size_t i = 0; i < t->n; i++) {
            size_t h = t->h[i] & (ns - 1);
            while (slot[h]) h = (h + 1) & (ns - 1);
            slot[h] = (int32_t)i + 1;
        }
        free(t->slot);
        t->slot = slot;
        t->nslot = ns;
    }
    uint64_t hv = hash_bytes(s, len);
    size_t h = hv & (t->nslot - 1);
    while (t->slot[h]) {
        int32_t i = t->slot[h] - 1;
        if (t->h[i] == hv && !memcmp(t->s[i], s, len) && t->s[i][len] == 0) return i;
        h = (h + 1) & (t->nslot - 1);
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->s = donto_xrealloc(t->s, t->cap * sizeof *t->s);
        t->h = donto_xrealloc(t->h, t->cap * sizeof *t->h);
    }
    char *c = donto_xmalloc(len + 1);
    memcpy(c, s, len);
    c[len] = 0;
    t->s[t->n] = c;
    t->h[t->n] = hv;
    t->slot[h] = (int32_t)t->n + 1;
    return (int32_t)t->n++;
}

void sx_strtab_free(sx_strtab *t) {
    for (size_t i = 0; i < t->n; i++) free(t->s[i]);
    free(t->s);
    free(t->h);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int sx_parse_uuid(const char *s, uint8_t out[16]) {
    int k = 0;
    for (int i = 0; s[i] && k < 32; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return -1;
            continue;
        }
        int v = hexv(s[i]);
        if (v < 0) return -1;
        if (k & 1) out[k / 2] |= (uint8_t)v;
        else out[k / 2] = (uint8_t)(v << 4);
        k++;
    }
    return k == 32 && strlen(s) == 36 ? 0 : -1;
}

void sx_format_uuid(const uint8_t u[16], char out[37]) {
    static const char *hx = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = hx[u[i] >> 4];
        out[o++] = hx[u[i] & 15];
    }
    out[o] = 0;
}

static int check_vec(sx_data *d, size_t bytes, donto_err *err) {
    if (bytes == 0 || bytes % 4) return donto_seterrc(err, DONTO_E_INVALID, "a stored vector has %zu bytes", bytes);
    int dims = (int)(bytes / 4);
    if (!d->dims) d->dims = dims;
    if (dims != d->dims)
        return donto_seterrc(err, DONTO_E_INVALID, "stored vectors of the model differ in length (%d and %d)", d->dims, dims);
    return 0;
}

int sx_add_stmt(sx_data *d, const uint8_t uuid[16], const char *subj, size_t subj_len, const char *obj,
                size_t obj_len, int64_t from, int64_t until, int sheaf, int ident, const void *vec,
                size_t vec_bytes, donto_err *err) {
    if (d->nst == d->capst) d->st = donto_xrealloc(d->st, (d->capst = d->capst ? 2 * d->capst : 4096) * sizeof *d->st);
    sx_stmt *t = &d->st[d->nst];
    memcpy(t->uuid, uuid, 16);
    t->subj = sx_intern(&d->ent, subj, subj_len);
    t->obj = obj ? sx_intern(&d->ent, obj, obj_len) : -1;
    t->from = from;
    t->until = until;
    t->sheaf = (uint8_t)(sheaf != 0);
    t->ident = (uint8_t)(ident != 0);
    t->vec = -1;
    if (vec) {
        if (check_vec(d, vec_bytes, err)) return -1;
        if (d->nvec == d->capvec)
            d->vecs = donto_xrealloc(d->vecs, (d->capvec = d->capvec ? 2 * d->capvec : 4096) * (size_t)d->dims * sizeof(float));
        memcpy(d->vecs + d->nvec * (size_t)d->dims, vec, vec_bytes); /* little-endian hosts only */
        t->vec = (int64_t)d->nvec++;
    }
    d->nst++;
    return 0;
}

int sx_add_arg(sx_data *d, const uint8_t src[16], const uint8_t dst[16], const char *rel, size_t rel_len,
               int64_t from, int64_t until, int sheaf, donto_err *err) {
    int r = sx_rel_parse(rel, rel_len);
    if (r < 0) return donto_seterrc(err, DONTO_E_INVALID, "unknown argument relation '%.*s'", (int)rel_len, rel);
    if (d->narg == d->caparg) d->arg = donto_xrealloc(d->arg, (d->caparg = d->caparg ? 2 * d->caparg : 1024) * sizeof *d->arg);
    sx_arg *a = &d->arg[d->narg++];
    memcpy(a->src, src, 16);
    memcpy(a->dst, dst, 16);
    a->s = a->d = -1;
    a->rel = r;
    a->from = from;
    a->until = until;
    a->sheaf = (uint8_t)(sheaf != 0);
    return 0;
}

int sx_add_entity_vec(sx_data *d, const char *iri, size_t len, const void *vec, size_t vec_bytes, donto_err *err) {
    if (check_vec(d, vec_bytes, err)) return -1;
    if (d->nevec == d->capevec) {
        d->capevec = d->capevec ? 2 * d->capevec : 1024;
        d->evecs = donto_xrealloc(d->evecs, d->capevec * (size_t)d->dims * sizeof(float));
        d->evec_ent = donto_xrealloc(d->evec_ent, d->capevec * sizeof *d->evec_ent);
    }
    memcpy(d->evecs + d->nevec * (size_t)d->dims, vec, vec_bytes);
    d->evec_ent[d->nevec++] = sx_intern(&d->ent, iri, len);
    return 0;
}

void sx_data_free(sx_data *d) {
    free(d->st);
    free(d->arg);
    free(d->vecs);
    free(d->evecs);
    free(d->evec_ent);
    free(d->ent_vec);
    sx_strtab_free(&d->ent);
    memset(d, 0, sizeof *d);
}

/* ---- times ------------------------------------------------------------------ */

static int digits(const char *s, int n, int *v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        *v = *v * 10 + (s[i] - '0');
    }
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int donto_sheafx_parse_time(const char *s, int64_t *ms, donto_err *err) {
    const char *why = "expected YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS[.mmm](Z|+HH:MM) or @UNIX_SECONDS";
    if (!s || !*s) return donto_seterrc(err, DONTO_E_INVALID, "empty time (%s)", why);
    if (s[0] == '@') {
        char *end;
        double v = strtod(s + 1, &end);
        if (end == s + 1 || *end || v < 0 || v > 1e13) return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s", s, why);
        *ms = (int64_t)(v * 1000.0 + 0.5);
        return 0;
    }
    int y, mo, d, h = 0, mi = 0, se = 0, frac = 0, off = 0;
    size_t n = strlen(s);
    if (n < 10 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) || s[7] != '-' || digits(s + 8, 2, &d) ||
        mo < 1 || mo > 12 || d < 1 || d > 31)
        return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s", s, why);
    const char *p = s + 10;
    if (*p) {
        if ((*p != 'T' && *p != ' ') || strlen(p) < 9 || digits(p + 1, 2, &h) || p[3] != ':' || digits(p + 4, 2, &mi) ||
            p[6] != ':' || digits(p + 7, 2, &se) || h > 23 || mi > 59 || se > 60)
            return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s", s, why);
        p += 9;
        if (*p == '.') {
            int k = 0, scale = 100;
            for (p++; *p >= '0' && *p <= '9'; p++, k++) {
                if (k < 3) frac += (*p - '0') * scale, scale /= 10;
            }
            if (!k) return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s", s, why);
        }
        if (*p == 'Z' && !p[1]) {
        } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
            int oh, om;
            if (digits(p + 1, 2, &oh) || digits(p + 4, 2, &om)) return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s", s, why);
            off = (oh * 60 + om) * (*p == '+' ? 1 : -1);
        } else {
            return donto_seterrc(err, DONTO_E_INVALID, "'%s': %s (a time needs Z or an offset)", s, why);
        }
    }
    int64_t days = days_from_civil(y, mo, d);
    *ms = ((days * 86400 + h * 3600 + mi * 60 + se) - (int64_t)off * 60) * 1000 + frac;
    return 0;
}

void donto_sheafx_format_time(int64_t ms, char out[32]) {
    char buf[96];
    time_t t = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(((ms % 1000) + 1000) % 1000));
    snprintf(out, 32, "%.31s", buf);
}

/* ---- opening ------------------------------------------------------------------ */

int donto_sheafx_open(const char *url, donto_store **out, donto_err *err) {
    *out = NULL;
    if (donto_store_open_existing(url, out, err)) return -1;
    if (donto_substrate_schema_check(*out, err)) {
        donto_store_close(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int donto_sheafx_open_new(const char *url, donto_store **out, donto_err *err) { return donto_store_open(url, out, err); }

void donto_sheafx_close(donto_store *s) { donto_store_close(s); }

int sx_no_vectors(const char *model, donto_err *err) {
    return donto_seterrc(err, DONTO_E_NOT_FOUND,
                         "model '%s' has no vectors for the claims in this database (embed them first: "
                         "donto-embed enqueue --model %s, then work; or name another --model)",
                         model, model);
}
