/*
 * The CUDA engine's memory plan (see gpu_plan.h): buffer plan and bf16
 * rounding. No CUDA here, so the tests check it on the CPU.
 */
#include "gpu_plan.h"

#include <string.h>

/* ---------- buffer plan ---------- */

static size_t align_up(size_t n) { return (n + GP_ALIGN - 1) & ~(size_t)(GP_ALIGN - 1); }

static gp_region take(size_t *at, size_t bytes) {
    gp_region r = {*at, bytes};
    *at += align_up(bytes ? bytes : 1);
    return r;
}

int gp_bufplan_make(const donto_bert_config *c, int max_tokens, int max_seqs, int in_bytes,
                    size_t workspace, gp_bufplan *p, donto_err *err) {
    memset(p, 0, sizeof *p);
    if (max_tokens < 1 || max_seqs < 1 || max_seqs > max_tokens)
        return donto_seterr(err, "buffer plan: need 1 <= max_seqs (%d) <= max_tokens (%d)", max_seqs, max_tokens);
    if (in_bytes != 2 && in_bytes != 4) return donto_seterr(err, "buffer plan: operand size %d", in_bytes);
    const size_t T = (size_t)max_tokens, S = (size_t)max_seqs, H = (size_t)c->hidden,
                 FF = (size_t)c->intermediate;
    const size_t wide = FF > 3 * H ? FF : 3 * H;
    p->max_tokens = max_tokens, p->max_seqs = max_seqs, p->in_bytes = in_bytes;
    size_t at = 0;
    p->x = take(&at, T * H * 4);
    p->xc = take(&at, S * H * 4);
    p->xin = take(&at, T * H * (size_t)in_bytes);
    p->ctx = take(&at, T * H * (size_t)in_bytes);
    p->y = take(&at, T * wide * 4);
    p->fin = take(&at, T * FF * (size_t)in_bytes);
    p->ws = take(&at, workspace);
    p->arena_bytes = at;
    at = 0;
    p->ids = take(&at, T * 4);
    p->cu = take(&at, (S + 1) * 4);
    p->out = take(&at, S * H * 4);
    p->slot_bytes = at;
    return 0;
}

/* ---------- bf16 ---------- */

uint16_t gp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1); /* ties to even; overflow carries into inf, as it should */
    return (uint16_t)(u >> 16);
}

