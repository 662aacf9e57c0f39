/*
 * donto-accel: the coordinator's wire protocol as pure functions, both sides.
 *
 * Server side (src/wire/wire.c): request bodies (JSON text) are parsed and
 * validated into plain structs; response bodies are built from plain structs.
 * Client side (src/wire/client.c, used by the worker and the load bench):
 * request bodies are built, response bodies parsed, the same way. Nothing here does I/O, holds
 * global state or reads a clock, so every function can be fuzzed on its own
 * and the HTTP server (server.c) only moves bytes and calls the store.
 *
 * Validation splits into two kinds of failure, on purpose:
 *   - a request that is not what the protocol describes (malformed JSON,
 *     wrong types, missing or oversized fields, unknown target) fails the
 *     parse as a whole: the server answers 400 and touches nothing;
 *   - a well-formed submit item whose vector is unusable (wrong length,
 *     non-finite component, norm not 1, undecodable base64, unknown model)
 *     is rejected on its own with a reason code, and the rest of the batch
 *     is still stored. A worker with one bad row must not lose the batch.
 * See docs/protocol.md.
 */
#ifndef DONTO_WIRE_H
#define DONTO_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lease sizes above this are capped, not refused (legacy workers ask big). */
#define DONTO_PROTO_LEASE_MAX 1024
/* Items per submit/release request: more than a lease can hand out, with room. */
#define DONTO_PROTO_ITEMS_MAX 8192
/* Field sizes in bytes (UTF-8), excluding the terminating NUL. */
#define DONTO_PROTO_WORKER_ID_MAX 256
#define DONTO_PROTO_ITEM_ID_MAX 2048
#define DONTO_PROTO_MODEL_MAX 256
#define DONTO_PROTO_KIND_MAX 128
/* Accepted distance of a vector's L2 norm from 1. */
#define DONTO_PROTO_NORM_TOL 1e-3

/* Target names on the wire ("claim", ...) are the store's:
 * donto_target_parse / donto_target_name (donto/store.h). */

/* Wire reason code of a store verdict ("not_leased", ...); NULL for NONE. */
const char *donto_proto_reject_code(donto_reject r);

/* ---- requests ---------------------------------------------------------- */

typedef struct donto_lease_req {
    char worker_id[DONTO_PROTO_WORKER_ID_MAX + 1];
    int n;      /* 1..DONTO_PROTO_LEASE_MAX (after capping) */
    int capped; /* 1 when the client asked for more than the cap */
    int target; /* donto_target, or -1 for any */
} donto_lease_req;

int donto_proto_parse_lease(const char *body, size_t len, donto_lease_req *out, donto_err *err);

typedef struct donto_proto_item {
    int target;           /* donto_target */
    char *item_id;        /* the id as the store knows it (a string) */
    json_t *item_id_json; /* the value the client sent, echoed in "rejected" */
    int64_t lease_id;     /* 0 when the client sent none (legacy) */
    char *model;          /* the model the client named; NULL: none (legacy) */
    int dims;             /* the model's dimensions (submit only; 0 = unknown model) */
    float *vector;        /* dims floats when reason == NULL (submit only) */
    const char *reason;   /* NULL: valid so far; else a static reject code */
} donto_proto_item;

typedef struct donto_items_req {
    char worker_id[DONTO_PROTO_WORKER_ID_MAX + 1];
    donto_proto_item *items;
    size_t n;
} donto_items_req;

/* Submit: {"worker_id", "items": [{"target","item_id", "vector"|"vector_b64",
 * "lease_id"?, "model"?}]}. Vector problems become item reasons (see top). */
int donto_proto_parse_submit(const char *body, size_t len, donto_items_req *out, donto_err *err);
/* Release: {"worker_id", "items": [{"target","item_id","lease_id"?}]}. */
int donto_proto_parse_release(const char *body, size_t len, donto_items_req *out, donto_err *err);
void donto_items_req_free(donto_items_req *r);

typedef struct donto_report_req {
    char worker_id[DONTO_PROTO_WORKER_ID_MAX + 1];
    char kind[DONTO_PROTO_KIND_MAX + 1];
    char *message; /* heap, at most DONTO_REPORT_MAX_CHARS (donto/store.h) code points */
    int truncated;
} donto_report_req;

int donto_proto_parse_report(const char *body, size_t len, donto_report_req *out, donto_err *err);
void donto_report_req_free(donto_report_req *r);

/* ---- vectors ----------------------------------------------------------- */

/* Decode standard base64 (RFC 4648 alphabet, '=' padding optional) of
 * little-endian float32 values. With out == NULL only validates and counts.
 * Returns 0 and the number of floats in *n_floats, or -1 when the text is not
 * base64 or its byte count is not a multiple of 4. Writes at most cap floats:
 * a longer input returns 0 with *n_floats > cap and nothing written. */
int donto_proto_b64_f32(const char *s, size_t len, float *out, size_t cap, size_t *n_floats);

/* Standard base64 of little-endian float32 (for tests and tools); heap, NUL-terminated. */
char *donto_proto_f32_b64(const float *v, size_t n);

/* NULL when v (n floats) is a valid vector for a model of dims dimensions,
 * else the reject code: "wrong_dims", "non_finite", "not_unit_norm". */
const char *donto_proto_check_vector(const float *v, size_t n, int dims);

/* ---- responses (heap JSON text, free() it; NULL only when out of memory) */

char *donto_proto_lease_response(const donto_lease_batch *b);
/* The same, plus "lease_ttl_ms" (how long the lease runs: a worker whose
 * batch takes longer extends it with POST /extend well before that). */
char *donto_proto_lease_response_ttl(const donto_lease_batch *b, int64_t ttl_ms);
/* POST /extend answers {"extended": n, "lease_ttl_ms": ttl}. */
char *donto_proto_extend_response(size_t extended, int64_t ttl_ms);
/* {"upserted": n} plus "rejected" listing every item with a reason, in
 * request order, when there is at least one. */
char *donto_proto_submit_response(size_t upserted, const donto_items_req *r);
char *donto_proto_release_response(size_t released);
char *donto_proto_ok_response(void);
char *donto_proto_error_response(const char *code, const char *message);
/* 1 when s is valid UTF-8 as JSON strings take it (no overlong forms,
 * surrogates or code points above U+10FFFF), else 0: what a client's text
 * must be before it is embedded or echoed in an answer. */
int donto_proto_utf8_valid(const char *s);
/* GET /health: {"ok", "version", "database"[, "schema": {"version": n,
 * "expected": m}][, "message"]}; schema NULL: not known (omitted). */
char *donto_proto_health_response(int ok, const char *version, int database, const donto_schema_version *schema,
                                  const char *message);
/* What /stats shows beyond the per-target counts; parts the store does not
 * offer are left zero/NULL and omitted. */
typedef struct donto_stats_extra {
    int have_rate;
    int64_t per_minute; /* vectors stored in the last 60 s */
    int have_contributors;
    const donto_contributor *contributors;
    size_t n_contributors;
    int have_reports;
    const donto_report *reports;
    size_t n_reports;
    /* Vectors per minute over the last hour, oldest first: series[i] is
     * minute series_start_min + i (Unix ms / 60000); the last is the
     * current, partial minute. */
    int have_series;
    const int64_t *series;
    int n_series;
    int64_t series_start_min;
    /* contributors[i].recent covers this many minutes (items/min = recent / it). */
    double recent_minutes;
    /* Each token's trust record (docs/trust.md), and the verifier's counters. */
    int have_tokens;
    const donto_token_info *tokens;
    size_t n_tokens;
    int have_verify;
    int64_t verify_queued, verify_done, verify_passed, verify_failed, verify_dropped;
    int64_t canary_pool, canary_out, canary_passed, canary_failed; /* canary items */
    /* Replication (serve --replicate): replicas waiting and out now; since
     * start: added, refused (the set was full), decided with every vote
     * agreeing, decided with some vote failing, dropped (no quorum), handed
     * to the verifier (no other token took them in time). */
    int have_replicas;
    int64_t replicas_waiting, replicas_out, replicas_added, replicas_refused, replicas_agreed, replicas_disagreed,
        replicas_dropped, replicas_stale;
} donto_stats_extra;
char *donto_proto_stats_response(const donto_target_stats st[DONTO_TARGET_N], const donto_stats_extra *x);
/* One token and its trust record as a JSON object (`token list --json`). */
char *donto_proto_token_json(const donto_token_info *t);

/* ---- client side (src/wire/client.c) ------------------------------------
 *
 * What a worker (src/worker/worker.c, bench/coord_client.c) sends and reads
 * back. Builders return 0 with a heap, NUL-terminated JSON body in *out
 * (free() it), or -1 with err set and *out NULL: a NULL or invalid-UTF-8
 * string, a target out of range, n < 1, out of memory. Parsers take the
 * answer's bytes (not NUL-terminated) and return 0 with the struct filled,
 * or -1 with err set and nothing to free; a malformed answer is an error,
 * never a crash. Same fields as docs/protocol.md; pure like the rest. */

/* Lease request {"worker_id","n","target"}; target -1 asks for any (null). */
int donto_proto_build_lease(const char *worker_id, int64_t n, int target, char **out, donto_err *err);

typedef struct donto_lease_item {
    int target;       /* donto_target */
    char *item_id;    /* a string id, or an integer id's decimal text */
    char *text;
    char *model;      /* DONTO_DEFAULT_MODEL when the answer names none (legacy) */
    int64_t lease_id; /* 0 when the answer has none (legacy) */
} donto_lease_item;

typedef struct donto_lease_resp {
    donto_lease_item *items;
    size_t n;       /* 0: nothing is ready */
    int64_t ttl_ms; /* "lease_ttl_ms": how long the lease runs; 0 when absent (legacy: no /extend) */
} donto_lease_resp;

/* {"batch": [{"target","item_id","text","model"?,"lease_id"?}, ...],
 *  "lease_ttl_ms"?: n} (a non-negative integer when present). */
int donto_proto_parse_lease_response(const char *body, size_t len, donto_lease_resp *out, donto_err *err);
void donto_lease_item_clear(donto_lease_item *it); /* frees its strings, zeroes it */
void donto_lease_resp_free(donto_lease_resp *r);

/* One item of a submit or release request (the caller's memory). */
typedef struct donto_client_item {
    int target;           /* donto_target */
    const char *item_id;
    int64_t lease_id;     /* sent when > 0 (the fencing token from the lease) */
    const char *model;    /* submit: sent when non-NULL */
    const float *vector;  /* submit: dims floats */
} donto_client_item;

/* Submit request. numbers == 0: "vector_b64" (base64 of little-endian
 * float32); numbers != 0: "vector" as JSON numbers (the legacy form; a
 * non-finite component is written as 1e39, a number beyond float range,
 * which the server rejects as non_finite for that item only). Consecutive
 * items with the same vector pointer share one rendering. */
int donto_proto_build_submit(const char *worker_id, const donto_client_item *items, size_t n, int dims,
                             int numbers, char **out, donto_err *err);
/* Release request {"worker_id","items":[{"target","item_id","lease_id"?}]}. */
int donto_proto_build_release(const char *worker_id, const donto_client_item *items, size_t n, char **out,
                              donto_err *err);
/* Extend request (POST /extend, the heartbeat of a worker whose batch takes
 * long): the body of a release. */
int donto_proto_build_extend(const char *worker_id, const donto_client_item *items, size_t n, char **out,
                             donto_err *err);
/* Report request {"worker_id","kind","message"}. */
int donto_proto_build_report(const char *worker_id, const char *kind, const char *message, char **out,
                             donto_err *err);

typedef struct donto_submit_reject {
    char *item_id; /* as the server echoed it (an integer as decimal text); NULL if absent */
    int target;    /* donto_target, or -1 when absent or unknown */
    char *reason;  /* NULL if absent */
} donto_submit_reject;

typedef struct donto_submit_resp {
    int64_t upserted;
    donto_submit_reject *rejected;
    size_t n_rejected;
    int has_rejected; /* the answer had a "rejected" key (even an empty one) */
} donto_submit_resp;

/* {"upserted": n, "rejected"?: [{"item_id","target","reason"}, ...]}. */
int donto_proto_parse_submit_response(const char *body, size_t len, donto_submit_resp *out, donto_err *err);
void donto_submit_resp_free(donto_submit_resp *r);

/* {"released": n}. */
int donto_proto_parse_release_response(const char *body, size_t len, int64_t *released, donto_err *err);

/* {"extended": n, "lease_ttl_ms"?: ttl}; *ttl_ms is 0 when absent. */
int donto_proto_parse_extend_response(const char *body, size_t len, int64_t *extended, int64_t *ttl_ms,
                                      donto_err *err);

/* An error answer {"error": code, "message"?: text} (docs/protocol.md):
 * returns 0 with code and message copied (cut to their buffers, never in
 * the middle of a UTF-8 sequence; message "" when absent), or -1 when the
 * body is not one (code and message then ""). Either buffer may be NULL. */
int donto_proto_parse_error_response(const char *body, size_t len, char *code, size_t code_cap, char *message,
                                     size_t message_cap);

#ifdef __cplusplus
}
#endif
#endif
