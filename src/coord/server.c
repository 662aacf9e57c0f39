/*
 * donto-accel coordinator: HTTP server (libmicrohttpd) over the store.
 *
 * Request life cycle (MHD calls on_request several times per request):
 *   1. headers:  route, method and bearer-token syntax are checked and the
 *                body size is checked against Content-Length; failures are
 *                answered right away, before any body byte is read.
 *   2. body:     bytes are appended to a per-request buffer that never grows
 *                past max_body; a chunked body that crosses the limit stops
 *                being kept (413 at the end), and one that goes on past twice
 *                the limit gets its connection dropped.
 *   3. complete: one store handle is taken from the pool, the token is
 *                checked, the body parsed (src/wire/wire.c), the store
 *                called, the handle given back, the answer queued.
 *
 * The store pool. Handles are not thread-safe (store.h), so each request
 * needs one of its own; opening one per request would cost a database
 * connection each time. The pool is a fixed array guarded by a mutex, with a
 * condition variable to wait for a free handle (bounded by pool_wait_s, then
 * 503 "busy"). A request takes exactly one handle, after its body is in, and
 * keeps it until its answer is built: it never asks for a second one while
 * holding the first. The original Python coordinator took a second
 * connection inside a request (token check, then the work); with every
 * connection held by requests each waiting for another, it deadlocked. With
 * one handle per request a waiter always waits for a request that needs
 * nothing more to finish, so the pool can be any size >= 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <openssl/evp.h>

#include "admin.h"
#include "conn_guard.h"
#include "donto/coord.h"
#include "donto/wire.h"
#include "canary.h"
#include "replica.h"
#include "sheaf_serve.h"
#include "limits.h"
#include "trust.h"
#include "verify.h"

#ifndef DONTO_VERSION
#define DONTO_VERSION "unknown"
#endif

/* Presented tokens longer than this are refused without hashing. */
#define TOKEN_MAX 1024

enum {
    R_NONE = -1, R_LEASE, R_SUBMIT, R_REPORT, R_RELEASE, R_EXTEND, R_HEALTH, R_STATS, R_METRICS, R_ADMIN,
    R_RECALL, R_SHEAF_INFER, R_SHEAF_MODELS, R_N
};

/* Who may use a route (docs/trust.md). A worker route acts as the token
 * that sent it: its worker ids are names within that token. */
enum { NEED_NONE = 0, NEED_WORKER, NEED_ADMIN, NEED_READER, NEED_ANALYST };

static const struct {
    const char *path;
    int post;  /* 1: POST; 0: GET (and HEAD) */
    int token; /* NEED_*: none; any valid token in good standing; admin; reader or admin; analyst or admin */
    int abs;   /* 1: the path is the whole URL (the /sheaf/ routes); 0: it follows the base */
} k_routes[R_N] = {
    [R_LEASE] = {"/lease", 1, NEED_WORKER},     [R_SUBMIT] = {"/submit", 1, NEED_WORKER},
    [R_REPORT] = {"/report", 1, NEED_WORKER},   [R_RELEASE] = {"/release", 1, NEED_WORKER},
    [R_EXTEND] = {"/extend", 1, NEED_WORKER},   [R_HEALTH] = {"/health", 0, NEED_NONE},
    [R_STATS] = {"/stats", 0, NEED_ADMIN},      [R_METRICS] = {"/metrics", 0, NEED_ADMIN},
    [R_ADMIN] = {"/admin", 0, NEED_NONE},       [R_RECALL] = {"/recall", 0, NEED_READER},
    [R_SHEAF_INFER] = {"/sheaf/infer", 1, NEED_ANALYST, 1},
    [R_SHEAF_MODELS] = {"/sheaf/models", 0, NEED_ANALYST, 1},
};

/* Statuses counted per route for /metrics (anything else: the last slot). */
static const unsigned k_statuses[] = {200, 400, 401, 403, 404, 405, 409, 413, 429, 500, 503};
#define N_STATUS (sizeof k_statuses / sizeof k_statuses[0] + 1)

/* ---- the store pool -------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    donto_store **all;  /* every handle, for closing */
    donto_store **idle; /* stack of free handles */
    int n, nidle;
} store_pool;

/* Condition variables wait on the monotonic clock: a wall-clock jump must
 * not turn a 10 s wait into an hour or into nothing. */
static int cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t a;
    if (pthread_condattr_init(&a)) return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? -1 : 0;
}

static struct timespec deadline_after(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (s < 0) s = 0;
    if (s > 86400) s = 86400;
    long long ns = (long long)ts.tv_nsec + (long long)((s - (double)(long long)s) * 1e9);
    ts.tv_sec += (time_t)s + (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static void pool_close(store_pool *p) {
    for (int i = 0; i < p->n; i++)
        if (p->all[i]) donto_store_close(p->all[i]);
    free(p->all);
    free(p->idle);
    p->all = p->idle = NULL;
    p->n = p->nidle = 0;
}

static int pool_open(store_pool *p, int n, const donto_coord_config *cfg, donto_err *err) {
    p->all = calloc((size_t)n, sizeof *p->all);
    p->idle = calloc((size_t)n, sizeof *p->idle);
    if (!p->all || !p->idle) {
        pool_close(p);
        return donto_seterr(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        int rc = cfg->open_store ? cfg->open_store(cfg->open_ctx, &p->all[i], err)
                                 : donto_store_open_existing(cfg->db_url, &p->all[i], err);
        if (!rc && p->all[i] && cfg->vectors) rc = donto_store_set_vectors(p->all[i], cfg->vectors, err);
        p->n = i + 1;
        if (rc || !p->all[i]) {
            p->all[i] = NULL;
            pool_close(p);
            return donto_preerr(err, "opening store handle %d of %d", i + 1, n);
        }
        p->idle[p->nidle++] = p->all[i];
    }
    return 0;
}

/* One free handle, waiting at most wait_s; NULL when none became free. */
static donto_store *pool_take(store_pool *p, double wait_s) {
    struct timespec dl = deadline_after(wait_s);
    donto_store *s = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->nidle == 0)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT) break;
    if (p->nidle > 0) s = p->idle[--p->nidle];
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void pool_give(store_pool *p, donto_store *s) {
    pthread_mutex_lock(&p->mu);
    p->idle[p->nidle++] = s;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- the coordinator ----------------------------------------------------------- */

struct donto_coord {
    struct MHD_Daemon *d;
    store_pool pool;
    char *base; /* normalised: "" or "/x[/y]" without a trailing slash */
    size_t base_len;
    size_t max_body;
    int64_t ttl_ms;
    double pool_wait_s;
    const char *version;
    int64_t (*now_ms)(void *);
    void *clock_ctx;
    int port;
    /* HTTPS: our copies of the PEM text, alive as long as the daemon. */
    char *tls_cert, *tls_key;
    /* Requests in flight, for the drain at stop. */
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;
    int inflight;
    /* Set at stop: a request that arrives on an already open keep-alive
     * connection during the drain gets 503 + Connection: close, so a busy
     * fleet cannot keep the drain alive until its deadline. */
    _Atomic int stopping;
    /* Answers queued, by route (R_N: no route) and status, for /metrics. */
    _Atomic unsigned long long hits[R_N + 1][N_STATUS];
    donto_recall *recall; /* borrowed; NULL: /recall answers 503 */
    sheaf_srv *sheaf;     /* the /sheaf/ routes: sheaf_serve.c */
    char *recall_model;
    /* Trust (docs/trust.md). */
    coord_limits *limits;
    int64_t max_outstanding; /* items a token holds leased, fleet-wide; 0: no limit */
    verify_pool *verify;  /* NULL: no verification */
    char *verify_model;   /* the stored model name the verifier embeds */
    float min_cosine;     /* the verifier's pass mark */
    canary_set *canaries; /* NULL: none (no verifier, or --canary-rate 0) */
    _Atomic unsigned long long canary_passed, canary_failed;
    double canary_rate;   /* a trusted token's lease answer carries a canary this often */
    replica_set *replicas; /* NULL: no replication (serve --replicate) */
    trust_params trust;
    pthread_mutex_t rng_mu;
    uint64_t rng;
    /* Suspensions to sweep once more a little later: a submit that passed
     * the token gate just before the suspension may commit just after it. */
    pthread_mutex_t sweep_mu;
    pthread_cond_t sweep_cv;
    pthread_t sweeper;
    int sweeper_on, sweeper_stop;
    struct {
        char token[DONTO_TOKEN_NAME_MAX + 1];
        double at; /* monotonic seconds */
        int done;
    } sweeps[64];
    int nsweeps;
    conn_guard *guard; /* slow and hostile clients: conn_guard.c */
};

typedef struct {
    int route;
    uint8_t token_hash[32];
    /* Who sent it (after the gate). */
    char token[DONTO_TOKEN_NAME_MAX + 1];
    donto_role role;
    donto_trust trust;
    char *body;
    size_t len, cap;
    int too_big;    /* the body crossed max_body: 413 at the end */
    size_t dropped; /* bytes discarded after crossing it */
    int answered;   /* a response was queued at header time */
} request;

typedef struct {
    unsigned status;
    char *json;        /* heap body; NULL means out of memory (500) */
    const char *ctype; /* NULL: application/json */
    int retry_after;   /* > 0: a Retry-After header (seconds), with 429 and 503 */
} answer;

static int64_t wall_ms(void *ctx) {
    (void)ctx;
    return donto_unix_ms();
}

/* Fleet-wide event counts (docs/fleet.md): every coordinator on the database
 * adds to the same rows, and /stats reads them back, so the figures are the
 * fleet's whichever coordinator answers. A failure is logged and the event
 * goes uncounted there (this process's own counters still have it). */
static const char *const FLEET_COUNTERS[] = {"verify_passed", "verify_failed", "verify_skipped", "canary_passed",
                                             "canary_failed"};
enum { FC_VERIFY_PASSED, FC_VERIFY_FAILED, FC_VERIFY_SKIPPED, FC_CANARY_PASSED, FC_CANARY_FAILED, FC_N };

static void fleet_count(donto_store *s, int which) {
    donto_err e = {0};
    if (donto_store_counter_add(s, FLEET_COUNTERS[which], 1, &e) && e.code != DONTO_E_SCHEMA)
        DLOG_WARN("coord: counting %s for the fleet: %s", FLEET_COUNTERS[which], e.msg);
}

static void inflight_add(donto_coord *c, int d) {
    pthread_mutex_lock(&c->mu);
    c->inflight += d;
    if (c->inflight == 0) pthread_cond_broadcast(&c->idle_cv);
    pthread_mutex_unlock(&c->mu);
}

static answer errorf(unsigned status, const char *code, const char *fmt, ...) DONTO_PRINTF(3, 4);
static answer errorf(unsigned status, const char *code, const char *fmt, ...) {
    char msg[DONTO_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return (answer){status, donto_proto_error_response(code, msg), NULL, 0};
}

/* What a failure of the layers below (store, recall) means to a client,
 * by its code (util.h): the one table from donto_code to HTTP. Messages are
 * generic: the underlying one (host names, SQL, user names, paths) goes to
 * the log only, since the token check runs before the client is known.
 * An unclassified failure answers with the caller's word for it. */
static const struct {
    unsigned status;
    const char *error;   /* NULL: the caller's word (store_error, recall_failed) */
    const char *message; /* after "<what>: " */
} k_failures[DONTO_E_N] = {
    [DONTO_E_NONE] = {500, NULL, "failed (details in the coordinator's log)"},
    [DONTO_E_INTERNAL] = {500, NULL, "failed (details in the coordinator's log)"},
    [DONTO_E_INVALID] = {400, "bad_request", "the request was refused as invalid"},
    [DONTO_E_NOT_FOUND] = {404, "not_found", "not found"},
    [DONTO_E_CONFLICT] = {409, "conflict", "conflicts with what is stored"},
    [DONTO_E_UNAVAILABLE] = {503, "database_unavailable", "the database is unreachable; retry later"},
    [DONTO_E_NOMEM] = {503, "out_of_memory", "the coordinator is out of memory; retry later"},
    [DONTO_E_SCHEMA] = {503, "not_migrated", "the database lacks tables this needs (donto-embed migrate)"},
};

static answer failure(const char *what, const char *internal_error, const donto_err *e) {
    donto_code code = donto_err_code(e);
    DLOG_ERROR("coord: %s failed (%s): %s", what, donto_code_name(code), e->msg);
    const char *word = k_failures[code].error ? k_failures[code].error : internal_error;
    return errorf(k_failures[code].status, word, "%s: %s", what, k_failures[code].message);
}

static void count_hit(donto_coord *c, int route, unsigned status) {
    size_t k = N_STATUS - 1;
    for (size_t i = 0; i + 1 < N_STATUS; i++)
        if (k_statuses[i] == status) k = i;
    atomic_fetch_add_explicit(&c->hits[route < 0 || route >= R_N ? R_N : route][k], 1, memory_order_relaxed);
}

static enum MHD_Result queue(donto_coord *c, int route, struct MHD_Connection *conn, answer a, const char *allow) {
    static const char oom[] = "{\"error\":\"internal\",\"message\":\"out of memory\"}";
    struct MHD_Response *resp;
    if (a.json) {
        resp = MHD_create_response_from_buffer_with_free_callback(strlen(a.json), a.json, &free);
        if (!resp) free(a.json); /* MHD takes the buffer only on success */
    } else {
        a.status = 500;
        resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    }
    count_hit(c, route, a.status);
    if (!resp) return MHD_NO; /* MHD closes the connection */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a.json && a.ctype ? a.ctype : "application/json");
    if (a.json && route == R_ADMIN) {
        /* The admin page is inline HTML/CSS/JS that talks to this server
         * only; worker-supplied text is put in with textContent, and the
         * policy below is a second wall should that ever slip. */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (a.status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (a.retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", a.retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (atomic_load(&c->stopping)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, a.status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* "Bearer <token>" -> SHA-256(token). Only the hash ever reaches the store,
 * which keeps nothing but hashes: a database dump yields no usable token. */
static int bearer_hash(const char *h, uint8_t out[32]) {
    if (!h) return -1;
    while (*h == ' ' || *h == '\t') h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return -1;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strnlen(h, TOKEN_MAX + 1);
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    if (n == 0 || n > TOKEN_MAX) return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)h[i] < 0x21 || (unsigned char)h[i] > 0x7e) return -1;
    unsigned int hl = 0;
    if (EVP_Digest(h, n, out, &hl, EVP_sha256(), NULL) != 1 || hl != 32) return -1;
    return 0;
}

static int route_of(const donto_coord *c, const char *url) {
    if (!url) return R_NONE;
    for (int r = 0; r < R_N; r++)
        if (k_routes[r].abs && !strcmp(url, k_routes[r].path)) return r;
    if (strncmp(url, c->base, c->base_len) != 0) return R_NONE;
    const char *rest = url + c->base_len;
    for (int r = 0; r < R_N; r++)
        if (!k_routes[r].abs && !strcmp(rest, k_routes[r].path)) return r;
    return R_NONE;
}

/* Step 1: everything that can be decided from the request line and headers. */
static enum MHD_Result on_headers(donto_coord *c, struct MHD_Connection *conn, const char *url,
                                  const char *method, request *r) {
    r->route = route_of(c, url);
    if (atomic_load(&c->stopping)) {
        r->answered = 1;
        return queue(c, r->route, conn, errorf(503, "shutting_down", "the coordinator is stopping; retry shortly"),
                     NULL);
    }
    if (r->route == R_NONE) {
        r->answered = 1;
        return queue(c, r->route, conn, errorf(404, "not_found", "no route %.200s", url ? url : ""), NULL);
    }
    int post = k_routes[r->route].post;
    int ok = post ? !strcmp(method, "POST") : (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    if (!ok) {
        r->answered = 1;
        return queue(c, r->route, conn,
                     errorf(405, "method_not_allowed", "%s%s takes %s", k_routes[r->route].abs ? "" : c->base,
                            k_routes[r->route].path, post ? "POST" : "GET"),
                     post ? "POST" : "GET, HEAD");
    }
    if (k_routes[r->route].token) {
        const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (bearer_hash(h, r->token_hash)) {
            r->answered = 1;
            return queue(c, r->route, conn, errorf(401, "unauthorized", "%s", h ? "malformed bearer token" : "missing bearer token"),
                         NULL);
        }
    }
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || end == cl || v > c->max_body) {
            r->answered = 1;
            return queue(c, r->route, conn,
                         errorf(413, "payload_too_large", "request body over the limit of %zu bytes", c->max_body),
                         NULL);
        }
        /* Pre-size for the announced body, but not beyond 1 MiB: a client
         * announcing much and sending little must not pin memory. */
        size_t want = (size_t)v < ((size_t)1 << 20) ? (size_t)v : ((size_t)1 << 20);
        if (want) {
            r->body = malloc(want + 1);
            r->cap = r->body ? want : 0;
        }
    }
    return MHD_YES;
}

/* Step 2: keep body bytes, never more than max_body. */
static enum MHD_Result absorb(donto_coord *c, request *r, const char *data, size_t n) {
    if (r->too_big) {
        r->dropped += n;
        /* Reading on costs bandwidth only; still, a client streaming without
         * end gets cut off once it has sent twice the limit. */
        return r->dropped <= c->max_body ? MHD_YES : MHD_NO;
    }
    if (n > c->max_body - r->len) {
        r->too_big = 1;
        r->dropped = n;
        free(r->body);
        r->body = NULL;
        r->len = r->cap = 0;
        return MHD_YES;
    }
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n) cap = cap > c->max_body / 2 ? c->max_body : cap * 2;
        char *b = realloc(r->body, cap + 1);
        if (!b) {
            DLOG_ERROR("coord: out of memory buffering a %zu-byte body", r->len + n);
            return MHD_NO;
        }
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    return MHD_YES;
}

/* ---- trust: the verifier's verdicts (docs/trust.md) ----------------------------- */

#define SWEEP_AFTER_S 5.0

/* Replication: tokens that must agree at most, replicas waiting at once, and
 * how long one waits for another token before the verifier (if any) checks
 * it instead (a lone contributor is not stalled for want of a second). */
#define REPLICA_QUORUM_MAX 3
#define REPLICA_CAP_DEFAULT 8192
#define REPLICA_STALE_MS 30000
#define REPLICA_SWEEP_S 5.0


static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Was token suspended by this process in the last little while? Then a
 * second failing check needs no second suspension (the sweep follows). */
static int sweep_pending(donto_coord *c, const char *token) {
    int found = 0;
    pthread_mutex_lock(&c->sweep_mu);
    for (int i = 0; i < c->nsweeps && !found; i++) found = strcmp(c->sweeps[i].token, token) == 0;
    pthread_mutex_unlock(&c->sweep_mu);
    return found;
}

static void sweep_add(donto_coord *c, const char *token) {
    pthread_mutex_lock(&c->sweep_mu);
    if (c->nsweeps < (int)(sizeof c->sweeps / sizeof c->sweeps[0])) {
        snprintf(c->sweeps[c->nsweeps].token, sizeof c->sweeps[0].token, "%s", token);
        c->sweeps[c->nsweeps].at = mono_s() + SWEEP_AFTER_S;
        c->sweeps[c->nsweeps++].done = 0;
        pthread_cond_signal(&c->sweep_cv);
    }
    pthread_mutex_unlock(&c->sweep_mu);
}

/* A failed check (a re-embedded item, or a canary: what = "canary "):
 * suspend token, withdrawing its unverified vectors, unless this process
 * just did (the second sweep follows anyway). On the caller's handle. */
static void suspend_reason(donto_coord *c, donto_store *s, const char *token, const char *reason, int64_t now) {
    if (sweep_pending(c, token)) return;
    /* Its replicas wait no more (their vectors are withdrawn below); its
     * votes on others' no longer count. */
    size_t own = replica_forget(c->replicas, token);
    if (own) limits_checks_pending(c->limits, token, -(int64_t)own, now);
    int64_t withdrawn = 0;
    donto_err e = {0};
    if (donto_store_suspend(s, token, reason, now, &withdrawn, &e))
        DLOG_ERROR("coord: verify: suspending token %s failed: %s", token, e.msg);
    else
        DLOG_WARN("coord: token %s suspended: %s; %lld of its unverified vectors withdrawn and their items "
                  "queued again",
                  token, reason, (long long)withdrawn);
    sweep_add(c, token);
}

static void suspend_for(donto_coord *c, donto_store *s, const char *token, const char *what, donto_target t,
                        const char *item_id, const char *worker, float cosine, int64_t now) {
    char reason[256];
    snprintf(reason, sizeof reason,
             "the vector of %s%s %.60s from worker %.60s did not match the coordinator's own (cosine %.4f, "
             "at least %.4f needed)",
             what, donto_target_name(t), item_id, worker, (double)cosine, (double)c->min_cosine);
    suspend_reason(c, s, token, reason, now);
}

/* A replica was decided (replica.h): record every vote's verdict (the
 * origin's pass marks its stored vector verified) and suspend the tokens
 * whose vectors disagreed with the quorum. On the caller's handle. */
static void replica_verdicts(donto_coord *c, donto_store *s, const replica_result *res, int64_t now) {
    for (size_t i = 0; i < res->nvotes; i++) {
        const replica_vote *v = &res->votes[i];
        donto_check chk = {res->target, res->item_id, NULL, v->lease_id, v->pass};
        donto_err e = {0};
        if (donto_store_trust_record(s, v->token, &chk, 1, now, &e))
            DLOG_WARN("coord: replica: recording the check of token %s: %s", v->token, e.msg);
        if (v->pass) continue;
        char reason[256];
        snprintf(reason, sizeof reason,
                 "its vector of %s %.60s from worker %.60s disagreed with %zu other tokens' (cosine %.4f to theirs, "
                 "at least %.4f needed)",
                 donto_target_name(res->target), res->item_id, v->worker, res->nvotes - 1, (double)v->cosine,
                 (double)c->min_cosine);
        suspend_reason(c, s, v->token, reason, now);
    }
}

/* Called on a verifier thread for every check it finished. */
static void on_verified(void *ctx, const verify_job *job, float cosine, int pass, const float *ref) {
    donto_coord *c = ctx;
    limits_checks_pending(c->limits, job->token, -1, c->now_ms(c->clock_ctx));
    /* What the coordinator embedded itself is a canary for later leases. */
    if (pass > 0 && ref && c->canaries)
        canary_offer(c->canaries, (donto_target)job->target, job->item_id,
                     job->model ? job->model : c->verify_model ? c->verify_model : "", job->text, ref, job->dims);
    donto_store *s = pool_take(&c->pool, 30.0);
    if (!s) {
        DLOG_WARN("coord: verify: no store handle free for 30 s; the check of %s %.200s is lost",
                  donto_target_name((donto_target)job->target), job->item_id);
        return;
    }
    fleet_count(s, pass < 0 ? FC_VERIFY_SKIPPED : pass ? FC_VERIFY_PASSED : FC_VERIFY_FAILED);
    if (pass < 0) { /* not checked (verify.h): no verdict */
        pool_give(&c->pool, s);
        return;
    }
    int64_t now = c->now_ms(c->clock_ctx);
    donto_err e = {0};
    donto_check chk = {(donto_target)job->target, job->item_id, job->model, job->lease_id, pass};
    if (donto_store_trust_record(s, job->token, &chk, 1, now, &e))
        DLOG_WARN("coord: verify: recording the check of token %s: %s", job->token, e.msg);
    if (!pass)
        suspend_for(c, s, job->token, "", (donto_target)job->target, job->item_id, job->worker_id, cosine, now);
    pool_give(&c->pool, s);
}

/* A replica no other token took in time goes to the verifier (under the
 * replica set's lock: only pushes). Its pending check moves with it. */
static void replica_to_verifier(void *ctx, const char *token, const char *worker, donto_target target,
                                const char *item_id, const char *model, const char *text, const float *vec, int dims,
                                int64_t lease_id) {
    donto_coord *c = ctx;
    verify_job job = {.token = (char *)token,
                      .worker_id = (char *)worker,
                      .target = (int)target,
                      .item_id = (char *)item_id,
                      .model = model && *model ? (char *)model : NULL,
                      .text = (char *)text,
                      .vec = (float *)vec,
                      .dims = dims,
                      .lease_id = lease_id};
    if (verify_push(c->verify, &job)) limits_checks_pending(c->limits, token, -1, c->now_ms(c->clock_ctx));
}

/* The sweeper: a few seconds after a suspension, withdraw once more what a
 * submit already past the token gate stored after it; every few seconds,
 * hand the replicas no other token took in time to the verifier. */
static void *sweeper_main(void *arg) {
    donto_coord *c = arg;
    double next_stale = mono_s() + REPLICA_SWEEP_S;
    pthread_mutex_lock(&c->sweep_mu);
    while (!c->sweeper_stop) {
        double now = mono_s(), next = now + 3600;
        if (c->replicas && c->verify) {
            if (now >= next_stale) {
                pthread_mutex_unlock(&c->sweep_mu);
                int64_t t = c->now_ms(c->clock_ctx);
                size_t n = replica_take_stale(c->replicas, t - REPLICA_STALE_MS, t, replica_to_verifier, c);
                if (n) DLOG_INFO("coord: replica: %zu waited %d s for another token; the verifier checks them", n,
                                 REPLICA_STALE_MS / 1000);
                pthread_mutex_lock(&c->sweep_mu);
                next_stale = mono_s() + REPLICA_SWEEP_S;
                continue;
            }
            next = next_stale;
        }
        int due = -1;
        for (int i = 0; i < c->nsweeps; i++) {
            if (c->sweeps[i].at <= now) due = i;
            else if (c->sweeps[i].at < next) next = c->sweeps[i].at;
        }
        if (due < 0) {
            struct timespec dl = deadline_after(next - now);
            pthread_cond_timedwait(&c->sweep_cv, &c->sweep_mu, &dl);
            continue;
        }
        char token[DONTO_TOKEN_NAME_MAX + 1];
        snprintf(token, sizeof token, "%s", c->sweeps[due].token);
        c->sweeps[due] = c->sweeps[--c->nsweeps];
        pthread_mutex_unlock(&c->sweep_mu);
        donto_store *s = pool_take(&c->pool, 30.0);
        if (s) {
            donto_err e = {0};
            int64_t withdrawn = 0;
            if (donto_store_suspend(s, token, "second sweep after the suspension", c->now_ms(c->clock_ctx),
                                    &withdrawn, &e))
                DLOG_ERROR("coord: verify: second sweep of token %s failed: %s", token, e.msg);
            else if (withdrawn)
                DLOG_WARN("coord: token %s: %lld more vectors withdrawn by the second sweep", token,
                          (long long)withdrawn);
            pool_give(&c->pool, s);
        }
        pthread_mutex_lock(&c->sweep_mu);
    }
    pthread_mutex_unlock(&c->sweep_mu);
    return NULL;
}

/* ---- route handlers (one store handle, already taken) --------------------------- */

/* The worker as the store knows it: "<token>/<worker id>" (store.h), so a
 * token acts only on its own workers' leases. Heap; NULL: out of memory. */
static char *principal(const request *r, const char *worker_id) {
    size_t a = strlen(r->token), b = strlen(worker_id);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, r->token, a);
    p[a] = DONTO_WORKER_SEP;
    memcpy(p + a + 1, worker_id, b + 1);
    return p;
}

static answer too_many(int retry_after, const char *fmt, const char *what) {
    answer a = errorf(429, "rate_limited", fmt, what);
    a.retry_after = retry_after > 0 ? retry_after : 1;
    return a;
}

/* Checks of a trusted token's vectors that may wait on the verifier before
 * its leases wait for them (see do_lease). */
#define CHECKS_AHEAD_MAX 16

/* Mix a canary into a lease answer: always for a token not yet trusted,
 * with probability canary_rate for a trusted one; at a random place, under
 * the lease_id after the batch's last (as the next real item's would be). */
static void add_canary(donto_coord *c, const request *r, int target, donto_lease_batch *b, int64_t now) {
    double p = r->trust.streak < c->trust.trust_after ? 1.0 : c->canary_rate;
    int64_t last = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].lease_id > last) last = b->items[i].lease_id;
    pthread_mutex_lock(&c->rng_mu);
    int draw = trust_draw(p, &c->rng);
    size_t at = (size_t)(trust_draw(1.0, &c->rng) ? c->rng % (b->n + 1) : 0);
    donto_leased_item it;
    int got = draw && canary_issue(c->canaries, r->token, target, last + 1, now, now + c->ttl_ms, &c->rng, &it);
    pthread_mutex_unlock(&c->rng_mu);
    if (!got) return;
    donto_leased_item *items = realloc(b->items, (b->n + 1) * sizeof *items);
    if (!items) {
        free(it.item_id), free(it.model), free(it.text);
        return;
    }
    memmove(&items[at + 1], &items[at], (b->n - at) * sizeof *items);
    items[at] = it;
    b->items = items;
    b->n++;
}

/* Mix up to max replicas (replica.h) into a lease answer, at random
 * places, under lease_ids after the batch's last. */
static void add_replicas(donto_coord *c, const request *r, int target, donto_lease_batch *b, size_t max,
                         int64_t now) {
    int64_t last = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->items[i].lease_id > last) last = b->items[i].lease_id;
    for (size_t k = 0; k < max; k++) {
        donto_leased_item it;
        if (!replica_issue(c->replicas, r->token, target, last + 1 + (int64_t)k, now, now + c->ttl_ms, &it)) break;
        donto_leased_item *items = realloc(b->items, (b->n + 1) * sizeof *items);
        if (!items) {
            free(it.item_id), free(it.model), free(it.text);
            break; /* it comes back to the line at its expiry */
        }
        pthread_mutex_lock(&c->rng_mu);
        size_t at = (size_t)(trust_draw(1.0, &c->rng) ? c->rng % (b->n + 1) : 0);
        pthread_mutex_unlock(&c->rng_mu);
        memmove(&items[at + 1], &items[at], (b->n - at) * sizeof *items);
        items[at] = it;
        b->items = items;
        b->n++;
    }
}

static answer do_lease(donto_coord *c, donto_store *s, const request *r) {
    donto_lease_req q;
    donto_err e = {0};
    if (donto_proto_parse_lease(r->body, r->len, &q, &e)) return errorf(400, "bad_request", "%s", e.msg);
    char *who = principal(r, q.worker_id);
    if (!who) return errorf(500, "internal", "out of memory");
    int64_t now = c->now_ms(c->clock_ctx);
    int retry = 0;
    const char *why = "";
    answer a;
    /* A token may not run far ahead of its checks: while the verifier has
     * many of them queued (an untrusted token: trust_after; a trusted one:
     * CHECKS_AHEAD_MAX), it waits for the verdicts. This bounds the bad
     * items a token turning bad can store before its first failed check,
     * whatever the verifier's backlog. Meanwhile it may still vote on other
     * tokens' replicas (without that, tokens that all wait for each other's
     * votes would wait for ever). */
    int behind = 0;
    if (c->verify || c->replicas) {
        int64_t pending = limits_checks_pending(c->limits, r->token, 0, now);
        int64_t cap = r->trust.streak < c->trust.trust_after ? c->trust.trust_after : CHECKS_AHEAD_MAX;
        behind = pending >= cap;
        if (behind && !(c->replicas && replica_available(c->replicas, r->token, q.target, 1))) {
            a = too_many(1, "this token's vectors wait for the coordinator's checks (%s); retry after the delay given",
                         "verification behind");
            goto out;
        }
    }
    int n = limits_lease_allow(c->limits, r->token, who, q.n, now, &retry, &why);
    if (n == 0) {
        a = too_many(retry,
                     strcmp(why, "rate") == 0 ? "this token leases too often (%s); retry after the delay given"
                                              : "this token holds its limit of leased items (%s); submit or "
                                                "release some, or retry after the delay given",
                     why);
        goto out;
    }
    /* --max-outstanding holds across the fleet (docs/fleet.md): what the
     * token holds leased from every coordinator, from the database (the
     * count above is this coordinator's own). Lease requests of one token
     * answered at the same moment may each see the same room, so the cap
     * can be passed by what those requests lease at once, no more. A store
     * without a database to ask (tests' fakes): this coordinator's count. */
    if (c->max_outstanding > 0) {
        int64_t held = 0, first = 0;
        if (donto_store_leased_by(s, r->token, now, &held, &first, &e) == 0) {
            if (held >= c->max_outstanding) {
                int64_t wait = first > now ? (first - now + 999) / 1000 : 1;
                a = too_many((int)(wait < 3600 ? wait : 3600),
                             "this token holds its limit of leased items (%s) across the coordinators; submit or "
                             "release some, or retry after the delay given",
                             "outstanding");
                goto out;
            }
            if (n > c->max_outstanding - held) n = (int)(c->max_outstanding - held);
        } else if (e.code != DONTO_E_NOT_FOUND) {
            DLOG_WARN("coord: lease: the token's leases across the fleet: %s (this coordinator's count used)", e.msg);
        }
        e = (donto_err){0};
    }
    /* Other tokens' replicas waiting for a vote take up to half the batch
     * (all of it when the queue runs dry, or the token is behind), so they
     * keep pace with the untrusted tokens that make them. */
    size_t nrep = !c->replicas ? 0
                  : behind     ? (size_t)n
                               : replica_available(c->replicas, r->token, q.target, (size_t)(n > 1 ? n / 2 : 1));
    donto_lease_batch b = {0};
    if ((size_t)n > nrep && donto_store_lease(s, who, n - (int)nrep, q.target, now, c->ttl_ms, &b, &e)) {
        a = failure("lease", "store_error", &e);
        goto out;
    }
    limits_leased(c->limits, r->token, b.n, now, now + c->ttl_ms);
    if (c->replicas) add_replicas(c, r, q.target, &b, (size_t)n - b.n, now);
    if (c->canaries && b.n > 0) add_canary(c, r, q.target, &b, now);
    a = (answer){200, donto_proto_lease_response_ttl(&b, c->ttl_ms), NULL, 0};
    DLOG_DEBUG("coord: lease %s n=%d (asked %d) target=%s -> %zu", who, n, q.n,
               q.target < 0 ? "any" : donto_target_name(q.target), b.n);
    donto_lease_batch_free(&b);
out:
    free(who);
    return a;
}

/* Hand newly stored items to be checked, each with the token's sampling
 * probability (trust.h): to other tokens as replicas (replica.h) when
 * replication is on and the token is not trusted yet, or there is no
 * verifier; else to the verifier, which does not check items of a model it
 * does not embed. A full replica set hands the item to the verifier. */
static void verify_sample(donto_coord *c, donto_store *s, const request *r, const char *who,
                          const donto_items_req *q, const size_t *idx, const donto_submit_item *si, char **texts,
                          size_t nv) {
    int64_t now = c->now_ms(c->clock_ctx);
    int64_t pending = limits_checks_pending(c->limits, r->token, 0, now);
    for (size_t j = 0; j < nv; j++) {
        if (!texts[j]) continue; /* rejected, or a repeat */
        const donto_proto_item *it = &q->items[idx[j]];
        int replicate = c->replicas && (!c->verify || r->trust.streak < c->trust.trust_after);
        int verifiable = c->verify && (!it->model || !c->verify_model || strcmp(it->model, c->verify_model) == 0);
        if (!replicate && !verifiable) continue;
        /* Checks still queued count as passed for the draw (limits.h), at
         * most trust_after of them: the verdicts soon say more. */
        int64_t pc = pending < c->trust.trust_after ? pending : c->trust.trust_after;
        double p = trust_sample_p(&c->trust, r->trust.streak + pc, r->trust.checks + pc);
        pthread_mutex_lock(&c->rng_mu);
        int draw = trust_draw(p, &c->rng);
        pthread_mutex_unlock(&c->rng_mu);
        if (!draw) continue;
        if (replicate) {
            const char *model = it->model ? it->model : c->verify_model ? c->verify_model : "";
            if (replica_add(c->replicas, r->token, who, si[j].target, si[j].item_id, model, texts[j], si[j].vector,
                            si[j].dims, si[j].lease_id, now) == 0) {
                pending = limits_checks_pending(c->limits, r->token, +1, now);
                continue;
            }
            if (!verifiable) continue; /* the set is full: not checked (counted there) */
        }
        verify_job job = {.token = (char *)r->token,
                          .worker_id = (char *)who,
                          .target = (int)si[j].target,
                          .item_id = (char *)si[j].item_id,
                          .model = (char *)it->model,
                          .text = texts[j],
                          .vec = (float *)si[j].vector,
                          .dims = si[j].dims,
                          .lease_id = si[j].lease_id};
        if (verify_push(c->verify, &job) == 0) /* a full queue skips the check, counted */
            pending = limits_checks_pending(c->limits, r->token, +1, now);
        else
            fleet_count(s, FC_VERIFY_SKIPPED);
    }
}

/* A canary came back: record the check; a mismatch suspends the token. */
static void canary_verdict(donto_coord *c, donto_store *s, const request *r, const char *who,
                           const donto_proto_item *it, float cosv, int64_t now) {
    int pass = cosv >= c->min_cosine;
    donto_check chk = {(donto_target)it->target, it->item_id, it->model, it->lease_id, pass};
    donto_err e = {0};
    if (donto_store_trust_record(s, r->token, &chk, 1, now, &e))
        DLOG_WARN("coord: canary: recording the check of token %s: %s", r->token, e.msg);
    atomic_fetch_add(pass ? &c->canary_passed : &c->canary_failed, 1);
    fleet_count(s, pass ? FC_CANARY_PASSED : FC_CANARY_FAILED);
    if (!pass) suspend_for(c, s, r->token, "canary ", (donto_target)it->target, it->item_id, who, cosv, now);
}

/* Submit, release and extend share the item list: a submit passes only the
 * items that passed validation to the store, and maps its verdicts back by
 * index. */
enum { ITEMS_SUBMIT, ITEMS_RELEASE, ITEMS_EXTEND };
static answer do_items(donto_coord *c, donto_store *s, const request *r, int kind) {
    donto_items_req q;
    donto_err e = {0};
    if ((kind == ITEMS_SUBMIT ? donto_proto_parse_submit : donto_proto_parse_release)(r->body, r->len, &q, &e))
        return errorf(400, "bad_request", "%s", e.msg);
    answer a = {500, NULL, NULL, 0};
    size_t nv = 0;
    for (size_t i = 0; i < q.n; i++) nv += q.items[i].reason == NULL;
    donto_submit_item *si = calloc(nv ? nv : 1, sizeof *si);
    size_t *idx = calloc(nv ? nv : 1, sizeof *idx);
    donto_reject *rej = calloc(nv ? nv : 1, sizeof *rej);
    const int checked = (c->verify || c->replicas) && kind == ITEMS_SUBMIT;
    char **texts = checked ? calloc(nv ? nv : 1, sizeof *texts) : NULL;
    char *who = principal(r, q.worker_id);
    int64_t now = c->now_ms(c->clock_ctx);
    if (!si || !idx || !rej || !who || (checked && !texts)) {
        a = errorf(500, "internal", "out of memory");
        goto done;
    }
    /* Canaries (canary.h) and replicas (replica.h) never reach the store:
     * answered here, each submitted canary checked against the
     * coordinator's own vector, each replica counted as a vote. */
    size_t k = 0, ncanary = 0;
    for (size_t i = 0; i < q.n; i++) {
        const donto_proto_item *it = &q.items[i];
        if (it->reason) continue;
        if (c->replicas) {
            replica_result res;
            int hit = kind == ITEMS_SUBMIT
                          ? replica_take(c->replicas, r->token, who, (donto_target)it->target, it->item_id,
                                         it->lease_id, it->vector, it->dims, now, &res)
                          : replica_touch(c->replicas, r->token, (donto_target)it->target, it->item_id, it->lease_id,
                                          kind == ITEMS_EXTEND, now + c->ttl_ms, now);
            if (hit) {
                ncanary++;
                if (kind == ITEMS_SUBMIT && res.state != REPLICA_WAIT) {
                    limits_checks_pending(c->limits, res.origin_token, -1, now);
                    if (res.state == REPLICA_DECIDED) replica_verdicts(c, s, &res, now);
                }
                continue;
            }
        }
        if (c->canaries) {
            float cosv = 0;
            int hit = kind == ITEMS_SUBMIT
                          ? canary_take(c->canaries, r->token, (donto_target)it->target, it->item_id, it->lease_id,
                                        it->vector, it->dims, &cosv, now)
                          : canary_touch(c->canaries, r->token, (donto_target)it->target, it->item_id, it->lease_id,
                                         kind == ITEMS_EXTEND, now + c->ttl_ms, now);
            if (hit) {
                ncanary++;
                if (kind == ITEMS_SUBMIT) canary_verdict(c, s, r, who, it, cosv, now);
                continue;
            }
        }
        si[k] = (donto_submit_item){.target = (donto_target)it->target,
                                    .item_id = it->item_id,
                                    .lease_id = it->lease_id,
                                    .vector = kind == ITEMS_SUBMIT ? it->vector : NULL,
                                    .dims = kind == ITEMS_SUBMIT ? it->dims : 0,
                                    .model = it->model};
        idx[k++] = i;
    }
    nv = k;
    if (kind == ITEMS_SUBMIT) {
        /* Texts come back only for items queued for the verifier's model
         * (with no verifier: any model, for replication): a legacy submit
         * names no model, and another model's vector cannot be checked
         * against ours. */
        donto_submit_result res = {
            .upserted = 0, .reject = rej, .text = texts, .text_model = c->verify ? c->verify_model : NULL};
        if (nv && donto_store_submit(s, who, si, nv, now, &res, &e)) {
            a = failure("submit", "store_error", &e);
            goto done;
        }
        size_t expired = 0;
        for (size_t j = 0; j < nv; j++) {
            if (rej[j] != DONTO_REJECT_NONE) q.items[idx[j]].reason = donto_proto_reject_code(rej[j]);
            /* A batch that outlived its lease: a stale lease_id, or (a legacy
             * worker sends none) an item of its that was leased again. */
            expired += rej[j] == DONTO_REJECT_LEASE_EXPIRED || (rej[j] == DONTO_REJECT_NOT_LEASED && si[j].lease_id == 0);
        }
        limits_settled(c->limits, r->token, who, res.upserted - res.repeated + expired, expired, now);
        if (checked) verify_sample(c, s, r, who, &q, idx, si, texts, nv);
        a = (answer){200, donto_proto_submit_response(res.upserted + ncanary, &q), NULL, 0};
        DLOG_DEBUG("coord: submit %s items=%zu upserted=%zu", who, q.n, res.upserted);
    } else if (kind == ITEMS_RELEASE) {
        size_t released = 0;
        if (nv && donto_store_release(s, who, si, nv, &released, &e)) {
            a = failure("release", "store_error", &e);
            goto done;
        }
        limits_settled(c->limits, r->token, NULL, released, 0, now);
        a = (answer){200, donto_proto_release_response(released + ncanary), NULL, 0};
    } else {
        size_t extended = 0;
        if (nv && donto_store_extend(s, who, si, nv, now, c->ttl_ms, &extended, &e)) {
            a = failure("extend", "store_error", &e);
            goto done;
        }
        limits_extended(c->limits, r->token, now, now + c->ttl_ms);
        a = (answer){200, donto_proto_extend_response(extended + ncanary, c->ttl_ms), NULL, 0};
    }
done:
    if (texts)
        for (size_t j = 0; j < nv; j++) free(texts[j]);
    free(texts);
    free(who);
    free(si);
    free(idx);
    free(rej);
    donto_items_req_free(&q);
    return a;
}

static answer do_report(donto_coord *c, donto_store *s, const request *r) {
    donto_report_req q;
    donto_err e = {0};
    if (donto_proto_parse_report(r->body, r->len, &q, &e)) return errorf(400, "bad_request", "%s", e.msg);
    int64_t now = c->now_ms(c->clock_ctx);
    int retry = 0;
    answer a;
    char *who = principal(r, q.worker_id);
    if (!who) {
        a = errorf(500, "internal", "out of memory");
    } else if (!limits_report_allow(c->limits, r->token, now, &retry)) {
        a = too_many(retry, "this token reports too often (%s); retry after the delay given", "reports");
    } else if (donto_store_report(s, who, q.kind, q.message, now, &e)) {
        a = failure("report", "store_error", &e);
    } else {
        a = (answer){200, donto_proto_ok_response(), NULL, 0};
        /* The message itself stays in the store: it is free text from a
         * worker and may hold newlines that would forge log lines. */
        DLOG_INFO("coord: report from %s (%s), %zu bytes", who, q.kind, strlen(q.message));
    }
    free(who);
    donto_report_req_free(&q);
    return a;
}

/* Rows of the contributor and report lists shown by /stats. */
#define STATS_LIST_MAX 20
/* The throughput series of /stats: one hour, per minute. */
#define STATS_SERIES_MINUTES 60
#define STATS_RATE_MINUTES 5

/* Per-target counts, plus whatever else the store offers (rate,
 * contributors, recent reports); an optional part that fails is logged and
 * left out rather than failing the whole answer. */
static answer do_stats(donto_coord *c, donto_store *s) {
    donto_target_stats st[DONTO_TARGET_N];
    memset(st, 0, sizeof st);
    donto_err e = {0};
    int64_t now = c->now_ms(c->clock_ctx);
    if (donto_store_stats(s, now, st, &e)) return failure("stats", "store_error", &e);
    donto_stats_extra x;
    memset(&x, 0, sizeof x);
    donto_contributor *con = NULL;
    donto_report *rep = NULL;
    size_t ncon = 0, nrep = 0;
    if (donto_store_embedded_since(s, now - 60000, &x.per_minute, &e) == 0) x.have_rate = 1;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: stats: items per minute: %s", e.msg);
    /* A contributor's rate: its vectors in the STATS_RATE_MINUTES whole
     * minutes before the current one plus the current one so far,
     * divided by exactly that span. */
    int64_t since = (now / 60000 - STATS_RATE_MINUTES) * 60000;
    if (donto_store_contributors(s, STATS_LIST_MAX, since, &con, &ncon, &e) == 0)
        x.have_contributors = 1, x.contributors = con, x.n_contributors = ncon,
        x.recent_minutes = (double)(now - since) / 60000.0;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: stats: contributors: %s", e.msg);
    int64_t series[STATS_SERIES_MINUTES];
    int64_t start = now / 60000 - (STATS_SERIES_MINUTES - 1);
    if (donto_store_series(s, start, STATS_SERIES_MINUTES, series, &e) == 0)
        x.have_series = 1, x.series = series, x.n_series = STATS_SERIES_MINUTES, x.series_start_min = start;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: stats: per-minute series: %s", e.msg);
    if (donto_store_reports_recent(s, STATS_LIST_MAX, &rep, &nrep, &e) == 0)
        x.have_reports = 1, x.reports = rep, x.n_reports = nrep;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: stats: reports: %s", e.msg);
    donto_token_info *tok = NULL;
    size_t ntok = 0;
    if (donto_store_token_list(s, &tok, &ntok, &e) == 0)
        x.have_tokens = 1, x.tokens = tok, x.n_tokens = ntok;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: stats: tokens: %s", e.msg);
    if (c->verify) {
        verify_stats vs;
        verify_pool_stats(c->verify, &vs);
        x.have_verify = 1;
        x.verify_queued = (int64_t)vs.queued, x.verify_done = (int64_t)vs.done;
        x.verify_passed = (int64_t)vs.passed, x.verify_failed = (int64_t)vs.failed;
        x.verify_dropped = (int64_t)vs.dropped;
        size_t cp = 0, co = 0;
        canary_counts(c->canaries, &cp, &co);
        x.canary_pool = (int64_t)cp, x.canary_out = (int64_t)co;
        x.canary_passed = (int64_t)atomic_load(&c->canary_passed);
        x.canary_failed = (int64_t)atomic_load(&c->canary_failed);
        /* The counts are the fleet's (docs/fleet.md), from the database;
         * the gauges (queued, canaries known and out) are this process's.
         * A database without the counters: this process's counts. */
        int64_t fc[FC_N];
        if (donto_store_counters_get(s, FLEET_COUNTERS, FC_N, fc, &e) == 0) {
            x.verify_passed = fc[FC_VERIFY_PASSED], x.verify_failed = fc[FC_VERIFY_FAILED];
            x.verify_done = x.verify_passed + x.verify_failed, x.verify_dropped = fc[FC_VERIFY_SKIPPED];
            x.canary_passed = fc[FC_CANARY_PASSED], x.canary_failed = fc[FC_CANARY_FAILED];
        } else if (e.code != DONTO_E_NOT_FOUND) {
            DLOG_WARN("coord: stats: fleet counters: %s (this coordinator's own shown)", e.msg);
        }
    }
    if (c->replicas) {
        replica_counts rc;
        replica_get_counts(c->replicas, &rc);
        x.have_replicas = 1;
        x.replicas_waiting = (int64_t)rc.waiting, x.replicas_out = (int64_t)rc.out;
        x.replicas_added = (int64_t)rc.added, x.replicas_refused = (int64_t)rc.refused;
        x.replicas_agreed = (int64_t)rc.agreed, x.replicas_disagreed = (int64_t)rc.disagreed;
        x.replicas_dropped = (int64_t)rc.dropped, x.replicas_stale = (int64_t)rc.stale;
    }
    answer a = {200, donto_proto_stats_response(st, &x), NULL, 0};
    donto_contributor_list_free(con, ncon);
    donto_report_list_free(rep, nrep);
    donto_token_list_free(tok, ntok);
    return a;
}

/* Prometheus text exposition (version 0.0.4) of the same figures as /stats,
 * plus this coordinator's answer counters. Label values are escaped as the
 * format requires (\\, \", \n): worker ids come from workers. */
#define METRICS_CONTRIBUTORS_MAX 1000

static answer do_metrics(donto_coord *c, donto_store *s) {
    donto_target_stats st[DONTO_TARGET_N];
    memset(st, 0, sizeof st);
    donto_err e = {0};
    int64_t now = c->now_ms(c->clock_ctx);
    if (donto_store_stats(s, now, st, &e)) return failure("metrics", "store_error", &e);
    int64_t per_min = 0;
    int have_rate = 0;
    donto_contributor *con = NULL;
    size_t ncon = 0;
    int have_con = 0;
    if (donto_store_embedded_since(s, now - 60000, &per_min, &e) == 0) have_rate = 1;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: metrics: items per minute: %s", e.msg);
    if (donto_store_contributors(s, METRICS_CONTRIBUTORS_MAX, 0, &con, &ncon, &e) == 0) have_con = 1;
    else if (e.code != DONTO_E_NOT_FOUND) DLOG_WARN("coord: metrics: contributors: %s", e.msg);
    unsigned long long hits[R_N + 1][N_STATUS];
    for (int r = 0; r <= R_N; r++)
        for (size_t k = 0; k < N_STATUS; k++) hits[r][k] = atomic_load_explicit(&c->hits[r][k], memory_order_relaxed);
    donto_token_info *tok = NULL;
    size_t ntok = 0;
    if (donto_store_token_list(s, &tok, &ntok, &e) && e.code != DONTO_E_NOT_FOUND)
        DLOG_WARN("coord: metrics: tokens: %s", e.msg);
    char *text = donto_metrics_text(st, have_rate, per_min, have_con, con, ncon);
    char *trust = donto_metrics_trust_text(tok, ntok);
    donto_token_list_free(tok, ntok);
    donto_buf out = {0};
    int ok = text && trust;
    if (ok) donto_buf_str(&out, text), donto_buf_str(&out, trust);
    free(text);
    free(trust);
    if (ok && c->verify) {
        verify_stats vs;
        verify_pool_stats(c->verify, &vs);
        donto_buf_printf(&out,
                         "# HELP donto_embed_verify_total Submitted vectors the coordinator re-embedded to check them, by "
                         "outcome (skipped: its queue was full).\n# TYPE donto_embed_verify_total counter\n"
                         "donto_embed_verify_total{outcome=\"passed\"} %llu\ndonto_embed_verify_total{outcome=\"failed\"} %llu\n"
                         "donto_embed_verify_total{outcome=\"skipped\"} %llu\n"
                         "# HELP donto_embed_verify_queued Checks waiting.\n# TYPE donto_embed_verify_queued gauge\n"
                         "donto_embed_verify_queued %llu\n",
                         (unsigned long long)vs.passed, (unsigned long long)vs.failed, (unsigned long long)vs.dropped,
                         (unsigned long long)vs.queued);
    }
    if (ok && c->replicas) {
        replica_counts rc;
        replica_get_counts(c->replicas, &rc);
        donto_buf_printf(&out,
                         "# HELP donto_embed_replicas_total Replicas (serve --replicate) since start, by outcome (agreed: "
                         "every vote agreed; disagreed: some vote failed; no_quorum: dropped; to_verifier: no other token "
                         "took it in time; refused: the set was full).\n# TYPE donto_embed_replicas_total counter\n"
                         "donto_embed_replicas_total{outcome=\"agreed\"} %llu\n"
                         "donto_embed_replicas_total{outcome=\"disagreed\"} %llu\n"
                         "donto_embed_replicas_total{outcome=\"no_quorum\"} %llu\n"
                         "donto_embed_replicas_total{outcome=\"to_verifier\"} %llu\n"
                         "donto_embed_replicas_total{outcome=\"refused\"} %llu\n"
                         "# HELP donto_embed_replicas Replicas now, waiting for a token or out to one.\n"
                         "# TYPE donto_embed_replicas gauge\n"
                         "donto_embed_replicas{state=\"waiting\"} %zu\ndonto_embed_replicas{state=\"out\"} %zu\n",
                         (unsigned long long)rc.agreed, (unsigned long long)rc.disagreed, (unsigned long long)rc.dropped,
                         (unsigned long long)rc.stale, (unsigned long long)rc.refused, rc.waiting, rc.out);
    }
    if (ok) {
        /* The sheaf models served by this process (sheaf_serve.c). */
        sheaf_srv_stats ss;
        sheaf_srv_stats_get(c->sheaf, &ss);
        donto_buf_printf(&out,
                         "# HELP donto_sheaf_requests_total Requests to POST /sheaf/infer and GET /sheaf/models "
                         "past the token gate.\n# TYPE donto_sheaf_requests_total counter\n"
                         "donto_sheaf_requests_total %llu\n"
                         "# HELP donto_sheaf_errors_total Of those, answered with an error.\n"
                         "# TYPE donto_sheaf_errors_total counter\ndonto_sheaf_errors_total %llu\n"
                         "# HELP donto_sheaf_infer_rows_total Rows answered (nodes or query pairs).\n"
                         "# TYPE donto_sheaf_infer_rows_total counter\ndonto_sheaf_infer_rows_total %llu\n"
                         "# HELP donto_sheaf_model_loads_total Checkpoints loaded (a task's first request, an "
                         "activation or a rollback).\n# TYPE donto_sheaf_model_loads_total counter\n"
                         "donto_sheaf_model_loads_total %llu\n",
                         ss.requests, ss.errors, ss.rows, ss.reloads);
    }
    answer a = {500, NULL, NULL, 0};
    if (ok) {
        /* The request counters: routes and statuses are ours. */
        donto_buf_str(&out, "# HELP donto_embed_http_responses_total Answers sent by this coordinator, by route "
                            "and status.\n# TYPE donto_embed_http_responses_total counter\n");
        for (int r = 0; r <= R_N; r++)
            for (size_t k = 0; k < N_STATUS; k++) {
                if (!hits[r][k]) continue;
                char code[16];
                if (k + 1 < N_STATUS) snprintf(code, sizeof code, "%u", k_statuses[k]);
                else snprintf(code, sizeof code, "other");
                donto_buf_printf(&out, "donto_embed_http_responses_total{route=\"%s\",code=\"%s\"} %llu\n",
                                 r < R_N ? k_routes[r].path + 1 : "none", code, hits[r][k]);
            }
        conn_guard_metrics(c->guard, &out);
        a = (answer){200, donto_buf_take(&out), "text/plain; version=0.0.4; charset=utf-8", 0};
    }
    donto_buf_free(&out);
    donto_contributor_list_free(con, ncon);
    return a;
}

/* GET /recall?q=TEXT[&k=N][&target=T]: the k (default 10, at most
 * RECALL_K_MAX) stored items nearest to TEXT. */
#define RECALL_K_MAX 100
static answer do_recall(donto_coord *c, donto_store *s, struct MHD_Connection *conn) {
    const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "q");
    const char *ks = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "k");
    const char *ts = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "target");
    if (!q || !*q) return errorf(400, "bad_request", "missing query parameter q");
    if (strlen(q) > 8192) return errorf(400, "bad_request", "q is longer than 8192 bytes");
    /* The query is echoed in the answer: bytes that are not UTF-8 are the
     * client's mistake (400), not a stored text's (500). */
    if (!donto_proto_utf8_valid(q))
        return errorf(400, "bad_request", "q is not valid UTF-8 (percent-encode the query's UTF-8 bytes)");
    long k = 10;
    if (ks) {
        char *end;
        errno = 0;
        k = strtol(ks, &end, 10);
        if (!*ks || *end || errno || k < 1) return errorf(400, "bad_request", "k must be a whole number >= 1");
        if (k > RECALL_K_MAX) k = RECALL_K_MAX;
    }
    int t = ts ? donto_target_parse(ts) : DONTO_TARGET_CLAIM;
    if (t < 0) return errorf(400, "bad_request", "unknown target '%.64s' (claim|predicate|entity|memory_chunk)", ts);
    if (!c->recall) return errorf(503, "no_model", "this coordinator has no model loaded to embed queries (serve --model DIR)");
    donto_recall_hit *hits = NULL;
    size_t n = 0;
    donto_recall_info info;
    donto_err e = {0};
    if (donto_recall_query(c->recall, s, (donto_target)t, q, (size_t)k, &hits, &n, &info, &e)) {
        /* Details (paths, SQL, dimensions) go to the log only. */
        return failure("recall", "recall_failed", &e);
    }
    char *json = donto_recall_json(q, (donto_target)t, c->recall_model ? c->recall_model : "", &info, hits, n);
    donto_recall_hits_free(hits, n);
    if (!json) return errorf(500, "internal", "cannot encode the answer (a stored text is not valid UTF-8)");
    return (answer){200, json, NULL, 0};
}

/* Unauthenticated: says whether the database answers and how far its
 * schema is migrated (not ok when this build's migrations are not all
 * recorded: every other route would fail), never why it does not answer. */
static answer do_health(donto_coord *c, donto_store *s) {
    donto_err e = {0};
    int up = donto_store_ping(s, &e) == 0;
    if (!up) {
        DLOG_WARN("coord: health: %s", e.msg);
        return (answer){503, donto_proto_health_response(0, c->version, 0, NULL, "database unreachable"), NULL, 0};
    }
    donto_schema_version v;
    if (donto_store_schema_version(s, NULL, &v, &e)) { /* a store without migrations (tests' fakes) */
        if (donto_err_code(&e) != DONTO_E_NOT_FOUND) DLOG_WARN("coord: health: schema: %s", e.msg);
        return (answer){200, donto_proto_health_response(1, c->version, 1, NULL, NULL), NULL, 0};
    }
    if (v.missing) {
        char msg[160];
        snprintf(msg, sizeof msg, "database not migrated (store schema %d of %d): run donto-embed migrate", v.current,
                 v.expected);
        return (answer){503, donto_proto_health_response(0, c->version, 1, &v, msg), NULL, 0};
    }
    return (answer){200, donto_proto_health_response(1, c->version, 1, &v, NULL), NULL, 0};
}

/* The token gate: 401 for unknown or revoked tokens; 403 for a token on a
 * route its role does not open, or a suspended token on a worker route.
 * Runs on the request's one handle; fills r's token, role and trust. */
static int gate(donto_store *s, request *r, answer *a) {
    int need = k_routes[r->route].token;
    if (need == NEED_NONE) return 0;
    int found = 0;
    donto_err e = {0};
    if (donto_store_token_check(s, r->token_hash, &found, &r->role, r->token, sizeof r->token, &r->trust, &e)) {
        *a = failure("token check", "store_error", &e);
        return -1;
    }
    if (!found) {
        *a = errorf(401, "unauthorized", "unknown or revoked token");
        return -1;
    }
    if (r->role == DONTO_ROLE_ANALYST && (need == NEED_WORKER || need == NEED_READER)) {
        *a = errorf(403, "forbidden", "analyst tokens query the sheaf models only (/sheaf/ routes)");
        return -1;
    }
    if (need == NEED_ADMIN && r->role != DONTO_ROLE_ADMIN) {
        *a = errorf(403, "forbidden", "this route needs an admin token");
        return -1;
    }
    if (need == NEED_ANALYST && r->role != DONTO_ROLE_ADMIN && r->role != DONTO_ROLE_ANALYST) {
        *a = errorf(403, "forbidden", "the sheaf routes need an analyst or admin token");
        return -1;
    }
    if (need == NEED_READER && r->role != DONTO_ROLE_ADMIN && r->role != DONTO_ROLE_READER) {
        *a = errorf(403, "forbidden", "this route needs a reader or admin token (contributor tokens cannot "
                                      "read the substrate)");
        return -1;
    }
    if (need == NEED_WORKER) {
        if (strchr(r->token, DONTO_WORKER_SEP)) {
            /* Made before names were checked: its workers would be ambiguous. */
            *a = errorf(403, "forbidden", "this token's name holds a '/'; ask the operator for a new token");
            return -1;
        }
        if (r->trust.suspended) {
            *a = errorf(403, "suspended", "this token is suspended: %s; ask the operator to review it",
                        r->trust.reason[0] ? r->trust.reason : "no reason recorded");
            return -1;
        }
    }
    return 0;
}

/* Step 3: the whole request is in. */
static enum MHD_Result on_complete(donto_coord *c, struct MHD_Connection *conn, request *r) {
    if (r->too_big)
        return queue(c, r->route, conn, errorf(413, "payload_too_large", "request body over the limit of %zu bytes", c->max_body),
                     NULL);
    /* The admin page is a constant: no store, no token (it asks for one). */
    if (r->route == R_ADMIN)
        return queue(c, r->route, conn, (answer){200, strdup(donto_admin_page), "text/html; charset=utf-8", 0}, NULL);
    /* Health answers fast even when the pool is saturated: a load balancer
     * probing it must not queue behind the work. */
    double wait = r->route == R_HEALTH && c->pool_wait_s > 2 ? 2 : c->pool_wait_s;
    donto_store *s = pool_take(&c->pool, wait);
    if (!s) {
        if (r->route == R_HEALTH)
            return queue(c, r->route, conn,
                         (answer){503, donto_proto_health_response(0, c->version, 0, NULL, "no store handle free"), NULL, 0},
                         NULL);
        return queue(c, r->route, conn, errorf(503, "busy", "all %d store handles are in use; retry later", c->pool.n), NULL);
    }
    answer a = {500, NULL, NULL, 0};
    if (gate(s, r, &a) == 0) {
        switch (r->route) {
        case R_LEASE: a = do_lease(c, s, r); break;
        case R_SUBMIT: a = do_items(c, s, r, ITEMS_SUBMIT); break;
        case R_RELEASE: a = do_items(c, s, r, ITEMS_RELEASE); break;
        case R_EXTEND: a = do_items(c, s, r, ITEMS_EXTEND); break;
        case R_REPORT: a = do_report(c, s, r); break;
        case R_STATS: a = do_stats(c, s); break;
        case R_METRICS: a = do_metrics(c, s); break;
        case R_HEALTH: a = do_health(c, s); break;
        case R_RECALL: a = do_recall(c, s, conn); break;
        case R_SHEAF_INFER:
        case R_SHEAF_MODELS: {
            sheaf_answer sa = r->route == R_SHEAF_MODELS
                                  ? sheaf_srv_models(c->sheaf, s)
                                  : sheaf_srv_infer(c->sheaf, s, MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "task"),
                                                    r->body, r->len);
            a = (answer){sa.status, sa.json, NULL, 0};
            break;
        }
        default: a = errorf(404, "not_found", "no such route"); break;
        }
    }
    pool_give(&c->pool, s);
    return queue(c, r->route, conn, a, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    donto_coord *c = cls;
    request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *con_cls = r;
        inflight_add(c, 1);
        conn_guard_headers_done(c->guard, conn);
        return on_headers(c, conn, url, method, r);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return r->answered ? MHD_YES : absorb(c, r, upload, n);
    }
    if (r->answered) return MHD_YES;
    r->answered = 1;
    conn_guard_handling(c->guard, conn);
    return on_complete(c, conn, r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    conn_guard_request_done(((donto_coord *)cls)->guard, conn);
    request *r = *con_cls;
    if (!r) return;
    free(r->body);
    free(r);
    *con_cls = NULL;
    inflight_add(cls, -1);
}

/* libmicrohttpd's messages. Under a flood it writes one per connection cut
 * or refused: at most MHD_LOG_BURST lines per MHD_LOG_WINDOW_S seconds go
 * to the log, and the next line that gets through says how many were
 * left out (the connection guard's counters in /metrics keep the tally). */
#define MHD_LOG_BURST 20
#define MHD_LOG_WINDOW_S 10.0
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static double window_start;
    static int in_window;
    static unsigned long suppressed;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    pthread_mutex_lock(&mu);
    double now = mono_s();
    if (now - window_start >= MHD_LOG_WINDOW_S) window_start = now, in_window = 0;
    int emit = in_window < MHD_LOG_BURST;
    unsigned long left_out = 0;
    if (emit) {
        in_window++;
        left_out = suppressed;
        suppressed = 0;
    } else {
        suppressed++;
    }
    pthread_mutex_unlock(&mu);
    if (!emit) return;
    if (left_out) DLOG_WARN("http: %lu more messages like the ones above were left out of the log", left_out);
    DLOG_WARN("http: %s", msg);
}

/* "HOST:PORT" / "[V6]:PORT" -> socket address. */
static int parse_listen(const char *spec, struct sockaddr_storage *ss, int *v6, donto_err *err) {
    if (!spec || !*spec) return donto_seterr(err, "listen address is empty (want HOST:PORT)");
    char host[256];
    const char *port;
    if (spec[0] == '[') {
        const char *e = strchr(spec, ']');
        if (!e || e[1] != ':' || (size_t)(e - spec - 1) >= sizeof host)
            return donto_seterr(err, "listen address '%s': want [IPV6]:PORT", spec);
        memcpy(host, spec + 1, (size_t)(e - spec - 1));
        host[e - spec - 1] = 0;
        port = e + 2;
    } else {
        const char *colon = strrchr(spec, ':');
        if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host)
            return donto_seterr(err, "listen address '%s': want HOST:PORT", spec);
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = 0;
        port = colon + 1;
    }
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (!*port || *end || errno || p < 0 || p > 65535)
        return donto_seterr(err, "listen address '%s': bad port", spec);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai || !res) return donto_seterr(err, "listen address '%s': %s", spec, gai ? gai_strerror(gai) : "no address");
    memset(ss, 0, sizeof *ss);
    memcpy(ss, res->ai_addr, res->ai_addrlen <= sizeof *ss ? res->ai_addrlen : sizeof *ss);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

static char *normalise_base(const char *b) {
    if (!b) b = DONTO_COORD_DEFAULT_BASE;
    while (*b == '/') b++;
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == '/') n--;
    char *o = malloc(n + 2);
    if (!o) return NULL;
    if (n == 0) {
        o[0] = 0;
    } else {
        o[0] = '/';
        memcpy(o + 1, b, n);
        o[n + 1] = 0;
    }
    return o;
}

/* Canaries: references kept, canaries out at once, and how often a trusted
 * token's lease answer carries one (an untrusted token's always does). */
#define CANARY_POOL 1024
#define CANARY_OUTSTANDING 16384
#define CANARY_RATE_DEFAULT 0.1

/* Limits, the verifier and the sweeper (after the pool: they use it). */
static int trust_start(donto_coord *c, const donto_coord_config *cfg, donto_err *err) {
    coord_limits_config lc = {
        .lease_per_s = cfg->lease_per_s > 0 ? cfg->lease_per_s : cfg->lease_per_s < 0 ? 0 : LIMITS_LEASE_PER_S,
        .lease_burst = LIMITS_LEASE_BURST,
        .report_per_min = cfg->report_per_min > 0 ? cfg->report_per_min
                          : cfg->report_per_min < 0 ? 0 : LIMITS_REPORT_PER_MIN,
        .report_burst = LIMITS_REPORT_BURST,
        .max_outstanding = cfg->max_outstanding > 0 ? cfg->max_outstanding
                           : cfg->max_outstanding < 0 ? 0 : LIMITS_MAX_OUTSTANDING,
    };
    if (lc.lease_per_s > 0 && lc.lease_burst < lc.lease_per_s) lc.lease_burst = lc.lease_per_s;
    if (!(c->limits = limits_new(&lc))) return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    c->max_outstanding = lc.max_outstanding;
    trust_params_default(&c->trust);
    if (cfg->trust_after > 0) c->trust.trust_after = cfg->trust_after;
    if (cfg->verify_floor > 0) c->trust.p_floor = cfg->verify_floor;
    c->rng = cfg->verify_seed ? cfg->verify_seed : trust_rng_seed();
    if (pthread_mutex_init(&c->rng_mu, NULL) || pthread_mutex_init(&c->sweep_mu, NULL) ||
        cond_init_mono(&c->sweep_cv))
        return donto_seterr(err, "cannot create locks");
    c->min_cosine = cfg->verify_min_cosine > 0 ? (float)cfg->verify_min_cosine : VERIFY_MIN_COSINE_DEFAULT;
    if (cfg->replicate >= 2) {
        int quorum = cfg->replicate > REPLICA_QUORUM_MAX ? REPLICA_QUORUM_MAX : cfg->replicate;
        size_t cap = cfg->replica_cap > 0 ? (size_t)cfg->replica_cap : REPLICA_CAP_DEFAULT;
        if (!(c->replicas = replica_new(cap, quorum, 2 * quorum - 1, c->min_cosine)))
            return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
        DLOG_INFO("coord: replication: an untrusted token's vectors are accepted when %d tokens agree (cosine >= "
                  "%.4f)%s",
                  quorum, (double)c->min_cosine,
                  cfg->verify_model_dir ? "" : "; with no verifier, a trusted token's sampled vectors too");
    }
    if (!cfg->verify_model_dir) {
        if (!c->replicas)
            DLOG_WARN("coord: submitted vectors are not verified (no --model to check them with, no --replicate): "
                      "see docs/trust.md");
        else if (!(c->sweeper_on = pthread_create(&c->sweeper, NULL, sweeper_main, c) == 0))
            return donto_seterr(err, "cannot start the sweeper thread");
        return 0;
    }
    const char *name = cfg->verify_model_name ? cfg->verify_model_name : cfg->recall_model;
    c->verify_model = name ? strdup(name) : NULL;
    verify_config vc;
    verify_config_default(&vc);
    vc.model_dir = cfg->verify_model_dir;
    if (cfg->verify_threads > 0) vc.threads = cfg->verify_threads;
    if (cfg->verify_queue > 0) vc.queue_cap = cfg->verify_queue;
    vc.nice = cfg->verify_nice;
    vc.isa = cfg->verify_isa;
    vc.min_cosine = c->min_cosine;
    vc.done = on_verified;
    vc.ctx = c;
    if (verify_pool_open(&vc, &c->verify, err)) return donto_preerr(err, "verifier");
    c->canary_rate = cfg->canary_rate > 0 ? cfg->canary_rate : cfg->canary_rate < 0 ? 0 : CANARY_RATE_DEFAULT;
    if (cfg->canary_rate >= 0 && !(c->canaries = canary_new(CANARY_POOL, CANARY_OUTSTANDING)))
        return donto_seterrc(err, DONTO_E_NOMEM, "out of memory");
    c->sweeper_on = pthread_create(&c->sweeper, NULL, sweeper_main, c) == 0;
    if (!c->sweeper_on) return donto_seterr(err, "cannot start the sweeper thread");
    DLOG_INFO("coord: verifying submitted vectors with %s (min cosine %.4f; trusted after %lld checks passed in a "
              "row, then sampled down to %.3g)",
              cfg->verify_model_dir, (double)c->min_cosine, (long long)c->trust.trust_after,
              c->trust.p_floor);
    return 0;
}

static void trust_stop(donto_coord *c) {
    if (c->sweeper_on) {
        pthread_mutex_lock(&c->sweep_mu);
        c->sweeper_stop = 1;
        pthread_cond_signal(&c->sweep_cv);
        pthread_mutex_unlock(&c->sweep_mu);
        pthread_join(c->sweeper, NULL);
        c->sweeper_on = 0;
    }
    verify_pool_close(c->verify); /* finishes the batch in hand, which may use the pool */
    c->verify = NULL;
    canary_free(c->canaries);
    c->canaries = NULL;
    replica_free(c->replicas);
    c->replicas = NULL;
    limits_free(c->limits);
    c->limits = NULL;
    free(c->verify_model);
    c->verify_model = NULL;
}

int donto_coord_start(const donto_coord_config *cfg, donto_coord **out, donto_err *err) {
    *out = NULL;
    if (!cfg->open_store && !cfg->db_url) return donto_seterr(err, "no database given");
    int threads = cfg->threads > 0 ? cfg->threads : donto_ncpu();
    int pool = cfg->pool > 0 ? cfg->pool : threads;
    if (threads > 1024 || pool > 1024) return donto_seterr(err, "threads and pool must be at most 1024");
    struct sockaddr_storage ss;
    int v6 = 0;
    if (parse_listen(cfg->listen, &ss, &v6, err)) return -1;

    donto_coord *c = calloc(1, sizeof *c);
    if (!c) return donto_seterr(err, "out of memory");
    c->base = normalise_base(cfg->base);
    if (!c->base) {
        free(c);
        return donto_seterr(err, "out of memory");
    }
    c->base_len = strlen(c->base);
    c->max_body = cfg->max_body ? cfg->max_body : DONTO_COORD_DEFAULT_MAX_BODY;
    c->ttl_ms = cfg->lease_ttl_ms > 0 ? cfg->lease_ttl_ms : DONTO_COORD_DEFAULT_LEASE_TTL_MS;
    c->pool_wait_s = cfg->pool_wait_s > 0 ? cfg->pool_wait_s : 10.0;
    c->version = cfg->version ? cfg->version : DONTO_VERSION;
    c->now_ms = cfg->now_ms ? cfg->now_ms : wall_ms;
    c->clock_ctx = cfg->clock_ctx;
    c->recall = cfg->recall;
    c->recall_model = cfg->recall_model ? strdup(cfg->recall_model) : NULL;
    c->sheaf = sheaf_srv_new(&(sheaf_srv_limits){cfg->sheaf_max_nodes, cfg->sheaf_max_pairs});
    if (!c->sheaf || pthread_mutex_init(&c->mu, NULL) || cond_init_mono(&c->idle_cv) || pthread_mutex_init(&c->pool.mu, NULL) ||
        cond_init_mono(&c->pool.cv)) {
        /* Not worth unwinding a half-initialised set: this fails only when
         * the system is out of resources, and then the process ends. */
        free(c->recall_model);
        sheaf_srv_free(c->sheaf);
        free(c->base);
        free(c);
        return donto_seterr(err, "cannot create locks");
    }
    if (pool_open(&c->pool, pool, cfg, err)) goto fail;
    for (int i = 0; i < c->pool.n; i++) donto_store_set_verified_only(c->pool.all[i], cfg->verified_only);
    if (trust_start(c, cfg, err)) goto fail;
    if (conn_guard_start(cfg, threads, pool, &c->guard, err)) goto fail;

    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    unsigned timeout = cfg->conn_timeout_s ? cfg->conn_timeout_s : 60;
    /* HTTPS options go in an option array so plain HTTP passes none. */
    struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}};
    if (!cfg->tls_cert_pem != !cfg->tls_key_pem) {
        donto_seterr(err, "TLS needs both a certificate and a key");
        goto fail;
    }
    if (cfg->tls_cert_pem) {
        if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
            donto_seterr(err, "this libmicrohttpd was built without TLS support");
            goto fail;
        }
        c->tls_cert = strdup(cfg->tls_cert_pem);
        c->tls_key = strdup(cfg->tls_key_pem);
        if (!c->tls_cert || !c->tls_key) {
            donto_seterr(err, "out of memory");
            goto fail;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, c->tls_cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, c->tls_key};
    }
    /* One thread: MHD's own polling thread serves everything (it warns
     * about a pool of one). More: a pool of polling threads. */
    c->d = MHD_start_daemon(flags, 0, &conn_guard_accept, c->guard, &on_request, c,
                            MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, c, /* first: it applies from here on */
                            MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout,
                            MHD_OPTION_CONNECTION_LIMIT, conn_guard_mhd_limit(c->guard),
                            MHD_OPTION_NOTIFY_CONNECTION, &conn_guard_notify, c->guard,
                            MHD_OPTION_NOTIFY_COMPLETED, &on_completed, c,
                            MHD_OPTION_ARRAY, tls,
                            threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (unsigned)threads,
                            MHD_OPTION_END);
    if (!c->d) {
        if (c->tls_cert)
            donto_seterr(err, "cannot listen on %s (address in use or not local, or the TLS certificate/key "
                              "is not valid PEM or they do not match: see the log)", cfg->listen);
        else
            donto_seterr(err, "cannot listen on %s (address in use or not local?)", cfg->listen);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(c->d, MHD_DAEMON_INFO_BIND_PORT);
    c->port = info ? (int)info->port : 0;
    DLOG_INFO("coord: serving %s/{lease,submit,release,extend,report,health,stats,metrics,admin,recall} on %s%s (port %d), %d threads, %d store handles",
              c->base, c->tls_cert ? "https://" : "", cfg->listen, c->port, threads, pool);
    *out = c;
    return 0;
fail:
    trust_stop(c);
    conn_guard_stop(c->guard);
    pool_close(&c->pool);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle_cv);
    pthread_mutex_destroy(&c->pool.mu);
    pthread_cond_destroy(&c->pool.cv);
    free(c->tls_cert);
    free(c->tls_key);
    free(c->recall_model);
    sheaf_srv_free(c->sheaf);
    free(c->base);
    free(c);
    return -1;
}

int donto_coord_port(const donto_coord *c) { return c ? c->port : 0; }

void donto_coord_conn_stats_get(const donto_coord *c, donto_coord_conn_stats *out) {
    conn_guard_stats(c ? c->guard : NULL, out);
}

void donto_coord_stop(donto_coord *c, double drain_s) {
    if (!c) return;
    atomic_store(&c->stopping, 1);
    /* Stop accepting first, so that the drain below can end: the guard's
     * accept policy refuses every new connection from here on (not
     * MHD_quiesce_daemon: see conn_guard_close). */
    conn_guard_close(c->guard);
    struct timespec dl = deadline_after(drain_s);
    pthread_mutex_lock(&c->mu);
    while (c->inflight > 0)
        if (pthread_cond_timedwait(&c->idle_cv, &c->mu, &dl) == ETIMEDOUT) break;
    int left = c->inflight;
    pthread_mutex_unlock(&c->mu);
    if (left) DLOG_WARN("coord: stopping with %d request(s) still in flight after %.0f s", left, drain_s);
    /* Closes idle keep-alive connections and joins MHD's threads; after it
     * no handler runs, so the pool can go. */
    MHD_stop_daemon(c->d);
    trust_stop(c); /* the verifier and sweeper use the pool: before it goes */
    conn_guard_stop(c->guard); /* after MHD_stop_daemon: every connection is closed */
    pool_close(&c->pool);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle_cv);
    pthread_mutex_destroy(&c->pool.mu);
    pthread_cond_destroy(&c->pool.cv);
    DLOG_INFO("coord: stopped");
    free(c->tls_cert);
    free(c->tls_key);
    free(c->recall_model);
    sheaf_srv_free(c->sheaf);
    free(c->base);
    free(c);
}
