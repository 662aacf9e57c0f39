/*
 * `donto-embed serve | migrate | token`: the coordinator and its database
 * chores. serve runs until SIGTERM or SIGINT, then stops gracefully (no new
 * connections, requests in flight finish, store handles closed).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "donto/cli.h"
#include "donto/coord.h"
#include "donto/encoder.h"
#include "donto/opt.h"
#include "donto/recall.h"
#include "donto/store.h"
#include "donto/substrate.h"
#include "donto/wire.h"

#include "cli_db.h"

#ifndef DONTO_VERSION
#define DONTO_VERSION "unknown"
#endif


/* ---- serve ------------------------------------------------------------------ */

/* What serve does besides the coordinator's own configuration. */
typedef struct serve_opts {
    int migrate;
    long long drain;                            /* seconds */
    const char *model_dir, *model_name, *index; /* recall (model_dir NULL: none) */
    long long ann_min;
    int isa; /* donto_isa of the recall encoder */
    double index_memory_gb;
} serve_opts;

static int serve_run(const donto_coord_config *cfg, const serve_opts *o);

enum { VERIFY_AUTO, VERIFY_ON, VERIFY_OFF };
static const char *const VERIFY_NAMES[] = {"auto", "on", "off", NULL};

static int serve_until_signal(const donto_coord_config *cfg, const sigset_t *stop, long long drain);

int donto_serve_cmd(int argc, char **argv) {
    donto_coord_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.db_url = DONTO_STORE_DEFAULT_URL;
    cfg.listen = "127.0.0.1:8080";
    cfg.version = DONTO_VERSION;
    int64_t drain = 30, ann_min = 0, max_body = 0, lease_ttl = 0, conn_timeout = 0;
    double index_memory_gb = 0;
    int migrate = 0, verbose = 0, isa = DONTO_ISA_AUTO;
    int max_conn = 0, per_ip = 0, header_to = 0, body_to = 0, idle_to = 0; /* slow clients: docs/trust.md */
    const char *tls_cert = NULL, *tls_key = NULL;
    const char *model_dir = NULL, *model_name = NULL, *index = NULL;
    int verify = 0; /* VERIFY_AUTO */
    int64_t verify_threads = 0, verify_queue = 0, trust_after = 0, verify_seed = 0, verify_nice = 0;
    double min_cosine = 0, verify_floor = 0, lease_rate = -1, report_rate = -1, canary_rate = -1;
    int64_t max_outstanding_opt = -1, sheaf_nodes = 0, sheaf_pairs = 0;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &cfg.db_url, .metavar = "URL",
         .help = "SQLite file path, or postgres://... (default ./donto.db)"},
        {DONTO_OPT_STRING, "listen", 0, &cfg.listen, .metavar = "HOST:PORT",
         .help = "address to listen on (default 127.0.0.1:8080; [::1]:8080 for IPv6)"},
        {DONTO_OPT_INT, "threads", 0, &cfg.threads, .min = 1, .max = 1024, .metavar = "N",
         .help = "HTTP threads (default: number of CPUs)"},
        {DONTO_OPT_INT, "pool", 0, &cfg.pool, .min = 1, .max = 1024, .metavar = "N",
         .help = "database handles (default: as many as threads)"},
        {DONTO_OPT_STRING, "base", 0, &cfg.base, .metavar = "PATH", .help = "route prefix (default /embed)"},
        {DONTO_OPT_INT64, "max-body", 0, &max_body, .min = 1024, .max = 1LL << 32, .metavar = "BYTES",
         .help = "request body limit (default 33554432 = 32 MiB)"},
        {DONTO_OPT_INT64, "sheaf-max-nodes", 0, &sheaf_nodes, .min = 1, .max = 100000000, .metavar = "N",
         .help = "POST /sheaf/infer: nodes per request graph at most (default 100000)"},
        {DONTO_OPT_INT64, "sheaf-max-pairs", 0, &sheaf_pairs, .min = 1, .max = 100000000, .metavar = "N",
         .help = "POST /sheaf/infer: query pairs per edge-task request at most (default 100000)"},
        {DONTO_OPT_INT64, "lease-ttl", 0, &lease_ttl, .min = 1, .max = 7 * 86400, .metavar = "SECS",
         .help = "lease lifetime (default 900)"},
        {DONTO_OPT_INT64, "conn-timeout", 0, &conn_timeout, .min = 1, .max = 3600, .metavar = "SECS",
         .help = "idle connection timeout (default 60)"},
        {DONTO_OPT_INT, "max-connections", 0, &max_conn, .min = 16, .max = 1 << 20, .metavar = "N",
         .help = "connections held at once; past it the oldest one still waiting for its\n"
                 "headers or idle is closed (default 4096, capped by the descriptor limit)"},
        {DONTO_OPT_INT, "per-ip-limit", 0, &per_ip, .min = 1, .max = 1 << 20, .metavar = "N",
         .help = "connections per client address (IPv6: per /64); past it that\n"
                 "address's oldest waiting or idle one is closed (default 256)"},
        {DONTO_OPT_INT, "header-timeout", 0, &header_to, .min = 1, .max = 3600, .metavar = "SECS",
         .help = "request line and headers complete within this of accept (default 10;\n"
                 "trickled bytes do not extend it)"},
        {DONTO_OPT_INT, "body-timeout", 0, &body_to, .min = 1, .max = 86400, .metavar = "SECS",
         .help = "a request body complete within this of its headers (default 60)"},
        {DONTO_OPT_INT, "idle-timeout", 0, &idle_to, .min = 1, .max = 3600, .metavar = "SECS",
         .help = "close a keep-alive connection idle this long (default 30)"},
        {DONTO_OPT_INT64, "drain", 0, &drain, .min = 0, .max = 3600, .metavar = "SECS",
         .help = "at shutdown, wait this long for requests in flight (default 30)"},
        {DONTO_OPT_STRING, "tls-cert", 0, &tls_cert, .metavar = "FILE",
         .help = "serve HTTPS with this PEM certificate (chain); needs --tls-key"},
        {DONTO_OPT_STRING, "tls-key", 0, &tls_key, .metavar = "FILE", .help = "the PEM private key of --tls-cert"},
        {DONTO_OPT_FLAG, "migrate", 0, &migrate, .help = "apply database migrations before serving"},
        CLI_VECTORS_OPT(&cfg.vectors),
        {DONTO_OPT_STRING, "model", 0, &model_dir, .metavar = "DIR",
         .help = "load this model to embed GET <base>/recall queries (without it,\n/recall answers 503 no_model)"},
        {DONTO_OPT_STRING, "model-name", 0, &model_name, .metavar = "NAME",
         .help = "the stored vectors' model recall searches (default: DIR/model_name.txt,\n"
                 "else BAAI/bge-small-en-v1.5)"},
        {DONTO_OPT_STRING, "index", 0, &index, .metavar = "PREFIX",
         .help = "recall's ANN files at PREFIX.<target>.faiss/.ids (default: the SQLite\n"
                 "file's path; PostgreSQL: in memory only)"},
        {DONTO_OPT_INT64, "ann-min", 0, &ann_min, .min = 1, .max = 1LL << 40, .metavar = "N",
         .help = "recall uses the ANN index from N vectors on (default 20000)"},
        {DONTO_OPT_DOUBLE, "index-memory-gb", 0, &index_memory_gb, .fmin = 0, .fmax = 1e6, .fmin_open = 1,
         .metavar = "GB",
         .help = "bound on each recall index's memory, in GB: the index kind (IVF-Flat,\n"
                 "IVF-PQ96, IVF-PQ48) is chosen to fit; a collection even the smallest\n"
                 "cannot hold is refused with a message (default: no bound; docs/recall.md)"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni | avx512bf16 (the CPU kernel set of the recall model and\n"
                 "the verifier, docs/engine.md)"},
        {DONTO_OPT_CHOICE, "verify", 0, &verify, .choices = VERIFY_NAMES, .metavar = "W",
         .help = "check a sample of submitted vectors by re-embedding them with --model\n"
                 "(fp32): auto (default: when --model is given) | on | off (docs/trust.md)"},
        {DONTO_OPT_INT64, "verify-threads", 0, &verify_threads, .min = 1, .max = 64, .metavar = "N",
         .help = "threads that re-embed (default 1)"},
        {DONTO_OPT_INT64, "verify-nice", 0, &verify_nice, .min = 0, .max = 19, .metavar = "N",
         .help = "run the verifier threads N nice levels lower (default 0; on a machine\n"
                 "shared with workers, checks then lag and leases wait for them)"},
        {DONTO_OPT_INT64, "verify-queue", 0, &verify_queue, .min = 1, .max = 1 << 20, .metavar = "N",
         .help = "checks waiting at most; more are skipped and counted (default 4096)"},
        {DONTO_OPT_DOUBLE, "verify-min-cosine", 0, &min_cosine, .fmin = 0.5, .fmax = 1.0, .metavar = "X",
         .help = "a vector passes at this cosine to the coordinator's own or above\n"
                 "(default: measured, see docs/trust.md)"},
        {DONTO_OPT_INT64, "trust-after", 0, &trust_after, .min = 1, .max = 1000000, .metavar = "N",
         .help = "checks passed in a row before a token is sampled less (default 10)"},
        {DONTO_OPT_DOUBLE, "verify-floor", 0, &verify_floor, .fmin = 1e-6, .fmax = 1.0, .metavar = "P",
         .help = "the least share of a trusted token's items checked (default 0.015)"},
        {DONTO_OPT_INT64, "verify-seed", 0, &verify_seed, .min = 1, .max = INT64_MAX, .metavar = "N",
         .help = "seed the sampling (tests; default: random)"},
        {DONTO_OPT_DOUBLE, "canary-rate", 0, &canary_rate, .fmin = 0, .fmax = 1, .metavar = "P",
         .help = "share of a trusted token's lease answers that carry a canary item\n"
                 "(checked at no cost; an untrusted token's always do; default 0.1; 0: none)"},
        {DONTO_OPT_INT, "replicate", 0, &cfg.replicate, .min = 1, .max = 3, .metavar = "N",
         .help = "replication: an untrusted token's vectors are also embedded by other\n"
                 "tokens and accepted when N agree (2 or 3; default 1: off); without a\n"
                 "verifier, a trusted token's sampled vectors too (docs/trust.md)"},
        {DONTO_OPT_INT, "replica-cap", 0, &cfg.replica_cap, .min = 1, .max = 1 << 22, .metavar = "N",
         .help = "replicas waiting at once; past it items are checked by the verifier,\n"
                 "or not at all (default 8192)"},
        {DONTO_OPT_FLAG, "verified-only", 0, &cfg.verified_only,
         .help = "recall answers from verified vectors only (checked by the coordinator's\nengine or by a quorum of replicas)"},
        {DONTO_OPT_DOUBLE, "lease-rate", 0, &lease_rate, .fmin = 0, .fmax = 1e6, .metavar = "R",
         .help = "lease requests per second per token (default 50; 0: no limit)"},
        {DONTO_OPT_DOUBLE, "report-rate", 0, &report_rate, .fmin = 0, .fmax = 1e6, .metavar = "R",
         .help = "reports per minute per token (default 6; 0: no limit)"},
        {DONTO_OPT_INT64, "max-outstanding", 0, &max_outstanding_opt, .min = 0, .max = 1LL << 40, .metavar = "N",
         .help = "items one token may hold leased at once (default 4096; 0: no limit)"},
        {DONTO_OPT_FLAG, "verbose", 'v', &verbose, .help = "log every request"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed serve",
                               "usage: donto-embed serve --db URL [options]\n"
                               "\n"
                               "Serve the embedding work queue over HTTP (docs/protocol.md): workers lease\n"
                               "texts, submit vectors, release leases and report problems. With the sheaf\n"
                               "model registry in the database, POST /sheaf/infer serves each task's active\n"
                               "model to analyst and admin tokens (docs/sheaf-serving.md). Stops on\n"
                               "SIGTERM/SIGINT after the requests in flight finish.\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    cfg.max_body = (size_t)max_body;
    cfg.sheaf_max_nodes = (size_t)sheaf_nodes;
    cfg.sheaf_max_pairs = (size_t)sheaf_pairs;
    /* 0 in an option means "no limit"; in the config, 0 is the default. */
    if (canary_rate >= 0) cfg.canary_rate = canary_rate > 0 ? canary_rate : -1;
    if (lease_rate >= 0) cfg.lease_per_s = lease_rate > 0 ? lease_rate : -1;
    if (report_rate >= 0) cfg.report_per_min = report_rate > 0 ? report_rate : -1;
    if (max_outstanding_opt >= 0) cfg.max_outstanding = max_outstanding_opt > 0 ? max_outstanding_opt : -1;
    cfg.verify_threads = (int)verify_threads;
    cfg.verify_nice = (int)verify_nice;
    cfg.verify_queue = (int)verify_queue;
    cfg.verify_min_cosine = min_cosine;
    cfg.trust_after = (int)trust_after;
    cfg.verify_floor = verify_floor;
    cfg.verify_seed = (uint64_t)verify_seed;
    if (verify == VERIFY_ON && !model_dir)
        return donto_opt_usage_error(&cmd, "--verify on needs --model DIR (the engine that checks vectors)");
    if (verify != VERIFY_OFF && model_dir) cfg.verify_model_dir = model_dir;
    {
        donto_err ierr = {0};
        if (donto_isa_check((donto_isa)isa, &ierr))
            return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), ierr.msg);
        cfg.verify_isa = isa;
    }
    cfg.lease_ttl_ms = lease_ttl * 1000;
    cfg.conn_timeout_s = (unsigned)conn_timeout;
    cfg.max_connections = (unsigned)max_conn, cfg.per_ip_limit = (unsigned)per_ip;
    cfg.header_timeout_s = (unsigned)header_to, cfg.body_timeout_s = (unsigned)body_to;
    cfg.idle_timeout_s = (unsigned)idle_to;
    if (verbose) donto_log_set_level(DONTO_LOG_DEBUG);
    donto_err err = {0};
    if (!tls_cert != !tls_key) return donto_opt_usage_error(&cmd, "--tls-cert and --tls-key go together");
    /* The PEM text is read here (and kept by the coordinator), so a bad
     * path is a clear error before anything listens. */
    char *cert_pem = NULL, *key_pem = NULL;
    if (tls_cert) {
        size_t n;
        if (donto_read_file(tls_cert, &cert_pem, &n, &err) || donto_read_file(tls_key, &key_pem, &n, &err)) {
            fprintf(stderr, "donto-embed serve: TLS: %s\n", err.msg);
            free(cert_pem);
            return 1;
        }
        cfg.tls_cert_pem = cert_pem;
        cfg.tls_key_pem = key_pem;
    }
    serve_opts so = {migrate, (long long)drain, model_dir, model_name, index, (long long)ann_min, isa, index_memory_gb};
    int rc = serve_run(&cfg, &so);
    free(cert_pem);
    free(key_pem);
    return rc;
}

/* Migrate if asked, start, wait for SIGTERM/SIGINT, drain. */
static int serve_run(const donto_coord_config *cfg_, const serve_opts *o) {
    donto_coord_config cfg = *cfg_;
    donto_err err = {0};
    const char *model_dir = o->model_dir, *model_name = o->model_name, *index = o->index;
    long long ann_min = o->ann_min, drain = o->drain;
    if (o->migrate) {
        donto_store *s = NULL;
        if (donto_store_open(cfg.db_url, &s, &err)) {
            fprintf(stderr, "donto-embed serve: migrate: %s\n", err.msg);
            return 1;
        }
        int vrc = cli_set_vectors("serve", cfg.vectors, &s);
        if (vrc) return vrc;
        if (donto_substrate_migrate(s, &err)) {
            donto_store_close(s);
            fprintf(stderr, "donto-embed serve: migrate: %s\n", err.msg);
            return 1;
        }
        donto_store_close(s);
    } else if (!cfg.open_store) {
        /* Without --migrate the database must exist and be migrated: refuse
         * to start rather than answer every request with a store error. */
        donto_store *s = NULL;
        int vrc = cli_open_db_vectors("serve", cfg.db_url, CLI_DB_STORE, cfg.vectors, &s);
        if (vrc) return vrc;
        if (donto_substrate_schema_check(s, &err))
            DLOG_WARN("coord: the substrate's tables %s: recall shows item ids, not texts (donto-embed migrate)",
                      err.msg);
        donto_store_close(s);
    }
    /* Recall: the model that embeds queries, loaded once, shared by every
     * request (the encoder and the recall object are thread-safe). */
    donto_encoder *enc = NULL;
    donto_recall *rec = NULL;
    char *rname = NULL, *rprefix = NULL;
    /* Block the stop signals before any thread exists (the encoder's OpenMP
     * team, MHD's threads), so every thread inherits the mask and the
     * signals are taken by sigwait in serve_until_signal: no async signal
     * handler, nothing to make async-signal-safe. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    if (model_dir) {
        rname = donto_recall_model_name(model_dir, model_name);
        rprefix = index ? strdup(index) : donto_recall_default_prefix(cfg.db_url);
        if (cfg.verified_only && !index && rprefix) {
            /* Its own index files: one of verified vectors only must not
             * overwrite (and be rebuilt from) the one of all vectors. */
            size_t n = strlen(rprefix) + sizeof ".verified";
            char *v = malloc(n);
            if (v) snprintf(v, n, "%s.verified", rprefix);
            free(rprefix);
            rprefix = v;
        }
        donto_recall_opts ro = {.model_name = rname, .index_prefix = rprefix, .ann_min = (size_t)ann_min,
                                .index_memory_gb = o->index_memory_gb};
        donto_encoder_opts eo;
        donto_encoder_default_opts(&eo);
        eo.isa = (donto_isa)o->isa;
        if (donto_encoder_open(model_dir, &eo, &enc, &err) || donto_recall_open(enc, &ro, &rec, &err)) {
            fprintf(stderr, "donto-embed serve: --model %s: %s\n", model_dir, err.msg);
            donto_encoder_close(enc);
            free(rname), free(rprefix);
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            return 1;
        }
        cfg.recall = rec;
        cfg.recall_model = rname;
        donto_encoder_kernels kern;
        donto_encoder_kernels_get(enc, &kern);
        DLOG_INFO("coord: recall embeds queries with %s (%s), searches %s vectors", model_dir, kern.summary, rname);
    }
    int rc = serve_until_signal(&cfg, &stop, drain);
    donto_recall_close(rec);
    donto_encoder_close(enc);
    free(rname), free(rprefix);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Start, wait for one of the stop signals (already blocked by the caller),
 * drain, stop. */
static int serve_until_signal(const donto_coord_config *cfg, const sigset_t *stop, long long drain) {
    donto_err err = {0};
    signal(SIGPIPE, SIG_IGN);
    donto_coord *c;
    if (donto_coord_start(cfg, &c, &err)) {
        fprintf(stderr, "donto-embed serve: %s\n", err.msg);
        return 1;
    }
    int sig = 0;
    if (sigwait(stop, &sig) != 0) DLOG_ERROR("coord: sigwait failed; stopping");
    DLOG_INFO("coord: %s received, draining (up to %lld s)", sig == SIGINT ? "SIGINT" : "SIGTERM", drain);
    donto_coord_stop(c, (double)drain);
    return 0;
}

/* ---- migrate ------------------------------------------------------------------ */

static const char DB_HELP[] = "SQLite file path, or postgres://... (default " DONTO_STORE_DEFAULT_URL ")";

int donto_migrate_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL;
    int vectors = DONTO_VECTORS_OWN;
    const donto_opt opts[] = {{DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
                              CLI_VECTORS_OPT(&vectors), {0}};
    const donto_opt_cmd cmd = {"donto-embed migrate",
                               "usage: donto-embed migrate --db URL [--vectors own|donto]\n\n"
                               "Apply every database migration not yet applied (idempotent). With\n"
                               "--vectors donto, also make donto's table donto_vector when the database\n"
                               "has none (never altering one it has).\n\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    donto_err err = {0};
    donto_store *s = NULL;
    if (donto_store_open(db, &s, &err)) {
        fprintf(stderr, "donto-embed migrate: %s\n", err.msg);
        return 1;
    }
    int vrc = cli_set_vectors("migrate", vectors, &s);
    if (vrc) return vrc;
    if (donto_substrate_migrate(s, &err)) {
        fprintf(stderr, "donto-embed migrate: %s\n", err.msg);
        donto_store_close(s);
        return 1;
    }
    donto_store_close(s);
    fprintf(stderr, "donto-embed migrate: %s is up to date\n", db);
    return 0;
}

/* ---- status -------------------------------------------------------------------- */

/* The figures of /embed/stats without a server or a token: for operators
 * on the database host and for scripts (make run's progress bar). */
int donto_status_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL;
    int json = 0, vectors = DONTO_VECTORS_OWN;
    const donto_opt opts[] = {{DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
                              {DONTO_OPT_FLAG, "json", 0, &json, .help = "one JSON object, as /embed/stats"},
                              CLI_VECTORS_OPT(&vectors), {0}};
    const donto_opt_cmd cmd = {"donto-embed status",
                               "usage: donto-embed status --db URL [--json]\n\n"
                               "Items per target (embedded, pending, leased, total) and vectors stored in the\n"
                               "last minute, read from the database.\n\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    donto_err err = {0};
    donto_store *s = NULL;
    donto_target_stats st[DONTO_TARGET_N];
    int64_t now = donto_unix_ms(), per_min = 0; /* leases expire in Unix ms */
    int vrc = cli_open_db_vectors("status", db, CLI_DB_STORE, vectors, &s);
    if (vrc) return vrc;
    if (donto_store_stats(s, now, st, &err) || donto_store_embedded_since(s, now - 60000, &per_min, &err)) {
        fprintf(stderr, "donto-embed status: %s\n", err.msg);
        donto_store_close(s);
        return 1;
    }
    donto_store_close(s);
    if (json) {
        donto_stats_extra x = {.have_rate = 1, .per_minute = per_min};
        char *j = donto_proto_stats_response(st, &x);
        if (!j) {
            fprintf(stderr, "donto-embed status: out of memory\n");
            return 1;
        }
        printf("%s\n", j);
        free(j);
        return 0;
    }
    printf("%-13s %12s %12s %12s %12s %8s\n", "target", "embedded", "pending", "leased", "total", "done");
    for (int t = 0; t < DONTO_TARGET_N; t++)
        printf("%-13s %12lld %12lld %12lld %12lld %7.1f%%\n", donto_target_name((donto_target)t),
               (long long)st[t].embedded, (long long)st[t].pending, (long long)st[t].leased, (long long)st[t].total,
               st[t].total ? 100.0 * (double)st[t].embedded / (double)st[t].total : 0.0);
    printf("vectors stored in the last minute: %lld\n", (long long)per_min);
    return 0;
}

/* ---- token --------------------------------------------------------------------- */

/* 32 random bytes from the kernel, as 64 hex digits. */
static int new_token(char out[65]) {
    unsigned char b[32];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof b; i++) out[2 * i] = hex[b[i] >> 4], out[2 * i + 1] = hex[b[i] & 15];
    out[64] = 0;
    OPENSSL_cleanse(b, sizeof b);
    return 0;
}

static const char *const ROLES[] = {"contributor", "reader", "analyst", "admin", NULL};
static const int ROLE_VALUES[] = {DONTO_ROLE_CONTRIBUTOR, DONTO_ROLE_READER, DONTO_ROLE_ANALYST, DONTO_ROLE_ADMIN};

int donto_token_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL;
    int role_i = DONTO_ROLE_CONTRIBUTOR, json = 0;
    const donto_opt opts[] = {{DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL", .help = DB_HELP},
                              {DONTO_OPT_FLAG, "json", 0, &json, .help = "list: one JSON object per token"},
                              {DONTO_OPT_CHOICE, "role", 0, &role_i, .choices = ROLES, .values = ROLE_VALUES,
                               .help = "what `add` grants (default contributor)"},
                              {0}};
    const donto_opt_cmd cmd = {"donto-embed token",
                               "usage: donto-embed token add NAME [--role contributor|reader|analyst|admin] --db URL\n"
                               "       donto-embed token list [--json] --db URL\n"
                               "       donto-embed token revoke NAME --db URL\n"
                               "       donto-embed token unsuspend NAME --db URL\n"
                               "\n"
                               "Bearer tokens for the coordinator. `add` prints the new token once, on\n"
                               "stdout; the database keeps only its SHA-256. Contributors may lease,\n"
                               "submit, release and report (as workers named within their token);\n"
                               "readers may also query recall; analysts may query the sheaf models\n"
                               "(/sheaf/ routes) and nothing else; admins may also read /stats and /metrics.\n"
                               "A token whose vector failed the coordinator's check is suspended (its\n"
                               "unverified vectors withdrawn); `unsuspend` lets it work again, as an\n"
                               "untrusted token (docs/trust.md). `list` shows each token's trust record.\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    /* The operands: ACTION [NAME]. */
    const char *action = npos >= 1 ? argv[1] : NULL;
    const char *name = npos >= 2 ? argv[2] : NULL;
    int want_name =
        action && (!strcmp(action, "add") || !strcmp(action, "revoke") || !strcmp(action, "unsuspend"));
    if (!action || (strcmp(action, "list") && !want_name))
        return donto_opt_usage_error(&cmd, "the action is add, list, revoke or unsuspend");
    if (want_name && !name) return donto_opt_usage_error(&cmd, "%s needs a NAME", action);
    if (npos != (want_name ? 2 : 1)) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[npos]);
    donto_role role = (donto_role)role_i;
    const char *role_s = donto_role_name(role);
    if (name && (!*name || strlen(name) > DONTO_TOKEN_NAME_MAX)) {
        fprintf(stderr, "donto-embed token: NAME must be 1..%d characters\n", DONTO_TOKEN_NAME_MAX);
        return 2;
    }
    /* A worker is named "<token>/<worker id>" in the store (docs/trust.md). */
    if (name && !strcmp(action, "add") && strchr(name, DONTO_WORKER_SEP)) {
        fprintf(stderr, "donto-embed token: NAME may not contain '%c'\n", DONTO_WORKER_SEP);
        return 2;
    }
    donto_err err = {0};
    donto_store *s = NULL;
    if (cli_open_db("token", db, CLI_DB_STORE, &s)) return 1;
    int rc = 1;
    if (!strcmp(action, "add")) {
        char tok[65];
        uint8_t hash[32];
        unsigned int hl = 0;
        if (new_token(tok)) {
            fprintf(stderr, "donto-embed token: getrandom: %s\n", strerror(errno));
        } else if (EVP_Digest(tok, 64, hash, &hl, EVP_sha256(), NULL) != 1 || hl != 32) {
            fprintf(stderr, "donto-embed token: SHA-256 failed\n");
        } else if (donto_store_token_add(s, name, role, hash, donto_unix_ms(), &err)) {
            fprintf(stderr, "donto-embed token: add %s: %s\n", name, err.msg);
        } else {
            printf("%s\n", tok);
            fprintf(stderr, "donto-embed token: added %s (%s); the token above is shown only once\n", name, role_s);
            rc = 0;
        }
        OPENSSL_cleanse(tok, sizeof tok);
    } else if (!strcmp(action, "revoke")) {
        int revoked = 0;
        if (donto_store_token_revoke(s, name, &revoked, &err)) {
            fprintf(stderr, "donto-embed token: revoke %s: %s\n", name, err.msg);
        } else if (!revoked) {
            fprintf(stderr, "donto-embed token: no active token named %s\n", name);
        } else {
            fprintf(stderr, "donto-embed token: revoked %s\n", name);
            rc = 0;
        }
    } else if (!strcmp(action, "unsuspend")) {
        int done = 0;
        if (donto_store_unsuspend(s, name, &done, &err)) {
            fprintf(stderr, "donto-embed token: unsuspend %s: %s\n", name, err.msg);
        } else if (!done) {
            fprintf(stderr, "donto-embed token: no suspended token named %s\n", name);
        } else {
            fprintf(stderr, "donto-embed token: %s may work again, untrusted (checked heavily at first)\n", name);
            rc = 0;
        }
    } else {
        donto_token_info *t = NULL;
        size_t n = 0;
        if (donto_store_token_list(s, &t, &n, &err)) {
            fprintf(stderr, "donto-embed token: list: %s\n", err.msg);
        } else {
            if (!json && n)
                printf("%-24s %-11s %-20s %-9s %7s %7s %6s %9s\n", "NAME", "ROLE", "CREATED", "STATE", "STREAK",
                       "CHECKS", "FAILED", "WITHDRAWN");
            for (size_t i = 0; i < n; i++) {
                time_t sec = (time_t)(t[i].created / 1000);
                struct tm tm;
                char when[32] = "?";
                if (gmtime_r(&sec, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
                const donto_trust *tr = &t[i].trust;
                const char *state = t[i].revoked ? "revoked" : tr->suspended ? "suspended" : "active";
                if (json) {
                    char *line = donto_proto_token_json(&t[i]);
                    if (line) printf("%s\n", line);
                    free(line);
                    continue;
                }
                printf("%-24s %-11s %-20s %-9s %7lld %7lld %6lld %9lld%s%s\n", t[i].name, donto_role_name(t[i].role),
                       when, state, (long long)tr->streak, (long long)tr->checks, (long long)tr->failed,
                       (long long)tr->withdrawn, tr->suspended ? "  " : "", tr->suspended ? tr->reason : "");
            }
            donto_token_list_free(t, n);
            rc = 0;
        }
    }
    donto_store_close(s);
    return rc;
}
