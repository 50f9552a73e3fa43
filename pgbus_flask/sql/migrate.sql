-- Applying the migrations of pgbus_flask/sql/migrations (pgbus_flask/migrate.py), inside the
-- caller's transaction: through psycopg, or through Alembic's connection.

-- name: migrations_lock
-- Hold the migrations' advisory lock (%s: its key) until the transaction ends.
SELECT pg_advisory_xact_lock(%s);

-- name: migrations_table
-- The table of the migrations applied, made the first time.
CREATE TABLE IF NOT EXISTS pgbus_schema_migrations
    (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());

-- name: migrations_applied
-- The versions of the migrations applied.
SELECT version FROM pgbus_schema_migrations;

-- name: migration_done
-- Record migration %s as applied.
INSERT INTO pgbus_schema_migrations (version) VALUES (%s);
