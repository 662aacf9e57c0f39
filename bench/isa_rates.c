/*
 * bench_isa_rates: how fast this core issues the instructions our GEMM
 * kernels are made of, with nothing else in the way: 16 independent zmm
 * (14 ymm) accumulators in registers, zeroed first (no subnormal or NaN
 * operand can take a slow path), one instruction repeated, no loads.
 * What a kernel can reach at most, and which kernel a CPU should prefer
 * (docs/engine.md, "bf16": vdpbf16ps against vfmadd231ps).
 *
 *   bench_isa_rates [millions of instructions per rate, default 200]
 *
 * Prints, per instruction the CPU has: ns per instruction (thread CPU time)
 * and the multiply-adds it does per second (x2 = GFLOP/s, or GOP/s for the
 * integer ones); an instruction the CPU lacks is printed as SKIP.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "bench_util.h"
#include "cpu_isa.h"

/* One timed loop: ZEROS once, then n iterations of BODY (16 instructions). */
#define RATE_ASM(ZEROS, BODY)                                                                                    \
    __asm__ volatile(ZEROS "1:\n\t" BODY "dec %0\n\t"                                                             \
                     "jnz 1b\n\t"                                                                                \
                     : "+r"(it)                                                                                  \
                     :                                                                                           \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                       "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc")
#define ZMM_ZEROS                                                                                                \
    ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,30,31\n\tvpxord %%zmm\\r, %%zmm\\r, %%zmm\\r\n\t.endr\n\t"
#define ZMM_BODY(INSN) ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\t" INSN " %%zmm30, %%zmm31, %%zmm\\r\n\t.endr\n\t"
#define YMM_ZEROS ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\tvpxor %%ymm\\r, %%ymm\\r, %%ymm\\r\n\t.endr\n\t"
#define YMM_BODY(INSN) ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,0,1\n\t" INSN " %%ymm14, %%ymm15, %%ymm\\r\n\t.endr\n\t"
#define RATE_BODY(INSN) RATE_ASM(ZMM_ZEROS, ZMM_BODY(INSN))
#define YRATE_BODY(INSN) RATE_ASM(YMM_ZEROS, YMM_BODY(INSN))

/* n x 16 instructions; each function one instruction (16 accumulators, the
 * sources registers 30/31; on ymm, where AVX2 has 16 registers, the sources
 * are 14/15 and 14 accumulators take the 16 instructions) */
#define RATE_FN(NAME, TARGET, BODY, INSN)                                                                        \
    __attribute__((target(TARGET))) static void NAME(long n) {                                                  \
        long it = n;                                                                                             \
        BODY(INSN);                                                                                              \
    }
RATE_FN(r_fma_ymm, "avx2,fma", YRATE_BODY, "vfmadd231ps")
RATE_FN(r_fma_zmm, "avx512f", RATE_BODY, "vfmadd231ps")
RATE_FN(r_dpbf16, "avx512f,avx512bf16", RATE_BODY, "vdpbf16ps")
RATE_FN(r_dpwssd, "avx512f,avx512vnni", RATE_BODY, "vpdpwssd")
RATE_FN(r_dpbusd, "avx512f,avx512vnni", RATE_BODY, "vpdpbusd")
RATE_FN(r_maddwd, "avx512f,avx512bw", RATE_BODY, "vpmaddwd")

typedef struct {
    const char *name;
    void (*fn)(long);
    int have;
    double macs; /* multiply-adds per instruction */
} rate;

int main(int argc, char **argv) {
    static const char usage[] = "bench_isa_rates [millions of instructions per rate 1..100000, default 200]";
    const long n = (long)(bench_arg_num(argc, argv, 1, 200, 1, 1e5, usage) * 1e6 / 16);
    bench_args_at_most(argc, 1, usage);
    const cpu_features *f = cpu_features_get();
    const int zmm = f->avx512f && f->avx512bw;
    const rate rates[] = {
        {"vfmadd231ps ymm (fp32)", r_fma_ymm, f->avx2 && f->fma, 8},
        {"vfmadd231ps zmm (fp32)", r_fma_zmm, zmm, 16},
        {"vdpbf16ps zmm (bf16 pairs)", r_dpbf16, zmm && f->avx512bf16, 32},
        {"vpmaddwd zmm (int16 pairs)", r_maddwd, zmm, 32},
        {"vpdpwssd zmm (int16 pairs)", r_dpwssd, zmm && f->avx512vnni, 32},
        {"vpdpbusd zmm (int8 quads)", r_dpbusd, zmm && f->avx512vnni, 64},
    };
    char cpu[256];
    cpu_features_describe(cpu, sizeof cpu);
    printf("cpu: %s\none thread, %ld instructions per rate, 16 independent accumulators\n", cpu, n * 16);
    printf("%-28s %10s %12s\n", "instruction", "ns/insn", "G mul-add/s");
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++) {
        if (!rates[i].have) {
            printf("%-28s SKIP: CPU lacks it\n", rates[i].name);
            continue;
        }
        rates[i].fn(n / 8); /* warm the unit up */
        const double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
        rates[i].fn(n);
        const double t = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID) - t0;
        printf("%-28s %10.3f %12.1f\n", rates[i].name, t / (n * 16.0) * 1e9, n * 16.0 * rates[i].macs / t * 1e-9);
    }
    return 0;
}
