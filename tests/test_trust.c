/* The sampling policy (src/coord/trust.c): the schedule's values, the draw
 * rate against p, repeatability when seeded, and a simulated attacker that
 * turns bad after 2,000 honest items and must be checked within 1,000 bad
 * items in each of 10,000 seeded trials. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "trust.h"

static void test_schedule(void) {
    trust_params tp;
    trust_params_default(&tp);
    CHECK(tp.trust_after == 10 && tp.p_untrusted == 1.0 && tp.decay_k == 10.0 && tp.p_floor == 0.015,
          "defaults: after %lld p_untrusted %g k %g floor %g", (long long)tp.trust_after, tp.p_untrusted, tp.decay_k,
          tp.p_floor);
    static const struct {
        int64_t streak, checks;
        double p;
    } pts[] = {
        {0, 0, 1.0},       {1, 1, 1.0},       {9, 9, 1.0},         {10, 10, 1.0},
        {11, 11, 100.0 / 121},              {20, 20, 0.25},      {40, 40, 0.0625},   {50, 60, 0.04},
        {81, 81, 100.0 / 6561},             /* just above the floor */
        {82, 82, 0.015},   {100, 100, 0.015}, {1000000, 1000000, 0.015},
        {-5, 0, 1.0},      /* a negative streak is no streak */
        {100, 5, 1.0},     /* a streak longer than the checks buys nothing: 5 < 10 */
        {50, 20, 0.25},    /* ... it counts as the checks made */
        {100, -1, 0.015},  /* checks unknown: the streak alone */
    };
    for (size_t i = 0; i < sizeof pts / sizeof *pts; i++) {
        double p = trust_sample_p(&tp, pts[i].streak, pts[i].checks);
        CHECK(fabs(p - pts[i].p) < 1e-12, "p(streak %lld, checks %lld) = %.6f, want %.6f", (long long)pts[i].streak,
              (long long)pts[i].checks, p, pts[i].p);
    }
    /* monotone non-increasing in the streak, never below the floor */
    double prev = 2;
    for (int64_t s = 0; s < 5000; s++) {
        double p = trust_sample_p(&tp, s, s);
        CHECK(p <= prev && p >= tp.p_floor, "p(%lld) = %g after %g", (long long)s, p, prev);
        prev = p;
    }
    /* odd parameters stay in [0, 1] */
    trust_params odd = {.trust_after = 0, .p_untrusted = 3, .decay_k = 100, .p_floor = -1};
    CHECK(trust_sample_p(&odd, 0, 0) == 1.0 && trust_sample_p(&odd, 5, 5) == 1.0, "odd params above 1");
    odd.p_untrusted = 0.5, odd.decay_k = 0;
    CHECK(trust_sample_p(&odd, 50, 50) == 0.0, "odd params below 0: %g", trust_sample_p(&odd, 50, 50));
}

static void test_draws(void) {
    const double ps[] = {0.02, 0.1, 0.5, 0.9};
    const int N = 1000000;
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
        uint64_t st = 42 + k;
        long hits = 0;
        for (int i = 0; i < N; i++) hits += trust_draw(ps[k], &st);
        double mean = N * ps[k], sd = sqrt(N * ps[k] * (1 - ps[k]));
        CHECK(fabs(hits - mean) <= 3 * sd, "p %.2f: %ld hits of %d, expected %.0f +- %.0f", ps[k], hits, N, mean,
              3 * sd);
        fprintf(stderr, "draw rate: p %.2f -> %.6f (%+.2f sigma)\n", ps[k], (double)hits / N, (hits - mean) / sd);
    }
    uint64_t st = 7;
    int never = 0, always = 0;
    for (int i = 0; i < 10000; i++) never += trust_draw(0.0, &st), always += trust_draw(1.0, &st);
    CHECK(never == 0 && always == 10000, "p 0: %d hits; p 1: %d of 10000", never, always);
    CHECK(trust_draw(NAN, &st) == 0, "NaN draws");
    /* seeded: repeatable */
    uint64_t a = 12345, b = 12345;
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= trust_draw(0.3, &a) == trust_draw(0.3, &b);
    CHECK(same && a == b, "two streams from one seed differ");
    /* the process generator: fresh seeds differ; the thread-local stream
     * (rng_state NULL) has the right rate (6 sigma: it is not seeded here) */
    uint64_t s1 = trust_rng_seed(), s2 = trust_rng_seed();
    CHECK(s1 != s2, "two fresh seeds are equal: %llu", (unsigned long long)s1);
    long hits = 0;
    for (int i = 0; i < N; i++) hits += trust_draw(0.25, NULL);
    double sd = sqrt(N * 0.25 * 0.75);
    CHECK(fabs(hits - N * 0.25) <= 6 * sd, "unseeded stream: %ld hits of %d at p 0.25", hits, N);
}

/* One token: `honest` items that pass every check, then bad items until one
 * is checked. Returns the number of bad items sent until (and including) the
 * checked one, or -1 if none of `limit` bad items was checked; *checks_out,
 * the checks made during the honest part. honest < 0: start with the streak
 * at which the floor begins (decay_k / sqrt(p_floor); the schedule is
 * memoryless from there on), which is where a patient attacker turns. */
static long attacker(const trust_params *tp, long honest, long limit, uint64_t *rng, long *checks_out) {
    int64_t streak = 0, checks = 0;
    if (honest < 0) streak = checks = (int64_t)ceil(tp->decay_k / sqrt(tp->p_floor)), honest = 0;
    for (long i = 0; i < honest; i++)
        if (trust_should_check(tp, streak, checks, rng)) streak++, checks++;
    *checks_out = checks;
    for (long b = 1; b <= limit; b++)
        if (trust_should_check(tp, streak, checks, rng)) return b;
    return -1;
}

static void simulate(const trust_params *tp, int trials, long honest, long limit, long *worst, double *mean,
                     int *escaped, double *honest_share) {
    *worst = 0, *escaped = 0;
    double sum = 0, checks_sum = 0;
    for (int t = 0; t < trials; t++) {
        uint64_t rng = 0x5eed0000ull + (uint64_t)t;
        long ch = 0;
        long b = attacker(tp, honest, limit, &rng, &ch);
        checks_sum += (double)ch;
        if (b < 0) {
            (*escaped)++;
            b = limit;
        }
        sum += (double)b;
        if (b > *worst) *worst = b;
    }
    *mean = sum / trials;
    *honest_share = honest > 0 ? checks_sum / ((double)trials * (double)honest) : 0;
}

static void test_attacker(void) {
    trust_params tp;
    trust_params_default(&tp);
    long worst;
    double mean, share;
    int escaped;
    simulate(&tp, 10000, 2000, 100000, &worst, &mean, &escaped, &share);
    fprintf(stderr,
            "attacker bad after 2000 items, 10000 trials, p_floor %.3f: worst %ld bad items, mean %.1f, "
            "%d past 1000; checks in the honest part %.1f%%\n",
            tp.p_floor, worst, mean, escaped, 100 * share);
    CHECK(escaped == 0 && worst <= 1000, "an attacker sent %ld bad items before a check (limit 1000)", worst);

    /* The worst time to turn bad: at the floor (past ~1,850 items). */
    simulate(&tp, 10000, -1, 100000, &worst, &mean, &escaped, &share);
    fprintf(stderr,
            "attacker bad once at the floor (streak 82, ~1,850 items), 10000 trials: worst %ld bad items, "
            "mean %.1f, %d past 1000\n",
            worst, mean, escaped);
    CHECK(escaped == 0 && worst <= 1000, "an attacker at the floor sent %ld bad items before a check", worst);

    /* For the record (not a check): a floor of 0.01.
     * 0.99^1000 = 4.3e-5 per token: ~0.43 escapes expected in 10,000. */
    trust_params lo = tp;
    lo.p_floor = 0.01;
    simulate(&lo, 10000, -1, 100000, &worst, &mean, &escaped, &share);
    fprintf(stderr, "  same with p_floor 0.01 (at its floor): worst %ld, mean %.1f, %d past 1000\n", worst, mean,
            escaped);

    /* The share of items checked over a token's life against trust.h's
     * arithmetic: S / N below the floor (S = cbrt(300 (N - 10) + 1000)),
     * (82 + 0.015 (N - 1,850)) / N above it. */
    static const long lives[] = {1000, 10000, 50000, 1000000};
    for (size_t k = 0; k < sizeof lives / sizeof *lives; k++) {
        long n = lives[k];
        int trials = n >= 1000000 ? 20 : 200;
        double tot = 0;
        for (int t = 0; t < trials; t++) {
            uint64_t rng = 0xabc00000ull + (uint64_t)t;
            long ch = 0;
            attacker(&tp, n, 0, &rng, &ch);
            tot += (double)ch;
        }
        double got = tot / ((double)trials * (double)n);
        double s = cbrt(300.0 * ((double)n - 10) + 1000);
        double want = s < 82 ? s / (double)n : (82 + 0.015 * ((double)n - 1850)) / (double)n;
        fprintf(stderr, "  checked share over %ld items: %.2f%% (arithmetic %.2f%%)\n", n, 100 * got, 100 * want);
        CHECK(fabs(got - want) < 0.15 * want, "share over %ld items %.4f, arithmetic says %.4f", n, got, want);
    }
}

int main(void) {
    test_schedule();
    test_draws();
    test_attacker();
    return check_report("test_trust");
}
