/*
 * Steering OpenBLAS to the kernels this CPU deserves.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels once, in its load-time
 * constructor, from CPUID. One that does not know the CPU falls back to old
 * kernels: Debian's 0.3.21 takes a Sapphire Rapids Xeon for a Prescott
 * (SSE3) and runs every fp32 GEMM 3-4x slower than the CPU allows. The choice
 * can be overridden only by OPENBLAS_CORETYPE in the environment *before*
 * the library loads, so the steering is a re-exec:
 *
 *   1. main() calls donto_blas_steer(argv) first, before any thread of ours.
 *   2. If OpenBLAS runs kernels for an older CPU than this one (cpu_isa.c's
 *      levels: SSE < AVX < AVX2 < AVX-512) and the user has not chosen a core
 *      (OPENBLAS_CORETYPE unset), the process sets OPENBLAS_CORETYPE to the
 *      core for its level, marks the environment (DONTO_BLAS_STEERED) and
 *      execs itself (/proc/self/exe, same argv).
 *   3. The new process checks the steered kernels in a forked child: one
 *      small sgemm against a plain double reference. A child killed by a
 *      signal (a core whose instructions the CPU lacks dies of SIGILL) or a
 *      wrong product undoes the steering: the environment is restored and
 *      the process execs itself once more, unsteered, and says why.
 *
 * DONTO_BLAS_STEER in the environment: "auto" (default) as above; "off"
 * never steers; an OpenBLAS core name ("Haswell", "SkylakeX", ...) steers to
 * that core, even over an OPENBLAS_CORETYPE the user set, with the same
 * check. The outcome is in donto_blas_steer_state() for logs and --stats.
 *
 * Every step is bounded: the marker is set before each exec, and a process
 * that finds it never steers again (children it spawns inherit the marker
 * and the already steered OPENBLAS_CORETYPE).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu_isa.h"
#include "donto/encoder.h"

#define ENV_MODE "DONTO_BLAS_STEER"
#define ENV_MARK "DONTO_BLAS_STEERED"
#define ENV_ORIG "DONTO_BLAS_ORIG_CORETYPE"

static char g_state[256];

const char *donto_blas_steer_state(void) { return g_state[0] ? g_state : "none"; }

/* The core name OpenBLAS reports, trimmed, into buf. */
static void blas_core_name(char *buf, size_t n) {
    const char *core = openblas_get_corename();
    snprintf(buf, n, "%s", core && *core ? core : "unknown");
    for (size_t k = strlen(buf); k && buf[k - 1] == ' '; k--) buf[k - 1] = 0;
}

/* The core to steer to for this CPU's level: Cooperlake (SkylakeX kernels
 * plus bf16 sbgemm) where AVX-512 BF16 is usable. */
static const char *target_core(void) {
    const int lc = cpu_level();
    if (lc >= 3 && cpu_features_get()->avx512bf16) return "Cooperlake";
    return cpu_level_coretype(lc);
}

/* One sgemm (37x41 by 41x29, alpha 0.5, beta 1) against a double reference,
 * in this process: 0 when it agrees to 1e-4 relative. */
static int sgemm_agrees(void) {
    enum { M = 37, N = 29, K = 41 };
    static float a[M * K], b[K * N], c[M * N], c0[M * N];
    unsigned s = 12345u;
    for (int i = 0; i < M * K; i++) s = s * 1103515245u + 12345u, a[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < K * N; i++) s = s * 1103515245u + 12345u, b[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < M * N; i++) s = s * 1103515245u + 12345u, c[i] = c0[i] = (float)((s >> 9) % 2001) / 1000.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 0.5f, a, K, b, N, 1.0f, c, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = c0[i * N + j], mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                ref += 0.5 * a[i * K + k] * b[k * N + j];
                mag += fabs(0.5 * a[i * K + k] * b[k * N + j]);
            }
            if (fabs(c[i * N + j] - ref) > 1e-4 * (mag + 1e-30) + 1e-6) return -1;
        }
    return 0;
}

/* The steered kernels' check, in a forked child so that an illegal
 * instruction kills the child and not us; why it failed into buf. */
static int check_in_child(char *why, size_t n) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, n, "fork failed");
        return -1;
    }
    if (pid == 0) {
        openblas_set_num_threads(1);
        /* fault injection for tests: the check fails as a wrong product would */
        const char *fault = getenv("DONTO_BLAS_STEER_FAULT");
        _exit(sgemm_agrees() || (fault && !strcmp(fault, "check")) ? 3 : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, n, "waitpid failed");
            return -1;
        }
    if (WIFSIGNALED(st)) {
        snprintf(why, n, "its sgemm was killed by signal %d%s", WTERMSIG(st),
                 WTERMSIG(st) == SIGILL ? " (an instruction this CPU lacks)" : "");
        return -1;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        snprintf(why, n, "its sgemm gave a wrong product");
        return -1;
    }
    return 0;
}

/* exec ourselves with the environment as it now stands; returns only on failure. */
static void reexec(char **argv) {
    fflush(NULL);
    execv("/proc/self/exe", argv);
}

const char *blas_steer_decide(const char *mode, const char *core, int cpu_lvl, const char *target,
                               const char *user_coretype, char *why, size_t n) {
    snprintf(why, n, "none");
    if (strcmp(mode, "auto") != 0) {
        if (cpu_blas_core_level(mode) < 0) {
            snprintf(why, n, "none (%s=%s is not an OpenBLAS core name)", ENV_MODE, mode);
            return NULL;
        }
        if (!strcasecmp(core, mode)) {
            snprintf(why, n, "none (OpenBLAS already runs %s)", core);
            return NULL;
        }
        return mode;
    }
    const int lb = cpu_blas_core_level(core);
    if (lb < 0 || lb >= cpu_lvl) return NULL; /* unknown core, or as good as the CPU */
    if (user_coretype) {
        snprintf(why, n, "none (OPENBLAS_CORETYPE=%s is the user's)", user_coretype);
        return NULL;
    }
    return target;
}

void donto_blas_steer(char **argv) {
    const char *mode = getenv(ENV_MODE);
    if (!mode || !*mode) mode = "auto";
    if (!strcmp(mode, "off") || !strcmp(mode, "0")) {
        snprintf(g_state, sizeof g_state, "off (%s=%s)", ENV_MODE, mode);
        return;
    }
    char core[48];
    blas_core_name(core, sizeof core);
    const char *mark = getenv(ENV_MARK);
    if (mark && *mark) {
        /* A process of a steered (or un-steered) run, or its child. */
        if (!strncmp(mark, "undone:", 7)) {
            snprintf(g_state, sizeof g_state, "undone: %.160s; running %.40s", mark + 7, core);
            return;
        }
        char why[96];
        if (check_in_child(why, sizeof why)) {
            /* Undo: the user's OPENBLAS_CORETYPE back (or none), and exec. */
            char undone[256];
            snprintf(undone, sizeof undone, "undone:OpenBLAS core %s failed its check (%s)", core, why);
            const char *orig = getenv(ENV_ORIG);
            if (orig && *orig) setenv("OPENBLAS_CORETYPE", orig, 1);
            else unsetenv("OPENBLAS_CORETYPE");
            unsetenv(ENV_ORIG);
            setenv(ENV_MARK, undone, 1);
            reexec(argv);
            snprintf(g_state, sizeof g_state, "%.160s; exec failed, running %.40s unchecked", undone + 7, core);
            return;
        }
        snprintf(g_state, sizeof g_state, "%.60s->%.40s", mark, core);
        return;
    }
    char why[128];
    const char *to = blas_steer_decide(mode, core, cpu_level(), target_core(), getenv("OPENBLAS_CORETYPE"), why,
                                       sizeof why);
    if (!to) {
        snprintf(g_state, sizeof g_state, "%s", why);
        return;
    }
    const char *orig = getenv("OPENBLAS_CORETYPE");
    const int had = orig != NULL;
    if (had) setenv(ENV_ORIG, orig, 1);
    setenv("OPENBLAS_CORETYPE", to, 1);
    setenv(ENV_MARK, core, 1);
    reexec(argv);
    /* exec failed: put the environment back and go on unsteered */
    if (had) setenv("OPENBLAS_CORETYPE", getenv(ENV_ORIG), 1);
    else unsetenv("OPENBLAS_CORETYPE");
    unsetenv(ENV_ORIG);
    unsetenv(ENV_MARK);
    snprintf(g_state, sizeof g_state, "none (exec of /proc/self/exe failed; running %s)", core);
}
