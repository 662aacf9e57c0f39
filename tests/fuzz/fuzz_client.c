/* libFuzzer harness for the wire protocol's client side (src/wire/client.c):
 * the parsers of the coordinator's lease, submit and release answers, and
 * the request builders fed from what they parse.
 *
 * Input layout: the first byte picks the parser (low 2 bits), the rest is
 * the answer body exactly as the worker would get it from curl (not
 * NUL-terminated: the parsers take a length). A failed parse must leave a
 * message and nothing to free; a successful one must keep the promises of
 * donto/wire.h, and what it gives must go back out through the builders
 * into bodies the server's own parsers (wire.c) accept with the same items:
 *   0: lease answer -> release, submit (base64 and numbers), report bodies
 *      -> the server's parsers;
 *   1: submit answer;
 *   2: release answer, the same bytes as an extend answer and as an error
 *      answer ({"error","message"}, cut to small buffers);
 *   3: lease answer -> the server's lease writer -> parsed again: the same.
 *
 * Built two ways, like fuzz_protocol.c:
 *   - scripts/fuzz client: clang -fsanitize=fuzzer,address,undefined;
 *   - tests/test_fuzz_client.c #includes this file and drives the same entry
 *     point over tests/fuzz/corpus_client plus seeded mutations (CTest). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/models.h"
#include "donto/store.h"
#include "donto/wire.h"

#define FZC_ASSERT(c)                                                                            \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            fprintf(stderr, "fuzz_client: invariant failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

#define FZC_DIMS 384
/* Round trips through the builders only for batches up to this size (a
 * numbers-form body is ~4 KB an item; the parse itself has no limit). */
#define FZC_ROUND_TRIP_MAX 64

static void fzc_check_lease(const donto_lease_resp *r) {
    FZC_ASSERT(r->n == 0 || r->items);
    for (size_t i = 0; i < r->n; i++) {
        const donto_lease_item *it = &r->items[i];
        FZC_ASSERT(it->target >= 0 && it->target < DONTO_TARGET_N);
        FZC_ASSERT(it->item_id && it->text && it->model);
    }
}

/* The items' ids as the server takes them: non-empty and not too long
 * (the client passes on whatever the lease said; the server judges). */
static int fzc_server_ids_ok(const donto_lease_resp *r) {
    for (size_t i = 0; i < r->n; i++) {
        size_t n = strlen(r->items[i].item_id);
        if (n == 0 || n > DONTO_PROTO_ITEM_ID_MAX || strlen(r->items[i].model) > DONTO_PROTO_MODEL_MAX) return 0;
    }
    return 1;
}

static void fzc_check_items_back(const donto_lease_resp *r, const donto_items_req *q) {
    FZC_ASSERT(q->n == r->n);
    for (size_t i = 0; i < r->n; i++) {
        FZC_ASSERT(q->items[i].target == r->items[i].target);
        FZC_ASSERT(!strcmp(q->items[i].item_id, r->items[i].item_id));
        FZC_ASSERT(q->items[i].lease_id == (r->items[i].lease_id > 0 ? r->items[i].lease_id : 0));
    }
}

static void fzc_round_trip(const donto_lease_resp *r) {
    donto_err e = {0};
    donto_client_item *ci = calloc(r->n ? r->n : 1, sizeof *ci);
    FZC_ASSERT(ci);
    static float v[FZC_DIMS];
    for (int k = 0; k < FZC_DIMS; k++) v[k] = (float)(k % 2 ? 1.0 : -1.0) / sqrtf((float)FZC_DIMS);
    for (size_t i = 0; i < r->n; i++)
        ci[i] = (donto_client_item){r->items[i].target, r->items[i].item_id, r->items[i].lease_id,
                                    r->items[i].model, v};
    int ids_ok = fzc_server_ids_ok(r);
    char *b = NULL;
    FZC_ASSERT(donto_proto_build_release("fuzz", ci, r->n, &b, &e) == 0 && b);
    donto_items_req q;
    int rc = donto_proto_parse_release(b, strlen(b), &q, &e);
    FZC_ASSERT(rc == 0 || !ids_ok);
    if (rc == 0) {
        fzc_check_items_back(r, &q);
        donto_items_req_free(&q);
    }
    free(b);
    for (int numbers = 0; numbers < 2; numbers++) {
        FZC_ASSERT(donto_proto_build_submit("fuzz", ci, r->n, FZC_DIMS, numbers, &b, &e) == 0 && b);
        rc = donto_proto_parse_submit(b, strlen(b), &q, &e);
        FZC_ASSERT(rc == 0 || !ids_ok);
        if (rc == 0) {
            fzc_check_items_back(r, &q);
            for (size_t i = 0; i < q.n; i++) /* a 384-d unit vector: valid for every 384-d model */
                FZC_ASSERT(q.items[i].reason == NULL || donto_model_dims(r->items[i].model) != FZC_DIMS);
            donto_items_req_free(&q);
        }
        free(b);
    }
    if (r->n) {
        FZC_ASSERT(donto_proto_build_report("fuzz", "k", r->items[0].text, &b, &e) == 0 && b);
        donto_report_req rq;
        FZC_ASSERT(donto_proto_parse_report(b, strlen(b), &rq, &e) == 0);
        FZC_ASSERT(rq.truncated || !strcmp(rq.message, r->items[0].text));
        donto_report_req_free(&rq);
        free(b);
    }
    free(ci);
}

/* Parsed, written by the server's lease writer, parsed again: the same. */
static void fzc_rewrite(const donto_lease_resp *r) {
    donto_leased_item *li = calloc(r->n ? r->n : 1, sizeof *li);
    FZC_ASSERT(li);
    for (size_t i = 0; i < r->n; i++)
        li[i] = (donto_leased_item){(donto_target)r->items[i].target, r->items[i].item_id, r->items[i].text,
                                    r->items[i].model, r->items[i].lease_id};
    donto_lease_batch batch = {li, r->n};
    char *s = donto_proto_lease_response(&batch);
    FZC_ASSERT(s);
    donto_lease_resp r2;
    donto_err e = {0};
    FZC_ASSERT(donto_proto_parse_lease_response(s, strlen(s), &r2, &e) == 0);
    FZC_ASSERT(r2.n == r->n);
    for (size_t i = 0; i < r->n; i++) {
        FZC_ASSERT(r2.items[i].target == r->items[i].target);
        FZC_ASSERT(!strcmp(r2.items[i].item_id, r->items[i].item_id));
        FZC_ASSERT(!strcmp(r2.items[i].text, r->items[i].text));
        FZC_ASSERT(!strcmp(r2.items[i].model, r->items[i].model));
        FZC_ASSERT(r2.items[i].lease_id == r->items[i].lease_id);
    }
    donto_lease_resp_free(&r2);
    free(s);
    free(li);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0] & 3u;
    const char *body = (const char *)(data + 1);
    size_t len = size - 1;
    donto_err err = {0};
    switch (sel) {
    case 0:
    case 3: {
        donto_lease_resp r;
        if (donto_proto_parse_lease_response(body, len, &r, &err) == 0) {
            fzc_check_lease(&r);
            if (sel == 3)
                fzc_rewrite(&r);
            else if (r.n <= FZC_ROUND_TRIP_MAX)
                fzc_round_trip(&r);
            donto_lease_resp_free(&r);
            FZC_ASSERT(r.items == NULL && r.n == 0);
        } else {
            FZC_ASSERT(err.msg[0]);
            FZC_ASSERT(r.items == NULL && r.n == 0);
        }
        break;
    }
    case 1: {
        donto_submit_resp r;
        if (donto_proto_parse_submit_response(body, len, &r, &err) == 0) {
            FZC_ASSERT(r.upserted >= 0);
            FZC_ASSERT(r.n_rejected == 0 || (r.rejected && r.has_rejected));
            for (size_t i = 0; i < r.n_rejected; i++)
                FZC_ASSERT(r.rejected[i].target >= -1 && r.rejected[i].target < DONTO_TARGET_N);
            donto_submit_resp_free(&r);
        } else {
            FZC_ASSERT(err.msg[0]);
            FZC_ASSERT(r.rejected == NULL && r.n_rejected == 0);
        }
        break;
    }
    default: { /* the small answers: release, extend, an error */
        int64_t n = -1, ttl = -1;
        if (donto_proto_parse_release_response(body, len, &n, &err) == 0)
            FZC_ASSERT(n >= 0);
        else
            FZC_ASSERT(err.msg[0] && n == 0);
        err.msg[0] = 0;
        if (donto_proto_parse_extend_response(body, len, &n, &ttl, &err) == 0)
            FZC_ASSERT(n >= 0 && ttl >= 0);
        else
            FZC_ASSERT(err.msg[0] && n == 0 && ttl == 0);
        char code[8], msg[16];
        if (donto_proto_parse_error_response(body, len, code, sizeof code, msg, sizeof msg) == 0)
            FZC_ASSERT(strlen(code) < sizeof code && strlen(msg) < sizeof msg);
        else
            FZC_ASSERT(code[0] == 0 && msg[0] == 0);
        break;
    }
    }
    return 0;
}
