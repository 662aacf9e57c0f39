/*
 * donto-accel: the text encoder (tokenizer + BERT forward + pooling +
 * L2 normalisation), the heart of the worker.
 *
 *   donto_encoder *enc;
 *   donto_encoder_opts o; donto_encoder_default_opts(&o);
 *   if (donto_encoder_open("models/bge-small-en-v1.5", &o, &enc, &err)) ...
 *   float *vecs = malloc(n * donto_encoder_dim(enc) * sizeof(float));
 *   donto_encoder_encode(enc, texts, lens, n, vecs, NULL, &err);
 *   donto_encoder_close(enc);
 *
 * donto_encoder_encode is thread-safe: weights are read-only and every call
 * uses its own scratch memory (on CUDA, calls are serialised on the engine's
 * one set of streams and buffers). Inside one call, sequences are sorted by length
 * and packed with no padding, and the work is spread over opts.threads.
 */
#ifndef DONTO_ENCODER_H
#define DONTO_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "donto/model.h"
#include "donto/tokenizer.h"
#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DONTO_PREC_FP32 = 0, /* the reference: fp32 (packed fp32 GEMM, OpenBLAS on the portable set) */
    DONTO_PREC_INT16 = 1, /* fast path: 12-bit weights x 13-bit per-row activations in int16 lanes (AVX2 vpmaddwd);
                             the CLI's default on a CPU with AVX2 (donto_precision_default) */
    DONTO_PREC_BF16 = 2,  /* bf16 weights and activations, fp32 accumulation: CUDA tensor cores; on the
                             CPU OpenBLAS sbgemm (fast only with AVX-512 BF16; src/model/bf16.h) */
    DONTO_PREC_INT8 = 3,  /* CPU: u8 per-row activations x s8 weights, calibrated outlier channels in fp32
                             (VNNI: weight scales per 64 inputs; else the FFN output on int16); below the
                             0.999 cosine gate on some texts (docs/engine.md "int8"), never a default */
} donto_precision;

/* Where the forward pass runs. DONTO_DEVICE_CUDA needs a build with
 * -DDONTO_CUDA=ON (donto_cuda_built() says so); on CUDA, precision is
 * DONTO_PREC_BF16 (fast) or DONTO_PREC_FP32 (parity/debugging, no TF32). */
typedef enum { DONTO_DEVICE_CPU = 0, DONTO_DEVICE_CUDA = 1 } donto_device;

/* The CPU engine's kernel sets, in order of preference (src/model/cpu_isa.h;
 * docs/engine.md "Kernel sets"). One binary carries them all (compiled with
 * target attributes) and picks one at open; results of the int16 GEMM are
 * bit-identical across sets, fp32 ones agree to rounding. */
typedef enum {
    DONTO_ISA_AUTO = 0,   /* the best set this CPU runs (default) */
    DONTO_ISA_PORTABLE,   /* plain C: any CPU */
    DONTO_ISA_AVX2,       /* AVX2 + FMA: int16 vpmaddwd ymm; AVX2 fp32 loops */
    DONTO_ISA_AVXVNNI,    /* + AVX-VNNI: int16 vpdpwssd ymm */
    DONTO_ISA_AVX512,     /* + AVX-512 F/BW/VL/DQ: int16 vpmaddwd zmm */
    DONTO_ISA_AVX512VNNI, /* + AVX-512 VNNI: int16 vpdpwssd zmm */
    DONTO_ISA_AVX512BF16, /* + AVX-512 BF16: bf16 vdpbf16ps zmm (the rest as avx512vnni) */
    DONTO_ISA_N
} donto_isa;

typedef struct donto_encoder_opts {
    int threads;               /* 0: all online CPUs */
    int max_len;               /* tokens per text incl. [CLS]/[SEP]; 0: the model's own limit, as
                                  sentence-transformers reads it (sentence_bert_config.json
                                  max_seq_length, else tokenizer_config.json model_max_length,
                                  else config.json max_position_embeddings); over
                                  max_position_embeddings: open fails */
    int batch_tokens;          /* token budget of one packed forward; 0: default (8192) */
    donto_precision precision; /* DONTO_PREC_FP32 (default) */
    int pooling;               /* -1: from the model dir; else donto_pooling */
    donto_device device;       /* DONTO_DEVICE_CPU (default) */
    int gpu;                   /* CUDA device ordinal (default 0); -1: every visible GPU, one
                                  engine each, each encode call split between them */
    /* Progress (NULL: none): called as each packed batch of an encode call
     * is done, with the texts and tokens it held, from the thread running
     * that batch (with several GPUs, from several threads at once). */
    void (*progress)(void *ctx, size_t texts, size_t tokens);
    void *progress_ctx;
    donto_isa isa;             /* CPU kernel set: DONTO_ISA_AUTO (default) or one this CPU
                                  runs (open refuses another, naming what the CPU has) */
} donto_encoder_opts;

typedef struct donto_encoder donto_encoder;

void donto_encoder_default_opts(donto_encoder_opts *o);
int donto_encoder_open(const char *model_dir, const donto_encoder_opts *o, donto_encoder **out,
                       donto_err *err);
void donto_encoder_close(donto_encoder *enc);

/* Output dimension (hidden size). */
int donto_encoder_dim(const donto_encoder *enc);
/* The token limit per text in force ([CLS]/[SEP] included; longer texts are
 * truncated) and where it came from: "sentence_bert_config.json
 * max_seq_length", "tokenizer_config.json model_max_length", "config.json
 * max_position_embeddings" (possibly with a note why) or "max_len option". */
int donto_encoder_max_len(const donto_encoder *enc);
const char *donto_encoder_max_len_from(const donto_encoder *enc);
/* 1 when the tokenizer lowercases (tokenizer_config.json do_lower_case, default
 * true); a cased model's config is honoured. */
int donto_encoder_lowercase(const donto_encoder *enc);
const donto_tokenizer *donto_encoder_tokenizer(const donto_encoder *enc);
const donto_bert_config *donto_encoder_config(const donto_encoder *enc);

/* Optional per-call figures. */
typedef struct donto_encode_stats {
    size_t tokens;    /* ids fed to the model, [CLS]/[SEP] included */
    size_t truncated; /* texts cut at max_len */
} donto_encode_stats;

/* Encode n texts (texts[i] of lens[i] bytes; lens may be NULL for
 * NUL-terminated strings) into out[n * dim], row i = text i, each row
 * L2-normalised. Returns 0, or -1 with err set (nothing partial is promised). */
int donto_encoder_encode(donto_encoder *enc, const char *const *texts, const size_t *lens, size_t n,
                         float *out, donto_encode_stats *stats, donto_err *err);

/* Encode already tokenized sequences (ids[i] of ntok[i] ids, each with its
 * own [CLS]/[SEP]). Same output contract as donto_encoder_encode. */
int donto_encoder_encode_ids(donto_encoder *enc, const int32_t *const *ids, const int *ntok,
                             size_t n, float *out, donto_err *err);

/* The names, indexed by value and NULL-terminated (option tables take them
 * as choices): donto_precision_names[DONTO_PREC_INT16] is "int16". */
extern const char *const donto_precision_names[];
extern const char *const donto_device_names[];
/* "fp32" / "int16" / "bf16" / "int8" -> precision; -1 when unknown. */
int donto_precision_parse(const char *s);
const char *donto_precision_name(donto_precision p);
/* The precision donto-embed's embed and work run when --precision is not
 * given (donto_encoder_default_opts keeps DONTO_PREC_FP32, the reference):
 * DONTO_PREC_BF16 on CUDA; on the CPU DONTO_PREC_INT16 where the kernel
 * set isa (DONTO_ISA_AUTO: the best this CPU runs) has a SIMD int16 GEMM,
 * every set from DONTO_ISA_AVX2 up, else DONTO_PREC_FP32. int16 passes the
 * 0.999 cosine gate to fp32 on every parity text of both test models
 * (min 0.99997) and ran 1.1-1.9x fp32 on every SIMD set measured;
 * portable's int16 GEMM is plain C, 0.07x fp32 (docs/engine.md
 * "Precisions", bench/precision-default). */
donto_precision donto_precision_default(donto_device device, donto_isa isa);
/* "cpu" / "cuda" -> device; -1 when unknown. */
int donto_device_parse(const char *s);
const char *donto_device_name(donto_device d);
/* 1 when this library was built with the CUDA engine (-DDONTO_CUDA=ON). */
int donto_cuda_built(void);

/* Kernel sets: names indexed by value, NULL-terminated ("auto" first), for
 * option tables; parse gives -1 for an unknown name. */
extern const char *const donto_isa_names[];
int donto_isa_parse(const char *s);
const char *donto_isa_name(donto_isa s);
/* 1 when this CPU runs set s (DONTO_ISA_AUTO and PORTABLE: always). */
int donto_isa_supported(donto_isa s);
/* The best set this CPU runs (what DONTO_ISA_AUTO picks). */
donto_isa donto_isa_best(void);
/* 0 when this CPU runs s; else -1 with err naming what s needs and the CPU
 * lacks, and what the CPU has: "kernel set avx512 needs AVX512F, AVX512BW,
 * ... which this CPU lacks (it has: avx avx2 fma; sets: portable avx2)". */
int donto_isa_check(donto_isa s, donto_err *err);
/* What the CPU has, one line for logs: "avx avx2 fma (sets: portable avx2)". */
void donto_cpu_describe(char *buf, size_t n);

/* Steer OpenBLAS to this CPU's kernels (src/model/blas_steer.c;
 * docs/engine.md "OpenBLAS"). Call first thing in main, before any thread:
 * when OpenBLAS picked kernels for an older CPU than this one and
 * OPENBLAS_CORETYPE is unset, it re-executes the program (/proc/self/exe,
 * same argv) with OPENBLAS_CORETYPE set for this CPU; the re-executed
 * process checks the new kernels (an sgemm in a forked child against a plain
 * reference) and undoes the steering, with one more exec, if they fail.
 * DONTO_BLAS_STEER=off disables it; DONTO_BLAS_STEER=<core> steers to that
 * OpenBLAS core even over the user's OPENBLAS_CORETYPE. Returns when no exec
 * is needed (or exec failed). */
void donto_blas_steer(char **argv);
/* What donto_blas_steer did: "none", "Prescott->SkylakeX", "undone: OpenBLAS
 * core SkylakeX failed its check (...); running Zen", "off (...)". */
const char *donto_blas_steer_state(void);

/* Which kernels an open encoder runs, for logs and --stats. */
typedef struct donto_encoder_kernels {
    char isa[16];        /* the kernel set in use: "avx2" ("" on CUDA) */
    char gemm[128];      /* the dense layers: "openblas", "int16 vpmaddwd ymm", "cuda" */
    char blas_core[48];  /* OpenBLAS's kernels (openblas_get_corename(): "Zen", "Prescott") */
    int blas_weaker;     /* 1: OpenBLAS's kernels are for an older CPU than this one */
    char blas_steer[256]; /* donto_blas_steer_state() */
    char summary[640];   /* one line: "isa avx2, fp32 GEMM openblas (core Zen)" */
} donto_encoder_kernels;
void donto_encoder_kernels_get(const donto_encoder *enc, donto_encoder_kernels *out);

/* Device figures of an open encoder (zeros on the CPU). */
typedef struct donto_encoder_devinfo {
    char name[256];         /* e.g. "NVIDIA H200" */
    int sm;                 /* compute capability x 10 + y */
    size_t mem_total;       /* bytes on the card */
    size_t mem_engine;      /* bytes this engine allocated: weights + activations + workspace */
    size_t mem_used_peak;   /* card-wide used bytes (cudaMemGetInfo) after the largest batch */
    int slots;              /* pipeline depth (pinned buffer sets) */
    int batch_tokens;       /* token budget of one packed forward */
    int engines;            /* GPUs in use (memory figures are summed over them) */
} donto_encoder_devinfo;
int donto_encoder_devinfo_get(const donto_encoder *enc, donto_encoder_devinfo *out);

#ifdef __cplusplus
}
#endif
#endif
