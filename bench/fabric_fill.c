/* bench_fabric_fill DB_URL FILE.jsonl MODEL_NAME [TARGET]
 *
 * Queue every {"id", "text"} line of FILE for MODEL_NAME (target claim by
 * default) in a migrated store: the input of bench/fabric. Prints the number
 * of items queued. Bench-only: the product's way in is `donto-embed load` +
 * `donto-embed enqueue` from the substrate. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "donto/store.h"
#include "donto/substrate.h"

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: bench_fabric_fill DB_URL FILE.jsonl MODEL_NAME [TARGET]\n");
        return 2;
    }
    int target = argc == 5 ? donto_target_parse(argv[4]) : DONTO_TARGET_CLAIM;
    if (target < 0) {
        fprintf(stderr, "bench_fabric_fill: unknown target %s\n", argv[4]);
        return 2;
    }
    donto_err e = {0};
    donto_store *s = NULL;
    if (donto_store_open(argv[1], &s, &e) || donto_substrate_migrate(s, &e)) {
        fprintf(stderr, "bench_fabric_fill: %s\n", e.msg);
        donto_store_close(s);
        return 1;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        donto_store_close(s);
        return 1;
    }
    enum { BATCH = 5000 };
    donto_enqueue_item *it = calloc(BATCH, sizeof *it);
    json_t **keep = calloc(BATCH, sizeof *keep);
    char *line = NULL;
    size_t cap = 0, n = 0, total = 0, lineno = 0;
    int rc = 0;
    for (;;) {
        ssize_t len = getline(&line, &cap, f);
        if (len > 0) {
            lineno++;
            json_error_t je;
            json_t *o = json_loads(line, 0, &je);
            const char *id = json_string_value(json_object_get(o, "id"));
            const char *text = json_string_value(json_object_get(o, "text"));
            if (!id || !text) {
                fprintf(stderr, "bench_fabric_fill: %s:%zu: not {\"id\": str, \"text\": str}\n", argv[2], lineno);
                json_decref(o);
                rc = 1;
                break;
            }
            keep[n] = o;
            it[n++] = (donto_enqueue_item){(donto_target)target, id, text, argv[3]};
        }
        if (n == BATCH || (len <= 0 && n > 0)) {
            size_t added = 0;
            if (donto_store_enqueue(s, it, n, &added, &e)) {
                fprintf(stderr, "bench_fabric_fill: enqueue: %s\n", e.msg);
                rc = 1;
            }
            total += added;
            for (size_t i = 0; i < n; i++) json_decref(keep[i]);
            n = 0;
            if (rc) break;
        }
        if (len <= 0) break;
    }
    for (size_t i = 0; i < n; i++) json_decref(keep[i]);
    free(line);
    free(it);
    free(keep);
    fclose(f);
    donto_store_close(s);
    if (!rc) printf("%zu\n", total);
    return rc;
}
