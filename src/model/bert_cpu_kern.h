/*
 * The CPU forward's own loops (GELU, softmax, LayerNorm, attention), as a
 * template: bert_cpu.c includes this file once per kernel set, with
 *   BK(name)     the name of this instance's function (name_generic,
 *                name_avx2, name_avx512)
 *   BK_TARGET    its target attribute (empty, or target("avx2,fma"))
 *   BK_NAME      its name for logs and tests ("portable", "avx2", "avx512")
 *   BK_AVX2      1 where the AVX2 intrinsics paths are compiled in
 *   BK_AVX512    1 where the AVX-512 ones are too (GELU, softmax, LayerNorm
 *                in zmm with masked tails; attention for head sizes 16-64)
 * so one binary built for baseline x86-64 carries all three and picks one at run
 * time (cpu_isa.h), instead of whatever -march the build machine had. The
 * `omp simd` loops vectorize to the instance's width. Every function here is
 * a leaf called per row or per (sequence, head): no OpenMP region inside.
 * No include guard: it is meant to be included more than once, and it
 * undefines its five parameters at its end, ready for the next instance.
 */

#if BK_AVX2
/* erf of 8 lanes from the piecewise polynomial BK_ERF_C (bert_cpu.c,
 * scripts/fit-erf; max abs error 6.2e-8): |t| clamped under 4, its half-unit
 * interval i gathers coefficient k with one permute, Horner in u = |t| - (i/2
 * + 1/4), capped at 1, t's sign put back. The zmm twin does the same
 * operations per lane, so both give the same bits. */
BK_TARGET static inline __attribute__((always_inline)) __m256 BK(erf8)(__m256 t) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_min_ps(_mm256_andnot_ps(sign, t), _mm256_set1_ps(BK_ERF_AMAX));
    const __m256i i = _mm256_cvttps_epi32(_mm256_add_ps(a, a));
    const __m256 u = _mm256_sub_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(0.5f),
                                                      _mm256_set1_ps(0.25f)));
    __m256 p = _mm256_permutevar8x32_ps(_mm256_load_ps(BK_ERF_C[7]), i);
    for (int k = 6; k >= 0; k--) p = _mm256_fmadd_ps(p, u, _mm256_permutevar8x32_ps(_mm256_load_ps(BK_ERF_C[k]), i));
    p = _mm256_min_ps(p, _mm256_set1_ps(1.0f));
    return _mm256_or_ps(p, _mm256_and_ps(t, sign));
}
#endif

#if BK_AVX512
BK_TARGET static inline __attribute__((always_inline)) __m512 BK(erf16)(__m512 t) {
    const __m512 a = _mm512_min_ps(_mm512_abs_ps(t), _mm512_set1_ps(BK_ERF_AMAX));
    const __m512i i = _mm512_cvttps_epi32(_mm512_add_ps(a, a));
    const __m512 u = _mm512_sub_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(0.5f),
                                                      _mm512_set1_ps(0.25f)));
    __m512 p = _mm512_permutexvar_ps(i, _mm512_load_ps(BK_ERF_C[7]));
    for (int k = 6; k >= 0; k--) p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, _mm512_load_ps(BK_ERF_C[k])));
    p = _mm512_min_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(p), _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32((int)0x80000000u))));
}
#endif

/* GELU in place: 0.5 x (1 + erf(x / sqrt 2)). The SIMD loops use the
 * polynomial erf above (within 2e-7 of the exact GELU for |x| <= 10), the
 * plain C one libm's erff. */
BK_TARGET static void BK(gelu)(float *x, size_t n) {
    size_t i = 0;
#if BK_AVX512
    {
        const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
                     rs2 = _mm512_set1_ps(0.70710678118654752f);
        for (; i < n; i += 16) {
            const __mmask16 m = ktile_mask16(n - i < 16 ? (int)(n - i) : 16);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512 e = BK(erf16)(_mm512_mul_ps(v, rs2));
            _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
        }
    }
#endif
#if BK_AVX2
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f),
                 rs2 = _mm256_set1_ps(0.70710678118654752f);
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 e = BK(erf8)(_mm256_mul_ps(v, rs2));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
    }
    if (i < n) { /* the tail through the same vector arithmetic, in a padded copy */
        float t[8] = {0};
        memcpy(t, x + i, (n - i) * sizeof *t);
        const __m256 v = _mm256_loadu_ps(t);
        _mm256_storeu_ps(t, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, BK(erf8)(_mm256_mul_ps(v, rs2)))));
        memcpy(x + i, t, (n - i) * sizeof *t);
        i = n;
    }
#endif
    for (; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

BK_TARGET static void BK(softmax)(float *x, int n) {
#if BK_AVX512
    /* Whole row in zmm, the tail under a mask: scores rows are ~20 long
     * for claims, where the ymm loops' scalar tail was a third of it. */
    if (n > 0) {
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        __m512 vmx = ninf;
        for (int j = 0; j < n; j += 16) {
            const __mmask16 m = ktile_mask16(n - j);
            vmx = _mm512_max_ps(vmx, _mm512_mask_loadu_ps(ninf, m, x + j));
        }
        const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
        __m512 vs = _mm512_setzero_ps();
        for (int j = 0; j < n; j += 16) {
            const __mmask16 m = ktile_mask16(n - j);
            const __m512 e = _mm512_maskz_mov_ps(m, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm)));
            _mm512_mask_storeu_ps(x + j, m, e);
            vs = _mm512_add_ps(vs, e);
        }
        const __m512 vi = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
        for (int j = 0; j < n; j += 16) {
            const __mmask16 m = ktile_mask16(n - j);
            _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), vi));
        }
        return;
    }
#endif
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
#if BK_AVX512
    /* zmm with the same per-element operations; only the two sums run in
     * another order (16 lanes, then reduced). */
    if (n > 0) {
        __m512 vsum = _mm512_setzero_ps();
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = ktile_mask16(n - i);
            __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            if (r || b) {
                const __m512 rv = r ? _mm512_maskz_loadu_ps(m, r + i) : _mm512_setzero_ps();
                const __m512 bv = b ? _mm512_maskz_loadu_ps(m, b + i) : _mm512_setzero_ps();
                v = _mm512_add_ps(v, _mm512_add_ps(rv, bv));
                _mm512_mask_storeu_ps(x + i, m, v);
            }
            vsum = _mm512_add_ps(vsum, v);
        }
        const float mean = _mm512_reduce_add_ps(vsum) / (float)n;
        const __m512 vmean = _mm512_set1_ps(mean);
        __m512 vvar = _mm512_setzero_ps();
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = ktile_mask16(n - i);
            const __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vmean);
            vvar = _mm512_add_ps(vvar, _mm512_mul_ps(d, d));
        }
        const float var = _mm512_reduce_add_ps(vvar) / (float)n;
        const __m512 vinv = _mm512_set1_ps(1.0f / sqrtf(var + eps));
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = ktile_mask16(n - i);
            const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmean), vinv);
            _mm512_mask_storeu_ps(x + i, m,
                                  _mm512_add_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, g + i)),
                                                _mm512_maskz_loadu_ps(m, beta + i)));
        }
        return;
    }
#endif
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

/* kt[d][j] = K[j][d] for the len keys of one (sequence, head). K rows have
 * stride ld. Pad keys [len, lenp): zero in the scalar loop; the AVX2 loop
 * transposes the last, partial block of 8 keys whole, its rows past len
 * repeating key len - 1 (no scalar tail: with ~20-token texts that tail
 * was most of this function). Pad keys' scores are computed and never read. */
BK_TARGET static void BK(transpose_keys)(const float *k, int ld, int len, int lenp, int D, float *kt) {
    int j = 0;
#if BK_AVX2
    if (D % 8 == 0 && len > 0 && lenp >= ((len + 7) & ~7)) {
        for (; j < len; j += 8)
            for (int d = 0; d < D; d += 8) {
                /* 8x8 block transpose in registers: unpack pairs, then quads,
                 * then swap 128-bit halves. */
                __m256 r[8], t[8];
                for (int x = 0; x < 8; x++)
                    r[x] = _mm256_loadu_ps(k + (size_t)(j + x < len ? j + x : len - 1) * ld + d);
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
        for (int x = j; x < lenp; x++) kt[(size_t)d * lenp + x] = 0;
}

/* S[i - q0][j] = scale * q_i . k_j for queries [q0, q1), keys [0, lenp).
 * Q rows have stride ld; kt is [D][lenp]. Register-blocked: R queries x 16
 * keys of accumulators stay in registers across the whole d loop (keeping
 * them in memory made the loop store-forwarding bound), then R x 8 for a
 * last block of 8 keys. 6 queries at a time (12 independent FMA chains, 2
 * loads of K and 6 broadcasts of Q per 12 FMAs: with 8 queries x 8 keys
 * the loop waited on its 9 loads per 8 FMAs), 2 for the last one or two.
 * Every score is the same FMA chain over d either way. */
#if BK_AVX2
BK_TARGET static inline __attribute__((always_inline)) void BK(scores_rows)(const int R, const float *const *qr,
                                                                             int D, const float *kt, int lenp,
                                                                             __m256 vs, int ni, float *out) {
    int j = 0;
    for (; j + 16 <= lenp; j += 16) {
        __m256 a[6], c[6];
        for (int r = 0; r < R; r++) a[r] = _mm256_setzero_ps(), c[r] = _mm256_setzero_ps();
        for (int d = 0; d < D; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + (size_t)d * lenp + j);
            const __m256 k1 = _mm256_loadu_ps(kt + (size_t)d * lenp + j + 8);
            for (int r = 0; r < R; r++) {
                const __m256 q = _mm256_broadcast_ss(qr[r] + d);
                a[r] = _mm256_fmadd_ps(q, k0, a[r]);
                c[r] = _mm256_fmadd_ps(q, k1, c[r]);
            }
        }
        for (int r = 0; r < ni; r++) {
            _mm256_storeu_ps(out + (size_t)r * lenp + j, _mm256_mul_ps(a[r], vs));
            _mm256_storeu_ps(out + (size_t)r * lenp + j + 8, _mm256_mul_ps(c[r], vs));
        }
    }
    if (j < lenp) {
        __m256 a[6];
        for (int r = 0; r < R; r++) a[r] = _mm256_setzero_ps();
        for (int d = 0; d < D; d++) {
            const __m256 kv = _mm256_loadu_ps(kt + (size_t)d * lenp + j);
            for (int r = 0; r < R; r++) a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[r] + d), kv, a[r]);
        }
        for (int r = 0; r < ni; r++) _mm256_storeu_ps(out + (size_t)r * lenp + j, _mm256_mul_ps(a[r], vs));
    }
}
#endif

BK_TARGET static void BK(attn_scores)(const float *q, int ld, int q0, int q1, int D, const float *kt, int lenp,
                                      float scale, float *S) {
#if BK_AVX2
    const __m256 vs = _mm256_set1_ps(scale);
    for (int i = q0; i < q1;) {
        const int R = q1 - i >= 3 ? 6 : 2, ni = q1 - i < R ? q1 - i : R;
        /* Rows past q1 repeat the last valid one: computed, never stored. */
        const float *qr[6];
        for (int r = 0; r < R; r++) qr[r] = q + (size_t)(i + (r < ni ? r : ni - 1)) * ld;
        float *out = S + (size_t)(i - q0) * lenp;
        if (R == 6) BK(scores_rows)(6, qr, D, kt, lenp, vs, ni, out);
        else BK(scores_rows)(2, qr, D, kt, lenp, vs, ni, out);
        i += ni;
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

#if BK_AVX2
/* ctx rows of R (1 to 3) queries = P V for D columns (a multiple of 8, at
 * most 32): the R x D/8 accumulators stay in registers over the keys (in
 * an array through `omp simd` they were stored and reloaded every key), and
 * the R queries share each load of V. acc += p * v, a multiply then an add,
 * key by key: the same arithmetic as the plain loop. */
BK_TARGET static inline __attribute__((always_inline)) void BK(pv_rows)(const int R, const int D, const float *S,
                                                                         int lenp, const float *vbase, int ld,
                                                                         int len, float *out, int ctx_stride) {
    __m256 a[3][4];
    for (int r = 0; r < R; r++)
        for (int e = 0; e < D / 8; e++) a[r][e] = _mm256_setzero_ps();
    for (int j = 0; j < len; j++) {
        const float *v = vbase + (size_t)j * ld;
        __m256 p[3];
        for (int r = 0; r < R; r++) p[r] = _mm256_broadcast_ss(S + (size_t)r * lenp + j);
        for (int e = 0; e < D / 8; e++) {
            const __m256 ve = _mm256_loadu_ps(v + 8 * e);
            for (int r = 0; r < R; r++) a[r][e] = _mm256_add_ps(a[r][e], _mm256_mul_ps(p[r], ve));
        }
    }
    for (int r = 0; r < R; r++)
        for (int e = 0; e < D / 8; e++) _mm256_storeu_ps(out + (size_t)r * ctx_stride + 8 * e, a[r][e]);
}

/* pv_rows for r (1 to 3, known at run time) queries: each count inlined
 * with a constant R, so its accumulators stay in registers. */
BK_TARGET static inline __attribute__((always_inline)) void BK(pv_rows_n)(int r, const int D, const float *S,
                                                                           int lenp, const float *vbase, int ld,
                                                                           int len, float *out, int ctx_stride) {
    if (r == 3) BK(pv_rows)(3, D, S, lenp, vbase, ld, len, out, ctx_stride);
    else if (r == 2) BK(pv_rows)(2, D, S, lenp, vbase, ld, len, out, ctx_stride);
    else BK(pv_rows)(1, D, S, lenp, vbase, ld, len, out, ctx_stride);
}

/* P V for the n queries of a round, 3 at a time, on 32 columns of V at a
 * time: 3 x 4 accumulators in registers, each load of V shared by 3
 * queries (for D 64, 2 queries x 8 accumulators spilled to the stack and 1
 * query x 8 waited on its loads). A column's sum runs over the keys in
 * order whatever the block, so the bits do not depend on it. Full 32-column
 * slices get a constant width; a last narrower one (8, 16 or 24 columns for
 * D 40, 48, 56) a variable one. */
BK_TARGET static inline __attribute__((always_inline)) void BK(pv_block)(const int D, const float *S, int lenp,
                                                                          const float *vbase, int ld, int len,
                                                                          int n, float *out, int ctx_stride) {
    for (int c0 = 0; c0 < D; c0 += 32) {
        const int dc = D - c0 < 32 ? D - c0 : 32;
        for (int i = 0; i < n;) {
            const int r = n - i < 3 ? n - i : 3;
            const float *si = S + (size_t)i * lenp;
            float *oi = out + (size_t)i * ctx_stride + c0;
            if (dc == 32) BK(pv_rows_n)(r, 32, si, lenp, vbase + c0, ld, len, oi, ctx_stride);
            else BK(pv_rows_n)(r, dc, si, lenp, vbase + c0, ld, len, oi, ctx_stride);
            i += r;
        }
    }
}
#endif

#if BK_AVX512
/* The zmm twins of scores_rows and pv_rows, for the AVX-512 sets: 16 keys
 * (scores) or 16 columns (P V) a vector. Each score is the same FMA chain
 * over d, and each context value the same multiply-then-add over the keys,
 * as in the ymm loops: only the softmax between them sums in another
 * order. kt and S rows here are lenp = len rounded up to 16 long. */
BK_TARGET static inline __attribute__((always_inline)) void BK(scores_rows16)(const int R, const float *const *qr,
                                                                               int D, const float *kt, int lenp,
                                                                               __m512 vs, int ni, float *out) {
    int j = 0;
    for (; j + 32 <= lenp; j += 32) {
        __m512 a[6], c[6];
        for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps(), c[r] = _mm512_setzero_ps();
        for (int d = 0; d < D; d++) {
            const __m512 k0 = _mm512_loadu_ps(kt + (size_t)d * lenp + j);
            const __m512 k1 = _mm512_loadu_ps(kt + (size_t)d * lenp + j + 16);
            for (int r = 0; r < R; r++) {
                const __m512 q = _mm512_set1_ps(qr[r][d]);
                a[r] = _mm512_fmadd_ps(q, k0, a[r]);
                c[r] = _mm512_fmadd_ps(q, k1, c[r]);
            }
        }
        for (int r = 0; r < ni; r++) {
            _mm512_storeu_ps(out + (size_t)r * lenp + j, _mm512_mul_ps(a[r], vs));
            _mm512_storeu_ps(out + (size_t)r * lenp + j + 16, _mm512_mul_ps(c[r], vs));
        }
    }
    if (j < lenp) {
        __m512 a[6];
        for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
        for (int d = 0; d < D; d++) {
            const __m512 kv = _mm512_loadu_ps(kt + (size_t)d * lenp + j);
            for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(qr[r][d]), kv, a[r]);
        }
        for (int r = 0; r < ni; r++) _mm512_storeu_ps(out + (size_t)r * lenp + j, _mm512_mul_ps(a[r], vs));
    }
}

BK_TARGET static void BK(attn_scores16)(const float *q, int ld, int q0, int q1, int D, const float *kt, int lenp,
                                        float scale, float *S) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int i = q0; i < q1;) {
        const int R = q1 - i >= 3 ? 6 : 2, ni = q1 - i < R ? q1 - i : R;
        const float *qr[6];
        for (int r = 0; r < R; r++) qr[r] = q + (size_t)(i + (r < ni ? r : ni - 1)) * ld;
        float *out = S + (size_t)(i - q0) * lenp;
        if (R == 6) BK(scores_rows16)(6, qr, D, kt, lenp, vs, ni, out);
        else BK(scores_rows16)(2, qr, D, kt, lenp, vs, ni, out);
        i += ni;
    }
}

/* ctx rows of R (1 to 3) queries = P V for D (16, 32, 48 or 64) columns. */
BK_TARGET static inline __attribute__((always_inline)) void BK(pv_rows16)(const int R, const int D, const float *S,
                                                                           int lenp, const float *vbase, int ld,
                                                                           int len, float *out, int ctx_stride) {
    __m512 a[3][4];
    for (int r = 0; r < R; r++)
        for (int e = 0; e < D / 16; e++) a[r][e] = _mm512_setzero_ps();
    for (int j = 0; j < len; j++) {
        const float *v = vbase + (size_t)j * ld;
        __m512 p[3];
        for (int r = 0; r < R; r++) p[r] = _mm512_set1_ps(S[(size_t)r * lenp + j]);
        for (int e = 0; e < D / 16; e++) {
            const __m512 ve = _mm512_loadu_ps(v + 16 * e);
            for (int r = 0; r < R; r++) a[r][e] = _mm512_add_ps(a[r][e], _mm512_mul_ps(p[r], ve));
        }
    }
    for (int r = 0; r < R; r++)
        for (int e = 0; e < D / 16; e++) _mm512_storeu_ps(out + (size_t)r * ctx_stride + 16 * e, a[r][e]);
}

BK_TARGET static inline __attribute__((always_inline)) void BK(pv_block16)(const int D, const float *S, int lenp,
                                                                            const float *vbase, int ld, int len,
                                                                            int n, float *out, int ctx_stride) {
    for (int i = 0; i < n;) {
        const int r = n - i < 3 ? n - i : 3;
        const float *si = S + (size_t)i * lenp;
        float *oi = out + (size_t)i * ctx_stride;
        if (r == 3) BK(pv_rows16)(3, D, si, lenp, vbase, ld, len, oi, ctx_stride);
        else if (r == 2) BK(pv_rows16)(2, D, si, lenp, vbase, ld, len, oi, ctx_stride);
        else BK(pv_rows16)(1, D, si, lenp, vbase, ld, len, oi, ctx_stride);
        i += r;
    }
}
#endif

/* Queries per round of attend_impl: their scores, softmax and P V are done
 * before the next round's, so the block of scores stays in L1 (12 x 256
 * keys = 12 KiB) instead of a len x len matrix going through L2 three
 * times; 12 = two blocks of 6 for the scores, four of 3 for P V. */
#define BK_ATTN_QBLOCK 12

/* One (sequence, head): rows [o, o+len) of qkv (row stride 3H), queries
 * q0..q1 (all rows, or just row 0 for the CLS-only last layer), writing
 * ctx rows (row stride ctx_stride) starting with query q0's.
 * kt: scratch [D][lenp] (K transposed, lenp = len rounded up to 8, or to
 * 16 on the zmm loops (head sizes 16, 32, 48, 64 on the AVX-512 sets); pad
 * keys' scores are computed and left out of the softmax), then
 * S: [BK_ATTN_QBLOCK][lenp] scores of the current round of queries.
 * Inlined with a constant D for the common head sizes, so the context
 * accumulators live in registers. Each query's scores, softmax and
 * context are the same operations in the same order whatever the round. */
BK_TARGET static inline __attribute__((always_inline)) void BK(attend_impl)(const float *qkv, int H, const int D,
                                                                            int h, int o, int len, int q0, int q1,
                                                                            float *ctx, int ctx_stride, float *kt) {
#if BK_AVX512
    const int z = D % 16 == 0 && D <= 64; /* the zmm loops */
#else
    const int z = 0;
#endif
    const int ld = 3 * H, lenp = z ? (len + 15) & ~15 : (len + 7) & ~7;
    const float *qbase = qkv + (size_t)o * ld + h * D, *vbase = qbase + 2 * H;
    float *S = kt + (size_t)D * lenp;
    const float scale = 1.0f / sqrtf((float)D);
    BK(transpose_keys)(qbase + H, ld, len, lenp, D, kt);
    for (int b0 = q0; b0 < q1; b0 += BK_ATTN_QBLOCK) {
        const int b1 = q1 - b0 < BK_ATTN_QBLOCK ? q1 : b0 + BK_ATTN_QBLOCK;
        float *out = ctx + (size_t)(b0 - q0) * ctx_stride + h * D;
#if BK_AVX512
        if (z) BK(attn_scores16)(qbase, ld, b0, b1, D, kt, lenp, scale, S);
        else
#endif
            BK(attn_scores)(qbase, ld, b0, b1, D, kt, lenp, scale, S);
        for (int i = b0; i < b1; i++) BK(softmax)(S + (size_t)(i - b0) * lenp, len);
#if BK_AVX512
        if (z) {
            BK(pv_block16)(D, S, lenp, vbase, ld, len, b1 - b0, out, ctx_stride);
            continue;
        }
#endif
        int i = b0;
#if BK_AVX2
        if (D % 8 == 0 && D <= 64) {
            BK(pv_block)(D, S, lenp, vbase, ld, len, b1 - b0, out, ctx_stride);
            continue;
        }
#endif
        float acc[256];
        for (; i < b1; i++) {
            const float *sc = S + (size_t)(i - b0) * lenp;
#pragma omp simd
            for (int d = 0; d < D; d++) acc[d] = 0;
            for (int j = 0; j < len; j++) {
                const float p = sc[j];
                const float *v = vbase + (size_t)j * ld;
#pragma omp simd
                for (int d = 0; d < D; d++) acc[d] += p * v[d];
            }
            memcpy(out + (size_t)(i - b0) * ctx_stride, acc, (size_t)D * sizeof *acc);
        }
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
    .name = BK_NAME,
    .gelu = BK(gelu),
    .softmax = BK(softmax),
    .add_layernorm_row = BK(add_layernorm_row),
    .attend_one = BK(attend_one),
    .mean_rows = BK(mean_rows),
};

#undef BK
#undef BK_NAME
#undef BK_TARGET
#undef BK_AVX2
#undef BK_AVX512
