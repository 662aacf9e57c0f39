/*
 * bench_dnnl_gemm: oneDNN (Debian 2.6) against OpenBLAS and our own integer
 * kernels, CPU time per GEMM, one thread, at the encoder's BERT shapes
 * (QKV, attn-out, FFN-in, FFN-out of a 384-wide, 1536-FFN model), m = 16,
 * 64, 256 tokens.  Built only when CMake finds oneDNN (bench/CMakeLists.txt);
 * the product does not link it.  Issue 19 asks whether a well-kept library
 * beats our GEMMs; this program is the measurement (docs/engine.md,
 * "oneDNN 2.6 vs our kernels").
 *
 *   bench_dnnl_gemm [reps] [nout] [m,m,...]
 *       (default 200 reps, 8 outlier channels, m = 16,64,256; m <= 2048)
 *
 * Every path computes Y[m, n] = X[m, k] * W^T + bias, W row-major [n, k] as
 * PyTorch stores it, and is timed in the same rep loop, interleaved, as
 * thread CPU time (CLOCK_THREAD_CPUTIME_ID), the minimum over reps (as
 * bench/qgemm8.c; the machine is shared, run it under nice).  OpenMP and
 * OpenBLAS are set to one thread, so all work runs on the timing thread; the
 * program prints process CPU / thread CPU of the calls that gave the minima
 * (worst over the table) to show nothing ran elsewhere.  A call whose
 * process CPU exceeds its thread CPU by more than 5% + 5 us is not a
 * candidate for the minimum (one run had a 2.4 ms call read 0.7 us of
 * thread CPU: a clock glitch or work elsewhere); their count is printed.
 * The paths, and what each time includes:
 *
 *   sgemm     OpenBLAS cblas_sgemm: copy bias rows into Y, beta = 1 (W is
 *             packed inside every call, as in the engine's fp32 path).
 *   sgemm-kn  the same with W transposed ONCE to [k][n] (B not transposed):
 *             the layout oneDNN's fp32 matmul picks for itself (below), so
 *             this column separates the layout's gain from the library's.
 *   d-sgemm   dnnl_sgemm, the same call shape (row-major, B transposed).
 *   d-f32mm   oneDNN fp32 matmul primitive, M fixed, weights md "any" and W
 *             reordered ONCE into the layout the primitive asks for (outside
 *             the timing), bias fused.  Timed: dnnl_primitive_execute +
 *             dnnl_stream_wait.  Primitive creation is not timed.
 *   d-u8gemm  dnnl_gemm_u8s8s32 as a drop-in for our int8 kernel: OUR int8
 *             scheme (u7 activations, asymmetric per row; s8 weights
 *             symmetric per output row; the nout outlier channels in fp32),
 *             so ao = bo = 0 and the per-row zero point is corrected with
 *             the weight column sums in our epilogue.  Timed: quantizing X
 *             (AVX2, as qgemm8.c), the oneDNN call (which packs W per call;
 *             2.6's C API has no packed-weight GEMM), and the epilogue
 *             (zero point, scales, bias, outlier FMAs; AVX2).
 *   d-i8mm    oneDNN int8 matmul primitive, M fixed, s8 weights (per output
 *             channel scales, same quantized W as d-u8gemm) reordered ONCE
 *             into the primitive's layout; u7 activations with ONE zero
 *             point and ONE scale for the whole X (per-tensor: 2.6 matmul
 *             takes a common src zero point and output scales per N only,
 *             so per-token scales do not fit); runtime output scales
 *             sx * sw[j] and the zero point passed as memory arguments.
 *             Timed: quantizing X (min/max over all of X, then AVX2), the
 *             n output scales, execute + wait, and an AVX2 pass adding bias
 *             and the nout outlier channels (bias is not fused, so the
 *             result does not depend on where 2.x applies bias relative to
 *             the output scales).
 *   int16     ours, donto_qgemm_isa (auto), quantization of X and bias inside.
 *   int8/N    ours, donto_qgemm8_grid (u7) with the nout outlier channels (as the
 *             encoder runs it), quantization and epilogue inside.
 *   int8/0    the same with no outlier channels.
 *   d-bf16mm  oneDNN bf16 matmul primitive (bf16 src and weights, f32 bias
 *             and dst), weights rounded to bf16 and reordered ONCE; timed:
 *             rounding X to bf16 (vcvtne2ps2bf16 where the CPU has it) and
 *             execute + wait. "-" where oneDNN has no bf16 matmul for the CPU.
 *   bf16      ours, donto_bgemm_isa (vdpbf16ps; rounding X inside); "-" on a
 *             CPU without AVX-512 BF16 (there it is a plain C reference).
 *   fp32p     ours, donto_fgemm_isa: the packed fp32 GEMM --precision fp32
 *             runs on every SIMD set.
 *
 * u7 (0..127) rather than u8 for oneDNN: dnnl.h warns that u8 x s8 may
 * saturate in intermediate computations on some CPUs (AVX2 without VNNI has
 * only vpmaddubsw, whose s16 pair sums saturate); u7 x s8 cannot, as in
 * qgemm8.c, and both int8 paths then compute the same integer sums.
 *
 * Every result is checked against a double-precision product of the same
 * fp32 X, W and bias (relative Frobenius error printed), so a wrong call
 * cannot look fast.  The oneDNN "lib" columns give the library call alone
 * (min over reps) for the two int8 paths.  Also printed: CPU model, oneDNN
 * version, dnnl_get_effective_cpu_isa, and per matmul primitive its
 * implementation name and the weight layout it chose.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "cpu_isa.h"
#include "donto/util.h"
#include "bgemm.h"
#include "fgemm.h"
#include "qgemm.h"

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        dnnl_status_t s_ = (call);                                                                                     \
        if (s_ != dnnl_success) {                                                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, dnnl_status2str(s_));                        \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define AVX2 __attribute__((target("avx2,fma")))
#define XMAX 127 /* u7 activations */
#define WMAX 127 /* s8 weights */

/* Relative Frobenius error of Y against the double reference R. */
static double rel_err(const float *Y, const double *R, size_t cnt) {
    double num = 0, den = 0;
    for (size_t i = 0; i < cnt; i++) {
        double d = (double)Y[i] - R[i];
        num += d * d;
        den += R[i] * R[i];
    }
    return sqrt(num / den);
}

/* ---- bench-local int8 scheme for the oneDNN int8 paths (qgemm8.c's) ---- */

typedef struct {
    int n, k, nout;
    int8_t *wq;      /* [n][k], 0 in outlier channels */
    float *sw;       /* [n] */
    int32_t *colsum; /* [n] */
    float *keep;     /* [k] */
    int out[DONTO_QGEMM8_MAXOUT];
    float *outw; /* [nout][n] */
} q8w;

static void q8w_init(q8w *q, const float *W, int n, int k, const int *out, int nout) {
    q->n = n, q->k = k, q->nout = nout;
    q->wq = donto_aligned_alloc((size_t)n * k);
    q->sw = donto_aligned_alloc(sizeof(float) * n);
    q->colsum = donto_aligned_alloc(sizeof(int32_t) * n);
    q->keep = donto_aligned_alloc(sizeof(float) * k);
    q->outw = donto_aligned_alloc(sizeof(float) * (nout ? nout : 1) * n);
    for (int c = 0; c < k; c++)
        q->keep[c] = 1.0f;
    for (int o = 0; o < nout; o++)
        q->out[o] = out[o], q->keep[out[o]] = 0.0f;
    for (int j = 0; j < n; j++) {
        float mx = 0.0f;
        for (int c = 0; c < k; c++)
            mx = fmaxf(mx, fabsf(W[(size_t)j * k + c] * q->keep[c]));
        const float inv = mx > 0 ? WMAX / mx : 0.0f;
        int32_t cs = 0;
        for (int c = 0; c < k; c++) {
            int v = (int)lrintf(W[(size_t)j * k + c] * q->keep[c] * inv);
            q->wq[(size_t)j * k + c] = (int8_t)v;
            cs += v;
        }
        q->sw[j] = mx / WMAX;
        q->colsum[j] = cs;
        for (int o = 0; o < nout; o++)
            q->outw[(size_t)o * n + j] = W[(size_t)j * k + out[o]];
    }
}

static void q8w_free(q8w *q) { free(q->wq), free(q->sw), free(q->colsum), free(q->keep), free(q->outw); }

AVX2 static void minmax_avx2(const float *x, const float *keep, int k, float *lo, float *hi) {
    __m256 vlo = _mm256_set1_ps(*lo), vhi = _mm256_set1_ps(*hi);
    int c = 0;
    for (; c + 8 <= k; c += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(keep + c));
        vlo = _mm256_min_ps(vlo, v);
        vhi = _mm256_max_ps(vhi, v);
    }
    _Alignas(32) float tl[8], th[8];
    _mm256_store_ps(tl, vlo);
    _mm256_store_ps(th, vhi);
    for (int e = 0; e < 8; e++) {
        *lo = tl[e] < *lo ? tl[e] : *lo;
        *hi = th[e] > *hi ? th[e] : *hi;
    }
    for (; c < k; c++) {
        const float v = x[c] * keep[c];
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
}

/* Grid from a range [lo <= 0, hi >= 0]: returns the scale, sets inv, zp. */
static float grid(float lo, float hi, float *inv, int32_t *zp) {
    const float range = hi - lo;
    if (!(range > 1e-30f)) {
        *inv = 0.0f, *zp = 0;
        return 0.0f;
    }
    *inv = (float)XMAX / range;
    *zp = (int32_t)lrintf(-lo * *inv);
    return range / (float)XMAX;
}

AVX2 static void quant_avx2(const float *x, const float *keep, int k, float inv, int32_t zp, uint8_t *q) {
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vzp = _mm256_set1_epi32(zp), zero = _mm256_setzero_si256(), top = _mm256_set1_epi32(XMAX);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int c = 0;
    for (; c + 32 <= k; c += 32) {
        __m256i i[4];
        for (int e = 0; e < 4; e++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * e), _mm256_loadu_ps(keep + c + 8 * e));
            i[e] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v, vinv)), vzp);
            i[e] = _mm256_min_epi32(_mm256_max_epi32(i[e], zero), top);
        }
        const __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        _mm256_storeu_si256((__m256i *)(q + c), _mm256_permutevar8x32_epi32(p, perm));
    }
    for (; c < k; c++) {
        long r = lrintf(x[c] * keep[c] * inv) + zp;
        q[c] = (uint8_t)(r < 0 ? 0 : r > XMAX ? XMAX : r);
    }
}

/* y[i][j] = (acc[i][j] - zp[i] * colsum[j]) * sx[i] * sw[j] + bias[j]
 *           + sum_o x[i][out[o]] * outw[o][j]              (d-u8gemm) */
AVX2 static void epilogue_u8gemm(const int32_t *C, const float *X, int m, const q8w *q, const float *sx,
                                 const int32_t *zp, const float *bias, float *Y) {
    const int n = q->n, k = q->k;
    __m256 xo[DONTO_QGEMM8_MAXOUT];
    for (int i = 0; i < m; i++) {
        for (int o = 0; o < q->nout; o++)
            xo[o] = _mm256_set1_ps(X[(size_t)i * k + q->out[o]]);
        const __m256 s = _mm256_set1_ps(sx[i]);
        const __m256i z = _mm256_set1_epi32(zp[i]);
        const int32_t *c = C + (size_t)i * n;
        float *y = Y + (size_t)i * n;
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            const __m256i a =
                _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(c + j)),
                                 _mm256_mullo_epi32(z, _mm256_loadu_si256((const __m256i *)(q->colsum + j))));
            __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_mul_ps(s, _mm256_loadu_ps(q->sw + j)),
                                       _mm256_loadu_ps(bias + j));
            for (int o = 0; o < q->nout; o++)
                v = _mm256_fmadd_ps(xo[o], _mm256_loadu_ps(q->outw + (size_t)o * n + j), v);
            _mm256_storeu_ps(y + j, v);
        }
        for (; j < n; j++) {
            float v = (float)(c[j] - zp[i] * q->colsum[j]) * (sx[i] * q->sw[j]) + bias[j];
            for (int o = 0; o < q->nout; o++)
                v = fmaf(X[(size_t)i * k + q->out[o]], q->outw[(size_t)o * n + j], v);
            y[j] = v;
        }
    }
}

/* y[i][j] += bias[j] + sum_o x[i][out[o]] * outw[o][j]        (d-i8mm) */
AVX2 static void epilogue_add(const float *X, int m, const q8w *q, const float *bias, float *Y) {
    const int n = q->n, k = q->k;
    __m256 xo[DONTO_QGEMM8_MAXOUT];
    for (int i = 0; i < m; i++) {
        for (int o = 0; o < q->nout; o++)
            xo[o] = _mm256_set1_ps(X[(size_t)i * k + q->out[o]]);
        float *y = Y + (size_t)i * n;
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(bias + j));
            for (int o = 0; o < q->nout; o++)
                v = _mm256_fmadd_ps(xo[o], _mm256_loadu_ps(q->outw + (size_t)o * n + j), v);
            _mm256_storeu_ps(y + j, v);
        }
        for (; j < n; j++) {
            float v = y[j] + bias[j];
            for (int o = 0; o < q->nout; o++)
                v = fmaf(X[(size_t)i * k + q->out[o]], q->outw[(size_t)o * n + j], v);
            y[j] = v;
        }
    }
}

/* ---- oneDNN helpers ------------------------------------------------------- */

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static dnnl_memory_desc_t md2(int64_t d0, int64_t d1, dnnl_data_type_t dt, dnnl_format_tag_t tag) {
    dnnl_memory_desc_t md;
    const dnnl_dims_t dims = {d0, d1};
    CK(dnnl_memory_desc_init_by_tag(&md, 2, dims, dt, tag));
    return md;
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md, void *ptr) {
    dnnl_memory_t m;
    CK(dnnl_memory_create(&m, md, eng, ptr ? ptr : DNNL_MEMORY_ALLOCATE));
    return m;
}

/* The weight layout a primitive chose, for K x N weights: "plain strides
 * K:.. N:.." or the blocking ("... inner 16N4K" style). */
static void layout_str(const dnnl_memory_desc_t *md, char *buf, size_t len) {
    if (md->format_kind != dnnl_blocked) {
        snprintf(buf, len, "%s", dnnl_fmt_kind2str(md->format_kind));
        return;
    }
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    int o = snprintf(buf, len, "strides K:%ld N:%ld", (long)b->strides[0], (long)b->strides[1]);
    if (b->inner_nblks)
        o += snprintf(buf + o, len - (size_t)o, " inner ");
    for (int i = 0; i < b->inner_nblks && (size_t)o < len; i++)
        o += snprintf(buf + o, len - (size_t)o, "%ld%c", (long)b->inner_blks[i], b->inner_idxs[i] ? 'N' : 'K');
    if (md->extra.flags && (size_t)o < len)
        snprintf(buf + o, len - (size_t)o, " +comp");
}

/* A matmul primitive with weights md "any"; W_user (K x N, tag ba: W [n][k]
 * row-major) reordered once into its layout; returns the primitive, the
 * reordered weights memory, and its impl / layout names. */
static dnnl_primitive_t make_matmul_soft(const dnnl_memory_desc_t *src, dnnl_data_type_t wdt,
                                         const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *dst,
                                         const_dnnl_primitive_attr_t attr, void *W_user, int n, int k,
                                         dnnl_memory_t *wmem, char *impl, char *lay, size_t len, int soft) {
    dnnl_memory_desc_t wany = md2(k, n, wdt, dnnl_format_tag_any), wuser = md2(k, n, wdt, dnnl_ba);
    dnnl_matmul_desc_t d;
    CK(dnnl_matmul_desc_init(&d, src, &wany, bias, dst));
    dnnl_primitive_desc_t pd;
    const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL);
    if (st != dnnl_success && soft) { /* e.g. no bf16 matmul for this CPU */
        snprintf(impl, len, "unimplemented (%d)", (int)st);
        snprintf(lay, len, "-");
        *wmem = NULL;
        return NULL;
    }
    CK(st);
    const char *s = NULL;
    CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s));
    snprintf(impl, len, "%s", s);
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    layout_str(wmd, lay, len);
    dnnl_memory_t um = mem(&wuser, W_user);
    *wmem = mem(wmd, NULL);
    dnnl_primitive_desc_t rpd;
    CK(dnnl_reorder_primitive_desc_create(&rpd, &wuser, eng, wmd, eng, NULL));
    dnnl_primitive_t r;
    CK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, *wmem}};
    CK(dnnl_primitive_execute(r, strm, 2, ra));
    CK(dnnl_stream_wait(strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(um);
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    dnnl_primitive_desc_destroy(pd);
    return p;
}

static dnnl_primitive_t make_matmul(const dnnl_memory_desc_t *src, dnnl_data_type_t wdt, const dnnl_memory_desc_t *bias,
                                    const dnnl_memory_desc_t *dst, const_dnnl_primitive_attr_t attr, void *W_user,
                                    int n, int k, dnnl_memory_t *wmem, char *impl, char *lay, size_t len) {
    return make_matmul_soft(src, wdt, bias, dst, attr, W_user, n, k, wmem, impl, lay, len, 0);
}

/* X (cnt floats) to bf16 bits: vcvtne2ps2bf16 where the CPU has it, else
 * the same rounding in C (donto_bf16_from_f32). */
__attribute__((target("avx512f,avx512bf16"))) static void to_bf16_zmm(const float *x, size_t cnt, uint16_t *o) {
    size_t i = 0;
    for (; i + 32 <= cnt; i += 32)
        _mm512_storeu_si512((void *)(o + i),
                            (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i)));
    for (; i < cnt; i++)
        o[i] = donto_bf16_from_f32(x[i]);
}
static void to_bf16(const float *x, size_t cnt, uint16_t *o, int native) {
    if (native) {
        to_bf16_zmm(x, cnt, o);
        return;
    }
    for (size_t i = 0; i < cnt; i++)
        o[i] = donto_bf16_from_f32(x[i]);
}

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            if (c) {
                snprintf(buf, len, "%s", c + 2);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    fclose(f);
}

enum { P_SGEMM, P_SGEMMT, P_DSGEMM, P_DF32MM, P_DU8GEMM, P_DI8MM, P_Q16, P_Q8, P_Q80, P_DBF16MM, P_BF16, P_F32P, NP };
static const char *pname[NP] = {"sgemm",  "sgemm-kn", "d-sgemm", "d-f32mm", "d-u8gemm", "d-i8mm",
                                "int16",  "int8/N",   "int8/0",  "d-bf16mm", "bf16",    "fp32p"};

int main(int argc, char **argv) {
    bench_blas_steer(argv);
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    const int nout = argc > 2 ? atoi(argv[2]) : 8;
    int ms[8] = {16, 64, 256}, nm = 3, mmax = 256;
    if (argc > 3) {
        nm = 0;
        for (const char *a = argv[3]; *a && nm < 8; a += *a == ',') {
            char *e;
            ms[nm] = (int)strtol(a, &e, 10);
            if (e == a || ms[nm] < 1 || ms[nm] > 2048)
                nm = 99;
            if (nm == 99)
                break;
            if (ms[nm] > mmax)
                mmax = ms[nm];
            nm++, a = e;
        }
    }
    if (reps < 1 || nout < 0 || nout > DONTO_QGEMM8_MAXOUT || nm < 1 || nm > 8) {
        fprintf(stderr, "usage: bench_dnnl_gemm [reps >= 1] [nout 0..%d] [m,m,... (1..2048, at most 8)]\n",
                DONTO_QGEMM8_MAXOUT);
        return 2;
    }
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "bench_dnnl_gemm: needs AVX2 + FMA (the oneDNN int8 paths' quantizer)\n");
        return 2;
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    /* OpenBLAS's server thread, started at load, spins (sched_yield) for a
     * while before it sleeps; that CPU is not the GEMMs', but it shows in the
     * process-CPU check below and takes a core.  Let it go to sleep first. */
    nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));

    const int kmax = 1536, nmax = 1536;
    float *X = donto_aligned_alloc(sizeof(float) * mmax * kmax), *W = donto_aligned_alloc(sizeof(float) * nmax * kmax);
    float *WT = donto_aligned_alloc(sizeof(float) * nmax * kmax), *bias = donto_aligned_alloc(sizeof(float) * nmax);
    float *Y[NP];
    for (int p = 0; p < NP; p++)
        Y[p] = donto_aligned_alloc(sizeof(float) * mmax * nmax);
    double *R = malloc(sizeof(double) * mmax * nmax);
    int32_t *C32 = donto_aligned_alloc(sizeof(int32_t) * mmax * nmax);
    uint8_t *A8 = donto_aligned_alloc((size_t)mmax * kmax);
    float *sx = donto_aligned_alloc(sizeof(float) * mmax), *oscale = donto_aligned_alloc(sizeof(float) * nmax);
    int32_t *zp = donto_aligned_alloc(sizeof(int32_t) * mmax), zp_common = 0;
    size_t ss = donto_qgemm_scratch_size(mmax, kmax), s8 = donto_qgemm8_scratch_size(mmax, kmax);
    void *scratch = donto_aligned_alloc(ss > s8 ? ss : s8);
    void *bscratch = donto_aligned_alloc(donto_bgemm_scratch(mmax, kmax));
    uint16_t *Xb16 = donto_aligned_alloc(sizeof(uint16_t) * mmax * kmax), *Wb16 = donto_aligned_alloc(sizeof(uint16_t) * nmax * kmax);
    const int bnative = donto_bgemm_native(DONTO_ISA_AUTO);

    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    const dnnl_version_t *ver = dnnl_version();
    printf("CPU: %s\n", cpu);
    printf("oneDNN %d.%d.%d (%s), effective ISA: %s; OpenMP threads %d, OpenBLAS threads 1\n", ver->major, ver->minor,
           ver->patch, ver->hash, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), omp_get_max_threads());
    printf("ours: %s | %s | %s | %s\n", donto_qgemm_kernel_name(DONTO_ISA_AUTO), donto_qgemm8_kernel_name(DONTO_ISA_AUTO),
           bnative ? donto_bgemm_kernel_name(DONTO_ISA_AUTO) : "bf16: no AVX-512 BF16, not run",
           donto_fgemm_kernel_name(DONTO_ISA_AUTO));
    printf("one thread, CPU time per GEMM (min of %d reps, interleaved), us; int8/N and the oneDNN int8 paths "
           "keep %d outlier channels in fp32\n",
           reps, nout);
    printf("%-8s %4s %5s %5s | %7s %8s %7s %7s | %8s %6s %7s %6s | %7s %7s %7s | %8s %7s %7s\n", "shape", "m", "n",
           "k", "sgemm", "sgemm-kn", "d-sgemm", "d-f32mm", "d-u8gemm", "(lib)", "d-i8mm", "(lib)", "int16", "int8/N",
           "int8/0", "d-bf16mm", "bf16", "fp32p");

    static double errs[32][NP], procr[32][NP];
    long rejected = 0;
    static char impl[32][3][128], lay[32][3][128];
    int row = 0;
    for (int si = 0; si < BENCH_BERT_NSHAPES; si++) {
        const int n = bench_bert_shapes[si].n, k = bench_bert_shapes[si].k;
        for (size_t e = 0; e < (size_t)n * k; e++)
            W[e] = (float)(0.04 * bench_nrand() * (bench_urand() < 0.001 ? 5 : 1));
        for (int j = 0; j < n; j++)
            bias[j] = (float)(0.02 * bench_nrand());
        for (int j = 0; j < n; j++)
            for (int c = 0; c < k; c++)
                WT[(size_t)c * n + j] = W[(size_t)j * k + c];
        bench_gen_x(X, mmax, k);
        int out[DONTO_QGEMM8_MAXOUT];
        bench_top_channels(X, mmax, k, out, nout); /* "calibration" */
        donto_qweight q16;
        donto_qweight8 q8, q80;
        if (donto_qweight_init(&q16, W, n, k, NULL) || donto_qweight8_init(&q8, W, n, k, out, nout, NULL) ||
            donto_qweight8_init(&q80, W, n, k, out, 0, NULL))
            return 1;
        q8w qd;
        q8w_init(&qd, W, n, k, out, nout);
        donto_bweight bw;
        donto_fweight fw;
        if (donto_bweight_init(&bw, W, n, k, NULL) || donto_fweight_init(&fw, W, n, k, NULL))
            return 1;
        for (size_t e = 0; e < (size_t)n * k; e++)
            Wb16[e] = donto_bf16_from_f32(W[e]);
        for (int mi = 0; mi < nm; mi++, row++) {
            const int m = ms[mi];
            bench_gen_x(X, m, k);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double acc = bias[j];
                    for (int c = 0; c < k; c++)
                        acc += (double)X[(size_t)i * k + c] * W[(size_t)j * k + c];
                    R[(size_t)i * n + j] = acc;
                }
            /* fp32 matmul, weights reordered once */
            dnnl_memory_desc_t sf = md2(m, k, dnnl_f32, dnnl_ab), bf = md2(1, n, dnnl_f32, dnnl_ab),
                               df = md2(m, n, dnnl_f32, dnnl_ab);
            dnnl_memory_t wf;
            dnnl_primitive_t mmf =
                make_matmul(&sf, dnnl_f32, &bf, &df, NULL, W, n, k, &wf, impl[row][0], lay[row][0], 128);
            dnnl_memory_t msf = mem(&sf, X), mbf = mem(&bf, bias), mdf = mem(&df, Y[P_DF32MM]);
            dnnl_exec_arg_t af[4] = {
                {DNNL_ARG_SRC, msf}, {DNNL_ARG_WEIGHTS, wf}, {DNNL_ARG_BIAS, mbf}, {DNNL_ARG_DST, mdf}};
            /* int8 matmul: u8 src, common runtime zero point, runtime per-N output scales */
            dnnl_primitive_attr_t at;
            CK(dnnl_primitive_attr_create(&at));
            const float rt_f32 = DNNL_RUNTIME_F32_VAL;
            const int32_t rt_s32 = DNNL_RUNTIME_S32_VAL;
            CK(dnnl_primitive_attr_set_output_scales(at, 1, 1 << 1, &rt_f32));
            CK(dnnl_primitive_attr_set_zero_points(at, DNNL_ARG_SRC, 1, 0, &rt_s32));
            dnnl_memory_desc_t s8d = md2(m, k, dnnl_u8, dnnl_ab), d8 = md2(m, n, dnnl_f32, dnnl_ab);
            dnnl_memory_t w8;
            dnnl_primitive_t mm8 =
                make_matmul(&s8d, dnnl_s8, NULL, &d8, at, qd.wq, n, k, &w8, impl[row][1], lay[row][1], 128);
            /* bf16 matmul: bf16 src and weights (reordered once), f32 bias and dst */
            dnnl_memory_desc_t sb = md2(m, k, dnnl_bf16, dnnl_ab), db = md2(m, n, dnnl_f32, dnnl_ab);
            dnnl_memory_t wb;
            dnnl_primitive_t mmb = make_matmul_soft(&sb, dnnl_bf16, &bf, &db, NULL, Wb16, n, k, &wb, impl[row][2],
                                                    lay[row][2], 128, 1);
            dnnl_memory_t msb = mem(&sb, Xb16), mbb = mem(&bf, bias), mdb = mem(&db, Y[P_DBF16MM]);
            dnnl_exec_arg_t ab[4] = {
                {DNNL_ARG_SRC, msb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_BIAS, mbb}, {DNNL_ARG_DST, mdb}};
            dnnl_memory_desc_t scd, zpd;
            const dnnl_dims_t dn = {n}, d1 = {1};
            CK(dnnl_memory_desc_init_by_tag(&scd, 1, dn, dnnl_f32, dnnl_a));
            CK(dnnl_memory_desc_init_by_tag(&zpd, 1, d1, dnnl_s32, dnnl_a));
            dnnl_memory_t ms8 = mem(&s8d, A8), md8 = mem(&d8, Y[P_DI8MM]), msc = mem(&scd, oscale),
                          mzp = mem(&zpd, &zp_common);
            dnnl_exec_arg_t a8[5] = {{DNNL_ARG_SRC, ms8},
                                     {DNNL_ARG_WEIGHTS, w8},
                                     {DNNL_ARG_DST, md8},
                                     {DNNL_ARG_ATTR_OUTPUT_SCALES, msc},
                                     {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, mzp}};

            double best[NP], lib[2] = {1e30, 1e30}, pbest[NP] = {0};
            for (int p = 0; p < NP; p++)
                best[p] = 1e30;
            const int32_t co0 = 0;
            for (int r = 0; r < reps; r++)
                for (int p = 0; p < NP; p++) {
                    if ((p == P_DBF16MM && !mmb) || (p == P_BF16 && !bnative))
                        continue;
                    double t0 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID), p0 = bench_cpu_now(CLOCK_PROCESS_CPUTIME_ID), tl = 0;
                    switch (p) {
                    case P_SGEMM:
                        for (int i = 0; i < m; i++)
                            memcpy(Y[p] + (size_t)i * n, bias, sizeof(float) * n);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, X, k, W, k, 1.0f, Y[p], n);
                        break;
                    case P_SGEMMT:
                        for (int i = 0; i < m; i++)
                            memcpy(Y[p] + (size_t)i * n, bias, sizeof(float) * n);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, X, k, WT, n, 1.0f, Y[p],
                                    n);
                        break;
                    case P_DSGEMM:
                        for (int i = 0; i < m; i++)
                            memcpy(Y[p] + (size_t)i * n, bias, sizeof(float) * n);
                        CK(dnnl_sgemm('N', 'T', m, n, k, 1.0f, X, k, W, k, 1.0f, Y[p], n));
                        break;
                    case P_DF32MM:
                        CK(dnnl_primitive_execute(mmf, strm, 4, af));
                        CK(dnnl_stream_wait(strm));
                        break;
                    case P_DU8GEMM: {
                        for (int i = 0; i < m; i++) {
                            const float *x = X + (size_t)i * k;
                            float lo = 0.0f, hi = 0.0f, inv;
                            minmax_avx2(x, qd.keep, k, &lo, &hi);
                            sx[i] = grid(lo, hi, &inv, &zp[i]);
                            quant_avx2(x, qd.keep, k, inv, zp[i], A8 + (size_t)i * k);
                        }
                        const double t1 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                        CK(dnnl_gemm_u8s8s32('N', 'T', 'F', m, n, k, 1.0f, A8, k, 0, qd.wq, k, 0, 0.0f, C32, n, &co0));
                        tl = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID) - t1;
                        epilogue_u8gemm(C32, X, m, &qd, sx, zp, bias, Y[p]);
                        break;
                    }
                    case P_DI8MM: {
                        float lo = 0.0f, hi = 0.0f, inv;
                        for (int i = 0; i < m; i++)
                            minmax_avx2(X + (size_t)i * k, qd.keep, k, &lo, &hi);
                        const float s = grid(lo, hi, &inv, &zp_common);
                        for (int i = 0; i < m; i++)
                            quant_avx2(X + (size_t)i * k, qd.keep, k, inv, zp_common, A8 + (size_t)i * k);
                        for (int j = 0; j < n; j++)
                            oscale[j] = s * qd.sw[j];
                        const double t1 = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID);
                        CK(dnnl_primitive_execute(mm8, strm, 5, a8));
                        CK(dnnl_stream_wait(strm));
                        tl = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID) - t1;
                        epilogue_add(X, m, &qd, bias, Y[p]);
                        break;
                    }
                    case P_Q16:
                        donto_qgemm_isa(X, m, k, k, &q16, bias, Y[p], n, scratch, 1, DONTO_ISA_AUTO);
                        break;
                    /* on the u7 grid, as d-u8gemm, whatever grid the
                     * CPU's set would pick (the VNNI sets take u8) */
                    case P_Q8:
                        donto_qgemm8_grid(X, m, k, k, &q8, bias, Y[p], n, scratch, 1, DONTO_ISA_AUTO, XMAX);
                        break;
                    case P_Q80:
                        donto_qgemm8_grid(X, m, k, k, &q80, bias, Y[p], n, scratch, 1, DONTO_ISA_AUTO, XMAX);
                        break;
                    case P_DBF16MM:
                        to_bf16(X, (size_t)m * k, Xb16, bnative);
                        CK(dnnl_primitive_execute(mmb, strm, 4, ab));
                        CK(dnnl_stream_wait(strm));
                        break;
                    case P_BF16:
                        donto_bgemm_isa(X, m, k, &bw, bias, Y[p], n, bscratch, DONTO_ISA_AUTO);
                        break;
                    case P_F32P:
                        donto_fgemm_isa(X, m, k, &fw, bias, Y[p], n, DONTO_ISA_AUTO);
                        break;
                    }
                    const double dt = bench_cpu_now(CLOCK_THREAD_CPUTIME_ID) - t0, pdt = bench_cpu_now(CLOCK_PROCESS_CPUTIME_ID) - p0;
                    /* A call whose process CPU exceeds its thread CPU ran
                     * work (or a clock glitch) elsewhere: not a candidate
                     * for the minimum, counted instead. */
                    if (pdt > 1.05 * dt + 5e-6) {
                        rejected++;
                        continue;
                    }
                    if (dt < best[p])
                        best[p] = dt, pbest[p] = pdt;
                    if (p == P_DU8GEMM && tl < lib[0])
                        lib[0] = tl;
                    if (p == P_DI8MM && tl < lib[1])
                        lib[1] = tl;
                }
            for (int p = 0; p < NP; p++) {
                const int ran = best[p] < 1e29;
                errs[row][p] = ran ? rel_err(Y[p], R, (size_t)m * n) : NAN;
                procr[row][p] = ran ? pbest[p] / best[p] : 0;
            }
            char tb[3][16];
            const int late[3] = {P_DBF16MM, P_BF16, P_F32P};
            for (int q = 0; q < 3; q++) {
                if (best[late[q]] < 1e29) snprintf(tb[q], sizeof tb[q], "%.1f", best[late[q]] * 1e6);
                else snprintf(tb[q], sizeof tb[q], "-");
            }
            printf("%-8s %4d %5d %5d | %7.1f %8.1f %7.1f %7.1f | %8.1f %6.1f %7.1f %6.1f | %7.1f %7.1f %7.1f | %8s %7s "
                   "%7s\n",
                   bench_bert_shapes[si].name, m, n, k, best[P_SGEMM] * 1e6, best[P_SGEMMT] * 1e6, best[P_DSGEMM] * 1e6,
                   best[P_DF32MM] * 1e6, best[P_DU8GEMM] * 1e6, lib[0] * 1e6, best[P_DI8MM] * 1e6, lib[1] * 1e6,
                   best[P_Q16] * 1e6, best[P_Q8] * 1e6, best[P_Q80] * 1e6, tb[0], tb[1], tb[2]);
            fflush(stdout);
            dnnl_primitive_destroy(mmf);
            dnnl_primitive_destroy(mm8);
            if (mmb)
                dnnl_primitive_destroy(mmb);
            dnnl_primitive_attr_destroy(at);
            dnnl_memory_t ms[] = {wf, msf, mbf, mdf, w8, ms8, md8, msc, mzp, wb, msb, mbb, mdb};
            for (size_t e = 0; e < sizeof ms / sizeof *ms; e++)
                if (ms[e])
                    dnnl_memory_destroy(ms[e]);
        }
        donto_qweight_free(&q16);
        donto_qweight8_free(&q8);
        donto_qweight8_free(&q80);
        q8w_free(&qd);
        donto_bweight_free(&bw);
        donto_fweight_free(&fw);
    }

    printf("\nrelative error vs a double-precision product (same fp32 X, W, bias)\n");
    printf("%-8s %4s |", "shape", "m");
    for (int p = 0; p < NP; p++)
        printf(" %8s", pname[p]);
    printf("\n");
    for (int r = 0; r < row; r++) {
        printf("%-8s %4d |", bench_bert_shapes[r / nm].name, ms[r % nm]);
        for (int p = 0; p < NP; p++)
            printf(" %8.1e", errs[r][p]);
        printf("\n");
    }
    printf("\noneDNN matmul implementations and weight layouts (K x N weights)\n");
    for (int r = 0; r < row; r++)
        printf("%-8s %4d | f32: %-14s %-28s | int8: %-14s %-28s | bf16: %-14s %s\n", bench_bert_shapes[r / nm].name,
               ms[r % nm], impl[r][0], lay[r][0], impl[r][1], lay[r][1], impl[r][2], lay[r][2]);
    /* Thread CPU time would hide work handed to other threads: in the call
     * that gave each minimum, process CPU over thread CPU must be ~1. */
    double worst = 0;
    int wr = 0, wp = 0;
    for (int r = 0; r < row; r++)
        for (int p = 0; p < NP; p++)
            if (procr[r][p] > worst)
                worst = procr[r][p], wr = r, wp = p;
    printf("\nprocess CPU / thread CPU in the calls that gave the minima: worst %.3f (%s, %s m=%d); 1.000 = no work "
           "elsewhere; %ld of %ld calls rejected (process CPU > 1.05 x thread CPU + 5 us)\n",
           worst, pname[wp], bench_bert_shapes[wr / nm].name, ms[wr % nm], rejected, (long)reps * NP * BENCH_BERT_NSHAPES * nm);
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
