/* Safetensors reader. See safetensors.h. */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is certainly not a model we can run; the limit
 * keeps a corrupt length field from making us parse gigabytes. */
#define ST_MAX_HEADER (100u << 20)

static st_dtype parse_dtype(const char *s, size_t *elsize) {
    if (!strcmp(s, "F32")) return *elsize = 4, ST_F32;
    if (!strcmp(s, "F16")) return *elsize = 2, ST_F16;
    if (!strcmp(s, "BF16")) return *elsize = 2, ST_BF16;
    if (!strcmp(s, "I64")) return *elsize = 8, ST_I64;
    if (!strcmp(s, "I32")) return *elsize = 4, ST_I32;
    if (!strcmp(s, "U8") || !strcmp(s, "I8") || !strcmp(s, "BOOL")) return *elsize = 1, ST_OTHER;
    if (!strcmp(s, "F64") || !strcmp(s, "U64")) return *elsize = 8, ST_OTHER;
    if (!strcmp(s, "I16") || !strcmp(s, "U16")) return *elsize = 2, ST_OTHER;
    if (!strcmp(s, "U32")) return *elsize = 4, ST_OTHER;
    *elsize = 0;
    return ST_OTHER;
}

static int parse_tensor(const char *path, const char *name, json_t *v, const uint8_t *data,
                        size_t data_len, st_tensor *t, donto_err *err) {
    if (!json_is_object(v)) return donto_seterr(err, "%s: tensor %s: entry is not an object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
        return donto_seterr(err, "%s: tensor %s: needs dtype, shape and data_offsets[2]", path, name);
    size_t elsize;
    const char *dn = json_string_value(jd);
    t->dtype = parse_dtype(dn, &elsize);
    if (!elsize) return donto_seterr(err, "%s: tensor %s: unknown dtype '%s'", path, name, dn);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dn);
    size_t nd = json_array_size(js);
    if (nd > 8) return donto_seterr(err, "%s: tensor %s: %zu dimensions", path, name, nd);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return donto_seterr(err, "%s: tensor %s: bad shape", path, name);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && numel > UINT64_MAX / (uint64_t)t->shape[i])
            return donto_seterr(err, "%s: tensor %s: shape overflows", path, name);
        numel *= (uint64_t)t->shape[i];
    }
    json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return donto_seterr(err, "%s: tensor %s: bad data_offsets", path, name);
    uint64_t ob = (uint64_t)json_integer_value(b), oe = (uint64_t)json_integer_value(e);
    if (oe > data_len)
        return donto_seterr(err,
                            "%s: tensor %s ends at byte %llu of the data but the file holds only "
                            "%zu data bytes (truncated file?)",
                            path, name, (unsigned long long)oe, data_len);
    if (numel > UINT64_MAX / elsize || oe - ob != numel * elsize)
        return donto_seterr(err, "%s: tensor %s: %llu bytes for %llu elements of %s", path, name,
                            (unsigned long long)(oe - ob), (unsigned long long)numel, dn);
    t->data = data + ob;
    t->nbytes = (size_t)(oe - ob);
    t->name = donto_xstrdup(name);
    return 0;
}

int st_open(const char *path, st_file *f, donto_err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return donto_seterr(err, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return donto_seterr(err, "%s: %s", path, strerror(e));
    }
    if (sb.st_size < 8) {
        close(fd);
        return donto_seterr(err, "%s: %lld bytes is too short for a safetensors file", path,
                            (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return donto_seterr(err, "%s: mmap: %s", path, strerror(e));
    f->map = map;
    f->len = len;
    f->path = donto_xstrdup(path);

    const uint8_t *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER || hlen > len - 8) {
        donto_seterr(err, "%s: header length %llu does not fit the %zu-byte file (not safetensors, or truncated)",
                     path, (unsigned long long)hlen, len);
        st_close(f);
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen, 0, &je);
    if (!root || !json_is_object(root)) {
        donto_seterr(err, "%s: header is not a JSON object: %s", path, root ? "wrong type" : je.text);
        json_decref(root);
        st_close(f);
        return -1;
    }
    const uint8_t *data = p + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    f->t = donto_xcalloc(json_object_size(root), sizeof *f->t);
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, name, v) {
        if (!strcmp(name, "__metadata__")) continue;
        if (parse_tensor(path, name, v, data, data_len, &f->t[f->n], err)) {
            rc = -1;
            break;
        }
        f->n++;
    }
    json_decref(root);
    if (rc) st_close(f);
    return rc;
}

void st_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    if (f->map) munmap(f->map, f->len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}
