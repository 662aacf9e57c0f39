/*
 * The int8 fast path: every Linear weight of the encoder quantized once at
 * open (per output row, symmetric int8), activations quantized per row on
 * every call. Attention, LayerNorm, GELU and softmax stay in fp32.
 */
#ifndef DONTO_QUANT_H
#define DONTO_QUANT_H

#include "donto/model.h"
#include "model/bert_cpu.h"

typedef struct bert_quant bert_quant;

int bert_quant_init(bert_quant **out, const donto_bert_weights *w, donto_err *err);
void bert_quant_free(bert_quant *q);
void bert_quant_ops(bert_linear_ops *ops, const bert_quant *q);
#endif
