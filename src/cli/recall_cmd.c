/*
 * `donto-embed recall`: semantic search over the vectors in the database
 * (what workers submitted), exact for small collections and through the
 * ANN index beside the database for large ones (include/donto/recall.h).
 * --verified-only reads only vectors the coordinator verified
 * (docs/trust.md), through its own index files.
 */
#define _GNU_SOURCE /* asprintf */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/fetch.h"
#include "donto/models.h"
#include "donto/opt.h"
#include "donto/recall.h"
#include "donto/store.h"
#include "donto/wire.h"

#include "cli_db.h"

#define STR_(x) #x
#define STR(x) STR_(x)


/* Where recall looks for model directories when --model is not given. */
#define MODELS_ROOT "models"

static int is_model_dir(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%.4096s/config.json", dir);
    FILE *f = fopen(path, "r");
    if (f) fclose(f);
    return f != NULL;
}

/* The model directories under MODELS_ROOT, as "a, b" ("" when none). */
static void list_models(char *out, size_t cap) {
    out[0] = 0;
    DIR *d = opendir(MODELS_ROOT);
    if (!d) return;
    size_t len = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char dir[300];
        snprintf(dir, sizeof dir, MODELS_ROOT "/%.256s", e->d_name);
        if (!is_model_dir(dir)) continue;
        int k = snprintf(out + len, cap - len, "%s" MODELS_ROOT "/%s", len ? ", " : "", e->d_name);
        if (k < 0 || (size_t)k >= cap - len) break;
        len += (size_t)k;
    }
    closedir(d);
}

/* The directory of the model named name under MODELS_ROOT: the one whose
 * model_name.txt names it, else MODELS_ROOT/<the name after its last '/'>
 * (BAAI/bge-small-en-v1.5 -> models/bge-small-en-v1.5; it may not exist).
 * Heap string. */
static char *model_dir_for(const char *name) {
    DIR *d = opendir(MODELS_ROOT);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char dir[300];
        snprintf(dir, sizeof dir, MODELS_ROOT "/%.256s", e->d_name);
        if (!is_model_dir(dir)) continue;
        char *n = donto_recall_model_name(dir, NULL);
        int same = !strcmp(n, name);
        free(n);
        if (same) {
            closedir(d);
            return donto_xstrdup(dir);
        }
    }
    if (d) closedir(d);
    const char *base = strrchr(name, '/');
    char *dir = NULL;
    if (asprintf(&dir, MODELS_ROOT "/%s", base ? base + 1 : name) < 0) dir = NULL;
    return dir ? dir : donto_xstrdup(DONTO_FETCH_DEFAULT_DIR);
}

/* Without --model-name: the model whose vectors of target the database
 * holds (most of them when several), among the catalog's and those of the
 * directories under MODELS_ROOT; NULL when none. Heap string. */
static char *stored_model(donto_store *s, donto_target t) {
    char *best = NULL;
    int64_t best_n = 0;
    const char *names[64];
    char *owned[32];
    size_t n = 0, no = 0;
    for (int i = 0; donto_model_name_at(i) && n < 32; i++) names[n++] = donto_model_name_at(i);
    DIR *d = opendir(MODELS_ROOT);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && no < 32) {
        if (e->d_name[0] == '.') continue;
        char dir[300];
        snprintf(dir, sizeof dir, MODELS_ROOT "/%.256s", e->d_name);
        if (is_model_dir(dir)) names[n++] = owned[no++] = donto_recall_model_name(dir, NULL);
    }
    if (d) closedir(d);
    for (size_t i = 0; i < n; i++) {
        int64_t count = 0, max_created = 0;
        donto_err err = {0};
        if (donto_store_vectors_mark(s, t, names[i], INT64_MIN, &count, &max_created, &err)) continue;
        if (count > best_n) {
            best_n = count;
            free(best);
            best = donto_xstrdup(names[i]);
        }
    }
    for (size_t i = 0; i < no; i++) free(owned[i]);
    return best;
}

int donto_recall_cmd(int argc, char **argv) {
    const char *db = DONTO_STORE_DEFAULT_URL, *model_dir = NULL;
    const char *model_name = NULL, *index = NULL;
    int64_t k = 10, ann_min = 0;
    double index_memory_gb = 0;
    int json = 0, exact = 0, threads = 0, target = DONTO_TARGET_CLAIM, verified_only = 0, isa = DONTO_ISA_AUTO;
    int vectors = DONTO_VECTORS_OWN;
    const donto_opt opts[] = {
        {DONTO_OPT_STRING, "db", 0, &db, .metavar = "URL",
         .help = "SQLite file path, or postgres://... (default " DONTO_STORE_DEFAULT_URL ")"},
        {DONTO_OPT_INT64, NULL, 'k', &k, .min = 1, .max = 1000, .metavar = "N", .help = "how many items (default 10, at most 1000)"},
        {DONTO_OPT_CHOICE, "target", 0, &target, .choices = donto_target_names, .metavar = "T",
         .help = "claim | predicate | entity | memory_chunk (default claim)"},
        {DONTO_OPT_STRING, "model", 0, &model_dir, .metavar = "DIR",
         .help = "the model that embeds the query (default: the directory under\n"
                 "./models of the model whose vectors the database holds, e.g.\n"
                 "models/all-MiniLM-L6-v2 after `make run`; else " DONTO_FETCH_DEFAULT_DIR ")"},
        {DONTO_OPT_STRING, "model-name", 0, &model_name, .metavar = "NAME",
         .help = "the stored vectors' model (default: DIR/model_name.txt, else\n"
                 "BAAI/bge-small-en-v1.5: what workers store)"},
        {DONTO_OPT_FLAG, "exact", 0, &exact, .help = "always scan every vector (no ANN index)"},
        {DONTO_OPT_INT64, "ann-min", 0, &ann_min, .min = 1, .max = 1LL << 40, .metavar = "N",
         .help = "use the ANN index from N vectors on (default " STR(DONTO_RECALL_ANN_MIN) ")"},
        {DONTO_OPT_DOUBLE, "index-memory-gb", 0, &index_memory_gb, .fmin = 0, .fmax = 1e6, .fmin_open = 1,
         .metavar = "GB",
         .help = "bound on each recall index's memory, in GB: the index kind (IVF-Flat,\n"
                 "IVF-PQ96, IVF-PQ48) is chosen to fit; a collection even the smallest\n"
                 "cannot hold is refused with a message (default: no bound; docs/recall.md)"},
        {DONTO_OPT_STRING, "index", 0, &index, .metavar = "PREFIX",
         .help = "ANN files at PREFIX.<target>.faiss/.ids (default: the SQLite\n"
                 "file's path; PostgreSQL: in memory only)"},
        CLI_VECTORS_OPT(&vectors),
        {DONTO_OPT_FLAG, "verified-only", 0, &verified_only,
         .help = "only vectors the coordinator verified (and those stored without\n"
                 "a token, by the operator's own tools); the default index files\n"
                 "are then PREFIX.verified.<target>.*"},
        {DONTO_OPT_FLAG, "json", 0, &json, .help = "one JSON object: {\"query\", \"target\", \"ann\", \"hits\": [...]}"},
        {DONTO_OPT_INT, "threads", 0, &threads, .min = 1, .max = 1024, .metavar = "N",
         .help = "encoder threads (default: all CPUs)"},
        {DONTO_OPT_CHOICE, "isa", 0, &isa, .choices = donto_isa_names, .metavar = "NAME|auto",
         .help = "auto (default: the best this CPU runs) | portable | avx2 | avxvnni |\n"
                 "avx512 | avx512vnni | avx512bf16 (the CPU kernel set, docs/engine.md)"},
        {0}};
    const donto_opt_cmd cmd = {"donto-embed recall",
                               "usage: donto-embed recall [options] QUERY\n"
                               "\n"
                               "Embed QUERY and print the stored items nearest to it (cosine similarity),\n"
                               "best first, with their texts (the item id when the text is unknown).\n"
                               "\n",
                               opts, NULL};
    int npos, orc = donto_opt_main(&cmd, argc, argv, &npos);
    if (orc >= 0) return orc;
    if (npos > 1) return donto_opt_usage_error(&cmd, "one QUERY, got %d arguments", npos);
    if (npos != 1 || !*argv[1]) return donto_opt_usage_error(&cmd, "a QUERY is required");
    const char *query = argv[1];
    if (!donto_proto_utf8_valid(query)) return donto_opt_usage_error(&cmd, "the QUERY is not valid UTF-8");
    donto_err err = {0};
    if (donto_isa_check((donto_isa)isa, &err))
        return donto_opt_usage_error(&cmd, "--isa %s: %s", donto_isa_name((donto_isa)isa), err.msg);
    int rc = 1;
    donto_store *s = NULL;
    donto_encoder *enc = NULL;
    donto_recall *r = NULL;
    donto_recall_hit *hits = NULL;
    size_t nh = 0;
    char *name = NULL, *prefix = NULL, *dir = NULL;
    int vrc = cli_open_db_vectors("recall", db, CLI_DB_SUBSTRATE, vectors, &s);
    if (vrc) return vrc;
    const char *whose = NULL; /* why that directory, when recall chose it */
    if (!model_dir) {
        /* The stored vectors' model, and its directory under ./models. */
        if (model_name && *model_name) {
            name = donto_xstrdup(model_name);
            whose = "the model named by --model-name";
        } else if ((name = stored_model(s, (donto_target)target)) != NULL) {
            whose = "the model of the stored vectors";
        } else {
            name = donto_xstrdup(DONTO_DEFAULT_MODEL);
            whose = "the default model (no stored vectors of a model known here)";
        }
        dir = model_dir_for(name);
        model_dir = dir;
    } else {
        name = donto_recall_model_name(model_dir, model_name);
    }
    if (!is_model_dir(model_dir)) {
        char have[2048];
        list_models(have, sizeof have);
        char why[1024] = "";
        if (whose) snprintf(why, sizeof why, " for %s, %s", whose, name);
        fprintf(stderr,
                "donto-embed recall: no model in %s%s (%s/config.json not found); pass --model DIR, the "
                "directory of the model that embeds the query (%s%s)\n",
                model_dir, why, model_dir,
                *have ? "found: " : "none under ./" MODELS_ROOT "; `make model` or `donto-embed model fetch`", have);
        donto_store_close(s);
        free(name);
        free(dir);
        return 1;
    }
    prefix = index ? donto_xstrdup(index) : donto_recall_default_prefix(db);
    if (verified_only && prefix && !index) {
        /* An index of the verified vectors only, beside the one of all of
         * them: sharing the files would rebuild one from scratch each time the
         * other is used. */
        char *v = NULL;
        if (asprintf(&v, "%s.verified", prefix) < 0) v = NULL;
        free(prefix);
        prefix = v;
        if (!prefix) {
            fprintf(stderr, "donto-embed recall: out of memory\n");
            donto_store_close(s);
            free(name);
            free(dir);
            return 1;
        }
    }
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = threads;
    eo.isa = (donto_isa)isa;
    if (donto_encoder_open(model_dir, &eo, &enc, &err)) goto fail;
    if (verified_only) donto_store_set_verified_only(s, 1); /* every read of vectors through s */
    donto_recall_opts ro = {.model_name = name, .index_prefix = prefix, .ann_min = (size_t)ann_min, .exact = exact,
                            .index_memory_gb = index_memory_gb};
    if (donto_recall_open(enc, &ro, &r, &err)) goto fail;
    donto_recall_info info;
    if (donto_recall_query(r, s, (donto_target)target, query, (size_t)k, &hits, &nh, &info, &err)) goto fail;
    if (json) {
        char *out = donto_recall_json(query, (donto_target)target, name, &info, hits, nh);
        if (!out) {
            donto_seterr(&err, "cannot format the answer (invalid UTF-8 in a stored text?)");
            goto fail;
        }
        puts(out);
        free(out);
    } else {
        printf("query: %s  (%s, %zu %svectors of %s, %s)\n", query, donto_target_name(target), info.collection,
               verified_only ? "verified " : "", name, info.ann ? "ANN index" : "exact");
        if (!nh) printf("  (no stored vectors)\n");
        for (size_t i = 0; i < nh; i++)
            printf("  %.4f  %s\n", (double)hits[i].score, hits[i].text ? hits[i].text : hits[i].item_id);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "donto-embed recall: %s\n", err.msg);
out:
    donto_recall_hits_free(hits, nh);
    donto_recall_close(r);
    donto_encoder_close(enc);
    donto_store_close(s);
    free(name);
    free(prefix);
    free(dir);
    return rc;
}
