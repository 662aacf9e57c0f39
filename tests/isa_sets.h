/* The kernel sets a GEMM test runs (tests/test_qgemm.c, tests/test_qgemm8.c):
 * every set this CPU supports past portable, each compared bit for bit with
 * the portable kernels; a set the CPU lacks is printed as SKIP with what it
 * lacks (a skip, never a pass). Include after check.h and cpu_isa.h. */
#ifndef DONTO_TEST_ISA_SETS_H
#define DONTO_TEST_ISA_SETS_H
#include <stdio.h>
#include <string.h>

typedef struct isa_sets {
    donto_isa set[DONTO_ISA_N]; /* the sets that run here */
    int n;
    long same[DONTO_ISA_N];      /* per set: cases bit-identical to portable */
    char skipped[128];           /* " avx512 avx512vnni ..." */
} isa_sets;

/* Fill s with the sets this CPU runs; print a SKIP line for each other one. */
static inline void isa_sets_find(isa_sets *s) {
    memset(s, 0, sizeof *s);
    for (int i = DONTO_ISA_PORTABLE + 1; i < DONTO_ISA_N; i++) {
        const char *name = donto_isa_name((donto_isa)i);
        if (cpu_isa_supported((donto_isa)i)) {
            s->set[s->n++] = (donto_isa)i;
            continue;
        }
        char miss[256];
        cpu_isa_missing((donto_isa)i, miss, sizeof miss);
        printf("SKIP %s: CPU lacks %s\n", name, miss);
        snprintf(s->skipped + strlen(s->skipped), sizeof s->skipped - strlen(s->skipped), " %s", name);
    }
    fflush(stdout);
}

/* Every set that runs must have run a case; print each set's count (with
 * its kernel's name when kernel_name is given) and the summary line. */
static inline void isa_sets_report(const isa_sets *s, const char *(*kernel_name)(donto_isa)) {
    char ran[128] = "";
    for (int t = 0; t < s->n; t++) {
        const char *name = donto_isa_name(s->set[t]);
        CHECK(s->same[s->set[t]] > 0, "set %s ran no case", name);
        if (kernel_name)
            printf("set %s (%s): %ld cases bit-identical to portable\n", name, kernel_name(s->set[t]),
                   s->same[s->set[t]]);
        else
            printf("set %s: %ld cases bit-identical to portable\n", name, s->same[s->set[t]]);
        snprintf(ran + strlen(ran), sizeof ran - strlen(ran), " %s", name);
    }
    printf("kernel sets run: portable%s; skipped:%s\n", ran, *s->skipped ? s->skipped : " none");
}
#endif
