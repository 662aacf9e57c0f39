/* A memory-mapped float32 vector file: see include/donto/vecfile.h. */
#define _GNU_SOURCE
#include "donto/vecfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct donto_vecfile {
    int fd;
    int dim;
    size_t n;
    char *path; /* NULL: unlinked temporary */
    void *map;  /* whole file, read-only; NULL when n == 0 */
    size_t maplen;
};

#define VF_VERSION 1u

static int write_all(int fd, const void *p, size_t n, off_t at) {
    const char *b = p;
    while (n) {
        ssize_t w = pwrite(fd, b, n, at);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += w, n -= (size_t)w, at += w;
    }
    return 0;
}

static int put_header(donto_vecfile *v) {
    unsigned char h[DONTO_VECFILE_HEADER] = {0};
    uint32_t ver = VF_VERSION, dim = (uint32_t)v->dim;
    uint64_t n = v->n;
    memcpy(h, "DONTOVEC", 8);
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &dim, 4);
    memcpy(h + 16, &n, 8);
    return write_all(v->fd, h, sizeof h, 0);
}

static int remap(donto_vecfile *v, donto_err *err) {
    if (v->map) munmap(v->map, v->maplen);
    v->map = NULL;
    v->maplen = 0;
    if (!v->n) return 0;
    size_t len = DONTO_VECFILE_HEADER + v->n * (size_t)v->dim * sizeof(float);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, v->fd, 0);
    if (m == MAP_FAILED) return donto_seterr(err, "vecfile: mmap %zu bytes: %s", len, strerror(errno));
    madvise(m, len, MADV_RANDOM); /* a query touches ~100 scattered rows */
    v->map = m;
    v->maplen = len;
    return 0;
}

int donto_vecfile_create(const char *path, int dim, donto_vecfile **out, donto_err *err) {
    *out = NULL;
    if (dim <= 0) return donto_seterr(err, "vecfile: dimension %d", dim);
    int fd;
    if (path) {
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return donto_seterr(err, "vecfile: %s: %s", path, strerror(errno));
    } else {
        const char *dir = getenv("TMPDIR");
        char tmpl[4096];
        snprintf(tmpl, sizeof tmpl, "%s/donto-vec-XXXXXX", dir && *dir ? dir : "/tmp");
        fd = mkostemp(tmpl, O_CLOEXEC);
        if (fd < 0) return donto_seterr(err, "vecfile: %s: %s", tmpl, strerror(errno));
        unlink(tmpl);
    }
    donto_vecfile *v = donto_xcalloc(1, sizeof *v);
    v->fd = fd;
    v->dim = dim;
    v->path = path ? donto_xstrdup(path) : NULL;
    if (put_header(v)) {
        donto_seterr(err, "vecfile: write %s: %s", path ? path : "(temporary)", strerror(errno));
        donto_vecfile_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

int donto_vecfile_open(const char *path, int dim, donto_vecfile **out, donto_err *err) {
    *out = NULL;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return donto_seterr(err, "vecfile: %s: %s", path, strerror(errno));
    unsigned char h[DONTO_VECFILE_HEADER];
    struct stat st;
    uint32_t ver, fdim;
    uint64_t n;
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h, "DONTOVEC", 8)) {
        close(fd);
        return donto_seterr(err, "vecfile: %s: not a vector file", path);
    }
    memcpy(&ver, h + 8, 4), memcpy(&fdim, h + 12, 4), memcpy(&n, h + 16, 8);
    if (ver != VF_VERSION || fdim == 0 || fdim > 65536 || (dim > 0 && fdim != (uint32_t)dim)) {
        close(fd);
        return donto_seterr(err, "vecfile: %s: version %u, %u-d (expected version %u, %d-d)", path, ver, fdim,
                            VF_VERSION, dim);
    }
    if (fstat(fd, &st) || (uint64_t)st.st_size != DONTO_VECFILE_HEADER + n * fdim * sizeof(float)) {
        close(fd);
        return donto_seterr(err, "vecfile: %s: size disagrees with its header (%llu rows)", path,
                            (unsigned long long)n);
    }
    donto_vecfile *v = donto_xcalloc(1, sizeof *v);
    v->fd = fd;
    v->dim = (int)fdim;
    v->n = (size_t)n;
    v->path = donto_xstrdup(path);
    if (remap(v, err)) {
        donto_vecfile_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

int donto_vecfile_append(donto_vecfile *v, const float *x, size_t n, donto_err *err) {
    if (!n) return 0;
    off_t at = (off_t)(DONTO_VECFILE_HEADER + v->n * (size_t)v->dim * sizeof(float));
    if (write_all(v->fd, x, n * (size_t)v->dim * sizeof(float), at)) {
        int e = errno;
        if (ftruncate(v->fd, at)) { /* keep size == header; nothing more to do */
        }
        return donto_seterr(err, "vecfile: append %zu rows: %s", n, strerror(e));
    }
    v->n += n;
    if (put_header(v)) return donto_seterr(err, "vecfile: header: %s", strerror(errno));
    return remap(v, err);
}

int donto_vecfile_rename(donto_vecfile *v, const char *path, donto_err *err) {
    if (!v->path) return 0;
    if (rename(v->path, path)) return donto_seterr(err, "vecfile: rename %s -> %s: %s", v->path, path, strerror(errno));
    free(v->path);
    v->path = donto_xstrdup(path);
    return 0;
}

const float *donto_vecfile_rows(const donto_vecfile *v) {
    return v && v->map ? (const float *)((const char *)v->map + DONTO_VECFILE_HEADER) : NULL;
}
size_t donto_vecfile_n(const donto_vecfile *v) { return v ? v->n : 0; }
int donto_vecfile_dim(const donto_vecfile *v) { return v ? v->dim : 0; }

/* The byte range [*a, *b) of the mapping that holds rows [from, from+n),
 * widened (out = 1) to whole pages around it, or narrowed (out = 0) to the
 * whole pages inside it; *b <= *a when none is. */
static void row_span(const donto_vecfile *v, size_t from, size_t n, int out, size_t *a, size_t *b) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), row = (size_t)v->dim * sizeof(float);
    *a = DONTO_VECFILE_HEADER + from * row;
    *b = *a + n * row;
    if (out) {
        *a = *a / pg * pg;
        *b = (*b + pg - 1) / pg * pg;
    } else {
        *a = (*a + pg - 1) / pg * pg;
        *b = *b / pg * pg;
    }
}

void donto_vecfile_drop(const donto_vecfile *v, size_t from, size_t n) {
    if (!v || !v->map || !n) return;
    size_t a, b;
    row_span(v, from, n, 0, &a, &b); /* a page shared with rows outside stays */
    if (b > a) madvise((char *)v->map + a, b - a, MADV_DONTNEED);
}

void donto_vecfile_prefetch(const donto_vecfile *v, const int64_t *rows, size_t n) {
    if (!v || !v->map) return;
    for (size_t i = 0; i < n; i++) {
        if (rows[i] < 0 || (size_t)rows[i] >= v->n) continue;
        size_t a, b;
        row_span(v, (size_t)rows[i], 1, 1, &a, &b);
        madvise((char *)v->map + a, b - a, MADV_WILLNEED);
    }
}

void donto_vecfile_free(donto_vecfile *v) {
    if (!v) return;
    if (v->map) munmap(v->map, v->maplen);
    close(v->fd);
    free(v->path);
    free(v);
}
