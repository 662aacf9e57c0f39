/*
 * `donto-embed load | wordnet | enqueue | retract`: fill the substrate and
 * queue what it holds for embedding (logic in src/substrate/). The loaders
 * (load, wordnet) create the database if need be and apply the migrations
 * first (idempotent), so a fresh database works without a separate
 * `migrate`; enqueue and retract work on an existing, migrated one only (a
 * mistyped --db is an error, not a new empty database: issue 16).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/models.h"
#include "donto/opt.h"
#include "donto/store.h"
#include "donto/substrate.h"
#include "donto/tokenizer.h"

#include "cli_db.h"

/* Progress on a TTY only: one line, rewritten. */
typedef struct prog {
    const char *cmd;
    int tty;
    double t0;
} prog;

static void progress_cb(void *ctx, const char *what, size_t done, size_t total) {
    prog *p = ctx;
    if (!p->tty) return;
    double dt = donto_now() - p->t0;
    if (total)
        fprintf(stderr, "\r%s: %s %zu/%zu (%.0f/s)   ", p->cmd, what, done, total,
                dt > 0 ? (double)done / dt : 0.0);
    else
        fprintf(stderr, "\r%s: %s %zu (%.0f/s)   ", p->cmd, what, done, dt > 0 ? (double)done / dt : 0.0);
}

static void progress_end(prog *p) {
    if (p->tty) fprintf(stderr, "\r\033[K");
}

/* The loaders' database: created and migrated if need be. */
static int open_db(const char *cmd, const char *url, donto_store **s) {
    donto_err err = {0};
    if (donto_store_open(url, s, &err) || donto_substrate_migrate(*s, &err)) {
        fprintf(stderr, "donto-embed %s: %s\n", cmd, err.msg);
        donto_store_close(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

static const char DB_HELP[] = "SQLite file path, or postgres://... (default ./donto.db)";

#define STR_(x) #x
#define STR(x) STR_(x)

static void print_stats(const char *what, const donto_load_stats *st, double secs) {
    printf("%s: %zu lines, %zu new statements, %zu predicates, %zu entities, %zu memory chunks, "
           "%zu arguments, %zu retracted (%.2f s)\n",
           what, st->lines, st->statements, st->predicates, st->entities, st->chunks, st->arguments,
           st->retracted, secs);
}

/* ---- load ------------------------------------------------------------------- */

static const char *const LOAD_FORMATS[] = {"nquads", "nq", "jsonl", NULL};
static const int LOAD_FORMAT_VALUES[] = {DONTO_FORMAT_NQUADS, DONTO_FORMAT_NQUADS, DONTO_FORMAT_JSONL};

int donto_load_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL;
    int fmt = -1;
    const donto_opt opts[] = {{DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
                              {DONTO_OPT_CHOICE, "format", 0, &fmt, .choices = LOAD_FORMATS,
                               .values = LOAD_FORMAT_VALUES, .metavar = "F",
                               .help = "nquads or jsonl (default: by extension: .nq/.nquads -> nquads,\n"
                                       "otherwise jsonl); required for '-' (stdin)"},
                              {0}};
    const donto_opt_cmd cmd = {
        "donto-embed load",
        "usage: donto-embed load --db URL [--format nquads|jsonl] FILE...\n"
        "\n"
        "Load statements, predicates, entities, memory chunks and arguments into the\n"
        "substrate (docs/substrate.md). Each file is one transaction: a bad line stops\n"
        "the load with FILE:LINE and nothing of that file is kept. Loading a file again\n"
        "adds nothing. JSONL lines {\"retract\": ID} retract statements.\n"
        "\n",
        opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (!npos) return donto_opt_usage_error(&cmd, "no input file");
    for (int i = 1; i <= npos; i++) {
        if (!strcmp(argv[i], "-") && fmt < 0) return donto_opt_usage_error(&cmd, "reading stdin needs --format");
    }
    donto_store *s = NULL;
    if (open_db("load", db, &s)) return 1;
    int rc = 0;
    for (int i = 1; i <= npos && rc == 0; i++) {
        int f = fmt;
        if (f < 0) {
            const char *dot = strrchr(argv[i], '.');
            f = dot && (!strcmp(dot, ".nq") || !strcmp(dot, ".nquads")) ? DONTO_FORMAT_NQUADS
                                                                          : DONTO_FORMAT_JSONL;
        }
        prog p = {"load", isatty(2), donto_now()};
        donto_load_stats st;
        donto_err err = {0};
        int r = donto_load_file(s, argv[i], (donto_load_format)f, progress_cb, &p, &st, &err);
        progress_end(&p);
        if (r) {
            fprintf(stderr, "donto-embed load: %s\n", err.msg);
            rc = 1;
        } else {
            print_stats(argv[i], &st, donto_now() - p.t0);
        }
    }
    donto_store_close(s);
    return rc;
}

/* ---- wordnet ---------------------------------------------------------------- */

int donto_wordnet_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL, *dir = DONTO_WORDNET_DIR, *pos = "n,v,a,r";
    int64_t limit = 0;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
        {DONTO_OPT_STRING, "dir", 0, &dir, .metavar = "DIR",
         .help = "the WordNet database files (default " DONTO_WORDNET_DIR ")"},
        {DONTO_OPT_STRING, "pos", 0, &pos, .metavar = "LIST",
         .help = "the parts of speech to import, in this order: n (noun), v (verb),\n"
                 "a (adjective), r (adverb) (default n,v,a,r)"},
        {DONTO_OPT_INT64, "limit", 0, &limit, .min = 1, .max = 100000000, .metavar = "N",
         .help = "only the first N synsets (in --pos order) and the\n"
                 "relations among them (default: all)"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed wordnet",
                               "usage: donto-embed wordnet --db URL [--dir DIR] [--pos LIST] [--limit N]\n"
                               "\n"
                               "Import WordNet 3.0 (Debian wordnet-base) into the substrate: synsets ->\n"
                               "entities (wn:OFFSET-POS), relations -> statements (wn:hypernym, ...), glosses ->\n"
                               "memory chunks, antonym pairs -> rebuts arguments. One transaction; importing\n"
                               "again adds nothing.\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    donto_store *s = NULL;
    if (open_db("wordnet", db, &s)) return 1;
    prog p = {"wordnet", isatty(2), donto_now()};
    donto_load_stats st;
    donto_err err = {0};
    int r = donto_import_wordnet(s, dir, pos, (size_t)limit, progress_cb, &p, &st, &err);
    progress_end(&p);
    donto_store_close(s);
    if (r) {
        fprintf(stderr, "donto-embed wordnet: %s\n", err.msg);
        return donto_err_code(&err) == DONTO_E_INVALID ? 2 : 1;
    }
    st.lines = st.lines; /* synsets */
    printf("wordnet: %zu synsets, %zu new statements, %zu predicates, %zu entities, "
           "%zu memory chunks, %zu arguments (%.2f s)\n",
           st.lines, st.statements, st.predicates, st.entities, st.chunks, st.arguments,
           donto_now() - p.t0);
    return 0;
}

/* ---- enqueue ---------------------------------------------------------------- */

int donto_enqueue_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL, *model = NULL, *model_dir = NULL;
    int target = -1;
    int64_t cap = DONTO_CHUNK_TOKEN_CAP, batch = DONTO_ENQUEUE_BATCH;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
        {DONTO_OPT_CHOICE, "target", 0, &target, .choices = donto_target_names, .metavar = "T",
         .help = "claim, predicate, entity or memory_chunk (default: all)"},
        {DONTO_OPT_STRING, "model", 0, &model, .metavar = "NAME",
         .help = "the model the vectors are for (default: DIR/model_name.txt\n"
                 "with --model-dir, else " DONTO_DEFAULT_MODEL ")"},
        {DONTO_OPT_STRING, "model-dir", 0, &model_dir, .metavar = "DIR",
         .help = "cut memory chunks with the model's WordPiece vocabulary\n"
                 "(DIR/vocab.txt); without it a whitespace approximation"},
        {DONTO_OPT_INT64, "max-tokens", 0, &cap, .min = 3, .max = 100000, .metavar = "N",
         .help = "memory chunk cap in tokens, [CLS]/[SEP] included (default " STR(DONTO_CHUNK_TOKEN_CAP) ")"},
        {DONTO_OPT_INT64, "batch", 0, &batch, .min = 1, .max = 10000000, .metavar = "N",
         .help = "items per batch, each committed on its own (default " STR(DONTO_ENQUEUE_BATCH) ")"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed enqueue",
                               "usage: donto-embed enqueue --db URL [--target T] [--model NAME] [options]\n"
                               "\n"
                               "Queue every live substrate item that has no vector (and no queue entry) for\n"
                               "the model, with the text the builders render for it (docs/substrate.md).\n"
                               "Idempotent: a second run adds nothing; an interrupted run keeps what it queued.\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    donto_err err = {0};
    donto_tokenizer *tok = NULL;
    char namebuf[256] = "";
    if (model_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab.txt", model_dir);
        if (donto_tokenizer_open(path, NULL, &tok, &err)) {
            fprintf(stderr, "donto-embed enqueue: %s\n", err.msg);
            return 1;
        }
        if (!model) {
            snprintf(path, sizeof path, "%s/model_name.txt", model_dir);
            FILE *f = fopen(path, "r");
            if (f) {
                if (fgets(namebuf, sizeof namebuf, f)) namebuf[strcspn(namebuf, "\r\n")] = 0;
                fclose(f);
            }
            if (*namebuf) model = namebuf;
        }
    }
    if (!model) model = DONTO_DEFAULT_MODEL;
    donto_store *s = NULL;
    if (cli_open_db("enqueue", db, CLI_DB_SUBSTRATE, &s)) {
        donto_tokenizer_close(tok);
        return 1;
    }
    donto_render_opts ro = {.tok = tok, .chunk_cap = (int)cap};
    prog p = {"enqueue", isatty(2), donto_now()};
    size_t added = 0;
    int r = donto_substrate_enqueue(s, target, model, &ro, (int)batch, progress_cb, &p, &added, &err);
    progress_end(&p);
    double dt = donto_now() - p.t0;
    donto_store_close(s);
    donto_tokenizer_close(tok);
    if (r) {
        fprintf(stderr, "donto-embed enqueue: %s (%zu items were queued before)\n", err.msg, added);
        return 1;
    }
    printf("enqueue: %zu items queued for %s (%.2f s, %.0f items/s)\n", added, model, dt,
           dt > 0 ? (double)added / dt : 0.0);
    return 0;
}

/* ---- retract ---------------------------------------------------------------- */

int donto_retract_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL, *file = NULL;
    const donto_opt opts[] = {{DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
                              {DONTO_OPT_STRING, "file", 0, &file, .metavar = "FILE",
                               .help = "read ids from FILE, one a line ('-' = stdin)"},
                              {0}};
    const donto_opt_cmd cmd = {"donto-embed retract",
                               "usage: donto-embed retract --db URL STATEMENT_ID... | --file FILE\n"
                               "\n"
                               "Retract statements: close their tx_time (they stay in the database, no longer\n"
                               "live) and drop their pending queue entries. An id is the statement's uuid, or\n"
                               "the \"id\" a JSONL record was loaded with (c000001). Retracting again is a no-op\n"
                               "(said so); an id that names no statement is an error (exit 1; the known ones\n"
                               "are still retracted).\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    size_t n = 0, cap = 0;
    char **ids = NULL;
    for (int i = 1; i <= npos; i++) {
        if (n == cap) ids = donto_xrealloc(ids, (cap = cap ? 2 * cap : 16) * sizeof *ids);
        ids[n++] = donto_xstrdup(argv[i]);
    }
    if (file) {
        FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
        if (!f) {
            fprintf(stderr, "donto-embed retract: %s: %s\n", file, strerror(errno));
            for (size_t i = 0; i < n; i++) free(ids[i]);
            free(ids);
            return 1;
        }
        char *line = NULL;
        size_t lcap = 0;
        while (getline(&line, &lcap, f) >= 0) {
            line[strcspn(line, "\r\n")] = 0;
            if (!*line) continue;
            if (n == cap) ids = donto_xrealloc(ids, (cap = cap ? 2 * cap : 16) * sizeof *ids);
            ids[n++] = donto_xstrdup(line);
        }
        free(line);
        if (f != stdin) fclose(f);
    }
    int rc = 0;
    if (n == 0) {
        rc = donto_opt_usage_error(&cmd, "no statement ids");
    } else {
        donto_store *s = NULL;
        if (cli_open_db("retract", db, CLI_DB_SUBSTRATE, &s)) {
            rc = 1;
        } else {
            donto_err err = {0};
            size_t got = 0, unknown = 0, already = 0;
            donto_retract_status *st = donto_xcalloc(n, sizeof *st);
            if (donto_substrate_retract_status(s, (const char *const *)ids, n, &got, st, &err)) {
                fprintf(stderr, "donto-embed retract: %s\n", err.msg);
                rc = 1;
            } else {
                for (size_t i = 0; i < n; i++) {
                    if (st[i] == DONTO_RETRACT_UNKNOWN) {
                        fprintf(stderr, "donto-embed retract: %s: no such statement\n", ids[i]);
                        unknown++;
                    } else if (st[i] == DONTO_RETRACT_ALREADY) {
                        fprintf(stderr, "donto-embed retract: %s: already retracted\n", ids[i]);
                        already++;
                    }
                }
                printf("retract: %zu of %zu statements retracted", got, n);
                if (already) printf(", %zu already retracted", already);
                if (unknown) printf(", %zu unknown", unknown);
                printf("\n");
                if (unknown) rc = 1; /* a mistyped id is an error; retracting twice is not */
            }
            free(st);
            donto_store_close(s);
        }
    }
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    return rc;
}
