/*
 * donto-accel coordinator: the adaptive sampling policy (trust.h).
 */
#define _GNU_SOURCE /* getrandom */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "donto/util.h"
#include "trust.h"

void trust_params_default(trust_params *tp) {
    tp->trust_after = TRUST_AFTER_DEFAULT;
    tp->p_untrusted = TRUST_P_UNTRUSTED_DEFAULT;
    tp->decay_k = TRUST_DECAY_K_DEFAULT;
    tp->p_floor = TRUST_P_FLOOR_DEFAULT;
}

static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

double trust_sample_p(const trust_params *tp, int64_t streak, int64_t checks) {
    if (streak < 0) streak = 0;
    if (checks >= 0 && streak > checks) streak = checks;
    double cap = clamp01(tp->p_untrusted);
    if (streak < tp->trust_after || streak == 0) return cap;
    double q = tp->decay_k > 0 ? tp->decay_k / (double)streak : 0;
    double p = q * q;
    if (p > cap) p = cap;
    if (p < tp->p_floor) p = tp->p_floor;
    return clamp01(p);
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint64_t g_seed;
static atomic_uint_fast64_t g_counter;

static void seed_once(void) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        /* No entropy source (a kernel without getrandom): a weaker seed
         * from the clock and the pid, said once. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)getpid() << 16);
        DLOG_WARN("trust: getrandom failed; sampling seeded from the clock (predictable)");
    }
    g_seed = s;
}

uint64_t trust_rng_seed(void) {
    pthread_once(&g_once, seed_once);
    uint64_t s = g_seed ^ (atomic_fetch_add(&g_counter, 1) * 0xD1B54A32D192ED03ull);
    return splitmix64(&s);
}

static _Thread_local uint64_t t_state;
static _Thread_local int t_seeded;

int trust_draw(double p, uint64_t *rng_state) {
    if (!rng_state) {
        if (!t_seeded) {
            t_state = trust_rng_seed();
            t_seeded = 1;
        }
        rng_state = &t_state;
    }
    if (!(p > 0)) return 0; /* NaN too */
    if (p >= 1) return 1;
    /* 53 random bits -> [0, 1): exact for every p a double can hold. */
    double u = (double)(splitmix64(rng_state) >> 11) * 0x1.0p-53;
    return u < p;
}

int trust_should_check(const trust_params *tp, int64_t streak, int64_t checks, uint64_t *rng_state) {
    return trust_draw(trust_sample_p(tp, streak, checks), rng_state);
}
