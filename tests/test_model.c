/* Loader and encoder tests on tiny generated models: every bad-file case
 * gives a clear error naming what is wrong, and the encoder's outputs are
 * finite, normalised, deterministic and independent of batching. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "donto/encoder.h"
#include "donto/model.h"
#include "bert_cpu.h"
#include "bf16.h"
#include "bgemm.h"
#include "cpu_isa.h"
#include "qgemm.h"
#include "tinybert.h"

static char root[256];

static const char *mkmodel(const char *name, const tiny_spec *s) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    if (tiny_write(dir, s) != 0) {
        fprintf(stderr, "cannot write %s\n", dir);
        exit(1);
    }
    return dir;
}

/* Load must fail and the message must contain `needle`. */
static void expect_load_error(const char *dir, const char *needle) {
    donto_bert_weights *w = NULL;
    donto_err err = {0};
    int rc = donto_bert_load(dir, &w, &err);
    CHECK(rc == -1 && w == NULL, "load of %s should fail", dir);
    CHECK_STR_CONTAINS(err.msg, needle);
    donto_bert_free(w);
}

static void truncate_file(const char *dir, const char *file, long keep) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (truncate(p, keep) != 0) perror(p);
}

static void write_text(const char *dir, const char *file, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static void test_bad_files(void) {
    tiny_spec s;
    tiny_default(&s);
    const char *d;

    expect_load_error("/nonexistent/model", "/nonexistent/model/config.json");

    d = mkmodel("ok", &s);
    donto_bert_weights *w = NULL;
    donto_err err = {0};
    CHECK(donto_bert_load(d, &w, &err) == 0, "good tiny model: %s", err.msg);
    if (w) {
        CHECK_EQ_INT(w->cfg.hidden, 16);
        CHECK_EQ_INT(w->cfg.layers, 2);
        CHECK_EQ_INT(w->cfg.pooling, DONTO_POOL_CLS); /* no 1_Pooling: CLS */
    }
    donto_bert_free(w);

    d = mkmodel("trunc", &s);
    truncate_file(d, "model.safetensors", 3000);
    expect_load_error(d, "truncated");

    d = mkmodel("tiny", &s);
    truncate_file(d, "model.safetensors", 5);
    expect_load_error(d, "too short");

    d = mkmodel("hdr", &s);
    {
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        FILE *f = fopen(p, "r+b");
        unsigned char big[8] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
        fwrite(big, 1, 8, f);
        fclose(f);
    }
    expect_load_error(d, "header length");

    d = mkmodel("garbage", &s);
    {
        char p[600];
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        FILE *f = fopen(p, "wb");
        fwrite("\x10\0\0\0\0\0\0\0not json at all!", 1, 24, f);
        fclose(f);
    }
    expect_load_error(d, "not a JSON object");

    s.skip = "encoder.layer.1.output.dense.bias";
    d = mkmodel("missing", &s);
    expect_load_error(d, "missing tensor encoder.layer.1.output.dense.bias");
    s.skip = NULL;

    s.badshape = "encoder.layer.0.intermediate.dense.weight";
    d = mkmodel("shape", &s);
    expect_load_error(d, "encoder.layer.0.intermediate.dense.weight has shape [33,16], config.json implies [32,16]");
    s.badshape = NULL;

    s.act = "gelu_new";
    d = mkmodel("act", &s);
    expect_load_error(d, "hidden_act \"gelu_new\" is not supported");
    s.act = "gelu";

    s.heads = 5;
    d = mkmodel("heads", &s);
    expect_load_error(d, "not a multiple of num_attention_heads");
    s.heads = 4;

    s.nan_in_qkv = 1;
    d = mkmodel("nan", &s);
    expect_load_error(d, "non-finite");
    s.nan_in_qkv = 0;

    d = mkmodel("cfg", &s);
    write_text(d, "config.json", "{\"hidden_size\": 16,");
    expect_load_error(d, "invalid JSON");
    write_text(d, "config.json", "{\"hidden_size\": \"16\"}");
    expect_load_error(d, "\"hidden_size\" must be an integer");
    write_text(d, "config.json", "{\"model_type\":\"gpt2\"}");
    expect_load_error(d, "model_type \"gpt2\" is not supported");

    d = mkmodel("pool", &s);
    {
        char p[600];
        snprintf(p, sizeof p, "%s/1_Pooling", d);
        mkdir(p, 0755);
    }
    write_text(d, "1_Pooling/config.json", "{\"pooling_mode_max_tokens\": true}");
    expect_load_error(d, "pooling_mode");

    /* Vocabulary size must agree with config.json. */
    s.vocab_extra = 3;
    d = mkmodel("vocab", &s);
    donto_encoder *enc = NULL;
    CHECK(donto_encoder_open(d, NULL, &enc, &err) == -1, "vocab mismatch must fail");
    CHECK_STR_CONTAINS(err.msg, "vocab.txt has 27 entries, config.json says vocab_size 24");
    donto_encoder_close(enc);
    s.vocab_extra = 0;

    /* "bert." prefixed names and F16 tensors load and give the same vectors
     * (F16 within its rounding). */
    s.prefix = "bert.";
    d = mkmodel("prefix", &s);
    CHECK(donto_bert_load(d, &w, &err) == 0, "bert. prefix: %s", err.msg);
    donto_bert_free(w);
    s.prefix = "";
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

static void test_encoder(void) {
    static const char *texts[] = {"hello world", "the quick brown fox", "a dog is a kind of animal.",
                                  "", "cat", "running dogs, running cats - the animal kind of run",
                                  "unknownword zzz", "the the the the the the the the the the the the"};
    const int n = (int)(sizeof texts / sizeof *texts);
    for (int pool = 0; pool < 2; pool++) {
        tiny_spec s;
        tiny_default(&s);
        s.pooling = pool;
        const char *d = mkmodel(pool ? "enc_mean" : "enc_cls", &s);
        donto_err err = {0};
        donto_encoder_opts o;
        donto_encoder_default_opts(&o);
        o.threads = 2;
        o.batch_tokens = 16; /* force several batches */
        donto_encoder *enc;
        if (donto_encoder_open(d, &o, &enc, &err)) {
            CHECK(0, "open: %s", err.msg);
            return;
        }
        const int H = donto_encoder_dim(enc);
        CHECK_EQ_INT(H, 16);
        float *all = calloc((size_t)n * H, 4), *one = calloc((size_t)H, 4), *again = calloc((size_t)n * H, 4);
        donto_encode_stats st;
        CHECK(donto_encoder_encode(enc, texts, NULL, (size_t)n, all, &st, &err) == 0, "encode: %s", err.msg);
        CHECK(st.tokens > (size_t)n * 2, "tokens counted: %zu", st.tokens);
        for (int i = 0; i < n; i++) {
            double nn = 0;
            for (int k = 0; k < H; k++) {
                CHECK(isfinite(all[i * H + k]), "finite");
                nn += (double)all[i * H + k] * all[i * H + k];
            }
            CHECK(fabs(nn - 1.0) < 1e-5, "text %d norm^2 %g", i, nn);
            /* one at a time == in a batch */
            CHECK(donto_encoder_encode(enc, &texts[i], NULL, 1, one, NULL, &err) == 0, "%s", err.msg);
            CHECK(cosine(one, all + i * H, H) > 0.999999, "batching changes text %d: cos %.9f", i,
                  cosine(one, all + i * H, H));
        }
        /* deterministic */
        CHECK(donto_encoder_encode(enc, texts, NULL, (size_t)n, again, NULL, &err) == 0, "%s", err.msg);
        CHECK(memcmp(all, again, (size_t)n * H * 4) == 0, "two runs differ");
        /* different texts give different vectors */
        CHECK(cosine(all, all + 1 * H, H) < 0.9999, "texts 0 and 1 collapse");
        /* bad ids are refused, not read out of bounds */
        int32_t bad[] = {2, 9999, 3};
        const int32_t *bp = bad;
        int nb = 3;
        CHECK(donto_encoder_encode_ids(enc, &bp, &nb, 1, one, &err) == -1, "bad id accepted");
        CHECK_STR_CONTAINS(err.msg, "outside the vocabulary");
        int32_t longseq[100];
        for (int i = 0; i < 100; i++) longseq[i] = 5;
        const int32_t *lp = longseq;
        int nl = 100;
        CHECK(donto_encoder_encode_ids(enc, &lp, &nl, 1, one, &err) == -1, "over-long sequence accepted");
        /* a text longer than max_position is truncated, not an error */
        char big[2000];
        for (int i = 0; i < 1990; i += 4) memcpy(big + i, "dog ", 4);
        big[1990] = 0;
        const char *bt = big;
        CHECK(donto_encoder_encode(enc, &bt, NULL, 1, one, &st, &err) == 0, "long text: %s", err.msg);
        CHECK_EQ_INT(st.truncated, 1);
        CHECK_EQ_INT(st.tokens, 64);
        free(all), free(one), free(again);
        donto_encoder_close(enc);

        /* one thread == two threads (within float reassociation) */
        o.threads = 1;
        o.batch_tokens = 0;
        CHECK(donto_encoder_open(d, &o, &enc, &err) == 0, "%s", err.msg);
        float *t1 = calloc((size_t)n * H, 4);
        donto_encoder_encode(enc, texts, NULL, (size_t)n, t1, NULL, &err);
        donto_encoder_close(enc);
        o.threads = 2;
        CHECK(donto_encoder_open(d, &o, &enc, &err) == 0, "%s", err.msg);
        float *t2 = calloc((size_t)n * H, 4);
        donto_encoder_encode(enc, texts, NULL, (size_t)n, t2, NULL, &err);
        donto_encoder_close(enc);
        for (int i = 0; i < n; i++)
            CHECK(cosine(t1 + i * H, t2 + i * H, H) > 0.999999, "threads change text %d", i);
        free(t1), free(t2);
    }
}

/* Every kernel set this CPU runs, at each CPU precision: the SIMD sets give
 * the same bits as each other (the same AVX2 loops; int16 and int8 GEMMs
 * bit-identical by construction), portable agrees to rounding; a set the
 * CPU lacks is refused at open with what it needs and what the CPU has. */
/* What bf16 runs its GEMMs on (bf16.c): the name encode --stats reports for
 * kernel set s with DONTO_BF16_GEMM set to env (NULL: unset). */
static void bf16_gemm_name(const char *d, donto_isa s, const char *env, char *out, size_t len) {
    if (env) setenv("DONTO_BF16_GEMM", env, 1);
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 1, o.precision = DONTO_PREC_BF16, o.isa = s;
    donto_err err = {0};
    donto_encoder *enc = NULL;
    snprintf(out, len, "(open failed)");
    CHECK(donto_encoder_open(d, &o, &enc, &err) == 0, "open bf16 on %s: %s", donto_isa_name(s), err.msg);
    if (env) unsetenv("DONTO_BF16_GEMM");
    if (!enc) return;
    donto_encoder_kernels k;
    donto_encoder_kernels_get(enc, &k);
    snprintf(out, len, "%s", k.gemm);
    donto_encoder_close(enc);
}

/* The choice: OpenBLAS on portable, the packed fp32 GEMM on the other sets
 * without vdpbf16ps, on avx512bf16 the kernel only where the probe finds it
 * at most 1.5x an FMA's time; DONTO_BF16_GEMM=fp32 / native override it
 * (native falls back where the set lacks the kernel). */
static void test_bf16_choice(const char *d) {
    char g[160];
    bf16_gemm_name(d, DONTO_ISA_PORTABLE, NULL, g, sizeof g);
    CHECK_STR_CONTAINS(g, "bf16 values, openblas sgemm");
    bf16_gemm_name(d, DONTO_ISA_PORTABLE, "native", g, sizeof g);
    CHECK_STR_CONTAINS(g, "bf16 values, openblas sgemm");
    const donto_isa best = donto_isa_best();
    if (best == DONTO_ISA_PORTABLE) {
        printf("SKIP bf16 on the packed fp32 GEMM: no SIMD kernel set here\n");
        return;
    }
    bf16_gemm_name(d, best, "fp32", g, sizeof g);
    CHECK_STR_CONTAINS(g, "bf16 values, fp32 fma");
    bf16_gemm_name(d, best, NULL, g, sizeof g);
    if (!cpu_isa_bf16(best)) {
        CHECK_STR_CONTAINS(g, "bf16 values, fp32 fma");
        printf("SKIP the bf16 probe's choice: CPU lacks the avx512bf16 kernel set\n");
        return;
    }
    const double r = donto_bgemm_probe();
    CHECK_STR_CONTAINS(g, r <= 1.5 ? "bf16 vdpbf16ps" : "bf16 values, fp32 fma zmm");
    printf("bf16 on %s: %s (probe: vdpbf16ps %.2fx an FMA's time)\n", donto_isa_name(best), g, r);
}

/* bf16 on the vdpbf16ps kernel, forced (DONTO_BF16_GEMM=native; the
 * encoder takes it only where the probe says it pays): the same roundings
 * as portable's bf16 (ref) in another order of the sums. */
static void test_bf16_native(const char *d, const char **texts, int n, const float *ref, int H) {
    if (!donto_isa_supported(DONTO_ISA_AVX512BF16)) {
        printf("SKIP bf16 on vdpbf16ps: CPU lacks the avx512bf16 kernel set\n");
        return;
    }
    setenv("DONTO_BF16_GEMM", "native", 1);
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 2, o.precision = DONTO_PREC_BF16, o.isa = DONTO_ISA_AVX512BF16;
    donto_err err = {0};
    donto_encoder *enc = NULL;
    CHECK(donto_encoder_open(d, &o, &enc, &err) == 0, "open bf16 native: %s", err.msg);
    unsetenv("DONTO_BF16_GEMM");
    if (!enc) return;
    donto_encoder_kernels k;
    donto_encoder_kernels_get(enc, &k);
    CHECK(strstr(k.gemm, "vdpbf16ps") != NULL, "gemm %s with DONTO_BF16_GEMM=native", k.gemm);
    float *v = calloc((size_t)n * H, 4);
    CHECK(donto_encoder_encode(enc, texts, NULL, (size_t)n, v, NULL, &err) == 0, "encode: %s", err.msg);
    donto_encoder_close(enc);
    double worst = 1;
    for (int i = 0; i < n; i++) {
        const double c = cosine(v + i * H, ref + i * H, H);
        CHECK(c > 0.99999, "bf16 vdpbf16ps text %d vs portable bf16: cos %.9f", i, c);
        if (c < worst) worst = c;
    }
    printf("bf16 on vdpbf16ps: min cos %.9f vs portable bf16 (%s)\n", worst, k.gemm);
    free(v);
}

static void test_isa(void) {
    static const char *texts[] = {"hello world", "the quick brown fox jumps over the lazy dog again and again",
                                  "", "cat", "running dogs, running cats - the animal kind of run"};
    const int n = (int)(sizeof texts / sizeof *texts);
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = 64, sp.heads = 2, sp.inter = 128; /* D = 32: the attention loops' unrolled head size */
    const char *d = mkmodel("enc_isa", &sp);
    float *fp32_ref = NULL; /* portable fp32, against which bf16 is gated */
    static const int precs[] = {DONTO_PREC_FP32, DONTO_PREC_INT16, DONTO_PREC_BF16, DONTO_PREC_INT8};
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        const int prec = precs[pi];
        float *ref = NULL, *simd = NULL;
        int simd_amin = 0;   /* simd's attention took the GEMM form from this many tokens */
        int simd_set = 0, same_bits = 0;
        int simd_grid = 0; /* simd's int8 activation grid (0: not int8) */
        char simd_gemm[sizeof ((donto_encoder_kernels *)0)->gemm] = ""; /* what ran simd's GEMMs */
        const int H = sp.hidden;
        for (int s = DONTO_ISA_PORTABLE; s < DONTO_ISA_N; s++) {
            donto_encoder_opts o;
            donto_encoder_default_opts(&o);
            o.threads = 2;
            o.precision = (donto_precision)prec;
            o.isa = (donto_isa)s;
            donto_err err = {0};
            donto_encoder *enc = NULL;
            if (!donto_isa_supported((donto_isa)s)) {
                CHECK(donto_encoder_open(d, &o, &enc, &err) == -1 && !enc, "open with %s accepted",
                      donto_isa_name((donto_isa)s));
                CHECK_STR_CONTAINS(err.msg, "which this CPU lacks (it has: ");
                char miss[256];
                cpu_isa_missing((donto_isa)s, miss, sizeof miss);
                if (prec == DONTO_PREC_FP32) printf("SKIP %s: CPU lacks %s\n", donto_isa_name((donto_isa)s), miss);
                continue;
            }
            if (donto_encoder_open(d, &o, &enc, &err)) {
                CHECK(0, "open %s: %s", donto_isa_name((donto_isa)s), err.msg);
                continue;
            }
            donto_encoder_kernels k;
            donto_encoder_kernels_get(enc, &k);
            CHECK(!strcmp(k.isa, donto_isa_name((donto_isa)s)), "kernels isa %s for %s", k.isa,
                  donto_isa_name((donto_isa)s));
            /* fp32: the packed fma GEMM on the SIMD sets (ymm, zmm on the
             * AVX-512 ones), OpenBLAS on portable */
            const int packed = s != DONTO_ISA_PORTABLE;
            const int zmm = cpu_isa_zmm((donto_isa)s);
            CHECK(strstr(k.gemm, prec == DONTO_PREC_INT16  ? "int16"
                                 : prec == DONTO_PREC_BF16 ? "bf16"
                                 : prec == DONTO_PREC_INT8 ? "int8"
                                 : !packed                 ? "openblas"
                                 : zmm                     ? "fp32 fma zmm"
                                                           : "fp32 fma ymm") != NULL,
                  "gemm %s on %s", k.gemm, donto_isa_name((donto_isa)s));
            CHECK(k.blas_core[0] != 0 && strstr(k.summary, k.isa) != NULL, "summary %s", k.summary);
            CHECK(strstr(k.summary, "attention loops") != NULL, "summary %s names no attention kernel", k.summary);
            float *v = calloc((size_t)n * H, 4);
            CHECK(donto_encoder_encode(enc, texts, NULL, (size_t)n, v, NULL, &err) == 0, "encode: %s", err.msg);
            donto_encoder_close(enc);
            if (s == DONTO_ISA_PORTABLE) {
                ref = v;
                if (prec == DONTO_PREC_FP32) fp32_ref = memcpy(malloc((size_t)n * H * 4), v, (size_t)n * H * 4);
                if (prec == DONTO_PREC_BF16)
                    for (int i = 0; i < n; i++) /* bf16's accuracy gate against fp32 */
                        CHECK(cosine(v + i * H, fp32_ref + i * H, H) >= 0.999, "bf16 text %d vs fp32: cos %.6f", i,
                              cosine(v + i * H, fp32_ref + i * H, H));
                continue;
            }
            /* int8 on the VNNI sets quantizes activations on the u8 grid,
             * twice as fine as portable's u7 (qgemm.h): two different
             * roundings of the same model, close but not 1e-5 close */
            const int grid = prec == DONTO_PREC_INT8 ? donto_qgemm8_xmax((donto_isa)s) : 0;
            const int same_grid = grid == (prec == DONTO_PREC_INT8 ? donto_qgemm8_xmax(DONTO_ISA_PORTABLE) : 0);
            const double near = same_grid ? 0.99999 : 0.999;
            for (int i = 0; i < n; i++)
                CHECK(cosine(v + i * H, ref + i * H, H) > near, "%s %s text %d vs portable: cos %.9f",
                      donto_precision_name((donto_precision)prec), donto_isa_name((donto_isa)s), i,
                      cosine(v + i * H, ref + i * H, H));
            /* Every SIMD set gives the bits of the SIMD set before it where
             * both run the same forms (the packed ymm and zmm fp32 GEMMs do
             * the same fmas). The forms can differ in attention (OpenBLAS's
             * GEMMs from 8 tokens on the AVX-512 sets; the ymm sets' loops
             * are faster up to 384-768 tokens), int8's grid (above) and
             * bf16's GEMM (ymm or zmm fp32 fmas, or vdpbf16ps: another
             * order of the same roundings). */
            const int amin = bert_attend_gemm_min((donto_isa)s, sp.hidden / sp.heads);
            if (simd && amin == simd_amin && grid == simd_grid &&
                (prec != DONTO_PREC_BF16 || !strcmp(k.gemm, simd_gemm))) {
                CHECK(memcmp(v, simd, (size_t)n * H * 4) == 0, "%s: set %s differs from %s",
                      donto_precision_name((donto_precision)prec), donto_isa_name((donto_isa)s),
                      donto_isa_name((donto_isa)simd_set));
                same_bits++;
            }
            free(simd);
            simd = v, simd_set = s, simd_amin = amin, simd_grid = grid;
            snprintf(simd_gemm, sizeof simd_gemm, "%s", k.gemm);
        }
        printf("%s: %d SIMD sets bit-identical to the set before them\n", donto_precision_name((donto_precision)prec),
               same_bits);
        if (prec == DONTO_PREC_BF16) {
            test_bf16_native(d, texts, n, ref, H);
            test_bf16_choice(d);
        }
        free(ref);
        free(simd);
    }
    free(fp32_ref);
    /* names round trip; auto is the best the CPU runs */
    for (int s = 0; s < DONTO_ISA_N; s++) CHECK_EQ_INT(donto_isa_parse(donto_isa_name((donto_isa)s)), s);
    CHECK_EQ_INT(donto_isa_parse("avx1024"), -1);
    CHECK(donto_isa_supported(donto_isa_best()) && donto_isa_best() >= DONTO_ISA_PORTABLE, "best");
    /* OpenBLAS core names against the CPU levels (0 SSE .. 3 AVX-512) */
    CHECK_EQ_INT(cpu_blas_core_level("Prescott"), 0);
    CHECK_EQ_INT(cpu_blas_core_level("Sandybridge"), 1);
    CHECK_EQ_INT(cpu_blas_core_level("ZEN"), 2);
    CHECK_EQ_INT(cpu_blas_core_level("Haswell "), 2);
    CHECK_EQ_INT(cpu_blas_core_level("SapphireRapids"), 3);
    CHECK_EQ_INT(cpu_blas_core_level("Unknown"), -1);
    CHECK_EQ_INT(cpu_blas_core_level(NULL), -1);
    CHECK(cpu_level() >= 0 && cpu_level() <= 3, "cpu level %d", cpu_level());
    CHECK(cpu_level() < 2 || donto_isa_supported(DONTO_ISA_AVX2), "level 2 without avx2");
    /* OpenBLAS steering's decision (blas_steer.c): auto steers only from a
     * core older than the CPU, never over the user's OPENBLAS_CORETYPE; a
     * named core is steered to from any other; a bad name is ignored. */
    char why[160];
    const char *to = blas_steer_decide("auto", "Prescott", 3, "SkylakeX", NULL, why, sizeof why);
    CHECK(to && !strcmp(to, "SkylakeX"), "Prescott on an AVX-512 CPU: %s", to ? to : why);
    to = blas_steer_decide("auto", "Prescott", 2, "Haswell", NULL, why, sizeof why);
    CHECK(to && !strcmp(to, "Haswell"), "Prescott on an AVX2 CPU: %s", to ? to : why);
    CHECK(!blas_steer_decide("auto", "Zen", 2, "Haswell", NULL, why, sizeof why), "Zen on AVX2: no steering");
    CHECK(!blas_steer_decide("auto", "SkylakeX", 3, "SkylakeX", NULL, why, sizeof why), "SkylakeX on AVX-512");
    CHECK(!blas_steer_decide("auto", "SomeFutureCore", 3, "SkylakeX", NULL, why, sizeof why), "unknown core");
    CHECK(!blas_steer_decide("auto", "Prescott", 3, "SkylakeX", "Prescott", why, sizeof why), "user's choice");
    CHECK_STR_CONTAINS(why, "OPENBLAS_CORETYPE=Prescott is the user's");
    to = blas_steer_decide("Haswell", "Prescott", 2, "Haswell", "Prescott", why, sizeof why);
    CHECK(to && !strcmp(to, "Haswell"), "a named core over the user's: %s", to ? to : why);
    CHECK(!blas_steer_decide("haswell", "Haswell", 2, "Haswell", NULL, why, sizeof why), "already there");
    CHECK_STR_CONTAINS(why, "already runs Haswell");
    CHECK(!blas_steer_decide("Pentium9", "Zen", 2, "Haswell", NULL, why, sizeof why), "bad name");
    CHECK_STR_CONTAINS(why, "is not an OpenBLAS core name");
    char cpu[512];
    donto_cpu_describe(cpu, sizeof cpu);
    CHECK_STR_CONTAINS(cpu, "kernel sets: portable");
    printf("cpu: %s\n", cpu);
}

static void test_math(void) {
    /* bf16 rounding (bf16.c): nearest, ties to even; NaN stays NaN */
    {
        const uint32_t in[] = {0x3F800000u, 0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF80C000u,
                               0x7F7FFFFFu, 0x7F800000u, 0x7FC00001u, 0x00000001u};
        const uint32_t want[] = {0x3F800000u, 0x3F800000u, 0x3F820000u, 0x3F810000u, 0xBF810000u,
                                 0x7F800000u, 0x7F800000u, 0x7FC00000u, 0x00000000u};
        for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
            float x, y;
            uint32_t u;
            memcpy(&x, &in[i], 4);
            bf16_round_f32(&y, &x, 1);
            memcpy(&u, &y, 4);
            if (i == 7) CHECK(isnan(y), "NaN stays NaN: %08x", u);
            else CHECK(u == want[i], "bf16 round %08x -> %08x, want %08x", in[i], u, want[i]);
        }
    }
    /* the AVX2 rounding (bf16_round_f32_isa) gives the scalar bits on every
     * pattern: random bits (every NaN, subnormal, infinity) and a tail */
    if (donto_isa_supported(DONTO_ISA_AVX2)) {
        enum { NB = 100003 };
        static uint32_t ub[NB];
        static float xs[NB], ya[NB], yb[NB];
        uint64_t st = 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < NB; i++) {
            st ^= st << 13, st ^= st >> 7, st ^= st << 17;
            ub[i] = (uint32_t)(st >> 32);
            if (i % 7 == 0) ub[i] &= 0x807fffffu;      /* subnormals */
            if (i % 11 == 0) ub[i] |= 0x7f800000u;     /* infinities and NaNs */
            if (i % 13 == 0) ub[i] = (ub[i] & 0xffff0000u) | 0x8000u; /* ties */
        }
        memcpy(xs, ub, sizeof xs);
        bf16_round_f32(ya, xs, NB);
        bf16_round_f32_isa(yb, xs, NB, DONTO_ISA_AVX2);
        CHECK(memcmp(ya, yb, sizeof ya) == 0, "bf16 rounding: AVX2 differs from scalar");
    } else {
        printf("SKIP bf16 rounding on avx2: CPU lacks it\n");
    }
    /* GELU and softmax on every set's loops (bert_kern_name): GELU against
     * double erf over [-10, 10] (the SIMD loops' polynomial erf, every
     * length's masked or padded tail), softmax against double. The sets on
     * the same loops give the same bits. */
    enum { N = 4003 };
    static float x[N], y[N], yfirst[3][N];
    const char *kname[3] = {0};
    for (int i = 0; i < N; i++) x[i] = -10.0f + 20.0f * (float)i / (N - 1);
    for (int si = DONTO_ISA_PORTABLE; si < DONTO_ISA_N; si++) {
        const donto_isa is = (donto_isa)si;
        if (!donto_isa_supported(is)) {
            printf("SKIP gelu/softmax on %s: CPU lacks it\n", donto_isa_name(is));
            continue;
        }
        const char *kn = bert_kern_name(is);
        double maxerr = 0;
        long past = 0;
        for (int len = N; len > N - 17; len--) { /* the tail lengths */
            memcpy(y, x, sizeof x);
            bert_gelu_isa(is, y, (size_t)len);
            for (int i = 0; i < len; i++) {
                const double r = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
                const double e = fabs(y[i] - r);
                if (!(e <= maxerr)) maxerr = e; /* NaN sticks */
            }
            for (int i = len; i < N; i++) past += y[i] != x[i]; /* past n: untouched */
        }
        CHECK(maxerr < 2e-6 && past == 0, "%s gelu: max abs err %g, %ld values past n written", donto_isa_name(is),
              maxerr, past);
        /* large, infinite and NaN inputs as the exact GELU gives them */
        float z[5] = {30.0f, -30.0f, INFINITY, -0.0f, NAN};
        bert_gelu_isa(is, z, 5);
        CHECK(z[0] == 30.0f && z[1] == 0.0f && z[2] == INFINITY && z[3] == 0.0f && isnan(z[4]),
              "%s gelu specials: %g %g %g %g %g", donto_isa_name(is), z[0], z[1], z[2], z[3], z[4]);
        memcpy(y, x, sizeof x);
        bert_gelu_isa(is, y, N);
        for (int k = 0; k < 3; k++) {
            if (!kname[k]) {
                kname[k] = kn;
                memcpy(yfirst[k], y, sizeof y);
                break;
            }
            if (!strcmp(kname[k], kn)) {
                CHECK(memcmp(yfirst[k], y, sizeof y) == 0, "%s gelu: bits differ from the first set on the %s loops",
                      donto_isa_name(is), kn);
                break;
            }
        }
        /* softmax sums to 1 and matches double, for each tail length */
        for (int n = 1; n <= 37; n += 3) {
            float s[37];
            double ref[37], sum = 0, m = 0, tot = 0;
            for (int i = 0; i < n; i++) s[i] = (float)(i % 7) * 1.5f - 3.0f;
            for (int i = 0; i < n; i++) sum += exp((double)s[i]);
            for (int i = 0; i < n; i++) ref[i] = exp((double)s[i]) / sum;
            bert_softmax_isa(is, s, n);
            for (int i = 0; i < n; i++) m = fmax(m, fabs(s[i] - ref[i])), tot += s[i];
            CHECK(m < 1e-6 && fabs(tot - 1) < 1e-6, "%s softmax n=%d: err %g, sum %.9f", donto_isa_name(is), n, m, tot);
        }
        printf("gelu on %s (%s loops): max abs err %.3g vs double erf\n", donto_isa_name(is), kn, maxerr);
    }
}

/* The model's own settings (issue 16, point 10): the token limit comes from
 * sentence_bert_config.json max_seq_length, else tokenizer_config.json
 * model_max_length, else max_position_embeddings; a cased tokenizer config
 * is honoured, not silently lowercased. */
static size_t tokens_of(const char *dir, int max_len, const char *text, float *vec, int *rc) {
    donto_err err = {0};
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 1;
    o.max_len = max_len;
    donto_encoder *enc;
    *rc = donto_encoder_open(dir, &o, &enc, &err);
    if (*rc) {
        fprintf(stderr, "(open %s: %s)\n", dir, err.msg);
        return 0;
    }
    donto_encode_stats st = {0};
    CHECK(donto_encoder_encode(enc, &text, NULL, 1, vec, &st, &err) == 0, "encode: %s", err.msg);
    donto_encoder_close(enc);
    return st.tokens;
}

static void test_settings(void) {
    char big[400];
    big[0] = 0;
    for (int i = 0; i < 40; i++) strcat(big, "dog ");
    float v1[16], v2[16];
    int rc;
    tiny_spec s;
    tiny_default(&s); /* max_position_embeddings 64 */
    const char *d = mkmodel("set_plain", &s);
    CHECK_EQ_INT(tokens_of(d, 0, big, v1, &rc), 42);
    d = mkmodel("set_tok", &s);
    write_text(d, "tokenizer_config.json", "{\"do_lower_case\": true, \"model_max_length\": 32}");
    CHECK_EQ_INT(tokens_of(d, 0, big, v1, &rc), 32);
    /* HF's "no limit" sentinel (1e30) leaves max_position_embeddings in force. */
    write_text(d, "tokenizer_config.json", "{\"model_max_length\": 1000000000000000019884624838656}");
    CHECK_EQ_INT(tokens_of(d, 0, big, v1, &rc), 42);
    d = mkmodel("set_st", &s);
    write_text(d, "tokenizer_config.json", "{\"do_lower_case\": true, \"model_max_length\": 32}");
    write_text(d, "sentence_bert_config.json", "{\"max_seq_length\": 16, \"do_lower_case\": false}");
    CHECK_EQ_INT(tokens_of(d, 0, big, v1, &rc), 16);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(tokens_of(d, 20, big, v1, &rc), 20); /* the option overrides */
    tokens_of(d, 65, big, v1, &rc);                    /* over max_position_embeddings */
    CHECK(rc != 0, "max_len 65 > max_position_embeddings 64 accepted");
    /* Cased: "Hello" is not "hello" (the tiny vocabulary has only "hello"). */
    d = mkmodel("set_cased", &s);
    write_text(d, "tokenizer_config.json", "{\"do_lower_case\": false}");
    tokens_of(d, 0, "Hello", v1, &rc);
    tokens_of(d, 0, "hello", v2, &rc);
    CHECK(cosine(v1, v2, 16) < 0.9999, "do_lower_case false ignored: cos %.6f", cosine(v1, v2, 16));
    d = mkmodel("set_uncased", &s);
    write_text(d, "tokenizer_config.json", "{\"do_lower_case\": true}");
    tokens_of(d, 0, "Hello", v1, &rc);
    tokens_of(d, 0, "hello", v2, &rc);
    CHECK(cosine(v1, v2, 16) > 0.999999, "uncased: cos %.6f", cosine(v1, v2, 16));
    /* sentence-transformers lowercasing (Python str.lower) before a cased
     * tokenizer: refused with a clear error, not approximated. */
    d = mkmodel("set_st_lower", &s);
    write_text(d, "tokenizer_config.json", "{\"do_lower_case\": false}");
    write_text(d, "sentence_bert_config.json", "{\"max_seq_length\": 16, \"do_lower_case\": true}");
    tokens_of(d, 0, "Hello", v1, &rc);
    CHECK(rc != 0, "st do_lower_case over a cased tokenizer accepted");
}

/* The integer paths hand rows out in blocks to whichever thread is free
 * (bert_linear_ops.row_block): a row is computed by one call whatever its
 * block, so 1, 2 and 3 threads give the same bits, at int16 and int8, on
 * a batch large enough for many blocks (~700 rows, blocks of 96). */
/* The kernel summary says the GEMM form of attention exactly when a text
 * can be long enough for it: a sequence of max_len tokens takes it when
 * max_len >= bert_attend_gemm_min (on portable: 48 tokens). */
static void test_attention_summary(void) {
    tiny_spec sp;
    tiny_default(&sp);
    const char *d = mkmodel("enc_attn_summary", &sp);
    const int amin = bert_attend_gemm_min(DONTO_ISA_PORTABLE, sp.hidden / sp.heads);
    CHECK(amin > 1 && amin <= sp.maxpos, "portable's GEMM threshold %d within the tiny model's %d positions", amin,
          sp.maxpos);
    for (int ml = amin - 1; ml <= amin; ml++) {
        donto_encoder_opts o;
        donto_encoder_default_opts(&o);
        o.isa = DONTO_ISA_PORTABLE;
        o.max_len = ml;
        donto_err err = {0};
        donto_encoder *enc = NULL;
        if (donto_encoder_open(d, &o, &enc, &err)) {
            CHECK(0, "open max_len %d: %s", ml, err.msg);
            continue;
        }
        donto_encoder_kernels k;
        donto_encoder_kernels_get(enc, &k);
        char want[64];
        snprintf(want, sizeof want, "attention loops, openblas from %d tokens", amin);
        if (ml >= amin) CHECK(strstr(k.summary, want) != NULL, "max_len %d: summary %s", ml, k.summary);
        else CHECK(strstr(k.summary, "attention loops (") != NULL, "max_len %d: summary %s", ml, k.summary);
        donto_encoder_close(enc);
    }
}

static void test_row_blocks(void) {
    tiny_spec sp;
    tiny_default(&sp);
    sp.hidden = 64, sp.heads = 2, sp.inter = 128;
    const char *d = mkmodel("enc_rows", &sp);
    enum { N = 64 };
    static const char *words[] = {"the", "dog", "is", "a", "kind", "of", "animal", "running", "cats", "quick"};
    char buf[N][128];
    const char *texts[N];
    for (int i = 0; i < N; i++) {
        int o = 0;
        for (int w = 0; w < 4 + i % 9; w++) o += snprintf(buf[i] + o, sizeof buf[i] - (size_t)o, "%s ", words[(i * 7 + w * 3) % 10]);
        texts[i] = buf[i];
    }
    static const int precs[] = {DONTO_PREC_INT16, DONTO_PREC_INT8};
    for (size_t pi = 0; pi < sizeof precs / sizeof *precs; pi++) {
        float *first = NULL;
        for (int nt = 1; nt <= 3; nt++) {
            donto_encoder_opts o;
            donto_encoder_default_opts(&o);
            o.threads = nt;
            o.precision = (donto_precision)precs[pi];
            donto_err err = {0};
            donto_encoder *enc = NULL;
            if (donto_encoder_open(d, &o, &enc, &err)) {
                CHECK(0, "open: %s", err.msg);
                continue;
            }
            float *v = calloc((size_t)N * 64, 4);
            donto_encode_stats st = {0};
            CHECK(donto_encoder_encode(enc, texts, NULL, N, v, &st, &err) == 0, "encode: %s", err.msg);
            CHECK(st.tokens > 6 * 96, "only %lld tokens: too few for several row blocks", (long long)st.tokens);
            donto_encoder_close(enc);
            if (!first) {
                first = v;
                continue;
            }
            CHECK(memcmp(v, first, (size_t)N * 64 * 4) == 0, "%s: %d threads differ from 1",
                  donto_precision_name((donto_precision)precs[pi]), nt);
            free(v);
        }
        free(first);
    }
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/donto-test-model-%d", (int)getpid());
    mkdir(root, 0755);
    test_bad_files();
    test_encoder();
    test_settings();
    test_isa();
    test_attention_summary();
    test_row_blocks();
    test_math();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return check_report("test_model");
}
