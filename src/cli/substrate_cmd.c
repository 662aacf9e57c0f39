/*
 * `donto-embed load | wordnet | enqueue | retract`: fill the substrate and
 * queue what it holds for embedding (logic in src/substrate/). Each command
 * applies the database migrations first (idempotent), so a fresh database
 * works without a separate `migrate`.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/models.h"
#include "donto/store.h"
#include "donto/substrate.h"
#include "donto/tokenizer.h"

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

static int open_db(const char *cmd, const char *url, donto_store **s) {
    donto_err err = {{0}};
    if (donto_store_open(url, s, &err) || (*s)->ops->migrate(*s, &err)) {
        fprintf(stderr, "donto-embed %s: %s\n", cmd, err.msg);
        donto_store_close(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

static int parse_size(const char *cmd, const char *opt, const char *v, long long lo, long long hi,
                      long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "donto-embed %s: %s needs a whole number in %lld..%lld (got '%s')\n", cmd,
                opt, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static void print_stats(const char *what, const donto_load_stats *st, double secs) {
    printf("%s: %zu lines, %zu new statements, %zu predicates, %zu entities, %zu memory chunks, "
           "%zu arguments, %zu retracted (%.2f s)\n",
           what, st->lines, st->statements, st->predicates, st->entities, st->chunks, st->arguments,
           st->retracted, secs);
}

/* ---- load ------------------------------------------------------------------- */

static void load_usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed load --db URL [--format nquads|jsonl] FILE...\n"
            "\n"
            "Load statements, predicates, entities, memory chunks and arguments into the\n"
            "substrate (docs/substrate.md). Each file is one transaction: a bad line stops\n"
            "the load with FILE:LINE and nothing of that file is kept. Loading a file again\n"
            "adds nothing. JSONL lines {\"retract\": ID} retract statements.\n"
            "\n"
            "  --db URL         SQLite file path, or postgres://... (default ./donto.db)\n"
            "  --format F       nquads or jsonl (default: by extension: .nq/.nquads -> nquads,\n"
            "                   otherwise jsonl); required for '-' (stdin)\n"
            "  -h, --help       this help\n");
}

int donto_load_cmd(int argc, char **argv) {
    static const struct option lo[] = {{"db", required_argument, 0, 'd'},
                                       {"format", required_argument, 0, 'f'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *db = DONTO_STORE_DEFAULT_URL;
    int fmt = -1, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'd': db = optarg; break;
        case 'f':
            if (!strcmp(optarg, "nquads") || !strcmp(optarg, "nq"))
                fmt = DONTO_FORMAT_NQUADS;
            else if (!strcmp(optarg, "jsonl"))
                fmt = DONTO_FORMAT_JSONL;
            else {
                fprintf(stderr, "donto-embed load: --format is nquads or jsonl (got '%s')\n", optarg);
                return 2;
            }
            break;
        case 'h': load_usage(stdout); return 0;
        default: load_usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "donto-embed load: no input file\n");
        load_usage(stderr);
        return 2;
    }
    for (int i = optind; i < argc; i++) {
        if (!strcmp(argv[i], "-") && fmt < 0) {
            fprintf(stderr, "donto-embed load: reading stdin needs --format\n");
            return 2;
        }
    }
    donto_store *s = NULL;
    if (open_db("load", db, &s)) return 1;
    int rc = 0;
    for (int i = optind; i < argc && rc == 0; i++) {
        int f = fmt;
        if (f < 0) {
            const char *dot = strrchr(argv[i], '.');
            f = dot && (!strcmp(dot, ".nq") || !strcmp(dot, ".nquads")) ? DONTO_FORMAT_NQUADS
                                                                          : DONTO_FORMAT_JSONL;
        }
        prog p = {"load", isatty(2), donto_now()};
        donto_load_stats st;
        donto_err err = {{0}};
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

static void wordnet_usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed wordnet --db URL [--dir DIR] [--limit N]\n"
            "\n"
            "Import WordNet 3.0 (Debian wordnet-base) into the substrate: synsets ->\n"
            "entities (wn:OFFSET-POS), relations -> statements (wn:hypernym, ...), glosses ->\n"
            "memory chunks, antonym pairs -> rebuts arguments. One transaction; importing\n"
            "again adds nothing.\n"
            "\n"
            "  --db URL     SQLite file path, or postgres://... (default ./donto.db)\n"
            "  --dir DIR    the WordNet database files (default " DONTO_WORDNET_DIR ")\n"
            "  --limit N    only the first N synsets (noun, verb, adj, adv order) and the\n"
            "               relations among them (default: all)\n"
            "  -h, --help   this help\n");
}

int donto_wordnet_cmd(int argc, char **argv) {
    static const struct option lo[] = {{"db", required_argument, 0, 'd'},
                                       {"dir", required_argument, 0, 'D'},
                                       {"limit", required_argument, 0, 'l'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *db = DONTO_STORE_DEFAULT_URL, *dir = DONTO_WORDNET_DIR;
    long long limit = 0;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'd': db = optarg; break;
        case 'D': dir = optarg; break;
        case 'l':
            if (parse_size("wordnet", "--limit", optarg, 1, 100000000, &limit)) return 2;
            break;
        case 'h': wordnet_usage(stdout); return 0;
        default: wordnet_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "donto-embed wordnet: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    donto_store *s = NULL;
    if (open_db("wordnet", db, &s)) return 1;
    prog p = {"wordnet", isatty(2), donto_now()};
    donto_load_stats st;
    donto_err err = {{0}};
    int r = donto_import_wordnet(s, dir, (size_t)limit, progress_cb, &p, &st, &err);
    progress_end(&p);
    donto_store_close(s);
    if (r) {
        fprintf(stderr, "donto-embed wordnet: %s\n", err.msg);
        return 1;
    }
    st.lines = st.lines; /* synsets */
    printf("wordnet: %zu synsets, %zu new statements, %zu predicates, %zu entities, "
           "%zu memory chunks, %zu arguments (%.2f s)\n",
           st.lines, st.statements, st.predicates, st.entities, st.chunks, st.arguments,
           donto_now() - p.t0);
    return 0;
}

/* ---- enqueue ---------------------------------------------------------------- */

static void enqueue_usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed enqueue --db URL [--target T] [--model NAME] [options]\n"
            "\n"
            "Queue every live substrate item that has no vector (and no queue entry) for\n"
            "the model, with the text the builders render for it (docs/substrate.md).\n"
            "Idempotent: a second run adds nothing; an interrupted run keeps what it queued.\n"
            "\n"
            "  --db URL          SQLite file path, or postgres://... (default ./donto.db)\n"
            "  --target T        claim, predicate, entity or memory_chunk (default: all)\n"
            "  --model NAME      the model the vectors are for (default: DIR/model_name.txt\n"
            "                    with --model-dir, else " DONTO_DEFAULT_MODEL ")\n"
            "  --model-dir DIR   cut memory chunks with the model's WordPiece vocabulary\n"
            "                    (DIR/vocab.txt); without it a whitespace approximation\n"
            "  --max-tokens N    memory chunk cap in tokens, [CLS]/[SEP] included (default 300)\n"
            "  --batch N         items per batch, each committed on its own (default %d)\n"
            "  -h, --help        this help\n",
            DONTO_ENQUEUE_BATCH);
}

int donto_enqueue_cmd(int argc, char **argv) {
    static const struct option lo[] = {{"db", required_argument, 0, 'd'},
                                       {"target", required_argument, 0, 't'},
                                       {"model", required_argument, 0, 'm'},
                                       {"model-dir", required_argument, 0, 'M'},
                                       {"max-tokens", required_argument, 0, 'x'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *db = DONTO_STORE_DEFAULT_URL, *model = NULL, *model_dir = NULL;
    int target = -1, ch;
    long long cap = DONTO_CHUNK_TOKEN_CAP, batch = DONTO_ENQUEUE_BATCH;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'd': db = optarg; break;
        case 't':
            target = donto_target_parse(optarg);
            if (target < 0) {
                fprintf(stderr,
                        "donto-embed enqueue: --target is claim, predicate, entity or "
                        "memory_chunk (got '%s')\n",
                        optarg);
                return 2;
            }
            break;
        case 'm': model = optarg; break;
        case 'M': model_dir = optarg; break;
        case 'x':
            if (parse_size("enqueue", "--max-tokens", optarg, 3, 100000, &cap)) return 2;
            break;
        case 'b':
            if (parse_size("enqueue", "--batch", optarg, 1, 10000000, &batch)) return 2;
            break;
        case 'h': enqueue_usage(stdout); return 0;
        default: enqueue_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "donto-embed enqueue: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    donto_err err = {{0}};
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
    if (open_db("enqueue", db, &s)) {
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

static void retract_usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed retract --db URL STATEMENT_ID... | --file FILE\n"
            "\n"
            "Retract statements: close their tx_time (they stay in the database, no longer\n"
            "live) and drop their pending queue entries. An id is the statement's uuid, or\n"
            "the \"id\" a JSONL record was loaded with (c000001). Retracting again is a no-op.\n"
            "\n"
            "  --db URL      SQLite file path, or postgres://... (default ./donto.db)\n"
            "  --file FILE   read ids from FILE, one a line ('-' = stdin)\n"
            "  -h, --help    this help\n");
}

int donto_retract_cmd(int argc, char **argv) {
    static const struct option lo[] = {{"db", required_argument, 0, 'd'},
                                       {"file", required_argument, 0, 'f'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *db = DONTO_STORE_DEFAULT_URL, *file = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (ch) {
        case 'd': db = optarg; break;
        case 'f': file = optarg; break;
        case 'h': retract_usage(stdout); return 0;
        default: retract_usage(stderr); return 2;
        }
    }
    size_t n = 0, cap = 0;
    char **ids = NULL;
    for (int i = optind; i < argc; i++) {
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
        fprintf(stderr, "donto-embed retract: no statement ids\n");
        retract_usage(stderr);
        rc = 2;
    } else {
        donto_store *s = NULL;
        if (open_db("retract", db, &s)) {
            rc = 1;
        } else {
            donto_err err = {{0}};
            size_t got = 0;
            if (donto_substrate_retract(s, (const char *const *)ids, n, &got, &err)) {
                fprintf(stderr, "donto-embed retract: %s\n", err.msg);
                rc = 1;
            } else {
                printf("retract: %zu of %zu statements retracted (the rest were not live)\n", got, n);
            }
            donto_store_close(s);
        }
    }
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
    return rc;
}
