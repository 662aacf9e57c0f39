/*
 * donto-accel: the catalog of embedding models the system knows by name.
 *
 * One table, shared by whoever needs a model's dimensions without loading
 * the model: the coordinator validates submitted vectors against it, the
 * worker checks its engine against it, recall names its default collection
 * by it. The model files themselves (weights, tokenizer) are the model
 * module's business; this is only names and sizes.
 */
#ifndef DONTO_MODELS_H
#define DONTO_MODELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The model assumed when none is named: a submit item without "model"
 * (every legacy worker), a worker or recall run without --model-name. */
#define DONTO_DEFAULT_MODEL "BAAI/bge-small-en-v1.5"

/* Dimensions of a known model, or 0 when name is NULL or not in the table. */
int donto_model_dims(const char *name);
/* The i-th model of the table (0, 1, ...), NULL past the last. */
const char *donto_model_name_at(int i);

#ifdef __cplusplus
}
#endif
#endif
