/*
 * donto-accel: the embedding worker (`donto-embed work`): leases texts from
 * a coordinator (docs/protocol.md), embeds them with the local encoder and
 * submits the vectors, pipelined over three threads, plus a heartbeat:
 *
 *   lease thread   keeps one batch leased ahead of the engine;
 *   engine (caller) embeds batch after batch, never waiting on the network
 *                  while a leased batch is ready;
 *   submit thread  sends results (vector_b64 + lease_id; JSON numbers when a
 *                  legacy server answers 400 to base64) in the background;
 *   heartbeat      extends the leases it holds (POST /extend) at a third of
 *                  the lease's TTL, so a slow batch is not leased again.
 * Items rejected lease_expired halve the lease size; 429 waits Retry-After;
 * 401/403 (revoked, suspended) stop the worker, and so do setup errors
 * before the coordinator first answers (host not found, untrusted
 * certificate: at once; connection refused: after start_retry_s).
 *
 * Errors back off with jitter (up to 60 s); at most one /report per minute;
 * a log line per minute. donto_worker_stop() (async-signal-safe, called from
 * the SIGINT/SIGTERM handler) stops leasing, lets the engine finish its
 * batch, submits within stop_deadline_s and releases what was not submitted.
 */
#ifndef DONTO_WORKER_H
#define DONTO_WORKER_H

#include <stdint.h>

#include "donto/encoder.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_worker_config {
    const char *url;        /* base URL including the route prefix, e.g. http://h:8080/embed */
    const char *token;      /* bearer token (never logged) */
    const char *worker_id;
    const char *model_name; /* the model leased items must name */
    int n;                  /* items per lease (1..1024) */
    int batch;              /* texts per encode call (0: the lease size) */
    int target;             /* donto_target, or -1: any */
    double idle_sleep_s;    /* after an empty lease */
    int64_t max_items;      /* stop after this many embedded (0: no limit) */
    int exit_when_idle;     /* stop when a lease comes back empty */
    double stop_deadline_s; /* submit budget after a stop (default 30) */
    double connect_timeout_s, request_timeout_s;
    double max_backoff_s;   /* default 60 */
    const char *ca_file;    /* PEM CA bundle for https:// (NULL: the system's) */
    /* Until the coordinator first answers: a refused or timed-out
     * connection is retried for this long, then the worker stops (default
     * 60; 0: forever). An unresolvable host, a bad URL or a certificate the
     * worker does not trust stop it at once. */
    double start_retry_s;
} donto_worker_config;

void donto_worker_default_config(donto_worker_config *c);

/* Run until stopped (signal, idle with exit_when_idle, max_items). The
 * encoder must already be open; its dimension must be the model's.
 * Returns 0, or -1 with err set (a fatal error: e.g. 401 from the server). */
int donto_worker_run(const donto_worker_config *c, donto_encoder *enc, donto_err *err);

/* Ask the running worker to stop (async-signal-safe). */
void donto_worker_stop(void);

#ifdef __cplusplus
}
#endif
#endif
