/* Crash safety of the coordinator, driving the real `donto-embed serve` over
 * loopback (libcurl), on SQLite (default) or PostgreSQL (`test_coord_crash pg`
 * under scripts/pg-test-server, see tests/coord_crash.cmake):
 *
 *  (a) clients killed with SIGKILL in the middle of a lease/submit cycle
 *      (one after leasing a batch and submitting half of it, one at a random
 *      moment of its loop): their leased items come back after the lease TTL
 *      (2 s) and are completed by other clients; nothing lost or duplicated.
 *  (b) the coordinator restarted in the middle of a run of 4 clients, once
 *      with SIGTERM (drain) and once with SIGKILL: clients retry through the
 *      outage, the run completes, every item embedded exactly once.
 *
 * "Exactly once" is read from the store: embedded == items, nothing pending
 * or leased, and the contributors' totals (which never count a retried
 * submit twice) sum to the number of items. Clients are forked processes
 * (so they can be SIGKILLed) using their own curl handle with keep-alive.
 * Every wait is bounded. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "curlbuf.h"
#include "donto/store.h"
#include "donto/util.h"
#include "donto/wire.h"
#include "proc.h"

extern char **environ;

#define MODEL "BAAI/bge-small-en-v1.5"
#define DIMS 384
#define TTL_S 2

static char g_exe[1024], g_dir[256], g_db[1200], g_log[1300];
static char g_tok[80], g_adm[80];
static int g_port;
static pid_t g_serve = -1;


/* ---- processes ---------------------------------------------------------- */


/* Run argv, its stdout into out; exit status. */
static int run_out(char *const argv[], char *out, size_t cap) {
    int p[2];
    if (pipe(p)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
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
    size_t have = 0;
    ssize_t n;
    while (have + 1 < cap && (n = read(p[0], out + have, cap - 1 - have)) > 0) have += (size_t)n;
    out[have] = 0;
    close(p[0]);
    return wait_exit(pid, 60);
}


/* Start serve (stderr appended to g_log) on g_port (0: a free one, learnt
 * from the log). Retries a busy port for a while (the previous instance's
 * socket). Returns 0 when it answers /health. */
static int serve_start(void) {
    for (int attempt = 0; attempt < 40; attempt++) {
        char listen[64], ttl[16];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", g_port);
        snprintf(ttl, sizeof ttl, "%d", TTL_S);
        /* Its clients lease as fast as they can: no per-token lease rate. */
        char *argv[] = {g_exe, "serve", "--db", g_db, "--listen", listen, "--threads", "4", "--pool", "4",
                        "--lease-ttl", ttl, "--drain", "10", "--lease-rate", "0", NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 2, g_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        size_t before = 0;
        struct stat stb;
        if (stat(g_log, &stb) == 0) before = (size_t)stb.st_size;
        int rc = posix_spawn(&g_serve, g_exe, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc) return -1;
        double end = donto_now() + 20;
        while (donto_now() < end) {
            char *log = slurp(g_log);
            const char *mine = log && strlen(log) >= before ? log + before : "";
            const char *p = strstr(mine, "(port ");
            if (p && strstr(mine, "store handles")) {
                g_port = atoi(p + 6);
                return 0;
            }
            int st;
            if (waitpid(g_serve, &st, WNOHANG) == g_serve) break; /* exited: port busy? */
            msleep(50);
        }
        kill(g_serve, SIGKILL);
        waitpid(g_serve, NULL, 0);
        g_serve = -1;
        msleep(250);
    }
    return -1;
}

/* ---- HTTP (one keep-alive handle per process) -------------------------- */


static CURL *g_curl;

/* Status (0: transport failure) and the JSON body. */
static long http(const char *method, const char *path, const char *token, const char *body, json_t **out) {
    if (!g_curl) g_curl = curl_easy_init();
    CURL *c = g_curl;
    curl_easy_reset(c);
    char url[256], auth[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/embed%s", g_port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    h = curl_slist_append(h, auth);
    buf b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 15L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 3L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (!strcmp(method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    curl_slist_free_all(h);
    return status;
}

/* ---- a worker ----------------------------------------------------------- */

/* The vector a worker computes for an item: deterministic, unit norm. */
static void vec_of(const char *id, float *v) {
    uint32_t s = 2166136261u;
    for (const char *p = id; *p; p++) s = (s ^ (uint8_t)*p) * 16777619u;
    double ss = 0;
    for (int i = 0; i < DIMS; i++) {
        s = s * 1103515245u + 12345u;
        v[i] = (float)((int)(s >> 16 & 0x7fff) - 16384) / 16384.0f + 0.001f;
        ss += (double)v[i] * v[i];
    }
    for (int i = 0; i < DIMS; i++) v[i] = (float)(v[i] / sqrt(ss));
}

enum { W_LOOP = 0, W_HALF_THEN_HANG = 1 };

typedef struct {
    const char *worker;
    const char *target;
    int n;
    int64_t expect; /* items of target: done when embedded reaches it */
    int mode;
    int notify_fd;  /* W_HALF_THEN_HANG: written once half a batch is submitted */
    double deadline_s;
    int pause_ms;   /* "embedding" time per batch */
} wcfg;

/* Embedded count of target via /stats (admin); -1 when unreachable. */
static int64_t embedded_of(const char *target) {
    json_t *j = NULL;
    int64_t e = -1;
    if (http("GET", "/stats", g_adm, NULL, &j) == 200)
        e = json_integer_value(json_object_get(json_object_get(j, target), "embedded"));
    json_decref(j);
    return e;
}

/* POST until an answer that is not a transport failure or a 5xx (the
 * coordinator may be restarting); 0 when the deadline passes. */
static long post_retry(const char *path, const char *body, json_t **out, double end) {
    for (;;) {
        long st = http("POST", path, g_tok, body, out);
        if (st >= 200 && st < 500) return st;
        json_decref(*out);
        *out = NULL;
        if (donto_now() > end) return 0;
        msleep(100);
    }
}

/* Exit codes: 0 done, 3 a 4xx, 4 deadline, 5 rejected items when none may be. */
static int worker_main(const wcfg *w) {
    double end = donto_now() + w->deadline_s;
    char lease[512];
    snprintf(lease, sizeof lease, "{\"worker_id\": \"%s\", \"n\": %d, \"target\": \"%s\"}", w->worker, w->n,
             w->target);
    float v[DIMS];
    int first = 1;
    unsigned rnd = (unsigned)getpid();
    while (donto_now() < end) {
        json_t *j = NULL;
        long st = post_retry("/lease", lease, &j, end);
        if (st != 200) return st ? 3 : 4;
        json_t *batch = json_object_get(j, "batch");
        size_t nb = json_array_size(batch);
        if (nb == 0) {
            json_decref(j);
            if (embedded_of(w->target) >= w->expect) return 0;
            msleep(100);
            continue;
        }
        size_t upto = nb;
        if (w->mode == W_HALF_THEN_HANG && first) upto = nb / 2;
        first = 0;
        json_t *items = json_array();
        for (size_t i = 0; i < upto; i++) {
            json_t *it = json_array_get(batch, i);
            const char *id = json_string_value(json_object_get(it, "item_id"));
            vec_of(id, v);
            json_t *o = json_pack("{s:s, s:s, s:I}", "target", w->target, "item_id", id, "lease_id",
                                  json_integer_value(json_object_get(it, "lease_id")));
            rnd = rnd * 1103515245u + 12345u;
            if ((rnd >> 16) % 4 == 0) { /* some items as JSON numbers, most as base64 */
                json_t *a = json_array();
                for (int k = 0; k < DIMS; k++) json_array_append_new(a, json_real(v[k]));
                json_object_set_new(o, "vector", a);
            } else {
                char *b = donto_proto_f32_b64(v, DIMS);
                json_object_set_new(o, "vector_b64", json_string(b));
                free(b);
            }
            json_array_append_new(items, o);
        }
        json_decref(j);
        if (w->pause_ms) msleep(w->pause_ms);
        json_t *req = json_pack("{s:s, s:o}", "worker_id", w->worker, "items", items);
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        st = post_retry("/submit", body, &j, end);
        free(body);
        /* Rejections are allowed only as fencing at work: a lease that ran
         * out while the coordinator was down (lease_expired / not_leased);
         * those items are leased again by someone. */
        json_t *rej = json_object_get(j, "rejected");
        for (size_t i = 0; i < json_array_size(rej); i++) {
            const char *why = json_string_value(json_object_get(json_array_get(rej, i), "reason"));
            if (!why || (strcmp(why, "lease_expired") && strcmp(why, "not_leased"))) {
                fprintf(stderr, "%s: unexpected rejection %s\n", w->worker, why ? why : "?");
                json_decref(j);
                return 5;
            }
        }
        json_decref(j);
        if (st != 200) return st ? 3 : 4;
        if (w->mode == W_HALF_THEN_HANG && upto < nb) {
            if (write(w->notify_fd, "h", 1) != 1) return 6;
            for (;;) pause(); /* the parent kills us here, leases still held */
        }
    }
    return 4;
}

static pid_t fork_worker(const wcfg *w) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        g_curl = NULL; /* never share the parent's connections */
        int rc = worker_main(w);
        if (g_curl) curl_easy_cleanup(g_curl);
        _exit(rc);
    }
    return pid;
}

/* ---- store-side checks -------------------------------------------------- */

static void enqueue(int target, const char *prefix, int n) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) {
        CHECK(0, "open %s: %s", g_db, e.msg);
        return;
    }
    donto_enqueue_item *it = calloc((size_t)n, sizeof *it);
    char (*ids)[32] = calloc((size_t)n, sizeof *ids);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "%s-%05d", prefix, i);
        it[i] = (donto_enqueue_item){(donto_target)target, ids[i], "some text to embed", MODEL};
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, it, (size_t)n, &added, &e) == 0 && added == (size_t)n, "enqueue: %s", e.msg);
    free(it);
    free(ids);
    donto_store_close(s);
}

/* Exactly once: embedded == n, nothing pending or leased, contributor
 * totals of workers named prefix* sum to n. */
static void check_exactly_once(int target, const char *prefix, int n, const char *label) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) {
        CHECK(0, "open: %s", e.msg);
        return;
    }
    donto_target_stats st[DONTO_TARGET_N];
    int64_t now = (int64_t)(donto_now() * 1000); /* only splits pending/leased */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    CHECK(donto_store_stats(s, now, st, &e) == 0, "stats: %s", e.msg);
    CHECK(st[target].embedded == n && st[target].pending == 0 && st[target].leased == 0,
          "%s: embedded %lld pending %lld leased %lld, want %d/0/0", label, (long long)st[target].embedded,
          (long long)st[target].pending, (long long)st[target].leased, n);
    donto_contributor *c = NULL;
    size_t nc = 0;
    int64_t sum = 0;
    CHECK(donto_store_contributors(s, 100, 0, &c, &nc, &e) == 0, "contributors: %s", e.msg);
    for (size_t i = 0; i < nc; i++) {
        /* Stored as "<token>/<worker id>" (store.h). */
        const char *w = strchr(c[i].worker_id, '/');
        w = w ? w + 1 : c[i].worker_id;
        if (!strncmp(w, prefix, strlen(prefix))) sum += c[i].total;
    }
    CHECK(sum == n, "%s: contributors' totals sum to %lld, want %d (a duplicate or a loss)", label,
          (long long)sum, n);
    donto_contributor_list_free(c, nc);
    donto_store_close(s);
}

/* ---- (a) clients killed -------------------------------------------------- */

static void case_client_killed(void) {
    const int N = 300;
    enqueue(DONTO_TARGET_CLAIM, "a", N);
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    /* a-hang: leases 40, submits 20, then waits to be killed. */
    wcfg hang = {"a-hang", "claim", 40, N, W_HALF_THEN_HANG, p[1], 60, 0};
    double started = donto_now(); /* a-hang's leases are taken after this */
    pid_t h = fork_worker(&hang);
    char c;
    CHECK(read(p[0], &c, 1) == 1, "a-hang never got half way");
    kill(h, SIGKILL);
    CHECK(wait_exit(h, 10) == 128 + SIGKILL, "a-hang killed");
    double killed_at = donto_now();
    /* a-rand: a free-running client killed at a random moment of its loop. */
    wcfg rnd = {"a-rand", "claim", 8, N, W_LOOP, -1, 60, 5};
    pid_t r = fork_worker(&rnd);
    msleep(150 + (long)(getpid() % 200));
    kill(r, SIGKILL);
    int rr = wait_exit(r, 10);
    CHECK(rr == 128 + SIGKILL || rr == 0, "a-rand: %d", rr);
    /* Two clients finish the run; they must wait out the TTL of the dead ones' leases. */
    wcfg f1 = {"a-fin1", "claim", 16, N, W_LOOP, -1, 60, 0}, f2 = {"a-fin2", "claim", 16, N, W_LOOP, -1, 60, 0};
    pid_t q1 = fork_worker(&f1), q2 = fork_worker(&f2);
    int e1 = wait_exit(q1, 90), e2 = wait_exit(q2, 90);
    double took = donto_now() - killed_at, since = donto_now() - started;
    CHECK(e1 == 0 && e2 == 0, "finishers exit %d %d", e1, e2);
    CHECK(since >= TTL_S - 0.1, "the run ended %.2f s after a-hang leased: its lease came back before the TTL?",
          since);
    close(p[0]);
    close(p[1]);
    check_exactly_once(DONTO_TARGET_CLAIM, "a-", N, "clients killed");
    fprintf(stderr, "-- (a) clients killed: %d items done %.1f s after the kill\n", N, took);
}

/* ---- (b) coordinator restarted ------------------------------------------- */

static int64_t store_embedded(int target) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) return -1;
    donto_target_stats st[DONTO_TARGET_N];
    int64_t v = donto_store_stats(s, 0, st, &e) ? -1 : st[target].embedded;
    donto_store_close(s);
    return v;
}

static int wait_progress(int target, int64_t at_least, double timeout_s) {
    double end = donto_now() + timeout_s;
    while (donto_now() < end) {
        if (store_embedded(target) >= at_least) return 0;
        msleep(20);
    }
    return -1;
}

static void case_coord_restart(void) {
    const int N = 2000, W = 4;
    enqueue(DONTO_TARGET_ENTITY, "b", N);
    pid_t pids[W];
    wcfg w[W];
    char names[W][16];
    for (int i = 0; i < W; i++) {
        snprintf(names[i], sizeof names[i], "b-w%d", i);
        w[i] = (wcfg){names[i], "entity", 8 + 8 * i, N, W_LOOP, -1, 120, 20};
        pids[i] = fork_worker(&w[i]);
    }
    CHECK(wait_progress(DONTO_TARGET_ENTITY, N / 10, 60) == 0, "no progress before the SIGTERM");
    kill(g_serve, SIGTERM);
    int rc = wait_exit(g_serve, 30);
    CHECK(rc == 0, "serve after SIGTERM exits %d", rc);
    int64_t at_term = store_embedded(DONTO_TARGET_ENTITY);
    msleep(300); /* an outage: clients see refused connections */
    CHECK(serve_start() == 0, "restart after SIGTERM");
    /* (A drain serves keep-alive connections until they go idle, so the
     * count may have moved on a lot; kill half way through what is left.) */
    CHECK(wait_progress(DONTO_TARGET_ENTITY, at_term + (N - at_term + 1) / 2, 60) == 0,
          "no progress after the restart");
    kill(g_serve, SIGKILL);
    CHECK(wait_exit(g_serve, 10) == 128 + SIGKILL, "serve SIGKILLed");
    int64_t at_kill = store_embedded(DONTO_TARGET_ENTITY);
    msleep(300);
    CHECK(serve_start() == 0, "restart after SIGKILL");
    for (int i = 0; i < W; i++) {
        int e = wait_exit(pids[i], 150);
        CHECK(e == 0, "%s exits %d", names[i], e);
    }
    check_exactly_once(DONTO_TARGET_ENTITY, "b-", N, "coordinator restarted");
    fprintf(stderr, "-- (b) coordinator restarted: SIGTERM at %lld/%d, SIGKILL at %lld/%d, run complete\n",
            (long long)at_term, N, (long long)at_kill, N);
}

int main(int argc, char **argv) {
    int pg = argc > 1 && !strcmp(argv[1], "pg");
    const char *bd = getenv("DONTO_BUILD_DIR");
    if (!bd) {
        fprintf(stderr, "test_coord_crash: DONTO_BUILD_DIR not set\n");
        return 1;
    }
    snprintf(g_exe, sizeof g_exe, "%s/donto-embed", bd);
    snprintf(g_dir, sizeof g_dir, "/tmp/donto-crash-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_log, sizeof g_log, "%s/serve.log", g_dir);
    if (test_db_url("test_coord_crash", pg, g_dir, g_db, sizeof g_db)) return 1;
    loopback_only();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char out[4096];
    char *mig[] = {g_exe, "migrate", "--db", g_db, NULL};
    CHECK(run_out(mig, out, sizeof out) == 0, "migrate");
    char *add[] = {g_exe, "token", "add", "crash-worker", "--db", g_db, NULL};
    CHECK(run_out(add, out, sizeof out) == 0 && strlen(out) == 65, "token add");
    snprintf(g_tok, sizeof g_tok, "%.64s", out);
    char *adda[] = {g_exe, "token", "add", "crash-admin", "--role", "admin", "--db", g_db, NULL};
    CHECK(run_out(adda, out, sizeof out) == 0 && strlen(out) == 65, "token add admin");
    snprintf(g_adm, sizeof g_adm, "%.64s", out);
    if (check_failures == 0 && serve_start() == 0) {
        case_client_killed();
        case_coord_restart();
        if (g_serve > 0) {
            kill(g_serve, SIGTERM);
            CHECK(wait_exit(g_serve, 30) == 0, "final SIGTERM");
        }
    } else {
        CHECK(0, "could not start serve; log:\n%s", slurp(g_log) ? slurp(g_log) : "");
    }
    if (check_failures) fprintf(stderr, "serve log:\n%s\n", slurp(g_log) ? slurp(g_log) : "");
    char side[1400];
    unlink(g_log);
    if (!pg) {
        unlink(g_db);
        snprintf(side, sizeof side, "%s-wal", g_db);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", g_db);
        unlink(side);
    }
    rmdir(g_dir);
    if (g_curl) curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    return check_report(pg ? "test_coord_crash pg" : "test_coord_crash");
}
