/*
 * donto_model_fetch end to end, against tests/fetch_server.py on 127.0.0.1.
 *
 *   fetch_test <scenario> <python> <fetch_server.py>
 *
 * Each scenario makes its own temp dir (fake repo + destination), starts its
 * own server on an ephemeral loopback port, and reads the server's request
 * log to see what the client actually asked for (Range headers, repeated
 * downloads, the bearer token).  A watchdog alarm bounds the run, and the
 * server exits by itself (--lifetime) should this process die first.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "donto/cli.h"
#include "donto/fetch.h"

extern char **environ;

#define PATHMAX 1024
#define WATCHDOG_S 50
#define SERVER_LIFETIME_S "55"

/* ------------------------------------------------------------ helpers */

/* snprintf that refuses to truncate: a cut-off path would test the wrong file. */
static void fmt_into(char *out, size_t n, const char *fmt, ...) DONTO_PRINTF(3, 4);
static void fmt_into(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= n) {
        fprintf(stderr, "fetch_test: string too long for its buffer (%s)\n", fmt);
        exit(2);
    }
}

static void sha_hex(const void *data, size_t n, char out[65]) {
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(data, n, d, &len, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++) fmt_into(out + 2 * i, 3, "%02x", d[i]);
}

static void mkdirs(const char *path) {
    char tmp[PATHMAX];
    fmt_into(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void write_file(const char *path, const void *data, size_t n) {
    char dir[PATHMAX];
    fmt_into(dir, sizeof dir, "%s", path);
    char *s = strrchr(dir, '/');
    if (s) {
        *s = 0;
        mkdirs(dir);
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
}

/* Whole file into a heap buffer (NUL-terminated); NULL if absent. */
static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while ((r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) b = realloc(b, (cap *= 2) + 1);
    }
    fclose(f);
    b[len] = 0;
    if (n) *n = len;
    return b;
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static int file_equals(const char *path, const void *data, size_t n) {
    size_t m = 0;
    char *b = read_all(path, &m);
    int eq = b && m == n && memcmp(b, data, n) == 0;
    free(b);
    return eq;
}

static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[PATHMAX];
                fmt_into(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int count_sub(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* ------------------------------------------------------------ fixture */

enum { NFILES = 4, BIG = 3 * 1024 * 1024 + 12345 };

typedef struct fixture {
    char root[PATHMAX];  /* temp dir for everything */
    char srv[PATHMAX];   /* server document root */
    char dest[PATHMAX];  /* fetch destination */
    char log[PATHMAX];   /* server request log */
    char url[128];       /* http://127.0.0.1:PORT */
    pid_t pid;
    const char *python, *script;
    /* the fake repo test/model@v1 */
    char *data[NFILES];
    size_t size[NFILES];
    char sha[NFILES][65];
    donto_fetch_file table[NFILES];
} fixture;

static const char *const fx_paths[NFILES] = {"config.json", "1_Pooling/config.json", "vocab.txt",
                                             "model.safetensors"};

static void fx_make_data(fixture *fx) {
    const char *cfg = "{\n  \"hidden_size\": 8,\n  \"num_hidden_layers\": 1\n}\n";
    const char *pool = "{\n  \"pooling_mode_cls_token\": true\n}\n";
    fx->data[0] = strdup(cfg);
    fx->size[0] = strlen(cfg);
    fx->data[1] = strdup(pool);
    fx->size[1] = strlen(pool);
    /* vocab: enough lines to span several network chunks */
    size_t cap = 64 * 1024, n = 0;
    char *v = malloc(cap);
    for (int i = 0; n + 32 < cap; i++) n += (size_t)snprintf(v + n, cap - n, "tok%05d\n", i);
    fx->data[2] = v;
    fx->size[2] = n;
    /* "weights": pseudo-random, so that a shifted or repeated range cannot
     * hash the same by accident */
    unsigned char *w = malloc(BIG);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < BIG; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        w[i] = (unsigned char)(s >> 24);
    }
    fx->data[3] = (char *)w;
    fx->size[3] = BIG;
    for (int i = 0; i < NFILES; i++) {
        sha_hex(fx->data[i], fx->size[i], fx->sha[i]);
        fx->table[i] = (donto_fetch_file){fx_paths[i], (int64_t)fx->size[i], fx->sha[i]};
    }
}

static void fx_serve_file(fixture *fx, const char *repo, const char *rev, const char *path,
                          const void *data, size_t n) {
    char p[PATHMAX];
    fmt_into(p, sizeof p, "%s/%s/resolve/%s/%s", fx->srv, repo, rev, path);
    write_file(p, data, n);
}

/* Start the server with extra flags (NULL-terminated list). */
static void fx_start(fixture *fx, const char *const *flags) {
    char portfile[PATHMAX];
    fmt_into(portfile, sizeof portfile, "%s/port", fx->root);
    const char *argv[32];
    int a = 0;
    argv[a++] = fx->python;
    argv[a++] = fx->script;
    argv[a++] = "--root";
    argv[a++] = fx->srv;
    argv[a++] = "--port-file";
    argv[a++] = portfile;
    argv[a++] = "--log";
    argv[a++] = fx->log;
    argv[a++] = "--lifetime";
    argv[a++] = SERVER_LIFETIME_S;
    for (int i = 0; flags && flags[i] && a < 31; i++) argv[a++] = flags[i];
    argv[a] = NULL;
    write_file(fx->log, "", 0);
    if (posix_spawn(&fx->pid, fx->python, NULL, NULL, (char *const *)argv, environ) != 0) {
        fprintf(stderr, "cannot start %s %s: %s\n", fx->python, fx->script, strerror(errno));
        exit(2);
    }
    for (int i = 0; i < 1500; i++) { /* up to 15 s on a loaded machine */
        char *p = read_all(portfile, NULL);
        if (p) {
            fmt_into(fx->url, sizeof fx->url, "http://127.0.0.1:%d", atoi(p));
            free(p);
            return;
        }
        int st;
        if (waitpid(fx->pid, &st, WNOHANG) == fx->pid) {
            fprintf(stderr, "fetch_server.py exited before listening (status %d)\n", st);
            exit(2);
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "fetch_server.py did not start listening in 15 s\n");
    kill(fx->pid, SIGKILL);
    exit(2);
}

static void fx_init(fixture *fx, const char *python, const char *script) {
    memset(fx, 0, sizeof *fx);
    fx->python = python;
    fx->script = script;
    const char *tmp = getenv("TMPDIR");
    fmt_into(fx->root, sizeof fx->root, "%s/donto-fetch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->root)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        exit(2);
    }
    fmt_into(fx->srv, sizeof fx->srv, "%s/srv", fx->root);
    fmt_into(fx->dest, sizeof fx->dest, "%s/dest/model", fx->root);
    fmt_into(fx->log, sizeof fx->log, "%s/server.log", fx->root);
    mkdirs(fx->srv);
    fx_make_data(fx);
    for (int i = 0; i < NFILES; i++)
        fx_serve_file(fx, "test/model", "v1", fx_paths[i], fx->data[i], fx->size[i]);
}

static void fx_stop(fixture *fx) {
    if (fx->pid > 0) {
        kill(fx->pid, SIGTERM);
        waitpid(fx->pid, NULL, 0);
        fx->pid = 0;
    }
}

static void fx_free(fixture *fx) {
    fx_stop(fx);
    for (int i = 0; i < NFILES; i++) free(fx->data[i]);
    if (check_failures)
        fprintf(stderr, "kept %s for inspection\n", fx->root);
    else
        rm_rf(fx->root);
}

static char *fx_log(fixture *fx) {
    char *s = read_all(fx->log, NULL);
    return s ? s : strdup("");
}

static void fx_clear_log(fixture *fx) { write_file(fx->log, "", 0); }

static void dest_path(fixture *fx, const char *rel, const char *suffix, char *out) {
    fmt_into(out, PATHMAX, "%s/%s%s", fx->dest, rel, suffix);
}

/* Progress events seen by a run: checks that they are coherent. */
typedef struct seen {
    int start, data, done, skip, bad;
    uint64_t last_done;
} seen;

static void on_progress(void *user, const donto_fetch_progress *p) {
    seen *s = user;
    switch (p->event) {
    case DONTO_FETCH_EV_START: s->start++; s->last_done = p->done; break;
    case DONTO_FETCH_EV_DATA:
        s->data++;
        if (p->done < s->last_done || (p->total && p->done > p->total)) s->bad++;
        s->last_done = p->done;
        break;
    case DONTO_FETCH_EV_DONE:
        s->done++;
        if (p->done != p->total || !p->sha256 || strlen(p->sha256) != 64) s->bad++;
        break;
    case DONTO_FETCH_EV_SKIP: s->skip++; break;
    }
    if (p->index >= p->count || !p->path) s->bad++;
}

static donto_fetch_opts fx_opts(fixture *fx, donto_fetch_stats *st, seen *sn) {
    donto_fetch_opts o = {0};
    o.repo = "test/model";
    o.revision = "v1";
    o.dest_dir = fx->dest;
    o.endpoint = fx->url;
    o.files = fx->table;
    o.n_files = NFILES;
    o.stats = st;
    o.progress = on_progress;
    o.progress_user = sn;
    /* short, so a bug that stalls shows up as a failure, not a CTest timeout */
    o.connect_timeout_s = 5;
    o.low_speed_time_s = 10;
    return o;
}

static void check_all_installed(fixture *fx) {
    for (int i = 0; i < NFILES; i++) {
        char p[PATHMAX], q[PATHMAX];
        dest_path(fx, fx_paths[i], "", p);
        dest_path(fx, fx_paths[i], ".part", q);
        CHECK(file_equals(p, fx->data[i], fx->size[i]), "%s differs from the served file", p);
        CHECK(!exists(q), "%s left behind", q);
    }
}

static uint64_t total_bytes(fixture *fx) {
    uint64_t t = 0;
    for (int i = 0; i < NFILES; i++) t += fx->size[i];
    return t;
}

/* ------------------------------------------- reconstructed pinned files */

/* bge-small-en-v1.5's small files, rebuilt from their published content.
 * Their digests are the default table's pins: if these ever disagree, a pin
 * (or this reconstruction) is wrong. */
static const struct {
    const char *path;
    const char *text;
} bge_small[] = {
    {"config.json",
     "{\n"
     "  \"_name_or_path\": \"/root/.cache/torch/sentence_transformers/BAAI_bge-small-en/\",\n"
     "  \"architectures\": [\n"
     "    \"BertModel\"\n"
     "  ],\n"
     "  \"attention_probs_dropout_prob\": 0.1,\n"
     "  \"classifier_dropout\": null,\n"
     "  \"hidden_act\": \"gelu\",\n"
     "  \"hidden_dropout_prob\": 0.1,\n"
     "  \"hidden_size\": 384,\n"
     "  \"id2label\": {\n"
     "    \"0\": \"LABEL_0\"\n"
     "  },\n"
     "  \"initializer_range\": 0.02,\n"
     "  \"intermediate_size\": 1536,\n"
     "  \"label2id\": {\n"
     "    \"LABEL_0\": 0\n"
     "  },\n"
     "  \"layer_norm_eps\": 1e-12,\n"
     "  \"max_position_embeddings\": 512,\n"
     "  \"model_type\": \"bert\",\n"
     "  \"num_attention_heads\": 12,\n"
     "  \"num_hidden_layers\": 12,\n"
     "  \"pad_token_id\": 0,\n"
     "  \"position_embedding_type\": \"absolute\",\n"
     "  \"torch_dtype\": \"float32\",\n"
     "  \"transformers_version\": \"4.30.0\",\n"
     "  \"type_vocab_size\": 2,\n"
     "  \"use_cache\": true,\n"
     "  \"vocab_size\": 30522\n"
     "}\n"},
    {"1_Pooling/config.json",
     "{\n"
     "  \"word_embedding_dimension\": 384,\n"
     "  \"pooling_mode_cls_token\": true,\n"
     "  \"pooling_mode_mean_tokens\": false,\n"
     "  \"pooling_mode_max_tokens\": false,\n"
     "  \"pooling_mode_mean_sqrt_len_tokens\": false\n"
     "}"},
    {"modules.json",
     "[\n"
     "  {\n"
     "    \"idx\": 0,\n"
     "    \"name\": \"0\",\n"
     "    \"path\": \"\",\n"
     "    \"type\": \"sentence_transformers.models.Transformer\"\n"
     "  },\n"
     "  {\n"
     "    \"idx\": 1,\n"
     "    \"name\": \"1\",\n"
     "    \"path\": \"1_Pooling\",\n"
     "    \"type\": \"sentence_transformers.models.Pooling\"\n"
     "  },\n"
     "  {\n"
     "    \"idx\": 2,\n"
     "    \"name\": \"2\",\n"
     "    \"path\": \"2_Normalize\",\n"
     "    \"type\": \"sentence_transformers.models.Normalize\"\n"
     "  }\n"
     "]"},
    {"sentence_bert_config.json",
     "{\n"
     "  \"max_seq_length\": 512,\n"
     "  \"do_lower_case\": true\n"
     "}"},
    {"config_sentence_transformers.json",
     "{\n"
     "  \"__version__\": {\n"
     "    \"sentence_transformers\": \"2.2.2\",\n"
     "    \"transformers\": \"4.28.1\",\n"
     "    \"pytorch\": \"1.13.0+cu117\"\n"
     "  }\n"
     "}"},
    {"special_tokens_map.json",
     "{\n"
     "  \"cls_token\": \"[CLS]\",\n"
     "  \"mask_token\": \"[MASK]\",\n"
     "  \"pad_token\": \"[PAD]\",\n"
     "  \"sep_token\": \"[SEP]\",\n"
     "  \"unk_token\": \"[UNK]\"\n"
     "}\n"},
    {"tokenizer_config.json",
     "{\n"
     "  \"clean_up_tokenization_spaces\": true,\n"
     "  \"cls_token\": \"[CLS]\",\n"
     "  \"do_basic_tokenize\": true,\n"
     "  \"do_lower_case\": true,\n"
     "  \"mask_token\": \"[MASK]\",\n"
     "  \"model_max_length\": 512,\n"
     "  \"never_split\": null,\n"
     "  \"pad_token\": \"[PAD]\",\n"
     "  \"sep_token\": \"[SEP]\",\n"
     "  \"strip_accents\": null,\n"
     "  \"tokenize_chinese_chars\": true,\n"
     "  \"tokenizer_class\": \"BertTokenizer\",\n"
     "  \"unk_token\": \"[UNK]\"\n"
     "}\n"},
};
enum { NBGE = sizeof bge_small / sizeof bge_small[0] };

static const donto_fetch_file *default_entry(const char *path) {
    size_t n;
    const donto_fetch_file *t = donto_fetch_default_files(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].path, path)) return &t[i];
    return NULL;
}

/* ------------------------------------------------------------ scenarios */

static void sc_pins(void) {
    size_t n;
    const donto_fetch_file *t = donto_fetch_default_files(&n);
    CHECK(n >= 4, "default table has %zu entries", n);
    const char *needed[] = {"config.json", "vocab.txt", "model.safetensors",
                            "1_Pooling/config.json", "tokenizer.json"};
    for (size_t k = 0; k < sizeof needed / sizeof needed[0]; k++)
        CHECK(default_entry(needed[k]) != NULL, "default table lacks %s", needed[k]);
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i].size > 0, "%s: size %lld", t[i].path, (long long)t[i].size);
        CHECK(t[i].sha256 && strlen(t[i].sha256) == 64 &&
                  strspn(t[i].sha256, "0123456789abcdef") == 64,
              "%s: bad pinned digest", t[i].path);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(t[i].path, t[j].path), "%s twice", t[i].path);
    }
    CHECK(strlen(DONTO_FETCH_DEFAULT_REVISION) == 40 &&
              strspn(DONTO_FETCH_DEFAULT_REVISION, "0123456789abcdef") == 40,
          "default revision is not a commit id");
    for (size_t i = 0; i < NBGE; i++) {
        const donto_fetch_file *e = default_entry(bge_small[i].path);
        CHECK(e != NULL, "%s not pinned", bge_small[i].path);
        if (!e) continue;
        char h[65];
        sha_hex(bge_small[i].text, strlen(bge_small[i].text), h);
        CHECK(strcmp(h, e->sha256) == 0, "%s: rebuilt content hashes to %s, pin says %s",
              e->path, h, e->sha256);
        CHECK_EQ_INT(strlen(bge_small[i].text), e->size);
    }
    /* vocab.txt is bert-base-uncased's, as shipped with all-MiniLM-L6-v2. */
    const char *src = getenv("DONTO_SOURCE_DIR");
    char p[PATHMAX];
    fmt_into(p, sizeof p, "%s/models/all-MiniLM-L6-v2/vocab.txt", src ? src : ".");
    size_t vn = 0;
    char *v = read_all(p, &vn);
    if (v) {
        const donto_fetch_file *e = default_entry("vocab.txt");
        char h[65];
        sha_hex(v, vn, h);
        CHECK(e && strcmp(h, e->sha256) == 0 && (int64_t)vn == e->size,
              "vocab.txt pin does not match %s (%s, %zu bytes)", p, h, vn);
        free(v);
    } else {
        fprintf(stderr, "note: %s absent (make model); vocab.txt pin not re-derived\n", p);
    }
}

static void sc_full(fixture *fx) {
    static const char *const flags[] = {"--redirect", NULL};
    fx_start(fx, flags);
    /* The endpoint from the environment, the token too. */
    setenv("HF_ENDPOINT", fx->url, 1);
    setenv("HF_TOKEN", "test-token-123", 1);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    o.endpoint = NULL;
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    unsetenv("HF_ENDPOINT");
    unsetenv("HF_TOKEN");
    CHECK(rc == 0, "fetch failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_downloaded, NFILES);
    CHECK_EQ_INT(st.files_skipped, 0);
    CHECK_EQ_INT(st.files_resumed, 0);
    CHECK_EQ_INT(st.files_unverified, 0);
    CHECK_EQ_INT(st.bytes_downloaded, total_bytes(fx));
    CHECK_EQ_INT(sn.start, NFILES);
    CHECK_EQ_INT(sn.done, NFILES);
    CHECK_EQ_INT(sn.bad, 0);
    CHECK(sn.data >= NFILES, "only %d data events", sn.data);
    char *log = fx_log(fx);
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/config.json ");
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/1_Pooling/config.json ");
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/model.safetensors range=- auth=Bearer "
                            "test-token-123 status=302");
    CHECK_STR_CONTAINS(log, "GET /_lfs/test/model/resolve/v1/model.safetensors ");
    CHECK_STR_CONTAINS(log, "auth=Bearer test-token-123");
    CHECK_EQ_INT(count_sub(log, "\n"), NFILES + 1); /* + the redirect */
    free(log);
}

static void sc_resume(fixture *fx) {
    fx_start(fx, NULL);
    char part[PATHMAX], final[PATHMAX];
    dest_path(fx, "model.safetensors", ".part", part);
    dest_path(fx, "model.safetensors", "", final);
    const size_t have = 1000000;

    /* 1. A good prefix: only the rest is requested. */
    write_file(part, fx->data[3], have);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "resume failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_resumed, 1);
    CHECK_EQ_INT(st.bytes_downloaded, total_bytes(fx) - have);
    char *log = fx_log(fx);
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/model.safetensors range=bytes=1000000- "
                            "auth=- status=206");
    CHECK_EQ_INT(count_sub(log, "model.safetensors"), 1);
    free(log);
    CHECK_EQ_INT(sn.bad, 0);

    /* 2. A corrupted prefix: the final digest catches it, the .part goes,
     *    and the next run succeeds from zero. */
    unlink(final);
    char *junk = malloc(have);
    memset(junk, 0xAA, have);
    write_file(part, junk, have);
    free(junk);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "corrupt prefix was accepted");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: SHA-256 mismatch");
    CHECK_STR_CONTAINS(err.msg, fx->sha[3]);
    CHECK(!exists(final) && !exists(part), "final or .part left after a mismatch");
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "refetch after mismatch failed: %s", err.msg);
    check_all_installed(fx);

    /* 3. A complete .part (killed between download and rename): installed
     *    without asking the server. */
    rename(final, part);
    fx_clear_log(fx);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "complete .part not installed: %s", err.msg);
    check_all_installed(fx);
    log = fx_log(fx);
    CHECK_EQ_INT(count_sub(log, "\n"), 0);
    free(log);

    /* 4. A .part longer than the pinned size is garbage: start over. */
    unlink(final);
    char *longer = malloc(BIG + 10);
    memcpy(longer, fx->data[3], BIG);
    memset(longer + BIG, 0, 10);
    write_file(part, longer, BIG + 10);
    free(longer);
    fx_clear_log(fx);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "over-long .part: %s", err.msg);
    check_all_installed(fx);
    log = fx_log(fx);
    CHECK_STR_CONTAINS(log, "model.safetensors range=- ");
    free(log);
}

static void sc_range_ignored(fixture *fx) {
    static const char *const flags[] = {"--ignore-range", NULL};
    fx_start(fx, flags);
    char part[PATHMAX];
    dest_path(fx, "model.safetensors", ".part", part);
    /* A junk prefix proves the restart really truncates: appending the full
     * body after it could not produce the right file. */
    const size_t have = 1000000;
    char *junk = malloc(have);
    memset(junk, 0x55, have);
    write_file(part, junk, have);
    free(junk);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "fetch failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_resumed, 0);
    CHECK_EQ_INT(st.bytes_downloaded, total_bytes(fx));
    CHECK_EQ_INT(sn.bad, 0);
    char *log = fx_log(fx);
    CHECK_STR_CONTAINS(log, "model.safetensors range=bytes=1000000- auth=- status=200");
    free(log);
}

static void sc_digest_mismatch(fixture *fx) {
    fx_start(fx, NULL);
    char wrong[65];
    memcpy(wrong, fx->sha[2], 65);
    wrong[10] = wrong[10] == '0' ? '1' : '0';
    fx->table[2].sha256 = wrong;
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "a wrong digest was accepted");
    CHECK_STR_CONTAINS(err.msg, "vocab.txt: SHA-256 mismatch");
    CHECK_STR_CONTAINS(err.msg, wrong);
    CHECK_STR_CONTAINS(err.msg, fx->sha[2]);
    char p[PATHMAX], q[PATHMAX];
    dest_path(fx, "vocab.txt", "", p);
    dest_path(fx, "vocab.txt", ".part", q);
    CHECK(!exists(p), "%s installed despite the mismatch", p);
    CHECK(!exists(q), "%s left after the mismatch", q);
    /* Files before it are fine; the run stopped at the bad one. */
    dest_path(fx, "config.json", "", p);
    CHECK(file_equals(p, fx->data[0], fx->size[0]), "config.json missing");
    dest_path(fx, "model.safetensors", "", p);
    CHECK(!exists(p), "fetch went on past the failure");
    CHECK_EQ_INT(st.files_downloaded, 2);
}

static void sc_size_mismatch(fixture *fx) {
    fx_start(fx, NULL);
    char p[PATHMAX], q[PATHMAX];
    dest_path(fx, "model.safetensors", "", p);
    dest_path(fx, "model.safetensors", ".part", q);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    /* The server has fewer bytes than pinned. */
    fx->table[3].size = BIG + 1;
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "short file accepted");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: size mismatch");
    CHECK(!exists(p) && !exists(q), "file left after a size mismatch");
    /* The server sends more than pinned: stopped as soon as it overflows. */
    fx->table[3].size = BIG - 1000;
    rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "long file accepted");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: server sent more than the pinned");
    CHECK(!exists(p) && !exists(q), "file left after an overflow");
}

static void sc_http_404(fixture *fx) {
    fx_start(fx, NULL);
    donto_fetch_file t[NFILES + 1];
    memcpy(t, fx->table, sizeof fx->table);
    t[NFILES] = (donto_fetch_file){"sub/missing.bin", 10, fx->sha[0]};
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    o.files = t;
    o.n_files = NFILES + 1;
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "404 accepted");
    CHECK_STR_CONTAINS(err.msg, "sub/missing.bin: HTTP 404");
    CHECK_STR_CONTAINS(err.msg, "/test/model/resolve/v1/sub/missing.bin");
    char p[PATHMAX], q[PATHMAX];
    dest_path(fx, "sub/missing.bin", "", p);
    dest_path(fx, "sub/missing.bin", ".part", q);
    CHECK(!exists(p) && !exists(q), "something left for a 404");
    check_all_installed(fx); /* the others came before it */

    /* A wrong revision fails on the first file, naming the URL.  (With the
     * files present it would succeed: their digests are what counts.) */
    rm_rf(fx->dest);
    o.files = fx->table;
    o.n_files = NFILES;
    o.revision = "no-such-rev";
    rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "unknown revision accepted");
    CHECK_STR_CONTAINS(err.msg, "config.json: HTTP 404 from ");
    CHECK_STR_CONTAINS(err.msg, "/test/model/resolve/no-such-rev/config.json");

    /* Nobody listening: a clear connection error, no hang. */
    fx_stop(fx);
    o.revision = "v1";
    rm_rf(fx->dest);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "fetch from a closed port succeeded");
    CHECK_STR_CONTAINS(err.msg, "config.json: download from ");
}

static void sc_present_skipped(fixture *fx) {
    fx_start(fx, NULL);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    CHECK(donto_model_fetch(&o, &err) == 0, "first fetch: %s", err.msg);
    fx_clear_log(fx);
    seen sn2 = {0};
    o.progress_user = &sn2;
    CHECK(donto_model_fetch(&o, &err) == 0, "second fetch: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_skipped, NFILES);
    CHECK_EQ_INT(st.files_downloaded, 0);
    CHECK_EQ_INT(st.bytes_downloaded, 0);
    CHECK_EQ_INT(sn2.skip, NFILES);
    CHECK_EQ_INT(sn2.start, 0);
    char *log = fx_log(fx);
    CHECK(log[0] == 0, "requests made for present files:\n%s", log);
    free(log);
}

static void sc_present_corrupt(fixture *fx) {
    fx_start(fx, NULL);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    CHECK(donto_model_fetch(&o, &err) == 0, "first fetch: %s", err.msg);
    char p[PATHMAX];
    dest_path(fx, "vocab.txt", "", p);
    char *junk = malloc(fx->size[2]);
    memset(junk, 'x', fx->size[2]); /* same size, other bytes: only a hash sees it */
    write_file(p, junk, fx->size[2]);
    free(junk);
    dest_path(fx, "config.json", "", p);
    write_file(p, "{}", 2); /* other size */
    fx_clear_log(fx);
    CHECK(donto_model_fetch(&o, &err) == 0, "refetch: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_downloaded, 2);
    CHECK_EQ_INT(st.files_skipped, NFILES - 2);
    char *log = fx_log(fx);
    CHECK_EQ_INT(count_sub(log, "\n"), 2);
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/vocab.txt range=- ");
    CHECK_STR_CONTAINS(log, "GET /test/model/resolve/v1/config.json range=- ");
    free(log);
}

static void sc_interrupted(fixture *fx) {
    static const char *const flags[] = {"--drop-after", "1000000", NULL};
    fx_start(fx, flags);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "a dropped connection went unnoticed");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: download from ");
    CHECK_STR_CONTAINS(err.msg, "run again to resume");
    char p[PATHMAX], q[PATHMAX];
    dest_path(fx, "model.safetensors", "", p);
    dest_path(fx, "model.safetensors", ".part", q);
    long long have = file_size(q);
    CHECK(!exists(p), "partial file installed");
    CHECK(have > 0 && have <= 1000000, ".part has %lld bytes", have);
    fx_clear_log(fx);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "resume after a drop failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_resumed, 1);
    CHECK_EQ_INT(st.files_skipped, NFILES - 1);
    char *log = fx_log(fx);
    char want[128];
    fmt_into(want, sizeof want, "model.safetensors range=bytes=%lld- auth=- status=206", have);
    CHECK_STR_CONTAINS(log, want);
    free(log);
}

/* Two fetches into one directory must not interleave bytes in a .part:
 * the second one is refused while another process holds the lock. */
static void sc_part_locked(fixture *fx) {
    fx_start(fx, NULL);
    char q[PATHMAX];
    dest_path(fx, "model.safetensors", ".part", q);
    write_file(q, fx->data[3], 1000);
    int ready[2];
    if (pipe(ready) != 0) exit(2);
    pid_t child = fork();
    if (child == 0) { /* the "other fetch": lock, report, wait to be killed */
        alarm(WATCHDOG_S); /* not inherited: bound this process too */
        int fd = open(q, O_RDWR);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fd < 0 || fcntl(fd, F_SETLK, &fl) != 0) _exit(1);
        if (write(ready[1], "k", 1) != 1) _exit(1);
        pause();
        _exit(0);
    }
    char ch = 0;
    CHECK(read(ready[0], &ch, 1) == 1 && ch == 'k', "lock holder did not start");
    close(ready[0]);
    close(ready[1]);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "fetch wrote into a .part another process holds");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors.part is locked by another fetch");
    CHECK_EQ_INT(file_size(q), 1000); /* untouched */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    rc = donto_model_fetch(&o, &err); /* lock gone: resumes */
    CHECK(rc == 0, "fetch after the lock holder exited: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_resumed, 1);
}

static void sc_stall_timeout(fixture *fx) {
    static const char *const flags[] = {"--stall-after", "500000", "--stall-seconds", "30", NULL};
    fx_start(fx, flags);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    o.low_speed_time_s = 1;
    o.low_speed_bytes = 1000;
    donto_err err = {0};
    double t0 = donto_now();
    int rc = donto_model_fetch(&o, &err);
    double dt = donto_now() - t0;
    CHECK(rc != 0, "a stalled transfer succeeded");
    CHECK(dt < 15, "stall detected only after %.1f s", dt);
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: download from ");
    char q[PATHMAX];
    dest_path(fx, "model.safetensors", ".part", q);
    CHECK(file_size(q) > 0, ".part not kept after a stall");
}

static void sc_write_error(fixture *fx) {
    fx_start(fx, NULL); /* before the limit: the server must not inherit it */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000000; /* like a disk that fills up at 1 MB */
    signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write(2) instead of dying */
    setrlimit(RLIMIT_FSIZE, &lim);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc != 0, "write failure went unnoticed");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors: writing ");
    CHECK_STR_CONTAINS(err.msg, "model.safetensors.part: ");
    CHECK_STR_CONTAINS(err.msg, strerror(EFBIG));
    CHECK_STR_CONTAINS(err.msg, "kept for a later resume");
    char q[PATHMAX];
    dest_path(fx, "model.safetensors", ".part", q);
    long long have = file_size(q);
    CHECK(have > 0 && have <= 1000000, ".part has %lld bytes", have);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "resume after freeing space failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_resumed, 1);
}

static void sc_unpinned(fixture *fx) {
    fx_start(fx, NULL);
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    donto_err err = {0};
    fx->table[2].sha256 = NULL;
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc != 0, "unpinned file accepted without no_verify");
    CHECK_STR_CONTAINS(err.msg, "vocab.txt: no pinned SHA-256");
    CHECK_STR_CONTAINS(err.msg, "--no-verify");
    CHECK(!exists(fx->dest), "refusal touched the disk");
    char *log = fx_log(fx);
    CHECK(log[0] == 0, "refusal touched the network:\n%s", log);
    free(log);

    o.no_verify = 1;
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "no_verify fetch failed: %s", err.msg);
    check_all_installed(fx);
    CHECK_EQ_INT(st.files_unverified, 1);
    CHECK_EQ_INT(st.files_downloaded, NFILES);
    /* Unpinned files cannot be trusted as present: fetched again. */
    fx_clear_log(fx);
    rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "second no_verify fetch failed: %s", err.msg);
    CHECK_EQ_INT(st.files_downloaded, 1);
    CHECK_EQ_INT(st.files_skipped, NFILES - 1);

    /* The default table's pins do not apply to another repo. */
    donto_fetch_opts d = {0};
    d.repo = "test/model";
    d.revision = "v1";
    d.endpoint = fx->url;
    d.dest_dir = fx->dest;
    d.quiet = 1;
    fx_clear_log(fx);
    rc = donto_model_fetch(&d, &err);
    CHECK(rc != 0, "default table used unverified for another repo");
    CHECK_STR_CONTAINS(err.msg, "no pinned SHA-256 for test/model at revision v1");
    log = fx_log(fx);
    CHECK(log[0] == 0, "refusal touched the network:\n%s", log);
    free(log);

    /* Malformed tables are refused before anything happens. */
    struct {
        donto_fetch_file f;
        const char *msg;
    } bad[] = {
        {{"../evil", 1, fx->sha[0]}, "component"},
        {{"/etc/passwd", 1, fx->sha[0]}, "absolute"},
        {{"a//b", 1, fx->sha[0]}, "component"},
        {{"x", 1, "abc"}, "not 64 hex digits"},
        {{"config.json", 1, fx->sha[0]}, "listed twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        donto_fetch_file t[2] = {fx->table[0], bad[i].f};
        o.files = t;
        o.n_files = 2;
        err.msg[0] = 0;
        rc = donto_model_fetch(&o, &err);
        CHECK(rc != 0, "bad table entry '%s' accepted", bad[i].f.path);
        CHECK_STR_CONTAINS(err.msg, bad[i].msg);
    }
    log = fx_log(fx);
    CHECK(log[0] == 0, "a refused table touched the network:\n%s", log);
    free(log);
}

/* The real default table, repo and revision, served from loopback with the
 * small files rebuilt byte for byte: the pins verify them end to end. */
static void serve_bge_small(fixture *fx) {
    for (size_t i = 0; i < NBGE; i++)
        fx_serve_file(fx, DONTO_FETCH_DEFAULT_REPO, DONTO_FETCH_DEFAULT_REVISION,
                      bge_small[i].path, bge_small[i].text, strlen(bge_small[i].text));
}

static void sc_pinned_default(fixture *fx) {
    serve_bge_small(fx);
    fx_start(fx, NULL);
    donto_fetch_file t[NBGE];
    for (size_t i = 0; i < NBGE; i++) {
        const donto_fetch_file *e = default_entry(bge_small[i].path);
        CHECK(e != NULL, "%s not in the default table", bge_small[i].path);
        t[i] = e ? *e : (donto_fetch_file){bge_small[i].path, -1, NULL};
    }
    donto_fetch_stats st;
    seen sn = {0};
    donto_fetch_opts o = fx_opts(fx, &st, &sn);
    o.repo = NULL;
    o.revision = NULL; /* defaults: the pinned repo and commit */
    o.files = t;
    o.n_files = NBGE;
    donto_err err = {0};
    int rc = donto_model_fetch(&o, &err);
    CHECK(rc == 0, "pinned default files: %s", err.msg);
    CHECK_EQ_INT(st.files_downloaded, NBGE);
    char *log = fx_log(fx);
    CHECK_STR_CONTAINS(log, "GET /" DONTO_FETCH_DEFAULT_REPO "/resolve/" DONTO_FETCH_DEFAULT_REVISION
                            "/1_Pooling/config.json ");
    free(log);
    for (size_t i = 0; i < NBGE; i++) {
        char p[PATHMAX];
        dest_path(fx, bge_small[i].path, "", p);
        CHECK(file_equals(p, bge_small[i].text, strlen(bge_small[i].text)), "%s differs", p);
    }
}

static int run_cli(const char *const *args) {
    char *argv[16];
    int n = 0;
    argv[n++] = "fetch";
    for (; args[n - 1] && n < 15; n++) argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    return donto_model_fetch_main(n, argv);
}

static void sc_cli(fixture *fx) {
    serve_bge_small(fx);
    size_t nd;
    const donto_fetch_file *dt = donto_fetch_default_files(&nd);
    /* Every default file name, with made-up bytes, for the --no-verify run. */
    for (size_t i = 0; i < nd; i++) fx_serve_file(fx, "test/model", "v1", dt[i].path, "x", 1);
    fx_start(fx, NULL);

    CHECK_EQ_INT(run_cli((const char *[]){"--help", NULL}), 0);
    CHECK_EQ_INT(run_cli((const char *[]){"--bogus", NULL}), 2);
    CHECK_EQ_INT(run_cli((const char *[]){"--dir", NULL}), 2);
    CHECK_EQ_INT(run_cli((const char *[]){"--repo=", NULL}), 2);
    char *log = fx_log(fx);
    CHECK(log[0] == 0, "usage errors touched the network");
    free(log);

    /* The default table, pinned repo and commit: the rebuilt small files
     * verify; the first file the server lacks is a 404 and exit 1. */
    char d1[PATHMAX];
    fmt_into(d1, sizeof d1, "%s/cli-pinned", fx->root);
    CHECK_EQ_INT(run_cli((const char *[]){"--dir", d1, "--endpoint", fx->url, NULL}), 1);
    for (size_t i = 0; i < NBGE; i++) {
        char p[PATHMAX];
        fmt_into(p, sizeof p, "%s/%s", d1, bge_small[i].path);
        CHECK(file_equals(p, bge_small[i].text, strlen(bge_small[i].text)), "%s not installed", p);
    }
    char p[PATHMAX];
    fmt_into(p, sizeof p, "%s/model.safetensors", d1);
    CHECK(!exists(p), "%s appeared", p);

    /* Another repo: its files have no pins, so --no-verify is required. */
    char d2[PATHMAX];
    fmt_into(d2, sizeof d2, "%s/cli-other", fx->root);
    fx_clear_log(fx);
    CHECK_EQ_INT(run_cli((const char *[]){"--dir", d2, "--endpoint", fx->url, "--repo",
                                          "test/model", "--revision=v1", "--quiet", NULL}),
                 1);
    log = fx_log(fx);
    CHECK(log[0] == 0, "unverified refusal touched the network");
    free(log);
    CHECK_EQ_INT(run_cli((const char *[]){"--dir", d2, "--endpoint", fx->url, "--repo",
                                          "test/model", "--revision=v1", "--no-verify", NULL}),
                 0);
    for (size_t i = 0; i < nd; i++) {
        fmt_into(p, sizeof p, "%s/%s", d2, dt[i].path);
        CHECK(file_equals(p, "x", 1), "%s not installed", p);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCENARIO [PYTHON SERVER.PY]\n", argv[0]);
        return 2;
    }
    alarm(WATCHDOG_S); /* a hang fails the test instead of blocking CTest */
    /* The caller's own hub settings must not leak into the scenarios. */
    unsetenv("HF_ENDPOINT");
    unsetenv("HF_TOKEN");
    const char *sc = argv[1];
    char name[64];
    fmt_into(name, sizeof name, "fetch_%s", sc);
    if (!strcmp(sc, "pins")) {
        sc_pins();
        return check_report(name);
    }
    if (argc < 4) {
        fprintf(stderr, "%s needs PYTHON and SERVER.PY\n", sc);
        return 2;
    }
    static const struct {
        const char *name;
        void (*fn)(fixture *);
    } scenarios[] = {
        {"full", sc_full},
        {"resume", sc_resume},
        {"range_ignored", sc_range_ignored},
        {"digest_mismatch", sc_digest_mismatch},
        {"size_mismatch", sc_size_mismatch},
        {"http_404", sc_http_404},
        {"present_skipped", sc_present_skipped},
        {"present_corrupt", sc_present_corrupt},
        {"interrupted", sc_interrupted},
        {"part_locked", sc_part_locked},
        {"stall_timeout", sc_stall_timeout},
        {"write_error", sc_write_error},
        {"unpinned", sc_unpinned},
        {"pinned_default", sc_pinned_default},
        {"cli", sc_cli},
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (strcmp(sc, scenarios[i].name)) continue;
        static fixture fx; /* big; one per process */
        fx_init(&fx, argv[2], argv[3]);
        scenarios[i].fn(&fx);
        fx_free(&fx);
        return check_report(name);
    }
    fprintf(stderr, "unknown scenario '%s'\n", sc);
    return 2;
}
