/*
 * donto-accel: small shared utilities (errors, logging, time, files).
 *
 * Error convention used across the library: a function that can fail returns
 * 0 on success and -1 on failure, and writes a human-readable reason into a
 * caller-owned donto_err (which may be NULL when the caller does not care).
 * Messages name the thing that is wrong ("model.safetensors: tensor X has
 * shape [3,4], config expects [384,384]"), never just "error".
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

typedef struct donto_err {
    char msg[DONTO_ERR_MAX];
} donto_err;

#if defined(__GNUC__)
#define DONTO_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DONTO_PRINTF(a, b)
#endif

/* Write a formatted message into err (if non-NULL). Always returns -1 so that
 * callers can write `return donto_seterr(err, "...")`. */
int donto_seterr(donto_err *err, const char *fmt, ...) DONTO_PRINTF(2, 3);
/* Prefix the existing message with "<prefix>: ". Returns -1. */
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

/* Read a whole file into a NUL-terminated heap buffer. */
int donto_read_file(const char *path, char **out, size_t *len, donto_err *err);

/* Allocation helpers that fail loudly: abort with a message on OOM.  Used
 * only for small, bounded allocations; big buffers use the checked variants
 * so that the caller can report a clean error. */
void *donto_xmalloc(size_t n);
void *donto_xcalloc(size_t n, size_t sz);
void *donto_xrealloc(void *p, size_t n);
char *donto_xstrdup(const char *s);
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
