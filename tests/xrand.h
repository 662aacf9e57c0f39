/* Deterministic random numbers for the GEMM tests (test_qgemm, test_qgemm8,
 * test_fgemm): one xorshift64 stream per test program, seeded in main so a
 * test's data never depends on the order its cases run in other files. */
#ifndef DONTO_TEST_XRAND_H
#define DONTO_TEST_XRAND_H
#include <stdint.h>

static uint64_t xrand_state = 88172645463325252ull;
static inline void xrand_seed(uint64_t s) { xrand_state = s ? s : 88172645463325252ull; }
/* uniform in (0, 1) */
static inline double urand(void) {
    xrand_state ^= xrand_state << 13;
    xrand_state ^= xrand_state >> 7;
    xrand_state ^= xrand_state << 17;
    return ((xrand_state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static inline float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }
#endif
