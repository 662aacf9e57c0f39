/*
 * donto-accel coordinator: serving the sheaf models (docs/sheaf-serving.md
 * "Serving"). Private to the coord module; server.c routes /sheaf/infer and
 * /sheaf/models here after the token gate (admin or analyst).
 */
#ifndef DONTO_COORD_SHEAF_SERVE_H
#define DONTO_COORD_SHEAF_SERVE_H
#include <stddef.h>

#include "donto/store.h"

typedef struct sheaf_srv sheaf_srv;

typedef struct sheaf_srv_limits {
    size_t max_nodes; /* nodes per request graph (rows are bounded by it and by the body) */
    size_t max_pairs; /* query pairs per edge-task request */
} sheaf_srv_limits;

/* An answer: HTTP status and a JSON body (malloc'd; NULL: out of memory). */
typedef struct sheaf_answer {
    unsigned status;
    char *json;
} sheaf_answer;

sheaf_srv *sheaf_srv_new(const sheaf_srv_limits *lim);
void sheaf_srv_free(sheaf_srv *sv);

/* POST /sheaf/infer?task=T with an export-format graph as the body: the
 * task's active model (loaded or reloaded when the registry's active model
 * changed) over it. s: the request's store handle. */
sheaf_answer sheaf_srv_infer(sheaf_srv *sv, donto_store *s, const char *task, const char *body, size_t len);
/* GET /sheaf/models: the active model of every task, and what is loaded. */
sheaf_answer sheaf_srv_models(sheaf_srv *sv, donto_store *s);

/* Counters for /metrics. */
typedef struct sheaf_srv_stats {
    unsigned long long requests, rows, reloads, errors;
} sheaf_srv_stats;
void sheaf_srv_stats_get(sheaf_srv *sv, sheaf_srv_stats *out);

#endif
