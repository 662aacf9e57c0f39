/* donto-accel: a seeded generator of donto-shaped substrates with planted
 * structure (docs/sheaf.md "The planted substrate"), for the export's tests
 * and benchmark. Everything follows from (statements, seed, as_of, until):
 *
 *   entities   E = N/10 base entities ex:e<k> in `clusters` latent topics
 *              (k mod clusters), plus D = N/200 duplicates ex:d<k> of ex:e<k>;
 *   claims     ex:e<a> ex:p<j> ex:e<b>: the object is from the subject's
 *              cluster with probability 0.8; each claim has a latent stance
 *              z in {0, 1}; 88% asserted in [as_of - 30 days, as_of], 10%
 *              in (as_of, until] (the leak the as-of filter must stop),
 *              `sheaf_frac` in a "sheaf:" context before as_of (the leak the
 *              self-feedback filter must stop);
 *   retraction claims of the "fragile" clusters (the first quarter) with
 *              z = 1 are retracted in (as_of, until] with probability 0.7,
 *              the others with 0.03; 3% are retracted before as_of;
 *   arguments  N/10, from a claim to one sharing its subject (70%) or any
 *              claim: qualifies when the source's predicate is p0 or p1,
 *              else supports when the stances agree, rebuts (1 in 10:
 *              undercuts) when not; 75% asserted before as_of, 25% in
 *              (as_of, until]; `sheaf_frac` of them sheaf-written;
 *   identity   ex:e<k> owl:sameAs ex:d<k> (75% before as_of, 25% after), and
 *              sheaf-written sameAs between unrelated entities (a leak);
 *   vectors    (model, dims) for every claim and entity: a claim's vector is
 *              its cluster's centroid (weak) plus its stance direction
 *              (+-) plus noise; an entity's is its centroid plus noise, a
 *              duplicate's is its original's plus a little noise. Claims of
 *              one cluster are joined in the graph, so averaging neighbours
 *              recovers the cluster where one claim's vector barely shows it.
 *
 * Rows go straight into the tables (PostgreSQL: COPY; SQLite: prepared
 * inserts), in one transaction, with their tx times; the loaders stamp
 * now() and could not plant a history. */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/substrate.h"
#include "sheafx_int.h"

#define DAY_MS ((int64_t)86400000)
#define SHEAF_CTX DONTO_SHEAF_CONTEXT_PREFIX "planted-model"
#define NPRED 20

void donto_sheafx_gen_opts_init(donto_sheafx_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->statements = 10000;
    o->seed = 1;
    o->model = "planted-16";
    o->dims = 16;
    o->clusters = 16;
    o->sheaf_frac = 0.01;
}

typedef struct gstmt {
    char id[37];
    int32_t subj, obj; /* entity numbers: < E base, >= E duplicates (k - E) */
    int pred;          /* 0..NPRED-1, or -1: owl:sameAs */
    uint8_t z, sheaf;
    int64_t from, until; /* until SX_OPEN: live */
} gstmt;

typedef struct garg {
    int32_t s, d;
    int rel;
    uint8_t sheaf;
    int64_t from;
} garg;

static int cmp_garg(const void *a, const void *b) {
    const garg *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return (x->rel > y->rel) - (x->rel < y->rel);
}

static double gauss(uint64_t *r) {
    double u = sx_unif(r), v = sx_unif(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void normalize(float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    s = s > 0 ? 1.0 / sqrt(s) : 0;
    for (int i = 0; i < n; i++) v[i] = (float)(v[i] * s);
}

static void ent_iri(int32_t k, int32_t E, char *out, size_t cap) {
    if (k < E) snprintf(out, cap, "ex:e%d", k);
    else snprintf(out, cap, "ex:d%d", k - E);
}

/* ---- a tiny two-backend row sink ----------------------------------------------- */

typedef struct sink {
    int pg;
    PGconn *c;
    sqlite3 *db;
    sqlite3_stmt *q;
    char *buf;
    size_t n, cap;
    donto_err *err;
    int failed;
} sink;

static int pg_cmd(PGconn *c, const char *sql, donto_err *err) {
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        donto_seterrc(err, DONTO_E_UNAVAILABLE, "postgres: %.120s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
        return -1;
    }
    PQclear(r);
    return 0;
}

static int sk_begin_table(sink *k, const char *pg_copy, const char *sq_insert) {
    if (k->pg) {
        PGresult *r = PQexec(k->c, pg_copy);
        if (PQresultStatus(r) != PGRES_COPY_IN) {
            donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "postgres: %s: %s", pg_copy, PQresultErrorMessage(r));
            PQclear(r);
            return -1;
        }
        PQclear(r);
        k->n = 0;
        return 0;
    }
    if (sqlite3_prepare_v2(k->db, sq_insert, -1, &k->q, NULL) != SQLITE_OK)
        return donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "sqlite: prepare: %s", sqlite3_errmsg(k->db));
    return 0;
}

static int sk_flush(sink *k) {
    if (k->n && PQputCopyData(k->c, k->buf, (int)k->n) != 1)
        return donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "postgres: copy: %s", PQerrorMessage(k->c));
    k->n = 0;
    return 0;
}

static int sk_end_table(sink *k) {
    if (k->pg) {
        if (sk_flush(k)) return -1;
        if (PQputCopyEnd(k->c, NULL) != 1) return donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "postgres: copy end");
        PGresult *r;
        int rc = 0;
        while ((r = PQgetResult(k->c))) {
            if (PQresultStatus(r) != PGRES_COMMAND_OK && rc == 0)
                rc = donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "postgres: copy: %s", PQresultErrorMessage(r));
            PQclear(r);
        }
        return rc;
    }
    sqlite3_finalize(k->q);
    k->q = NULL;
    return 0;
}

/* PostgreSQL: one COPY text line (cells NULL -> \N; no escaping needed for
 * the generator's own values, except bytea, which is given as \\x hex). */
static void sk_line(sink *k, const char *const *cells, int nc) {
    for (int i = 0; i < nc; i++) {
        const char *v = cells[i] ? cells[i] : "\\N";
        size_t l = strlen(v);
        if (k->n + l + 2 > k->cap) k->buf = donto_xrealloc(k->buf, k->cap = 2 * (k->n + l + 2) + (1 << 20));
        memcpy(k->buf + k->n, v, l);
        k->n += l;
        k->buf[k->n++] = i + 1 < nc ? '\t' : '\n';
    }
    if (k->n > (1 << 20) && sk_flush(k)) k->failed = 1;
}

/* SQLite: bind text cells (NULL -> NULL), ints where ints[i] is set, a blob at blob_col. */
static int sk_row(sink *k, const char *const *cells, int nc, const int64_t *ints, const uint8_t *isint,
                  const void *blob, int blob_col, size_t blob_len) {
    for (int i = 0; i < nc; i++) {
        if (i == blob_col) sqlite3_bind_blob(k->q, i + 1, blob, (int)blob_len, SQLITE_STATIC);
        else if (isint && isint[i]) sqlite3_bind_int64(k->q, i + 1, ints[i]);
        else if (cells[i]) sqlite3_bind_text(k->q, i + 1, cells[i], -1, SQLITE_STATIC);
        else sqlite3_bind_null(k->q, i + 1);
    }
    int r = sqlite3_step(k->q);
    sqlite3_reset(k->q);
    if (r != SQLITE_DONE) return donto_seterrc(k->err, DONTO_E_UNAVAILABLE, "sqlite: insert: %s", sqlite3_errmsg(k->db));
    return 0;
}

static void iso(int64_t ms, char out[32]) { donto_sheafx_format_time(ms, out); }

static void range_lit(int64_t from, int64_t until, char out[80]) {
    char a[32], b[32];
    iso(from, a);
    if (until == SX_OPEN) snprintf(out, 80, "[%s,)", a);
    else {
        iso(until, b);
        snprintf(out, 80, "[%s,%s)", a, b);
    }
}

static void truth_stmt(FILE *t, const gstmt *g, int32_t E) {
    char s[32], o[32];
    ent_iri(g->subj, E, s, sizeof s);
    ent_iri(g->obj, E, o, sizeof o);
    fprintf(t, "{\"t\":\"s\",\"id\":\"%s\",\"subject\":\"%s\",\"object\":\"%s\",\"from\":%lld,\"until\":", g->id, s, o,
            (long long)g->from);
    if (g->until == SX_OPEN) fputs("null", t);
    else fprintf(t, "%lld", (long long)g->until);
    fprintf(t, ",\"sheaf\":%d,\"ident\":%d,\"z\":%d}\n", g->sheaf, g->pred < 0, g->z);
}

int donto_sheafx_generate(donto_store *s, const donto_sheafx_gen_opts *o, donto_sheafx_gen_stats *st,
                          donto_err *err) {
    donto_sheafx_gen_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (o->statements < 100) return donto_seterrc(err, DONTO_E_INVALID, "a planted substrate needs at least 100 statements");
    if (o->until <= o->as_of) return donto_seterrc(err, DONTO_E_INVALID, "until must be later than as_of");
    if (o->dims < 2 || o->dims > 4096) return donto_seterrc(err, DONTO_E_INVALID, "dims must be in 2..4096");
    if (o->clusters < 2) return donto_seterrc(err, DONTO_E_INVALID, "at least 2 clusters");
    if (donto_substrate_migrate(s, err)) return -1;
    donto_db db;
    if (donto_store_db(s, &db, err)) return -1;
    sink K = {.pg = db.kind == DONTO_DB_POSTGRES, .c = db.pg, .db = db.sqlite, .err = err};
    /* Refuse a database that has substrate rows already. */
    if (K.pg) {
        PGresult *r = PQexec(K.c, "SELECT EXISTS (SELECT 1 FROM donto_statement)");
        int has = PQresultStatus(r) == PGRES_TUPLES_OK && PQgetvalue(r, 0, 0)[0] == 't';
        int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (!ok) return donto_seterrc(err, DONTO_E_UNAVAILABLE, "postgres: %s", PQerrorMessage(K.c));
        if (has) return donto_seterrc(err, DONTO_E_CONFLICT, "the database has statements already: plant into an empty one");
    } else {
        sqlite3_stmt *q;
        int has = 0;
        if (sqlite3_prepare_v2(K.db, "SELECT EXISTS (SELECT 1 FROM donto_statement)", -1, &q, NULL) == SQLITE_OK) {
            if (sqlite3_step(q) == SQLITE_ROW) has = sqlite3_column_int(q, 0);
            sqlite3_finalize(q);
        }
        if (has) return donto_seterrc(err, DONTO_E_CONFLICT, "the database has statements already: plant into an empty one");
    }
    uint64_t rng = o->seed * 0x9e3779b97f4a7c15ULL + 12345;
    int64_t N = o->statements;
    int C = o->clusters, dims = o->dims;
    int32_t E = (int32_t)(N / 10 > 20 ? N / 10 : 20), D = (int32_t)(N / 200 > 2 ? N / 200 : 2);
    if (D > E) D = E;
    int64_t nsheaf_id = (int64_t)(o->sheaf_frac * (double)D + 0.999);
    int64_t NC = N - D - nsheaf_id; /* ordinary claims */
    int64_t T = o->as_of, T2 = o->until, B = T - 30 * DAY_MS;
    gstmt *g = donto_xcalloc((size_t)N, sizeof *g);
    /* per-entity claim lists by subject (for arguments) */
    int32_t *first = donto_xmalloc((size_t)(E + D) * sizeof *first), *next = donto_xmalloc((size_t)N * sizeof *next);
    for (int32_t e = 0; e < E + D; e++) first[e] = -1;
    for (int64_t i = 0; i < N; i++) {
        gstmt *t = &g[i];
        char name[48];
        snprintf(name, sizeof name, "planted:%llu:%lld", (unsigned long long)o->seed, (long long)i);
        donto_name_uuid("id", name, strlen(name), t->id);
        t->until = SX_OPEN;
        if (i < NC) {
            t->subj = (int32_t)sx_below(&rng, (uint64_t)(E + D));
            int cl = (t->subj < E ? t->subj : t->subj - E) % C;
            if (sx_unif(&rng) < 0.8) { /* same cluster: cl + C*m */
                int32_t m = (int32_t)sx_below(&rng, (uint64_t)((E - 1 - cl) / C + 1));
                t->obj = cl + C * m;
            } else {
                t->obj = (int32_t)sx_below(&rng, (uint64_t)E);
            }
            t->pred = (int)sx_below(&rng, NPRED);
            t->z = (uint8_t)(sx_rng(&rng) & 1);
            double u = sx_unif(&rng);
            if (u < 0.10) {
                t->from = T + 1 + (int64_t)sx_below(&rng, (uint64_t)(T2 - T));
                st->after_as_of++;
            } else {
                t->from = B + (int64_t)sx_below(&rng, (uint64_t)(T - B));
                if (u > 1.0 - o->sheaf_frac) t->sheaf = 1, st->sheaf_statements++;
                double r = sx_unif(&rng);
                int fragile = cl < C / 4 && t->z;
                if (r < 0.03) {
                    t->until = t->from + 1 + (int64_t)sx_below(&rng, (uint64_t)(T - t->from));
                } else if (sx_unif(&rng) < (fragile ? 0.7 : 0.03)) {
                    t->until = T + 1 + (int64_t)sx_below(&rng, (uint64_t)(T2 - T));
                    st->retracted++;
                }
            }
            next[i] = first[t->subj];
            first[t->subj] = (int32_t)i;
        } else if (i < NC + D) { /* identity: e<k> sameAs d<k> */
            int32_t k = (int32_t)(i - NC);
            t->subj = k, t->obj = E + k, t->pred = -1;
            t->from = sx_unif(&rng) < 0.75 ? B + (int64_t)sx_below(&rng, (uint64_t)(T - B))
                                            : T + 1 + (int64_t)sx_below(&rng, (uint64_t)(T2 - T));
            st->identity++;
        } else { /* sheaf-written identity between unrelated base entities (a leak) */
            t->subj = (int32_t)sx_below(&rng, (uint64_t)E);
            t->obj = (t->subj + 1 + (int32_t)sx_below(&rng, (uint64_t)(E - 1))) % E;
            t->pred = -1, t->sheaf = 1;
            t->from = B + (int64_t)sx_below(&rng, (uint64_t)(T - B));
            st->sheaf_statements++;
        }
    }
    /* Arguments. */
    int64_t NA = N / 10;
    garg *a = donto_xmalloc((size_t)(NA + 1) * sizeof *a);
    int64_t na = 0;
    for (int64_t k = 0; k < NA * 3 && na < NA; k++) {
        int32_t u = (int32_t)sx_below(&rng, (uint64_t)NC);
        if (g[u].from > T || g[u].until <= T) continue; /* ends live at as_of */
        int32_t v = -1;
        if (sx_unif(&rng) < 0.7) {
            int32_t cnt = 0, pick = -1;
            for (int32_t j = first[g[u].subj]; j >= 0 && cnt < 64; j = next[j])
                if (j != u && sx_below(&rng, (uint64_t)++cnt) == 0) pick = j;
            v = pick;
        }
        if (v < 0) v = (int32_t)sx_below(&rng, (uint64_t)NC);
        if (v == u || g[v].from > T || g[v].until <= T) continue;
        garg *x = &a[na];
        x->s = u, x->d = v;
        x->rel = g[u].pred < 2 ? SX_QUALIFIES : g[u].z == g[v].z ? SX_SUPPORTS : (sx_below(&rng, 10) == 0 ? SX_UNDERCUTS : SX_REBUTS);
        int64_t lo = g[u].from > g[v].from ? g[u].from : g[v].from;
        x->sheaf = 0;
        if (sx_unif(&rng) < o->sheaf_frac) {
            x->sheaf = 1;
            x->from = lo + (int64_t)sx_below(&rng, (uint64_t)(T - lo + 1));
        } else if (sx_unif(&rng) < 0.75) {
            x->from = lo + (int64_t)sx_below(&rng, (uint64_t)(T - lo + 1));
        } else {
            x->from = T + 1 + (int64_t)sx_below(&rng, (uint64_t)(T2 - T));
        }
        na++;
    }
    qsort(a, (size_t)na, sizeof *a, cmp_garg);
    int64_t w = 0;
    for (int64_t k = 0; k < na; k++)
        if (!w || cmp_garg(&a[w - 1], &a[k])) a[w++] = a[k];
    na = w;
    /* A pair argued twice in one direction keeps one row (the UNIQUE key is per relation). */
    for (int64_t k = 0; k < na; k++) {
        if (a[k].sheaf) st->sheaf_arguments++;
    }
    st->arguments = na;
    st->statements = N;
    st->entities = E + D;
    /* Centroids and stance direction. */
    float *cen = donto_xmalloc((size_t)C * (size_t)dims * sizeof *cen), *dir = donto_xmalloc((size_t)dims * sizeof *dir);
    for (int i = 0; i < C * dims; i++) cen[i] = (float)gauss(&rng);
    for (int c = 0; c < C; c++) normalize(cen + c * dims, dims);
    for (int i = 0; i < dims; i++) dir[i] = (float)gauss(&rng);
    normalize(dir, dims);

    FILE *truth = NULL;
    if (o->truth && !(truth = fopen(o->truth, "w"))) {
        free(g), free(first), free(next), free(a), free(cen), free(dir);
        return donto_seterrc(err, DONTO_E_UNAVAILABLE, "cannot write %s", o->truth);
    }
    int rc = 0;
    /* The store's connections carry a 30 s statement timeout (for the
     * coordinator's requests); a million-row COPY is a batch job. */
    if (K.pg) rc = pg_cmd(K.c, "BEGIN; SET LOCAL statement_timeout = 0", err);
    else if (sqlite3_exec(K.db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: begin: %s", sqlite3_errmsg(K.db));
    int began = rc == 0;
    char sbuf[32], obuf[32], pbuf[32], rng_lit[80];
    /* predicates and entities */
    if (rc == 0)
        rc = sk_begin_table(&K, "COPY donto_predicate (iri, label) FROM STDIN",
                            "INSERT INTO donto_predicate (iri, label) VALUES (?1, ?2)");
    for (int p = -1; p < NPRED && rc == 0; p++) {
        char lab[32];
        if (p < 0) snprintf(pbuf, sizeof pbuf, "owl:sameAs"), snprintf(lab, sizeof lab, "is the same as");
        else snprintf(pbuf, sizeof pbuf, "ex:p%d", p), snprintf(lab, sizeof lab, "planted relation %d", p);
        const char *cells[2] = {pbuf, lab};
        if (K.pg) sk_line(&K, cells, 2);
        else rc = sk_row(&K, cells, 2, NULL, NULL, NULL, -1, 0);
    }
    if (rc == 0) rc = sk_end_table(&K);
    if (rc == 0)
        rc = sk_begin_table(&K, "COPY donto_entity_symbol (iri, normalized_label, kind) FROM STDIN",
                            "INSERT INTO donto_entity_symbol (iri, normalized_label, kind) VALUES (?1, ?2, ?3)");
    for (int32_t e = 0; e < E + D && rc == 0 && !K.failed; e++) {
        char lab[48];
        ent_iri(e, E, sbuf, sizeof sbuf);
        snprintf(lab, sizeof lab, "planted entity %d", e < E ? e : e - E);
        const char *cells[3] = {sbuf, lab, "planted"};
        if (K.pg) sk_line(&K, cells, 3);
        else rc = sk_row(&K, cells, 3, NULL, NULL, NULL, -1, 0);
    }
    if (rc == 0) rc = sk_end_table(&K);
    /* statements */
    if (rc == 0)
        rc = sk_begin_table(&K, "COPY donto_statement (statement_id, subject, predicate, object_iri, context, tx_time) FROM STDIN",
                            "INSERT INTO donto_statement (statement_id, subject, predicate, object_iri, context, tx_from, tx_until)"
                            " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    for (int64_t i = 0; i < N && rc == 0 && !K.failed; i++) {
        gstmt *t = &g[i];
        ent_iri(t->subj, E, sbuf, sizeof sbuf);
        ent_iri(t->obj, E, obuf, sizeof obuf);
        if (t->pred < 0) snprintf(pbuf, sizeof pbuf, "owl:sameAs");
        else snprintf(pbuf, sizeof pbuf, "ex:p%d", t->pred);
        const char *ctxv = t->sheaf ? SHEAF_CTX : "donto:default";
        if (K.pg) {
            range_lit(t->from, t->until, rng_lit);
            const char *cells[6] = {t->id, sbuf, pbuf, obuf, ctxv, rng_lit};
            sk_line(&K, cells, 6);
        } else {
            const char *cells[7] = {t->id, sbuf, pbuf, obuf, ctxv, NULL, NULL};
            int64_t ints[7] = {0, 0, 0, 0, 0, t->from, t->until};
            uint8_t isint[7] = {0, 0, 0, 0, 0, 1, t->until != SX_OPEN};
            rc = sk_row(&K, cells, 7, ints, isint, NULL, -1, 0);
        }
        if (truth) truth_stmt(truth, t, E);
        if (o->progress && (i & 65535) == 65535) o->progress(o->ctx, "statements", i + 1, N);
    }
    if (rc == 0 && K.failed) rc = -1;
    if (rc == 0) rc = sk_end_table(&K);
    /* arguments */
    if (rc == 0)
        rc = sk_begin_table(&K, "COPY donto_argument (source_statement_id, target_statement_id, relation, strength, context, tx_time) FROM STDIN",
                            "INSERT INTO donto_argument (source_statement_id, target_statement_id, relation, strength, context, tx_from)"
                            " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (int64_t k = 0; k < na && rc == 0 && !K.failed; k++) {
        garg *x = &a[k];
        const char *ctxv = x->sheaf ? SHEAF_CTX : "donto:default";
        if (K.pg) {
            range_lit(x->from, SX_OPEN, rng_lit);
            const char *cells[6] = {g[x->s].id, g[x->d].id, SX_REL_NAMES[x->rel], "1", ctxv, rng_lit};
            sk_line(&K, cells, 6);
        } else {
            const char *cells[6] = {g[x->s].id, g[x->d].id, SX_REL_NAMES[x->rel], "1", ctxv, NULL};
            int64_t ints[6] = {0, 0, 0, 0, 0, x->from};
            uint8_t isint[6] = {0, 0, 0, 0, 0, 1};
            rc = sk_row(&K, cells, 6, ints, isint, NULL, -1, 0);
        }
        if (truth)
            fprintf(truth, "{\"t\":\"a\",\"src\":\"%s\",\"dst\":\"%s\",\"rel\":\"%s\",\"from\":%lld,\"sheaf\":%d}\n", g[x->s].id,
                    g[x->d].id, SX_REL_NAMES[x->rel], (long long)x->from, x->sheaf);
    }
    if (rc == 0 && K.failed) rc = -1;
    if (rc == 0) rc = sk_end_table(&K);
    /* vectors: claims, then entities */
    if (rc == 0) {
        char sql[256];
        snprintf(sql, sizeof sql, "%s", K.pg ? "INSERT INTO models (name, dims) VALUES ($1, $2) ON CONFLICT DO NOTHING" : "");
        if (K.pg) {
            char dd[16];
            snprintf(dd, sizeof dd, "%d", dims);
            const char *pv[2] = {o->model, dd};
            PGresult *r = PQexecParams(K.c, sql, 2, NULL, pv, NULL, NULL, 0);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "postgres: models: %s", PQresultErrorMessage(r));
            PQclear(r);
        } else {
            sqlite3_stmt *q;
            if (sqlite3_prepare_v2(K.db, "INSERT OR IGNORE INTO models (name, dims) VALUES (?1, ?2)", -1, &q, NULL) != SQLITE_OK)
                rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: models: %s", sqlite3_errmsg(K.db));
            else {
                sqlite3_bind_text(q, 1, o->model, -1, SQLITE_STATIC);
                sqlite3_bind_int(q, 2, dims);
                if (sqlite3_step(q) != SQLITE_DONE) rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: models: %s", sqlite3_errmsg(K.db));
                sqlite3_finalize(q);
            }
        }
    }
    if (rc == 0)
        rc = sk_begin_table(&K, "COPY vectors (target, item_id, model, dims, vec, contributor, created) FROM STDIN",
                            "INSERT INTO vectors (target, item_id, model, dims, vec, contributor, created)"
                            " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    float *v = donto_xmalloc((size_t)dims * sizeof *v);
    float *ev = donto_xmalloc((size_t)(E + D) * (size_t)dims * sizeof *ev);
    char *hex = donto_xmalloc((size_t)dims * 8 + 8);
    char dd[16], tgt[4], cr[24];
    snprintf(dd, sizeof dd, "%d", dims);
    snprintf(cr, sizeof cr, "%lld", (long long)T2);
    for (int32_t e = 0; e < E + D; e++) {
        uint64_t r2 = o->seed ^ (0xe17e17ULL + (uint64_t)e * 0x9e3779b97f4a7c15ULL);
        int32_t base = e < E ? e : e - E;
        float *x = ev + (size_t)e * (size_t)dims;
        if (e < E) {
            for (int i = 0; i < dims; i++) x[i] = cen[(base % C) * dims + i] + (float)(0.6 * gauss(&r2));
        } else {
            const float *b = ev + (size_t)base * (size_t)dims;
            for (int i = 0; i < dims; i++) x[i] = b[i] + (float)(0.15 * gauss(&r2));
        }
        normalize(x, dims);
    }
    for (int64_t i = 0; i < N + E + D && rc == 0 && !K.failed; i++) {
        const char *item;
        int target;
        if (i < N) {
            if (g[i].pred < 0) continue; /* identity evidence has no vector: it is never a node */
            gstmt *t = &g[i];
            uint64_t r2 = o->seed ^ (0xc1a1ULL + (uint64_t)i * 0x9e3779b97f4a7c15ULL);
            int cl = (t->subj < E ? t->subj : t->subj - E) % C;
            for (int k = 0; k < dims; k++)
                v[k] = 0.5f * cen[cl * dims + k] + (t->z ? 0.8f : -0.8f) * dir[k] + (float)(0.7 * gauss(&r2));
            normalize(v, dims);
            item = t->id, target = 0;
        } else {
            int32_t e = (int32_t)(i - N);
            memcpy(v, ev + (size_t)e * (size_t)dims, (size_t)dims * sizeof *v);
            ent_iri(e, E, sbuf, sizeof sbuf);
            item = sbuf, target = 2;
        }
        snprintf(tgt, sizeof tgt, "%d", target);
        if (K.pg) {
            static const char *hx = "0123456789abcdef";
            const uint8_t *b = (const uint8_t *)v;
            size_t h = 0;
            hex[h++] = '\\', hex[h++] = '\\', hex[h++] = 'x';
            for (int k = 0; k < dims * 4; k++) hex[h++] = hx[b[k] >> 4], hex[h++] = hx[b[k] & 15];
            hex[h] = 0;
            const char *cells[7] = {tgt, item, o->model, dd, hex, "planted", cr};
            sk_line(&K, cells, 7);
        } else {
            const char *cells[7] = {NULL, item, o->model, NULL, NULL, "planted", NULL};
            int64_t ints[7] = {target, 0, 0, dims, 0, 0, T2};
            uint8_t isint[7] = {1, 0, 0, 1, 0, 0, 1};
            rc = sk_row(&K, cells, 7, ints, isint, v, 4, (size_t)dims * 4);
        }
        st->vectors++;
        if (o->progress && (i & 65535) == 65535) o->progress(o->ctx, "vectors", i + 1, N + E + D);
    }
    if (rc == 0 && K.failed) rc = -1;
    if (rc == 0) rc = sk_end_table(&K);
    if (K.q) sqlite3_finalize(K.q);
    if (began) {
        if (K.pg) {
            if (rc == 0) rc = pg_cmd(K.c, "COMMIT", err);
            else PQclear(PQexec(K.c, "ROLLBACK"));
            if (rc == 0) rc = pg_cmd(K.c, "ANALYZE donto_statement; ANALYZE donto_argument; ANALYZE vectors", err);
        } else {
            if (rc == 0 && sqlite3_exec(K.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
                rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "sqlite: commit: %s", sqlite3_errmsg(K.db));
            if (rc) sqlite3_exec(K.db, "ROLLBACK", NULL, NULL, NULL);
        }
    }
    if (truth && fclose(truth) && rc == 0) rc = donto_seterrc(err, DONTO_E_UNAVAILABLE, "writing %s failed", o->truth);
    free(K.buf), free(v), free(ev), free(hex);
    free(g), free(first), free(next), free(a), free(cen), free(dir);
    return rc;
}
