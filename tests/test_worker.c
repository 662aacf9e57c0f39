/* `donto-embed work` against a real `donto-embed serve` on loopback, on
 * SQLite (default) or PostgreSQL (`test_worker pg` under
 * scripts/pg-test-server, see tests/worker.cmake), with a tiny generated BERT
 * (hidden 384, so the coordinator's 384-dim model table accepts it) served
 * as sentence-transformers/all-MiniLM-L6-v2 (named in the model directory's
 * model_name.txt):
 *
 *  (a) 3 workers (--exit-when-idle) on a few thousand items; one SIGKILLed
 *      mid run, the coordinator restarted (SIGTERM) mid run; a last worker
 *      after the lease TTL finishes what the dead one held. Every item is
 *      embedded exactly once (store counts, contributor totals), and every
 *      stored vector equals `donto-embed embed` of the same text
 *      (cosine >= 0.99999).
 *  (b) Ctrl-C: a worker holding leases gets SIGINT, exits 0, and nothing is
 *      left leased at once, with a 900 s lease TTL (only /release explains it).
 *  (c) items of another model are refused: released and reported.
 *  (e) --max-items stops after exactly that many items.
 *  (d) a legacy coordinator: 400 to vector_b64 -> JSON numbers; answers that
 *      are not JSON or not a batch are errors (backoff, one report), no crash.
 *  (h) 429 waits Retry-After (and is not reported); a coordinator without
 *      /extend (404) switches heartbeats off; 403 suspended stops the worker
 *      (exit 1) with the coordinator's reason.
 *  (f) batches that take 2.5 lease TTLs to embed (long texts, one thread,
 *      the batch sized from the speed measured here): the worker's
 *      heartbeats (POST /extend) keep its leases, every item is embedded
 *      once, nothing comes back lease_expired (issue 15's livelock).
 *  (g) two workers that never extend, each batch 1.5 TTLs, competing for
 *      fewer items than a batch: the coordinator's halved batches end the
 *      livelock, both finish in bounded time.
 *
 * `test_worker [pg] fabric MODEL_DIR CORPUS.jsonl` runs (a) alone at full
 * size: every text of the corpus (corpus/fabric.jsonl: 24,000 claims) with
 * the real model in MODEL_DIR, 3 workers, one SIGKILLed mid batch, the
 * coordinator restarted mid run, exactly once, vectors equal to
 * `donto-embed embed` (tests/worker.cmake: fabric_e2e, fabric_e2e_pg).
 * Every wait is bounded. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <libpq-fe.h>
#include <curl/curl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "proc.h"
#include "donto/encoder.h"
#include "donto/store.h"
#include "donto/util.h"
#include "donto/wire.h"
#include "tinybert.h"


#define MODEL "sentence-transformers/all-MiniLM-L6-v2"
#define OTHER_MODEL "BAAI/bge-base-en-v1.5"
#define DIMS 384
/* Lease TTLs, each for a reason:
 *   PIPELINE_TTL_S (a): only the SIGKILLed worker's items wait for it (then
 *     w-afin takes them); live workers extend their leases at a third of it,
 *     so it bounds how long an extend may take to get through (2/3 of it),
 *     not how long a batch may take. It was 3 s, which a busy machine's
 *     batches outlived when nothing extended them (issue 15: fabric_e2e's
 *     "w-a1 exits -1", a stream of lease_expired). fabric_e2e: 20 s (13 s
 *     for an extend on a machine busy with 3 real-model workers; at most
 *     20 s of waiting after the kill, against minutes of embedding); the
 *     tiny model's run: 8 s (5 s for an extend; 8 s of waiting).
 *   SLOW_TTL_S (f), (g): short on purpose, the batches are sized to outlive
 *     it; 3 s leaves an extend (sent after 1 s) 2 s to arrive.
 *   900 (b, c, e): a lease that never expires during the case (b shows
 *     that only /release can explain an empty queue). */
#define PIPELINE_TTL_S (g_texts ? 20 : 8)
#define SLOW_TTL_S 3
/* Claims' ids under --vectors donto: UUID_PREFIX-%012d is a uuid. */
#define UUID_PREFIX "c0000000-0000-4000-8000"

static char g_exe[1024], g_dir[256], g_db[1200], g_log[1300], g_model[512], g_tokfile[1300];
static char g_tok[80], g_url[128];
static int g_port, g_pg;
static int g_donto; /* fabric ... donto: serve --vectors donto, claims' ids are uuids */
static const char *g_model_name = MODEL;
static char **g_texts; /* fabric mode: the corpus texts, else NULL */
static int g_ntexts;
static pid_t g_serve = -1;



static int run(char *const argv[], const char *out) {
    pid_t p = spawn(argv, out, g_log);
    return p < 0 ? -1 : wait_exit(p, 600);
}


static int serve_start(int ttl) {
    for (int attempt = 0; attempt < 40; attempt++) {
        char listen[64], ttls[16];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", g_port);
        snprintf(ttls, sizeof ttls, "%d", ttl);
        char *argv[] = {g_exe, "serve", "--db", g_db, "--listen", listen, "--threads", "4", "--pool", "4",
                        "--lease-ttl", ttls, "--drain", "10", "--vectors", g_donto ? "donto" : "own", NULL};
        size_t before = 0;
        struct stat stb;
        if (stat(g_log, &stb) == 0) before = (size_t)stb.st_size;
        g_serve = spawn(argv, NULL, g_log);
        if (g_serve < 0) return -1;
        double end = donto_now() + 20;
        while (donto_now() < end) {
            char *log = slurp(g_log);
            const char *mine = log && strlen(log) >= before ? log + before : "";
            const char *p = strstr(mine, "(port ");
            if (p && strstr(mine, "store handles")) {
                g_port = atoi(p + 6);
                snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d/embed", g_port);
                return 0;
            }
            int st;
            if (waitpid(g_serve, &st, WNOHANG) == g_serve) break;
            msleep(50);
        }
        kill(g_serve, SIGKILL);
        waitpid(g_serve, NULL, 0);
        g_serve = -1;
        msleep(250);
    }
    return -1;
}

static void serve_stop(void) {
    if (g_serve <= 0) return;
    kill(g_serve, SIGTERM);
    CHECK(wait_exit(g_serve, 30) == 0, "serve exits 0 after SIGTERM");
    g_serve = -1;
}

/* A worker process; its log is <dir>/<id>.log. */
static pid_t worker(const char *id, int n, const char *target, int use_token_file, const char *extra) {
    char logp[1400], ns[16];
    snprintf(logp, sizeof logp, "%s/%s.log", g_dir, id);
    snprintf(ns, sizeof ns, "%d", n);
    char *argv[24];
    int k = 0;
    argv[k++] = g_exe, argv[k++] = "work", argv[k++] = "--url", argv[k++] = g_url, argv[k++] = "--model",
    argv[k++] = g_model, argv[k++] = "--worker-id", argv[k++] = (char *)id, argv[k++] = "-n", argv[k++] = ns,
    argv[k++] = "--threads", argv[k++] = "1", argv[k++] = "--idle-sleep", argv[k++] = "0.2",
    argv[k++] = "--target", argv[k++] = (char *)target, argv[k++] = "--model-name",
    argv[k++] = (char *)g_model_name;
    if (use_token_file) argv[k++] = "--token-file", argv[k++] = g_tokfile;
    if (extra) argv[k++] = (char *)extra;
    argv[k] = NULL;
    return spawn(argv, NULL, logp);
}

static void dump_worker_log(const char *id) {
    char logp[1400];
    snprintf(logp, sizeof logp, "%s/%s.log", g_dir, id);
    char *s = slurp(logp);
    fprintf(stderr, "---- %s log:\n%s\n", id, s ? s : "(none)");
}

/* ---- store side ---------------------------------------------------------- */

static const char *text_of(int i, char *b, size_t cap) {
    if (g_texts) return g_texts[i];
    unsigned s = (unsigned)i * 2654435761u + 7;
    size_t len = 0;
    int words = 3 + (int)(s % 18);
    b[0] = 0;
    for (int w = 0; w < words && len + 16 < cap; w++) {
        s = s * 1103515245u + 12345u;
        const char *word = tiny_words[5 + (s >> 16) % (TINY_NWORDS - 5)];
        len += (size_t)snprintf(b + len, cap - len, "%s%s", w ? " " : "", word);
    }
    if (i % 7 == 0) snprintf(b + len, cap - len, " xylophone %d", i); /* unknown words too */
    return b;
}

typedef const char *(*text_fn)(int i, char *b, size_t cap);

static void enqueue_texts(int target, const char *prefix, int n, const char *model, text_fn fn);

/* A text as long as the tiny model reads (maxpos 128): the slow case's
 * batches take long because each text is. */
#define LONG_TEXT_MAX 1024
static const char *long_text(int i, char *b, size_t cap) {
    unsigned s = (unsigned)i * 2246822519u + 3;
    size_t len = (size_t)snprintf(b, cap, "item %d:", i);
    for (int w = 0; w < 150 && len + 16 < cap; w++) {
        s = s * 1103515245u + 12345u;
        len += (size_t)snprintf(b + len, cap - len, " %s", tiny_words[5 + (s >> 16) % (TINY_NWORDS - 5)]);
    }
    return b;
}

static void enqueue(int target, const char *prefix, int n, const char *model) {
    enqueue_texts(target, prefix, n, model, text_of);
}

static void enqueue_texts(int target, const char *prefix, int n, const char *model, text_fn fn) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) {
        CHECK(0, "open %s: %s", g_db, e.msg);
        return;
    }
    if (g_donto) CHECK(donto_store_set_vectors(s, DONTO_VECTORS_DONTO, &e) == 0, "vectors donto: %s", e.msg);
    donto_enqueue_item *it = calloc((size_t)n, sizeof *it);
    char (*ids)[48] = calloc((size_t)n, sizeof *ids);
    char (*txt)[LONG_TEXT_MAX] = calloc((size_t)n, sizeof *txt);
    for (int i = 0; i < n; i++) {
        /* donto's layout keys claims by uuid: PREFIX-%012d then reads as
         * one when PREFIX is its first four groups (UUID_PREFIX). */
        snprintf(ids[i], sizeof ids[i], g_donto ? "%s-%012d" : "%s-%05d", prefix, i);
        it[i] = (donto_enqueue_item){(donto_target)target, ids[i], fn(i, txt[i], sizeof txt[i]), model};
    }
    /* Big batches in one call would hold SQLite's writer lock for long; the
     * store takes any n, but enqueue in slices like a loader would. */
    size_t added = 0;
    for (int i = 0; i < n; i += 5000) {
        size_t m = (size_t)(n - i < 5000 ? n - i : 5000), a = 0;
        CHECK(donto_store_enqueue(s, it + i, m, &a, &e) == 0, "enqueue: %s", e.msg);
        added += a;
    }
    CHECK(added == (size_t)n, "enqueued %zu of %d", added, n);
    free(it);
    free(ids);
    free(txt);
    donto_store_close(s);
}

static int store_stats(int target, donto_target_stats *out) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) return -1;
    donto_target_stats st[DONTO_TARGET_N];
    int rc = donto_store_stats(s, donto_unix_ms(), st, &e);
    if (!rc) *out = st[target];
    donto_store_close(s);
    return rc;
}

static int64_t store_embedded(int target) {
    donto_target_stats st;
    return store_stats(target, &st) ? -1 : st.embedded;
}

static int wait_progress(int target, int64_t at_least, double timeout_s) {
    double end = donto_now() + timeout_s;
    while (donto_now() < end) {
        if (store_embedded(target) >= at_least) return 0;
        msleep(10);
    }
    return -1;
}

static int64_t contributor_sum(const char *prefix) {
    donto_store *s = NULL;
    donto_err e = {0};
    if (donto_store_open(g_db, &s, &e)) return -1;
    donto_contributor *c = NULL;
    size_t nc = 0;
    int64_t sum = 0;
    if (donto_store_contributors(s, 1000, 0, &c, &nc, &e)) sum = -1;
    for (size_t i = 0; i < nc; i++) {
        /* Stored as "<token>/<worker id>" (store.h). */
        const char *w = strchr(c[i].worker_id, '/');
        w = w ? w + 1 : c[i].worker_id;
        if (!strncmp(w, prefix, strlen(prefix))) sum += c[i].total;
    }
    donto_contributor_list_free(c, nc);
    donto_store_close(s);
    return sum;
}

/* Stored vectors of target: calls fn(item_id, floats, dims). */
typedef void (*vec_fn)(const char *id, const float *v, int dims, void *u);

/* Fabric with --vectors donto: the claims' vectors as donto reads them,
 * from donto_vector (float4[] as text, parsed back exactly). */
static int each_donto_vector(vec_fn fn, void *u) {
    PGconn *c = PQconnectdb(g_db);
    if (PQstatus(c) != CONNECTION_OK) return PQfinish(c), -1;
    const char *pv[1] = {g_model_name};
    PGresult *r = PQexecParams(c,
                               "SELECT subject_id::text, embedding::text FROM donto_vector WHERE subject_type = "
                               "'statement' AND model_id = $1",
                               1, NULL, pv, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : -1;
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        float v[DIMS * 2];
        int d = 0;
        const char *p = PQgetvalue(r, i, 1);
        while (*p && *p != '}' && d < DIMS * 2) {
            char *end;
            v[d++] = strtof(p + 1, &end); /* after '{' or ',' */
            p = end;
        }
        fn(PQgetvalue(r, i, 0), v, d, u);
    }
    PQclear(r);
    PQfinish(c);
    return rc;
}

/* One number from a query on the PostgreSQL database (model name as $1). */
static long long pg_count(const char *sql) {
    PGconn *c = PQconnectdb(g_db);
    const char *pv[1] = {g_model_name};
    PGresult *r = PQexecParams(c, sql, 1, NULL, pv, NULL, NULL, 0);
    long long n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : -1;
    if (n < 0) fprintf(stderr, "pg_count: %s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return n;
}

/* The acceptance of --vectors donto, in plain SQL: every claim item has its
 * row in donto_vector (statement, its uuid, the model's name), of
 * dimensions 384 and a unit-norm float4[] of 384, and its ledger row in
 * vectors holds no bytes of its own. */
static void check_donto_rows(int n) {
    long long rows = pg_count("SELECT count(*) FROM donto_vector WHERE subject_type = 'statement' AND model_id = $1");
    long long good = pg_count(
        "SELECT count(*) FROM donto_vector WHERE subject_type = 'statement' AND model_id = $1 AND dimensions = 384 "
        "AND array_length(embedding, 1) = 384 AND abs((SELECT sqrt(sum(x::float8 * x)) FROM unnest(embedding) x) - 1) "
        "< 1e-3 AND model_version = '" DONTO_VECTOR_MODEL_VERSION "'");
    long long missing = pg_count("SELECT count(*) FROM vectors v WHERE v.target = 0 AND v.model = $1 AND NOT EXISTS "
                                 "(SELECT 1 FROM donto_vector d WHERE d.subject_type = 'statement' AND "
                                 "d.subject_id = v.item_id::uuid AND d.model_id = v.model)");
    long long own = pg_count("SELECT count(*) FROM vectors WHERE target = 0 AND model = $1 AND octet_length(vec) > 0");
    CHECK(rows == n && good == n && missing == 0 && own == 0,
          "donto_vector: %lld rows, %lld of dimensions 384 and unit norm, want %d; %lld items without a row; %lld "
          "ledger rows with bytes of their own",
          rows, good, n, missing, own);
    fprintf(stderr, "-- donto_vector: %lld rows, %lld with dimensions = 384 and a unit-norm float4[384]\n", rows, good);
}

static int each_vector(int target, vec_fn fn, void *u) {
    if (g_donto && target == DONTO_TARGET_CLAIM) return each_donto_vector(fn, u);
    if (g_pg) {
        PGconn *c = PQconnectdb(g_db);
        if (PQstatus(c) != CONNECTION_OK) return PQfinish(c), -1;
        char t[8];
        snprintf(t, sizeof t, "%d", target);
        const char *pv[1] = {t};
        PGresult *r = PQexecParams(c, "SELECT item_id, vec FROM vectors WHERE target = $1::int", 1, NULL, pv, NULL,
                                   NULL, 1);
        int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : -1;
        for (int i = 0; !rc && i < PQntuples(r); i++) {
            char id[256];
            int il = PQgetlength(r, i, 0);
            snprintf(id, sizeof id, "%.*s", il, PQgetvalue(r, i, 0));
            float v[DIMS * 2];
            int bl = PQgetlength(r, i, 1);
            if (bl > (int)sizeof v) bl = (int)sizeof v;
            memcpy(v, PQgetvalue(r, i, 1), (size_t)bl);
            fn(id, v, bl / 4, u);
        }
        PQclear(r);
        PQfinish(c);
        return rc;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(g_db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return sqlite3_close(db), -1;
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT item_id, vec FROM vectors WHERE target = ?", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int(st, 1, target);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            float v[DIMS * 2];
            int bl = sqlite3_column_bytes(st, 1);
            if (bl > (int)sizeof v) bl = (int)sizeof v;
            memcpy(v, sqlite3_column_blob(st, 1), (size_t)bl);
            fn((const char *)sqlite3_column_text(st, 0), v, bl / 4, u);
        }
        rc = rc == SQLITE_DONE ? 0 : -1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rc ? -1 : 0;
}

typedef struct {
    const float *ref;
    int n;
    const char *prefix;
    int seen, bad, bad_dims;
    double worst;
} cmp_ctx;

static void cmp_one(const char *id, const float *v, int dims, void *u) {
    cmp_ctx *c = u;
    size_t pl = strlen(c->prefix);
    int i = strncmp(id, c->prefix, pl) ? -1 : atoi(id + pl + 1);
    if (i < 0 || i >= c->n || dims != DIMS) {
        c->bad_dims++;
        return;
    }
    c->seen++;
    const float *r = c->ref + (size_t)i * DIMS;
    double dot = 0, na = 0, nb = 0;
    for (int k = 0; k < DIMS; k++) dot += (double)v[k] * r[k], na += (double)v[k] * v[k], nb += (double)r[k] * r[k];
    double cs = dot / sqrt(na * nb);
    if (cs < c->worst) c->worst = cs;
    if (!(cs >= 0.99999)) c->bad++;
}

/* Stored vectors == `donto-embed embed` of the same texts. */
static void check_vectors(int target, const char *prefix, int n) {
    char in[1400], out[1400];
    snprintf(in, sizeof in, "%s/texts.jsonl", g_dir);
    snprintf(out, sizeof out, "%s/ref.f32", g_dir);
    FILE *f = fopen(in, "w");
    if (!f) {
        CHECK(0, "write %s", in);
        return;
    }
    for (int i = 0; i < n; i++) {
        char t[256];
        json_t *o = json_pack("{s:i, s:s}", "id", i, "text", text_of(i, t, sizeof t));
        char *s = json_dumps(o, JSON_COMPACT);
        fprintf(f, "%s\n", s);
        free(s);
        json_decref(o);
    }
    fclose(f);
    char *argv[] = {g_exe, "embed", "--model", g_model, "--in", in, "--out", out, "--format", "f32", "--threads", "2", NULL};
    CHECK(run(argv, NULL) == 0, "donto-embed embed");
    FILE *r = fopen(out, "rb");
    float *ref = calloc((size_t)n * DIMS, sizeof(float));
    size_t got = r ? fread(ref, sizeof(float), (size_t)n * DIMS, r) : 0;
    if (r) fclose(r);
    CHECK(got == (size_t)n * DIMS, "reference vectors: %zu floats, want %d", got, n * DIMS);
    if (g_donto && target == DONTO_TARGET_CLAIM) check_donto_rows(n);
    cmp_ctx c = {ref, n, prefix, 0, 0, 0, 2.0};
    CHECK(each_vector(target, cmp_one, &c) == 0, "read the stored vectors");
    CHECK(c.seen == n && c.bad_dims == 0, "stored vectors: %d of %d (%d malformed)", c.seen, n, c.bad_dims);
    CHECK(c.bad == 0, "%d stored vectors differ from donto-embed embed (worst cosine %.7f)", c.bad, c.worst);
    fprintf(stderr, "-- %d stored vectors match donto-embed embed, worst cosine %.7f\n", c.seen, c.worst);
    free(ref);
    unlink(in);
    unlink(out);
}

/* Recall reads what the fabric stored (fabric mode): for 5 items spread
 * over the run whose texts are unique, `donto-embed recall --json` with the
 * item's own text (same model, same store layout as serve: --vectors donto
 * reads claims' embeddings from donto_vector) finds the item with a score
 * of at least 0.999. */
static char *read_all(const char *path);

static void check_recall(const char *prefix, int n) {
    char out[1400], kb[8] = "10";
    snprintf(out, sizeof out, "%s/recall.json", g_dir);
    int tried = 0, found = 0;
    for (int pick = 0; pick < 5; pick++) {
        int i = (int)((long long)(n - 1) * pick / 4), dup = 0;
        for (int j = 0; j < n && !dup; j++) dup = j != i && !strcmp(g_texts[j], g_texts[i]);
        if (dup) continue;
        char want[48];
        snprintf(want, sizeof want, g_donto ? "%s-%012d" : "%s-%05d", prefix, i);
        char *argv[] = {g_exe, "recall", "--db", g_db, "--vectors", g_donto ? "donto" : "own", "--model", g_model,
                        "--model-name", (char *)g_model_name, "-k", kb, "--threads", "2", "--json", g_texts[i], NULL};
        CHECK(run(argv, out) == 0, "donto-embed recall exits 0 (see %s)", g_log);
        char *s = read_all(out);
        json_t *j = s ? json_loads(s, 0, NULL) : NULL, *hits = json_object_get(j, "hits");
        double score = -2;
        for (size_t h = 0; h < json_array_size(hits); h++) {
            json_t *o = json_array_get(hits, h);
            const char *id = json_string_value(json_object_get(o, "item_id"));
            if (id && !strcmp(id, want)) score = json_real_value(json_object_get(o, "score"));
        }
        CHECK(score >= 0.999, "recall of item %d's own text: %s %s (score %.5f; %zu hits)", i, want,
              score < -1 ? "not among the hits" : "found", score, json_array_size(hits));
        found += score >= 0.999;
        json_decref(j);
        free(s);
        tried++;
    }
    CHECK(tried >= 3, "only %d of 5 picked items have unique texts", tried);
    fprintf(stderr, "-- recall (--vectors %s) finds %d of %d items by their own texts, score >= 0.999\n",
            g_donto ? "donto" : "own", found, tried);
}

/* ---- (a) 3 workers, one killed, the coordinator restarted ---------------- */

static void case_pipeline(void) {
    const int N = g_texts ? g_ntexts : 3000;
    const int lease_n = g_texts ? 128 : 32;
    const double slack = 60 + N / 100.0; /* seconds: bounded, generous for a loaded CI machine */
    const char *prefix = g_donto ? UUID_PREFIX : "c";
    enqueue(DONTO_TARGET_CLAIM, prefix, N, g_model_name);
    const char *ids[3] = {"w-a0", "w-a1", "w-a2"};
    pid_t p[3];
    for (int i = 0; i < 3; i++) p[i] = worker(ids[i], lease_n, "claim", i == 0, "--exit-when-idle");
    CHECK(wait_progress(DONTO_TARGET_CLAIM, N / 6, slack) == 0, "no progress before the kill");
    kill(p[0], SIGKILL);
    CHECK(wait_exit(p[0], 10) == 128 + SIGKILL, "w-a0 SIGKILLed");
    double killed = donto_now();
    int64_t at_kill = store_embedded(DONTO_TARGET_CLAIM);
    CHECK(wait_progress(DONTO_TARGET_CLAIM, at_kill + (N - at_kill) / 4, slack) == 0, "no progress after the kill");
    kill(g_serve, SIGTERM);
    CHECK(wait_exit(g_serve, 30) == 0, "serve exits 0 after SIGTERM");
    int64_t at_restart = store_embedded(DONTO_TARGET_CLAIM);
    msleep(500); /* an outage: workers back off and retry */
    CHECK(serve_start(PIPELINE_TTL_S) == 0, "restart serve");
    for (int i = 1; i < 3; i++) {
        int e = wait_exit(p[i], slack);
        CHECK(e == 0, "%s exits %d", ids[i], e);
        if (e) dump_worker_log(ids[i]);
    }
    /* What the dead worker held comes back after the TTL (its last extend
     * was before the kill): wait until nothing is leased, within a bound. */
    donto_target_stats st;
    double lim = killed + PIPELINE_TTL_S + slack;
    while (donto_now() < lim && (store_stats(DONTO_TARGET_CLAIM, &st) || st.leased > 0)) msleep(100);
    fprintf(stderr, "-- (a) nothing leased %.1f s after the kill (TTL %d s)\n", donto_now() - killed, PIPELINE_TTL_S);
    pid_t fin = worker("w-afin", 64, "claim", 0, "--exit-when-idle");
    int e = wait_exit(fin, slack);
    CHECK(e == 0, "w-afin exits %d", e);
    if (e) dump_worker_log("w-afin");
    CHECK(store_stats(DONTO_TARGET_CLAIM, &st) == 0, "stats");
    CHECK(st.embedded == N && st.pending == 0 && st.leased == 0, "embedded %lld pending %lld leased %lld, want %d/0/0",
          (long long)st.embedded, (long long)st.pending, (long long)st.leased, N);
    int64_t sum = contributor_sum("w-a");
    CHECK(sum == N, "contributors' totals sum to %lld, want %d (a duplicate or a loss)", (long long)sum, N);
    check_vectors(DONTO_TARGET_CLAIM, prefix, N);
    if (g_texts) check_recall(prefix, N);
    fprintf(stderr, "-- (a) %d items: w-a0 killed at %lld, coordinator restarted at %lld, exactly once\n", N,
            (long long)at_kill, (long long)at_restart);
}

/* ---- (b) Ctrl-C releases at once ---------------------------------------- */

static void case_ctrl_c(void) {
    const int N = 20000;
    enqueue(DONTO_TARGET_PREDICATE, "p", N, MODEL);
    pid_t w = worker("w-b", 1024, "predicate", 1, NULL);
    CHECK(wait_progress(DONTO_TARGET_PREDICATE, 1, 60) == 0, "w-b made no progress");
    donto_target_stats st;
    CHECK(store_stats(DONTO_TARGET_PREDICATE, &st) == 0 && st.leased > 0, "w-b holds no lease (leased %lld)",
          (long long)st.leased);
    kill(w, SIGINT);
    int e = wait_exit(w, 60);
    CHECK(e == 0, "w-b exits %d after SIGINT", e);
    if (e) dump_worker_log("w-b");
    CHECK(store_stats(DONTO_TARGET_PREDICATE, &st) == 0, "stats");
    CHECK(st.leased == 0, "%lld items still leased after SIGINT (a 900 s TTL: not released)", (long long)st.leased);
    CHECK(st.embedded + st.pending == N, "embedded %lld + pending %lld != %d", (long long)st.embedded,
          (long long)st.pending, N);
    CHECK(st.embedded < N, "w-b finished everything before the SIGINT: the case proves nothing");
    CHECK(contributor_sum("w-b") == st.embedded, "w-b's total != embedded");
    char logp[1400];
    snprintf(logp, sizeof logp, "%s/w-b.log", g_dir);
    char *log = slurp(logp);
    CHECK(log && strstr(log, "released"), "w-b's log says nothing about releasing");
    CHECK(log && !strstr(log, g_tok), "the token appears in w-b's log");
    fprintf(stderr, "-- (b) SIGINT: %lld embedded, %lld back in the queue, none leased\n", (long long)st.embedded,
            (long long)st.pending);
}

/* ---- (c) another model's items ------------------------------------------ */

static void case_wrong_model(void) {
    enqueue(DONTO_TARGET_ENTITY, "e", 5, OTHER_MODEL);
    pid_t w = worker("w-c", 16, "entity", 1, NULL);
    double end = donto_now() + 20;
    int reported = 0;
    while (donto_now() < end && !reported) {
        donto_store *s = NULL;
        donto_err e = {0};
        if (!donto_store_open(g_db, &s, &e)) {
            donto_report *r = NULL;
            size_t nr = 0;
            if (!donto_store_reports_recent(s, 20, &r, &nr, &e))
                for (size_t i = 0; i < nr; i++)
                    if (strstr(r[i].worker_id, "/w-c") && !strcmp(r[i].kind, "wrong_model")) reported = 1;
            donto_report_list_free(r, nr);
            donto_store_close(s);
        }
        msleep(50);
    }
    CHECK(reported, "w-c reported no wrong_model");
    kill(w, SIGTERM);
    int e = wait_exit(w, 30);
    CHECK(e == 0, "w-c exits %d after SIGTERM", e);
    donto_target_stats st;
    CHECK(store_stats(DONTO_TARGET_ENTITY, &st) == 0, "stats");
    CHECK(st.embedded == 0 && st.leased == 0 && st.pending == 5, "entity: embedded %lld leased %lld pending %lld",
          (long long)st.embedded, (long long)st.leased, (long long)st.pending);
}

/* ---- (d) a legacy coordinator (a stand-in on a socket) ------------------- */

/* One request per connection (every answer says Connection: close). The
 * stand-in hands out 3 items without lease_id, then a body that is not JSON,
 * then a batch that is not an array, then nothing; it answers 400 to a
 * submit with vector_b64 (as a legacy server would) and counts what came. */
static void legacy_server(int ls, const char *statf) {
    int leases = 0, b64 = 0, numbers = 0, numbers_ok = 0, reports = 0;
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        static char req[1 << 21];
        size_t have = 0;
        char *hdr_end = NULL;
        long clen = -1;
        for (;;) {
            ssize_t n = read(c, req + have, sizeof req - 1 - have);
            if (n <= 0) break;
            have += (size_t)n;
            req[have] = 0;
            if (!hdr_end && (hdr_end = strstr(req, "\r\n\r\n"))) {
                char *cl = strcasestr(req, "content-length:");
                clen = cl ? atol(cl + 15) : 0;
            }
            if (hdr_end && (long)(have - (size_t)(hdr_end + 4 - req)) >= clen) break;
        }
        const char *body = hdr_end ? hdr_end + 4 : "";
        int st = 200;
        const char *ans = "{}";
        char big[512];
        if (!strncmp(req, "POST /embed/lease ", 18)) {
            leases++;
            if (leases == 1) {
                snprintf(big, sizeof big,
                         "{\"batch\": [{\"target\": \"memory_chunk\", \"item_id\": \"m1\", \"model\": \"%s\", \"text\": \"the dog\"},"
                         "{\"target\": \"memory_chunk\", \"item_id\": 2, \"model\": \"%s\", \"text\": \"a cat\"},"
                         "{\"target\": \"memory_chunk\", \"item_id\": \"m3\", \"model\": \"%s\", \"text\": \"hello world\"}]}",
                         MODEL, MODEL, MODEL);
                ans = big;
            } else if (leases == 2) {
                ans = "<html>bad gateway</html>";
            } else if (leases == 3) {
                ans = "{\"batch\": 5}";
            } else {
                ans = "{\"batch\": []}";
            }
        } else if (!strncmp(req, "POST /embed/submit ", 19)) {
            if (strstr(body, "vector_b64")) {
                b64++;
                st = 400;
                ans = "{\"detail\": \"unknown field\"}";
            } else {
                numbers++;
                json_t *j = json_loads(body, 0, NULL);
                json_t *items = json_object_get(j, "items");
                int ok = json_array_size(items) == 3;
                for (size_t i = 0; ok && i < 3; i++)
                    ok = json_array_size(json_object_get(json_array_get(items, i), "vector")) == DIMS;
                numbers_ok += ok;
                json_decref(j);
                ans = "{\"upserted\": 3}";
            }
        } else if (!strncmp(req, "POST /embed/report ", 19)) {
            reports++;
            ans = "{\"ok\": true}";
        } else if (!strncmp(req, "POST /embed/release ", 20)) {
            ans = "{\"released\": 0}";
        } else {
            st = 404;
        }
        char head[256];
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                          "Connection: close\r\n\r\n", st, strlen(ans));
        if (write(c, head, (size_t)hl) < 0 || write(c, ans, strlen(ans)) < 0) { /* the client went away */ }
        close(c);
        FILE *f = fopen(statf, "w");
        if (f) fprintf(f, "%d %d %d %d %d\n", leases, b64, numbers, numbers_ok, reports), fclose(f);
    }
}

static void case_legacy(void) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 16) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        CHECK(0, "legacy stand-in: socket");
        return;
    }
    char statf[1400];
    snprintf(statf, sizeof statf, "%s/legacy.stat", g_dir);
    fflush(NULL);
    pid_t srv = fork();
    if (srv == 0) {
        legacy_server(ls, statf);
        _exit(0);
    }
    close(ls);
    char saved[128];
    snprintf(saved, sizeof saved, "%s", g_url);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d/embed/", ntohs(a.sin_port));
    pid_t w = worker("w-d", 8, "memory_chunk", 0, "--exit-when-idle");
    int e = wait_exit(w, 60);
    snprintf(g_url, sizeof g_url, "%s", saved);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    CHECK(e == 0, "w-d exits %d against the legacy stand-in", e);
    int leases = 0, b64 = 0, numbers = 0, numbers_ok = 0, reports = 0;
    FILE *f = fopen(statf, "r");
    CHECK(f && fscanf(f, "%d %d %d %d %d", &leases, &b64, &numbers, &numbers_ok, &reports) == 5, "legacy stats");
    if (f) fclose(f);
    CHECK(leases == 4, "legacy: %d leases, want 4 (3 items, not JSON, not an array, empty)", leases);
    CHECK(b64 == 1 && numbers == 1 && numbers_ok == 1,
          "legacy: %d base64 submits, %d with JSON numbers (%d well formed); want 1, 1, 1", b64, numbers, numbers_ok);
    CHECK(reports == 1, "legacy: %d reports, want 1 (at most one a minute)", reports);
    if (e || check_failures) dump_worker_log("w-d");
}

/* ---- (h) 429 Retry-After, /extend missing (404), 403 suspended ----------- */

/* One request per connection, like legacy_server. Mode 0: the first lease
 * is 429 with Retry-After: 1, the second a batch of 3 with lease_ttl_ms 600
 * (a heartbeat due after 200 ms), then nothing; a submit is answered after
 * 1 s (so the batch is still held when its heartbeat is due), an extend 404
 * (a coordinator without /extend). Mode 1: every lease is 403 suspended.
 * Writes "leases gap_ms extends reports" to statf after each request. */
static void standin_server(int ls, int mode, const char *statf) {
    int leases = 0, extends = 0, reports = 0;
    double first = 0, gap = 0;
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        static char req[1 << 20];
        size_t have = 0;
        char *hdr_end = NULL;
        long clen = -1;
        for (;;) {
            ssize_t n = read(c, req + have, sizeof req - 1 - have);
            if (n <= 0) break;
            have += (size_t)n;
            req[have] = 0;
            if (!hdr_end && (hdr_end = strstr(req, "\r\n\r\n"))) {
                char *cl = strcasestr(req, "content-length:");
                clen = cl ? atol(cl + 15) : 0;
            }
            if (hdr_end && (long)(have - (size_t)(hdr_end + 4 - req)) >= clen) break;
        }
        int st = 200;
        const char *ans = "{}", *extra = "";
        char big[512];
        if (!strncmp(req, "POST /embed/lease ", 18)) {
            leases++;
            if (leases == 1) first = donto_now();
            if (leases == 2) gap = donto_now() - first;
            if (mode == 1) {
                st = 403;
                ans = "{\"error\": \"suspended\", \"message\": \"this token is suspended: item c-7 of worker-test/w-h "
                      "failed verification (cosine 0.1234 < 0.996); ask the operator to review it\"}";
            } else if (leases == 1) {
                st = 429;
                extra = "Retry-After: 1\r\n";
                ans = "{\"error\": \"rate_limited\", \"message\": \"this token leases too often (rate)\"}";
            } else if (leases == 2) {
                snprintf(big, sizeof big,
                         "{\"batch\": [{\"target\": \"memory_chunk\", \"item_id\": \"h1\", \"model\": \"%s\", \"text\": \"the dog\", \"lease_id\": 1},"
                         "{\"target\": \"memory_chunk\", \"item_id\": \"h2\", \"model\": \"%s\", \"text\": \"a cat\", \"lease_id\": 2},"
                         "{\"target\": \"memory_chunk\", \"item_id\": \"h3\", \"model\": \"%s\", \"text\": \"hello\", \"lease_id\": 3}],"
                         " \"lease_ttl_ms\": 600}",
                         MODEL, MODEL, MODEL);
                ans = big;
            } else {
                ans = "{\"batch\": [], \"lease_ttl_ms\": 600}";
            }
        } else if (!strncmp(req, "POST /embed/submit ", 19)) {
            msleep(1000);
            ans = "{\"upserted\": 3}";
        } else if (!strncmp(req, "POST /embed/extend ", 19)) {
            extends++;
            st = 404;
            ans = "{\"error\": \"not_found\", \"message\": \"no such route\"}";
        } else if (!strncmp(req, "POST /embed/report ", 19)) {
            reports++;
            ans = "{\"ok\": true}";
        } else if (!strncmp(req, "POST /embed/release ", 20)) {
            ans = "{\"released\": 0}";
        } else {
            st = 404;
        }
        char head[256];
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                          "Connection: close\r\n\r\n", st, strlen(ans), extra);
        if (write(c, head, (size_t)hl) < 0 || write(c, ans, strlen(ans)) < 0) { /* the client went away */ }
        close(c);
        FILE *f = fopen(statf, "w");
        if (f) fprintf(f, "%d %d %d %d\n", leases, (int)(gap * 1000), extends, reports), fclose(f);
    }
}

/* Run a worker against standin_server(mode); its exit status, the stats. */
static int against_standin(int mode, const char *id, int stats[4]) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 16) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        CHECK(0, "stand-in: socket");
        return -2;
    }
    char statf[1400];
    snprintf(statf, sizeof statf, "%s/%s.stat", g_dir, id);
    fflush(NULL);
    pid_t srv = fork();
    if (srv == 0) {
        standin_server(ls, mode, statf);
        _exit(0);
    }
    close(ls);
    char saved[128];
    snprintf(saved, sizeof saved, "%s", g_url);
    snprintf(g_url, sizeof g_url, "http://127.0.0.1:%d/embed", ntohs(a.sin_port));
    pid_t w = worker(id, 8, "memory_chunk", 0, "--exit-when-idle");
    int e = wait_exit(w, 60);
    snprintf(g_url, sizeof g_url, "%s", saved);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    FILE *f = fopen(statf, "r");
    CHECK(f && fscanf(f, "%d %d %d %d", &stats[0], &stats[1], &stats[2], &stats[3]) == 4, "stand-in stats");
    if (f) fclose(f);
    return e;
}

static void case_refusals(void) {
    int s[4] = {0};
    int e = against_standin(0, "w-h", s);
    CHECK(e == 0, "w-h exits %d (429, then a batch, /extend 404)", e);
    CHECK(s[0] == 3, "w-h: %d leases, want 3 (429, a batch, empty)", s[0]);
    CHECK(s[1] >= 900, "w-h came back %d ms after a 429 with Retry-After: 1", s[1]);
    CHECK(s[2] == 1, "w-h: %d extends, want 1 (none after the 404)", s[2]);
    CHECK(s[3] == 0, "w-h sent %d reports (a 429 is no error to report)", s[3]);
    char logp[1400];
    snprintf(logp, sizeof logp, "%s/w-h.log", g_dir);
    char *log = slurp(logp);
    CHECK(log && strstr(log, "no /extend"), "w-h does not say heartbeats are off");
    if (check_failures) dump_worker_log("w-h");
    int fails = check_failures;
    e = against_standin(1, "w-h2", s);
    CHECK(e == 1, "w-h2 exits %d after 403 suspended, want 1", e);
    CHECK(s[0] == 1, "w-h2 leased %d times after 403 suspended, want 1 (fatal, not retried)", s[0]);
    snprintf(logp, sizeof logp, "%s/w-h2.log", g_dir);
    log = slurp(logp);
    CHECK(log && strstr(log, "donto-embed work: the coordinator suspended this token") && strstr(log, "cosine 0.1234"),
          "w-h2's fatal message does not name the suspension and its reason");
    if (check_failures > fails) dump_worker_log("w-h2");
}

/* ---- --max-items ---------------------------------------------------------- */

static void case_max_items(void) {
    enqueue(DONTO_TARGET_MEMORY_CHUNK, "m", 500, MODEL);
    pid_t w = worker("w-e", 64, "memory_chunk", 1, "--max-items=100");
    int e = wait_exit(w, 60);
    CHECK(e == 0, "w-e exits %d", e);
    donto_target_stats st;
    CHECK(store_stats(DONTO_TARGET_MEMORY_CHUNK, &st) == 0, "stats");
    CHECK(st.embedded == 100 && st.leased == 0 && st.pending == 400, "--max-items 100: embedded %lld leased %lld pending %lld",
          (long long)st.embedded, (long long)st.leased, (long long)st.pending);
}

/* ---- configuration errors ------------------------------------------------ */

static void case_config(void) {
    char *noauth[] = {g_exe, "work", "--url", g_url, "--model", g_model, NULL};
    unsetenv("DONTO_EMBED_TOKEN");
    CHECK(run(noauth, NULL) == 2, "no token: usage error");
    setenv("DONTO_EMBED_TOKEN", g_tok, 1);
    if (!donto_cuda_built()) { /* a CUDA build would start a GPU worker here */
        setenv("EMBED_CUDA", "1", 1);
        CHECK(run(noauth, NULL) == 2, "EMBED_CUDA=1 refused in a build without CUDA");
        unsetenv("EMBED_CUDA");
        char *dev[] = {g_exe, "work", "--url", g_url, "--model", g_model, "--device", "cuda", NULL};
        CHECK(run(dev, NULL) == 2, "--device cuda refused in a build without CUDA");
    }
    char *baddev[] = {g_exe, "work", "--url", g_url, "--model", g_model, "--device", "tpu", NULL};
    CHECK(run(baddev, NULL) == 2, "unknown --device refused");
    setenv("DONTO_EMBED_TOKEN", "0000000000000000000000000000000000000000000000000000000000000000", 1);
    CHECK(run(noauth, NULL) == 1, "an unknown token: exit 1 (fatal, not retried)");
    setenv("DONTO_EMBED_TOKEN", g_tok, 1);
    char *help[] = {g_exe, "work", "--help", NULL};
    CHECK(run(help, NULL) == 0, "--help");
    char *dims[] = {g_exe, "work", "--url", g_url, "--model", g_model, "--model-name", "BAAI/bge-base-en-v1.5", NULL};
    CHECK(run(dims, NULL) == 1, "a model of another dimension refused");
}

/* ---- (f) a batch that outlives its lease: heartbeats --------------------- */

/* The whole of a file (malloc'd; the worker logs can pass slurp's 64 KiB). */
static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            char *q = realloc(b, cap * 2);
            if (!q) break;
            b = q, cap *= 2;
        }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* A counter of the worker's last periodic line ("embedded 12, submitted
 * 12, rejected 0, ..."), -1 when absent. */
static long long last_count(const char *log, const char *key) {
    const char *p = NULL;
    for (const char *q = log; q && (q = strstr(q, key)); q++) p = q;
    return p ? atoll(p + strlen(key)) : -1;
}

/* Seconds the tiny model takes per long text on one thread, here and now. */
static double seconds_per_long_text(void) {
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = 1;
    donto_encoder *enc = NULL;
    donto_err e = {0};
    if (donto_encoder_open(g_model, &eo, &enc, &e)) {
        CHECK(0, "open the tiny model: %s", e.msg);
        return 0.01;
    }
    enum { K = 24 };
    static char txt[K][LONG_TEXT_MAX];
    const char *t[K];
    for (int i = 0; i < K; i++) t[i] = long_text(i, txt[i], sizeof txt[i]);
    float *v = malloc((size_t)K * DIMS * sizeof *v);
    double best = 1e9;
    for (int round = 0; round < 3; round++) { /* the fastest of three: a busy moment only makes batches longer */
        double t0 = donto_now();
        CHECK(donto_encoder_encode(enc, t, NULL, K, v, NULL, &e) == 0, "encode: %s", e.msg);
        double dt = (donto_now() - t0) / K;
        if (dt < best) best = dt;
    }
    free(v);
    donto_encoder_close(enc);
    return best;
}

/* The issue 15 livelock, and the worker's cure: each batch takes about
 * 2.5 lease TTLs to embed (sized from the model's speed measured here, so
 * a slow machine gets smaller batches that take as long), and one is leased
 * ahead. Without heartbeats both expire: the worker's own next lease takes
 * them back, its submits are rejected lease_expired and the items are
 * embedded again. With them (POST /extend at a third of the TTL) every
 * item is embedded once and nothing is rejected. */
static void case_slow_batch(void) {
    double per = seconds_per_long_text();
    int n = (int)ceil(2.5 * SLOW_TTL_S / per);
    if (n < 4) n = 4;
    if (n > 1024) n = 1024;
    const int N = 2 * n; /* one batch in the engine, one leased ahead */
    fprintf(stderr, "-- (f) %.1f ms per long text: %d items per lease (%.1f s a batch, TTL %d s), %d items\n",
            per * 1000, n, n * per, SLOW_TTL_S, N);
    int64_t before = store_embedded(DONTO_TARGET_CLAIM);
    enqueue_texts(DONTO_TARGET_CLAIM, "s", N, g_model_name, long_text);
    pid_t w = worker("w-slow", n, "claim", 1, "--exit-when-idle");
    /* Bounded: the batches take 2 x 2.5 TTLs at the measured speed; a
     * machine 10 times slower still finishes well inside this. */
    double limit = 60 + 20 * N * per;
    int e = wait_exit(w, limit);
    CHECK(e == 0, "w-slow exits %d (limit %.0f s)", e, limit);
    donto_target_stats st;
    CHECK(store_stats(DONTO_TARGET_CLAIM, &st) == 0, "stats");
    CHECK(st.embedded - before == N && st.pending == 0 && st.leased == 0,
          "slow batches: embedded %lld of %d, pending %lld, leased %lld", (long long)(st.embedded - before), N,
          (long long)st.pending, (long long)st.leased);
    CHECK(contributor_sum("w-slow") == N, "w-slow's total %lld, want %d", (long long)contributor_sum("w-slow"), N);
    char logp[1400];
    snprintf(logp, sizeof logp, "%s/w-slow.log", g_dir);
    char *log = read_all(logp);
    long long embedded = log ? last_count(log, "embedded ") : -1, rejected = log ? last_count(log, "rejected ") : -1;
    CHECK(embedded == N, "w-slow embedded %lld items for %d (an item embedded twice: its lease ran out)", embedded, N);
    CHECK(rejected == 0, "w-slow had %lld items rejected (lease_expired: the livelock)", rejected);
    CHECK(log && strstr(log, "heartbeat: extended"), "w-slow sent no heartbeat: the case proves nothing");
    CHECK(log && !strstr(log, "lease_expired"), "w-slow saw lease_expired");
    if (check_failures) dump_worker_log("w-slow");
    free(log);
}

/* ---- (g) clients that never extend: the coordinator's smaller batches ---- */

typedef struct {
    CURL *c;
    struct curl_slist *h;
    char *buf;
    size_t len;
} lclient;

static size_t lc_data(char *d, size_t sz, size_t nm, void *u) {
    lclient *l = u;
    char *q = realloc(l->buf, l->len + sz * nm + 1);
    if (!q) return 0;
    memcpy(q + l->len, d, sz * nm);
    l->buf = q;
    l->len += sz * nm;
    l->buf[l->len] = 0;
    return sz * nm;
}

static long lc_post(lclient *l, const char *route, const char *body) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", g_url, route);
    free(l->buf);
    l->buf = NULL;
    l->len = 0;
    curl_easy_setopt(l->c, CURLOPT_URL, url);
    curl_easy_setopt(l->c, CURLOPT_HTTPHEADER, l->h);
    curl_easy_setopt(l->c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(l->c, CURLOPT_WRITEFUNCTION, lc_data);
    curl_easy_setopt(l->c, CURLOPT_WRITEDATA, l);
    curl_easy_setopt(l->c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(l->c, CURLOPT_NOPROXY, "*");
    long st = 0;
    if (curl_easy_perform(l->c) == CURLE_OK) curl_easy_getinfo(l->c, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

/* A worker that never extends (like the legacy Python one, but sending
 * lease_ids): lease up to n, "embed" for per_item seconds an item (a sleep:
 * the time a batch takes grows with its size, as an engine's does), submit
 * a unit vector for each with its lease_id. Exits 0 after the queue has been
 * empty for idle_s, 3 at the deadline. Writes "batches min_k max_k
 * first_k_after_expiry upserted expired" to statf. */
static int never_extends(const char *id, int n, double per_item, double idle_s, double deadline_s,
                         const char *statf) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    lclient l = {curl_easy_init(), NULL, NULL, 0};
    char auth[128];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_tok);
    l.h = curl_slist_append(curl_slist_append(NULL, "Content-Type: application/json"), auth);
    static float unitv[DIMS] = {1.0f};
    double end = donto_now() + deadline_s, idle_since = 0;
    long long batches = 0, min_k = 0, max_k = 0, after = 0, upserted = 0, expired = 0;
    int rc = 3;
    while (donto_now() < end) {
        char *body = NULL;
        donto_err e = {0};
        donto_lease_resp r = {0};
        if (donto_proto_build_lease(id, n, DONTO_TARGET_CLAIM, &body, &e)) break;
        long st = lc_post(&l, "/lease", body);
        free(body);
        if (st != 200 || donto_proto_parse_lease_response(l.buf, l.len, &r, &e)) {
            msleep(200);
            continue;
        }
        if (r.n == 0) {
            donto_lease_resp_free(&r);
            if (!idle_since) idle_since = donto_now();
            if (donto_now() - idle_since > idle_s) {
                rc = 0;
                break;
            }
            msleep(200);
            continue;
        }
        idle_since = 0;
        batches++;
        long long k = (long long)r.n;
        if (!min_k || k < min_k) min_k = k;
        if (k > max_k) max_k = k;
        if (expired && !after) after = k;
        msleep((long)(per_item * 1000 * (double)r.n)); /* the engine */
        donto_client_item *ci = calloc(r.n, sizeof *ci);
        for (size_t i = 0; i < r.n; i++)
            ci[i] = (donto_client_item){r.items[i].target, r.items[i].item_id, r.items[i].lease_id, r.items[i].model,
                                        unitv};
        if (donto_proto_build_submit(id, ci, r.n, DIMS, 0, &body, &e) == 0) {
            donto_submit_resp sr;
            if (lc_post(&l, "/submit", body) == 200 && donto_proto_parse_submit_response(l.buf, l.len, &sr, &e) == 0) {
                upserted += sr.upserted;
                for (size_t i = 0; i < sr.n_rejected; i++)
                    expired += sr.rejected[i].reason && !strcmp(sr.rejected[i].reason, "lease_expired");
                donto_submit_resp_free(&sr);
            }
            free(body);
        }
        free(ci);
        donto_lease_resp_free(&r);
    }
    FILE *f = fopen(statf, "w");
    if (f) fprintf(f, "%lld %lld %lld %lld %lld %lld\n", batches, min_k, max_k, after, upserted, expired), fclose(f);
    free(l.buf);
    curl_slist_free_all(l.h);
    curl_easy_cleanup(l.c);
    curl_global_cleanup();
    return rc;
}

/* Two workers that never extend compete for fewer items than one batch
 * while each batch takes 1.5 lease TTLs: without smaller batches each one's
 * items are taken by the other while it embeds them, and every submit is
 * rejected lease_expired, round after round. The coordinator leases a worker
 * whose items came back lease_expired half its last batch: both finish. */
static void case_never_extends(void) {
    const int n = 32, M = 48;
    const double per_item = 1.5 * SLOW_TTL_S / n;
    int64_t before = store_embedded(DONTO_TARGET_CLAIM);
    enqueue(DONTO_TARGET_CLAIM, "l", M, g_model_name);
    const char *ids[2] = {"w-legacy-a", "w-legacy-b"};
    char statf[2][1400];
    pid_t p[2];
    double t0 = donto_now();
    for (int i = 0; i < 2; i++) {
        snprintf(statf[i], sizeof statf[i], "%s/%s.stat", g_dir, ids[i]);
        fflush(NULL);
        p[i] = fork();
        if (p[i] == 0) _exit(never_extends(ids[i], n, per_item, 3.0 * SLOW_TTL_S, 170, statf[i]));
        msleep(300); /* a takes the first batch, b the rest */
    }
    /* Bounded: at the coordinator's halved size a batch takes 0.75 TTL; a
     * few rounds of a few TTLs each, with a wide margin for a slow machine. */
    int done = wait_progress(DONTO_TARGET_CLAIM, before + M, 150) == 0;
    double took = donto_now() - t0;
    CHECK(done, "clients that never extend: %lld of %d embedded after %.0f s (livelock)",
          (long long)(store_embedded(DONTO_TARGET_CLAIM) - before), M, took);
    long long up = 0, exp_total = 0;
    int halved = 0;
    for (int i = 0; i < 2; i++) {
        int e = wait_exit(p[i], 60);
        CHECK(e == 0, "%s exits %d", ids[i], e);
        long long b = 0, mn = 0, mx = 0, after = 0, u = 0, x = 0;
        FILE *f = fopen(statf[i], "r");
        CHECK(f && fscanf(f, "%lld %lld %lld %lld %lld %lld", &b, &mn, &mx, &after, &u, &x) == 6, "%s stats", ids[i]);
        if (f) fclose(f);
        fprintf(stderr, "-- (g) %s: %lld batches of %lld..%lld items, %lld upserted, %lld lease_expired, first batch "
                        "after one: %lld\n", ids[i], b, mn, mx, u, x, after);
        /* The first lease after a rejection (if it leased again) is halved. */
        if (after) CHECK(after <= n / 2, "%s: leased %lld items after lease_expired, want at most %d", ids[i], after, n / 2);
        halved += after > 0;
        up += u, exp_total += x;
    }
    CHECK(up == M, "upserted %lld in all, want %d", up, M);
    CHECK(exp_total > 0 && halved > 0, "no batch outlived its lease (%lld lease_expired, %d halved): the case proves "
                                       "nothing", exp_total, halved);
    donto_target_stats st;
    CHECK(store_stats(DONTO_TARGET_CLAIM, &st) == 0 && st.pending == 0 && st.leased == 0, "claims left over");
    fprintf(stderr, "-- (g) two workers that never extend: %d items in %.0f s, %lld lease_expired on the way\n", M,
            took, exp_total);
}

/* Fabric mode: the "text" of every line of a JSONL corpus. */
static int load_corpus(const char *path, int limit) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    int n = 0, alloc = 0;
    while ((limit <= 0 || n < limit) && getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *t = json_string_value(json_object_get(o, "text"));
        if (t) {
            if (n == alloc) {
                alloc = alloc ? alloc * 2 : 1024;
                g_texts = realloc(g_texts, (size_t)alloc * sizeof *g_texts);
            }
            g_texts[n++] = strdup(t);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    g_ntexts = n;
    return n > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    g_pg = argc > 1 && !strcmp(argv[1], "pg");
    int fabric = argc > 1 + g_pg && !strcmp(argv[1 + g_pg], "fabric");
    /* fabric ... donto N: the first N texts, served with --vectors donto (PostgreSQL). */
    if (fabric && argc == 6 + g_pg && g_pg && !strcmp(argv[4 + g_pg], "donto")) g_donto = 1;
    if (fabric && argc != 4 + g_pg && !g_donto) {
        fprintf(stderr, "usage: test_worker [pg] fabric MODEL_DIR CORPUS.jsonl [donto N (with pg)]\n");
        return 2;
    }
    const char *bd = getenv("DONTO_BUILD_DIR");
    if (!bd) {
        fprintf(stderr, "test_worker: DONTO_BUILD_DIR not set\n");
        return 1;
    }
    snprintf(g_exe, sizeof g_exe, "%s/donto-embed", bd);
    snprintf(g_dir, sizeof g_dir, "/tmp/donto-worker-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_log, sizeof g_log, "%s/serve.log", g_dir);
    snprintf(g_model, sizeof g_model, "%s/model", g_dir);
    snprintf(g_tokfile, sizeof g_tokfile, "%s/token", g_dir);
    if (test_db_url("test_worker", g_pg, g_dir, g_db, sizeof g_db)) return 1;
    loopback_only();
    unsetenv("EMBED_N");
    unsetenv("EMBED_TARGET");
    unsetenv("EMBED_BATCH");
    if (fabric) {
        snprintf(g_model, sizeof g_model, "%s", argv[2 + g_pg]);
        if (load_corpus(argv[3 + g_pg], g_donto ? atoi(argv[5 + g_pg]) : 0)) {
            fprintf(stderr, "test_worker: cannot read texts from %s\n", argv[3 + g_pg]);
            return 1;
        }
        g_model_name = "sentence-transformers/all-MiniLM-L6-v2";
    }
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = DIMS, sp.layers = 2, sp.heads = 6, sp.inter = 256, sp.maxpos = 128, sp.pooling = 1, sp.seed = 7;
    if (!fabric) CHECK(tiny_write(g_model, &sp) == 0, "write the tiny model");
    char nm[1400];
    snprintf(nm, sizeof nm, "%s/model_name.txt", g_model);
    FILE *f = fabric ? NULL : fopen(nm, "w");
    if (f) fprintf(f, "%s\n", MODEL), fclose(f);
    char out[1400];
    snprintf(out, sizeof out, "%s/out", g_dir);
    char *mig[] = {g_exe, "migrate", "--db", g_db, "--vectors", g_donto ? "donto" : "own", NULL};
    CHECK(run(mig, NULL) == 0, "migrate");
    char *add[] = {g_exe, "token", "add", "worker-test", "--db", g_db, NULL};
    CHECK(run(add, out) == 0, "token add");
    char *t = slurp(out);
    CHECK(t && strlen(t) == 65, "token printed");
    snprintf(g_tok, sizeof g_tok, "%.64s", t ? t : "");
    f = fopen(g_tokfile, "w");
    if (f) fprintf(f, "%s\n", g_tok), fclose(f);
    setenv("DONTO_EMBED_TOKEN", g_tok, 1);
    if (fabric) {
        if (check_failures == 0 && serve_start(PIPELINE_TTL_S) == 0) {
            case_pipeline();
            serve_stop();
        } else {
            CHECK(0, "could not start serve");
        }
    } else if (check_failures == 0 && serve_start(PIPELINE_TTL_S) == 0) {
        case_config();
        case_legacy();
        case_refusals();
        case_pipeline();
        serve_stop();
        if (serve_start(900) == 0) {
            case_ctrl_c();
            case_wrong_model();
            case_max_items();
            serve_stop();
        } else {
            CHECK(0, "restart serve with a long TTL");
        }
        if (serve_start(SLOW_TTL_S) == 0) {
            case_slow_batch();
            case_never_extends();
            serve_stop();
        } else {
            CHECK(0, "restart serve with a short TTL");
        }
    } else {
        CHECK(0, "could not start serve; log:\n%s", slurp(g_log) ? slurp(g_log) : "");
    }
    if (check_failures) {
        char *s = slurp(g_log);
        fprintf(stderr, "serve log (tail):\n%s\n", s ? s + (strlen(s) > 4000 ? strlen(s) - 4000 : 0) : "");
    }
    if (!check_failures && !getenv("DONTO_TEST_KEEP")) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    } else {
        fprintf(stderr, "files kept in %s\n", g_dir);
    }
    for (int i = 0; i < g_ntexts; i++) free(g_texts[i]);
    free(g_texts);
    return check_report(fabric ? (g_donto ? "fabric_e2e pg donto" : g_pg ? "fabric_e2e pg" : "fabric_e2e")
                               : g_pg ? "test_worker pg" : "test_worker");
}
