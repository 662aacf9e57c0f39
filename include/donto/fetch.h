/*
 * donto-accel: download a model repository from a Hugging Face style hub
 * (`donto-embed model fetch`).
 *
 * Every file is fetched from {endpoint}/{repo}/resolve/{revision}/{path}
 * into <dest>/<path>.part, hashed (SHA-256) while it streams, checked against
 * the pinned size and digest, fsync'd and only then renamed to <dest>/<path>.
 * A later run resumes an interrupted .part with an HTTP Range request, and
 * skips files that are already present with the pinned digest.
 *
 * The pins are what make a fetch trustworthy: a file whose table entry has no
 * SHA-256 is refused unless the caller sets no_verify.  The default table is
 * pinned for DONTO_FETCH_DEFAULT_REPO at DONTO_FETCH_DEFAULT_REVISION only;
 * with another repo or revision its digests say nothing about the bytes, so
 * they are treated as unknown (no_verify is then required, and the actual
 * digests are reported so that they can be pinned).
 */
#ifndef DONTO_FETCH_H
#define DONTO_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DONTO_FETCH_DEFAULT_REPO "BAAI/bge-small-en-v1.5"
/* A commit of the repo, not a branch: a moving ref would change the weights
 * (and the embeddings) under the pins without anyone noticing. */
#define DONTO_FETCH_DEFAULT_REVISION "5c38ec7c405ec4b44b94cc5a9bb96e735b38267a"
#define DONTO_FETCH_DEFAULT_DIR "models/bge-small-en-v1.5"
#define DONTO_FETCH_DEFAULT_ENDPOINT "https://huggingface.co"

/* One file of the repository. */
typedef struct donto_fetch_file {
    const char *path;   /* relative, '/'-separated ("1_Pooling/config.json") */
    int64_t size;       /* expected bytes, or -1 when unknown */
    const char *sha256; /* expected digest, 64 hex digits, or NULL when unknown */
} donto_fetch_file;

/* What a progress callback is told about. */
typedef enum donto_fetch_event {
    DONTO_FETCH_EV_START = 0, /* a download begins (done = resume offset); sent again
                               * with done = 0 when a server ignores Range */
    DONTO_FETCH_EV_DATA = 1,  /* bytes arrived (called once per network chunk) */
    DONTO_FETCH_EV_DONE = 2,  /* downloaded, verified (if pinned) and installed */
    DONTO_FETCH_EV_SKIP = 3,  /* already present with the pinned digest */
} donto_fetch_event;

typedef struct donto_fetch_progress {
    donto_fetch_event event;
    const char *path;  /* the table entry's path */
    size_t index;      /* 0-based position in the table */
    size_t count;      /* number of table entries */
    uint64_t done;     /* bytes of this file on disk so far (resume included) */
    uint64_t total;    /* expected bytes of this file, 0 when unknown */
    int verified;      /* DONE/SKIP: 1 if checked against a pinned digest */
    const char *sha256; /* DONE/SKIP: the actual digest (hex) */
} donto_fetch_progress;

typedef void (*donto_fetch_progress_fn)(void *user, const donto_fetch_progress *p);

/* Counters filled in by donto_model_fetch (also on failure, up to the point
 * of failure). */
typedef struct donto_fetch_stats {
    size_t files_downloaded; /* installed by this call */
    size_t files_skipped;    /* already present and verified */
    size_t files_resumed;    /* downloads that continued an existing .part */
    size_t files_unverified; /* installed without a pinned digest (no_verify) */
    uint64_t bytes_downloaded; /* bytes received and written, all files */
} donto_fetch_stats;

/* Options.  Zero-initialise and set what you need: every zero/NULL field
 * means "the default" as described. */
typedef struct donto_fetch_opts {
    const char *repo;     /* NULL: DONTO_FETCH_DEFAULT_REPO */
    const char *revision; /* NULL: DONTO_FETCH_DEFAULT_REVISION */
    const char *dest_dir; /* NULL: DONTO_FETCH_DEFAULT_DIR */
    const char *endpoint; /* NULL: $HF_ENDPOINT if set, else DONTO_FETCH_DEFAULT_ENDPOINT */
    const donto_fetch_file *files; /* NULL: the pinned default table */
    size_t n_files;
    /* Allow installing files that have no pinned digest.  Files that do have
     * one are always verified: a mismatch against a pin is never acceptable. */
    int no_verify;
    int quiet; /* no informational log lines from the library */
    donto_fetch_progress_fn progress; /* may be NULL */
    void *progress_user;
    long connect_timeout_s; /* 0: 30 s */
    /* Abort a transfer slower than low_speed_bytes/s for low_speed_time_s
     * (a stalled connection); the .part is kept for a later resume.
     * 0: 1024 B/s for 60 s. */
    long low_speed_time_s;
    long low_speed_bytes;
    donto_fetch_stats *stats; /* optional out */
} donto_fetch_opts;

/* The pinned table for DONTO_FETCH_DEFAULT_REPO @ DONTO_FETCH_DEFAULT_REVISION. */
const donto_fetch_file *donto_fetch_default_files(size_t *n);

/* Fetch every file of the table into the destination directory.  o may be
 * NULL (all defaults).  HF_TOKEN in the environment, when set, is sent as a
 * bearer token to the endpoint's host (not to hosts it redirects to).
 *
 * libcurl: this calls curl_global_init/curl_global_cleanup itself (they are
 * reference counted).  With libcurl older than 7.84, or one built without
 * CURL_VERSION_THREADSAFE, a program that uses libcurl from other threads at
 * the same time must call curl_global_init once at start-up before any
 * thread does.
 *
 * Returns 0 when every file is present and verified (or installed
 * unverified under no_verify), -1 with a message in err otherwise.  Files
 * completed before a failure stay installed; an interrupted transfer leaves
 * its .part for the next call to resume. */
int donto_model_fetch(const donto_fetch_opts *o, donto_err *err);

#ifdef __cplusplus
}
#endif
#endif
