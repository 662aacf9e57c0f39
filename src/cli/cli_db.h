/* donto-accel: how the commands open the database they are given (not a
 * public header). A command that reads a database never creates one: a
 * missing SQLite file or an unmigrated schema is one clear line that says
 * how to make or migrate it (issue 16). */
#ifndef DONTO_CLI_DB_H
#define DONTO_CLI_DB_H

#include "donto/store.h"

enum {
    CLI_DB_STORE = 0,     /* the store's tables suffice (status, token, serve) */
    CLI_DB_SUBSTRATE = 1, /* the substrate's too (enqueue, retract, recall) */
};

/* Open url for command cmd ("status", ...), existing and migrated (what:
 * CLI_DB_*); on failure print "donto-embed CMD: ..." with the remedy
 * (serve's mentions --migrate) and return -1 with *s NULL. */
int cli_open_db(const char *cmd, const char *url, int what, donto_store **s);

/* url as it may be shown: a PostgreSQL URL without its password. */
void cli_db_shown(const char *url, char *out, size_t cap);

#endif
