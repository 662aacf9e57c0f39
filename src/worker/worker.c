/* The embedding worker: lease thread, engine (the caller's thread), submit
 * thread, heartbeat thread; see include/donto/worker.h. Request bodies and
 * answers go through the wire module's client side (donto/wire.h); this
 * file moves bytes.
 *
 * Slow batches (issue 15). A batch that takes longer to embed than its
 * lease runs would be leased to another worker and rejected
 * `lease_expired` on every submit, round after round. So:
 *   - every batch the worker holds (leased ahead in the slot, in the
 *     engine, waiting for or in a submit) is registered in the shared state;
 *     the heartbeat thread POSTs /extend for a batch a third of its lease
 *     TTL (`lease_ttl_ms` of the lease answer) after it was leased or last
 *     extended, on its own connection, holding the lock only to build the
 *     body: the engine never waits for it. A failed extend is logged and
 *     tried again shortly; a 404 (a coordinator without /extend) switches
 *     heartbeats off, and so does a lease answer without lease_ttl_ms;
 *   - items that still come back `lease_expired` (extends failed, or a
 *     coordinator with lease ids but without /extend) halve the lease size
 *     (down to 1); batches submitted in time double it back up to -n;
 *   - 429 waits Retry-After; 401 and 403 stop the worker (a suspended
 *     token: with the coordinator's reason). */
#define _GNU_SOURCE
#include "donto/worker.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "donto/models.h"
#include "donto/store.h"
#include "donto/wire.h"

static atomic_int g_stop; /* lock-free: set from a signal handler */

void donto_worker_stop(void) { atomic_store(&g_stop, 1); }

void donto_worker_default_config(donto_worker_config *c) {
    memset(c, 0, sizeof *c);
    c->model_name = DONTO_DEFAULT_MODEL;
    c->n = 256;
    c->target = -1;
    c->idle_sleep_s = 5;
    c->stop_deadline_s = 30;
    c->connect_timeout_s = 10;
    c->request_timeout_s = 120;
    c->max_backoff_s = 60;
    c->start_retry_s = 60;
}

/* ---- batches ------------------------------------------------------------- */

typedef donto_lease_item witem; /* target, item_id, text, model, lease_id */

typedef struct wbatch {
    witem *it;
    size_t n;
    float *vec; /* n * dims after the engine */
    struct wbatch *next;
    uint64_t seq;     /* which batch (heartbeats name batches by it) */
    double renewed;   /* donto_now() when leased or last extended */
    int64_t ttl_ms;   /* its lease's TTL (0: unknown, never extended) */
    unsigned gen;     /* lease-size generation it was leased under */
} wbatch;

static void batch_free(wbatch *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n; i++) donto_lease_item_clear(&b->it[i]);
    free(b->it);
    free(b->vec);
    free(b);
}

/* ---- shared state -------------------------------------------------------- */

#define SUBMIT_QUEUE_MAX 4

typedef struct {
    const donto_worker_config *c;
    donto_encoder *enc;
    int dims;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* any change below */
    wbatch *slot;           /* leased, waiting for the engine */
    wbatch *engine_b;       /* in the engine (until queued for submit) */
    wbatch *sq_head, *sq_tail;
    size_t sq_len;
    wbatch *submitting;     /* in the submit thread */
    int lease_done, engine_done, fatal, hb_done;
    int reached;            /* the coordinator has answered at least once */
    double started;         /* donto_now() at start */
    char fatal_msg[1024];
    uint64_t seq;
    int lease_n;            /* items per lease now (halved after lease_expired) */
    unsigned gen;           /* bumped at each change of lease_n */
    int no_extend;          /* the coordinator has no /extend: no heartbeats */
    int64_t extends, extended;
    double stop_deadline;   /* set when a stop is first seen */
    int64_t leased, embedded, submitted, rejected, released, errors;
    int64_t minute_base;
    double minute_start;
    double last_report;
    int legacy_numbers;     /* server refused base64: send JSON numbers */
    unsigned rnd;
} wstate;

static int stopping(wstate *w) { return atomic_load(&g_stop) || w->fatal; }

static void msleep(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Sleep s seconds in slices; returns early when stopping (if interruptible). */
static void nap(wstate *w, double s, int interruptible) {
    double end = donto_now() + s;
    while (donto_now() < end) {
        if (interruptible && stopping(w)) return;
        double left = end - donto_now();
        msleep(left < 0.05 ? left : 0.05);
    }
}

/* Exponential backoff with full jitter: attempt 0 -> up to 0.5 s ... cap. */
static double backoff_s(wstate *w, int attempt) {
    double cap = 0.25 * (double)(1u << (attempt < 10 ? attempt : 10));
    if (cap > w->c->max_backoff_s) cap = w->c->max_backoff_s;
    pthread_mutex_lock(&w->mu);
    w->rnd = w->rnd * 1103515245u + 12345u;
    unsigned r = (w->rnd >> 8) & 0xffff;
    pthread_mutex_unlock(&w->mu);
    return cap * (0.5 + 0.5 * (double)r / 65536.0);
}

static void cv_wait(wstate *w, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* ---- HTTP ---------------------------------------------------------------- */

typedef struct {
    CURL *c;
    struct curl_slist *hdr;
    char *buf;
    size_t len;
    double timeout_s;  /* per request; 0: the configured one */
    double retry_after; /* the last answer's Retry-After in seconds; 0: none */
    CURLcode crc;      /* the last request's transport result */
    char errbuf[CURL_ERROR_SIZE]; /* curl's words for it ("" when none) */
} whttp;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    whttp *h = u;
    size_t n = sz * nm;
    if (h->len + n > (64u << 20)) return 0; /* an answer this big is not ours */
    char *q = realloc(h->buf, h->len + n + 1);
    if (!q) return 0;
    memcpy(q + h->len, d, n);
    h->buf = q;
    h->len += n;
    h->buf[h->len] = 0;
    return n;
}

static int http_init(wstate *w, whttp *h) {
    memset(h, 0, sizeof *h);
    h->c = curl_easy_init();
    if (!h->c) return -1;
    char *auth = NULL;
    if (asprintf(&auth, "Authorization: Bearer %s", w->c->token) < 0) return -1;
    h->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    h->hdr = curl_slist_append(h->hdr, auth);
    free(auth);
    return h->hdr ? 0 : -1;
}

static void http_free(whttp *h) {
    if (h->c) curl_easy_cleanup(h->c);
    curl_slist_free_all(h->hdr);
    free(h->buf);
}

/* POST body to base+route; HTTP status, 0 on a transport failure. The
 * answer is in h->buf (NUL-terminated, may be NULL). */
static long http_post(wstate *w, whttp *h, const char *route, const char *body) {
    char url[2048];
    snprintf(url, sizeof url, "%s%s", w->c->url, route);
    free(h->buf);
    h->buf = NULL;
    h->len = 0;
    h->retry_after = 0;
    CURL *c = h->c;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->hdr);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(w->c->connect_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)((h->timeout_s > 0 ? h->timeout_s : w->c->request_timeout_s) * 1000));
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    if (w->c->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, w->c->ca_file);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    h->errbuf[0] = 0;
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    CURLcode rc = curl_easy_perform(c);
    h->crc = rc;
    if (rc != CURLE_OK) {
        if (!h->errbuf[0]) snprintf(h->errbuf, sizeof h->errbuf, "%s", curl_easy_strerror(rc));
        return 0;
    }
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    if (st > 0) {
        pthread_mutex_lock(&w->mu);
        w->reached = 1;
        pthread_mutex_unlock(&w->mu);
    }
    curl_off_t ra = 0;
    if (curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
        h->retry_after = ra > 3600 ? 3600.0 : (double)ra; /* seconds (an HTTP date: curl converts it) */
    return st;
}

/* What went wrong with the last request, in words: curl's (transport
 * failure, st 0) or the HTTP status with the coordinator's error code and
 * message. */
static void describe(const whttp *h, long st, char *out, size_t cap) {
    if (!st) {
        const char *what = curl_easy_strerror(h->crc);
        if (!h->errbuf[0] || strstr(h->errbuf, what))
            snprintf(out, cap, "%s", h->errbuf[0] ? h->errbuf : what);
        else
            snprintf(out, cap, "%s (%s)", h->errbuf, what);
        return;
    }
    char code[64] = "", msg[512] = "";
    if (h->buf) donto_proto_parse_error_response(h->buf, h->len, code, sizeof code, msg, sizeof msg);
    snprintf(out, cap, "HTTP %ld%s%s%s%s", st, code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
}

/* Transport failures no retry will cure: the URL or the TLS setup is wrong. */
static int permanent(CURLcode rc) {
    switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL: case CURLE_URL_MALFORMAT: case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM: case CURLE_SSL_CONNECT_ERROR: case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_CIPHER: case CURLE_SSL_ISSUER_ERROR: case CURLE_SSL_CRL_BADFILE: case CURLE_LOGIN_DENIED:
        return 1;
    default:
        return 0;
    }
}

/* Stop the worker with msg (exit 1). */
static void fatal(wstate *w, const char *msg) {
    pthread_mutex_lock(&w->mu);
    if (!w->fatal) {
        w->fatal = 1;
        snprintf(w->fatal_msg, sizeof w->fatal_msg, "%.1000s", msg);
        DLOG_ERROR("worker: %s; stopping", w->fatal_msg);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* A transport failure before the coordinator ever answered: a setup error
 * (wrong host, untrusted certificate) stops the worker at once, anything
 * else (refused, timed out) once start_retry_s have passed. 1: stopped. */
static int setup_failure(wstate *w, const whttp *h, const char *route) {
    pthread_mutex_lock(&w->mu);
    int reached = w->reached;
    pthread_mutex_unlock(&w->mu);
    if (reached) return 0;
    char why[CURL_ERROR_SIZE + 128], msg[sizeof why + 2200];
    describe(h, 0, why, sizeof why);
    double waited = donto_now() - w->started, limit = w->c->start_retry_s;
    if (permanent(h->crc)) {
        snprintf(msg, sizeof msg, "cannot reach the coordinator at %s%s: %s%s", w->c->url, route, why,
                 h->crc == CURLE_PEER_FAILED_VERIFICATION || h->crc == CURLE_SSL_CACERT_BADFILE
                     ? " (a private CA: --cacert FILE)"
                     : "");
    } else if (limit > 0 && waited >= limit) {
        snprintf(msg, sizeof msg, "no coordinator answered at %s%s for %.0f s: %s (--start-retry)", w->c->url, route,
                 waited, why);
    } else {
        return 0;
    }
    fatal(w, msg);
    return 1;
}

/* 401 or 403: the coordinator refuses this token for good (revoked,
 * unknown, a role without this route, or suspended after a failed
 * verification: docs/trust.md). Stop the worker with the coordinator's
 * reason. */
static void refused(wstate *w, const whttp *h, long st, const char *route) {
    char code[64], msg[768];
    donto_proto_parse_error_response(h->buf, h->len, code, sizeof code, msg, sizeof msg);
    pthread_mutex_lock(&w->mu);
    if (!w->fatal) {
        w->fatal = 1;
        if (st == 403 && !strcmp(code, "suspended"))
            snprintf(w->fatal_msg, sizeof w->fatal_msg,
                     "the coordinator suspended this token (HTTP 403 on %s): %s", route, msg[0] ? msg : "no reason given");
        else
            snprintf(w->fatal_msg, sizeof w->fatal_msg, "the coordinator refused the token (HTTP %ld%s%s on %s)%s%s", st,
                     code[0] ? " " : "", code, route, msg[0] ? ": " : "", msg);
        DLOG_ERROR("worker: %s; stopping", w->fatal_msg);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* At most one report per minute (the rest are only logged). */
static void report(wstate *w, whttp *h, const char *kind, const char *msg) {
    pthread_mutex_lock(&w->mu);
    double now = donto_now();
    int send = w->last_report == 0 || now - w->last_report >= 60;
    if (send) w->last_report = now;
    pthread_mutex_unlock(&w->mu);
    if (!send) return;
    char *body = NULL;
    donto_err e = {0};
    if (donto_proto_build_report(w->c->worker_id, kind, msg, &body, &e)) {
        DLOG_WARN("worker: report (%s) not sent: %s", kind, e.msg);
        return;
    }
    long st = http_post(w, h, "/report", body);
    if (st != 200) DLOG_WARN("worker: report (%s) answered %ld", kind, st);
    free(body);
}

static void count_error(wstate *w) {
    pthread_mutex_lock(&w->mu);
    w->errors++;
    pthread_mutex_unlock(&w->mu);
}

/* Give items back (one attempt, a short retry when stopping is over budget). */
static void release_items(wstate *w, whttp *h, const witem *it, size_t n) {
    if (!n) return;
    donto_client_item *ci = calloc(n, sizeof *ci);
    char *body = NULL;
    donto_err e = {0};
    for (size_t i = 0; ci && i < n; i++)
        ci[i] = (donto_client_item){it[i].target, it[i].item_id, it[i].lease_id, NULL, NULL};
    int built = ci ? donto_proto_build_release(w->c->worker_id, ci, n, &body, &e) : donto_seterr(&e, "out of memory");
    free(ci);
    if (built) {
        DLOG_WARN("worker: release of %zu items not sent (%s); they come back at lease expiry", n, e.msg);
        return;
    }
    long st = 0;
    for (int attempt = 0; attempt < 3 && st != 200; attempt++) {
        if (attempt) msleep(0.3);
        st = http_post(w, h, "/release", body);
    }
    free(body);
    int64_t released = 0;
    if (st == 200 && donto_proto_parse_release_response(h->buf, h->len, &released, &e) == 0) {
        pthread_mutex_lock(&w->mu);
        w->released += released;
        pthread_mutex_unlock(&w->mu);
        DLOG_INFO("worker: released %lld of %zu items", (long long)released, n);
    } else {
        DLOG_WARN("worker: release of %zu items failed (status %ld%s%s); they come back at lease expiry", n, st,
                  st == 200 ? ": " : "", st == 200 ? e.msg : "");
    }
}

/* ---- lease thread -------------------------------------------------------- */

/* Parse a lease answer (donto_proto_parse_lease_response); NULL and msg when
 * it is not one, or when out of memory. */
static wbatch *parse_lease(const whttp *h, char *msg, size_t cap) {
    donto_lease_resp r;
    donto_err e = {0};
    if (donto_proto_parse_lease_response(h->buf, h->len, &r, &e)) {
        snprintf(msg, cap, "%s", e.msg);
        return NULL;
    }
    wbatch *b = calloc(1, sizeof *b);
    if (!b) {
        donto_lease_resp_free(&r);
        snprintf(msg, cap, "lease answer: out of memory");
        return NULL;
    }
    b->it = r.items; /* the batch owns the items now */
    b->n = r.n;
    b->ttl_ms = r.ttl_ms;
    return b;
}

static void *lease_thread(void *arg) {
    wstate *w = arg;
    whttp h;
    if (http_init(w, &h)) {
        pthread_mutex_lock(&w->mu);
        w->fatal = 1;
        snprintf(w->fatal_msg, sizeof w->fatal_msg, "curl init failed");
        w->lease_done = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return NULL;
    }
    int attempt = 0;
    while (!stopping(w)) {
        pthread_mutex_lock(&w->mu);
        while (w->slot && !stopping(w)) cv_wait(w, 0.2);
        int64_t want = w->lease_n;
        unsigned gen = w->gen;
        if (w->c->max_items > 0 && w->c->max_items - w->leased < want) want = w->c->max_items - w->leased;
        pthread_mutex_unlock(&w->mu);
        if (stopping(w) || want <= 0) break;
        char *body = NULL;
        char msg[DONTO_ERR_MAX + 64];
        donto_err e = {0};
        long st = 0;
        wbatch *b = NULL;
        double sent = donto_now(); /* the lease runs from (at the latest) now */
        if (donto_proto_build_lease(w->c->worker_id, want, w->c->target, &body, &e)) {
            snprintf(msg, sizeof msg, "lease: request not built: %s", e.msg);
        } else {
            st = http_post(w, &h, "/lease", body);
            free(body);
        }
        if (st == 429) { /* a limit of this token's (docs/trust.md): come back when told */
            double wait = h.retry_after > 0 ? h.retry_after : backoff_s(w, attempt++);
            DLOG_INFO("worker: lease: rate limited (429); waiting %.0f s", wait);
            nap(w, wait, 1);
            continue;
        }
        if (st == 200) {
            b = parse_lease(&h, msg, sizeof msg);
        } else if (!e.msg[0]) {
            char why[CURL_ERROR_SIZE + 640];
            describe(&h, st, why, sizeof why);
            snprintf(msg, sizeof msg, "lease: %.500s", why);
        }
        if (!b) {
            count_error(w);
            if (st == 401 || st == 403) {
                refused(w, &h, st, "/lease");
                break;
            }
            if (!st && !e.msg[0] && setup_failure(w, &h, "/lease")) break;
            double wait = backoff_s(w, attempt++);
            DLOG_WARN("worker: %s; retrying in %.1f s", msg, wait);
            if (st) report(w, &h, "lease_error", msg);
            nap(w, wait, 1);
            continue;
        }
        attempt = 0;
        if (b->n == 0) {
            batch_free(b);
            if (w->c->exit_when_idle) {
                DLOG_INFO("worker: the queue is empty; exiting when idle");
                break;
            }
            nap(w, w->c->idle_sleep_s, 1);
            continue;
        }
        /* Items of a model this worker does not serve go back at once. */
        size_t keep = 0, other = 0;
        witem *wrong = calloc(b->n, sizeof *wrong);
        if (!wrong) { /* cannot sort them: give the whole batch back */
            count_error(w);
            release_items(w, &h, b->it, b->n);
            batch_free(b);
            nap(w, backoff_s(w, attempt++), 1);
            continue;
        }
        for (size_t i = 0; i < b->n; i++) {
            if (!strcmp(b->it[i].model, w->c->model_name))
                b->it[keep++] = b->it[i];
            else
                wrong[other++] = b->it[i];
        }
        b->n = keep;
        if (other) {
            snprintf(msg, sizeof msg, "leased %zu items for model %s; this worker serves %s only", other,
                     wrong[0].model, w->c->model_name);
            DLOG_WARN("worker: %s", msg);
            release_items(w, &h, wrong, other);
            report(w, &h, "wrong_model", msg);
            for (size_t i = 0; i < other; i++) donto_lease_item_clear(&wrong[i]);
        }
        free(wrong);
        if (!keep) {
            batch_free(b);
            nap(w, backoff_s(w, attempt++), 1);
            continue;
        }
        pthread_mutex_lock(&w->mu);
        if (stopping(w)) {
            pthread_mutex_unlock(&w->mu);
            release_items(w, &h, b->it, b->n);
            batch_free(b);
            break;
        }
        w->leased += (int64_t)b->n;
        b->seq = ++w->seq;
        b->renewed = sent;
        b->gen = gen;
        w->slot = b;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_lock(&w->mu);
    w->lease_done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    http_free(&h);
    return NULL;
}

/* ---- submit thread ------------------------------------------------------- */

/* The submit body of a batch: base64 with lease_id and model, or the legacy
 * form (JSON numbers, neither). NULL and e set when it cannot be built. */
static char *submit_body(wstate *w, const wbatch *b, int numbers, donto_err *e) {
    donto_client_item *ci = calloc(b->n ? b->n : 1, sizeof *ci);
    if (!ci) {
        donto_seterr(e, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < b->n; i++) {
        const witem *it = &b->it[i];
        ci[i] = (donto_client_item){it->target, it->item_id, numbers ? 0 : it->lease_id, numbers ? NULL : it->model,
                                    b->vec + i * (size_t)w->dims};
    }
    char *body = NULL;
    donto_proto_build_submit(w->c->worker_id, ci, b->n, w->dims, numbers, &body, e);
    free(ci);
    return body;
}

/* Current stop deadline (set the first time a stop is seen); 0 when running. */
static double stop_deadline(wstate *w) {
    if (!stopping(w)) return 0;
    pthread_mutex_lock(&w->mu);
    if (w->stop_deadline == 0) w->stop_deadline = donto_now() + w->c->stop_deadline_s;
    double d = w->stop_deadline;
    pthread_mutex_unlock(&w->mu);
    return d;
}

/* After a submit: items rejected lease_expired mean batches of this size
 * outlive their lease (extends failed or are not offered), so halve the
 * lease size, down to 1; a batch submitted in time doubles it back, up to
 * -n. Only batches leased at the current size count (those leased ahead at
 * the old one say nothing about the new). */
static void adapt_lease_size(wstate *w, const wbatch *b, size_t expired) {
    pthread_mutex_lock(&w->mu);
    if (b->gen == w->gen) {
        int before = w->lease_n;
        if (expired && w->lease_n > 1)
            w->lease_n = w->lease_n / 2;
        else if (!expired && w->lease_n < w->c->n)
            w->lease_n = w->lease_n > w->c->n / 2 ? w->c->n : w->lease_n * 2;
        if (w->lease_n != before) {
            w->gen++;
            if (expired)
                DLOG_WARN("worker: %zu of %zu items came back lease_expired (the batch outlived its lease): lease "
                          "size now %d of %d",
                          expired, b->n, w->lease_n, w->c->n);
            else
                DLOG_INFO("worker: a batch submitted in time: lease size now %d of %d", w->lease_n, w->c->n);
        }
    }
    pthread_mutex_unlock(&w->mu);
}

/* 0 submitted (or refused for good), -1 not submitted (release it). */
static int submit_batch(wstate *w, whttp *h, const wbatch *b) {
    int attempt = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int numbers = w->legacy_numbers;
        pthread_mutex_unlock(&w->mu);
        donto_err e = {0};
        char *body = submit_body(w, b, numbers, &e);
        if (!body) DLOG_WARN("worker: submit of %zu items not built: %s", b->n, e.msg);
        long st = body ? http_post(w, h, "/submit", body) : 0;
        free(body);
        if (st == 200) {
            donto_submit_resp r;
            if (donto_proto_parse_submit_response(h->buf, h->len, &r, &e)) {
                DLOG_WARN("worker: %s; %zu items not counted", e.msg, b->n);
                count_error(w);
                return 0;
            }
            size_t expired = 0;
            for (size_t i = 0; i < r.n_rejected; i++) {
                DLOG_WARN("worker: item %s rejected: %s", r.rejected[i].item_id ? r.rejected[i].item_id : "?",
                          r.rejected[i].reason ? r.rejected[i].reason : "?");
                expired += r.rejected[i].reason && !strcmp(r.rejected[i].reason, "lease_expired");
            }
            adapt_lease_size(w, b, expired);
            pthread_mutex_lock(&w->mu);
            w->submitted += r.upserted;
            w->rejected += (int64_t)r.n_rejected;
            pthread_mutex_unlock(&w->mu);
            donto_submit_resp_free(&r);
            return 0;
        }
        if (st == 400 && !numbers) {
            DLOG_WARN("worker: the coordinator answered 400 to base64 vectors; sending JSON numbers");
            pthread_mutex_lock(&w->mu);
            w->legacy_numbers = 1;
            pthread_mutex_unlock(&w->mu);
            continue;
        }
        if (st == 401 || st == 403) {
            count_error(w);
            refused(w, h, st, "/submit");
            return -1; /* the token is refused: nothing more will be accepted */
        }
        double s;
        if (st == 429) { /* a limit of this token's: retry when told */
            s = h->retry_after > 0 ? h->retry_after : backoff_s(w, attempt++);
            DLOG_INFO("worker: submit of %zu items: rate limited (429); retrying in %.0f s", b->n, s);
        } else {
            count_error(w);
            char why[CURL_ERROR_SIZE + 640], msg[sizeof why + 64];
            describe(h, st, why, sizeof why);
            snprintf(msg, sizeof msg, "submit of %zu items: %s", b->n, why);
            DLOG_WARN("worker: %s", msg);
            if (st >= 400 && st < 500 && st != 408) {
                report(w, h, "submit_refused", msg);
                return -1; /* refused for good: give the items back */
            }
            s = backoff_s(w, attempt++);
        }
        double dl = stop_deadline(w);
        if (dl && donto_now() + s > dl) return -1;
        nap(w, s, 0);
    }
}

static void log_minute_locked(wstate *w, int force) {
    double now = donto_now();
    if (force || now - w->minute_start >= 60) {
        double dt = now - w->minute_start;
        char extra[128] = "";
        int k = 0;
        if (w->lease_n < w->c->n) /* shrunk after lease_expired rejections */
            k += snprintf(extra + k, sizeof extra - (size_t)k, "; lease size %d of %d", w->lease_n, w->c->n);
        if (w->extends)
            snprintf(extra + k, sizeof extra - (size_t)k, "; %lld leases extended in %lld heartbeats",
                     (long long)w->extended, (long long)w->extends);
        DLOG_INFO("worker %s: %.0f items/min; embedded %lld, submitted %lld, rejected %lld, released %lld, errors %lld%s",
                  w->c->worker_id, dt > 0 ? (double)(w->submitted - w->minute_base) * 60.0 / dt : 0.0,
                  (long long)w->embedded, (long long)w->submitted, (long long)w->rejected, (long long)w->released,
                  (long long)w->errors, extra);
        w->minute_start = now;
        w->minute_base = w->submitted;
    }
}

static void log_minute(wstate *w, int force) {
    pthread_mutex_lock(&w->mu);
    log_minute_locked(w, force);
    pthread_mutex_unlock(&w->mu);
}

static void *submit_thread(void *arg) {
    wstate *w = arg;
    whttp h;
    int ok = http_init(w, &h) == 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->sq_head && !w->engine_done) {
            cv_wait(w, 1.0);
            log_minute_locked(w, 0); /* a line a minute, idle or not */
        }
        wbatch *b = w->sq_head;
        if (b) {
            w->sq_head = b->next;
            if (!w->sq_head) w->sq_tail = NULL;
            w->sq_len--;
            b->next = NULL;
            w->submitting = b; /* still held: the heartbeat extends it while submits are retried */
            pthread_cond_broadcast(&w->cv);
        }
        pthread_mutex_unlock(&w->mu);
        if (!b) break;
        if (!ok || submit_batch(w, &h, b)) release_items(w, &h, b->it, b->n);
        pthread_mutex_lock(&w->mu);
        w->submitting = NULL;
        pthread_mutex_unlock(&w->mu);
        batch_free(b);
        log_minute(w, 0);
    }
    http_free(&h);
    return NULL;
}

/* ---- heartbeat thread ---------------------------------------------------- */

/* Seconds after which a batch's lease is renewed: a third of its TTL. */
static double renew_after(const wbatch *b) { return (double)b->ttl_ms / 3000.0; }

/* Every batch the worker holds leased, in the order they are visited. */
#define HELD_MAX (2 + SUBMIT_QUEUE_MAX + 1)
static size_t held_locked(wstate *w, wbatch **out) {
    size_t k = 0;
    if (w->slot) out[k++] = w->slot;
    if (w->engine_b) out[k++] = w->engine_b;
    for (wbatch *b = w->sq_head; b && k < HELD_MAX; b = b->next) out[k++] = b;
    if (w->submitting && k < HELD_MAX) out[k++] = w->submitting;
    return k;
}

/* The extend body for the held batches due for renewal (their seqs in
 * seqs[], at most HELD_MAX; the shortest TTL among them in *ttl_ms), or NULL
 * when none is due; *next_due is when the next one will be (0: none held
 * with a TTL). Under w->mu. */
static char *extend_body_locked(wstate *w, double now, uint64_t *seqs, size_t *nseq, size_t *nitems,
                                int64_t *ttl_ms, double *next_due) {
    wbatch *held[HELD_MAX];
    size_t nh = held_locked(w, held), total = 0;
    *nseq = 0;
    *nitems = 0;
    *ttl_ms = 0;
    *next_due = 0;
    int any_due = 0;
    for (size_t i = 0; i < nh; i++)
        any_due |= held[i]->ttl_ms > 0 && held[i]->renewed + renew_after(held[i]) <= now;
    for (size_t i = 0; i < nh; i++) {
        if (held[i]->ttl_ms <= 0) continue; /* a legacy lease: nothing to extend */
        double due = held[i]->renewed + renew_after(held[i]);
        /* When one is due, one request for every batch due soon too (within
         * a sixth of its TTL): renewing a little early costs nothing. */
        if (any_due && due - renew_after(held[i]) / 2 <= now && total + held[i]->n <= DONTO_PROTO_ITEMS_MAX) {
            seqs[(*nseq)++] = held[i]->seq;
            total += held[i]->n;
            if (*ttl_ms == 0 || held[i]->ttl_ms < *ttl_ms) *ttl_ms = held[i]->ttl_ms;
        } else if (*next_due == 0 || due < *next_due) {
            *next_due = due;
        }
    }
    if (!*nseq) return NULL;
    donto_client_item *ci = calloc(total, sizeof *ci);
    if (!ci) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < nh; i++)
        for (size_t j = 0; j < *nseq; j++)
            if (held[i]->seq == seqs[j]) {
                for (size_t m = 0; m < held[i]->n; m++) {
                    const witem *it = &held[i]->it[m];
                    ci[k++] = (donto_client_item){it->target, it->item_id, it->lease_id, NULL, NULL};
                }
                break;
            }
    char *body = NULL;
    donto_err e = {0};
    if (donto_proto_build_extend(w->c->worker_id, ci, k, &body, &e))
        DLOG_WARN("worker: extend of %zu items not built: %s", k, e.msg);
    free(ci);
    *nitems = k;
    return body;
}

/* Keeps the leases of every batch held alive while it is held (see the top
 * of this file). Runs until the submit thread is done; a fatal error ends it
 * too. Never takes the lock for longer than building a body. */
static void *heartbeat_thread(void *arg) {
    wstate *w = arg;
    whttp h;
    if (http_init(w, &h)) {
        DLOG_WARN("worker: curl init failed: no heartbeats (slow batches may lose their leases)");
        return NULL;
    }
    double not_before = 0; /* after a failure or a 429 */
    int attempt = 0;
    pthread_mutex_lock(&w->mu);
    while (!w->hb_done && !w->fatal && !w->no_extend) {
        double now = donto_now(), next_due = 0;
        uint64_t seqs[HELD_MAX];
        size_t nseq = 0, nitems = 0;
        int64_t ttl_ms = 0;
        char *body =
            now >= not_before ? extend_body_locked(w, now, seqs, &nseq, &nitems, &ttl_ms, &next_due) : NULL;
        if (!body) {
            double until = now >= not_before ? next_due : not_before;
            double wait = until > now ? until - now : 1.0;
            cv_wait(w, wait < 1.0 ? wait : 1.0);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        /* The lease must not run out while this request waits: give up on it
         * after a third of the TTL (and try again), not the default timeout. */
        h.timeout_s = (double)ttl_ms / 3000.0;
        if (h.timeout_s < 2) h.timeout_s = 2;
        double sent = donto_now(); /* the coordinator extends from when it sees it: later */
        long st = http_post(w, &h, "/extend", body);
        free(body);
        int64_t extended = 0, new_ttl = 0;
        wbatch *held[HELD_MAX];
        donto_err e = {0};
        int ok = st == 200 && donto_proto_parse_extend_response(h.buf, h.len, &extended, &new_ttl, &e) == 0;
        if (st == 401 || st == 403) {
            refused(w, &h, st, "/extend");
            pthread_mutex_lock(&w->mu);
            break;
        }
        /* backoff_s takes the lock: draw before */
        double wait429 = st != 429 ? 0 : h.retry_after > 0 ? h.retry_after : backoff_s(w, attempt++);
        pthread_mutex_lock(&w->mu);
        now = donto_now();
        if (ok) {
            attempt = 0;
            w->extends++;
            w->extended += extended;
            size_t nh = held_locked(w, held);
            for (size_t i = 0; i < nh; i++)
                for (size_t j = 0; j < nseq; j++)
                    if (held[i]->seq == seqs[j]) {
                        held[i]->renewed = sent;
                        if (new_ttl > 0) held[i]->ttl_ms = new_ttl;
                    }
            DLOG_INFO("worker: heartbeat: extended %lld of %zu leased items (%zu batches held past a third of their lease)",
                      (long long)extended, nitems, nseq);
        } else if (st == 404 || st == 405) {
            w->no_extend = 1;
            DLOG_WARN("worker: the coordinator has no /extend (HTTP %ld): no heartbeats; a batch that outlives its "
                      "lease is lost, and the lease size halves", st);
        } else if (st == 429) {
            not_before = now + wait429;
            DLOG_INFO("worker: heartbeat: rate limited (429); next try in %.0f s", wait429);
        } else {
            w->errors++;
            /* Soon again, well within what is left of the lease. */
            double again = (double)(ttl_ms > 0 ? ttl_ms : 3000) / 12000.0;
            if (again > 30) again = 30;
            if (again < 0.25) again = 0.25;
            not_before = now + again;
            char why[DONTO_ERR_MAX + CURL_ERROR_SIZE + 640];
            if (st == 200)
                snprintf(why, sizeof why, "%s", e.msg);
            else
                describe(&h, st, why, sizeof why);
            DLOG_WARN("worker: heartbeat: extend of %zu items failed (%s); trying again in %.1f s", nitems, why, again);
        }
    }
    pthread_mutex_unlock(&w->mu);
    http_free(&h);
    return NULL;
}

/* ---- engine -------------------------------------------------------------- */

int donto_worker_run(const donto_worker_config *c, donto_encoder *enc, donto_err *err) {
    wstate *w = calloc(1, sizeof *w);
    if (!w) return donto_seterr(err, "out of memory");
    w->c = c;
    w->enc = enc;
    w->dims = donto_encoder_dim(enc);
    w->minute_start = donto_now();
    w->started = w->minute_start;
    w->lease_n = c->n > 0 ? c->n : 256;
    w->rnd = (unsigned)(donto_now() * 1e6) ^ (unsigned)getpid();
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_store(&g_stop, 0);
    pthread_t lt, st, ht;
    if (pthread_create(&lt, NULL, lease_thread, w)) {
        free(w);
        return donto_seterr(err, "cannot start the lease thread");
    }
    if (pthread_create(&st, NULL, submit_thread, w)) {
        atomic_store(&g_stop, 1);
        pthread_join(lt, NULL);
        batch_free(w->slot);
        free(w);
        return donto_seterr(err, "cannot start the submit thread");
    }
    int have_hb = pthread_create(&ht, NULL, heartbeat_thread, w) == 0;
    if (!have_hb) DLOG_WARN("worker: cannot start the heartbeat thread: leases are not extended");
    donto_encoder_kernels kern;
    donto_encoder_kernels_get(enc, &kern);
    DLOG_INFO("worker %s: serving %s (dim %d) from %s; %d items per lease; kernels: %s", c->worker_id, c->model_name,
              w->dims, c->url, w->lease_n, kern.summary);
    whttp h;
    int have_http = http_init(w, &h) == 0;
    size_t bsz = c->batch > 0 ? (size_t)c->batch : (size_t)(c->n > 0 ? c->n : 256);
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->slot && !w->lease_done && !stopping(w)) cv_wait(w, 0.2);
        if (stopping(w) || !w->slot) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        wbatch *b = w->slot;
        w->slot = NULL;
        w->engine_b = b;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        b->vec = malloc(b->n * (size_t)w->dims * sizeof(float));
        const char **texts = malloc(b->n * sizeof *texts);
        int failed = !b->vec || !texts;
        donto_err e = {0};
        for (size_t i = 0; !failed && i < b->n; i++) texts[i] = b->it[i].text;
        for (size_t off = 0; !failed && off < b->n; off += bsz) {
            size_t k = b->n - off < bsz ? b->n - off : bsz;
            if (donto_encoder_encode(enc, texts + off, NULL, k, b->vec + off * (size_t)w->dims, NULL, &e))
                failed = 1;
        }
        free(texts);
        if (failed) {
            char msg[600];
            snprintf(msg, sizeof msg, "encode of %zu items failed: %s", b->n, e.msg[0] ? e.msg : "out of memory");
            DLOG_ERROR("worker: %s", msg);
            count_error(w);
            pthread_mutex_lock(&w->mu);
            w->engine_b = NULL;
            pthread_mutex_unlock(&w->mu);
            if (have_http) {
                report(w, &h, "encode_error", msg);
                release_items(w, &h, b->it, b->n);
            }
            batch_free(b);
            continue;
        }
        pthread_mutex_lock(&w->mu);
        w->embedded += (int64_t)b->n;
        while (w->sq_len >= SUBMIT_QUEUE_MAX) cv_wait(w, 0.2);
        if (w->sq_tail)
            w->sq_tail->next = b;
        else
            w->sq_head = b;
        w->sq_tail = b;
        w->sq_len++;
        w->engine_b = NULL;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    if (stopping(w)) DLOG_INFO("worker: stopping: finishing submits, releasing the rest");
    pthread_mutex_lock(&w->mu);
    w->engine_done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(lt, NULL);
    pthread_mutex_lock(&w->mu);
    wbatch *left = w->slot; /* leased but never embedded */
    w->slot = NULL;
    pthread_mutex_unlock(&w->mu);
    if (left) {
        if (have_http) release_items(w, &h, left->it, left->n);
        batch_free(left);
    }
    pthread_join(st, NULL);
    if (have_hb) { /* nothing is held any more */
        pthread_mutex_lock(&w->mu);
        w->hb_done = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(ht, NULL);
    }
    if (have_http) http_free(&h);
    log_minute(w, 1);
    int rc = 0;
    if (w->fatal) rc = donto_seterr(err, "%s", w->fatal_msg[0] ? w->fatal_msg : "fatal error");
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return rc;
}
