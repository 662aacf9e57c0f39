/* Canary items (src/coord/canary.c): a reference offered comes back as a
 * lease item of the target asked for; its submit is matched by token, item
 * and lease_id (or item alone for a legacy submit without lease_id) and
 * checked against the reference; another token's submit, a stale lease_id
 * and an expired canary do not match; a release forgets it, an extension
 * keeps it past its first expiry; the pool keeps its newest references. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canary.h"
#include "check.h"

#define D 8

static void unitv(float *v, int seed) {
    double n = 0;
    for (int i = 0; i < D; i++) v[i] = (float)sin(seed * 7.0 + i * 1.3), n += (double)v[i] * v[i];
    for (int i = 0; i < D; i++) v[i] = (float)(v[i] / sqrt(n));
}

static void clear_item(donto_leased_item *it) {
    free(it->item_id), free(it->model), free(it->text);
    memset(it, 0, sizeof *it);
}

int main(void) {
    canary_set *c = canary_new(4, 8);
    CHECK(c != NULL, "canary_new");
    if (!c) return check_report("test_canary");
    uint64_t rng = 42;
    donto_leased_item it;
    CHECK(canary_issue(c, "alice", -1, 100, 0, 1000, &rng, &it) == 0, "an empty pool issues nothing");

    float r1[D], r2[D], bad[D];
    unitv(r1, 1), unitv(r2, 2), unitv(bad, 3);
    canary_offer(c, DONTO_TARGET_CLAIM, "c1", "m", "text one", r1, D);
    canary_offer(c, DONTO_TARGET_CLAIM, "c1", "m", "text one", r1, D); /* the same again: kept once */
    size_t np = 0, no = 0;
    canary_counts(c, &np, &no);
    CHECK(np == 1 && no == 0, "pool %zu out %zu", np, no);
    CHECK(canary_issue(c, "alice", DONTO_TARGET_ENTITY, 100, 0, 1000, &rng, &it) == 0, "no canary of another target");

    /* Issued as a lease item; the right vector matches, once. */
    CHECK(canary_issue(c, "alice", DONTO_TARGET_CLAIM, 100, 0, 1000, &rng, &it) == 1, "issue");
    CHECK(it.item_id && !strcmp(it.item_id, "c1") && !strcmp(it.text, "text one") && !strcmp(it.model, "m") &&
              it.lease_id == 100 && it.target == DONTO_TARGET_CLAIM,
          "the lease item");
    clear_item(&it);
    float cosv = 0;
    CHECK(canary_take(c, "mallory", DONTO_TARGET_CLAIM, "c1", 100, r1, D, &cosv, 10) == 0, "another token's submit");
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 99, r1, D, &cosv, 10) == 0, "a stale lease_id");
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 100, r1, D, &cosv, 10) == 1 && fabsf(cosv - 1) < 1e-6,
          "the right vector: cosine %f", cosv);
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 100, r1, D, &cosv, 10) == 0, "taken once only");

    /* A wrong vector, through a legacy submit (no lease_id). */
    CHECK(canary_issue(c, "alice", -1, 101, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 0, bad, D, &cosv, 10) == 1 && cosv < 0.99f,
          "a wrong vector matched with cosine %f", cosv);
    CHECK(canary_issue(c, "alice", -1, 102, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 102, r1, D - 1, &cosv, 10) == 1 && cosv == -2.0f,
          "wrong dims: %f", cosv);

    /* Expiry, extension, release. */
    CHECK(canary_issue(c, "alice", -1, 103, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 103, r1, D, &cosv, 1000) == 0, "expired at 1000");
    CHECK(canary_issue(c, "alice", -1, 104, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    CHECK(canary_touch(c, "alice", DONTO_TARGET_CLAIM, "c1", 104, 1, 5000, 500) == 1, "extend");
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 104, r1, D, &cosv, 2000) == 1, "alive after extension");
    CHECK(canary_issue(c, "alice", -1, 105, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    CHECK(canary_touch(c, "alice", DONTO_TARGET_CLAIM, "c1", 105, 0, 0, 10) == 1, "release");
    CHECK(canary_take(c, "alice", DONTO_TARGET_CLAIM, "c1", 105, r1, D, &cosv, 10) == 0, "gone after release");

    /* The pool is a ring of the newest 4; outstanding ones keep their own copy. */
    CHECK(canary_issue(c, "bob", -1, 106, 0, 1000, &rng, &it) == 1, "issue");
    clear_item(&it);
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "p%d", i);
        canary_offer(c, DONTO_TARGET_CLAIM, id, "m", "t", r2, D);
    }
    canary_counts(c, &np, &no);
    CHECK(np == 4 && no == 1, "pool %zu out %zu", np, no);
    CHECK(canary_take(c, "bob", DONTO_TARGET_CLAIM, "c1", 106, r1, D, &cosv, 10) == 1 && fabsf(cosv - 1) < 1e-6,
          "an outstanding canary outlives its pool entry");
    int seen_c1 = 0;
    for (int i = 0; i < 40; i++) {
        CHECK(canary_issue(c, "bob", -1, 200 + i, 0, 1000, &rng, &it) == 1, "issue");
        seen_c1 |= !strcmp(it.item_id, "c1");
        CHECK(canary_touch(c, "bob", it.target, it.item_id, it.lease_id, 0, 0, 10) == 1, "release it again");
        clear_item(&it);
    }
    CHECK(!seen_c1, "the oldest reference was dropped from the pool");
    /* At most 8 out: a ninth is not issued. */
    canary_set *d = canary_new(2, 2);
    canary_offer(d, DONTO_TARGET_CLAIM, "x", "m", "t", r1, D);
    int issued = 0;
    for (int i = 0; i < 3; i++) {
        issued += canary_issue(d, "bob", -1, 300 + i, 0, 1000, &rng, &it);
        clear_item(&it);
    }
    CHECK(issued == 2, "outstanding bound: %d issued", issued);
    canary_free(d);
    canary_free(c);
    return check_report("test_canary");
}
