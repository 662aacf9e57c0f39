/* int8 path glue (placeholder until the int8 GEMM lands). */
#include "model/quant.h"

#include <stdlib.h>

int bert_quant_init(bert_quant **out, const donto_bert_weights *w, donto_err *err) {
    (void)w;
    *out = NULL;
    return donto_seterr(err, "the int8 path is not built yet");
}
void bert_quant_free(bert_quant *q) { (void)q; }
void bert_quant_ops(bert_linear_ops *ops, const bert_quant *q) { (void)ops, (void)q; }
