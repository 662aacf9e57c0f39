/*
 * donto-accel: the sheaf model registry (module sheaf_registry, src/sheafreg/;
 * docs/sheaf-serving.md). Trained sheaf checkpoints become rows of the
 * database the substrate lives in, so that whoever serves or scores with a
 * model reads it from one place, and "which model answers task T" is a fact
 * of the database, not of a file lying somewhere:
 *
 *   donto_sheaf_model      one checkpoint (its bytes), its task, family,
 *                          hyperparameters, metrics, the export it was
 *                          trained on, its parity record and its state:
 *                          candidate -> active -> retired (-> active again).
 *                          At most one active model per task (a partial
 *                          unique index: the database enforces it).
 *   donto_sheaf_score,     the scores a model writes and the runs that wrote
 *   donto_sheaf_score_run  them (filled by a later `score` command).
 *
 * A checkpoint enters only through the gate (donto_sheaf_registry_check):
 * it parses as a checkpoint of a known version, its tensors have the shapes
 * its hyperparameters say, every weight is finite, and our forward on a
 * probe graph agrees with the PyTorch reference within 1e-5 (max abs of the
 * log-probabilities). The probe is the checkpoint's own "probe" member when
 * it carries one (a graph and the reference's outputs, docs/sheaf.md
 * "Probe"), else a graph generated from the checkpoint, and the reference is
 * then run as a command (tests/ref/sheaf_ref.py infer).
 *
 * Errors: 0, or -1 with err set and a code (DONTO_E_INVALID: the checkpoint
 * or an argument is refused; DONTO_E_NOT_FOUND: no such model, no active
 * model, or the registry's tables are missing ("not migrated");
 * DONTO_E_CONFLICT: the name is taken; DONTO_E_UNAVAILABLE: the database).
 * A store handle is used by one thread at a time, as everywhere.
 */
#ifndef DONTO_SHEAF_REGISTRY_H
#define DONTO_SHEAF_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The registry's migrations (module "sheaf_registry"), for both stores. */
extern const donto_migrations DONTO_SHEAF_REGISTRY_MIGRATIONS;
/* The store's own migrations, then the registry's (idempotent). */
int donto_sheaf_registry_migrate(donto_store *s, donto_err *err);
/* 0 when the registry's migrations are all applied; else DONTO_E_NOT_FOUND. */
int donto_sheaf_registry_schema_check(donto_store *s, donto_err *err);

/* ---- the gate -------------------------------------------------------------- */

/* Tolerance of the parity gate: max abs difference of log-probabilities. */
#define DONTO_SHEAF_PARITY_TOL 1e-5

typedef struct donto_sheaf_check_opts {
    /* The reference, run when the checkpoint carries no probe outputs: a shell
     * command line to which " --checkpoint FILE --graph FILE --out FILE" is
     * appended; it writes {"logp": [[...]], "reference": "..."}. NULL: none
     * (a checkpoint without a probe is then refused, saying how to give one). */
    const char *reference;
    const char *label; /* names the checkpoint in messages (its file) */
} donto_sheaf_check_opts;

/* What the gate found. Strings are malloc'd (donto_sheaf_check_free). */
typedef struct donto_sheaf_check {
    char family[32];       /* "diag", "orth", ... (orth: "orth" or "cayley" as trained) */
    char task_kind[8];     /* "node" | "edge" */
    char task[64];         /* the task's name as the checkpoint records it ("" if none) */
    int f, classes;
    char *hparams;         /* JSON text */
    char *metrics;         /* JSON text ("{}" when the checkpoint has none) */
    char *export_digest;   /* the export's inputs_digest, or NULL */
    char *parity;          /* JSON: {"max_abs","tol","probe":{"source","nodes","rows","classes"},"reference","checked_at"} */
    double max_abs;        /* the parity figure */
    int probe_nodes, probe_rows; /* rows: nodes (node task) or pairs (edge task) compared */
    char probe_source[16]; /* "checkpoint" (its probe member) | "generated" */
    char reference[256];   /* who produced the reference outputs */
} donto_sheaf_check;
void donto_sheaf_check_free(donto_sheaf_check *c);

/* Run the gate on checkpoint bytes. 0 when every check passes; -1 with
 * DONTO_E_INVALID and one line saying what failed (for parity: the max abs,
 * the tolerance and where it was worst; *out then holds the figures too). */
int donto_sheaf_registry_check(const char *buf, size_t len, const donto_sheaf_check_opts *o, donto_sheaf_check *out,
                               donto_err *err);
/* The repository's reference when this build's source tree has it:
 * "SRC/.venv/bin/python SRC/tests/ref/sheaf_ref.py infer". 0 and out set, or
 * -1 when the venv or the script is missing (out then says which). */
int donto_sheaf_registry_default_reference(char *out, size_t cap);

/* ---- rows ------------------------------------------------------------------ */

typedef struct donto_sheaf_reg_model {
    int64_t id;
    char name[128];
    char task[64];
    char family[32];
    char state[16];        /* "candidate" | "active" | "retired" */
    char *hparams, *metrics, *parity; /* JSON text (malloc'd) */
    char *export_digest;   /* NULL when unknown */
    double parity_max_abs; /* from parity (NAN when absent) */
    int64_t created_at;    /* Unix ms */
    int64_t activated_at;  /* Unix ms of the last activation; 0: never */
    unsigned char *checkpoint; /* the bytes, when asked for (else NULL) */
    size_t checkpoint_len;
} donto_sheaf_reg_model;
void donto_sheaf_reg_model_free(donto_sheaf_reg_model *m);
void donto_sheaf_reg_models_free(donto_sheaf_reg_model *m, size_t n);

/* Store a checkpoint that passed the gate as `name` for `task`: state
 * 'candidate', or 'active' (activate = 1: the task's active model, if any,
 * retired in the same transaction). *id = the new model_id. */
int donto_sheaf_registry_add(donto_store *s, const char *name, const char *task, const donto_sheaf_check *c,
                             const void *ckpt, size_t len, int activate, int64_t *id, donto_err *err);
/* Models of task (NULL: all), by model_id; no checkpoint bytes. */
int donto_sheaf_registry_list(donto_store *s, const char *task, donto_sheaf_reg_model **out, size_t *n,
                              donto_err *err);
/* One model by name, or by id when ref is all digits (a name that is all
 * digits is found by name when no id matches). with_ckpt: load the bytes. */
int donto_sheaf_registry_get(donto_store *s, const char *ref, int with_ckpt, donto_sheaf_reg_model *out,
                             donto_err *err);
/* Make ref its task's active model in one transaction: the current active
 * one (if another) becomes 'retired'. *previous = its id (0: none). Rolling
 * back is activating the previous one. Activating the active one is a no-op. */
int donto_sheaf_registry_activate(donto_store *s, const char *ref, int64_t *previous, donto_err *err);
/* ref becomes 'retired' (its task then has no active model if it was). */
int donto_sheaf_registry_retire(donto_store *s, const char *ref, donto_err *err);
/* The active model of task with its checkpoint bytes and id, read in one
 * statement (a consistent row, whatever activations run beside it).
 * DONTO_E_NOT_FOUND when the task has none. */
int donto_sheaf_registry_active(donto_store *s, const char *task, donto_sheaf_reg_model *out, donto_err *err);
/* The same without the checkpoint bytes: which model is active (id, name),
 * cheap enough to ask on every request (the coordinator does, to reload). */
int donto_sheaf_registry_active_info(donto_store *s, const char *task, donto_sheaf_reg_model *out, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
