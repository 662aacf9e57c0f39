/* donto-accel: the substrate's text builders and ids (include/donto/substrate.h).
 * Pure functions of a row: the text queued for embedding and the text recall
 * shows come from here and nowhere else. */
#include "donto/substrate.h"

#include <ctype.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int is_sep(char c) { return c == '#' || c == '/' || c == ':'; }

char *donto_humanize_iri(const char *iri) {
    if (!iri) return donto_xstrdup("");
    size_t len = strlen(iri);
    /* Skip trailing separators ("http://x/Thing/" names Thing). */
    while (len && is_sep(iri[len - 1])) len--;
    size_t start = 0;
    /* The local name: after the last '#', else the last '/', else the last ':'. */
    const char *seps = "#/:";
    for (const char *sp = seps; *sp; sp++) {
        size_t i = len;
        while (i && iri[i - 1] != *sp) i--;
        if (i) {
            start = i;
            break;
        }
    }
    if (start >= len) start = 0; /* nothing after it: keep the whole IRI */
    /* Decode %XX, turn '_' and '-' into spaces. */
    char *dec = donto_xmalloc(len - start + 1);
    size_t m = 0;
    for (size_t i = start; i < len; i++) {
        char c = iri[i];
        if (c == '%' && i + 2 < len && hexval(iri[i + 1]) >= 0 && hexval(iri[i + 2]) >= 0) {
            c = (char)(hexval(iri[i + 1]) * 16 + hexval(iri[i + 2]));
            i += 2;
        }
        if (c == '_' || c == '-') c = ' ';
        dec[m++] = c;
    }
    dec[m] = 0;
    /* Split camelCase into words; lower-case Capitalized words after the
     * first (they are camel humps, not names), keep acronyms. */
    donto_buf out = {0};
    int words = 0;
    size_t i = 0;
    while (i < m) {
        if (isspace((unsigned char)dec[i])) {
            i++;
            continue;
        }
        /* One whitespace-delimited token, split further at case changes. */
        size_t j = i;
        while (j < m && !isspace((unsigned char)dec[j])) j++;
        size_t w = i;
        while (w < j) {
            size_t e = w + 1;
            while (e < j) {
                unsigned char p = (unsigned char)dec[e - 1], c = (unsigned char)dec[e];
                /* lower or digit -> Upper: "hasPart" */
                if ((islower(p) || isdigit(p)) && isupper(c)) break;
                /* UPPER run -> Upper lower: "HTTPServer" */
                if (isupper(p) && isupper(c) && e + 1 < j && islower((unsigned char)dec[e + 1]))
                    break;
                e++;
            }
            if (words++) donto_buf_str(&out, " ");
            int capitalized = isupper((unsigned char)dec[w]) && (e - w == 1 || !isupper((unsigned char)dec[w + 1]));
            if (words > 1 && capitalized && w > i) {
                /* a camel hump: lower its first letter */
                char c0 = (char)tolower((unsigned char)dec[w]);
                donto_buf_put(&out, &c0, 1);
                donto_buf_put(&out, dec + w + 1, e - w - 1);
            } else {
                donto_buf_put(&out, dec + w, e - w);
            }
            w = e;
        }
        i = j;
    }
    free(dec);
    if (!out.p) return donto_xstrdup(iri); /* nothing readable: the IRI itself */
    return donto_buf_take(&out);
}

static int nonempty(const char *s) { return s && *s; }

/* The text of a literal: {"v": x} -> x, a JSON string -> its value, other
 * JSON -> its compact form, not JSON -> as given. */
static char *literal_text(const char *lit) {
    json_error_t je;
    json_t *j = json_loads(lit, JSON_DECODE_ANY, &je);
    if (!j) return donto_xstrdup(lit);
    json_t *v = json_is_object(j) && json_object_get(j, "v") ? json_object_get(j, "v") : j;
    char *r;
    if (json_is_string(v))
        r = donto_xstrdup(json_string_value(v));
    else {
        char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        r = donto_xstrdup(d ? d : lit);
        free(d);
    }
    json_decref(j);
    return r;
}

static void part(donto_buf *b, const char *iri, const char *label) {
    if (nonempty(label)) {
        donto_buf_str(b, label);
    } else {
        char *h = donto_humanize_iri(iri);
        donto_buf_str(b, h);
        free(h);
    }
}

char *donto_render_claim(const char *subject, const char *subject_label, const char *predicate,
                         const char *predicate_label, const char *object_iri,
                         const char *object_label, const char *object_lit) {
    donto_buf b = {0};
    part(&b, subject, subject_label);
    donto_buf_str(&b, " - ");
    part(&b, predicate, predicate_label);
    donto_buf_str(&b, " - ");
    if (object_iri || !object_lit) {
        part(&b, object_iri, object_label);
    } else {
        char *t = literal_text(object_lit);
        donto_buf_str(&b, t);
        free(t);
    }
    return donto_buf_take(&b);
}

char *donto_render_predicate(const char *iri, const char *label, const char *description) {
    donto_buf b = {0};
    part(&b, iri, label);
    if (nonempty(description)) {
        donto_buf_str(&b, ": ");
        donto_buf_str(&b, description);
    }
    return donto_buf_take(&b);
}

char *donto_render_entity(const char *iri, const char *label, const char *kind) {
    donto_buf b = {0};
    part(&b, iri, label);
    if (nonempty(kind)) {
        donto_buf_str(&b, " (");
        donto_buf_str(&b, kind);
        donto_buf_str(&b, ")");
    }
    return donto_buf_take(&b);
}

/* Approximate WordPiece cost of one whitespace-delimited word. */
static int approx_cost(const char *w, size_t len) {
    int c = 1;
    for (size_t i = 0; i < len; i++)
        if (ispunct((unsigned char)w[i])) c++;
    /* a word that is punctuation only ("--") costs its characters, not one more */
    int all = 1;
    for (size_t i = 0; i < len; i++)
        if (!ispunct((unsigned char)w[i])) all = 0;
    return all ? c - 1 : c;
}

/* Byte offsets of word ends. */
typedef struct {
    size_t *end;
    size_t n;
} word_ends;

static word_ends split_words(const char *t) {
    word_ends we = {0};
    size_t cap = 0, i = 0;
    while (t[i]) {
        while (t[i] && isspace((unsigned char)t[i])) i++;
        if (!t[i]) break;
        while (t[i] && !isspace((unsigned char)t[i])) i++;
        if (we.n == cap) we.end = donto_xrealloc(we.end, (cap = cap ? 2 * cap : 64) * sizeof *we.end);
        we.end[we.n++] = i;
    }
    return we;
}

char *donto_render_chunk(const char *text, const donto_tokenizer *tok, int cap) {
    if (!text) return donto_xstrdup("");
    if (cap <= 0) cap = DONTO_CHUNK_TOKEN_CAP;
    if (cap < 3) cap = 3;
    word_ends we = split_words(text);
    size_t keep = 0; /* words kept */
    if (tok) {
        int32_t *ids = donto_xmalloc(sizeof(int32_t) * (size_t)(cap + 1));
        /* Whole text fits? (encode truncates at cap+1, so n <= cap means it fits) */
        int n = donto_tokenizer_encode(tok, text, strlen(text), ids, cap + 1);
        if (n >= 0 && n <= cap) {
            keep = we.n;
        } else {
            /* Binary search the longest word prefix that fits: the token
             * count of a prefix never falls as words are added. */
            size_t lo = 0, hi = we.n;
            while (lo < hi) {
                size_t mid = lo + (hi - lo + 1) / 2;
                int k = donto_tokenizer_encode(tok, text, we.end[mid - 1], ids, cap + 1);
                if (k >= 0 && k <= cap)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            keep = lo;
        }
        free(ids);
    } else {
        int used = 2; /* [CLS] [SEP] */
        size_t start = 0;
        for (size_t w = 0; w < we.n; w++) {
            while (isspace((unsigned char)text[start])) start++;
            int c = approx_cost(text + start, we.end[w] - start);
            if (used + c > cap) break;
            used += c;
            keep = w + 1;
            start = we.end[w];
        }
    }
    char *r;
    if (keep == we.n) {
        r = donto_xstrdup(text);
    } else {
        size_t len = keep ? we.end[keep - 1] : 0;
        r = donto_xmalloc(len + 1);
        memcpy(r, text, len);
        r[len] = 0;
    }
    free(we.end);
    return r;
}

/* ---- ids ------------------------------------------------------------------ */

int donto_is_uuid(const char *s) {
    if (!s) return 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return 0;
        } else if (hexval((unsigned char)s[i]) < 0) {
            return 0;
        }
    }
    return s[36] == 0;
}

void donto_name_uuid(const char *ns, const char *name, size_t len, char out[37]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, "donto:", 6);
    EVP_DigestUpdate(c, ns, strlen(ns));
    EVP_DigestUpdate(c, "", 1); /* the NUL separates namespace and name */
    EVP_DigestUpdate(c, name, len);
    EVP_DigestFinal_ex(c, md, &mdlen);
    EVP_MD_CTX_free(c);
    md[6] = (unsigned char)((md[6] & 0x0f) | 0x80); /* version 8: custom, name-based */
    md[8] = (unsigned char)((md[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    static const char hx[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = hx[md[i] >> 4];
        out[o++] = hx[md[i] & 15];
    }
    out[o] = 0;
}

void donto_statement_id(const char *s, char out[37]) {
    if (donto_is_uuid(s)) {
        for (int i = 0; i < 36; i++) out[i] = (char)tolower((unsigned char)s[i]);
        out[36] = 0;
    } else {
        donto_name_uuid("id", s ? s : "", s ? strlen(s) : 0, out);
    }
}
