/* Minimal test helpers: a failed CHECK prints where and why, and the test
 * exits non-zero at the end (all checks still run, so one run shows all
 * failures). */
#ifndef DONTO_TEST_CHECK_H
#define DONTO_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        check_count++;                                                      \
        if (!(cond)) {                                                      \
            check_failures++;                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#define CHECK_EQ_INT(a, b) CHECK((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_STR_CONTAINS(hay, needle) CHECK(strstr((hay), (needle)) != NULL, "'%s' does not contain '%s'", (hay), (needle))

static inline int check_report(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}
#endif
