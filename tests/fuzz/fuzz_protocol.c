/* libFuzzer harness for the coordinator's request parsers
 * (src/wire/wire.c): lease, submit (JSON numbers and vector_b64),
 * release and report bodies, plus the base64 float decoder.
 *
 * Input layout: the first byte picks the parser (low 3 bits), the rest is
 * the request body exactly as the server would hand it over (not
 * NUL-terminated: the parsers take a length). Every successful parse is
 * checked for the invariants donto/wire.h promises and fed to the response
 * builder the server would call next, so a broken struct shows up here.
 *
 * Built two ways:
 *   - scripts/fuzz: clang -fsanitize=fuzzer,address,undefined (libFuzzer);
 *   - tests/test_fuzz_protocol.c #includes this file and drives the same
 *     entry point over tests/fuzz/corpus plus seeded mutations (gcc, CTest). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/wire.h"

#define FZ_ASSERT(c)                                                                  \
    do {                                                                              \
        if (!(c)) {                                                                   \
            fprintf(stderr, "fuzz_protocol: invariant failed: %s (%s:%d)\n", #c, __FILE__, \
                    __LINE__);                                                        \
            abort();                                                                  \
        }                                                                             \
    } while (0)

static void fz_check_name(const char *s, size_t cap) {
    size_t n = strnlen(s, cap + 1);
    FZ_ASSERT(n >= 1 && n <= cap);
    for (size_t i = 0; i < n; i++) FZ_ASSERT((unsigned char)s[i] >= 0x20 && s[i] != 0x7f);
}

static void fz_check_items(const donto_items_req *r, int submit) {
    fz_check_name(r->worker_id, DONTO_PROTO_WORKER_ID_MAX);
    FZ_ASSERT(r->n <= DONTO_PROTO_ITEMS_MAX);
    for (size_t i = 0; i < r->n; i++) {
        const donto_proto_item *it = &r->items[i];
        FZ_ASSERT(it->target >= 0 && it->target < DONTO_TARGET_N);
        FZ_ASSERT(it->item_id && it->item_id[0] && strlen(it->item_id) <= DONTO_PROTO_ITEM_ID_MAX);
        FZ_ASSERT(it->item_id_json);
        FZ_ASSERT(it->lease_id >= 0);
        if (!submit) continue;
        if (!it->reason) {
            /* A valid item: a known model and exactly dims finite floats of norm ~1. */
            FZ_ASSERT(it->dims > 0 && it->vector);
            double ss = 0;
            for (int k = 0; k < it->dims; k++) {
                FZ_ASSERT(isfinite(it->vector[k]));
                ss += (double)it->vector[k] * it->vector[k];
            }
            FZ_ASSERT(fabs(sqrt(ss) - 1.0) <= DONTO_PROTO_NORM_TOL + 1e-9);
            FZ_ASSERT(donto_proto_check_vector(it->vector, (size_t)it->dims, it->dims) == NULL);
        }
    }
    char *resp = donto_proto_submit_response(r->n, r);
    FZ_ASSERT(resp);
    json_error_t je;
    json_t *back = json_loads(resp, 0, &je);
    FZ_ASSERT(back && json_is_object(back));
    json_decref(back);
    free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned sel = data[0] & 7u;
    const char *body = (const char *)(data + 1);
    size_t len = size - 1;
    donto_err err = {0};
    switch (sel) {
    case 0:
    case 4: {
        donto_lease_req q;
        if (donto_proto_parse_lease(body, len, &q, &err) == 0) {
            fz_check_name(q.worker_id, DONTO_PROTO_WORKER_ID_MAX);
            FZ_ASSERT(q.n >= 1 && q.n <= DONTO_PROTO_LEASE_MAX);
            FZ_ASSERT(q.target >= -1 && q.target < DONTO_TARGET_N);
        } else {
            FZ_ASSERT(err.msg[0]);
        }
        break;
    }
    case 1:
    case 5: {
        donto_items_req r;
        if (donto_proto_parse_submit(body, len, &r, &err) == 0) {
            fz_check_items(&r, 1);
            donto_items_req_free(&r);
        } else {
            FZ_ASSERT(err.msg[0]);
            FZ_ASSERT(r.items == NULL && r.n == 0);
        }
        break;
    }
    case 2: {
        donto_items_req r;
        if (donto_proto_parse_release(body, len, &r, &err) == 0) {
            fz_check_items(&r, 0);
            donto_items_req_free(&r);
        } else {
            FZ_ASSERT(err.msg[0]);
            FZ_ASSERT(r.items == NULL && r.n == 0);
        }
        break;
    }
    case 3: {
        donto_report_req r;
        if (donto_proto_parse_report(body, len, &r, &err) == 0) {
            fz_check_name(r.worker_id, DONTO_PROTO_WORKER_ID_MAX);
            fz_check_name(r.kind, DONTO_PROTO_KIND_MAX);
            FZ_ASSERT(r.message);
            size_t chars = 0;
            for (const char *p = r.message; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
            FZ_ASSERT(chars <= DONTO_REPORT_MAX_CHARS);
            donto_report_req_free(&r);
        } else {
            FZ_ASSERT(err.msg[0]);
        }
        break;
    }
    default: {
        /* The base64 decoder on its own: count, decode, re-encode, compare. */
        size_t nf = 0;
        if (donto_proto_b64_f32(body, len, NULL, 0, &nf) == 0) {
            FZ_ASSERT(nf <= len);
            float *v = malloc(nf * sizeof *v + 1);
            FZ_ASSERT(v);
            size_t nf2 = 0;
            FZ_ASSERT(donto_proto_b64_f32(body, len, v, nf, &nf2) == 0 && nf2 == nf);
            char *enc = donto_proto_f32_b64(v, nf);
            FZ_ASSERT(enc);
            size_t nf3 = 0;
            float *w = malloc(nf * sizeof *w + 1);
            FZ_ASSERT(w);
            FZ_ASSERT(donto_proto_b64_f32(enc, strlen(enc), w, nf, &nf3) == 0 && nf3 == nf);
            FZ_ASSERT(nf == 0 || memcmp(v, w, nf * sizeof *v) == 0);
            (void)donto_proto_check_vector(v, nf, 384);
            free(enc);
            free(w);
            free(v);
        }
        break;
    }
    }
    return 0;
}
