/* donto-accel: shared utilities. See include/donto/util.h. */
#define _POSIX_C_SOURCE 200809L
#include "donto/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int donto_seterr(donto_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = DONTO_E_INTERNAL;
    }
    return -1;
}

int donto_seterrc(donto_err *err, donto_code code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code > DONTO_E_NONE && code < DONTO_E_N ? code : DONTO_E_INTERNAL;
    }
    return -1;
}

static const char *const CODE_NAMES[DONTO_E_N] = {
    [DONTO_E_NONE] = "none",           [DONTO_E_INTERNAL] = "internal",
    [DONTO_E_INVALID] = "invalid",     [DONTO_E_NOT_FOUND] = "not_found",
    [DONTO_E_CONFLICT] = "conflict",   [DONTO_E_UNAVAILABLE] = "unavailable",
    [DONTO_E_NOMEM] = "out_of_memory", [DONTO_E_SCHEMA] = "not_migrated",
};

const char *donto_code_name(donto_code c) {
    return c >= DONTO_E_NONE && c < DONTO_E_N ? CODE_NAMES[c] : "internal";
}

donto_code donto_err_code(const donto_err *err) {
    if (!err) return DONTO_E_INTERNAL;
    if (err->code > DONTO_E_NONE && err->code < DONTO_E_N) return err->code;
    return err->msg[0] ? DONTO_E_INTERNAL : DONTO_E_NONE;
}

int donto_preerr(donto_err *err, const char *fmt, ...) {
    if (err) {
        char pre[DONTO_ERR_MAX], old[DONTO_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pre, sizeof pre, fmt, ap);
        va_end(ap);
        memcpy(old, err->msg, sizeof old);
        /* Truncation is fine here: the message is for people. */
        size_t n = strlen(pre);
        if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
        memcpy(err->msg, pre, n);
        memcpy(err->msg + n, ": ", 2);
        size_t room = sizeof err->msg - n - 3;
        size_t m = strlen(old);
        if (m > room) m = room;
        memcpy(err->msg + n + 2, old, m);
        err->msg[n + 2 + m] = 0;
    }
    return -1;
}

static int g_log_level = DONTO_LOG_INFO; /* the one global: logging */

void donto_log_set_level(int level) { g_log_level = level; }
int donto_log_get_level(void) { return g_log_level; }

void donto_log(int level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > g_log_level) return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so lines from several threads do not interleave. */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len++] = '\n';
        line[len] = 0;
    }
    fputs(line, stderr);
}

int64_t donto_unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double donto_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int donto_read_file(const char *path, char **out, size_t *len, donto_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return donto_seterr(err, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return donto_seterr(err, "%s: out of memory", path);
    }
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) {
            if (ferror(f)) {
                int e = errno;
                free(buf);
                fclose(f);
                return donto_seterr(err, "%s: read error: %s", path, strerror(e));
            }
            break;
        }
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            return donto_seterr(err, "%s: out of memory", path);
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
}

static void oom(size_t n) {
    fprintf(stderr, "donto: out of memory allocating %zu bytes\n", n);
    abort();
}

void *donto_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}
void *donto_xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(n * sz);
    return p;
}
void *donto_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}
char *donto_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = donto_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
void donto_buf_put(donto_buf *b, const void *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        b->p = donto_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
void donto_buf_str(donto_buf *b, const char *s) { donto_buf_put(b, s, strlen(s)); }
void donto_buf_printf(donto_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        donto_buf_put(b, small, (size_t)n);
        return;
    }
    donto_buf_put(b, "", 0); /* allocated */
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap;
        while (b->len + (size_t)n + 1 > cap) cap *= 2;
        b->p = donto_xrealloc(b->p, cap);
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
char *donto_buf_take(donto_buf *b) {
    char *p = b->p ? b->p : donto_xstrdup("");
    *b = (donto_buf){0};
    return p;
}
void donto_buf_free(donto_buf *b) {
    free(b->p);
    *b = (donto_buf){0};
}
void *donto_aligned_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) != 0) return NULL;
    return p;
}

int donto_ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

size_t donto_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
