/*
 * donto-sheaf score: the task's active model over the substrate as it is now,
 * incrementally, its scores written back (logic in src/sheafscore/, see
 * docs/sheaf-serving.md "Scores").
 *
 * Exit status: 0 done, 2 a usage error (unknown task, a time that does not
 * parse), 1 a runtime error (no active model, a model that does not fit the
 * vectors, the database); each error is one line on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/models.h"
#include "donto/opt.h"
#include "donto/sheaf_export.h"
#include "donto/sheaf_registry.h"
#include "donto/sheaf_score.h"
#include "cli_db.h"
#include "sheaf_progress.h"


static const char *const TASKS[] = {"arg_link", "identity", "claim_score", NULL};

int donto_sheaf_score_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf score";
    const char *db = DONTO_STORE_DEFAULT_URL, *since_s = NULL, *model = DONTO_DEFAULT_MODEL;
    int task = -1, json = 0, quiet = 0, migrate = 0, hops = 1, vectors = DONTO_VECTORS_OWN;
    int64_t max_nodes = 50000;
    double propose = 0.9;
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database (SQLite file or postgres:// URL; default ./donto.db)"},
        {DONTO_OPT_CHOICE, "task", 0, &task, .choices = TASKS, .help = "the task whose active model scores (required)"},
        {DONTO_OPT_STRING, "since", 0, &since_s, .metavar = "T",
         .help = "score what changed after T (default: the last finished run's watermark; none: everything)"},
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "NAME",
         .help = "whose stored vectors are the features (default: " DONTO_DEFAULT_MODEL "; the export's --model)"},
        {DONTO_OPT_INT, "hops", 0, &hops, .min = 0, .max = 64, .metavar = "K",
         .help = "each item goes to the model with K rounds of its neighbours (default 1)"},
        {DONTO_OPT_INT64, "max-nodes", 0, &max_nodes, .min = 0, .max = INT64_MAX, .metavar = "N",
         .help = "nodes per batch at most (default 50000; 0: one batch)"},
        {DONTO_OPT_DOUBLE, "propose-min", 0, &propose, .fmin = 0, .fmax = 2, .metavar = "P",
         .help = "arg_link: write an argument (context \"" DONTO_SHEAF_CONTEXT_PREFIX "model-<name>\") for a pair whose\n"
                 "best relation has probability >= P (default 0.9; above 1: never)"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "print a JSON summary on stdout"},
        {DONTO_OPT_FLAG, "quiet", 'q', &quiet, .help = "no progress"},
        {DONTO_OPT_FLAG, "migrate", 0, &migrate, .help = "apply the registry's migrations first"},
        CLI_VECTORS_OPT(&vectors),
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf score --task arg_link|identity|claim_score [--db URL] [--since T] [--model NAME]\n"
                         "                         [--hops K] [--max-nodes N] [--propose-min P] [--json] [--quiet] [--migrate]\n"
                         "\n"
                         "Run the task's active model (donto-sheaf register / models activate) over the substrate as it\n"
                         "is now, only over what changed since its last run, and write the probabilities of each class to\n"
                         "donto_sheaf_score (replacing the model's older scores of the same items) and a run row to\n"
                         "donto_sheaf_score_run. claim_score scores the changed claims; arg_link the pairs of claims\n"
                         "sharing an entity, one of them changed, with no argument yet (and proposes arguments); identity\n"
                         "the entity pairs said the same thing about by a changed claim and a neighbour.\n",
                         opts, "Exit status: 0 done, 2 usage error, 1 runtime error (one line on stderr).\n"};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos > 0) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    if (task < 0) return donto_opt_usage_error(&cmd, "--task is required (arg_link, identity or claim_score)");
    donto_err err = {0};
    donto_sheaf_score_opts o;
    donto_sheaf_score_opts_init(&o);
    if (since_s) {
        if (donto_sheafx_parse_time(since_s, &o.since, &err)) return donto_opt_usage_error(&cmd, "--since: %s", err.msg);
        o.has_since = 1;
    }
    o.task = TASKS[task];
    o.model = model;
    o.hops = hops;
    o.max_nodes = max_nodes;
    o.propose_min = propose;
    sheaf_progress P = {PROG, donto_now(), quiet};
    o.progress = sheaf_progress_cb;
    o.ctx = &P;
    donto_store *s = NULL;
    if (donto_sheafx_open(db, &s, &err)) {
        fprintf(stderr, "%s: %s: %s\n", PROG, db, err.msg);
        return 1;
    }
    if (vectors != DONTO_VECTORS_OWN && donto_store_set_vectors(s, (donto_vectors_layout)vectors, &err)) {
        fprintf(stderr, "%s: --vectors %s: %s\n", PROG, donto_vectors_layout_names[vectors], err.msg);
        donto_sheafx_close(s);
        return donto_err_code(&err) == DONTO_E_INVALID ? 2 : 1;
    }
    if (migrate && donto_sheaf_registry_migrate(s, &err)) {
        fprintf(stderr, "%s: %s: %s\n", PROG, db, err.msg);
        donto_sheafx_close(s);
        return 1;
    }
    donto_sheaf_score_stats st;
    rc = donto_sheaf_score(s, &o, &st, &err);
    donto_sheafx_close(s);
    if (rc) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        return 1;
    }
    char since[32] = "none", wm[32] = "none";
    if (st.since != INT64_MIN) donto_sheafx_format_time(st.since, since);
    else if (json) strcpy(since, "null");
    donto_sheafx_format_time(st.watermark, wm);
    if (json)
        printf("{\"task\":\"%s\",\"model\":\"%s\",\"model_id\":%lld,\"since\":%s%s%s,\"watermark\":\"%s\",\"nodes\":%lld,"
               "\"edges\":%lld,\"changed_claims\":%lld,\"items\":%lld,\"rows\":%lld,\"arguments_proposed\":%lld,"
               "\"batches\":%lld,\"read_s\":%.3f,\"seconds\":%.3f,\"items_per_s\":%.1f}\n",
               o.task, st.model, (long long)st.model_id, st.since != INT64_MIN ? "\"" : "", since,
               st.since != INT64_MIN ? "\"" : "", wm, (long long)st.nodes, (long long)st.edges, (long long)st.changed,
               (long long)st.items, (long long)st.rows, (long long)st.proposed, (long long)st.batches, st.read_s,
               st.seconds, st.items_per_s);
    else if (!quiet)
        printf("%s: model %s (id %lld): %lld items scored (%lld claims changed since %s), %lld rows, %lld arguments "
               "proposed, %lld batches, %.2f s (read %.2f s), %.0f items/s; watermark %s\n",
               o.task, st.model, (long long)st.model_id, (long long)st.items, (long long)st.changed, since,
               (long long)st.rows, (long long)st.proposed, (long long)st.batches, st.seconds, st.read_s,
               st.items_per_s, wm);
    return 0;
}
