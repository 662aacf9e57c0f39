/*
 * donto-accel coordinator: the adaptive sampling policy of contributor
 * verification (issue 15). Pure logic, no I/O: how likely an accepted item
 * of a token is to be re-embedded and compared (verify.h does that), given
 * the token's record of passed checks.
 *
 * The schedule (BOINC's adaptive replication: a host is trusted after ~10
 * consecutive valid results and re-checked with a falling probability; here
 * it falls with the square of the streak, so the floor comes soon, plus a
 * floor):
 *
 *   streak < trust_after (10)  p = p_untrusted (1.0): every item of a new
 *                              token is checked until 10 checks in a row pass
 *   streak >= trust_after      p = max(p_floor, min(p_untrusted, (decay_k / streak)^2)),
 *                              decay_k = 10, p_floor = 0.015
 *
 * streak is the token's count of consecutive passed checks; a failed check
 * means suspension (the caller's business), so a token that carries on has
 * never failed since its streak began.
 *
 * Why p_untrusted = 1.0: it costs 10 re-embeddings per token, once, and a
 * token that is bad from the start (the cheapest attack: mint a token, send
 * garbage) is caught on its first item instead of after ~1/p of them.
 *
 * The arithmetic (items = accepted items of one token):
 *   - continuity: at streak 10, (10/10)^2 = 1.0, so trust starts where
 *     probation ends; the next check comes after s^2/100 items on average
 *     at streak s.
 *   - ramp: streak S is reached after ~10 + sum_{s=10}^{S-1} s^2/100 =
 *     10 + (S^3 - 1000)/300 items; the floor ((10/S)^2 = 0.015) at S = 82,
 *     after ~1,850 items and 82 checks. A token's lifetime share of checked
 *     items is S/N below the floor (S = cbrt(300 (N - 10) + 1000)) and
 *     (82 + 0.015 (N - 1,850)) / N above it: 100% at N = 10, 6.7% at 1,000,
 *     2.05% at 10,000, 1.66% at 50,000, 1.51% at 1,000,000.
 *   - steady state: a trusted token at the floor has 1.5% of its items
 *     checked. A check costs the coordinator an fp32 re-embedding, about 2.4
 *     times a worker's int16 item (bench/trust: 12.9 ms of CPU per check
 *     against 5.3 ms per item on the Zen 3 fleet), so ~3.6% of the fleet's
 *     CPU when both share the machine: under the 5% budget. (The earlier
 *     schedule, max(0.02, 10/streak), reached its floor only after ~12,500
 *     items and cost ~4.8% there: bench/trust measured 11.5%.)
 *   - detection: whatever its history, each bad item of a token is checked
 *     independently with p >= p_floor, so a token that turns bad escapes
 *     1,000 bad items with probability <= 0.985^1000 = e^(1000 ln 0.985) =
 *     e^-15.1 = 2.7e-7 (p_floor 0.01 would give 0.99^1000 = 4.3e-5: about a
 *     one-in-three chance that one of 10,000 such tokens gets past 1,000;
 *     0.02 gives 1.7e-9 at a third more checks). Bad items before the catch:
 *     1/0.015 = 67 on average, <= 457 for 99.9% of tokens (ln 1000 /
 *     -ln 0.985). tests/test_trust.c simulates it.
 *   - a skipped check (verify_push returning 1: queue full) lowers the real
 *     rate to p x (1 - drop share); the pool must be sized so that drops stay
 *     rare, or the guarantee above weakens in proportion.
 *
 * The draws must be unpredictable to contributors (they choose what to send
 * bad), so the default generator is seeded from getrandom(2) once per process
 * and per thread after that; tests seed their own state for repeatability.
 * (splitmix64: not cryptographic, but its state never leaves the process.)
 */
#ifndef DONTO_COORD_TRUST_H
#define DONTO_COORD_TRUST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRUST_AFTER_DEFAULT 10
#define TRUST_P_UNTRUSTED_DEFAULT 1.0
#define TRUST_DECAY_K_DEFAULT 10.0
#define TRUST_P_FLOOR_DEFAULT 0.015

typedef struct trust_params {
    int64_t trust_after; /* consecutive passed checks before a token is trusted (10) */
    double p_untrusted;  /* sampling probability before that (1.0); also the cap after */
    double decay_k;      /* once trusted: p = (decay_k / streak)^2 (10) */
    double p_floor;      /* ... but never below this (0.015) */
} trust_params;

void trust_params_default(trust_params *tp);

/* The probability, in [0, 1], that the next accepted item of a token with
 * `streak` consecutive passed checks (out of `checks` checks in all) is
 * checked. checks >= 0 bounds streak (a streak longer than the checks made
 * is a bookkeeping error and buys no trust); checks < 0: unknown, not used.
 * Negative streak counts as 0. */
double trust_sample_p(const trust_params *tp, int64_t streak, int64_t checks);

/* 1 with probability p (p <= 0: never, p >= 1: always), from a splitmix64
 * stream: *rng_state when rng_state is non-NULL (seed it with any value for a
 * repeatable stream), else this thread's own state, seeded from getrandom(2)
 * via trust_rng_seed() on first use. */
int trust_draw(double p, uint64_t *rng_state);

/* A fresh unpredictable seed: the process's getrandom(2) seed (read once)
 * mixed with a counter, so every call (and every thread) gets its own. */
uint64_t trust_rng_seed(void);

/* trust_draw(trust_sample_p(tp, streak, checks), rng_state). */
int trust_should_check(const trust_params *tp, int64_t streak, int64_t checks, uint64_t *rng_state);

#ifdef __cplusplus
}
#endif
#endif
