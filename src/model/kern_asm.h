/*
 * Pieces of the GEMM micro-kernels' inline assembly shared by qgemm.c and
 * qgemm8.c (private to the model library): zeroing the accumulators. A
 * VEX vpxor on xmm zeroes the whole ymm / zmm register (the upper bits are
 * cleared), and is a zeroing idiom the CPU resolves at rename.
 */
#ifndef DONTO_MODEL_KERN_ASM_H
#define DONTO_MODEL_KERN_ASM_H

#define KASM_ZERO(r) "vpxor %%xmm" #r ", %%xmm" #r ", %%xmm" #r "\n\t"
/* registers 0-11 (the 6 x 16 ymm tiles' accumulators) */
#define KASM_ZERO_0_11                                                                             \
    KASM_ZERO(0) KASM_ZERO(1) KASM_ZERO(2) KASM_ZERO(3) KASM_ZERO(4) KASM_ZERO(5) KASM_ZERO(6) \
    KASM_ZERO(7) KASM_ZERO(8) KASM_ZERO(9) KASM_ZERO(10) KASM_ZERO(11)
/* registers 0-15 (the 8 x 32 zmm tiles' accumulators) */
#define KASM_ZERO_0_15 KASM_ZERO_0_11 KASM_ZERO(12) KASM_ZERO(13) KASM_ZERO(14) KASM_ZERO(15)

#endif
