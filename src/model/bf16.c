/*
 * The bf16 linear backend (bf16.h): one rounding (donto_bf16_from_f32 on W
 * once and on X per call, products exact, fp32 sums), three ways to run it,
 * chosen at open by what is fastest here:
 *
 *  - native: vdpbf16ps on the packed bf16 pairs (bgemm.h), on the
 *    avx512bf16 kernel set where the instruction pays (donto_bgemm_probe
 *    below BF16_NATIVE_MAX: a vdpbf16ps does twice an FMA's multiply-adds,
 *    so it must take less than twice its time; 1.5 leaves room for the
 *    rounding of X).
 *      W[n, k] -> bf16 pairs in panels of 16 columns (donto_bweight), at open
 *      Y[m, n] = bf16(X) bf16(W)^T + b                 donto_bgemm_isa
 *  - packed: bf16 values held as fp32 on the packed fp32 GEMM (fgemm.h), on
 *    every other SIMD set (and on avx512bf16 where vdpbf16ps is slow: on
 *    the Emerald Rapids Xeon it takes 3.7-4.2x an FMA's time, and this runs
 *    1.5-1.9x the native kernel's speed, bench_bgemm).
 *      W -> bf16(W) as fp32, packed (donto_fweight), at open
 *      Y[m, n] = Xb Wb^T + b, Xb = bf16(X) as fp32 in the thread's scratch
 *  - blas: the same on OpenBLAS sgemm, on portable.
 *      Y[m, n] = Xb Wb^T (+ b)            sgemm(NoTrans, Trans); Y seeded with b, beta 1
 *
 * DONTO_BF16_GEMM=native|fp32 overrides the choice (for tests and benchmarks;
 * native where the kernel set lacks it falls back, with a warning).
 */
#include "bf16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgemm.h"
#include "cpu_isa.h"
#include "fgemm.h"

#define BF16_ROW_BLOCK 96
#define BF16_NATIVE_MAX 1.5 /* vdpbf16ps / vfmadd231ps time at most this for the native kernel */

enum { BF16_BLAS, BF16_PACKED, BF16_NATIVE };

struct bert_bf16 {
    int layers, hidden, inter;
    donto_isa isa;            /* the kernel set (resolved) */
    int mode;                 /* BF16_* */
    char why[160];            /* why this mode, for the log */
    char name[64];            /* what runs the GEMMs, for the log */
    donto_bweight (*bw)[4];   /* native: [layers][qkv, attn_out, ffn_in, ffn_out] */
    donto_fweight (*fw)[4];   /* packed: the same, bf16 values as fp32 */
    float *(*w)[4];           /* blas: the same, bf16 values as fp32 */
    int (*nk)[4][2];          /* their [n, k] */
    const float *(*bias)[4];  /* the fp32 biases, same order */
};

void bf16_round_f32(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = donto_bf16_to_f32(donto_bf16_from_f32(src[i]));
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* The same rounding, 8 lanes at a time, in integer ops: NaN quiet, a
 * subnormal to zero of its sign, else + 0x7fff + the lowest kept bit (ties
 * to even), then the low half cleared. */
__attribute__((target("avx2"))) static void bf16_round_avx2(float *dst, const float *src, size_t n) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x00400000), sign = _mm256_set1_epi32((int)0x80000000u);
    const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), hi = _mm256_set1_epi32((int)0xffff0000u);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
        const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, inf), _mm256_setzero_si256());
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), sub);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_and_si256(r, hi));
    }
    bf16_round_f32(dst + i, src + i, n - i);
}
#endif

void bf16_round_f32_isa(float *dst, const float *src, size_t n, donto_isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (cpu_isa_runnable(isa) >= DONTO_ISA_AVX2) {
        bf16_round_avx2(dst, src, n);
        return;
    }
#endif
    bf16_round_f32(dst, src, n);
}

void bert_bf16_free(bert_bf16 *b) {
    if (!b) return;
    for (int l = 0; l < b->layers; l++)
        for (int i = 0; i < 4; i++) {
            if (b->w) free(b->w[l][i]);
            if (b->bw) donto_bweight_free(&b->bw[l][i]);
            if (b->fw) donto_fweight_free(&b->fw[l][i]);
        }
    free(b->w);
    free(b->bw);
    free(b->fw);
    free(b->nk);
    free(b->bias);
    free(b);
}

/* The mode for kernel set isa (runnable), and why, in b. */
static void bf16_choose(bert_bf16 *b) {
    const char *env = getenv("DONTO_BF16_GEMM");
    const int native_ok = donto_bgemm_native(b->isa), simd = donto_fgemm_preferred(b->isa);
    const int fallback = simd ? BF16_PACKED : BF16_BLAS;
    if (env && !strcmp(env, "native")) {
        if (native_ok) {
            b->mode = BF16_NATIVE;
            snprintf(b->why, sizeof b->why, "DONTO_BF16_GEMM=native");
            return;
        }
        b->mode = fallback;
        snprintf(b->why, sizeof b->why, "DONTO_BF16_GEMM=native, but kernel set %s has no vdpbf16ps",
                 donto_isa_name(b->isa));
        DLOG_WARN("%s: bf16 runs on fp32 units", b->why);
        return;
    }
    if (env && !strcmp(env, "fp32")) {
        b->mode = fallback;
        snprintf(b->why, sizeof b->why, "DONTO_BF16_GEMM=fp32");
        return;
    }
    if (env && *env && strcmp(env, "auto"))
        DLOG_WARN("DONTO_BF16_GEMM=%s ignored (native, fp32 or auto)", env);
    if (!native_ok) {
        b->mode = fallback;
        snprintf(b->why, sizeof b->why, "kernel set %s has no vdpbf16ps (needs AVX-512 BF16)",
                 donto_isa_name(b->isa));
        return;
    }
    const double r = donto_bgemm_probe();
    b->mode = r > 0 && r <= BF16_NATIVE_MAX ? BF16_NATIVE : BF16_PACKED;
    snprintf(b->why, sizeof b->why, "a vdpbf16ps takes %.2fx a vfmadd231ps's time here (native at most %.1fx)", r,
             BF16_NATIVE_MAX);
}

int bert_bf16_init(bert_bf16 **out, const donto_bert_weights *w, donto_isa isa, donto_err *err) {
    *out = NULL;
    const donto_bert_config *c = &w->cfg;
    const int H = c->hidden, FF = c->intermediate;
    bert_bf16 *b = donto_xcalloc(1, sizeof *b);
    b->layers = c->layers, b->hidden = H, b->inter = FF;
    b->isa = cpu_isa_runnable(isa);
    bf16_choose(b);
    if (b->mode == BF16_NATIVE) snprintf(b->name, sizeof b->name, "%s", donto_bgemm_kernel_name(b->isa));
    else if (b->mode == BF16_PACKED) snprintf(b->name, sizeof b->name, "bf16 values, %s", donto_fgemm_kernel_name(b->isa));
    else snprintf(b->name, sizeof b->name, "bf16 values, openblas sgemm");
    if (b->mode == BF16_NATIVE) b->bw = donto_xcalloc((size_t)c->layers, sizeof *b->bw);
    else if (b->mode == BF16_PACKED) b->fw = donto_xcalloc((size_t)c->layers, sizeof *b->fw);
    else b->w = donto_xcalloc((size_t)c->layers, sizeof *b->w);
    b->nk = donto_xcalloc((size_t)c->layers, sizeof *b->nk);
    b->bias = donto_xcalloc((size_t)c->layers, sizeof *b->bias);
    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        const float *src[4] = {L->qkv_w, L->attn_out_w, L->ffn_in_w, L->ffn_out_w};
        const int nk[4][2] = {{3 * H, H}, {H, H}, {FF, H}, {H, FF}};
        b->bias[l][0] = L->qkv_b, b->bias[l][1] = L->attn_out_b;
        b->bias[l][2] = L->ffn_in_b, b->bias[l][3] = L->ffn_out_b;
        for (int i = 0; i < 4; i++) {
            const int n = nk[i][0], k = nk[i][1];
            b->nk[l][i][0] = n, b->nk[l][i][1] = k;
            if (b->mode == BF16_NATIVE) {
                if (donto_bweight_init(&b->bw[l][i], src[i], n, k, err)) goto fail;
                continue;
            }
            const size_t cnt = (size_t)n * (size_t)k;
            float *r = donto_xmalloc(cnt * sizeof(float));
            bf16_round_f32(r, src[i], cnt);
            if (b->mode == BF16_BLAS) {
                b->w[l][i] = r;
                continue;
            }
            const int rc = donto_fweight_init(&b->fw[l][i], r, n, k, err);
            free(r);
            if (rc) goto fail;
        }
        continue;
    fail:
        donto_preerr(err, "packing layer %d", l);
        bert_bf16_free(b);
        return -1;
    }
    *out = b;
    return 0;
}

static void b_gemm(const void *ctx, int l, int which, const float *X, int m, float *Y, int add_bias, void *scratch) {
    const bert_bf16 *b = ctx;
    const int n = b->nk[l][which][0], k = b->nk[l][which][1];
    const float *bias = add_bias ? b->bias[l][which] : NULL;
    if (b->mode == BF16_NATIVE) {
        donto_bgemm_isa(X, m, k, &b->bw[l][which], bias, Y, n, scratch, b->isa);
        return;
    }
    float *xb = scratch;
    bf16_round_f32_isa(xb, X, (size_t)m * (size_t)k, b->isa);
    if (b->mode == BF16_PACKED) donto_fgemm_isa(xb, m, k, &b->fw[l][which], bias, Y, n, b->isa);
    else bert_sgemm_xwt(xb, m, b->w[l][which], n, k, bias, Y);
}

static size_t b_scratch(const void *ctx, int m) {
    const bert_bf16 *b = ctx;
    const int kmax = b->inter > b->hidden ? b->inter : b->hidden;
    if (b->mode == BF16_NATIVE) return donto_bgemm_scratch(m, kmax);
    return (size_t)m * (size_t)kmax * sizeof(float) + 64;
}

void bert_bf16_ops(bert_linear_ops *ops, const bert_bf16 *b) {
    ops->gemm = b_gemm;
    ops->ctx = b;
    ops->scratch_bytes = b_scratch;
    /* OpenBLAS packs W per call: one block per thread; packed once: 96-row
     * blocks to whichever thread is free */
    ops->row_block = b->mode == BF16_BLAS ? 0 : BF16_ROW_BLOCK;
    ops->isa = b->isa;
}

const char *bert_bf16_kernel_name(const bert_bf16 *b) { return b->name; }

const char *bert_bf16_why(const bert_bf16 *b) { return b->why; }
