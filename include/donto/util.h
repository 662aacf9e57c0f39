/*
 * donto-accel: small shared utilities (errors, logging, time, files).
 *
 * Error convention used across the library: a function that can fail returns
 * 0 on success and -1 on failure, and writes a human-readable reason into a
 * caller-owned donto_err (which may be NULL when the caller does not care).
 * Messages name the thing that is wrong ("model.safetensors: tensor X has
 * shape [3,4], config expects [384,384]"), never just "error".
 *
 * Beside the message, an error carries a code for programs: what kind of
 * failure it is, so that a caller can decide (retry, answer 400 or 503, exit
 * 1 or 2) without reading text. donto_seterr() leaves the failure
 * unclassified (DONTO_E_INTERNAL); donto_seterrc() names the code;
 * donto_preerr() keeps it. The coordinator maps codes to HTTP statuses in
 * one table (src/coord/server.c).
 */
#ifndef DONTO_UTIL_H
#define DONTO_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DONTO_ERR_MAX 512

typedef enum donto_code {
    DONTO_E_NONE = 0,     /* no error */
    DONTO_E_INTERNAL,     /* unclassified: a bug, or a failure nobody named */
    DONTO_E_INVALID,      /* the input is not acceptable (fix it; retrying won't help) */
    DONTO_E_NOT_FOUND,    /* the thing named does not exist */
    DONTO_E_CONFLICT,     /* it exists already, or clashes with what exists */
    DONTO_E_UNAVAILABLE,  /* a resource (database, network) cannot be used now: retry later */
    DONTO_E_NOMEM,        /* out of memory */
    DONTO_E_SCHEMA,       /* the database lacks tables or migrations this needs: migrate it (retrying won't help) */
    DONTO_E_N
} donto_code;

typedef struct donto_err {
    char msg[DONTO_ERR_MAX];
    donto_code code; /* after msg, so that {0} and {{0}} initialise both */
} donto_err;

/* "invalid", "not_found", ... ("none" for DONTO_E_NONE, "internal" for
 * anything out of range). */
const char *donto_code_name(donto_code c);
/* The code of err: DONTO_E_INTERNAL for a message with no code. */
donto_code donto_err_code(const donto_err *err);

#if defined(__GNUC__)
#define DONTO_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DONTO_PRINTF(a, b)
#endif

/* Write a formatted message into err (if non-NULL), code DONTO_E_INTERNAL.
 * Always returns -1 so that callers can write `return donto_seterr(err, "...")`. */
int donto_seterr(donto_err *err, const char *fmt, ...) DONTO_PRINTF(2, 3);
/* The same with a code. Returns -1. */
int donto_seterrc(donto_err *err, donto_code code, const char *fmt, ...) DONTO_PRINTF(3, 4);
/* Prefix the existing message with "<prefix>: "; the code stays. Returns -1. */
int donto_preerr(donto_err *err, const char *fmt, ...) DONTO_PRINTF(2, 3);

/* Logging: the only process-wide mutable state in the library. */
enum { DONTO_LOG_ERROR = 0, DONTO_LOG_WARN = 1, DONTO_LOG_INFO = 2, DONTO_LOG_DEBUG = 3 };
void donto_log_set_level(int level);
int donto_log_get_level(void);
void donto_log(int level, const char *fmt, ...) DONTO_PRINTF(2, 3);
#define DLOG_ERROR(...) donto_log(DONTO_LOG_ERROR, __VA_ARGS__)
#define DLOG_WARN(...) donto_log(DONTO_LOG_WARN, __VA_ARGS__)
#define DLOG_INFO(...) donto_log(DONTO_LOG_INFO, __VA_ARGS__)
#define DLOG_DEBUG(...) donto_log(DONTO_LOG_DEBUG, __VA_ARGS__)

/* Monotonic clock in seconds. */
double donto_now(void);
/* Wall clock: milliseconds since the Unix epoch (timestamps stored in the
 * database, lease deadlines, as-of instants). */
int64_t donto_unix_ms(void);

/* Read a whole file into a NUL-terminated heap buffer. */
int donto_read_file(const char *path, char **out, size_t *len, donto_err *err);

/* Allocation helpers that fail loudly: abort with a message on OOM.  Used
 * only for small, bounded allocations; big buffers use the checked variants
 * so that the caller can report a clean error. */
void *donto_xmalloc(size_t n);
void *donto_xcalloc(size_t n, size_t sz);
void *donto_xrealloc(void *p, size_t n);
char *donto_xstrdup(const char *s);
/* A growable string (NUL-terminated whenever p is set), for text built in
 * pieces: SQL array literals, COPY rows, rendered labels. Start it zeroed;
 * growth aborts on OOM like donto_xrealloc. */
typedef struct donto_buf {
    char *p;         /* NULL until the first put */
    size_t len, cap; /* bytes held (without the NUL), bytes allocated */
} donto_buf;
void donto_buf_put(donto_buf *b, const void *s, size_t n);
void donto_buf_str(donto_buf *b, const char *s);
void donto_buf_printf(donto_buf *b, const char *fmt, ...) DONTO_PRINTF(2, 3);
/* The string (the caller frees it; "" when nothing was put); b is left empty. */
char *donto_buf_take(donto_buf *b);
void donto_buf_free(donto_buf *b);

/* 64-byte aligned allocation (free with free()); NULL on failure. */
void *donto_aligned_alloc(size_t n);

/* Number of online CPUs (>= 1). */
int donto_ncpu(void);

/* Peak resident set size of this process in bytes (from getrusage). */
size_t donto_peak_rss(void);

#ifdef __cplusplus
}
#endif
#endif
