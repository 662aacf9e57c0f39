/* donto-accel: the sheaf export's leakage tests (docs/sheaf.md "Export"),
 * on SQLite (a temp file; CTest test_sheafx) and on PostgreSQL
 * (`test_sheafx pg` under scripts/pg-test-server; CTest sheafx_pg).
 *
 * A planted substrate (donto_sheafx_generate, 10,000 statements) holds the
 * leaks: statements and arguments asserted after as_of, statements and
 * arguments and sameAs pairs written in a "sheaf:" context. Its ground truth
 * (the generator's --truth JSONL) is the referee: check_export() reads an
 * export back and counts, per rule, what breaks it:
 *   asof    a node or graph argument asserted after as_of (or retracted by
 *           then); a train/val label that was not known at as_of; a test
 *           label that did not appear in (as_of, until];
 *   pairs   a val/test pair that is a graph edge either way, or that shows
 *           up (either way) among the train pairs;
 *   sheaf   a node, graph argument or positive label from a sheaf context.
 * The safe export must break none; each DONTO_SHEAFX_UNSAFE_* switch turns
 * one filter off and that rule must then catch its leak (so the test is
 * not vacuous: a filter that did nothing would fail it). */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "donto/sheaf_export.h"
#include "donto/substrate.h"

static int64_t T, T2;

typedef struct truth {
    json_t *st;   /* uuid -> {from, until, sheaf, ident, subject, object} */
    json_t *args; /* "src|dst" -> [ {rel, from, sheaf} ] */
    json_t *ident; /* "iriA|iriB" (both orders) -> [ {from, sheaf} ] */
} truth;

static void load_truth(const char *path, truth *t) {
    t->st = json_object(), t->args = json_object(), t->ident = json_object();
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot read %s", path);
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o) continue;
        const char *kind = json_string_value(json_object_get(o, "t"));
        if (!strcmp(kind, "s")) {
            json_object_set(t->st, json_string_value(json_object_get(o, "id")), o);
            if (json_integer_value(json_object_get(o, "ident"))) {
                const char *a = json_string_value(json_object_get(o, "subject")), *b = json_string_value(json_object_get(o, "object"));
                char k[256];
                for (int w = 0; w < 2; w++) {
                    snprintf(k, sizeof k, "%s|%s", w ? b : a, w ? a : b);
                    json_t *l = json_object_get(t->ident, k);
                    if (!l) json_object_set_new(t->ident, k, l = json_array());
                    json_array_append(l, o);
                }
            }
        } else {
            char k[100];
            snprintf(k, sizeof k, "%s|%s", json_string_value(json_object_get(o, "src")), json_string_value(json_object_get(o, "dst")));
            json_t *l = json_object_get(t->args, k);
            if (!l) json_object_set_new(t->args, k, l = json_array());
            json_array_append(l, o);
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
}

typedef struct verdict {
    long asof, pairs, sheaf;
    long nodes, edges, arg_test, id_test, score_retracted;
} verdict;

static int64_t jint(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static int live_at(json_t *s, int64_t t) {
    json_t *u = json_object_get(s, "until");
    return jint(s, "from") <= t && (json_is_null(u) || json_integer_value(u) > t);
}

/* Is there a truth argument src -> dst (rel NULL: any) that is not sheaf-written
 * and was asserted in [lo, hi]? And one that is sheaf-written (any time)? */
static void arg_lookup(const truth *t, const char *src, const char *dst, const char *rel, int64_t lo, int64_t hi,
                       int *clean_in, int *sheaf_any) {
    char k[100];
    snprintf(k, sizeof k, "%s|%s", src, dst);
    json_t *l = json_object_get(t->args, k), *a;
    size_t i;
    json_array_foreach(l, i, a) {
        if (rel && strcmp(rel, json_string_value(json_object_get(a, "rel")))) continue;
        if (jint(a, "sheaf")) *sheaf_any = 1;
        else if (jint(a, "from") >= lo && jint(a, "from") <= hi) *clean_in = 1;
    }
}

static const char *uuid_of(const char *id) { return strncmp(id, "claim:", 6) ? NULL : id + 6; }

static void pair_key(char *k, size_t cap, const char *a, const char *b) { snprintf(k, cap, "%s|%s", a, b); }

static verdict check_export(const char *path, const truth *t) {
    verdict v = {0};
    json_error_t je;
    json_t *g = json_load_file(path, 0, &je);
    CHECK(g != NULL, "export %s does not parse: %s (line %d)", path, je.text, je.line);
    if (!g) return v;
    CHECK_EQ_INT(jint(g, "version"), 2);
    json_t *n;
    size_t i;
    /* nodes */
    json_array_foreach(json_object_get(g, "nodes"), i, n) {
        v.nodes++;
        const char *u = uuid_of(json_string_value(json_object_get(n, "id")));
        if (!u) continue;
        json_t *s = json_object_get(t->st, u);
        CHECK(s != NULL, "node %s is not a planted statement", u);
        if (!s) continue;
        if (!live_at(s, T)) v.asof++;
        if (jint(s, "sheaf")) v.sheaf++;
    }
    /* graph edges */
    json_t *edges = json_object(), *e;
    json_array_foreach(json_object_get(g, "edges"), i, e) {
        v.edges++;
        const char *a = json_string_value(json_object_get(e, "src")), *b = json_string_value(json_object_get(e, "dst"));
        const char *type = json_string_value(json_object_get(e, "type"));
        char k[600];
        pair_key(k, sizeof k, a, b);
        json_object_set_new(edges, k, json_true());
        pair_key(k, sizeof k, b, a);
        json_object_set_new(edges, k, json_true());
        if (strncmp(type, "shares_", 7) && strcmp(type, "mentions")) { /* an argument edge */
            int clean = 0, sh = 0;
            arg_lookup(t, uuid_of(a), uuid_of(b), type, INT64_MIN, T, &clean, &sh);
            if (!clean) {
                int c2 = 0, s2 = 0;
                arg_lookup(t, uuid_of(a), uuid_of(b), type, INT64_MIN, T2, &c2, &s2);
                if (c2) v.asof++;      /* exists, but asserted after as_of */
                else if (sh) v.sheaf++; /* only a sheaf-written one */
                else CHECK(0, "argument edge %s -> %s (%s) is in no truth", a, b, type);
            }
        }
    }
    /* tasks */
    json_t *task;
    json_array_foreach(json_object_get(g, "tasks"), i, task) {
        const char *name = json_string_value(json_object_get(task, "name"));
        json_t *sp = json_array_get(json_object_get(task, "splits"), 0);
        if (!strcmp(name, "claim_score")) {
            json_t *labels = json_object_get(task, "labels");
            const char *id;
            json_t *lab;
            json_object_foreach(labels, id, lab) {
                json_t *s = json_object_get(t->st, uuid_of(id));
                if (!s) continue;
                json_t *u = json_object_get(s, "until");
                int retracted = !json_is_null(u) && json_integer_value(u) > T && json_integer_value(u) <= T2;
                if (retracted != (int)json_integer_value(lab)) v.asof++;
                v.score_retracted += retracted;
            }
            continue;
        }
        json_t *pairs = json_object_get(task, "pairs");
        json_t *train_pairs = json_object();
        json_t *ix;
        size_t j;
        json_array_foreach(json_object_get(sp, "train"), j, ix) {
            json_t *p = json_array_get(pairs, (size_t)json_integer_value(ix));
            char k[600];
            pair_key(k, sizeof k, json_string_value(json_array_get(p, 0)), json_string_value(json_array_get(p, 1)));
            json_object_set_new(train_pairs, k, json_true());
        }
        static const char *const SPN[3] = {"train", "val", "test"};
        for (int s = 0; s < 3; s++) {
            json_array_foreach(json_object_get(sp, SPN[s]), j, ix) {
                json_t *p = json_array_get(pairs, (size_t)json_integer_value(ix));
                const char *a = json_string_value(json_array_get(p, 0)), *b = json_string_value(json_array_get(p, 1));
                const char *cls = json_string_value(json_array_get(p, 2));
                char k1[600], k2[600];
                pair_key(k1, sizeof k1, a, b);
                pair_key(k2, sizeof k2, b, a);
                if (s > 0 && (json_object_get(edges, k1) || json_object_get(edges, k2))) v.pairs++;
                if (s == 2 && (json_object_get(train_pairs, k1) || json_object_get(train_pairs, k2))) v.pairs++;
                int positive = strcmp(cls, "none") && strcmp(cls, "distinct");
                if (!positive) continue;
                int64_t lo = s == 2 ? T + 1 : INT64_MIN, hi = s == 2 ? T2 : T;
                int clean = 0, sh = 0;
                if (!strcmp(name, "arg_link")) {
                    arg_lookup(t, uuid_of(a), uuid_of(b), cls, lo, hi, &clean, &sh);
                    if (s == 2) v.arg_test++;
                } else { /* identity: "entity:IRI" */
                    char k[600];
                    pair_key(k, sizeof k, a + 7, b + 7);
                    json_t *l = json_object_get(t->ident, k), *o;
                    size_t q;
                    json_array_foreach(l, q, o) {
                        if (jint(o, "sheaf")) sh = 1;
                        else if (jint(o, "from") >= lo && jint(o, "from") <= hi) clean = 1;
                    }
                    if (s == 2) v.id_test++;
                }
                if (!clean) {
                    if (sh) v.sheaf++;
                    else v.asof++;
                }
            }
        }
        json_decref(train_pairs);
    }
    json_decref(edges);
    json_decref(g);
    return v;
}

static int export_seed(donto_store *s, donto_sheafx_seed seed, int hops, int64_t max_nodes, int unsafe, const char *path,
                       donto_sheafx_stats *st, donto_err *err) {
    donto_sheafx_opts o;
    donto_sheafx_opts_init(&o);
    o.seed = seed, o.as_of = T, o.until = T2, o.model = "planted-16", o.hops = hops, o.max_nodes = max_nodes;
    o.unsafe = unsafe;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = donto_sheafx_export(s, &o, f, st, err);
    fclose(f);
    return rc;
}

static int export_to(donto_store *s, int unsafe, const char *path, donto_sheafx_stats *st, donto_err *err) {
    return export_seed(s, DONTO_SHEAFX_SEED_ARGUMENTS, 2, 0, unsafe, path, st, err);
}

static void print_verdict(const char *what, const verdict *v) {
    fprintf(stderr, "  %-28s nodes %ld edges %ld test pairs arg %ld id %ld retracted %ld | leaks: asof %ld pairs %ld sheaf %ld\n",
            what, v->nodes, v->edges, v->arg_test, v->id_test, v->score_retracted, v->asof, v->pairs, v->sheaf);
}

static void suite(const char *url, const char *tmpdir) {
    donto_err err = {0};
    donto_store *s = NULL;
    CHECK(donto_store_open(url, &s, &err) == 0, "open %s: %s", url, err.msg);
    if (!s) return;
    char truth_path[512], out[512];
    snprintf(truth_path, sizeof truth_path, "%s/truth.jsonl", tmpdir);
    donto_sheafx_gen_opts go;
    donto_sheafx_gen_opts_init(&go);
    go.statements = 10000, go.as_of = T, go.until = T2, go.truth = truth_path;
    donto_sheafx_gen_stats gs;
    CHECK(donto_sheafx_generate(s, &go, &gs, &err) == 0, "generate: %s", err.msg);
    CHECK(gs.after_as_of > 0 && gs.sheaf_statements > 0 && gs.sheaf_arguments > 0, "the planted leaks are there");
    /* A second plant into the same database is refused. */
    CHECK(donto_sheafx_generate(s, &go, &gs, &err) == -1 && donto_err_code(&err) == DONTO_E_CONFLICT, "replant: %s", err.msg);
    truth t;
    load_truth(truth_path, &t);

    snprintf(out, sizeof out, "%s/safe.json", tmpdir);
    donto_sheafx_stats st;
    CHECK(export_to(s, 0, out, &st, &err) == 0, "export: %s", err.msg);
    verdict v = check_export(out, &t);
    print_verdict("filters on", &v);
    CHECK(v.asof == 0 && v.pairs == 0 && v.sheaf == 0, "the safe export leaks (asof %ld pairs %ld sheaf %ld)", v.asof,
          v.pairs, v.sheaf);
    CHECK(v.nodes > 1000 && v.edges > 1000 && v.arg_test > 10 && v.id_test > 0 && v.score_retracted > 100,
          "the export has substance (nodes %ld edges %ld test pairs %ld/%ld retracted %ld)", v.nodes, v.edges, v.arg_test,
          v.id_test, v.score_retracted);
    CHECK(st.sheaf_statements > 0 && st.sheaf_arguments > 0 && st.edges_removed_for_pairs > 0,
          "the filters had work to do (%lld %lld %lld)", (long long)st.sheaf_statements, (long long)st.sheaf_arguments,
          (long long)st.edges_removed_for_pairs);
    char digest[72];
    memcpy(digest, st.digest, sizeof digest);

    /* The same export again: the same bytes' digest (deterministic). */
    snprintf(out, sizeof out, "%s/again.json", tmpdir);
    CHECK(export_to(s, 0, out, &st, &err) == 0, "export: %s", err.msg);
    CHECK(!strcmp(digest, st.digest), "digest differs between two runs");

    /* Each filter off: its rule catches the planted leak. */
    static const struct {
        int bit;
        const char *name;
    } OFF[] = {{DONTO_SHEAFX_UNSAFE_NO_ASOF, "as-of filter off"},
               {DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER, "sheaf filter off"},
               {DONTO_SHEAFX_UNSAFE_KEEP_PAIR_EDGES, "held-out pair edges kept"}};
    for (int k = 0; k < 3; k++) {
        snprintf(out, sizeof out, "%s/unsafe%d.json", tmpdir, k);
        CHECK(export_to(s, OFF[k].bit, out, &st, &err) == 0, "export: %s", err.msg);
        verdict u = check_export(out, &t);
        print_verdict(OFF[k].name, &u);
        long caught = k == 0 ? u.asof : k == 1 ? u.sheaf : u.pairs;
        CHECK(caught > 0, "%s: the planted leak went unnoticed", OFF[k].name);
    }

    /* The identity seed: under a cap (1,000 claims) that leaves the arguments seed few
     * identity pairs, it exports whole pairs (both entities named by claim
     * nodes), in every split, and still leaks nothing; with the sheaf
     * filter off its planted sheaf-written sameAs pairs show up. */
    {
        donto_sheafx_stats sa, si;
        snprintf(out, sizeof out, "%s/cap_args.json", tmpdir);
        CHECK(export_seed(s, DONTO_SHEAFX_SEED_ARGUMENTS, 0, 1000, 0, out, &sa, &err) == 0, "export: %s", err.msg);
        snprintf(out, sizeof out, "%s/cap_ident.json", tmpdir);
        CHECK(export_seed(s, DONTO_SHEAFX_SEED_IDENTITY, 0, 1000, 0, out, &si, &err) == 0, "export identity: %s", err.msg);
        verdict vi = check_export(out, &t);
        print_verdict("identity seed, 1000 claims", &vi);
        long ida = (long)(sa.identity_pairs[0] + sa.identity_pairs[1] + sa.identity_pairs[2]);
        long idi = (long)(si.identity_pairs[0] + si.identity_pairs[1] + si.identity_pairs[2]);
        fprintf(stderr, "  identity examples at 1000 claims: arguments seed %ld, identity seed %ld (%lld/%lld/%lld)\n", ida,
                idi, (long long)si.identity_pairs[0], (long long)si.identity_pairs[1], (long long)si.identity_pairs[2]);
        CHECK(vi.asof == 0 && vi.pairs == 0 && vi.sheaf == 0, "identity seed leaks (asof %ld pairs %ld sheaf %ld)", vi.asof,
              vi.pairs, vi.sheaf);
        CHECK(si.identity_pairs[0] >= 20 && si.identity_pairs[1] >= 4 && si.identity_pairs[2] >= 4 && idi >= 2 * ida,
              "identity seed: %lld/%lld/%lld identity examples (arguments seed: %ld)", (long long)si.identity_pairs[0],
              (long long)si.identity_pairs[1], (long long)si.identity_pairs[2], ida);
        snprintf(out, sizeof out, "%s/cap_ident_unsafe.json", tmpdir);
        CHECK(export_seed(s, DONTO_SHEAFX_SEED_IDENTITY, 0, 1000, DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER, out, &si, &err) == 0,
              "export identity unsafe: %s", err.msg);
        verdict vu = check_export(out, &t);
        CHECK(vu.sheaf > 0, "identity seed, sheaf filter off: the planted sheaf-written pairs went unnoticed");
    }

    /* Bad input at the API: a model with no vectors, an empty graph. */
    donto_sheafx_opts o;
    donto_sheafx_opts_init(&o);
    o.as_of = T, o.until = T2, o.model = "no-such-model";
    FILE *f = fopen(out, "w");
    CHECK(donto_sheafx_export(s, &o, f, &st, &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND, "no vectors: %s", err.msg);
    CHECK_STR_CONTAINS(err.msg, "has no vectors");
    o.model = "planted-16", o.as_of = T - 400LL * 86400000, o.until = T2;
    rewind(f);
    CHECK(donto_sheafx_export(s, &o, f, &st, &err) == -1 && donto_err_code(&err) == DONTO_E_NOT_FOUND, "empty: %s", err.msg);
    CHECK_STR_CONTAINS(err.msg, "empty graph");
    fclose(f);

    /* stamp-history (last: it rewrites the planted times): every live row at
     * T - 1 day, a seeded fifth of the arguments and identity statements in
     * (T, T2]; an export then has test pairs from them, and the same seed
     * holds out the same rows. */
    donto_sheafx_stamp_stats ss, ss2;
    CHECK(donto_sheafx_stamp_history(s, T, T2, 0.2, 7, &ss, &err) == 0, "stamp: %s", err.msg);
    CHECK(ss.statements > 8000 && ss.arguments > 900, "restamped %lld statements %lld arguments", (long long)ss.statements,
          (long long)ss.arguments);
    CHECK(ss.held_arguments > ss.arguments / 10 && ss.held_arguments < ss.arguments * 3 / 10 && ss.held_identity > 0,
          "held out %lld of %lld arguments, %lld identity", (long long)ss.held_arguments, (long long)ss.arguments,
          (long long)ss.held_identity);
    CHECK(donto_sheafx_stamp_history(s, T, T2, 0.2, 7, &ss2, &err) == 0, "stamp again: %s", err.msg);
    CHECK(ss2.held_arguments == ss.held_arguments && ss2.held_identity == ss.held_identity, "the same seed holds out the same rows");
    snprintf(out, sizeof out, "%s/stamped.json", tmpdir);
    CHECK(export_to(s, 0, out, &st, &err) == 0, "export stamped: %s", err.msg);
    CHECK(st.arg_pairs[2] > 0 && st.identity_pairs[2] > 0 && st.arg_pairs[0] > 0, "stamped export: test pairs %lld %lld",
          (long long)st.arg_pairs[2], (long long)st.identity_pairs[2]);
    CHECK(donto_sheafx_stamp_history(s, T2, T, 0.2, 7, &ss, &err) == -1 && donto_err_code(&err) == DONTO_E_INVALID, "until <= as_of");
    json_decref(t.st), json_decref(t.args), json_decref(t.ident);
    donto_store_close(s);
}

int main(int argc, char **argv) {
    donto_err err = {0};
    CHECK(donto_sheafx_parse_time("2025-06-01", &T, &err) == 0, "%s", err.msg);
    CHECK(donto_sheafx_parse_time("2025-09-01T00:00:00Z", &T2, &err) == 0, "%s", err.msg);
    /* times */
    int64_t x;
    CHECK(donto_sheafx_parse_time("2025-06-01T02:00:00+02:00", &x, &err) == 0 && x == T, "offset");
    CHECK(donto_sheafx_parse_time("@1748736000", &x, &err) == 0 && x == T, "unix seconds");
    CHECK(donto_sheafx_parse_time("2025-06-01T00:00:00", &x, &err) == -1, "no zone is refused");
    CHECK(donto_sheafx_parse_time("yesterday", &x, &err) == -1, "words are refused");
    char buf[32];
    donto_sheafx_format_time(T2, buf);
    CHECK(!strcmp(buf, "2025-09-01T00:00:00.000Z"), "%s", buf);

    char tmpdir[] = "/tmp/test_sheafx.XXXXXX";
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp");
    int pg = argc > 1 && !strcmp(argv[1], "pg");
    if (pg) {
        const char *url = getenv("DONTO_TEST_PG_URL");
        CHECK(url != NULL, "test_sheafx pg: DONTO_TEST_PG_URL is not set (run via scripts/pg-test-server)");
        if (url) suite(url, tmpdir);
    } else {
        char db[600];
        snprintf(db, sizeof db, "%s/g.db", tmpdir);
        suite(db, tmpdir);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report(pg ? "test_sheafx pg" : "test_sheafx");
}
