/* donto-accel: the substrate's migrations (donto's tables: statements,
 * predicates, entity symbols, memory chunks, arguments), each with its SQL
 * for SQLite and for PostgreSQL. The substrate owns its schema: the store
 * only applies the list (donto_store_apply_migrations) and records it as
 * ("substrate", version). Never edit one that has shipped: add the next. */
#include "substrate_int.h"

static const donto_migration SUBSTRATE_MIGRATIONS[] = {
    /* donto's tables. SQLite keeps tx_time as two columns (Unix ms;
     * tx_until NULL = open = live); PostgreSQL as a range, live =
     * upper_inf(tx_time), and retraction closes the range. Databases made
     * before the registry recorded this as the store's migration 10. */
    {1, "substrate",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE donto_statement (statement_id TEXT PRIMARY KEY, subject TEXT NOT NULL,"
          " predicate TEXT NOT NULL, object_iri TEXT, object_lit TEXT,"
          " context TEXT NOT NULL DEFAULT 'donto:default', tx_from INTEGER NOT NULL,"
          " tx_until INTEGER, valid_from TEXT, valid_until TEXT, flags INTEGER NOT NULL DEFAULT 0,"
          " CHECK ((object_iri IS NULL) <> (object_lit IS NULL)));"
          "CREATE INDEX donto_statement_subject ON donto_statement (subject);"
          "CREATE TABLE donto_predicate (iri TEXT PRIMARY KEY, label TEXT, description TEXT);"
          "CREATE TABLE donto_entity_symbol (symbol_id INTEGER PRIMARY KEY AUTOINCREMENT,"
          " iri TEXT NOT NULL UNIQUE, normalized_label TEXT, kind TEXT);"
          "CREATE TABLE donto_memory_chunk (chunk_id TEXT PRIMARY KEY, source TEXT,"
          " text TEXT NOT NULL, tx_from INTEGER NOT NULL, tx_until INTEGER);"
          "CREATE TABLE donto_argument (argument_id INTEGER PRIMARY KEY AUTOINCREMENT,"
          " source_statement_id TEXT NOT NULL REFERENCES donto_statement (statement_id),"
          " target_statement_id TEXT NOT NULL REFERENCES donto_statement (statement_id),"
          " relation TEXT NOT NULL CHECK (relation IN ('supports', 'rebuts', 'undercuts',"
          " 'undermines', 'qualifies')), strength REAL, tx_from INTEGER NOT NULL, tx_until INTEGER,"
          " UNIQUE (source_statement_id, target_statement_id, relation));"
          "CREATE INDEX donto_argument_target ON donto_argument (target_statement_id);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE donto_statement (statement_id UUID PRIMARY KEY, subject TEXT NOT NULL,"
          " predicate TEXT NOT NULL, object_iri TEXT, object_lit JSONB,"
          " context TEXT NOT NULL DEFAULT 'donto:default',"
          " tx_time TSTZRANGE NOT NULL DEFAULT tstzrange(now(), NULL), valid_time TSTZRANGE,"
          " flags INTEGER NOT NULL DEFAULT 0,"
          " CHECK ((object_iri IS NULL) <> (object_lit IS NULL)));"
          "CREATE INDEX donto_statement_subject ON donto_statement (subject);"
          /* Small (retracted rows only): enqueue's "not retracted since the
          * snapshot" check per batch probes this, not the whole table. */
          "CREATE INDEX donto_statement_retracted ON donto_statement (statement_id)"
          " WHERE NOT upper_inf(tx_time);"
          "CREATE TABLE donto_predicate (iri TEXT PRIMARY KEY, label TEXT, description TEXT);"
          "CREATE TABLE donto_entity_symbol (symbol_id BIGSERIAL PRIMARY KEY,"
          " iri TEXT NOT NULL UNIQUE, normalized_label TEXT, kind TEXT);"
          "CREATE TABLE donto_memory_chunk (chunk_id TEXT PRIMARY KEY, source TEXT,"
          " text TEXT NOT NULL, tx_time TSTZRANGE NOT NULL DEFAULT tstzrange(now(), NULL));"
          "CREATE INDEX donto_memory_chunk_retracted ON donto_memory_chunk (chunk_id)"
          " WHERE NOT upper_inf(tx_time);"
          "CREATE TABLE donto_argument (argument_id BIGSERIAL PRIMARY KEY,"
          " source_statement_id UUID NOT NULL REFERENCES donto_statement (statement_id),"
          " target_statement_id UUID NOT NULL REFERENCES donto_statement (statement_id),"
          " relation TEXT NOT NULL CHECK (relation IN ('supports', 'rebuts', 'undercuts',"
          " 'undermines', 'qualifies')), strength DOUBLE PRECISION,"
          " tx_time TSTZRANGE NOT NULL DEFAULT tstzrange(now(), NULL),"
          " UNIQUE (source_statement_id, target_statement_id, relation));"
          "CREATE INDEX donto_argument_target ON donto_argument (target_statement_id);"}},
    /* Arguments get a context, as statements have: who asserted them. The
     * sheaf export's self-feedback filter drops arguments (and statements)
     * whose context starts with "sheaf:" (written by a sheaf model). */
    {2, "argument context",
     {[DONTO_DB_SQLITE] =
          "ALTER TABLE donto_argument ADD COLUMN context TEXT NOT NULL DEFAULT 'donto:default';",
      [DONTO_DB_POSTGRES] =
          "ALTER TABLE donto_argument ADD COLUMN context TEXT NOT NULL DEFAULT 'donto:default';"}},
};

static const donto_migrations SUBSTRATE_SET = {
    "substrate", SUBSTRATE_MIGRATIONS, sizeof SUBSTRATE_MIGRATIONS / sizeof SUBSTRATE_MIGRATIONS[0]};

int donto_substrate_migrate(donto_store *s, donto_err *err) {
    if (donto_store_migrate(s, err)) return -1;
    return donto_store_apply_migrations(s, &SUBSTRATE_SET, err);
}

int donto_substrate_schema_check(donto_store *s, donto_err *err) {
    const donto_migrations *sets[2] = {&DONTO_STORE_MIGRATIONS, &SUBSTRATE_SET};
    return donto_store_schema_check(s, sets, 2, err);
}
