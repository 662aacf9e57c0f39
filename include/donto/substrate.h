/*
 * donto-accel: the substrate, the texts behind the stored vectors.
 * (Placeholder in the recall branch: the substrate branch owns this header
 * and its implementation; recall only needs the one call below.)
 */
#ifndef DONTO_SUBSTRATE_H
#define DONTO_SUBSTRATE_H

#include <stddef.h>

#include "donto/store.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The display text of n items of target t: texts[i] is malloc'd, or NULL
 * when item_ids[i] is unknown. */
int donto_substrate_texts(donto_store *s, donto_target t, const char *const *item_ids, size_t n, char **texts, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
