/*
 * `donto-embed recall`: semantic search over the vectors in the database
 * (what workers submitted), exact for small collections and through the
 * ANN index beside the database for large ones (include/donto/recall.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/cli.h"
#include "donto/encoder.h"
#include "donto/fetch.h"
#include "donto/recall.h"
#include "donto/store.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: donto-embed recall [options] QUERY\n"
            "\n"
            "Embed QUERY and print the stored items nearest to it (cosine similarity),\n"
            "best first, with their texts (the item id when the text is unknown).\n"
            "\n"
            "  --db URL            SQLite file path, or postgres://... (default " DONTO_STORE_DEFAULT_URL ")\n"
            "  -k N                how many items (default 10, at most 1000)\n"
            "  --target T          claim | predicate | entity | memory_chunk (default claim)\n"
            "  --model DIR         the model that embeds the query (default " DONTO_FETCH_DEFAULT_DIR ")\n"
            "  --model-name NAME   the stored vectors' model (default: DIR/model_name.txt, else\n"
            "                      BAAI/bge-small-en-v1.5: what workers store)\n"
            "  --exact             always scan every vector (no ANN index)\n"
            "  --ann-min N         use the ANN index from N vectors on (default %d)\n"
            "  --index PREFIX      ANN files at PREFIX.<target>.faiss/.ids (default: the SQLite\n"
            "                      file's path; PostgreSQL: in memory only)\n"
            "  --json              one JSON object: {\"query\", \"target\", \"ann\", \"hits\": [...]}\n"
            "  --threads N         encoder threads (default: all CPUs)\n",
            DONTO_RECALL_ANN_MIN);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "donto-embed recall: %s needs a whole number in %ld..%ld (got '%s')\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int donto_recall_cmd(int argc, char **argv) {
    enum { O_DB = 256, O_TARGET, O_MODEL, O_MODEL_NAME, O_EXACT, O_ANN_MIN, O_INDEX, O_JSON, O_THREADS };
    static const struct option lo[] = {{"db", required_argument, 0, O_DB},
                                       {"target", required_argument, 0, O_TARGET},
                                       {"model", required_argument, 0, O_MODEL},
                                       {"model-name", required_argument, 0, O_MODEL_NAME},
                                       {"exact", no_argument, 0, O_EXACT},
                                       {"ann-min", required_argument, 0, O_ANN_MIN},
                                       {"index", required_argument, 0, O_INDEX},
                                       {"json", no_argument, 0, O_JSON},
                                       {"threads", required_argument, 0, O_THREADS},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *db = DONTO_STORE_DEFAULT_URL, *target_s = "claim", *model_dir = DONTO_FETCH_DEFAULT_DIR;
    const char *model_name = NULL, *index = NULL;
    long k = 10, ann_min = 0, threads = 0;
    int json = 0, exact = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "k:h", lo, NULL)) != -1) {
        switch (ch) {
        case O_DB: db = optarg; break;
        case O_TARGET: target_s = optarg; break;
        case O_MODEL: model_dir = optarg; break;
        case O_MODEL_NAME: model_name = optarg; break;
        case O_EXACT: exact = 1; break;
        case O_INDEX: index = optarg; break;
        case O_JSON: json = 1; break;
        case 'k':
            if (parse_long("-k", optarg, 1, 1000, &k)) return 2;
            break;
        case O_ANN_MIN:
            if (parse_long("--ann-min", optarg, 1, 1L << 40, &ann_min)) return 2;
            break;
        case O_THREADS:
            if (parse_long("--threads", optarg, 1, 1024, &threads)) return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1 || !*argv[optind]) {
        usage(stderr);
        return 2;
    }
    int target = donto_target_parse(target_s);
    if (target < 0) {
        fprintf(stderr, "donto-embed recall: unknown --target '%s' (claim|predicate|entity|memory_chunk)\n", target_s);
        return 2;
    }
    const char *query = argv[optind];
    donto_err err = {0};
    int rc = 1;
    donto_store *s = NULL;
    donto_encoder *enc = NULL;
    donto_recall *r = NULL;
    donto_recall_hit *hits = NULL;
    size_t nh = 0;
    char *name = donto_recall_model_name(model_dir, model_name);
    char *prefix = index ? donto_xstrdup(index) : donto_recall_default_prefix(db);
    donto_encoder_opts eo;
    donto_encoder_default_opts(&eo);
    eo.threads = (int)threads;
    if (donto_store_open(db, &s, &err) || donto_encoder_open(model_dir, &eo, &enc, &err)) goto fail;
    donto_recall_opts ro = {.model_name = name, .index_prefix = prefix, .ann_min = (size_t)ann_min, .exact = exact};
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
        printf("query: %s  (%s, %zu vectors of %s, %s)\n", query, donto_target_name(target), info.collection, name,
               info.ann ? "ANN index" : "exact");
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
    return rc;
}
