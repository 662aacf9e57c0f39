/*
 * CPU feature detection and kernel-set choice (see cpu_isa.h).
 *
 * CPUID bits (Intel SDM vol. 2A, CPUID; the same bits on AMD):
 *   leaf 1, ECX:        12 FMA, 27 OSXSAVE, 28 AVX
 *   leaf 7.0, EBX:      5 AVX2, 16 AVX512F, 17 AVX512DQ, 30 AVX512BW, 31 AVX512VL
 *   leaf 7.0, ECX:      11 AVX512_VNNI
 *   leaf 7.0, EDX:      22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8
 *   leaf 7.1, EAX:      4 AVX-VNNI, 5 AVX512_BF16
 * XCR0 (XGETBV 0, valid when OSXSAVE): 1 SSE, 2 AVX (ymm upper halves),
 *   5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM, 17 XTILECFG, 18 XTILEDATA.
 * Linux keeps AMX tile data disabled per process until asked:
 *   arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18).
 */
#define _GNU_SOURCE
#include "cpu_isa.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#define ISA_X86 1
#include <cpuid.h>
#endif
#if defined(ISA_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ISA_ARCH_REQ_XCOMP_PERM 0x1023
#define ISA_ARCH_GET_XCOMP_PERM 0x1022
#define ISA_XFEATURE_XTILEDATA 18
#endif

static cpu_features g_feat;
static unsigned g_sets; /* bit s: this CPU runs kernel set s */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void isa_sets(void);

#ifdef ISA_X86
static unsigned long long isa_xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

/* AMX tile data must be requested from Linux before the first tile
 * instruction; 1 when granted (or already granted). */
static int isa_amx_request(void) {
#ifdef ISA_ARCH_REQ_XCOMP_PERM
    if (syscall(SYS_arch_prctl, ISA_ARCH_REQ_XCOMP_PERM, ISA_XFEATURE_XTILEDATA) != 0) return 0;
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ISA_ARCH_GET_XCOMP_PERM, &bits) != 0) return 0;
    return (bits >> ISA_XFEATURE_XTILEDATA) & 1;
#else
    return 0;
#endif
}
#endif

static void isa_detect(void) {
    cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef ISA_X86
    unsigned a, b, c, d, maxleaf = __get_cpuid_max(0, NULL);
    if (maxleaf < 1 || !__get_cpuid(1, &a, &b, &c, &d)) goto done;
    const int osxsave = (c & bit_OSXSAVE) != 0;
    const unsigned long long xcr0 = osxsave ? isa_xgetbv0() : 0;
    const int os_ymm = (xcr0 & 0x6) == 0x6;                  /* SSE + AVX state */
    const int os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;       /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const int os_amx = (xcr0 & 0x60000ull) == 0x60000ull;    /* XTILECFG + XTILEDATA */
    const int cpu_fma = (c & bit_FMA) != 0, cpu_avx = (c & bit_AVX) != 0;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (maxleaf >= 7) {
        unsigned maxsub;
        __cpuid_count(7, 0, maxsub, b7, c7, d7);
        if (maxsub >= 1) {
            unsigned x1, x2, x3;
            __cpuid_count(7, 1, a71, x1, x2, x3);
            (void)x1, (void)x2, (void)x3;
        }
    }
    f.avx = cpu_avx && os_ymm;
    f.fma = cpu_fma && os_ymm;
    f.avx2 = f.avx && (b7 & bit_AVX2);
    f.avxvnni = f.avx2 && (a71 & bit_AVXVNNI);
    const int cpu_512 = (b7 & bit_AVX512F) != 0;
    f.avx512f = cpu_512 && os_zmm;
    f.avx512bw = f.avx512f && (b7 & bit_AVX512BW);
    f.avx512vl = f.avx512f && (b7 & bit_AVX512VL);
    f.avx512dq = f.avx512f && (b7 & bit_AVX512DQ);
    f.avx512vnni = f.avx512f && (c7 & bit_AVX512VNNI);
    f.avx512bf16 = f.avx512f && (a71 & bit_AVX512BF16);
    f.avx512_no_os = cpu_512 && !os_zmm;
    const int cpu_amx = (d7 & bit_AMX_TILE) != 0;
    if (cpu_amx && os_amx && isa_amx_request()) {
        f.amx_tile = 1;
        f.amx_int8 = (d7 & bit_AMX_INT8) != 0;
        f.amx_bf16 = (d7 & bit_AMX_BF16) != 0;
    } else {
        f.amx_no_os = cpu_amx;
    }
done:
#endif
    g_feat = f;
    isa_sets();
}

const cpu_features *cpu_features_get(void) {
    pthread_once(&g_once, isa_detect);
    return &g_feat;
}

/* What each set needs, as (name, flag offset) pairs. */
typedef struct {
    const char *name;
    size_t off;
} isa_need;
#define NEED(field, label) {label, offsetof(cpu_features, field)}
static const isa_need k_avx2[] = {NEED(avx2, "AVX2"), NEED(fma, "FMA"), {NULL, 0}};
static const isa_need k_avxvnni[] = {NEED(avx2, "AVX2"), NEED(fma, "FMA"), NEED(avxvnni, "AVX-VNNI"), {NULL, 0}};
static const isa_need k_avx512[] = {NEED(avx2, "AVX2"),         NEED(fma, "FMA"),
                                    NEED(avx512f, "AVX512F"),   NEED(avx512bw, "AVX512BW"),
                                    NEED(avx512vl, "AVX512VL"), NEED(avx512dq, "AVX512DQ"),
                                    {NULL, 0}};
static const isa_need k_avx512vnni[] = {NEED(avx2, "AVX2"),           NEED(fma, "FMA"),
                                        NEED(avx512f, "AVX512F"),     NEED(avx512bw, "AVX512BW"),
                                        NEED(avx512vl, "AVX512VL"),   NEED(avx512dq, "AVX512DQ"),
                                        NEED(avx512vnni, "AVX512_VNNI"), {NULL, 0}};
static const isa_need k_avx512bf16[] = {NEED(avx2, "AVX2"),           NEED(fma, "FMA"),
                                        NEED(avx512f, "AVX512F"),     NEED(avx512bw, "AVX512BW"),
                                        NEED(avx512vl, "AVX512VL"),   NEED(avx512dq, "AVX512DQ"),
                                        NEED(avx512vnni, "AVX512_VNNI"), NEED(avx512bf16, "AVX512_BF16"),
                                        {NULL, 0}};
#undef NEED

static const isa_need *isa_needs(donto_isa s) {
    switch (s) {
    case DONTO_ISA_AVX2: return k_avx2;
    case DONTO_ISA_AVXVNNI: return k_avxvnni;
    case DONTO_ISA_AVX512: return k_avx512;
    case DONTO_ISA_AVX512VNNI: return k_avx512vnni;
    case DONTO_ISA_AVX512BF16: return k_avx512bf16;
    default: return NULL; /* auto, portable: nothing */
    }
}

void cpu_isa_missing(donto_isa s, char *buf, size_t n) {
    const cpu_features *f = cpu_features_get();
    size_t at = 0;
    if (n) buf[0] = 0;
    if ((int)s < 0 || s >= DONTO_ISA_N) {
        snprintf(buf, n, "a known kernel set");
        return;
    }
    for (const isa_need *q = isa_needs(s); q && q->name; q++) {
        if (((const unsigned char *)f)[q->off]) continue;
        int k = snprintf(buf + at, at < n ? n - at : 0, "%s%s", at ? ", " : "", q->name);
        if (k > 0) at += (size_t)k;
    }
    if (at && at < n && cpu_isa_zmm(s) && f->avx512_no_os)
        snprintf(buf + at, n - at, " (the CPU lists AVX-512 but the OS does not enable its registers)");
}

/* The sets this CPU runs, once (from isa_detect, under the once). */
static void isa_sets(void) {
    g_sets = 1u << DONTO_ISA_AUTO | 1u << DONTO_ISA_PORTABLE;
    for (int s = DONTO_ISA_PORTABLE + 1; s < DONTO_ISA_N; s++) {
        int ok = 1;
        for (const isa_need *q = isa_needs((donto_isa)s); q && q->name; q++)
            ok &= ((const unsigned char *)&g_feat)[q->off] != 0;
        if (ok) g_sets |= 1u << s;
    }
}

int cpu_isa_supported(donto_isa s) {
    if ((int)s < 0 || s >= DONTO_ISA_N) return 0;
    cpu_features_get();
    return (g_sets >> s) & 1;
}

donto_isa cpu_isa_best(void) {
    for (int s = DONTO_ISA_N - 1; s > DONTO_ISA_PORTABLE; s--)
        if (cpu_isa_supported((donto_isa)s)) return (donto_isa)s;
    return DONTO_ISA_PORTABLE;
}

donto_isa cpu_isa_resolve(donto_isa s) { return s == DONTO_ISA_AUTO ? cpu_isa_best() : s; }

int cpu_isa_zmm(donto_isa s) { return s == DONTO_ISA_AVX512 || s == DONTO_ISA_AVX512VNNI || s == DONTO_ISA_AVX512BF16; }

int cpu_isa_vnni(donto_isa s) {
    return s == DONTO_ISA_AVXVNNI || s == DONTO_ISA_AVX512VNNI || s == DONTO_ISA_AVX512BF16;
}

int cpu_isa_bf16(donto_isa s) { return s == DONTO_ISA_AVX512BF16; }

donto_isa cpu_isa_runnable(donto_isa s) {
    s = cpu_isa_resolve(s);
    return cpu_isa_supported(s) ? s : cpu_isa_best();
}

void cpu_features_describe(char *buf, size_t n) {
    const cpu_features *f = cpu_features_get();
    const struct {
        int on;
        const char *name;
    } all[] = {{f->avx, "avx"},
               {f->avx2, "avx2"},
               {f->fma, "fma"},
               {f->avxvnni, "avx-vnni"},
               {f->avx512f, "avx512f"},
               {f->avx512bw, "avx512bw"},
               {f->avx512vl, "avx512vl"},
               {f->avx512dq, "avx512dq"},
               {f->avx512vnni, "avx512_vnni"},
               {f->avx512bf16, "avx512_bf16"},
               {f->amx_tile, "amx-tile"},
               {f->amx_int8, "amx-int8"},
               {f->amx_bf16, "amx-bf16"}};
    size_t at = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!all[i].on) continue;
        int k = snprintf(buf + at, at < n ? n - at : 0, "%s%s", at ? " " : "", all[i].name);
        if (k > 0) at += (size_t)k;
    }
    if (!at) snprintf(buf, n, "none of avx/avx2/avx-512");
    else if (at < n && f->amx_no_os) snprintf(buf + at, n - at, " (amx: not enabled by the OS)");
}

/* ---- OpenBLAS ------------------------------------------------------------ */

int cpu_blas_core_level(const char *core) {
    static const struct {
        const char *name;
        int level;
    } k_cores[] = {
        /* OpenBLAS's x86_64 DYNAMIC_ARCH core names (driver/others/dynamic.c) */
        {"SkylakeX", 3},   {"Cooperlake", 3}, {"SapphireRapids", 3}, {"Haswell", 2},     {"Zen", 2},
        {"Excavator", 2},  {"Sandybridge", 1}, {"Bulldozer", 1},     {"Piledriver", 1},  {"Steamroller", 1},
        {"Katmai", 0},     {"Coppermine", 0}, {"Northwood", 0},      {"Prescott", 0},    {"Banias", 0},
        {"Atom", 0},       {"Core2", 0},      {"Penryn", 0},         {"Dunnington", 0},  {"Nehalem", 0},
        {"Athlon", 0},     {"Opteron", 0},    {"Opteron_SSE3", 0},   {"Barcelona", 0},   {"Nano", 0},
        {"Bobcat", 0},
    };
    if (!core) return -1;
    char name[64];
    size_t n = 0;
    while (core[n] && !isspace((unsigned char)core[n]) && n + 1 < sizeof name) name[n] = core[n], n++;
    name[n] = 0;
    for (size_t i = 0; i < sizeof k_cores / sizeof k_cores[0]; i++)
        if (!strcasecmp(name, k_cores[i].name)) return k_cores[i].level;
    return -1;
}

int cpu_level(void) {
    const cpu_features *f = cpu_features_get();
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq) return 3;
    if (f->avx2 && f->fma) return 2;
    if (f->avx) return 1;
    return 0;
}

const char *cpu_level_coretype(int level) {
    return level >= 3 ? "SkylakeX" : level == 2 ? "Haswell" : level == 1 ? "Sandybridge" : "Prescott";
}
