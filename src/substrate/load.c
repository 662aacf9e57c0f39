/* donto-accel: N-Quads and JSONL loaders for the substrate. A file is one
 * transaction: a bad line names itself (FILE:LINE) and nothing of the file is
 * kept. Statement ids are content ids unless the record names one, so loading
 * the same file twice adds nothing. Formats: docs/substrate.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "substrate_int.h"

#define RDFS_LABEL "http://www.w3.org/2000/01/rdf-schema#label"
#define SKOS_PREF "http://www.w3.org/2004/02/skos/core#prefLabel"
#define XSD_STRING "http://www.w3.org/2001/XMLSchema#string"
#define DEFAULT_CONTEXT "donto:default"

typedef struct loader {
    sub_writer w;
    const char *name;
    size_t line;
    donto_err *err;
} loader;

static int lerr(loader *L, const char *fmt, const char *detail) {
    return donto_seterr(L->err, "%s:%zu: %s%s%s", L->name, L->line, fmt, detail ? ": " : "",
                        detail ? detail : "");
}

void sub_content_id(const char *s, const char *p, const char *o_iri, const char *o_lit,
                    const char *g, char out[37]) {
    size_t n = strlen(s) + strlen(p) + strlen(g) + 8 + (o_iri ? strlen(o_iri) : strlen(o_lit));
    char *buf = donto_xmalloc(n);
    int len = snprintf(buf, n, "%s\x1f%s\x1f%c%s\x1f%s", s, p, o_iri ? 'I' : 'L',
                       o_iri ? o_iri : o_lit, g);
    donto_name_uuid("triple", buf, (size_t)len, out);
    free(buf);
}

/* A statement plus the predicate and entity rows it implies. */
static int add_claim(loader *L, const char *sid, const char *s, const char *s_label,
                     const char *s_kind, const char *p, const char *p_label, const char *o_iri,
                     const char *o_label, const char *o_kind, const char *o_lit, const char *ctx) {
    char idbuf[37];
    if (!sid) {
        sub_content_id(s, p, o_iri, o_lit, ctx ? ctx : DEFAULT_CONTEXT, idbuf);
        sid = idbuf;
    }
    const char *st[6] = {sid, s, p, o_iri, o_iri ? NULL : o_lit, ctx};
    const char *pr[3] = {p, p_label, NULL};
    const char *se[3] = {s, s_label, s_kind};
    const char *oe[3] = {o_iri, o_label, o_kind};
    if (sub_writer_add(&L->w, SUB_STATEMENT, st, L->err) ||
        sub_writer_add(&L->w, SUB_PREDICATE, pr, L->err) ||
        sub_writer_add(&L->w, SUB_ENTITY, se, L->err))
        return -1;
    if (o_iri && sub_writer_add(&L->w, SUB_ENTITY, oe, L->err)) return -1;
    return 0;
}

static int do_retract(loader *L, const char *const *ids, size_t n) {
    /* Earlier lines may assert what this line retracts: write them first. */
    if (sub_writer_flush(&L->w, L->err)) return -1;
    char(*norm)[37] = donto_xmalloc((n ? n : 1) * sizeof *norm);
    const char **pv = donto_xmalloc((n ? n : 1) * sizeof *pv);
    for (size_t i = 0; i < n; i++) {
        donto_statement_id(ids[i], norm[i]);
        pv[i] = norm[i];
    }
    size_t got = 0;
    int rc = L->w.ops->retract(L->w.s, pv, n, &got, NULL, L->err);
    free(pv);
    free(norm);
    if (rc) return -1;
    L->w.st->retracted += got;
    return 0;
}

/* ---- N-Quads ------------------------------------------------------------------ */

typedef struct nq_term {
    int kind; /* 'I' IRI, 'B' blank node, 'L' literal */
    char *val, *lang, *dt;
} nq_term;

static void term_free(nq_term *t) {
    free(t->val);
    free(t->lang);
    free(t->dt);
    memset(t, 0, sizeof *t);
}

/* Append code point cp as UTF-8. */
static int put_utf8(char *o, unsigned long cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* \uXXXX or \UXXXXXXXX at *pp (after the backslash and letter): -1 if bad. */
static int read_hex(const char **pp, int digits, unsigned long *cp) {
    unsigned long v = 0;
    for (int i = 0; i < digits; i++) {
        char c = (*pp)[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + (unsigned long)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *pp += digits;
    *cp = v;
    return 0;
}

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* IRI after '<' up to '>'; *pp ends after '>'. NULL + message on error. */
static char *read_iri(const char **pp, const char **why) {
    const char *p = *pp;
    size_t cap = strlen(p) * 1 + 8;
    char *o = donto_xmalloc(cap + 4), *q = o;
    for (;;) {
        char c = *p;
        if (!c || c == '\n' || c == '\r') {
            *why = "unterminated IRI (no '>')";
            free(o);
            return NULL;
        }
        if (c == '>') break;
        if (c == ' ' || c == '<' || c == '"' || c == '{' || c == '}' || c == '|' || c == '^' ||
            c == '`' || (unsigned char)c <= 0x20) {
            *why = "character not allowed in an IRI";
            free(o);
            return NULL;
        }
        if (c == '\\') {
            unsigned long cp;
            p++;
            int digits = *p == 'u' ? 4 : *p == 'U' ? 8 : 0;
            p++;
            if (!digits || read_hex(&p, digits, &cp)) {
                *why = "bad escape in IRI";
                free(o);
                return NULL;
            }
            q += put_utf8(q, cp);
            continue;
        }
        *q++ = c;
        p++;
    }
    *q = 0;
    if (q == o) {
        *why = "empty IRI";
        free(o);
        return NULL;
    }
    *pp = p + 1;
    return o;
}

static int read_term(const char **pp, nq_term *t, int allow_lit, const char **why) {
    const char *p = skip_ws(*pp);
    memset(t, 0, sizeof *t);
    if (*p == '<') {
        p++;
        if (!(t->val = read_iri(&p, why))) return -1;
        t->kind = 'I';
    } else if (p[0] == '_' && p[1] == ':') {
        const char *s = p;
        p += 2;
        while (*p && *p != ' ' && *p != '\t' && !(*p == '.' && (p[1] == ' ' || p[1] == '\t' || !p[1] || p[1] == '#')))
            p++;
        if (p == s + 2) return *why = "empty blank node label", -1;
        t->val = donto_xmalloc((size_t)(p - s) + 1);
        memcpy(t->val, s, (size_t)(p - s));
        t->val[p - s] = 0;
        t->kind = 'B';
    } else if (*p == '"' && allow_lit) {
        p++;
        size_t cap = strlen(p) + 8;
        char *o = donto_xmalloc(cap + 4), *q = o;
        for (;;) {
            char c = *p;
            if (!c) {
                free(o);
                return *why = "unterminated literal (no closing '\"')", -1;
            }
            if (c == '"') break;
            if (c == '\\') {
                p++;
                char e = *p++;
                unsigned long cp;
                switch (e) {
                case 't': *q++ = '\t'; break;
                case 'b': *q++ = '\b'; break;
                case 'n': *q++ = '\n'; break;
                case 'r': *q++ = '\r'; break;
                case 'f': *q++ = '\f'; break;
                case '"': *q++ = '"'; break;
                case '\'': *q++ = '\''; break;
                case '\\': *q++ = '\\'; break;
                case 'u':
                case 'U':
                    if (read_hex(&p, e == 'u' ? 4 : 8, &cp)) {
                        free(o);
                        return *why = "bad \\u escape in literal", -1;
                    }
                    q += put_utf8(q, cp);
                    break;
                default: free(o); return *why = "bad escape in literal", -1;
                }
                continue;
            }
            *q++ = c;
            p++;
        }
        *q = 0;
        p++;
        t->val = o;
        t->kind = 'L';
        if (*p == '@') {
            const char *s = ++p;
            while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-')
                p++;
            if (p == s) return term_free(t), *why = "empty language tag", -1;
            t->lang = donto_xmalloc((size_t)(p - s) + 1);
            memcpy(t->lang, s, (size_t)(p - s));
            t->lang[p - s] = 0;
        } else if (p[0] == '^' && p[1] == '^') {
            p += 2;
            if (*p != '<') return term_free(t), *why = "datatype must be an IRI", -1;
            p++;
            if (!(t->dt = read_iri(&p, why))) return term_free(t), -1;
        }
    } else {
        return *why = allow_lit ? "expected an IRI, blank node or literal"
                                : "expected an IRI or blank node", -1;
    }
    *pp = p;
    return 0;
}

/* {"v": value, "lang": tag} or {"v": value, "dt": iri} (xsd:string omitted). */
static char *literal_json(const nq_term *t) {
    json_t *o = json_object();
    json_object_set_new(o, "v", json_string(t->val));
    if (t->lang) json_object_set_new(o, "lang", json_string(t->lang));
    if (t->dt && strcmp(t->dt, XSD_STRING) != 0) json_object_set_new(o, "dt", json_string(t->dt));
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

static int nq_line(loader *L, const char *line) {
    const char *p = skip_ws(line);
    if (!*p || *p == '#' || *p == '\n' || *p == '\r') return 0;
    nq_term s = {0}, pr = {0}, o = {0}, g = {0};
    const char *why = NULL;
    int rc = -1;
    char *lit = NULL;
    if (read_term(&p, &s, 0, &why)) goto bad;
    if (read_term(&p, &pr, 0, &why)) goto bad;
    if (pr.kind != 'I') {
        why = "the predicate must be an IRI";
        goto bad;
    }
    if (read_term(&p, &o, 1, &why)) goto bad;
    p = skip_ws(p);
    if (*p && *p != '.' && *p != '\n' && *p != '\r' && *p != '#') {
        if (read_term(&p, &g, 0, &why)) goto bad;
        p = skip_ws(p);
    }
    if (*p != '.') {
        why = "expected '.' at the end of the statement";
        goto bad;
    }
    p = skip_ws(p + 1);
    if (*p && *p != '#' && *p != '\n' && *p != '\r') {
        why = "unexpected text after '.'";
        goto bad;
    }
    if (o.kind == 'L') lit = literal_json(&o);
    /* A label statement also names its subject. */
    const char *s_label = NULL;
    if (o.kind == 'L' && (!strcmp(pr.val, RDFS_LABEL) || !strcmp(pr.val, SKOS_PREF))) s_label = o.val;
    rc = add_claim(L, NULL, s.val, s_label, NULL, pr.val, NULL, o.kind == 'L' ? NULL : o.val, NULL,
                   NULL, lit, g.val);
    goto done;
bad:
    lerr(L, why, NULL);
done:
    free(lit);
    term_free(&s);
    term_free(&pr);
    term_free(&o);
    term_free(&g);
    return rc;
}

/* ---- JSONL -------------------------------------------------------------------- */

static const char *jstr(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) && *json_string_value(v) ? json_string_value(v) : NULL;
}

/* A bare predicate name ("hypernym") becomes an IRI: wn:NAME for WordNet's
 * relations (with their phrase as label), donto:NAME otherwise. */
static char *pred_iri(const char *p, const char **label) {
    if (strchr(p, ':')) return donto_xstrdup(p);
    size_t n = strlen(p) + 8;
    char *r = donto_xmalloc(n);
    const char *phrase = donto_wordnet_phrase(p);
    snprintf(r, n, "%s:%s", phrase ? "wn" : "donto", p);
    if (phrase && !*label) *label = phrase;
    return r;
}

static int jl_claim(loader *L, json_t *o) {
    const char *subj = jstr(o, "subject"), *pred = jstr(o, "predicate");
    if (!subj || !pred) return lerr(L, "a claim needs \"subject\" and \"predicate\" strings", NULL);
    const char *s_label = jstr(o, "subject_label"), *p_label = jstr(o, "predicate_label"),
               *o_label = jstr(o, "object_label");
    const char *obj = jstr(o, "object_iri");
    if (!obj) obj = jstr(o, "object");
    json_t *olit = json_object_get(o, "object_lit");
    char s_iri[64], o_iri[64];
    /* The WordNet corpus form: the label in subject/object, the synset aside
     * (its part of speech is the entity's kind, as a WordNet import has it). */
    const char *ss = jstr(o, "subject_synset"), *os = jstr(o, "object_synset");
    const char *s_kind = NULL, *o_kind = NULL;
    if (ss) {
        snprintf(s_iri, sizeof s_iri, "wn:%s", ss);
        if (!s_label) s_label = subj;
        subj = s_iri;
        s_kind = donto_wordnet_pos_name(ss);
    }
    if (os && obj) {
        snprintf(o_iri, sizeof o_iri, "wn:%s", os);
        if (!o_label) o_label = obj;
        obj = o_iri;
        o_kind = donto_wordnet_pos_name(os);
    }
    char *lit = NULL;
    if (!obj) {
        if (!olit || json_is_null(olit))
            return lerr(L, "a claim needs \"object\" (an IRI) or \"object_lit\"", NULL);
        json_t *w = json_is_object(olit) && json_object_get(olit, "v") ? json_incref(olit) : NULL;
        if (!w) {
            w = json_object();
            json_object_set(w, "v", olit);
        }
        lit = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        json_decref(w);
    }
    char idbuf[37];
    const char *sid = NULL;
    const char *given = jstr(o, "statement_id");
    if (given) {
        if (!donto_is_uuid(given)) {
            free(lit);
            return lerr(L, "\"statement_id\" is not a uuid", given);
        }
        donto_statement_id(given, idbuf);
        sid = idbuf;
    } else if ((given = jstr(o, "id"))) {
        donto_statement_id(given, idbuf);
        sid = idbuf;
    }
    char *piri = pred_iri(pred, &p_label);
    int rc = add_claim(L, sid, subj, s_label, s_kind, piri, p_label, obj, o_label, o_kind, lit,
                       jstr(o, "context"));
    free(piri);
    free(lit);
    return rc;
}

static int jl_line(loader *L, const char *line, size_t len) {
    const char *p = skip_ws(line);
    if (!*p || *p == '\n' || *p == '\r') return 0;
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!o) return lerr(L, "bad JSON", je.text);
    int rc = -1;
    if (!json_is_object(o)) {
        lerr(L, "each line must be a JSON object", NULL);
        goto done;
    }
    json_t *r = json_object_get(o, "retract");
    if (r) {
        if (json_is_string(r)) {
            const char *id = json_string_value(r);
            rc = do_retract(L, &id, 1);
        } else if (json_is_array(r)) {
            size_t n = json_array_size(r);
            const char **ids = donto_xmalloc((n ? n : 1) * sizeof *ids);
            rc = 0;
            for (size_t i = 0; i < n; i++) {
                ids[i] = json_string_value(json_array_get(r, i));
                if (!ids[i]) rc = lerr(L, "\"retract\" must hold statement id strings", NULL);
            }
            if (rc == 0) rc = do_retract(L, ids, n);
            free(ids);
        } else {
            lerr(L, "\"retract\" must be a statement id or an array of them", NULL);
        }
        goto done;
    }
    const char *kind = jstr(o, "kind");
    if (!kind) kind = json_object_get(o, "subject") ? "claim" : jstr(o, "text") ? "memory_chunk" : NULL;
    if (!kind) {
        lerr(L, "cannot tell what this record is (no \"kind\", \"subject\" or \"text\")", NULL);
    } else if (!strcmp(kind, "claim")) {
        rc = jl_claim(L, o);
    } else if (!strcmp(kind, "memory_chunk")) {
        const char *id = jstr(o, "chunk_id");
        if (!id) id = jstr(o, "id");
        const char *text = jstr(o, "text");
        if (!id || !text) {
            lerr(L, "a memory chunk needs \"id\" (or \"chunk_id\") and \"text\"", NULL);
        } else {
            const char *c[3] = {id, jstr(o, "source"), text};
            rc = sub_writer_add(&L->w, SUB_CHUNK, c, L->err);
        }
    } else if (!strcmp(kind, "predicate")) {
        const char *iri = jstr(o, "iri"), *label = jstr(o, "label");
        if (!iri) {
            lerr(L, "a predicate needs \"iri\"", NULL);
        } else {
            char *full = pred_iri(iri, &label);
            const char *c[3] = {full, label, jstr(o, "description")};
            rc = sub_writer_add(&L->w, SUB_PREDICATE, c, L->err);
            free(full);
        }
    } else if (!strcmp(kind, "entity")) {
        const char *iri = jstr(o, "iri");
        if (!iri) {
            lerr(L, "an entity needs \"iri\"", NULL);
        } else {
            const char *c[3] = {iri, jstr(o, "label"), jstr(o, "entity_kind")};
            rc = sub_writer_add(&L->w, SUB_ENTITY, c, L->err);
        }
    } else if (!strcmp(kind, "argument")) {
        const char *src = jstr(o, "source"), *dst = jstr(o, "target"), *rel = jstr(o, "relation");
        json_t *strength = json_object_get(o, "strength");
        if (!src || !dst || !rel) {
            lerr(L, "an argument needs \"source\", \"target\" (statement ids) and \"relation\"", NULL);
        } else if (strcmp(rel, "supports") && strcmp(rel, "rebuts") && strcmp(rel, "undercuts") &&
                   strcmp(rel, "undermines") && strcmp(rel, "qualifies")) {
            lerr(L, "unknown argument relation (supports, rebuts, undercuts, undermines, qualifies)", rel);
        } else if (strength && !json_is_number(strength) && !json_is_null(strength)) {
            lerr(L, "\"strength\" must be a number", NULL);
        } else {
            char a[37], b[37], sv[32] = "";
            donto_statement_id(src, a);
            donto_statement_id(dst, b);
            if (json_is_number(strength)) snprintf(sv, sizeof sv, "%.17g", json_number_value(strength));
            const char *c[5] = {a, b, rel, *sv ? sv : NULL, jstr(o, "context")};
            rc = sub_writer_add(&L->w, SUB_ARGUMENT, c, L->err);
        }
    } else {
        lerr(L, "unknown \"kind\" (claim, predicate, entity, memory_chunk, argument)", kind);
    }
done:
    json_decref(o);
    return rc;
}

/* ---- driver ------------------------------------------------------------------- */

static int load_lines(loader *L, donto_load_format fmt, FILE *f, const char *data, size_t len,
                      donto_progress_fn progress, void *ctx) {
    char *line = NULL;
    size_t cap = 0, off = 0;
    double last = donto_now();
    int rc = 0;
    for (;;) {
        ssize_t n;
        const char *lp;
        if (f) {
            n = getline(&line, &cap, f);
            if (n < 0) break;
            lp = line;
        } else {
            if (off >= len) break;
            const char *e = memchr(data + off, '\n', len - off);
            size_t l = e ? (size_t)(e - (data + off)) + 1 : len - off;
            if (l + 1 > cap) line = donto_xrealloc(line, cap = l + 1);
            memcpy(line, data + off, l);
            line[l] = 0;
            off += l;
            n = (ssize_t)l;
            lp = line;
        }
        L->line++;
        if (memchr(lp, 0, (size_t)n)) {
            rc = lerr(L, "NUL byte in line", NULL);
            break;
        }
        rc = fmt == DONTO_FORMAT_NQUADS ? nq_line(L, lp) : jl_line(L, lp, (size_t)n);
        if (rc) break;
        if (progress && (L->line & 1023) == 0 && donto_now() - last > 0.2) {
            last = donto_now();
            progress(ctx, "lines", L->line, 0);
        }
    }
    if (f && rc == 0 && ferror(f)) rc = donto_seterr(L->err, "%s: read: %s", L->name, strerror(errno));
    free(line);
    L->w.st->lines = L->line;
    return rc;
}

static int load_any(donto_store *s, const char *name, FILE *f, const char *data, size_t len,
                    donto_load_format fmt, donto_progress_fn progress, void *ctx,
                    donto_load_stats *st, donto_err *err) {
    donto_load_stats local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;
    loader L = {.name = name, .err = err};
    sub_writer_init(&L.w, s, ops, st);
    if (ops->begin(s, err)) return -1;
    int rc = load_lines(&L, fmt, f, data, len, progress, ctx);
    if (rc == 0) rc = sub_writer_flush(&L.w, err);
    if (rc == 0 && L.line == 0) {
        /* not an error, but worth saying: nothing in it */
    }
    if (rc == 0)
        rc = ops->commit(s, err);
    else
        ops->rollback(s);
    sub_writer_free(&L.w);
    if (rc) {
        /* Nothing was kept: say so in the counts too. */
        size_t lines = st->lines;
        memset(st, 0, sizeof *st);
        st->lines = lines;
    }
    if (progress && rc == 0) progress(ctx, "lines", st->lines, st->lines);
    return rc;
}

int donto_load_file(donto_store *s, const char *path, donto_load_format fmt,
                    donto_progress_fn progress, void *ctx, donto_load_stats *st, donto_err *err) {
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return donto_seterr(err, "%s: %s", path, strerror(errno));
    int rc = load_any(s, is_stdin ? "<stdin>" : path, f, NULL, 0, fmt, progress, ctx, st, err);
    if (!is_stdin) fclose(f);
    return rc;
}

int donto_load_buffer(donto_store *s, const char *name, const char *data, size_t len,
                      donto_load_format fmt, donto_load_stats *st, donto_err *err) {
    return load_any(s, name, NULL, data, len, fmt, NULL, NULL, st, err);
}
