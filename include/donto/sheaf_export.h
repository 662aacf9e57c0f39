/*
 * donto-accel: the leakage-free export of the substrate as a graph for
 * donto-sheaf (docs/sheaf-export.md, version 2; docs/sheaf.md "Export"),
 * and a seeded generator of donto-shaped substrates with planted structure
 * to exercise it.
 *
 * The export reads the substrate's tables (donto_statement, donto_argument,
 * donto_entity_symbol) and the store's vectors for one model, in a few
 * set-based queries (PostgreSQL: COPY ... TO STDOUT in binary; SQLite: one
 * scan per table), and builds in memory:
 *   nodes   claims live at as_of (asserted at or before it, not retracted by
 *           then), and for the identity task the entity symbols they name;
 *   edges   claims that share a subject or object entity, claim -> entity
 *           ("mentions"), and the train arguments known at as_of;
 *   tasks   arg_link (edge, directed), identity (edge, undirected),
 *           claim_score (node: retracted in (as_of, until] or still live).
 * Leakage rules (checked by tests/test_sheafx.c on both stores): nothing
 * asserted after as_of is a node or an edge; no val/test pair is a graph edge
 * in either direction; test labels come from (as_of, until]; nothing whose
 * context starts with DONTO_SHEAF_CONTEXT_PREFIX enters a graph or a label.
 *
 * Times are Unix milliseconds (UTC).
 */
#ifndef DONTO_SHEAF_EXPORT_H
#define DONTO_SHEAF_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Statements and arguments whose context starts with this were written by a
 * sheaf model (its predictions fed back into the substrate): the export never
 * uses them (the self-feedback filter). */
#define DONTO_SHEAF_CONTEXT_PREFIX "sheaf:"

typedef enum { DONTO_SHEAFX_SEED_ARGUMENTS = 0, DONTO_SHEAFX_SEED_FRONTIER = 1,
               DONTO_SHEAFX_SEED_INCOMPAT = 2, DONTO_SHEAFX_SEED_IDENTITY = 3 } donto_sheafx_seed;
extern const char *const donto_sheafx_seed_names[5]; /* NULL-terminated */

typedef enum { DONTO_SHEAFX_MISSING_SKIP = 0, DONTO_SHEAFX_MISSING_ZERO = 1 } donto_sheafx_missing;
extern const char *const donto_sheafx_missing_names[3];

/* Test-only switches that turn one leakage filter off, so that a test can show
 * the filter is what keeps the planted leak out. Never set by the command. */
enum {
    DONTO_SHEAFX_UNSAFE_NO_ASOF = 1,       /* take statements/arguments asserted after as_of */
    DONTO_SHEAFX_UNSAFE_NO_SHEAF_FILTER = 2, /* take sheaf-written statements/arguments */
    DONTO_SHEAFX_UNSAFE_KEEP_PAIR_EDGES = 4, /* keep graph edges between val/test pairs */
};

typedef struct donto_sheafx_opts {
    donto_sheafx_seed seed;
    int64_t as_of, until;       /* ms; until > as_of */
    const char *model;          /* vectors of this model are the features */
    int hops;                   /* expansion from the seed claims (>= 0) */
    int64_t max_nodes;          /* claim nodes at most (0: no limit) */
    donto_sheafx_missing missing;
    uint64_t rng_seed;          /* negatives and train/val splits */
    double val_frac;            /* of what is known at as_of (default 0.2) */
    int neg_ratio;              /* "none"/"distinct" examples per positive (default 1) */
    int unsafe;                 /* DONTO_SHEAFX_UNSAFE_* (tests only) */
    /* Progress now and then (phase, done, total; total 0 when unknown). */
    void (*progress)(void *ctx, const char *phase, int64_t done, int64_t total);
    void *ctx;
} donto_sheafx_opts;

/* Defaults: seed arguments, hops 1, max_nodes 50000, missing skip, rng 1,
 * val 0.2, neg_ratio 1, model DONTO_DEFAULT_MODEL, until = as_of = 0 (the
 * caller sets them). */
void donto_sheafx_opts_init(donto_sheafx_opts *o);

typedef struct donto_sheafx_stats {
    int64_t statements_read, arguments_read;     /* rows read (asserted by until) */
    int64_t claims, claims_with_vector, claims_skipped, claims_zero;
    int64_t entities, entities_with_vector, entities_skipped, entities_zero;
    int64_t edges, edges_removed_for_pairs;
    int64_t sheaf_statements, sheaf_arguments;   /* filtered out (self-feedback) */
    int64_t arg_pairs[3], identity_pairs[3], score_labels[3]; /* train, val, test */
    int dims;
    char digest[72];                              /* "sha256:<64 hex>" */
    double seconds;                               /* all of it, of which: */
    double read_s, build_s, write_s;              /* the database, the graph and tasks, the JSON */
} donto_sheafx_stats;

/* Export to f (version 2 JSON). Errors: DONTO_E_INVALID for bad options
 * (until <= as_of), DONTO_E_NOT_FOUND for an empty graph or a model with no
 * vectors for the graph's claims, others from the database. */
int donto_sheafx_export(donto_store *s, const donto_sheafx_opts *o, FILE *f, donto_sheafx_stats *st,
                        donto_err *err);

/* Open an existing, migrated database for the export (never creates one):
 * DONTO_E_NOT_FOUND for a missing SQLite file or an unmigrated schema. */
int donto_sheafx_open(const char *url, donto_store **out, donto_err *err);
/* Open (creating a SQLite file) for the generator, which migrates it. */
int donto_sheafx_open_new(const char *url, donto_store **out, donto_err *err);
void donto_sheafx_close(donto_store *s);

/* "2026-06-01", "2026-06-01T12:00:00Z", "2026-06-01T12:00:00.250Z",
 * "2026-06-01T12:00:00+02:00" or "@<unix seconds>" -> ms. -1 with err. */
int donto_sheafx_parse_time(const char *s, int64_t *ms, donto_err *err);
/* ms -> "2026-06-01T12:00:00.000Z" (out >= 32 bytes). */
void donto_sheafx_format_time(int64_t ms, char out[32]);

/* ---- the planted generator (src/sheafx/gen.c) ------------------------------ */

typedef struct donto_sheafx_gen_opts {
    int64_t statements;   /* how many statements (>= 100) */
    uint64_t seed;
    int64_t as_of, until; /* the window the planted labels fall in */
    const char *model;    /* vectors are stored for this model name ... */
    int dims;             /* ... with this many dimensions */
    int clusters;         /* latent topics (default 16) */
    double sheaf_frac;    /* share of statements/arguments written in a "sheaf:" context */
    const char *truth;    /* NULL, or a file for the ground truth (JSONL) */
    void (*progress)(void *ctx, const char *phase, int64_t done, int64_t total);
    void *ctx;
} donto_sheafx_gen_opts;
void donto_sheafx_gen_opts_init(donto_sheafx_gen_opts *o);

typedef struct donto_sheafx_gen_stats {
    int64_t statements, entities, arguments, identity, retracted, after_as_of, sheaf_statements,
        sheaf_arguments, vectors;
} donto_sheafx_gen_stats;

/* Migrate s (store and substrate) and write a planted substrate into it:
 * entities in latent clusters, statements with tx times before as_of, in
 * (as_of, until] and retracted in between, arguments whose relation follows
 * the latent stance of their ends, owl:sameAs pairs between an entity and
 * its planted duplicate, sheaf-written statements and arguments (leaks the
 * export must filter), and vectors (claims and entities) for the model.
 * docs/sheaf.md "The planted substrate". The database must hold no
 * substrate rows yet (DONTO_E_CONFLICT otherwise). */
int donto_sheafx_generate(donto_store *s, const donto_sheafx_gen_opts *o, donto_sheafx_gen_stats *st,
                          donto_err *err);

/* ---- a history for a substrate that has none (src/sheafx/stamp.c) ----------- */

/* A WordNet import (or any load) stamps every row with the time it was
 * loaded, so an export of it has no (as_of, until] to test on. This rewrites
 * the tx times of the live rows to simulate one: every live statement and
 * argument is asserted at as_of - 1 day; then a seeded `holdout` share of
 * the arguments and of the identity statements (owl:sameAs, skos:exactMatch,
 * wn:similar_to, wn:verb_group) is asserted instead at a seeded time in
 * (as_of, until]. It destroys the real load times: for benchmark databases
 * only (docs/sheaf.md "WordNet"). until must not lie in the future. */
typedef struct donto_sheafx_stamp_stats {
    int64_t statements, arguments, held_arguments, held_identity;
} donto_sheafx_stamp_stats;
int donto_sheafx_stamp_history(donto_store *s, int64_t as_of, int64_t until, double holdout, uint64_t seed,
                               donto_sheafx_stamp_stats *st, donto_err *err);


/* ---- the live graph, for scoring (src/sheafx/export.c) ------------------------ */

/* The substrate at one instant as a graph in memory, built by the export's own
 * reader, filters and edge rules (nothing sheaf-written, no identity evidence as a
 * node, a claim without a vector skipped), for `donto-sheaf score`
 * (docs/sheaf-serving.md "Scores"). Nodes: claims [0, nclaims), then entities
 * (named by a claim node, with a vector of the model; none when the model has no
 * entity vectors). Edge types as the export's edge_types (0..4 argument relations,
 * 5 shares_subject, 6 shares_object, 7 shares_entity, 8 mentions). */
typedef struct donto_sheafx_live {
    int dims;
    int64_t as_of, since;
    int64_t watermark;         /* the newest tx time (assert or retract) at or before as_of of any row read */
    size_t nclaims, nentities;
    char **item;               /* per node: the statement's uuid, or the entity's IRI */
    float *x;                  /* [nodes][dims] */
    size_t nedges;
    int32_t *src, *dst;        /* undirected, each once */
    uint8_t *etype;
    int32_t *subj, *obj;       /* per claim: its subject / object entity node, -1 none */
    uint8_t *changed;          /* per claim: asserted after since, naming an entity of a statement
                                  retracted in (since, as_of], or an end of an argument asserted or
                                  retracted in (since, as_of] */
    size_t nchanged;
    int32_t *argued;           /* [nargued][2] claim nodes (source, target) of every argument read,
                                  any relation, context or time (sheaf-written ones included) */
    size_t nargued;
    int32_t *ident;            /* [nident][2] entity nodes joined by an identity statement */
    size_t nident;
    int64_t statements_read, arguments_read, retracted_since, sheaf_statements, sheaf_arguments;
    double seconds;
} donto_sheafx_live;
/* o: as_of (the instant), model, progress (the rest ignored). since: what counts as
 * changed (INT64_MIN: everything). Errors as donto_sheafx_export's. */
int donto_sheafx_live_read(donto_store *s, const donto_sheafx_opts *o, int64_t since, donto_sheafx_live *out,
                           donto_err *err);
void donto_sheafx_live_free(donto_sheafx_live *l);

#ifdef __cplusplus
}
#endif
#endif
