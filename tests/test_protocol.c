/* The coordinator's wire protocol (src/wire/wire.c, server side): every parser with
 * good and bad input of each kind, base64 vectors, vector validation and the
 * shape of every response. Pure functions: no server, no store. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "unitvec.h"
#include "donto/models.h"
#include "donto/wire.h"

/* A unit vector of n floats (deterministic). */
/* JSON text of a float array. */
static char *farr(const float *v, size_t n) {
    size_t cap = n * 20 + 3, len = 0;
    char *s = malloc(cap);
    s[len++] = '[';
    for (size_t i = 0; i < n; i++) len += (size_t)snprintf(s + len, cap - len, "%s%.9g", i ? "," : "", (double)v[i]);
    s[len++] = ']';
    s[len] = 0;
    return s;
}

static int parse_submit_s(const char *body, donto_items_req *r, donto_err *e) {
    return donto_proto_parse_submit(body, strlen(body), r, e);
}

static void test_tables(void) {
    CHECK_EQ_INT(donto_model_dims("BAAI/bge-small-en-v1.5"), 384);
    CHECK_EQ_INT(donto_model_dims("nope"), 0);
    CHECK_EQ_INT(donto_model_dims(NULL), 0);
    CHECK_EQ_INT(donto_target_parse("claim"), DONTO_TARGET_CLAIM);
    CHECK_EQ_INT(donto_target_parse("memory_chunk"), DONTO_TARGET_MEMORY_CHUNK);
    CHECK_EQ_INT(donto_target_parse("Claim"), -1);
    CHECK_EQ_INT(donto_target_parse(""), -1);
    CHECK(!strcmp(donto_target_name(DONTO_TARGET_ENTITY), "entity"), "name");
    CHECK(donto_proto_reject_code(DONTO_REJECT_NONE) == NULL, "none");
    CHECK(!strcmp(donto_proto_reject_code(DONTO_REJECT_LEASE_EXPIRED), "lease_expired"), "code");
}

static void test_lease(void) {
    donto_lease_req q;
    donto_err e = {0};
    const char *ok = "{\"worker_id\": \"w1\", \"n\": 16, \"target\": \"claim\"}";
    CHECK(donto_proto_parse_lease(ok, strlen(ok), &q, &e) == 0, "%s", e.msg);
    CHECK(!strcmp(q.worker_id, "w1") && q.n == 16 && q.target == DONTO_TARGET_CLAIM && !q.capped, "fields");
    const char *any = "{\"worker_id\": \"w1\", \"n\": 1, \"target\": null}";
    CHECK(donto_proto_parse_lease(any, strlen(any), &q, &e) == 0 && q.target == -1, "null target");
    const char *absent = "{\"worker_id\": \"w1\", \"n\": 1}";
    CHECK(donto_proto_parse_lease(absent, strlen(absent), &q, &e) == 0 && q.target == -1, "absent target");
    const char *big = "{\"worker_id\": \"w1\", \"n\": 1000000}";
    CHECK(donto_proto_parse_lease(big, strlen(big), &q, &e) == 0 && q.n == DONTO_PROTO_LEASE_MAX && q.capped,
          "capped");
    const char *huge = "{\"worker_id\": \"w1\", \"n\": 9223372036854775807}";
    CHECK(donto_proto_parse_lease(huge, strlen(huge), &q, &e) == 0 && q.n == DONTO_PROTO_LEASE_MAX, "int64 max");

    static const char *bad[] = {
        "",
        "   ",
        "[]",
        "\"x\"",
        "{",
        "{\"worker_id\": \"w1\", \"n\": 0}",
        "{\"worker_id\": \"w1\", \"n\": -3}",
        "{\"worker_id\": \"w1\", \"n\": \"5\"}",
        "{\"worker_id\": \"w1\", \"n\": 5.0}",
        "{\"worker_id\": \"w1\", \"n\": true}",
        "{\"worker_id\": \"w1\", \"n\": null}",
        "{\"worker_id\": \"w1\"}",
        "{\"n\": 5}",
        "{\"worker_id\": 7, \"n\": 5}",
        "{\"worker_id\": \"\", \"n\": 5}",
        "{\"worker_id\": \"a\\nb\", \"n\": 5}",
        "{\"worker_id\": \"w\\u0000x\", \"n\": 5}",
        "{\"worker_id\": \"w1\", \"n\": 5, \"target\": \"claims\"}",
        "{\"worker_id\": \"w1\", \"n\": 5, \"target\": 3}",
        "{\"worker_id\": \"w1\", \"n\": 5, \"target\": [\"claim\"]}",
        "{\"worker_id\": \"w1\", \"worker_id\": \"w2\", \"n\": 5}",
        "{\"worker_id\": \"w1\", \"n\": 99999999999999999999999}",
        "{\"worker_id\": \"w1\", \"n\": 5} trailing",
        "{\"worker_id\": \"\xff\xfe\", \"n\": 5}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        CHECK(donto_proto_parse_lease(bad[i], strlen(bad[i]), &q, &e) == -1, "accepted bad lease #%zu: %s", i,
              bad[i]);
        CHECK(e.msg[0] != 0, "no message for bad lease #%zu", i);
    }
    /* NULL body with length 0 (an empty POST). */
    CHECK(donto_proto_parse_lease(NULL, 0, &q, &e) == -1, "NULL body");
    /* Oversized worker_id. */
    size_t n = DONTO_PROTO_WORKER_ID_MAX + 1;
    char *b = malloc(n + 64);
    int off = snprintf(b, 64, "{\"worker_id\": \"");
    memset(b + off, 'w', n);
    strcpy(b + off + n, "\", \"n\": 1}");
    CHECK(donto_proto_parse_lease(b, strlen(b), &q, &e) == -1, "long worker_id");
    CHECK_STR_CONTAINS(e.msg, "longer");
    /* Exactly at the limit is fine. */
    memmove(b + off + n - 1, b + off + n, strlen(b + off + n) + 1);
    CHECK(donto_proto_parse_lease(b, strlen(b), &q, &e) == 0, "worker_id at limit: %s", e.msg);
    free(b);
    /* Not NUL-terminated: the parser must respect len. */
    const char pad[] = "{\"worker_id\": \"w1\", \"n\": 2}GARBAGE";
    CHECK(donto_proto_parse_lease(pad, strlen(pad) - 7, &q, &e) == 0 && q.n == 2, "len respected");
    /* Deep nesting is refused by jansson's depth limit, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    size_t p = (size_t)sprintf(deep, "{\"worker_id\": \"w\", \"n\": 1, \"x\": ");
    for (size_t i = 0; i < depth; i++) deep[p++] = '[';
    for (size_t i = 0; i < depth; i++) deep[p++] = ']';
    deep[p++] = '}';
    CHECK(donto_proto_parse_lease(deep, p, &q, &e) == -1, "deep nesting");
    free(deep);
}

static void test_submit_good(void) {
    float v[384];
    unit(v, 384, 1);
    char *arr = farr(v, 384);
    char *b64 = donto_proto_f32_b64(v, 384);
    size_t cap = strlen(arr) + 2 * strlen(b64) + 1024;
    char *body = malloc(cap);
    snprintf(body, cap,
             "{\"worker_id\": \"w1\", \"items\": ["
             "{\"target\": \"claim\", \"item_id\": \"c-1\", \"vector\": %s},"
             "{\"target\": \"entity\", \"item_id\": 42, \"vector_b64\": \"%s\", \"lease_id\": 7},"
             "{\"target\": \"predicate\", \"item_id\": \"p\", \"vector_b64\": \"%s\", \"lease_id\": null, "
             "\"model\": \"sentence-transformers/all-MiniLM-L6-v2\", \"extra\": {\"ignored\": true}}]}",
             arr, b64, b64);
    donto_items_req r;
    donto_err e = {0};
    CHECK(parse_submit_s(body, &r, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(r.n, 3);
    if (r.n == 3) {
        CHECK(!strcmp(r.worker_id, "w1"), "worker");
        CHECK(r.items[0].reason == NULL, "item0 %s", r.items[0].reason);
        CHECK(r.items[0].target == DONTO_TARGET_CLAIM && !strcmp(r.items[0].item_id, "c-1"), "item0 id");
        CHECK(r.items[0].lease_id == 0 && r.items[0].dims == 384 && r.items[0].model == NULL, "item0 legacy");
        CHECK(r.items[0].vector && r.items[0].vector[5] == v[5], "item0 exact float round trip");
        CHECK(r.items[1].reason == NULL && !strcmp(r.items[1].item_id, "42") && r.items[1].lease_id == 7, "item1");
        CHECK(json_is_integer(r.items[1].item_id_json), "numeric id echoed as number");
        CHECK(r.items[1].vector && !memcmp(r.items[1].vector, v, sizeof v), "b64 bit-exact");
        CHECK(r.items[2].reason == NULL && r.items[2].lease_id == 0, "item2");
        CHECK(r.items[2].model && !strcmp(r.items[2].model, "sentence-transformers/all-MiniLM-L6-v2"), "model");
        /* Verdicts -> response. */
        r.items[1].reason = donto_proto_reject_code(DONTO_REJECT_NOT_LEASED);
        char *resp = donto_proto_submit_response(2, &r);
        json_t *j = json_loads(resp, 0, NULL);
        CHECK(j && json_integer_value(json_object_get(j, "upserted")) == 2, "%s", resp);
        json_t *rej = json_object_get(j, "rejected");
        CHECK(json_array_size(rej) == 1, "%s", resp);
        json_t *r0 = json_array_get(rej, 0);
        CHECK(json_integer_value(json_object_get(r0, "item_id")) == 42, "echo as sent: %s", resp);
        CHECK(!strcmp(json_string_value(json_object_get(r0, "reason")), "not_leased"), "%s", resp);
        json_decref(j);
        free(resp);
        r.items[1].reason = NULL;
        resp = donto_proto_submit_response(3, &r);
        CHECK(resp && !strstr(resp, "rejected"), "no rejected key when none: %s", resp);
        free(resp);
    }
    donto_items_req_free(&r);
    /* Empty items: fine, nothing to do. */
    const char *empty = "{\"worker_id\": \"w1\", \"items\": []}";
    CHECK(parse_submit_s(empty, &r, &e) == 0 && r.n == 0, "empty items");
    donto_items_req_free(&r);
    free(body);
    free(arr);
    free(b64);
}

/* One-item submit with the given vector member text; returns the reason
 * (static) or "PARSE" when the whole request failed. */
static const char *one(const char *member) {
    size_t cap = strlen(member) + 256;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": \"x\", %s}]}",
             member);
    donto_items_req r;
    donto_err e = {0};
    const char *res;
    if (parse_submit_s(body, &r, &e)) {
        res = "PARSE";
    } else {
        res = r.items[0].reason ? r.items[0].reason : "OK";
        donto_items_req_free(&r);
    }
    free(body);
    return res;
}

static char *member_arr(const float *v, size_t n) {
    char *a = farr(v, n);
    char *m = malloc(strlen(a) + 32);
    sprintf(m, "\"vector\": %s", a);
    free(a);
    return m;
}

static char *member_b64(const float *v, size_t n) {
    char *a = donto_proto_f32_b64(v, n);
    char *m = malloc(strlen(a) + 32);
    sprintf(m, "\"vector_b64\": \"%s\"", a);
    free(a);
    return m;
}

#define EXPECT(member, want)                                                              \
    do {                                                                                  \
        char *m_ = (member);                                                              \
        const char *got_ = one(m_);                                                       \
        CHECK(!strcmp(got_, (want)), "%.60s...: got %s, want %s", m_, got_, (want));    \
        free(m_);                                                                         \
    } while (0)

/* The base64 fast path (lift_b64 in wire.c) must give exactly what a
 * plain jansson parse gives: placeholders cannot be forged, escapes fall
 * back to the plain parse, errors point into the client's own text. */
static void test_b64_lift(void) {
    float v[384];
    unit(v, 384, 21);
    char *b = donto_proto_f32_b64(v, 384);
    size_t bl = strlen(b);
    char *body = malloc(4 * bl + 1024);
    donto_items_req r;
    donto_err e = {0};
    /* Three items: a real vector, a literal placeholder, a real one again,
     * with odd spacing around the colons. */
    sprintf(body, "{\"worker_id\":\"w\",\"items\":[{\"target\":\"claim\",\"item_id\":\"a\",\"vector_b64\" :  \"%s\"},"
                  "{\"target\":\"claim\",\"item_id\":\"b\",\"vector_b64\":\"*0\"},"
                  "{\"vector_b64\"\n:\t\"%s\",\"target\":\"claim\",\"item_id\":\"c\"}]}",
            b, b);
    CHECK(parse_submit_s(body, &r, &e) == 0 && r.n == 3, "three items: %s", e.msg);
    if (r.n == 3) {
        CHECK(!r.items[0].reason && !memcmp(r.items[0].vector, v, sizeof v), "item a: %s", r.items[0].reason);
        CHECK(r.items[1].reason && !strcmp(r.items[1].reason, "bad_base64"), "a literal \"*0\" is not a placeholder: %s",
              r.items[1].reason ? r.items[1].reason : "accepted");
        CHECK(!r.items[2].reason && !memcmp(r.items[2].vector, v, sizeof v), "item c");
    }
    donto_items_req_free(&r);
    /* An escaped key that spells vector_b64 with a literal "*0": the plain
     * parse, so "*0" is base64 (bad), not the first item's vector. */
    sprintf(body, "{\"worker_id\":\"w\",\"items\":[{\"target\":\"claim\",\"item_id\":\"a\",\"vector_b64\":\"%s\"},"
                  "{\"target\":\"claim\",\"item_id\":\"b\",\"vector\\u005fb64\":\"*0\"}]}",
            b);
    CHECK(parse_submit_s(body, &r, &e) == 0 && r.n == 2, "escaped key: %s", e.msg);
    if (r.n == 2) {
        CHECK(!r.items[0].reason, "escaped key: item a %s", r.items[0].reason);
        CHECK(r.items[1].reason && !strcmp(r.items[1].reason, "bad_base64"), "escaped key forges nothing: %s",
              r.items[1].reason ? r.items[1].reason : "accepted");
    }
    donto_items_req_free(&r);
    /* Escaped slashes in the value ("\/" is "/"): decoded as jansson decodes them. */
    char *esc = malloc(2 * bl + 1);
    size_t k = 0;
    for (size_t i = 0; i < bl; i++) {
        if (b[i] == '/') esc[k++] = '\\';
        esc[k++] = b[i];
    }
    esc[k] = 0;
    if (k > bl) { /* this vector's base64 has a '/' */
        sprintf(body, "{\"worker_id\":\"w\",\"items\":[{\"target\":\"claim\",\"item_id\":\"a\",\"vector_b64\":\"%s\"}]}", esc);
        CHECK(parse_submit_s(body, &r, &e) == 0 && r.n == 1 && !r.items[0].reason &&
                  !memcmp(r.items[0].vector, v, sizeof v),
              "escaped slashes: %s", e.msg);
        donto_items_req_free(&r);
    } else {
        CHECK(0, "test vector has no '/' in its base64; pick another seed");
    }
    free(esc);
    /* A syntax error after a long vector: the column is the client's. */
    sprintf(body, "{\"worker_id\":\"w\",\"items\":[{\"target\":\"claim\",\"item_id\":\"a\",\"vector_b64\":\"%s\"}] x}", b);
    CHECK(parse_submit_s(body, &r, &e) == -1, "syntax error");
    const char *col = strstr(e.msg, "column ");
    CHECK(col && atoi(col + 7) > (int)bl, "error column %s is not in the client's text (vector is %zu chars)", e.msg, bl);
    /* An unterminated vector string, and a key with no value: errors, no crash. */
    sprintf(body, "{\"worker_id\":\"w\",\"items\":[{\"vector_b64\":\"%.100s", b);
    CHECK(parse_submit_s(body, &r, &e) == -1, "unterminated");
    CHECK(parse_submit_s("{\"vector_b64\":", &r, &e) == -1, "dangling key");
    CHECK(parse_submit_s("{\"vector_b64\"", &r, &e) == -1, "dangling key 2");
    /* Many backslashes: linear time (a quadratic scan would not finish). */
    size_t big = 8u << 20;
    char *bs = malloc(big + 64);
    strcpy(bs, "{\"worker_id\":\"");
    size_t o = strlen(bs);
    for (size_t i = 0; i < big / 2; i++) bs[o++] = '\\', bs[o++] = 'n';
    strcpy(bs + o, "\",\"items\":[]}");
    CHECK(parse_submit_s(bs, &r, &e) == -1, "an 8 MB worker_id is refused: %s", e.msg);
    free(bs);
    free(body);
    free(b);
}

static void test_submit_vectors(void) {
    float v[10000];
    unit(v, 384, 2);
    EXPECT(member_arr(v, 384), "OK");
    EXPECT(member_b64(v, 384), "OK");
    /* Wrong lengths, including a 10,000-element vector, both encodings. */
    unit(v, 10000, 3);
    EXPECT(member_arr(v, 10000), "wrong_dims");
    EXPECT(member_b64(v, 10000), "wrong_dims");
    unit(v, 383, 4);
    EXPECT(member_arr(v, 383), "wrong_dims");
    EXPECT(member_b64(v, 383), "wrong_dims");
    EXPECT(strdup("\"vector\": []"), "wrong_dims");
    EXPECT(strdup("\"vector_b64\": \"\""), "wrong_dims");
    /* Non-finite: NaN and inf only reach us through base64 (JSON has no
     * such literals); a finite double beyond float range is non_finite. */
    unit(v, 384, 5);
    v[17] = NAN;
    EXPECT(member_b64(v, 384), "non_finite");
    v[17] = INFINITY;
    EXPECT(member_b64(v, 384), "non_finite");
    v[17] = -INFINITY;
    EXPECT(member_b64(v, 384), "non_finite");
    unit(v, 384, 5);
    char *m = member_arr(v, 384);
    char *at = strchr(m, ',');
    /* Replace the second component's text with 1e300 (a double, not a float). */
    char *next = strchr(at + 1, ',');
    size_t tail = strlen(next);
    memmove(at + 1 + 5, next, tail + 1);
    memcpy(at + 1, "1e300", 5);
    EXPECT(m, "non_finite");
    /* 1e999 overflows a double: jansson refuses the number, so the whole
     * request is malformed (400). */
    EXPECT(strdup("\"vector\": [1e999]"), "PARSE");
    EXPECT(strdup("\"vector\": [-1e999, 0]"), "PARSE");
    /* Python's json.dumps writes NaN / Infinity / -Infinity: per item. */
    unit(v, 384, 5);
    for (int k = 0; k < 3; k++) {
        static const char *lit[] = {"NaN", "Infinity", "-Infinity"};
        char *a = member_arr(v, 384);
        char *first = strchr(a, '[') + 1, *comma = strchr(first, ',');
        char *r = malloc(strlen(a) + 16);
        sprintf(r, "%.*s%s%s", (int)(first - a), a, lit[k], comma);
        free(a);
        EXPECT(r, "non_finite");
    }
    EXPECT(strdup("\"vector\": [NaN]"), "wrong_dims");
    EXPECT(strdup("\"vector\": [NaNa]"), "PARSE");
    EXPECT(strdup("\"vector\": NaN"), "PARSE"); /* a number, not an array */
    {
        /* Inside strings nothing is rewritten. */
        const char *b = "{\"worker_id\": \"NaN \\\"Infinity\", \"items\": [{\"target\": \"claim\", "
                        "\"item_id\": \"NaN-Infinity\", \"vector\": [NaN]}]}";
        donto_items_req r;
        donto_err e = {0};
        CHECK(parse_submit_s(b, &r, &e) == 0, "%s", e.msg);
        CHECK(r.n == 1 && !strcmp(r.items[0].item_id, "NaN-Infinity") && !strcmp(r.worker_id, "NaN \"Infinity"),
              "strings untouched");
        donto_items_req_free(&r);
        /* Release bodies are not rewritten (they carry no vectors). */
        const char *rb = "{\"worker_id\": \"w\", \"items\": [], \"x\": NaN}";
        CHECK(donto_proto_parse_release(rb, strlen(rb), &r, &e) == -1, "release NaN");
    }
    /* Norm. */
    unit(v, 384, 6);
    for (int i = 0; i < 384; i++) v[i] *= 2;
    EXPECT(member_arr(v, 384), "not_unit_norm");
    memset(v, 0, 384 * sizeof *v);
    EXPECT(member_b64(v, 384), "not_unit_norm");
    unit(v, 384, 7);
    for (int i = 0; i < 384; i++) v[i] *= 1.0005f; /* within 1e-3 */
    EXPECT(member_arr(v, 384), "OK");
    for (int i = 0; i < 384; i++) v[i] *= 1.002f; /* now ~1.0025 */
    EXPECT(member_b64(v, 384), "not_unit_norm");
    /* Integer components are numbers too (a one-hot vector is unit norm). */
    char *onehot = malloc(384 * 2 + 32);
    strcpy(onehot, "\"vector\": [1");
    for (int i = 1; i < 384; i++) strcat(onehot, ",0");
    strcat(onehot, "]");
    EXPECT(onehot, "OK");
    /* Base64 garbage: per-item. */
    EXPECT(strdup("\"vector_b64\": \"!!!!\""), "bad_base64");
    EXPECT(strdup("\"vector_b64\": \"AAAA AAA\""), "bad_base64");
    EXPECT(strdup("\"vector_b64\": \"AAAAA\""), "bad_base64");  /* 5 chars: 6 dangling bits */
    EXPECT(strdup("\"vector_b64\": \"AAAAAA==\""), "wrong_dims"); /* valid: one float */
    EXPECT(strdup("\"vector_b64\": \"AAA=\""), "bad_base64");  /* 2 bytes: not float32s */
    EXPECT(strdup("\"vector_b64\": \"AAAA===\""), "bad_base64");
    EXPECT(strdup("\"vector_b64\": \"AA-_AA==\""), "bad_base64"); /* url-safe alphabet is not ours */
    /* Unknown model: per-item. */
    unit(v, 384, 8);
    m = member_arr(v, 384);
    char *mm = malloc(strlen(m) + 64);
    sprintf(mm, "\"model\": \"acme/secret-model\", %s", m);
    free(m);
    EXPECT(mm, "unknown_model");
    /* Wrong types and structure: the whole request. */
    EXPECT(strdup("\"vector\": \"[1,2]\""), "PARSE");
    EXPECT(strdup("\"vector\": [1, \"2\"]"), "PARSE");
    EXPECT(strdup("\"vector\": [1, null]"), "PARSE");
    EXPECT(strdup("\"vector\": [[1]]"), "PARSE");
    EXPECT(strdup("\"vector\": {}"), "PARSE");
    EXPECT(strdup("\"vector_b64\": 5"), "PARSE");
    EXPECT(strdup("\"vector\": [1], \"vector_b64\": \"AAAA\""), "PARSE");
    EXPECT(strdup("\"lease_id\": 1"), "PARSE"); /* no vector at all */
    EXPECT(strdup("\"vector\": [1], \"lease_id\": \"7\""), "PARSE");
    EXPECT(strdup("\"vector\": [1], \"lease_id\": 0"), "PARSE");
    EXPECT(strdup("\"vector\": [1], \"lease_id\": -2"), "PARSE");
    EXPECT(strdup("\"vector\": [1], \"lease_id\": 1.5"), "PARSE");
    EXPECT(strdup("\"vector\": [1], \"model\": 3"), "PARSE");
}

static void test_submit_structure(void) {
    static const char *bad[] = {
        "{\"items\": []}",
        "{\"worker_id\": \"w\"}",
        "{\"worker_id\": \"w\", \"items\": {}}",
        "{\"worker_id\": \"w\", \"items\": [1]}",
        "{\"worker_id\": \"w\", \"items\": [{\"item_id\": \"x\", \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"bogus\", \"item_id\": \"x\", \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": 1, \"item_id\": \"x\", \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": \"\", \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": 1.5, \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": null, \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": [\"x\"], \"vector\": [1]}]}",
        "{\"worker_id\": \"w\", \"items\": null}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        donto_items_req r;
        donto_err e = {0};
        CHECK(parse_submit_s(bad[i], &r, &e) == -1, "accepted bad submit #%zu", i);
        CHECK(e.msg[0], "no message #%zu", i);
        CHECK(r.items == NULL && r.n == 0, "left state #%zu", i);
    }
    /* A bad item after good ones: the good ones' memory is freed (ASan). */
    float v[384];
    unit(v, 384, 9);
    char *a = farr(v, 384);
    char *body = malloc(strlen(a) * 2 + 512);
    sprintf(body,
            "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": \"a\", \"vector\": %s},"
            "{\"target\": \"claim\", \"item_id\": \"b\", \"vector\": %s}, {\"target\": \"claim\"}]}",
            a, a);
    donto_items_req r;
    donto_err e = {0};
    CHECK(parse_submit_s(body, &r, &e) == -1, "bad third item");
    CHECK_STR_CONTAINS(e.msg, "items[2]");
    free(body);
    free(a);
    /* Oversized item_id. */
    size_t n = DONTO_PROTO_ITEM_ID_MAX + 1;
    body = malloc(n + 256);
    int off = sprintf(body, "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": \"");
    memset(body + off, 'i', n);
    strcpy(body + off + n, "\", \"vector\": [1]}]}");
    CHECK(parse_submit_s(body, &r, &e) == -1, "long item_id");
    free(body);
    /* Too many items. */
    size_t many = DONTO_PROTO_ITEMS_MAX + 1;
    const char *it = "{\"target\":\"claim\",\"item_id\":\"x\",\"vector\":[1]},";
    body = malloc(many * strlen(it) + 64);
    char *p = body + sprintf(body, "{\"worker_id\": \"w\", \"items\": [");
    for (size_t i = 0; i < many; i++) p += sprintf(p, "%s", it);
    strcpy(p - 1, "]}");
    CHECK(parse_submit_s(body, &r, &e) == -1, "too many items");
    CHECK_STR_CONTAINS(e.msg, "too many");
    free(body);
}

static void test_release(void) {
    const char *ok = "{\"worker_id\": \"w\", \"items\": [{\"target\": \"claim\", \"item_id\": \"a\", \"lease_id\": 3},"
                     "{\"target\": \"memory_chunk\", \"item_id\": \"b\"}]}";
    donto_items_req r;
    donto_err e = {0};
    CHECK(donto_proto_parse_release(ok, strlen(ok), &r, &e) == 0, "%s", e.msg);
    CHECK(r.n == 2 && r.items[0].lease_id == 3 && r.items[1].target == DONTO_TARGET_MEMORY_CHUNK, "release items");
    CHECK(r.items[0].vector == NULL && r.items[0].reason == NULL, "no vector needed");
    donto_items_req_free(&r);
    const char *bad = "{\"worker_id\": \"w\", \"items\": [{\"item_id\": \"a\"}]}";
    CHECK(donto_proto_parse_release(bad, strlen(bad), &r, &e) == -1, "release without target");
    char *resp = donto_proto_release_response(5);
    CHECK(resp && !strcmp(resp, "{\"released\":5}"), "%s", resp);
    free(resp);
}

static void test_report(void) {
    donto_report_req q;
    donto_err e = {0};
    const char *ok = "{\"worker_id\": \"w\", \"kind\": \"oom\", \"message\": \"out of memory on GPU 0\"}";
    CHECK(donto_proto_parse_report(ok, strlen(ok), &q, &e) == 0, "%s", e.msg);
    CHECK(!strcmp(q.kind, "oom") && !strcmp(q.message, "out of memory on GPU 0") && !q.truncated, "report");
    donto_report_req_free(&q);
    /* 2,000 characters of which many are multi-byte: keep exactly 1,500
     * characters and never split one. */
    size_t chars = 2000;
    char *body = malloc(chars * 3 + 128);
    char *p = body + sprintf(body, "{\"worker_id\": \"w\", \"kind\": \"k\", \"message\": \"");
    for (size_t i = 0; i < chars; i++) p += sprintf(p, "%s", i % 2 ? "\xc3\xa9" : "a");
    strcpy(p, "\"}");
    CHECK(donto_proto_parse_report(body, strlen(body), &q, &e) == 0, "%s", e.msg);
    size_t got = 0;
    for (const char *s = q.message; s && *s; s++) got += ((unsigned char)*s & 0xC0) != 0x80;
    CHECK_EQ_INT(got, DONTO_REPORT_MAX_CHARS);
    CHECK(q.truncated, "truncated flag");
    CHECK_EQ_INT(strlen(q.message), 750 + 750 * 2);
    donto_report_req_free(&q);
    free(body);
    static const char *bad[] = {
        "{\"worker_id\": \"w\", \"kind\": \"k\"}",
        "{\"worker_id\": \"w\", \"message\": \"m\"}",
        "{\"kind\": \"k\", \"message\": \"m\"}",
        "{\"worker_id\": \"w\", \"kind\": \"k\", \"message\": 5}",
        "{\"worker_id\": \"w\", \"kind\": \"\", \"message\": \"m\"}",
        "{\"worker_id\": \"w\", \"kind\": [], \"message\": \"m\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(donto_proto_parse_report(bad[i], strlen(bad[i]), &q, &e) == -1, "accepted bad report #%zu", i);
    const char *empty_msg = "{\"worker_id\": \"w\", \"kind\": \"k\", \"message\": \"\"}";
    CHECK(donto_proto_parse_report(empty_msg, strlen(empty_msg), &q, &e) == 0 && q.message[0] == 0, "empty msg");
    donto_report_req_free(&q);
}

static void test_b64(void) {
    /* Round trips of every length class (n floats -> 4n bytes, all three
     * padding cases among 1..3 floats). */
    for (size_t n = 0; n <= 5; n++) {
        float v[5] = {1.5f, -2.25f, 3e-38f, 1e38f, -0.0f}, back[5];
        char *s = donto_proto_f32_b64(v, n);
        size_t nf = 99;
        CHECK(donto_proto_b64_f32(s, strlen(s), back, 5, &nf) == 0 && nf == n, "round trip %zu", n);
        CHECK(!memcmp(v, back, n * sizeof *v), "bits %zu", n);
        /* Without padding it decodes the same. */
        size_t l = strlen(s);
        while (l && s[l - 1] == '=') l--;
        CHECK(donto_proto_b64_f32(s, l, back, 5, &nf) == 0 && nf == n, "unpadded %zu", n);
        free(s);
    }
    /* Known bytes: 1.0f little-endian = 00 00 80 3f -> "AACAPw==". */
    float one;
    size_t nf;
    CHECK(donto_proto_b64_f32("AACAPw==", 8, &one, 1, &nf) == 0 && nf == 1 && one == 1.0f, "1.0f");
    /* Too long for the buffer: counted, nothing written. */
    float small[1] = {42};
    CHECK(donto_proto_b64_f32("AACAPwAAgD8=", 12, small, 1, &nf) == 0 && nf == 2 && small[0] == 42, "cap");
    CHECK(donto_proto_b64_f32(NULL, 0, NULL, 0, &nf) == -1, "NULL");
    CHECK(donto_proto_b64_f32("AACAPw=", 7, NULL, 0, &nf) == -1, "bad padding length");
    CHECK(donto_proto_b64_f32("AACAP===", 8, NULL, 0, &nf) == -1, "three pads");
    CHECK(donto_proto_b64_f32("AAC\nAPw==", 9, NULL, 0, &nf) == -1, "newline");
    /* A full-size vector of arbitrary bit patterns round-trips, and one byte
     * outside the alphabet anywhere (decode path, right length) fails it. */
    uint32_t bits[384];
    unsigned x = 12345;
    for (int i = 0; i < 384; i++) x = x * 1103515245u + 12345u, bits[i] = x ^ (x >> 13) * 2654435761u;
    char *b = donto_proto_f32_b64((const float *)bits, 384);
    float back[384];
    CHECK(b && donto_proto_b64_f32(b, strlen(b), back, 384, &nf) == 0 && nf == 384 && !memcmp(bits, back, sizeof bits),
          "384 arbitrary floats round-trip bit for bit");
    size_t bl = b ? strlen(b) : 0;
    const char bad[] = {'!', '-', '_', '\0', (char)0x80, (char)0xff, '='};
    for (size_t pos = 0; b && pos < bl - 2; pos += pos < 8 ? 1 : 97) {
        for (size_t k = 0; k < sizeof bad; k++) {
            char save = b[pos];
            b[pos] = bad[k];
            CHECK(donto_proto_b64_f32(b, bl, back, 384, &nf) == -1, "byte 0x%02x at %zu accepted",
                  (unsigned char)bad[k], pos);
            b[pos] = save;
        }
    }
    free(b);
}

/* The lease answer is written without jansson (wire.c says why); it must
 * be byte for byte what json_dumps writes for the same tree, with invalid
 * UTF-8 bytes (>= 0x80) turned into '?' as before. */
static char *lease_via_jansson(const donto_leased_item *it, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *f[3] = {it[i].item_id, it[i].model, it[i].text};
        json_t *v[3];
        for (int k = 0; k < 3; k++) {
            v[k] = json_string(f[k]);
            if (!v[k]) {
                char *c = strdup(f[k]);
                for (char *p = c; *p; p++)
                    if ((unsigned char)*p >= 0x80) *p = '?';
                v[k] = json_string(c);
                free(c);
            }
        }
        json_t *o = json_object();
        json_object_set_new(o, "target", json_string(donto_target_name((int)it[i].target)));
        json_object_set_new(o, "item_id", v[0]);
        json_object_set_new(o, "model", v[1]);
        json_object_set_new(o, "text", v[2]);
        json_object_set_new(o, "lease_id", json_integer((json_int_t)it[i].lease_id));
        json_array_append_new(arr, o);
    }
    json_t *root = json_object();
    json_object_set_new(root, "batch", arr);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static void test_lease_writer(void) {
    static const char *texts[] = {
        "", "plain", "quote \" and backslash \\ and slash /", "\b\f\n\r\t", "\x01\x02\x1f\x7f",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad",          /* valid 2, 3, 4 bytes */
        "lone \x80", "cut \xc3", "cut3 \xe2\x82", "overlong \xc0\xaf", "overlong3 \xe0\x80\xaf",
        "surrogate \xed\xa0\x80", "max \xf4\x8f\xbf\xbf", "above \xf4\x90\x80\x80", "f5 \xf5\x80\x80\x80",
        "overlong4 \xf0\x80\x80\x80", "mixed ok \xc3\xa9 bad \xff \"q\" \n end",
        "\xef\xbb\xbf BOM and U+2028 \xe2\x80\xa8 kept",
    };
    size_t nt = sizeof texts / sizeof texts[0];
    donto_leased_item *it = calloc(nt * nt, sizeof *it);
    size_t n = 0;
    for (size_t a = 0; a < nt; a++)
        for (size_t c = 0; c < nt; c += 3) {
            it[n] = (donto_leased_item){(donto_target)(n % (DONTO_TARGET_N + 1)), (char *)texts[(a + c) % nt],
                                        (char *)texts[a], (char *)texts[c],
                                        n % 2 ? (int64_t)n * 1000003 : INT64_MAX - (int64_t)n};
            n++;
        }
    for (size_t k = 0; k <= n; k += n) { /* each item alone, then the whole batch */
        for (size_t i = 0; i < (k ? 1 : n); i++) {
            const donto_leased_item *sub = k ? it : it + i;
            size_t m = k ? n : 1;
            donto_lease_batch b = {(donto_leased_item *)sub, m};
            char *got = donto_proto_lease_response(&b), *want = lease_via_jansson(sub, m);
            CHECK(got && want && !strcmp(got, want), "lease writer differs from jansson:\n got %s\nwant %s",
                  got ? got : "(null)", want ? want : "(null)");
            free(got);
            free(want);
        }
    }
    free(it);
}

static void test_responses(void) {
    donto_leased_item it[2] = {
        {DONTO_TARGET_CLAIM, "c1", "hello \"world\"", "BAAI/bge-small-en-v1.5", 11},
        {DONTO_TARGET_MEMORY_CHUNK, "m\xff", "bad utf8 \xfe", "BAAI/bge-small-en-v1.5", 12},
    };
    donto_lease_batch b = {it, 2};
    char *s = donto_proto_lease_response(&b);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    json_t *batch = json_object_get(j, "batch");
    CHECK(json_array_size(batch) == 2, "%s", s);
    json_t *i0 = json_array_get(batch, 0);
    CHECK(!strcmp(json_string_value(json_object_get(i0, "target")), "claim"), "target");
    CHECK(!strcmp(json_string_value(json_object_get(i0, "text")), "hello \"world\""), "text");
    CHECK(json_integer_value(json_object_get(i0, "lease_id")) == 11, "lease_id");
    CHECK(!strcmp(json_string_value(json_object_get(i0, "model")), "BAAI/bge-small-en-v1.5"), "model");
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(batch, 1), "item_id")), "m?"), "sanitised");
    json_decref(j);
    free(s);
    donto_lease_batch none = {NULL, 0};
    s = donto_proto_lease_response(&none);
    CHECK(s && !strcmp(s, "{\"batch\":[]}"), "%s", s);
    free(s);
    s = donto_proto_error_response("bad_request", "x \"y\"");
    CHECK(s && !strcmp(s, "{\"error\":\"bad_request\",\"message\":\"x \\\"y\\\"\"}"), "%s", s);
    free(s);
    s = donto_proto_error_response("e", "bad \xff utf8");
    CHECK(s && strstr(s, "\"error\":\"e\""), "invalid UTF-8 message still answers: %s", s);
    free(s);
    s = donto_proto_ok_response();
    CHECK(s && !strcmp(s, "{\"ok\":true}"), "%s", s);
    free(s);
    s = donto_proto_health_response(1, "0.1.0", 1, NULL, NULL);
    CHECK(s && !strcmp(s, "{\"ok\":true,\"version\":\"0.1.0\",\"database\":true}"), "%s", s);
    free(s);
    donto_target_stats st[DONTO_TARGET_N] = {{1, 2, 3, 6}, {0, 0, 0, 0}, {5, 0, 0, 5}, {0, 1, 0, 1}};
    donto_contributor con[1] = {{"w1", 10, 2, 1700000000000, 30}};
    int64_t series[3] = {4, 0, 9};
    donto_stats_extra x = {.have_rate = 1, .per_minute = 7, .have_contributors = 1, .contributors = con,
                           .n_contributors = 1, .have_reports = 1, .reports = NULL, .n_reports = 0,
                           .have_series = 1, .series = series, .n_series = 3, .series_start_min = 28333333,
                           .recent_minutes = 2.5};
    s = donto_proto_stats_response(st, &x);
    j = s ? json_loads(s, 0, NULL) : NULL;
    json_t *c = json_object_get(j, "claim");
    CHECK(json_integer_value(json_object_get(c, "embedded")) == 1 && json_integer_value(json_object_get(c, "total")) == 6 &&
              json_integer_value(json_object_get(c, "pending")) == 2 && json_integer_value(json_object_get(c, "leased")) == 3,
          "%s", s);
    CHECK(json_object_get(j, "memory_chunk") && json_integer_value(json_object_get(j, "items_per_minute")) == 7, "%s", s);
    CHECK(json_array_size(json_object_get(j, "contributors")) == 1 && json_is_array(json_object_get(j, "reports")), "%s", s);
    json_t *c0 = json_array_get(json_object_get(j, "contributors"), 0);
    CHECK(json_real_value(json_object_get(c0, "items_per_minute")) == 12.0, "contributor rate 30 / 2.5 min: %s", s);
    json_t *pm = json_object_get(j, "per_minute");
    CHECK(json_array_size(pm) == 3 &&
              json_integer_value(json_object_get(json_array_get(pm, 0), "minute_ms")) == 28333333LL * 60000 &&
              json_integer_value(json_object_get(json_array_get(pm, 2), "minute_ms")) == 28333335LL * 60000 &&
              json_integer_value(json_object_get(json_array_get(pm, 2), "items")) == 9,
          "per-minute series: %s", s);
    json_decref(j);
    free(s);
    s = donto_proto_stats_response(st, NULL);
    CHECK(s && !strstr(s, "contributors") && !strstr(s, "items_per_minute"), "%s", s);
    free(s);
}

int main(void) {
    test_tables();
    test_lease();
    test_submit_good();
    test_submit_vectors();
    test_submit_structure();
    test_release();
    test_report();
    test_b64();
    test_b64_lift();
    test_responses();
    test_lease_writer();
    return check_report("test_protocol");
}
