/*
 * donto-accel coordinator: /metrics in Prometheus text exposition format
 * (version 0.0.4). Pure: figures in, text out.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "admin.h"

void donto_prom_label(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '\\') fputs("\\\\", f);
        else if (*s == '"') fputs("\\\"", f);
        else if (*s == '\n') fputs("\\n", f);
        else fputc(*s, f);
    }
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *donto_metrics_text(const donto_target_stats st[DONTO_TARGET_N], int have_rate, int64_t per_minute,
                         int have_con, const donto_contributor *con, size_t ncon) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    family(f, "donto_embed_items", "gauge", "Items per target by state (embedded, pending, leased).");
    static const char *states[] = {"embedded", "pending", "leased"};
    for (int t = 0; t < DONTO_TARGET_N; t++) {
        const int64_t v[3] = {st[t].embedded, st[t].pending, st[t].leased};
        for (int k = 0; k < 3; k++)
            fprintf(f, "donto_embed_items{target=\"%s\",state=\"%s\"} %" PRId64 "\n", donto_target_name((donto_target)t),
                    states[k], v[k]);
    }
    family(f, "donto_embed_target_items", "gauge", "Items per target, all states (embedded + pending + leased).");
    for (int t = 0; t < DONTO_TARGET_N; t++)
        fprintf(f, "donto_embed_target_items{target=\"%s\"} %" PRId64 "\n", donto_target_name((donto_target)t),
                st[t].total);
    if (have_rate) {
        family(f, "donto_embed_items_per_minute", "gauge", "Vectors stored in the last 60 seconds.");
        fprintf(f, "donto_embed_items_per_minute %" PRId64 "\n", per_minute);
    }
    if (have_con) {
        static const struct {
            const char *name, *type, *help;
        } fam[3] = {
            {"donto_embed_contributor_vectors_total", "counter", "Vectors accepted from a worker."},
            {"donto_embed_contributor_rejected_total", "counter", "Submitted items rejected, per worker."},
            {"donto_embed_contributor_last_seen_seconds", "gauge", "Unix time of a worker's last submit or report."},
        };
        for (int k = 0; k < 3; k++) {
            family(f, fam[k].name, fam[k].type, fam[k].help);
            for (size_t i = 0; i < ncon; i++) {
                fprintf(f, "%s{worker_id=\"", fam[k].name);
                donto_prom_label(f, con[i].worker_id);
                if (k == 0) fprintf(f, "\"} %" PRId64 "\n", con[i].total);
                else if (k == 1) fprintf(f, "\"} %" PRId64 "\n", con[i].rejected);
                else fprintf(f, "\"} %" PRId64 ".%03d\n", con[i].last_seen / 1000, (int)(con[i].last_seen % 1000));
            }
        }
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *donto_metrics_trust_text(const donto_token_info *tok, size_t ntok) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    static const struct {
        const char *name, *type, *help;
    } fam[5] = {
        {"donto_embed_token_suspended", "gauge", "1 when the token is suspended (docs/trust.md)."},
        {"donto_embed_token_checks_total", "counter", "The token's vectors the coordinator re-embedded to check."},
        {"donto_embed_token_checks_failed_total", "counter", "Of those, how many did not match."},
        {"donto_embed_token_withdrawn_total", "counter", "The token's vectors withdrawn at suspensions (items queued again)."},
        {"donto_embed_token_streak", "gauge", "Checks passed in a row since the token's last failure."},
    };
    for (int k = 0; k < 5; k++) {
        family(f, fam[k].name, fam[k].type, fam[k].help);
        for (size_t i = 0; i < ntok; i++) {
            const donto_trust *t = &tok[i].trust;
            const int64_t v[5] = {t->suspended, t->checks, t->failed, t->withdrawn, t->streak};
            fprintf(f, "%s{token=\"", fam[k].name);
            donto_prom_label(f, tok[i].name);
            fprintf(f, "\",role=\"%s\"} %" PRId64 "\n", donto_role_name(tok[i].role), v[k]);
        }
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
