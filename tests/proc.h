/* Test helpers for tests that drive child processes (the real donto-embed
 * binary): starting one, sleeping, bounded waits for exit, reading a small
 * log file. */
#ifndef DONTO_TEST_PROC_H
#define DONTO_TEST_PROC_H
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>

#include "donto/util.h"

extern char **environ;

/* Start argv (a path, or a bare name looked up in PATH) with stdout to out
 * (truncated) and stderr appended to errlog (NULL: /dev/null for either).
 * The child's pid, or -1. */
static inline pid_t spawn(char *const argv[], const char *out, const char *errlog) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errlog ? errlog : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc ? -1 : pid;
}

static inline void msleep(long ms) {
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* Exit status of pid (128 + signal when killed), waiting at most timeout_s;
 * past that the child is killed and -1 returned. */
static inline int wait_exit(pid_t pid, double timeout_s) {
    double end = donto_now() + timeout_s;
    int st;
    while (donto_now() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        msleep(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* The first 64 KiB of a file as a string in a static buffer (not
 * reentrant: tests read one log at a time), or NULL. */
static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char b[1 << 16];
    size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    b[n] = 0;
    return b;
}
/* The database a test runs on: with pg, $DONTO_TEST_PG_URL (set by
 * scripts/pg-test-server), else DIR/q.db. -1, with a message naming prog,
 * when pg is asked for and the URL is not set. */
static inline int test_db_url(const char *prog, int pg, const char *dir, char *out, size_t cap) {
    if (!pg) {
        snprintf(out, cap, "%s/q.db", dir);
        return 0;
    }
    const char *url = getenv("DONTO_TEST_PG_URL");
    if (!url) {
        fprintf(stderr, "%s pg: DONTO_TEST_PG_URL not set (run through scripts/pg-test-server)\n", prog);
        return -1;
    }
    snprintf(out, cap, "%s", url);
    return 0;
}

/* Loopback only: no proxy from the environment may intercept the test's
 * HTTP (libcurl in the test and in the children it starts). */
static inline void loopback_only(void) {
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
}

#endif
