/*
 * The encoder: tokenizer + packed BERT forward + pooling.
 *
 * encode() has one path for every engine: it works in chunks of texts,
 * tokenises a chunk (in parallel), and feeds it to a bp_stream (batch.c),
 * which sorts it by length, cuts the sorted run into packed batches of at
 * most batch_tokens tokens, hands each batch to the engine and scatters the
 * vectors back to input order. Sorting keeps sequences of one batch similar
 * in length, so the attention work splits evenly over threads; packing means
 * no padding token is ever computed.
 *
 * The engine is the CPU forward (bert_cpu.c; one per call, so concurrent
 * calls run in parallel, each with its own scratch) or the attached ones
 * (one CUDA engine per GPU, or a test's fakes; calls take turns on them).
 * An asynchronous engine (a GPU) has the next chunk tokenised on a helper
 * thread while the current one computes; the CPU engine computes with the
 * host's threads itself, so there tokenising runs in line between feeds.
 */
#define _POSIX_C_SOURCE 200809L
#include "donto/encoder.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batch.h"
#include "bert_cpu.h"
#include "cpu_isa.h"
#include "encoder_int.h"
#include "fgemm.h"
#include "quant.h"
#include "bf16.h"
#ifdef DONTO_HAVE_CUDA
#include "bert_cuda.h"
#endif

/* Texts tokenised at a time: the CPU engine runs each chunk as soon as it
 * is tokenised; for an asynchronous engine (GPU) a chunk is tokenised while
 * the previous one computes, and a bigger chunk sorts into batches of more
 * even lengths. */
#define CHUNK_TEXTS 2048
#define CHUNK_TEXTS_ASYNC 8192
#define CPU_BATCH_TOKENS 4096
#define GPU_BATCH_TOKENS 16384
#define GPU_SLOTS 3
#define DONTO_MAX_ENGINES 16

/* An engine and the stream that feeds it. */
typedef struct {
    bp_engine eng;
    bp_stream st;
} engine;

struct donto_encoder {
    donto_bert_weights *w;
    donto_tokenizer *tok;
    donto_encoder_opts o;
    int pooling;
    bert_linear_ops ops;
    bert_quant *quant; /* integer path, or NULL */
    bert_bf16 *bf16;   /* bf16 CPU path, or NULL */
    bert_fp32p *fp32p; /* fp32 on packed weights (fgemm.h), or NULL: OpenBLAS */
    donto_isa isa;     /* the CPU kernel set in use (resolved: never AUTO) */
    /* Attached engines (one CUDA engine per GPU, or a test's fakes); 0: each
     * call runs on a CPU engine of its own. */
    int neng;
    engine eng[DONTO_MAX_ENGINES];
    pthread_mutex_t gmu; /* one caller at a time on the attached engines */
    char max_len_from[160]; /* where o.max_len came from (donto_encoder_max_len_from) */
    int lowercase;          /* the tokenizer lowercases (tokenizer_config.json do_lower_case) */
};

int donto_cuda_built(void) {
#ifdef DONTO_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *const donto_device_names[] = {[DONTO_DEVICE_CPU] = "cpu", [DONTO_DEVICE_CUDA] = "cuda", NULL};
const char *const donto_precision_names[] = {
    [DONTO_PREC_FP32] = "fp32", [DONTO_PREC_INT16] = "int16", [DONTO_PREC_BF16] = "bf16",
    [DONTO_PREC_INT8] = "int8", NULL};

/* The index of s in a NULL-terminated name table, or -1. */
static int name_index(const char *const *names, const char *s) {
    for (int i = 0; s && names[i]; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

int donto_device_parse(const char *s) { return name_index(donto_device_names, s); }

const char *donto_device_name(donto_device d) { return d == DONTO_DEVICE_CUDA ? "cuda" : "cpu"; }

void donto_encoder_default_opts(donto_encoder_opts *o) {
    memset(o, 0, sizeof *o);
    o->precision = DONTO_PREC_FP32;
    o->pooling = -1;
}

int donto_precision_parse(const char *s) { return name_index(donto_precision_names, s); }

const char *donto_precision_name(donto_precision p) {
    return p == DONTO_PREC_INT16 ? "int16" : p == DONTO_PREC_BF16 ? "bf16" : p == DONTO_PREC_INT8 ? "int8" : "fp32";
}

donto_precision donto_precision_default(donto_device device, donto_isa isa) {
    if (device == DONTO_DEVICE_CUDA) return DONTO_PREC_BF16;
    return cpu_isa_runnable(isa) >= DONTO_ISA_AVX2 ? DONTO_PREC_INT16 : DONTO_PREC_FP32;
}

/* ---- kernel sets ---------------------------------------------------------- */

const char *const donto_isa_names[] = {[DONTO_ISA_AUTO] = "auto",
                                       [DONTO_ISA_PORTABLE] = "portable",
                                       [DONTO_ISA_AVX2] = "avx2",
                                       [DONTO_ISA_AVXVNNI] = "avxvnni",
                                       [DONTO_ISA_AVX512] = "avx512",
                                       [DONTO_ISA_AVX512VNNI] = "avx512vnni",
                                       [DONTO_ISA_AVX512BF16] = "avx512bf16",
                                       NULL};

int donto_isa_parse(const char *s) { return name_index(donto_isa_names, s); }

const char *donto_isa_name(donto_isa s) {
    return (int)s >= 0 && s < DONTO_ISA_N ? donto_isa_names[s] : "unknown";
}

int donto_isa_supported(donto_isa s) { return cpu_isa_supported(s); }

donto_isa donto_isa_best(void) { return cpu_isa_best(); }

void donto_cpu_describe(char *buf, size_t n) {
    char feat[256], sets[128];
    size_t at = 0;
    cpu_features_describe(feat, sizeof feat);
    sets[0] = 0;
    for (int s = DONTO_ISA_PORTABLE; s < DONTO_ISA_N; s++) {
        if (!cpu_isa_supported((donto_isa)s)) continue;
        int k = snprintf(sets + at, at < sizeof sets ? sizeof sets - at : 0, "%s%s", at ? " " : "",
                         donto_isa_names[s]);
        if (k > 0) at += (size_t)k;
    }
    snprintf(buf, n, "%s; kernel sets: %s", feat, sets);
}

int donto_isa_check(donto_isa s, donto_err *err) {
    if ((int)s < 0 || s >= DONTO_ISA_N) return donto_seterrc(err, DONTO_E_INVALID, "unknown kernel set %d", (int)s);
    if (cpu_isa_supported(s)) return 0;
    char miss[256], has[512];
    cpu_isa_missing(s, miss, sizeof miss);
    donto_cpu_describe(has, sizeof has);
    return donto_seterrc(err, DONTO_E_INVALID, "kernel set %s needs %s, which this CPU lacks (it has: %s)",
                         donto_isa_names[s], miss, has);
}

/* OpenBLAS's kernels (its core name) against this CPU, once per process:
 * a DYNAMIC_ARCH OpenBLAS that does not know the CPU falls back to old
 * kernels (Debian's 0.3.21 takes Sapphire Rapids for a Prescott, SSE3),
 * which makes every fp32 GEMM several times slower. */
static char g_blas_core[48];
static int g_blas_weaker;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_probe(void) {
    const char *core = openblas_get_corename();
    snprintf(g_blas_core, sizeof g_blas_core, "%s", core && *core ? core : "unknown");
    /* trim the trailing blanks some versions print */
    for (size_t n = strlen(g_blas_core); n && g_blas_core[n - 1] == ' '; n--) g_blas_core[n - 1] = 0;
    const int lb = cpu_blas_core_level(g_blas_core), lc = cpu_level();
    g_blas_weaker = lb >= 0 && lb < lc;
    if (g_blas_weaker) {
        static const char *const level_names[] = {"SSE", "AVX", "AVX2", "AVX-512"};
        DLOG_WARN("OpenBLAS runs its %s kernels (%s) on a CPU with %s: its GEMMs (every one at fp32, "
                  "attention's at int16) will be slow; set OPENBLAS_CORETYPE=%s (steering: %s)",
                  g_blas_core, level_names[lb], level_names[lc], cpu_level_coretype(lc), donto_blas_steer_state());
    } else if (strcmp(donto_blas_steer_state(), "none") != 0) {
        DLOG_INFO("OpenBLAS steering: %s", donto_blas_steer_state());
    }
}

void donto_encoder_kernels_get(const donto_encoder *e, donto_encoder_kernels *out) {
    memset(out, 0, sizeof *out);
    pthread_once(&g_blas_once, blas_probe);
    snprintf(out->blas_core, sizeof out->blas_core, "%s", g_blas_core);
    out->blas_weaker = g_blas_weaker;
    snprintf(out->blas_steer, sizeof out->blas_steer, "%s", donto_blas_steer_state());
    if (e->o.device == DONTO_DEVICE_CUDA) {
        snprintf(out->gemm, sizeof out->gemm, "cuda %s", donto_precision_name(e->o.precision));
        snprintf(out->summary, sizeof out->summary, "GEMM on cuda (%s)", donto_precision_name(e->o.precision));
        return;
    }
    snprintf(out->isa, sizeof out->isa, "%s", donto_isa_name(e->isa));
    /* The dense layers' GEMM, then one summary: what runs them and
     * attention, and the OpenBLAS core (attention's GEMMs on long sequences,
     * and fp32's where it is OpenBLAS). */
    const int D = e->w->cfg.hidden / e->w->cfg.heads, amin = bert_attend_gemm_min(e->isa, D);
    char attn[64];
    if (amin <= e->o.max_len) snprintf(attn, sizeof attn, "attention loops, openblas from %d tokens", amin);
    else snprintf(attn, sizeof attn, "attention loops");
    char what[sizeof out->gemm + 128];
    if (e->quant) {
        snprintf(out->gemm, sizeof out->gemm, "%s", bert_quant_kernel_name(e->quant));
        snprintf(what, sizeof what, "GEMM %s, %s", out->gemm, attn);
    } else if (e->bf16) {
        snprintf(out->gemm, sizeof out->gemm, "%s", bert_bf16_kernel_name(e->bf16));
        snprintf(what, sizeof what, "GEMM %s, %s", out->gemm, attn);
    } else if (e->fp32p) {
        snprintf(out->gemm, sizeof out->gemm, "%s", bert_fp32p_kernel_name(e->fp32p));
        snprintf(what, sizeof what, "fp32 GEMM %s, %s", out->gemm, attn);
    } else {
        snprintf(out->gemm, sizeof out->gemm, "openblas");
        snprintf(what, sizeof what, "fp32 GEMM openblas, %s", attn);
    }
    const int steered = strcmp(out->blas_steer, "none") != 0;
    snprintf(out->summary, sizeof out->summary, "isa %s, %s (core %s%s%s%s)", out->isa, what, out->blas_core,
             out->blas_weaker ? ", weaker than this CPU" : "", steered ? ", steering " : "",
             steered ? out->blas_steer : "");
}

/* Calibration texts of the int8 path (general English, not from any test
 * set): their fp32 forward picks each Linear's outlier input channels. */
static const char *const int8_calib_texts[] = {
    "The committee approved the budget after a long debate about school funding.",
    "A river delta forms where sediment carried by the water settles near the coast.",
    "Press the reset button for five seconds, then wait until the light turns green.",
    "She translated the letter from Portuguese, keeping the writer's informal tone.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The defendant's lawyer argued that the contract had never been signed.",
    "Prices rose 3.2% in March, driven mostly by energy and food costs.",
    "bank - a financial institution that accepts deposits and makes loans",
    "oak, oak tree - is a kind of - tree",
    "violin, fiddle - is a part of - string section",
    "How do I convert a CSV file to JSON without losing the column types?",
    "The patient reported mild headaches and trouble sleeping for two weeks.",
    "In 1969 the first crewed landing on the Moon was broadcast around the world.",
    "def add(a, b): return a + b  # returns the sum of two numbers",
    "Our hotel was close to the station, but the rooms were small and noisy.",
    "Enzymes lower the activation energy of reactions without being consumed.",
    "The striker scored twice in the second half to win the match 3-1.",
    "Light travels at about 300,000 kilometres per second in a vacuum.",
    "Remember to water the tomatoes every morning during the dry season.",
    "The algorithm sorts the list in O(n log n) time using a divide and conquer strategy.",
    "Rain is expected tomorrow, with strong winds along the northern coast.",
    "He apologised for the delay and promised to send the report on Monday.",
    "Mitochondria are often called the powerhouse of the cell.",
    "The museum's new wing displays sculpture from West Africa and the Pacific.",
};

/* fp32 on the CPU: the packed GEMM (fgemm.h) on the SIMD kernel sets, where
 * it is faster than OpenBLAS (no per-call packing of W, no bias pass;
 * docs/engine.md), OpenBLAS on portable.  DONTO_FP32_GEMM=openblas|packed
 * overrides it, for comparisons (packed on a set without a SIMD kernel is
 * the plain C loop: slow, but the same arithmetic). */
static int fp32_packed_wanted(donto_isa isa) {
    const char *env = getenv("DONTO_FP32_GEMM");
    if (env && !strcmp(env, "openblas")) return 0;
    if (env && !strcmp(env, "packed")) return 1;
    if (env && *env) DLOG_WARN("DONTO_FP32_GEMM=%s: not openblas or packed, ignored", env);
    return donto_fgemm_preferred(isa);
}

static int calibrate_int8(donto_encoder *e, donto_err *err) {
    const int nt = (int)(sizeof int8_calib_texts / sizeof *int8_calib_texts), maxl = 128;
    int32_t *ids = donto_xcalloc((size_t)nt * maxl, sizeof *ids);
    int off[sizeof int8_calib_texts / sizeof *int8_calib_texts + 1];
    off[0] = 0;
    int ns = 0; /* sequences kept (a text the tokenizer refuses is left out) */
    for (int i = 0; i < nt; i++) {
        int lim = e->o.max_len < maxl ? e->o.max_len : maxl;
        int n = donto_tokenizer_encode(e->tok, int8_calib_texts[i], strlen(int8_calib_texts[i]), ids + off[ns], lim);
        if (n > 0) off[ns + 1] = off[ns] + n, ns++;
    }
    /* The scheme of the kernel set (quant.h), or for experiments:
     * DONTO_INT8_OUTLIERS, outlier channels per Linear; DONTO_INT8_KEEP16,
     * bitmask of the matrices kept at int16 (0: none) */
    bert_int8_scheme sch;
    bert_int8_default_scheme(e->isa, &sch);
    const char *env = getenv("DONTO_INT8_OUTLIERS");
    if (env && *env) sch.nout = atoi(env);
    if ((env = getenv("DONTO_INT8_KEEP16")) && *env) sch.keep16 = (unsigned)strtoul(env, NULL, 0);
    /* DONTO_INT8_GROUP: weight scale groups per matrix ("a,b,c,d"; one
     * value: all four) */
    if ((env = getenv("DONTO_INT8_GROUP")) && *env) {
        int *g = sch.group, got = sscanf(env, "%d,%d,%d,%d", &g[0], &g[1], &g[2], &g[3]);
        if (got == 1) g[1] = g[2] = g[3] = g[0];
        else if (got != 4) {
            free(ids);
            return donto_seterr(err, "DONTO_INT8_GROUP=%s: want one number or four, comma separated", env);
        }
    }
    int rc = bert_quant_init8(&e->quant, e->w, e->isa, ids, off, ns, &sch, err);
    free(ids);
    return rc;
}

/* Device half of open: check the device/precision pair, attach the GPU
 * engines (the CPU engine is made per call). */
static int open_device(donto_encoder *e, donto_err *err) {
    if (e->o.device == DONTO_DEVICE_CPU) {
        return 0;
    }
    if (e->o.device != DONTO_DEVICE_CUDA) return donto_seterr(err, "unknown device %d", (int)e->o.device);
    if (e->o.precision == DONTO_PREC_INT16 || e->o.precision == DONTO_PREC_INT8)
        return donto_seterr(err, "precision %s is a CPU path; on --device cuda use bf16 or fp32",
                            donto_precision_name(e->o.precision));
#ifdef DONTO_HAVE_CUDA
    /* gpu -1: every visible GPU, one engine each; encode splits its texts. */
    int first = e->o.gpu, count = 1;
    if (e->o.gpu < 0) {
        first = 0;
        if (bert_cuda_device_count(&count, err)) return donto_preerr(err, "--device cuda (all GPUs)");
        if (count < 1) return donto_seterr(err, "--device cuda: no GPU visible");
        if (count > DONTO_MAX_ENGINES) count = DONTO_MAX_ENGINES;
    }
    for (int k = 0; k < count; k++) {
        bert_cuda_opts co = {.gpu = first + k,
                             .bf16 = e->o.precision == DONTO_PREC_BF16,
                             .pooling = e->pooling,
                             .max_tokens = e->o.batch_tokens,
                             .max_seqs = e->o.batch_tokens,
                             .nslots = GPU_SLOTS};
        bert_cuda *g;
        if (bert_cuda_open(e->w, &co, &g, err)) return -1;
        bp_engine eng;
        bert_cuda_engine(g, &eng);
        if (donto_encoder_attach_engine(e, &eng, err)) {
            bp_engine_close(&eng);
            return -1;
        }
    }
    return 0;
#else
    return donto_seterr(err, "--device cuda: this donto-accel was built without CUDA (rebuild with "
                             "cmake -DDONTO_CUDA=ON, e.g. `make cuda-build`)");
#endif
}

int donto_encoder_attach_engine(donto_encoder *e, const bp_engine *eng, donto_err *err) {
    if (e->neng == DONTO_MAX_ENGINES) return donto_seterr(err, "at most %d engines", DONTO_MAX_ENGINES);
    if (eng->dim != e->w->cfg.hidden) return donto_seterr(err, "engine dimension %d, model %d", eng->dim, e->w->cfg.hidden);
    engine *g = &e->eng[e->neng];
    g->eng = *eng;
    if (bp_stream_init(&g->st, &g->eng, err)) return -1;
    g->st.on_done = e->o.progress, g->st.on_done_ctx = e->o.progress_ctx;
    e->neng++;
    return 0;
}

int donto_encoder_devinfo_get(const donto_encoder *e, donto_encoder_devinfo *out) {
    memset(out, 0, sizeof *out);
    for (int k = 0; k < e->neng; k++) {
        donto_encoder_devinfo d;
        if (!bp_engine_info(&e->eng[k].eng, &d)) continue; /* no device figures (a fake) */
        if (!out->engines) *out = d; /* the first card's name, sm, slots */
        else out->mem_engine += d.mem_engine, out->mem_used_peak += d.mem_used_peak, out->mem_total += d.mem_total;
        out->engines++;
    }
    return 0;
}

/* ---------- the model's own settings ----------
 *
 * What sentence-transformers reads, in its order, so that our vectors are
 * SentenceTransformer(dir).encode()'s: the token limit per text from
 * sentence_bert_config.json max_seq_length, else the smaller of
 * tokenizer_config.json model_max_length and config.json
 * max_position_embeddings; the tokenizer's case from tokenizer_config.json
 * (do_lower_case, strip_accents, tokenize_chinese_chars, which transformers'
 * fast BERT tokenizer also applies over tokenizer.json's normalizer). */

/* dir/name parsed into *out (a JSON object), or *out = NULL when the file is
 * absent. Numbers are read as reals: HF writes "no limit" as 1e30 in digits,
 * which is no C integer. */
static int load_json(const char *dir, const char *name, json_t **out, donto_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    char *buf;
    size_t len;
    if (donto_read_file(path, &buf, &len, err)) return -1;
    json_error_t je;
    json_t *r = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
    free(buf);
    if (!r || !json_is_object(r)) {
        json_decref(r);
        return donto_seterr(err, "%s: not a JSON object%s%s", path, r ? "" : ": ", r ? "" : je.text);
    }
    *out = r;
    return 0;
}

/* o[key]: 1 and *v when a number, 0 when absent or null, -1 (err) otherwise. */
static int num_field(json_t *o, const char *file, const char *key, double *v, donto_err *err) {
    json_t *x = o ? json_object_get(o, key) : NULL;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x) || !isfinite(json_number_value(x)))
        return donto_seterr(err, "%s: \"%s\" must be a number", file, key);
    *v = json_number_value(x);
    return 1;
}

/* o[key]: 1 true, 0 false, dflt when absent or null, -2 (err) otherwise. */
static int bool_field(json_t *o, const char *file, const char *key, int dflt, donto_err *err) {
    json_t *x = o ? json_object_get(o, key) : NULL;
    if (!x || json_is_null(x)) return dflt;
    if (!json_is_boolean(x)) {
        donto_seterr(err, "%s: \"%s\" must be true or false", file, key);
        return -2;
    }
    return json_is_true(x);
}

static int read_settings(donto_encoder *e, const char *dir, donto_tokenizer_opts *to, donto_err *err) {
    const int maxpos = e->w->cfg.max_position;
    json_t *sb = NULL, *tc = NULL;
    int rc = -1, r;
    double v = 0;
    if (load_json(dir, "sentence_bert_config.json", &sb, err) || load_json(dir, "tokenizer_config.json", &tc, err))
        goto out;
    /* The token limit. */
    int limit = maxpos;
    snprintf(e->max_len_from, sizeof e->max_len_from, "config.json max_position_embeddings");
    if ((r = num_field(sb, "sentence_bert_config.json", "max_seq_length", &v, err)) < 0) goto out;
    if (r) {
        if (v < 2 || v != floor(v)) {
            donto_seterr(err, "%s/sentence_bert_config.json: max_seq_length %g is not a whole number >= 2", dir, v);
            goto out;
        }
        if (v <= maxpos) {
            limit = (int)v;
            snprintf(e->max_len_from, sizeof e->max_len_from, "sentence_bert_config.json max_seq_length");
        } else {
            snprintf(e->max_len_from, sizeof e->max_len_from,
                     "config.json max_position_embeddings (sentence_bert_config.json max_seq_length %.0f is over it)", v);
        }
    } else {
        if ((r = num_field(tc, "tokenizer_config.json", "model_max_length", &v, err)) < 0) goto out;
        if (r && v >= 2 && v <= maxpos) { /* larger (HF's 1e30 "no limit"): max_position_embeddings */
            limit = (int)v;
            snprintf(e->max_len_from, sizeof e->max_len_from, "tokenizer_config.json model_max_length");
        }
    }
    if (e->o.max_len > maxpos) {
        donto_seterr(err, "%s: max_len %d is over the model's max_position_embeddings %d (config.json)", dir,
                     e->o.max_len, maxpos);
        goto out;
    }
    if (e->o.max_len > 0) snprintf(e->max_len_from, sizeof e->max_len_from, "max_len option");
    else e->o.max_len = limit;
    if (e->o.max_len < 2) e->o.max_len = 2;
    /* The tokenizer's case. BertTokenizer's defaults: lowercase, accents
     * stripped when lowercasing, spaces around CJK ideographs. */
    donto_tokenizer_default_opts(to);
    if ((r = bool_field(tc, "tokenizer_config.json", "do_lower_case", 1, err)) == -2) goto out;
    to->lowercase = e->lowercase = r;
    if ((r = bool_field(tc, "tokenizer_config.json", "strip_accents", -1, err)) == -2) goto out;
    to->strip_accents = r;
    if ((r = bool_field(tc, "tokenizer_config.json", "tokenize_chinese_chars", 1, err)) == -2) goto out;
    to->tokenize_cjk = r;
    /* sentence-transformers' own do_lower_case is Python's str.lower() on
     * the text before the tokenizer: a no-op for an uncased tokenizer, and
     * not something this tokenizer reproduces before a cased one. */
    if ((r = bool_field(sb, "sentence_bert_config.json", "do_lower_case", 0, err)) == -2) goto out;
    if (r && !to->lowercase) {
        donto_seterr(err, "%s: sentence_bert_config.json asks for do_lower_case (str.lower() before the tokenizer) "
                          "but tokenizer_config.json says do_lower_case false (cased); lowercasing before a cased "
                          "tokenizer is not supported",
                     dir);
        goto out;
    }
    rc = 0;
out:
    json_decref(sb);
    json_decref(tc);
    return rc;
}

int donto_encoder_open(const char *dir, const donto_encoder_opts *opts, donto_encoder **out,
                       donto_err *err) {
    *out = NULL;
    donto_encoder *e = donto_xcalloc(1, sizeof *e);
    if (opts) e->o = *opts;
    else donto_encoder_default_opts(&e->o);
    pthread_mutex_init(&e->gmu, NULL);
    if (e->o.threads <= 0) e->o.threads = donto_ncpu();
    if (e->o.batch_tokens <= 0) e->o.batch_tokens = e->o.device == DONTO_DEVICE_CUDA ? GPU_BATCH_TOKENS : CPU_BATCH_TOKENS;
    /* A kernel set this CPU lacks is refused before anything loads. */
    if (donto_isa_check(e->o.isa, err)) goto fail;
    e->isa = cpu_isa_resolve(e->o.isa);
    if (donto_bert_load(dir, &e->w, err)) goto fail;
    const donto_bert_config *c = &e->w->cfg;
    donto_tokenizer_opts to;
    if (read_settings(e, dir, &to, err)) goto fail;
    if (e->o.batch_tokens < e->o.max_len) e->o.batch_tokens = e->o.max_len;
    e->pooling = e->o.pooling >= 0 ? e->o.pooling : (int)c->pooling;
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if (donto_tokenizer_open(path, &to, &e->tok, err)) goto fail;
    if (donto_tokenizer_vocab_size(e->tok) != c->vocab_size) {
        donto_seterr(err, "%s: vocab.txt has %d entries, config.json says vocab_size %d", dir,
                     donto_tokenizer_vocab_size(e->tok), c->vocab_size);
        goto fail;
    }
    if (open_device(e, err)) goto fail;
    /* Parallelism is ours (OpenMP over row blocks); each BLAS call is one
     * block and must not spawn threads of its own (int8's calibration
     * forward, below, already calls it). */
    openblas_set_num_threads(1);
    if (e->o.precision == DONTO_PREC_INT16 || e->o.precision == DONTO_PREC_INT8) {
        if (e->o.precision == DONTO_PREC_INT8 ? calibrate_int8(e, err)
                                              : bert_quant_init(&e->quant, e->w, e->isa, err))
            goto fail;
        bert_quant_ops(&e->ops, e->quant);
        if (e->isa == DONTO_ISA_PORTABLE && e->o.device == DONTO_DEVICE_CPU)
            DLOG_WARN("precision %s on the portable kernel set (plain C) is much slower than fp32 "
                      "(OpenBLAS): use --precision fp32 on this CPU", donto_precision_name(e->o.precision));
    } else if (e->o.precision == DONTO_PREC_BF16 && e->o.device == DONTO_DEVICE_CPU) {
        if (bert_bf16_init(&e->bf16, e->w, e->isa, err)) goto fail;
        bert_bf16_ops(&e->ops, e->bf16);
        e->ops.isa = e->isa;
        DLOG_INFO("precision bf16 on kernel set %s: GEMM %s (%s)", donto_isa_name(e->isa),
                  bert_bf16_kernel_name(e->bf16), bert_bf16_why(e->bf16));
    } else if (e->o.device == DONTO_DEVICE_CPU && fp32_packed_wanted(e->isa)) {
        if (bert_fp32p_init(&e->fp32p, e->w, e->isa, err)) goto fail;
        bert_fp32p_ops(&e->ops, e->fp32p);
    } else {
        bert_fp32_ops(&e->ops, e->w);
        e->ops.isa = e->isa;
    }
    /* OpenBLAS runs the fp32 GEMMs and attention's: say once if its
     * kernels are older than the CPU. */
    if (e->o.device == DONTO_DEVICE_CPU) pthread_once(&g_blas_once, blas_probe);
    *out = e;
    return 0;
fail:
    donto_encoder_close(e);
    return -1;
}

void donto_encoder_close(donto_encoder *e) {
    if (!e) return;
    for (int k = 0; k < e->neng; k++) {
        bp_stream_free(&e->eng[k].st);
        bp_engine_close(&e->eng[k].eng);
    }
    pthread_mutex_destroy(&e->gmu);
    bert_quant_free(e->quant);
    bert_bf16_free(e->bf16);
    bert_fp32p_free(e->fp32p);
    donto_tokenizer_close(e->tok);
    donto_bert_free(e->w);
    free(e);
}

int donto_encoder_dim(const donto_encoder *e) { return e->w->cfg.hidden; }
int donto_encoder_max_len(const donto_encoder *e) { return e->o.max_len; }
const char *donto_encoder_max_len_from(const donto_encoder *e) { return e->max_len_from; }
int donto_encoder_lowercase(const donto_encoder *e) { return e->lowercase; }
const donto_tokenizer *donto_encoder_tokenizer(const donto_encoder *e) { return e->tok; }
const donto_bert_config *donto_encoder_config(const donto_encoder *e) { return &e->w->cfg; }

static int check_ids(const donto_encoder *e, const int32_t *const *ids, const int *ntok, size_t n,
                     donto_err *err) {
    const int V = e->w->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (ntok[i] < 1 || ntok[i] > e->o.max_len)
            return donto_seterr(err, "sequence %zu has %d tokens (allowed 1..%d)", i, ntok[i], e->o.max_len);
        for (int t = 0; t < ntok[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= V)
                return donto_seterr(err, "sequence %zu: token id %d outside the vocabulary", i, ids[i][t]);
    }
    return 0;
}

/* Tokenise texts [c0, c0 + m) into ptr/ntok (rows of idbuf). */
typedef struct {
    donto_encoder *e;
    const char *const *texts;
    const size_t *lens;
    size_t c0, m;
    int32_t *idbuf, **ptr;
    int *ntok;
    size_t tokens, truncated;
    int threads;
} tok_job;

static void tokenize_chunk(tok_job *j) {
    donto_encoder *e = j->e;
    const int ml = e->o.max_len;
    size_t tokens = 0, truncated = 0;
#pragma omp parallel for num_threads(j->threads) schedule(dynamic, 16) reduction(+ : tokens, truncated)
    for (size_t i = 0; i < j->m; i++) {
        const char *t = j->texts[j->c0 + i];
        size_t len = j->lens ? j->lens[j->c0 + i] : (t ? strlen(t) : 0);
        j->ptr[i] = j->idbuf + i * (size_t)ml;
        j->ntok[i] = donto_tokenizer_encode(e->tok, t ? t : "", t ? len : 0, j->ptr[i], ml);
        tokens += (size_t)j->ntok[i];
        /* A text that filled max_len may have been cut; count it so the
         * caller can tell the user (exact only up to that ambiguity). */
        truncated += j->ntok[i] == ml;
    }
    j->tokens = tokens, j->truncated = truncated;
}

static void *tokenize_thread(void *arg) {
    tokenize_chunk(arg);
    return NULL;
}

typedef struct {
    int32_t *idbuf, **ptr;
    int *ntok;
} tok_bufs;

static int tok_bufs_alloc(tok_bufs *b, size_t chunk, int ml) {
    b->idbuf = malloc(chunk * (size_t)ml * sizeof *b->idbuf);
    b->ptr = malloc(chunk * sizeof *b->ptr);
    b->ntok = malloc(chunk * sizeof *b->ntok);
    return b->idbuf && b->ptr && b->ntok ? 0 : -1;
}

static void tok_bufs_free(tok_bufs *b) {
    free(b->idbuf);
    free(b->ptr);
    free(b->ntok);
}

/* One engine's share of a call, texts (encode) or ids (encode_ids): a text
 * chunk is tokenised, then fed (sorted, batched, run, scattered back by the
 * stream); the next chunk is tokenised on a helper thread while an
 * asynchronous engine computes (into the other buffer set; feeding copies
 * the ids into the engine's slots, so a chunk's buffers are free once its
 * feed returns), or in line after the feed for the CPU engine. */
static int encode_on(donto_encoder *e, engine *g, int threads, const char *const *texts, const size_t *lens, size_t n,
                     float *out, donto_encode_stats *stats, donto_err *err) {
    const int ml = e->o.max_len, H = e->w->cfg.hidden;
    const size_t cap = g->eng.async ? CHUNK_TEXTS_ASYNC : CHUNK_TEXTS;
    size_t chunk = n < cap ? n : cap;
    const int overlap = g->eng.async && n > chunk;
    tok_bufs b[2] = {{0}};
    int rc = 0;
    if (tok_bufs_alloc(&b[0], chunk, ml) || (overlap && tok_bufs_alloc(&b[1], chunk, ml))) {
        tok_bufs_free(&b[0]);
        tok_bufs_free(&b[1]);
        return donto_seterr(err, "out of memory tokenizing %zu texts", chunk);
    }
    tok_job cur = {e, texts, lens, 0, chunk, b[0].idbuf, b[0].ptr, b[0].ntok, 0, 0, threads};
    tokenize_chunk(&cur);
    for (size_t c0 = 0, x = 0; c0 < n; c0 += chunk) {
        if (stats) stats->tokens += cur.tokens, stats->truncated += cur.truncated;
        size_t c1 = c0 + cur.m, nx = overlap ? x ^ 1 : x;
        tok_job next = {e, texts, lens, c1, n - c1 < chunk ? n - c1 : chunk, b[nx].idbuf, b[nx].ptr,
                        b[nx].ntok, 0, 0, threads};
        pthread_t th;
        int threaded = 0;
        if (overlap && c1 < n) threaded = pthread_create(&th, NULL, tokenize_thread, &next) == 0;
        rc = bp_stream_feed(&g->st, (const int32_t *const *)cur.ptr, cur.ntok, cur.m, out + c0 * (size_t)H, err);
        if (threaded) pthread_join(th, NULL);
        else if (c1 < n && !rc) tokenize_chunk(&next); /* in line (CPU engine, or no thread) */
        if (rc) break;
        cur = next;
        x = nx;
    }
    if (!rc) rc = bp_stream_drain(&g->st, err);
    tok_bufs_free(&b[0]);
    tok_bufs_free(&b[1]);
    return rc;
}

typedef struct {
    donto_encoder *e;
    engine *g;
    int threads;
    const char *const *texts;
    const size_t *lens;
    const int32_t *const *ids;
    const int *ntok;
    size_t n;
    float *out;
    donto_encode_stats stats;
    donto_err err;
    int rc;
} share;

static void *run_share(void *arg) {
    share *s = arg;
    if (s->ids) {
        bp_stream *st = &s->g->st;
        s->rc = bp_stream_feed(st, s->ids, s->ntok, s->n, s->out, &s->err) || bp_stream_drain(st, &s->err) ? -1 : 0;
    } else {
        s->rc = encode_on(s->e, s->g, s->threads, s->texts, s->lens, s->n, s->out, &s->stats, &s->err);
    }
    return NULL;
}

/* The CPU engine of one call, for up to n sequences: the batch budget,
 * threads, precision (e->ops) and pooling of the encoder. */
static int open_cpu(donto_encoder *e, size_t n, engine *g, donto_err *err) {
    const int budget = e->o.batch_tokens;
    bert_cpu_opts co = {.pooling = e->pooling,
                        .max_tokens = budget,
                        .max_seqs = n < (size_t)budget ? (int)n : budget,
                        .max_len = e->o.max_len,
                        .threads = e->o.threads};
    bert_cpu *c;
    if (bert_cpu_open(e->w, &e->ops, &co, &c, err)) return -1;
    bert_cpu_engine(c, &g->eng);
    if (bp_stream_init(&g->st, &g->eng, err)) {
        bp_engine_close(&g->eng);
        return -1;
    }
    g->st.on_done = e->o.progress, g->st.on_done_ctx = e->o.progress_ctx;
    return 0;
}

/* The one path of encode and encode_ids: n items split into one contiguous
 * share per engine (one host thread each, the tokeniser threads divided
 * between them), run, merged. */
static int run(donto_encoder *e, const char *const *texts, const size_t *lens, const int32_t *const *ids,
               const int *ntok, size_t n, float *out, donto_encode_stats *stats, donto_err *err) {
    const int H = e->w->cfg.hidden;
    engine cpu, *eng = e->eng;
    int ne = e->neng;
    if (ne) {
        pthread_mutex_lock(&e->gmu);
    } else {
        if (open_cpu(e, n, &cpu, err)) return -1;
        eng = &cpu, ne = 1;
    }
    if ((size_t)ne > n) ne = (int)n;
    share sh[DONTO_MAX_ENGINES];
    pthread_t th[DONTO_MAX_ENGINES];
    int started[DONTO_MAX_ENGINES] = {0};
    int per_threads = e->o.threads / ne > 0 ? e->o.threads / ne : 1;
    size_t at = 0;
    for (int k = 0; k < ne; k++) {
        size_t m = n / (size_t)ne + ((size_t)k < n % (size_t)ne);
        sh[k] = (share){.e = e, .g = &eng[k], .threads = ne == 1 ? e->o.threads : per_threads,
                        .texts = texts ? texts + at : NULL, .lens = lens ? lens + at : NULL,
                        .ids = ids ? ids + at : NULL, .ntok = ntok ? ntok + at : NULL, .n = m,
                        .out = out + at * (size_t)H};
        at += m;
    }
    /* Share 0 runs on this thread; a share whose thread cannot start too. */
    for (int k = 1; k < ne; k++) started[k] = pthread_create(&th[k], NULL, run_share, &sh[k]) == 0;
    run_share(&sh[0]);
    for (int k = 1; k < ne; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        else run_share(&sh[k]);
    }
    if (e->neng) {
        pthread_mutex_unlock(&e->gmu);
    } else {
        bp_stream_free(&cpu.st);
        bp_engine_close(&cpu.eng);
    }
    int rc = 0;
    for (int k = 0; k < ne; k++) {
        if (stats) stats->tokens += sh[k].stats.tokens, stats->truncated += sh[k].stats.truncated;
        if (sh[k].rc && !rc) {
            rc = -1;
            if (ne > 1) donto_seterr(err, "engine %d: %s", k, sh[k].err.msg);
            else donto_seterr(err, "%s", sh[k].err.msg);
        }
    }
    return rc;
}

int donto_encoder_encode(donto_encoder *e, const char *const *texts, const size_t *lens, size_t n,
                         float *out, donto_encode_stats *stats, donto_err *err) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (n == 0) return 0;
    return run(e, texts, lens, NULL, NULL, n, out, stats, err);
}

int donto_encoder_encode_ids(donto_encoder *e, const int32_t *const *ids, const int *ntok, size_t n,
                             float *out, donto_err *err) {
    if (n == 0) return 0;
    if (check_ids(e, ids, ntok, n, err)) return -1;
    return run(e, NULL, NULL, ids, ntok, n, out, NULL, err);
}
