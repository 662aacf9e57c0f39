/* The encoder's one batcher (batch.h) and the CUDA engine's memory plan
 * (gpu_plan.h), tested on the CPU: the token-budget batcher and packing, the
 * buffer plan, the slot ring, the CPU engine's contract, and the stream
 * driver run against a fake engine that computes with the CPU forward pass only
 * when a slot is waited on (so a slot overwritten while "in flight" would
 * give wrong vectors), and that records every call to check the ordering. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "donto/encoder.h"
#include "donto/model.h"
#include "batch.h"
#include "bert_cpu.h"
#include "encoder_int.h"
#include "gpu_plan.h"
#include "tinybert.h"

static unsigned rnd_state = 12345;
static int rnd(int n) {
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (int)((rnd_state >> 8) % (unsigned)n);
}

/* ---------- batcher + packing ---------- */

static void check_plan(const int *ntok, size_t n, int budget, int max_seqs) {
    size_t *order = malloc(n * sizeof *order);
    bp_batch *b = malloc(n * sizeof *b);
    size_t nb = 0;
    donto_err err = {0};
    CHECK(bp_sort_by_length(ntok, n, order) == 0, "sort");
    for (size_t i = 1; i < n; i++) {
        int a = ntok[order[i - 1]], c = ntok[order[i]];
        CHECK(a < c || (a == c && order[i - 1] < order[i]), "order not (len, idx) at %zu", i);
    }
    CHECK(bp_plan_batches(ntok, order, n, budget, max_seqs, b, &nb, &err) == 0, "plan: %s", err.msg);
    size_t next = 0, tokens = 0;
    for (size_t k = 0; k < nb; k++) {
        CHECK(b[k].first == next, "batch %zu starts at %zu, expected %zu", k, b[k].first, next);
        CHECK(b[k].nseq >= 1 && b[k].nseq <= max_seqs, "batch %zu has %d sequences", k, b[k].nseq);
        int sum = 0, mx = 0;
        for (int s = 0; s < b[k].nseq; s++) {
            int l = ntok[order[b[k].first + (size_t)s]];
            sum += l;
            mx = l > mx ? l : mx;
        }
        CHECK(sum == b[k].tokens && sum <= budget, "batch %zu: tokens %d (sum %d, budget %d)", k, b[k].tokens, sum, budget);
        CHECK(mx == b[k].maxlen, "batch %zu maxlen %d != %d", k, b[k].maxlen, mx);
        /* Greedy: a batch stops only when the next sequence would not fit. */
        size_t after = b[k].first + (size_t)b[k].nseq;
        if (after < n)
            CHECK(b[k].nseq == max_seqs || b[k].tokens + ntok[order[after]] > budget,
                  "batch %zu stopped early (%d tokens, next %d, budget %d)", k, b[k].tokens, ntok[order[after]], budget);
        next = after;
        tokens += (size_t)sum;
    }
    CHECK(next == n, "batches cover %zu of %zu sequences", next, n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += (size_t)ntok[i];
    CHECK(tokens == total, "packed tokens %zu != sum of lengths %zu (no padding)", tokens, total);

    /* Packing: cu offsets and the ids laid end to end. */
    int32_t **ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        ids[i] = malloc((size_t)ntok[i] * sizeof **ids);
        for (int t = 0; t < ntok[i]; t++) ids[i][t] = (int32_t)(i * 1000 + (size_t)t);
    }
    int32_t *packed = malloc((size_t)budget * sizeof *packed), *cu = malloc(((size_t)max_seqs + 1) * sizeof *cu);
    for (size_t k = 0; k < nb; k++) {
        bp_pack((const int32_t *const *)ids, ntok, order, &b[k], packed, cu);
        CHECK(cu[0] == 0 && cu[b[k].nseq] == b[k].tokens, "batch %zu: cu ends %d..%d", k, cu[0], cu[b[k].nseq]);
        int bad = 0;
        for (int s = 0; s < b[k].nseq; s++) {
            size_t i = order[b[k].first + (size_t)s];
            if (cu[s + 1] - cu[s] != ntok[i]) bad++;
            for (int t = 0; t < ntok[i] && !bad; t++) bad += packed[cu[s] + t] != ids[i][t];
        }
        CHECK(!bad, "batch %zu: packed ids / offsets wrong", k);
    }
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids), free(packed), free(cu), free(order), free(b);
}

static void test_batcher(void) {
    int lens1[] = {5, 3, 9, 3, 1, 7, 2, 2, 8};
    check_plan(lens1, 9, 10, 100);
    check_plan(lens1, 9, 10, 2);
    check_plan(lens1, 9, 9, 1);
    /* A skewed corpus: many short claims and a few long chunks. */
    int n = 3000, *l = malloc((size_t)n * sizeof *l);
    for (int i = 0; i < n; i++) l[i] = i % 50 == 0 ? 200 + rnd(313) : 4 + rnd(30);
    check_plan(l, (size_t)n, 4096, 4096);
    check_plan(l, (size_t)n, 512, 64);
    /* The budget counts tokens, not max length x count: 1000 short ones
     * next to one of 512 still fill batches by their own sizes. */
    size_t *order = malloc((size_t)n * sizeof *order);
    bp_batch *b = malloc((size_t)n * sizeof *b);
    size_t nb;
    donto_err err = {0};
    for (int i = 0; i < 1001; i++) l[i] = i == 500 ? 512 : 10;
    bp_sort_by_length(l, 1001, order);
    CHECK(bp_plan_batches(l, order, 1001, 2048, 2048, b, &nb, &err) == 0, "plan");
    CHECK(nb == 6, "10000 + 512 tokens in 2048-token batches: %zu batches (padded would need 251)", nb);
    /* Refusals. */
    int big[] = {3, 600, 4};
    bp_sort_by_length(big, 3, order);
    CHECK(bp_plan_batches(big, order, 3, 512, 16, b, &nb, &err) == -1, "over-budget sequence accepted");
    CHECK_STR_CONTAINS(err.msg, "600 tokens");
    int zero[] = {3, 0};
    bp_sort_by_length(zero, 2, order);
    err.msg[0] = 0;
    CHECK(bp_plan_batches(zero, order, 2, 512, 16, b, &nb, &err) == -1, "empty sequence accepted");
    CHECK_STR_CONTAINS(err.msg, "empty");
    CHECK(bp_plan_batches(lens1, order, 0, 512, 16, b, &nb, &err) == 0 && nb == 0, "no sequences, no batches");
    free(order), free(b), free(l);
}

/* ---------- buffer plan ---------- */

static void test_bufplan(void) {
    donto_bert_config c = {.vocab_size = 30522, .hidden = 384, .layers = 6, .heads = 12, .intermediate = 1536,
                           .max_position = 512};
    gp_bufplan p16, p32;
    donto_err err = {0};
    CHECK(gp_bufplan_make(&c, 16384, 16384, 2, 32 << 20, &p16, &err) == 0, "plan bf16: %s", err.msg);
    CHECK(gp_bufplan_make(&c, 16384, 16384, 4, 32 << 20, &p32, &err) == 0, "plan fp32: %s", err.msg);
    const gp_region *r[] = {&p16.x, &p16.xc, &p16.xin, &p16.ctx, &p16.y, &p16.fin, &p16.ws};
    const size_t need[] = {16384u * 384 * 4, 16384u * 384 * 4, 16384u * 384 * 2, 16384u * 384 * 2,
                           16384u * 1536 * 4, 16384u * 1536 * 2, 32u << 20};
    for (int i = 0; i < 7; i++) {
        CHECK(r[i]->off % GP_ALIGN == 0, "region %d misaligned", i);
        CHECK(r[i]->bytes == need[i], "region %d: %zu bytes, need %zu", i, r[i]->bytes, need[i]);
        CHECK(r[i]->off + r[i]->bytes <= p16.arena_bytes, "region %d past the arena", i);
        for (int j = 0; j < i; j++)
            CHECK(r[j]->off + r[j]->bytes <= r[i]->off, "regions %d and %d overlap", j, i);
    }
    const gp_region *q[] = {&p16.ids, &p16.cu, &p16.out};
    const size_t qneed[] = {16384u * 4, 16385u * 4, 16384u * 384 * 4};
    for (int i = 0; i < 3; i++) {
        CHECK(q[i]->off % GP_ALIGN == 0 && q[i]->bytes == qneed[i], "slot region %d", i);
        CHECK(q[i]->off + q[i]->bytes <= p16.slot_bytes, "slot region %d past the slot", i);
        for (int j = 0; j < i; j++) CHECK(q[j]->off + q[j]->bytes <= q[i]->off, "slot regions %d, %d overlap", j, i);
    }
    CHECK(p32.arena_bytes > p16.arena_bytes && p32.xin.bytes == 2 * p16.xin.bytes, "fp32 operands twice the bf16 ones");
    /* QKV is wider than FF for some shapes: y takes the larger. */
    donto_bert_config wide = c;
    wide.intermediate = 256;
    gp_bufplan pw;
    gp_bufplan_make(&wide, 100, 10, 2, 0, &pw, &err);
    CHECK(pw.y.bytes == 100u * 3 * 384 * 4, "y sized by 3H when FF < 3H: %zu", pw.y.bytes);
    CHECK(gp_bufplan_make(&c, 100, 200, 2, 0, &pw, &err) == -1, "max_seqs > max_tokens accepted");
    CHECK(gp_bufplan_make(&c, 100, 10, 3, 0, &pw, &err) == -1, "operand size 3 accepted");
}

/* ---------- ring ---------- */

static void test_ring(void) {
    bp_ring r;
    donto_err err = {0};
    CHECK(bp_ring_init(&r, 0, &err) == -1 && bp_ring_init(&r, BP_MAX_SLOTS + 1, &err) == -1, "bad slot counts accepted");
    CHECK(bp_ring_init(&r, 3, &err) == 0, "init");
    CHECK(bp_ring_oldest(&r) == -1 && bp_ring_retire(&r, 0) == -1, "empty ring retires nothing");
    CHECK(bp_ring_stage(&r) == 0 && bp_ring_stage(&r) == 1 && bp_ring_stage(&r) == 2, "round robin");
    CHECK(bp_ring_stage(&r) == -1, "a full ring stages nothing");
    CHECK(bp_ring_retire(&r, 1) == -1, "retire out of order accepted");
    CHECK(bp_ring_oldest(&r) == 0 && bp_ring_retire(&r, 0) == 0, "retire the oldest");
    CHECK(bp_ring_stage(&r) == 0, "a freed slot is reused");
    CHECK(bp_ring_oldest(&r) == 1, "oldest moves on");
    /* Random walk against a model: a FIFO of slot numbers. */
    bp_ring_init(&r, 4, &err);
    int fifo[64], head = 0, tail = 0, next = 0, bad = 0;
    for (int step = 0; step < 10000; step++) {
        if (rnd(2)) {
            int s = bp_ring_stage(&r);
            if (tail - head == 4) bad += s != -1;
            else {
                bad += s != next;
                fifo[tail++ % 64] = s;
                next = (next + 1) % 4;
            }
        } else {
            int o = bp_ring_oldest(&r);
            if (tail == head) bad += o != -1;
            else {
                bad += o != fifo[head % 64];
                bad += bp_ring_retire(&r, o) != 0;
                head++;
            }
        }
        bad += r.inflight != tail - head;
    }
    CHECK(!bad, "ring disagrees with the FIFO model %d times", bad);
    CHECK(r.staged - r.retired == (uint64_t)r.inflight, "counters");
}

/* ---------- bf16 rounding ---------- */

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    CHECK(gp_f32_to_bf16(1.0f) == 0x3F80 && gp_f32_to_bf16(-2.0f) == 0xC000, "exact values");
    CHECK(gp_f32_to_bf16(-0.0f) == 0x8000, "signed zero");
    /* Halfway cases go to the even mantissa. */
    CHECK(gp_f32_to_bf16(bits_f(0x3F808000u)) == 0x3F80, "tie down to even");
    CHECK(gp_f32_to_bf16(bits_f(0x3F818000u)) == 0x3F82, "tie up to even");
    CHECK(gp_f32_to_bf16(bits_f(0x3F808001u)) == 0x3F81, "above half rounds up");
    CHECK(gp_f32_to_bf16(bits_f(0x3F807FFFu)) == 0x3F80, "below half rounds down");
    CHECK(gp_f32_to_bf16(INFINITY) == 0x7F80 && gp_f32_to_bf16(-INFINITY) == 0xFF80, "infinities");
    CHECK(gp_f32_to_bf16(bits_f(0x7F7FFFFFu)) == 0x7F80, "FLT_MAX rounds to inf");
    uint16_t nan = gp_f32_to_bf16(NAN);
    CHECK((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0, "NaN stays NaN: %04x", nan);
    CHECK(isnan(gp_bf16_to_f32(gp_f32_to_bf16(bits_f(0x7F800001u)))), "signalling NaN payload in the low bits stays NaN");
    /* Relative error at most 2^-8 (8 significant bits, round to nearest). */
    float worst = 0;
    for (int i = 0; i < 100000; i++) {
        float x = (float)ldexp(1.0 + rnd(1 << 20) / 1048576.0, rnd(60) - 30) * (rnd(2) ? 1 : -1);
        float r = fabsf(gp_bf16_to_f32(gp_f32_to_bf16(x)) - x) / fabsf(x);
        worst = r > worst ? r : worst;
    }
    CHECK(worst <= 1.0f / 256 && worst > 1.0f / 512, "relative rounding error %g", (double)worst);
}

/* ---------- stream driver on a fake engine ---------- */

enum { EV_PACK = 1, EV_SUBMIT, EV_WAIT };

typedef struct {
    const donto_bert_weights *w;
    bert_linear_ops ops;
    int pooling, nslots, max_tokens, max_seqs, dim;
    int32_t *ids[BP_MAX_SLOTS], *cu[BP_MAX_SLOTS];
    float *out[BP_MAX_SLOTS];
    int nseq[BP_MAX_SLOTS], ntok[BP_MAX_SLOTS], inflight[BP_MAX_SLOTS];
    uint64_t order_in[BP_MAX_SLOTS], submitted, waited;
    int violations, max_inflight, cur_inflight;
    int fail_submit_at, fail_wait_at; /* 1-based call numbers, 0: never */
    int submits, waits;
    void *scratch;
    size_t scratch_bytes;
} fake;

static int32_t *f_ids(void *ctx, int slot) {
    fake *f = ctx;
    if (f->inflight[slot]) f->violations++; /* packing over a batch still in flight */
    return f->ids[slot];
}
static int32_t *f_cu(void *ctx, int slot) {
    fake *f = ctx;
    if (f->inflight[slot]) f->violations++;
    return f->cu[slot];
}
static int f_submit(void *ctx, int slot, int nseq, int ntokens, int maxlen, donto_err *err) {
    fake *f = ctx;
    if (++f->submits == f->fail_submit_at) return donto_seterr(err, "fake: submit failed");
    if (f->inflight[slot] || nseq > f->max_seqs || ntokens > f->max_tokens || f->cu[slot][nseq] != ntokens)
        f->violations++;
    int mx = 0;
    for (int s = 0; s < nseq; s++) mx = f->cu[slot][s + 1] - f->cu[slot][s] > mx ? f->cu[slot][s + 1] - f->cu[slot][s] : mx;
    if (mx != maxlen) f->violations++;
    f->inflight[slot] = 1, f->nseq[slot] = nseq, f->ntok[slot] = ntokens;
    f->order_in[slot] = f->submitted++;
    if (++f->cur_inflight > f->max_inflight) f->max_inflight = f->cur_inflight;
    return 0;
}
/* The "device" computes only now, from the slot's buffers as they are. */
static int f_wait(void *ctx, int slot, const float **vec, donto_err *err) {
    fake *f = ctx;
    if (!f->inflight[slot] || f->order_in[slot] != f->waited) f->violations++; /* out of order */
    f->inflight[slot] = 0;
    f->waited++;
    f->cur_inflight--;
    if (++f->waits == f->fail_wait_at) return donto_seterr(err, "fake: device error");
    bert_cpu_forward(f->w, &f->ops, f->pooling, f->ids[slot], f->cu[slot], f->nseq[slot], f->out[slot], f->scratch,
                     f->scratch_bytes, 1);
    *vec = f->out[slot];
    return 0;
}

static void fake_init(fake *f, const donto_bert_weights *w, int pooling, int nslots, int max_tokens, int max_seqs,
                      int maxlen, bp_engine *e) {
    memset(f, 0, sizeof *f);
    f->w = w, f->pooling = pooling, f->nslots = nslots, f->max_tokens = max_tokens, f->max_seqs = max_seqs;
    f->dim = w->cfg.hidden;
    bert_fp32_ops(&f->ops, w);
    for (int i = 0; i < nslots; i++) {
        f->ids[i] = malloc((size_t)max_tokens * 4);
        f->cu[i] = malloc(((size_t)max_seqs + 1) * 4);
        f->out[i] = malloc((size_t)max_seqs * (size_t)f->dim * 4);
    }
    f->scratch_bytes = bert_cpu_scratch_bytes(&w->cfg, &f->ops, max_tokens, maxlen, 1);
    f->scratch = donto_aligned_alloc(f->scratch_bytes);
    *e = (bp_engine){.ctx = f, .nslots = nslots, .max_tokens = max_tokens, .max_seqs = max_seqs, .dim = f->dim,
                     .async = 1, .slot_ids = f_ids, .slot_cu = f_cu, .submit = f_submit, .wait = f_wait};
}

static void fake_free(fake *f) {
    for (int i = 0; i < f->nslots; i++) free(f->ids[i]), free(f->cu[i]), free(f->out[i]);
    free(f->scratch);
}

static float max_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(a[i] - b[i]) > m ? fabsf(a[i] - b[i]) : m;
    return m;
}

static void test_stream(const char *dir) {
    donto_err err = {0};
    donto_bert_weights *w;
    if (donto_bert_load(dir, &w, &err)) {
        CHECK(0, "load: %s", err.msg);
        return;
    }
    const int H = w->cfg.hidden, V = w->cfg.vocab_size, maxpos = w->cfg.max_position;
    /* Reference: the CPU encoder on the same ids. */
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 1;
    o.pooling = DONTO_POOL_MEAN;
    donto_encoder *enc;
    CHECK(donto_encoder_open(dir, &o, &enc, &err) == 0, "open: %s", err.msg);
    const size_t n = 700;
    int *ntok = malloc(n * sizeof *ntok);
    int32_t **ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        ntok[i] = i % 97 == 0 ? maxpos : 2 + rnd(20);
        ids[i] = malloc((size_t)ntok[i] * sizeof **ids);
        ids[i][0] = 2;
        for (int t = 1; t < ntok[i] - 1; t++) ids[i][t] = 5 + rnd(V - 5);
        ids[i][ntok[i] - 1] = 3;
    }
    float *ref = malloc(n * (size_t)H * 4), *got = malloc(n * (size_t)H * 4);
    CHECK(donto_encoder_encode_ids(enc, (const int32_t *const *)ids, ntok, n, ref, &err) == 0, "ref: %s", err.msg);

    for (int nslots = 1; nslots <= 4; nslots++) {
        fake f;
        bp_engine e;
        fake_init(&f, w, DONTO_POOL_MEAN, nslots, 300, 40, maxpos, &e);
        bp_stream st;
        CHECK(bp_stream_init(&st, &e, &err) == 0, "stream init");
        memset(got, 0, n * (size_t)H * 4);
        /* Three feeds of uneven size (chunks), drained once at the end:
         * batches of one chunk stay in flight while the next is fed. */
        size_t cuts[] = {0, 123, 450, n};
        int rc = 0;
        for (int c = 0; c < 3; c++)
            rc |= bp_stream_feed(&st, (const int32_t *const *)ids + cuts[c], ntok + cuts[c], cuts[c + 1] - cuts[c],
                                 got + cuts[c] * (size_t)H, &err);
        /* Feeds return with the pipeline full: the caller's next round of
         * tokenising overlaps the device. */
        CHECK(st.ring.inflight == nslots, "%d of %d slots in flight after the feeds", st.ring.inflight, nslots);
        rc |= bp_stream_drain(&st, &err);
        CHECK(rc == 0, "feed/drain: %s", err.msg);
        CHECK(f.violations == 0, "%d ordering violations with %d slots", f.violations, nslots);
        CHECK(f.max_inflight == nslots, "at most %d in flight, reached %d (overlap)", nslots, f.max_inflight);
        CHECK(st.ring.inflight == 0 && f.submitted == f.waited && f.submitted == st.batches_run, "all retired");
        float d = max_diff(ref, got, n * (size_t)H);
        CHECK(d < 1e-5f, "%d slots: vectors differ from the CPU encoder by %g", nslots, (double)d);
        size_t total = 0;
        for (size_t i = 0; i < n; i++) total += (size_t)ntok[i];
        CHECK(st.tokens_run == total, "tokens run %llu != %zu", (unsigned long long)st.tokens_run, total);

        /* A failing submit: error out, nothing left in flight, next feed works. */
        f.fail_submit_at = f.submits + 3;
        err.msg[0] = 0;
        CHECK(bp_stream_feed(&st, (const int32_t *const *)ids, ntok, n, got, &err) == -1, "submit failure surfaces");
        CHECK_STR_CONTAINS(err.msg, "submit failed");
        CHECK(st.ring.inflight == 0 && f.cur_inflight == 0, "after a failed submit: %d in flight", st.ring.inflight);
        f.fail_wait_at = f.waits + 2;
        err.msg[0] = 0;
        rc = bp_stream_feed(&st, (const int32_t *const *)ids, ntok, n, got, &err);
        if (!rc) rc = bp_stream_drain(&st, &err);
        CHECK(rc == -1, "wait failure surfaces");
        CHECK_STR_CONTAINS(err.msg, "device error");
        CHECK(st.ring.inflight == 0 && f.cur_inflight == 0, "after a failed wait: nothing in flight");
        memset(got, 0, n * (size_t)H * 4);
        rc = bp_stream_feed(&st, (const int32_t *const *)ids, ntok, n, got, &err) || bp_stream_drain(&st, &err);
        CHECK(rc == 0 && max_diff(ref, got, n * (size_t)H) < 1e-5f, "the stream recovers after errors");
        CHECK(f.violations == 0, "%d violations after errors", f.violations);
        /* An over-budget sequence is refused before anything is staged. */
        fake g;
        bp_engine e2;
        fake_init(&g, w, DONTO_POOL_MEAN, nslots, 16, 4, maxpos, &e2);
        bp_stream st2;
        bp_stream_init(&st2, &e2, &err);
        CHECK(bp_stream_feed(&st2, (const int32_t *const *)ids, ntok, n, got, &err) == -1 && g.submitted == 0,
              "over-budget sequence refused");
        bp_stream_free(&st2);
        fake_free(&g);
        bp_stream_free(&st);
        fake_free(&f);
    }
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids), free(ntok), free(ref), free(got);
    donto_encoder_close(enc);
    donto_bert_free(w);
}

/* ---------- the CPU engine's contract ---------- */

static void test_cpu_engine(const char *dir) {
    donto_err err = {0};
    donto_bert_weights *w;
    if (donto_bert_load(dir, &w, &err)) {
        CHECK(0, "load: %s", err.msg);
        return;
    }
    const int H = w->cfg.hidden;
    bert_linear_ops ops;
    bert_fp32_ops(&ops, w);
    bert_cpu_opts co = {.pooling = DONTO_POOL_MEAN, .max_tokens = 64, .max_seqs = 8, .max_len = 32, .threads = 2};
    bert_cpu *g;
    CHECK(bert_cpu_open(w, &ops, &co, &g, &err) == 0, "open: %s", err.msg);
    bp_engine e;
    bert_cpu_engine(g, &e);
    donto_encoder_devinfo di;
    CHECK(e.nslots == 1 && e.async == 0 && e.dim == H && e.max_tokens == 64 && e.max_seqs == 8 && !bp_engine_info(&e, &di),
          "cpu engine: one synchronous slot, no device figures");
    const float *vec = NULL;
    CHECK(bp_engine_wait(&e, 0, &vec, &err) == -1, "wait with nothing in flight accepted");
    CHECK_STR_CONTAINS(err.msg, "no batch in flight");
    /* Three sequences packed by hand, against the forward called directly. */
    const int32_t seq[3][6] = {{2, 7, 9, 3}, {2, 8, 11, 12, 13, 3}, {2, 3}};
    const int len[3] = {4, 6, 2};
    int32_t *ids = bp_engine_slot_ids(&e, 0), *cu = bp_engine_slot_cu(&e, 0), packed[12], off[4] = {0};
    for (int s = 0; s < 3; s++) {
        memcpy(packed + off[s], seq[s], (size_t)len[s] * 4);
        off[s + 1] = off[s] + len[s];
    }
    memcpy(ids, packed, sizeof packed), memcpy(cu, off, sizeof off);
    CHECK(bp_engine_submit(&e, 0, 3, 12, 6, &err) == 0, "submit: %s", err.msg);
    CHECK(bp_engine_submit(&e, 0, 3, 12, 6, &err) == -1, "submit over a batch in flight accepted");
    CHECK_STR_CONTAINS(err.msg, "not free");
    CHECK(bp_engine_wait(&e, 0, &vec, &err) == 0 && vec, "wait: %s", err.msg);
    size_t sb = bert_cpu_scratch_bytes(&w->cfg, &ops, 12, 6, 1);
    void *scratch = donto_aligned_alloc(sb);
    float ref[3 * 64];
    bert_cpu_forward(w, &ops, DONTO_POOL_MEAN, packed, off, 3, ref, scratch, sb, 1);
    CHECK(max_diff(ref, vec, 3 * (size_t)H) < 1e-5f, "engine vectors differ from the forward");
    CHECK(bp_engine_submit(&e, 0, 9, 12, 6, &err) == -1 && bp_engine_submit(&e, 0, 2, 65, 6, &err) == -1,
          "batch outside the plan accepted");
    CHECK_STR_CONTAINS(err.msg, "outside the plan");
    free(scratch);
    bp_engine_close(&e); /* frees g (ASan checks) */
    CHECK(e.ctx == NULL, "closed");
    co.threads = 0;
    CHECK(bert_cpu_open(w, &ops, &co, &g, &err) == -1 && g == NULL, "zero threads accepted");
    donto_bert_free(w);
}

/* ---------- the encoder's path on attached engines (chunked, threaded tokenising) ---------- */

static void test_encoder_stream(const char *dir) {
    donto_err err = {0};
    donto_encoder_opts o;
    donto_encoder_default_opts(&o);
    o.threads = 2;
    donto_encoder *ref, *enc;
    CHECK(donto_encoder_open(dir, &o, &ref, &err) == 0 && donto_encoder_open(dir, &o, &enc, &err) == 0, "open: %s",
          err.msg);
    donto_bert_weights *w;
    CHECK(donto_bert_load(dir, &w, &err) == 0, "load");
    const int H = donto_encoder_dim(ref);
    /* Two engines (as with two GPUs): each call is split between them. */
    fake f, f2;
    bp_engine e, e2;
    fake_init(&f, w, DONTO_POOL_MEAN, 3, 512, 128, w->cfg.max_position, &e);
    fake_init(&f2, w, DONTO_POOL_MEAN, 2, 300, 64, w->cfg.max_position, &e2);
    CHECK(donto_encoder_attach_engine(enc, &e, &err) == 0, "attach");
    bp_engine wrong = e;
    wrong.dim = H + 1;
    CHECK(donto_encoder_attach_engine(enc, &wrong, &err) == -1, "an engine of another dimension refused");
    CHECK(donto_encoder_attach_engine(enc, &e2, &err) == 0, "attach a second engine");
    /* More texts than one async chunk (8192), so the next chunk is tokenised
     * on the helper thread while this one is fed. */
    const size_t n = 20000;
    static const char *words[] = {"the", "quick", "brown", "fox", "dog", "cat", "is", "a", "kind", "of", "animal",
                                  "running", "hello", "world", ",", "."};
    char **texts = malloc(n * sizeof *texts);
    for (size_t i = 0; i < n; i++) {
        char buf[600] = "";
        int k = i % 1000 == 0 ? 80 : 1 + rnd(12);
        for (int t = 0; t < k; t++) {
            strcat(buf, words[rnd(16)]);
            strcat(buf, " ");
        }
        texts[i] = strdup(buf);
    }
    float *a = malloc(n * (size_t)H * 4), *b = malloc(n * (size_t)H * 4);
    donto_encode_stats sa, sb;
    CHECK(donto_encoder_encode(ref, (const char *const *)texts, NULL, n, a, &sa, &err) == 0, "ref encode");
    memset(b, 0, n * (size_t)H * 4);
    CHECK(donto_encoder_encode(enc, (const char *const *)texts, NULL, n, b, &sb, &err) == 0, "stream encode: %s",
          err.msg);
    CHECK(sa.tokens == sb.tokens && sa.truncated == sb.truncated && sb.truncated > 0,
          "stats: tokens %zu/%zu truncated %zu/%zu", sa.tokens, sb.tokens, sa.truncated, sb.truncated);
    float d = max_diff(a, b, n * (size_t)H);
    CHECK(d < 1e-5f, "two async engines differ from the CPU engine by %g", (double)d);
    CHECK(f.violations == 0 && f.max_inflight == 3, "violations %d, max in flight %d", f.violations, f.max_inflight);
    CHECK(f2.violations == 0 && f2.max_inflight == 2, "engine 2: violations %d, max in flight %d", f2.violations,
          f2.max_inflight);
    CHECK(f.submits > 10 && f2.submits > 10, "both engines used: %d and %d batches", f.submits, f2.submits);
    /* A synchronous engine (as the CPU engine): chunks tokenised in line,
     * the same vectors. */
    donto_encoder *senc;
    CHECK(donto_encoder_open(dir, &o, &senc, &err) == 0, "open: %s", err.msg);
    fake f3;
    bp_engine e3;
    fake_init(&f3, w, DONTO_POOL_MEAN, 2, 400, 100, w->cfg.max_position, &e3);
    e3.async = 0;
    CHECK(donto_encoder_attach_engine(senc, &e3, &err) == 0, "attach a synchronous engine");
    memset(b, 0, n * (size_t)H * 4);
    donto_encode_stats sc;
    CHECK(donto_encoder_encode(senc, (const char *const *)texts, NULL, n, b, &sc, &err) == 0, "sync encode: %s", err.msg);
    CHECK(max_diff(a, b, n * (size_t)H) < 1e-5f && sc.tokens == sa.tokens && sc.truncated == sa.truncated,
          "a synchronous engine gives the CPU engine's vectors and stats");
    CHECK(f3.violations == 0 && f3.max_inflight == 2, "sync engine: violations %d, max in flight %d", f3.violations,
          f3.max_inflight);
    donto_encoder_close(senc);
    fake_free(&f3);
    /* A device error mid-way: a clear error, then the next call works. */
    f2.fail_wait_at = f2.waits + 5;
    CHECK(donto_encoder_encode(enc, (const char *const *)texts, NULL, n, b, NULL, &err) == -1, "device error surfaces");
    CHECK_STR_CONTAINS(err.msg, "device error");
    CHECK_STR_CONTAINS(err.msg, "engine 1: ");
    memset(b, 0, n * (size_t)H * 4);
    CHECK(donto_encoder_encode(enc, (const char *const *)texts, NULL, n, b, NULL, &err) == 0 &&
              max_diff(a, b, n * (size_t)H) < 1e-5f,
          "the encoder recovers");
    /* encode_ids takes the same path. */
    int32_t ids1[] = {2, 7, 9, 3}, ids2[] = {2, 8, 3};
    const int32_t *ip[] = {ids1, ids2};
    int nt[] = {4, 3};
    float va[2 * 64], vb[2 * 64];
    CHECK(donto_encoder_encode_ids(ref, ip, nt, 2, va, &err) == 0 && donto_encoder_encode_ids(enc, ip, nt, 2, vb, &err) == 0 &&
              max_diff(va, vb, 2 * (size_t)H) < 1e-5f,
          "encode_ids on the attached engines");
    int32_t bad[] = {2, 9999, 3};
    const int32_t *bp[] = {bad};
    int nb = 3;
    CHECK(donto_encoder_encode_ids(enc, bp, &nb, 1, va, &err) == -1, "bad id refused on the attached engines");
    CHECK(f.violations == 0 && f2.violations == 0, "no violations at the end");
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts), free(a), free(b);
    donto_encoder_close(enc);
    donto_encoder_close(ref);
    fake_free(&f);
    fake_free(&f2);
    donto_bert_free(w);
}

/* ---------- device options in the encoder API ---------- */

static void test_device_opts(const char *dir) {
    donto_err err = {0};
    donto_encoder_opts o;
    donto_encoder *enc = NULL;
    CHECK(donto_device_parse("cpu") == DONTO_DEVICE_CPU && donto_device_parse("cuda") == DONTO_DEVICE_CUDA &&
              donto_device_parse("gpu") == -1, "device names");
    CHECK(donto_precision_parse("bf16") == DONTO_PREC_BF16 && !strcmp(donto_precision_name(DONTO_PREC_BF16), "bf16"),
          "bf16 name");
    donto_encoder_default_opts(&o);
    CHECK(o.device == DONTO_DEVICE_CPU && o.gpu == 0, "CPU is the default");
    o.precision = DONTO_PREC_BF16;
    /* bf16 on the CPU: bf16 values on fp32 units (src/model/bf16.h) */
    CHECK(donto_encoder_open(dir, &o, &enc, &err) == 0 && enc != NULL, "bf16 on the CPU opens: %s", err.msg);
    if (enc) {
        donto_encoder_kernels k;
        donto_encoder_kernels_get(enc, &k);
        CHECK_STR_CONTAINS(k.gemm, "bf16");
        donto_encoder_close(enc);
        enc = NULL;
    }
    donto_encoder_default_opts(&o);
    o.device = DONTO_DEVICE_CUDA;
    o.precision = DONTO_PREC_INT16;
    CHECK(donto_encoder_open(dir, &o, &enc, &err) == -1, "int16 on cuda refused");
    CHECK_STR_CONTAINS(err.msg, "int16 is a CPU path");
    if (!donto_cuda_built()) {
        /* This build has no engine: a clear error, not a crash. */
        o.precision = DONTO_PREC_BF16;
        CHECK(donto_encoder_open(dir, &o, &enc, &err) == -1 && enc == NULL, "cuda in a CPU build refused");
        CHECK_STR_CONTAINS(err.msg, "built without CUDA");
    }
    donto_encoder_devinfo di;
    donto_encoder_default_opts(&o);
    CHECK(donto_encoder_open(dir, &o, &enc, &err) == 0, "cpu open");
    CHECK(donto_encoder_devinfo_get(enc, &di) == 0 && di.mem_engine == 0 && di.name[0] == 0, "no device info on the CPU");
    donto_encoder_close(enc);
}

int main(void) {
    char root[256], cmd[300];
    snprintf(root, sizeof root, "/tmp/donto-test-gpu-plan-%d", (int)getpid());
    mkdir(root, 0755);
    test_batcher();
    test_bufplan();
    test_ring();
    test_bf16();
    tiny_spec s;
    tiny_default(&s);
    s.pooling = 1;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/m", root);
    if (tiny_write(dir, &s) != 0) {
        fprintf(stderr, "cannot write %s\n", dir);
        return 1;
    }
    test_cpu_engine(dir);
    test_stream(dir);
    test_encoder_stream(dir);
    test_device_opts(dir);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
    return check_report("test_gpu_plan");
}
