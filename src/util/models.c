/* donto-accel: the model catalog (names -> dimensions). See
 * include/donto/models.h. Adding a model here makes the coordinator accept
 * its vectors; nothing else has to change. */
#include "donto/models.h"

#include <string.h>

static const struct {
    const char *name;
    int dims;
} k_models[] = {
    {"BAAI/bge-small-en-v1.5", 384},
    {"BAAI/bge-base-en-v1.5", 768},
    {"BAAI/bge-large-en-v1.5", 1024},
    {"sentence-transformers/all-MiniLM-L6-v2", 384},
};

int donto_model_dims(const char *name) {
    if (!name) return 0;
    for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; i++)
        if (!strcmp(name, k_models[i].name)) return k_models[i].dims;
    return 0;
}

const char *donto_model_name_at(int i) {
    return i >= 0 && (size_t)i < sizeof k_models / sizeof k_models[0] ? k_models[i].name : NULL;
}
