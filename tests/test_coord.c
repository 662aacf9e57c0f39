/* The coordinator end to end: donto_coord started in-process on 127.0.0.1
 * (ephemeral port) and driven with libcurl, as the Python workers drive it.
 * The same scenario runs over an in-memory fake store (which can also play
 * a dead or slow database) and over the real SQLite store in a temp file.
 * Every loop is bounded; nothing leaves the loopback interface. */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <strings.h>
#include <libpq-fe.h>

#include "check.h"
#include "unitvec.h"
#include "curlbuf.h"
#include "donto/coord.h"
#include "donto/store.h"
#include "donto/wire.h"
#include "proc.h"
#include "tinybert.h"
#include "donto/encoder.h"

/* ---- a fake store ------------------------------------------------------------ */

#define FAKE_ITEMS 64

typedef struct {
    int target;
    char id[64], text[64], model[64];
    int embedded;
    char owner[64];
    int64_t lease_id, expires;
} fitem;

typedef struct {
    pthread_mutex_t mu;
    fitem it[FAKE_ITEMS];
    int n;
    int64_t next_lease;
    struct {
        uint8_t hash[32];
        donto_role role;
        char name[32];
        int revoked;
    } tok[8];
    int ntok;
    int nreports;
    char last_report[2048];
    _Atomic int down;    /* every call fails and ping says unreachable */
    _Atomic int slow_ms; /* lease sleeps this long (drain test) */
} fakedb;

typedef struct {
    donto_store base;
    fakedb *db;
} fakeh;

#define DB(s) (((fakeh *)(s))->db)

static int f_migrate(donto_store *s, const donto_migrations *set, donto_err *e) { return DB(s)->down ? donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down") : 0; }

static int f_enqueue(donto_store *s, const donto_enqueue_item *items, size_t n, size_t *added, donto_err *e) {
    fakedb *db = DB(s);
    pthread_mutex_lock(&db->mu);
    *added = 0;
    for (size_t i = 0; i < n && db->n < FAKE_ITEMS; i++) {
        fitem *f = &db->it[db->n++];
        memset(f, 0, sizeof *f);
        f->target = (int)items[i].target;
        snprintf(f->id, sizeof f->id, "%s", items[i].item_id);
        snprintf(f->text, sizeof f->text, "%s", items[i].text);
        snprintf(f->model, sizeof f->model, "%s", items[i].model);
        ++*added;
    }
    pthread_mutex_unlock(&db->mu);
    (void)e;
    return 0;
}

static int f_lease(donto_store *s, const char *w, int n, int target, int64_t now, int64_t ttl, donto_lease_batch *out,
                   donto_err *e) {
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    int ms = db->slow_ms;
    if (ms) nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
    pthread_mutex_lock(&db->mu);
    out->items = calloc(FAKE_ITEMS, sizeof *out->items);
    out->n = 0;
    for (int i = 0; i < db->n && (int)out->n < n; i++) {
        fitem *f = &db->it[i];
        if (f->embedded || (target >= 0 && f->target != target) || (f->owner[0] && f->expires > now)) continue;
        snprintf(f->owner, sizeof f->owner, "%s", w);
        f->lease_id = ++db->next_lease;
        f->expires = now + ttl;
        donto_leased_item *li = &out->items[out->n++];
        li->target = (donto_target)f->target;
        li->item_id = strdup(f->id);
        li->text = strdup(f->text);
        li->model = strdup(f->model);
        li->lease_id = f->lease_id;
    }
    pthread_mutex_unlock(&db->mu);
    return 0;
}

static fitem *f_find(fakedb *db, int target, const char *id) {
    for (int i = 0; i < db->n; i++)
        if (db->it[i].target == target && !strcmp(db->it[i].id, id)) return &db->it[i];
    return NULL;
}

static int f_submit(donto_store *s, const char *w, const donto_submit_item *items, size_t n, int64_t now,
                    donto_submit_result *res, donto_err *e) {
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    pthread_mutex_lock(&db->mu);
    res->upserted = 0;
    for (size_t i = 0; i < n; i++) {
        fitem *f = f_find(db, (int)items[i].target, items[i].item_id);
        donto_reject r = DONTO_REJECT_NONE;
        if (!f || f->embedded) r = DONTO_REJECT_UNKNOWN_ITEM;
        else if (strcmp(f->owner, w)) r = DONTO_REJECT_NOT_LEASED;
        else if (items[i].lease_id && items[i].lease_id != f->lease_id) r = DONTO_REJECT_LEASE_EXPIRED;
        else if (items[i].dims != 384 || !items[i].vector) r = DONTO_REJECT_WRONG_MODEL;
        res->reject[i] = r;
        if (r == DONTO_REJECT_NONE) f->embedded = 1, res->upserted++;
    }
    pthread_mutex_unlock(&db->mu);
    (void)now;
    return 0;
}

static int f_release(donto_store *s, const char *w, const donto_submit_item *items, size_t n, size_t *released,
                     donto_err *e) {
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    pthread_mutex_lock(&db->mu);
    *released = 0;
    for (size_t i = 0; i < n; i++) {
        fitem *f = f_find(db, (int)items[i].target, items[i].item_id);
        if (!f || f->embedded || strcmp(f->owner, w) || (items[i].lease_id && items[i].lease_id != f->lease_id))
            continue;
        f->owner[0] = 0;
        f->expires = 0;
        ++*released;
    }
    pthread_mutex_unlock(&db->mu);
    return 0;
}

static int f_report(donto_store *s, const char *w, const char *kind, const char *msg, int64_t now, donto_err *e) {
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    pthread_mutex_lock(&db->mu);
    db->nreports++;
    snprintf(db->last_report, sizeof db->last_report, "%s", msg);
    pthread_mutex_unlock(&db->mu);
    (void)w, (void)kind, (void)now;
    return 0;
}

static int f_stats(donto_store *s, int64_t now, donto_target_stats out[DONTO_TARGET_N], donto_err *e) {
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    pthread_mutex_lock(&db->mu);
    memset(out, 0, sizeof(donto_target_stats) * DONTO_TARGET_N);
    for (int i = 0; i < db->n; i++) {
        fitem *f = &db->it[i];
        donto_target_stats *t = &out[f->target];
        if (f->embedded) t->embedded++;
        else if (f->owner[0] && f->expires > now) t->leased++;
        else t->pending++;
        t->total++;
    }
    pthread_mutex_unlock(&db->mu);
    return 0;
}

static int f_token_add(donto_store *s, const char *name, donto_role role, const uint8_t hash[32], int64_t now,
                       donto_err *e) {
    fakedb *db = DB(s);
    if (db->ntok == 8) return donto_seterr(e, "fake: full");
    memcpy(db->tok[db->ntok].hash, hash, 32);
    db->tok[db->ntok].role = role;
    snprintf(db->tok[db->ntok].name, sizeof db->tok[0].name, "%s", name);
    db->tok[db->ntok++].revoked = 0;
    (void)now;
    return 0;
}

/* Hashes compared in constant time, as a real lookup should not leak how
 * many leading bytes of a presented hash matched. */
static int f_token_check(donto_store *s, const uint8_t hash[32], int *found, donto_role *role, char *name,
                         size_t cap, donto_trust *trust, donto_err *e) {
    (void)trust; /* the fake keeps no trust record: every token is in good standing */
    fakedb *db = DB(s);
    if (db->down) return donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: down");
    *found = 0;
    for (int i = 0; i < db->ntok; i++)
        if (!CRYPTO_memcmp(db->tok[i].hash, hash, 32) && !db->tok[i].revoked) {
            *found = 1;
            *role = db->tok[i].role;
            snprintf(name, cap, "%s", db->tok[i].name);
        }
    return 0;
}

static int f_token_revoke(donto_store *s, const char *name, int *revoked, donto_err *e) {
    fakedb *db = DB(s);
    *revoked = 0;
    for (int i = 0; i < db->ntok; i++)
        if (!strcmp(db->tok[i].name, name) && !db->tok[i].revoked) db->tok[i].revoked = 1, *revoked = 1;
    (void)e;
    return 0;
}

static int f_ping(donto_store *s, donto_err *e) { return DB(s)->down ? donto_seterrc(e, DONTO_E_UNAVAILABLE, "fake: unreachable") : 0; }

static void f_close(donto_store *s) { free(s); }

/* embedded_since, contributors, reports_recent, token_list left NULL: the
 * server must treat them as optional. */
static const donto_store_ops fake_ops = {
    .migrate = f_migrate,
    .enqueue = f_enqueue,
    .lease = f_lease,
    .submit = f_submit,
    .release = f_release,
    .report = f_report,
    .stats = f_stats,
    .token_add = f_token_add,
    .token_check = f_token_check,
    .token_revoke = f_token_revoke,
    .ping = f_ping,
    .close = f_close,
};

static int open_fake(void *ctx, donto_store **out, donto_err *err) {
    fakeh *h = calloc(1, sizeof *h);
    if (!h) return donto_seterr(err, "oom");
    h->base.ops = &fake_ops;
    h->db = ctx;
    *out = &h->base;
    return 0;
}

static int open_url(void *ctx, donto_store **out, donto_err *err) { return donto_store_open(ctx, out, err); }

/* ---- HTTP client ------------------------------------------------------------------ */

static int g_port;
static const char *g_base = "/embed";
static const char *g_scheme = "http"; /* "https" in test_tls */
static const char *g_cafile;          /* CA bundle for https (NULL: the system's) */
static CURLcode g_curl_rc;            /* transport result of the last request */
static char g_retry_after[32];        /* the last answer's Retry-After header ("" if none) */

static size_t on_header(char *d, size_t sz, size_t nm, void *u) {
    (void)u;
    size_t n = sz * nm;
    if (n > 12 && !strncasecmp(d, "Retry-After:", 12)) {
        size_t k = 0;
        for (size_t i = 12; i < n && k + 1 < sizeof g_retry_after; i++)
            if (d[i] >= '0' && d[i] <= '9') g_retry_after[k++] = d[i];
        g_retry_after[k] = 0;
    }
    return n;
}


typedef struct {
    const char *data;
    size_t len, off;
} upload;

static size_t on_read(char *d, size_t sz, size_t nm, void *u) {
    upload *up = u;
    size_t n = sz * nm;
    if (n > up->len - up->off) n = up->len - up->off;
    memcpy(d, up->data + up->off, n);
    up->off += n;
    return n;
}

/* One request; returns the status (0 on transport failure) and the parsed
 * JSON body in *out (NULL when not JSON). chunked: send the body without
 * Content-Length. */
static long http_ex(const char *method, const char *path, const char *token, const char *body, size_t len,
                    int chunked, json_t **out) {
    CURL *c = curl_easy_init();
    char url[256], auth[256];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s%s", g_scheme, g_port, g_base, path);
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    upload up = {body, len, 0};
    if (chunked) h = curl_slist_append(h, "Transfer-Encoding: chunked");
    buf b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "curl/8.5.0");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    if (g_cafile) curl_easy_setopt(c, CURLOPT_CAINFO, g_cafile);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    g_retry_after[0] = 0;
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        if (chunked) {
            curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
            curl_easy_setopt(c, CURLOPT_READDATA, &up);
        } else {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
        }
    } else if (strcmp(method, "GET")) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    long status = 0;
    g_curl_rc = curl_easy_perform(c);
    if (g_curl_rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (out) *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static long http(const char *method, const char *path, const char *token, const char *body, json_t **out) {
    return http_ex(method, path, token, body, body ? strlen(body) : 0, 0, out);
}

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* An error answer: the status and {"error": code, "message": ...}. */
#define CHECK_ERR(st, j, want_status, want_code)                                                         \
    do {                                                                                                 \
        CHECK((st) == (want_status), "status %ld, want %d", (long)(st), (want_status));                  \
        CHECK(json_is_string(json_object_get((j), "message")), "no message");                            \
        CHECK(!strcmp(jstr((j), "error"), (want_code)), "error '%s', want '%s'", jstr((j), "error"),     \
              (want_code));                                                                              \
    } while (0)

/* One request that must fail with this status and error code. */
static void expect_err(const char *method, const char *path, const char *token, const char *body, int want_status,
                       const char *want_code) {
    json_t *j = NULL;
    long st = http(method, path, token, body, &j);
    if (st != want_status) fprintf(stderr, "expect_err: %s %s\n", method, path);
    CHECK_ERR(st, j, want_status, want_code);
    json_decref(j);
}

/* ---- scenario helpers ---------------------------------------------------------------- */

static void hash_of(const char *tok, uint8_t h[32]) {
    unsigned int hl;
    EVP_Digest(tok, strlen(tok), h, &hl, EVP_sha256(), NULL);
}

static json_t *vec_json(unsigned seed, size_t n, double scale) {
    float v[1024];
    unit(v, n, seed);
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(v[i] * scale));
    return a;
}

static json_t *vec_b64(unsigned seed, size_t n, float poison) {
    float v[1024];
    unit(v, n, seed);
    if (poison != 0) v[3] = poison;
    char *s = donto_proto_f32_b64(v, n);
    json_t *j = json_string(s);
    free(s);
    return j;
}

static char *dumps(json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static int64_t embedded_total(donto_store *s) {
    donto_target_stats st[DONTO_TARGET_N];
    donto_err e;
    if (donto_store_stats(s, INT64_MAX / 2, st, &e)) return -1;
    int64_t n = 0;
    for (int t = 0; t < DONTO_TARGET_N; t++) n += st[t].embedded;
    return n;
}

static int64_t g_clock_ms = 1700000000000LL;
static int64_t test_clock(void *ctx) {
    (void)ctx;
    return __atomic_load_n(&g_clock_ms, __ATOMIC_SEQ_CST);
}

/* Start a coordinator on an ephemeral loopback port. */
static double g_lease_per_s = -1; /* no lease rate limit, unless a test sets one */

static donto_coord *start(int (*open)(void *, donto_store **, donto_err *), void *ctx, int threads, int pool,
                          size_t max_body) {
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = threads;
    cfg.pool = pool;
    cfg.max_body = max_body;
    cfg.open_store = open;
    cfg.open_ctx = ctx;
    cfg.now_ms = test_clock;
    cfg.lease_ttl_ms = 60000;
    cfg.pool_wait_s = 5;
    cfg.version = "test";
    cfg.lease_per_s = g_lease_per_s; /* the limits have a test of their own */
    donto_coord *c = NULL;
    donto_err e = {0};
    CHECK(donto_coord_start(&cfg, &c, &e) == 0, "start: %s", e.msg);
    g_port = donto_coord_port(c);
    CHECK(g_port > 0, "port %d", g_port);
    return c;
}

/* ---- the scenario every store must pass -------------------------------------------- */

static const char *TOK_W = "contributor-token-0123456789";
static const char *TOK_A = "admin-token-abcdef";
static const char *TOK_R = "revoked-token-xyz";

static void seed(donto_store *s) {
    donto_err e = {0};
    static const char *ids[] = {"c1", "c2", "c3", "c4", "c5"};
    donto_enqueue_item q[6];
    for (int i = 0; i < 5; i++)
        q[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], "some claim text", "BAAI/bge-small-en-v1.5"};
    q[5] = (donto_enqueue_item){DONTO_TARGET_ENTITY, "http://ex.org/e1", "an entity", "BAAI/bge-small-en-v1.5"};
    size_t added = 0;
    CHECK(donto_store_enqueue(s, q, 6, &added, &e) == 0 && added == 6, "enqueue: %s (%zu)", e.msg, added);
    uint8_t h[32];
    hash_of(TOK_W, h);
    CHECK(donto_store_token_add(s, "worker", DONTO_ROLE_CONTRIBUTOR, h, g_clock_ms, &e) == 0, "%s", e.msg);
    hash_of(TOK_A, h);
    CHECK(donto_store_token_add(s, "admin", DONTO_ROLE_ADMIN, h, g_clock_ms, &e) == 0, "%s", e.msg);
    hash_of(TOK_R, h);
    CHECK(donto_store_token_add(s, "gone", DONTO_ROLE_ADMIN, h, g_clock_ms, &e) == 0, "%s", e.msg);
    int rv = 0;
    CHECK(donto_store_token_revoke(s, "gone", &rv, &e) == 0 && rv == 1, "revoke: %s", e.msg);
}

/* s: a handle of its own onto the same database, to look at it directly. */
static void scenario(donto_store *s, const char *label) {
    fprintf(stderr, "-- scenario on %s\n", label);
    json_t *j = NULL;
    long st;

    /* Health: no token. */
    st = http("GET", "/health", NULL, NULL, &j);
    CHECK(st == 200 && json_is_true(json_object_get(j, "ok")) && json_is_true(json_object_get(j, "database")) &&
              !strcmp(jstr(j, "version"), "test"),
          "health %ld", st);
    json_decref(j);

    /* Tokens. */
    const char *lease1 = "{\"worker_id\": \"w1\", \"n\": 2, \"target\": \"claim\"}";
    st = http("POST", "/lease", NULL, lease1, &j);
    CHECK_ERR(st, j, 401, "unauthorized");
    json_decref(j);
    st = http("POST", "/lease", "not-a-known-token", lease1, &j);
    CHECK_ERR(st, j, 401, "unauthorized");
    json_decref(j);
    st = http("POST", "/lease", TOK_R, lease1, &j);
    CHECK_ERR(st, j, 401, "unauthorized");
    json_decref(j);
    st = http("GET", "/stats", TOK_W, NULL, &j);
    CHECK_ERR(st, j, 403, "forbidden");
    json_decref(j);
    st = http("GET", "/stats", NULL, NULL, &j);
    CHECK_ERR(st, j, 401, "unauthorized");
    json_decref(j);

    /* Routes and methods. */
    expect_err("GET", "/nope", TOK_W, NULL, 404, "not_found");
    expect_err("GET", "/lease", TOK_W, NULL, 405, "method_not_allowed");
    expect_err("POST", "/health", NULL, "{}", 405, "method_not_allowed");
    expect_err("DELETE", "/submit", TOK_W, NULL, 405, "method_not_allowed");

    /* The legacy flow: lease two claims, submit float arrays without lease_id. */
    st = http("POST", "/lease", TOK_W, lease1, &j);
    json_t *batch = json_object_get(j, "batch");
    CHECK(st == 200 && json_array_size(batch) == 2, "lease %ld size %zu", st, json_array_size(batch));
    json_t *items = json_array();
    for (size_t i = 0; i < json_array_size(batch) && i < 2; i++) {
        json_t *it = json_array_get(batch, i);
        CHECK(!strcmp(jstr(it, "target"), "claim") && !strcmp(jstr(it, "model"), "BAAI/bge-small-en-v1.5") &&
                  !strcmp(jstr(it, "text"), "some claim text") && json_integer_value(json_object_get(it, "lease_id")) > 0,
              "lease item %zu", i);
        json_array_append_new(items, json_pack("{s:s, s:O, s:o}", "target", "claim", "item_id",
                                                json_object_get(it, "item_id"), "vector", vec_json((unsigned)i + 1, 384, 1.0)));
    }
    json_decref(j);
    int64_t before = embedded_total(s);
    char *body = dumps(json_pack("{s:s, s:o}", "worker_id", "w1", "items", items));
    st = http("POST", "/submit", TOK_W, body, &j);
    free(body);
    CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 2 && !json_object_get(j, "rejected"),
          "legacy submit %ld", st);
    json_decref(j);
    CHECK_EQ_INT(embedded_total(s), before + 2);

    /* vector_b64 with lease_id, and per-item rejections in one batch. */
    before = embedded_total(s);
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w2\", \"n\": 3, \"target\": null}", &j);
    batch = json_object_get(j, "batch");
    CHECK(st == 200 && json_array_size(batch) == 3, "lease2 %ld %zu", st, json_array_size(batch));
    items = json_array();
    for (size_t i = 0; i < json_array_size(batch); i++) {
        json_t *it = json_array_get(batch, i);
        json_t *vec;
        const char *key = "vector_b64";
        if (i == 0) vec = vec_b64(10, 384, 0);              /* good */
        else if (i == 1) vec = vec_b64(11, 384, NAN);       /* NaN */
        else key = "vector", vec = vec_json(12, 384, 2.0);  /* norm 2 */
        json_array_append_new(items, json_pack("{s:O, s:O, s:O, s:o}", "target", json_object_get(it, "target"),
                                                "item_id", json_object_get(it, "item_id"), "lease_id",
                                                json_object_get(it, "lease_id"), key, vec));
    }
    json_decref(j);
    body = dumps(json_pack("{s:s, s:o}", "worker_id", "w2", "items", items));
    st = http("POST", "/submit", TOK_W, body, &j);
    free(body);
    json_t *rej = json_object_get(j, "rejected");
    CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 1 && json_array_size(rej) == 2,
          "mixed submit %ld", st);
    CHECK(!strcmp(jstr(json_array_get(rej, 0), "reason"), "non_finite"), "reason0 %s", jstr(json_array_get(rej, 0), "reason"));
    CHECK(!strcmp(jstr(json_array_get(rej, 1), "reason"), "not_unit_norm"), "reason1");
    json_decref(j);
    CHECK_EQ_INT(embedded_total(s), before + 1);
    before = embedded_total(s);

    /* Store verdicts: a stale lease_id and an item this worker never leased. */
    json_t *v = vec_b64(20, 384, 0);
    body = dumps(json_pack("{s:s, s:[{s:s, s:s, s:O}]}", "worker_id", "w1", "items", "target", "claim", "item_id",
                           "zzz-unknown", "vector_b64", v));
    st = http("POST", "/submit", TOK_W, body, &j);
    free(body);
    rej = json_object_get(j, "rejected");
    CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 0 && json_array_size(rej) == 1,
          "unknown item %ld", st);
    CHECK(!strcmp(jstr(json_array_get(rej, 0), "item_id"), "zzz-unknown"), "echo");
    json_decref(j);
    json_decref(v);
    CHECK_EQ_INT(embedded_total(s), before);

    /* Bad inputs: each gets its 4xx and changes nothing. */
    struct {
        const char *path, *body;
        int status;
        const char *code;
    } bad[] = {
        {"/lease", "{\"worker_id\": \"w1\", \"n\": 0}", 400, "bad_request"},
        {"/lease", "{\"worker_id\": \"w1\", \"n\": \"3\"}", 400, "bad_request"},
        {"/lease", "{\"worker_id\": \"w1\", \"n\": 3, \"target\": \"bogus\"}", 400, "bad_request"},
        {"/lease", "{\"worker_id\": \"w1\", \"n\": 3", 400, "bad_request"},
        {"/lease", "", 400, "bad_request"},
        {"/submit", "{\"worker_id\": \"w1\", \"items\": [{\"target\": \"claim\", \"item_id\": \"c5\", \"vector\": [1e999]}]}",
         400, "bad_request"},
        {"/submit", "{\"worker_id\": \"w1\", \"items\": [{\"target\": \"claim\", \"item_id\": \"c5\"}]}", 400,
         "bad_request"},
        {"/submit", "{\"worker_id\": \"w1\", \"items\": \"none\"}", 400, "bad_request"},
        {"/submit", "not json at all", 400, "bad_request"},
        {"/release", "{\"worker_id\": \"w1\", \"items\": [{\"item_id\": \"c5\"}]}", 400, "bad_request"},
        {"/report", "{\"worker_id\": \"w1\", \"kind\": 3, \"message\": \"m\"}", 400, "bad_request"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st = http("POST", bad[i].path, TOK_W, bad[i].body, &j);
        CHECK_ERR(st, j, bad[i].status, bad[i].code);
        json_decref(j);
    }
    CHECK_EQ_INT(embedded_total(s), before);

    /* 10,000-element vector: per-item wrong_dims, nothing stored. */
    json_t *big = json_array();
    for (int i = 0; i < 10000; i++) json_array_append_new(big, json_real(i == 0 ? 1.0 : 0.0));
    body = dumps(json_pack("{s:s, s:[{s:s, s:s, s:o}]}", "worker_id", "w1", "items", "target", "claim", "item_id",
                           "c5", "vector", big));
    st = http("POST", "/submit", TOK_W, body, &j);
    free(body);
    rej = json_object_get(j, "rejected");
    CHECK(st == 200 && json_array_size(rej) == 1 && !strcmp(jstr(json_array_get(rej, 0), "reason"), "wrong_dims"),
          "10k vector %ld", st);
    json_decref(j);
    CHECK_EQ_INT(embedded_total(s), before);

    /* Let every lease expire: the items rejected above become ready again,
     * so at least the two claims never embedded are there to lease. */
    __atomic_add_fetch(&g_clock_ms, 120000, __ATOMIC_SEQ_CST);
    /* A Python worker's json.dumps writes NaN for a NaN component: that item
     * is rejected (non_finite), the body is not refused. */
    body = dumps(json_pack("{s:s, s:[{s:s, s:s, s:o}]}", "worker_id", "w1", "items", "target", "claim", "item_id",
                           "c5", "vector", vec_json(30, 384, 1.0)));
    char *num = strstr(body, "\"vector\":[") + 10, *comma = strchr(num, ',');
    char *nanbody = malloc(strlen(body) + 8);
    sprintf(nanbody, "%.*sNaN%s", (int)(num - body), body, comma);
    free(body);
    st = http("POST", "/submit", TOK_W, nanbody, &j);
    free(nanbody);
    rej = json_object_get(j, "rejected");
    CHECK(st == 200 && json_array_size(rej) == 1 && !strcmp(jstr(json_array_get(rej, 0), "reason"), "non_finite"),
          "python NaN %ld", st);
    json_decref(j);
    CHECK_EQ_INT(embedded_total(s), before);

    /* Lease n over the cap: capped, not refused. */
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w3\", \"n\": 5000, \"target\": \"claim\"}", &j);
    batch = json_object_get(j, "batch");
    size_t got = json_array_size(batch);
    CHECK(st == 200 && got >= 2 && got <= 1024, "capped lease %ld, %zu items", st, got);
    /* Release them all: they become ready again. */
    items = json_array();
    for (size_t i = 0; i < got; i++) {
        json_t *it = json_array_get(batch, i);
        json_array_append_new(items, json_pack("{s:O, s:O, s:O}", "target", json_object_get(it, "target"), "item_id",
                                                json_object_get(it, "item_id"), "lease_id", json_object_get(it, "lease_id")));
    }
    json_decref(j);
    body = dumps(json_pack("{s:s, s:o}", "worker_id", "w3", "items", items));
    st = http("POST", "/release", TOK_W, body, &j);
    free(body);
    CHECK(st == 200 && (size_t)json_integer_value(json_object_get(j, "released")) == got, "release %ld", st);
    json_decref(j);
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w4\", \"n\": 100, \"target\": \"claim\"}", &j);
    CHECK(st == 200 && json_array_size(json_object_get(j, "batch")) == got, "re-lease after release");
    json_decref(j);
    /* Nothing ready now: an empty batch, not an error. */
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w4\", \"n\": 10, \"target\": \"claim\"}", &j);
    CHECK(st == 200 && json_is_array(json_object_get(j, "batch")) && json_array_size(json_object_get(j, "batch")) == 0,
          "empty batch");
    json_decref(j);

    /* Report: 200 {"ok": true}. */
    char msg[5000];
    memset(msg, 'x', 3000);
    msg[3000] = 0;
    body = dumps(json_pack("{s:s, s:s, s:s}", "worker_id", "w1", "kind", "crash", "message", msg));
    st = http("POST", "/report", TOK_W, body, &j);
    free(body);
    CHECK(st == 200 && json_is_true(json_object_get(j, "ok")), "report %ld", st);
    json_decref(j);

    /* Stats for an admin. */
    st = http("GET", "/stats", TOK_A, NULL, &j);
    json_t *cl = json_object_get(j, "claim");
    CHECK(st == 200 && json_integer_value(json_object_get(cl, "embedded")) >= 2 &&
              json_integer_value(json_object_get(cl, "total")) == 5 && json_object_get(j, "entity") &&
              json_object_get(j, "predicate") && json_object_get(j, "memory_chunk"),
          "stats %ld", st);
    json_decref(j);
}

/* ---- fake-only checks: limits, dead database, concurrency, drain ---------------------- */

static void test_limits(fakedb *db) {
    donto_coord *c = start(open_fake, db, 2, 2, 64 * 1024);
    json_t *j;
    size_t n = 100 * 1024;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    memcpy(big, "{\"worker_id\": \"w\", \"n\": 1}", 26);
    big[n] = 0;
    long st = http("POST", "/lease", TOK_W, big, &j);
    CHECK_ERR(st, j, 413, "payload_too_large");
    json_decref(j);
    /* Same without Content-Length (chunked): the limit holds while reading. */
    st = http_ex("POST", "/lease", TOK_W, big, n, 1, &j);
    CHECK_ERR(st, j, 413, "payload_too_large");
    json_decref(j);
    /* Just under the limit is parsed (trailing spaces are valid JSON). */
    st = http_ex("POST", "/lease", TOK_W, big, 60 * 1024, 1, &j);
    CHECK(st == 200, "under the limit, chunked: %ld", st);
    json_decref(j);
    free(big);
    donto_coord_stop(c, 5);
}

/* A store failure's code decides the answer, through one table: a busy or
 * unreachable database is 503 (retry), anything unclassified 500; the store's
 * own message never reaches the client. Faults injected into the real store
 * of the running coordinator. */
static void test_failure_codes(void) {
    json_t *j;
    donto_store_fault("lease", 1, DONTO_E_UNAVAILABLE);
    long st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 503, "database_unavailable");
    CHECK(!strstr(jstr(j, "message"), "injected"), "the store's message reached the client");
    json_decref(j);
    donto_store_fault("lease", 1, DONTO_E_INTERNAL);
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 500, "store_error");
    json_decref(j);
    donto_store_fault("token_check", 1, DONTO_E_UNAVAILABLE);
    st = http("GET", "/stats", TOK_A, NULL, &j);
    CHECK_ERR(st, j, 503, "database_unavailable");
    json_decref(j);
    /* /stats without the optional parts still answers (their failure is logged). */
    donto_store_fault("series", 1, DONTO_E_UNAVAILABLE);
    st = http("GET", "/stats", TOK_A, NULL, &j);
    CHECK(st == 200, "stats with the series failing: %ld", st);
    json_decref(j);
    donto_store_fault(NULL, 0, DONTO_E_NONE);
}

static void test_down(fakedb *db) {
    donto_coord *c = start(open_fake, db, 2, 2, 0);
    db->down = 1;
    json_t *j;
    long st = http("GET", "/health", NULL, NULL, &j);
    CHECK(st == 503 && json_is_false(json_object_get(j, "database")) && json_is_false(json_object_get(j, "ok")),
          "health down %ld", st);
    json_decref(j);
    st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"w\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 503, "database_unavailable");
    json_decref(j);
    db->down = 0;
    st = http("GET", "/health", NULL, NULL, &j);
    CHECK(st == 200, "health back %ld", st);
    json_decref(j);
    donto_coord_stop(c, 5);
}

typedef struct {
    int n_ok, n_req;
} hammer_res;

static void *hammer(void *arg) {
    hammer_res *r = arg;
    for (int i = 0; i < r->n_req; i++) {
        json_t *j;
        long st = i % 3 == 2 ? http("GET", "/stats", TOK_A, NULL, &j)
                             : http("POST", "/lease", TOK_W, "{\"worker_id\": \"h\", \"n\": 1}", &j);
        r->n_ok += st == 200;
        json_decref(j);
    }
    return NULL;
}

/* More threads than store handles: requests queue for the one handle and
 * all finish (no request ever holds one handle while waiting for another). */
static void test_concurrency(fakedb *db) {
    donto_coord *c = start(open_fake, db, 4, 1, 0);
    enum { T = 8, N = 15 };
    pthread_t th[T];
    hammer_res r[T];
    for (int i = 0; i < T; i++) r[i] = (hammer_res){0, N}, pthread_create(&th[i], NULL, hammer, &r[i]);
    int ok = 0;
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL), ok += r[i].n_ok;
    CHECK_EQ_INT(ok, T * N);
    donto_coord_stop(c, 5);
}

typedef struct {
    long st;
    _Atomic int done;
} slow_req;

static void *slow_lease(void *arg) {
    slow_req *r = arg;
    json_t *j = NULL;
    r->st = http("POST", "/lease", TOK_W, "{\"worker_id\": \"slow\", \"n\": 1}", &j);
    json_decref(j);
    atomic_store(&r->done, 1);
    return NULL;
}

typedef struct {
    donto_coord *c;
    double took;
} stop_arg;

static void *stop_coord(void *arg) {
    stop_arg *a = arg;
    double t0 = donto_now();
    donto_coord_stop(a->c, 10);
    a->took = donto_now() - t0;
    return NULL;
}

/* Stop while a request is in flight: it still gets its answer; a new
 * connection during the drain is refused at once (not left waiting in the
 * listen backlog until the drain ends), and after the stop nothing listens. */
static void test_drain(fakedb *db) {
    donto_coord *c = start(open_fake, db, 2, 2, 0);
    db->slow_ms = 1500;
    slow_req r = {0};
    pthread_t th, ts;
    pthread_create(&th, NULL, slow_lease, &r);
    nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);
    stop_arg sa = {c, 0};
    pthread_create(&ts, NULL, stop_coord, &sa);
    nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);
    json_t *j = NULL;
    long st = http("GET", "/health", NULL, NULL, &j);
    int lease_done = atomic_load(&r.done);
    json_decref(j);
    CHECK(st == 0, "a new connection during the drain was answered: %ld", st);
    CHECK(!lease_done, "a new connection during the drain waited for the drain to end");
    pthread_join(ts, NULL);
    pthread_join(th, NULL);
    db->slow_ms = 0;
    CHECK(r.st == 200, "in-flight request answered during drain: %ld", r.st);
    CHECK(sa.took < 5, "drain took %.1f s", sa.took);
    j = NULL;
    st = http("GET", "/health", NULL, NULL, &j);
    CHECK(st == 0, "still accepting after stop: %ld", st);
    json_decref(j);
}

static void test_base(fakedb *db) {
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = 1;
    cfg.base = "/api/v2/";
    cfg.open_store = open_fake;
    cfg.open_ctx = db;
    donto_coord *c = NULL;
    donto_err e = {0};
    CHECK(donto_coord_start(&cfg, &c, &e) == 0, "%s", e.msg);
    g_port = donto_coord_port(c);
    g_base = "/api/v2";
    json_t *j;
    CHECK(http("GET", "/health", NULL, NULL, &j) == 200, "custom base");
    json_decref(j);
    g_base = "/embed";
    CHECK(http("GET", "/health", NULL, NULL, &j) == 404, "old base gone");
    json_decref(j);
    donto_coord_stop(c, 5);
    /* Bad listen addresses fail cleanly. */
    const char *badl[] = {"127.0.0.1", "127.0.0.1:99999", ":80", "[::1:80", "127.0.0.1:8x", ""};
    for (size_t i = 0; i < sizeof badl / sizeof badl[0]; i++) {
        cfg.listen = badl[i];
        c = NULL;
        CHECK(donto_coord_start(&cfg, &c, &e) == -1 && c == NULL, "listen '%s' accepted", badl[i]);
    }
}

/* ---- the command line: migrate, token add/revoke, serve + SIGTERM ------------------ */

extern char **environ;

/* Spawn argv with stdout (fd 1) or stderr (fd 2) on a pipe; returns the pid. */
/* HTTPS (--tls-cert/--tls-key): a self-signed certificate made with the
 * openssl tool; a client that trusts it gets the normal answers, one that
 * does not is refused by its own TLS check, plain HTTP gets no answer, and a
 * bad key or half a configuration is a clear start error. */
static void test_tls(fakedb *db) {
    char dir[] = "/tmp/donto-tls-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char cmd[1024], crt[64], key[64];
    snprintf(crt, sizeof crt, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
             "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
             key, crt);
    CHECK(system(cmd) == 0, "openssl could not make a test certificate (is the openssl tool installed?)");
    char *cert_pem = NULL, *key_pem = NULL;
    size_t n;
    donto_err e = {0};
    CHECK(donto_read_file(crt, &cert_pem, &n, &e) == 0 && donto_read_file(key, &key_pem, &n, &e) == 0, "read PEM: %s",
          e.msg);
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = 2;
    cfg.open_store = open_fake;
    cfg.open_ctx = db;
    cfg.now_ms = test_clock;
    cfg.version = "test";
    donto_coord *c = NULL;

    /* Half a configuration, and a key that is not PEM: refused at start. */
    cfg.tls_cert_pem = cert_pem;
    CHECK(donto_coord_start(&cfg, &c, &e) != 0 && strstr(e.msg, "both"), "cert without key: %s", e.msg);
    cfg.tls_key_pem = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
    CHECK(donto_coord_start(&cfg, &c, &e) != 0 && strstr(e.msg, "TLS"), "garbage key: %s", e.msg);

    cfg.tls_key_pem = key_pem;
    if (cert_pem && key_pem && donto_coord_start(&cfg, &c, &e) == 0) {
        g_port = donto_coord_port(c);
        json_t *j = NULL;
        g_scheme = "https";
        g_cafile = crt;
        long st = http("GET", "/health", NULL, NULL, &j);
        CHECK(st == 200 && json_is_true(json_object_get(j, "ok")), "https health: %ld", st);
        json_decref(j);
        st = http("GET", "/stats", TOK_A, NULL, &j);
        CHECK(st == 200 && json_object_get(j, "claim"), "https stats with the admin token: %ld", st);
        json_decref(j);
        st = http("POST", "/lease", NULL, "{\"worker_id\":\"w\",\"n\":1}", &j);
        CHECK(st == 401, "https lease without a token: %ld", st);
        json_decref(j);
        /* A client that does not trust the certificate stops at its own check. */
        g_cafile = NULL;
        st = http("GET", "/health", NULL, NULL, NULL);
        CHECK(st == 0 && (g_curl_rc == CURLE_PEER_FAILED_VERIFICATION || g_curl_rc == CURLE_SSL_CACERT_BADFILE ||
                          g_curl_rc == CURLE_SSL_CONNECT_ERROR),
              "untrusted certificate: status %ld, curl %d", st, (int)g_curl_rc);
        /* Plain HTTP to the TLS port gets no HTTP answer. */
        g_scheme = "http";
        st = http("GET", "/health", NULL, NULL, NULL);
        CHECK(st != 200, "plain HTTP to the HTTPS port answered %ld", st);
        fprintf(stderr, "-- https: health/stats/401 over TLS, untrusted client refused (curl %d), plain HTTP refused\n",
                (int)g_curl_rc);
        donto_coord_stop(c, 5);
    } else {
        CHECK(0, "start with TLS: %s", e.msg);
    }
    g_scheme = "http";
    g_cafile = NULL;
    free(cert_pem);
    free(key_pem);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm %s", dir);
}

static pid_t spawn_piped(char *const argv[], int which_fd, int *rd) {
    int p[2];
    if (pipe(p)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], which_fd);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc) {
        close(p[0]);
        return -1;
    }
    *rd = p[0];
    return pid;
}

/* Read from fd into out (NUL-terminated) until EOF, cap, or timeout_s. */
static size_t read_some(int fd, char *out, size_t cap, size_t have, double timeout_s, const char *until) {
    double end = donto_now() + timeout_s;
    while (have + 1 < cap && donto_now() < end) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t n = read(fd, out + have, cap - 1 - have);
        if (n <= 0) break;
        have += (size_t)n;
        out[have] = 0;
        if (until && strstr(out, until)) break;
    }
    out[have] = 0;
    return have;
}


static int run_out(char *const argv[], char *out, size_t cap) {
    int fd;
    pid_t pid = spawn_piped(argv, 1, &fd);
    if (pid < 0) return -1;
    read_some(fd, out, cap, 0, 30, NULL);
    /* Drain what did not fit (closing the pipe early would kill the child
     * with SIGPIPE: serve --help is longer than 4 KiB). */
    char sink[4096];
    double end = donto_now() + 30;
    while (donto_now() < end) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        if (read(fd, sink, sizeof sink) <= 0) break;
    }
    close(fd);
    return wait_exit(pid, 30);
}

static void test_cli(void) {
    const char *bd = getenv("DONTO_BUILD_DIR");
    if (!bd) {
        fprintf(stderr, "-- DONTO_BUILD_DIR not set: command-line checks skipped\n");
        return;
    }
    char exe[1024], dir[] = "/tmp/donto-coord-cli-XXXXXX", db[1100], out[4096], tok[128], adm[128];
    snprintf(exe, sizeof exe, "%s/donto-embed", bd);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp");
        return;
    }
    snprintf(db, sizeof db, "%s/q.db", dir);
    char *mig[] = {exe, "migrate", "--db", db, NULL};
    CHECK(run_out(mig, out, sizeof out) == 0, "migrate");
    char *add[] = {exe, "token", "add", "alice", "--db", db, NULL};
    CHECK(run_out(add, out, sizeof out) == 0 && strlen(out) == 65, "token add: '%s'", out);
    snprintf(tok, sizeof tok, "%.64s", out);
    char *adda[] = {exe, "token", "add", "ops", "--role", "admin", "--db", db, NULL};
    CHECK(run_out(adda, out, sizeof out) == 0, "token add admin");
    snprintf(adm, sizeof adm, "%.64s", out);
    char *badrole[] = {exe, "token", "add", "x", "--role", "king", "--db", db, NULL};
    CHECK(run_out(badrole, out, sizeof out) == 2, "bad role is a usage error");
    char *list[] = {exe, "token", "list", "--db", db, NULL};
    CHECK(run_out(list, out, sizeof out) == 0 && strstr(out, "alice") && strstr(out, "admin") && !strstr(out, tok),
          "token list: %s", out);
    char *help[] = {exe, "serve", "--help", NULL};
    CHECK(run_out(help, out, sizeof out) == 0 && strstr(out, "--max-body"), "serve --help");
    char *serve[] = {exe, "serve", "--db", db, "--listen", "127.0.0.1:0", "--threads", "2", "--pool", "2", NULL};
    int fd;
    pid_t pid = spawn_piped(serve, 2, &fd);
    CHECK(pid > 0, "spawn serve");
    if (pid <= 0) return;
    char log[16384];
    size_t have = read_some(fd, log, sizeof log, 0, 20, "store handles");
    const char *p = strstr(log, "(port ");
    g_port = p ? atoi(p + 6) : 0;
    CHECK(g_port > 0, "serve did not say its port: %s", log);
    if (g_port > 0) {
        json_t *j;
        CHECK(http("GET", "/health", NULL, NULL, &j) == 200, "cli health");
        json_decref(j);
        CHECK(http("POST", "/lease", tok, "{\"worker_id\": \"w\", \"n\": 4}", &j) == 200 &&
                  json_array_size(json_object_get(j, "batch")) == 0,
              "cli lease");
        json_decref(j);
        CHECK(http("GET", "/stats", adm, NULL, &j) == 200, "cli stats");
        json_decref(j);
        char *rev[] = {exe, "token", "revoke", "alice", "--db", db, NULL};
        CHECK(run_out(rev, out, sizeof out) == 0, "token revoke");
        CHECK(http("POST", "/lease", tok, "{\"worker_id\": \"w\", \"n\": 4}", &j) == 401, "revoked at once");
        json_decref(j);
    }
    kill(pid, SIGTERM);
    int rc = wait_exit(pid, 30);
    read_some(fd, log, sizeof log, have, 2, NULL);
    close(fd);
    CHECK(rc == 0 && strstr(log, "stopped"), "serve after SIGTERM: rc %d, log:\n%s", rc, log);
    /* status: the queue's figures from the database, as text and as JSON. */
    {
        donto_store *s = NULL;
        donto_err e = {0};
        CHECK(donto_store_open(db, &s, &e) == 0, "open: %s", e.msg);
        donto_enqueue_item q[3] = {{DONTO_TARGET_CLAIM, "c1", "x", "BAAI/bge-small-en-v1.5"},
                                   {DONTO_TARGET_CLAIM, "c2", "y", "BAAI/bge-small-en-v1.5"},
                                   {DONTO_TARGET_ENTITY, "e1", "z", "BAAI/bge-small-en-v1.5"}};
        size_t added = 0;
        CHECK(s && donto_store_enqueue(s, q, 3, &added, &e) == 0 && added == 3, "enqueue: %s", e.msg);
        donto_store_close(s);
        char *st[] = {exe, "status", "--db", db, "--json", NULL};
        CHECK(run_out(st, out, sizeof out) == 0, "status --json");
        json_t *j = json_loads(out, 0, NULL);
        CHECK(json_integer_value(json_object_get(json_object_get(j, "claim"), "pending")) == 2 &&
                  json_integer_value(json_object_get(json_object_get(j, "entity"), "total")) == 1 &&
                  json_integer_value(json_object_get(j, "items_per_minute")) == 0,
              "status --json: %s", out);
        json_decref(j);
        char *st2[] = {exe, "status", "--db", db, NULL};
        CHECK(run_out(st2, out, sizeof out) == 0 && strstr(out, "memory_chunk") && strstr(out, "claim"), "status: %s", out);
        char *bad[] = {exe, "status", "--db", "/nonexistent-dir/q.db", NULL};
        CHECK(run_out(bad, out, sizeof out) == 1, "status on a missing database fails");
    }

    char side[1200];
    unlink(db);
    snprintf(side, sizeof side, "%s-wal", db);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", db);
    unlink(side);
    rmdir(dir);
}

/* `test_coord pg`: the scenario over PostgreSQL at DONTO_TEST_PG_URL (run by
 * scripts/pg-test-server, see tests/coord.cmake). */
/* ---- identity, roles, limits and suspension (issue 15, docs/trust.md) --------------- */

static const char *TOK_ALICE = "alice-token-0123456789";
static const char *TOK_MALLORY = "mallory-token-0123456789";
static const char *TOK_READER = "reader-token-0123456789";
static const char *TOK_ANALYST = "analyst-token-0123456789";

static long raw_count(donto_store *s, const char *sql_sqlite, const char *sql_pg) {
    donto_db db;
    donto_err e = {0};
    if (donto_store_db(s, &db, &e)) return -1;
    long n = -1;
    if (db.kind == DONTO_DB_SQLITE) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db.sqlite, sql_sqlite, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            n = (long)sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    } else {
        PGresult *r = PQexec(db.pg, sql_pg ? sql_pg : sql_sqlite);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    return n;
}

/* Lease n claims of model M as worker w with token tok; returns the batch. */
static json_t *lease_as(const char *tok, const char *w, int n) {
    char body[128];
    snprintf(body, sizeof body, "{\"worker_id\": \"%s\", \"n\": %d, \"target\": \"claim\"}", w, n);
    json_t *j = NULL;
    long st = http("POST", "/lease", tok, body, &j);
    CHECK(st == 200, "lease as %s: %ld", w, st);
    return j;
}

/* One item as a submit/release/extend body, from a leased item it. */
static char *item_body(const char *w, json_t *it, int with_lease, int with_vec) {
    json_t *o = json_pack("{s:O, s:O}", "target", json_object_get(it, "target"), "item_id", json_object_get(it, "item_id"));
    if (with_lease) json_object_set(o, "lease_id", json_object_get(it, "lease_id"));
    if (with_vec) json_object_set_new(o, "vector_b64", vec_b64(77, 384, 0));
    return dumps(json_pack("{s:s, s:[o]}", "worker_id", w, "items", o));
}

static void trust_scenario(donto_store *s, const char *label) {
    fprintf(stderr, "-- identity and trust on %s\n", label);
    donto_err e = {0};
    uint8_t h[32];
    hash_of(TOK_ALICE, h);
    CHECK(donto_store_token_add(s, "alice", DONTO_ROLE_CONTRIBUTOR, h, g_clock_ms, &e) == 0, "%s", e.msg);
    hash_of(TOK_MALLORY, h);
    CHECK(donto_store_token_add(s, "mallory", DONTO_ROLE_CONTRIBUTOR, h, g_clock_ms, &e) == 0, "%s", e.msg);
    hash_of(TOK_READER, h);
    CHECK(donto_store_token_add(s, "reader", DONTO_ROLE_READER, h, g_clock_ms, &e) == 0, "%s", e.msg);
    hash_of(TOK_ANALYST, h);
    CHECK(donto_store_token_add(s, "analyst", DONTO_ROLE_ANALYST, h, g_clock_ms, &e) == 0, "%s", e.msg);
    donto_enqueue_item q[4];
    static const char *ids[] = {"t1", "t2", "t3", "t4"};
    for (int i = 0; i < 4; i++)
        q[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], "a claim to check", "BAAI/bge-small-en-v1.5"};
    size_t added = 0;
    CHECK(donto_store_enqueue(s, q, 4, &added, &e) == 0 && added == 4, "enqueue: %s", e.msg);

    /* Alice leases as "a-w1"; Mallory claims to be "a-w1" too. */
    json_t *lb = lease_as(TOK_ALICE, "a-w1", 2);
    json_t *batch = json_object_get(lb, "batch");
    CHECK(json_array_size(batch) == 2, "alice leased %zu", json_array_size(batch));
    CHECK(json_integer_value(json_object_get(lb, "lease_ttl_ms")) == 60000, "lease answer names its ttl");
    json_t *it0 = json_array_get(batch, 0), *it1 = json_array_get(batch, 1);
    json_t *j = NULL;
    long st;
    for (int with_lease = 0; with_lease < 2 && it0; with_lease++) {
        char *b = item_body("a-w1", it0, with_lease, 1);
        st = http("POST", "/submit", TOK_MALLORY, b, &j);
        CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 0,
              "another token's submit as a-w1 (lease_id %s) was accepted: %ld upserted %lld",
              with_lease ? "given" : "not given", st, (long long)json_integer_value(json_object_get(j, "upserted")));
        json_t *rj = json_array_get(json_object_get(j, "rejected"), 0);
        CHECK(rj && !strcmp(jstr(rj, "reason"), "not_leased"), "spoofed submit: reason %s", rj ? jstr(rj, "reason") : "-");
        json_decref(j);
        free(b);
        b = item_body("a-w1", it0, with_lease, 0);
        st = http("POST", "/release", TOK_MALLORY, b, &j);
        CHECK(st == 200 && json_integer_value(json_object_get(j, "released")) == 0,
              "another token released a-w1's lease: %ld released %lld", st,
              (long long)json_integer_value(json_object_get(j, "released")));
        json_decref(j);
        st = http("POST", "/extend", TOK_MALLORY, b, &j);
        CHECK(st == 200 && json_integer_value(json_object_get(j, "extended")) == 0,
              "another token extended a-w1's lease: %ld", st);
        json_decref(j);
        free(b);
    }
    /* Alice herself: extend, then submit without lease_id (legacy), and it lands under her token. */
    char *b = item_body("a-w1", it1, 1, 0);
    st = http("POST", "/extend", TOK_ALICE, b, &j);
    CHECK(st == 200 && json_integer_value(json_object_get(j, "extended")) == 1, "alice's extend: %ld", st);
    json_decref(j);
    free(b);
    b = item_body("a-w1", it0, 0, 1);
    st = http("POST", "/submit", TOK_ALICE, b, &j);
    CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 1, "alice's own submit: %ld", st);
    json_decref(j);
    free(b);
    CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'alice' AND contributor = 'alice/a-w1' AND "
                       "verified = 0 AND text = 'a claim to check'", NULL) == 1,
          "the vector records its token, worker, text, unverified");
    /* A report is Mallory's whatever worker id it names. */
    st = http("POST", "/report", TOK_MALLORY, "{\"worker_id\": \"a-w1\", \"kind\": \"x\", \"message\": \"m\"}", &j);
    CHECK(st == 200, "report %ld", st);
    json_decref(j);
    CHECK(raw_count(s, "SELECT count(*) FROM reports WHERE worker_id = 'mallory/a-w1' AND token = 'mallory'", NULL) == 1,
          "the report records its token");

    /* Roles: recall is for readers and admins. */
    st = http("GET", "/recall?q=x", TOK_ALICE, NULL, &j);
    CHECK_ERR(st, j, 403, "forbidden");
    json_decref(j);
    st = http("GET", "/recall?q=x", TOK_READER, NULL, &j);
    CHECK(st == 503 && !strcmp(jstr(j, "error"), "no_model"), "a reader passes the gate: %ld", st);
    json_decref(j);
    /* An analyst queries the sheaf models only: no recall, no queue, no stats. */
    expect_err("GET", "/recall?q=x", TOK_ANALYST, NULL, 403, "forbidden");
    expect_err("POST", "/lease", TOK_ANALYST, "{\"worker_id\": \"an-w1\", \"n\": 1, \"target\": \"claim\"}", 403,
               "forbidden");
    expect_err("GET", "/stats", TOK_ANALYST, NULL, 403, "forbidden");

    /* Suspension: alice's unverified vector is withdrawn and its item queued
     * again; her requests get 403 suspended; the admin view says so. */
    int64_t withdrawn = 0;
    CHECK(donto_store_suspend(s, "alice", "test: a bad vector", g_clock_ms, &withdrawn, &e) == 0 && withdrawn == 1,
          "suspend: %s (withdrew %lld)", e.msg, (long long)withdrawn);
    CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'alice'", NULL) == 0, "vector withdrawn");
    CHECK(donto_store_suspend(s, "alice", "a second sweep", g_clock_ms + 5, &withdrawn, &e) == 0 && withdrawn == 0,
          "a second suspension: %s (withdrew %lld)", e.msg, (long long)withdrawn);
    CHECK(raw_count(s, "SELECT count(*) FROM reports WHERE token = 'alice' AND kind = 'suspended'", NULL) == 1,
          "one report per suspension, not per sweep");
    CHECK(raw_count(s, "SELECT count(*) FROM queue WHERE item_id = 't1' OR item_id = 't2'", NULL) == 2,
          "both items queued again (one withdrawn, one released)");
    CHECK(raw_count(s, "SELECT count(*) FROM queue WHERE (item_id = 't1' OR item_id = 't2') AND lease_owner IS NULL", NULL) >= 1,
          "alice's running lease released");
    st = http("POST", "/lease", TOK_ALICE, "{\"worker_id\": \"a-w1\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 403, "suspended");
    CHECK(strstr(jstr(j, "message"), "a bad vector") != NULL, "the 403 names the reason: %s", jstr(j, "message"));
    json_decref(j);
    st = http("GET", "/stats", TOK_A, NULL, &j);
    int seen = 0;
    json_t *tv;
    size_t ti;
    json_array_foreach(json_object_get(j, "tokens"), ti, tv) if (!strcmp(jstr(tv, "name"), "alice")) seen =
        json_is_true(json_object_get(tv, "suspended")) && json_integer_value(json_object_get(tv, "withdrawn")) == 1;
    CHECK(st == 200 && seen, "/stats shows alice suspended with 1 withdrawn");
    json_decref(j);
    int done = 0;
    CHECK(donto_store_unsuspend(s, "alice", &done, &e) == 0 && done == 1, "unsuspend: %s", e.msg);

    /* Checks: a passed one marks that very vector verified and counts; a
     * failed one zeroes the streak; verified-only reads see verified ones. */
    json_t *lb2 = lease_as(TOK_ALICE, "a-w1", 1);
    json_t *it = json_array_get(json_object_get(lb2, "batch"), 0);
    CHECK(it != NULL, "alice leases again after unsuspend");
    if (it) {
        b = item_body("a-w1", it, 1, 1);
        st = http("POST", "/submit", TOK_ALICE, b, &j);
        CHECK(st == 200 && json_integer_value(json_object_get(j, "upserted")) == 1, "submit after unsuspend: %ld", st);
        json_decref(j);
        free(b);
        donto_check chk[3] = {
            {DONTO_TARGET_CLAIM, jstr(it, "item_id"), NULL, json_integer_value(json_object_get(it, "lease_id")), 1},
            {DONTO_TARGET_CLAIM, jstr(it, "item_id"), NULL, 999999, 0},
            {DONTO_TARGET_CLAIM, jstr(it, "item_id"), NULL, 999999, 1},
        };
        CHECK(donto_store_trust_record(s, "alice", chk, 3, g_clock_ms, &e) == 0, "trust_record: %s", e.msg);
        donto_token_info *tl = NULL;
        size_t nt = 0;
        CHECK(donto_store_token_list(s, &tl, &nt, &e) == 0, "token list: %s", e.msg);
        for (size_t i = 0; i < nt; i++)
            if (!strcmp(tl[i].name, "alice"))
                CHECK(tl[i].trust.checks == 3 && tl[i].trust.failed == 1 && tl[i].trust.streak == 1 &&
                          !tl[i].trust.suspended,
                      "alice's record: checks %lld failed %lld streak %lld", (long long)tl[i].trust.checks,
                      (long long)tl[i].trust.failed, (long long)tl[i].trust.streak);
        donto_token_list_free(tl, nt);
        long verified = raw_count(s, "SELECT count(*) FROM vectors WHERE verified = 1 AND target = 0 AND "
                                     "model = 'BAAI/bge-small-en-v1.5'", NULL);
        CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'alice' AND verified = 1", NULL) == 1,
              "the checked vector is verified");
        int64_t all = 0, only = 0, mx = 0;
        CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "BAAI/bge-small-en-v1.5", INT64_MIN, &all, &mx, &e) == 0,
              "mark: %s", e.msg);
        donto_store_set_verified_only(s, 1);
        CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "BAAI/bge-small-en-v1.5", INT64_MIN, &only, &mx, &e) == 0,
              "mark: %s", e.msg);
        donto_store_set_verified_only(s, 0);
        CHECK(only == verified && all > only, "verified-only sees %lld of %lld (want %ld)", (long long)only,
              (long long)all, verified);
    }
    json_decref(lb2);
    json_decref(lb);
}

/* Fair limits: outstanding items, lease rate and report rate per token,
 * answered 429 with Retry-After. */
static void test_token_limits(const char *path) {
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = 2;
    cfg.pool = 2;
    cfg.open_store = open_url;
    cfg.open_ctx = (void *)path;
    cfg.now_ms = test_clock;
    cfg.lease_ttl_ms = 60000;
    cfg.version = "test";
    cfg.max_outstanding = 3;
    cfg.lease_per_s = 0.5; /* burst = max(rate, 100): the rate shows after 100 requests */
    cfg.report_per_min = 1;
    donto_coord *c = NULL;
    donto_err e = {0};
    CHECK(donto_coord_start(&cfg, &c, &e) == 0, "start: %s", e.msg);
    if (!c) return;
    g_port = donto_coord_port(c);
    json_t *j = NULL;
    long st = http("POST", "/lease", TOK_MALLORY, "{\"worker_id\": \"m1\", \"n\": 10}", &j);
    CHECK(st == 200 && json_array_size(json_object_get(j, "batch")) == 3, "capped at 3 outstanding: %ld, %zu", st,
          json_array_size(json_object_get(j, "batch")));
    json_decref(j);
    st = http("POST", "/lease", TOK_MALLORY, "{\"worker_id\": \"m2\", \"n\": 1}", &j);
    CHECK(st == 429 && !strcmp(jstr(j, "error"), "rate_limited") && atoi(g_retry_after) >= 1,
          "at the cap: %ld, Retry-After '%s'", st, g_retry_after);
    json_decref(j);
    /* Another token is not held back by Mallory's. */
    st = http("POST", "/lease", TOK_ALICE, "{\"worker_id\": \"a9\", \"n\": 1}", &j);
    CHECK(st == 200, "another token leases: %ld", st);
    json_decref(j);
    int limited = 0, i;
    for (i = 0; i < 12 && !limited; i++) {
        st = http("POST", "/report", TOK_MALLORY, "{\"worker_id\": \"m1\", \"kind\": \"k\", \"message\": \"m\"}", &j);
        limited = st == 429;
        json_decref(j);
    }
    CHECK(limited && i == 11 && atoi(g_retry_after) >= 1, "reports limited after the burst of 10: at %d, Retry-After '%s'",
          i, g_retry_after);
    donto_coord_stop(c, 5);
}

/* ---- verification on the coordinator (docs/trust.md) ------------------------------
 * A real engine (a tiny random BERT of the 384-d shape, written here) checks
 * submitted vectors: an honest token's pass, a random-vector token is
 * suspended by the verifier and its vectors withdrawn and queued again,
 * canary items come back in leases and a wrong answer to one suspends at
 * once. On a fresh SQLite file. */
#define VERIFY_MODEL "sentence-transformers/all-MiniLM-L6-v2"
static const char *TOK_HONEST = "honest-token-0123456789";
static const char *TOK_EVIL = "evil-token-0123456789";
static const char *TOK_EVIL2 = "evil2-token-0123456789";

static json_t *stats_verify(void) {
    json_t *j = NULL;
    long st = http("GET", "/stats", TOK_A, NULL, &j);
    json_t *v = st == 200 ? json_incref(json_object_get(j, "verify")) : NULL;
    json_decref(j);
    return v;
}

static int64_t verify_num(const char *k) {
    json_t *v = stats_verify();
    int64_t n = v ? json_integer_value(json_object_get(v, k)) : -1;
    json_decref(v);
    return n;
}

static int token_suspended(donto_store *s, const char *name) {
    donto_token_info *t = NULL;
    size_t n = 0;
    donto_err e = {0};
    int sus = -1;
    if (donto_store_token_list(s, &t, &n, &e) == 0)
        for (size_t i = 0; i < n; i++)
            if (!strcmp(t[i].name, name)) sus = t[i].trust.suspended;
    donto_token_list_free(t, n);
    return sus;
}

/* An item id's own seed: the "honest" vector of an item (replication tests). */
static unsigned item_seed(const char *id) {
    unsigned h = 2166136261u;
    for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
    return h;
}

/* Submit every item of a lease answer: vectors from enc; else, honest ones
 * seeded by the item id (honest) or random ones seeded rand_base + index. */
static long submit_vectors(const char *tok, const char *w, json_t *batch, donto_encoder *enc, int honest,
                           unsigned rand_base, json_t **out) {
    json_t *items = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(batch, i, it) {
        float v[384];
        const char *text = jstr(it, "text");
        if (enc) {
            size_t len = strlen(text);
            donto_err e = {0};
            if (donto_encoder_encode(enc, &text, &len, 1, v, NULL, &e)) CHECK(0, "encode: %s", e.msg);
        } else {
            unit(v, 384, honest ? item_seed(jstr(it, "item_id")) : rand_base + (unsigned)i);
        }
        char *b64 = donto_proto_f32_b64(v, 384);
        json_array_append_new(items, json_pack("{s:O, s:O, s:O, s:s, s:s}", "target", json_object_get(it, "target"),
                                               "item_id", json_object_get(it, "item_id"), "lease_id",
                                               json_object_get(it, "lease_id"), "model", VERIFY_MODEL,
                                               "vector_b64", b64));
        free(b64);
    }
    char *body = dumps(json_pack("{s:s, s:o}", "worker_id", w, "items", items));
    long st = http("POST", "/submit", tok, body, out);
    free(body);
    return st;
}

/* Honest vectors from enc, or random ones. */
static long submit_batch(const char *tok, const char *w, json_t *batch, donto_encoder *enc, json_t **out) {
    return submit_vectors(tok, w, batch, enc, 0, 1000, out);
}

static void test_verification(void) {
    fprintf(stderr, "-- verification with a real engine\n");
    char root[] = "/tmp/donto-coord-verify-XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char dir[128], db[128];
    snprintf(dir, sizeof dir, "%s/model", root);
    snprintf(db, sizeof db, "%s/q.db", root);
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = 384, sp.heads = 4, sp.inter = 64, sp.pooling = 1;
    CHECK(tiny_write(dir, &sp) == 0, "write the tiny model");
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 1;
    donto_encoder *enc = NULL;
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_encoder_open(dir, &o, &enc, &e) || donto_store_open(db, &s, &e) || donto_store_migrate(s, &e)) {
        CHECK(0, "setup: %s", e.msg);
        donto_encoder_close(enc);
        donto_store_close(s);
        return;
    }
    static const char *words[] = {"the", "quick", "brown", "fox", "dog", "cat", "is", "kind", "of", "animal"};
    enum { NITEMS = 60 };
    donto_enqueue_item q[NITEMS];
    char ids[NITEMS][16], texts[NITEMS][64];
    for (int i = 0; i < NITEMS; i++) {
        snprintf(ids[i], sizeof ids[i], "v%02d", i);
        snprintf(texts[i], sizeof texts[i], "%s %s %s %s", words[i % 10], words[(i / 10) % 10], words[(i * 7) % 10],
                 words[(i * 3 + 1) % 10]);
        q[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], texts[i], VERIFY_MODEL};
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, q, NITEMS, &added, &e) == 0 && added == NITEMS, "enqueue: %s", e.msg);
    const char *toks[] = {TOK_HONEST, TOK_EVIL, TOK_EVIL2, TOK_A};
    const char *names[] = {"honest", "evil", "evil2", "admin"};
    for (int i = 0; i < 4; i++) {
        uint8_t h[32];
        hash_of(toks[i], h);
        CHECK(donto_store_token_add(s, names[i], i == 3 ? DONTO_ROLE_ADMIN : DONTO_ROLE_CONTRIBUTOR, h, g_clock_ms, &e) == 0,
              "%s", e.msg);
    }
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = 2;
    cfg.pool = 3;
    cfg.db_url = db;
    cfg.lease_ttl_ms = 600000;
    cfg.version = "test";
    cfg.lease_per_s = -1;
    cfg.verify_model_dir = dir;
    cfg.verify_model_name = VERIFY_MODEL;
    cfg.verify_seed = 7;
    cfg.canary_rate = 1.0; /* every lease answer carries one, once there are any */
    donto_coord *c = NULL;
    CHECK(donto_coord_start(&cfg, &c, &e) == 0, "start: %s", e.msg);
    if (!c) goto out;
    g_port = donto_coord_port(c);

    /* Honest: its first items are all checked (untrusted), and pass. */
    json_t *j = NULL, *r = NULL;
    long st = http("POST", "/lease", TOK_HONEST, "{\"worker_id\": \"h1\", \"n\": 12, \"target\": \"claim\"}", &j);
    CHECK(st == 200 && json_array_size(json_object_get(j, "batch")) == 12, "honest lease: %ld", st);
    st = submit_batch(TOK_HONEST, "h1", json_object_get(j, "batch"), enc, &r);
    CHECK(st == 200 && json_integer_value(json_object_get(r, "upserted")) == 12, "honest submit: %ld", st);
    json_decref(j), json_decref(r);
    double end = donto_now() + 60;
    while (verify_num("checked") < 12 && donto_now() < end) msleep(20);
    CHECK(verify_num("passed") == 12 && verify_num("failed") == 0, "honest checks: passed %lld failed %lld",
          (long long)verify_num("passed"), (long long)verify_num("failed"));
    CHECK(verify_num("canaries_known") >= 12, "what the verifier embedded became canaries");

    /* A canary comes back in the next lease (an item already stored), and
     * the honest answer to it is taken as stored without touching the store. */
    st = http("POST", "/lease", TOK_HONEST, "{\"worker_id\": \"h1\", \"n\": 5, \"target\": \"claim\"}", &j);
    json_t *b = json_object_get(j, "batch");
    int canaries = 0;
    size_t bi;
    json_t *bv;
    json_array_foreach(b, bi, bv) canaries += atoi(jstr(bv, "item_id") + 1) < 12;
    CHECK(st == 200 && json_array_size(b) == 6 && canaries == 1, "a canary among 5 items: %zu items, %d canaries",
          json_array_size(b), canaries);
    int64_t before = embedded_total(s);
    st = submit_batch(TOK_HONEST, "h1", b, enc, &r);
    CHECK(st == 200 && json_integer_value(json_object_get(r, "upserted")) == 6 && !json_object_get(r, "rejected"),
          "the canary is answered as stored: %ld", st);
    CHECK(embedded_total(s) == before + 5, "the canary did not reach the store");
    CHECK(verify_num("canaries_passed") == 1, "canary passed");
    json_decref(j), json_decref(r);

    /* Random vectors: the verifier fails them; the token is suspended, its
     * vectors withdrawn and their items queued again. */
    st = http("POST", "/lease", TOK_EVIL, "{\"worker_id\": \"e1\", \"n\": 8, \"target\": \"claim\"}", &j);
    b = json_object_get(j, "batch");
    /* Keep only the real items: the canary would suspend it at once. */
    json_t *real = json_array();
    json_array_foreach(b, bi, bv) if (atoi(jstr(bv, "item_id") + 1) >= 17) json_array_append(real, bv);
    st = submit_batch(TOK_EVIL, "e1", real, NULL, &r);
    CHECK(st == 200 && json_integer_value(json_object_get(r, "upserted")) == (json_int_t)json_array_size(real),
          "random vectors are stored at first: %ld", st);
    json_decref(j), json_decref(r), json_decref(real);
    end = donto_now() + 60;
    while (token_suspended(s, "evil") != 1 && donto_now() < end) msleep(20);
    CHECK(token_suspended(s, "evil") == 1, "the verifier suspended evil");
    CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'evil'", NULL) == 0, "evil's vectors withdrawn");
    CHECK(raw_count(s, "SELECT count(*) FROM queue", NULL) == NITEMS - 17, "its items queued again: %ld",
          raw_count(s, "SELECT count(*) FROM queue", NULL));
    st = http("POST", "/lease", TOK_EVIL, "{\"worker_id\": \"e1\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 403, "suspended");
    json_decref(j);
    CHECK(token_suspended(s, "honest") == 0, "honest is not flagged");

    /* A wrong answer to a canary suspends in the submit itself. */
    st = http("POST", "/lease", TOK_EVIL2, "{\"worker_id\": \"x\", \"n\": 3, \"target\": \"claim\"}", &j);
    CHECK(st == 200 && json_array_size(json_object_get(j, "batch")) == 4, "evil2 lease (with a canary): %ld", st);
    st = submit_batch(TOK_EVIL2, "x", json_object_get(j, "batch"), NULL, &r);
    CHECK(st == 200 && token_suspended(s, "evil2") == 1 && verify_num("canaries_failed") == 1,
          "a failed canary suspends at once: %ld, suspended %d", st, token_suspended(s, "evil2"));
    json_decref(j), json_decref(r);
    donto_coord_stop(c, 5);
out:
    donto_store_close(s);
    donto_encoder_close(enc);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "clean up");
}

/* Replication (serve --replicate 2, no verifier): an untrusted token's
 * vectors wait as replicas; other tokens' leases carry them (at most half a
 * batch) like ordinary items; two agreeing tokens mark the stored vector
 * verified; a token whose vote disagrees with the quorum is suspended and
 * its unverified vectors withdrawn; replicas never reach the store. */
static long submit_vecs(const char *tok, const char *w, json_t *batch, int honest, json_t **out) {
    return submit_vectors(tok, w, batch, NULL, honest, 50000, out);
}

/* GET path's body as text (heap; NULL unless 200). */
static char *http_text(const char *path, const char *token) {
    CURL *c = curl_easy_init();
    char url[256], auth[256];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s%s", g_scheme, g_port, g_base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    buf b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (status != 200) free(b.p), b.p = NULL;
    return b.p;
}

static int64_t replication_num(const char *k) {
    json_t *j = NULL;
    long st = http("GET", "/stats", TOK_A, NULL, &j);
    json_t *v = st == 200 ? json_object_get(j, "replication") : NULL;
    int64_t n = v ? json_integer_value(json_object_get(v, k)) : -1;
    json_decref(j);
    return n;
}

/* Items of batch with ids v<lo>..v<hi>. */
static int has_ids(json_t *batch, int lo, int hi) {
    size_t i;
    json_t *it;
    int n = 0;
    json_array_foreach(batch, i, it) {
        int k = atoi(jstr(it, "item_id") + 1);
        n += k >= lo && k <= hi;
    }
    return n;
}

static long long verified_of(donto_store *s, const char *token) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM vectors WHERE token = '%s' AND verified = 1", token);
    return raw_count(s, sql, NULL);
}

static void test_replication(void) {
    fprintf(stderr, "-- replication\n");
    char root[] = "/tmp/donto-coord-repl-XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp");
        return;
    }
    char db[128];
    snprintf(db, sizeof db, "%s/q.db", root);
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(db, &s, &e) || donto_store_migrate(s, &e)) {
        CHECK(0, "setup: %s", e.msg);
        donto_store_close(s);
        return;
    }
    enum { NITEMS = 40 };
    donto_enqueue_item q[NITEMS];
    char ids[NITEMS][16];
    for (int i = 0; i < NITEMS; i++) {
        snprintf(ids[i], sizeof ids[i], "v%02d", i);
        q[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], "some text", VERIFY_MODEL};
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, q, NITEMS, &added, &e) == 0 && added == NITEMS, "enqueue: %s", e.msg);
    const char *toks[] = {"r1-token-0123456789", "r2-token-0123456789", "r3-token-0123456789",
                          "bad-token-0123456789", TOK_A};
    const char *names[] = {"r1", "r2", "r3", "bad", "admin"};
    for (int i = 0; i < 5; i++) {
        uint8_t h[32];
        hash_of(toks[i], h);
        CHECK(donto_store_token_add(s, names[i], i == 4 ? DONTO_ROLE_ADMIN : DONTO_ROLE_CONTRIBUTOR, h, g_clock_ms,
                                    &e) == 0,
              "%s", e.msg);
    }
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.threads = 2;
    cfg.pool = 3;
    cfg.db_url = db;
    cfg.lease_ttl_ms = 600000;
    cfg.version = "test";
    cfg.lease_per_s = -1;
    cfg.replicate = 2;
    cfg.trust_after = 4; /* a token with 4 replicas waiting is behind its checks */
    donto_coord *c = NULL;
    CHECK(donto_coord_start(&cfg, &c, &e) == 0, "start: %s", e.msg);
    if (!c) goto out;
    g_port = donto_coord_port(c);

    /* A. r1 (untrusted) stores v00-v07: 8 replicas wait, nothing verified;
     * r1 is behind its checks and no replica is there for it: 429. */
    json_t *j = lease_as(toks[0], "w", 8), *r = NULL;
    CHECK(json_array_size(json_object_get(j, "batch")) == 8, "r1 leases 8 real items");
    long st = submit_vecs(toks[0], "w", json_object_get(j, "batch"), 1, &r);
    CHECK(st == 200 && json_integer_value(json_object_get(r, "upserted")) == 8, "r1 submits: %ld", st);
    json_decref(j), json_decref(r);
    CHECK(replication_num("waiting") == 8 && replication_num("added") == 8, "8 replicas wait (%lld)",
          (long long)replication_num("waiting"));
    CHECK(verified_of(s, "r1") == 0, "nothing of r1's verified yet");
    st = http("POST", "/lease", toks[0], "{\"worker_id\": \"w\", \"n\": 8, \"target\": \"claim\"}", &j);
    CHECK_ERR(st, j, 429, "rate_limited");
    json_decref(j);

    /* B. r2 leases 2: one replica (v00) and one real item (v08). */
    j = lease_as(toks[1], "w", 2);
    json_t *b = json_object_get(j, "batch");
    CHECK(json_array_size(b) == 2 && has_ids(b, 0, 0) == 1 && has_ids(b, 8, 8) == 1, "r2's first batch: v00 + v08");
    int64_t before = embedded_total(s);
    st = submit_vecs(toks[1], "w", b, 1, &r);
    CHECK(st == 200 && json_integer_value(json_object_get(r, "upserted")) == 2 && !json_object_get(r, "rejected"),
          "r2's submit, the replica answered as stored: %ld", st);
    CHECK(embedded_total(s) == before + 1, "the replica did not reach the store");
    CHECK(verified_of(s, "r1") == 1, "r1's agreed vector is verified");
    json_decref(j), json_decref(r);

    /* C. r1, still behind, may vote: its lease carries r2's replica only. */
    j = lease_as(toks[0], "w", 8);
    b = json_object_get(j, "batch");
    CHECK(json_array_size(b) == 1 && has_ids(b, 8, 8) == 1, "a token behind its checks gets replicas only: %zu items",
          json_array_size(b));
    st = submit_vecs(toks[0], "w", b, 1, &r);
    CHECK(st == 200 && verified_of(s, "r2") == 1, "r1's vote verifies r2's v08: %ld", st);
    json_decref(j), json_decref(r);

    /* D. r2 leases 8: half of it replicas (r1's v01-v04), half real. */
    j = lease_as(toks[1], "w", 8);
    b = json_object_get(j, "batch");
    CHECK(json_array_size(b) == 8 && has_ids(b, 1, 4) == 4 && has_ids(b, 9, 12) == 4,
          "r2's batch: v01-v04 as replicas, v09-v12");
    st = submit_vecs(toks[1], "w", b, 1, &r);
    CHECK(st == 200 && verified_of(s, "r1") == 5, "r1's v00-v04 verified: %lld", verified_of(s, "r1"));
    json_decref(j), json_decref(r);
    CHECK(replication_num("agreed") == 6 && replication_num("waiting") == 7, "agreed %lld waiting %lld",
          (long long)replication_num("agreed"), (long long)replication_num("waiting"));

    /* E. bad gets the 4 oldest replicas (r1's v05-v07, r2's v09) and answers
     * with random vectors: no quorum yet, they wait for a third token. */
    j = lease_as(toks[3], "w", 8);
    b = json_object_get(j, "batch");
    CHECK(json_array_size(b) == 8 && has_ids(b, 5, 7) == 3 && has_ids(b, 9, 9) == 1, "bad's batch");
    st = submit_vecs(toks[3], "w", b, 0, &r);
    CHECK(st == 200 && token_suspended(s, "bad") == 0, "bad's submit: %ld, not suspended yet", st);
    json_decref(j), json_decref(r);
    CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'bad'", NULL) == 4, "bad stored its 4 real items");

    /* F. r3 breaks the ties: the first decided suspends bad, which withdraws
     * its vectors and its votes from the other three (decided by their
     * origin and r3 alone). */
    j = lease_as(toks[2], "w", 8);
    b = json_object_get(j, "batch");
    CHECK(has_ids(b, 5, 7) == 3 && has_ids(b, 9, 9) == 1, "r3 gets the 4 disputed replicas");
    st = submit_vecs(toks[2], "w", b, 1, &r);
    CHECK(st == 200, "r3's submit: %ld", st);
    json_decref(j), json_decref(r);
    CHECK(token_suspended(s, "bad") == 1, "bad is suspended");
    CHECK(raw_count(s, "SELECT count(*) FROM vectors WHERE token = 'bad'", NULL) == 0, "bad's vectors withdrawn");
    CHECK(verified_of(s, "r1") == 8 && verified_of(s, "r2") == 2, "r1's 8 and r2's v08, v09 verified");
    CHECK(replication_num("disagreed") == 1 && replication_num("agreed") == 9, "disagreed %lld agreed %lld",
          (long long)replication_num("disagreed"), (long long)replication_num("agreed"));
    CHECK(token_suspended(s, "r1") == 0 && token_suspended(s, "r2") == 0 && token_suspended(s, "r3") == 0,
          "no honest token flagged");
    st = http("POST", "/lease", toks[3], "{\"worker_id\": \"w\", \"n\": 1}", &j);
    CHECK_ERR(st, j, 403, "suspended");
    CHECK(strstr(jstr(j, "message"), "disagreed") != NULL, "the 403 names the reason: %s", jstr(j, "message"));
    json_decref(j);
    char *m = http_text("/metrics", TOK_A);
    CHECK(m && strstr(m, "donto_embed_replicas_total{outcome=\"disagreed\"} 1"), "metrics count the replicas");
    free(m);
    donto_coord_stop(c, 5);
out:
    donto_store_close(s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "clean up");
}

static int main_pg(void) {
    const char *url = getenv("DONTO_TEST_PG_URL");
    CHECK(url != NULL, "DONTO_TEST_PG_URL not set (run through scripts/pg-test-server)");
    donto_store *s = NULL;
    donto_err e = {0};
    if (url && donto_store_open(url, &s, &e) == 0 && donto_store_migrate(s, &e) == 0) {
        seed(s);
        donto_coord *c = start(open_url, (void *)url, 4, 3, 0);
        scenario(s, "postgres store");
        trust_scenario(s, "postgres store");
        donto_coord_stop(c, 5);
    } else if (url) {
        CHECK(0, "postgres store: %s", e.msg);
    }
    donto_store_close(s);
    curl_global_cleanup();
    return check_report("test_coord pg");
}

int main(int argc, char **argv) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    donto_log_set_level(DONTO_LOG_ERROR);
    if (argc > 1 && !strcmp(argv[1], "pg")) return main_pg();

    fakedb db;
    memset(&db, 0, sizeof db);
    pthread_mutex_init(&db.mu, NULL);
    {
        donto_store *s = NULL;
        donto_err e;
        open_fake(&db, &s, &e);
        seed(s);
        donto_coord *c = start(open_fake, &db, 2, 2, 0);
        scenario(s, "fake store");
        donto_coord_stop(c, 5);
        donto_store_close(s);
    }
    test_limits(&db);
    test_down(&db);
    test_concurrency(&db);
    test_drain(&db);
    test_base(&db);
    test_tls(&db);

    /* The real SQLite store, in a temp file shared by the pool's handles. */
    char path[] = "/tmp/donto-coord-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    donto_store *s = NULL;
    donto_err e = {0};
    if (fd >= 0 && donto_store_open(path, &s, &e) == 0 && donto_store_migrate(s, &e) == 0) {
        seed(s);
        donto_coord *c = start(open_url, path, 2, 2, 0);
        scenario(s, "sqlite store");
        trust_scenario(s, "sqlite store");
        test_failure_codes();
        donto_coord_stop(c, 5);
        test_token_limits(path);
        test_verification();
        test_replication();
    } else {
        CHECK(0, "sqlite store: %s", e.msg);
    }
    donto_store_close(s);
    if (fd >= 0) {
        char side[sizeof path + 8];
        unlink(path);
        snprintf(side, sizeof side, "%s-wal", path);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", path);
        unlink(side);
    }
    test_cli();
    pthread_mutex_destroy(&db.mu);
    curl_global_cleanup();
    return check_report("test_coord");
}
