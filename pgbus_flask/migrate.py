"""Versioned migrations from the ``.sql`` files in ``pgbus_flask/sql/migrations``.

Applying is idempotent and safe from several processes at once: one
PostgreSQL advisory lock serializes them, and applied versions are recorded
in ``pgbus_schema_migrations``.
"""

from __future__ import annotations

from importlib import resources

from psycopg import Connection

from .db import Database

# The advisory lock key every migrating process takes ("pgbus-migrate").
MIGRATE_LOCK = 0x7067627573_01


def migrations() -> list[tuple[str, str]]:
    """Every ``(version, sql)`` in order."""
    folder = resources.files("pgbus_flask") / "sql" / "migrations"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text(encoding="utf-8")) for f in files]


def schema_sql() -> str:
    return (resources.files("pgbus_flask") / "sql" / "schema.sql").read_text(encoding="utf-8")


def apply(conn: Connection, *, lock: bool = True) -> list[str]:
    """Apply the missing migrations on ``conn`` (autocommit); returns the versions applied."""
    applied: list[str] = []
    with conn.transaction():
        if lock:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pgbus_schema_migrations"
            " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM pgbus_schema_migrations")}
        for version, sql in migrations():
            if version in done:
                continue
            conn.execute(sql.encode())
            conn.execute("INSERT INTO pgbus_schema_migrations (version) VALUES (%s)", (version,))
            applied.append(version)
    return applied


def migrate(db: Database) -> list[str]:
    with db.connection() as conn:
        return apply(conn)
