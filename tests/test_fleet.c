/* Many coordinators, one database (docs/fleet.md; issue 20): three real
 * `donto-embed serve` processes on one PostgreSQL database (run through
 * scripts/pg-test-server, see tests/fleet.cmake), each on its own port,
 * verifying with a tiny generated BERT (hidden 384, served as
 * sentence-transformers/all-MiniLM-L6-v2, as tests/test_worker.c does), and
 * six real workers (`donto-embed work`, fp32, two tokens) spread over them,
 * two per coordinator.
 *
 * Mid run one coordinator is SIGKILLed, and its two workers with it (a lost
 * host: their leases stay in the database until the TTL); two new workers
 * start against the survivors. When every worker has gone idle the test
 * waits out the TTL and runs a last worker per survivor, until the queue is
 * empty. Then, from the database:
 *
 *  - exactly once: every enqueued item has exactly one vector, no vector
 *    for anything else, nothing pending, nothing leased (after the TTL);
 *  - no accepted submit lost: the contributors' totals (counted in the
 *    submit's own transaction, never twice for a retried submit) sum to the
 *    number of items, and every worker exited 0 or was the one killed;
 *  - no token suspended (the workers are honest);
 *
 * and from GET /embed/stats on each survivor: the fleet's figures, equal on
 * both and equal to the database's: per-target counts, the tokens' trust
 * records, the contributors' totals, and the verifier's and canaries'
 * counts (table donto_counters). Before those counts came from the
 * database, each coordinator showed its own: the survivors disagreed.
 *
 * Before the workers start, a token with none leases 200 items at each
 * coordinator under --max-outstanding 256: it must hold 256 in all (it held
 * 600 while each coordinator counted only its own leases), and releases
 * them through a coordinator that leased none. After the run, both
 * survivors are asked for recall at once while the test holds the claim
 * index's advisory lock: neither answers until it is released (each then
 * builds its own index, one after the other), and both answer the same.
 *
 * `test_fleet pg` only (the SQLite file of one host is not the setup);
 * every wait is bounded. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
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
#include "proc.h"
#include "tinybert.h"


#define MODEL "sentence-transformers/all-MiniLM-L6-v2"
#define DIMS 384
#define NCOORD 3
#define N_ITEMS 6000 /* a few seconds of work: the kill lands mid run even on a loaded machine */
#define TTL_S 4

static char g_exe[1024], g_dir[256], g_db[1200], g_model[512], g_adm[80];
static char g_tokfile[2][1300];
static int g_port[NCOORD];
static pid_t g_serve[NCOORD];

static void log_of(char *b, size_t cap, const char *what) { snprintf(b, cap, "%s/%s.log", g_dir, what); }

/* Coordinator i on a free port (learnt from its log); 0 when it is up. */
static int serve_start(int i) {
    char lg[1400], name[16], ttl[16];
    snprintf(name, sizeof name, "serve%d", i);
    log_of(lg, sizeof lg, name);
    snprintf(ttl, sizeof ttl, "%d", TTL_S);
    char *argv[] = {g_exe, "serve", "--db", g_db, "--listen", "127.0.0.1:0", "--threads", "4", "--pool", "4",
                    "--lease-ttl", ttl, "--drain", "5", "--lease-rate", "0", "--model", g_model, "--model-name",
                    MODEL, "--verify", "on", "--ann-min", "500",
                    "--max-outstanding", "256", NULL};
    g_serve[i] = spawn(argv, NULL, lg);
    if (g_serve[i] < 0) return -1;
    double end = donto_now() + 60;
    while (donto_now() < end) {
        char *log = slurp(lg);
        const char *p = log ? strstr(log, "(port ") : NULL;
        if (p && strstr(log, "store handles")) {
            g_port[i] = atoi(p + 6);
            return 0;
        }
        int st;
        if (waitpid(g_serve[i], &st, WNOHANG) == g_serve[i]) return -1;
        msleep(50);
    }
    return -1;
}

/* A worker against coordinator `coord` with token file tok; log <id>.log. */
static pid_t worker(const char *id, int coord, int tok) {
    char lg[1400], url[128];
    log_of(lg, sizeof lg, id);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/embed", g_port[coord]);
    char *argv[] = {g_exe, "work", "--url", url, "--model", g_model, "--model-name", MODEL, "--worker-id", (char *)id,
                    "-n", "16", "--threads", "1", "--idle-sleep", "0.2", "--exit-when-idle", "--token-file",
                    g_tokfile[tok], NULL};
    return spawn(argv, NULL, lg);
}

static void dump_log(const char *what) {
    char lg[1400];
    log_of(lg, sizeof lg, what);
    char *s = slurp(lg);
    size_t n = s ? strlen(s) : 0;
    fprintf(stderr, "---- %s log (last 3000 of its first 64 KiB):\n%s\n", what, s ? (n > 3000 ? s + n - 3000 : s) : "(none)");
}

/* ---- the database -------------------------------------------------------- */

static const char *text_of(int i, char *b, size_t cap) {
    unsigned s = (unsigned)i * 2654435761u + 7;
    size_t len = 0;
    int words = 3 + (int)(s % 18);
    b[0] = 0;
    for (int w = 0; w < words && len + 16 < cap; w++) {
        s = s * 1103515245u + 12345u;
        len += (size_t)snprintf(b + len, cap - len, "%s%s", w ? " " : "", tiny_words[5 + (s >> 16) % (TINY_NWORDS - 5)]);
    }
    if (i % 7 == 0) snprintf(b + len, cap - len, " xylophone %d", i);
    return b;
}

static void enqueue(int n) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) {
        CHECK(0, "open %s: %s", g_db, e.msg);
        return;
    }
    donto_enqueue_item *it = calloc((size_t)n, sizeof *it);
    char (*ids)[32] = calloc((size_t)n, sizeof *ids);
    char (*txt)[256] = calloc((size_t)n, sizeof *txt);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i], sizeof ids[i], "f-%05d", i);
        it[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], text_of(i, txt[i], sizeof txt[i]), MODEL};
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, it, (size_t)n, &added, &e) == 0 && added == (size_t)n, "enqueue: %zu, %s", added,
          e.msg);
    free(it), free(ids), free(txt);
    donto_store_close(s);
}

/* One integer from SQL; -1 on any failure. */
static int64_t sql_int(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    int64_t v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    else if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fprintf(stderr, "sql: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return v;
}

/* Claims embedded so far, through one handle kept open: polling must be
 * quick, or the run can finish between two polls on a loaded machine. */
static int64_t store_embedded(void) {
    static donto_store *s;
    donto_err e = {0};
    if (!s && donto_store_open_existing(g_db, &s, &e)) return -1;
    donto_target_stats st[DONTO_TARGET_N];
    return donto_store_stats(s, donto_unix_ms(), st, &e) ? -1 : st[DONTO_TARGET_CLAIM].embedded;
}

/* ---- /stats --------------------------------------------------------------- */

static json_t *http_json(int coord, const char *path, const char *token, const char *body, long *status) {
    CURL *c = curl_easy_init();
    char url[256], auth[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/embed%s", g_port[coord], path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    buf b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L); /* a recall may wait for the other's build */
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long st = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    json_t *j = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (status) *status = st;
    if (st != 200 && !status) json_decref(j), j = NULL;
    return j;
}

static json_t *get_json(int coord, const char *path) { return http_json(coord, path, g_adm, NULL, NULL); }

static json_t *get_stats(int coord) { return get_json(coord, "/stats"); }

static int64_t jnum(json_t *o, const char *a, const char *b) {
    json_t *x = json_object_get(o, a);
    if (b) x = json_object_get(x, b);
    return json_is_integer(x) ? (int64_t)json_integer_value(x) : -1;
}

/* The fleet's figures of a /stats answer, as one comparable line: per-target
 * counts, the verifier's and canaries' counts, each token's trust record, and
 * the contributors' totals (sorted by name as the store lists them). Not the
 * per-process gauges (verify.queued, canaries_known, canaries_out). */
static void fleet_line(json_t *j, char *out, size_t cap) {
    size_t len = 0;
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        const char *tn = donto_target_name((donto_target)t);
        len += (size_t)snprintf(out + len, cap - len, "%s=%lld/%lld/%lld/%lld ", tn, (long long)jnum(j, tn, "embedded"),
                                (long long)jnum(j, tn, "pending"), (long long)jnum(j, tn, "leased"),
                                (long long)jnum(j, tn, "total"));
    }
    static const char *vk[] = {"checked", "passed", "failed", "skipped_queue_full", "canaries_passed", "canaries_failed"};
    for (size_t k = 0; k < sizeof vk / sizeof *vk && len < cap; k++)
        len += (size_t)snprintf(out + len, cap - len, "verify.%s=%lld ", vk[k], (long long)jnum(j, "verify", vk[k]));
    json_t *toks = json_object_get(j, "tokens");
    for (size_t i = 0; i < json_array_size(toks) && len < cap; i++) {
        json_t *t = json_array_get(toks, i);
        len += (size_t)snprintf(out + len, cap - len, "token.%s=%lld/%lld/%lld/%lld ",
                                json_string_value(json_object_get(t, "name")), (long long)jnum(t, "checks", NULL),
                                (long long)jnum(t, "failed", NULL), (long long)jnum(t, "streak", NULL),
                                (long long)jnum(t, "withdrawn", NULL));
    }
    json_t *con = json_object_get(j, "contributors");
    for (size_t i = 0; i < json_array_size(con) && len < cap; i++) {
        json_t *t = json_array_get(con, i);
        len += (size_t)snprintf(out + len, cap - len, "%s=%lld ", json_string_value(json_object_get(t, "worker_id")),
                                (long long)jnum(t, "total", NULL));
    }
}

/* ---- the run ---------------------------------------------------------------- */

/* A token's items leased now, from the database. */
static int64_t leased_of(PGconn *pc, const char *token) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM queue WHERE lease_owner LIKE '%s/%%' AND lease_expires > %lld",
             token, (long long)donto_unix_ms());
    return sql_int(pc, sql);
}

/* --max-outstanding across the fleet: a token leasing from every
 * coordinator holds at most the cap in all (each coordinator used to count
 * only its own leases: three coordinators, three times the cap). Then it
 * releases everything through a coordinator that did not lease it. */
static void case_hoard(void) {
    char tok[80] = "";
    char path[1400];
    snprintf(path, sizeof path, "%s/fleet-h.tok", g_dir);
    const char *t = slurp(path);
    snprintf(tok, sizeof tok, "%.64s", t ? t : "");
    PGconn *pc = PQconnectdb(g_db);
    json_t *batch[NCOORD] = {NULL};
    long st[NCOORD] = {0};
    int64_t got[NCOORD] = {0};
    for (int i = 0; i < NCOORD; i++) {
        json_t *j = http_json(i, "/lease", tok, "{\"worker_id\": \"h\", \"n\": 200, \"target\": \"claim\"}", &st[i]);
        batch[i] = json_incref(json_object_get(j, "batch"));
        got[i] = (int64_t)json_array_size(batch[i]);
        json_decref(j);
    }
    int64_t held = leased_of(pc, "fleet-h");
    fprintf(stderr, "-- hoard: leases of 200 at 3 coordinators: %ld/%lld %ld/%lld %ld/%lld items (canaries included); "
            "%lld held in the database, cap 256\n", st[0], (long long)got[0], st[1], (long long)got[1], st[2],
            (long long)got[2], (long long)held);
    CHECK(st[0] == 200 && got[0] >= 200, "hoard: the first lease gets 200 (%ld, %lld)", st[0], (long long)got[0]);
    CHECK(held == 256, "hoard: the token holds %lld items across the fleet, the cap is 256", (long long)held);
    CHECK(st[2] == 429, "hoard: the third coordinator answers %ld, want 429 at the cap", st[2]);
    /* Release it all through coordinator 2 (none of it was leased there). */
    json_t *items = json_array();
    for (int i = 0; i < NCOORD; i++)
        for (size_t k = 0; k < json_array_size(batch[i]); k++) {
            json_t *it = json_array_get(batch[i], k);
            json_array_append_new(items, json_pack("{s:s, s:O, s:O}", "target", "claim", "item_id",
                                                   json_object_get(it, "item_id"), "lease_id",
                                                   json_object_get(it, "lease_id")));
        }
    json_t *req = json_pack("{s:s, s:o}", "worker_id", "h", "items", items);
    char *body = json_dumps(req, JSON_COMPACT);
    long rs = 0;
    json_t *j = http_json(2, "/release", tok, body, &rs);
    int64_t released = json_integer_value(json_object_get(j, "released"));
    CHECK(rs == 200 && released == held, "hoard: released %lld through another coordinator (%ld), want %lld",
          (long long)released, rs, (long long)held);
    CHECK(leased_of(pc, "fleet-h") == 0, "hoard: nothing left leased");
    json_decref(j), json_decref(req), free(body);
    for (int i = 0; i < NCOORD; i++) json_decref(batch[i]);
    PQfinish(pc);
}

typedef struct {
    char id[32];
    pid_t pid;
    int coord, killed;
} wproc;

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "pg")) {
        fprintf(stderr, "usage: test_fleet pg (under scripts/pg-test-server; see tests/fleet.cmake)\n");
        return 2;
    }
    const char *bd = getenv("DONTO_BUILD_DIR"), *url = getenv("DONTO_TEST_PG_URL");
    if (!bd || !url) {
        fprintf(stderr, "test_fleet: DONTO_BUILD_DIR and DONTO_TEST_PG_URL must be set (scripts/pg-test-server)\n");
        return 1;
    }
    snprintf(g_exe, sizeof g_exe, "%s/donto-embed", bd);
    snprintf(g_db, sizeof g_db, "%s", url);
    snprintf(g_dir, sizeof g_dir, "/tmp/donto-fleet-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_model, sizeof g_model, "%s/model", g_dir);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    double t0 = donto_now();

    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = DIMS, sp.layers = 2, sp.heads = 6, sp.inter = 256, sp.maxpos = 128, sp.pooling = 1, sp.seed = 7;
    CHECK(tiny_write(g_model, &sp) == 0, "write the tiny model");
    char path[1400];
    snprintf(path, sizeof path, "%s/model_name.txt", g_model);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "%s\n", MODEL), fclose(f);
    char setup_log[1400];
    log_of(setup_log, sizeof setup_log, "setup");
    char *mig[] = {g_exe, "migrate", "--db", g_db, NULL};
    pid_t p = spawn(mig, NULL, setup_log);
    CHECK(p > 0 && wait_exit(p, 60) == 0, "migrate");
    snprintf(path, sizeof path, "%s/admin.tok", g_dir);
    char *adda[] = {g_exe, "token", "add", "fleet-admin", "--role", "admin", "--db", g_db, NULL};
    p = spawn(adda, path, setup_log);
    CHECK(p > 0 && wait_exit(p, 60) == 0, "token add admin");
    char *s = slurp(path);
    snprintf(g_adm, sizeof g_adm, "%.64s", s ? s : "");
    char hpath[1400];
    snprintf(hpath, sizeof hpath, "%s/fleet-h.tok", g_dir);
    char *addh[] = {g_exe, "token", "add", "fleet-h", "--db", g_db, NULL};
    p = spawn(addh, hpath, setup_log);
    CHECK(p > 0 && wait_exit(p, 60) == 0, "token add fleet-h");
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "fleet-%c", 'a' + k);
        snprintf(g_tokfile[k], sizeof g_tokfile[k], "%s/%s.tok", g_dir, name);
        char *add[] = {g_exe, "token", "add", name, "--db", g_db, NULL};
        p = spawn(add, g_tokfile[k], setup_log);
        CHECK(p > 0 && wait_exit(p, 60) == 0, "token add %s", name);
    }
    enqueue(N_ITEMS);
    for (int i = 0; i < NCOORD && check_failures == 0; i++) CHECK(serve_start(i) == 0, "start coordinator %d", i);
    if (check_failures) {
        for (int i = 0; i < NCOORD; i++) {
            char n[16];
            snprintf(n, sizeof n, "serve%d", i);
            dump_log(n);
        }
        dump_log("setup");
        return check_report("test_fleet pg");
    }
    fprintf(stderr, "-- 3 coordinators on ports %d %d %d (%.1f s)\n", g_port[0], g_port[1], g_port[2], donto_now() - t0);

    case_hoard();
    /* Two workers per coordinator, one of each token. */
    wproc w[16];
    int nw = 0;
    for (int i = 0; i < NCOORD; i++)
        for (int k = 0; k < 2; k++) {
            snprintf(w[nw].id, sizeof w[nw].id, "w-c%d-%d", i, k);
            w[nw].coord = i, w[nw].killed = 0;
            w[nw].pid = worker(w[nw].id, i, k);
            nw++;
        }

    /* A third of the way: SIGKILL coordinator 0 and its workers. */
    double end = donto_now() + 60;
    while (store_embedded() < N_ITEMS / 3 && donto_now() < end) msleep(10);
    int64_t at_kill = store_embedded();
    CHECK(at_kill >= N_ITEMS / 3 && at_kill < N_ITEMS, "progress before the kill: %lld of %d", (long long)at_kill,
          N_ITEMS);
    kill(g_serve[0], SIGKILL);
    for (int i = 0; i < nw; i++)
        if (w[i].coord == 0) kill(w[i].pid, SIGKILL), w[i].killed = 1;
    CHECK(wait_exit(g_serve[0], 10) == 128 + SIGKILL, "coordinator 0 SIGKILLed");
    for (int i = 0; i < nw; i++)
        if (w[i].killed) CHECK(wait_exit(w[i].pid, 10) == 128 + SIGKILL, "%s SIGKILLed", w[i].id);
    g_serve[0] = -1;
    fprintf(stderr, "-- coordinator 0 and its 2 workers SIGKILLed at %lld/%d (%.1f s)\n", (long long)at_kill, N_ITEMS,
            donto_now() - t0);
    /* Its workers' replacements, one on each survivor. */
    for (int i = 1; i < NCOORD; i++) {
        snprintf(w[nw].id, sizeof w[nw].id, "w-moved-%d", i);
        w[nw].coord = i, w[nw].killed = 0;
        w[nw].pid = worker(w[nw].id, i, i - 1);
        nw++;
    }
    /* Every worker exits when a lease comes back empty; what the killed
     * ones held comes back after the TTL, for a last round of workers. */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < nw; i++) {
            if (w[i].killed || w[i].pid < 0) continue;
            int rc = wait_exit(w[i].pid, 150);
            CHECK(rc == 0, "%s exits %d", w[i].id, rc);
            if (rc) dump_log(w[i].id);
            w[i].pid = -1;
        }
        if (store_embedded() >= N_ITEMS || nw + NCOORD - 1 > 16) break;
        msleep((TTL_S + 1) * 1000);
        for (int i = 1; i < NCOORD; i++) {
            snprintf(w[nw].id, sizeof w[nw].id, "w-last-%d-%d", round, i);
            w[nw].coord = i, w[nw].killed = 0;
            w[nw].pid = worker(w[nw].id, i, i - 1);
            nw++;
        }
    }
    fprintf(stderr, "-- run complete: %lld/%d embedded (%.1f s)\n", (long long)store_embedded(), N_ITEMS,
            donto_now() - t0);
    /* The verifiers' last verdicts: wait until both survivors' queues are empty. */
    end = donto_now() + 30;
    while (donto_now() < end) {
        json_t *a = get_stats(1), *b = get_stats(2);
        int idle = a && b && jnum(a, "verify", "queued") == 0 && jnum(b, "verify", "queued") == 0;
        json_decref(a), json_decref(b);
        if (idle) break;
        msleep(100);
    }
    msleep(300);

    /* ---- the database: exactly once ---- */
    PGconn *pc = PQconnectdb(g_db);
    CHECK(PQstatus(pc) == CONNECTION_OK, "connect: %s", PQerrorMessage(pc));
    int64_t nvec = sql_int(pc, "SELECT count(*) FROM vectors");
    int64_t ndist = sql_int(pc, "SELECT count(DISTINCT (target, item_id)) FROM vectors");
    int64_t nours = sql_int(pc, "SELECT count(*) FROM vectors WHERE target = 0 AND item_id ~ '^f-[0-9]{5}$'");
    int64_t nqueue = sql_int(pc, "SELECT count(*) FROM queue");
    CHECK(nvec == N_ITEMS && ndist == N_ITEMS && nours == N_ITEMS,
          "exactly once: %lld vectors, %lld distinct items, %lld of ours; want %d each", (long long)nvec,
          (long long)ndist, (long long)nours, N_ITEMS);
    CHECK(nqueue == 0, "nothing left in the queue (pending or leased): %lld rows", (long long)nqueue);
    int64_t contrib = sql_int(pc, "SELECT coalesce(sum(total), 0) FROM contributors");
    CHECK(contrib == N_ITEMS, "no accepted submit lost or counted twice: contributors' totals %lld, want %d",
          (long long)contrib, N_ITEMS);
    int64_t susp = sql_int(pc, "SELECT count(*) FROM tokens WHERE suspended <> 0");
    CHECK(susp == 0, "no honest token suspended (%lld)", (long long)susp);
    int64_t checks = sql_int(pc, "SELECT coalesce(sum(checks), 0) FROM tokens");
    CHECK(checks > 0, "the coordinators checked something (%lld)", (long long)checks);

    /* ---- /stats: the fleet's figures on every survivor ---- */
    json_t *st[NCOORD] = {NULL};
    char line[NCOORD][8192];
    for (int i = 1; i < NCOORD; i++) {
        st[i] = get_stats(i);
        CHECK(st[i] != NULL, "GET /stats on coordinator %d", i);
        fleet_line(st[i], line[i], sizeof line[i]);
        fprintf(stderr, "-- coordinator %d /stats: %s\n", i, line[i]);
    }
    CHECK(strcmp(line[1], line[2]) == 0, "the survivors' /stats disagree:\n  coordinator 1: %s\n  coordinator 2: %s",
          line[1], line[2]);
    for (int i = 1; i < NCOORD; i++) {
        CHECK(jnum(st[i], "claim", "embedded") == nvec && jnum(st[i], "claim", "pending") == 0 &&
                  jnum(st[i], "claim", "leased") == 0,
              "coordinator %d: claim counts %s", i, line[i]);
        int64_t vp = sql_int(pc, "SELECT coalesce(sum(value), 0) FROM donto_counters WHERE name = 'verify_passed'");
        int64_t vf = sql_int(pc, "SELECT coalesce(sum(value), 0) FROM donto_counters WHERE name = 'verify_failed'");
        int64_t cp = sql_int(pc, "SELECT coalesce(sum(value), 0) FROM donto_counters WHERE name = 'canary_passed'");
        CHECK(jnum(st[i], "verify", "passed") == vp && jnum(st[i], "verify", "failed") == vf &&
                  jnum(st[i], "verify", "checked") == vp + vf && jnum(st[i], "verify", "canaries_passed") == cp,
              "coordinator %d: verify counts %lld/%lld, canaries %lld; the database's %lld/%lld, %lld", i,
              (long long)jnum(st[i], "verify", "passed"), (long long)jnum(st[i], "verify", "failed"),
              (long long)jnum(st[i], "verify", "canaries_passed"), (long long)vp, (long long)vf, (long long)cp);
        int64_t tsum = 0;
        json_t *toks = json_object_get(st[i], "tokens");
        for (size_t k = 0; k < json_array_size(toks); k++) tsum += jnum(json_array_get(toks, k), "checks", NULL);
        CHECK(tsum == checks, "coordinator %d: tokens' checks %lld, the database's %lld", i, (long long)tsum,
              (long long)checks);
    }
    fprintf(stderr, "-- fleet: %lld vectors, %lld checks recorded, %lld verifier verdicts, %lld canaries (%.1f s)\n",
            (long long)nvec, (long long)checks, (long long)jnum(st[1], "verify", "checked"),
            (long long)jnum(st[1], "verify", "canaries_passed"), donto_now() - t0);
    for (int i = 1; i < NCOORD; i++) json_decref(st[i]);

    /* Recall: each survivor builds its own ANN index (in memory; the build
     * under the database's advisory lock, one coordinator at a time), both
     * asked at once here; both answer, with the same nearest items. While
     * the test itself holds the claim index's lock (7316100 + claim), neither
     * may answer: a build waits for the lock. */
    int64_t locked = sql_int(pc, "SELECT 1 FROM (SELECT pg_advisory_lock(7316100 + 0)) AS l");
    CHECK(locked == 1, "the test takes the recall index lock");
    char ids[NCOORD][512] = {{0}};
    pid_t rq[NCOORD];
    int rp[NCOORD][2];
    for (int i = 1; i < NCOORD; i++) {
        CHECK(pipe(rp[i]) == 0, "pipe");
        fflush(NULL);
        rq[i] = fork();
        if (rq[i] == 0) {
            json_t *j = get_json(i, "/recall?q=the%20quick%20brown%20fox&k=5&target=claim");
            char b[512] = "";
            size_t len = 0;
            json_t *hits = json_object_get(j, "hits");
            if (!hits) hits = json_object_get(j, "results");
            for (size_t k = 0; k < json_array_size(hits); k++)
                len += (size_t)snprintf(b + len, sizeof b - len, "%s ",
                                        json_string_value(json_object_get(json_array_get(hits, k), "item_id")));
            if (!j) snprintf(b, sizeof b, "(no answer)");
            ssize_t wr = write(rp[i][1], b, strlen(b));
            _exit(wr < 0);
        }
        close(rp[i][1]);
    }
    msleep(1500);
    int reaped[NCOORD] = {0};
    for (int i = 1; i < NCOORD; i++) {
        int wst = 0;
        reaped[i] = waitpid(rq[i], &wst, WNOHANG) == rq[i];
        CHECK(!reaped[i], "coordinator %d answered /recall while the test held the index lock", i);
    }
    CHECK(sql_int(pc, "SELECT 1 FROM (SELECT pg_advisory_unlock(7316100 + 0)) AS l") == 1, "release the lock");
    PQfinish(pc);
    for (int i = 1; i < NCOORD; i++) {
        ssize_t n = read(rp[i][0], ids[i], sizeof ids[i] - 1);
        ids[i][n > 0 ? n : 0] = 0;
        close(rp[i][0]);
        CHECK(reaped[i] || wait_exit(rq[i], 60) == 0, "recall client %d", i);
        fprintf(stderr, "-- coordinator %d /recall: %s\n", i, ids[i]);
    }
    CHECK(ids[1][0] && strcmp(ids[1], "(no answer)") && strcmp(ids[1], ids[2]) == 0,
          "the survivors' recall differs: '%s' and '%s'", ids[1], ids[2]);
    /* One build at a time: the builds (end time, duration from each log)
     * do not overlap. */
    double bend[NCOORD] = {0}, bdur[NCOORD] = {0};
    for (int i = 1; i < NCOORD; i++) {
        char lg[1400], n[16];
        snprintf(n, sizeof n, "serve%d", i);
        log_of(lg, sizeof lg, n);
        const char *l = slurp(lg);
        const char *b = l ? strstr(l, "recall: built the claim index") : NULL;
        CHECK(b != NULL, "coordinator %d built its own claim index", i);
        if (!b) continue;
        const char *ln = b;
        while (ln > l && ln[-1] != '\n') ln--;
        int hh = 0, mm = 0;
        double ss = 0;
        const char *in = strstr(b, " in ");
        if (sscanf(ln, "%*d-%*d-%*dT%d:%d:%lfZ", &hh, &mm, &ss) == 3 && in) {
            bend[i] = hh * 3600 + mm * 60 + ss;
            bdur[i] = atof(in + 4);
        }
    }
    int first = bend[1] <= bend[2] ? 1 : 2, second = 3 - first;
    fprintf(stderr, "-- recall builds: coordinator %d ended at %.3f after %.2f s, coordinator %d at %.3f after %.2f s\n",
            first, bend[first], bdur[first], second, bend[second], bdur[second]);
    /* (The logs' times are to the millisecond, the durations to 0.1 s.) */
    CHECK(bend[second] - bdur[second] >= bend[first] - 0.06, "the two coordinators built their indexes at once");

    for (int i = 1; i < NCOORD; i++) {
        if (g_serve[i] <= 0) continue;
        kill(g_serve[i], SIGTERM);
        CHECK(wait_exit(g_serve[i], 30) == 0, "coordinator %d exits 0 after SIGTERM", i);
    }
    if (check_failures) {
        for (int i = 0; i < NCOORD; i++) {
            char n[16];
            snprintf(n, sizeof n, "serve%d", i);
            dump_log(n);
        }
    }
    curl_global_cleanup();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (!check_failures && system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report("test_fleet pg");
}
