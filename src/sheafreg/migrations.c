/* donto-accel: the sheaf model registry's migrations (module "sheaf_registry"),
 * SQLite and PostgreSQL side by side, applied by donto_store_apply_migrations
 * and recorded as ("sheaf_registry", version). Never edit one that has
 * shipped: add the next.
 *
 * Times: SQLite keeps Unix milliseconds (INTEGER), PostgreSQL TIMESTAMPTZ.
 * JSON: TEXT in SQLite, JSONB in PostgreSQL (checked on the way in).
 * "At most one active model per task" is the partial unique index
 * donto_sheaf_model_one_active, which both engines enforce, so even a hand
 * written second UPDATE ... SET state = 'active' is refused. */
#include "donto/sheaf_registry.h"

static const donto_migration REGISTRY_MIGRATIONS[] = {
    {1, "sheaf model registry",
     {[DONTO_DB_SQLITE] =
          "CREATE TABLE donto_sheaf_model (model_id INTEGER PRIMARY KEY AUTOINCREMENT,"
          " name TEXT NOT NULL UNIQUE, task TEXT NOT NULL, family TEXT NOT NULL,"
          " hparams TEXT NOT NULL, checkpoint BLOB NOT NULL, metrics TEXT, export_digest TEXT,"
          " parity TEXT NOT NULL, created_at INTEGER NOT NULL,"
          " state TEXT NOT NULL DEFAULT 'candidate' CHECK (state IN ('candidate', 'active', 'retired')),"
          " activated_at INTEGER);"
          "CREATE UNIQUE INDEX donto_sheaf_model_one_active ON donto_sheaf_model (task) WHERE state = 'active';"
          "CREATE TABLE donto_sheaf_score (model_id INTEGER NOT NULL REFERENCES donto_sheaf_model (model_id),"
          " task TEXT NOT NULL, item TEXT NOT NULL, item2 TEXT, class TEXT NOT NULL,"
          " probability REAL NOT NULL, scored_at INTEGER NOT NULL);"
          "CREATE INDEX donto_sheaf_score_item ON donto_sheaf_score (task, item, item2);"
          "CREATE TABLE donto_sheaf_score_run (run_id INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL,"
          " model_id INTEGER NOT NULL REFERENCES donto_sheaf_model (model_id), watermark INTEGER NOT NULL,"
          " rows INTEGER NOT NULL DEFAULT 0, finished_at INTEGER);",
      [DONTO_DB_POSTGRES] =
          "CREATE TABLE donto_sheaf_model (model_id BIGSERIAL PRIMARY KEY,"
          " name TEXT NOT NULL UNIQUE, task TEXT NOT NULL, family TEXT NOT NULL,"
          " hparams JSONB NOT NULL, checkpoint BYTEA NOT NULL, metrics JSONB, export_digest TEXT,"
          " parity JSONB NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
          " state TEXT NOT NULL DEFAULT 'candidate' CHECK (state IN ('candidate', 'active', 'retired')),"
          " activated_at TIMESTAMPTZ);"
          "CREATE UNIQUE INDEX donto_sheaf_model_one_active ON donto_sheaf_model (task) WHERE state = 'active';"
          "CREATE TABLE donto_sheaf_score (model_id BIGINT NOT NULL REFERENCES donto_sheaf_model (model_id),"
          " task TEXT NOT NULL, item TEXT NOT NULL, item2 TEXT, class TEXT NOT NULL,"
          " probability DOUBLE PRECISION NOT NULL, scored_at TIMESTAMPTZ NOT NULL DEFAULT now());"
          "CREATE INDEX donto_sheaf_score_item ON donto_sheaf_score (task, item, item2);"
          "CREATE TABLE donto_sheaf_score_run (run_id BIGSERIAL PRIMARY KEY, task TEXT NOT NULL,"
          " model_id BIGINT NOT NULL REFERENCES donto_sheaf_model (model_id), watermark TIMESTAMPTZ NOT NULL,"
          " rows BIGINT NOT NULL DEFAULT 0, finished_at TIMESTAMPTZ);"}},
};

const donto_migrations DONTO_SHEAF_REGISTRY_MIGRATIONS = {
    "sheaf_registry", REGISTRY_MIGRATIONS, sizeof REGISTRY_MIGRATIONS / sizeof REGISTRY_MIGRATIONS[0]};

int donto_sheaf_registry_migrate(donto_store *s, donto_err *err) {
    if (donto_store_migrate(s, err)) return -1;
    return donto_store_apply_migrations(s, &DONTO_SHEAF_REGISTRY_MIGRATIONS, err);
}

int donto_sheaf_registry_schema_check(donto_store *s, donto_err *err) {
    const donto_migrations *sets[1] = {&DONTO_SHEAF_REGISTRY_MIGRATIONS};
    return donto_store_schema_check(s, sets, 1, err);
}
