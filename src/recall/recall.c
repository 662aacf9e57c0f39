/* Recall over the store: exact or ANN, index kept in step with the stored
 * vectors by a high-water mark. See include/donto/recall.h.
 *
 * Locks: r->rw guards every coll (queries read-lock it for the search; a
 * swap or an add write-locks it briefly); r->build[t] serialises the work
 * of bringing target t in step (reading the store, building), which runs
 * outside r->rw on a private coll that is swapped in when done; the
 * fleet's advisory lock (RECALL_LOCK_KEY) is taken inside r->build[t]. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/models.h"
#include "donto/recall.h"
#include "donto/substrate.h"
#include "donto/vecfile.h"

/* One target's collection as this process last saw it. */
typedef struct coll {
    int loaded;          /* the fields below describe something */
    int64_t count;       /* high-water mark: vectors covered ... */
    int64_t max_created; /* ... and the latest created among them */
    int dims;
    char **ids; /* [n], row order of vecs / labels of ann */
    size_t n, cap;
    float *vecs;       /* [n * dims] while exact; NULL once ann is built */
    donto_ann *ann;    /* NULL while exact */
    donto_vecfile *vf; /* ANN: the float32 rows (re-rank source) */
} coll;

struct donto_recall {
    donto_encoder *enc;
    char *model;
    char *prefix;
    size_t ann_min;
    int exact;
    donto_ann_opts ann;
    pthread_rwlock_t rw;
    pthread_mutex_t build[DONTO_TARGET_N];
    coll c[DONTO_TARGET_N];
    /* The last refusal by the memory bound: the mark it was for, and why
     * (a query at the same mark gets the message without re-reading). */
    int64_t refused_count[DONTO_TARGET_N], refused_max[DONTO_TARGET_N];
    char refused_msg[DONTO_TARGET_N][640];
    void (*hook)(void *);
    void *hook_arg;
};

void donto_recall_set_rebuild_hook(donto_recall *r, void (*hook)(void *arg), void *arg) {
    r->hook = hook;
    r->hook_arg = arg;
}

static void coll_reset(coll *c) {
    for (size_t i = 0; i < c->n; i++) free(c->ids[i]);
    free(c->ids);
    free(c->vecs);
    donto_ann_free(c->ann);
    donto_vecfile_free(c->vf);
    memset(c, 0, sizeof *c);
}

void donto_recall_hits_free(donto_recall_hit *h, size_t n) {
    if (!h) return;
    for (size_t i = 0; i < n; i++) free(h[i].item_id), free(h[i].text);
    free(h);
}

int donto_recall_open(donto_encoder *enc, const donto_recall_opts *o, donto_recall **out, donto_err *err) {
    *out = NULL;
    if (!o || !o->model_name || !*o->model_name) return donto_seterr(err, "recall: no model name given");
    donto_recall *r = donto_xcalloc(1, sizeof *r);
    r->enc = enc;
    r->model = donto_xstrdup(o->model_name);
    r->prefix = o->index_prefix ? donto_xstrdup(o->index_prefix) : NULL;
    r->ann_min = o->ann_min ? o->ann_min : DONTO_RECALL_ANN_MIN;
    r->exact = o->exact;
    if (o->ann)
        r->ann = *o->ann;
    else
        donto_ann_default_opts(&r->ann);
    if (o->index_memory_gb > 0) r->ann.memory_gb = o->index_memory_gb;
    if (pthread_rwlock_init(&r->rw, NULL)) {
        free(r->model), free(r->prefix), free(r);
        return donto_seterr(err, "recall: cannot create a lock");
    }
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        pthread_mutex_init(&r->build[t], NULL);
        r->refused_count[t] = -1;
    }
    *out = r;
    return 0;
}

void donto_recall_close(donto_recall *r) {
    if (!r) return;
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        coll_reset(&r->c[t]);
        pthread_mutex_destroy(&r->build[t]);
    }
    pthread_rwlock_destroy(&r->rw);
    free(r->model);
    free(r->prefix);
    free(r);
}

/* ---- the id map file ------------------------------------------------------- */
/* "DONTOIDS" | u32 version | u32 dims | i64 count | i64 max_created | u64 n |
 * u32 model length | model | n x (u32 length | id bytes) | u64 hash of all
 * that precedes it. Native little-endian fields (x86-64, aarch64); the hash
 * catches damage, a different layout fails the magic/version/hash checks. */

#define IDS_VERSION 1u

typedef struct {
    FILE *f;
    uint64_t h;
    int bad;
} hfile;

static void hmix(uint64_t *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 1099511628211ULL;
}

static void hw(hfile *w, const void *p, size_t n) {
    if (fwrite(p, 1, n, w->f) != n) w->bad = 1;
    hmix(&w->h, p, n);
}

static int hr(hfile *r, void *p, size_t n) {
    if (fread(p, 1, n, r->f) != n) return -1;
    hmix(&r->h, p, n);
    return 0;
}

static char *path_of(const donto_recall *r, donto_target t, const char *ext) {
    size_t n = strlen(r->prefix) + strlen(donto_target_name(t)) + strlen(ext) + 3;
    char *p = donto_xmalloc(n);
    snprintf(p, n, "%s.%s.%s", r->prefix, donto_target_name(t), ext);
    return p;
}

static int ids_save(const donto_recall *r, const coll *c, const char *path, donto_err *err) {
    size_t tl = strlen(path) + 5;
    char *tmp = donto_xmalloc(tl);
    snprintf(tmp, tl, "%s.tmp", path);
    hfile w = {fopen(tmp, "wb"), 1469598103934665603ULL, 0};
    if (!w.f) {
        donto_seterr(err, "recall: %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    uint32_t ver = IDS_VERSION, dims = (uint32_t)c->dims, ml = (uint32_t)strlen(r->model);
    uint64_t n = c->n;
    hw(&w, "DONTOIDS", 8);
    hw(&w, &ver, 4);
    hw(&w, &dims, 4);
    hw(&w, &c->count, 8);
    hw(&w, &c->max_created, 8);
    hw(&w, &n, 8);
    hw(&w, &ml, 4);
    hw(&w, r->model, ml);
    for (size_t i = 0; i < c->n && !w.bad; i++) {
        uint32_t l = (uint32_t)strlen(c->ids[i]);
        hw(&w, &l, 4);
        hw(&w, c->ids[i], l);
    }
    uint64_t h = w.h;
    if (fwrite(&h, 8, 1, w.f) != 1) w.bad = 1;
    if (fclose(w.f) != 0) w.bad = 1;
    if (w.bad || rename(tmp, path) != 0) {
        donto_seterr(err, "recall: write %s: %s", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

/* Load the id map into c (ids, n, dims, count, max_created). */
static int ids_load(const donto_recall *r, coll *c, const char *path, donto_err *err) {
    hfile f = {fopen(path, "rb"), 1469598103934665603ULL, 0};
    if (!f.f) return donto_seterr(err, "recall: %s: %s", path, strerror(errno));
    char magic[8];
    uint32_t ver, dims, ml;
    uint64_t n;
    int64_t count, maxc;
    int rc = -1;
    if (hr(&f, magic, 8) || memcmp(magic, "DONTOIDS", 8)) {
        donto_seterr(err, "recall: %s: not an id map", path);
        goto out;
    }
    if (hr(&f, &ver, 4) || hr(&f, &dims, 4) || hr(&f, &count, 8) || hr(&f, &maxc, 8) || hr(&f, &n, 8) ||
        hr(&f, &ml, 4)) {
        donto_seterr(err, "recall: %s: truncated", path);
        goto out;
    }
    if (ver != IDS_VERSION || ml > 4096 || n > ((uint64_t)1 << 40) || dims == 0 || dims > 65536) {
        donto_seterr(err, "recall: %s: unsupported or damaged header", path);
        goto out;
    }
    char model[4097];
    if (hr(&f, model, ml)) {
        donto_seterr(err, "recall: %s: truncated", path);
        goto out;
    }
    model[ml] = 0;
    coll_reset(c);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t l;
        if (hr(&f, &l, 4) || l > (1u << 20)) {
            donto_seterr(err, "recall: %s: truncated or damaged at id %llu", path, (unsigned long long)i);
            goto out;
        }
        char *id = malloc((size_t)l + 1);
        if (!id || hr(&f, id, l)) {
            free(id);
            donto_seterr(err, "recall: %s: truncated at id %llu", path, (unsigned long long)i);
            goto out;
        }
        id[l] = 0;
        if (c->n == c->cap) c->ids = donto_xrealloc(c->ids, (c->cap = c->cap ? 2 * c->cap : 1024) * sizeof *c->ids);
        c->ids[c->n++] = id;
    }
    uint64_t want = f.h, h;
    if (fread(&h, 8, 1, f.f) != 1 || h != want || fgetc(f.f) != EOF) {
        donto_seterr(err, "recall: %s: damaged (checksum)", path);
        goto out;
    }
    /* Only now is the header known to be intact. */
    if (strcmp(model, r->model) != 0) {
        donto_seterr(err, "recall: %s: built for model %s, not %s", path, model, r->model);
        goto out;
    }
    c->dims = (int)dims;
    c->count = count;
    c->max_created = maxc;
    rc = 0;
out:
    if (rc) coll_reset(c);
    fclose(f.f);
    return rc;
}

/* ---- keeping a collection in step with the store -------------------------- */

/* A long rebuild's progress in the log (10M vectors: about an hour on 2
 * cores): phases "read" (the store's rows into the vector file), then
 * the index's "train" and "add"; a line when 30 s have passed since the
 * last one, so a small build logs only its "built" line. */
typedef struct {
    const char *target;
    double t0, last;
    size_t rows; /* the store's count, for the "read" phase */
} build_log;
static void build_progress(void *ctx, const char *phase, size_t done, size_t total) {
    build_log *b = ctx;
    double now = donto_now();
    if (now - b->last < 30) return;
    b->last = now;
    DLOG_INFO("recall: building the %s index: %s, %zu of %zu vectors (%.0f%%), %.0f s so far", b->target, phase,
              done, total, total ? 100.0 * (double)done / (double)total : 100.0, now - b->t0);
}

/* Read every vector of (t, model) after the cursor into c, a coll no
 * query sees (a rebuild's new one, or the rows to add): ids appended, and
 * vectors appended to c->vf when it has one (a rebuild of an ANN-sized
 * collection: streamed to disk, never all in memory), else to c->vecs.
 * Advances c's mark by what was read. bl: a rebuild's progress log, or NULL. */
static int read_after(donto_recall *r, donto_store *s, donto_target t, coll *c, int64_t after, build_log *bl,
                      donto_err *err) {
    const char *after_id = NULL;
    char *last_id = NULL;
    int64_t cur = after;
    for (;;) {
        donto_vec_page p;
        if (donto_store_vectors_page(s, t, r->model, cur, after_id, DONTO_RECALL_PAGE, &p, err)) {
            free(last_id);
            return -1;
        }
        if (p.n && c->dims && p.dims != c->dims) {
            donto_seterr(err, "recall: %s vectors of %s are %d-d, the collection is %d-d", donto_target_name(t),
                         r->model, p.dims, c->dims);
            donto_vec_page_free(&p);
            free(last_id);
            return -1;
        }
        if (p.n) c->dims = p.dims;
        size_t d = (size_t)c->dims;
        if (c->n + p.n > c->cap) {
            while (c->cap < c->n + p.n) c->cap = c->cap ? 2 * c->cap : 1024;
            c->ids = donto_xrealloc(c->ids, c->cap * sizeof *c->ids);
            if (!c->vf) c->vecs = donto_xrealloc(c->vecs, c->cap * d * sizeof *c->vecs);
        }
        if (c->vf) {
            if (donto_vecfile_append(c->vf, p.vecs, p.n, err)) {
                donto_vec_page_free(&p);
                free(last_id);
                return -1;
            }
            donto_vecfile_drop(c->vf, c->n, p.n);
        } else if (p.n) {
            memcpy(c->vecs + c->n * d, p.vecs, p.n * d * sizeof *p.vecs);
        }
        for (size_t i = 0; i < p.n; i++) {
            c->ids[c->n++] = p.item_ids[i];
            p.item_ids[i] = NULL;
            if (p.created[i] > c->max_created) c->max_created = p.created[i];
        }
        c->count += (int64_t)p.n;
        if (bl) build_progress(bl, "read", c->n, bl->rows);
        int last = p.n < DONTO_RECALL_PAGE;
        if (!last) {
            cur = p.created[p.n - 1];
            free(last_id);
            last_id = donto_xstrdup(c->ids[c->n - 1]);
            after_id = last_id;
        }
        p.n = 0;
        donto_vec_page_free(&p);
        if (last) break;
    }
    free(last_id);
    return 0;
}

/* Save c's index files (under r->build[t]): the vector file is renamed into
 * place first, then the index, then the ids: a crash in between leaves
 * files whose counts disagree, which the next load rejects (and rebuilds). */
static void save_index(donto_recall *r, donto_target t, coll *c) {
    if (!r->prefix || !c->ann) return;
    char *fa = path_of(r, t, "faiss"), *fi = path_of(r, t, "ids"), *fv = path_of(r, t, "vec");
    donto_err e = {0};
    if ((c->vf && donto_vecfile_rename(c->vf, fv, &e)) || donto_ann_save(c->ann, fa, &e) || ids_save(r, c, fi, &e))
        DLOG_WARN("recall: index not saved (%s); it stays in memory", e.msg);
    free(fa), free(fi), free(fv);
}

/* Try the saved index into nc (a private coll); on any problem say why
 * and leave nc empty. */
static void try_load(donto_recall *r, donto_target t, coll *nc) {
    if (!r->prefix || r->exact) return;
    char *fa = path_of(r, t, "faiss"), *fi = path_of(r, t, "ids"), *fv = path_of(r, t, "vec");
    donto_err e = {0};
    FILE *probe = fopen(fi, "rb");
    if (!probe) goto out;
    fclose(probe);
    if (ids_load(r, nc, fi, &e) == 0) {
        int ok = donto_ann_load(fa, nc->dims, &r->ann, &nc->ann, &e) == 0 && donto_ann_ntotal(nc->ann) == nc->n &&
                 (int64_t)nc->n == nc->count;
        if (!ok && nc->ann)
            snprintf(e.msg, sizeof e.msg, "%s holds %zu vectors, %s %zu ids", fa, donto_ann_ntotal(nc->ann), fi, nc->n);
        /* The float32 rows: required to re-rank a compressed index; an
         * IVF-Flat index saved before they existed is used without. */
        if (ok) {
            FILE *pv = fopen(fv, "rb");
            if (pv || donto_ann_lossy(nc->ann)) {
                if (pv) fclose(pv);
                ok = donto_vecfile_open(fv, nc->dims, &nc->vf, &e) == 0;
                if (ok && donto_vecfile_n(nc->vf) != nc->n) {
                    snprintf(e.msg, sizeof e.msg, "%s holds %zu vectors, %s %zu ids", fv, donto_vecfile_n(nc->vf), fi,
                             nc->n);
                    ok = 0;
                }
                if (ok && donto_ann_lossy(nc->ann)) ok = donto_ann_attach(nc->ann, nc->vf, &e) == 0;
            }
        }
        if (ok)
            nc->loaded = 1;
        else
            coll_reset(nc);
    }
    if (!nc->loaded) DLOG_WARN("recall: saved %s index not used (%s); rebuilding", donto_target_name(t), e.msg);
out:
    free(fa), free(fi), free(fv);
}

/* Swap nc into r->c[t] under the write lock; nc gets the old one, to free
 * outside the lock (no query can be using it once the lock was held). */
static void swap_in(donto_recall *r, donto_target t, coll *nc) {
    pthread_rwlock_wrlock(&r->rw);
    coll old = r->c[t];
    r->c[t] = *nc;
    *nc = old;
    pthread_rwlock_unlock(&r->rw);
}

/* Rebuild target t from every stored row, outside r->rw: stream the rows
 * (to a vector file when the collection is ANN-sized), build, swap in. The
 * old index keeps answering meanwhile. cnt is the store's count. */
static int rebuild(donto_recall *r, donto_store *s, donto_target t, int64_t cnt, int64_t maxc,
                   donto_recall_info *info, donto_err *err) {
    coll nc = {0};
    nc.max_created = INT64_MIN;
    int ann = !r->exact && cnt >= (int64_t)r->ann_min;
    int dims = r->c[t].dims; /* read under r->build[t]: only its holder writes c */
    if (ann && dims) {
        /* Refuse before reading gigabytes when the bound cannot hold it. */
        char kind[128];
        if (donto_ann_choose((size_t)cnt, dims, &r->ann, kind, sizeof kind, NULL, err)) goto refused;
    }
    if (ann) {
        /* The file's dimension is that of the first row: peek at it. */
        if (!dims) {
            donto_vec_page p;
            if (donto_store_vectors_page(s, t, r->model, INT64_MIN, NULL, 1, &p, err)) return -1;
            dims = p.n ? p.dims : 0;
            donto_vec_page_free(&p);
            if (dims) {
                char kind[128];
                if (donto_ann_choose((size_t)cnt, dims, &r->ann, kind, sizeof kind, NULL, err)) goto refused;
            }
        }
        if (dims) {
            char *tmp = NULL;
            if (r->prefix) {
                char *fv = path_of(r, t, "vec");
                size_t l = strlen(fv) + 5;
                tmp = donto_xmalloc(l);
                snprintf(tmp, l, "%s.tmp", fv);
                free(fv);
            }
            int rc = donto_vecfile_create(tmp, dims, &nc.vf, err);
            free(tmp);
            if (rc) return -1;
        }
    }
    double t_read = donto_now();
    build_log bl = {donto_target_name(t), t_read, t_read, cnt > 0 ? (size_t)cnt : 0};
    if (read_after(r, s, t, &nc, INT64_MIN, &bl, err)) goto fail;
    nc.loaded = 1;
    info->rebuilt = 1;
    info->added = nc.n;
    if (r->hook) r->hook(r->hook_arg);
    if (nc.vf && nc.n) {
        double t0 = donto_now();
        donto_ann_opts o = r->ann;
        o.progress = build_progress, o.progress_ctx = &bl;
        if (donto_ann_build_file(nc.vf, &o, &nc.ann, err)) {
            if (strstr(err->msg, "refused")) goto refused;
            goto fail;
        }
        char desc[160];
        donto_ann_describe(nc.ann, desc, sizeof desc);
        DLOG_INFO("recall: built the %s index (%s, %.2f GB) over %zu vectors in %.1f s", donto_target_name(t), desc,
                  (double)donto_ann_memory(nc.ann) / 1e9, nc.n, donto_now() - t0);
    } else if (nc.vf) {
        donto_vecfile_free(nc.vf);
        nc.vf = NULL;
    }
    swap_in(r, t, &nc);
    coll_reset(&nc); /* the old one */
    r->refused_count[t] = -1;
    save_index(r, t, &r->c[t]);
    return 0;
refused:
    /* The bound cannot hold this collection: drop the old index too, so
     * its memory goes and every query says why. */
    snprintf(r->refused_msg[t], sizeof r->refused_msg[t], "recall: the %s collection: %s", donto_target_name(t),
             err->msg);
    r->refused_count[t] = cnt, r->refused_max[t] = maxc;
    DLOG_WARN("%s", r->refused_msg[t]);
    coll_reset(&nc);
    swap_in(r, t, &nc);
    coll_reset(&nc);
    return donto_seterr(err, "%s", r->refused_msg[t]);
fail:
    coll_reset(&nc);
    return -1;
}

/* Bring r->c[t] in step with the store's mark cnt, maxc (under r->build[t]
 * and the fleet's lock, see refresh). */
static int refresh_locked(donto_recall *r, donto_store *s, donto_target t, int64_t cnt, int64_t maxc,
                          donto_recall_info *info, donto_err *err) {
    coll *c = &r->c[t]; /* only r->build[t]'s holder changes it: read freely */
    if (r->refused_count[t] == cnt && r->refused_max[t] == maxc)
        return donto_seterr(err, "%s", r->refused_msg[t]);
    if (!c->loaded) {
        coll nc = {0};
        try_load(r, t, &nc);
        if (nc.loaded) {
            info->loaded = 1;
            swap_in(r, t, &nc);
        }
        coll_reset(&nc);
    }
    if (c->loaded && cnt == c->count && maxc == c->max_created &&
        !(c->ann && donto_ann_stale(c->ann, c->n, &r->ann)))
        return 0;
    /* Only new rows since the mark, and no reason to rebuild? Add them. */
    int add = c->loaded && cnt > c->count;
    if (add && c->ann && donto_ann_stale(c->ann, (size_t)cnt, &r->ann)) add = 0; /* grown ~4-fold: retrain */
    if (add && !c->ann && !r->exact && cnt >= (int64_t)r->ann_min) add = 0;    /* exact -> ANN */
    if (add) {
        int64_t newer, newmax;
        if (donto_store_vectors_mark(s, t, r->model, c->max_created, &newer, &newmax, err)) return -1;
        if (newer == cnt - c->count) {
            coll d = {0}; /* the new rows, in memory (few, or we would rebuild) */
            d.dims = c->dims;
            d.max_created = c->max_created;
            if (read_after(r, s, t, &d, c->max_created, NULL, err)) {
                coll_reset(&d);
                return -1;
            }
            info->added = d.n;
            int rc = 0;
            pthread_rwlock_wrlock(&r->rw);
            if (d.n) {
                size_t dd = (size_t)c->dims ? (size_t)c->dims : (size_t)d.dims;
                if (c->ann) {
                    if ((c->vf && donto_vecfile_append(c->vf, d.vecs, d.n, err)) ||
                        donto_ann_add(c->ann, d.vecs, d.n, err))
                        rc = -1;
                } else {
                    c->vecs = donto_xrealloc(c->vecs, (c->n + d.n) * dd * sizeof *c->vecs);
                    memcpy(c->vecs + c->n * dd, d.vecs, d.n * dd * sizeof *d.vecs);
                }
                if (!rc) {
                    c->dims = (int)dd;
                    if (c->n + d.n > c->cap) {
                        c->cap = c->n + d.n;
                        c->ids = donto_xrealloc(c->ids, c->cap * sizeof *c->ids);
                    }
                    for (size_t i = 0; i < d.n; i++) c->ids[c->n++] = d.ids[i], d.ids[i] = NULL;
                    d.n = 0;
                }
            }
            if (!rc) {
                c->count += d.count;
                if (d.max_created > c->max_created) c->max_created = d.max_created;
            }
            pthread_rwlock_unlock(&r->rw);
            coll_reset(&d);
            if (rc) { /* half-added: start clean next time */
                coll nc = {0};
                swap_in(r, t, &nc);
                coll_reset(&nc);
                return -1;
            }
            save_index(r, t, c);
            return 0;
        }
    }
    return rebuild(r, s, t, cnt, maxc, info, err);
}

/* The fleet's lock around loading, adding to and building a target's index
 * (docs/fleet.md): coordinators sharing a PostgreSQL database build one at a
 * time (each its own copy in memory), and with a shared --index never write
 * the files at once. Distinct from the migration lock (7316001). */
#define RECALL_LOCK_KEY 7316100

/* Bring r->c[t] in step with the store's mark (under r->build[t]). */
static int refresh(donto_recall *r, donto_store *s, donto_target t, int64_t cnt, int64_t maxc,
                   donto_recall_info *info, donto_err *err) {
    if (donto_store_lock(s, RECALL_LOCK_KEY + (int64_t)t, err)) return -1;
    int rc = refresh_locked(r, s, t, cnt, maxc, info, err);
    donto_err e = {0};
    if (donto_store_unlock(s, RECALL_LOCK_KEY + (int64_t)t, &e))
        DLOG_WARN("recall: releasing the %s index lock: %s", donto_target_name(t), e.msg);
    return rc;
}

int donto_recall_search_vec(donto_recall *r, donto_store *s, donto_target t, const float *q, int dim, size_t k,
                            donto_recall_hit **hits, size_t *n, donto_recall_info *info, donto_err *err) {
    *hits = NULL;
    *n = 0;
    donto_recall_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    if ((int)t < 0 || t >= DONTO_TARGET_N) return donto_seterr(err, "recall: bad target %d", (int)t);
    if (k == 0) return 0;
    coll *c = &r->c[t];
    /* The common case, nothing new, takes no lock but the read lock. */
    int64_t cnt, maxc;
    if (donto_store_vectors_mark(s, t, r->model, INT64_MIN, &cnt, &maxc, err)) return -1;
    pthread_rwlock_rdlock(&r->rw);
    int current = c->loaded && cnt == c->count && maxc == c->max_created, have = c->loaded;
    pthread_rwlock_unlock(&r->rw);
    if (!current) {
        if (!have) {
            /* Nothing to answer from yet: wait for whoever builds it. */
            pthread_mutex_lock(&r->build[t]);
            int rc = refresh(r, s, t, cnt, maxc, info, err);
            pthread_mutex_unlock(&r->build[t]);
            if (rc) return -1;
        } else if (pthread_mutex_trylock(&r->build[t]) == 0) {
            int rc = refresh(r, s, t, cnt, maxc, info, err);
            pthread_mutex_unlock(&r->build[t]);
            if (rc) return -1;
        } else {
            info->stale = 1; /* another request is at it: answer from what is there */
        }
    }
    pthread_rwlock_rdlock(&r->rw);
    int rc = -1;
    char **ids = NULL;
    float *scores = NULL;
    size_t got = 0;
    info->collection = c->n;
    if (c->n == 0) {
        rc = 0;
        goto out;
    }
    if (dim != c->dims) {
        donto_seterr(err, "recall: the query is %d-d but the stored %s vectors of %s are %d-d", dim,
                     donto_target_name(t), r->model, c->dims);
        goto out;
    }
    if (k > c->n) k = c->n;
    ids = donto_xcalloc(k, sizeof *ids);
    scores = donto_xmalloc(k * sizeof *scores);
    if (c->ann) {
        info->ann = 1;
        int64_t *lab = donto_xmalloc(k * sizeof *lab);
        float *sc = donto_xmalloc(k * sizeof *sc);
        if (donto_ann_search(c->ann, q, 1, k, sc, lab, err)) {
            free(lab), free(sc);
            goto out;
        }
        for (size_t i = 0; i < k; i++)
            if (lab[i] >= 0 && (size_t)lab[i] < c->n) {
                ids[got] = donto_xstrdup(c->ids[lab[i]]);
                scores[got++] = sc[i];
            }
        free(lab), free(sc);
    } else {
        donto_hit *h = donto_xmalloc(k * sizeof *h);
        got = donto_exact_topk(c->vecs, c->n, c->dims, q, k, h);
        for (size_t i = 0; i < got; i++) {
            ids[i] = donto_xstrdup(c->ids[h[i].index]);
            scores[i] = h[i].score;
        }
        free(h);
    }
    rc = 0;
out:
    pthread_rwlock_unlock(&r->rw);
    if (rc == 0 && got) {
        /* Texts outside the lock: the substrate is another module's table. */
        char **texts = donto_xcalloc(got, sizeof *texts);
        donto_err te = {0};
        if (donto_substrate_texts(s, t, (const char *const *)ids, got, texts, &te)) {
            DLOG_WARN("recall: texts unavailable (%s); showing item ids", te.msg);
            for (size_t i = 0; i < got; i++) free(texts[i]), texts[i] = NULL;
        }
        donto_recall_hit *h = donto_xcalloc(got, sizeof *h);
        for (size_t i = 0; i < got; i++) {
            h[i].target = t;
            h[i].item_id = ids[i];
            h[i].score = scores[i];
            h[i].text = texts[i];
        }
        free(texts);
        *hits = h;
        *n = got;
    } else if (ids) {
        for (size_t i = 0; i < got; i++) free(ids[i]);
    }
    free(ids);
    free(scores);
    return rc;
}

int donto_recall_query(donto_recall *r, donto_store *s, donto_target t, const char *query, size_t k,
                       donto_recall_hit **hits, size_t *n, donto_recall_info *info, donto_err *err) {
    *hits = NULL;
    *n = 0;
    if (!r->enc) return donto_seterr(err, "recall: no model loaded to embed the query");
    if (!query || !*query) return donto_seterr(err, "recall: empty query");
    int dim = donto_encoder_dim(r->enc);
    float *q = donto_xmalloc((size_t)dim * sizeof *q);
    int rc = donto_encoder_encode(r->enc, &query, NULL, 1, q, NULL, err);
    if (rc == 0) rc = donto_recall_search_vec(r, s, t, q, dim, k, hits, n, info, err);
    free(q);
    return rc;
}

char *donto_recall_model_name(const char *model_dir, const char *given) {
    if (given && *given) return donto_xstrdup(given);
    if (model_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model_name.txt", model_dir);
        FILE *f = fopen(path, "r");
        if (f) {
            char b[1024];
            char *got = fgets(b, sizeof b, f);
            fclose(f);
            if (got) {
                size_t n = strlen(b);
                while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ' || b[n - 1] == '\t')) b[--n] = 0;
                if (n) return donto_xstrdup(b);
            }
        }
    }
    return donto_xstrdup(DONTO_DEFAULT_MODEL);
}

char *donto_recall_default_prefix(const char *db_url) {
    if (!db_url || !strncmp(db_url, "postgres://", 11) || !strncmp(db_url, "postgresql://", 13) ||
        !strcmp(db_url, ":memory:") || !strncmp(db_url, "file:", 5))
        return NULL;
    return donto_xstrdup(db_url);
}

char *donto_recall_json(const char *query, donto_target t, const char *model, const donto_recall_info *info,
                        const donto_recall_hit *hits, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:f, s:o}", "target", donto_target_name(hits[i].target),
                                             "item_id", hits[i].item_id, "score", (double)hits[i].score, "text",
                                             hits[i].text ? json_string(hits[i].text) : json_null()));
    json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:I, s:o}", "query", query, "target", donto_target_name(t), "model",
                          model, "ann", info ? info->ann : 0, "collection",
                          (json_int_t)(info ? info->collection : 0), "hits", arr);
    /* json_pack drops a member whose value failed (json_string of bad
     * UTF-8 gives NULL): check the count so nothing is silently lost. */
    char *out = o && json_array_size(arr) == n ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out;
}
