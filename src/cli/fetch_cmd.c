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
#include "donto/opt.h"

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

int donto_model_fetch_main(int argc, char **argv) {
    donto_fetch_opts o = {0};
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "dir", 0, &o.dest_dir, .metavar = "D",
         .help = "destination directory (default " DONTO_FETCH_DEFAULT_DIR ")"},
        {DONTO_OPT_STRING, "repo", 0, &o.repo, .metavar = "R", .help = "repository id (default " DONTO_FETCH_DEFAULT_REPO ")"},
        {DONTO_OPT_STRING, "revision", 0, &o.revision, .metavar = "REV",
         .help = "commit or branch (default " DONTO_FETCH_DEFAULT_REVISION ")"},
        {DONTO_OPT_STRING, "endpoint", 0, &o.endpoint, .metavar = "URL",
         .help = "hub base URL (default $HF_ENDPOINT, else " DONTO_FETCH_DEFAULT_ENDPOINT ")"},
        {DONTO_OPT_FLAG, "no-verify", 0, &o.no_verify,
         .help = "accept files that have no pinned digest (any repo or\n"
                 "revision other than the defaults has none)"},
        {DONTO_OPT_FLAG, "quiet", 'q', &o.quiet, .help = "print errors only"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed model fetch",
                               "usage: donto-embed model fetch [options]\n"
                               "\n"
                               "Download a model from the Hugging Face hub, resuming interrupted downloads\n"
                               "and checking every file against its pinned SHA-256.\n"
                               "\n",
                               opts, "\nHF_TOKEN, when set, is sent as a bearer token to the hub.\n"};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unknown argument '%s'", argv[1]);
    const char *const *vals[] = {&o.dest_dir, &o.repo, &o.revision, &o.endpoint};
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
        if (*vals[k] && !**vals[k]) return donto_opt_usage_error(&cmd, "--%s needs a value", opts[k].name);

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
