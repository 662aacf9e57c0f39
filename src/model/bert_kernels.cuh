/*
 * Fused element-wise / row kernels of the CUDA forward pass (bert_kernels.cu).
 * The GEMMs are cuBLASLt calls in bert_cuda.cu; everything between them is
 * here, one kernel per fused step, so each activation is read and written
 * once per step:
 *
 *   embed_ln     X = LN(word[id] + pos[t - cu[s]] + type[0])      -> x (fp32), xin
 *   attention    ctx = softmax(Q K^T / sqrt(D)) V per (sequence, head),
 *                Q/K/V from the QKV GEMM output plus its bias, over packed
 *                sequences (cu offsets: no padding tokens are computed)
 *   add_ln       X = LN(X + Y + b)                                 -> x, xin
 *   bias_gelu    F = gelu(Y + b), exact erf                        -> fin
 *   gather_rows  xc[s] = x[cu[s]] (CLS rows for the CLS-only last layer)
 *   pool_l2      out[s] = normalise(CLS row or mean of the sequence's rows)
 *
 * `In` is the GEMM operand type: __nv_bfloat16 (bf16 mode) or float (fp32
 * parity mode). The residual stream, GEMM outputs, LayerNorm and softmax
 * stay fp32 in both modes. Launchers return the launch's cudaError_t.
 */
#ifndef DONTO_BERT_KERNELS_CUH
#define DONTO_BERT_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace bk {

/* Head sizes the attention kernel is instantiated for. */
bool attention_supported(int head_dim);

template <typename In>
cudaError_t embed_ln(const int32_t *ids, const int32_t *cu, int nseq, int T, const float *word, const float *pos,
                     const float *type0, const float *g, const float *b, float eps, int H, float *x, In *xin,
                     cudaStream_t st);

template <typename In>
cudaError_t attention(const float *qkv, const float *bqkv, const int32_t *cu, int nseq, int maxlen, int H, int NH,
                      int cls_only, In *ctx, cudaStream_t st);

template <typename In>
cudaError_t add_ln(const float *y, const float *bias, float *x, const float *g, const float *b, float eps, int H,
                   int M, In *xin, cudaStream_t st);

template <typename In>
cudaError_t bias_gelu(const float *y, const float *bias, int M, int FF, In *fin, cudaStream_t st);

cudaError_t gather_rows(const float *x, const int32_t *cu, int nseq, int H, float *xc, cudaStream_t st);

cudaError_t pool_l2(const float *x, const int32_t *cu, int nseq, int H, int cls_compact, float *out,
                    cudaStream_t st);

} // namespace bk

#endif
