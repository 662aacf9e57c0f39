/*
 * donto-accel coordinator: replication (serve --replicate N; docs/trust.md).
 *
 * BOINC's answer to an untrusted contributor, for a coordinator that has no
 * engine of its own or would rather not spend it: the same item is embedded
 * by another token, and a vector is accepted when a quorum of tokens agree.
 *
 * A replica is a vector a token submitted (stored, not yet verified: its
 * "origin" vote). It travels like a canary (canary.h): mixed into another
 * token's lease answer as an ordinary item, never reaching the store when it
 * comes back; the submitted vector is a new vote. After each vote:
 *
 *   - some vote agrees (cosine >= min_cosine) with at least quorum - 1
 *     others: decided. Every vote agreeing with that one passes, every
 *     other vote fails (its token is suspended by the caller);
 *   - no quorum yet and fewer than max_votes votes: the replica waits for
 *     one more token;
 *   - max_votes votes and no quorum: dropped, no verdict for anyone.
 *
 * A token never votes twice on a replica, nor on its own. Replicas wait in a
 * bounded set (a full set refuses new ones: the caller checks those items
 * another way, or not at all, and counts them). A replica handed out and not
 * returned by its expiry waits again; a release does the same; an extension
 * keeps it out longer. In memory only: a restart forgets the replicas (their
 * vectors stay stored and unverified; docs/trust.md).
 *
 * Thread-safe (one mutex; linear scans: the set is a few thousand at most).
 */
#ifndef DONTO_COORD_REPLICA_H
#define DONTO_COORD_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "donto/store.h"

#define REPLICA_VOTES_MAX 5
#define REPLICA_ITEM_ID_MAX 2048 /* longer item ids are not replicated (the wire's bound) */

typedef struct replica_set replica_set;

/* cap replicas at once; quorum in [2, REPLICA_VOTES_MAX], max_votes in
 * [quorum, REPLICA_VOTES_MAX] (clamped). NULL: out of memory. */
replica_set *replica_new(size_t cap, int quorum, int max_votes, float min_cosine);
void replica_free(replica_set *r);

/* A vector token's worker stored under lease_id: its item waits for other
 * tokens. 0: added; -1: the set is full (or out of memory, or the item id is
 * longer than REPLICA_ITEM_ID_MAX). */
int replica_add(replica_set *r, const char *token, const char *worker, donto_target target, const char *item_id,
                const char *model, const char *text, const float *vec, int dims, int64_t lease_id, int64_t now_ms);

/* Replicas token may be handed now (waiting, not its own, not voted on by
 * it) of target (< 0: any), at most max. */
size_t replica_available(replica_set *r, const char *token, int target, size_t max);

/* Hand token a replica of target (< 0: any) as lease item out (heap strings,
 * as the store's) under lease_id, out until expires_ms. 1: done; 0: none
 * (or out of memory). The oldest waiting replica goes first. */
int replica_issue(replica_set *r, const char *token, int target, int64_t lease_id, int64_t now_ms,
                  int64_t expires_ms, donto_leased_item *out);

/* A verdict on one vote. */
typedef struct replica_vote {
    char token[DONTO_TOKEN_NAME_MAX + 1];
    char worker[DONTO_TOKEN_NAME_MAX + 1]; /* as the store names it (truncated for logs) */
    int64_t lease_id; /* the origin's: the stored vector; a voter's: the replica's */
    int origin;       /* 1: the stored vector */
    int pass;
    float cosine; /* to the decided vector (1 for itself) */
} replica_vote;

typedef struct replica_result {
    int state; /* REPLICA_WAIT, REPLICA_DECIDED or REPLICA_DROPPED */
    float cosine_to_origin; /* of the vote just taken */
    size_t nvotes;
    replica_vote votes[REPLICA_VOTES_MAX]; /* when decided: every vote's verdict */
    char origin_token[DONTO_TOKEN_NAME_MAX + 1];
    donto_target target;
    char item_id[REPLICA_ITEM_ID_MAX + 1];
} replica_result;

enum { REPLICA_WAIT = 0, REPLICA_DECIDED = 1, REPLICA_DROPPED = 2 };

/* Is the submitted item (token's worker's; lease_id 0: any of its leases) a
 * replica handed to token? 1: it was; its vote is counted and *res says what
 * follows (a decided or dropped replica is gone from the set). 0: no. */
int replica_take(replica_set *r, const char *token, const char *worker, donto_target target, const char *item_id,
                 int64_t lease_id, const float *vec, int dims, int64_t now_ms, replica_result *res);

/* A release (extend = 0: the replica waits again) or an extension (extend =
 * 1: out until expires_ms) of an item; 1 when it was a replica out to token. */
int replica_touch(replica_set *r, const char *token, donto_target target, const char *item_id, int64_t lease_id,
                  int extend, int64_t expires_ms, int64_t now_ms);

/* A suspended token: its own replicas are dropped (their count returned;
 * the caller settles their pending checks), and its votes on others'
 * removed (a replica out to it waits again). */
size_t replica_forget(replica_set *r, const char *token);

/* Replicas waiting for a token since before older_than_ms (never handed out
 * or back from expiry): each is removed and given to fn (e.g. to the
 * coordinator's own verifier); returns how many. */
typedef void (*replica_stale_fn)(void *ctx, const char *token, const char *worker, donto_target target,
                                 const char *item_id, const char *model, const char *text, const float *vec,
                                 int dims, int64_t lease_id);
size_t replica_take_stale(replica_set *r, int64_t older_than_ms, int64_t now_ms, replica_stale_fn fn, void *ctx);

typedef struct replica_counts {
    size_t waiting, out;                   /* now */
    uint64_t added, refused, agreed, disagreed, dropped, stale; /* since start */
} replica_counts;
void replica_get_counts(replica_set *r, replica_counts *out);

#endif
