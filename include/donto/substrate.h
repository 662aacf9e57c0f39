/*
 * donto-accel: the substrate, i.e. what the coordinator embeds. The tables
 * carry donto's own names (donto_statement, donto_predicate,
 * donto_entity_symbol, donto_memory_chunk, donto_argument; see
 * docs/substrate.md for the column mapping) and live in the same database as
 * the work queue; the substrate owns their migrations
 * (src/substrate/migrations.c) and the store applies them.
 *
 * Items and their ids (the item_id of queue and vectors rows):
 *   claim         a live donto_statement row; id = statement_id (lowercase uuid text)
 *   predicate     a donto_predicate row; id = its IRI
 *   entity        a donto_entity_symbol row; id = its IRI (not symbol_id: a
 *                 serial number means nothing outside one database)
 *   memory_chunk  a live donto_memory_chunk row; id = chunk_id
 * A statement or chunk is live while its tx_time is open; retraction closes it.
 *
 * Text builders (one per target) are pure functions of the row, so the text
 * queued for embedding and the text recall displays are the same bytes.
 */
#ifndef DONTO_SUBSTRATE_H
#define DONTO_SUBSTRATE_H

#include <stddef.h>
#include <stdint.h>

#include "donto/store.h"
#include "donto/tokenizer.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Apply the store's migrations and then the substrate's (idempotent): what
 * `migrate`, the loaders and `serve --migrate` run; the commands that only
 * read a database check it with donto_substrate_schema_check instead. */
int donto_substrate_migrate(donto_store *s, donto_err *err);
/* Are the store's and the substrate's migrations all recorded? 0, or -1
 * with DONTO_E_NOT_FOUND and "is not migrated (store schema 0 of 7,
 * substrate schema 0 of 1)" (see donto_store_schema_check). */
int donto_substrate_schema_check(donto_store *s, donto_err *err);

/* ---- text builders (src/substrate/render.c) ------------------------------ */

/* An IRI made readable: its local name (after the last '#', else '/', else
 * ':'; trailing separators skipped), %XX decoded, '_' and '-' read as
 * spaces, camelCase split ("hasPart" -> "has part", "HTTPServer" -> "HTTP
 * server": words after the first that are Capitalized are lower-cased,
 * acronyms kept), spaces collapsed. Never NULL (malloc'd). */
char *donto_humanize_iri(const char *iri);

/* "subject - predicate - object": each part is the given label when non-NULL
 * and non-empty, else the humanised IRI; a literal object (object_lit JSON:
 * {"v": ...} or a bare JSON value) reads as its value. */
char *donto_render_claim(const char *subject, const char *subject_label, const char *predicate,
                         const char *predicate_label, const char *object_iri,
                         const char *object_label, const char *object_lit);
/* "label: description" (label = humanised IRI when missing). */
char *donto_render_predicate(const char *iri, const char *label, const char *description);
/* "label (kind)" (label = humanised IRI when missing; no kind: label only). */
char *donto_render_entity(const char *iri, const char *label, const char *kind);

#define DONTO_CHUNK_TOKEN_CAP 300
/* Items per enqueue transaction when the caller gives none. */
#define DONTO_ENQUEUE_BATCH 50000
/* A memory chunk cut to at most cap tokens, counting [CLS] and [SEP], cut at
 * a whitespace boundary. With a tokenizer: the longest word prefix whose
 * WordPiece encoding fits. Without: a word costs 1 token plus 1 per ASCII
 * punctuation character in it (BERT splits punctuation off), which tracks
 * WordPiece closely on English prose; see docs/substrate.md. */
char *donto_render_chunk(const char *text, const donto_tokenizer *tok, int cap);

/* Render options for enqueue and texts. */
typedef struct donto_render_opts {
    const donto_tokenizer *tok; /* NULL: whitespace approximation */
    int chunk_cap;              /* <= 0: DONTO_CHUNK_TOKEN_CAP */
} donto_render_opts;

/* ---- ids ------------------------------------------------------------------ */

/* Is s a uuid in 8-4-4-4-12 hex form (either case)? */
int donto_is_uuid(const char *s);
/* Name-based statement id: a version-8 uuid from SHA-256 of a namespace and
 * the name (lowercase text into out[37]). Used for records whose id is not a
 * uuid ("c000001" -> always the same uuid) and, with namespace "triple" and
 * name "s\x1fp\x1fo\x1fg", for content ids (a re-load adds nothing). */
void donto_name_uuid(const char *ns, const char *name, size_t len, char out[37]);
/* The statement id a user means by s: s itself (lower-cased) when it is a
 * uuid, else donto_name_uuid("id", s). */
void donto_statement_id(const char *s, char out[37]);

/* ---- loaders (src/substrate/load.c, wordnet.c) ---------------------------- */

typedef struct donto_load_stats {
    size_t lines;       /* input lines (or synsets for WordNet) read */
    size_t statements;  /* new donto_statement rows */
    size_t predicates, entities, chunks, arguments; /* new rows */
    size_t retracted;   /* statements this load retracted */
} donto_load_stats;

/* Called now and then while loading (done = lines or synsets so far; total
 * = 0 when unknown). */
typedef void (*donto_progress_fn)(void *ctx, const char *what, size_t done, size_t total);

typedef enum { DONTO_FORMAT_NQUADS = 0, DONTO_FORMAT_JSONL = 1 } donto_load_format;

/* Load one file ("-" = stdin) in one transaction: a bad line fails the whole
 * file (err = "NAME:LINE: reason"), nothing of it is kept. Statement ids are
 * content ids (N-Quads, JSONL claims without an id), so loading a file twice
 * adds nothing the second time. Formats: docs/substrate.md. */
int donto_load_file(donto_store *s, const char *path, donto_load_format fmt,
                    donto_progress_fn progress, void *ctx, donto_load_stats *st, donto_err *err);
/* Same, from memory (name is used in error messages). */
int donto_load_buffer(donto_store *s, const char *name, const char *data, size_t len,
                      donto_load_format fmt, donto_load_stats *st, donto_err *err);

/* WordNet 3.0 in the Princeton database format (Debian wordnet-base:
 * /usr/share/wordnet/data.{noun,verb,adj,adv}): synsets -> entities
 * ("wn:OFFSET-POS"), pointers -> statements (predicate "wn:NAME"), glosses ->
 * memory chunks, antonym pairs -> rebuts arguments. pos: the parts of
 * speech to read, in this order, as letters n (noun), v (verb), a
 * (adjective), r (adverb), commas allowed ("a,v"); NULL: "nvar". limit > 0:
 * only the first limit synsets of those files, and only pointers between
 * them. One transaction. */
#define DONTO_WORDNET_DIR "/usr/share/wordnet"
int donto_import_wordnet(donto_store *s, const char *dir, const char *pos, size_t limit, donto_progress_fn progress,
                         void *ctx, donto_load_stats *st, donto_err *err);

/* The predicate IRI and phrase ("is a kind of") of a WordNet pointer name
 * ("hypernym"); NULL when unknown. */
const char *donto_wordnet_phrase(const char *name);
/* "noun", "verb", "adjective" or "adverb" for a synset key ("02084071-n");
 * NULL when it has no part-of-speech suffix. */
const char *donto_wordnet_pos_name(const char *synset);

/* ---- enqueue, retract, texts (src/substrate/substrate.c) ------------------ */

/* Queue every live item of target (< 0: all four) that has neither a vector
 * nor a queue entry for model. Works in keyset batches of batch items (<= 0:
 * DONTO_ENQUEUE_BATCH), each its own transaction: idempotent (a second run adds nothing)
 * and resumable (an interrupted run keeps the batches it committed). */
int donto_substrate_enqueue(donto_store *s, int target, const char *model,
                            const donto_render_opts *ro, int batch, donto_progress_fn progress,
                            void *ctx, size_t *added, donto_err *err);

/* Retract statements: close their tx_time (already retracted or unknown ids
 * are skipped) and delete their queue entries (every model) in the same
 * transaction. ids as for donto_statement_id. */
int donto_substrate_retract(donto_store *s, const char *const *ids, size_t n, size_t *retracted,
                            donto_err *err);
/* What retraction did with one id. */
typedef enum donto_retract_status {
    DONTO_RETRACT_UNKNOWN = 0, /* no such statement */
    DONTO_RETRACT_DONE = 1,    /* it was live and is retracted now */
    DONTO_RETRACT_ALREADY = 2, /* it was retracted before */
} donto_retract_status;
/* donto_substrate_retract, and status[i] for ids[i] (caller-allocated, n). */
int donto_substrate_retract_status(donto_store *s, const char *const *ids, size_t n, size_t *retracted,
                                   donto_retract_status *status, donto_err *err);

/* Display text of items (the same text the builders render for embedding).
 * texts[i] is malloc'd, or NULL when the item is unknown/retracted. Returns 0
 * or -1 with err set. Uses the default render options. */
int donto_substrate_texts(donto_store *s, donto_target t, const char *const *item_ids, size_t n,
                          char **texts, donto_err *err);
/* Same with explicit render options (ro NULL: defaults). */
int donto_substrate_texts_opts(donto_store *s, donto_target t, const char *const *item_ids,
                               size_t n, const donto_render_opts *ro, char **texts,
                               donto_err *err);

/* Live item counts per target (claims: open statements). */
int donto_substrate_counts(donto_store *s, int64_t out[DONTO_TARGET_N], donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
