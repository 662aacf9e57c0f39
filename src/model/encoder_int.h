/* Encoder internals shared with tests. */
#ifndef DONTO_ENCODER_INT_H
#define DONTO_ENCODER_INT_H

#include "batch.h"
#include "donto/encoder.h"

/* Run e's encode calls on `eng` (and the other attached engines, a share
 * each) instead of a CPU engine of the call's own, through the same path
 * (chunked tokenising, batcher, slot ring). The CUDA engines are attached
 * this way at open, and then closed with e (eng->close); tests attach CPU
 * fakes (close NULL) to run the path with several slots or engines without
 * a GPU; eng->ctx must then outlive e. */
int donto_encoder_attach_engine(donto_encoder *e, const bp_engine *eng, donto_err *err);

#endif
