/* Encoder internals shared with tests. */
#ifndef DONTO_ENCODER_INT_H
#define DONTO_ENCODER_INT_H

#include "donto/encoder.h"
#include "model/gpu_plan.h"

/* Route a CPU-opened encoder's encode calls through `eng` with the GPU
 * path's host logic (chunk tokenising on a helper thread, batcher, slot
 * ring). The CUDA engine is attached this way at open; tests attach a CPU
 * fake to run that host logic without a GPU. eng->ctx must outlive e. */
int donto_encoder_attach_engine(donto_encoder *e, const gp_engine *eng, donto_err *err);

#endif
