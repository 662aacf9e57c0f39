/* donto-accel: WordNet 3.0 (Princeton database files, Debian wordnet-base)
 * into the substrate. Two passes: read the synsets (at most limit), then
 * write entities, statements, gloss chunks and antonym arguments, keeping
 * only pointers between synsets that were read. The relation names and
 * phrases are those of scripts/make-corpus, so corpus/claims.jsonl and an
 * import render the same claim text. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "substrate_int.h"

/* pointer symbol -> (relation name, phrase); pos 0 = any part of speech. */
static const struct {
    char pos;
    const char *sym, *name, *phrase;
} PTRS[] = {
    /* per-part-of-speech readings first: the first match wins */
    {'a', "=", "attribute", "is a value of the attribute"},
    {'r', "\\", "derived_from_adjective", "is derived from the adjective"},
    {0, "@", "hypernym", "is a kind of"},
    {0, "@i", "instance_hypernym", "is an instance of"},
    {0, "~", "hyponym", "has a more specific kind"},
    {0, "~i", "instance_hyponym", "has the instance"},
    {0, "#m", "member_holonym", "is a member of"},
    {0, "#s", "substance_holonym", "is a substance of"},
    {0, "#p", "part_holonym", "is a part of"},
    {0, "%m", "member_meronym", "has the member"},
    {0, "%s", "substance_meronym", "is made of the substance"},
    {0, "%p", "part_meronym", "has the part"},
    {0, "!", "antonym", "is the opposite of"},
    {0, "&", "similar_to", "is similar to"},
    {0, "^", "also_see", "see also"},
    {0, "=", "attribute", "is an attribute with the value"},
    {0, "*", "entailment", "entails"},
    {0, ">", "cause", "causes"},
    {0, "+", "derivation", "is derivationally related to"},
    {0, ";c", "domain_topic", "is a term in the topic domain of"},
    {0, "-c", "domain_member_topic", "is a topic domain with the term"},
    {0, ";r", "domain_region", "is a term used in the region of"},
    {0, "-r", "domain_member_region", "is a region with the local term"},
    {0, ";u", "domain_usage", "is a term with the usage label"},
    {0, "-u", "domain_member_usage", "is a usage label of the term"},
    {0, "<", "participle", "is the participle of the verb"},
    {0, "\\", "pertainym", "pertains to"},
    {0, "$", "verb_group", "is in the same verb group as"},
};
#define NPTRS (sizeof PTRS / sizeof PTRS[0])

const char *donto_wordnet_phrase(const char *name) {
    if (!name) return NULL;
    /* The generic reading of a name (attribute: "is an attribute with the value"). */
    const char *hit = NULL;
    for (size_t i = 0; i < NPTRS; i++)
        if (!strcmp(PTRS[i].name, name) && (!hit || PTRS[i].pos == 0)) hit = PTRS[i].phrase;
    return hit;
}

static int ptr_index(char pos, const char *sym) {
    for (size_t i = 0; i < NPTRS; i++)
        if ((PTRS[i].pos == 0 || PTRS[i].pos == pos) && !strcmp(PTRS[i].sym, sym)) return (int)i;
    return -1;
}

typedef struct wn_ptr {
    int rel;          /* index into PTRS */
    char target[12];  /* "00001740-n" */
} wn_ptr;

typedef struct wn_synset {
    char key[12];
    char pos; /* n v a r (satellites filed as a) */
    char *lemmas, *gloss;
    wn_ptr *ptrs;
    size_t nptrs;
} wn_synset;

static const char *POS_NAME(char p) {
    return p == 'n' ? "noun" : p == 'v' ? "verb" : p == 'a' || p == 's' ? "adjective" : "adverb";
}

const char *donto_wordnet_pos_name(const char *synset) {
    const char *dash = synset ? strrchr(synset, '-') : NULL;
    if (!dash || !dash[1] || dash[2] || !strchr("nvasr", dash[1])) return NULL;
    return POS_NAME(dash[1]);
}

/* "word(a)" -> "word", '_' -> ' '. */
static void clean_lemma(char *w) {
    size_t n = strlen(w);
    if (n > 3 && w[n - 1] == ')') {
        char *o = strrchr(w, '(');
        if (o && (!strcmp(o, "(a)") || !strcmp(o, "(p)") || !strcmp(o, "(ip)"))) *o = 0;
    }
    for (char *p = w; *p; p++)
        if (*p == '_') *p = ' ';
}

/* One data-file line -> synset; -1 with why on malformed input. */
static int parse_line(char *line, wn_synset *s, const char **why) {
    memset(s, 0, sizeof *s);
    char *bar = strstr(line, " | ");
    char *gloss = bar ? bar + 3 : NULL;
    if (bar) *bar = 0;
    char *save = NULL;
    char *f[4];
    for (int i = 0; i < 4; i++) {
        f[i] = strtok_r(i ? NULL : line, " ", &save);
        if (!f[i]) return *why = "too few fields", -1;
    }
    char t = f[2][0];
    if (!strchr("nvasr", t) || f[2][1]) return *why = "bad synset type", -1;
    if (strlen(f[0]) != 8) return *why = "bad synset offset", -1;
    s->pos = t == 's' ? 'a' : t;
    snprintf(s->key, sizeof s->key, "%s-%c", f[0], s->pos);
    long wc = strtol(f[3], NULL, 16);
    if (wc <= 0 || wc > 1000) return *why = "bad word count", -1;
    size_t cap = 64, len = 0;
    s->lemmas = donto_xmalloc(cap);
    s->lemmas[0] = 0;
    for (long i = 0; i < wc; i++) {
        char *w = strtok_r(NULL, " ", &save);
        char *lex = strtok_r(NULL, " ", &save);
        if (!w || !lex) return *why = "truncated word list", -1;
        clean_lemma(w);
        size_t wl = strlen(w);
        if (len + wl + 3 > cap) s->lemmas = donto_xrealloc(s->lemmas, cap = 2 * (len + wl + 3));
        if (len) memcpy(s->lemmas + len, ", ", 2), len += 2;
        memcpy(s->lemmas + len, w, wl + 1);
        len += wl;
    }
    char *pc = strtok_r(NULL, " ", &save);
    if (!pc) return *why = "no pointer count", -1;
    long np = strtol(pc, NULL, 10);
    if (np < 0 || np > 100000) return *why = "bad pointer count", -1;
    s->ptrs = np ? donto_xcalloc((size_t)np, sizeof *s->ptrs) : NULL;
    for (long i = 0; i < np; i++) {
        char *sym = strtok_r(NULL, " ", &save), *off = strtok_r(NULL, " ", &save),
             *tp = strtok_r(NULL, " ", &save), *st = strtok_r(NULL, " ", &save);
        if (!sym || !off || !tp || !st) return *why = "truncated pointer list", -1;
        int rel = ptr_index(s->pos, sym);
        if (rel < 0) continue; /* a symbol we do not map */
        char tpos = tp[0] == 's' ? 'a' : tp[0];
        wn_ptr *p = &s->ptrs[s->nptrs++];
        p->rel = rel;
        snprintf(p->target, sizeof p->target, "%.8s-%c", off, tpos);
    }
    if (gloss) {
        size_t gl = strlen(gloss);
        while (gl && (gloss[gl - 1] == '\n' || gloss[gl - 1] == '\r' || gloss[gl - 1] == ' ')) gl--;
        gloss[gl] = 0;
        s->gloss = donto_xstrdup(gloss);
    }
    return 0;
}

static void synset_free(wn_synset *s) {
    free(s->lemmas);
    free(s->gloss);
    free(s->ptrs);
}

static int cmp_key(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static int add_statement(sub_writer *w, const char *s, int rel, const char *o, char id[37],
                         donto_err *err) {
    char siri[16], oiri[16], piri[40];
    snprintf(siri, sizeof siri, "wn:%s", s);
    snprintf(oiri, sizeof oiri, "wn:%s", o);
    snprintf(piri, sizeof piri, "wn:%s", PTRS[rel].name);
    sub_content_id(siri, piri, oiri, NULL, SUB_DEFAULT_CONTEXT, id);
    const char *c[6] = {id, siri, piri, oiri, NULL, NULL};
    return sub_writer_add(w, SUB_STATEMENT, c, err);
}

/* Pointers that become arguments between claims (docs/substrate.md
 * "WordNet"): a synset's defining claim is its first (instance_)hypernym
 * statement ("X is a kind of H"); for a pointer X -> Y of these kinds, X's
 * defining claim argues for or against Y's. Antonymy rebuts (being X rules
 * out being Y), entailment and cause support (X happening makes Y so).
 * Synsets without a hypernym (adjectives, adverbs, roots) have no defining
 * claim and give no argument here. */
static const char *arg_relation(const char *sym) {
    if (!strcmp(sym, "!")) return "rebuts";
    if (!strcmp(sym, "*") || !strcmp(sym, ">")) return "supports";
    return NULL;
}

typedef struct wn_syn_ix {
    const char *key;
    size_t i;
} wn_syn_ix;
static int cmp_ix(const void *a, const void *b) {
    return strcmp(((const wn_syn_ix *)a)->key, ((const wn_syn_ix *)b)->key);
}

/* The content id of sy's defining claim, 0; -1 when it has none among the
 * synsets read. */
static int defining_claim(const wn_synset *sy, const char (*keys)[12], size_t n, char id[37]) {
    for (size_t k = 0; k < sy->nptrs; k++) {
        const wn_ptr *p = &sy->ptrs[k];
        if (strcmp(PTRS[p->rel].sym, "@") && strcmp(PTRS[p->rel].sym, "@i")) continue;
        if (!bsearch(p->target, keys, n, sizeof *keys, cmp_key)) continue;
        char siri[16], oiri[16], piri[40];
        snprintf(siri, sizeof siri, "wn:%s", sy->key);
        snprintf(oiri, sizeof oiri, "wn:%s", p->target);
        snprintf(piri, sizeof piri, "wn:%s", PTRS[p->rel].name);
        sub_content_id(siri, piri, oiri, NULL, SUB_DEFAULT_CONTEXT, id);
        return 0;
    }
    return -1;
}

int donto_import_wordnet(donto_store *s, const char *dir, const char *pos, size_t limit, donto_progress_fn progress,
                         void *ctx, donto_load_stats *st, donto_err *err) {
    static const struct {
        char pos;
        const char *file;
    } FILES[] = {{'n', "data.noun"}, {'v', "data.verb"}, {'a', "data.adj"}, {'r', "data.adv"}};
    donto_load_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (!dir) dir = DONTO_WORDNET_DIR;
    /* The files to read, in the order pos names them. */
    int order[4], nfiles = 0;
    for (const char *p = pos ? pos : "nvar"; *p; p++) {
        if (*p == ',') continue;
        int fi = -1;
        for (int k = 0; k < 4; k++)
            if (FILES[k].pos == *p) fi = k;
        if (fi < 0)
            return donto_seterrc(err, DONTO_E_INVALID, "wordnet: unknown part of speech '%c' (n, v, a or r)", *p);
        for (int k = 0; k < nfiles; k++)
            if (order[k] == fi) return donto_seterrc(err, DONTO_E_INVALID, "wordnet: part of speech '%c' given twice", *p);
        order[nfiles++] = fi;
    }
    if (!nfiles) return donto_seterrc(err, DONTO_E_INVALID, "wordnet: no part of speech given");
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;

    /* Pass 1: read. */
    wn_synset *syn = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    char *line = NULL;
    size_t lcap = 0;
    double last = donto_now();
    for (int oi = 0; oi < nfiles && rc == 0 && (!limit || n < limit); oi++) {
        int fi = order[oi];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, FILES[fi].file);
        FILE *f = fopen(path, "rb");
        if (!f) {
            rc = donto_seterr(err, "wordnet: %s: %s", path, strerror(errno));
            break;
        }
        size_t lineno = 0;
        while ((!limit || n < limit) && getline(&line, &lcap, f) >= 0) {
            lineno++;
            if (line[0] == ' ' || line[0] == '\n') continue; /* licence header */
            if (n == cap) syn = donto_xrealloc(syn, (cap = cap ? 2 * cap : 4096) * sizeof *syn);
            const char *why = NULL;
            if (parse_line(line, &syn[n], &why)) {
                synset_free(&syn[n]);
                rc = donto_seterr(err, "wordnet: %s:%zu: %s", path, lineno, why);
                break;
            }
            n++;
            if (progress && (n & 1023) == 0 && donto_now() - last > 0.2) {
                last = donto_now();
                progress(ctx, "synsets read", n, limit);
            }
        }
        fclose(f);
    }
    free(line);
    if (rc == 0 && n == 0) rc = donto_seterr(err, "wordnet: no synsets in %s", dir);
    /* Keys of the synsets read, sorted, for "is the target here?". */
    char(*keys)[12] = donto_xmalloc((n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) memcpy(keys[i], syn[i].key, sizeof keys[i]);
    qsort(keys, n, sizeof *keys, cmp_key);

    /* Pass 2: write, in one transaction. */
    sub_writer w;
    sub_writer_init(&w, s, ops, st);
    if (rc == 0 && ops->begin(s, err)) rc = -1;
    int began = rc == 0;
    for (size_t i = 0; i < NPTRS && rc == 0; i++) {
        if (PTRS[i].pos) continue; /* the generic reading labels the predicate */
        char piri[40], desc[80];
        snprintf(piri, sizeof piri, "wn:%s", PTRS[i].name);
        snprintf(desc, sizeof desc, "WordNet relation %s", PTRS[i].name);
        for (char *p = desc; *p; p++)
            if (*p == '_') *p = ' ';
        const char *c[3] = {piri, PTRS[i].phrase, desc};
        rc = sub_writer_add(&w, SUB_PREDICATE, c, err);
    }
    /* The override relation without a generic entry. */
    if (rc == 0) {
        const char *c[3] = {"wn:derived_from_adjective", "is derived from the adjective",
                            "WordNet relation derived from adjective"};
        rc = sub_writer_add(&w, SUB_PREDICATE, c, err);
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        wn_synset *sy = &syn[i];
        char iri[16], cid[32];
        snprintf(iri, sizeof iri, "wn:%s", sy->key);
        const char *e[3] = {iri, sy->lemmas, POS_NAME(sy->pos)};
        rc = sub_writer_add(&w, SUB_ENTITY, e, err);
        if (rc == 0 && sy->gloss) {
            snprintf(cid, sizeof cid, "wn:%s/gloss", sy->key);
            size_t tl = strlen(sy->lemmas) + strlen(sy->gloss) + 3;
            char *text = donto_xmalloc(tl);
            snprintf(text, tl, "%s: %s", sy->lemmas, sy->gloss);
            const char *c[3] = {cid, "wordnet", text};
            rc = sub_writer_add(&w, SUB_CHUNK, c, err);
            free(text);
        }
        for (size_t k = 0; k < sy->nptrs && rc == 0; k++) {
            wn_ptr *p = &sy->ptrs[k];
            if (!bsearch(p->target, keys, n, sizeof *keys, cmp_key)) continue;
            char id[37];
            rc = add_statement(&w, sy->key, p->rel, p->target, id, err);
            /* An antonym pair is two statements, A opposite B and B opposite
             * A; the first (by key) rebuts the second. Both are written here
             * so the argument never names a missing statement. */
            if (rc == 0 && !strcmp(PTRS[p->rel].sym, "!") && strcmp(sy->key, p->target) < 0) {
                char back[37];
                rc = add_statement(&w, p->target, p->rel, sy->key, back, err);
                const char *a[5] = {id, back, "rebuts", "1", NULL};
                if (rc == 0) rc = sub_writer_add(&w, SUB_ARGUMENT, a, err);
            }
        }
        st->lines = i + 1;
        if (progress && (i & 1023) == 0 && donto_now() - last > 0.2) {
            last = donto_now();
            progress(ctx, "synsets written", i + 1, n);
        }
    }
    /* The mapped pointers' arguments, after every statement is buffered
     * (a flush writes statements before arguments, so none names a
     * statement not yet written). */
    wn_syn_ix *ix = donto_xmalloc((n ? n : 1) * sizeof *ix);
    for (size_t i = 0; i < n; i++) ix[i] = (wn_syn_ix){syn[i].key, i};
    qsort(ix, n, sizeof *ix, cmp_ix);
    for (size_t i = 0; i < n && rc == 0; i++) {
        wn_synset *sy = &syn[i];
        char from[37];
        if (defining_claim(sy, (const char(*)[12])keys, n, from)) continue;
        for (size_t k = 0; k < sy->nptrs && rc == 0; k++) {
            wn_ptr *p = &sy->ptrs[k];
            const char *rel = arg_relation(PTRS[p->rel].sym);
            if (!rel) continue;
            /* Antonymy is symmetric: one argument per pair, from the first by key. */
            if (!strcmp(rel, "rebuts") && strcmp(sy->key, p->target) >= 0) continue;
            wn_syn_ix q = {p->target, 0}, *hit = bsearch(&q, ix, n, sizeof *ix, cmp_ix);
            char to[37];
            if (!hit || defining_claim(&syn[hit->i], (const char(*)[12])keys, n, to)) continue;
            if (!strcmp(from, to)) continue;
            const char *a[5] = {from, to, rel, "1", NULL};
            rc = sub_writer_add(&w, SUB_ARGUMENT, a, err);
        }
    }
    free(ix);
    if (rc == 0) rc = sub_writer_flush(&w, err);
    if (began) {
        if (rc == 0)
            rc = ops->commit(s, err);
        else
            ops->rollback(s);
    }
    sub_writer_free(&w);
    if (rc == 0 && progress) progress(ctx, "synsets written", n, n);
    for (size_t i = 0; i < n; i++) synset_free(&syn[i]);
    free(syn);
    free(keys);
    if (rc) {
        size_t lines = st->lines;
        memset(st, 0, sizeof *st);
        st->lines = lines;
    }
    return rc;
}
