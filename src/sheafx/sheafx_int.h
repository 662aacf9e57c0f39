/* donto-accel: the sheaf export's private parts (not a public header): the
 * rows it reads, held in flat arrays, and the two readers that fill them
 * (read_sqlite.c, read_pg.c: one set-based pass per table). The graph,
 * tasks and JSON are built from these in export.c, the same for both
 * stores. */
#ifndef DONTO_SHEAFX_INT_H
#define DONTO_SHEAFX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "donto/sheaf_export.h"

#define SX_OPEN INT64_MAX /* tx_until of a live row */

/* Relations of donto_argument, in the order of the arg_link classes after "none". */
enum { SX_SUPPORTS = 0, SX_REBUTS, SX_UNDERCUTS, SX_UNDERMINES, SX_QUALIFIES, SX_NREL };
extern const char *const SX_REL_NAMES[SX_NREL];
int sx_rel_parse(const char *s, size_t n);

/* Predicates whose statements are identity evidence (docs/sheaf.md). */
extern const char *const SX_IDENTITY_PREDICATES[];

/* Interned strings (entity IRIs): an index per distinct string. */
typedef struct sx_strtab {
    char **s;
    uint64_t *h; /* hash of each string (probes compare it first; rehash reuses it) */
    size_t n, cap;
    int32_t *slot; /* open addressing: index + 1, 0 empty */
    size_t nslot;
} sx_strtab;
int32_t sx_intern(sx_strtab *t, const char *s, size_t len);
void sx_strtab_free(sx_strtab *t);

typedef struct sx_stmt {
    uint8_t uuid[16];
    int32_t subj, obj;     /* entity indices; obj -1 for a literal */
    int64_t from, until;   /* ms; until SX_OPEN when live */
    uint8_t sheaf, ident;  /* sheaf-written context; identity predicate */
    int64_t vec;           /* row in vecs, -1 none */
} sx_stmt;

typedef struct sx_arg {
    uint8_t src[16], dst[16];
    int32_t s, d;          /* statement indices after sorting (-1 unknown) */
    int rel;
    int64_t from, until;
    uint8_t sheaf;
} sx_arg;

typedef struct sx_data {
    int dims;              /* 0 until the first vector */
    sx_stmt *st;
    size_t nst, capst;
    sx_arg *arg;
    size_t narg, caparg;
    float *vecs;           /* claim vectors, dims each */
    size_t nvec, capvec;
    sx_strtab ent;
    int64_t *ent_vec;      /* per entity: row in evecs, -1 none (sized at the end) */
    float *evecs;
    size_t nevec, capevec;
    int32_t *evec_ent;     /* per entity vector row: its entity index */
} sx_data;

/* Add rows (the readers call these). vec NULL: no vector; its byte length
 * must be dims * 4 (little-endian float32). -1 with err on a bad row. */
int sx_add_stmt(sx_data *d, const uint8_t uuid[16], const char *subj, size_t subj_len,
                const char *obj, size_t obj_len, int64_t from, int64_t until, int sheaf, int ident,
                const void *vec, size_t vec_bytes, donto_err *err);
int sx_add_arg(sx_data *d, const uint8_t src[16], const uint8_t dst[16], const char *rel,
               size_t rel_len, int64_t from, int64_t until, int sheaf, donto_err *err);
int sx_add_entity_vec(sx_data *d, const char *iri, size_t len, const void *vec, size_t vec_bytes,
                      donto_err *err);
void sx_data_free(sx_data *d);
int sx_parse_uuid(const char *s, uint8_t out[16]);
void sx_format_uuid(const uint8_t u[16], char out[37]);

/* Read statements and arguments asserted by o->until (unless unsafe), with
 * the claim vectors of o->model, and the entity vectors of o->model. */
int sx_read_sqlite(donto_store *s, const donto_sheafx_opts *o, sx_data *d, donto_err *err);
int sx_read_pg(donto_store *s, const donto_sheafx_opts *o, sx_data *d, donto_err *err);

/* The error for a model with no claim vectors (DONTO_E_NOT_FOUND); -1. The
 * readers check first with one cheap probe, so it comes before the big read. */
int sx_no_vectors(const char *model, donto_err *err);

/* splitmix64 */
static inline uint64_t sx_rng(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double sx_unif(uint64_t *x) { return (double)(sx_rng(x) >> 11) * (1.0 / 9007199254740992.0); }
static inline uint64_t sx_below(uint64_t *x, uint64_t n) { return n ? sx_rng(x) % n : 0; }

#endif
