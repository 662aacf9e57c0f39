/* Recall end to end on SQLite with real embeddings (models/all-MiniLM-L6-v2):
 * texts embedded by our encoder and submitted through the store as a worker
 * would; a paraphrase finds its item first, exactly and through the ANN
 * index; the index files are reused, updated with new rows only, rebuilt
 * when a vector changes or a file is damaged; `donto-embed recall --json`;
 * and GET /embed/recall on the coordinator (auth, 400s, 503 without a
 * model, k capped, the answer's shape). */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "curlbuf.h"
#include "donto/coord.h"
#include "donto/encoder.h"
#include "donto/recall.h"
#include "donto/store.h"
#include "donto/substrate.h"

#define MODEL_NAME "test/all-MiniLM-L6-v2"

static const char *TEXTS[] = {
    "The Eiffel Tower is located in Paris, France.",
    "Photosynthesis converts sunlight into chemical energy in plants.",
    "The Great Wall of China stretches across northern China.",
    "Water boils at 100 degrees Celsius at sea level.",
    "Albert Einstein developed the theory of relativity.",
    "The stock market fell sharply after the interest rate hike.",
    "Honey bees communicate the location of flowers by dancing.",
    "Mount Everest is the highest mountain above sea level.",
    /* added later, to test incremental updates */
    "Penguins are flightless birds that live mostly in the Southern Hemisphere.",
    "The human heart pumps blood through the circulatory system.",
};
#define NFIRST 8
#define NALL 10

static char g_dir[256], g_db[300], g_prefix[300], g_model[512], g_exe[512];
static donto_encoder *g_enc;

static void id_of(int i, char *out, size_t cap) { snprintf(out, cap, "claim-%02d", i % 100); }

/* Enqueue, lease and submit texts [from, to) the way a worker does. */
static void add_items(donto_store *s, int from, int to, int64_t now) {
    donto_err err = {0};
    int n = to - from, dim = donto_encoder_dim(g_enc);
    char ids[NALL][16];
    donto_enqueue_item e[NALL];
    for (int i = 0; i < n; i++) {
        id_of(from + i, ids[i], sizeof ids[i]);
        e[i] = (donto_enqueue_item){DONTO_TARGET_CLAIM, ids[i], TEXTS[from + i], MODEL_NAME};
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, e, (size_t)n, &added, &err) == 0, "enqueue: %s", err.msg);
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", n, DONTO_TARGET_CLAIM, now, 60000, &b, &err) == 0, "lease: %s", err.msg);
    CHECK_EQ_INT(b.n, n);
    float *v = malloc((size_t)n * dim * sizeof *v);
    const char *tx[NALL];
    for (size_t i = 0; i < b.n; i++) tx[i] = b.items[i].text;
    CHECK(donto_encoder_encode(g_enc, tx, NULL, b.n, v, NULL, &err) == 0, "encode: %s", err.msg);
    donto_submit_item si[NALL];
    donto_reject rj[NALL];
    for (size_t i = 0; i < b.n; i++)
        si[i] = (donto_submit_item){b.items[i].target, b.items[i].item_id, b.items[i].lease_id, v + i * dim, dim, NULL};
    donto_submit_result res = {.reject = rj};
    CHECK(donto_store_submit(s, "w", si, b.n, now, &res, &err) == 0, "submit: %s", err.msg);
    CHECK_EQ_INT(res.upserted, n);
    free(v);
    donto_lease_batch_free(&b);
}

/* Top-1 of a query must be item `want`. */
static void expect_top(donto_recall *r, donto_store *s, const char *q, int want, donto_recall_info *info) {
    donto_recall_hit *h = NULL;
    size_t n = 0;
    donto_err err = {0};
    char wid[16];
    id_of(want, wid, sizeof wid);
    CHECK(donto_recall_query(r, s, DONTO_TARGET_CLAIM, q, 3, &h, &n, info, &err) == 0, "recall '%s': %s", q, err.msg);
    CHECK(n >= 1 && !strcmp(h[0].item_id, wid), "'%s': top-1 %s (%.3f), want %s", q, n ? h[0].item_id : "none",
          n ? (double)h[0].score : 0.0, wid);
    if (n >= 2) CHECK(h[0].score >= h[1].score && h[0].score <= 1.0001f, "'%s': scores not best first", q);
    if (n >= 1) CHECK(h[0].target == DONTO_TARGET_CLAIM, "target");
    donto_recall_hits_free(h, n);
}

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* The swap: a rebuild is held inside its hook until another query has
 * answered (or 10 s passed); that query must answer from the old index. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_rebuild, other_done, timed_out;
    donto_recall *r;
    donto_recall_info info;
    int rc;
} swap_state;

static void swap_hook(void *arg) {
    swap_state *st = arg;
    pthread_mutex_lock(&st->mu);
    st->in_rebuild = 1;
    pthread_cond_broadcast(&st->cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    while (!st->other_done && !st->timed_out)
        if (pthread_cond_timedwait(&st->cv, &st->mu, &until)) st->timed_out = 1;
    pthread_mutex_unlock(&st->mu);
}

static void *swap_rebuilder(void *arg) {
    swap_state *st = arg;
    donto_store *s = NULL;
    donto_err err = {0};
    st->rc = -1;
    if (donto_store_open(g_db, &s, &err)) return NULL;
    donto_recall_hit *h = NULL;
    size_t n = 0;
    st->rc = donto_recall_query(st->r, s, DONTO_TARGET_CLAIM, "a long wall in northern China", 3, &h, &n, &st->info, &err);
    donto_recall_hits_free(h, n);
    donto_store_close(s);
    return NULL;
}

static void test_swap(donto_recall *r, donto_store *s) {
    sqlite3 *db;
    sqlite3_open(g_db, &db);
    CHECK(sqlite3_exec(db, "UPDATE vectors SET created = created + 7000 WHERE item_id = 'claim-03'", NULL, NULL, NULL) ==
              SQLITE_OK, "update");
    sqlite3_close(db);
    swap_state st = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .r = r};
    donto_recall_set_rebuild_hook(r, swap_hook, &st);
    pthread_t th;
    pthread_create(&th, NULL, swap_rebuilder, &st);
    pthread_mutex_lock(&st.mu);
    while (!st.in_rebuild) pthread_cond_wait(&st.cv, &st.mu);
    pthread_mutex_unlock(&st.mu);
    /* The rebuild is in progress: this query answers from the old index. */
    donto_recall_info info;
    expect_top(r, s, "Who came up with relativity?", 4, &info);
    pthread_mutex_lock(&st.mu);
    int timed_out = st.timed_out;
    st.other_done = 1;
    pthread_cond_broadcast(&st.cv);
    pthread_mutex_unlock(&st.mu);
    pthread_join(th, NULL);
    donto_recall_set_rebuild_hook(r, NULL, NULL);
    CHECK(!timed_out, "a query during a rebuild waited for it (the rebuild's hook timed out)");
    CHECK(info.stale == 1 && info.ann == 1 && info.collection == NALL, "during the rebuild: stale %d ann %d n %zu",
          info.stale, info.ann, info.collection);
    CHECK(st.rc == 0 && st.info.rebuilt == 1, "the rebuild: rc %d rebuilt %d", st.rc, st.info.rebuilt);
    /* And after the swap: current, not stale. */
    expect_top(r, s, "What temperature does water boil at?", 3, &info);
    CHECK(info.stale == 0 && info.rebuilt == 0, "after the swap: stale %d rebuilt %d", info.stale, info.rebuilt);
}

static void test_library(void) {
    donto_err err = {0};
    donto_store *s = NULL;
    CHECK(donto_store_open(g_db, &s, &err) == 0 && donto_substrate_migrate(s, &err) == 0, "open: %s", err.msg);
    if (!s) return;
    add_items(s, 0, NFIRST, 1000);

    /* Exact (small collection). */
    donto_recall *r = NULL;
    donto_recall_opts o = {.model_name = MODEL_NAME, .index_prefix = g_prefix};
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    donto_recall_info info;
    expect_top(r, s, "Which city has the Eiffel Tower?", 0, &info);
    CHECK(info.ann == 0 && info.collection == NFIRST && info.rebuilt == 1, "exact: ann %d n %zu", info.ann, info.collection);
    expect_top(r, s, "How do plants turn light into energy?", 1, &info);
    CHECK(info.rebuilt == 0 && info.added == 0, "second query reuses the collection");
    /* Wrong-dimension query vector: a clear error. */
    float q3[3] = {1, 0, 0};
    donto_recall_hit *h = NULL;
    size_t n = 0;
    CHECK(donto_recall_search_vec(r, s, DONTO_TARGET_CLAIM, q3, 3, 5, &h, &n, NULL, &err) == -1 &&
              strstr(err.msg, "3-d"), "dim mismatch: %s", err.msg);
    /* Another model's vectors are another collection (none here). */
    donto_recall *r2 = NULL;
    donto_recall_opts o2 = {.model_name = "no/such-model"};
    CHECK(donto_recall_open(g_enc, &o2, &r2, &err) == 0, "%s", err.msg);
    CHECK(donto_recall_query(r2, s, DONTO_TARGET_CLAIM, "anything", 5, &h, &n, &info, &err) == 0 && n == 0,
          "other model: %zu hits (%s)", n, err.msg);
    donto_recall_close(r2);
    donto_recall_close(r);

    /* ANN from 4 vectors on: built, saved beside the database. */
    char fa[400], fi[400];
    snprintf(fa, sizeof fa, "%s.claim.faiss", g_prefix);
    snprintf(fi, sizeof fi, "%s.claim.ids", g_prefix);
    o.ann_min = 4;
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "What temperature does water boil at?", 3, &info);
    CHECK(info.ann == 1 && info.rebuilt == 1 && info.loaded == 0, "ann build: ann %d rebuilt %d", info.ann, info.rebuilt);
    CHECK(file_exists(fa) && file_exists(fi), "index files %s / %s", fa, fi);
    donto_recall_close(r);

    /* A new recall (a restart) loads the files instead of rebuilding. */
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "Who came up with relativity?", 4, &info);
    CHECK(info.ann == 1 && info.loaded == 1 && info.rebuilt == 0 && info.added == 0, "reload: loaded %d rebuilt %d added %zu",
          info.loaded, info.rebuilt, info.added);
    /* New rows since the mark: read and added, not rebuilt. */
    add_items(s, NFIRST, NALL, 2000);
    expect_top(r, s, "flightless birds of Antarctica", 8, &info);
    CHECK(info.ann == 1 && info.rebuilt == 0 && info.added == 2 && info.collection == NALL,
          "update: rebuilt %d added %zu n %zu", info.rebuilt, info.added, info.collection);
    donto_recall_close(r);
    /* ... and the saved files carry the update. */
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "the organ that pumps blood", 9, &info);
    CHECK(info.loaded == 1 && info.added == 0 && info.rebuilt == 0, "updated files: loaded %d added %zu", info.loaded, info.added);
    /* A vector replaced in place (same count, newer created): rebuild. */
    sqlite3 *db;
    sqlite3_open(g_db, &db);
    CHECK(sqlite3_exec(db, "UPDATE vectors SET created = created + 5000 WHERE item_id = 'claim-02'", NULL, NULL, NULL) ==
              SQLITE_OK, "update");
    sqlite3_close(db);
    expect_top(r, s, "a long wall in northern China", 2, &info);
    CHECK(info.rebuilt == 1, "replaced vector: rebuilt %d", info.rebuilt);
    test_swap(r, s);
    donto_recall_close(r);
    /* The memory bound: 10 vectors need ~15 KB even as a flat index; a
     * bound of 1 KB refuses the collection, saying why, at every query. */
    {
        donto_recall_opts ob = o;
        ob.index_memory_gb = 1e-6;
        donto_recall *rb = NULL;
        CHECK(donto_recall_open(g_enc, &ob, &rb, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 2 && rb; i++) {
            donto_recall_hit *hb = NULL;
            size_t nb = 0;
            CHECK(donto_recall_query(rb, s, DONTO_TARGET_CLAIM, "the tallest mountain", 3, &hb, &nb, &info, &err) == -1 &&
                      strstr(err.msg, "refused") && strstr(err.msg, "--index-memory-gb") && strstr(err.msg, "claim"),
                  "bound: %s", err.msg);
            donto_recall_hits_free(hb, nb);
        }
        fprintf(stderr, "memory bound: %s\n", err.msg);
        donto_recall_close(rb);
    }
    /* Damaged id map: warned about, rebuilt, right answers. */
    FILE *f = fopen(fi, "r+b");
    if (f) {
        fseek(f, 40, SEEK_SET);
        fputc('#', f);
        fclose(f);
    }
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "the tallest mountain on Earth", 7, &info);
    CHECK(info.loaded == 0 && info.rebuilt == 1 && info.ann == 1, "damaged ids: loaded %d rebuilt %d", info.loaded, info.rebuilt);
    donto_recall_close(r);
    /* Truncated index file: same. */
    CHECK(truncate(fa, 100) == 0, "truncate");
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "bees dance to show where flowers are", 6, &info);
    CHECK(info.loaded == 0 && info.rebuilt == 1, "truncated index: loaded %d", info.loaded);
    donto_recall_close(r);
    /* --exact ignores the index even above ann_min. */
    o.exact = 1;
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    expect_top(r, s, "shares dropped when rates went up", 5, &info);
    CHECK(info.ann == 0, "exact forced");
    donto_recall_close(r);
    donto_store_close(s);
}

/* `donto-embed recall --json`. */
static void test_cli(void) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' recall --db '%s' --model '%s' --model-name " MODEL_NAME " -k 3 --json 'Which city has the Eiffel Tower?'",
             g_exe, g_db, g_model);
    FILE *p = popen(cmd, "r");
    char out[16384] = "";
    size_t got = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[got] = 0;
    int rc = p ? pclose(p) : -1;
    CHECK(rc == 0, "recall exit %d", rc);
    json_t *j = json_loads(out, 0, NULL);
    json_t *hits = json_object_get(j, "hits");
    CHECK(json_array_size(hits) == 3, "cli hits: %s", out);
    json_t *h0 = json_array_get(hits, 0);
    CHECK(!strcmp(json_string_value(json_object_get(h0, "item_id")) ?: "", "claim-00"), "cli top-1: %s", out);
    CHECK(json_is_real(json_object_get(h0, "score")) && json_object_get(h0, "text") != NULL, "cli shape: %s", out);
    CHECK(!strcmp(json_string_value(json_object_get(j, "target")) ?: "", "claim"), "cli target");
    json_decref(j);
    /* --verified-only: a vector submitted under a token and not (yet)
     * verified is found by plain recall, and not with the flag. */
    {
        donto_store *s = NULL;
        donto_err err = {0};
        CHECK(donto_store_open(g_db, &s, &err) == 0, "open: %s", err.msg);
        donto_enqueue_item e = {DONTO_TARGET_CLAIM, "unverified-0", "Kangaroos carry their young in a pouch.", MODEL_NAME};
        size_t added = 0;
        CHECK(donto_store_enqueue(s, &e, 1, &added, &err) == 0 && added == 1, "enqueue: %s", err.msg);
        donto_lease_batch b = {0};
        CHECK(donto_store_lease(s, "tok/w", 1, DONTO_TARGET_CLAIM, 1000, 60000, &b, &err) == 0 && b.n == 1, "lease: %s",
              err.msg);
        int dim = donto_encoder_dim(g_enc);
        float *v = malloc((size_t)dim * sizeof *v);
        const char *tx[1] = {b.n ? b.items[0].text : ""};
        CHECK(donto_encoder_encode(g_enc, tx, NULL, 1, v, NULL, &err) == 0, "encode: %s", err.msg);
        donto_submit_item si = {DONTO_TARGET_CLAIM, "unverified-0", b.n ? b.items[0].lease_id : 0, v, dim, NULL};
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        CHECK(donto_store_submit(s, "tok/w", &si, 1, 1000, &res, &err) == 0 && res.upserted == 1, "submit: %s", err.msg);
        free(v);
        donto_lease_batch_free(&b);
        donto_store_close(s);
        for (int vo = 0; vo < 2; vo++) {
            snprintf(cmd, sizeof cmd,
                     "'%s' recall --db '%s' --model '%s' --model-name " MODEL_NAME " -k 3 --json %s 'Which animal has a pouch?'",
                     g_exe, g_db, g_model, vo ? "--verified-only" : "");
            p = popen(cmd, "r");
            got = p ? fread(out, 1, sizeof out - 1, p) : 0;
            out[got] = 0;
            rc = p ? pclose(p) : -1;
            CHECK(rc == 0, "recall%s exit %d", vo ? " --verified-only" : "", rc);
            j = json_loads(out, 0, NULL);
            const char *top = json_string_value(json_object_get(json_array_get(json_object_get(j, "hits"), 0), "item_id"));
            int found = strstr(out, "\"unverified-0\"") != NULL;
            if (vo)
                CHECK(!found && json_integer_value(json_object_get(j, "collection")) == NALL,
                      "--verified-only shows the unverified vector: %s", out);
            else
                CHECK(top && !strcmp(top, "unverified-0") && json_integer_value(json_object_get(j, "collection")) == NALL + 1,
                      "plain recall misses the unverified vector: %s", out);
            json_decref(j);
        }
        /* Withdraw it again (as a suspension would): the route test counts NALL. */
        int64_t withdrawn = 0;
        CHECK(donto_store_open(g_db, &s, &err) == 0 && donto_store_suspend(s, "tok", "test", 2000, &withdrawn, &err) == 0 &&
                  withdrawn == 1, "withdraw: %s (%lld)", err.msg, (long long)withdrawn);
        donto_store_close(s);
        snprintf(cmd, sizeof cmd, "'%s' recall --help 2>&1 | grep -q -- --verified-only", g_exe);
        CHECK(system(cmd) == 0, "recall --help does not list --verified-only");
    }
    /* Usage errors exit 2. */
    snprintf(cmd, sizeof cmd, "'%s' recall --db '%s' --target nope q >/dev/null 2>&1", g_exe, g_db);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "bad target exit %d", rc);
}

/* ---- the coordinator route --------------------------------------------------------- */

static int g_port;


static long get(const char *path, const char *token, json_t **out) {
    CURL *c = curl_easy_init();
    char url[1024], auth[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/embed%s", g_port, path);
    struct curl_slist *h = NULL;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    buf b = {NULL, 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
    free(b.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static const char *jerr(json_t *j) {
    const char *s = json_string_value(json_object_get(j, "error"));
    return s ? s : "";
}

static void test_route(void) {
    donto_err err = {0};
    donto_store *s = NULL;
    CHECK(donto_store_open(g_db, &s, &err) == 0, "%s", err.msg);
    if (!s) return;
    uint8_t hash[32];
    unsigned hl;
    EVP_Digest("tok-contrib", 11, hash, &hl, EVP_sha256(), NULL);
    CHECK(donto_store_token_add(s, "contrib", DONTO_ROLE_CONTRIBUTOR, hash, 1, &err) == 0, "%s", err.msg);
    /* Recall is for readers (and admins): contributors cannot read the substrate. */
    EVP_Digest("tok-reader", 10, hash, &hl, EVP_sha256(), NULL);
    CHECK(donto_store_token_add(s, "reader", DONTO_ROLE_READER, hash, 1, &err) == 0, "%s", err.msg);
    EVP_Digest("tok-revoked", 11, hash, &hl, EVP_sha256(), NULL);
    CHECK(donto_store_token_add(s, "gone", DONTO_ROLE_CONTRIBUTOR, hash, 1, &err) == 0, "%s", err.msg);
    int revoked = 0;
    CHECK(donto_store_token_revoke(s, "gone", &revoked, &err) == 0 && revoked, "%s", err.msg);
    /* 120 predicate vectors (unit, deterministic) to see k capped at 100. */
    int dim = donto_encoder_dim(g_enc);
    for (int i = 0; i < 120; i++) {
        char id[32];
        snprintf(id, sizeof id, "pred-%03d", i);
        donto_enqueue_item e = {DONTO_TARGET_PREDICATE, id, "p", MODEL_NAME};
        size_t added;
        donto_store_enqueue(s, &e, 1, &added, &err);
    }
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 200, DONTO_TARGET_PREDICATE, 3000, 60000, &b, &err) == 0 && b.n == 120, "%s", err.msg);
    float *v = calloc((size_t)b.n * dim, sizeof *v);
    donto_submit_item *si = calloc(b.n, sizeof *si);
    donto_reject *rj = calloc(b.n, sizeof *rj);
    for (size_t i = 0; i < b.n; i++) {
        v[i * dim + i % dim] = 1.0f;
        si[i] = (donto_submit_item){b.items[i].target, b.items[i].item_id, b.items[i].lease_id, v + i * dim, dim, NULL};
    }
    donto_submit_result res = {.reject = rj};
    CHECK(donto_store_submit(s, "w", si, b.n, 3000, &res, &err) == 0, "%s", err.msg);
    free(v), free(si), free(rj);
    donto_lease_batch_free(&b);
    donto_store_close(s);

    donto_recall *r = NULL;
    donto_recall_opts o = {.model_name = MODEL_NAME, .index_prefix = g_prefix};
    CHECK(donto_recall_open(g_enc, &o, &r, &err) == 0, "%s", err.msg);
    for (int with_model = 0; with_model < 2; with_model++) {
        donto_coord_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.listen = "127.0.0.1:0";
        cfg.threads = 2;
        cfg.db_url = g_db;
        cfg.recall = with_model ? r : NULL;
        cfg.recall_model = MODEL_NAME;
        donto_coord *c = NULL;
        CHECK(donto_coord_start(&cfg, &c, &err) == 0, "coord: %s", err.msg);
        if (!c) break;
        g_port = donto_coord_port(c);
        json_t *j = NULL;
        long st;
        if (!with_model) {
            st = get("/recall?q=hello", "tok-reader", &j);
            CHECK(st == 503 && !strcmp(jerr(j), "no_model"), "no model: %ld %s", st, jerr(j));
            json_decref(j);
            donto_coord_stop(c, 5);
            continue;
        }
        st = get("/recall?q=hello", NULL, &j);
        CHECK(st == 401 && !strcmp(jerr(j), "unauthorized"), "no token: %ld", st);
        json_decref(j);
        st = get("/recall?q=hello", "wrong-token", &j);
        CHECK(st == 401, "unknown token: %ld", st);
        json_decref(j);
        st = get("/recall?q=hello", "tok-revoked", &j);
        CHECK(st == 401, "revoked token: %ld", st);
        json_decref(j);
        st = get("/recall?q=hello", "tok-contrib", &j);
        CHECK(st == 403 && !strcmp(jerr(j), "forbidden"), "a contributor token reads recall: %ld", st);
        json_decref(j);
        st = get("/recall", "tok-reader", &j);
        CHECK(st == 400 && !strcmp(jerr(j), "bad_request") && json_is_string(json_object_get(j, "message")), "no q: %ld", st);
        json_decref(j);
        st = get("/recall?q=", "tok-reader", &j);
        CHECK(st == 400, "empty q: %ld", st);
        json_decref(j);
        st = get("/recall?q=x&k=abc", "tok-reader", &j);
        CHECK(st == 400, "bad k: %ld", st);
        json_decref(j);
        st = get("/recall?q=x&k=0", "tok-reader", &j);
        CHECK(st == 400, "k=0: %ld", st);
        json_decref(j);
        st = get("/recall?q=x&target=nope", "tok-reader", &j);
        CHECK(st == 400, "bad target: %ld", st);
        json_decref(j);
        st = get("/recall?q=Which%20city%20has%20the%20Eiffel%20Tower%3F&k=2", "tok-reader", &j);
        CHECK(st == 200, "recall: %ld", st);
        json_t *hits = json_object_get(j, "hits");
        CHECK(json_array_size(hits) == 2, "k=2 gave %zu hits", json_array_size(hits));
        json_t *h0 = json_array_get(hits, 0);
        CHECK(!strcmp(json_string_value(json_object_get(h0, "item_id")) ?: "", "claim-00"), "route top-1");
        CHECK(!strcmp(json_string_value(json_object_get(h0, "target")) ?: "", "claim") &&
                  json_is_number(json_object_get(h0, "score")) && json_object_get(h0, "text"),
              "hit shape");
        CHECK(!strcmp(json_string_value(json_object_get(j, "query")) ?: "", "Which city has the Eiffel Tower?") &&
                  !strcmp(json_string_value(json_object_get(j, "model")) ?: "", MODEL_NAME) &&
                  json_is_boolean(json_object_get(j, "ann")) && json_integer_value(json_object_get(j, "collection")) == NALL,
              "answer shape");
        json_decref(j);
        st = get("/recall?q=anything&k=5000&target=predicate", "tok-reader", &j);
        CHECK(st == 200 && json_array_size(json_object_get(j, "hits")) == 100, "k capped: %ld, %zu hits", st,
              json_array_size(json_object_get(j, "hits")));
        json_decref(j);
        donto_coord_stop(c, 5);
    }
    donto_recall_close(r);
}

int main(void) {
    const char *src = getenv("DONTO_SOURCE_DIR"), *bld = getenv("DONTO_BUILD_DIR");
    snprintf(g_model, sizeof g_model, "%s/models/all-MiniLM-L6-v2", src ? src : ".");
    snprintf(g_exe, sizeof g_exe, "%s/donto-embed", bld ? bld : "build");
    snprintf(g_dir, sizeof g_dir, "%s/donto-recall-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    snprintf(g_db, sizeof g_db, "%s/donto.db", g_dir);
    snprintf(g_prefix, sizeof g_prefix, "%s/donto.db", g_dir);
    donto_err err = {0};
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = 2;
    if (donto_encoder_open(g_model, &eo, &g_enc, &err)) {
        CHECK(0, "the test model %s: %s", g_model, err.msg);
        return check_report("test_recall");
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_library();
    test_cli();
    test_route();
    curl_global_cleanup();
    donto_encoder_close(g_enc);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report("test_recall");
}
