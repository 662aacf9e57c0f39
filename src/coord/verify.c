/*
 * donto-accel coordinator: the background verification pool (verify.h).
 *
 * A ring of job pointers under one mutex, one condition variable for "there
 * is work or we are closing"; each pool thread takes up to batch_max jobs,
 * encodes their texts in one call (no lock held), compares, reports, and
 * counts. Pushes never wait for room: a full queue is a skipped check.
 */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "verify.h"

typedef struct vjob {
    verify_job j;
    double t_push; /* donto_now() at push */
} vjob;

struct verify_pool {
    verify_config cfg;
    char *model; /* owned copy of cfg.model */
    donto_encoder *enc;
    int own_enc;
    int dim;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    vjob **ring;
    int head, count; /* ring[head .. head+count) mod queue_cap */
    int closing;

    pthread_t *th;
    int nth; /* started */

    int64_t accepted, done, passed, failed, dropped;
    double lat_sum_ms, lat_max_ms;
};

void verify_config_default(verify_config *c) {
    memset(c, 0, sizeof *c);
    c->engine_threads = 1;
    c->threads = 1;
    c->queue_cap = 4096;
    c->batch_max = 32;
    c->min_cosine = VERIFY_MIN_COSINE_DEFAULT;
}

float verify_cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (!(aa > 0) || !(bb > 0) || !isfinite(aa) || !isfinite(bb) || !isfinite(ab)) return VERIFY_COS_BAD_VECTOR;
    double c = ab / (sqrt(aa) * sqrt(bb));
    if (c > 1) c = 1; /* rounding */
    if (c < -1) c = -1;
    return (float)c;
}

static void job_free(vjob *v) {
    if (!v) return;
    free(v->j.token);
    free(v->j.worker_id);
    free(v->j.item_id);
    free(v->j.model);
    free(v->j.text);
    free(v->j.vec);
    free(v);
}

/* strdup that keeps NULL; *fail set when a copy of a non-NULL fails. */
static char *dup_or_null(const char *s, int *fail) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *fail = 1;
    return d;
}

static vjob *job_copy(const verify_job *j) {
    vjob *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    int fail = 0;
    v->j.token = dup_or_null(j->token, &fail);
    v->j.worker_id = dup_or_null(j->worker_id, &fail);
    v->j.item_id = dup_or_null(j->item_id, &fail);
    v->j.model = dup_or_null(j->model, &fail);
    v->j.text = dup_or_null(j->text, &fail);
    v->j.target = j->target;
    v->j.dims = j->dims;
    v->j.lease_id = j->lease_id;
    if (j->dims > 0) {
        v->j.vec = malloc((size_t)j->dims * sizeof(float));
        if (v->j.vec) memcpy(v->j.vec, j->vec, (size_t)j->dims * sizeof(float));
        else fail = 1;
    }
    if (fail) {
        job_free(v);
        return NULL;
    }
    return v;
}

/* nice +by for this thread only (on Linux a tid names one thread), capped at
 * 19. Raising one's own nice value needs no privilege; a failure (another
 * kernel, a seccomp filter) only costs the courtesy, so it is logged and
 * ignored. Threads the encoder starts from this one inherit the value. */
static void lower_priority(int by) {
    if (by <= 0) return;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)tid);
    if (cur == -1 && errno) cur = 0;
    int want = cur + by > 19 ? 19 : cur + by;
    if (setpriority(PRIO_PROCESS, (id_t)tid, want) != 0)
        DLOG_DEBUG("verify: setpriority(%d) on thread %d: %s (ignored)", want, (int)tid, strerror(errno));
}

typedef struct scratch {
    vjob **batch;
    const char **texts;
    int *slot;   /* batch index -> row of ref, or -1 (not encoded) */
    float *ref;  /* batch_max * dim */
} scratch;

/* Encodes the jobs of batch whose dims match, one call; when that call fails,
 * one job at a time, so that one bad text does not lose the others. A job
 * whose text cannot be encoded gets slot -2 (dropped). */
static void encode_batch(verify_pool *p, scratch *s, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (s->batch[i]->j.dims != p->dim) {
            s->slot[i] = -1;
            continue;
        }
        s->slot[i] = m;
        s->texts[m++] = s->batch[i]->j.text;
    }
    if (m == 0) return;
    donto_err e = {0};
    if (donto_encoder_encode(p->enc, s->texts, NULL, (size_t)m, s->ref, NULL, &e) == 0) return;
    DLOG_WARN("verify: encoding a batch of %d failed (%s); one at a time", m, e.msg);
    for (int i = 0; i < n; i++) {
        if (s->slot[i] < 0) continue;
        const char *t = s->batch[i]->j.text;
        donto_err e1 = {0};
        if (donto_encoder_encode(p->enc, &t, NULL, 1, s->ref + (size_t)s->slot[i] * p->dim, NULL, &e1) != 0) {
            DLOG_WARN("verify: item %s: cannot encode its text (%s); check skipped",
                      s->batch[i]->j.item_id ? s->batch[i]->j.item_id : "?", e1.msg);
            s->slot[i] = -2;
        }
    }
}

/* Each job is counted before its done() call, so that stats read after a
 * done() call include it. */
static void run_batch(verify_pool *p, scratch *s, int n) {
    encode_batch(p, s, n);
    for (int i = 0; i < n; i++) {
        vjob *v = s->batch[i];
        if (s->slot[i] == -2) {
            pthread_mutex_lock(&p->mu);
            p->dropped++;
            pthread_mutex_unlock(&p->mu);
            /* Not checked: the caller learns so (pass -1), no verdict. */
            p->cfg.done(p->cfg.ctx, &v->j, NAN, -1, NULL);
            continue;
        }
        float c = s->slot[i] < 0 ? VERIFY_COS_BAD_DIMS
                                 : verify_cosine(v->j.vec, s->ref + (size_t)s->slot[i] * p->dim, p->dim);
        int pass = c >= p->cfg.min_cosine;
        double ms = (donto_now() - v->t_push) * 1e3;
        pthread_mutex_lock(&p->mu);
        if (pass) p->passed++;
        else p->failed++;
        p->done++;
        p->lat_sum_ms += ms;
        if (ms > p->lat_max_ms) p->lat_max_ms = ms;
        pthread_mutex_unlock(&p->mu);
        p->cfg.done(p->cfg.ctx, &v->j, c, pass, s->slot[i] < 0 ? NULL : s->ref + (size_t)s->slot[i] * p->dim);
    }
    for (int i = 0; i < n; i++) job_free(s->batch[i]);
}

static void *pool_thread(void *arg) {
    verify_pool *p = arg;
    lower_priority(p->cfg.nice);
    const int bmax = p->cfg.batch_max;
    scratch s = {
        .batch = malloc((size_t)bmax * sizeof *s.batch),
        .texts = malloc((size_t)bmax * sizeof *s.texts),
        .slot = malloc((size_t)bmax * sizeof *s.slot),
        .ref = malloc((size_t)bmax * (size_t)p->dim * sizeof(float)),
    };
    if (!s.batch || !s.texts || !s.slot || !s.ref) {
        /* Without scratch this thread can check nothing; the others (if
         * any) carry on, and close counts what is left. */
        DLOG_ERROR("verify: out of memory for a pool thread's scratch; thread exits");
        free(s.batch), free(s.texts), free(s.slot), free(s.ref);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->closing && p->count == 0) pthread_cond_wait(&p->cv, &p->mu);
        if (p->closing) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        int n = p->count < bmax ? p->count : bmax;
        for (int i = 0; i < n; i++) {
            s.batch[i] = p->ring[p->head];
            p->ring[p->head] = NULL;
            p->head = (p->head + 1) % p->cfg.queue_cap;
        }
        p->count -= n;
        pthread_mutex_unlock(&p->mu);
        run_batch(p, &s, n);
    }
    free(s.batch), free(s.texts), free(s.slot), free(s.ref);
    return NULL;
}

static void pool_free(verify_pool *p) {
    for (int i = 0; i < p->count; i++) job_free(p->ring[(p->head + i) % p->cfg.queue_cap]);
    free(p->ring);
    free(p->th);
    if (p->own_enc) donto_encoder_close(p->enc);
    free(p->model);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void stop_threads(verify_pool *p) {
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
    p->nth = 0;
}

int verify_pool_open(const verify_config *cfg, verify_pool **out, donto_err *err) {
    *out = NULL;
    if (!cfg || (!cfg->enc && !cfg->model_dir))
        return donto_seterrc(err, DONTO_E_INVALID, "verify pool: neither an encoder nor a model directory");
    if (!cfg->done) return donto_seterrc(err, DONTO_E_INVALID, "verify pool: no done callback");
    verify_config d;
    verify_config_default(&d);
    verify_pool *p = calloc(1, sizeof *p);
    if (!p) return donto_seterrc(err, DONTO_E_NOMEM, "verify pool: out of memory");
    p->cfg = *cfg;
    if (p->cfg.engine_threads <= 0) p->cfg.engine_threads = d.engine_threads;
    if (p->cfg.threads <= 0) p->cfg.threads = d.threads;
    if (p->cfg.queue_cap <= 0) p->cfg.queue_cap = d.queue_cap;
    if (p->cfg.batch_max <= 0) p->cfg.batch_max = d.batch_max;
    if (!(p->cfg.min_cosine > 0)) p->cfg.min_cosine = d.min_cosine;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->cfg.model_dir = NULL; /* not kept: only used here */
    p->model = cfg->model ? strdup(cfg->model) : NULL;
    p->cfg.model = p->model;
    p->ring = calloc((size_t)p->cfg.queue_cap, sizeof *p->ring);
    p->th = calloc((size_t)p->cfg.threads, sizeof *p->th);
    if ((cfg->model && !p->model) || !p->ring || !p->th) {
        pool_free(p);
        return donto_seterrc(err, DONTO_E_NOMEM, "verify pool: out of memory");
    }
    if (cfg->enc) {
        p->enc = cfg->enc;
    } else {
        donto_encoder_opts o;
        donto_encoder_default_opts(&o);
        o.threads = p->cfg.engine_threads;
        o.precision = DONTO_PREC_FP32;
        o.device = DONTO_DEVICE_CPU;
        o.isa = (donto_isa)p->cfg.isa;
        if (donto_encoder_open(cfg->model_dir, &o, &p->enc, err) != 0) {
            pool_free(p);
            return donto_preerr(err, "verify pool");
        }
        p->own_enc = 1;
    }
    p->cfg.enc = p->enc;
    p->dim = donto_encoder_dim(p->enc);
    for (int i = 0; i < p->cfg.threads; i++) {
        int rc = pthread_create(&p->th[i], NULL, pool_thread, p);
        if (rc != 0) {
            stop_threads(p);
            pool_free(p);
            return donto_seterr(err, "verify pool: cannot start thread %d: %s", i, strerror(rc));
        }
        p->nth++;
    }
    DLOG_INFO("verify pool: %d thread(s), queue %d, batch %d, min cosine %.4f, dim %d", p->cfg.threads,
              p->cfg.queue_cap, p->cfg.batch_max, (double)p->cfg.min_cosine, p->dim);
    *out = p;
    return 0;
}

int verify_push(verify_pool *p, const verify_job *job) {
    if (!job || job->dims < 0 || (job->dims > 0 && !job->vec) || !job->text) return -1;
    vjob *v = NULL;
    int skip = p->cfg.model && job->model && strcmp(p->cfg.model, job->model) != 0;
    if (!skip) {
        v = job_copy(job);
        if (v) v->t_push = donto_now();
    }
    pthread_mutex_lock(&p->mu);
    if (!v || p->closing || p->count >= p->cfg.queue_cap) {
        p->dropped++;
        pthread_mutex_unlock(&p->mu);
        job_free(v);
        return 1;
    }
    p->ring[(p->head + p->count) % p->cfg.queue_cap] = v;
    p->count++;
    p->accepted++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void verify_pool_stats(verify_pool *p, verify_stats *out) {
    pthread_mutex_lock(&p->mu);
    out->queued = p->count;
    out->accepted = p->accepted;
    out->done = p->done;
    out->passed = p->passed;
    out->failed = p->failed;
    out->dropped = p->dropped;
    out->mean_latency_ms = p->done ? p->lat_sum_ms / (double)p->done : 0;
    out->max_latency_ms = p->lat_max_ms;
    pthread_mutex_unlock(&p->mu);
}

void verify_pool_close_stats(verify_pool *p, verify_stats *last) {
    if (!p) return;
    stop_threads(p);
    if (p->count) DLOG_INFO("verify pool: closing with %d job(s) queued: dropped (not checked)", p->count);
    p->dropped += p->count; /* no thread left: no lock needed, but stats takes it */
    if (last) {
        verify_pool_stats(p, last);
        last->queued = 0;
    }
    pool_free(p);
}

void verify_pool_close(verify_pool *p) { verify_pool_close_stats(p, NULL); }
