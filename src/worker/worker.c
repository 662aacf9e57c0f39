/* The embedding worker: lease thread, engine (the caller's thread), submit
 * thread; see include/donto/worker.h. Request bodies and answers go through
 * the wire module's client side (donto/wire.h); this file moves bytes. */
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
}

/* ---- batches ------------------------------------------------------------- */

typedef donto_lease_item witem; /* target, item_id, text, model, lease_id */

typedef struct wbatch {
    witem *it;
    size_t n;
    float *vec; /* n * dims after the engine */
    struct wbatch *next;
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
    wbatch *sq_head, *sq_tail;
    size_t sq_len;
    int lease_done, engine_done, fatal;
    char fatal_msg[256];
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
    CURL *c = h->c;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->hdr);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(w->c->connect_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(w->c->request_timeout_s * 1000));
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    if (w->c->ca_file) curl_easy_setopt(c, CURLOPT_CAINFO, w->c->ca_file);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
        DLOG_WARN("worker: POST %s: %s", route, curl_easy_strerror(rc));
        return 0;
    }
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    return st;
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
        int64_t want = w->c->n;
        if (w->c->max_items > 0 && w->c->max_items - w->leased < want) want = w->c->max_items - w->leased;
        pthread_mutex_unlock(&w->mu);
        if (stopping(w) || want <= 0) break;
        char *body = NULL;
        char msg[DONTO_ERR_MAX + 64];
        donto_err e = {0};
        long st = 0;
        wbatch *b = NULL;
        if (donto_proto_build_lease(w->c->worker_id, want, w->c->target, &body, &e)) {
            snprintf(msg, sizeof msg, "lease: request not built: %s", e.msg);
        } else {
            st = http_post(w, &h, "/lease", body);
            free(body);
        }
        if (st == 200) {
            b = parse_lease(&h, msg, sizeof msg);
        } else if (!e.msg[0]) {
            snprintf(msg, sizeof msg, "lease: %s %ld", st ? "HTTP" : "no answer", st);
        }
        if (!b) {
            count_error(w);
            DLOG_WARN("worker: %s", msg);
            if (st == 401 || st == 403) {
                pthread_mutex_lock(&w->mu);
                w->fatal = 1;
                snprintf(w->fatal_msg, sizeof w->fatal_msg, "the coordinator refused the token (HTTP %ld)", st);
                pthread_mutex_unlock(&w->mu);
                break;
            }
            if (st) report(w, &h, "lease_error", msg);
            nap(w, backoff_s(w, attempt++), 1);
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
            for (size_t i = 0; i < r.n_rejected; i++)
                DLOG_WARN("worker: item %s rejected: %s", r.rejected[i].item_id ? r.rejected[i].item_id : "?",
                          r.rejected[i].reason ? r.rejected[i].reason : "?");
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
        count_error(w);
        char msg[256];
        snprintf(msg, sizeof msg, "submit of %zu items: %s %ld", b->n, st ? "HTTP" : "no answer", st);
        DLOG_WARN("worker: %s", msg);
        if (st >= 400 && st < 500 && st != 408 && st != 429) {
            report(w, h, "submit_refused", msg);
            return -1; /* refused for good: give the items back */
        }
        double dl = stop_deadline(w);
        double s = backoff_s(w, attempt++);
        if (dl && donto_now() + s > dl) return -1;
        nap(w, s, 0);
    }
}

static void log_minute_locked(wstate *w, int force) {
    double now = donto_now();
    if (force || now - w->minute_start >= 60) {
        double dt = now - w->minute_start;
        DLOG_INFO("worker %s: %.0f items/min; embedded %lld, submitted %lld, rejected %lld, released %lld, errors %lld",
                  w->c->worker_id, dt > 0 ? (double)(w->submitted - w->minute_base) * 60.0 / dt : 0.0,
                  (long long)w->embedded, (long long)w->submitted, (long long)w->rejected, (long long)w->released,
                  (long long)w->errors);
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
            pthread_cond_broadcast(&w->cv);
        }
        pthread_mutex_unlock(&w->mu);
        if (!b) break;
        if (!ok || submit_batch(w, &h, b)) release_items(w, &h, b->it, b->n);
        batch_free(b);
        log_minute(w, 0);
    }
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
    w->rnd = (unsigned)(donto_now() * 1e6) ^ (unsigned)getpid();
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_store(&g_stop, 0);
    pthread_t lt, st;
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
    DLOG_INFO("worker %s: serving %s (dim %d) from %s", c->worker_id, c->model_name, w->dims, c->url);
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
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    if (stopping(w)) DLOG_INFO("worker: stopping: finishing submits, releasing the rest");
    pthread_mutex_lock(&w->mu);
    w->engine_done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(lt, NULL);
    if (w->slot) { /* leased but never embedded */
        if (have_http) release_items(w, &h, w->slot->it, w->slot->n);
        batch_free(w->slot);
        w->slot = NULL;
    }
    pthread_join(st, NULL);
    if (have_http) http_free(&h);
    log_minute(w, 1);
    int rc = 0;
    if (w->fatal) rc = donto_seterr(err, "%s", w->fatal_msg[0] ? w->fatal_msg : "fatal error");
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return rc;
}
