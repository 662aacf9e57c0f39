/*
 * The CUDA engine: the BERT forward of bert_cpu.c on one GPU, bf16 tensor
 * cores (cuBLASLt, fp32 accumulation) or fp32 for parity checks.
 *
 * C interface to bert_cuda.cu; only built with -DDONTO_CUDA=ON. The engine
 * owns the weights on the device (uploaded once at open), one activation
 * arena sized for the token budget (gpu_plan.h), nslots pinned host +
 * device buffer sets, and three streams (upload, compute, download) ordered
 * by events, so that packing and uploading batch k+1 overlaps the compute
 * of batch k. Like the CPU engine (bert_cpu.h) it plugs into the encoder's
 * one batcher as a bp_engine (batch.h), with the same op names.
 */
#ifndef DONTO_BERT_CUDA_H
#define DONTO_BERT_CUDA_H

#include "donto/encoder.h"
#include "donto/model.h"
#include "batch.h"
#include "gpu_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bert_cuda bert_cuda;

typedef struct bert_cuda_opts {
    int gpu;        /* device ordinal */
    int bf16;       /* 1: bf16 GEMM operands; 0: fp32 everywhere (no TF32) */
    int pooling;    /* donto_pooling */
    int max_tokens; /* token budget of one batch */
    int max_seqs;   /* sequences per batch */
    int nslots;     /* pipeline depth, 2..BP_MAX_SLOTS */
} bert_cuda_opts;

int bert_cuda_open(const donto_bert_weights *w, const bert_cuda_opts *o, bert_cuda **out, donto_err *err);
void bert_cuda_close(bert_cuda *g);
/* Number of visible CUDA devices. */
int bert_cuda_device_count(int *n, donto_err *err);
/* Fill e with this engine's slots and callbacks (e->ctx = g; e->close frees
 * g, e->info gives bert_cuda_info). */
void bert_cuda_engine(bert_cuda *g, bp_engine *e);
int bert_cuda_info(const bert_cuda *g, donto_encoder_devinfo *out);

#ifdef __cplusplus
}
#endif
#endif
