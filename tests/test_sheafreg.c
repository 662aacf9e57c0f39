/* The sheaf model registry (src/sheafreg/, include/donto/sheaf_registry.h) on
 * SQLite (no argument) and on PostgreSQL (argument "pg", DONTO_TEST_PG_URL from
 * scripts/pg-test-server; test sheafreg_pg). One suite on both:
 *   - a database without the registry's tables: DONTO_E_SCHEMA saying "--migrate"
 *     (not NOT_FOUND, which means "no such model" / "no active model");
 *   - the gate's refusals that need no reference: not JSON, truncated, not a
 *     checkpoint, unknown version, a tensor of the wrong size, a weight that is
 *     not a finite float32; and a good checkpoint without probe or reference is
 *     refused saying how to give one;
 *   - add, list, get by name and id, duplicate names, unknown names;
 *   - activate / roll back in one transaction, one active model per task held
 *     by the database even against a hand-written second UPDATE, the CHECK on
 *     state, retire;
 *   - concurrency: activation and roll-back in a loop while reader threads (a
 *     store handle each) read the active model: every read finds one, and its
 *     checkpoint bytes are those of the model whose id came with them. */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "donto/sheaf.h"
#include "donto/sheaf_registry.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* A small trained-shape checkpoint (random weights) for graph shape f=8, K=3. */
static char *make_ckpt(const char *dir, const char *name, uint64_t seed, size_t *len) {
    donto_err err = {0};
    donto_graph g;
    CHECK(donto_graph_random(&g, 30, 8, 3, 60, 5, &err) == 0, "%s", err.msg);
    donto_sheaf_hp hp;
    donto_sheaf_hp_default(&hp);
    hp.d = 2, hp.layers = 1, hp.hidden = 3, hp.seed = seed;
    donto_sheaf_model *m = donto_sheaf_model_new(&hp, &g, &err);
    CHECK(m != NULL, "%s", err.msg);
    char path[600];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    CHECK(donto_sheaf_save(m, &g, NULL, path, &err) == 0, "%s", err.msg);
    donto_sheaf_model_free(m);
    donto_graph_free(&g);
    return slurp(path, len);
}

/* Run SQL on the store's own connection; 0 ok, -1 refused (message into msg). */
static int raw_sql(donto_store *s, const char *sql, char *msg, size_t cap) {
    donto_db db;
    donto_err err = {0};
    if (donto_store_db(s, &db, &err)) return snprintf(msg, cap, "%s", err.msg), -1;
    if (db.kind == DONTO_DB_SQLITE) {
        char *e = NULL;
        int rc = sqlite3_exec(db.sqlite, sql, NULL, NULL, &e);
        snprintf(msg, cap, "%s", e ? e : "");
        sqlite3_free(e);
        return rc == SQLITE_OK ? 0 : -1;
    }
    PGresult *r = PQexec(db.pg, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    snprintf(msg, cap, "%s", PQresultErrorMessage(r));
    PQclear(r);
    return ok ? 0 : -1;
}

static donto_sheaf_check fake_check(void) {
    donto_sheaf_check c;
    memset(&c, 0, sizeof c);
    snprintf(c.family, sizeof c.family, "diag");
    c.hparams = "{\"family\":\"diag\"}";
    c.metrics = "{}";
    c.parity = "{\"max_abs\":1.5e-07,\"tol\":1e-05}";
    return c;
}

typedef struct reader {
    const char *url;
    const char *bytes[3]; /* expected checkpoint bytes by id (1-based; ids 1, 2 of task "t") */
    size_t lens[3];
    atomic_int *stop;
    long reads, bad, none;
} reader;

static void *read_loop(void *arg) {
    reader *r = arg;
    donto_store *s = NULL;
    donto_err err = {0};
    if (donto_store_open_existing(r->url, &s, &err)) {
        r->bad++;
        return NULL;
    }
    while (!atomic_load(r->stop)) {
        donto_sheaf_reg_model m;
        if (donto_sheaf_registry_active(s, "t", &m, &err)) {
            if (donto_err_code(&err) == DONTO_E_NOT_FOUND) r->none++;
            else if (donto_err_code(&err) != DONTO_E_UNAVAILABLE) {
                fprintf(stderr, "reader: %s\n", err.msg);
                r->bad++;
            }
            continue;
        }
        r->reads++;
        int ok = m.id >= 1 && m.id <= 2 && !strcmp(m.state, "active") && !strcmp(m.task, "t") &&
                 m.checkpoint_len == r->lens[m.id] && !memcmp(m.checkpoint, r->bytes[m.id], m.checkpoint_len) &&
                 !strcmp(m.name, m.id == 1 ? "a" : "b");
        if (!ok) r->bad++;
        donto_sheaf_reg_model_free(&m);
    }
    donto_store_close(s);
    return NULL;
}

/* The gate refuses buf (what names the case) with a message containing want. */
static void refused(const donto_sheaf_check_opts *co, const char *buf, size_t len, const char *what, const char *want) {
    donto_sheaf_check c;
    donto_err err = {0};
    CHECK(donto_sheaf_registry_check(buf, len, co, &c, &err) == -1, "%s accepted", what);
    CHECK(strstr(err.msg, want) != NULL, "%s: '%s' lacks '%s'", what, err.msg, want);
    donto_sheaf_check_free(&c);
}

/* The first tensor value of checkpoint text t, and its length (up to the comma); NULL if none. */
static char *first_value(char *t, size_t *len) {
    char *p = strstr(t, "\"data\":[");
    char *q = p ? p + 8 : NULL, *e = q ? strchr(q, ',') : NULL;
    if (!e) return NULL;
    *len = (size_t)(e - q);
    return q;
}

static void suite(const char *url, const char *dir) {
    donto_err err = {0};
    donto_store *s = NULL;
    CHECK(donto_store_open(url, &s, &err) == 0, "%s", err.msg);
    if (!s) return;
    /* not migrated: its own code, apart from "no such model" */
    donto_sheaf_reg_model m;
    CHECK(donto_sheaf_registry_schema_check(s, &err) == -1, "schema check passes on an empty database");
    CHECK(donto_err_code(&err) == DONTO_E_SCHEMA, "schema check code %s", donto_code_name(donto_err_code(&err)));
    CHECK(donto_sheaf_registry_get(s, "x", 0, &m, &err) == -1, "get on an unmigrated database");
    CHECK(donto_err_code(&err) == DONTO_E_SCHEMA, "code %s", donto_code_name(donto_err_code(&err)));
    CHECK(donto_sheaf_registry_active_info(s, "t", &m, &err) == -1 && donto_err_code(&err) == DONTO_E_SCHEMA,
          "active on an unmigrated database: %s", donto_code_name(donto_err_code(&err)));
    CHECK_STR_CONTAINS(err.msg, "--migrate");
    CHECK(donto_sheaf_registry_migrate(s, &err) == 0, "%s", err.msg);
    CHECK(donto_sheaf_registry_migrate(s, &err) == 0, "migrate twice: %s", err.msg);
    CHECK(donto_sheaf_registry_schema_check(s, &err) == 0, "%s", err.msg);

    /* the gate, before any reference is needed */
    size_t la, lb;
    char *ca = make_ckpt(dir, "a", 11, &la), *cb = make_ckpt(dir, "b", 12, &lb);
    CHECK(ca && cb && (la != lb || memcmp(ca, cb, la)), "two different checkpoints");
    donto_sheaf_check c;
    donto_sheaf_check_opts co = {NULL, "a.json"};
    refused(&co, ca, la / 2, "truncated", "not valid JSON");
    refused(&co, "{\"format\":\"x\"}", 14, "a non-checkpoint", "not a donto-sheaf checkpoint");
    char *t = strdup(ca), *p = strstr(t, "\"version\":2");
    CHECK(p != NULL, "version in checkpoint");
    if (p) p[10] = '7';
    refused(&co, t, la, "version 7", "version 7");
    free(t);
    /* a weight that overflows float32, then a tensor one value short */
    t = strdup(ca);
    size_t l;
    char *q = first_value(t, &l);
    if (q && l >= 4) memcpy(q, "1e39", 4), memset(q + 4, ' ', l - 4);
    refused(&co, t, la, "1e39", "not a finite float");
    free(t);
    t = strdup(ca);
    q = first_value(t, &l);
    if (q) memset(q, ' ', l + 1); /* drop the first value and its comma */
    refused(&co, t, la, "a short tensor", "values, expected");
    free(t);
    CHECK(donto_sheaf_registry_check(ca, la, &co, &c, &err) == -1, "no reference, no probe: accepted");
    CHECK_STR_CONTAINS(err.msg, "no reference");
    CHECK(!strcmp(c.task_kind, "node") && c.f == 8 && c.classes == 3, "what the gate read: %s %d %d", c.task_kind, c.f,
          c.classes);
    donto_sheaf_check_free(&c);

    /* rows */
    donto_sheaf_check fc = fake_check();
    int64_t ida = 0, idb = 0, idx = 0, prev = -1;
    CHECK(donto_sheaf_registry_add(s, "a", "t", &fc, ca, la, 0, &ida, &err) == 0, "%s", err.msg);
    CHECK(donto_sheaf_registry_add(s, "b", "t", &fc, cb, lb, 0, &idb, &err) == 0, "%s", err.msg);
    CHECK(ida == 1 && idb == 2, "ids %lld %lld", (long long)ida, (long long)idb);
    CHECK(donto_sheaf_registry_add(s, "a", "t", &fc, ca, la, 0, &idx, &err) == -1, "duplicate name accepted");
    CHECK(donto_err_code(&err) == DONTO_E_CONFLICT, "duplicate: code %d (%s)", donto_err_code(&err), err.msg);
    CHECK(donto_sheaf_registry_add(s, "other", "u", &fc, ca, la, 1, &idx, &err) == 0, "%s", err.msg);
    CHECK(donto_sheaf_registry_active(s, "t", &m, &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND,
          "no active model yet");
    CHECK(donto_sheaf_registry_get(s, "nope", 0, &m, &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND,
          "unknown name");
    CHECK(donto_sheaf_registry_get(s, "2", 1, &m, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(m.name, "b") && !strcmp(m.state, "candidate") && m.checkpoint_len == lb &&
              !memcmp(m.checkpoint, cb, lb) && m.parity_max_abs == 1.5e-07 && m.created_at > 0,
          "get by id: %s %s %zu %g", m.name, m.state, m.checkpoint_len, m.parity_max_abs);
    donto_sheaf_reg_model_free(&m);
    donto_sheaf_reg_model *ms = NULL;
    size_t n = 0;
    CHECK(donto_sheaf_registry_list(s, "t", &ms, &n, &err) == 0 && n == 2, "list t: %zu", n);
    donto_sheaf_reg_models_free(ms, n);
    CHECK(donto_sheaf_registry_list(s, NULL, &ms, &n, &err) == 0 && n == 3 && !strcmp(ms[2].state, "active"),
          "list all: %zu", n);
    donto_sheaf_reg_models_free(ms, n);

    /* activate, switch, roll back */
    CHECK(donto_sheaf_registry_activate(s, "a", &prev, &err) == 0 && prev == 0, "%s", err.msg);
    CHECK(donto_sheaf_registry_activate(s, "b", &prev, &err) == 0 && prev == ida, "%s", err.msg);
    CHECK(donto_sheaf_registry_get(s, "a", 0, &m, &err) == 0 && !strcmp(m.state, "retired"), "a: %s", m.state);
    donto_sheaf_reg_model_free(&m);
    CHECK(donto_sheaf_registry_active(s, "t", &m, &err) == 0 && m.id == idb && m.checkpoint_len == lb &&
              !memcmp(m.checkpoint, cb, lb) && m.activated_at > 0,
          "active is b");
    donto_sheaf_reg_model_free(&m);
    CHECK(donto_sheaf_registry_activate(s, "1", &prev, &err) == 0 && prev == idb, "rollback: %s", err.msg);
    CHECK(donto_sheaf_registry_active(s, "t", &m, &err) == 0 && m.id == ida, "active is a again");
    donto_sheaf_reg_model_free(&m);
    CHECK(donto_sheaf_registry_activate(s, "a", &prev, &err) == 0 && prev == 0, "activating the active one is a no-op");
    CHECK(donto_sheaf_registry_active(s, "u", &m, &err) == 0 && m.id == idx, "the other task's model is untouched");
    donto_sheaf_reg_model_free(&m);

    /* the database holds the invariant, whatever the code does */
    char msg[512];
    CHECK(raw_sql(s, "UPDATE donto_sheaf_model SET state = 'active' WHERE model_id = 2", msg, sizeof msg) == -1,
          "a second active model for task t accepted by the database");
    fprintf(stderr, "  second active refused: %.120s\n", msg);
    CHECK(raw_sql(s, "UPDATE donto_sheaf_model SET state = 'bogus' WHERE model_id = 2", msg, sizeof msg) == -1,
          "state 'bogus' accepted");
    CHECK(donto_sheaf_registry_active(s, "t", &m, &err) == 0 && m.id == ida, "still a");
    donto_sheaf_reg_model_free(&m);

    /* concurrency: flip a <-> b while readers read */
    atomic_int stop = 0;
    reader rd[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&rd[i], 0, sizeof rd[i]);
        rd[i].url = url, rd[i].stop = &stop;
        rd[i].bytes[1] = ca, rd[i].lens[1] = la, rd[i].bytes[2] = cb, rd[i].lens[2] = lb;
        pthread_create(&th[i], NULL, read_loop, &rd[i]);
    }
    int flips = 0, flip_fail = 0;
    for (int k = 0; k < 200; k++) {
        if (donto_sheaf_registry_activate(s, k % 2 ? "a" : "b", &prev, &err)) {
            flip_fail++;
            if (donto_err_code(&err) != DONTO_E_UNAVAILABLE) fprintf(stderr, "flip: %s\n", err.msg);
        } else flips++;
    }
    atomic_store(&stop, 1);
    long reads = 0, bad = 0, none = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        reads += rd[i].reads, bad += rd[i].bad, none += rd[i].none;
    }
    fprintf(stderr, "  concurrency: %d activations (%d busy), %ld reads by 3 threads, %ld without a model, %ld wrong\n",
            flips, flip_fail, reads, none, bad);
    CHECK(flips >= 150, "only %d of 200 activations went through", flips);
    CHECK(reads > 0 && bad == 0 && none == 0, "reads %ld, wrong %ld, none %ld", reads, bad, none);

    CHECK(donto_sheaf_registry_retire(s, "a", &err) == 0 && donto_sheaf_registry_retire(s, "b", &err) == 0, "%s", err.msg);
    CHECK(donto_sheaf_registry_active(s, "t", &m, &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND,
          "retired: no active model");
    CHECK(donto_sheaf_registry_retire(s, "zzz", &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND, "retire unknown");
    free(ca), free(cb);
    donto_store_close(s);
}

int main(int argc, char **argv) {
    char tmpdir[] = "/tmp/test_sheafreg.XXXXXX";
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    int pg = argc > 1 && !strcmp(argv[1], "pg");
    if (pg) {
        const char *url = getenv("DONTO_TEST_PG_URL");
        CHECK(url != NULL, "test_sheafreg pg: DONTO_TEST_PG_URL is not set (run via scripts/pg-test-server)");
        if (url) suite(url, tmpdir);
    } else {
        char db[600];
        snprintf(db, sizeof db, "%s/r.db", tmpdir);
        suite(db, tmpdir);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report(pg ? "test_sheafreg pg" : "test_sheafreg");
}
