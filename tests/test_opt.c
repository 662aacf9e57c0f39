/*
 * The option parser (include/donto/opt.h): every type, bounds, overflow,
 * garbage, missing and unknown options, both value forms, positionals,
 * environment defaults, fragments, donto_opt_set, and a help text that
 * lists every option of the table.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "donto/opt.h"

typedef struct vals {
    int flag, on, i, choice, cb;
    int64_t big;
    double x, rate;
    float f, keep;
    const char *s;
    int gpu;
} vals;

static int parse_even(const char *v, void *dest, donto_err *err) {
    int n = atoi(v);
    if (n % 2) return donto_seterr(err, "'%s' is not even", v);
    *(int *)dest = n;
    return 0;
}

static const char *const COLORS[] = {"red", "green", "blue", NULL};
static const int COLOR_VALUES[] = {10, 20, 30};

/* A fragment shared by two tables, as the sheaf commands share theirs. */
static donto_opt g_frag[3];

static void table(vals *v, donto_opt *t) {
    memset(v, 0, sizeof *v);
    v->on = 1, v->i = 7, v->x = 0.5, v->gpu = 0;
    donto_opt frag[] = {{DONTO_OPT_DOUBLE, "lr", 0, &v->x, .fmin = 0, .fmax = 10, .metavar = "X", .help = "rate"},
                        {DONTO_OPT_CALLBACK, "even", 0, &v->cb, .parse = parse_even, .metavar = "N", .help = "even"},
                        {0}};
    memcpy(g_frag, frag, sizeof frag);
    donto_opt o[] = {
        {DONTO_OPT_FLAG, "json", 0, &v->flag, .help = "JSON out"},
        {DONTO_OPT_FLAG_OFF, "no-edge", 0, &v->on, .help = "no edges"},
        {DONTO_OPT_INT, "threads", 't', &v->i, .min = 1, .max = 1024, .metavar = "N", .help = "threads\nsecond line"},
        {DONTO_OPT_INT64, "seed", 0, &v->big, .min = 0, .max = INT64_MAX, .help = "seed"},
        {DONTO_OPT_FLOAT, "decay", 0, &v->f, .fmin = 0, .fmax = 1, .help = "decay"},
        {DONTO_OPT_DOUBLE, "rate", 0, &v->rate, .fmin = 0, .fmin_open = 1, .fmax = 2, .help = "rate > 0"},
        {DONTO_OPT_FLOAT, "keep", 0, &v->keep, .fmin = 0, .fmax = 1, .fmax_open = 1, .help = "keep < 1"},
        {DONTO_OPT_STRING, "db", 0, &v->s, .metavar = "URL", .help = "database"},
        {DONTO_OPT_CHOICE, "color", 0, &v->choice, .choices = COLORS, .values = COLOR_VALUES, .help = "color"},
        {DONTO_OPT_INT, "gpu", 0, &v->gpu, .min = 0, .max = 16, .word = "all", .word_value = -1, .env = "TEST_OPT_GPU",
         .help = "device"},
        {DONTO_OPT_INT, NULL, 'k', &v->i, .min = 1, .max = 5, .help = "how many"},
        {DONTO_OPT_INCLUDE, .dest = g_frag, .help = "shared options:"},
        {0}};
    memcpy(t, o, sizeof o);
}

/* Parse a NULL-terminated word list (argv[0] added); returns the parser's result. */
static int run(vals *v, donto_err *err, int *npos, char **pos, const char *w0, ...) {
    static donto_opt t[16];
    table(v, t);
    char *argv[32];
    int argc = 0;
    argv[argc++] = "prog";
    va_list ap;
    va_start(ap, w0);
    for (const char *w = w0; w; w = va_arg(ap, const char *)) argv[argc++] = (char *)w;
    va_end(ap);
    argv[argc] = NULL;
    int np = 0;
    memset(err, 0, sizeof *err);
    int r = donto_opt_parse(t, argc, argv, &np, err);
    if (npos) *npos = np;
    if (pos)
        for (int i = 0; i < np; i++) pos[i] = argv[1 + i];
    return r;
}

#define BAD(msg_part, ...)                                                                   \
    do {                                                                                     \
        vals v_;                                                                             \
        donto_err e_;                                                                        \
        int r_ = run(&v_, &e_, NULL, NULL, __VA_ARGS__, NULL);                              \
        CHECK(r_ == -1, "expected an error for %s", #__VA_ARGS__);                          \
        CHECK(strstr(e_.msg, msg_part) != NULL, "%s: message '%s' lacks '%s'", #__VA_ARGS__, e_.msg, msg_part); \
    } while (0)

static void test_types(void) {
    vals v;
    donto_err e;
    int np;
    char *pos[8];
    CHECK(run(&v, &e, &np, pos, NULL) == 0 && np == 0, "empty: %s", e.msg);
    CHECK(v.i == 7 && v.on == 1 && v.flag == 0 && v.s == NULL, "defaults untouched");
    CHECK(run(&v, &e, &np, pos, "--json", "--no-edge", "--threads", "8", "--seed", "9223372036854775807", "--decay",
              "0.25", "--db", "x.db", "--color", "green", "--lr=2.5e-1", "--even", "4", NULL) == 0,
          "all types: %s", e.msg);
    CHECK(v.flag == 1 && v.on == 0 && v.i == 8 && v.big == INT64_MAX && v.f == 0.25f && !strcmp(v.s, "x.db") &&
              v.choice == 20 && v.x == 0.25 && v.cb == 4,
          "values");
    /* --opt=value, -kVALUE, -k VALUE, -t (short of a long option) */
    CHECK(run(&v, &e, &np, pos, "--threads=3", NULL) == 0 && v.i == 3, "--opt=value");
    CHECK(run(&v, &e, &np, pos, "-k4", NULL) == 0 && v.i == 4, "-kVALUE");
    CHECK(run(&v, &e, &np, pos, "-k", "2", NULL) == 0 && v.i == 2, "-k VALUE");
    CHECK(run(&v, &e, &np, pos, "-t", "12", NULL) == 0 && v.i == 12, "-t VALUE");
    CHECK(run(&v, &e, &np, pos, "--threads", "+5", NULL) == 0 && v.i == 5, "a leading +");
    CHECK(run(&v, &e, &np, pos, "--threads", "1", "--threads", "9", NULL) == 0 && v.i == 9, "the last one wins");
    /* a word in place of a number */
    CHECK(run(&v, &e, &np, pos, "--gpu", "all", NULL) == 0 && v.gpu == -1, "--gpu all");
    CHECK(run(&v, &e, &np, pos, "--gpu", "3", NULL) == 0 && v.gpu == 3, "--gpu 3");
    /* doubles: exponent, bounds inclusive, underflow is not an error */
    CHECK(run(&v, &e, &np, pos, "--lr", "1e1", NULL) == 0 && v.x == 10, "max inclusive: %s", e.msg);
    CHECK(run(&v, &e, &np, pos, "--lr", "0", NULL) == 0 && v.x == 0, "min inclusive");
    CHECK(run(&v, &e, &np, pos, "--lr", "1e-400", NULL) == 0, "underflow: %s", e.msg);
    /* an open end excludes the bound itself, the closed end of the same option still includes it */
    CHECK(run(&v, &e, &np, pos, "--rate", "1e-9", NULL) == 0 && v.rate == 1e-9, "open min: %s", e.msg);
    CHECK(run(&v, &e, &np, pos, "--rate", "2", NULL) == 0 && v.rate == 2, "closed max: %s", e.msg);
    CHECK(run(&v, &e, &np, pos, "--keep", "0", NULL) == 0 && v.keep == 0, "closed min: %s", e.msg);
    CHECK(run(&v, &e, &np, pos, "--keep", "0.999", NULL) == 0, "open max: %s", e.msg);
}

static void test_errors(void) {
    BAD("--threads: 0 is out of range (1..1024)", "--threads", "0");
    BAD("--threads: 1025 is out of range (1..1024)", "--threads", "1025");
    BAD("--threads: -3 is out of range (1..1024)", "--threads", "-3");
    BAD("--threads: 'abc' is not a whole number", "--threads", "abc");
    BAD("--threads: '8x' is not a whole number", "--threads", "8x");
    BAD("--threads: '' is not a whole number", "--threads=");
    BAD("--threads: ' 8' is not a whole number", "--threads", " 8");
    BAD("--threads: '1.5' is not a whole number", "--threads", "1.5");
    BAD("--threads: 99999999999999999999 is out of range (1..1024)", "--threads", "99999999999999999999");
    BAD("--seed: -1 is out of range (0..9223372036854775807)", "--seed", "-1");
    BAD("--seed: 9223372036854775808 is out of range", "--seed", "9223372036854775808");
    BAD("-k: 6 is out of range (1..5)", "-k", "6");
    BAD("-k: 'x' is not a whole number", "-kx");
    BAD("--gpu: 'some' is not a whole number (or all)", "--gpu", "some");
    BAD("--lr: 'nan' is not a finite number", "--lr", "nan");
    BAD("--lr: 'inf' is not a finite number", "--lr", "inf");
    BAD("--lr: -0.5 is out of range (0..10)", "--lr", "-0.5");
    BAD("--lr: 1e999 is out of range", "--lr", "1e999");
    BAD("--lr: '0.1x' is not a number", "--lr", "0.1x");
    BAD("--decay: 2 is out of range (0..1)", "--decay", "2");
    BAD("--rate: 0 is out of range (must be > 0 and <= 2)", "--rate", "0");
    BAD("--rate: -1 is out of range (must be > 0 and <= 2)", "--rate", "-1");
    BAD("--rate: 2.5 is out of range (must be > 0 and <= 2)", "--rate", "2.5");
    BAD("--keep: 1 is out of range (must be >= 0 and < 1)", "--keep", "1");
    BAD("--keep: 0.99999999999 is out of range as a float (must be >= 0 and < 1)", "--keep", "0.99999999999");
    BAD("--color: 'pink' is not one of red|green|blue", "--color", "pink");
    BAD("--even: '3' is not even", "--even", "3");
    BAD("--threads needs a value", "--threads");
    BAD("-k needs a value", "-k");
    BAD("unknown option '--bogus'", "--bogus");
    BAD("unknown option '--thread'", "--thread", "3"); /* no abbreviations */
    BAD("unknown option '-z'", "-z");
    BAD("--json takes no value", "--json=1");
}

static void test_positional(void) {
    vals v;
    donto_err e;
    int np;
    char *pos[8];
    CHECK(run(&v, &e, &np, pos, "a", "--threads", "2", "b", "-", "--", "--json", "-k", NULL) == 0, "mixed: %s", e.msg);
    CHECK(np == 5 && !strcmp(pos[0], "a") && !strcmp(pos[1], "b") && !strcmp(pos[2], "-") &&
              !strcmp(pos[3], "--json") && !strcmp(pos[4], "-k") && v.i == 2 && v.flag == 0,
          "positionals in order, '--' ends the options (%d)", np);
    /* the word after an option that takes a value is its value, dash or not */
    CHECK(run(&v, &e, &np, pos, "--db", "--json", NULL) == 0 && !strcmp(v.s, "--json") && !v.flag, "--db --json");
    /* --help wins, even after a bad value; but a value that reads "--help" is a value */
    CHECK(run(&v, &e, &np, pos, "--threads", "0", "--help", NULL) == 1, "--help after an error");
    CHECK(run(&v, &e, &np, pos, "-h", NULL) == 1, "-h");
    CHECK(run(&v, &e, &np, pos, "--db", "--help", NULL) == 0 && !strcmp(v.s, "--help"), "--db --help");
}

static void test_env(void) {
    vals v;
    donto_err e;
    int np;
    setenv("TEST_OPT_GPU", "5", 1);
    CHECK(run(&v, &e, &np, NULL, NULL) == 0 && v.gpu == 5, "env default");
    CHECK(run(&v, &e, &np, NULL, "--gpu", "2", NULL) == 0 && v.gpu == 2, "the flag overrides the env");
    setenv("TEST_OPT_GPU", "all", 1);
    CHECK(run(&v, &e, &np, NULL, NULL) == 0 && v.gpu == -1, "env word");
    setenv("TEST_OPT_GPU", "", 1);
    CHECK(run(&v, &e, &np, NULL, NULL) == 0 && v.gpu == 0, "empty env: unset");
    setenv("TEST_OPT_GPU", "99", 1);
    CHECK(run(&v, &e, &np, NULL, NULL) == -1 && strstr(e.msg, "TEST_OPT_GPU: 99 is out of range (0..16)"),
          "bad env names the variable: %s", e.msg);
    unsetenv("TEST_OPT_GPU");
}

static void test_set_find(void) {
    vals v;
    donto_opt t[16];
    table(&v, t);
    donto_err e = {0};
    CHECK(donto_opt_set(t, "lr", "0.125", &e) == 0 && v.x == 0.125, "set in a fragment: %s", e.msg);
    CHECK(donto_opt_set(t, "json", NULL, &e) == 0 && v.flag == 1, "set a flag");
    CHECK(donto_opt_set(t, "k", "3", &e) == 0 && v.i == 3, "set by short name");
    CHECK(donto_opt_set(t, "threads", "0", &e) == -1 && strstr(e.msg, "out of range"), "set checks bounds");
    CHECK(donto_opt_set(t, "nope", "1", &e) == -1 && strstr(e.msg, "unknown option 'nope'"), "set unknown");
    CHECK(donto_opt_set(t, "threads", NULL, NULL) == -1, "set without a value, NULL err");
    CHECK(donto_opt_find(t, "even") && donto_opt_find(t, "even")->type == DONTO_OPT_CALLBACK, "find in a fragment");
    CHECK(!donto_opt_find(t, "thread"), "find needs the whole name");
}

static void test_help(void) {
    vals v;
    donto_opt t[16];
    table(&v, t);
    donto_opt_cmd cmd = {"prog", "usage: prog [options]\n\n", t, "notes at the end\n"};
    char buf[8192] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    donto_opt_help(&cmd, f);
    fclose(f);
    const char *want[] = {"usage: prog [options]", "--json", "--no-edge", "-t, --threads N", "threads\n",
                          "second line", "--seed N", "--decay X", "--db URL", "--color red|green|blue",
                          "--gpu N", "-k N", "shared options:", "--lr X", "--even N", "-h, --help",
                          "notes at the end"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECK_STR_CONTAINS(buf, want[i]);
    /* the continuation line is indented to the help column */
    const char *a = strstr(buf, "threads\n"), *b = strstr(buf, "second line");
    const char *line = strstr(buf, "-t, --threads N");
    CHECK(a && b && line && (b - (a + 8)) == (strstr(line, "threads\n") - line) + 2,
          "continuation aligned:\n%s", buf);
    /* every option of the table is in the help */
    for (int i = 0; t[i].type; i++)
        if (t[i].name) {
            char n[64];
            snprintf(n, sizeof n, "--%s", t[i].name);
            CHECK_STR_CONTAINS(buf, n);
        }
}

int main(void) {
    test_types();
    test_errors();
    test_positional();
    test_env();
    test_set_find();
    test_help();
    return check_report("test_opt");
}
