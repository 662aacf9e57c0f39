/* bench_rerank_io: what the re-rank's reads see from this disk, without
 * the index (docs/recall.md "Cold rows and the disk").
 *
 *   bench_rerank_io --vectors FILE [--rows R] [--gap-ms G] [--seconds S]
 *                   [--write-gb W] [--write-dir DIR] [--write-mbps M]
 *                   [--flush-mb F] [--writer raw|vecfile] [--seed N]
 *
 * A recall query over a compressed index re-ranks its R best candidates
 * (default 100) against the float32 rows of a vector file
 * (include/donto/vecfile.h): donto_vecfile_prefetch asks for all of them
 * at once, then every row is read. This program does exactly that for
 * random rows of FILE (an existing vector file, e.g. the one
 * bench/recall-scale --keep-vectors leaves), evicted from the page cache
 * before each phase, one "query" after another with G ms (default 6, the CPU part of a
 * 10M query) of sleep between them, and times each query's reads:
 *   quiet    S seconds (default 30), nothing else on the disk;
 *   writing  with --write-gb W: while another thread writes W GB to a
 *            temporary file in DIR (default FILE's directory) and fsyncs
 *            it, as an index save or a bulk load would; --write-mbps M
 *            paces it to M MiB/s, --flush-mb F starts the writeback of
 *            every F MiB and waits for the previous F (sync_file_range):
 *            ways a writer could leave the reads room; --writer vecfile
 *            writes through donto_vecfile_append instead, 4,096 rows at a
 *            time, as a rebuild fills a new vector file (--write-mbps and
 *            --flush-mb then do not apply);
 *   after    S seconds more once that write is on disk.
 * One line per phase: queries, p50 / p99 / max ms of the reads. The data
 * read are summed (so nothing is optimised away) and otherwise unused. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "donto/util.h"
#include "donto/vecfile.h"

typedef struct {
    const char *dir;
    double gb;
    double mbps;  /* > 0: at most this many MiB/s */
    int flush_mb; /* > 0: start the writeback of every flush_mb MiB written
                   * and wait for the one before (sync_file_range) */
    int vecfile;  /* write through donto_vecfile_append, as a rebuild does */
    atomic_int done; /* set by the writer once its file is written and synced */
    double seconds;
    char err[4400]; /* a path and a reason */
} writer_t;

/* --writer vecfile: W GB of rows appended to a new vector file 4,096 rows
 * (DONTO_RECALL_PAGE, 6 MiB at 384-d) at a time, as a rebuild streams the
 * store's pages into one; then fsynced and removed. */
static void *vecfile_writer(writer_t *w) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rerank_io.%d.vec", w->dir, (int)getpid());
    enum { DIM = 384, ROWS = 4096 };
    float *x = malloc((size_t)ROWS * DIM * sizeof *x);
    for (size_t i = 0; i < (size_t)ROWS * DIM; i++) x[i] = (float)(i % 977) / 977.0f;
    donto_err err = {0};
    donto_vecfile *vf = NULL;
    double t0 = donto_now();
    size_t n = (size_t)(w->gb * 1024.0 * 1024.0 * 1024.0 / ((double)ROWS * DIM * sizeof(float)));
    if (donto_vecfile_create(path, DIM, &vf, &err)) snprintf(w->err, sizeof w->err, "%s", err.msg);
    for (size_t c = 0; vf && c < n && !w->err[0]; c++)
        if (donto_vecfile_append(vf, x, ROWS, &err)) snprintf(w->err, sizeof w->err, "%s", err.msg);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd)) snprintf(w->err, sizeof w->err, "fsync %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    w->seconds = donto_now() - t0;
    donto_vecfile_free(vf);
    unlink(path);
    free(x);
    atomic_store(&w->done, 1);
    return NULL;
}

/* W GB of xorshift data in 1 MiB writes, fsynced, then removed. */
static void *writer(void *p) {
    writer_t *w = p;
    if (w->vecfile) return vecfile_writer(w);
    char path[4096];
    snprintf(path, sizeof path, "%s/rerank_io.XXXXXX", w->dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(w->err, sizeof w->err, "%s: %s", path, strerror(errno));
        atomic_store(&w->done, 1);
        return NULL;
    }
    unlink(path);
    enum { CHUNK = 1 << 20 };
    uint64_t *buf = malloc(CHUNK), s = 0x2545f4914f6cdd1dULL;
    double t0 = donto_now();
    for (size_t c = 0, n = (size_t)(w->gb * 1024); c < n; c++) {
        for (size_t i = 0; i < CHUNK / 8; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            buf[i] = s;
        }
        if (write(fd, buf, CHUNK) != CHUNK) {
            snprintf(w->err, sizeof w->err, "write: %s", strerror(errno));
            break;
        }
        if (w->mbps > 0) { /* paced: chunk c done no sooner than c / mbps s after the start */
            double ahead = t0 + (double)(c + 1) / w->mbps - donto_now();
            if (ahead > 0) {
                struct timespec ts = {(time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
        size_t f = (size_t)w->flush_mb;
        if (f && (c + 1) % f == 0) {
            off_t at = (off_t)((c + 1 - f) * CHUNK);
            sync_file_range(fd, at, (off_t)(f * CHUNK), SYNC_FILE_RANGE_WRITE);
            if (at) sync_file_range(fd, at - (off_t)(f * CHUNK), (off_t)(f * CHUNK), SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        }
    }
    if (fsync(fd)) snprintf(w->err, sizeof w->err, "fsync: %s", strerror(errno));
    w->seconds = donto_now() - t0;
    close(fd);
    free(buf);
    atomic_store(&w->done, 1);
    return NULL;
}

typedef struct {
    const donto_vecfile *vf;
    size_t rows;
    int gap_ms;
    uint64_t seed;
    double sum; /* of every value read */
} reader_t;

/* Queries until `seconds` pass (or, seconds < 0, until *stop is set);
 * each query's read time in ms into *ms (grown as needed). */
static size_t run_phase(reader_t *r, double seconds, atomic_int *stop, double **ms, size_t *cap) {
    size_t n = 0, nrows = donto_vecfile_n(r->vf), d = (size_t)donto_vecfile_dim(r->vf);
    const float *rows = donto_vecfile_rows(r->vf);
    int64_t *pick = malloc(r->rows * sizeof *pick);
    double t0 = donto_now();
    while (seconds >= 0 ? donto_now() - t0 < seconds : !*stop) {
        for (size_t i = 0; i < r->rows; i++) {
            r->seed ^= r->seed << 13, r->seed ^= r->seed >> 7, r->seed ^= r->seed << 17;
            pick[i] = (int64_t)(r->seed % nrows);
        }
        double t = donto_now();
        donto_vecfile_prefetch(r->vf, pick, r->rows);
        for (size_t i = 0; i < r->rows; i++) {
            const float *x = rows + (size_t)pick[i] * d;
            float s = 0;
            for (size_t j = 0; j < d; j++) s += x[j];
            r->sum += s;
        }
        if (n == *cap) *ms = realloc(*ms, (*cap = *cap ? 2 * *cap : 4096) * sizeof **ms);
        (*ms)[n++] = (donto_now() - t) * 1e3;
        struct timespec ts = {r->gap_ms / 1000, (long)(r->gap_ms % 1000) * 1000000L};
        if (r->gap_ms > 0) nanosleep(&ts, NULL);
    }
    free(pick);
    return n;
}

static void report(const char *phase, double *ms, size_t n) {
    if (!n) {
        printf("%-8s queries=0\n", phase);
        return;
    }
    double p50 = bench_pct(ms, n, 0.5), p99 = bench_pct(ms, n, 0.99); /* sorted now */
    printf("%-8s queries=%zu p50_ms=%.3f p99_ms=%.3f max_ms=%.1f\n", phase, n, p50, p99, ms[n - 1]);
    fflush(stdout);
}

/* The whole file out of the page cache: every row read is a disk read, as
 * at 42M (64 GB of rows). */
static void evict(const donto_vecfile *vf, const char *path) {
    donto_vecfile_drop(vf, 0, donto_vecfile_n(vf));
    int fd = open(path, O_RDONLY);
    if (fd < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) fprintf(stderr, "%s: not evicted\n", path);
    if (fd >= 0) close(fd);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_rerank_io --vectors FILE [--rows R] [--gap-ms G] [--seconds S] [--write-gb W]\n"
               "                       [--write-dir DIR] [--write-mbps M] [--flush-mb F] [--writer raw|vecfile]\n"
               "                       [--seed N]\n");
}

int main(int argc, char **argv) {
    const char *path = NULL, *wdir = NULL;
    reader_t r = {.rows = 100, .gap_ms = 6, .seed = 42};
    double seconds = 30, wgb = 0;
    int flush_mb = 0;
    double mbps = 0;
    int vecw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
        if (ARG("--vectors")) path = v;
        else if (ARG("--rows")) r.rows = strtoull(v, NULL, 10);
        else if (ARG("--gap-ms")) r.gap_ms = atoi(v);
        else if (ARG("--seconds")) seconds = atof(v);
        else if (ARG("--write-gb")) wgb = atof(v);
        else if (ARG("--write-dir")) wdir = v;
        else if (ARG("--flush-mb")) flush_mb = atoi(v);
        else if (ARG("--write-mbps")) mbps = atof(v);
        else if (ARG("--writer")) {
            if (strcmp(v, "vecfile") && strcmp(v, "raw")) {
                fprintf(stderr, "bench_rerank_io: --writer raw|vecfile, not %s\n", v);
                return 2;
            }
            vecw = !strcmp(v, "vecfile");
        }
        else if (ARG("--seed")) r.seed = strtoull(v, NULL, 10) | 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "bench_rerank_io: bad argument %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path || !r.rows || seconds <= 0 || wgb < 0) {
        usage(stderr);
        return 2;
    }
    donto_err err = {0};
    donto_vecfile *vf;
    if (donto_vecfile_open(path, 0, &vf, &err)) {
        fprintf(stderr, "bench_rerank_io: %s\n", err.msg);
        return 1;
    }
    if (!donto_vecfile_n(vf)) {
        fprintf(stderr, "bench_rerank_io: %s holds no rows\n", path);
        return 1;
    }
    char dirbuf[4096];
    if (!wdir) {
        snprintf(dirbuf, sizeof dirbuf, "%s", path);
        char *slash = strrchr(dirbuf, '/');
        if (slash) *slash = 0;
        wdir = slash ? dirbuf : ".";
    }
    r.vf = vf;
    printf("bench_rerank_io: %s, %zu rows of %d floats; %zu random rows a query, %d ms between queries\n", path,
           donto_vecfile_n(vf), donto_vecfile_dim(vf), r.rows, r.gap_ms);
    double *ms = NULL;
    evict(vf, path);
    size_t cap = 0, n = run_phase(&r, seconds, NULL, &ms, &cap);
    report("quiet", ms, n);
    if (wgb > 0) {
        writer_t w = {.dir = wdir, .gb = wgb, .flush_mb = flush_mb, .mbps = mbps, .vecfile = vecw};
        pthread_t th;
        evict(vf, path);
        pthread_create(&th, NULL, writer, &w);
        n = run_phase(&r, -1, &w.done, &ms, &cap);
        pthread_join(th, NULL);
        if (w.err[0]) {
            fprintf(stderr, "bench_rerank_io: writer: %s\n", w.err);
            return 1;
        }
        report("writing", ms, n);
        printf("         (%.1f GB written and synced in %.1f s)\n", wgb, w.seconds);
        evict(vf, path);
        n = run_phase(&r, seconds, NULL, &ms, &cap);
        report("after", ms, n);
    }
    fprintf(stderr, "(checksum %g)\n", r.sum);
    free(ms);
    donto_vecfile_free(vf);
    return 0;
}
