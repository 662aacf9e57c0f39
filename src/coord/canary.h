/*
 * donto-accel coordinator: canary items (docs/trust.md).
 *
 * A canary is an item whose true vector the coordinator already holds: one
 * it embedded itself when it verified a contributor's vector (the
 * verifier's reference, fp32). It is mixed into a lease answer like any
 * other item (a lease_id, a random place in the batch) and, when it comes
 * back in a submit, it is compared with the reference at no engine cost and
 * never reaches the store: the worker is told it was stored, as it would be
 * for a real item. A mismatch is a failed check like any other.
 *
 *   pool         the references offered (bounded ring: the newest kept);
 *   outstanding  canaries handed out and not yet returned, per token, with
 *                the lease_id given and an expiry (bounded; expired ones
 *                are dropped).
 * Thread-safe (one mutex; the lists are small).
 */
#ifndef DONTO_COORD_CANARY_H
#define DONTO_COORD_CANARY_H

#include <stddef.h>
#include <stdint.h>

#include "donto/store.h"

typedef struct canary_set canary_set;

/* pool_cap references at most, outstanding_cap canaries out at once. */
canary_set *canary_new(size_t pool_cap, size_t outstanding_cap); /* NULL: out of memory */
void canary_free(canary_set *c);

/* Offer a reference: the coordinator's own vector (unit norm) of text. */
void canary_offer(canary_set *c, donto_target target, const char *item_id, const char *model, const char *text,
                  const float *ref, int dims);

/* Hand token a canary of target (< 0: any) as lease item out (heap
 * strings, as the store's), under lease_id, out until expires_ms. 0 when
 * the pool has none (or no memory); rng draws which one. */
int canary_issue(canary_set *c, const char *token, int target, int64_t lease_id, int64_t now_ms,
                 int64_t expires_ms, uint64_t *rng, donto_leased_item *out);

/* Is the submitted item (token's; lease_id 0: any of its leases) an
 * outstanding canary? 1: it was, it is no longer outstanding, and *cosine
 * is the cosine of vec to the reference (-2 when the dims differ); 0: no. */
int canary_take(canary_set *c, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                const float *vec, int dims, float *cosine, int64_t now_ms);

/* A release (extend = 0: it is no longer outstanding) or an extension
 * (extend = 1: it runs until expires_ms) of an item; 1 when it was a
 * canary of token's. */
int canary_touch(canary_set *c, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                 int extend, int64_t expires_ms, int64_t now_ms);

/* References in the pool, canaries out (for /stats). */
void canary_counts(canary_set *c, size_t *pool, size_t *outstanding);

#endif
