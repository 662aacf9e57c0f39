/*
 * Declarative command-line options (include/donto/opt.h).
 *
 * One pass over argv: each word is an option (looked up in the table and
 * its included fragments), the value of the option before it, or a
 * positional argument (compacted to the front of argv). Every value goes
 * through one converter per type, shared with the environment defaults and
 * donto_opt_set, so a number is checked the same way wherever it comes
 * from: strtoll/strtod with errno and end-pointer checks, no leading
 * blanks, finite doubles, inclusive bounds.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "donto/opt.h"

/* ---- lookup ------------------------------------------------------------------ */

static const donto_opt *find_long(const donto_opt *t, const char *name, size_t n) {
    for (; t->type != DONTO_OPT_END; t++) {
        if (t->type == DONTO_OPT_INCLUDE) {
            const donto_opt *o = find_long(t->dest, name, n);
            if (o) return o;
        } else if (t->name && strlen(t->name) == n && !strncmp(t->name, name, n)) {
            return t;
        }
    }
    return NULL;
}

static const donto_opt *find_short(const donto_opt *t, char c) {
    for (; t->type != DONTO_OPT_END; t++) {
        if (t->type == DONTO_OPT_INCLUDE) {
            const donto_opt *o = find_short(t->dest, c);
            if (o) return o;
        } else if (t->short_name && t->short_name == c) {
            return t;
        }
    }
    return NULL;
}

const donto_opt *donto_opt_find(const donto_opt *opts, const char *name) {
    return name ? find_long(opts, name, strlen(name)) : NULL;
}

static int takes_value(const donto_opt *o) { return o->type != DONTO_OPT_FLAG && o->type != DONTO_OPT_FLAG_OFF; }

/* How messages name an option: --long, else -k. */
static void opt_label(const donto_opt *o, char *buf, size_t n) {
    if (o->name) snprintf(buf, n, "--%s", o->name);
    else snprintf(buf, n, "-%c", o->short_name);
}

/* ---- converters ----------------------------------------------------------------- */

static int conv_integer(const char *who, const char *s, long long lo, long long hi, long long *out, donto_err *err) {
    if (!*s || isspace((unsigned char)*s)) return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not a whole number", who, s);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end) return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not a whole number", who, s);
    if (errno == ERANGE || v < lo || v > hi)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: %s is out of range (%lld..%lld)", who, s, lo, hi);
    *out = v;
    return 0;
}

static int in_range(double v, double lo, double hi, int lo_open, int hi_open) {
    return !(lo_open ? v <= lo : v < lo) && !(hi_open ? v >= hi : v > hi);
}

/* A double in [lo, hi] (an end excluded when open); is_float: the value rounded to float must stay
 * off an open end too (0.99999999999 rounds to 1.0f, 1e-50 to 0.0f). */
static int conv_double(const char *who, const char *s, double lo, double hi, int lo_open, int hi_open, int is_float,
                       double *out, donto_err *err) {
    if (!*s || isspace((unsigned char)*s)) return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not a number", who, s);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end) return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not a number", who, s);
    int overflow = errno == ERANGE && fabs(v) > 1; /* ERANGE near 0 is underflow: kept */
    if (!overflow && !isfinite(v)) return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not a finite number", who, s);
    int in = !overflow && in_range(v, lo, hi, lo_open, hi_open);
    /* an open end is checked again on the float (|v| <= FLT_MAX here); closed ends are not, so that
     * a bound such as 0.1, not a float, still admits "0.1" */
    double fv = in && is_float ? (float)v : v;
    int as_float = in && ((lo_open && fv <= lo) || (hi_open && fv >= hi));
    if (in && !as_float) {
        *out = v;
        return 0;
    }
    if (lo_open || hi_open || as_float)
        return donto_seterrc(err, DONTO_E_INVALID, "%s: %s is out of range%s (must be %s %g and %s %g)", who, s,
                             as_float ? " as a float" : "", lo_open ? ">" : ">=", lo, hi_open ? "<" : "<=", hi);
    return donto_seterrc(err, DONTO_E_INVALID, "%s: %s is out of range (%g..%g)", who, s, lo, hi);
}

/* Convert `value` for option o and store it; who names the source in messages. */
static int apply(const donto_opt *o, const char *who, const char *value, donto_err *err) {
    switch (o->type) {
    case DONTO_OPT_FLAG: *(int *)o->dest = 1; return 0;
    case DONTO_OPT_FLAG_OFF: *(int *)o->dest = 0; return 0;
    case DONTO_OPT_STRING: *(const char **)o->dest = value; return 0;
    case DONTO_OPT_INT:
    case DONTO_OPT_INT64: {
        int is_int = o->type == DONTO_OPT_INT;
        long long lo = o->min, hi = o->max, v = 0;
        if (!lo && !hi) lo = is_int ? INT_MIN : INT64_MIN, hi = is_int ? INT_MAX : INT64_MAX;
        if (is_int && lo < INT_MIN) lo = INT_MIN;
        if (is_int && hi > INT_MAX) hi = INT_MAX;
        if (o->word && !strcmp(value, o->word)) {
            v = o->word_value;
        } else if (conv_integer(who, value, lo, hi, &v, err)) {
            size_t k = strlen(err->msg);
            if (o->word) snprintf(err->msg + k, sizeof err->msg - k, " (or %s)", o->word);
            return -1;
        }
        if (is_int) *(int *)o->dest = (int)v;
        else *(int64_t *)o->dest = (int64_t)v;
        return 0;
    }
    case DONTO_OPT_DOUBLE:
    case DONTO_OPT_FLOAT: {
        double lo = o->fmin, hi = o->fmax, v = 0;
        if (lo == 0 && hi == 0) lo = -DBL_MAX, hi = DBL_MAX;
        if (o->type == DONTO_OPT_FLOAT) lo = lo < -FLT_MAX ? -FLT_MAX : lo, hi = hi > FLT_MAX ? FLT_MAX : hi;
        if (conv_double(who, value, lo, hi, o->fmin_open, o->fmax_open, o->type == DONTO_OPT_FLOAT, &v, err)) return -1;
        if (o->type == DONTO_OPT_FLOAT) *(float *)o->dest = (float)v;
        else *(double *)o->dest = v;
        return 0;
    }
    case DONTO_OPT_CHOICE:
        for (int i = 0; o->choices && o->choices[i]; i++) {
            if (strcmp(value, o->choices[i])) continue;
            *(int *)o->dest = o->values ? o->values[i] : i;
            return 0;
        }
        {
            char list[256] = "";
            for (int i = 0; o->choices && o->choices[i]; i++) {
                if (i) strncat(list, "|", sizeof list - strlen(list) - 1);
                strncat(list, o->choices[i], sizeof list - strlen(list) - 1);
            }
            return donto_seterrc(err, DONTO_E_INVALID, "%s: '%s' is not one of %s", who, value, list);
        }
    case DONTO_OPT_CALLBACK:
        if (o->parse(value, o->dest, err)) return donto_preerr(err, "%s", who);
        return 0;
    default: return donto_seterrc(err, DONTO_E_INVALID, "%s: bad option table", who);
    }
}

/* ---- parsing ------------------------------------------------------------------ */

static int apply_env(const donto_opt *t, donto_err *err) {
    for (; t->type != DONTO_OPT_END; t++) {
        if (t->type == DONTO_OPT_INCLUDE) {
            if (apply_env(t->dest, err)) return -1;
            continue;
        }
        const char *v = t->env ? getenv(t->env) : NULL;
        if (v && *v && apply(t, t->env, v, err)) return -1;
    }
    return 0;
}

static int parse(const donto_opt *opts, int argc, char **argv, int *npos, donto_err *err) {
    *npos = 0;
    int has_h = find_short(opts, 'h') != NULL, has_help = find_long(opts, "help", 4) != NULL;
    /* --help wins over every other word, whatever else is wrong. */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        if ((!has_help && !strcmp(argv[i], "--help")) || (!has_h && !strcmp(argv[i], "-h"))) return 1;
        const donto_opt *o = NULL;
        if (!strncmp(argv[i], "--", 2) && !strchr(argv[i], '=')) o = find_long(opts, argv[i] + 2, strlen(argv[i] + 2));
        else if (argv[i][0] == '-' && argv[i][1] && argv[i][1] != '-' && !argv[i][2]) o = find_short(opts, argv[i][1]);
        if (o && takes_value(o)) i++; /* its value is not an option */
    }
    if (apply_env(opts, err)) return -1;
    int np = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || !a[1]) {
            argv[1 + np++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        const donto_opt *o;
        const char *value = NULL;
        char who[80];
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t n = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(opts, name, n);
            if (!o) return donto_seterrc(err, DONTO_E_INVALID, "unknown option '--%.*s'", (int)n, name);
            opt_label(o, who, sizeof who);
            if (eq && !takes_value(o)) return donto_seterrc(err, DONTO_E_INVALID, "%s takes no value", who);
            if (eq) value = eq + 1;
        } else {
            o = find_short(opts, a[1]);
            if (!o) return donto_seterrc(err, DONTO_E_INVALID, "unknown option '-%c'", a[1]);
            opt_label(o, who, sizeof who);
            if (a[2] && !takes_value(o)) return donto_seterrc(err, DONTO_E_INVALID, "%s takes no value (in '%s')", who, a);
            if (a[2]) value = a + 2;
        }
        if (takes_value(o) && !value) {
            if (i + 1 >= argc) return donto_seterrc(err, DONTO_E_INVALID, "%s needs a value", who);
            value = argv[++i];
        }
        if (apply(o, who, value, err)) return -1;
    }
    *npos = np;
    return 0;
}

int donto_opt_parse(const donto_opt *opts, int argc, char **argv, int *npos, donto_err *err) {
    donto_err e = {0}; /* the converters write into it unconditionally */
    int r = parse(opts, argc, argv, npos, &e);
    if (r < 0 && err) *err = e;
    return r;
}

static int set(const donto_opt *opts, const char *name, const char *value, donto_err *err) {
    const donto_opt *o = strlen(name) == 1 ? find_short(opts, name[0]) : NULL;
    if (!o) o = find_long(opts, name, strlen(name));
    if (!o) return donto_seterrc(err, DONTO_E_INVALID, "unknown option '%s'", name);
    char who[80];
    opt_label(o, who, sizeof who);
    if (takes_value(o) && !value) return donto_seterrc(err, DONTO_E_INVALID, "%s needs a value", who);
    return apply(o, who, value, err);
}

int donto_opt_set(const donto_opt *opts, const char *name, const char *value, donto_err *err) {
    donto_err e = {0};
    int r = set(opts, name, value, &e);
    if (r < 0 && err) *err = e;
    return r;
}

/* ---- help ----------------------------------------------------------------------- */

/* "-k, --name META" / "--name META" / "-k META" */
static void left_part(const donto_opt *o, char *buf, size_t n) {
    char meta[128] = "";
    if (takes_value(o)) {
        if (o->metavar) snprintf(meta, sizeof meta, " %s", o->metavar);
        else if (o->type == DONTO_OPT_CHOICE) {
            for (int i = 0; o->choices && o->choices[i]; i++) {
                strncat(meta, i ? "|" : " ", sizeof meta - strlen(meta) - 1);
                strncat(meta, o->choices[i], sizeof meta - strlen(meta) - 1);
            }
        } else {
            snprintf(meta, sizeof meta, " %s",
                     o->type == DONTO_OPT_INT || o->type == DONTO_OPT_INT64 ? "N"
                     : o->type == DONTO_OPT_DOUBLE || o->type == DONTO_OPT_FLOAT ? "X"
                                                                                 : "S");
        }
    }
    if (o->name && o->short_name) snprintf(buf, n, "-%c, --%s%s", o->short_name, o->name, meta);
    else if (o->name) snprintf(buf, n, "--%s%s", o->name, meta);
    else snprintf(buf, n, "-%c%s", o->short_name, meta);
}

static size_t widest(const donto_opt *t) {
    size_t w = strlen("-h, --help");
    for (; t->type != DONTO_OPT_END; t++) {
        char b[256];
        size_t k;
        if (t->type == DONTO_OPT_INCLUDE) k = widest(t->dest);
        else left_part(t, b, sizeof b), k = strlen(b);
        if (k > w && k <= 26) w = k;
    }
    return w;
}

static void help_line(FILE *f, const char *left, const char *help, const char *env, int col) {
    int k = fprintf(f, "  %s", left);
    if (!help || !*help) {
        if (env) fprintf(f, "%*s[%s]", k + 1 > col ? 1 : col - k, "", env);
        fputc('\n', f);
        return;
    }
    if (k + 1 > col) fprintf(f, "\n%*s", col, "");
    else fprintf(f, "%*s", col - k, "");
    for (const char *p = help; *p; p++) {
        fputc(*p, f);
        if (*p == '\n' && p[1]) fprintf(f, "%*s", col, "");
    }
    if (env) fprintf(f, " [%s]", env); /* where the default comes from */
    fputc('\n', f);
}

static void help_table(const donto_opt *t, FILE *f, int col) {
    for (; t->type != DONTO_OPT_END; t++) {
        if (t->type == DONTO_OPT_INCLUDE) {
            if (t->help) fprintf(f, "\n%s\n", t->help);
            help_table(t->dest, f, col);
            continue;
        }
        char b[256];
        left_part(t, b, sizeof b);
        help_line(f, b, t->help, t->env, col);
    }
}

void donto_opt_help(const donto_opt_cmd *cmd, FILE *f) {
    if (cmd->head) fputs(cmd->head, f);
    int col = (int)widest(cmd->opts) + 4; /* two to indent, two between */
    help_table(cmd->opts, f, col);
    if (!find_long(cmd->opts, "help", 4)) help_line(f, find_short(cmd->opts, 'h') ? "--help" : "-h, --help", "this help", NULL, col);
    if (cmd->foot) fputs(cmd->foot, f);
}

int donto_opt_main(const donto_opt_cmd *cmd, int argc, char **argv, int *npos) {
    donto_err err = {0};
    int r = donto_opt_parse(cmd->opts, argc, argv, npos, &err);
    if (r == 1) {
        donto_opt_help(cmd, stdout);
        return 0;
    }
    if (r < 0) {
        fprintf(stderr, "%s: %s (see --help)\n", cmd->prog, err.msg);
        return 2;
    }
    return -1;
}

int donto_opt_usage_error(const donto_opt_cmd *cmd, const char *fmt, ...) {
    char msg[DONTO_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see --help)\n", cmd->prog, msg);
    return 2;
}
