/* trust_attacker: one dishonest contributor, for tests/test_trust_e2e.c and
 * bench/trust (issue 15). It speaks the current protocol like `donto-embed
 * work` (lease n items, submit base64 float32 vectors with lease_id and
 * model; bodies built and answers parsed by the wire module's client side)
 * and lies about the vectors:
 *
 *   random      a random unit vector per item (Gaussian, normalised)
 *   shift       the honest vector of the next item in the batch (the last
 *               item gets the first's; a batch of one gets the last vector of
 *               the batch before)
 *   othermodel  another model's vector: the same all-MiniLM-L6-v2 weights with
 *               CLS pooling instead of the mean pooling its 1_Pooling config
 *               names (a worker configured for the wrong sentence model: same
 *               shape, same tokenizer, unit norm, plausible, and wrong; the
 *               test prints the cosines it reaches)
 *   noise       the honest vector plus Gaussian noise of norm 0.2051
 *               (= sqrt(1/0.98^2 - 1): cosine ~0.98 with the honest one),
 *               renormalised
 *   turncoat    honest (fp32) until --honest items were accepted, then random
 *   spoof       before each submit of its own, submits random vectors for
 *               items leased right now to the workers of the tokens named by
 *               --victims, naming each victim's worker id (and, for every
 *               other item, its lease_id): an attacker that knows exactly who
 *               holds what (it reads the queue table with --db, more than a
 *               real one could), which identity must refuse; then random
 *               vectors for its own leased items, which verification must
 *               catch. Waits up to 120 s for a victim lease before its first
 *               own submit, so at least one spoof round is always made.
 *
 * Honest vectors come from this process's own fp32 encoder (--model, 1
 * thread by default). A 403 (suspended) stops it; a 429 waits Retry-After;
 * other failures retry after a short pause; every wait is bounded by
 * --deadline. SIGTERM/SIGINT: stop after the request in hand.
 *
 * --status FILE gets one line of key=value counters after every request
 * (written whole: tmp + rename); --accepted FILE the item id of every bad
 * item the coordinator accepted, one a line. Exit 0 (suspended, stopped or
 * deadline: read the status), 2 on a usage error, 1 on a setup failure. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "donto/encoder.h"
#include "donto/models.h"
#include "donto/store.h"
#include "donto/util.h"
#include "donto/wire.h"
#include "proc.h"
#include "sqlq.h"

enum { M_RANDOM, M_SHIFT, M_OTHERMODEL, M_NOISE, M_TURNCOAT, M_SPOOF };
static const char *const k_modes[] = {"random", "shift", "othermodel", "noise", "turncoat", "spoof", NULL};

#define NOISE_NORM 0.2051 /* sqrt(1/0.98^2 - 1) */

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig, g_stop = 1; }

/* ---- options and state ---------------------------------------------------- */

static const char *o_url, *o_model, *o_model_name, *o_worker = "attacker", *o_status, *o_accepted, *o_db,
                  *o_victims;
static char o_token[128];
static int o_mode = -1, o_n = 64, o_threads = 1;
static long o_honest = 2000;
static double o_deadline = 600;
static uint64_t o_seed = 1;

static struct {
    long leases, leased, submits, http_429, http_err;
    long bad_sent, bad_accepted, bad_rejected;
    long honest_sent, honest_accepted;
    long spoof_rounds, spoof_sent, spoof_accepted, spoof_rejected, spoof_not_leased;
    double cos_min, cos_max, cos_sum;
    long cos_n;
    const char *state; /* running | suspended | stopped | deadline */
    double t0, t_first_bad, t_end;
    long long first_bad_ms; /* Unix ms of the first bad vector sent (the coordinator's clock is this machine's) */
} S = {.cos_min = 2, .cos_max = -2, .state = "running"};

static void write_status(void) {
    if (!o_status) return;
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", o_status);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    double now = donto_now();
    fprintf(f,
            "mode=%s state=%s leases=%ld leased=%ld submits=%ld http_429=%ld http_err=%ld bad_sent=%ld "
            "bad_accepted=%ld bad_rejected=%ld honest_sent=%ld honest_accepted=%ld spoof_rounds=%ld spoof_sent=%ld "
            "spoof_accepted=%ld spoof_rejected=%ld spoof_not_leased=%ld cos_n=%ld cos_min=%.5f cos_mean=%.5f "
            "cos_max=%.5f first_bad_s=%.2f first_bad_ms=%lld elapsed_s=%.2f\n",
            k_modes[o_mode], S.state, S.leases, S.leased, S.submits, S.http_429, S.http_err, S.bad_sent, S.bad_accepted,
            S.bad_rejected, S.honest_sent, S.honest_accepted, S.spoof_rounds, S.spoof_sent, S.spoof_accepted,
            S.spoof_rejected, S.spoof_not_leased, S.cos_n, S.cos_n ? S.cos_min : 0.0,
            S.cos_n ? S.cos_sum / (double)S.cos_n : 0.0, S.cos_n ? S.cos_max : 0.0,
            S.t_first_bad > 0 ? S.t_first_bad - S.t0 : -1.0, S.first_bad_ms, (S.t_end > 0 ? S.t_end : now) - S.t0);
    fclose(f);
    rename(tmp, o_status);
}

/* ---- randomness ----------------------------------------------------------- */

static uint64_t g_rng;
static uint64_t splitmix(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(void) { return ((double)(splitmix() >> 11) + 0.5) * 0x1.0p-53; }
static double gauss(void) { return sqrt(-2 * log(uniform01())) * cos(2 * M_PI * uniform01()); }

static void normalise(float *v, int d) {
    double ss = 0;
    for (int k = 0; k < d; k++) ss += (double)v[k] * v[k];
    double inv = 1 / sqrt(ss);
    for (int k = 0; k < d; k++) v[k] = (float)(v[k] * inv);
}

static void random_unit(float *v, int d) {
    for (int k = 0; k < d; k++) v[k] = (float)gauss();
    normalise(v, d);
}

static double cosine(const float *a, const float *b, int d) {
    double dot = 0, na = 0, nb = 0;
    for (int k = 0; k < d; k++) dot += (double)a[k] * b[k], na += (double)a[k] * a[k], nb += (double)b[k] * b[k];
    return dot / sqrt(na * nb);
}

/* ---- HTTP ----------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    sbuf *b = u;
    size_t n = sz * nm;
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

static long g_retry_after;
static size_t on_header(char *d, size_t sz, size_t nm, void *u) {
    (void)u;
    size_t n = sz * nm;
    if (n > 12 && !strncasecmp(d, "Retry-After:", 12)) g_retry_after = atol(d + 12);
    return n;
}

static CURL *g_curl;
static sbuf g_resp;

/* POST path with body; the status (0: no answer). The answer is in g_resp. */
static long post(const char *path, const char *body) {
    char url[1024];
    snprintf(url, sizeof url, "%s/%s", o_url, path);
    g_resp.n = 0;
    if (g_resp.p) g_resp.p[0] = 0;
    g_retry_after = 0;
    curl_easy_setopt(g_curl, CURLOPT_URL, url);
    curl_easy_setopt(g_curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(g_curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    long st = 0;
    if (curl_easy_perform(g_curl) == CURLE_OK) curl_easy_getinfo(g_curl, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

static int past_deadline(void) { return donto_now() - S.t0 > o_deadline; }

/* Sleep s seconds in small steps (a signal or the deadline cut it short). */
static void pause_s(double s) {
    double end = donto_now() + s;
    while (!g_stop && !past_deadline() && donto_now() < end) msleep(50);
}

/* What to do after a non-200 answer: 1 = stop (403), 0 = retry (waited). */
static int after_failure(long st) {
    if (st == 403) {
        S.state = "suspended";
        if (!strstr(g_resp.p ? g_resp.p : "", "\"suspended\""))
            fprintf(stderr, "trust_attacker: 403 without \"suspended\": %.300s\n", g_resp.p ? g_resp.p : "");
        return 1;
    }
    if (st == 429) {
        S.http_429++;
        pause_s(g_retry_after > 0 ? (g_retry_after < 30 ? (double)g_retry_after : 30.0) : 1.0);
        return 0;
    }
    S.http_err++;
    fprintf(stderr, "trust_attacker: HTTP %ld: %.300s\n", st, g_resp.p ? g_resp.p : "");
    pause_s(0.5);
    return 0;
}

/* Submit until answered 200 (then parse into *out), 403 (returns 1), or the
 * deadline / a signal (returns -1). */
static int submit(const char *worker_id, const donto_client_item *items, size_t n, int dims, donto_submit_resp *out) {
    char *body = NULL;
    donto_err e = {0};
    if (donto_proto_build_submit(worker_id, items, n, dims, 0, &body, &e)) {
        fprintf(stderr, "trust_attacker: build submit: %s\n", e.msg);
        return -1;
    }
    int rc = -1;
    while (!g_stop && !past_deadline()) {
        long st = post("submit", body);
        S.submits++;
        if (st == 200) {
            if (donto_proto_parse_submit_response(g_resp.p, g_resp.n, out, &e) == 0) rc = 0;
            else fprintf(stderr, "trust_attacker: submit answer: %s\n", e.msg);
            break;
        }
        if (after_failure(st)) {
            rc = 1;
            break;
        }
    }
    free(body);
    return rc;
}

/* Is item i of items rejected in r? */
static const char *reject_reason(const donto_submit_resp *r, const char *item_id) {
    for (size_t j = 0; j < r->n_rejected; j++)
        if (r->rejected[j].item_id && !strcmp(r->rejected[j].item_id, item_id))
            return r->rejected[j].reason ? r->rejected[j].reason : "?";
    return NULL;
}

/* ---- spoofing ------------------------------------------------------------- */

typedef struct {
    char target[16], item_id[256], owner[384];
    long long lease_id;
} victim_lease;

typedef struct {
    victim_lease *v;
    int n, cap;
} victim_list;

static void on_victim(int nc, const char *const *vals, const int *lens, void *u) {
    (void)lens;
    victim_list *l = u;
    if (nc < 4 || !vals[0] || !vals[1] || !vals[2] || l->n == l->cap) return;
    victim_lease *v = &l->v[l->n++];
    snprintf(v->target, sizeof v->target, "%s", vals[0]);
    snprintf(v->item_id, sizeof v->item_id, "%s", vals[1]);
    snprintf(v->owner, sizeof v->owner, "%s", vals[2]);
    v->lease_id = vals[3] ? atoll(vals[3]) : 0;
}

static int now_ms_ll(long long *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *out = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return 0;
}

/* One spoof round: random vectors for up to 32 items leased now to the
 * victims' workers, one submit per victim worker, each naming that worker's
 * id. Returns the number of items sent (0: no victim lease now); 1 at 403 via
 * *suspended. */
static int spoof_round(int dims, int *suspended) {
    char cond[2048] = "";
    size_t cl = 0;
    char vic[512];
    snprintf(vic, sizeof vic, "%s", o_victims);
    for (char *save = NULL, *t = strtok_r(vic, ",", &save); t; t = strtok_r(NULL, ",", &save))
        cl += (size_t)snprintf(cond + cl, sizeof cond - cl, "%slease_owner LIKE '%s/%%'", cl ? " OR " : "", t);
    long long now;
    now_ms_ll(&now);
    char sql[3000];
    snprintf(sql, sizeof sql,
             "SELECT target, item_id, lease_owner, lease_id FROM queue WHERE lease_owner IS NOT NULL AND "
             "lease_expires > %lld AND (%s) ORDER BY lease_id DESC LIMIT 32",
             now, cond);
    victim_lease buf[32];
    victim_list l = {buf, 0, 32};
    if (sqlq(o_db, sql, on_victim, &l)) return 0;
    if (l.n == 0) return 0;
    int sent = 0;
    /* Group by the victim's worker id (one submit names one worker). */
    int done[32] = {0};
    for (int i = 0; i < l.n && !*suspended; i++) {
        if (done[i]) continue;
        const char *slash = strchr(l.v[i].owner, '/');
        const char *wid = slash ? slash + 1 : l.v[i].owner;
        donto_client_item items[32];
        float *vecs = malloc((size_t)l.n * dims * sizeof(float));
        size_t k = 0;
        for (int j = i; j < l.n; j++) {
            if (done[j] || strcmp(l.v[j].owner, l.v[i].owner)) continue;
            done[j] = 1;
            random_unit(vecs + k * dims, dims);
            items[k] = (donto_client_item){.target = atoi(l.v[j].target), /* the queue's integer */
                                           .item_id = l.v[j].item_id,
                                           .lease_id = (j % 2 == 0) ? l.v[j].lease_id : 0,
                                           .model = o_model_name,
                                           .vector = vecs + k * dims};
            k++;
        }
        donto_submit_resp r = {0};
        int rc = submit(wid, items, k, dims, &r);
        if (rc == 1) *suspended = 1;
        if (rc == 0) {
            S.spoof_sent += (long)k;
            sent += (int)k;
            S.spoof_accepted += (long)(k - r.n_rejected);
            S.spoof_rejected += (long)r.n_rejected;
            for (size_t j = 0; j < r.n_rejected; j++)
                S.spoof_not_leased += r.rejected[j].reason && !strcmp(r.rejected[j].reason, "not_leased");
            donto_submit_resp_free(&r);
        }
        free(vecs);
    }
    if (sent) S.spoof_rounds++;
    return sent;
}

/* ---- main ----------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr,
            "usage: trust_attacker --url URL --token-file FILE --mode random|shift|othermodel|noise|turncoat|spoof\n"
            "                      --model DIR [--model-name NAME] [--worker-id ID] [-n N] [--honest N]\n"
            "                      [--db URL --victims TOKEN,...] [--seed S] [--threads N] [--status FILE]\n"
            "                      [--accepted FILE] [--deadline SECS]\n");
}

int main(int argc, char **argv) {
    static const struct option lo[] = {{"url", 1, 0, 'u'},        {"token-file", 1, 0, 't'}, {"mode", 1, 0, 'm'},
                                       {"model", 1, 0, 'M'},      {"model-name", 1, 0, 'N'}, {"worker-id", 1, 0, 'w'},
                                       {"honest", 1, 0, 'H'},     {"db", 1, 0, 'd'},         {"victims", 1, 0, 'V'},
                                       {"seed", 1, 0, 's'},       {"threads", 1, 0, 'T'},    {"status", 1, 0, 'S'},
                                       {"accepted", 1, 0, 'A'},   {"deadline", 1, 0, 'D'},   {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *tokfile = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'u': o_url = optarg; break;
        case 't': tokfile = optarg; break;
        case 'm':
            for (int i = 0; k_modes[i]; i++)
                if (!strcmp(optarg, k_modes[i])) o_mode = i;
            break;
        case 'M': o_model = optarg; break;
        case 'N': o_model_name = optarg; break;
        case 'w': o_worker = optarg; break;
        case 'n': o_n = atoi(optarg); break;
        case 'H': o_honest = atol(optarg); break;
        case 'd': o_db = optarg; break;
        case 'V': o_victims = optarg; break;
        case 's': o_seed = strtoull(optarg, NULL, 10); break;
        case 'T': o_threads = atoi(optarg); break;
        case 'S': o_status = optarg; break;
        case 'A': o_accepted = optarg; break;
        case 'D': o_deadline = atof(optarg); break;
        case 'h': usage(); return 0;
        default: usage(); return 2;
        }
    }
    if (!o_url || !tokfile || o_mode < 0 || !o_model || o_n < 1 || (o_mode == M_SPOOF && (!o_db || !o_victims))) {
        usage();
        return 2;
    }
    FILE *tf = fopen(tokfile, "r");
    if (!tf || !fgets(o_token, sizeof o_token, tf)) {
        fprintf(stderr, "trust_attacker: cannot read %s\n", tokfile);
        return 1;
    }
    fclose(tf);
    o_token[strcspn(o_token, "\r\n")] = 0;
    static char namebuf[512];
    if (!o_model_name) {
        char p[1200];
        snprintf(p, sizeof p, "%s/model_name.txt", o_model);
        FILE *f = fopen(p, "r");
        if (f && fgets(namebuf, sizeof namebuf, f)) namebuf[strcspn(namebuf, "\r\n")] = 0;
        if (f) fclose(f);
        o_model_name = namebuf[0] ? namebuf : DONTO_DEFAULT_MODEL;
    }
    g_rng = o_seed * 0x2545F4914F6CDD1Dull + (uint64_t)o_mode;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    S.t0 = donto_now();

    donto_err e = {0};
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = o_threads;
    donto_encoder *honest = NULL, *other = NULL;
    if (o_mode != M_RANDOM && o_mode != M_SPOOF && donto_encoder_open(o_model, &eo, &honest, &e)) {
        fprintf(stderr, "trust_attacker: model %s: %s\n", o_model, e.msg);
        return 1;
    }
    if (o_mode == M_OTHERMODEL) {
        eo.pooling = DONTO_POOL_CLS;
        if (donto_encoder_open(o_model, &eo, &other, &e)) {
            fprintf(stderr, "trust_attacker: model %s (CLS pooling): %s\n", o_model, e.msg);
            return 1;
        }
        if (donto_encoder_config(honest)->pooling != DONTO_POOL_MEAN)
            fprintf(stderr, "trust_attacker: warning: %s does not pool by mean; othermodel = CLS is its own pooling\n",
                    o_model);
    }
    int dims = honest ? donto_encoder_dim(honest) : 0;
    if (!dims) {
        dims = donto_model_dims(o_model_name);
        if (dims <= 0) dims = 384;
    }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    g_curl = curl_easy_init();
    char auth[200];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", o_token);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(g_curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(g_curl, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(g_curl, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(g_curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(g_curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(g_curl, CURLOPT_WRITEDATA, &g_resp);
    curl_easy_setopt(g_curl, CURLOPT_HEADERFUNCTION, on_header);

    FILE *acc = o_accepted ? fopen(o_accepted, "w") : NULL;
    char *lease_body = NULL;
    if (donto_proto_build_lease(o_worker, o_n, -1, &lease_body, &e)) {
        fprintf(stderr, "trust_attacker: %s\n", e.msg);
        return 1;
    }
    float *hv = calloc((size_t)DONTO_PROTO_LEASE_MAX * dims, sizeof(float));
    float *bv = calloc((size_t)DONTO_PROTO_LEASE_MAX * dims, sizeof(float));
    float *prev = calloc((size_t)dims, sizeof(float));
    int have_prev = 0, spoofed_once = 0, suspended = 0;
    donto_client_item *items = calloc(DONTO_PROTO_LEASE_MAX, sizeof *items);
    int *isbad = calloc(DONTO_PROTO_LEASE_MAX, sizeof *isbad);
    const char **texts = calloc(DONTO_PROTO_LEASE_MAX, sizeof *texts);
    write_status();

    while (!g_stop && !suspended) {
        if (past_deadline()) {
            S.state = "deadline";
            break;
        }
        long st = post("lease", lease_body);
        if (st != 200) {
            if (after_failure(st)) break;
            continue;
        }
        donto_lease_resp b = {0};
        if (donto_proto_parse_lease_response(g_resp.p, g_resp.n, &b, &e)) {
            fprintf(stderr, "trust_attacker: lease answer: %s\n", e.msg);
            S.http_err++;
            pause_s(0.5);
            continue;
        }
        S.leases++;
        S.leased += (long)b.n;
        if (b.n == 0) {
            donto_lease_resp_free(&b);
            write_status();
            pause_s(0.25);
            continue;
        }
        /* The spoofer's identity attack first (at least one round before its
         * first own submit). */
        if (o_mode == M_SPOOF) {
            int sent = spoof_round(dims, &suspended);
            double until = donto_now() + 120;
            while (!sent && !spoofed_once && !suspended && !g_stop && donto_now() < until && !past_deadline()) {
                msleep(100);
                sent = spoof_round(dims, &suspended);
            }
            if (sent) spoofed_once = 1;
            if (suspended) {
                donto_lease_resp_free(&b);
                break;
            }
        }
        size_t n = b.n;
        int need_honest = o_mode == M_SHIFT || o_mode == M_NOISE || o_mode == M_OTHERMODEL ||
                          (o_mode == M_TURNCOAT && S.honest_accepted < o_honest);
        for (size_t i = 0; i < n; i++) texts[i] = b.items[i].text;
        if (need_honest && donto_encoder_encode(honest, texts, NULL, n, hv, NULL, &e)) {
            fprintf(stderr, "trust_attacker: encode: %s\n", e.msg);
            donto_lease_resp_free(&b);
            break;
        }
        if (o_mode == M_OTHERMODEL && donto_encoder_encode(other, texts, NULL, n, bv, NULL, &e)) {
            fprintf(stderr, "trust_attacker: encode (CLS): %s\n", e.msg);
            donto_lease_resp_free(&b);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            float *v = bv + i * dims;
            const float *right = hv + i * dims;
            int bad = 1;
            switch (o_mode) {
            case M_RANDOM:
            case M_SPOOF: random_unit(v, dims); break;
            case M_SHIFT:
                if (n > 1) memcpy(v, hv + ((i + 1) % n) * dims, (size_t)dims * sizeof(float));
                else if (have_prev) memcpy(v, prev, (size_t)dims * sizeof(float));
                else random_unit(v, dims);
                break;
            case M_OTHERMODEL: break; /* bv already holds the CLS-pooled vectors */
            case M_NOISE: {
                double g[4096], ss = 0;
                for (int k = 0; k < dims; k++) g[k] = gauss(), ss += g[k] * g[k];
                double sc = NOISE_NORM / sqrt(ss);
                for (int k = 0; k < dims; k++) v[k] = (float)(right[k] + g[k] * sc);
                normalise(v, dims);
                break;
            }
            case M_TURNCOAT:
                /* Honest while fewer than --honest items were accepted (the
                 * whole batch decides at once, so it may pass a little). */
                if (S.honest_accepted < o_honest) {
                    memcpy(v, right, (size_t)dims * sizeof(float));
                    bad = 0;
                } else {
                    random_unit(v, dims);
                }
                break;
            }
            isbad[i] = bad;
            if (bad && need_honest) {
                double cs = cosine(v, right, dims);
                if (cs < S.cos_min) S.cos_min = cs;
                if (cs > S.cos_max) S.cos_max = cs;
                S.cos_sum += cs, S.cos_n++;
            }
            items[i] = (donto_client_item){.target = b.items[i].target,
                                           .item_id = b.items[i].item_id,
                                           .lease_id = b.items[i].lease_id,
                                           .model = o_model_name,
                                           .vector = v};
        }
        if (n > 0 && need_honest) memcpy(prev, hv + (n - 1) * dims, (size_t)dims * sizeof(float)), have_prev = 1;
        for (size_t i = 0; i < n; i++) {
            if (isbad[i]) {
                S.bad_sent++;
                if (S.t_first_bad == 0) S.t_first_bad = donto_now(), now_ms_ll(&S.first_bad_ms);
            } else {
                S.honest_sent++;
            }
        }
        donto_submit_resp r = {0};
        int rc = submit(o_worker, items, n, dims, &r);
        if (rc == 0) {
            for (size_t i = 0; i < n; i++) {
                int rej = reject_reason(&r, b.items[i].item_id) != NULL;
                if (isbad[i]) {
                    if (rej) S.bad_rejected++;
                    else {
                        S.bad_accepted++;
                        if (acc) fprintf(acc, "%s\n", b.items[i].item_id);
                    }
                } else if (!rej) {
                    S.honest_accepted++;
                }
            }
            if (acc) fflush(acc);
            donto_submit_resp_free(&r);
        } else if (rc == 1) {
            suspended = 1;
        }
        donto_lease_resp_free(&b);
        write_status();
    }
    if (g_stop && !strcmp(S.state, "running")) S.state = "stopped";
    if (!strcmp(S.state, "running")) S.state = past_deadline() ? "deadline" : "stopped";
    S.t_end = donto_now();
    write_status();
    if (acc) fclose(acc);
    free(lease_body);
    free(hv);
    free(bv);
    free(prev);
    free(items);
    free(isbad);
    free(texts);
    free(g_resp.p);
    curl_slist_free_all(h);
    curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    donto_encoder_close(honest);
    donto_encoder_close(other);
    return 0;
}
