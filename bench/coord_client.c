/* Load client for the coordinator (bench/coord-load): C threads, one
 * keep-alive libcurl handle each, against a running `donto-embed serve`.
 *
 *   bench_coord_client --port P --token T --mode lease|ingest-json|ingest-b64
 *                      [--clients C] [--n N] [--seconds S] [--max-calls K]
 *                      [--target claim] [--dims 384]
 *
 * lease:        each thread leases n items per call (nothing is submitted),
 *               until the queue is empty, S seconds pass, or it made K calls.
 * ingest-json / ingest-b64: each thread leases n items and submits a unit
 *               vector for each (JSON numbers or base64 float32, with the
 *               lease_id), until the queue is empty or S seconds pass.
 * One output line, key=value: items (leased) or vectors (accepted) per
 * second over the wall time of the run, and the latency of the lease calls
 * (p50/p99, ms) and of the submit calls. Any HTTP error counts in errors=.
 * Bodies are built and answers parsed by the wire module's client side
 * (donto/wire.h), as in the worker. */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "donto/store.h"
#include "donto/wire.h"

enum { M_LEASE, M_JSON, M_B64 };

static int g_port, g_mode = M_LEASE, g_clients = 8, g_n = 256, g_dims = 384;
static long g_max_calls = 0;
static double g_seconds = 30;
static const char *g_token = "";
static int g_target = DONTO_TARGET_CLAIM;
/* The one unit vector every item is submitted with: the submit builder
 * renders it once per body and copies it for the other items, so the
 * client's cost per item is a copy and the figure is the coordinator's. */
static float *g_vec;
static double g_t0;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    sb_add(u, d, sz * nm);
    return sz * nm;
}

typedef struct {
    CURL *c;
    struct curl_slist *h;
    char url_lease[128], url_submit[128];
    sbuf resp;
    double *lat_lease, *lat_submit;
    size_t n_lease, n_submit, cap;
    long items, vectors, errors;
    double end_t;
} worker;

static long post(worker *w, const char *url, const char *body, size_t len) {
    w->resp.n = 0;
    if (w->resp.p) w->resp.p[0] = 0;
    curl_easy_setopt(w->c, CURLOPT_URL, url);
    curl_easy_setopt(w->c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(w->c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    long st = 0;
    if (curl_easy_perform(w->c) == CURLE_OK) curl_easy_getinfo(w->c, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

static void lat_add(double **a, size_t *n, size_t *cap, double v) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        *a = realloc(*a, *cap * sizeof **a);
        if (!*a) abort();
    }
    (*a)[(*n)++] = v;
}

static void *run(void *arg) {
    worker *w = arg;
    size_t cap_l = 0, cap_s = 0;
    w->c = curl_easy_init();
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", g_token);
    w->h = curl_slist_append(NULL, "Content-Type: application/json");
    w->h = curl_slist_append(w->h, auth);
    w->h = curl_slist_append(w->h, "Expect:");
    curl_easy_setopt(w->c, CURLOPT_HTTPHEADER, w->h);
    curl_easy_setopt(w->c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(w->c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(w->c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(w->c, CURLOPT_WRITEDATA, &w->resp);
    curl_easy_setopt(w->c, CURLOPT_TCP_NODELAY, 1L);
    char wid[64];
    snprintf(wid, sizeof wid, "bench-%p", (void *)w);
    char *lease = NULL;
    donto_err e = {0};
    if (donto_proto_build_lease(wid, g_n, g_target, &lease, &e)) {
        fprintf(stderr, "bench_coord_client: %s\n", e.msg);
        abort();
    }
    size_t ll = strlen(lease);
    donto_client_item *ci = NULL;
    size_t ci_cap = 0;
    long calls = 0;
    while (now_s() < w->end_t && (!g_max_calls || calls < g_max_calls)) {
        double t = now_s();
        long st = post(w, w->url_lease, lease, (size_t)ll);
        lat_add(&w->lat_lease, &w->n_lease, &cap_l, (now_s() - t) * 1e3);
        calls++;
        if (st != 200) {
            w->errors++;
            continue;
        }
        donto_lease_resp batch;
        if (donto_proto_parse_lease_response(w->resp.p, w->resp.n, &batch, &e)) {
            w->errors++;
            continue;
        }
        size_t nb = batch.n;
        w->items += (long)nb;
        if (nb == 0) {
            donto_lease_resp_free(&batch);
            break; /* queue empty */
        }
        if (g_mode != M_LEASE) {
            if (nb > ci_cap) {
                free(ci);
                ci_cap = nb;
                ci = malloc(ci_cap * sizeof *ci);
                if (!ci) abort();
            }
            for (size_t i = 0; i < nb; i++)
                ci[i] = (donto_client_item){batch.items[i].target, batch.items[i].item_id, batch.items[i].lease_id,
                                            NULL, g_vec};
            char *body = NULL;
            if (donto_proto_build_submit(wid, ci, nb, g_dims, g_mode == M_JSON, &body, &e)) {
                fprintf(stderr, "bench_coord_client: %s\n", e.msg);
                w->errors++;
                donto_lease_resp_free(&batch);
                continue;
            }
            t = now_s();
            st = post(w, w->url_submit, body, strlen(body));
            lat_add(&w->lat_submit, &w->n_submit, &cap_s, (now_s() - t) * 1e3);
            free(body);
            donto_submit_resp r;
            if (st == 200 && !donto_proto_parse_submit_response(w->resp.p, w->resp.n, &r, &e)) {
                if (!r.has_rejected)
                    w->vectors += (long)r.upserted;
                else
                    w->errors++;
                donto_submit_resp_free(&r);
            } else {
                w->errors++;
            }
        }
        donto_lease_resp_free(&batch);
    }
    free(ci);
    free(lease);
    curl_slist_free_all(w->h);
    curl_easy_cleanup(w->c);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
    if (!n) return 0;
    size_t k = (size_t)ceil(p * (double)n) - 1;
    if (k >= n) k = n - 1;
    return v[k];
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_coord_client --port P --token T [--mode lease|ingest-json|ingest-b64]\n"
               "         [--clients C] [--n N] [--seconds S] [--max-calls K] [--target claim] [--dims 384]\n");
}

int main(int argc, char **argv) {
    static const struct option lo[] = {{"port", 1, 0, 'p'},    {"token", 1, 0, 't'},   {"mode", 1, 0, 'm'},
                                       {"clients", 1, 0, 'c'}, {"n", 1, 0, 'n'},       {"seconds", 1, 0, 's'},
                                       {"max-calls", 1, 0, 'k'}, {"target", 1, 0, 'g'}, {"dims", 1, 0, 'd'},
                                       {"help", 0, 0, 'h'},    {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': g_port = atoi(optarg); break;
        case 't': g_token = optarg; break;
        case 'm':
            g_mode = !strcmp(optarg, "lease") ? M_LEASE : !strcmp(optarg, "ingest-json") ? M_JSON
                     : !strcmp(optarg, "ingest-b64")                                    ? M_B64
                                                                                        : -1;
            if (g_mode < 0) return usage(stderr), 2;
            break;
        case 'c': g_clients = atoi(optarg); break;
        case 'n': g_n = atoi(optarg); break;
        case 's': g_seconds = atof(optarg); break;
        case 'k': g_max_calls = atol(optarg); break;
        case 'g':
            if ((g_target = donto_target_parse(optarg)) < 0) return usage(stderr), 2;
            break;
        case 'd': g_dims = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (g_port <= 0 || g_clients < 1 || g_n < 1 || g_dims < 1) return usage(stderr), 2;
    /* One unit vector, rendered once: the client's cost per item is then a
     * copy, so the figure is the coordinator's, not the client's. */
    g_vec = malloc((size_t)g_dims * sizeof *g_vec);
    if (!g_vec) return 1;
    for (int i = 0; i < g_dims; i++) g_vec[i] = (float)(1.0 / sqrt((double)g_dims)) * (i % 2 ? 1.0f : -1.0f);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    worker *ws = calloc((size_t)g_clients, sizeof *ws);
    pthread_t *th = calloc((size_t)g_clients, sizeof *th);
    g_t0 = now_s();
    for (int i = 0; i < g_clients; i++) {
        snprintf(ws[i].url_lease, sizeof ws[i].url_lease, "http://127.0.0.1:%d/embed/lease", g_port);
        snprintf(ws[i].url_submit, sizeof ws[i].url_submit, "http://127.0.0.1:%d/embed/submit", g_port);
        ws[i].end_t = g_t0 + g_seconds;
        pthread_create(&th[i], NULL, run, &ws[i]);
    }
    for (int i = 0; i < g_clients; i++) pthread_join(th[i], NULL);
    double wall = now_s() - g_t0;
    size_t nl = 0, ns = 0;
    long items = 0, vectors = 0, errors = 0;
    for (int i = 0; i < g_clients; i++) nl += ws[i].n_lease, ns += ws[i].n_submit;
    double *L = malloc((nl + 1) * sizeof *L), *S = malloc((ns + 1) * sizeof *S);
    nl = ns = 0;
    for (int i = 0; i < g_clients; i++) {
        memcpy(L + nl, ws[i].lat_lease, ws[i].n_lease * sizeof *L);
        nl += ws[i].n_lease;
        if (ws[i].n_submit) memcpy(S + ns, ws[i].lat_submit, ws[i].n_submit * sizeof *S);
        ns += ws[i].n_submit;
        items += ws[i].items, vectors += ws[i].vectors, errors += ws[i].errors;
        free(ws[i].lat_lease);
        free(ws[i].lat_submit);
        free(ws[i].resp.p);
    }
    qsort(L, nl, sizeof *L, cmp_d);
    qsort(S, ns, sizeof *S, cmp_d);
    const char *mode = g_mode == M_LEASE ? "lease" : g_mode == M_JSON ? "ingest-json" : "ingest-b64";
    printf("mode=%s clients=%d n=%d wall_s=%.2f lease_calls=%zu items=%ld items_per_s=%.0f "
           "lease_p50_ms=%.2f lease_p99_ms=%.2f",
           mode, g_clients, g_n, wall, nl, items, items / wall, pct(L, nl, 0.5), pct(L, nl, 0.99));
    if (g_mode != M_LEASE)
        printf(" vectors=%ld vectors_per_s=%.0f submit_p50_ms=%.2f submit_p99_ms=%.2f", vectors, vectors / wall,
               pct(S, ns, 0.5), pct(S, ns, 0.99));
    printf(" errors=%ld\n", errors);
    free(L);
    free(S);
    free(ws);
    free(th);
    free(g_vec);
    curl_global_cleanup();
    return errors ? 1 : 0;
}
