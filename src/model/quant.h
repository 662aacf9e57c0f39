/*
 * The integer fast path (--precision int16): every Linear weight of the
 * encoder quantized once at open (per output row, symmetric, 12 bits),
 * activations quantized per row on every call (13 bits), products summed
 * exactly in int32 (qgemm.h). Attention, LayerNorm, GELU and softmax stay
 * fp32. Why not 8 bits: measured on MiniLM, per-row int8 gives embedding
 * cosine 0.97-0.99 vs fp32 (BERT's LayerNorm outlier dims), under the 0.999
 * gate; AVX2 has no 8-bit product that avoids s16 saturation at full range.
 * The int8 path (--precision int8, bert_quant_init8) takes the outlier
 * channels out in fp32; on the VNNI sets every matrix runs on int8 with
 * weight scales per 64 k, on the others the FFN output stays on int16
 * (bert_int8_default_scheme); on MiniLM both pass the 0.999 gate on the
 * VNNI sets (docs/engine.md, "int8").
 */
#ifndef DONTO_QUANT_H
#define DONTO_QUANT_H

#include "donto/model.h"
#include "bert_cpu.h"

typedef struct bert_quant bert_quant;

/* isa: the kernel set of the GEMMs (and, through bert_quant_ops, of the
 * forward's own loops); DONTO_ISA_AUTO for the best. */
int bert_quant_init(bert_quant **out, const donto_bert_weights *w, donto_isa isa, donto_err *err);
/* The int8 path (--precision int8, qgemm.h "int8 path"): runs the fp32
 * forward once over the calibration batch ids/off (nseq sequences, packed)
 * to find, for every Linear, the nout input channels with the largest
 * max |x|; those stay fp32, the rest go through the int8 GEMM, as sch
 * says (bert_int8_scheme below). */
#define DONTO_INT8_NOUT 8 /* default outlier channels per Linear */
/* Matrices --precision int8 keeps on the int16 GEMM on the sets with the
 * u7 activation grid (no VNNI): the FFN output (bit 3), whose post-GELU
 * input and 8-bit weights lose the most. */
#define DONTO_INT8_KEEP16_DEFAULT 8u
/* The weight scale group of every matrix on the VNNI sets (u8 grid),
 * where all four run on int8 (docs/engine.md, "int8"). */
#define DONTO_INT8_GROUP_VNNI 64
/* The int8 scheme, per matrix i of every layer (0 qkv, 1 attn_out, 2
 * ffn_in, 3 ffn_out): static outlier channels (nout, from calibration),
 * bit i of keep16 (the int16 GEMM instead) and the weight scale groups
 * (group[i], 0: per row; qgemm.h). */
typedef struct {
    int nout;
    unsigned keep16;
    int group[4];
} bert_int8_scheme;
/* What --precision int8 runs on kernel set isa: on the VNNI sets every
 * matrix on int8 with weight scales per DONTO_INT8_GROUP_VNNI k; on the
 * others FFN-out on int16 (DONTO_INT8_KEEP16_DEFAULT); DONTO_INT8_NOUT
 * static outlier channels on both. */
void bert_int8_default_scheme(donto_isa isa, bert_int8_scheme *sch);
int bert_quant_init8(bert_quant **out, const donto_bert_weights *w, donto_isa isa, const int32_t *ids,
                     const int *off, int nseq, const bert_int8_scheme *sch, donto_err *err);
void bert_quant_free(bert_quant *q);
void bert_quant_ops(bert_linear_ops *ops, const bert_quant *q);
/* The GEMM kernel it runs, for logs ("int16 vpmaddwd ymm 6x16"). */
const char *bert_quant_kernel_name(const bert_quant *q);
#endif
