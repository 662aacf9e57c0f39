/* `donto-embed work`: configuration (env, then flags) for the embedding
 * worker in src/worker/ (include/donto/worker.h). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/models.h"
#include "donto/store.h"
#include "donto/worker.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed work --model DIR [options]\n"
            "\n"
            "Lease texts from a coordinator, embed them locally, submit the vectors.\n"
            "Flags override the environment (in brackets).\n"
            "  --url URL            coordinator base URL incl. /embed [DONTO_EMBED_URL]\n"
            "  --token TOKEN        bearer token [DONTO_EMBED_TOKEN] (prefer --token-file)\n"
            "  --token-file FILE    read the token from FILE (first line)\n"
            "  --cacert FILE        trust this PEM CA bundle for an https:// URL [DONTO_EMBED_CACERT]\n"
            "  --worker-id ID       [EMBED_WORKER_ID] (default worker-<host>-<pid>)\n"
            "  -n N                 items per lease (more than 1024 asks 1024) [EMBED_N] (default 256)\n"
            "  --batch N            texts per encode call [EMBED_BATCH] (default: the lease size)\n"
            "  --target T           claim|predicate|entity|memory_chunk [EMBED_TARGET] (default any)\n"
            "  --model DIR          the local model directory (required)\n"
            "  --model-name NAME    the model name leased items must carry\n"
            "                       (default: DIR/model_name.txt if present, else " DONTO_DEFAULT_MODEL ")\n"
            "  --threads N          encoder threads (default all CPUs)\n"
            "  --precision P        fp32 (default on the CPU) | int16 | bf16 (default on cuda)\n"
            "  --device D           cpu (default) | cuda [EMBED_CUDA=1 means cuda]\n"
            "  --gpu N|all          CUDA device ordinal [EMBED_GPU] (default 0); all: one engine per GPU\n"
            "  --idle-sleep SECS    after an empty lease [EMBED_IDLE_SLEEP] (default 5)\n"
            "  --max-items N        stop after N items\n"
            "  --exit-when-idle     exit 0 when a lease comes back empty\n"
            "  --stop-deadline SECS at SIGINT/SIGTERM, time to submit before releasing (default 30)\n"
            "  --timeout SECS       per-request timeout (default 120; connect 10)\n"
            "--device cuda / EMBED_CUDA=1 needs a build with -DDONTO_CUDA=ON (else refused, exit 2).\n"
            "SIGINT/SIGTERM: stop leasing, finish and submit, release the rest, exit 0; a second\n"
            "signal exits at once.\n");
}

static volatile sig_atomic_t g_signals;

static void on_signal(int sig) {
    (void)sig;
    if (g_signals++) _exit(130);
    donto_worker_stop();
}

static int parse_int(const char *s, const char *what, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || !*s || *end || v < lo || v > hi) {
        fprintf(stderr, "donto-embed work: %s must be an integer in %ld..%ld (got '%s')\n", what, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_secs(const char *s, const char *what, double *out) {
    char *end;
    double v = strtod(s ? s : "", &end);
    if (!s || !*s || *end || !(v >= 0) || v > 86400) {
        fprintf(stderr, "donto-embed work: %s must be seconds in 0..86400 (got '%s')\n", what, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
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

int donto_work_cmd(int argc, char **argv) {
    donto_worker_config c;
    donto_worker_default_config(&c);
    const char *model_dir = NULL, *model_name = NULL, *token_file = NULL, *prec = NULL, *target = NULL;
    const char *device = NULL, *gpu_s = getenv("EMBED_GPU");
    const char *token = getenv("DONTO_EMBED_TOKEN");
    c.url = getenv("DONTO_EMBED_URL");
    c.ca_file = getenv("DONTO_EMBED_CACERT") && *getenv("DONTO_EMBED_CACERT") ? getenv("DONTO_EMBED_CACERT") : NULL;
    c.worker_id = getenv("EMBED_WORKER_ID");
    target = getenv("EMBED_TARGET");
    long v;
    if (getenv("EMBED_N") && *getenv("EMBED_N")) {
        if (parse_int(getenv("EMBED_N"), "EMBED_N", 1, 1 << 20, &v)) return 2;
        c.n = v > 1024 ? 1024 : (int)v; /* the coordinator caps a lease at 1024 */
    }
    if (getenv("EMBED_BATCH") && *getenv("EMBED_BATCH")) {
        if (parse_int(getenv("EMBED_BATCH"), "EMBED_BATCH", 1, 1 << 20, &v)) return 2;
        c.batch = (int)v;
    }
    if (getenv("EMBED_IDLE_SLEEP") && *getenv("EMBED_IDLE_SLEEP") &&
        parse_secs(getenv("EMBED_IDLE_SLEEP"), "EMBED_IDLE_SLEEP", &c.idle_sleep_s))
        return 2;
    int threads = 0;
    enum { O_URL = 256, O_TOKEN, O_TOKEN_FILE, O_WID, O_BATCH, O_TARGET, O_MODEL, O_MODEL_NAME, O_THREADS,
           O_PREC, O_IDLE, O_MAX, O_EXIT_IDLE, O_STOP, O_TIMEOUT, O_CACERT, O_DEVICE, O_GPU };
    static const struct option opts[] = {
        {"url", required_argument, 0, O_URL},         {"token", required_argument, 0, O_TOKEN},
        {"token-file", required_argument, 0, O_TOKEN_FILE}, {"worker-id", required_argument, 0, O_WID},
        {"batch", required_argument, 0, O_BATCH},     {"target", required_argument, 0, O_TARGET},
        {"model", required_argument, 0, O_MODEL},     {"model-name", required_argument, 0, O_MODEL_NAME},
        {"threads", required_argument, 0, O_THREADS}, {"precision", required_argument, 0, O_PREC},
        {"idle-sleep", required_argument, 0, O_IDLE}, {"max-items", required_argument, 0, O_MAX},
        {"exit-when-idle", no_argument, 0, O_EXIT_IDLE}, {"stop-deadline", required_argument, 0, O_STOP},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"help", no_argument, 0, 'h'},
        {"cacert", required_argument, 0, O_CACERT},
        {"device", required_argument, 0, O_DEVICE},   {"gpu", required_argument, 0, O_GPU},
        {0, 0, 0, 0}};
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (o) {
        case O_URL: c.url = optarg; break;
        case O_TOKEN: token = optarg; break;
        case O_TOKEN_FILE: token_file = optarg; break;
        case O_CACERT: c.ca_file = optarg; break;
        case O_WID: c.worker_id = optarg; break;
        case 'n':
            if (parse_int(optarg, "-n", 1, 1 << 20, &v)) return 2;
            c.n = v > 1024 ? 1024 : (int)v;
            break;
        case O_BATCH:
            if (parse_int(optarg, "--batch", 1, 1 << 20, &v)) return 2;
            c.batch = (int)v;
            break;
        case O_TARGET: target = optarg; break;
        case O_MODEL: model_dir = optarg; break;
        case O_MODEL_NAME: model_name = optarg; break;
        case O_THREADS:
            if (parse_int(optarg, "--threads", 0, 4096, &v)) return 2;
            threads = (int)v;
            break;
        case O_PREC: prec = optarg; break;
        case O_DEVICE: device = optarg; break;
        case O_GPU: gpu_s = optarg; break;
        case O_IDLE:
            if (parse_secs(optarg, "--idle-sleep", &c.idle_sleep_s)) return 2;
            break;
        case O_MAX:
            if (parse_int(optarg, "--max-items", 0, 1L << 40, &v)) return 2;
            c.max_items = v;
            break;
        case O_EXIT_IDLE: c.exit_when_idle = 1; break;
        case O_STOP:
            if (parse_secs(optarg, "--stop-deadline", &c.stop_deadline_s)) return 2;
            break;
        case O_TIMEOUT:
            if (parse_secs(optarg, "--timeout", &c.request_timeout_s) || c.request_timeout_s < 1) return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    /* EMBED_CUDA=1 (the Python worker's switch) means --device cuda; an
     * explicit --device wins. */
    const char *cuda = getenv("EMBED_CUDA");
    if (!device && cuda && *cuda && strcmp(cuda, "0")) device = "cuda";
    int dev = donto_device_parse(device ? device : "cpu");
    if (dev < 0) {
        fprintf(stderr, "donto-embed work: unknown --device '%s' (cpu|cuda)\n", device);
        return 2;
    }
    if (dev == DONTO_DEVICE_CUDA && !donto_cuda_built()) {
        fprintf(stderr, "donto-embed work: %s: this donto-accel was built without CUDA (rebuild with "
                        "cmake -DDONTO_CUDA=ON, e.g. `make cuda-build`), or unset EMBED_CUDA to embed on the CPU\n",
                device && (!cuda || strcmp(device, "cuda")) ? "--device cuda" : "EMBED_CUDA");
        return 2;
    }
    long gpu = 0;
    if (gpu_s && !strcmp(gpu_s, "all")) gpu = -1;
    else if (gpu_s && *gpu_s && parse_int(gpu_s, "--gpu/EMBED_GPU", 0, 1024, &gpu)) return 2;
    if (!prec) prec = dev == DONTO_DEVICE_CUDA ? "bf16" : "fp32";
    if (optind < argc) {
        fprintf(stderr, "donto-embed work: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
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
    c.target = -1;
    if (target && *target && strcmp(target, "any")) {
        c.target = donto_target_parse(target);
        if (c.target < 0) {
            fprintf(stderr, "donto-embed work: unknown target '%s' (claim|predicate|entity|memory_chunk)\n", target);
            goto out;
        }
    }
    int p = donto_precision_parse(prec);
    if (p < 0) {
        fprintf(stderr, "donto-embed work: unknown --precision '%s' (fp32|int16|bf16)\n", prec);
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
    eo.gpu = (int)gpu;
    eo.precision = (donto_precision)p;
    donto_err err = {{0}};
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
