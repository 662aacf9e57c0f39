/*
 * Pieces shared by the GEMM micro-kernels of fgemm.c, qgemm.c and qgemm8.c
 * (private to the model library).
 *
 *  - KASM_ZERO_*: zeroing the accumulators in inline assembly. A VEX vpxor
 *    on xmm zeroes the whole ymm / zmm register (the upper bits are
 *    cleared), and is a zeroing idiom the CPU resolves at rename.
 *  - KASM_LOOP_6X16 / KASM_LOOP_8X32 / KASM_LOOP_6X32: the k loop of the
 *    integer kernels' full tiles in inline assembly (qgemm.c int16,
 *    qgemm8.c int8), one ROW(base, idx, r0, r1) per row, from the six-row
 *    list KASM_ROWS_6_AT and the step KASM_LOOP_END; see the macros.
 *  - KTILE_TABLE_8X2: the dispatch table of the zmm kernels' tiles, 1 to 8
 *    rows x 1 or 2 panels of 16 columns, indexed [rows][panels] (row 0 and
 *    panel 0 empty); F_R_N is the function for R rows and N panels.
 *  - ktile_mask16: the lane mask (__mmask16 bits) of a 16-lane vector
 *    holding the first n of its lanes (n <= 0: none, n >= 16: all).
 *  - ktile_prefetch_row: a row of activations into L1 before it is
 *    quantized (qgemm.c, qgemm8.c).
 */
#ifndef DONTO_MODEL_KERN_TILE_H
#define DONTO_MODEL_KERN_TILE_H

#define KASM_ZERO(r) "vpxor %%xmm" #r ", %%xmm" #r ", %%xmm" #r "\n\t"
/* registers 0-11 (the 6 x 16 ymm tiles' accumulators) */
#define KASM_ZERO_0_11                                                                             \
    KASM_ZERO(0) KASM_ZERO(1) KASM_ZERO(2) KASM_ZERO(3) KASM_ZERO(4) KASM_ZERO(5) KASM_ZERO(6) \
    KASM_ZERO(7) KASM_ZERO(8) KASM_ZERO(9) KASM_ZERO(10) KASM_ZERO(11)
/* registers 0-15 (the 8 x 32 zmm tiles' accumulators) */
#define KASM_ZERO_0_15 KASM_ZERO_0_11 KASM_ZERO(12) KASM_ZERO(13) KASM_ZERO(14) KASM_ZERO(15)

/* The integer kernels' k loops in inline assembly, built from two pieces:
 *  - KASM_ROWS_6_AT(ROW, D): ROW(base, idx, r0, r1) for rows 0-5
 *    (accumulators 2r and 2r+1; rows 0-2 from [pa], 3-5 from [pb], stride
 *    [s] bytes), every address displaced by the string D ("" or "4*3": a
 *    k quad of an unrolled loop);
 *  - KASM_LOOP_END(MORE): 4 bytes on along each row (a k quad of u8 or a k
 *    pair of s16), MORE (another row pointer's step), 64 on in [b], [n]
 *    times back to label 1.
 * KASM_LOOP_6X16: the 6 x 16 ymm tiles, the two panels' 32 weight bytes of
 * one k step in ymm12-13. KASM_LOOP_8X32: the 8 x 32 zmm tiles, the two
 * panels' weights in zmm16-17 (the second [ps] bytes after the first),
 * rows 6-7 from [pc]. KASM_LOOP_6X32: 6 rows of the zmm tiles, the weights
 * in zmm24-25 (qgemm8.c's tiles with weight scale groups). */
#define KASM_ROWS_6_AT(ROW, D)                                                                     \
    ROW(D "(%[pa])", "", 0, 1) ROW(D "(%[pa],", "%[s],1)", 2, 3) ROW(D "(%[pa],", "%[s],2)", 4, 5) \
    ROW(D "(%[pb])", "", 6, 7) ROW(D "(%[pb],", "%[s],1)", 8, 9) ROW(D "(%[pb],", "%[s],2)", 10, 11)
#define KASM_LOOP_END(MORE)                                                                        \
    "add $4, %[pa]\n\t"                                                                            \
    "add $4, %[pb]\n\t" MORE                                                                       \
    "add $64, %[b]\n\t"                                                                            \
    "dec %[n]\n\t"                                                                                 \
    "jnz 1b\n\t"
#define KASM_LOOP_6X16(ROW)                                                                        \
    "1:\n\t"                                                                                        \
    "vmovdqa (%[b]), %%ymm12\n\t"                                                                   \
    "vmovdqa 32(%[b]), %%ymm13\n\t"                                                                 \
    KASM_ROWS_6_AT(ROW, "") KASM_LOOP_END("")
#define KASM_LOOP_8X32(ROW)                                                                        \
    "1:\n\t"                                                                                        \
    "vmovdqa64 (%[b]), %%zmm16\n\t"                                                                 \
    "vmovdqa64 (%[b],%[ps],1), %%zmm17\n\t"                                                         \
    KASM_ROWS_6_AT(ROW, "") ROW("(%[pc])", "", 12, 13) ROW("(%[pc],", "%[s],1)", 14, 15)          \
    KASM_LOOP_END("add $4, %[pc]\n\t")
#define KASM_LOOP_6X32(ROW)                                                                        \
    "1:\n\t"                                                                                        \
    "vmovdqa64 (%[b]), %%zmm24\n\t"                                                                 \
    "vmovdqa64 (%[b],%[ps],1), %%zmm25\n\t"                                                         \
    KASM_ROWS_6_AT(ROW, "") KASM_LOOP_END("")

#define KTILE_ROW_(F, R) {NULL, F##_##R##_1, F##_##R##_2}
/* initializer of a [9][3] table: static const fn t[9][3] = KTILE_TABLE_8X2(F); */
#define KTILE_TABLE_8X2(F)                                                                            \
    {{NULL, NULL, NULL}, KTILE_ROW_(F, 1), KTILE_ROW_(F, 2), KTILE_ROW_(F, 3), KTILE_ROW_(F, 4), \
     KTILE_ROW_(F, 5),   KTILE_ROW_(F, 6), KTILE_ROW_(F, 7), KTILE_ROW_(F, 8)}

static inline unsigned short ktile_mask16(int n) {
    return (unsigned short)(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* The k floats of row x into L1, one prefetch per 64-byte line. The
 * quantizers call it two rows ahead: their rows were written by the
 * previous op, often in another thread's row block, so they come from L3. */
static inline void ktile_prefetch_row(const float *x, int k) {
    for (int c = 0; c < k; c += 16) _mm_prefetch((const char *)(x + c), _MM_HINT_T0);
}
#endif

#endif
