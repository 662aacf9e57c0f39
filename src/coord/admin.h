/*
 * donto-accel coordinator: the admin surface (GET /embed/metrics and
 * GET /embed/admin). Pure functions and constants; server.c does the HTTP.
 */
#ifndef DONTO_COORD_ADMIN_H
#define DONTO_COORD_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "donto/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The admin page: one self-contained HTML document (inline CSS and JS, no
 * external resources), src/coord/admin_page.c. */
extern const char donto_admin_page[];

/* Write s as a Prometheus label value (without the quotes): backslash,
 * double quote and line feed escaped as \\, \" and \n. */
void donto_prom_label(FILE *f, const char *s);

/* The queue's figures in Prometheus text exposition format 0.0.4 (see
 * docs/protocol.md); have_rate / have_con == 0 leave those families out.
 * Heap string (free), NULL when out of memory. */
char *donto_metrics_text(const donto_target_stats st[DONTO_TARGET_N], int have_rate, int64_t per_minute,
                         int have_con, const donto_contributor *con, size_t ncon);

/* Each token's trust record (docs/trust.md), in the same format. Heap
 * string (free), NULL when out of memory. */
char *donto_metrics_trust_text(const donto_token_info *tok, size_t ntok);

#ifdef __cplusplus
}
#endif
#endif
