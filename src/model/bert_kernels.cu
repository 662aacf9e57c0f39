/*
 * The fused kernels of the CUDA forward pass; see bert_kernels.cuh. The
 * arithmetic mirrors bert_cpu.c (the fp32 reference): two-pass LayerNorm in
 * fp32, exact erf GELU, max-subtracted softmax with expf, mean pooling
 * then an L2 norm accumulated in double with torch's 1e-12 clamp.
 */
#include "bert_kernels.cuh"

#include <math.h>

namespace bk {

namespace {

constexpr int ROW_THREADS = 128;

template <typename In> __device__ __forceinline__ In to_in(float v);
template <> __device__ __forceinline__ float to_in<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 to_in<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block; every thread gets the result. sh: 32 floats. */
__device__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = threadIdx.x < nw ? sh[lane] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    float r = sh[0];
    __syncthreads(); /* sh is reused by the next call */
    return r;
}

__device__ double block_sum_d(double v, double *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = threadIdx.x < nw ? sh[lane] : 0.0;
    if (warp == 0) v = warp_sum_d(v);
    if (threadIdx.x == 0) sh[0] = v;
    __syncthreads();
    double r = sh[0];
    __syncthreads();
    return r;
}

/* Row r already holds the pre-norm values in x (each thread its own
 * elements i = tid + k * blockDim): normalise in place, write the operand
 * copy. Two passes over the row (mean, then variance), as the CPU does. */
template <typename In>
__device__ void ln_row(float *x, const float *g, const float *b, float eps, int H, In *xin, float *sh) {
    float s = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) s += x[i];
    const float mean = block_sum(s, sh) / (float)H;
    float v = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float d = x[i] - mean;
        v += d * d;
    }
    const float var = block_sum(v, sh) / (float)H;
    const float inv = 1.0f / sqrtf(var + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float y = (x[i] - mean) * inv * g[i] + b[i];
        x[i] = y;
        xin[i] = to_in<In>(y);
    }
}

template <typename In>
__global__ void embed_ln_k(const int32_t *ids, const int32_t *cu, int nseq, const float *word, const float *pos,
                           const float *type0, const float *g, const float *b, float eps, int H, float *x, In *xin) {
    __shared__ float sh[32];
    const int t = blockIdx.x;
    /* The token's sequence: the last s with cu[s] <= t. */
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    const int p = t - cu[lo];
    const float *we = word + (size_t)ids[t] * H, *pe = pos + (size_t)p * H;
    float *xr = x + (size_t)t * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) xr[i] = we[i] + (pe[i] + type0[i]);
    ln_row<In>(xr, g, b, eps, H, xin + (size_t)t * H, sh);
}

template <typename In>
__global__ void add_ln_k(const float *y, const float *bias, float *x, const float *g, const float *b, float eps,
                         int H, In *xin) {
    __shared__ float sh[32];
    const size_t r = blockIdx.x;
    float *xr = x + r * H;
    const float *yr = y + r * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) xr[i] += yr[i] + bias[i];
    ln_row<In>(xr, g, b, eps, H, xin + r * H, sh);
}

template <typename In>
__global__ void bias_gelu_k(const float *y, const float *bias, size_t n, int FF, In *fin) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % (size_t)FF];
        fin[i] = to_in<In>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

__global__ void gather_rows_k(const float *x, const int32_t *cu, int H, float *xc) {
    const int s = blockIdx.x;
    const float *src = x + (size_t)cu[s] * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) xc[(size_t)s * H + i] = src[i];
}

__global__ void pool_l2_k(const float *x, const int32_t *cu, int H, int cls_compact, float *out) {
    __shared__ double sh[32];
    const int s = blockIdx.x;
    float *o = out + (size_t)s * H;
    double ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v;
        if (cls_compact) {
            v = x[(size_t)s * H + i];
        } else {
            const int a = cu[s], e = cu[s + 1];
            float acc = 0;
            for (int t = a; t < e; t++) acc += x[(size_t)t * H + i];
            v = acc / (float)(e - a);
        }
        o[i] = v;
        ss += (double)v * v;
    }
    ss = block_sum_d(ss, sh);
    const float inv = (float)(1.0 / fmax(sqrt(ss), 1e-12));
    for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] *= inv;
}

/* Attention over packed sequences. Block (s, query tile, head): 4 warps,
 * each owning QPW queries; keys and values stream through shared memory in
 * tiles of 32 (one key per lane for the scores), with an online softmax
 * (running max and sum, rescaled per tile), so any length up to the model
 * maximum runs in fixed shared memory. The QKV bias is added on load. */
constexpr int AW = 4, QPW = 4, QB = AW * QPW, KT = 32;

template <typename In, int D>
__global__ void __launch_bounds__(AW * 32) attention_k(const float *qkv, const float *bqkv, const int32_t *cu, int H,
                                                       float scale, int cls_only, In *ctx) {
    constexpr int DPL = D / 32;
    __shared__ float Ks[KT][D + 1];
    __shared__ float Vs[KT][D];
    __shared__ float Qs[AW][QPW][D];
    const int s = blockIdx.x, h = blockIdx.z;
    const int o = cu[s], len = cu[s + 1] - o;
    const int q0 = blockIdx.y * QB;
    if (q0 >= len) return; /* the whole block leaves before any barrier */
    const int nq = cls_only ? 1 : min(QB, len - q0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t ld = 3 * (size_t)H;
    const float *bq = bqkv + h * D, *bkk = bqkv + H + h * D, *bv = bqkv + 2 * H + h * D;

#pragma unroll
    for (int qi = 0; qi < QPW; qi++) {
        const int q = warp * QPW + qi;
        if (q < nq)
            for (int d = lane; d < D; d += 32)
                Qs[warp][qi][d] = (qkv[(size_t)(o + q0 + q) * ld + h * D + d] + bq[d]) * scale;
    }
    float m[QPW], l[QPW], acc[QPW][DPL];
#pragma unroll
    for (int qi = 0; qi < QPW; qi++) {
        m[qi] = -INFINITY, l[qi] = 0;
#pragma unroll
        for (int k = 0; k < DPL; k++) acc[qi][k] = 0;
    }
    for (int k0 = 0; k0 < len; k0 += KT) {
        __syncthreads(); /* previous tile fully used (and Qs written, first time) */
        for (int idx = threadIdx.x; idx < KT * D; idx += blockDim.x) {
            const int j = idx / D, d = idx % D, key = k0 + j;
            float kv = 0, vv = 0;
            if (key < len) {
                const float *row = qkv + (size_t)(o + key) * ld + h * D;
                kv = row[H + d] + bkk[d];
                vv = row[2 * H + d] + bv[d];
            }
            Ks[j][d] = kv;
            Vs[j][d] = vv;
        }
        __syncthreads();
        const int key = k0 + lane, nk = min(KT, len - k0);
#pragma unroll
        for (int qi = 0; qi < QPW; qi++) {
            if (warp * QPW + qi >= nq) continue; /* warp-uniform */
            float sc = -INFINITY;
            if (key < len) {
                sc = 0;
#pragma unroll
                for (int d = 0; d < D; d++) sc += Qs[warp][qi][d] * Ks[lane][d];
            }
            const float mnew = fmaxf(m[qi], warp_max(sc)); /* finite: the tile has a key */
            const float p = key < len ? expf(sc - mnew) : 0.0f;
            const float corr = expf(m[qi] - mnew);
            l[qi] = l[qi] * corr + warp_sum(p);
#pragma unroll
            for (int k = 0; k < DPL; k++) acc[qi][k] *= corr;
            for (int j = 0; j < nk; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int k = 0; k < DPL; k++) acc[qi][k] += pj * Vs[j][lane + 32 * k];
            }
            m[qi] = mnew;
        }
    }
#pragma unroll
    for (int qi = 0; qi < QPW; qi++) {
        const int q = warp * QPW + qi;
        if (q >= nq) continue;
        const size_t row = cls_only ? (size_t)s : (size_t)(o + q0 + q);
        const float inv = 1.0f / l[qi];
#pragma unroll
        for (int k = 0; k < DPL; k++) ctx[row * H + h * D + lane + 32 * k] = to_in<In>(acc[qi][k] * inv);
    }
}

int row_threads(int H) { return H >= ROW_THREADS ? ROW_THREADS : ((H + 31) / 32) * 32; }

} // namespace

bool attention_supported(int D) { return D == 32 || D == 64 || D == 128; }

template <typename In>
cudaError_t embed_ln(const int32_t *ids, const int32_t *cu, int nseq, int T, const float *word, const float *pos,
                     const float *type0, const float *g, const float *b, float eps, int H, float *x, In *xin,
                     cudaStream_t st) {
    embed_ln_k<In><<<T, row_threads(H), 0, st>>>(ids, cu, nseq, word, pos, type0, g, b, eps, H, x, xin);
    return cudaGetLastError();
}

template <typename In>
cudaError_t attention(const float *qkv, const float *bqkv, const int32_t *cu, int nseq, int maxlen, int H, int NH,
                      int cls_only, In *ctx, cudaStream_t st) {
    const int D = H / NH;
    dim3 grid(nseq, cls_only ? 1 : (maxlen + QB - 1) / QB, NH);
    const float scale = 1.0f / sqrtf((float)D);
    switch (D) {
    case 32: attention_k<In, 32><<<grid, AW * 32, 0, st>>>(qkv, bqkv, cu, H, scale, cls_only, ctx); break;
    case 64: attention_k<In, 64><<<grid, AW * 32, 0, st>>>(qkv, bqkv, cu, H, scale, cls_only, ctx); break;
    case 128: attention_k<In, 128><<<grid, AW * 32, 0, st>>>(qkv, bqkv, cu, H, scale, cls_only, ctx); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename In>
cudaError_t add_ln(const float *y, const float *bias, float *x, const float *g, const float *b, float eps, int H,
                   int M, In *xin, cudaStream_t st) {
    add_ln_k<In><<<M, row_threads(H), 0, st>>>(y, bias, x, g, b, eps, H, xin);
    return cudaGetLastError();
}

template <typename In>
cudaError_t bias_gelu(const float *y, const float *bias, int M, int FF, In *fin, cudaStream_t st) {
    const size_t n = (size_t)M * FF;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65536) blocks = 65536; /* grid-stride beyond */
    bias_gelu_k<In><<<(unsigned)blocks, 256, 0, st>>>(y, bias, n, FF, fin);
    return cudaGetLastError();
}

cudaError_t gather_rows(const float *x, const int32_t *cu, int nseq, int H, float *xc, cudaStream_t st) {
    gather_rows_k<<<nseq, row_threads(H), 0, st>>>(x, cu, H, xc);
    return cudaGetLastError();
}

cudaError_t pool_l2(const float *x, const int32_t *cu, int nseq, int H, int cls_compact, float *out,
                    cudaStream_t st) {
    pool_l2_k<<<nseq, row_threads(H), 0, st>>>(x, cu, H, cls_compact, out);
    return cudaGetLastError();
}

#define INST(In)                                                                                                  \
    template cudaError_t embed_ln<In>(const int32_t *, const int32_t *, int, int, const float *, const float *,   \
                                      const float *, const float *, const float *, float, int, float *, In *,     \
                                      cudaStream_t);                                                              \
    template cudaError_t attention<In>(const float *, const float *, const int32_t *, int, int, int, int, int,    \
                                       In *, cudaStream_t);                                                       \
    template cudaError_t add_ln<In>(const float *, const float *, float *, const float *, const float *, float,   \
                                    int, int, In *, cudaStream_t);                                                \
    template cudaError_t bias_gelu<In>(const float *, const float *, int, int, In *, cudaStream_t);
INST(float)
INST(__nv_bfloat16)

} // namespace bk
