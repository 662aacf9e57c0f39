/*
 * Minimal, defensive reader for the safetensors format:
 *   [u64 little-endian header length N][N bytes JSON header][data]
 * Header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *          "__metadata__": {...}} with offsets relative to the data start.
 * The file is mmap'ed read-only; every offset and size is checked against the
 * file length before a pointer is handed out.
 */
#ifndef DONTO_SAFETENSORS_H
#define DONTO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

typedef enum { ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_OTHER } st_dtype;

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    char dtype_name[16];
    int ndim;
    int64_t shape[8];
    const uint8_t *data; /* points into the mapping */
    size_t nbytes;
} st_tensor;

typedef struct st_file {
    char *path;
    void *map;
    size_t len;
    st_tensor *t;
    int n;
} st_file;

int st_open(const char *path, st_file *f, donto_err *err);
void st_close(st_file *f);
/* Tensor by exact name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
#endif
