/* donto-accel: the substrate's backend-independent logic: enqueue (keyset
 * batches: scan, render in C, bulk insert), retraction, display texts, and
 * the buffered writer the loaders use. See include/donto/substrate.h. */
#include "substrate_int.h"

#include <stdlib.h>
#include <string.h>

const int SUB_NCOLS[SUB_KIND_N] = {6, 3, 3, 3, 5};
const int SUB_SCAN_COLS[DONTO_TARGET_N] = {8, 3, 3, 2};

/* The substrate's SQL for each kind of database the store can be. */
static const sub_ops *const SUB_OPS[DONTO_DB_KIND_N] = {
    [DONTO_DB_SQLITE] = &SUB_SQLITE_OPS,
    [DONTO_DB_POSTGRES] = &SUB_PG_OPS,
};

const sub_ops *sub_ops_for(donto_store *s, donto_err *err) {
    donto_db db;
    if (donto_store_db(s, &db, err)) {
        donto_preerr(err, "substrate");
        return NULL;
    }
    if (db.kind < 0 || db.kind >= DONTO_DB_KIND_N || !SUB_OPS[db.kind]) {
        donto_seterrc(err, DONTO_E_INTERNAL, "substrate: no SQL for this kind of database (%d)", (int)db.kind);
        return NULL;
    }
    return SUB_OPS[db.kind];
}

struct sqlite3 *sub_sqlite(donto_store *s) {
    donto_db db;
    return donto_store_db(s, &db, NULL) == 0 ? db.sqlite : NULL;
}

struct pg_conn *sub_pg(donto_store *s) {
    donto_db db;
    return donto_store_db(s, &db, NULL) == 0 ? db.pg : NULL;
}

static char *strdup_or_null(const char *s) { return s ? donto_xstrdup(s) : NULL; }

void sub_rows_add(sub_rows *r, char **cells) {
    if (r->nrows == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->cell = donto_xrealloc(r->cell, r->cap * (size_t)r->ncols * sizeof *r->cell);
    }
    memcpy(r->cell + r->nrows * (size_t)r->ncols, cells, (size_t)r->ncols * sizeof *cells);
    r->nrows++;
}

void sub_rows_free(sub_rows *r) {
    for (size_t i = 0; i < r->nrows * (size_t)r->ncols; i++) free(r->cell[i]);
    free(r->cell);
    r->cell = NULL;
    r->nrows = r->cap = 0;
}

char *sub_render(donto_target t, const sub_rows *r, size_t row, const donto_render_opts *ro) {
#define C(i) sub_cell(r, row, i)
    switch (t) {
    case DONTO_TARGET_CLAIM: return donto_render_claim(C(1), C(2), C(3), C(4), C(5), C(6), C(7));
    case DONTO_TARGET_PREDICATE: return donto_render_predicate(C(0), C(1), C(2));
    case DONTO_TARGET_ENTITY: return donto_render_entity(C(0), C(1), C(2));
    case DONTO_TARGET_MEMORY_CHUNK:
        return donto_render_chunk(C(1), ro ? ro->tok : NULL, ro ? ro->chunk_cap : 0);
    default: return donto_xstrdup("");
    }
#undef C
}

/* ---- enqueue ---------------------------------------------------------------- */

int donto_substrate_enqueue(donto_store *s, int target, const char *model,
                            const donto_render_opts *ro, int batch, donto_progress_fn progress,
                            void *ctx, size_t *added, donto_err *err) {
    if (added) *added = 0;
    if (!model || !*model) return donto_seterr(err, "enqueue: no model name");
    if (target >= DONTO_TARGET_N) return donto_seterr(err, "enqueue: unknown target %d", target);
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;
    if (batch <= 0) batch = DONTO_ENQUEUE_BATCH;
    size_t total = 0;
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        if (target >= 0 && t != target) continue;
        if (ops->enqueue) {
            size_t got = 0;
            int rc = ops->enqueue(s, (donto_target)t, model, ro, batch, progress, ctx, total, &got,
                                  err);
            total += got;
            if (rc) {
                donto_preerr(err, "enqueue %s", donto_target_name((donto_target)t));
                if (added) *added = total;
                return -1;
            }
            continue;
        }
        char *after = NULL;
        for (;;) {
            /* One transaction per batch: scan and insert see one state, and
             * what is committed stays when a later batch fails. */
            if (ops->begin(s, err)) goto fail;
            sub_rows rows = {0};
            if (ops->scan(s, (donto_target)t, model, after, batch, &rows, err)) {
                ops->rollback(s);
                sub_rows_free(&rows);
                goto fail;
            }
            size_t n = rows.nrows, got = 0;
            const char **ids = donto_xmalloc((n ? n : 1) * sizeof *ids);
            char **texts = donto_xmalloc((n ? n : 1) * sizeof *texts);
            for (size_t i = 0; i < n; i++) {
                ids[i] = sub_cell(&rows, i, 0);
                texts[i] = sub_render((donto_target)t, &rows, i, ro);
            }
            int rc = ops->queue_put(s, (donto_target)t, model, ids, (const char *const *)texts, n,
                                    &got, err);
            for (size_t i = 0; i < n; i++) free(texts[i]);
            free(texts);
            if (rc == 0 && n) {
                free(after);
                after = donto_xstrdup(ids[n - 1]);
            }
            free(ids);
            sub_rows_free(&rows);
            if (rc) {
                ops->rollback(s);
                goto fail;
            }
            if (ops->commit(s, err)) goto fail;
            total += got;
            if (progress) progress(ctx, donto_target_name((donto_target)t), total, 0);
            if (n < (size_t)batch) break;
            continue;
        fail:
            free(after);
            donto_preerr(err, "enqueue %s", donto_target_name((donto_target)t));
            if (added) *added = total;
            return -1;
        }
        free(after);
    }
    if (added) *added = total;
    return 0;
}

/* ---- retract ---------------------------------------------------------------- */

int donto_substrate_retract(donto_store *s, const char *const *ids, size_t n, size_t *retracted,
                            donto_err *err) {
    return donto_substrate_retract_status(s, ids, n, retracted, NULL, err);
}

int donto_substrate_retract_status(donto_store *s, const char *const *ids, size_t n, size_t *retracted,
                                   donto_retract_status *status, donto_err *err) {
    if (retracted) *retracted = 0;
    int *st = status ? donto_xcalloc(n ? n : 1, sizeof *st) : NULL;
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;
    char(*norm)[37] = donto_xmalloc((n ? n : 1) * sizeof *norm);
    const char **pv = donto_xmalloc((n ? n : 1) * sizeof *pv);
    for (size_t i = 0; i < n; i++) {
        donto_statement_id(ids[i], norm[i]);
        pv[i] = norm[i];
    }
    size_t got = 0;
    int rc = ops->begin(s, err);
    if (rc == 0) {
        rc = ops->retract(s, pv, n, &got, st, err);
        if (rc == 0)
            rc = ops->commit(s, err);
        else
            ops->rollback(s);
    }
    free(pv);
    free(norm);
    for (size_t i = 0; st && rc == 0 && i < n; i++) status[i] = (donto_retract_status)st[i];
    free(st);
    if (rc) return -1;
    if (retracted) *retracted = got;
    return 0;
}

/* ---- texts ------------------------------------------------------------------ */

typedef struct id_row {
    const char *id;
    size_t row;
} id_row;

static int cmp_id_row(const void *a, const void *b) {
    return strcmp(((const id_row *)a)->id, ((const id_row *)b)->id);
}

int donto_substrate_texts_opts(donto_store *s, donto_target t, const char *const *item_ids,
                               size_t n, const donto_render_opts *ro, char **texts,
                               donto_err *err) {
    for (size_t i = 0; i < n; i++) texts[i] = NULL;
    if (t < 0 || t >= DONTO_TARGET_N) return donto_seterr(err, "texts: unknown target %d", (int)t);
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;
    if (n == 0) return 0;
    /* Claims: only uuids can name a statement (others are simply unknown);
     * compare in lowercase, the form the database returns. */
    char(*norm)[37] = NULL;
    const char **q = donto_xmalloc(n * sizeof *q);
    if (t == DONTO_TARGET_CLAIM) norm = donto_xmalloc(n * sizeof *norm);
    for (size_t i = 0; i < n; i++) {
        if (t != DONTO_TARGET_CLAIM) {
            q[i] = item_ids[i];
        } else if (donto_is_uuid(item_ids[i])) {
            donto_statement_id(item_ids[i], norm[i]);
            q[i] = norm[i];
        } else {
            q[i] = NULL;
        }
    }
    sub_rows rows = {0};
    int rc = ops->fetch(s, t, q, n, &rows, err);
    if (rc == 0 && rows.nrows) {
        /* Match rows to the asked ids: sort (id, row) pairs, bsearch each id. */
        id_row *keys = donto_xmalloc(rows.nrows * sizeof *keys);
        for (size_t r = 0; r < rows.nrows; r++) keys[r] = (id_row){sub_cell(&rows, r, 0), r};
        qsort(keys, rows.nrows, sizeof *keys, cmp_id_row);
        for (size_t i = 0; i < n; i++) {
            if (!q[i]) continue;
            id_row want = {q[i], 0};
            const id_row *hit = bsearch(&want, keys, rows.nrows, sizeof *keys, cmp_id_row);
            if (hit) texts[i] = sub_render(t, &rows, hit->row, ro);
        }
        free(keys);
    }
    sub_rows_free(&rows);
    free(q);
    free(norm);
    if (rc) {
        donto_preerr(err, "texts");
        return -1;
    }
    return 0;
}

int donto_substrate_texts(donto_store *s, donto_target t, const char *const *item_ids, size_t n,
                          char **texts, donto_err *err) {
    return donto_substrate_texts_opts(s, t, item_ids, n, NULL, texts, err);
}

int donto_substrate_counts(donto_store *s, int64_t out[DONTO_TARGET_N], donto_err *err) {
    const sub_ops *ops = sub_ops_for(s, err);
    if (!ops) return -1;
    return ops->counts(s, out, err);
}

/* ---- the loaders' buffered writer ------------------------------------------ */

#define WRITER_ROWS 20000

void sub_writer_init(sub_writer *w, donto_store *s, const sub_ops *ops, donto_load_stats *st) {
    memset(w, 0, sizeof *w);
    w->s = s;
    w->ops = ops;
    w->st = st;
}

int sub_writer_flush(sub_writer *w, donto_err *err) {
    for (int k = 0; k < SUB_KIND_N; k++) {
        if (!w->n[k]) continue;
        size_t got = 0;
        int rc = w->ops->put(w->s, (sub_kind)k, (const char *const *)w->buf[k], w->n[k], &got, err);
        for (size_t i = 0; i < w->n[k] * (size_t)SUB_NCOLS[k]; i++) free(w->buf[k][i]);
        w->n[k] = 0;
        if (rc) return -1;
        switch (k) {
        case SUB_STATEMENT: w->st->statements += got; break;
        case SUB_PREDICATE: w->st->predicates += got; break;
        case SUB_ENTITY: w->st->entities += got; break;
        case SUB_CHUNK: w->st->chunks += got; break;
        case SUB_ARGUMENT: w->st->arguments += got; break;
        }
    }
    return 0;
}

int sub_writer_add(sub_writer *w, sub_kind k, const char *const *cells, donto_err *err) {
    size_t nc = (size_t)SUB_NCOLS[k];
    if (w->n[k] == w->cap[k]) {
        w->cap[k] = w->cap[k] ? 2 * w->cap[k] : 1024;
        w->buf[k] = donto_xrealloc(w->buf[k], w->cap[k] * nc * sizeof *w->buf[k]);
    }
    for (size_t c = 0; c < nc; c++) w->buf[k][w->n[k] * nc + c] = strdup_or_null(cells[c]);
    w->n[k]++;
    if (w->n[k] >= WRITER_ROWS) return sub_writer_flush(w, err);
    return 0;
}

void sub_writer_free(sub_writer *w) {
    for (int k = 0; k < SUB_KIND_N; k++) {
        for (size_t i = 0; i < w->n[k] * (size_t)SUB_NCOLS[k]; i++) free(w->buf[k][i]);
        free(w->buf[k]);
    }
    memset(w, 0, sizeof *w);
}
