/*
 * The CPU forward's own loops (GELU, softmax, LayerNorm, attention), as a
 * template: bert_cpu.c includes this file once per kernel set, with
 *   BK(name)     the name of this instance's function (name_generic, name_avx2)
 *   BK_TARGET    its target attribute (empty, or target("avx2,fma"))
 *   BK_AVX2      1 where the AVX2 intrinsics paths are compiled in
 * so one binary built for baseline x86-64 carries both and picks one at run
 * time (cpu_isa.h), instead of whatever -march the build machine had. The
 * `omp simd` loops vectorize to the instance's width. Every function here is
 * a leaf called per row or per (sequence, head): no OpenMP region inside.
 * No include guard: it is meant to be included more than once.
 */

BK_TARGET static void BK(gelu)(float *x, size_t n) {
    size_t i = 0;
#if BK_AVX2
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f),
                 rs2 = _mm256_set1_ps(0.70710678118654752f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = _ZGVdN8v_erff(_mm256_mul_ps(v, rs2));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
    }
#endif
    for (; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

BK_TARGET static void BK(softmax)(float *x, int n) {
    int i = 0;
    float mx = -INFINITY, sum = 0;
#if BK_AVX2
    /* Explicit vector max: without -ffast-math the compiler will not
     * vectorise a float max reduction, and this runs once per score row. */
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(x + i));
    float t[8];
    _mm256_storeu_ps(t, vmx);
    for (int k = 0; k < 8; k++) mx = t[k] > mx ? t[k] : mx;
#endif
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    i = 0;
#if BK_AVX2
    __m256 vm = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    _mm256_storeu_ps(t, vs);
    for (int k = 0; k < 8; k++) sum += t[k];
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    i = 0;
#if BK_AVX2
    const __m256 vi = _mm256_set1_ps(inv);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
#endif
    for (; i < n; i++) x[i] *= inv;
}

/* y = LN(x + r + b) * g + beta, row of n; r and b may be NULL. In place in x. */
BK_TARGET static void BK(add_layernorm_row)(float *x, const float *r, const float *b, const float *g,
                                            const float *beta, int n, float eps) {
    if (r || b) {
#pragma omp simd
        for (int i = 0; i < n; i++) x[i] += (r ? r[i] : 0.0f) + (b ? b[i] : 0.0f);
    }
    float mean = 0;
#pragma omp simd reduction(+ : mean)
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= (float)n;
    float var = 0;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < n; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    var /= (float)n;
    float inv = 1.0f / sqrtf(var + eps);
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] = (x[i] - mean) * inv * g[i] + beta[i];
}

/* kt[d][j] = K[j][d] for the len keys of one (sequence, head), pad keys
 * [len, lenp) zero. K rows have stride ld. */
BK_TARGET static void BK(transpose_keys)(const float *k, int ld, int len, int lenp, int D, float *kt) {
    int j = 0;
#if BK_AVX2
    if (D % 8 == 0) {
        for (; j + 8 <= len; j += 8)
            for (int d = 0; d < D; d += 8) {
                /* 8x8 block transpose in registers: unpack pairs, then quads,
                 * then swap 128-bit halves. */
                __m256 r[8], t[8];
                for (int x = 0; x < 8; x++) r[x] = _mm256_loadu_ps(k + (size_t)(j + x) * ld + d);
                t[0] = _mm256_unpacklo_ps(r[0], r[1]), t[1] = _mm256_unpackhi_ps(r[0], r[1]);
                t[2] = _mm256_unpacklo_ps(r[2], r[3]), t[3] = _mm256_unpackhi_ps(r[2], r[3]);
                t[4] = _mm256_unpacklo_ps(r[4], r[5]), t[5] = _mm256_unpackhi_ps(r[4], r[5]);
                t[6] = _mm256_unpacklo_ps(r[6], r[7]), t[7] = _mm256_unpackhi_ps(r[6], r[7]);
                r[0] = _mm256_shuffle_ps(t[0], t[2], 0x44), r[1] = _mm256_shuffle_ps(t[0], t[2], 0xEE);
                r[2] = _mm256_shuffle_ps(t[1], t[3], 0x44), r[3] = _mm256_shuffle_ps(t[1], t[3], 0xEE);
                r[4] = _mm256_shuffle_ps(t[4], t[6], 0x44), r[5] = _mm256_shuffle_ps(t[4], t[6], 0xEE);
                r[6] = _mm256_shuffle_ps(t[5], t[7], 0x44), r[7] = _mm256_shuffle_ps(t[5], t[7], 0xEE);
                for (int x = 0; x < 4; x++) {
                    _mm256_storeu_ps(kt + (size_t)(d + x) * lenp + j, _mm256_permute2f128_ps(r[x], r[x + 4], 0x20));
                    _mm256_storeu_ps(kt + (size_t)(d + x + 4) * lenp + j, _mm256_permute2f128_ps(r[x], r[x + 4], 0x31));
                }
            }
    }
#endif
    for (; j < len; j++)
        for (int d = 0; d < D; d++) kt[(size_t)d * lenp + j] = k[(size_t)j * ld + d];
    for (int d = 0; d < D; d++)
        for (int x = len; x < lenp; x++) kt[(size_t)d * lenp + x] = 0;
}

/* S[i - q0][j] = scale * q_i . k_j for queries [q0, q1), keys [0, lenp).
 * Q rows have stride ld; kt is [D][lenp]. Register-blocked: 4 queries x 8
 * keys of accumulators stay in registers across the whole d loop (keeping
 * them in memory made the loop store-forwarding bound). */
BK_TARGET static void BK(attn_scores)(const float *q, int ld, int q0, int q1, int D, const float *kt, int lenp,
                                      float scale, float *S) {
#if BK_AVX2
    const __m256 vs = _mm256_set1_ps(scale);
    for (int i = q0; i < q1; i += 4) {
        const int ni = q1 - i < 4 ? q1 - i : 4;
        /* Rows past q1 repeat the last valid one: computed, never stored. */
        const float *qr[4];
        for (int r = 0; r < 4; r++) qr[r] = q + (size_t)(i + (r < ni ? r : ni - 1)) * ld;
        for (int j = 0; j < lenp; j += 8) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < D; d++) {
                const __m256 kv = _mm256_loadu_ps(kt + (size_t)d * lenp + j);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[0] + d), kv, a0);
                a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[1] + d), kv, a1);
                a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[2] + d), kv, a2);
                a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[3] + d), kv, a3);
            }
            float *out = S + (size_t)(i - q0) * lenp + j;
            _mm256_storeu_ps(out, _mm256_mul_ps(a0, vs));
            if (ni > 1) _mm256_storeu_ps(out + lenp, _mm256_mul_ps(a1, vs));
            if (ni > 2) _mm256_storeu_ps(out + 2 * (size_t)lenp, _mm256_mul_ps(a2, vs));
            if (ni > 3) _mm256_storeu_ps(out + 3 * (size_t)lenp, _mm256_mul_ps(a3, vs));
        }
    }
#else
    for (int i = q0; i < q1; i++) {
        float *sr = S + (size_t)(i - q0) * lenp;
        for (int j = 0; j < lenp; j++) sr[j] = 0;
        for (int d = 0; d < D; d++) {
            const float qd = q[(size_t)i * ld + d];
            for (int j = 0; j < lenp; j++) sr[j] += qd * kt[(size_t)d * lenp + j];
        }
        for (int j = 0; j < lenp; j++) sr[j] *= scale;
    }
#endif
}

/* One (sequence, head): rows [o, o+len) of qkv (row stride 3H), queries
 * q0..q1 (all rows, or just row 0 for the CLS-only last layer), writing
 * ctx rows (row stride ctx_stride) starting with query q0's.
 * kt: scratch [D][lenp] (K transposed, lenp = len rounded up to 8, pad keys
 * zero; their scores are computed and left out of the softmax), then
 * S: [(q1 - q0)][lenp] scores. Inlined with a constant D for the common
 * head sizes, so the context accumulator lives in registers. */
BK_TARGET static inline __attribute__((always_inline)) void BK(attend_impl)(const float *qkv, int H, const int D,
                                                                            int h, int o, int len, int q0, int q1,
                                                                            float *ctx, int ctx_stride, float *kt) {
    const int ld = 3 * H, lenp = (len + 7) & ~7;
    const float *qbase = qkv + (size_t)o * ld + h * D;
    float *S = kt + (size_t)D * lenp;
    BK(transpose_keys)(qbase + H, ld, len, lenp, D, kt);
    BK(attn_scores)(qbase, ld, q0, q1, D, kt, lenp, 1.0f / sqrtf((float)D), S);
    float acc[256];
    for (int i = q0; i < q1; i++) {
        float *sc = S + (size_t)(i - q0) * lenp;
        BK(softmax)(sc, len);
#pragma omp simd
        for (int d = 0; d < D; d++) acc[d] = 0;
        for (int j = 0; j < len; j++) {
            const float p = sc[j];
            const float *v = qbase + (size_t)j * ld + 2 * H;
#pragma omp simd
            for (int d = 0; d < D; d++) acc[d] += p * v[d];
        }
        memcpy(ctx + (size_t)(i - q0) * ctx_stride + h * D, acc, (size_t)D * sizeof *acc);
    }
}

BK_TARGET static void BK(attend_one)(const float *qkv, int H, int D, int h, int o, int len, int q0, int q1,
                                     float *ctx, int ctx_stride, float *kt) {
    if (D == 32) BK(attend_impl)(qkv, H, 32, h, o, len, q0, q1, ctx, ctx_stride, kt);
    else if (D == 64) BK(attend_impl)(qkv, H, 64, h, o, len, q0, q1, ctx, ctx_stride, kt);
    else BK(attend_impl)(qkv, H, D, h, o, len, q0, q1, ctx, ctx_stride, kt);
}

/* Mean of the rows [t0, t1) of x (row stride H) into o[H]. */
BK_TARGET static void BK(mean_rows)(const float *x, int H, int t0, int t1, float *o) {
    for (int i = 0; i < H; i++) o[i] = 0;
    for (int t = t0; t < t1; t++) {
        const float *r = x + (size_t)t * H;
#pragma omp simd
        for (int i = 0; i < H; i++) o[i] += r[i];
    }
    for (int i = 0; i < H; i++) o[i] /= (float)(t1 - t0);
}

static const bert_kern BK(kern) = {
    .gelu = BK(gelu),
    .softmax = BK(softmax),
    .add_layernorm_row = BK(add_layernorm_row),
    .attend_one = BK(attend_one),
    .mean_rows = BK(mean_rows),
};
