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
 * Parallelism: OpenMP over rows (GEMM row blocks, LayerNorm, GELU) and over
 * (sequence, head) pairs for attention. OpenBLAS itself runs single-threaded
 * inside each block (set in encoder open), so the two never fight for cores.
 */
#include "model/bert_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
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
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    int i = 0;
    float sum = 0;
#ifdef __AVX2__
    __m256 vm = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    float t[8];
    _mm256_storeu_ps(t, vs);
    for (int k = 0; k < 8; k++) sum += t[k];
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (i = 0; i < n; i++) x[i] *= inv;
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

typedef struct {
    const donto_bert_weights *w;
} fp32_ctx;

static void fp32_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y,
                      int nthreads, void *scratch) {
    (void)scratch;
    const donto_bert_weights *w = (const donto_bert_weights *)vctx;
    const donto_bert_layer *L = &w->layer[l];
    const int H = w->cfg.hidden, FF = w->cfg.intermediate;
    const float *W;
    int n, k;
    switch (which) {
    case 0: W = L->qkv_w, n = 3 * H, k = H; break;
    case 1: W = L->attn_out_w, n = H, k = H; break;
    case 2: W = L->ffn_in_w, n = FF, k = H; break;
    default: W = L->ffn_out_w, n = H, k = FF; break;
    }
    /* Split rows into one block per thread (multiples of 16 keep OpenBLAS's
     * micro-kernels full); tiny m runs on one thread. */
    int nb = m >= 64 ? nthreads : 1;
#pragma omp parallel for num_threads(nb) schedule(static) if (nb > 1)
    for (int b = 0; b < nb; b++) {
        int per = ((m + nb - 1) / nb + 15) & ~15;
        int r0 = b * per, r1 = r0 + per > m ? m : r0 + per;
        if (r1 > r0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, n, k, 1.0f,
                        X + (size_t)r0 * k, k, W, k, 0.0f, Y + (size_t)r0 * n, n);
    }
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

/* One (sequence, head): rows [o, o+len) of qkv (row stride 3H), queries
 * q0..q1 (all rows, or just row 0 for the CLS-only last layer), writing
 * ctx rows (row stride H) starting at ctx_row0 for query q0.
 * kt: scratch [D, len] (K transposed so scores vectorise over keys),
 * sc: scratch [len]. */
static void attend_one(const float *qkv, int H, int D, int h, int o, int len, int q0, int q1,
                       float *ctx, int ctx_stride, float *kt, float *sc) {
    const int ld = 3 * H;
    const float scale = 1.0f / sqrtf((float)D);
    for (int j = 0; j < len; j++) {
        const float *k = qkv + (size_t)(o + j) * ld + H + h * D;
        for (int d = 0; d < D; d++) kt[(size_t)d * len + j] = k[d];
    }
    for (int i = q0; i < q1; i++) {
        const float *q = qkv + (size_t)(o + i) * ld + h * D;
        for (int j = 0; j < len; j++) sc[j] = 0;
        for (int d = 0; d < D; d++) {
            const float qd = q[d] * scale;
            const float *kr = kt + (size_t)d * len;
#pragma omp simd
            for (int j = 0; j < len; j++) sc[j] += qd * kr[j];
        }
        bert_softmax_inplace(sc, len);
        float *c = ctx + (size_t)(i - q0) * ctx_stride + h * D;
        for (int d = 0; d < D; d++) c[d] = 0;
        for (int j = 0; j < len; j++) {
            const float p = sc[j];
            const float *v = qkv + (size_t)(o + j) * ld + 2 * H + h * D;
#pragma omp simd
            for (int d = 0; d < D; d++) c[d] += p * v[d];
        }
    }
}

/* ---------- the forward pass ---------- */

typedef struct {
    float *x, *ctx, *big, *attn; /* attn: per-thread [D*maxlen + maxlen] */
    void *lin;                   /* linear backend scratch */
} bufs;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Sequences at least this long run attention as two small GEMMs per head
 * (scores = Q K^T, ctx = P V); shorter ones use the direct loops, where a
 * BLAS call would cost more than the arithmetic. */
#define ATTN_GEMM_MIN 48

/* Per-thread attention scratch in floats: K^T + one score row for the
 * loops, or a full len x len score block for the GEMM form. */
static size_t attn_floats(int D, int maxlen) {
    size_t loops = (size_t)(D + 1) * (size_t)(maxlen + 16);
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
    b += align64(ops->scratch_bytes(ops->ctx, T));
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
    (void)ops;
    return b;
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
        ops->gemm(ops->ctx, l, 0, b.x, T, b.big, nthreads, b.lin);
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int t = 0; t < T; t++) {
            float *r = b.big + (size_t)t * 3 * H;
#pragma omp simd
            for (int i = 0; i < 3 * H; i++) r[i] += L->qkv_b[i];
        }
        /* CTX = attention; for the CLS-only last layer, ctx row s = CLS of seq s. */
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 4)
        for (int sh = 0; sh < nseq * NH; sh++) {
            int s = sh / NH, h = sh % NH, o = off[s], len = off[s + 1] - off[s];
            float *kt = b.attn + (size_t)omp_get_thread_num() * attn_stride;
            if (!last_cls && len >= ATTN_GEMM_MIN)
                attend_gemm(b.big, H, D, h, o, len, b.ctx, kt);
            else if (last_cls)
                attend_one(b.big, H, D, h, o, len, 0, 1, b.ctx + (size_t)s * H, H, kt,
                           kt + (size_t)D * (maxlen + 16));
            else
                attend_one(b.big, H, D, h, o, len, 0, len, b.ctx + (size_t)o * H, H, kt,
                           kt + (size_t)D * (maxlen + 16));
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
        ops->gemm(ops->ctx, l, 1, b.ctx, M, b.big, nthreads, b.lin);
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int t = 0; t < M; t++)
            add_layernorm_row(b.x + (size_t)t * H, b.big + (size_t)t * H, L->attn_out_b, L->ln1_g,
                              L->ln1_b, H, c->ln_eps);
        /* F = gelu(X W1^T + b1) */
        ops->gemm(ops->ctx, l, 2, b.x, M, b.big, nthreads, b.lin);
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int t = 0; t < M; t++) {
            float *r = b.big + (size_t)t * FF;
#pragma omp simd
            for (int i = 0; i < FF; i++) r[i] += L->ffn_in_b[i];
            bert_gelu_inplace(r, (size_t)FF);
        }
        /* X = LN(X + F W2^T + b2) */
        ops->gemm(ops->ctx, l, 3, b.big, M, b.ctx, nthreads, b.lin);
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int t = 0; t < M; t++)
            add_layernorm_row(b.x + (size_t)t * H, b.ctx + (size_t)t * H, L->ffn_out_b, L->ln2_g,
                              L->ln2_b, H, c->ln_eps);
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
