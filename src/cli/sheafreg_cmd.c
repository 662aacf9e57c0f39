/*
 * donto-sheaf register | models: the sheaf model registry from the command
 * line (logic in src/sheafreg/, docs/sheaf-serving.md).
 *
 *   register CKPT --db URL [--name N] [--task T] [--activate] [--reference CMD] [--json] [--migrate]
 *   models list|show|activate|retire [NAME|ID] --db URL [--task T] [--json] [--migrate]
 *
 * register runs the gate (format, version, shapes, finite weights, parity
 * against the PyTorch reference) before it opens the database: a refused
 * checkpoint writes nothing. Exit status: 0 done, 2 a usage error, 1 a
 * runtime error (a refused checkpoint, an unknown model, a database that is
 * missing or not migrated); each error is one line on stderr.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/cli.h"
#include "donto/opt.h"
#include "donto/sheaf_registry.h"

static int open_registry(const char *prog, const char *url, int migrate, donto_store **s) {
    donto_err err = {0};
    *s = NULL;
    if (migrate) {
        if (donto_store_open(url, s, &err) || donto_sheaf_registry_migrate(*s, &err)) {
            fprintf(stderr, "%s: %s: migrate: %s\n", prog, url, err.msg);
            donto_store_close(*s);
            *s = NULL;
            return -1;
        }
        return 0;
    }
    if (donto_store_open_existing(url, s, &err)) {
        fprintf(stderr, "%s: %s: %s%s\n", prog, url, err.msg,
                donto_err_code(&err) == DONTO_E_NOT_FOUND ? " (a mistyped --db? run with --migrate to make it)" : "");
        return -1;
    }
    if (donto_sheaf_registry_schema_check(*s, &err)) {
        fprintf(stderr, "%s: database %s: the sheaf model registry %s: run with --migrate\n", prog, url, err.msg);
        donto_store_close(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

static int read_all(const char *path, char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) return free(b), -1;
    *buf = b, *len = n;
    return 0;
}

static void iso_ms(int64_t ms, char out[32]) {
    if (!ms) {
        snprintf(out, 32, "-");
        return;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *jparse(const char *s) {
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    return j ? j : json_null();
}

static json_t *model_json(const donto_sheaf_reg_model *m, int full) {
    char c[32], a[32];
    iso_ms(m->created_at, c), iso_ms(m->activated_at, a);
    json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s}", "id", (json_int_t)m->id, "name", m->name, "task", m->task,
                          "family", m->family, "state", m->state, "created_at", c);
    json_object_set_new(o, "parity_max_abs", isfinite(m->parity_max_abs) ? json_real(m->parity_max_abs) : json_null());
    json_object_set_new(o, "activated_at", m->activated_at ? json_string(a) : json_null());
    if (full) {
        json_object_set_new(o, "export_digest", m->export_digest ? json_string(m->export_digest) : json_null());
        json_object_set_new(o, "hparams", jparse(m->hparams));
        json_object_set_new(o, "metrics", jparse(m->metrics));
        json_object_set_new(o, "parity", jparse(m->parity));
    }
    return o;
}

static void print_json(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    puts(s ? s : "null");
    free(s);
    json_decref(o);
}

int donto_sheaf_register_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf register";
    const char *db = DONTO_STORE_DEFAULT_URL, *name = NULL, *task = NULL, *reference = NULL;
    int activate = 0, json = 0, migrate = 0;
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database (SQLite file or postgres:// URL; default ./donto.db)"},
        {DONTO_OPT_STRING, "name", 0, &name, .metavar = "N", .help = "the model's name, unique (default: the file's name without .json)"},
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "T",
         .help = "the task it serves: arg_link, identity, claim_score, or a node-task name\n"
                 "(default: the task the checkpoint records; required when it records none)"},
        {DONTO_OPT_FLAG, "activate", 0, &activate, .help = "make it the task's active model (the active one is retired, atomically)"},
        {DONTO_OPT_STRING, "reference", 0, &reference, .metavar = "CMD",
         .help = "the PyTorch reference for the parity gate, a command to which\n"
                 "--checkpoint F --graph F --out F is appended (default: this source tree's\n"
                 ".venv/bin/python tests/ref/sheaf_ref.py infer, when present). Not run when the\n"
                 "checkpoint carries a probe with the reference's outputs"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "print one JSON object on stdout"},
        {DONTO_OPT_FLAG, "migrate", 0, &migrate, .help = "make the database / the registry's tables if need be"},
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf register CKPT [--db URL] [--name N] [--task T] [--activate]\n"
                         "                            [--reference CMD] [--json] [--migrate]\n"
                         "\n"
                         "Add a trained checkpoint to the sheaf model registry (docs/sheaf-serving.md). It is\n"
                         "refused, and nothing is written, unless it parses as a donto-sheaf checkpoint of a known\n"
                         "version, its tensors have the shapes its hyperparameters say, every weight is finite, and\n"
                         "our forward on a probe graph matches the PyTorch reference within 1e-5 (max abs of the\n"
                         "log-probabilities). Stored as a candidate, or active with --activate.\n",
                         opts, "Exit status: 0 registered, 2 usage error, 1 refused or a runtime error (one line on stderr).\n"};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos != 1) return donto_opt_usage_error(&cmd, npos ? "one checkpoint at a time" : "which checkpoint? (CKPT)");
    const char *path = argv[1];
    char *buf = NULL;
    size_t len = 0;
    if (read_all(path, &buf, &len)) {
        fprintf(stderr, "%s: cannot read %s\n", PROG, path);
        return 1;
    }
    char defref[1200];
    if (!reference && !donto_sheaf_registry_default_reference(defref, sizeof defref)) reference = defref;
    donto_sheaf_check_opts co = {reference, path};
    donto_sheaf_check c;
    donto_err err = {0};
    if (donto_sheaf_registry_check(buf, len, &co, &c, &err)) {
        fprintf(stderr, "%s: refused: %s\n", PROG, err.msg);
        donto_sheaf_check_free(&c);
        free(buf);
        return 1;
    }
    rc = 1;
    donto_store *s = NULL;
    char defname[128];
    if (!task && !c.task[0]) {
        rc = donto_opt_usage_error(&cmd, "--task is required: %s records no task name", path);
        goto out;
    }
    if (task && c.task[0] && strcmp(task, c.task)) {
        rc = donto_opt_usage_error(&cmd, "--task %s: %s was trained for task '%s'", task, path, c.task);
        goto out;
    }
    if (!task) task = c.task;
    if (!name) {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        snprintf(defname, sizeof defname, "%s", b);
        size_t l = strlen(defname);
        if (l > 5 && !strcmp(defname + l - 5, ".json")) defname[l - 5] = 0;
        name = defname;
    }
    if (open_registry(PROG, db, migrate, &s)) goto out;
    int64_t id = 0;
    if (donto_sheaf_registry_add(s, name, task, &c, buf, len, activate, &id, &err)) {
        fprintf(stderr, "%s: %s\n", PROG, err.msg);
        goto out;
    }
    if (json) {
        json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:s, s:f}", "id", (json_int_t)id, "name", name, "task", task, "family",
                              c.family, "state", activate ? "active" : "candidate", "parity_max_abs", c.max_abs);
        json_object_set_new(o, "parity", jparse(c.parity));
        json_object_set_new(o, "export_digest", c.export_digest ? json_string(c.export_digest) : json_null());
        print_json(o);
    } else
        printf("registered model %lld '%s' for task %s (%s, %s); parity max abs %.3e <= %.0e on the %s probe "
               "(%d %s x %d classes) against %s\n",
               (long long)id, name, task, c.family, activate ? "active" : "candidate", c.max_abs, DONTO_SHEAF_PARITY_TOL,
               c.probe_source, c.probe_rows, strcmp(c.task_kind, "edge") ? "nodes" : "pairs", c.classes, c.reference);
    rc = 0;
out:
    donto_store_close(s);
    donto_sheaf_check_free(&c);
    free(buf);
    return rc;
}

int donto_sheaf_models_main(int argc, char **argv) {
    static const char *PROG = "donto-sheaf models";
    const char *db = DONTO_STORE_DEFAULT_URL, *task = NULL;
    int json = 0, migrate = 0;
    donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = "the database (SQLite file or postgres:// URL; default ./donto.db)"},
        {DONTO_OPT_STRING, "task", 0, &task, .metavar = "T", .help = "list: only this task's models"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "JSON on stdout (list: one array; the others: one object)"},
        {DONTO_OPT_FLAG, "migrate", 0, &migrate, .help = "make the database / the registry's tables if need be"},
        {0}};
    donto_opt_cmd cmd = {PROG,
                         "usage: donto-sheaf models list [--task T] [--db URL] [--json]\n"
                         "       donto-sheaf models show|activate|retire NAME|ID [--db URL] [--json]\n"
                         "\n"
                         "The sheaf model registry (docs/sheaf-serving.md). list: id, name, task, family, state,\n"
                         "parity, created. show: everything but the checkpoint's bytes. activate: make a model its\n"
                         "task's active one, in one transaction (the active one is retired); to roll back,\n"
                         "activate the previous one. retire: take a model out of service.\n",
                         opts, "Exit status: 0 done, 2 usage error, 1 runtime error (one line on stderr).\n"};
    int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
    if (rc >= 0) return rc;
    if (npos < 1) return donto_opt_usage_error(&cmd, "which? list, show, activate or retire");
    const char *sub = argv[1];
    int list = !strcmp(sub, "list"), show = !strcmp(sub, "show"), act = !strcmp(sub, "activate"),
        ret = !strcmp(sub, "retire");
    if (!list && !show && !act && !ret) return donto_opt_usage_error(&cmd, "unknown subcommand '%s'", sub);
    if (list && npos != 1) return donto_opt_usage_error(&cmd, "list takes no argument (--task T filters)");
    if (!list && npos != 2) return donto_opt_usage_error(&cmd, "%s takes one NAME or ID", sub);
    donto_store *s = NULL;
    if (open_registry(PROG, db, migrate, &s)) return 1;
    donto_err err = {0};
    rc = 1;
    if (list) {
        donto_sheaf_reg_model *ms = NULL;
        size_t n = 0;
        if (donto_sheaf_registry_list(s, task, &ms, &n, &err)) {
            fprintf(stderr, "%s list: %s\n", PROG, err.msg);
            goto out;
        }
        if (json) {
            json_t *a = json_array();
            for (size_t i = 0; i < n; i++) json_array_append_new(a, model_json(&ms[i], 0));
            print_json(a);
        } else {
            printf("%-5s %-24s %-12s %-8s %-9s %-10s %s\n", "id", "name", "task", "family", "state", "parity", "created");
            for (size_t i = 0; i < n; i++) {
                char c[32];
                iso_ms(ms[i].created_at, c);
                printf("%-5lld %-24s %-12s %-8s %-9s %-10.2e %s\n", (long long)ms[i].id, ms[i].name, ms[i].task,
                       ms[i].family, ms[i].state, ms[i].parity_max_abs, c);
            }
        }
        donto_sheaf_reg_models_free(ms, n);
        rc = 0;
        goto out;
    }
    const char *ref = argv[2];
    donto_sheaf_reg_model m;
    if (show) {
        if (donto_sheaf_registry_get(s, ref, 0, &m, &err)) {
            fprintf(stderr, "%s show: %s\n", PROG, err.msg);
            goto out;
        }
        if (json) print_json(model_json(&m, 1));
        else {
            char c[32], a[32];
            iso_ms(m.created_at, c), iso_ms(m.activated_at, a);
            printf("id            %lld\nname          %s\ntask          %s\nfamily        %s\nstate         %s\n"
                   "created_at    %s\nactivated_at  %s\nexport_digest %s\nparity        %s\nhparams       %s\n"
                   "metrics       %s\n",
                   (long long)m.id, m.name, m.task, m.family, m.state, c, a, m.export_digest ? m.export_digest : "-",
                   m.parity ? m.parity : "-", m.hparams ? m.hparams : "-", m.metrics ? m.metrics : "-");
        }
        donto_sheaf_reg_model_free(&m);
        rc = 0;
        goto out;
    }
    if (act) {
        int64_t prev = 0;
        if (donto_sheaf_registry_activate(s, ref, &prev, &err) || donto_sheaf_registry_get(s, ref, 0, &m, &err)) {
            fprintf(stderr, "%s activate: %s\n", PROG, err.msg);
            goto out;
        }
        if (json) {
            json_t *o = model_json(&m, 0);
            json_object_set_new(o, "previous", prev ? json_integer((json_int_t)prev) : json_null());
            print_json(o);
        } else if (prev)
            printf("model %lld '%s' is now active for task %s; model %lld retired (roll back: donto-sheaf models activate %lld)\n",
                   (long long)m.id, m.name, m.task, (long long)prev, (long long)prev);
        else printf("model %lld '%s' is now active for task %s\n", (long long)m.id, m.name, m.task);
        donto_sheaf_reg_model_free(&m);
        rc = 0;
        goto out;
    }
    if (donto_sheaf_registry_retire(s, ref, &err) || donto_sheaf_registry_get(s, ref, 0, &m, &err)) {
        fprintf(stderr, "%s retire: %s\n", PROG, err.msg);
        goto out;
    }
    if (json) print_json(model_json(&m, 0));
    else printf("model %lld '%s' retired (task %s)\n", (long long)m.id, m.name, m.task);
    donto_sheaf_reg_model_free(&m);
    rc = 0;
out:
    donto_store_close(s);
    return rc;
}
