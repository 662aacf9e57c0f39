/*
 * bench_blas.h: a bench's OpenBLAS anchor as the product runs it. Debian's
 * OpenBLAS 0.3.21 takes some CPUs for older ones (Sapphire / Emerald Rapids
 * for a Prescott: SSE3 kernels), and donto-embed steers it to this CPU's
 * kernels first thing in main (donto_blas_steer, docs/engine.md
 * "OpenBLAS"); a bench that compares against OpenBLAS does the same, so its
 * anchor is what the product would call, and prints which kernels ran.
 * DONTO_BLAS_STEER=off measures OpenBLAS's own choice instead.
 */
#ifndef DONTO_BENCH_BLAS_H
#define DONTO_BENCH_BLAS_H

#include <cblas.h>
#include <stdio.h>

#include "donto/encoder.h"

/* First thing in main, before any thread (it may re-execute the program). */
static inline void bench_blas_steer(char **argv) {
    donto_blas_steer(argv);
    printf("openblas: core %s; steering: %s\n", openblas_get_corename(), donto_blas_steer_state());
}
#endif
