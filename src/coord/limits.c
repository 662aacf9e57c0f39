/* donto-accel coordinator: fair limits per token; see limits.h.
 *
 * One mutex over two bounded hash tables (chained, FNV-1a): tokens (rate
 * buckets and the outstanding ledger) and workers (batch size). The work
 * under the lock is a hash lookup and a few additions: far below the cost of
 * the store call each request makes anyway. */
#define _POSIX_C_SOURCE 200809L
#include "limits.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_BUCKETS 4096
#define TABLE_MAX 65536          /* entries per table */
#define IDLE_DROP_MS (600 * 1000) /* an entry unused this long may be dropped */
#define LEDGER_MAX 64            /* lease entries kept per token (older ones merged) */
#define BATCH_UNSET 0

typedef struct bucket {
    double level; /* tokens available */
    int64_t at;   /* when level was computed */
} bucket;

typedef struct lease_entry {
    int64_t expires;
    int64_t left;
} lease_entry;

typedef struct entry {
    struct entry *next;
    char *key;
    int64_t seen;
    /* tokens */
    bucket lease, report;
    lease_entry ledger[LEDGER_MAX];
    int nledger;
    int64_t pending_checks;
    /* workers */
    int batch; /* current cap, BATCH_UNSET: none */
} entry;

typedef struct table {
    entry *b[TABLE_BUCKETS];
    size_t n;
} table;

struct coord_limits {
    pthread_mutex_t mu;
    coord_limits_config cfg;
    table tokens, workers;
};

static uint32_t fnv(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void table_free(table *t) {
    for (size_t i = 0; i < TABLE_BUCKETS; i++)
        for (entry *e = t->b[i], *nx; e; e = nx) {
            nx = e->next;
            free(e->key);
            free(e);
        }
    memset(t, 0, sizeof *t);
}

/* Drop entries idle for IDLE_DROP_MS (called when the table is full). */
static void table_prune(table *t, int64_t now) {
    for (size_t i = 0; i < TABLE_BUCKETS; i++)
        for (entry **pp = &t->b[i]; *pp;) {
            entry *e = *pp;
            if (now - e->seen > IDLE_DROP_MS) {
                *pp = e->next;
                free(e->key);
                free(e);
                t->n--;
            } else {
                pp = &e->next;
            }
        }
}

/* The entry for key, made when absent; NULL when the table is full (or no
 * memory): the caller then applies no per-key state. */
static entry *table_get(table *t, const char *key, double burst_lease, double burst_report, int64_t now) {
    uint32_t h = fnv(key) % TABLE_BUCKETS;
    for (entry *e = t->b[h]; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            e->seen = now;
            return e;
        }
    if (t->n >= TABLE_MAX) table_prune(t, now);
    if (t->n >= TABLE_MAX) return NULL;
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key))) {
        free(e);
        return NULL;
    }
    e->seen = now;
    e->lease = (bucket){burst_lease, now};
    e->report = (bucket){burst_report, now};
    e->next = t->b[h];
    t->b[h] = e;
    t->n++;
    return e;
}

coord_limits *limits_new(const coord_limits_config *cfg) {
    coord_limits *L = calloc(1, sizeof *L);
    if (!L) return NULL;
    if (pthread_mutex_init(&L->mu, NULL)) {
        free(L);
        return NULL;
    }
    L->cfg = *cfg;
    return L;
}

void limits_free(coord_limits *L) {
    if (!L) return;
    table_free(&L->tokens);
    table_free(&L->workers);
    pthread_mutex_destroy(&L->mu);
    free(L);
}

/* Refill b at rate per ms up to burst; take one if there is one. Returns 1
 * when taken, else 0 with the seconds until one is there. */
static int bucket_take(bucket *b, double per_ms, double burst, int64_t now, int *retry_s) {
    if (now > b->at) b->level = fmin(burst, b->level + (double)(now - b->at) * per_ms);
    b->at = now;
    if (b->level >= 1.0) {
        b->level -= 1.0;
        return 1;
    }
    double wait_ms = (1.0 - b->level) / per_ms;
    *retry_s = (int)ceil(wait_ms / 1000.0);
    if (*retry_s < 1) *retry_s = 1;
    return 0;
}

/* Items still leased on e's ledger, dropping expired entries. */
static int64_t ledger_outstanding(entry *e, int64_t now) {
    int64_t sum = 0;
    int k = 0;
    for (int i = 0; i < e->nledger; i++)
        if (e->ledger[i].expires > now && e->ledger[i].left > 0) {
            e->ledger[k++] = e->ledger[i];
            sum += e->ledger[i].left;
        }
    e->nledger = k;
    return sum;
}

int limits_lease_allow(coord_limits *L, const char *token, const char *worker, int want, int64_t now_ms,
                       int *retry_after_s, const char **why) {
    int allowed = want;
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    if (t && L->cfg.lease_per_s > 0 &&
        !bucket_take(&t->lease, L->cfg.lease_per_s / 1000.0, L->cfg.lease_burst, now_ms, retry_after_s)) {
        *why = "rate";
        allowed = 0;
    }
    if (t && allowed && L->cfg.max_outstanding > 0) {
        int64_t out = ledger_outstanding(t, now_ms);
        int64_t room = L->cfg.max_outstanding - out;
        if (room <= 0) {
            /* Until the first lease held runs out (or is settled sooner). */
            int64_t first = INT64_MAX;
            for (int i = 0; i < t->nledger; i++)
                if (t->ledger[i].expires < first) first = t->ledger[i].expires;
            int64_t s = first == INT64_MAX ? 1 : (first - now_ms + 999) / 1000;
            *retry_after_s = s < 1 ? 1 : s > 3600 ? 3600 : (int)s;
            *why = "outstanding";
            allowed = 0;
        } else if (room < allowed) {
            allowed = (int)room;
        }
    }
    if (allowed && worker) {
        entry *w = table_get(&L->workers, worker, 0, 0, now_ms);
        if (w && w->batch != BATCH_UNSET && w->batch < allowed) allowed = w->batch;
    }
    pthread_mutex_unlock(&L->mu);
    return allowed;
}

void limits_leased(coord_limits *L, const char *token, size_t n, int64_t now_ms, int64_t expires_ms) {
    if (n == 0) return;
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    if (t) {
        ledger_outstanding(t, now_ms);
        if (t->nledger == LEDGER_MAX) {
            /* Merge the two oldest: the later expiry, the items summed. */
            t->ledger[1].left += t->ledger[0].left;
            if (t->ledger[0].expires > t->ledger[1].expires) t->ledger[1].expires = t->ledger[0].expires;
            memmove(&t->ledger[0], &t->ledger[1], (size_t)(LEDGER_MAX - 1) * sizeof t->ledger[0]);
            t->nledger--;
        }
        t->ledger[t->nledger++] = (lease_entry){expires_ms, (int64_t)n};
    }
    pthread_mutex_unlock(&L->mu);
}

void limits_settled(coord_limits *L, const char *token, const char *worker, size_t n, size_t expired,
                    int64_t now_ms) {
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    if (t) {
        int64_t left = (int64_t)n;
        for (int i = 0; i < t->nledger && left > 0; i++) {
            int64_t d = t->ledger[i].left < left ? t->ledger[i].left : left;
            t->ledger[i].left -= d;
            left -= d;
        }
        ledger_outstanding(t, now_ms);
    }
    if (worker && n > 0) {
        entry *w = table_get(&L->workers, worker, 0, 0, now_ms);
        if (w) {
            if (expired > 0) {
                /* Its batch outlived its lease: half of what it settled. */
                int half = (int)(n / 2);
                w->batch = half < 1 ? 1 : half;
            } else if (w->batch != BATCH_UNSET) {
                w->batch = w->batch > (1 << 20) ? w->batch : w->batch * 2;
                if (w->batch >= 1024) w->batch = BATCH_UNSET;
            }
        }
    }
    pthread_mutex_unlock(&L->mu);
}

void limits_extended(coord_limits *L, const char *token, int64_t now_ms, int64_t expires_ms) {
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    if (t)
        for (int i = 0; i < t->nledger; i++)
            if (t->ledger[i].expires > now_ms && t->ledger[i].expires < expires_ms) t->ledger[i].expires = expires_ms;
    pthread_mutex_unlock(&L->mu);
}

int limits_report_allow(coord_limits *L, const char *token, int64_t now_ms, int *retry_after_s) {
    int ok = 1;
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    if (t && L->cfg.report_per_min > 0)
        ok = bucket_take(&t->report, L->cfg.report_per_min / 60000.0, L->cfg.report_burst, now_ms, retry_after_s);
    pthread_mutex_unlock(&L->mu);
    return ok;
}

int64_t limits_checks_pending(coord_limits *L, const char *token, int64_t delta, int64_t now_ms) {
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    int64_t n = 0;
    if (t) {
        t->pending_checks += delta;
        if (t->pending_checks < 0) t->pending_checks = 0;
        n = t->pending_checks;
    }
    pthread_mutex_unlock(&L->mu);
    return n;
}

int64_t limits_outstanding(coord_limits *L, const char *token, int64_t now_ms) {
    pthread_mutex_lock(&L->mu);
    entry *t = table_get(&L->tokens, token, L->cfg.lease_burst, L->cfg.report_burst, now_ms);
    int64_t n = t ? ledger_outstanding(t, now_ms) : 0;
    pthread_mutex_unlock(&L->mu);
    return n;
}
