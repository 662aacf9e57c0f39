/* /embed/metrics text (src/coord/metrics.c): the Prometheus exposition of
 * the queue's figures, and the escaping of untrusted label values. The HTTP
 * side (admin token, counters, the live figures) is driven by
 * tests/ref/admin_page_test.py. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "admin.h"

static char *label(const char *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    donto_prom_label(f, s);
    fclose(f);
    return buf;
}

int main(void) {
    char *l = label("a\\b\"c\nd}e,f=g");
    CHECK(l && !strcmp(l, "a\\\\b\\\"c\\nd}e,f=g"), "escaped as '%s'", l ? l : "(null)");
    free(l);
    l = label("");
    CHECK(l && !strcmp(l, ""), "empty label");
    free(l);

    donto_target_stats st[DONTO_TARGET_N];
    memset(st, 0, sizeof st);
    st[DONTO_TARGET_CLAIM] = (donto_target_stats){.embedded = 10, .pending = 1, .leased = 2, .total = 13};
    st[DONTO_TARGET_MEMORY_CHUNK] = (donto_target_stats){.embedded = 0, .pending = 5, .leased = 0, .total = 5};
    donto_contributor con[2] = {
        {.worker_id = "gpu \"7\"\n#x", .total = 9, .rejected = 3, .last_seen = 1700000000123LL},
        {.worker_id = "plain", .total = 1, .rejected = 0, .last_seen = 5},
    };
    char *t = donto_metrics_text(st, 1, 42, 1, con, 2);
    CHECK(t != NULL, "metrics text");
    if (t) {
        CHECK_STR_CONTAINS(t, "# TYPE donto_embed_items gauge\n");
        CHECK_STR_CONTAINS(t, "donto_embed_items{target=\"claim\",state=\"embedded\"} 10\n");
        CHECK_STR_CONTAINS(t, "donto_embed_items{target=\"claim\",state=\"pending\"} 1\n");
        CHECK_STR_CONTAINS(t, "donto_embed_items{target=\"claim\",state=\"leased\"} 2\n");
        CHECK_STR_CONTAINS(t, "donto_embed_target_items{target=\"claim\"} 13\n");
        CHECK_STR_CONTAINS(t, "donto_embed_items{target=\"memory_chunk\",state=\"pending\"} 5\n");
        CHECK_STR_CONTAINS(t, "donto_embed_target_items{target=\"predicate\"} 0\n");
        CHECK_STR_CONTAINS(t, "donto_embed_items_per_minute 42\n");
        CHECK_STR_CONTAINS(t, "# TYPE donto_embed_contributor_vectors_total counter\n");
        CHECK_STR_CONTAINS(t, "donto_embed_contributor_vectors_total{worker_id=\"gpu \\\"7\\\"\\n#x\"} 9\n");
        CHECK_STR_CONTAINS(t, "donto_embed_contributor_rejected_total{worker_id=\"gpu \\\"7\\\"\\n#x\"} 3\n");
        CHECK_STR_CONTAINS(t, "donto_embed_contributor_last_seen_seconds{worker_id=\"gpu \\\"7\\\"\\n#x\"} 1700000000.123\n");
        CHECK_STR_CONTAINS(t, "donto_embed_contributor_last_seen_seconds{worker_id=\"plain\"} 0.005\n");
        /* A worker id cannot start a line of its own (no raw line feed inside a label). */
        CHECK(strstr(t, "\n#x") == NULL, "raw line feed from a worker id");
        /* Every line is a comment or a sample ending in a number. */
        int lines = 0;
        for (char *p = t; *p; lines++) {
            char *e = strchr(p, '\n');
            CHECK(e != NULL, "last line not terminated");
            if (!e) break;
            CHECK(p[0] == '#' || (e > p && ((e[-1] >= '0' && e[-1] <= '9'))), "odd line %.*s", (int)(e - p), p);
            p = e + 1;
        }
        CHECK(lines > 20, "only %d lines", lines);
        free(t);
    }
    t = donto_metrics_text(st, 0, 0, 0, NULL, 0);
    CHECK(t != NULL, "metrics text without optional parts");
    if (t) {
        CHECK(strstr(t, "items_per_minute") == NULL, "rate shown without a rate");
        CHECK(strstr(t, "contributor") == NULL, "contributors shown without any");
        free(t);
    }
    t = donto_metrics_text(st, 1, 0, 1, NULL, 0);
    CHECK(t && strstr(t, "# TYPE donto_embed_contributor_vectors_total counter\n"), "empty contributor family");
    free(t);
    return check_report("test_metrics");
}
