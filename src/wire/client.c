/* donto-accel wire protocol, client side: the request bodies a worker sends
 * and the answers it reads back, as pure functions (no I/O, no globals, no
 * clock). See include/donto/wire.h and docs/protocol.md.
 *
 * Builders write the JSON text directly (jw, wire_int.h), as the server's
 * lease answer does: a submit of 256 vectors is half a megabyte of text, and
 * a jansson tree of it costs more than the encoding. Every string is checked
 * for UTF-8 first, so a body is valid JSON or not built at all. Parsers go
 * through jansson and treat the answer as untrusted: every field is type
 * checked, every allocation is checked, and a failed parse frees all it
 * made. They are fuzzed like the server's (tests/fuzz/fuzz_client.c). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/models.h"
#include "donto/store.h"
#include "donto/wire.h"
#include "wire_int.h"

/* ---- builders ------------------------------------------------------------ */

/* A string field must be present and valid UTF-8 (jw_str would otherwise
 * replace bytes, and the server would see a different id). */
static int check_str(const char *s, const char *what, donto_err *err) {
    if (!s) return donto_seterrc(err, DONTO_E_INVALID, "%s is missing", what);
    if (!utf8_valid(s)) return donto_seterrc(err, DONTO_E_INVALID, "%s is not valid UTF-8", what);
    return 0;
}

static int check_target(int target, const char *what, donto_err *err) {
    if (target < 0 || target >= DONTO_TARGET_N) return donto_seterrc(err, DONTO_E_INVALID, "%s: no such target (%d)", what, target);
    return 0;
}

/* Hand the finished text over, or report the allocation failure. */
static int finish(jw *w, char **out, donto_err *err) {
    jw_put(w, "", 1); /* the NUL */
    if (w->failed) {
        free(w->p);
        return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    }
    *out = w->p;
    return 0;
}

static void put_key_str(jw *w, const char *key, const char *v) {
    jw_lit(w, key);
    jw_str(w, v);
}

static void put_int(jw *w, const char *key, int64_t v) {
    char num[48];
    int n = snprintf(num, sizeof num, "%s%" PRId64, key, v);
    jw_put(w, num, (size_t)n);
}

int donto_proto_build_lease(const char *worker_id, int64_t n, int target, char **out, donto_err *err) {
    *out = NULL;
    if (check_str(worker_id, "worker_id", err)) return -1;
    if (n < 1) return donto_seterrc(err, DONTO_E_INVALID, "lease: n must be at least 1 (got %" PRId64 ")", n);
    if (target != -1 && check_target(target, "lease", err)) return -1;
    jw w = {0};
    put_key_str(&w, "{\"worker_id\":", worker_id);
    put_int(&w, ",\"n\":", n);
    if (target < 0)
        jw_lit(&w, ",\"target\":null}");
    else {
        put_key_str(&w, ",\"target\":", donto_target_name((donto_target)target));
        jw_lit(&w, "}");
    }
    return finish(&w, out, err);
}

/* The fields an item of a submit or release carries besides its vector. */
static int put_item_head(jw *w, const donto_client_item *it, size_t i, int with_model, donto_err *err) {
    char what[64];
    snprintf(what, sizeof what, "items[%zu]", i);
    if (check_target(it->target, what, err)) return -1;
    snprintf(what, sizeof what, "items[%zu].item_id", i);
    if (check_str(it->item_id, what, err)) return -1;
    if (with_model && it->model) {
        snprintf(what, sizeof what, "items[%zu].model", i);
        if (check_str(it->model, what, err)) return -1;
    }
    jw_lit(w, i ? ",{" : "{");
    put_key_str(w, "\"target\":", donto_target_name((donto_target)it->target));
    put_key_str(w, ",\"item_id\":", it->item_id);
    /* Only a real fencing token: the server refuses lease_id < 1 (400 for
     * the whole request), and a lease answer without one (legacy) gives 0. */
    if (it->lease_id > 0) put_int(w, ",\"lease_id\":", it->lease_id);
    if (with_model && it->model) put_key_str(w, ",\"model\":", it->model);
    return 0;
}

/* "vector":[...] with each float in the shortest form that reads back as
 * the same float (%.9g); a non-finite one as 1e39 (see wire.h). */
static void put_numbers(jw *w, const float *v, int dims) {
    jw_lit(w, ",\"vector\":[");
    char num[32];
    for (int k = 0; k < dims; k++) {
        int n = isfinite(v[k]) ? snprintf(num, sizeof num, "%s%.9g", k ? "," : "", (double)v[k])
                               : snprintf(num, sizeof num, "%s1e39", k ? "," : "");
        jw_put(w, num, (size_t)n);
    }
    jw_lit(w, "]");
}

static void put_b64(jw *w, const float *v, int dims) {
    jw_lit(w, ",\"vector_b64\":\"");
    size_t need = DONTO_WIRE_B64_LEN((size_t)dims) + 1;
    jw_grow(w, need);
    if (w->failed) return;
    w->len += donto_wire_f32_b64_into(w->p + w->len, v, (size_t)dims);
    jw_lit(w, "\"");
}

int donto_proto_build_submit(const char *worker_id, const donto_client_item *items, size_t n, int dims,
                             int numbers, char **out, donto_err *err) {
    *out = NULL;
    if (check_str(worker_id, "worker_id", err)) return -1;
    if (dims < 1) return donto_seterrc(err, DONTO_E_INVALID, "submit: dims must be at least 1 (got %d)", dims);
    if (n && !items) return donto_seterrc(err, DONTO_E_INVALID, "submit: no items");
    jw w = {0};
    /* base64 is 4/3 of the float bytes; numbers ~12 characters each. */
    jw_grow(&w, 64 + n * (128 + (size_t)dims * (numbers ? 13 : 6)));
    put_key_str(&w, "{\"worker_id\":", worker_id);
    jw_lit(&w, ",\"items\":[");
    const float *prev = NULL; /* the last vector written, and where its text is */
    size_t prev_off = 0, prev_len = 0;
    for (size_t i = 0; i < n && !w.failed; i++) {
        const donto_client_item *it = &items[i];
        if (!it->vector) {
            free(w.p);
            return donto_seterrc(err, DONTO_E_INVALID, "items[%zu]: no vector", i);
        }
        if (put_item_head(&w, it, i, 1, err)) {
            free(w.p);
            return -1;
        }
        if (it->vector == prev) { /* the same floats: copy the text */
            jw_grow(&w, prev_len);
            if (w.failed) break;
            memcpy(w.p + w.len, w.p + prev_off, prev_len);
            w.len += prev_len;
        } else {
            size_t off = w.len;
            if (numbers)
                put_numbers(&w, it->vector, dims);
            else
                put_b64(&w, it->vector, dims);
            prev = it->vector, prev_off = off, prev_len = w.len - off;
        }
        jw_lit(&w, "}");
    }
    jw_lit(&w, "]}");
    return finish(&w, out, err);
}

int donto_proto_build_release(const char *worker_id, const donto_client_item *items, size_t n, char **out,
                              donto_err *err) {
    *out = NULL;
    if (check_str(worker_id, "worker_id", err)) return -1;
    if (n && !items) return donto_seterrc(err, DONTO_E_INVALID, "release: no items");
    jw w = {0};
    put_key_str(&w, "{\"worker_id\":", worker_id);
    jw_lit(&w, ",\"items\":[");
    for (size_t i = 0; i < n && !w.failed; i++) {
        if (put_item_head(&w, &items[i], i, 0, err)) {
            free(w.p);
            return -1;
        }
        jw_lit(&w, "}");
    }
    jw_lit(&w, "]}");
    return finish(&w, out, err);
}

int donto_proto_build_extend(const char *worker_id, const donto_client_item *items, size_t n, char **out,
                             donto_err *err) {
    return donto_proto_build_release(worker_id, items, n, out, err);
}

int donto_proto_build_report(const char *worker_id, const char *kind, const char *message, char **out,
                             donto_err *err) {
    *out = NULL;
    if (check_str(worker_id, "worker_id", err) || check_str(kind, "kind", err) ||
        check_str(message, "message", err))
        return -1;
    jw w = {0};
    put_key_str(&w, "{\"worker_id\":", worker_id);
    put_key_str(&w, ",\"kind\":", kind);
    put_key_str(&w, ",\"message\":", message);
    jw_lit(&w, "}");
    return finish(&w, out, err);
}

/* ---- parsers ------------------------------------------------------------- */

/* The answer must be one JSON object. Duplicate keys are taken as jansson
 * takes them (the last wins), as the worker always has. */
static json_t *load_answer(const char *body, size_t len, const char *what, donto_err *err) {
    if (!body || len == 0) {
        donto_seterrc(err, DONTO_E_INVALID, "%s answer is empty", what);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        donto_seterrc(err, DONTO_E_INVALID, "%s answer is not JSON (line %d column %d: %s)", what, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        donto_seterrc(err, DONTO_E_INVALID, "%s answer is not a JSON object", what);
        return NULL;
    }
    return root;
}

/* A copy of a string value, or of an integer value's decimal text (ids).
 * *oom = 1 when the copy could not be made; NULL without *oom: wrong type. */
static char *dup_id(json_t *v, int *oom) {
    char num[32];
    const char *s;
    size_t n;
    if (json_is_string(v)) {
        s = json_string_value(v);
        n = json_string_length(v);
    } else if (json_is_integer(v)) {
        n = (size_t)snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        s = num;
    } else {
        return NULL;
    }
    char *c = malloc(n + 1);
    if (!c) {
        *oom = 1;
        return NULL;
    }
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

static char *dup_cstr(const char *s, int *oom) {
    size_t n = strlen(s);
    char *c = malloc(n + 1);
    if (!c) {
        *oom = 1;
        return NULL;
    }
    memcpy(c, s, n + 1);
    return c;
}

void donto_lease_item_clear(donto_lease_item *it) {
    if (!it) return;
    free(it->item_id);
    free(it->text);
    free(it->model);
    memset(it, 0, sizeof *it);
}

void donto_lease_resp_free(donto_lease_resp *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) donto_lease_item_clear(&r->items[i]);
    free(r->items);
    memset(r, 0, sizeof *r);
}

static int parse_lease_item(json_t *o, size_t i, donto_lease_item *it, donto_err *err) {
    if (!json_is_object(o)) return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu is not an object", i);
    int oom = 0;
    json_t *tg = json_object_get(o, "target");
    if (!json_is_string(tg)) return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: \"target\" is not a string", i);
    it->target = donto_target_parse(json_string_value(tg));
    if (it->target < 0) return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: unknown target", i);
    it->item_id = dup_id(json_object_get(o, "item_id"), &oom);
    if (!it->item_id && !oom)
        return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: \"item_id\" is not a string or an integer", i);
    json_t *tx = json_object_get(o, "text");
    if (!oom && !json_is_string(tx)) return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: \"text\" is not a string", i);
    if (!oom) it->text = dup_cstr(json_string_value(tx), &oom);
    json_t *md = json_object_get(o, "model");
    if (!oom && md && !json_is_string(md))
        return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: \"model\" is not a string", i);
    if (!oom) it->model = dup_cstr(md ? json_string_value(md) : DONTO_DEFAULT_MODEL, &oom);
    if (oom) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    json_t *lid = json_object_get(o, "lease_id");
    if (lid && !json_is_integer(lid))
        return donto_seterrc(err, DONTO_E_INVALID, "lease answer item %zu: \"lease_id\" is not an integer", i);
    it->lease_id = lid ? (int64_t)json_integer_value(lid) : 0;
    return 0;
}

int donto_proto_parse_lease_response(const char *body, size_t len, donto_lease_resp *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    json_t *root = load_answer(body, len, "lease", err);
    if (!root) return -1;
    int rc = -1;
    json_t *arr = json_object_get(root, "batch");
    if (!json_is_array(arr)) {
        donto_seterrc(err, DONTO_E_INVALID, "lease answer is not {\"batch\": [...]}");
        goto done;
    }
    json_t *ttl = json_object_get(root, "lease_ttl_ms");
    if (ttl && (!json_is_integer(ttl) || json_integer_value(ttl) < 0)) {
        donto_seterrc(err, DONTO_E_INVALID, "lease answer: \"lease_ttl_ms\" is not a non-negative integer");
        goto done;
    }
    size_t n = json_array_size(arr);
    out->items = calloc(n ? n : 1, sizeof *out->items);
    if (!out->items) {
        donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        out->n = i + 1; /* so that a failure frees what this item got */
        if (parse_lease_item(json_array_get(arr, i), i, &out->items[i], err)) goto done;
    }
    rc = 0;
done:
    if (rc == 0 && ttl) out->ttl_ms = (int64_t)json_integer_value(ttl);
    json_decref(root);
    if (rc) donto_lease_resp_free(out); /* err is untouched by the free */
    return rc;
}

void donto_submit_resp_free(donto_submit_resp *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_rejected; i++) {
        free(r->rejected[i].item_id);
        free(r->rejected[i].reason);
    }
    free(r->rejected);
    memset(r, 0, sizeof *r);
}

int donto_proto_parse_submit_response(const char *body, size_t len, donto_submit_resp *out, donto_err *err) {
    memset(out, 0, sizeof *out);
    json_t *root = load_answer(body, len, "submit", err);
    if (!root) return -1;
    int rc = -1;
    json_t *up = json_object_get(root, "upserted"), *rej = json_object_get(root, "rejected");
    if (!json_is_integer(up) || json_integer_value(up) < 0) {
        donto_seterrc(err, DONTO_E_INVALID, "submit answer has no \"upserted\" count");
        goto done;
    }
    out->upserted = (int64_t)json_integer_value(up);
    if (rej && !json_is_array(rej)) {
        donto_seterrc(err, DONTO_E_INVALID, "submit answer: \"rejected\" is not an array");
        goto done;
    }
    out->has_rejected = rej != NULL;
    size_t n = json_array_size(rej);
    if (n) {
        out->rejected = calloc(n, sizeof *out->rejected);
        if (!out->rejected) {
            donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(rej, i);
        donto_submit_reject *r = &out->rejected[i];
        out->n_rejected = i + 1;
        if (!json_is_object(o)) {
            donto_seterrc(err, DONTO_E_INVALID, "submit answer: rejected[%zu] is not an object", i);
            goto done;
        }
        /* Fields are taken when they have the right type: the list is for
         * logs and counts, and a reject without a reason is still one. */
        int oom = 0;
        json_t *tg = json_object_get(o, "target"), *why = json_object_get(o, "reason");
        r->item_id = dup_id(json_object_get(o, "item_id"), &oom);
        r->target = json_is_string(tg) ? donto_target_parse(json_string_value(tg)) : -1;
        if (!oom && json_is_string(why)) r->reason = dup_cstr(json_string_value(why), &oom);
        if (oom) {
            donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    json_decref(root);
    if (rc) donto_submit_resp_free(out); /* err is untouched by the free */
    return rc;
}

int donto_proto_parse_release_response(const char *body, size_t len, int64_t *released, donto_err *err) {
    *released = 0;
    json_t *root = load_answer(body, len, "release", err);
    if (!root) return -1;
    json_t *r = json_object_get(root, "released");
    int rc = 0;
    if (!json_is_integer(r) || json_integer_value(r) < 0)
        rc = donto_seterrc(err, DONTO_E_INVALID, "release answer has no \"released\" count");
    else
        *released = (int64_t)json_integer_value(r);
    json_decref(root);
    return rc;
}

int donto_proto_parse_extend_response(const char *body, size_t len, int64_t *extended, int64_t *ttl_ms,
                                      donto_err *err) {
    *extended = 0;
    *ttl_ms = 0;
    json_t *root = load_answer(body, len, "extend", err);
    if (!root) return -1;
    json_t *x = json_object_get(root, "extended"), *t = json_object_get(root, "lease_ttl_ms");
    int rc = 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        rc = donto_seterrc(err, DONTO_E_INVALID, "extend answer has no \"extended\" count");
    else if (t && (!json_is_integer(t) || json_integer_value(t) < 0))
        rc = donto_seterrc(err, DONTO_E_INVALID, "extend answer: \"lease_ttl_ms\" is not a non-negative integer");
    if (rc == 0) {
        *extended = (int64_t)json_integer_value(x);
        *ttl_ms = t ? (int64_t)json_integer_value(t) : 0;
    }
    json_decref(root);
    return rc;
}

/* Copy s (n bytes) into out (cap bytes), cut before a UTF-8 continuation
 * byte when it does not fit. */
static void copy_cut(char *out, size_t cap, const char *s, size_t n) {
    if (!out || !cap) return;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    }
    memcpy(out, s, n);
    out[n] = 0;
}

int donto_proto_parse_error_response(const char *body, size_t len, char *code, size_t code_cap, char *message,
                                     size_t message_cap) {
    copy_cut(code, code_cap, "", 0);
    copy_cut(message, message_cap, "", 0);
    if (!body || !len) return -1;
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *c = json_object_get(root, "error"), *m = json_object_get(root, "message");
    int rc = -1;
    if (json_is_object(root) && json_is_string(c)) {
        copy_cut(code, code_cap, json_string_value(c), json_string_length(c));
        if (json_is_string(m)) copy_cut(message, message_cap, json_string_value(m), json_string_length(m));
        rc = 0;
    }
    json_decref(root);
    return rc;
}
