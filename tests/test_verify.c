/* The verification pool (src/coord/verify.c) on a tiny generated model:
 * right vectors pass, wrong ones fail (random, noisy at cosine 0.98, wrong
 * dims, zero), a full queue drops instead of passing, another model's job is
 * skipped, many pushing threads lose nothing, the pool thread runs at nice
 * +10, and close with jobs still queued frees everything (run under ASan). */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "donto/encoder.h"
#include "tinybert.h"
#include "unitvec.h"
#include "verify.h"

#define MAXJ 4096

/* What done() saw, by lease_id (0 .. MAXJ-1). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;          /* done() calls */
    float cos[MAXJ];
    int pass[MAXJ];
    int seen[MAXJ];
    int nice_seen;  /* the pool thread's nice value, from the first call */
    /* gate: while closed, done() for lease_id == -1 blocks */
    int gate_closed, in_gate;
} R = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .nice_seen = -100};

static void reset(void) {
    pthread_mutex_lock(&R.mu);
    R.n = 0;
    memset(R.seen, 0, sizeof R.seen);
    pthread_mutex_unlock(&R.mu);
}

static void on_done(void *ctx, const verify_job *j, float c, int pass, const float *ref) {
    CHECK(pass >= 0, "an unchecked job reached done() in a test that has none");
    /* The reference is the encoder's own vector of the text: unit norm, and
     * the cosine reported is the cosine to it. */
    if (ref && j->dims > 0) {
        double nn = 0;
        for (int i = 0; i < j->dims; i++) nn += (double)ref[i] * ref[i];
        CHECK(fabs(nn - 1.0) < 1e-3, "reference norm^2 %f", nn);
        CHECK(fabsf(verify_cosine(j->vec, ref, j->dims) - c) < 1e-5, "cosine is to the reference");
    }
    (void)ctx;
    pthread_mutex_lock(&R.mu);
    if (R.nice_seen == -100) {
        errno = 0;
        R.nice_seen = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    }
    if (j->lease_id == -1) {
        R.in_gate = 1;
        pthread_cond_broadcast(&R.cv);
        while (R.gate_closed) pthread_cond_wait(&R.cv, &R.mu);
        R.in_gate = 0;
    } else if (j->lease_id >= 0 && j->lease_id < MAXJ) {
        R.cos[j->lease_id] = c;
        R.pass[j->lease_id] = pass;
        R.seen[j->lease_id]++;
    }
    R.n++;
    pthread_cond_broadcast(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

/* Waits (no spinning) until done() has been called n times; 0, or -1 after 60 s. */
static int wait_done(int n) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    pthread_mutex_lock(&R.mu);
    int rc = 0;
    while (R.n < n && rc == 0) rc = pthread_cond_timedwait(&R.cv, &R.mu, &dl);
    int ok = R.n >= n;
    pthread_mutex_unlock(&R.mu);
    return ok ? 0 : -1;
}

static char root[256], model_dir[512];
static donto_encoder *g_enc;
static int D; /* the tiny model's dimension */

/* Text i: a few words of the tiny vocabulary, different for each i. */
static void text_of(int i, char *buf, size_t cap) {
    unsigned s = (unsigned)i * 2654435761u + 7u;
    size_t len = 0;
    int words = 2 + i % 6;
    buf[0] = 0;
    for (int w = 0; w < words; w++) {
        s = s * 1103515245u + 12345u;
        const char *word = tiny_words[5 + (s >> 16) % (TINY_NWORDS - 5)];
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", w ? " " : "", word);
    }
    snprintf(buf + len, cap - len, " %d", i); /* [UNK] but a different token count */
}

/* The right vector of text i, from a separate fp32 encoder. */
static void right_vec(int i, float *out) {
    char t[256];
    text_of(i, t, sizeof t);
    const char *tp = t;
    donto_err e = {0};
    if (donto_encoder_encode(g_enc, &tp, NULL, 1, out, NULL, &e) != 0) {
        fprintf(stderr, "reference encode: %s\n", e.msg);
        exit(1);
    }
}

/* v' = c v + sqrt(1 - c^2) u, u a unit vector orthogonal to v: cosine c exactly
 * (v unit): "right vector plus noise". */
static void noisy(const float *v, float *out, double c, unsigned seed) {
    float *u = malloc((size_t)D * sizeof *u);
    unit(u, (size_t)D, seed);
    double d = 0, n = 0;
    for (int k = 0; k < D; k++) d += (double)u[k] * v[k];
    for (int k = 0; k < D; k++) u[k] = (float)(u[k] - d * v[k]);
    for (int k = 0; k < D; k++) n += (double)u[k] * u[k];
    for (int k = 0; k < D; k++) out[k] = (float)(c * v[k] + sqrt(1 - c * c) * u[k] / sqrt(n));
    free(u);
}

static int push(verify_pool *p, int64_t lease, const char *text, const float *vec, int dims, const char *model) {
    verify_job j = {.token = "tok-a", .worker_id = "w1", .target = 0, .item_id = "item",
                    .model = (char *)model, .text = (char *)text, .vec = (float *)vec, .dims = dims,
                    .lease_id = lease};
    return verify_push(p, &j);
}

static verify_pool *open_pool(int threads, int cap, int batch, int own) {
    verify_config c;
    verify_config_default(&c);
    if (own) c.model_dir = model_dir;
    else c.enc = g_enc;
    c.threads = threads;
    c.queue_cap = cap;
    c.batch_max = batch;
    c.model = "tiny";
    c.done = on_done;
    c.nice = 10;
    verify_pool *p = NULL;
    donto_err e = {0};
    if (verify_pool_open(&c, &p, &e) != 0) {
        fprintf(stderr, "verify_pool_open: %s\n", e.msg);
        exit(1);
    }
    return p;
}

/* Right vectors pass; random, noisy (0.98), wrong-dims and zero vectors fail
 * with the documented cosines; one pool with its own encoder. */
static void test_verdicts(void) {
    reset();
    verify_pool *p = open_pool(1, 64, 8, 1);
    float *v = malloc((size_t)(D + 1) * sizeof *v), *w = malloc((size_t)(D + 1) * sizeof *w);
    char t[256];
    int n = 0;
    for (int i = 0; i < 20; i++, n++) { /* 0..19: right */
        text_of(i, t, sizeof t);
        right_vec(i, v);
        CHECK(push(p, i, t, v, D, "tiny") == 0, "push right %d", i);
    }
    for (int i = 20; i < 30; i++, n++) { /* 20..29: a random unit vector */
        text_of(i, t, sizeof t);
        unit(w, (size_t)D, 1000u + (unsigned)i);
        CHECK(push(p, i, t, w, D, "tiny") == 0, "push random %d", i);
    }
    for (int i = 30; i < 40; i++, n++) { /* 30..39: right + noise, cosine 0.98 */
        text_of(i, t, sizeof t);
        right_vec(i, v);
        noisy(v, w, 0.98, 2000u + (unsigned)i);
        CHECK(push(p, i, t, w, D, "tiny") == 0, "push noisy %d", i);
    }
    for (int i = 40; i < 45; i++, n++) { /* 40..44: right + noise, cosine 0.9995 (rounding-sized) */
        text_of(i, t, sizeof t);
        right_vec(i, v);
        noisy(v, w, 0.9995, 3000u + (unsigned)i);
        CHECK(push(p, i, t, w, D, "tiny") == 0, "push slightly noisy %d", i);
    }
    text_of(45, t, sizeof t); /* 45: one float short; 46: one too many; 47: zero */
    right_vec(45, v);
    CHECK(push(p, 45, t, v, D - 1, "tiny") == 0, "push short");
    n++;
    v[D] = 0.5f;
    CHECK(push(p, 46, t, v, D + 1, "tiny") == 0, "push long");
    n++;
    memset(w, 0, (size_t)D * sizeof *w);
    CHECK(push(p, 47, t, w, D, "tiny") == 0, "push zero");
    n++;
    CHECK(wait_done(n) == 0, "only %d of %d verdicts", R.n, n);

    float worst_right = 2, best_random = -2, best_noisy = -2;
    for (int i = 0; i < 20; i++) {
        CHECK(R.seen[i] == 1 && R.pass[i] == 1, "right vector %d: pass %d cosine %.7f", i, R.pass[i], R.cos[i]);
        worst_right = fminf(worst_right, R.cos[i]);
    }
    for (int i = 20; i < 30; i++) {
        CHECK(R.seen[i] == 1 && R.pass[i] == 0, "random vector %d passed (cosine %.4f)", i, R.cos[i]);
        best_random = fmaxf(best_random, R.cos[i]);
    }
    for (int i = 30; i < 40; i++) {
        CHECK(R.seen[i] == 1 && R.pass[i] == 0, "noisy vector %d passed (cosine %.5f)", i, R.cos[i]);
        CHECK(fabsf(R.cos[i] - 0.98f) < 1e-4f, "noisy vector %d: cosine %.6f, built for 0.98", i, R.cos[i]);
        best_noisy = fmaxf(best_noisy, R.cos[i]);
    }
    for (int i = 40; i < 45; i++)
        CHECK(R.seen[i] == 1 && R.pass[i] == 1, "cosine-0.9995 vector %d failed (cosine %.6f)", i, R.cos[i]);
    CHECK(R.pass[45] == 0 && R.cos[45] == VERIFY_COS_BAD_DIMS, "short: pass %d cosine %g", R.pass[45], R.cos[45]);
    CHECK(R.pass[46] == 0 && R.cos[46] == VERIFY_COS_BAD_DIMS, "long: pass %d cosine %g", R.pass[46], R.cos[46]);
    CHECK(R.pass[47] == 0 && R.cos[47] == VERIFY_COS_BAD_VECTOR, "zero: pass %d cosine %g", R.pass[47], R.cos[47]);
    CHECK(worst_right > 0.99999f, "right vectors: worst cosine %.7f", worst_right);
    fprintf(stderr, "verdicts: right >= %.7f, random <= %.4f, noisy <= %.5f, tolerance %.4f\n", worst_right,
            best_random, best_noisy, (double)VERIFY_MIN_COSINE_DEFAULT);

    verify_stats st;
    verify_pool_stats(p, &st);
    CHECK(st.accepted == n && st.done == n && st.passed == 25 && st.failed == n - 25 && st.dropped == 0 &&
              st.queued == 0,
          "stats: accepted %lld done %lld passed %lld failed %lld dropped %lld queued %lld", (long long)st.accepted,
          (long long)st.done, (long long)st.passed, (long long)st.failed, (long long)st.dropped,
          (long long)st.queued);
    CHECK(st.max_latency_ms >= st.mean_latency_ms && st.mean_latency_ms > 0, "latency mean %g max %g",
          st.mean_latency_ms, st.max_latency_ms);
    /* nice +10 on the pool thread (this test runs at the nice it was given) */
    errno = 0;
    int mine = getpriority(PRIO_PROCESS, 0);
    int want = mine + 10 > 19 ? 19 : mine + 10;
    CHECK(R.nice_seen == want, "pool thread nice %d, want %d (this thread %d)", R.nice_seen, want, mine);

    /* malformed pushes: -1, nothing counted */
    CHECK(push(p, 0, NULL, v, D, "tiny") == -1, "NULL text accepted");
    CHECK(push(p, 0, t, NULL, D, "tiny") == -1, "NULL vec accepted");
    CHECK(push(p, 0, t, v, -1, "tiny") == -1, "negative dims accepted");
    /* another model: skipped (dropped), not a pass or a fail */
    CHECK(push(p, 0, t, v, D, "other-model") == 1, "a job for another model was queued");
    verify_pool_stats(p, &st);
    CHECK(st.accepted == n && st.dropped == 1, "after bad pushes: accepted %lld dropped %lld",
          (long long)st.accepted, (long long)st.dropped);
    verify_pool_close(p);
    free(v);
    free(w);
}

/* A full queue refuses without blocking and counts a drop, never a pass;
 * close with the queue full lets the batch in progress finish, drops the
 * rest, and (under ASan) leaks nothing. */
typedef struct {
    verify_pool *p;
    verify_stats last;
} closer;

static void *close_thread(void *arg) {
    closer *c = arg;
    verify_pool_close_stats(c->p, &c->last);
    return NULL;
}

static void test_full_and_close(void) {
    reset();
    enum { CAP = 16 };
    verify_pool *p = open_pool(1, CAP, 4, 0);
    float *v = malloc((size_t)D * sizeof *v);
    char t[256];
    pthread_mutex_lock(&R.mu);
    R.gate_closed = 1;
    pthread_mutex_unlock(&R.mu);
    text_of(0, t, sizeof t);
    right_vec(0, v);
    CHECK(push(p, -1, t, v, D, "tiny") == 0, "push the gate job");
    /* wait until the pool thread is held in done() */
    pthread_mutex_lock(&R.mu);
    while (!R.in_gate) pthread_cond_wait(&R.cv, &R.mu);
    pthread_mutex_unlock(&R.mu);
    for (int i = 0; i < CAP; i++) {
        text_of(i, t, sizeof t);
        right_vec(i, v);
        CHECK(push(p, i, t, v, D, "tiny") == 0, "push %d into a queue with room", i);
    }
    double t0 = donto_now();
    int full = push(p, 99, t, v, D, "tiny"); /* a right vector: it would pass */
    double dt = donto_now() - t0;
    CHECK(full == 1, "push into a full queue returned %d, want 1", full);
    CHECK(dt < 0.5, "push into a full queue took %.3f s (it must not wait)", dt);
    verify_stats st;
    verify_pool_stats(p, &st);
    /* the gate job is counted (a pass) before its done() call; the refused one is not */
    CHECK(st.queued == CAP && st.dropped == 1 && st.passed == 1 && st.done == 1,
          "full: queued %lld dropped %lld passed %lld done %lld", (long long)st.queued, (long long)st.dropped,
          (long long)st.passed, (long long)st.done);

    /* close while the queue is full and a batch is in progress */
    closer c = {.p = p};
    pthread_t th;
    pthread_create(&th, NULL, close_thread, &c);
    struct timespec ts = {0, 200 * 1000 * 1000}; /* let close set its flag before the gate opens */
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&R.mu);
    R.gate_closed = 0;
    pthread_cond_broadcast(&R.cv);
    pthread_mutex_unlock(&R.mu);
    pthread_join(th, NULL);
    /* Every push is accounted for: the gate job done, the rest dropped at
     * close (or, if the closer was slow to start, checked in one more batch). */
    CHECK(c.last.done + c.last.dropped == CAP + 2, "close: done %lld + dropped %lld != %d",
          (long long)c.last.done, (long long)c.last.dropped, CAP + 2);
    CHECK(c.last.done >= 1 && c.last.dropped >= CAP + 1 - 4, "close: done %lld dropped %lld", (long long)c.last.done,
          (long long)c.last.dropped);
    CHECK(c.last.failed == 0 && c.last.queued == 0, "close: failed %lld queued %lld", (long long)c.last.failed,
          (long long)c.last.queued);
    CHECK(R.seen[99] == 0, "the job refused by the full queue was checked");
    fprintf(stderr, "close with %d queued: done %lld dropped %lld\n", CAP, (long long)c.last.done,
            (long long)c.last.dropped);
    free(v);
    verify_pool_close(NULL);
}

/* Many HTTP-like threads pushing at once into a two-thread pool: every job
 * gets exactly one verdict, all right ones pass. */
enum { PUSHERS = 4, PER = 150 };
static float *g_vecs; /* PUSHERS * PER right vectors */

static void *pusher(void *arg) {
    verify_pool *p = ((void **)arg)[0];
    int k = (int)(intptr_t)((void **)arg)[1];
    char t[256];
    for (int i = 0; i < PER; i++) {
        int id = k * PER + i;
        text_of(id, t, sizeof t);
        if (push(p, id, t, g_vecs + (size_t)id * D, D, NULL) != 0) fprintf(stderr, "push %d refused\n", id);
    }
    return NULL;
}

static void test_concurrent(void) {
    reset();
    const int n = PUSHERS * PER;
    g_vecs = malloc((size_t)n * D * sizeof *g_vecs);
    for (int i = 0; i < n; i++) right_vec(i, g_vecs + (size_t)i * D);
    verify_pool *p = open_pool(2, 4096, 32, 0);
    pthread_t th[PUSHERS];
    void *args[PUSHERS][2];
    for (int k = 0; k < PUSHERS; k++) {
        args[k][0] = p;
        args[k][1] = (void *)(intptr_t)k;
        pthread_create(&th[k], NULL, pusher, args[k]);
    }
    for (int k = 0; k < PUSHERS; k++) pthread_join(th[k], NULL);
    CHECK(wait_done(n) == 0, "concurrent: %d of %d verdicts", R.n, n);
    int once = 0, passed = 0;
    for (int i = 0; i < n; i++) once += R.seen[i] == 1, passed += R.pass[i] == 1;
    CHECK(once == n && passed == n, "concurrent: %d seen once, %d passed, of %d", once, passed, n);
    verify_stats st;
    verify_pool_close_stats(p, &st);
    CHECK(st.done == n && st.passed == n && st.dropped == 0, "concurrent stats: done %lld passed %lld dropped %lld",
          (long long)st.done, (long long)st.passed, (long long)st.dropped);
    fprintf(stderr, "concurrent: %d jobs, latency mean %.1f ms max %.1f ms\n", n, st.mean_latency_ms,
            st.max_latency_ms);
    free(g_vecs);
}

static void test_open_errors(void) {
    verify_config c;
    verify_config_default(&c);
    CHECK(c.min_cosine == VERIFY_MIN_COSINE_DEFAULT && c.queue_cap == 4096 && c.batch_max == 32 && c.threads == 1 &&
              c.engine_threads == 1,
          "defaults");
    verify_pool *p = (verify_pool *)(uintptr_t)1; /* open must set NULL */
    donto_err e = {0};
    c.done = on_done;
    c.nice = 10;
    CHECK(verify_pool_open(&c, &p, &e) == -1 && p == NULL && e.code == DONTO_E_INVALID, "no encoder: %s", e.msg);
    c.model_dir = "/nonexistent/model";
    memset(&e, 0, sizeof e);
    CHECK(verify_pool_open(&c, &p, &e) == -1 && p == NULL, "a missing model dir opened");
    CHECK_STR_CONTAINS(e.msg, "/nonexistent/model");
    c.model_dir = model_dir;
    c.done = NULL;
    memset(&e, 0, sizeof e);
    CHECK(verify_pool_open(&c, &p, &e) == -1 && e.code == DONTO_E_INVALID, "no callback: %s", e.msg);
    /* cosine helper */
    float a[3] = {1, 0, 0}, b[3] = {2, 0, 0}, z[3] = {0, 0, 0}, n[3] = {NAN, 0, 0}, m[3] = {-3, 0, 0};
    CHECK(verify_cosine(a, b, 3) == 1.0f, "cosine of parallel vectors, unnormalised");
    CHECK(verify_cosine(a, m, 3) == -1.0f, "cosine of opposite vectors");
    CHECK(verify_cosine(a, z, 3) == VERIFY_COS_BAD_VECTOR, "cosine with a zero vector");
    CHECK(verify_cosine(n, a, 3) == VERIFY_COS_BAD_VECTOR, "cosine with a NaN");
}

/* A config zeroed by hand (no verify_config_default) gets the default
 * tolerance, not 0: with min_cosine 0 about half of all random vectors pass. */
static void test_zeroed_config(void) {
    reset();
    verify_config c = {0};
    c.enc = g_enc;
    c.done = on_done;
    c.nice = 10;
    verify_pool *p = NULL;
    donto_err e = {0};
    CHECK(verify_pool_open(&c, &p, &e) == 0, "open with a zeroed config: %s", e.msg);
    if (!p) return;
    float *w = malloc((size_t)D * sizeof *w);
    char t[256];
    for (int i = 0; i < 20; i++) {
        text_of(i, t, sizeof t);
        unit(w, (size_t)D, 5000u + (unsigned)i);
        push(p, i, t, w, D, NULL);
    }
    CHECK(wait_done(20) == 0, "zeroed config: %d of 20 verdicts", R.n);
    int passed = 0;
    for (int i = 0; i < 20; i++) passed += R.pass[i];
    CHECK(passed == 0, "zeroed config: %d of 20 random vectors passed", passed);
    verify_pool_close(p);
    free(w);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/donto-test-verify-%d", (int)getpid());
    mkdir(root, 0755);
    snprintf(model_dir, sizeof model_dir, "%s/tiny", root);
    tiny_spec s;
    tiny_default(&s);
    s.pooling = 1;
    if (tiny_write(model_dir, &s) != 0) {
        fprintf(stderr, "cannot write %s\n", model_dir);
        return 1;
    }
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 1;
    donto_err e = {0};
    if (donto_encoder_open(model_dir, &o, &g_enc, &e) != 0) {
        fprintf(stderr, "encoder: %s\n", e.msg);
        return 1;
    }
    D = donto_encoder_dim(g_enc);
    test_open_errors();
    test_verdicts();
    test_zeroed_config();
    test_full_and_close();
    test_concurrent();
    donto_encoder_close(g_enc);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return check_report("test_verify");
}
