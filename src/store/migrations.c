/* donto-accel: the store's own migrations (queue, vectors, tokens, reports,
 * contributors), each with its SQL for SQLite and for PostgreSQL side by
 * side, so that a schema change is one entry in one file. Applied in order by
 * donto_store_migrate() through the backend's migrate method, which records
 * them in donto_migrations as ("store", version). Never edit one that has
 * shipped: add the next. Other modules' tables have their own lists (the
 * substrate's: src/substrate/migrations.c). */
#include "store_int.h"

static const donto_migration STORE_MIGRATIONS[] = {
    /* lease_expires is 0 (not NULL) for items never leased or released, so
     * "ready" is one range, lease_expires <= now, served by one index walk
     * that stops after n rows (expired leases are ready with no reclaim).
     * SQLite has no sequences: lease_seq is a one-row table there. */
    {1, "queue and vectors",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE queue (target INTEGER NOT NULL, item_id TEXT NOT NULL, model TEXT NOT NULL,"
          " text TEXT NOT NULL, lease_owner TEXT, lease_id INTEGER,"
          " lease_expires INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,"
          " PRIMARY KEY (target, item_id, model));"
          "CREATE INDEX queue_ready ON queue (lease_expires);"
          "CREATE INDEX queue_target_ready ON queue (target, lease_expires);"
          "CREATE TABLE vectors (target INTEGER NOT NULL, item_id TEXT NOT NULL, model TEXT NOT NULL,"
          " dims INTEGER NOT NULL, vec BLOB NOT NULL, contributor TEXT NOT NULL, lease_id INTEGER,"
          " created INTEGER NOT NULL, PRIMARY KEY (target, item_id, model));"
          "CREATE INDEX vectors_created ON vectors (created);"
          "CREATE TABLE models (name TEXT PRIMARY KEY, dims INTEGER NOT NULL);"
          "CREATE TABLE lease_seq (id INTEGER PRIMARY KEY CHECK (id = 1), next INTEGER NOT NULL);"
          "INSERT INTO lease_seq VALUES (1, 1);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE queue (target SMALLINT NOT NULL, item_id TEXT NOT NULL, model TEXT NOT NULL,"
          " text TEXT NOT NULL, lease_owner TEXT, lease_id BIGINT,"
          " lease_expires BIGINT NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,"
          " PRIMARY KEY (target, item_id, model));"
          "CREATE INDEX queue_ready ON queue (lease_expires);"
          "CREATE INDEX queue_target_ready ON queue (target, lease_expires);"
          "CREATE SEQUENCE lease_seq;"
          "CREATE TABLE vectors (target SMALLINT NOT NULL, item_id TEXT NOT NULL, model TEXT NOT NULL,"
          " dims INTEGER NOT NULL, vec BYTEA NOT NULL, contributor TEXT NOT NULL, lease_id BIGINT,"
          " created BIGINT NOT NULL, PRIMARY KEY (target, item_id, model));"
          "CREATE INDEX vectors_created ON vectors (created);"
          "CREATE TABLE models (name TEXT PRIMARY KEY, dims INTEGER NOT NULL);"}},
    {2, "tokens",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE tokens (name TEXT PRIMARY KEY, hash BLOB NOT NULL UNIQUE,"
          " role TEXT NOT NULL CHECK (role IN ('contributor', 'admin')),"
          " created INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE tokens (name TEXT PRIMARY KEY, hash BYTEA NOT NULL UNIQUE,"
          " role TEXT NOT NULL CHECK (role IN ('contributor', 'admin')),"
          " created BIGINT NOT NULL, revoked SMALLINT NOT NULL DEFAULT 0);"}},
    {3, "reports and contributors",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE reports (id INTEGER PRIMARY KEY AUTOINCREMENT, worker_id TEXT NOT NULL,"
          " kind TEXT NOT NULL, message TEXT NOT NULL, created INTEGER NOT NULL);"
          "CREATE INDEX reports_created ON reports (created);"
          "CREATE TABLE contributors (worker_id TEXT PRIMARY KEY, total INTEGER NOT NULL DEFAULT 0,"
          " rejected INTEGER NOT NULL DEFAULT 0, last_seen INTEGER NOT NULL DEFAULT 0);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE reports (id BIGSERIAL PRIMARY KEY, worker_id TEXT NOT NULL,"
          " kind TEXT NOT NULL, message TEXT NOT NULL, created BIGINT NOT NULL);"
          "CREATE INDEX reports_created ON reports (created);"
          "CREATE TABLE contributors (worker_id TEXT PRIMARY KEY, total BIGINT NOT NULL DEFAULT 0,"
          " rejected BIGINT NOT NULL DEFAULT 0, last_seen BIGINT NOT NULL DEFAULT 0);"}},
    {4, "throughput per contributor and minute",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE contributor_minutes (worker_id TEXT NOT NULL, minute INTEGER NOT NULL,"
          " n INTEGER NOT NULL, PRIMARY KEY (worker_id, minute));"
          "CREATE INDEX contributor_minutes_minute ON contributor_minutes (minute);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE contributor_minutes (worker_id TEXT NOT NULL, minute BIGINT NOT NULL,"
          " n BIGINT NOT NULL, PRIMARY KEY (worker_id, minute));"
          "CREATE INDEX contributor_minutes_minute ON contributor_minutes (minute);"}},
    /* Recall reads a target+model's vectors in (created, item_id) order, in
     * pages, and counts those past a high-water mark. */
    {5, "recall index",
     {[DONTO_DB_SQLITE] =
          "CREATE INDEX vectors_recall ON vectors (target, model, created, item_id);",
      [DONTO_DB_POSTGRES] =
          "CREATE INDEX vectors_recall ON vectors (target, model, created, item_id);"}},
    /* Every lease rewrites lease_expires, so each index on it costs one
     * entry per leased row: leases walk (target, lease_expires) only. */
    {6, "one ready index",
     {[DONTO_DB_SQLITE] =
          "DROP INDEX IF EXISTS queue_ready;",
      [DONTO_DB_POSTGRES] =
          "DROP INDEX IF EXISTS queue_ready;"}},
    /* Contributor trust (docs/trust.md). A vector keeps the token that sent
     * it, whether the coordinator verified it, and its text, so that a
     * withdrawn vector's item can be queued again (the queue row is gone by
     * then). Vectors written before this migration have no token and no
     * text: they are never withdrawn, and count as unverified. Reports name
     * their token. Tokens gain the reader role (SQLite cannot alter a CHECK:
     * the table is rebuilt) and a trust record. */
    {7, "contributor trust",
     {[DONTO_DB_SQLITE] =
          "ALTER TABLE vectors ADD COLUMN token TEXT;"
          "ALTER TABLE vectors ADD COLUMN verified INTEGER NOT NULL DEFAULT 0;"
          "ALTER TABLE vectors ADD COLUMN text TEXT;"
          "CREATE INDEX vectors_token ON vectors (token, verified) WHERE token IS NOT NULL;"
          "ALTER TABLE reports ADD COLUMN token TEXT;"
          "CREATE TABLE tokens_v7 (name TEXT PRIMARY KEY, hash BLOB NOT NULL UNIQUE,"
          " role TEXT NOT NULL CHECK (role IN ('contributor', 'reader', 'admin')),"
          " created INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,"
          " suspended INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',"
          " streak INTEGER NOT NULL DEFAULT 0, checks INTEGER NOT NULL DEFAULT 0,"
          " failed INTEGER NOT NULL DEFAULT 0, withdrawn INTEGER NOT NULL DEFAULT 0,"
          " suspended_at INTEGER NOT NULL DEFAULT 0);"
          "INSERT INTO tokens_v7 (name, hash, role, created, revoked)"
          " SELECT name, hash, role, created, revoked FROM tokens;"
          "DROP TABLE tokens;"
          "ALTER TABLE tokens_v7 RENAME TO tokens;",
      [DONTO_DB_POSTGRES] =
          "ALTER TABLE vectors ADD COLUMN token TEXT, ADD COLUMN verified SMALLINT NOT NULL DEFAULT 0,"
          " ADD COLUMN text TEXT;"
          "CREATE INDEX vectors_token ON vectors (token, verified) WHERE token IS NOT NULL;"
          "ALTER TABLE reports ADD COLUMN token TEXT;"
          "ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_role_check,"
          " ADD CONSTRAINT tokens_role_check CHECK (role IN ('contributor', 'reader', 'admin')),"
          " ADD COLUMN suspended SMALLINT NOT NULL DEFAULT 0, ADD COLUMN reason TEXT NOT NULL DEFAULT '',"
          " ADD COLUMN streak BIGINT NOT NULL DEFAULT 0, ADD COLUMN checks BIGINT NOT NULL DEFAULT 0,"
          " ADD COLUMN failed BIGINT NOT NULL DEFAULT 0, ADD COLUMN withdrawn BIGINT NOT NULL DEFAULT 0,"
          " ADD COLUMN suspended_at BIGINT NOT NULL DEFAULT 0;"}},
    /* Tokens gain the analyst role: the sheaf models' routes (/sheaf/,
     * docs/sheaf-serving.md) and nothing of the work queue's. SQLite cannot
     * alter a CHECK: the table is rebuilt with every column of 7. */
    {8, "analyst role",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE tokens_v8 (name TEXT PRIMARY KEY, hash BLOB NOT NULL UNIQUE,"
          " role TEXT NOT NULL CHECK (role IN ('contributor', 'reader', 'analyst', 'admin')),"
          " created INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0,"
          " suspended INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',"
          " streak INTEGER NOT NULL DEFAULT 0, checks INTEGER NOT NULL DEFAULT 0,"
          " failed INTEGER NOT NULL DEFAULT 0, withdrawn INTEGER NOT NULL DEFAULT 0,"
          " suspended_at INTEGER NOT NULL DEFAULT 0);"
          "INSERT INTO tokens_v8 SELECT name, hash, role, created, revoked, suspended, reason, streak, checks,"
          " failed, withdrawn, suspended_at FROM tokens;"
          "DROP TABLE tokens;"
          "ALTER TABLE tokens_v8 RENAME TO tokens;",
      [DONTO_DB_POSTGRES] =
          "ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_role_check,"
          " ADD CONSTRAINT tokens_role_check CHECK (role IN ('contributor', 'reader', 'analyst', 'admin'));"}},
    /* Fleet-wide counters (docs/fleet.md): event counts that every
     * coordinator sharing the database adds to and reads, so /embed/stats
     * shows the fleet's figures whichever coordinator answers. */
    {9, "fleet counters",
     {[DONTO_DB_SQLITE] = "CREATE TABLE donto_counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);",
      [DONTO_DB_POSTGRES] = "CREATE TABLE donto_counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL DEFAULT 0);"}},
};

const donto_migrations DONTO_STORE_MIGRATIONS = {
    "store", STORE_MIGRATIONS, sizeof STORE_MIGRATIONS / sizeof STORE_MIGRATIONS[0]};

/* donto's own vector table, exactly as donto's migration 0033_vectors.sql
 * makes it (columns, CHECK, UNIQUE key, its two indexes; not its functions),
 * for a database that has none yet: IF NOT EXISTS throughout, so a
 * donto_vector that donto made is never altered. A set of its own, applied
 * by donto_store_migrate() only for a handle set to DONTO_VECTORS_DONTO, so
 * that a database that keeps its vectors in `vectors` never gets the table.
 * PostgreSQL only (gen_random_uuid() is built in from PostgreSQL 13 on);
 * SQLite refuses the layout before migrating, its entry is a no-op. */
static const donto_migration DONTO_VECTOR_LIST[] = {
    {1, "donto_vector (donto 0033) when absent",
     {[DONTO_DB_SQLITE] = "SELECT 1;",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE IF NOT EXISTS donto_vector ("
          " vector_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
          " subject_type text NOT NULL CHECK (subject_type IN ('statement', 'document', 'revision', 'span',"
          " 'annotation')),"
          " subject_id uuid NOT NULL,"
          " model_id text NOT NULL,"
          " model_version text,"
          " dimensions int NOT NULL,"
          " embedding float4[] NOT NULL,"
          " created_at timestamptz NOT NULL DEFAULT now(),"
          " UNIQUE (subject_type, subject_id, model_id));"
          "CREATE INDEX IF NOT EXISTS donto_vector_subject_idx ON donto_vector (subject_type, subject_id);"
          "CREATE INDEX IF NOT EXISTS donto_vector_model_idx ON donto_vector (model_id);"}},
};

const donto_migrations DONTO_VECTOR_MIGRATIONS = {
    "donto_vector", DONTO_VECTOR_LIST, sizeof DONTO_VECTOR_LIST / sizeof DONTO_VECTOR_LIST[0]};
