/* Tests: a deterministic pseudo-random unit vector (an LCG per seed), the
 * same bytes on every machine, for submits that must pass the norm check. */
#ifndef DONTO_TEST_UNITVEC_H
#define DONTO_TEST_UNITVEC_H

#include <math.h>
#include <stddef.h>

static inline void unit(float *v, size_t n, unsigned seed) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 16 & 0x7fff) - 16384) / 16384.0f;
        ss += (double)v[i] * v[i];
    }
    for (size_t i = 0; i < n; i++) v[i] = (float)(v[i] / sqrt(ss));
}

#endif
