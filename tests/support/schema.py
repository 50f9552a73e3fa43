"""The schema as PostgreSQL's catalogs describe it: columns, indexes, constraints, triggers, functions."""

from __future__ import annotations

from typing import Any

import psycopg

CATALOG = {
    "columns": """SELECT table_name, column_name, data_type, is_nullable, column_default
                  FROM information_schema.columns WHERE table_schema = 'public' AND table_name LIKE 'pgbus%%'
                  AND table_name <> 'pgbus_schema_migrations' ORDER BY 1, 2""",
    "indexes": """SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
                  AND tablename LIKE 'pgbus%%' AND tablename <> 'pgbus_schema_migrations' ORDER BY 1, 2""",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
                      WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text LIKE 'pgbus%%'
                      AND conrelid::regclass::text <> 'pgbus_schema_migrations' ORDER BY 1, 2""",
    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
                   WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE 'pgbus%%' ORDER BY 1, 2""",
    "functions": """SELECT proname, pg_get_functiondef(oid) FROM pg_proc
                    WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'pgbus%%' ORDER BY 1""",
}


def catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(query).fetchall() for name, query in CATALOG.items()}
