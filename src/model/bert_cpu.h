/*
 * The CPU engine: forward pass of a BERT encoder over a packed batch.
 *
 * A batch is nseq sequences laid end to end: sequence s owns token rows
 * [off[s], off[s+1]) of every activation matrix, so the dense layers run as
 * one big GEMM over T = off[nseq] rows with no padding, and only attention
 * looks at sequence boundaries.
 *
 * Like the CUDA engine (bert_cuda.h) it plugs into the encoder's one
 * batcher as a bp_engine (batch.h): one slot (host buffers for the packed
 * ids, offsets and output vectors) and the scratch of the largest batch;
 * submit runs bert_cpu_forward on the engine's threads, synchronously.
 */
#ifndef DONTO_BERT_CPU_H
#define DONTO_BERT_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "donto/encoder.h"
#include "donto/model.h"

/* Linear-layer backend: fp32 BLAS, or the integer path (quant.c).
 * The forward pass splits rows over its threads and calls gemm once per
 * thread, so a backend is single-threaded and needs only its own scratch. */
typedef struct bert_linear_ops {
    /* Y[m, n] = X[m, k] W^T (+ bias when add_bias) for layer l's matrix
     * `which` (0 qkv, 1 attn_out, 2 ffn_in, 3 ffn_out). */
    void (*gemm)(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                 void *scratch);
    const void *ctx;
    /* Scratch bytes one thread needs for an m-row call. */
    size_t (*scratch_bytes)(const void *ctx, int m);
    /* How the forward splits a GEMM's rows over its threads. 0: one block
     * per thread, fixed (OpenBLAS packs W again on every call, so more
     * calls cost more). > 0: blocks of about this many rows handed out as
     * threads become free (a backend whose weights are packed once, where a
     * call costs nothing extra), so a core slowed by other work takes fewer
     * blocks instead of holding the other threads at the join. */
    int row_block;
    /* The kernel set of the forward's own loops (GELU, softmax, LayerNorm,
     * attention): AVX2 code on every SIMD set, plain C on portable; set by
     * bert_fp32_ops / bert_quant_ops (DONTO_ISA_AUTO there: the best). */
    donto_isa isa;
} bert_linear_ops;

/* Bytes of scratch memory bert_cpu_forward needs for T packed tokens whose
 * longest sequence has maxlen tokens, run on nthreads threads. */
size_t bert_cpu_scratch_bytes(const donto_bert_config *c, const bert_linear_ops *ops, int T,
                              int maxlen, int nthreads);

/* ids[T] packed, off[nseq+1]. Writes nseq pooled, L2-normalised vectors of
 * c->hidden floats to out. pooling is a donto_pooling. */
void bert_cpu_forward(const donto_bert_weights *w, const bert_linear_ops *ops, int pooling,
                      const int32_t *ids, const int *off, int nseq, float *out, void *scratch,
                      size_t scratch_bytes, int nthreads);

/* ---------- the engine ---------- */

typedef struct bert_cpu bert_cpu;

typedef struct bert_cpu_opts {
    int pooling;    /* donto_pooling */
    int max_tokens; /* token budget of one batch */
    int max_seqs;   /* sequences per batch */
    int max_len;    /* longest sequence (sizes the attention scratch) */
    int threads;    /* OpenMP threads of the forward */
} bert_cpu_opts;

/* w and ops (copied; its ctx is not) must outlive the engine. */
int bert_cpu_open(const donto_bert_weights *w, const bert_linear_ops *ops, const bert_cpu_opts *o, bert_cpu **out,
                  donto_err *err);
void bert_cpu_close(bert_cpu *g);
/* Fill e with this engine's slot and callbacks (e->ctx = g; e->close frees g). */
void bert_cpu_engine(bert_cpu *g, bp_engine *e);

/* Y[m, n] = X[m, k] W[n, k]^T (+ bias[n] when bias) through cblas_sgemm: the fp32
 * backend's product, also the bf16 backend's (on bf16-rounded operands). */
void bert_sgemm_xwt(const float *X, int m, const float *W, int n, int k, const float *bias, float *Y);
/* The fp32 linear backend (OpenBLAS); ops->isa = DONTO_ISA_AUTO. */
void bert_fp32_ops(bert_linear_ops *ops, const donto_bert_weights *w);

/* The fp32 linear backend on weights packed once (fgemm.h): the same
 * products as fp32 up to rounding order, without OpenBLAS's per-call
 * packing and bias pass.  isa: the kernel set of its GEMMs and loops. */
typedef struct bert_fp32p bert_fp32p;
int bert_fp32p_init(bert_fp32p **out, const donto_bert_weights *w, donto_isa isa, donto_err *err);
void bert_fp32p_free(bert_fp32p *p);
void bert_fp32p_ops(bert_linear_ops *ops, const bert_fp32p *p);
/* "fp32 fma ymm 6x16", for logs and --stats. */
const char *bert_fp32p_kernel_name(const bert_fp32p *p);

/* The forward's GELU and softmax on kernel set isa's loops, exposed for
 * tests. */
void bert_gelu_isa(donto_isa isa, float *x, size_t n);
void bert_softmax_isa(donto_isa isa, float *x, int n);
/* Which instance of the forward's loops kernel set isa runs: "portable"
 * (plain C, libm's erff), "avx2" (the AVX2 sets) or "avx512" (the AVX-512
 * sets: GELU, softmax, LayerNorm and attention in zmm). Sets with the same instance
 * give the same bits. */
const char *bert_kern_name(donto_isa isa);
/* The attention loops of one (sequence, head) on kernel set isa's loops
 * (bert_kern_name), as the forward calls them
 * for sequences under its GEMM threshold: qkv rows [o, o+len) (row stride
 * 3H: Q, K, V), head h of size D, queries [q0, q1); ctx rows (stride
 * ctx_stride) from query q0's, columns [h D, (h+1) D). Reads no qkv row
 * outside the sequence. scratch: bert_attend_scratch_floats(D, len) floats. */
size_t bert_attend_scratch_floats(int D, int len);
void bert_attend_one(donto_isa isa, const float *qkv, int H, int D, int h, int o, int len, int q0, int q1,
                     float *ctx, int ctx_stride, float *scratch);
/* The shortest sequence whose attention (head size D) the forward runs as
 * two OpenBLAS GEMMs per head on kernel set isa (bert_attend_gemm: S = Q K^T
 * * scale, row softmax, ctx = S V; all queries, ctx rows [o, o+len) with
 * stride H, columns [h D, (h+1) D); scratch: len * len floats); shorter ones
 * run the loops (bert_attend_one). bench_attend measures the crossover. */
int bert_attend_gemm_min(donto_isa isa, int D);
void bert_attend_gemm(donto_isa isa, const float *qkv, int H, int D, int h, int o, int len, float *ctx,
                      float *scratch);
#endif
