/*
 * The CUDA engine's memory plan, in plain C so it builds and is tested
 * without a GPU (batching itself is not here: that is batch.h, shared by
 * every engine):
 *
 *   - the buffer plan: one device arena carved into the activation buffers
 *     for the largest batch (reused by every batch), plus per-slot pinned
 *     host / device buffers for ids, offsets and output vectors;
 *   - bf16 rounding, as the engine stores its GEMM operands.
 */
#ifndef DONTO_GPU_PLAN_H
#define DONTO_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "donto/model.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------- buffer plan ---------- */

typedef struct gp_region {
    size_t off, bytes;
} gp_region;

typedef struct gp_bufplan {
    int max_tokens, max_seqs, in_bytes; /* in_bytes: GEMM operand size (2 bf16, 4 fp32) */
    /* Device arena (one allocation, reused by every batch). */
    gp_region x;    /* fp32 [T,H] residual stream */
    gp_region xc;   /* fp32 [S,H] CLS rows gathered for the CLS-only last layer */
    gp_region xin;  /* in   [T,H] GEMM copy of x */
    gp_region ctx;  /* in   [T,H] attention output */
    gp_region y;    /* fp32 [T,max(3H,FF)] GEMM output (QKV, then the others) */
    gp_region fin;  /* in   [T,FF] GELU output, the FFN-out GEMM input */
    gp_region ws;   /* cuBLASLt workspace */
    size_t arena_bytes;
    /* Per slot, the same layout in pinned host memory and in device memory. */
    gp_region ids;  /* int32 [T] */
    gp_region cu;   /* int32 [S+1] */
    gp_region out;  /* fp32 [S,H] pooled, normalised vectors */
    size_t slot_bytes;
} gp_bufplan;

/* Alignment of every region (bytes): enough for cuBLASLt and vector loads. */
#define GP_ALIGN 256

int gp_bufplan_make(const donto_bert_config *c, int max_tokens, int max_seqs, int in_bytes,
                    size_t workspace, gp_bufplan *p, donto_err *err);

/* ---------- bf16 ---------- */

/* fp32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN): how the
 * CUDA engine stores its GEMM weights, and how bench_bf16_emulate rounds. */
uint16_t gp_f32_to_bf16(float f);
static inline float gp_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

#ifdef __cplusplus
}
#endif
#endif
