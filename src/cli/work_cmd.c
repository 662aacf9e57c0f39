/* `donto-embed work`: configuration (env, then flags) for the embedding
 * worker in src/worker/ (include/donto/worker.h). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/models.h"
#include "donto/opt.h"
#include "donto/store.h"
#include "donto/worker.h"

static volatile sig_atomic_t g_signals;

static void on_signal(int sig) {
    (void)sig;
    if (g_signals++) _exit(130);
    donto_worker_stop();
}

/* First line of a small file, whitespace trimmed; NULL when unreadable. */
static char *read_line(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char b[4096];
    char *r = fgets(b, sizeof b, f);
    fclose(f);
    if (!r) return NULL;
    size_t n = strlen(b);
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ' || b[n - 1] == '\t')) b[--n] = 0;
    return n ? strdup(b) : NULL;
}

static const char *const TARGETS[] = {"any", "claim", "predicate", "entity", "memory_chunk", NULL};
static const int TARGET_VALUES[] = {-1, DONTO_TARGET_CLAIM, DONTO_TARGET_PREDICATE, DONTO_TARGET_ENTITY,
                                    DONTO_TARGET_MEMORY_CHUNK};

int donto_work_cmd(int argc, char **argv) {
    donto_worker_config c;
    donto_worker_default_config(&c);
    const char *model_dir = NULL, *model_name = NULL, *token_file = NULL, *token = NULL;
    int threads = 0, n = c.n, gpu = 0, prec = -1, dev = -1, isa = DONTO_ISA_AUTO;
    c.target = -1;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "url", 0, &c.url, .metavar = "URL", .env = "DONTO_EMBED_URL",
         .help = "coordinator base URL incl. /embed"},
        {DONTO_OPT_STRING, "token", 0, &token, .metavar = "TOKEN", .env = "DONTO_EMBED_TOKEN",
         .help = "bearer token (prefer --token-file)"},
        {DONTO_OPT_STRING, "token-file", 0, &token_file, .metavar = "FILE", .help = "read the token from FILE (first line)"},
        {DONTO_OPT_STRING, "cacert", 0, &c.ca_file, .metavar = "FILE", .env = "DONTO_EMBED_CACERT",
         .help = "trust this PEM CA bundle for an https:// URL"},
        {DONTO_OPT_STRING, "worker-id", 0, &c.worker_id, .metavar = "ID", .env = "EMBED_WORKER_ID",
         .help = "(default worker-<host>-<pid>)"},
        {DONTO_OPT_INT, NULL, 'n', &n, .min = 1, .max = 1 << 20, .metavar = "N", .env = "EMBED_N",
         .help = "items per lease (default 256; more than 1024 asks 1024)"},
        {DONTO_OPT_INT, "batch", 0, &c.batch, .min = 1, .max = 1 << 20, .metavar = "N", .env = "EMBED_BATCH",
         .help = "texts per encode call (default: the lease size)"},
        {DONTO_OPT_CHOICE, "target", 0, &c.target, .choices = TARGETS, .values = TARGET_VALUES, .metavar = "T",
         .env = "EMBED_TARGET", .help = "claim|predicate|entity|memory_chunk (default any)"},
        {DONTO_OPT_STRING, "model", 0, &model_dir, .metavar = "DIR", .help = "the local model directory (required)"},
        {DONTO_OPT_STRING, "model-name", 0, &model_name, .metavar = "NAME",
         .help = "the model name leased items must carry\n"
                 "(default: DIR/model_name.txt if present, else " DONTO_DEFAULT_MODEL ")"},
        {DONTO_OPT_INT, "threads", 0, &threads, .min = 0, .max = 4096, .metavar = "N",
         .help = "encoder threads (default all CPUs)"},
        {DONTO_OPT_CHOICE, "precision", 0, &prec, .choices = donto_precision_names, .metavar = "P",
         .help = "int16 (default on a CPU with AVX2) | fp32 (the reference; default without\n"
                 "AVX2) | bf16 (default on cuda) | int8 (experimental)"},
        {DONTO_OPT_CHOICE, "device", 0, &dev, .choices = donto_device_names, .metavar = "D",
         .help = "cpu (default) | cuda; EMBED_CUDA=1 means cuda"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto", .env = "EMBED_ISA",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni | avx512bf16 (the CPU kernel set, docs/engine.md)"},
        {DONTO_OPT_INT, "gpu", 0, &gpu, .min = 0, .max = 1024, .word = "all", .word_value = -1, .metavar = "N|all",
         .env = "EMBED_GPU", .help = "CUDA device ordinal (default 0); all: one engine per GPU"},
        {DONTO_OPT_DOUBLE, "idle-sleep", 0, &c.idle_sleep_s, .fmin = 0, .fmax = 86400, .metavar = "SECS",
         .env = "EMBED_IDLE_SLEEP", .help = "after an empty lease (default 5)"},
        {DONTO_OPT_INT64, "max-items", 0, &c.max_items, .min = 0, .max = 1LL << 40, .metavar = "N",
         .help = "stop after N items"},
        {DONTO_OPT_FLAG, "exit-when-idle", 0, &c.exit_when_idle, .help = "exit 0 when a lease comes back empty"},
        {DONTO_OPT_DOUBLE, "stop-deadline", 0, &c.stop_deadline_s, .fmin = 0, .fmax = 86400, .metavar = "SECS",
         .help = "at SIGINT/SIGTERM, time to submit before releasing (default 30)"},
        {DONTO_OPT_DOUBLE, "timeout", 0, &c.request_timeout_s, .fmin = 1, .fmax = 86400, .metavar = "SECS",
         .help = "per-request timeout (default 120; connect 10)"},
        {DONTO_OPT_DOUBLE, "start-retry", 0, &c.start_retry_s, .fmin = 0, .fmax = 1e7, .metavar = "SECS",
         .help = "until the coordinator first answers, retry a refused or timed-out\n"
                 "connection this long, then exit 1 (default 60; 0: forever)"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed work",
                               "usage: donto-embed work --model DIR [options]\n"
                               "\n"
                               "Lease texts from a coordinator, embed them locally, submit the vectors.\n"
                               "Flags override the environment (in brackets).\n"
                               "\n",
                               opts,
                               "--device cuda / EMBED_CUDA=1 needs a build with -DDONTO_CUDA=ON (else refused, exit 2).\n"
                               "Leases held are extended (POST /extend) at a third of their TTL; items that come back\n"
                               "lease_expired halve the lease size (doubled back after batches in time). 429 waits\n"
                               "Retry-After; a refused or suspended token (401/403) exits 1 with the reason, and so\n"
                               "do setup errors before the coordinator first answers: a host that does not resolve,\n"
                               "a bad URL or an untrusted certificate at once, a refused connection after\n"
                               "--start-retry. Every failed request is logged with curl's words or the HTTP status\n"
                               "and the coordinator's error.\n"
                               "SIGINT/SIGTERM: stop leasing, finish and submit, release the rest, exit 0; a second\n"
                               "signal exits at once.\n"};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    c.n = n > 1024 ? 1024 : n; /* the coordinator caps a lease at 1024 */
    /* EMBED_CUDA=1 (the Python worker's switch) means --device cuda; an
     * explicit --device wins. */
    const char *cuda = getenv("EMBED_CUDA");
    int from_env = dev < 0 && cuda && *cuda && strcmp(cuda, "0");
    if (dev < 0) dev = from_env ? DONTO_DEVICE_CUDA : DONTO_DEVICE_CPU;
    if (dev == DONTO_DEVICE_CUDA && !donto_cuda_built()) {
        fprintf(stderr, "donto-embed work: %s: this donto-accel was built without CUDA (rebuild with "
                        "cmake -DDONTO_CUDA=ON, e.g. `make cuda-build`), or unset EMBED_CUDA to embed on the CPU\n",
                from_env ? "EMBED_CUDA" : "--device cuda");
        return 2;
    }
    if (npos) return donto_opt_usage_error(&cmd, "unexpected argument '%s'", argv[1]);
    {
        donto_err ierr = {0};
        if (donto_isa_check((donto_isa)isa, &ierr))
            return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), ierr.msg);
    }
    if (prec < 0) prec = donto_precision_default((donto_device)dev, (donto_isa)isa);
    char *tok_buf = NULL, *name_buf = NULL, wid_buf[300];
    if (token_file) {
        tok_buf = read_line(token_file);
        if (!tok_buf) {
            fprintf(stderr, "donto-embed work: cannot read a token from %s\n", token_file);
            return 2;
        }
        token = tok_buf;
    }
    int rc = 2;
    donto_encoder *enc = NULL;
    if (!c.url || !*c.url) {
        fprintf(stderr, "donto-embed work: no coordinator URL (--url or DONTO_EMBED_URL)\n");
        goto out;
    }
    if (!token || !*token) {
        fprintf(stderr, "donto-embed work: no token (--token-file, --token or DONTO_EMBED_TOKEN)\n");
        goto out;
    }
    if (!model_dir) {
        fprintf(stderr, "donto-embed work: --model DIR is required\n");
        goto out;
    }
    if (!model_name) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model_name.txt", model_dir);
        name_buf = read_line(path);
        model_name = name_buf ? name_buf : DONTO_DEFAULT_MODEL;
    }
    c.model_name = model_name;
    if (!c.worker_id || !*c.worker_id) {
        char host[256] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        snprintf(wid_buf, sizeof wid_buf, "worker-%s-%ld", host, (long)getpid());
        c.worker_id = wid_buf;
    }
    size_t ul = strlen(c.url);
    char *url = strdup(c.url);
    while (ul > 1 && url[ul - 1] == '/') url[--ul] = 0; /* "…/embed/" -> "…/embed" */
    c.url = url;
    c.token = token;
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = threads;
    eo.device = (donto_device)dev;
    eo.gpu = gpu;
    eo.precision = (donto_precision)prec;
    eo.isa = (donto_isa)isa;
    donto_err err = {0};
    rc = 1;
    if (donto_encoder_open(model_dir, &eo, &enc, &err)) {
        fprintf(stderr, "donto-embed work: %s\n", err.msg);
        goto out_url;
    }
    int want = donto_model_dims(model_name);
    if (want && want != donto_encoder_dim(enc)) {
        fprintf(stderr, "donto-embed work: %s has dimension %d but the model in %s has %d\n", model_name, want,
                model_dir, donto_encoder_dim(enc));
        goto out_url;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (donto_worker_run(&c, enc, &err)) {
        fprintf(stderr, "donto-embed work: %s\n", err.msg);
        rc = 1;
    } else {
        rc = 0;
    }
    curl_global_cleanup();
out_url:
    free(url);
out:
    donto_encoder_close(enc);
    free(tok_buf);
    free(name_buf);
    return rc;
}
