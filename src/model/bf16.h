/*
 * The bf16 CPU path (--precision bf16 on --device cpu): every Linear weight
 * rounded to bfloat16 once at open, activations rounded per call, products
 * accumulated in fp32. Attention, LayerNorm, GELU and softmax stay fp32
 * (the same code as the fp32 path).
 *
 * The arithmetic is bf16's on every CPU; the speed is not. A product of two
 * bf16 numbers (8-bit significands) is exact in fp32 (24 bits), so rounding
 * both operands to bf16 and running fp32 sgemm on them computes what a
 * native bf16 dot product with fp32 accumulation (vdpbf16ps) computes, up to
 * the order of the sums. That is what this backend does: it gives bf16's
 * accuracy (measured against fp32 on any CPU) at fp32's speed. A native
 * kernel needs AVX-512 BF16 (or AMX-BF16); Debian's OpenBLAS 0.3.21 is
 * built without its bf16 GEMM (cblas_sbgemm is declared but not exported),
 * so there is none yet and bf16 is never a CPU default (docs/engine.md).
 */
#ifndef DONTO_BF16_H
#define DONTO_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "bert_cpu.h"
#include "donto/model.h"

typedef struct bert_bf16 bert_bf16;

int bert_bf16_init(bert_bf16 **out, const donto_bert_weights *w, donto_err *err);
void bert_bf16_free(bert_bf16 *b);
/* The linear backend over b (ops->isa: the caller's kernel set). */
void bert_bf16_ops(bert_linear_ops *ops, const bert_bf16 *b);

/* dst[i] = src[i] rounded to the nearest bfloat16 (ties to even), as fp32. */
void bf16_round_f32(float *dst, const float *src, size_t n);
#endif
