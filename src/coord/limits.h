/*
 * donto-accel coordinator: fair limits per token (docs/trust.md).
 *
 * Kept in this process's memory (several coordinators on one database each
 * apply them on their own share of the traffic):
 *   lease rate      a token bucket of lease requests per token;
 *   report rate     a token bucket of reports per token (the reports table is
 *                   also pruned by age in the store);
 *   outstanding     items a token holds leased and not yet submitted or
 *                   released; a lease gets at most cap - outstanding items,
 *                   none (429) at the cap. Counted from this coordinator's
 *                   own lease answers: entries of (expiry, items left),
 *                   settled by submits and releases, dropped at expiry;
 *   batch size      per worker (token/worker id): a worker whose items come
 *                   back "lease_expired" is embedding slower than the lease
 *                   runs, so its next leases are halved (down to 1), and
 *                   doubled back after batches submitted in time. This ends
 *                   the livelock of a batch that always outlives its lease,
 *                   for workers that do not extend (the legacy Python one).
 * Every function is thread-safe. A token or worker id is any string; the
 * tables are bounded (entries idle for long are dropped first; when full,
 * a new key is not tracked and gets the defaults).
 */
#ifndef DONTO_COORD_LIMITS_H
#define DONTO_COORD_LIMITS_H

#include <stddef.h>
#include <stdint.h>

typedef struct coord_limits_config {
    double lease_per_s;   /* lease requests per second per token; <= 0: no limit */
    double lease_burst;   /* bucket size */
    double report_per_min; /* reports per minute per token; <= 0: no limit */
    double report_burst;
    int64_t max_outstanding; /* items leased at once per token; <= 0: no limit */
} coord_limits_config;

#define LIMITS_LEASE_PER_S 50.0
#define LIMITS_LEASE_BURST 100.0
#define LIMITS_REPORT_PER_MIN 6.0
#define LIMITS_REPORT_BURST 10.0
#define LIMITS_MAX_OUTSTANDING 4096

typedef struct coord_limits coord_limits;

coord_limits *limits_new(const coord_limits_config *cfg); /* NULL: out of memory */
void limits_free(coord_limits *L);

/* May token lease now, and how many of want? Returns the number allowed
 * (>= 1), or 0 with *retry_after_s (>= 1) and *why ("rate" or
 * "outstanding") set. Counts the request against the rate. */
int limits_lease_allow(coord_limits *L, const char *token, const char *worker, int want, int64_t now_ms,
                       int *retry_after_s, const char **why);
/* n items were leased to token until expires_ms. */
void limits_leased(coord_limits *L, const char *token, size_t n, int64_t now_ms, int64_t expires_ms);
/* A submit or release settled n items of token's leases; expired of them
 * came back "lease_expired" (their batch outlived its lease). */
void limits_settled(coord_limits *L, const char *token, const char *worker, size_t n, size_t expired,
                    int64_t now_ms);
/* token's leases were extended to expires_ms. */
void limits_extended(coord_limits *L, const char *token, int64_t now_ms, int64_t expires_ms);
/* May token report now? 1 yes; 0 with *retry_after_s set. */
int limits_report_allow(coord_limits *L, const char *token, int64_t now_ms, int *retry_after_s);
/* Checks of token's vectors queued on the verifier and not yet done: add
 * delta (+1 pushed, -1 done) and return the count. The sampling counts
 * them as passed for now, so that a new token's first big submit is not
 * checked whole before the first verdict is in. */
int64_t limits_checks_pending(coord_limits *L, const char *token, int64_t delta, int64_t now_ms);
/* Items token holds leased now (for tests and the admin view). */
int64_t limits_outstanding(coord_limits *L, const char *token, int64_t now_ms);

#endif
