/*
 * BERT forward pass on the CPU, fp32 reference path.
 *
 * Shapes (T packed tokens, S sequences, H hidden, NH heads, D = H/NH head dim,
 * FF intermediate):
 *   embeddings     ids[T] -> X[T,H] = LN(word[id] + pos[p] + type[0])
 *   per layer      QKV[T,3H] = X Wqkv^T + bqkv
 *                  CTX[T,H]  = softmax(Q K^T / sqrt(D)) V   per sequence, per head
 *                  X = LN(X + CTX Wo^T + bo)
 *                  F[T,FF] = gelu(X W1^T + b1)
 *                  X = LN(X + F W2^T + b2)
 *   pooling        CLS row or mean over the sequence's rows, then L2 norm
 * With CLS pooling the last layer only needs the CLS rows after attention's
 * keys and values are known, so from its attention onward it runs on S rows.
 *
 * The engine (end of the file) wraps the forward as a bp_engine with the
 * same op names as bert_cuda.cu: slot_ids, slot_cu, submit, wait_slot.
 *
 * Parallelism: OpenMP over rows (GEMM row blocks, LayerNorm, GELU) and over
 * (sequence, head) pairs for attention. OpenBLAS itself runs single-threaded
 * inside each block (set in encoder open), so the two never fight for cores.
 */
#include "bert_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#ifdef __AVX2__
#include <immintrin.h>
/* glibc libmvec vector variants (x86_64 vector function ABI, AVX2). */
__m256 _ZGVdN8v_erff(__m256 x);
__m256 _ZGVdN8v_expf(__m256 x);
#endif

/* ---------- elementwise math ---------- */

void bert_gelu_inplace(float *x, size_t n) {
    size_t i = 0;
#ifdef __AVX2__
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

void bert_softmax_inplace(float *x, int n) {
    int i = 0;
    float mx = -INFINITY, sum = 0;
#ifdef __AVX2__
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
#ifdef __AVX2__
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
#ifdef __AVX2__
    const __m256 vi = _mm256_set1_ps(inv);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
#endif
    for (; i < n; i++) x[i] *= inv;
}

/* y = LN(x + r + b) * g + beta, row of n; r and b may be NULL. In place in x. */
static void add_layernorm_row(float *x, const float *r, const float *b, const float *g,
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

/* ---------- fp32 linear backend ---------- */

/* Weight and bias of layer l's matrix `which`, with its shape. */
static void layer_matrix(const donto_bert_weights *w, int l, int which, const float **W,
                         const float **bias, int *n, int *k) {
    const donto_bert_layer *L = &w->layer[l];
    const int H = w->cfg.hidden, FF = w->cfg.intermediate;
    switch (which) {
    case 0: *W = L->qkv_w, *bias = L->qkv_b, *n = 3 * H, *k = H; break;
    case 1: *W = L->attn_out_w, *bias = L->attn_out_b, *n = H, *k = H; break;
    case 2: *W = L->ffn_in_w, *bias = L->ffn_in_b, *n = FF, *k = H; break;
    default: *W = L->ffn_out_w, *bias = L->ffn_out_b, *n = H, *k = FF; break;
    }
}

static void fp32_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y,
                      int add_bias, void *scratch) {
    (void)scratch;
    const float *W, *bias;
    int n, k;
    layer_matrix((const donto_bert_weights *)vctx, l, which, &W, &bias, &n, &k);
    if (add_bias) {
        /* Seed Y with the bias and let sgemm accumulate onto it (beta = 1). */
        for (int r = 0; r < m; r++) memcpy(Y + (size_t)r * n, bias, (size_t)n * sizeof *Y);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, X, k, W, k,
                add_bias ? 1.0f : 0.0f, Y, n);
}

static size_t fp32_scratch(const void *ctx, int m) {
    (void)ctx, (void)m;
    return 0;
}

void bert_fp32_ops(bert_linear_ops *ops, const donto_bert_weights *w) {
    ops->gemm = fp32_gemm;
    ops->ctx = w;
    ops->scratch_bytes = fp32_scratch;
}

/* ---------- attention ---------- */

/* kt[d][j] = K[j][d] for the len keys of one (sequence, head), pad keys
 * [len, lenp) zero. K rows have stride ld. */
static void transpose_keys(const float *k, int ld, int len, int lenp, int D, float *kt) {
    int j = 0;
#ifdef __AVX2__
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
static void attn_scores(const float *q, int ld, int q0, int q1, int D, const float *kt, int lenp,
                        float scale, float *S) {
#ifdef __AVX2__
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
static inline __attribute__((always_inline)) void attend_impl(const float *qkv, int H, const int D, int h,
                                                              int o, int len, int q0, int q1, float *ctx,
                                                              int ctx_stride, float *kt) {
    const int ld = 3 * H, lenp = (len + 7) & ~7;
    const float *qbase = qkv + (size_t)o * ld + h * D;
    float *S = kt + (size_t)D * lenp;
    transpose_keys(qbase + H, ld, len, lenp, D, kt);
    attn_scores(qbase, ld, q0, q1, D, kt, lenp, 1.0f / sqrtf((float)D), S);
    float acc[256];
    for (int i = q0; i < q1; i++) {
        float *sc = S + (size_t)(i - q0) * lenp;
        bert_softmax_inplace(sc, len);
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

static void attend_one(const float *qkv, int H, int D, int h, int o, int len, int q0, int q1,
                       float *ctx, int ctx_stride, float *kt) {
    if (D == 32) attend_impl(qkv, H, 32, h, o, len, q0, q1, ctx, ctx_stride, kt);
    else if (D == 64) attend_impl(qkv, H, 64, h, o, len, q0, q1, ctx, ctx_stride, kt);
    else attend_impl(qkv, H, D, h, o, len, q0, q1, ctx, ctx_stride, kt);
}

/* ---------- the forward pass ---------- */

typedef struct {
    float *x, *ctx, *big, *attn; /* attn: per-thread attn_floats() */
    char *lin;                   /* per-thread linear backend scratch */
    size_t lin_stride;
} bufs;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Rows of an M-row GEMM that one of nt threads takes: a multiple of 16 so
 * the BLAS micro-kernels run full. */
static int rows_per_thread(int M, int nt) { return ((M + nt - 1) / nt + 15) & ~15; }

/* Sequences at least this long run attention as two small GEMMs per head
 * (scores = Q K^T, ctx = P V); shorter ones use the direct loops, where a
 * BLAS call would cost more than the arithmetic. */
#define ATTN_GEMM_MIN 48

/* Per-thread attention scratch in floats: K^T [D][lenp] + scores
 * [len][lenp] for the loops, or a len x len score block for the GEMM form. */
static size_t attn_floats(int D, int maxlen) {
    size_t loops = (size_t)(D + maxlen + 1) * (size_t)(maxlen + 16);
    size_t gemm = (size_t)maxlen * (size_t)maxlen;
    return align64((loops > gemm ? loops : gemm) * 4) / 4;
}

/* All queries of one (sequence, head) through BLAS: S[len,len] = Q K^T * scale,
 * row softmax, CTX[len,D] = S V. Q, K, V are strided views into QKV. */
static void attend_gemm(const float *qkv, int H, int D, int h, int o, int len, float *ctx,
                        float *S) {
    const int ld = 3 * H;
    const float *Q = qkv + (size_t)o * ld + h * D, *K = Q + H, *V = Q + 2 * H;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, len, D, 1.0f / sqrtf((float)D), Q, ld,
                K, ld, 0.0f, S, len);
    for (int i = 0; i < len; i++) bert_softmax_inplace(S + (size_t)i * len, len);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, len, D, len, 1.0f, S, len, V, ld, 0.0f,
                ctx + (size_t)o * H + h * D, H);
}

size_t bert_cpu_scratch_bytes(const donto_bert_config *c, const bert_linear_ops *ops, int T,
                              int maxlen, int nthreads) {
    const int H = c->hidden, FF = c->intermediate, D = H / c->heads;
    int wide = FF > 3 * H ? FF : 3 * H;
    size_t b = 0;
    b += align64((size_t)T * H * 4);                        /* x */
    b += align64((size_t)T * H * 4);                        /* ctx */
    b += align64((size_t)T * (wide > H ? wide : H) * 4);    /* big */
    b += align64((size_t)nthreads * attn_floats(D, maxlen) * 4); /* attention scratch */
    b += (size_t)nthreads * align64(ops->scratch_bytes(ops->ctx, rows_per_thread(T, nthreads)));
    return b;
}

static bufs carve(const donto_bert_config *c, const bert_linear_ops *ops, int T, int maxlen,
                  int nthreads, void *scratch) {
    const int H = c->hidden, FF = c->intermediate, D = H / c->heads;
    int wide = FF > 3 * H ? FF : 3 * H;
    char *p = scratch;
    bufs b;
    b.x = (float *)p, p += align64((size_t)T * H * 4);
    b.ctx = (float *)p, p += align64((size_t)T * H * 4);
    b.big = (float *)p, p += align64((size_t)T * (wide > H ? wide : H) * 4);
    b.attn = (float *)p, p += align64((size_t)nthreads * attn_floats(D, maxlen) * 4);
    b.lin = p;
    b.lin_stride = align64(ops->scratch_bytes(ops->ctx, rows_per_thread(T, nthreads)));
    return b;
}

enum { EPI_NONE, EPI_GELU, EPI_ADD_LN };

/* Y[M,n] = X W^T + b for layer l's matrix `which`, then a row-local
 * epilogue, in ONE parallel region: each thread multiplies its own row block
 * and finishes those rows at once (GELU in place, or X = LN(X + Y)) while
 * they are still in cache, with no barrier between GEMM and epilogue. */
static void linear(const bert_linear_ops *ops, int l, int which, const float *X, int k, int M,
                   float *Y, int n, int epi, float *resid, const float *g, const float *beta, float eps,
                   const bufs *b, int nthreads) {
    const int H = n; /* for EPI_ADD_LN the output width is the hidden size */
    int nt = M >= 32 ? nthreads : 1;
    int per = rows_per_thread(M, nt);
    nt = (M + per - 1) / per; /* no idle thread when rounding ate a block */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int tid = omp_get_thread_num();
        int r0 = tid * per, r1 = r0 + per > M ? M : r0 + per;
        if (r1 > r0) {
            ops->gemm(ops->ctx, l, which, X + (size_t)r0 * k, r1 - r0,
                      Y + (size_t)r0 * n, 1, b->lin + (size_t)tid * b->lin_stride);
            for (int r = r0; r < r1; r++) {
                float *y = Y + (size_t)r * n;
                if (epi == EPI_GELU) bert_gelu_inplace(y, (size_t)n);
                else if (epi == EPI_ADD_LN)
                    add_layernorm_row(resid + (size_t)r * H, y, NULL, g, beta, H, eps);
            }
        }
    }
}

void bert_cpu_forward(const donto_bert_weights *w, const bert_linear_ops *ops, int pooling,
                      const int32_t *ids, const int *off, int nseq, float *out, void *scratch,
                      size_t scratch_bytes, int nthreads) {
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate, NH = c->heads, D = H / NH;
    const int T = off[nseq];
    int maxlen = 0;
    for (int s = 0; s < nseq; s++)
        if (off[s + 1] - off[s] > maxlen) maxlen = off[s + 1] - off[s];
    (void)scratch_bytes;
    bufs b = carve(c, ops, T, maxlen, nthreads, scratch);
    const size_t attn_stride = attn_floats(D, maxlen);

    /* Embeddings + LayerNorm: X[t] = LN(word[id] + pos[t - off[s]] + type[0]). */
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < nseq; s++) {
        for (int t = off[s]; t < off[s + 1]; t++) {
            float *x = b.x + (size_t)t * H;
            const float *we = w->word_emb + (size_t)ids[t] * H;
            const float *pe = w->pos_emb + (size_t)(t - off[s]) * H;
            memcpy(x, we, (size_t)H * 4);
            add_layernorm_row(x, pe, w->type_emb, w->emb_ln_g, w->emb_ln_b, H, c->ln_eps);
        }
    }

    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        const int last_cls = (l == c->layers - 1) && pooling == DONTO_POOL_CLS;
        /* QKV[T,3H] = X Wqkv^T + b */
        linear(ops, l, 0, b.x, H, T, b.big, 3 * H, EPI_NONE, NULL, NULL, NULL, c->ln_eps, &b, nthreads);
        /* CTX = attention; for the CLS-only last layer, ctx row s = CLS of seq s. */
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (int sh = 0; sh < nseq * NH; sh++) {
            int s = sh / NH, h = sh % NH, o = off[s], len = off[s + 1] - off[s];
            float *kt = b.attn + (size_t)omp_get_thread_num() * attn_stride;
            if (!last_cls && len >= ATTN_GEMM_MIN)
                attend_gemm(b.big, H, D, h, o, len, b.ctx, kt);
            else if (last_cls)
                attend_one(b.big, H, D, h, o, len, 0, 1, b.ctx + (size_t)s * H, H, kt);
            else
                attend_one(b.big, H, D, h, o, len, 0, len, b.ctx + (size_t)o * H, H, kt);
        }
        int M = T;
        if (last_cls) {
            /* From here on only the S CLS rows matter: gather them to the top
             * of X (row s <- row off[s]; off[s] >= s so forward order is safe). */
            for (int s = 0; s < nseq; s++)
                if (off[s] != s) memcpy(b.x + (size_t)s * H, b.x + (size_t)off[s] * H, (size_t)H * 4);
            M = nseq;
        }
        /* X = LN(X + CTX Wo^T + bo) */
        linear(ops, l, 1, b.ctx, H, M, b.big, H, EPI_ADD_LN, b.x, L->ln1_g, L->ln1_b, c->ln_eps, &b, nthreads);
        /* F = gelu(X W1^T + b1) */
        linear(ops, l, 2, b.x, H, M, b.big, FF, EPI_GELU, NULL, NULL, NULL, c->ln_eps, &b, nthreads);
        /* X = LN(X + F W2^T + b2) */
        linear(ops, l, 3, b.big, FF, M, b.ctx, H, EPI_ADD_LN, b.x, L->ln2_g, L->ln2_b, c->ln_eps, &b, nthreads);
    }

    /* Pooling + L2 normalisation. */
    const int cls_compact = pooling == DONTO_POOL_CLS;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < nseq; s++) {
        float *o = out + (size_t)s * H;
        if (cls_compact) {
            memcpy(o, b.x + (size_t)s * H, (size_t)H * 4);
        } else {
            int len = off[s + 1] - off[s];
            for (int i = 0; i < H; i++) o[i] = 0;
            for (int t = off[s]; t < off[s + 1]; t++) {
                const float *x = b.x + (size_t)t * H;
#pragma omp simd
                for (int i = 0; i < H; i++) o[i] += x[i];
            }
            for (int i = 0; i < H; i++) o[i] /= (float)len;
        }
        double ss = 0;
        for (int i = 0; i < H; i++) ss += (double)o[i] * o[i];
        /* Same clamp as torch.nn.functional.normalize (eps 1e-12). */
        float inv = (float)(1.0 / fmax(sqrt(ss), 1e-12));
        for (int i = 0; i < H; i++) o[i] *= inv;
    }
}

/* ---------- the engine ---------- */

struct bert_cpu {
    const donto_bert_weights *w;
    bert_linear_ops ops;
    int pooling, threads, max_tokens, max_seqs;
    int32_t *ids, *cu; /* the one slot: packed ids [max_tokens], offsets [max_seqs + 1] */
    float *out;        /* [max_seqs, hidden] pooled, normalised vectors */
    void *scratch;     /* activations of the largest batch */
    size_t scratch_bytes;
    int busy;
};

static int32_t *slot_ids(void *ctx, int slot) {
    (void)slot;
    return ((bert_cpu *)ctx)->ids;
}

static int32_t *slot_cu(void *ctx, int slot) {
    (void)slot;
    return ((bert_cpu *)ctx)->cu;
}

/* The batch runs here and now, on the engine's threads. */
static int submit(void *ctx, int slot, int nseq, int T, int maxlen, donto_err *err) {
    bert_cpu *g = ctx;
    (void)maxlen;
    if (slot != 0 || g->busy) return donto_seterr(err, "cpu engine: slot %d is not free", slot);
    if (nseq < 1 || nseq > g->max_seqs || T < nseq || T > g->max_tokens)
        return donto_seterr(err, "cpu engine: batch of %d sequences / %d tokens outside the plan (%d / %d)", nseq, T,
                            g->max_seqs, g->max_tokens);
    bert_cpu_forward(g->w, &g->ops, g->pooling, g->ids, g->cu, nseq, g->out, g->scratch, g->scratch_bytes,
                     g->threads);
    g->busy = 1;
    return 0;
}

static int wait_slot(void *ctx, int slot, const float **vec, donto_err *err) {
    bert_cpu *g = ctx;
    if (slot != 0 || !g->busy) return donto_seterr(err, "cpu engine: slot %d has no batch in flight", slot);
    g->busy = 0;
    *vec = g->out;
    return 0;
}

static void engine_close(void *ctx) { bert_cpu_close(ctx); }

void bert_cpu_engine(bert_cpu *g, bp_engine *e) {
    memset(e, 0, sizeof *e);
    e->ctx = g;
    e->nslots = 1;
    e->max_tokens = g->max_tokens;
    e->max_seqs = g->max_seqs;
    e->dim = g->w->cfg.hidden;
    e->async = 0;
    e->slot_ids = slot_ids;
    e->slot_cu = slot_cu;
    e->submit = submit;
    e->wait = wait_slot;
    e->info = NULL;
    e->close = engine_close;
}

void bert_cpu_close(bert_cpu *g) {
    if (!g) return;
    free(g->scratch);
    free(g->ids);
    free(g->cu);
    free(g->out);
    free(g);
}

int bert_cpu_open(const donto_bert_weights *w, const bert_linear_ops *ops, const bert_cpu_opts *o, bert_cpu **out,
                  donto_err *err) {
    *out = NULL;
    if (o->max_tokens < 1 || o->max_seqs < 1 || o->max_len < 1 || o->threads < 1)
        return donto_seterr(err, "cpu engine: budget %d tokens / %d sequences / length %d / %d threads", o->max_tokens,
                            o->max_seqs, o->max_len, o->threads);
    bert_cpu *g = calloc(1, sizeof *g);
    if (!g) return donto_seterr(err, "out of memory");
    g->w = w, g->ops = *ops, g->pooling = o->pooling, g->threads = o->threads;
    g->max_tokens = o->max_tokens;
    g->max_seqs = o->max_seqs < o->max_tokens ? o->max_seqs : o->max_tokens; /* every sequence has >= 1 token */
    g->scratch_bytes = bert_cpu_scratch_bytes(&w->cfg, &g->ops, g->max_tokens, o->max_len, g->threads);
    g->scratch = donto_aligned_alloc(g->scratch_bytes);
    g->ids = malloc((size_t)g->max_tokens * sizeof *g->ids);
    g->cu = malloc(((size_t)g->max_seqs + 1) * sizeof *g->cu);
    g->out = malloc((size_t)g->max_seqs * (size_t)w->cfg.hidden * sizeof *g->out);
    if (!g->scratch || !g->ids || !g->cu || !g->out) {
        donto_seterr(err, "out of memory for a %d-token batch (%zu bytes of scratch)", g->max_tokens, g->scratch_bytes);
        bert_cpu_close(g);
        return -1;
    }
    *out = g;
    return 0;
}
