/* Replication (src/coord/replica.c, serve --replicate): a token's stored
 * vector waits for other tokens; a quorum of agreeing votes decides, every
 * vote that disagrees with it fails; a token never votes on its own or
 * twice; no quorum after max_votes drops the replica; expiry and release
 * put a replica back in line, an extension keeps it out; a suspended
 * token's replicas and votes are forgotten; a full set refuses; replicas
 * nobody took go to the stale callback (the coordinator's verifier). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "replica.h"
#include "unitvec.h"

#define D 8
#define MINCOS 0.99f

static void clear_item(donto_leased_item *it) {
    free(it->item_id), free(it->model), free(it->text);
    memset(it, 0, sizeof *it);
}

/* Hand `token` the next replica and return its vote of vec: the state. */
static int vote(replica_set *r, const char *token, int64_t lease, const float *vec, int64_t now, replica_result *res) {
    donto_leased_item it;
    if (!replica_issue(r, token, -1, lease, now, now + 1000, &it)) return -1;
    int took = replica_take(r, token, "w", it.target, it.item_id, it.lease_id, vec, D, now, res);
    clear_item(&it);
    return took ? res->state : -2;
}

static const replica_vote *verdict(const replica_result *res, const char *token) {
    for (size_t i = 0; i < res->nvotes; i++)
        if (!strcmp(res->votes[i].token, token)) return &res->votes[i];
    return NULL;
}

static int g_stale;
static void on_stale(void *ctx, const char *token, const char *worker, donto_target target, const char *item_id,
                     const char *model, const char *text, const float *vec, int dims, int64_t lease_id) {
    const float *want = ctx;
    CHECK(!strcmp(token, "alice") && !strcmp(worker, "alice/w1") && !strcmp(item_id, "s1") && dims == D &&
              lease_id == 77 && vec && fabsf(vec[0] - want[0]) < 1e-7f && !strcmp(text, "stale text"),
          "the stale callback gets the origin's vector and lease");
    g_stale++;
}

int main(void) {
    float good[D], bad[D], bad2[D];
    unit(good, D, 1), unit(bad, D, 2), unit(bad2, D, 3);
    replica_result res;

    /* 1. Two agree: both pass; the origin's verdict names its stored lease. */
    replica_set *r = replica_new(8, 2, 3, MINCOS);
    CHECK(r != NULL, "replica_new");
    if (!r) return check_report("test_replica");
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "c1", "m", "text one", good, D, 10, 0) == 0, "add");
    CHECK(replica_available(r, "alice", -1, 10) == 0, "a token is not handed its own replica");
    CHECK(replica_available(r, "bob", DONTO_TARGET_ENTITY, 10) == 0, "nor one of another target");
    CHECK(replica_available(r, "bob", DONTO_TARGET_CLAIM, 10) == 1, "another token may take it");
    donto_leased_item it;
    CHECK(replica_issue(r, "alice", -1, 5, 0, 1000, &it) == 0, "issue to its own token: none");
    CHECK(replica_issue(r, "bob", -1, 55, 0, 1000, &it) == 1, "issue to bob");
    CHECK(it.item_id && !strcmp(it.item_id, "c1") && !strcmp(it.text, "text one") && !strcmp(it.model, "m") &&
              it.lease_id == 55,
          "the lease item");
    CHECK(replica_available(r, "carol", -1, 10) == 0, "out to bob: no one else gets it meanwhile");
    CHECK(replica_take(r, "carol", "carol/w", DONTO_TARGET_CLAIM, "c1", 55, good, D, 0, &res) == 0,
          "another token's submit of it is not a vote");
    CHECK(replica_take(r, "bob", "bob/w", DONTO_TARGET_CLAIM, "c1", 54, good, D, 0, &res) == 0,
          "a stale lease_id is not a vote");
    CHECK(replica_take(r, "bob", "bob/w", DONTO_TARGET_CLAIM, "c1", 0, good, D, 0, &res) == 1,
          "bob's submit (no lease_id: a legacy worker) is a vote");
    clear_item(&it);
    CHECK(res.state == REPLICA_DECIDED && res.nvotes == 2, "two agree: decided (state %d, %zu votes)", res.state,
          res.nvotes);
    const replica_vote *va = verdict(&res, "alice"), *vb = verdict(&res, "bob");
    CHECK(va && va->origin && va->pass && va->lease_id == 10 && !strcmp(va->worker, "alice/w1"),
          "the origin passes, under its stored lease");
    CHECK(vb && !vb->origin && vb->pass && vb->lease_id == 55 && !strcmp(vb->worker, "bob/w"), "the voter passes");
    CHECK(fabsf(res.cosine_to_origin - 1.0f) < 1e-5f, "cosine to origin %f", (double)res.cosine_to_origin);
    replica_counts k;
    replica_get_counts(r, &k);
    CHECK(k.waiting == 0 && k.out == 0 && k.added == 1 && k.agreed == 1 && k.disagreed == 0, "counts after agree");

    /* 2. A bad origin: bob agrees with neither... carol sides with bob. */
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "c2", "m", "t2", bad, D, 11, 0) == 0, "add c2");
    CHECK(vote(r, "bob", 60, good, 0, &res) == REPLICA_WAIT, "one disagreement: it waits for a third token");
    CHECK(fabsf(res.cosine_to_origin - 1.0f) > 0.01f, "the cosine to the origin is reported");
    CHECK(replica_available(r, "bob", -1, 10) == 0 && replica_available(r, "alice", -1, 10) == 0,
          "no token votes twice");
    CHECK(vote(r, "carol", 70, good, 0, &res) == REPLICA_DECIDED, "carol makes the quorum");
    va = verdict(&res, "alice"), vb = verdict(&res, "bob");
    const replica_vote *vc = verdict(&res, "carol");
    CHECK(va && !va->pass && vb && vb->pass && vc && vc->pass, "the origin fails, bob and carol pass");

    /* 3. A bad voter: carol sides with the origin. */
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "c3", "m", "t3", good, D, 12, 0) == 0, "add c3");
    CHECK(vote(r, "bob", 61, bad, 0, &res) == REPLICA_WAIT, "bob disagrees");
    CHECK(vote(r, "carol", 71, good, 0, &res) == REPLICA_DECIDED, "decided");
    va = verdict(&res, "alice"), vb = verdict(&res, "bob"), vc = verdict(&res, "carol");
    CHECK(va && va->pass && vb && !vb->pass && vc && vc->pass, "bob fails, the origin and carol pass");

    /* 4. Three disagree, max 3 votes: dropped, no verdict. */
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "c4", "m", "t4", good, D, 13, 0) == 0, "add c4");
    CHECK(vote(r, "bob", 62, bad, 0, &res) == REPLICA_WAIT, "2 votes");
    CHECK(vote(r, "carol", 72, bad2, 0, &res) == REPLICA_DROPPED, "3 votes, no two agree: dropped");
    replica_get_counts(r, &k);
    CHECK(k.waiting == 0 && k.agreed == 1 && k.disagreed == 2 && k.dropped == 1, "counts: agreed %llu disagreed %llu "
          "dropped %llu", (unsigned long long)k.agreed, (unsigned long long)k.disagreed, (unsigned long long)k.dropped);

    /* 5. Expiry, release and extension. */
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "c5", "m", "t5", good, D, 14, 0) == 0, "add c5");
    CHECK(replica_issue(r, "bob", -1, 63, 0, 100, &it) == 1, "out to bob until 100");
    clear_item(&it);
    CHECK(replica_touch(r, "bob", DONTO_TARGET_CLAIM, "c5", 63, 1, 500, 50) == 1, "bob extends it to 500");
    CHECK(replica_available(r, "dave", -1, 10) == 0, "still out at 200");
    CHECK(replica_issue(r, "dave", -1, 80, 200, 1200, &it) == 0, "not issued while out");
    CHECK(replica_issue(r, "dave", -1, 80, 600, 1600, &it) == 1, "after the extension's expiry it goes to dave");
    clear_item(&it);
    CHECK(replica_take(r, "bob", "bob/w", DONTO_TARGET_CLAIM, "c5", 63, good, D, 600, &res) == 0,
          "bob's late submit is not a vote");
    CHECK(replica_touch(r, "dave", DONTO_TARGET_CLAIM, "c5", 80, 0, 0, 610) == 1, "dave releases it");
    CHECK(replica_available(r, "erin", -1, 10) == 1, "released: it waits again");

    /* 6. Forget: a suspended token's replicas go, its votes are removed. */
    CHECK(replica_add(r, "bob", "bob/w", DONTO_TARGET_CLAIM, "b1", "m", "tb", good, D, 20, 0) == 0, "bob adds b1");
    CHECK(vote(r, "alice", 90, bad, 620, &res) == REPLICA_WAIT, "alice disagrees on b1");
    CHECK(replica_forget(r, "alice") == 1, "alice's own replica (c5) dropped");
    CHECK(replica_available(r, "alice", -1, 10) == 1, "alice's vote on b1 is gone: it may be handed to her again");
    CHECK(vote(r, "carol", 91, good, 620, &res) == REPLICA_DECIDED && res.nvotes == 2,
          "b1 decided by bob and carol alone (%zu votes)", res.nvotes);
    replica_free(r);

    /* 7. A full set refuses; stale replicas go to the callback. */
    r = replica_new(2, 2, 2, MINCOS);
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "s1", "m", "stale text", good, D, 77, 0) == 0,
          "add s1");
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "s2", "m", "t", good, D, 78, 500) == 0, "add s2");
    CHECK(replica_add(r, "alice", "alice/w1", DONTO_TARGET_CLAIM, "s3", "m", "t", good, D, 79, 500) == -1,
          "a full set refuses");
    CHECK(replica_take_stale(r, 100, 600, on_stale, good) == 1 && g_stale == 1, "one waiting since before 100");
    replica_get_counts(r, &k);
    CHECK(k.waiting == 1 && k.refused == 1 && k.stale == 1, "counts: waiting %zu refused %llu stale %llu", k.waiting,
          (unsigned long long)k.refused, (unsigned long long)k.stale);
    /* quorum 2 and max 2: one disagreement drops it. */
    CHECK(vote(r, "bob", 92, bad, 700, &res) == REPLICA_DROPPED, "max_votes 2: dropped at once");
    replica_free(r);
    return check_report("test_replica");
}
