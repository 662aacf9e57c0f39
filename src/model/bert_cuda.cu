/*
 * The CUDA engine (bert_cuda.h): weights uploaded once, one activation
 * arena for the token budget, nslots pinned buffer sets, three streams.
 *
 * Per batch in slot k (submit):
 *   up stream       ids, cu offsets  host(pinned) -> device      record up[k]
 *   compute stream  wait up[k]; the forward pass                  record comp[k]
 *   down stream     wait comp[k]; vectors device -> host(pinned)  record done[k]
 * The host only re-packs slot k after waiting on done[k] (the ring in
 * batch.c guarantees it), so batch k+1's packing and upload run while
 * batch k computes, and batch k's download overlaps batch k+1's compute.
 * The activation arena is only touched by the compute stream, which runs
 * batches one after the other, so one arena serves every slot.
 *
 * GEMMs: cuBLASLt, row-major Y[M,N] = X[M,K] W^T with W in PyTorch's
 * [N,K] layout, i.e. the column-major "TN" product Y^T = W X^T. bf16 mode:
 * bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F) and fp32 output;
 * fp32 mode: everything fp32 with CUBLAS_COMPUTE_32F, which never uses
 * TF32, for parity checks against the CPU. Bias, GELU, residual and
 * LayerNorm are fused in bert_kernels.cu (cuBLASLt's GELU epilogue is the
 * tanh approximation; the model wants exact erf).
 *
 * CUDA graphs are not used: every batch has its own (tokens, sequences)
 * shape, so a graph would have to be captured per shape; with ~60 launches
 * per batch of thousands of tokens, launch time is small next to the
 * GEMMs. Every CUDA / cuBLASLt call is checked and reported through donto_err.
 */
#include "bert_cuda.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "bert_kernels.cuh"

#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess)                                                                          \
            return donto_seterr(err, "cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, \
                                __LINE__);                                                              \
    } while (0)
#define CKL(call)                                                                                        \
    do {                                                                                                 \
        cublasStatus_t s_ = (call);                                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            return donto_seterr(err, "cublasLt: %s: %s (%s:%d)", #call, cublasLtGetStatusString(s_),     \
                                __FILE__, __LINE__);                                                     \
    } while (0)

#define WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct {
    void *qkv_w, *ao_w, *fi_w, *fo_w; /* GEMM operands: bf16 or fp32, [N,K] */
    const float *qkv_b, *ao_b, *ln1_g, *ln1_b, *fi_b, *fo_b, *ln2_g, *ln2_b;
} dlayer;

struct bert_cuda {
    int dev, bf16, pooling, nslots;
    donto_bert_config cfg;
    cublasLtHandle_t lt;
    cudaStream_t up, comp, down;
    cudaEvent_t ev_up[BP_MAX_SLOTS], ev_comp[BP_MAX_SLOTS], ev_done[BP_MAX_SLOTS];
    int ev_made;
    char *wmem; /* weights */
    const float *word, *pos, *type0, *eln_g, *eln_b;
    dlayer *L;
    gp_bufplan plan;
    char *arena;
    char *h_slot[BP_MAX_SLOTS], *d_slot[BP_MAX_SLOTS];
    int busy[BP_MAX_SLOTS];
    size_t mem_engine, mem_used;
    char name[256];
    int sm;
    size_t mem_total;
};

/* ---------- weights ---------- */

static size_t al(size_t n) { return (n + GP_ALIGN - 1) & ~(size_t)(GP_ALIGN - 1); }

/* Host staging image of the device weights, laid out as on the device. */
typedef struct {
    char *buf;
    size_t at, cap;
} image;

static size_t put(image *im, const float *src, size_t n, int as_bf16) {
    size_t off = im->at, bytes = n * (as_bf16 ? 2 : 4);
    if (im->buf) {
        if (as_bf16) {
            uint16_t *d = (uint16_t *)(im->buf + off);
            for (size_t i = 0; i < n; i++) d[i] = gp_f32_to_bf16(src[i]);
        } else {
            memcpy(im->buf + off, src, bytes);
        }
    }
    im->at += al(bytes);
    return off;
}

/* Two passes: size (buf NULL), then fill; offsets are the same both times. */
static void lay_out(const donto_bert_weights *w, int bf16, image *im, size_t *off) {
    const donto_bert_config *c = &w->cfg;
    const size_t H = (size_t)c->hidden, FF = (size_t)c->intermediate;
    int k = 0;
    im->at = 0;
    off[k++] = put(im, w->word_emb, (size_t)c->vocab_size * H, 0);
    off[k++] = put(im, w->pos_emb, (size_t)c->max_position * H, 0);
    off[k++] = put(im, w->type_emb, H, 0);
    off[k++] = put(im, w->emb_ln_g, H, 0);
    off[k++] = put(im, w->emb_ln_b, H, 0);
    for (int l = 0; l < c->layers; l++) {
        const donto_bert_layer *L = &w->layer[l];
        off[k++] = put(im, L->qkv_w, 3 * H * H, bf16);
        off[k++] = put(im, L->attn_out_w, H * H, bf16);
        off[k++] = put(im, L->ffn_in_w, FF * H, bf16);
        off[k++] = put(im, L->ffn_out_w, H * FF, bf16);
        off[k++] = put(im, L->qkv_b, 3 * H, 0);
        off[k++] = put(im, L->attn_out_b, H, 0);
        off[k++] = put(im, L->ln1_g, H, 0);
        off[k++] = put(im, L->ln1_b, H, 0);
        off[k++] = put(im, L->ffn_in_b, FF, 0);
        off[k++] = put(im, L->ffn_out_b, H, 0);
        off[k++] = put(im, L->ln2_g, H, 0);
        off[k++] = put(im, L->ln2_b, H, 0);
    }
}

static int upload_weights(bert_cuda *g, const donto_bert_weights *w, donto_err *err) {
    const int nl = w->cfg.layers, nofs = 5 + 12 * nl;
    size_t *off = (size_t *)malloc((size_t)nofs * sizeof *off);
    image im = {NULL, 0, 0};
    if (!off) return donto_seterr(err, "out of memory");
    lay_out(w, g->bf16, &im, off);
    const size_t bytes = im.at;
    im.buf = (char *)malloc(bytes);
    g->L = (dlayer *)calloc((size_t)nl, sizeof *g->L);
    if (!im.buf || !g->L) {
        free(off), free(im.buf);
        return donto_seterr(err, "out of memory staging %zu bytes of weights", bytes);
    }
    lay_out(w, g->bf16, &im, off);
    cudaError_t e = cudaMalloc((void **)&g->wmem, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(g->wmem, im.buf, bytes, cudaMemcpyHostToDevice);
    free(im.buf);
    if (e != cudaSuccess) {
        free(off);
        return donto_seterr(err, "cuda: uploading %zu bytes of weights: %s", bytes, cudaGetErrorString(e));
    }
    g->mem_engine += bytes;
    char *b = g->wmem;
    int k = 0;
    g->word = (const float *)(b + off[k++]);
    g->pos = (const float *)(b + off[k++]);
    g->type0 = (const float *)(b + off[k++]);
    g->eln_g = (const float *)(b + off[k++]);
    g->eln_b = (const float *)(b + off[k++]);
    for (int l = 0; l < nl; l++) {
        dlayer *d = &g->L[l];
        d->qkv_w = b + off[k++];
        d->ao_w = b + off[k++];
        d->fi_w = b + off[k++];
        d->fo_w = b + off[k++];
        d->qkv_b = (const float *)(b + off[k++]);
        d->ao_b = (const float *)(b + off[k++]);
        d->ln1_g = (const float *)(b + off[k++]);
        d->ln1_b = (const float *)(b + off[k++]);
        d->fi_b = (const float *)(b + off[k++]);
        d->fo_b = (const float *)(b + off[k++]);
        d->ln2_g = (const float *)(b + off[k++]);
        d->ln2_b = (const float *)(b + off[k++]);
    }
    free(off);
    return 0;
}

/* ---------- GEMM ---------- */

/* Y[M,N] (fp32, row-major) = X[M,K] W[N,K]^T, on the compute stream. */
static int gemm(bert_cuda *g, const void *W, const void *X, float *Y, int M, int N, int K, donto_err *err) {
    const cudaDataType_t ab = g->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0, rc = -1;
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    const size_t ws = WORKSPACE_BYTES;
    void *wsp = g->arena + g->plan.ws.off;
    cublasStatus_t s;
#define TRY(call)                                                                                            \
    do {                                                                                                     \
        s = (call);                                                                                          \
        if (s != CUBLAS_STATUS_SUCCESS) {                                                                    \
            donto_seterr(err, "cublasLt: %s: %s (GEMM %dx%dx%d)", #call, cublasLtGetStatusString(s), M, N, K); \
            goto out;                                                                                        \
        }                                                                                                    \
    } while (0)
    TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    TRY(cublasLtMatrixLayoutCreate(&la, ab, K, N, K));       /* W as column-major K x N */
    TRY(cublasLtMatrixLayoutCreate(&lb, ab, K, M, K));       /* X as column-major K x M */
    TRY(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, N, M, N)); /* Y as column-major N x M */
    TRY(cublasLtMatmulPreferenceCreate(&pref));
    TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
    if (!found) {
        donto_seterr(err, "cublasLt: no algorithm for the %s GEMM %dx%dx%d", g->bf16 ? "bf16" : "fp32", M, N, K);
        goto out;
    }
    TRY(cublasLtMatmul(g->lt, op, &one, W, la, X, lb, &zero, Y, lc, Y, lc, &heur.algo, wsp, ws, g->comp));
    rc = 0;
out:
#undef TRY
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}

/* ---------- forward ---------- */

template <typename In>
static int forward(bert_cuda *g, int slot, int nseq, int T, int maxlen, donto_err *err) {
    const donto_bert_config *c = &g->cfg;
    const int H = c->hidden, FF = c->intermediate, NH = c->heads;
    const gp_bufplan *p = &g->plan;
    char *A = g->arena, *S = g->d_slot[slot];
    const int32_t *ids = (const int32_t *)(S + p->ids.off), *cu = (const int32_t *)(S + p->cu.off);
    float *out = (float *)(S + p->out.off);
    float *x = (float *)(A + p->x.off), *xc = (float *)(A + p->xc.off), *y = (float *)(A + p->y.off);
    In *xin = (In *)(A + p->xin.off), *ctx = (In *)(A + p->ctx.off), *fin = (In *)(A + p->fin.off);
    cudaStream_t st = g->comp;
    CK(bk::embed_ln<In>(ids, cu, nseq, T, g->word, g->pos, g->type0, g->eln_g, g->eln_b, c->ln_eps, H, x, xin, st));
    float *xr = x;
    for (int l = 0; l < c->layers; l++) {
        const dlayer *L = &g->L[l];
        const int last_cls = l == c->layers - 1 && g->pooling == DONTO_POOL_CLS;
        if (gemm(g, L->qkv_w, xin, y, T, 3 * H, H, err)) return -1;
        CK(bk::attention<In>(y, L->qkv_b, cu, nseq, maxlen, H, NH, last_cls, ctx, st));
        int M = T;
        if (last_cls) {
            /* Only the CLS rows matter from here on (pooling reads nothing else). */
            CK(bk::gather_rows(x, cu, nseq, H, xc, st));
            xr = xc;
            M = nseq;
        }
        if (gemm(g, L->ao_w, ctx, y, M, H, H, err)) return -1;
        CK(bk::add_ln<In>(y, L->ao_b, xr, L->ln1_g, L->ln1_b, c->ln_eps, H, M, xin, st));
        if (gemm(g, L->fi_w, xin, y, M, FF, H, err)) return -1;
        CK(bk::bias_gelu<In>(y, L->fi_b, M, FF, fin, st));
        if (gemm(g, L->fo_w, fin, y, M, H, FF, err)) return -1;
        CK(bk::add_ln<In>(y, L->fo_b, xr, L->ln2_g, L->ln2_b, c->ln_eps, H, M, xin, st));
    }
    CK(bk::pool_l2(xr, cu, nseq, H, g->pooling == DONTO_POOL_CLS, out, st));
    return 0;
}

/* ---------- engine callbacks ---------- */

static int32_t *slot_ids(void *ctx, int slot) {
    bert_cuda *g = (bert_cuda *)ctx;
    return (int32_t *)(g->h_slot[slot] + g->plan.ids.off);
}

static int32_t *slot_cu(void *ctx, int slot) {
    bert_cuda *g = (bert_cuda *)ctx;
    return (int32_t *)(g->h_slot[slot] + g->plan.cu.off);
}

static int submit(void *ctx, int slot, int nseq, int T, int maxlen, donto_err *err) {
    bert_cuda *g = (bert_cuda *)ctx;
    const gp_bufplan *p = &g->plan;
    if (slot < 0 || slot >= g->nslots || g->busy[slot])
        return donto_seterr(err, "cuda engine: slot %d is not free", slot);
    if (nseq < 1 || nseq > p->max_seqs || T < nseq || T > p->max_tokens)
        return donto_seterr(err, "cuda engine: batch of %d sequences / %d tokens outside the plan (%d / %d)", nseq, T,
                            p->max_seqs, p->max_tokens);
    CK(cudaSetDevice(g->dev));
    char *h = g->h_slot[slot], *d = g->d_slot[slot];
    CK(cudaMemcpyAsync(d + p->ids.off, h + p->ids.off, (size_t)T * 4, cudaMemcpyHostToDevice, g->up));
    CK(cudaMemcpyAsync(d + p->cu.off, h + p->cu.off, ((size_t)nseq + 1) * 4, cudaMemcpyHostToDevice, g->up));
    CK(cudaEventRecord(g->ev_up[slot], g->up));
    CK(cudaStreamWaitEvent(g->comp, g->ev_up[slot], 0));
    if (g->bf16 ? forward<__nv_bfloat16>(g, slot, nseq, T, maxlen, err) : forward<float>(g, slot, nseq, T, maxlen, err))
        return -1;
    CK(cudaEventRecord(g->ev_comp[slot], g->comp));
    CK(cudaStreamWaitEvent(g->down, g->ev_comp[slot], 0));
    CK(cudaMemcpyAsync(h + p->out.off, d + p->out.off, (size_t)nseq * g->cfg.hidden * 4, cudaMemcpyDeviceToHost,
                       g->down));
    CK(cudaEventRecord(g->ev_done[slot], g->down));
    g->busy[slot] = 1;
    return 0;
}

static int wait_slot(void *ctx, int slot, const float **vec, donto_err *err) {
    bert_cuda *g = (bert_cuda *)ctx;
    if (slot < 0 || slot >= g->nslots || !g->busy[slot])
        return donto_seterr(err, "cuda engine: slot %d has no batch in flight", slot);
    g->busy[slot] = 0;
    CK(cudaSetDevice(g->dev));
    /* A failed kernel or copy of this batch (or any earlier one: CUDA errors
     * are sticky) surfaces here. */
    CK(cudaEventSynchronize(g->ev_done[slot]));
    *vec = (const float *)(g->h_slot[slot] + g->plan.out.off);
    return 0;
}

static int engine_info(const void *ctx, donto_encoder_devinfo *out) { return bert_cuda_info((const bert_cuda *)ctx, out); }

static void engine_close(void *ctx) { bert_cuda_close((bert_cuda *)ctx); }

void bert_cuda_engine(bert_cuda *g, bp_engine *e) {
    memset(e, 0, sizeof *e);
    e->ctx = g;
    e->nslots = g->nslots;
    e->max_tokens = g->plan.max_tokens;
    e->max_seqs = g->plan.max_seqs;
    e->dim = g->cfg.hidden;
    e->async = 1;
    e->slot_ids = slot_ids;
    e->slot_cu = slot_cu;
    e->submit = submit;
    e->wait = wait_slot;
    e->info = engine_info;
    e->close = engine_close;
}

/* ---------- open / close ---------- */

void bert_cuda_close(bert_cuda *g) {
    if (!g) return;
    cudaSetDevice(g->dev);
    if (g->comp) cudaStreamSynchronize(g->comp);
    if (g->down) cudaStreamSynchronize(g->down);
    if (g->up) cudaStreamSynchronize(g->up);
    for (int i = 0; i < g->nslots; i++) {
        if (g->h_slot[i]) cudaFreeHost(g->h_slot[i]);
        if (g->d_slot[i]) cudaFree(g->d_slot[i]);
    }
    for (int i = 0; i < g->ev_made; i++) {
        cudaEventDestroy(g->ev_up[i]);
        cudaEventDestroy(g->ev_comp[i]);
        cudaEventDestroy(g->ev_done[i]);
    }
    if (g->arena) cudaFree(g->arena);
    if (g->wmem) cudaFree(g->wmem);
    if (g->up) cudaStreamDestroy(g->up);
    if (g->comp) cudaStreamDestroy(g->comp);
    if (g->down) cudaStreamDestroy(g->down);
    if (g->lt) cublasLtDestroy(g->lt);
    free(g->L);
    free(g);
}

static int open_in(bert_cuda *g, const donto_bert_weights *w, const bert_cuda_opts *o, donto_err *err) {
    const donto_bert_config *c = &w->cfg;
    if (!bk::attention_supported(c->hidden / c->heads))
        return donto_seterr(err, "cuda engine: head size %d is not supported (32, 64 or 128)", c->hidden / c->heads);
    if (o->nslots < 2 || o->nslots > BP_MAX_SLOTS)
        return donto_seterr(err, "cuda engine: %d slots (allowed 2..%d)", o->nslots, BP_MAX_SLOTS);
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (o->gpu < 0 || o->gpu >= ndev)
        return donto_seterr(err, "cuda engine: GPU %d does not exist (%d device%s)", o->gpu, ndev, ndev == 1 ? "" : "s");
    CK(cudaSetDevice(o->gpu));
    /* Waiting on a batch should sleep, not spin: the tokeniser threads need
     * the cores. A hint only: where the context is already active and the
     * flag cannot change (older drivers), waits spin and nothing else differs,
     * so a refusal is cleared, not reported. */
    if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess) (void)cudaGetLastError();
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, o->gpu));
    snprintf(g->name, sizeof g->name, "%s", prop.name);
    g->sm = prop.major * 10 + prop.minor;
    g->mem_total = prop.totalGlobalMem;
    if (g->bf16 && prop.major < 8)
        return donto_seterr(err, "cuda engine: %s (sm_%d) has no bf16 tensor cores; use --precision fp32", g->name, g->sm);
    CKL(cublasLtCreate(&g->lt));
    CK(cudaStreamCreateWithFlags(&g->up, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g->comp, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g->down, cudaStreamNonBlocking));
    for (; g->ev_made < g->nslots; g->ev_made++) {
        int i = g->ev_made;
        CK(cudaEventCreateWithFlags(&g->ev_up[i], cudaEventDisableTiming));
        if (cudaEventCreateWithFlags(&g->ev_comp[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&g->ev_done[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaEventDestroy(g->ev_up[i]);
            return donto_seterr(err, "cuda: cannot create events");
        }
    }
    if (upload_weights(g, w, err)) return -1;
    if (gp_bufplan_make(c, o->max_tokens, o->max_seqs, g->bf16 ? 2 : 4, WORKSPACE_BYTES, &g->plan, err)) return -1;
    cudaError_t e = cudaMalloc((void **)&g->arena, g->plan.arena_bytes);
    if (e != cudaSuccess)
        return donto_seterr(err, "cuda: %zu bytes of activations for a %d-token batch: %s (lower --batch-tokens)",
                            g->plan.arena_bytes, o->max_tokens, cudaGetErrorString(e));
    g->mem_engine += g->plan.arena_bytes;
    for (int i = 0; i < g->nslots; i++) {
        CK(cudaHostAlloc((void **)&g->h_slot[i], g->plan.slot_bytes, cudaHostAllocDefault));
        CK(cudaMalloc((void **)&g->d_slot[i], g->plan.slot_bytes));
        g->mem_engine += g->plan.slot_bytes;
    }
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    g->mem_used = tot - fr;
    return 0;
}

int bert_cuda_open(const donto_bert_weights *w, const bert_cuda_opts *o, bert_cuda **out, donto_err *err) {
    *out = NULL;
    bert_cuda *g = (bert_cuda *)calloc(1, sizeof *g);
    if (!g) return donto_seterr(err, "out of memory");
    g->dev = o->gpu, g->bf16 = o->bf16, g->pooling = o->pooling, g->nslots = o->nslots, g->cfg = w->cfg;
    if (g->nslots > BP_MAX_SLOTS) g->nslots = BP_MAX_SLOTS;
    if (open_in(g, w, o, err)) {
        donto_preerr(err, "--device cuda (GPU %d, %s)", o->gpu, o->bf16 ? "bf16" : "fp32");
        bert_cuda_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

int bert_cuda_device_count(int *n, donto_err *err) {
    *n = 0;
    CK(cudaGetDeviceCount(n));
    return 0;
}

int bert_cuda_info(const bert_cuda *g, donto_encoder_devinfo *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", g->name);
    out->sm = g->sm;
    out->mem_total = g->mem_total;
    out->mem_engine = g->mem_engine;
    out->slots = g->nslots;
    out->batch_tokens = g->plan.max_tokens;
    out->engines = 1;
    size_t fr = 0, tot = 0;
    out->mem_used_peak = g->mem_used;
    if (cudaSetDevice(g->dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess && tot - fr > out->mem_used_peak)
        out->mem_used_peak = tot - fr;
    return 0;
}
