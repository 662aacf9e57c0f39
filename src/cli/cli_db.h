/* donto-accel: how the commands open the database they are given (not a
 * public header). A command that reads a database never creates one: a
 * missing SQLite file or an unmigrated schema is one clear line that says
 * how to make or migrate it (issue 16). */
#ifndef DONTO_CLI_DB_H
#define DONTO_CLI_DB_H

#include "donto/opt.h"
#include "donto/store.h"

enum {
    CLI_DB_STORE = 0,     /* the store's tables suffice (status, token, serve) */
    CLI_DB_SUBSTRATE = 1, /* the substrate's too (enqueue, retract, recall) */
};

/* Open url for command cmd ("status", ...), existing and migrated (what:
 * CLI_DB_*); on failure print "donto-embed CMD: ..." with the remedy
 * (serve's mentions --migrate) and return -1 with *s NULL. */
int cli_open_db(const char *cmd, const char *url, int what, donto_store **s);

/* cli_open_db for a command that reads or writes vectors, with the store's
 * vectors layout (store.h, --vectors): also sets it on the handle and
 * checks donto_vector under DONTO_VECTORS_DONTO. Returns the exit code: 0
 * (opened), 2 when the database cannot keep that layout (SQLite: the message
 * names PostgreSQL), 1 otherwise (printed). */
int cli_open_db_vectors(const char *cmd, const char *url, int what, int layout, donto_store **s);
/* Set the layout on a handle the command opened itself (migrate, serve
 * --migrate); the same exit codes, *s closed and NULL on failure. */
int cli_set_vectors(const char *cmd, int layout, donto_store **s);

/* The --vectors option of every command that opens a store with vectors. */
#define CLI_VECTORS_OPT(dest)                                                                                  \
    {DONTO_OPT_CHOICE, "vectors", 0, (dest), .choices = donto_vectors_layout_names, .metavar = "own|donto",     \
     .help = "where the vectors live: own (default: the store's table vectors) | donto\n"                      \
             "(PostgreSQL: claims' embeddings in donto's donto_vector, docs/substrate.md)"}

/* url as it may be shown: a PostgreSQL URL without its password. */
void cli_db_shown(const char *url, char *out, size_t cap);

#endif
