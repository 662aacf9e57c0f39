/*
 * The bf16 CPU path (--precision bf16 on --device cpu): every Linear weight
 * rounded to bfloat16 once at open, activations rounded per call, products
 * accumulated in fp32. Attention, LayerNorm, GELU and softmax stay fp32
 * (the same code as the fp32 path).
 *
 * The arithmetic is bf16's on every CPU; the speed is not. On the
 * avx512bf16 kernel set the GEMMs are native (vdpbf16ps, bgemm.h: twice the
 * multiply-adds of an fp32 FMA per instruction). Elsewhere a product of two
 * bf16 numbers (8-bit significands) is exact in fp32 (24 bits), so rounding
 * both operands to bf16 and running fp32 sgemm on them computes what the
 * native kernel computes, up to the order of the sums: bf16's accuracy at
 * fp32's speed. Debian's OpenBLAS 0.3.21 is built without its bf16 GEMM
 * (cblas_sbgemm is declared but not exported), so it offers no other way.
 */
#ifndef DONTO_BF16_H
#define DONTO_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "bert_cpu.h"
#include "donto/model.h"

typedef struct bert_bf16 bert_bf16;

/* isa: the kernel set (native GEMM where it is avx512bf16). */
int bert_bf16_init(bert_bf16 **out, const donto_bert_weights *w, donto_isa isa, donto_err *err);
void bert_bf16_free(bert_bf16 *b);
/* The linear backend over b (ops->isa: the caller's kernel set). */
void bert_bf16_ops(bert_linear_ops *ops, const bert_bf16 *b);
/* What runs its GEMMs ("bf16 vdpbf16ps zmm 8x32", "bf16 values, fp32 fma
 * zmm 8x32", "bf16 values, openblas sgemm") and why that one, for logs. */
const char *bert_bf16_kernel_name(const bert_bf16 *b);
const char *bert_bf16_why(const bert_bf16 *b);

/* dst[i] = src[i] rounded to bfloat16 as donto_bf16_from_f32 rounds (nearest,
 * ties to even, a subnormal to zero, as the hardware does), as fp32. */
void bf16_round_f32(float *dst, const float *src, size_t n);
/* The same, on kernel set isa (AVX2 integer ops on every SIMD set; the same
 * bits). */
void bf16_round_f32_isa(float *dst, const float *src, size_t n, donto_isa isa);
#endif
