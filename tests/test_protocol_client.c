/* The wire protocol's client side (src/wire/client.c): every builder's body
 * read back by the server's own parser (wire.c), every server answer read
 * back by the client's parser, and malformed answers refused with a clear
 * message (never a crash). Pure functions: no server, no store. */
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
#include "donto/store.h"
#include "donto/wire.h"

#define DIMS 384

static int has_key(const char *body, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    return strstr(body, k) != NULL;
}

/* ---- lease request ------------------------------------------------------ */

static void test_build_lease(void) {
    donto_err e = {0};
    char *b = NULL;
    donto_lease_req q;
    CHECK_EQ_INT(donto_proto_build_lease("gpu-7", 64, DONTO_TARGET_ENTITY, &b, &e), 0);
    CHECK(b && !strcmp(b, "{\"worker_id\":\"gpu-7\",\"n\":64,\"target\":\"entity\"}"), "%s", b ? b : "(null)");
    CHECK_EQ_INT(donto_proto_parse_lease(b, strlen(b), &q, &e), 0);
    CHECK(!strcmp(q.worker_id, "gpu-7"), "%s", q.worker_id);
    CHECK_EQ_INT(q.n, 64);
    CHECK_EQ_INT(q.target, DONTO_TARGET_ENTITY);
    free(b);
    /* any target: null, as the worker always sent it */
    CHECK_EQ_INT(donto_proto_build_lease("w \"q\"", 5000, -1, &b, &e), 0);
    CHECK(b && strstr(b, "\"target\":null"), "%s", b ? b : "(null)");
    CHECK_EQ_INT(donto_proto_parse_lease(b, strlen(b), &q, &e), 0);
    CHECK(!strcmp(q.worker_id, "w \"q\""), "%s", q.worker_id);
    CHECK_EQ_INT(q.target, -1);
    CHECK_EQ_INT(q.capped, 1);
    free(b);
    /* refusals */
    b = (char *)1;
    CHECK_EQ_INT(donto_proto_build_lease("w", 0, -1, &b, &e), -1);
    CHECK(b == NULL, "out not cleared");
    CHECK_STR_CONTAINS(e.msg, "n must be at least 1");
    CHECK_EQ_INT(donto_proto_build_lease("w", 1, DONTO_TARGET_N, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "no such target");
    CHECK_EQ_INT(donto_proto_build_lease(NULL, 1, -1, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "worker_id is missing");
    CHECK_EQ_INT(donto_proto_build_lease("bad \xff", 1, -1, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "not valid UTF-8");
}

/* ---- lease answer ------------------------------------------------------- */

static void test_lease_round_trip(void) {
    donto_leased_item it[] = {
        {DONTO_TARGET_CLAIM, "0b9f-uuid", "a claim \"quoted\"\nnew line \\ caf\xc3\xa9", "BAAI/bge-small-en-v1.5", 4711},
        {DONTO_TARGET_MEMORY_CHUNK, "http://x/y#z", "", "BAAI/bge-base-en-v1.5", INT64_MAX},
        {DONTO_TARGET_PREDICATE, "p", "\x01 control \t tab \xf0\x9f\x98\x80", "m", 1},
    };
    donto_lease_batch batch = {it, 3};
    char *body = donto_proto_lease_response(&batch);
    CHECK(body != NULL, "lease response");
    donto_lease_resp r;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_lease_response(body, strlen(body), &r, &e), 0);
    CHECK_EQ_INT(r.n, 3);
    for (size_t i = 0; i < r.n && i < 3; i++) {
        CHECK_EQ_INT(r.items[i].target, it[i].target);
        CHECK(!strcmp(r.items[i].item_id, it[i].item_id), "item_id %s", r.items[i].item_id);
        CHECK(!strcmp(r.items[i].text, it[i].text), "text %s", r.items[i].text);
        CHECK(!strcmp(r.items[i].model, it[i].model), "model %s", r.items[i].model);
        CHECK_EQ_INT(r.items[i].lease_id, it[i].lease_id);
    }
    donto_lease_resp_free(&r);
    CHECK(r.items == NULL && r.n == 0, "freed");
    free(body);
    /* nothing ready */
    batch.n = 0;
    body = donto_proto_lease_response(&batch);
    CHECK_EQ_INT(donto_proto_parse_lease_response(body, strlen(body), &r, &e), 0);
    CHECK_EQ_INT(r.n, 0);
    donto_lease_resp_free(&r);
    free(body);
}

/* The original coordinator's answer: integer ids, no model, no lease_id. */
static void test_lease_legacy(void) {
    const char *s = "{\"batch\": [{\"target\": \"claim\", \"item_id\": 42, \"text\": \"t\"},"
                    " {\"target\": \"entity\", \"item_id\": \"e\", \"text\": \"u\", \"extra\": [1]}], \"x\": 1}";
    donto_lease_resp r;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_lease_response(s, strlen(s), &r, &e), 0);
    CHECK_EQ_INT(r.n, 2);
    if (r.n == 2) {
        CHECK(!strcmp(r.items[0].item_id, "42"), "%s", r.items[0].item_id);
        CHECK(!strcmp(r.items[0].model, DONTO_DEFAULT_MODEL), "%s", r.items[0].model);
        CHECK_EQ_INT(r.items[0].lease_id, 0);
        CHECK_EQ_INT(r.items[1].target, DONTO_TARGET_ENTITY);
    }
    donto_lease_resp_free(&r);
}

static void test_lease_malformed(void) {
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"", "lease answer is empty"},
        {"<html>502</html>", "lease answer is not JSON"},
        {"{\"batch\": [", "lease answer is not JSON"},
        {"[]", "not a JSON object"},
        {"{}", "not {\"batch\": [...]}"},
        {"{\"batch\": {}}", "not {\"batch\": [...]}"},
        {"{\"batch\": [1]}", "item 0 is not an object"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":\"a\",\"text\":\"t\"}, null]}", "item 1 is not an object"},
        {"{\"batch\": [{\"item_id\":\"a\",\"text\":\"t\"}]}", "\"target\" is not a string"},
        {"{\"batch\": [{\"target\":\"Claim\",\"item_id\":\"a\",\"text\":\"t\"}]}", "unknown target"},
        {"{\"batch\": [{\"target\":\"claim\",\"text\":\"t\"}]}", "\"item_id\" is not a string or an integer"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":1.5,\"text\":\"t\"}]}", "\"item_id\" is not"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":\"a\"}]}", "\"text\" is not a string"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":\"a\",\"text\":\"t\",\"model\":null}]}",
         "\"model\" is not a string"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":\"a\",\"text\":\"t\",\"lease_id\":\"7\"}]}",
         "\"lease_id\" is not an integer"},
        {"{\"batch\": [{\"target\":\"claim\",\"item_id\":\"a\",\"text\":\"t\",\"lease_id\":null}]}",
         "\"lease_id\" is not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        donto_lease_resp r;
        donto_err e = {0};
        CHECK_EQ_INT(donto_proto_parse_lease_response(cases[i].body, strlen(cases[i].body), &r, &e), -1);
        CHECK(strstr(e.msg, cases[i].want), "%s: got \"%s\", want \"%s\"", cases[i].body, e.msg, cases[i].want);
        CHECK(r.items == NULL && r.n == 0, "%s: not freed", cases[i].body);
    }
    donto_lease_resp r;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_lease_response(NULL, 0, &r, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "empty");
    /* not NUL-terminated: only len bytes are read */
    const char *s = "{\"batch\": []}garbage";
    CHECK_EQ_INT(donto_proto_parse_lease_response(s, 13, &r, &e), 0);
    donto_lease_resp_free(&r);
}

/* ---- submit request ----------------------------------------------------- */

static void test_build_submit(void) {
    static float v[3][DIMS];
    for (int i = 0; i < 3; i++) unit(v[i], DIMS, 7u + (unsigned)i);
    donto_client_item it[3] = {
        {DONTO_TARGET_CLAIM, "c1", 11, DONTO_DEFAULT_MODEL, v[0]},
        {DONTO_TARGET_ENTITY, "e \"2\"", 12, NULL, v[1]},
        {DONTO_TARGET_PREDICATE, "caf\xc3\xa9", 13, "BAAI/bge-small-en-v1.5", v[2]},
    };
    for (int numbers = 0; numbers < 2; numbers++) {
        char *b = NULL;
        donto_err e = {0};
        CHECK_EQ_INT(donto_proto_build_submit("gpu-7", it, 3, DIMS, numbers, &b, &e), 0);
        CHECK(b != NULL, "%s", e.msg);
        if (!b) continue;
        CHECK(has_key(b, numbers ? "vector" : "vector_b64") && !has_key(b, numbers ? "vector_b64" : "vector"),
              "form %d", numbers);
        donto_items_req q;
        CHECK_EQ_INT(donto_proto_parse_submit(b, strlen(b), &q, &e), 0);
        CHECK(!strcmp(q.worker_id, "gpu-7"), "%s", q.worker_id);
        CHECK_EQ_INT(q.n, 3);
        for (size_t i = 0; i < q.n && i < 3; i++) {
            CHECK(q.items[i].reason == NULL, "item %zu: %s", i, q.items[i].reason);
            CHECK_EQ_INT(q.items[i].target, it[i].target);
            CHECK(!strcmp(q.items[i].item_id, it[i].item_id), "%s", q.items[i].item_id);
            CHECK_EQ_INT(q.items[i].lease_id, it[i].lease_id);
            CHECK((q.items[i].model == NULL) == (it[i].model == NULL), "model %zu", i);
            /* %.9g and base64 both give back the very same floats */
            CHECK(q.items[i].vector && !memcmp(q.items[i].vector, v[i], sizeof v[i]), "vector %zu (form %d)", i,
                  numbers);
        }
        donto_items_req_free(&q);
        free(b);
    }
    /* The legacy form the worker falls back to: no lease_id, no model. */
    donto_client_item legacy = {DONTO_TARGET_CLAIM, "c1", 0, NULL, v[0]};
    char *b = NULL;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_build_submit("w", &legacy, 1, DIMS, 1, &b, &e), 0);
    CHECK(b && !has_key(b, "lease_id") && !has_key(b, "model"), "%.80s", b ? b : "(null)");
    free(b);
    /* The same vector pointer twice: one rendering, copied; same text as two copies. */
    static float w2[DIMS];
    memcpy(w2, v[0], sizeof w2);
    donto_client_item same[2] = {{DONTO_TARGET_CLAIM, "a", 1, NULL, v[0]}, {DONTO_TARGET_CLAIM, "b", 2, NULL, v[0]}};
    donto_client_item copy[2] = {{DONTO_TARGET_CLAIM, "a", 1, NULL, v[0]}, {DONTO_TARGET_CLAIM, "b", 2, NULL, w2}};
    for (int numbers = 0; numbers < 2; numbers++) {
        char *x = NULL, *y = NULL;
        CHECK_EQ_INT(donto_proto_build_submit("w", same, 2, DIMS, numbers, &x, &e), 0);
        CHECK_EQ_INT(donto_proto_build_submit("w", copy, 2, DIMS, numbers, &y, &e), 0);
        CHECK(x && y && !strcmp(x, y), "shared rendering differs (form %d)", numbers);
        free(x);
        free(y);
    }
    /* Empty submit: valid, no items. */
    CHECK_EQ_INT(donto_proto_build_submit("w", NULL, 0, DIMS, 0, &b, &e), 0);
    CHECK(b && !strcmp(b, "{\"worker_id\":\"w\",\"items\":[]}"), "%s", b ? b : "(null)");
    free(b);
}

/* JSON has no NaN: in the numbers form a non-finite component is written
 * as 1e39, so the body stays JSON and the server rejects that item only. */
static void test_submit_numbers_nonfinite(void) {
    static float good[DIMS], bad[DIMS];
    unit(good, DIMS, 3);
    unit(bad, DIMS, 4);
    bad[5] = NAN;
    bad[6] = -INFINITY;
    donto_client_item it[2] = {{DONTO_TARGET_CLAIM, "bad", 0, NULL, bad}, {DONTO_TARGET_CLAIM, "good", 0, NULL, good}};
    for (int numbers = 0; numbers < 2; numbers++) {
        char *b = NULL;
        donto_err e = {0};
        CHECK_EQ_INT(donto_proto_build_submit("w", it, 2, DIMS, numbers, &b, &e), 0);
        donto_items_req q;
        CHECK_EQ_INT(donto_proto_parse_submit(b, b ? strlen(b) : 0, &q, &e), 0);
        CHECK_EQ_INT(q.n, 2);
        if (q.n == 2) {
            CHECK(q.items[0].reason && !strcmp(q.items[0].reason, "non_finite"), "form %d: %s", numbers,
                  q.items[0].reason ? q.items[0].reason : "(valid)");
            CHECK(q.items[1].reason == NULL, "form %d: good item %s", numbers, q.items[1].reason);
        }
        donto_items_req_free(&q);
        free(b);
    }
}

static void test_build_refusals(void) {
    static float v[DIMS];
    unit(v, DIMS, 1);
    char *b = (char *)1;
    donto_err e = {0};
    donto_client_item it = {DONTO_TARGET_CLAIM, "ok", 1, NULL, v};
    CHECK_EQ_INT(donto_proto_build_submit("w", &it, 1, 0, 0, &b, &e), -1);
    CHECK(b == NULL, "out not cleared");
    CHECK_STR_CONTAINS(e.msg, "dims must be at least 1");
    it.vector = NULL;
    CHECK_EQ_INT(donto_proto_build_submit("w", &it, 1, DIMS, 0, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "items[0]: no vector");
    it.vector = v;
    it.target = -1;
    CHECK_EQ_INT(donto_proto_build_submit("w", &it, 1, DIMS, 0, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "items[0]: no such target");
    CHECK_EQ_INT(donto_proto_build_release("w", &it, 1, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "no such target");
    it.target = DONTO_TARGET_CLAIM;
    it.item_id = "bad \xc3";
    CHECK_EQ_INT(donto_proto_build_release("w", &it, 1, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "items[0].item_id is not valid UTF-8");
    it.item_id = NULL;
    CHECK_EQ_INT(donto_proto_build_submit("w", &it, 1, DIMS, 1, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "items[0].item_id is missing");
    it.item_id = "ok";
    it.model = "m \xff";
    CHECK_EQ_INT(donto_proto_build_submit("w", &it, 1, DIMS, 0, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "items[0].model is not valid UTF-8");
    CHECK_EQ_INT(donto_proto_build_report("w", "k", NULL, &b, &e), -1);
    CHECK_STR_CONTAINS(e.msg, "message is missing");
    CHECK(b == NULL, "out not cleared");
}

/* ---- release and report requests ---------------------------------------- */

static void test_build_release(void) {
    donto_client_item it[3] = {
        {DONTO_TARGET_CLAIM, "a", 4711, NULL, NULL},
        {DONTO_TARGET_MEMORY_CHUNK, "b\n", 9, "ignored", NULL},
        /* No lease_id (a legacy lease answer): none is sent. The worker used
         * to send "lease_id": 0, which the server refuses (400) for the
         * whole release. */
        {DONTO_TARGET_ENTITY, "c", 0, NULL, NULL},
    };
    char *b = NULL;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_build_release("gpu-7", it, 3, &b, &e), 0);
    CHECK(b && !has_key(b, "model"), "%s", b ? b : "(null)");
    donto_items_req q;
    CHECK_EQ_INT(donto_proto_parse_release(b, b ? strlen(b) : 0, &q, &e), 0);
    CHECK(e.msg[0] == 0 || q.n == 3, "server refused the release: %s", e.msg);
    CHECK_EQ_INT(q.n, 3);
    for (size_t i = 0; i < q.n && i < 3; i++) {
        CHECK_EQ_INT(q.items[i].target, it[i].target);
        CHECK(!strcmp(q.items[i].item_id, it[i].item_id), "%s", q.items[i].item_id);
        CHECK_EQ_INT(q.items[i].lease_id, it[i].lease_id);
    }
    donto_items_req_free(&q);
    free(b);
}

static void test_build_report(void) {
    const char *msg = "CUDA out of memory: \"tried\" to allocate\n\t2.00 GiB \xe2\x82\xac \\ end";
    char *b = NULL;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_build_report("gpu-7", "oom", msg, &b, &e), 0);
    donto_report_req r;
    CHECK_EQ_INT(donto_proto_parse_report(b, b ? strlen(b) : 0, &r, &e), 0);
    CHECK(!strcmp(r.worker_id, "gpu-7") && !strcmp(r.kind, "oom"), "%s %s", r.worker_id, r.kind);
    CHECK(r.message && !strcmp(r.message, msg), "%s", r.message ? r.message : "(null)");
    CHECK_EQ_INT(r.truncated, 0);
    donto_report_req_free(&r);
    free(b);
}

/* ---- submit and release answers ----------------------------------------- */

static void test_submit_response(void) {
    /* What the server answers: item_ids echoed as sent (string or integer). */
    const char *req = "{\"worker_id\":\"w\",\"items\":["
                      "{\"target\":\"claim\",\"item_id\":\"a\",\"vector\":[1,0]},"
                      "{\"target\":\"entity\",\"item_id\":77,\"vector\":[0.5]}]}";
    donto_items_req q;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_submit(req, strlen(req), &q, &e), 0);
    CHECK_EQ_INT(q.n, 2);
    char *ans = donto_proto_submit_response(5, &q);
    donto_submit_resp r;
    CHECK_EQ_INT(donto_proto_parse_submit_response(ans, strlen(ans), &r, &e), 0);
    CHECK_EQ_INT(r.upserted, 5);
    CHECK_EQ_INT(r.has_rejected, 1);
    CHECK_EQ_INT(r.n_rejected, 2);
    if (r.n_rejected == 2) {
        CHECK(r.rejected[0].item_id && !strcmp(r.rejected[0].item_id, "a"), "id 0");
        CHECK(r.rejected[1].item_id && !strcmp(r.rejected[1].item_id, "77"), "id 1");
        CHECK_EQ_INT(r.rejected[1].target, DONTO_TARGET_ENTITY);
        CHECK(r.rejected[0].reason && !strcmp(r.rejected[0].reason, "wrong_dims"), "reason 0");
    }
    donto_submit_resp_free(&r);
    free(ans);
    donto_items_req_free(&q);
    /* nothing rejected: no "rejected" key (the legacy answer) */
    ans = donto_proto_submit_response(3, NULL);
    CHECK_EQ_INT(donto_proto_parse_submit_response(ans, strlen(ans), &r, &e), 0);
    CHECK_EQ_INT(r.upserted, 3);
    CHECK_EQ_INT(r.has_rejected, 0);
    CHECK_EQ_INT(r.n_rejected, 0);
    donto_submit_resp_free(&r);
    free(ans);
    /* a reject with odd fields is still counted */
    const char *odd = "{\"upserted\":0,\"rejected\":[{\"item_id\":null,\"target\":\"nope\"}]}";
    CHECK_EQ_INT(donto_proto_parse_submit_response(odd, strlen(odd), &r, &e), 0);
    CHECK_EQ_INT(r.n_rejected, 1);
    if (r.n_rejected == 1)
        CHECK(!r.rejected[0].item_id && r.rejected[0].target == -1 && !r.rejected[0].reason, "odd reject");
    donto_submit_resp_free(&r);

    static const struct {
        const char *body, *want;
    } bad[] = {
        {"", "submit answer is empty"},
        {"oops", "submit answer is not JSON"},
        {"[1]", "not a JSON object"},
        {"{}", "no \"upserted\" count"},
        {"{\"upserted\":\"3\"}", "no \"upserted\" count"},
        {"{\"upserted\":-1}", "no \"upserted\" count"},
        {"{\"upserted\":1,\"rejected\":{}}", "\"rejected\" is not an array"},
        {"{\"upserted\":1,\"rejected\":[{\"reason\":\"x\"},2]}", "rejected[1] is not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(donto_proto_parse_submit_response(bad[i].body, strlen(bad[i].body), &r, &e), -1);
        CHECK(strstr(e.msg, bad[i].want), "%s: got \"%s\", want \"%s\"", bad[i].body, e.msg, bad[i].want);
        CHECK(r.rejected == NULL && r.n_rejected == 0, "%s: not freed", bad[i].body);
    }
}

static void test_release_response(void) {
    char *ans = donto_proto_release_response(12);
    int64_t n = -1;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_release_response(ans, strlen(ans), &n, &e), 0);
    CHECK_EQ_INT(n, 12);
    free(ans);
    static const char *bad[] = {"", "x", "{}", "{\"released\":1.5}", "{\"released\":-2}", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(donto_proto_parse_release_response(bad[i], strlen(bad[i]), &n, &e), -1);
        CHECK(e.msg[0] && strstr(e.msg, "release answer"), "%s: %s", bad[i], e.msg);
        CHECK_EQ_INT(n, 0);
    }
    /* An error answer (what a 4xx/5xx carries) is not a release answer. */
    char *err = donto_proto_error_response("busy", "no store handle");
    CHECK_EQ_INT(donto_proto_parse_release_response(err, strlen(err), &n, &e), -1);
    free(err);
}

/* ---- lease TTL, extend, error answers (issue 15) ------------------------ */

static void test_lease_ttl(void) {
    donto_leased_item it[] = {{DONTO_TARGET_CLAIM, "c1", "t", DONTO_DEFAULT_MODEL, 9}};
    donto_lease_batch batch = {it, 1};
    char *body = donto_proto_lease_response_ttl(&batch, 900000);
    donto_lease_resp r;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_parse_lease_response(body, strlen(body), &r, &e), 0);
    CHECK_EQ_INT(r.n, 1);
    CHECK_EQ_INT(r.ttl_ms, 900000);
    donto_lease_resp_free(&r);
    free(body);
    /* without it (a legacy server): 0, no heartbeats */
    body = donto_proto_lease_response(&batch);
    CHECK_EQ_INT(donto_proto_parse_lease_response(body, strlen(body), &r, &e), 0);
    CHECK_EQ_INT(r.ttl_ms, 0);
    donto_lease_resp_free(&r);
    free(body);
    static const char *bad[] = {"{\"batch\": [], \"lease_ttl_ms\": \"9\"}", "{\"batch\": [], \"lease_ttl_ms\": -1}",
                                "{\"batch\": [], \"lease_ttl_ms\": 1.5}", "{\"batch\": [], \"lease_ttl_ms\": null}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(donto_proto_parse_lease_response(bad[i], strlen(bad[i]), &r, &e), -1);
        CHECK(strstr(e.msg, "lease_ttl_ms"), "%s: %s", bad[i], e.msg);
        CHECK(r.items == NULL && r.n == 0 && r.ttl_ms == 0, "%s: not freed", bad[i]);
    }
}

static void test_extend(void) {
    donto_client_item it[2] = {{DONTO_TARGET_CLAIM, "c1", 11, NULL, NULL}, {DONTO_TARGET_ENTITY, "e2", 0, NULL, NULL}};
    char *x = NULL, *r = NULL;
    donto_err e = {0};
    CHECK_EQ_INT(donto_proto_build_extend("w", it, 2, &x, &e), 0);
    CHECK_EQ_INT(donto_proto_build_release("w", it, 2, &r, &e), 0);
    CHECK(x && r && !strcmp(x, r), "extend body %s, release body %s", x ? x : "", r ? r : "");
    donto_items_req q;
    CHECK_EQ_INT(donto_proto_parse_release(x, strlen(x), &q, &e), 0); /* what the server reads an extend with */
    CHECK_EQ_INT(q.n, 2);
    donto_items_req_free(&q);
    free(x), free(r);
    char *ans = donto_proto_extend_response(2, 3000);
    int64_t n = -1, ttl = -1;
    CHECK_EQ_INT(donto_proto_parse_extend_response(ans, strlen(ans), &n, &ttl, &e), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ttl, 3000);
    free(ans);
    const char *nottl = "{\"extended\": 0}";
    CHECK_EQ_INT(donto_proto_parse_extend_response(nottl, strlen(nottl), &n, &ttl, &e), 0);
    CHECK(n == 0 && ttl == 0, "%lld %lld", (long long)n, (long long)ttl);
    static const char *bad[] = {"", "x", "{}", "{\"extended\":1.5}", "{\"extended\":-2}", "[]",
                                "{\"extended\":1,\"lease_ttl_ms\":\"x\"}", "{\"released\":1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(donto_proto_parse_extend_response(bad[i], strlen(bad[i]), &n, &ttl, &e), -1);
        CHECK(e.msg[0] && strstr(e.msg, "extend answer"), "%s: %s", bad[i], e.msg);
        CHECK(n == 0 && ttl == 0, "%s: outputs set", bad[i]);
    }
}

static void test_error_answer(void) {
    char code[16], msg[64];
    char *a = donto_proto_error_response("suspended", "this token is suspended: item c1 failed (cosine 0.5)");
    CHECK_EQ_INT(donto_proto_parse_error_response(a, strlen(a), code, sizeof code, msg, sizeof msg), 0);
    CHECK(!strcmp(code, "suspended"), "%s", code);
    CHECK(!strcmp(msg, "this token is suspended: item c1 failed (cosine 0.5)"), "%s", msg);
    free(a);
    /* cut to the buffer, never inside a UTF-8 sequence */
    a = donto_proto_error_response("rate_limited", "caf\xc3\xa9\xc3\xa9");
    char small[6];
    CHECK_EQ_INT(donto_proto_parse_error_response(a, strlen(a), code, 5, small, sizeof small), 0);
    CHECK(!strcmp(code, "rate"), "%s", code);
    CHECK(!strcmp(small, "caf\xc3\xa9"), "%s", small);
    CHECK_EQ_INT(donto_proto_parse_error_response(a, strlen(a), code, 5, small, 5), 0);
    CHECK(!strcmp(small, "caf"), "%s", small);
    CHECK_EQ_INT(donto_proto_parse_error_response(a, strlen(a), NULL, 0, NULL, 0), 0);
    free(a);
    /* a message is optional; anything else is not an error answer */
    const char *nomsg = "{\"error\": \"not_found\"}";
    CHECK_EQ_INT(donto_proto_parse_error_response(nomsg, strlen(nomsg), code, sizeof code, msg, sizeof msg), 0);
    CHECK(!strcmp(code, "not_found") && msg[0] == 0, "%s / %s", code, msg);
    static const char *bad[] = {"", "<html>", "{}", "[\"error\"]", "{\"error\": 403}", "{\"detail\": \"Not Found\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strcpy(code, "x"), strcpy(msg, "y");
        CHECK_EQ_INT(donto_proto_parse_error_response(bad[i], strlen(bad[i]), code, sizeof code, msg, sizeof msg), -1);
        CHECK(code[0] == 0 && msg[0] == 0, "%s: buffers not cleared", bad[i]);
    }
    CHECK_EQ_INT(donto_proto_parse_error_response(NULL, 0, code, sizeof code, msg, sizeof msg), -1);
}

int main(void) {
    test_build_lease();
    test_lease_round_trip();
    test_lease_legacy();
    test_lease_malformed();
    test_build_submit();
    test_submit_numbers_nonfinite();
    test_build_refusals();
    test_build_release();
    test_build_report();
    test_submit_response();
    test_release_response();
    test_lease_ttl();
    test_extend();
    test_error_answer();
    return check_report("test_protocol_client");
}
