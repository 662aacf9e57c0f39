/*
 * donto-accel: a float32 vector file, memory-mapped read-only.
 *
 * Why: a compressed ANN index (IVF-PQ / IVF-SQ, include/donto/ann.h) ranks
 * candidates by approximate scores; the top candidates are re-ranked
 * exactly against the original float32 vectors. Those vectors live here,
 * in a file beside the index (<prefix>.<target>.vec), mapped into memory:
 * the kernel pages in the few rows a query touches (100 candidates = 150
 * KB at 384-d) and can drop them again, so the 64 GB of float32 rows of a
 * 42M collection cost disk, not resident memory. Without an index prefix
 * (PostgreSQL in memory) the file is an unlinked temporary file in
 * $TMPDIR. docs/recall.md says why a file and not the store.
 *
 * Layout: a 64-byte header "DONTOVEC" | u32 version (1) | u32 dim | u64 n |
 * zero padding; then n rows of dim little-endian float32, row-major. The
 * header's n is rewritten after every append, so a crash mid-append
 * leaves a file whose size disagrees with its header (rejected on open).
 * There is no checksum over the rows: hashing 64 GB at every start would
 * cost minutes; the ids file beside it (recall.c) cross-checks n.
 *
 * Appends write() at the end and then remap: pointers from
 * donto_vecfile_rows() are invalid after an append (callers append only
 * while no search runs: recall.c's write lock).
 */
#ifndef DONTO_VECFILE_H
#define DONTO_VECFILE_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_vecfile donto_vecfile;

#define DONTO_VECFILE_HEADER 64

/* A new, empty file at path (replacing any there); path NULL: an unlinked
 * temporary file in $TMPDIR (or /tmp). */
int donto_vecfile_create(const char *path, int dim, donto_vecfile **out, donto_err *err);
/* An existing file; dim > 0 must match. Checks magic, version, size. */
int donto_vecfile_open(const char *path, int dim, donto_vecfile **out, donto_err *err);
/* Append x [n, dim] (write + header update + remap). */
int donto_vecfile_append(donto_vecfile *v, const float *x, size_t n, donto_err *err);
/* Rename the file (e.g. NAME.tmp -> NAME once an index over it is saved);
 * the mapping stays valid. No-op for a temporary file. */
int donto_vecfile_rename(donto_vecfile *v, const char *path, donto_err *err);
/* The rows [n, dim]; NULL when empty. Invalidated by append. */
const float *donto_vecfile_rows(const donto_vecfile *v);
size_t donto_vecfile_n(const donto_vecfile *v);
int donto_vecfile_dim(const donto_vecfile *v);
/* Tell the kernel rows [from, from+n) are not needed in memory now (after
 * a streaming pass: keeps resident memory bounded at any size). */
void donto_vecfile_drop(const donto_vecfile *v, size_t from, size_t n);
/* Ask the kernel to read rows[0..n) (row numbers; out-of-range ones are
 * skipped) now, all at once (madvise MADV_WILLNEED, which starts the reads
 * and returns): a re-rank then waits for about one disk read instead of one
 * per row. The mapping is MADV_RANDOM (no read-ahead), so a row not in the
 * page cache is otherwise read page by page, on touch, one after another
 * (with the file evicted, a 500k PQ96 index's p50 went from 11.5 ms to 4.6
 * ms with this; docs/recall.md "Cold rows"). */
void donto_vecfile_prefetch(const donto_vecfile *v, const int64_t *rows, size_t n);
void donto_vecfile_free(donto_vecfile *v);

#ifdef __cplusplus
}
#endif
#endif
