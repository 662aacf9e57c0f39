/*
 * What this CPU can run, and the CPU engine's kernel sets (private to the
 * model module; the public face is donto_isa in donto/encoder.h).
 *
 * Detection runs once per process (pthread_once): CPUID for the
 * instructions, XGETBV for the register state the OS saves (an instruction
 * is usable only when the OS also saves its registers: ymm for AVX/AVX2,
 * opmask + zmm for AVX-512, the tile data for AMX), and on Linux
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before AMX is called
 * usable. Everything a flag below says is safe to execute.
 *
 * A kernel set (donto_isa) is a rung on one ladder, in the order of
 * donto_isa: portable < avx2 < avxvnni < avx512 < avx512vnni < avx512bf16
 * (avx512bf16 adds the bf16 GEMM; its other kernels are avx512vnni's). "auto" takes
 * the highest rung the CPU supports; a forced set the CPU lacks is refused
 * (cpu_isa_missing says why).
 */
#ifndef DONTO_CPU_ISA_H
#define DONTO_CPU_ISA_H

#include <stddef.h>

#include "donto/encoder.h"

typedef struct cpu_features {
    /* usable: the CPU has it and the OS saves its state */
    unsigned char avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avxvnni, avx512bf16;
    unsigned char amx_tile, amx_int8, amx_bf16;
    /* for messages: CPUID lists AVX-512 / AMX but the OS does not enable it */
    unsigned char avx512_no_os, amx_no_os;
} cpu_features;

/* The features of this CPU (detected on the first call; thread-safe). */
const cpu_features *cpu_features_get(void);

/* 1 when this CPU runs kernel set s (DONTO_ISA_AUTO: 1). */
int cpu_isa_supported(donto_isa s);
/* The highest set this CPU runs (DONTO_ISA_PORTABLE at least). */
donto_isa cpu_isa_best(void);
/* s, or cpu_isa_best() for DONTO_ISA_AUTO. */
donto_isa cpu_isa_resolve(donto_isa s);
/* The set a kernel call runs: s resolved, or the best this CPU has when it
 * lacks s (never an illegal instruction). */
donto_isa cpu_isa_runnable(donto_isa s);
/* What a set's kernels are made of (s as given; resolve it first for
 * DONTO_ISA_AUTO): zmm registers (avx512, avx512vnni, avx512bf16), VNNI's vpdpwssd /
 * vpdpbusd (avxvnni, avx512vnni, avx512bf16). */
int cpu_isa_zmm(donto_isa s);
int cpu_isa_vnni(donto_isa s);
/* vdpbf16ps (avx512bf16) */
int cpu_isa_bf16(donto_isa s);
/* The features s needs that this CPU lacks, comma-separated ("" when none). */
void cpu_isa_missing(donto_isa s, char *buf, size_t n);
/* The features this CPU has, space-separated ("avx avx2 fma ..."; "none"). */
void cpu_features_describe(char *buf, size_t n);

/* OpenBLAS: the level of its kernels by core name (openblas_get_corename),
 * and the level of this CPU on the same scale: 0 SSE, 1 AVX, 2 AVX2, 3
 * AVX-512; -1 for a core name this table does not know. */
int cpu_blas_core_level(const char *core);
int cpu_level(void);
/* An OPENBLAS_CORETYPE value for a level ("SkylakeX", "Haswell", ...). */
const char *cpu_level_coretype(int level);

/* blas_steer.c's decision: the OpenBLAS core to steer to (NULL: none, why
 * says so) given DONTO_BLAS_STEER (mode: "auto" or a core name), the core
 * OpenBLAS runs, this CPU's level (cpu_level), the core for that level and
 * the user's OPENBLAS_CORETYPE (NULL when unset). */
const char *blas_steer_decide(const char *mode, const char *core, int cpu_lvl, const char *target,
                              const char *user_coretype, char *why, size_t n);

#endif
