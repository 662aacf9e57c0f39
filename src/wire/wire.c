/* donto-accel wire protocol, server side: request parsers and response
 * builders, pure functions. See include/donto/wire.h and docs/protocol.md. Every input is hostile until checked: lengths are
 * bounded before anything is allocated from them, and a parse either fills
 * the whole struct or leaves nothing to free. */
#define _POSIX_C_SOURCE 200809L
#include "donto/wire.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/models.h"
#include "wire_int.h"

/* ---- tables -------------------------------------------------------------- */

const char *donto_proto_reject_code(donto_reject r) {
    switch (r) {
    case DONTO_REJECT_NONE: return NULL;
    case DONTO_REJECT_UNKNOWN_ITEM: return "unknown_item";
    case DONTO_REJECT_NOT_LEASED: return "not_leased";
    case DONTO_REJECT_LEASE_EXPIRED: return "lease_expired";
    case DONTO_REJECT_WRONG_MODEL: return "wrong_model";
    }
    return "rejected"; /* a verdict newer than this table: still a rejection */
}

/* ---- JSON field helpers ------------------------------------------------- */

/* The body must be one JSON object. Duplicate keys are refused: two
 * "worker_id"s would make "which one did the server use" a question. */
static json_t *load_object(const char *body, size_t len, donto_err *err) {
    if (!body || len == 0) {
        donto_seterrc(err, DONTO_E_INVALID, "empty body: expected a JSON object");
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        donto_seterrc(err, DONTO_E_INVALID, "invalid JSON at line %d column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        donto_seterrc(err, DONTO_E_INVALID, "body must be a JSON object");
        return NULL;
    }
    return root;
}

static int has_control(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 1;
    return 0;
}

/* A required, non-empty string of at most cap-1 bytes without control
 * characters, copied into buf. Used for names that end up in logs. */
static int get_name(json_t *obj, const char *key, char *buf, size_t cap, donto_err *err) {
    json_t *v = json_object_get(obj, key);
    if (!v) return donto_seterrc(err, DONTO_E_INVALID, "missing field \"%s\"", key);
    if (!json_is_string(v)) return donto_seterrc(err, DONTO_E_INVALID, "\"%s\" must be a string", key);
    size_t n = json_string_length(v);
    if (n == 0) return donto_seterrc(err, DONTO_E_INVALID, "\"%s\" must not be empty", key);
    if (n >= cap) return donto_seterrc(err, DONTO_E_INVALID, "\"%s\" is longer than %zu bytes", key, cap - 1);
    const char *s = json_string_value(v);
    if (has_control(s, n)) return donto_seterrc(err, DONTO_E_INVALID, "\"%s\" contains control characters", key);
    memcpy(buf, s, n);
    buf[n] = 0;
    return 0;
}

/* ---- lease --------------------------------------------------------------- */

int donto_proto_parse_lease(const char *body, size_t len, donto_lease_req *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    json_t *root = load_object(body, len, err);
    if (!root) return -1;
    int rc = -1;
    if (get_name(root, "worker_id", out->worker_id, sizeof out->worker_id, err)) goto done;
    json_t *n = json_object_get(root, "n");
    if (!n) {
        donto_seterrc(err, DONTO_E_INVALID, "missing field \"n\"");
        goto done;
    }
    if (!json_is_integer(n)) {
        donto_seterrc(err, DONTO_E_INVALID, "\"n\" must be an integer");
        goto done;
    }
    json_int_t want = json_integer_value(n);
    if (want < 1) {
        donto_seterrc(err, DONTO_E_INVALID, "\"n\" must be at least 1 (got %" JSON_INTEGER_FORMAT ")", want);
        goto done;
    }
    out->capped = want > DONTO_PROTO_LEASE_MAX;
    out->n = out->capped ? DONTO_PROTO_LEASE_MAX : (int)want;
    out->target = -1;
    json_t *t = json_object_get(root, "target");
    if (t && !json_is_null(t)) {
        if (!json_is_string(t)) {
            donto_seterrc(err, DONTO_E_INVALID, "\"target\" must be a string or null");
            goto done;
        }
        out->target = donto_target_parse(json_string_value(t));
        if (out->target < 0) {
            donto_seterrc(err, DONTO_E_INVALID, "unknown target (expected claim, predicate, entity or memory_chunk)");
            goto done;
        }
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* ---- submit / release ---------------------------------------------------- */

void donto_items_req_free(donto_items_req *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].item_id);
        free(r->items[i].vector);
        free(r->items[i].model);
        json_decref(r->items[i].item_id_json);
    }
    free(r->items);
    memset(r, 0, sizeof *r);
}

/* item_id: a non-empty string, or an integer (some legacy producers used
 * numeric ids). The store sees a string either way; the client gets back
 * exactly the JSON value it sent. */
static int parse_item_id(json_t *v, size_t i, donto_proto_item *it, donto_err *err) {
    char num[32];
    const char *s;
    size_t n;
    if (!v) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu]: missing field \"item_id\"", i);
    if (json_is_string(v)) {
        s = json_string_value(v);
        n = json_string_length(v);
        if (n == 0) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].item_id must not be empty", i);
        if (n > DONTO_PROTO_ITEM_ID_MAX)
            return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].item_id is longer than %d bytes", i, DONTO_PROTO_ITEM_ID_MAX);
    } else if (json_is_integer(v)) {
        n = (size_t)snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        s = num;
    } else {
        return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].item_id must be a string or an integer", i);
    }
    it->item_id = malloc(n + 1);
    if (!it->item_id) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    memcpy(it->item_id, s, n);
    it->item_id[n] = 0;
    it->item_id_json = json_incref(v);
    return 0;
}

/* A JSON array of numbers. Every element must be a number (a string in a
 * vector is a broken client, not a bad vector: 400). Length and values are
 * judged per item. Allocation happens only when the length already matches
 * the model, so a 10,000-element array costs no more than its parse. */
static int parse_vector_array(json_t *arr, size_t i, donto_proto_item *it, donto_err *err) {
    size_t n = json_array_size(arr);
    for (size_t k = 0; k < n; k++)
        if (!json_is_number(json_array_get(arr, k)))
            return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].vector[%zu] is not a number", i, k);
    if (it->reason) return 0;
    if (n != (size_t)it->dims) {
        it->reason = "wrong_dims";
        return 0;
    }
    float *v = malloc(n * sizeof *v + 1);
    if (!v) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        double d = json_number_value(json_array_get(arr, k));
        /* A finite double beyond float range would convert to inf (and the
         * conversion itself is undefined in ISO C): reject it here. */
        if (!isfinite(d) || fabs(d) > FLT_MAX) {
            free(v);
            it->reason = "non_finite";
            return 0;
        }
        v[k] = (float)d;
    }
    it->vector = v;
    it->reason = donto_proto_check_vector(v, n, it->dims);
    return 0;
}

/* ---- lifting base64 vectors out of a submit body ---------------------------
 *
 * A submit of 256 base64 vectors is ~0.5 MB of JSON, nearly all of it inside
 * the "vector_b64" strings, and jansson's lexer (a byte at a time, building
 * each string in a growing buffer) spent more CPU on them than everything
 * else in the coordinator together. So before jansson sees the body, every
 * "vector_b64" string value is lifted out: the JSON handed to jansson gets a
 * placeholder "*<k>" instead, and the k-th span (pointing into the original
 * body) is decoded straight from there.
 *
 * This is exact, not heuristic: the scan follows JSON's string syntax (a
 * string ends at an unescaped quote), a string is a key when ':' follows it,
 * and the lift gives up (the body is parsed as it is) when any key or any
 * vector_b64 value contains a backslash. Then every member that jansson
 * decodes as "vector_b64" was seen raw by the scan, so every vector_b64
 * string jansson returns is one of our placeholders: a client cannot forge
 * one. A body the scan cannot make sense of is parsed as it is, so errors
 * are reported against the client's own text. */
typedef struct {
    const char **p; /* span k: p[k], n[k] bytes, inside the original body */
    size_t *n;
    size_t count, cap;
} b64_lift;

static void lift_free(b64_lift *l) {
    free(l->p);
    free(l->n);
    memset(l, 0, sizeof *l);
}

static size_t skip_ws(const char *s, size_t i, size_t len) {
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* The end of the string whose opening quote is at s[i] (index of the
 * closing quote, or len when unterminated); *esc = 1 when it has a
 * backslash. Linear: each memchr starts where the previous one of its kind
 * stopped (a body of many backslashes must not cost quadratic time). */
static size_t string_end(const char *s, size_t i, size_t len, int *esc) {
    *esc = 0;
    size_t j = i + 1, qe = 0; /* qe: a quote at or after j, once found */
    int have_q = 0;
    while (j < len) {
        if (!have_q || qe < j) {
            const char *q = memchr(s + j, '"', len - j);
            if (!q) return len;
            qe = (size_t)(q - s);
            have_q = 1;
        }
        const char *b = memchr(s + j, '\\', qe - j);
        if (!b) return qe;
        *esc = 1;
        j = (size_t)(b - s) + 2; /* past the backslash and the character it escapes */
    }
    return len;
}

/* The compacted copy (malloc'd, *olen bytes) with spans in *l; NULL when
 * there is nothing to lift, or when the body must be parsed as it is. */
static char *lift_b64(const char *s, size_t len, size_t *olen, b64_lift *l, int *oom) {
    static const char KEY[] = "vector_b64";
    *oom = 0;
    memset(l, 0, sizeof *l);
    char *o = NULL;
    size_t k = 0, from = 0; /* s[from..i) not yet copied */
    for (size_t i = 0; i < len; i++) {
        const char *nq = memchr(s + i, '"', len - i);
        if (!nq) break;
        i = (size_t)(nq - s);
        int esc;
        size_t e = string_end(s, i, len, &esc);
        if (e >= len) break; /* unterminated: jansson reports it */
        size_t c = skip_ws(s, e + 1, len);
        if (c >= len || s[c] != ':') { /* a value, not a key */
            i = e;
            continue;
        }
        if (esc) goto give_up; /* an escaped key could spell vector_b64 */
        size_t v = skip_ws(s, c + 1, len);
        if (e - i - 1 != sizeof KEY - 1 || memcmp(s + i + 1, KEY, sizeof KEY - 1) || v >= len || s[v] != '"') {
            i = c;
            continue;
        }
        size_t ve = string_end(s, v, len, &esc);
        if (ve >= len) break;
        if (esc) goto give_up;
        if (!o) {
            /* "*<k>" is at most 22 bytes and replaces at least 2 (""). */
            if (!(o = malloc(len + len / 2 + 64))) goto oom;
        }
        if (l->count == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 256;
            const char **np = realloc(l->p, cap * sizeof *np);
            if (np) l->p = np;
            size_t *nn = realloc(l->n, cap * sizeof *nn);
            if (nn) l->n = nn;
            if (!np || !nn) goto oom;
            l->cap = cap;
        }
        l->p[l->count] = s + v + 1;
        l->n[l->count] = ve - v - 1;
        memcpy(o + k, s + from, v - from);
        k += v - from;
        k += (size_t)sprintf(o + k, "\"*%zu\"", l->count);
        l->count++;
        from = ve + 1;
        i = ve;
    }
    if (!o) return NULL;
    memcpy(o + k, s + from, len - from);
    k += len - from;
    o[k] = 0;
    *olen = k;
    return o;
oom:
    *oom = 1;
give_up:
    free(o);
    lift_free(l);
    return NULL;
}

static int parse_vector_b64(json_t *str, size_t i, const b64_lift *lift, donto_proto_item *it, donto_err *err) {
    if (!json_is_string(str)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].vector_b64 must be a string", i);
    if (it->reason) return 0;
    const char *s = json_string_value(str);
    size_t len = json_string_length(str), nf = 0;
    if (lift) { /* a placeholder "*<k>" (see lift_b64): the span in the body */
        char *end = NULL;
        unsigned long long k = s[0] == '*' ? strtoull(s + 1, &end, 10) : (unsigned long long)-1;
        if (!end || *end || k >= lift->count) return donto_seterrc(err, DONTO_E_INVALID, "internal error: bad vector placeholder");
        s = lift->p[k];
        len = lift->n[k];
    }
    /* The size first, from the length alone (a bad length is bad base64;
     * a bad character is found by the decode). */
    size_t body = len, pad = 0;
    while (body > 0 && s[body - 1] == '=' && pad < 2) body--, pad++;
    size_t bytes = body / 4 * 3 + (body % 4 ? body % 4 - 1 : 0);
    if (bytes / 4 != (size_t)it->dims) {
        it->reason = donto_proto_b64_f32(s, len, NULL, 0, &nf) ? "bad_base64" : "wrong_dims";
        return 0;
    }
    float *v = malloc(bytes / 4 * sizeof *v + 1);
    if (!v) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    if (donto_proto_b64_f32(s, len, v, bytes / 4, &nf)) {
        free(v);
        it->reason = "bad_base64";
        return 0;
    }
    it->vector = v;
    it->reason = donto_proto_check_vector(v, nf, it->dims);
    return 0;
}

static int parse_item(json_t *o, size_t i, int submit, const b64_lift *lift, donto_proto_item *it,
                      donto_err *err) {
    if (!json_is_object(o)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu] must be an object", i);
    json_t *t = json_object_get(o, "target");
    if (!t) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu]: missing field \"target\"", i);
    if (!json_is_string(t)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].target must be a string", i);
    it->target = donto_target_parse(json_string_value(t));
    if (it->target < 0)
        return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].target: unknown target (expected claim, predicate, entity or "
                                 "memory_chunk)", i);
    if (parse_item_id(json_object_get(o, "item_id"), i, it, err)) return -1;
    json_t *l = json_object_get(o, "lease_id");
    if (l && !json_is_null(l)) {
        if (!json_is_integer(l)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].lease_id must be an integer", i);
        if (json_integer_value(l) < 1) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].lease_id must be positive", i);
        it->lease_id = (int64_t)json_integer_value(l);
    }
    if (!submit) return 0;

    const char *model = DONTO_DEFAULT_MODEL;
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].model must be a string", i);
        if (json_string_length(m) > DONTO_PROTO_MODEL_MAX)
            return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].model is longer than %d bytes", i, DONTO_PROTO_MODEL_MAX);
        model = json_string_value(m);
        it->model = strdup(model);
        if (!it->model) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    }
    it->dims = donto_model_dims(model);
    if (!it->dims) it->reason = "unknown_model"; /* still check the shape below */

    json_t *va = json_object_get(o, "vector"), *vb = json_object_get(o, "vector_b64");
    if (va && json_is_null(va)) va = NULL;
    if (vb && json_is_null(vb)) vb = NULL;
    if (va && vb) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu]: give \"vector\" or \"vector_b64\", not both", i);
    if (!va && !vb) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu]: missing field \"vector\" (or \"vector_b64\")", i);
    if (va) {
        if (!json_is_array(va)) return donto_seterrc(err, DONTO_E_INVALID, "items[%zu].vector must be an array of numbers", i);
        return parse_vector_array(va, i, it, err);
    }
    return parse_vector_b64(vb, i, lift, it, err);
}

/* Python's json module writes NaN, Infinity and -Infinity for non-finite
 * floats (allow_nan defaults to True), so a legacy worker with one bad row
 * sends a body that is not JSON. Outside strings nothing valid can contain
 * those words, so they are rewritten to 1e39: a finite double beyond float
 * range, which the item check rejects as non_finite. One bad row then costs
 * one item, not the batch. Returns NULL when there is nothing to rewrite
 * (*oom set when the copy could not be made). */
static char *rewrite_nonfinite(const char *s, size_t len, size_t *olen, int *oom) {
    *oom = 0;
    size_t hits = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *o = NULL;
        size_t k = 0;
        if (pass == 1) {
            if (!hits) return NULL;
            if (!(o = malloc(len + hits + 1))) {
                *oom = 1;
                return NULL;
            }
        }
        for (size_t i = 0; i < len; i++) {
            char c = s[i];
            size_t w = 0;
            if (c == '"') { /* a whole string, copied as it is */
                int esc;
                size_t e = string_end(s, i, len, &esc);
                size_t n = (e < len ? e + 1 : len) - i;
                if (pass == 1) memcpy(o + k, s + i, n), k += n;
                i += n - 1;
                continue;
            }
            if (c == 'N' && len - i >= 3 && !memcmp(s + i, "NaN", 3)) w = 3;
            else if (c == 'I' && len - i >= 8 && !memcmp(s + i, "Infinity", 8)) w = 8;
            if (w) {
                if (pass == 0) hits++;
                else memcpy(o + k, "1e39", 4), k += 4;
                i += w - 1;
            } else if (pass == 1) {
                o[k++] = c;
            }
        }
        if (pass == 1) {
            o[k] = 0;
            *olen = k;
            return o;
        }
    }
    return NULL;
}

/* lift: try lift_b64 first (submit bodies); 0 parses the body as it is. */
static int parse_items(const char *body, size_t len, int submit, int lift_ok, donto_items_req *out,
                       donto_err *err) {
    memset(out, 0, sizeof *out);
    size_t rlen = 0, llen = 0;
    int oom = 0;
    b64_lift lift = {0};
    char *lifted = submit && lift_ok && body ? lift_b64(body, len, &llen, &lift, &oom) : NULL;
    const int use_lift = lifted != NULL;
    if (oom) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    const char *text = lifted ? lifted : body;
    size_t tlen = lifted ? llen : len;
    char *rewritten = submit && text ? rewrite_nonfinite(text, tlen, &rlen, &oom) : NULL;
    if (oom) {
        free(lifted);
        lift_free(&lift);
        return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    }
    json_t *root = rewritten ? load_object(rewritten, rlen, err) : load_object(text, tlen, err);
    free(rewritten);
    free(lifted);
    if (!root && use_lift) { /* report the error against the client's own text */
        lift_free(&lift);
        return parse_items(body, len, submit, 0, out, err);
    }
    if (!root) return -1;
    int rc = -1;
    if (get_name(root, "worker_id", out->worker_id, sizeof out->worker_id, err)) goto done;
    json_t *items = json_object_get(root, "items");
    if (!items) {
        donto_seterrc(err, DONTO_E_INVALID, "missing field \"items\"");
        goto done;
    }
    if (!json_is_array(items)) {
        donto_seterrc(err, DONTO_E_INVALID, "\"items\" must be an array");
        goto done;
    }
    size_t n = json_array_size(items);
    if (n > DONTO_PROTO_ITEMS_MAX) {
        donto_seterrc(err, DONTO_E_INVALID, "too many items: %zu (at most %d per request)", n, DONTO_PROTO_ITEMS_MAX);
        goto done;
    }
    out->items = calloc(n ? n : 1, sizeof *out->items);
    if (!out->items) {
        donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        out->n = i + 1; /* so that a failure frees what this item got */
        if (parse_item(json_array_get(items, i), i, submit, use_lift ? &lift : NULL, &out->items[i], err)) goto done;
    }
    rc = 0;
done:
    json_decref(root);
    lift_free(&lift);
    if (rc) donto_items_req_free(out); /* err is untouched by the free */
    return rc;
}

int donto_proto_parse_submit(const char *body, size_t len, donto_items_req *out, donto_err *err) {
    return parse_items(body, len, 1, 1, out, err);
}

int donto_proto_parse_release(const char *body, size_t len, donto_items_req *out, donto_err *err) {
    return parse_items(body, len, 0, 0, out, err);
}

/* ---- report -------------------------------------------------------------- */

void donto_report_req_free(donto_report_req *r) {
    if (!r) return;
    free(r->message);
    r->message = NULL;
}

int donto_proto_parse_report(const char *body, size_t len, donto_report_req *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    json_t *root = load_object(body, len, err);
    if (!root) return -1;
    int rc = -1;
    if (get_name(root, "worker_id", out->worker_id, sizeof out->worker_id, err)) goto done;
    if (get_name(root, "kind", out->kind, sizeof out->kind, err)) goto done;
    json_t *m = json_object_get(root, "message");
    if (!m) {
        donto_seterrc(err, DONTO_E_INVALID, "missing field \"message\"");
        goto done;
    }
    if (!json_is_string(m)) {
        donto_seterrc(err, DONTO_E_INVALID, "\"message\" must be a string");
        goto done;
    }
    /* Keep the first DONTO_REPORT_MAX_CHARS code points. jansson has
     * already checked the UTF-8, so counting lead bytes counts characters
     * and cutting before a lead byte never splits one. */
    const char *s = json_string_value(m);
    size_t n = json_string_length(m), cut = 0, chars = 0;
    while (cut < n) {
        if (((unsigned char)s[cut] & 0xC0) != 0x80 && chars++ == DONTO_REPORT_MAX_CHARS) break;
        cut++;
    }
    out->truncated = cut < n;
    out->message = malloc(cut + 1);
    if (!out->message) {
        donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
        goto done;
    }
    memcpy(out->message, s, cut);
    out->message[cut] = 0;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* ---- vectors -------------------------------------------------------------- */

/* Base64 alphabet -> value + 1; 0 marks a byte outside the alphabet. */
static const uint8_t B64DEC[256] = {
    ['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8,
    ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16,
    ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24,
    ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32,
    ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40,
    ['o'] = 41, ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48,
    ['w'] = 49, ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56,
    ['4'] = 57, ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

/* One pass: decode 4 characters to 3 bytes straight into the float buffer,
 * noting any character outside the alphabet on the way (the submit path
 * decodes megabytes of these per second; a branchy per-character decoder
 * and a separate validation pass were a sixth of the coordinator's CPU). */
int donto_proto_b64_f32(const char *s, size_t len, float *out, size_t cap, size_t *n_floats) {
    *n_floats = 0;
    if (!s) return -1;
    size_t n = len;
    int pad = 0;
    while (n > 0 && s[n - 1] == '=' && pad < 2) n--, pad++;
    /* Padding, when present, must complete the last quantum exactly. */
    if (pad && (len % 4 != 0 || (n % 4) + (size_t)pad != 4)) return -1;
    if (n % 4 == 1) return -1; /* 6 bits cannot end a byte */
    size_t bytes = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (bytes % 4) return -1;
    const unsigned char *u = (const unsigned char *)s;
    unsigned bad = 0;
    if (!out || bytes / 4 > cap) { /* validate and size only */
        for (size_t i = 0; i < n; i++) bad |= B64DEC[u[i]] == 0;
        if (bad) return -1;
        *n_floats = bytes / 4;
        return 0;
    }
    unsigned char *o = (unsigned char *)out;
    size_t i = 0, k = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t a = B64DEC[u[i]], b = B64DEC[u[i + 1]], c = B64DEC[u[i + 2]], d = B64DEC[u[i + 3]];
        bad |= !a | !b | !c | !d;
        uint32_t x = (a - 1) << 18 | (b - 1) << 12 | (c - 1) << 6 | (d - 1);
        o[k++] = (unsigned char)(x >> 16);
        o[k++] = (unsigned char)(x >> 8);
        o[k++] = (unsigned char)x;
    }
    if (n - i >= 2) { /* 2 or 3 characters: 1 or 2 bytes */
        uint32_t a = B64DEC[u[i]], b = B64DEC[u[i + 1]], c = n - i == 3 ? B64DEC[u[i + 2]] : 1;
        bad |= !a | !b | !c;
        uint32_t x = (a - 1) << 18 | (b - 1) << 12 | (c - 1) << 6;
        o[k++] = (unsigned char)(x >> 16);
        if (n - i == 3) o[k++] = (unsigned char)(x >> 8);
    }
    if (bad) return -1; /* out holds garbage; the caller drops it */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t f = 0; f < bytes / 4; f++) {
        uint32_t w;
        memcpy(&w, o + 4 * f, 4);
        w = __builtin_bswap32(w);
        memcpy(o + 4 * f, &w, 4);
    }
#endif
    *n_floats = bytes / 4;
    return 0;
}

size_t donto_wire_f32_b64_into(char *dst, const float *v, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t bytes = n * 4;
    char *p = dst;
    uint32_t acc = 0;
    int have = 0;
    for (size_t i = 0; i < bytes; i++) {
        uint32_t w;
        memcpy(&w, &v[i / 4], sizeof w);
        acc = (acc << 8) | ((w >> (8 * (i % 4))) & 0xFFu);
        if (++have == 3) {
            *p++ = tab[(acc >> 18) & 63], *p++ = tab[(acc >> 12) & 63];
            *p++ = tab[(acc >> 6) & 63], *p++ = tab[acc & 63];
            acc = 0, have = 0;
        }
    }
    if (have) {
        acc <<= 8 * (3 - have);
        *p++ = tab[(acc >> 18) & 63], *p++ = tab[(acc >> 12) & 63];
        *p++ = have == 2 ? tab[(acc >> 6) & 63] : '=';
        *p++ = '=';
    }
    *p = 0;
    return (size_t)(p - dst);
}

char *donto_proto_f32_b64(const float *v, size_t n) {
    char *o = malloc(DONTO_WIRE_B64_LEN(n) + 1);
    if (!o) return NULL;
    donto_wire_f32_b64_into(o, v, n);
    return o;
}

const char *donto_proto_check_vector(const float *v, size_t n, int dims) {
    if (dims <= 0 || n != (size_t)dims) return "wrong_dims";
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) return "non_finite";
        ss += (double)v[i] * (double)v[i];
    }
    if (!(fabs(sqrt(ss) - 1.0) <= DONTO_PROTO_NORM_TOL)) return "not_unit_norm";
    return NULL;
}

/* ---- responses ------------------------------------------------------------ */

/* Serialise and drop root. Any NULL on the way (allocation failure inside
 * jansson) ends as a NULL result, which the server turns into a 500. */
static char *dump(json_t *root, int ok) {
    char *s = root && ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

/* json_object_set_new that remembers failure. set_new consumes v even when
 * it fails, so nothing leaks on the error path. */
static void put(json_t *o, const char *k, json_t *v, int *ok) {
    if (!v) {
        *ok = 0;
        return;
    }
    if (!o) {
        json_decref(v);
        *ok = 0;
        return;
    }
    if (json_object_set_new(o, k, v)) *ok = 0;
}

/* A JSON string from store text. Rows should hold UTF-8, but one bad row
 * must not turn every lease into a 500: bytes of an invalid string are
 * replaced (>= 0x80 -> '?'), and the item is then rejected at submit
 * (unknown_item) instead of poisoning the batch. */
static json_t *store_string(const char *s) {
    if (!s) s = "";
    json_t *j = json_string(s);
    if (j) return j;
    char *c = strdup(s);
    if (!c) return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

/* ---- lease response, written directly -------------------------------------
 * The lease answer is the coordinator's hottest output (up to 1024 items a
 * call). A jansson tree for it, one object with five hashed keys per item,
 * cost about 6 us per item, a large share of the whole lease on a small
 * machine; writing the text straight into a buffer costs a fraction of that.
 * The bytes are exactly what json_dumps(JSON_COMPACT) writes for the same
 * tree (test_protocol compares the two on hostile strings), including the
 * store_string() rule for invalid UTF-8. The writer (jw) is in wire_int.h,
 * shared with the client side's request builders. */

char *donto_proto_lease_response(const donto_lease_batch *b) {
    return donto_proto_lease_response_ttl(b, 0);
}

char *donto_proto_lease_response_ttl(const donto_lease_batch *b, int64_t ttl_ms) {
    jw w = {0};
    jw_grow(&w, 64 + (b ? b->n : 0) * 160);
    jw_lit(&w, "{\"batch\":[");
    for (size_t i = 0; b && i < b->n; i++) {
        const donto_leased_item *li = &b->items[i];
        char num[48]; /* ,"lease_id": + 20 digits + } */
        jw_lit(&w, i ? ",{\"target\":" : "{\"target\":");
        jw_str(&w, donto_target_name(li->target));
        jw_lit(&w, ",\"item_id\":");
        jw_str(&w, li->item_id);
        jw_lit(&w, ",\"model\":");
        jw_str(&w, li->model);
        jw_lit(&w, ",\"text\":");
        jw_str(&w, li->text);
        int nl = snprintf(num, sizeof num, ",\"lease_id\":%" PRId64 "}", li->lease_id);
        jw_put(&w, num, (size_t)nl);
    }
    if (ttl_ms > 0) {
        char num[48];
        int nl = snprintf(num, sizeof num, "],\"lease_ttl_ms\":%" PRId64 "}", ttl_ms);
        jw_put(&w, num, (size_t)nl + 1); /* with the NUL */
    } else {
        jw_put(&w, "]}", 3); /* with the NUL */
    }
    if (w.failed) {
        free(w.p);
        return NULL;
    }
    return w.p;
}

char *donto_proto_submit_response(size_t upserted, const donto_items_req *r) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "upserted", json_integer((json_int_t)upserted), &ok);
    json_t *rej = NULL;
    for (size_t i = 0; r && i < r->n; i++) {
        const donto_proto_item *it = &r->items[i];
        if (!it->reason) continue;
        if (!rej && !(rej = json_array())) {
            ok = 0;
            break;
        }
        json_t *o = json_object();
        put(o, "item_id", json_incref(it->item_id_json), &ok);
        put(o, "target", json_string(donto_target_name((donto_target)it->target)), &ok);
        put(o, "reason", json_string(it->reason), &ok);
        if (!o || json_array_append_new(rej, o)) ok = 0;
    }
    /* "rejected" only when non-empty: the legacy response had no such key. */
    if (rej) put(root, "rejected", rej, &ok);
    return dump(root, ok);
}

char *donto_proto_release_response(size_t released) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "released", json_integer((json_int_t)released), &ok);
    return dump(root, ok);
}

char *donto_proto_extend_response(size_t extended, int64_t ttl_ms) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "extended", json_integer((json_int_t)extended), &ok);
    put(root, "lease_ttl_ms", json_integer((json_int_t)ttl_ms), &ok);
    return dump(root, ok);
}

char *donto_proto_ok_response(void) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "ok", json_true(), &ok);
    return dump(root, ok);
}

char *donto_proto_error_response(const char *code, const char *message) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "error", json_string(code ? code : "error"), &ok);
    /* A message is built from our own text plus request fragments that
     * jansson already validated, but be safe about invalid UTF-8. */
    json_t *m = json_string(message ? message : "");
    if (!m) m = json_string("(message not representable)");
    put(root, "message", m, &ok);
    return dump(root, ok);
}

int donto_proto_utf8_valid(const char *s) { return s && utf8_valid(s); }

char *donto_proto_health_response(int okv, const char *version, int database, const donto_schema_version *schema,
                                  const char *message) {
    int ok = 1;
    json_t *root = json_object();
    put(root, "ok", json_boolean(okv), &ok);
    put(root, "version", json_string(version ? version : ""), &ok);
    put(root, "database", json_boolean(database), &ok);
    if (schema) {
        json_t *o = json_object();
        put(o, "version", json_integer(schema->current), &ok);
        put(o, "expected", json_integer(schema->expected), &ok);
        put(root, "schema", o, &ok);
    }
    if (message) {
        json_t *m = json_string(message);
        put(root, "message", m ? m : json_string("(message not representable)"), &ok);
    }
    return dump(root, ok);
}

/* Store text in a JSON value; NULL-safe. */
static json_t *jtext(const char *s) { return store_string(s); }

/* A token and its trust record (never its hash). */
static json_t *token_obj(const donto_token_info *t, int *ok) {
    json_t *o = json_object();
    put(o, "name", jtext(t->name), ok);
    put(o, "role", json_string(donto_role_name(t->role)), ok);
    put(o, "created_ms", json_integer((json_int_t)t->created), ok);
    put(o, "revoked", json_boolean(t->revoked), ok);
    put(o, "suspended", json_boolean(t->trust.suspended), ok);
    if (t->trust.suspended) {
        put(o, "reason", jtext(t->trust.reason), ok);
        put(o, "suspended_at_ms", json_integer((json_int_t)t->trust.suspended_at), ok);
    }
    put(o, "streak", json_integer((json_int_t)t->trust.streak), ok);
    put(o, "checks", json_integer((json_int_t)t->trust.checks), ok);
    put(o, "failed", json_integer((json_int_t)t->trust.failed), ok);
    put(o, "withdrawn", json_integer((json_int_t)t->trust.withdrawn), ok);
    return o;
}

char *donto_proto_token_json(const donto_token_info *t) {
    int ok = 1;
    return dump(token_obj(t, &ok), ok);
}

char *donto_proto_stats_response(const donto_target_stats st[DONTO_TARGET_N], const donto_stats_extra *x) {
    int ok = 1;
    json_t *root = json_object();
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        json_t *o = json_object();
        put(o, "embedded", json_integer((json_int_t)st[t].embedded), &ok);
        put(o, "total", json_integer((json_int_t)st[t].total), &ok);
        put(o, "pending", json_integer((json_int_t)st[t].pending), &ok);
        put(o, "leased", json_integer((json_int_t)st[t].leased), &ok);
        put(root, donto_target_name((donto_target)t), o, &ok);
    }
    if (x && x->have_rate) put(root, "items_per_minute", json_integer((json_int_t)x->per_minute), &ok);
    if (x && x->have_contributors) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < x->n_contributors; i++) {
            const donto_contributor *c = &x->contributors[i];
            json_t *o = json_object();
            put(o, "worker_id", jtext(c->worker_id), &ok);
            put(o, "total", json_integer((json_int_t)c->total), &ok);
            put(o, "rejected", json_integer((json_int_t)c->rejected), &ok);
            put(o, "last_seen_ms", json_integer((json_int_t)c->last_seen), &ok);
            if (x->recent_minutes > 0.0)
                put(o, "items_per_minute", json_real((double)c->recent / x->recent_minutes), &ok);
            if (!o || json_array_append_new(arr, o)) ok = 0;
        }
        put(root, "contributors", arr, &ok);
    }
    if (x && x->have_tokens) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < x->n_tokens; i++) {
            json_t *o = token_obj(&x->tokens[i], &ok);
            if (!o || json_array_append_new(arr, o)) ok = 0;
        }
        put(root, "tokens", arr, &ok);
    }
    if (x && x->have_verify) {
        json_t *o = json_object();
        put(o, "queued", json_integer((json_int_t)x->verify_queued), &ok);
        put(o, "checked", json_integer((json_int_t)x->verify_done), &ok);
        put(o, "passed", json_integer((json_int_t)x->verify_passed), &ok);
        put(o, "failed", json_integer((json_int_t)x->verify_failed), &ok);
        put(o, "skipped_queue_full", json_integer((json_int_t)x->verify_dropped), &ok);
        put(o, "canaries_known", json_integer((json_int_t)x->canary_pool), &ok);
        put(o, "canaries_out", json_integer((json_int_t)x->canary_out), &ok);
        put(o, "canaries_passed", json_integer((json_int_t)x->canary_passed), &ok);
        put(o, "canaries_failed", json_integer((json_int_t)x->canary_failed), &ok);
        put(root, "verify", o, &ok);
    }
    if (x && x->have_replicas) {
        json_t *o = json_object();
        put(o, "waiting", json_integer((json_int_t)x->replicas_waiting), &ok);
        put(o, "out", json_integer((json_int_t)x->replicas_out), &ok);
        put(o, "added", json_integer((json_int_t)x->replicas_added), &ok);
        put(o, "refused_full", json_integer((json_int_t)x->replicas_refused), &ok);
        put(o, "agreed", json_integer((json_int_t)x->replicas_agreed), &ok);
        put(o, "disagreed", json_integer((json_int_t)x->replicas_disagreed), &ok);
        put(o, "dropped_no_quorum", json_integer((json_int_t)x->replicas_dropped), &ok);
        put(o, "to_verifier", json_integer((json_int_t)x->replicas_stale), &ok);
        put(root, "replication", o, &ok);
    }
    if (x && x->have_series) {
        json_t *arr = json_array();
        for (int i = 0; arr && i < x->n_series; i++) {
            json_t *o = json_object();
            put(o, "minute_ms", json_integer((json_int_t)((x->series_start_min + i) * 60000)), &ok);
            put(o, "items", json_integer((json_int_t)x->series[i]), &ok);
            if (!o || json_array_append_new(arr, o)) ok = 0;
        }
        put(root, "per_minute", arr, &ok);
    }
    if (x && x->have_reports) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < x->n_reports; i++) {
            const donto_report *r = &x->reports[i];
            json_t *o = json_object();
            put(o, "id", json_integer((json_int_t)r->id), &ok);
            put(o, "worker_id", jtext(r->worker_id), &ok);
            put(o, "kind", jtext(r->kind), &ok);
            put(o, "message", jtext(r->message), &ok);
            put(o, "created_ms", json_integer((json_int_t)r->created), &ok);
            if (!o || json_array_append_new(arr, o)) ok = 0;
        }
        put(root, "reports", arr, &ok);
    }
    return dump(root, ok);
}
