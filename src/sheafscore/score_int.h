/* donto-accel: sheaf_score's private parts: the task names and the writer
 * (sql.c), which buffers one batch's rows and writes them in one transaction,
 * SQLite and PostgreSQL side by side. */
#ifndef DONTO_SHEAF_SCORE_INT_H
#define DONTO_SHEAF_SCORE_INT_H

#include <stdint.h>

#include "donto/store.h"
#include "donto/util.h"

enum { SC_ARG_LINK = 0, SC_IDENTITY = 1, SC_CLAIM_SCORE = 2 };
int sc_task_parse(const char *task); /* SC_*, -1 unknown */

/* The watermark of the last finished run of (task, model_id); INT64_MIN when none. */
int sc_last_watermark(donto_store *s, const char *task, int64_t model_id, int64_t *wm, donto_err *err);

typedef struct sc_writer sc_writer;
sc_writer *sc_writer_open(donto_store *s, int64_t model_id, const char *model_name, const char *task, donto_err *err);
int sc_writer_begin(sc_writer *w, donto_err *err);
/* One item's K probabilities (replacing the model's older scores of (item, item2)). */
int sc_writer_item(sc_writer *w, const char *item, const char *item2, const char *const *cls, const float *p, int K,
                   donto_err *err);
/* An argument item -> item2 with relation rel, context "sheaf:model-<name>". */
int sc_writer_propose(sc_writer *w, const char *src, const char *dst, const char *rel, float p, donto_err *err);
/* Write the batch in one transaction; adds the rows and new arguments written. */
int sc_writer_commit(sc_writer *w, int64_t *rows, int64_t *proposed, donto_err *err);
/* The run row. */
int sc_writer_finish(sc_writer *w, int64_t watermark, int64_t rows, donto_err *err);
void sc_writer_close(sc_writer *w);

#endif
