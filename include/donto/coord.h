/*
 * donto-accel: the coordinator, the HTTP face of the embedding work queue
 * (`donto-embed serve`). Workers lease texts, submit vectors, release what
 * they will not finish and report problems; the wire protocol is in
 * docs/protocol.md and is kept compatible with the original Python workers.
 *
 * Threads: libmicrohttpd's internal thread pool (epoll on Linux) serves the
 * connections; each request that needs the database takes exactly one store
 * handle from a bounded pool for its whole duration (see server.c).
 */
#ifndef DONTO_COORD_H
#define DONTO_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "donto/recall.h"
#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DONTO_COORD_DEFAULT_BASE "/embed"
#define DONTO_COORD_DEFAULT_MAX_BODY ((size_t)32 << 20)
#define DONTO_COORD_DEFAULT_LEASE_TTL_MS ((int64_t)900 * 1000)

typedef struct donto_coord_config {
    /* "HOST:PORT" or "[IPV6]:PORT"; port 0 picks a free one (see
     * donto_coord_port). HOST is an address or a name that resolves locally. */
    const char *listen;
    int threads;             /* HTTP worker threads; 0: number of CPUs */
    int pool;                /* store handles; 0: as many as threads */
    const char *base;        /* path prefix of every route; NULL: "/embed" */
    size_t max_body;         /* request body limit in bytes; 0: 32 MiB */
    int64_t lease_ttl_ms;    /* lease lifetime; 0: 900 s */
    unsigned conn_timeout_s; /* idle connection timeout; 0: 60 s */
    double pool_wait_s;      /* longest wait for a store handle; 0: 10 s (then 503) */
    const char *version;     /* reported by /health; NULL: the library's */

    /* HTTPS: PEM text (not file names) of the certificate chain and its
     * private key; both NULL: plain HTTP. Copied at start. */
    const char *tls_cert_pem, *tls_key_pem;

    /* Where handles come from: open_store(open_ctx) when set (tests use an
     * in-memory store), else donto_store_open(db_url). Called pool times at
     * start; the coordinator closes every handle at stop. */
    const char *db_url;
    int (*open_store)(void *ctx, donto_store **out, donto_err *err);
    void *open_ctx;

    /* Clock in Unix milliseconds; NULL: the wall clock. Tests inject one to
     * drive lease expiry. */
    int64_t (*now_ms)(void *ctx);
    void *clock_ctx;

    /* GET <base>/recall (any valid token) embeds ?q= and searches with this
     * (borrowed; it must outlive the coordinator). NULL: no model loaded,
     * the route answers 503 no_model. */
    donto_recall *recall;
    const char *recall_model; /* the stored model name it searches, for the answer */

    /* The sheaf models (POST /sheaf/infer, GET /sheaf/models; admin and
     * analyst tokens; docs/sheaf-serving.md): the registry's active model
     * per task, reloaded when it changes. A request's graph is refused past
     * these many nodes / query pairs; 0: 100,000 each. */
    size_t sheaf_max_nodes, sheaf_max_pairs;

    /* Contributor trust (docs/trust.md). */
    /* Verification: the coordinator re-embeds a sample of each token's
     * submitted items with this model (fp32 CPU) on a background pool and
     * suspends a token whose vector does not match. NULL: no verification. */
    const char *verify_model_dir;
    const char *verify_model_name; /* the model its vectors are stored under (items of
                                    * other models are not checked); NULL: recall_model */
    int verify_threads;            /* 0: 1 */
    int verify_nice;               /* raise the verifier threads' nice value by this; 0: leave it */
    int verify_queue;              /* jobs waiting at most; 0: 4096 (then checks are skipped, counted) */
    double verify_min_cosine;      /* 0: the measured default (src/coord/verify.h) */
    int trust_after;               /* checks passed in a row before a token is trusted; 0: default */
    double verify_floor;           /* lowest sampling probability of a trusted token; 0: default */
    uint64_t verify_seed;          /* 0: random; else the sampling is reproducible */
    int verify_isa;                /* the verifier's CPU kernel set (donto_isa); 0: auto */
    double canary_rate;            /* canary items (docs/trust.md): how often a trusted token's
                                    * lease answer carries one; 0: 0.1, < 0: no canaries */
    int replicate;                 /* replication (docs/trust.md): an untrusted token's vectors
                                    * (and, without a verifier, a trusted token's sampled ones)
                                    * are accepted when this many tokens agree; 0 or 1: off, 2-3 */
    int replica_cap;               /* replicas waiting at once; 0: 8192 */
    /* Fair limits per token; 0: the default, < 0: no limit. */
    double lease_per_s;
    double report_per_min;
    int64_t max_outstanding;
    int verified_only;             /* recall answers from verified vectors only */
    int vectors;                   /* donto_vectors_layout of every handle (store.h); 0: own */
    /* Slow and hostile clients (src/coord/conn_guard.c, docs/trust.md); 0: default.
     * Deadlines count from accept, or from the end of the previous request
     * on a keep-alive connection, and do not reset when a byte arrives. */
    unsigned max_connections;  /* held at once; 0: 4096 (capped by the fd limit) */
    unsigned per_ip_limit;     /* per client address (IPv6: per /64); 0: 256 */
    unsigned header_timeout_s; /* request line + headers complete within; 0: 10 */
    unsigned body_timeout_s;   /* the body complete within, from its headers; 0: 60 */
    unsigned idle_timeout_s;   /* an idle keep-alive connection is closed after; 0: 30 */
} donto_coord_config;

typedef struct donto_coord donto_coord;

/* Open the store pool and start listening. On return the server is serving. */
int donto_coord_start(const donto_coord_config *cfg, donto_coord **out, donto_err *err);

/* The TCP port actually bound (useful with port 0). */
int donto_coord_port(const donto_coord *c);

/* The connection guard's counters (for /metrics and tests). */
typedef struct donto_coord_conn_stats {
    unsigned long long open;           /* connections held now */
    unsigned long long accepted;       /* admitted since start */
    unsigned long long refused;        /* refused at accept: at a limit, nothing to evict */
    unsigned long long evicted_per_ip; /* closed to admit a newer one from the same address */
    unsigned long long evicted_full;   /* closed to admit one at max_connections */
    unsigned long long timeout_headers, timeout_body, timeout_idle; /* closed by a deadline */
    unsigned long long peer_closed;    /* the client had closed it (FIN unseen by libmicrohttpd): let go */
    unsigned max_connections, per_ip_limit;                          /* the limits in force */
} donto_coord_conn_stats;
void donto_coord_conn_stats_get(const donto_coord *c, donto_coord_conn_stats *out);

/* Graceful stop: stop accepting connections, wait up to drain_s seconds for
 * requests in flight to finish, close every connection and every store
 * handle, free c. Safe to call with NULL. */
void donto_coord_stop(donto_coord *c, double drain_s);

#ifdef __cplusplus
}
#endif
#endif
