/*
 * donto-accel: progress of long donto-sheaf commands (export, gen-substrate, score): one
 * line on stderr through the log (so it is in the logs too), at most every 2 seconds.
 * Private to the cli_sheaf module; the callback fits donto_sheafx_opts.progress and
 * donto_sheaf_score_opts.progress (ctx: a sheaf_progress).
 */
#ifndef DONTO_CLI_SHEAF_PROGRESS_H
#define DONTO_CLI_SHEAF_PROGRESS_H
#include <stdint.h>

#include "donto/util.h"

typedef struct sheaf_progress {
    const char *prog; /* "donto-sheaf export", ... */
    double last;      /* donto_now() of the last line (start: when the command began) */
    int quiet;        /* --quiet: no lines */
} sheaf_progress;

static inline void sheaf_progress_cb(void *vctx, const char *phase, int64_t done, int64_t total) {
    sheaf_progress *p = vctx;
    if (p->quiet) return;
    double now = donto_now();
    if (now - p->last < 2.0) return;
    p->last = now;
    if (total > 0) DLOG_INFO("%s: %s %lld/%lld", p->prog, phase, (long long)done, (long long)total);
    else DLOG_INFO("%s: %s %lld", p->prog, phase, (long long)done);
}

#endif
