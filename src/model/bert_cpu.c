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
 *
 * Kernel sets: the per-row loops (GELU, softmax, LayerNorm, attention,
 * mean pooling) are bert_cpu_kern.h, compiled three times here: plain C,
 * target("avx2,fma"), and AVX-512 (GELU, softmax, LayerNorm, attention in zmm);
 * ops->isa picks one per forward (cpu_isa.h), so a baseline x86-64 build
 * runs the widest loops the CPU has. The SIMD GELU computes erf with its
 * own piecewise polynomial (BK_ERF_C), not libmvec's erff: a third of the
 * instructions, within 6.2e-8 of erf.
 */
#include "bert_cpu.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "fgemm.h"
#include "kern_tile.h"

/* ---------- the forward's own loops, one instance per kernel set ---------- */

/* The loops of bert_cpu_kern.h, by kernel set. */
typedef struct bert_kern {
    const char *name; /* bert_kern_name */
    void (*gelu)(float *x, size_t n);
    void (*softmax)(float *x, int n);
    void (*add_layernorm_row)(float *x, const float *r, const float *b, const float *g, const float *beta, int n,
                              float eps);
    void (*attend_one)(const float *qkv, int H, int D, int h, int o, int len, int q0, int q1, float *ctx,
                       int ctx_stride, float *kt);
    void (*mean_rows)(const float *x, int H, int t0, int t1, float *o);
} bert_kern;

#define BK(name) name##_generic
#define BK_NAME "portable"
#define BK_TARGET
#define BK_AVX2 0
#define BK_AVX512 0
#include "bert_cpu_kern.h"

#if defined(__x86_64__)
#define BERT_X86 1
#include <immintrin.h>
/* glibc libmvec's expf (x86_64 vector function ABI, AVX2 and AVX-512). */
__attribute__((target("avx2,fma"))) __m256 _ZGVdN8v_expf(__m256 x);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);
/* The SIMD GELU's erf: coefficient k of the polynomial on interval i
 * (|t| in [i/2, i/2 + 1/2)) at [k][i], printed by scripts/fit-erf. From
 * BK_ERF_AMAX on erf is 1 in float. */
#define BK_ERF_AMAX 3.9999995f
/* max abs error 6.15e-08 on [0, 4.5] (scripts/fit-erf) */
static const float BK_ERF_C[8][16] __attribute__((aligned(64))) = {
    {2.763263881e-01f, 7.111556530e-01f, 9.229001403e-01f, 9.866716862e-01f, 9.985373020e-01f, 9.998993874e-01f, 9.999957085e-01f, 9.999998808e-01f},
    {1.060014129e+00f, 6.429310441e-01f, 2.365211248e-01f, 5.277499557e-02f, 7.142319344e-03f, 5.862772814e-04f, 2.918901191e-05f, 8.814288321e-07f},
    {-2.650029659e-01f, -4.821981490e-01f, -2.956517339e-01f, -9.235620499e-02f, -1.607015729e-02f, -1.612267457e-03f, -9.486934141e-05f, -3.306072131e-06f},
    {-3.091704845e-01f, 2.678835019e-02f, 1.675358862e-01f, 9.015738964e-02f, 2.172451280e-02f, 2.760380274e-03f, 1.958126377e-04f, 7.970329534e-06f},
    {1.269345134e-01f, 1.506756097e-01f, -6.132001523e-03f, -4.810552672e-02f, -1.908826269e-02f, -3.257710021e-03f, -2.861689427e-04f, -1.378534034e-05f},
    {8.003624529e-02f, -5.321706086e-02f, -4.718656093e-02f, 6.618466694e-03f, 1.066006161e-02f, 2.756291535e-03f, 3.136286687e-04f, 1.833000897e-05f},
    {-3.934007138e-02f, -2.658265084e-02f, 2.059730887e-02f, 9.049545042e-03f, -2.779488452e-03f, -1.667856704e-03f, -2.737647446e-04f, -2.069330731e-05f},
    {-1.580317505e-02f, 1.788519882e-02f, 3.745173570e-03f, -5.933030974e-03f, -7.215543883e-04f, 6.358097307e-04f, 1.735985134e-04f, 1.714525024e-05f},
};

#define BK(name) name##_avx2
#define BK_NAME "avx2"
#define BK_TARGET __attribute__((target("avx2,fma")))
#define BK_AVX2 1
#define BK_AVX512 0
#include "bert_cpu_kern.h"
/* The same with GELU, softmax, LayerNorm and attention in zmm, for the
 * AVX-512 sets. */
#define BK(name) name##_avx512
#define BK_NAME "avx512"
#define BK_TARGET __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq")))
#define BK_AVX2 1
#define BK_AVX512 1
#include "bert_cpu_kern.h"
#endif

/* The loops for kernel set isa: zmm on the AVX-512 sets, AVX2 on the
 * other SIMD sets, plain C on portable. */
static const bert_kern *bert_kern_for(donto_isa isa) {
#ifdef BERT_X86
    const donto_isa s = cpu_isa_resolve(isa);
    if (cpu_isa_zmm(s) && cpu_isa_supported(DONTO_ISA_AVX512)) return &kern_avx512;
    if (s >= DONTO_ISA_AVX2 && cpu_isa_supported(DONTO_ISA_AVX2)) return &kern_avx2;
#endif
    (void)isa;
    return &kern_generic;
}

void bert_gelu_isa(donto_isa isa, float *x, size_t n) { bert_kern_for(isa)->gelu(x, n); }

void bert_softmax_isa(donto_isa isa, float *x, int n) { bert_kern_for(isa)->softmax(x, n); }

const char *bert_kern_name(donto_isa isa) { return bert_kern_for(isa)->name; }

/* K^T [D][lenp] and the scores of one round of queries [BK_ATTN_QBLOCK][lenp],
 * lenp = len rounded up to 8, or 16 on the zmm loops (bert_cpu_kern.h,
 * attend_impl): sized for 16. */
size_t bert_attend_scratch_floats(int D, int len) {
    return (size_t)(D + BK_ATTN_QBLOCK) * (size_t)((len + 15) & ~15);
}

/* bench_attend, one thread (docs/engine.md). Zen 3: the AVX2 loops beat
 * OpenBLAS's two GEMMs while len x D < 24576 (D 64: 1.05x at 256 tokens,
 * 1.01x at 384, 0.93x at 512; D 32: 1.07x still at 512). Ice Lake Xeon, the
 * AVX-512 sets: OpenBLAS (SkylakeX zmm kernels) takes 0.98-1.09x the
 * AVX2 loops' time at 8 tokens for D 32 (a tie) and 0.79-0.89x for D 64,
 * 0.53-0.95x from 16 to 512. The zmm loops (Emerald Rapids Xeon, 300
 * reps, two runs): for D 32 the GEMMs take 1.00-1.41x their time up to 48
 * tokens, 0.84-0.98x from 64; for D 64 0.88-1.17x up to 40, 0.68-0.91x
 * from 48;
 * so the AVX-512 sets take the GEMMs from 2048 / D tokens. On portable 48
 * tokens, as before anything was measured: plain C loops lose to any BLAS
 * on long rows. */
int bert_attend_gemm_min(donto_isa isa, int D) {
    const donto_isa s = cpu_isa_resolve(isa);
    if (bert_kern_for(s) == &kern_generic) return 48;
    if (cpu_isa_zmm(s)) return 2048 / (D > 0 ? D : 1); /* the zmm loops: D 32: 64 tokens; D 64: 32 */
    return 24576 / (D > 0 ? D : 1); /* D 64: 384 tokens; D 32: 768, over 512 */
}

void bert_attend_one(donto_isa isa, const float *qkv, int H, int D, int h, int o, int len, int q0, int q1,
                     float *ctx, int ctx_stride, float *scratch) {
    bert_kern_for(isa)->attend_one(qkv, H, D, h, o, len, q0, q1, ctx, ctx_stride, scratch);
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

void bert_sgemm_xwt(const float *X, int m, const float *W, int n, int k, const float *bias, float *Y) {
    if (bias) {
        /* Seed Y with the bias and let sgemm accumulate onto it (beta = 1). */
        for (int r = 0; r < m; r++) memcpy(Y + (size_t)r * n, bias, (size_t)n * sizeof *Y);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, X, k, W, k, bias ? 1.0f : 0.0f, Y, n);
}

static void fp32_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y,
                      int add_bias, void *scratch) {
    (void)scratch;
    const float *W, *bias;
    int n, k;
    layer_matrix((const donto_bert_weights *)vctx, l, which, &W, &bias, &n, &k);
    bert_sgemm_xwt(X, m, W, n, k, add_bias ? bias : NULL, Y);
}

static size_t fp32_scratch(const void *ctx, int m) {
    (void)ctx, (void)m;
    return 0;
}

void bert_fp32_ops(bert_linear_ops *ops, const donto_bert_weights *w) {
    ops->gemm = fp32_gemm;
    ops->ctx = w;
    ops->scratch_bytes = fp32_scratch;
    ops->row_block = 0; /* OpenBLAS packs W per call: one block per thread */
    ops->isa = DONTO_ISA_AUTO;
}

/* ---------- fp32 on packed weights (fgemm.h) ---------- */

struct bert_fp32p {
    int layers;
    donto_fweight (*w)[4];    /* [layers][qkv, attn_out, ffn_in, ffn_out] */
    const float *(*bias)[4]; /* the model's biases, same order */
    donto_isa isa;
};

void bert_fp32p_free(bert_fp32p *p) {
    if (!p) return;
    for (int l = 0; l < p->layers && p->w; l++)
        for (int i = 0; i < 4; i++) donto_fweight_free(&p->w[l][i]);
    free(p->w);
    free(p->bias);
    free(p);
}

int bert_fp32p_init(bert_fp32p **out, const donto_bert_weights *w, donto_isa isa, donto_err *err) {
    *out = NULL;
    bert_fp32p *p = donto_xcalloc(1, sizeof *p);
    p->layers = w->cfg.layers, p->isa = isa;
    p->w = donto_xcalloc((size_t)p->layers, sizeof *p->w);
    p->bias = donto_xcalloc((size_t)p->layers, sizeof *p->bias);
    for (int l = 0; l < p->layers; l++)
        for (int i = 0; i < 4; i++) {
            const float *W;
            int n, k;
            layer_matrix(w, l, i, &W, &p->bias[l][i], &n, &k);
            if (donto_fweight_init(&p->w[l][i], W, n, k, err)) {
                donto_preerr(err, "packing layer %d", l);
                bert_fp32p_free(p);
                return -1;
            }
        }
    *out = p;
    return 0;
}

static void fp32p_gemm(const void *vctx, int l, int which, const float *X, int m, float *Y, int add_bias,
                       void *scratch) {
    (void)scratch;
    const bert_fp32p *p = vctx;
    const donto_fweight *W = &p->w[l][which];
    donto_fgemm_isa(X, m, W->k, W, add_bias ? p->bias[l][which] : NULL, Y, W->n, p->isa);
}

void bert_fp32p_ops(bert_linear_ops *ops, const bert_fp32p *p) {
    ops->gemm = fp32p_gemm;
    ops->ctx = p;
    ops->scratch_bytes = fp32_scratch;
    /* Packed once, so a call costs nothing extra: 96-row blocks go to
     * whichever thread is free, as on the integer paths. */
    ops->row_block = 96;
    ops->isa = p->isa;
}

const char *bert_fp32p_kernel_name(const bert_fp32p *p) { return donto_fgemm_kernel_name(p->isa); }

/* ---------- attention ---------- */

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

/* Per-thread attention scratch in floats: the loops' (K^T and one round of
 * scores), or a len x len score block where the longest sequence takes the
 * GEMM form on kernel set isa. */
static size_t attn_floats(donto_isa isa, int D, int maxlen) {
    size_t loops = bert_attend_scratch_floats(D, maxlen);
    size_t gemm = maxlen >= bert_attend_gemm_min(isa, D) ? (size_t)maxlen * (size_t)maxlen : 0;
    return align64((loops > gemm ? loops : gemm) * 4) / 4;
}

/* All queries of one (sequence, head) through BLAS: S[len,len] = Q K^T * scale,
 * row softmax, CTX[len,D] = S V. Q, K, V are strided views into QKV. */
static void attend_gemm(const bert_kern *kn, const float *qkv, int H, int D, int h, int o, int len, float *ctx,
                        float *S) {
    const int ld = 3 * H;
    const float *Q = qkv + (size_t)o * ld + h * D, *K = Q + H, *V = Q + 2 * H;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, len, D, 1.0f / sqrtf((float)D), Q, ld,
                K, ld, 0.0f, S, len);
    for (int i = 0; i < len; i++) kn->softmax(S + (size_t)i * len, len);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, len, D, len, 1.0f, S, len, V, ld, 0.0f,
                ctx + (size_t)o * H + h * D, H);
}

void bert_attend_gemm(donto_isa isa, const float *qkv, int H, int D, int h, int o, int len, float *ctx,
                      float *scratch) {
    attend_gemm(bert_kern_for(isa), qkv, H, D, h, o, len, ctx, scratch);
}

size_t bert_cpu_scratch_bytes(const donto_bert_config *c, const bert_linear_ops *ops, int T,
                              int maxlen, int nthreads) {
    const int H = c->hidden, FF = c->intermediate, D = H / c->heads;
    int wide = FF > 3 * H ? FF : 3 * H;
    size_t b = 0;
    b += align64((size_t)T * H * 4);                        /* x */
    b += align64((size_t)T * H * 4);                        /* ctx */
    b += align64((size_t)T * (wide > H ? wide : H) * 4);    /* big */
    b += align64((size_t)nthreads * attn_floats(ops->isa, D, maxlen) * 4); /* attention scratch */
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
    b.attn = (float *)p, p += align64((size_t)nthreads * attn_floats(ops->isa, D, maxlen) * 4);
    b.lin = p;
    b.lin_stride = align64(ops->scratch_bytes(ops->ctx, rows_per_thread(T, nthreads)));
    return b;
}

enum { EPI_NONE, EPI_GELU, EPI_ADD_LN };

/* Rows [r0, r1) of Y[M,n] = X W^T + b for layer l's matrix `which`, then
 * the row-local epilogue while they are still in cache: GELU in place, or
 * X = LN(X + Y). scratch: the calling thread's backend scratch. */
static void linear_rows(const bert_linear_ops *ops, const bert_kern *kn, int l, int which, const float *X, int k,
                        int r0, int r1, float *Y, int n, int epi, float *resid, const float *g, const float *beta,
                        float eps, void *scratch) {
    const int H = n; /* for EPI_ADD_LN the output width is the hidden size */
    ops->gemm(ops->ctx, l, which, X + (size_t)r0 * k, r1 - r0, Y + (size_t)r0 * n, 1, scratch);
    for (int r = r0; r < r1; r++) {
        float *y = Y + (size_t)r * n;
        if (epi == EPI_GELU) kn->gelu(y, (size_t)n);
        else if (epi == EPI_ADD_LN) kn->add_layernorm_row(resid + (size_t)r * H, y, NULL, g, beta, H, eps);
    }
}

/* Y[M,n] = X W^T + b for layer l's matrix `which`, then a row-local
 * epilogue, in ONE parallel region: each thread multiplies a row block and
 * finishes those rows at once, with no barrier between GEMM and epilogue.
 * Blocks: one per thread, or (ops->row_block > 0) smaller ones taken as
 * threads become free. Either way a row is computed by one call whatever
 * its block, so the split never changes a result. */
static void linear(const bert_linear_ops *ops, const bert_kern *kn, int l, int which, const float *X, int k, int M,
                   float *Y, int n, int epi, float *resid, const float *g, const float *beta, float eps,
                   const bufs *b, int nthreads) {
    int nt = M >= 32 ? nthreads : 1;
    int per = rows_per_thread(M, nt); /* <= the rows each thread's scratch was sized for */
    nt = (M + per - 1) / per;         /* no idle thread when rounding ate a block */
    if (ops->row_block > 0 && nt > 1 && ops->row_block < per) {
        const int rb = ops->row_block, nb = (M + rb - 1) / rb;
#pragma omp parallel num_threads(nt)
        {
            void *scr = b->lin + (size_t)omp_get_thread_num() * b->lin_stride;
#pragma omp for schedule(dynamic, 1)
            for (int bi = 0; bi < nb; bi++) {
                const int r0 = bi * rb, r1 = r0 + rb > M ? M : r0 + rb;
                linear_rows(ops, kn, l, which, X, k, r0, r1, Y, n, epi, resid, g, beta, eps, scr);
            }
        }
        return;
    }
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int tid = omp_get_thread_num();
        int r0 = tid * per, r1 = r0 + per > M ? M : r0 + per;
        if (r1 > r0)
            linear_rows(ops, kn, l, which, X, k, r0, r1, Y, n, epi, resid, g, beta, eps,
                        b->lin + (size_t)tid * b->lin_stride);
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
    const size_t attn_stride = attn_floats(ops->isa, D, maxlen);
    const int attn_gemm_min = bert_attend_gemm_min(ops->isa, D);
    const bert_kern *kn = bert_kern_for(ops->isa);

    /* Embeddings + LayerNorm: X[t] = LN(word[id] + pos[t - off[s]] + type[0]). */
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < nseq; s++) {
        for (int t = off[s]; t < off[s + 1]; t++) {
            float *x = b.x + (size_t)t * H;
            const float *we = w->word_emb + (size_t)ids[t] * H;
            const float *pe = w->pos_emb + (size_t)(t - off[s]) * H;
            memcpy(x, we, (size_t)H * 4);
            kn->add_layernorm_row(x, pe, w->type_emb, w->emb_ln_g, w->emb_ln_b, H, c->ln_eps);
        }
    }

    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        const int last_cls = (l == c->layers - 1) && pooling == DONTO_POOL_CLS;
        /* QKV[T,3H] = X Wqkv^T + b */
        linear(ops, kn, l, 0, b.x, H, T, b.big, 3 * H, EPI_NONE, NULL, NULL, NULL, c->ln_eps, &b, nthreads);
        /* CTX = attention; for the CLS-only last layer, ctx row s = CLS of seq s. */
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
        for (int sh = 0; sh < nseq * NH; sh++) {
            int s = sh / NH, h = sh % NH, o = off[s], len = off[s + 1] - off[s];
            float *kt = b.attn + (size_t)omp_get_thread_num() * attn_stride;
            if (!last_cls && len >= attn_gemm_min)
                attend_gemm(kn, b.big, H, D, h, o, len, b.ctx, kt);
            else if (last_cls)
                kn->attend_one(b.big, H, D, h, o, len, 0, 1, b.ctx + (size_t)s * H, H, kt);
            else
                kn->attend_one(b.big, H, D, h, o, len, 0, len, b.ctx + (size_t)o * H, H, kt);
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
        linear(ops, kn, l, 1, b.ctx, H, M, b.big, H, EPI_ADD_LN, b.x, L->ln1_g, L->ln1_b, c->ln_eps, &b, nthreads);
        /* F = gelu(X W1^T + b1) */
        linear(ops, kn, l, 2, b.x, H, M, b.big, FF, EPI_GELU, NULL, NULL, NULL, c->ln_eps, &b, nthreads);
        /* X = LN(X + F W2^T + b2) */
        linear(ops, kn, l, 3, b.big, FF, M, b.ctx, H, EPI_ADD_LN, b.x, L->ln2_g, L->ln2_b, c->ln_eps, &b, nthreads);
    }

    /* Pooling + L2 normalisation. */
    const int cls_compact = pooling == DONTO_POOL_CLS;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int s = 0; s < nseq; s++) {
        float *o = out + (size_t)s * H;
        if (cls_compact) {
            memcpy(o, b.x + (size_t)s * H, (size_t)H * 4);
        } else {
            kn->mean_rows(b.x, H, off[s], off[s + 1], o);
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
