/*
 * donto-accel: declarative command-line options.
 *
 * Each command declares one table of its options, as Redis's config.c
 * declares each setting: a name, a type, bounds, where the value goes, and
 * the help line. One parser reads argv against the table and one printer
 * writes --help from it, so a command's options, their checks and their
 * help cannot drift apart, and no command hand-rolls a number parser.
 *
 *   static int threads = 0;
 *   donto_opt opts[] = {
 *       {DONTO_OPT_INT, "threads", 0, &threads, .min = 1, .max = 1024, .metavar = "N",
 *        .help = "worker threads (default: all CPUs)"},
 *       {0}};
 *   donto_opt_cmd cmd = {"donto-embed embed", "usage: donto-embed embed [options]\n", opts, NULL};
 *   int npos, rc = donto_opt_main(&cmd, argc, argv, &npos);
 *   if (rc >= 0) return rc; // 0 after --help, 2 after a usage error
 *   // argv[1..npos] are the positional arguments, in order
 *
 * Syntax (a strict subset of getopt_long's): --name VALUE, --name=VALUE,
 * -k VALUE, -kVALUE, flags --name / -k; options and positional arguments
 * may mix; "--" ends the options; "-" alone is a positional argument; the
 * word after an option that takes a value is its value even when it starts
 * with '-' (so `--seed -1` reaches the range check). Long names must be
 * spelled out (no unique-prefix abbreviations). -h and --help print the help
 * unless the table claims them. A repeated option: the last one wins.
 *
 * Checks: integers are whole decimal numbers (strtoll: no trailing garbage,
 * no blanks, overflow caught) inside [min, max]; doubles are finite numbers
 * inside [fmin, fmax] (either end excluded by fmin_open / fmax_open); choices
 * are one of the listed words. Every message names the option and, for
 * numbers, the bounds:
 *   "--threads: 0 is out of range (1..1024)"
 *   "--lr: 0 is out of range (must be > 0 and <= 1000)"
 *   "--threads: 'abc' is not a whole number"
 * An option with .env takes its default from that environment variable
 * (when set and not empty), through the same converter; the command line
 * overrides it, and a message about it names the variable.
 *
 * This is the bottom module (util): libc only.
 */
#ifndef DONTO_OPT_H
#define DONTO_OPT_H

#include <stdio.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum donto_opt_type {
    DONTO_OPT_END = 0,   /* ends a table: {0} */
    DONTO_OPT_FLAG,      /* no value; int *dest = 1 */
    DONTO_OPT_FLAG_OFF,  /* no value; int *dest = 0 (--no-edge-weights) */
    DONTO_OPT_STRING,    /* const char **dest = the argument (not copied) */
    DONTO_OPT_INT,       /* int *dest, in [min, max] (both 0: INT_MIN..INT_MAX) */
    DONTO_OPT_INT64,     /* int64_t *dest, in [min, max] (both 0: the int64 range) */
    DONTO_OPT_DOUBLE,    /* double *dest, finite, in [fmin, fmax] (both 0: any finite) */
    DONTO_OPT_FLOAT,     /* float *dest, as DOUBLE and within float's range */
    DONTO_OPT_CHOICE,    /* int *dest = values[i] (or i) for the word choices[i] */
    DONTO_OPT_CALLBACK,  /* parse(value, dest, err): the command's own converter */
    DONTO_OPT_INCLUDE    /* dest = another table (a shared fragment); help = its heading */
} donto_opt_type;

typedef struct donto_opt {
    donto_opt_type type;
    const char *name;    /* long name without the dashes ("threads"); NULL: short only */
    char short_name;     /* 'k' for -k; 0: none */
    void *dest;
    long long min, max;  /* INT, INT64: inclusive bounds */
    double fmin, fmax;   /* DOUBLE, FLOAT: inclusive bounds ... */
    int fmin_open, fmax_open; /* ... or exclusive: 1 excludes fmin / fmax itself (lr > 0, dropout < 1) */
    const char *metavar; /* "N", "DIR" (default by type; CHOICE: the words joined by '|') */
    const char *help;    /* '\n' starts a continuation line, indented to the help column */
    const char *const *choices; /* CHOICE: NULL-terminated words */
    const int *values;          /* CHOICE: the value of each word (NULL: its index) */
    const char *word;           /* INT, INT64: a word taken in place of a number ("all") ... */
    long long word_value;       /* ... and the number it stands for (-1) */
    const char *env;            /* default from this environment variable, if set and not empty */
    int (*parse)(const char *value, void *dest, donto_err *err); /* CALLBACK: 0 ok, -1 with err */
} donto_opt;

/* A command: its name (prefixes every message), the help text before the
 * option list (usage line, description) and after it (notes; NULL: none). */
typedef struct donto_opt_cmd {
    const char *prog;    /* "donto-embed embed" */
    const char *head;
    const donto_opt *opts;
    const char *foot;
} donto_opt_cmd;

/* Parse argv[1..argc-1] against opts. Returns 0 and moves the positional
 * arguments, in order, to argv[1..*npos]; 1 when -h/--help was given (the
 * rest is not checked); -1 with a one-line reason in err (no prefix). The
 * environment defaults are applied first. */
int donto_opt_parse(const donto_opt *opts, int argc, char **argv, int *npos, donto_err *err);

/* Set the option called `name` (long name, or the one-letter short name)
 * from text, with the same checks: for sweep grids and the like. value NULL
 * sets a flag. -1 with err for an unknown name or a bad value. */
int donto_opt_set(const donto_opt *opts, const char *name, const char *value, donto_err *err);

/* Find an option by long name (fragments included); NULL if none. */
const donto_opt *donto_opt_find(const donto_opt *opts, const char *name);

/* The help text: head, one line per option (fragments under their
 * heading), -h/--help, foot. */
void donto_opt_help(const donto_opt_cmd *cmd, FILE *f);

/* For a command's main: parse; on --help print the help to stdout and
 * return 0; on a usage error print "PROG: REASON (see --help)" to stderr
 * and return 2; otherwise return -1 (go on). */
int donto_opt_main(const donto_opt_cmd *cmd, int argc, char **argv, int *npos);

/* A usage error found after parsing (a missing required option, two that
 * exclude each other): "PROG: MESSAGE (see --help)" on stderr; returns 2. */
int donto_opt_usage_error(const donto_opt_cmd *cmd, const char *fmt, ...) DONTO_PRINTF(2, 3);

#ifdef __cplusplus
}
#endif
#endif
