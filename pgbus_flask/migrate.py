"""Versioned migrations from the ``.sql`` files in ``pgbus_flask/sql/migrations``.

Applying is idempotent and safe from several processes at once: one
PostgreSQL advisory lock serializes them, and applied versions are recorded
in ``pgbus_schema_migrations``. :func:`apply` runs them on a psycopg
connection (``flask pgbus migrate``); :func:`apply_with` is the same steps
inside a transaction someone else opened (an Alembic revision, see
:mod:`pgbus_flask.alembic`), so both paths apply and record versions alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from psycopg import Connection

from .db import Database
from .sql import statement

# The advisory lock key every migrating process takes ("pgbus-migrate").
MIGRATE_LOCK = 0x7067627573_01

#: Runs one statement (``params`` None: no placeholders, the text goes as it is) and
#: returns its rows ([] for a statement that returns none).
Execute = Callable[[str, Sequence[Any] | None], Sequence[Sequence[Any]]]


def migrations() -> list[tuple[str, str]]:
    """Every ``(version, sql)`` in order."""
    folder = resources.files("pgbus_flask") / "sql" / "migrations"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text(encoding="utf-8")) for f in files]


def schema_sql() -> str:
    return (resources.files("pgbus_flask") / "sql" / "schema.sql").read_text(encoding="utf-8")


def apply_with(execute: Execute, *, lock: bool = True) -> list[str]:
    """Apply the missing migrations through ``execute``, inside the caller's open
    transaction (they commit or roll back with it); returns the versions applied.

    The advisory lock is held until that transaction ends.
    """
    if lock:
        execute(statement("migrations_lock"), (MIGRATE_LOCK,))
    execute(statement("migrations_table"), None)
    done = {row[0] for row in execute(statement("migrations_applied"), None)}
    applied: list[str] = []
    for version, sql in migrations():
        if version in done:
            continue
        execute(sql, None)
        execute(statement("migration_done"), (version,))
        applied.append(version)
    return applied


def apply(conn: Connection, *, lock: bool = True) -> list[str]:
    """Apply the missing migrations on ``conn`` (autocommit); returns the versions applied."""

    def execute(query: str, params: Sequence[Any] | None) -> Sequence[Sequence[Any]]:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description is not None else []

    with conn.transaction():
        return apply_with(execute, lock=lock)


def migrate(db: Database) -> list[str]:
    with db.connection() as conn:
        return apply(conn)
