/* `donto-embed embed` end to end on a tiny generated model (tests/tinybert.h),
 * in process (donto_embed_cmd) with stderr captured to a file:
 *   - progress: measured in tokens, a periodic line when stderr is not a
 *     terminal (--progress-every), silenced by --quiet (issue 16, point 5);
 *   - bad input lines: reported with their line number; the command fails
 *     without leaving an output behind, or with --skip-bad skips, counts and
 *     names them; the input format is decided once (--format-in, the file
 *     name, the first line), never per line (point 6);
 *   - the token limit in force and where it came from, in --stats (point 10);
 *   - the precision run when none is asked for (issue 19): int16 on a CPU
 *     with a SIMD int16 GEMM (every kernel set from avx2 up), fp32 on the
 *     portable set, in --stats with where it came from. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/util.h"
#include "tinybert.h"

static char root[256];
static char model[512];
static char errbuf[1 << 16];

/* root/name (a ring of buffers: good for the few paths of one call) */
static const char *path_in(const char *name) {
    static char p[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", root, name);
    return p[k];
}

static void write_file(const char *name, const char *text) {
    FILE *f = fopen(path_in(name), "w");
    fputs(text, f);
    fclose(f);
}

static long file_size(const char *name) {
    struct stat sb;
    return stat(path_in(name), &sb) == 0 ? (long)sb.st_size : -1;
}

/* Run `embed ARGS...` (NULL-terminated) with stderr to a file, read back into
 * errbuf. Returns the exit code. */
static int embed(const char *arg0, ...) {
    char *argv[64];
    int argc = 0;
    argv[argc++] = "embed";
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && argc < 63; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    const char *ep = path_in("stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(ep, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 2);
    close(fd);
    int rc = donto_embed_cmd(argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(ep, "r");
    size_t n = f ? fread(errbuf, 1, sizeof errbuf - 1, f) : 0;
    errbuf[n] = 0;
    if (f) fclose(f);
    return rc;
}

static int count_lines_with(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* 4 long texts, then 36 short ones: after the first chunk of 4 the share of
 * tokens done is far above the share of items done. */
static void make_progress_input(void) {
    FILE *f = fopen(path_in("progress.jsonl"), "w");
    for (int i = 0; i < 40; i++)
        fprintf(f, "{\"id\": %d, \"text\": \"%s\"}\n", i,
                i < 4 ? "the quick brown fox is a kind of animal, the dog is a kind of animal"
                      : "hello");
    fclose(f);
}

static void test_progress(void) {
    make_progress_input();
    char in[600], out[600];
    snprintf(in, sizeof in, "%s", path_in("progress.jsonl"));
    snprintf(out, sizeof out, "%s", path_in("progress.out.jsonl"));
    /* A line after every batch: stderr is a file here, not a terminal. */
    int rc = embed("--model", model, "--in", in, "--out", out, "--chunk", "4", "--progress-every", "0", NULL);
    CHECK_EQ_INT(rc, 0);
    fprintf(stderr, "--- progress, stderr to a file:\n%s---\n", errbuf);
    CHECK(count_lines_with(errbuf, " tokens (") >= 5, "periodic progress lines: %s", errbuf);
    CHECK_STR_CONTAINS(errbuf, "40/40 items");
    CHECK_STR_CONTAINS(errbuf, "tokens (100.0%)");
    CHECK_STR_CONTAINS(errbuf, "ETA");
    CHECK(strchr(errbuf, '\r') == NULL, "no carriage returns in a log file");
    /* The first line, after the 4 long texts: 4/40 items (10%), but far more
     * than 10% of the tokens. */
    const char *l1 = strstr(errbuf, "4/40 items");
    CHECK(l1 != NULL, "a line after the first chunk: %s", errbuf);
    if (l1) {
        long done = 0, total = 0;
        double pct = 0;
        CHECK(sscanf(l1, "4/40 items, %ld/%ld tokens (%lf%%)", &done, &total, &pct) == 3, "line: %.80s", l1);
        CHECK(total > 0 && pct > 30.0 && pct < 60.0, "token share %.1f%% (%ld/%ld)", pct, done, total);
    }
    rc = embed("--model", model, "--in", in, "--out", out, "--chunk", "4", "--progress-every", "0", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(errbuf[0] == 0, "--quiet prints nothing: %s", errbuf);
    /* The default period (10 s) prints nothing on a run this short. */
    rc = embed("--model", model, "--in", in, "--out", out, NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(strstr(errbuf, " tokens (") == NULL, "no progress line on a short run: %s", errbuf);
}

/* 30 JSONL lines, line 25 has no "text", line 27 is not JSON. */
static void make_bad_input(const char *name) {
    FILE *f = fopen(path_in(name), "w");
    for (int i = 1; i <= 30; i++) {
        if (i == 25) fprintf(f, "{\"id\": \"r%d\", \"txt\": \"the dog\"}\n", i);
        else if (i == 27) fputs("the dog is a kind of animal\n", f);
        else fprintf(f, "{\"id\": \"r%d\", \"text\": \"the cat %d\"}\n", i, i);
    }
    fclose(f);
}

static void test_bad_lines(void) {
    make_bad_input("bad.jsonl");
    char in[600];
    snprintf(in, sizeof in, "%s", path_in("bad.jsonl"));
    /* Default: fail, name the line, leave no output (the npy header would
     * otherwise disagree with the rows written so far). */
    unlink(path_in("bad.npy"));
    int rc = embed("--model", model, "--in", in, "--out", path_in("bad.npy"), "--format", "npy", "--chunk", "10",
                   "--quiet", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(errbuf, "line 25");
    CHECK_STR_CONTAINS(errbuf, "\"text\"");
    CHECK(file_size("bad.npy") == -1, "no half-written output left: %ld bytes", file_size("bad.npy"));
    /* An older output of the same name survives a failed run. */
    write_file("old.npy", "previous");
    rc = embed("--model", model, "--in", in, "--out", path_in("old.npy"), "--format", "npy", "--chunk", "10",
               "--quiet", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_EQ_INT(file_size("old.npy"), 8);

    /* --skip-bad: the 28 good lines, in order; the bad ones counted and named. */
    rc = embed("--model", model, "--in", in, "--out", path_in("skip.npy"), "--format", "npy", "--chunk", "10",
               "--skip-bad", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    fprintf(stderr, "--- --skip-bad:\n%s---\n", errbuf);
    CHECK_STR_CONTAINS(errbuf, "skipped 2 bad input lines");
    CHECK_STR_CONTAINS(errbuf, "25, 27");
    CHECK_EQ_INT(file_size("skip.npy"), 128 + 28 * 16 * 4);
    FILE *f = fopen(path_in("skip.npy"), "rb");
    char hdr[129] = {0};
    if (f) {
        CHECK(fread(hdr, 1, 128, f) == 128, "npy header");
        fclose(f);
    }
    CHECK_STR_CONTAINS(hdr + 10, "'shape': (28, 16)");
    rc = embed("--model", model, "--in", in, "--out", path_in("skip.jsonl"), "--skip-bad", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    char *ids;
    size_t len;
    donto_err err = {0};
    if (donto_read_file(path_in("skip.jsonl"), &ids, &len, &err) == 0) {
        CHECK_EQ_INT(count_lines_with(ids, "\n"), 28);
        CHECK_STR_CONTAINS(ids, "{\"id\":\"r24\"");
        CHECK_STR_CONTAINS(ids, "{\"id\":\"r26\"");
        CHECK(strstr(ids, "\"r25\"") == NULL && strstr(ids, "\"r27\"") == NULL, "bad lines have no row");
        free(ids);
    } else {
        CHECK(0, "%s", err.msg);
    }

    /* A .jsonl file whose first line is plain text: JSONL by its name, so
     * line 1 is a bad line, not a reason to embed every line as text. */
    write_file("first_plain.jsonl", "some notes\n{\"id\": 1, \"text\": \"the dog\"}\n{\"id\": 2, \"text\": \"a cat\"}\n");
    rc = embed("--model", model, "--in", path_in("first_plain.jsonl"), "--out", path_in("fp.jsonl"), "--quiet", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(errbuf, "line 1");
    /* The same lines in a .txt file are three texts (a JSON-looking line in
     * a text file is text), and --format-in jsonl makes line 1 bad. */
    write_file("notes.txt", "some notes\n{\"id\": 1, \"text\": \"the dog\"}\n{\"id\": 2, \"text\": \"a cat\"}\n");
    rc = embed("--model", model, "--in", path_in("notes.txt"), "--out", path_in("notes.out"), "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    if (donto_read_file(path_in("notes.out"), &ids, &len, &err) == 0) {
        CHECK_EQ_INT(count_lines_with(ids, "\n"), 3);
        CHECK_STR_CONTAINS(ids, "{\"id\":2,");
        free(ids);
    }
    rc = embed("--model", model, "--in", path_in("notes.txt"), "--out", path_in("notes.out"), "--format-in", "jsonl",
               "--quiet", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(errbuf, "line 1");
    /* A file of another name decides from its first non-empty line. */
    write_file("auto.in", "\n{\"id\": 7, \"text\": \"the dog\"}\nplain words\n");
    rc = embed("--model", model, "--in", path_in("auto.in"), "--out", path_in("auto.out"), "--quiet", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(errbuf, "line 3");
    rc = embed("--model", model, "--in", path_in("auto.in"), "--out", path_in("auto.out"), "--format-in", "text",
               "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
}

/* The token limit in force and where it came from, in --stats. */
static void test_limits(void) {
    tiny_spec s;
    tiny_default(&s); /* max_position_embeddings 64 */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/st_model", root);
    tiny_write(dir, &s);
    char p[700];
    snprintf(p, sizeof p, "%s/sentence_bert_config.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"max_seq_length\": 16, \"do_lower_case\": false}\n", f);
    fclose(f);
    write_file("long.txt", "the dog the dog the dog the dog the dog the dog the dog the dog the dog the dog\n");
    int rc = embed("--model", dir, "--in", path_in("long.txt"), "--out", path_in("long.out"), "--stats", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    fprintf(stderr, "--- --stats:\n%s---\n", errbuf);
    CHECK_STR_CONTAINS(errbuf, "\"tokens\":16,");
    CHECK_STR_CONTAINS(errbuf, "\"max_len\":16,");
    CHECK_STR_CONTAINS(errbuf, "\"max_len_from\":\"sentence_bert_config.json max_seq_length\"");
    rc = embed("--model", dir, "--in", path_in("long.txt"), "--out", path_in("long.out"), "--stats", "--quiet",
               "--max-len", "40", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(errbuf, "\"tokens\":22,");
    CHECK_STR_CONTAINS(errbuf, "\"max_len\":40,");
    CHECK_STR_CONTAINS(errbuf, "\"max_len_from\":\"--max-len\"");
    /* Over max_position_embeddings: refused, not silently lowered. */
    rc = embed("--model", dir, "--in", path_in("long.txt"), "--out", path_in("long.out"), "--quiet", "--max-len",
               "100", NULL);
    CHECK_EQ_INT(rc, 1);
    CHECK_STR_CONTAINS(errbuf, "max_position_embeddings 64");
}

/* Whole-file equality (the f32 outputs of two runs). */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The precision when --precision is not given: int16 where the kernel set
 * has a SIMD int16 GEMM (over the 0.999 gate on every parity text of both
 * models, 1.1-1.9x fp32), fp32 on the portable set (its int16 GEMM is plain
 * C), bf16 on CUDA; the vectors are those of an explicit --precision int16
 * run. */
static void test_default_precision(void) {
    char in[600];
    snprintf(in, sizeof in, "%s", path_in("progress.jsonl")); /* test_progress made it */
    int rc = embed("--model", model, "--in", in, "--out", path_in("dp_portable.f32"), "--format", "f32", "--isa",
                   "portable", "--stats", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(errbuf, "\"precision\":\"fp32\",\"precision_from\":\"default\"");
    rc = embed("--model", model, "--in", in, "--out", path_in("dp_fp32.f32"), "--format", "f32", "--precision", "fp32",
               "--stats", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(errbuf, "\"precision\":\"fp32\",\"precision_from\":\"--precision\"");
    CHECK_EQ_INT(donto_precision_default(DONTO_DEVICE_CPU, DONTO_ISA_PORTABLE), DONTO_PREC_FP32);
    CHECK_EQ_INT(donto_precision_default(DONTO_DEVICE_CUDA, DONTO_ISA_AUTO), DONTO_PREC_BF16);
    if (!donto_isa_supported(DONTO_ISA_AVX2)) {
        fprintf(stderr, "SKIP default precision int16: this CPU has no AVX2 (the portable set runs fp32)\n");
        return;
    }
    rc = embed("--model", model, "--in", in, "--out", path_in("dp_default.f32"), "--format", "f32", "--stats",
               "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    fprintf(stderr, "--- --stats, no --precision:\n%s---\n", errbuf);
    CHECK_STR_CONTAINS(errbuf, "\"precision\":\"int16\",\"precision_from\":\"default\"");
    rc = embed("--model", model, "--in", in, "--out", path_in("dp_int16.f32"), "--format", "f32", "--precision",
               "int16", "--quiet", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(same_file(path_in("dp_default.f32"), path_in("dp_int16.f32")), "the default run's vectors are int16's");
    CHECK(!same_file(path_in("dp_default.f32"), path_in("dp_fp32.f32")), "and not fp32's");
    CHECK_EQ_INT(donto_precision_default(DONTO_DEVICE_CPU, DONTO_ISA_AVX2), DONTO_PREC_INT16);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/donto-test-embed-cmd-%d", (int)getpid());
    mkdir(root, 0755);
    tiny_spec s;
    tiny_default(&s);
    s.pooling = 1;
    snprintf(model, sizeof model, "%s/model", root);
    if (tiny_write(model, &s) != 0) {
        fprintf(stderr, "cannot write %s\n", model);
        return 1;
    }
    test_progress();
    test_bad_lines();
    test_limits();
    test_default_precision();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return check_report("test_embed_cmd");
}
