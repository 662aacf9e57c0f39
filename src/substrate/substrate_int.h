/* donto-accel: what the substrate's two backends provide (not a public
 * header). The SQL lives in sub_sqlite.c and sub_pg.c; the logic (parsing,
 * rendering, batching) in load.c, wordnet.c and substrate.c. */
#ifndef DONTO_SUBSTRATE_INT_H
#define DONTO_SUBSTRATE_INT_H

#include "donto/substrate.h"

/* Tables a loader writes, with their column lists (all text, NULL allowed
 * where the column is nullable):
 *   STATEMENT  statement_id, subject, predicate, object_iri, object_lit, context
 *   PREDICATE  iri, label, description          (upsert: a non-NULL label or
 *   ENTITY     iri, normalized_label, kind       description replaces NULL)
 *   CHUNK      chunk_id, source, text
 *   ARGUMENT   source_statement_id, target_statement_id, relation, strength, context */
typedef enum { SUB_STATEMENT, SUB_PREDICATE, SUB_ENTITY, SUB_CHUNK, SUB_ARGUMENT, SUB_KIND_N } sub_kind;
extern const int SUB_NCOLS[SUB_KIND_N];

/* A result set: rows x cols malloc'd cells (NULL for SQL NULL). */
typedef struct sub_rows {
    int ncols;
    size_t nrows, cap;
    char **cell;
} sub_rows;
void sub_rows_add(sub_rows *r, char **cells); /* takes ownership of ncols cells */
void sub_rows_free(sub_rows *r);
static inline const char *sub_cell(const sub_rows *r, size_t row, int col) {
    return r->cell[row * (size_t)r->ncols + (size_t)col];
}

/* Row layouts the scans return, per target (column 0 is always the item id):
 *   claim         id, subject, subject_label, predicate, predicate_label,
 *                 object_iri, object_label, object_lit
 *   predicate     id (= iri), label, description
 *   entity        id (= iri), normalized_label, kind
 *   memory_chunk  id, text */
extern const int SUB_SCAN_COLS[DONTO_TARGET_N];

typedef struct sub_ops {
    int (*begin)(donto_store *s, donto_err *err);
    int (*commit)(donto_store *s, donto_err *err);
    void (*rollback)(donto_store *s);
    /* Insert rows (row-major, SUB_NCOLS[k] cells each); existing keys are
     * left alone (predicates/entities: NULL columns filled in). */
    int (*put)(donto_store *s, sub_kind k, const char *const *cells, size_t nrows,
               size_t *inserted, donto_err *err);
    /* Close the tx_time of the live statements among ids (lowercase uuids)
     * and delete their queue rows. Runs inside the caller's transaction.
     * status (NULL: not wanted): per id, a donto_retract_status. */
    int (*retract)(donto_store *s, const char *const *ids, size_t n, size_t *retracted,
                   int *status, donto_err *err);
    /* scan and queue_put serve the generic keyset enqueue, for a backend
     * without its own enqueue (NULL there).
     * Up to limit live items of t with id > after (after NULL: from the
     * start), in id order, that have neither a vector nor a queue row for
     * model. */
    int (*scan)(donto_store *s, donto_target t, const char *model, const char *after, int limit,
                sub_rows *out, donto_err *err);
    /* Queue rows (ids[i], texts[i]) for (t, model) unless queued or embedded already. */
    int (*queue_put)(donto_store *s, donto_target t, const char *model, const char *const *ids,
                     const char *const *texts, size_t n, size_t *added, donto_err *err);
    /* The live rows among ids (any order; unknown ids absent), scan layout. */
    int (*fetch)(donto_store *s, donto_target t, const char *const *ids, size_t n, sub_rows *out,
                 donto_err *err);
    int (*counts)(donto_store *s, int64_t out[DONTO_TARGET_N], donto_err *err);
    /* Optional: the backend's own enqueue of one target (NULL: the generic
     * keyset loop over scan + queue_put). progress gets base + items so far. */
    int (*enqueue)(donto_store *s, donto_target t, const char *model, const donto_render_opts *ro,
                   int batch, donto_progress_fn progress, void *ctx, size_t base, size_t *added,
                   donto_err *err);
} sub_ops;

/* The ops for this store's kind of database (after migrating it), or NULL
 * with err set. */
const sub_ops *sub_ops_for(donto_store *s, donto_err *err);
/* The store's database as the SQL files use it (donto_store_db): NULL when
 * it is of the other kind or cannot be reached. */
struct sqlite3 *sub_sqlite(donto_store *s);
struct pg_conn *sub_pg(donto_store *s);
extern const sub_ops SUB_SQLITE_OPS, SUB_PG_OPS;

/* Render one scanned/fetched row of target t. */
char *sub_render(donto_target t, const sub_rows *r, size_t row, const donto_render_opts *ro);

/* Buffered writer used by the loaders: rows are copied and flushed per kind
 * in batches; flush order follows sub_kind order so arguments land after the
 * statements they name. */
typedef struct sub_writer {
    donto_store *s;
    const sub_ops *ops;
    char **buf[SUB_KIND_N];
    size_t n[SUB_KIND_N], cap[SUB_KIND_N];
    donto_load_stats *st;
} sub_writer;
void sub_writer_init(sub_writer *w, donto_store *s, const sub_ops *ops, donto_load_stats *st);
/* Copy one row of kind k (SUB_NCOLS[k] cells) into the buffer; flushes all
 * kinds when the buffer is full. */
int sub_writer_add(sub_writer *w, sub_kind k, const char *const *cells, donto_err *err);
int sub_writer_flush(sub_writer *w, donto_err *err);
void sub_writer_free(sub_writer *w);

/* The content id of a statement (s, p, object, context g): what N-Quads,
 * JSONL claims without an id and WordNet pointers are stored under. */
void sub_content_id(const char *s, const char *p, const char *o_iri, const char *o_lit,
                    const char *g, char out[37]);
#define SUB_DEFAULT_CONTEXT "donto:default"

#endif
