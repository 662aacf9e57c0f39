/*
 * donto-accel: `donto-embed model fetch` command line (called from
 * cmd/donto-embed.c).  Parses options, draws progress, maps errors to exit
 * codes: 0 ok, 1 error, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/fetch.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed model fetch [options]\n"
            "\n"
            "Download a model from the Hugging Face hub, resuming interrupted downloads\n"
            "and checking every file against its pinned SHA-256.\n"
            "\n"
            "  --dir D          destination directory (default %s)\n"
            "  --repo R         repository id (default %s)\n"
            "  --revision REV   commit or branch (default %s)\n"
            "  --endpoint URL   hub base URL (default $HF_ENDPOINT, else %s)\n"
            "  --no-verify      accept files that have no pinned digest (any repo or\n"
            "                   revision other than the defaults has none)\n"
            "  --quiet          print errors only\n"
            "  --help           this text\n"
            "\n"
            "HF_TOKEN, when set, is sent as a bearer token to the hub.\n",
            DONTO_FETCH_DEFAULT_DIR, DONTO_FETCH_DEFAULT_REPO, DONTO_FETCH_DEFAULT_REVISION,
            DONTO_FETCH_DEFAULT_ENDPOINT);
}

/* Progress drawing state: lives in donto_model_fetch_main's frame. */
typedef struct cli_progress {
    int tty;
    double t_start; /* of the current file's transfer */
    double t_last;  /* last redraw */
    uint64_t done_at_start;
} cli_progress;

static void human(uint64_t b, char *out, size_t n) {
    if (b >= (uint64_t)1 << 20)
        snprintf(out, n, "%.1f MiB", (double)b / (1 << 20));
    else if (b >= 1024)
        snprintf(out, n, "%.1f KiB", (double)b / 1024);
    else
        snprintf(out, n, "%" PRIu64 " B", b);
}

static void on_progress(void *user, const donto_fetch_progress *p) {
    cli_progress *s = user;
    double now = donto_now();
    char a[32], b[32];
    switch (p->event) {
    case DONTO_FETCH_EV_START:
        s->t_start = now;
        s->t_last = 0;
        s->done_at_start = p->done;
        /* Plain logs: announce only what takes a while to arrive; small
         * files get their one "ok" line. */
        if (!s->tty && (p->total == 0 || p->total >= (1u << 20) || p->done > 0)) {
            human(p->total, a, sizeof a);
            if (p->done > 0)
                fprintf(stderr, "fetch: [%zu/%zu] %s (%s, resuming at %" PRIu64 ")\n",
                        p->index + 1, p->count, p->path, p->total ? a : "size unknown", p->done);
            else
                fprintf(stderr, "fetch: [%zu/%zu] %s (%s)\n", p->index + 1, p->count, p->path,
                        p->total ? a : "size unknown");
        }
        break;
    case DONTO_FETCH_EV_DATA: {
        /* Redraw at most 10 times a second: a 127 MiB file arrives in
         * thousands of chunks and the terminal is not the bottleneck we want. */
        if (!s->tty || now - s->t_last < 0.1) break;
        s->t_last = now;
        double dt = now - s->t_start;
        double rate = dt > 0 ? (double)(p->done - s->done_at_start) / dt : 0;
        char r[32];
        human(p->done, a, sizeof a);
        human(p->total, b, sizeof b);
        human((uint64_t)rate, r, sizeof r);
        if (p->total)
            fprintf(stderr, "\r\033[K[%zu/%zu] %s  %5.1f%%  %s / %s  %s/s", p->index + 1, p->count,
                    p->path, 100.0 * (double)p->done / (double)p->total, a, b, r);
        else
            fprintf(stderr, "\r\033[K[%zu/%zu] %s  %s  %s/s", p->index + 1, p->count, p->path, a,
                    r);
        break;
    }
    case DONTO_FETCH_EV_DONE:
        human(p->done, a, sizeof a);
        fprintf(stderr, "%sfetch: [%zu/%zu] %s ok, %s, sha256 %s%s\n", s->tty ? "\r\033[K" : "",
                p->index + 1, p->count, p->path, a, p->sha256,
                p->verified ? " (pinned)" : " (UNVERIFIED: no pin)");
        break;
    case DONTO_FETCH_EV_SKIP:
        fprintf(stderr, "fetch: [%zu/%zu] %s already present, sha256 ok\n", p->index + 1,
                p->count, p->path);
        break;
    }
}

/* "--opt VALUE" or "--opt=VALUE".  Returns 1 and sets *val when argv[*i]
 * is this option, 0 when not, -1 when its value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

int donto_model_fetch_main(int argc, char **argv) {
    donto_fetch_opts o = {0};
    static const char *const names[] = {"--dir", "--repo", "--revision", "--endpoint"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-verify") == 0) {
            o.no_verify = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o.quiet = 1;
            continue;
        }
        const char **slots[] = {&o.dest_dir, &o.repo, &o.revision, &o.endpoint};
        int matched = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0] && !matched; k++) {
            const char *v = NULL;
            int r = opt_value(argc, argv, &i, names[k], &v);
            if (r < 0 || (r > 0 && !*v)) {
                fprintf(stderr, "donto-embed model fetch: %s needs a value (see --help)\n",
                        names[k]);
                return 2;
            }
            if (r > 0) {
                *slots[k] = v;
                matched = 1;
            }
        }
        if (matched) continue;
        fprintf(stderr, "donto-embed model fetch: unknown argument '%s' (see --help)\n", a);
        return 2;
    }

    cli_progress prog = {.tty = isatty(STDERR_FILENO)};
    donto_fetch_stats st = {0};
    o.stats = &st;
    if (!o.quiet) {
        o.progress = on_progress;
        o.progress_user = &prog;
    }
    donto_err err = {0};
    if (donto_model_fetch(&o, &err) != 0) {
        if (prog.tty && !o.quiet) fputs("\r\033[K", stderr);
        fprintf(stderr, "donto-embed model fetch: %s\n", err.msg);
        return 1;
    }
    if (!o.quiet) {
        char b[32];
        human(st.bytes_downloaded, b, sizeof b);
        fprintf(stderr, "fetch: %s: %zu files ready (%zu downloaded, %zu already present; %s "
                        "transferred)%s\n",
                o.dest_dir ? o.dest_dir : DONTO_FETCH_DEFAULT_DIR,
                st.files_downloaded + st.files_skipped, st.files_downloaded, st.files_skipped, b,
                st.files_unverified ? "; some files are UNVERIFIED" : "");
    }
    return 0;
}
