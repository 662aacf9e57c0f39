/* The work-queue store, one suite run against every backend: SQLite (a temp
 * file) always, PostgreSQL when DONTO_TEST_PG_URL is set (tests/store.cmake
 * starts a throwaway cluster for that). `test_store pg` runs PostgreSQL only
 * and fails when no URL is given. DONTO_TEST_STORE_ITEMS sizes the
 * concurrency case (default 20000). */
#define _POSIX_C_SOURCE 200809L
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "check.h"
#include "donto/store.h"

static const char *g_backend; /* "sqlite" | "pg", for messages */
static const char *g_pg_url;
static char g_tmpdir[256];
static int g_case;
static char g_url[512];

/* A fresh, migrated store for one case; g_url is left pointing at it so that
 * further handles (threads) can open the same database. */
static donto_store *fresh(void) {
    donto_err err = {0};
    if (strcmp(g_backend, "pg") == 0) {
        PGconn *c = PQconnectdb(g_pg_url);
        PGresult *r = PQexec(c, "SET client_min_messages = warning; DROP SCHEMA public CASCADE; CREATE SCHEMA public");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "pg reset: %s", PQerrorMessage(c));
            exit(1);
        }
        PQclear(r);
        PQfinish(c);
        snprintf(g_url, sizeof g_url, "%s", g_pg_url);
    } else {
        snprintf(g_url, sizeof g_url, "%s/case%d.db", g_tmpdir, ++g_case);
    }
    donto_store *s = NULL;
    if (donto_store_open(g_url, &s, &err) || donto_store_migrate(s, &err)) {
        fprintf(stderr, "%s: open/migrate %s: %s\n", g_backend, g_url, err.msg);
        exit(1);
    }
    return s;
}

static donto_enqueue_item E(donto_target t, const char *id, const char *model) {
    return (donto_enqueue_item){.target = t, .item_id = id, .text = "some text", .model = model};
}

static const float VEC4[4] = {0.5f, 0.5f, 0.5f, 0.5f};

static donto_submit_item S(const donto_leased_item *it) {
    return (donto_submit_item){.target = it->target, .item_id = it->item_id,
                               .lease_id = it->lease_id, .vector = VEC4, .dims = 4};
}

static void get_stats(donto_store *s, int64_t now, donto_target_stats st[DONTO_TARGET_N]) {
    donto_err err;
    CHECK(donto_store_stats(s, now, st, &err) == 0, "%s stats: %s", g_backend, err.msg);
}

static void test_migrate_idempotent(void) {
    donto_err err;
    donto_store *s = fresh();
    CHECK(donto_store_migrate(s, &err) == 0, "%s second migrate: %s", g_backend, err.msg);
    donto_store *t = NULL;
    CHECK(donto_store_open(g_url, &t, &err) == 0, "%s reopen: %s", g_backend, err.msg);
    if (t) {
        CHECK(donto_store_migrate(t, &err) == 0, "%s migrate on a new handle: %s", g_backend, err.msg);
        CHECK(donto_store_ping(t, &err) == 0, "%s ping: %s", g_backend, err.msg);
        donto_store_close(t);
    }
    donto_enqueue_item it = E(DONTO_TARGET_CLAIM, "a", "m");
    size_t added = 0;
    CHECK(donto_store_enqueue(s, &it, 1, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 1);
    donto_store_close(s);
}

/* Raw SQL on the case's database (fixed text only), for the tests that
 * set up what an older build left behind. */
static int raw_sql(const char *sql) {
    int ok = 0;
    if (strcmp(g_backend, "pg") == 0) {
        PGconn *c = PQconnectdb(g_url);
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
        if (!ok) fprintf(stderr, "raw sql: %s", PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
    } else {
        sqlite3 *db = NULL;
        char *msg = NULL;
        ok = sqlite3_open(g_url, &db) == SQLITE_OK && sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK;
        if (!ok) fprintf(stderr, "raw sql: %s\n", msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
    }
    return ok ? 0 : -1;
}

/* How many rows a query returns (-1 on error). */
static long raw_count(const char *sql) {
    long n = -1;
    if (strcmp(g_backend, "pg") == 0) {
        PGconn *c = PQconnectdb(g_url);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) n = PQntuples(r);
        PQclear(r);
        PQfinish(c);
    } else {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        if (sqlite3_open(g_url, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
            n = 0;
            while (sqlite3_step(st) == SQLITE_ROW) n++;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
    }
    return n;
}

/* Migrations are keyed by (module, version): a module's version 1 is not
 * the store's; each applies once; a failing one leaves nothing behind. */
static void test_migration_registry(void) {
    donto_err err;
    donto_store *s = fresh();
    static const donto_migration M[] = {
        {1, "first", {"CREATE TABLE regmod_a (x INTEGER)", "CREATE TABLE regmod_a (x INTEGER)"}},
        {2, "second", {"CREATE TABLE regmod_b (y TEXT)", "CREATE TABLE regmod_b (y TEXT)"}},
    };
    donto_migrations set = {"regmod", M, 2};
    CHECK(donto_store_apply_migrations(s, &set, &err) == 0, "%s regmod: %s", g_backend, err.msg);
    CHECK(donto_store_apply_migrations(s, &set, &err) == 0, "%s regmod again: %s", g_backend, err.msg);
    CHECK(raw_count("SELECT version FROM donto_migrations WHERE module = 'regmod'") == 2,
          "%s: regmod recorded twice over", g_backend);
    CHECK(raw_count("SELECT version FROM donto_migrations WHERE module = 'store'") == 9,
          "%s: the store's nine migrations", g_backend);
    /* A broken migration fails with the module and version named and is not recorded. */
    static const donto_migration BAD[] = {{3, "broken", {"CREATE TABLE (", "CREATE TABLE ("}}};
    donto_migrations bad = {"regmod", BAD, 1};
    CHECK(donto_store_apply_migrations(s, &bad, &err) == -1, "%s: broken migration applied", g_backend);
    CHECK_STR_CONTAINS(err.msg, "regmod 3 (broken)");
    CHECK(raw_count("SELECT version FROM donto_migrations WHERE module = 'regmod' AND version = 3") == 0,
          "%s: broken migration recorded", g_backend);
    donto_store_close(s);

    /* A database from before the registry: one schema_migrations list where
     * 1-6 were the store's and 10 the substrate's. Nothing is applied again
     * (migration 1 would fail: its tables exist), and the rows carry over. */
    s = fresh();
    int pg = strcmp(g_backend, "pg") == 0;
    /* A token from then survives the later rebuilds of its table (7, 8). */
    CHECK(raw_sql("INSERT INTO tokens (name, hash, role, created) VALUES ('keep', 'h-keep', 'reader', 5)") == 0,
          "%s: a token before the upgrade", g_backend);
    /* It predates migrations 7 and 9 too: undo what they added. */
    CHECK(raw_sql(pg ? "DROP TABLE donto_counters; DROP INDEX vectors_token; ALTER TABLE vectors DROP COLUMN token, DROP COLUMN verified,"
                       " DROP COLUMN text; ALTER TABLE reports DROP COLUMN token; ALTER TABLE tokens"
                       " DROP COLUMN suspended, DROP COLUMN reason, DROP COLUMN streak, DROP COLUMN checks,"
                       " DROP COLUMN failed, DROP COLUMN withdrawn, DROP COLUMN suspended_at"
                     : "DROP TABLE donto_counters; DROP INDEX vectors_token; ALTER TABLE vectors DROP COLUMN token;"
                       " ALTER TABLE vectors DROP COLUMN verified; ALTER TABLE vectors DROP COLUMN text;"
                       " ALTER TABLE reports DROP COLUMN token") == 0,
          "%s: undo migrations 7 and 9", g_backend);
    CHECK(raw_sql(pg ? "DROP TABLE donto_migrations; CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                       " name TEXT NOT NULL, applied TIMESTAMPTZ NOT NULL DEFAULT now());"
                       "INSERT INTO schema_migrations (version, name) VALUES (1, 'queue and vectors'),"
                       " (2, 'tokens'), (3, 'reports and contributors'), (4, 'throughput'), (5, 'recall index'),"
                       " (6, 'one ready index'), (10, 'substrate')"
                     : "DROP TABLE donto_migrations; CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                       " name TEXT NOT NULL, applied INTEGER NOT NULL);"
                       "INSERT INTO schema_migrations VALUES (1, 'queue and vectors', 1), (2, 'tokens', 1),"
                       " (3, 'reports and contributors', 1), (4, 'throughput', 1), (5, 'recall index', 1),"
                       " (6, 'one ready index', 1), (10, 'substrate', 1)") == 0,
          "%s: make a legacy database", g_backend);
    donto_store_close(s);
    CHECK(donto_store_open(g_url, &s, &err) == 0, "%s reopen: %s", g_backend, err.msg);
    /* Not migrated is a code of its own (DONTO_E_SCHEMA, "migrate it"), not
     * NOT_FOUND: the schema check, and a table that is not there yet. */
    CHECK(donto_store_schema_check(s, NULL, 0, &err) == -1 && donto_err_code(&err) == DONTO_E_SCHEMA,
          "%s: schema check of a legacy database: %s", g_backend, donto_code_name(donto_err_code(&err)));
    CHECK_STR_CONTAINS(err.msg, "migrated");
    CHECK(donto_store_counter_add(s, "x", 1, &err) == -1 && donto_err_code(&err) == DONTO_E_SCHEMA,
          "%s: a missing table: %s (%s)", g_backend, donto_code_name(donto_err_code(&err)), err.msg);
    CHECK(donto_store_migrate(s, &err) == 0, "%s migrate a legacy database: %s", g_backend, err.msg);
    CHECK(raw_count("SELECT version FROM donto_migrations WHERE module = 'store'") == 9,
          "%s: legacy store rows, and migrations 7, 8 and 9 applied since", g_backend);
    CHECK(raw_count("SELECT name FROM tokens WHERE name = 'keep' AND role = 'reader' AND created = 5") == 1,
          "%s: the token survived migrations 7 and 8", g_backend);
    CHECK(raw_sql("INSERT INTO tokens (name, hash, role, created) VALUES ('an', 'h-an', 'analyst', 6)") == 0,
          "%s: migration 8 admits the analyst role", g_backend);
    CHECK(raw_sql("INSERT INTO tokens (name, hash, role, created) VALUES ('k', 'h-k', 'king', 6)") != 0,
          "%s: an unknown role is still refused", g_backend);
    CHECK(raw_count("SELECT version FROM donto_migrations WHERE module = 'substrate' AND version = 1") == 1,
          "%s: legacy substrate row", g_backend);
    donto_store_close(s);
}

/* Many coordinators, one database (docs/fleet.md; src/store/fleet.c):
 * counters every handle adds to and reads the same; the advisory lock held
 * by one handle's connection keeps every other session out until released
 * (PostgreSQL; on SQLite the lock is nothing and succeeds). */
static void test_fleet_counters(void) {
    donto_store *s = fresh(), *t = NULL;
    donto_err err = {0};
    CHECK(donto_store_open(g_url, &t, &err) == 0, "%s: a second handle: %s", g_backend, err.msg);
    CHECK(donto_store_counter_add(s, "a", 2, &err) == 0 && donto_store_counter_add(t, "a", 3, &err) == 0 &&
              donto_store_counter_add(s, "b", -1, &err) == 0 && donto_store_counter_add(t, "b", 0, &err) == 0,
          "%s: counter add: %s", g_backend, err.msg);
    CHECK(donto_store_counter_add(s, "", 1, &err) == -1 && err.code == DONTO_E_INVALID, "%s: a nameless counter",
          g_backend);
    const char *names[] = {"a", "b", "never"};
    int64_t v[3] = {-9, -9, -9}, w[3] = {-9, -9, -9};
    CHECK(donto_store_counters_get(s, names, 3, v, &err) == 0 && donto_store_counters_get(t, names, 3, w, &err) == 0,
          "%s: counters get: %s", g_backend, err.msg);
    CHECK(v[0] == 5 && v[1] == -1 && v[2] == 0 && !memcmp(v, w, sizeof v), "%s: counters %lld %lld %lld",
          g_backend, (long long)v[0], (long long)v[1], (long long)v[2]);
    int pg = strcmp(g_backend, "pg") == 0;
    CHECK(donto_store_lock(s, 4242, &err) == 0, "%s: lock: %s", g_backend, err.msg);
    if (pg)
        CHECK(raw_count("SELECT 1 WHERE pg_try_advisory_lock(4242)") == 0, "pg: another session took the held lock");
    CHECK(donto_store_unlock(s, 4242, &err) == 0, "%s: unlock: %s", g_backend, err.msg);
    if (pg) CHECK(raw_count("SELECT 1 WHERE pg_try_advisory_lock(4242)") == 1, "pg: the released lock is free");
    /* A token's leases across handles: its workers' ("tk/..."), not those of
     * a token whose name it begins ("tkx/..."), not those run out. */
    donto_enqueue_item it[4] = {{DONTO_TARGET_CLAIM, "lb-1", "t", "m"},
                                {DONTO_TARGET_CLAIM, "lb-2", "t", "m"},
                                {DONTO_TARGET_CLAIM, "lb-3", "t", "m"},
                                {DONTO_TARGET_CLAIM, "lb-4", "t", "m"}};
    size_t added = 0;
    donto_lease_batch b1 = {0}, b2 = {0}, b3 = {0};
    CHECK(donto_store_enqueue(s, it, 4, &added, &err) == 0 && added == 4, "%s: enqueue: %s", g_backend, err.msg);
    CHECK(donto_store_lease(s, "tk/w1", 2, DONTO_TARGET_CLAIM, 1000, 5000, &b1, &err) == 0 && b1.n == 2 &&
              donto_store_lease(t, "tkx/w", 1, DONTO_TARGET_CLAIM, 1000, 5000, &b2, &err) == 0 && b2.n == 1 &&
              donto_store_lease(t, "tk/w2", 1, DONTO_TARGET_CLAIM, 1000, 100, &b3, &err) == 0 && b3.n == 1,
          "%s: leases: %s", g_backend, err.msg);
    int64_t held = -1, first = -1;
    CHECK(donto_store_leased_by(s, "tk", 2000, &held, &first, &err) == 0 && held == 2 && first == 6000,
          "%s: leased by tk: %lld, first expiry %lld (%s)", g_backend, (long long)held, (long long)first, err.msg);
    CHECK(donto_store_leased_by(t, "tk", 1050, &held, &first, &err) == 0 && held == 3 && first == 1100,
          "%s: leased by tk before w2's ran out: %lld", g_backend, (long long)held);
    CHECK(donto_store_leased_by(t, "nobody", 0, &held, &first, &err) == 0 && held == 0 && first == 0,
          "%s: leased by nobody: %lld", g_backend, (long long)held);
    donto_lease_batch_free(&b1), donto_lease_batch_free(&b2), donto_lease_batch_free(&b3);
    donto_store_close(t);
    /* Held by a handle that goes away: the server releases it. */
    CHECK(donto_store_lock(s, 4243, &err) == 0, "%s: lock: %s", g_backend, err.msg);
    donto_store_close(s);
    if (pg) CHECK(raw_count("SELECT 1 WHERE pg_try_advisory_lock(4243)") == 1, "pg: a closed holder's lock is free");
}

/* The wrappers: the database handle, error codes, injected faults. */
static void test_wrappers(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_db db;
    CHECK(donto_store_db(s, &db, &err) == 0, "%s db: %s", g_backend, err.msg);
    int pg = strcmp(g_backend, "pg") == 0;
    CHECK(db.kind == (pg ? DONTO_DB_POSTGRES : DONTO_DB_SQLITE) && (pg ? db.pg != NULL : db.sqlite != NULL),
          "%s db kind %d", g_backend, (int)db.kind);
    donto_enqueue_item it = E(DONTO_TARGET_CLAIM, "f1", "m");
    size_t added = 0;
    CHECK(donto_store_enqueue(s, &it, 1, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    donto_store_fault("lease", 1, DONTO_E_UNAVAILABLE);
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 1, -1, 1000, 1000, &b, &err) == -1, "%s: injected lease ran", g_backend);
    CHECK(err.code == DONTO_E_UNAVAILABLE, "%s: injected code %s", g_backend, donto_code_name(err.code));
    CHECK_STR_CONTAINS(err.msg, "lease: injected fault");
    CHECK(b.n == 0 && b.items == NULL, "%s: injected lease left items", g_backend);
    CHECK(donto_store_lease(s, "w", 1, -1, 1000, 1000, &b, &err) == 0 && b.n == 1,
          "%s: lease after the one fault: %s", g_backend, err.msg);
    donto_lease_batch_free(&b);
    donto_store_fault("*", 2, DONTO_E_INTERNAL);
    CHECK(donto_store_ping(s, &err) == -1 && err.code == DONTO_E_INTERNAL, "%s: '*' fault on ping", g_backend);
    donto_store_fault(NULL, 0, DONTO_E_NONE);
    CHECK(donto_store_ping(s, &err) == 0, "%s: faults cleared: %s", g_backend, err.msg);
    /* A NULL err is allowed. */
    donto_store_fault("ping", 1, DONTO_E_UNAVAILABLE);
    CHECK(donto_store_ping(s, NULL) == -1, "%s: fault with a NULL err", g_backend);
    CHECK(donto_store_ping(s, NULL) == 0, "%s: ping after", g_backend);
    donto_store_close(s);
}

/* donto_db_code: the classification other modules get for their own SQL on
 * the store's database is the store's own, per engine. */
static donto_code db_code_of(const donto_db *db, const char *sql) {
    if (db->kind == DONTO_DB_SQLITE) {
        if (sqlite3_exec(db->sqlite, sql, NULL, NULL, NULL) == SQLITE_OK) return DONTO_E_NONE;
        return donto_db_code(db, NULL);
    }
    PGresult *r = PQexec(db->pg, sql);
    ExecStatusType st = PQresultStatus(r);
    donto_code c = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK
                       ? DONTO_E_NONE
                       : donto_db_code(db, PQresultErrorField(r, PG_DIAG_SQLSTATE));
    PQclear(r);
    return c;
}

static void test_db_code(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    donto_db db;
    CHECK(donto_store_db(s, &db, &err) == 0, "%s db: %s", g_backend, err.msg);
    static const struct {
        const char *sql;
        donto_code want;
    } cases[] = {
        {"CREATE TABLE code_t (k INTEGER PRIMARY KEY, v INTEGER NOT NULL CHECK (v > 0))", DONTO_E_NONE},
        {"INSERT INTO code_t VALUES (1, 1)", DONTO_E_NONE},
        {"INSERT INTO code_t VALUES (1, 2)", DONTO_E_CONFLICT},  /* duplicate key */
        {"INSERT INTO code_t VALUES (2, -1)", DONTO_E_INVALID},  /* CHECK */
        {"INSERT INTO code_t VALUES (3, NULL)", DONTO_E_INVALID}, /* NOT NULL */
        {"SELECT * FROM code_nope", DONTO_E_SCHEMA},             /* not migrated */
        {"SELEKT 1", DONTO_E_INTERNAL},                           /* our bug */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        donto_code got = db_code_of(&db, cases[i].sql);
        CHECK(got == cases[i].want, "%s: %s: %s, want %s", g_backend, cases[i].sql, donto_code_name(got),
              donto_code_name(cases[i].want));
    }
    db_code_of(&db, "DROP TABLE code_t");
    donto_db none = {db.kind, NULL, NULL};
    CHECK(donto_db_code(&none, NULL) == DONTO_E_UNAVAILABLE, "%s: no connection", g_backend);
    donto_store_close(s);
}

static void test_enqueue_duplicates(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item items[] = {E(DONTO_TARGET_CLAIM, "a", "m"), E(DONTO_TARGET_CLAIM, "b", "m"),
                                  E(DONTO_TARGET_CLAIM, "a", "m"), E(DONTO_TARGET_ENTITY, "a", "m"),
                                  E(DONTO_TARGET_CLAIM, "a", "m2")};
    size_t added = 0;
    CHECK(donto_store_enqueue(s, items, 5, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 4);
    CHECK(donto_store_enqueue(s, items, 5, &added, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(added, 0);
    /* An embedded item is not queued again for the same model. */
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 1, DONTO_TARGET_PREDICATE, 0, 1000, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 0);
    donto_enqueue_item p = E(DONTO_TARGET_PREDICATE, "p", "m");
    CHECK(donto_store_enqueue(s, &p, 1, &added, &err) == 0, "%s", err.msg);
    CHECK(donto_store_lease(s, "w", 1, DONTO_TARGET_PREDICATE, 0, 1000, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 1);
    if (b.n == 1) {
        donto_submit_item si = S(&b.items[0]);
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        CHECK(donto_store_submit(s, "w", &si, 1, 10, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(res.upserted, 1);
    }
    donto_lease_batch_free(&b);
    CHECK(donto_store_enqueue(s, &p, 1, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 0);
    donto_store_close(s);
}

static int find_id(const donto_lease_batch *b, const char *id) {
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->items[i].item_id, id) == 0) return 1;
    return 0;
}

static void test_lease(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item items[10];
    char ids[10][8];
    for (int i = 0; i < 10; i++) {
        snprintf(ids[i], sizeof ids[i], "i%d", i);
        items[i] = E(i < 6 ? DONTO_TARGET_CLAIM : DONTO_TARGET_ENTITY, ids[i], "m");
    }
    size_t added;
    CHECK(donto_store_enqueue(s, items, 10, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0}, b = {0}, c = {0}, d = {0};
    CHECK(donto_store_lease(s, "w1", 4, -1, 100, 1000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 4); /* n caps the batch */
    CHECK(donto_store_lease(s, "w2", 100, DONTO_TARGET_ENTITY, 100, 1000, &b, &err) == 0, "%s",
          err.msg);
    for (size_t i = 0; i < b.n; i++) {
        CHECK_EQ_INT(b.items[i].target, DONTO_TARGET_ENTITY);
        CHECK(!find_id(&a, b.items[i].item_id), "%s: %s leased twice", g_backend,
              b.items[i].item_id);
    }
    size_t entity_in_a = 0;
    for (size_t i = 0; i < a.n; i++) entity_in_a += a.items[i].target == DONTO_TARGET_ENTITY;
    CHECK_EQ_INT(b.n, 4 - entity_in_a);
    CHECK(donto_store_lease(s, "w3", 100, -1, 100, 1000, &c, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n + b.n + c.n, 10);
    for (size_t i = 0; i < c.n; i++)
        CHECK(!find_id(&a, c.items[i].item_id) && !find_id(&b, c.items[i].item_id),
              "%s: %s leased twice", g_backend, c.items[i].item_id);
    CHECK(donto_store_lease(s, "w4", 100, -1, 100, 1000, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(d.n, 0); /* nothing ready */
    /* lease ids: unique, positive */
    int64_t all[10];
    size_t k = 0;
    donto_lease_batch *bs[3] = {&a, &b, &c};
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < bs[j]->n && k < 10; i++) all[k++] = bs[j]->items[i].lease_id;
    for (size_t i = 0; i < k; i++) {
        CHECK(all[i] > 0, "lease_id %lld", (long long)all[i]);
        for (size_t j = i + 1; j < k; j++) CHECK(all[i] != all[j], "lease_id repeated");
    }
    CHECK(a.n == 0 || strcmp(a.items[0].text, "some text") == 0, "text");
    CHECK(a.n == 0 || strcmp(a.items[0].model, "m") == 0, "model");
    donto_lease_batch_free(&a);
    donto_lease_batch_free(&b);
    donto_lease_batch_free(&c);
    donto_lease_batch_free(&d);
    donto_store_close(s);
}

/* A lease for any target takes the targets in order (claim, predicate,
 * entity, memory_chunk) and fills n across them; expired leases of an
 * earlier target come before fresh items of a later one. */
static void test_lease_any_order(void) {
    donto_err err;
    donto_store *s = fresh();
    static const struct {
        donto_target t;
        const char *id;
    } in[] = {{DONTO_TARGET_MEMORY_CHUNK, "m1"}, {DONTO_TARGET_PREDICATE, "p1"}, {DONTO_TARGET_CLAIM, "c1"},
              {DONTO_TARGET_MEMORY_CHUNK, "m2"}, {DONTO_TARGET_CLAIM, "c2"},     {DONTO_TARGET_PREDICATE, "p2"},
              {DONTO_TARGET_CLAIM, "c3"},        {DONTO_TARGET_MEMORY_CHUNK, "m3"}};
    size_t nin = sizeof in / sizeof in[0], added;
    donto_enqueue_item items[8];
    for (size_t i = 0; i < nin; i++) items[i] = E(in[i].t, in[i].id, "m");
    CHECK(donto_store_enqueue(s, items, nin, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0}, b = {0}, c = {0};
    CHECK(donto_store_lease(s, "w1", 4, -1, 100, 1000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 4);
    for (size_t i = 0; i < a.n; i++)
        CHECK_EQ_INT(a.items[i].target, i < 3 ? DONTO_TARGET_CLAIM : DONTO_TARGET_PREDICATE);
    CHECK(donto_store_lease(s, "w2", 100, -1, 200, 1000, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 4); /* the other predicate, then the three memory chunks */
    for (size_t i = 0; i < b.n; i++)
        CHECK_EQ_INT(b.items[i].target, i < 1 ? DONTO_TARGET_PREDICATE : DONTO_TARGET_MEMORY_CHUNK);
    donto_submit_item rel = {b.items[1].target, b.items[1].item_id, b.items[1].lease_id, NULL, 0, "m"};
    size_t released;
    CHECK(donto_store_release(s, "w2", &rel, 1, &released, &err) == 0 && released == 1, "%s", err.msg);
    /* At 1100 w1's leases have expired (w2's have not): its three claims and
     * its predicate come before the memory chunk w2 released. */
    CHECK(donto_store_lease(s, "w3", 5, -1, 1100, 1000, &c, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.n, 5);
    for (size_t i = 0; i < c.n; i++)
        CHECK_EQ_INT(c.items[i].target, i < 3   ? DONTO_TARGET_CLAIM
                                        : i < 4 ? DONTO_TARGET_PREDICATE
                                                : DONTO_TARGET_MEMORY_CHUNK);
    CHECK(c.n < 5 || !strcmp(c.items[4].item_id, b.items[1].item_id), "%s: the released chunk, got %s",
          g_backend, c.n ? c.items[c.n - 1].item_id : "-");
    donto_lease_batch_free(&a);
    donto_lease_batch_free(&b);
    donto_lease_batch_free(&c);
    donto_store_close(s);
}

static void test_expiry_and_fencing(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item e[2] = {E(DONTO_TARGET_CLAIM, "x", "m"), E(DONTO_TARGET_CLAIM, "y", "m")};
    size_t added;
    CHECK(donto_store_enqueue(s, e, 2, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0}, b = {0}, c = {0};
    CHECK(donto_store_lease(s, "w1", 1, -1, 1000, 100, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 1);
    /* take y out of the way */
    CHECK(donto_store_lease(s, "w9", 1, -1, 1000, 1000000, &c, &err) == 0, "%s", err.msg);
    CHECK(donto_store_lease(s, "w2", 5, -1, 1099, 100, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 0); /* still leased */
    donto_lease_batch_free(&b);
    CHECK(donto_store_lease(s, "w2", 5, -1, 1100, 100, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 1); /* expired: ready again, no reclaim step */
    if (a.n == 1 && b.n == 1) {
        CHECK(strcmp(a.items[0].item_id, b.items[0].item_id) == 0, "same item");
        CHECK(b.items[0].lease_id > a.items[0].lease_id, "%s: new lease_id %lld after %lld",
              g_backend, (long long)b.items[0].lease_id, (long long)a.items[0].lease_id);
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        donto_submit_item late = S(&a.items[0]);
        CHECK(donto_store_submit(s, "w1", &late, 1, 1150, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_LEASE_EXPIRED);
        CHECK_EQ_INT(res.upserted, 0);
        donto_target_stats st[DONTO_TARGET_N];
        get_stats(s, 1150, st);
        CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].embedded, 0); /* nothing stored */
        donto_submit_item cur = S(&b.items[0]);
        CHECK(donto_store_submit(s, "w2", &cur, 1, 1160, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 1);
        /* the stale lease stays stale once the item is done */
        CHECK(donto_store_submit(s, "w1", &late, 1, 1170, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_LEASE_EXPIRED);
        CHECK_EQ_INT(res.upserted, 0);
    }
    /* Late but harmless: y's lease expired, nobody re-leased it. */
    if (c.n == 1) {
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        donto_submit_item si = S(&c.items[0]);
        CHECK(donto_store_submit(s, "w9", &si, 1, 5000000, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 1);
    }
    donto_lease_batch_free(&a);
    donto_lease_batch_free(&b);
    donto_lease_batch_free(&c);
    donto_store_close(s);
}

static void test_submit_verdicts(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item e[3] = {E(DONTO_TARGET_CLAIM, "a", "m"), E(DONTO_TARGET_CLAIM, "b", "m"),
                               E(DONTO_TARGET_CLAIM, "c", "m")};
    size_t added;
    CHECK(donto_store_enqueue(s, e, 3, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0};
    CHECK(donto_store_lease(s, "w1", 3, -1, 0, 100000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 3);
    if (a.n == 3) {
        donto_reject rj[4];
        donto_submit_result res = {.reject = rj};
        donto_submit_item wrong[2] = {S(&a.items[0]), S(&a.items[0])};
        wrong[1].lease_id = 0;
        CHECK(donto_store_submit(s, "w2", wrong, 2, 10, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NOT_LEASED);
        CHECK_EQ_INT(rj[1], DONTO_REJECT_NOT_LEASED);
        CHECK_EQ_INT(res.upserted, 0);
        donto_submit_item unk = {.target = DONTO_TARGET_CLAIM, .item_id = "nope", .lease_id = 5,
                                 .vector = VEC4, .dims = 4};
        donto_submit_item unk2 = S(&a.items[0]);
        unk2.target = DONTO_TARGET_ENTITY; /* same id, other target: unknown */
        donto_submit_item two[2] = {unk, unk2};
        CHECK(donto_store_submit(s, "w1", two, 2, 10, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_UNKNOWN_ITEM);
        CHECK_EQ_INT(rj[1], DONTO_REJECT_UNKNOWN_ITEM);
        /* accepted, then the same submit again: idempotent */
        donto_submit_item ok = S(&a.items[0]);
        CHECK(donto_store_submit(s, "w1", &ok, 1, 20, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 1);
        CHECK_EQ_INT(res.repeated, 0);
        CHECK(donto_store_submit(s, "w1", &ok, 1, 30, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 1);
        CHECK_EQ_INT(res.repeated, 1);
        /* ... and another worker cannot claim it */
        CHECK(donto_store_submit(s, "w2", &ok, 1, 30, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_NOT_LEASED);
        /* legacy submit (no lease_id) by the owner works; dims fixed by the
         * first vector of the model */
        donto_submit_item legacy = S(&a.items[1]);
        legacy.lease_id = 0;
        legacy.dims = 3;
        donto_submit_item good = S(&a.items[2]);
        good.lease_id = 0;
        donto_submit_item mix[2] = {legacy, good};
        CHECK(donto_store_submit(s, "w1", mix, 2, 40, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_WRONG_MODEL);
        CHECK_EQ_INT(rj[1], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 1);
        donto_target_stats st[DONTO_TARGET_N];
        get_stats(s, 50, st);
        CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].embedded, 2);
        CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].leased, 1);
        donto_contributor *cs = NULL;
        size_t nc = 0;
        CHECK(donto_store_contributors(s, 10, 0, &cs, &nc, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(nc, 2);
        if (nc == 2) {
            CHECK(strcmp(cs[0].worker_id, "w1") == 0, "order: %s", cs[0].worker_id);
            CHECK_EQ_INT(cs[0].total, 2);    /* the repeat is not counted */
            CHECK_EQ_INT(cs[0].rejected, 3); /* 2 unknown + 1 wrong model */
            CHECK_EQ_INT(cs[0].last_seen, 40);
            CHECK_EQ_INT(cs[1].total, 0);
            CHECK_EQ_INT(cs[1].rejected, 3);
        }
        donto_contributor_list_free(cs, nc);
    }
    donto_lease_batch_free(&a);
    donto_store_close(s);
}

static void test_release(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item e[3] = {E(DONTO_TARGET_CLAIM, "a", "m"), E(DONTO_TARGET_CLAIM, "b", "m"),
                               E(DONTO_TARGET_CLAIM, "c", "m")};
    size_t added, rel = 99;
    CHECK(donto_store_enqueue(s, e, 3, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0}, b = {0};
    CHECK(donto_store_lease(s, "w1", 3, -1, 0, 100000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 3);
    if (a.n == 3) {
        donto_submit_item r[2] = {S(&a.items[0]), S(&a.items[1])};
        CHECK(donto_store_release(s, "w2", r, 2, &rel, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rel, 0); /* not w2's to release */
        r[1].lease_id = 0;
        CHECK(donto_store_release(s, "w1", r, 2, &rel, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rel, 2);
        CHECK(donto_store_lease(s, "w2", 10, -1, 1, 100000, &b, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(b.n, 2);
        CHECK(find_id(&b, a.items[0].item_id) && find_id(&b, a.items[1].item_id), "released");
        /* the released lease no longer counts */
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        CHECK(donto_store_submit(s, "w1", r, 1, 2, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(rj[0], DONTO_REJECT_LEASE_EXPIRED);
    }
    donto_lease_batch_free(&a);
    donto_lease_batch_free(&b);
    donto_store_close(s);
}

static void test_tokens(void) {
    donto_err err;
    donto_store *s = fresh();
    uint8_t h1[32], h2[32], h3[32];
    for (int i = 0; i < 32; i++) h1[i] = (uint8_t)i, h2[i] = (uint8_t)(100 + i), h3[i] = 7;
    CHECK(donto_store_token_add(s, "alice", DONTO_ROLE_CONTRIBUTOR, h1, 11, &err) == 0, "%s", err.msg);
    CHECK(donto_store_token_add(s, "root", DONTO_ROLE_ADMIN, h2, 12, &err) == 0, "%s", err.msg);
    CHECK(donto_store_token_add(s, "alice", DONTO_ROLE_ADMIN, h3, 13, &err) == -1, "duplicate name");
    CHECK_STR_CONTAINS(err.msg, "alice");
    CHECK(err.code == DONTO_E_CONFLICT, "%s duplicate name: code %s", g_backend, donto_code_name(err.code));
    int found = -1;
    donto_role role = DONTO_ROLE_ADMIN;
    char name[64] = "";
    CHECK(donto_store_token_check(s, h1, &found, &role, name, sizeof name, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(found, 1);
    CHECK_EQ_INT(role, DONTO_ROLE_CONTRIBUTOR);
    CHECK(strcmp(name, "alice") == 0, "name %s", name);
    CHECK(donto_store_token_check(s, h2, &found, &role, name, sizeof name, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(found, 1);
    CHECK_EQ_INT(role, DONTO_ROLE_ADMIN);
    CHECK(donto_store_token_check(s, h3, &found, &role, NULL, 0, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(found, 0);
    int revoked = -1;
    CHECK(donto_store_token_revoke(s, "alice", &revoked, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(revoked, 1);
    CHECK(donto_store_token_revoke(s, "alice", &revoked, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(revoked, 0);
    CHECK(donto_store_token_revoke(s, "nobody", &revoked, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(revoked, 0);
    CHECK(donto_store_token_check(s, h1, &found, &role, name, sizeof name, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(found, 0);
    donto_token_info *t = NULL;
    size_t n = 0;
    CHECK(donto_store_token_list(s, &t, &n, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK(strcmp(t[0].name, "alice") == 0 && t[0].revoked == 1 &&
                  t[0].role == DONTO_ROLE_CONTRIBUTOR && t[0].created == 11,
              "alice row");
        CHECK(strcmp(t[1].name, "root") == 0 && t[1].revoked == 0 && t[1].role == DONTO_ROLE_ADMIN,
              "root row");
    }
    donto_token_list_free(t, n);
    donto_store_close(s);
}

static void test_stats_reports(void) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item e[7];
    char ids[7][8];
    for (int i = 0; i < 7; i++) {
        snprintf(ids[i], sizeof ids[i], "s%d", i);
        e[i] = E(i < 5 ? DONTO_TARGET_CLAIM : DONTO_TARGET_PREDICATE, ids[i], "m");
    }
    size_t added;
    CHECK(donto_store_enqueue(s, e, 7, &added, &err) == 0, "%s", err.msg);
    donto_lease_batch a = {0};
    CHECK(donto_store_lease(s, "w1", 2, DONTO_TARGET_CLAIM, 1000, 500, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 2);
    if (a.n == 2) {
        donto_reject rj[1];
        donto_submit_result res = {.reject = rj};
        donto_submit_item si = S(&a.items[0]);
        CHECK(donto_store_submit(s, "w1", &si, 1, 1200, &res, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(res.upserted, 1);
    }
    donto_target_stats st[DONTO_TARGET_N];
    get_stats(s, 1300, st);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].embedded, 1);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].leased, 1);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].pending, 3);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].total, 5);
    CHECK_EQ_INT(st[DONTO_TARGET_PREDICATE].pending, 2);
    CHECK_EQ_INT(st[DONTO_TARGET_PREDICATE].total, 2);
    CHECK_EQ_INT(st[DONTO_TARGET_ENTITY].total, 0);
    get_stats(s, 1500, st); /* the lease has run out */
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].leased, 0);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].pending, 4);
    int64_t recent = -1;
    CHECK(donto_store_embedded_since(s, 1200, &recent, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(recent, 1);
    CHECK(donto_store_embedded_since(s, 1201, &recent, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(recent, 0);
    donto_lease_batch_free(&a);

    /* reports: newest first; long messages cut at 1500 characters, not bytes */
    size_t big = 2000 * 2 + 1;
    char *msg = malloc(big);
    for (size_t i = 0; i < 2000; i++) memcpy(msg + 2 * i, "\xc3\xa9", 2); /* U+00E9 */
    msg[big - 1] = 0;
    CHECK(donto_store_report(s, "w1", "error", "first", 100, &err) == 0, "%s", err.msg);
    CHECK(donto_store_report(s, "w2", "warn", msg, 200, &err) == 0, "%s", err.msg);
    free(msg);
    donto_report *r = NULL;
    size_t n = 0;
    CHECK(donto_store_reports_recent(s, 10, &r, &n, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK(strcmp(r[0].worker_id, "w2") == 0 && strcmp(r[0].kind, "warn") == 0, "newest");
        CHECK_EQ_INT(strlen(r[0].message), 3000);
        CHECK_EQ_INT(r[0].created, 200);
        CHECK(strcmp(r[1].message, "first") == 0, "older");
    }
    donto_report_list_free(r, n);
    CHECK(donto_store_reports_recent(s, 1, &r, &n, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(n, 1);
    donto_report_list_free(r, n);
    donto_contributor *cs = NULL;
    size_t nc = 0;
    CHECK(donto_store_contributors(s, 10, 0, &cs, &nc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(nc, 2); /* a report makes a worker seen */
    if (nc == 2) CHECK_EQ_INT(cs[0].last_seen, 1200);
    donto_contributor_list_free(cs, nc);
    donto_store_close(s);
}

/* Throughput per minute: the series sums contributors' accepted vectors per
 * whole minute (a repeat counts nothing), a contributor's recent count
 * covers the minutes asked for, and old minutes are pruned. */
static void test_throughput(void) {
    donto_err err;
    donto_store *s = fresh();
    const int64_t M = 60000, T0 = 28000000 * M; /* a minute boundary */
    char ids[12][8];
    donto_enqueue_item e[12];
    for (int i = 0; i < 12; i++) {
        snprintf(ids[i], sizeof ids[i], "t%d", i);
        e[i] = E(DONTO_TARGET_CLAIM, ids[i], "m");
    }
    size_t added;
    CHECK(donto_store_enqueue(s, e, 12, &added, &err) == 0, "%s", err.msg);
    /* w1: 3 items in minute 0, 2 in minute 2 (then one repeat); w2: 4 in minute 2. */
    struct { const char *w; int n; int64_t at; } plan[] = {{"w1", 3, T0 + 5}, {"w1", 2, T0 + 2 * M + 1}, {"w2", 4, T0 + 2 * M + 59999}};
    for (int k = 0; k < 3; k++) {
        donto_lease_batch b = {0};
        CHECK(donto_store_lease(s, plan[k].w, plan[k].n, -1, plan[k].at, 10 * M, &b, &err) == 0 && (int)b.n == plan[k].n,
              "%s lease %d: %s", g_backend, k, err.msg);
        donto_reject rj[8];
        donto_submit_item si[8];
        for (size_t i = 0; i < b.n; i++) si[i] = S(&b.items[i]);
        donto_submit_result res = {.reject = rj};
        CHECK(donto_store_submit(s, plan[k].w, si, b.n, plan[k].at, &res, &err) == 0 && res.upserted == b.n, "%s", err.msg);
        if (k == 1) { /* the same submit again: a repeat, not counted */
            CHECK(donto_store_submit(s, plan[k].w, si, b.n, plan[k].at + 10, &res, &err) == 0 && res.repeated == b.n,
                  "%s repeat: %s", g_backend, err.msg);
        }
        donto_lease_batch_free(&b);
    }
    int64_t c[4] = {-1, -1, -1, -1};
    CHECK(donto_store_series(s, T0 / M, 4, c, &err) == 0, "%s series: %s", g_backend, err.msg);
    CHECK(c[0] == 3 && c[1] == 0 && c[2] == 6 && c[3] == 0, "%s series %lld %lld %lld %lld, want 3 0 6 0", g_backend,
          (long long)c[0], (long long)c[1], (long long)c[2], (long long)c[3]);
    CHECK(donto_store_series(s, T0 / M + 1, 2, c, &err) == 0 && c[0] == 0 && c[1] == 6, "%s series window", g_backend);
    donto_contributor *cs = NULL;
    size_t nc = 0;
    CHECK(donto_store_contributors(s, 10, T0 + 2 * M, &cs, &nc, &err) == 0 && nc == 2, "%s: %s", g_backend, err.msg);
    for (size_t i = 0; i < nc; i++) {
        if (!strcmp(cs[i].worker_id, "w1")) CHECK(cs[i].total == 5 && cs[i].recent == 2, "%s w1 total %lld recent %lld",
                                                  g_backend, (long long)cs[i].total, (long long)cs[i].recent);
        else CHECK(cs[i].total == 4 && cs[i].recent == 4, "%s w2 recent %lld", g_backend, (long long)cs[i].recent);
    }
    donto_contributor_list_free(cs, nc);
    /* An hour and more later, the old minutes are pruned. */
    CHECK(donto_store_series(s, T0 / M + 62, 1, c, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK(donto_store_series(s, T0 / M, 4, c, &err) == 0 && c[0] == 0 && c[2] == 6, "%s prune: minute 0 %lld, minute 2 %lld",
          g_backend, (long long)c[0], (long long)c[2]);
    donto_store_close(s);
}

/* The stored bytes of one vector, read straight from the database (the store
 * has no read-back call): checks the float32 little-endian encoding. */
static int raw_vec(const char *item_id, const char *model, unsigned char *out, size_t cap,
                   size_t *len, int *dims) {
    *len = 0;
    *dims = -1;
    if (strcmp(g_backend, "pg") == 0) {
        PGconn *c = PQconnectdb(g_pg_url);
        const char *v[2] = {item_id, model};
        PGresult *r = PQexecParams(c, "SELECT vec, dims FROM vectors WHERE item_id = $1 AND model = $2",
                                   2, NULL, v, NULL, NULL, 1);
        int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
        if (ok) {
            *len = (size_t)PQgetlength(r, 0, 0);
            if (*len <= cap) memcpy(out, PQgetvalue(r, 0, 0), *len);
            uint32_t d;
            memcpy(&d, PQgetvalue(r, 0, 1), 4);
            *dims = (int)(((d & 0xff) << 24) | ((d & 0xff00) << 8) | ((d >> 8) & 0xff00) | (d >> 24));
        }
        PQclear(r);
        PQfinish(c);
        return ok ? 0 : -1;
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int ok = sqlite3_open_v2(g_url, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
             sqlite3_prepare_v2(db, "SELECT vec, dims FROM vectors WHERE item_id = ?1 AND model = ?2",
                                -1, &st, NULL) == SQLITE_OK;
    if (ok) {
        sqlite3_bind_text(st, 1, item_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, model, -1, SQLITE_STATIC);
        ok = sqlite3_step(st) == SQLITE_ROW;
        if (ok) {
            *len = (size_t)sqlite3_column_bytes(st, 0);
            if (*len <= cap) memcpy(out, sqlite3_column_blob(st, 0), *len);
            *dims = sqlite3_column_int(st, 1);
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok ? 0 : -1;
}

/* Ids with quotes, backslashes, commas, braces, NULL-looking text and
 * non-ASCII survive every path; vectors land as float32 LE; an item queued
 * for two models is told apart by lease_id; a batch naming one item twice
 * stores it once. */
static void test_odd_ids_and_bytes(void) {
    donto_err err;
    donto_store *s = fresh();
    const char *odd = "a\"b\\c,{d} NULL \xc3\xa9";
    donto_enqueue_item e[3] = {E(DONTO_TARGET_ENTITY, odd, "m1"), E(DONTO_TARGET_ENTITY, odd, "m2"),
                               E(DONTO_TARGET_ENTITY, "NULL", "m1")};
    size_t added;
    CHECK(donto_store_enqueue(s, e, 3, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, 3);
    donto_lease_batch a = {0};
    CHECK(donto_store_lease(s, "w\"1", 3, DONTO_TARGET_ENTITY, 0, 100000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, 3);
    if (a.n == 3) {
        static const float v1[4] = {1.5f, -2.0f, 0.25f, 3.0f};
        donto_submit_item si[4];
        for (int i = 0; i < 3; i++) {
            si[i] = S(&a.items[i]);
            si[i].vector = v1;
            CHECK(strcmp(a.items[i].item_id, odd) == 0 || strcmp(a.items[i].item_id, "NULL") == 0,
                  "%s: id came back as %s", g_backend, a.items[i].item_id);
        }
        si[3] = si[0]; /* the same item again in the same batch */
        donto_reject rj[4];
        donto_submit_result res = {.reject = rj};
        CHECK(donto_store_submit(s, "w\"1", si, 4, 10, &res, &err) == 0, "%s: %s", g_backend, err.msg);
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(rj[i], DONTO_REJECT_NONE);
        CHECK_EQ_INT(res.upserted, 4);
        CHECK_EQ_INT(res.repeated, 1);
        donto_target_stats st[DONTO_TARGET_N];
        get_stats(s, 20, st);
        CHECK_EQ_INT(st[DONTO_TARGET_ENTITY].embedded, 3);
        CHECK_EQ_INT(st[DONTO_TARGET_ENTITY].total, 3);
        unsigned char raw[64];
        size_t len = 0;
        int dims = 0;
        CHECK(raw_vec(odd, "m2", raw, sizeof raw, &len, &dims) == 0, "%s: vector row", g_backend);
        CHECK_EQ_INT(len, 16);
        CHECK_EQ_INT(dims, 4);
        /* 1.5f = 0x3fc00000, -2.0f = 0xc0000000, little-endian */
        static const unsigned char want[8] = {0x00, 0x00, 0xc0, 0x3f, 0x00, 0x00, 0x00, 0xc0};
        CHECK(len == 16 && memcmp(raw, want, 8) == 0, "%s: bytes %02x %02x %02x %02x", g_backend,
              raw[0], raw[1], raw[2], raw[3]);
    }
    donto_lease_batch_free(&a);
    donto_store_close(s);
}

/* Recall's reads: the high-water mark and the (created, item_id) pages. */
static void test_vectors_read(void) {
    donto_err err;
    donto_store *s = fresh();
    /* 10 claims of model m, plus one of another model and one entity (both
     * must stay out of the claim/m reads). */
    enum { N = 10 };
    char ids[N][16];
    donto_enqueue_item e[N + 2];
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "c%02d", (i * 7) % N); /* not enqueued in id order */
        e[i] = E(DONTO_TARGET_CLAIM, ids[i], "m");
    }
    e[N] = E(DONTO_TARGET_CLAIM, "other-model", "m2");
    e[N + 1] = E(DONTO_TARGET_ENTITY, "ent", "m");
    size_t added;
    CHECK(donto_store_enqueue(s, e, N + 2, &added, &err) == 0, "%s", err.msg);
    int64_t cnt = -1, maxc = -1;
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, &cnt, &maxc, &err) == 0, "%s: %s", g_backend, err.msg);
    CHECK_EQ_INT(cnt, 0);
    CHECK(maxc == INT64_MIN, "%s: empty max_created %lld", g_backend, (long long)maxc);
    donto_lease_batch a = {0};
    CHECK(donto_store_lease(s, "w", N + 2, -1, 0, 100000, &a, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(a.n, N + 2);
    /* Item c0k lands at time 100 + 100 * (k / 4): three groups of created. */
    float vec[N + 2][4];
    for (size_t i = 0; i < a.n; i++) {
        donto_submit_item si = S(&a.items[i]);
        int k = a.items[i].item_id[0] == 'c' && a.items[i].item_id[1] == '0' ? atoi(a.items[i].item_id + 1) : 50;
        for (int j = 0; j < 4; j++) vec[i][j] = (float)k + 0.25f * (float)j;
        si.vector = vec[i];
        donto_reject rj;
        donto_submit_result res = {.reject = &rj};
        CHECK(donto_store_submit(s, "w", &si, 1, 100 + 100 * (k / 4), &res, &err) == 0, "%s: %s", g_backend, err.msg);
        CHECK_EQ_INT(rj, DONTO_REJECT_NONE);
    }
    donto_lease_batch_free(&a);
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, &cnt, &maxc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cnt, N);
    CHECK_EQ_INT(maxc, 300);
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", 100, &cnt, &maxc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cnt, 6); /* c04..c09 */
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", 300, &cnt, &maxc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cnt, 0);
    CHECK(maxc == INT64_MIN, "%s", g_backend);
    /* Pages of 3 from the start: every claim once, in (created, id) order,
     * which here is id order, with its own vector. */
    int seen = 0, pages = 0;
    int64_t cur = INT64_MIN;
    char last[64] = "";
    const char *after = NULL;
    for (;;) {
        donto_vec_page p;
        CHECK(donto_store_vectors_page(s, DONTO_TARGET_CLAIM, "m", cur, after, 3, &p, &err) == 0, "%s: %s", g_backend, err.msg);
        pages++;
        for (size_t i = 0; i < p.n; i++, seen++) {
            char want[16];
            snprintf(want, sizeof want, "c%02d", seen % 100);
            CHECK(strcmp(p.item_ids[i], want) == 0, "%s: row %d is %s, want %s", g_backend, seen, p.item_ids[i], want);
            CHECK_EQ_INT(p.created[i], 100 + 100 * (seen / 4));
            CHECK_EQ_INT(p.dims, 4);
            CHECK(p.vecs[i * 4] == (float)seen && p.vecs[i * 4 + 3] == (float)seen + 0.75f, "%s: vector of %s",
                  g_backend, p.item_ids[i]);
        }
        int done = p.n < 3;
        if (p.n) {
            cur = p.created[p.n - 1];
            snprintf(last, sizeof last, "%s", p.item_ids[p.n - 1]);
            after = last;
        }
        donto_vec_page_free(&p);
        if (done || pages > 10) break;
    }
    CHECK_EQ_INT(seen, N);
    CHECK_EQ_INT(pages, 4);
    /* after_id NULL: strictly after a created value. */
    donto_vec_page p;
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_CLAIM, "m", 200, NULL, 100, &p, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(p.n, 2);
    if (p.n == 2) CHECK(!strcmp(p.item_ids[0], "c08") && !strcmp(p.item_ids[1], "c09"), "%s", g_backend);
    donto_vec_page_free(&p);
    /* Other target and model are separate collections. */
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_CLAIM, "m2", INT64_MIN, NULL, 100, &p, &err) == 0, "%s", err.msg);
    CHECK(p.n == 1 && !strcmp(p.item_ids[0], "other-model"), "%s: m2 page", g_backend);
    donto_vec_page_free(&p);
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_ENTITY, "m", INT64_MIN, &cnt, &maxc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cnt, 1);
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_PREDICATE, "m", INT64_MIN, NULL, 100, &p, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(p.n, 0);
    donto_vec_page_free(&p);
    donto_store_close(s);
}

/* One value of a query on the case's PostgreSQL database (fixed text), as a
 * string in out ("" on failure or no row). */
static void pg_value(const char *sql, char *out, size_t cap) {
    out[0] = 0;
    PGconn *c = PQconnectdb(g_url);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) snprintf(out, cap, "%s", PQgetvalue(r, 0, 0));
    else fprintf(stderr, "pg_value: %s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}
#define PG_IS(sql, want)                                                                  \
    do {                                                                                  \
        char v_[512];                                                                     \
        pg_value(sql, v_, sizeof v_);                                                     \
        CHECK(!strcmp(v_, want), "%s -> '%s', want '%s'", sql, v_, want);                 \
    } while (0)

#define U1 "00000000-0000-4000-8000-000000000001"
#define U2 "00000000-0000-4000-8000-000000000002"
#define U3 "00000000-0000-4000-8000-000000000003"

/* Vectors in donto's table (store.h, DONTO_VECTORS_DONTO): SQLite refuses
 * the layout; PostgreSQL makes donto_vector when absent, writes claims'
 * embeddings there (float4[], dimensions, model_id, model_version) and reads
 * them back, upserts on donto's UNIQUE key, keeps fencing exactly-once,
 * counts, withdraws at suspension; other targets stay in `vectors`; a
 * donto_vector that donto made is used as it is, one of another shape is
 * refused. */
static void test_vectors_donto(void) {
    donto_err err = {0};
    donto_store *s = fresh();
    if (strcmp(g_backend, "pg") != 0) {
        CHECK(donto_store_set_vectors(s, DONTO_VECTORS_DONTO, &err) == -1, "sqlite accepted vectors donto");
        CHECK(donto_err_code(&err) == DONTO_E_INVALID && strstr(err.msg, "PostgreSQL"),
              "sqlite refusal: %s (%s)", err.msg, donto_code_name(donto_err_code(&err)));
        CHECK(donto_store_set_vectors(s, DONTO_VECTORS_OWN, &err) == 0, "sqlite: vectors own: %s", err.msg);
        donto_store_close(s);
        return;
    }
    CHECK(donto_store_set_vectors(s, DONTO_VECTORS_DONTO, &err) == 0, "pg: vectors donto: %s", err.msg);
    /* fresh() migrated with the default layout: no donto_vector yet. */
    CHECK(donto_store_vectors_check(s, &err) == -1 && donto_err_code(&err) == DONTO_E_SCHEMA,
          "check before migrate: %s", err.msg);
    CHECK(donto_store_migrate(s, &err) == 0, "pg: migrate with vectors donto: %s", err.msg);
    CHECK(donto_store_vectors_check(s, &err) == 0, "pg: check after migrate: %s", err.msg);
    PG_IS("SELECT count(*) FROM donto_migrations WHERE module = 'donto_vector'", "1");
    PG_IS("SELECT count(*) FROM pg_indexes WHERE tablename = 'donto_vector'", "4"); /* pkey, unique, 2 */

    /* A claim that is not a uuid cannot go to donto_vector: refused at once. */
    donto_enqueue_item bad = E(DONTO_TARGET_CLAIM, "c-1", "m");
    size_t added = 0;
    CHECK(donto_store_enqueue(s, &bad, 1, &added, &err) == -1 && donto_err_code(&err) == DONTO_E_INVALID,
          "non-uuid claim enqueued: %s", err.msg);
    /* donto already holds a vector for U3 under model m (another version). */
    CHECK(raw_sql("INSERT INTO donto_vector (subject_type, subject_id, model_id, model_version, dimensions, embedding)"
                  " VALUES ('statement', '" U3 "', 'm', 'donto-old', 2, '{1,0}')") == 0,
          "seed donto_vector");
    PG_IS("SELECT vector_id IS NOT NULL FROM donto_vector WHERE subject_id = '" U3 "'", "t");
    char vid[64];
    pg_value("SELECT vector_id FROM donto_vector WHERE subject_id = '" U3 "'", vid, sizeof vid);
    donto_enqueue_item e[4] = {E(DONTO_TARGET_CLAIM, U1, "m"), E(DONTO_TARGET_CLAIM, U2, "m"),
                               E(DONTO_TARGET_CLAIM, U3, "m"), E(DONTO_TARGET_ENTITY, "wn:dog", "m")};
    CHECK(donto_store_enqueue(s, e, 4, &added, &err) == 0 && added == 4, "enqueue: %s", err.msg);
    donto_lease_batch a = {0};
    CHECK(donto_store_lease(s, "w1", 10, -1, 1000, 500, &a, &err) == 0 && a.n == 4, "lease: %s", err.msg);
    /* w1's lease expires, w2 takes the claims: w1's late submit is fenced off. */
    donto_lease_batch b2 = {0};
    CHECK(donto_store_lease(s, "w2", 10, DONTO_TARGET_CLAIM, 2000, 100000, &b2, &err) == 0 && b2.n == 3,
          "re-lease: %s", err.msg);
    float v[4][4];
    donto_submit_item si[4];
    donto_reject rj[4];
    for (size_t i = 0; i < a.n; i++) {
        si[i] = S(&a.items[i]);
        for (int j = 0; j < 4; j++) v[i][j] = (float)(i + 1) * 0.125f + (float)j;
        si[i].vector = v[i];
    }
    donto_submit_result res = {.reject = rj};
    CHECK(donto_store_submit(s, "w1", si, a.n, 2100, &res, &err) == 0, "w1 submit: %s", err.msg);
    int exp = 0, ok = 0;
    for (size_t i = 0; i < a.n; i++) exp += rj[i] == DONTO_REJECT_LEASE_EXPIRED, ok += rj[i] == DONTO_REJECT_NONE;
    CHECK(exp == 3 && ok == 1, "w1: %d lease_expired (want 3), %d accepted (the entity)", exp, ok);
    PG_IS("SELECT count(*) FROM donto_vector WHERE model_id = 'm' AND model_version = 'donto-old'", "1");
    /* w2 submits: U1, U2 new rows; U3 donto's row updated in place. */
    float w[3][4];
    donto_submit_item s2[3];
    for (size_t i = 0; i < b2.n; i++) {
        s2[i] = S(&b2.items[i]);
        int k = b2.items[i].item_id[35] - '0';
        for (int j = 0; j < 4; j++) w[i][j] = (float)k + 0.25f * (float)j;
        s2[i].vector = w[i];
    }
    res = (donto_submit_result){.reject = rj};
    CHECK(donto_store_submit(s, "w2", s2, b2.n, 3000, &res, &err) == 0 && res.upserted == 3 && res.repeated == 0,
          "w2 submit: %s (%zu upserted)", err.msg, res.upserted);
    /* The same submit again: exactly once (repeats, nothing written). */
    res = (donto_submit_result){.reject = rj};
    CHECK(donto_store_submit(s, "w2", s2, b2.n, 4000, &res, &err) == 0 && res.upserted == 3 && res.repeated == 3,
          "w2 resubmit: %s (%zu repeated)", err.msg, res.repeated);
    PG_IS("SELECT count(*) FROM donto_vector", "3");
    PG_IS("SELECT count(*) FROM donto_vector WHERE subject_type = 'statement' AND model_id = 'm' AND dimensions = 4"
          " AND array_length(embedding, 1) = 4 AND model_version = '" DONTO_VECTOR_MODEL_VERSION "'",
          "3");
    PG_IS("SELECT embedding::text FROM donto_vector WHERE subject_id = '" U2 "'", "{2,2.25,2.5,2.75}");
    char vid2[64];
    pg_value("SELECT vector_id FROM donto_vector WHERE subject_id = '" U3 "'", vid2, sizeof vid2);
    CHECK(vid[0] && !strcmp(vid, vid2), "donto's row of U3 kept its vector_id (%s, now %s)", vid, vid2);
    /* The ledger: claims with an empty vec, the entity with its bytes. */
    PG_IS("SELECT string_agg(target || ':' || octet_length(vec), ',' ORDER BY target, item_id) FROM vectors",
          "0:0,0:0,0:0,2:16");
    /* Read back, counted. */
    int64_t cnt = -1, maxc = -1;
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, &cnt, &maxc, &err) == 0, "mark: %s", err.msg);
    CHECK(cnt == 3 && maxc == 3000, "mark: %lld vectors, max created %lld", (long long)cnt, (long long)maxc);
    donto_vec_page p;
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, NULL, 10, &p, &err) == 0, "page: %s", err.msg);
    CHECK(p.n == 3 && p.dims == 4, "page: %zu rows of %d dims", p.n, p.dims);
    for (size_t i = 0; i < p.n; i++) {
        int k = p.item_ids[i][35] - '0';
        CHECK(p.vecs[i * 4] == (float)k && p.vecs[i * 4 + 3] == (float)k + 0.75f, "read back %s", p.item_ids[i]);
    }
    donto_vec_page_free(&p);
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_ENTITY, "m", INT64_MIN, NULL, 10, &p, &err) == 0 && p.n == 1 &&
              p.vecs[3] == p.vecs[0] + 3.0f,
          "entity page: %s", err.msg);
    donto_vec_page_free(&p);
    donto_target_stats st[DONTO_TARGET_N];
    get_stats(s, 5000, st);
    CHECK(st[DONTO_TARGET_CLAIM].embedded == 3 && st[DONTO_TARGET_CLAIM].total == 3 &&
              st[DONTO_TARGET_ENTITY].embedded == 1,
          "stats: claims %lld/%lld, entities %lld", (long long)st[0].embedded, (long long)st[0].total,
          (long long)st[2].embedded);
    /* A row donto deleted is no vector any more for reads. */
    CHECK(raw_sql("DELETE FROM donto_vector WHERE subject_id = '" U1 "'") == 0, "delete in donto_vector");
    CHECK(donto_store_vectors_mark(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, &cnt, &maxc, &err) == 0 && cnt == 2,
          "mark after donto's delete: %lld", (long long)cnt);
    CHECK(donto_store_vectors_page(s, DONTO_TARGET_CLAIM, "m", INT64_MIN, NULL, 10, &p, &err) == 0 && p.n == 2,
          "page after donto's delete: %zu", p.n);
    donto_vec_page_free(&p);
    donto_lease_batch_free(&a);
    donto_lease_batch_free(&b2);

    /* Suspension withdraws a token's unverified claim from donto_vector too. */
    donto_enqueue_item e4 = E(DONTO_TARGET_CLAIM, U1, "m");
    CHECK(raw_sql("DELETE FROM vectors WHERE item_id = '" U1 "'") == 0, "forget U1");
    CHECK(donto_store_enqueue(s, &e4, 1, &added, &err) == 0 && added == 1, "requeue U1: %s", err.msg);
    CHECK(donto_store_lease(s, "tok/w3", 1, -1, 6000, 100000, &a, &err) == 0 && a.n == 1, "lease U1: %s", err.msg);
    si[0] = S(&a.items[0]);
    si[0].vector = v[0];
    res = (donto_submit_result){.reject = rj};
    CHECK(donto_store_submit(s, "tok/w3", si, 1, 6100, &res, &err) == 0 && rj[0] == DONTO_REJECT_NONE, "tok submit: %s",
          err.msg);
    donto_lease_batch_free(&a);
    PG_IS("SELECT count(*) FROM donto_vector WHERE subject_id = '" U1 "'", "1");
    int64_t withdrawn = 0;
    CHECK(donto_store_suspend(s, "tok", "test", 7000, &withdrawn, &err) == 0 && withdrawn == 1, "suspend: %s (%lld)",
          err.msg, (long long)withdrawn);
    PG_IS("SELECT count(*) FROM donto_vector WHERE subject_id = '" U1 "'", "0");
    PG_IS("SELECT count(*) FROM queue WHERE item_id = '" U1 "'", "1");
    donto_store_close(s);

    /* donto's own donto_vector (an extra column of its own) is used as it is,
     * never altered; one of another shape is refused, clearly. */
    s = fresh();
    CHECK(raw_sql("CREATE TABLE donto_vector (vector_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
                  " subject_type text NOT NULL, subject_id uuid NOT NULL, model_id text NOT NULL, model_version text,"
                  " dimensions int NOT NULL, embedding float4[] NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),"
                  " donto_note text, UNIQUE (subject_type, subject_id, model_id))") == 0,
          "donto's table");
    CHECK(donto_store_set_vectors(s, DONTO_VECTORS_DONTO, &err) == 0 && donto_store_migrate(s, &err) == 0,
          "migrate over donto's table: %s", err.msg);
    PG_IS("SELECT count(*) FROM pg_attribute WHERE attrelid = 'donto_vector'::regclass AND attname = 'donto_note'", "1");
    donto_store_close(s);
    s = fresh();
    CHECK(raw_sql("CREATE TABLE donto_vector (subject_type text, subject_id uuid, model_id text, model_version text,"
                  " dimensions int, embedding bytea, UNIQUE (subject_type, subject_id, model_id))") == 0,
          "a table of another shape");
    CHECK(donto_store_set_vectors(s, DONTO_VECTORS_DONTO, &err) == 0, "%s", err.msg);
    CHECK(donto_store_migrate(s, &err) == -1 && donto_err_code(&err) == DONTO_E_INVALID && strstr(err.msg, "embedding"),
          "another shape: %s", err.msg);
    donto_store_close(s);
}

/* PostgreSQL restarted under a coordinator: the call that meets the dead
 * connection fails cleanly, the next one reconnects (and re-prepares). */
static void test_pg_reconnect(void) {
    if (strcmp(g_backend, "pg") != 0) return;
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item e = E(DONTO_TARGET_CLAIM, "r", "m");
    size_t added;
    CHECK(donto_store_enqueue(s, &e, 1, &added, &err) == 0, "%s", err.msg);
    PGconn *c = PQconnectdb(g_pg_url);
    PGresult *r = PQexec(c, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                            "datname = current_database() AND pid <> pg_backend_pid()");
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "terminate: %s", PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    int up = donto_store_ping(s, &err) == 0;
    if (!up) CHECK_STR_CONTAINS(err.msg, "postgres");
    CHECK(donto_store_ping(s, &err) == 0, "after reconnect: %s", err.msg);
    donto_lease_batch b = {0};
    CHECK(donto_store_lease(s, "w", 5, -1, 0, 1000, &b, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(b.n, 1);
    donto_lease_batch_free(&b);
    donto_store_close(s);
}

/* ---- concurrency: every item leased exactly once, none lost ---- */

#define NTHREADS 16
#define BATCH 50

typedef struct {
    int tid;
    int nitems;
    atomic_int *owner; /* [nitems]: 0, or 1 + the thread that leased it */
    atomic_int *dups;
    size_t leased, accepted;
    int failed;
    char err[DONTO_ERR_MAX + 32];
} conc_arg;

static void *conc_worker(void *p) {
    conc_arg *a = p;
    donto_err err = {0};
    donto_store *s = NULL;
    char worker[16];
    snprintf(worker, sizeof worker, "w%02d", a->tid);
    if (donto_store_open(g_url, &s, &err)) {
        a->failed = 1;
        snprintf(a->err, sizeof a->err, "%s", err.msg);
        return NULL;
    }
    donto_submit_item sub[BATCH];
    donto_reject rj[BATCH];
    for (;;) {
        donto_lease_batch b = {0};
        if (donto_store_lease(s, worker, BATCH, -1, 1000, INT64_C(1) << 40, &b, &err)) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "lease: %s", err.msg);
            break;
        }
        if (b.n == 0) break;
        a->leased += b.n;
        for (size_t i = 0; i < b.n; i++) {
            int idx = atoi(b.items[i].item_id + 1);
            int zero = 0;
            if (idx < 0 || idx >= a->nitems ||
                !atomic_compare_exchange_strong(&a->owner[idx], &zero, a->tid + 1))
                atomic_fetch_add(a->dups, 1);
            sub[i] = S(&b.items[i]);
        }
        donto_submit_result res = {.reject = rj};
        if (donto_store_submit(s, worker, sub, b.n, 2000, &res, &err)) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "submit: %s", err.msg);
            donto_lease_batch_free(&b);
            break;
        }
        a->accepted += res.upserted - res.repeated;
        donto_lease_batch_free(&b);
    }
    donto_store_close(s);
    return NULL;
}

static void test_concurrency(int nitems) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item *e = calloc((size_t)nitems, sizeof *e);
    char(*ids)[16] = calloc((size_t)nitems, sizeof *ids);
    for (int i = 0; i < nitems; i++) {
        snprintf(ids[i], sizeof ids[i], "c%07d", i);
        e[i] = E(DONTO_TARGET_CLAIM, ids[i], "m");
    }
    size_t added = 0;
    double t0 = donto_now();
    CHECK(donto_store_enqueue(s, e, (size_t)nitems, &added, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(added, nitems);
    double t1 = donto_now();
    atomic_int *owner = calloc((size_t)nitems, sizeof *owner);
    for (int i = 0; i < nitems; i++) atomic_init(&owner[i], 0);
    atomic_int dups;
    atomic_init(&dups, 0);
    conc_arg args[NTHREADS];
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        args[t] = (conc_arg){.tid = t, .nitems = nitems, .owner = owner, .dups = &dups};
        pthread_create(&th[t], NULL, conc_worker, &args[t]);
    }
    size_t leased = 0, accepted = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(!args[t].failed, "%s thread %d: %s", g_backend, t, args[t].err);
        leased += args[t].leased;
        accepted += args[t].accepted;
    }
    double t2 = donto_now();
    CHECK_EQ_INT(atomic_load(&dups), 0);
    CHECK_EQ_INT(leased, nitems);
    CHECK_EQ_INT(accepted, nitems);
    int missing = 0;
    for (int i = 0; i < nitems; i++) missing += atomic_load(&owner[i]) == 0;
    CHECK_EQ_INT(missing, 0);
    donto_target_stats st[DONTO_TARGET_N];
    get_stats(s, 3000, st);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].embedded, nitems);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].pending, 0);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].leased, 0);
    donto_contributor *cs = NULL;
    size_t nc = 0;
    CHECK(donto_store_contributors(s, 100, 0, &cs, &nc, &err) == 0, "%s", err.msg);
    int64_t sum = 0;
    for (size_t i = 0; i < nc; i++) sum += cs[i].total + cs[i].rejected;
    CHECK_EQ_INT(sum, nitems);
    donto_contributor_list_free(cs, nc);
    fprintf(stderr, "%s concurrency: %d items, %d threads: enqueue %.2fs, lease+submit %.2fs\n",
            g_backend, nitems, NTHREADS, t1 - t0, t2 - t1);
    free(owner);
    free(e);
    free(ids);
    donto_store_close(s);
}

/* ---- concurrency with expiry: leases run out under contention ----
 * The clock is a shared counter bumped by every lease call, the TTL is a few
 * ticks, and workers drop one batch in eight (a crash): items expire, are
 * leased again, and late submits race current ones. Whatever the interleaving,
 * every item is accepted exactly once and counted once. */

#define XTTL 12

typedef struct {
    int tid, nitems;
    atomic_long *clock;
    atomic_int *accepted_per_item; /* [nitems] */
    size_t accepted, expired, not_leased, dropped;
    int failed;
    char err[DONTO_ERR_MAX + 32];
} xarg;

static void *xworker(void *p) {
    xarg *a = p;
    donto_err err = {0};
    donto_store *s = NULL;
    char worker[16];
    snprintf(worker, sizeof worker, "x%02d", a->tid);
    if (donto_store_open(g_url, &s, &err)) {
        a->failed = 1;
        snprintf(a->err, sizeof a->err, "%s", err.msg);
        return NULL;
    }
    unsigned seed = 12345u + (unsigned)a->tid * 7919u;
    donto_submit_item sub[BATCH];
    donto_reject rj[BATCH];
    for (int round = 0; round < 1000000; round++) {
        int64_t now = atomic_fetch_add(a->clock, 1);
        donto_lease_batch b = {0};
        if (donto_store_lease(s, worker, 20, -1, now, XTTL, &b, &err)) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "lease: %s", err.msg);
            break;
        }
        if (b.n == 0) {
            donto_target_stats st[DONTO_TARGET_N];
            if (donto_store_stats(s, now, st, &err)) {
                a->failed = 1;
                snprintf(a->err, sizeof a->err, "stats: %s", err.msg);
                break;
            }
            if (st[DONTO_TARGET_CLAIM].embedded >= a->nitems) break;
            continue; /* leased elsewhere; they expire as the clock moves */
        }
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 8 == 0) { /* crash: never submit this batch */
            a->dropped += b.n;
            donto_lease_batch_free(&b);
            continue;
        }
        for (size_t i = 0; i < b.n; i++) sub[i] = S(&b.items[i]);
        donto_submit_result res = {.reject = rj};
        if (donto_store_submit(s, worker, sub, b.n, atomic_load(a->clock), &res, &err)) {
            a->failed = 1;
            snprintf(a->err, sizeof a->err, "submit: %s", err.msg);
            donto_lease_batch_free(&b);
            break;
        }
        for (size_t i = 0; i < b.n; i++) {
            if (rj[i] == DONTO_REJECT_NONE) {
                int idx = atoi(b.items[i].item_id + 1);
                if (idx >= 0 && idx < a->nitems) atomic_fetch_add(&a->accepted_per_item[idx], 1);
                a->accepted++;
            } else if (rj[i] == DONTO_REJECT_LEASE_EXPIRED) {
                a->expired++;
            } else {
                a->not_leased++;
            }
        }
        donto_lease_batch_free(&b);
    }
    donto_store_close(s);
    return NULL;
}

static void test_concurrency_expiry(int nitems) {
    donto_err err;
    donto_store *s = fresh();
    donto_enqueue_item *e = calloc((size_t)nitems, sizeof *e);
    char(*ids)[16] = calloc((size_t)nitems, sizeof *ids);
    for (int i = 0; i < nitems; i++) {
        snprintf(ids[i], sizeof ids[i], "x%07d", i);
        e[i] = E(DONTO_TARGET_CLAIM, ids[i], "m");
    }
    size_t added = 0;
    CHECK(donto_store_enqueue(s, e, (size_t)nitems, &added, &err) == 0, "%s", err.msg);
    atomic_long clock;
    atomic_init(&clock, 1);
    atomic_int *per = calloc((size_t)nitems, sizeof *per);
    for (int i = 0; i < nitems; i++) atomic_init(&per[i], 0);
    xarg args[NTHREADS];
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        args[t] = (xarg){.tid = t, .nitems = nitems, .clock = &clock, .accepted_per_item = per};
        pthread_create(&th[t], NULL, xworker, &args[t]);
    }
    size_t accepted = 0, expired = 0, not_leased = 0, dropped = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(!args[t].failed, "%s thread %d: %s", g_backend, t, args[t].err);
        accepted += args[t].accepted;
        expired += args[t].expired;
        not_leased += args[t].not_leased;
        dropped += args[t].dropped;
    }
    CHECK_EQ_INT(accepted, nitems);
    int bad = 0;
    for (int i = 0; i < nitems; i++) bad += atomic_load(&per[i]) != 1;
    CHECK_EQ_INT(bad, 0); /* each item accepted exactly once */
    CHECK_EQ_INT(not_leased, 0);
    donto_target_stats st[DONTO_TARGET_N];
    get_stats(s, atomic_load(&clock), st);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].embedded, nitems);
    CHECK_EQ_INT(st[DONTO_TARGET_CLAIM].pending + st[DONTO_TARGET_CLAIM].leased, 0);
    donto_contributor *cs = NULL;
    size_t nc = 0;
    CHECK(donto_store_contributors(s, 100, 0, &cs, &nc, &err) == 0, "%s", err.msg);
    int64_t total = 0, rejected = 0;
    for (size_t i = 0; i < nc; i++) total += cs[i].total, rejected += cs[i].rejected;
    CHECK_EQ_INT(total, nitems);
    CHECK_EQ_INT(rejected, expired);
    donto_contributor_list_free(cs, nc);
    fprintf(stderr, "%s expiry race: %d items, %zu late submits rejected, %zu dropped\n",
            g_backend, nitems, expired, dropped);
    free(per);
    free(e);
    free(ids);
    donto_store_close(s);
}

static void run_suite(const char *backend, int nitems) {
    g_backend = backend;
    int before = check_failures;
    test_migrate_idempotent();
    test_migration_registry();
    test_wrappers();
    test_db_code();
    test_fleet_counters();
    test_enqueue_duplicates();
    test_lease();
    test_lease_any_order();
    test_expiry_and_fencing();
    test_submit_verdicts();
    test_release();
    test_tokens();
    test_stats_reports();
    test_throughput();
    test_odd_ids_and_bytes();
    test_vectors_read();
    test_vectors_donto();
    test_pg_reconnect();
    test_concurrency(nitems);
    test_concurrency_expiry(nitems / 10 > 1000 ? nitems / 10 : 1000);
    fprintf(stderr, "%s suite: %s\n", backend, check_failures == before ? "ok" : "FAILED");
}

static void rm_tmpdir(void) {
    char cmd[300];
    /* only our own mkdtemp directory */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *n_env = getenv("DONTO_TEST_STORE_ITEMS");
    int nitems = n_env ? atoi(n_env) : 20000;
    if (nitems <= 0) nitems = 20000;
    g_pg_url = getenv("DONTO_TEST_PG_URL");
    if (g_pg_url && !*g_pg_url) g_pg_url = NULL;

    if (only && strcmp(only, "donto") == 0) { /* store_pg_donto: the donto layout's case on both */
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/donto-store-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(g_tmpdir)) return perror("mkdtemp"), 1;
        g_backend = "sqlite";
        test_vectors_donto();
        rm_tmpdir();
        if (!g_pg_url) CHECK(0, "test_store donto: DONTO_TEST_PG_URL is not set (run via scripts/pg-test-server)");
        g_backend = "pg";
        if (g_pg_url) test_vectors_donto();
        return check_report("test_store donto");
    }
    if (!only || strcmp(only, "sqlite") == 0) {
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s/donto-store-XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(g_tmpdir)) {
            perror("mkdtemp");
            return 1;
        }
        run_suite("sqlite", nitems);
        rm_tmpdir();
    }
    if (!only || strcmp(only, "pg") == 0) {
        if (g_pg_url) {
            run_suite("pg", nitems);
        } else if (only) {
            CHECK(0, "test_store pg: DONTO_TEST_PG_URL is not set (run via scripts/pg-test-server)");
        } else {
            fprintf(stderr, "DONTO_TEST_PG_URL not set: PostgreSQL suite runs as test store_pg\n");
        }
    }
    return check_report("test_store");
}
