/* donto-accel: opening a command's database (src/cli/cli_db.h). */
#include "cli_db.h"

#include <stdio.h>
#include <string.h>

#include "donto/substrate.h"

void cli_db_shown(const char *url, char *out, size_t cap) {
    if (!url || !*url) url = DONTO_STORE_DEFAULT_URL;
    const char *scheme = strstr(url, "://");
    const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *colon = at ? memchr(scheme + 3, ':', (size_t)(at - (scheme + 3))) : NULL;
    if (!colon) {
        snprintf(out, cap, "%s", url);
        return;
    }
    snprintf(out, cap, "%.*s%s", (int)(colon - url), url, at); /* user@host: no password */
}

int cli_open_db(const char *cmd, const char *url, int what, donto_store **s) {
    donto_err err = {0};
    char shown[1024];
    cli_db_shown(url, shown, sizeof shown);
    int serve = !strcmp(cmd, "serve");
    *s = NULL;
    if (donto_store_open_existing(url, s, &err)) {
        if (donto_err_code(&err) == DONTO_E_NOT_FOUND)
            fprintf(stderr,
                    "donto-embed %s: %s (a mistyped --db? %s`donto-embed migrate --db %s` makes a new, empty "
                    "database; `make run` keeps its data in ./donto.db)\n",
                    cmd, err.msg, serve ? "`serve --migrate` or " : "", shown);
        else
            fprintf(stderr, "donto-embed %s: %s\n", cmd, err.msg);
        return -1;
    }
    int rc = what == CLI_DB_SUBSTRATE ? donto_substrate_schema_check(*s, &err) : donto_store_schema_check(*s, NULL, 0, &err);
    if (rc) {
        if (donto_err_code(&err) == DONTO_E_SCHEMA)
            fprintf(stderr, "donto-embed %s: database %s %s: migrate it with %s`donto-embed migrate --db %s`\n", cmd,
                    shown, err.msg, serve ? "`serve --migrate` or " : "", shown);
        else
            fprintf(stderr, "donto-embed %s: %s: %s\n", cmd, shown, err.msg);
        donto_store_close(*s);
        *s = NULL;
        return -1;
    }
    return 0;
}

int cli_set_vectors(const char *cmd, int layout, donto_store **s) {
    donto_err err = {0};
    if (layout == DONTO_VECTORS_OWN || donto_store_set_vectors(*s, (donto_vectors_layout)layout, &err) == 0) return 0;
    fprintf(stderr, "donto-embed %s: --vectors %s: %s\n", cmd, donto_vectors_layout_names[layout], err.msg);
    donto_store_close(*s);
    *s = NULL;
    return donto_err_code(&err) == DONTO_E_INVALID ? 2 : 1;
}

int cli_open_db_vectors(const char *cmd, const char *url, int what, int layout, donto_store **s) {
    if (cli_open_db(cmd, url, what, s)) return 1;
    int rc = cli_set_vectors(cmd, layout, s);
    if (rc) return rc;
    donto_err err = {0};
    if (donto_store_vectors_check(*s, &err) == 0) return 0;
    char shown[1024];
    cli_db_shown(url, shown, sizeof shown);
    if (donto_err_code(&err) == DONTO_E_SCHEMA)
        fprintf(stderr, "donto-embed %s: %s: make it with `donto-embed migrate --vectors donto --db %s`\n", cmd,
                err.msg, shown);
    else
        fprintf(stderr, "donto-embed %s: %s\n", cmd, err.msg);
    donto_store_close(*s);
    *s = NULL;
    return 1;
}
