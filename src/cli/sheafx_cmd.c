/*
 * donto-sheaf export | gen-substrate: the substrate as a leakage-free graph
 * for the sheaf learner, and planted substrates to test and time it (logic in
 * src/sheafx/, see docs/sheaf.md "Export" and docs/sheaf-export.md).
 *
 * Exit status: 0 done, 2 a usage error (unknown seed, a time that does not
 * parse or lies in the future, --until not after --as-of), 1 a runtime error
 * (no database, an empty graph, a model with no vectors, a write that
 * failed); each error is one line on stderr. The export is written to
 * FILE.tmp and renamed, so a failed run leaves no partial file.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/cli.h"
#include "donto/models.h"
#include "donto/opt.h"
#include "donto/sheaf_export.h"
#include "cli_db.h"
#include "sheaf_progress.h"



static int open_fail(const char *prog, const char *url, const donto_err *err) {
    if (donto_err_code(err) == DONTO_E_NOT_FOUND)
        fprintf(stderr, "%s: %s: %s (`donto-embed migrate --db %s` makes an empty database; "
                        "`donto-embed load`/`wordnet` or `donto-sheaf gen-substrate` fill one)\n",
                prog, url, err->msg, url);
    else if (donto_err_code(err) == DONTO_E_SCHEMA)
        fprintf(stderr, "%s: database %s %s: migrate it with `donto-embed migrate --db %s`\n", prog, url, err->msg,
                url);
    else fprintf(stderr, "%s: %s: %s\n", prog, url, err->msg);
    return 1;
}

/* --vectors on a handle just opened: 0, or the exit code (2: this database
 * cannot keep that layout, the message names PostgreSQL), s closed. */
static int set_vectors(const char *prog, int layout, donto_store *s) {
    donto_err err = {0};
    if (layout == DONTO_VECTORS_OWN || donto_store_set_vectors(s, (donto_vectors_layout)layout, &err) == 0) return 0;
    fprintf(stderr, "%s: --vectors %s: %s\n", prog, donto_vectors_layout_names[layout], err.msg);
    donto_sheafx_close(s);
    return donto_err_code(&err) == DONTO_E_INVALID ? 2 : 1;
}

int donto_sheaf_export_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf export";
    const char *db = DONTO_STORE_DEFAULT_URL, *as_of_s = NULL, *until_s = NULL, *out = "-";
    donto_sheafx_opts o;
    donto_sheafx_opts_init(&o);
    int seed = -1, missing = 0, json = 0, quiet = 0, hops = 1, vectors = DONTO_VECTORS_OWN;
    int64_t max_nodes = 50000, rng = 1;
    int neg = 1;
    double val = 0.2;
    const char *model = DONTO_DEFAULT_MODEL;
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database (SQLite file or postgres:// URL; default ./donto.db)"},
        {DONTO_OPT_CHOICE, "seed", 0, &seed, .choices = donto_sheafx_seed_names,
         .help = "where the subgraph starts (required): claims in arguments, claims retracted in (as-of, until]\n"
                 "(the bitemporal frontier), claims in rebuts/undercuts/undermines arguments, or claims naming\n"
                 "both ends of identity statements (sameAs-style evidence)"},
        {DONTO_OPT_STRING, "as-of", 0, &as_of_s, .metavar = "T",
         .help = "the graph is what the substrate knew at T (required): 2026-06-01, 2026-06-01T12:00:00Z or @UNIX"},
        {DONTO_OPT_STRING, "until", 0, &until_s, .metavar = "T2", .help = "test labels come from (T, T2] (default: now)"},
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "NAME", .help = "whose stored vectors are the features (default: " DONTO_DEFAULT_MODEL ")"},
        CLI_VECTORS_OPT(&vectors),
        {DONTO_OPT_INT, "hops", 0, &hops, .min = 0, .max = 64, .metavar = "K", .help = "grow the seed claims by K rounds of neighbours (default 1)"},
        {DONTO_OPT_INT64, "max-nodes", 0, &max_nodes, .min = 0, .max = INT64_MAX, .metavar = "N",
         .help = "at most N claim nodes (default 50000; 0: no limit)"},
        {DONTO_OPT_CHOICE, "missing", 0, &missing, .choices = donto_sheafx_missing_names,
         .help = "a node without a stored vector: skip it (default) or give it zero features"},
        {DONTO_OPT_INT64, "rng-seed", 0, &rng, .min = 0, .max = INT64_MAX, .metavar = "S",
         .help = "seed of the negatives and the train/val splits (default 1)"},
        {DONTO_OPT_DOUBLE, "val-frac", 0, &val, .fmin = 0, .fmax = 0.9, .help = "share of what is known at T that goes to val (default 0.2)"},
        {DONTO_OPT_INT, "neg-ratio", 0, &neg, .min = 0, .max = 100, .metavar = "R", .help = "negatives per positive in each split (default 1)"},
        {DONTO_OPT_STRING, "out", 'o', &out, .metavar = "FILE", .help = "where the graph goes (default: stdout)"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "print a JSON summary on stdout (needs --out FILE)"},
        {DONTO_OPT_FLAG, "quiet", 'q', &quiet, .help = "no progress"},
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf export --seed arguments|frontier|incompatibilities|identity --as-of T [--until T2]\n"
                         "                          [--db URL] [--model NAME] [--hops K] [--max-nodes N] [--out FILE]\n"
                         "\n"
                         "Export the substrate as a graph for donto-sheaf (docs/sheaf-export.md, version 2):\n"
                         "claims live at T (features: their stored vectors), edges between claims that share an\n"
                         "entity and the arguments known at T, and the tasks arg_link, identity and claim_score\n"
                         "with train/val from what was known at T and test from (T, T2]. Nothing asserted after\n"
                         "T enters the graph, no val/test pair is a graph edge, and nothing whose context starts\n"
                         "with \"" DONTO_SHEAF_CONTEXT_PREFIX "\" (written by a sheaf model) is used.\n",
                         opts, "Exit status: 0 done, 2 usage error, 1 runtime error (one line on stderr).\n"};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos > 0) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (seed < 0) return donto_opt_usage_error(&cmd, "--seed is required (arguments, frontier, incompatibilities or identity)");
    if (!as_of_s) return donto_opt_usage_error(&cmd, "--as-of is required");
    if (json && !strcmp(out, "-")) return donto_opt_usage_error(&cmd, "--json needs --out FILE (stdout carries the summary)");
    donto_err err = {0};
    int64_t now = donto_unix_ms();
    if (donto_sheafx_parse_time(as_of_s, &o.as_of, &err)) return donto_opt_usage_error(&cmd, "--as-of: %s", err.msg);
    o.until = now;
    if (until_s && donto_sheafx_parse_time(until_s, &o.until, &err)) return donto_opt_usage_error(&cmd, "--until: %s", err.msg);
    if (o.as_of > now) return donto_opt_usage_error(&cmd, "--as-of %s is in the future: nothing is known at that time yet", as_of_s);
    if (o.until <= o.as_of) return donto_opt_usage_error(&cmd, "--until must be later than --as-of");
    o.seed = (donto_sheafx_seed)seed;
    o.missing = (donto_sheafx_missing)missing;
    o.model = model;
    o.hops = hops;
    o.max_nodes = max_nodes;
    o.rng_seed = (uint64_t)rng;
    o.val_frac = val;
    o.neg_ratio = neg;
    sheaf_progress P = {PROG, donto_now(), quiet};
    o.progress = sheaf_progress_cb;
    o.ctx = &P;

    donto_store *s = NULL;
    if (donto_sheafx_open(db, &s, &err)) return open_fail(PROG, db, &err);
    if ((rc = set_vectors(PROG, vectors, s)) != 0) return rc;
    FILE *f = stdout;
    char *tmp = NULL;
    if (strcmp(out, "-")) {
        size_t l = strlen(out) + 8;
        tmp = malloc(l);
        snprintf(tmp, l, "%s.tmp", out);
        if (!(f = fopen(tmp, "w"))) {
            fprintf(stderr, "%s: cannot write %s\n", PROG, tmp);
            free(tmp);
            donto_sheafx_close(s);
            return 1;
        }
        setvbuf(f, NULL, _IOFBF, 1 << 20);
    }
    donto_sheafx_stats st;
    rc = donto_sheafx_export(s, &o, f, &st, &err);
    donto_sheafx_close(s);
    if (tmp) {
        if (fclose(f) && rc == 0) rc = donto_seterrc(&err, DONTO_E_UNAVAILABLE, "writing %s failed", tmp);
        if (rc == 0 && rename(tmp, out)) rc = donto_seterrc(&err, DONTO_E_UNAVAILABLE, "cannot rename %s to %s", tmp, out);
        if (rc) remove(tmp);
        free(tmp);
    }
    if (rc) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        return 1;
    }
    double cps = st.seconds > 0 ? (double)st.claims / st.seconds : 0;
    if (!quiet)
        DLOG_INFO("%s: %lld claims (%lld with a vector, %lld skipped, %lld zero), %lld entities, %lld edges; "
                  "arg_link %lld/%lld/%lld, identity %lld/%lld/%lld, claim_score %lld/%lld/%lld; "
                  "filtered %lld sheaf statements, %lld sheaf arguments; %.2f s (%.0f claims/s)",
                  PROG, (long long)st.claims, (long long)st.claims_with_vector, (long long)st.claims_skipped,
                  (long long)st.claims_zero, (long long)st.entities, (long long)st.edges, (long long)st.arg_pairs[0],
                  (long long)st.arg_pairs[1], (long long)st.arg_pairs[2], (long long)st.identity_pairs[0],
                  (long long)st.identity_pairs[1], (long long)st.identity_pairs[2], (long long)st.score_labels[0],
                  (long long)st.score_labels[1], (long long)st.score_labels[2], (long long)st.sheaf_statements,
                  (long long)st.sheaf_arguments, st.seconds, cps);
    if (json)
        printf("{\"out\":\"%s\",\"statements_read\":%lld,\"claims\":%lld,\"with_vector\":%lld,\"skipped\":%lld,"
               "\"entities\":%lld,\"edges\":%lld,\"arg_link\":[%lld,%lld,%lld],\"identity\":[%lld,%lld,%lld],"
               "\"claim_score\":[%lld,%lld,%lld],\"sheaf_written_statements\":%lld,\"sheaf_written_arguments\":%lld,"
               "\"dims\":%d,\"inputs_digest\":\"%s\",\"seconds\":%.3f,\"read_s\":%.3f,\"build_s\":%.3f,\"write_s\":%.3f,"
               "\"claims_per_s\":%.0f}\n",
               out, (long long)st.statements_read, (long long)st.claims, (long long)st.claims_with_vector,
               (long long)st.claims_skipped, (long long)st.entities, (long long)st.edges, (long long)st.arg_pairs[0],
               (long long)st.arg_pairs[1], (long long)st.arg_pairs[2], (long long)st.identity_pairs[0],
               (long long)st.identity_pairs[1], (long long)st.identity_pairs[2], (long long)st.score_labels[0],
               (long long)st.score_labels[1], (long long)st.score_labels[2], (long long)st.sheaf_statements,
               (long long)st.sheaf_arguments, st.dims, st.digest, st.seconds, st.read_s, st.build_s, st.write_s, cps);
    return 0;
}

int donto_sheaf_gen_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf gen-substrate";
    const char *db = NULL, *as_of_s = "2025-06-01", *until_s = "2025-09-01", *truth = NULL;
    donto_sheafx_gen_opts o;
    donto_sheafx_gen_opts_init(&o);
    int64_t n = 10000, seed = 1;
    int dims = 16, clusters = 16, json = 0, quiet = 0;
    double sheaf = 0.01;
    const char *model = "planted-16";
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database to fill (required; must hold no statements)"},
        {DONTO_OPT_INT64, "statements", 'n', &n, .min = 100, .max = 100000000, .metavar = "N", .help = "statements to plant (default 10000)"},
        {DONTO_OPT_INT64, "seed", 0, &seed, .min = 0, .max = INT64_MAX, .metavar = "S", .help = "generator seed (default 1)"},
        {DONTO_OPT_STRING, "as-of", 0, &as_of_s, .metavar = "T", .help = "the export's T the history is planted around (default 2025-06-01)"},
        {DONTO_OPT_STRING, "until", 0, &until_s, .metavar = "T2", .help = "the end of the test window (default 2025-09-01)"},
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "NAME", .help = "model name the vectors are stored under (default planted-16)"},
        {DONTO_OPT_INT, "dims", 0, &dims, .min = 2, .max = 4096, .metavar = "D", .help = "vector dimensions (default 16)"},
        {DONTO_OPT_INT, "clusters", 0, &clusters, .min = 2, .max = 1000000, .metavar = "C", .help = "latent topics (default 16)"},
        {DONTO_OPT_DOUBLE, "sheaf-frac", 0, &sheaf, .fmin = 0, .fmax = 0.5, .help = "share written in a \"sheaf:\" context (default 0.01)"},
        {DONTO_OPT_STRING, "truth", 0, &truth, .metavar = "FILE", .help = "write the ground truth (JSONL: statements and arguments with their times)"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "print a JSON summary on stdout"},
        {DONTO_OPT_FLAG, "quiet", 'q', &quiet, .help = "no progress"},
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf gen-substrate --db URL [--statements N] [--seed S] [--as-of T] [--until T2]\n"
                         "\n"
                         "Plant a donto-shaped substrate with known structure (docs/sheaf.md \"The planted substrate\"):\n"
                         "claims in latent clusters with a latent stance, a history around T (asserted before and\n"
                         "after, retracted in between), arguments whose relation follows the stances, owl:sameAs\n"
                         "pairs, sheaf-written rows the export must filter, and vectors for the model.\n",
                         opts, NULL};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos > 0) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!db) return donto_opt_usage_error(&cmd, "--db is required");
    donto_err err = {0};
    if (donto_sheafx_parse_time(as_of_s, &o.as_of, &err)) return donto_opt_usage_error(&cmd, "--as-of: %s", err.msg);
    if (donto_sheafx_parse_time(until_s, &o.until, &err)) return donto_opt_usage_error(&cmd, "--until: %s", err.msg);
    if (o.until <= o.as_of) return donto_opt_usage_error(&cmd, "--until must be later than --as-of");
    o.statements = n, o.seed = (uint64_t)seed, o.dims = dims, o.clusters = clusters, o.sheaf_frac = sheaf;
    o.model = model, o.truth = truth;
    sheaf_progress P = {PROG, donto_now(), quiet};
    o.progress = sheaf_progress_cb;
    o.ctx = &P;
    donto_store *s = NULL;
    if (donto_sheafx_open_new(db, &s, &err)) return open_fail(PROG, db, &err);
    donto_sheafx_gen_stats st;
    double t0 = donto_now();
    rc = donto_sheafx_generate(s, &o, &st, &err);
    donto_sheafx_close(s);
    if (rc) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        return 1;
    }
    if (!quiet)
        DLOG_INFO("%s: %lld statements (%lld after as-of, %lld retracted in the window, %lld sheaf-written), "
                  "%lld entities, %lld arguments (%lld sheaf-written), %lld identity pairs, %lld vectors in %.1f s",
                  PROG, (long long)st.statements, (long long)st.after_as_of, (long long)st.retracted,
                  (long long)st.sheaf_statements, (long long)st.entities, (long long)st.arguments,
                  (long long)st.sheaf_arguments, (long long)st.identity, (long long)st.vectors, donto_now() - t0);
    if (json)
        printf("{\"statements\":%lld,\"entities\":%lld,\"arguments\":%lld,\"identity\":%lld,\"retracted\":%lld,"
               "\"after_as_of\":%lld,\"sheaf_statements\":%lld,\"sheaf_arguments\":%lld,\"vectors\":%lld,\"seconds\":%.3f}\n",
               (long long)st.statements, (long long)st.entities, (long long)st.arguments, (long long)st.identity,
               (long long)st.retracted, (long long)st.after_as_of, (long long)st.sheaf_statements,
               (long long)st.sheaf_arguments, (long long)st.vectors, donto_now() - t0);
    return 0;
}

int donto_sheaf_stamp_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf stamp-history";
    const char *db = NULL, *as_of_s = NULL, *until_s = NULL;
    int64_t seed = 1;
    double holdout = 0.2;
    int rewrite = 0, json = 0;
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database (required)"},
        {DONTO_OPT_STRING, "as-of", 0, &as_of_s, .metavar = "T", .help = "the export's T (required)"},
        {DONTO_OPT_STRING, "until", 0, &until_s, .metavar = "T2", .help = "the end of the test window (required, not in the future)"},
        {DONTO_OPT_DOUBLE, "holdout", 0, &holdout, .fmin = 0, .fmax = 1,
         .help = "share of arguments and of identity statements asserted in (T, T2] (default 0.2)"},
        {DONTO_OPT_INT64, "seed", 0, &seed, .min = 0, .max = INT64_MAX, .metavar = "S", .help = "which rows are held out (default 1)"},
        {DONTO_OPT_FLAG, "rewrite", 0, &rewrite, .help = "required: yes, rewrite the tx times of every live row"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "print a JSON summary on stdout"},
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf stamp-history --db URL --as-of T --until T2 [--holdout F] [--seed S] --rewrite\n"
                         "\n"
                         "Give a substrate loaded all at once (a WordNet import) a simulated history for the export:\n"
                         "every live statement and argument asserted at T - 1 day, then a seeded share of the\n"
                         "arguments and identity statements asserted at seeded times in (T, T2] instead. This\n"
                         "destroys the real load times: for benchmark databases only (docs/sheaf.md \"WordNet\").\n",
                         opts, NULL};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos > 0) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (!db || !as_of_s || !until_s) return donto_opt_usage_error(&cmd, "--db, --as-of and --until are required");
    if (!rewrite) return donto_opt_usage_error(&cmd, "this rewrites the tx times of every live row: add --rewrite");
    donto_err err = {0};
    int64_t a, u;
    if (donto_sheafx_parse_time(as_of_s, &a, &err)) return donto_opt_usage_error(&cmd, "--as-of: %s", err.msg);
    if (donto_sheafx_parse_time(until_s, &u, &err)) return donto_opt_usage_error(&cmd, "--until: %s", err.msg);
    if (u <= a) return donto_opt_usage_error(&cmd, "--until must be later than --as-of");
    if (u > donto_unix_ms()) return donto_opt_usage_error(&cmd, "--until %s is in the future", until_s);
    donto_store *s = NULL;
    if (donto_sheafx_open(db, &s, &err)) return open_fail(PROG, db, &err);
    donto_sheafx_stamp_stats st;
    rc = donto_sheafx_stamp_history(s, a, u, holdout, (uint64_t)seed, &st, &err);
    donto_sheafx_close(s);
    if (rc) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        return 1;
    }
    DLOG_INFO("%s: %lld statements and %lld arguments re-stamped; held out in (T, T2]: %lld arguments, %lld identity statements",
              PROG, (long long)st.statements, (long long)st.arguments, (long long)st.held_arguments, (long long)st.held_identity);
    if (json)
        printf("{\"statements\":%lld,\"arguments\":%lld,\"held_arguments\":%lld,\"held_identity\":%lld}\n", (long long)st.statements,
               (long long)st.arguments, (long long)st.held_arguments, (long long)st.held_identity);
    return 0;
}
